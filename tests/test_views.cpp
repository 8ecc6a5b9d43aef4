// test_views.cpp - view_1d..4d, reshape, permute, transpose: their metadata,
// what cont reads through them (against the bytes the test wrote), views of
// views and of intermediates, views out of bounds rejected (overflowing
// offsets and strides included), and shapes past 2^31 elements kept in 64 bits.
#include "op_util.h"

using namespace opu;

namespace {

// A 1-D root of n random values; bytes is its storage as the test wrote it.
struct root_data {
    tg_tensor *t;
    std::vector<double> vals;
    std::vector<uint8_t> bytes;
};
root_data make_root(harness &h, tg_type t, int64_t n, std::mt19937 &rng) {
    root_data r;
    r.vals = rand_vals(rng, t, n, -4.0, 4.0);
    r.t = h.input(t, {n, 1, 1, 1}, lay::contig, r.vals);
    const size_t es = tg_type_size(t);
    r.bytes.resize((size_t)n * es);
    for (int64_t i = 0; i < n; i++) store(t, &r.bytes[(size_t)i * es], r.vals[(size_t)i]);
    return r;
}
// What a view of ne, byte strides nb and byte offset reads from bytes (ne0 fastest).
std::vector<double> gather(const std::vector<uint8_t> &bytes, tg_type t, const shape &ne, const size_t nb[4],
                           size_t off) {
    std::vector<double> v;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++)
                for (int64_t i0 = 0; i0 < ne[0]; i0++)
                    v.push_back(load(t, &bytes[off + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3]]));
    return v;
}

class Views : public ::testing::TestWithParam<tg_type> {};

TEST_P(Views, ViewsReadTheBytesTheyName) {
    const tg_type t = GetParam();
    const size_t es = tg_type_size(t);
    std::mt19937 rng(3);
    harness h;
    root_data r = make_root(h, t, 240, rng);
    struct vcase {
        const char *what;
        tg_tensor *v;
        shape ne;
        size_t nb[4];
        size_t off;
    };
    std::vector<vcase> cs;
    auto add = [&](const char *what, tg_tensor *v, shape ne, size_t nb1, size_t nb2, size_t nb3, size_t off) {
        ASSERT_TRUE(v) << what << ": " << tg_last_error();
        cs.push_back({what, v, ne, {es, nb1, nb2, nb3}, off});
    };
    add("1d", tg_view_1d(h.ctx, r.t, 7, 3 * es), {7, 1, 1, 1}, 0, 0, 0, 3 * es);
    add("1d misaligned", tg_view_1d(h.ctx, r.t, 5, 3 * es + 1), {5, 1, 1, 1}, 0, 0, 0, 3 * es + 1);
    add("2d", tg_view_2d(h.ctx, r.t, 5, 4, 9 * es, 2 * es), {5, 4, 1, 1}, 9 * es, 0, 0, 2 * es);
    add("2d overlapping rows", tg_view_2d(h.ctx, r.t, 6, 5, 2 * es, 0), {6, 5, 1, 1}, 2 * es, 0, 0, 0);
    add("2d stride 0", tg_view_2d(h.ctx, r.t, 4, 3, 0, es), {4, 3, 1, 1}, 0, 0, 0, es);
    add("2d odd byte stride", tg_view_2d(h.ctx, r.t, 3, 4, 5 * es + 1, 1), {3, 4, 1, 1}, 5 * es + 1, 0, 0, 1);
    add("3d", tg_view_3d(h.ctx, r.t, 3, 2, 4, 7 * es, 20 * es, es), {3, 2, 4, 1}, 7 * es, 20 * es, 0, es);
    add("4d", tg_view_4d(h.ctx, r.t, 2, 3, 2, 2, 5 * es, 17 * es, 40 * es, 0), {2, 3, 2, 2}, 5 * es, 17 * es,
        40 * es, 0);
    add("4d last bytes", tg_view_4d(h.ctx, r.t, 4, 2, 2, 2, 6 * es, 15 * es, 31 * es, (240 - 56) * es),
        {4, 2, 2, 2}, 6 * es, 15 * es, 31 * es, (240 - 56) * es);
    // a view of a view: offsets add up, the strides are the new ones
    tg_tensor *v3 = tg_view_3d(h.ctx, r.t, 10, 4, 3, 12 * es, 50 * es, 6 * es);
    add("view of a view", tg_view_2d(h.ctx, v3, 3, 3, 50 * es, 13 * es), {3, 3, 1, 1}, 50 * es, 0, 0, 19 * es);
    for (const vcase &c : cs) {
        SCOPED_TRACE(c.what);
        EXPECT_EQ(c.ne, shape_of(c.v));
        EXPECT_EQ(es, tg_nb(c.v, 0));
        tg_tensor *y = tg_cont(h.ctx, c.v);
        EXPECT_TRUE(same(h.run(y), gather(r.bytes, t, c.ne, c.nb, c.off)));
    }
}

// A view of a permuted tensor counts bytes from its first element with
// element-contiguous rows, as ggml's views do: the source's strides do not carry.
TEST_P(Views, ViewOfPermutedUsesByteStrides) {
    const tg_type t = GetParam();
    const size_t es = tg_type_size(t);
    std::mt19937 rng(4);
    harness h;
    root_data r = make_root(h, t, 60, rng);
    tg_tensor *m = tg_reshape_2d(h.ctx, r.t, 6, 10);
    tg_tensor *mt = tg_transpose(h.ctx, m);  // {10, 6}, nb0 = 6 es
    tg_tensor *v = tg_view_2d(h.ctx, mt, 4, 3, 6 * es, 2 * es);
    ASSERT_TRUE(v) << tg_last_error();
    EXPECT_EQ(es, tg_nb(v, 0));
    const size_t nb[4] = {es, 6 * es, 0, 0};
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, v)), gather(r.bytes, t, {4, 3, 1, 1}, nb, 2 * es)));
}

TEST_P(Views, ReshapeKeepsElementOrder) {
    const tg_type t = GetParam();
    std::mt19937 rng(5);
    harness h;
    root_data r = make_root(h, t, 120, rng);
    const int64_t ne3[3] = {4, 5, 6};
    tg_tensor *a = tg_reshape_2d(h.ctx, r.t, 12, 10), *b = tg_reshape_3d(h.ctx, r.t, 2, 6, 10),
              *c = tg_reshape_4d(h.ctx, r.t, 3, 2, 5, 4), *d = tg_reshape(h.ctx, r.t, 3, ne3);
    ASSERT_TRUE(a && b && c && d) << tg_last_error();
    EXPECT_EQ((shape{3, 2, 5, 4}), shape_of(c));
    EXPECT_EQ(3, tg_n_dims(d));
    // reshape of a reshape, of a contiguous view at an offset, and of an intermediate
    tg_tensor *e = tg_reshape_2d(h.ctx, tg_reshape_4d(h.ctx, a, 2, 2, 3, 10), 40, 3);
    tg_tensor *f = tg_reshape_2d(h.ctx, tg_view_1d(h.ctx, r.t, 24, 7 * tg_type_size(t)), 6, 4);
    ASSERT_TRUE(e && f) << tg_last_error();
    for (tg_tensor *x : {a, b, c, d, e}) EXPECT_TRUE(same(h.run(tg_cont(h.ctx, x)), r.vals));
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, f)), std::vector<double>(r.vals.begin() + 7, r.vals.begin() + 31)));
    if (t == TG_TYPE_I32) return;
    tg_tensor *g = tg_reshape_3d(h.ctx, tg_scale(h.ctx, r.t, 2.0f), 5, 4, 6);
    std::vector<double> twice;
    for (double x : r.vals) twice.push_back(2.0 * x);
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, g)), twice));
}

// Every permutation of a 4-D tensor: metadata as ggml's, cont reads the
// element the axes name; permuting by the inverse gives the source back.
TEST_P(Views, AllPermutations) {
    const tg_type t = GetParam();
    std::mt19937 rng(6);
    harness h;
    const shape ne = {2, 3, 4, 5};
    std::vector<double> x;
    tg_tensor *a = h.rand_input(t, ne, lay::strided, rng, &x);
    int ax[4] = {0, 1, 2, 3};
    int n = 0;
    do {
        SCOPED_TRACE("axes " + std::to_string(ax[0]) + std::to_string(ax[1]) + std::to_string(ax[2]) +
                     std::to_string(ax[3]));
        tg_tensor *p = tg_permute(h.ctx, a, ax[0], ax[1], ax[2], ax[3]);
        ASSERT_TRUE(p) << tg_last_error();
        shape pne;
        for (int i = 0; i < 4; i++) {
            pne[ax[i]] = ne[i];
            EXPECT_EQ(tg_nb(a, i), tg_nb(p, ax[i]));
        }
        EXPECT_EQ(pne, shape_of(p));
        std::vector<double> ref;  // result index r; source index s[i] = r[ax[i]]
        int64_t r[4];
        for (r[3] = 0; r[3] < pne[3]; r[3]++)
            for (r[2] = 0; r[2] < pne[2]; r[2]++)
                for (r[1] = 0; r[1] < pne[1]; r[1]++)
                    for (r[0] = 0; r[0] < pne[0]; r[0]++)
                        ref.push_back(x[(size_t)flat(ne, r[ax[0]], r[ax[1]], r[ax[2]], r[ax[3]])]);
        EXPECT_TRUE(same(h.run(tg_cont(h.ctx, p), n % 2 == 0), ref));
        int inv[4];
        for (int i = 0; i < 4; i++) inv[ax[i]] = i;
        tg_tensor *back = tg_permute(h.ctx, p, inv[0], inv[1], inv[2], inv[3]);
        EXPECT_EQ(ne, shape_of(back));
        EXPECT_TRUE(same(h.run(tg_cont(h.ctx, back)), x));
        n++;
    } while (std::next_permutation(ax, ax + 4));
    EXPECT_EQ(24, n);
}

TEST_P(Views, TransposeAndContOfPermutedViews) {
    const tg_type t = GetParam();
    std::mt19937 rng(8);
    harness h;
    const shape ne = {5, 3, 2, 2};
    std::vector<double> x;
    tg_tensor *a = h.rand_input(t, ne, lay::misaligned, rng, &x);
    tg_tensor *at = tg_transpose(h.ctx, a);
    EXPECT_EQ((shape{3, 5, 2, 2}), shape_of(at));
    EXPECT_FALSE(tg_is_contiguous(at));
    std::vector<double> ref;
    for (int64_t i3 = 0; i3 < 2; i3++)
        for (int64_t i2 = 0; i2 < 2; i2++)
            for (int64_t i1 = 0; i1 < 5; i1++)
                for (int64_t i0 = 0; i0 < 3; i0++) ref.push_back(x[(size_t)flat(ne, i1, i0, i2, i3)]);
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, at)), ref));
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, tg_transpose(h.ctx, at))), x));  // twice: identity
    // cont of a transpose is contiguous and reshapes; cont(cont) is the same
    tg_tensor *c = tg_cont(h.ctx, at);
    EXPECT_TRUE(tg_is_contiguous(c));
    EXPECT_TRUE(same(h.run(tg_cont(h.ctx, tg_reshape_2d(h.ctx, c, 15, 4))), ref));
}

INSTANTIATE_TEST_SUITE_P(Types, Views, ::testing::Values(TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16, TG_TYPE_I32),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

// Views of intermediates: the planner keeps the viewed result alive for the
// view's readers (a transpose fed to mul_mat, a window fed to add).
TEST(Views, OfIntermediates) {
    std::mt19937 rng(10);
    harness h;
    const shape ne = {8, 6, 1, 1};
    std::vector<double> a, b;
    tg_tensor *ta = h.rand_input(TG_TYPE_F32, ne, lay::contig, rng, &a);
    tg_tensor *tb = h.rand_input(TG_TYPE_F32, ne, lay::permuted, rng, &b);
    tg_tensor *s = tg_add(h.ctx, ta, tb);  // {8, 6}
    tg_tensor *win = tg_view_2d(h.ctx, s, 3, 4, tg_nb(s, 1), 2 * 4 + tg_nb(s, 1));
    tg_tensor *y = tg_add(h.ctx, tg_scale(h.ctx, win, 3.0f), win);  // 4 * window
    tg_tensor *z = tg_mul_mat(h.ctx, tg_transpose(h.ctx, s), tg_transpose(h.ctx, s));  // s s^T... {8, 8}
    std::vector<double> sum;
    for (size_t i = 0; i < a.size(); i++) sum.push_back(a[i] + b[i]);
    std::vector<double> ry, rz;
    for (int64_t i1 = 1; i1 < 5; i1++)
        for (int64_t i0 = 2; i0 < 5; i0++) ry.push_back(4.0 * sum[(size_t)(i0 + 8 * i1)]);
    for (int64_t n = 0; n < 8; n++)
        for (int64_t m = 0; m < 8; m++) {
            double acc = 0.0;
            for (int64_t k = 0; k < 6; k++) acc += sum[(size_t)(m + 8 * k)] * sum[(size_t)(n + 8 * k)];
            rz.push_back(acc);
        }
    EXPECT_TRUE(close(h.run(y), ry, 1e-6));
    EXPECT_TRUE(close(h.run(z), rz, 1e-5));
}

// ---------------------------------------------------------------------------
// misuse: out of bounds, overflow, bad axes and counts

TEST(ViewsMisuse, OutOfBoundsRejected) {
    harness h;
    tg_tensor *r = tg_new_tensor_1d(h.ctx, TG_TYPE_F32, 16);  // 64 bytes
    EXPECT_TRUE(tg_view_1d(h.ctx, r, 16, 0)) << tg_last_error();
    EXPECT_TRUE(tg_view_1d(h.ctx, r, 1, 60)) << tg_last_error();
    EXPECT_TRUE(tg_view_2d(h.ctx, r, 4, 4, 16, 0)) << tg_last_error();
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 17, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 16, 4), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 1, 64), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 1, 61), "[view_1d]"));  // its last 1 byte past the end
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 1, SIZE_MAX), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 1, SIZE_MAX - 3), "[view_1d]"));  // offset + 4 wraps to 0
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, 0, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, -1, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, r, INT64_MAX, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_2d(h.ctx, r, 4, 4, 17, 0), "[view_2d]"));
    EXPECT_TRUE(fails(tg_view_2d(h.ctx, r, 4, 3, SIZE_MAX / 2 + 1, 0), "[view_2d]"));  // 2 * nb1 wraps
    EXPECT_TRUE(fails(tg_view_2d(h.ctx, r, 4, 0, 16, 0), "[view_2d]"));
    EXPECT_TRUE(fails(tg_view_3d(h.ctx, r, 2, 2, 3, 8, 32, 0), "[view_3d]"));
    EXPECT_TRUE(fails(tg_view_3d(h.ctx, r, 2, 2, 2, 8, 16, 36), "[view_3d]"));
    EXPECT_TRUE(fails(tg_view_4d(h.ctx, r, 2, 2, 2, 3, 8, 16, 24, 0), "[view_4d]"));
    EXPECT_TRUE(fails(tg_view_4d(h.ctx, r, 1, 1, 1, INT64_MAX, 4, 4, 4, 0), "[view_4d]"));
    EXPECT_TRUE(fails(tg_view_4d(h.ctx, r, 1, 1, 1, 2, 4, 4, SIZE_MAX, 0), "[view_4d]"));
    // a view of a view is bounded by the parent view, not by the root
    tg_tensor *half = tg_view_1d(h.ctx, r, 8, 0);
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, half, 9, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, half, 2, 28), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, nullptr, 1, 0), "[view_1d]"));
    EXPECT_TRUE(fails(tg_view_2d(h.ctx, nullptr, 1, 1, 4, 0), "[view_2d]"));
    EXPECT_TRUE(fails(tg_view_3d(h.ctx, nullptr, 1, 1, 1, 4, 4, 0), "[view_3d]"));
    EXPECT_TRUE(fails(tg_view_4d(h.ctx, nullptr, 1, 1, 1, 1, 4, 4, 4, 0), "[view_4d]"));
    EXPECT_TRUE(fails(tg_view_1d(nullptr, r, 1, 0), "[view_1d]"));
}

TEST(ViewsMisuse, ReshapePermuteTranspose) {
    harness h;
    tg_tensor *a = tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 6, 4);
    const int64_t ne_bad[2] = {5, 5}, ne_zero[2] = {0, 24}, ne_neg[2] = {-6, -4};
    EXPECT_TRUE(fails(tg_reshape_2d(h.ctx, a, 5, 5), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 2, ne_bad), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 2, ne_zero), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 2, ne_neg), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 0, ne_bad), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 5, ne_bad), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, a, 2, nullptr), "[reshape]"));
    EXPECT_STREQ(tg_last_error(), "[reshape] ne is NULL");  // was "n_dims 2 not in [1, 4]"
    EXPECT_TRUE(fails(tg_reshape_2d(h.ctx, tg_transpose(h.ctx, a), 4, 6), "[reshape]"));  // not contiguous
    EXPECT_TRUE(fails(tg_reshape_2d(h.ctx, tg_view_2d(h.ctx, a, 5, 4, 24, 0), 4, 5), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape_2d(h.ctx, nullptr, 4, 6), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape_3d(h.ctx, nullptr, 4, 3, 2), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape_4d(h.ctx, nullptr, 4, 3, 2, 1), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape(h.ctx, nullptr, 2, ne_bad), "[reshape]"));
    EXPECT_TRUE(fails(tg_reshape_2d(nullptr, a, 4, 6), "[reshape]"));
    EXPECT_TRUE(fails(tg_permute(h.ctx, a, 0, 0, 1, 2), "[permute]"));
    EXPECT_TRUE(fails(tg_permute(h.ctx, a, 0, 1, 2, 4), "[permute]"));
    EXPECT_TRUE(fails(tg_permute(h.ctx, a, -1, 1, 2, 3), "[permute]"));
    EXPECT_TRUE(fails(tg_permute(h.ctx, nullptr, 0, 1, 2, 3), "[permute]"));
    EXPECT_TRUE(fails(tg_permute(nullptr, a, 0, 1, 2, 3), "[permute]"));
    EXPECT_EQ(nullptr, tg_transpose(h.ctx, nullptr));  // transpose is a permute; either name will do
    EXPECT_TRUE(strncmp(tg_last_error(), "[transpose]", 11) == 0 || strncmp(tg_last_error(), "[permute]", 9) == 0)
        << tg_last_error();
}

// RELIABILITY 16: shapes past 2^31 elements stay exact in the metadata, views
// far past 4 GiB are placed and bounded in 64 bits, and counts that overflow
// int64 bytes are refused. Metadata only: nothing this size is allocated.
TEST(Views, ShapesPast2To31Elements) {
    harness h;
    tg_tensor *big = tg_new_tensor_4d(h.ctx, TG_TYPE_F16, 65536, 65536, 3, 1);  // 3 * 2^32 elements
    ASSERT_TRUE(big) << tg_last_error();
    EXPECT_EQ(3LL << 32, tg_nelements(big));
    EXPECT_EQ((size_t)3 << 33, tg_nbytes(big));
    EXPECT_EQ((size_t)1 << 33, tg_nb(big, 2));
    tg_tensor *r = tg_reshape_2d(h.ctx, big, 3LL << 31, 2);
    ASSERT_TRUE(r) << tg_last_error();
    EXPECT_EQ(3LL << 31, tg_ne(r, 0));
    tg_tensor *v = tg_view_1d(h.ctx, big, 7, ((size_t)3 << 33) - 14);  // the last 7 elements
    ASSERT_TRUE(v) << tg_last_error();
    EXPECT_TRUE(fails(tg_view_1d(h.ctx, big, 8, ((size_t)3 << 33) - 14), "[view_1d]"));
    tg_tensor *p = tg_permute(h.ctx, big, 2, 0, 1, 3);
    ASSERT_TRUE(p);
    EXPECT_EQ((shape{65536, 3, 65536, 1}), shape_of(p));  // source dim i is result dim axis_i
    EXPECT_EQ((size_t)1 << 17, tg_nb(p, 0));
    EXPECT_EQ((size_t)1 << 33, tg_nb(p, 1));
    EXPECT_EQ(3LL << 32, tg_nelements(tg_add(h.ctx, big, tg_new_tensor_1d(h.ctx, TG_TYPE_F32, 65536))));
    tg_tensor *mm = tg_mul_mat(h.ctx, tg_new_tensor_2d(h.ctx, TG_TYPE_BF16, 4, 1LL << 32),
                               tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 4, 3));
    ASSERT_TRUE(mm) << tg_last_error();
    EXPECT_EQ(3LL << 32, tg_nelements(mm));
    EXPECT_TRUE(fails(tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 1LL << 62, 4), "[new_tensor]"));
    EXPECT_TRUE(fails(tg_new_tensor_4d(h.ctx, TG_TYPE_F32, INT64_MAX, 2, 1, 1), "[new_tensor]"));
}

}  // namespace
