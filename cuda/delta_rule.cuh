// delta_rule.cuh - device pieces of the delta-rule kernels (cuda/delta_rule.cu):
// launch constants and arguments, state loads/stores in the storage type,
// cp.async helpers, the per-column butterfly sum, state decay and the fused
// update + output of the chunk kernel. Included once, by delta_rule.cu.
#pragma once
#include "common.cuh"

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
    int qk16;             // q/k rows are 16-byte vectors (Dk % 4 == 0, unit stride, aligned)
    const tg_cuda_err *err;  // the graph's device error record: no state store once it is set
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

// 4-byte asynchronous copy global -> shared (sm_80+), and the wait for all of
// this thread's copies.
__device__ inline void cp_async4(float *dst, const char *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
template <int N> __device__ inline void cp_async_n(void *dst, const void *src) {
    static_assert(N == 4 || N == 8 || N == 16, "cp.async size");
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(N) : "memory");
}
// Streamed data read once (the state): 16 bytes through L2 only, not L1 (.cg);
// smaller chunks (16-bit states) must take .ca.
template <int N> __device__ inline void cp_async_stream(void *dst, const void *src) {
    if constexpr (N == 16) {
        const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
    } else {
        cp_async_n<N>(dst, src);
    }
}
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ inline void cp_async_wait_prior1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// Bytes of one buffer of the persistent decode kernel: q and k rows (DKP
// floats each), 32 lanes x NR/4 state chunks, then v (32/TPC <= 8 floats),
// gate, beta (48 bytes).
__host__ __device__ inline int persistent_buf_bytes(int DKP, int NR, int es) {
    return 2 * DKP * 4 + 32 * (NR / 4) * 4 * es + 48;
}

// Sum over the TPC consecutive lanes of a column group (all lanes get it).
template <int TPC> __device__ inline float group_sum(float x) {
#pragma unroll
    for (int off = TPC / 2; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// (S^T k)_j for column j: this thread's rows (4-row chunks r + TPC*m) dotted
// with k, summed over the TPC threads of the column. Shared by the chunk and
// the decode kernels, so both do the same arithmetic in the same order.
template <int NC, int TPC>
__device__ inline float col_dot_k(const float (&S)[4 * NC], const float4 *k4, int r) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const float4 kk = k4[r + TPC * m];
        p[0] = fmaf(S[4 * m], kk.x, p[0]);
        p[1] = fmaf(S[4 * m + 1], kk.y, p[1]);
        p[2] = fmaf(S[4 * m + 2], kk.z, p[2]);
        p[3] = fmaf(S[4 * m + 3], kk.w, p[3]);
    }
    return group_sum<TPC>((p[0] + p[1]) + (p[2] + p[3]));
}

// This thread's part of column j of S (rows 4c..4c+3, c = r + TPC*m), zero
// where there is no state, and the store back.
template <int NR, int TPC, typename ST, bool VEC>
__device__ inline void state_load(float (&S)[NR], const char *scol, const tg_cuda_desc &st, int r, int Dk, bool on) {
#pragma unroll
    for (int m = 0; m < NR / 4; m++) {
        const int i0 = 4 * (r + TPC * m);
#pragma unroll
        for (int e = 0; e < 4; e++) S[4 * m + e] = 0.0f;
        if (on) {
            if (VEC) {
                if (i0 < Dk) load4<ST>(scol + (long long)i0 * sizeof(ST), &S[4 * m]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (i0 + e < Dk) S[4 * m + e] = tg_cuda_load(scol + (i0 + e) * st.nb[0], st.type);
            }
        }
    }
}
template <int NR, int TPC, typename ST, bool VEC>
__device__ inline void state_store(const float (&S)[NR], char *dcol, const tg_cuda_desc &st, int r, int Dk) {
#pragma unroll
    for (int m = 0; m < NR / 4; m++) {
        const int i0 = 4 * (r + TPC * m);
        if (VEC) {
            if (i0 < Dk) store4<ST>(dcol + (long long)i0 * sizeof(ST), &S[4 * m]);
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (i0 + e < Dk) tg_cuda_store(dcol + (i0 + e) * st.nb[0], st.type, S[4 * m + e]);
        }
    }
}

// S = a S. An exact zero stays zero under an infinite gate (a = exp(g)
// overflowed), as on the CPU; a is uniform per block, so is the branch.
template <int NR> __device__ inline void decay(float (&S)[NR], float at) {
    if (isfinite(at)) {
#pragma unroll
        for (int x = 0; x < NR; x++) S[x] *= at;
    } else {
#pragma unroll
        for (int x = 0; x < NR; x++) S[x] = (S[x] == 0.0f && !isnan(at)) ? 0.0f : at * S[x];
    }
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

}  // namespace
