// test_cuda_llm.cpp - mul_mat and attention on the CUDA backend at LLM sizes
// (and odd sizes around them) against a float64 oracle.
//
// The oracle multiplies the values actually stored (F16/BF16 weights and
// caches decoded exactly) in double. Large shapes check a random sample of
// output rows against the oracle and every output for NaN/inf. Each result is
// copied into the head of a persistent sink poisoned with NaN whose random
// tail must come back bit-identical; the compute buffer is poisoned with NaN
// first. Bounds (docs/ops.md): F32 products 1e-5 relative L2; the 16-bit
// tensor-core tier (F16/BF16 weights times more than 8 columns, b rounded to
// the weight's type) 1e-3 for F16 and 4e-3 for BF16; attention 1e-4.
// TG_TEST_SMALL=1 shrinks the shapes (for compute-sanitizer runs).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

using tgt::small;
int64_t S(int64_t big, int64_t little) { return small() ? little : big; }

using backend_ptr = std::unique_ptr<tg_backend, void (*)(tg_backend *)>;

// Host values of a leaf, stored in its type; vals holds the stored values.
struct leaf {
    tg_tensor *t;
    std::vector<double> vals;
};

leaf make_leaf(tg_context *ctx, tg_type type, std::vector<int64_t> ne, std::mt19937 &rng, double lo = -1.0,
               double hi = 1.0) {
    leaf l{tg_new_tensor(ctx, type, (int)ne.size(), ne.data()), {}};
    const int64_t n = tg_nelements(l.t);
    l.vals.resize((size_t)n);
    std::uniform_real_distribution<float> u((float)lo, (float)hi);
    for (auto &v : l.vals) {
        const float f = u(rng);
        v = type == TG_TYPE_F16 ? tg_fp16_to_fp32(tg_fp32_to_fp16(f))
            : type == TG_TYPE_BF16 ? tg_bf16_to_fp32(tg_fp32_to_bf16(f))
                                   : (double)f;
    }
    return l;
}

tg_status upload(const leaf &l) {
    const size_t n = l.vals.size();
    const tg_type type = tg_tensor_type(l.t);
    if (type == TG_TYPE_F32) {
        std::vector<float> h(l.vals.begin(), l.vals.end());
        return tg_tensor_set(l.t, h.data(), 0, n * 4);
    }
    if (type == TG_TYPE_I32) {
        std::vector<int32_t> h(n);
        for (size_t i = 0; i < n; i++) h[i] = (int32_t)l.vals[i];
        return tg_tensor_set(l.t, h.data(), 0, n * 4);
    }
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; i++)
        h[i] = type == TG_TYPE_F16 ? tg_fp32_to_fp16((float)l.vals[i]) : tg_fp32_to_bf16((float)l.vals[i]);
    return tg_tensor_set(l.t, h.data(), 0, n * 2);
}

// Run y (built by `build` from leaves it creates) on the GPU; out gets y's
// values (read back through the sink), tail_ok whether the sink's tail is intact.
struct gpu_result {
    std::vector<float> out;
    bool tail_ok = false;
};
void run_gpu(tg_backend *gpu, const std::function<tg_tensor *(tg_context *, std::vector<leaf> &)> &build,
             std::vector<leaf> &leaves, gpu_result *r) {
    tg_init_params ip = {16 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    ASSERT_NE(ctx, nullptr);
    std::unique_ptr<tg_context, void (*)(tg_context *)> ctx_guard(ctx, tg_free);
    tg_tensor *y = build(ctx, leaves);
    ASSERT_NE(y, nullptr) << tg_last_error();
    const int64_t n = tg_nelements(y), tail = 61;
    tg_tensor *sink = tg_new_tensor_1d(ctx, TG_TYPE_F32, n + tail);
    tg_tensor *out = tg_cpy(ctx, y, tg_view_1d(ctx, sink, n, 0));
    tg_graph *g = tg_graph_new(ctx);
    ASSERT_EQ(tg_graph_expand(g, out), TG_OK) << tg_last_error();
    tg_buffer *buf = tg_backend_alloc(gpu, ctx);
    ASSERT_NE(buf, nullptr) << tg_last_error();
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> buf_guard(buf, tg_buffer_free);
    for (const leaf &l : leaves) ASSERT_EQ(upload(l), TG_OK) << tg_last_error();
    std::vector<uint32_t> bits((size_t)(n + tail), 0x7fc00000u);
    std::mt19937 trng(99);
    for (int64_t i = n; i < n + tail; i++) bits[i] = (uint32_t)trng();
    ASSERT_EQ(tg_tensor_set(sink, bits.data(), 0, bits.size() * 4), TG_OK);
    tg_graph_stats st{};
    ASSERT_EQ(tg_graph_plan(g, &st), TG_OK) << tg_last_error();
    tgt::poison_compute_buffer(gpu, st.planned_bytes);
    ASSERT_EQ(tg_graph_compute(gpu, g), TG_OK) << tg_last_error();
    std::vector<uint32_t> back(bits.size());
    ASSERT_EQ(tg_tensor_get(sink, back.data(), 0, back.size() * 4), TG_OK);
    r->out.resize((size_t)n);
    memcpy(r->out.data(), back.data(), (size_t)n * 4);
    r->tail_ok = memcmp(back.data() + n, bits.data() + n, (size_t)tail * 4) == 0;
}

backend_ptr cuda_or_null() { return backend_ptr(tg_cuda_available() ? tg_backend_cuda(0) : nullptr, tg_backend_free); }

#define SKIP_WITHOUT_CUDA() \
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device"

// ---------------------------------------------------------------------------
// mul_mat

// seqs / seqs16: one 2-D weight times 5 / 16 batches of b (sequences decoding
// together: a batch-16 decode step's products, one token per sequence)
enum class alay { plain, a_transposed, b_transposed, bcast, seqs, seqs16 };

struct mm_case {
    const char *name;
    tg_type wt;
    int64_t K, M, N;
    alay lay;
    double tol;
};
void PrintTo(const mm_case &c, std::ostream *os) { *os << c.name; }

class CudaLlmMulMat : public ::testing::TestWithParam<mm_case> {};

TEST_P(CudaLlmMulMat, MatchesFloat64) {
    SKIP_WITHOUT_CUDA();
    const mm_case &c = GetParam();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    const int64_t A2 = c.lay == alay::bcast ? 2 : 1;
    const int64_t B2 = c.lay == alay::bcast ? 6 : c.lay == alay::seqs ? 5 : c.lay == alay::seqs16 ? 16 : 1;
    std::mt19937 rng(7 + (uint32_t)c.N);
    std::vector<leaf> leaves;
    gpu_result r;
    // a[k, m, i2] and b[k, n, i2] as the oracle sees them (logical indices)
    std::function<double(int64_t, int64_t, int64_t)> av, bv;
    run_gpu(
        gpu.get(),
        [&](tg_context *ctx, std::vector<leaf> &L) {
            if (c.lay == alay::a_transposed) {  // stored {M, K}, used as {K, M}
                L.push_back(make_leaf(ctx, c.wt, {c.M, c.K}, rng));
                L.push_back(make_leaf(ctx, TG_TYPE_F32, {c.K, c.N}, rng));
            } else if (c.lay == alay::b_transposed) {  // b stored {N, K}
                L.push_back(make_leaf(ctx, c.wt, {c.K, c.M}, rng));
                L.push_back(make_leaf(ctx, TG_TYPE_F32, {c.N, c.K}, rng));
            } else {
                L.push_back(make_leaf(ctx, c.wt, {c.K, c.M, A2}, rng));
                L.push_back(make_leaf(ctx, TG_TYPE_F32, {c.K, c.N, B2}, rng));
            }
            const std::vector<double> &a = L[0].vals, &b = L[1].vals;
            const int64_t K = c.K, M = c.M, N = c.N, r2 = B2 / A2;
            if (c.lay == alay::a_transposed) av = [&a, M](int64_t k, int64_t m, int64_t) { return a[(size_t)(m + M * k)]; };
            else av = [&a, K, M, r2](int64_t k, int64_t m, int64_t i2) { return a[(size_t)(k + K * (m + M * (i2 / r2)))]; };
            if (c.lay == alay::b_transposed) bv = [&b, N](int64_t k, int64_t n, int64_t) { return b[(size_t)(n + N * k)]; };
            else bv = [&b, K, N](int64_t k, int64_t n, int64_t i2) { return b[(size_t)(k + K * (n + N * i2))]; };
            tg_tensor *ta = L[0].t, *tb = L[1].t;
            if (c.lay == alay::a_transposed) ta = tg_permute(ctx, ta, 1, 0, 2, 3);
            if (c.lay == alay::b_transposed) tb = tg_permute(ctx, tb, 1, 0, 2, 3);
            return tg_mul_mat(ctx, ta, tb);
        },
        leaves, &r);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(r.tail_ok) << "CUDA wrote past the output";
    for (size_t i = 0; i < r.out.size(); i++) ASSERT_TRUE(std::isfinite(r.out[i])) << "output " << i << " = " << r.out[i];
    // oracle over sampled rows m (all columns, all batches)
    std::mt19937 srng(3);
    std::vector<int64_t> rows = {0, c.M - 1};
    for (int i = 0; i < 62 && (int64_t)rows.size() < c.M; i++) rows.push_back(std::uniform_int_distribution<int64_t>(0, c.M - 1)(srng));
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t i2 = 0; i2 < B2; i2++)
        for (int64_t n = 0; n < c.N; n++)
            for (int64_t m : rows) {
                double s = 0.0;
                for (int64_t k = 0; k < c.K; k++) s += av(k, m, i2) * bv(k, n, i2);
                ref.push_back(s);
                got.push_back(r.out[(size_t)(m + c.M * (n + c.N * i2))]);
            }
    const double e = tgt::rel_error(got, ref);
    printf("[ mul_mat  ] %-28s K%lld M%lld N%lld: relative L2 error %.3g (bound %.0e)\n", c.name, (long long)c.K,
           (long long)c.M, (long long)c.N, e, c.tol);
    EXPECT_LE(e, c.tol) << c.name;
#ifdef TG_HAVE_CUDA
    if (c.lay == alay::seqs16) {  // weights of 1 MiB or more: one GEMM of all 16 N columns (docs/ops.md)
        const bool gemm = (size_t)(c.K * c.M) * tg_type_size(c.wt) >= ((size_t)1 << 20);
        const std::string want = !gemm ? "gemv" : c.wt == TG_TYPE_F32 ? "generic" : "tc";
        EXPECT_EQ(tg_cuda_sig_last(gpu.get(), TG_CUDA_SIG_MUL_MAT), want) << c.name;
    }
#endif
}

std::vector<mm_case> mm_cases() {
    const tg_type F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16, F32 = TG_TYPE_F32;
    const int64_t K = S(2048, 256), M = S(8192, 320);
    const double f32 = 1e-5, tc16 = 1e-3, tcbf = 4e-3;
    return {
        {"f16_n1", F16, K, M, 1, alay::plain, f32},
        {"f16_n7", F16, K, M, 7, alay::plain, f32},
        {"f16_n64", F16, K, M, 64, alay::plain, tc16},
        {"f16_n512", F16, K, M, S(512, 40), alay::plain, tc16},
        {"bf16_n1", BF16, K, M, 1, alay::plain, f32},
        {"bf16_n7", BF16, K, M, 7, alay::plain, f32},
        {"bf16_n64", BF16, K, M, 64, alay::plain, tcbf},
        {"bf16_n512", BF16, K, M, S(512, 40), alay::plain, tcbf},
        {"f32_n2", F32, K, S(1024, 96), 2, alay::plain, f32},
        {"f16_vocab_n1", F16, K, S(32000, 500), 1, alay::plain, f32},
        {"f16_vocab_n16", F16, K, S(32000, 500), 16, alay::plain, tc16},
        {"f16_odd_n3", F16, 1001, 777, 3, alay::plain, f32},
        {"bf16_odd_n9", BF16, 1001, 777, 9, alay::plain, tcbf},
        {"f32_odd_n5", F32, 1001, 333, 5, alay::plain, f32},
        {"f16_odd_n33", F16, 999, 77, 33, alay::plain, tc16},
        {"f16_a_transposed_n33", F16, 256, 200, 33, alay::a_transposed, f32},
        {"f16_a_transposed_n2", F16, 256, 200, 2, alay::a_transposed, f32},
        {"f16_b_transposed_n5", F16, 256, 200, 5, alay::b_transposed, tc16},
        {"f32_b_transposed_n5", F32, 256, 200, 5, alay::b_transposed, f32},
        {"f16_bcast_n3", F16, 256, 130, 3, alay::bcast, f32},
        // the 1.1B llama's other GEMV shapes, odd GEMV sizes, sequences as columns
        {"f16_down_n1", F16, S(8192, 512), S(2048, 96), 1, alay::plain, f32},
        {"f16_kv_n1", F16, S(2048, 256), S(512, 64), 1, alay::plain, f32},
        {"f16_q_n4", F16, S(2048, 256), S(2048, 256), 4, alay::plain, f32},
        {"bf16_odd_n8", BF16, 1003, 513, 8, alay::plain, f32},
        {"f32_odd_n6", F32, 1001, 31, 6, alay::plain, f32},
        {"f16_tiny_n1", F16, 7, 3, 1, alay::plain, f32},
        {"f16_seqs_n1", F16, 1024, 257, 1, alay::seqs, f32},
        {"bf16_seqs_n2", BF16, 1000, 129, 2, alay::seqs, f32},
        {"bf16_bcast_n20", BF16, 256, 130, 20, alay::bcast, tcbf},
        // batch-16 decode at the 1.1B llama's gate/up shape: the 16 sequences
        // are 16 columns of one product (tensor cores for 16-bit weights)
        {"f16_seqs16_n1", F16, K, M, 1, alay::seqs16, tc16},
        {"bf16_seqs16_n1", BF16, K, M, 1, alay::seqs16, tcbf},
        {"f32_seqs16_n1", F32, K, S(2048, 96), 1, alay::seqs16, f32},
        {"f16_seqs16_n2", F16, 1024, 513, 2, alay::seqs16, tc16},  // 1.002 MiB: the GEMM in small runs too
        {"f16_seqs16_small_n1", F16, 1000, 129, 1, alay::seqs16, f32},  // 258 KB: the GEMV, per sequence
        {"f16_bcast_n9", F16, 256, 130, 9, alay::bcast, tc16},
    };
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaLlmMulMat, ::testing::ValuesIn(mm_cases()),
                         [](const ::testing::TestParamInfo<mm_case> &i) { return std::string(i.param.name); });

// Products of one b on tensor cores round b once (cuda/mul_mat_fast.cu): the
// q, k and v of a prompt share one rounding, as gate and up do. Graph 1: y1 and
// y2 (F16 weights) share x's rounding across the cpy of y1 into its sink (which
// does not write x); y3 (BF16) rounds x again. Graph 2: a cpy of z into x
// between y1 and y2 makes y2 round x again, so y2 = W2 z. Results against the
// float64 oracle, in poisoned sinks with random tails.
TEST(CudaLlmMulMatSharedB, RoundsOnceUnlessBIsWritten) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    const int64_t K = S(2048, 256), N = S(512, 40), M = S(1024, 96), tail = 37;
    std::mt19937 rng(11);
    for (int graph = 1; graph <= 2; graph++) {
        tg_init_params ip = {16 << 20, nullptr, true};
        tg_context *ctx = tg_init(ip);
        ASSERT_NE(ctx, nullptr);
        std::unique_ptr<tg_context, void (*)(tg_context *)> ctx_guard(ctx, tg_free);
        std::vector<leaf> L;
        L.push_back(make_leaf(ctx, TG_TYPE_F16, {K, M}, rng));
        L.push_back(make_leaf(ctx, TG_TYPE_F16, {K, M}, rng));
        L.push_back(make_leaf(ctx, TG_TYPE_BF16, {K, M}, rng));
        L.push_back(make_leaf(ctx, TG_TYPE_F32, {K, N}, rng));  // x
        L.push_back(make_leaf(ctx, TG_TYPE_F32, {K, N}, rng));  // z
        tg_tensor *x = L[3].t;
        const int ny = graph == 1 ? 3 : 2;
        tg_tensor *sink[3] = {};
        tg_graph *g = tg_graph_new(ctx);
        ASSERT_NE(g, nullptr) << tg_last_error();
        for (int i = 0; i < ny; i++) {
            if (graph == 2 && i == 1) ASSERT_EQ(tg_graph_expand(g, tg_cpy(ctx, L[4].t, x)), TG_OK) << tg_last_error();
            sink[i] = tg_new_tensor_1d(ctx, TG_TYPE_F32, M * N + tail);
            tg_tensor *y = tg_mul_mat(ctx, L[i].t, x);
            ASSERT_NE(y, nullptr) << tg_last_error();
            ASSERT_EQ(tg_graph_expand(g, tg_cpy(ctx, y, tg_view_1d(ctx, sink[i], M * N, 0))), TG_OK) << tg_last_error();
        }
        tg_buffer *buf = tg_backend_alloc(gpu.get(), ctx);
        ASSERT_NE(buf, nullptr) << tg_last_error();
        std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> buf_guard(buf, tg_buffer_free);
        for (const leaf &l : L) ASSERT_EQ(upload(l), TG_OK) << tg_last_error();
        std::vector<uint32_t> bits((size_t)(M * N + tail), 0x7fc00000u);
        std::mt19937 trng(99);
        for (int64_t i = M * N; i < M * N + tail; i++) bits[i] = (uint32_t)trng();
        for (int i = 0; i < ny; i++) ASSERT_EQ(tg_tensor_set(sink[i], bits.data(), 0, bits.size() * 4), TG_OK);
        tg_graph_stats st{};
        ASSERT_EQ(tg_graph_plan(g, &st), TG_OK) << tg_last_error();
        tgt::poison_compute_buffer(gpu.get(), st.planned_bytes);
#ifdef TG_HAVE_CUDA
        const long long reuses0 = tg_cuda_mm_b_reuses(gpu.get());
#endif
        ASSERT_EQ(tg_graph_compute(gpu.get(), g), TG_OK) << tg_last_error();
#ifdef TG_HAVE_CUDA
        EXPECT_EQ(tg_cuda_mm_b_reuses(gpu.get()) - reuses0, graph == 1 ? 1 : 0) << "graph " << graph;
#endif
        for (int i = 0; i < ny; i++) {
            std::vector<uint32_t> back(bits.size());
            ASSERT_EQ(tg_tensor_get(sink[i], back.data(), 0, back.size() * 4), TG_OK);
            EXPECT_EQ(memcmp(back.data() + M * N, bits.data() + M * N, (size_t)tail * 4), 0) << "wrote past y" << i + 1;
            const std::vector<double> &w = L[i].vals, &b = (graph == 2 && i == 1) ? L[4].vals : L[3].vals;
            std::vector<float> got;
            std::vector<double> ref;
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m += 3) {
                    double acc = 0.0;
                    for (int64_t k = 0; k < K; k++) acc += w[(size_t)(k + K * m)] * b[(size_t)(k + K * n)];
                    ref.push_back(acc);
                    float f;
                    memcpy(&f, &back[(size_t)(m + M * n)], 4);
                    ASSERT_TRUE(std::isfinite(f)) << "graph " << graph << " y" << i + 1 << " at " << m + M * n;
                    got.push_back(f);
                }
            const double e = tgt::rel_error(got, ref), bound = i == 2 ? 4e-3 : 1e-3;
            printf("[ mul_mat  ] shared b, graph %d, y%d: relative L2 error %.3g (bound %.0e)\n", graph, i + 1, e, bound);
            EXPECT_LE(e, bound) << "graph " << graph << " y" << i + 1;
        }
    }
}

// ---------------------------------------------------------------------------
// attention

struct attn_case {
    const char *name;
    int64_t D, Dv, Hq, Hkv, T, B, L;
    tg_type ct;
    std::vector<int> pos;  // T*B positions; empty: the last T rows of the cache
    int sample;            // queries checked against the oracle (0: all)
    double tol = 1e-4;     // the tensor-core prefill tier: 1e-3 (F16), 8e-3 (BF16)
    // the path auto takes (tg_cuda_sig_last); "decode": several splits per
    // query, where auto takes the cluster kernel or the split and combine
    // kernels by the cache length, and the case also runs with each forced
    // (knob attn_split 2 and 1)
    const char *path = "decode";
};
void PrintTo(const attn_case &c, std::ostream *os) { *os << c.name; }

class CudaLlmAttention : public ::testing::TestWithParam<attn_case> {};

// One run of case c on gpu with the knob attn_split set to knob (0 auto, 1
// split and combine, 2 cluster), attn_split_dc to dc (0 auto: the
// compile-time head dims where they apply, 2 the runtime-D kernel) and
// attn_split_rows to rows (0: ranges from the positions and several lanes per
// row, 3: the cache-length ranges and one lane per row): the path taken, the
// output's tail, and every sampled query against float64; the output into
// *out when out is given.
void check_attention(tg_backend *gpu, const attn_case &c, int knob, int dc = 0, std::vector<float> *out = nullptr,
                     int rows = 0) {
    SCOPED_TRACE(std::string(knob == 1 ? "split and combine kernels forced" : knob == 2 ? "cluster kernel forced" : "auto") +
                 (dc == 2 ? ", runtime head dims" : "") + (rows ? ", split rows knob " + std::to_string(rows) : ""));
#ifdef TG_HAVE_CUDA
    tg_cuda_knobs(gpu)->attn_split = knob;
    tg_cuda_knobs(gpu)->attn_split_dc = dc;
    tg_cuda_knobs(gpu)->attn_split_rows = rows;
#endif
    std::mt19937 rng(11 + knob);
    std::vector<leaf> leaves;
    gpu_result r;
    std::vector<int> pos = c.pos;
    if (pos.empty())
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t t = 0; t < c.T; t++) pos.push_back((int)(c.L - c.T + t - 3 * b));
    ASSERT_EQ((int64_t)pos.size(), c.T * c.B);
    const float scale = 1.0f / std::sqrt((float)c.D);
    run_gpu(
        gpu,
        [&](tg_context *ctx, std::vector<leaf> &L) {
            L.push_back(make_leaf(ctx, TG_TYPE_F32, {c.D, c.Hq, c.T, c.B}, rng));
            L.push_back(make_leaf(ctx, c.ct, {c.D, c.Hkv, c.L, c.B}, rng));
            L.push_back(make_leaf(ctx, c.ct, {c.Dv, c.Hkv, c.L, c.B}, rng));
            leaf p{tg_new_tensor_2d(ctx, TG_TYPE_I32, c.T, c.B), std::vector<double>(pos.begin(), pos.end())};
            L.push_back(p);
            return tg_attention(ctx, L[0].t, L[1].t, L[2].t, L[3].t, scale);
        },
        leaves, &r);
    if (::testing::Test::HasFatalFailure()) return;
    std::string path = "?";
#ifdef TG_HAVE_CUDA
    path = tg_cuda_sig_last(gpu, TG_CUDA_SIG_ATTN);
    // "/dc": the split kernel's compile-time head dims, where D = Dv is 64 or 128 and the knob asks
    if (path.rfind("split", 0) == 0)
        EXPECT_EQ(path.find("/dc") != std::string::npos, dc != 2 && c.D == c.Dv && (c.D == 64 || c.D == 128)) << path;
    // "/pre": rows read before the wait for the kernel before (no node here
    // writes the caches: rows below the positions qualify), not checked here
    // (test_cuda_attn_pre.cpp)
    path = path.substr(0, path.find('/'));
    // without clusters (before sm_90) the cluster kernel's cases take split and combine
    const char *cluster = tg_cuda_attention_clusters(gpu) ? "cluster" : "split";
    if (knob)
        EXPECT_EQ(path, knob == 1 ? (strcmp(c.path, "split1") ? "split" : "split1") : cluster) << c.name;
    else if (!strcmp(c.path, "decode"))
        EXPECT_TRUE(path == "cluster" || path == "split") << c.name << ": " << path;
    else
        EXPECT_EQ(path, strcmp(c.path, "cluster") ? c.path : cluster) << c.name;
#endif
    EXPECT_TRUE(r.tail_ok) << "CUDA wrote past the output";
    for (size_t i = 0; i < r.out.size(); i++) ASSERT_TRUE(std::isfinite(r.out[i])) << "output " << i << " = " << r.out[i];
    if (out) *out = r.out;
    const std::vector<double> &q = leaves[0].vals, &kc = leaves[1].vals, &vc = leaves[2].vals;
    const int64_t nq = c.Hq * c.T * c.B, group = c.Hq / c.Hkv;
    std::vector<int64_t> qs;
    std::mt19937 srng(5);
    if (c.sample == 0 || c.sample >= nq)
        for (int64_t i = 0; i < nq; i++) qs.push_back(i);
    else
        for (int i = 0; i < c.sample; i++) qs.push_back(std::uniform_int_distribution<int64_t>(0, nq - 1)(srng));
    std::vector<float> got;
    std::vector<double> ref;
    int zero_rows = 0;
    for (int64_t qi : qs) {
        const int64_t h = qi % c.Hq, t = (qi / c.Hq) % c.T, b = qi / (c.Hq * c.T), hk = h / group;
        const int p = pos[(size_t)(t + c.T * b)];
        const int64_t n = p < 0 ? 0 : std::min<int64_t>(p + 1, c.L);
        std::vector<double> s((size_t)n), acc((size_t)c.Dv, 0.0);
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < c.D; d++)
                dot += q[(size_t)(d + c.D * (h + c.Hq * (t + c.T * b)))] * kc[(size_t)(d + c.D * (hk + c.Hkv * (j + c.L * b)))];
            s[j] = (double)scale * dot;
            mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j < n; j++) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = 0; d < c.Dv; d++) acc[d] += s[j] * vc[(size_t)(d + c.Dv * (hk + c.Hkv * (j + c.L * b)))];
        zero_rows += n == 0;
        for (int64_t d = 0; d < c.Dv; d++) {
            const float o = r.out[(size_t)(d + c.Dv * qi)];
            if (n == 0) {
                EXPECT_EQ(o, 0.0f) << "query " << qi << " has no rows";
                continue;
            }
            ref.push_back(acc[d] / sum);
            got.push_back(o);
        }
    }
    const double e = tgt::rel_error(got, ref);
    printf("[ attention] %-24s %-7s %zu queries (%d without rows): relative L2 error %.3g (bound %.0e)\n", c.name,
           path.c_str(), qs.size(), zero_rows, e, c.tol);
    EXPECT_LE(e, c.tol) << c.name;
}

TEST_P(CudaLlmAttention, MatchesFloat64) {
    SKIP_WITHOUT_CUDA();
    const attn_case &c = GetParam();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    check_attention(gpu.get(), c, 0);
    if (HasFatalFailure()) return;
    // the split kernel's compile-time head dims (knob attn_split_dc) give the runtime kernel's bits
    if (!strcmp(c.path, "decode") || !strncmp(c.path, "split", 5)) {
        std::vector<float> rt, ct;
        check_attention(gpu.get(), c, 1, 2, &rt);
        if (HasFatalFailure()) return;
        check_attention(gpu.get(), c, 1, 0, &ct);
        if (HasFatalFailure()) return;
        ASSERT_EQ(rt.size(), ct.size());
        EXPECT_EQ(memcmp(rt.data(), ct.data(), rt.size() * sizeof(float)), 0) << "compile-time head dims changed the bits";
        // the split kernel as it was (ranges of the cache's length, a lane per
        // row when scoring) and each half of the change alone, against float64;
        // and the knob's bits reach the kernel: with one range per query (split1)
        // the ranges are the same either way (0 = 1, 2 = 3 bit for bit), and a
        // short context's tiles (decode_short*) are scored in another order
        // with a lane per row (0 != 2)
        std::vector<float> by_rows[4];
        by_rows[0] = ct;
        for (int rows = 1; rows <= 3 && !HasFatalFailure(); rows++)
            check_attention(gpu.get(), c, 1, 0, &by_rows[rows], rows);
        if (HasFatalFailure()) return;
        const size_t nb = ct.size() * sizeof(float);
        if (!strcmp(c.path, "split1")) {
            EXPECT_EQ(memcmp(by_rows[0].data(), by_rows[1].data(), nb), 0) << "one range per query: ranges differ by knob";
            EXPECT_EQ(memcmp(by_rows[2].data(), by_rows[3].data(), nb), 0) << "one range per query: ranges differ by knob";
        }
        if (!strncmp(c.name, "decode_short", 12))
            EXPECT_NE(memcmp(by_rows[0].data(), by_rows[2].data(), nb), 0) << "knob attn_split_rows 2 did not reach the kernel";
    }
    if (strcmp(c.path, "decode") != 0) return;
    check_attention(gpu.get(), c, 2);
}

std::vector<attn_case> attn_cases() {
    const tg_type F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16, F32 = TG_TYPE_F32;
    const int64_t L = S(4096, 512), T = S(512, 64);
    // 40 tokens at scattered positions, some before the cache (no rows) or past it (clamped)
    std::vector<int> scattered;
    for (int t = 0; t < 40; t++) scattered.push_back(t % 9 == 4 ? -1 - t : (t * 37) % 350 - 10);
    const double tc16 = 1e-3, tcbf = 8e-3;
    return {
        {"decode_f16", 128, 128, 32, 8, 1, 1, L, F16, {}, 0},
        {"decode_f32", 128, 128, 32, 8, 1, 1, L, F32, {}, 0},
        {"decode_bf16_b3", 128, 128, 32, 8, 1, 3, L, BF16, {}, 0},
        // 16 sequences: clusters of 2 blocks, several K/V tiles per block even at TG_TEST_SMALL's L
        {"decode_f16_b16", 128, 128, 32, 8, 1, 16, L, F16, {}, 96},
        {"decode_d256_f32_b2", 256, 256, 8, 2, 1, 2, 700, F32, {}, 0},
        {"decode_d64_mha_bf16", 64, 64, 12, 12, 1, 1, 1000, BF16, {}, 0},
        // the cluster kernel's stage counts and cluster sizes on an H200 (132 SMs), forced:
        // F16 D 64, 16 sequences: clusters of 2, 4 tiles of 64 rows, 4 stages
        {"decode_d64_f16_b16", 64, 64, 32, 8, 1, 16, L, F16, {}, 96},
        // F32 D 192, 16 sequences: clusters of 8, tiles of 32 rows, 2 stages
        {"decode_d192_f32_b16", 192, 192, 8, 2, 1, 16, L, F32, {}, 64},
        // 6 sequences: clusters of 4
        {"decode_f16_b6", 128, 128, 32, 8, 1, 6, L, F16, {}, 64},
        // auto's choice (sm_90): every row a block can have in one tile -> the cluster kernel
        // (L 128: one tile of 64 rows for any cluster of 2 or more blocks, whatever the SM
        // count); a 1.1B llama's layer at L 4096 (4 tiles per block at least) -> split and combine
        {"auto_cluster_l128_f16", 128, 128, 32, 8, 1, 1, 128, F16, {100}, 0, 1e-4, "cluster"},
        {"auto_split_l4096_f16", 128, 128, 32, 8, 1, 1, 4096, F16, {600}, 0, 1e-4, "split"},
        // one kv head at L 9000: 141 splits per query, so the combine kernel's groups (4 at Dv 128,
        // 8 at Dv 64) take their splits in several rounds of 16 loads in flight, the last one partial
        {"many_splits_f16", 128, 128, 4, 1, 1, 1, 9000, F16, {}, 0, 1e-4, "split"},
        {"many_splits_d64_bf16_b2", 64, 64, 2, 1, 1, 2, 9000, BF16, {8999, 4000}, 0, 1e-4, "split"},
        // one token per sequence: a sequence without rows (p < 0), one clamped to the cache
        // (p >= L), one with a single row; 16 query heads per kv head (two query chunks of 8)
        // and 32 (four)
        {"decode_edges_d64_bf16_b3", 64, 64, 16, 4, 1, 3, 700, BF16, {-1, 749, 0}, 0},
        {"decode_group16_f16", 128, 128, 32, 2, 1, 1, 2000, F16, {}, 0},
        {"decode_group32_f16", 64, 64, 32, 1, 1, 1, 500, F16, {}, 0},
        {"prefill_f16", 128, 128, 32, 8, T, 1, L, F16, {}, 48, tc16, "tc"},
        {"prefill_bf16_b2", 128, 128, 32, 8, S(128, 64), 2, L, BF16, {}, 48, tcbf, "tc"},
        {"prefill_d64_scattered_bf16", 64, 64, 8, 2, 40, 1, 300, BF16, scattered, 0, tcbf, "tc"},
        {"prefill_d64_f16_mha", 64, 64, 2, 2, 100, 1, 128, F16, {}, 0, tc16, "tc"},
        {"prefill_f32", 128, 128, 32, 8, T, 1, L, F32, {}, 48, 1e-4, small() ? "decode" : "split1"},
        {"mixed_positions_f16", 128, 128, 32, 8, 3, 1, L, F16, {-2, 5, (int)L + 7}, 0},
        // short contexts in a long cache (most decode splits empty)
        {"decode_short_f16", 128, 128, 32, 8, 1, 1, L, F16, {(int)L / 7 + 15}, 0},
        {"decode_short_f32_b3", 128, 128, 32, 8, 1, 3, L, F32, {100, (int)L / 2 + 9, 0}, 0},
        {"mixed_short_bf16", 128, 128, 32, 8, 3, 1, L, BF16, {5, (int)L / 3, (int)L * 2 / 3}, 0},
        {"odd_dims_bf16", 72, 40, 6, 2, 5, 2, 300, BF16, {0, 299, 17, -1, 150, 3, 64, 65, 128, 400}, 0},
        {"tiny_f32", 4, 8, 3, 3, 2, 1, 5, F32, {0, 4}, 0, 1e-4, "split1"},
        {"mha_f16_t9", 64, 64, 4, 4, 9, 1, 700, F16, {}, 0},
    };
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLlmAttention, ::testing::ValuesIn(attn_cases()),
                         [](const ::testing::TestParamInfo<attn_case> &i) { return std::string(i.param.name); });

// A NaN in q, K or V reaches exactly the outputs the reference's would, and
// no other: q's query all NaN; a K row, every query whose rows include it;
// a V row's element, that element of those queries. Never zeros in its place
// (the split kernel once gave 0 for NaN), and a row past a query's position
// (read for another query of the same block) never reaches it. Each case
// takes one path, checked by name: the cluster kernel (several splits merged
// in one kernel), the split kernel with several splits and its combine
// kernel (forced), with one split, and with a full grid, the tensor-core
// prefill, the generic kernel.
struct attn_nan_case {
    const char *name;
    int64_t D, Hq, Hkv, T, L;
    tg_type kt, vt;
    std::vector<int> pos;  // T positions (B = 1); empty: 0..T-1
    bool v_nan;            // the V case (the tensor-core kernel multiplies masked rows by p = 0: left out)
    const char *path;      // the path it takes (tg_cuda_sig_last)
    int attn_split = 0;    // knob: 1 forces the split and combine kernels, 2 the cluster kernel
};
void PrintTo(const attn_nan_case &c, std::ostream *os) { *os << c.name; }
class CudaLlmAttentionNan : public ::testing::TestWithParam<attn_nan_case> {};

TEST_P(CudaLlmAttentionNan, PropagatesLikeTheReference) {
    SKIP_WITHOUT_CUDA();
    const attn_nan_case &c = GetParam();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    std::vector<int> pos = c.pos;
    if (pos.empty())
        for (int t = 0; t < c.T; t++) pos.push_back(t);
    const int64_t group = c.Hq / c.Hkv, Dv = c.D;
    const int64_t jk = 1, jv = 2, dvv = 3;  // the K row (kv head 0) and the V row and element (kv head Hkv - 1)
#ifdef TG_HAVE_CUDA
    tg_cuda_knobs(gpu.get())->attn_split = c.attn_split;
#endif
    for (int where = 0; where < (c.v_nan ? 3 : 2); where++) {
        std::mt19937 rng(21 + where);
        std::vector<leaf> leaves;
        gpu_result r;
        run_gpu(
            gpu.get(),
            [&](tg_context *ctx, std::vector<leaf> &L) {
                L.push_back(make_leaf(ctx, TG_TYPE_F32, {c.D, c.Hq, c.T, 1}, rng));
                L.push_back(make_leaf(ctx, c.kt, {c.D, c.Hkv, c.L, 1}, rng));
                L.push_back(make_leaf(ctx, c.vt, {Dv, c.Hkv, c.L, 1}, rng));
                if (where == 0) L[0].vals[5] = NAN;                       // query (h 0, t 0), d 5
                if (where == 1) L[1].vals[(size_t)(7 + c.D * (0 + c.Hkv * jk))] = NAN;
                if (where == 2) L[2].vals[(size_t)(dvv + Dv * (c.Hkv - 1 + c.Hkv * jv))] = NAN;
                L.push_back({tg_new_tensor_2d(ctx, TG_TYPE_I32, c.T, 1), std::vector<double>(pos.begin(), pos.end())});
                return tg_attention(ctx, L[0].t, L[1].t, L[2].t, L[3].t, 0.125f);
            },
            leaves, &r);
        if (HasFatalFailure()) return;
#ifdef TG_HAVE_CUDA
        const bool clusters = tg_cuda_attention_clusters(gpu.get());
        const std::string path = tg_cuda_sig_last(gpu.get(), TG_CUDA_SIG_ATTN);  // less "/pre"
        EXPECT_EQ(path.substr(0, path.find('/')), !strcmp(c.path, "cluster") && !clusters ? "split" : c.path)
            << c.name;
#endif
        EXPECT_TRUE(r.tail_ok) << "CUDA wrote past the output";
        int nans = 0;
        for (int64_t t = 0; t < c.T; t++)
            for (int64_t h = 0; h < c.Hq; h++) {
                const int p = pos[(size_t)t];
                const int64_t n = p < 0 ? 0 : std::min<int64_t>(p + 1, c.L), hk = h / group;
                for (int64_t d = 0; d < Dv; d++) {
                    const bool want = where == 0   ? (h == 0 && t == 0 && n > 0)
                                      : where == 1 ? (hk == 0 && n > jk)
                                                   : (hk == c.Hkv - 1 && n > jv && d == dvv);
                    const float o = r.out[(size_t)(d + Dv * (h + c.Hq * t))];
                    nans += want;
                    ASSERT_EQ(std::isnan(o), want) << c.name << " NaN in " << "qkv"[where] << ": head " << h
                                                   << ", token " << t << " (position " << p << "), element " << d
                                                   << " = " << o;
                }
            }
        ASSERT_GT(nans, 0) << c.name << ": the case reaches no output";
    }
}

std::vector<attn_nan_case> attn_nan_cases() {
    const tg_type F16 = TG_TYPE_F16, F32 = TG_TYPE_F32;
    const int L = (int)S(4096, 512);
    return {
        {"cluster_f16", 128, 32, 8, 1, L, F16, F16, {L - 1}, true, "cluster", 2},  // several splits, one kernel
        {"cluster_mixed_f32", 64, 8, 2, 3, 300, F32, F32, {1, 30, 290}, true, "cluster", 2},  // t 0: rows 0-1 only
        {"split_many_f16", 128, 32, 8, 1, L, F16, F16, {L - 1}, true, "split", 1},  // the combine kernel
        // 141 splits: the combine kernel's groups take them in several rounds
        {"split_141_f16", 128, 4, 1, 1, 9000, F16, F16, {8999}, true, "split", 1},
        {"split_one_f32", 128, 32, 8, 1, 48, F32, F32, {40}, true, "split1"},        // one split
        {"split_mixed_f32", 64, 8, 2, 3, 48, F32, F32, {1, 30, 47}, true, "split1"},  // t 0 has rows 0-1 only
        {"split_full_grid_f32", 64, 32, 8, 128, 128, F32, F32, {}, true, "split1"},   // one split, every SM busy
        {"tensor_cores_f16", 128, 32, 8, 128, 128, F16, F16, {}, false, "tc"},        // prefill on tensor cores
        {"generic_f16_f32", 64, 8, 2, 3, 40, F16, F32, {0, 5, 39}, true, "generic"},  // mixed cache types
    };
}
INSTANTIATE_TEST_SUITE_P(Paths, CudaLlmAttentionNan, ::testing::ValuesIn(attn_nan_cases()),
                         [](const ::testing::TestParamInfo<attn_nan_case> &i) { return std::string(i.param.name); });

}  // namespace
