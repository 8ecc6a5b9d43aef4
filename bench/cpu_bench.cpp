// cpu_bench.cpp - tinygml-bench-cpu: the CPU backend through the public API
// (bench/README.md, "CPU rows"). Measures, in one run on this machine:
//   - memcpy bandwidth (bytes read + written), 1 thread and n threads;
//   - the FMA peak of n threads (independent FMAs, widest vector the CPU has);
//   - mul_mat 2048x2048 F16, Q8_0, Q4_0, Q4_K x {1, 64} tokens: GB/s of
//     weights read (% of the n-thread memcpy figure) and GFLOP/s (% of the FMA
//     peak);
//   - the BENCHMARKS.md CPU rows as one-node graphs (median host wall time of
//     tg_graph_compute);
// prints a table and writes JSON. Usage:
//   tinygml-bench-cpu [out.json] [-t N] [--quick] [--only PREFIX]
// A partial run (--only) writes JSON only to an out.json given: its rows
// would replace the committed record's (bench/results/cpu.json) whole.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "tinygml.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

int g_threads = 2;
bool g_quick = false;
const char *g_only = nullptr;
tg_backend *g_be = nullptr;

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define OK_OR_DIE(x)                                                                          \
    do {                                                                                      \
        if ((x) != TG_OK) {                                                                   \
            fprintf(stderr, "tinygml-bench-cpu: %s failed: %s\n", #x, tg_last_error());       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

struct row {
    std::string id, what;
    double us = 0, us_min = 0, bytes = 0, flops = 0, anchor_us = 0;
    double floor_gbs = 0;  // the streaming floor of this row's access pattern (0: the copy figure)
};
std::vector<row> g_rows;
double g_copy_gbs = 0, g_copy1_gbs = 0, g_fma_gflops = 0;
double g_state_copy_gbs = 0, g_state_rmw_gbs = 0;  // the gdn.decode state's bytes, n threads

bool skip(const char *id) { return g_only && strncmp(id, g_only, strlen(g_only)) != 0; }

// median and min of f() over reps (after one warm-up), stopping after ~budget_us
template <typename F> void time_it(F f, double budget_us, double *med, double *mn) {
    f();
    std::vector<double> t;
    const double start = now_us();
    for (int i = 0; i < 1000 && (i < 5 || now_us() - start < budget_us); i++) {
        const double t0 = now_us();
        f();
        t.push_back(now_us() - t0);
    }
    std::sort(t.begin(), t.end());
    *med = t[t.size() / 2];
    *mn = t[0];
}

void fill(tg_tensor *t, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    const int64_t n = tg_nelements(t);
    if (tg_tensor_type(t) == TG_TYPE_F16) {
        std::vector<uint16_t> v((size_t)n);
        for (auto &x : v) x = tg_fp32_to_fp16(d(rng));
        OK_OR_DIE(tg_tensor_set(t, v.data(), 0, v.size() * 2));
    } else {
        std::vector<float> v((size_t)n);
        for (auto &x : v) x = d(rng);
        OK_OR_DIE(tg_tensor_set(t, v.data(), 0, v.size() * 4));
    }
}

tg_context *new_ctx(int n_tensors) {
    tg_init_params ip = {(size_t)n_tensors * 1024 + (1 << 16), nullptr, true};
    return tg_init(ip);
}

// --- floors ------------------------------------------------------------------

// The last-level cache in bytes (0 when the OS does not say). Some machines
// of this kind report a 480 MiB L3: 256 MiB copies and a 128 MiB rotation of
// weights then measure that cache, not memory, so both grow past it.
size_t llc_bytes() {
#if defined(_SC_LEVEL3_CACHE_SIZE)
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return (size_t)l3;
#endif
    return 0;
}
// bytes of each of the two buffers of the memcpy floor: 256 MiB, or twice the
// last-level cache when that is larger
size_t copy_bytes() { return std::max((size_t)256 << 20, 2 * llc_bytes()); }
// copies of a weight of `bytes` for a cold product: together at least 128 MiB
// and at least twice the last-level cache (16 copies of a 2048x2048 F16)
int cold_copies(size_t bytes) {
    const size_t want = std::max((size_t)128 << 20, 2 * llc_bytes());
    return (int)((want + bytes - 1) / bytes);
}

double copy_gbs(int nth, size_t bytes) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    auto once = [&] {
        std::vector<std::thread> ts;
        const size_t per = bytes / nth;
        for (int i = 0; i < nth; i++)
            ts.emplace_back([&, i] { memcpy(b.data() + i * per, a.data() + i * per, per); });
        for (auto &t : ts) t.join();
    };
    double med, mn;
    time_it(once, g_quick ? 3e5 : 2e6, &med, &mn);
    return 2.0 * (double)bytes / (mn * 1e3);  // read + written; best run
}

// In-place stream, the access pattern of a decode step of the delta rule
// (each state value read and written back once): x = a*x + b over `bytes`
// floats split in nth contiguous parts. GB/s read + written, best run.
void rmw_part(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0.999f * x[i] + 1e-4f;
}
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void rmw_part512(float *x, size_t n) {
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_store_ps(x + i, _mm512_fmadd_ps(a, _mm512_load_ps(x + i), b));
    rmw_part(x + i, n - i);
}
#endif
double rmw_gbs(int nth, size_t bytes) {
    const size_t n = bytes / 4, per = n / nth / 16 * 16;
    float *x = (float *)aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    void (*part)(float *, size_t) = rmw_part;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) part = rmw_part512;
#endif
    auto once = [&] {
        std::vector<std::thread> ts;
        for (int i = 0; i < nth; i++) ts.emplace_back([&, i] { part(x + i * per, per); });
        for (auto &t : ts) t.join();
    };
    double med, mn;
    time_it(once, g_quick ? 3e5 : 2e6, &med, &mn);
    free(x);
    return 2.0 * (double)(per * nth * 4) / (mn * 1e3);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_loop512(long n) {
    __m512 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long k = 0; k < n; k++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(a[i]);
    return s;
}
__attribute__((target("avx2,fma"))) double fma_loop256(long n) {
    __m256 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long k = 0; k < n; k++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    float t[8], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(t, a[i]);
        for (float x : t) s += x;
    }
    return s;
}
#endif

// FMA peak of nth threads in GFLOP/s (2 flops per lane per FMA)
double fma_peak(int nth, const char **isa) {
    int width = 0;
    double (*loop)(long) = nullptr;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) width = 16, loop = fma_loop512, *isa = "avx512";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) width = 8, loop = fma_loop256, *isa = "avx2";
#endif
    if (!loop) {
        *isa = "none";
        return 0;
    }
    const long n = 2000000;
    volatile double sink = 0;
    auto once = [&] {
        std::vector<std::thread> ts;
        for (int i = 0; i < nth; i++) ts.emplace_back([&] { sink = sink + loop(n); });
        for (auto &t : ts) t.join();
    };
    double med, mn;
    time_it(once, g_quick ? 3e5 : 1e6, &med, &mn);
    return (double)nth * n * 12 * width * 2 / (mn * 1e3);
}

// --- mul_mat -----------------------------------------------------------------

// y = W x, W {K, M} of type wt (nw copies rotated so that the set exceeds the
// caches; quantized: random F32 weights through tg_quantize), x {K, N} F32
void bench_mul_mat(const char *id, int K, int M, int N, int nw, tg_type wt = TG_TYPE_F16) {
    if (skip(id)) return;
    row r;
    r.id = id;
    char buf[128];
    snprintf(buf, sizeof buf, "mul_mat %s %dx%d x %d tokens%s", tg_type_name(wt), K, M, N,
             nw > 1 ? ", weights rotated" : "");
    r.what = buf;
    tg_context *ctx = new_ctx(4 * nw + 8);
    std::vector<tg_tensor *> w(nw), y(nw);
    std::vector<tg_graph *> g(nw);
    tg_tensor *x = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, N);
    for (int i = 0; i < nw; i++) {
        w[i] = tg_new_tensor_2d(ctx, wt, K, M);
        y[i] = tg_mul_mat(ctx, w[i], x);
        g[i] = tg_graph_new(ctx);
        OK_OR_DIE(tg_graph_expand(g[i], y[i]));
    }
    tg_buffer *b = tg_backend_alloc(g_be, ctx);
    if (!b) OK_OR_DIE(TG_ERR_OOM);
    std::vector<uint8_t> q;  // quantized: one random matrix, copied into every rotated copy
    for (int i = 0; i < nw; i++) {
        if (!tg_type_is_quantized(wt)) {
            fill(w[i], -1, 1, 7 + i);
            continue;
        }
        if (q.empty()) {
            std::mt19937 rng(7);
            std::uniform_real_distribution<float> d(-1, 1);
            std::vector<float> v((size_t)K * M);
            for (auto &e : v) e = d(rng);
            q.resize(tg_nbytes(w[i]));
            OK_OR_DIE(tg_quantize(wt, v.data(), q.data(), (int64_t)v.size()));
        }
        OK_OR_DIE(tg_tensor_set(w[i], q.data(), 0, q.size()));
    }
    fill(x, -1, 1, 3);
    int it = 0;
    time_it([&] { OK_OR_DIE(tg_graph_compute(g_be, g[it++ % nw])); }, g_quick ? 3e5 : 1.5e6, &r.us, &r.us_min);
    r.bytes = (double)tg_row_size(wt, K) * M + 4.0 * K * N + 4.0 * M * N;
    r.flops = 2.0 * K * M * N;
    g_rows.push_back(r);
    tg_buffer_free(b);
    tg_free(ctx);
}

// --- signature ops -------------------------------------------------------------

// rope_kv_update, INTERLEAVED, cos/sin tables, F32 caches (only the T rows
// written are touched: the L-row caches are not filled)
void bench_kv(const char *id, int B, int T, int H, int D, int L, double anchor) {
    if (skip(id)) return;
    row r;
    r.id = id;
    char buf[128];
    snprintf(buf, sizeof buf, "rope_kv_update B%d T%d H%d D%d L%d, tables, F32 caches", B, T, H, D, L);
    r.what = buf;
    r.anchor_us = anchor;
    tg_context *ctx = new_ctx(16);
    const int half = D / 2;
    tg_tensor *kc = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, B), *vc = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, B);
    tg_tensor *kn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B), *vn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B);
    tg_tensor *pos = tg_new_tensor_2d(ctx, TG_TYPE_I32, T, B);
    tg_tensor *cs = tg_new_tensor_2d(ctx, TG_TYPE_F32, half, L), *sn = tg_new_tensor_2d(ctx, TG_TYPE_F32, half, L);
    tg_rope_params rp = tg_rope_default_params(D);
    tg_tensor *node = tg_rope_kv_update(ctx, kc, vc, kn, vn, pos, cs, sn, &rp);
    if (!node) OK_OR_DIE(TG_ERR_ARG);
    tg_graph *g = tg_graph_new(ctx);
    OK_OR_DIE(tg_graph_expand(g, node));
    tg_buffer *b = tg_backend_alloc(g_be, ctx);
    if (!b) OK_OR_DIE(TG_ERR_OOM);
    fill(kn, -1, 1, 1), fill(vn, -1, 1, 2), fill(cs, -1, 1, 3), fill(sn, -1, 1, 4);
    std::mt19937 rng(42);
    std::vector<int32_t> all(L), p;
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < L; i++) all[i] = i;
        std::shuffle(all.begin(), all.end(), rng);
        p.insert(p.end(), all.begin(), all.begin() + T);
    }
    OK_OR_DIE(tg_tensor_set(pos, p.data(), 0, p.size() * 4));
    time_it([&] { OK_OR_DIE(tg_graph_compute(g_be, g)); }, g_quick ? 2e5 : 1e6, &r.us, &r.us_min);
    r.bytes = 4.0 * B * T * H * D * 4 + 4.0 * B * T + 2.0 * B * T * half * 4;
    g_rows.push_back(r);
    tg_buffer_free(b);
    tg_free(ctx);
}

void bench_delta(const char *id, int B, int T, int H, int D, tg_delta_mode mode, tg_gate_kind gate, bool l2norm,
                 bool state, double anchor) {
    if (skip(id)) return;
    row r;
    r.id = id;
    char buf[160];
    snprintf(buf, sizeof buf, "delta_rule B%d T%d H%d D%d %s, gate %s, l2norm %s, %s", B, T, H, D,
             mode == TG_DELTA_GATED_DELTA ? "GATED_DELTA" : "GATED_LINEAR", gate == TG_GATE_LOG ? "LOG" : "LINEAR",
             l2norm ? "on" : "off", state ? "F32 state" : "no state");
    r.what = buf;
    r.anchor_us = anchor;
    tg_context *ctx = new_ctx(16);
    tg_tensor *S = state ? tg_new_tensor_4d(ctx, TG_TYPE_F32, D, D, H, B) : nullptr;
    tg_tensor *q = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B), *k = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B);
    tg_tensor *v = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B);
    tg_tensor *gt = tg_new_tensor_3d(ctx, TG_TYPE_F32, H, T, B), *bt = tg_new_tensor_3d(ctx, TG_TYPE_F32, H, T, B);
    tg_delta_params dp = {};
    dp.mode = mode, dp.gate = gate, dp.scale = 1.0f / std::sqrt((float)D), dp.l2norm_qk = l2norm;
    tg_tensor *node = tg_delta_rule(ctx, q, k, v, gt, bt, S, &dp);
    if (!node) OK_OR_DIE(TG_ERR_ARG);
    tg_graph *g = tg_graph_new(ctx);
    OK_OR_DIE(tg_graph_expand(g, node));
    tg_buffer *b = tg_backend_alloc(g_be, ctx);
    if (!b) OK_OR_DIE(TG_ERR_OOM);
    const float klim = (mode == TG_DELTA_GATED_DELTA && !l2norm) ? 1.0f / std::sqrt((float)D) : 1.0f;
    fill(q, -1, 1, 1), fill(k, -klim, klim, 2), fill(v, -1, 1, 3);
    if (gate == TG_GATE_LOG) fill(gt, -0.1f, 0.0f, 4);
    else fill(gt, 0.9f, 1.0f, 4);
    fill(bt, 0.0f, 1.0f, 5);
    if (S) fill(S, -0.1f, 0.1f, 6);
    time_it([&] { OK_OR_DIE(tg_graph_compute(g_be, g)); }, g_quick ? 2e5 : 1.5e6, &r.us, &r.us_min);
    std::vector<float> o((size_t)std::min<int64_t>(tg_nelements(node), 1 << 20));
    OK_OR_DIE(tg_tensor_get(node, o.data(), 0, o.size() * 4));
    for (float x : o)
        if (!std::isfinite(x)) {
            fprintf(stderr, "tinygml-bench-cpu: %s produced a non-finite output\n", id);
            exit(1);
        }
    const double tok = (double)B * T * H;
    r.bytes = tok * D * 4 * 4 + tok * 2 * 4 + (state ? 2.0 * B * H * D * D * 4 : 0.0);
    if (state && T == 1) {
        // the floors of this access pattern for the state's bytes, measured
        // right after the row (the machine is shared: same minute)
        const size_t sb = (size_t)B * H * D * D * 4;
        g_state_rmw_gbs = r.floor_gbs = rmw_gbs(g_threads, sb);
        g_state_copy_gbs = copy_gbs(g_threads, sb);
    }
    g_rows.push_back(r);
    tg_buffer_free(b);
    tg_free(ctx);
}

}  // namespace

int main(int argc, char **argv) {
    const char *out = "bench/results/cpu.json";
    bool out_set = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) g_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) g_quick = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [OUT.json] [-t THREADS] [--quick] [--only ID_PREFIX]\n"
                   "  OUT.json defaults to bench/results/cpu.json (with --only: no file unless given)\n",
                   argv[0]);
            return 0;
        } else if (argv[i][0] == '-' || out_set) {
            // an unknown flag (or a second path) is an error, not a file name to write
            fprintf(stderr, "tinygml-bench-cpu: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else {
            out = argv[i];
            out_set = true;
        }
    }
    g_be = tg_backend_cpu(g_threads);
    if (!g_be) {
        fprintf(stderr, "tinygml-bench-cpu: %s\n", tg_last_error());
        return 1;
    }
    const char *isa = "";
    g_copy1_gbs = copy_gbs(1, copy_bytes());
    g_copy_gbs = copy_gbs(g_threads, copy_bytes());
    g_fma_gflops = fma_peak(g_threads, &isa);
    printf("threads %d; last-level cache %zu MiB; memcpy %zu MiB (read + written): %.1f GB/s (1 thread), "
           "%.1f GB/s (%d threads); FMA peak (%s, %d threads): %.0f GFLOP/s\n",
           g_threads, llc_bytes() >> 20, copy_bytes() >> 20, g_copy1_gbs, g_copy_gbs, g_threads, isa, g_threads,
           g_fma_gflops);

    bench_mul_mat("mm.f16.n1", 2048, 2048, 1, 1);
    bench_mul_mat("mm.f16.n1.cold", 2048, 2048, 1, cold_copies((size_t)2048 * 2048 * 2));
    bench_mul_mat("mm.f16.n64", 2048, 2048, 64, 1);
    // quantized weights (activations quantized to 8 bits inside the op: the
    // FLOP/s count the weights' multiply-adds as for F16)
    // (.cold: copies in turn, past the last-level cache as for F16, so the weights come from memory as in a
    // decode step)
    bench_mul_mat("mm.q8_0.n1", 2048, 2048, 1, 1, TG_TYPE_Q8_0);
    bench_mul_mat("mm.q8_0.n1.cold", 2048, 2048, 1, cold_copies(tg_row_size(TG_TYPE_Q8_0, 2048) * 2048), TG_TYPE_Q8_0);
    bench_mul_mat("mm.q8_0.n4", 2048, 2048, 4, 1, TG_TYPE_Q8_0);
    bench_mul_mat("mm.q8_0.n64", 2048, 2048, 64, 1, TG_TYPE_Q8_0);
    bench_mul_mat("mm.q4_0.n1", 2048, 2048, 1, 1, TG_TYPE_Q4_0);
    bench_mul_mat("mm.q4_0.n1.cold", 2048, 2048, 1, cold_copies(tg_row_size(TG_TYPE_Q4_0, 2048) * 2048), TG_TYPE_Q4_0);
    bench_mul_mat("mm.q4_0.n4", 2048, 2048, 4, 1, TG_TYPE_Q4_0);
    bench_mul_mat("mm.q4_0.n64", 2048, 2048, 64, 1, TG_TYPE_Q4_0);
    bench_mul_mat("mm.q4_k.n1", 2048, 2048, 1, 1, TG_TYPE_Q4_K);
    bench_mul_mat("mm.q4_k.n1.cold", 2048, 2048, 1, cold_copies(tg_row_size(TG_TYPE_Q4_K, 2048) * 2048), TG_TYPE_Q4_K);
    bench_mul_mat("mm.q4_k.n4", 2048, 2048, 4, 1, TG_TYPE_Q4_K);
    bench_mul_mat("mm.q4_k.n64", 2048, 2048, 64, 1, TG_TYPE_Q4_K);
    bench_kv("kv.seed", 2, 16, 4, 32, 128, 11.1);
    bench_kv("kv.decode", 64, 1, 32, 128, 4096, 182);
    const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
    bench_delta("gla.seed", 4, 64, 8, 24, GL, TG_GATE_LINEAR, false, false, 280);
    bench_delta("gdn.seed.state", 4, 64, 8, 24, GD, TG_GATE_LOG, true, true, 629);
    bench_delta("gdn.decode", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 8314);
    bench_delta("gdn.t512", 1, 512, 16, 128, GD, TG_GATE_LOG, true, true, 18400);

    // Figures from the median time, and in brackets from the best run: this
    // machine kind is shared, and the floors above are best runs too.
    printf("%-15s %-66s %10s %10s %15s %15s %17s\n", "id", "what", "us(median)", "us(best)", "GB/s med[best]",
           "%copy med[best]", "GFLOP/s med[best]");
    FILE *f = g_only && !out_set ? nullptr : fopen(out, "w");
    if (f) fprintf(f, "{\n  \"threads\": %d, \"copy_gbs\": %.2f, \"copy1_gbs\": %.2f, \"fma_peak_gflops\": %.1f,\n"
                   "  \"state_rmw_gbs\": %.2f, \"state_copy_gbs\": %.2f, \"llc_mib\": %zu, \"copy_mib\": %zu,\n"
                   "  \"rows\": [\n",
                   g_threads, g_copy_gbs, g_copy1_gbs, g_fma_gflops, g_state_rmw_gbs, g_state_copy_gbs,
                   llc_bytes() >> 20, copy_bytes() >> 20);
    for (size_t i = 0; i < g_rows.size(); i++) {
        const row &r = g_rows[i];
        const double fl = r.floor_gbs > 0 ? r.floor_gbs : g_copy_gbs;
        const double gbs = r.bytes / (r.us * 1e3), gbs_b = r.bytes / (r.us_min * 1e3);
        const double gfl = r.flops / (r.us * 1e3), gfl_b = r.flops / (r.us_min * 1e3);
        char extra[128] = "";
        if (r.flops > 0 && g_fma_gflops > 0)
            snprintf(extra, sizeof extra, "  %.0f%% [%.0f%%] of FMA peak", 100 * gfl / g_fma_gflops, 100 * gfl_b / g_fma_gflops);
        if (r.anchor_us > 0)
            snprintf(extra, sizeof extra, "  ggml %.1f us: %s", r.anchor_us,
                     r.us <= r.anchor_us ? "met" : (r.us_min <= r.anchor_us ? "met by the best run" : "not met"));
        printf("%-15s %-66s %10.1f %10.1f %7.2f [%5.2f] %6.1f [%5.1f]%% %8.2f [%6.2f]%s\n", r.id.c_str(), r.what.c_str(),
               r.us, r.us_min, gbs, gbs_b, 100 * gbs / fl, 100 * gbs_b / fl, gfl, gfl_b, extra);
        if (r.floor_gbs > 0)
            printf("%-15s   %% above is of the in-place stream of the state (%.1f GB/s); of memcpy of the same bytes "
                   "(%.1f GB/s): %.1f [%.1f]%%\n", "", r.floor_gbs, g_state_copy_gbs, 100 * gbs / g_state_copy_gbs,
                   100 * gbs_b / g_state_copy_gbs);
        if (f)
            fprintf(f,
                    "    {\"id\": \"%s\", \"what\": \"%s\", \"us\": %.2f, \"us_best\": %.2f, \"bytes\": %.0f, "
                    "\"gbs\": %.3f, \"gbs_best\": %.3f, \"pct_copy\": %.1f, \"pct_copy_best\": %.1f, \"gflops\": %.3f, "
                    "\"gflops_best\": %.3f, \"pct_fma_peak\": %.1f, \"pct_fma_peak_best\": %.1f, \"ggml_us\": %.1f, \"floor_gbs\": %.2f}%s\n",
                    r.id.c_str(), r.what.c_str(), r.us, r.us_min, r.bytes, gbs, gbs_b, 100 * gbs / fl,
                    100 * gbs_b / fl, gfl, gfl_b, g_fma_gflops > 0 ? 100 * gfl / g_fma_gflops : 0.0,
                    g_fma_gflops > 0 ? 100 * gfl_b / g_fma_gflops : 0.0, r.anchor_us, fl, i + 1 < g_rows.size() ? "," : "");
    }
    if (f) {
        fprintf(f, "  ]\n}\n");
        fclose(f);
        printf("wrote %s\n", out);
    }
    tg_backend_free(g_be);
    return 0;
}
