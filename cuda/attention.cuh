// attention.cuh - the paths of attention on the CUDA backend (cuda/attention.cu
// dispatches): tensor cores for prefill with 16-bit caches, the split kernel
// for 16-byte-aligned caches of one type, and the generic kernel (one block
// per query) for everything else.
#pragma once
#include "common.cuh"

// 16 bytes global -> shared without a register round trip (L2 only); src_bytes
// 0 writes zeros (a row past the tile's end: nothing is read).
__device__ inline void tg_cp_async16(void *dst, const void *src, int src_bytes = 16) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ inline void tg_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// until at most N of this thread's committed groups are still in flight
template <int N> __device__ inline void tg_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// K/V rows shared by a GQA group, KV rows split over the grid when there are
// few queries (cuda/attention_split.cu). Ranges of at least min_split_rows
// rows. Returns false when the case does not qualify (nothing launched);
// otherwise *st holds the result.
bool tg_cuda_attention_split(tg_backend *be, const tg_tensor *dst, int min_split_rows, tg_status *st);

// Decode with several ranges of KV rows per query (nsplit, as the split path
// sized them) in one kernel of thread-block clusters that merge in shared
// memory (cuda/attention_cluster.cu; sm_90, the split path's layouts with D,
// Dv <= 256, and its chunks of QN queries, nqc per kv head). Same contract.
bool tg_cuda_attention_cluster(tg_backend *be, const tg_tensor *dst, long long nsplit, int QN, long long nqc,
                               tg_status *st);
// Its kernels' cluster size and shared memory, allowed on the current device;
// *max_cluster: the largest cluster of 16, 8, 4 or 2 blocks at the kernel's
// most shared memory that the device can schedule (0: none). An error, or a
// binary compiled for an architecture before sm_90, means no clusters.
cudaError_t tg_cuda_attention_cluster_init(int *max_cluster);

// Prefill on tensor cores (cuda/attention_mma.cu): F16/BF16 caches of one
// type, D = Dv in {64, 128}, at least 64 queries per kv head. Same contract.
bool tg_cuda_attention_mma(tg_backend *be, const tg_tensor *dst, tg_status *st);
// Its kernels' shared memory beyond the default, allowed on the current device
// (called when a backend is created).
cudaError_t tg_cuda_attention_mma_init();

// Every layout and type mix: one block per query row.
tg_status tg_cuda_attention_generic(tg_backend *be, const tg_tensor *dst);
