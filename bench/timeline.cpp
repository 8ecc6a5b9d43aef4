// tinygml-timeline MODEL [--batch B] [--prompt P] [--steps N] [--ctk TYPE]
//
// Where a CUDA decode step's time goes, kernel by kernel, as the replayed
// graph runs (programmatic dependent launch included): CUPTI's kernel
// activity records (the timestamps a profiler's timeline shows) of N decode
// steps after a P-token prompt and a few warm-up steps, through the public
// model API as tinygml-run calls it. ncu times each kernel alone, which
// says little about a chain in which the next kernel starts while the one
// before ends; this tool reports, per kernel of the step (same order in
// every step, the same graph being replayed):
//   dur   start to end of the kernel (under PDL: from its first block, which
//         may wait at griddepcontrol.wait for the kernel before)
//   gap   its start minus the previous kernel's end (negative: overlap)
//   excl  what the kernel adds to the step: its end minus the later of its
//         start and the previous kernel's end
// averaged over the steps, then the same summed by kernel name, and the
// step's span (first start to last end) against the sum of excl.
// bench/README.md has an example; nothing here is a test.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "model.h"

namespace {

struct kernel_rec {
    uint64_t start, end;
    std::string name;
};
std::vector<kernel_rec> g_recs;
std::mutex g_recs_mu;  // CUPTI may complete buffers on its own thread

#define CUPTI_OK(x)                                                                  \
    do {                                                                             \
        CUptiResult r_ = (x);                                                        \
        if (r_ != CUPTI_SUCCESS) {                                                   \
            const char *msg = nullptr;                                               \
            cuptiGetResultString(r_, &msg);                                          \
            fprintf(stderr, "tinygml-timeline: %s: %s\n", #x, msg ? msg : "error"); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = (size_t)8 << 20;
    *buffer = (uint8_t *)aligned_alloc(8, *size);
    if (!*buffer) *size = 0;  // CUPTI then drops records (counted below)
    *max_records = 0;
}
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(g_recs_mu);
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        g_recs.push_back({k->start, k->end, k->name ? k->name : "?"});
    }
    free(buffer);
}

// "ns::kernel<...>(args)" -> "kernel<...>", at most 60 characters
std::string short_name(const std::string &mangled) {
    int st = 0;
    char *d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &st);
    std::string s = st == 0 && d ? d : mangled;
    free(d);
    if (s.compare(0, 5, "void ") == 0) s = s.substr(5);
    for (const char *ns : {"(anonymous namespace)::", "tg_chunk::"})
        for (size_t p; (p = s.find(ns)) != std::string::npos;) s.erase(p, strlen(ns));
    // the parameter list: the first '(' outside the template arguments (which
    // may hold casts, as in mmvq_kernel<(tg_type)2, 1, 4>)
    int depth = 0;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '<') depth++;
        else if (s[i] == '>') depth--;
        else if (s[i] == '(' && depth == 0) {
            s = s.substr(0, i);
            break;
        }
    }
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

int usage() {
    fprintf(stderr, "usage: tinygml-timeline MODEL.gguf [--batch B] [--prompt P] [--steps N] [--ctk f16|bf16|f32]\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *path = argv[1];
    int B = 1, P = 512, N = 20;
    tg_type ct = TG_TYPE_F16;
    for (int i = 2; i < argc; i++) {
        const bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--batch") && more) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && more) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && more) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctk") && more) {
            const char *t = argv[++i];
            ct = !strcmp(t, "f32") ? TG_TYPE_F32 : !strcmp(t, "bf16") ? TG_TYPE_BF16 : TG_TYPE_F16;
        } else
            return usage();
    }
    if (B < 1 || P < 1 || N < 2) return usage();
    if (!tg_cuda_available()) {
        fprintf(stderr, "tinygml-timeline: no CUDA device\n");
        return 1;
    }
    tg_backend *be = tg_backend_cuda(0);
    if (!be) return fprintf(stderr, "tinygml-timeline: %s\n", tg_last_error()), 1;
    tgm::model *m = tgm::model_load(path, be);
    if (!m) return fprintf(stderr, "tinygml-timeline: %s\n", tg_last_error()), 1;
    const int warm = 6;
    tgm::session_params sp;
    sp.n_seq = B, sp.n_ctx = std::min(m->hp.n_ctx, P + warm + N + 1);
    sp.type_k = sp.type_v = ct;
    if (P + warm + N > sp.n_ctx) return fprintf(stderr, "tinygml-timeline: prompt + steps exceed the context\n"), 1;
    tgm::session *s = tgm::session_new(m, sp);
    if (!s || tgm::session_reserve(s, P) != TG_OK) return fprintf(stderr, "tinygml-timeline: %s\n", tg_last_error()), 1;
    std::vector<int32_t> toks((size_t)B * P), cur((size_t)B);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (int32_t)((i * 7 + 3) % 256);
    std::vector<float> logits;
    auto step = [&]() {
        for (int b = 0; b < B; b++) cur[b] = (int32_t)((b * 13 + logits.size()) % 256);
        if (tgm::session_eval(s, 0, B, cur.data(), 1, false, &logits) != TG_OK) {
            fprintf(stderr, "tinygml-timeline: %s\n", tg_last_error());
            exit(1);
        }
    };
    if (tgm::session_eval(s, 0, B, toks.data(), P, false, &logits) != TG_OK)
        return fprintf(stderr, "tinygml-timeline: %s\n", tg_last_error()), 1;
    for (int i = 0; i < warm; i++) step();  // the plain run, the capture, replays

    CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    std::vector<uint64_t> t0(N), t1(N);
    for (int i = 0; i < N; i++) {
        CUPTI_OK(cuptiGetTimestamp(&t0[i]));
        step();
        CUPTI_OK(cuptiGetTimestamp(&t1[i]));
    }
    CUPTI_OK(cuptiActivityFlushAll(1));
    CUPTI_OK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    size_t dropped = 0;
    CUPTI_OK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
    if (dropped) fprintf(stderr, "tinygml-timeline: CUPTI dropped %zu records; the steps below may be incomplete\n", dropped);
    std::lock_guard<std::mutex> lock(g_recs_mu);

    // kernels of each step (by start time within the step's host window)
    std::sort(g_recs.begin(), g_recs.end(), [](const kernel_rec &a, const kernel_rec &b) { return a.start < b.start; });
    std::vector<std::vector<const kernel_rec *>> steps((size_t)N);
    for (const kernel_rec &r : g_recs)
        for (int i = 0; i < N; i++)
            if (r.start >= t0[i] && r.start < t1[i]) steps[i].push_back(&r);
    // steps 1.. with the kernel count of step 1 (the same graph replayed)
    const size_t K = steps[1].size();
    int used = 0;
    std::vector<double> dur(K, 0), gap(K, 0), excl(K, 0);
    double span = 0, wall = 0;
    for (int i = 1; i < N; i++) {
        if (steps[i].size() != K || K == 0) continue;
        used++;
        span += (double)(steps[i][K - 1]->end - steps[i][0]->start);
        wall += (double)(t1[i] - t0[i]);
        uint64_t prev_end = steps[i][0]->start;
        for (size_t k = 0; k < K; k++) {
            const kernel_rec &r = *steps[i][k];
            dur[k] += (double)(r.end - r.start);
            gap[k] += k ? (double)r.start - (double)prev_end : 0.0;
            excl[k] += std::max(0.0, (double)r.end - (double)std::max(r.start, prev_end));
            prev_end = std::max(prev_end, r.end);
        }
    }
    if (!used) {
        fprintf(stderr, "tinygml-timeline: no two steps had the same kernels (%zu records)\n", g_recs.size());
        return 1;
    }
    printf("%s: batch %d, prompt %d, %d steps timed (%d used), %zu kernels per step\n", path, B, P, N, used, K);
    printf("step: wall %.1f us (host call), span %.1f us (first kernel start to last kernel end)\n", wall / used / 1e3,
           span / used / 1e3);
    printf("\n%4s  %-60s %9s %9s %9s\n", "#", "kernel", "dur us", "gap us", "excl us");
    for (size_t k = 0; k < K; k++)
        printf("%4zu  %-60s %9.2f %9.2f %9.2f\n", k, short_name(steps[1][k]->name).c_str(), dur[k] / used / 1e3,
               gap[k] / used / 1e3, excl[k] / used / 1e3);
    std::map<std::string, std::vector<double>> by;  // count, dur, gap, excl
    for (size_t k = 0; k < K; k++) {
        std::vector<double> &v = by[short_name(steps[1][k]->name)];
        v.resize(4, 0.0);
        v[0] += 1, v[1] += dur[k] / used / 1e3, v[2] += gap[k] / used / 1e3, v[3] += excl[k] / used / 1e3;
    }
    std::vector<std::pair<std::string, std::vector<double>>> rows(by.begin(), by.end());
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second[3] > b.second[3]; });
    double tex = 0;
    printf("\nby kernel (per step)\n%-60s %5s %9s %9s %9s\n", "kernel", "n", "dur us", "gap us", "excl us");
    for (const auto &r : rows) {
        printf("%-60s %5.0f %9.2f %9.2f %9.2f\n", r.first.c_str(), r.second[0], r.second[1], r.second[2], r.second[3]);
        tex += r.second[3];
    }
    printf("sum of excl %.1f us (the span: %.1f us)\n", tex, span / used / 1e3);
    tgm::session_free(s);
    tgm::model_free(m);
    tg_backend_free(be);
    return 0;
}
