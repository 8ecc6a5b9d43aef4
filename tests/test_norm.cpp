// test_norm.cpp - rms_norm, l2_norm and softmax (with scale, -inf entries and
// rows of all -inf) against float64 oracles, for every input type and layout.
#include "op_util.h"

using namespace opu;

namespace {

const uint32_t k_seeds[] = {1, 2, 3};
const tg_type k_float_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

// Random rows whose magnitudes differ by many orders (row r scaled by 2^k).
std::vector<double> row_values(std::mt19937 &rng, tg_type t, const shape &ne) {
    std::uniform_real_distribution<double> d(-1.0, 1.0);
    std::uniform_int_distribution<int> ex(-12, 12);
    std::vector<double> v;
    for (int64_t r = 0; r < ne[1] * ne[2] * ne[3]; r++) {
        const double s = std::ldexp(1.0, ex(rng));
        for (int64_t i = 0; i < ne[0]; i++) v.push_back(quantize(t, s * d(rng)));
    }
    return v;
}

// ---------------------------------------------------------------------------
// rms_norm: x / sqrt(mean(x^2) + eps); l2_norm: x / sqrt(sum(x^2) + eps)

struct norm_case {
    bool rms;
    tg_type type;
};
class Norm : public ::testing::TestWithParam<norm_case> {};

std::vector<double> norm_ref(bool rms, const shape &ne, const std::vector<double> &x, float eps) {
    std::vector<double> r;
    for (int64_t row = 0; row < ne[1] * ne[2] * ne[3]; row++) {
        double ss = 0.0;
        for (int64_t i = 0; i < ne[0]; i++) ss += x[(size_t)(row * ne[0] + i)] * x[(size_t)(row * ne[0] + i)];
        if (rms) ss /= (double)ne[0];
        const double inv = 1.0 / std::sqrt(ss + (double)eps);
        for (int64_t i = 0; i < ne[0]; i++) r.push_back(x[(size_t)(row * ne[0] + i)] * inv);
    }
    return r;
}

TEST_P(Norm, MatchesOracle) {
    const norm_case c = GetParam();
    const shape shapes[] = {{37, 5, 3, 2}, {1, 4, 1, 1}, {256, 2, 1, 1}, {3, 1, 2, 3}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ne : shapes)
                for (float eps : {1e-6f, 1e-5f, 0.0f}) {
                    SCOPED_TRACE(std::string(lay_name(l)) + " " + shape_str(ne) + " eps " + std::to_string(eps) +
                                 " seed " + std::to_string(seed));
                    std::mt19937 rng(seed);
                    harness h(seed);
                    const std::vector<double> x = row_values(rng, c.type, ne);
                    tg_tensor *a = h.input(c.type, ne, l, x);
                    tg_tensor *y = c.rms ? tg_rms_norm(h.ctx, a, eps) : tg_l2_norm(h.ctx, a, eps);
                    ASSERT_TRUE(y) << tg_last_error();
                    EXPECT_EQ(TG_TYPE_F32, tg_tensor_type(y));
                    EXPECT_EQ(ne, shape_of(y));
                    EXPECT_TRUE(close(h.run(y, seed != 1), norm_ref(c.rms, ne, x, eps), 1e-5));
                }
}

// A row that is all zeros stays zeros (eps > 0); a row far below eps is
// scaled by ~1/sqrt(eps), not blown up to unit norm.
TEST_P(Norm, ZeroAndTinyRows) {
    const norm_case c = GetParam();
    const shape ne = {8, 3, 1, 1};
    std::vector<double> x((size_t)numel(ne), 0.0);
    for (int i = 8; i < 16; i++) x[i] = quantize(c.type, 1e-6 * (i - 11.5));
    for (int i = 16; i < 24; i++) x[i] = quantize(c.type, (i - 19.5));
    harness h;
    tg_tensor *a = h.input(c.type, ne, lay::strided, x);
    const float eps = 1e-5f;
    const std::vector<double> out = h.run(c.rms ? tg_rms_norm(h.ctx, a, eps) : tg_l2_norm(h.ctx, a, eps));
    EXPECT_TRUE(close(out, norm_ref(c.rms, ne, x, eps), 1e-5));
    for (int i = 0; i < 8; i++) EXPECT_EQ(0.0, out[i]);
}

std::vector<norm_case> all_norm_cases() {
    std::vector<norm_case> cs;
    for (bool rms : {true, false})
        for (tg_type t : k_float_types) cs.push_back({rms, t});
    return cs;
}
INSTANTIATE_TEST_SUITE_P(Ops, Norm, ::testing::ValuesIn(all_norm_cases()),
                         [](const ::testing::TestParamInfo<norm_case> &i) {
                             return std::string(i.param.rms ? "rms_norm_" : "l2_norm_") + type_str(i.param.type);
                         });

// ---------------------------------------------------------------------------
// softmax over ne0 of scale * x; -inf entries are masked (0 out, whatever the
// scale); a row of all -inf gives zeros.

std::vector<double> softmax_ref(const shape &ne, const std::vector<double> &x, float scale) {
    std::vector<double> r;
    for (int64_t row = 0; row < ne[1] * ne[2] * ne[3]; row++) {
        const double *p = &x[(size_t)(row * ne[0])];
        double mx = -INFINITY;
        for (int64_t i = 0; i < ne[0]; i++)
            if (p[i] != -INFINITY) mx = std::max(mx, (double)scale * p[i]);
        double sum = 0.0;
        for (int64_t i = 0; i < ne[0]; i++)
            if (p[i] != -INFINITY) sum += std::exp((double)scale * p[i] - mx);
        for (int64_t i = 0; i < ne[0]; i++)
            r.push_back(p[i] == -INFINITY ? 0.0 : std::exp((double)scale * p[i] - mx) / sum);
    }
    return r;
}

class Softmax : public ::testing::TestWithParam<tg_type> {};

TEST_P(Softmax, MatchesOracleWithMasks) {
    const tg_type t = GetParam();
    const shape shapes[] = {{19, 4, 3, 2}, {1, 3, 1, 1}, {130, 3, 1, 1}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ne : shapes)
                for (float scale : {1.0f, 0.125f, 3.0f, -0.5f, 0.0f}) {
                    SCOPED_TRACE(std::string(lay_name(l)) + " " + shape_str(ne) + " scale " + std::to_string(scale) +
                                 " seed " + std::to_string(seed));
                    std::mt19937 rng(seed);
                    harness h(seed);
                    std::vector<double> x = rand_vals(rng, t, numel(ne), -6.0, 6.0);
                    const int64_t rows = ne[1] * ne[2] * ne[3];
                    for (auto &v : x)
                        if (rng() % 4 == 0) v = -INFINITY;  // a quarter masked
                    if (rows > 1)
                        for (int64_t i = 0; i < ne[0]; i++) x[(size_t)(ne[0] + i)] = -INFINITY;  // row 1: all masked
                    if (rows > 2) {  // row 2: one entry left
                        for (int64_t i = 0; i < ne[0]; i++) x[(size_t)(2 * ne[0] + i)] = -INFINITY;
                        x[(size_t)(2 * ne[0] + ne[0] / 2)] = 0.5;
                    }
                    x[0] = 0.25;  // row 0 has a finite entry
                    tg_tensor *a = h.input(t, ne, l, x);
                    tg_tensor *y = tg_softmax(h.ctx, a, scale);
                    ASSERT_TRUE(y) << tg_last_error();
                    const std::vector<double> out = h.run(y, seed == 2);
                    const std::vector<double> ref = softmax_ref(ne, x, scale);
                    EXPECT_TRUE(close(out, ref, 1e-5));
                    for (size_t i = 0; i < x.size() && i < out.size(); i++) {
                        if (x[i] != -INFINITY) continue;
                        ASSERT_EQ(0.0, out[i]) << "masked entry " << i;
                    }
                    if (rows > 2 && out.size() == x.size()) {
                        EXPECT_EQ(1.0, out[(size_t)(2 * ne[0] + ne[0] / 2)]);
                    }
                }
}

// Logits of +-1e4 (RELIABILITY 18): no overflow, no NaN.
TEST_P(Softmax, LargeLogits) {
    const tg_type t = GetParam();
    const shape ne = {6, 3, 1, 1};
    std::vector<double> x = {1e4, -1e4, 0.0, 9990.0, -INFINITY, 1.0, -1e4, -1e4, -9999.0, -1e4, -1e4, -1e4,
                             3e4, 3e4,  1e4, -3e4,   0.0,       -1.0};
    for (auto &v : x) v = quantize(t, v);
    harness h;
    tg_tensor *a = h.input(t, ne, lay::misaligned, x);
    for (float scale : {1.0f, 0.01f}) {
        EXPECT_TRUE(close(h.run(tg_softmax(h.ctx, a, scale)), softmax_ref(ne, x, scale), 1e-5)) << scale;
    }
}

// A NaN entry is reported: its row is NaN (even beside -inf), other rows are right.
TEST_P(Softmax, NaNRowIsReported) {
    const tg_type t = GetParam();
    const shape ne = {5, 3, 1, 1};
    std::vector<double> x = {0.5, NAN, -1.0, 2.0, -INFINITY, 1.0, 0.0, -0.5, 0.25, 2.0,
                             -INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY};
    for (auto &v : x) v = quantize(t, v);
    harness h;
    const std::vector<double> out = h.run(tg_softmax(h.ctx, h.input(t, ne, lay::permuted, x), 0.5f));
    ASSERT_EQ(x.size(), out.size());
    const std::vector<double> ref = softmax_ref(ne, x, 0.5f);
    for (int i = 0; i < 5; i++) {
        EXPECT_TRUE(std::isnan(out[i])) << i;
        EXPECT_TRUE(std::isnan(out[10 + i])) << 10 + i;
        EXPECT_NEAR(ref[5 + i], out[5 + i], 1e-6) << 5 + i;
    }
}

INSTANTIATE_TEST_SUITE_P(Types, Softmax, ::testing::ValuesIn(k_float_types),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// ---------------------------------------------------------------------------
// misuse

TEST(NormMisuse, ParamsTypesAndNulls) {
    harness h;
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 3);
    tg_tensor *i = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 3);
    struct {
        tg_tensor *(*f)(tg_context *, tg_tensor *, float);
        const char *name;
    } ops[] = {{tg_rms_norm, "[rms_norm]"}, {tg_l2_norm, "[l2_norm]"}};
    for (auto &op : ops) {
        for (float eps : {-1e-6f, NAN, INFINITY, -INFINITY}) EXPECT_TRUE(fails(op.f(h.ctx, a, eps), op.name)) << eps;
        EXPECT_TRUE(fails(op.f(h.ctx, i, 1e-6f), op.name));
        EXPECT_TRUE(fails(op.f(h.ctx, nullptr, 1e-6f), op.name));
        EXPECT_TRUE(fails(op.f(nullptr, a, 1e-6f), op.name));
        EXPECT_TRUE(op.f(h.ctx, a, 0.0f)) << tg_last_error();
    }
    for (float s : {NAN, INFINITY, -INFINITY}) EXPECT_TRUE(fails(tg_softmax(h.ctx, a, s), "[softmax]")) << s;
    EXPECT_TRUE(fails(tg_softmax(h.ctx, i, 1.0f), "[softmax]"));
    EXPECT_TRUE(fails(tg_softmax(h.ctx, nullptr, 1.0f), "[softmax]"));
    EXPECT_TRUE(fails(tg_softmax(nullptr, a, 1.0f), "[softmax]"));
}

}  // namespace
