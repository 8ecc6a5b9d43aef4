// norm.cpp - rms_norm, l2_norm over ne0, and softmax.
#include <algorithm>

#include "ops.h"

static tg_tensor *norm_op(tg_context *ctx, const char *call, tg_op op, tg_tensor *a, float eps) {
    if (!tg_check_float_type(call, "a", a)) return nullptr;
    if (!(eps >= 0.0f) || std::isinf(eps)) TG_FAIL_NULL(TG_ERR_ARG, "[%s] eps %g must be finite and >= 0", call, eps);
    tg_tensor *srcs[1] = {a};
    tg_tensor *t = tg_new_op(ctx, call, op, TG_TYPE_F32, 4, a->ne, srcs, 1);
    if (t) tg_set_params(t, eps);
    return t;
}

tg_tensor *tg_rms_norm(tg_context *ctx, tg_tensor *a, float eps) { return norm_op(ctx, "rms_norm", TG_OP_RMS_NORM, a, eps); }
tg_tensor *tg_l2_norm(tg_context *ctx, tg_tensor *a, float eps) { return norm_op(ctx, "l2_norm", TG_OP_L2_NORM, a, eps); }

tg_tensor *tg_softmax(tg_context *ctx, tg_tensor *a, float scale) {
    if (!tg_check_float_type("softmax", "a", a)) return nullptr;
    if (!std::isfinite(scale)) TG_FAIL_NULL(TG_ERR_ARG, "[softmax] scale %g is not finite", scale);
    tg_tensor *srcs[1] = {a};
    tg_tensor *t = tg_new_op(ctx, "softmax", TG_OP_SOFTMAX, TG_TYPE_F32, 4, a->ne, srcs, 1);
    if (t) tg_set_params(t, scale);
    return t;
}

// Row r of t as (i1, i2, i3).
static void row_index(const tg_tensor *t, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % t->ne[1];
    *i2 = (r / t->ne[1]) % t->ne[2];
    *i3 = r / (t->ne[1] * t->ne[2]);
}

// x * 1/sqrt(sum(x^2) / div + eps) per row
static void norm_rows(const tg_tensor *dst, int ith, int nth, bool mean) {
    const tg_tensor *a = dst->src[0];
    const float eps = tg_get_params<float>(dst);
    int64_t r0, r1, i1, i2, i3;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        row_index(dst, r, &i1, &i2, &i3);
        double sum = 0.0;
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) {
            double x = tg_get_f32(a, i0, i1, i2, i3);
            sum += x * x;
        }
        if (mean) sum /= (double)a->ne[0];
        const float inv = (float)(1.0 / std::sqrt(sum + eps));
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) tg_set_f32(dst, i0, i1, i2, i3, tg_get_f32(a, i0, i1, i2, i3) * inv);
    }
}

void tg_cpu_rms_norm(const tg_tensor *dst, int ith, int nth) { norm_rows(dst, ith, nth, true); }
void tg_cpu_l2_norm(const tg_tensor *dst, int ith, int nth) { norm_rows(dst, ith, nth, false); }

// softmax(scale * x) per row; -inf entries get 0 whatever the scale (a mask,
// as ggml's scale * x + mask; scaling first would turn them into +inf or NaN);
// a row of all -inf gives 0s; a NaN entry makes its row NaN. Logits in double.
void tg_cpu_softmax(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *a = dst->src[0];
    const float scale = tg_get_params<float>(dst);
    int64_t r0, r1, i1, i2, i3;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        row_index(dst, r, &i1, &i2, &i3);
        auto logit = [&](int64_t i0) {
            const float x = tg_get_f32(a, i0, i1, i2, i3);
            return x == -INFINITY ? -INFINITY : (double)scale * x;
        };
        double mx = -INFINITY;
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) {
            const double x = logit(i0);
            mx = std::isnan(x) || std::isnan(mx) ? NAN : std::max(mx, x);
        }
        double sum = 0.0;
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) {
            const double x = logit(i0);
            sum += x == -INFINITY ? 0.0 : std::exp(x - mx);
        }
        for (int64_t i0 = 0; i0 < a->ne[0]; i0++) {
            const double x = logit(i0);
            const double e = x == -INFINITY ? 0.0 : std::exp(x - mx);
            tg_set_f32(dst, i0, i1, i2, i3, mx == -INFINITY ? 0.0f : (float)(e / sum));
        }
    }
}
