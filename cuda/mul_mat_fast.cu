// mul_mat_fast.cu - the fast paths of mul_mat (see mul_mat.cuh):
//
// GEMV (N <= 8 columns, decode): cuda/mmv.cu, shared with the backend's
// fusions (cuda/fuse.cu).
//
// Tensor cores (F16/BF16 weights, any N): b is rounded to the weight's type
// (round to nearest even) into the backend's scratch, once for the products
// of one b in a graph (impl->tc_b: a later product of the same b tensor and
// weight type takes the rounding already there, unless a node in between
// wrote b's bytes or used the scratch; cuda/fuse.cu drops it), then
// cublasGemmEx / cublasGemmStridedBatchedEx multiplies the 16-bit operands
// with F32 accumulation into the F32 result. The weights are read in place:
// no conversion of a, whatever its size.
#include <climits>

#include "mmv.cuh"
#include "mul_mat.cuh"
#include "ops.h"

bool tg_cuda_mm_vec(tg_backend *be, const tg_tensor *dst, tg_status *st) {
    tg_cuda_mmv p;
    if (!tg_cuda_mmv_job_of(be, dst, &p.job[0], &p.b)) return false;
    p.njob = 1;
    *st = tg_cuda_mmv_launch(be, p, "mul_mat");
    return true;
}

// ---------------------------------------------------------------------------
// Tensor cores

tg_status tg_cuda_gemm16(tg_backend *be, cudaDataType_t t, long long M, long long N, long long K, const void *A,
                         long long lda, long long sA, const void *B, long long ldb, long long sB, float *C,
                         long long ldc, long long sC, long long batch) {
    cublasHandle_t h = tg_cuda(be)->cublas;
    const float one = 1.0f, zero = 0.0f;
    if (batch == 1)
        TG_CUBLAS_TRY(be, "mul_mat",
                      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)N, (int)K, &one, A, t, (int)lda, B, t,
                                   (int)ldb, &zero, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        TG_CUBLAS_TRY(be, "mul_mat",
                      cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)N, (int)K, &one, A, t,
                                                 (int)lda, sA, B, t, (int)ldb, sB, &zero, C, CUDA_R_32F, (int)ldc, sC,
                                                 (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return TG_OK;
}

tg_status tg_cuda_gemm16_batches(tg_backend *be, cudaDataType_t t, const tg_tensor *dst, const void *A, long long lda,
                                 long long sa2, long long sa3, const void *B) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], M = a->ne[1], A2 = a->ne[2], A3 = a->ne[3];
    const long long N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const long long r2 = B2 / A2, r3 = B3 / A3;
    const char *Ab = (const char *)A, *Bb = (const char *)B;
    float *C = (float *)dst->data;
    const long long sb2 = K * N, sb3 = K * N * B2, sc2 = M * N, sc3 = M * N * B2;
    tg_status s;
    for (long long i3 = 0; i3 < B3; i3++) {
        const char *Ai = Ab + (i3 / r3) * sa3 * 2;
        const char *Bi = Bb + i3 * sb3 * 2;
        float *Ci = C + i3 * sc3;
        if (r2 == 1) {
            s = tg_cuda_gemm16(be, t, M, N, K, Ai, lda, sa2, Bi, K, sb2, Ci, M, sc2, B2);
            if (s != TG_OK) return s;
            continue;
        }
        // r2 consecutive b batches share one a batch: B and C are dense, so
        // those batches are N * r2 consecutive columns of one product (a batch
        // of sequences decoding a token each reads the weights once)
        const bool merge = N * r2 <= INT_MAX;
        for (long long a2 = 0; a2 < A2; a2++) {
            s = tg_cuda_gemm16(be, t, M, merge ? N * r2 : N, K, Ai + a2 * sa2 * 2, lda, 0, Bi + a2 * r2 * sb2 * 2, K,
                               merge ? 0 : sb2, Ci + a2 * r2 * sc2, M, merge ? 0 : sc2, merge ? 1 : r2);
            if (s != TG_OK) return s;
        }
    }
    return TG_OK;
}

namespace {

tg_status mm_tc(tg_backend *be, const tg_tensor *dst, long long lda, long long sa2, long long sa3) {
    const char *call = "mul_mat";
    tg_cuda(be)->sig_last[TG_CUDA_SIG_MUL_MAT] = "tc";
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    if (dst->nb[0] != 4 || !tg_is_contiguous(dst))
        return tg_err(TG_ERR_ARG, "[mul_mat] result %s is not contiguous", tg_shape_str(dst).c_str());
    // b rounded to the weight's type, dense {K, N, B2, B3}: kept from the
    // previous product of this b when the scratch still holds it (q, k, v)
    tg_cuda_impl *impl = tg_cuda(be);
    void *bs = nullptr;
    if (impl->tc_reuse && impl->tc_b == b && impl->tc_type == a->type) {
        bs = impl->scratch;
        impl->tc_reused++;
    } else {
        tg_status s = tg_cuda_scratch(be, (size_t)(K * N * B2 * B3) * 2, &bs, call);
        if (s != TG_OK) return s;
        const long long ne[4] = {K, N, B2, B3};
        s = tg_cuda_copy(be, tg_cuda_desc_of(b), tg_cuda_desc_dense(bs, a->type, ne), false, call);
        if (s != TG_OK) return s;
        // (a result over b's own bytes changes b: nothing kept then)
        if (impl->tc_reuse && !tg_cuda_overlap(dst, b)) impl->tc_b = b, impl->tc_type = a->type;
    }
    const cudaDataType_t t = a->type == TG_TYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    return tg_cuda_gemm16_batches(be, t, dst, a->data, lda, sa2, sa3, bs);
}

}  // namespace

long long tg_cuda_mm_b_reuses(tg_backend *be) { return tg_cuda(be)->tc_reused; }

bool tg_cuda_mm_tc(tg_backend *be, const tg_tensor *dst, tg_status *st) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    if (a->type != TG_TYPE_F16 && a->type != TG_TYPE_BF16) return false;
    if (a->ne[0] > 1 && a->nb[0] != 2) return false;
    for (int i = 1; i < 4; i++)
        if (a->ne[i] > 1 && a->nb[i] % 2 != 0) return false;
    const long long lda = a->ne[1] > 1 ? (long long)a->nb[1] / 2 : a->ne[0];
    if (lda < a->ne[0] || lda > INT_MAX) return false;
    const long long sa2 = a->ne[2] > 1 ? (long long)a->nb[2] / 2 : 0, sa3 = a->ne[3] > 1 ? (long long)a->nb[3] / 2 : 0;
    if (a->ne[0] > INT_MAX || a->ne[1] > INT_MAX || b->ne[1] > INT_MAX || b->ne[2] > INT_MAX) return false;
    *st = mm_tc(be, dst, lda, sa2, sa3);
    return true;
}
