// test_synth.cpp - tinygml-synth's random llamas (models/synth.h) and the
// GGUF writer's streamed tensors (tg_gguf_add_tensor_fill): keys, names,
// shapes and types as llama.cpp writes them, weight statistics, bytes fixed
// by the seed, loading and one forward step, and fill's contract.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model.h"
#include "synth.h"
#include "test_util.h"

namespace {

std::string temp_path(const std::string &tag) {
    return ::testing::TempDir() + "tg_synth_" + tag + "_" + std::to_string(getpid()) + ".gguf";
}

std::vector<char> file_bytes(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct gguf_file {
    tg_gguf *g;
    explicit gguf_file(const std::string &p) : g(tg_gguf_open(p.c_str())) {}
    ~gguf_file() { tg_gguf_close(g); }
    uint32_t u32(const char *k) {
        uint32_t v = 0;
        EXPECT_EQ(tg_gguf_get_u32(g, k, &v), TG_OK) << k << ": " << tg_last_error();
        return v;
    }
    std::string str(const char *k) {
        const char *v = "";
        EXPECT_EQ(tg_gguf_get_str(g, k, &v), TG_OK) << k << ": " << tg_last_error();
        return v;
    }
    // tensor `name` as floats; checks its type and shape
    std::vector<float> tensor(const std::string &name, tg_type want_type, std::vector<int64_t> want_ne) {
        int64_t i = tg_gguf_find_tensor(g, name.c_str());
        EXPECT_GE(i, 0) << name;
        if (i < 0) return {};
        const char *nm;
        tg_type type;
        int nd;
        int64_t ne[4];
        size_t nb;
        EXPECT_EQ(tg_gguf_tensor_info(g, i, &nm, &type, &nd, ne, &nb), TG_OK);
        EXPECT_EQ(type, want_type) << name;
        EXPECT_EQ(nd, (int)want_ne.size()) << name;
        for (int d = 0; d < nd && d < (int)want_ne.size(); d++) EXPECT_EQ(ne[d], want_ne[d]) << name << " dim " << d;
        const size_t n = nb / tg_type_size(type);
        std::vector<float> out(n);
        const void *p = tg_gguf_tensor_data(g, i);
        for (size_t k = 0; k < n; k++) {
            if (type == TG_TYPE_F32) {
                memcpy(&out[k], (const char *)p + 4 * k, 4);
            } else {
                uint16_t u;
                memcpy(&u, (const char *)p + 2 * k, 2);
                out[k] = type == TG_TYPE_F16 ? tg_fp16_to_fp32(u) : tg_bf16_to_fp32(u);
            }
        }
        return out;
    }
};

void mean_std(const std::vector<float> &v, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (float x : v) s += x;
    *mean = s / v.size();
    for (float x : v) s2 += (x - *mean) * (x - *mean);
    *sd = std::sqrt(s2 / v.size());
}

// Every key, tensor name, shape and type of config c in the file, matrices
// N(0, 1/cols) and norms 1 + 0.1 N(0, 1) in distribution, then the model
// loads and one forward step gives finite, non-constant logits.
void check_model(const std::string &path, const tgm::synth_config &c, uint32_t file_type) {
    gguf_file f(path);
    ASSERT_NE(f.g, nullptr) << tg_last_error();
    EXPECT_EQ(f.str("general.architecture"), "llama");
    EXPECT_EQ(f.str("general.name"), "tinygml-synth-" + c.name);
    EXPECT_EQ(f.str("tokenizer.ggml.model"), "none");
    EXPECT_EQ(f.u32("general.file_type"), file_type);
    EXPECT_EQ(f.u32("llama.context_length"), (uint32_t)c.n_ctx);
    EXPECT_EQ(f.u32("llama.embedding_length"), (uint32_t)c.n_embd);
    EXPECT_EQ(f.u32("llama.block_count"), (uint32_t)c.n_layer);
    EXPECT_EQ(f.u32("llama.feed_forward_length"), (uint32_t)c.n_ff);
    EXPECT_EQ(f.u32("llama.attention.head_count"), (uint32_t)c.n_head);
    EXPECT_EQ(f.u32("llama.attention.head_count_kv"), (uint32_t)c.n_head_kv);
    EXPECT_EQ(f.u32("llama.rope.dimension_count"), (uint32_t)(c.n_embd / c.n_head));
    EXPECT_EQ(f.u32("llama.vocab_size"), (uint32_t)c.n_vocab);
    EXPECT_EQ(f.u32("tokenizer.ggml.bos_token_id"), 256u);
    EXPECT_EQ(f.u32("tokenizer.ggml.eos_token_id"), 257u);
    float base = 0, eps = 0;
    EXPECT_EQ(tg_gguf_get_f32(f.g, "llama.rope.freq_base", &base), TG_OK);
    EXPECT_EQ(tg_gguf_get_f32(f.g, "llama.attention.layer_norm_rms_epsilon", &eps), TG_OK);
    EXPECT_EQ(base, 10000.0f);
    EXPECT_EQ(eps, 1e-5f);
    EXPECT_EQ(tg_gguf_n_tensors(f.g), 3 + 9 * c.n_layer);

    const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff, hd = E / c.n_head;
    const int64_t QD = hd * c.n_head, KD = hd * c.n_head_kv;
    auto matrix = [&](const std::string &name, int64_t cols, int64_t rows) {
        std::vector<float> v = f.tensor(name, c.wtype, {cols, rows});
        ASSERT_EQ(v.size(), (size_t)(cols * rows)) << name;
        double mean, sd;
        mean_std(v, &mean, &sd);
        const double want = 1.0 / std::sqrt((double)cols);
        // sampling error of the sd is ~1/sqrt(2n): >= 1,024 values here (a fixed seed: no flakes)
        EXPECT_NEAR(sd / want, 1.0, 0.06) << name;
        EXPECT_NEAR(mean / want, 0.0, 0.1) << name;
    };
    std::vector<float> norms;
    auto norm = [&](const std::string &name) {
        std::vector<float> v = f.tensor(name, TG_TYPE_F32, {E});
        norms.insert(norms.end(), v.begin(), v.end());
    };
    matrix("token_embd.weight", E, V);
    matrix("output.weight", E, V);
    norm("output_norm.weight");
    for (int il = 0; il < c.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        norm(p + "attn_norm.weight");
        norm(p + "ffn_norm.weight");
        matrix(p + "attn_q.weight", E, QD);
        matrix(p + "attn_k.weight", E, KD);
        matrix(p + "attn_v.weight", E, KD);
        matrix(p + "attn_output.weight", QD, E);
        matrix(p + "ffn_gate.weight", E, F);
        matrix(p + "ffn_up.weight", E, F);
        matrix(p + "ffn_down.weight", F, E);
    }
    double mean, sd;
    mean_std(norms, &mean, &sd);
    EXPECT_NEAR(mean, 1.0, 0.02);
    EXPECT_NEAR(sd, 0.1, 0.015);

    tg_backend *be = tg_backend_cpu(2);
    ASSERT_NE(be, nullptr);
    tgm::model *m = tgm::model_load(path.c_str(), be);
    ASSERT_NE(m, nullptr) << tg_last_error();
    EXPECT_EQ(m->hp.n_vocab, c.n_vocab);
    EXPECT_EQ(m->hp.n_ctx, c.n_ctx);
    EXPECT_EQ(tg_tensor_type(m->output), c.wtype);
    EXPECT_EQ(tg_tensor_type(m->out_norm), TG_TYPE_F32);
    tgm::session *s = tgm::session_new(m, 1, 8);
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::vector<float> logits(c.n_vocab * 2, NAN);  // poisoned
    std::vector<int32_t> toks = tgm::tokenize("hi", true);
    ASSERT_EQ(tgm::session_eval(s, 0, 1, toks.data(), (int)toks.size(), false, &logits), TG_OK) << tg_last_error();
    ASSERT_EQ(logits.size(), (size_t)c.n_vocab);
    double lm, ls;
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    mean_std(logits, &lm, &ls);
    EXPECT_GT(ls, 1e-3);  // not a constant
    int32_t next = m->hp.bos;  // and one decode step
    ASSERT_EQ(tgm::session_eval(s, 0, 1, &next, 1, false, &logits), TG_OK) << tg_last_error();
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    tgm::session_free(s);
    tgm::model_free(m);
    tg_backend_free(be);
}

TEST(Synth, PresetTiny) {
    tgm::synth_config c;
    ASSERT_TRUE(tgm::synth_preset("0.26m", &c));
    EXPECT_EQ(c.wtype, TG_TYPE_F32);
    EXPECT_EQ(c.n_ctx, 256);
    EXPECT_EQ(tgm::synth_n_params(c), 259 * 96 * 2 + 96 + 3 * (2 * 96 + 2 * 96 * 96 + 2 * 96 * 32 + 3 * 96 * 160));
    const std::string p = temp_path("preset");
    ASSERT_EQ(tgm::synth_write(c, p.c_str()), TG_OK) << tg_last_error();
    check_model(p, c, 0);
    std::remove(p.c_str());
}

TEST(Synth, OverridesAndHalfTypes) {
    for (tg_type t : {TG_TYPE_F16, TG_TYPE_BF16}) {
        tgm::synth_config c;
        ASSERT_TRUE(tgm::synth_preset("125m", &c));
        EXPECT_EQ(c.wtype, TG_TYPE_F16);
        EXPECT_EQ(c.n_ctx, 4096);
        c.n_embd = 64, c.n_layer = 2, c.n_head = 4, c.n_head_kv = 1, c.n_ff = 48, c.n_vocab = 300, c.n_ctx = 32;
        c.wtype = t, c.seed = 5;
        const std::string p = temp_path("override");
        ASSERT_EQ(tgm::synth_write(c, p.c_str()), TG_OK) << tg_last_error();
        check_model(p, c, t == TG_TYPE_F16 ? 1 : 32);
        std::remove(p.c_str());
    }
}

// The bytes depend on the config and the seed only; a tensor's values do not
// depend on the other tensors (fewer layers: the same token_embd).
TEST(Synth, BytesFixedBySeed) {
    tgm::synth_config c;
    c.n_layer = 2, c.seed = 7;
    const std::string a = temp_path("seed_a"), b = temp_path("seed_b"), d = temp_path("seed_d"),
                      e = temp_path("seed_e");
    ASSERT_EQ(tgm::synth_write(c, a.c_str()), TG_OK) << tg_last_error();
    ASSERT_EQ(tgm::synth_write(c, b.c_str()), TG_OK) << tg_last_error();
    tgm::synth_config c2 = c;
    c2.seed = 8;
    ASSERT_EQ(tgm::synth_write(c2, d.c_str()), TG_OK) << tg_last_error();
    tgm::synth_config c3 = c;
    c3.n_layer = 1;
    ASSERT_EQ(tgm::synth_write(c3, e.c_str()), TG_OK) << tg_last_error();
    std::vector<char> fa = file_bytes(a), fb = file_bytes(b), fd = file_bytes(d);
    ASSERT_GT(fa.size(), 100000u);
    EXPECT_TRUE(fa == fb);
    ASSERT_EQ(fa.size(), fd.size());
    size_t differ = 0;
    for (size_t i = 0; i < fa.size(); i++) differ += fa[i] != fd[i];
    EXPECT_GT(differ, fa.size() / 2);
    {
        gguf_file ga(a), gd(d), ge(e);
        ASSERT_TRUE(ga.g && gd.g && ge.g);
        std::vector<float> ta = ga.tensor("token_embd.weight", TG_TYPE_F32, {96, 259});
        EXPECT_TRUE(ta == ge.tensor("token_embd.weight", TG_TYPE_F32, {96, 259}));
        EXPECT_FALSE(ta == gd.tensor("token_embd.weight", TG_TYPE_F32, {96, 259}));
        // tensors differ from each other
        EXPECT_FALSE(ga.tensor("blk.0.ffn_gate.weight", TG_TYPE_F32, {96, 160}) ==
                     ga.tensor("blk.0.ffn_up.weight", TG_TYPE_F32, {96, 160}));
    }
    for (const std::string &p : {a, b, d, e}) std::remove(p.c_str());
}

TEST(Synth, ImpossibleConfigIsAnError) {
    struct {
        void (*edit)(tgm::synth_config &);
        const char *msg;
    } cases[] = {
        {[](tgm::synth_config &c) { c.n_head = 5; }, "n_head 5 does not divide n_embd 96"},
        {[](tgm::synth_config &c) { c.n_head_kv = 4; }, "n_head_kv 4 does not divide n_head 6"},
        {[](tgm::synth_config &c) { c.n_embd = 90; }, "head dim 15"},
        {[](tgm::synth_config &c) { c.n_vocab = 100; }, "n_vocab = 100 outside"},
        {[](tgm::synth_config &c) { c.n_layer = 0; }, "n_layer = 0 outside"},
        {[](tgm::synth_config &c) { c.wtype = TG_TYPE_I32; }, "matrix type"},
    };
    const std::string p = temp_path("bad");
    for (auto &k : cases) {
        tgm::synth_config c;
        k.edit(c);
        EXPECT_EQ(tgm::synth_write(c, p.c_str()), TG_ERR_ARG);
        EXPECT_NE(strstr(tg_last_error(), k.msg), nullptr) << tg_last_error();
        EXPECT_NE(access(p.c_str(), F_OK), 0) << "no file for a bad config";
    }
    tgm::synth_config c;
    EXPECT_FALSE(tgm::synth_preset("7b", &c));
}

// ---------------------------------------------------------------------------
// tg_gguf_add_tensor_fill

struct fill_log {
    std::vector<std::pair<size_t, size_t>> calls;
    size_t fail_at = SIZE_MAX;  // offset whose piece fails
};

tg_status pattern_fill(void *user, void *dst, size_t offset, size_t n) {
    fill_log *log = (fill_log *)user;
    log->calls.push_back({offset, n});
    if (offset == log->fail_at) return tg_set_error(TG_ERR_IO, "[test] the source went away");
    unsigned char *d = (unsigned char *)dst;
    for (size_t i = 0; i < n; i++) d[i] = (unsigned char)(((offset + i) * 2654435761u) >> 13);
    return TG_OK;
}

TEST(GgufFill, StreamsPiecesInOrderAndMatchesCopiedData) {
    const int64_t ne[2] = {1000, 1500};  // 6,000,000 bytes of F32: two pieces
    const size_t nb = 6000000;
    std::vector<unsigned char> expect(nb);
    for (size_t i = 0; i < nb; i++) expect[i] = (unsigned char)((i * 2654435761u) >> 13);
    fill_log log;
    tg_gguf_writer *w = tg_gguf_writer_new();
    ASSERT_EQ(tg_gguf_set_u32(w, "general.alignment", 64), TG_OK);
    const float small[3] = {1.5f, -2.0f, 3.25f};
    const int64_t ns = 3;
    ASSERT_EQ(tg_gguf_add_tensor(w, "a", TG_TYPE_F32, 1, &ns, small), TG_OK);
    ASSERT_EQ(tg_gguf_add_tensor_fill(w, "big", TG_TYPE_F32, 2, ne, pattern_fill, &log), TG_OK);
    ASSERT_EQ(tg_gguf_add_tensor(w, "z", TG_TYPE_F32, 1, &ns, small), TG_OK);
    EXPECT_TRUE(log.calls.empty()) << "fill runs at write time only";
    const std::string p = temp_path("fill");
    ASSERT_EQ(tg_gguf_write(w, p.c_str()), TG_OK) << tg_last_error();
    ASSERT_EQ(log.calls.size(), 2u);
    EXPECT_EQ(log.calls[0], std::make_pair((size_t)0, (size_t)4 << 20));
    EXPECT_EQ(log.calls[1], std::make_pair((size_t)4 << 20, nb - ((size_t)4 << 20)));
    {
        gguf_file f(p);
        ASSERT_NE(f.g, nullptr) << tg_last_error();
        int64_t i = tg_gguf_find_tensor(f.g, "big");
        ASSERT_GE(i, 0);
        EXPECT_EQ(memcmp(tg_gguf_tensor_data(f.g, i), expect.data(), nb), 0);
        EXPECT_EQ(memcmp(tg_gguf_tensor_data(f.g, tg_gguf_find_tensor(f.g, "z")), small, sizeof small), 0);
    }
    // the in-memory writer gives the same bytes
    void *mem = nullptr;
    size_t size = 0;
    ASSERT_EQ(tg_gguf_write_memory(w, &mem, &size), TG_OK) << tg_last_error();
    std::vector<char> fb = file_bytes(p);
    ASSERT_EQ(size, fb.size());
    EXPECT_EQ(memcmp(mem, fb.data(), size), 0);
    tg_gguf_free_memory(mem);

    // a failing fill fails the write with its message and leaves no file
    std::remove(p.c_str());
    log.calls.clear();
    log.fail_at = (size_t)4 << 20;
    EXPECT_EQ(tg_gguf_write(w, p.c_str()), TG_ERR_IO);
    EXPECT_NE(strstr(tg_last_error(), "tensor 'big': fill failed at byte 4194304: [test] the source went away"),
              nullptr)
        << tg_last_error();
    EXPECT_NE(access(p.c_str(), F_OK), 0);
    mem = (void *)&log;
    EXPECT_EQ(tg_gguf_write_memory(w, &mem, &size), TG_ERR_IO);
    EXPECT_EQ(mem, (void *)&log) << "outputs unchanged on failure";
    tg_gguf_writer_free(w);
}

TEST(GgufFill, ArgumentsChecked) {
    tg_gguf_writer *w = tg_gguf_writer_new();
    const int64_t ne[2] = {4, 0};
    fill_log log;
    EXPECT_EQ(tg_gguf_add_tensor_fill(w, "t", TG_TYPE_F32, 1, ne, nullptr, nullptr), TG_ERR_ARG);
    EXPECT_NE(strstr(tg_last_error(), "fill is NULL"), nullptr) << tg_last_error();
    EXPECT_EQ(tg_gguf_add_tensor_fill(w, "t", TG_TYPE_F32, 2, ne, pattern_fill, &log), TG_ERR_ARG);
    EXPECT_NE(strstr(tg_last_error(), "ne[1] is 0"), nullptr) << tg_last_error();
    EXPECT_EQ(tg_gguf_add_tensor_fill(nullptr, "t", TG_TYPE_F32, 1, ne, pattern_fill, &log), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor_fill(w, "t", TG_TYPE_F32, 1, ne, pattern_fill, &log), TG_OK);
    EXPECT_EQ(tg_gguf_add_tensor_fill(w, "t", TG_TYPE_F32, 1, ne, pattern_fill, &log), TG_ERR_ARG);
    EXPECT_NE(strstr(tg_last_error(), "already added"), nullptr) << tg_last_error();
    tg_gguf_writer_free(w);
}

}  // namespace
