// chunk_parts.cuh - the pieces both forms of the chunked delta rule share
// (cuda/delta_rule_chunked.cu: the single-kernel form and the host entry;
// cuda/delta_rule_chunked_phases.cu: the chunk-parallel form): the call's
// arguments, gate prefix and decays, row norms, staging of q/k/v rows,
// (I + A)^-1 of a chunk, paired output stores, and the host layout checks.
// The products themselves are in chunk_mma.cuh.
#pragma once
#include <cstdint>

#include "chunk_mma.cuh"
#include "common.cuh"
#include "delta_rule.cuh"

namespace tg_chunk {

constexpr int kC = 64;       // tokens per chunk
constexpr int kPS = kC + 4;  // row stride of the C x C matrices (floats)
constexpr int kUnits = 8;    // 16-byte loads in flight per thread when staging

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
    // GATED_LINEAR's segments on delta_wgb_seg_kernel (nseg >= 2, else unused): nseg segments of tseg
    // tokens (a multiple of the chunk), the last one shorter; seg_s nseg slots of 16,384 floats a
    // (slice, value head, sequence): the first nseg - 1 segments' end states (segment 0's from the
    // call's state, the others' from zero) and the call's state; seg_g the segments' decays (two
    // floats a (segment, value head, sequence): gamma, and 1 where a chunk's decay was NaN)
    long long tseg;
    int nseg;
    float *seg_s, *seg_g;
    // delta_wgb_kernel and the segment kernels: every chunk's gate arrays made beforehand by
    // delta_gates_kernel (chunk c of value head h, sequence b at G + ((b Hv + h) NC + c) kGateWords,
    // NC = ceil(T / kC); cuda/delta_rule_phases.cuh) and copied beside the chunk's tiles; NULL: made
    // in the kernel by warp 0, a chunk ahead (knob delta_chunk_gk 1)
    const float *G;
};

__host__ __device__ inline int q_stride(int DKP) { return DKP + 4; }
__host__ __device__ inline int v_stride(int BV) { return BV + 8; }

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
// After gate_prefix, by the same warp (two tokens per lane): the decays from the chunk's start
// d0[t] = d(t, -1) and to its end dl[t] = d(C-1, t), and the factor tables of d(t, s) for s >= 0:
// ep[t] = sign_t exp(L_t - M), em[s] = sign_s exp(M - L_s), M the midpoint of the chunk's prefix
// range, so that d(t, s) = ep[t] em[s] (0 where a zero gate lies in (s, t]). *tab says whether the
// tables hold: the range spans at most 64 (each factor within e^32 of 1, no overflow, no
// denormal); otherwise (strong decays, inf or NaN gates) callers take chunk_decay per element.
// *tab bit 1: every d0 is finite, so that keep_zero_mul by any of them (d(C-1, -1) included) is a
// plain product up to the sign of a zero (by_mul); bit 2: every dl is finite (the same for dl).
__device__ inline void chunk_decays(const float *sL, const float *sSg, const int *sZ, float *d0, float *dl, float *ep,
                                    float *em, int *tab) {
    const int lane = threadIdx.x & 31;
    const float a = sL[2 * lane], b = sL[2 * lane + 1];
    float lo = fminf(a, b), hi = fmaxf(a, b);
    bool bad = isnan(a) || isnan(b);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, off));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, off));
    }
    bad = __any_sync(0xffffffffu, bad);
    const bool ok = !bad && hi - lo <= 64.0f;  // false for an inf or NaN in the range too
    const float mid = ok ? 0.5f * (hi + lo) : 0.0f;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int r = 2 * lane + e;
        d0[r] = chunk_decay(sL, sSg, sZ, r, -1);
        dl[r] = chunk_decay(sL, sSg, sZ, kC - 1, r);
        ep[r] = ok ? sSg[r] * expf(sL[r] - mid) : 0.0f;
        em[r] = ok ? sSg[r] * expf(mid - sL[r]) : 0.0f;
    }
    const bool fin = __all_sync(0xffffffffu, isfinite(d0[2 * lane]) && isfinite(d0[2 * lane + 1]));
    const bool finl = __all_sync(0xffffffffu, isfinite(dl[2 * lane]) && isfinite(dl[2 * lane + 1]));
    if (lane == 0) *tab = (ok ? 1 : 0) | (fin ? 2 : 0) | (finl ? 4 : 0);
}
// The gates and betas of the chunk at token c0 of head h, sequence b (nn tokens; past them a
// neutral gate and beta 0), two tokens per lane of the calling warp (2 lane, 2 lane + 1), into
// registers: loaded a phase before chunk_gates uses them. A: chunk_args or the chunk-parallel form's
// phase_args (their g, beta and log_gate).
template <class A>
__device__ inline void load_chunk_gates(const A &a, int h, int b, long long c0, int nn, float (&gl)[2], float (&bl)[2]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int t = 2 * lane + e;
        gl[e] = t < nn ? __ldg((const float *)tg_cuda_ptr(a.g, h, c0 + t, b, 0)) : (a.log_gate ? 0.0f : 1.0f);
        bl[e] = t < nn ? __ldg((const float *)tg_cuda_ptr(a.beta, h, c0 + t, b, 0)) : 0.0f;
    }
}
// ... then, by the same warp, into sL and sB, the gate prefix and the chunk's decays.
__device__ inline void chunk_gates(const float (&gl)[2], const float (&bl)[2], int log_gate, float *sL, float *sB,
                                   float *sSg, int *sZ, float *d0, float *dl, float *ep, float *em, int *tab) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int e = 0; e < 2; e++) sL[2 * lane + e] = gl[e], sB[2 * lane + e] = bl[e];
    __syncwarp();
    gate_prefix(sL, sSg, sZ, log_gate);
    __syncwarp();
    chunk_decays(sL, sSg, sZ, d0, dl, ep, em, tab);
}
// d(t, s) for 0 <= s <= t of one chunk: by the tables where they hold (chunk_decays), else exactly
__device__ inline float decay_ts(const float *sL, const float *sSg, const int *sZ, const float *ep, const float *em,
                                 bool tab, int t, int s) {
    if (!tab) return chunk_decay(sL, sSg, sZ, t, s);
    return sZ[t] > s ? 0.0f : ep[t] * em[s];
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
// f(mul) with mul the plain product where every factor is known finite (fin: then a zero stays a
// zero anyway, up to its sign), else keep_zero_mul: one uniform branch instead of a test per element.
template <typename F> __device__ inline void by_mul(bool fin, F f) {
    if (fin) f([](float d, float x) { return d * x; });
    else f([](float d, float x) { return keep_zero_mul(d, x); });
}

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

// log2 d where d (> 0) is a power of 2, else -1: index loops shift instead of dividing.
__device__ inline int pow2_shift(int d) { return d > 0 && (d & (d - 1)) == 0 ? __ffs(d) - 1 : -1; }
// x / d and x % d (x >= 0) for a divisor fixed per launch: a shift and a mask where d is a power of 2.
struct idiv {
    int d, sh;
    __device__ explicit idiv(int d_) : d(d_), sh(pow2_shift(d_)) {}
    __device__ void split(int x, int &q, int &r) const {
        if (sh >= 0) q = x >> sh, r = x & (d - 1);
        else q = x / d, r = x - q * d;
    }
};

// Rows of up to three tensors staged as stage_rows does (vec case only), in shared rounds: the
// 16-byte loads of all three are in flight together, one memory latency per kUnits NT units
// rather than one per tensor at least. A job of n = 0 rows is skipped.
struct row_job {
    float *dst;
    int ds;            // row stride of dst (floats)
    const char *base;  // row t at base + t * rs
    long long rs;
    tg_type type;
    int n, cnt;  // rows, elements per row (cnt * element size a multiple of 16)
};
template <int NT> __device__ inline void stage3(const row_job &j0, const row_job &j1, const row_job &j2) {
    const int tid = threadIdx.x;
    const int p0 = j0.type == TG_TYPE_F32 ? 4 : 8, p1 = j1.type == TG_TYPE_F32 ? 4 : 8, p2 = j2.type == TG_TYPE_F32 ? 4 : 8;
    const int U0 = j0.cnt / p0, U1 = j1.cnt / p1, U2 = j2.cnt / p2;
    const int e0 = j0.n * U0, e1 = e0 + j1.n * U1, total = e1 + j2.n * U2;
    // unit u: its job, row and 16-byte column (a shift where the units per row are a power of 2)
    const int s0 = pow2_shift(U0), s1 = pow2_shift(U1), s2 = pow2_shift(U2);
    auto at = [&](int u, int &job, int &t, int &c) {
        job = u < e0 ? 0 : u < e1 ? 1 : 2;
        const int v = u - (job == 0 ? 0 : job == 1 ? e0 : e1), sh = job == 0 ? s0 : job == 1 ? s1 : s2;
        if (sh >= 0) {
            t = v >> sh, c = v & ((1 << sh) - 1);
        } else {
            const int uu = job == 0 ? U0 : job == 1 ? U1 : U2;
            t = v / uu, c = v - t * uu;
        }
    };
#pragma unroll 1
    for (int u0 = 0; u0 < total; u0 += NT * kUnits) {
        uint4 r[kUnits];
#pragma unroll
        for (int m = 0; m < kUnits; m++) {
            const int u = u0 + tid + NT * m;
            if (u < total) {
                int job, t, c;
                at(u, job, t, c);
                const char *base = job == 0 ? j0.base : job == 1 ? j1.base : j2.base;
                const long long rs = job == 0 ? j0.rs : job == 1 ? j1.rs : j2.rs;
                r[m] = __ldg((const uint4 *)(base + t * rs + 16LL * c));
            }
        }
#pragma unroll
        for (int m = 0; m < kUnits; m++) {
            const int u = u0 + tid + NT * m;
            if (u < total) {
                int job, t, c;
                at(u, job, t, c);
                float *dst = job == 0 ? j0.dst : job == 1 ? j1.dst : j2.dst;
                const int ds = job == 0 ? j0.ds : job == 1 ? j1.ds : j2.ds;
                const tg_type type = job == 0 ? j0.type : job == 1 ? j1.type : j2.type;
                put_unit(dst + t * ds + c * (type == TG_TYPE_F32 ? 4 : 8), r[m], type);
            }
        }
    }
}

// A 16-byte unit of a row as floats (F32: 4 values, f[4..7] zero; F16/BF16: 8); all zero where
// !in (a row past the chunk's end). Returns the count of values.
__device__ __forceinline__ int unit_floats(const uint4 &u, tg_type type, bool in, float (&f)[8]) {
    int cnt = 8;
    if (type == TG_TYPE_F32) {
        cnt = 4;
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
        f[4] = f[5] = f[6] = f[7] = 0.0f;
    } else {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 x;
            if (type == TG_TYPE_F16) {
                __half2 hh;
                memcpy(&hh, &w[e], 4);
                x = __half22float2(hh);
            } else {
                __nv_bfloat162 hh;
                memcpy(&hh, &w[e], 4);
                x = __bfloat1622float2(hh);
            }
            f[2 * e] = x.x, f[2 * e + 1] = x.y;
        }
    }
    if (!in) {
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = 0.0f;
    }
    return cnt;
}
// A q or k unit's values l2-normalized over the row (norm; the row's units are the 2^sh lanes
// around this one, every lane of the warp calls this) and rounded to TF32.
__device__ __forceinline__ void qk_unit_finish(float (&f)[8], int sh, int norm) {
    float mul = 1.0f;
    if (norm) {  // every lane takes part in the shuffles (rows past n: zeros, not stored)
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) ss = fmaf(f[e], f[e], ss);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float o = __shfl_xor_sync(0xffffffffu, ss, off);
            if (off < (1 << sh)) ss += o;  // within the row's lanes
        }
        mul = rsqrtf(ss + 1e-6f);
    }
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = tf32r(f[e] * mul);
}

// Rows t < n of three tensors whose rows are 128 elements (16-byte units, as stage3): each
// thread's units of all three in flight together, then converted and stored; the unit's row
// and column by shift and mask. The first two (q and k) are l2-normalized as norm_rows<NW, true>
// does it when norm, and rounded to TF32 either way, on the way: a row's units are the lanes of
// one warp (F32: 32 units) or of one half-warp (16-bit: 16), so its sum of squares is a shuffle
// reduction over them (in F32, 128 values: a relative error near 1e-6, far under the TF32 rounding
// that follows; one rsqrt).
// Unit u of a job of 128-element rows (sh: log2 of the units per row, 5 for F32, 4 for 16 bits).
__device__ inline int unit_shift(const row_job &j) { return j.type == TG_TYPE_F32 ? 5 : 4; }
// The units thread tid takes of such a job, u = tid + NT m (NT a multiple of 32, so NT m adds whole
// rows): row row0 + m rstep, 16-byte column tid & (2^sh - 1); its source and destination pointers
// are set once and step by a fixed amount per m (recomputing them per unit was ~10% of the single
// kernel's stall samples, session 38).
struct unit_walk {
    int sh, row0, rstep;
    const char *src;
    long long sstep;
    float *dst;
    int dstep;
    template <int NT> __device__ static unit_walk of(const row_job &j) {
        unit_walk w;
        const int tid = threadIdx.x;
        w.sh = unit_shift(j), w.row0 = tid >> w.sh, w.rstep = NT >> w.sh;
        const int col = tid & ((1 << w.sh) - 1);
        // (as an integer: an empty job has no base, and its pointer is never formed nor read)
        w.src = (const char *)((uintptr_t)j.base + (uintptr_t)(w.row0 * j.rs + 16LL * col)), w.sstep = w.rstep * j.rs;
        w.dst = j.dst + w.row0 * j.ds + col * (j.type == TG_TYPE_F32 ? 4 : 8), w.dstep = w.rstep * j.ds;
        return w;
    }
};
template <int NT> __device__ inline void stage3_128(const row_job &j0, const row_job &j1, const row_job &j2, int norm) {
    static_assert(NT % 32 == 0, "whole warps");
    constexpr int M = (kC * 32 + NT - 1) / NT;  // units per thread and tensor at most (F32 rows: 32 units)
    const row_job *job[3] = {&j0, &j1, &j2};
    unit_walk wk[3];
#pragma unroll
    for (int j = 0; j < 3; j++) wk[j] = unit_walk::of<NT>(*job[j]);
    uint4 r[3][M];
#pragma unroll
    for (int j = 0; j < 3; j++) {
#pragma unroll
        for (int m = 0; m < M; m++)
            if (wk[j].row0 + m * wk[j].rstep < job[j]->n) r[j][m] = __ldg((const uint4 *)(wk[j].src + m * wk[j].sstep));
    }
#pragma unroll
    for (int j = 0; j < 3; j++) {
        const tg_type type = job[j]->type;
        const int sh = wk[j].sh;
#pragma unroll
        for (int m = 0; m < M; m++) {
            // the same for every lane of a row's lanes (rows are whole)
            const bool in = wk[j].row0 + m * wk[j].rstep < job[j]->n;
            float f[8];
            const int cnt = unit_floats(r[j][m], type, in, f);
            if (j < 2) qk_unit_finish(f, sh, norm);
            if (!in) continue;
            float *d = wk[j].dst + m * wk[j].dstep;
            *(float4 *)d = make_float4(f[0], f[1], f[2], f[3]);
            if (cnt == 8) *(float4 *)(d + 4) = make_float4(f[4], f[5], f[6], f[7]);
        }
    }
}
// The units stage3_128 would load for the same jobs, prefetched into L2 (the next chunk's rows
// while this chunk computes).
template <int NT> __device__ inline void prefetch3_128(const row_job &j0, const row_job &j1, const row_job &j2) {
    constexpr int M = (kC * 32 + NT - 1) / NT;
    const row_job *job[3] = {&j0, &j1, &j2};
    const bool even = (threadIdx.x & 1) == 0;  // u = tid + NT m is even with tid
#pragma unroll
    for (int j = 0; j < 3; j++) {
        // one prefetch per 32-byte sector pair is enough: every other unit
        const unit_walk w = unit_walk::of<NT>(*job[j]);
#pragma unroll
        for (int m = 0; m < M; m++)
            if (even && w.row0 + m * w.rstep < job[j]->n) asm volatile("prefetch.global.L2 [%0];" ::"l"(w.src + m * w.sstep));
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

// Column c of the diagonal 16 x 16 block at b0 of T = (I + A)^-1: (I + A_bb) x = e_c by forward
// substitution (reads only that block of A), right-looking: once x_r is known it is taken out of every
// later row at once (y_t -= A_tr x_r, t > r), so that each step's updates are independent of one
// another and x_{r+1} waits on one multiply-add, not on a row's whole dot product. Each y_t still sums
// its terms in the order r = 0, 1, ..., t - 1, as the row-by-row form did: the same bits.
__device__ inline void invert_diag16(const float *sA, float *sT, int b0, int c) {
    float y[16];
#pragma unroll
    for (int t = 0; t < 16; t++) y[t] = t == c ? 1.0f : 0.0f;
#pragma unroll
    for (int r = 0; r < 16; r++) {
        y[r] = r < c ? 0.0f : y[r];  // x_r
#pragma unroll
        for (int t = r + 1; t < 16; t++) y[t] = fmaf(-sA[(b0 + t) * kPS + b0 + r], y[r], y[t]);
    }
#pragma unroll
    for (int t = 0; t < 16; t++) sT[(b0 + t) * kPS + b0 + c] = y[t];
}
// ... the rest of the doubling, once the four diagonal blocks are in sT (after a barrier)
template <int NT> __device__ inline void invert_unit_lower_doubling_rest(const float *sA, float *sT);
// T = (I + A)^-1 as invert_unit_lower computes it, by NT threads (warps 0-3 at least), by doubling:
// the four 16 x 16 diagonal blocks by forward substitution (one thread per column, the column in
// registers: invert_diag16), then the 32 x 32 diagonal halves (T_10 = -T_11 A_10 T_00 for both
// halves at once), then the 64 x 64 whole (the same with 32 x 32 blocks), the products on tensor
// cores (invert_unit_lower_doubling_rest). The products X = A_10 T_00 go to the unused upper blocks
// of sT. Ends before the last barrier: the caller syncs.
template <int NT> __device__ inline void invert_unit_lower_doubling(const float *sA, float *sT) {
    static_assert(NT % 32 == 0 && NT >= 128, "warps 0-3");
    const int tid = threadIdx.x;
    if (tid < kC) invert_diag16(sA, sT, tid & ~15, tid & 15);  // diagonal block b, column c
    __syncthreads();
    invert_unit_lower_doubling_rest<NT>(sA, sT);
}
// x's TF32 part as the tensor cores read it: its F32 bits past the 10-bit mantissa dropped (one mask,
// where cvt.rna.tf32.f32 is six instructions on sm_90); x - tf32_hi(x) is exact in F32
__device__ inline unsigned tf32_hi(float x) { return __float_as_uint(x) & 0xffffe000u; }
// D = A B for one warp's 16 x 8 tile over k steps kb .. ke - 1 of 8: A's rows at a (16 of them,
// row stride kPS), B's at b (k rows, stride kPS, 8 columns), both F32 in shared memory, on TF32
// tensor cores with each operand split into hi = tf32_hi(x) and lo = x - hi (which the tensor cores
// truncate to TF32 in turn) and three products (hi hi, hi lo, lo hi: the operands to about 2^-20,
// the lo lo term dropped) in three accumulators (shorter dependent chains), added at the end:
// near-F32 products. d: rows g and g + 8, columns 2c and 2c + 1 (g = lane / 4, c = lane % 4), the
// mma.sync m16n8k8 accumulator layout. The k loop stays rolled: unrolled, its loads for every step
// at once took registers the wgmma kernels need (24-32 bytes of spills in delta_wgb_pre_kernel<true>
// and delta_wg_kernel<true>, none rolled).
__device__ inline void mma3_tile(const float *a, const float *b, int kb, int ke, float (&d)[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    float hh[4] = {0.0f, 0.0f, 0.0f, 0.0f}, hl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lh[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
    for (int ks = kb; ks < ke; ks++) {
        const int k = 8 * ks;
        const float av[4] = {a[g * kPS + k + c], a[(g + 8) * kPS + k + c], a[g * kPS + k + c + 4], a[(g + 8) * kPS + k + c + 4]};
        const float bv[2] = {b[(k + c) * kPS + g], b[(k + c + 4) * kPS + g]};
        frag_a ah, al;
        frag_b bh, bl;
#pragma unroll
        for (int i = 0; i < 4; i++) ah.x[i] = tf32_hi(av[i]), al.x[i] = __float_as_uint(av[i] - __uint_as_float(ah.x[i]));
#pragma unroll
        for (int i = 0; i < 2; i++) bh.x[i] = tf32_hi(bv[i]), bl.x[i] = __float_as_uint(bv[i] - __uint_as_float(bh.x[i]));
        mma_tf32(hh, ah, bh);
        mma_tf32(hl, ah, bl);
        mma_tf32(lh, al, bh);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) d[i] = (lh[i] + hl[i]) + hh[i];
}
// Stores sign * d (mma3_tile's tile) at row 0 of p (stride kPS)
__device__ inline void put_tile(float *p, const float (&d)[4], float sign) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    *(float2 *)&p[g * kPS + 2 * c] = make_float2(sign * d[0], sign * d[1]);
    *(float2 *)&p[(g + 8) * kPS + 2 * c] = make_float2(sign * d[2], sign * d[3]);
}
// The doubling's four products on TF32 tensor cores (mma3_tile: near-F32) by warps 0-3. Each step's
// second product needs only the columns of X that the same warp made, so a warp makes both: 16 -> 32
// one 16 x 8 tile of a half, 32 -> 64 one 8-column tile of both row blocks; one barrier between the
// steps. With every value finite these are the F32 products the CUDA-core loops summed before session
// 55, up to rounding: the triangles' zeros are exact zeros (invert_diag16 writes them), and the
// blocks those loops skipped as partial sums (the X of the step before, above the diagonal) are
// skipped here too, by whole k steps. A value that is not finite meets the triangles' zeros (0 x NaN
// = NaN; an inf splits into hi = inf and lo = NaN), so a NaN or inf in row r of A reaches T's rows from
// the start of r's 16-row block on (the CUDA-core loops: from r, and an inf could stay inf), inside the
// chunk: the outputs of that chunk are already not kept to the NaN's token by the other products
// (docs/ops.md "NaN"), and every later chunk gets NaN from the state either way. Ends before the last
// barrier.
template <int NT> __device__ inline void invert_unit_lower_doubling_rest(const float *sA, float *sT) {
    static_assert(NT % 32 == 0 && NT >= 128, "warps 0-3");
    const int warp = threadIdx.x >> 5;
    if (warp < 4) {
        // 16 -> 32, half h (rows 32 h ..), columns 8 j ..: X = A_10 T_00 into block (0, 1) of the half,
        // then T_10 = -T_11 X into block (1, 0)
        const int h0 = 32 * (warp >> 1), j8 = 8 * (warp & 1);
        float d[4];
        mma3_tile(sA + (h0 + 16) * kPS + h0, sT + h0 * kPS + h0 + j8, 0, 2, d);
        put_tile(sT + h0 * kPS + h0 + 16 + j8, d, 1.0f);
        __syncwarp();  // (the warp's own X tile, read back by its other lanes)
        mma3_tile(sT + (h0 + 16) * kPS + h0 + 16, sT + h0 * kPS + h0 + 16 + j8, 0, 2, d);
        put_tile(sT + (h0 + 16) * kPS + h0 + j8, d, -1.0f);
    }
    __syncthreads();
    if (warp < 4) {
        // 32 -> 64, columns 8 j .., rows 0 .. 15 and 16 .. 31 of X = A_10 T_00 (T_00's block (0, 1) is
        // the first step's X: columns 16 .. take k from 16 on) into the upper 32 x 32 block, then the
        // same rows of T_10 = -T_11 X (T_11's block (0, 1), the first step's X of half 1: rows 32 .. 47
        // take k < 16)
        const int n8 = 8 * warp, kb = n8 >= 16 ? 2 : 0;
        float d[4];
        mma3_tile(sA + 32 * kPS, sT + n8, kb, 4, d);
        put_tile(sT + 32 + n8, d, 1.0f);
        mma3_tile(sA + 48 * kPS, sT + n8, kb, 4, d);
        put_tile(sT + 16 * kPS + 32 + n8, d, 1.0f);
        __syncwarp();  // (the warp's own X columns, read back by its other lanes)
        mma3_tile(sT + 32 * kPS + 32, sT + 32 + n8, 0, 2, d);
        put_tile(sT + 32 * kPS + n8, d, -1.0f);
        mma3_tile(sT + 48 * kPS + 32, sT + 32 + n8, 0, 4, d);
        put_tile(sT + 48 * kPS + n8, d, -1.0f);
    }
}

// 16-byte unit loads of rows of cnt elements: unit stride, rows (at any index of dims 1..3) and
// the start at col0 16-byte aligned, cnt * es a multiple of 16.
inline bool rows16(const tg_tensor *t, long long cnt, long long col0) {
    const size_t es = tg_type_size(t->type);
    if (t->nb[0] != es || (cnt * es) % 16 || ((uintptr_t)t->data + col0 * es) % 16) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16) return false;
    return true;
}

// Output column pairs (j even) as one store: unit stride, every row start aligned to a pair.
inline bool o_pairs(const tg_tensor *o) {
    const size_t es = tg_type_size(o->type), al = 2 * es;
    if (o->nb[0] != es || (uintptr_t)o->data % al) return false;
    for (int i = 1; i < 4; i++)
        if (o->ne[i] > 1 && o->nb[i] % al) return false;
    return true;
}

// Raise a kernel's dynamic shared-memory limit once (grow-only).
template <typename K>
inline tg_status smem_limit(tg_backend *be, K kernel, size_t smem, size_t &set, const char *call) {
    if (smem > set) {
        TG_CUDA_TRY(be, call, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = smem;
    }
    return TG_OK;
}

// The chunk-parallel form (cuda/delta_rule_chunked_phases.cu), when its shared memory fits the
// device (optin bytes per block) and its scratch the budget; *taken false: the caller runs the
// single-kernel form instead.
tg_status run_phases(tg_backend *be, const tg_tensor *dst, const chunk_args &c, int optin, bool *taken);

// The full case with 16-bit q/k/v on warpgroup tensor cores (cuda/sm90a/delta_rule_chunked_wg.cu):
// whether this build has it (sm_90a code), the device runs it (compute capability 9.0) and knob
// delta_chunk_wg allows it; whether BF16 q/k/v (either mode) take the BF16 kernel there
// (knob 0; 2 keeps it on the TF32 one); its shared memory; its launch (grid: one block per slice,
// head and sequence, as delta_chunked_kernel<16, true>).
bool tg_cuda_delta_wg_ready(tg_backend *be);
bool tg_cuda_delta_wg_bf16(tg_backend *be, const chunk_args &a);
size_t tg_cuda_delta_wg_smem(tg_backend *be, const chunk_args &a);
bool tg_cuda_delta_wg_takes(const chunk_args &a);  // q, k and v F16 or BF16 (either mode)
tg_status tg_cuda_delta_wg_launch(tg_backend *be, const chunk_args &a, unsigned grid);
// ... the BF16 kernel's own (cuda/sm90a/delta_rule_chunked_wgb.cu; tg_cuda_delta_wg_launch calls it)
size_t tg_cuda_delta_wgb_smem(bool delta);
tg_status tg_cuda_delta_wgb_launch(tg_backend *be, const chunk_args &a, unsigned grid);
// GATED_LINEAR's segments (a.nseg >= 2, a.seg_s and a.seg_g set): the segments' states, then every
// segment's output (cuda/sm90a/delta_rule_chunked_wgb.cu); units: slices x value heads x sequences
tg_status tg_cuda_delta_wgb_seg_launch(tg_backend *be, const chunk_args &a, unsigned units);
// every chunk's gate arrays for those kernels (a.G's layout, above; units = B Hv NC) by
// delta_gates_kernel (cuda/delta_rule_chunked_phases.cu)
void tg_cuda_delta_gates_launch(tg_backend *be, const chunk_args &a, float *G, long long units);

}  // namespace tg_chunk
