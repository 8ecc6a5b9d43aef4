// test_mul_mat.cpp - mul_mat (ggml's rule: a {K, M, A2, A3} x b {K, N, B2, B3}
// -> {M, N, B2, B3}, a broadcast over dims 2 and 3) against a float64 oracle:
// F32/F16/BF16 weights, b contiguous, permuted, transposed, strided and
// misaligned, K = 1, odd sizes.
#include "op_util.h"

using namespace opu;

namespace {

const uint32_t k_seeds[] = {1, 2};
const tg_type k_float_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

// out[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3]
std::vector<double> mul_mat_ref(const shape &ane, const std::vector<double> &a, const shape &bne,
                                const std::vector<double> &b) {
    const int64_t K = ane[0], M = ane[1], N = bne[1], r2 = bne[2] / ane[2], r3 = bne[3] / ane[3];
    std::vector<double> out;
    for (int64_t i3 = 0; i3 < bne[3]; i3++)
        for (int64_t i2 = 0; i2 < bne[2]; i2++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++) {
                    double acc = 0.0;
                    for (int64_t k = 0; k < K; k++)
                        acc += a[(size_t)flat(ane, k, m, i2 / r2, i3 / r3)] * b[(size_t)flat(bne, k, n, i2, i3)];
                    out.push_back(acc);
                }
    return out;
}

struct mm_shapes {
    shape a, b;
};
const mm_shapes k_shapes[] = {
    {{37, 13, 2, 1}, {37, 7, 4, 3}},  // broadcast 2x over dim 2, 3x over dim 3
    {{1, 5, 1, 1}, {1, 3, 1, 1}},     // K = 1
    {{64, 1, 1, 1}, {64, 1, 1, 1}},   // a dot product
    {{300, 9, 3, 2}, {300, 5, 3, 4}}, // long K
    {{17, 6, 1, 2}, {17, 11, 2, 2}},
    {{3, 1, 1, 1}, {3, 19, 2, 1}},    // M = 1
};

class MulMat : public ::testing::TestWithParam<tg_type> {};

TEST_P(MulMat, MatchesOracleInEveryLayout) {
    const tg_type at = GetParam();
    for (uint32_t seed : k_seeds)
        for (int li = 0; li < 4; li++)
            for (const mm_shapes &s : k_shapes) {
                // b in every layout; a in the layout one step along, so both vary
                const lay lb = k_all_lays[li], la = k_all_lays[(li + seed) % 4];
                const tg_type bt = li == 3 && seed == 2 ? at : TG_TYPE_F32;
                SCOPED_TRACE("a " + shape_str(s.a) + " " + lay_name(la) + ", b " + shape_str(s.b) + " " +
                             type_str(bt) + " " + lay_name(lb) + ", seed " + std::to_string(seed));
                std::mt19937 rng(seed * 31 + li);
                harness h(li % 2 ? 3 : 2);
                std::vector<double> a, b;
                tg_tensor *ta = h.rand_input(at, s.a, la, rng, &a);
                tg_tensor *tb = h.rand_input(bt, s.b, lb, rng, &b);
                tg_tensor *y = tg_mul_mat(h.ctx, ta, tb);
                ASSERT_TRUE(y) << tg_last_error();
                EXPECT_EQ(TG_TYPE_F32, tg_tensor_type(y));
                const shape want = {s.a[1], s.b[1], s.b[2], s.b[3]};
                EXPECT_EQ(want, shape_of(y));
                EXPECT_TRUE(close(h.run(y, li != 1), mul_mat_ref(s.a, a, s.b, b), 1e-5));
            }
}

// b given as tg_transpose of a {N, K, ..} tensor (x^T as ggml users write
// it), and as a permute that swaps dims 2 and 3 too.
TEST_P(MulMat, TransposedAndPermutedB) {
    const tg_type at = GetParam();
    for (uint32_t seed : k_seeds)
        for (const mm_shapes &s : k_shapes) {
            SCOPED_TRACE("a " + shape_str(s.a) + ", b " + shape_str(s.b) + ", seed " + std::to_string(seed));
            std::mt19937 rng(seed);
            harness h;
            std::vector<double> a, st, sp;
            tg_tensor *ta = h.rand_input(at, s.a, lay::contig, rng, &a);
            const int64_t K = s.b[0], N = s.b[1], B2 = s.b[2], B3 = s.b[3];
            // stored {N, K, B2, B3}: b[k, n, i2, i3] = stored[n, k, i2, i3]
            const shape tne = {N, K, B2, B3};
            tg_tensor *tt = tg_transpose(h.ctx, h.rand_input(TG_TYPE_F32, tne, lay::contig, rng, &st));
            // stored {N, K, B3, B2}, permuted (1, 0, 3, 2): b[k, n, i2, i3] = stored[n, k, i3, i2]
            const shape pne = {N, K, B3, B2};
            tg_tensor *tp = tg_permute(h.ctx, h.rand_input(TG_TYPE_F32, pne, lay::strided, rng, &sp), 1, 0, 3, 2);
            ASSERT_TRUE(tt && tp) << tg_last_error();
            EXPECT_FALSE(tg_is_contiguous(tt) && N > 1 && K > 1);
            std::vector<double> bt, bp;
            for (int64_t i3 = 0; i3 < B3; i3++)
                for (int64_t i2 = 0; i2 < B2; i2++)
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t k = 0; k < K; k++) {
                            bt.push_back(st[(size_t)flat(tne, n, k, i2, i3)]);
                            bp.push_back(sp[(size_t)flat(pne, n, k, i3, i2)]);
                        }
            EXPECT_TRUE(close(h.run(tg_mul_mat(h.ctx, ta, tt)), mul_mat_ref(s.a, a, s.b, bt), 1e-5));
            EXPECT_TRUE(close(h.run(tg_mul_mat(h.ctx, ta, tp)), mul_mat_ref(s.a, a, s.b, bp), 1e-5));
        }
}

INSTANTIATE_TEST_SUITE_P(Types, MulMat, ::testing::ValuesIn(k_float_types),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// Large cancelling sums and magnitudes: the double accumulator keeps 1e-5.
TEST(MulMat, CancellingSums) {
    std::mt19937 rng(3);
    harness h;
    const shape ane = {513, 4, 1, 1}, bne = {513, 3, 1, 1};
    std::vector<double> a = rand_vals(rng, TG_TYPE_F32, numel(ane), -1e3, 1e3), b;
    tg_tensor *ta = h.input(TG_TYPE_F32, ane, lay::contig, a);
    tg_tensor *tb = h.rand_input(TG_TYPE_F32, bne, lay::misaligned, rng, &b, -1e3, 1e3);
    EXPECT_TRUE(close(h.run(tg_mul_mat(h.ctx, ta, tb)), mul_mat_ref(ane, a, bne, b), 1e-5));
}

// A product of products: intermediates feed mul_mat as a and as b.
TEST(MulMat, ChainOfProducts) {
    std::mt19937 rng(8);
    harness h;
    const shape w1ne = {16, 8, 1, 1}, w2ne = {8, 5, 1, 1}, xne = {16, 3, 2, 1};
    std::vector<double> w1, w2, x;
    tg_tensor *tw1 = h.rand_input(TG_TYPE_F16, w1ne, lay::contig, rng, &w1);
    tg_tensor *tw2 = h.rand_input(TG_TYPE_BF16, w2ne, lay::contig, rng, &w2);
    tg_tensor *tx = h.rand_input(TG_TYPE_F32, xne, lay::permuted, rng, &x);
    tg_tensor *y = tg_mul_mat(h.ctx, tw2, tg_mul_mat(h.ctx, tw1, tx));  // {5, 3, 2, 1}
    const std::vector<double> hid = mul_mat_ref(w1ne, w1, xne, x);
    EXPECT_TRUE(close(h.run(y), mul_mat_ref(w2ne, w2, {8, 3, 2, 1}, hid), 1e-5));
}

TEST(MulMatMisuse, ShapesTypesAndNulls) {
    harness h;
    tg_tensor *a = tg_new_tensor_3d(h.ctx, TG_TYPE_F16, 8, 4, 2);
    tg_tensor *b = tg_new_tensor_3d(h.ctx, TG_TYPE_F32, 8, 3, 4);
    EXPECT_TRUE(tg_mul_mat(h.ctx, a, b)) << tg_last_error();
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, a, tg_new_tensor_3d(h.ctx, TG_TYPE_F32, 7, 3, 4)), "[mul_mat]"));  // K
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, a, tg_new_tensor_3d(h.ctx, TG_TYPE_F32, 8, 3, 3)), "[mul_mat]"));  // 3 % 2
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 8, 3)), "[mul_mat]"));     // 1 % 2
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, tg_new_tensor_4d(h.ctx, TG_TYPE_F32, 8, 4, 1, 2), b), "[mul_mat]"));
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, tg_new_tensor_3d(h.ctx, TG_TYPE_I32, 8, 4, 2), b), "[mul_mat]"));
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, a, tg_new_tensor_3d(h.ctx, TG_TYPE_I32, 8, 3, 4)), "[mul_mat]"));
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, nullptr, b), "[mul_mat]"));
    EXPECT_TRUE(fails(tg_mul_mat(h.ctx, a, nullptr), "[mul_mat]"));
    EXPECT_TRUE(fails(tg_mul_mat(nullptr, a, b), "[mul_mat]"));
}

}  // namespace
