// chunk_mma.cuh - warp-level TF32 tensor-core products over F32 matrices in
// shared memory, for the chunked delta rule (cuda/delta_rule_chunked*.cu).
//
// A product's output is cut into warp tiles of (16 MT) x 8: MT row blocks of
// one mma.sync m16n8k8 each, sharing one B fragment per k step. Tiles go
// round-robin to the block's warps (tile base + warp + NW r, r < R), or (ROWS)
// a warp's R tiles sit side by side and share their A fragments too.
// Fragments come from shared memory in one of two ways:
//   lda_rows / ldb_rows  ldmatrix.x4 / .x2: the operand's k index is the
//                        contiguous one (A row-major, B stored as B^T); one
//                        instruction per A fragment, rows 16-byte aligned
//   ldb_cols             B stored row-major (n contiguous): two 4-byte loads,
//                        shared by the tile's MT row blocks
// Operands reach the tensor cores as F32 bits (the hardware reads the TF32
// part); values this code writes for them are rounded once (tf32r).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace tg_chunk {

struct frag_a {
    unsigned x[4];  // A 16x8: (g, c), (g + 8, c), (g, c + 4), (g + 8, c + 4); g = lane / 4, c = lane % 4
};
struct frag_b {
    unsigned x[2];  // B 8x8: (k c, n g), (k c + 4, n g)
};

__device__ inline unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
// x rounded to the nearest TF32 (kept as an F32 value)
__device__ inline float tf32r(float x) { return __uint_as_float(to_tf32(x)); }

__device__ inline void mma_tf32(float (&d)[4], const frag_a &a, const frag_b &b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}

__device__ inline unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

// A rows m0 .. m0 + 15, columns k0 .. k0 + 7 of a row-major matrix (row stride ld floats, a
// multiple of 4; base 16-byte aligned). Bank-conflict free when ld % 32 is 4, 12, 20 or 28.
__device__ inline frag_a lda_rows(const float *base, int ld, int m0, int k0) {
    const int lane = threadIdx.x & 31;
    const float *p = base + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 2);
    frag_a f;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                 : "r"(smem_u32(p)));
    return f;
}
// F16 operands (the chunk-parallel form's W and Kd^T, delta_rule_chunked_phases.cu): within every
// 8-column group a row is stored permuted, logical column c (c < 4) at half 2c and c + 4 at half
// 2c + 1 (h16_pos), so that one ldmatrix of 16-bit rows gives each thread the two columns of a TF32
// A fragment in one register. The conversion to F32 is exact: the products are those of the F32
// operands these halves hold.
__host__ __device__ inline int h16_pos(int c) { return ((c & 3) << 1) | ((c >> 2) & 1); }
__device__ inline unsigned h16_lo(unsigned r) { return __float_as_uint(__half2float(__ushort_as_half((unsigned short)(r & 0xffffu)))); }
__device__ inline unsigned h16_hi(unsigned r) { return __float_as_uint(__half2float(__ushort_as_half((unsigned short)(r >> 16)))); }
// A rows m0 .. m0 + 15, logical columns k0 .. k0 + 15 of a permuted F16 row-major matrix (row
// stride ld halves, a multiple of 8; base 16-byte aligned): the fragments of k steps k0 (f0) and
// k0 + 8 (f1). Bank-conflict free when ld * 2 % 128 is 16 or 112.
__device__ inline void lda16_rows2(const __half *base, int ld, int m0, int k0, frag_a &f0, frag_a &f1) {
    const int lane = threadIdx.x & 31;
    const __half *p = base + (m0 + (lane & 15)) * ld + k0 + ((lane >> 4) << 3);
    unsigned r[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
    f0.x[0] = h16_lo(r[0]), f0.x[1] = h16_lo(r[1]), f0.x[2] = h16_hi(r[0]), f0.x[3] = h16_hi(r[1]);
    f1.x[0] = h16_lo(r[2]), f1.x[1] = h16_lo(r[3]), f1.x[2] = h16_hi(r[2]), f1.x[3] = h16_hi(r[3]);
}
// A row's power-of-two scale for F16 from the largest of h16_mag over its values: the magnitude's
// bits (non-negative floats order as their bits), 0 for an inf or NaN, so that the scale comes from
// the row's finite values (an inf stays inf and a NaN NaN when scaled, and the products scaled
// back are the F32 path's, infinities included).
__device__ inline int h16_mag(float x) {
    const int b = __float_as_int(fabsf(x));
    return b < 0x7f800000 ? b : 0;
}
// The multiplier that puts the largest magnitude in [1, 2) (the exponent held within F32's normal
// range: [2, 4) for a max of 2^127 or more, below 1 for a subnormal max) and its inverse; a row of
// zeros (or a max from something else than h16_mag: an inf or NaN) keeps 1.
__device__ inline void h16_row_scale(int maxbits, float *mul, float *inv) {
    if (maxbits <= 0 || maxbits >= 0x7f800000) {
        *mul = *inv = 1.0f;
        return;
    }
    int s = 127 - (maxbits >> 23);  // the max is in [2^-s, 2^(1-s)) (a subnormal max: s 127, clamped)
    s = s > 126 ? 126 : s < -126 ? -126 : s;
    *mul = __int_as_float((127 + s) << 23), *inv = __int_as_float((127 - s) << 23);
}

// B rows k0 .. k0 + 7, columns n0 .. n0 + 7 where B^T is row-major (element (k, n) at
// base[n * ld + k]; ld as for lda_rows).
__device__ inline frag_b ldb_rows(const float *base, int ld, int k0, int n0) {
    const int lane = threadIdx.x & 31;
    const float *p = base + (n0 + (lane & 7)) * ld + k0 + ((lane & 8) >> 1);
    frag_b f;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(f.x[0]), "=r"(f.x[1])
                 : "r"(smem_u32(p)));
    return f;
}
// ... and rows k0 + 8 .. k0 + 15 beside them (f1) by one ldmatrix.x4: matrix i holds k0 + 4 i ..
// k0 + 4 i + 3 (lanes 8 i .. 8 i + 7 give its rows n0 ..); k0 a multiple of 4, rows 16-byte aligned.
// Bank-conflict free when ld % 32 is 4 (a row stride of 16 mod 128 bytes).
__device__ inline void ldb_rows2(const float *base, int ld, int k0, int n0, frag_b &f0, frag_b &f1) {
    const int lane = threadIdx.x & 31;
    const float *p = base + (n0 + (lane & 7)) * ld + k0 + 4 * (lane >> 3);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(f0.x[0]), "=r"(f0.x[1]), "=r"(f1.x[0]), "=r"(f1.x[1])
                 : "r"(smem_u32(p)));
}
// B rows k0 .. k0 + 7, columns n0 .. n0 + 7 of a row-major matrix (element (k, n) at
// base[k * ld + n]). Bank-conflict free when ld % 32 is 8 or 24.
__device__ inline frag_b ldb_cols(const float *base, int ld, int k0, int n0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    frag_b f;
    f.x[0] = __float_as_uint(base[(k0 + c) * ld + n0 + g]);
    f.x[1] = __float_as_uint(base[(k0 + c + 4) * ld + n0 + g]);
    return f;
}
// ... from BF16 values (bits; ld in elements): each the TF32 operand of the same value (exact)
__device__ inline frag_b ldb_cols_bf16(const unsigned short *base, int ld, int k0, int n0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    frag_b f;
    f.x[0] = (unsigned)base[(k0 + c) * ld + n0 + g] << 16;
    f.x[1] = (unsigned)base[(k0 + c + 4) * ld + n0 + g] << 16;
    return f;
}

// The warp's tiles of one pass over an M x N product (M a multiple of 16, N of 8): tile
// base + warp + NW r (r < R), row-major over N / 8 columns of tiles; m0 -1: no tile.
// FULL: M, N and the block's warp count fixed at compile time and every warp holding R whole
// tiles (the single kernel's D128 / 128-column case): no guards, fully unrolled k loops, and with
// the warp index masked to NW - 1 the tile rows fold to constants where N / 8 is a multiple of NW.
// ROWS (FULL only; N / 8 and base multiples of R): the warp's R tiles are adjacent columns of the
// same rows, one warp tile of (16 MT) x (8 R) (warp tile base / R + warp, row-major), so that wmma
// loads each A fragment once per k step for all R of them (R - 1 of every R ldmatrix of A saved;
// the products and their order per element are those of the default tiles: the same bits).
template <int NW, int R, int MT, bool FULL = false, bool ROWS = false> struct wtiles {
    static_assert(!ROWS || FULL, "shared rows: the full case only");
    int M, m0[R], n0[R];
    __device__ wtiles(int base, int M_, int N) : M(M_) {
        const int warp = FULL ? (threadIdx.x >> 5) & (NW - 1) : threadIdx.x >> 5, ntn = N / 8;
        const int ntiles = ((M + 16 * MT - 1) / (16 * MT)) * ntn;
#pragma unroll
        for (int r = 0; r < R; r++) {
            if constexpr (ROWS) {
                const int groups = ntn / R, q = base / R + warp;  // warp tiles per row of them; this one
                m0[r] = (q / groups) * 16 * MT;
                n0[r] = ((q % groups) * R + r) * 8;
                continue;
            }
            const int t = base + warp + NW * r;
            m0[r] = FULL || t < ntiles ? (t / ntn) * 16 * MT : -1;
            n0[r] = FULL || t < ntiles ? (t % ntn) * 8 : 0;
        }
    }
    // passes of NW R tiles that cover the product
    __device__ static int passes(int M, int N) {
        return (((M + 16 * MT - 1) / (16 * MT)) * (N / 8) + NW * R - 1) / (NW * R);
    }
    __device__ bool has(int r, int mi) const { return FULL || (m0[r] >= 0 && m0[r] + 16 * mi < M); }
};

template <int R, int MT> __device__ inline void zero(float (&acc)[R][MT][4]) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int mi = 0; mi < MT; mi++) acc[r][mi][0] = acc[r][mi][1] = acc[r][mi][2] = acc[r][mi][3] = 0.0f;
}

// acc += A B over k < K (a multiple of 8) for the warp's tiles: fa(m0, k0) -> frag_a,
// fb(k0, n0) -> frag_b. LOWER: A is lower triangular (a row block's k loop stops after its
// last row). TWO: also acc2 += A2 B with the same B fragments (fa2). A FULL tile set takes K
// as a compile-time constant after inlining and unrolls the k loop whole.
template <int NW, int R, int MT, bool LOWER, bool TWO, bool FULL, bool ROWS, typename FA, typename FB, typename FA2>
__device__ inline void wmma(float (&acc)[R][MT][4], const wtiles<NW, R, MT, FULL, ROWS> &wt, int K, FA fa, FB fb,
                            float (*acc2)[MT][4], FA2 fa2) {
    if constexpr (ROWS) {  // every tile's rows are m0[0]'s: A once per (row block, k step)
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 8) {
            if (LOWER && k0 >= wt.m0[0] + 16 * MT) continue;
            frag_b b[R];
#pragma unroll
            for (int r = 0; r < R; r++) b[r] = fb(k0, wt.n0[r]);
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                const int m = wt.m0[0] + 16 * mi;
                if (LOWER && k0 >= m + 16) continue;
                const frag_a a = fa(m, k0);
#pragma unroll
                for (int r = 0; r < R; r++) mma_tf32(acc[r][mi], a, b[r]);
                if constexpr (TWO) {
                    const frag_a a2 = fa2(m, k0);
#pragma unroll
                    for (int r = 0; r < R; r++) mma_tf32(acc2[r][mi], a2, b[r]);
                }
            }
        }
        return;
    }
    if constexpr (FULL) {
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 8) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (LOWER && k0 >= wt.m0[r] + 16 * MT) continue;
                const frag_b b = fb(k0, wt.n0[r]);
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    const int m = wt.m0[r] + 16 * mi;
                    if (LOWER && k0 >= m + 16) continue;
                    mma_tf32(acc[r][mi], fa(m, k0), b);
                    if constexpr (TWO) mma_tf32(acc2[r][mi], fa2(m, k0), b);
                }
            }
        }
        return;
    }
    int kend = 0;
#pragma unroll
    for (int r = 0; r < R; r++)
        if (wt.m0[r] >= 0) kend = max(kend, LOWER ? min(K, wt.m0[r] + 16 * MT) : K);
#pragma unroll 2
    for (int k0 = 0; k0 < kend; k0 += 8) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (wt.m0[r] < 0 || (LOWER && k0 >= wt.m0[r] + 16 * MT)) continue;
            const frag_b b = fb(k0, wt.n0[r]);
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                const int m = wt.m0[r] + 16 * mi;
                if (m >= wt.M || (LOWER && k0 >= m + 16)) continue;
                mma_tf32(acc[r][mi], fa(m, k0), b);
                if constexpr (TWO) mma_tf32(acc2[r][mi], fa2(m, k0), b);
            }
        }
    }
}
template <int NW, int R, int MT, bool LOWER, bool FULL, bool ROWS, typename FA, typename FB>
__device__ inline void wmma1(float (&acc)[R][MT][4], const wtiles<NW, R, MT, FULL, ROWS> &wt, int K, FA fa, FB fb) {
    wmma<NW, R, MT, LOWER, false>(acc, wt, K, fa, fb, (float(*)[MT][4]) nullptr, fa);
}

// f(r, mi, e, row, col) for the element pairs acc[r][mi][e], [e + 1] (e = 0, 2) of the warp's
// tiles: columns col, col + 1 of row.
template <int NW, int R, int MT, bool FULL, bool ROWS, typename F>
__device__ inline void for_pairs(const wtiles<NW, R, MT, FULL, ROWS> &wt, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
            if (wt.has(r, mi)) {
                const int m = wt.m0[r] + 16 * mi + g, n = wt.n0[r] + 2 * c;
                f(r, mi, 0, m, n);
                f(r, mi, 2, m + 8, n);
            }
}

}  // namespace tg_chunk
