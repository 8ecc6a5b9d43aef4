// binary.cu - add, mul (b broadcast over a, ggml's rule), swiglu.
#include "common.cuh"
#include "ops.h"

enum { BIN_ADD, BIN_MUL, BIN_SWIGLU };

template <int OP> __device__ __forceinline__ float bin_apply(float x, float y) {
    if (OP == BIN_ADD) return x + y;
    if (OP == BIN_MUL) return x * y;
    return tg_cuda_swiglu(x, y);
}

// a, b, d dense F32 of one shape (d may be a: in place). vec: all three are
// 16-byte aligned, so four elements per load; the tail goes one by one.
template <int OP> __global__ void binary_dense_kernel(const float *a, const float *b, float *d, long long n, bool vec) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    long long start = 0;
    if (vec) {
        const long long n4 = n / 4;
        for (long long i = tid; i < n4; i += stride) {
            const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
            float4 r;
            r.x = bin_apply<OP>(x.x, y.x);
            r.y = bin_apply<OP>(x.y, y.y);
            r.z = bin_apply<OP>(x.z, y.z);
            r.w = bin_apply<OP>(x.w, y.w);
            ((float4 *)d)[i] = r;
        }
        start = n4 * 4;
    }
    for (long long i = start + tid; i < n; i += stride) d[i] = bin_apply<OP>(a[i], b[i]);
}

// Any types and strides; d has a's shape, b repeats over it.
template <int OP, typename I> __global__ void binary_kernel(tg_cuda_desc a, tg_cuda_desc b, tg_cuda_desc d, I n) {
    const I stride = (I)gridDim.x * blockDim.x;
    const I n0 = (I)d.ne[0], n1 = (I)d.ne[1], n2 = (I)d.ne[2];
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        I r = i;
        const I i0 = r % n0;
        r /= n0;
        const I i1 = r % n1;
        r /= n1;
        const I i2 = r % n2;
        const I i3 = r / n2;
        const float x = tg_cuda_load(tg_cuda_ptr(a, i0, i1, i2, i3), a.type);
        const I j0 = i0 < (I)b.ne[0] ? i0 : i0 % (I)b.ne[0], j1 = i1 < (I)b.ne[1] ? i1 : i1 % (I)b.ne[1];
        const I j2 = i2 < (I)b.ne[2] ? i2 : i2 % (I)b.ne[2], j3 = i3 < (I)b.ne[3] ? i3 : i3 % (I)b.ne[3];
        const float y = tg_cuda_load(tg_cuda_ptr(b, j0, j1, j2, j3), b.type);
        *(float *)tg_cuda_ptr(d, i0, i1, i2, i3) = bin_apply<OP>(x, y);
    }
}

template <int OP> static tg_status binary_cuda(tg_backend *be, const tg_tensor *dst, const char *call) {
    cudaStream_t stream = tg_cuda(be)->stream;
    const tg_tensor *ta = dst->src[0], *tb = dst->src[1];
    const long long n = tg_nelements(dst);
    const int threads = 256;
    const bool dense = ta->type == TG_TYPE_F32 && tb->type == TG_TYPE_F32 && tg_is_contiguous(ta) &&
                       tg_is_contiguous(tb) && tg_is_contiguous(dst) && tg_same_shape(ta, tb);
    if (dense) {
        const bool vec = (uintptr_t)ta->data % 16 == 0 && (uintptr_t)tb->data % 16 == 0 && (uintptr_t)dst->data % 16 == 0;
        const long long work = vec ? (n + 3) / 4 : n;
        binary_dense_kernel<OP><<<tg_cuda_blocks(work, threads), threads, 0, stream>>>(
            (const float *)ta->data, (const float *)tb->data, (float *)dst->data, n, vec);
    } else {
        const tg_cuda_desc a = tg_cuda_desc_of(ta), b = tg_cuda_desc_of(tb), d = tg_cuda_desc_of(dst);
        if (n <= INT32_MAX)
            binary_kernel<OP, unsigned><<<tg_cuda_blocks(n, threads), threads, 0, stream>>>(a, b, d, (unsigned)n);
        else
            binary_kernel<OP, long long><<<tg_cuda_blocks(n, threads), threads, 0, stream>>>(a, b, d, n);
    }
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

tg_status tg_cuda_add(tg_backend *be, const tg_tensor *dst) { return binary_cuda<BIN_ADD>(be, dst, "add"); }
tg_status tg_cuda_mul(tg_backend *be, const tg_tensor *dst) { return binary_cuda<BIN_MUL>(be, dst, "mul"); }
tg_status tg_cuda_swiglu(tg_backend *be, const tg_tensor *dst) { return binary_cuda<BIN_SWIGLU>(be, dst, "swiglu"); }
