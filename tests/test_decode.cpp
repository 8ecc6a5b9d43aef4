// test_decode.cpp - the decode path of the engine: sessions keep and reuse
// their graphs (logits identical to building each graph anew), the compute
// buffer is reserved once and never grows, a failed compute keeps earlier
// outputs (CPU) and every cache as it was, CUDA-graph replay equals plain
// launches step after step with changing positions and fails cleanly on a bad
// one, and two backends compute from two threads at once.
// CUDA cases skip themselves without a GPU; their names contain "Cuda".
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>

#include "model_util.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

// A CUDA backend with CUDA graphs on or off (TG_CUDA_GRAPHS is read when the
// backend is created), or a CPU backend of 2 threads.
tg_backend *make_backend(bool cuda, bool graphs = true) {
    if (!cuda) return tg_backend_cpu(2);
    if (!graphs) setenv("TG_CUDA_GRAPHS", "0", 1);
    tg_backend *b = tg_backend_cuda(0);
    if (!graphs) unsetenv("TG_CUDA_GRAPHS");
    return b;
}

// CUDA-graph replays a backend has launched (0 on the CPU).
long long replays(tg_backend *be, bool cuda) {
    long long n = 0;
#ifdef TG_HAVE_CUDA
    if (cuda) tg_cuda_graph_counts(be, nullptr, &n);
#endif
    return n;
}

bool has_nan(const std::vector<float> &v) {
    for (float x : v)
        if (std::isnan(x)) return true;
    return false;
}

// ---------------------------------------------------------------------------
// Sessions: kept graphs against graphs built anew on every step

// (hybrid?, cuda?)
class DecodeModel : public ::testing::TestWithParam<std::tuple<bool, bool>> {
   protected:
    void SetUp() override {
        cfg.hybrid = std::get<0>(GetParam());
        cuda = std::get<1>(GetParam());
        if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
        path = tgt::write_temp_model(tgt::toy_model_writer(cfg, 21),
                                     std::string("decode_") + (cfg.hybrid ? "hybrid" : "llama") + (cuda ? "_cuda" : ""));
        ASSERT_FALSE(path.empty()) << tg_last_error();
        be = make_backend(cuda);
        ASSERT_NE(be, nullptr) << tg_last_error();
        m = tgm::model_load(path.c_str(), be);
        ASSERT_NE(m, nullptr) << tg_last_error();
    }
    void TearDown() override {
        tgm::model_free(m);
        tg_backend_free(be);
        if (!path.empty()) std::remove(path.c_str());
    }
    tgt::toy_config cfg;
    bool cuda = false;
    std::string path;
    tg_backend *be = nullptr;
    tgm::model *m = nullptr;
};

std::string model_name(const ::testing::TestParamInfo<std::tuple<bool, bool>> &i) {
    return std::string(std::get<0>(i.param) ? "Hybrid" : "Llama") + (std::get<1>(i.param) ? "Cuda" : "Cpu");
}

// A session that keeps its graphs (reserved once) and one that builds every
// graph anew, fed the same tokens: bit-identical logits at every step (on
// CUDA the kept decode graph runs plain, then is captured, then replayed with
// new positions and tokens), a compute buffer that never changes size after
// the reserve, and one kept graph per batch shape.
TEST_P(DecodeModel, KeptGraphsGiveIdenticalLogits) {
    const int B = 2, P = 8, n_ctx = 32;
    tgm::session *kept = tgm::session_new(m, B, n_ctx);
    tgm::session *fresh = tgm::session_new(m, B, n_ctx);
    ASSERT_TRUE(kept && fresh) << tg_last_error();
    fresh->reuse_graphs = false;
    ASSERT_EQ(tgm::session_reserve(kept, P), TG_OK) << tg_last_error();
    const size_t buf = tg_backend_compute_buffer_size(be);
    ASSERT_GT(buf, 0u);
    EXPECT_EQ(tgm::session_reserve(kept, P), TG_OK);
    EXPECT_EQ(tgm::session_reserve(kept, 2), TG_OK);  // smaller: nothing changes
    EXPECT_EQ(tg_backend_compute_buffer_size(be), buf);
    EXPECT_NE(tgm::session_reserve(kept, n_ctx + 1), TG_OK);

    std::mt19937 rng(33);
    std::uniform_int_distribution<int> tok(0, 255);
    auto tokens = [&](int n) {
        std::vector<int32_t> t((size_t)n);
        for (auto &x : t) x = tok(rng);
        return t;
    };
    int step_no = 0;
    auto step = [&](int seq0, int n, int T, bool all) {
        SCOPED_TRACE("step " + std::to_string(step_no++) + ": seq0 " + std::to_string(seq0) + " n " +
                     std::to_string(n) + " T " + std::to_string(T));
        const std::vector<int32_t> t = tokens(n * T);
        std::vector<float> a(3, NAN), b(5, NAN);  // poisoned, wrong sizes: both are rewritten
        ASSERT_EQ(tgm::session_eval(kept, seq0, n, t.data(), T, all, &a), TG_OK) << tg_last_error();
        ASSERT_EQ(tgm::session_eval(fresh, seq0, n, t.data(), T, all, &b), TG_OK) << tg_last_error();
        ASSERT_EQ(a.size(), (size_t)n * (all ? T : 1) * m->hp.n_vocab);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_FALSE(has_nan(a));
        EXPECT_EQ(memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "logits differ";
        EXPECT_EQ(tg_backend_compute_buffer_size(be), buf) << "the compute buffer changed mid-session";
    };
    step(0, B, P, false);                         // prompt
    for (int i = 0; i < 6; i++) step(0, B, 1, false);  // decode: plain, capture, replays
    for (int i = 0; i < 3; i++) step(1, 1, 1, false);  // one sequence alone
    for (int i = 0; i < 2; i++) step(0, B, 1, false);  // the batch again (n_past now differs per sequence)
    step(0, B, 3, true);                          // a chunk with every token's logits
    ASSERT_EQ(tgm::session_reset(kept, 0), TG_OK);
    ASSERT_EQ(tgm::session_reset(fresh, 0), TG_OK);
    for (int i = 0; i < 3; i++) step(0, 1, 1, false);  // a reset sequence starts over
    // reserves (8, all) and (2, all), prompt (8), decode (2 seqs), seq 1 alone, chunk (3, all), seq 0 alone
    EXPECT_EQ(kept->graphs.size(), 7u);
    EXPECT_EQ(fresh->graphs.size(), 0u);
    EXPECT_EQ(kept->n_past, fresh->n_past);
    if (cuda) EXPECT_GE(replays(be, cuda), 5) << "the kept decode graphs were not replayed";
    tgm::session_free(kept);
    tgm::session_free(fresh);
}

// More batch shapes than the session keeps: the least recently used graph is
// dropped and rebuilt when needed, with the same logits.
TEST_P(DecodeModel, EvictedGraphsAreRebuilt) {
    const int n_ctx = 48;
    tgm::session *s = tgm::session_new(m, 1, n_ctx);
    tgm::session *ref = tgm::session_new(m, 1, n_ctx);
    ASSERT_TRUE(s && ref) << tg_last_error();
    ref->reuse_graphs = false;
    std::mt19937 rng(4);
    std::uniform_int_distribution<int> tok(0, 255);
    std::vector<float> a, b;
    for (int T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2}) {
        std::vector<int32_t> t((size_t)T);
        for (auto &x : t) x = tok(rng);
        ASSERT_EQ(tgm::session_eval(s, 0, 1, t.data(), T, false, &a), TG_OK) << tg_last_error();
        ASSERT_EQ(tgm::session_eval(ref, 0, 1, t.data(), T, false, &b), TG_OK) << tg_last_error();
        ASSERT_FALSE(has_nan(a));
        EXPECT_EQ(memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "T " << T;
        EXPECT_LE(s->graphs.size(), (size_t)tgm::session_max_graphs);
    }
    tgm::session_free(s);
    tgm::session_free(ref);
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeModel,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()), model_name);

// ---------------------------------------------------------------------------
// One graph computed step after step with new positions: a rope_kv_update
// into persistent caches, attention over them, a product.

constexpr int64_t D = 8, H = 2, HQ = 4, L = 16, NB = 2, E = 24;

struct kv_rig {
    tg_backend *be = nullptr;
    tg_context *ctx = nullptr;
    tg_buffer *buf = nullptr;
    tg_tensor *kc, *vc, *kn, *vn, *q, *pos, *w, *out;
    tg_graph *g = nullptr;
    int64_t T;

    kv_rig(tg_backend *b, int64_t T_) : be(b), T(T_) {
        tg_init_params ip = {64 * tg_tensor_overhead() + 2 * tg_graph_overhead() + 4096, nullptr, true};
        ctx = tg_init(ip);
        kc = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, NB);
        vc = tg_new_tensor_4d(ctx, TG_TYPE_F16, D, H, L, NB);
        kn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, NB);
        vn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, NB);
        q = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, HQ, T, NB);
        pos = tg_new_tensor_2d(ctx, TG_TYPE_I32, T, NB);
        w = tg_new_tensor_2d(ctx, TG_TYPE_F32, D * HQ, E);
        tg_rope_params rp = tg_rope_default_params(D);
        tg_tensor *kw = tg_rope_kv_update(ctx, kc, vc, kn, vn, pos, nullptr, nullptr, &rp);
        tg_tensor *qr = tg_rope(ctx, q, pos, &rp);
        tg_tensor *att = tg_attention(ctx, qr, kw, vc, pos, 0.35f);
        out = tg_silu(ctx, tg_mul_mat(ctx, w, tg_reshape_3d(ctx, att, D * HQ, T, NB)));
        g = tg_graph_new(ctx);
        EXPECT_EQ(tg_graph_expand(g, out), TG_OK) << tg_last_error();
        buf = tg_backend_alloc(be, ctx);
        EXPECT_NE(buf, nullptr) << tg_last_error();
    }
    ~kv_rig() {
        tg_buffer_free(buf);
        tg_free(ctx);
    }
    // the same random caches and weights on every rig (seeded)
    void init(uint32_t seed) {
        std::mt19937 rng(seed);
        set_f32(kc, tgt::random_floats(rng, (size_t)tg_nelements(kc)));
        std::vector<float> v = tgt::random_floats(rng, (size_t)tg_nelements(vc));
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); i++) h[i] = tg_fp32_to_fp16(v[i]);
        ASSERT_EQ(tg_tensor_set(vc, h.data(), 0, h.size() * 2), TG_OK);
        set_f32(w, tgt::random_floats(rng, (size_t)tg_nelements(w)));
    }
    void set_f32(tg_tensor *t, const std::vector<float> &v) {
        ASSERT_EQ(tg_tensor_set(t, v.data(), 0, v.size() * 4), TG_OK) << tg_last_error();
    }
    // new rows and queries (from seed), positions p; then compute
    tg_status step(uint32_t seed, const std::vector<int32_t> &p) {
        std::mt19937 rng(seed);
        set_f32(kn, tgt::random_floats(rng, (size_t)tg_nelements(kn)));
        set_f32(vn, tgt::random_floats(rng, (size_t)tg_nelements(vn)));
        set_f32(q, tgt::random_floats(rng, (size_t)tg_nelements(q)));
        EXPECT_EQ(tg_tensor_set(pos, p.data(), 0, p.size() * 4), TG_OK);
        return tg_graph_compute(be, g);
    }
    std::vector<char> bytes(const tg_tensor *t) {
        std::vector<char> b(tg_nbytes(t), 0x5a);
        EXPECT_EQ(tg_tensor_get(t, b.data(), 0, b.size()), TG_OK) << tg_last_error();
        return b;
    }
};

// positions of step s: sequence b writes rows s*T + t, sequence 1 in reverse order
std::vector<int32_t> step_positions(int s, int64_t T) {
    std::vector<int32_t> p;
    for (int64_t b = 0; b < NB; b++)
        for (int64_t t = 0; t < T; t++) p.push_back((int32_t)(b == 0 ? s * T + t : L - 1 - (s * T + t)));
    return p;
}

class DecodeReplay : public ::testing::TestWithParam<std::tuple<bool, int>> {};

std::string replay_name(const ::testing::TestParamInfo<std::tuple<bool, int>> &i) {
    return std::string(std::get<0>(i.param) ? "Cuda" : "Cpu") + "T" + std::to_string(std::get<1>(i.param));
}

// The same graph computed step after step (on CUDA: plain, captured, then
// replayed) equals a backend that never uses CUDA graphs (the CPU: the CPU
// again), bit for bit: outputs and both caches. A bad position in a later
// step fails with "[rope_kv_update] ..." and writes no cache row; the step
// after it (valid again) runs as if the bad one never happened.
TEST_P(DecodeReplay, ReplayEqualsPlainAndBadPositionWritesNothing) {
    const bool cuda = std::get<0>(GetParam());
    const int64_t T = std::get<1>(GetParam());
    if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tg_backend *b1 = make_backend(cuda, true), *b0 = make_backend(cuda, false);
    ASSERT_TRUE(b1 && b0) << tg_last_error();
    {
        kv_rig r1(b1, T), r0(b0, T);
        r1.init(7);
        r0.init(7);
        const int n_steps = (int)(L / T / 2);
        auto same = [&](const char *what) {
            EXPECT_EQ(r1.bytes(r1.out), r0.bytes(r0.out)) << what << ": outputs differ";
            EXPECT_EQ(r1.bytes(r1.kc), r0.bytes(r0.kc)) << what << ": K caches differ";
            EXPECT_EQ(r1.bytes(r1.vc), r0.bytes(r0.vc)) << what << ": V caches differ";
        };
        int s = 0;
        for (; s < n_steps - 1; s++) {
            ASSERT_EQ(r1.step(100 + s, step_positions(s, T)), TG_OK) << tg_last_error();
            ASSERT_EQ(r0.step(100 + s, step_positions(s, T)), TG_OK) << tg_last_error();
            same(("step " + std::to_string(s)).c_str());
        }
        std::vector<float> o(tg_nelements(r1.out));
        ASSERT_EQ(tg_tensor_get(r1.out, o.data(), 0, o.size() * 4), TG_OK);
        ASSERT_FALSE(has_nan(o));
        const std::vector<char> k_before = r1.bytes(r1.kc), v_before = r1.bytes(r1.vc);
        const std::vector<char> out_before = r1.bytes(r1.out);
        const size_t cbuf = tg_backend_compute_buffer_size(b1);
        // bad steps: out of range in sequence 1, then -1, then (T > 1) a repeat
        std::vector<std::vector<int32_t>> bad;
        bad.push_back(step_positions(s, T));
        bad.back()[T] = (int32_t)L;
        bad.push_back(step_positions(s, T));
        bad.back()[0] = -1;
        if (T > 1) {
            bad.push_back(step_positions(s, T));
            bad.back()[T + 1] = bad.back()[T];
        }
        for (size_t i = 0; i < bad.size(); i++) {
            EXPECT_EQ(r1.step(900 + (uint32_t)i, bad[i]), TG_ERR_ARG) << "bad step " << i;
            EXPECT_NE(strstr(tg_last_error(), "[rope_kv_update]"), nullptr) << tg_last_error();
            EXPECT_EQ(r1.bytes(r1.kc), k_before) << "bad step " << i << " wrote the K cache";
            EXPECT_EQ(r1.bytes(r1.vc), v_before) << "bad step " << i << " wrote the V cache";
            EXPECT_EQ(tg_backend_compute_buffer_size(b1), cbuf);
            // the last good step's output is still readable; on the CPU it is untouched
            // (on CUDA the failed step's non-writing kernels may have run over it)
            std::vector<char> ob = r1.bytes(r1.out);
            if (!cuda) EXPECT_EQ(ob, out_before) << "bad step " << i << " changed the earlier output";
        }
        for (; s < n_steps; s++) {
            ASSERT_EQ(r1.step(100 + s, step_positions(s, T)), TG_OK) << tg_last_error();
            ASSERT_EQ(r0.step(100 + s, step_positions(s, T)), TG_OK) << tg_last_error();
            same(("step after the bad ones " + std::to_string(s)).c_str());
        }
        if (cuda) {
            EXPECT_GE(replays(b1, cuda), n_steps - 2 + (long long)bad.size()) << "steps were not replayed";
            EXPECT_EQ(replays(b0, cuda), 0) << "TG_CUDA_GRAPHS=0 did not turn graphs off";
        }
    }
    tg_backend_free(b1);
    tg_backend_free(b0);
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeReplay,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2)), replay_name);

// A writer of persistent memory (a cpy into a sink) runs before two cache
// updates that share one positions tensor: a bad position stops all three,
// step after step (on CUDA the positions are then checked once up front and
// both updates only read the record; the step is a replay).
TEST_P(DecodeReplay, WriterBeforeUpdatesWritesNothingOnBadPosition) {
    const bool cuda = std::get<0>(GetParam());
    const int64_t T = std::get<1>(GetParam());
    if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tg_backend *be = make_backend(cuda, true);
    ASSERT_NE(be, nullptr) << tg_last_error();
    {
        tg_init_params ip = {64 * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true};
        tg_context *ctx = tg_init(ip);
        tg_tensor *src = tg_new_tensor_1d(ctx, TG_TYPE_F32, 40), *sink = tg_new_tensor_1d(ctx, TG_TYPE_F32, 40);
        tg_tensor *kc[2], *vc[2];
        for (int l = 0; l < 2; l++)
            kc[l] = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, NB), vc[l] = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, L, NB);
        tg_tensor *kn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, NB), *vn = tg_new_tensor_4d(ctx, TG_TYPE_F32, D, H, T, NB);
        tg_tensor *pos = tg_new_tensor_2d(ctx, TG_TYPE_I32, T, NB);
        const tg_rope_params rp = tg_rope_default_params(D);
        tg_graph *g = tg_graph_new(ctx);
        ASSERT_EQ(tg_graph_expand(g, tg_cpy(ctx, tg_scale(ctx, src, 3.0f), sink)), TG_OK) << tg_last_error();
        for (int l = 0; l < 2; l++)
            ASSERT_EQ(tg_graph_expand(g, tg_rope_kv_update(ctx, kc[l], vc[l], kn, vn, pos, nullptr, nullptr, &rp)), TG_OK)
                << tg_last_error();
        tg_buffer *buf = tg_backend_alloc(be, ctx);
        ASSERT_NE(buf, nullptr) << tg_last_error();
        std::mt19937 rng(12);
        auto set = [&](tg_tensor *t, const std::vector<float> &v) {
            ASSERT_EQ(tg_tensor_set(t, v.data(), 0, v.size() * 4), TG_OK) << tg_last_error();
        };
        for (int l = 0; l < 2; l++) {
            set(kc[l], tgt::random_floats(rng, (size_t)tg_nelements(kc[l])));
            set(vc[l], tgt::random_floats(rng, (size_t)tg_nelements(vc[l])));
        }
        auto bytes = [&](const tg_tensor *t) {
            std::vector<char> b(tg_nbytes(t));
            EXPECT_EQ(tg_tensor_get(t, b.data(), 0, b.size()), TG_OK) << tg_last_error();
            return b;
        };
        auto step = [&](std::vector<int32_t> p) {
            set(src, tgt::random_floats(rng, 40));
            set(kn, tgt::random_floats(rng, (size_t)tg_nelements(kn)));
            set(vn, tgt::random_floats(rng, (size_t)tg_nelements(vn)));
            EXPECT_EQ(tg_tensor_set(pos, p.data(), 0, p.size() * 4), TG_OK);
            return tg_graph_compute(be, g);
        };
        const int good = 3;
        for (int s = 0; s < good; s++) ASSERT_EQ(step(step_positions(s, T)), TG_OK) << tg_last_error();
        std::vector<std::vector<char>> before;
        for (const tg_tensor *t : {sink, kc[0], vc[0], kc[1], vc[1]}) before.push_back(bytes(t));
        for (int i = 0; i < 3; i++) {
            std::vector<int32_t> p = step_positions(good, T);
            p[(size_t)(i % 2) * T] = i == 2 ? -1 : (int32_t)(L + i);
            EXPECT_EQ(step(p), TG_ERR_ARG) << "bad step " << i;
            EXPECT_NE(strstr(tg_last_error(), "[rope_kv_update]"), nullptr) << tg_last_error();
            int k = 0;
            for (const tg_tensor *t : {sink, kc[0], vc[0], kc[1], vc[1]})
                EXPECT_EQ(bytes(t), before[k++]) << "bad step " << i << " wrote persistent tensor " << k - 1;
        }
        ASSERT_EQ(step(step_positions(good, T)), TG_OK) << tg_last_error();
        EXPECT_NE(bytes(kc[1]), before[3]) << "the good step after the bad ones wrote nothing";
        tg_buffer_free(buf);
        tg_free(ctx);
    }
    tg_backend_free(be);
}

// ---------------------------------------------------------------------------
// tg_backend_reserve

TEST(DecodeReserve, ReserveGrowsOnceAndRejectsNull) {
    tg_backend *be = tg_backend_cpu(1);
    ASSERT_NE(be, nullptr);
    {
        kv_rig small(be, 1), big(be, 4);
        EXPECT_EQ(tg_backend_reserve(nullptr, big.g), TG_ERR_ARG);
        EXPECT_EQ(tg_backend_reserve(be, nullptr), TG_ERR_ARG);
        EXPECT_EQ(tg_backend_compute_buffer_size(be), 0u);
        tg_graph_stats st_big, st_small;
        ASSERT_EQ(tg_graph_plan(big.g, &st_big), TG_OK);
        ASSERT_EQ(tg_graph_plan(small.g, &st_small), TG_OK);
        ASSERT_LT(st_small.planned_bytes, st_big.planned_bytes);
        ASSERT_EQ(tg_backend_reserve(be, big.g), TG_OK) << tg_last_error();
        const size_t size = tg_backend_compute_buffer_size(be);
        EXPECT_EQ(size, st_big.planned_bytes);
        // computing the smaller graph, then the reserved one, never changes the buffer
        small.init(1);
        ASSERT_EQ(small.step(2, step_positions(0, 1)), TG_OK) << tg_last_error();
        const std::vector<char> out_small = small.bytes(small.out);
        EXPECT_EQ(tg_backend_reserve(be, small.g), TG_OK);
        EXPECT_EQ(tg_backend_compute_buffer_size(be), size);
        // a reserve that fits keeps the outputs of the last compute
        EXPECT_EQ(small.bytes(small.out), out_small);
        big.init(3);
        ASSERT_EQ(big.step(4, step_positions(0, 4)), TG_OK) << tg_last_error();
        EXPECT_EQ(tg_backend_compute_buffer_size(be), size);
        // the big graph failing (bad position) keeps its earlier output and the buffer
        const std::vector<char> out_big = big.bytes(big.out);
        std::vector<int32_t> p = step_positions(1, 4);
        p[2] = (int32_t)L + 3;
        EXPECT_EQ(big.step(5, p), TG_ERR_ARG);
        EXPECT_EQ(tg_backend_compute_buffer_size(be), size);
        EXPECT_EQ(big.bytes(big.out), out_big);
    }
    tg_backend_free(be);
}

// Small tensor_set calls on CUDA are asynchronous (pinned staging): a compute
// right after them, on the same backend or on another one of the same device
// reading the tensor, sees the new values, every time.
TEST(DecodeStaging, CudaSmallSetsAreSeenByTheNextCompute) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tg_backend *a = make_backend(true), *b = make_backend(true);
    ASSERT_TRUE(a && b) << tg_last_error();
    {
        tgt::env e;
        const int64_t n = 3000;  // 12 KB: staged
        tg_tensor *x = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, n);
        tg_tensor *y = tg_scale(e.ctx, x, 2.0f);
        tg_graph *g = tg_graph_new(e.ctx);
        ASSERT_EQ(tg_graph_expand(g, y), TG_OK);
        ASSERT_NE(e.alloc(a), nullptr) << tg_last_error();  // x lives on backend a
        std::mt19937 rng(3);
        for (int it = 0; it < 40; it++) {
            tg_backend *runner = it % 2 ? b : a;
            const std::vector<float> v = tgt::random_floats(rng, (size_t)n);
            ASSERT_EQ(tg_tensor_set(x, v.data(), 0, v.size() * 4), TG_OK) << tg_last_error();
            ASSERT_EQ(tg_graph_compute(runner, g), TG_OK) << tg_last_error();
            std::vector<float> out((size_t)n, NAN);
            ASSERT_EQ(tg_tensor_get(y, out.data(), 0, out.size() * 4), TG_OK) << tg_last_error();
            for (int64_t i = 0; i < n; i++)
                ASSERT_EQ(out[i], 2.0f * v[i]) << "step " << it << " on backend " << (it % 2) << ", element " << i;
        }
    }
    tg_backend_free(b);
    tg_backend_free(a);
}

// ---------------------------------------------------------------------------
// Two backends on two threads at once

class DecodeThreads : public ::testing::TestWithParam<bool> {};

// Each thread runs its own backend, model and session (a hybrid: rope_kv_update,
// attention and delta_rule); both threads' logits equal the same work done
// alone on one thread first.
TEST_P(DecodeThreads, TwoBackendsOnTwoThreads) {
    const bool cuda = GetParam();
    if (cuda && !tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tgt::toy_config cfg;
    cfg.hybrid = true;
    const std::string path = tgt::write_temp_model(tgt::toy_model_writer(cfg, 8), cuda ? "threads_cuda" : "threads_cpu");
    ASSERT_FALSE(path.empty()) << tg_last_error();
    const int steps = 12;
    // one run: a prompt of 5 from seed, then greedy decoding; all logits kept
    auto run = [&](uint32_t seed, std::vector<float> *all, std::string *err) {
        tg_backend *be = make_backend(cuda);
        tgm::model *m = be ? tgm::model_load(path.c_str(), be) : nullptr;
        tgm::session *s = m ? tgm::session_new(m, 1, 32) : nullptr;
        if (!s) {
            *err = tg_last_error();
        } else {
            std::mt19937 rng(seed);
            std::vector<int32_t> t(5);
            for (auto &x : t) x = (int32_t)(rng() % 256);
            std::vector<float> lg;
            tg_status st = tgm::session_eval(s, 0, 1, t.data(), 5, false, &lg);
            for (int i = 0; st == TG_OK && i < steps; i++) {
                all->insert(all->end(), lg.begin(), lg.end());
                tgm::sampler greedy;
                greedy.temp = 0.0f;
                int32_t next = greedy.sample(lg.data(), m->hp.n_vocab);
                st = tgm::session_eval(s, 0, 1, &next, 1, false, &lg);
            }
            if (st != TG_OK) *err = tg_last_error();
        }
        tgm::session_free(s);
        tgm::model_free(m);
        tg_backend_free(be);
    };
    std::vector<float> ref[2], got[2];
    std::string err[2];
    for (int i = 0; i < 2; i++) {
        run(50 + i, &ref[i], &err[i]);
        ASSERT_EQ(err[i], "");
    }
    std::thread th[2];
    for (int i = 0; i < 2; i++) th[i] = std::thread(run, 50 + i, &got[i], &err[i]);
    for (auto &t : th) t.join();
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(err[i], "") << "thread " << i;
        ASSERT_EQ(got[i].size(), ref[i].size()) << "thread " << i;
        ASSERT_FALSE(has_nan(got[i]));
        EXPECT_EQ(memcmp(got[i].data(), ref[i].data(), got[i].size() * sizeof(float)), 0) << "thread " << i;
    }
    EXPECT_NE(memcmp(ref[0].data(), ref[1].data(), ref[0].size() * sizeof(float)), 0);  // the runs differ
    std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeThreads, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &i) { return std::string(i.param ? "Cuda" : "Cpu"); });

}  // namespace
