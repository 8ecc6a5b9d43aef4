// attention_cluster.cu - attention decode in one kernel (sm_90 thread-block
// clusters): the flash-decoding splits of a query chunk are the blocks of one
// cluster, and they merge through each other's shared memory instead of a
// second kernel (cuda/attention.cu dispatches; the op is described there).
//
// Grid (S, query chunks x kv heads, B), clusters of S blocks along x. The
// blocks of a cluster serve the same QN queries (a GQA group's heads times
// the tokens, as in cuda/attention_split.cu) and split their rows: with nmax
// the most rows any of the queries reaches (min(p + 1, L), read on the device),
// block r takes rows [r c, (r + 1) c), c = ceil(nmax / S) rounded up to 16.
// So the split follows the positions, not the cache length: at 640 positions
// and 16 blocks, 13 blocks have 48 rows, one 16 and two none (one tile each
// at most, whatever the cache's length).
// Per block:
//   before the wait for the kernel before (programmatic dependent launch),
//     when no node of the graph writes the positions: the rows; where the
//     graph's only writer of the caches is the update at the attention's
//     own positions (tg_cuda_attention_rows_pre, the llama's decode graph),
//     the block's rows below its sequence's least position go into the
//     first tiles' shared memory by cp.async (in the first copy group):
//     those rows are not written while the update runs; the block's other
//     K and V rows are prefetched into L2 (only moves lines into the L2,
//     where every write of the kernel before lands too: nothing read early
//     is used)
//   tiles of TR rows of K and V go global -> shared by cp.async, up to nst
//     tiles in flight (stages); the first tiles' copies travel with the loads
//     of the query rows
//   scores   TPS = 128 / TR threads per row, 16-byte units of the K row,
//            QN queries from shared memory; summed over the row's lanes
//   softmax  running max m and sum l per query, as in the split kernel
//   values   a thread per pair of V columns and row group; QN accumulators
//            per value, summed over the row groups in a fixed order
// Merge by pushing: block r of the cluster owns a share of the QN x Dv
// outputs; every block stores its m, l and the sums of each share into that
// share's owner's shared memory (distributed shared memory), then one cluster
// barrier, after which each owner merges from its own shared memory only:
//   M = max_s m_s, w_s = exp(m_s - M), out = sum_s w_s o_s / sum_s w_s l_s
// (the combine kernel's formula and NaN rules: a query with rows gives o / l
// whatever l is, one without rows zeros; a row past a query's position
// never reaches its sums), over s in order: deterministic. Nothing is read
// from another block's shared memory, so no block waits on the others after
// the barrier. (Pulling instead, each block reading the others' sums after
// the barrier and a second barrier before leaving, measured ~3.4 us of
// remote loads and ~2.7 us of waiting in the blocks of a 1.1B llama's layer:
// bench/NOTES.md, session 25.)
#include <algorithm>
#include <climits>
#include <cooperative_groups.h>

#include "attention.cuh"
#include "ops.h"
#include "signature.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kMaxCluster = 16;                      // non-portable above 8: allowed at backend creation
constexpr int kStages = 4;                           // K/V tiles in flight (at most)
// all stages of K and V tiles, and the most a launch asks for with the rest
// (q rows, scores, the inbox: <= 24 KB, cl_smem). A launch takes only the
// stages its blocks can use: one tile (auto's choice) at most ~46 KB (F16
// D 128, QN 8), so that two or more blocks fit an SM; forced on a 1.1B layer
// at L 4096 (3 stages) ~116 KB, one block per SM.
constexpr size_t kTileBytes = 104 * 1024;
constexpr size_t kMaxSmem = kTileBytes + 24 * 1024;

struct cl_args {
    tg_cuda_desc q, k, v, pos, out;
    float scale;
    int group;    // Hq / Hkv
    int nqc;      // query chunks per kv head
    int TR;       // rows per tile
    int nst;      // tile buffers (stages), 1 .. kStages
    int kpb;      // bytes per K row in shared memory (padded: bank-conflict free scoring)
    int vpb;      // bytes per V row in shared memory
    int pos_pre;  // no node of the graph writes the positions
    int q_vec;    // q's rows F32, contiguous and 16-byte aligned: float4 loads
    int rows_pre; // the rows below a sequence's least position may be read before the wait
                  // (tg_cuda_attention_rows_pre; implies pos_pre)
};

// Byte offsets into the dynamic shared memory (each 16-byte aligned).
struct cl_layout {
    size_t qs, tiles, ps, red, nrow, racc, inbox, inml, total;
};
__host__ __device__ inline size_t al16(size_t x) { return (x + 15) & ~(size_t)15; }
__host__ __device__ inline int row_groups(long long Dv) {
    const int pairs = (int)(Dv / 2);
    return pairs >= kThreads ? 1 : kThreads / pairs;
}
// outputs (QN x Dv) each block of a cluster of S merges
__host__ __device__ inline int share(int QN, long long Dv, int S) { return (int)((QN * Dv + S - 1) / S); }
__host__ __device__ inline cl_layout cl_smem(int QN, long long D, long long Dv, int TR, int nst, int kpb, int vpb,
                                             int S) {
    cl_layout l;
    l.qs = 0;
    l.tiles = al16(l.qs + (size_t)QN * D * 4);
    l.ps = l.tiles + (size_t)nst * TR * (kpb + vpb);
    l.red = al16(l.ps + (size_t)QN * TR * 4);
    l.nrow = al16(l.red + (size_t)2 * QN * kWarps * 4);
    // the row groups' sums reuse the tiles' space once the tiles are done
    // (callers check that it is large enough)
    l.racc = l.tiles;
    l.inbox = al16(l.nrow + (size_t)QN * 4);
    l.inml = al16(l.inbox + (size_t)S * share(QN, Dv, S) * 4);
    l.total = al16(l.inml + (size_t)S * 2 * QN * 4);
    return l;
}

// Cluster barriers and distributed shared memory exist from sm_90: a build
// for older architectures compiles the kernel to a trap, and the backend never
// launches it there (tg_cuda_attention_cluster_init reports the binary's
// version; backend.cu then leaves clusters off).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TG_CLUSTER_CODE 0
#else
#define TG_CLUSTER_CODE 1
#endif

#if TG_CLUSTER_CODE
__device__ inline float2 pair_f32(const float *p) { return *(const float2 *)p; }
__device__ inline float2 pair_f32(const __half *p) { return __half22float2(*(const __half2 *)p); }
__device__ inline float2 pair_f32(const __nv_bfloat16 *p) { return __bfloat1622float2(*(const __nv_bfloat162 *)p); }

// rows x units 16-byte copies of rows starting at src (stride sst bytes) into
// dst (stride dst_stride bytes) by cp.async: each thread a fixed unit of
// every (kThreads / units)-th row when units divides kThreads
__device__ inline void copy_rows(unsigned char *dst, int dst_stride, const char *src, long long sst, int rows,
                                 int units) {
    const int tid = threadIdx.x;
    if (kThreads % units == 0) {
        const int step = kThreads / units, u = tid % units;
        for (int r = tid / units; r < rows; r += step) tg_cp_async16(dst + r * dst_stride + u * 16, src + r * sst + u * 16);
    } else {
        for (int i = tid; i < rows * units; i += kThreads) {
            const int r = i / units, u = i - r * units;
            tg_cp_async16(dst + r * dst_stride + u * 16, src + r * sst + u * 16);
        }
    }
}

__device__ inline void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ inline void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
#endif

template <typename T, int QN> __global__ void __launch_bounds__(kThreads) cluster_kernel(cl_args A) {
#if !TG_CLUSTER_CODE
    __trap();
#else
    constexpr int VE = 16 / sizeof(T);
    extern __shared__ __align__(16) unsigned char smem[];
    cg::cluster_group cluster = cg::this_cluster();
    // every block of the cluster has started before any writes another's
    // shared memory: this arrival, and the wait before the first such write
    cluster_arrive_relaxed();
    const int S = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const long long D = A.q.ne[0], T_ = A.q.ne[2], L = A.k.ne[2], Dv = A.v.ne[0];
    const int TR = A.TR, NST = A.nst, TPS = kThreads / TR, ku = (int)(D / VE), vu = (int)(Dv / VE);
    const int pairs = (int)(Dv / 2), RG = row_groups(Dv), SH = share(QN, Dv, S);
    const cl_layout lay = cl_smem(QN, D, Dv, TR, NST, A.kpb, A.vpb, S);
    float *qs = (float *)(smem + lay.qs), *ps = (float *)(smem + lay.ps), *red = (float *)(smem + lay.red);
    int *nrow = (int *)(smem + lay.nrow);
    float *racc = (float *)(smem + lay.racc);
    float *inbox = (float *)(smem + lay.inbox), *inml = (float *)(smem + lay.inml);
    unsigned char *tiles = smem + lay.tiles;
    const size_t tile_bytes = (size_t)TR * (A.kpb + A.vpb);
    tg_pdl_trigger();
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int qc = blockIdx.y % A.nqc;
    const long long hk = blockIdx.y / A.nqc, b = blockIdx.z;
    const long long nflat = (long long)A.group * T_;
    const char *kbase = tg_cuda_ptr(A.k, 0, hk, 0, b), *vbase = tg_cuda_ptr(A.v, 0, hk, 0, b);
    const long long kst = A.k.nb[2], vst = A.v.nb[2];

    // the block's q rows (before the wait: block indices only; by warp 1,
    // beside warp 0's position loads)
    __shared__ const char *s_qrow[QN];
    if (tid >= 32 && tid < 32 + QN) s_qrow[tid - 32] = tg_attn_qrow(A.q, (long long)qc * QN + tid - 32, nflat, A.group, hk, b);
    // the block's rows [jb, je): every block of the cluster sees the same nrow
    long long jb = 0, je = 0, jpre = 0;  // [jb, jpre): copies issued before the wait
    auto rows_and_range = [&]() {
        if (tid < QN) {
            const long long f = (long long)qc * QN + tid;
            int n = 0;
            if (f < nflat) {
                const int p = *(const int *)tg_cuda_ptr(A.pos, f / A.group, b, 0, 0);
                n = p < 0 ? 0 : ((long long)p < L ? p + 1 : (int)L);
            }
            nrow[tid] = n;
        }
        __syncthreads();
        int nmax = 0;
#pragma unroll
        for (int qq = 0; qq < QN; qq++) nmax = max(nmax, nrow[qq]);
        long long c = (nmax + S - 1) / S;
        c = (c + 15) / 16 * 16;
        jb = min((long long)rank * c, (long long)nmax), je = min(jb + c, (long long)nmax);
    };
    // rows [r0, r1) of tile t (block rows [jb + t TR, ...)) into stage t % NST
    auto copy_tile_rows = [&](int t, long long r0, long long r1) {
        if (r1 <= r0) return;
        const long long j0 = jb + (long long)t * TR;
        unsigned char *kt = tiles + (size_t)(t % NST) * tile_bytes + (r0 - j0) * A.kpb;
        unsigned char *vt = tiles + (size_t)(t % NST) * tile_bytes + (size_t)TR * A.kpb + (r0 - j0) * A.vpb;
        copy_rows(kt, A.kpb, kbase + r0 * kst, kst, (int)(r1 - r0), ku);
        copy_rows(vt, A.vpb, vbase + r0 * vst, vst, (int)(r1 - r0), vu);
    };
    if (A.pos_pre) {
        rows_and_range();
        // rows no node of the graph writes: those below every position of
        // sequence b (its new rows are at its positions), in the tiles that
        // go out first (the first copy group takes them: no commit here)
        if (A.rows_pre) {
            const long long pmin = tg_attn_least_pos(A.pos, T_, b);
            jpre = max(jb, min(min(pmin, je), jb + (long long)max(NST - 1, 1) * TR));
            for (int t = 0; jb + (long long)t * TR < jpre; t++)
                copy_tile_rows(t, jb + (long long)t * TR, min(jb + (long long)(t + 1) * TR, jpre));
        }
        tg_attn_prefetch_rows(kbase, kst, D * (long long)sizeof(T), vbase, vst, Dv * (long long)sizeof(T), max(jb, jpre), je);
    }
    tg_pdl_wait();
    if (!A.pos_pre) rows_and_range();

    // tile t into stage t % NST, less the rows issued before the wait (a
    // commit group even when there is none, so that the wait below counts
    // groups alike)
    const int ntile = (int)((je - jb + TR - 1) / TR);
    auto issue = [&](int t) {
        if (t < ntile) {
            const long long j0 = jb + (long long)t * TR;
            copy_tile_rows(t, max(j0, jpre), min(j0 + TR, je));
        }
        tg_cp_async_commit();
    };
    for (int t = 0; t < NST - 1; t++) issue(t);
    // the block's queries (zeros past them; s_qrow: the barrier in rows_and_range)
    tg_attn_load_q<2>(qs, s_qrow, QN, (int)D, A.q_vec, A.q.nb[0], kThreads);

    const int sr = tid / TPS, sp = tid % TPS;         // scoring: the thread's row and part
    const int vpair = tid % pairs, vg = tid / pairs;  // values: column pair and row group
    const bool v_active = vg < RG;
    float acc[QN][2], m_run[QN], l_run[QN];
#pragma unroll
    for (int qq = 0; qq < QN; qq++) acc[qq][0] = acc[qq][1] = 0.0f, m_run[qq] = -INFINITY, l_run[qq] = 0.0f;

    for (int it = 0; it < ntile; it++) {
        const long long j0 = jb + (long long)it * TR;
        const int tn = (int)min((long long)TR, je - j0);
        // the stage it fills was last read before the previous tile's final barrier
        issue(it + NST - 1);
        switch (NST) {  // until tile it has landed: NST - 1 later groups may still be in flight
            case 1: tg_cp_async_wait<0>(); break;
            case 2: tg_cp_async_wait<1>(); break;
            case 3: tg_cp_async_wait<2>(); break;
            default: tg_cp_async_wait<3>(); break;
        }
        __syncthreads();  // the tile (and, the first time, qs) visible to every thread
        const unsigned char *kt = tiles + (size_t)(it % NST) * tile_bytes, *vt = kt + (size_t)TR * A.kpb;
        float sc[QN];
#pragma unroll
        for (int qq = 0; qq < QN; qq++) sc[qq] = 0.0f;
        if (sr < tn) {
            const unsigned char *kr = kt + sr * A.kpb;
            for (int u = sp; u < ku; u += TPS) {
                float kf[VE];
                tg_cuda_cvt16(*(const uint4 *)(kr + u * 16), kf, T());
#pragma unroll
                for (int qq = 0; qq < QN; qq++)
#pragma unroll
                    for (int e = 0; e < VE; e += 4) {
                        const float4 qv = *(const float4 *)(qs + qq * D + u * VE + e);
                        sc[qq] = fmaf(qv.x, kf[e], sc[qq]);
                        sc[qq] = fmaf(qv.y, kf[e + 1], sc[qq]);
                        sc[qq] = fmaf(qv.z, kf[e + 2], sc[qq]);
                        sc[qq] = fmaf(qv.w, kf[e + 3], sc[qq]);
                    }
            }
        }
        // the row's parts sit in TPS adjacent lanes: every one of them gets the sum
        for (int off = 1; off < TPS; off <<= 1)
#pragma unroll
            for (int qq = 0; qq < QN; qq++) sc[qq] += __shfl_xor_sync(0xffffffffu, sc[qq], off);
        float corr[QN];
        tg_attn_tile_softmax<QN, kWarps>(sc, sr, sp == 0, tn, j0, nrow, A.scale, ps, TR, red, warp, lane, m_run, l_run,
                                         corr);
        if (v_active) {
#pragma unroll
            for (int qq = 0; qq < QN; qq++) acc[qq][0] *= corr[qq], acc[qq][1] *= corr[qq];
            const T *vc = (const T *)vt + 2 * vpair;
#pragma unroll 4
            for (int j = vg; j < tn; j += RG) {
                const float2 vv = pair_f32((const T *)((const unsigned char *)vc + j * A.vpb));
#pragma unroll
                for (int qq = 0; qq < QN; qq++) {
                    // p = 0: a row past this query's position (another query of the
                    // block reads it), whose V must not reach this sum even if NaN
                    const float p = ps[qq * TR + j];
                    if (p != 0.0f) acc[qq][0] = fmaf(p, vv.x, acc[qq][0]), acc[qq][1] = fmaf(p, vv.y, acc[qq][1]);
                }
            }
        }
        __syncthreads();  // ps, red and this tile's buffer are reused
    }

    // the block's sums: row groups added in a fixed order
    if (v_active)
#pragma unroll
        for (int qq = 0; qq < QN; qq++) {
            float *r = racc + ((long long)vg * QN + qq) * Dv + 2 * vpair;
            r[0] = acc[qq][0], r[1] = acc[qq][1];
        }
    __syncthreads();
    // push: block r of the cluster merges outputs [r SH, (r + 1) SH) of the
    // QN x Dv; this block's m, l and sums go into slot `rank` of each owner's
    // inbox (stores into distributed shared memory), after the wait that
    // pairs with the arrival at the start
    cluster_wait();
    for (long long i = tid; i < QN * Dv; i += kThreads) {
        float o = racc[i];
        for (int g = 1; g < RG; g++) o += racc[(long long)g * QN * Dv + i];
        const int owner = (int)(i / SH);
        cluster.map_shared_rank(inbox, owner)[rank * SH + (int)(i - (long long)owner * SH)] = o;
    }
    if (tid < S * QN) {
        const int owner = tid / QN, qq = tid % QN;
        float *dst = cluster.map_shared_rank(inml, owner) + rank * 2 * QN;
        dst[qq] = m_run[qq], dst[QN + qq] = l_run[qq];
    }
    cluster.sync();  // every push visible in its owner's shared memory

    // merge this block's share, in the order of the splits (deterministic):
    // M = max_s m_s, w_s = exp(m_s - M), out = sum_s w_s o_s / sum_s w_s l_s
    for (int j = tid; j < SH; j += kThreads) {
        const long long i = (long long)rank * SH + j;
        if (i >= QN * Dv) break;
        const int qq = (int)(i / Dv);
        const long long f = (long long)qc * QN + qq, dv = i % Dv;
        if (f >= nflat) continue;
        float o = 0.0f;
        if (nrow[qq] > 0) {
            float M = -INFINITY;
            for (int s2 = 0; s2 < S; s2++) M = fmaxf(M, inml[s2 * 2 * QN + qq]);
            float l = 0.0f;
            for (int s2 = 0; s2 < S; s2++) {
                const float m = inml[s2 * 2 * QN + qq];
                const float w = M != -INFINITY && m != -INFINITY ? expf(m - M) : 0.0f;
                l += w * inml[s2 * 2 * QN + QN + qq];  // a NaN l_s stays in the sum
                if (m != -INFINITY) o += w * inbox[s2 * SH + j];
            }
            o /= l;  // zeros only for a query without rows: 0/0 and NaN scores stay NaN
        }
        *(float *)tg_cuda_ptr(A.out, dv, hk * A.group + f % A.group, f / A.group, b) = o;
    }
    // no block reads another's shared memory after the cluster barrier: each
    // may leave as soon as its share is written
#endif
}

template <typename T, int QN> cudaError_t allow() {
    cudaError_t e = cudaFuncSetAttribute(cluster_kernel<T, QN>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(cluster_kernel<T, QN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kMaxSmem);
    return e;
}
template <typename T> cudaError_t allow_t() {
    cudaError_t e = allow<T, 1>();
    if (e == cudaSuccess) e = allow<T, 2>();
    if (e == cudaSuccess) e = allow<T, 4>();
    if (e == cudaSuccess) e = allow<T, 8>();
    return e;
}

template <typename T, int QN>
tg_status launch(tg_backend *be, const cl_args &A, dim3 grid, int S, size_t smem) {
    tg_cuda_impl *impl = tg_cuda(be);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = impl->stream;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)S, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at, cfg.numAttrs = tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN) ? 2 : 1;
    (void)cudaLaunchKernelEx(&cfg, cluster_kernel<T, QN>, A);
    TG_CUDA_LAUNCHED(be, "attention");
    return TG_OK;
}
template <typename T> tg_status launch_qn(tg_backend *be, int QN, const cl_args &A, dim3 grid, int S, size_t smem) {
    switch (QN) {
        case 1: return launch<T, 1>(be, A, grid, S, smem);
        case 2: return launch<T, 2>(be, A, grid, S, smem);
        case 4: return launch<T, 4>(be, A, grid, S, smem);
        default: return launch<T, 8>(be, A, grid, S, smem);
    }
}

}  // namespace

cudaError_t tg_cuda_attention_cluster_init(int *max_cluster) {
    *max_cluster = 0;
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, cluster_kernel<float, 8>);
    if (e != cudaSuccess) return e;
    if (fa.binaryVersion < 90 || fa.ptxVersion < 90) return cudaErrorNotSupported;  // the trap build
    e = allow_t<float>();
    if (e == cudaSuccess) e = allow_t<__half>();
    if (e == cudaSuccess) e = allow_t<__nv_bfloat16>();
    if (e != cudaSuccess) return e;
    // the instantiation with the most registers, at the most shared memory any launch asks for
    for (int S = kMaxCluster; S >= 2 && !*max_cluster; S /= 2) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)S), cfg.blockDim = dim3(kThreads), cfg.dynamicSmemBytes = kMaxSmem;
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = (unsigned)S, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
        cfg.attrs = &at, cfg.numAttrs = 1;
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, cluster_kernel<float, 8>, &cfg) == cudaSuccess && n >= 1)
            *max_cluster = S;
        (void)cudaGetLastError();
    }
    return cudaSuccess;
}

bool tg_cuda_attention_clusters(tg_backend *be) { return tg_cuda(be)->cluster_max >= 2; }

bool tg_cuda_attention_cluster(tg_backend *be, const tg_tensor *dst, long long nsplit, int QN, long long nqc,
                               tg_status *st, bool dry) {
    tg_cuda_impl *impl = tg_cuda(be);
    const int knob = impl->sig.attn_split;
    if (impl->cluster_max < 2 || knob == 1 || nsplit < 2) return false;
    const tg_tensor *tq = dst->src[0], *tk = dst->src[1], *tv = dst->src[2], *tp = dst->src[3];
    // the caller checked: one type, 16-byte rows, D, Dv <= 256, the grid's y and z
    const int sz = (int)tg_type_size(tk->type);
    const long long D = tq->ne[0], B = tq->ne[3], Hkv = tk->ne[1], L = tk->ne[2], Dv = tv->ne[0];
    const long long group = tq->ne[1] / Hkv;
    // blocks per cluster: enough clusters x S to cover the SMs once, 2 to cluster_max
    const long long base = nqc * Hkv * B, sms = tg_cuda_sms(impl);
    const int smax = impl->sig.attn_cluster ? std::min(impl->sig.attn_cluster, impl->cluster_max) : impl->cluster_max;
    int S = 2;
    while (S < smax && base * S < sms) S *= 2;
    // the largest tile of which two fit the budget (K rows padded so that the
    // TPS lanes of a row read distinct banks), then as many stages as fit, up
    // to kStages and to the tiles a block can have (the cache's rows over S)
    int TR = 64, kpb = 0, vpb = (int)(Dv * sz);
    for (; TR >= 16; TR /= 2) {
        const int tps = kThreads / TR;
        kpb = (int)(D * sz) + (tps < 8 ? 16 * tps : 0);
        if (2 * (size_t)TR * (kpb + vpb) <= kTileBytes) break;
    }
    if (TR < 16 || (size_t)row_groups(Dv) * QN * Dv * 4 > (size_t)TR * (kpb + vpb)) return false;
    const long long rows_max = ((L + S - 1) / S + 15) / 16 * 16;
    const long long tiles_max = (rows_max + TR - 1) / TR;
    const long long nst =
        std::min<long long>({(long long)kStages, (long long)(kTileBytes / ((size_t)TR * (kpb + vpb))), tiles_max});
    // auto: where every row a block can have fits one tile (one round trip
    // to memory at any position: a cache of 512 rows, 11.8 against 13.3 us
    // for split and combine; llama-recall's decode step -3 to -4.5 us,
    // session 25), or two tiles of a small cache (at most 2 MiB of K and V
    // rows per layer): the 125M llama (D 64, 4 kv heads, F16) at
    // tinygml-run's 1152 rows, 1.2 MB, step span 314 against 333 us. The
    // 1.1B llama (D 64, 8 kv heads) at 1152 rows, 2.4 MB and also two tiles
    // of 64, was 3-4 us per step slower with this kernel (session 27), and
    // at 4096 rows (8 tiles) 27.7 against 21.8 us (session 25). Two points
    // fit this rule; the cause of the 1.1B's loss is not known
    // (bench/NOTES.md).
    const double kv_bytes = (double)L * Hkv * B * (D + Dv) * sz;
    if (knob != 2 && (tiles_max > 2 || (tiles_max == 2 && kv_bytes > 2.0 * 1024 * 1024))) return false;
    const cl_layout lay = cl_smem(QN, D, Dv, TR, (int)std::max(1LL, nst), kpb, vpb, S);
    if (lay.total > kMaxSmem) return false;
    if (dry) return true;
    cl_args A;
    A.q = tg_cuda_desc_of(tq), A.k = tg_cuda_desc_of(tk), A.v = tg_cuda_desc_of(tv), A.pos = tg_cuda_desc_of(tp);
    A.out = tg_cuda_desc_of(dst);
    A.scale = tg_get_params<float>(dst);
    A.group = (int)group, A.nqc = (int)nqc, A.TR = TR, A.nst = (int)std::max(1LL, nst), A.kpb = kpb, A.vpb = vpb;
    A.pos_pre = tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN) && tg_cuda_graph_const(impl, A.pos);
    A.rows_pre = A.pos_pre && tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN_PRE) && tg_cuda_attention_rows_pre(impl, dst);
    A.q_vec = tq->type == TG_TYPE_F32 && tg_attn_rows16(tq);
    const dim3 grid((unsigned)S, (unsigned)(nqc * Hkv), (unsigned)B);
    switch (tk->type) {
        case TG_TYPE_F32: *st = launch_qn<float>(be, QN, A, grid, S, lay.total); break;
        case TG_TYPE_F16: *st = launch_qn<__half>(be, QN, A, grid, S, lay.total); break;
        default: *st = launch_qn<__nv_bfloat16>(be, QN, A, grid, S, lay.total); break;
    }
    impl->sig_last[TG_CUDA_SIG_ATTN] = A.rows_pre ? "cluster/pre" : "cluster";
    return true;
}
