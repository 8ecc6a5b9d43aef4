// simd_avx512vnni.cpp - the AVX-512 table with the AVX512-VNNI (vpdpbusd,
// vpdpwssd) and AVX512-VBMI (vpermb) quantized kernels (built with
// -mavx512vnni -mavx512vbmi beside the avx512 flags where the compiler
// targets x86-64; a NULL stub elsewhere). Only its q_* entries differ from
// the avx512 table's code.
#include "simd.h"
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VBMI__) && defined(__FMA__) && defined(__F16C__)
#define TG_SIMD_AVX512 1
#define TG_SIMD_VNNI 1
#define TG_SIMD_NAME "avx512vnni"
#define TG_SIMD_FN tg_simd_avx512vnni
#include "simd_impl.h"
#else
const tg_simd *tg_simd_avx512vnni() { return nullptr; }
#endif
