// delta_rule_chunked.cu - the chunked form of the gated linear / gated
// delta-rule recurrence on tensor cores (ggml_ops/delta_rule_chunked.cpp is
// its readable CPU reference and has the math; docs/ops.md the policy).
// Two forms, chosen per call (tg_cuda_delta_rule_chunked; bench/NOTES.md has the numbers):
//
// The chunk-parallel form, where the (sequence, value head) pairs alone would not fill the GPU:
// three kernels over the backend's scratch, per (sequence, value head, chunk) unit W, Kd, U,
// S_c and gamma (run_phases):
//   delta_prep_kernel   per unit: gate prefix, A, T = (I + A)^-1, W = T (beta d(t,-1) K),
//                       U = T (beta V), Kd = K (.) d(C-1, t), gamma = d(C-1, -1)
//   delta_state_kernel  per (Dv slice, value head, sequence), the only sequential part: per
//                       chunk S_c = S; U <- V' = U - W S; S = gamma S + Kd^T V' (next chunk's
//                       operands in flight by cp.async)
//   delta_out_kernel    per unit: O = scale (d(t,-1) Q S_c + (Q K^T (.) decay) V')
//
// The single-kernel form (delta_chunked_kernel), where they do:
// one block of 256 threads (8 warps) per (value column slice of BV columns,
// value head h, sequence b) walks the chunks of C = 64 tokens in order, with
// its slice of the state S (DKP x BV, F32) in shared memory all the way:
//   1. stage Q, K (zero-padded to DKP, a multiple of 16), the V slice, gates
//      and beta (16-bit q/k/v converted on load), l2-normalize Q and K rows,
//      and build the gate prefix (L, sign, Z) and the decays d(t, -1), d(C-1, t)
//   2. products with F32 accumulation on mma.sync m16n8k8 TF32 tensor cores:
//      P = Q K^T (.) decay (masked, s <= t), A = beta K K^T (.) decay (s < t),
//      Q S (kept in registers), K S -> R = beta (V - d(t,-1) K S)
//   3. T = (I + A)^-1 by forward substitution (F32, 4 lanes per column), U = T R
//      (GATED_LINEAR: U = beta V, no T)
//   4. O = scale (d(t,-1) Q S + P U) straight to global memory, and
//      S = d(C-1,-1) S + (K (.) d(C-1, t))^T U in place
// The state is read once and written once (skipped when the graph's device
// error record is set: a failed graph leaves it unchanged). Dv is split across
// blocks (BV = 64, 32, 16 or 8 columns, the largest whose shared memory fits,
// smaller while the grid would not fill the GPU); the per-chunk K-only work
// (P, A, T) is repeated per slice.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "common.cuh"
#include "delta_rule.cuh"
#include "delta_rule_chunked.cuh"
#include "ops.h"
#include "signature.cuh"

namespace {

constexpr int kC = 64;         // tokens per chunk
constexpr int kPS = kC + 4;    // row stride of the C x C matrices (floats)
constexpr int kTilesC = 4;     // 16x8 tiles per warp of the C x C and C x BV products
constexpr int kTilesS = 8;     // 16x8 tiles per warp of the state (DKP x BV)
constexpr int kUnits = 8;      // 16-byte loads in flight per thread when staging
// Most scratch the chunk-parallel form takes (grow-only, kept by the backend); beyond it the
// single-kernel form runs, which needs none.
constexpr size_t kPhaseScratchBudget = (size_t)4 << 30;

struct chunk_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv, B;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, BV, nslices;
    int qk_vec, v_vec;  // q/k rows (v slices) load as 16-byte units
    int o_pair;         // output columns j, j + 1 (j even) store as one 8-byte pair
    const tg_cuda_err *err;
};

__host__ __device__ inline int q_stride(int DKP) { return DKP + 4; }
__host__ __device__ inline int v_stride(int BV) { return BV + 8; }
// shared memory (bytes) of one block
size_t chunk_smem(int DKP, int BV) {
    const size_t f = 2 * (size_t)kC * q_stride(DKP) + (size_t)kC * v_stride(BV) + (size_t)DKP * v_stride(BV) +
                     3 * (size_t)kC * kPS + 6 * (size_t)kC;
    return f * sizeof(float);
}

__device__ inline unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ inline void mma_tf32(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                unsigned b1) {
    asm(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[i] += A B for output tile warp + NW i of the M x N product (16 x 8 tiles, row-major over
// N / 8), K a multiple of 8; a_at(m, k), b_at(k, n) read the operands (shared memory). Operands go
// to the tensor cores as F32 bits: values written by this kernel are rounded to TF32 where they
// are written (tf32r); the state and the decayed K of the state update are truncated to TF32 by
// the hardware. The k loop is outside the tile loop, so the warp's independent MMAs overlap.
// LOWER: A is lower triangular, a tile's k loop stops after its last row. TWO: also
// acc2 += A2 B with the same B fragments (Q and K against one operand).
template <int NW, int MAXT, bool LOWER, bool TWO, typename FA, typename FB, typename FA2>
__device__ inline void gemm(float (&acc)[MAXT][4], int M, int N, int K, FA a_at, FB b_at, float (*acc2)[4], FA2 a2_at) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
    int m0[MAXT], n0[MAXT], kend = 0;
#pragma unroll
    for (int i = 0; i < MAXT; i++) {
        const int tile = warp + NW * i;
        m0[i] = tile < ntiles ? (tile / ntn) * 16 : -1;
        n0[i] = tile < ntiles ? (tile % ntn) * 8 : 0;
        const int ke = m0[i] < 0 ? 0 : LOWER ? min(K, m0[i] + 16) : K;
        kend = max(kend, ke);
    }
#pragma unroll 1
    for (int k0 = 0; k0 < kend; k0 += 8) {
#pragma unroll
        for (int i = 0; i < MAXT; i++) {
            if (m0[i] >= 0 && (!LOWER || k0 < m0[i] + 16)) {
                const int r = m0[i] + g;
                const unsigned b0 = __float_as_uint(b_at(k0 + c, n0[i] + g));
                const unsigned b1 = __float_as_uint(b_at(k0 + c + 4, n0[i] + g));
                mma_tf32(acc[i], __float_as_uint(a_at(r, k0 + c)), __float_as_uint(a_at(r + 8, k0 + c)),
                         __float_as_uint(a_at(r, k0 + c + 4)), __float_as_uint(a_at(r + 8, k0 + c + 4)), b0, b1);
                if constexpr (TWO)
                    mma_tf32(acc2[i], __float_as_uint(a2_at(r, k0 + c)), __float_as_uint(a2_at(r + 8, k0 + c)),
                             __float_as_uint(a2_at(r, k0 + c + 4)), __float_as_uint(a2_at(r + 8, k0 + c + 4)), b0, b1);
            }
        }
    }
}
template <int NW, int MAXT, bool LOWER, typename FA, typename FB>
__device__ inline void gemm1(float (&acc)[MAXT][4], int M, int N, int K, FA a_at, FB b_at) {
    gemm<NW, MAXT, LOWER, false>(acc, M, N, K, a_at, b_at, (float(*)[4]) nullptr, a_at);
}
// x rounded to the nearest TF32 (kept as an F32 value)
__device__ inline float tf32r(float x) { return __uint_as_float(to_tf32(x)); }
// Visit the elements of the warp's tiles: f(i, e, row, col) for acc[i][e].
template <int NW, int MAXT, typename F> __device__ inline void for_tiles(int M, int N, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
#pragma unroll
    for (int i = 0; i < MAXT; i++) {
        const int tile = warp + NW * i;
        if (tile < ntiles) {
            const int m0 = (tile / ntn) * 16, n0 = (tile % ntn) * 8;
#pragma unroll
            for (int e = 0; e < 4; e++) f(i, e, m0 + g + (e >= 2 ? 8 : 0), n0 + 2 * c + (e & 1));
        }
    }
}
template <int N> __device__ inline void zero(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// The gate prefix of a chunk, by one warp: sL holds the chunk's 64 gates (g; neutral past its last
// token), replaced by the inclusive prefix L_t = sum log|a|, with the sign (-1 for an odd count of
// negative LINEAR gates) in sSg and the last zero gate at or before t in sZ (-1: none): a scan of
// (sum log|a|, count of negative gates, last zero), two tokens per lane.
__device__ inline void gate_prefix(float *sL, float *sSg, int *sZ, int log_gate) {
    const int lane = threadIdx.x & 31;
    float l[2];
    int neg[2], z[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = 2 * lane + e;
        const float gv = sL[r];
        const bool zero = log_gate ? gv == -INFINITY : gv == 0.0f;
        l[e] = zero ? 0.0f : log_gate ? gv : logf(fabsf(gv));
        neg[e] = !zero && !log_gate && gv < 0.0f;
        z[e] = zero ? r : -1;
    }
    float L = l[0] + l[1];
    int N = neg[0] + neg[1], Z = max(z[0], z[1]);
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float Lo = __shfl_up_sync(0xffffffffu, L, off);
        const int No = __shfl_up_sync(0xffffffffu, N, off), Zo = __shfl_up_sync(0xffffffffu, Z, off);
        if (lane >= off) L += Lo, N += No, Z = max(Z, Zo);
    }
    // exclusive prefix of this lane, then its two tokens
    float Le = L - (l[0] + l[1]);
    int Ne = N - (neg[0] + neg[1]), Ze = __shfl_up_sync(0xffffffffu, Z, 1);
    if (lane == 0) Ze = -1, Le = 0.0f, Ne = 0;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        Le += l[e], Ne += neg[e], Ze = max(Ze, z[e]);
        const int r = 2 * lane + e;
        sL[r] = Le, sSg[r] = (Ne & 1) ? -1.0f : 1.0f, sZ[r] = Ze;
    }
}
// The decay from just after token s to t within a chunk (s = -1: from the chunk's start):
// 0 if a zero gate lies in (s, t], else sign_t sign_s exp(L_t - L_s).
__device__ inline float chunk_decay(const float *sL, const float *sSg, const int *sZ, int t, int s) {
    if (sZ[t] > s) return 0.0f;
    return s < 0 ? sSg[t] * expf(sL[t]) : sSg[t] * sSg[s] * expf(sL[t] - sL[s]);
}
// Rows t < n of a (and of b, when not NULL), cnt values at row stride ld: l2-normalized as the
// op's l2norm_qk does it (sum in double, one F32 multiplier) when norm, one warp per row; rounded
// to TF32 either way.
template <int NW> __device__ inline void norm_rows(float *a, float *b, int ld, int n, int cnt, int norm) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rows = b ? 2 * n : n;
    if (norm) {
        for (int y = warp; y < rows; y += NW) {
            float *row = (y < n ? a : b) + (y < n ? y : y - n) * ld;
            double ss = 0.0;
            for (int i = lane; i < cnt; i += 32) ss += (double)row[i] * row[i];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
            const float inv = (float)(1.0 / sqrt(ss + (double)1e-6f));
            for (int i = lane; i < cnt; i += 32) row[i] = tf32r(row[i] * inv);
        }
    } else {
        for (int x = threadIdx.x; x < n * ld; x += NW * 32) {
            a[x] = tf32r(a[x]);
            if (b) b[x] = tf32r(b[x]);
        }
    }
}
// Two adjacent output columns (x at p, y at p + es; has_y: y exists) in the output's type: one
// 8-byte (F32) or 4-byte (16-bit) store where pair allows.
__device__ inline void store_pair(char *p, long long es, tg_type type, float x, float y, bool has_y, bool pair) {
    if (pair && has_y) {
        if (type == TG_TYPE_F32) *(float2 *)p = make_float2(x, y);
        else if (type == TG_TYPE_F16) *(__half2 *)p = __floats2half2_rn(x, y);
        else *(__nv_bfloat162 *)p = __floats2bfloat162_rn(x, y);
        return;
    }
    tg_cuda_store(p, type, x);
    if (has_y) tg_cuda_store(p + es, type, y);
}

// The scan's rule: an exact zero stays zero under any non-NaN factor.
__device__ inline float keep_zero_mul(float d, float x) { return x == 0.0f && !isnan(d) ? 0.0f : d * x; }

// 16 bytes of a row (4 F32 or 8 F16/BF16 values) to floats in shared memory (16-byte aligned).
__device__ inline void put_unit(float *d, uint4 u, tg_type type) {
    if (type == TG_TYPE_F32) {
        *(float4 *)d = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w));
        return;
    }
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
    float f[8];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        if (type == TG_TYPE_F16) {
            __half2 h;
            memcpy(&h, &w[e], 4);
            const float2 x = __half22float2(h);
            f[2 * e] = x.x, f[2 * e + 1] = x.y;
        } else {
            __nv_bfloat162 h;
            memcpy(&h, &w[e], 4);
            const float2 x = __bfloat1622float2(h);
            f[2 * e] = x.x, f[2 * e + 1] = x.y;
        }
    }
    *(float4 *)d = make_float4(f[0], f[1], f[2], f[3]);
    *(float4 *)(d + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

// Rows t < n (global row t at base + t * rs, element e at + e * es) of cnt elements into
// dst + t * ds, as F32. vec: unit-stride rows of cnt * es bytes, a multiple of 16, 16-byte aligned:
// kUnits 16-byte loads per thread in flight at once; otherwise element by element.
template <int NT>
__device__ inline void stage_rows(float *dst, int ds, const char *base, long long rs, long long es, tg_type type, int n,
                                  int cnt, bool vec) {
    const int tid = threadIdx.x;
    if (vec) {
        const int epu = type == TG_TYPE_F32 ? 4 : 8, U = cnt / epu, total = n * U;
#pragma unroll 1
        for (int u0 = 0; u0 < total; u0 += NT * kUnits) {
            uint4 r[kUnits];
#pragma unroll
            for (int m = 0; m < kUnits; m++) {
                const int u = u0 + tid + NT * m;
                if (u < total) {
                    const int t = u / U, c = u - t * U;
                    r[m] = __ldg((const uint4 *)(base + t * rs + 16LL * c));
                }
            }
#pragma unroll
            for (int m = 0; m < kUnits; m++) {
                const int u = u0 + tid + NT * m;
                if (u < total) {
                    const int t = u / U, c = u - t * U;
                    put_unit(dst + t * ds + c * epu, r[m], type);
                }
            }
        }
        return;
    }
#pragma unroll 1
    for (int x = tid; x < n * cnt; x += NT) {
        const int t = x / cnt, i = x - t * cnt;
        dst[t * ds + i] = tg_cuda_load(base + t * rs + i * es, type);
    }
}

// T = (I + A)^-1 of the strictly lower C x C matrix A (row stride kPS) into sT, by NT threads, by
// blocks of 16: the four diagonal blocks by forward substitution (column j by L lanes; every
// T[t][j] is written by the lane that reads it later: lane (t - j) % L), then the blocks below
// them, diagonal by diagonal: T_ij = -T_ii sum_{j <= k < i} A_ik T_kj (X = the sum, kept in the
// unused upper block (j, i) of T). Ends before the last barrier: the caller syncs.
template <int NT> __device__ inline void invert_unit_lower(const float *sA, float *sT) {
    const int tid = threadIdx.x;
    {
        constexpr int L = NT / kC;  // lanes per column (4 or 8), consecutive in a warp
        const int j = tid / L, l = tid % L, d0 = j & ~15;
#pragma unroll 1
        for (int t = d0; t < d0 + 16; t++) {
            float x = 0.0f;
            if (t > j) {
#pragma unroll 2
                for (int r = j + l; r < t; r += L) x = fmaf(sA[t * kPS + r], sT[r * kPS + j], x);
            }
#pragma unroll
            for (int off = 1; off < L; off <<= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
            if (t < j) {
                if (l == 0) sT[t * kPS + j] = 0.0f;
            } else if ((t - j) % L == l) {
                sT[t * kPS + j] = t == j ? 1.0f : -x;
            }
        }
    }
#pragma unroll 1
    for (int lv = 1; lv < 4; lv++) {
        const int nb = 4 - lv;  // blocks (i, j = i - lv), i = lv .. 3
        __syncthreads();
        for (int x = tid; x < nb * 256; x += NT) {
            const int i = lv + x / 256, j = i - lv, r = (x / 16) % 16, c = x % 16;
            float y = 0.0f;
            for (int m = 16 * j; m < 16 * i; m++) y = fmaf(sA[(16 * i + r) * kPS + m], sT[m * kPS + 16 * j + c], y);
            sT[(16 * j + r) * kPS + 16 * i + c] = y;  // X_ij at block (j, i)
        }
        __syncthreads();
        for (int x = tid; x < nb * 256; x += NT) {
            const int i = lv + x / 256, j = i - lv, r = (x / 16) % 16, c = x % 16;
            float y = 0.0f;
            for (int m = 0; m <= r; m++)
                y = fmaf(sT[(16 * i + r) * kPS + 16 * i + m], sT[(16 * j + m) * kPS + 16 * i + c], y);
            sT[(16 * i + r) * kPS + 16 * j + c] = -y;
        }
    }
}

template <int NW>
__global__ void __launch_bounds__(NW * 32, 1) delta_chunked_kernel(const chunk_args a) {
    constexpr int NT = NW * 32;
    extern __shared__ float4 csm4[];
    const int DKP = a.DKP, BV = a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    float *sQ = (float *)csm4, *sK = sQ + kC * QS, *sV = sK + kC * QS, *sS = sV + kC * VS, *sP = sS + DKP * VS;
    float *sA = sP + kC * kPS, *sT = sA + kC * kPS, *sL = sT + kC * kPS, *sSg = sL + kC, *sB = sSg + kC;
    float *sD0 = sB + kC, *sDl = sD0 + kC;
    int *sZ = (int *)(sDl + kC);

    const int tid = threadIdx.x, warp = tid >> 5;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk), j0 = slice * BV, nv = min(BV, a.Dv - j0);
    // the error record of earlier kernels of this graph: read now, used before the state store
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;

    // padding (columns past Dk / the slice, rows past the last token) is zero; the state slice
    // S[i][jj] at sS[i * VS + jj], zero past Dk / Dv and without a state
    for (int x = tid; x < 2 * kC * QS + kC * VS; x += NT) sQ[x] = 0.0f;
#pragma unroll 4
    for (int x = tid; x < DKP * BV; x += NT) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        sS[i * VS + jj] = has_state && i < a.Dk && jj < nv ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }

    float accQS[kTilesC][4];
#pragma unroll 1
    for (long long t0 = 0; t0 < a.T; t0 += kC) {
        const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);
        __syncthreads();  // the previous chunk is done with every buffer
        // 1. stage the chunk (the last one: rows past n zero; gate neutral, beta 0 there)
        if (n < kC) {
            for (int x = tid; x < (kC - n) * QS; x += NT) sQ[n * QS + x] = 0.0f, sK[n * QS + x] = 0.0f;
            for (int x = tid; x < (kC - n) * VS; x += NT) sV[n * VS + x] = 0.0f;
        }
        stage_rows<NT>(sQ, QS, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], a.q.nb[0], a.q.type, n, a.Dk, a.qk_vec);
        stage_rows<NT>(sK, QS, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], a.k.nb[0], a.k.type, n, a.Dk, a.qk_vec);
        stage_rows<NT>(sV, VS, tg_cuda_ptr(a.v, j0, h, t0, b), a.v.nb[2], a.v.nb[0], a.v.type, n, nv, a.v_vec);
        if (tid < kC) {
            const bool in = tid < n;
            sL[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.g, h, t0 + tid, b, 0)) : (a.log_gate ? 0.0f : 1.0f);
            sB[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.beta, h, t0 + tid, b, 0)) : 0.0f;
        }
        __syncthreads();
        // the gate prefix by warp 0, the l2 norms of the rows by all
        if (warp == 0) gate_prefix(sL, sSg, sZ, a.log_gate);
        norm_rows<NW>(sQ, sK, QS, n, a.Dk, a.l2norm);
        __syncthreads();
        auto decay = [&](int t, int s) { return chunk_decay(sL, sSg, sZ, t, s); };
        if (tid < kC) sD0[tid] = decay(tid, -1), sDl[tid] = decay(kC - 1, tid);

        // 2. P = Q K^T (.) decay (s <= t); A = beta K K^T (.) decay (s < t)
        auto q_at = [&](int t, int i) { return sQ[t * QS + i]; };
        auto k_at = [&](int t, int i) { return sK[t * QS + i]; };
        auto kT_at = [&](int i, int s) { return sK[s * QS + i]; };
        auto s_at = [&](int i, int j) { return sS[i * VS + j]; };
        auto v_at = [&](int s, int j) { return sV[s * VS + j]; };
        {
            float acc[kTilesC][4];
            zero(acc);
            if (a.delta) {
                float accA[kTilesC][4];
                zero(accA);
                gemm<NW, kTilesC, false, true>(acc, kC, kC, DKP, q_at, kT_at, accA, k_at);
                for_tiles<NW, kTilesC>(kC, kC, [&](int i, int e, int t, int s) {
                    sA[t * kPS + s] = s < t ? sB[t] * accA[i][e] * decay(t, s) : 0.0f;  // F32: read by the substitution only
                });
            } else {
                gemm1<NW, kTilesC, false>(acc, kC, kC, DKP, q_at, kT_at);
            }
            for_tiles<NW, kTilesC>(kC, kC, [&](int i, int e, int t, int s) {
                sP[t * kPS + s] = s <= t ? tf32r(acc[i][e] * decay(t, s)) : 0.0f;
            });
            // Q S (kept for the output); K S -> R = beta (V - d(t, -1) K S) in place of V
            // (GATED_LINEAR: U = beta V)
            zero(accQS);
            if (a.delta) {
                zero(acc);
                gemm<NW, kTilesC, false, true>(accQS, kC, BV, DKP, q_at, s_at, acc, k_at);
                for_tiles<NW, kTilesC>(kC, BV, [&](int i, int e, int t, int j) {
                    float &x = sV[t * VS + j];
                    x = tf32r(sB[t] * (x - keep_zero_mul(decay(t, -1), acc[i][e])));
                });
            } else {
                gemm1<NW, kTilesC, false>(accQS, kC, BV, DKP, q_at, s_at);
                for (int x = tid; x < kC * BV; x += NT) {
                    const int t = x / BV, jj = x - t * BV;
                    sV[t * VS + jj] = tf32r(sV[t * VS + jj] * sB[t]);
                }
            }
        }
        __syncthreads();

        // 3. T = (I + A)^-1 by blocks of 16 (A strictly lower): the four diagonal blocks by forward
        //    substitution (column j by L lanes; every T[t][j] is written by the lane that reads it
        //    later: lane (t - j) % L), then the blocks below them, diagonal by diagonal:
        //    T_ij = -T_ii sum_{j <= k < i} A_ik T_kj (X = the sum, kept in the unused upper block
        //    (j, i) of T). Then U = T R in place of R.
        if (a.delta) {
            invert_unit_lower<NT>(sA, sT);
            __syncthreads();
            float acc[kTilesC][4];
            zero(acc);
            gemm1<NW, kTilesC, true>(acc, kC, BV, kC, [&](int t, int s) { return sT[t * kPS + s]; }, v_at);
            __syncthreads();  // every read of R is done
            for_tiles<NW, kTilesC>(kC, BV, [&](int i, int e, int t, int j) { sV[t * VS + j] = tf32r(acc[i][e]); });
            __syncthreads();
        }

        // 4. O = scale (d(t, -1) Q S + P U), rows < n, columns < Dv
        for_tiles<NW, kTilesC>(kC, BV, [&](int i, int e, int t, int j) { accQS[i][e] = keep_zero_mul(sD0[t], accQS[i][e]); });
        gemm1<NW, kTilesC, true>(accQS, kC, BV, kC, [&](int t, int s) { return sP[t * kPS + s]; }, v_at);
        for_tiles<NW, kTilesC>(kC, BV, [&](int i, int e, int t, int j) {
            // pairs (e, e + 1) are columns j, j + 1: one 8-byte store where the output allows it
            if ((e & 1) || t >= n || j >= nv) return;
            store_pair(tg_cuda_ptr(a.o, j0 + j, h, t0 + t, b), a.o.nb[0], a.o.type, a.scale * accQS[i][e],
                       a.scale * accQS[i][e + 1], j + 1 < nv, a.o_pair);
        });
        //    S = d(C-1, -1) S + (K (.) d(C-1, t))^T U: each thread its own elements of S
        {
            float acc[kTilesS][4];
            zero(acc);
            gemm1<NW, kTilesS, false>(acc, DKP, BV, kC, [&](int i, int t) { return sK[t * QS + i] * sDl[t]; }, v_at);
            const float dl = sD0[kC - 1];
            for_tiles<NW, kTilesS>(DKP, BV, [&](int i, int e, int r, int j) {
                float &x = sS[r * VS + j];
                x = keep_zero_mul(dl, x) + acc[i][e];
            });
        }
    }
    __syncthreads();
    if (!has_state || !clear) return;
    for (int x = tid; x < a.Dk * nv; x += NT) {
        const int jj = x / a.Dk, i = x - jj * a.Dk;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[i * VS + jj]);
    }
}

// ---------------------------------------------------------------------------
// The chunk-parallel form: three kernels over a device scratch (see the file comment).

// Output tiles of one pass: tiles base + warp + NW i (i < MAXT) of an M x N product (16 x 8
// tiles, row-major over N / 8); m0 = -1 past the last tile.
template <int NW, int MAXT> struct tile_pass {
    int m0[MAXT], n0[MAXT];
    __device__ tile_pass(int base, int M, int N) {
        const int warp = threadIdx.x >> 5, ntn = N / 8, ntiles = (M / 16) * ntn;
#pragma unroll
        for (int i = 0; i < MAXT; i++) {
            const int tile = base + warp + NW * i;
            m0[i] = tile < ntiles ? (tile / ntn) * 16 : -1;
            n0[i] = tile < ntiles ? (tile % ntn) * 8 : 0;
        }
    }
};
// acc[i] += A B over k < K (a multiple of 8) for the pass's tiles; LOWER: A is lower triangular
// (a tile's k loop stops after its last row). Operands as in gemm above.
template <int NW, int MAXT, bool LOWER, typename FA, typename FB>
__device__ inline void pass_mma(float (&acc)[MAXT][4], const tile_pass<NW, MAXT> &tp, int K, FA a_at, FB b_at) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    int kend = 0;
#pragma unroll
    for (int i = 0; i < MAXT; i++) kend = max(kend, tp.m0[i] < 0 ? 0 : LOWER ? min(K, tp.m0[i] + 16) : K);
#pragma unroll 1
    for (int k0 = 0; k0 < kend; k0 += 8) {
#pragma unroll
        for (int i = 0; i < MAXT; i++) {
            if (tp.m0[i] >= 0 && (!LOWER || k0 < tp.m0[i] + 16)) {
                const int r = tp.m0[i] + g, n = tp.n0[i] + g;
                mma_tf32(acc[i], __float_as_uint(a_at(r, k0 + c)), __float_as_uint(a_at(r + 8, k0 + c)),
                         __float_as_uint(a_at(r, k0 + c + 4)), __float_as_uint(a_at(r + 8, k0 + c + 4)),
                         __float_as_uint(b_at(k0 + c, n)), __float_as_uint(b_at(k0 + c + 4, n)));
            }
        }
    }
}
// f(i, row, col) for the element pairs acc[i][e], acc[i][e + 1] (e = 0, 2: columns col, col + 1).
template <int NW, int MAXT, typename F> __device__ inline void pass_pairs(const tile_pass<NW, MAXT> &tp, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int i = 0; i < MAXT; i++)
        if (tp.m0[i] >= 0) {
            f(i, 0, tp.m0[i] + g, tp.n0[i] + 2 * c);
            f(i, 2, tp.m0[i] + g + 8, tp.n0[i] + 2 * c);
        }
}
template <int NW, int MAXT> __device__ inline int pass_count(int M, int N) {
    return ((M / 16) * (N / 8) + NW * MAXT - 1) / (NW * MAXT);
}

struct phase_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, DVP, NC;     // padded head dims (multiples of 16 and 8), chunks per sequence
    int qk_vec, v_vec;    // q/k rows (whole v rows) load as 16-byte units
    int o_pair;           // output column pairs (j even) store as one
    int BV, nslices, nbuf;  // state pass: value columns per block, slices per head, load buffers
    // scratch per (sequence, value head, chunk) unit u = (b Hv + h) NC + c
    float *W, *Kd, *U, *S, *gam;
    const tg_cuda_err *err;
};
constexpr int kVSC = 72;  // row stride of the output pass's 64-column blocks
__host__ __device__ inline int vstr(int n) { return (n + 31) / 32 * 32 + 8; }
size_t prep_smem(int DKP, int DVP) {
    return ((size_t)kC * q_stride(DKP) + (size_t)kC * vstr(DVP) + 2 * (size_t)kC * kPS + 6 * (size_t)kC) * 4;
}
size_t state_smem(int DKP, int BV, int nbuf) {
    return ((size_t)nbuf * (2 * (size_t)kC * q_stride(DKP) + (size_t)kC * v_stride(BV)) + (size_t)DKP * v_stride(BV)) * 4;
}
size_t out_smem(int DKP) {
    const size_t ks = std::max((size_t)kC * q_stride(DKP), (size_t)DKP * kVSC);
    return ((size_t)kC * q_stride(DKP) + ks + (size_t)kC * kPS + (size_t)kC * kVSC + 4 * (size_t)kC) * 4;
}

// Stage chunk c's rows of x (q or k: rows at (0, hk, t0 + t, b)) into dst, row stride ld.
__device__ inline void stage_qk(float *dst, int ld, const tg_cuda_desc &x, int hk, long long t0, int b, int n,
                                const phase_args &a) {
    stage_rows<256>(dst, ld, tg_cuda_ptr(x, 0, hk, t0, b), x.nb[2], x.nb[0], x.type, n, a.Dk, a.qk_vec);
}
// Gates of the chunk into sL (neutral past n), beta into sB (0 past n; may be NULL).
__device__ inline void stage_gates(float *sL, float *sB, const phase_args &a, int h, long long t0, int b, int n) {
    const int tid = threadIdx.x;
    if (tid < kC) {
        const bool in = tid < n;
        sL[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.g, h, t0 + tid, b, 0)) : (a.log_gate ? 0.0f : 1.0f);
        if (sB) sB[tid] = in ? __ldg((const float *)tg_cuda_ptr(a.beta, h, t0 + tid, b, 0)) : 0.0f;
    }
}

// Phase 1, one block of 256 threads per (chunk, value head, sequence): Kd = K (.) d(C-1, t), the
// chunk's decay gamma = d(C-1, -1); GATED_DELTA: A = beta K K^T (.) decay (s < t),
// T = (I + A)^-1, W = T (beta d(t, -1) K), U = T (beta V); GATED_LINEAR: U = beta V.
__global__ void __launch_bounds__(256) delta_prep_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 psm4[];
    const int DKP = a.DKP, DVP = a.DVP, QS = q_stride(DKP), VS = vstr(DVP);
    float *sK = (float *)psm4, *sV = sK + kC * QS, *sA = sV + kC * VS, *sT = sA + kC * kPS;
    float *sL = sT + kC * kPS, *sSg = sL + kC, *sB = sSg + kC, *sD0 = sB + kC, *sDl = sD0 + kC;
    int *sZ = (int *)(sDl + kC);
    const int tid = threadIdx.x, warp = tid >> 5;
    const int c = blockIdx.x % a.NC, h = (blockIdx.x / a.NC) % a.Hv, b = blockIdx.x / (a.NC * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const long long t0 = (long long)c * kC, u = ((long long)b * a.Hv + h) * a.NC + c;
    const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);

    for (int x = tid; x < kC * (QS + VS); x += NT) sK[x] = 0.0f;  // padding stays zero
    __syncthreads();
    stage_qk(sK, QS, a.k, hk, t0, b, n, a);
    stage_rows<NT>(sV, VS, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], a.v.nb[0], a.v.type, n, a.Dv, a.v_vec);
    stage_gates(sL, sB, a, h, t0, b, n);
    __syncthreads();
    if (warp == 0) gate_prefix(sL, sSg, sZ, a.log_gate);
    norm_rows<NW>(sK, nullptr, QS, n, a.Dk, a.l2norm);
    __syncthreads();
    auto decay = [&](int t, int s) { return chunk_decay(sL, sSg, sZ, t, s); };
    if (tid < kC) sD0[tid] = decay(tid, -1), sDl[tid] = decay(kC - 1, tid);
    if (tid == 0) a.gam[u] = decay(kC - 1, -1);
    if (a.delta) {
        const tile_pass<NW, 4> tp(0, kC, kC);  // 32 tiles: one pass
        float acc[4][4];
        zero(acc);
        pass_mma<NW, 4, false>(acc, tp, DKP, [&](int t, int i) { return sK[t * QS + i]; },
                               [&](int i, int s) { return sK[s * QS + i]; });
        pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int s) {
            for (int d = 0; d < 2; d++)
                sA[t * kPS + s + d] = s + d < t ? sB[t] * acc[i][e + d] * decay(t, s + d) : 0.0f;
        });
    }
    __syncthreads();
    float *Kd = a.Kd + u * kC * DKP;
    for (int x = tid; x < kC * DKP / 4; x += NT) {
        const int t = x / (DKP / 4), i = 4 * (x - t * (DKP / 4));
        const float4 k4 = *(const float4 *)&sK[t * QS + i];
        const float d = sDl[t];
        *(float4 *)&Kd[t * DKP + i] = make_float4(tf32r(keep_zero_mul(d, k4.x)), tf32r(keep_zero_mul(d, k4.y)),
                                                  tf32r(keep_zero_mul(d, k4.z)), tf32r(keep_zero_mul(d, k4.w)));
    }
    if (a.delta) invert_unit_lower<NT>(sA, sT);
    __syncthreads();
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
    auto t_at = [&](int t, int s) { return sT[t * kPS + s]; };
    float *W = a.W + u * kC * DKP;
    for (int p = 0, np = pass_count<NW, 4>(kC, DKP); p < np; p++) {
        const tile_pass<NW, 4> tp(p * NW * 4, kC, DKP);
        float acc[4][4];
        zero(acc);
        pass_mma<NW, 4, true>(acc, tp, kC, t_at, [&](int s, int i) { return sK[s * QS + i]; });
        pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int j) {
            *(float2 *)&W[t * DKP + j] = make_float2(tf32r(acc[i][e]), tf32r(acc[i][e + 1]));
        });
    }
    for (int p = 0, np = pass_count<NW, 4>(kC, DVP); p < np; p++) {
        const tile_pass<NW, 4> tp(p * NW * 4, kC, DVP);
        float acc[4][4];
        zero(acc);
        pass_mma<NW, 4, true>(acc, tp, kC, t_at, [&](int s, int j) { return sV[s * VS + j]; });
        pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int j) {
            *(float2 *)&U[t * DVP + j] = make_float2(tf32r(acc[i][e]), tf32r(acc[i][e + 1]));
        });
    }
}

// Phase 2, the sequential part: one block of 128 threads per (value column slice of BV, value
// head, sequence) carries its slice of S (DKP x BV, F32, shared memory) over the chunks: stores it
// as the chunk's S_c, then (GATED_DELTA) U <- V' = U - W S_c in place, and
// S = gamma S + Kd^T V'. The next chunk's W, Kd, U slice are in flight (cp.async) meanwhile when two
// buffers fit (nbuf 2). The state is read once and written once (skipped when the graph's device
// error record is set: a failed graph leaves it unchanged).
__global__ void __launch_bounds__(128) delta_state_kernel(const phase_args a) {
    constexpr int NW = 4, NT = 128, MT = 8;
    extern __shared__ float4 ssm4[];
    const int DKP = a.DKP, DVP = a.DVP, BV = a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    const int bufsz = 2 * kC * QS + kC * VS;
    float *sS = (float *)ssm4 + a.nbuf * bufsz;
    const int tid = threadIdx.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int j0 = slice * BV, nv = min(BV, DVP - j0), nvr = min(BV, a.Dv - j0);  // nv: a multiple of 8
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    const long long u0 = ((long long)b * a.Hv + h) * a.NC;

    for (int x = tid; x < DKP * nv; x += NT) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        sS[i * VS + jj] = has_state && i < a.Dk && jj < nvr ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }
    __syncthreads();  // the slice is in place before the first S_c store reads it
    // chunk c's W, Kd (rows of DKP) and U slice (rows of nv) into buffer c % nbuf
    auto issue = [&](int c) {
        float *sW = (float *)ssm4 + (c % a.nbuf) * bufsz, *sKd = sW + kC * QS, *sU = sKd + kC * QS;
        const float *W = a.W + (u0 + c) * kC * DKP, *Kd = a.Kd + (u0 + c) * kC * DKP;
        const float *U = a.U + (u0 + c) * kC * DVP + j0;
        const int ku = DKP / 4, vu = nv / 4;
        for (int x = tid; x < kC * ku; x += NT) {
            const int t = x / ku, i = 4 * (x - t * ku);
            if (a.delta) cp_async_stream<16>(&sW[t * QS + i], &W[t * DKP + i]);
            cp_async_stream<16>(&sKd[t * QS + i], &Kd[t * DKP + i]);
        }
        for (int x = tid; x < kC * vu; x += NT) {
            const int t = x / vu, j = 4 * (x - t * vu);
            cp_async_stream<16>(&sU[t * VS + j], &U[t * DVP + j]);
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
        for (int x = tid; x < DKP * nv; x += NT) {
            const int i = x / nv, jj = x - i * nv;
            Sc[(long long)i * DVP + jj] = sS[i * VS + jj];
        }
        if (a.nbuf == 2 && c + 1 < a.NC) cp_async_wait_prior1();
        else cp_async_wait_all();
        __syncthreads();
        float *sW = (float *)ssm4 + (c % a.nbuf) * bufsz, *sKd = sW + kC * QS, *sU = sKd + kC * QS;
        if (a.delta) {
            float *U = a.U + u * kC * DVP + j0;
            for (int p = 0, np = pass_count<NW, MT>(kC, nv); p < np; p++) {
                const tile_pass<NW, MT> tp(p * NW * MT, kC, nv);
                float acc[MT][4];
                zero(acc);
                pass_mma<NW, MT, false>(acc, tp, DKP, [&](int t, int i) { return sW[t * QS + i]; },
                                        [&](int i, int j) { return sS[i * VS + j]; });
                pass_pairs<NW, MT>(tp, [&](int i, int e, int t, int j) {
                    const float x = tf32r(sU[t * VS + j] - acc[i][e]), y = tf32r(sU[t * VS + j + 1] - acc[i][e + 1]);
                    sU[t * VS + j] = x, sU[t * VS + j + 1] = y;
                    *(float2 *)&U[t * DVP + j] = make_float2(x, y);
                });
            }
            __syncthreads();
        }
        const float gam = __ldg(&a.gam[u]);
        for (int p = 0, np = pass_count<NW, MT>(DKP, nv); p < np; p++) {
            const tile_pass<NW, MT> tp(p * NW * MT, DKP, nv);
            float acc[MT][4];
            zero(acc);
            pass_mma<NW, MT, false>(acc, tp, kC, [&](int i, int t) { return sKd[t * QS + i]; },
                                    [&](int t, int j) { return sU[t * VS + j]; });
            pass_pairs<NW, MT>(tp, [&](int i, int e, int r, int j) {
                float *x = &sS[r * VS + j];
                x[0] = keep_zero_mul(gam, x[0]) + acc[i][e], x[1] = keep_zero_mul(gam, x[1]) + acc[i][e + 1];
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

// Phase 3, one block of 256 threads per (chunk, value head, sequence):
// O = scale (d(t, -1) Q S_c + P V'), P = Q K^T (.) decay (s <= t), in blocks of 64 value columns.
__global__ void __launch_bounds__(256) delta_out_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 osm4[];
    const int DKP = a.DKP, DVP = a.DVP, QS = q_stride(DKP);
    const int ks = max(kC * QS, DKP * kVSC);
    float *sQ = (float *)osm4, *sK = sQ + kC * QS, *sP = sK + ks, *sV = sP + kC * kPS;
    float *sL = sV + kC * kVSC, *sSg = sL + kC, *sD0 = sSg + kC;
    int *sZ = (int *)(sD0 + kC);
    float *sS = sK;  // S_c blocks in place of K once P is made
    const int tid = threadIdx.x, warp = tid >> 5;
    const int c = blockIdx.x % a.NC, h = (blockIdx.x / a.NC) % a.Hv, b = blockIdx.x / (a.NC * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const long long t0 = (long long)c * kC, u = ((long long)b * a.Hv + h) * a.NC + c;
    const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);

    for (int x = tid; x < 2 * kC * QS; x += NT) sQ[x] = 0.0f;  // sQ, sK adjacent: padding stays zero
    __syncthreads();
    stage_qk(sQ, QS, a.q, hk, t0, b, n, a);
    stage_qk(sK, QS, a.k, hk, t0, b, n, a);
    stage_gates(sL, nullptr, a, h, t0, b, n);
    __syncthreads();
    if (warp == 0) gate_prefix(sL, sSg, sZ, a.log_gate);
    norm_rows<NW>(sQ, sK, QS, n, a.Dk, a.l2norm);
    __syncthreads();
    auto decay = [&](int t, int s) { return chunk_decay(sL, sSg, sZ, t, s); };
    if (tid < kC) sD0[tid] = decay(tid, -1);
    {
        const tile_pass<NW, 4> tp(0, kC, kC);
        float acc[4][4];
        zero(acc);
        pass_mma<NW, 4, false>(acc, tp, DKP, [&](int t, int i) { return sQ[t * QS + i]; },
                               [&](int i, int s) { return sK[s * QS + i]; });
        pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int s) {
            for (int d = 0; d < 2; d++) sP[t * kPS + s + d] = s + d <= t ? tf32r(acc[i][e + d] * decay(t, s + d)) : 0.0f;
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
        for (int p = 0, np = pass_count<NW, 4>(kC, nc); p < np; p++) {
            const tile_pass<NW, 4> tp(p * NW * 4, kC, nc);
            float acc[4][4];
            zero(acc);
            pass_mma<NW, 4, false>(acc, tp, DKP, [&](int t, int i) { return sQ[t * QS + i]; },
                                   [&](int i, int j) { return sS[i * kVSC + j]; });
            pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int j) {
                acc[i][e] = keep_zero_mul(sD0[t], acc[i][e]), acc[i][e + 1] = keep_zero_mul(sD0[t], acc[i][e + 1]);
            });
            pass_mma<NW, 4, true>(acc, tp, kC, [&](int t, int s) { return sP[t * kPS + s]; },
                                  [&](int s, int j) { return sV[s * kVSC + j]; });
            pass_pairs<NW, 4>(tp, [&](int i, int e, int t, int j) {
                if (t >= n || jb + j >= a.Dv) return;
                store_pair(tg_cuda_ptr(a.o, jb + j, h, t0 + t, b), a.o.nb[0], a.o.type, a.scale * acc[i][e],
                           a.scale * acc[i][e + 1], jb + j + 1 < a.Dv, a.o_pair);
            });
        }
    }
}

// 16-byte unit loads of rows of cnt elements: unit stride, rows (at any index of dims 1..3) and
// the start at col0 16-byte aligned, cnt * es a multiple of 16.
bool rows16(const tg_tensor *t, long long cnt, long long col0) {
    const size_t es = tg_type_size(t->type);
    if (t->nb[0] != es || (cnt * es) % 16 || ((uintptr_t)t->data + col0 * es) % 16) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16) return false;
    return true;
}

// Output column pairs (j even) as one store: unit stride, every row start aligned to a pair.
bool o_pairs(const tg_tensor *o) {
    const size_t es = tg_type_size(o->type), al = 2 * es;
    if (o->nb[0] != es || (uintptr_t)o->data % al) return false;
    for (int i = 1; i < 4; i++)
        if (o->ne[i] > 1 && o->nb[i] % al) return false;
    return true;
}

// Bytes of the chunk-parallel form's scratch, and the regions' offsets (floats, 256-byte aligned):
// W (GATED_DELTA), Kd, U (64 rows each per unit), S_c (DKP x DVP per unit), gamma (one per unit).
size_t phase_scratch(long long units, int DKP, int DVP, bool delta, size_t off[5]) {
    const size_t per[5] = {delta ? (size_t)kC * DKP : 0, (size_t)kC * DKP, (size_t)kC * DVP, (size_t)DKP * DVP, 1};
    size_t total = 0;
    for (int i = 0; i < 5; i++) off[i] = total, total += ((size_t)units * per[i] + 63) / 64 * 64;
    return total * sizeof(float);
}

// Raise a kernel's dynamic shared-memory limit once (grow-only).
template <typename K> tg_status smem_limit(tg_backend *be, K kernel, size_t smem, size_t &set, const char *call) {
    if (smem > set) {
        TG_CUDA_TRY(be, call, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = smem;
    }
    return TG_OK;
}

// The chunk-parallel form (prep, state pass, output), when its shared memory fits the device and
// its scratch the budget; *taken false: the caller runs the single-kernel form instead.
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
    const size_t sp = prep_smem(a.DKP, a.DVP), ss = state_smem(a.DKP, BV, a.nbuf), so = out_smem(a.DKP);
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
    static size_t set[3] = {0, 0, 0};
    if ((s = smem_limit(be, delta_prep_kernel, sp, set[0], call)) != TG_OK) return s;
    if ((s = smem_limit(be, delta_state_kernel, ss, set[1], call)) != TG_OK) return s;
    if ((s = smem_limit(be, delta_out_kernel, so, set[2], call)) != TG_OK) return s;
    *taken = true;
    delta_prep_kernel<<<(unsigned)units, 256, sp, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    delta_state_kernel<<<(unsigned)((long long)a.nslices * c.Hv * c.B), 128, ss, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    delta_out_kernel<<<(unsigned)units, 256, so, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    static char name[64];
    snprintf(name, sizeof(name), "chunked-3p/dk%d/bv%d/nb%d%s", a.DKP, BV, a.nbuf, a.qk_vec ? "" : "/scalar");
    cu->sig_last[TG_CUDA_SIG_DELTA] = name;
    return TG_OK;
}

}  // namespace

bool tg_cuda_delta_heads_fill(tg_backend *be, long long B, long long Hv) {
    const int sms = tg_cuda(be)->sm_count > 0 ? tg_cuda(be)->sm_count : 132;
    return 2 * B * Hv > sms;
}

bool tg_cuda_delta_chunked_covers(long long Dk, long long Dv) {
    return Dk >= 8 && Dk <= 256 && Dk % 8 == 0 && Dv >= 1 && Dv <= 256;
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
    // fits and whose tiles fit the warps' accumulators (16 warps from 64 columns on, else 8); then
    // halved (to 16 at least) while the grid would fill less than half the SMs
    int dev = 0, optin = 0;
    TG_CUDA_TRY(be, call, cudaGetDevice(&dev));
    TG_CUDA_TRY(be, call, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    a.qk_vec = rows16(q, Dk, 0) && rows16(k, Dk, 0);
    a.o_pair = o_pairs(dst);
    // the form: chunk-parallel where the (sequence, value head) pairs alone would not fill the GPU
    // (B1 H16 T16384 BF16: 4,804 us against 13,123 single-kernel, 9,404 scan), single-kernel where
    // they do (B8 H16 T2048: 2,052 us against 3,855 chunk-parallel; bench/NOTES.md); knob 1 / 2 forces
    if (cu->sig.delta_chunk_fused == 2 || (cu->sig.delta_chunk_fused == 0 && !tg_cuda_delta_heads_fill(be, B, Hv))) {
        bool taken = false;
        const tg_status s = run_phases(be, dst, a, optin, &taken);
        if (s != TG_OK || taken) return s;
    }
    const int sms = cu->sm_count > 0 ? cu->sm_count : 132;
    auto warps_for = [](int bv) { return bv >= 64 ? 16 : 8; };
    auto fits = [&](int bv) {
        return chunk_smem(a.DKP, bv) <= (size_t)optin && a.DKP * bv <= kTilesS * warps_for(bv) * 128 &&
               4 * (bv / 8) <= kTilesC * warps_for(bv);
    };
    int BV = cu->sig.delta_chunk_bv > 0 ? cu->sig.delta_chunk_bv : 128;
    while (BV > 8 && BV / 2 >= Dv) BV /= 2;
    while (BV > 8 && !fits(BV)) BV /= 2;
    while (cu->sig.delta_chunk_bv == 0 && BV > 16 && 2LL * B * Hv * ((Dv + BV - 1) / BV) <= sms) BV /= 2;
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
    static size_t smem_set[2] = {0, 0};  // each kernel's dynamic shared-memory limit, raised once (grow-only)
    if (smem > smem_set[nw == 16]) {
        TG_CUDA_TRY(be, call, nw == 16 ? cudaFuncSetAttribute(delta_chunked_kernel<16>,
                                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
                                       : cudaFuncSetAttribute(delta_chunked_kernel<8>,
                                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set[nw == 16] = smem;
    }
    if (nw == 16) delta_chunked_kernel<16><<<(unsigned)blocks, 16 * 32, smem, cu->stream>>>(a);
    else delta_chunked_kernel<8><<<(unsigned)blocks, 8 * 32, smem, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    static char name[64];
    snprintf(name, sizeof(name), "chunked-tf32/dk%d/bv%d/w%d%s", a.DKP, BV, nw, a.qk_vec ? "" : "/scalar");
    cu->sig_last[TG_CUDA_SIG_DELTA] = name;
    return TG_OK;
}
