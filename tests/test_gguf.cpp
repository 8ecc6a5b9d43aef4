// test_gguf.cpp - the GGUF reader and writer: round trips of every value and
// tensor type, alignment, getters and writer misuse. Malformed files are in
// test_gguf_bad.cpp; both use the byte-exact builders of gguf_builder.h.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "gguf_builder.h"
#include "test_util.h"

using namespace gguf_test;

// ---------------------------------------------------------------------------
// Round trips

// tg_gguf_write with the process's file size limit at `limit` bytes (SIGXFSZ
// ignored, so a write past it fails with EFBIG), both restored after.
static tg_status write_under_size_limit(tg_gguf_writer *w, const std::string &path, rlim_t limit) {
    struct rlimit old_lim;
    if (getrlimit(RLIMIT_FSIZE, &old_lim) != 0) return TG_ERR_IO;
    struct rlimit lim = old_lim;
    lim.rlim_cur = limit;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return TG_ERR_IO;
    const tg_status st = tg_gguf_write(w, path.c_str());
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_handler);
    return st;
}

TEST(GgufRoundTrip, AllScalarTypes) {
    WriterPtr w(tg_gguf_writer_new());
    ASSERT_TRUE(w);
    ASSERT_EQ(tg_gguf_set_u8(w.get(), "u8", 200), TG_OK);
    ASSERT_EQ(tg_gguf_set_i8(w.get(), "i8", -100), TG_OK);
    ASSERT_EQ(tg_gguf_set_u16(w.get(), "u16", 60000), TG_OK);
    ASSERT_EQ(tg_gguf_set_i16(w.get(), "i16", -30000), TG_OK);
    ASSERT_EQ(tg_gguf_set_u32(w.get(), "u32", 4000000000u), TG_OK);
    ASSERT_EQ(tg_gguf_set_i32(w.get(), "i32", -2000000000), TG_OK);
    ASSERT_EQ(tg_gguf_set_u64(w.get(), "u64", (1ull << 63) + 5), TG_OK);
    ASSERT_EQ(tg_gguf_set_i64(w.get(), "i64", -(1ll << 62)), TG_OK);
    ASSERT_EQ(tg_gguf_set_f32(w.get(), "f32", 3.5f), TG_OK);
    ASSERT_EQ(tg_gguf_set_f64(w.get(), "f64", -1e300), TG_OK);
    ASSERT_EQ(tg_gguf_set_bool(w.get(), "bool", true), TG_OK);
    ASSERT_EQ(tg_gguf_set_str(w.get(), "str", "hello \xc3\xbcnicode"), TG_OK);

    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g) << tg_last_error();
    EXPECT_EQ(tg_gguf_version(g.get()), 3u);
    EXPECT_EQ(tg_gguf_alignment(g.get()), 32u);
    EXPECT_EQ(tg_gguf_n_tensors(g.get()), 0);
    ASSERT_EQ(tg_gguf_n_kv(g.get()), 12);
    const char *keys[] = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "str"};
    const tg_gguf_type types[] = {TG_GGUF_UINT8,  TG_GGUF_INT8,    TG_GGUF_UINT16,  TG_GGUF_INT16,
                                  TG_GGUF_UINT32, TG_GGUF_INT32,   TG_GGUF_UINT64,  TG_GGUF_INT64,
                                  TG_GGUF_FLOAT32, TG_GGUF_FLOAT64, TG_GGUF_BOOL,   TG_GGUF_STRING};
    for (int i = 0; i < 12; i++) {
        EXPECT_STREQ(tg_gguf_kv_key(g.get(), i), keys[i]);
        EXPECT_EQ(tg_gguf_kv_type(g.get(), i), types[i]) << keys[i];
        EXPECT_EQ(tg_gguf_find_key(g.get(), keys[i]), i);
    }
    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    float f = 0;
    double d = 0;
    bool b = false;
    const char *s = nullptr;
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "u8", &u32), TG_OK);
    EXPECT_EQ(u32, 200u);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "i8", &i32), TG_OK);
    EXPECT_EQ(i32, -100);
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "u16", &u32), TG_OK);
    EXPECT_EQ(u32, 60000u);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "i16", &i32), TG_OK);
    EXPECT_EQ(i32, -30000);
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "u32", &u32), TG_OK);
    EXPECT_EQ(u32, 4000000000u);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "i32", &i32), TG_OK);
    EXPECT_EQ(i32, -2000000000);
    EXPECT_EQ(tg_gguf_get_u64(g.get(), "u64", &u64), TG_OK);
    EXPECT_EQ(u64, (1ull << 63) + 5);
    EXPECT_EQ(tg_gguf_get_i64(g.get(), "i64", &i64), TG_OK);
    EXPECT_EQ(i64, -(1ll << 62));
    EXPECT_EQ(tg_gguf_get_f32(g.get(), "f32", &f), TG_OK);
    EXPECT_EQ(f, 3.5f);
    EXPECT_EQ(tg_gguf_get_f64(g.get(), "f64", &d), TG_OK);
    EXPECT_EQ(d, -1e300);
    EXPECT_EQ(tg_gguf_get_bool(g.get(), "bool", &b), TG_OK);
    EXPECT_TRUE(b);
    EXPECT_EQ(tg_gguf_get_str(g.get(), "str", &s), TG_OK);
    EXPECT_STREQ(s, "hello \xc3\xbcnicode");
}

TEST(GgufRoundTrip, Arrays) {
    std::mt19937 rng(7);
    WriterPtr w(tg_gguf_writer_new());
    const tg_gguf_type numeric[] = {TG_GGUF_UINT8,   TG_GGUF_INT8,  TG_GGUF_UINT16, TG_GGUF_INT16,
                                    TG_GGUF_UINT32,  TG_GGUF_INT32, TG_GGUF_FLOAT32, TG_GGUF_BOOL,
                                    TG_GGUF_UINT64,  TG_GGUF_INT64, TG_GGUF_FLOAT64};
    std::vector<std::vector<uint8_t>> payloads;
    for (tg_gguf_type t : numeric) {
        size_t es = t == TG_GGUF_UINT8 || t == TG_GGUF_INT8 || t == TG_GGUF_BOOL ? 1
                    : t == TG_GGUF_UINT16 || t == TG_GGUF_INT16                  ? 2
                    : t == TG_GGUF_UINT64 || t == TG_GGUF_INT64 || t == TG_GGUF_FLOAT64 ? 8
                                                                                        : 4;
        std::vector<uint8_t> p = random_bytes(rng, 17 * es);
        if (t == TG_GGUF_BOOL)
            for (auto &x : p) x &= 1;
        ASSERT_EQ(tg_gguf_set_arr(w.get(), (std::string("arr.") + tg_gguf_type_name(t)).c_str(), t, 17, p.data()),
                  TG_OK)
            << tg_last_error();
        payloads.push_back(p);
    }
    const char *strs[] = {"", "a", "tokens with spaces", "\xe2\x96\x81the"};
    std::string long_str(1000, 'x');
    ASSERT_EQ(tg_gguf_set_arr_str(w.get(), "arr.str", 4, strs), TG_OK);
    const char *one[] = {long_str.c_str()};
    ASSERT_EQ(tg_gguf_set_arr_str(w.get(), "arr.long", 1, one), TG_OK);
    ASSERT_EQ(tg_gguf_set_arr(w.get(), "arr.empty", TG_GGUF_FLOAT32, 0, nullptr), TG_OK);
    ASSERT_EQ(tg_gguf_set_arr_str(w.get(), "arr.empty_str", 0, nullptr), TG_OK);

    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g) << tg_last_error();
    for (size_t i = 0; i < payloads.size(); i++) {
        std::string key = std::string("arr.") + tg_gguf_type_name(numeric[i]);
        tg_gguf_type et = TG_GGUF_INVALID;
        uint64_t n = 0;
        const void *data = nullptr;
        ASSERT_EQ(tg_gguf_get_arr(g.get(), key.c_str(), &et, &n, &data), TG_OK) << tg_last_error();
        EXPECT_EQ(tg_gguf_kv_type(g.get(), tg_gguf_find_key(g.get(), key.c_str())), TG_GGUF_ARRAY);
        EXPECT_EQ(et, numeric[i]);
        ASSERT_EQ(n, 17u);
        EXPECT_EQ((uintptr_t)data % (payloads[i].size() / 17), 0u) << "element alignment of " << key;
        EXPECT_EQ(memcmp(data, payloads[i].data(), payloads[i].size()), 0) << key;
    }
    tg_gguf_type et;
    uint64_t n;
    const void *data = &n;
    ASSERT_EQ(tg_gguf_get_arr(g.get(), "arr.str", &et, &n, &data), TG_OK);
    EXPECT_EQ(et, TG_GGUF_STRING);
    EXPECT_EQ(n, 4u);
    EXPECT_EQ(data, nullptr);
    for (uint64_t i = 0; i < 4; i++) {
        const char *s = nullptr;
        ASSERT_EQ(tg_gguf_get_arr_str(g.get(), "arr.str", i, &s), TG_OK);
        EXPECT_STREQ(s, strs[i]);
    }
    const char *s = nullptr;
    ASSERT_EQ(tg_gguf_get_arr_str(g.get(), "arr.long", 0, &s), TG_OK);
    EXPECT_EQ(s, long_str);
    ASSERT_EQ(tg_gguf_get_arr(g.get(), "arr.empty", &et, &n, &data), TG_OK);
    EXPECT_EQ(et, TG_GGUF_FLOAT32);
    EXPECT_EQ(n, 0u);
    ASSERT_EQ(tg_gguf_get_arr(g.get(), "arr.empty_str", &et, &n, nullptr), TG_OK);
    EXPECT_EQ(et, TG_GGUF_STRING);
    EXPECT_EQ(n, 0u);
}

// Tensors of every type with random bytes; alignment a (0: default).
static void tensor_round_trip(uint32_t a) {
    std::mt19937 rng(42 + a);
    struct Case {
        const char *name;
        tg_type type;
        int n_dims;
        int64_t ne[4];
    } cases[] = {
        {"blk.0.attn_q.weight", TG_TYPE_F32, 2, {7, 3, 1, 1}},
        {"blk.0.ffn_up.weight", TG_TYPE_F16, 3, {5, 2, 3, 1}},
        {"state", TG_TYPE_BF16, 4, {4, 1, 2, 3}},
        {"ids", TG_TYPE_I32, 1, {33, 1, 1, 1}},
        {"scalar", TG_TYPE_F32, 1, {1, 1, 1, 1}},
    };
    WriterPtr w(tg_gguf_writer_new());
    if (a) {
        ASSERT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", a), TG_OK);
    }
    ASSERT_EQ(tg_gguf_set_str(w.get(), "general.architecture", "llama"), TG_OK);
    std::vector<std::vector<uint8_t>> datas;
    for (const Case &c : cases) {
        size_t n = tg_type_size(c.type);
        for (int d = 0; d < c.n_dims; d++) n *= (size_t)c.ne[d];
        datas.push_back(random_bytes(rng, n));
        ASSERT_EQ(tg_gguf_add_tensor(w.get(), c.name, c.type, c.n_dims, c.ne, datas.back().data()), TG_OK)
            << tg_last_error();
    }
    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g) << tg_last_error();
    const size_t align = a ? a : 32;
    EXPECT_EQ(tg_gguf_alignment(g.get()), align);
    EXPECT_EQ(tg_gguf_data_offset(g.get()) % align, 0u);
    ASSERT_EQ(tg_gguf_n_tensors(g.get()), 5);
    const char *base = (const char *)tg_gguf_tensor_data(g.get(), 0);
    for (int i = 0; i < 5; i++) {
        const char *name = nullptr;
        tg_type type = TG_TYPE_COUNT;
        int n_dims = 0;
        int64_t ne[4] = {0, 0, 0, 0};
        size_t nbytes = 0;
        ASSERT_EQ(tg_gguf_tensor_info(g.get(), i, &name, &type, &n_dims, ne, &nbytes), TG_OK);
        EXPECT_STREQ(name, cases[i].name);
        EXPECT_EQ(type, cases[i].type);
        EXPECT_EQ(n_dims, cases[i].n_dims);
        for (int d = 0; d < 4; d++) EXPECT_EQ(ne[d], cases[i].ne[d]) << name << " dim " << d;
        ASSERT_EQ(nbytes, datas[i].size());
        const char *p = (const char *)tg_gguf_tensor_data(g.get(), i);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ((uintptr_t)p % std::min<size_t>(align, 64), 0u) << name;
        EXPECT_EQ((size_t)(p - base) % align, 0u) << name;  // file offset is a multiple of the alignment
        EXPECT_EQ(memcmp(p, datas[i].data(), nbytes), 0) << name;
        EXPECT_EQ(tg_gguf_find_tensor(g.get(), cases[i].name), i);
    }
    EXPECT_EQ(tg_gguf_find_tensor(g.get(), "absent"), -1);
}

TEST(GgufRoundTrip, TensorsAllTypes) { tensor_round_trip(0); }
TEST(GgufRoundTrip, CustomAlignment64) { tensor_round_trip(64); }
TEST(GgufRoundTrip, CustomAlignment8) { tensor_round_trip(8); }

TEST(GgufRoundTrip, FileEqualsMemory) {
    WriterPtr w(tg_gguf_writer_new());
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t ne[2] = {3, 2};
    ASSERT_EQ(tg_gguf_set_str(w.get(), "general.name", "tiny"), TG_OK);
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 2, ne, x), TG_OK);
    std::vector<uint8_t> mem = to_bytes(w.get());
    std::string path = temp_path("rt");
    ASSERT_EQ(tg_gguf_write(w.get(), path.c_str()), TG_OK) << tg_last_error();
    FILE *f = fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::vector<uint8_t> disk(mem.size() + 16);
    disk.resize(fread(disk.data(), 1, disk.size(), f));
    fclose(f);
    EXPECT_EQ(disk, mem);
    GgufPtr g(tg_gguf_open(path.c_str()));
    remove(path.c_str());
    ASSERT_TRUE(g) << tg_last_error();
    EXPECT_EQ(memcmp(tg_gguf_tensor_data(g.get(), 0), x, sizeof(x)), 0);
}

// The writer's bytes against the spec, written out by hand.
TEST(GgufRoundTrip, WriterIsByteExact) {
    WriterPtr w(tg_gguf_writer_new());
    float x[2] = {1.0f, 2.0f};
    int64_t ne[1] = {2};
    ASSERT_EQ(tg_gguf_set_u32(w.get(), "a", 7), TG_OK);
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "t", TG_TYPE_F32, 1, ne, x), TG_OK);
    Bytes want = header(1, 1);
    want.add(kv_u32("a", 7)).add(tinfo(TI{"t", {2}, 0, 0})).pad(32).raw(x, 8).pad(32);
    EXPECT_EQ(want.b.size(), 128u);
    EXPECT_EQ(to_bytes(w.get()), want.b);
}

// A hand-built file: default alignment, two tensors in reverse offset order,
// ggml type ids for BF16 and I32, and no trailing padding after the data.
TEST(GgufRoundTrip, ReadsHandBuiltFile) {
    Bytes kvs = kv_str("general.architecture", "llama");
    std::vector<uint8_t> f = file_with({TI{"b", {2, 2}, 30, 32}, TI{"a", {3}, 26, 0}}, 40, kvs, 1);
    for (size_t i = 0; i < 40; i++) f[f.size() - 40 + i] = (uint8_t)i;
    GgufPtr g = open_mem(f);
    ASSERT_TRUE(g) << tg_last_error();
    tg_type type;
    ASSERT_EQ(tg_gguf_tensor_info(g.get(), 0, nullptr, &type, nullptr, nullptr, nullptr), TG_OK);
    EXPECT_EQ(type, TG_TYPE_BF16);
    ASSERT_EQ(tg_gguf_tensor_info(g.get(), 1, nullptr, &type, nullptr, nullptr, nullptr), TG_OK);
    EXPECT_EQ(type, TG_TYPE_I32);
    EXPECT_EQ(tg_gguf_data_offset(g.get()), f.size() - 40);
    EXPECT_EQ(((const uint8_t *)tg_gguf_tensor_data(g.get(), 0))[0], 32);
    EXPECT_EQ(((const uint8_t *)tg_gguf_tensor_data(g.get(), 1))[11], 11);
    // A 63-byte name is fine; no tensors means no data section is needed.
    EXPECT_TRUE(open_mem(one_tensor(TI{std::string(63, 'n'), {8}, 0, 0})));
    EXPECT_TRUE(open_mem(header(0, 1).add(kv_str("k", "v")).b));
}

// ---------------------------------------------------------------------------
// Getters

TEST(GgufGetters, IntegerConversions) {
    WriterPtr w(tg_gguf_writer_new());
    tg_gguf_set_i32(w.get(), "neg", -1);
    tg_gguf_set_u64(w.get(), "big", 1ull << 40);
    tg_gguf_set_u64(w.get(), "huge", UINT64_MAX);
    tg_gguf_set_i64(w.get(), "min", INT64_MIN);
    tg_gguf_set_u8(w.get(), "small", 7);
    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g);
    uint32_t u32 = 99;
    int32_t i32 = 99;
    uint64_t u64 = 99;
    int64_t i64 = 99;
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "neg", &u32), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_get_u32] key 'neg': value -1 (int32) does not fit in uint32"))
        << tg_last_error();
    EXPECT_EQ(u32, 99u);  // untouched on error
    EXPECT_EQ(tg_gguf_get_u64(g.get(), "neg", &u64), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_i64(g.get(), "neg", &i64), TG_OK);
    EXPECT_EQ(i64, -1);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "big", &i32), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "1099511627776 (uint64) does not fit in int32")) << tg_last_error();
    EXPECT_EQ(tg_gguf_get_i64(g.get(), "big", &i64), TG_OK);
    EXPECT_EQ(i64, 1ll << 40);
    EXPECT_EQ(tg_gguf_get_i64(g.get(), "huge", &i64), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_u64(g.get(), "huge", &u64), TG_OK);
    EXPECT_EQ(u64, UINT64_MAX);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "min", &i32), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_i64(g.get(), "min", &i64), TG_OK);
    EXPECT_EQ(i64, INT64_MIN);
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "small", &u32), TG_OK);
    EXPECT_EQ(tg_gguf_get_i32(g.get(), "small", &i32), TG_OK);
    EXPECT_EQ(u32 + (uint32_t)i32, 14u);
}

TEST(GgufGetters, WrongTypesMissingKeysAndMisuse) {
    WriterPtr w(tg_gguf_writer_new());
    tg_gguf_set_str(w.get(), "s", "text");
    tg_gguf_set_f64(w.get(), "f64", 0.25);
    tg_gguf_set_f64(w.get(), "f64.big", 1e300);
    tg_gguf_set_f32(w.get(), "f32", -2.5f);
    const uint32_t arr[3] = {1, 2, 3};
    tg_gguf_set_arr(w.get(), "arr", TG_GGUF_UINT32, 3, arr);
    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g);
    uint32_t u32;
    float f;
    double d;
    bool b;
    const char *s;
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "s", &u32), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_get_u32] key 's' has type string, expected an integer type"));
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "nope", &u32), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_get_u32] key 'nope' not found"));
    EXPECT_EQ(tg_gguf_get_f32(g.get(), "f64", &f), TG_OK);
    EXPECT_EQ(f, 0.25f);
    EXPECT_EQ(tg_gguf_get_f64(g.get(), "f32", &d), TG_OK);
    EXPECT_EQ(d, -2.5);
    EXPECT_EQ(tg_gguf_get_f32(g.get(), "f64.big", &f), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "does not fit in float32"));
    EXPECT_EQ(tg_gguf_get_f32(g.get(), "arr", &f), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_get_f32] key 'arr' has type array"));
    EXPECT_EQ(tg_gguf_get_bool(g.get(), "s", &b), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_str(g.get(), "f32", &s), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_arr(g.get(), "s", nullptr, nullptr, nullptr), TG_ERR_FORMAT);
    EXPECT_EQ(tg_gguf_get_arr_str(g.get(), "arr", 0, &s), TG_ERR_FORMAT);
    EXPECT_TRUE(has(tg_last_error(), "is an array of uint32, expected array of string"));
    // misuse: NULL handles and outputs, indices out of range
    EXPECT_EQ(tg_gguf_get_u32(nullptr, "s", &u32), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_get_u32] the gguf handle is NULL"));
    EXPECT_EQ(tg_gguf_get_u32(g.get(), nullptr, &u32), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_get_u32(g.get(), "s", nullptr), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_kv_key(g.get(), 5), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_kv_key] kv index 5 out of range [0, 5)"));
    EXPECT_EQ(tg_gguf_kv_type(g.get(), -1), TG_GGUF_INVALID);
    EXPECT_EQ(tg_gguf_find_key(g.get(), nullptr), -1);
    EXPECT_EQ(tg_gguf_find_key(nullptr, "s"), -1);
    EXPECT_EQ(tg_gguf_n_kv(nullptr), 0);
    EXPECT_EQ(tg_gguf_n_tensors(nullptr), 0);
    EXPECT_EQ(tg_gguf_tensor_info(g.get(), 0, nullptr, nullptr, nullptr, nullptr, nullptr), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_tensor_info] tensor index 0 out of range [0, 0)"));
    EXPECT_EQ(tg_gguf_tensor_data(g.get(), 0), nullptr);
    EXPECT_EQ(tg_gguf_tensor_data(nullptr, 0), nullptr);
    EXPECT_EQ(tg_gguf_type_name(TG_GGUF_TYPE_COUNT), nullptr);
    EXPECT_STREQ(tg_gguf_type_name(TG_GGUF_FLOAT64), "float64");
    tg_gguf_close(nullptr);
    EXPECT_EQ(tg_gguf_open(nullptr), nullptr);
    EXPECT_EQ(tg_gguf_open_memory(nullptr, 10), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_open_memory] data is NULL"));
}

TEST(GgufGetters, StringArrayIndexOutOfRange) {
    WriterPtr w(tg_gguf_writer_new());
    const char *toks[] = {"a", "b"};
    tg_gguf_set_arr_str(w.get(), "tokenizer.ggml.tokens", 2, toks);
    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g);
    const char *s = nullptr;
    EXPECT_EQ(tg_gguf_get_arr_str(g.get(), "tokenizer.ggml.tokens", 2, &s), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "index 2 out of range (the array has 2)")) << tg_last_error();
    EXPECT_EQ(tg_gguf_get_arr_str(g.get(), "tokenizer.ggml.tokens", UINT64_MAX, &s), TG_ERR_ARG);
    EXPECT_EQ(s, nullptr);
}

// ---------------------------------------------------------------------------
// Writer

TEST(GgufWriter, RejectsBadArgumentsAndChangesNothing) {
    WriterPtr w(tg_gguf_writer_new());
    float x[4] = {0, 1, 2, 3};
    int64_t ne[2] = {2, 2};
    ASSERT_EQ(tg_gguf_set_u32(w.get(), "k", 1), TG_OK);
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 2, ne, x), TG_OK);
    const std::vector<uint8_t> before = to_bytes(w.get());

    EXPECT_EQ(tg_gguf_set_u32(nullptr, "k", 1), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_set_u32] the writer is NULL"));
    EXPECT_EQ(tg_gguf_set_i32(w.get(), "", 1), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_set_i32] empty key"));
    EXPECT_EQ(tg_gguf_set_str(w.get(), std::string(65536, 'k').c_str(), "v"), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "key length 65536 exceeds 65535"));
    EXPECT_EQ(tg_gguf_set_str(w.get(), "s", nullptr), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", TG_GGUF_STRING, 1, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", TG_GGUF_ARRAY, 1, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", (tg_gguf_type)13, 1, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", TG_GGUF_UINT64, UINT64_MAX / 4, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "overflow"));
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", TG_GGUF_UINT8, 3, nullptr), TG_ERR_ARG);
    const uint8_t bools[2] = {1, 2};
    EXPECT_EQ(tg_gguf_set_arr(w.get(), "a", TG_GGUF_BOOL, 2, bools), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "bool element 1 is 2"));
    const char *strs[2] = {"ok", nullptr};
    EXPECT_EQ(tg_gguf_set_arr_str(w.get(), "a", 2, strs), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_set_arr_str] key 'a': string 1 is NULL"));
    // general.alignment: uint32 only, a power of two and a multiple of 8
    EXPECT_EQ(tg_gguf_set_i32(w.get(), "general.alignment", 64), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "must be a uint32"));
    EXPECT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 0), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 48), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 4), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "alignment 4 must be a power of two, a multiple of 8"));
    EXPECT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 1u << 21), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "at most 1048576"));
    // tensors
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 2, ne, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_add_tensor] tensor 'x' was already added"));
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), std::string(64, 'n').c_str(), TG_TYPE_F32, 2, ne, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "is 64 bytes (at most 63)"));
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "", TG_TYPE_F32, 2, ne, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_COUNT, 2, ne, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 0, ne, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 5, ne, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 2, nullptr, x), TG_ERR_ARG);
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 2, ne, nullptr), TG_ERR_ARG);
    const int64_t zero[2] = {2, 0}, huge[2] = {INT64_MAX, 2}, big[1] = {INT64_MAX / 2};
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 2, zero, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "ne[1] is 0"));
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 2, huge, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "element count overflows"));
    EXPECT_EQ(tg_gguf_add_tensor(w.get(), "y", TG_TYPE_F32, 1, big, x), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "byte size overflows"));
    EXPECT_EQ(tg_gguf_write_memory(nullptr, nullptr, nullptr), TG_ERR_ARG);
    EXPECT_EQ(to_bytes(w.get()), before);  // no failed call changed the writer
}

TEST(GgufWriter, ReplacesKeysInPlace) {
    WriterPtr w(tg_gguf_writer_new());
    tg_gguf_set_u32(w.get(), "a", 1);
    tg_gguf_set_u32(w.get(), "b", 2);
    tg_gguf_set_str(w.get(), "a", "now a string");
    ASSERT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 16), TG_OK);
    ASSERT_EQ(tg_gguf_set_u32(w.get(), "general.alignment", 128), TG_OK);
    GgufPtr g = open_mem(to_bytes(w.get()));
    ASSERT_TRUE(g) << tg_last_error();
    ASSERT_EQ(tg_gguf_n_kv(g.get()), 3);
    EXPECT_STREQ(tg_gguf_kv_key(g.get(), 0), "a");
    EXPECT_EQ(tg_gguf_kv_type(g.get(), 0), TG_GGUF_STRING);
    EXPECT_EQ(tg_gguf_alignment(g.get()), 128u);
}

TEST(GgufWriter, WriteToBadPathFails) {
    WriterPtr w(tg_gguf_writer_new());
    EXPECT_EQ(tg_gguf_write(w.get(), "/nonexistent-dir/x.gguf"), TG_ERR_IO);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_write] '/nonexistent-dir/x.gguf': cannot open for writing"))
        << tg_last_error();
    EXPECT_EQ(tg_gguf_write(w.get(), nullptr), TG_ERR_ARG);
    // A write that fails midway (file size limit): IO error, partial file removed.
    float x[1024] = {0};
    int64_t ne[1] = {1024};
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 1, ne, x), TG_OK);
    std::string path = temp_path("full");
    const tg_status st = write_under_size_limit(w.get(), path, 1000);
    EXPECT_EQ(st, TG_ERR_IO);
    EXPECT_TRUE(has(tg_last_error(), "write failed")) << tg_last_error();
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the partial file was left behind";
}

namespace {
std::string read_all(const std::string &path) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return "(missing)";
    std::string s;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    fclose(f);
    return s;
}
// Files in path's directory whose name starts with path's name + ".tmp-".
int temporaries_of(const std::string &path) {
    const std::filesystem::path p(path);
    int n = 0;
    for (const auto &e : std::filesystem::directory_iterator(p.parent_path()))
        n += e.path().filename().string().rfind(p.filename().string() + ".tmp-", 0) == 0;
    return n;
}
tg_status fill_fails(void *, void *, size_t, size_t) { return tg_set_error(TG_ERR_IO, "[test_fill] no data"); }
}  // namespace

// A failed write never destroys what was at the path (session 32's sweep: the
// writer truncated the target first and removed it on an error, so a full
// disk or a failing fill lost an existing model, tinygml-quantize's output
// included), and a path that is not a regular file is refused, never opened
// (a FIFO hung the open: tinygml-synth -o FIFO, tinygml-quantize IN FIFO q8_0).
TEST(GgufWriter, FailedWriteLeavesWhatWasThere) {
    WriterPtr w(tg_gguf_writer_new());
    std::vector<float> x(4096, 1.0f);
    const int64_t ne[1] = {4096};
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 1, ne, x.data()), TG_OK);
    const std::string path = temp_path("precious");
    const std::string old = "an existing file, not to be lost";
    write_file(path, std::vector<uint8_t>(old.begin(), old.end()));
    ASSERT_EQ(chmod(path.c_str(), 0640), 0);
    // a write that fails midway (file size limit)
    const tg_status st = write_under_size_limit(w.get(), path, 1000);
    EXPECT_EQ(st, TG_ERR_IO);
    EXPECT_TRUE(has(tg_last_error(), ("[gguf_write] '" + path + "': write failed").c_str())) << tg_last_error();
    EXPECT_EQ(read_all(path), old);
    EXPECT_EQ(temporaries_of(path), 0);
    // a fill that fails: its own status and message, the file as it was
    WriterPtr wf(tg_gguf_writer_new());
    ASSERT_EQ(tg_gguf_add_tensor_fill(wf.get(), "x", TG_TYPE_F32, 1, ne, fill_fails, nullptr), TG_OK);
    EXPECT_EQ(tg_gguf_write(wf.get(), path.c_str()), TG_ERR_IO);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_write] tensor 'x': fill failed at byte 0: [test_fill] no data"))
        << tg_last_error();
    EXPECT_EQ(read_all(path), old);
    EXPECT_EQ(temporaries_of(path), 0);
    // a write that succeeds replaces it, keeping its permissions
    ASSERT_EQ(tg_gguf_write(w.get(), path.c_str()), TG_OK) << tg_last_error();
    GgufPtr g(tg_gguf_open(path.c_str()));
    ASSERT_TRUE(g) << tg_last_error();
    EXPECT_EQ(tg_gguf_n_tensors(g.get()), 1);
    struct stat sb;
    ASSERT_EQ(stat(path.c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 07777, 0640u);
    EXPECT_EQ(temporaries_of(path), 0);
    // through a link: the target is written, the link stays a link
    const std::string link = temp_path("link");
    ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
    write_file(path, std::vector<uint8_t>(old.begin(), old.end()));
    ASSERT_EQ(tg_gguf_write(w.get(), link.c_str()), TG_OK) << tg_last_error();
    struct stat lb;
    ASSERT_EQ(lstat(link.c_str(), &lb), 0);
    EXPECT_TRUE(S_ISLNK(lb.st_mode));
    EXPECT_NE(read_all(path), old);
    remove(link.c_str());
    remove(path.c_str());
    // not regular files: refused at once, left in place
    const std::string fifo = temp_path("fifo_out");
    remove(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    tgt::watchdog dog(60);  // a regression blocks in the open: fail fast
    for (const std::string &p : {fifo, std::string("/dev/null"), ::testing::TempDir()}) {
        SCOPED_TRACE(p);
        EXPECT_EQ(tg_gguf_write(w.get(), p.c_str()), TG_ERR_IO);
        EXPECT_TRUE(has(tg_last_error(), "not a regular file")) << tg_last_error();
        ASSERT_EQ(stat(p.c_str(), &sb), 0);
        EXPECT_FALSE(S_ISREG(sb.st_mode));
    }
    EXPECT_EQ(temporaries_of(fifo), 0);
    remove(fifo.c_str());
    EXPECT_EQ(tg_gguf_write(w.get(), ""), TG_ERR_ARG);  // not a temporary file in the working directory
    EXPECT_STREQ(tg_last_error(), "[gguf_write] path is empty");
}

// A target whose name is at NAME_MAX (255 bytes) leaves no room for the
// ".tmp-PID-N" suffix (the open of target + suffix failed with "File name
// too long"): the temporary file takes a short name in the same directory,
// the write succeeds, replaces what was there, and leaves no temporary file.
TEST(GgufWriter, NameAtNameMax) {
    WriterPtr w(tg_gguf_writer_new());
    std::vector<float> x(64, 2.0f);
    const int64_t ne[1] = {64};
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "x", TG_TYPE_F32, 1, ne, x.data()), TG_OK);
    const std::string dir = ::testing::TempDir() + "tg_gguf_namemax_" + std::to_string(getpid()) + "/";
    ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << strerror(errno);
    for (size_t len : {(size_t)200, (size_t)245, (size_t)255}) {
        SCOPED_TRACE(len);
        const std::string name = std::string(len - 5, 'n') + ".gguf", path = dir + name;
        write_file(path, std::vector<uint8_t>(10, 7));
        ASSERT_EQ(tg_gguf_write(w.get(), path.c_str()), TG_OK) << tg_last_error();
        GgufPtr g(tg_gguf_open(path.c_str()));
        ASSERT_TRUE(g) << tg_last_error();
        EXPECT_EQ(tg_gguf_n_tensors(g.get()), 1);
        int entries = 0;
        for (const auto &e : std::filesystem::directory_iterator(dir)) {
            entries++;
            EXPECT_EQ(e.path().filename().string(), name);
        }
        EXPECT_EQ(entries, 1) << "a temporary file was left behind";
        remove(path.c_str());
    }
    // a name past NAME_MAX: refused by the file system, with the call's message
    const std::string too_long = dir + std::string(256, 'x');
    EXPECT_EQ(tg_gguf_write(w.get(), too_long.c_str()), TG_ERR_IO);
    EXPECT_TRUE(has(tg_last_error(), "cannot open for writing")) << tg_last_error();
    EXPECT_EQ(rmdir(dir.c_str()), 0) << "the directory is not empty";
}

// The fuzzer's committed seed corpus (tests/fuzz/corpus) stays valid, but
// for the bad_* seeds, which are rejected with a message.
TEST(GgufCorpus, SeedsOpen) {
#ifdef TG_SOURCE_DIR
    const std::string dir = std::string(TG_SOURCE_DIR) + "/tests/fuzz/corpus";
    int n = 0, bad = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() != ".gguf") continue;
        GgufPtr g(tg_gguf_open(e.path().c_str()));
        if (e.path().filename().string().rfind("bad_", 0) == 0) {
            EXPECT_FALSE(g) << e.path();
            EXPECT_EQ(std::string(tg_last_error()).rfind("[gguf_open] '", 0), 0u) << tg_last_error();
            bad++;
            continue;
        }
        EXPECT_TRUE(g) << tg_last_error();
        n++;
    }
    EXPECT_GE(n, 6);
    EXPECT_GE(bad, 2);
#else
    GTEST_SKIP() << "TG_SOURCE_DIR not defined";
#endif
}
