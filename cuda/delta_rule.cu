// delta_rule.cu - the gated linear / gated delta-rule recurrence on CUDA
// (ggml_ops/delta_rule.cpp is the reference; DESIGN.md has the math).
//   delta_rule_kernel<NR, TPC, ST, VEC>  one fused recurrent kernel:
//       one block per (column slice, value head h, sequence b); TPC threads
//       own one column j of S (Dk x Dv), NR rows each, in registers for the
//       whole time loop: the state is read once and written once. Per chunk of
//       TC steps, q/k (normalized), v, gate and beta go to shared memory; per
//       step each column group does its dot products with a butterfly of
//       TPC lanes. Rows are dealt in 4-row chunks, chunk c = r + TPC*m to
//       thread r, so that the TPC threads of a column read TPC*16 contiguous
//       bytes per access (coalesced state traffic).
//   -> delta_rule_cuda (variant choice) -> tg_cuda_delta_rule
//
// Variants: (NR, TPC) covers Dk <= NR*TPC: (4|8|16|32, 4) for Dk <= 16|32|64|128,
// (16|32, 8) for Dk <= 128|256; Dk = 64 and 128 are the unpadded fast paths.
// VEC: the state moves in 4-element vectors (F32 16 B, F16/BF16 8 B), when
// Dk % 4 == 0 and the pointer and strides allow it; otherwise the scalar
// any-stride path. ST is the state's storage type (compute is F32).
#include <climits>
#include <cstdint>

#include "common.cuh"
#include "ops.h"
#include "signature.cuh"

const char *tg_cuda_sig_last_delta = "";

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxTC = 64;                  // steps per shared-memory chunk
constexpr int kSmemBudget = 40 * 1024;      // bytes of chunk buffers per block

struct delta_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv, B;
    long long T;
    int delta, log_gate, l2norm;  // mode GATED_DELTA, gate LOG, l2norm_qk
    float scale;
    int CB, nslices, TC;  // columns per block, blocks per head, steps per chunk
    int DKP;              // padded Dk = NR * TPC
};

// --- state storage: 4 consecutive elements, 4-element aligned -------------
template <typename ST> __device__ inline void load4(const char *p, float *d);
template <> __device__ inline void load4<float>(const char *p, float *d) {
    const float4 v = *(const float4 *)p;
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
}
template <> __device__ inline void load4<__half>(const char *p, float *d) {
    const uint2 u = *(const uint2 *)p;
    __half2 lo, hi;
    memcpy(&lo, &u.x, 4);
    memcpy(&hi, &u.y, 4);
    const float2 a = __half22float2(lo), b = __half22float2(hi);
    d[0] = a.x, d[1] = a.y, d[2] = b.x, d[3] = b.y;
}
template <> __device__ inline void load4<__nv_bfloat16>(const char *p, float *d) {
    const uint2 u = *(const uint2 *)p;
    __nv_bfloat162 lo, hi;
    memcpy(&lo, &u.x, 4);
    memcpy(&hi, &u.y, 4);
    const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
    d[0] = a.x, d[1] = a.y, d[2] = b.x, d[3] = b.y;
}
template <typename ST> __device__ inline void store4(char *p, const float *s);
template <> __device__ inline void store4<float>(char *p, const float *s) {
    *(float4 *)p = make_float4(s[0], s[1], s[2], s[3]);
}
template <> __device__ inline void store4<__half>(char *p, const float *s) {
    const __half2 lo = __floats2half2_rn(s[0], s[1]), hi = __floats2half2_rn(s[2], s[3]);
    uint2 u;
    memcpy(&u.x, &lo, 4);
    memcpy(&u.y, &hi, 4);
    *(uint2 *)p = u;
}
template <> __device__ inline void store4<__nv_bfloat16>(char *p, const float *s) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(s[0], s[1]), hi = __floats2bfloat162_rn(s[2], s[3]);
    uint2 u;
    memcpy(&u.x, &lo, 4);
    memcpy(&u.y, &hi, 4);
    *(uint2 *)p = u;
}

__device__ inline float ldf(const tg_cuda_desc &d, long long i0, long long i1, long long i2, long long i3) {
    return __ldg((const float *)tg_cuda_ptr(d, i0, i1, i2, i3));
}

// A 16-byte shared-memory load the compiler may not merge with an earlier one.
__device__ inline float4 lds4_fresh(const float4 *p) {
    float4 v;
    const unsigned addr = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
    return v;
}

// Sum over the TPC consecutive lanes of a column group (all lanes get it).
template <int TPC> __device__ inline float group_sum(float x) {
#pragma unroll
    for (int off = TPC / 2; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// S[:, j] += k u (rows this thread owns), then the partial sums of S^T q.
// MASK: rows past Dk (padding) are left alone.
template <int NC, int TPC, bool MASK>
__device__ inline float4 update_out(float (&S)[4 * NC], const float4 *k4, const float4 *q4, float u, int r, int Dk,
                                    bool delta) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < NC; m++) {
        // (delta: re-read, so that k is not kept live across the column sum)
        const float4 kk = delta ? lds4_fresh(k4 + r + TPC * m) : k4[r + TPC * m];
        const float4 qq = q4[r + TPC * m];
        const float kv[4] = {kk.x, kk.y, kk.z, kk.w}, qv[4] = {qq.x, qq.y, qq.z, qq.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!MASK || 4 * (r + TPC * m) + e < Dk) S[4 * m + e] = fmaf(kv[e], u, S[4 * m + e]);
            p[e] = fmaf(S[4 * m + e], qv[e], p[e]);
        }
    }
    return make_float4(p[0], p[1], p[2], p[3]);
}

template <int NR, int TPC, typename ST, bool VEC>
__global__ void __launch_bounds__(kMaxThreads) delta_rule_kernel(const delta_args a) {
    static_assert(NR % 4 == 0 && 32 % TPC == 0, "layout");
    constexpr int NC = NR / 4;  // 4-row chunks per thread
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    const int DKP = a.DKP, CB = a.CB, TC = a.TC;
    float *sq = sm, *sk = sq + TC * DKP, *sv = sk + TC * DKP, *so = sv + TC * CB, *sg = so + TC * CB, *sb = sg + TC;

    const int tid = threadIdx.x, nth = blockDim.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const int jj = tid / TPC, r = tid % TPC, j = slice * CB + jj;
    const bool col = jj < CB && j < a.Dv;

    // 1. this thread's part of column j of S (rows 4c..4c+3, c = r + TPC*m): first, so its latency
    //    overlaps the staging of the first chunk
    float S[NR];
    const bool has_state = a.state.data != nullptr;
    const char *scol = has_state ? tg_cuda_ptr(a.state, 0, j, h, b) : nullptr;
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const int i0 = 4 * (r + TPC * m);
#pragma unroll
        for (int e = 0; e < 4; e++) S[4 * m + e] = 0.0f;
        if (has_state && col) {
            if (VEC) {
                if (i0 < a.Dk) load4<ST>(scol + (long long)i0 * sizeof(ST), &S[4 * m]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (i0 + e < a.Dk) S[4 * m + e] = tg_cuda_load(scol + (i0 + e) * a.state.nb[0], a.state.type);
            }
        }
    }

    for (long long t0 = 0; t0 < a.T; t0 += TC) {
        const int n = (int)(a.T - t0 < TC ? a.T - t0 : TC);
        __syncthreads();  // the previous chunk's readers are done
        // 2. stage the chunk: q, k rows (zero-padded to DKP), v slice, a_t, beta_t
        for (int x = tid; x < n * DKP; x += nth) {
            const int s = x / DKP, i = x - s * DKP;
            const bool in = i < a.Dk;
            sq[x] = in ? ldf(a.q, i, hk, t0 + s, b) : 0.0f;
            sk[x] = in ? ldf(a.k, i, hk, t0 + s, b) : 0.0f;
        }
        for (int x = tid; x < n * CB; x += nth) {
            const int s = x / CB, jv = slice * CB + (x - s * CB);
            sv[x] = jv < a.Dv ? ldf(a.v, jv, h, t0 + s, b) : 0.0f;
        }
        for (int s = tid; s < n; s += nth) {
            const float gv = ldf(a.g, h, t0 + s, b, 0);
            sg[s] = a.log_gate ? expf(gv) : gv;
            sb[s] = ldf(a.beta, h, t0 + s, b, 0);
        }
        __syncthreads();
        if (a.l2norm) {
            // as tg_l2_norm(x, 1e-6) and the CPU: sum of squares in double, one F32 multiplier
            const int w = tid / 32, lane = tid % 32, nw = nth / 32;
            for (int y = w; y < 2 * n; y += nw) {
                float *row = (y < n ? sq : sk) + (y % n) * DKP;
                double ss = 0.0;
                for (int i = lane; i < a.Dk; i += 32) ss += (double)row[i] * row[i];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                const float inv = (float)(1.0 / sqrt(ss + (double)1e-6f));
                for (int i = lane; i < a.Dk; i += 32) row[i] *= inv;
            }
            __syncthreads();
        }

        // 3. the recurrence, step by step. k and q are read from shared memory
        //    chunk by chunk where they are used (not held in NR registers), so
        //    the state's registers dominate and more blocks fit per SM.
#pragma unroll 1
        for (int s = 0; s < n; s++) {
            const float at = sg[s], bt = sb[s], vj = col ? sv[s * CB + jj] : 0.0f;
            const float4 *k4 = (const float4 *)(sk + s * DKP), *q4 = (const float4 *)(sq + s * DKP);
            // S = a S. An exact zero stays zero under an infinite gate (a = exp(g)
            // overflowed), as on the CPU; a is uniform, so is the branch.
            if (isfinite(at)) {
#pragma unroll
                for (int x = 0; x < NR; x++) S[x] *= at;
            } else {
#pragma unroll
                for (int x = 0; x < NR; x++) S[x] = (S[x] == 0.0f && !isnan(at)) ? 0.0f : at * S[x];
            }
            float u;  // column j's update: S[:, j] += k * u
            if (a.delta) {
                // u = beta (v - S^T k), on the decayed S
                float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int m = 0; m < NC; m++) {
                    const float4 kk = k4[r + TPC * m];
                    p[0] = fmaf(S[4 * m], kk.x, p[0]);
                    p[1] = fmaf(S[4 * m + 1], kk.y, p[1]);
                    p[2] = fmaf(S[4 * m + 2], kk.z, p[2]);
                    p[3] = fmaf(S[4 * m + 3], kk.w, p[3]);
                }
                u = bt * (vj - group_sum<TPC>((p[0] + p[1]) + (p[2] + p[3])));
            } else {
                u = bt * vj;
            }
            // the update, and o_t = scale * S^T q on the updated S. A non-finite u
            // (inf/NaN inputs) must not reach the zero padding rows (k = 0 there,
            // 0 * inf = NaN), which the CPU does not have.
            const float4 p = isfinite(u) ? update_out<NC, TPC, false>(S, k4, q4, u, r, a.Dk, a.delta)
                                         : update_out<NC, TPC, true>(S, k4, q4, u, r, a.Dk, a.delta);
            const float o = group_sum<TPC>((p.x + p.y) + (p.z + p.w));
            if (r == 0 && col) so[s * CB + jj] = a.scale * o;
        }
        __syncthreads();
        // 4. the chunk's outputs, coalesced along Dv
        for (int x = tid; x < n * CB; x += nth) {
            const int s = x / CB, jv = slice * CB + (x - s * CB);
            if (jv < a.Dv) *(float *)tg_cuda_ptr(a.o, jv, h, t0 + s, b) = so[x];
        }
    }

    // 5. the final state, once
    if (has_state && col) {
        char *dcol = (char *)scol;
#pragma unroll
        for (int m = 0; m < NC; m++) {
            const int i0 = 4 * (r + TPC * m);
            if (VEC) {
                if (i0 < a.Dk) store4<ST>(dcol + (long long)i0 * sizeof(ST), &S[4 * m]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (i0 + e < a.Dk) tg_cuda_store(dcol + (i0 + e) * a.state.nb[0], a.state.type, S[4 * m + e]);
            }
        }
    }
}

bool elem_aligned(const tg_tensor *t) {
    const size_t es = tg_type_size(t->type);
    if ((uintptr_t)t->data % es) return false;
    for (int i = 0; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % es) return false;
    return true;
}

typedef void (*delta_kernel_fn)(delta_args);

template <int NR, int TPC> delta_kernel_fn pick_kernel(bool vec, tg_type st) {
    if (!vec) return delta_rule_kernel<NR, TPC, float, false>;
    if (st == TG_TYPE_F16) return delta_rule_kernel<NR, TPC, __half, true>;
    if (st == TG_TYPE_BF16) return delta_rule_kernel<NR, TPC, __nv_bfloat16, true>;
    return delta_rule_kernel<NR, TPC, float, true>;
}

}  // namespace

// delta_rule: src q, k, v, g, beta, state|NULL -> dst o {Dv, Hv, T, B} F32.
tg_status tg_cuda_delta_rule(tg_backend *be, const tg_tensor *dst) {
    const char *call = "delta_rule";
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *st = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], B = q->ne[3], Dv = v->ne[0], Hv = v->ne[1];
    if (T == 0 || B == 0) return TG_OK;
    if (Dk < 1 || Dk > 256 || Dv < 1 || Dv > 256 || Hk < 1 || Hv % Hk != 0)
        return tg_err(TG_ERR_ARG, "[%s] CUDA: Dk %lld, Dv %lld must be in [1, 256] and Hv %lld a multiple of Hk %lld",
                      call, (long long)Dk, (long long)Dv, (long long)Hv, (long long)Hk);
    const tg_tensor *ts[7] = {q, k, v, g, beta, dst, st};
    for (const tg_tensor *t : ts)
        if (t && !elem_aligned(t))
            return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: tensor '%s' is a view at an address or stride that is not a "
                          "multiple of its element size", call, t->name);

    // variant: threads per column (more threads when the grid is small and T long), rows per thread
    const int sms = cu->sm_count > 0 ? cu->sm_count : 132;
    int tpc = Dk > 128 ? 8 : 4;
    if (Dk > 64 && (tg_cuda_sig.delta_tpc == 8 ||
                    (tg_cuda_sig.delta_tpc == 0 && T > 1 && B * Hv * Dv * 4 < 2LL * sms * 1024)))
        tpc = 8;
    const int rows = (int)((Dk + tpc - 1) / tpc);
    const int NR = rows <= 4 ? 4 : rows <= 8 ? 8 : rows <= 16 ? 16 : 32;
    bool vec = st && Dk % 4 == 0 && !tg_cuda_sig.delta_scalar;
    if (vec) {
        const size_t es = tg_type_size(st->type), al = 4 * es;
        vec = st->nb[0] == es && (uintptr_t)st->data % al == 0;
        for (int i = 1; i < 4; i++) vec = vec && (st->ne[i] == 1 || st->nb[i] % al == 0);
    }

    delta_args a = {};
    a.q = tg_cuda_desc_of(q), a.k = tg_cuda_desc_of(k), a.v = tg_cuda_desc_of(v);
    a.g = tg_cuda_desc_of(g), a.beta = tg_cuda_desc_of(beta), a.o = tg_cuda_desc_of(dst);
    a.state = tg_cuda_desc_of(st);  // data NULL: no state
    a.Dk = (int)Dk, a.Dv = (int)Dv, a.Hk = (int)Hk, a.Hv = (int)Hv, a.B = (int)B, a.T = T;
    a.delta = dp.mode == TG_DELTA_GATED_DELTA;
    a.log_gate = dp.gate == TG_GATE_LOG;
    a.l2norm = dp.l2norm_qk;
    a.scale = dp.scale;
    a.DKP = NR * tpc;
    a.CB = (int)(Dv < kMaxThreads / tpc ? Dv : kMaxThreads / tpc);
    a.nslices = (int)((Dv + a.CB - 1) / a.CB);
    const int threads = (a.CB * tpc + 31) / 32 * 32;
    const size_t per_step = (2 * (size_t)a.DKP + 2 * (size_t)a.CB + 2) * sizeof(float);
    int tc = (int)(kSmemBudget / per_step);
    tc = tc < 1 ? 1 : tc > kMaxTC ? kMaxTC : tc;
    a.TC = (int)(T < tc ? T : tc);
    const size_t smem = per_step * a.TC;
    const long long blocks = (long long)a.nslices * Hv * B;
    if (blocks > INT_MAX || Hv > INT_MAX || B > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid of %lld blocks too large", call, blocks);

    const tg_type stype = st ? st->type : TG_TYPE_F32;
    delta_kernel_fn fn = nullptr;
    if (tpc == 4)
        fn = NR == 4 ? pick_kernel<4, 4>(vec, stype) : NR == 8 ? pick_kernel<8, 4>(vec, stype)
           : NR == 16 ? pick_kernel<16, 4>(vec, stype) : pick_kernel<32, 4>(vec, stype);
    else
        fn = NR == 16 ? pick_kernel<16, 8>(vec, stype) : pick_kernel<32, 8>(vec, stype);
    fn<<<(unsigned)blocks, threads, smem, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);

    // name of the variant, for bench/ (formatted only when it changes: keep the launch path lean)
    static char name[64];
    static int last[5] = {-1, -1, -1, -1, -1};
    const int now[5] = {NR, tpc, vec, st ? (int)st->type : -1, a.TC};
    if (memcmp(now, last, sizeof(now)) != 0) {
        memcpy(last, now, sizeof(now));
        snprintf(name, sizeof(name), "rows%dx%d/%s/%s/tc%d", NR, tpc, vec ? "vec" : "scalar",
                 st ? tg_type_name(st->type) : "nostate", a.TC);
    }
    tg_cuda_sig_last_delta = name;
    return TG_OK;
}
