// mul_mat_quant.cu - mul_mat with quantized weights a (Q8_0, Q4_0, Q4_K) and
// a float b (see mul_mat.cuh, docs/ops.md "Quantized types").
//
// Decode (at most 8 columns; sequences sharing weights of 1 MiB or more count
// as columns, tg_cuda_mm_batches_to_gemm): b is quantized once per call into
// the backend's scratch as 8-bit blocks of 32 (int8 q, F32 scale d and d * sum(q): ggml's
// Q8_1 idea), then a GEMV kernel reads every weight block once and takes the
// block dot products with __dp4a (4 int8 products per instruction), scaling
// in F32. A weight read as floats would need ~4 instructions per element
// (unpack, convert, subtract, FMA), which at HBM speed makes the kernel
// issue-bound for Q4_0; the int8 dot product needs about one per 4 elements.
// (That variant, F32 b with the weights widened to floats in registers,
// measured 2.5x slower and was removed in session 30: bench/NOTES.md.)
//   A unit is what one lane decodes at a time: a Q8_0 or Q4_0 block (32
// elements), a pair of Q4_K sub-blocks (64 elements: one 32-byte group of qs,
// two 16-byte loads). Q8_0/Q4_0 blocks are 34/18 bytes, only 2-byte aligned:
// their quants are read with aligned 4-byte loads and funnel shifts
// (tg_cuda_words_a2). Lanes of a warp take consecutive units, so a warp's
// loads cover a contiguous stretch of the row. Long rows (>= 128 units) are
// split over 2 or 4 warps of the block (a shared-memory sum at the end) so
// that a 2048-row matrix still gives every SM many warps; R rows per warp
// (1, 1, 2, 4 for N up to 1, 2, 4, 8) share each b load.
//
//   Two GEMV kernels: the fused-job kernel (mmvq_kernel, behind
// tg_cuda_mmvq_launch) takes every product with F32 b of unit stride, alone
// or fused (cuda/mmv.cuh's jobs: q/k/v sharing b, gate/up with swiglu, the
// residual add), b quantized once per launch; the per-product kernel
// (mmq_vec_kernel) takes the other b layouts and knob mmq_kernel = 1.
//
// Prefill (N > 8): a dequantized to F16 and tensor-core GEMMs,
// cuda/mul_mat_quant_prefill.cu. The units a lane decodes (tg_cuda_qunit,
// tg_cuda_load_unit) are in cuda/quant.cuh, shared with it.
#include <algorithm>
#include <climits>

#include "mmv.cuh"
#include "mul_mat.cuh"
#include "ops.h"
#include "quant.cuh"
#include "signature.cuh"

namespace {

constexpr int kWarps = 4;  // warps per block of the GEMV kernel

// ---------------------------------------------------------------------------
// b quantized to 8 bits: column c = n + N * (i2 + B2 * i3) keeps its K int8
// at qs + c * K and its K / 32 pairs (d, d * sum of the block's q) at
// ds + c * K / 32. One warp per block of 32, a lane per element. A block with
// a NaN or inf gets d = NaN, so the products it enters are NaN.
// With a folded norm (nm.x, the GEMV's tg_cuda_mmv_norm; b is then not read)
// the values quantized are x * w, and each block's sum of x's squares (the
// warp's shuffle tree) goes to ss[blk]: the GEMV adds a column's K / 32 sums
// for its scale (mmvq_kernel).
__global__ void quantize_b_kernel(tg_cuda_desc b, int8_t *qs, float2 *ds, long long nblk, long long kb,
                                  tg_cuda_mmv_norm nm = {}, float *ss = nullptr) {
    tg_pdl_trigger();
    tg_pdl_wait();
    const int lane = threadIdx.x % 32;
    const long long nw = (long long)gridDim.x * blockDim.x / 32;
    for (long long blk = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; blk < nblk; blk += nw) {
        const long long col = blk / kb, j = blk % kb;
        if (nm.x) {  // one batch of contiguous columns of K = 32 kb
            const float x = nm.x[blk * 32 + lane], sq = tg_warp_sum(x * x);
            if (lane == 0) ss[blk] = sq;
            tg_cuda_q8_block(x * nm.w[j * 32 + lane], qs + blk * 32 + lane, ds + blk);
            continue;
        }
        const long long n = col % b.ne[1], i2 = (col / b.ne[1]) % b.ne[2], i3 = col / (b.ne[1] * b.ne[2]);
        const float x = tg_cuda_load(tg_cuda_ptr(b, j * 32 + lane, n, i2, i3), b.type);
        tg_cuda_q8_block(x, qs + blk * 32 + lane, ds + blk);
    }
}

// grid: x over groups of (kWarps / wpr) * R rows, y over output batches
// i2 + B2 * i3. wpr warps share a row (lanes over its units). b comes
// quantized (bq, bd) and the block dots are __dp4a.
template <tg_type T, int NMAX, int R>
__global__ void __launch_bounds__(32 * kWarps) mmq_vec_kernel(tg_cuda_desc a, const int8_t *bq, const float2 *bd,
                                                              tg_cuda_desc d, int N, int wpr) {
    constexpr int SUB = tg_cuda_qunit<T>::subs, UE = 32 * SUB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % wpr;
    const long long M = a.ne[1], K = a.ne[0], kb = K / 32;
    const int nu = (int)(K / UE);
    const long long m0 = ((long long)blockIdx.x * (kWarps / wpr) + warp / wpr) * R;
    const long long i2 = blockIdx.y % d.ne[2], i3 = blockIdx.y / d.ne[2];
    const long long a2 = i2 / (d.ne[2] / a.ne[2]), a3 = i3 / (d.ne[3] / a.ne[3]);
    const long long c0 = (long long)N * blockIdx.y;  // b's first column for this batch (quantized b)
    const char *arow[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        arow[r] = a.data + (m0 + r < M ? m0 + r : M - 1) * a.nb[1] + a2 * a.nb[2] + a3 * a.nb[3];
    float acc[R][NMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) acc[r][n] = 0.0f;
    if (m0 < M) {
#pragma unroll 2
        for (int u = lane + 32 * part; u < nu; u += 32 * wpr) {
            tg_cuda_qunit<T> w[R];
#pragma unroll
            for (int r = 0; r < R; r++) tg_cuda_load_unit<T>(arow[r], u, w[r]);
#pragma unroll
            for (int n = 0; n < NMAX; n++) {
                if (n >= N) break;
                const int8_t *xq = bq + (c0 + n) * K + (long long)u * UE;
                const float2 *xd = bd + (c0 + n) * kb + (long long)u * SUB;
#pragma unroll
                for (int s = 0; s < SUB; s++) {
                    const uint4 x0 = *(const uint4 *)(xq + 32 * s), x1 = *(const uint4 *)(xq + 32 * s + 16);
                    const int x[8] = {(int)x0.x, (int)x0.y, (int)x0.z, (int)x0.w,
                                      (int)x1.x, (int)x1.y, (int)x1.z, (int)x1.w};
                    const float2 ds = xd[s];
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        int p[4];
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            p[i] = __dp4a(w[r].q[8 * s + i + 4], x[i + 4], __dp4a(w[r].q[8 * s + i], x[i], 0));
                        const int dot = (p[0] + p[1]) + (p[2] + p[3]);
                        acc[r][n] += w[r].d[s] * ds.x * (float)dot - w[r].m[s] * ds.y;
                    }
                }
            }
        }
    }
    // a row's sum: each warp's, then over the wpr warps of the row
    __shared__ float red[kWarps][R][NMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            const float s = tg_warp_sum(acc[r][n]);
            if (lane == 0) red[warp][r][n] = s;
        }
    if (wpr > 1) __syncthreads();  // wpr is the same for the whole block
    if (part != 0 || lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            if (n >= N || m0 + r >= M) continue;
            float s = red[warp][r][n];
            for (int p = 1; p < wpr; p++) s += red[warp + p][r][n];
            *(float *)tg_cuda_ptr(d, m0 + r, n, i2, i3) = s;
        }
}

// ---------------------------------------------------------------------------
// The fused-job GEMV (cuda/mmv.cuh's tg_cuda_mmv: up to 3 products sharing b,
// the gate/up pair with swiglu, an add epilogue), with b quantized once per
// launch. Every decode mul_mat with F32 b takes it, fused or not, so a fused
// launch computes the unfused bits: a row's units are summed by the same
// lanes in the same order whatever R, U, the job count or the grid (wpr
// depends on K only).
//   A group is R rows (swiglu: R/2 gate rows and the same up rows) taken by
// wpr warps; each lane loads U units of each of its R rows before it uses any
// (U * R units in flight per lane; R doubles while the grid stays large).
struct mmvq_args {
    tg_cuda_mmv p;
    long long grp_end[TG_CUDA_MMV_MAX_JOBS];  // prefix sums of the jobs' groups
    long long ngroups;
    int rows_per_group;  // R, or R / 2 for swiglu
    int wpr;             // warps per group: 1, 2 or 4
    const int8_t *bq;    // b quantized: column c's K int8 at bq + c * K
    const float2 *bd;    // and its (d, d * sum q) pairs at bd + c * K / 32
    const float *bss;    // folded norm (p.norm.x): x's sums of squares per block of 32, at bss + c * K / 32
    bool pdl;            // launched by programmatic dependent launch
    int a_const;         // no node of the graph writes the weights: first loads before tg_pdl_wait
    int late;            // trigger the next kernel's launch after the loads, not at the start (knob mmv_trigger)
};

// U: the 1.1B llama's rows give each lane 2 units (Q4_K: 1) per row at
// wpr = 1 (K 2048) and at wpr = 4 (K 8192); more would only hold registers
// (a cap of 64 registers for 8 blocks per SM spilled 40-560 bytes)
template <tg_type T, int R> constexpr int mmvq_units() {
    constexpr int u = (T == TG_TYPE_Q4_K ? 1 : 2) / R;
    return u > 0 ? u : 1;
}

// ROPE (R >= 2): rope and rope_kv_update folded in (p.rope; the q/k/v launch only)
template <tg_type T, int NMAX, int R, bool ROPE = false>
__global__ void __launch_bounds__(32 * kWarps, NMAX == 1 && T != TG_TYPE_Q4_K ? (R == 4 ? (ROPE ? 4 : 5) : R == 2 ? (ROPE ? 6 : 7) : 8) : 1)
    mmvq_kernel(const __grid_constant__ mmvq_args args) {
    constexpr int SUB = tg_cuda_qunit<T>::subs, UE = 32 * SUB, U = mmvq_units<T, R>();
    const tg_cuda_mmv &p = args.p;
    if (!args.late) tg_pdl_trigger();
    const int wpr = args.wpr;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % wpr;
    const long long g = (long long)blockIdx.x * (kWarps / wpr) + warp / wpr;
    const bool active = g < args.ngroups;
    int j = 0;
    if (!p.swiglu)
        while (j + 1 < p.njob && g >= args.grp_end[j]) j++;
    const long long m0 = (g - (j ? args.grp_end[j - 1] : 0)) * args.rows_per_group;
    const tg_cuda_desc &d0 = p.job[j].d;
    long long i2, i3;
    tg_cuda_mmv_batch(d0, &i2, &i3);
    const int N = (int)d0.ne[1];
    const long long K = p.job[0].a.ne[0], kb = K / 32;
    const int nu = (int)(K / UE);
    const long long c0 = (long long)N * blockIdx.y;  // b's first quantized column for this batch
    const char *arow[R];
#pragma unroll
    for (int r = 0; r < R; r++) arow[r] = tg_cuda_mmv_row(p, j, m0, r, R, i2, i3);
    float acc[R][NMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) acc[r][n] = 0.0f;
    const int step = 32 * wpr, ufirst = lane + 32 * part;
    tg_cuda_qunit<T> w[U][R];
    auto load = [&](int u0) {
#pragma unroll
        for (int k = 0; k < U; k++)
            if (u0 + k * step < nu)
#pragma unroll
                for (int r = 0; r < R; r++) tg_cuda_load_unit<T>(arow[r], u0 + k * step, w[k][r]);
    };
    // constant weights: the first round's loads overlap the kernel before
    // (not for Q4_K, whose units are the largest: its register count grew
    // most with them held across the wait)
    constexpr bool kPre = T != TG_TYPE_Q4_K;
    const bool pre = kPre && active && args.a_const;
    // folded rope (p.rope.D, mmv.cuh): the group's slots (lanes of its first
    // warp) in rope_cs[warp]; bad / prior feed the block's go/no-go barrier.
    // The angles while the first loads are in flight where the positions
    // allow (before the wait), else after the products.
    static_assert(!ROPE || R >= 2, "the folded rope: row pairs");
    __shared__ float rope_cs[kWarps][ROPE ? R * NMAX : 1][3];
    constexpr bool rope = ROPE;
    bool bad = false;
    int prior = TG_CUDA_ERR_NONE;
    auto rope_prep = [&]() {
        bad = tg_cuda_mmv_rope_prep(p, j, m0, active && part == 0 && lane < R * NMAX ? lane : -1, NMAX, N, rope_cs[warp]);
    };
    if (pre) load(ufirst);
    if (rope && p.rope.pos_pre) rope_prep();
    tg_pdl_wait();
    if (rope && threadIdx.x == 0) prior = tg_cuda_mmv_rope_prior(p.rope);
    if (active) {
        for (int u0 = ufirst; u0 < nu; u0 += step * U) {
            if (u0 != ufirst || !pre) load(u0);
#pragma unroll
            for (int k = 0; k < U; k++) {
                const int u = u0 + k * step;
                if (u >= nu) break;
#pragma unroll
                for (int n = 0; n < NMAX; n++) {
                    if (n >= N) break;
                    const int8_t *xq = args.bq + (c0 + n) * K + (long long)u * UE;
                    const float2 *xd = args.bd + (c0 + n) * kb + (long long)u * SUB;
#pragma unroll
                    for (int s = 0; s < SUB; s++) {
                        const uint4 x0 = __ldg((const uint4 *)(xq + 32 * s)), x1 = __ldg((const uint4 *)(xq + 32 * s + 16));
                        const int x[8] = {(int)x0.x, (int)x0.y, (int)x0.z, (int)x0.w,
                                          (int)x1.x, (int)x1.y, (int)x1.z, (int)x1.w};
                        const float2 ds = __ldg(xd + s);
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            int q[4];
#pragma unroll
                            for (int i = 0; i < 4; i++)
                                q[i] = __dp4a(w[k][r].q[8 * s + i + 4], x[i + 4], __dp4a(w[k][r].q[8 * s + i], x[i], 0));
                            const int dot = (q[0] + q[1]) + (q[2] + q[3]);
                            acc[r][n] += w[k][r].d[s] * ds.x * (float)dot - w[k][r].m[s] * ds.y;
                        }
                    }
                }
            }
        }
    }
    if (args.late) tg_pdl_trigger();
    if (rope && !p.rope.pos_pre) rope_prep();
    // a row's sum: each warp's (shuffles), then the group's wpr warps in order
    __shared__ float red[kWarps][R * NMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int n = 0; n < NMAX; n++) {
            const float v = tg_warp_sum(acc[r][n]);
            if (lane == 0) red[warp][r * NMAX + n] = v;
        }
    // wpr is the same for the whole block; with a folded rope the barrier is
    // also the go/no-go of its cache writes (every block checked the same
    // positions: all write or none does)
    bool go = true;
    if (rope) go = !__syncthreads_or(bad || prior != TG_CUDA_ERR_NONE);
    else if (wpr > 1) __syncthreads();
    else __syncwarp();
    if (rope && !go) tg_cuda_mmv_rope_report(p.rope, prior);
    if (!active || part != 0) return;
    // folded norm (one batch: tg_cuda_mmv_can_fold, so c0 is 0 and y and z
    // are indexed as x): column n's 1 / rms from its K / 32 sums of squares
    // (lane order, then the shuffle tree: the same in every warp), the norm's
    // y and z by the groups' first warps, grid-stride
    float sc[NMAX];
#pragma unroll
    for (int n = 0; n < NMAX; n++) {
        sc[n] = 1.0f;
        if (!args.bss || n >= N) continue;
        float t = 0.0f;
        for (long long b = lane; b < kb; b += 32) t += args.bss[(c0 + n) * kb + b];
        sc[n] = tg_cuda_rms_scale(tg_warp_sum(t), K, p.norm.eps);
    }
    auto scale_of = [&](int n) {  // sc[n] without a local-memory index
        float v = sc[0];
#pragma unroll
        for (int q = 1; q < NMAX; q++)
            if (q == n) v = sc[q];
        return v;
    };
    if (args.bss && (p.norm.y || p.norm.z))
        for (long long e = g * 32 + lane; e < (long long)N * K; e += args.ngroups * 32) {
            const int n = (int)(e / K);
            const float v = p.norm.x[e] * scale_of(n);
            if (p.norm.y) p.norm.y[e] = v;
            if (p.norm.z) p.norm.z[e] = v * p.norm.w[e - (long long)n * K];
        }
    if (lane >= R * NMAX) return;
    auto total = [&](int i) {
        float t = red[warp][i];
        for (int q = 1; q < wpr; q++) t += red[warp + q][i];
        return t;
    };
    // lane i writes output i = r * NMAX + n
    const int r = lane / NMAX, n = lane % NMAX;
    if (n >= N) return;
    const float s = scale_of(n);
    if (p.swiglu) {
        const long long m = m0 + r;
        if (r >= R / 2 || m >= p.job[0].a.ne[1]) return;
        const float gv = total(lane) * s, uv = total(lane + (R / 2) * NMAX) * s;
        tg_cuda_mmv_store_swiglu(p, m, n, i2, i3, gv, uv);
        return;
    }
    const tg_cuda_mmv_job &jb = p.job[j];
    const long long m = m0 + r;
    if (m >= jb.a.ne[1]) return;
    const float v = total(lane) * s;
    if (rope)  // the pair partner: row m ^ 1 is row r ^ 1 of the group (R even, m0 a multiple of R)
        tg_cuda_mmv_store_rope(p, j, m, n, v, total((r ^ 1) * NMAX + n) * s, rope_cs[warp][lane], go);
    else
        tg_cuda_mmv_store(jb, m, n, i2, i3, v);
}

template <tg_type T, int NMAX, int R> void launch_mmvq_r(cudaStream_t st, const mmvq_args &args, long long batches) {
    const long long gpb = kWarps / args.wpr;
    const dim3 grid((unsigned)((args.ngroups + gpb - 1) / gpb), (unsigned)batches);
    if constexpr (R >= 2)
        if (args.p.rope.D) return tg_cuda_launch(args.pdl, st, mmvq_kernel<T, NMAX, R, true>, grid, 32 * kWarps, 0, args);
    tg_cuda_launch(args.pdl, st, mmvq_kernel<T, NMAX, R>, grid, 32 * kWarps, 0, args);
}

// R in {1, 2, 4}: at least NMAX / 2 (and 2 for swiglu)
template <tg_type T, int NMAX> void launch_mmvq_n(cudaStream_t st, const mmvq_args &args, long long batches, int R) {
    if constexpr (NMAX <= 2) {
        if (R <= 1) return launch_mmvq_r<T, NMAX, 1>(st, args, batches);
    }
    if constexpr (NMAX <= 4) {
        if (R <= 2) return launch_mmvq_r<T, NMAX, 2>(st, args, batches);
    }
    launch_mmvq_r<T, NMAX, 4>(st, args, batches);
}

template <tg_type T> void launch_mmvq_t(cudaStream_t st, const mmvq_args &args, long long batches, int N, int R) {
    if (N <= 1) launch_mmvq_n<T, 1>(st, args, batches, R);
    else if (N <= 2) launch_mmvq_n<T, 2>(st, args, batches, R);
    else if (N <= 4) launch_mmvq_n<T, 4>(st, args, batches, R);
    else launch_mmvq_n<T, 8>(st, args, batches, R);
}

struct vec_args {
    tg_cuda_desc a, d;
    const int8_t *bq;  // b quantized
    const float2 *bd;
};

template <tg_type T, int NMAX> void launch_vec(cudaStream_t st, const vec_args &v, int wpr) {
    constexpr int R = NMAX <= 2 ? 1 : NMAX / 2;
    const long long rows_per_block = kWarps / wpr * R;
    const dim3 grid((unsigned)((v.a.ne[1] + rows_per_block - 1) / rows_per_block), (unsigned)(v.d.ne[2] * v.d.ne[3]));
    mmq_vec_kernel<T, NMAX, R><<<grid, 32 * kWarps, 0, st>>>(v.a, v.bq, v.bd, v.d, (int)v.d.ne[1], wpr);
}

template <tg_type T> void launch_vec_n(cudaStream_t st, const vec_args &v) {
    const long long nu = v.a.ne[0] / (T == TG_TYPE_Q4_K ? 64 : 32);
    const int wpr = nu >= 256 ? 4 : nu >= 128 ? 2 : 1;
    const long long N = v.d.ne[1];
    if (N <= 1) launch_vec<T, 1>(st, v, wpr);
    else if (N <= 2) launch_vec<T, 2>(st, v, wpr);
    else if (N <= 4) launch_vec<T, 4>(st, v, wpr);
    else launch_vec<T, 8>(st, v, wpr);
}

void launch_vec_t(cudaStream_t st, tg_type t, const vec_args &v) {
    switch (t) {
        case TG_TYPE_Q8_0: launch_vec_n<TG_TYPE_Q8_0>(st, v); break;
        case TG_TYPE_Q4_0: launch_vec_n<TG_TYPE_Q4_0>(st, v); break;
        default: launch_vec_n<TG_TYPE_Q4_K>(st, v); break;
    }
}

tg_status mmq_vec(tg_backend *be, const tg_tensor *dst) {
    const char *call = "mul_mat";
    tg_cuda_impl *impl = tg_cuda(be);
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    tg_cuda_mmv p;
    if (impl->sig.mmq_kernel != 1 && tg_cuda_mmv_job_of(be, dst, &p.job[0], &p.b)) {
        p.njob = 1;
        return tg_cuda_mmvq_launch(be, p, call);
    }
    impl->sig_last[TG_CUDA_SIG_MUL_MAT] = "quant/vec";
    vec_args v{tg_cuda_desc_of(a), tg_cuda_desc_of(dst), nullptr, nullptr};
    const tg_cuda_desc db = tg_cuda_desc_of(b);
    const long long K = a->ne[0], kb = K / 32, ncols = b->ne[1] * b->ne[2] * b->ne[3];
    const size_t q_bytes = tg_cuda_align256((size_t)(ncols * K));
    char *scratch = nullptr;
    tg_status s = tg_cuda_scratch(be, q_bytes + (size_t)(ncols * kb) * sizeof(float2), (void **)&scratch, call);
    if (s != TG_OK) return s;
    int8_t *bq = (int8_t *)scratch;
    float2 *bd = (float2 *)(scratch + q_bytes);
    const long long nblk = ncols * kb;
    quantize_b_kernel<<<tg_cuda_blocks(nblk * 32, 256), 256, 0, impl->stream>>>(db, bq, bd, nblk, kb);
    TG_CUDA_LAUNCHED(be, call);
    v.bq = bq, v.bd = bd;
    launch_vec_t(impl->stream, a->type, v);
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

}  // namespace

size_t tg_cuda_mmvq_scratch(long long K, long long ncols, size_t *q_bytes) {
    *q_bytes = tg_cuda_align256((size_t)(ncols * K));
    return *q_bytes + tg_cuda_align256((size_t)(ncols * (K / 32)) * sizeof(float2)) + (size_t)(ncols * (K / 32)) * sizeof(float);
}

tg_status tg_cuda_mmvq_launch(tg_backend *be, const tg_cuda_mmv &p, const char *call) {
    tg_cuda_impl *impl = tg_cuda(be);
    impl->sig_last[TG_CUDA_SIG_MUL_MAT] = "quant/gemv";
    const tg_type ta = p.job[0].a.type;
    const long long K = p.job[0].a.ne[0], kb = K / 32;
    const long long ncols = p.b.ne[1] * p.b.ne[2] * p.b.ne[3];
    mmvq_args args;
    args.p = p;
    const bool pdl = tg_cuda_pdl_for(impl, tg_cuda_mmv_pdl_class(p));
    if (p.qin.q) {  // b quantized by the attention kernel before (p.qin, cuda/fuse.cu's link)
        args.bq = p.qin.q, args.bd = p.qin.d, args.bss = nullptr;
    } else {
        size_t q_bytes = 0;
        char *scratch = nullptr;
        tg_status s = tg_cuda_scratch(be, tg_cuda_mmvq_scratch(K, ncols, &q_bytes), (void **)&scratch, call);
        if (s != TG_OK) return s;
        args.bq = (const int8_t *)scratch;
        args.bd = (const float2 *)(scratch + q_bytes);
        float *bss = (float *)(scratch + q_bytes + tg_cuda_align256((size_t)(ncols * kb) * sizeof(float2)));
        args.bss = p.norm.x ? bss : nullptr;
        // b quantized to 8-bit blocks once per launch (bench/NOTES.md: quantizing it in the norm that
        // writes it, in every GEMV block, or by the last block of the GEMV that writes it, measured
        // slower; with knob qlink attention's combine kernel quantizes its output for the o product, cuda/fuse.cu)
        const long long nblk = ncols * kb;
        tg_cuda_launch(pdl, impl->stream, quantize_b_kernel, tg_cuda_blocks(nblk * 32, 256), 256, 0, p.b,
                       (int8_t *)scratch, (float2 *)(scratch + q_bytes), nblk, kb, p.norm, bss);
        TG_CUDA_LAUNCHED(be, call);
    }
    args.pdl = pdl;
    args.a_const = pdl && tg_cuda_pdl_for(impl, TG_CUDA_PDL_MMV_PRE);
    for (int j = 0; j < p.njob; j++) args.a_const = args.a_const && tg_cuda_graph_const(impl, p.job[j].a);
    args.late = impl->sig.mmv_trigger != 1;  // knob 0 and 2: after the loads (early not measured here)
    // warps per group from K alone (the order of a row's sum depends on it)
    const long long nu = K / (ta == TG_TYPE_Q4_K ? 64 : 32);
    args.wpr = nu >= 256 ? 4 : nu >= 128 ? 2 : 1;
    const int N = (int)p.job[0].d.ne[1];
    const long long batches = p.job[0].d.ne[2] * p.job[0].d.ne[3];
    long long rows = 0;
    for (int j = 0; j < p.njob; j++) rows += p.job[j].a.ne[1];
    // R: at least N / 2 (b's loads per weight byte), 2 for swiglu; doubled
    // (more weight bytes in flight per lane, fewer b loads per weight byte)
    // while the grid still fills the GPU fill times (knob mmvq_fill, 0: 2).
    // At 2 the 1.1B's down product takes 4 rows, not 2, and a Q4_0 step is
    // 29 us shorter than at 4; at 1 (o at 2 rows, q/k/v at 4) it is longer;
    // so is 2 units per lane and row in flight, or 8 rows (bench/NOTES.md
    // session 30). Knob mmv_rows forces R.
    const int sms = tg_cuda_sms(impl);
    int R = N <= 2 ? 1 : N <= 4 ? 2 : 4;
    if ((p.swiglu || p.rope.D) && R < 2) R = 2;  // gate/up rows, rope pairs
    if (impl->sig.mmv_rows > 0) {  // knob mmv_rows: forced, not below that least
        const int k = impl->sig.mmv_rows <= 1 ? 1 : impl->sig.mmv_rows <= 2 ? 2 : 4;
        R = k > R ? k : R;
    } else {
        const long long fill = impl->sig.mmvq_fill > 0 ? impl->sig.mmvq_fill : 2;
        while (R < 4 && rows * batches / (2 * R) * args.wpr / kWarps >= fill * sms) R *= 2;
    }
    args.rows_per_group = p.swiglu ? R / 2 : R;
    long long groups = 0;
    for (int j = 0; j < (p.swiglu ? 1 : p.njob); j++) {
        groups += (p.job[j].a.ne[1] + args.rows_per_group - 1) / args.rows_per_group;
        args.grp_end[j] = groups;
    }
    for (int j = p.swiglu ? 1 : p.njob; j < TG_CUDA_MMV_MAX_JOBS; j++) args.grp_end[j] = groups;
    args.ngroups = groups;
    if (groups / (kWarps / args.wpr) + 1 > INT_MAX || batches > 65535)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] GEMV grid of %lld groups x %lld batches is too large", call, groups,
                      batches);
    switch (ta) {
        case TG_TYPE_Q8_0: launch_mmvq_t<TG_TYPE_Q8_0>(impl->stream, args, batches, N, R); break;
        case TG_TYPE_Q4_0: launch_mmvq_t<TG_TYPE_Q4_0>(impl->stream, args, batches, N, R); break;
        default: launch_mmvq_t<TG_TYPE_Q4_K>(impl->stream, args, batches, N, R); break;
    }
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

bool tg_cuda_mm_quant(tg_backend *be, const tg_tensor *dst, tg_status *st) {
    const tg_tensor *a = dst->src[0];
    if (!tg_type_is_quantized(a->type)) return false;
    const bool vec = dst->ne[1] <= 8 && !tg_cuda_mm_batches_to_gemm(dst) && dst->ne[2] * dst->ne[3] <= 65535 &&
                     a->ne[0] <= INT_MAX &&
                     a->ne[1] <= INT_MAX;  // grid.x up to M blocks (4 warps on one row)
    *st = vec ? mmq_vec(be, dst) : tg_cuda_mmq_prefill(be, dst);
    return true;
}
