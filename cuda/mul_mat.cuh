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
// type into the backend's scratch, then one 16-bit tensor-core GEMM (F32
// accumulation, F32 result) per group of batches. Same contract as above.
bool tg_cuda_mm_tc(tg_backend *be, const tg_tensor *dst, tg_status *st);

// Every layout: operands converted to dense F32 when needed, FP32 SGEMM
// (TF32 only when the backend asks for it).
tg_status tg_cuda_mul_mat_generic(tg_backend *be, const tg_tensor *dst);
