// mul_mat.cu - matrix product with ggml's shape rule:
//   a {K, M, A2, A3}, b {K, N, B2, B3} -> d {M, N, B2, B3},
//   d[m, n, i2, i3] = sum_k a[k, m, i2 / (B2/A2), i3 / (B3/A3)] * b[k, n, i2, i3].
//
// Column-major view for cuBLAS: a's batch slice is a K x M matrix (lda = its
// row stride), so D (M x N) = A^T B, one Sgemm (strided batched) per group of
// batches sharing strides. Everything runs in full FP32 (TF32 only when the
// backend asks for it): F16/BF16 or strided operands are first converted to
// dense F32 in the backend's scratch (exact), weights in row chunks of at most
// mm_budget bytes. Products with few columns (N <= 4, decode) and F16/BF16
// weights skip the conversion: a warp-per-row kernel reads the weights once.
#include <climits>
#include <cstdlib>

#include "common.cuh"
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

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

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

// ---------------------------------------------------------------------------
// Few columns, F16/BF16 weights: one warp per output row m, lanes along k,
// 16-byte weight loads when rows allow it; F32 accumulation.

__device__ inline void load8(const __half *p, float *f) {
    const uint4 u = *(const uint4 *)p;
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 v = __half22float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}
__device__ inline void load8(const __nv_bfloat16 *p, float *f) {
    const uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 v = __bfloat1622float2(h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}
__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

constexpr int kVecWarps = 4;

// grid: x over rows m (kVecWarps per block), y over output batches i2 + B2*i3.
// b is F32 with unit stride along k; N <= NMAX.
template <typename TA, int NMAX, bool VEC>
__global__ void mul_mat_vec_kernel(tg_cuda_desc a, tg_cuda_desc b, tg_cuda_desc d, long long N) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long m = (long long)blockIdx.x * kVecWarps + warp;
    const long long M = a.ne[1], K = a.ne[0];
    if (m >= M) return;  // whole warps leave together: no shuffle misses a lane
    const long long i2 = blockIdx.y % d.ne[2], i3 = blockIdx.y / d.ne[2];
    const long long a2 = i2 / (d.ne[2] / a.ne[2]), a3 = i3 / (d.ne[3] / a.ne[3]);
    const TA *arow = (const TA *)tg_cuda_ptr(a, 0, m, a2, a3);
    const float *bcol[NMAX];
#pragma unroll
    for (int n = 0; n < NMAX; n++) bcol[n] = (const float *)tg_cuda_ptr(b, 0, n < N ? n : 0, i2, i3);
    float acc[NMAX];
#pragma unroll
    for (int n = 0; n < NMAX; n++) acc[n] = 0.0f;
    if (VEC) {
        for (long long k = (long long)lane * 8; k < K; k += 32 * 8) {
            float w[8];
            load8(arow + k, w);
#pragma unroll
            for (int n = 0; n < NMAX; n++)
                if (n < N)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[n] += w[j] * bcol[n][k + j];
        }
    } else {
        for (long long k = lane; k < K; k += 32) {
            const float w = to_f32(arow[k]);
#pragma unroll
            for (int n = 0; n < NMAX; n++)
                if (n < N) acc[n] += w * bcol[n][k];
        }
    }
#pragma unroll
    for (int n = 0; n < NMAX; n++) {
        const float s = tg_warp_sum(acc[n]);
        if (lane == 0 && n < N) *(float *)tg_cuda_ptr(d, m, n, i2, i3) = s;
    }
}

template <typename TA> void launch_vec(cudaStream_t stream, const tg_tensor *a, const tg_tensor *b, const tg_tensor *d,
                                       bool vec) {
    const tg_cuda_desc da = tg_cuda_desc_of(a), db = tg_cuda_desc_of(b), dd = tg_cuda_desc_of(d);
    const dim3 grid((unsigned)((a->ne[1] + kVecWarps - 1) / kVecWarps), (unsigned)(d->ne[2] * d->ne[3]));
    const long long N = d->ne[1];
    if (vec)
        mul_mat_vec_kernel<TA, 4, true><<<grid, 32 * kVecWarps, 0, stream>>>(da, db, dd, N);
    else
        mul_mat_vec_kernel<TA, 4, false><<<grid, 32 * kVecWarps, 0, stream>>>(da, db, dd, N);
}

// The fast path applies: F16/BF16 weights with unit stride along k, F32 b
// with unit stride along k, at most 4 columns.
bool vec_path_ok(const tg_tensor *a, const tg_tensor *b, const tg_tensor *d) {
    if (a->type != TG_TYPE_F16 && a->type != TG_TYPE_BF16) return false;
    if (b->type != TG_TYPE_F32 || (b->ne[0] > 1 && b->nb[0] != 4) || (a->ne[0] > 1 && a->nb[0] != 2)) return false;
    return d->ne[1] <= 4 && d->ne[2] * d->ne[3] <= 65535 && (a->ne[1] + kVecWarps - 1) / kVecWarps <= INT_MAX;
}

// 16-byte weight loads: every row start 16-byte aligned and K a multiple of 8.
bool vec_loads_ok(const tg_tensor *a) {
    if (a->ne[0] % 8 != 0 || (uintptr_t)a->data % 16 != 0) return false;
    for (int i = 1; i < 4; i++)
        if (a->ne[i] > 1 && a->nb[i] % 16 != 0) return false;
    return true;
}

}  // namespace

tg_status tg_cuda_mul_mat(tg_backend *be, const tg_tensor *dst) {
    const char *call = "mul_mat";
    tg_cuda_impl *impl = tg_cuda(be);
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], M = a->ne[1], A2 = a->ne[2], A3 = a->ne[3];
    const long long N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const long long r2 = B2 / A2, r3 = B3 / A3;

    if (vec_path_ok(a, b, dst)) {
        if (a->type == TG_TYPE_F16)
            launch_vec<__half>(impl->stream, a, b, dst, vec_loads_ok(a));
        else
            launch_vec<__nv_bfloat16>(impl->stream, a, b, dst, vec_loads_ok(a));
        TG_CUDA_LAUNCHED(be, call);
        return TG_OK;
    }

    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || B2 > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[mul_mat] dims of a %s, b %s exceed cuBLAS's int range",
                      tg_shape_str(a).c_str(), tg_shape_str(b).c_str());
    if (dst->nb[0] != 4 || !tg_is_contiguous(dst))
        return tg_err(TG_ERR_ARG, "[mul_mat] result %s is not contiguous", tg_shape_str(dst).c_str());
    float *C = (float *)dst->data;
    const long long ldc = M, cS2 = M * N, cS3 = M * N * B2;

    // operands: direct, or converted to dense F32 in the scratch
    mm_operand A{}, B{};
    const bool a_direct = mm_direct(a, &A), b_direct = mm_direct(b, &B);
    const size_t b_bytes = b_direct ? 0 : align256((size_t)(K * N * B2 * B3) * 4);
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
        tg_status s = tg_cuda_scratch(be, b_bytes + align256(a_bytes), (void **)&scratch, call);
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
            // r2 consecutive b batches share one a batch
            for (long long a2 = 0; a2 < A2; a2++) {
                s = gemm(be, M, N, K, Ai + a2 * A.s2, A.ld, 0, Bi + a2 * r2 * B.s2, B.ld, B.s2, Ci + a2 * r2 * cS2, ldc,
                         cS2, r2);
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
