// test_cuda_quant.cpp - quantized weights (Q8_0, Q4_0, Q4_K) on the CUDA
// backend: mul_mat against a float64 product of the dequantized weights
// (tg_dequantize) and against the CPU backend, get_rows against
// tg_dequantize, bad ids, and quantized copies (test_cuda_quant_llama.cpp:
// a quantized llama decoding on CUDA).
//
// Every output goes through a cpy into the head of a persistent sink whose
// head is NaN and whose random tail must come back bit-identical; the compute
// buffer is poisoned with NaN first. Large shapes check a random sample of
// output rows against the oracle and every output for NaN/inf. Bounds
// (docs/ops.md "Quantized types"): decode (N <= 8: b quantized to 8 bits per
// 32 values, int8 dot products) 1.5e-2 relative L2 against the float64
// product; prefill (N > 8: weights and b rounded to F16, tensor cores) 2e-3.
// Needs a GPU: every test skips itself without one. TG_TEST_SMALL=1 shrinks
// the shapes (for compute-sanitizer runs).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "quant_util.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

using tgt::small;
int64_t S(int64_t big, int64_t little) { return small() ? little : big; }

using backend_ptr = std::unique_ptr<tg_backend, void (*)(tg_backend *)>;
backend_ptr cuda_or_null() { return backend_ptr(tg_cuda_available() ? tg_backend_cuda(0) : nullptr, tg_backend_free); }

#define SKIP_WITHOUT_CUDA() \
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device"

const double k_decode_tol = 1.5e-2, k_prefill_tol = 2e-3;

// ---------------------------------------------------------------------------
// Running one output tensor on a backend

// Leaves with host bytes; build() makes the output from them.
struct leaf {
    tg_tensor *t;
    const void *data;
    size_t bytes;
};
struct result {
    tg_status status = TG_OK;
    std::string err;
    std::vector<float> out;
    bool tail_ok = false;
};

// Computes y = build(ctx, leaves) on be into the head of a sink (NaN head,
// random tail), after poisoning the compute buffer; the sink is read back
// whatever the compute's status.
void run(tg_backend *be, const std::function<tg_tensor *(tg_context *, std::vector<leaf> &)> &build, result *r) {
    tg_init_params ip = {16 << 20, nullptr, true};
    std::unique_ptr<tg_context, void (*)(tg_context *)> ctx(tg_init(ip), tg_free);
    ASSERT_NE(ctx.get(), nullptr);
    std::vector<leaf> leaves;
    tg_tensor *y = build(ctx.get(), leaves);
    ASSERT_NE(y, nullptr) << tg_last_error();
    const int64_t n = tg_nelements(y), tail = 61;
    tg_tensor *sink = tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, n + tail);
    tg_tensor *out = tg_cpy(ctx.get(), y, tg_view_1d(ctx.get(), sink, n, 0));
    ASSERT_NE(out, nullptr) << tg_last_error();
    tg_graph *g = tg_graph_new(ctx.get());
    ASSERT_EQ(tg_graph_expand(g, out), TG_OK) << tg_last_error();
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> buf(tg_backend_alloc(be, ctx.get()), tg_buffer_free);
    ASSERT_NE(buf.get(), nullptr) << tg_last_error();
    for (const leaf &l : leaves) ASSERT_EQ(tg_tensor_set(l.t, l.data, 0, l.bytes), TG_OK) << tg_last_error();
    std::vector<uint32_t> bits((size_t)(n + tail), 0x7fc00000u);
    std::mt19937 trng(99);
    for (int64_t i = n; i < n + tail; i++) bits[(size_t)i] = (uint32_t)trng();
    ASSERT_EQ(tg_tensor_set(sink, bits.data(), 0, bits.size() * 4), TG_OK);
    tg_graph_stats st{};
    ASSERT_EQ(tg_graph_plan(g, &st), TG_OK) << tg_last_error();
    tgt::poison_compute_buffer(be, st.planned_bytes);
    r->status = tg_graph_compute(be, g);
    if (r->status != TG_OK) r->err = tg_last_error();
    std::vector<uint32_t> back(bits.size());
    ASSERT_EQ(tg_tensor_get(sink, back.data(), 0, back.size() * 4), TG_OK);
    r->out.resize((size_t)n);
    memcpy(r->out.data(), back.data(), (size_t)n * 4);
    r->tail_ok = memcmp(back.data() + n, bits.data() + n, (size_t)tail * 4) == 0;
}

leaf add_leaf(tg_context *ctx, std::vector<leaf> &L, tg_type t, std::vector<int64_t> ne, const void *data,
              size_t bytes) {
    leaf l{tg_new_tensor(ctx, t, (int)ne.size(), ne.data()), data, bytes};
    EXPECT_NE(l.t, nullptr) << tg_last_error();
    if (l.t) EXPECT_EQ(tg_nbytes(l.t), bytes);
    L.push_back(l);
    return l;
}

// ---------------------------------------------------------------------------
// mul_mat

enum class lay {
    plain,         // a {K, M}, b {K, N}
    bcast,         // a {K, M, 2, 1}, b {K, N, 4, 2}: r2 = 2, r3 = 2
    b_transposed,  // b stored {N, K}, permuted
    a_rows_view,   // a = rows [1, M + 1) of a stored {K, M + 2}
    seqs,          // a {K, M}, b {K, N, 16}: 16 sequences sharing the weights (batch-16 decode)
};

struct qmm_case {
    std::string name;
    tg_type t;
    int64_t K, M, N;
    lay l;
};
void PrintTo(const qmm_case &c, std::ostream *os) { *os << c.name; }

// Host data: a's storage quantized and dequantized, b's storage.
struct qmm_data {
    int64_t A2 = 1, A3 = 1, B2 = 1, B3 = 1, a_rows = 0, a_row0 = 0;
    std::vector<uint8_t> aq;
    std::vector<float> adq, b;
};

qmm_data make_data(const qmm_case &c, uint32_t seed) {
    qmm_data d;
    if (c.l == lay::bcast) d.A2 = 2, d.A3 = 1, d.B2 = 4, d.B3 = 2;
    if (c.l == lay::seqs) d.B2 = 16;
    d.a_rows = c.l == lay::a_rows_view ? c.M + 2 : c.M;
    d.a_row0 = c.l == lay::a_rows_view ? 1 : 0;
    std::mt19937 rng(seed);
    const std::vector<float> w = qtu::weights(rng, c.K, d.a_rows * d.A2 * d.A3);
    d.aq = qtu::quantized(c.t, w);
    d.adq.resize(w.size());
    EXPECT_EQ(tg_dequantize(c.t, d.aq.data(), d.adq.data(), (int64_t)w.size()), TG_OK) << tg_last_error();
    d.b = tgt::random_floats(rng, (size_t)(c.K * c.N * d.B2 * d.B3));
    return d;
}

// a[k, m, a2, a3] and b[k, n, i2, i3] as mul_mat sees them
double a_at(const qmm_case &c, const qmm_data &d, int64_t k, int64_t m, int64_t a2, int64_t a3) {
    return d.adq[(size_t)(k + c.K * (m + d.a_row0 + d.a_rows * (a2 + d.A2 * a3)))];
}
double b_at(const qmm_case &c, const qmm_data &d, int64_t k, int64_t n, int64_t i2, int64_t i3) {
    if (c.l == lay::b_transposed) return d.b[(size_t)(n + c.N * k)];
    return d.b[(size_t)(k + c.K * (n + c.N * (i2 + d.B2 * i3)))];
}

tg_tensor *build_mm(tg_context *ctx, std::vector<leaf> &L, const qmm_case &c, const qmm_data &d) {
    tg_tensor *a = add_leaf(ctx, L, c.t, {c.K, d.a_rows, d.A2, d.A3}, d.aq.data(), d.aq.size()).t;
    const std::vector<int64_t> bne =
        c.l == lay::b_transposed ? std::vector<int64_t>{c.N, c.K} : std::vector<int64_t>{c.K, c.N, d.B2, d.B3};
    tg_tensor *b = add_leaf(ctx, L, TG_TYPE_F32, bne, d.b.data(), d.b.size() * 4).t;
    if (!a || !b) return nullptr;
    if (c.l == lay::a_rows_view) {
        const size_t row = tg_row_size(c.t, c.K);
        a = tg_view_2d(ctx, a, c.K, c.M, row, row * (size_t)d.a_row0);
    }
    if (c.l == lay::b_transposed) b = tg_permute(ctx, b, 1, 0, 2, 3);
    return tg_mul_mat(ctx, a, b);
}

// The case on gpu against float64 (sampled rows) and, when with_cpu and the
// CPU reference is quick enough, against the CPU backend.
void check_mm(tg_backend *gpu, const qmm_case &c, bool with_cpu, double tol_override = 0) {
    const qmm_data d = make_data(c, 7 + (uint32_t)(c.N * 131 + c.K));
    if (::testing::Test::HasFailure()) return;
    auto build = [&](tg_context *ctx, std::vector<leaf> &L) { return build_mm(ctx, L, c, d); };
    result r;
    run(gpu, build, &r);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(r.status, TG_OK) << r.err;
    EXPECT_TRUE(r.tail_ok) << "CUDA wrote past the output";
    for (size_t i = 0; i < r.out.size(); i++) ASSERT_TRUE(std::isfinite(r.out[i])) << "output " << i << " = " << r.out[i];

    // float64 oracle over sampled rows (all columns, all batches)
    std::mt19937 srng(3);
    std::vector<int64_t> rows = {0, c.M - 1};
    for (int i = 0; i < 62 && (int64_t)rows.size() < c.M; i++)
        rows.push_back(std::uniform_int_distribution<int64_t>(0, c.M - 1)(srng));
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t i3 = 0; i3 < d.B3; i3++)
        for (int64_t i2 = 0; i2 < d.B2; i2++)
            for (int64_t n = 0; n < c.N; n++)
                for (int64_t m : rows) {
                    const int64_t a2 = i2 / (d.B2 / d.A2), a3 = i3 / (d.B3 / d.A3);
                    double s = 0.0;
                    for (int64_t k = 0; k < c.K; k++) s += a_at(c, d, k, m, a2, a3) * b_at(c, d, k, n, i2, i3);
                    ref.push_back(s);
                    got.push_back(r.out[(size_t)(m + c.M * (n + c.N * (i2 + d.B2 * i3)))]);
                }
    // sequences sharing weights of 1 MiB or more are columns of one product
    // (more than 8: the prefill path; docs/ops.md)
    const bool gemm = c.l == lay::seqs && c.N * d.B2 > 8 && tg_row_size(c.t, c.K) * (size_t)c.M >= ((size_t)1 << 20);
    const double tol = tol_override > 0 ? tol_override : c.N <= 8 && !gemm ? k_decode_tol : k_prefill_tol;
    const double e = tgt::rel_error(got, ref);
    printf("[ qmm      ] %-26s K%lld M%lld N%lld: relative L2 error %.3g (bound %.1e)\n", c.name.c_str(),
           (long long)c.K, (long long)c.M, (long long)c.N, e, tol);
    EXPECT_LE(e, tol) << c.name;
#ifdef TG_HAVE_CUDA
    if (c.l == lay::seqs) EXPECT_STREQ(tg_cuda_sig_last(gpu, TG_CUDA_SIG_MUL_MAT), gemm ? "quant/gemm" : "quant/gemv");
#endif

    // the CPU backend's result, where its reference kernel is quick enough
    if (!with_cpu || (double)c.M * c.N * c.K * d.B2 * d.B3 > (double)(1 << 28)) return;
    backend_ptr cpu(tg_backend_cpu(0), tg_backend_free);
    ASSERT_NE(cpu.get(), nullptr) << tg_last_error();
    result rc;
    run(cpu.get(), build, &rc);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(rc.status, TG_OK) << rc.err;
    std::vector<double> cref(rc.out.begin(), rc.out.end());
    const double ec = tgt::rel_error(r.out, cref);
    printf("[ qmm      ] %-26s vs the CPU backend: relative L2 difference %.3g (bound %.1e)\n", c.name.c_str(), ec,
           2 * k_decode_tol);
    EXPECT_LE(ec, 2 * k_decode_tol) << c.name;
}

class CudaQuantMulMat : public ::testing::TestWithParam<qmm_case> {};

TEST_P(CudaQuantMulMat, MatchesFloat64AndCpu) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    check_mm(gpu.get(), GetParam(), true);
}

std::vector<qmm_case> qmm_cases() {
    std::vector<qmm_case> v;
    for (tg_type t : qtu::k_qtypes) {
        const std::string tn = tg_type_name(t);
        const bool k4 = t == TG_TYPE_Q4_K;
        auto add = [&](const std::string &name, int64_t K, int64_t M, int64_t N, lay l = lay::plain) {
            v.push_back({tn + "_" + name, t, K, M, N, l});
        };
        // every N around the decode / prefill switch, M odd
        for (int64_t N : {1, 2, 3, 7, 8, 9, 16, 64, 512})
            add("n" + std::to_string(N), S(2048, 256), S(1001, 77), N == 512 ? S(512, 40) : N);
        // K from one block up (Q4_K: whole super-blocks), a GEMV and a GEMM each
        for (int64_t K : {32, 96, 256, 2048, 8192}) {
            if (k4 && K % 256 != 0) continue;
            if (small() && K > 2048) K = 1024;
            add("k" + std::to_string(K) + "_n3", K, S(333, 45), 3);
            add("k" + std::to_string(K) + "_n9", K, S(333, 45), 9);
        }
        // LLM sizes, batch 1 (a {K, M}: M x K weights)
        add("2048x2048_n1", S(2048, 256), S(2048, 320), 1);
        add("8192x2048_n1", S(2048, 256), S(8192, 320), 1);
        // (K 8192 also in small runs: rows long enough to be split over warps)
        add("2048x8192_n1", 8192, S(2048, 96), 1);
        add("2048x8192_n8", 8192, S(2048, 96), 8);
        add("2048x16384_n2", 16384, S(2048, 64), 2);
        add("8192x2048_n512", S(2048, 256), S(8192, 320), S(512, 40));
        if (t == TG_TYPE_Q4_0) {  // the vocabulary projection (quantizing 65M weights takes seconds per type)
            add("32000x2048_n1", S(2048, 256), S(32000, 500), 1);
            add("32000x2048_n16", S(2048, 256), S(32000, 500), 16);
        }
        const int64_t Ks = k4 ? 256 : 96;  // 96: 3 blocks a row, so rows start at both 4-byte alignments
        // one column: over batches, b transposed, a few blocks per row
        add("bcast_n1", k4 ? 256 : 128, 130, 1, lay::bcast);
        add("b_transposed_n1", 256, 200, 1, lay::b_transposed);
        add("k" + std::to_string(Ks) + "_n1", Ks, 77, 1);
        add("bcast_n3", k4 ? 256 : 128, 130, 3, lay::bcast);
        add("bcast_n20", k4 ? 256 : 128, 130, 20, lay::bcast);
        add("b_transposed_n5", 256, 200, 5, lay::b_transposed);
        add("b_transposed_n33", 256, 200, 33, lay::b_transposed);
        add("rows_view_n2", Ks, 77, 2, lay::a_rows_view);
        add("rows_view_n12", Ks, 77, 12, lay::a_rows_view);
        // a batch-16 decode step: weights of 1 MiB or more take one GEMM of the
        // 16 sequences' columns, smaller ones the GEMV (one launch, 16 batches)
        add("seqs16_n1", 2048, S(2048, 1024), 1, lay::seqs);  // >= 1.1 MiB in small runs too
        add("seqs16_small_n2", k4 ? 256 : 96, 77, 2, lay::seqs);
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaQuantMulMat, ::testing::ValuesIn(qmm_cases()),
                         [](const ::testing::TestParamInfo<qmm_case> &i) { return i.param.name; });

// The two decode kernels, b quantized to 8 bits + dp4a in both: the
// fused-job kernel ("1") and the per-product kernel it replaced ("1k",
// TG_CUDA_MMQ_KERNEL=1, read when the backend is created), which stays for b
// layouts the fused-job kernel does not take (b_transposed below, on both).
// (The F32-b variant these cases also ran was removed in session 30.)
TEST(CudaQuant, DecodeVariantsMatchFloat64) {
    SKIP_WITHOUT_CUDA();
    for (const char *v : {"1", "1k"}) {
        if (v[1] == 'k') setenv("TG_CUDA_MMQ_KERNEL", "1", 1);
        backend_ptr gpu = cuda_or_null();
        unsetenv("TG_CUDA_MMQ_KERNEL");
        ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
        const double tol = k_decode_tol;
        for (tg_type t : qtu::k_qtypes) {
            const std::string tn = std::string(tg_type_name(t)) + "_variant" + v;
            for (int64_t N : {1, 2, 3, 8}) check_mm(gpu.get(), {tn + "_n" + std::to_string(N), t, 2048, 333, N, lay::plain}, false, tol);
            check_mm(gpu.get(), {tn + "_k8192_n1", t, 8192, 77, 1, lay::plain}, false, tol);
            check_mm(gpu.get(), {tn + "_bcast_n3", t, 256, 130, 3, lay::bcast}, false, tol);
            check_mm(gpu.get(), {tn + "_rows_view_n2", t, t == TG_TYPE_Q4_K ? 256 : 96, 77, 2, lay::a_rows_view}, false, tol);
            check_mm(gpu.get(), {tn + "_b_transposed_n5", t, 256, 200, 5, lay::b_transposed}, false, k_decode_tol);
        }
    }
}

// Weights whose F16 copy exceeds the backend's budget are dequantized in
// chunks of rows (TG_CUDA_MM_BUDGET, read when the backend is created: 64 KiB
// here, so 128-row chunks of K = 256 and 16-row chunks of K = 2048).
TEST(CudaQuant, PrefillInChunksMatchesFloat64) {
    SKIP_WITHOUT_CUDA();
    setenv("TG_CUDA_MM_BUDGET", "65536", 1);
    backend_ptr gpu = cuda_or_null();
    unsetenv("TG_CUDA_MM_BUDGET");
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    for (tg_type t : qtu::k_qtypes) {
        const std::string tn = tg_type_name(t);
        check_mm(gpu.get(), {tn + "_chunked_n16", t, 256, 333, 16, lay::plain}, false);
        check_mm(gpu.get(), {tn + "_chunked_bcast_n20", t, 256, 130, 20, lay::bcast}, false);
        check_mm(gpu.get(), {tn + "_chunked_k2048_n9", t, 2048, 77, 9, lay::plain}, false);
        check_mm(gpu.get(), {tn + "_chunked_n3", t, 256, 333, 3, lay::plain}, false);  // decode: no chunks
    }
}

// A NaN in b makes its output column NaN (the decode path's 8-bit block of
// b carries it as its scale), and only that column.
TEST(CudaQuant, NanInBReachesItsColumnOnly) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    for (tg_type t : qtu::k_qtypes)
        for (int64_t N : {1, 2, 12}) {
            qmm_case c{"nan", t, 512, 40, N, lay::plain};
            qmm_data d = make_data(c, 5);
            const int64_t nan_col = N > 1 ? 1 : 0;
            d.b[(size_t)(c.K * nan_col + 300)] = NAN;
            result r;
            run(gpu.get(), [&](tg_context *ctx, std::vector<leaf> &L) { return build_mm(ctx, L, c, d); }, &r);
            if (::testing::Test::HasFatalFailure()) return;
            ASSERT_EQ(r.status, TG_OK) << r.err;
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < c.M; m++) {
                    const float v = r.out[(size_t)(m + c.M * n)];
                    if (n == nan_col) ASSERT_TRUE(std::isnan(v)) << tg_type_name(t) << " N" << N << " m " << m;
                    else ASSERT_TRUE(std::isfinite(v)) << tg_type_name(t) << " N" << N << " n " << n << " m " << m;
                }
        }
}

// ---------------------------------------------------------------------------
// get_rows

struct gr_data {
    int64_t E, V;
    std::vector<uint8_t> aq;
    std::vector<float> adq;
    std::vector<int32_t> ids;
};

gr_data make_gr(tg_type t, int64_t E, int64_t V, std::vector<int32_t> ids) {
    gr_data d{E, V, {}, {}, std::move(ids)};
    std::mt19937 rng(17);
    const std::vector<float> w = qtu::weights(rng, E, V);
    d.aq = qtu::quantized(t, w);
    d.adq.resize(w.size());
    EXPECT_EQ(tg_dequantize(t, d.aq.data(), d.adq.data(), (int64_t)w.size()), TG_OK) << tg_last_error();
    return d;
}

tg_tensor *build_gr(tg_context *ctx, std::vector<leaf> &L, tg_type t, const gr_data &d) {
    tg_tensor *a = add_leaf(ctx, L, t, {d.E, d.V}, d.aq.data(), d.aq.size()).t;
    tg_tensor *ids = add_leaf(ctx, L, TG_TYPE_I32, {(int64_t)d.ids.size() / 2, 2}, d.ids.data(), d.ids.size() * 4).t;
    return a && ids ? tg_get_rows(ctx, a, ids) : nullptr;
}

TEST(CudaQuant, GetRowsDequantizesExactly) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    for (tg_type t : qtu::k_qtypes) {
        const int64_t E = S(2048, 512), V = S(1000, 100);
        const gr_data d = make_gr(t, E, V, {0, (int32_t)V - 1, 5, 5, 17, (int32_t)V / 2, 3, 1, 0, 42});
        result r;
        run(gpu.get(), [&](tg_context *ctx, std::vector<leaf> &L) { return build_gr(ctx, L, t, d); }, &r);
        if (::testing::Test::HasFatalFailure()) return;
        ASSERT_EQ(r.status, TG_OK) << r.err;
        EXPECT_TRUE(r.tail_ok) << "CUDA wrote past the output";
        for (size_t i = 0; i < d.ids.size(); i++)
            for (int64_t e = 0; e < E; e++) {
                const float want = d.adq[(size_t)(d.ids[i] * E + e)], got = r.out[(size_t)((int64_t)i * E + e)];
                // Q4_K's d * sc * q - dmin * m: the host compiler may fuse the last two steps (one rounding less)
                const float tol = t == TG_TYPE_Q4_K ? 2e-7f * std::fabs(want) + 1e-30f : 0.0f;
                ASSERT_LE(std::fabs(got - want), tol) << tg_type_name(t) << " id " << d.ids[i] << " element " << e;
                ASSERT_FALSE(std::isnan(got));
            }
    }
}

// A bad id fails the compute with its message, and the persistent sink that
// the rows would be copied into stays as it was (NaN head, random tail).
TEST(CudaQuant, GetRowsBadIdLeavesOutputUntouched) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    for (tg_type t : qtu::k_qtypes)
        for (int32_t bad : {-1, 64, 1 << 30}) {
            const gr_data d = make_gr(t, 256, 64, {3, 7, bad, 1});
            result r;
            run(gpu.get(), [&](tg_context *ctx, std::vector<leaf> &L) { return build_gr(ctx, L, t, d); }, &r);
            if (::testing::Test::HasFatalFailure()) return;
            EXPECT_EQ(r.status, TG_ERR_ARG) << tg_type_name(t) << " id " << bad;
            EXPECT_EQ(r.err.rfind("[get_rows] id " + std::to_string(bad) + " ", 0), 0u) << r.err;
            EXPECT_NE(r.err.find("out of range [0, 64)"), std::string::npos) << r.err;
            EXPECT_TRUE(r.tail_ok);
            for (float v : r.out) ASSERT_TRUE(std::isnan(v)) << "the sink's head was written";
        }
    // the backend is still usable
    const gr_data d = make_gr(TG_TYPE_Q4_0, 256, 64, {3, 7, 0, 1});
    result r;
    run(gpu.get(), [&](tg_context *ctx, std::vector<leaf> &L) { return build_gr(ctx, L, TG_TYPE_Q4_0, d); }, &r);
    EXPECT_EQ(r.status, TG_OK) << r.err;
}

// cpy / cont of quantized tensors move the blocks as bytes (an odd number of
// 16-byte words, and a large aligned one).
TEST(CudaQuant, CopiesMoveBlocksUnchanged) {
    SKIP_WITHOUT_CUDA();
    backend_ptr gpu = cuda_or_null();
    ASSERT_NE(gpu.get(), nullptr) << tg_last_error();
    for (tg_type t : qtu::k_qtypes)
        for (int64_t rows : {3, 1000}) {
            const int64_t K = t == TG_TYPE_Q4_K ? 256 : 32;
            std::mt19937 rng(23);
            const std::vector<uint8_t> q = qtu::quantized(t, qtu::weights(rng, K, rows));
            tg_init_params ip = {1 << 20, nullptr, true};
            std::unique_ptr<tg_context, void (*)(tg_context *)> ctx(tg_init(ip), tg_free);
            tg_tensor *src = tg_new_tensor_2d(ctx.get(), t, K, rows);
            tg_tensor *dst = tg_new_tensor_2d(ctx.get(), t, K, rows);
            tg_tensor *cont = tg_cont(ctx.get(), src);
            ASSERT_NE(cont, nullptr) << tg_last_error();
            tg_tensor *out = tg_cpy(ctx.get(), cont, dst);
            ASSERT_NE(out, nullptr) << tg_last_error();
            tg_graph *g = tg_graph_new(ctx.get());
            ASSERT_EQ(tg_graph_expand(g, out), TG_OK);
            std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> buf(tg_backend_alloc(gpu.get(), ctx.get()),
                                                                  tg_buffer_free);
            ASSERT_NE(buf.get(), nullptr) << tg_last_error();
            ASSERT_EQ(tg_buffer_clear(buf.get(), 0xA5), TG_OK);
            ASSERT_EQ(tg_tensor_set(src, q.data(), 0, q.size()), TG_OK);
            ASSERT_EQ(tg_graph_compute(gpu.get(), g), TG_OK) << tg_last_error();
            std::vector<uint8_t> back(q.size());
            ASSERT_EQ(tg_tensor_get(dst, back.data(), 0, back.size()), TG_OK);
            EXPECT_EQ(back, q) << tg_type_name(t) << " rows " << rows;
        }
}

}  // namespace
