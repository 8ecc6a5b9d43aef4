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
template <typename I>  // I: int where the line count fits (32-bit divisions), else long long
__device__ inline void tg_attn_prefetch_lines(const char *kbase, long long kst, int lk, const char *vbase,
                                              long long vst, int lr, long long r0, I n) {
    for (I i = threadIdx.x; i < n; i += blockDim.x) {
        const long long r = r0 + i / lr;
        const int c = (int)(i % lr);
        const char *p = c < lk ? kbase + r * kst + c * 128 : vbase + r * vst + (c - lk) * 128;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
}
__device__ inline void tg_attn_prefetch_rows(const char *kbase, long long kst, long long kbytes, const char *vbase,
                                             long long vst, long long vbytes, long long r0, long long r1) {
    const int lk = (int)((kbytes + 127) / 128), lv = (int)((vbytes + 127) / 128);
    const long long n = (r1 - r0) * (lk + lv);
    if (n <= INT_MAX - 1024) tg_attn_prefetch_lines<int>(kbase, kst, lk, vbase, vst, lk + lv, r0, (int)n);
    else tg_attn_prefetch_lines<long long>(kbase, kst, lk, vbase, vst, lk + lv, r0, n);
}

// Host: t's rows are whole 16-byte units (elements contiguous along dim 0,
// data and every stride of a dim with more than one element 16-byte aligned).
inline bool tg_attn_rows16(const tg_tensor *t) {
    if (t->nb[0] != tg_type_size(t->type) || (uintptr_t)t->data % 16 != 0) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16 != 0) return false;
    return true;
}

// The decode kernels' queries: flat query f of a kv head's group of Hq/Hkv
// heads times T tokens is head hk group + f % group, token f / group; its q
// row (null for f >= nflat, past the queries), from the block's indices
// alone, so before the wait for the kernel before ...
__device__ inline const char *tg_attn_qrow(const tg_cuda_desc &q, long long f, long long nflat, long long group,
                                           long long hk, long long b) {
    return f < nflat ? tg_cuda_ptr(q, 0, hk * group + f % group, f / group, b) : nullptr;
}
// ... and the QN x D floats of those rows into qs (16-byte aligned), zeros
// for a null row, by the block's nthreads threads: with vec (F32 rows,
// contiguous, 16-byte aligned) as float4, NQ loads a thread in flight before
// its first store; else one float at a time (element d at d * nb0).
template <int NQ>
__device__ inline void tg_attn_load_q(float *qs, const char *const *qrow, int QN, int D, bool vec, long long nb0,
                                      int nthreads) {
    const int tid = threadIdx.x;
    if (vec) {
        const int n4 = QN * D / 4, d4 = D / 4;
        for (int i0 = tid; i0 < n4; i0 += NQ * nthreads) {
            float4 v[NQ];
#pragma unroll
            for (int u = 0; u < NQ; u++) {
                const int i = i0 + u * nthreads;
                const char *r = i < n4 ? qrow[i / d4] : nullptr;
                v[u] = r ? *(const float4 *)(r + 16 * (i % d4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < NQ; u++)
                if (i0 + u * nthreads < n4) ((float4 *)qs)[i0 + u * nthreads] = v[u];
        }
    } else {
        for (int i = tid; i < QN * D; i += nthreads) {
            const char *r = qrow[i / D];
            qs[i] = r ? *(const float *)(r + (long long)(i % D) * nb0) : 0.0f;
        }
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
