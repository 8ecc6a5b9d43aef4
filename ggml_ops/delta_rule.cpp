// delta_rule.cpp - gated linear / gated delta-rule recurrence.
#include "ops.h"

static constexpr int64_t k_max_head_dim = 256;  // Dk and Dv, on every backend
static constexpr float k_l2norm_eps = 1e-6f;    // l2norm_qk: x / sqrt(sum x^2 + 1e-6)

// q, k {Dk, Hk, T, B}; v {Dv, Hv, T, B} F32/F16/BF16; g, beta {Hv, T, B} F32;
// state {Dk, Dv, Hv, B} F32/F16/BF16 or NULL -> o {Dv, Hv, T, B} F32/F16/BF16 (params->out_type)
tg_tensor *tg_delta_rule(tg_context *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *g, tg_tensor *beta,
                         tg_tensor *state, const tg_delta_params *params) {
    const char *call = "delta_rule";
    if (!tg_check_float_type(call, "q", q) || !tg_check_float_type(call, "k", k) ||
        !tg_check_float_type(call, "v", v) || !tg_check_type(call, "g", g, TG_TYPE_F32) ||
        !tg_check_type(call, "beta", beta, TG_TYPE_F32))
        return nullptr;
    if (state && !tg_check_float_type(call, "state", state)) return nullptr;
    if (!params) TG_FAIL_NULL(TG_ERR_ARG, "[%s] params is NULL", call);
    // read field by field: a C caller may have stored any int or byte there
    const int mode = tg_enum_value(params->mode), gate = tg_enum_value(params->gate);
    const int algo = tg_enum_value(params->algo);
    unsigned char l2norm;
    memcpy(&l2norm, &params->l2norm_qk, 1);
    if (mode != TG_DELTA_GATED_LINEAR && mode != TG_DELTA_GATED_DELTA)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] unknown mode %d", call, mode);
    if (gate != TG_GATE_LINEAR && gate != TG_GATE_LOG)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] unknown gate kind %d", call, gate);
    if (algo != TG_DELTA_ALGO_AUTO && algo != TG_DELTA_ALGO_SCAN && algo != TG_DELTA_ALGO_CHUNKED)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] unknown algo %d", call, algo);
    if (!std::isfinite(params->scale)) TG_FAIL_NULL(TG_ERR_ARG, "[%s] scale %g is not finite", call, params->scale);
    const int out_type = tg_enum_value(params->out_type);
    if (out_type != TG_TYPE_F32 && out_type != TG_TYPE_F16 && out_type != TG_TYPE_BF16)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] out_type %d must be F32, F16 or BF16", call, out_type);
    const tg_delta_params dp = {(tg_delta_mode)mode, (tg_gate_kind)gate, params->scale, l2norm != 0,
                                (tg_delta_algo)algo, (tg_type)out_type};

    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], B = q->ne[3];
    const int64_t Dv = v->ne[0], Hv = v->ne[1];
    if (!tg_same_shape(q, k))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] k %s must have the shape of q %s", call, tg_shape_str(k).c_str(),
                     tg_shape_str(q).c_str());
    if (v->ne[2] != T || v->ne[3] != B)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] v %s must be {Dv, Hv, T=%lld, B=%lld} to match q %s", call,
                     tg_shape_str(v).c_str(), (long long)T, (long long)B, tg_shape_str(q).c_str());
    if (Dk > k_max_head_dim || Dv > k_max_head_dim)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] head dims Dk=%lld, Dv=%lld must be in [1, %lld]", call, (long long)Dk,
                     (long long)Dv, (long long)k_max_head_dim);
    if (Hv % Hk != 0)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] value heads Hv=%lld must be a multiple of key heads Hk=%lld", call,
                     (long long)Hv, (long long)Hk);
    const tg_tensor *gates[2] = {g, beta};
    const char *gate_names[2] = {"g", "beta"};
    for (int i = 0; i < 2; i++)
        if (gates[i]->ne[0] != Hv || gates[i]->ne[1] != T || gates[i]->ne[2] != B || gates[i]->ne[3] != 1)
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] %s %s must be {Hv=%lld, T=%lld, B=%lld}", call, gate_names[i],
                         tg_shape_str(gates[i]).c_str(), (long long)Hv, (long long)T, (long long)B);
    if (state) {
        if (state->ne[0] != Dk || state->ne[1] != Dv || state->ne[2] != Hv || state->ne[3] != B)
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] state %s must be {Dk=%lld, Dv=%lld, Hv=%lld, B=%lld}", call,
                         tg_shape_str(state).c_str(), (long long)Dk, (long long)Dv, (long long)Hv, (long long)B);
        // the final S is written back: it must outlive the graph, and no input may alias it
        if (!tg_is_leaf(tg_view_root(state)))
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] state must be a persistent tensor (a leaf or a view of one)", call);
        const tg_tensor *inputs[5] = {q, k, v, g, beta};
        const char *names[5] = {"q", "k", "v", "g", "beta"};
        for (int i = 0; i < 5; i++)
            if (tg_storage_overlaps(inputs[i], state))
                TG_FAIL_NULL(TG_ERR_ARG, "[%s] %s shares storage with the state", call, names[i]);
    }
    const int64_t ne[4] = {Dv, Hv, T, B};
    tg_tensor *srcs[6] = {q, k, v, g, beta, state};
    tg_tensor *t = tg_new_op(ctx, call, TG_OP_DELTA_RULE, dp.out_type, 4, ne, srcs, 6);
    if (t) tg_set_params(t, dp);
    return t;
}

// a * s for the gate's decay. A zero state entry stays zero under any gate
// that is not NaN: a = exp(g) may overflow to inf for a large g, yet the
// product with an exact zero is zero (inf * 0 would be a NaN the math has not).
static inline float gate_mul(float a, float s) { return s == 0.0f && !std::isnan(a) ? 0.0f : a * s; }

// x (n values) scaled by 1 / sqrt(sum x^2 + eps), exactly as tg_l2_norm does
// it (sum in double, one F32 multiplier), so the fused norm equals the op.
static void l2norm(float *x, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float inv = (float)(1.0 / std::sqrt(sum + k_l2norm_eps));
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

// One (value head h, sequence b) per work item; its S is Dk x Dv F32 with
// S[i][j] at i + j*Dk, loaded from the state (or zero), carried over t = 0..T-1
// and stored back (converted to the state type) at the end:
//   S = a*S;  u = beta * (v - S^T k)  (GATED_DELTA)  or  u = beta * v  (GATED_LINEAR);
//   S += k u^T;  o = scale * S^T q
// Sums run in F32, in index order.
void tg_cpu_delta_rule(const tg_tensor *dst, int ith, int nth) {
    if (tg_get_params<tg_delta_params>(dst).algo == TG_DELTA_ALGO_CHUNKED) {
        tg_cpu_delta_rule_chunked(dst, ith, nth);  // delta_rule_chunked.cpp
        return;
    }
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *state = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], Dv = v->ne[0], Hv = v->ne[1], B = v->ne[3];
    const int64_t group = Hv / Hk;
    std::vector<float> S((size_t)(Dk * Dv)), qt((size_t)Dk), kt((size_t)Dk), u((size_t)Dv);
    int64_t r0, r1;
    tg_split_rows(Hv * B, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % Hv, b = r / Hv, hk = h / group;
        for (int64_t j = 0; j < Dv; j++)
            for (int64_t i = 0; i < Dk; i++) S[i + j * Dk] = state ? tg_get_f32(state, i, j, h, b) : 0.0f;

        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < Dk; i++) {
                qt[i] = tg_get_f32(q, i, hk, t, b);
                kt[i] = tg_get_f32(k, i, hk, t, b);
            }
            if (dp.l2norm_qk) {
                l2norm(qt.data(), Dk);
                l2norm(kt.data(), Dk);
            }
            const float gt = tg_get_f32(g, h, t, b, 0), bt = tg_get_f32(beta, h, t, b, 0);
            const float a = dp.gate == TG_GATE_LOG ? std::exp(gt) : gt;
            for (float &s : S) s = gate_mul(a, s);

            // u = beta * (v - S^T k), or beta * v
            for (int64_t j = 0; j < Dv; j++) {
                float vj = tg_get_f32(v, j, h, t, b);
                if (dp.mode == TG_DELTA_GATED_DELTA) {
                    float sk = 0.0f;
                    for (int64_t i = 0; i < Dk; i++) sk += S[i + j * Dk] * kt[i];
                    vj -= sk;
                }
                u[j] = bt * vj;
            }
            // S += k u^T;  o = scale * S^T q
            for (int64_t j = 0; j < Dv; j++) {
                float oj = 0.0f;
                for (int64_t i = 0; i < Dk; i++) {
                    S[i + j * Dk] += kt[i] * u[j];
                    oj += S[i + j * Dk] * qt[i];
                }
                tg_set_f32(dst, j, h, t, b, dp.scale * oj);
            }
        }

        if (state)
            for (int64_t j = 0; j < Dv; j++)
                for (int64_t i = 0; i < Dk; i++) tg_set_f32(state, i, j, h, b, S[i + j * Dk]);
    }
}
