// dispatch.cpp - pick the vector kernel table once, from what this CPU runs.
#include <atomic>
#include <cstdlib>

#include "simd.h"

// clang before 15 does not know "f16c" in __builtin_cpu_supports (the state
// fuzzer builds the engine with clang-14): there, AVX2 stands in for it
// (every AVX2 and AVX-512 CPU has F16C).
#if defined(__clang__) && __clang_major__ < 15
#define TG_CPU_F16C() __builtin_cpu_supports("avx2")
#else
#define TG_CPU_F16C() __builtin_cpu_supports("f16c")
#endif

int tg_simd_runnable(const tg_simd **tables, int *levels) {
    int n = 0;
    auto add = [&](const tg_simd *t, int level) {
        if (!t) return;
        tables[n] = t;
        if (levels) levels[n] = level;
        n++;
    };
    add(tg_simd_generic(), 0);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && TG_CPU_F16C();
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
    if (avx2) add(tg_simd_avx2(), 1);
    if (avx512) add(tg_simd_avx512(), 2);
    if (vnni) add(tg_simd_avx512vnni(), 3);
#endif
    return n;
}

static const tg_simd *pick() {
    const char *want = std::getenv("TG_CPU_SIMD");  // generic | avx2 | avx512 | avx512vnni: at most this level
    const int cap = !want                        ? 3
                    : !strcmp(want, "generic")   ? 0
                    : !strcmp(want, "avx2")      ? 1
                    : !strcmp(want, "avx512")    ? 2
                                                 : 3;
    const tg_simd *t[4];
    int level[4];
    const int n = tg_simd_runnable(t, level);
    const tg_simd *best = t[0];
    for (int i = 1; i < n; i++)
        if (level[i] <= cap) best = t[i];
    return best;
}

static std::atomic<const tg_simd *> g_forced{nullptr};

const tg_simd &tg_simd_get() {
    static const tg_simd *t = pick();
    const tg_simd *f = g_forced.load(std::memory_order_relaxed);
    return f ? *f : *t;
}
void tg_simd_force(const tg_simd *t) { g_forced.store(t); }
