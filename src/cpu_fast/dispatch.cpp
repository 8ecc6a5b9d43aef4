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

static const tg_simd *pick() {
    const char *want = std::getenv("TG_CPU_SIMD");  // generic | avx2 | avx512: at most this level
    const int cap = !want ? 2 : !strcmp(want, "generic") ? 0 : !strcmp(want, "avx2") ? 1 : 2;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (cap >= 2 && tg_simd_avx512() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("fma") && TG_CPU_F16C())
        return tg_simd_avx512();
    if (cap >= 1 && tg_simd_avx2() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        TG_CPU_F16C())
        return tg_simd_avx2();
#endif
    (void)cap;
    return tg_simd_generic();
}

static std::atomic<const tg_simd *> g_forced{nullptr};

const tg_simd &tg_simd_get() {
    static const tg_simd *t = pick();
    const tg_simd *f = g_forced.load(std::memory_order_relaxed);
    return f ? *f : *t;
}
void tg_simd_force(const tg_simd *t) { g_forced.store(t); }
