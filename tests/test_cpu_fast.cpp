// test_cpu_fast.cpp - every CPU fast path (src/cpu_fast/) against the
// reference kernels of ggml_ops/ on the same graph: contiguous, strided,
// odd-sized and tail cases (sizes that are not multiples of the vector
// width), F32/F16/BF16, 1 to 4 threads, every vector table this CPU runs
// (generic, avx2, avx512). Each case:
//   - builds its graph on a CPU backend of n threads, random inputs;
//   - runs it with the fast paths off (reference) and on, the planner's
//     buffer poisoned with NaN before each run (an output element the fast
//     path leaves unwritten stays NaN and fails), persistent tensors the op
//     writes (caches, states, cpy targets) restored in between and read after;
//   - checks the fast path was taken (its plan accepts the layout) or, for
//     the layouts that must fall back, that it was not;
//   - compares fast to reference within the op's tolerance (docs/ops.md:
//     exact for copies, element-wise and rope, 1e-5 relative L2 for
//     reductions, products, attention and the recurrence), NaN never passing;
//   - requires the fast results to be bit-identical for 1, 2, 3 and 4 threads.
#include <functional>

#include "cpu_fast/cpu_fast.h"
#include "internal.h"
#include "op_util.h"

using namespace opu;

namespace {

struct fx {
    tg_context *ctx = nullptr;
    tg_backend *be = nullptr;
    std::mt19937 rng;
    std::vector<std::pair<tg_tensor *, std::vector<uint8_t>>> init;  // bytes set after alloc
    std::vector<tg_tensor *> outs, written;  // results read; persistent tensors the graph writes
    std::vector<tg_tensor *> fast_nodes, ref_nodes;  // nodes whose plan must accept / refuse
    std::vector<tg_tensor *> extra;  // nodes run but not read (written into persistent tensors)

    fx(int nth, uint32_t seed) : rng(seed) {
        tg_init_params ip = {16 << 20, nullptr, true};
        ctx = tg_init(ip);
        be = tg_backend_cpu(nth);
    }
    tg_buffer *buf = nullptr;
    ~fx() {
        if (buf) tg_buffer_free(buf);
        tg_backend_free(be);
        tg_free(ctx);
    }
    // a persistent tensor of random values in [lo, hi)
    tg_tensor *in(tg_type t, shape ne, double lo = -1, double hi = 1) {
        tg_tensor *x = tg_new_tensor_4d(ctx, t, ne[0], ne[1], ne[2], ne[3]);
        std::vector<uint8_t> b((size_t)(numel(ne) * (int64_t)tg_type_size(t)));
        std::uniform_real_distribution<double> d(lo, hi);
        for (int64_t i = 0; i < numel(ne); i++) store(t, b.data() + i * tg_type_size(t), d(rng));
        init.push_back({x, b});
        return x;
    }
    tg_tensor *ints(shape ne, const std::vector<int32_t> &v) {
        tg_tensor *x = tg_new_tensor_4d(ctx, TG_TYPE_I32, ne[0], ne[1], ne[2], ne[3]);
        std::vector<uint8_t> b(v.size() * 4);
        memcpy(b.data(), v.data(), b.size());
        init.push_back({x, b});
        return x;
    }
    // rows of ne[0] inside a wider random tensor (row stride (ne0 + pad) elements)
    tg_tensor *strided(tg_type t, shape ne, int64_t pad = 3) {
        tg_tensor *root = in(t, {ne[0] + pad, ne[1], ne[2], ne[3]});
        return tg_view_4d(ctx, root, ne[0], ne[1], ne[2], ne[3], root->nb[1], root->nb[2], root->nb[3], 0);
    }
};

std::vector<uint8_t> bytes_of(const tg_tensor *t) {
    std::vector<uint8_t> b(tg_nbytes(t));
    EXPECT_EQ(tg_tensor_get(t, b.data(), 0, b.size()), TG_OK) << tg_last_error();
    return b;
}
std::vector<double> values_of(const tg_tensor *t, const std::vector<uint8_t> &b) {
    std::vector<double> v;
    const size_t ts = tg_type_size(t->type);
    for (size_t i = 0; i + ts <= b.size(); i += ts) v.push_back(load(t->type, b.data() + i));
    return v;
}

// results of one configuration: every out, then every written tensor
struct result {
    std::vector<std::vector<uint8_t>> bytes;
};

result compute(fx &f, tg_graph *g, bool fast) {
    for (auto &p : f.init) EXPECT_EQ(tg_tensor_set(p.first, p.second.data(), 0, p.second.size()), TG_OK);
    tg_backend_cpu_set_fast(f.be, fast);
    if (f.be->compute_buf) memset(f.be->compute_buf, 0xff, f.be->compute_size);  // NaN in every type
    EXPECT_EQ(tg_graph_compute(f.be, g), TG_OK) << tg_last_error();
    result r;
    for (tg_tensor *t : f.outs) r.bytes.push_back(bytes_of(t));
    for (tg_tensor *t : f.written) r.bytes.push_back(bytes_of(t));
    return r;
}

// A NaN in one element of each float input in turn (the middle one; a
// quantized weight is left alone): the fast path's outputs are NaN exactly
// where the reference's are, and the rest agree as in the plain comparison.
// (The vector exp of the fast attention once clamped a NaN score to e^-87.)
void nan_pass(fx &f, tg_graph *g, const std::vector<tg_tensor *> &all, double tol) {
    for (auto &in : f.init) {
        const tg_type t = in.first->type;
        if (t != TG_TYPE_F32 && t != TG_TYPE_F16 && t != TG_TYPE_BF16) continue;
        SCOPED_TRACE(std::string("NaN in an input of ") + tg_type_name(t) + " " + shape_str(shape_of(in.first)));
        const std::vector<uint8_t> saved = in.second;
        const size_t ts = tg_type_size(t), at = saved.size() / ts / 2;
        const uint32_t nan32 = 0x7fc00000u;
        const uint16_t nan16 = t == TG_TYPE_F16 ? 0x7e00 : 0x7fc0;
        memcpy(in.second.data() + at * ts, t == TG_TYPE_F32 ? (const void *)&nan32 : (const void *)&nan16, ts);
        const result ref = compute(f, g, false), fast = compute(f, g, true);
        in.second = saved;
        for (size_t i = 0; i < all.size(); i++) {
            std::vector<double> o = values_of(all[i], fast.bytes[i]), r = values_of(all[i], ref.bytes[i]);
            ASSERT_EQ(o.size(), r.size());
            for (size_t e = 0; e < o.size(); e++) {
                ASSERT_EQ(std::isnan(o[e]), std::isnan(r[e]))
                    << "output " << i << " element " << e << ": fast " << o[e] << ", reference " << r[e];
                if (std::isnan(o[e])) o[e] = r[e] = 0.0;
            }
            if (tol < 0)
                EXPECT_TRUE(same(o, r)) << "output " << i;
            else
                EXPECT_TRUE(close(o, r, tol)) << "output " << i;
        }
    }
}

// tol < 0: bit-identical; else relative L2 error per output at most tol
using builder = std::function<void(fx &)>;
void check(const char *what, const builder &build, double tol) {
    SCOPED_TRACE(what);
    result first;
    for (int nth = 1; nth <= 4; nth++) {
        SCOPED_TRACE("threads " + std::to_string(nth));
        fx f(nth, 1234);
        build(f);
        ASSERT_FALSE(f.outs.empty());
        tg_graph *g = tg_graph_new(f.ctx);
        for (tg_tensor *t : f.outs) ASSERT_EQ(tg_graph_expand(g, t), TG_OK) << tg_last_error();
        for (tg_tensor *t : f.extra) ASSERT_EQ(tg_graph_expand(g, t), TG_OK) << tg_last_error();
        f.buf = tg_backend_alloc(f.be, f.ctx);
        ASSERT_NE(f.buf, nullptr) << tg_last_error();
        for (tg_tensor *t : f.fast_nodes) EXPECT_GE(tg_op_get(t->op).cpu_fast->plan(t, nth), 0) << "fast path refused";
        for (tg_tensor *t : f.ref_nodes) EXPECT_LT(tg_op_get(t->op).cpu_fast->plan(t, nth), 0) << "fast path taken";
        const result ref = compute(f, g, false), fast = compute(f, g, true);
        std::vector<tg_tensor *> all = f.outs;
        all.insert(all.end(), f.written.begin(), f.written.end());
        for (size_t i = 0; i < all.size(); i++) {
            const std::vector<double> o = values_of(all[i], fast.bytes[i]), r = values_of(all[i], ref.bytes[i]);
            for (double x : o) ASSERT_FALSE(std::isnan(x)) << "output " << i << " has a NaN";
            if (tol < 0)
                EXPECT_TRUE(same(o, r)) << "output " << i;
            else
                EXPECT_TRUE(close(o, r, tol)) << "output " << i;
        }
        if (nth == 1)
            first = fast;
        else
            EXPECT_TRUE(first.bytes == fast.bytes) << "fast results differ between 1 and " << nth << " threads";
        if (nth == 1 || nth == 3) nan_pass(f, g, all, tol);
    }
}

const tg_type k_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

// The vector tables this CPU can run, each forced in turn.
std::vector<const tg_simd *> tables() {
    const tg_simd *t[4];
    const int n = tg_simd_runnable(t, nullptr);
    return std::vector<const tg_simd *>(t, t + n);
}
struct forced {
    explicit forced(const tg_simd *t) { tg_simd_force(t); }
    ~forced() { tg_simd_force(nullptr); }
};

class CpuFast : public ::testing::TestWithParam<int> {
  protected:
    const tg_simd *table() const { return tables()[(size_t)GetParam()]; }
};

TEST_P(CpuFast, MulMat) {
    forced use(table());
    struct mm {
        int64_t K, M, N, B2;
    };
    const mm shapes[] = {{1, 5, 3, 1}, {7, 9, 1, 1}, {16, 4, 4, 1}, {33, 37, 6, 2}, {100, 13, 37, 1}, {257, 70, 5, 1},
                         {40, 45, 1, 1}, {96, 103, 1, 1},  // N = 1, row blocks of 32 with 13- and 7-row tails
                         {117, 11, 3, 1},  // K: whole 4-vector steps, then 3 (AVX-512) or 2 (AVX2) vectors, a tail of 5
                         {2048, 67, 4, 1},  // an LLM-sized K with 4 tokens
                         // prompts: row blocks of 30 or 32 ending in passes of 5, 2 and 3 rows
                         // (AVX2's panels take 6 rows a pass), an LLM-sized K with 40 tokens
                         {64, 65, 9, 1}, {50, 92, 17, 1}, {20, 33, 7, 1}, {768, 61, 40, 1}};
    for (tg_type at : k_types)
        for (const mm &s : shapes) {
            const std::string name = std::string("mul_mat ") + tg_type_name(at) + " K" + std::to_string(s.K) + " M" +
                                     std::to_string(s.M) + " N" + std::to_string(s.N);
            check((name + " contiguous").c_str(), [&](fx &f) {
                tg_tensor *y = tg_mul_mat(f.ctx, f.in(at, {s.K, s.M, 1, 1}), f.in(TG_TYPE_F32, {s.K, s.N, s.B2, 1}));
                f.outs = {y}, f.fast_nodes = {y};
            }, 1e-5);
            check((name + " strided rows, 16-bit b").c_str(), [&](fx &f) {
                tg_tensor *y = tg_mul_mat(f.ctx, f.strided(at, {s.K, s.M, 1, 1}), f.strided(at, {s.K, s.N, s.B2, 1}));
                f.outs = {y}, f.fast_nodes = {y};
            }, 1e-5);
            check((name + " transposed b").c_str(), [&](fx &f) {
                tg_tensor *b = tg_transpose(f.ctx, f.in(TG_TYPE_F32, {s.N, s.K, s.B2, 1}));
                tg_tensor *y = tg_mul_mat(f.ctx, f.in(at, {s.K, s.M, 1, 1}), b);
                f.outs = {y}, f.fast_nodes = {y};
            }, 1e-5);
        }
    // weights with non-contiguous rows: the reference
    check("mul_mat transposed a", [](fx &f) {
        tg_tensor *y = tg_mul_mat(f.ctx, tg_transpose(f.ctx, f.in(TG_TYPE_F32, {6, 9, 1, 1})), f.in(TG_TYPE_F32, {9, 2, 1, 1}));
        f.outs = {y}, f.ref_nodes = {y};
    }, 1e-5);
}

// Matrix-vector products of one activation back to back run as one job
// (backend_cpu.cpp, 2+ threads): the same values as each alone (check():
// 1 thread runs them one by one, 2-4 grouped, bit-identical), also when a
// member's weights are computed in the graph (then it is not grouped) and
// when the weights are of different types.
TEST_P(CpuFast, MulMatSiblings) {
    forced use(table());
    for (int64_t N : {1, 3, 4})
        for (int64_t K : {48, 777}) {
            check(("siblings N" + std::to_string(N) + " K" + std::to_string(K)).c_str(), [&](fx &f) {
                tg_tensor *b = tg_scale(f.ctx, f.in(TG_TYPE_F32, {K, N, 1, 1}), 0.5f);
                tg_tensor *q = tg_mul_mat(f.ctx, f.in(TG_TYPE_F16, {K, 70, 1, 1}), b);
                tg_tensor *k = tg_mul_mat(f.ctx, f.in(TG_TYPE_BF16, {K, 33, 1, 1}), b);
                tg_tensor *v = tg_mul_mat(f.ctx, f.in(TG_TYPE_F32, {K, 33, 1, 1}), b);
                tg_tensor *w = tg_mul_mat(f.ctx, tg_scale(f.ctx, f.in(TG_TYPE_F32, {K, 40, 1, 1}), 2.0f), b);
                tg_tensor *u = tg_mul_mat(f.ctx, f.in(TG_TYPE_F16, {K, 129, 1, 1}), b);
                f.outs = {q, k, v, w, u}, f.fast_nodes = {q, k, v, w, u};
            }, 1e-5);
        }
}

// Decode products (up to 4 tokens) sum each output in the same order whatever
// the token count: a token's result alone equals, bit for bit, its column of
// a 4-token product (what lets a batched decode step match single steps).
TEST_P(CpuFast, MulMatDecodeBatchInvariant) {
    forced use(table());
    for (tg_type at : k_types)
        for (int64_t K : {37, 117, 768}) {
            SCOPED_TRACE(std::string(tg_type_name(at)) + " K" + std::to_string(K));
            fx f(2, 99);
            tg_tensor *a = f.in(at, {K, 45, 1, 1}), *b = f.in(TG_TYPE_F32, {K, 4, 1, 1});
            tg_tensor *y4 = tg_mul_mat(f.ctx, a, b);
            std::vector<tg_tensor *> y1;
            for (int64_t c = 0; c < 4; c++)
                y1.push_back(tg_mul_mat(f.ctx, a, tg_view_2d(f.ctx, b, K, 1, b->nb[1], (size_t)c * b->nb[1])));
            tg_graph *g = tg_graph_new(f.ctx);
            ASSERT_EQ(tg_graph_expand(g, y4), TG_OK) << tg_last_error();
            for (tg_tensor *t : y1) ASSERT_EQ(tg_graph_expand(g, t), TG_OK) << tg_last_error();
            f.buf = tg_backend_alloc(f.be, f.ctx);
            ASSERT_NE(f.buf, nullptr) << tg_last_error();
            f.outs = {y4};
            const result r = compute(f, g, true);
            const std::vector<double> all = values_of(y4, r.bytes[0]);
            for (int64_t c = 0; c < 4; c++) {
                const std::vector<double> one = values_of(y1[(size_t)c], bytes_of(y1[(size_t)c]));
                ASSERT_EQ(one.size(), 45u);
                for (size_t m = 0; m < 45; m++) {
                    ASSERT_FALSE(std::isnan(one[m])) << c << " " << m;
                    EXPECT_EQ(one[m], all[(size_t)c * 45 + m]) << "token " << c << " row " << m;
                }
            }
        }
}

enum class ew { add, mul, swiglu, scale, silu, sigmoid, softplus, add_row, mul_one };
TEST_P(CpuFast, ElementWise) {
    forced use(table());
    const ew ops[] = {ew::add, ew::mul, ew::swiglu, ew::scale, ew::silu, ew::sigmoid, ew::softplus, ew::add_row, ew::mul_one};
    // one row of 2049 / 300: split into segments over the threads (a decode step's row)
    const shape shapes[] = {{1, 3, 1, 1}, {17, 5, 2, 1}, {64, 3, 1, 1}, {8195, 2, 1, 1}, {2049, 1, 1, 1}, {300, 1, 1, 1}};
    for (tg_type t : k_types)
        for (ew op : ops)
            for (const shape &ne : shapes)
                for (int lay = 0; lay < 3; lay++) {
                    const std::string name = std::string("elementwise ") + std::to_string((int)op) + " " +
                                             tg_type_name(t) + " " + shape_str(ne) + " layout " + std::to_string(lay);
                    check(name.c_str(), [&](fx &f) {
                        // layout 0 contiguous, 1 strided rows, 2 permuted (the reference)
                        auto make = [&](shape s) -> tg_tensor * {
                            if (lay == 1) return f.strided(t, s);
                            if (lay == 2) return tg_permute(f.ctx, f.in(t, {s[1], s[0], s[2], s[3]}, -30, 30), 1, 0, 2, 3);
                            return f.in(t, s, -30, 30);
                        };
                        tg_tensor *a = make(ne), *y = nullptr;
                        switch (op) {
                            case ew::add: y = tg_add(f.ctx, a, make(ne)); break;
                            case ew::mul: y = tg_mul(f.ctx, a, make(ne)); break;
                            case ew::swiglu: y = tg_swiglu(f.ctx, a, make(ne)); break;
                            case ew::scale: y = tg_scale(f.ctx, a, -0.37f); break;
                            case ew::silu: y = tg_silu(f.ctx, a); break;
                            case ew::sigmoid: y = tg_sigmoid(f.ctx, a); break;
                            case ew::softplus: y = tg_softplus(f.ctx, a); break;
                            case ew::add_row: y = tg_add(f.ctx, a, f.in(TG_TYPE_F32, {ne[0], 1, 1, 1})); break;
                            case ew::mul_one: y = tg_mul(f.ctx, a, f.in(TG_TYPE_F32, {1, ne[1], 1, 1})); break;
                        }
                        ASSERT_NE(y, nullptr) << tg_last_error();
                        f.outs = {y};
                        if (lay == 2 && ne[0] > 1 && ne[1] > 1) f.ref_nodes = {y};  // a permuted single row is contiguous
                        else f.fast_nodes = {y};
                    }, 1e-6);
                }
}

TEST_P(CpuFast, NormsAndSoftmax) {
    forced use(table());
    const shape shapes[] = {{1, 4, 1, 1}, {23, 5, 2, 1}, {96, 3, 1, 1}, {1000, 2, 1, 1}};
    for (tg_type t : k_types)
        for (const shape &ne : shapes)
            for (int which = 0; which < 3; which++)
                for (int lay = 0; lay < 2; lay++) {
                    const std::string name = std::string("norm ") + std::to_string(which) + " " + tg_type_name(t) + " " +
                                             shape_str(ne) + (lay ? " strided" : "");
                    check(name.c_str(), [&](fx &f) {
                        tg_tensor *a = lay ? f.strided(t, ne) : f.in(t, ne, -3, 3);
                        tg_tensor *y = which == 0 ? tg_rms_norm(f.ctx, a, 1e-5f)
                                       : which == 1 ? tg_l2_norm(f.ctx, a, 1e-6f)
                                                    : tg_softmax(f.ctx, a, 0.7f);
                        f.outs = {y}, f.fast_nodes = {y};
                    }, 1e-5);
                }
}

TEST_P(CpuFast, CopiesAndGetRows) {
    forced use(table());
    for (tg_type st : k_types)
        for (tg_type dt : k_types) {
            const std::string name = std::string("copy ") + tg_type_name(st) + " -> " + tg_type_name(dt);
            check((name + " flat, shapes differ").c_str(), [&](fx &f) {
                tg_tensor *dst = f.in(dt, {35, 6, 1, 1});
                tg_tensor *y = tg_cpy(f.ctx, f.in(st, {7, 30, 1, 1}, -70000, 70000), dst);
                f.outs = {y}, f.written = {dst}, f.fast_nodes = {y};
            }, -1);
            check((name + " same shape, strided rows").c_str(), [&](fx &f) {
                tg_tensor *root = f.in(dt, {20, 5, 3, 1});
                tg_tensor *dst = tg_view_4d(f.ctx, root, 17, 5, 3, 1, root->nb[1], root->nb[2], root->nb[3], 0);
                tg_tensor *y = tg_cpy(f.ctx, f.strided(st, {17, 5, 3, 1}), dst);
                f.written = {root}, f.fast_nodes = {y}, f.extra = {y};
                f.outs = {tg_cont(f.ctx, f.strided(st, {17, 5, 3, 1}))};
            }, -1);
            check((name + " permuted (reference)").c_str(), [&](fx &f) {
                tg_tensor *dst = f.in(dt, {4, 9, 1, 1});
                tg_tensor *y = tg_cpy(f.ctx, tg_transpose(f.ctx, f.in(st, {9, 4, 1, 1})), dst);
                f.outs = {y}, f.written = {dst}, f.ref_nodes = {y};
            }, -1);
        }
    for (tg_type t : k_types)
        check((std::string("get_rows ") + tg_type_name(t)).c_str(), [&](fx &f) {
            tg_tensor *y = tg_get_rows(f.ctx, f.in(t, {37, 11, 1, 1}), f.ints({5, 2, 1, 1}, {3, 0, 10, 3, 7, 1, 1, 9, 2, 5}));
            f.outs = {y}, f.fast_nodes = {y};
        }, -1);
}

TEST_P(CpuFast, RopeAndKvUpdate) {
    forced use(table());
    for (tg_rope_mode mode : {TG_ROPE_INTERLEAVED, TG_ROPE_NEOX})
        for (int n_rot : {6, 10}) {
            const std::string m = std::string(mode == TG_ROPE_NEOX ? "neox" : "interleaved") + " n_rot " + std::to_string(n_rot);
            tg_rope_params rp = tg_rope_default_params(n_rot);
            rp.mode = mode;
            check(("rope " + m).c_str(), [&](fx &f) {
                tg_tensor *y = tg_rope(f.ctx, f.strided(TG_TYPE_F32, {10, 3, 5, 2}), f.ints({5, 2, 1, 1}, {0, 1, 7, 300, 5, 9, 2, 4000, 3, 1}), &rp);
                f.outs = {y}, f.fast_nodes = {y};
            }, -1);
            // the same positions again with another base and with fewer
            // rotated dims, in one graph (each thread keeps its last
            // position's angles: they must be keyed by every parameter)
            check(("rope " + m + ", three configurations").c_str(), [&](fx &f) {
                tg_rope_params rb = rp, rc = rp;
                rb.base = 500.0f;
                rc.n_rot = n_rot - 4;
                tg_tensor *x = f.in(TG_TYPE_F32, {10, 3, 1, 1});
                tg_tensor *pos = f.ints({1, 1, 1, 1}, {77});
                tg_tensor *y1 = tg_rope(f.ctx, x, pos, &rp), *y2 = tg_rope(f.ctx, x, pos, &rb), *y3 = tg_rope(f.ctx, x, pos, &rc);
                f.outs = {y1, y2, y3}, f.fast_nodes = {y1, y2, y3};
            }, -1);
            for (tg_type ct : k_types)
                for (bool tables : {false, true})
                    check(("rope_kv_update " + m + " " + tg_type_name(ct) + (tables ? " tables" : " base")).c_str(), [&](fx &f) {
                        const int64_t D = 10, H = 3, L = 12, T = 4, B = 2;
                        tg_tensor *kc = f.in(ct, {D, H, L, B}), *vc = f.in(ct, {D, H, L, B});
                        tg_tensor *cs = tables ? f.in(TG_TYPE_F32, {n_rot / 2, L, 1, 1}) : nullptr;
                        tg_tensor *sn = tables ? f.in(TG_TYPE_F32, {n_rot / 2, L, 1, 1}) : nullptr;
                        tg_tensor *y = tg_rope_kv_update(f.ctx, kc, vc, f.in(TG_TYPE_F32, {D, H, T, B}, -100, 100),
                                                         f.strided(TG_TYPE_F32, {D, H, T, B}),
                                                         f.ints({T, B, 1, 1}, {3, 0, 11, 5, 1, 2, 3, 4}), cs, sn, &rp);
                        ASSERT_NE(y, nullptr) << tg_last_error();
                        // read the caches through a node after the update (creation order)
                        f.outs = {tg_cont(f.ctx, y)}, f.written = {kc, vc}, f.fast_nodes = {y};
                    }, -1);
        }
}

TEST_P(CpuFast, Attention) {
    forced use(table());
    struct ac {
        int64_t D, Dv, Hq, Hkv, T, L;
    };
    const ac cases[] = {{8, 8, 2, 2, 1, 5}, {20, 17, 4, 2, 3, 9}, {33, 33, 6, 2, 2, 40}, {64, 48, 8, 2, 5, 70},
                        {128, 128, 12, 2, 2, 300},  // an LLM head, group 6 (4 + 2 query rows), key blocks with a tail
                        {64, 80, 3, 1, 1, 37}};     // group 3, Dv in a chunk of 4 vectors and a partial one
    for (tg_type ct : k_types)
        for (const ac &c : cases)
            check((std::string("attention ") + tg_type_name(ct) + " D" + std::to_string(c.D) + " group " +
                   std::to_string(c.Hq / c.Hkv)).c_str(), [&](fx &f) {
                const int64_t B = 2;
                std::vector<int32_t> pos;
                for (int64_t i = 0; i < c.T * B; i++) pos.push_back((int32_t)((i * 7 + 2) % (c.L + 3)) - 1);  // -1 .. L+1
                tg_tensor *y = tg_attention(f.ctx, f.strided(TG_TYPE_F32, {c.D, c.Hq, c.T, B}),
                                            f.in(ct, {c.D, c.Hkv, c.L, B}), f.in(ct, {c.Dv, c.Hkv, c.L, B}),
                                            f.ints({c.T, B, 1, 1}, pos), 1.0f / std::sqrt((float)c.D));
                f.outs = {y}, f.fast_nodes = {y};
            }, 1e-5);
}

TEST_P(CpuFast, DeltaRule) {
    forced use(table());
    struct dc {
        int64_t Dk, Dv, Hk, Hv, T, B;
    };
    // the last two at the decode size (D 128): 48 items claimed in runs of
    // several, the prefetch reaching into the next item; a tail of rows
    // (Dv 100 is not a multiple of the 8- or 4-row blocks)
    const dc cases[] = {{1, 1, 1, 1, 3, 1}, {24, 24, 2, 4, 9, 2},   {33, 17, 1, 2, 5, 1},
                        {64, 40, 2, 2, 4, 1}, {128, 128, 2, 8, 1, 6}, {128, 100, 1, 4, 2, 3}};
    int n = 0;
    for (const dc &c : cases)
        for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
            for (int st = -1; st < 3; st++) {
                const bool l2 = (n++ % 2) == 0;
                const tg_gate_kind gate = mode == TG_DELTA_GATED_DELTA ? TG_GATE_LOG : TG_GATE_LINEAR;
                const std::string name = "delta_rule Dk" + std::to_string(c.Dk) + " Dv" + std::to_string(c.Dv) +
                                         (mode == TG_DELTA_GATED_DELTA ? " delta" : " linear") + " state " +
                                         (st < 0 ? "none" : tg_type_name(k_types[st])) + (l2 ? " l2norm" : "");
                check(name.c_str(), [&](fx &f) {
                    const double lim = l2 ? 1.0 : 1.0 / std::sqrt((double)c.Dk);
                    tg_tensor *S = st < 0 ? nullptr : f.in(k_types[st], {c.Dk, c.Dv, c.Hv, c.B}, -0.5, 0.5);
                    const tg_delta_params dp = {mode, gate, 0.6f, l2};
                    tg_tensor *y = tg_delta_rule(f.ctx, f.in(TG_TYPE_F32, {c.Dk, c.Hk, c.T, c.B}, -lim, lim),
                                                 f.strided(TG_TYPE_F32, {c.Dk, c.Hk, c.T, c.B}),
                                                 f.in(TG_TYPE_F32, {c.Dv, c.Hv, c.T, c.B}),
                                                 gate == TG_GATE_LOG ? f.in(TG_TYPE_F32, {c.Hv, c.T, c.B, 1}, -1, 0)
                                                                     : f.in(TG_TYPE_F32, {c.Hv, c.T, c.B, 1}, 0.8, 1),
                                                 f.in(TG_TYPE_F32, {c.Hv, c.T, c.B, 1}, 0, 1), S, &dp);
                    ASSERT_NE(y, nullptr) << tg_last_error();
                    f.outs = {y}, f.fast_nodes = {y};
                    if (S) f.written = {S};
                }, st <= 0 ? 1e-5 : (st == 1 ? 2e-3 : 1.6e-2));
            }
}

INSTANTIATE_TEST_SUITE_P(Tables, CpuFast, ::testing::Range(0, (int)tables().size()),
                         [](const ::testing::TestParamInfo<int> &i) { return std::string(tables()[(size_t)i.param]->name); });

// The table this CPU picks is the widest it runs, and each table's kernels
// agree with plain loops on tails (n = 0 .. 3 widths + 3).
TEST(CpuFastSimd, KernelsOnTails) {
    for (const tg_simd *t : tables()) {
        SCOPED_TRACE(t->name);
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> d(-1, 1);
        for (int64_t n = 0; n <= 3 * t->width + 3; n++) {
            std::vector<float> a((size_t)n + 1), b((size_t)n + 1), y((size_t)n + 1, 7.0f);
            for (auto &x : a) x = d(rng);
            for (auto &x : b) x = d(rng);
            double ref = 0;
            for (int64_t i = 0; i < n; i++) ref += (double)a[i] * b[i];
            EXPECT_NEAR(t->dot(a.data(), b.data(), n), ref, 1e-5) << n;
            t->add(a.data(), b.data(), y.data(), n);
            for (int64_t i = 0; i < n; i++) ASSERT_EQ(y[i], a[i] + b[i]);
            EXPECT_EQ(y[n], 7.0f) << "wrote past the end, n = " << n;
            std::vector<uint16_t> h((size_t)n + 1, 0x1234);
            t->from_f32[1](a.data(), h.data(), n);
            for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], f16_bits(a[i])) << i;
            EXPECT_EQ(h[n], 0x1234) << "wrote past the end, n = " << n;
        }
        // NaN, infinities, overflow and subnormals to F16 as the library converts them
        const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 65520.0f, -65519.0f, 1e-8f, -3e-5f, 6e-8f, 2.98e-8f,
                            0.0f, -0.0f, 1.0f, 0.1f, 1e5f, 3.0f};
        uint16_t h[16];
        t->from_f32[1](sp, h, 16);
        for (int i = 0; i < 16; i++) EXPECT_EQ(h[i], tg_fp32_to_fp16(sp[i])) << i;
    }
}

}  // namespace
