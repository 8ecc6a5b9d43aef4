// quant.cpp - the reference (de)quantizers of the quantized types (their sizes: error.cpp).
// Written for reading, not speed: these are the oracle the fast CPU kernels
// and the CUDA kernels are tested against, and what tinygml-quantize uses.
// The rounding rules are ggml's reference quantizers (the public format
// description), so a file quantized here matches one quantized by llama.cpp's
// reference path.
#include <algorithm>
#include <cmath>

#include "internal.h"
#include "quant.h"

namespace {

uint16_t f16(float f) { return tg_fp32_to_fp16_impl(f); }
float f32(uint16_t h) { return tg_fp16_to_fp32_impl(h); }
constexpr uint16_t k_f16_nan = 0x7e00;

bool all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!std::isfinite(x[i])) return false;
    return true;
}

// Clamp an integral float to [lo, hi] before converting it, so that no
// out-of-range float is ever converted to int.
int clamp_int(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;  // also catches NaN (cannot happen: inputs are finite)
    if (v > (float)hi) return hi;
    return (int)v;
}
// ggml rounds Q8_0 halfway away from zero (roundf), the K-quants halfway to
// even (its nearest_int): both kept, so the blocks match llama.cpp's.
int round_clamp(float v, int lo, int hi) { return clamp_int(std::round(v), lo, hi); }
int nearest_clamp(float v, int lo, int hi) { return clamp_int(std::nearbyint(v), lo, hi); }

// --- Q8_0: d = absmax / 127, q = round(x / d) ---------------------------------

void quantize_q8_0(const float *x, tg_block_q8_0 *y) {
    if (!all_finite(x, TG_QK8_0)) {
        y->d = k_f16_nan;
        std::fill(y->qs, y->qs + TG_QK8_0, 0);
        return;
    }
    float amax = 0.0f;
    for (int i = 0; i < TG_QK8_0; i++) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f16(d);
    for (int i = 0; i < TG_QK8_0; i++) y->qs[i] = (int8_t)round_clamp(x[i] * id, -127, 127);
}

void dequantize_q8_0(const tg_block_q8_0 *b, float *x) {
    const float d = f32(b->d);
    for (int i = 0; i < TG_QK8_0; i++) x[i] = d * (float)b->qs[i];
}

// --- Q4_0: d = v / -8 for v the element of largest magnitude (so v itself is
// q = 0 exactly); q = min(15, trunc(x / d + 8.5)) -------------------------------

void quantize_q4_0(const float *x, tg_block_q4_0 *y) {
    if (!all_finite(x, TG_QK4_0)) {
        y->d = k_f16_nan;
        std::fill(y->qs, y->qs + TG_QK4_0 / 2, 0x88);
        return;
    }
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < TG_QK4_0; i++)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    const float d = vmax / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = f16(d);
    auto q = [&](float v) {  // x / d lies in [-8, 8], so x / d + 8.5 in [0.5, 16.5]
        return (uint8_t)std::min(15, (int)std::trunc(v * id + 8.5f));
    };
    for (int i = 0; i < TG_QK4_0 / 2; i++) y->qs[i] = (uint8_t)(q(x[i]) | q(x[i + TG_QK4_0 / 2]) << 4);
}

void dequantize_q4_0(const tg_block_q4_0 *b, float *x) {
    const float d = f32(b->d);
    for (int i = 0; i < TG_QK4_0 / 2; i++) {
        x[i] = d * (float)((b->qs[i] & 15) - 8);
        x[i + TG_QK4_0 / 2] = d * (float)((b->qs[i] >> 4) - 8);
    }
}

// --- Q4_K --------------------------------------------------------------------

// ggml's make_qkx2_quants: fit x ~ scale * L + min (L in [0, nmax], min <= 0)
// by weighted least squares. Start from the plain min/max grid, then try
// nstep + 1 nearby grids (iscale = (nmax + rmin + rdelta * is) / range),
// refitting scale and min for each, and keep the fit of least weighted
// squared error. Returns scale; *neg_min = -min (>= 0).
float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min) {
    const float rmin = -1.0f, rdelta = 0.1f;
    const int nstep = 20;
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        std::fill(L, L + n, 0);
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = nmax / (hi - lo), scale = 1.0f / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)nearest_clamp(iscale * (x[i] - lo), 0, nmax);
        const float diff = scale * L[i] + lo - x[i];
        best += w[i] * diff * diff;
    }
    uint8_t aux[TG_QK_K];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = nearest_clamp(iscale * (x[i] - lo), 0, nmax);
            aux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float diff = this_scale * aux[i] + this_min - x[i];
            err += w[i] * diff * diff;
        }
        if (err < best) {
            std::copy(aux, aux + n, L);
            best = err;
            scale = this_scale;
            lo = this_min;
        }
    }
    *neg_min = -lo;
    return scale;
}

// Pack 6-bit scale ls and min lm of sub-block j (the inverse of tg_get_scale_min_k4).
void pack_scale_min(int j, int ls, int lm, uint8_t *q) {
    if (j < 4) {
        q[j] = (uint8_t)ls;
        q[j + 4] = (uint8_t)lm;
    } else {
        q[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        q[j - 4] |= (uint8_t)((ls >> 4) << 6);
        q[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

// ggml's quantize_row_q4_K_ref: each sub-block fitted (weights favour large
// values), the 8 scales and mins quantized to 6 bits against the largest,
// then every element re-quantized against the rounded scale and min.
void quantize_q4_k(const float *x, tg_block_q4_k *y) {
    std::fill(y->scales, y->scales + TG_K_SCALE_SIZE, 0);
    if (!all_finite(x, TG_QK_K)) {
        y->d = y->dmin = k_f16_nan;
        std::fill(y->qs, y->qs + TG_QK_K / 2, 0);
        return;
    }
    constexpr int ns = TG_QK_K / 32;
    uint8_t L[TG_QK_K];
    float w[32], scales[ns], mins[ns], max_scale = 0, max_min = 0;
    for (int j = 0; j < ns; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + std::fabs(xs[l]);
        scales[j] = fit_scale_min(32, 15, xs, w, L + 32 * j, &mins[j]);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < ns; j++)
        pack_scale_min(j, nearest_clamp(inv_scale * scales[j], 0, 63), nearest_clamp(inv_min * mins[j], 0, 63), y->scales);
    y->d = f16(max_scale / 63.0f);
    y->dmin = f16(max_min / 63.0f);
    for (int j = 0; j < ns; j++) {
        uint8_t sc, m;
        tg_get_scale_min_k4(j, y->scales, &sc, &m);
        const float d = f32(y->d) * sc;
        if (d == 0.0f) continue;  // L keeps the fit's levels (all elements then read as -dm)
        const float dm = f32(y->dmin) * m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)nearest_clamp((x[32 * j + l] + dm) / d, 0, 15);
    }
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) y->qs[32 * g + l] = (uint8_t)(L[64 * g + l] | L[64 * g + 32 + l] << 4);
}

void dequantize_q4_k(const tg_block_q4_k *b, float *x) {
    const float d = f32(b->d), dmin = f32(b->dmin);
    for (int g = 0; g < 4; g++) {
        uint8_t sc0, m0, sc1, m1;
        tg_get_scale_min_k4(2 * g, b->scales, &sc0, &m0);
        tg_get_scale_min_k4(2 * g + 1, b->scales, &sc1, &m1);
        const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
        for (int l = 0; l < 32; l++) {
            x[64 * g + l] = d0 * (float)(b->qs[32 * g + l] & 15) - mm0;
            x[64 * g + 32 + l] = d1 * (float)(b->qs[32 * g + l] >> 4) - mm1;
        }
    }
}

}  // namespace

void tg_quantize_row(tg_type t, const float *src, void *dst, int64_t n) {
    const int64_t bs = tg_type_block_size(t);
    for (int64_t i = 0; i < n / bs; i++) {
        switch (t) {
            case TG_TYPE_Q8_0: quantize_q8_0(src + i * bs, (tg_block_q8_0 *)dst + i); break;
            case TG_TYPE_Q4_0: quantize_q4_0(src + i * bs, (tg_block_q4_0 *)dst + i); break;
            case TG_TYPE_Q4_K: quantize_q4_k(src + i * bs, (tg_block_q4_k *)dst + i); break;
            default: TG_ASSERT(!"tg_quantize_row: not a quantized type");
        }
    }
}

void tg_dequantize_row(tg_type t, const void *src, float *dst, int64_t n) {
    const int64_t bs = tg_type_block_size(t);
    for (int64_t i = 0; i < n / bs; i++) {
        switch (t) {
            case TG_TYPE_Q8_0: dequantize_q8_0((const tg_block_q8_0 *)src + i, dst + i * bs); break;
            case TG_TYPE_Q4_0: dequantize_q4_0((const tg_block_q4_0 *)src + i, dst + i * bs); break;
            case TG_TYPE_Q4_K: dequantize_q4_k((const tg_block_q4_k *)src + i, dst + i * bs); break;
            default: TG_ASSERT(!"tg_dequantize_row: not a quantized type");
        }
    }
}

static tg_status check_args(const char *call, tg_type t, const void *src, const void *dst, int64_t n) {
    if (!tg_type_is_quantized(t)) {
        const char *name = tg_type_name(t);
        if (name) return tg_err(TG_ERR_ARG, "[%s] type %s is not a quantized type", call, name);
        return tg_err(TG_ERR_ARG, "[%s] invalid type %d", call, (int)t);
    }
    if (!src || !dst) return tg_err(TG_ERR_ARG, "[%s] %s is NULL", call, !src ? "src" : "dst");
    const int64_t bs = tg_type_block_size(t);
    if (n < 0 || n % bs != 0)
        return tg_err(TG_ERR_ARG, "[%s] n %lld is not a multiple of %s's block size %lld", call, (long long)n,
                      tg_type_name(t), (long long)bs);
    return TG_OK;
}

tg_status tg_quantize(tg_type t, const float *src, void *dst, int64_t n) {
    tg_status s = check_args("quantize", t, src, dst, n);
    if (s != TG_OK) return s;
    tg_quantize_row(t, src, dst, n);
    return TG_OK;
}

tg_status tg_dequantize(tg_type t, const void *src, float *dst, int64_t n) {
    tg_status s = check_args("dequantize", t, src, dst, n);
    if (s != TG_OK) return s;
    tg_dequantize_row(t, src, dst, n);
    return TG_OK;
}
