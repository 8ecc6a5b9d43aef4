// test_cuda_rope_fold.cpp - rope(q) and rope_kv_update(k, v) folded into the
// epilogue of the q/k/v GEMV launch (cuda/fuse.cu plan_rope, cuda/mmv.cuh
// tg_cuda_mmv_rope).
//
// An attention block's front (optionally rms_norm * w, then q/k/v products
// of one b, reshaped to heads, rope of q, rope_kv_update of k and v into
// caches at positions) runs on CUDA three ways: fused with the rope folded
// (the default), fused with knob rope_fold 1 (the rope pair kernel after the
// same GEMV launch) and unfused; and on the CPU backend. The fold computes
// the pair kernel's rotations from the same sums, so the rotated q, both
// caches and the raw products read by a later node are the same bits as the
// pair's; unfused they are the same bits too without a norm (the fused GEMV
// sums in the unfused order), within 1e-5 with the folded norm; against the
// CPU within 1e-4 (quantized weights 3e-2, F16/BF16 caches by their
// rounding). Caches start random, and every cache row no position names
// must come back bit-identical. A bad position (past the cache, or repeated
// within a sequence) fails the compute with the unfused update's message and
// leaves both caches as they were; with two blocks of the same positions in
// one graph the second takes the graph's pre-check and only reads the error
// record. With an attention node reading the caches, the fold (knob rope_fold
// 0) declines where that attention takes the cluster kernel (knob 2 folds
// anyway). Layouts the fold does not take (NEOX pairs, an odd head dim, F32
// weights off the 16-byte path) fall back to the pair kernel. Every compute
// but the failing ones runs four times (plain; plain again where the first
// grew the backend's scratch, as quantized products do; captured; replayed;
// the compute buffer poisoned by a memset each time; a replay is asserted):
// the cache writes are idempotent. Positions written by a node of the graph, 6
// columns and a head dim of 10 have cases of their own.
// TG_TEST_SMALL=1 shrinks the shapes (compute-sanitizer).
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

struct fold_case {
    const char *name;
    tg_type wt;
    int K, Hq, Hkv, D, T, B;
    int n_rot;          // 0: D
    tg_type kt, vt;     // cache types
    bool norm;          // rms_norm * w before the products (folded into the same launch)
    int groups;         // 1, or 2 blocks at the same positions (the second pre-checked)
    bool raw_out;       // k's product also read by a later node
    tg_rope_mode mode;  // NEOX: the fold declines
    bool folds;         // expected: the rope folded
    int attn_L = 0;     // > 0: caches of that many rows and an attention node reading them
    bool pos_node = false;  // positions written by a node of the graph (a copy): read after the products
    int mmv_rows = 0;       // GEMV knob mmv_rows (rows per group forced)
};
// cache rows
int rows(const fold_case &c) { return c.attn_L > 0 ? c.attn_L : 48; }
void PrintTo(const fold_case &c, std::ostream *os) { *os << c.name; }

constexpr int kTail = 29;

// Inputs of one case: x, norm weight, then per group wq, wk, wv, K cache, V cache
struct fold_data {
    fold_case c;
    std::vector<float> x, nw;
    std::vector<std::vector<float>> w[2], kc[2], vc[2];
    std::vector<int32_t> pos;
};

fold_data make_data(const fold_case &c, unsigned seed) {
    fold_data d;
    d.c = c;
    std::mt19937 rng(seed);
    const size_t N = (size_t)c.T * c.B, K = (size_t)c.K;
    d.x = tgt::random_floats(rng, K * N, -2.0f, 2.0f);
    d.nw = tgt::random_floats(rng, K, 0.8f, 1.2f);
    const float s = 1.0f / std::sqrt((float)c.K);
    for (int g = 0; g < c.groups; g++) {
        for (int h : {c.Hq, c.Hkv, c.Hkv}) d.w[g].push_back(tgt::random_floats(rng, K * h * c.D, -s, s));
        const size_t cache = (size_t)c.D * c.Hkv * rows(c) * c.B;
        d.kc[g].push_back(tgt::random_floats(rng, cache));
        d.vc[g].push_back(tgt::random_floats(rng, cache));
    }
    // distinct positions per sequence, spread over the cache
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++) d.pos.push_back((int32_t)((7 + 11 * t + 5 * b) % rows(c)));
    return d;
}

struct fold_out {
    tg_status st = TG_OK;
    std::string err;
    std::vector<float> q[2], raw;                 // rotated q per group, 2 * k's product (group 0)
    std::vector<uint8_t> kc[2], vc[2];            // the caches' bytes
    bool tails_ok = true;
    int fusions[TG_CUDA_FUSION_KINDS] = {};
    long long replays = 0;  // CUDA-graph replays among the computes
};

fold_out run(tg_backend *be, const fold_data &d, int reps) {
    const fold_case &c = d.c;
    fold_out r;
    tg_context *ctx = tg_init({128 * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true});
    std::unique_ptr<tg_context, void (*)(tg_context *)> cg(ctx, tg_free);
    const int64_t N = (int64_t)c.T * c.B, nq = (int64_t)c.Hq * c.D * N;
    tg_tensor *x = tg_new_tensor_3d(ctx, TG_TYPE_F32, c.K, c.T, c.B);
    tg_tensor *nw = tg_new_tensor_1d(ctx, TG_TYPE_F32, c.K);
    tg_tensor *pos_in = tg_new_tensor_2d(ctx, TG_TYPE_I32, c.T, c.B);
    tg_tensor *pos = c.pos_node ? tg_cpy(ctx, pos_in, tg_new_tensor_2d(ctx, TG_TYPE_I32, c.T, c.B)) : pos_in;
    tg_tensor *b = c.norm ? tg_mul(ctx, tg_rms_norm(ctx, x, 1e-5f), nw) : x;
    tg_rope_params rp = tg_rope_default_params(c.n_rot ? c.n_rot : c.D);
    rp.mode = c.mode;
    rp.base = 10000.0f;
    tg_tensor *w[2][3], *kc[2], *vc[2], *sink[3] = {};
    // outputs: the rotated q of each group, 2 * k's product (raw_out), the updates
    std::vector<tg_tensor *> outs, kvs;
    for (int g = 0; g < c.groups; g++) {
        const int heads[3] = {c.Hq, c.Hkv, c.Hkv};
        tg_tensor *h[3], *mm[3];
        for (int j = 0; j < 3; j++) {
            w[g][j] = tg_new_tensor_2d(ctx, c.wt, c.K, (int64_t)heads[j] * c.D);
            mm[j] = tg_mul_mat(ctx, w[g][j], b);
            h[j] = tg_reshape_4d(ctx, mm[j], c.D, heads[j], c.T, c.B);
        }
        kc[g] = tg_new_tensor_4d(ctx, c.kt, c.D, c.Hkv, rows(c), c.B);
        vc[g] = tg_new_tensor_4d(ctx, c.vt, c.D, c.Hkv, rows(c), c.B);
        outs.push_back(tg_rope(ctx, h[0], pos, &rp));
        kvs.push_back(tg_rope_kv_update(ctx, kc[g], vc[g], h[1], h[2], pos, nullptr, nullptr, &rp));
        if (c.attn_L > 0) kvs.push_back(tg_attention(ctx, outs.back(), kvs.back(), vc[g], pos, 0.125f));
        if (g == 0 && c.raw_out) kvs.insert(kvs.begin(), tg_scale(ctx, mm[1], 2.0f));  // after the fused nodes
    }
    outs.insert(outs.end(), kvs.begin(), kvs.end());
    tg_graph *gr = tg_graph_new(ctx);
    const int nsink = c.groups + (c.raw_out ? 1 : 0);
    for (int o = 0; o < (int)outs.size(); o++) {
        if (outs[o] && o < nsink) {
            const int64_t n = o < c.groups ? nq : (int64_t)c.Hkv * c.D * N;
            sink[o] = tg_new_tensor_1d(ctx, TG_TYPE_F32, n + kTail);
            outs[o] = tg_cpy(ctx, outs[o], tg_view_1d(ctx, sink[o], n, 0));
        }
        EXPECT_EQ(tg_graph_expand(gr, outs[o]), TG_OK) << tg_last_error();
    }
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    EXPECT_NE(buf, nullptr) << tg_last_error();
    if (!buf) return (r.st = TG_ERR_ARG), r;
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> bg(buf, tg_buffer_free);
    EXPECT_EQ(tgt::upload(x, d.x), TG_OK);
    EXPECT_EQ(tgt::upload(nw, d.nw), TG_OK);
    EXPECT_EQ(tg_tensor_set(pos_in, d.pos.data(), 0, d.pos.size() * 4), TG_OK);
    for (int g = 0; g < c.groups; g++) {
        for (int j = 0; j < 3; j++) EXPECT_EQ(tgt::upload(w[g][j], d.w[g][j]), TG_OK) << tg_last_error();
        EXPECT_EQ(tgt::upload(kc[g], d.kc[g][0]), TG_OK);
        EXPECT_EQ(tgt::upload(vc[g], d.vc[g][0]), TG_OK);
    }
    std::vector<uint32_t> tail(kTail);
    std::mt19937 trng(5);
    for (auto &t : tail) t = (uint32_t)trng();
    for (int o = 0; o < nsink; o++) {
        std::vector<uint32_t> init(tg_nelements(sink[o]) - kTail, 0x7fc00000u);
        init.insert(init.end(), tail.begin(), tail.end());
        EXPECT_EQ(tg_tensor_set(sink[o], init.data(), 0, init.size() * 4), TG_OK);
    }
    tg_graph_stats st{};
    EXPECT_EQ(tg_graph_plan(gr, &st), TG_OK) << tg_last_error();
    const bool dev = be->mem == TG_MEM_DEVICE;
    long long replays0 = 0, replays1 = 0;
    if (dev) tg_cuda_graph_counts(be, nullptr, &replays0);
    for (int rep = 0; rep < reps && r.st == TG_OK; rep++) {
        // poisoned by a memset, not a graph of its own: the backend then sees
        // this graph twice in a row and captures it, then replays it
        if (dev && be->compute_buf)
            EXPECT_EQ(be->iface->memset(be, be->compute_buf, 0xff, be->compute_size), TG_OK);
        else if (!dev)
            tgt::poison_compute_buffer(be, st.planned_bytes);
        r.st = tg_graph_compute(be, gr);
        if (r.st != TG_OK) r.err = tg_last_error();
    }
    if (dev) {
        tg_cuda_fusions_last(be, r.fusions);
        tg_cuda_graph_counts(be, nullptr, &replays1);
        r.replays = replays1 - replays0;
    }
    for (int o = 0; o < nsink; o++) {
        std::vector<uint32_t> back(tg_nelements(sink[o]));
        EXPECT_EQ(tg_tensor_get(sink[o], back.data(), 0, back.size() * 4), TG_OK);
        const size_t n = back.size() - kTail;
        r.tails_ok = r.tails_ok && memcmp(back.data() + n, tail.data(), kTail * 4) == 0;
        std::vector<float> &f = o < c.groups ? r.q[o] : r.raw;
        f.resize(n);
        memcpy(f.data(), back.data(), n * 4);
    }
    for (int g = 0; g < c.groups; g++) {
        r.kc[g].resize(tg_nbytes(kc[g])), r.vc[g].resize(tg_nbytes(vc[g]));
        EXPECT_EQ(tg_tensor_get(kc[g], r.kc[g].data(), 0, r.kc[g].size()), TG_OK);
        EXPECT_EQ(tg_tensor_get(vc[g], r.vc[g].data(), 0, r.vc[g].size()), TG_OK);
    }
    return r;
}

// The bytes a cache holds before any compute (the uploaded values in its type)
std::vector<uint8_t> cache_bytes(tg_type t, const std::vector<float> &v) {
    tgt::store st(t, v.size());
    for (size_t i = 0; i < v.size(); i++) st.set(i, v[i]);
    return st.b;
}

// Rows of the cache that no position names are the initial bytes; the named
// rows are finite and within tol of the CPU's values.
void check_cache(const fold_data &d, tg_type t, const std::vector<float> &init, const std::vector<uint8_t> &got,
                 const std::vector<uint8_t> &cpu, const char *what) {
    const fold_case &c = d.c;
    const std::vector<uint8_t> ib = cache_bytes(t, init);
    ASSERT_EQ(got.size(), ib.size());
    ASSERT_EQ(cpu.size(), ib.size());
    const size_t es = tg_type_size(t), row = (size_t)c.D * c.Hkv * es;
    std::vector<float> gw, cw;
    tgt::store gs(t), cs(t);
    gs.b = got, cs.b = cpu;
    for (int b = 0; b < c.B; b++)
        for (int l = 0; l < rows(c); l++) {
            bool named = false;
            for (int tt = 0; tt < c.T; tt++) named = named || d.pos[(size_t)b * c.T + tt] == l;
            const size_t off = ((size_t)b * rows(c) + l) * row;
            if (!named) {
                ASSERT_EQ(memcmp(&got[off], &ib[off], row), 0) << what << ": row " << l << " of sequence " << b
                                                                << " changed, no position names it";
                continue;
            }
            for (size_t e = off / es; e < (off + row) / es; e++) gw.push_back(gs.get(e)), cw.push_back(cs.get(e));
        }
    for (float v : gw) ASSERT_TRUE(std::isfinite(v)) << what;
    const bool quant = tg_type_is_quantized(c.wt);
    const double tol = std::max(quant ? 3e-2 : 1e-4, t == TG_TYPE_BF16 ? 1e-2 : t == TG_TYPE_F16 ? 2e-3 : 0.0);
    EXPECT_LE(tgt::rel_error(gw, std::vector<double>(cw.begin(), cw.end())), tol) << what << " vs the CPU";
}

struct CudaRopeFold : ::testing::TestWithParam<fold_case> {};

TEST_P(CudaRopeFold, SameBitsAsThePairKernel) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    fold_case c = GetParam();
    if (small()) c.K = c.K > 256 ? 256 : c.K, c.Hq = c.Hq > 8 ? 8 : c.Hq, c.Hkv = c.Hkv > 4 ? 4 : c.Hkv;
    tg_backend *gpu = tg_backend_cuda(0), *cpu = tg_backend_cpu(2);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> g1(gpu, tg_backend_free), g2(cpu, tg_backend_free);
    ASSERT_TRUE(gpu && cpu) << tg_last_error();
    const fold_data d = make_data(c, 17 + c.K + c.D);
    tg_cuda_knobs(gpu)->mmv_rows = c.mmv_rows;  // every run below
    // (with an attention node after the update, knob 2: auto declines where
    // the attention takes the cluster kernel, checked below)
    tg_cuda_knobs(gpu)->rope_fold = c.attn_L > 0 ? 2 : 0;
    const fold_out fold = run(gpu, d, 4);
    tg_cuda_knobs(gpu)->rope_fold = 1;
    const fold_out pair = run(gpu, d, 4);
    tg_cuda_knobs(gpu)->rope_fold = 0;
    const fold_out au = run(gpu, d, 1);
    tg_cuda_set_fuse(gpu, false);
    const fold_out plain = run(gpu, d, 4);
    tg_cuda_set_fuse(gpu, true);
    const fold_out ref = run(cpu, d, 1);
    if (HasFatalFailure()) return;
    if (c.attn_L > 0) {  // a cache of one tile per cluster block: the cluster kernel where the device has clusters
        EXPECT_EQ(au.fusions[6], tg_cuda_attention_clusters(gpu) ? 0 : c.groups) << "auto folded before the cluster kernel";
        EXPECT_EQ(au.kc[0], pair.kc[0]) << "K cache, auto";
        EXPECT_EQ(au.vc[0], pair.vc[0]) << "V cache, auto";
    }
    for (const fold_out *o : {&fold, &pair, &plain, &ref}) {
        ASSERT_EQ(o->st, TG_OK) << o->err;
        EXPECT_TRUE(o->tails_ok) << "a sink's tail was overwritten";
    }
    EXPECT_GE(fold.replays, 1) << "the fused graph was never replayed";
    EXPECT_EQ(fold.fusions[6], c.folds ? c.groups : 0) << "rope folds";
    EXPECT_EQ(fold.fusions[3], c.groups) << "q/k/v launches";
    EXPECT_EQ(pair.fusions[6], 0);
    if (c.D % 4 == 0) {  // (the pair kernel needs rows of 4-element vectors)
        EXPECT_EQ(fold.fusions[4], c.folds ? 0 : c.groups) << "rope pair launches beside the folds";
        EXPECT_EQ(pair.fusions[4], c.groups);
    }
    const bool quant = tg_type_is_quantized(c.wt);
    for (int g = 0; g < c.groups; g++) {
        for (float v : fold.q[g]) ASSERT_TRUE(std::isfinite(v));
        EXPECT_EQ(memcmp(fold.q[g].data(), pair.q[g].data(), fold.q[g].size() * 4), 0) << "rotated q, group " << g;
        EXPECT_EQ(fold.kc[g], pair.kc[g]) << "K cache, group " << g;
        EXPECT_EQ(fold.vc[g], pair.vc[g]) << "V cache, group " << g;
        const double tu = c.norm ? (quant ? 1e-3 : 1e-5) : 0.0;
        const double eq = tgt::rel_error(fold.q[g], std::vector<double>(plain.q[g].begin(), plain.q[g].end()));
        EXPECT_LE(eq, tu) << "rotated q against unfused, group " << g;
        if (!c.norm) EXPECT_EQ(fold.kc[g], plain.kc[g]) << "K cache against unfused";
        if (!c.norm) EXPECT_EQ(fold.vc[g], plain.vc[g]) << "V cache against unfused";
        EXPECT_LE(tgt::rel_error(fold.q[g], std::vector<double>(ref.q[g].begin(), ref.q[g].end())), quant ? 3e-2 : 1e-4)
            << "rotated q against the CPU, group " << g;
        check_cache(d, c.kt, d.kc[g][0], fold.kc[g], ref.kc[g], "K cache");
        check_cache(d, c.vt, d.vc[g][0], fold.vc[g], ref.vc[g], "V cache");
    }
    if (c.raw_out) {
        EXPECT_EQ(memcmp(fold.raw.data(), pair.raw.data(), fold.raw.size() * 4), 0) << "k's product read later";
        EXPECT_LE(tgt::rel_error(fold.raw, std::vector<double>(ref.raw.begin(), ref.raw.end())), quant ? 3e-2 : 1e-4);
    }
}

TEST_P(CudaRopeFold, BadPositionWritesNoCache) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    fold_case c = GetParam();
    if (small()) c.K = c.K > 256 ? 256 : c.K, c.Hq = c.Hq > 8 ? 8 : c.Hq, c.Hkv = c.Hkv > 4 ? 4 : c.Hkv;
    tg_backend *gpu = tg_backend_cuda(0);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> g1(gpu, tg_backend_free);
    ASSERT_NE(gpu, nullptr) << tg_last_error();
    tg_cuda_knobs(gpu)->mmv_rows = c.mmv_rows;  // (the _r4 cases: the 4-row launch's go/no-go)
    for (int kind = 0; kind < (c.T > 1 ? 3 : 2); kind++) {
        fold_data d = make_data(c, 23 + kind);
        // 0: the last token past the cache; 1: the first token before it; 2: a repeat in the last sequence
        if (kind == 0) d.pos.back() = rows(c);
        if (kind == 1) d.pos.front() = -1;
        if (kind == 2) d.pos[d.pos.size() - 1] = d.pos[d.pos.size() - 2];
        tg_cuda_knobs(gpu)->rope_fold = c.attn_L > 0 ? 2 : 0;
        const fold_out fold = run(gpu, d, 1);
        tg_cuda_knobs(gpu)->rope_fold = 1;
        const fold_out pair = run(gpu, d, 1);
        tg_cuda_knobs(gpu)->rope_fold = 0;
        if (HasFatalFailure()) return;
        EXPECT_EQ(fold.fusions[6], c.folds ? c.groups : 0) << "rope folds, bad position kind " << kind;
        EXPECT_NE(fold.st, TG_OK) << "bad position kind " << kind;
        EXPECT_EQ(fold.st, pair.st);
        EXPECT_EQ(fold.err, pair.err) << "the fold's message differs from the update's";
        EXPECT_EQ(fold.err.rfind("[rope_kv_update]", 0), 0u) << fold.err;
        for (int g = 0; g < c.groups; g++) {
            EXPECT_EQ(fold.kc[g], cache_bytes(c.kt, d.kc[g][0])) << "K cache written by a failed graph, group " << g;
            EXPECT_EQ(fold.vc[g], cache_bytes(c.vt, d.vc[g][0])) << "V cache written by a failed graph, group " << g;
        }
    }
}

constexpr tg_type F32 = TG_TYPE_F32, F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16;
constexpr tg_rope_mode IL = TG_ROPE_INTERLEAVED, NX = TG_ROPE_NEOX;

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaRopeFold,
    ::testing::Values(
        // the 1.1B llama's attention front (32/8 heads of 64), decode
        fold_case{"llama1b_f16_norm", F16, 2048, 32, 8, 64, 1, 1, 0, F16, F16, true, 1, false, IL, true},
        fold_case{"f32_b3_partial_rot_pos_node", F32, 200, 6, 3, 16, 1, 3, 8, F32, BF16, false, 1, true, IL, true, 0, true},
        // six columns (the 8-column kernels), D even but not a multiple of 4 (unfused: the scalar rope)
        fold_case{"f16_d10_b6", F16, 256, 6, 2, 10, 1, 6, 0, F16, BF16, true, 1, true, IL, true},
        fold_case{"q4_0_t2_b3", TG_TYPE_Q4_0, 256, 4, 2, 32, 2, 3, 0, F32, F16, false, 1, false, IL, true},
        fold_case{"f32_scalar_path_declines", F32, 198, 4, 2, 16, 2, 1, 0, F32, F32, false, 1, false, IL, false},
        fold_case{"bf16_t2_b2_two_groups", BF16, 256, 4, 2, 32, 2, 2, 0, BF16, F16, false, 2, true, IL, true},
        fold_case{"f16_tiny_rows", F16, 64, 2, 1, 16, 1, 1, 0, F32, F32, true, 1, false, IL, true},
        fold_case{"q4_0_norm", TG_TYPE_Q4_0, 512, 8, 4, 64, 1, 1, 0, F16, F16, true, 1, false, IL, true},
        // the quantized q/k/v launch at 4 rows per group (auto: 2 at these sizes)
        fold_case{"q4_0_norm_r4", TG_TYPE_Q4_0, 512, 8, 4, 64, 1, 1, 0, F16, F16, true, 1, false, IL, true, 0, false, 4},
        fold_case{"llama1b_q8_0_norm_r4", TG_TYPE_Q8_0, 2048, 32, 8, 64, 1, 1, 0, F16, F16, true, 1, false, IL, true, 0, false, 4},
        fold_case{"q8_0_t3_two_groups", TG_TYPE_Q8_0, 256, 4, 4, 32, 3, 1, 0, F32, F32, false, 2, true, IL, true},
        fold_case{"q4_k_b2_norm", TG_TYPE_Q4_K, 256, 4, 2, 64, 1, 2, 32, F16, BF16, true, 1, false, IL, true},
        fold_case{"neox_declines", F16, 256, 4, 2, 32, 1, 1, 0, F16, F16, true, 1, false, NX, false},
        fold_case{"odd_head_dim_declines", F32, 252, 4, 2, 9, 1, 2, 8, F32, F32, false, 1, false, IL, false},
        // an attention node after each update (the llama's order), caches of 512 rows
        fold_case{"attention_after_f16", F16, 512, 8, 2, 64, 1, 1, 0, F16, F16, false, 2, false, IL, true, 512}),
    [](const ::testing::TestParamInfo<fold_case> &i) { return std::string(i.param.name); });

#else
TEST(CudaRopeFold, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
