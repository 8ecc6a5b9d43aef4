// quant.h - the quantized block layouts (ggml's, as the GGUF format
// describes them), shared by the CPU code in src/ and the CUDA kernels in
// cuda/. Not installed. All fields little-endian; d and dmin are IEEE half
// bits (convert with tg_fp16_to_fp32_impl on the host).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

constexpr int TG_QK8_0 = 32;  // elements per Q8_0 block
constexpr int TG_QK4_0 = 32;  // elements per Q4_0 block
constexpr int TG_QK_K = 256;  // elements per K-quant super-block (Q4_K)
constexpr int TG_K_SCALE_SIZE = 12;  // bytes of packed 6-bit scales and mins per Q4_K block

// x[i] = d * qs[i]
struct tg_block_q8_0 {
    uint16_t d;
    int8_t qs[TG_QK8_0];
};
static_assert(sizeof(tg_block_q8_0) == 34, "q8_0 block is 34 bytes");

// x[i] = d * ((qs[i] & 15) - 8) for i < 16, d * ((qs[i - 16] >> 4) - 8) above
struct tg_block_q4_0 {
    uint16_t d;
    uint8_t qs[TG_QK4_0 / 2];
};
static_assert(sizeof(tg_block_q4_0) == 18, "q4_0 block is 18 bytes");

// 8 sub-blocks j of 32: x = d * sc_j * q - dmin * m_j, with (sc_j, m_j) the
// 6-bit pair tg_get_scale_min_k4(j, scales) unpacks. qs holds 4 groups g of
// 32 bytes: byte l of group g has element l of sub-block 2g in its low nibble
// and element l of sub-block 2g + 1 in its high nibble.
struct tg_block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[TG_K_SCALE_SIZE];
    uint8_t qs[TG_QK_K / 2];
};
static_assert(sizeof(tg_block_q4_k) == 144, "q4_k block is 144 bytes");

// The 6-bit scale (*d) and min (*m) of sub-block j in [0, 8): sub-blocks 0..3
// keep theirs in the low 6 bits of bytes j and j + 4; sub-blocks 4..7 keep
// their low 4 bits in the nibbles of byte j + 4 and their top 2 bits in the
// top bits of bytes j - 4 (scale) and j (min).
TG_HOST_DEVICE inline void tg_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
