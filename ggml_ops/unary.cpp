// unary.cpp - scale, silu, sigmoid, softplus.
#include "ops.h"

static tg_tensor *unary_op(tg_context *ctx, const char *call, tg_op op, tg_tensor *a) {
    if (!tg_check_float_type(call, "a", a)) return nullptr;
    tg_tensor *srcs[1] = {a};
    return tg_new_op(ctx, call, op, TG_TYPE_F32, 4, a->ne, srcs, 1);
}

tg_tensor *tg_scale(tg_context *ctx, tg_tensor *a, float s) {
    tg_tensor *t = unary_op(ctx, "scale", TG_OP_SCALE, a);
    if (t) tg_set_params(t, s);
    return t;
}
tg_tensor *tg_silu(tg_context *ctx, tg_tensor *a) { return unary_op(ctx, "silu", TG_OP_SILU, a); }
tg_tensor *tg_sigmoid(tg_context *ctx, tg_tensor *a) { return unary_op(ctx, "sigmoid", TG_OP_SIGMOID, a); }
tg_tensor *tg_softplus(tg_context *ctx, tg_tensor *a) { return unary_op(ctx, "softplus", TG_OP_SOFTPLUS, a); }

template <typename F> static void unary_rows(const tg_tensor *dst, int ith, int nth, F f) {
    const tg_tensor *a = dst->src[0];
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        for (int64_t i0 = 0; i0 < dst->ne[0]; i0++) tg_set_f32(dst, i0, i1, i2, i3, f(tg_get_f32(a, i0, i1, i2, i3)));
    }
}

void tg_cpu_scale(const tg_tensor *dst, int ith, int nth) {
    const float s = tg_get_params<float>(dst);
    unary_rows(dst, ith, nth, [s](float x) { return x * s; });
}
// x * sigmoid(x); at x = -inf the formula is -inf/inf, the limit is 0
void tg_cpu_silu(const tg_tensor *dst, int ith, int nth) {
    unary_rows(dst, ith, nth, [](float x) { return x == -INFINITY ? 0.0f : x / (1.0f + expf(-x)); });
}
void tg_cpu_sigmoid(const tg_tensor *dst, int ith, int nth) {
    unary_rows(dst, ith, nth, [](float x) { return 1.0f / (1.0f + expf(-x)); });
}
// log(1 + exp(x)) without overflow: x past 20 is returned as is (the error is
// below float precision), as PyTorch's softplus threshold does.
void tg_cpu_softplus(const tg_tensor *dst, int ith, int nth) {
    unary_rows(dst, ith, nth, [](float x) { return x > 20.0f ? x : log1pf(expf(x)); });
}
