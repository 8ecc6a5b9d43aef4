// rope.cpp - rotary position embedding, and the fused RoPE + KV-cache update.
#include <algorithm>
#include <new>
#include <utility>

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
    const int mode = tg_enum_value(p->mode);  // a C caller may store any int in the enum
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

// cos and sin of pair i's angle at position p, theta_i = p * base^(-2i/n_rot).
// Computed in double so that large positions keep their precision, then
// rounded to F32 (the value a cos/sin table would hold).
static void rope_angle_base(int64_t p, int i, const tg_rope_params &rp, float *c, float *s) {
    const double theta = (double)p * std::pow((double)rp.base, -2.0 * i / rp.n_rot);
    *c = (float)std::cos(theta);
    *s = (float)std::sin(theta);
}

// Rotate one head vector x (D values) at position p into out. Pair i's angle
// comes from row p of the cos/sin tables {n_rot/2, L_tab} when they are given
// (the caller has checked p < L_tab), else from base. Dims past n_rot are copied.
static void rope_row(const float *x, float *out, int64_t D, int64_t p, const tg_rope_params &rp,
                     const tg_tensor *cos_tab, const tg_tensor *sin_tab) {
    const int half = rp.n_rot / 2;
    for (int64_t d = rp.n_rot; d < D; d++) out[d] = x[d];
    for (int i = 0; i < half; i++) {
        float c, s;
        if (cos_tab) {
            c = tg_get_f32(cos_tab, i, p, 0, 0);
            s = tg_get_f32(sin_tab, i, p, 0, 0);
        } else {
            rope_angle_base(p, i, rp, &c, &s);
        }
        const int e = rp.mode == TG_ROPE_NEOX ? i : 2 * i, o = rp.mode == TG_ROPE_NEOX ? i + half : 2 * i + 1;
        out[e] = x[e] * c - x[o] * s;
        out[o] = x[e] * s + x[o] * c;
    }
}

// Angles from base (plain rope). Shared with rope_kv_update, so that both ops
// rotate bit-identically.
void tg_rope_row_base(const float *x, float *out, int64_t D, int64_t p, const tg_rope_params &rp) {
    rope_row(x, out, D, p, rp, nullptr, nullptr);
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
// rope_kv_update

// Byte range [lo, hi) that t spans inside the storage of its view root.
static const tg_tensor *storage_range(const tg_tensor *t, size_t *lo, size_t *hi) {
    size_t off = 0;
    const tg_tensor *r = t;
    for (; r->view_src; r = r->view_src) off += r->view_offs;
    *lo = off;
    *hi = off + tg_nbytes(t);
    return r;
}
// Whether a and b may share bytes (same storage, overlapping byte ranges).
bool tg_storage_overlaps(const tg_tensor *a, const tg_tensor *b) {
    size_t alo, ahi, blo, bhi;
    if (storage_range(a, &alo, &ahi) != storage_range(b, &blo, &bhi)) return false;
    return alo < bhi && blo < ahi;
}

static bool has_shape(const tg_tensor *t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return t->ne[0] == n0 && t->ne[1] == n1 && t->ne[2] == n2 && t->ne[3] == n3;
}

// k_cache, v_cache {D, Hkv, L, B} F32/F16/BF16 (the two types may differ);
// k_new, v_new {D, Hkv, T, B} F32; positions {T, B} I32; cos, sin
// {n_rot/2, L_tab} F32 or both NULL. Result: a view of k_cache.
tg_tensor *tg_rope_kv_update(tg_context *ctx, tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *k_new,
                             tg_tensor *v_new, tg_tensor *positions, tg_tensor *cos, tg_tensor *sin,
                             const tg_rope_params *params) {
    const char *call = "rope_kv_update";
    if (!tg_check_float_type(call, "k_cache", k_cache) || !tg_check_float_type(call, "v_cache", v_cache) ||
        !tg_check_type(call, "k_new", k_new, TG_TYPE_F32) || !tg_check_type(call, "v_new", v_new, TG_TYPE_F32) ||
        !tg_check_type(call, "positions", positions, TG_TYPE_I32))
        return nullptr;
    if ((cos == nullptr) != (sin == nullptr))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] cos and sin must both be given or both be NULL (cos %s, sin %s)", call,
                     cos ? "given" : "NULL", sin ? "given" : "NULL");
    if (cos && (!tg_check_type(call, "cos", cos, TG_TYPE_F32) || !tg_check_type(call, "sin", sin, TG_TYPE_F32)))
        return nullptr;
    const int64_t D = k_cache->ne[0], H = k_cache->ne[1], B = k_cache->ne[3];
    const int64_t T = k_new->ne[2];
    if (!tg_same_shape(k_cache, v_cache))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] v_cache %s must have the shape of k_cache %s", call,
                     tg_shape_str(v_cache).c_str(), tg_shape_str(k_cache).c_str());
    if (!has_shape(k_new, D, H, T, B))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] k_new %s must be {D=%lld, Hkv=%lld, T, B=%lld} to match k_cache %s", call,
                     tg_shape_str(k_new).c_str(), (long long)D, (long long)H, (long long)B,
                     tg_shape_str(k_cache).c_str());
    if (!tg_same_shape(k_new, v_new))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] v_new %s must have the shape of k_new %s", call, tg_shape_str(v_new).c_str(),
                     tg_shape_str(k_new).c_str());
    if (!has_shape(positions, T, B, 1, 1))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] positions %s must be {T=%lld, B=%lld}", call, tg_shape_str(positions).c_str(),
                     (long long)T, (long long)B);
    if (!tg_rope_check_params(call, params, D, cos == nullptr)) return nullptr;
    if (cos) {
        const int64_t half = params->n_rot / 2;
        if (cos->ne[0] != half || cos->ne[2] != 1 || cos->ne[3] != 1)
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] cos %s must be {n_rot/2=%lld, L_tab}", call, tg_shape_str(cos).c_str(),
                         (long long)half);
        if (!tg_same_shape(cos, sin))
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] sin %s must have the shape of cos %s", call, tg_shape_str(sin).c_str(),
                         tg_shape_str(cos).c_str());
    }
    // the caches are written while everything else is read: no shared bytes
    if (tg_storage_overlaps(k_cache, v_cache)) TG_FAIL_NULL(TG_ERR_ARG, "[%s] k_cache and v_cache share storage", call);
    const tg_tensor *inputs[5] = {k_new, v_new, positions, cos, sin};
    const char *names[5] = {"k_new", "v_new", "positions", "cos", "sin"};
    for (int i = 0; i < 5; i++)
        if (inputs[i] && (tg_storage_overlaps(inputs[i], k_cache) || tg_storage_overlaps(inputs[i], v_cache)))
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] %s shares storage with a cache it would be written into", call, names[i]);

    tg_tensor *t = tg_new_view_of(ctx, call, TG_OP_ROPE_KV_UPDATE, k_cache, 4, k_cache->ne, k_cache->nb, 0);
    if (!t) return nullptr;
    t->src[1] = v_cache;
    t->src[2] = k_new;
    t->src[3] = v_new;
    t->src[4] = positions;
    t->src[5] = cos;
    t->src[6] = sin;
    tg_set_params(t, *params);
    return t;
}

// Every position before anything is written: in [0, L), below the table's row
// count when tables are given, and distinct within its sequence. O(T log T)
// per sequence, independent of L.
tg_status tg_check_rope_kv_update(const tg_tensor *dst) {
    const tg_tensor *kc = dst->src[0], *pos = dst->src[4], *cos_tab = dst->src[5];
    const int64_t L = kc->ne[2], T = pos->ne[0], B = pos->ne[1];
    std::vector<std::pair<int32_t, int64_t>> seen;  // (position, token)
    try {
        seen.resize((size_t)T);
    } catch (const std::bad_alloc &) {
        return tg_err(TG_ERR_OOM, "[rope_kv_update] cannot allocate the position check for %lld tokens", (long long)T);
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < T; t++) {
            const int32_t p = tg_get_i32(pos, t, b, 0, 0);
            if (p < 0 || p >= L)
                return tg_err(TG_ERR_ARG,
                              "[rope_kv_update] position %d out of range [0, %lld) in sequence %lld (token %lld)", p,
                              (long long)L, (long long)b, (long long)t);
            if (cos_tab && p >= cos_tab->ne[1])
                return tg_err(
                    TG_ERR_ARG,
                    "[rope_kv_update] position %d past the cos/sin tables of %lld rows in sequence %lld (token %lld)",
                    p, (long long)cos_tab->ne[1], (long long)b, (long long)t);
            seen[(size_t)t] = {p, t};
        }
        std::sort(seen.begin(), seen.end());
        for (int64_t t = 1; t < T; t++)
            if (seen[(size_t)t].first == seen[(size_t)t - 1].first)
                return tg_err(TG_ERR_ARG,
                              "[rope_kv_update] position %d repeated in sequence %lld (tokens %lld and %lld)",
                              seen[(size_t)t].first, (long long)b, (long long)seen[(size_t)t - 1].second,
                              (long long)seen[(size_t)t].second);
    }
    return TG_OK;
}

// One (kv head, token, sequence) row per work item: rotate k_new's row and
// write it to K row p, copy v_new's row to V row p (p validated by the check,
// distinct per sequence, so no two items write the same row). Stores convert
// to the cache type, rounding to nearest even. Touches T*Hkv*B rows, never L.
void tg_cpu_rope_kv_update(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *kc = dst, *vc = dst->src[1], *kn = dst->src[2], *vn = dst->src[3], *pos = dst->src[4];
    const tg_tensor *cos_tab = dst->src[5], *sin_tab = dst->src[6];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    const int64_t D = kn->ne[0], H = kn->ne[1], T = kn->ne[2], B = kn->ne[3];
    std::vector<float> x((size_t)D), y((size_t)D);
    int64_t r0, r1;
    tg_split_rows(H * T * B, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % H, t = (r / H) % T, b = r / (H * T);
        const int64_t p = tg_get_i32(pos, t, b, 0, 0);
        for (int64_t d = 0; d < D; d++) x[d] = tg_get_f32(kn, d, h, t, b);
        rope_row(x.data(), y.data(), D, p, rp, cos_tab, sin_tab);
        for (int64_t d = 0; d < D; d++) tg_set_f32(kc, d, h, p, b, y[d]);
        for (int64_t d = 0; d < D; d++) tg_set_f32(vc, d, h, p, b, tg_get_f32(vn, d, h, t, b));
    }
}
