// norm.cu - rms_norm, l2_norm over ne0, and softmax: a warp per row for rows of
// up to 256 elements, a block of 8 warps per row above; reductions in
// registers and warp shuffles (plus one shared-memory step across warps).
#include <type_traits>

#include "common.cuh"
#include "fuse.cuh"
#include "mmv.cuh"
#include "ops.h"

enum { NORM_RMS, NORM_L2, NORM_SOFTMAX };

// Rows longer than this take a block of 8 warps (a decode step normalizes one
// row: a lone warp walking 768-2048 elements measured 5.8 us per norm on the
// H200, a third of a 1.1B layer's small kernels; 8 warps hold 2048 elements
// in one round of loads).
constexpr long long kWarpRowMax = 256;

// WPR warps per row. WPR == 1: 4 rows per 128-thread block; else one row per
// block of WPR warps.
template <int WPR> struct row_cfg {
    static constexpr int threads = WPR == 1 ? 128 : 32 * WPR;
    static constexpr int rows_per_block = threads / (32 * WPR);
};

// Sum / max over the WPR warps of one row. Every thread of the block calls it
// the same number of times (WPR > 1 has one row per block), so the barriers
// are safe.
template <int WPR, bool MAX> __device__ float row_reduce(float v, float *sh) {
    v = MAX ? tg_warp_max(v) : tg_warp_sum(v);
    if (WPR == 1) return v;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = sh[0];
    for (int w = 1; w < WPR; w++) t = MAX ? fmaxf(t, sh[w]) : t + sh[w];
    __syncthreads();  // sh is reused by the next reduction
    return t;
}

// MUL (rms_norm only, the backend's fusion of rms_norm then mul): also
// z = y * w, w broadcast over y (ggml's rule), each element from the y value
// just stored, so z is the unfused mul's result bit for bit. z may be y or x
// (in place): the thread that reads an element of x writes that element of
// y, then of z; w is disjoint from both outputs (cuda/fuse.cu checks).
template <int OP, int WPR, bool MUL = false>
__global__ void norm_kernel(tg_cuda_desc x, tg_cuda_desc y, long long nrows, float param, tg_cuda_desc w = {},
                            tg_cuda_desc z = {}) {
    __shared__ float sh[WPR];
    constexpr int RPB = row_cfg<WPR>::rows_per_block, TPR = 32 * WPR;
    const int grp = threadIdx.x / TPR, tid = threadIdx.x % TPR;
    const long long n0 = x.ne[0];
    tg_pdl_trigger();
    tg_pdl_wait();
    for (long long r = (long long)blockIdx.x * RPB + grp; r < nrows; r += (long long)gridDim.x * RPB) {
        // (no 64-bit division for a matrix of rows: each is ~70 instructions before the first load)
        const bool flat = x.ne[2] * x.ne[3] == 1;
        const long long i1 = flat ? r : r % x.ne[1], i2 = flat ? 0 : (r / x.ne[1]) % x.ne[2],
                        i3 = flat ? 0 : r / (x.ne[1] * x.ne[2]);
        const char *xr = tg_cuda_ptr(x, 0, i1, i2, i3);
        char *yr = tg_cuda_ptr(y, 0, i1, i2, i3);
        if (OP == NORM_SOFTMAX) {
            // softmax(param * x), as the CPU: -inf entries are a mask (0 whatever
            // the scale), a row of all -inf gives 0s, a NaN entry makes the row NaN
            float mx = -INFINITY, nans = 0.0f;
            for (long long i = tid; i < n0; i += TPR) {
                const float v = tg_cuda_load(xr + i * x.nb[0], x.type);
                if (isnan(v)) nans += 1.0f;
                else if (v != -INFINITY) mx = fmaxf(mx, param * v);
            }
            mx = row_reduce<WPR, true>(mx, sh);
            nans = row_reduce<WPR, false>(nans, sh);
            float sum = 0.0f;
            if (mx != -INFINITY)
                for (long long i = tid; i < n0; i += TPR) {
                    const float v = tg_cuda_load(xr + i * x.nb[0], x.type);
                    sum += v == -INFINITY ? 0.0f : expf(param * v - mx);
                }
            sum = row_reduce<WPR, false>(sum, sh);
            for (long long i = tid; i < n0; i += TPR) {
                const float v = tg_cuda_load(xr + i * x.nb[0], x.type);
                const float e = v == -INFINITY || mx == -INFINITY ? 0.0f : expf(param * v - mx);
                *(float *)(yr + i * y.nb[0]) = nans > 0.0f ? __int_as_float(0x7fc00000) : mx == -INFINITY ? 0.0f : e / sum;
            }
        } else {
            // x / sqrt(sum(x^2) / div + eps), div = n0 for rms_norm, 1 for l2_norm.
            // kRound elements per thread are loaded before any is used: in the
            // sum (one memory latency per round, not per element; the sum
            // still runs over the thread's elements in index order) and
            // before any store (a store may alias the next loads, in place).
            // A row of at most kRound * TPR elements (2048 at 8 warps) stays
            // in registers between the sum and the stores: x is read once.
            constexpr int kRound = 8;
            const bool one_round = n0 <= (long long)kRound * TPR;
            const char *wr = MUL ? tg_cuda_ptr(w, 0, w.ne[1] == 1 ? 0 : i1 % w.ne[1], w.ne[2] == 1 ? 0 : i2 % w.ne[2],
                                               w.ne[3] == 1 ? 0 : i3 % w.ne[3])
                                 : nullptr;
            char *zr = MUL ? tg_cuda_ptr(z, 0, i1, i2, i3) : nullptr;
            float xv[kRound], wv[kRound];
            // F32 x and w (the usual case) by plain loads: with tg_cuda_load's
            // switch on the type in the unrolled round, the loads were not all in
            // flight at once
            const bool f32 = x.type == TG_TYPE_F32 && (!MUL || (w.type == TG_TYPE_F32 && w.ne[0] == n0));
            auto load_as = [&](long long i0, auto plain) {
                constexpr bool F = decltype(plain)::value;
#pragma unroll
                for (int u = 0; u < kRound; u++) {
                    const long long i = i0 + (long long)u * TPR;
                    if (F) {
                        xv[u] = i < n0 ? *(const float *)(xr + i * x.nb[0]) : 0.0f;
                        wv[u] = MUL && i < n0 ? *(const float *)(wr + i * w.nb[0]) : 0.0f;
                        continue;
                    }
                    xv[u] = i < n0 ? tg_cuda_load(xr + i * x.nb[0], x.type) : 0.0f;
                    wv[u] = 0.0f;
                    if (MUL && i < n0) {
                        const long long iw = i < w.ne[0] ? i : i % w.ne[0];
                        wv[u] = tg_cuda_load(wr + iw * w.nb[0], w.type);
                    }
                }
            };
            auto load_round = [&](long long i0) {
                if (f32) load_as(i0, std::true_type());
                else load_as(i0, std::false_type());
            };
            float ss = 0.0f;
            for (long long i0 = tid; i0 < n0; i0 += (long long)kRound * TPR) {
                load_round(i0);
#pragma unroll
                for (int u = 0; u < kRound; u++)
                    if (i0 + (long long)u * TPR < n0) ss += xv[u] * xv[u];
            }
            ss = row_reduce<WPR, false>(ss, sh);
            const float inv = OP == NORM_RMS ? tg_cuda_rms_scale(ss, n0, param) : 1.0f / sqrtf(ss + param);
            for (long long i0 = tid; i0 < n0; i0 += (long long)kRound * TPR) {
                if (!one_round) load_round(i0);
#pragma unroll
                for (int u = 0; u < kRound; u++) {
                    const long long i = i0 + (long long)u * TPR;
                    if (i >= n0) break;
                    const float v = xv[u] * inv;
                    *(float *)(yr + i * y.nb[0]) = v;
                    if (MUL) *(float *)(zr + i * z.nb[0]) = v * wv[u];
                }
            }
        }
    }
}

template <int OP, int WPR, bool MUL = false>
static void launch_norm(const tg_cuda_impl *impl, const tg_cuda_desc &x, const tg_cuda_desc &y, long long nrows, float param,
                        const tg_cuda_desc &w = {}, const tg_cuda_desc &z = {}) {
    constexpr int RPB = row_cfg<WPR>::rows_per_block;
    const long long blocks = (nrows + RPB - 1) / RPB;
    const unsigned grid = (unsigned)(blocks < 65535LL * 16 ? blocks : 65535LL * 16);
    tg_cuda_launch(tg_cuda_pdl_for(impl, TG_CUDA_PDL_NORM), impl->stream, norm_kernel<OP, WPR, MUL>, grid,
                   row_cfg<WPR>::threads, 0, x, y, nrows, param, w, z);
}

template <int OP> static tg_status norm_cuda(tg_backend *be, const tg_tensor *dst, const char *call) {
    const tg_cuda_impl *cu = tg_cuda(be);
    const tg_cuda_desc x = tg_cuda_desc_of(dst->src[0]), y = tg_cuda_desc_of(dst);
    const long long nrows = tg_nrows(dst);
    const float param = tg_get_params<float>(dst);  // eps, or the softmax scale
    if (x.ne[0] <= kWarpRowMax)
        launch_norm<OP, 1>(cu, x, y, nrows, param);
    else
        launch_norm<OP, 8>(cu, x, y, nrows, param);
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

tg_status tg_cuda_rms_norm(tg_backend *be, const tg_tensor *dst) { return norm_cuda<NORM_RMS>(be, dst, "rms_norm"); }
tg_status tg_cuda_l2_norm(tg_backend *be, const tg_tensor *dst) { return norm_cuda<NORM_L2>(be, dst, "l2_norm"); }
tg_status tg_cuda_softmax(tg_backend *be, const tg_tensor *dst) { return norm_cuda<NORM_SOFTMAX>(be, dst, "softmax"); }

tg_status tg_cuda_rms_norm_mul(tg_backend *be, const tg_tensor *norm, const tg_tensor *mul, const tg_tensor *w) {
    const tg_cuda_impl *impl = tg_cuda(be);
    const tg_cuda_desc x = tg_cuda_desc_of(norm->src[0]), y = tg_cuda_desc_of(norm);
    const tg_cuda_desc wd = tg_cuda_desc_of(w), z = tg_cuda_desc_of(mul);
    const long long nrows = tg_nrows(norm), n0 = x.ne[0];
    const float eps = tg_get_params<float>(norm);
    if (n0 <= kWarpRowMax) launch_norm<NORM_RMS, 1, true>(impl, x, y, nrows, eps, wd, z);
    else launch_norm<NORM_RMS, 8, true>(impl, x, y, nrows, eps, wd, z);
    TG_CUDA_LAUNCHED(be, "rms_norm");
    return TG_OK;
}
