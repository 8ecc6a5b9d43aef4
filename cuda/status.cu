// status.cu - the CUDA backend's error conversion (CUDA and cuBLAS errors to
// tg_status; a sticky error marks the backend failed, RELIABILITY 22) and its
// grow-only scratch (tg_cuda_scratch), split out of backend.cu.
#include <cstdint>
#include <cstring>

#include "common.cuh"

// ---------------------------------------------------------------------------
// Error conversion

// Errors after which the CUDA context is unusable: every later call returns
// them again. Unknown errors are treated the same way, to be safe.
bool tg_cuda_is_sticky(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
        case cudaErrorMemoryAllocation:
        case cudaErrorInvalidValue:
        case cudaErrorInvalidConfiguration:
        case cudaErrorInvalidDevice:
        case cudaErrorInvalidDevicePointer:
        case cudaErrorInvalidMemcpyDirection:
        case cudaErrorInvalidResourceHandle:
        case cudaErrorInvalidDeviceFunction:
        case cudaErrorLaunchOutOfResources:
        case cudaErrorNoDevice:
        case cudaErrorInsufficientDriver:
        case cudaErrorNoKernelImageForDevice:
        case cudaErrorNotReady:
        case cudaErrorNotSupported:
        case cudaErrorInvalidPitchValue:
        case cudaErrorInvalidSymbol:
        case cudaErrorCudartUnloading:
        case cudaErrorInitializationError:
        case cudaErrorDevicesUnavailable:
        case cudaErrorSystemNotReady:
        case cudaErrorSystemDriverMismatch:
        case cudaErrorCompatNotSupportedOnDevice:
        case cudaErrorNotPermitted:
        case cudaErrorStubLibrary:
        case cudaErrorOperatingSystem:
        case cudaErrorInvalidKernelImage:
        case cudaErrorUnsupportedPtxVersion:
        // stream-capture misuse: nothing ran, the context is fine
        case cudaErrorStreamCaptureUnsupported:
        case cudaErrorStreamCaptureInvalidated:
        case cudaErrorStreamCaptureMerge:
        case cudaErrorStreamCaptureUnmatched:
        case cudaErrorStreamCaptureUnjoined:
        case cudaErrorStreamCaptureIsolation:
        case cudaErrorStreamCaptureImplicit:
        case cudaErrorCapturedEvent:
        case cudaErrorStreamCaptureWrongThread:
        case cudaErrorGraphExecUpdateFailure: return false;
        default: return true;
    }
}

tg_status tg_cuda_status(tg_backend *be, cudaError_t e, const char *call, const char *what) {
    char msg[768];
    snprintf(msg, sizeof(msg), "CUDA error %s: %s in %s", cudaGetErrorName(e), cudaGetErrorString(e), what);
    if (tg_cuda_is_sticky(e)) {
        if (be && be->impl && !tg_cuda(be)->failed) {
            tg_cuda(be)->failed = true;
            tg_cuda(be)->fail_msg = msg;
        }
    } else {
        (void)cudaGetLastError();  // clear it, so the next launch check does not see it
    }
    return tg_err(e == cudaErrorMemoryAllocation ? TG_ERR_OOM : TG_ERR_BACKEND, "[%s] %s", call, msg);
}

tg_status tg_cublas_status(tg_backend *be, cublasStatus_t s, const char *call, const char *what) {
    char msg[768];
    snprintf(msg, sizeof(msg), "cuBLAS error %s: %s in %s", cublasGetStatusName(s), cublasGetStatusString(s), what);
    tg_status st = TG_ERR_BACKEND;
    switch (s) {
        case CUBLAS_STATUS_ALLOC_FAILED: st = TG_ERR_OOM; break;
        case CUBLAS_STATUS_NOT_SUPPORTED:
        case CUBLAS_STATUS_ARCH_MISMATCH: st = TG_ERR_UNSUPPORTED; break;
        case CUBLAS_STATUS_EXECUTION_FAILED:
        case CUBLAS_STATUS_INTERNAL_ERROR:
            // a kernel of cuBLAS failed: the context may be poisoned
            if (be && be->impl && !tg_cuda(be)->failed) {
                tg_cuda(be)->failed = true;
                tg_cuda(be)->fail_msg = msg;
            }
            break;
        default: break;
    }
    (void)cudaGetLastError();
    return tg_err(st, "[%s] %s", call, msg);
}

// ---------------------------------------------------------------------------
// Scratch

tg_status tg_cuda_scratch(tg_backend *be, size_t size, void **ptr, const char *call) {
    tg_cuda_impl *impl = tg_cuda(be);
    *ptr = nullptr;
    impl->tc_b = nullptr;  // the caller overwrites the scratch: a kept rounding of b is gone
    if (size <= impl->scratch_size) {
        *ptr = impl->scratch;
        return TG_OK;
    }
    const size_t mib = (size_t)1 << 20;
    if (size > SIZE_MAX - mib) return tg_err(TG_ERR_OOM, "[%s] scratch of %zu bytes is too large", call, size);
    const size_t want = (size + mib - 1) / mib * mib;
    // a capture cannot synchronize or allocate: it gives up, and the plain run
    // that follows grows the scratch
    if (impl->capturing)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] scratch must grow to %zu bytes: not while capturing", call, want);
    // queued kernels may still read the old scratch
    TG_CUDA_TRY(be, call, cudaStreamSynchronize(impl->stream));
    impl->resource_gen++;  // captured launches that used the old scratch are stale
    if (impl->scratch) {
        void *old = impl->scratch;
        impl->scratch = nullptr;
        impl->scratch_size = 0;
        TG_CUDA_TRY(be, call, cudaFree(old));
    }
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        tg_cuda_status(be, e, call, "cudaMalloc (scratch)");
        return tg_err(e == cudaErrorMemoryAllocation ? TG_ERR_OOM : TG_ERR_BACKEND,
                      "[%s] cannot allocate %zu bytes of scratch on %s: %s", call, want, be->name.c_str(),
                      cudaGetErrorName(e));
    }
    impl->scratch = p;
    impl->scratch_size = want;
    *ptr = p;
    return TG_OK;
}
