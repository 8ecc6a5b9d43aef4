// wgmma.cuh - what the sm_90a chunked delta-rule kernels share (cuda/sm90a/delta_rule_chunked_wg.cu,
// TF32 products; cuda/sm90a/delta_rule_chunked_wgb.cu, BF16): the block size, the shared-memory
// operand descriptor, the wgmma fences and accumulator pins, and the O store from a 64 x 32
// accumulator tile.
#pragma once
#include <cstdint>

#include "../chunk_parts.cuh"
#include "../delta_rule_chunked.cuh"
#include "ops.h"
#include "../signature.cuh"

using namespace tg_chunk;

namespace {

constexpr int kNT = 512;  // 16 warps: four warpgroups

// The descriptor of the K-major operand whose rows start at shared address a (1024-aligned
// but for the k step's 32-byte offsets): 128-byte swizzle, 8-row groups 1024 bytes apart.
[[maybe_unused]] __device__ __forceinline__ uint64_t sdesc(uint32_t a) {
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// (k step kk of a tile of ROWS rows starts (kk >> 2) blocks of 32 columns and (kk & 3) 32-byte steps
// past k 0: the chains below add that to the descriptor's address field, in 16-byte units)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Pins accumulator registers at this point of the program: the compiler moves no read or write of
// them into the span between wg_fence and wg_wait0 (a non-wgmma access there serializes every
// wgmma of the span).
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i]));
}
// this thread's shared-memory writes visible to the async proxy (wgmma), before the barrier
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The products' k steps, each product's in one asm block so that no other instruction sits between
// its wgmmas (accumulator copies there made ptxas serialize them all). A chain starts at the
// descriptors of k 0 (operands N and N + 1 after the accumulators) and steps both by a k step's
// offset in 16-byte units: 2 (32 bytes) within a block of 32 columns, to the next block ROWS * 128
// bytes less the 96 already stepped (506 for a 64-row tile, 1018 for 128 rows). FIRST 0: the first
// wgmma overwrites D (D = A B^T), 1: every wgmma accumulates.
#define TG_ACC8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define TG_ACC16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define TG_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#endif

#ifdef __CUDACC__  // (the launch syntax needs nvcc: scripts/wgmma_emu compiles this header with g++)
// One sm_90a kernel's launch (512 threads a block, smem bytes of dynamic shared memory, its limit
// raised first: set is its slot of delta_smem_set); the caller checks the launch
template <typename K>
inline tg_status wg_launch(tg_backend *be, K kernel, size_t smem, size_t &set, const chunk_args &a, unsigned grid) {
    if (const tg_status s = smem_limit(be, kernel, smem, set, "delta_rule"); s != TG_OK) return s;
    kernel<<<grid, kNT, smem, tg_cuda(be)->stream>>>(a);
    return TG_OK;
}
#endif

// O's rows row0 and row0 + 8 of the chunk at token t0 (those < n; obase: token 0 of the slice)
// from a 64 x 32 accumulator tile: columns col0 + 8 n8 (n8 < 4) and the next, two per store
__device__ __forceinline__ void store_o(const chunk_args &a, char *obase, long long t0, int n, int row0, int col0,
                                        const float (&acc)[16]) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int t = row0 + 8 * hh;
        if (t >= n) continue;
        char *const p = obase + (t0 + t) * a.o.nb[2] + col0 * a.o.nb[0];
        if (a.o.type == TG_TYPE_F32 && a.o_pair) {
#pragma unroll
            for (int n8 = 0; n8 < 4; n8++)
                *(float2 *)(p + 32 * n8) = make_float2(a.scale * acc[4 * n8 + 2 * hh], a.scale * acc[4 * n8 + 2 * hh + 1]);
        } else {
#pragma unroll
            for (int n8 = 0; n8 < 4; n8++)
                store_pair(p + 8 * n8 * a.o.nb[0], a.o.nb[0], a.o.type, a.scale * acc[4 * n8 + 2 * hh],
                           a.scale * acc[4 * n8 + 2 * hh + 1], true, a.o_pair);
        }
    }
}

}  // namespace
