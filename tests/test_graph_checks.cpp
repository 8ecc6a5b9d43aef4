// test_graph_checks.cpp - tg_graph_compute's checks before it runs a graph
// (leaf storage live and in the backend's memory, no in-place write to
// read-only memory) are skipped on a recompute while nothing they depend on
// changed (src/graph.h tg_graph_checked). Each case computes a graph
// successfully first (so the record exists), then changes one thing the
// checks depend on and expects the same refusal a first compute gets, with
// the previous results untouched; and a graph recomputed many times still
// computes fresh inputs.
#include <cstring>

#include "test_util.h"

namespace {

bool has(const char *msg, const char *part) { return msg && strstr(msg, part); }

struct add_graph {
    tg_context *ctx = nullptr;
    tg_tensor *a = nullptr, *b = nullptr, *y = nullptr;
    tg_graph *g = nullptr;
    add_graph() {
        tg_init_params ip = {1 << 20, nullptr, true};
        ctx = tg_init(ip);
        a = tg_new_tensor_1d(ctx, TG_TYPE_F32, 8);
        b = tg_new_tensor_1d(ctx, TG_TYPE_F32, 8);
        tg_set_name(a, "a");
        tg_set_name(b, "b");
        y = tg_add(ctx, a, b);
        g = tg_graph_new(ctx);
        tg_graph_expand(g, y);
    }
    tg_buffer *buf = nullptr;  // the inputs' storage (computed_on)
    ~add_graph() {
        if (buf) tg_buffer_free(buf);
        tg_free(ctx);
    }
    // Inputs stored on be and set, the graph computed twice there (the second
    // compute runs on the recorded checks).
    void computed_on(tg_backend *be, float av, float bv) {
        buf = tg_backend_alloc(be, ctx);
        ASSERT_NE(buf, nullptr) << tg_last_error();
        set(av, bv);
        ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
        ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
    }
    void set(float av, float bv) {
        std::vector<float> x(8, av), z(8, bv);
        x[3] = av * 2;
        ASSERT_EQ(TG_OK, tg_tensor_set(a, x.data(), 0, 32)) << tg_last_error();
        ASSERT_EQ(TG_OK, tg_tensor_set(b, z.data(), 0, 32)) << tg_last_error();
    }
    std::vector<float> out() const {
        std::vector<float> o(8, NAN);
        EXPECT_EQ(TG_OK, tg_tensor_get(y, o.data(), 0, 32)) << tg_last_error();
        return o;
    }
};

TEST(GraphChecks, RecomputesSeeNewInputs) {
    add_graph f;
    tg_backend *be = tg_backend_cpu(2);
    f.buf = tg_backend_alloc(be, f.ctx);
    ASSERT_NE(f.buf, nullptr) << tg_last_error();
    for (int i = 0; i < 50; i++) {
        f.set((float)i, 0.5f);
        ASSERT_EQ(TG_OK, tg_graph_compute(be, f.g)) << tg_last_error();
        const std::vector<float> o = f.out();
        ASSERT_EQ((float)i + 0.5f, o[0]) << "compute " << i;
        ASSERT_EQ((float)(2 * i) + 0.5f, o[3]) << "compute " << i;
    }
    tg_backend_free(be);
}

// The buffer holding the inputs freed after a successful compute: refused as
// on a first compute; the previous result stays readable and unchanged.
TEST(GraphChecks, FreedInputBufferRefusedAfterASuccess) {
    add_graph f;
    tg_backend *be = tg_backend_cpu(1);
    ASSERT_NO_FATAL_FAILURE(f.computed_on(be, 1.0f, 2.0f));
    const std::vector<float> before = f.out();
    tg_buffer_free(f.buf);
    f.buf = nullptr;
    EXPECT_EQ(TG_ERR_ARG, tg_graph_compute(be, f.g));
    EXPECT_TRUE(has(tg_last_error(), "[graph_compute] tensor 'a': its buffer was freed")) << tg_last_error();
    EXPECT_TRUE(f.out() == before) << "a refused compute changed the previous result";
    // new storage for the inputs: computes again
    ASSERT_NO_FATAL_FAILURE(f.computed_on(be, 3.0f, 4.0f));
    EXPECT_EQ(7.0f, f.out()[0]);
    tg_backend_free(be);
}

// A graph checked on the CPU backend (host leaves), then computed on a CUDA
// backend: refused there (host memory), though the record from the CPU
// compute holds for the same leaves; then the CPU compute again. Only a
// backend of another memory kind can tell whether the record is keyed on
// the backend, so this needs a GPU.
TEST(GraphChecks, AnotherMemoryKindIsCheckedAgain) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device (the case needs a backend of device memory)";
    add_graph f;
    tg_backend *cpu = tg_backend_cpu(1), *gpu = tg_backend_cuda(0);
    ASSERT_NE(gpu, nullptr) << tg_last_error();
    ASSERT_NO_FATAL_FAILURE(f.computed_on(cpu, 1.0f, 1.0f));
    EXPECT_EQ(TG_ERR_ARG, tg_graph_compute(gpu, f.g));
    EXPECT_TRUE(has(tg_last_error(), "lives in host memory, but the backend is")) << tg_last_error();
    EXPECT_EQ(2.0f, f.out()[0]) << "a refused compute changed the previous result";
    f.set(2.0f, 1.0f);
    ASSERT_EQ(TG_OK, tg_graph_compute(cpu, f.g)) << tg_last_error();
    EXPECT_EQ(3.0f, f.out()[0]);
    tg_backend_free(gpu);
    tg_backend_free(cpu);
}

// A leaf added by tg_graph_expand after a successful compute has no storage:
// refused by name.
TEST(GraphChecks, ExpandedLeafWithoutStorageRefused) {
    add_graph f;
    tg_backend *be = tg_backend_cpu(1);
    ASSERT_NO_FATAL_FAILURE(f.computed_on(be, 1.0f, 2.0f));
    tg_tensor *c = tg_new_tensor_1d(f.ctx, TG_TYPE_F32, 8);
    tg_set_name(c, "c");
    tg_tensor *z = tg_mul(f.ctx, f.y, c);
    ASSERT_EQ(TG_OK, tg_graph_expand(f.g, z)) << tg_last_error();
    EXPECT_EQ(TG_ERR_ARG, tg_graph_compute(be, f.g));
    EXPECT_TRUE(has(tg_last_error(), "input 'c'")) << tg_last_error();
    EXPECT_TRUE(has(tg_last_error(), "has no storage")) << tg_last_error();
    tg_buffer *buf2 = tg_backend_alloc(be, f.ctx);
    ASSERT_NE(buf2, nullptr) << tg_last_error();
    const std::vector<float> cv(8, 2.0f);
    ASSERT_EQ(TG_OK, tg_tensor_set(c, cv.data(), 0, 32));
    ASSERT_EQ(TG_OK, tg_graph_compute(be, f.g)) << tg_last_error();
    float z0 = NAN;
    ASSERT_EQ(TG_OK, tg_tensor_get(z, &z0, 0, 4));
    EXPECT_EQ(6.0f, z0);
    tg_buffer_free(buf2);
    tg_backend_free(be);
}

// A cpy into caller memory: computed while the memory is registered
// writable; then the buffer is freed and the same memory registered
// read-only, the target placed in it again: the in-place write is refused
// before anything runs, the memory unchanged.
TEST(GraphChecks, TargetNowReadOnlyRefused) {
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_tensor *x = tg_new_tensor_1d(ctx, TG_TYPE_F32, 16), *dst = tg_new_tensor_1d(ctx, TG_TYPE_F32, 16);
    tg_set_name(dst, "dst");
    tg_tensor *cp = tg_cpy(ctx, tg_scale(ctx, x, 2.0f), dst);
    tg_graph *g = tg_graph_new(ctx);
    ASSERT_EQ(TG_OK, tg_graph_expand(g, cp)) << tg_last_error();
    tg_backend *be = tg_backend_cpu(1);
    alignas(64) static float mem[16];
    for (float &v : mem) v = -1.0f;
    tg_buffer *user = tg_backend_buffer_from_host_ptr(be, mem, sizeof mem, false);
    ASSERT_NE(user, nullptr) << tg_last_error();
    ASSERT_EQ(TG_OK, tg_buffer_place(user, dst, 0)) << tg_last_error();
    tg_buffer *buf = tg_backend_alloc(be, ctx);  // x
    ASSERT_NE(buf, nullptr) << tg_last_error();
    const std::vector<float> xv(16, 1.5f);
    ASSERT_EQ(TG_OK, tg_tensor_set(x, xv.data(), 0, 64));
    ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
    ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
    EXPECT_EQ(3.0f, mem[0]);
    tg_buffer_free(user);
    mem[0] = -7.0f;
    tg_buffer *ro = tg_backend_buffer_from_host_ptr(be, mem, sizeof mem, true);
    ASSERT_NE(ro, nullptr) << tg_last_error();
    ASSERT_EQ(TG_OK, tg_buffer_place(ro, dst, 0)) << tg_last_error();
    EXPECT_EQ(TG_ERR_ARG, tg_graph_compute(be, g));
    EXPECT_TRUE(has(tg_last_error(), "writes tensor 'dst' in place, but it is in read-only memory")) << tg_last_error();
    EXPECT_EQ(-7.0f, mem[0]) << "a refused compute wrote the read-only memory";
    tg_buffer_free(ro);
    tg_buffer_free(buf);
    tg_backend_free(be);
    tg_free(ctx);
}

}  // namespace
