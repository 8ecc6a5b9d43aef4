// unary.cu - scale, silu, sigmoid, softplus.
#include "common.cuh"
#include "ops.h"

enum { UN_SCALE, UN_SILU, UN_SIGMOID, UN_SOFTPLUS };

// Same formulas as the CPU kernels (full-precision expf / log1pf).
template <int OP> __device__ __forceinline__ float un_apply(float x, float s) {
    if (OP == UN_SCALE) return x * s;
    if (OP == UN_SILU) return x == -INFINITY ? 0.0f : x / (1.0f + expf(-x));  // limit 0 at -inf
    if (OP == UN_SIGMOID) return 1.0f / (1.0f + expf(-x));
    return x > 20.0f ? x : log1pf(expf(x));  // softplus, linear past 20
}

// x, y dense F32 (y may be x: in place); vec: both 16-byte aligned.
template <int OP> __global__ void unary_dense_kernel(const float *x, float *y, long long n, float s, bool vec) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    long long start = 0;
    if (vec) {
        const long long n4 = n / 4;
        for (long long i = tid; i < n4; i += stride) {
            const float4 v = ((const float4 *)x)[i];
            float4 r;
            r.x = un_apply<OP>(v.x, s);
            r.y = un_apply<OP>(v.y, s);
            r.z = un_apply<OP>(v.z, s);
            r.w = un_apply<OP>(v.w, s);
            ((float4 *)y)[i] = r;
        }
        start = n4 * 4;
    }
    for (long long i = start + tid; i < n; i += stride) y[i] = un_apply<OP>(x[i], s);
}

// Any input type and strides.
template <int OP, typename I> __global__ void unary_kernel(tg_cuda_desc x, tg_cuda_desc y, I n, float s) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = tg_cuda_load(x.data + tg_cuda_offset(x, i), x.type);
        *(float *)(y.data + tg_cuda_offset(y, i)) = un_apply<OP>(v, s);
    }
}

template <int OP> static tg_status unary_cuda(tg_backend *be, const tg_tensor *dst, float s, const char *call) {
    cudaStream_t stream = tg_cuda(be)->stream;
    const tg_tensor *tx = dst->src[0];
    const long long n = tg_nelements(dst);
    const int threads = 256;
    if (tx->type == TG_TYPE_F32 && tg_is_contiguous(tx) && tg_is_contiguous(dst)) {
        const bool vec = (uintptr_t)tx->data % 16 == 0 && (uintptr_t)dst->data % 16 == 0;
        const long long work = vec ? (n + 3) / 4 : n;
        unary_dense_kernel<OP><<<tg_cuda_blocks(work, threads), threads, 0, stream>>>(
            (const float *)tx->data, (float *)dst->data, n, s, vec);
    } else {
        const tg_cuda_desc x = tg_cuda_desc_of(tx), y = tg_cuda_desc_of(dst);
        if (n <= INT32_MAX)
            unary_kernel<OP, unsigned><<<tg_cuda_blocks(n, threads), threads, 0, stream>>>(x, y, (unsigned)n, s);
        else
            unary_kernel<OP, long long><<<tg_cuda_blocks(n, threads), threads, 0, stream>>>(x, y, n, s);
    }
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

tg_status tg_cuda_scale(tg_backend *be, const tg_tensor *dst) {
    return unary_cuda<UN_SCALE>(be, dst, tg_get_params<float>(dst), "scale");
}
tg_status tg_cuda_silu(tg_backend *be, const tg_tensor *dst) { return unary_cuda<UN_SILU>(be, dst, 0.0f, "silu"); }
tg_status tg_cuda_sigmoid(tg_backend *be, const tg_tensor *dst) {
    return unary_cuda<UN_SIGMOID>(be, dst, 0.0f, "sigmoid");
}
tg_status tg_cuda_softplus(tg_backend *be, const tg_tensor *dst) {
    return unary_cuda<UN_SOFTPLUS>(be, dst, 0.0f, "softplus");
}
