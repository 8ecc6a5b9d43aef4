// test_vocab.cpp - the shipped models carry the byte-level vocabulary the way
// llama.cpp reads it ("gpt2": 256 byte tokens, no merges, BOS/EOS control
// tokens), their weights are byte for byte those they were trained with, and
// tinygml still reads files with the old keys ("tinygml-bytes") to the same
// logits. A "gpt2" vocabulary that is not byte-level is refused.
#include <cstdlib>
#include <cstring>
#include <set>

#include "gguf_builder.h"
#include "model.h"
#include "model_util.h"

using namespace gguf_test;

namespace {

#ifdef TG_SOURCE_DIR
std::string shipped(const char *name) { return std::string(TG_SOURCE_DIR) + "/models/" + name; }
#endif

// FNV-1a 64 of bytes [from, size) of a file's bytes as loaded.
uint64_t fnv1a(const tg_gguf *g, size_t from) {
    size_t size = 0;
    const unsigned char *p = (const unsigned char *)tg_gguf_file_data(g, &size);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = from; i < size; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// The data sections (all tensor bytes, with their padding) of the shipped
// files as trained and exported with the old tokenizer keys (main before
// issue 13): the rewrite changed only the header.
struct shipped_file {
    const char *name;
    size_t data_bytes;
    uint64_t data_fnv;
};
const shipped_file k_shipped[] = {
    {"llama-recall.gguf", 920832, 0x074b381258f132caull},
    {"hybrid-recall.gguf", 927168, 0x7f519d2b49efdee9ull},
};

TEST(ShippedVocab, WeightsAreTheTrainedOnes) {
#ifndef TG_SOURCE_DIR
    GTEST_SKIP() << "TG_SOURCE_DIR not defined";
#else
    for (const shipped_file &f : k_shipped) {
        GgufPtr g(tg_gguf_open(shipped(f.name).c_str()));
        ASSERT_TRUE(g) << tg_last_error();
        size_t size;
        tg_gguf_file_data(g.get(), &size);
        EXPECT_EQ(size - tg_gguf_data_offset(g.get()), f.data_bytes) << f.name;
        EXPECT_EQ(fnv1a(g.get(), tg_gguf_data_offset(g.get())), f.data_fnv) << f.name;
    }
#endif
}

// The keys llama.cpp's vocabulary loader reads (llama-vocab.cpp: a "gpt2"
// model needs tokenizer.ggml.merges, unique token texts, token types).
TEST(ShippedVocab, ByteLevelGpt2Keys) {
#ifndef TG_SOURCE_DIR
    GTEST_SKIP() << "TG_SOURCE_DIR not defined";
#else
    // a few of GPT-2's byte characters, written out (UTF-8)
    const struct {
        int b;
        const char *text;
    } known[] = {{'a', "a"}, {'=', "="}, {'?', "?"}, {' ', "\xc4\xa0"}, {'\n', "\xc4\x8a"}, {0, "\xc4\x80"},
                 {0x7f, "\xc4\xa1"}, {0xa0, "\xc5\x82"}, {0xad, "\xc5\x83"}, {0xae, "\xc2\xae"}, {0xff, "\xc3\xbf"}};
    for (const auto &k : known) EXPECT_EQ(tgm::byte_token_text(k.b), k.text) << "byte " << k.b;
    EXPECT_EQ(tgm::byte_token_text(256), "");
    for (const shipped_file &f : k_shipped) {
        GgufPtr g(tg_gguf_open(shipped(f.name).c_str()));
        ASSERT_TRUE(g) << tg_last_error();
        const char *s = nullptr;
        ASSERT_EQ(tg_gguf_get_str(g.get(), "tokenizer.ggml.model", &s), TG_OK);
        EXPECT_STREQ(s, "gpt2");
        ASSERT_EQ(tg_gguf_get_str(g.get(), "tokenizer.ggml.pre", &s), TG_OK);
        EXPECT_STREQ(s, "gpt-2");  // llama.cpp refuses "gpt2" here ("unknown pre-tokenizer type")
        tg_gguf_type et;
        uint64_t n;
        const void *data;
        ASSERT_EQ(tg_gguf_get_arr(g.get(), "tokenizer.ggml.tokens", &et, &n, nullptr), TG_OK);
        ASSERT_EQ(et, TG_GGUF_STRING);
        ASSERT_EQ(n, 258u);
        std::set<std::string> seen;
        for (uint64_t i = 0; i < n; i++) {
            ASSERT_EQ(tg_gguf_get_arr_str(g.get(), "tokenizer.ggml.tokens", i, &s), TG_OK);
            if (i < 256) EXPECT_EQ(s, tgm::byte_token_text((int)i)) << i;
            EXPECT_TRUE(seen.insert(s).second) << "token text " << s << " twice";
        }
        tg_gguf_get_arr_str(g.get(), "tokenizer.ggml.tokens", 256, &s);
        EXPECT_STREQ(s, "<s>");
        tg_gguf_get_arr_str(g.get(), "tokenizer.ggml.tokens", 257, &s);
        EXPECT_STREQ(s, "</s>");
        ASSERT_EQ(tg_gguf_get_arr(g.get(), "tokenizer.ggml.token_type", &et, &n, &data), TG_OK);
        ASSERT_EQ(et, TG_GGUF_INT32);
        ASSERT_EQ(n, 258u);
        const int32_t *types = (const int32_t *)data;
        for (int i = 0; i < 256; i++) EXPECT_EQ(types[i], 1) << "byte tokens are NORMAL";
        EXPECT_EQ(types[256], 3) << "BOS is CONTROL";
        EXPECT_EQ(types[257], 3) << "EOS is CONTROL";
        ASSERT_EQ(tg_gguf_get_arr(g.get(), "tokenizer.ggml.merges", &et, &n, nullptr), TG_OK);
        EXPECT_EQ(et, TG_GGUF_STRING);
        EXPECT_EQ(n, 0u);
        uint32_t id;
        ASSERT_EQ(tg_gguf_get_u32(g.get(), "tokenizer.ggml.bos_token_id", &id), TG_OK);
        EXPECT_EQ(id, 256u);
        ASSERT_EQ(tg_gguf_get_u32(g.get(), "tokenizer.ggml.eos_token_id", &id), TG_OK);
        EXPECT_EQ(id, 257u);
        bool add_bos = false;
        ASSERT_EQ(tg_gguf_get_bool(g.get(), "tokenizer.ggml.add_bos_token", &add_bos), TG_OK);
        EXPECT_TRUE(add_bos);
    }
#endif
}

// Copy every key of g but those starting with `drop` into w, with its type.
void copy_kvs(const tg_gguf *g, tg_gguf_writer *w, const std::string &drop) {
    for (int64_t i = 0; i < tg_gguf_n_kv(g); i++) {
        const char *key = tg_gguf_kv_key(g, i);
        if (std::string(key).rfind(drop, 0) == 0) continue;
        uint64_t u;
        float f;
        bool b;
        const char *s;
        tg_gguf_type et;
        uint64_t n;
        const void *data;
        switch (tg_gguf_kv_type(g, i)) {
            case TG_GGUF_UINT32:
                ASSERT_EQ(tg_gguf_get_u64(g, key, &u), TG_OK);
                ASSERT_EQ(tg_gguf_set_u32(w, key, (uint32_t)u), TG_OK);
                break;
            case TG_GGUF_FLOAT32:
                ASSERT_EQ(tg_gguf_get_f32(g, key, &f), TG_OK);
                ASSERT_EQ(tg_gguf_set_f32(w, key, f), TG_OK);
                break;
            case TG_GGUF_BOOL:
                ASSERT_EQ(tg_gguf_get_bool(g, key, &b), TG_OK);
                ASSERT_EQ(tg_gguf_set_bool(w, key, b), TG_OK);
                break;
            case TG_GGUF_STRING:
                ASSERT_EQ(tg_gguf_get_str(g, key, &s), TG_OK);
                ASSERT_EQ(tg_gguf_set_str(w, key, s), TG_OK);
                break;
            case TG_GGUF_ARRAY: {
                ASSERT_EQ(tg_gguf_get_arr(g, key, &et, &n, &data), TG_OK);
                if (et == TG_GGUF_STRING) {
                    std::vector<const char *> strs(n);
                    for (uint64_t k = 0; k < n; k++) ASSERT_EQ(tg_gguf_get_arr_str(g, key, k, &strs[k]), TG_OK);
                    ASSERT_EQ(tg_gguf_set_arr_str(w, key, n, strs.data()), TG_OK);
                } else {
                    ASSERT_EQ(tg_gguf_set_arr(w, key, et, n, data), TG_OK);
                }
                break;
            }
            default: FAIL() << "key " << key << ": type not copied by this test";
        }
    }
}

// Tensors in file order, same types, shapes and bytes.
void copy_tensors(const tg_gguf *g, tg_gguf_writer *w) {
    for (int64_t i = 0; i < tg_gguf_n_tensors(g); i++) {
        const char *name;
        tg_type type;
        int nd;
        int64_t ne[4];
        ASSERT_EQ(tg_gguf_tensor_info(g, i, &name, &type, &nd, ne, nullptr), TG_OK);
        ASSERT_EQ(tg_gguf_add_tensor(w, name, type, nd, ne, tg_gguf_tensor_data(g, i)), TG_OK) << tg_last_error();
    }
}

std::vector<float> logits_of(const std::string &path, tg_backend *be) {
    tgm::model *m = tgm::model_load(path.c_str(), be);
    EXPECT_NE(m, nullptr) << tg_last_error();
    if (!m) return {};
    const std::vector<int32_t> toks = tgm::tokenize("b3=t8 g6=r2 a4=v7 d7=v8 a1=w8 ?d7=", true);
    std::vector<float> logits(toks.size() * m->hp.n_vocab + 1, NAN);
    tgm::session *s = tgm::session_new(m, 1, (int)toks.size());
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), (int)toks.size(), true, &logits), TG_OK) << tg_last_error();
    tgm::session_free(s);
    tgm::model_free(m);
    return logits;
}

// A file with the old keys (no vocabulary, tokenizer.ggml.model
// "tinygml-bytes"), made from the shipped one: same tensors, same logits.
TEST(ShippedVocab, OldStyleFilesStillLoad) {
#ifndef TG_SOURCE_DIR
    GTEST_SKIP() << "TG_SOURCE_DIR not defined";
#else
    tg_backend *be = tg_backend_cpu(2);
    for (const shipped_file &f : k_shipped) {
        GgufPtr g(tg_gguf_open(shipped(f.name).c_str()));
        ASSERT_TRUE(g) << tg_last_error();
        WriterPtr w(tg_gguf_writer_new());
        copy_kvs(g.get(), w.get(), "tokenizer.");
        ASSERT_EQ(tg_gguf_set_str(w.get(), "tokenizer.ggml.model", "tinygml-bytes"), TG_OK);
        ASSERT_EQ(tg_gguf_set_u32(w.get(), "tokenizer.ggml.bos_token_id", 256), TG_OK);
        ASSERT_EQ(tg_gguf_set_u32(w.get(), "tokenizer.ggml.eos_token_id", 257), TG_OK);
        copy_tensors(g.get(), w.get());
        const std::string old_path = temp_path("old_style");
        ASSERT_EQ(tg_gguf_write(w.get(), old_path.c_str()), TG_OK) << tg_last_error();
        {
            GgufPtr o(tg_gguf_open(old_path.c_str()));
            ASSERT_TRUE(o);
            EXPECT_EQ(tg_gguf_find_key(o.get(), "tokenizer.ggml.tokens"), -1);
            EXPECT_EQ(fnv1a(o.get(), tg_gguf_data_offset(o.get())), f.data_fnv) << "the same tensor bytes";
        }
        const std::vector<float> a = logits_of(shipped(f.name), be), b = logits_of(old_path, be);
        ASSERT_FALSE(a.empty());
        ASSERT_EQ(a.size(), b.size());
        EXPECT_FALSE(std::isnan(a[0]));
        EXPECT_EQ(memcmp(a.data(), b.data(), (a.size() - 1) * 4), 0) << f.name;
        std::remove(old_path.c_str());
    }
    tg_backend_free(be);
#endif
}

// A "gpt2" vocabulary tinygml cannot tokenize (merges, or tokens that are
// not the bytes) is refused at load, not run with the wrong tokens.
TEST(ShippedVocab, NonByteGpt2VocabularyIsRefused) {
    tg_backend *be = tg_backend_cpu(1);
    tgt::toy_config cfg;
    std::vector<std::string> toks;
    for (int b = 0; b < 256; b++) toks.push_back(tgm::byte_token_text(b));
    toks.push_back("<s>");
    toks.push_back("</s>");
    auto write = [&](const std::vector<std::string> &t, uint64_t n_merges) {
        tg_gguf_writer *w = tgt::toy_model_writer(cfg, 2);
        std::vector<const char *> p;
        for (const auto &s : t) p.push_back(s.c_str());
        const char *merges[] = {"a b", "c d"};
        tg_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
        tg_gguf_set_arr_str(w, "tokenizer.ggml.tokens", p.size(), p.data());
        tg_gguf_set_arr_str(w, "tokenizer.ggml.merges", n_merges, merges);
        return tgt::write_temp_model(w, "vocab");
    };
    struct {
        std::vector<std::string> toks;
        uint64_t merges;
        tg_status st;
        const char *frag;
    } cases[] = {
        {toks, 0, TG_OK, ""},
        {toks, 2, TG_ERR_UNSUPPORTED, "tokenizer 'gpt2' with 2 merges: tinygml's tokenizer is byte-level"},
        {std::vector<std::string>(toks.begin(), toks.end() - 1), 0, TG_ERR_FORMAT,
         "tokenizer.ggml.tokens has 257 entries, the vocabulary 258"},
        {toks, 0, TG_ERR_UNSUPPORTED, "token 32 is not byte 0x20's"},
    };
    cases[3].toks[32] = " ";  // a plain space: not GPT-2's character for it
    for (auto &c : cases) {
        const std::string path = write(c.toks, c.merges);
        ASSERT_FALSE(path.empty());
        tgm::model *m = tgm::model_load(path.c_str(), be);
        if (c.st == TG_OK) {
            EXPECT_NE(m, nullptr) << tg_last_error();
        } else {
            EXPECT_EQ(m, nullptr);
            EXPECT_TRUE(has(tg_last_error(), c.frag)) << tg_last_error();
        }
        tgm::model_free(m);
        std::remove(path.c_str());
    }
    tg_backend_free(be);
}

// tinygml-run's prompt starts with the model's BOS (tokenizer.ggml.bos_token_id),
// as its -i conversation does and as its docs promise (-i's reply to a line is
// what a plain run of the conversation so far prints). Session 32's sweep: the
// plain run fed token 256 whatever the file said. The prompt cache it writes
// holds the tokens it fed.
TEST(ShippedVocab, CliPromptStartsWithTheModelsBos) {
#ifndef TG_RUN_BIN
    GTEST_SKIP() << "tinygml-run is not built";
#else
    tg_gguf_writer *w = tgt::toy_model_writer(tgt::toy_config{}, 5);
    ASSERT_EQ(tg_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1), TG_OK);
    ASSERT_EQ(tg_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2), TG_OK);
    const std::string model = tgt::write_temp_model(w, "bos1");
    ASSERT_FALSE(model.empty()) << tg_last_error();
    const std::string cache = ::testing::TempDir() + "tinygml_bos1_cache.bin";
    std::remove(cache.c_str());
    const std::string cmd = std::string("\"") + TG_RUN_BIN + "\" -m \"" + model +
                            "\" -p ab -n 1 --temp 0 --device cpu -q --prompt-cache \"" + cache + "\" >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    // the cache: the prompt but its last token, in the CLI's default cache types
    tg_backend *be = tg_backend_cpu(1);
    tgm::model *m = tgm::model_load(model.c_str(), be);
    ASSERT_NE(m, nullptr) << tg_last_error();
    EXPECT_EQ(m->hp.bos, 1);
    tgm::session_params sp;
    sp.n_ctx = 3, sp.type_k = TG_TYPE_F16, sp.type_v = TG_TYPE_F16;
    tgm::session *s = tgm::session_new(m, sp);
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::vector<uint8_t> bytes;
    std::vector<int32_t> toks;
    ASSERT_EQ(tgm::session_state_read_file(s, cache.c_str(), &bytes), TG_OK) << tg_last_error();
    ASSERT_EQ(tgm::session_state_tokens(s, bytes.data(), bytes.size(), &toks), TG_OK) << tg_last_error();
    EXPECT_EQ(toks, (std::vector<int32_t>{1, 'a'}));
    tgm::session_free(s);
    tgm::model_free(m);
    tg_backend_free(be);
    std::remove(cache.c_str());
    std::remove(model.c_str());
#endif
}

}  // namespace
