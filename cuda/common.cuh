// common.cuh - shared pieces of the CUDA backend: the backend state, error
// checks that turn CUDA failures into tg_status, and the device error record
// that kernels use to report bad input (positions, ids) without aborting.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "internal.h"

// Bad input found on the device: the first report wins (atomicCAS on code).
// The backend reads it back after the graph and turns it into an error.
struct tg_cuda_err {
    int code;     // 0: none; otherwise a TG_CUDA_ERR_* value
    int op;       // tg_op of the reporting node
    long long info[4];
};
enum {
    TG_CUDA_ERR_NONE = 0,
    TG_CUDA_ERR_POSITION_RANGE = 1,  // info: position, limit, sequence, token
    TG_CUDA_ERR_POSITION_REPEAT = 2,  // info: position, sequence, token, other token
    TG_CUDA_ERR_ID_RANGE = 3,         // info: id, vocab, index
};

__device__ inline void tg_cuda_report(tg_cuda_err *e, int code, int op, long long a, long long b, long long c,
                                      long long d) {
    if (atomicCAS(&e->code, 0, code) == 0) {
        e->op = op;
        e->info[0] = a;
        e->info[1] = b;
        e->info[2] = c;
        e->info[3] = d;
    }
}

struct tg_cuda_impl {
    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    tg_cuda_err *d_err = nullptr;  // device error record, cleared before each graph
    bool failed = false;           // a CUDA error happened: refuse further work
    std::string fail_msg;
    int sm_count = 0;
};

inline tg_cuda_impl *tg_cuda(tg_backend *be) { return (tg_cuda_impl *)be->impl; }

// Turn a CUDA runtime error into a status; a sticky error (kernel fault) also
// marks the backend failed so that later calls are refused.
tg_status tg_cuda_status(tg_backend *be, cudaError_t e, const char *call, const char *what);
tg_status tg_cublas_status(tg_backend *be, cublasStatus_t s, const char *call, const char *what);

#define TG_CUDA_TRY(be, call, expr)                                         \
    do {                                                                    \
        cudaError_t e_ = (expr);                                            \
        if (e_ != cudaSuccess) return tg_cuda_status((be), e_, (call), #expr); \
    } while (0)

// Check the launch that just happened (configuration errors, not faults).
#define TG_CUDA_LAUNCHED(be, call) TG_CUDA_TRY(be, call, cudaGetLastError())

// Grid size for n items with block threads, capped for grid-stride loops.
inline unsigned tg_cuda_blocks(long long n, int threads, long long cap = 65535LL * 16) {
    long long b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

// Strided element access on the device, as tg_get_f32 on the host.
__device__ inline float tg_cuda_load(const char *p, tg_type type) {
    switch (type) {
        case TG_TYPE_F32: return *(const float *)p;
        case TG_TYPE_F16: return __half2float(*(const __half *)p);
        case TG_TYPE_BF16: return __bfloat162float(*(const __nv_bfloat16 *)p);
        case TG_TYPE_I32: return (float)*(const int *)p;
        default: return __int_as_float(0x7fc00000);
    }
}
__device__ inline void tg_cuda_store(char *p, tg_type type, float v) {
    switch (type) {
        case TG_TYPE_F32: *(float *)p = v; break;
        case TG_TYPE_F16: *(__half *)p = __float2half_rn(v); break;
        case TG_TYPE_BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn(v); break;
        case TG_TYPE_I32: *(int *)p = (int)v; break;
        default: break;
    }
}

// A tensor's shape and strides by value, for kernel arguments.
struct tg_cuda_desc {
    char *data;
    tg_type type;
    long long ne[4];
    long long nb[4];
};
inline tg_cuda_desc tg_cuda_desc_of(const tg_tensor *t) {
    tg_cuda_desc d;
    d.data = t ? (char *)t->data : nullptr;
    d.type = t ? t->type : TG_TYPE_F32;
    for (int i = 0; i < 4; i++) {
        d.ne[i] = t ? t->ne[i] : 1;
        d.nb[i] = t ? (long long)t->nb[i] : 0;
    }
    return d;
}
__device__ inline char *tg_cuda_ptr(const tg_cuda_desc &d, long long i0, long long i1, long long i2, long long i3) {
    return d.data + i0 * d.nb[0] + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
}
