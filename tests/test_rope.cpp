// test_rope.cpp - plain tg_rope (angles from base) against an oracle in long
// double: INTERLEAVED and NEOX pairs, partial n_rot (the dims past it copied),
// positions per (token, sequence) up to INT32_MAX and below 0, every layout.
#include "op_util.h"

using namespace opu;

namespace {

// theta_i = p * base^(-2i/n_rot); pair i is dims (2i, 2i+1) or (i, i + n_rot/2)
std::vector<double> rope_ref(const shape &ne, const std::vector<double> &x, const std::vector<double> &pos,
                             int n_rot, tg_rope_mode mode, float base) {
    std::vector<double> out(x.size());
    const int half = n_rot / 2;
    for (int64_t b = 0; b < ne[3]; b++)
        for (int64_t t = 0; t < ne[2]; t++)
            for (int64_t h = 0; h < ne[1]; h++) {
                const size_t row = (size_t)flat(ne, 0, h, t, b);
                const long double p = pos[(size_t)(t + ne[2] * b)];
                for (int64_t d = n_rot; d < ne[0]; d++) out[row + d] = x[row + d];
                for (int i = 0; i < half; i++) {
                    const long double theta = p * powl((long double)base, -2.0L * i / n_rot);
                    const long double c = cosl(theta), s = sinl(theta);
                    const int e = mode == TG_ROPE_NEOX ? i : 2 * i, o = mode == TG_ROPE_NEOX ? i + half : 2 * i + 1;
                    out[row + e] = (double)(x[row + e] * c - x[row + o] * s);
                    out[row + o] = (double)(x[row + e] * s + x[row + o] * c);
                }
            }
    return out;
}

tg_rope_params params(int n_rot, tg_rope_mode mode, float base) {
    tg_rope_params p = tg_rope_default_params(n_rot);
    p.mode = mode;
    p.base = base;
    return p;
}

struct rope_dims {
    int64_t D;
    int n_rot;
};
const rope_dims k_dims[] = {{8, 8}, {12, 8}, {6, 6}, {10, 2}, {64, 48}};

class Rope : public ::testing::TestWithParam<tg_rope_mode> {};

TEST_P(Rope, MatchesOracle) {
    const tg_rope_mode mode = GetParam();
    for (uint32_t seed : {1u, 2u})
        for (const rope_dims &rd : k_dims)
            for (int li = 0; li < 4; li++)
                for (float base : {10000.0f, 1e6f}) {
                    const lay la = k_all_lays[li], lp = k_all_lays[(li + seed) % 4];
                    SCOPED_TRACE("D " + std::to_string(rd.D) + " n_rot " + std::to_string(rd.n_rot) + " " +
                                 lay_name(la) + ", positions " + lay_name(lp) + ", base " + std::to_string(base) +
                                 ", seed " + std::to_string(seed));
                    std::mt19937 rng(seed * 7 + li);
                    harness h(li % 2 ? 3 : 2);
                    const shape ne = {rd.D, 3, 4, 2};
                    std::vector<double> x, pos = rand_vals(rng, TG_TYPE_I32, 8, 0.0, 4096.0);
                    pos[1] = 0;
                    tg_tensor *a = h.rand_input(TG_TYPE_F32, ne, la, rng, &x, -2.0, 2.0);
                    tg_tensor *tp = h.input(TG_TYPE_I32, {4, 2, 1, 1}, lp, pos);
                    const tg_rope_params rp = params(rd.n_rot, mode, base);
                    tg_tensor *y = tg_rope(h.ctx, a, tp, &rp);
                    ASSERT_TRUE(y) << tg_last_error();
                    EXPECT_EQ(ne, shape_of(y));
                    EXPECT_TRUE(close(h.run(y, li != 3), rope_ref(ne, x, pos, rd.n_rot, mode, base), 1e-6));
                }
}

// Large positions (and negative ones, and INT32 extremes): angles far past
// 2 pi still match, with no NaN.
TEST_P(Rope, LargePositions) {
    const tg_rope_mode mode = GetParam();
    const std::vector<double> pos = {0, 1, 4095, 65536, 1000003, 123456789, (double)INT32_MAX, -7,
                                     (double)INT32_MIN, 500000, 2097152, 31};
    for (const rope_dims &rd : k_dims) {
        SCOPED_TRACE("D " + std::to_string(rd.D) + " n_rot " + std::to_string(rd.n_rot));
        std::mt19937 rng(5);
        harness h;
        const shape ne = {rd.D, 2, 6, 2};
        std::vector<double> x;
        tg_tensor *a = h.rand_input(TG_TYPE_F32, ne, lay::permuted, rng, &x);
        tg_tensor *tp = h.input(TG_TYPE_I32, {6, 2, 1, 1}, lay::strided, pos);
        for (float base : {10000.0f, 500000.0f}) {
            const tg_rope_params rp = params(rd.n_rot, mode, base);
            EXPECT_TRUE(close(h.run(tg_rope(h.ctx, a, tp, &rp)), rope_ref(ne, x, pos, rd.n_rot, mode, base), 1e-6))
                << base;
        }
    }
}

// Rotation by p then by -p is the identity, and position 0 changes nothing:
// properties that do not lean on the oracle.
TEST_P(Rope, InverseAndIdentity) {
    const tg_rope_mode mode = GetParam();
    std::mt19937 rng(9);
    harness h;
    const shape ne = {16, 2, 3, 1};
    std::vector<double> x, pos = {0, 17, 300000};
    std::vector<double> neg = {0, -17, -300000};
    tg_tensor *a = h.rand_input(TG_TYPE_F32, ne, lay::contig, rng, &x);
    tg_tensor *tp = h.input(TG_TYPE_I32, {3, 1, 1, 1}, lay::contig, pos);
    tg_tensor *tn = h.input(TG_TYPE_I32, {3, 1, 1, 1}, lay::contig, neg);
    const tg_rope_params rp = params(12, mode, 10000.0f);
    const std::vector<double> back = h.run(tg_rope(h.ctx, tg_rope(h.ctx, a, tp, &rp), tn, &rp));
    EXPECT_TRUE(close(back, x, 1e-6));
    const std::vector<double> once = h.run(tg_rope(h.ctx, a, tp, &rp));
    ASSERT_EQ(x.size(), once.size());
    for (size_t i = 0; i < 32; i++) EXPECT_EQ(x[i], once[i]) << "position 0 moved element " << i;
    for (size_t i = 32; i < x.size(); i++) {
        if (i % 16 < 12) continue;
        EXPECT_EQ(x[i], once[i]) << "dim past n_rot changed, element " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, Rope, ::testing::Values(TG_ROPE_INTERLEAVED, TG_ROPE_NEOX),
                         [](const ::testing::TestParamInfo<tg_rope_mode> &i) {
                             return std::string(i.param == TG_ROPE_NEOX ? "neox" : "interleaved");
                         });

// The two modes pair different dims: on the same input they differ.
TEST(Rope, ModesPairDifferentDims) {
    std::mt19937 rng(2);
    harness h;
    const shape ne = {8, 1, 2, 1};
    std::vector<double> x, pos = {3, 11};
    tg_tensor *a = h.rand_input(TG_TYPE_F32, ne, lay::contig, rng, &x);
    tg_tensor *tp = h.input(TG_TYPE_I32, {2, 1, 1, 1}, lay::contig, pos);
    const tg_rope_params pi = params(8, TG_ROPE_INTERLEAVED, 10000.0f), pn = params(8, TG_ROPE_NEOX, 10000.0f);
    const std::vector<double> oi = h.run(tg_rope(h.ctx, a, tp, &pi)), on = h.run(tg_rope(h.ctx, a, tp, &pn));
    EXPECT_GT(rel_err(oi, on), 1e-2);
}

TEST(RopeMisuse, ParamsShapesTypesAndNulls) {
    harness h;
    tg_tensor *a = tg_new_tensor_4d(h.ctx, TG_TYPE_F32, 8, 2, 3, 2);
    tg_tensor *p = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 3, 2);
    const tg_rope_params ok = tg_rope_default_params(8);
    EXPECT_EQ(TG_ROPE_INTERLEAVED, ok.mode);
    EXPECT_EQ(10000.0f, ok.base);
    EXPECT_TRUE(tg_rope(h.ctx, a, p, &ok)) << tg_last_error();
    const char *R = "[rope]";
    for (int n_rot : {3, 10, 0, -2, 1}) {
        const tg_rope_params bad = params(n_rot, TG_ROPE_NEOX, 10000.0f);
        EXPECT_TRUE(fails(tg_rope(h.ctx, a, p, &bad), R)) << n_rot;
    }
    for (float base : {0.0f, -1.0f, NAN, INFINITY}) {
        const tg_rope_params bad = params(8, TG_ROPE_INTERLEAVED, base);
        EXPECT_TRUE(fails(tg_rope(h.ctx, a, p, &bad), R)) << base;
    }
    tg_rope_params bad_mode = ok;
    const int seven = 7;  // as a C caller may store it (a cast to the enum would be UB in C++)
    static_assert(sizeof(bad_mode.mode) == sizeof(int), "int-sized enum");
    memcpy(&bad_mode.mode, &seven, sizeof(seven));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, p, &bad_mode), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 2, 2), &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 3, 1), &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, tg_new_tensor_3d(h.ctx, TG_TYPE_I32, 3, 2, 2), &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 3, 2), &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, tg_new_tensor_4d(h.ctx, TG_TYPE_F16, 8, 2, 3, 2), p, &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, nullptr, p, &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, nullptr, &ok), R));
    EXPECT_TRUE(fails(tg_rope(h.ctx, a, p, nullptr), R));
    EXPECT_TRUE(fails(tg_rope(nullptr, a, p, &ok), R));
}

}  // namespace
