// bulk_copy.cuh - bulk asynchronous copies from global into shared memory (cp.async.bulk, compute
// capability 9.0), their completion counted by an mbarrier: the chunk-parallel delta rule's state
// pass (cuda/delta_rule_state_pass.cu). One mbarrier phase per use of a buffer: one arrival (the
// issuing thread's, with the bytes to expect), then complete_tx by the copies; waiters test the
// phase's parity. One thread initializes the barriers and fences (mbar_init_fence) before the
// block's barrier that publishes them. Code built for an older architecture has the copies as no-ops
// and mbar_init as a trap: callers take them only where the device and the build's code are 9.0 or
// later (tg_cuda_delta_bulk_ready).
#pragma once
#include "chunk_mma.cuh"

namespace tg_chunk {

__device__ inline void mbar_init(unsigned long long *b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(b)) : "memory");
#else
    __trap();
#endif
}
__device__ inline void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// orders this thread's generic-proxy accesses of shared memory before later bulk copies into it
__device__ inline void fence_async_smem() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ inline void mbar_expect(unsigned long long *b, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
#endif
}
__device__ inline void bulk_copy(void *dst, const void *src, unsigned bytes, unsigned long long *b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
#endif
}
__device__ inline void mbar_wait(unsigned long long *b, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
#endif
}

}  // namespace tg_chunk
