// test_mmap.cpp - memory-mapped loading: the mapped reader agrees with the
// reading one on good and bad files, buffers over caller memory use tensors in
// place and refuse every write into read-only memory (real PROT_READ pages,
// so a write that slipped through would crash the test), models give the same
// logits mapped and read, and a large mapped model adds no anonymous copy.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf_builder.h"
#include "model.h"
#include "model_util.h"
#include "synth.h"

using namespace gguf_test;

namespace {

// ---------------------------------------------------------------------------
// The mapped reader

size_t elem_size(tg_gguf_type t) {
    switch (t) {
        case TG_GGUF_UINT8:
        case TG_GGUF_INT8:
        case TG_GGUF_BOOL: return 1;
        case TG_GGUF_UINT16:
        case TG_GGUF_INT16: return 2;
        case TG_GGUF_UINT64:
        case TG_GGUF_INT64:
        case TG_GGUF_FLOAT64: return 8;
        default: return 4;
    }
}

// Everything a reader exposes, as text and bytes, for comparing two opens.
std::string dump(const tg_gguf *g) {
    std::string s = std::to_string(tg_gguf_version(g)) + " " + std::to_string(tg_gguf_alignment(g)) + " " +
                    std::to_string(tg_gguf_data_offset(g)) + "\n";
    for (int64_t i = 0; i < tg_gguf_n_kv(g); i++) {
        const char *key = tg_gguf_kv_key(g, i);
        s += std::string(key) + " " + std::to_string((int)tg_gguf_kv_type(g, i));
        tg_gguf_type et;
        uint64_t n;
        const void *data;
        const char *str;
        if (tg_gguf_get_arr(g, key, &et, &n, &data) == TG_OK) {
            s += " [" + std::to_string(n) + "]";
            if (et == TG_GGUF_STRING)
                for (uint64_t k = 0; k < n; k++) s += tg_gguf_get_arr_str(g, key, k, &str) == TG_OK ? str : "?";
            else if (data)
                s.append((const char *)data, (size_t)n * elem_size(et));
        } else if (tg_gguf_get_str(g, key, &str) == TG_OK) {
            s += std::string(" '") + str + "'";
        } else {
            double d;
            uint64_t u;
            int64_t v;
            if (tg_gguf_get_u64(g, key, &u) == TG_OK) s += " u" + std::to_string(u);
            if (tg_gguf_get_i64(g, key, &v) == TG_OK) s += " i" + std::to_string(v);
            if (tg_gguf_get_f64(g, key, &d) == TG_OK) s += " f" + std::to_string(d);
        }
        s += "\n";
    }
    for (int64_t i = 0; i < tg_gguf_n_tensors(g); i++) {
        const char *name;
        tg_type type;
        int nd;
        int64_t ne[4];
        size_t nb;
        EXPECT_EQ(tg_gguf_tensor_info(g, i, &name, &type, &nd, ne, &nb), TG_OK);
        s += std::string(name) + " " + std::to_string(type) + " " + std::to_string(nd);
        for (int d = 0; d < 4; d++) s += " " + std::to_string(ne[d]);
        s += "\n";
        s.append((const char *)tg_gguf_tensor_data(g, i), nb);
    }
    return s;
}

std::vector<uint8_t> read_bytes(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::string> corpus_files() {
    std::vector<std::string> out;
#ifdef TG_SOURCE_DIR
    for (const auto &e : std::filesystem::directory_iterator(std::string(TG_SOURCE_DIR) + "/tests/fuzz/corpus"))
        if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    out.push_back(std::string(TG_SOURCE_DIR) + "/models/llama-recall.gguf");
    out.push_back(std::string(TG_SOURCE_DIR) + "/models/hybrid-recall.gguf");
#endif
    return out;
}

// The message after "[call] 'path': " (or "[call] "), to compare two paths' messages.
std::string reason(const std::string &msg) {
    size_t p = msg.find("': ");
    if (msg.find("[gguf_open_memory] ") == 0) return msg.substr(strlen("[gguf_open_memory] "));
    return p == std::string::npos ? msg : msg.substr(p + 3);
}

// The corpus seeds and the shipped models read the same mapped as read.
TEST(GgufMmap, SameAsRead) {
    const auto files = corpus_files();
    if (files.empty()) GTEST_SKIP() << "TG_SOURCE_DIR not defined";
    for (const std::string &path : files) {
        GgufPtr r(tg_gguf_open(path.c_str()));
        const std::string read_msg = r ? "" : reason(tg_last_error());
        GgufPtr m(tg_gguf_open_mmap(path.c_str()));
        // a seed that is meant to be bad (bad_*) is refused by both, for the same reason
        if (!r) {
            EXPECT_FALSE(m) << path << ": read refused it (" << read_msg << "), the map accepted it";
            if (!m) EXPECT_EQ(read_msg, reason(tg_last_error())) << path;
            continue;
        }
        ASSERT_TRUE(m) << path << ": " << tg_last_error();
        EXPECT_FALSE(tg_gguf_is_mapped(r.get()));
        EXPECT_TRUE(tg_gguf_is_mapped(m.get()));
        EXPECT_EQ(dump(r.get()), dump(m.get())) << path;
        size_t size = 0;
        const char *base = (const char *)tg_gguf_file_data(m.get(), &size);
        EXPECT_EQ(size, read_bytes(path).size());
        EXPECT_EQ((uintptr_t)base % 4096, 0u) << "a map starts on a page";
        for (int64_t i = 0; i < tg_gguf_n_tensors(m.get()); i++) {
            const char *d = (const char *)tg_gguf_tensor_data(m.get(), i);
            size_t nb;
            tg_gguf_tensor_info(m.get(), i, nullptr, nullptr, nullptr, nullptr, &nb);
            EXPECT_TRUE(d >= base && d + nb <= base + size) << "tensor data inside the map";
            EXPECT_EQ((uintptr_t)d % std::min<size_t>(tg_gguf_alignment(m.get()), 64), 0u);
        }
    }
    EXPECT_EQ(tg_gguf_file_data(nullptr, nullptr), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_file_data] file is NULL")) << tg_last_error();
    EXPECT_FALSE(tg_gguf_is_mapped(nullptr));
}

// Every prefix and many one-byte corruptions of each corpus seed: the mapped
// reader accepts exactly what the reading one accepts, with the same message
// when it refuses and the same content when it accepts.
TEST(GgufMmap, MalformedCorpusFilesFailTheSame) {
    const auto files = corpus_files();
    if (files.empty()) GTEST_SKIP() << "TG_SOURCE_DIR not defined";
    int n_bad = 0, n_good = 0;
    for (const std::string &path : files) {
        const std::vector<uint8_t> f = read_bytes(path);
        if (f.size() > 4096) continue;  // the shipped models: SameAsRead covers them
        std::vector<std::vector<uint8_t>> cases;
        for (size_t n = 1; n < f.size(); n += 1 + n / 64) cases.emplace_back(f.begin(), f.begin() + n);
        std::mt19937 rng(7);
        for (int k = 0; k < 60; k++) {
            std::vector<uint8_t> c = f;
            c[rng() % c.size()] = (uint8_t)(k % 3 == 0 ? 0xff : rng());
            cases.push_back(c);
        }
        for (const auto &c : cases) {
            GgufPtr r(tg_gguf_open_memory(c.data(), c.size()));
            const std::string rmsg = tg_last_error();
            GgufPtr m = open_mmap_bytes(c);
            const std::string mmsg = tg_last_error();
            ASSERT_EQ(!r, !m) << path << " (" << c.size() << " bytes): read '" << rmsg << "', mmap '" << mmsg << "'";
            if (!r) {
                EXPECT_EQ(mmsg.rfind("[gguf_open_mmap] '", 0), 0u) << mmsg;
                EXPECT_EQ(reason(rmsg), reason(mmsg));
                n_bad++;
            } else {
                EXPECT_EQ(dump(r.get()), dump(m.get()));
                n_good++;
            }
        }
    }
    EXPECT_GT(n_bad, 100);
    EXPECT_GT(n_good, 0);
}

TEST(GgufMmap, FileErrors) {
    EXPECT_EQ(tg_gguf_open_mmap(nullptr), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_open_mmap] path is NULL")) << tg_last_error();
    EXPECT_EQ(tg_gguf_open_mmap("/nonexistent-dir/m.gguf"), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_open_mmap] '/nonexistent-dir/m.gguf': cannot open: No such file"))
        << tg_last_error();
    EXPECT_EQ(tg_gguf_open_mmap(::testing::TempDir().c_str()), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "not a regular file")) << tg_last_error();
    std::string path = temp_path("empty_mmap");
    write_file(path, {});
    EXPECT_EQ(tg_gguf_open_mmap(path.c_str()), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "file is empty")) << tg_last_error();
    remove(path.c_str());
}

// A huge sparse file that is not GGUF fails from its header, mapped too, and
// leaves nothing mapped behind (the process's mappings do not grow).
TEST(GgufMmap, FailedOpenUnmaps) {
    auto maps = [] {
        std::ifstream f("/proc/self/maps");
        std::string line;
        int n = 0;
        while (std::getline(f, line)) n += line.find("tg_gguf_sparse") != std::string::npos;
        return n;
    };
    std::string path = ::testing::TempDir() + "tg_gguf_sparse_" + std::to_string(getpid()) + ".gguf";
    write_file(path, Bytes().raw("GGUF", 4).u32(3).u64(0).u64(1ull << 40).b);
    if (truncate(path.c_str(), (off_t)2 << 30) != 0) {
        remove(path.c_str());
        GTEST_SKIP() << "cannot make a sparse file";
    }
    EXPECT_EQ(tg_gguf_open_mmap(path.c_str()), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "kv count 1099511627776 cannot fit")) << tg_last_error();
    EXPECT_EQ(maps(), 0) << "a failed open left its map";
    // a valid file cut in the middle of its tensor data fails and unmaps too
    std::vector<uint8_t> good = file_with({f32_8()}, 32);
    write_file(path, std::vector<uint8_t>(good.begin(), good.end() - 16));
    EXPECT_EQ(tg_gguf_open_mmap(path.c_str()), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "file truncated?")) << tg_last_error();
    EXPECT_EQ(maps(), 0);
    write_file(path, good);  // the control: a good file's map shows up
    GgufPtr g(tg_gguf_open_mmap(path.c_str()));
    ASSERT_TRUE(g) << tg_last_error();
    EXPECT_EQ(maps(), 1);
    g.reset();
    EXPECT_EQ(maps(), 0) << "tg_gguf_close left its map";
    remove(path.c_str());
}

// ---------------------------------------------------------------------------
// Buffers over caller memory

struct Pages {
    void *p = MAP_FAILED;
    size_t n;
    explicit Pages(size_t bytes) : n(bytes) {
        p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    ~Pages() {
        if (p != MAP_FAILED) munmap(p, n);
    }
    float *f() const { return (float *)p; }
    bool protect() const { return mprotect(p, n, PROT_READ) == 0; }  // writes now fault
};

struct CtxDeleter {
    void operator()(tg_context *c) const { tg_free(c); }
};
typedef std::unique_ptr<tg_context, CtxDeleter> CtxPtr;
CtxPtr no_alloc_ctx() { return CtxPtr(tg_init({(size_t)64 * tg_tensor_overhead() + 8 * tg_graph_overhead(), nullptr, true})); }

class HostPtrBuffer : public ::testing::Test {
   protected:
    void SetUp() override {
        ASSERT_NE(pages.p, MAP_FAILED);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (size_t i = 0; i < pages.n / 4; i++) pages.f()[i] = u(rng);
        ASSERT_TRUE(pages.protect());
        be = tg_backend_cpu(2);
        ASSERT_NE(be, nullptr);
        ctx = no_alloc_ctx();
        ASSERT_TRUE(ctx);
    }
    void TearDown() override {
        tg_buffer_free(buf);
        tg_buffer_free(rw);
        ctx.reset();
        tg_backend_free(be);
    }
    // buf: the read-only pages; w: a {16, 16} F32 weight placed at byte 1024
    void place_w() {
        buf = tg_backend_buffer_from_host_ptr(be, pages.p, pages.n, true);
        ASSERT_NE(buf, nullptr) << tg_last_error();
        w = tg_set_name(tg_new_tensor_2d(ctx.get(), TG_TYPE_F32, 16, 16), "w");
        ASSERT_EQ(tg_buffer_place(buf, w, 1024), TG_OK) << tg_last_error();
    }
    tg_status compute(tg_tensor *out) {
        tg_graph *g = tg_graph_new(ctx.get());
        if (!g || tg_graph_expand(g, out) != TG_OK) return TG_ERR_ARG;
        return tg_graph_compute(be, g);
    }
    Pages pages{(size_t)16 << 10};
    tg_backend *be = nullptr;
    CtxPtr ctx;
    tg_buffer *buf = nullptr, *rw = nullptr;
    tg_tensor *w = nullptr;
};

// Placed tensors are read in place: no copy, same results as an allocated copy.
TEST_F(HostPtrBuffer, TensorsAreUsedInPlace) {
    tg_tensor *early_view = nullptr;
    buf = tg_backend_buffer_from_host_ptr(be, pages.p, pages.n, true);
    ASSERT_NE(buf, nullptr) << tg_last_error();
    EXPECT_TRUE(tg_buffer_is_read_only(buf));
    EXPECT_EQ(tg_buffer_size(buf), pages.n);
    w = tg_set_name(tg_new_tensor_2d(ctx.get(), TG_TYPE_F32, 16, 16), "w");
    early_view = tg_view_1d(ctx.get(), w, 4, 16 * sizeof(float));  // made before w has storage
    ASSERT_EQ(tg_buffer_place(buf, w, 1024), TG_OK) << tg_last_error();
    EXPECT_EQ(tg_tensor_data(w), (char *)pages.p + 1024);
    EXPECT_EQ(tg_tensor_data(early_view), (char *)pages.p + 1024 + 64);

    // x and a copy of w in an ordinary buffer
    tg_tensor *x = tg_set_name(tg_new_tensor_2d(ctx.get(), TG_TYPE_F32, 16, 3), "x");
    tg_tensor *wc = tg_set_name(tg_new_tensor_2d(ctx.get(), TG_TYPE_F32, 16, 16), "w_copy");
    tg_buffer *ab = tg_backend_alloc(be, ctx.get());
    ASSERT_NE(ab, nullptr) << tg_last_error();
    EXPECT_EQ(tg_tensor_data(w), (char *)pages.p + 1024) << "backend_alloc left the placed tensor alone";
    std::vector<float> xv(48);
    for (size_t i = 0; i < xv.size(); i++) xv[i] = std::sin(0.7f * (float)i + 0.3f);
    ASSERT_EQ(tg_tensor_set(x, xv.data(), 0, xv.size() * 4), TG_OK);
    ASSERT_EQ(tg_tensor_set(wc, (char *)pages.p + 1024, 0, 1024), TG_OK);
    tg_tensor *y = tg_mul_mat(ctx.get(), w, x), *yc = tg_mul_mat(ctx.get(), wc, x);
    tg_tensor *v2 = tg_scale(ctx.get(), early_view, 2.0f);
    tg_graph *g = tg_graph_new(ctx.get());
    ASSERT_EQ(tg_graph_expand(g, y), TG_OK);
    ASSERT_EQ(tg_graph_expand(g, yc), TG_OK);
    ASSERT_EQ(tg_graph_expand(g, v2), TG_OK);
    ASSERT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
    std::vector<float> a(48, NAN), b(48, NAN), c(4, NAN);
    ASSERT_EQ(tg_tensor_get(y, a.data(), 0, 192), TG_OK);
    ASSERT_EQ(tg_tensor_get(yc, b.data(), 0, 192), TG_OK);
    ASSERT_EQ(tg_tensor_get(v2, c.data(), 0, 16), TG_OK);
    EXPECT_EQ(memcmp(a.data(), b.data(), 192), 0);
    const float *wp = (const float *)((char *)pages.p + 1024);
    for (int m = 0; m < 16; m++) {  // float64 oracle
        double ref = 0;
        for (int k = 0; k < 16; k++) ref += (double)wp[m * 16 + k] * xv[k];
        EXPECT_NEAR(a[m], ref, 1e-5);
    }
    for (int i = 0; i < 4; i++) EXPECT_EQ(c[i], 2.0f * wp[16 + i]);
    std::vector<float> back(256);
    ASSERT_EQ(tg_tensor_get(w, back.data(), 0, 1024), TG_OK);
    EXPECT_EQ(memcmp(back.data(), wp, 1024), 0);
    tg_buffer_free(ab);
}

// Every write into read-only memory is refused before it happens.
TEST_F(HostPtrBuffer, ReadOnlyRefusesWrites) {
    place_w();
    std::vector<float> before(pages.f(), pages.f() + pages.n / 4);
    std::vector<float> data(256, 1.0f);
    EXPECT_EQ(tg_tensor_set(w, data.data(), 0, 16), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[tensor_set] tensor 'w' is in read-only memory")) << tg_last_error();
    EXPECT_EQ(tg_buffer_clear(buf, 0), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[buffer_clear]") && has(tg_last_error(), "read-only")) << tg_last_error();

    // the in-place writers: cpy into w (and into a view of it), rope_kv_update
    // into a placed cache, delta_rule with a placed state
    tg_tensor *src = tg_set_name(tg_new_tensor_2d(ctx.get(), TG_TYPE_F32, 16, 16), "src");
    tg_tensor *kc = tg_set_name(tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 8, 1), "k_cache_ro");
    tg_tensor *vc = tg_set_name(tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 8, 1), "v_cache");
    tg_tensor *kn = tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 1, 1);
    tg_tensor *vn = tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 1, 1);
    tg_tensor *pos = tg_new_tensor_2d(ctx.get(), TG_TYPE_I32, 1, 1);
    tg_tensor *q = tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 2, 1);
    tg_tensor *k = tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 2, 1);
    tg_tensor *v = tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 1, 2, 1);
    tg_tensor *gate = tg_new_tensor_3d(ctx.get(), TG_TYPE_F32, 1, 2, 1);
    tg_tensor *beta = tg_new_tensor_3d(ctx.get(), TG_TYPE_F32, 1, 2, 1);
    tg_tensor *state = tg_set_name(tg_new_tensor_4d(ctx.get(), TG_TYPE_F32, 4, 4, 1, 1), "state_ro");
    ASSERT_EQ(tg_buffer_place(buf, kc, 4096), TG_OK) << tg_last_error();
    ASSERT_EQ(tg_buffer_place(buf, state, 8192), TG_OK) << tg_last_error();
    rw = tg_backend_alloc(be, ctx.get());
    ASSERT_NE(rw, nullptr) << tg_last_error();
    ASSERT_EQ(tg_buffer_clear(rw, 0), TG_OK);

    tg_rope_params rp = tg_rope_default_params(4);
    tg_delta_params dp = {TG_DELTA_GATED_DELTA, TG_GATE_LOG, 0.5f, true, TG_DELTA_ALGO_AUTO};
    struct {
        tg_tensor *out;
        const char *frag;
    } cases[] = {
        {tg_cpy(ctx.get(), src, w), "cpy"},
        {tg_cpy(ctx.get(), kn, tg_view_1d(ctx.get(), w, 4, 64)), "cpy"},
        {tg_rope_kv_update(ctx.get(), kc, vc, kn, vn, pos, nullptr, nullptr, &rp), "rope_kv_update"},
        {tg_delta_rule(ctx.get(), q, k, v, gate, beta, state, &dp), "delta_rule"},
    };
    for (auto &c : cases) {
        ASSERT_NE(c.out, nullptr) << tg_last_error();
        // the write comes after a node that only reads: nothing runs at all
        tg_tensor *first = tg_scale(ctx.get(), src, 3.0f);
        tg_graph *g = tg_graph_new(ctx.get());
        ASSERT_EQ(tg_graph_expand(g, first), TG_OK);
        ASSERT_EQ(tg_graph_expand(g, c.out), TG_OK);
        EXPECT_EQ(tg_graph_compute(be, g), TG_ERR_ARG) << c.frag;
        const std::string msg = tg_last_error();
        EXPECT_TRUE(has(msg, "[graph_compute] ") && has(msg, c.frag) && has(msg, "read-only memory")) << msg;
    }
    EXPECT_EQ(memcmp(before.data(), pages.f(), pages.n), 0);
    // reads still work after the refusals
    tg_tensor *y = tg_scale(ctx.get(), w, 1.0f);
    ASSERT_EQ(compute(y), TG_OK) << tg_last_error();
}

// A writable buffer over caller memory: writes land in the caller's memory.
TEST_F(HostPtrBuffer, WritableCallerMemory) {
    std::vector<float> mem(64, -7.0f);
    rw = tg_backend_buffer_from_host_ptr(be, mem.data(), mem.size() * 4, false);
    ASSERT_NE(rw, nullptr) << tg_last_error();
    EXPECT_FALSE(tg_buffer_is_read_only(rw));
    tg_tensor *t = tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, 8);
    tg_tensor *s = tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, 8);
    ASSERT_EQ(tg_buffer_place(rw, t, 32), TG_OK) << tg_last_error();
    ASSERT_EQ(tg_buffer_place(rw, s, 0), TG_OK) << tg_last_error();
    const float in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_EQ(tg_tensor_set(s, in, 0, 32), TG_OK);
    EXPECT_EQ(mem[0], 1.0f);
    ASSERT_EQ(compute(tg_cpy(ctx.get(), tg_scale(ctx.get(), s, -1.0f), t)), TG_OK) << tg_last_error();
    for (int i = 0; i < 8; i++) EXPECT_EQ(mem[8 + i], -in[i]);
    EXPECT_EQ(mem[16], -7.0f) << "sentinel after the tensor";
    ASSERT_EQ(tg_buffer_clear(rw, 0), TG_OK);
    EXPECT_EQ(mem[63], 0.0f);
}

TEST_F(HostPtrBuffer, Errors) {
    EXPECT_EQ(tg_backend_buffer_from_host_ptr(nullptr, pages.p, 64, true), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[backend_buffer_from_host_ptr] backend is NULL")) << tg_last_error();
    EXPECT_EQ(tg_backend_buffer_from_host_ptr(be, nullptr, 64, true), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "ptr is NULL")) << tg_last_error();
    EXPECT_EQ(tg_backend_buffer_from_host_ptr(be, pages.p, 0, true), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "size is 0")) << tg_last_error();
    EXPECT_EQ(tg_backend_buffer_from_host_ptr(be, pages.p, SIZE_MAX, true), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "wraps the address space")) << tg_last_error();
    if (tg_cuda_available()) {
        tg_backend *cu = tg_backend_cuda(0);
        ASSERT_NE(cu, nullptr);
        EXPECT_EQ(tg_backend_buffer_from_host_ptr(cu, pages.p, 64, true), nullptr);
        EXPECT_TRUE(has(tg_last_error(), "cannot use host memory in place")) << tg_last_error();
        tg_backend_free(cu);
    }

    place_w();
    tg_tensor *t = tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, 8);
    EXPECT_EQ(tg_buffer_place(nullptr, t, 0), TG_ERR_ARG);
    EXPECT_EQ(tg_buffer_place(buf, nullptr, 0), TG_ERR_ARG);
    EXPECT_EQ(tg_buffer_place(buf, w, 0), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "[buffer_place] tensor 'w' already has storage")) << tg_last_error();
    EXPECT_EQ(tg_buffer_place(buf, tg_view_1d(ctx.get(), w, 4, 0), 0), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "only leaves take storage")) << tg_last_error();
    EXPECT_EQ(tg_buffer_place(buf, t, pages.n - 16), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "ends past the buffer's")) << tg_last_error();
    EXPECT_EQ(tg_buffer_place(buf, t, SIZE_MAX - 8), TG_ERR_ARG);
    EXPECT_EQ(tg_buffer_place(buf, t, 2), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "not aligned to its 4-byte elements")) << tg_last_error();
    EXPECT_EQ(tg_tensor_data(t), nullptr) << "a refused place changed the tensor";
    tg_tensor *h = tg_new_tensor_1d(ctx.get(), TG_TYPE_F16, 8);
    EXPECT_EQ(tg_buffer_place(buf, h, 2), TG_OK) << "F16 needs 2-byte alignment only";
    rw = tg_backend_alloc(be, ctx.get());  // t gets ordinary storage
    ASSERT_NE(rw, nullptr);
    tg_tensor *t2 = tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, 8);
    EXPECT_EQ(tg_buffer_place(rw, t2, 0), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "only buffers from tg_backend_buffer_from_host_ptr")) << tg_last_error();

    // freeing the buffer leaves the caller's memory alone and its tensors refused
    tg_buffer_free(buf);
    buf = nullptr;
    EXPECT_EQ(pages.f()[256], pages.f()[256]);  // still mapped, readable
    float x;
    EXPECT_EQ(tg_tensor_get(w, &x, 0, 4), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "its buffer was freed")) << tg_last_error();
}

// The backend freed first: the handle stays, empty; the memory is untouched.
TEST_F(HostPtrBuffer, BackendFreedFirst) {
    place_w();
    const float first = pages.f()[256];
    tg_backend_free(be);
    be = nullptr;
    EXPECT_EQ(tg_buffer_size(buf), 0u);
    EXPECT_EQ(tg_buffer_place(buf, tg_new_tensor_1d(ctx.get(), TG_TYPE_F32, 4), 0), TG_ERR_ARG);
    EXPECT_TRUE(has(tg_last_error(), "backend was freed")) << tg_last_error();
    EXPECT_EQ(pages.f()[256], first);
    tg_buffer_free(buf);
    buf = nullptr;
}

// ---------------------------------------------------------------------------
// Models: mapped and read give the same logits

struct ModelDeleter {
    void operator()(tgm::model *m) const { tgm::model_free(m); }
};
typedef std::unique_ptr<tgm::model, ModelDeleter> ModelPtr;

std::vector<float> all_logits(const tgm::model *m, const std::vector<int32_t> &toks) {
    std::vector<float> logits(toks.size() * m->hp.n_vocab + 1, NAN);
    tgm::session *s = tgm::session_new(m, 1, (int)toks.size() + 1);
    EXPECT_NE(s, nullptr) << tg_last_error();
    if (!s) return {};
    EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), (int)toks.size(), true, &logits), TG_OK) << tg_last_error();
    tgm::session_free(s);
    return logits;
}

class MappedModel : public ::testing::TestWithParam<std::tuple<const char *, bool>> {};

TEST_P(MappedModel, SameLogitsAsRead) {
#ifndef TG_SOURCE_DIR
    GTEST_SKIP() << "TG_SOURCE_DIR not defined";
#else
    const bool cuda = std::get<1>(GetParam());
    if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const std::string path = std::string(TG_SOURCE_DIR) + "/models/" + std::get<0>(GetParam());
    tg_backend *be = cuda ? tg_backend_cuda(0) : tg_backend_cpu(2);
    ASSERT_NE(be, nullptr);
    {
        tgm::load_options read, mapped, small_pieces;
        read.use_mmap = false;
        small_pieces.upload_piece = 1000;  // uploads in many odd-sized pieces (CUDA)
        ModelPtr mr(tgm::model_load(path.c_str(), be, read)), mm(tgm::model_load(path.c_str(), be, mapped));
        ModelPtr mp(tgm::model_load(path.c_str(), be, small_pieces));
        ASSERT_TRUE(mr && mm && mp) << tg_last_error();
        EXPECT_EQ(mr->file, nullptr);
        EXPECT_EQ(mm->file != nullptr, !cuda) << "the CPU keeps the map and reads the weights from it";
        if (!cuda) {
            size_t size;
            const char *base = (const char *)tg_gguf_file_data(mm->file, &size);
            EXPECT_TRUE((const char *)tg_tensor_data(mm->output) >= base &&
                        (const char *)tg_tensor_data(mm->output) < base + size)
                << "weights used in place";
            EXPECT_TRUE(tg_buffer_is_read_only(mm->buf));
        }
        const std::vector<int32_t> toks = tgm::tokenize("h3=q8 d2=v8 d1=s6 c7=v8 f1=v3 a1=q3 ?d1=", true);
        const std::vector<float> a = all_logits(mr.get(), toks), b = all_logits(mm.get(), toks),
                                 c = all_logits(mp.get(), toks);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(a.size(), c.size());
        ASSERT_FALSE(std::isnan(a[0]));
        EXPECT_EQ(memcmp(a.data(), b.data(), (a.size() - 1) * 4), 0);
        EXPECT_EQ(memcmp(a.data(), c.data(), (a.size() - 1) * 4), 0);
    }
    tg_backend_free(be);
#endif
}

INSTANTIATE_TEST_SUITE_P(Shipped, MappedModel,
                         ::testing::Combine(::testing::Values("llama-recall.gguf", "hybrid-recall.gguf"),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<MappedModel::ParamType> &i) {
                             std::string n = std::get<0>(i.param);
                             return n.substr(0, n.find('-')) + (std::get<1>(i.param) ? "_cuda" : "_cpu");
                         });

// A bad file fails through model_load's mapped path as through the read one.
TEST(MappedModelErrors, BadFilesFailCleanly) {
    tg_backend *be = tg_backend_cpu(1);
    tgt::toy_config cfg;
    const std::string path =
        tgt::write_temp_model(tgt::toy_model_writer(cfg, 4, "", "blk.1.ffn_up.weight"), "mmap_bad_shape");
    ASSERT_FALSE(path.empty());
    for (bool mm : {true, false}) {
        tgm::load_options o;
        o.use_mmap = mm;
        EXPECT_EQ(tgm::model_load(path.c_str(), be, o), nullptr);
        EXPECT_TRUE(has(tg_last_error(), "[model_load] tensor 'blk.1.ffn_up.weight' has shape")) << tg_last_error();
    }
    // a truncated copy: the reader's checks, mapped
    std::vector<uint8_t> f = read_bytes(path);
    f.resize(f.size() - 100);
    write_file(path, f);
    EXPECT_EQ(tgm::model_load(path.c_str(), be), nullptr);
    EXPECT_TRUE(has(tg_last_error(), "[gguf_open_mmap]") && has(tg_last_error(), "file truncated?"))
        << tg_last_error();
    std::remove(path.c_str());
    tg_backend_free(be);
}

// ---------------------------------------------------------------------------
// Resident memory of a large mapped model

struct rss {
    long long anon_kb = -1, file_kb = -1;
};
rss read_rss() {
    rss r;
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("RssAnon:", 0) == 0) r.anon_kb = std::stoll(line.substr(8));
        if (line.rfind("RssFile:", 0) == 0) r.file_kb = std::stoll(line.substr(8));
    }
    return r;
}

// A 266 MB F16 llama (tinygml-synth) loaded mapped adds no anonymous copy:
// RssAnon grows by a few MiB at load and after a forward pass that reads
// every weight, while RssFile grows by about the file size once the weights
// are touched (they are read through the map). Read instead (--no-mmap), the
// same model adds the file's size to RssAnon: the measurement sees a copy.
TEST(MappedModelRss, LargeModelAddsNoResidentCopy) {
#ifdef TG_TEST_ASAN
    GTEST_SKIP() << "resident-memory figures are not meaningful under ASan (shadow memory)";
#endif
    if (read_rss().anon_kb < 0) GTEST_SKIP() << "no RssAnon in /proc/self/status";
    struct statvfs vfs;
    if (statvfs(::testing::TempDir().c_str(), &vfs) == 0 && (double)vfs.f_bavail * vfs.f_frsize < 1.5e9)
        GTEST_SKIP() << "less than 1.5 GB free in " << ::testing::TempDir();
    tgm::synth_config c;
    c.name = "rss";
    c.n_embd = 1024, c.n_layer = 6, c.n_head = 16, c.n_head_kv = 4, c.n_ff = 2816, c.n_vocab = 32000, c.n_ctx = 64;
    c.wtype = TG_TYPE_F16;
    const std::string path = ::testing::TempDir() + "tg_mmap_rss_" + std::to_string(getpid()) + ".gguf";
    ASSERT_EQ(tgm::synth_write(c, path.c_str()), TG_OK) << tg_last_error();
    const long long file_kb = (long long)std::filesystem::file_size(path) / 1024;
    EXPECT_GT(file_kb, 250 * 1024);
    tg_backend *be = tg_backend_cpu(2);
    const std::vector<int32_t> toks = tgm::tokenize("hi", true);
    auto forward = [&](const tgm::model *m) {
        tgm::session *s = tgm::session_new(m, 1, 8);
        std::vector<float> logits;
        EXPECT_EQ(tgm::session_eval(s, 0, 1, toks.data(), (int)toks.size(), false, &logits), TG_OK)
            << tg_last_error();
        tgm::session_free(s);
        return logits;
    };
    std::vector<float> lm, lr;
    {
        const rss r0 = read_rss();
        ModelPtr m(tgm::model_load(path.c_str(), be));
        ASSERT_TRUE(m) << tg_last_error();
        const rss r1 = read_rss();
        lm = forward(m.get());
        const rss r2 = read_rss();
        printf("mmap: file %lld KiB; RssAnon %+lld KiB at load, %+lld after a forward; RssFile %+lld, %+lld\n",
               file_kb, r1.anon_kb - r0.anon_kb, r2.anon_kb - r0.anon_kb, r1.file_kb - r0.file_kb,
               r2.file_kb - r0.file_kb);
        EXPECT_LT(r1.anon_kb - r0.anon_kb, file_kb / 16) << "anonymous memory grew at load";
        EXPECT_LT(r2.anon_kb - r0.anon_kb, file_kb / 8) << "anonymous memory grew by a copy";
        EXPECT_LT(r1.file_kb - r0.file_kb, file_kb / 16) << "the load touched the weights";
        EXPECT_GT(r2.file_kb - r0.file_kb, file_kb / 2) << "the forward did not read the weights from the map";
    }
    {
        tgm::load_options o;
        o.use_mmap = false;
        const rss r0 = read_rss();
        ModelPtr m(tgm::model_load(path.c_str(), be, o));
        ASSERT_TRUE(m) << tg_last_error();
        const rss r1 = read_rss();
        lr = forward(m.get());
        printf("read: RssAnon %+lld KiB at load\n", r1.anon_kb - r0.anon_kb);
        EXPECT_GT(r1.anon_kb - r0.anon_kb, file_kb * 9 / 10) << "the read path's copy was not seen";
    }
    ASSERT_EQ(lm.size(), (size_t)c.n_vocab);
    ASSERT_EQ(lr.size(), lm.size());
    EXPECT_FALSE(std::isnan(lm[0]));
    EXPECT_EQ(memcmp(lm.data(), lr.data(), lm.size() * 4), 0);
    tg_backend_free(be);
    std::remove(path.c_str());
}

}  // namespace

namespace {

// The documented SIGBUS case (tinygml.h, tg_gguf_open_mmap): a mapped file
// truncated under a running process kills it with SIGBUS on the next touch of
// a page past its new end; the same file read instead is unaffected.
TEST(GgufMmapDeathTest, TruncatedUnderTheMapIsSigbus) {
#ifdef TG_TEST_ASAN
    GTEST_SKIP() << "ASan handles SIGBUS itself (reports and exits)";
#endif
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::string path = temp_path("sigbus");
    std::vector<float> big(4 << 10, 1.5f);  // 16 KiB: several pages
    WriterPtr w(tg_gguf_writer_new());
    const int64_t ne[1] = {(int64_t)big.size()};
    ASSERT_EQ(tg_gguf_add_tensor(w.get(), "w", TG_TYPE_F32, 1, ne, big.data()), TG_OK);
    ASSERT_EQ(tg_gguf_write(w.get(), path.c_str()), TG_OK);
    auto touch_last_after_truncate = [&](bool mapped) {
        tg_gguf *g = mapped ? tg_gguf_open_mmap(path.c_str()) : tg_gguf_open(path.c_str());
        if (!g) exit(3);
        if (truncate(path.c_str(), 0) != 0) exit(4);
        // the child (a fresh run of this test under the threadsafe style)
        // wrote a file of its own: gone before the touch that may kill it
        // (the map keeps the truncated inode alive)
        std::remove(path.c_str());
        const volatile float *d = (const volatile float *)tg_gguf_tensor_data(g, 0);
        float v = d[big.size() - 1];
        exit(v == 1.5f ? 0 : 5);
    };
    EXPECT_EXIT(touch_last_after_truncate(true), ::testing::KilledBySignal(SIGBUS), "");
    ASSERT_EQ(tg_gguf_write(w.get(), path.c_str()), TG_OK);
    EXPECT_EXIT(touch_last_after_truncate(false), ::testing::ExitedWithCode(0), "");
    std::remove(path.c_str());
}

}  // namespace
