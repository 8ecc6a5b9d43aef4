// gguf_builder.h - byte-exact GGUF builders and helpers for the GGUF tests
// (test_gguf.cpp, test_gguf_bad.cpp). Uses only the public API.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "internal.h"
#include "test_util.h"  // TG_TEST_ASAN

#ifdef TG_TEST_ASAN
// From the sanitizers' allocator interface (declared here: gcc ships no header).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                                         void (*free_hook)(const volatile void *));
#endif

namespace gguf_test {

// ---------------------------------------------------------------------------
// Byte-exact builders

struct Bytes {
    std::vector<uint8_t> b;
    Bytes &raw(const void *p, size_t n) {
        const uint8_t *c = (const uint8_t *)p;
        b.insert(b.end(), c, c + n);
        return *this;
    }
    Bytes &u8(uint8_t v) { return raw(&v, 1); }
    Bytes &u32(uint32_t v) { return raw(&v, 4); }
    Bytes &u64(uint64_t v) { return raw(&v, 8); }
    Bytes &str(const std::string &s) { return u64(s.size()).raw(s.data(), s.size()); }
    Bytes &add(const Bytes &o) { return raw(o.b.data(), o.b.size()); }
    Bytes &pad(size_t a) {
        b.resize((b.size() + a - 1) / a * a, 0);
        return *this;
    }
    Bytes &fill(size_t n, uint8_t v = 0xab) {
        b.resize(b.size() + n, v);
        return *this;
    }
};

inline Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Bytes().raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
}
inline Bytes kv_u32(const std::string &key, uint32_t v) { return Bytes().str(key).u32(TG_GGUF_UINT32).u32(v); }
inline Bytes kv_str(const std::string &key, const std::string &v) { return Bytes().str(key).u32(TG_GGUF_STRING).str(v); }

struct TI {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;  // ggml id
    uint64_t offset = 0;
    uint32_t n_dims = UINT32_MAX;  // UINT32_MAX: ne.size()
};

inline Bytes tinfo(const TI &t) {
    Bytes o;
    o.str(t.name).u32(t.n_dims == UINT32_MAX ? (uint32_t)t.ne.size() : t.n_dims);
    for (uint64_t v : t.ne) o.u64(v);
    return o.u32(t.type).u64(t.offset);
}

// header + n_kv encoded kvs + tensor infos, padded to align, + data_size bytes.
inline std::vector<uint8_t> file_with(const std::vector<TI> &ts, uint64_t data_size, const Bytes &kvs = Bytes(),
                               uint64_t n_kv = 0, size_t align = 32) {
    Bytes f = header(ts.size(), n_kv);
    f.add(kvs);
    for (const TI &t : ts) f.add(tinfo(t));
    return f.pad(align).fill(data_size).b;
}

// One F32 {8} tensor at offset 0: the valid file the bad-tensor tests vary.
inline std::vector<uint8_t> one_tensor(const TI &t, uint64_t data_size = 32) { return file_with({t}, data_size); }
inline TI f32_8() { return TI{"w", {8}, 0, 0}; }

struct GgufDeleter {
    void operator()(tg_gguf *g) const { tg_gguf_close(g); }
};
typedef std::unique_ptr<tg_gguf, GgufDeleter> GgufPtr;

inline GgufPtr open_mem(const std::vector<uint8_t> &f) { return GgufPtr(tg_gguf_open_memory(f.data(), f.size())); }

inline std::string temp_path(const char *tag) {
    static int counter = 0;
    return ::testing::TempDir() + "tg_gguf_" + tag + "_" + std::to_string(getpid()) + "_" +
           std::to_string(counter++) + ".gguf";
}

inline void write_file(const std::string &path, const std::vector<uint8_t> &f) {
    FILE *fp = fopen(path.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    if (!f.empty()) {
        ASSERT_EQ(fwrite(f.data(), 1, f.size(), fp), f.size());
    }
    fclose(fp);
}

// The file is rejected by both load paths with "[call]" and frag in the message.
inline ::testing::AssertionResult Rejected(const std::vector<uint8_t> &f, const std::string &frag) {
    tg_gguf *g = tg_gguf_open_memory(f.data(), f.size());
    std::string msg = tg_last_error();
    if (g) {
        tg_gguf_close(g);
        return ::testing::AssertionFailure() << "open_memory accepted the file";
    }
    if (msg.rfind("[gguf_open_memory] ", 0) != 0 || msg.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "open_memory message '" << msg << "' lacks '" << frag << "'";
    std::string path = temp_path("bad");
    write_file(path, f);
    g = tg_gguf_open(path.c_str());
    msg = tg_last_error();
    remove(path.c_str());
    if (g) {
        tg_gguf_close(g);
        return ::testing::AssertionFailure() << "open accepted the file";
    }
    if (msg.rfind("[gguf_open] '", 0) != 0 || msg.find(path) == std::string::npos ||
        msg.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "open message '" << msg << "' lacks the path or '" << frag << "'";
    // the memory-mapped path validates from the map with the same checks
    path = temp_path("bad_mmap");
    write_file(path, f);
    g = tg_gguf_open_mmap(path.c_str());
    std::string mmsg = tg_last_error();
    remove(path.c_str());
    if (g) {
        tg_gguf_close(g);
        return ::testing::AssertionFailure() << "open_mmap accepted the file";
    }
    if (mmsg.rfind("[gguf_open_mmap] '", 0) != 0 || mmsg.find(path) == std::string::npos ||
        mmsg.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "open_mmap message '" << mmsg << "' lacks the path or '" << frag
                                             << "'";
    return ::testing::AssertionSuccess() << msg;
}

// Open bytes f through the memory-mapped reader (a temporary file, removed
// at once: the map keeps the file's pages).
inline GgufPtr open_mmap_bytes(const std::vector<uint8_t> &f) {
    std::string path = temp_path("mmap");
    write_file(path, f);
    GgufPtr g(tg_gguf_open_mmap(path.c_str()));
    remove(path.c_str());
    return g;
}

inline std::vector<uint8_t> random_bytes(std::mt19937 &rng, size_t n) {
    std::vector<uint8_t> v(n);
    for (auto &x : v) x = (uint8_t)rng();
    return v;
}

struct WriterDeleter {
    void operator()(tg_gguf_writer *w) const { tg_gguf_writer_free(w); }
};
typedef std::unique_ptr<tg_gguf_writer, WriterDeleter> WriterPtr;

inline std::vector<uint8_t> to_bytes(const tg_gguf_writer *w) {
    void *p = nullptr;
    size_t n = 0;
    EXPECT_EQ(tg_gguf_write_memory(w, &p, &n), TG_OK) << tg_last_error();
    std::vector<uint8_t> v((uint8_t *)p, (uint8_t *)p + n);
    tg_gguf_free_memory(p);
    return v;
}

inline bool has(const std::string &s, const char *frag) { return s.find(frag) != std::string::npos; }

}  // namespace gguf_test
