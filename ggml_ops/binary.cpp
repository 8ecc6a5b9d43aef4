// binary.cpp - add, mul (b broadcast over a, ggml's rule), swiglu.
#include "ops.h"

static tg_tensor *binary_op(tg_context *ctx, const char *call, tg_op op, tg_tensor *a, tg_tensor *b) {
    if (!tg_check_float_type(call, "a", a) || !tg_check_float_type(call, "b", b)) return nullptr;
    for (int i = 0; i < TG_MAX_DIMS; i++)
        if (a->ne[i] % b->ne[i] != 0)
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] cannot broadcast b %s to a %s (dim %d)", call, tg_shape_str(b).c_str(),
                         tg_shape_str(a).c_str(), i);
    tg_tensor *srcs[2] = {a, b};
    return tg_new_op(ctx, call, op, TG_TYPE_F32, 4, a->ne, srcs, 2);
}

tg_tensor *tg_add(tg_context *ctx, tg_tensor *a, tg_tensor *b) { return binary_op(ctx, "add", TG_OP_ADD, a, b); }
tg_tensor *tg_mul(tg_context *ctx, tg_tensor *a, tg_tensor *b) { return binary_op(ctx, "mul", TG_OP_MUL, a, b); }

tg_tensor *tg_swiglu(tg_context *ctx, tg_tensor *a, tg_tensor *b) {
    if (!tg_check_float_type("swiglu", "a", a) || !tg_check_float_type("swiglu", "b", b)) return nullptr;
    if (!tg_same_shape(a, b))
        TG_FAIL_NULL(TG_ERR_ARG, "[swiglu] a %s and b %s differ in shape", tg_shape_str(a).c_str(),
                     tg_shape_str(b).c_str());
    tg_tensor *srcs[2] = {a, b};
    return tg_new_op(ctx, "swiglu", TG_OP_SWIGLU, TG_TYPE_F32, 4, a->ne, srcs, 2);
}

template <typename F> static void binary_rows(const tg_tensor *dst, int ith, int nth, F f) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        for (int64_t i0 = 0; i0 < dst->ne[0]; i0++) {
            float x = tg_get_f32(a, i0, i1, i2, i3);
            float y = tg_get_f32(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
            tg_set_f32(dst, i0, i1, i2, i3, f(x, y));
        }
    }
}

void tg_cpu_add(const tg_tensor *dst, int ith, int nth) {
    binary_rows(dst, ith, nth, [](float x, float y) { return x + y; });
}
void tg_cpu_mul(const tg_tensor *dst, int ith, int nth) {
    binary_rows(dst, ith, nth, [](float x, float y) { return x * y; });
}
void tg_cpu_swiglu(const tg_tensor *dst, int ith, int nth) {
    // silu(-inf) is 0 (its limit), not -inf/inf
    binary_rows(dst, ith, nth, [](float x, float y) { return (x == -INFINITY ? 0.0f : x / (1.0f + expf(-x))) * y; });
}
