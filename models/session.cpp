// session.cpp - KV caches, recurrent states and the forward graph.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model.h"

namespace tgm {

session *session_new(const model *m, int n_seq, int n_ctx) {
    if (!m) {
        tg_set_error(TG_ERR_ARG, "[session_new] model is NULL");
        return nullptr;
    }
    if (n_seq < 1 || n_seq > 4096 || n_ctx < 1 || n_ctx > m->hp.n_ctx) {
        tg_set_error(TG_ERR_ARG, "[session_new] n_seq %d must be in [1, 4096] and n_ctx %d in [1, %d]", n_seq, n_ctx,
                     m->hp.n_ctx);
        return nullptr;
    }
    const hparams &hp = m->hp;
    auto *s = new session();
    s->m = m;
    s->n_seq = n_seq;
    s->n_ctx = n_ctx;
    s->n_past.assign(n_seq, 0);
    tg_init_params ip = {(size_t)(3 * hp.n_layer + 4) * tg_tensor_overhead() + 4096, nullptr, true};
    s->ctx = tg_init(ip);
    s->k_cache.assign(hp.n_layer, nullptr);
    s->v_cache.assign(hp.n_layer, nullptr);
    s->state.assign(hp.n_layer, nullptr);
    bool ok = s->ctx != nullptr;
    for (int il = 0; ok && il < hp.n_layer; il++) {
        if (hp.is_attention(il)) {
            s->k_cache[il] = tg_new_tensor_4d(s->ctx, TG_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx, n_seq);
            s->v_cache[il] = tg_new_tensor_4d(s->ctx, TG_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx, n_seq);
            ok = s->k_cache[il] && s->v_cache[il];
        } else {
            s->state[il] = tg_new_tensor_4d(s->ctx, TG_TYPE_F32, hp.ssm_dk, hp.ssm_dv, hp.ssm_hv, n_seq);
            ok = s->state[il] != nullptr;
        }
    }
    if (ok) {
        s->inputs = tg_new_tensor_1d(s->ctx, TG_TYPE_I32, 2 * (int64_t)n_ctx * n_seq);
        ok = s->inputs != nullptr;
    }
    if (ok) s->buf = tg_backend_alloc(m->backend, s->ctx);
    if (!ok || !s->buf || tg_buffer_clear(s->buf, 0) != TG_OK) {
        tg_set_error(TG_ERR_OOM, "[session_new] %s", tg_last_error());
        session_free(s);
        return nullptr;
    }
    s->state_bytes = tg_buffer_size(s->buf);
    return s;
}

struct session_graph {
    int seq0, n, T;
    bool all_logits;
    tg_context *ctx;  // the graph's tensors (metadata only: views of the slots, op results)
    tg_graph *g;
    tg_tensor *out;  // logits {V, T or 1, n}
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
    for (int il = 0; il < s->m->hp.n_layer; il++)
        for (tg_tensor *t : {s->k_cache[il], s->v_cache[il], s->state[il]})
            if (t) {
                tg_status st = zero_sequence(t, seq);
                if (st != TG_OK) return st;
            }
    s->n_past[seq] = 0;
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
    tg_tensor *pos;  // {T, n} I32

    tg_tensor *norm(tg_tensor *x, tg_tensor *w) { return tg_mul(ctx, tg_rms_norm(ctx, x, hp.rms_eps), w); }

    // x {E, T, n} -> {E, T, n}
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

    tg_tensor *delta(int il, tg_tensor *xn) {
        const layer &l = m.layers[il];
        tg_tensor *q = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_q, xn), hp.ssm_dk, hp.ssm_hk, T, n);
        tg_tensor *k = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_k, xn), hp.ssm_dk, hp.ssm_hk, T, n);
        tg_tensor *v = tg_reshape_4d(ctx, tg_mul_mat(ctx, l.ssm_v, xn), hp.ssm_dv, hp.ssm_hv, T, n);
        tg_tensor *beta = tg_sigmoid(ctx, tg_mul_mat(ctx, l.ssm_beta, xn));  // {Hv, T, n}
        tg_tensor *g = tg_mul(ctx, tg_softplus(ctx, tg_add(ctx, tg_mul_mat(ctx, l.ssm_alpha, xn), l.ssm_dt_bias)),
                              l.ssm_neg_exp_a);  // log gate, {Hv, T, n}
        tg_delta_params dp = {TG_DELTA_GATED_DELTA, TG_GATE_LOG, 1.0f / std::sqrt((float)hp.ssm_dk), true,
                              TG_DELTA_ALGO_AUTO};
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

    // tokens {T, n} I32 -> logits {V, T or 1, n}
    tg_tensor *forward(tg_tensor *tokens, bool all_logits) {
        tg_tensor *x = tg_get_rows(ctx, m.tok_embd, tokens);  // {E, T, n}
        for (int il = 0; il < hp.n_layer; il++) {
            tg_tensor *xn = norm(x, m.layers[il].attn_norm);
            x = tg_add(ctx, x, hp.is_attention(il) ? attention(il, xn) : delta(il, xn));
            x = tg_add(ctx, x, ffn(il, norm(x, m.layers[il].ffn_norm)));
        }
        if (!all_logits && T > 1)  // only the last token of each sequence
            x = tg_view_3d(ctx, x, hp.n_embd, 1, n, tg_nb(x, 1), tg_nb(x, 2), tg_nb(x, 1) * (size_t)(T - 1));
        return tg_mul_mat(ctx, m.output, norm(x, m.out_norm));
    }
};

}  // namespace

// Build the forward graph of one batch shape. Inputs are views of the
// session's persistent input slot (token ids, then positions): a step
// writes them with tg_tensor_set, so the graph does not depend on the values.
static session_graph *build_graph(session *s, int seq0, int n, int T, bool all_logits) {
    const hparams &hp = s->m->hp;
    const size_t n_nodes = (size_t)hp.n_layer * 40 + 64;
    tg_init_params ip = {n_nodes * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true};
    tg_context *ctx = tg_init(ip);
    if (!ctx) return nullptr;
    tg_tensor *tok = tg_view_2d(ctx, s->inputs, T, n, (size_t)T * 4, 0);
    tg_tensor *pv = tg_view_2d(ctx, s->inputs, T, n, (size_t)T * 4, (size_t)n * T * 4);
    builder bld{*s->m, hp, *s, ctx, seq0, n, T, pv};
    tg_tensor *out = tok && pv ? bld.forward(tok, all_logits) : nullptr;
    tg_graph *g = out ? tg_graph_new(ctx) : nullptr;
    if (!g || tg_graph_expand(g, out) != TG_OK) {
        tg_set_error(TG_ERR_ARG, "[session_eval] cannot build the graph: %s", tg_last_error());
        tg_free(ctx);
        return nullptr;
    }
    auto *sg = new session_graph{seq0, n, T, all_logits, ctx, g, out, 0};
    return sg;
}

// The kept graph of this shape, built (and kept, dropping the least recently
// used beyond session_max_graphs) when there is none.
static session_graph *graph_for(session *s, int seq0, int n, int T, bool all_logits) {
    for (session_graph *sg : s->graphs)
        if (sg->seq0 == seq0 && sg->n == n && sg->T == T && sg->all_logits == all_logits) {
            sg->last_use = ++s->clock;
            return sg;
        }
    session_graph *sg = build_graph(s, seq0, n, T, all_logits);
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
    session_graph *sg = s->reuse_graphs ? graph_for(s, 0, s->n_seq, T_max, true) : build_graph(s, 0, s->n_seq, T_max, true);
    if (!sg) return tg_set_error(TG_ERR_OOM, "[session_reserve] %s", tg_last_error());
    tg_status st = tg_backend_reserve(s->m->backend, sg->g);
    if (st != TG_OK) st = tg_set_error(st, "[session_reserve] %s", tg_last_error());
    if (!s->reuse_graphs) free_graph(sg);
    return st;
}

tg_status session_eval(session *s, int seq0, int n, const int32_t *tokens, int T, bool all_logits,
                       std::vector<float> *logits) {
    if (!s || !tokens || !logits) return tg_set_error(TG_ERR_ARG, "[session_eval] NULL argument");
    if (n < 1 || seq0 < 0 || seq0 + n > s->n_seq || T < 1)
        return tg_set_error(TG_ERR_ARG, "[session_eval] sequences [%d, %d) or T = %d invalid for %d sequences", seq0,
                            seq0 + n, T, s->n_seq);
    const hparams &hp = s->m->hp;
    for (int b = 0; b < n; b++)
        if (s->n_past[seq0 + b] + T > s->n_ctx)
            return tg_set_error(TG_ERR_ARG, "[session_eval] sequence %d: %d + %d tokens exceed the context of %d",
                                seq0 + b, s->n_past[seq0 + b], T, s->n_ctx);
    for (int i = 0; i < n * T; i++)
        if (tokens[i] < 0 || tokens[i] >= hp.n_vocab)
            return tg_set_error(TG_ERR_ARG, "[session_eval] token id %d at %d outside [0, %d)", tokens[i], i,
                                hp.n_vocab);
    // token ids, then positions: the graph's inputs, one upload
    const size_t nt = (size_t)n * T;
    std::vector<int32_t> in(2 * nt);
    memcpy(in.data(), tokens, nt * 4);
    for (int b = 0; b < n; b++)
        for (int t = 0; t < T; t++) in[nt + (size_t)b * T + t] = s->n_past[seq0 + b] + t;

    session_graph *sg = s->reuse_graphs ? graph_for(s, seq0, n, T, all_logits) : build_graph(s, seq0, n, T, all_logits);
    if (!sg) return tg_set_error(TG_ERR_OOM, "[session_eval] %s", tg_last_error());
    tg_status st = tg_tensor_set(s->inputs, in.data(), 0, in.size() * 4);
    if (st == TG_OK) st = tg_graph_compute(s->m->backend, sg->g);
    if (st == TG_OK) {
        logits->resize((size_t)tg_nelements(sg->out));
        st = tg_tensor_get(sg->out, logits->data(), 0, logits->size() * 4);
    }
    if (st == TG_OK)
        for (int b = 0; b < n; b++) s->n_past[seq0 + b] += T;
    else
        st = tg_set_error(st, "[session_eval] %s", tg_last_error());
    if (!s->reuse_graphs) free_graph(sg);
    return st;
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
