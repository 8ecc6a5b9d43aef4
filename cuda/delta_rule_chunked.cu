// delta_rule_chunked.cu - the chunked form of the gated linear / gated
// delta-rule recurrence on tensor cores (ggml_ops/delta_rule_chunked.cpp is
// its readable CPU reference and has the math; docs/ops.md the policy).
// Two forms, chosen per call (tg_cuda_delta_rule_chunked; bench/NOTES.md has the numbers):
// the chunk-parallel form (cuda/delta_rule_chunked_phases.cu) where the (sequence, value head)
// pairs alone would not fill the GPU, and the single-kernel form here where they do, or where its
// full case runs the BF16 wgmma kernel from fewer of them (tg_cuda_delta_single_form).
// Shared pieces: chunk_parts.cuh (staging, gate prefix, inverse), chunk_mma.cuh (products).
//
// The single-kernel form (delta_chunked_kernel):
// one block of NW warps per (value column slice of BV columns,
// value head h, sequence b) walks the chunks of C = 64 tokens in order, with
// its slice of the state S (DKP x BV, F32) in shared memory all the way:
//   1. stage Q, K (zero-padded to DKP, a multiple of 16), the V slice, gates
//      and beta (16-bit q/k/v converted on load), l2-normalize Q and K rows,
//      and build the gate prefix (L, sign, Z) and the decays d(t, -1), d(C-1, t)
//   2. products with F32 accumulation on mma.sync m16n8k8 TF32 tensor cores:
//      P = Q K^T (.) decay (masked, s <= t), A = beta K K^T (.) decay (s < t),
//      Q S (kept in registers), K S -> R = beta (V - d(t,-1) K S)
//   3. T = (I + A)^-1 by blocks of 16 (F32), U = T R (GATED_LINEAR: U = beta V, no T)
//   4. O = scale (d(t,-1) Q S + P U) straight to global memory, and
//      S = d(C-1,-1) S + (K (.) d(C-1, t))^T U in place (the decayed K transposed into the
//      free A/T buffers first, where DKP <= 128, so that its fragments load by ldmatrix)
// The state is read once and written once (skipped when the graph's device
// error record is set: a failed graph leaves it unchanged). Dv is split across
// blocks (BV = 128, 64, 32, 16 or 8 columns, the largest whose shared memory fits,
// smaller while the grid would not fill the GPU, except where the BF16 wgmma kernel runs at 128); the
// per-chunk K-only work
// (P, A, T) is repeated per slice.
#include <algorithm>
#include <climits>
#include <cstring>

#include "chunk_parts.cuh"
#include "delta_rule_chunked.cuh"
#include "delta_rule_phases.cuh"
#include "ops.h"
#include "signature.cuh"

using namespace tg_chunk;

namespace {

// shared memory (bytes) of one block
size_t chunk_smem(int DKP, int BV) {
    const size_t f = 2 * (size_t)kC * q_stride(DKP) + (size_t)kC * v_stride(BV) + (size_t)DKP * v_stride(BV) +
                     3 * (size_t)kC * kPS + 8 * (size_t)kC + 4;
    return f * sizeof(float);
}
// the generic kernel's warp tiles (32 x 8) per warp of the C x BV products: RQ; of the C x C
// products: RP (the full case: RP, MP, RS, MS in delta_chunked_kernel)
template <int NW> constexpr int kRQ = NW == 16 ? 2 : 1;
template <int NW> constexpr int kRP = 16 / NW;

// FULL: the D128 case with fixed sizes (NW 16, Dk = DKP = 128, every slice BV = 128 columns,
// 16-byte row loads): compile-time tiles and strides, unrolled products, leaner staging and norms.
template <int NW, bool FULL>
__global__ void __launch_bounds__(NW * 32, 1) delta_chunked_kernel(const chunk_args a) {
    // FULL: warp tiles of 16 x 16 for the C x C products (RP 2 of MP 1 row block), 32 x 32 for the
    // state update (RS 4 of MS 2); else (16 MT) x 8 tiles round-robin
    constexpr int NT = NW * 32, RQ = kRQ<NW>, RP = FULL ? 2 : kRP<NW>, MP = FULL ? 1 : 2, RS = FULL ? 4 : 2,
                  MS = FULL ? 2 : 4;
    // (the full case on 8 warps of up to 255 registers, RQ = RS = 4, measured 1,219 us against 857 at
    // gdn.prefill: bench/NOTES.md "Session 22")
    static_assert(!FULL || NW == 16, "the full case runs 16 warps");
    extern __shared__ float4 csm4[];
    const int DKP = FULL ? 128 : a.DKP, BV = FULL ? 128 : a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    float *sQ = (float *)csm4, *sK = sQ + kC * QS, *sV = sK + kC * QS, *sS = sV + kC * VS, *sP = sS + DKP * VS;
    float *sA = sP + kC * kPS, *sT = sA + kC * kPS, *sL = sT + kC * kPS, *sSg = sL + kC, *sB = sSg + kC;
    float *sD0 = sB + kC, *sDl = sD0 + kC, *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    float *sKt = sA;  // (K (.) d(C-1, t))^T, DKP rows of kPS over A and T once they are free (DKP <= 128)
    const bool kt = DKP <= 128;

    const int tid = threadIdx.x, warp = FULL ? (tid >> 5) & (NW - 1) : tid >> 5, lane = tid & 31;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk), j0 = slice * BV, nv = min(BV, a.Dv - j0);
    // the error record of earlier kernels of this graph: read now, used before the state store
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;

    // padding (columns past Dk / the slice, rows past the last token) is zero; the state slice
    // S[i][jj] at sS[i * VS + jj], zero past Dk / Dv and without a state. FULL: transposed, at
    // sS[jj * ST + i] (ST = DKP + 4: 128 rows of 132 in the 128 x 136 region), so that the B
    // fragments of Q S and K S come by ldmatrix (ldb_rows) instead of two scalar loads each
    const int ST = DKP + 4;
    auto s_idx = [&](int i, int jj) { return FULL ? jj * ST + i : i * VS + jj; };
    for (int x = tid; x < 2 * kC * QS + kC * VS; x += NT) sQ[x] = 0.0f;
#pragma unroll 4
    for (int x = tid; x < DKP * BV; x += NT) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        sS[s_idx(i, jj)] = has_state && i < a.Dk && jj < nv ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }

    // fragments: Q, K rows (A), K^T (B of Q K^T), S, V / R / U (B), P, T (A)
    auto q_at = [&](int m, int k) { return lda_rows(sQ, QS, m, k); };
    auto k_at = [&](int m, int k) { return lda_rows(sK, QS, m, k); };
    auto kT_at = [&](int k, int n) { return ldb_rows(sK, QS, k, n); };
    auto s_at = [&](int k, int n) { return FULL ? ldb_rows(sS, ST, k, n) : ldb_cols(sS, VS, k, n); };
    auto v_at = [&](int k, int n) { return ldb_cols(sV, VS, k, n); };
    auto p_at = [&](int m, int k) { return lda_rows(sP, kPS, m, k); };
    auto t_at = [&](int m, int k) { return lda_rows(sT, kPS, m, k); };
    // the C x BV products' tiles, fixed: Q S stays in registers (FULL: warp tiles of 32 x 16)
    const wtiles<NW, RQ, 2, FULL, FULL> wq(0, kC, BV);
    float accQS[RQ][2][4];
    char *const obase = tg_cuda_ptr(a.o, j0, h, 0, b);  // o(j0 + j, h, t, b) at + j nb[0] + t nb[2]
#pragma unroll 1
    for (long long t0 = 0; t0 < a.T; t0 += kC) {
        const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);
        __syncthreads();  // the previous chunk is done with every buffer
        // 1. stage the chunk (the last one: rows past n zero; gate neutral, beta 0 there)
        if (n < kC) {
            for (int x = tid; x < (kC - n) * QS; x += NT) sQ[n * QS + x] = 0.0f, sK[n * QS + x] = 0.0f;
            for (int x = tid; x < (kC - n) * VS; x += NT) sV[n * VS + x] = 0.0f;
        }
        // gates and beta: warp 0 (FULL: two per lane, into registers first), else threads t < C
        float gl[2], bl[2];
        if (FULL && warp == 0) load_chunk_gates(a, h, b, t0, n, gl, bl);
        if (FULL) {  // rows of 128 elements, 16-byte units; q and k normalized and rounded on the way
            const row_job jq = {sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.type, n, 128};
            const row_job jk = {sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, 128};
            const row_job jv = {sV, VS, tg_cuda_ptr(a.v, j0, h, t0, b), a.v.nb[2], a.v.type, n, 128};
            stage3_128<NT>(jq, jk, jv, a.l2norm);
            if (t0 + kC < a.T) {  // the next chunk's rows into L2 while this one computes
                const int nn = (int)(a.T - t0 - kC < kC ? a.T - t0 - kC : kC);
                prefetch3_128<NT>({sQ, QS, jq.base + kC * jq.rs, jq.rs, jq.type, nn, 128},
                                  {sK, QS, jk.base + kC * jk.rs, jk.rs, jk.type, nn, 128},
                                  {sV, VS, jv.base + kC * jv.rs, jv.rs, jv.type, nn, 128});
            }
        } else if (a.qk_vec && a.v_vec) {  // all three tensors' loads in flight together
            stage3<NT>({sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.type, n, a.Dk},
                       {sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.type, n, a.Dk},
                       {sV, VS, tg_cuda_ptr(a.v, j0, h, t0, b), a.v.nb[2], a.v.type, n, nv});
        } else {
            stage_rows<NT>(sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.nb[0], a.q.type, n, a.Dk, a.qk_vec);
            stage_rows<NT>(sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.nb[0], a.k.type, n, a.Dk, a.qk_vec);
            stage_rows<NT>(sV, VS, tg_cuda_ptr(a.v, j0, h, t0, b), a.v.nb[2], a.v.nb[0], a.v.type, n, nv, a.v_vec);
        }
        if (FULL && warp == 0) chunk_gates(gl, bl, a.log_gate, sL, sB, sSg, sZ, sD0, sDl, sEp, sEm, sTab);
        if (!FULL && tid < kC) {
            const bool in = tid < n;
            sL[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.g, h, t0 + tid, b, 0)) : (a.log_gate ? 0.0f : 1.0f);
            sB[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.beta, h, t0 + tid, b, 0)) : 0.0f;
        }
        __syncthreads();
        // the gate prefix and the decays by warp 0, the l2 norms of the rows by all (FULL: done)
        if (!FULL) {
            if (warp == 0) {
                gate_prefix(sL, sSg, sZ, a.log_gate);
                __syncwarp();
                chunk_decays(sL, sSg, sZ, sD0, sDl, sEp, sEm, sTab);
            }
            norm_rows<NW>(sQ, sK, QS, n, a.Dk, a.l2norm);
            __syncthreads();
        }
        const int flags = *sTab;
        const bool tab = flags & 1, fin = flags & 2;  // decay tables hold; every d(t, -1) finite
        auto decay = [&](int t, int s) { return decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s); };
        // (K (.) d(C-1, t))^T into sKt (rounded to TF32), where it fits. FULL: a warp takes a patch
        // of 8 rows t by 4 columns i, so that its reads of K (row stride QS = 4 mod 32) hit 32 banks
        // and its writes (kPS = 4 mod 32) 2 lanes a bank, where a warp along t read 4 lanes a bank
        // (the generic kernel keeps that: the patch's index math cost it spills)
        auto put_kt = [&]() {
            static_assert(kC == 64, "8 patches of 8 rows");
            for (int x = tid; x < DKP * kC && kt; x += NT) {
                const int p = x >> 5, l = x & 31;
                const int t = FULL ? (p & 7) * 8 + (l & 7) : x % kC, i = FULL ? (p >> 3) * 4 + (l >> 3) : x / kC;
                sKt[i * kPS + t] = tf32r(sK[t * QS + i] * sDl[t]);
            }
        };

        // 2. P = Q K^T (.) decay (s <= t); A = beta K K^T (.) decay (s < t)
        {
            const wtiles<NW, RP, MP, FULL, FULL> wt(0, kC, kC);
            float acc[RP][MP][4];
            zero(acc);
            if (a.delta) {
                float accA[RP][MP][4];
                zero(accA);
                wmma<NW, RP, MP, false, true>(acc, wt, DKP, q_at, kT_at, accA, k_at);
                for_pairs(wt, [&](int r, int mi, int e, int t, int s) {
                    for (int d = 0; d < 2; d++)  // F32: read by (I + A)^-1 only
                        sA[t * kPS + s + d] = s + d < t ? sB[t] * accA[r][mi][e + d] * decay(t, s + d) : 0.0f;
                });
            } else {
                wmma1<NW, RP, MP, false>(acc, wt, DKP, q_at, kT_at);
            }
            for_pairs(wt, [&](int r, int mi, int e, int t, int s) {
                for (int d = 0; d < 2; d++) sP[t * kPS + s + d] = s + d <= t ? tf32r(acc[r][mi][e + d] * decay(t, s + d)) : 0.0f;
            });
        }
        // Q S (kept for the output); K S -> R = beta (V - d(t, -1) K S) in place of V
        // (GATED_LINEAR: U = beta V, and the decayed K^T now: A and T are not used)
        zero(accQS);
        if (a.delta) {
            float acc[RQ][2][4];
            zero(acc);
            wmma<NW, RQ, 2, false, true>(accQS, wq, DKP, q_at, s_at, acc, k_at);
            by_mul(fin, [&](auto mul) {
                for_pairs(wq, [&](int r, int mi, int e, int t, int j) {
                    for (int d = 0; d < 2; d++) {
                        float &x = sV[t * VS + j + d];
                        x = tf32r(sB[t] * (x - mul(sD0[t], acc[r][mi][e + d])));
                    }
                });
            });
        } else {
            wmma1<NW, RQ, 2, false>(accQS, wq, DKP, q_at, s_at);
            for (int x = tid; x < kC * BV; x += NT) {
                const int t = x / BV, jj = x - t * BV;
                sV[t * VS + jj] = tf32r(sV[t * VS + jj] * sB[t]);
            }
            put_kt();
        }
        __syncthreads();

        // 3. T = (I + A)^-1 (chunk_parts.cuh), then U = T R in place of R, and the decayed K^T
        //    over A and T once they are read
        if (a.delta) {
            if constexpr (FULL) invert_unit_lower_doubling<NT>(sA, sT);
            else invert_unit_lower<NT>(sA, sT);
            __syncthreads();
            float acc[RQ][2][4];
            zero(acc);
            wmma1<NW, RQ, 2, true>(acc, wq, kC, t_at, v_at);
            __syncthreads();  // every read of R and T is done
            for_pairs(wq, [&](int r, int mi, int e, int t, int j) {
                sV[t * VS + j] = tf32r(acc[r][mi][e]), sV[t * VS + j + 1] = tf32r(acc[r][mi][e + 1]);
            });
            put_kt();
            __syncthreads();
        }

        // 4. O = scale (d(t, -1) Q S + P U), rows < n, columns < Dv
        by_mul(fin, [&](auto mul) {
            for_pairs(wq, [&](int r, int mi, int e, int t, int j) {
                accQS[r][mi][e] = mul(sD0[t], accQS[r][mi][e]), accQS[r][mi][e + 1] = mul(sD0[t], accQS[r][mi][e + 1]);
            });
        });
        wmma1<NW, RQ, 2, true>(accQS, wq, kC, p_at, v_at);
        for_pairs(wq, [&](int r, int mi, int e, int t, int j) {
            // columns j, j + 1: one 8-byte store where the output allows it
            if (t >= n || j >= nv) return;
            store_pair(obase + j * a.o.nb[0] + (t0 + t) * a.o.nb[2], a.o.nb[0], a.o.type, a.scale * accQS[r][mi][e],
                       a.scale * accQS[r][mi][e + 1], j + 1 < nv, a.o_pair);
        });
        //    S = d(C-1, -1) S + (K (.) d(C-1, t))^T U: each thread its own elements of S
        {
            const wtiles<NW, RS, MS, FULL, FULL> ws(0, DKP, BV);
            float acc[RS][MS][4];
            zero(acc);
            if (kt) {
                wmma1<NW, RS, MS, false>(acc, ws, kC, [&](int m, int k) { return lda_rows(sKt, kPS, m, k); }, v_at);
            } else {
                const int g = lane >> 2, c = lane & 3;
                wmma1<NW, RS, MS, false>(acc, ws, kC, [&](int m, int k) {
                    frag_a f;
                    f.x[0] = __float_as_uint(sK[(k + c) * QS + m + g] * sDl[k + c]);
                    f.x[1] = __float_as_uint(sK[(k + c) * QS + m + g + 8] * sDl[k + c]);
                    f.x[2] = __float_as_uint(sK[(k + c + 4) * QS + m + g] * sDl[k + c + 4]);
                    f.x[3] = __float_as_uint(sK[(k + c + 4) * QS + m + g + 8] * sDl[k + c + 4]);
                    return f;
                }, v_at);
            }
            const float dl = sD0[kC - 1];
            by_mul(fin, [&](auto mul) {
                for_pairs(ws, [&](int r, int mi, int e, int i, int j) {
                    float &x0 = sS[s_idx(i, j)], &x1 = sS[s_idx(i, j + 1)];
                    x0 = mul(dl, x0) + acc[r][mi][e], x1 = mul(dl, x1) + acc[r][mi][e + 1];
                });
            });
        }
    }
    __syncthreads();
    if (!has_state || !clear) return;
    for (int x = tid; x < a.Dk * nv; x += NT) {
        const int jj = x / a.Dk, i = x - jj * a.Dk;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[s_idx(i, jj)]);
    }
}

}  // namespace

bool tg_cuda_delta_heads_fill(tg_backend *be, long long B, long long Hv) {
    const int sms = tg_cuda_sms(tg_cuda(be));
    return 2 * B * Hv > sms;
}

bool tg_cuda_delta_chunked_covers(long long Dk, long long Dv) {
    return Dk >= 8 && Dk <= 256 && Dk % 8 == 0 && Dv >= 1 && Dv <= 256;
}

namespace {
int optin_smem() {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return optin;
}
// The full case on delta_wgb_kernel would run for dst with BV 128: BF16 q/k/v, Dk 128, whole
// 128-column slices, 16-byte rows, knobs delta_chunk_generic 0, delta_chunk_bv 0 or 128 and
// delta_chunk_wg 0, a device with the build's wgmma code and the shared memory (optin < 0: asked of
// the device, after the cheap checks)
bool wgb_full_case(tg_backend *be, const tg_tensor *dst, int optin) {
    const tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const bool delta = tg_get_params<tg_delta_params>(dst).mode == TG_DELTA_GATED_DELTA;
    if (cu->sig.delta_chunk_generic != 0 || (cu->sig.delta_chunk_bv != 0 && cu->sig.delta_chunk_bv != 128) ||
        cu->sig.delta_chunk_wg != 0 || q->type != TG_TYPE_BF16 || k->type != TG_TYPE_BF16 || v->type != TG_TYPE_BF16 ||
        q->ne[0] != 128 || v->ne[0] % 128 != 0 || !rows16(q, 128, 0) || !rows16(k, 128, 0) || !rows16(v, 128, 0) ||
        !tg_cuda_delta_wg_ready(be))
        return false;
    if (optin < 0) optin = optin_smem();
    return tg_cuda_delta_wgb_smem(delta) <= (size_t)optin && chunk_smem(128, 128) <= (size_t)optin;
}
}  // namespace

namespace {
// GATED_LINEAR's segments where delta_wgb_kernel's full case runs for dst (knob delta_chunk_seg):
// how many (1: none) and their tokens (*tseg, whole chunks; the last segment shorter). Segment j's
// state is the call's state carried over the segments before it, whose own states from zero come
// first (delta_wgb_seg_kernel<1>), so that nseg times the blocks walk T / nseg tokens each. Auto:
// where the (slice, value head, sequence) blocks fill at most half the SMs, as many segments as keep
// blocks x segments within the SM count, each of at least kSegMinChunks chunks (the states' pass
// costs about half a chunk of the output pass), at most kMaxSeg (the last segment's blocks combine
// the others' states: 64 KB each), from kFewHeadsMinT tokens (below it AUTO keeps its choices: the
// scan up to T 1,023 at these heads); both: scratch of at most kSegScratch bytes (64 KB a block and
// segment), else fewer segments
constexpr int kMaxSeg = 16, kSegMinChunks = 4;
constexpr long long kSegScratch = 256LL << 20;
// delta_wgb_kernel's gate arrays made beforehand (chunk_args::G) up to this much scratch (2,064 bytes a
// chunk and value head: ~130,000 of them, 8.3M tokens x value heads), else by the kernel's warp 0
constexpr long long kGateScratch = 256LL << 20;
int seg_plan(const tg_cuda_impl *cu, const tg_tensor *dst, long long *tseg) {
    const tg_tensor *v = dst->src[2];
    const int knob = cu->sig.delta_chunk_seg;
    *tseg = 0;
    if (tg_get_params<tg_delta_params>(dst).mode == TG_DELTA_GATED_DELTA || knob == 1) return 1;
    const long long blocks = v->ne[3] * v->ne[1] * (v->ne[0] / 128), T = dst->src[0]->ne[2], nch = (T + kC - 1) / kC;
    const int sms = tg_cuda_sms(cu);
    if (knob < 2 && T < kFewHeadsMinT) return 1;
    long long n = knob >= 2 ? knob : 2 * blocks <= sms ? sms / blocks : 1;
    n = std::min<long long>(std::min<long long>(n, kMaxSeg), knob >= 2 ? nch : nch / kSegMinChunks);
    n = std::min<long long>(n, kSegScratch / (blocks * 65536));
    if (n < 2) return 1;
    const long long cps = (nch + n - 1) / n;  // chunks a segment
    n = (nch + cps - 1) / cps;
    if (n < 2) return 1;
    *tseg = cps * kC;
    return (int)n;
}

// The form for dst: true the single-kernel one (knob delta_chunk_fused 1 / 2 forces it / the chunk-
// parallel one; else heads that fill the GPU, or the rule below); *wgb: whether the single-kernel
// form's full case runs delta_wgb_kernel (then BV stays 128, whichever form was chosen). optin: the
// device's shared memory per block, or < 0 (asked only where needed).
bool single_form(tg_backend *be, const tg_tensor *dst, int optin, bool *wgb) {
    const tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *v = dst->src[2];
    const long long B = v->ne[3], Hv = v->ne[1], Dv = v->ne[0];
    *wgb = wgb_full_case(be, dst, optin);
    if (cu->sig.delta_chunk_fused != 0) return cu->sig.delta_chunk_fused == 1;
    if (tg_cuda_delta_heads_fill(be, B, Hv)) return true;
    if (!*wgb) return false;
    long long tseg = 0;
    if (seg_plan(cu, dst, &tseg) >= 2) return true;  // GATED_LINEAR's segments (above)
    const int sms = tg_cuda_sms(cu);
    // blocks of at least 5/12 (GATED_DELTA) or 2/7 (GATED_LINEAR) of the SMs: on an H100 the kernel
    // takes ~14.8 / ~6.6 us a chunk whatever the grid, the chunk-parallel form ~1,060-1,140 / ~720 us
    // per 262,144 head-tokens (since its state pass's 16-byte stores), so the forms cross near 55 / 38
    // blocks of 132 SMs (bench rows gdn.x*, gla.x*; bench/NOTES.md "Session 44"). Measured again in
    // sessions 45-46, GATED_DELTA's chunk-parallel form is faster at 64 pairs too (gdn.x64.bf16, BV 64
    // with F32 rows: 900-914 us against the single kernel's 937-980; 48: 943-964 against 1,270-1,312),
    // so the single kernel keeps GATED_DELTA's fewer heads only for prompts shorter than kFewHeadsMinT
    // (where the other form's fixed costs weigh, and where AUTO's tensor path needs this form at
    // these heads, cuda/delta_rule.cu)
    const bool delta = tg_get_params<tg_delta_params>(dst).mode == TG_DELTA_GATED_DELTA;
    const long long T = dst->src[0]->ne[2];
    return delta ? B * Hv * (Dv / 128) * 12 >= 5LL * sms && T < kFewHeadsMinT : B * Hv * (Dv / 128) * 7 >= 2LL * sms;
}
}  // namespace

bool tg_cuda_delta_single_form(tg_backend *be, const tg_tensor *dst) {
    bool wgb = false;
    return single_form(be, dst, -1, &wgb);
}

bool tg_cuda_delta_chunked_full(tg_backend *be, const tg_tensor *dst) {
    const tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    bool wgb = false;
    if (!single_form(be, dst, -1, &wgb)) return false;
    if (wgb) return true;  // (BV 128, and every condition below holds)
    // else BV 128 needs heads that fill the GPU (knob delta_chunk_fused 1 without them may halve
    // it, so AUTO then keeps its threshold of 64)
    if (!tg_cuda_delta_heads_fill(be, q->ne[3], v->ne[1])) return false;
    return cu->sig.delta_chunk_generic == 0 && (cu->sig.delta_chunk_bv == 0 || cu->sig.delta_chunk_bv == 128) &&
           q->ne[0] == 128 && v->ne[0] % 128 == 0 && chunk_smem(128, 128) <= (size_t)optin_smem() && rows16(q, 128, 0) &&
           rows16(k, 128, 0) && rows16(v, 128, 0);
}

tg_status tg_cuda_delta_rule_chunked(tg_backend *be, const tg_tensor *dst) {
    const char *call = "delta_rule";
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *st = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const long long Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], B = q->ne[3], Dv = v->ne[0], Hv = v->ne[1];
    if (T == 0 || B == 0) return TG_OK;
    if (!tg_cuda_delta_chunked_covers(Dk, Dv))
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA chunked: Dk %lld not covered", call, Dk);

    chunk_args a = {};
    a.q = tg_cuda_desc_of(q), a.k = tg_cuda_desc_of(k), a.v = tg_cuda_desc_of(v);
    a.g = tg_cuda_desc_of(g), a.beta = tg_cuda_desc_of(beta), a.o = tg_cuda_desc_of(dst);
    a.state = tg_cuda_desc_of(st);
    a.Dk = (int)Dk, a.Dv = (int)Dv, a.Hk = (int)Hk, a.Hv = (int)Hv, a.B = (int)B, a.T = T;
    a.delta = dp.mode == TG_DELTA_GATED_DELTA, a.log_gate = dp.gate == TG_GATE_LOG, a.l2norm = dp.l2norm_qk;
    a.scale = dp.scale;
    a.DKP = (int)((Dk + 15) / 16 * 16);
    a.err = cu->d_err;

    // BV: the largest of 128/64/32/16/8 (not past Dv rounded up to a power of 2) whose shared memory
    // fits and whose warp tiles fit the warps' accumulators (16 warps from 64 columns on, else 8); then
    // halved (to 16 at least) while the grid would fill less than half the SMs, except where the full
    // case runs delta_wgb_kernel (its 128-column blocks beat the generic kernel's narrower ones)
    int dev = 0, optin = 0;
    TG_CUDA_TRY(be, call, cudaGetDevice(&dev));
    TG_CUDA_TRY(be, call, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    a.qk_vec = rows16(q, Dk, 0) && rows16(k, Dk, 0);
    a.o_pair = o_pairs(dst);
    // the form (tg_cuda_delta_single_form): chunk-parallel where the (sequence, value head) pairs
    // alone would not fill the GPU (B1 H16 T16384 BF16: 4,804 us against 13,123 single-kernel, 9,404
    // scan), single-kernel where they do (B8 H16 T2048: 2,052 us against 3,855 chunk-parallel;
    // bench/NOTES.md), and on delta_wgb_kernel from fewer of them; knob 1 / 2 forces
    bool wgb = false;
    if (!single_form(be, dst, optin, &wgb)) {
        bool taken = false;
        const tg_status s = run_phases(be, dst, a, optin, &taken);
        if (s != TG_OK || taken) return s;
    }
    const int sms = tg_cuda_sms(cu);
    auto warps_for = [](int bv) { return bv >= 64 ? 16 : 8; };
    auto fits = [&](int bv) {
        const int nw = warps_for(bv), rq = nw == 16 ? kRQ<16> : kRQ<8>;
        return chunk_smem(a.DKP, bv) <= (size_t)optin && (a.DKP + 63) / 64 * (bv / 8) <= 2 * nw &&
               2 * (bv / 8) <= rq * nw;
    };
    int BV = cu->sig.delta_chunk_bv > 0 ? cu->sig.delta_chunk_bv : 128;
    while (BV > 8 && BV / 2 >= Dv) BV /= 2;
    while (BV > 8 && !fits(BV)) BV /= 2;
    while (cu->sig.delta_chunk_bv == 0 && !wgb && BV > 16 && 2LL * B * Hv * ((Dv + BV - 1) / BV) <= sms) BV /= 2;
    if (!fits(BV))
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA chunked: Dk %lld needs more shared memory than the device has",
                      call, Dk);
    a.BV = BV;
    a.nslices = (int)((Dv + BV - 1) / BV);
    a.v_vec = rows16(v, BV, 0) && rows16(v, Dv - (long long)(a.nslices - 1) * BV, 0);
    const long long blocks = (long long)a.nslices * Hv * B;
    if (blocks > INT_MAX) return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid of %lld blocks too large", call, blocks);
    const size_t smem = chunk_smem(a.DKP, BV);
    const int nw = warps_for(BV);
    // the full case: Dk 128 and whole 128-column slices, 16-byte rows (delta_chunked_kernel<16, true>)
    const bool full = cu->sig.delta_chunk_generic == 0 && nw == 16 && BV == 128 && a.DKP == 128 && Dk == 128 && Dv % 128 == 0 && a.qk_vec && a.v_vec;
    size_t *smem_set = cu->delta_smem_set + tg_cuda_impl::TG_CUDA_DSMEM_SINGLE;  // each kernel's dynamic shared-memory limit (grow-only)
    const unsigned grid = (unsigned)blocks;
    const bool wg = full && tg_cuda_delta_wg_takes(a) && tg_cuda_delta_wg_ready(be) && tg_cuda_delta_wg_smem(be, a) <= (size_t)optin;
    // where delta_wgb_kernel runs: GATED_LINEAR's segments (seg_plan), and every chunk's gate arrays
    // made beforehand by delta_gates_kernel where they fit kGateScratch (knob delta_chunk_gk)
    const bool wgb_runs = wg && tg_cuda_delta_wg_bf16(be, a);
    a.nseg = wgb_runs && wgb ? seg_plan(cu, dst, &a.tseg) : 1;
    const long long gunits = (T + kC - 1) / kC * Hv * B;
    bool pre_gates = wgb_runs && cu->sig.delta_chunk_gk == 0 && gunits <= kGateScratch / (kGateWords * 4);
    if (wgb_runs) {
        if (a.nseg >= 2 && blocks * a.nseg > INT_MAX)
            return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid of %lld blocks too large", call, blocks * a.nseg);
        // the scratch: the gate arrays, then the segments' states and decays
        size_t g_bytes = pre_gates ? tg_cuda_align256((size_t)gunits * kGateWords * 4) : 0;
        const size_t s_bytes = a.nseg >= 2 ? tg_cuda_align256((size_t)blocks * (size_t)a.nseg * 16384 * 4) : 0;
        const size_t d_bytes = a.nseg >= 2 ? (size_t)(B * Hv) * (size_t)(a.nseg - 1) * 8 : 0;
        void *scr = nullptr;
        if (g_bytes + s_bytes + d_bytes > 0) {
            tg_status s = tg_cuda_scratch(be, g_bytes + s_bytes + d_bytes, &scr, call);
            if (s != TG_OK && pre_gates) {  // (out of memory, or a capture: warp 0's gate arrays need none of it)
                pre_gates = false, g_bytes = 0;
                s = s_bytes + d_bytes > 0 ? tg_cuda_scratch(be, s_bytes + d_bytes, &scr, call) : TG_OK;
            }
            if (s != TG_OK) return s;
        }
        if (pre_gates) {
            a.G = (const float *)scr;
            tg_cuda_delta_gates_launch(be, a, (float *)scr, gunits);
            TG_CUDA_LAUNCHED(be, call);
        }
        if (a.nseg >= 2) {
            a.seg_s = (float *)((char *)scr + g_bytes), a.seg_g = (float *)((char *)scr + g_bytes + s_bytes);
            if (const tg_status s = tg_cuda_delta_wgb_seg_launch(be, a, grid); s != TG_OK) return s;
        } else if (const tg_status s = tg_cuda_delta_wg_launch(be, a, grid); s != TG_OK) {
            return s;
        }
    } else if (wg) {
        if (const tg_status s = tg_cuda_delta_wg_launch(be, a, grid); s != TG_OK) return s;
    } else if (full) {
        if (const tg_status s = smem_limit(be, delta_chunked_kernel<16, true>, smem, smem_set[2], call); s != TG_OK) return s;
        delta_chunked_kernel<16, true><<<grid, 16 * 32, smem, cu->stream>>>(a);
    } else if (nw == 16) {
        if (const tg_status s = smem_limit(be, delta_chunked_kernel<16, false>, smem, smem_set[1], call); s != TG_OK) return s;
        delta_chunked_kernel<16, false><<<grid, 16 * 32, smem, cu->stream>>>(a);
    } else {
        if (const tg_status s = smem_limit(be, delta_chunked_kernel<8, false>, smem, smem_set[0], call); s != TG_OK) return s;
        delta_chunked_kernel<8, false><<<grid, 8 * 32, smem, cu->stream>>>(a);
    }
    TG_CUDA_LAUNCHED(be, call);
    char segs[24] = "";
    snprintf(segs, sizeof(segs), "%s", wgb_runs && !pre_gates ? "/gk1" : "");  // (the gate arrays by warp 0)
    if (a.nseg >= 2) snprintf(segs + strlen(segs), sizeof(segs) - strlen(segs), "/seg%d", a.nseg);
    snprintf(cu->delta_name, sizeof(cu->delta_name), "chunked-%s/dk%d/bv%d/w%d%s%s", wgb_runs ? "bf16" : "tf32", a.DKP, BV, nw,
             wg ? "/full/wgmma" : full ? "/full" : a.qk_vec ? "" : "/scalar", segs);
    cu->delta_name_key[0] = -1;  // the scan's cached name is gone
    cu->sig_last[TG_CUDA_SIG_DELTA] = cu->delta_name;
    return TG_OK;
}
