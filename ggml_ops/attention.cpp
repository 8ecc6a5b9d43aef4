// attention.cpp - causal attention of new queries over a KV cache.
#include "ops.h"

// q {D, Hq, T, B}; k_cache {D, Hkv, L, B}; v_cache {Dv, Hkv, L, B};
// positions {T, B} -> {Dv, Hq, T, B}
tg_tensor *tg_attention(tg_context *ctx, tg_tensor *q, tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *positions,
                        float scale) {
    const char *call = "attention";
    if (!tg_check_type(call, "q", q, TG_TYPE_F32) || !tg_check_float_type(call, "k_cache", k_cache) ||
        !tg_check_float_type(call, "v_cache", v_cache) || !tg_check_type(call, "positions", positions, TG_TYPE_I32))
        return nullptr;
    const int64_t D = q->ne[0], Hq = q->ne[1], T = q->ne[2], B = q->ne[3];
    const int64_t Hkv = k_cache->ne[1], L = k_cache->ne[2];
    if (k_cache->ne[0] != D || k_cache->ne[3] != B)
        TG_FAIL_NULL(TG_ERR_ARG, "[attention] k_cache %s does not match q %s (D and B)", tg_shape_str(k_cache).c_str(),
                     tg_shape_str(q).c_str());
    if (v_cache->ne[1] != Hkv || v_cache->ne[2] != L || v_cache->ne[3] != B)
        TG_FAIL_NULL(TG_ERR_ARG, "[attention] v_cache %s does not match k_cache %s", tg_shape_str(v_cache).c_str(),
                     tg_shape_str(k_cache).c_str());
    if (Hq % Hkv != 0)
        TG_FAIL_NULL(TG_ERR_ARG, "[attention] query heads %lld not a multiple of kv heads %lld", (long long)Hq,
                     (long long)Hkv);
    if (positions->ne[0] != T || positions->ne[1] != B || positions->ne[2] != 1 || positions->ne[3] != 1)
        TG_FAIL_NULL(TG_ERR_ARG, "[attention] positions %s must be {T=%lld, B=%lld}", tg_shape_str(positions).c_str(),
                     (long long)T, (long long)B);
    if (!std::isfinite(scale)) TG_FAIL_NULL(TG_ERR_ARG, "[attention] scale %g is not finite", scale);
    const int64_t ne[4] = {v_cache->ne[0], Hq, T, B};
    tg_tensor *srcs[4] = {q, k_cache, v_cache, positions};
    tg_tensor *t = tg_new_op(ctx, call, TG_OP_ATTENTION, TG_TYPE_F32, 4, ne, srcs, 4);
    if (t) tg_set_params(t, scale);
    return t;
}

// One (head, token, sequence) query per work item: scores over rows
// 0..min(p, L-1), softmax in double, weighted sum of V rows.
void tg_cpu_attention(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2], *pos = dst->src[3];
    const float scale = tg_get_params<float>(dst);
    const int64_t D = q->ne[0], Hq = q->ne[1], T = q->ne[2], L = kc->ne[2], Dv = vc->ne[0];
    const int64_t group = Hq / kc->ne[1];
    std::vector<double> s((size_t)L), acc((size_t)Dv);
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % Hq, t = (r / Hq) % T, b = r / (Hq * T), hk = h / group;
        const int32_t p = tg_get_i32(pos, t, b, 0, 0);
        const int64_t n = p < 0 ? 0 : (p < L ? (int64_t)p + 1 : L);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; d++) dot += (double)tg_get_f32(q, d, h, t, b) * tg_get_f32(kc, d, hk, j, b);
            s[j] = scale * dot;
            mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) sum += (s[j] = std::exp(s[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = 0; d < Dv; d++) acc[d] += s[j] * tg_get_f32(vc, d, hk, j, b);
        for (int64_t d = 0; d < Dv; d++) tg_set_f32(dst, d, h, t, b, n ? (float)(acc[d] / sum) : 0.0f);
    }
}
