// mul_mat_fast.cu - the fast paths of mul_mat (see mul_mat.cuh):
//
// GEMV (N <= 8 columns, decode): one warp per R rows of the weights, lanes
// along k, 16-byte weight loads (8 F16/BF16 or 4 F32 values) streamed once;
// the few b columns are small and come from L1/L2. F32 accumulation, one warp
// reduction per output. R grows with N so that b's loads per weight byte stay
// bounded (R = 1, 1, 2, 4 for N up to 1, 2, 4, 8).
//
// Tensor cores (F16/BF16 weights, any N): b is rounded once per call to the
// weight's type (round to nearest even) into the backend's scratch, then
// cublasGemmEx / cublasGemmStridedBatchedEx multiplies the 16-bit operands
// with F32 accumulation into the F32 result. The weights are read in place:
// no conversion of a, whatever its size.
#include <climits>

#include "mul_mat.cuh"
#include "ops.h"

namespace {

constexpr int kWarps = 4;  // warps per block of the GEMV kernel

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// grid: x over groups of kWarps * R rows, y over output batches i2 + B2*i3.
// VEC: 16-byte loads of a and b (rows and columns 16-byte aligned, K a
// multiple of 16 / sizeof(TA)); otherwise one element per lane per step.
template <typename TA, int NMAX, int R, bool VEC>
__global__ void __launch_bounds__(32 * kWarps) mm_vec_kernel(tg_cuda_desc a, tg_cuda_desc b, tg_cuda_desc d, int N) {
    constexpr int VE = 16 / sizeof(TA);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long M = a.ne[1], K = a.ne[0];
    const long long m0 = ((long long)blockIdx.x * kWarps + warp) * R;
    if (m0 >= M) return;  // whole warps leave together: no shuffle misses a lane
    const long long i2 = blockIdx.y % d.ne[2], i3 = blockIdx.y / d.ne[2];
    const long long a2 = i2 / (d.ne[2] / a.ne[2]), a3 = i3 / (d.ne[3] / a.ne[3]);
    const TA *arow[R];
#pragma unroll
    for (int r = 0; r < R; r++) arow[r] = (const TA *)tg_cuda_ptr(a, 0, m0 + r < M ? m0 + r : M - 1, a2, a3);
    const float *bcol[NMAX];
#pragma unroll
    for (int n = 0; n < NMAX; n++) bcol[n] = (const float *)tg_cuda_ptr(b, 0, n < N ? n : 0, i2, i3);
    float acc[R][NMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) acc[r][n] = 0.0f;
    if (VEC) {
#pragma unroll 4
        for (long long k = (long long)lane * VE; k < K; k += 32 * VE) {
            float w[R][VE];
#pragma unroll
            for (int r = 0; r < R; r++) tg_cuda_cvt16(__ldg((const uint4 *)(arow[r] + k)), w[r], TA());
#pragma unroll
            for (int n = 0; n < NMAX; n++) {
                if (n >= N) break;
                float x[VE];
#pragma unroll
                for (int e = 0; e < VE; e += 4) {
                    const float4 v = *(const float4 *)(bcol[n] + k + e);
                    x[e] = v.x, x[e + 1] = v.y, x[e + 2] = v.z, x[e + 3] = v.w;
                }
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < VE; e++) acc[r][n] = fmaf(w[r][e], x[e], acc[r][n]);
            }
        }
    } else {
        for (long long k = lane; k < K; k += 32) {
            float w[R];
#pragma unroll
            for (int r = 0; r < R; r++) w[r] = to_f32(arow[r][k]);
#pragma unroll
            for (int n = 0; n < NMAX; n++) {
                if (n >= N) break;
                const float x = bcol[n][k];
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][n] = fmaf(w[r], x, acc[r][n]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            const float s = tg_warp_sum(acc[r][n]);
            if (lane == 0 && n < N && m0 + r < M) *(float *)tg_cuda_ptr(d, m0 + r, n, i2, i3) = s;
        }
}

bool aligned16(const tg_tensor *t) {
    if ((uintptr_t)t->data % 16 != 0) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16 != 0) return false;
    return true;
}

template <typename TA, int NMAX>
void launch_vec(cudaStream_t st, const tg_tensor *a, const tg_tensor *b, const tg_tensor *d, bool vec) {
    constexpr int R = NMAX <= 2 ? 1 : NMAX / 2;
    const tg_cuda_desc da = tg_cuda_desc_of(a), db = tg_cuda_desc_of(b), dd = tg_cuda_desc_of(d);
    const dim3 grid((unsigned)((a->ne[1] + kWarps * R - 1) / (kWarps * R)), (unsigned)(d->ne[2] * d->ne[3]));
    const int N = (int)d->ne[1];
    if (vec)
        mm_vec_kernel<TA, NMAX, R, true><<<grid, 32 * kWarps, 0, st>>>(da, db, dd, N);
    else
        mm_vec_kernel<TA, NMAX, R, false><<<grid, 32 * kWarps, 0, st>>>(da, db, dd, N);
}

template <typename TA> void launch_vec_n(cudaStream_t st, const tg_tensor *a, const tg_tensor *b, const tg_tensor *d) {
    const bool vec = a->ne[0] % (16 / sizeof(TA)) == 0 && aligned16(a) && aligned16(b);
    const long long N = d->ne[1];
    if (N <= 1) launch_vec<TA, 1>(st, a, b, d, vec);
    else if (N <= 2) launch_vec<TA, 2>(st, a, b, d, vec);
    else if (N <= 4) launch_vec<TA, 4>(st, a, b, d, vec);
    else launch_vec<TA, 8>(st, a, b, d, vec);
}

}  // namespace

bool tg_cuda_mm_vec(tg_backend *be, const tg_tensor *dst, tg_status *st) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const size_t ts = tg_type_size(a->type);
    if (a->type != TG_TYPE_F16 && a->type != TG_TYPE_BF16 && a->type != TG_TYPE_F32) return false;
    if (b->type != TG_TYPE_F32 || (b->ne[0] > 1 && b->nb[0] != 4) || (a->ne[0] > 1 && a->nb[0] != ts)) return false;
    if (dst->ne[1] > 8 || dst->ne[2] * dst->ne[3] > 65535 || (a->ne[1] + kWarps - 1) / kWarps > INT_MAX) return false;
    cudaStream_t s = tg_cuda(be)->stream;
    switch (a->type) {
        case TG_TYPE_F16: launch_vec_n<__half>(s, a, b, dst); break;
        case TG_TYPE_BF16: launch_vec_n<__nv_bfloat16>(s, a, b, dst); break;
        default: launch_vec_n<float>(s, a, b, dst); break;
    }
    cudaError_t e = cudaGetLastError();
    *st = e == cudaSuccess ? TG_OK : tg_cuda_status(be, e, "mul_mat", "mm_vec_kernel launch");
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
        // r2 consecutive b batches share one a batch
        for (long long a2 = 0; a2 < A2; a2++) {
            s = tg_cuda_gemm16(be, t, M, N, K, Ai + a2 * sa2 * 2, lda, 0, Bi + a2 * r2 * sb2 * 2, K, sb2,
                               Ci + a2 * r2 * sc2, M, sc2, r2);
            if (s != TG_OK) return s;
        }
    }
    return TG_OK;
}

namespace {

tg_status mm_tc(tg_backend *be, const tg_tensor *dst, long long lda, long long sa2, long long sa3) {
    const char *call = "mul_mat";
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    if (dst->nb[0] != 4 || !tg_is_contiguous(dst))
        return tg_err(TG_ERR_ARG, "[mul_mat] result %s is not contiguous", tg_shape_str(dst).c_str());
    // b rounded to the weight's type, dense {K, N, B2, B3}
    void *bs = nullptr;
    tg_status s = tg_cuda_scratch(be, (size_t)(K * N * B2 * B3) * 2, &bs, call);
    if (s != TG_OK) return s;
    const long long ne[4] = {K, N, B2, B3};
    s = tg_cuda_copy(be, tg_cuda_desc_of(b), tg_cuda_desc_dense(bs, a->type, ne), false, call);
    if (s != TG_OK) return s;
    const cudaDataType_t t = a->type == TG_TYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    return tg_cuda_gemm16_batches(be, t, dst, a->data, lda, sa2, sa3, bs);
}

}  // namespace

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
