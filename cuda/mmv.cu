// mmv.cu - GEMV for mul_mat with N <= 8 columns (decode), see mmv.cuh.
//
// Decode reads every weight once per token, so the kernel is judged by how
// close it streams the weights to the copy bandwidth. A block of 128 threads
// takes R consecutive rows; its threads split the row along k in 16-byte
// chunks (8 F16/BF16 or 4 F32 values) and issue all their loads of U chunks
// per row before using any, so each thread has U*R 16-byte loads in flight
// (U*R = 8: 128 bytes). The few b columns come from L1/L2. F32 accumulation;
// each thread sums its chunks in order, then a fixed warp-shuffle and
// shared-memory reduction: the result does not depend on the grid, so a
// fused launch (several jobs, an epilogue) gives the same bits as the plain
// one.
//
// R grows with N (b's loads per weight byte stay bounded: R >= N/2) and with
// the row count (fewer, fuller blocks when the grid fills the GPU many times
// over). The grid spans the rows of every job (q, k and v in one launch):
// blocks [blk_end[j-1], blk_end[j]) take job j. (A warp-per-group kernel was
// kept beside it for comparison until it had lost at every 1.1B shape;
// bench/NOTES.md.) On sm_90 the kernel is launched by programmatic dependent
// launch: with weights no node of the graph writes, its first loads are in
// flight before it waits for the kernel before it (common.cuh tg_pdl_wait).
//
// With an rms_norm * w folded in (tg_cuda_mmv_norm, NORM) b is x * w, built
// as x and w are loaded, and each thread also sums the squares of its x
// values (chunk by chunk in index order, as its products); the block's
// reduction carries those sums beside the products' and the results are
// scaled by 1 / rms at the end. The norm costs the block no step before its
// first product (an earlier fold that summed x's squares first, in the norm
// kernel's order, was measured slower: bench/NOTES.md, 2026-12-03).
#include <climits>

#include "mmv.cuh"

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
// Launches reading at least this many weight bytes let the next kernel launch
// at their blocks' start (knob mmv_trigger 0). Measured (H100, session 61,
// bench/NOTES.md), this rule against after the loads everywhere: a 1.1B F16
// step (q/k/v 12.6 MB, o 8.4, gate/up 67, down 33.5: all early) 1,033.9 ->
// 991.1 us; the 125M's (q/k/v 3.5 MB and o 1.2 late, the rest early) 321.9 ->
// 317.9 us, where every GEMV early gave 323.8.
constexpr long long kMmvEarlyTriggerBytes = 4LL << 20;

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

struct mmv_args {
    tg_cuda_mmv p;
    long long blk_end[TG_CUDA_MMV_MAX_JOBS];  // prefix sums of the jobs' blocks
    int rows_per_block;                        // R, or R / 2 for swiglu (gate and up rows)
    int a_const;  // no node of the graph writes the weights: first loads before tg_pdl_wait
    int late;     // trigger the next kernel's launch after the loads, not at the block's start (knob mmv_trigger)
};

// grid: x over row groups of every job, y over output batches i2 + B2*i3.
// VEC: 16-byte loads (rows 16-byte aligned, K a multiple of the chunk).
// NORM (VEC only): b = rms_norm(x) * w folded in (p.norm).
// ROPE (VEC, R >= 2): rope and rope_kv_update folded in (p.rope, the q/k/v
// launch only: its angle math costs registers the other GEMVs do not pay).
template <typename TA, int NMAX, int R, bool VEC, bool NORM, bool ROPE = false>
__global__ void __launch_bounds__(kThreads, NMAX == 1 ? (R == 4 || NORM || ROPE ? 6 : 8) : 1) mmv_kernel(const __grid_constant__ mmv_args args) {
    constexpr int VE = 16 / sizeof(TA);
    constexpr int U = 8 / R > 0 ? 8 / R : 1;  // chunks per row loaded before use
    const tg_cuda_mmv &p = args.p;
    if (!args.late) tg_pdl_trigger();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long blk = blockIdx.x;
    int j = 0;
    if (!p.swiglu)
        while (j + 1 < p.njob && blk >= args.blk_end[j]) j++;
    const long long m0 = (blk - (j ? args.blk_end[j - 1] : 0)) * args.rows_per_block;
    const tg_cuda_desc &d0 = p.job[j].d;
    long long i2, i3;
    tg_cuda_mmv_batch(d0, &i2, &i3);
    const int N = (int)d0.ne[1];
    const long long K = p.job[0].a.ne[0];

    // row r of the block: job j's row m0 + r; for swiglu the first half are
    // gate rows (job 0), the second half the up rows (job 1) of the same m
    const TA *arow[R];
#pragma unroll
    for (int r = 0; r < R; r++) arow[r] = (const TA *)tg_cuda_mmv_row(p, j, m0, r, R, i2, i3);
    static_assert(VEC || !NORM, "the folded norm runs on the 16-byte path");
    const float *bcol[NMAX];  // b's columns; x's with NORM
#pragma unroll
    for (int n = 0; n < NMAX; n++)
        bcol[n] = NORM ? p.norm.x + (n < N ? n : 0) * K : (const float *)tg_cuda_ptr(p.b, 0, n < N ? n : 0, i2, i3);
    // folded rope (p.rope.D): the slots' angles and positions, and the block's
    // go/no-go inputs: bad, a fault in this thread's share of the position
    // check; prior (thread 0), the error record of earlier kernels
    static_assert(!ROPE || (VEC && R >= 2), "the folded rope: 16-byte path, row pairs");
    __shared__ float rope_cs[ROPE ? R * NMAX : 1][3];
    constexpr bool rope = ROPE;
    bool bad = false;
    int prior = TG_CUDA_ERR_NONE;
    auto rope_prep = [&]() {
        bad = tg_cuda_mmv_rope_prep(p, j, m0, threadIdx.x < R * NMAX ? (int)threadIdx.x : -1, NMAX, N, rope_cs);
    };
    float acc[R][NMAX], ssq[NMAX];  // ssq: NORM, the squares of x's column n
#pragma unroll
    for (int n = 0; n < NMAX; n++) {
        ssq[n] = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) acc[r][n] = 0.0f;
    }

    // the rope's angles: where the positions allow, while the first weight
    // loads are in flight (before the wait), else after the products
    if (!VEC && rope && p.rope.pos_pre) rope_prep();
    if (VEC) {
        const long long nchunk = K / VE;
        uint4 raw[U][R];
        auto load = [&](long long c0) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const long long c = c0 + (long long)u * kThreads;
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (c < nchunk) raw[u][r] = __ldg((const uint4 *)arow[r] + c);
            }
        };
        // constant weights: the first round's loads overlap the kernel before
        if (args.a_const) load(threadIdx.x);
        if (rope && p.rope.pos_pre) rope_prep();
        tg_pdl_wait();
        if (rope && threadIdx.x == 0) prior = tg_cuda_mmv_rope_prior(p.rope);
        for (long long c0 = threadIdx.x; c0 < nchunk; c0 += (long long)kThreads * U) {
            if (c0 != threadIdx.x || !args.a_const) load(c0);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const long long c = c0 + (long long)u * kThreads;
                if (c >= nchunk) break;
                float w[R][VE];
#pragma unroll
                for (int r = 0; r < R; r++) tg_cuda_cvt16(raw[u][r], w[r], TA());
                float g[NORM ? VE : 1];  // NORM: the norm's weights of the chunk
                if constexpr (NORM) {
#pragma unroll
                    for (int e = 0; e < VE; e += 4) {
                        const float4 v = __ldg((const float4 *)(p.norm.w + c * VE + e));
                        g[e] = v.x, g[e + 1] = v.y, g[e + 2] = v.z, g[e + 3] = v.w;
                    }
                }
#pragma unroll
                for (int n = 0; n < NMAX; n++) {
                    if (n >= N) break;
                    float x[VE];
#pragma unroll
                    for (int e = 0; e < VE; e += 4) {
                        const float4 v = __ldg((const float4 *)(bcol[n] + c * VE + e));
                        x[e] = v.x, x[e + 1] = v.y, x[e + 2] = v.z, x[e + 3] = v.w;
                    }
                    if constexpr (NORM) {
#pragma unroll
                        for (int e = 0; e < VE; e++) {
                            ssq[n] = fmaf(x[e], x[e], ssq[n]);
                            x[e] *= g[e];
                        }
                    }
#pragma unroll
                    for (int r = 0; r < R; r++)
#pragma unroll
                        for (int e = 0; e < VE; e++) acc[r][n] = fmaf(w[r][e], x[e], acc[r][n]);
                }
            }
        }
    } else {
        tg_pdl_wait();
        if (rope && threadIdx.x == 0) prior = tg_cuda_mmv_rope_prior(p.rope);
        for (long long k = threadIdx.x; k < K; k += kThreads) {
            float w[R];
#pragma unroll
            for (int r = 0; r < R; r++) w[r] = to_f32(arow[r][k]);
#pragma unroll
            for (int n = 0; n < NMAX; n++) {
                if (n >= N) break;
                const float x = bcol[n][k];
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][n] = fmaf(w[r], x, acc[r][n]);
            }
        }
    }

    if (args.late) tg_pdl_trigger();
    if (rope && !p.rope.pos_pre) rope_prep();  // positions a node of the graph writes: read after the wait
    // block reduction: warp sums, then the warps' partials in warp order
    // (NORM: x's squares after the products, at R * NMAX + n)
    constexpr int NS = R * NMAX + (NORM ? NMAX : 0);
    __shared__ float sh[kWarps][NS];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            const float v = tg_warp_sum(acc[r][n]);
            if (lane == 0) sh[warp][r * NMAX + n] = v;
        }
    if constexpr (NORM) {
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            const float v = tg_warp_sum(ssq[n]);
            if (lane == 0) sh[warp][R * NMAX + n] = v;
        }
    }
    // (with a folded rope the barrier is also the go/no-go of its cache writes:
    // every block checked the same positions, so either all write or none does)
    const bool go = rope ? !__syncthreads_or(bad || prior != TG_CUDA_ERR_NONE) : (__syncthreads(), true);
    auto total = [&](int i) {
        float t = sh[0][i];
#pragma unroll
        for (int w = 1; w < kWarps; w++) t += sh[w][i];
        return t;
    };
    // NORM: column n's 1 / rms (1 otherwise), the same in every block
    auto scale = [&](int n) { return NORM ? tg_cuda_rms_scale(total(R * NMAX + n), K, p.norm.eps) : 1.0f; };
    if constexpr (NORM) {
        // the norm's own results, for a reader after this launch: element e of
        // the N * K by thread e % 128 of block e / 128 (grid-stride)
        if (p.norm.y || p.norm.z) {
            const long long nthreads = (long long)gridDim.x * kThreads;
            for (long long e = (long long)blockIdx.x * kThreads + threadIdx.x; e < (long long)N * K; e += nthreads) {
                const int n = (int)(e / K);
                const float v = p.norm.x[e] * scale(n);
                if (p.norm.y) p.norm.y[e] = v;
                if (p.norm.z) p.norm.z[e] = v * p.norm.w[e - (long long)n * K];
            }
        }
    }
    if (p.swiglu) {
        for (int i = threadIdx.x; i < (R / 2) * NMAX; i += kThreads) {
            const int r = i / NMAX, n = i % NMAX;
            const long long m = m0 + r;
            if (n >= N || m >= p.job[0].a.ne[1]) continue;
            const float s = scale(n), g = total(r * NMAX + n) * s, u = total((r + R / 2) * NMAX + n) * s;
            tg_cuda_mmv_store_swiglu(p, m, n, i2, i3, g, u);
        }
        return;
    }
    const tg_cuda_mmv_job &jb = p.job[j];
    if (rope && !go) tg_cuda_mmv_rope_report(p.rope, prior);
    for (int i = threadIdx.x; i < R * NMAX; i += kThreads) {
        const int r = i / NMAX, n = i % NMAX;
        const long long m = m0 + r;
        if (n >= N || m >= jb.a.ne[1]) continue;
        const float v = total(i) * scale(n);
        if (rope)  // the pair partner: row m ^ 1 is row r ^ 1 of the block (R even, m0 a multiple of R)
            tg_cuda_mmv_store_rope(p, j, m, n, v, total((r ^ 1) * NMAX + n) * scale(n), rope_cs[i], go);
        else
            tg_cuda_mmv_store(jb, m, n, i2, i3, v);
    }
}

// Columns i1 + ne1 * (i2 + ne2 * i3) at one stride: merge them into dim 1.
bool merge_columns(tg_cuda_desc &d) {
    long long n = d.ne[1], st = d.nb[1];
    for (int i = 2; i < 4; i++) {
        if (d.ne[i] == 1) continue;
        if (n == 1) {
            n = d.ne[i], st = d.nb[i];
            continue;
        }
        if (d.nb[i] != st * n) return false;
        n *= d.ne[i];
    }
    d.ne[1] = n, d.nb[1] = st;
    d.ne[2] = d.ne[3] = 1;
    d.nb[2] = d.nb[3] = st * n;
    return true;
}

bool aligned16(const tg_cuda_desc &t) {
    if ((uintptr_t)t.data % 16 != 0) return false;
    for (int i = 1; i < 4; i++)
        if (t.ne[i] > 1 && t.nb[i] % 16 != 0) return false;
    return true;
}

struct mmv_launch {
    cudaStream_t st;
    long long batches;
    bool pdl;  // by programmatic dependent launch
};

template <typename TA, int NMAX, int R>
void launch_r(const mmv_launch &L, mmv_args &args, bool vec) {
    const dim3 grid((unsigned)args.blk_end[TG_CUDA_MMV_MAX_JOBS - 1], (unsigned)L.batches);
    if constexpr (R >= 2) {
        if (args.p.rope.D && args.p.norm.x)
            return tg_cuda_launch(L.pdl, L.st, mmv_kernel<TA, NMAX, R, true, true, true>, grid, kThreads, 0, args);
        if (args.p.rope.D)
            return tg_cuda_launch(L.pdl, L.st, mmv_kernel<TA, NMAX, R, true, false, true>, grid, kThreads, 0, args);
    }
    if (args.p.norm.x) tg_cuda_launch(L.pdl, L.st, mmv_kernel<TA, NMAX, R, true, true>, grid, kThreads, 0, args);
    else if (vec) tg_cuda_launch(L.pdl, L.st, mmv_kernel<TA, NMAX, R, true, false>, grid, kThreads, 0, args);
    else tg_cuda_launch(L.pdl, L.st, mmv_kernel<TA, NMAX, R, false, false>, grid, kThreads, 0, args);
}

// R in {1, 2, 4}, at least NMAX / 2 (and 2 for swiglu)
template <typename TA, int NMAX>
void launch_n(const mmv_launch &L, mmv_args &args, int R, bool vec) {
    if constexpr (NMAX <= 2) {
        if (R <= 1) return launch_r<TA, NMAX, 1>(L, args, vec);
    }
    if constexpr (NMAX <= 4) {
        if (R <= 2) return launch_r<TA, NMAX, 2>(L, args, vec);
    }
    launch_r<TA, NMAX, 4>(L, args, vec);
}

template <typename TA> void launch_t(const mmv_launch &L, mmv_args &args, int N, int R, bool vec) {
    if (N <= 1) launch_n<TA, 1>(L, args, R, vec);
    else if (N <= 2) launch_n<TA, 2>(L, args, R, vec);
    else if (N <= 4) launch_n<TA, 4>(L, args, R, vec);
    else launch_n<TA, 8>(L, args, R, vec);
}

}  // namespace

bool tg_cuda_mm_batches_to_gemm(const tg_tensor *mm) {
    const tg_tensor *a = mm->src[0];
    // (the GEMM paths merge dim-2 batches: sequences in dim 3 stay on the GEMV)
    if (a->ne[2] * a->ne[3] != 1 || mm->ne[2] == 1 || mm->ne[3] != 1 || tg_nbytes(a) < kBatchGemmMinWeightBytes)
        return false;
    tg_cuda_desc bm = tg_cuda_desc_of(mm->src[1]), dm = tg_cuda_desc_of(mm);
    return merge_columns(bm) && merge_columns(dm) && dm.ne[1] > 8;
}

bool tg_cuda_mmv_job_of(tg_backend *be, const tg_tensor *mm, tg_cuda_mmv_job *job, tg_cuda_desc *b) {
    const tg_tensor *a = mm->src[0], *tb = mm->src[1];
    const size_t ts = tg_type_size(a->type);  // a block's bytes for quantized types
    const bool quant = a->type == TG_TYPE_Q8_0 || a->type == TG_TYPE_Q4_0 || a->type == TG_TYPE_Q4_K;
    if (a->type != TG_TYPE_F16 && a->type != TG_TYPE_BF16 && a->type != TG_TYPE_F32 && !quant) return false;
    // quantized: not with the per-product kernel forced (knob mmq_kernel 1)
    if (quant && tg_cuda(be)->sig.mmq_kernel == 1) return false;
    if (tb->type != TG_TYPE_F32 || (tb->ne[0] > 1 && tb->nb[0] != 4) || (a->ne[0] > 1 && a->nb[0] != ts)) return false;
    if (mm->type != TG_TYPE_F32 || mm->nb[0] != 4) return false;
    job->a = tg_cuda_desc_of(a);
    job->d = tg_cuda_desc_of(mm);
    job->r = tg_cuda_desc_of(nullptr);
    job->r.data = nullptr;
    job->s = job->r;
    *b = tg_cuda_desc_of(tb);
    // weights shared by every batch: the batches are more columns (a batch of
    // sequences decoding one token each reads the weights once, not per
    // sequence); large weights with more columns than that go to the GEMM
    // paths (tg_cuda_mm_batches_to_gemm)
    if (tg_cuda_mm_batches_to_gemm(mm)) return false;
    if (a->ne[2] * a->ne[3] == 1 && mm->ne[2] * mm->ne[3] > 1) {
        tg_cuda_desc bm = *b, dm = job->d;
        if (merge_columns(bm) && merge_columns(dm) && dm.ne[1] <= 8) *b = bm, job->d = dm;
    }
    const long long blocks = a->ne[1];
    return job->d.ne[1] <= 8 && job->d.ne[2] * job->d.ne[3] <= 65535 && blocks <= INT_MAX;
}

bool tg_cuda_mmv_like(const tg_cuda_mmv_job &job, const tg_tensor *mm, const tg_tensor *t, tg_cuda_desc *out) {
    if (!tg_same_shape(mm, t)) return false;
    *out = tg_cuda_desc_of(t);
    if (job.d.ne[1] == mm->ne[1]) return true;  // columns not merged
    return merge_columns(*out) && out->ne[1] == job.d.ne[1];
}

tg_cuda_pdl_class tg_cuda_mmv_pdl_class(const tg_cuda_mmv &p) {
    if (p.swiglu) return TG_CUDA_PDL_MMV_SWIGLU;
    if (!p.job[0].r.data) return TG_CUDA_PDL_MMV_OTHER;
    return p.job[0].a.ne[0] > 4096 ? TG_CUDA_PDL_MMV_ADD_LONG : TG_CUDA_PDL_MMV_ADD;
}

namespace {

// The 16-byte path: K a multiple of a load's elements, every row (and b,
// or x and w when a norm is folded in) 16-byte aligned.
bool vec_path(const tg_cuda_mmv &p) {
    const size_t ts = tg_type_size(p.job[0].a.type);
    bool vec = p.job[0].a.ne[0] % (long long)(16 / ts) == 0;
    if (p.norm.x) vec = vec && (uintptr_t)p.norm.x % 16 == 0 && (uintptr_t)p.norm.w % 16 == 0;
    else vec = vec && aligned16(p.b);
    for (int j = 0; j < p.njob; j++) vec = vec && aligned16(p.job[j].a);
    return vec;
}

}  // namespace

bool tg_cuda_mmv_can_fold(const tg_cuda_mmv &p) {
    const tg_cuda_mmv_job &j0 = p.job[0];
    // quantized weights: b quantized from x * w (any alignment), scaled in the quantized GEMV's epilogue
    return p.norm.x && p.norm.w && (tg_type_is_quantized(j0.a.type) || vec_path(p)) && j0.d.ne[1] <= 8 &&
           j0.d.ne[2] * j0.d.ne[3] == 1;
}

bool tg_cuda_mmv_can_rope(const tg_cuda_mmv &p) {
    const tg_cuda_mmv_job &j0 = p.job[0];
    return p.njob == 3 && !p.swiglu && (tg_type_is_quantized(j0.a.type) || vec_path(p)) && j0.d.ne[1] <= 8 &&
           j0.d.ne[2] * j0.d.ne[3] == 1;
}

bool tg_cuda_mmv_compatible(const tg_cuda_mmv &p) {
    if (p.njob < 1 || p.njob > TG_CUDA_MMV_MAX_JOBS || (p.swiglu && p.njob != 2)) return false;
    const tg_cuda_mmv_job &j0 = p.job[0];
    for (int j = 1; j < p.njob; j++) {
        const tg_cuda_mmv_job &jj = p.job[j];
        if (jj.a.type != j0.a.type || jj.a.ne[0] != j0.a.ne[0]) return false;
        for (int i = 1; i < 4; i++)
            if (jj.d.ne[i] != j0.d.ne[i]) return false;
        for (int i = 2; i < 4; i++)
            if (jj.a.ne[i] != j0.a.ne[i]) return false;
        if (p.swiglu && jj.a.ne[1] != j0.a.ne[1]) return false;
    }
    return true;
}

tg_status tg_cuda_mmv_launch(tg_backend *be, const tg_cuda_mmv &p, const char *call) {
    tg_cuda_impl *impl = tg_cuda(be);
    const int N = (int)p.job[0].d.ne[1];
    const tg_type ta = p.job[0].a.type;
    if (p.norm.x && !tg_cuda_mmv_can_fold(p))  // the caller checks: not reached
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] rms_norm cannot be folded into this GEMV", call);
    if (p.rope.D && !tg_cuda_mmv_can_rope(p))  // the caller checks: not reached
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] rope cannot be folded into this GEMV", call);
    if (tg_type_is_quantized(ta)) return tg_cuda_mmvq_launch(be, p, call);
    impl->sig_last[TG_CUDA_SIG_MUL_MAT] = "gemv";
    const bool vec = vec_path(p);
    long long rows = 0;
    for (int j = 0; j < p.njob; j++) rows += p.job[j].a.ne[1];
    const long long batches = p.job[0].d.ne[2] * p.job[0].d.ne[3];
    const int sms = tg_cuda_sms(impl);
    // R: at least N / 2 (b's loads per weight byte); doubled while the grid
    // still fills the GPU twice (4 rows measured faster than 2 at every 1.1B
    // shape, also at 2048 rows: bench/NOTES.md); knob mmv_rows: forced (not
    // below that least)
    int R = N <= 2 ? 1 : N <= 4 ? 2 : 4;
    if ((p.swiglu || p.rope.D) && R < 2) R = 2;  // gate/up rows, rope pairs
    if (impl->sig.mmv_rows > 0) {
        const int k = impl->sig.mmv_rows <= 1 ? 1 : impl->sig.mmv_rows <= 2 ? 2 : 4;  // a kernel's R: 1, 2 or 4
        R = k > R ? k : R;
    } else
        while (R < 4 && rows * batches / (2 * R) >= 2LL * sms) R *= 2;
    mmv_args args;
    args.p = p;
    args.rows_per_block = p.swiglu ? R / 2 : R;
    const bool pdl = tg_cuda_pdl_for(impl, tg_cuda_mmv_pdl_class(p));
    args.a_const = pdl && tg_cuda_pdl_for(impl, TG_CUDA_PDL_MMV_PRE);
    // where the next kernel may launch (knob mmv_trigger): by default at the
    // block's start for launches of at least kMmvEarlyTriggerBytes of weights,
    // whose next kernel then finds the SMs as this one's blocks leave
    long long wbytes = 0;
    for (int j = 0; j < p.njob; j++) {
        const tg_cuda_desc &a = p.job[j].a;
        wbytes += a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3] * (long long)tg_type_size(ta);
    }
    const int trig = impl->sig.mmv_trigger;
    args.late = trig == 2 || (trig == 0 && wbytes < kMmvEarlyTriggerBytes);
    for (int j = 0; j < p.njob; j++) args.a_const = args.a_const && tg_cuda_graph_const(impl, p.job[j].a);
    long long groups = 0;
    for (int j = 0; j < (p.swiglu ? 1 : p.njob); j++) {
        groups += (p.job[j].a.ne[1] + args.rows_per_block - 1) / args.rows_per_block;
        args.blk_end[j] = groups;
    }
    for (int j = p.swiglu ? 1 : p.njob; j < TG_CUDA_MMV_MAX_JOBS; j++) args.blk_end[j] = groups;
    if (groups > INT_MAX || batches > 65535)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] GEMV grid of %lld x %lld blocks is too large", call, groups, batches);
    const mmv_launch L = {impl->stream, batches, pdl};
    switch (ta) {
        case TG_TYPE_F16: launch_t<__half>(L, args, N, R, vec); break;
        case TG_TYPE_BF16: launch_t<__nv_bfloat16>(L, args, N, R, vec); break;
        default: launch_t<float>(L, args, N, R, vec); break;
    }
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}
