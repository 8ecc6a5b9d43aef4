// test_unary.cpp - scale, silu, sigmoid, softplus against float64 oracles, for
// every input type and layout, and at large |x|, +-inf and NaN (RELIABILITY
// 18: no NaN where the math has none; a NaN input gives NaN).
#include "op_util.h"

using namespace opu;

namespace {

const uint32_t k_seeds[] = {1, 2, 3};
const tg_type k_float_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

enum class uop { scale, silu, sigmoid, softplus };
const char *uop_name(uop o) {
    switch (o) {
        case uop::scale: return "scale";
        case uop::silu: return "silu";
        case uop::sigmoid: return "sigmoid";
        case uop::softplus: return "softplus";
    }
    return "?";
}

const double k_scale = -1.75;

// float64 oracles, with the limits at +-inf
double oracle(uop o, double x) {
    switch (o) {
        case uop::scale: return x * k_scale;
        case uop::silu: return x == -INFINITY ? 0.0 : x / (1.0 + std::exp(-x));
        case uop::sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case uop::softplus: return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }
    return NAN;
}
tg_tensor *make(uop o, tg_context *ctx, tg_tensor *a, float s = (float)k_scale) {
    switch (o) {
        case uop::scale: return tg_scale(ctx, a, s);
        case uop::silu: return tg_silu(ctx, a);
        case uop::sigmoid: return tg_sigmoid(ctx, a);
        case uop::softplus: return tg_softplus(ctx, a);
    }
    return nullptr;
}

struct un_case {
    uop op;
    tg_type type;
};
class Unary : public ::testing::TestWithParam<un_case> {};

TEST_P(Unary, MatchesOracle) {
    const un_case c = GetParam();
    const shape shapes[] = {{17, 3, 2, 2}, {4, 1, 1, 1}, {1, 5, 1, 3}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ne : shapes) {
                SCOPED_TRACE(std::string(lay_name(l)) + " " + shape_str(ne) + " seed " + std::to_string(seed));
                std::mt19937 rng(seed);
                harness h(seed);
                std::vector<double> a;
                tg_tensor *x = h.rand_input(c.type, ne, l, rng, &a, -12.0, 12.0);
                tg_tensor *y = make(c.op, h.ctx, x);
                ASSERT_TRUE(y) << tg_last_error();
                EXPECT_EQ(TG_TYPE_F32, tg_tensor_type(y));
                EXPECT_EQ(ne, shape_of(y));
                std::vector<double> ref;
                for (double v : a) ref.push_back(oracle(c.op, v));
                EXPECT_TRUE(close(h.run(y, seed != 2), ref, 1e-6));
            }
}

// Large |x|, the softplus threshold, +-inf: finite where the math is finite,
// each element within 1e-6 relative (or 1e-37 absolute, for results that
// underflow float), infinities exact. NaN in, NaN out.
TEST_P(Unary, ExtremeInputs) {
    const un_case c = GetParam();
    const double xs[] = {-INFINITY, -3e38, -1e30, -1e4, -100.0, -88.7, -20.5, -20.0, -19.99, -15.0, -10.5, -1.0,
                         -1e-30,    0.0,   1e-30, 1.0,  5.0,    10.5,  15.0,  19.99, 20.0,   20.01, 30.0,  88.7,
                         100.0,     1e4,   1e30,  3e38, INFINITY};
    std::vector<double> a;
    for (double x : xs) a.push_back(quantize(c.type, x));
    a.push_back(NAN);
    harness h;
    tg_tensor *x = h.input(c.type, {(int64_t)a.size(), 1, 1, 1}, lay::misaligned, a);
    const std::vector<double> out = h.run(make(c.op, h.ctx, x, c.op == uop::scale ? 0.5f : 0.0f));
    ASSERT_EQ(a.size(), out.size());
    for (size_t i = 0; i < a.size(); i++) {
        const double ref = c.op == uop::scale ? a[i] * 0.5 : oracle(c.op, a[i]);
        if (std::isnan(a[i])) {
            EXPECT_TRUE(std::isnan(out[i])) << "NaN input gave " << out[i];
        } else if (std::isinf(ref)) {
            EXPECT_EQ(ref, out[i]) << "x = " << a[i];
        } else {
            EXPECT_FALSE(std::isnan(out[i])) << "NaN for x = " << a[i];
            EXPECT_LE(std::fabs(out[i] - ref), 1e-6 * std::fabs(ref) + 1e-37) << "x = " << a[i] << ", got "
                                                                               << out[i] << ", want " << ref;
        }
    }
}

std::vector<un_case> all_un_cases() {
    std::vector<un_case> cs;
    for (uop o : {uop::scale, uop::silu, uop::sigmoid, uop::softplus})
        for (tg_type t : k_float_types) cs.push_back({o, t});
    return cs;
}
INSTANTIATE_TEST_SUITE_P(Ops, Unary, ::testing::ValuesIn(all_un_cases()),
                         [](const ::testing::TestParamInfo<un_case> &i) {
                             return std::string(uop_name(i.param.op)) + "_" + type_str(i.param.type);
                         });

// scale takes its factor per node: two scales of one input in one graph.
TEST(Scale, FactorsArePerNode) {
    std::mt19937 rng(4);
    harness h;
    std::vector<double> a;
    tg_tensor *x = h.rand_input(TG_TYPE_F32, {9, 4, 1, 1}, lay::permuted, rng, &a);
    for (float s : {3.0e-3f, 1.0e4f, -0.5f, 1.0f}) {
        std::vector<double> ref;
        for (double v : a) ref.push_back(v * (double)s);
        EXPECT_TRUE(close(h.run(tg_scale(h.ctx, x, s)), ref, 1e-6)) << s;
    }
}

TEST(UnaryMisuse, TypesAndNulls) {
    harness h;
    tg_tensor *i = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 3);
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 3);
    for (uop o : {uop::scale, uop::silu, uop::sigmoid, uop::softplus}) {
        const std::string name = std::string("[") + uop_name(o) + "]";
        EXPECT_TRUE(fails(make(o, h.ctx, i), name.c_str()));
        EXPECT_TRUE(fails(make(o, h.ctx, nullptr), name.c_str()));
        EXPECT_TRUE(fails(make(o, nullptr, a), name.c_str()));
        EXPECT_TRUE(make(o, h.ctx, a)) << tg_last_error();
    }
}

}  // namespace
