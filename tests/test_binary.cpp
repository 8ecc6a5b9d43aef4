// test_binary.cpp - add and mul with ggml's broadcast rule (b repeats over a
// in every dim where a.ne[i] % b.ne[i] == 0, tiling when 1 < b.ne[i] < a.ne[i]),
// and swiglu, against float64 oracles; every input type and layout.
#include "op_util.h"

using namespace opu;

namespace {

const uint32_t k_seeds[] = {1, 2};
const tg_type k_float_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

enum class bop { add, mul };

// b broadcast over a: b[i0 % b0, i1 % b1, i2 % b2, i3 % b3]
std::vector<double> binary_ref(bop op, const shape &ane, const std::vector<double> &a, const shape &bne,
                               const std::vector<double> &b) {
    std::vector<double> r;
    for (int64_t i3 = 0; i3 < ane[3]; i3++)
        for (int64_t i2 = 0; i2 < ane[2]; i2++)
            for (int64_t i1 = 0; i1 < ane[1]; i1++)
                for (int64_t i0 = 0; i0 < ane[0]; i0++) {
                    const double x = a[(size_t)flat(ane, i0, i1, i2, i3)];
                    const double y = b[(size_t)flat(bne, i0 % bne[0], i1 % bne[1], i2 % bne[2], i3 % bne[3])];
                    r.push_back(op == bop::add ? x + y : x * y);
                }
    return r;
}

struct bin_case {
    bop op;
    tg_type a_type;
};
class Binary : public ::testing::TestWithParam<bin_case> {};

TEST_P(Binary, BroadcastsInEveryDim) {
    const bin_case c = GetParam();
    const shape ane = {6, 4, 4, 4};
    // b: same shape, scalar, one full dim, tiled (proper divisor) dims, mixtures
    const shape bnes[] = {{6, 4, 4, 4}, {1, 1, 1, 1}, {6, 1, 1, 1}, {1, 4, 1, 1}, {1, 1, 4, 1}, {1, 1, 1, 4},
                          {3, 4, 4, 4}, {6, 2, 4, 4}, {6, 4, 2, 4}, {6, 4, 4, 2}, {2, 1, 2, 1}, {3, 2, 2, 2},
                          {1, 4, 1, 2}, {6, 1, 4, 1}};
    for (uint32_t seed : k_seeds)
        for (tg_type bt : k_float_types)
            for (int li = 0; li < 4; li++)
                for (const shape &bne : bnes) {
                    const lay la = k_all_lays[li], lb = k_all_lays[(li + 1 + seed) % 4];
                    SCOPED_TRACE(std::string("b ") + type_str(bt) + " " + shape_str(bne) + ", a " + lay_name(la) +
                                 ", b " + lay_name(lb) + ", seed " + std::to_string(seed));
                    std::mt19937 rng(seed * 100 + li);
                    harness h(li % 2 ? 3 : 2);
                    std::vector<double> a, b;
                    tg_tensor *ta = h.rand_input(c.a_type, ane, la, rng, &a, -2.0, 2.0);
                    tg_tensor *tb = h.rand_input(bt, bne, lb, rng, &b, -2.0, 2.0);
                    tg_tensor *y = c.op == bop::add ? tg_add(h.ctx, ta, tb) : tg_mul(h.ctx, ta, tb);
                    ASSERT_TRUE(y) << tg_last_error();
                    EXPECT_EQ(TG_TYPE_F32, tg_tensor_type(y));
                    EXPECT_EQ(ane, shape_of(y));
                    EXPECT_TRUE(close(h.run(y, li % 2 == 0), binary_ref(c.op, ane, a, bne, b), 1e-6));
                }
}

std::vector<bin_case> all_bin_cases() {
    std::vector<bin_case> cs;
    for (bop op : {bop::add, bop::mul})
        for (tg_type t : k_float_types) cs.push_back({op, t});
    return cs;
}
INSTANTIATE_TEST_SUITE_P(Ops, Binary, ::testing::ValuesIn(all_bin_cases()),
                         [](const ::testing::TestParamInfo<bin_case> &i) {
                             return std::string(i.param.op == bop::add ? "add_" : "mul_") + type_str(i.param.a_type);
                         });

// Values of very different magnitudes: the relative error must hold per element too.
TEST(Binary, WideMagnitudes) {
    std::mt19937 rng(9);
    harness h;
    const shape ne = {33, 5, 1, 1};
    std::vector<double> a((size_t)numel(ne)), b(a.size());
    std::uniform_int_distribution<int> ex(-60, 60);
    for (size_t i = 0; i < a.size(); i++) {
        a[i] = quantize(TG_TYPE_F32, std::ldexp(1.0 + (rng() % 1000) / 1000.0, ex(rng)));
        b[i] = quantize(TG_TYPE_F32, -std::ldexp(1.0 + (rng() % 1000) / 1000.0, ex(rng)));
    }
    tg_tensor *ta = h.input(TG_TYPE_F32, ne, lay::strided, a), *tb = h.input(TG_TYPE_F32, ne, lay::permuted, b);
    const std::vector<double> sum = h.run(tg_add(h.ctx, ta, tb)), prod = h.run(tg_mul(h.ctx, ta, tb));
    const std::vector<double> rsum = binary_ref(bop::add, ne, a, ne, b), rprod = binary_ref(bop::mul, ne, a, ne, b);
    ASSERT_EQ(rsum.size(), sum.size());
    for (size_t i = 0; i < sum.size(); i++) {
        EXPECT_LE(std::fabs(sum[i] - rsum[i]), 1e-6 * std::fabs(rsum[i]) + 1e-6 * std::fabs(a[i])) << i;
        EXPECT_LE(std::fabs(prod[i] - rprod[i]), 1e-6 * std::fabs(rprod[i])) << i;
    }
}

// A chain through intermediates: an op may run in place on its input only
// when nothing reads that input later (the planner's rule).
TEST(Binary, InPlaceChain) {
    for (uint32_t seed : k_seeds) {
        std::mt19937 rng(seed);
        harness h;
        const shape ne = {10, 3, 2, 2}, bne = {10, 1, 2, 1};
        std::vector<double> a, b, c;
        tg_tensor *ta = h.rand_input(TG_TYPE_F32, ne, lay::contig, rng, &a);
        tg_tensor *tb = h.rand_input(TG_TYPE_BF16, bne, lay::strided, rng, &b);
        tg_tensor *tc = h.rand_input(TG_TYPE_F16, ne, lay::permuted, rng, &c);
        tg_tensor *x = tg_mul(h.ctx, ta, tb);
        tg_tensor *y = tg_add(h.ctx, x, tc);
        tg_tensor *z = tg_mul(h.ctx, y, y);
        tg_tensor *w = tg_add(h.ctx, z, x);  // x has a later consumer: y must not overwrite it
        std::vector<double> ref = binary_ref(bop::mul, ne, a, bne, b);
        const std::vector<double> xr = ref;
        ref = binary_ref(bop::add, ne, ref, ne, c);
        ref = binary_ref(bop::mul, ne, ref, ne, ref);
        ref = binary_ref(bop::add, ne, ref, ne, xr);
        EXPECT_TRUE(close(h.run(w), ref, 1e-6));

        // a chain where in place does apply
        tg_tensor *p = tg_add(h.ctx, tg_mul(h.ctx, ta, tb), tc);
        tg_graph *g = h.graph(p);
        tg_graph_stats st;
        ASSERT_EQ(TG_OK, tg_graph_plan(g, &st));
        EXPECT_GE(st.n_inplace, 1);
        EXPECT_TRUE(close(h.run(p), binary_ref(bop::add, ne, xr, ne, c), 1e-6));
    }
}

// ---------------------------------------------------------------------------
// swiglu: silu(a) * b

double silu(double x) { return x == -INFINITY ? 0.0 : x / (1.0 + std::exp(-x)); }

class Swiglu : public ::testing::TestWithParam<tg_type> {};

TEST_P(Swiglu, MatchesOracle) {
    const tg_type t = GetParam();
    const shape shapes[] = {{16, 3, 2, 2}, {5, 1, 1, 1}, {1, 7, 3, 1}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ne : shapes) {
                SCOPED_TRACE(std::string(lay_name(l)) + " " + shape_str(ne) + " seed " + std::to_string(seed));
                std::mt19937 rng(seed);
                harness h;
                std::vector<double> a, b;
                tg_tensor *ta = h.rand_input(t, ne, l, rng, &a, -8.0, 8.0);
                tg_tensor *tb = h.rand_input(t == TG_TYPE_F32 ? TG_TYPE_F16 : TG_TYPE_F32, ne,
                                             k_all_lays[(int)l ^ 1], rng, &b, -2.0, 2.0);
                if (a.size() > 4) a[1] = quantize(t, -1e4), a[2] = quantize(t, 1e4), a[3] = -90.0, a[4] = -INFINITY;
                h.set(ta, a);
                std::vector<double> ref;
                for (size_t i = 0; i < a.size(); i++) ref.push_back(silu(a[i]) * b[i]);
                EXPECT_TRUE(close(h.run(tg_swiglu(h.ctx, ta, tb)), ref, 1e-6));
            }
}
INSTANTIATE_TEST_SUITE_P(Types, Swiglu, ::testing::ValuesIn(k_float_types),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// ---------------------------------------------------------------------------
// misuse

TEST(BinaryMisuse, ShapesTypesAndNulls) {
    harness h;
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 3);
    tg_tensor *b33 = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 3, 3);
    tg_tensor *b8 = tg_new_tensor_1d(h.ctx, TG_TYPE_F32, 8);
    tg_tensor *b42 = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 2);
    tg_tensor *b4113 = tg_new_tensor_4d(h.ctx, TG_TYPE_F32, 4, 1, 1, 3);
    tg_tensor *i = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 3);
    struct {
        tg_tensor *(*f)(tg_context *, tg_tensor *, tg_tensor *);
        const char *name;
    } ops[] = {{tg_add, "[add]"}, {tg_mul, "[mul]"}};
    for (auto &op : ops) {
        EXPECT_TRUE(fails(op.f(h.ctx, a, b33), op.name));    // 4 % 3
        EXPECT_TRUE(fails(op.f(h.ctx, a, b8), op.name));     // b larger than a
        EXPECT_TRUE(fails(op.f(h.ctx, a, b42), op.name));    // 3 % 2
        EXPECT_TRUE(fails(op.f(h.ctx, a, b4113), op.name));  // 1 % 3 in dim 3
        EXPECT_TRUE(fails(op.f(h.ctx, b4113, a), op.name));  // 1 % 3 in dim 1
        EXPECT_TRUE(fails(op.f(h.ctx, i, a), op.name));
        EXPECT_TRUE(fails(op.f(h.ctx, a, i), op.name));
        EXPECT_TRUE(fails(op.f(h.ctx, nullptr, a), op.name));
        EXPECT_TRUE(fails(op.f(h.ctx, a, nullptr), op.name));
        EXPECT_TRUE(fails(op.f(nullptr, a, a), op.name));
        EXPECT_TRUE(op.f(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_BF16, 2, 1))) << tg_last_error();
    }
    EXPECT_TRUE(fails(tg_swiglu(h.ctx, a, b42), "[swiglu]"));
    EXPECT_TRUE(fails(tg_swiglu(h.ctx, a, tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 1)), "[swiglu]"));  // no broadcast
    EXPECT_TRUE(fails(tg_swiglu(h.ctx, i, i), "[swiglu]"));
    EXPECT_TRUE(fails(tg_swiglu(h.ctx, nullptr, a), "[swiglu]"));
    EXPECT_TRUE(fails(tg_swiglu(h.ctx, a, nullptr), "[swiglu]"));
    EXPECT_TRUE(fails(tg_swiglu(nullptr, a, a), "[swiglu]"));
}

}  // namespace
