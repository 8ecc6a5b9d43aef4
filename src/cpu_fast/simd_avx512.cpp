// simd_avx512.cpp - the AVX-512 table (built with -mavx512f -mavx512bw -mfma
// -mf16c where the compiler targets x86-64; a NULL stub elsewhere).
#include "simd.h"
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__FMA__) && defined(__F16C__)
#define TG_SIMD_AVX512 1
#define TG_SIMD_NAME "avx512"
#define TG_SIMD_FN tg_simd_avx512
#include "simd_impl.h"
#else
const tg_simd *tg_simd_avx512() { return nullptr; }
#endif
