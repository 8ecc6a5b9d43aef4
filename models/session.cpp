// session.cpp - KV caches, recurrent states and the forward graph.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model.h"

namespace tgm {

static bool cache_type_ok(tg_type t) { return t == TG_TYPE_F32 || t == TG_TYPE_F16 || t == TG_TYPE_BF16; }

session *session_new(const model *m, const session_params &p) {
    if (!m) {
        tg_set_error(TG_ERR_ARG, "[session_new] model is NULL");
        return nullptr;
    }
    const hparams &hp = m->hp;
    const int n_ctx = p.n_ctx == 0 ? hp.n_ctx : p.n_ctx;
    if (p.n_seq < 1 || p.n_seq > 4096 || n_ctx < 1 || n_ctx > hp.n_ctx) {
        tg_set_error(TG_ERR_ARG, "[session_new] n_seq %d must be in [1, 4096] and n_ctx %d in [1, %d]", p.n_seq,
                     n_ctx, hp.n_ctx);
        return nullptr;
    }
    const int n_ubatch = p.n_ubatch == 0 ? std::min(n_ctx, 512) : p.n_ubatch;
    if (n_ubatch < 1 || n_ubatch > n_ctx) {
        tg_set_error(TG_ERR_ARG, "[session_new] n_ubatch %d outside [1, n_ctx = %d]", p.n_ubatch, n_ctx);
        return nullptr;
    }
    if (!cache_type_ok(p.type_k) || !cache_type_ok(p.type_v) || !cache_type_ok(p.type_state)) {
        tg_set_error(TG_ERR_ARG, "[session_new] cache and state types must be f32, f16 or bf16 (got %d, %d, %d)",
                     (int)p.type_k, (int)p.type_v, (int)p.type_state);
        return nullptr;
    }
    auto *s = new session();
    s->m = m;
    s->n_seq = p.n_seq;
    s->n_ctx = n_ctx;
    s->n_ubatch = n_ubatch;
    s->n_rows = n_ctx + n_ubatch;
    s->type_k = p.type_k;
    s->type_v = p.type_v;
    s->type_state = p.type_state;
    s->n_past.assign(p.n_seq, 0);
    s->tokens.assign(p.n_seq, {});
    tg_init_params ip = {(size_t)(4 * hp.n_layer + 4) * tg_tensor_overhead() + 4096, nullptr, true};
    s->ctx = tg_init(ip);
    s->k_cache.assign(hp.n_layer, nullptr);
    s->v_cache.assign(hp.n_layer, nullptr);
    s->state.assign(hp.n_layer, nullptr);
    s->snap.assign(hp.n_layer, nullptr);
    s->snap_pos.assign(p.n_seq, -1);
    bool ok = s->ctx != nullptr;
    for (int il = 0; ok && il < hp.n_layer; il++) {
        if (hp.is_attention(il)) {
            s->k_cache[il] = tg_new_tensor_4d(s->ctx, p.type_k, hp.head_dim, hp.n_head_kv, s->n_rows, p.n_seq);
            s->v_cache[il] = tg_new_tensor_4d(s->ctx, p.type_v, hp.head_dim, hp.n_head_kv, s->n_rows, p.n_seq);
            ok = s->k_cache[il] && s->v_cache[il];
        } else {
            s->state[il] = tg_new_tensor_4d(s->ctx, p.type_state, hp.ssm_dk, hp.ssm_dv, hp.ssm_hv, p.n_seq);
            ok = s->state[il] != nullptr;
            if (ok && p.checkpoints) {
                s->snap[il] = tg_new_tensor_4d(s->ctx, p.type_state, hp.ssm_dk, hp.ssm_dv, hp.ssm_hv, p.n_seq);
                ok = s->snap[il] != nullptr;
            }
        }
    }
    if (ok) {
        s->inputs = tg_new_tensor_1d(s->ctx, TG_TYPE_I32, 4 * (int64_t)n_ubatch * p.n_seq);
        s->mask_table = tg_new_tensor_2d(s->ctx, TG_TYPE_F32, 1, 2);
        ok = s->inputs && s->mask_table;
    }
    if (ok) s->buf = tg_backend_alloc(m->backend, s->ctx);
    const float table[2] = {0.0f, 1.0f};
    if (!ok || !s->buf || tg_buffer_clear(s->buf, 0) != TG_OK ||
        tg_tensor_set(s->mask_table, table, 0, sizeof table) != TG_OK) {
        tg_set_error(TG_ERR_OOM, "[session_new] %s", tg_last_error());
        session_free(s);
        return nullptr;
    }
    s->state_bytes = tg_buffer_size(s->buf);
    return s;
}

session *session_new(const model *m, int n_seq, int n_ctx) {
    session_params p;
    p.n_seq = n_seq;
    p.n_ctx = n_ctx;
    if (n_ctx == 0) p.n_ctx = -1;  // 0 means "the model's" only in session_params
    return session_new(m, p);
}

// The shape a graph is built for: columns [col0, col0 + ncol) of the caches,
// T tokens per column (real ones first, then padding), R logit rows.
struct shape {
    int col0, ncol, T, R;
    bool operator==(const shape &o) const { return col0 == o.col0 && ncol == o.ncol && T == o.T && R == o.R; }
};

struct session_graph {
    shape sh;
    tg_context *ctx;  // the graph's tensors (metadata only: views of the slots, op results)
    tg_graph *g;
    tg_tensor *out;  // logits {V, R}
    uint64_t last_use;
};

static void free_graph(session_graph *sg) {
    if (!sg) return;
    tg_free(sg->ctx);
    delete sg;
}

void session_free(session *s) {
    if (!s) return;
    for (session_graph *sg : s->graphs) free_graph(sg);
    tg_buffer_free(s->buf);
    tg_free(s->ctx);
    delete s;
}

// Zero the slice of t that belongs to sequence seq (its last dim).
static tg_status zero_sequence(tg_tensor *t, int seq) {
    const size_t per = tg_nb(t, 3);
    std::vector<char> zeros(per, 0);
    return tg_tensor_set(t, zeros.data(), per * (size_t)seq, per);
}

tg_status session_reset(session *s, int seq) {
    if (!s) return tg_set_error(TG_ERR_ARG, "[session_reset] session is NULL");
    if (seq < 0 || seq >= s->n_seq)
        return tg_set_error(TG_ERR_ARG, "[session_reset] sequence %d outside [0, %d)", seq, s->n_seq);
    tg_status st = TG_OK;
    for (int il = 0; il < s->m->hp.n_layer && st == TG_OK; il++)
        for (tg_tensor *t : {s->k_cache[il], s->v_cache[il], s->state[il]})
            if (t && st == TG_OK) st = zero_sequence(t, seq);
    // empty whatever happened (a failed write of the backend left part of it zeroed: no
    // query may read its rows as the old tokens)
    s->n_past[seq] = 0;
    s->tokens[seq].clear();
    s->snap_pos[seq] = -1;
    if (st != TG_OK)
        return tg_set_error(st, "[session_reset] sequence %d: zeroing its caches failed (its length is now 0): %s",
                            seq, tg_last_error());
    return TG_OK;
}

namespace {

// Views of the sequences [seq0, seq0 + n) of a per-sequence tensor (last dim).
tg_tensor *seq_slice(tg_context *ctx, tg_tensor *t, int seq0, int n) {
    return tg_view_4d(ctx, t, tg_ne(t, 0), tg_ne(t, 1), tg_ne(t, 2), n, tg_nb(t, 1), tg_nb(t, 2), tg_nb(t, 3),
                      tg_nb(t, 3) * (size_t)seq0);
}

struct builder {
    const model &m;
    const hparams &hp;
    session &s;
    tg_context *ctx;
    int seq0, n, T;
    tg_tensor *pos;   // {T, n} I32
    tg_tensor *mask;  // {1, T, n} F32: 1 for a real token, 0 for padding

    tg_tensor *norm(tg_tensor *x, tg_tensor *w) { return tg_mul(ctx, tg_rms_norm(ctx, x, hp.rms_eps), w); }

    // x {E, T, n} -> {E, T, n}. Padding tokens write K/V rows past their
    // sequence's end (scratch rows that no real query reads).
    tg_tensor *attention(int il, tg_tensor *xn) {
        const layer &l = m.layers[il];
        const int64_t D = hp.head_dim;
        tg_tensor *q = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.wq, xn), D, hp.n_head, T, n);
        tg_tensor *k = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.wk, xn), D, hp.n_head_kv, T, n);
        tg_tensor *v = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.wv, xn), D, hp.n_head_kv, T, n);
        tg_rope_params rp = tg_rope_default_params(hp.n_rot);
        rp.base = hp.rope_base;
        q = tg_rope(ctx, q, pos, &rp);
        tg_tensor *kc = seq_slice(ctx, s.k_cache[il], seq0, n);
        tg_tensor *vc = seq_slice(ctx, s.v_cache[il], seq0, n);
        tg_tensor *kw = tg_rope_kv_update(ctx, kc, vc, k, v, pos, nullptr, nullptr, &rp);
        tg_tensor *o = tg_attention(ctx, q, kw, vc, pos, 1.0f / std::sqrt((float)D));
        o = tg_reshape_3d(ctx, o, D * hp.n_head, T, n);
        return tg_mul_mat(ctx, l.wo, o);
    }

    // Padding tokens get beta = 0 and log gate 0 (decay 1): S is left as it
    // was, so a padded column's state equals its unpadded run.
    tg_tensor *delta(int il, tg_tensor *xn) {
        const layer &l = m.layers[il];
        tg_tensor *q = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_q, xn), hp.ssm_dk, hp.ssm_hk, T, n);
        tg_tensor *k = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_k, xn), hp.ssm_dk, hp.ssm_hk, T, n);
        tg_tensor *v = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_v, xn), hp.ssm_dv, hp.ssm_hv, T, n);
        tg_tensor *beta = tg_mul(ctx, tg_sigmoid(ctx, tg_mul_mat(ctx, l.ssm_beta, xn)), mask);  // {Hv, T, n}
        tg_tensor *g = tg_mul(ctx, tg_softplus(ctx, tg_add(ctx, tg_mul_mat(ctx, l.ssm_alpha, xn), l.ssm_dt_bias)),
                              l.ssm_neg_exp_a);  // log gate, {Hv, T, n}
        g = tg_mul(ctx, g, mask);
        tg_delta_params dp = {TG_DELTA_GATED_DELTA, TG_GATE_LOG, 1.0f / std::sqrt((float)hp.ssm_dk), true,
                              TG_DELTA_ALGO_AUTO, TG_TYPE_F32};
        tg_tensor *st = seq_slice(ctx, s.state[il], seq0, n);
        tg_tensor *o = tg_delta_rule(ctx, q, k, v, g, beta, st, &dp);  // {Dv, Hv, T, n}
        o = tg_reshape_3d(ctx, o, (int64_t)hp.ssm_dv * hp.ssm_hv, T, n);
        return tg_mul_mat(ctx, l.ssm_out, o);
    }

    tg_tensor *ffn(int il, tg_tensor *xn) {
        const layer &l = m.layers[il];
        tg_tensor *h = tg_swiglu(ctx, tg_mul_mat(ctx, l.ffn_gate, xn), tg_mul_mat(ctx, l.ffn_up, xn));
        return tg_mul_mat(ctx, l.ffn_down, h);
    }

    // tokens {T, n} I32, rows {R} I32 (flat token indices t + T*col) -> logits {V, R}
    tg_tensor *forward(tg_tensor *tokens, tg_tensor *rows) {
        tg_tensor *x = tg_get_rows(ctx, m.tok_embd, tokens);  // {E, T, n}
        for (int il = 0; il < hp.n_layer; il++) {
            tg_tensor *xn = norm(x, m.layers[il].attn_norm);
            x = tg_add(ctx, x, hp.is_attention(il) ? attention(il, xn) : delta(il, xn));
            x = tg_add(ctx, x, ffn(il, norm(x, m.layers[il].ffn_norm)));
        }
        x = tg_get_rows(ctx, tg_reshape_2d(ctx, x, hp.n_embd, (int64_t)T * n), rows);  // {E, R}
        return tg_mul_mat(ctx, m.output, norm(x, m.out_norm));
    }
};

}  // namespace

// Build the forward graph of one batch shape. Inputs are views of the
// session's persistent input slot: a step writes them with tg_tensor_set,
// so the graph does not depend on the values.
static session_graph *build_graph(session *s, const shape &sh) {
    const hparams &hp = s->m->hp;
    const size_t n_nodes = (size_t)hp.n_layer * 44 + 64;
    tg_init_params ip = {n_nodes * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true};
    tg_context *ctx = tg_init(ip);
    if (!ctx) return nullptr;
    const int T = sh.T, n = sh.ncol;
    const size_t ct = (size_t)n * T * 4;
    tg_tensor *tok = tg_view_2d(ctx, s->inputs, T, n, (size_t)T * 4, 0);
    tg_tensor *pv = tg_view_2d(ctx, s->inputs, T, n, (size_t)T * 4, ct);
    tg_tensor *mv = tg_view_2d(ctx, s->inputs, T, n, (size_t)T * 4, 2 * ct);
    tg_tensor *rows = tg_view_1d(ctx, s->inputs, sh.R, 3 * ct);
    tg_tensor *mask = mv ? tg_get_rows(ctx, s->mask_table, mv) : nullptr;  // {1, T, n}
    builder bld{*s->m, hp, *s, ctx, sh.col0, n, T, pv, mask};
    tg_tensor *out = tok && pv && mask && rows ? bld.forward(tok, rows) : nullptr;
    tg_graph *g = out ? tg_graph_new(ctx) : nullptr;
    if (!g || tg_graph_expand(g, out) != TG_OK) {
        tg_set_error(TG_ERR_ARG, "[session] cannot build the graph: %s", tg_last_error());
        tg_free(ctx);
        return nullptr;
    }
    return new session_graph{sh, ctx, g, out, 0};
}

// The kept graph of this shape, built (and kept, dropping the least recently
// used beyond session_max_graphs) when there is none.
static session_graph *graph_for(session *s, const shape &sh) {
    for (session_graph *sg : s->graphs)
        if (sg->sh == sh) {
            sg->last_use = ++s->clock;
            return sg;
        }
    session_graph *sg = build_graph(s, sh);
    if (!sg) return nullptr;
    sg->last_use = ++s->clock;
    if ((int)s->graphs.size() >= session_max_graphs) {
        auto lru = std::min_element(s->graphs.begin(), s->graphs.end(),
                                    [](const session_graph *a, const session_graph *b) { return a->last_use < b->last_use; });
        free_graph(*lru);
        s->graphs.erase(lru);
    }
    s->graphs.push_back(sg);
    return sg;
}

tg_status session_reserve(session *s, int T_max) {
    if (!s) return tg_set_error(TG_ERR_ARG, "[session_reserve] session is NULL");
    if (T_max < 1 || T_max > s->n_ctx)
        return tg_set_error(TG_ERR_ARG, "[session_reserve] T_max %d outside [1, %d]", T_max, s->n_ctx);
    const int T = std::min(T_max, s->n_ubatch);
    const shape sh{0, s->n_seq, T, s->n_seq * T};
    session_graph *sg = s->reuse_graphs ? graph_for(s, sh) : build_graph(s, sh);
    if (!sg) return tg_set_error(TG_ERR_OOM, "[session_reserve] %s", tg_last_error());
    tg_status st = tg_backend_reserve(s->m->backend, sg->g);
    if (st != TG_OK) st = tg_set_error(st, "[session_reserve] %s", tg_last_error());
    if (!s->reuse_graphs) free_graph(sg);
    return st;
}

static int pow2_at_least(int x) {
    int p = 1;
    while (p < x) p *= 2;
    return p;
}

// One graph's worth of a batch: per sequence, the batch indices of its
// tokens in this round.
static tg_status run_round(session *s, const std::vector<std::vector<int>> &idx, const batch &b,
                           const std::vector<int> &out_slot, std::vector<float> *logits,
                           std::vector<uint8_t> *written, const char *who) {
    int lo = s->n_seq, hi = -1, tmax = 0;
    for (int q = 0; q < s->n_seq; q++)
        if (!idx[q].empty()) {
            lo = std::min(lo, q), hi = std::max(hi, q);
            tmax = std::max(tmax, (int)idx[q].size());
        }
    const int C = hi - lo + 1;
    bool ragged = false;
    for (int c = 0; c < C; c++) ragged |= (int)idx[lo + c].size() != tmax;
    // a ragged round is padded to a power of two, so that few shapes recur
    const int T = ragged ? std::min(pow2_at_least(tmax), s->n_ubatch) : tmax;
    const size_t ct = (size_t)C * T;
    std::vector<int32_t> in(3 * ct, 0);
    std::vector<int> want;  // batch indices of the logit rows, in batch order
    std::vector<int32_t> rows;
    for (int c = 0; c < C; c++) {
        const int q = lo + c;
        for (int t = 0; t < T; t++) {
            const bool real = t < (int)idx[q].size();
            in[(size_t)c * T + t] = real ? b.token[idx[q][t]] : 0;
            in[ct + (size_t)c * T + t] = s->n_past[q] + t;  // padding continues past the end (scratch rows)
            in[2 * ct + (size_t)c * T + t] = real ? 1 : 0;
            if (real && b.logits[idx[q][t]]) want.push_back(idx[q][t]), rows.push_back(c * T + t);
        }
    }
    // rows in batch order (the columns above are in sequence order)
    std::vector<size_t> order(want.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t c) { return want[a] < want[c]; });
    const int n_want = (int)want.size();
    int R = n_want;
    if (R != C && R != (int)ct) R = std::min(pow2_at_least(std::max(R, 1)), (int)ct);
    for (size_t i = 0; i < order.size(); i++) in.push_back(rows[order[i]]);
    while ((int)in.size() < (int)(3 * ct) + R) in.push_back(0);

    const shape sh{lo, C, T, R};
    session_graph *sg = s->reuse_graphs ? graph_for(s, sh) : build_graph(s, sh);
    if (!sg) return tg_set_error(TG_ERR_OOM, "[%s] %s", who, tg_last_error());
    tg_status st = tg_tensor_set(s->inputs, in.data(), 0, in.size() * 4);
    if (st == TG_OK) st = tg_graph_compute(s->m->backend, sg->g);
    const size_t V = (size_t)s->m->hp.n_vocab;
    // output row i is the logits of batch token want[order[i]]: straight into
    // the caller's rows where those follow each other (a step's usual case),
    // else through a copy
    bool direct = true;
    for (int i = 1; i < n_want && direct; i++)
        direct = out_slot[want[order[i]]] == out_slot[want[order[0]]] + i;
    if (st == TG_OK && n_want > 0) {
        if (direct) {
            st = tg_tensor_get(sg->out, &(*logits)[(size_t)out_slot[want[order[0]]] * V], 0, (size_t)n_want * V * 4);
        } else {
            std::vector<float> got((size_t)n_want * V);
            st = tg_tensor_get(sg->out, got.data(), 0, got.size() * 4);
            if (st == TG_OK)
                for (int i = 0; i < n_want; i++)
                    memcpy(&(*logits)[(size_t)out_slot[want[order[i]]] * V], &got[(size_t)i * V], V * 4);
        }
    }
    if (st == TG_OK) {
        for (int i = 0; i < n_want; i++) (*written)[(size_t)out_slot[want[order[i]]]] = 1;
        for (int q = lo; q <= hi; q++)
            for (int i : idx[q]) {
                s->tokens[q].push_back(b.token[i]);
                s->n_past[q]++;
            }
    } else {
        st = tg_set_error(st, "[%s] %s", who, tg_last_error());
    }
    if (!s->reuse_graphs) free_graph(sg);
    return st;
}

// Check a batch and run it in rounds of at most n_ubatch tokens per sequence.
static tg_status decode(session *s, const batch &b, std::vector<float> *logits, const char *who) {
    if (!s || !logits) return tg_set_error(TG_ERR_ARG, "[%s] NULL argument", who);
    const int n = b.size();
    if (n < 1 || b.pos.size() != (size_t)n || b.seq.size() != (size_t)n || b.logits.size() != (size_t)n)
        return tg_set_error(TG_ERR_ARG, "[%s] the batch is empty or its arrays differ in length", who);
    const hparams &hp = s->m->hp;
    std::vector<std::vector<int>> per(s->n_seq);
    std::vector<int> out_slot(n, -1);
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        const int q = b.seq[i];
        if (q < 0 || q >= s->n_seq)
            return tg_set_error(TG_ERR_ARG, "[%s] token %d: sequence %d outside [0, %d)", who, i, q, s->n_seq);
        if (b.token[i] < 0 || b.token[i] >= hp.n_vocab)
            return tg_set_error(TG_ERR_ARG, "[%s] token id %d at %d outside [0, %d)", who, b.token[i], i,
                                hp.n_vocab);
        const int expect = s->n_past[q] + (int)per[q].size();
        if (expect >= s->n_ctx)
            return tg_set_error(TG_ERR_ARG, "[%s] sequence %d: %d + %zu tokens exceed the context of %d", who, q,
                                s->n_past[q], per[q].size() + 1, s->n_ctx);
        if (b.pos[i] != expect)
            return tg_set_error(TG_ERR_ARG,
                                "[%s] token %d of sequence %d is at position %d; its sequence continues at %d", who,
                                i, q, b.pos[i], expect);
        per[q].push_back(i);
        if (b.logits[i]) out_slot[i] = n_out++;
    }
    // every wanted row is written by its round (no fill first: a step's
    // logits are read back straight into the caller's vector); rows a failed
    // round left unwritten are zeros
    const size_t V = (size_t)hp.n_vocab;
    logits->resize((size_t)n_out * V);
    std::vector<uint8_t> written((size_t)n_out, 0);
    auto fail = [&](tg_status st) {
        for (size_t i = 0; i < written.size(); i++)
            if (!written[i]) std::fill(logits->begin() + (long)(i * V), logits->begin() + (long)((i + 1) * V), 0.0f);
        return st;
    };
    for (size_t r0 = 0;; r0 += (size_t)s->n_ubatch) {
        std::vector<std::vector<int>> idx(s->n_seq);
        bool any = false;
        for (int q = 0; q < s->n_seq; q++)
            if (per[q].size() > r0) {
                const size_t r1 = std::min(per[q].size(), r0 + (size_t)s->n_ubatch);
                idx[q].assign(per[q].begin() + (long)r0, per[q].begin() + (long)r1);
                any = true;
            }
        if (!any) return TG_OK;
        tg_status st = run_round(s, idx, b, out_slot, logits, &written, who);
        if (st != TG_OK) return fail(st);
    }
}

tg_status session_decode(session *s, const batch &b, std::vector<float> *logits) {
    return decode(s, b, logits, "session_decode");
}

tg_status session_eval(session *s, int seq0, int n, const int32_t *tokens, int T, bool all_logits,
                       std::vector<float> *logits) {
    if (!s || !tokens || !logits) return tg_set_error(TG_ERR_ARG, "[session_eval] NULL argument");
    // seq0 + n and the positions n_past + t are formed only once they are known to fit an int
    if (n < 1 || seq0 < 0 || seq0 > s->n_seq - n || T < 1)
        return tg_set_error(TG_ERR_ARG, "[session_eval] sequences [%d, %lld) or T = %d invalid for %d sequences", seq0,
                            (long long)seq0 + n, T, s->n_seq);
    if (T > s->n_ctx)
        return tg_set_error(TG_ERR_ARG, "[session_eval] %d tokens per sequence exceed the context of %d", T, s->n_ctx);
    batch bt;
    for (int b = 0; b < n; b++)
        for (int t = 0; t < T; t++)
            bt.add(tokens[(size_t)b * T + t], s->n_past[seq0 + b] + t, seq0 + b, all_logits || t == T - 1);
    return decode(s, bt, logits, "session_eval");
}

// ---------------------------------------------------------------------------
// sequence operations

static bool has_recurrent(const session *s) {
    for (tg_tensor *t : s->state)
        if (t) return true;
    return false;
}

// Forget sequence q: its state zeroed (a fresh start), its length 0. Its KV
// rows are left: no query reads a row at or past its sequence's length. The
// length is 0 even when zeroing fails (the backend's write; the status says
// so, its message has the tensor call's prefix: callers wrap it).
static tg_status clear_seq(session *s, int q) {
    tg_status st = TG_OK;
    for (tg_tensor *t : s->state)
        if (t && st == TG_OK) st = zero_sequence(t, q);
    s->n_past[q] = 0;
    s->tokens[q].clear();
    s->snap_pos[q] = -1;
    return st;
}

// Copy sequence src's slice of per-sequence tensor a into dst's slice of b
// (the same shape), first `bytes` of it, through the host.
static tg_status copy_slice(tg_tensor *a, int src, tg_tensor *b, int dst, size_t bytes) {
    std::vector<char> tmp(bytes);
    tg_status st = tg_tensor_get(a, tmp.data(), tg_nb(a, 3) * (size_t)src, bytes);
    return st == TG_OK ? tg_tensor_set(b, tmp.data(), tg_nb(b, 3) * (size_t)dst, bytes) : st;
}

static tg_status check_seq(const session *s, int seq, bool all_ok, const char *who) {
    if (!s) return tg_set_error(TG_ERR_ARG, "[%s] session is NULL", who);
    if ((seq < 0 && !(all_ok && seq == -1)) || seq >= s->n_seq)
        return tg_set_error(TG_ERR_ARG, "[%s] sequence %d outside [0, %d)%s", who, seq, s->n_seq,
                            all_ok ? " (or -1: all)" : "");
    return TG_OK;
}

// Cut sequence q to its first p0 tokens.
static tg_status truncate_seq(session *s, int q, int p0) {
    if (p0 >= s->n_past[q]) return TG_OK;
    if (!has_recurrent(s) || p0 == 0) {
        if (p0 == 0) {
            const tg_status st = clear_seq(s, q);
            return st == TG_OK ? TG_OK
                               : tg_set_error(st, "[session_seq_rm] sequence %d: zeroing its state failed (its length "
                                                  "is now 0): %s", q, tg_last_error());
        }
        s->n_past[q] = p0;
        s->tokens[q].resize((size_t)p0);
        return TG_OK;
    }
    // the recurrent state cannot be rewound: run the kept tokens again, from
    // the checkpoint when it is at or before p0, else from zero
    std::vector<int32_t> keep(s->tokens[q].begin(), s->tokens[q].begin() + p0);
    const int from = s->snap_pos[q] >= 0 && s->snap_pos[q] <= p0 ? s->snap_pos[q] : 0;
    tg_status st = TG_OK;
    if (from > 0) {
        for (int il = 0; il < s->m->hp.n_layer && st == TG_OK; il++)
            if (s->snap[il]) st = copy_slice(s->snap[il], q, s->state[il], q, tg_nb(s->state[il], 3));
        s->n_past[q] = from;
        s->tokens[q].resize((size_t)from);
    } else {
        st = clear_seq(s, q);
    }
    batch b;
    for (int t = from; t < p0; t++) b.add(keep[t], t, q, false);
    std::vector<float> unused;
    if (st == TG_OK && b.size() > 0) st = decode(s, b, &unused, "session_seq_rm");
    s->n_replayed += b.size();
    if (st != TG_OK) {
        clear_seq(s, q);  // a half-replayed sequence is worse than an empty one
        return tg_set_error(st, "[session_seq_rm] sequence %d: re-evaluating its first %d tokens failed (the "
                                "sequence is now empty): %s", q, p0, tg_last_error());
    }
    return TG_OK;
}

tg_status session_seq_checkpoint(session *s, int seq) {
    tg_status st = check_seq(s, seq, false, "session_seq_checkpoint");
    if (st != TG_OK || !has_recurrent(s)) return st;
    bool any = false;
    for (tg_tensor *t : s->snap) any |= t != nullptr;
    if (!any)
        return tg_set_error(TG_ERR_ARG, "[session_seq_checkpoint] the session was made without checkpoints "
                                        "(session_params.checkpoints)");
    for (int il = 0; il < s->m->hp.n_layer && st == TG_OK; il++)
        if (s->snap[il]) st = copy_slice(s->state[il], seq, s->snap[il], seq, tg_nb(s->state[il], 3));
    s->snap_pos[seq] = st == TG_OK ? s->n_past[seq] : -1;
    return st == TG_OK ? TG_OK : tg_set_error(st, "[session_seq_checkpoint] %s", tg_last_error());
}

// Remove [p0, e) of sequence q, e < its length: cut it to p0, then evaluate
// the tokens that followed the range again at positions p0, p0 + 1, ... (the
// cache rows are positions, so a hole cannot stay: the sequence becomes the
// one in which the removed tokens were never evaluated).
static tg_status remove_range(session *s, int q, int p0, int e) {
    const std::vector<int32_t> tail(s->tokens[q].begin() + e, s->tokens[q].end());
    tg_status st = truncate_seq(s, q, p0);
    if (st != TG_OK) return st;
    batch b;
    for (size_t i = 0; i < tail.size(); i++) b.add(tail[i], p0 + (int)i, q, false);
    std::vector<float> unused;
    st = decode(s, b, &unused, "session_seq_rm");
    s->n_replayed += b.size();
    if (st != TG_OK) {
        clear_seq(s, q);
        return tg_set_error(st, "[session_seq_rm] sequence %d: re-evaluating the %d tokens after [%d, %d) failed "
                                "(the sequence is now empty): %s", q, (int)tail.size(), p0, e, tg_last_error());
    }
    return TG_OK;
}

tg_status session_seq_rm(session *s, int seq, int p0, int p1) {
    tg_status st = check_seq(s, seq, true, "session_seq_rm");
    if (st != TG_OK) return st;
    if (p0 < 0) p0 = 0;
    const int q0 = seq < 0 ? 0 : seq, q1 = seq < 0 ? s->n_seq : seq + 1;
    for (int q = q0; q < q1 && st == TG_OK; q++) {
        const int len = s->n_past[q], e = p1 < 0 || p1 > len ? len : p1;
        if (p0 >= e) continue;
        st = e == len ? truncate_seq(s, q, p0) : remove_range(s, q, p0, e);
    }
    return st;
}

tg_status session_seq_cp(session *s, int src, int dst) {
    tg_status st = check_seq(s, src, false, "session_seq_cp");
    if (st == TG_OK) st = check_seq(s, dst, false, "session_seq_cp");
    if (st != TG_OK || src == dst) return st;
    const int len = s->n_past[src];
    for (int il = 0; il < s->m->hp.n_layer && st == TG_OK; il++) {
        if (s->state[il]) {
            st = copy_slice(s->state[il], src, s->state[il], dst, tg_nb(s->state[il], 3));
            if (st == TG_OK && s->snap[il] && s->snap_pos[src] >= 0)
                st = copy_slice(s->snap[il], src, s->snap[il], dst, tg_nb(s->snap[il], 3));
        } else {
            st = copy_slice(s->k_cache[il], src, s->k_cache[il], dst, tg_nb(s->k_cache[il], 2) * (size_t)len);
            if (st == TG_OK)
                st = copy_slice(s->v_cache[il], src, s->v_cache[il], dst, tg_nb(s->v_cache[il], 2) * (size_t)len);
        }
    }
    if (st != TG_OK) {
        clear_seq(s, dst);
        return tg_set_error(st, "[session_seq_cp] %d -> %d failed (sequence %d is now empty): %s", src, dst, dst,
                            tg_last_error());
    }
    s->n_past[dst] = len;
    s->tokens[dst] = s->tokens[src];
    s->snap_pos[dst] = s->snap_pos[src];
    return TG_OK;
}

tg_status session_seq_keep(session *s, int seq) {
    tg_status st = check_seq(s, seq, false, "session_seq_keep");
    if (st != TG_OK) return st;
    for (int q = 0; q < s->n_seq; q++)  // every other sequence emptied, the first failure kept
        if (q != seq) {
            const tg_status sq = clear_seq(s, q);
            if (st == TG_OK) st = sq;
        }
    return st == TG_OK ? TG_OK
                       : tg_set_error(st, "[session_seq_keep] zeroing another sequence's state failed: %s",
                                      tg_last_error());
}

tg_status session_clear(session *s) {
    tg_status st = check_seq(s, -1, true, "session_clear");
    if (st != TG_OK) return st;
    for (int q = 0; q < s->n_seq; q++) {  // every sequence emptied, the first failure kept
        const tg_status sq = clear_seq(s, q);
        if (st == TG_OK) st = sq;
    }
    return st == TG_OK ? TG_OK : tg_set_error(st, "[session_clear] zeroing a sequence's state failed: %s", tg_last_error());
}

// ---------------------------------------------------------------------------
// tokenizer (the sampler is in sampler.cpp)

std::vector<int32_t> tokenize(const std::string &text, bool add_bos) {
    std::vector<int32_t> t;
    if (add_bos) t.push_back(256);
    for (unsigned char c : text) t.push_back(c);
    return t;
}

std::string detokenize(int32_t token) { return token >= 0 && token < 256 ? std::string(1, (char)token) : ""; }

}  // namespace tgm
