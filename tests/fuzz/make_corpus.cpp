// make_corpus.cpp - writes the GGUF fuzzer's seed corpus: small valid files
// (each under 4096 bytes, the fuzzer's -max_len) that between them use every
// value type, arrays, every tensor type (the quantized ones too), 1..4 dims
// and custom alignments, plus two malformed quantized files (a bad block
// count, a cut-off block) for the reader's error paths.
// The files are committed under tests/fuzz/corpus/; regenerate with
//   g++ -std=c++17 -Isrc tests/fuzz/make_corpus.cpp src/gguf_*.cpp src/error.cpp -o mk && ./mk tests/fuzz/corpus
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tinygml.h"

static int g_failed = 0;

static void check(tg_status st) {
    if (st != TG_OK) {
        fprintf(stderr, "make_corpus: %s\n", tg_last_error());
        g_failed = 1;
    }
}

static void save(tg_gguf_writer *w, const std::string &dir, const char *name) {
    void *data = nullptr;
    size_t size = 0;
    check(tg_gguf_write_memory(w, &data, &size));
    if (data) {
        std::string path = dir + "/" + name + ".gguf";
        FILE *f = fopen(path.c_str(), "wb");
        if (!f || fwrite(data, 1, size, f) != size) {
            fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
            g_failed = 1;
        }
        if (f) fclose(f);
        printf("%s: %zu bytes\n", path.c_str(), size);
        tg_gguf_free_memory(data);
    }
    tg_gguf_writer_free(w);
}

static void save_bytes(const std::vector<unsigned char> &f, const std::string &dir, const char *name) {
    std::string path = dir + "/" + name + ".gguf";
    FILE *fp = fopen(path.c_str(), "wb");
    if (!fp || fwrite(f.data(), 1, f.size(), fp) != f.size()) {
        fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
        g_failed = 1;
    }
    if (fp) fclose(fp);
    printf("%s: %zu bytes\n", path.c_str(), f.size());
}

// Deterministic filler bytes for tensor data.
static std::vector<unsigned char> pattern(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
    return v;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    tg_gguf_writer *w;

    w = tg_gguf_writer_new();  // the smallest: one string
    check(tg_gguf_set_str(w, "general.architecture", "llama"));
    save(w, dir, "kv_string");

    w = tg_gguf_writer_new();  // every scalar type
    check(tg_gguf_set_u8(w, "u8", 200));
    check(tg_gguf_set_i8(w, "i8", -100));
    check(tg_gguf_set_u16(w, "u16", 60000));
    check(tg_gguf_set_i16(w, "i16", -30000));
    check(tg_gguf_set_u32(w, "u32", 4000000000u));
    check(tg_gguf_set_i32(w, "i32", -2000000000));
    check(tg_gguf_set_u64(w, "u64", 1ull << 63));
    check(tg_gguf_set_i64(w, "i64", -(1ll << 62)));
    check(tg_gguf_set_f32(w, "f32", 1e-5f));
    check(tg_gguf_set_f64(w, "f64", 10000.0));
    check(tg_gguf_set_bool(w, "bool", true));
    check(tg_gguf_set_str(w, "str", "hello"));
    save(w, dir, "kv_scalars");

    w = tg_gguf_writer_new();  // arrays of every element type
    {
        const unsigned char bytes[8] = {0, 1, 2, 3, 250, 251, 252, 253};
        const unsigned char bools[3] = {1, 0, 1};
        const float f32[3] = {0.5f, -1.0f, 3.25f};
        const double f64[2] = {1e-300, -2.0};
        const uint64_t u64[2] = {1, UINT64_MAX};
        const char *strs[5] = {"<s>", "</s>", "", "a b", "\xe2\x96\x81x"};
        check(tg_gguf_set_arr(w, "a.u8", TG_GGUF_UINT8, 8, bytes));
        check(tg_gguf_set_arr(w, "a.i8", TG_GGUF_INT8, 8, bytes));
        check(tg_gguf_set_arr(w, "a.u16", TG_GGUF_UINT16, 4, bytes));
        check(tg_gguf_set_arr(w, "a.i16", TG_GGUF_INT16, 4, bytes));
        check(tg_gguf_set_arr(w, "a.u32", TG_GGUF_UINT32, 2, bytes));
        check(tg_gguf_set_arr(w, "a.i32", TG_GGUF_INT32, 2, bytes));
        check(tg_gguf_set_arr(w, "a.f32", TG_GGUF_FLOAT32, 3, f32));
        check(tg_gguf_set_arr(w, "a.bool", TG_GGUF_BOOL, 3, bools));
        check(tg_gguf_set_arr(w, "a.u64", TG_GGUF_UINT64, 2, u64));
        check(tg_gguf_set_arr(w, "a.i64", TG_GGUF_INT64, 1, bytes));
        check(tg_gguf_set_arr(w, "a.f64", TG_GGUF_FLOAT64, 2, f64));
        check(tg_gguf_set_arr(w, "a.empty", TG_GGUF_UINT32, 0, nullptr));
        check(tg_gguf_set_arr_str(w, "a.str", 5, strs));
    }
    save(w, dir, "kv_arrays");

    w = tg_gguf_writer_new();  // one tensor of each type, 1..4 dims
    {
        const int64_t ne1[1] = {8}, ne2[2] = {4, 3}, ne3[3] = {2, 3, 2}, ne4[4] = {2, 1, 3, 2};
        std::vector<unsigned char> d = pattern(256, 1);
        check(tg_gguf_add_tensor(w, "f32", TG_TYPE_F32, 1, ne1, d.data()));
        check(tg_gguf_add_tensor(w, "f16", TG_TYPE_F16, 2, ne2, d.data()));
        check(tg_gguf_add_tensor(w, "bf16", TG_TYPE_BF16, 3, ne3, d.data()));
        check(tg_gguf_add_tensor(w, "i32", TG_TYPE_I32, 4, ne4, d.data()));
    }
    save(w, dir, "tensors_types");

    const uint32_t aligns[2] = {8, 64};
    for (uint32_t a : aligns) {  // custom alignments with odd-sized tensors
        w = tg_gguf_writer_new();
        check(tg_gguf_set_u32(w, "general.alignment", a));
        const int64_t ne_a[1] = {3}, ne_b[2] = {5, 1};
        std::vector<unsigned char> d = pattern(64, a);
        check(tg_gguf_add_tensor(w, "a", TG_TYPE_F16, 1, ne_a, d.data()));
        check(tg_gguf_add_tensor(w, "b", TG_TYPE_F32, 2, ne_b, d.data()));
        save(w, dir, a == 8 ? "align_8" : "align_64");
    }

    w = tg_gguf_writer_new();  // a llama-shaped toy: the keys a model loader reads
    {
        check(tg_gguf_set_str(w, "general.architecture", "llama"));
        check(tg_gguf_set_str(w, "general.name", "toy"));
        check(tg_gguf_set_u32(w, "llama.block_count", 1));
        check(tg_gguf_set_u32(w, "llama.context_length", 64));
        check(tg_gguf_set_u32(w, "llama.embedding_length", 8));
        check(tg_gguf_set_u32(w, "llama.feed_forward_length", 16));
        check(tg_gguf_set_u32(w, "llama.attention.head_count", 2));
        check(tg_gguf_set_u32(w, "llama.attention.head_count_kv", 1));
        check(tg_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
        check(tg_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f));
        check(tg_gguf_set_str(w, "tokenizer.ggml.model", "byte"));
        const char *toks[4] = {"\\x00", "a", "b", "c"};
        check(tg_gguf_set_arr_str(w, "tokenizer.ggml.tokens", 4, toks));
        const int64_t emb[2] = {8, 4}, norm[1] = {8}, wq[2] = {8, 8}, wk[2] = {8, 4};
        std::vector<unsigned char> d = pattern(256, 7);
        check(tg_gguf_add_tensor(w, "token_embd.weight", TG_TYPE_F16, 2, emb, d.data()));
        check(tg_gguf_add_tensor(w, "blk.0.attn_norm.weight", TG_TYPE_F32, 1, norm, d.data()));
        check(tg_gguf_add_tensor(w, "blk.0.attn_q.weight", TG_TYPE_BF16, 2, wq, d.data()));
        check(tg_gguf_add_tensor(w, "blk.0.attn_k.weight", TG_TYPE_F16, 2, wk, d.data()));
        check(tg_gguf_add_tensor(w, "output_norm.weight", TG_TYPE_F32, 1, norm, d.data()));
    }
    save(w, dir, "toy_llama");

    // quantized tensors: the three block types (rows of 2, 3 and 1 blocks) at
    // alignment 64, then copies with a bad block count (ne[0] 33, not a
    // multiple of q8_0's 32) and with the last block cut off (data section
    // 18 bytes short)
    w = tg_gguf_writer_new();
    check(tg_gguf_set_u32(w, "general.alignment", 64));
    {
        const int64_t q8[2] = {64, 2}, q4[2] = {96, 3}, qk[2] = {256, 1};
        std::vector<unsigned char> d = pattern(1024, 3);
        check(tg_gguf_add_tensor(w, "q8_0", TG_TYPE_Q8_0, 2, q8, d.data()));
        check(tg_gguf_add_tensor(w, "q4_k", TG_TYPE_Q4_K, 2, qk, d.data()));
        check(tg_gguf_add_tensor(w, "q4_0", TG_TYPE_Q4_0, 2, q4, d.data()));
    }
    void *qdata = nullptr;
    size_t qsize = 0;
    check(tg_gguf_write_memory(w, &qdata, &qsize));
    save(w, dir, "tensors_quant");
    if (qdata) {
        std::vector<unsigned char> f((unsigned char *)qdata, (unsigned char *)qdata + qsize);
        tg_gguf_free_memory(qdata);
        // tensor info of "q8_0": u64 name length 4, the name, u32 n_dims, then ne[0]
        const unsigned char tag[12] = {4, 0, 0, 0, 0, 0, 0, 0, 'q', '8', '_', '0'};
        size_t at = 0;
        while (at + 12 <= f.size() && memcmp(&f[at], tag, 12) != 0) at++;
        if (at + 24 <= f.size()) {
            std::vector<unsigned char> bad = f;
            const uint64_t ne0 = 33;
            memcpy(&bad[at + 16], &ne0, 8);
            save_bytes(bad, dir, "bad_quant_blocks");
        } else {
            fprintf(stderr, "make_corpus: tensor info of q8_0 not found\n");
            g_failed = 1;
        }
        // the end of the last tensor's bytes (tensor 0 starts the data section)
        tg_gguf *g = tg_gguf_open_memory(f.data(), f.size());
        size_t end = 0, nbytes = 0;
        if (g && tg_gguf_tensor_info(g, 2, nullptr, nullptr, nullptr, nullptr, &nbytes) == TG_OK)
            end = tg_gguf_data_offset(g) +
                  (size_t)((const char *)tg_gguf_tensor_data(g, 2) - (const char *)tg_gguf_tensor_data(g, 0)) + nbytes;
        tg_gguf_close(g);
        if (end > 18 && end <= f.size()) {
            f.resize(end - 18);
            save_bytes(f, dir, "bad_quant_short");
        } else {
            fprintf(stderr, "make_corpus: cannot find the end of the quantized file's data\n");
            g_failed = 1;
        }
    }

    return g_failed;
}
