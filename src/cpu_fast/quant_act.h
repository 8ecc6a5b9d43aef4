// quant_act.h - the internal 8-bit formats the quantized mul_mat fast path
// (mul_mat_q.cpp) quantizes its activations (b) into, once per mul_mat, so
// that each weight block meets them in an integer dot product (as ggml's
// q8_0 / q8_K). Never stored in files. Scales are F32 (ggml keeps q8_0's in
// F16): the only rounding is q = round(x / d), |x - d q| <= d / 2.
#pragma once
#include <cstdint>

#include "quant.h"
#include "tinygml.h"

// 32 values: x ~ d * qs[i], d = absmax / 127 (NaN when the block holds a NaN or inf)
struct tg_act_q8 {
    float d;
    int8_t qs[32];
};
// 256 values with the sums of each 16 (the Q4_K mins multiply them)
struct tg_act_q8k {
    float d;
    int16_t bsums[TG_QK_K / 16];
    int8_t qs[TG_QK_K];
};
static_assert(sizeof(tg_act_q8) == 36 && sizeof(tg_act_q8k) == 292, "activation block sizes");

// Index of a quantized type in tg_simd::q_dot: Q8_0 0, Q4_0 1, Q4_K 2 (-1: not quantized).
inline int tg_simd_qindex(tg_type t) {
    return t == TG_TYPE_Q8_0 ? 0 : t == TG_TYPE_Q4_0 ? 1 : t == TG_TYPE_Q4_K ? 2 : -1;
}
