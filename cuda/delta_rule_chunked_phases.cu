// delta_rule_chunked_phases.cu - the chunk-parallel form of the chunked delta rule, for calls whose
// (sequence, value head) pairs alone would not fill the GPU (cuda/delta_rule_chunked.cu chooses;
// bench/NOTES.md has the numbers). Three kernels (four with the gate kernel) over the backend's
// scratch, per (sequence, value head, chunk) unit W, Kd^T, U, S_c and gamma:
//   delta_gates_kernel  (where a BF16 wgmma prep or output kernel runs) per unit, one warp: the
//                       chunk's gate arrays (chunk_gates) and gamma, for those kernels to copy
//   delta_prep_kernel   per unit: gate prefix, A, T = (I + A)^-1, W = T (beta d(t,-1) K),
//                       U = T (beta V), Kd^T = (K (.) d(C-1, t))^T, gamma = d(C-1, -1); with BF16
//                       k and v on Hopper, delta_prep_wgb_kernel instead (BF16 wgmma, near-F32
//                       products: cuda/sm90a/delta_rule_prep_wgb.cu)
//   state pass          per (Dv slice, value head, sequence), the only sequential part: per
//                       chunk S_c = S; U <- V' = U - W S; S = gamma S + Kd^T V' (next chunk's
//                       operands in flight by cp.async): cuda/delta_rule_state_pass.cu
//   delta_out_kernel    per unit: O = scale (d(t,-1) Q S_c + (Q K^T (.) decay) V'); with BF16 q and
//                       k at Dk = Dv = 128 on Hopper, delta_out_wgb_kernel instead (BF16 wgmma,
//                       near-F32 products: cuda/sm90a/delta_rule_out_wgb.cu); none where the state
//                       pass makes the output (fo: BF16 q, k and v, F16 rows by bulk copies, BV <=
//                       32; delta_prep_wgb_kernel then also writes Q's and P's F16 rows)
// Products: chunk_mma.cuh (TF32 mma.sync, ldmatrix A fragments).
#include <algorithm>
#include <climits>

#include "delta_rule_phases.cuh"

namespace tg_chunk {
namespace {

// Most scratch the chunk-parallel form takes (grow-only, kept by the backend); beyond it the
// single-kernel form runs, which needs none.
constexpr size_t kPhaseScratchBudget = (size_t)4 << 30;

constexpr int kVSC = 72;  // row stride of the output pass's 64-column blocks
__host__ __device__ inline int vstr(int n) { return (n + 31) / 32 * 32 + 8; }
size_t prep_smem(int DKP, int DVP) {
    // + 192: the h16 rows' largest magnitudes (bits), 64 of W and 128 of Kd^T
    return ((size_t)kC * q_stride(DKP) + (size_t)kC * vstr(DVP) + 2 * (size_t)kC * kPS + 8 * (size_t)kC + 4 + 192) * 4;
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
    const int flags = FULL ? *sTab : 0;
    // (FULL) flags 2: every d(t, -1) finite, 4: every d(C-1, t) finite: products by them need no keep-zero test
    const bool tab = flags & 1, fin0 = flags & 2, finl = flags & 4;
    auto decay = [&](int t, int s) { return phase_decay<FULL>(sL, sSg, sZ, sEp, sEm, tab, t, s); };
    if (!FULL && tid < kC) sD0[tid] = chunk_decay(sL, sSg, sZ, tid, -1), sDl[tid] = chunk_decay(sL, sSg, sZ, kC - 1, tid);
    if (tid == 0) a.gam[u] = chunk_decay(sL, sSg, sZ, kC - 1, -1);
    if (a.delta) {
        const wtiles<NW, 2, 2, FULL, FULL> wt(0, kC, kC);  // 16 tiles of 32 x 8 (FULL: warp tiles of 32 x 16): one pass
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
    by_mul(finl, [&](auto mul) {
        for (int x = tid; x < kC * DKP / 4; x += NT) {
            const int wb = x >> 5, l = x & 31, i = 8 * (wb >> 2) + (l >> 2), t = 16 * (wb & 3) + 4 * (l & 3);
            float y[4];
#pragma unroll
            for (int e = 0; e < 4; e++) y[e] = tf32r(mul(sDl[t + e], sK[(t + e) * QS + i]));
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
    });
    if (a.delta) {
        if constexpr (FULL) invert_unit_lower_doubling<NT>(sA, sT);
        else invert_unit_lower<NT>(sA, sT);
    }
    __syncthreads();
    if (h16) {  // Kd^T's rows scaled into F16, 8 tokens per 16-byte store (threads along i: sK's
                // column reads meet no bank twice), then each row's inverse scale
        __half *K16 = (__half *)Kd;
        by_mul(finl, [&](auto dmul) {
            for (int x = tid; x < DKP * (kC / 8); x += NT) {
                const int i = x & (DKP - 1), tg = x / DKP;
                float mul, inv;
                h16_row_scale(rmK[i], &mul, &inv);
                unsigned short hs[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const int t = 8 * tg + e;
                    hs[h16_pos(e)] = __half_as_ushort(__float2half_rn(tf32r(dmul(sDl[t], sK[t * QS + i])) * mul));
                }
                *(uint4 *)&K16[i * kH16KLD + 8 * tg] = make_uint4(hs[0] | (unsigned)hs[1] << 16, hs[2] | (unsigned)hs[3] << 16,
                                                             hs[4] | (unsigned)hs[5] << 16, hs[6] | (unsigned)hs[7] << 16);
                if (tg == 0) {  // the row's inverse scale, and its padding zeroed (copied, never read)
                    Kd[kH16KScale + i] = inv;
                    ((uint4 *)Kd)[i * (kH16KLD / 8) + kC / 8] = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        });
        __syncthreads();  // sK is read before K' replaces it
    }
    // K' = beta d(t, -1) K (in place of K), V' = beta V (in place of V); FULL: 4 elements a step (the
    // per-element loops held ~1/4 of the kernel's stall samples, session 44)
    float *U = a.U + u * kC * DVP;
    if constexpr (FULL) {
        if (a.delta)
            by_mul(fin0, [&](auto mul) {
                for (int x = tid; x < kC * 32; x += NT) {
                    const int t = x >> 5, i = 4 * (x & 31);
                    const float bt = sB[t], dt = sD0[t];
                    float4 k = *(const float4 *)&sK[t * QS + i];
                    k.x = tf32r(bt * mul(dt, k.x)), k.y = tf32r(bt * mul(dt, k.y));
                    k.z = tf32r(bt * mul(dt, k.z)), k.w = tf32r(bt * mul(dt, k.w));
                    *(float4 *)&sK[t * QS + i] = k;
                }
            });
        for (int x = tid; x < kC * 32; x += NT) {
            const int t = x >> 5, j = 4 * (x & 31);
            const float bt = sB[t];
            float4 y = *(const float4 *)&sV[t * VS + j];
            y.x = tf32r(bt * y.x), y.y = tf32r(bt * y.y), y.z = tf32r(bt * y.z), y.w = tf32r(bt * y.w);
            if (a.delta) *(float4 *)&sV[t * VS + j] = y;
            else *(float4 *)&U[t * DVP + j] = y;
        }
    } else {
        for (int x = tid; x < kC * DKP && a.delta; x += NT) {
            const int t = x / DKP, i = x - t * DKP;
            sK[t * QS + i] = tf32r(sB[t] * keep_zero_mul(sD0[t], sK[t * QS + i]));
        }
        for (int x = tid; x < kC * DVP; x += NT) {
            const int t = x / DVP, j = x - t * DVP;
            const float y = tf32r(sB[t] * sV[t * VS + j]);
            if (a.delta) sV[t * VS + j] = y;
            else U[t * DVP + j] = y;
        }
    }
    if (!a.delta) return;
    __syncthreads();
    // W = T K', U = T V' (T lower triangular), straight to the scratch
    auto t_at = [&](int m, int k) { return lda_rows(sT, kPS, m, k); };
    float *W = a.W + u * kC * DKP;
    using WT = wtiles<NW, 2, 2, FULL, FULL>;
    if (h16) {
        // both passes' tiles held (FULL: 64 x 128, a pass of 32 rows in warp tiles of 32 x 16), rounded to TF32
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
        __half *stg = (__half *)sK;  // 64 rows of 128 halves (the global rows without their padding)
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
        for (int x = tid; x < kC * 16; x += NT) ((uint4 *)W)[(x >> 4) * (kH16WLD / 8) + (x & 15)] = ((const uint4 *)stg)[x];
        if (tid < kC) {
            float mul, inv;
            h16_row_scale(rmW[tid], &mul, &inv);
            W[kH16WScale + tid] = inv;
            ((uint4 *)W)[tid * (kH16WLD / 8) + 16] = make_uint4(0u, 0u, 0u, 0u);  // the row's padding (copied, never read)
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
        const wtiles<NW, 2, 2, FULL, FULL> wt(0, kC, kC);
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
        const wtiles<NW, 2, 2, FULL> wt(0, kC, nc);  // 64 x 64: 16 tiles of 32 x 8, one pass (ROWS here: 52 bytes of spills, gdn.long the same, session 38)
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
// W (GATED_DELTA), Kd^T, U (64 rows / columns each per unit; not for GATED_LINEAR with fo, whose state
// pass reads v itself), S_c (DKP x DVP per unit), gamma, the gate arrays (read only where the BF16 wgmma
// kernels run; 2 KB a unit, allocated either way).
size_t phase_scratch(long long units, int DKP, int DVP, bool delta, bool fo, size_t off[8]) {
    // W, Kd^T, U, S_c (not with fo), gamma, the gate arrays, fo's Q and P rows
    const size_t per[8] = {delta ? (size_t)kC * DKP : 0, (size_t)kC * DKP, delta || !fo ? (size_t)kC * DVP : 0, fo ? 0 : (size_t)DKP * DVP, 1,
                           (size_t)kGateWords, fo ? (size_t)kH16QFloats : 0, fo ? (size_t)kH16PFloats : 0};
    size_t total = 0;
    for (int i = 0; i < 8; i++) off[i] = total, total += ((size_t)units * per[i] + 63) / 64 * 64;
    return total * sizeof(float);
}

// Phase 0 where the BF16 wgmma prep or output kernel runs: one warp per unit makes its gate arrays
// (chunk_gates: the prefix, the decays, the factor tables and flags) and gamma, so that those
// kernels copy them with their tiles instead of waiting on one warp's chain of ~500 dependent
// instructions (a quarter of the prep kernel's time at gdn.long, session 45).
__global__ void __launch_bounds__(256) delta_gates_kernel(const phase_args a, long long units) {
    __shared__ float sg[8][kGateWords];
    gates_warp(a, units, sg[threadIdx.x >> 5]);
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
    const int sms = tg_cuda_sms(cu);
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
    a.qk_vec = c.qk_vec, a.o_pair = c.o_pair;
    a.v_vec = rows16(dst->src[2], c.Dv, 0);
    // compile-time sizes where Dk = Dv = 128 with 16-byte rows: the prep and output kernels' FULL
    // instances, and the state pass in registers (delta_state128_kernel) where two load buffers fit;
    // not with knob delta_chunk_phase_full 2 or delta_chunk_generic 1
    const bool full = cu->sig.delta_chunk_phase_full != 2 && cu->sig.delta_chunk_generic == 0 && c.Dk == 128 &&
                      c.Dv == 128 && a.qk_vec && a.v_vec;
    const bool s128 = full && a.nbuf == 2 && BV >= 8 && BV <= 64 && (BV & (BV - 1)) == 0;  // (a knob may give any BV)
    const phase_fn prep = full ? delta_prep_kernel<true> : delta_prep_kernel<false>;
    // the prep kernel on BF16 wgmma where the full instances run with BF16 k and v (knobs delta_chunk_wg
    // and delta_chunk_prep 0, a device with the build's wgmma code): the same outputs from near-F32 products, two blocks
    // an SM (delta_prep_kernel<true>: TF32 products)
    const bool pwgb = full && c.k.type == TG_TYPE_BF16 && c.v.type == TG_TYPE_BF16 && cu->sig.delta_chunk_wg == 0 &&
                      cu->sig.delta_chunk_prep == 0 && tg_cuda_delta_wg_ready(be) && tg_cuda_delta_prep_wgb_smem() <= (size_t)optin;
    // the output kernel on BF16 wgmma where the full instances run with BF16 q and k (knob
    // delta_chunk_wg 0, a device with the build's wgmma code): near-F32 products where
    // delta_out_kernel rounds to TF32
    const bool owgb = full && c.q.type == TG_TYPE_BF16 && c.k.type == TG_TYPE_BF16 && cu->sig.delta_chunk_wg == 0 &&
                      tg_cuda_delta_wg_ready(be) && tg_cuda_delta_out_wgb_smem() <= (size_t)optin;
    // the output made by the state pass (knob delta_chunk_fo 0) where both BF16 kernels would run, the F16
    // rows can come by bulk copies, at 32 value columns or fewer and where its buffers fit: the prep kernel
    // writes Q's and P's F16 rows, no output kernel runs (TF32 products for the output; gdn.long 944-952
    // -> 847-851 us, gdn.x32.bf16 900-907 -> 730-755 on an H100, session 47)
    const int fk = cu->sig.delta_chunk_fo;
    const bool fo_ok = s128 && pwgb && owgb && BV <= 32 && fk != 1 && tg_cuda_delta_bulk_ready(be) &&
                       state128_smem(BV, true, true, false, !a.delta) <= (size_t)optin;
    // W and Kd^T as F16 rows where the state pass in registers runs and its three buffers fit: by
    // default at 16 columns or fewer (gdn.long, BV 16: 1,621 -> 1,509 us on an H100), where each
    // block's copies are most of its time, and at 32 for GATED_DELTA since the rows arrive by bulk
    // copies (gdn.x32.bf16 948-955 -> 906-912 us, session 46; GATED_LINEAR's gla.x32.bf16 673 -> 711:
    // F32 rows) and for either mode where the state pass makes the output (gla.x32.bf16 661 -> 545,
    // session 47); not at 64 (gdn.prefill.bf16/3p 1,416 -> 1,483: 231 registers instead of 136, and
    // that pass waits less on its copies); knob delta_chunk_h16
    const int hk = cu->sig.delta_chunk_h16;
    a.h16 = s128 && (hk == 1 || (hk == 0 && (BV <= 16 || (BV <= 32 && (a.delta || fo_ok))))) &&
            state128_smem(BV, true) <= (size_t)optin;
    // F16 rows by bulk copies (knob delta_chunk_bulk 0) where the device and the build's code are
    // compute capability 9.0 or later
    const bool bulk = a.h16 && tg_cuda_delta_bulk_ready(be);
    a.fo = fo_ok && a.h16 && bulk;
    // GATED_LINEAR's fo pass: the state in two shared copies where they fit, unless knob delta_chunk_fo is 2
    // (one copy and a second barrier a chunk: session 47's form; gla.x32.bf16 469 -> 467 us, session 49)
    a.s2 = a.fo && !a.delta && fk != 2 && state128_smem(BV, true, true, true, true) <= (size_t)optin;
    int si = 0;
    const phase_fn state = state_pass_kernel(BV, a.delta, a.h16, bulk, a.fo, s128, &si);
    if (s128) ss = state128_smem(BV, a.h16, a.fo, a.s2, a.fo && !a.delta);
    const phase_fn out = full ? delta_out_kernel<true> : delta_out_kernel<false>;
    size_t off[8];
    const size_t bytes = phase_scratch(units, a.DKP, a.DVP, a.delta, a.fo, off);
    if (bytes > kPhaseScratchBudget) return TG_OK;
    float *scr = nullptr;
    tg_status s = tg_cuda_scratch(be, bytes, (void **)&scr, call);
    if (s != TG_OK) return s;
    a.W = scr + off[0], a.Kd = scr + off[1], a.U = a.delta || !a.fo ? scr + off[2] : nullptr;
    a.S = a.fo ? nullptr : scr + off[3], a.gam = scr + off[4];
    a.G = scr + off[5], a.Qh = a.fo ? scr + off[6] : nullptr, a.Ph = a.fo ? scr + off[7] : nullptr;
    size_t *set = cu->delta_smem_set + tg_cuda_impl::TG_CUDA_DSMEM_PHASES;  // each kernel's dynamic shared-memory limit (grow-only)
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_PHASES + 35 <= tg_cuda_impl::TG_CUDA_DSMEM_WG, "slots 0-34 of the phases");
    if ((s = pwgb ? tg_cuda_delta_prep_wgb_limit(be, a.delta, a.fo) : smem_limit(be, prep, sp, set[full ? 11 : 0], call)) != TG_OK)
        return s;
    if ((s = smem_limit(be, state, ss, set[si], call)) != TG_OK) return s;
    if (!a.fo && (s = owgb ? tg_cuda_delta_out_wgb_limit(be) : smem_limit(be, out, so, set[full ? 12 : 2], call)) != TG_OK)
        return s;
    *taken = true;
    if (pwgb || owgb) {  // the gate arrays (and gamma) for them
        delta_gates_kernel<<<(unsigned)((units + 7) / 8), 256, 0, cu->stream>>>(a, units);
        TG_CUDA_LAUNCHED(be, call);
    }
    if (pwgb) tg_cuda_delta_prep_wgb_launch(be, a, (unsigned)units);
    else prep<<<(unsigned)units, 256, sp, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    state<<<(unsigned)((long long)a.nslices * c.Hv * c.B), state128_threads(a.fo), ss, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    if (!a.fo) {
        if (owgb) tg_cuda_delta_out_wgb_launch(be, a, (unsigned)units);
        else out<<<(unsigned)units, 256, so, cu->stream>>>(a);
        TG_CUDA_LAUNCHED(be, call);
    }
    snprintf(cu->delta_name, sizeof(cu->delta_name), "chunked-3p/dk%d/bv%d/nb%d%s%s%s%s%s%s", a.DKP, BV,
             s128 ? state128_nbuf(a.h16, a.fo, BV) : a.nbuf, s128 ? "/full-s128" : full ? "/full" : "", a.h16 ? "/h16" : "",
             bulk ? "/bulk" : "", a.qk_vec ? "" : "/scalar", pwgb ? "/pwgb" : "", a.fo ? (a.s2 ? "/fo2" : "/fo") : owgb ? "/owgb" : "");
    cu->delta_name_key[0] = -1;  // the scan's cached name is gone
    cu->sig_last[TG_CUDA_SIG_DELTA] = cu->delta_name;
    return TG_OK;
}

void tg_cuda_delta_gates_launch(tg_backend *be, const chunk_args &c, float *G, long long units) {
    delta_gates_kernel<<<(unsigned)((units + 7) / 8), 256, 0, tg_cuda(be)->stream>>>(gates_args(c, G), units);
}

}  // namespace tg_chunk
