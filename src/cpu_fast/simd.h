// simd.h - the vector kernels the CPU fast paths are built from, one table per
// instruction set, picked once at run time (dispatch.cpp):
//   avx512vnni  the avx512 table with AVX512-VNNI and -VBMI quantized kernels
//           (simd_avx512vnni.cpp)
//   avx512  AVX-512F/BW + F16C + FMA   (simd_avx512.cpp, built with those flags)
//   avx2    AVX2 + FMA + F16C          (simd_avx2.cpp)
//   generic GCC/Clang vector extensions, any target (simd_generic.cpp)
// Each ISA file includes simd_impl.h, whose code lives in an anonymous
// namespace, so no inline function compiled for one ISA can be picked by the
// linker for another. Type index: 0 F32, 1 F16, 2 BF16 (tg_simd_type_index).
#pragma once
#include <cstddef>
#include <cstdint>

#include "internal.h"

struct tg_simd {
    const char *name;
    int width;  // floats per vector

    // Register-tiled block of a matrix product: for r < R, c < C (R, C in 1..4)
    //   out[r + c*ldo] = sum_k a[r*lda + k] * b[c*ldb + k]   (k < K)
    // (added to out when accumulate: a product split into K blocks)
    // a of the indexed type (weights or cache rows), b F32. Per output the
    // sum is the same for any R, C: lane-wise FMA over K in vector steps, the
    // lanes added in a fixed tree, then the tail in order.
    void (*mm_tile[3])(const void *a, size_t lda, const float *b, size_t ldb, int64_t K, float *out, size_t ldo,
                       int R, int C, bool accumulate);
    // Matrix-vector rows (decode): for r < R, c < C (C in 1..4)
    //   out[r + c*ldo] = sum_k a[r*lda + k] * b[c*ldb + k]   (k < K)
    // one row of a at a time, read sequentially. Per output: 4 partial
    // accumulators (vector step i of K into partial i % 4), folded
    // (p0 + p1) + (p2 + p3), lanes added in the fixed tree, then the tail in
    // order; the same for any R and C.
    void (*mv[3])(const void *a, size_t lda, const float *b, size_t ldb, int64_t K, float *out, size_t ldo, int64_t R,
                  int C);
    // Several tokens against F32 weight rows, no horizontal sums: tokens
    // packed k-major in panels of P = 2*width (bp[k*P + j], zero past the
    // last token), weight rows r < R (R in 1..panel_rows) broadcast per k:
    //   out[r + j*ldo] = sum_k a[r*lda + k] * bp[k*P + j]   for j < nj
    // (sums in k order, one FMA chain per output).
    void (*mm_panel)(const float *a, size_t lda, const float *bp, int64_t K, float *out, size_t ldo, int R, int nj);
    int panel_rows;  // 8 with 32 vector registers (AVX-512), 6 with AVX2's 16, else 4
    // y[i] += s * x[i], x of the indexed type
    void (*axpy[3])(float *y, const void *x, float s, int64_t n);
    // conversions of n contiguous values
    void (*to_f32[3])(const void *src, float *dst, int64_t n);
    void (*from_f32[3])(const float *src, void *dst, int64_t n);
    // element-wise on contiguous F32
    void (*add)(const float *a, const float *b, float *y, int64_t n);
    void (*mul)(const float *a, const float *b, float *y, int64_t n);
    void (*add1)(const float *a, float b, float *y, int64_t n);  // b broadcast
    void (*mul1)(const float *a, float b, float *y, int64_t n);  // also scale
    float (*sumsq)(const float *x, int64_t n);
    float (*dot)(const float *a, const float *b, int64_t n);

    // Quantized weights (index tg_simd_qindex: Q8_0, Q4_0, Q4_K; rows of
    // nblocks blocks of src/quant.h) against activations quantized to 8 bits
    // in this table's layout (quant_act.h: tg_act_q8 rows, or the grouped
    // tg_act_q4g / tg_act_q8g of the VNNI table, for Q8_0/Q4_0, the AVX2
    // table's Q4_0 the paired tg_act_q4p; tg_act_q8k for Q4_K, the VNNI
    // table's tg_act_q8kv). q_act_bytes(qi, K): bytes of one activation row of K values.
    // q_quant[qi](x, K, dst) quantizes K floats into one: per block of 32
    // (Q4_K: 256) d = absmax / 127, q = round(x / d) to nearest even; a block
    // holding NaN or inf gets d = NaN (so its products are NaN).
    size_t (*q_act_bytes)(int qi, int64_t K);
    void (*q_quant[3])(const float *x, int64_t K, void *dst);
    // R weight rows (row r at w + r*ldw bytes) against C in 1..4 activation
    // rows (row c at act + c*act_stride bytes):
    //   out[r + c*ldo] = sum_blocks d_w d_a sum_i q_w[i] q_a[i]   (Q4_K: per
    //                    sub-block scale, minus dmin m_j d_a sum of its q_a)
    // Integer sums are exact (AVX2: maddubs of |w| and sign(a, w), Q4_0 and
    // Q4_K of the unsigned nibbles, Q4_0 corrected by the stored activation
    // block sums; VNNI: vpdpbusd of unsigned weights, corrected likewise);
    // they are scaled and added in F32 per vector lane over the blocks in
    // order, lanes added in a fixed tree at the end: the same for any R and C,
    // so an output does not depend on the other rows or tokens of its pass.
    void (*q_rows[3])(const void *w, size_t ldw, int64_t R, const void *act, size_t act_stride, int64_t nblocks,
                      float *out, size_t ldo, int C);
    // q_rows also for more than 4 tokens (groups of 4): faster than the
    // dequantized weights in the F32 panels (mul_mat.cpp) with VNNI
    bool q_many;
    // Quantized weights against many tokens (prompts) where that beats the
    // F32 panels: the AVX2 table's Q4_0 and Q4_K (simd_qgemm_impl.h); NULL
    // entries elsewhere. R (1..8) weight rows (row r at w + r*ldw bytes,
    // nblocks blocks) against N activation rows in q_quant's layout (row n
    // at act + n*act_stride): the same sums as q_rows (Q4_K's mins
    // included), the integer parts exact in int32, scaled and added in F32
    // per row over the blocks in order (not q_rows' order: the two may
    // differ by F32 rounding), the same for any other rows or tokens; an
    // infinite weight scale gives NaN. scratch: q_gemm_scratch(qi, K) bytes.
    // The activations are q_quant's rows, then q_gemm_act's in-place change
    // of each row (when the entry is not NULL: Q4_0's bytes become q + 128).
    void (*q_gemm[3])(const void *w, size_t ldw, int R, const void *act, size_t act_stride, int64_t N,
                      int64_t nblocks, float *out, size_t ldo, void *scratch);
    size_t (*q_gemm_scratch)(int qi, int64_t K);
    void (*q_gemm_act[3])(void *act, int64_t K);
    // nblocks blocks of quantized weights to F32, the same values as
    // tg_dequantize_row (x = d * q, one F32 product each); NULL entries:
    // use tg_dequantize_row
    void (*q_dequant[3])(const void *w, float *x, int64_t nblocks);

    // One token of the delta rule for one (value head, sequence), on a state
    // held as Dv rows of Dkp floats, row j at S + j*lds (S_j[i] = S[i][j],
    // the storage order; Dkp a multiple of width, padding zero; k, q padded
    // with zeros too). For each j, in one pass over row j from memory:
    //   u = beta*(v[j] - a S_j.k) (delta) or beta*v[j];
    //   o[j] = scale*(a S_j.q + u k.q);  S_j = a*S_j + u*k
    // Rows r in [pf_from, pf_to) are prefetched on the way (r >= Dv: rows of
    // the next (head, sequence) when it follows in memory; prefetches never fault).
    void (*dr_token)(float *S, int64_t lds, int64_t Dv, int64_t Dkp, const float *k, const float *q, const float *v,
                     float a, float beta, float scale, bool delta, float *o, int64_t pf_from, int64_t pf_to);

    // Attention of G query rows (q + g*ldq, F32) over n cache rows of one kv
    // head, K rows k + j*ldk and V rows v + j*ldv of the indexed types
    // [K type][V type]:
    //   out[g*ldo + i] = sum_j softmax_j(scale q_g.k_j) v_j[i]   (0 when n = 0)
    // s: G*n floats of scratch. Scores W keys at a time (one accumulator per
    // key over D, the W sums by the transposing tree), softmax with a vector
    // exp, then V rows read once per chunk of Dv for up to 4 query rows.
    void (*attn[3][3])(const void *k, size_t ldk, const void *v, size_t ldv, const float *q, size_t ldq, int64_t G,
                       int64_t D, int64_t Dv, int64_t n, float scale, float *s, float *out, size_t ldo);
};

const tg_simd *tg_simd_avx512vnni();  // NULL when not built for x86-64
const tg_simd *tg_simd_avx512();   // NULL when not built for x86-64
const tg_simd *tg_simd_avx2();     // NULL when not built for x86-64
const tg_simd *tg_simd_generic();  // always there

// The table for this CPU (TG_CPU_SIMD=generic|avx2|avx512|avx512vnni picks a lower one).
const tg_simd &tg_simd_get();
// The tables this CPU runs, lowest first (at most 4; levels: 0 generic,
// 1 avx2, 2 avx512, 3 avx512vnni, may be NULL); returns how many.
int tg_simd_runnable(const tg_simd **tables, int *levels);
// Tests: use table t from now on (NULL: back to this CPU's).
void tg_simd_force(const tg_simd *t);

inline int tg_simd_type_index(tg_type t) { return t == TG_TYPE_F16 ? 1 : t == TG_TYPE_BF16 ? 2 : 0; }
