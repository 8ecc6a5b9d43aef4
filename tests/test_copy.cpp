// test_copy.cpp - cont, cpy (with F32 <-> F16 <-> BF16 conversion) and
// get_rows (F32/F16/BF16 tables), against values known exactly in float64:
// copies must be bit-exact, conversions must round to nearest even as the
// independent model in op_util.h does.
#include "op_util.h"

using namespace opu;

namespace {

const uint32_t k_seeds[] = {1, 2, 3};

// Values a copy must carry exactly: random, plus the edges of the 16-bit
// formats (overflow, ties, subnormals, signed zero, inf, NaN).
std::vector<double> copy_values(std::mt19937 &rng, tg_type t, int64_t n) {
    std::vector<double> v;
    if (t == TG_TYPE_I32) {
        std::uniform_int_distribution<int32_t> d(INT32_MIN, INT32_MAX);
        for (int64_t i = 0; i < n; i++) v.push_back(d(rng));
        v[0] = INT32_MIN, v[1] = INT32_MAX, v[2] = -1, v[3] = 0;
        return v;
    }
    std::uniform_real_distribution<double> mant(1.0, 2.0);
    std::uniform_int_distribution<int> ex(-27, 17);
    for (int64_t i = 0; i < n; i++) {
        double x = std::ldexp(mant(rng), ex(rng)) * (rng() & 1 ? -1 : 1);
        v.push_back(quantize(t, x));
    }
    const double specials[] = {65504.0, 65519.0, 65520.0, 70000.0, 1.00048828125, 1.00146484375,
                               std::ldexp(1.0, -25), std::ldexp(3.0, -26), std::ldexp(1.0, -24), -0.0,
                               INFINITY, -INFINITY, NAN, 3.0e38, -1.0e-40, std::ldexp(1.0, -14)};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && (int64_t)i < n; i++)
        v[i * 7 % n] = quantize(t, specials[i]);
    return v;
}

// ---------------------------------------------------------------------------
// cont: same type, contiguous, bit-exact, from every layout.

class Cont : public ::testing::TestWithParam<tg_type> {};

TEST_P(Cont, CopiesEveryLayoutExactly) {
    const tg_type t = GetParam();
    const shape shapes[] = {{5, 3, 4, 2}, {7, 1, 1, 1}, {1, 6, 1, 3}, {3, 2, 5, 1}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ne : shapes) {
                SCOPED_TRACE(std::string(lay_name(l)) + " " + shape_str(ne) + " seed " + std::to_string(seed));
                std::mt19937 rng(seed);
                harness h(seed == 2 ? 3 : 2);
                const std::vector<double> v = copy_values(rng, t, numel(ne));
                tg_tensor *x = h.input(t, ne, l, v);
                tg_tensor *y = tg_cont(h.ctx, x);
                ASSERT_TRUE(y) << tg_last_error();
                EXPECT_EQ(t, tg_tensor_type(y));
                EXPECT_TRUE(tg_is_contiguous(y));
                EXPECT_TRUE(same(h.run(y, seed != 3), v));
            }
}

INSTANTIATE_TEST_SUITE_P(Types, Cont, ::testing::Values(TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16, TG_TYPE_I32),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// ---------------------------------------------------------------------------
// cpy: into a persistent view (strided or not) of another type and shape.

struct cpy_case {
    tg_type src, dst;
};
class Cpy : public ::testing::TestWithParam<cpy_case> {};

TEST_P(Cpy, ConvertsWithRoundToNearestEven) {
    const cpy_case c = GetParam();
    const shape src_shapes[] = {{6, 4, 5, 1}, {9, 1, 2, 3}}, dst_shapes[] = {{5, 4, 3, 2}, {3, 3, 6, 1}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (int s = 0; s < 2; s++)
                for (bool strided_dst : {false, true}) {
                    SCOPED_TRACE(std::string(lay_name(l)) + " seed " + std::to_string(seed) + " shape " +
                                 std::to_string(s) + (strided_dst ? " strided dst" : ""));
                    std::mt19937 rng(seed);
                    harness h;
                    const std::vector<double> v = copy_values(rng, c.src, numel(src_shapes[s]));
                    tg_tensor *x = h.input(c.src, src_shapes[s], l, v);
                    sink *o = h.out(c.dst, dst_shapes[s], strided_dst);
                    tg_tensor *y = tg_cpy(h.ctx, x, o->dst);
                    ASSERT_TRUE(y) << tg_last_error();
                    EXPECT_EQ(c.dst, tg_tensor_type(y));
                    EXPECT_EQ(shape_of(o->dst), shape_of(y));
                    std::vector<double> ref;
                    for (double x0 : v) ref.push_back(quantize(c.dst, x0));
                    EXPECT_TRUE(same(h.run_into(y, o), ref));
                }
}

std::vector<cpy_case> all_cpy_cases() {
    std::vector<cpy_case> cs;
    for (tg_type a : {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16})
        for (tg_type b : {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16}) cs.push_back({a, b});
    cs.push_back({TG_TYPE_I32, TG_TYPE_I32});
    return cs;
}
INSTANTIATE_TEST_SUITE_P(Types, Cpy, ::testing::ValuesIn(all_cpy_cases()),
                         [](const ::testing::TestParamInfo<cpy_case> &i) {
                             return std::string(type_str(i.param.src)) + "_to_" + type_str(i.param.dst);
                         });

// A later op reading the cpy result sees the converted values, in the same graph.
TEST(Cpy, LaterReaderSeesTheCopy) {
    std::mt19937 rng(5);
    harness h;
    std::vector<double> v;
    tg_tensor *x = h.rand_input(TG_TYPE_F32, {8, 3, 2, 1}, lay::permuted, rng, &v, -70000.0, 70000.0);
    tg_tensor *b = tg_new_tensor_2d(h.ctx, TG_TYPE_F16, 12, 4);
    tg_tensor *y = tg_cpy(h.ctx, x, b);
    tg_tensor *z = tg_cont(h.ctx, tg_reshape_4d(h.ctx, y, 8, 3, 2, 1));
    std::vector<double> ref;
    for (double x0 : v) ref.push_back(round_f16(x0));
    EXPECT_TRUE(same(h.run(z), ref));
}

// ---------------------------------------------------------------------------
// get_rows

class GetRows : public ::testing::TestWithParam<tg_type> {};

TEST_P(GetRows, GathersRowsOfEveryTableType) {
    const tg_type t = GetParam();
    const int64_t E = 7, V = 11;
    const shape id_shapes[] = {{5, 3, 2, 1}, {4, 1, 1, 1}, {1, 1, 1, 1}, {2, 1, 3, 1}};
    for (uint32_t seed : k_seeds)
        for (lay l : k_all_lays)
            for (const shape &ids_ne : id_shapes) {
                SCOPED_TRACE(std::string(lay_name(l)) + " ids " + shape_str(ids_ne) + " seed " +
                             std::to_string(seed));
                std::mt19937 rng(seed);
                harness h(seed);
                std::vector<double> tab;
                // the table in layout l too (its ne[2..3] are 1, so permuted is a transpose)
                tg_tensor *a = h.rand_input(t, {E, V, 1, 1}, l, rng, &tab, -3.0, 3.0);
                std::uniform_int_distribution<int> d(0, (int)V - 1);
                std::vector<double> ids((size_t)numel(ids_ne));
                for (auto &i : ids) i = d(rng);
                ids[0] = V - 1;
                if (ids.size() > 2) ids[1] = 0, ids[2] = V - 1;  // repeats and both ends
                tg_tensor *ix = h.input(TG_TYPE_I32, ids_ne, l == lay::contig ? lay::strided : l, ids);
                tg_tensor *y = tg_get_rows(h.ctx, a, ix);
                ASSERT_TRUE(y) << tg_last_error();
                EXPECT_EQ(TG_TYPE_F32, tg_tensor_type(y));
                const shape yne = {E, ids_ne[0], ids_ne[1], ids_ne[2]};
                EXPECT_EQ(yne, shape_of(y));
                std::vector<double> ref;
                for (double id : ids)
                    for (int64_t e = 0; e < E; e++) ref.push_back(tab[(size_t)(e + E * (int64_t)id)]);
                EXPECT_TRUE(same(h.run(y), ref));
            }
}

INSTANTIATE_TEST_SUITE_P(Types, GetRows, ::testing::Values(TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// Ids -1 or >= vocab: the compute fails with "[get_rows] ...", and neither the
// sink nor the output of the previous good run is touched.
TEST(GetRows, OutOfRangeIdsFailAndWriteNothing) {
    const int64_t E = 5, V = 9;
    const int32_t bad_ids[] = {-1, (int32_t)V, (int32_t)V + 7, INT32_MAX, INT32_MIN};
    for (lay l : {lay::contig, lay::permuted})
        for (int32_t bad : bad_ids) {
            SCOPED_TRACE(std::string(lay_name(l)) + " id " + std::to_string(bad));
            std::mt19937 rng((uint32_t)bad);
            harness h;
            std::vector<double> tab;
            tg_tensor *a = h.rand_input(TG_TYPE_F16, {E, V, 1, 1}, lay::contig, rng, &tab);
            const shape ids_ne = {3, 2, 1, 1};
            std::vector<double> ids = {1, 8, 0, 4, 4, 2};
            tg_tensor *ix = h.input(TG_TYPE_I32, ids_ne, l, ids);
            tg_tensor *y = tg_get_rows(h.ctx, a, ix);
            ASSERT_TRUE(y) << tg_last_error();
            sink *o = h.out(TG_TYPE_F32, shape_of(y));
            tg_tensor *c = tg_cpy(h.ctx, y, o->dst);
            tg_graph *g = h.graph(y, c);
            h.ready();
            ASSERT_EQ(TG_OK, tg_graph_compute(h.be, g)) << tg_last_error();
            std::vector<float> good((size_t)tg_nelements(y)), after(good.size());
            ASSERT_EQ(TG_OK, tg_tensor_get(y, good.data(), 0, good.size() * 4));

            // a bad id in the middle: the compute fails before anything is written
            ids[3] = bad;
            h.set(ix, ids);
            h.poison(o);
            EXPECT_TRUE(fails(tg_graph_compute(h.be, g), "[get_rows]"));
            EXPECT_TRUE(h.untouched(o));
            ASSERT_EQ(TG_OK, tg_tensor_get(y, after.data(), 0, after.size() * 4));
            EXPECT_EQ(0, memcmp(good.data(), after.data(), good.size() * 4)) << "the output was written";

            // fixed again, it computes again
            ids[3] = V - 1;
            h.set(ix, ids);
            ASSERT_EQ(TG_OK, tg_graph_compute(h.be, g)) << tg_last_error();
            std::vector<double> ref;
            for (double id : ids)
                for (int64_t e = 0; e < E; e++) ref.push_back(tab[(size_t)(e + E * (int64_t)id)]);
            EXPECT_TRUE(same(h.read(o), ref));
        }
}

// ---------------------------------------------------------------------------
// misuse: NULL result and "[op] ..." errors, never an abort

TEST(CopyMisuse, ContAndCpy) {
    harness h;
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 3);
    tg_tensor *b = tg_new_tensor_2d(h.ctx, TG_TYPE_F16, 4, 3);
    tg_tensor *c = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 5, 3);
    tg_tensor *i = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 3);
    EXPECT_TRUE(fails(tg_cont(h.ctx, nullptr), "[cont]"));
    EXPECT_TRUE(fails(tg_cont(nullptr, a), "[cont]"));
    EXPECT_TRUE(fails(tg_cpy(h.ctx, nullptr, b), "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(h.ctx, a, nullptr), "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(nullptr, a, b), "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(h.ctx, a, c), "[cpy]"));  // 12 vs 15 elements
    EXPECT_TRUE(fails(tg_cpy(h.ctx, a, i), "[cpy]"));  // f32 -> i32
    EXPECT_TRUE(fails(tg_cpy(h.ctx, i, a), "[cpy]"));  // i32 -> f32
    EXPECT_TRUE(tg_cpy(h.ctx, a, b)) << tg_last_error();
}

TEST(CopyMisuse, GetRows) {
    harness h;
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 10);
    tg_tensor *ids = tg_new_tensor_1d(h.ctx, TG_TYPE_I32, 3);
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, nullptr, ids), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, a, nullptr), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(nullptr, a, ids), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, a, tg_new_tensor_1d(h.ctx, TG_TYPE_F32, 3)), "[get_rows]"));  // f32 ids
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 10), ids), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, tg_new_tensor_3d(h.ctx, TG_TYPE_F32, 4, 10, 2), ids), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, tg_new_tensor_4d(h.ctx, TG_TYPE_F32, 4, 10, 1, 2), ids), "[get_rows]"));
    EXPECT_TRUE(fails(tg_get_rows(h.ctx, a, tg_new_tensor_4d(h.ctx, TG_TYPE_I32, 2, 2, 2, 2)), "[get_rows]"));
    EXPECT_TRUE(tg_get_rows(h.ctx, a, tg_new_tensor_3d(h.ctx, TG_TYPE_I32, 2, 2, 2))) << tg_last_error();
}

}  // namespace
