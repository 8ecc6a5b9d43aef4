// delta_rule_chunked.cu - the chunked form of the gated linear / gated
// delta-rule recurrence on tensor cores (ggml_ops/delta_rule_chunked.cpp is
// its readable CPU reference and has the math; docs/ops.md the policy).
//
// One block of 256 threads (8 warps) per (value column slice of BV columns,
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
#include <climits>
#include <cstdint>

#include "common.cuh"
#include "delta_rule_chunked.cuh"
#include "ops.h"
#include "signature.cuh"

namespace {

constexpr int kC = 64;         // tokens per chunk
constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTiles = 8;   // 16x8 output tiles per warp (DKP * BV <= 8192)
constexpr int kPS = kC + 4;    // row stride of the C x C matrices (floats)

struct chunk_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv, B;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, BV, nslices;
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
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[i] += A B for output tile warp + 8 i of the M x N product (16 x 8 tiles,
// row-major over N / 8), K a multiple of 8. a_at(m, k), b_at(k, n) read the
// operands (shared memory). LOWER: A is lower triangular, so the k loop of a
// tile stops after its last row.
template <bool LOWER, typename FA, typename FB>
__device__ inline void gemm(float (&acc)[kMaxTiles][4], int M, int N, int K, FA a_at, FB b_at) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
#pragma unroll
    for (int i = 0; i < kMaxTiles; i++) {
        const int tile = warp + kWarps * i;
        if (tile < ntiles) {
            const int m0 = (tile / ntn) * 16, n0 = (tile % ntn) * 8;
            const int kend = LOWER ? min(K, m0 + 16) : K;
#pragma unroll 2
            for (int k0 = 0; k0 < kend; k0 += 8) {
                const unsigned a0 = to_tf32(a_at(m0 + g, k0 + c)), a1 = to_tf32(a_at(m0 + g + 8, k0 + c));
                const unsigned a2 = to_tf32(a_at(m0 + g, k0 + c + 4)), a3 = to_tf32(a_at(m0 + g + 8, k0 + c + 4));
                const unsigned b0 = to_tf32(b_at(k0 + c, n0 + g)), b1 = to_tf32(b_at(k0 + c + 4, n0 + g));
                mma_tf32(acc[i], a0, a1, a2, a3, b0, b1);
            }
        }
    }
}
// Visit the elements of the warp's tiles: f(i, e, row, col) for acc[i][e].
template <typename F> __device__ inline void for_tiles(int M, int N, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
#pragma unroll
    for (int i = 0; i < kMaxTiles; i++) {
        const int tile = warp + kWarps * i;
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

// The scan's rule: an exact zero stays zero under any non-NaN factor.
__device__ inline float keep_zero_mul(float d, float x) { return x == 0.0f && !isnan(d) ? 0.0f : d * x; }

__global__ void __launch_bounds__(kThreads, 1) delta_chunked_kernel(const chunk_args a) {
    extern __shared__ float4 csm4[];
    const int DKP = a.DKP, BV = a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    float *sQ = (float *)csm4, *sK = sQ + kC * QS, *sV = sK + kC * QS, *sS = sV + kC * VS, *sP = sS + DKP * VS;
    float *sA = sP + kC * kPS, *sT = sA + kC * kPS, *sL = sT + kC * kPS, *sSg = sL + kC, *sB = sSg + kC;
    float *sD0 = sB + kC, *sDl = sD0 + kC;
    int *sZ = (int *)(sDl + kC);

    const int tid = threadIdx.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk), j0 = slice * BV;
    // the error record of earlier kernels of this graph: read now, used before the state store
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;

    // the state slice: S[i][jj] at sS[i * VS + jj], zero past Dk / Dv and without a state
    for (int x = tid; x < DKP * BV; x += kThreads) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        const int j = j0 + jj;
        sS[i * VS + jj] = has_state && i < a.Dk && j < a.Dv ? tg_cuda_load(tg_cuda_ptr(a.state, i, j, h, b), a.state.type) : 0.0f;
    }

    float accQS[kMaxTiles][4], acc[kMaxTiles][4];
#pragma unroll 1
    for (long long t0 = 0; t0 < a.T; t0 += kC) {
        const int n = (int)(a.T - t0 < kC ? a.T - t0 : kC);
        __syncthreads();  // the previous chunk is done with every buffer
        // 1. stage the chunk (padding rows: q = k = v = 0, gate neutral, beta 0)
        for (int x = tid; x < kC * DKP; x += kThreads) {
            const int t = x / DKP, i = x - t * DKP;
            const bool in = t < n && i < a.Dk;
            sQ[t * QS + i] = in ? tg_cuda_load(tg_cuda_ptr(a.q, i, hk, t0 + t, b), a.q.type) : 0.0f;
            sK[t * QS + i] = in ? tg_cuda_load(tg_cuda_ptr(a.k, i, hk, t0 + t, b), a.k.type) : 0.0f;
        }
        for (int x = tid; x < kC * BV; x += kThreads) {
            const int t = x / BV, jj = x - t * BV;
            sV[t * VS + jj] = t < n && j0 + jj < a.Dv ? tg_cuda_load(tg_cuda_ptr(a.v, j0 + jj, h, t0 + t, b), a.v.type) : 0.0f;
        }
        if (tid < kC) {
            const bool in = tid < n;
            sL[tid] = in ? *(const float *)tg_cuda_ptr(a.g, h, t0 + tid, b, 0) : (a.log_gate ? 0.0f : 1.0f);
            sB[tid] = in ? *(const float *)tg_cuda_ptr(a.beta, h, t0 + tid, b, 0) : 0.0f;
        }
        __syncthreads();
        // the gate prefix (one thread; see the CPU reference), then the decays
        if (tid == 0) {
            float l = 0.0f, sg = 1.0f;
            int z = -1;
            for (int r = 0; r < kC; r++) {
                const float gv = sL[r];
                const bool zero = a.log_gate ? gv == -INFINITY : gv == 0.0f;
                if (zero) {
                    z = r;
                } else {
                    l += a.log_gate ? gv : logf(fabsf(gv));
                    if (!a.log_gate && gv < 0.0f) sg = -sg;
                }
                sL[r] = l, sSg[r] = sg, sZ[r] = z;
            }
        }
        if (a.l2norm) {
            const int w = tid >> 5, lane = tid & 31;
            for (int y = w; y < 2 * n; y += kWarps) {
                float *row = (y < n ? sQ : sK) + (y < n ? y : y - n) * QS;
                double ss = 0.0;
                for (int i = lane; i < a.Dk; i += 32) ss += (double)row[i] * row[i];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                const float inv = (float)(1.0 / sqrt(ss + (double)1e-6f));
                for (int i = lane; i < a.Dk; i += 32) row[i] *= inv;
            }
        }
        __syncthreads();
        // d(t, s) = 0 if Z[t] > s, else sign_t sign_s exp(L_t - L_s)
        auto decay = [&](int t, int s) -> float {
            if (sZ[t] > s) return 0.0f;
            return s < 0 ? sSg[t] * expf(sL[t]) : sSg[t] * sSg[s] * expf(sL[t] - sL[s]);
        };
        if (tid < kC) sD0[tid] = decay(tid, -1), sDl[tid] = decay(kC - 1, tid);

        // 2. P = Q K^T (.) decay (s <= t); A = beta K K^T (.) decay (s < t)
        auto q_at = [&](int t, int i) { return sQ[t * QS + i]; };
        auto k_at = [&](int t, int i) { return sK[t * QS + i]; };
        auto kT_at = [&](int i, int s) { return sK[s * QS + i]; };
        auto s_at = [&](int i, int j) { return sS[i * VS + j]; };
        zero(acc);
        gemm<false>(acc, kC, kC, DKP, q_at, kT_at);
        for_tiles(kC, kC, [&](int i, int e, int t, int s) { sP[t * kPS + s] = s <= t ? acc[i][e] * decay(t, s) : 0.0f; });
        if (a.delta) {
            zero(acc);
            gemm<false>(acc, kC, kC, DKP, k_at, kT_at);
            for_tiles(kC, kC, [&](int i, int e, int t, int s) {
                sA[t * kPS + s] = s < t ? sB[t] * acc[i][e] * decay(t, s) : 0.0f;
            });
        }
        // Q S (kept for the output); K S -> R = beta (V - d(t, -1) K S) in place of V (GATED_LINEAR: beta V)
        zero(accQS);
        gemm<false>(accQS, kC, BV, DKP, q_at, s_at);
        if (a.delta) {
            zero(acc);
            gemm<false>(acc, kC, BV, DKP, k_at, s_at);
            for_tiles(kC, BV, [&](int i, int e, int t, int j) {
                float &x = sV[t * VS + j];
                x = sB[t] * (x - keep_zero_mul(decay(t, -1), acc[i][e]));
            });
        } else {
            for (int x = tid; x < kC * BV; x += kThreads) {
                const int t = x / BV, jj = x - t * BV;
                sV[t * VS + jj] *= sB[t];
            }
        }
        __syncthreads();

        // 3. T = (I + A)^-1 (forward substitution, column j by 4 lanes; every T[t][j] is written
        //    by the lane that reads it later: lane (t - j) % 4), then U = T R in place of R
        if (a.delta) {
            const int j = tid >> 2, l = tid & 3;
#pragma unroll 1
            for (int t = 0; t < kC; t++) {
                float x = 0.0f;
                if (t > j)
                    for (int r = j + l; r < t; r += 4) x = fmaf(sA[t * kPS + r], sT[r * kPS + j], x);
                x += __shfl_xor_sync(0xffffffffu, x, 1);
                x += __shfl_xor_sync(0xffffffffu, x, 2);
                if (t < j) {
                    if (l == 0) sT[t * kPS + j] = 0.0f;
                } else if (((t - j) & 3) == l) {
                    sT[t * kPS + j] = t == j ? 1.0f : -x;
                }
            }
            __syncthreads();
            zero(acc);
            gemm<true>(acc, kC, BV, kC, [&](int t, int s) { return sT[t * kPS + s]; },
                       [&](int s, int j) { return sV[s * VS + j]; });
            __syncthreads();  // every read of R is done
            for_tiles(kC, BV, [&](int i, int e, int t, int j) { sV[t * VS + j] = acc[i][e]; });
            __syncthreads();
        }

        // 4. O = scale (d(t, -1) Q S + P U), rows < n, columns < Dv
        for_tiles(kC, BV, [&](int i, int e, int t, int j) { accQS[i][e] = keep_zero_mul(sD0[t], accQS[i][e]); });
        gemm<true>(accQS, kC, BV, kC, [&](int t, int s) { return sP[t * kPS + s]; },
                   [&](int s, int j) { return sV[s * VS + j]; });
        for_tiles(kC, BV, [&](int i, int e, int t, int j) {
            if (t < n && j0 + j < a.Dv) *(float *)tg_cuda_ptr(a.o, j0 + j, h, t0 + t, b) = a.scale * accQS[i][e];
        });
        //    S = d(C-1, -1) S + (K (.) d(C-1, t))^T U: each thread its own elements of S
        zero(acc);
        gemm<false>(acc, DKP, BV, kC, [&](int i, int t) { return sK[t * QS + i] * sDl[t]; },
                    [&](int t, int j) { return sV[t * VS + j]; });
        const float dl = sD0[kC - 1];
        for_tiles(DKP, BV, [&](int i, int e, int r, int j) {
            float &s = sS[r * VS + j];
            s = keep_zero_mul(dl, s) + acc[i][e];
        });
    }
    __syncthreads();
    if (!has_state || !clear) return;
    for (int x = tid; x < a.Dk * BV; x += kThreads) {
        const int jj = x / a.Dk, i = x - jj * a.Dk;
        if (j0 + jj < a.Dv) tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[i * VS + jj]);
    }
}

}  // namespace

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

    // BV: the largest of 64/32/16/8 (not past Dv rounded up to 8) whose shared memory fits and
    // whose tiles fit the warps' accumulators; then halved (to 16 at least) while the grid is
    // under two blocks per SM
    int dev = 0, optin = 0;
    TG_CUDA_TRY(be, call, cudaGetDevice(&dev));
    TG_CUDA_TRY(be, call, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const int sms = cu->sm_count > 0 ? cu->sm_count : 132;
    const int dv8 = (int)((Dv + 7) / 8 * 8);
    int BV = tg_cuda_sig.delta_chunk_bv > 0 ? tg_cuda_sig.delta_chunk_bv : 64;
    while (BV > 8 && BV / 2 >= dv8) BV /= 2;
    while (BV > 8 && (chunk_smem(a.DKP, BV) > (size_t)optin || a.DKP * BV > kMaxTiles * kWarps * 128)) BV /= 2;
    while (tg_cuda_sig.delta_chunk_bv == 0 && BV > 16 && (long long)B * Hv * ((Dv + BV - 1) / BV) < 2LL * sms) BV /= 2;
    if (chunk_smem(a.DKP, BV) > (size_t)optin || a.DKP * BV > kMaxTiles * kWarps * 128)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA chunked: Dk %lld needs more shared memory than the device has",
                      call, Dk);
    a.BV = BV;
    a.nslices = (int)((Dv + BV - 1) / BV);
    const long long blocks = (long long)a.nslices * Hv * B;
    if (blocks > INT_MAX) return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid of %lld blocks too large", call, blocks);
    const size_t smem = chunk_smem(a.DKP, BV);
    static size_t smem_set = 0;  // the kernel's dynamic shared-memory limit, raised once (grow-only)
    if (smem > smem_set) {
        TG_CUDA_TRY(be, call, cudaFuncSetAttribute(delta_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem));
        smem_set = smem;
    }
    delta_chunked_kernel<<<(unsigned)blocks, kThreads, smem, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);
    static char name[64];
    snprintf(name, sizeof(name), "chunked-tf32/dk%d/bv%d", a.DKP, BV);
    tg_cuda_sig_last_delta = name;
    return TG_OK;
}
