// rope.cpp - rotary position embedding, and the fused RoPE + KV-cache update.
#include "ops.h"

tg_rope_params tg_rope_default_params(int n_rot) {
    tg_rope_params p;
    p.n_rot = n_rot;
    p.mode = TG_ROPE_INTERLEAVED;
    p.base = 10000.0f;
    return p;
}

// Shared parameter check: n_rot even, 2 <= n_rot <= D, mode known, base > 0.
bool tg_rope_check_params(const char *call, const tg_rope_params *p, int64_t D, bool need_base) {
    if (!p) {
        tg_err(TG_ERR_ARG, "[%s] params is NULL", call);
        return false;
    }
    if (p->n_rot < 2 || p->n_rot % 2 != 0 || p->n_rot > D) {
        tg_err(TG_ERR_ARG, "[%s] n_rot %d must be even and in [2, D=%lld]", call, p->n_rot, (long long)D);
        return false;
    }
    // read as int: a C caller may store any value in the enum field, and
    // loading one outside the enum's range as the enum is undefined in C++
    int mode;
    static_assert(sizeof(p->mode) == sizeof(int), "tg_rope_mode is int-sized");
    memcpy(&mode, &p->mode, sizeof(mode));
    if (mode != TG_ROPE_INTERLEAVED && mode != TG_ROPE_NEOX) {
        tg_err(TG_ERR_ARG, "[%s] unknown rope mode %d", call, mode);
        return false;
    }
    if (need_base && !(p->base > 0.0f && std::isfinite(p->base))) {
        tg_err(TG_ERR_ARG, "[%s] base %g must be finite and > 0", call, p->base);
        return false;
    }
    return true;
}

// a {D, H, T, B} F32, positions {T, B} I32
tg_tensor *tg_rope(tg_context *ctx, tg_tensor *a, tg_tensor *positions, const tg_rope_params *params) {
    if (!tg_check_type("rope", "a", a, TG_TYPE_F32) || !tg_check_type("rope", "positions", positions, TG_TYPE_I32))
        return nullptr;
    if (!tg_rope_check_params("rope", params, a->ne[0], true)) return nullptr;
    if (positions->ne[0] != a->ne[2] || positions->ne[1] != a->ne[3] || positions->ne[2] != 1 || positions->ne[3] != 1)
        TG_FAIL_NULL(TG_ERR_ARG, "[rope] positions %s must be {T=%lld, B=%lld}", tg_shape_str(positions).c_str(),
                     (long long)a->ne[2], (long long)a->ne[3]);
    tg_tensor *srcs[2] = {a, positions};
    tg_tensor *t = tg_new_op(ctx, "rope", TG_OP_ROPE, TG_TYPE_F32, 4, a->ne, srcs, 2);
    if (t) tg_set_params(t, *params);
    return t;
}

// Rotate one head vector x (D values) at position p into out, angles from base.
// Angles in double so that large positions keep their precision.
void tg_rope_row_base(const float *x, float *out, int64_t D, int64_t p, const tg_rope_params &rp) {
    const int half = rp.n_rot / 2;
    for (int64_t d = rp.n_rot; d < D; d++) out[d] = x[d];
    for (int i = 0; i < half; i++) {
        const double theta = (double)p * std::pow((double)rp.base, -2.0 * i / rp.n_rot);
        const float c = (float)std::cos(theta), s = (float)std::sin(theta);
        const int e = rp.mode == TG_ROPE_NEOX ? i : 2 * i, o = rp.mode == TG_ROPE_NEOX ? i + half : 2 * i + 1;
        out[e] = x[e] * c - x[o] * s;
        out[o] = x[e] * s + x[o] * c;
    }
}

void tg_cpu_rope(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *a = dst->src[0], *pos = dst->src[1];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    const int64_t D = a->ne[0], H = a->ne[1], T = a->ne[2];
    std::vector<float> x((size_t)D), y((size_t)D);
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % H, t = (r / H) % T, b = r / (H * T);
        for (int64_t d = 0; d < D; d++) x[d] = tg_get_f32(a, d, h, t, b);
        tg_rope_row_base(x.data(), y.data(), D, tg_get_i32(pos, t, b, 0, 0), rp);
        for (int64_t d = 0; d < D; d++) tg_set_f32(dst, d, h, t, b, y[d]);
    }
}

// ---------------------------------------------------------------------------
// rope_kv_update: implemented in the signature-ops change.

tg_tensor *tg_rope_kv_update(tg_context *ctx, tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *k_new,
                             tg_tensor *v_new, tg_tensor *positions, tg_tensor *cos, tg_tensor *sin,
                             const tg_rope_params *params) {
    TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[rope_kv_update] not implemented yet");
}
tg_status tg_check_rope_kv_update(const tg_tensor *dst) { return TG_OK; }
void tg_cpu_rope_kv_update(const tg_tensor *dst, int ith, int nth) {}
