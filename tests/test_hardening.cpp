// test_hardening.cpp - issue 8, items 1-6: values checked are the values read
// (an index tensor written earlier in the same graph), tg_init sizes that
// wrap, either free order of buffers and backends, a failed compute keeps the
// previous outputs, cpy between overlapping views, handles of freed contexts.
// CPU always; the same scenarios on CUDA when a device is present.
#include <cstring>
#include <random>
#include <string>

#include "sig_util.h"
#include "test_util.h"

namespace {


// tensor values in and out: the signature tests' helpers (tests/sig_util.h)
using sig::set_i32;
const auto get_f32 = sig::get_values;
const auto set_f32 = sig::set_values;

// A backend by name: "cpu" or "cuda" (NULL when no device).
tg_backend *make_backend(const std::string &kind) {
    if (kind == "cpu") return tg_backend_cpu(2);
    return tg_cuda_available() ? tg_backend_cuda(0) : nullptr;
}

class Hardening : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        be = make_backend(GetParam());
        if (!be) GTEST_SKIP() << "no CUDA device";
    }
    void TearDown() override { tg_backend_free(be); }
    tg_backend *be = nullptr;
};

// ---------------------------------------------------------------------------
// item 1: rope_kv_update positions and get_rows ids written by an earlier cpy
// of the same graph are checked as written, never as they were before.

// One randomized scenario: caches {D, H, L, B} with a sentinel leaf allocated
// right after them in the same buffer; a positions leaf `pos` with initial
// values; up to two cpy nodes writing new values into pos (whole, or one
// sequence's column through a view) before the update reads pos (or the last
// cpy's result). Returns whether it found a bad case, for coverage counting.
bool run_kv_case(tg_backend *be, std::mt19937 &rng, int iter) {
    std::uniform_int_distribution<int> small(1, 4);
    const int D = 4, H = 1 + iter % 2, L = 4 + iter % 5, T = small(rng) % 3 + 1, B = 1 + iter % 3;
    tgt::env e(8 << 20);
    tg_tensor *kc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, H, L, B);
    tg_tensor *vc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, H, L, B);
    tg_tensor *sentinel = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 256);
    tg_tensor *kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, H, T, B);
    tg_tensor *vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, H, T, B);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, T, B);
    const int n_cpy = iter % 3;
    std::vector<tg_tensor *> newvals;
    for (int c = 0; c < n_cpy; c++) newvals.push_back(tg_new_tensor_2d(e.ctx, TG_TYPE_I32, T, B));
    tg_buffer *buf = e.alloc(be);
    EXPECT_NE(buf, nullptr) << tg_last_error();
    if (!buf) return false;

    // values: mostly valid distinct positions, sometimes L, -1 or a repeat
    auto make_positions = [&](std::vector<int32_t> &p) {
        p.assign((size_t)T * B, 0);
        for (int b = 0; b < B; b++) {
            std::vector<int32_t> perm(L);
            for (int i = 0; i < L; i++) perm[i] = i;
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int t = 0; t < T; t++) p[(size_t)b * T + t] = perm[t % L];
        }
        const int r = (int)(rng() % 8);
        const size_t at = rng() % p.size();
        if (r == 0) p[at] = L;
        if (r == 1) p[at] = -1;
        if (r == 2) p[at] = L + 1000000;
        if (r == 3 && T > 1) p[(at / T) * T + (at % T + 1) % T] = p[at];  // repeat within a sequence
    };
    std::vector<int32_t> p0;
    make_positions(p0);
    set_i32(pos, p0);
    std::vector<int32_t> effective = p0;
    tg_tensor *read = pos;
    std::vector<tg_tensor *> cpys;
    std::vector<std::vector<int32_t>> nv(n_cpy);
    for (int c = 0; c < n_cpy; c++) {
        make_positions(nv[c]);
        set_i32(newvals[c], nv[c]);
        const bool column = B > 1 && rng() % 2;  // write one sequence through a view
        if (column) {
            const int b = (int)(rng() % B);
            tg_tensor *dst = tg_view_1d(e.ctx, pos, T, (size_t)b * T * 4);
            tg_tensor *src = tg_view_1d(e.ctx, newvals[c], T, (size_t)b * T * 4);
            read = tg_cpy(e.ctx, src, dst);
            for (int t = 0; t < T; t++) effective[(size_t)b * T + t] = nv[c][(size_t)b * T + t];
        } else {
            read = tg_cpy(e.ctx, newvals[c], pos);
            effective = nv[c];
        }
        EXPECT_NE(read, nullptr) << tg_last_error();
        cpys.push_back(read);
    }
    const bool through_leaf = rng() % 2;  // read pos itself: the cpy nodes still run first
    tg_tensor *upd_pos = n_cpy == 0 || through_leaf ? pos : (tg_ne(read, 1) == B ? read : pos);
    tg_rope_params rp = tg_rope_default_params(D);
    tg_tensor *r = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, upd_pos, nullptr, nullptr, &rp);
    EXPECT_NE(r, nullptr) << tg_last_error();
    tg_graph *g = tg_graph_new(e.ctx);
    for (tg_tensor *c : cpys) EXPECT_EQ(tg_graph_expand(g, c), TG_OK);
    EXPECT_EQ(tg_graph_expand(g, r), TG_OK);

    std::vector<float> k0 = tgt::random_floats(rng, (size_t)D * H * L * B), v0 = tgt::random_floats(rng, k0.size());
    std::vector<float> s0 = tgt::random_floats(rng, 256), knv = tgt::random_floats(rng, (size_t)D * H * T * B),
                       vnv = tgt::random_floats(rng, knv.size());
    set_f32(kc, k0), set_f32(vc, v0), set_f32(sentinel, s0), set_f32(kn, knv), set_f32(vn, vnv);

    bool ok = true;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int p = effective[(size_t)b * T + t];
            ok = ok && p >= 0 && p < L;
            for (int u = 0; u < t; u++) ok = ok && effective[(size_t)b * T + u] != p;
        }
    const tg_status s = tg_graph_compute(be, g);
    EXPECT_EQ(s == TG_OK, ok) << "iteration " << iter << ": " << tg_last_error();
    EXPECT_EQ(get_f32(sentinel), s0) << "a write went past the caches (iteration " << iter << ")";
    const std::vector<float> k1 = get_f32(kc), v1 = get_f32(vc);
    if (s != TG_OK) {
        EXPECT_EQ(std::string(tg_last_error()).rfind("[rope_kv_update]", 0), 0u) << tg_last_error();
        EXPECT_EQ(k1, k0) << "failed update wrote the K cache (iteration " << iter << ")";
        EXPECT_EQ(v1, v0) << "failed update wrote the V cache (iteration " << iter << ")";
        return true;
    }
    // V rows at the effective positions hold v_new exactly; other rows are untouched
    std::vector<float> vexp = v0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++)
                    vexp[(((size_t)b * L + effective[(size_t)b * T + t]) * H + h) * D + d] =
                        vnv[(((size_t)b * T + t) * H + h) * D + d];
    EXPECT_EQ(v1, vexp) << "iteration " << iter;
    return false;
}

TEST_P(Hardening, RandomPositionWritesBeforeRopeKvUpdateStayInBounds) {
    std::mt19937 rng(811);
    int bad = 0;
    const int n = 150;
    for (int i = 0; i < n && !HasFailure(); i++) bad += run_kv_case(be, rng, i);
    EXPECT_GT(bad, 10) << "the scenarios must include bad positions";
    EXPECT_LT(bad, n - 10) << "the scenarios must include good positions";
}

// The exact report of the issue: pos (a leaf) holds 0, a cpy writes L into it.
TEST_P(Hardening, CpyOfABadPositionIntoACheckedLeafIsCaught) {
    const int D = 8, L = 8;
    tgt::env e;
    tg_tensor *kc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, L, 1);
    tg_tensor *vc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, L, 1);
    tg_tensor *after = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 64);
    tg_tensor *kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, 1, 1);
    tg_tensor *vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, 1, 1);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 1, 1);
    tg_tensor *newpos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 1, 1);
    ASSERT_NE(e.alloc(be), nullptr);
    std::mt19937 rng(3);
    const std::vector<float> k0 = tgt::random_floats(rng, D * L), a0 = tgt::random_floats(rng, 64);
    set_f32(kc, k0), set_f32(vc, k0), set_f32(after, a0);
    set_f32(kn, tgt::random_floats(rng, D)), set_f32(vn, tgt::random_floats(rng, D));
    set_i32(pos, {0});
    set_i32(newpos, {L});
    tg_rope_params rp = tg_rope_default_params(D);
    tg_tensor *pc = tg_cpy(e.ctx, newpos, pos);
    tg_tensor *r = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pc, nullptr, nullptr, &rp);
    tg_graph *g = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g, r), TG_OK);
    EXPECT_EQ(tg_graph_compute(be, g), TG_ERR_ARG);
    EXPECT_ERR_NAMES("rope_kv_update");
    EXPECT_NE(strstr(tg_last_error(), "position 8 out of range [0, 8)"), nullptr) << tg_last_error();
    EXPECT_EQ(get_f32(kc), k0);
    EXPECT_EQ(get_f32(vc), k0);
    EXPECT_EQ(get_f32(after), a0) << "the neighbouring tensor was overwritten";

    // and the other way round: a bad stale value overwritten by a good one passes
    set_i32(pos, {L + 5});
    set_i32(newpos, {3});
    EXPECT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
    std::vector<float> v1 = get_f32(vc), vnv = get_f32(vn), want = k0;
    for (int d = 0; d < D; d++) want[3 * D + d] = vnv[d];
    EXPECT_EQ(v1, want);
}

TEST_P(Hardening, CpyOfBadIdsIntoACheckedLeafIsCaughtByGetRows) {
    const int E = 16, V = 5, N = 6;
    std::mt19937 rng(5);
    for (int iter = 0; iter < 40 && !HasFailure(); iter++) {
        tgt::env e;
        tg_tensor *a = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, E, V);
        tg_tensor *after = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 64);
        tg_tensor *ids = tg_new_tensor_1d(e.ctx, TG_TYPE_I32, N);
        tg_tensor *newids = tg_new_tensor_1d(e.ctx, TG_TYPE_I32, N);
        ASSERT_NE(e.alloc(be), nullptr);
        const std::vector<float> av = tgt::random_floats(rng, E * V), a0 = tgt::random_floats(rng, 64);
        set_f32(a, av), set_f32(after, a0);
        std::vector<int32_t> i0(N), i1(N);
        for (int i = 0; i < N; i++) i0[i] = (int)(rng() % V), i1[i] = (int)(rng() % V);
        const int kind = iter % 4;  // 0: all good, 1: new bad, 2: old bad new good, 3: old bad, no cpy read
        if (kind == 1) i1[rng() % N] = iter % 2 ? V : -7;
        if (kind >= 2) i0[rng() % N] = V + 100000;
        set_i32(ids, i0), set_i32(newids, i1);
        tg_tensor *ic = tg_cpy(e.ctx, newids, ids);
        tg_tensor *rows = tg_get_rows(e.ctx, a, kind == 3 ? ids : ic);
        ASSERT_NE(rows, nullptr) << tg_last_error();
        tg_graph *g = tg_graph_new(e.ctx);
        ASSERT_EQ(tg_graph_expand(g, ic), TG_OK);
        ASSERT_EQ(tg_graph_expand(g, rows), TG_OK);
        const tg_status s = tg_graph_compute(be, g);
        EXPECT_EQ(get_f32(after), a0);
        if (kind == 1) {
            EXPECT_EQ(s, TG_ERR_ARG) << "iteration " << iter;
            EXPECT_ERR_NAMES("get_rows");
            continue;
        }
        // kinds 0, 2, 3: the cpy ran first, so the ids read are i1, all good
        ASSERT_EQ(s, TG_OK) << "iteration " << iter << ": " << tg_last_error();
        std::vector<float> out = get_f32(rows);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < E; k++) EXPECT_EQ(out[(size_t)i * E + k], av[(size_t)i1[i] * E + k]);
    }
}

// ---------------------------------------------------------------------------
// item 4: a compute that fails keeps the compute buffer, so the previous
// graph's results stay readable (and unchanged: the failure is found first)

TEST_P(Hardening, FailedComputeKeepsThePreviousOutputs) {
    const int D = 8, L = 8, big = 1 << 16;
    tgt::env e;
    tg_tensor *x = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 64);
    tg_tensor *y = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, big);
    tg_tensor *kc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, L, 1);
    tg_tensor *vc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, L, 1);
    tg_tensor *kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, 1, 1);
    tg_tensor *vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, D, 1, 1, 1);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 1, 1);
    ASSERT_NE(e.alloc(be), nullptr);
    std::mt19937 rng(9);
    const std::vector<float> xv = tgt::random_floats(rng, 64);
    set_f32(x, xv), set_f32(y, tgt::random_floats(rng, big));
    set_f32(kc, tgt::random_floats(rng, D * L)), set_f32(vc, tgt::random_floats(rng, D * L));
    set_f32(kn, tgt::random_floats(rng, D)), set_f32(vn, tgt::random_floats(rng, D));
    set_i32(pos, {L});  // bad

    tg_tensor *small = tg_scale(e.ctx, tg_add(e.ctx, x, x), 0.5f);  // == x
    tg_graph *g1 = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g1, small), TG_OK);
    ASSERT_EQ(tg_graph_compute(be, g1), TG_OK) << tg_last_error();
    const size_t size1 = tg_backend_compute_buffer_size(be);
    const std::vector<float> out1 = get_f32(small);
    ASSERT_EQ(out1, xv);

    // a much larger graph whose rope_kv_update position is bad
    tg_rope_params rp = tg_rope_default_params(D);
    tg_tensor *r = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, nullptr, nullptr, &rp);
    tg_tensor *yy = tg_scale(e.ctx, tg_silu(e.ctx, tg_add(e.ctx, y, y)), 2.0f);
    tg_graph *g2 = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g2, r), TG_OK);
    ASSERT_EQ(tg_graph_expand(g2, yy), TG_OK);
    tg_graph_stats st;
    ASSERT_EQ(tg_graph_plan(g2, &st), TG_OK);
    ASSERT_GT(st.planned_bytes, size1) << "the second graph must need a larger compute buffer";
    EXPECT_EQ(tg_graph_compute(be, g2), TG_ERR_ARG);
    EXPECT_ERR_NAMES("rope_kv_update");
    EXPECT_EQ(tg_backend_compute_buffer_size(be), size1) << "a failed compute replaced the compute buffer";
    std::vector<float> again(64);
    ASSERT_EQ(tg_tensor_get(small, again.data(), 0, 256), TG_OK) << tg_last_error();
    EXPECT_EQ(again, out1) << "the previous graph's output changed";
    // the failed graph's results are not readable
    std::vector<float> tmp(big);
    EXPECT_NE(tg_tensor_get(yy, tmp.data(), 0, tmp.size() * 4), TG_OK);

    // fixed, it computes and grows the buffer
    set_i32(pos, {2});
    EXPECT_EQ(tg_graph_compute(be, g2), TG_OK) << tg_last_error();
    EXPECT_GE(tg_backend_compute_buffer_size(be), st.planned_bytes);
}

// ---------------------------------------------------------------------------
// item 3: buffers and backends freed in either order

TEST_P(Hardening, BufferFreedAfterItsBackendIsSafe) {
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_tensor *t = tg_new_tensor_1d(ctx, TG_TYPE_F32, 100);
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    ASSERT_NE(buf, nullptr);
    EXPECT_GT(tg_buffer_size(buf), 0u);
    std::vector<float> v(100, 1.5f);
    set_f32(t, v);
    tg_backend_free(be);
    tg_backend *freed = be;
    be = nullptr;  // TearDown must not free it again (a second free is a no-op anyway)
    EXPECT_NE(tg_tensor_get(t, v.data(), 0, 400), TG_OK);
    EXPECT_ERR_NAMES("tensor_get");
    EXPECT_EQ(tg_buffer_size(buf), 0u);
    EXPECT_EQ(tg_buffer_clear(buf, 0), TG_ERR_ARG);
    EXPECT_ERR_NAMES("buffer_clear");
    tg_graph *g = tg_graph_new(ctx);
    ASSERT_EQ(tg_graph_expand(g, tg_scale(ctx, t, 2.0f)), TG_OK);
    EXPECT_EQ(tg_graph_compute(freed, g), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_compute");
    EXPECT_EQ(tg_backend_alloc(freed, ctx), nullptr);
    EXPECT_ERR_NAMES("backend_alloc");
    tg_backend_free(freed);  // twice: ignored
    tg_buffer_free(buf);
    tg_buffer_free(buf);  // twice: ignored
    tg_free(ctx);
}

TEST_P(Hardening, BufferFreedBeforeItsBackendStillWorks) {
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_tensor *t = tg_new_tensor_1d(ctx, TG_TYPE_F32, 100);
    tg_buffer *b1 = tg_backend_alloc(be, ctx);
    ASSERT_NE(b1, nullptr);
    tg_buffer_free(b1);
    float v[4] = {0};
    EXPECT_NE(tg_tensor_get(t, v, 0, 16), TG_OK);
    tg_buffer *b2 = tg_backend_alloc(be, ctx);  // the tensor gets storage again
    ASSERT_NE(b2, nullptr);
    EXPECT_EQ(tg_tensor_set(t, v, 0, 16), TG_OK) << tg_last_error();
    tg_buffer_free(b2);
    tg_free(ctx);
}

// ---------------------------------------------------------------------------
// item 6: handles of a freed context are refused

TEST_P(Hardening, TensorsAndGraphsOfAFreedContextAreRefused) {
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *keep = tg_init(ip), *gone = tg_init(ip);
    tg_tensor *a = tg_new_tensor_1d(keep, TG_TYPE_F32, 8);
    tg_tensor *b = tg_new_tensor_1d(gone, TG_TYPE_F32, 8);
    tg_buffer *ba = tg_backend_alloc(be, keep), *bb = tg_backend_alloc(be, gone);
    ASSERT_NE(ba, nullptr);
    ASSERT_NE(bb, nullptr);
    tg_tensor *sum = tg_add(keep, a, b);  // a graph of keep's that reads gone's tensor
    tg_graph *mixed = tg_graph_new(keep);
    ASSERT_EQ(tg_graph_expand(mixed, sum), TG_OK);
    tg_graph *g_gone = tg_graph_new(gone);
    ASSERT_EQ(tg_graph_expand(g_gone, tg_scale(gone, b, 2.0f)), TG_OK);
    tg_buffer_free(bb);
    tg_free(gone);

    float v[8] = {0};
    EXPECT_EQ(tg_tensor_get(b, v, 0, 32), TG_ERR_ARG);
    EXPECT_ERR_NAMES("tensor_get");
    EXPECT_NE(strstr(tg_last_error(), "freed"), nullptr) << tg_last_error();
    EXPECT_EQ(tg_tensor_set(b, v, 0, 32), TG_ERR_ARG);
    EXPECT_EQ(tg_add(keep, a, b), nullptr);
    EXPECT_ERR_NAMES("add");
    EXPECT_EQ(tg_new_tensor_1d(gone, TG_TYPE_F32, 4), nullptr);
    EXPECT_ERR_NAMES("new_tensor");
    EXPECT_EQ(tg_graph_new(gone), nullptr);
    EXPECT_EQ(tg_used_mem(gone), 0u);
    EXPECT_EQ(tg_get_tensor(gone, "x"), nullptr);
    EXPECT_EQ(tg_graph_compute(be, g_gone), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_compute");
    EXPECT_EQ(tg_graph_compute(be, mixed), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_compute");
    tg_graph *g2 = tg_graph_new(keep);
    EXPECT_EQ(tg_graph_expand(g2, b), TG_ERR_ARG);
    EXPECT_ERR_NAMES("graph_expand");
    tg_free(gone);  // twice: ignored

    // the live context still works
    tg_graph *ok = tg_graph_new(keep);
    tg_tensor *twice = tg_scale(keep, a, 2.0f);
    ASSERT_EQ(tg_graph_expand(ok, twice), TG_OK);
    std::vector<float> av = {1, 2, 3, 4, 5, 6, 7, 8};
    set_f32(a, av);
    EXPECT_EQ(tg_graph_compute(be, ok), TG_OK) << tg_last_error();
    EXPECT_EQ(get_f32(twice)[7], 16.0f);
    tg_buffer_free(ba);
    tg_free(keep);
}

INSTANTIATE_TEST_SUITE_P(Backends, Hardening, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

// ---------------------------------------------------------------------------
// item 2: arena sizes whose alignment round-up would wrap are refused

TEST(HardeningInit, SizesThatWrapWhenAlignedAreRefused) {
    for (size_t sub : {(size_t)0, (size_t)1, (size_t)31, (size_t)63}) {
        for (bool no_alloc : {false, true}) {
            tg_init_params ip = {SIZE_MAX - sub, nullptr, no_alloc};
            EXPECT_EQ(tg_init(ip), nullptr) << "mem_size SIZE_MAX - " << sub;
            EXPECT_ERR_NAMES("init");
            EXPECT_NE(strstr(tg_last_error(), "too large"), nullptr) << tg_last_error();
        }
    }
    // a caller buffer with an honest size still works
    alignas(64) static char arena[1 << 12];
    tg_init_params ip = {sizeof arena, arena, false};
    tg_context *ctx = tg_init(ip);
    ASSERT_NE(ctx, nullptr);
    EXPECT_NE(tg_new_tensor_1d(ctx, TG_TYPE_F32, 16), nullptr);
    EXPECT_EQ(tg_new_tensor_1d(ctx, TG_TYPE_F32, 1 << 12), nullptr);
    tg_free(ctx);
}

// Random arena sizes near the wrap and random tensor requests in a small
// caller arena: every tensor made lies inside the arena, nothing else is made.
TEST(HardeningInit, RandomSizesNeverGiveATensorOutsideItsArena) {
    std::mt19937_64 rng(77);
    for (int i = 0; i < 200; i++) {
        tg_init_params ip = {SIZE_MAX - (size_t)(rng() % 64), nullptr, (bool)(rng() % 2)};
        ASSERT_EQ(tg_init(ip), nullptr);
    }
    alignas(64) static char arena[1 << 14];
    for (int round = 0; round < 50; round++) {
        const size_t size = 256 + rng() % (sizeof arena - 256);
        tg_init_params ip = {size, arena, false};
        tg_context *ctx = tg_init(ip);
        ASSERT_NE(ctx, nullptr);
        for (int k = 0; k < 40; k++) {
            const int64_t ne0 = rng() % 4 == 0 ? (int64_t)(rng() >> 2) : (int64_t)(1 + rng() % 512);
            const int64_t ne1 = rng() % 8 == 0 ? INT64_MAX / 3 : (int64_t)(1 + rng() % 4);
            tg_tensor *t = tg_new_tensor_2d(ctx, (tg_type)(rng() % TG_TYPE_COUNT), ne0, ne1);
            if (!t) continue;
            const char *d = (const char *)tg_tensor_data(t);
            ASSERT_NE(d, nullptr);
            ASSERT_GE(d, arena);
            ASSERT_LE(d + tg_nbytes(t), arena + size) << "tensor data past the arena";
            ASSERT_LE(tg_used_mem(ctx), size);
        }
        tg_free(ctx);
    }
}

// ---------------------------------------------------------------------------
// item 5: cpy between overlapping views is refused; disjoint ones compute

TEST(HardeningCpy, OverlappingViewsAreRefused) {
    tgt::env e;
    tg_tensor *m = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 4, 4);
    EXPECT_EQ(tg_cpy(e.ctx, tg_transpose(e.ctx, m), m), nullptr);
    EXPECT_ERR_NAMES("cpy");
    EXPECT_NE(strstr(tg_last_error(), "share storage"), nullptr) << tg_last_error();
    // shifted by one row: overlapping
    tg_tensor *top = tg_view_2d(e.ctx, m, 4, 3, 16, 0), *low = tg_view_2d(e.ctx, m, 4, 3, 16, 16);
    EXPECT_EQ(tg_cpy(e.ctx, top, low), nullptr);
    EXPECT_ERR_NAMES("cpy");
    // through a cpy result (a view of its target)
    tg_tensor *n = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 4, 4);
    tg_tensor *c = tg_cpy(e.ctx, n, m);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(tg_cpy(e.ctx, tg_transpose(e.ctx, c), m), nullptr);
    // an intermediate transposed into itself
    tg_tensor *mid = tg_scale(e.ctx, n, 1.0f);
    EXPECT_EQ(tg_cpy(e.ctx, tg_transpose(e.ctx, mid), mid), nullptr);
    // through cont it is fine, and right
    tg_tensor *rows01 = tg_view_2d(e.ctx, m, 4, 2, 16, 0), *rows23 = tg_view_2d(e.ctx, m, 4, 2, 16, 32);
    tg_tensor *ok1 = tg_cpy(e.ctx, tg_cont(e.ctx, tg_transpose(e.ctx, n)), n);
    tg_tensor *ok2 = tg_cpy(e.ctx, rows01, rows23);  // disjoint views of one tensor
    ASSERT_NE(ok1, nullptr) << tg_last_error();
    ASSERT_NE(ok2, nullptr) << tg_last_error();
    ASSERT_NE(e.alloc(), nullptr);
    std::mt19937 rng(1);
    const std::vector<float> mv = tgt::random_floats(rng, 16), nv = tgt::random_floats(rng, 16);
    set_f32(m, mv), set_f32(n, nv);
    tg_graph *g = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g, ok1), TG_OK);
    ASSERT_EQ(tg_graph_expand(g, ok2), TG_OK);
    ASSERT_EQ(tg_graph_compute(e.cpu, g), TG_OK) << tg_last_error();
    const std::vector<float> m1 = get_f32(m), n1 = get_f32(n);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) EXPECT_EQ(n1[i * 4 + j], nv[j * 4 + i]);
    for (int k = 0; k < 8; k++) EXPECT_EQ(m1[8 + k], mv[k]);
    for (int k = 0; k < 8; k++) EXPECT_EQ(m1[k], mv[k]);
    // the same view as source and destination is a no-op, allowed
    EXPECT_NE(tg_cpy(e.ctx, m, m), nullptr) << tg_last_error();
}

}  // namespace
