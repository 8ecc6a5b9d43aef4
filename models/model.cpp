// model.cpp - load a llama or hybrid model from GGUF onto a backend.
#include "model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <memory>

namespace tgm {

namespace {

// errors go to tinygml's own message slot (tg_last_error)
#define fail tg_set_error

struct gguf_closer {
    void operator()(tg_gguf *g) const { tg_gguf_close(g); }
};
using gguf_ptr = std::unique_ptr<tg_gguf, gguf_closer>;

struct loader {
    tg_gguf *g;
    std::string arch;

    // integer key under the architecture's prefix, in [lo, hi]; def < 0: required
    tg_status get_int(const char *suffix, int *out, long long def, long long lo, long long hi) {
        std::string key = arch + "." + suffix;
        int64_t v;
        if (tg_gguf_find_key(g, key.c_str()) < 0) {
            if (def < 0) return fail(TG_ERR_FORMAT, "[model_load] missing key '%s'", key.c_str());
            *out = (int)def;
            return TG_OK;
        }
        if (tg_gguf_get_i64(g, key.c_str(), &v) != TG_OK)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s': %s", key.c_str(), tg_last_error());
        if (v < lo || v > hi)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s' = %lld outside [%lld, %lld]", key.c_str(), (long long)v,
                        lo, hi);
        *out = (int)v;
        return TG_OK;
    }
    tg_status get_float(const char *suffix, float *out, float def) {
        std::string key = arch + "." + suffix;
        if (tg_gguf_find_key(g, key.c_str()) < 0) {
            *out = def;
            return TG_OK;
        }
        if (tg_gguf_get_f32(g, key.c_str(), out) != TG_OK)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s': %s", key.c_str(), tg_last_error());
        if (!std::isfinite(*out) || *out <= 0.0f)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s' = %g must be finite and > 0", key.c_str(), *out);
        return TG_OK;
    }
};

#define TRY(expr)                          \
    do {                                   \
        tg_status s_ = (expr);             \
        if (s_ != TG_OK) return s_;        \
    } while (0)

tg_status read_hparams(loader &L, hparams &hp) {
    const char *a = nullptr;
    if (tg_gguf_get_str(L.g, "general.architecture", &a) != TG_OK)
        return fail(TG_ERR_FORMAT, "[model_load] general.architecture: %s", tg_last_error());
    L.arch = a;
    if (L.arch == "llama")
        hp.kind = arch::llama;
    else if (L.arch == "tghybrid")
        hp.kind = arch::hybrid;
    else
        return fail(TG_ERR_UNSUPPORTED, "[model_load] architecture '%s' is not supported (llama, tghybrid)", a);
    hp.arch_name = L.arch;
    TRY(L.get_int("context_length", &hp.n_ctx, -1, 1, 1 << 20));
    TRY(L.get_int("embedding_length", &hp.n_embd, -1, 1, 1 << 16));
    TRY(L.get_int("block_count", &hp.n_layer, -1, 1, 4096));
    TRY(L.get_int("feed_forward_length", &hp.n_ff, -1, 1, 1 << 18));
    TRY(L.get_int("attention.head_count", &hp.n_head, -1, 1, 4096));
    TRY(L.get_int("attention.head_count_kv", &hp.n_head_kv, hp.n_head, 1, 4096));
    if (hp.n_embd % hp.n_head != 0)
        return fail(TG_ERR_FORMAT, "[model_load] head_count %d does not divide embedding_length %d", hp.n_head,
                    hp.n_embd);
    TRY(L.get_int("attention.key_length", &hp.head_dim, hp.n_embd / hp.n_head, 1, 4096));
    if (hp.head_dim % 2 != 0) return fail(TG_ERR_FORMAT, "[model_load] head dim %d is odd", hp.head_dim);
    if (hp.n_head % hp.n_head_kv != 0)
        return fail(TG_ERR_FORMAT, "[model_load] head_count_kv %d does not divide head_count %d", hp.n_head_kv,
                    hp.n_head);
    TRY(L.get_int("rope.dimension_count", &hp.n_rot, hp.head_dim, 2, hp.head_dim));
    if (hp.n_rot % 2 != 0) return fail(TG_ERR_FORMAT, "[model_load] rope.dimension_count %d is odd", hp.n_rot);
    TRY(L.get_float("rope.freq_base", &hp.rope_base, 10000.0f));
    TRY(L.get_float("attention.layer_norm_rms_epsilon", &hp.rms_eps, 1e-5f));
    TRY(L.get_int("vocab_size", &hp.n_vocab, 0, 1, 1 << 22));
    if (hp.kind == arch::hybrid) {
        TRY(L.get_int("full_attention_interval", &hp.attn_interval, -1, 1, 4096));
        TRY(L.get_int("ssm.head_count_k", &hp.ssm_hk, -1, 1, 4096));
        TRY(L.get_int("ssm.head_count_v", &hp.ssm_hv, -1, 1, 4096));
        TRY(L.get_int("ssm.head_dim_k", &hp.ssm_dk, -1, 1, 256));
        TRY(L.get_int("ssm.head_dim_v", &hp.ssm_dv, -1, 1, 256));
        if (hp.ssm_hv % hp.ssm_hk != 0)
            return fail(TG_ERR_FORMAT, "[model_load] ssm.head_count_k %d does not divide ssm.head_count_v %d",
                        hp.ssm_hk, hp.ssm_hv);
    }
    // BOS / EOS: absent keys keep 256 / 257; a present one must be a token id
    // of any integer type (checked against the vocabulary once it is known).
    // A value of another type or a negative one (int32 -1 for "none") is an
    // error, as in llama.cpp (its loader throws on a key of the wrong type),
    // not silently replaced by the default.
    const struct {
        const char *key;
        int *id;
    } special[] = {{"tokenizer.ggml.bos_token_id", &hp.bos}, {"tokenizer.ggml.eos_token_id", &hp.eos}};
    for (const auto &sp : special) {
        if (tg_gguf_find_key(L.g, sp.key) < 0) continue;
        int64_t v;
        if (tg_gguf_get_i64(L.g, sp.key, &v) != TG_OK)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s': %s", sp.key, tg_last_error());
        if (v < 0 || v > INT32_MAX)
            return fail(TG_ERR_FORMAT, "[model_load] key '%s' = %lld is not a token id (leave the key out for the "
                        "default, %d)", sp.key, (long long)v, *sp.id);
        *sp.id = (int)v;
    }
    return TG_OK;
}

// tinygml's tokenizer is byte-level (token = byte, models/README.md). A file
// that lists its vocabulary the way llama.cpp reads it ("gpt2": tokens,
// merges) must list exactly that one: the 256 byte tokens first, no merges.
// Files without a vocabulary ("tinygml-bytes", older files; "none", the
// synthetic models) are taken as byte-level, as before.
tg_status check_vocab(tg_gguf *g, const hparams &hp) {
    const char *model = nullptr;
    if (tg_gguf_find_key(g, "tokenizer.ggml.model") < 0) return TG_OK;
    if (tg_gguf_get_str(g, "tokenizer.ggml.model", &model) != TG_OK)
        return fail(TG_ERR_FORMAT, "[model_load] key 'tokenizer.ggml.model': %s", tg_last_error());
    if (strcmp(model, "gpt2") != 0) return TG_OK;
    uint64_t n_tok = 0, n_merges = 0;
    tg_gguf_type et;
    if (tg_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, nullptr) != TG_OK || et != TG_GGUF_STRING)
        return fail(TG_ERR_FORMAT, "[model_load] tokenizer 'gpt2' needs tokenizer.ggml.tokens, an array of strings");
    if (n_tok != (uint64_t)hp.n_vocab)
        return fail(TG_ERR_FORMAT, "[model_load] tokenizer.ggml.tokens has %llu entries, the vocabulary %d",
                    (unsigned long long)n_tok, hp.n_vocab);
    if (tg_gguf_find_key(g, "tokenizer.ggml.merges") >= 0 &&
        (tg_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges, nullptr) != TG_OK || et != TG_GGUF_STRING))
        return fail(TG_ERR_FORMAT, "[model_load] tokenizer.ggml.merges must be an array of strings");
    if (n_merges > 0)
        return fail(TG_ERR_UNSUPPORTED,
                    "[model_load] tokenizer 'gpt2' with %llu merges: tinygml's tokenizer is byte-level "
                    "(256 byte tokens, no merges)",
                    (unsigned long long)n_merges);
    for (int b = 0; b < 256 && b < hp.n_vocab; b++) {
        const char *text;
        if (tg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)b, &text) != TG_OK ||
            byte_token_text(b) != text)
            return fail(TG_ERR_UNSUPPORTED,
                        "[model_load] tokenizer 'gpt2': token %d is not byte 0x%02x's (tinygml's tokenizer is "
                        "byte-level: token b stands for byte b)",
                        b, b);
    }
    return TG_OK;
}

struct pending_tensor {
    tg_tensor *t;
    int64_t index;  // in the GGUF file, or -1 for derived data
    std::vector<float> derived;
};

// Declare the tensor `name` with the expected shape; its type is the file's.
tg_status want(tg_gguf *g, tg_context *ctx, std::vector<pending_tensor> &list, const std::string &name,
               std::vector<int64_t> shape, tg_tensor **out) {
    int64_t i = tg_gguf_find_tensor(g, name.c_str());
    if (i < 0) return fail(TG_ERR_FORMAT, "[model_load] missing tensor '%s'", name.c_str());
    const char *nm;
    tg_type type;
    int n_dims;
    int64_t ne[4];
    size_t nbytes;
    if (tg_gguf_tensor_info(g, i, &nm, &type, &n_dims, ne, &nbytes) != TG_OK)
        return fail(TG_ERR_FORMAT, "[model_load] tensor '%s': %s", name.c_str(), tg_last_error());
    if (type == TG_TYPE_I32) return fail(TG_ERR_FORMAT, "[model_load] tensor '%s' must be a float type", name.c_str());
    // matrices feed mul_mat or get_rows, which take quantized weights; vectors
    // (norms, biases, A_log) feed element-wise ops, which do not
    if (tg_type_is_quantized(type) && shape.size() < 2)
        return fail(TG_ERR_FORMAT, "[model_load] tensor '%s' is %s: only matrices may be quantized (vectors stay f32/f16)",
                    name.c_str(), tg_type_name(type));
    for (int d = 0; d < 4; d++) {
        int64_t expect = d < (int)shape.size() ? shape[d] : 1;
        int64_t got = d < n_dims ? ne[d] : 1;
        if (got != expect) {
            std::string es, gs;
            for (int k = 0; k < 4; k++) {
                es += std::to_string(k < (int)shape.size() ? shape[k] : 1) + (k < 3 ? "," : "");
                gs += std::to_string(k < n_dims ? ne[k] : 1) + (k < 3 ? "," : "");
            }
            return fail(TG_ERR_FORMAT, "[model_load] tensor '%s' has shape {%s}, expected {%s}", name.c_str(),
                        gs.c_str(), es.c_str());
        }
    }
    tg_tensor *t = tg_new_tensor(ctx, type, (int)shape.size(), shape.data());
    if (!t) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
    tg_set_name(t, name.c_str());
    list.push_back({t, i, {}});
    *out = t;
    return TG_OK;
}

// FNV-1a 64, the model identity's hash (and the state files' checksum).
struct fnv {
    uint64_t h = 1469598103934665603ull;
    void add(const void *p, size_t n) {
        const unsigned char *b = (const unsigned char *)p;
        for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    }
    template <typename T> void add(const T &v) { add(&v, sizeof v); }
};

// The model's identity for state files: architecture, hyperparameters, each
// tensor's name, type and shape, and, for the first, middle and last tensor, 3 x 64 sampled bytes of its data (head,
// middle, tail), so that another model or other weights of the same shape
// are told apart without hashing every weight.
uint64_t identity_of(const model &m, const std::vector<pending_tensor> &list, tg_gguf *g) {
    const hparams &hp = m.hp;
    fnv f;
    f.add(hp.arch_name.data(), hp.arch_name.size());
    for (int v : {hp.n_vocab, hp.n_ctx, hp.n_embd, hp.n_layer, hp.n_ff, hp.n_head, hp.n_head_kv, hp.head_dim,
                  hp.n_rot, hp.attn_interval, hp.ssm_hk, hp.ssm_hv, hp.ssm_dk, hp.ssm_dv, hp.bos, hp.eos})
        f.add(v);
    f.add(hp.rope_base);
    f.add(hp.rms_eps);
    for (const pending_tensor &p : list) {
        const char *nm = tg_get_name(p.t);
        f.add(nm, strlen(nm));
        f.add((int)tg_tensor_type(p.t));
        for (int d = 0; d < 4; d++) f.add(tg_ne(p.t, d));
        // weight bytes of three tensors only (the first, middle and last): each
        // sample faults in a readahead window of a mapped file, and a load must
        // not read the weights (tests: MappedModelRss)
        const size_t k = (size_t)(&p - list.data());
        if (k != 0 && k != list.size() / 2 && k + 1 != list.size()) continue;
        const size_t n = tg_nbytes(p.t);
        const unsigned char *data =
            (const unsigned char *)(p.index >= 0 ? tg_gguf_tensor_data(g, p.index) : p.derived.data());
        if (!data) continue;
        for (size_t at : {(size_t)0, n / 2, n > 64 ? n - 64 : 0}) f.add(data + at, std::min<size_t>(64, n - at));
    }
    return f.h;
}

// Give the file's tensors their bytes: used in place from the map (a host
// backend with a mapped file), else uploaded from the file's bytes, in pieces
// so that a device upload from a map touches a bounded window at a time.
tg_status place_weights(model &m, tg_gguf *g, tg_backend *be, std::vector<pending_tensor> &list,
                        const load_options &opt) {
    size_t file_size = 0;
    const char *base = (const char *)tg_gguf_file_data(g, &file_size);
    if (tg_gguf_is_mapped(g) && tg_backend_is_host(be)) {
        // read only: a PROT_READ map faults on a write, so tinygml refuses them
        m.buf = tg_backend_buffer_from_host_ptr(be, const_cast<char *>(base), file_size, true);
        if (!m.buf) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
        for (pending_tensor &p : list) {
            if (p.index < 0) continue;
            const char *data = (const char *)tg_gguf_tensor_data(g, p.index);
            if (!data) return fail(TG_ERR_FORMAT, "[model_load] no data for tensor '%s'", tg_get_name(p.t));
            if (tg_buffer_place(m.buf, p.t, (size_t)(data - base)) != TG_OK)
                return fail(TG_ERR_FORMAT, "[model_load] %s", tg_last_error());
            m.weight_bytes += tg_nbytes(p.t);
        }
        m.buf_derived = tg_backend_alloc(be, m.ctx);  // the derived tensors, not in the file
        if (!m.buf_derived) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
        m.weight_bytes += tg_buffer_size(m.buf_derived);
    } else {
        m.buf = tg_backend_alloc(be, m.ctx);
        if (!m.buf) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
        m.weight_bytes = tg_buffer_size(m.buf);
    }
    const size_t piece = opt.upload_piece ? opt.upload_piece : (size_t)64 << 20;
    for (pending_tensor &p : list) {
        if (p.index >= 0 && m.buf_derived) continue;  // in place
        const char *data = p.index >= 0 ? (const char *)tg_gguf_tensor_data(g, p.index)
                                        : (const char *)p.derived.data();
        if (!data) return fail(TG_ERR_FORMAT, "[model_load] no data for tensor '%s'", tg_get_name(p.t));
        const size_t n = tg_nbytes(p.t);
        for (size_t off = 0; off < n; off += piece)
            if (tg_tensor_set(p.t, data + off, off, std::min(piece, n - off)) != TG_OK)
                return fail(TG_ERR_BACKEND, "[model_load] %s", tg_last_error());
    }
    return TG_OK;
}

tg_status load_into(model &m, tg_gguf *g, tg_backend *be, const load_options &opt) {
    loader L{g, ""};
    hparams &hp = m.hp;
    TRY(read_hparams(L, hp));
    // vocab from the embedding when the key is absent
    int64_t ti = tg_gguf_find_tensor(g, "token_embd.weight");
    if (ti < 0) return fail(TG_ERR_FORMAT, "[model_load] missing tensor 'token_embd.weight'");
    if (hp.n_vocab == 0) {
        const char *nm;
        tg_type ty;
        int nd;
        int64_t ne[4];
        size_t nb;
        if (tg_gguf_tensor_info(g, ti, &nm, &ty, &nd, ne, &nb) != TG_OK || nd < 2 || ne[1] > (1 << 22))
            return fail(TG_ERR_FORMAT, "[model_load] cannot read the vocabulary size from token_embd.weight");
        hp.n_vocab = (int)ne[1];
    }
    if (hp.bos < 0 || hp.bos >= hp.n_vocab || hp.eos < 0 || hp.eos >= hp.n_vocab)
        return fail(TG_ERR_FORMAT, "[model_load] bos/eos ids %d/%d outside the vocabulary of %d", hp.bos, hp.eos,
                    hp.n_vocab);
    TRY(check_vocab(g, hp));

    const int n_tensors = 3 + hp.n_layer * 16;
    tg_init_params ip = {(size_t)n_tensors * tg_tensor_overhead() + 4096, nullptr, true};
    m.ctx = tg_init(ip);
    if (!m.ctx) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
    std::vector<pending_tensor> list;
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff;
    const int64_t QD = (int64_t)hp.n_head * hp.head_dim, KD = (int64_t)hp.n_head_kv * hp.head_dim;
    TRY(want(g, m.ctx, list, "token_embd.weight", {E, V}, &m.tok_embd));
    TRY(want(g, m.ctx, list, "output_norm.weight", {E}, &m.out_norm));
    TRY(want(g, m.ctx, list, "output.weight", {E, V}, &m.output));
    m.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; il++) {
        layer &l = m.layers[il];
        std::string p = "blk." + std::to_string(il) + ".";
        TRY(want(g, m.ctx, list, p + "attn_norm.weight", {E}, &l.attn_norm));
        if (hp.is_attention(il)) {
            TRY(want(g, m.ctx, list, p + "attn_q.weight", {E, QD}, &l.wq));
            TRY(want(g, m.ctx, list, p + "attn_k.weight", {E, KD}, &l.wk));
            TRY(want(g, m.ctx, list, p + "attn_v.weight", {E, KD}, &l.wv));
            TRY(want(g, m.ctx, list, p + "attn_output.weight", {QD, E}, &l.wo));
        } else {
            const int64_t HK = (int64_t)hp.ssm_hk * hp.ssm_dk, HV = (int64_t)hp.ssm_hv * hp.ssm_dv;
            TRY(want(g, m.ctx, list, p + "ssm_q.weight", {E, HK}, &l.ssm_q));
            TRY(want(g, m.ctx, list, p + "ssm_k.weight", {E, HK}, &l.ssm_k));
            TRY(want(g, m.ctx, list, p + "ssm_v.weight", {E, HV}, &l.ssm_v));
            TRY(want(g, m.ctx, list, p + "ssm_beta.weight", {E, hp.ssm_hv}, &l.ssm_beta));
            TRY(want(g, m.ctx, list, p + "ssm_alpha.weight", {E, hp.ssm_hv}, &l.ssm_alpha));
            TRY(want(g, m.ctx, list, p + "ssm_dt.bias", {hp.ssm_hv}, &l.ssm_dt_bias));
            TRY(want(g, m.ctx, list, p + "ssm_out.weight", {HV, E}, &l.ssm_out));
            tg_tensor *a_log;
            TRY(want(g, m.ctx, list, p + "ssm_a", {hp.ssm_hv}, &a_log));
            // the graph needs -exp(A_log): derive it once, in F32
            pending_tensor &pa = list.back();
            const void *src = tg_gguf_tensor_data(g, pa.index);
            std::vector<float> neg((size_t)hp.ssm_hv);
            for (int h = 0; h < hp.ssm_hv; h++) {
                float x;
                if (tg_tensor_type(a_log) == TG_TYPE_F32)
                    memcpy(&x, (const char *)src + 4 * h, 4);
                else {
                    uint16_t u;
                    memcpy(&u, (const char *)src + 2 * h, 2);
                    x = tg_tensor_type(a_log) == TG_TYPE_F16 ? tg_fp16_to_fp32(u) : tg_bf16_to_fp32(u);
                }
                neg[h] = -std::exp(x);
            }
            l.ssm_neg_exp_a = tg_new_tensor_1d(m.ctx, TG_TYPE_F32, hp.ssm_hv);
            if (!l.ssm_neg_exp_a) return fail(TG_ERR_OOM, "[model_load] %s", tg_last_error());
            tg_set_name(l.ssm_neg_exp_a, (p + "ssm_neg_exp_a").c_str());
            list.push_back({l.ssm_neg_exp_a, -1, neg});
        }
        TRY(want(g, m.ctx, list, p + "ffn_norm.weight", {E}, &l.ffn_norm));
        TRY(want(g, m.ctx, list, p + "ffn_gate.weight", {E, F}, &l.ffn_gate));
        TRY(want(g, m.ctx, list, p + "ffn_up.weight", {E, F}, &l.ffn_up));
        TRY(want(g, m.ctx, list, p + "ffn_down.weight", {F, E}, &l.ffn_down));
    }
    m.backend = be;
    TRY(place_weights(m, g, be, list, opt));
    m.identity = identity_of(m, list, g);
    return TG_OK;
}

}  // namespace

model *model_load(const char *path, tg_backend *be, const load_options &opt) {
    if (!path || !be) {
        fail(TG_ERR_ARG, "[model_load] %s is NULL", path ? "backend" : "path");
        return nullptr;
    }
    gguf_ptr g(opt.use_mmap ? tg_gguf_open_mmap(path) : tg_gguf_open(path));
    if (!g) {
        fail(TG_ERR_FORMAT, "[model_load] %s: %s", path, tg_last_error());
        return nullptr;
    }
    auto *m = new model();
    if (load_into(*m, g.get(), be, opt) != TG_OK) {
        model_free(m);
        return nullptr;
    }
    if (m->buf_derived) m->file = g.release();  // the weights live in the map: keep it
    return m;
}

std::string byte_token_text(int b) {
    if (b < 0 || b > 255) return "";
    // bytes that print (and are not space) stand for themselves; the other 68
    // take the code points from U+0100 on, in byte order (GPT-2's table)
    auto prints = [](int c) { return (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae; };
    int cp = b;
    if (!prints(b)) {
        cp = 0x100;
        for (int c = 0; c < b; c++) cp += !prints(c);
    }
    std::string s;
    if (cp < 0x80) {
        s += (char)cp;
    } else {  // two UTF-8 bytes cover U+0080..U+07FF
        s += (char)(0xc0 | (cp >> 6));
        s += (char)(0x80 | (cp & 0x3f));
    }
    return s;
}

void model_free(model *m) {
    if (!m) return;
    // buffers before the map they point into
    tg_buffer_free(m->buf);
    tg_buffer_free(m->buf_derived);
    tg_gguf_close(m->file);
    tg_free(m->ctx);
    delete m;
}

}  // namespace tgm
