// attention_split.cu - attention's fast path on the CUDA backend
// (cuda/attention.cu dispatches; see there for the op).
//
// One block per (split of the KV rows, kv head hk, sequence b, chunk of QN
// queries of that kv head): the queries are the group's Hq/Hkv heads times
// the T tokens, so every K and V row a block reads serves all of them (GQA
// sharing). Per tile of up to kRows cache rows (tn of them):
//   scores   G threads per row, G the largest power of two with G tn <=
//            kThreads, G <= the row's 16-byte units and G <= 32 (a warp's
//            lanes; G = 1 for a full tile): each sums its units' products
//            (units g, g + G, ..., kU loads in flight) for
//            the QN query rows (from shared memory, broadcast), then the G
//            lanes' sums are added by shuffles (xor tree: every lane of the
//            row gets the sum)
//   softmax  per query: tile max and sum over the block (shuffles + one
//            shared slot per warp), running max m and sum l rescaled
//   values   threads along Dv in 16-byte chunks, row groups over the tile's
//            rows; QN accumulators per value, summed over row groups at the
//            end in a fixed order (deterministic)
// Decode (few queries per kv head) splits the KV rows into nsplit ranges so
// that the grid fills the GPU (flash-decoding). The ranges follow the
// positions, not the cache's length (as the cluster kernel's): with nmax the
// most rows any of the block's queries reaches (read on the device), split s
// takes rows [s c, (s + 1) c), c = ceil(nmax / nsplit) rounded up to 16, at
// most the host's chunk (which covers the whole cache): a 1.1B layer's
// 4,608-row cache (48 splits of 96 rows) holding 600 positions gives 38
// splits of 16 rows (and 10 empty ones) instead of 7 of 96 rows and 41 empty.
// Each split writes its unnormalized sums with its m and l (a split with no
// rows: m = -inf), and a combine kernel merges them:
//   M = max_s m_s, w_s = exp(m_s - M), out = sum_s w_s o_s / sum_s w_s l_s.
// Rows past a query's n = min(p + 1, L) are masked; a query with p < 0 has
// no rows and gives zeros, as the reference; a query with rows gives o / l
// whatever l is, so NaN scores give NaN there too, never zeros. Positions
// that no node of the graph writes are read before the wait for the kernel
// before (programmatic dependent launch, sm_90), and then the block's K and V
// rows are prefetched into the L2; where the graph's only writer of the
// caches is the update at the attention's own positions
// (tg_cuda_attention_rows_pre), a thread whose first-tile row is below its
// sequence's least position also loads the first kU 16-byte units it scores
// of that row (g, g + G, ..., with the first tile's G) into registers before
// the wait.
#include <climits>
#include <type_traits>

#include "attention.cuh"
#include "mmv.cuh"
#include "quant.cuh"
#include "ops.h"
#include "signature.cuh"

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kRows = kThreads;  // cache rows per tile at most: G = 1 lane per row for a full tile
constexpr int kU = 8;            // 16-byte loads each thread has in flight


struct split_args {
    tg_cuda_desc q, k, v, pos, out;
    float scale;
    int group;   // Hq / Hkv
    int nqc;     // query chunks per kv head: ceil(group * T / QN)
    int nsplit;  // ranges of KV rows
    int chunk;   // rows per range
    int pos_pre; // no node of the graph writes the positions: read before tg_pdl_wait
    int pre_l2;    // pos_pre, and the block's K and V rows go to the L2 before the wait
    int rows_pre;  // pre_l2, and the rows below a sequence's least position may be read
                   // before the wait (tg_cuda_attention_rows_pre)
    int pos_ranges;  // ranges from the positions (else s * chunk: the cache's length)
    int row_lanes;   // G threads per row when scoring a tile of few rows (else 1)
    int q_vec;       // q's rows F32, contiguous and 16-byte aligned: float4 loads
    int out_vec;     // nsplit 1: out's rows likewise (float4 stores); nsplit > 1 always (part)
    float *part; // nsplit > 1: the partial sums (part_floats, part_ml)
};

// The partial sums (nsplit > 1): split s of flat query qg stores its Dv
// unnormalized sums at part + (qg nsplit + s) Dv (16-byte rows: Dv is a
// multiple of 4, part 256-byte aligned) and its (m, l) at
// part_ml(...) + 2 (qg nsplit + s), m NaN when the query has no rows.
__host__ __device__ inline size_t part_floats(long long nq, long long nsplit, long long Dv) {
    return (size_t)(nq * nsplit * (Dv + 2));
}
__host__ __device__ inline float *part_ml(float *part, long long nq, long long nsplit, long long Dv) {
    return part + nq * nsplit * Dv;
}

// Threads per row when scoring a tile of tn rows with units 16-byte units per row.
__device__ __forceinline__ int score_lanes(int tn, int units, bool on) {
    int g = 1;
    if (on)
        while (g < 32 && 2 * g <= units && 2 * g * tn <= kThreads) g *= 2;
    return g;
}
constexpr int kRangeRows = 16;  // position ranges: rows per split a multiple of this

// Shared memory, in floats: qs[QN][D], ps[QN][kRows], racc[RG][QN][Dv] (each
// 16-byte aligned: D and Dv are multiples of 4), red[2][QN][kWarps], ml[2][QN],
// nrow[QN] (int).
inline size_t split_smem(int QN, long long D, long long Dv, int vev) {
    const long long rg = kThreads / (Dv / vev);
    return (size_t)(QN * D + QN * kRows + 2 * QN * kWarps + 3 * QN + rg * QN * Dv) * 4;
}

// Min blocks per SM (session 29): the K row held before the wait took QN 4
// from 168 to 208 registers, 2 blocks per SM instead of 3 (a 344-block grid
// in two waves); 3 keeps 168 registers (16-36 bytes of spills). QN 1 gets 4
// blocks at 128 registers (4 bytes of spills for F32); QN 2 (156-159
// registers, 3 blocks) and QN 8 (222-255, 2 blocks) are left uncapped:
// capped to their old occupancy they spilled 40-72 and 16-20 bytes.
//
// DC: D = Dv = DC fixed at compile time (64 or 128, knob attn_split_dc), index arithmetic in 32 bits
// (I): the divisions by D and by the group become shifts or 32-bit divisions, where DC 0 divides in
// 64 bits (the q rows' and the outputs' loops: ~2,700 instructions in a row per warp in session 29's
// ncu). Same products in the same order: the same bits as DC 0. With one lane per row (G = 1) the DC
// instances also unroll the K row's loop whole, so that the next units' loads issue before this
// one's products (F32 D 128 at L 4096: 24.3 us against 28.1 with the loop rolled, session 38).
template <typename T, int QN, int DC>
__global__ void __launch_bounds__(kThreads, QN == 1 ? 4 : QN == 4 ? 3 : 0) split_kernel(split_args A) {
    using I = std::conditional_t<DC != 0, int, long long>;  // indices below QN * Dv and the flat queries
    constexpr int VE = 16 / sizeof(T);
    extern __shared__ __align__(16) float smem[];
    const I D = DC ? (I)DC : (I)A.q.ne[0], Dv = DC ? (I)DC : (I)A.v.ne[0];
    const long long Hq = A.q.ne[1], T_ = A.q.ne[2], L = A.k.ne[2];
    const int TPR = (int)(Dv / VE), RG = kThreads / TPR;
    float *qs = smem, *ps = qs + QN * D, *racc = ps + QN * kRows, *red = racc + (I)RG * QN * Dv;
    float *ml = red + 2 * QN * kWarps;
    int *nrow = (int *)(ml + 2 * QN);
    // per query of the block, from the block's indices alone (before the wait): its q row (null past
    // the block's queries), where its Dv results go (out's row; with nsplit > 1 the split's partial
    // sums) and, nsplit > 1, its (m, l) slot
    __shared__ const char *s_qrow[QN];
    __shared__ char *s_orow[QN];
    __shared__ float *s_ml[QN];
    tg_pdl_trigger();
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int s = blockIdx.x, qc = blockIdx.y % A.nqc;
    const long long hk = blockIdx.y / A.nqc, b = blockIdx.z;
    const I nflat = (I)((long long)A.group * T_);  // < 2^19 (host: nqc * Hkv <= 65535)
    const I group = (I)A.group;
    // rows of the block's queries, n = min(p + 1, L) (none for p < 0): read
    // while the kernel before ends when no node of the graph writes them
    auto rows_of_queries = [&]() {
        if (tid < QN) {
            const I f = (I)qc * QN + tid;
            int n = 0;
            if (f < nflat) {
                const int p = *(const int *)tg_cuda_ptr(A.pos, f / group, b, 0, 0);
                n = p < 0 ? 0 : ((long long)p < L ? p + 1 : (int)L);
            }
            nrow[tid] = n;
        }
    };
    // (by warp 1, beside warp 0's position loads: the block's first barrier waits for both)
    if (tid >= 32 && tid < 32 + QN) {
        const int qq = tid - 32;
        const I f = (I)qc * QN + qq;
        const bool ok = f < nflat;
        const long long h = hk * group + (ok ? f % group : 0), t = ok ? f / group : 0;
        s_qrow[qq] = tg_attn_qrow(A.q, f, nflat, group, hk, b);
        if (A.nsplit == 1) {
            s_orow[qq] = ok ? tg_cuda_ptr(A.out, 0, h, t, b) : nullptr;
        } else {
            const long long slot = (h + Hq * (t + T_ * b)) * A.nsplit + s;
            s_orow[qq] = ok ? (char *)(A.part + slot * Dv) : nullptr;
            s_ml[qq] = part_ml(A.part, Hq * T_ * A.q.ne[3], A.nsplit, Dv) + 2 * slot;
        }
    }
    long long j_begin = (long long)s * A.chunk, j_end = j_begin;
    auto range = [&]() {
        int nmax = 0;
#pragma unroll
        for (int qq = 0; qq < QN; qq++) nmax = max(nmax, nrow[qq]);
        long long c = A.chunk;
        if (A.pos_ranges) {
            // nsplit c >= nmax; c <= chunk since nsplit chunk >= L >= nmax (chunk a multiple of 16 or L);
            // 32-bit: nmax <= L <= INT_MAX, nsplit <= kMaxSplit
            const unsigned per = ((unsigned)nmax + (unsigned)A.nsplit - 1u) / (unsigned)A.nsplit;
            c = min(c, (long long)max((unsigned)kRangeRows, (per + kRangeRows - 1) / kRangeRows * kRangeRows));
        }
        j_begin = (long long)s * c;
        j_end = min(j_begin + c, (long long)nmax);
    };
    const int units = (int)(D / VE);  // 16-byte units per K row
    // before the wait, with the positions: the block's K and V rows into the
    // L2 (only moves lines, where the kernel before writes too: nothing read
    // early is used), and where no node writes the rows below the sequence's
    // least position, the first kU 16-byte units the thread scores of its K
    // row of the first tile into registers (raw, where the tile loop below
    // loads its units)
    uint4 raw[kU];
    bool has_kpre = false;
    if (A.pos_pre) {
        rows_of_queries();
        __syncthreads();
        range();
    }
    if (A.pre_l2) {
        tg_attn_prefetch_rows(tg_cuda_ptr(A.k, 0, hk, 0, b), A.k.nb[2], D * (long long)sizeof(T), tg_cuda_ptr(A.v, 0, hk, 0, b),
                              A.v.nb[2], Dv * (long long)sizeof(T), j_begin, j_end);
        if (A.rows_pre) {
            // the units the thread scores first (as in the tile loop below)
            const long long pmin = tg_attn_least_pos(A.pos, T_, b);
            const int G = score_lanes((int)min((long long)kRows, j_end - j_begin), units, A.row_lanes);
            const long long j = j_begin + tid / G;
            if (j < j_end && j < pmin) {
                const T *kr = (const T *)tg_cuda_ptr(A.k, 0, hk, j, b);
#pragma unroll
                for (int u = 0; u < kU; u++) {
                    const int un = u * G + tid % G;
                    if (un < units) raw[u] = __ldg((const uint4 *)(kr + (I)un * VE));
                }
                has_kpre = true;
            }
        }
    }
    tg_pdl_wait();
    if (!A.pos_pre) {
        rows_of_queries();
        __syncthreads();  // s_qrow
    }

    // the block's queries (zeros past them)
    tg_attn_load_q<DC ? (QN * DC / 4 + kThreads - 1) / kThreads : 2>(qs, s_qrow, QN, (int)D, A.q_vec, A.q.nb[0],
                                                                      kThreads);
    __syncthreads();
    if (!A.pos_pre) range();

    const int vg = tid / TPR, vc = tid % TPR;
    const bool v_active = vg < RG;
    float acc[QN][VE];
#pragma unroll
    for (int qq = 0; qq < QN; qq++)
#pragma unroll
        for (int e = 0; e < VE; e++) acc[qq][e] = 0.0f;
    float m_run[QN], l_run[QN];
#pragma unroll
    for (int qq = 0; qq < QN; qq++) m_run[qq] = -INFINITY, l_run[qq] = 0.0f;

    for (long long j0 = j_begin; j0 < j_end; j0 += kRows) {
        const int tn = (int)min((long long)kRows, j_end - j0);
        // G lanes per row: the thread scores row r, units g, g + G, ...
        const int G = score_lanes(tn, units, A.row_lanes), r = tid / G, g = tid % G;
        float sc[QN];
#pragma unroll
        for (int qq = 0; qq < QN; qq++) sc[qq] = 0.0f;
        if (r < tn) {
            const T *kr = (const T *)tg_cuda_ptr(A.k, 0, hk, j0 + r, b);
            // units u0 + u * Gs + g, u < kU: kU 16-byte loads in flight before their first use
            auto score_units = [&](int u0, int Gs) {
                if (!(has_kpre && j0 == j_begin && u0 == 0))  // else raw holds them from before the wait
#pragma unroll
                    for (int u = 0; u < kU; u++) {
                        const int un = u0 + u * Gs + g;
                        if (un < units) raw[u] = __ldg((const uint4 *)(kr + (I)un * VE));
                    }
#pragma unroll
                for (int u = 0; u < kU; u++) {
                    const int un = u0 + u * Gs + g;
                    if (un >= units) break;
                    float kf[VE];
                    tg_cuda_cvt16(raw[u], kf, T());
#pragma unroll
                    for (int qq = 0; qq < QN; qq++)
#pragma unroll
                        for (int e = 0; e < VE; e += 4) {
                            const float4 qv = *(const float4 *)(qs + qq * D + (I)un * VE + e);
                            sc[qq] = fmaf(qv.x, kf[e], sc[qq]);
                            sc[qq] = fmaf(qv.y, kf[e + 1], sc[qq]);
                            sc[qq] = fmaf(qv.z, kf[e + 2], sc[qq]);
                            sc[qq] = fmaf(qv.w, kf[e + 3], sc[qq]);
                        }
                }
            };
            if (DC != 0 && G == 1) {
                // one lane per row (a full tile) at a compile-time head dim: the whole row unrolled
                // (F32 D 128 at L 4096: 24.3 us against 28.1 with the loop below, not unrolled)
                constexpr int kDU = DC ? (DC / VE + kU - 1) / kU : 1;
#pragma unroll kDU
                for (int u0 = 0; u0 < units; u0 += kU) score_units(u0, 1);
            } else {
#pragma unroll 1
                for (int u0 = 0; u0 < units; u0 += kU * G) score_units(u0, G);
            }
        }
        // the row's G lanes are adjacent (G divides 32): each gets the row's sum
        for (int off = 1; off < G; off <<= 1)
#pragma unroll
            for (int qq = 0; qq < QN; qq++) sc[qq] += __shfl_xor_sync(0xffffffffu, sc[qq], off);
        float corr[QN];
        tg_attn_tile_softmax<QN, kWarps>(sc, r, g == 0, tn, j0, nrow, A.scale, ps, kRows, red, warp, lane, m_run,
                                         l_run, corr);
        if (v_active) {
#pragma unroll
            for (int qq = 0; qq < QN; qq++)
#pragma unroll
                for (int e = 0; e < VE; e++) acc[qq][e] *= corr[qq];
            const T *vb = (const T *)tg_cuda_ptr(A.v, (long long)vc * VE, hk, j0, b);
            for (int j1 = vg; j1 < tn; j1 += kU * RG) {
                uint4 vraw[kU];
#pragma unroll
                for (int u = 0; u < kU; u++)
                    if (j1 + u * RG < tn) vraw[u] = __ldg((const uint4 *)((const char *)vb + (j1 + u * RG) * A.v.nb[2]));
#pragma unroll
                for (int u = 0; u < kU; u++) {
                    const int jj = j1 + u * RG;
                    if (jj >= tn) break;
                    float vf[VE];
                    tg_cuda_cvt16(vraw[u], vf, T());
#pragma unroll
                    for (int qq = 0; qq < QN; qq++) {
                        // p = 0: a row past this query's position (another query of the
                        // block reads it), whose V must not reach this sum even if NaN
                        const float p = ps[qq * kRows + jj];
                        if (p != 0.0f)
#pragma unroll
                            for (int e = 0; e < VE; e++) acc[qq][e] = fmaf(p, vf[e], acc[qq][e]);
                    }
                }
            }
        }
        __syncthreads();  // ps and red are overwritten by the next tile
    }

    // sum the row groups' accumulators in a fixed order, 4 values of a query per thread
    if (v_active)
#pragma unroll
        for (int qq = 0; qq < QN; qq++)
#pragma unroll
            for (int e = 0; e < VE; e += 4)
                *(float4 *)(racc + ((I)vg * QN + qq) * Dv + vc * VE + e) =
                    make_float4(acc[qq][e], acc[qq][e + 1], acc[qq][e + 2], acc[qq][e + 3]);
    if (tid == 0)
#pragma unroll
        for (int qq = 0; qq < QN; qq++) ml[qq] = m_run[qq], ml[QN + qq] = l_run[qq];
    __syncthreads();
    const I dv4 = Dv / 4;
    for (I i = tid; i < QN * dv4; i += kThreads) {
        const int qq = (int)(i / dv4);
        const I c = i % dv4;
        char *orow = s_orow[qq];
        if (!orow) continue;  // past the block's queries
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int g = 0; g < RG; g++) {
            const float4 r = *(const float4 *)(racc + ((I)g * QN + qq) * Dv + 4 * c);
            o.x += r.x, o.y += r.y, o.z += r.z, o.w += r.w;
        }
        const float l = ml[QN + qq];
        if (A.nsplit == 1) {
            // zeros only for a query without rows: 0/0 and NaN scores stay NaN, as the reference
            if (nrow[qq] > 0) o.x /= l, o.y /= l, o.z /= l, o.w /= l;
            else o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (A.out_vec) {
                *(float4 *)(orow + 16 * c) = o;
            } else {
                const long long st = A.out.nb[0];
                float *const d = (float *)(orow + 4 * c * st);
                *d = o.x, *(float *)((char *)d + st) = o.y, *(float *)((char *)d + 2 * st) = o.z;
                *(float *)((char *)d + 3 * st) = o.w;
            }
        } else {
            *(float4 *)(orow + 16 * c) = o;
            if (c == 0) s_ml[qq][0] = nrow[qq] > 0 ? ml[qq] : NAN, s_ml[qq][1] = l;  // m NaN: no rows
        }
    }
}

// One block per query (grid-stride). The block's threads are groups of
// C = Dv / 4 (a float4 column of the sums each); group g takes splits g,
// g + SG, ..., SG = kThreads / C groups, in rounds of U (a template
// parameter the host sizes to the splits a group has, rounded up to a power
// of two, so that a round's loads are only of splits that exist (its merge
// runs all U slots, the missing ones with weight 0); their m, l and sums
// loaded together: the loads need no M). Per round, with M' the larger
// of the group's M and the round's m_s:
//   O = O exp(M - M') + sum_s w_s o_s, L likewise, w_s = exp(m_s - M'),
// the round's exps independent of each other (no chain through a running
// max per split), a split with no rows (m_s = -inf) adding nothing but a
// NaN l_s. The groups' (M, O, L) then meet in shared memory; one thread per
// group computes its weight w_g = exp(M_g - max_g M_g) once, and each output
// is
//   out = sum_g w_g O_g / sum_g w_g L_g
// over g in order (deterministic). So every load of a query is in one round
// trip where U covers the group's splits (43 splits at attn.decode's shape:
// 11 per thread, U 16; a 1.1B llama's 17 ranges at Dv 64 in the timeline's
// 1,051-row cache: 3 per thread, U 4). Earlier forms, each slower: the
// splits walked three times one dependent load after another (~9 us,
// bench/NOTES.md session 20); m and l loaded and M reduced over the block
// before the sums were loaded (session 20's second kernel); and (sessions
// 57-58) one round of 16 predicated loads and a running max with one
// dependent exp per split: ~980-1,020 instructions per warp in a 1.1B layer
// against ~550, 6.8-7.1 against 4.9-5.1 us per launch (ncu on an H200,
// session 59). A query without rows at all (its splits' m are NaN, a flag)
// gives zeros; any other gives O / L whatever L is, so NaN scores (L NaN)
// and all-(-inf) scores (0/0) give NaN, as the reference does.
constexpr int kMaxSplit = 512;  // host: nsplit <= 3 * SMs / base, clamped to this (bounds the partial sums)
constexpr int kCombineMaxU = 16;

// qb: out (F32, contiguous, Dv a multiple of 32) also quantized for the
// quantized GEMV after the attention (cuda/fuse.cu's link, mmv.cuh
// tg_cuda_mmv_qin): out seen as columns of Dv Hq floats, blocks of 32 as
// quantize_b_kernel makes them (the same bits), int8 at qb, (d, d * sum) at qd.
template <int U>
__global__ void __launch_bounds__(kThreads) combine_kernel(const float *part, int nsplit, tg_cuda_desc out,
                                                           long long nq, int8_t *qb = nullptr, float2 *qd = nullptr) {
    __shared__ __align__(16) float so[4 * kThreads];  // SG x Dv <= 4 kThreads
    __shared__ float sm[kThreads], sl[kThreads], sw[kThreads];
    tg_pdl_trigger();
    tg_pdl_wait();
    const int Dv = (int)out.ne[0];
    const long long Hq = out.ne[1], T = out.ne[2];
    const int C = Dv / 4, SG = kThreads / C, c = threadIdx.x % C, g = threadIdx.x / C;
    const float2 *ml_all = (const float2 *)part_ml((float *)part, nq, nsplit, Dv);
    for (long long qg = blockIdx.x; qg < nq; qg += gridDim.x) {
        const float *po = part + qg * nsplit * Dv;
        const float2 *pml = ml_all + qg * nsplit;
        const bool rows = !isnan(pml[0].x);  // every split of the query carries the flag
        float M = -INFINITY, L = 0.0f;
        float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (g < SG)
            for (int s0 = g; s0 < nsplit; s0 += SG * U) {
                float2 ml[U];
                float4 o[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int s = s0 + u * SG;
                    ml[u] = make_float2(-INFINITY, 0.0f), o[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (s < nsplit) ml[u] = pml[s], o[u] = ((const float4 *)(po + (long long)s * Dv))[c];
                }
                float Mn = M;
#pragma unroll
                for (int u = 0; u < U; u++) Mn = fmaxf(Mn, ml[u].x);  // (a NaN m_s: no rows, the flag decides)
                if (Mn == -INFINITY) {  // no rows in the round (or all its scores NaN: a NaN l_s)
#pragma unroll
                    for (int u = 0; u < U; u++) L += 0.0f * ml[u].y;
                    continue;
                }
                // M = -inf: nothing summed yet (L is 0 or NaN, O is 0)
                const float a = M == -INFINITY ? 0.0f : expf(M - Mn);
                L *= a, O.x *= a, O.y *= a, O.z *= a, O.w *= a;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    // a split with no rows (m_s = -inf) has zero sums: w_s = 0 adds nothing but a NaN l_s
                    const bool none = ml[u].x == -INFINITY;
                    const float w = none ? 0.0f : expf(ml[u].x - Mn);
                    L += none ? 0.0f * ml[u].y : w * ml[u].y;
                    O.x = fmaf(w, o[u].x, O.x), O.y = fmaf(w, o[u].y, O.y);
                    O.z = fmaf(w, o[u].z, O.z), O.w = fmaf(w, o[u].w, O.w);
                }
                M = Mn;
            }
        if (g < SG) {
            *(float4 *)(so + g * Dv + 4 * c) = O;
            if (c == 0) sm[g] = M, sl[g] = L;
        }
        __syncthreads();
        if (threadIdx.x < SG) {
            float Mx = -INFINITY;
            for (int h = 0; h < SG; h++) Mx = fmaxf(Mx, sm[h]);
            const float mg = sm[threadIdx.x];
            sw[threadIdx.x] = mg != -INFINITY ? expf(mg - Mx) : 0.0f;
        }
        __syncthreads();
        float l = 0.0f;
        for (int h = 0; h < SG; h++) l += sw[h] * sl[h];  // a NaN L_g stays (0 * NaN)
        const long long h = qg % Hq, t = (qg / Hq) % T, b = qg / (Hq * T);
        for (int i = threadIdx.x; i < Dv; i += kThreads) {
            float o = 0.0f;
            if (rows) {
                for (int k = 0; k < SG; k++) o += sw[k] * so[k * Dv + i];
                o /= l;
            }
            *(float *)tg_cuda_ptr(out, i, h, t, b) = o;
            if (qb) {  // a warp's lanes hold 32 consecutive i (Dv a multiple of 32)
                const long long e = qg * Dv + i;  // (t + T b) Dv Hq + h Dv + i
                tg_cuda_q8_block(o, qb + e, qd + e / 32);
            }
        }
        __syncthreads();  // so / sm / sl / sw are rewritten by the next query
    }
}

template <typename T, int QN> tg_status launch(tg_backend *be, int dc, split_args A, dim3 grid, size_t smem) {
    const tg_cuda_impl *impl = tg_cuda(be);
    const bool pdl = tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN);
    if (dc == 64) tg_cuda_launch(pdl, impl->stream, split_kernel<T, QN, 64>, grid, kThreads, smem, A);
    else if (dc == 128) tg_cuda_launch(pdl, impl->stream, split_kernel<T, QN, 128>, grid, kThreads, smem, A);
    else tg_cuda_launch(pdl, impl->stream, split_kernel<T, QN, 0>, grid, kThreads, smem, A);
    TG_CUDA_LAUNCHED(be, "attention");
    return TG_OK;
}

template <typename T> tg_status launch_qn(tg_backend *be, int QN, int dc, split_args A, dim3 grid, size_t smem) {
    switch (QN) {
        case 1: return launch<T, 1>(be, dc, A, grid, smem);
        case 2: return launch<T, 2>(be, dc, A, grid, smem);
        case 4: return launch<T, 4>(be, dc, A, grid, smem);
        default: return launch<T, 8>(be, dc, A, grid, smem);
    }
}

}  // namespace

bool tg_cuda_attention_split(tg_backend *be, const tg_tensor *dst, int min_split_rows, tg_status *st, bool dry) {
    const tg_tensor *tq = dst->src[0], *tk = dst->src[1], *tv = dst->src[2], *tp = dst->src[3];
    if (tk->type != tv->type || !tg_attn_rows16(tk) || !tg_attn_rows16(tv)) return false;
    const int ve = 16 / (int)tg_type_size(tk->type);
    const long long D = tq->ne[0], Hq = tq->ne[1], T = tq->ne[2], B = tq->ne[3];
    const long long Hkv = tk->ne[1], L = tk->ne[2], Dv = tv->ne[0];
    if (D % ve != 0 || Dv % ve != 0 || D > 256 || Dv > 256 || L > INT_MAX) return false;
    const long long group = Hq / Hkv, nflat = group * T;
    const int QN = nflat >= 8 ? 8 : nflat >= 4 ? 4 : nflat >= 2 ? 2 : 1;
    const long long nqc = (nflat + QN - 1) / QN;
    if (nqc * Hkv > 65535 || B > 65535 || nqc > INT_MAX || group > INT_MAX) return false;
    const size_t smem = split_smem(QN, D, Dv, ve);
    if (smem > 48 * 1024) return false;

    tg_cuda_impl *impl = tg_cuda(be);
    const long long base = nqc * Hkv * B, target = 3LL * tg_cuda_sms(impl);
    long long nsplit = 1, chunk = L;
    if (base < target && L > min_split_rows) {
        nsplit = (target + base - 1) / base;
        chunk = (L + nsplit - 1) / nsplit;
        chunk = (chunk + 31) / 32 * 32;
        if (chunk < min_split_rows) chunk = min_split_rows;
        nsplit = (L + chunk - 1) / chunk;
        if (nsplit > kMaxSplit) {  // bounds the partial sums (not reached: target <= 3 * SMs)
            chunk = (L + kMaxSplit - 1) / kMaxSplit;
            nsplit = (L + chunk - 1) / chunk;
        }
    }
    if (chunk < 1) chunk = 1;
    // several ranges: one kernel of thread-block clusters where the device has them
    if (nsplit > 1 && tg_cuda_attention_cluster(be, dst, nsplit, QN, nqc, st, dry)) return true;
    if (dry) return false;
    split_args A;
    A.q = tg_cuda_desc_of(tq), A.k = tg_cuda_desc_of(tk), A.v = tg_cuda_desc_of(tv), A.pos = tg_cuda_desc_of(tp);
    A.out = tg_cuda_desc_of(dst);
    A.scale = tg_get_params<float>(dst);
    A.group = (int)group, A.nqc = (int)nqc, A.nsplit = (int)nsplit, A.chunk = (int)chunk, A.part = nullptr;
    A.pos_pre = tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN) && tg_cuda_graph_const(impl, A.pos);
    A.pre_l2 = A.pos_pre && tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN_PRE);
    A.rows_pre = A.pre_l2 && tg_cuda_attention_rows_pre(impl, dst);
    A.pos_ranges = (impl->sig.attn_split_rows & 1) == 0;
    A.row_lanes = (impl->sig.attn_split_rows & 2) == 0;
    A.q_vec = tq->type == TG_TYPE_F32 && tg_attn_rows16(tq);
    A.out_vec = tg_attn_rows16(dst);
    const long long nq = Hq * T * B;
    // the link (impl->attn_qlink, cuda/fuse.cu): the combine kernel also
    // quantizes out for the GEMV after it, the partial sums past its quantized b
    tg_cuda_impl::attn_qlink_t &ql = impl->attn_qlink;
    const bool link = nsplit > 1 && ql.want && Dv % 32 == 0 && dst->type == TG_TYPE_F32 && tg_is_contiguous(dst);
    int8_t *qb = nullptr;
    float2 *qd = nullptr;
    if (nsplit > 1) {
        const size_t part_bytes = part_floats(nq, nsplit, Dv) * 4, off = link ? ql.part_off : 0;
        char *base = nullptr;
        *st = tg_cuda_scratch(be, off + part_bytes, (void **)&base, "attention");
        if (*st != TG_OK) return true;
        A.part = (float *)(base + off);
        if (link) {
            size_t q_bytes = 0;
            (void)tg_cuda_mmvq_scratch(Dv * Hq, T * B, &q_bytes);
            qb = (int8_t *)base, qd = (float2 *)(base + q_bytes);
        }
    }
    const dim3 grid((unsigned)nsplit, (unsigned)(nqc * Hkv), (unsigned)B);
    // compile-time head dims where D = Dv is 64 or 128 (knob attn_split_dc 2: the runtime-D kernel)
    const int dc = impl->sig.attn_split_dc != 2 && D == Dv && (D == 64 || D == 128) ? (int)D : 0;
    static const char *const names[2][2][2] = {{{"split1", "split1/pre"}, {"split", "split/pre"}},
                                               {{"split1/dc", "split1/pre/dc"}, {"split/dc", "split/pre/dc"}}};
    impl->sig_last[TG_CUDA_SIG_ATTN] = names[dc != 0][nsplit > 1][A.rows_pre ? 1 : 0];
    switch (tk->type) {
        case TG_TYPE_F32: *st = launch_qn<float>(be, QN, dc, A, grid, smem); break;
        case TG_TYPE_F16: *st = launch_qn<__half>(be, QN, dc, A, grid, smem); break;
        default: *st = launch_qn<__nv_bfloat16>(be, QN, dc, A, grid, smem); break;
    }
    if (*st != TG_OK || nsplit == 1) return true;
    // U: the splits each group takes (Dv / 4 threads a group), rounded up to a power of two
    const long long per = (nsplit + kThreads / (Dv / 4) - 1) / (kThreads / (Dv / 4));
    const int U = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= 8 ? 8 : kCombineMaxU;
    auto combine = U == 1 ? combine_kernel<1> : U == 2 ? combine_kernel<2> : U == 4 ? combine_kernel<4>
                 : U == 8 ? combine_kernel<8> : combine_kernel<kCombineMaxU>;
    tg_cuda_launch(tg_cuda_pdl_for(impl, TG_CUDA_PDL_ATTN), impl->stream, combine, tg_cuda_blocks(nq, 1), kThreads, 0,
                   (const float *)A.part, (int)nsplit, A.out, nq, qb, qd);
    cudaError_t e = cudaGetLastError();
    *st = e == cudaSuccess ? TG_OK : tg_cuda_status(be, e, "attention", "combine_kernel launch");
    if (*st == TG_OK && qb) ql.q = qb, ql.d = qd;
    return true;
}

bool tg_cuda_attention_takes_cluster(tg_backend *be, const tg_tensor *dst) {
    tg_status st = TG_OK;
    // (tg_cuda_attention's order: the tensor-core kernel first)
    return dst->op == TG_OP_ATTENTION && !tg_cuda_attention_mma(be, dst, &st, true) &&
           tg_cuda_attention_split(be, dst, TG_CUDA_ATTN_MIN_SPLIT_ROWS, &st, true);
}
