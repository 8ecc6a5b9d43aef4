// quant.cuh - reading the quantized blocks of src/quant.h on the device
// (get_rows, the decode GEMV of cuda/mul_mat_quant.cu and the prefill
// dequantization of cuda/mul_mat_quant_prefill.cu).
//
// Alignment (check_layout in cuda/backend.cu refuses anything else): Q8_0 and
// Q4_0 blocks (34 and 18 bytes) are 2-byte aligned, Q4_K blocks (144 bytes)
// 16-byte aligned.
#pragma once
#include "common.cuh"
#include "quant.h"

__device__ inline float tg_cuda_half_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Element e of a quantized row of type T, exactly as tg_dequantize computes
// it (F32 products; __fmul_rn / __fsub_rn keep nvcc from fusing them into an
// FMA, which would round differently).
template <tg_type T> __device__ inline float tg_cuda_dequant(const char *row, long long e) {
    if (T == TG_TYPE_Q8_0) {
        const tg_block_q8_0 *b = (const tg_block_q8_0 *)row + e / TG_QK8_0;
        return __fmul_rn(tg_cuda_half_bits(b->d), (float)b->qs[e % TG_QK8_0]);
    } else if (T == TG_TYPE_Q4_0) {
        const tg_block_q4_0 *b = (const tg_block_q4_0 *)row + e / TG_QK4_0;
        const int i = (int)(e % TG_QK4_0);
        const int q = i < TG_QK4_0 / 2 ? b->qs[i] & 15 : b->qs[i - TG_QK4_0 / 2] >> 4;
        return __fmul_rn(tg_cuda_half_bits(b->d), (float)(q - 8));
    } else {  // Q4_K
        const tg_block_q4_k *b = (const tg_block_q4_k *)row + e / TG_QK_K;
        const int i = (int)(e % TG_QK_K), j = i / 32, l = i % 32;
        uint8_t sc, m;
        tg_get_scale_min_k4(j, b->scales, &sc, &m);
        const uint8_t byte = b->qs[32 * (j / 2) + l];
        const int q = j % 2 ? byte >> 4 : byte & 15;
        const float d = __fmul_rn(tg_cuda_half_bits(b->d), (float)sc);
        const float mn = __fmul_rn(tg_cuda_half_bits(b->dmin), (float)m);
        return __fsub_rn(__fmul_rn(d, (float)q), mn);
    }
}

// The 4 * NW bytes at p (2-byte aligned) as NW 32-bit words, read with
// aligned 4-byte loads (one 2-byte load for the tail when p is not 4-byte
// aligned, so nothing past p + 4 * NW is touched).
template <int NW> __device__ inline void tg_cuda_words_a2(const char *p, uint32_t *w) {
    const uint32_t *base = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = ((uintptr_t)p & 2) ? 16u : 0u;
    uint32_t raw[NW + 1];
#pragma unroll
    for (int i = 0; i < NW; i++) raw[i] = __ldg(base + i);
    raw[NW] = sh ? (uint32_t)__ldg((const unsigned short *)(base + NW)) : 0u;
#pragma unroll
    for (int i = 0; i < NW; i++) w[i] = __funnelshift_r(raw[i], raw[i + 1], sh);
}

// b's 8-bit blocks for the quantized GEMV (cuda/mul_mat_quant.cu): the 32
// lanes of a warp hold one block's 32 consecutive values x (all lanes must
// call); lane l stores its int8 at q (q points at the lane's own element), lane 0 the pair
// (d, d * sum of q) at ds. A block with a NaN or inf gets d = NaN, so the
// products it enters are NaN. Every quantized GEMV's b goes through this
// (cuda/mul_mat_quant.cu quantize_b_kernel).
__device__ inline void tg_cuda_q8_block(float x, int8_t *q, float2 *ds) {
    const bool finite = __all_sync(0xffffffffu, isfinite(x));
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
    const int qi = finite ? max(-127, min(127, (int)roundf(x * id))) : 0;  // |x * id| <= 127
    int sum = qi;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    *q = (int8_t)qi;
    if (threadIdx.x % 32 == 0) {
        const float d = finite ? amax / 127.0f : __int_as_float(0x7fc00000);
        *ds = make_float2(d, d * (float)sum);
    }
}

// One unit of weights as int8 quads (what a GEMV lane decodes at a time: a
// Q8_0 or Q4_0 block, a pair of Q4_K sub-blocks): q[8 * s + i] holds elements 4i..4i+3 of
// sub-block s (32 elements); the unit's value is sum over s of
// d[s] * (q . x) - m[s] * sum(x) for the 32 matching elements x.
template <tg_type T> struct tg_cuda_qunit {
    static constexpr int subs = T == TG_TYPE_Q4_K ? 2 : 1;
    int q[8 * subs];
    float d[subs], m[subs];
};

template <tg_type T> __device__ inline void tg_cuda_load_unit(const char *row, int u, tg_cuda_qunit<T> &w);

template <>
__device__ inline void tg_cuda_load_unit<TG_TYPE_Q8_0>(const char *row, int u, tg_cuda_qunit<TG_TYPE_Q8_0> &w) {
    const char *blk = row + (long long)u * sizeof(tg_block_q8_0);
    tg_cuda_words_a2<8>(blk + 2, (uint32_t *)w.q);
    w.d[0] = tg_cuda_half_bits(__ldg((const unsigned short *)blk));
    w.m[0] = 0.0f;
}

template <>
__device__ inline void tg_cuda_load_unit<TG_TYPE_Q4_0>(const char *row, int u, tg_cuda_qunit<TG_TYPE_Q4_0> &w) {
    const char *blk = row + (long long)u * sizeof(tg_block_q4_0);
    uint32_t v[4];
    tg_cuda_words_a2<4>(blk + 2, v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w.q[i] = (int)(v[i] & 0x0F0F0F0Fu);             // elements 4i..4i+3: low nibbles
        w.q[4 + i] = (int)((v[i] >> 4) & 0x0F0F0F0Fu);  // elements 16+4i..: high nibbles
    }
    const float d = tg_cuda_half_bits(__ldg((const unsigned short *)blk));
    w.d[0] = d;
    w.m[0] = 8.0f * d;  // x = d * (q - 8)
}

template <>
__device__ inline void tg_cuda_load_unit<TG_TYPE_Q4_K>(const char *row, int u, tg_cuda_qunit<TG_TYPE_Q4_K> &w) {
    const tg_block_q4_k *blk = (const tg_block_q4_k *)row + u / 4;
    const int g = u % 4;  // qs group g: sub-blocks 2g (low nibbles) and 2g + 1 (high)
    const uint4 *qs = (const uint4 *)(blk->qs + 32 * g);
    const uint4 lo = __ldg(qs), hi = __ldg(qs + 1);
    const uint32_t v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        w.q[i] = (int)(v[i] & 0x0F0F0F0Fu);
        w.q[8 + i] = (int)((v[i] >> 4) & 0x0F0F0F0Fu);
    }
    const uint32_t dd = __ldg((const unsigned int *)blk);
    const float d = tg_cuda_half_bits((uint16_t)(dd & 0xffff)), dmin = tg_cuda_half_bits((uint16_t)(dd >> 16));
#pragma unroll
    for (int s = 0; s < 2; s++) {
        uint8_t sc, m;
        tg_get_scale_min_k4(2 * g + s, blk->scales, &sc, &m);
        w.d[s] = d * (float)sc;
        w.m[s] = dmin * (float)m;
    }
}

// Byte k of w as a float: w's byte placed under the exponent of 2^23 (so the
// float is 2^23 + byte, exactly), minus bias. One PRMT and one FADD: no
// integer-to-float conversion, which runs at a quarter of the FMA rate.
__device__ inline float tg_cuda_byte_float(uint32_t w, int k, float bias) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 + k)) - bias;
}
