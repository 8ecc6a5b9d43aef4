// test_attention.cpp - causal attention of new queries over a KV cache against
// a float64 oracle: GQA (Hq a multiple of Hkv), positions per sequence,
// F32/F16/BF16 caches in several layouts, Dv != D, a position < 0 giving
// zeros (not NaN, RELIABILITY 19) and a position >= L attending all L rows.
#include "op_util.h"

using namespace opu;

namespace {

const tg_type k_float_types[] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};

struct attn_dims {
    int64_t D, Dv, Hq, Hkv, L, T, B;
};

// q {D, Hq, T, B}; k {D, Hkv, L, B}; v {Dv, Hkv, L, B}; pos {T, B} -> {Dv, Hq, T, B}
std::vector<double> attention_ref(const attn_dims &d, const std::vector<double> &q, const std::vector<double> &k,
                                  const std::vector<double> &v, const std::vector<double> &pos, double scale) {
    const shape qne = {d.D, d.Hq, d.T, d.B}, kne = {d.D, d.Hkv, d.L, d.B}, vne = {d.Dv, d.Hkv, d.L, d.B};
    std::vector<double> out;
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t t = 0; t < d.T; t++)
            for (int64_t h = 0; h < d.Hq; h++) {
                const int64_t hk = h / (d.Hq / d.Hkv);
                const double p = pos[(size_t)(t + d.T * b)];
                const int64_t n = p < 0 ? 0 : (int64_t)std::min<double>(p + 1, (double)d.L);
                std::vector<double> s((size_t)n);
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double dot = 0.0;
                    for (int64_t i = 0; i < d.D; i++)
                        dot += q[(size_t)flat(qne, i, h, t, b)] * k[(size_t)flat(kne, i, hk, j, b)];
                    s[(size_t)j] = scale * dot;
                    mx = std::max(mx, s[(size_t)j]);
                }
                for (auto &x : s) sum += (x = std::exp(x - mx));
                for (int64_t e = 0; e < d.Dv; e++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < n; j++) acc += s[(size_t)j] * v[(size_t)flat(vne, e, hk, j, b)];
                    out.push_back(n ? acc / sum : 0.0);
                }
            }
    return out;
}

// Position sets {T = 3, B = 2}, sequence-major: each sequence at its own offset;
// then the edges: below 0, at and past L, INT32 extremes.
std::vector<std::vector<double>> position_sets(int64_t L) {
    return {
        {5, 6, 7, 0, 1, 2},
        {0, 1, 2, (double)L - 3, (double)L - 2, (double)L - 1},
        {-1, 0, 3, (double)L, (double)L + 1, 2},
        {(double)INT32_MIN, -7, (double)INT32_MAX, 4, 4, (double)L - 1},  // repeats are fine for reads
    };
}

class Attention : public ::testing::TestWithParam<tg_type> {};

TEST_P(Attention, MatchesOracle) {
    const tg_type ct = GetParam();
    const int64_t kvs[] = {1, 2, 4};
    for (int64_t Hkv : kvs)
        for (int li = 0; li < 4; li++)
            for (size_t pi = 0; pi < 4; pi++) {
                const attn_dims d = {8, 6, 4, Hkv, 9, 3, 2};
                const lay lq = k_all_lays[li], lk = k_all_lays[(li + 1) % 4], lv = k_all_lays[(li + 2) % 4],
                          lp = k_all_lays[(li + pi) % 4];
                SCOPED_TRACE("Hkv " + std::to_string(Hkv) + ", q " + lay_name(lq) + ", k " + lay_name(lk) + ", v " +
                             lay_name(lv) + ", positions set " + std::to_string(pi) + " " + lay_name(lp));
                std::mt19937 rng((uint32_t)(Hkv * 100 + li * 10 + pi));
                harness h(li % 2 ? 3 : 2);
                std::vector<double> q, k, v;
                const std::vector<double> pos = position_sets(d.L)[pi];
                tg_tensor *tq = h.rand_input(TG_TYPE_F32, {d.D, d.Hq, d.T, d.B}, lq, rng, &q, -2.0, 2.0);
                tg_tensor *tk = h.rand_input(ct, {d.D, d.Hkv, d.L, d.B}, lk, rng, &k, -2.0, 2.0);
                tg_tensor *tv = h.rand_input(ct, {d.Dv, d.Hkv, d.L, d.B}, lv, rng, &v);
                tg_tensor *tp = h.input(TG_TYPE_I32, {d.T, d.B, 1, 1}, lp, pos);
                const float scale = 1.0f / std::sqrt((float)d.D);
                tg_tensor *y = tg_attention(h.ctx, tq, tk, tv, tp, scale);
                ASSERT_TRUE(y) << tg_last_error();
                const shape want = {d.Dv, d.Hq, d.T, d.B};
                EXPECT_EQ(want, shape_of(y));
                const std::vector<double> out = h.run(y, li != 2);
                EXPECT_TRUE(close(out, attention_ref(d, q, k, v, pos, scale), 1e-5));
                // a query with no valid row: exact zeros
                for (size_t i = 0; i < pos.size() && out.size() == (size_t)numel(want); i++) {
                    if (pos[i] >= 0) continue;
                    for (int64_t j = 0; j < d.Dv * d.Hq; j++) ASSERT_EQ(0.0, out[i * d.Dv * d.Hq + j]);
                }
            }
}

// A NaN in q, in a K row or in a V element reaches exactly the outputs whose
// sums it enters (the reference's rule; the CUDA kernels follow it too,
// test_cuda_llm.cpp CudaLlmAttentionNan): q's query all NaN; a K row every
// query whose rows include it; a V element that element of those queries.
// A query whose rows stop before the row (token 0 here) stays finite.
TEST_P(Attention, NanReachesExactlyItsOutputs) {
    const tg_type ct = GetParam();
    const attn_dims d = {16, 16, 8, 2, 40, 3, 1};
    const std::vector<double> pos = {1, 30, 39};
    const int64_t group = d.Hq / d.Hkv, jk = 2, jv = 2, ev = 3;
    for (int where = 0; where < 3; where++)
        for (int nt : {1, 2}) {
            SCOPED_TRACE(std::string("NaN in ") + "qkv"[where] + ", " + std::to_string(nt) + " threads");
            std::mt19937 rng((uint32_t)(31 + where));
            harness h(nt);
            std::vector<double> q = rand_vals(rng, TG_TYPE_F32, d.D * d.Hq * d.T);
            std::vector<double> k = rand_vals(rng, ct, d.D * d.Hkv * d.L), v = rand_vals(rng, ct, d.Dv * d.Hkv * d.L);
            const shape qne = {d.D, d.Hq, d.T, 1}, kne = {d.D, d.Hkv, d.L, 1}, vne = {d.Dv, d.Hkv, d.L, 1};
            if (where == 0) q[(size_t)flat(qne, 5, 0, 0, 0)] = NAN;  // head 0, token 0
            if (where == 1) k[(size_t)flat(kne, 7, 0, jk, 0)] = NAN;  // kv head 0, row 2
            if (where == 2) v[(size_t)flat(vne, ev, 1, jv, 0)] = NAN;  // kv head 1, row 2, element 3
            tg_tensor *tq = h.input(TG_TYPE_F32, qne, lay::contig, q), *tk = h.input(ct, kne, lay::contig, k),
                      *tv = h.input(ct, vne, lay::contig, v), *tp = h.input(TG_TYPE_I32, {d.T, 1, 1, 1}, lay::contig, pos);
            const std::vector<double> out = h.run(tg_attention(h.ctx, tq, tk, tv, tp, 0.25f));
            ASSERT_EQ(out.size(), (size_t)(d.Dv * d.Hq * d.T));
            int nans = 0;
            for (int64_t t = 0; t < d.T; t++)
                for (int64_t hq = 0; hq < d.Hq; hq++)
                    for (int64_t e = 0; e < d.Dv; e++) {
                        const int64_t n = (int64_t)pos[(size_t)t] + 1, hk = hq / group;
                        const bool want = where == 0   ? (hq == 0 && t == 0)
                                          : where == 1 ? (hk == 0 && n > jk)
                                                       : (hk == 1 && n > jv && e == ev);
                        const double o = out[(size_t)(e + d.Dv * (hq + d.Hq * t))];
                        nans += want;
                        ASSERT_EQ(std::isnan(o), want) << "head " << hq << " token " << t << " element " << e << " = " << o;
                    }
            ASSERT_GT(nans, 0);
        }
}

// A cache bigger than what a step reads is the usual case: a view of the
// first L rows of a {D, Hkv, Lmax, B} cache (row stride kept), and a later
// position writes nothing, so rows past L must not be read (they hold NaN).
TEST_P(Attention, ViewOfLargerCacheIgnoresRowsPastL) {
    const tg_type ct = GetParam();
    const attn_dims d = {4, 4, 2, 1, 5, 2, 2};
    const int64_t Lmax = 12;
    std::mt19937 rng(17);
    harness h;
    std::vector<double> q, kfull, vfull;
    tg_tensor *tq = h.rand_input(TG_TYPE_F32, {d.D, d.Hq, d.T, d.B}, lay::contig, rng, &q);
    kfull = rand_vals(rng, ct, d.D * d.Hkv * Lmax * d.B);
    vfull = rand_vals(rng, ct, d.Dv * d.Hkv * Lmax * d.B);
    // rows L.. of each sequence are NaN: reading them would poison the output
    const shape fk = {d.D, d.Hkv, Lmax, d.B}, fv = {d.Dv, d.Hkv, Lmax, d.B};
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t j = d.L; j < Lmax; j++) {
            for (int64_t i = 0; i < d.D; i++) kfull[(size_t)flat(fk, i, 0, j, b)] = NAN;
            for (int64_t i = 0; i < d.Dv; i++) vfull[(size_t)flat(fv, i, 0, j, b)] = NAN;
        }
    tg_tensor *kc = h.input(ct, fk, lay::contig, kfull), *vc = h.input(ct, fv, lay::contig, vfull);
    const size_t es = tg_type_size(ct);
    tg_tensor *kv = tg_view_4d(h.ctx, kc, d.D, d.Hkv, d.L, d.B, tg_nb(kc, 1), tg_nb(kc, 2), tg_nb(kc, 3), 0);
    tg_tensor *vv = tg_view_4d(h.ctx, vc, d.Dv, d.Hkv, d.L, d.B, tg_nb(vc, 1), tg_nb(vc, 2), tg_nb(vc, 3), 0);
    ASSERT_TRUE(kv && vv) << tg_last_error();
    EXPECT_EQ(es, tg_nb(kv, 0));
    const std::vector<double> pos = {3, 100, 4, 0};
    tg_tensor *tp = h.input(TG_TYPE_I32, {d.T, d.B, 1, 1}, lay::contig, pos);
    std::vector<double> k, v;  // the first L rows, as the oracle sees them
    for (int64_t b = 0; b < d.B; b++)
        for (int64_t j = 0; j < d.L; j++) {
            for (int64_t i = 0; i < d.D; i++) k.push_back(kfull[(size_t)flat(fk, i, 0, j, b)]);
            for (int64_t i = 0; i < d.Dv; i++) v.push_back(vfull[(size_t)flat(fv, i, 0, j, b)]);
        }
    EXPECT_TRUE(close(h.run(tg_attention(h.ctx, tq, kv, vv, tp, 0.5f)), attention_ref(d, q, k, v, pos, 0.5), 1e-5));
}

// Scores far apart (one row dominates) and a large scale: no overflow, no NaN.
TEST_P(Attention, LargeScores) {
    const tg_type ct = GetParam();
    const attn_dims d = {4, 3, 2, 2, 6, 1, 1};
    std::mt19937 rng(23);
    harness h;
    std::vector<double> q, k, v;
    tg_tensor *tq = h.rand_input(TG_TYPE_F32, {d.D, d.Hq, d.T, d.B}, lay::strided, rng, &q, -30.0, 30.0);
    tg_tensor *tk = h.rand_input(ct, {d.D, d.Hkv, d.L, d.B}, lay::permuted, rng, &k, -30.0, 30.0);
    tg_tensor *tv = h.rand_input(ct, {d.Dv, d.Hkv, d.L, d.B}, lay::contig, rng, &v);
    const std::vector<double> pos = {5};
    tg_tensor *tp = h.input(TG_TYPE_I32, {1, 1, 1, 1}, lay::contig, pos);
    for (float scale : {1.0f, 10.0f}) {
        EXPECT_TRUE(close(h.run(tg_attention(h.ctx, tq, tk, tv, tp, scale)), attention_ref(d, q, k, v, pos, scale),
                          1e-5))
            << scale;
    }
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, Attention, ::testing::ValuesIn(k_float_types),
                         [](const ::testing::TestParamInfo<tg_type> &i) { return std::string(type_str(i.param)); });

TEST(AttentionMisuse, ShapesTypesAndNulls) {
    harness h;
    // D = 8, Hq = 4, Hkv = 2, L = 6, T = 3, B = 2
    tg_tensor *q = tg_new_tensor_4d(h.ctx, TG_TYPE_F32, 8, 4, 3, 2);
    tg_tensor *k = tg_new_tensor_4d(h.ctx, TG_TYPE_F16, 8, 2, 6, 2);
    tg_tensor *v = tg_new_tensor_4d(h.ctx, TG_TYPE_F16, 5, 2, 6, 2);
    tg_tensor *p = tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 3, 2);
    EXPECT_TRUE(tg_attention(h.ctx, q, k, v, p, 0.5f)) << tg_last_error();
    auto t4 = [&](tg_type t, int64_t a, int64_t b, int64_t c, int64_t d) {
        return tg_new_tensor_4d(h.ctx, t, a, b, c, d);
    };
    const char *A = "[attention]";
    EXPECT_TRUE(fails(tg_attention(h.ctx, t4(TG_TYPE_F32, 8, 3, 3, 2), k, v, p, 0.5f), A));  // 3 % 2
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, t4(TG_TYPE_F16, 8, 3, 6, 2), v, p, 0.5f), A));  // 4 % 3
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, t4(TG_TYPE_F16, 7, 2, 6, 2), v, p, 0.5f), A));  // D
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, t4(TG_TYPE_F16, 8, 2, 6, 1), v, p, 0.5f), A));  // B
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, t4(TG_TYPE_F16, 5, 1, 6, 2), p, 0.5f), A));  // v heads
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, t4(TG_TYPE_F16, 5, 2, 5, 2), p, 0.5f), A));  // v rows
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, t4(TG_TYPE_F16, 5, 2, 6, 1), p, 0.5f), A));  // v seqs
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 4, 2), 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, tg_new_tensor_2d(h.ctx, TG_TYPE_I32, 3, 1), 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, tg_new_tensor_3d(h.ctx, TG_TYPE_I32, 3, 2, 2), 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, tg_new_tensor_2d(h.ctx, TG_TYPE_F32, 3, 2), 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, t4(TG_TYPE_F16, 8, 4, 3, 2), k, v, p, 0.5f), A));  // q must be f32
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, t4(TG_TYPE_I32, 8, 2, 6, 2), v, p, 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, t4(TG_TYPE_I32, 5, 2, 6, 2), p, 0.5f), A));
    for (float s : {NAN, INFINITY}) EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, p, s), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, nullptr, k, v, p, 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, nullptr, v, p, 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, nullptr, p, 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(h.ctx, q, k, v, nullptr, 0.5f), A));
    EXPECT_TRUE(fails(tg_attention(nullptr, q, k, v, p, 0.5f), A));
}

}  // namespace
