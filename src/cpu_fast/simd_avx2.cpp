// simd_avx2.cpp - the AVX2 + FMA + F16C table (built with those flags where
// the compiler targets x86-64; a NULL stub elsewhere).
#include "simd.h"
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define TG_SIMD_AVX2 1
#define TG_SIMD_NAME "avx2"
#define TG_SIMD_FN tg_simd_avx2
#include "simd_impl.h"
#else
const tg_simd *tg_simd_avx2() { return nullptr; }
#endif
