// ggml_gdn.cpp - ggml's CPU gated delta net (GGML_OP_GATED_DELTA_NET) on the
// gdn rows of tinygml-bench-cpu, so that the two can be compared in the same
// run on the same machine (bench/README.md, "CPU rows"). Not part of the
// CMake build: it links the ggml of a llama.cpp peer build
// (../shared/peers/llama_cpp.sh DIR cpu):
//   g++ -O2 -std=c++17 -I DIR/ggml/include bench/ggml_gdn.cpp -o /tmp/ggml_gdn \
//       -LDIR/build/bin -lggml -lggml-base -lggml-cpu -Wl,-rpath,DIR/build/bin
//   /tmp/ggml_gdn [-t N] [--only PREFIX]
// Same shapes and input ranges as the tinygml rows; ggml's op has no fused
// l2 norm of q and k (llama.cpp runs ggml_l2_norm before it), so q and k are
// given unit rows here. Times: median and best of ggml_graph_compute on a
// one-node graph with a persistent thread pool of N threads, after a warm-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void fill(ggml_tensor *t, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    float *p = (float *)t->data;
    for (int64_t i = 0; i < ggml_nelements(t); i++) p[i] = d(rng);
}

// each row of ne0 values scaled to unit length (the l2 norm tinygml fuses)
void unit_rows(ggml_tensor *t) {
    float *p = (float *)t->data;
    for (int64_t r = 0; r < ggml_nrows(t); r++) {
        double s = 0;
        for (int64_t i = 0; i < t->ne[0]; i++) s += (double)p[r * t->ne[0] + i] * p[r * t->ne[0] + i];
        for (int64_t i = 0; i < t->ne[0]; i++) p[r * t->ne[0] + i] = (float)(p[r * t->ne[0] + i] / std::sqrt(s + 1e-6));
    }
}

void row(const char *id, int B, int T, int H, int D, int nth, ggml_threadpool *tp) {
    const double Sbytes = 4.0 * B * H * D * D;
    ggml_init_params ip = {(size_t)(Sbytes * 2 + 4.0 * B * T * H * D * 5 + (64 << 20)), nullptr, false};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, B);
    ggml_tensor *k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, B);
    ggml_tensor *v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, H, T, B);
    ggml_tensor *g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, H, T, B);
    ggml_tensor *beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, H, T, B);
    ggml_tensor *S = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, D, H, B);
    ggml_tensor *out = ggml_gated_delta_net(ctx, q, k, v, g, beta, S, 1);
    ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    fill(q, -1, 1, 1), fill(k, -1, 1, 2), fill(v, -1, 1, 3), fill(g, -0.1f, 0.0f, 4), fill(beta, 0, 1, 5);
    fill(S, -0.1f, 0.1f, 6);
    unit_rows(q), unit_rows(k);
    ggml_cplan plan = ggml_graph_plan(gf, nth, tp);
    std::vector<uint8_t> work(plan.work_size + 64);
    plan.work_data = work.data();
    ggml_graph_compute(gf, &plan);  // warm-up
    std::vector<double> t;
    const double start = now_us();
    for (int i = 0; i < 1000 && (i < 5 || now_us() - start < 1.5e6); i++) {
        const double t0 = now_us();
        ggml_graph_compute(gf, &plan);
        t.push_back(now_us() - t0);
    }
    std::sort(t.begin(), t.end());
    printf("%-15s ggml gated_delta_net B%d T%d H%d D%d, F32 state  %10.1f us(median) %10.1f us(best)\n", id, B, T, H,
           D, t[t.size() / 2], t[0]);
    ggml_free(ctx);
}

}  // namespace

int main(int argc, char **argv) {
    int nth = 2;
    const char *only = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    }
    ggml_threadpool_params tpp = ggml_threadpool_params_default(nth);
    ggml_threadpool *tp = ggml_threadpool_new(&tpp);
    auto want = [&](const char *id) { return !only || strncmp(id, only, strlen(only)) == 0; };
    if (want("gdn.seed.state")) row("gdn.seed.state", 4, 64, 8, 24, nth, tp);
    if (want("gdn.decode")) row("gdn.decode", 64, 1, 32, 128, nth, tp);
    if (want("gdn.t512")) row("gdn.t512", 1, 512, 16, 128, nth, tp);
    ggml_threadpool_free(tp);
    return 0;
}
