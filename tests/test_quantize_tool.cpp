// test_quantize_tool.cpp - tgm::quantize_file, the engine of tinygml-quantize:
// which tensors it quantizes, that the quantized bytes are tg_quantize's of
// the source rows (F32 and F16 sources, rows larger than one 4 MiB fill piece
// and pieces ending mid-row), that kept tensors and every key/value come back
// unchanged, and its errors (bad type, missing input, unwritable output).
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quantize.h"
#include "test_util.h"

namespace {

std::string temp(const char *tag) {
    return ::testing::TempDir() + "tg_qtool_" + tag + "_" + std::to_string(getpid()) + ".gguf";
}

struct src_tensor {
    std::string name;
    tg_type type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
    std::vector<float> values;  // F32 values of the elements (float types)
};

src_tensor make(std::mt19937 &rng, const std::string &name, tg_type t, std::vector<int64_t> ne) {
    src_tensor s{name, t, ne, {}, {}};
    int64_t n = 1;
    for (int64_t v : ne) n *= v;
    std::normal_distribution<float> nd(0.0f, 0.5f);
    s.bytes.resize((size_t)n * tg_type_size(t));
    for (int64_t i = 0; i < n; i++) {
        float v = nd(rng);
        if (t == TG_TYPE_F16) {
            const uint16_t h = tg_fp32_to_fp16(v);
            v = tg_fp16_to_fp32(h);
            memcpy(&s.bytes[(size_t)i * 2], &h, 2);
        } else if (t == TG_TYPE_I32) {
            const int32_t k = (int32_t)i;
            memcpy(&s.bytes[(size_t)i * 4], &k, 4);
        } else {
            memcpy(&s.bytes[(size_t)i * 4], &v, 4);
        }
        s.values.push_back(v);
    }
    return s;
}

TEST(QuantizeTool, QuantizesMatricesKeepsTheRest) {
    std::mt19937 rng(4);
    std::vector<src_tensor> ts;
    ts.push_back(make(rng, "token_embd.weight", TG_TYPE_F16, {256, 9}));
    ts.push_back(make(rng, "blk.0.attn_norm.weight", TG_TYPE_F32, {256}));
    ts.push_back(make(rng, "blk.0.ffn_norm.weight", TG_TYPE_F32, {64, 2}));  // a 2-D norm: kept
    ts.push_back(make(rng, "blk.0.attn_q.weight", TG_TYPE_F32, {512, 3, 2}));
    ts.push_back(make(rng, "odd.weight", TG_TYPE_F32, {48, 5}));  // 48: not a multiple of 32
    ts.push_back(make(rng, "ids", TG_TYPE_I32, {32, 2}));
    // rows of 2^20 + 256 elements (4.2 MB of F32 in, ~1.1 MB of q8_0 out): the
    // writer's 4 MiB pieces end inside rows
    ts.push_back(make(rng, "big.weight", TG_TYPE_F32, {(1 << 20) + 256, 4}));
    tg_gguf_writer *w = tg_gguf_writer_new();
    ASSERT_TRUE(w);
    ASSERT_EQ(TG_OK, tg_gguf_set_str(w, "general.architecture", "llama"));
    ASSERT_EQ(TG_OK, tg_gguf_set_u32(w, "general.alignment", 64));
    ASSERT_EQ(TG_OK, tg_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f));
    ASSERT_EQ(TG_OK, tg_gguf_set_i8(w, "x.i8", -3));
    ASSERT_EQ(TG_OK, tg_gguf_set_bool(w, "x.bool", true));
    const char *strs[3] = {"a", "", "ccc"};
    ASSERT_EQ(TG_OK, tg_gguf_set_arr_str(w, "x.strs", 3, strs));
    const int16_t arr[4] = {1, -2, 3, -4};
    ASSERT_EQ(TG_OK, tg_gguf_set_arr(w, "x.i16s", TG_GGUF_INT16, 4, arr));
    ASSERT_EQ(TG_OK, tg_gguf_set_u32(w, "general.file_type", 1));
    for (const src_tensor &s : ts)
        ASSERT_EQ(TG_OK, tg_gguf_add_tensor(w, s.name.c_str(), s.type, (int)s.ne.size(), s.ne.data(), s.bytes.data()))
            << tg_last_error();
    const std::string in = temp("in"), out = temp("out");
    ASSERT_EQ(TG_OK, tg_gguf_write(w, in.c_str())) << tg_last_error();
    tg_gguf_writer_free(w);

    for (tg_type qt : {TG_TYPE_Q8_0, TG_TYPE_Q4_0, TG_TYPE_Q4_K}) {
        SCOPED_TRACE(tg_type_name(qt));
        tgm::quantize_stats st;
        ASSERT_EQ(TG_OK, tgm::quantize_file(in.c_str(), out.c_str(), qt, nullptr, &st)) << tg_last_error();
        tg_gguf *g = tg_gguf_open(out.c_str());
        ASSERT_TRUE(g) << tg_last_error();
        // metadata: every key copied (file_type replaced), plus quantization_version
        const char *arch;
        float base;
        int64_t i8;
        bool b;
        uint32_t ft, qv;
        ASSERT_EQ(TG_OK, tg_gguf_get_str(g, "general.architecture", &arch));
        EXPECT_STREQ("llama", arch);
        ASSERT_EQ(TG_OK, tg_gguf_get_f32(g, "llama.rope.freq_base", &base));
        EXPECT_EQ(10000.0f, base);
        ASSERT_EQ(TG_OK, tg_gguf_get_i64(g, "x.i8", &i8));
        EXPECT_EQ(-3, i8);
        EXPECT_EQ(TG_GGUF_INT8, tg_gguf_kv_type(g, tg_gguf_find_key(g, "x.i8")));
        ASSERT_EQ(TG_OK, tg_gguf_get_bool(g, "x.bool", &b));
        EXPECT_TRUE(b);
        const char *s2;
        ASSERT_EQ(TG_OK, tg_gguf_get_arr_str(g, "x.strs", 2, &s2));
        EXPECT_STREQ("ccc", s2);
        const void *ad;
        uint64_t an;
        tg_gguf_type at;
        ASSERT_EQ(TG_OK, tg_gguf_get_arr(g, "x.i16s", &at, &an, &ad));
        EXPECT_EQ(TG_GGUF_INT16, at);
        EXPECT_EQ(0, memcmp(ad, arr, sizeof arr));
        EXPECT_EQ(64u, tg_gguf_alignment(g));
        ASSERT_EQ(TG_OK, tg_gguf_get_u32(g, "general.file_type", &ft));
        EXPECT_EQ(qt == TG_TYPE_Q8_0 ? 7u : qt == TG_TYPE_Q4_0 ? 2u : 14u, ft);
        ASSERT_EQ(TG_OK, tg_gguf_get_u32(g, "general.quantization_version", &qv));
        EXPECT_EQ(2u, qv);
        EXPECT_EQ(8 + 1, tg_gguf_n_kv(g));

        // tensors: in order, the wanted ones quantized row by row
        ASSERT_EQ((int64_t)ts.size(), tg_gguf_n_tensors(g));
        int nq = 0;
        for (size_t i = 0; i < ts.size(); i++) {
            const src_tensor &s = ts[i];
            SCOPED_TRACE(s.name);
            const char *name;
            tg_type t;
            int nd;
            int64_t ne[4];
            size_t nbytes;
            ASSERT_EQ(TG_OK, tg_gguf_tensor_info(g, (int64_t)i, &name, &t, &nd, ne, &nbytes));
            EXPECT_EQ(s.name, name);
            EXPECT_EQ((int)s.ne.size(), nd);
            const bool want = tgm::quantize_wanted(s.name.c_str(), s.type, (int)s.ne.size(), s.ne.data(), qt);
            const bool expect = s.name == "token_embd.weight" || s.name == "blk.0.attn_q.weight" || s.name == "big.weight";
            EXPECT_EQ(expect && (qt != TG_TYPE_Q4_K || s.ne[0] % 256 == 0), want);
            const uint8_t *data = (const uint8_t *)tg_gguf_tensor_data(g, (int64_t)i);
            if (!want) {
                EXPECT_EQ(s.type, t);
                ASSERT_EQ(s.bytes.size(), nbytes);
                EXPECT_EQ(0, memcmp(s.bytes.data(), data, nbytes));
                continue;
            }
            nq++;
            EXPECT_EQ(qt, t);
            std::vector<uint8_t> q(tg_row_size(qt, (int64_t)s.values.size()));
            ASSERT_EQ(TG_OK, tg_quantize(qt, s.values.data(), q.data(), (int64_t)s.values.size()));
            ASSERT_EQ(q.size(), nbytes);
            EXPECT_EQ(0, memcmp(q.data(), data, nbytes));
        }
        EXPECT_EQ(nq, st.n_quantized);
        EXPECT_EQ((int)ts.size() - nq, st.n_kept);
        tg_gguf_close(g);
    }
    std::remove(in.c_str());
    std::remove(out.c_str());
}

TEST(QuantizeTool, Errors) {
    const std::string out = temp("err");
    EXPECT_EQ(TG_ERR_ARG, tgm::quantize_file("x.gguf", out.c_str(), TG_TYPE_F16, nullptr, nullptr));
    EXPECT_NE(nullptr, strstr(tg_last_error(), "[quantize] type f16 is not q8_0, q4_0 or q4_k")) << tg_last_error();
    EXPECT_NE(TG_OK, tgm::quantize_file("/no/such/file.gguf", out.c_str(), TG_TYPE_Q8_0, nullptr, nullptr));
    EXPECT_NE(nullptr, strstr(tg_last_error(), "[quantize] [gguf_open] '/no/such/file.gguf'")) << tg_last_error();
    EXPECT_NE(0, access(out.c_str(), F_OK));
    const std::string src = std::string(TG_SOURCE_DIR) + "/models/llama-recall.gguf";
    EXPECT_NE(TG_OK, tgm::quantize_file(src.c_str(), "/no/such/dir/out.gguf", TG_TYPE_Q8_0, nullptr, nullptr));
    EXPECT_NE(nullptr, strstr(tg_last_error(), "[quantize]")) << tg_last_error();
    // the input under another name (a link; ./x for x): refused, the input as it was (the tool's
    // own check compared the strings only, and the write replaced the input)
    const std::string in = temp("alias_in"), link = temp("alias_link");
    {
        FILE *a = fopen(src.c_str(), "rb"), *b = fopen(in.c_str(), "wb");
        ASSERT_TRUE(a && b);
        char buf[65536];
        for (size_t n; (n = fread(buf, 1, sizeof buf, a)) > 0;) ASSERT_EQ(n, fwrite(buf, 1, n, b));
        fclose(a);
        fclose(b);
    }
    ASSERT_EQ(0, symlink(in.c_str(), link.c_str()));
    struct stat before, after;
    ASSERT_EQ(0, stat(in.c_str(), &before));
    const std::string dot = in.substr(0, in.rfind('/') + 1) + "./" + in.substr(in.rfind('/') + 1);
    for (const std::string &out_alias : {link, dot}) {
        EXPECT_EQ(TG_ERR_ARG, tgm::quantize_file(in.c_str(), out_alias.c_str(), TG_TYPE_Q8_0, nullptr, nullptr));
        EXPECT_NE(nullptr, strstr(tg_last_error(), "is the input file")) << tg_last_error();
        ASSERT_EQ(0, stat(in.c_str(), &after));
        EXPECT_EQ(before.st_ino, after.st_ino);
        EXPECT_EQ(before.st_size, after.st_size);
        EXPECT_EQ(before.st_mtime, after.st_mtime);
    }
    std::remove(link.c_str());
    std::remove(in.c_str());
    tg_type t;
    EXPECT_TRUE(tgm::quantize_type_from_name("Q4_K", &t));
    EXPECT_EQ(TG_TYPE_Q4_K, t);
    EXPECT_FALSE(tgm::quantize_type_from_name("q4_1", &t));
    EXPECT_FALSE(tgm::quantize_type_from_name("f16", &t));
}

}  // namespace
