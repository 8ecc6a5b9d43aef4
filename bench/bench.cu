// bench.cu - tinygml-bench: every BENCHMARKS.md row of the two signature ops
// (rope_kv_update, delta_rule) on the CUDA backend, against the
// device-to-device copy bandwidth measured in the same run.
//
// Graphs are built and computed through the public API (which also checks
// that every row runs); the op's launches are then timed by calling its CUDA
// entry on the already-computed node (internal headers: op table, stream):
//   event  median of CUDA events around one op call (includes the host's
//          launch overhead when the GPU outruns it: what a plain loop gets)
//   graph  one CUDA graph of N back-to-back op calls, replayed; per op
//          (what a decode step that is one graph replay gets)
//   api    median host wall time of tg_graph_compute on a one-node graph
//          (error-record reset, launches, sync, record read-back)
// Inputs are random (never zeros); when one call's data fits twice in L2,
// calls rotate over several input sets. Useful bytes as BENCHMARKS.md counts
// them. Decode steps of the shipped models: wall and host time (wall minus
// the backend's waits on the device) per session_eval step. Usage:
// tinygml-bench [results.json] [--quick] [--timing-only] [--only ID_PREFIX[,ID_PREFIX...]]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "attention.cuh"
#include "common.cuh"
#include "mul_mat.cuh"
#include "internal.h"
#include "model.h"
#include "signature.cuh"
#include "tinygml.h"

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "tinygml-bench: %s failed: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define TG_OK_OR_DIE(x)                                                                               \
    do {                                                                                              \
        if ((x) != TG_OK) {                                                                           \
            fprintf(stderr, "tinygml-bench: %s failed: %s (line %d)\n", #x, tg_last_error(), __LINE__); \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

namespace {

bool g_quick = false;
// --timing-only: a delta row whose output is not finite is timed anyway, with a note, instead of
// ending the run (ablation builds that skip a part of a kernel on purpose and compute wrong values)
bool g_timing_only = false;
// --only P1,P2,...: rows whose id starts with one of the prefixes (profiler
// runs, a few rows in one device call); P$ names one row exactly
const char *g_only = nullptr;
bool skip_row(const char *id) {
    if (!g_only) return false;
    for (const char *p = g_only;;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        const bool exact = n > 0 && p[n - 1] == '$';
        const size_t m = exact ? n - 1 : n;
        if (m > 0 && strncmp(id, p, m) == 0 && (!exact || id[m] == '\0')) return false;
        if (!end) return true;
        p = end + 1;
    }
}
tg_backend *g_be = nullptr;
cudaStream_t g_st = nullptr;
double g_copy_gbs = 0.0;
size_t g_l2 = 50u << 20;

// --- random device data ------------------------------------------------------

__device__ inline unsigned long long mix64(unsigned long long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}
__device__ inline int type_size(tg_type t) { return t == TG_TYPE_F16 || t == TG_TYPE_BF16 ? 2 : 4; }
__global__ void fill_kernel(char *p, long long n, tg_type type, unsigned long long seed, float lo, float hi) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float u = (float)(mix64(seed * 0x9e3779b97f4a7c15ULL + i) >> 40) * (1.0f / 16777216.0f);
        tg_cuda_store(p + i * type_size(type), type, lo + (hi - lo) * u);
    }
}
void fill(tg_tensor *t, float lo, float hi) {
    static unsigned long long seed = 1;
    const long long n = tg_nelements(t);
    fill_kernel<<<1024, 256, 0, g_st>>>((char *)t->data, n, t->type, seed++, lo, hi);
    CK(cudaGetLastError());
}

template <typename T> double median(std::vector<T> v) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return (double)v[v.size() / 2];
}

// --- timing ----------------------------------------------------------------

struct timing {
    double us_event = -1, us_graph = -1, us_api = -1;
    std::string variant;  // the variant the event and graph columns timed
};

// nodes: the op nodes of the input sets (computed once already); g1: a graph of nodes[0] alone.
// fn: what to time (default: the op's CUDA entry). The graph column is skipped
// for ops slower than max_graph_us per call (100 calls per graph, replayed).
// which (a tg_cuda_sig_op, or -1): read the variant name after the timed calls.
timing time_op(const std::vector<tg_tensor *> &nodes, tg_graph *g1, int reps, double max_graph_us,
               tg_cuda_fn fn = nullptr, int which = -1) {
    timing tm;
    if (!fn) fn = tg_op_get(nodes[0]->op).cuda;
    auto call = [&](int i) { TG_OK_OR_DIE(fn(g_be, nodes[i % nodes.size()])); };
    for (int i = 0; i < 5; i++) call(i);
    CK(cudaStreamSynchronize(g_st));
    // events around each call
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto &e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(ev[2 * i], g_st));
        call(i);
        CK(cudaEventRecord(ev[2 * i + 1], g_st));
    }
    CK(cudaStreamSynchronize(g_st));
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    tm.us_event = 1000.0 * median(ms);
    // a CUDA graph of n back-to-back calls
    if (tm.us_event <= max_graph_us) {
        const int n = g_quick ? 20 : 100, replays = g_quick ? 3 : 10;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        bool ok = cudaStreamBeginCapture(g_st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        for (int i = 0; ok && i < n; i++) ok = fn(g_be, nodes[i % nodes.size()]) == TG_OK;
        ok = cudaStreamEndCapture(g_st, &graph) == cudaSuccess && ok;
        ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
        if (ok) {
            std::vector<float> per(replays);
            CK(cudaGraphLaunch(exec, g_st));
            for (int r = 0; r < replays; r++) {
                CK(cudaEventRecord(ev[0], g_st));
                CK(cudaGraphLaunch(exec, g_st));
                CK(cudaEventRecord(ev[1], g_st));
                CK(cudaEventSynchronize(ev[1]));
                CK(cudaEventElapsedTime(&per[r], ev[0], ev[1]));
            }
            tm.us_graph = 1000.0 * median(per) / n;
        } else {
            (void)cudaGetLastError();
            fprintf(stderr, "tinygml-bench: CUDA graph capture failed; graph column left empty\n");
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    for (auto &e : ev) CK(cudaEventDestroy(e));
    if (which >= 0) tm.variant = tg_cuda_sig_last(g_be, (tg_cuda_sig_op)which);
    // the whole public call (its launches may differ: e.g. a rope_kv_update
    // alone in its graph validates inside its write kernel)
    std::vector<double> api;
    for (int i = 0; i < (g_quick ? 5 : 30); i++) {
        const auto t0 = std::chrono::steady_clock::now();
        TG_OK_OR_DIE(tg_graph_compute(g_be, g1));
        api.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    tm.us_api = median(api);
    return tm;
}

// --- rows ------------------------------------------------------------------

struct row {
    std::string id, op, shape, config, variant;
    double bytes = 0, target_us = 0;
    double flops = 0;  // > 0: the row also reports TFLOP/s (matrix-bound rows)
    bool launch_bound = false;  // judged on the graph time (one launch in a replayed step)
    timing tm;
};
std::vector<row> g_rows;

int sets_for(double bytes_per_call) {
    const double want = 2.0 * (double)g_l2 / std::max(bytes_per_call, 1.0);
    return std::max(1, std::min(32, (int)std::ceil(want)));
}

tg_context *new_ctx(int n_tensors) {
    tg_init_params ip = {(size_t)n_tensors * tg_tensor_overhead() + 4 * tg_graph_overhead() + (1 << 16), nullptr, true};
    tg_context *ctx = tg_init(ip);
    if (!ctx) TG_OK_OR_DIE(TG_ERR_OOM);
    return ctx;
}

// rope_kv_update, F32 caches, INTERLEAVED, n_rot = D, angles from cos/sin tables.
void bench_kv(const char *id, int B, int T, int H, int D, int L, double target, bool launch_bound,
              tg_cuda_sig_knobs knobs, const char *config, tg_cuda_fn entry = nullptr) {
    if (skip_row(id)) return;
    const int half = D / 2;
    row r;
    r.id = id, r.op = "rope_kv_update", r.config = config, r.target_us = target, r.launch_bound = launch_bound;
    char shape[96];
    snprintf(shape, sizeof(shape), "B%d T%d H%d D%d L%d", B, T, H, D, L);
    r.shape = shape;
    r.bytes = 4.0 * B * T * H * D * 4 + 4.0 * B * T + 2.0 * B * T * half * 4;
    const int nsets = sets_for(r.bytes);
    tg_context *ctx = new_ctx(8 * nsets + 16);
    tg_tensor *kc = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, B), *vc = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, B);
    tg_tensor *cs = tg_new_tensor_2d(ctx, TG_TYPE_F32, half, L), *sn = tg_new_tensor_2d(ctx, TG_TYPE_F32, half, L);
    tg_rope_params rp = tg_rope_default_params(D);
    std::vector<tg_tensor *> kn(nsets), vn(nsets), pos(nsets), nodes(nsets);
    tg_graph *g = tg_graph_new(ctx), *g1 = tg_graph_new(ctx);
    for (int s = 0; s < nsets; s++) {
        kn[s] = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B), vn[s] = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B);
        pos[s] = tg_new_tensor_2d(ctx, TG_TYPE_I32, T, B);
        nodes[s] = tg_rope_kv_update(ctx, kc, vc, kn[s], vn[s], pos[s], cs, sn, &rp);
        if (!nodes[s]) TG_OK_OR_DIE(TG_ERR_ARG);
        TG_OK_OR_DIE(tg_graph_expand(g, nodes[s]));
    }
    TG_OK_OR_DIE(tg_graph_expand(g1, nodes[0]));
    tg_buffer *buf = tg_backend_alloc(g_be, ctx);
    if (!buf) TG_OK_OR_DIE(TG_ERR_OOM);
    fill(kc, -1, 1), fill(vc, -1, 1);
    std::vector<float> c((size_t)half * L), si((size_t)half * L);
    for (int p = 0; p < L; p++)
        for (int i = 0; i < half; i++) {
            const double th = p * std::pow(10000.0, -2.0 * i / D);
            c[(size_t)p * half + i] = (float)std::cos(th), si[(size_t)p * half + i] = (float)std::sin(th);
        }
    TG_OK_OR_DIE(tg_tensor_set(cs, c.data(), 0, c.size() * 4));
    TG_OK_OR_DIE(tg_tensor_set(sn, si.data(), 0, si.size() * 4));
    std::mt19937 rng(42);
    std::vector<int32_t> all(L), p;
    for (int s = 0; s < nsets; s++) {
        fill(kn[s], -1, 1), fill(vn[s], -1, 1);
        p.clear();
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < L; i++) all[i] = i;
            std::shuffle(all.begin(), all.end(), rng);
            p.insert(p.end(), all.begin(), all.begin() + T);
        }
        TG_OK_OR_DIE(tg_tensor_set(pos[s], p.data(), 0, p.size() * 4));
    }
    const tg_cuda_sig_knobs saved = *tg_cuda_knobs(g_be);
    *tg_cuda_knobs(g_be) = knobs;
    TG_OK_OR_DIE(tg_graph_compute(g_be, g));
    r.tm = time_op(nodes, g1, g_quick ? 20 : (r.bytes > 1e8 ? 40 : 300), 2000.0, entry, TG_CUDA_SIG_KV);
    r.variant = entry ? "validation kernel alone" : r.tm.variant;
    *tg_cuda_knobs(g_be) = saved;
    tg_buffer_free(buf);
    tg_free(ctx);
    g_rows.push_back(r);
}

// rope (plain) on q: a {D, H, T, B} F32, angles from base.
void bench_rope(const char *id, int B, int T, int H, int D) {
    if (skip_row(id)) return;
    row r;
    r.id = id, r.op = "rope", r.config = "INTERLEAVED, base 10000, n_rot = D", r.launch_bound = T == 1;
    char shape[96];
    snprintf(shape, sizeof(shape), "B%d T%d H%d D%d", B, T, H, D);
    r.shape = shape;
    r.bytes = 2.0 * B * T * H * D * 4 + 4.0 * B * T;
    const int nsets = sets_for(r.bytes);
    tg_context *ctx = new_ctx(4 * nsets + 8);
    tg_rope_params rp = tg_rope_default_params(D);
    std::vector<tg_tensor *> a(nsets), pos(nsets), nodes(nsets);
    tg_graph *g = tg_graph_new(ctx), *g1 = tg_graph_new(ctx);
    for (int s = 0; s < nsets; s++) {
        a[s] = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, B), pos[s] = tg_new_tensor_2d(ctx, TG_TYPE_I32, T, B);
        nodes[s] = tg_rope(ctx, a[s], pos[s], &rp);
        TG_OK_OR_DIE(tg_graph_expand(g, nodes[s]));
    }
    TG_OK_OR_DIE(tg_graph_expand(g1, nodes[0]));
    tg_buffer *buf = tg_backend_alloc(g_be, ctx);
    if (!buf) TG_OK_OR_DIE(TG_ERR_OOM);
    std::vector<int32_t> p((size_t)T * B);
    for (int s = 0; s < nsets; s++) {
        fill(a[s], -1, 1);
        for (size_t i = 0; i < p.size(); i++) p[i] = (int32_t)((i * 2654435761u + s) % 4096);
        TG_OK_OR_DIE(tg_tensor_set(pos[s], p.data(), 0, p.size() * 4));
    }
    TG_OK_OR_DIE(tg_graph_compute(g_be, g));
    r.tm = time_op(nodes, g1, g_quick ? 20 : (r.bytes > 1e8 ? 40 : 300), 2000.0, nullptr, TG_CUDA_SIG_ROPE);
    r.variant = r.tm.variant;
    tg_buffer_free(buf);
    tg_free(ctx);
    g_rows.push_back(r);
}

#include "bench_delta.inc"
#include "bench_llm.inc"
#include "bench_decode.inc"

// --- copy bandwidth ----------------------------------------------------------

double copy_bandwidth_gbs() {
    const size_t bytes = (size_t)1 << 30;
    void *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemsetAsync(a, 0x5a, bytes, g_st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_st));
    std::vector<float> ms;
    for (int i = 0; i < (g_quick ? 5 : 25); i++) {
        CK(cudaEventRecord(e0, g_st));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_st));
        CK(cudaEventRecord(e1, g_st));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * bytes / (median(ms) * 1e-3) / 1e9;  // bytes read + written
}

void print_and_save(const char *path, const cudaDeviceProp &prop) {
    printf("\n%-22s %-15s %-28s %-28s %9s %9s %9s %8s %6s %8s %s\n", "id", "op", "shape", "variant", "us(event)",
           "us(graph)", "us(api)", "GB/s", "%copy", "target", "(TFLOP/s)");
    for (const row &r : g_rows) {
        // bandwidth from the time that counts for the row: graph replay for launch-bound ones
        const double us = (r.launch_bound && r.tm.us_graph > 0) ? r.tm.us_graph : r.tm.us_event;
        const double gbs = r.bytes / (us * 1e-6) / 1e9;
        char tgt[32] = "";
        if (r.target_us > 0) snprintf(tgt, sizeof(tgt), "<=%.0f", r.target_us);
        char tf[32] = "";
        if (r.flops > 0) snprintf(tf, sizeof(tf), " %.1f TFLOP/s", r.flops / (us * 1e-6) / 1e12);
        printf("%-22s %-15s %-28s %-28s %9.2f %9.2f %9.1f %8.0f %5.1f%% %8s %s%s\n", r.id.c_str(), r.op.c_str(),
               r.shape.c_str(), r.variant.c_str(), r.tm.us_event, r.tm.us_graph, r.tm.us_api, gbs,
               100.0 * gbs / g_copy_gbs, tgt, r.target_us > 0 ? (us <= r.target_us ? "met" : "MISSED") : "", tf);
    }
    if (!g_steps.empty()) {
        printf("\n%-26s %5s %5s %6s %10s %10s %12s %8s %8s\n", "decode step", "fuse", "batch", "steps", "us(wall)",
               "us(host)", "tokens/s", "replays", "kernels");
        for (const step_row &r : g_steps)
            printf("%-26s %5s %5d %6d %10.1f %10.1f %12.0f %8lld %8d\n", r.model.c_str(), r.fuse ? "on" : "off",
                   r.batch, r.steps, r.us_wall, r.us_host, r.tok_s, r.replays, r.kernels);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tinygml-bench: cannot write %s\n", path);
        return;
    }
    fprintf(f, "{\n  \"device\": \"%s\",\n  \"sm_count\": %d,\n  \"l2_bytes\": %zu,\n  \"copy_gbs\": %.1f,\n%s  \"rows\": [\n",
            prop.name, prop.multiProcessorCount, g_l2, g_copy_gbs,
            g_timing_only ? "  \"timing_only\": true,\n" : "");  // (rows of --timing-only runs may hold wrong outputs)
    for (size_t i = 0; i < g_rows.size(); i++) {
        const row &r = g_rows[i];
        const double us = (r.launch_bound && r.tm.us_graph > 0) ? r.tm.us_graph : r.tm.us_event;
        const double gbs = r.bytes / (us * 1e-6) / 1e9;
        fprintf(f,
                "    {\"id\": \"%s\", \"op\": \"%s\", \"shape\": \"%s\", \"config\": \"%s\", \"variant\": \"%s\", "
                "\"us_event\": %.3f, \"us_graph\": %.3f, \"us_api\": %.2f, \"us_judged\": %.3f, \"bytes\": %.0f, "
                "\"gbs\": %.1f, \"pct_copy\": %.2f, \"tflops\": %.2f, \"target_us\": %.1f, \"met\": %s}%s\n",
                r.id.c_str(), r.op.c_str(), r.shape.c_str(), r.config.c_str(), r.variant.c_str(), r.tm.us_event,
                r.tm.us_graph, r.tm.us_api, us, r.bytes, gbs, 100.0 * gbs / g_copy_gbs,
                r.flops > 0 ? r.flops / (us * 1e-6) / 1e12 : 0.0, r.target_us,
                r.target_us > 0 ? (us <= r.target_us ? "true" : "false") : "null", i + 1 < g_rows.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"decode_steps\": [\n");
    for (size_t i = 0; i < g_steps.size(); i++) {
        const step_row &r = g_steps[i];
        fprintf(f,
                "    {\"model\": \"%s\", \"fuse\": %s, \"batch\": %d, \"steps\": %d, \"us_wall\": %.2f, "
                "\"us_host\": %.2f, \"tokens_per_s\": %.0f, \"graph_replays\": %lld, \"kernels\": %d}%s\n",
                r.model.c_str(), r.fuse ? "true" : "false", r.batch, r.steps, r.us_wall, r.us_host, r.tok_s, r.replays,
                r.kernels,
                i + 1 < g_steps.size() ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("\nwrote %s\n", path);
}

}  // namespace

int main(int argc, char **argv) {
    const char *out = "bench/results.json";
    std::vector<const char *> models;  // --model PATH: more decode-step rows (synthetic llamas)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) g_quick = true;
        else if (!strcmp(argv[i], "--timing-only")) g_timing_only = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) models.push_back(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
        else out = argv[i];
    }
    if (!tg_cuda_available()) {
        printf("tinygml-bench: no CUDA device found; nothing to benchmark.\n");
        return 0;
    }
    g_be = tg_backend_cuda(0);
    if (!g_be) {
        printf("tinygml-bench: cannot open CUDA device 0: %s\n", tg_last_error());
        return 0;
    }
    g_st = tg_cuda(g_be)->stream;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    g_l2 = (size_t)prop.l2CacheSize;
    g_copy_gbs = copy_bandwidth_gbs();
    printf("device: %s, %d SMs, L2 %.0f MB; copy bandwidth (1 GiB D2D, read + write): %.0f GB/s\n", prop.name,
           prop.multiProcessorCount, g_l2 / 1e6, g_copy_gbs);

    const tg_cuda_sig_knobs dflt;
    tg_cuda_sig_knobs separate = dflt, scalar = dflt, tpc4 = dflt, tpc8 = dflt, write_only = dflt, r1 = dflt, r2 = dflt;
    tg_cuda_sig_knobs chunk = dflt, dreg = dflt, b64 = dflt, pers = dflt, dec = dflt;
    pers.delta_kernel = 4, dec.delta_kernel = 2;
    separate.kv_validate = 2, scalar.rope_scalar = 1, tpc4.delta_tpc = 4, tpc8.delta_tpc = 8;
    write_only.kv_validate = 3, r1.kv_rounds = 1, r2.kv_rounds = 2;
    chunk.delta_kernel = 1, dreg.delta_kernel = 3, b64.delta_dec_threads = 64;
    const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;

    // BENCHMARKS.md rows
    bench_kv("kv.seed", 2, 16, 4, 32, 128, 4, true, dflt, "INTERLEAVED, tables, F32 caches");
    bench_kv("kv.decode", 64, 1, 32, 128, 4096, 4, true, dflt, "INTERLEAVED, tables, F32 caches");
    bench_kv("kv.prefill", 16, 1024, 32, 128, 4096, 300, false, dflt, "INTERLEAVED, tables, F32 caches");
    bench_delta("gla.seed", 4, 64, 8, 24, GL, TG_GATE_LINEAR, false, false, 10, true, dflt);
    const tg_type BF = TG_TYPE_BF16;
    bench_delta("gla.prefill", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 150, false, dflt);
    bench_delta("gdn.decode", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 72, false, dflt);
    bench_delta("gdn.decode256", 256, 1, 32, 128, GD, TG_GATE_LOG, true, true, 285, false, dflt);
    bench_delta("gdn.prefill", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 250, false, dflt);
    bench_delta("gdn.prefill.bf16", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 180, false, dflt, BF);
    bench_delta("gdn.long", 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 250, false, dflt, BF);
    // GATED_LINEAR at gdn.long's shape (AUTO: the single kernel on segments, 8 on 132 SMs)
    bench_delta("gla.long", 1, 16384, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, dflt, BF);
    // variants, kept reachable by name (bench/README.md)
    bench_kv("kv.decode/separate", 64, 1, 32, 128, 4096, 0, true, separate, "validation kernel + write kernel");
    bench_kv("kv.prefill/scalar", 16, 1024, 32, 128, 4096, 0, false, scalar, "scalar path forced");
    bench_kv("kv.prefill/validate", 16, 1024, 32, 128, 4096, 0, false, dflt, "validation kernel alone",
             tg_cuda_check_rope_kv_update);
    bench_kv("kv.prefill/write", 16, 1024, 32, 128, 4096, 0, false, write_only, "write kernel alone (no check)");
    bench_kv("kv.prefill/r2", 16, 1024, 32, 128, 4096, 0, false, r2, "2 chunks per thread per tensor");
    bench_kv("kv.prefill/r1", 16, 1024, 32, 128, 4096, 0, false, r1, "1 chunk per thread per tensor");
    bench_delta("gdn.decode/chunk", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, chunk);
    bench_delta("gdn.decode/dec", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, dec);
    bench_delta("gdn.decode/pdec", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, pers);
    bench_delta("gdn.decode256/dec", 256, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, dec);
    bench_delta("gdn.decode256/pdec", 256, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, pers);
    tg_cuda_sig_knobs pers8 = pers;
    pers8.delta_tpc = 8;
    bench_delta("gdn.decode/pdec-tpc8", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, pers8);
    bench_delta("gdn.decode/pdec-b64", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, [&] {
        tg_cuda_sig_knobs k = pers;
        k.delta_dec_threads = 64;
        return k;
    }());
    bench_delta("gdn.decode/reg", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, dreg);
    bench_delta("gdn.decode/tpc8", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, tpc8);
    bench_delta("gdn.decode/b64", 64, 1, 32, 128, GD, TG_GATE_LOG, true, true, 0, false, b64);
    bench_delta("gdn.prefill/tpc4", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, tpc4,
                TG_TYPE_F32, TG_DELTA_ALGO_SCAN);
    bench_delta("gla.prefill/tpc4", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, tpc4,
                TG_TYPE_F32, TG_DELTA_ALGO_SCAN);
    // the scan (the precision switch) on the prefill rows, and the chunked path's crossover in T
    bench_delta("gdn.prefill/scan", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, dflt, TG_TYPE_F32,
                TG_DELTA_ALGO_SCAN);
    bench_delta("gla.prefill/scan", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, dflt, TG_TYPE_F32,
                TG_DELTA_ALGO_SCAN);
    bench_delta("gdn.long/scan", 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, dflt, BF,
                TG_DELTA_ALGO_SCAN);
    tg_cuda_sig_knobs bv32 = dflt, bv64 = dflt;
    bv32.delta_chunk_bv = 32, bv64.delta_chunk_bv = 64;
    bench_delta("gdn.prefill/bv32", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, bv32);
    bench_delta("gdn.prefill/bv64", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, bv64);
    // the single-kernel chunked form (knob delta_chunk_fused), the chunk-parallel form's predecessor
    tg_cuda_sig_knobs fused = dflt;
    fused.delta_chunk_fused = 1;
    bench_delta("gdn.prefill/fused", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, fused);
    bench_delta("gla.prefill/fused", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, fused);
    // the single kernel's generic tiles where the full case applies (before / after, same run)
    tg_cuda_sig_knobs generic = dflt;
    generic.delta_chunk_generic = 1;
    bench_delta("gdn.prefill/generic", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, generic);
    bench_delta("gdn.prefill.bf16/generic", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, generic, BF);
    bench_delta("gla.prefill/generic", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, generic);
    // gla.prefill with BF16 q/k/v/o (fla's chunk_simple_gla is timed with bf16 inputs): on wgmma,
    // and on delta_chunked_kernel (knob delta_chunk_wg 1; before / after); gdn.prefill.bf16's the same
    tg_cuda_sig_knobs mma = dflt;
    mma.delta_chunk_wg = 1;
    bench_delta("gla.prefill.bf16", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, dflt, BF);
    bench_delta("gla.prefill.bf16/mma", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, mma, BF);
    // ... and on the TF32 wgmma kernel (knob 2), where the default takes delta_wgb_kernel's BF16
    // products (either mode)
    tg_cuda_sig_knobs wgtf32 = dflt;
    wgtf32.delta_chunk_wg = 2;
    bench_delta("gla.prefill.bf16/tf32", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, wgtf32, BF);
    bench_delta("gdn.prefill.bf16/mma", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, mma, BF);
    bench_delta("gdn.prefill.bf16/tf32", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, wgtf32, BF);
    bench_delta("gdn.long/fused", 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, fused, BF,
                TG_DELTA_ALGO_CHUNKED);
    // the chunk-parallel form forced (knob delta_chunk_fused 2) where AUTO takes the single kernel
    tg_cuda_sig_knobs phases = dflt;
    phases.delta_chunk_fused = 2;
    bench_delta("gdn.prefill/3p", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, phases);
    bench_delta("gdn.prefill.bf16/3p", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, phases, BF);
    bench_delta("gla.prefill/3p", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, phases);
    // the chunk-parallel form's generic kernels at D128 (knob delta_chunk_phase_full 2: before
    // session 32's default) against the compile-time ones of the rows above
    tg_cuda_sig_knobs phase_gen = dflt, phases_gen = phases;
    phase_gen.delta_chunk_phase_full = 2, phases_gen.delta_chunk_phase_full = 2;
    bench_delta("gdn.long/3p-generic", 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, phase_gen, BF);
    bench_delta("gdn.prefill.bf16/3p-generic", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, phases_gen, BF);
    bench_delta("gla.prefill/3p-generic", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, phases_gen);
    // W and Kd^T between the chunk-parallel kernels as F32 rows (knob delta_chunk_h16 2: before session
    // 35's default of F16 rows at 16 columns or fewer) at gdn.long, and F16 rows forced (1) at 64
    // columns, where the default keeps F32 rows
    tg_cuda_sig_knobs f32rows = dflt, phases_h16rows = phases;
    f32rows.delta_chunk_h16 = 2, phases_h16rows.delta_chunk_h16 = 1;
    bench_delta("gdn.long/f32rows", 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, f32rows, BF);
    bench_delta("gdn.prefill.bf16/3p-h16", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, phases_h16rows, BF);
    bench_delta("gla.prefill/3p-h16", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, phases_h16rows);
    // gdn.long (B1 T16384) and 32 (sequence, value head) pairs of each mode (B2 T8192, the chunk-parallel form
    // forced) with a knob set, BF16 q/k/v; a null id skips its row
    auto long_rows = [&](const tg_cuda_sig_knobs &k, const char *gdn_long, const char *gdn_x32, const char *gla_x32) {
        tg_cuda_sig_knobs kp = k;
        kp.delta_chunk_fused = phases.delta_chunk_fused;
        if (gdn_long) bench_delta(gdn_long, 1, 16384, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, k, BF);
        if (gdn_x32) bench_delta(gdn_x32, 2, 8192, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, kp, BF);
        if (gla_x32) bench_delta(gla_x32, 2, 8192, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, kp, BF);
    };
    auto knob = [&](auto set) {
        tg_cuda_sig_knobs k = dflt;
        set(k);
        return k;
    };
    // the chunk-parallel form's prep kernel on TF32 mma.sync (knob delta_chunk_prep 1: before session 45's
    // BF16 wgmma prep)
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_prep = 1; }), "gdn.long/tf32prep", "gdn.x32.bf16/3p-tf32prep",
              "gla.x32.bf16/3p-tf32prep");
    // the state pass's F16 rows by cp.async from every thread (knob delta_chunk_bulk 1: before session
    // 46's bulk copies; then the output kernel runs too) at gdn.long (BV 16) and gdn.x32.bf16 (BV 32); F32
    // rows (knob delta_chunk_h16 2: before session 46's rule for GATED_DELTA and session 47's for
    // GATED_LINEAR, which take F16 rows there) at 32 pairs
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_bulk = 1; }), "gdn.long/cpasync", "gdn.x32.bf16/3p-cpasync", nullptr);
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_h16 = 2; }), nullptr, "gdn.x32.bf16/3p-f32rows", "gla.x32.bf16/3p-f32rows");
    // the output kernel after the state pass (knob delta_chunk_fo 1: before session 47, which makes the
    // output in the state pass where the F16 rows come by bulk copies at 32 columns or fewer) at gdn.long
    // (BV 16) and 32 pairs (BV 32; GATED_LINEAR's F16 rows forced: knob delta_chunk_h16 1)
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_fo = 1; }), "gdn.long/nofo", "gdn.x32.bf16/3p-nofo", nullptr);
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_fo = 1, k.delta_chunk_h16 = 1; }), nullptr, nullptr,
              "gla.x32.bf16/3p-h16-nofo");
    // GATED_LINEAR's fo pass with its state in one shared copy and a second barrier a chunk (knob
    // delta_chunk_fo 2: session 47's form, before session 49's two copies)
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_fo = 2; }), nullptr, nullptr, "gla.x32.bf16/3p-fo1s");
    // the state pass's slices halved (knob delta_chunk_bv: twice the blocks, each re-reading the K-side
    // rows): BV 8 at gdn.long, 16 at 32 pairs, and 8 for GATED_LINEAR there
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_bv = 8; }), "gdn.long/bv8", nullptr, "gla.x32.bf16/3p-bv8");
    long_rows(knob([](tg_cuda_sig_knobs &k) { k.delta_chunk_bv = 16; }), nullptr, "gdn.x32.bf16/3p-bv16", "gla.x32.bf16/3p-bv16");
    // BF16 q/k/v at 32, 48, 64 and 80 (sequence, value head) pairs, gdn.long's 262,144 head-tokens each
    // (H16, B 2 / 3 / 4 / 5, T 16384 / B): AUTO's choice, the single-kernel form (knob 1) and the
    // chunk-parallel form (knob 2); where AUTO's switch between the forms belongs
    for (int B : {2, 3, 4, 5}) {
        static char xids[4][2][3][40];
        const char *form[3] = {"", "/single", "/3p"};
        const tg_cuda_sig_knobs fk[3] = {dflt, fused, phases};
        for (int m = 0; m < 2; m++)
            for (int f = 0; f < 3; f++) {
                char *id = xids[B - 2][m][f];
                snprintf(id, 40, "%s.x%d.bf16%s", m ? "gla" : "gdn", 16 * B, form[f]);
                if (m) bench_delta(id, B, 16384 / B, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, fk[f], BF);
                else bench_delta(id, B, 16384 / B, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, fk[f], BF);
            }
    }
    // GATED_LINEAR's single kernel without segments (knob delta_chunk_seg 1: before session 51) at 32, 48 and
    // 64 pairs, and gla.long's chunk-parallel form (AUTO's before session 51)
    {
        static char nids[3][40];
        tg_cuda_sig_knobs noseg = fused;
        noseg.delta_chunk_seg = 1;
        for (int B : {2, 3, 4}) {
            snprintf(nids[B - 2], 40, "gla.x%d.bf16/noseg", 16 * B);
            bench_delta(nids[B - 2], B, 16384 / B, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, noseg, BF);
        }
        bench_delta("gla.long/3p", 1, 16384, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, phases, BF);
    }
    // delta_wgb_kernel's and the segment kernels' gate arrays by their warp 0 (knob delta_chunk_gk 1: before
    // session 54) instead of by delta_gates_kernel beforehand
    {
        tg_cuda_sig_knobs gk1 = dflt;
        gk1.delta_chunk_gk = 1;
        bench_delta("gla.prefill.bf16/gk1", 8, 2048, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, gk1, BF);
        bench_delta("gdn.prefill.bf16/gk1", 8, 2048, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, gk1, BF);
        bench_delta("gla.x32.bf16/gk1", 2, 8192, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, gk1, BF);
        bench_delta("gla.long/gk1", 1, 16384, 16, 128, GL, TG_GATE_LOG, false, false, 0, false, gk1, BF);
    }
    for (int T : {16, 32, 64, 128, 256}) {
        static char ids[5][2][40];
        const int i = T == 16 ? 0 : T == 32 ? 1 : T == 64 ? 2 : T == 128 ? 3 : 4;
        snprintf(ids[i][0], 40, "gdn.T%d/scan", T), snprintf(ids[i][1], 40, "gdn.T%d/chunked", T);
        bench_delta(ids[i][0], 8, T, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, dflt, TG_TYPE_F32, TG_DELTA_ALGO_SCAN);
        bench_delta(ids[i][1], 8, T, 16, 128, GD, TG_GATE_LOG, true, true, 0, false, dflt, TG_TYPE_F32,
                    TG_DELTA_ALGO_CHUNKED);
    }
    bench_delta("gla.seed/tpc4", 4, 64, 8, 24, GL, TG_GATE_LINEAR, false, false, 0, true, tpc4);
    bench_rope("rope.q.decode", 64, 1, 32, 128);
    bench_rope("rope.q.prefill", 16, 1024, 32, 128);
    bench_llm_rows();  // issue 9: attention and mul_mat at LLM sizes (bench_llm.inc)
    // decode steps of the shipped models (run from the repository root)
    // (fusion on, then off: kernels per step before and after)
    for (const char *mp : {"models/llama-recall.gguf", "models/hybrid-recall.gguf"})
        for (int b : {1, 16})
            for (bool fuse : {true, false}) bench_decode_step(mp, b, g_quick ? 20 : 200, fuse);
    for (const char *mp : models)
        for (int b : {1, 16})
            for (bool fuse : {true, false}) bench_decode_step(mp, b, g_quick ? 20 : 100, fuse);

    print_and_save(out, prop);
    tg_backend_free(g_be);
    return 0;
}
