// mul_mat.cuh - the paths of mul_mat on the CUDA backend (cuda/mul_mat.cu
// dispatches): few columns (GEMV), 16-bit weights on tensor cores, and the
// generic FP32 path that handles every layout.
#pragma once
#include "common.cuh"

// N <= 8 columns, F32/F16/BF16 weights with unit stride along k, F32 b with
// unit stride along k: one warp reads each weight row once. Returns false
// when the case does not qualify (then nothing was launched); otherwise *st
// holds the result.
bool tg_cuda_mm_vec(tg_backend *be, const tg_tensor *dst, tg_status *st);

// F16/BF16 weights with unit stride along k: b is rounded to the weight's
// type into the backend's scratch (kept for the next product of the same b:
// cuda/mul_mat_fast.cu), then one 16-bit tensor-core GEMM (F32
// accumulation, F32 result) per group of batches. Same contract as above.
bool tg_cuda_mm_tc(tg_backend *be, const tg_tensor *dst, tg_status *st);

// Quantized weights (Q8_0, Q4_0, Q4_K), any float b (cuda/mul_mat_quant.cu):
// N <= 8 an int8 dot-product GEMV (b quantized to 8 bits once per call),
// else the weights dequantized to F16 into the scratch and tg_cuda_gemm16.
// Returns false when a is not quantized.
bool tg_cuda_mm_quant(tg_backend *be, const tg_tensor *dst, tg_status *st);
// Its prefill path (cuda/mul_mat_quant_prefill.cu): quantized a, any N, a
// contiguous F32 result.
tg_status tg_cuda_mmq_prefill(tg_backend *be, const tg_tensor *dst);

// One 16-bit GEMM (t: CUDA_R_16F or CUDA_R_16BF), F32 accumulation into F32
// C, column-major as cuBLAS sees ggml's layout: C (M x N) = A^T B, strided
// batched over `batch` when batch > 1.
tg_status tg_cuda_gemm16(tg_backend *be, cudaDataType_t t, long long M, long long N, long long K, const void *A,
                         long long lda, long long sA, const void *B, long long ldb, long long sB, float *C,
                         long long ldc, long long sC, long long batch);
// mul_mat node dst from 16-bit weights A (leading dimension lda, batch
// strides sa2, sa3, in elements) and dense 16-bit b {K, N, B2, B3} B, with
// ggml's broadcasting over dims 2 and 3. dst must be contiguous.
tg_status tg_cuda_gemm16_batches(tg_backend *be, cudaDataType_t t, const tg_tensor *dst, const void *A, long long lda,
                                 long long sa2, long long sa3, const void *B);

// What the GEMM paths (generic, quantized prefill) check before cuBLAS: M,
// N, K and b's dim 2 within int, and a contiguous F32 result. TG_OK, or the
// error (message set).
tg_status tg_cuda_gemm_check(const tg_tensor *dst);

// Every layout: operands converted to dense F32 when needed, FP32 SGEMM
// (TF32 only when the backend asks for it).
tg_status tg_cuda_mul_mat_generic(tg_backend *be, const tg_tensor *dst);
