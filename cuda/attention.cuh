// attention.cuh - the paths of attention on the CUDA backend (cuda/attention.cu
// dispatches): tensor cores for prefill with 16-bit caches, the split kernel
// for 16-byte-aligned caches of one type, and the generic kernel (one block
// per query) for everything else.
#pragma once
#include <climits>

#include "common.cuh"

// Before the wait for the kernel before (tg_pdl_wait), in the decode kernels:
// the least position of sequence b's T tokens (rows below it are written by
// no node of the graph, where tg_cuda_attention_rows_pre holds) ...
__device__ inline long long tg_attn_least_pos(const tg_cuda_desc &pos, long long T, long long b) {
    long long p = LLONG_MAX;
    for (long long t = 0; t < T; t++) p = min(p, (long long)*(const int *)tg_cuda_ptr(pos, t, b, 0, 0));
    return p;
}
// ... and the 128-byte lines of rows [r0, r1) of K (row r at kbase + r kst,
// kbytes long) and of V (vbase, vst, vbytes) prefetched into L2 by the
// block's threads (only moves lines into the L2, where every write of the
// kernel before lands too: nothing read by a prefetch is used, so any rows
// may be prefetched)
__device__ inline void tg_attn_prefetch_rows(const char *kbase, long long kst, long long kbytes, const char *vbase,
                                             long long vst, long long vbytes, long long r0, long long r1) {
    const int lk = (int)((kbytes + 127) / 128), lv = (int)((vbytes + 127) / 128);
    for (long long i = threadIdx.x; i < (r1 - r0) * (lk + lv); i += blockDim.x) {
        const long long r = r0 + i / (lk + lv);
        const int c = (int)(i % (lk + lv));
        const char *p = c < lk ? kbase + r * kst + c * 128 : vbase + r * vst + (c - lk) * 128;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
}

// One KV tile's online-softmax step in a decode block of NW warps, for QN
// queries (the split and cluster kernels): sc[qq] holds this thread's dot
// product for tile row r; rows past the tile (r >= tn) or past the query's
// rows (j0 + r >= nrow[qq]) become -inf, the others are scaled. Then the
// tile's max over the block, corr = exp(m_old - m_new) (0 while nothing was
// summed), p = exp(s - m_new) (0 for -inf), which the row's owner thread
// stores at ps[qq * ps_stride + r] and counts once in the tile's sum, and
// l = l * corr + that sum. red: 2 * QN * NW floats of shared memory; warp
// and lane: the caller's; two block barriers, so every thread calls it.
template <int QN, int NW>
__device__ __forceinline__ void tg_attn_tile_softmax(float (&sc)[QN], int r, bool owner, int tn, long long j0,
                                                     const int *nrow, float scale, float *ps, int ps_stride,
                                                     float *red, int warp, int lane, float (&m_run)[QN],
                                                     float (&l_run)[QN], float (&corr)[QN]) {
#pragma unroll
    for (int qq = 0; qq < QN; qq++) {
        sc[qq] = r < tn && j0 + r < nrow[qq] ? sc[qq] * scale : -INFINITY;
        const float mx = tg_warp_max(sc[qq]);
        if (lane == 0) red[qq * NW + warp] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int qq = 0; qq < QN; qq++) {
        float mx = red[qq * NW];
#pragma unroll
        for (int w = 1; w < NW; w++) mx = fmaxf(mx, red[qq * NW + w]);
        const float m_new = fmaxf(m_run[qq], mx);
        // nothing was summed while m_run is -inf
        corr[qq] = m_run[qq] == -INFINITY ? 0.0f : expf(m_run[qq] - m_new);
        const float p = sc[qq] == -INFINITY ? 0.0f : expf(sc[qq] - m_new);
        if (owner) ps[qq * ps_stride + r] = p;
        const float ls = tg_warp_sum(owner ? p : 0.0f);  // each row once
        if (lane == 0) red[(QN + qq) * NW + warp] = ls;
        m_run[qq] = m_new;
    }
    __syncthreads();
#pragma unroll
    for (int qq = 0; qq < QN; qq++) {
        float ls = red[(QN + qq) * NW];
#pragma unroll
        for (int w = 1; w < NW; w++) ls += red[(QN + qq) * NW + w];
        l_run[qq] = l_run[qq] * corr[qq] + ls;
    }
}

// K/V rows shared by a GQA group, KV rows split over the grid when there are
// few queries (cuda/attention_split.cu). Ranges of at least min_split_rows
// rows. Returns false when the case does not qualify (nothing launched);
// otherwise *st holds the result.
// dry: decide only, launch nothing; true then means the cluster kernel
// would run (tg_cuda_attention_takes_cluster). tg_cuda_attention asks for
// ranges of at least TG_CUDA_ATTN_MIN_SPLIT_ROWS rows.
constexpr int TG_CUDA_ATTN_MIN_SPLIT_ROWS = 64;
bool tg_cuda_attention_split(tg_backend *be, const tg_tensor *dst, int min_split_rows, tg_status *st,
                             bool dry = false);

// Decode with several ranges of KV rows per query (nsplit, as the split path
// sized them) in one kernel of thread-block clusters that merge in shared
// memory (cuda/attention_cluster.cu; sm_90, the split path's layouts with D,
// Dv <= 256, and its chunks of QN queries, nqc per kv head). Same contract.
// dry: whether it would launch (nothing launched, *st untouched).
bool tg_cuda_attention_cluster(tg_backend *be, const tg_tensor *dst, long long nsplit, int QN, long long nqc,
                               tg_status *st, bool dry = false);
// Whether attention node dst (decode: few queries per kv head) runs on the
// cluster kernel when enqueued now (cuda/fuse.cu asks before folding the rope
// into the q/k/v GEMV: the cluster kernel gains from starting under the rope
// kernel, bench/NOTES.md session 28).
bool tg_cuda_attention_takes_cluster(tg_backend *be, const tg_tensor *dst);
// Its kernels' cluster size and shared memory, allowed on the current device;
// *max_cluster: the largest cluster of 16, 8, 4 or 2 blocks at the kernel's
// most shared memory that the device can schedule (0: none). An error, or a
// binary compiled for an architecture before sm_90, means no clusters.
cudaError_t tg_cuda_attention_cluster_init(int *max_cluster);

// Prefill on tensor cores (cuda/attention_mma.cu): F16/BF16 caches of one
// type, D = Dv in {64, 128}, at least 64 queries per kv head. Same contract.
bool tg_cuda_attention_mma(tg_backend *be, const tg_tensor *dst, tg_status *st, bool dry = false);
// Its kernels' shared memory beyond the default, allowed on the current device
// (called when a backend is created).
cudaError_t tg_cuda_attention_mma_init();

// Every layout and type mix: one block per query row.
tg_status tg_cuda_attention_generic(tg_backend *be, const tg_tensor *dst);
