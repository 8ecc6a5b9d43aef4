// test_cuda_attn_pre.cpp - attention decode reading cache rows before its
// wait for the kernel before (cuda/attention_cluster.cu, attention_split.cu,
// tg_cuda_attention_rows_pre in cuda/fuse.cu).
//
// A decode graph as a llama builds it: rope_kv_update(k_cache, v_cache, k,
// v, pos), then attention(q, the update, v_cache, pos). Its only writer of
// the caches is that update at the attention's own positions, so the kernels
// may read the rows below a sequence's least position while the update still
// runs (the cluster kernel copies them into shared memory, the split kernel
// holds a K row in registers). The graph runs several steps, each with new
// q, k, v and positions (a plain run, a captured run, then replays of the
// capture: the rows read early were written by the runs before), the new
// keys made to dominate their queries' softmax, on the split and the
// cluster kernels (knob attn_split 1 and 2); every step's output is checked
// against a float64
// oracle that applies the same updates to a mirror of the caches. Positions
// are out of order within a sequence and differ between sequences, so the
// row at a position is both below another sequence's least position and the
// newest row of its own. The path's name says whether the early reads were
// taken ("/pre"); with a second node writing the K cache (a copy into a row
// the queries read) or with the early reads masked off (knob pdl_mask) they
// are not, and the results are the same. Outputs are poisoned before each
// compute (the compute buffer by a memset, the sink's rows by NaN) and a
// sentinel follows the sink.
// TG_TEST_SMALL=1 shrinks the cache (compute-sanitizer).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "internal.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

#ifdef TG_HAVE_CUDA

using tgt::small;

struct pre_case {
    const char *name;
    int D, Hq, Hkv, T, B, L;
    tg_type ct;              // cache type
    std::vector<int> p0;     // first step's positions, T per sequence (the next steps add T each)
    bool other_writer;       // a copy into the K cache's row 1 of sequence 0 too: no early reads
};
void PrintTo(const pre_case &c, std::ostream *os) { *os << c.name; }

constexpr int kTail = 23, kSteps = 4;

// The float64 mirror: caches as stored (rounded to the cache type), the
// update's rotation (interleaved pairs, base 10000) and attention.
struct mirror {
    const pre_case &c;
    std::vector<double> k, v;  // {D, Hkv, L, B}
    explicit mirror(const pre_case &cc) : c(cc) {}
    double rounded(double x) const {
        tgt::store s(c.ct, 1);
        s.set(0, (float)x);
        return s.get(0);
    }
    size_t at(int d, int h, int l, int b) const { return (size_t)d + (size_t)c.D * (h + (size_t)c.Hkv * (l + (size_t)c.L * b)); }
    void update(const std::vector<float> &kn, const std::vector<float> &vn, const std::vector<int> &pos) {
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < c.T; t++) {
                const int p = pos[(size_t)b * c.T + t];
                for (int h = 0; h < c.Hkv; h++) {
                    const size_t in = (size_t)c.D * (h + (size_t)c.Hkv * (t + (size_t)c.T * b));
                    for (int i = 0; i < c.D / 2; i++) {
                        const double th = p * std::pow(10000.0, -2.0 * i / c.D), cs = std::cos(th), sn = std::sin(th);
                        const double xe = kn[in + 2 * i], xo = kn[in + 2 * i + 1];
                        k[at(2 * i, h, p, b)] = rounded(xe * cs - xo * sn);
                        k[at(2 * i + 1, h, p, b)] = rounded(xe * sn + xo * cs);
                    }
                    for (int d = 0; d < c.D; d++) v[at(d, h, p, b)] = rounded(vn[in + d]);
                }
            }
    }
    std::vector<double> attention(const std::vector<float> &q, const std::vector<int> &pos, double scale) const {
        std::vector<double> out((size_t)c.D * c.Hq * c.T * c.B, 0.0);
        const int group = c.Hq / c.Hkv;
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < c.T; t++)
                for (int h = 0; h < c.Hq; h++) {
                    const int n = std::min(pos[(size_t)b * c.T + t] + 1, c.L), hk = h / group;
                    const size_t qo = (size_t)c.D * (h + (size_t)c.Hq * (t + (size_t)c.T * b));
                    std::vector<double> s((size_t)n);
                    double mx = -INFINITY, l = 0.0;
                    for (int j = 0; j < n; j++) {
                        double dot = 0.0;
                        for (int d = 0; d < c.D; d++) dot += (double)q[qo + d] * k[at(d, hk, j, b)];
                        s[(size_t)j] = dot * scale;
                        mx = std::max(mx, s[(size_t)j]);
                    }
                    for (int j = 0; j < n; j++) l += (s[(size_t)j] = std::exp(s[(size_t)j] - mx));
                    for (int j = 0; j < n; j++)
                        for (int d = 0; d < c.D; d++) out[qo + d] += s[(size_t)j] / l * v[at(d, hk, j, b)];
                }
        return out;
    }
};

// New keys that dominate their own queries' softmax: key (hk, t, b) is, once
// rotated to its position, 6 times the mean of the group's queries of token
// t (a score of ~16 against ~1 for a random row), so an output that misses
// the new row, or reads it before the update wrote it, is far off.
std::vector<float> dominant_keys(const pre_case &c, const std::vector<float> &q, const std::vector<int> &pos) {
    std::vector<float> k((size_t)c.D * c.Hkv * c.T * c.B);
    const int group = c.Hq / c.Hkv;
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++)
            for (int hk = 0; hk < c.Hkv; hk++) {
                std::vector<double> m((size_t)c.D, 0.0);
                for (int h = hk * group; h < (hk + 1) * group; h++)
                    for (int d = 0; d < c.D; d++) m[(size_t)d] += 6.0 / group * q[(size_t)d + (size_t)c.D * (h + (size_t)c.Hq * (t + (size_t)c.T * b))];
                const int p = pos[(size_t)b * c.T + t];
                float *out = &k[(size_t)c.D * (hk + (size_t)c.Hkv * (t + (size_t)c.T * b))];
                for (int i = 0; i < c.D / 2; i++) {  // the rotation by -p: the update's by p gives m back
                    const double th = p * std::pow(10000.0, -2.0 * i / c.D), cs = std::cos(th), sn = std::sin(th);
                    const double e = m[(size_t)2 * i], o = m[(size_t)2 * i + 1];
                    out[2 * i] = (float)(e * cs + o * sn);
                    out[2 * i + 1] = (float)(o * cs - e * sn);
                }
            }
    return k;
}

struct CudaAttnPre : ::testing::TestWithParam<pre_case> {};

// knob: attn_split (1 split and combine, 2 cluster); mask: the early reads off
void run_case(const pre_case &c, int knob, bool mask) {
    SCOPED_TRACE(std::string(knob == 1 ? "split" : "cluster") + (mask ? ", early reads masked" : ""));
    tg_backend *gpu = tg_backend_cuda(0);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> g1(gpu, tg_backend_free);
    ASSERT_NE(gpu, nullptr) << tg_last_error();
    tg_cuda_knobs(gpu)->attn_split = knob;
    if (mask) tg_cuda_knobs(gpu)->pdl_mask = 1 << TG_CUDA_PDL_ATTN_PRE;
    tg_context *ctx = tg_init({64 * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true});
    std::unique_ptr<tg_context, void (*)(tg_context *)> cg(ctx, tg_free);
    tg_tensor *q = tg_new_tensor_4d(ctx, TG_TYPE_F32, c.D, c.Hq, c.T, c.B);
    tg_tensor *kn = tg_new_tensor_4d(ctx, TG_TYPE_F32, c.D, c.Hkv, c.T, c.B);
    tg_tensor *vn = tg_new_tensor_4d(ctx, TG_TYPE_F32, c.D, c.Hkv, c.T, c.B);
    tg_tensor *pos = tg_new_tensor_2d(ctx, TG_TYPE_I32, c.T, c.B);
    tg_tensor *kc = tg_new_tensor_4d(ctx, c.ct, c.D, c.Hkv, c.L, c.B);
    tg_tensor *vc = tg_new_tensor_4d(ctx, c.ct, c.D, c.Hkv, c.L, c.B);
    tg_tensor *row = tg_new_tensor_1d(ctx, c.ct, (int64_t)c.D * c.Hkv);
    tg_rope_params rp = tg_rope_default_params(c.D);
    rp.base = 10000.0f;
    tg_tensor *kw = tg_rope_kv_update(ctx, kc, vc, kn, vn, pos, nullptr, nullptr, &rp);
    ASSERT_NE(kw, nullptr) << tg_last_error();
    tg_graph *gr = tg_graph_new(ctx);
    if (c.other_writer)  // row 1 of sequence 0, before the update and the attention
        ASSERT_EQ(tg_graph_expand(gr, tg_cpy(ctx, row, tg_view_1d(ctx, kc, (int64_t)c.D * c.Hkv, kc->nb[2]))), TG_OK);
    tg_tensor *o = tg_attention(ctx, q, kw, vc, pos, 0.125f);
    ASSERT_NE(o, nullptr) << tg_last_error();
    const int64_t n = tg_nelements(o);
    tg_tensor *sink = tg_new_tensor_1d(ctx, TG_TYPE_F32, n + kTail);
    ASSERT_EQ(tg_graph_expand(gr, tg_cpy(ctx, o, tg_view_1d(ctx, sink, n, 0))), TG_OK) << tg_last_error();
    tg_buffer *buf = tg_backend_alloc(gpu, ctx);
    ASSERT_NE(buf, nullptr) << tg_last_error();
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> bg(buf, tg_buffer_free);
    tg_graph_stats st{};
    ASSERT_EQ(tg_graph_plan(gr, &st), TG_OK) << tg_last_error();

    std::mt19937 rng(31 + c.D + c.T);
    mirror m(c);
    const size_t cache = (size_t)c.D * c.Hkv * c.L * c.B;
    std::vector<float> k0 = tgt::random_floats(rng, cache), v0 = tgt::random_floats(rng, cache);
    std::vector<float> r0 = tgt::random_floats(rng, (size_t)c.D * c.Hkv, -3.0f, 3.0f);
    ASSERT_EQ(tgt::upload(kc, k0), TG_OK);
    ASSERT_EQ(tgt::upload(vc, v0), TG_OK);
    ASSERT_EQ(tgt::upload(row, r0), TG_OK);
    m.k.resize(cache), m.v.resize(cache);
    for (size_t i = 0; i < cache; i++) m.k[i] = m.rounded(k0[i]), m.v[i] = m.rounded(v0[i]);
    if (c.other_writer)
        for (int d = 0; d < c.D * c.Hkv; d++) m.k[(size_t)c.D * c.Hkv + d] = m.rounded(r0[(size_t)d]);
    std::vector<uint32_t> tail(kTail);
    for (auto &t : tail) t = (uint32_t)rng();
    long long replays0 = 0, replays1 = 0;
    tg_cuda_graph_counts(gpu, nullptr, &replays0);
    for (int step = 0; step < kSteps; step++) {
        SCOPED_TRACE("step " + std::to_string(step));
        std::vector<int> p = c.p0;
        for (int &x : p) x += step * c.T;
        const std::vector<float> qv = tgt::random_floats(rng, (size_t)c.D * c.Hq * c.T * c.B, -2.0f, 2.0f);
        const std::vector<float> kv = dominant_keys(c, qv, p);
        const std::vector<float> vv = tgt::random_floats(rng, (size_t)c.D * c.Hkv * c.T * c.B);
        ASSERT_EQ(tgt::upload(q, qv), TG_OK);
        ASSERT_EQ(tgt::upload(kn, kv), TG_OK);
        ASSERT_EQ(tgt::upload(vn, vv), TG_OK);
        ASSERT_EQ(tg_tensor_set(pos, p.data(), 0, p.size() * 4), TG_OK);
        std::vector<uint32_t> init((size_t)n, 0x7fc00000u);
        init.insert(init.end(), tail.begin(), tail.end());
        ASSERT_EQ(tg_tensor_set(sink, init.data(), 0, init.size() * 4), TG_OK);
        if (gpu->compute_buf) ASSERT_EQ(gpu->iface->memset(gpu, gpu->compute_buf, 0xff, gpu->compute_size), TG_OK);
        ASSERT_EQ(tg_graph_compute(gpu, gr), TG_OK) << tg_last_error();
        std::string path = tg_cuda_sig_last(gpu, TG_CUDA_SIG_ATTN);
        // the split kernel's compile-time head-dim instance (env TG_CUDA_ATTN_SPLIT_DC=1) is the same path
        if (path.size() > 3 && path.compare(path.size() - 3, 3, "/dc") == 0) path.resize(path.size() - 3);
        const bool clusters = tg_cuda_attention_clusters(gpu);
        const std::string want = knob == 2 && clusters ? "cluster" : "split";
        EXPECT_EQ(path, want + (mask || c.other_writer ? "" : "/pre")) << c.name;
        std::vector<uint32_t> back((size_t)n + kTail);
        ASSERT_EQ(tg_tensor_get(sink, back.data(), 0, back.size() * 4), TG_OK);
        EXPECT_EQ(memcmp(back.data() + n, tail.data(), kTail * 4), 0) << "the sink's tail was overwritten";
        std::vector<float> got((size_t)n);
        memcpy(got.data(), back.data(), (size_t)n * 4);
        m.update(kv, vv, p);
        const std::vector<double> ref = m.attention(qv, p, 0.125);
        const double tol = c.ct == TG_TYPE_F32 ? 1e-5 : c.ct == TG_TYPE_F16 ? 2e-3 : 1e-2;
        EXPECT_LE(tgt::rel_error(got, ref), tol) << c.name;  // NaN gives +inf
    }
    tg_cuda_graph_counts(gpu, nullptr, &replays1);
    EXPECT_GE(replays1 - replays0, 1) << "the graph was never replayed";
}

TEST_P(CudaAttnPre, MatchesTheOracleStepByStep) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    pre_case c = GetParam();
    if (small()) {  // each sequence's positions moved down, in order, to end below the shorter cache
        c.L = std::min(c.L, 160);
        for (int b = 0; b < c.B; b++) {
            int *p = &c.p0[(size_t)b * c.T];
            const int over = *std::max_element(p, p + c.T) - (c.L - 1 - kSteps * c.T);
            if (over > 0)
                for (int t = 0; t < c.T; t++) p[t] -= over;
        }
    }
    for (int knob : {1, 2}) {
        run_case(c, knob, false);
        if (HasFatalFailure()) return;
    }
    for (int knob : {1, 2}) {
        run_case(c, knob, true);
        if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaAttnPre,
    ::testing::Values(
        // the 1.1B llama's layer: 32/8 heads of 64, F16, one token
        pre_case{"llama1b_f16", 64, 32, 8, 1, 1, 1152, TG_TYPE_F16, {600}, false},
        // two sequences far apart (rows 40..100 are early for sequence 1 only), 3 tokens out of order
        pre_case{"f32_b2_t3", 64, 8, 2, 3, 2, 512, TG_TYPE_F32, {42, 40, 41, 300, 302, 301}, false},
        // near the start: the first tile holds the new rows; BF16, head dim 128
        pre_case{"bf16_start_d128", 128, 8, 4, 1, 2, 320, TG_TYPE_BF16, {3, 90}, false},
        // another node writes the K cache: no early reads
        pre_case{"other_writer_f16", 64, 8, 2, 1, 1, 512, TG_TYPE_F16, {200}, true}),
    [](const ::testing::TestParamInfo<pre_case> &i) { return std::string(i.param.name); });

#else
TEST(CudaAttnPre, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
