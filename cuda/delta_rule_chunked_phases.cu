// delta_rule_chunked_phases.cu - the chunk-parallel form of the chunked delta rule, for calls whose
// (sequence, value head) pairs alone would not fill the GPU (cuda/delta_rule_chunked.cu chooses;
// bench/NOTES.md has the numbers). Three kernels over the backend's scratch, per (sequence, value
// head, chunk) unit W, Kd^T, U, S_c and gamma:
//   delta_prep_kernel   per unit: gate prefix, A, T = (I + A)^-1, W = T (beta d(t,-1) K),
//                       U = T (beta V), Kd^T = (K (.) d(C-1, t))^T, gamma = d(C-1, -1)
//   delta_state_kernel  per (Dv slice, value head, sequence), the only sequential part: per
//                       chunk S_c = S; U <- V' = U - W S; S = gamma S + Kd^T V' (next chunk's
//                       operands in flight by cp.async)
//   delta_out_kernel    per unit: O = scale (d(t,-1) Q S_c + (Q K^T (.) decay) V')
// Products: chunk_mma.cuh (TF32 mma.sync, ldmatrix A fragments).
#include <algorithm>
#include <climits>

#include "chunk_parts.cuh"

namespace tg_chunk {
namespace {

// Most scratch the chunk-parallel form takes (grow-only, kept by the backend); beyond it the
// single-kernel form runs, which needs none.
constexpr size_t kPhaseScratchBudget = (size_t)4 << 30;

struct phase_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, DVP, NC;       // padded head dims (multiples of 16 and 8), chunks per sequence
    int qk_vec, v_vec;      // q/k rows (whole v rows) load as 16-byte units
    int o_pair;             // output column pairs (j even) store as one
    int BV, nslices, nbuf;  // state pass: value columns per block, slices per head, load buffers
    int h16;                // FULL prep and delta_state128_kernel<.., true>: W and Kd^T as F16 (below)
    // scratch per (sequence, value head, chunk) unit u = (b Hv + h) NC + c: W (kC x DKP),
    // Kd^T (DKP x kC), U (kC x DVP), S_c (DKP x DVP), gamma
    float *W, *Kd, *U, *S, *gam;
    const tg_cuda_err *err;
};
constexpr int kVSC = 72;  // row stride of the output pass's 64-column blocks
// h16 (Dk = Dv = 128): unit u's W rows as F16 (kC x 128 halves, each 8-column group permuted as
// chunk_mma.cuh's h16_pos), then kC floats, each row's inverse power-of-two scale, in W's F32 region;
// Kd^T's (128 x kC halves, then 128 scales) in Kd's. A row's values are stored times its scale,
// which puts the largest magnitude in [1, 2): every value at least 2^-14 of the row's largest is
// exact in F16 (they are TF32 values: 10-bit mantissas), smaller ones are off by at most 2^-25 of
// the largest (F16's subnormal step). The state pass multiplies a product's row by the inverse.
constexpr int kH16Data = kC * 128 / 2;  // floats of a unit's F16 data (then the scales)
__host__ __device__ inline int vstr(int n) { return (n + 31) / 32 * 32 + 8; }
size_t prep_smem(int DKP, int DVP) {
    // + 192: the h16 rows' largest magnitudes (bits), 64 of W and 128 of Kd^T
    return ((size_t)kC * q_stride(DKP) + (size_t)kC * vstr(DVP) + 2 * (size_t)kC * kPS + 8 * (size_t)kC + 4 + 192) * 4;
}
// one load buffer: W (kC rows of DKP), Kd^T (DKP rows of kC), the U slice (kC rows of BV)
__host__ __device__ inline int state_buf(int DKP, int BV) {
    return kC * q_stride(DKP) + DKP * kPS + kC * v_stride(BV);
}
size_t state_smem(int DKP, int BV, int nbuf) {
    return ((size_t)nbuf * state_buf(DKP, BV) + (size_t)DKP * v_stride(BV)) * 4;
}
size_t out_smem(int DKP) {
    const size_t ks = std::max((size_t)kC * q_stride(DKP), (size_t)DKP * kVSC);
    return ((size_t)kC * q_stride(DKP) + ks + (size_t)kC * kPS + (size_t)kC * kVSC + 7 * (size_t)kC + 4) * 4;
}

// Stage chunk c's rows of x (q or k: rows at (0, hk, t0 + t, b)) into dst, row stride ld.
__device__ inline void stage_qk(float *dst, int ld, const tg_cuda_desc &x, int hk, long long t0, int b, int n,
                                const phase_args &a) {
    stage_rows<256>(dst, ld, tg_cuda_ptr(x, 0, hk, t0, b), x.nb[2], x.nb[0], x.type, n, a.Dk, a.qk_vec);
}
// Gates of the chunk (neutral past n) and beta (0 past n; has_beta false: none), one token per
// thread t < kC: loaded into registers first (load_gates), so that their loads are in flight with the
// rows' staging that follows, and stored into sL / sB after it (put_gates).
struct gate_regs {
    float g = 0.0f, beta = 0.0f;
};
__device__ inline gate_regs load_gates(const phase_args &a, int h, long long t0, int b, int n, bool has_beta) {
    const int tid = threadIdx.x;
    gate_regs r;
    if (tid < kC) {
        const bool in = tid < n;
        r.g = in ? __ldg((const float *)tg_cuda_ptr(a.g, h, t0 + tid, b, 0)) : (a.log_gate ? 0.0f : 1.0f);
        if (has_beta) r.beta = in ? __ldg((const float *)tg_cuda_ptr(a.beta, h, t0 + tid, b, 0)) : 0.0f;
    }
    return r;
}
__device__ inline void put_gates(const gate_regs &r, float *sL, float *sB) {
    const int tid = threadIdx.x;
    if (tid < kC) {
        sL[tid] = r.g;
        if (sB) sB[tid] = r.beta;
    }
}

// The chunk's gate prefix by warp 0 (after the gates are staged and a barrier); FULL: then the
// decays d0, dl and the factor tables by the same warp (chunk_decays). The caller's next barrier
// publishes them.
template <bool FULL>
__device__ inline void prefix_by_warp0(float *sL, float *sSg, int *sZ, float *sD0, float *sDl, float *sEp, float *sEm,
                                       int *sTab, int log_gate) {
    if ((threadIdx.x >> 5) != 0) return;
    gate_prefix(sL, sSg, sZ, log_gate);
    if (FULL) {
        __syncwarp();
        chunk_decays(sL, sSg, sZ, sD0, sDl, sEp, sEm, sTab);
    }
}
// d(t, s), s >= 0: FULL by the factor tables where they hold (tab), else exactly.
template <bool FULL>
__device__ inline float phase_decay(const float *sL, const float *sSg, const int *sZ, const float *sEp, const float *sEm,
                                    bool tab, int t, int s) {
    return FULL ? decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s) : chunk_decay(sL, sSg, sZ, t, s);
}

// Phase 1, one block of 256 threads per (chunk, value head, sequence): Kd^T = (K (.) d(C-1, t))^T,
// the chunk's decay gamma = d(C-1, -1); GATED_DELTA: A = beta K K^T (.) decay (s < t),
// T = (I + A)^-1, W = T (beta d(t, -1) K), U = T (beta V); GATED_LINEAR: U = beta V.
// FULL: Dk = Dv = 128 with 16-byte rows, compile-time sizes (divisions and tile guards fold, the k
// loops unroll whole), the inverse by doubling, padding zeroed only for a short last chunk; as the
// single kernel's full case: K l2-normalized in F32 while it is staged (stage3_128), the decays
// d(t, s) from the chunk's factor tables where they hold (chunk_decays).
template <bool FULL> __global__ void __launch_bounds__(256) delta_prep_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 psm4[];
    const int DKP = FULL ? 128 : a.DKP, DVP = FULL ? 128 : a.DVP, QS = q_stride(DKP), VS = vstr(DVP);
    float *sK = (float *)psm4, *sV = sK + kC * QS, *sA = sV + kC * VS, *sT = sA + kC * kPS;
    float *sL = sT + kC * kPS, *sSg = sL + kC, *sB = sSg + kC, *sD0 = sB + kC, *sDl = sD0 + kC;
    float *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    int *rmW = sTab + 4, *rmK = rmW + kC;  // h16: the rows' largest magnitudes (float bits)
    const int tid = threadIdx.x, lane = tid & 31;
    const int c = blockIdx.x % a.NC, h = (blockIdx.x / a.NC) % a.Hv, b = blockIdx.x / (a.NC * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const long long t0 = (long long)c * kC, u = ((long long)b * a.Hv + h) * a.NC + c;
    const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);
    const bool h16 = FULL && a.h16;
    if (h16 && tid < kC + 128) rmW[tid] = 0;  // (before the first barrier)

    const gate_regs gr = load_gates(a, h, t0, b, n, true);
    if (!FULL || n < kC) {  // padding stays zero (FULL: only rows past n are read unwritten)
        for (int x = tid; x < kC * (QS + VS); x += NT) sK[x] = 0.0f;
        __syncthreads();
    }
    if (FULL) {  // K normalized and rounded on the way; V as it is (the second job has no rows)
        stage3_128<NT>({sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, 128}, {sK, QS, nullptr, 0, TG_TYPE_F32, 0, 128},
                       {sV, VS, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], a.v.type, n, 128}, a.l2norm);
    } else if (a.qk_vec && a.v_vec) {  // both tensors' loads in flight together
        stage3<NT>({sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, a.Dk},
                   {sV, VS, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], a.v.type, n, a.Dv}, {});
    } else {
        stage_qk(sK, QS, a.k, hk, t0, b, n, a);
        stage_rows<NT>(sV, VS, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], a.v.nb[0], a.v.type, n, a.Dv, a.v_vec);
    }
    put_gates(gr, sL, sB);
    __syncthreads();
    prefix_by_warp0<FULL>(sL, sSg, sZ, sD0, sDl, sEp, sEm, sTab, a.log_gate);
    if (!FULL) norm_rows<NW>(sK, nullptr, QS, n, a.Dk, a.l2norm);
    __syncthreads();
    const bool tab = FULL && (*sTab & 1);
    auto decay = [&](int t, int s) { return phase_decay<FULL>(sL, sSg, sZ, sEp, sEm, tab, t, s); };
    if (!FULL && tid < kC) sD0[tid] = chunk_decay(sL, sSg, sZ, tid, -1), sDl[tid] = chunk_decay(sL, sSg, sZ, kC - 1, tid);
    if (tid == 0) a.gam[u] = chunk_decay(sL, sSg, sZ, kC - 1, -1);
    if (a.delta) {
        const wtiles<NW, 2, 2, FULL> wt(0, kC, kC);  // 16 tiles of 32 x 8: one pass
        float acc[2][2][4];
        zero(acc);
        wmma1<NW, 2, 2, false>(acc, wt, DKP, [&](int m, int k) { return lda_rows(sK, QS, m, k); },
                               [&](int k, int s) { return ldb_rows(sK, QS, k, s); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int s) {
            for (int d = 0; d < 2; d++)
                sA[t * kPS + s + d] = s + d < t ? sB[t] * acc[r][mi][e + d] * decay(t, s + d) : 0.0f;
        });
    }
    __syncthreads();
    // Kd^T: row i holds K[t][i] d(C-1, t) over the chunk's 64 tokens, 4 tokens per store; a warp's
    // 32 items are 8 rows i x 16 tokens (64 contiguous bytes per row of Kd^T): its reads of sK's
    // columns meet at most 2 per bank (as 2 rows i x 64 tokens, 8)
    float *Kd = a.Kd + u * kC * DKP;
    for (int x = tid; x < kC * DKP / 4; x += NT) {
        const int wb = x >> 5, l = x & 31, i = 8 * (wb >> 2) + (l >> 2), t = 16 * (wb & 3) + 4 * (l & 3);
        float y[4];
#pragma unroll
        for (int e = 0; e < 4; e++) y[e] = tf32r(keep_zero_mul(sDl[t + e], sK[(t + e) * QS + i]));
        if (h16) {  // (every thread runs the loop kC DKP / 4 NT = 8 times: the shuffles are whole-warp)
            int mb = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) mb = max(mb, h16_mag(y[e]));
            mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
            mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));  // the 4 lanes of row i
            if ((l & 3) == 0) atomicMax(&rmK[i], mb);
        } else {
            *(float4 *)&Kd[i * kC + t] = make_float4(y[0], y[1], y[2], y[3]);
        }
    }
    if (a.delta) {
        if constexpr (FULL) invert_unit_lower_doubling<NT>(sA, sT);
        else invert_unit_lower<NT>(sA, sT);
    }
    __syncthreads();
    if (h16) {  // Kd^T's rows scaled into F16, 8 tokens per 16-byte store (threads along i: sK's
                // column reads meet no bank twice), then each row's inverse scale
        __half *K16 = (__half *)Kd;
        for (int x = tid; x < DKP * (kC / 8); x += NT) {
            const int i = x & (DKP - 1), tg = x / DKP;
            float mul, inv;
            h16_row_scale(rmK[i], &mul, &inv);
            unsigned short hs[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int t = 8 * tg + e;
                hs[h16_pos(e)] = __half_as_ushort(__float2half_rn(tf32r(keep_zero_mul(sDl[t], sK[t * QS + i])) * mul));
            }
            *(uint4 *)&K16[i * kC + 8 * tg] = make_uint4(hs[0] | (unsigned)hs[1] << 16, hs[2] | (unsigned)hs[3] << 16,
                                                         hs[4] | (unsigned)hs[5] << 16, hs[6] | (unsigned)hs[7] << 16);
            if (tg == 0) Kd[kH16Data + i] = inv;
        }
        __syncthreads();  // sK is read before K' replaces it
    }
    // K' = beta d(t, -1) K (in place of K), V' = beta V (in place of V)
    for (int x = tid; x < kC * DKP && a.delta; x += NT) {
        const int t = x / DKP, i = x - t * DKP;
        sK[t * QS + i] = tf32r(sB[t] * keep_zero_mul(sD0[t], sK[t * QS + i]));
    }
    float *U = a.U + u * kC * DVP;
    for (int x = tid; x < kC * DVP; x += NT) {
        const int t = x / DVP, j = x - t * DVP;
        const float y = tf32r(sB[t] * sV[t * VS + j]);
        if (a.delta) sV[t * VS + j] = y;
        else U[t * DVP + j] = y;
    }
    if (!a.delta) return;
    __syncthreads();
    // W = T K', U = T V' (T lower triangular), straight to the scratch
    auto t_at = [&](int m, int k) { return lda_rows(sT, kPS, m, k); };
    float *W = a.W + u * kC * DKP;
    using WT = wtiles<NW, 2, 2, FULL>;
    if (h16) {
        // both passes' tiles held (FULL: 64 x 128 in tiles of 32 x 8, 16 per pass), rounded to TF32
        // as the F32 path stores them; each row's largest magnitude; then, once every warp is past
        // its reads of K', the rows scaled into F16 in sK's place and copied out 16 bytes at a time
        constexpr int NP = (kC / 32) * (128 / 8) / (NW * 2);
        static_assert(NP == 2, "FULL W: two passes");
        float acc[NP][2][2][4];
#pragma unroll
        for (int p = 0; p < NP; p++) {
            const WT wt(p * NW * 2, kC, DKP);
            zero(acc[p]);
            wmma1<NW, 2, 2, true>(acc[p], wt, kC, t_at, [&](int k, int i) { return ldb_cols(sK, QS, k, i); });
            for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
                float &x = acc[p][r][mi][e], &y = acc[p][r][mi][e + 1];
                x = tf32r(x), y = tf32r(y);
                int mb = max(h16_mag(x), h16_mag(y));
                mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
                mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));  // the 4 lanes of row t
                if ((lane & 3) == 0) atomicMax(&rmW[t], mb);
            });
        }
        __syncthreads();
        __half *stg = (__half *)sK;  // 64 rows of 128 halves, the global layout
#pragma unroll
        for (int p = 0; p < NP; p++) {
            const WT wt(p * NW * 2, kC, DKP);
            for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
                float mul, inv;
                h16_row_scale(rmW[t], &mul, &inv);
                stg[t * 128 + (j & ~7) + h16_pos(j & 7)] = __float2half_rn(acc[p][r][mi][e] * mul);
                stg[t * 128 + ((j + 1) & ~7) + h16_pos((j + 1) & 7)] = __float2half_rn(acc[p][r][mi][e + 1] * mul);
            });
        }
        __syncthreads();
        for (int x = tid; x < kC * 16; x += NT) ((uint4 *)W)[x] = ((const uint4 *)stg)[x];
        if (tid < kC) {
            float mul, inv;
            h16_row_scale(rmW[tid], &mul, &inv);
            W[kH16Data + tid] = inv;
        }
    }
    for (int p = 0, np = h16 ? 0 : WT::passes(kC, DKP); p < np; p++) {
        const WT wt(p * NW * 2, kC, DKP);
        float acc[2][2][4];
        zero(acc);
        wmma1<NW, 2, 2, true>(acc, wt, kC, t_at, [&](int k, int i) { return ldb_cols(sK, QS, k, i); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
            *(float2 *)&W[t * DKP + j] = make_float2(tf32r(acc[r][mi][e]), tf32r(acc[r][mi][e + 1]));
        });
    }
    for (int p = 0, np = WT::passes(kC, DVP); p < np; p++) {
        const WT wt(p * NW * 2, kC, DVP);
        float acc[2][2][4];
        zero(acc);
        wmma1<NW, 2, 2, true>(acc, wt, kC, t_at, [&](int k, int j) { return ldb_cols(sV, VS, k, j); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
            *(float2 *)&U[t * DVP + j] = make_float2(tf32r(acc[r][mi][e]), tf32r(acc[r][mi][e + 1]));
        });
    }
}

// Phase 2, the sequential part: one block of 256 threads per (value column slice of BV, value
// head, sequence) carries its slice of S (DKP x BV, F32, shared memory) over the chunks: stores it
// as the chunk's S_c, then (GATED_DELTA) U <- V' = U - W S_c in place, and
// S = gamma S + Kd^T V'. The next chunk's W, Kd^T, U slice are in flight (cp.async) meanwhile when
// two buffers fit (nbuf 2). The state is read once and written once (skipped when the graph's
// device error record is set: a failed graph leaves it unchanged). 8 warps: one block per SM at
// most (shared memory), so its warps are all the latency hiding there is.
__global__ void __launch_bounds__(256) delta_state_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 ssm4[];
    const int DKP = a.DKP, DVP = a.DVP, BV = a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    const int bufsz = state_buf(DKP, BV);
    float *sS = (float *)ssm4 + a.nbuf * bufsz;
    const int tid = threadIdx.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int j0 = slice * BV, nv = min(BV, DVP - j0), nvr = min(BV, a.Dv - j0);  // nv: a multiple of 8
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    const long long u0 = ((long long)b * a.Hv + h) * a.NC;
    const idiv by_ku(DKP / 4), by_vu(nv / 4);  // 16-byte units per row of W (and of S_c), of U

    for (int x = tid; x < DKP * nv; x += NT) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        sS[i * VS + jj] = has_state && i < a.Dk && jj < nvr ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }
    __syncthreads();  // the slice is in place before the first S_c store reads it
    // chunk c's W (rows of DKP), Kd^T (rows of kC) and U slice (rows of nv) into buffer c % nbuf
    auto bufs = [&](int c, float *&sW, float *&sKd, float *&sU) {
        sW = (float *)ssm4 + (c % a.nbuf) * bufsz, sKd = sW + kC * QS, sU = sKd + DKP * kPS;
    };
    auto issue = [&](int c) {
        float *sW, *sKd, *sU;
        bufs(c, sW, sKd, sU);
        const float *W = a.W + (u0 + c) * kC * DKP, *Kd = a.Kd + (u0 + c) * kC * DKP;
        const float *U = a.U + (u0 + c) * kC * DVP + j0;
        for (int x = tid; x < kC * (DKP / 4) && a.delta; x += NT) {
            int t, i;
            by_ku.split(x, t, i);
            cp_async_stream<16>(&sW[t * QS + 4 * i], &W[t * DKP + 4 * i]);
        }
        for (int x = tid; x < DKP * (kC / 4); x += NT) {
            const int i = x / (kC / 4), t = 4 * (x % (kC / 4));
            cp_async_stream<16>(&sKd[i * kPS + t], &Kd[i * kC + t]);
        }
        for (int x = tid; x < kC * (nv / 4); x += NT) {
            int t, j;
            by_vu.split(x, t, j);
            cp_async_stream<16>(&sU[t * VS + 4 * j], &U[t * DVP + 4 * j]);
        }
        cp_async_commit();
    };
    if (a.nbuf == 2) issue(0);
#pragma unroll 1
    for (int c = 0; c < a.NC; c++) {
        const long long u = u0 + c;
        if (a.nbuf == 1) issue(c);
        else if (c + 1 < a.NC) issue(c + 1);
        float *Sc = a.S + u * DKP * DVP + j0;
        for (int x = tid; x < DKP * (nv / 4); x += NT) {
            int i, jj;
            by_vu.split(x, i, jj);
            *(float4 *)&Sc[(long long)i * DVP + 4 * jj] = *(const float4 *)&sS[i * VS + 4 * jj];
        }
        if (a.nbuf == 2 && c + 1 < a.NC) cp_async_wait_prior1();
        else cp_async_wait_all();
        __syncthreads();
        float *sW, *sKd, *sU;
        bufs(c, sW, sKd, sU);
        if (a.delta) {
            float *U = a.U + u * kC * DVP + j0;
            using WT = wtiles<NW, 4, 1>;  // 16 x 8 tiles: 8 of them at BV 16, one per warp
            for (int p = 0, np = WT::passes(kC, nv); p < np; p++) {
                const WT wt(p * NW * 4, kC, nv);
                float acc[4][1][4];
                zero(acc);
                wmma1<NW, 4, 1, false>(acc, wt, DKP, [&](int m, int k) { return lda_rows(sW, QS, m, k); },
                                       [&](int k, int j) { return ldb_cols(sS, VS, k, j); });
                for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
                    const float x = tf32r(sU[t * VS + j] - acc[r][mi][e]);
                    const float y = tf32r(sU[t * VS + j + 1] - acc[r][mi][e + 1]);
                    sU[t * VS + j] = x, sU[t * VS + j + 1] = y;
                    *(float2 *)&U[t * DVP + j] = make_float2(x, y);
                });
            }
            __syncthreads();
        }
        const float gam = __ldg(&a.gam[u]);
        using ST = wtiles<NW, 4, 2>;
        for (int p = 0, np = ST::passes(DKP, nv); p < np; p++) {
            const ST wt(p * NW * 4, DKP, nv);
            float acc[4][2][4];
            zero(acc);
            wmma1<NW, 4, 2, false>(acc, wt, kC, [&](int m, int k) { return lda_rows(sKd, kPS, m, k); },
                                   [&](int k, int j) { return ldb_cols(sU, VS, k, j); });
            for_pairs(wt, [&](int r, int mi, int e, int i, int j) {
                float *x = &sS[i * VS + j];
                x[0] = keep_zero_mul(gam, x[0]) + acc[r][mi][e], x[1] = keep_zero_mul(gam, x[1]) + acc[r][mi][e + 1];
            });
        }
        __syncthreads();
    }
    if (!has_state || !clear) return;
    for (int x = tid; x < a.Dk * nvr; x += NT) {
        const int jj = x / a.Dk, i = x - jj * a.Dk;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[i * VS + jj]);
    }
}

// Phase 2 for Dk = Dv = 128 with two load buffers (BV 8, 16, 32 or 64): the same pass with compile-time
// sizes and the slice of S in registers. Session 31's ncu of the generic kernel at gdn.long (B1 T16384
// H16, BV 16) counted ~1,950 instructions per warp per chunk for 32 mma.sync, mostly address
// arithmetic (ALU the busiest pipe) and shared-memory round trips of S. Here:
//   - each thread's 16-byte copy units are fixed over the chunks: one offset each, set once;
//   - warp w owns S rows 16w .. 16w + 15 of every column tile (the accumulator layout of the update
//     S = gamma S + Kd^T V'), so S stays in registers; it is written to shared memory once per chunk
//     as the B operand of the next W S, and S_c goes to the scratch from the registers;
//   - two barriers per chunk: after the chunk's copies land (then the next chunk's copies are issued:
//     every warp is past the chunk before, the last reader of that buffer), and after V' is made.
// Same operations in the same order per element as delta_state_kernel (W S in one k order, V' =
// tf32(U - W S), S = keep_zero_mul(gamma, S) + Kd^T V'), but W S in two partial sums (even and odd k
// steps, added at the end) to halve its dependent chain: results differ from the generic kernel's in
// the last bits.
// H16 (knob delta_chunk_h16): W and Kd^T arrive as F16 rows with their inverse row scales (kH16Data),
// half the bytes per chunk, in three load buffers (chunk c + 2's copies issued while chunk c runs);
// the A fragments come from F16 (lda16_rows2, exact) and each product row is multiplied by its
// inverse scale (a power of two: the same value as the F32 operands give, wherever the F16 rows hold
// them exactly).
template <int BV, bool H16> constexpr int state128_buf() {
    constexpr int DK = 128, QS = DK + 4, VS = BV + 8;
    // F16: W kC rows of DK + 8 halves, Kd^T DK rows of kC + 8 halves (row strides of 16 mod 128 bytes:
    // ldmatrix without bank conflicts), the U slice, the kC + DK scales
    return H16 ? kC * (DK + 8) / 2 + DK * (kC + 8) / 2 + kC * VS + kC + DK : kC * QS + DK * kPS + kC * VS;
}
template <int BV, bool H16> constexpr int state128_nbuf() { return H16 ? 3 : 2; }
size_t state128_smem(int BV, bool h16) {
    const int VS = BV + 8;
    const int buf = h16 ? (BV == 8 ? state128_buf<8, true>() : BV == 16 ? state128_buf<16, true>() : BV == 32 ? state128_buf<32, true>() : state128_buf<64, true>())
                        : state_buf(128, BV);
    return ((size_t)(h16 ? 3 : 2) * buf + (size_t)128 * VS) * 4;
}

template <int BV, bool DELTA, bool H16> __global__ void __launch_bounds__(256, 1) delta_state128_kernel(const phase_args a) {
    constexpr int NT = 256, DK = 128, DV = 128, QS = DK + 4, VS = BV + 8, NTN = BV / 8;
    constexpr int WLD = DK + 8, KLD = kC + 8;  // H16 row strides (halves)
    // W S: 4 row blocks x NTN column tiles, WN per warp (BV 8: warps 0-3 one each, 4-7 none)
    constexpr int WT = 4 * NTN, WN = WT >= 8 ? WT / 8 : 1;
    constexpr int BUF = state128_buf<BV, H16>(), NB = state128_nbuf<BV, H16>();
    static_assert(BV == 8 || BV == 16 || BV == 32 || BV == 64, "state pass slices");
    static_assert(BUF % 4 == 0 && (kC * WLD / 2) % 4 == 0 && (DK * KLD / 2) % 4 == 0, "16-byte aligned regions");
    extern __shared__ float4 ssm4[];
    float *const sS = (float *)ssm4 + NB * BUF;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int j0 = slice * BV;
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    const long long u0 = ((long long)b * a.Hv + h) * a.NC;

    for (int x = tid; x < DK * BV; x += NT) {
        const int jj = x / DK, i = x % DK;  // i fastest: coalesced along the state's rows
        sS[i * VS + jj] = has_state ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }
    __syncthreads();
    // the warp's S rows (16 warp + g, + 8) and columns (8 r + 2 c4, + 1) in accumulator order
    float S[NTN][4];
    const int sr = 16 * warp + g;
#pragma unroll
    for (int r = 0; r < NTN; r++) {
        const int n = 8 * r + 2 * c4;
        S[r][0] = sS[sr * VS + n], S[r][1] = sS[sr * VS + n + 1];
        S[r][2] = sS[(sr + 8) * VS + n], S[r][3] = sS[(sr + 8) * VS + n + 1];
    }
    // a buffer's regions: F32 W (kC x QS), Kd^T (DK x kPS), U; H16 W (kC x WLD halves), Kd^T (DK x KLD
    // halves), U, W's kC inverse scales, Kd^T's DK
    auto buf_of = [&](int c) { return (float *)ssm4 + (c % NB) * BUF; };
    constexpr int OFF_K = H16 ? kC * WLD / 2 : kC * QS, OFF_U = OFF_K + (H16 ? DK * KLD / 2 : DK * kPS);
    constexpr int OFF_WS = OFF_U + kC * VS, OFF_KS = OFF_WS + kC;
    // copy units: F32 W 64 rows x 32 (row (tid >> 5) + 8 i), Kd^T 128 rows x 16 (row (tid >> 4) + 16 i);
    // H16 W 64 rows x 16 (row (tid >> 4) + 16 i), Kd^T 128 rows x 8 (row (tid >> 3) + 32 i); the U slice
    // 64 rows x BV / 4 (row tid / UPR + UROWS i)
    constexpr int UPR = BV / 4, UROWS = NT / UPR, UCNT = kC * UPR, UN = (UCNT + NT - 1) / NT;
    const int w_src = H16 ? (tid >> 4) * DK + (tid & 15) * 8 : (tid >> 5) * DK + (tid & 31) * 4;
    const int w_dst = H16 ? (tid >> 4) * WLD + (tid & 15) * 8 : (tid >> 5) * QS + (tid & 31) * 4;
    const int k_src = H16 ? (tid >> 3) * kC + (tid & 7) * 8 : (tid >> 4) * kC + (tid & 15) * 4;
    const int k_dst = H16 ? (tid >> 3) * KLD + (tid & 7) * 8 : (tid >> 4) * kPS + (tid & 15) * 4;
    const int u_src = (tid / UPR) * DV + (tid % UPR) * 4, u_dst = (tid / UPR) * VS + (tid % UPR) * 4;
    auto issue = [&](int c) {
        float *bf = buf_of(c), *sU = bf + OFF_U;
        const long long u = u0 + c;
        const float *W = a.W + u * (kC * DK), *Kd = a.Kd + u * (kC * DK), *U = a.U + u * (kC * DV) + j0;
        if constexpr (H16) {
            const __half *W16 = (const __half *)W, *K16 = (const __half *)Kd;
            __half *sW16 = (__half *)bf, *sK16 = (__half *)(bf + OFF_K);
            if (DELTA)
#pragma unroll
                for (int i = 0; i < 4; i++) cp_async_stream<16>(sW16 + w_dst + i * 16 * WLD, W16 + w_src + i * 16 * DK);
#pragma unroll
            for (int i = 0; i < 4; i++) cp_async_stream<16>(sK16 + k_dst + i * 32 * KLD, K16 + k_src + i * 32 * kC);
            if (DELTA && tid < kC / 4) cp_async_stream<16>(bf + OFF_WS + 4 * tid, W + kH16Data + 4 * tid);
            else if (tid >= kC / 4 && tid < kC / 4 + DK / 4)
                cp_async_stream<16>(bf + OFF_KS + 4 * (tid - kC / 4), Kd + kH16Data + 4 * (tid - kC / 4));
        } else {
            float *sW = bf, *sKd = bf + OFF_K;
            if (DELTA)
#pragma unroll
                for (int i = 0; i < 8; i++) cp_async_stream<16>(sW + w_dst + i * 8 * QS, W + w_src + i * 8 * DK);
#pragma unroll
            for (int i = 0; i < 8; i++) cp_async_stream<16>(sKd + k_dst + i * 16 * kPS, Kd + k_src + i * 16 * kC);
        }
#pragma unroll
        for (int i = 0; i < UN; i++)
            if (UCNT % NT == 0 || tid + i * NT < UCNT) cp_async_stream<16>(sU + u_dst + i * UROWS * VS, U + u_src + i * UROWS * DV);
        cp_async_commit();
    };
#pragma unroll
    for (int c = 0; c < NB - 1; c++)
        if (c < a.NC) issue(c);
#pragma unroll 1
    for (int c = 0; c < a.NC; c++) {
        const long long u = u0 + c;
        // S_c, the state at the chunk's start
        float *Sc = a.S + u * (DK * DV) + j0;
#pragma unroll
        for (int r = 0; r < NTN; r++) {
            const int n = 8 * r + 2 * c4;
            *(float2 *)&Sc[sr * DV + n] = make_float2(S[r][0], S[r][1]);
            *(float2 *)&Sc[(sr + 8) * DV + n] = make_float2(S[r][2], S[r][3]);
        }
        // chunk c's copies landed: with H16 chunk c + 1's may still be in flight (the latest group)
        if (H16 && c + 1 < a.NC) cp_async_wait_prior1();
        else cp_async_wait_all();
        __syncthreads();  // chunk c's buffer and sS (written at the end of chunk c - 1) are in place
        // the buffer of chunk c + NB - 1 was chunk c - 1's: every warp is past it
        if (c + NB - 1 < a.NC) issue(c + NB - 1);
        const float *bf = buf_of(c);
        float *sU = (float *)bf + OFF_U;
        if (DELTA && (WT >= 8 || warp < WT)) {  // V' = U - W S_c, into sU and the scratch's U
            float acc[2][WN][4];
#pragma unroll
            for (int p = 0; p < 2; p++)
#pragma unroll
                for (int r = 0; r < WN; r++) acc[p][r][0] = acc[p][r][1] = acc[p][r][2] = acc[p][r][3] = 0.0f;
            const int m0 = (warp & 3) * 16, nb = (warp >> 2) * WN * 8;
            if constexpr (H16) {
#pragma unroll
                for (int k0 = 0; k0 < DK; k0 += 16) {
                    frag_a f0, f1;
                    lda16_rows2((const __half *)bf, WLD, m0, k0, f0, f1);
#pragma unroll
                    for (int r = 0; r < WN; r++) {
                        mma_tf32(acc[0][r], f0, ldb_cols(sS, VS, k0, nb + 8 * r));
                        mma_tf32(acc[1][r], f1, ldb_cols(sS, VS, k0 + 8, nb + 8 * r));
                    }
                }
            } else {
#pragma unroll
                for (int k0 = 0; k0 < DK; k0 += 8) {
                    const frag_a fa = lda_rows(bf, QS, m0, k0);
#pragma unroll
                    for (int r = 0; r < WN; r++) mma_tf32(acc[(k0 >> 3) & 1][r], fa, ldb_cols(sS, VS, k0, nb + 8 * r));
                }
            }
            float *U = a.U + u * (kC * DV) + j0;
#pragma unroll
            for (int r = 0; r < WN; r++) {
                const int n = nb + 8 * r + 2 * c4;
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int t = m0 + g + 4 * e;  // e 0: row g, e 2: row g + 8
                    const float ws = H16 ? bf[OFF_WS + t] : 1.0f;
                    const float x = tf32r(sU[t * VS + n] - (acc[0][r][e] + acc[1][r][e]) * ws);
                    const float y = tf32r(sU[t * VS + n + 1] - (acc[0][r][e + 1] + acc[1][r][e + 1]) * ws);
                    *(float2 *)&sU[t * VS + n] = make_float2(x, y);
                    *(float2 *)&U[t * DV + n] = make_float2(x, y);
                }
            }
        }
        if (DELTA) __syncthreads();  // V' complete; every read of sS (this chunk's S) is done
        // S = gamma S + Kd^T V' (rows 16 warp .., all BV columns)
        const float gam = __ldg(&a.gam[u]);
        float acc[NTN][4];
#pragma unroll
        for (int r = 0; r < NTN; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        if constexpr (H16) {
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 16) {
                frag_a f0, f1;
                lda16_rows2((const __half *)(bf + OFF_K), KLD, 16 * warp, k0, f0, f1);
#pragma unroll
                for (int r = 0; r < NTN; r++) {
                    mma_tf32(acc[r], f0, ldb_cols(sU, VS, k0, 8 * r));
                    mma_tf32(acc[r], f1, ldb_cols(sU, VS, k0 + 8, 8 * r));
                }
            }
        } else {
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 8) {
                const frag_a fa = lda_rows(bf + OFF_K, kPS, 16 * warp, k0);
#pragma unroll
                for (int r = 0; r < NTN; r++) mma_tf32(acc[r], fa, ldb_cols(sU, VS, k0, 8 * r));
            }
        }
        const float ks0 = H16 ? bf[OFF_KS + sr] : 1.0f, ks1 = H16 ? bf[OFF_KS + sr + 8] : 1.0f;
#pragma unroll
        for (int r = 0; r < NTN; r++) {
            const int n = 8 * r + 2 * c4;
            S[r][0] = keep_zero_mul(gam, S[r][0]) + acc[r][0] * ks0, S[r][1] = keep_zero_mul(gam, S[r][1]) + acc[r][1] * ks0;
            S[r][2] = keep_zero_mul(gam, S[r][2]) + acc[r][2] * ks1, S[r][3] = keep_zero_mul(gam, S[r][3]) + acc[r][3] * ks1;
            *(float2 *)&sS[sr * VS + n] = make_float2(S[r][0], S[r][1]);
            *(float2 *)&sS[(sr + 8) * VS + n] = make_float2(S[r][2], S[r][3]);
        }
        // GATED_LINEAR: sS is read by no product, so its write needs no barrier before it; the next
        // chunk's barrier orders the buffers
    }
    __syncthreads();
    if (!has_state || !clear) return;
    for (int x = tid; x < DK * BV; x += NT) {
        const int jj = x / DK, i = x % DK;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[i * VS + jj]);
    }
}

// Phase 3, one block of 256 threads per (chunk, value head, sequence):
// O = scale (d(t, -1) Q S_c + P V'), P = Q K^T (.) decay (s <= t), in blocks of 64 value columns.
// FULL: as for delta_prep_kernel.
template <bool FULL> __global__ void __launch_bounds__(256) delta_out_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 osm4[];
    const int DKP = FULL ? 128 : a.DKP, DVP = FULL ? 128 : a.DVP, QS = q_stride(DKP);
    const int ks = max(kC * QS, DKP * kVSC);
    float *sQ = (float *)osm4, *sK = sQ + kC * QS, *sP = sK + ks, *sV = sP + kC * kPS;
    float *sL = sV + kC * kVSC, *sSg = sL + kC, *sD0 = sSg + kC, *sDl = sD0 + kC, *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    float *sS = sK;  // S_c blocks in place of K once P is made
    const int tid = threadIdx.x;
    const int c = blockIdx.x % a.NC, h = (blockIdx.x / a.NC) % a.Hv, b = blockIdx.x / (a.NC * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const long long t0 = (long long)c * kC, u = ((long long)b * a.Hv + h) * a.NC + c;
    const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);

    const gate_regs gr = load_gates(a, h, t0, b, n, false);
    if (!FULL || n < kC) {
        for (int x = tid; x < 2 * kC * QS; x += NT) sQ[x] = 0.0f;  // sQ, sK adjacent: padding stays zero
        __syncthreads();
    }
    if (FULL) {  // q and k normalized and rounded on the way (the third job has no rows)
        stage3_128<NT>({sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.type, n, 128},
                       {sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, 128},
                       {sK, QS, nullptr, 0, TG_TYPE_F32, 0, 128}, a.l2norm);
    } else if (a.qk_vec) {
        stage3<NT>({sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.type, n, a.Dk},
                   {sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, a.Dk}, {});
    } else {
        stage_qk(sQ, QS, a.q, hk, t0, b, n, a);
        stage_qk(sK, QS, a.k, hk, t0, b, n, a);
    }
    put_gates(gr, sL, nullptr);
    __syncthreads();
    prefix_by_warp0<FULL>(sL, sSg, sZ, sD0, sDl, sEp, sEm, sTab, a.log_gate);
    if (!FULL) norm_rows<NW>(sQ, sK, QS, n, a.Dk, a.l2norm);
    __syncthreads();
    const bool tab = FULL && (*sTab & 1);
    auto decay = [&](int t, int s) { return phase_decay<FULL>(sL, sSg, sZ, sEp, sEm, tab, t, s); };
    if (!FULL && tid < kC) sD0[tid] = chunk_decay(sL, sSg, sZ, tid, -1);
    auto q_at = [&](int m, int k) { return lda_rows(sQ, QS, m, k); };
    {
        const wtiles<NW, 2, 2, FULL> wt(0, kC, kC);
        float acc[2][2][4];
        zero(acc);
        wmma1<NW, 2, 2, false>(acc, wt, DKP, q_at, [&](int k, int s) { return ldb_rows(sK, QS, k, s); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int s) {
            for (int d = 0; d < 2; d++)
                sP[t * kPS + s + d] = s + d <= t ? tf32r(acc[r][mi][e + d] * decay(t, s + d)) : 0.0f;
        });
    }
    const float *Sc = a.S + u * DKP * DVP, *V = a.U + u * kC * DVP;
#pragma unroll 1
    for (int jb = 0; jb < DVP; jb += 64) {
        const int nc = min(64, DVP - jb), cu = nc / 4;
        __syncthreads();  // P is made (first block); the previous block's reads are done
        for (int x = tid; x < DKP * cu; x += NT) {
            const int i = x / cu, j = 4 * (x - i * cu);
            *(float4 *)&sS[i * kVSC + j] = __ldg((const float4 *)&Sc[(long long)i * DVP + jb + j]);
        }
        for (int x = tid; x < kC * cu; x += NT) {
            const int t = x / cu, j = 4 * (x - t * cu);
            *(float4 *)&sV[t * kVSC + j] = __ldg((const float4 *)&V[t * DVP + jb + j]);
        }
        __syncthreads();
        const wtiles<NW, 2, 2, FULL> wt(0, kC, nc);  // 64 x 64: 16 tiles of 32 x 8, one pass
        float acc[2][2][4];
        zero(acc);
        wmma1<NW, 2, 2, false>(acc, wt, DKP, q_at, [&](int k, int j) { return ldb_cols(sS, kVSC, k, j); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
            acc[r][mi][e] = keep_zero_mul(sD0[t], acc[r][mi][e]);
            acc[r][mi][e + 1] = keep_zero_mul(sD0[t], acc[r][mi][e + 1]);
        });
        wmma1<NW, 2, 2, true>(acc, wt, kC, [&](int m, int k) { return lda_rows(sP, kPS, m, k); },
                              [&](int k, int j) { return ldb_cols(sV, kVSC, k, j); });
        for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
            if (t >= n || jb + j >= a.Dv) return;
            store_pair(tg_cuda_ptr(a.o, jb + j, h, t0 + t, b), a.o.nb[0], a.o.type, a.scale * acc[r][mi][e],
                       a.scale * acc[r][mi][e + 1], jb + j + 1 < a.Dv, a.o_pair);
        });
    }
}

// Bytes of the chunk-parallel form's scratch, and the regions' offsets (floats, 256-byte aligned):
// W (GATED_DELTA), Kd^T, U (64 rows / columns each per unit), S_c (DKP x DVP per unit), gamma.
size_t phase_scratch(long long units, int DKP, int DVP, bool delta, size_t off[5]) {
    const size_t per[5] = {delta ? (size_t)kC * DKP : 0, (size_t)kC * DKP, (size_t)kC * DVP, (size_t)DKP * DVP, 1};
    size_t total = 0;
    for (int i = 0; i < 5; i++) off[i] = total, total += ((size_t)units * per[i] + 63) / 64 * 64;
    return total * sizeof(float);
}

}  // namespace

tg_status run_phases(tg_backend *be, const tg_tensor *dst, const chunk_args &c, int optin, bool *taken) {
    const char *call = "delta_rule";
    tg_cuda_impl *cu = tg_cuda(be);
    *taken = false;
    phase_args a = {};
    a.q = c.q, a.k = c.k, a.v = c.v, a.g = c.g, a.beta = c.beta, a.state = c.state, a.o = c.o;
    a.Dk = c.Dk, a.Dv = c.Dv, a.Hk = c.Hk, a.Hv = c.Hv, a.T = c.T;
    a.delta = c.delta, a.log_gate = c.log_gate, a.l2norm = c.l2norm, a.scale = c.scale, a.err = c.err;
    a.DKP = c.DKP, a.DVP = (c.Dv + 7) / 8 * 8;
    const long long NC = (c.T + kC - 1) / kC, units = NC * c.Hv * c.B;
    if (NC > INT_MAX || units * kC > INT_MAX) return TG_OK;
    a.NC = (int)NC;
    // the state pass: BV of 64 (or the knob's) value columns, not past DVP, halved while the grid still
    // fits one wave of SMs (fewer slices re-read W and Kd fewer times); two load buffers where they fit
    const int sms = cu->sm_count > 0 ? cu->sm_count : 132;
    const int knob = cu->sig.delta_chunk_bv;
    int BV = knob > 0 ? knob : 64;
    while (BV > 8 && BV / 2 >= a.DVP) BV /= 2;
    auto slices = [&](int bv) { return (long long)(a.DVP + bv - 1) / bv; };
    while (knob == 0 && BV > 8 && c.B * c.Hv * slices(BV / 2) <= sms) BV /= 2;
    while (BV > 8 && state_smem(a.DKP, BV, 1) > (size_t)optin) BV /= 2;
    a.BV = BV, a.nslices = (int)slices(BV), a.nbuf = state_smem(a.DKP, BV, 2) <= (size_t)optin ? 2 : 1;
    const size_t sp = prep_smem(a.DKP, a.DVP), so = out_smem(a.DKP);
    size_t ss = state_smem(a.DKP, BV, a.nbuf);
    if (std::max(sp, std::max(ss, so)) > (size_t)optin) return TG_OK;
    size_t off[5];
    const size_t bytes = phase_scratch(units, a.DKP, a.DVP, a.delta, off);
    if (bytes > kPhaseScratchBudget) return TG_OK;
    float *scr = nullptr;
    tg_status s = tg_cuda_scratch(be, bytes, (void **)&scr, call);
    if (s != TG_OK) return s;
    a.W = scr + off[0], a.Kd = scr + off[1], a.U = scr + off[2], a.S = scr + off[3], a.gam = scr + off[4];
    a.qk_vec = c.qk_vec, a.o_pair = c.o_pair;
    a.v_vec = rows16(dst->src[2], c.Dv, 0);
    // compile-time sizes where Dk = Dv = 128 with 16-byte rows: the prep and output kernels' FULL
    // instances, and the state pass in registers (delta_state128_kernel) where two load buffers fit;
    // not with knob delta_chunk_phase_full 2 or delta_chunk_generic 1
    const bool full = cu->sig.delta_chunk_phase_full != 2 && cu->sig.delta_chunk_generic == 0 && c.Dk == 128 &&
                      c.Dv == 128 && a.qk_vec && a.v_vec;
    const bool s128 = full && a.nbuf == 2 && BV >= 8 && BV <= 64 && (BV & (BV - 1)) == 0;  // (a knob may give any BV)
    // W and Kd^T as F16 rows where the state pass in registers runs and its three buffers fit: by
    // default at 16 columns or fewer (gdn.long, BV 16: 1,621 -> 1,509 us on an H100), where each
    // block's copies are most of its time; not at 64 (gdn.prefill.bf16/3p 1,416 -> 1,483: 231
    // registers instead of 136, and that pass waits less on its copies); knob delta_chunk_h16
    const int hk = cu->sig.delta_chunk_h16;
    a.h16 = s128 && (hk == 1 || (hk == 0 && BV <= 16)) && state128_smem(BV, true) <= (size_t)optin;
    using state_fn = void (*)(phase_args);
    state_fn state = delta_state_kernel;
    int si = 1;
    if (s128) {
        const int ib = BV == 8 ? 0 : BV == 16 ? 1 : BV == 32 ? 2 : 3;
        static const state_fn tab[2][2][4] = {
            {{delta_state128_kernel<8, false, false>, delta_state128_kernel<16, false, false>,
              delta_state128_kernel<32, false, false>, delta_state128_kernel<64, false, false>},
             {delta_state128_kernel<8, true, false>, delta_state128_kernel<16, true, false>,
              delta_state128_kernel<32, true, false>, delta_state128_kernel<64, true, false>}},
            {{delta_state128_kernel<8, false, true>, delta_state128_kernel<16, false, true>,
              delta_state128_kernel<32, false, true>, delta_state128_kernel<64, false, true>},
             {delta_state128_kernel<8, true, true>, delta_state128_kernel<16, true, true>,
              delta_state128_kernel<32, true, true>, delta_state128_kernel<64, true, true>}}};
        state = tab[a.h16][a.delta ? 1 : 0][ib], si = 3 + 4 * (a.delta ? 1 : 0) + ib + (a.h16 ? 10 : 0);
        ss = state128_smem(BV, a.h16);
    }
    const state_fn prep = full ? delta_prep_kernel<true> : delta_prep_kernel<false>;
    const state_fn out = full ? delta_out_kernel<true> : delta_out_kernel<false>;
    size_t *set = cu->delta_smem_set + tg_cuda_impl::TG_CUDA_DSMEM_PHASES;  // each kernel's dynamic shared-memory limit (grow-only)
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_PHASES + 21 <= tg_cuda_impl::TG_CUDA_DSMEM_COUNT, "slots 0-20 of the phases");
    if ((s = smem_limit(be, prep, sp, set[full ? 11 : 0], call)) != TG_OK) return s;
    if ((s = smem_limit(be, state, ss, set[si], call)) != TG_OK) return s;
    if ((s = smem_limit(be, out, so, set[full ? 12 : 2], call)) != TG_OK) return s;
    *taken = true;
    prep<<<(unsigned)units, 256, sp, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    state<<<(unsigned)((long long)a.nslices * c.Hv * c.B), 256, ss, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    out<<<(unsigned)units, 256, so, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    snprintf(cu->delta_name, sizeof(cu->delta_name), "chunked-3p/dk%d/bv%d/nb%d%s%s%s", a.DKP, BV, a.h16 ? 3 : a.nbuf,
             s128 ? "/full-s128" : full ? "/full" : "", a.h16 ? "/h16" : "", a.qk_vec ? "" : "/scalar");
    cu->delta_name_key[0] = -1;  // the scan's cached name is gone
    cu->sig_last[TG_CUDA_SIG_DELTA] = cu->delta_name;
    return TG_OK;
}

}  // namespace tg_chunk
