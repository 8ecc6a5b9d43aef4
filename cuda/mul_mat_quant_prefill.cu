// mul_mat_quant_prefill.cu - mul_mat with quantized weights a (Q8_0, Q4_0,
// Q4_K) and more than 8 columns (prefill; cuda/mul_mat_quant.cu takes the
// decode GEMV and dispatches here): a is dequantized to F16 (exactly as
// tg_dequantize, then rounded to nearest) into the scratch, whole when it
// fits the backend's mm_budget, else in row chunks of at most mm_budget
// bytes; b is rounded to F16 once; cublasGemmEx multiplies on tensor cores
// with F32 accumulation (tg_cuda_gemm16, as the F16-weight path).
#include <algorithm>
#include <climits>

#include "mul_mat.cuh"
#include "ops.h"
#include "quant.cuh"

namespace {

// Prefill: a's rows (desc src: {K, rows, n2, n3}) dequantized to dense F16,
// exactly as tg_dequantize (F32 products, no fusing) and then rounded. A
// thread per unit (as the GEMV reads them), x over a row's units, y over rows.
template <tg_type T> __global__ void dequant_f16_kernel(tg_cuda_desc src, __half *out, long long nrows) {
    constexpr int SUB = tg_cuda_qunit<T>::subs, UE = 32 * SUB;
    constexpr float bias = T == TG_TYPE_Q8_0 ? 8388736.0f : T == TG_TYPE_Q4_0 ? 8388616.0f : 8388608.0f;
    const long long K = src.ne[0];
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= K / UE) return;
    for (long long r = blockIdx.y; r < nrows; r += gridDim.y) {
        const long long i1 = r % src.ne[1], i2 = (r / src.ne[1]) % src.ne[2], i3 = r / (src.ne[1] * src.ne[2]);
        tg_cuda_qunit<T> w;
        tg_cuda_load_unit<T>(tg_cuda_ptr(src, 0, i1, i2, i3), u, w);
        if (T == TG_TYPE_Q8_0)
#pragma unroll
            for (int i = 0; i < 8; i++) w.q[i] ^= 0x80808080;  // signed bytes to byte + 128 (see bias)
        uint4 *dst = (uint4 *)(out + r * K + (long long)u * UE);
#pragma unroll
        for (int s = 0; s < SUB; s++)
#pragma unroll
            for (int i = 0; i < 8; i += 2) {  // elements 32 s + 4 i .. + 8: one 16-byte store
                __half2 h[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float v[2];
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int k = 2 * j + e;  // element 4 i + k of the sub-block
                        const float q = tg_cuda_byte_float((uint32_t)w.q[8 * s + i + k / 4], k % 4, bias);
                        v[e] = T == TG_TYPE_Q4_K ? __fsub_rn(__fmul_rn(w.d[s], q), w.m[s]) : __fmul_rn(w.d[s], q);
                    }
                    h[j] = __floats2half2_rn(v[0], v[1]);
                }
                dst[(32 * s + 4 * i) / 8] = *(const uint4 *)h;
            }
    }
}

tg_status dequant_f16(tg_backend *be, const tg_cuda_desc &src, __half *out) {
    const long long nrows = src.ne[1] * src.ne[2] * src.ne[3];
    const long long units = src.ne[0] / (src.type == TG_TYPE_Q4_K ? 64 : 32);
    const int threads = units >= 128 ? 128 : (int)((units + 31) / 32 * 32);
    const dim3 grid((unsigned)((units + threads - 1) / threads), (unsigned)std::min(nrows, 65535LL));
    cudaStream_t st = tg_cuda(be)->stream;
    switch (src.type) {
        case TG_TYPE_Q8_0: dequant_f16_kernel<TG_TYPE_Q8_0><<<grid, threads, 0, st>>>(src, out, nrows); break;
        case TG_TYPE_Q4_0: dequant_f16_kernel<TG_TYPE_Q4_0><<<grid, threads, 0, st>>>(src, out, nrows); break;
        default: dequant_f16_kernel<TG_TYPE_Q4_K><<<grid, threads, 0, st>>>(src, out, nrows); break;
    }
    TG_CUDA_LAUNCHED(be, "mul_mat");
    return TG_OK;
}

}  // namespace

tg_status tg_cuda_mmq_prefill(tg_backend *be, const tg_tensor *dst) {
    const char *call = "mul_mat";
    tg_cuda_impl *impl = tg_cuda(be);
    impl->sig_last[TG_CUDA_SIG_MUL_MAT] = "quant/gemm";
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const long long K = a->ne[0], M = a->ne[1], A2 = a->ne[2], A3 = a->ne[3];
    const long long N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const long long r2 = B2 / A2, r3 = B3 / A3;
    if (tg_status s = tg_cuda_gemm_check(dst); s != TG_OK) return s;
    // F16 weights: all of a when it fits the budget, else chunks of rows of one batch
    const size_t a_full = (size_t)(K * M * A2 * A3) * 2;
    const bool chunked = a_full > impl->mm_budget;
    long long chunk_rows = M;
    if (chunked) chunk_rows = std::max(1LL, std::min(M, (long long)(impl->mm_budget / 2) / K));
    const size_t a_bytes = chunked ? (size_t)(K * chunk_rows) * 2 : a_full;
    const size_t b_bytes = tg_cuda_align256((size_t)(K * N * B2 * B3) * 2);
    char *scratch = nullptr;
    tg_status s = tg_cuda_scratch(be, b_bytes + a_bytes, (void **)&scratch, call);
    if (s != TG_OK) return s;
    const long long bne[4] = {K, N, B2, B3};
    s = tg_cuda_copy(be, tg_cuda_desc_of(b), tg_cuda_desc_dense(scratch, TG_TYPE_F16, bne), false, call);
    if (s != TG_OK) return s;
    const char *B = scratch;
    __half *as = (__half *)(scratch + b_bytes);
    float *C = (float *)dst->data;
    const long long sb2 = K * N, sb3 = K * N * B2, sc2 = M * N, sc3 = M * N * B2;
    if (!chunked) {
        if ((s = dequant_f16(be, tg_cuda_desc_of(a), as)) != TG_OK) return s;
        return tg_cuda_gemm16_batches(be, CUDA_R_16F, dst, as, K, K * M, K * M * A2, B);
    }
    for (long long a3 = 0; a3 < A3; a3++)
        for (long long a2 = 0; a2 < A2; a2++)
            for (long long m0 = 0; m0 < M; m0 += chunk_rows) {
                const long long mt = std::min(chunk_rows, M - m0);
                tg_cuda_desc src = tg_cuda_desc_of(a);
                src.data += m0 * (long long)a->nb[1] + a2 * (long long)a->nb[2] + a3 * (long long)a->nb[3];
                src.ne[1] = mt;
                src.ne[2] = src.ne[3] = 1;
                if ((s = dequant_f16(be, src, as)) != TG_OK) return s;
                for (long long i3 = a3 * r3; i3 < (a3 + 1) * r3; i3++) {
                    // the r2 b batches of this a batch: N * r2 consecutive dense columns
                    const bool merge = N * r2 <= INT_MAX;
                    s = tg_cuda_gemm16(be, CUDA_R_16F, mt, merge ? N * r2 : N, K, as, K, 0,
                                       B + (a2 * r2 * sb2 + i3 * sb3) * 2, K, merge ? 0 : sb2,
                                       C + m0 + a2 * r2 * sc2 + i3 * sc3, M, merge ? 0 : sc2, merge ? 1 : r2);
                    if (s != TG_OK) return s;
                }
            }
    return TG_OK;
}
