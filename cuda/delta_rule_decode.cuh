// delta_rule_decode.cuh - device pieces of the delta-rule decode kernels
// (T == 1; cuda/delta_rule.cu): q/k row loads and norms, the register-path
// update, and the cp.async staging + step shared by the per-block and the
// persistent decode kernels. Included once, by delta_rule.cu.
#pragma once
#include "delta_rule.cuh"

namespace {

// 4 elements of a q/k row from element i0 (16-byte rows: Dk % 4 == 0, unit
// stride, aligned; the host sends other layouts to the chunk kernel), zero past Dk.
__device__ inline float4 ld_row4(const char *row, int i0, int Dk) {
    return i0 < Dk ? __ldg((const float4 *)(row + (long long)i0 * 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
// 1 / sqrt(sum x^2 + 1e-6) of a q/k row, by one warp, in exactly the chunk
// kernel's order (lane-strided sums in double, then a butterfly), so that
// both kernels normalize to the same bits.
__device__ inline float inv_norm(const char *row, long long nb0, int Dk, int lane) {
    double ss = 0.0;
    for (int i = lane; i < Dk; i += 32) {
        const float x = __ldg((const float *)(row + i * nb0));
        ss += (double)x * x;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    return (float)(1.0 / sqrt(ss + (double)1e-6f));
}
__device__ inline void scale_row4(float4 &v, float inv, int i0, int Dk) {
    if (i0 < Dk) v.x *= inv;
    if (i0 + 1 < Dk) v.y *= inv;
    if (i0 + 2 < Dk) v.z *= inv;
    if (i0 + 3 < Dk) v.w *= inv;
}

// update_out with k and q in registers (the same operations in the same order).
template <int NC, bool MASK>
__device__ inline float4 update_out_r(float (&S)[4 * NC], const float4 (&kc)[NC], const float4 (&qc)[NC], float u,
                                      const int (&i0)[NC], int Dk) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const float kv[4] = {kc[m].x, kc[m].y, kc[m].z, kc[m].w}, qv[4] = {qc[m].x, qc[m].y, qc[m].z, qc[m].w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!MASK || i0[m] + e < Dk) S[4 * m + e] = fmaf(kv[e], u, S[4 * m + e]);
            p[e] = fmaf(S[4 * m + e], qv[e], p[e]);
        }
    }
    return make_float4(p[0], p[1], p[2], p[3]);
}

// --- decode kernels: pieces shared by the per-block and the persistent one ---

// The lanes of a warp copy one step's q and k rows (16-byte units) into wq, wk,
// zero-padded to DKP.
__device__ inline void issue_qk(float *wq, float *wk, const char *qrow, const char *krow, int DKP, int Dk, int lane) {
    for (int u = lane; 4 * u < DKP; u += 32) {
        if (4 * u < Dk) {
            cp_async_n<16>(wq + 4 * u, qrow + 16LL * u);
            cp_async_n<16>(wk + 4 * u, krow + 16LL * u);
        } else {
            *(float4 *)(wq + 4 * u) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *(float4 *)(wk + 4 * u) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}
// This thread's state chunks (c = r + TPC*m) to wst[m][lane], and back.
template <int NR, int TPC, typename ST>
__device__ inline void issue_state(char *wst, const char *scol, int Dk, int r, int lane) {
    constexpr int CBY = 4 * (int)sizeof(ST);
#pragma unroll
    for (int m = 0; m < NR / 4; m++) {
        const int i0 = 4 * (r + TPC * m);
        if (i0 < Dk) cp_async_stream<CBY>(wst + (m * 32 + lane) * CBY, scol + (long long)i0 * sizeof(ST));
    }
}
template <int NR, int TPC, typename ST>
__device__ inline void read_state(float (&S)[NR], const char *wst, bool on, int Dk, int r, int lane) {
    constexpr int CBY = 4 * (int)sizeof(ST);
#pragma unroll
    for (int m = 0; m < NR / 4; m++) {
        if (on && 4 * (r + TPC * m) < Dk) {
            load4<ST>(wst + (m * 32 + lane) * CBY, &S[4 * m]);
        } else {
#pragma unroll
            for (int e = 0; e < 4; e++) S[4 * m + e] = 0.0f;
        }
    }
}

// One step on this thread's rows of column j, from the warp's q/k rows in
// shared memory: the norms in the chunk kernel's order (lane-strided sums in
// double, then a butterfly), the rows scaled in place once per warp (only
// elements < Dk, as the chunk kernel; 16-byte rows here, so whole units),
// then the chunk kernel's operations in its order. Returns o_j (valid in every
// lane of the column group).
template <int NR, int TPC>
__device__ inline float decode_step(float (&S)[NR], float *wq, float *wk, float gv, float bt, float vj,
                                    const delta_args &a, int r, int lane) {
    constexpr int NC = NR / 4;
    if (a.l2norm) {
        double sq = 0.0, sk = 0.0;
        for (int i = lane; i < a.Dk; i += 32) sq += (double)wq[i] * wq[i], sk += (double)wk[i] * wk[i];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            sq += __shfl_xor_sync(0xffffffffu, sq, off), sk += __shfl_xor_sync(0xffffffffu, sk, off);
        const float iq = (float)(1.0 / sqrt(sq + (double)1e-6f)), ik = (float)(1.0 / sqrt(sk + (double)1e-6f));
        for (int u = lane; 4 * u < a.Dk; u += 32) {
            float4 x = ((float4 *)wq)[u], y = ((float4 *)wk)[u];
            x.x *= iq, x.y *= iq, x.z *= iq, x.w *= iq;
            y.x *= ik, y.y *= ik, y.z *= ik, y.w *= ik;
            ((float4 *)wq)[u] = x, ((float4 *)wk)[u] = y;
        }
        __syncwarp();
    }
    const float4 *q4 = (const float4 *)wq, *k4 = (const float4 *)wk;
    decay<NR>(S, a.log_gate ? expf(gv) : gv);
    float u;
    if (a.delta) {
        u = bt * (vj - col_dot_k<NC, TPC>(S, k4, r));
    } else {
        u = bt * vj;
    }
    // a non-finite u must not reach the zero padding rows (the chunk kernel's rule)
    const float4 p = isfinite(u) ? update_out<NC, TPC, false>(S, k4, q4, u, r, a.Dk, false)
                                 : update_out<NC, TPC, true>(S, k4, q4, u, r, a.Dk, false);
    return group_sum<TPC>((p.x + p.y) + (p.z + p.w));
}
template <int NR, int TPC, typename ST>
__device__ inline void write_state(const float (&S)[NR], char *scol, int Dk, int r) {
#pragma unroll
    for (int m = 0; m < NR / 4; m++) {
        const int i0 = 4 * (r + TPC * m);
        if (i0 < Dk) store4<ST>(scol + (long long)i0 * sizeof(ST), &S[4 * m]);
    }
}

}  // namespace
