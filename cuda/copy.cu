// copy.cu - cont, cpy (with type conversion), get_rows, and the no-op of views.
#include "common.cuh"
#include "ops.h"
#include "quant.cuh"

// ---------------------------------------------------------------------------
// Element copies: element i of src (row-major order of its shape) goes to
// element i of dst. Same types move raw bits (as the CPU's memcpy), others
// convert through F32 with round-to-nearest-even.

// Both sides dense, same type, 16-byte aligned: 16 bytes per thread.
__global__ void copy_vec16_kernel(const uint4 *src, uint4 *dst, long long n16, const tg_cuda_err *err) {
    if (!tg_cuda_record_clear(err)) return;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) dst[i] = src[i];
}

// Both sides dense, F32 to F16 or BF16 (mul_mat's rounding of b on the
// tensor-core path), 16-byte aligned source, 8-byte aligned destination: 4
// elements per thread, each rounded as tg_cuda_store rounds it.
template <bool BF16> __global__ void f32_to_16_kernel(const float4 *src, uint2 *dst, long long n4, const tg_cuda_err *err) {
    if (!tg_cuda_record_clear(err)) return;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 v = src[i];
        uint2 o;
        if (BF16) {
            __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
            o.x = *(uint32_t *)&a, o.y = *(uint32_t *)&b;
        } else {
            __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
            o.x = *(uint32_t *)&a, o.y = *(uint32_t *)&b;
        }
        dst[i] = o;
    }
}

template <typename I, bool DENSE>
__global__ void copy_kernel(tg_cuda_desc src, tg_cuda_desc dst, I n, const tg_cuda_err *err) {
    if (!tg_cuda_record_clear(err)) return;
    const int ses = src.type == TG_TYPE_F32 || src.type == TG_TYPE_I32 ? 4 : 2;
    const int des = dst.type == TG_TYPE_F32 || dst.type == TG_TYPE_I32 ? 4 : 2;
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const char *s = src.data + (DENSE ? (long long)i * ses : tg_cuda_offset(src, i));
        char *d = dst.data + (DENSE ? (long long)i * des : tg_cuda_offset(dst, i));
        if (src.type == dst.type) {
            if (ses == 4)
                *(uint32_t *)d = *(const uint32_t *)s;
            else
                *(uint16_t *)d = *(const uint16_t *)s;
        } else {
            tg_cuda_store(d, dst.type, tg_cuda_load(s, src.type));
        }
    }
}

tg_status tg_cuda_copy(tg_backend *be, const tg_cuda_desc &src, const tg_cuda_desc &dst, bool skip_on_error,
                       const char *call) {
    tg_cuda_impl *impl = tg_cuda(be);
    const long long n = tg_cuda_nelements(src);
    if (n != tg_cuda_nelements(dst))
        return tg_err(TG_ERR_ARG, "[%s] element counts differ (%lld vs %lld)", call, n, tg_cuda_nelements(dst));
    if (n == 0) return TG_OK;
    const tg_cuda_err *err = skip_on_error ? impl->d_err : nullptr;
    const size_t ses = tg_type_size(src.type), des = tg_type_size(dst.type);
    const bool dense = tg_cuda_is_contiguous(src, ses) && tg_cuda_is_contiguous(dst, des);
    const int threads = 256;
    if (dense && src.type == dst.type && (uintptr_t)src.data % 16 == 0 && (uintptr_t)dst.data % 16 == 0 &&
        ((unsigned long long)n * ses) % 16 == 0) {
        const long long n16 = (long long)((unsigned long long)n * ses / 16);
        copy_vec16_kernel<<<tg_cuda_blocks(n16, threads), threads, 0, impl->stream>>>(
            (const uint4 *)src.data, (uint4 *)dst.data, n16, err);
    } else if (dense && src.type == TG_TYPE_F32 && (dst.type == TG_TYPE_F16 || dst.type == TG_TYPE_BF16) && n % 4 == 0 &&
               (uintptr_t)src.data % 16 == 0 && (uintptr_t)dst.data % 8 == 0) {
        const long long n4 = n / 4;
        if (dst.type == TG_TYPE_BF16)
            f32_to_16_kernel<true><<<tg_cuda_blocks(n4, threads), threads, 0, impl->stream>>>(
                (const float4 *)src.data, (uint2 *)dst.data, n4, err);
        else
            f32_to_16_kernel<false><<<tg_cuda_blocks(n4, threads), threads, 0, impl->stream>>>(
                (const float4 *)src.data, (uint2 *)dst.data, n4, err);
    } else if (n <= INT32_MAX) {
        if (dense)
            copy_kernel<unsigned, true><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(src, dst, (unsigned)n, err);
        else
            copy_kernel<unsigned, false><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(src, dst, (unsigned)n, err);
    } else {
        if (dense)
            copy_kernel<long long, true><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(src, dst, n, err);
        else
            copy_kernel<long long, false><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(src, dst, n, err);
    }
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

tg_status tg_cuda_noop(tg_backend *, const tg_tensor *) { return TG_OK; }

// Quantized cont/cpy: both sides contiguous and of one type (checked when the
// op was built), so the blocks move as bytes: as 16-bit words (every block
// size is even, blocks are 2-byte aligned), 16 bytes at a time when aligned.
__global__ void copy_u16_kernel(const uint16_t *src, uint16_t *dst, long long n, const tg_cuda_err *err) {
    if (!tg_cuda_record_clear(err)) return;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

static tg_status copy_quantized(tg_backend *be, const tg_tensor *src, const tg_tensor *dst, bool skip_on_error,
                         const char *call) {
    tg_cuda_impl *impl = tg_cuda(be);
    const size_t n = tg_nbytes(dst);
    const tg_cuda_err *err = skip_on_error ? impl->d_err : nullptr;
    if (n == 0) return TG_OK;
    if ((uintptr_t)src->data % 16 == 0 && (uintptr_t)dst->data % 16 == 0 && n % 16 == 0)
        copy_vec16_kernel<<<tg_cuda_blocks((long long)(n / 16), 256), 256, 0, impl->stream>>>(
            (const uint4 *)src->data, (uint4 *)dst->data, (long long)(n / 16), err);
    else
        copy_u16_kernel<<<tg_cuda_blocks((long long)(n / 2), 256), 256, 0, impl->stream>>>(
            (const uint16_t *)src->data, (uint16_t *)dst->data, (long long)(n / 2), err);
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

tg_status tg_cuda_cont(tg_backend *be, const tg_tensor *dst) {
    if (tg_type_is_quantized(dst->type)) return copy_quantized(be, dst->src[0], dst, false, "cont");
    return tg_cuda_copy(be, tg_cuda_desc_of(dst->src[0]), tg_cuda_desc_of(dst), false, "cont");
}

// cpy writes b (often a persistent cache or output): skipped when an earlier
// check of this graph failed, so a failed graph leaves b as it was.
tg_status tg_cuda_cpy(tg_backend *be, const tg_tensor *dst) {
    if (tg_type_is_quantized(dst->type)) return copy_quantized(be, dst->src[0], dst, true, "cpy");
    return tg_cuda_copy(be, tg_cuda_desc_of(dst->src[0]), tg_cuda_desc_of(dst), true, "cpy");
}

// ---------------------------------------------------------------------------
// get_rows: a {E, V}, ids {n0, n1, n2} I32 -> dst {E, n0, n1, n2} F32.

// Every id in [0, V), else report it (element index in ids' row-major order).
template <typename I> __global__ void check_ids_kernel(tg_cuda_desc ids, I n, long long V, tg_cuda_err *err) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int id = *(const int *)(ids.data + tg_cuda_offset(ids, i));
        if (id < 0 || id >= V) tg_cuda_report(err, TG_CUDA_ERR_ID_RANGE, TG_OP_GET_ROWS, id, V, (long long)i, 0);
    }
}

tg_status tg_cuda_check_get_rows(tg_backend *be, const tg_tensor *dst) {
    tg_cuda_impl *impl = tg_cuda(be);
    const tg_cuda_desc ids = tg_cuda_desc_of(dst->src[1]);
    const long long n = tg_cuda_nelements(ids), V = dst->src[0]->ne[1];
    const int threads = 256;
    if (n <= INT32_MAX)
        check_ids_kernel<unsigned><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(ids, (unsigned)n, V, impl->d_err);
    else
        check_ids_kernel<long long><<<tg_cuda_blocks(n, threads), threads, 0, impl->stream>>>(ids, n, V, impl->d_err);
    TG_CUDA_LAUNCHED(be, "get_rows");
    return TG_OK;
}

// Element loaders of get_rows: a plain type converted to F32, or a quantized
// row's element dequantized exactly as tg_dequantize (a row's blocks are
// contiguous whatever a's row stride).
struct load_plain {
    __device__ float operator()(const tg_cuda_desc &a, const char *row, long long e) const {
        return tg_cuda_load(row + e * a.nb[0], a.type);
    }
};
template <tg_type T> struct load_quant {
    __device__ float operator()(const tg_cuda_desc &, const char *row, long long e) const {
        return tg_cuda_dequant<T>(row, e);
    }
};

// One block per output row (grid-stride over rows), threads along E. A bad id
// is reported and its row is not written.
template <typename Load>
__global__ void get_rows_kernel(tg_cuda_desc a, tg_cuda_desc ids, tg_cuda_desc dst, long long nrows,
                                tg_cuda_err *err) {
    const long long V = a.ne[1], E = a.ne[0];
    const Load load;
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        const long long i1 = r % dst.ne[1], i2 = (r / dst.ne[1]) % dst.ne[2], i3 = r / (dst.ne[1] * dst.ne[2]);
        const int id = *(const int *)tg_cuda_ptr(ids, i1, i2, i3, 0);
        if (id < 0 || id >= V) {
            if (threadIdx.x == 0) tg_cuda_report(err, TG_CUDA_ERR_ID_RANGE, TG_OP_GET_ROWS, id, V, r, 0);
            continue;
        }
        const char *src = a.data + (long long)id * a.nb[1];
        char *out = tg_cuda_ptr(dst, 0, i1, i2, i3);
        for (long long e = threadIdx.x; e < E; e += blockDim.x) *(float *)(out + e * dst.nb[0]) = load(a, src, e);
    }
}

tg_status tg_cuda_get_rows(tg_backend *be, const tg_tensor *dst) {
    tg_cuda_impl *impl = tg_cuda(be);
    const long long nrows = dst->ne[1] * dst->ne[2] * dst->ne[3];
    const long long E = dst->ne[0];
    const int threads = E >= 256 ? 256 : (int)((E + 31) / 32 * 32);
    const unsigned blocks = (unsigned)(nrows < 65535LL * 16 ? nrows : 65535LL * 16);
    const tg_cuda_desc a = tg_cuda_desc_of(dst->src[0]), ids = tg_cuda_desc_of(dst->src[1]), d = tg_cuda_desc_of(dst);
    switch (a.type) {
        case TG_TYPE_Q8_0:
            get_rows_kernel<load_quant<TG_TYPE_Q8_0>><<<blocks, threads, 0, impl->stream>>>(a, ids, d, nrows, impl->d_err);
            break;
        case TG_TYPE_Q4_0:
            get_rows_kernel<load_quant<TG_TYPE_Q4_0>><<<blocks, threads, 0, impl->stream>>>(a, ids, d, nrows, impl->d_err);
            break;
        case TG_TYPE_Q4_K:
            get_rows_kernel<load_quant<TG_TYPE_Q4_K>><<<blocks, threads, 0, impl->stream>>>(a, ids, d, nrows, impl->d_err);
            break;
        default:
            get_rows_kernel<load_plain><<<blocks, threads, 0, impl->stream>>>(a, ids, d, nrows, impl->d_err);
            break;
    }
    TG_CUDA_LAUNCHED(be, "get_rows");
    return TG_OK;
}
