// toy_model.h - random toy models (llama or hybrid) as GGUF writers, for
// model tests and the state fuzzer (no GoogleTest here: tests/fuzz uses it).
#pragma once
#include <cmath>

#include <random>
#include <string>
#include <vector>

#include "tinygml.h"

namespace tgt {

struct toy_config {
    bool hybrid = false;
    int n_vocab = 258, n_ctx = 64, n_embd = 32, n_layer = 4, n_ff = 48, n_head = 4, n_head_kv = 2;
    int hk = 2, hv = 4, dk = 8, dv = 8, interval = 4;
    tg_type wtype = TG_TYPE_F32;
};

// Fill a writer with a random model of cfg; `skip` names one tensor to leave
// out and `bad_shape` one to write with a wrong shape (for bad-file tests).
inline tg_gguf_writer *toy_model_writer(const toy_config &c, unsigned seed, const std::string &skip = "",
                                        const std::string &bad_shape = "") {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    tg_gguf_writer *w = tg_gguf_writer_new();
    const std::string a = c.hybrid ? "tghybrid" : "llama";
    tg_gguf_set_str(w, "general.architecture", a.c_str());
    tg_gguf_set_u32(w, (a + ".context_length").c_str(), (uint32_t)c.n_ctx);
    tg_gguf_set_u32(w, (a + ".embedding_length").c_str(), (uint32_t)c.n_embd);
    tg_gguf_set_u32(w, (a + ".block_count").c_str(), (uint32_t)c.n_layer);
    tg_gguf_set_u32(w, (a + ".feed_forward_length").c_str(), (uint32_t)c.n_ff);
    tg_gguf_set_u32(w, (a + ".attention.head_count").c_str(), (uint32_t)c.n_head);
    tg_gguf_set_u32(w, (a + ".attention.head_count_kv").c_str(), (uint32_t)c.n_head_kv);
    tg_gguf_set_f32(w, (a + ".attention.layer_norm_rms_epsilon").c_str(), 1e-5f);
    tg_gguf_set_f32(w, (a + ".rope.freq_base").c_str(), 10000.0f);
    tg_gguf_set_u32(w, (a + ".vocab_size").c_str(), (uint32_t)c.n_vocab);
    if (c.hybrid) {
        tg_gguf_set_u32(w, "tghybrid.full_attention_interval", (uint32_t)c.interval);
        tg_gguf_set_u32(w, "tghybrid.ssm.head_count_k", (uint32_t)c.hk);
        tg_gguf_set_u32(w, "tghybrid.ssm.head_count_v", (uint32_t)c.hv);
        tg_gguf_set_u32(w, "tghybrid.ssm.head_dim_k", (uint32_t)c.dk);
        tg_gguf_set_u32(w, "tghybrid.ssm.head_dim_v", (uint32_t)c.dv);
    }
    auto add = [&](const std::string &name, std::vector<int64_t> ne, float scale, float offset = 0.0f) {
        if (name == skip) return;
        if (name == bad_shape) ne[0] += 1;
        size_t n = 1;
        for (int64_t x : ne) n *= (size_t)x;
        bool is_weight = ne.size() > 1;
        tg_type t = is_weight ? c.wtype : TG_TYPE_F32;
        std::vector<float> f(n);
        for (auto &x : f) x = offset + scale * nd(rng);
        std::vector<uint16_t> h(n);
        const void *data = f.data();
        if (t != TG_TYPE_F32) {
            for (size_t i = 0; i < n; i++) h[i] = t == TG_TYPE_F16 ? tg_fp32_to_fp16(f[i]) : tg_fp32_to_bf16(f[i]);
            data = h.data();
        }
        tg_gguf_add_tensor(w, name.c_str(), t, (int)ne.size(), ne.data(), data);
    };
    const int64_t E = c.n_embd, hd = c.n_embd / c.n_head;
    const float ws = 1.0f / std::sqrt((float)E);
    add("token_embd.weight", {E, c.n_vocab}, 1.0f);
    add("output_norm.weight", {E}, 0.1f, 1.0f);
    add("output.weight", {E, c.n_vocab}, ws);
    for (int il = 0; il < c.n_layer; il++) {
        std::string p = "blk." + std::to_string(il) + ".";
        add(p + "attn_norm.weight", {E}, 0.1f, 1.0f);
        add(p + "ffn_norm.weight", {E}, 0.1f, 1.0f);
        bool attn = !c.hybrid || (il + 1) % c.interval == 0;
        if (attn) {
            add(p + "attn_q.weight", {E, c.n_head * hd}, ws);
            add(p + "attn_k.weight", {E, c.n_head_kv * hd}, ws);
            add(p + "attn_v.weight", {E, c.n_head_kv * hd}, ws);
            add(p + "attn_output.weight", {c.n_head * hd, E}, ws);
        } else {
            add(p + "ssm_q.weight", {E, c.hk * c.dk}, ws);
            add(p + "ssm_k.weight", {E, c.hk * c.dk}, ws);
            add(p + "ssm_v.weight", {E, c.hv * c.dv}, ws);
            add(p + "ssm_beta.weight", {E, c.hv}, ws);
            add(p + "ssm_alpha.weight", {E, c.hv}, ws);
            add(p + "ssm_a", {c.hv}, 0.5f);
            add(p + "ssm_dt.bias", {c.hv}, 0.5f);
            add(p + "ssm_out.weight", {c.hv * c.dv, E}, ws);
        }
        add(p + "ffn_gate.weight", {E, c.n_ff}, ws);
        add(p + "ffn_up.weight", {E, c.n_ff}, ws);
        add(p + "ffn_down.weight", {c.n_ff, E}, 1.0f / std::sqrt((float)c.n_ff));
    }
    return w;
}

}  // namespace tgt
