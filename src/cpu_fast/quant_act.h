// quant_act.h - the internal 8-bit formats the quantized mul_mat fast path
// (mul_mat_q.cpp) quantizes its activations (b) into, once per mul_mat, so
// that each weight block meets them in an integer dot product (as ggml's
// q8_0 / q8_K). Never stored in files. Scales are F32 (ggml keeps q8_0's in
// F16): the only rounding is q = round(x / d), |x - d q| <= d / 2. Which
// layout a row takes is the vector table's choice (simd.h q_quant).
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

// The AVX2 table's Q4_0 layout: blocks in pairs (j = 0, 1: the row's blocks
// 2i, 2i + 1), each block's 32 values split in two halves the way the low
// and high nibbles of one 32-byte load of the pair's weights come out (low:
// values 0..15 of both blocks; high: 16..31). The weights enter maddubs
// unsigned (the nibble 0..15, not nibble - 8), so each of the 8 int32 lanes
// a 256-bit madd gives carries the offset's correction for its own 8 values
// (lane 4 j + k: values 4k..4k+3 and 16+4k..16+4k+3 of block j), and each
// lane's corrected sum is exactly its products' partial sum. A row of an
// odd number of blocks ends in a half pair whose block 1 is zero (q, corr and d).
struct tg_act_q4p {
    int8_t lo[32];     // lo[16 j + i] = q_j[i]       i < 16
    int8_t hi[32];     // hi[16 j + i] = q_j[16 + i]
    int32_t corr[8];   // corr[4 j + k] = 8 (sum of q_j[4k + i] and q_j[16 + 4k + i], i < 4)
    float d[2];        // d_j
};
static_assert(sizeof(tg_act_q4p) == 104, "paired activation block size");

// The VNNI table's layouts (simd_quant_impl.h). Q4_0 and Q8_0: the same
// 32-value blocks (d_j, q_j), grouped so that one 512-bit vector of weight
// bytes meets one vector of activation bytes, 32-bit lane for lane. The
// weights enter vpdpbusd as unsigned bytes (Q4_0: the nibble 0..15; Q8_0:
// q + 128), so each lane starts from the correction -(offset * the sum of
// the activations it meets) (-8 or -128 times the sum of its 8 or 4 values),
// and ends as exactly its products' partial sum. Blocks past the row's end
// are zero (q, corr and d).
// Q4_0: 4 blocks per group (128 values), split as the nibbles are
struct tg_act_q4g {
    int8_t lo[64];     // lo[16 j + i] = q_j[i]        i < 16
    int8_t hi[64];     // hi[16 j + i] = q_j[16 + i]
    int32_t corr[16];  // corr[4 j + k] = -8 (sum of q_j[4k + i] and q_j[16 + 4k + i], i < 4)
    float d[16];       // d[4 j + l] = d_j
};
// Q8_0: 2 blocks per group (64 values)
struct tg_act_q8g {
    int8_t qs[64];     // qs[32 j + i] = q_j[i]
    int32_t corr[16];  // corr[8 j + k] = -128 sum_i q_j[4k + i], i < 4
    float d[16];       // d[8 j + l] = d_j
};
// Q4_K: 256 values, the sub-blocks j of 32 in the order the nibbles of 64
// weight bytes come (low nibbles: sub-blocks 0, 2; high: 1, 3; then 4, 6; 5, 7)
struct tg_act_q8kv {
    int8_t qs[TG_QK_K];  // qs[32 p + i] = q[32 j + i], j = {0, 2, 1, 3, 4, 6, 5, 7}[p]
    int16_t sums[8];     // sums[j] = sum_i q[32 j + i]
    float d;
    int32_t pad[3];
};
static_assert(sizeof(tg_act_q4g) == 256 && sizeof(tg_act_q8g) == 192 && sizeof(tg_act_q8kv) == 288,
              "grouped activation sizes");

// Index of a quantized type in tg_simd's q_* entries: Q8_0 0, Q4_0 1, Q4_K 2 (-1: not quantized).
inline int tg_simd_qindex(tg_type t) {
    return t == TG_TYPE_Q8_0 ? 0 : t == TG_TYPE_Q4_0 ? 1 : t == TG_TYPE_Q4_K ? 2 : -1;
}
