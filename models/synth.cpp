// synth.cpp - random-weight llama GGUF files (see synth.h).
//
// Sampling: each value is one of 65,536 equiprobable levels of the target
// distribution: the N(0,1) quantiles at (i + 0.5) / 65536 (tails cut at about
// ±4.3σ), scaled, shifted and converted to the tensor's type once per
// tensor. Level i comes from 16 bits of a counter-based splitmix64 stream
// keyed by the seed and the tensor's name, so element j of a tensor is the
// same whatever the chunking or the other tensors (and the generator writes
// about a byte per nanosecond: 2.2 GB in seconds).
#include "synth.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

namespace tgm {

namespace {

const int kLevels = 1 << 16;

uint64_t mix64(uint64_t z) {  // splitmix64's output function
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
const uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t fnv1a(const std::string &s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// N(0,1) quantiles at (i + 0.5) / kLevels, by bisection on erfc (double).
const std::vector<double> &normal_levels() {
    static const std::vector<double> q = [] {
        std::vector<double> v(kLevels);
        for (int i = 0; i < kLevels / 2; i++) {
            const double p = (i + 0.5) / kLevels;  // < 0.5: a negative quantile
            double lo = -10.0, hi = 0.0;
            for (int it = 0; it < 64; it++) {
                double mid = 0.5 * (lo + hi);
                if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) lo = mid;
                else hi = mid;
            }
            v[i] = 0.5 * (lo + hi);
            v[kLevels - 1 - i] = -v[i];
        }
        return v;
    }();
    return q;
}

// The levels of offset + scale * N(0,1) as raw elements of one type.
struct level_table {
    tg_type type;
    double scale, offset;
    std::vector<uint16_t> h;  // F16 / BF16
    std::vector<float> f;     // F32
};

struct tensor_gen {
    const level_table *tab;
    uint64_t key;
};

template <typename T>
void fill_levels(const T *lv, uint64_t key, T *dst, uint64_t first, size_t count) {
    size_t i = 0;
    uint64_t e = first;
    while (i < count) {
        uint64_t word = mix64(key + ((e >> 2) + 1) * kGolden);
        for (unsigned k = (unsigned)(e & 3); k < 4 && i < count; k++, i++, e++)
            dst[i] = lv[(word >> (16 * k)) & 0xffff];
    }
}

tg_status fill_tensor(void *user, void *dst, size_t offset, size_t n) {
    const tensor_gen &g = *(const tensor_gen *)user;
    const size_t es = tg_type_size(g.tab->type);
    if (offset % es || n % es)
        return tg_set_error(TG_ERR_ARG, "[synth] piece [%zu, +%zu) splits an element", offset, n);
    if (g.tab->type == TG_TYPE_F32)
        fill_levels(g.tab->f.data(), g.key, (float *)dst, offset / es, n / es);
    else
        fill_levels(g.tab->h.data(), g.key, (uint16_t *)dst, offset / es, n / es);
    return TG_OK;
}

}  // namespace

bool synth_preset(const std::string &name, synth_config *c) {
    synth_config p;
    p.name = name;
    if (name == "0.26m") {
        // the defaults
    } else if (name == "125m") {
        p.n_embd = 768, p.n_layer = 12, p.n_head = 12, p.n_head_kv = 4, p.n_ff = 2048, p.n_vocab = 32000;
        p.n_ctx = 4096, p.wtype = TG_TYPE_F16;
    } else if (name == "1.1b") {
        p.n_embd = 2048, p.n_layer = 16, p.n_head = 32, p.n_head_kv = 8, p.n_ff = 8192, p.n_vocab = 32000;
        p.n_ctx = 4096, p.wtype = TG_TYPE_F16;
    } else {
        return false;
    }
    p.seed = c->seed;
    *c = p;
    return true;
}

tg_status synth_check(const synth_config &c) {
    struct {
        const char *what;
        long long v, lo, hi;
    } r[] = {{"n_embd", c.n_embd, 2, 1 << 16},       {"n_layer", c.n_layer, 1, 4096},
             {"n_head", c.n_head, 1, 4096},          {"n_head_kv", c.n_head_kv, 1, 4096},
             {"n_ff", c.n_ff, 1, 1 << 18},           {"n_vocab", c.n_vocab, 258, 1 << 22},
             {"ctx", c.n_ctx, 1, 1 << 20}};
    for (auto &e : r)
        if (e.v < e.lo || e.v > e.hi)
            return tg_set_error(TG_ERR_ARG, "[synth] %s = %lld outside [%lld, %lld]%s", e.what, e.v, e.lo, e.hi,
                                e.lo == 258 ? " (BOS 256 and EOS 257 are in the vocabulary)" : "");
    if (c.n_embd % c.n_head != 0)
        return tg_set_error(TG_ERR_ARG, "[synth] n_head %d does not divide n_embd %d", c.n_head, c.n_embd);
    if ((c.n_embd / c.n_head) % 2 != 0)
        return tg_set_error(TG_ERR_ARG, "[synth] head dim %d (n_embd / n_head) is odd", c.n_embd / c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        return tg_set_error(TG_ERR_ARG, "[synth] n_head_kv %d does not divide n_head %d", c.n_head_kv, c.n_head);
    if (c.wtype != TG_TYPE_F32 && c.wtype != TG_TYPE_F16 && c.wtype != TG_TYPE_BF16)
        return tg_set_error(TG_ERR_ARG, "[synth] matrix type must be f32, f16 or bf16");
    return TG_OK;
}

int64_t synth_n_params(const synth_config &c) {
    const int64_t E = c.n_embd, F = c.n_ff, V = c.n_vocab, KD = E / c.n_head * c.n_head_kv;
    return 2 * E * V + E + c.n_layer * (2 * E + 2 * E * E + 2 * E * KD + 3 * E * F);
}

tg_status synth_write(const synth_config &c, const char *path) {
    tg_status st = synth_check(c);
    if (st != TG_OK) return st;
    if (!path) return tg_set_error(TG_ERR_ARG, "[synth] path is NULL");
    std::unique_ptr<tg_gguf_writer, void (*)(tg_gguf_writer *)> w(tg_gguf_writer_new(), tg_gguf_writer_free);
    if (!w) return tg_set_error(TG_ERR_OOM, "[synth] %s", tg_last_error());
    const int E = c.n_embd, hd = c.n_embd / c.n_head;
    const uint32_t file_type = c.wtype == TG_TYPE_F32 ? 0 : c.wtype == TG_TYPE_F16 ? 1 : 32;  // llama_ftype
    const std::string name = "tinygml-synth-" + c.name;
    auto u32 = [&](const char *k, uint32_t v) { return st == TG_OK ? (st = tg_gguf_set_u32(w.get(), k, v)) : st; };
    auto f32 = [&](const char *k, float v) { return st == TG_OK ? (st = tg_gguf_set_f32(w.get(), k, v)) : st; };
    auto str = [&](const char *k, const char *v) { return st == TG_OK ? (st = tg_gguf_set_str(w.get(), k, v)) : st; };
    str("general.architecture", "llama");
    str("general.name", name.c_str());
    u32("general.file_type", file_type);
    u32("llama.context_length", (uint32_t)c.n_ctx);
    u32("llama.embedding_length", (uint32_t)E);
    u32("llama.block_count", (uint32_t)c.n_layer);
    u32("llama.feed_forward_length", (uint32_t)c.n_ff);
    u32("llama.rope.dimension_count", (uint32_t)hd);
    u32("llama.attention.head_count", (uint32_t)c.n_head);
    u32("llama.attention.head_count_kv", (uint32_t)c.n_head_kv);
    f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    f32("llama.rope.freq_base", 10000.0f);
    u32("llama.vocab_size", (uint32_t)c.n_vocab);
    str("tokenizer.ggml.model", "none");
    u32("tokenizer.ggml.bos_token_id", 256);
    u32("tokenizer.ggml.eos_token_id", 257);
    if (st != TG_OK) return st;

    // level tables, shared by the tensors of one (type, scale, offset)
    std::vector<std::unique_ptr<level_table>> tables;
    std::vector<std::unique_ptr<tensor_gen>> gens;
    const std::vector<double> &q = normal_levels();
    auto table = [&](tg_type type, double scale, double offset) -> const level_table * {
        for (auto &t : tables)
            if (t->type == type && t->scale == scale && t->offset == offset) return t.get();
        auto t = std::make_unique<level_table>();
        t->type = type, t->scale = scale, t->offset = offset;
        if (type == TG_TYPE_F32) t->f.resize(kLevels);
        else t->h.resize(kLevels);
        for (int i = 0; i < kLevels; i++) {
            float v = (float)(offset + scale * q[i]);
            if (type == TG_TYPE_F32) t->f[i] = v;
            else t->h[i] = type == TG_TYPE_F16 ? tg_fp32_to_fp16(v) : tg_fp32_to_bf16(v);
        }
        tables.push_back(std::move(t));
        return tables.back().get();
    };
    auto add = [&](const std::string &tn, int64_t ne0, int64_t ne1) {
        if (st != TG_OK) return;
        const bool matrix = ne1 > 0;
        auto g = std::make_unique<tensor_gen>();
        g->tab = matrix ? table(c.wtype, 1.0 / std::sqrt((double)ne0), 0.0) : table(TG_TYPE_F32, 0.1, 1.0);
        g->key = mix64(c.seed * kGolden ^ fnv1a(tn));
        const int64_t ne[2] = {ne0, ne1};
        st = tg_gguf_add_tensor_fill(w.get(), tn.c_str(), g->tab->type, matrix ? 2 : 1, ne, fill_tensor, g.get());
        gens.push_back(std::move(g));
    };
    const int64_t QD = (int64_t)hd * c.n_head, KD = (int64_t)hd * c.n_head_kv;
    add("token_embd.weight", E, c.n_vocab);
    for (int il = 0; il < c.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        add(p + "attn_norm.weight", E, 0);
        add(p + "attn_q.weight", E, QD);
        add(p + "attn_k.weight", E, KD);
        add(p + "attn_v.weight", E, KD);
        add(p + "attn_output.weight", QD, E);
        add(p + "ffn_norm.weight", E, 0);
        add(p + "ffn_gate.weight", E, c.n_ff);
        add(p + "ffn_up.weight", E, c.n_ff);
        add(p + "ffn_down.weight", c.n_ff, E);
    }
    add("output_norm.weight", E, 0);
    add("output.weight", E, c.n_vocab);
    if (st != TG_OK) return st;
    return tg_gguf_write(w.get(), path);
}

}  // namespace tgm
