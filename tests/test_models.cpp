// test_models.cpp - toy models end to end on the CPU: incremental decoding
// equals re-running the prefix, batches equal single sequences, sessions
// reset cleanly, bad model files and impossible metadata give clear errors.
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

#include "model_util.h"
#include "test_util.h"

namespace {


// (hybrid?, cuda?)
class ModelFamily : public ::testing::TestWithParam<std::tuple<bool, bool>> {
   protected:
    void SetUp() override {
        cfg.hybrid = std::get<0>(GetParam());
        const bool cuda = std::get<1>(GetParam());
        if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
        path = tgt::write_temp_model(tgt::toy_model_writer(cfg, 11), std::string(cfg.hybrid ? "hybrid" : "llama") +
                                                                       (cuda ? "_cuda" : "_cpu"));
        ASSERT_FALSE(path.empty()) << tg_last_error();
        be = cuda ? tg_backend_cuda(0) : tg_backend_cpu(2);
        ASSERT_NE(be, nullptr) << tg_last_error();
        m = tgm::model_load(path.c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
    }
    void TearDown() override {
        tgm::model_free(m);
        tg_backend_free(be);
        std::remove(path.c_str());
    }
    tgt::toy_config cfg;
    std::string path;
    tg_backend *be = nullptr;
    tgm::model *m = nullptr;
};

// Logits of the last token after feeding the prefix one token at a time equal
// the logits from one pass over the whole prefix.
TEST_P(ModelFamily, IncrementalDecodeEqualsFullPrefix) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> tok(0, 255);
    const int T = 19, V = m->hp.n_vocab;
    std::vector<int32_t> toks(T);
    for (auto &t : toks) t = tok(rng);
    tgm::session *full = tgm::session_new(m, 1, 32);
    tgm::session *inc = tgm::session_new(m, 1, 32);
    ASSERT_TRUE(full && inc) << tg_last_error();
    std::vector<float> lf, li;
    ASSERT_EQ(tgm::session_eval(full, 0, 1, toks.data(), T, true, &lf), TG_OK) << tg_last_error();
    ASSERT_EQ(lf.size(), (size_t)T * V);
    // a prompt of 7, then one token at a time
    ASSERT_EQ(tgm::session_eval(inc, 0, 1, toks.data(), 7, false, &li), TG_OK) << tg_last_error();
    EXPECT_LT(tgt::rel_error(li.data(), &lf[(size_t)6 * V], V), 1e-5);
    for (int t = 7; t < T; t++) {
        ASSERT_EQ(tgm::session_eval(inc, 0, 1, &toks[t], 1, false, &li), TG_OK) << tg_last_error();
        EXPECT_LT(tgt::rel_error(li.data(), &lf[(size_t)t * V], V), 1e-5) << "token " << t;
    }
    tgm::session_free(full);
    tgm::session_free(inc);
}

// Three sequences in one batch give each sequence's own logits, and a reset
// sequence starts over without touching the others.
TEST_P(ModelFamily, BatchEqualsSingleAndResetIsolates) {
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> tok(0, 255);
    const int T = 6, B = 3, V = m->hp.n_vocab;
    std::vector<int32_t> toks((size_t)B * T);
    for (auto &t : toks) t = tok(rng);
    tgm::session *batch = tgm::session_new(m, B, 16);
    ASSERT_NE(batch, nullptr) << tg_last_error();
    std::vector<float> lb, l1;
    ASSERT_EQ(tgm::session_eval(batch, 0, B, toks.data(), T, false, &lb), TG_OK) << tg_last_error();
    for (int b = 0; b < B; b++) {
        tgm::session *one = tgm::session_new(m, 1, 16);
        ASSERT_EQ(tgm::session_eval(one, 0, 1, &toks[(size_t)b * T], T, false, &l1), TG_OK);
        EXPECT_LT(tgt::rel_error(&lb[(size_t)b * V], l1.data(), V), 1e-5) << "sequence " << b;
        tgm::session_free(one);
    }
    // reset sequence 1 and feed it sequence 0's tokens: it must match 0's first pass
    std::vector<float> first0(lb.begin(), lb.begin() + V);
    ASSERT_EQ(tgm::session_reset(batch, 1), TG_OK);
    ASSERT_EQ(tgm::session_eval(batch, 1, 1, toks.data(), T, false, &l1), TG_OK) << tg_last_error();
    EXPECT_LT(tgt::rel_error(l1.data(), first0.data(), V), 1e-5);
    // sequence 2 continues unaffected: a decode step matches a fresh single run
    std::vector<int32_t> seq2(toks.begin() + 2 * T, toks.begin() + 3 * T);
    seq2.push_back(42);
    ASSERT_EQ(tgm::session_eval(batch, 2, 1, &seq2[T], 1, false, &lb), TG_OK);
    tgm::session *one = tgm::session_new(m, 1, 16);
    ASSERT_EQ(tgm::session_eval(one, 0, 1, seq2.data(), T + 1, false, &l1), TG_OK);
    EXPECT_LT(tgt::rel_error(lb.data(), l1.data(), V), 1e-5);
    tgm::session_free(one);
    tgm::session_free(batch);
}

TEST_P(ModelFamily, ContextAndTokenLimitsAreErrors) {
    tgm::session *s = tgm::session_new(m, 1, 8);
    ASSERT_NE(s, nullptr);
    std::vector<int32_t> toks(9, 65);
    std::vector<float> l;
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 9, false, &l), TG_ERR_ARG);
    EXPECT_NE(strstr(tg_last_error(), "[session_eval]"), nullptr) << tg_last_error();
    EXPECT_EQ(s->n_past[0], 0);
    toks[3] = 258;
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 4, false, &l), TG_ERR_ARG);
    toks[3] = -1;
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 4, false, &l), TG_ERR_ARG);
    toks[3] = 66;
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 8, false, &l), TG_OK) << tg_last_error();
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 1, false, &l), TG_ERR_ARG);  // context full
    EXPECT_EQ(tgm::session_new(m, 1, m->hp.n_ctx + 1), nullptr);
    EXPECT_EQ(tgm::session_reset(s, 1), TG_ERR_ARG);
    tgm::session_free(s);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamily, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param) ? "hybrid" : "llama") +
                                    (std::get<1>(info.param) ? "_cuda" : "_cpu");
                         });

// F16 and BF16 weights load and run (mul_mat converts on load).
TEST(Models, HalfPrecisionWeightsRun) {
    for (tg_type t : {TG_TYPE_F16, TG_TYPE_BF16}) {
        tgt::toy_config c;
        c.hybrid = true;
        c.wtype = t;
        std::string path = tgt::write_temp_model(tgt::toy_model_writer(c, 3), "half");
        tg_backend *be = tg_backend_cpu(1);
        tgm::model *m = tgm::model_load(path.c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
        tgm::session *s = tgm::session_new(m, 1, 8);
        std::vector<int32_t> toks = {256, 1, 2, 3};
        std::vector<float> l;
        ASSERT_EQ(tgm::session_eval(s, 0, 1, toks.data(), 4, false, &l), TG_OK) << tg_last_error();
        for (float x : l) ASSERT_TRUE(std::isfinite(x));
        tgm::session_free(s);
        tgm::model_free(m);
        tg_backend_free(be);
        std::remove(path.c_str());
    }
}

// RELIABILITY 8: metadata that makes the model impossible.
struct bad_case {
    const char *name;
    std::function<tg_gguf_writer *()> make;
    const char *fragment;
};

// Each case's file fails model_load with "[model_load] ..." naming its fragment.
void expect_load_fails(const std::vector<bad_case> &cases, tg_backend *be, const char *stem) {
    for (auto &c : cases) {
        std::string path = tgt::write_temp_model(c.make(), stem);
        ASSERT_FALSE(path.empty()) << c.name << ": " << tg_last_error();
        tgm::model *m = tgm::model_load(path.c_str(), be);
        EXPECT_EQ(m, nullptr) << c.name;
        EXPECT_EQ(std::string(tg_last_error()).rfind("[model_load]", 0), 0u) << c.name << ": " << tg_last_error();
        EXPECT_NE(strstr(tg_last_error(), c.fragment), nullptr) << c.name << ": " << tg_last_error();
        tgm::model_free(m);
        std::remove(path.c_str());
    }
}

TEST(Models, ImpossibleMetadataIsAClearError) {
    using tgt::toy_config;
    std::vector<bad_case> cases = {
        {"missing tensor", [] { return tgt::toy_model_writer(toy_config{}, 1, "blk.2.attn_k.weight"); },
         "missing tensor 'blk.2.attn_k.weight'"},
        {"misshaped tensor", [] { return tgt::toy_model_writer(toy_config{}, 1, "", "blk.1.ffn_up.weight"); },
         "'blk.1.ffn_up.weight' has shape"},
        {"layers above tensors",
         [] {
             tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
             tg_gguf_set_u32(w, "llama.block_count", 9);
             return w;
         },
         "missing tensor 'blk.4."},
        {"heads do not divide width",
         [] {
             tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
             tg_gguf_set_u32(w, "llama.attention.head_count", 5);
             return w;
         },
         "does not divide embedding_length"},
        {"odd head dim",
         [] {
             toy_config c;
             c.n_embd = 36;
             c.n_head = 4;  // head dim 9
             return tgt::toy_model_writer(c, 1);
         },
         "head dim 9 is odd"},
        {"kv heads do not divide heads",
         [] {
             tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
             tg_gguf_set_u32(w, "llama.attention.head_count_kv", 3);
             return w;
         },
         "head_count_kv 3"},
        {"missing key",
         [] {
             toy_config c;
             c.hybrid = true;
             tg_gguf_writer *w = tgt::toy_model_writer(c, 1);
             tg_gguf_set_str(w, "general.architecture", "llama");  // hybrid tensors, llama keys absent
             return w;
         },
         "missing key 'llama.context_length'"},
        {"unknown architecture",
         [] {
             tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
             tg_gguf_set_str(w, "general.architecture", "mamba9");
             return w;
         },
         "architecture 'mamba9'"},
        {"value heads not a multiple",
         [] {
             toy_config c;
             c.hybrid = true;
             c.hv = 3;
             return tgt::toy_model_writer(c, 1);
         },
         "does not divide ssm.head_count_v"},
        {"absurd context",
         [] {
             tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
             tg_gguf_set_u64(w, "llama.context_length", 1ull << 40);
             return w;
         },
         "llama.context_length"},
    };
    tg_backend *be = tg_backend_cpu(1);
    expect_load_fails(cases, be, "bad");
    EXPECT_EQ(tgm::model_load("/nonexistent/model.gguf", be), nullptr);
    EXPECT_NE(strstr(tg_last_error(), "cannot open"), nullptr) << tg_last_error();
    tg_backend_free(be);
}

// Session 32's sweep: tokenizer keys of the wrong type were skipped silently:
// a bos_token_id of int32 -1 (or a string, a float, a u64 past 2^32) loaded
// with BOS 256, a u32 0xFFFFFFFF was reported as id -1, a non-string
// tokenizer.ggml.model meant "no vocabulary" and a merges key that is not an
// array "no merges". Each is now an error naming its key, as llama.cpp's
// loader throws on a key of the wrong type; ids of any integer type load.
TEST(Models, TokenizerKeysOfTheWrongTypeAreErrors) {
    using tgt::toy_config;
    auto with = [](std::function<void(tg_gguf_writer *)> f) {
        return [f] {
            tg_gguf_writer *w = tgt::toy_model_writer(toy_config{}, 1);
            f(w);
            return w;
        };
    };
    auto gpt2 = [](tg_gguf_writer *w) {
        std::vector<std::string> t;
        for (int b = 0; b < 256; b++) t.push_back(tgm::byte_token_text(b));
        t.push_back("<s>");
        t.push_back("</s>");
        std::vector<const char *> p;
        for (const auto &x : t) p.push_back(x.c_str());
        tg_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
        tg_gguf_set_arr_str(w, "tokenizer.ggml.tokens", p.size(), p.data());
    };
    const char *bos = "tokenizer.ggml.bos_token_id", *eos = "tokenizer.ggml.eos_token_id";
    std::vector<bad_case> cases = {
        {"bos int32 -1", with([=](tg_gguf_writer *w) { tg_gguf_set_i32(w, bos, -1); }),
         "key 'tokenizer.ggml.bos_token_id' = -1 is not a token id"},
        {"bos string", with([=](tg_gguf_writer *w) { tg_gguf_set_str(w, bos, "256"); }),
         "key 'tokenizer.ggml.bos_token_id': [gguf_get_i64]"},
        {"eos float", with([=](tg_gguf_writer *w) { tg_gguf_set_f32(w, eos, 257.0f); }),
         "key 'tokenizer.ggml.eos_token_id': [gguf_get_i64]"},
        {"eos u64 past int64", with([=](tg_gguf_writer *w) { tg_gguf_set_u64(w, eos, ~0ull); }),
         "key 'tokenizer.ggml.eos_token_id': [gguf_get_i64]"},
        {"eos u32 max", with([=](tg_gguf_writer *w) { tg_gguf_set_u32(w, eos, 0xffffffffu); }),
         "key 'tokenizer.ggml.eos_token_id' = 4294967295 is not a token id"},
        {"eos past the vocabulary", with([=](tg_gguf_writer *w) { tg_gguf_set_u32(w, eos, 258); }),
         "bos/eos ids 256/258 outside the vocabulary of 258"},
        {"model not a string", with([](tg_gguf_writer *w) { tg_gguf_set_u32(w, "tokenizer.ggml.model", 2); }),
         "key 'tokenizer.ggml.model': [gguf_get_str]"},
        {"merges a string", with([=](tg_gguf_writer *w) {
             gpt2(w);
             tg_gguf_set_str(w, "tokenizer.ggml.merges", "a b");
         }),
         "tokenizer.ggml.merges must be an array of strings"},
        {"merges of ints", with([=](tg_gguf_writer *w) {
             gpt2(w);
             tg_gguf_set_arr(w, "tokenizer.ggml.merges", TG_GGUF_INT32, 0, nullptr);
         }),
         "tokenizer.ggml.merges must be an array of strings"},
    };
    tg_backend *be = tg_backend_cpu(1);
    expect_load_fails(cases, be, "bad_tok");
    // ids of other integer types, and an empty merges list, load
    struct {
        std::function<tg_gguf_writer *()> make;
        int bos, eos;
    } good[] = {
        {with([=](tg_gguf_writer *w) { tg_gguf_set_i32(w, bos, 256), tg_gguf_set_u16(w, eos, 1); }), 256, 1},
        {with([=](tg_gguf_writer *w) { tg_gguf_set_i64(w, bos, 2), tg_gguf_set_u8(w, eos, 3); }), 2, 3},
        {with([=](tg_gguf_writer *w) {
             gpt2(w);
             tg_gguf_set_arr_str(w, "tokenizer.ggml.merges", 0, nullptr);
         }),
         256, 257},
    };
    for (auto &g : good) {
        std::string path = tgt::write_temp_model(g.make(), "good_tok");
        tgm::model *m = tgm::model_load(path.c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
        EXPECT_EQ(m->hp.bos, g.bos);
        EXPECT_EQ(m->hp.eos, g.eos);
        tgm::model_free(m);
        std::remove(path.c_str());
    }
    tg_backend_free(be);
}

}  // namespace
