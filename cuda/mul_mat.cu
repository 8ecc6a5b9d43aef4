// mul_mat.cu - matrix product with ggml's shape rule:
//   a {K, M, A2, A3}, b {K, N, B2, B3} -> d {M, N, B2, B3},
//   d[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3].
//
// Column-major view for cuBLAS: a's batch slice is a K x M matrix (lda = its
// row stride), so D (M x N) = A^T B, one Sgemm (strided batched) per group of
// batches sharing strides. Everything runs in full FP32 (TF32 only when the
// backend asks for it): F16/BF16 or strided operands are first converted to
// dense F32 in the backend's scratch (exact), weights in row chunks of at most
// mm_budget bytes. That is the generic path; two fast paths come first
// (cuda/mul_mat_fast.cu): a GEMV kernel for N <= 8 columns that reads the
// weights once, and 16-bit tensor-core GEMM for F16/BF16 weights. Quantized
// weights always take their own paths (cuda/mul_mat_quant.cu).
#include <climits>
#include <cstdlib>

#include "mul_mat.cuh"
#include "ops.h"

namespace {

// An F32 operand as cuBLAS takes it: column stride ld, batch strides s2, s3
// (all in elements).
struct mm_operand {
    const float *p;
    long long ld, s2, s3;
};

// Usable in place: F32, unit element stride, strides in whole elements, rows
// that do not overlap, leading dimension within int.
bool mm_direct(const tg_tensor *t, mm_operand *op) {
    if (t->type != TG_TYPE_F32 || (t->ne[0] > 1 && t->nb[0] != 4)) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 4 != 0) return false;
    const long long ld = t->ne[1] > 1 ? (long long)t->nb[1] / 4 : t->ne[0];
    if (ld < t->ne[0] || ld > INT_MAX) return false;
    op->p = (const float *)t->data;
    op->ld = ld;
    op->s2 = t->ne[2] > 1 ? (long long)t->nb[2] / 4 : 0;
    op->s3 = t->ne[3] > 1 ? (long long)t->nb[3] / 4 : 0;
    return true;
}


tg_status gemm(tg_backend *be, long long M, long long N, long long K, const float *A, long long lda, long long sA,
               const float *B, long long ldb, long long sB, float *C, long long ldc, long long sC, long long batch) {
    cublasHandle_t h = tg_cuda(be)->cublas;
    const float one = 1.0f, zero = 0.0f;
    if (batch == 1)
        TG_CUBLAS_TRY(be, "mul_mat",
                      cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)N, (int)K, &one, A, (int)lda, B, (int)ldb,
                                  &zero, C, (int)ldc));
    else
        TG_CUBLAS_TRY(be, "mul_mat",
                      cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)N, (int)K, &one, A, (int)lda,
                                                sA, B, (int)ldb, sB, &zero, C, (int)ldc, sC, (int)batch));
    return TG_OK;
}

}  // namespace

tg_status tg_cuda_mul_mat(tg_backend *be, const tg_tensor *dst) {
    tg_status st;
    if (tg_cuda_mm_quant(be, dst, &st)) return st;
    if (tg_cuda_mm_vec(be, dst, &st)) return st;
    if (tg_cuda_mm_tc(be, dst, &st)) return st;
    return tg_cuda_mul_mat_generic(be, dst);
}

tg_status tg_cuda_gemm_check(const tg_tensor *dst) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    if (a->ne[1] > INT_MAX || b->ne[1] > INT_MAX || a->ne[0] > INT_MAX || b->ne[2] > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[mul_mat] dims of a %s, b %s exceed cuBLAS's int range",
                      tg_shape_str(a).c_str(), tg_shape_str(b).c_str());
    if (dst->nb[0] != 4 || !tg_is_contiguous(dst))
        return tg_err(TG_ERR_ARG, "[mul_mat] result %s is not contiguous", tg_shape_str(dst).c_str());
    return TG_OK;
}

tg_status tg_cuda_mul_mat_generic(tg_backend *be, const tg_tensor *dst) {
    const char *call = "mul_mat";
    tg_cuda_impl *impl = tg_cuda(be);
    impl->sig_last[TG_CUDA_SIG_MUL_MAT] = "generic";
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], M = a->ne[1], A2 = a->ne[2], A3 = a->ne[3];
    const long long N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const long long r2 = B2 / A2, r3 = B3 / A3;

    if (tg_status s = tg_cuda_gemm_check(dst); s != TG_OK) return s;
    float *C = (float *)dst->data;
    const long long ldc = M, cS2 = M * N, cS3 = M * N * B2;

    // operands: direct, or converted to dense F32 in the scratch
    mm_operand A{}, B{};
    const bool a_direct = mm_direct(a, &A), b_direct = mm_direct(b, &B);
    const size_t b_bytes = b_direct ? 0 : tg_cuda_align256((size_t)(K * N * B2 * B3) * 4);
    const size_t a_full = (size_t)(K * M * A2 * A3) * 4;
    const bool a_chunked = !a_direct && a_full > impl->mm_budget;
    long long chunk_rows = M;  // rows of a converted at once when chunked
    if (a_chunked) {
        chunk_rows = (long long)(impl->mm_budget / 4) / K;
        if (chunk_rows < 1) chunk_rows = 1;
        if (chunk_rows > M) chunk_rows = M;
    }
    const size_t a_bytes = a_direct ? 0 : (a_chunked ? (size_t)(K * chunk_rows) * 4 : a_full);
    char *scratch = nullptr;
    if (a_bytes + b_bytes > 0) {
        tg_status s = tg_cuda_scratch(be, b_bytes + tg_cuda_align256(a_bytes), (void **)&scratch, call);
        if (s != TG_OK) return s;
    }
    if (!b_direct) {
        const long long ne[4] = {K, N, B2, B3};
        tg_status s = tg_cuda_copy(be, tg_cuda_desc_of(b), tg_cuda_desc_dense(scratch, TG_TYPE_F32, ne), false, call);
        if (s != TG_OK) return s;
        B = mm_operand{(const float *)scratch, K, K * N, K * N * B2};
    }
    float *a_scratch = (float *)(scratch + b_bytes);

    if (!a_chunked) {
        if (!a_direct) {
            const long long ne[4] = {K, M, A2, A3};
            tg_status s = tg_cuda_copy(be, tg_cuda_desc_of(a), tg_cuda_desc_dense(a_scratch, TG_TYPE_F32, ne), false, call);
            if (s != TG_OK) return s;
            A = mm_operand{a_scratch, K, K * M, K * M * A2};
        }
        for (long long i3 = 0; i3 < B3; i3++) {
            const float *Ai = A.p + (i3 / r3) * A.s3;
            const float *Bi = B.p + i3 * B.s3;
            float *Ci = C + i3 * cS3;
            tg_status s;
            if (r2 == 1) {
                s = gemm(be, M, N, K, Ai, A.ld, A.s2, Bi, B.ld, B.s2, Ci, ldc, cS2, B2);
                if (s != TG_OK) return s;
                continue;
            }
            // r2 consecutive b batches share one a batch; where b's batches are
            // consecutive columns (dense), they are N * r2 columns of one product
            const bool merge = B.s2 == B.ld * N && N * r2 <= INT_MAX;
            for (long long a2 = 0; a2 < A2; a2++) {
                s = gemm(be, M, merge ? N * r2 : N, K, Ai + a2 * A.s2, A.ld, 0, Bi + a2 * r2 * B.s2, B.ld,
                         merge ? 0 : B.s2, Ci + a2 * r2 * cS2, ldc, merge ? 0 : cS2, merge ? 1 : r2);
                if (s != TG_OK) return s;
            }
        }
        return TG_OK;
    }

    // weights too large to convert at once: chunks of rows of one a batch,
    // each used by every b batch that reads that a batch
    for (long long a3 = 0; a3 < A3; a3++)
        for (long long a2 = 0; a2 < A2; a2++)
            for (long long m0 = 0; m0 < M; m0 += chunk_rows) {
                const long long mt = M - m0 < chunk_rows ? M - m0 : chunk_rows;
                tg_cuda_desc src = tg_cuda_desc_of(a);
                src.data += m0 * (long long)a->nb[1] + a2 * (long long)a->nb[2] + a3 * (long long)a->nb[3];
                src.ne[1] = mt;
                src.ne[2] = src.ne[3] = 1;
                const long long ne[4] = {K, mt, 1, 1};
                tg_status s = tg_cuda_copy(be, src, tg_cuda_desc_dense(a_scratch, TG_TYPE_F32, ne), false, call);
                if (s != TG_OK) return s;
                for (long long i3 = a3 * r3; i3 < (a3 + 1) * r3; i3++) {
                    s = gemm(be, mt, N, K, a_scratch, K, 0, B.p + a2 * r2 * B.s2 + i3 * B.s3, B.ld, B.s2,
                             C + m0 + a2 * r2 * cS2 + i3 * cS3, ldc, cS2, r2);
                    if (s != TG_OK) return s;
                }
            }
    return TG_OK;
}
