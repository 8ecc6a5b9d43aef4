// attention.cu - causal attention of new queries over a KV cache.
//   q {D, Hq, T, B} F32; k_cache {D, Hkv, L, B}; v_cache {Dv, Hkv, L, B}
//   (F32/F16/BF16); positions {T, B} I32 -> {Dv, Hq, T, B}.
//
// Prefill with F16/BF16 caches runs on tensor cores (cuda/attention_mma.cu);
// the split kernel (cuda/attention_split.cu: GQA groups share K/V rows,
// flash-decoding splits) takes caches of one type with 16-byte rows; this
// file's generic kernel takes everything else:
// one block per query (head h, token t, sequence b), grid-stride over
// queries. The query row sits in shared memory; the cache rows 0..n-1,
// n = min(p + 1, L), are visited in tiles of kTile rows with an online softmax:
//   scores   a warp per cache row, lanes along D (coalesced K reads), shuffles
//   softmax  tile max and sum over the block; running max m, sum l rescaled
//   values   threads along Dv (coalesced V reads), loop over the tile's rows
// The accumulator (Dv floats) lives in shared memory, each element owned by
// one thread. p < 0 (no valid row) gives zeros (RELIABILITY 19).
#include "attention.cuh"
#include "ops.h"
#include "signature.cuh"

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 128;     // cache rows per tile

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__half x) { return __half2float(x); }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Block-wide sum / max of one value per thread; every thread gets the result.
// Starts with a barrier-free warp step and ends with a barrier, so red can be
// reused right away and shared writes made before the call are visible after.
template <bool MAX> __device__ float block_reduce(float v, float *red) {
    v = MAX ? tg_warp_max(v) : tg_warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = red[0];
#pragma unroll
    for (int w = 1; w < kWarps; w++) t = MAX ? fmaxf(t, red[w]) : t + red[w];
    __syncthreads();
    return t;
}

template <typename TK, typename TV>
__global__ void __launch_bounds__(kThreads) attention_kernel(tg_cuda_desc q, tg_cuda_desc k, tg_cuda_desc v,
                                                             tg_cuda_desc pos, tg_cuda_desc out, float scale,
                                                             long long nq) {
    extern __shared__ float smem[];
    const long long D = q.ne[0], Hq = q.ne[1], T = q.ne[2], L = k.ne[2], Dv = v.ne[0];
    const long long group = Hq / k.ne[1];
    float *sq = smem;         // [D]   the query
    float *sacc = sq + D;     // [Dv]  running weighted sum of V rows
    float *ss = sacc + Dv;    // [kTile] scores, then probabilities
    float *red = ss + kTile;  // [kWarps] reduction slots
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    for (long long qi = blockIdx.x; qi < nq; qi += gridDim.x) {
        const long long h = qi % Hq, t = (qi / Hq) % T, b = qi / (Hq * T), hk = h / group;
        const int p = *(const int *)tg_cuda_ptr(pos, t, b, 0, 0);
        const long long n = p < 0 ? 0 : ((long long)p < L ? (long long)p + 1 : L);
        for (long long i = tid; i < D; i += kThreads) sq[i] = *(const float *)tg_cuda_ptr(q, i, h, t, b);
        for (long long i = tid; i < Dv; i += kThreads) sacc[i] = 0.0f;
        __syncthreads();
        float m_run = -INFINITY, l_run = 0.0f;  // identical in every thread

        for (long long j0 = 0; j0 < n; j0 += kTile) {
            const int tn = (int)(n - j0 < kTile ? n - j0 : kTile);
            for (int jj = warp; jj < tn; jj += kWarps) {
                const char *kr = tg_cuda_ptr(k, 0, hk, j0 + jj, b);
                float dot = 0.0f;
#pragma unroll 4
                for (long long i = lane; i < D; i += 32) dot += sq[i] * to_f32(*(const TK *)(kr + i * k.nb[0]));
                dot = tg_warp_sum(dot);
                if (lane == 0) ss[jj] = dot * scale;
            }
            __syncthreads();
            float mx = -INFINITY;
            for (int jj = tid; jj < tn; jj += kThreads) mx = fmaxf(mx, ss[jj]);
            mx = block_reduce<true>(mx, red);
            const float m_new = fmaxf(m_run, mx);
            // rescale what was summed so far; nothing was summed while m_run is -inf
            const float corr = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
            float lsum = 0.0f;
            for (int jj = tid; jj < tn; jj += kThreads) {
                // a -inf score adds nothing; a NaN one makes the sum NaN (as the reference)
                const float e = ss[jj] == -INFINITY ? 0.0f : expf(ss[jj] - m_new);
                ss[jj] = e;
                lsum += e;
            }
            lsum = block_reduce<false>(lsum, red);  // its barrier publishes ss
            l_run = l_run * corr + lsum;
            m_run = m_new;
            for (long long i = tid; i < Dv; i += kThreads) {
                const char *vc = tg_cuda_ptr(v, i, hk, j0, b);
                float a = 0.0f;
#pragma unroll 4
                for (int jj = 0; jj < tn; jj++) a += ss[jj] * to_f32(*(const TV *)(vc + jj * v.nb[2]));
                sacc[i] = sacc[i] * corr + a;
            }
            __syncthreads();  // ss is overwritten by the next tile
        }
        for (long long i = tid; i < Dv; i += kThreads)
            *(float *)tg_cuda_ptr(out, i, h, t, b) = n > 0 ? sacc[i] / l_run : 0.0f;  // NaN and 0/0 stay
        __syncthreads();  // sq and sacc are reused by the next query
    }
}

template <typename TK, typename TV>
tg_status launch(tg_backend *be, const tg_cuda_desc &q, const tg_cuda_desc &k, const tg_cuda_desc &v,
                 const tg_cuda_desc &pos, const tg_cuda_desc &out, float scale, long long nq, size_t smem) {
    const unsigned grid = (unsigned)(nq < 65535LL * 16 ? nq : 65535LL * 16);
    attention_kernel<TK, TV><<<grid, kThreads, smem, tg_cuda(be)->stream>>>(q, k, v, pos, out, scale, nq);
    TG_CUDA_LAUNCHED(be, "attention");
    return TG_OK;
}

template <typename TK>
tg_status launch_v(tg_backend *be, tg_type vt, const tg_cuda_desc &q, const tg_cuda_desc &k, const tg_cuda_desc &v,
                   const tg_cuda_desc &pos, const tg_cuda_desc &out, float scale, long long nq, size_t smem) {
    switch (vt) {
        case TG_TYPE_F32: return launch<TK, float>(be, q, k, v, pos, out, scale, nq, smem);
        case TG_TYPE_F16: return launch<TK, __half>(be, q, k, v, pos, out, scale, nq, smem);
        case TG_TYPE_BF16: return launch<TK, __nv_bfloat16>(be, q, k, v, pos, out, scale, nq, smem);
        default: return tg_err(TG_ERR_ARG, "[attention] v_cache type %s is not a float type", tg_type_name(vt));
    }
}

}  // namespace

tg_status tg_cuda_attention(tg_backend *be, const tg_tensor *dst) {
    tg_status st;
    if (tg_cuda_attention_mma(be, dst, &st)) {
        tg_cuda(be)->sig_last[TG_CUDA_SIG_ATTN] = "tc";
        return st;
    }
    if (tg_cuda_attention_split(be, dst, TG_CUDA_ATTN_MIN_SPLIT_ROWS, &st)) return st;  // names its variant
    tg_cuda(be)->sig_last[TG_CUDA_SIG_ATTN] = "generic";
    return tg_cuda_attention_generic(be, dst);
}

tg_status tg_cuda_attention_generic(tg_backend *be, const tg_tensor *dst) {
    const tg_tensor *tq = dst->src[0], *tk = dst->src[1], *tv = dst->src[2], *tp = dst->src[3];
    const long long nq = tq->ne[1] * tq->ne[2] * tq->ne[3];
    const size_t smem = (size_t)(tq->ne[0] + tv->ne[0] + kTile + kWarps) * sizeof(float);
    if (smem > 48 * 1024)
        return tg_err(TG_ERR_UNSUPPORTED, "[attention] head dims D=%lld, Dv=%lld are too large for the CUDA kernel",
                      (long long)tq->ne[0], (long long)tv->ne[0]);
    const tg_cuda_desc q = tg_cuda_desc_of(tq), k = tg_cuda_desc_of(tk), v = tg_cuda_desc_of(tv),
                       pos = tg_cuda_desc_of(tp), out = tg_cuda_desc_of(dst);
    const float scale = tg_get_params<float>(dst);
    switch (tk->type) {
        case TG_TYPE_F32: return launch_v<float>(be, tv->type, q, k, v, pos, out, scale, nq, smem);
        case TG_TYPE_F16: return launch_v<__half>(be, tv->type, q, k, v, pos, out, scale, nq, smem);
        case TG_TYPE_BF16: return launch_v<__nv_bfloat16>(be, tv->type, q, k, v, pos, out, scale, nq, smem);
        default: return tg_err(TG_ERR_ARG, "[attention] k_cache type %s is not a float type", tg_type_name(tk->type));
    }
}
