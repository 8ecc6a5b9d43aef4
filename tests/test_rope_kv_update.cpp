// test_rope_kv_update.cpp - the fused RoPE + KV-cache update on the CPU
// against a float64 oracle written here from DESIGN.md's formulas, the seed's
// PyTorch function emulated in float32, the unfused tg_rope, and bad input.
#include <algorithm>
#include <climits>
#include <numeric>

#include "sig_util.h"

namespace {

struct rope_case {
    const char *name;
    tg_rope_mode mode;
    bool tables;
    tg_type tk, tv;  // cache types
    int64_t D, H, L, B, T;
    int n_rot;
};
void PrintTo(const rope_case &c, std::ostream *os) { *os << c.name; }

// Host copies of one case's inputs, in ne order (contiguous).
struct rope_data {
    rope_case c;
    std::vector<float> kc, vc, kn, vn, cos, sin;  // caches as stored (decoded)
    std::vector<int32_t> pos;                     // {T, B}
    float base = 10000.0f;
};

size_t cache_idx(const rope_case &c, int64_t d, int64_t h, int64_t p, int64_t b) {
    return (size_t)(d + c.D * (h + c.H * (p + c.L * b)));
}
size_t new_idx(const rope_case &c, int64_t d, int64_t h, int64_t t, int64_t b) {
    return (size_t)(d + c.D * (h + c.H * (t + c.T * b)));
}

// Random caches, rows, tables of real angles, and per sequence a random
// permutation slice of [0, L) as positions.
rope_data make_data(const rope_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    rope_data r;
    r.c = c;
    const size_t nc = (size_t)(c.D * c.H * c.L * c.B), nn = (size_t)(c.D * c.H * c.T * c.B);
    r.kc = sig::random_stored(rng, c.tk, nc, -2.0f, 2.0f);
    r.vc = sig::random_stored(rng, c.tv, nc, -2.0f, 2.0f);
    r.kn = tgt::random_floats(rng, nn);
    r.vn = tgt::random_floats(rng, nn);
    const int half = c.n_rot / 2;
    for (int64_t p = 0; p < c.L; p++)
        for (int i = 0; i < half; i++) {
            const double th = (double)p * std::pow(500.0, -2.0 * i / c.n_rot);
            r.cos.push_back((float)std::cos(th));
            r.sin.push_back((float)std::sin(th));
        }
    for (int64_t b = 0; b < c.B; b++) {
        std::vector<int32_t> perm((size_t)c.L);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        r.pos.insert(r.pos.end(), perm.begin(), perm.begin() + c.T);
    }
    return r;
}

// The float64 oracle, step by step from DESIGN.md: the caches after the
// update, before rounding to the cache types.
void oracle(const rope_data &r, std::vector<double> *K, std::vector<double> *V) {
    const rope_case &c = r.c;
    *K = sig::to_double(r.kc);
    *V = sig::to_double(r.vc);
    const int half = c.n_rot / 2;
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t t = 0; t < c.T; t++) {
            const int64_t p = r.pos[(size_t)(t + c.T * b)];
            for (int64_t h = 0; h < c.H; h++) {
                auto x = [&](int64_t d) { return (double)r.kn[new_idx(c, d, h, t, b)]; };
                for (int64_t d = c.n_rot; d < c.D; d++) (*K)[cache_idx(c, d, h, p, b)] = x(d);
                for (int i = 0; i < half; i++) {
                    const int64_t e = c.mode == TG_ROPE_NEOX ? i : 2 * i;
                    const int64_t o = c.mode == TG_ROPE_NEOX ? i + half : 2 * i + 1;
                    double cs, sn;
                    if (c.tables) {
                        cs = r.cos[(size_t)(i + half * p)];
                        sn = r.sin[(size_t)(i + half * p)];
                    } else {
                        const double theta = (double)p * std::pow((double)r.base, -2.0 * i / c.n_rot);
                        cs = std::cos(theta);
                        sn = std::sin(theta);
                    }
                    (*K)[cache_idx(c, e, h, p, b)] = x(e) * cs - x(o) * sn;
                    (*K)[cache_idx(c, o, h, p, b)] = x(e) * sn + x(o) * cs;
                }
                for (int64_t d = 0; d < c.D; d++) (*V)[cache_idx(c, d, h, p, b)] = r.vn[new_idx(c, d, h, t, b)];
            }
        }
}

bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

// Caches read back after the op against the oracle: rows not named in
// positions bit-identical to before; written V rows exactly v_new rounded to
// the type; written K rows within 1e-6 of the oracle (norm-wise), and each K
// entry a nearest value of the cache type to the oracle, up to F32 error
// (1e-6 of the largest entry of its head row: x_e c - x_o s may cancel).
void check_caches(const rope_data &r, const std::vector<float> &kc, const std::vector<float> &vc) {
    const rope_case &c = r.c;
    std::vector<double> K, V;
    oracle(r, &K, &V);
    std::vector<bool> written((size_t)(c.L * c.B), false);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t t = 0; t < c.T; t++) written[(size_t)(r.pos[(size_t)(t + c.T * b)] + c.L * b)] = true;
    std::vector<double> k_out, k_ref;
    int64_t bad_untouched = 0, bad_v = 0, bad_k = 0;
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t p = 0; p < c.L; p++)
            for (int64_t h = 0; h < c.H; h++) {
                double row_max = 0.0;
                for (int64_t d = 0; d < c.D; d++) row_max = std::max(row_max, std::fabs(K[cache_idx(c, d, h, p, b)]));
                for (int64_t d = 0; d < c.D; d++) {
                    const size_t i = cache_idx(c, d, h, p, b);
                    if (!written[(size_t)(p + c.L * b)]) {
                        bad_untouched += !same_bits(kc[i], r.kc[i]) + !same_bits(vc[i], r.vc[i]);
                        continue;
                    }
                    bad_v += !same_bits(vc[i], sig::round_to(c.tv, V[i]));
                    k_out.push_back(kc[i]);
                    k_ref.push_back(K[i]);
                    const double nearest = sig::round_to(c.tk, K[i]);
                    if (!(std::fabs(kc[i] - K[i]) <= std::fabs(nearest - K[i]) + 1e-6 * row_max)) bad_k++;
                }
            }
    EXPECT_EQ(bad_untouched, 0) << "cache entries outside the written rows changed";
    EXPECT_EQ(bad_v, 0) << "V entries differ from v_new rounded to " << tg_type_name(c.tv);
    EXPECT_EQ(bad_k, 0) << "K entries not a nearest " << tg_type_name(c.tk) << " value of the oracle";
    ASSERT_FALSE(k_out.empty());
    const double err = sig::rel_err(k_out, k_ref);
    EXPECT_LT(err, c.tk == TG_TYPE_F32 ? 1e-6 : (c.tk == TG_TYPE_F16 ? 1e-3 : 8e-3)) << "K rows vs float64 oracle";
}

// The op on a CPU backend with contiguous tensors; returns the caches after.
struct rope_run {
    tgt::env e;
    tg_tensor *kc, *vc, *kn, *vn, *pos, *cos = nullptr, *sin = nullptr, *out = nullptr;
    explicit rope_run(const rope_data &r, int threads = 2) : e(64 << 20, threads) {
        const rope_case &c = r.c;
        kc = tg_new_tensor_4d(e.ctx, c.tk, c.D, c.H, c.L, c.B);
        vc = tg_new_tensor_4d(e.ctx, c.tv, c.D, c.H, c.L, c.B);
        kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.D, c.H, c.T, c.B);
        vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.D, c.H, c.T, c.B);
        pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, c.T, c.B);
        if (c.tables) {
            cos = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, c.n_rot / 2, c.L);
            sin = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, c.n_rot / 2, c.L);
        }
        EXPECT_NE(e.alloc(), nullptr) << tg_last_error();
        sig::set_values(kc, r.kc);
        sig::set_values(vc, r.vc);
        sig::set_values(kn, r.kn);
        sig::set_values(vn, r.vn);
        sig::set_i32(pos, r.pos);
        if (cos) {
            sig::set_values(cos, r.cos);
            sig::set_values(sin, r.sin);
        }
        tg_rope_params rp = tg_rope_default_params(c.n_rot);
        rp.mode = c.mode;
        rp.base = r.base;
        out = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, cos, sin, &rp);
        EXPECT_NE(out, nullptr) << tg_last_error();
    }
    tg_status compute() { return sig::compute(e.ctx, e.cpu, out); }
};

class RopeKvUpdate : public ::testing::TestWithParam<rope_case> {};

TEST_P(RopeKvUpdate, MatchesFloat64OracleAndLeavesOtherRows) {
    const rope_case c = GetParam();
    for (uint32_t seed : {1u, 2u}) {
        rope_data r = make_data(c, seed);
        rope_run run(r);
        ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
        check_caches(r, sig::get_values(run.kc), sig::get_values(run.vc));
        // the result is a view of k_cache: the same bytes
        EXPECT_EQ(tg_tensor_data(run.out), tg_tensor_data(run.kc));
    }
}

const rope_case k_rope_cases[] = {
    {"interleaved_tables_f32", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 32, 2, 40, 2, 7, 32},
    {"interleaved_base_f32", TG_ROPE_INTERLEAVED, false, TG_TYPE_F32, TG_TYPE_F32, 32, 2, 40, 2, 7, 32},
    {"neox_tables_f32", TG_ROPE_NEOX, true, TG_TYPE_F32, TG_TYPE_F32, 32, 2, 40, 2, 7, 32},
    {"neox_base_f32", TG_ROPE_NEOX, false, TG_TYPE_F32, TG_TYPE_F32, 32, 2, 40, 2, 7, 32},
    {"interleaved_partial_tables_f32", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 32, 3, 40, 2, 9, 12},
    {"interleaved_partial_base_f32", TG_ROPE_INTERLEAVED, false, TG_TYPE_F32, TG_TYPE_F32, 32, 3, 40, 2, 9, 12},
    {"neox_partial_tables_f32", TG_ROPE_NEOX, true, TG_TYPE_F32, TG_TYPE_F32, 32, 3, 40, 2, 9, 16},
    {"neox_partial_base_f32", TG_ROPE_NEOX, false, TG_TYPE_F32, TG_TYPE_F32, 128, 2, 20, 1, 5, 64},
    {"neox_nrot2_base_f32", TG_ROPE_NEOX, false, TG_TYPE_F32, TG_TYPE_F32, 6, 2, 20, 2, 5, 2},
    {"interleaved_tables_f16", TG_ROPE_INTERLEAVED, true, TG_TYPE_F16, TG_TYPE_F16, 32, 2, 40, 2, 7, 32},
    {"interleaved_base_bf16", TG_ROPE_INTERLEAVED, false, TG_TYPE_BF16, TG_TYPE_BF16, 32, 2, 40, 2, 7, 32},
    {"neox_partial_base_f16", TG_ROPE_NEOX, false, TG_TYPE_F16, TG_TYPE_F16, 64, 2, 40, 2, 7, 32},
    {"neox_partial_tables_bf16", TG_ROPE_NEOX, true, TG_TYPE_BF16, TG_TYPE_BF16, 64, 2, 40, 2, 7, 16},
    {"mixed_k_f16_v_bf16", TG_ROPE_INTERLEAVED, true, TG_TYPE_F16, TG_TYPE_BF16, 16, 4, 24, 3, 6, 16},
    {"mixed_k_bf16_v_f32", TG_ROPE_NEOX, false, TG_TYPE_BF16, TG_TYPE_F32, 16, 4, 24, 3, 6, 8},
    {"full_prefill_T_eq_L", TG_ROPE_INTERLEAVED, false, TG_TYPE_F32, TG_TYPE_F16, 8, 2, 12, 2, 12, 8},
    {"decode_T1", TG_ROPE_NEOX, true, TG_TYPE_F16, TG_TYPE_F16, 32, 2, 300, 4, 1, 32},
};
INSTANTIATE_TEST_SUITE_P(Cases, RopeKvUpdate, ::testing::ValuesIn(k_rope_cases),
                         [](const ::testing::TestParamInfo<rope_case> &i) { return std::string(i.param.name); });

// Random shapes, modes, rotations, table/base and cache types.
TEST(RopeKvUpdateRandom, RandomShapesMatchOracle) {
    std::mt19937 rng(1234);
    const tg_type types[3] = {TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};
    for (int it = 0; it < 12; it++) {
        auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        rope_case c{"random",
                    pick(0, 1) ? TG_ROPE_NEOX : TG_ROPE_INTERLEAVED,
                    pick(0, 1) == 1,
                    types[pick(0, 2)],
                    types[pick(0, 2)],
                    0,
                    pick(1, 4),
                    pick(1, 50),
                    pick(1, 3),
                    0,
                    0};
        c.D = 2 * pick(1, 40);
        c.n_rot = 2 * pick(1, (int)c.D / 2);
        c.T = pick(1, (int)c.L);
        SCOPED_TRACE("iteration " + std::to_string(it) + ": D=" + std::to_string(c.D) +
                     " n_rot=" + std::to_string(c.n_rot) + " L=" + std::to_string(c.L) + " T=" + std::to_string(c.T));
        rope_data r = make_data(c, 100 + it);
        r.base = (float)pick(100, 1000000);
        rope_run run(r);
        ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
        check_caches(r, sig::get_values(run.kc), sig::get_values(run.vc));
    }
}

// The seed's PyTorch function in float32 (each product and sum rounded to
// F32, as PyTorch computes it): clone caches, write, stack(k, v). Layouts are
// [B, L, H, D] row-major = ne {D, H, L, B} contiguous.
std::vector<float> seed_rope_kv_update(const rope_data &r) {
    const rope_case &c = r.c;
    std::vector<float> uk = r.kc, uv = r.vc;  // clone
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t t = 0; t < c.T; t++) {
            const int64_t p = r.pos[(size_t)(t + c.T * b)];
            for (int64_t h = 0; h < c.H; h++) {
                for (int64_t i = 0; i < c.D / 2; i++) {
                    const float xe = r.kn[new_idx(c, 2 * i, h, t, b)], xo = r.kn[new_idx(c, 2 * i + 1, h, t, b)];
                    const float cs = r.cos[(size_t)(p * (c.D / 2) + i)], sn = r.sin[(size_t)(p * (c.D / 2) + i)];
                    const float a = xe * cs, bb = xo * sn, e2 = xe * sn, o2 = xo * cs;
                    uk[cache_idx(c, 2 * i, h, p, b)] = a - bb;
                    uk[cache_idx(c, 2 * i + 1, h, p, b)] = e2 + o2;
                }
                for (int64_t d = 0; d < c.D; d++) uv[cache_idx(c, d, h, p, b)] = r.vn[new_idx(c, d, h, t, b)];
            }
        }
    uk.insert(uk.end(), uv.begin(), uv.end());  // stack((uk, uv), 0)
    return uk;
}

TEST(RopeKvUpdateSeed, ReproducesSeedFunctionExactly) {
    // the seed's shapes: B=2, T=16, H=4, D=32, L=128; then random others
    std::vector<rope_case> cases = {
        {"seed", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 32, 4, 128, 2, 16, 32},
        {"small", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 2, 1, 3, 1, 3, 2},
        {"wide", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 64, 2, 33, 3, 20, 64},
        {"decode", TG_ROPE_INTERLEAVED, true, TG_TYPE_F32, TG_TYPE_F32, 16, 8, 64, 4, 1, 16}};
    for (const rope_case &c : cases) {
        SCOPED_TRACE(c.name);
        rope_data r = make_data(c, 7);
        const std::vector<float> seed = seed_rope_kv_update(r);
        rope_run run(r);
        ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
        std::vector<float> ours = sig::get_values(run.kc), vc = sig::get_values(run.vc);
        ours.insert(ours.end(), vc.begin(), vc.end());
        ASSERT_EQ(ours.size(), seed.size());
        EXPECT_EQ(memcmp(ours.data(), seed.data(), seed.size() * 4), 0) << "not bit-identical to the seed function";
        check_caches(r, sig::get_values(run.kc), vc);
    }
}

// The fused op rotates exactly as the unfused tg_rope does (angles from base).
TEST(RopeKvUpdateFusion, EqualsUnfusedRope) {
    for (tg_rope_mode mode : {TG_ROPE_INTERLEAVED, TG_ROPE_NEOX})
        for (int n_rot : {8, 24}) {
            rope_case c{"fusion", mode, false, TG_TYPE_F32, TG_TYPE_F32, 24, 3, 50, 2, 6, n_rot};
            rope_data r = make_data(c, 11);
            r.base = 1000.0f;
            rope_run run(r);
            tg_rope_params rp = tg_rope_default_params(n_rot);
            rp.mode = mode;
            rp.base = r.base;
            tg_tensor *rot = tg_rope(run.e.ctx, run.kn, run.pos, &rp);
            ASSERT_NE(rot, nullptr) << tg_last_error();
            tg_graph *g = tg_graph_new(run.e.ctx);
            ASSERT_EQ(tg_graph_expand(g, run.out), TG_OK);
            ASSERT_EQ(tg_graph_expand(g, rot), TG_OK);
            ASSERT_EQ(tg_graph_compute(run.e.cpu, g), TG_OK) << tg_last_error();
            const std::vector<float> kc = sig::get_values(run.kc), ref = sig::get_values(rot);
            int64_t diff = 0;
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t t = 0; t < c.T; t++)
                    for (int64_t h = 0; h < c.H; h++)
                        for (int64_t d = 0; d < c.D; d++)
                            diff += !same_bits(kc[cache_idx(c, d, h, r.pos[(size_t)(t + c.T * b)], b)],
                                               ref[new_idx(c, d, h, t, b)]);
            EXPECT_EQ(diff, 0) << "mode " << mode << " n_rot " << n_rot;
        }
}

// Strided views everywhere: k_new/v_new slices of a fused qkv tensor, caches
// one layer's heads of a two-layer cache, positions a column slice.
TEST(RopeKvUpdateViews, NonContiguousInputsAndCaches) {
    for (tg_type ct : {TG_TYPE_F32, TG_TYPE_F16}) {
        rope_case c{"views", TG_ROPE_NEOX, true, ct, ct, 16, 2, 20, 2, 5, 12};
        rope_data r = make_data(c, 21);
        std::mt19937 rng(22);
        tgt::env e;
        const size_t es = tg_type_size(ct);
        tg_tensor *qkv = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.D, 3 * c.H, c.T, c.B);
        tg_tensor *k_all = tg_new_tensor_4d(e.ctx, ct, c.D, 2 * c.H, c.L, c.B);
        tg_tensor *v_all = tg_new_tensor_4d(e.ctx, ct, c.D, 2 * c.H, c.L, c.B);
        tg_tensor *pos_all = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 2 * c.T, c.B);
        tg_tensor *cos = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, c.n_rot / 2, c.L);
        tg_tensor *sin = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, c.n_rot / 2, c.L);
        ASSERT_NE(e.alloc(), nullptr) << tg_last_error();
        // fill the big tensors randomly, then place the case's logical data in them
        std::vector<float> qkv_v = tgt::random_floats(rng, (size_t)tg_nelements(qkv));
        std::vector<float> k_all_v = sig::random_stored(rng, ct, (size_t)tg_nelements(k_all));
        std::vector<float> v_all_v = sig::random_stored(rng, ct, (size_t)tg_nelements(v_all));
        std::vector<int32_t> pos_v((size_t)(2 * c.T * c.B), -7);
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t t = 0; t < c.T; t++) {
                pos_v[(size_t)(c.T + t + 2 * c.T * b)] = r.pos[(size_t)(t + c.T * b)];
                for (int64_t h = 0; h < c.H; h++)
                    for (int64_t d = 0; d < c.D; d++) {
                        qkv_v[(size_t)(d + c.D * (c.H + h + 3 * c.H * (t + c.T * b)))] = r.kn[new_idx(c, d, h, t, b)];
                        qkv_v[(size_t)(d + c.D * (2 * c.H + h + 3 * c.H * (t + c.T * b)))] =
                            r.vn[new_idx(c, d, h, t, b)];
                    }
            }
        auto layer1 = [&](const std::vector<float> &all, int64_t d, int64_t h, int64_t p, int64_t b) {
            return all[(size_t)(d + c.D * (c.H + h + 2 * c.H * (p + c.L * b)))];
        };
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t p = 0; p < c.L; p++)
                for (int64_t h = 0; h < c.H; h++)
                    for (int64_t d = 0; d < c.D; d++) {
                        r.kc[cache_idx(c, d, h, p, b)] = layer1(k_all_v, d, h, p, b);
                        r.vc[cache_idx(c, d, h, p, b)] = layer1(v_all_v, d, h, p, b);
                    }
        sig::set_values(qkv, qkv_v);
        sig::set_values(k_all, k_all_v);
        sig::set_values(v_all, v_all_v);
        sig::set_i32(pos_all, pos_v);
        sig::set_values(cos, r.cos);
        sig::set_values(sin, r.sin);

        tg_tensor *kn = tg_view_4d(e.ctx, qkv, c.D, c.H, c.T, c.B, tg_nb(qkv, 1), tg_nb(qkv, 2), tg_nb(qkv, 3),
                                   (size_t)(c.H * c.D * 4));
        tg_tensor *vn = tg_view_4d(e.ctx, qkv, c.D, c.H, c.T, c.B, tg_nb(qkv, 1), tg_nb(qkv, 2), tg_nb(qkv, 3),
                                   (size_t)(2 * c.H * c.D * 4));
        tg_tensor *kc = tg_view_4d(e.ctx, k_all, c.D, c.H, c.L, c.B, tg_nb(k_all, 1), tg_nb(k_all, 2), tg_nb(k_all, 3),
                                   (size_t)(c.H * c.D) * es);
        tg_tensor *vc = tg_view_4d(e.ctx, v_all, c.D, c.H, c.L, c.B, tg_nb(v_all, 1), tg_nb(v_all, 2), tg_nb(v_all, 3),
                                   (size_t)(c.H * c.D) * es);
        tg_tensor *pos = tg_view_2d(e.ctx, pos_all, c.T, c.B, tg_nb(pos_all, 1), (size_t)(c.T * 4));
        ASSERT_TRUE(kn && vn && kc && vc && pos) << tg_last_error();
        ASSERT_FALSE(tg_is_contiguous(kn) || tg_is_contiguous(kc) || tg_is_contiguous(pos));
        tg_rope_params rp = tg_rope_default_params(c.n_rot);
        rp.mode = c.mode;
        tg_tensor *out = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, cos, sin, &rp);
        ASSERT_NE(out, nullptr) << tg_last_error();
        ASSERT_EQ(sig::compute(e.ctx, e.cpu, out), TG_OK) << tg_last_error();

        const std::vector<float> k_after = sig::get_values(k_all), v_after = sig::get_values(v_all);
        std::vector<float> kc_l(r.kc.size()), vc_l(r.vc.size());
        int64_t layer0_changed = 0;
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t p = 0; p < c.L; p++)
                for (int64_t h = 0; h < c.H; h++)
                    for (int64_t d = 0; d < c.D; d++) {
                        kc_l[cache_idx(c, d, h, p, b)] = layer1(k_after, d, h, p, b);
                        vc_l[cache_idx(c, d, h, p, b)] = layer1(v_after, d, h, p, b);
                        const size_t i0 = (size_t)(d + c.D * (h + 2 * c.H * (p + c.L * b)));  // layer 0
                        layer0_changed += !same_bits(k_after[i0], k_all_v[i0]) + !same_bits(v_after[i0], v_all_v[i0]);
                    }
        EXPECT_EQ(layer0_changed, 0) << "the other layer's heads were written";
        check_caches(r, kc_l, vc_l);
    }
}

// ---------------------------------------------------------------------------
// Graphs: attention after the update in the same graph, then a decode step.

// Causal attention over the expected caches, in double.
std::vector<double> attention_oracle(const rope_case &c, const std::vector<double> &K, const std::vector<double> &V,
                                     const std::vector<float> &q, int64_t Hq, int64_t T,
                                     const std::vector<int32_t> &pos, double scale) {
    std::vector<double> out;
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t hk = h / (Hq / c.H), p = pos[(size_t)(t + T * b)];
                std::vector<double> w;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j <= p && j < c.L; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < c.D; d++)
                        dot += (double)q[(size_t)(d + c.D * (h + Hq * (t + T * b)))] * K[cache_idx(c, d, hk, j, b)];
                    w.push_back(scale * dot);
                    mx = std::max(mx, w.back());
                }
                for (double &x : w) sum += (x = std::exp(x - mx));
                for (int64_t d = 0; d < c.D; d++) {
                    double acc = 0.0;
                    for (size_t j = 0; j < w.size(); j++) acc += w[j] / sum * V[cache_idx(c, d, hk, (int64_t)j, b)];
                    out.push_back(acc);
                }
            }
    return out;
}

TEST(RopeKvUpdateGraph, AttentionSeesUpdateThenDecodeContinues) {
    const int64_t Hq = 4;
    rope_case c{"graph", TG_ROPE_NEOX, true, TG_TYPE_F32, TG_TYPE_F32, 16, 2, 24, 2, 5, 16};
    rope_data r = make_data(c, 31);
    r.pos = {0, 1, 2, 3, 4, 3, 4, 5, 6, 7};  // sequence 1 continues after 3 old rows
    rope_run run(r);
    std::mt19937 rng(32);
    const double scale = 1.0 / std::sqrt((double)c.D);

    // prefill: K read through the update's result, V through the v_cache leaf
    tg_tensor *q = tg_new_tensor_4d(run.e.ctx, TG_TYPE_F32, c.D, Hq, c.T, c.B);
    ASSERT_NE(run.e.alloc(), nullptr) << tg_last_error();
    const std::vector<float> qv = tgt::random_floats(rng, (size_t)tg_nelements(q), -2.0f, 2.0f);
    sig::set_values(q, qv);
    tg_tensor *att = tg_attention(run.e.ctx, q, run.out, run.vc, run.pos, (float)scale);
    ASSERT_NE(att, nullptr) << tg_last_error();
    ASSERT_EQ(sig::compute(run.e.ctx, run.e.cpu, att), TG_OK) << tg_last_error();
    std::vector<double> K, V;
    oracle(r, &K, &V);
    EXPECT_LT(sig::rel_err(sig::to_double(sig::get_values(att)), attention_oracle(c, K, V, qv, Hq, c.T, r.pos, scale)),
              1e-5);
    check_caches(r, sig::get_values(run.kc), sig::get_values(run.vc));

    // decode: one token per sequence in a second graph, reading the leaves
    rope_case c2 = c;
    c2.T = 1;
    rope_data r2 = make_data(c2, 33);
    r2.kc = sig::get_values(run.kc);
    r2.vc = sig::get_values(run.vc);
    r2.cos = r.cos;
    r2.sin = r.sin;
    r2.pos = {5, 8};
    tg_tensor *kn2 = tg_new_tensor_4d(run.e.ctx, TG_TYPE_F32, c.D, c.H, 1, c.B);
    tg_tensor *vn2 = tg_new_tensor_4d(run.e.ctx, TG_TYPE_F32, c.D, c.H, 1, c.B);
    tg_tensor *pos2 = tg_new_tensor_2d(run.e.ctx, TG_TYPE_I32, 1, c.B);
    tg_tensor *q2 = tg_new_tensor_4d(run.e.ctx, TG_TYPE_F32, c.D, Hq, 1, c.B);
    ASSERT_NE(run.e.alloc(), nullptr) << tg_last_error();
    sig::set_values(kn2, r2.kn);
    sig::set_values(vn2, r2.vn);
    sig::set_i32(pos2, r2.pos);
    const std::vector<float> q2v = tgt::random_floats(rng, (size_t)tg_nelements(q2), -2.0f, 2.0f);
    sig::set_values(q2, q2v);
    tg_rope_params rp = tg_rope_default_params(c.n_rot);
    rp.mode = c.mode;
    tg_tensor *upd = tg_rope_kv_update(run.e.ctx, run.kc, run.vc, kn2, vn2, pos2, run.cos, run.sin, &rp);
    tg_tensor *att2 = tg_attention(run.e.ctx, q2, run.kc, run.vc, pos2, (float)scale);
    ASSERT_TRUE(upd && att2) << tg_last_error();
    tg_graph *g = tg_graph_new(run.e.ctx);
    ASSERT_EQ(tg_graph_expand(g, upd), TG_OK);
    ASSERT_EQ(tg_graph_expand(g, att2), TG_OK);
    ASSERT_EQ(tg_graph_compute(run.e.cpu, g), TG_OK) << tg_last_error();
    std::vector<double> K2, V2;
    oracle(r2, &K2, &V2);
    EXPECT_LT(
        sig::rel_err(sig::to_double(sig::get_values(att2)), attention_oracle(c, K2, V2, q2v, Hq, 1, r2.pos, scale)),
        1e-5);
    check_caches(r2, sig::get_values(run.kc), sig::get_values(run.vc));
}

// ---------------------------------------------------------------------------
// Bad input: a clear "[rope_kv_update] ..." error and both caches untouched.

struct cache_snapshot {
    std::vector<uint8_t> k, v;
    cache_snapshot(const tg_tensor *kc, const tg_tensor *vc) : k(sig::get_bytes(kc)), v(sig::get_bytes(vc)) {}
    bool operator==(const cache_snapshot &o) const { return k == o.k && v == o.v; }
};

TEST(RopeKvUpdateBadInput, BadPositionsWriteNothing) {
    for (bool tables : {true, false}) {
        rope_case c{"bad", TG_ROPE_INTERLEAVED, tables, TG_TYPE_F16, TG_TYPE_F32, 8, 2, 16, 2, 3, 8};
        rope_data r = make_data(c, 41);
        rope_run run(r);
        const cache_snapshot before(run.kc, run.vc);
        for (int32_t bad : {16, 17, -1, INT32_MAX, INT32_MIN}) {
            std::vector<int32_t> pos = {0, 1, 2, 5, bad, 6};  // token 1 of sequence 1
            sig::set_i32(run.pos, pos);
            EXPECT_EQ(run.compute(), TG_ERR_ARG) << "position " << bad;
            const std::string want =
                "[rope_kv_update] position " + std::to_string(bad) + " out of range [0, 16) in sequence 1";
            EXPECT_TRUE(sig::starts_with(tg_last_error(), want.c_str())) << tg_last_error();
            EXPECT_TRUE(cache_snapshot(run.kc, run.vc) == before) << "caches changed for position " << bad;
        }
        sig::set_i32(run.pos, {3, 7, 3, 0, 1, 2});  // repeated in sequence 0
        EXPECT_EQ(run.compute(), TG_ERR_ARG);
        EXPECT_TRUE(sig::starts_with(tg_last_error(), "[rope_kv_update] position 3 repeated in sequence 0"))
            << tg_last_error();
        EXPECT_TRUE(cache_snapshot(run.kc, run.vc) == before);
        sig::set_i32(run.pos, {0, 1, 2, 9, 4, 9});  // repeated in sequence 1, not adjacent
        EXPECT_EQ(run.compute(), TG_ERR_ARG);
        EXPECT_TRUE(sig::starts_with(tg_last_error(), "[rope_kv_update] position 9 repeated in sequence 1"))
            << tg_last_error();
        EXPECT_TRUE(cache_snapshot(run.kc, run.vc) == before);
        // the same position in two sequences is fine, and a failed call leaves the op usable
        r.pos = {4, 0, 15, 4, 0, 15};
        sig::set_i32(run.pos, r.pos);
        ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
        check_caches(r, sig::get_values(run.kc), sig::get_values(run.vc));
    }
}

TEST(RopeKvUpdateBadInput, PositionPastTheTables) {
    tgt::env e;
    tg_tensor *kc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 4, 1, 16, 1),
              *vc = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 4, 1, 16, 1);
    tg_tensor *kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 4, 1, 2, 1),
              *vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 4, 1, 2, 1);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 2, 1);
    tg_tensor *cos = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 2, 10), *sin = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 2, 10);
    ASSERT_NE(e.alloc(), nullptr);
    std::mt19937 rng(5);
    for (tg_tensor *t : {kc, vc, kn, vn, cos, sin})
        sig::set_values(t, tgt::random_floats(rng, (size_t)tg_nelements(t)));
    sig::set_i32(pos, {3, 10});
    tg_rope_params rp = tg_rope_default_params(4);
    tg_tensor *out = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, cos, sin, &rp);
    ASSERT_NE(out, nullptr) << tg_last_error();
    const cache_snapshot before(kc, vc);
    EXPECT_EQ(sig::compute(e.ctx, e.cpu, out), TG_ERR_ARG);
    EXPECT_TRUE(sig::starts_with(tg_last_error(),
                                 "[rope_kv_update] position 10 past the cos/sin tables of 10 rows in sequence 0"))
        << tg_last_error();
    EXPECT_TRUE(cache_snapshot(kc, vc) == before);
}

// The check runs before any node of the graph writes (a cpy created before
// the update), and, for positions computed by the graph, before the op.
TEST(RopeKvUpdateBadInput, CheckRunsBeforeAnyWrite) {
    rope_case c{"bad", TG_ROPE_NEOX, false, TG_TYPE_BF16, TG_TYPE_BF16, 8, 2, 16, 2, 3, 4};
    rope_data r = make_data(c, 43);
    r.pos[4] = 16;
    tgt::env e;
    tg_tensor *src = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 8), *dst = tg_new_tensor_1d(e.ctx, TG_TYPE_F32, 8);
    tg_tensor *kc = tg_new_tensor_4d(e.ctx, c.tk, c.D, c.H, c.L, c.B),
              *vc = tg_new_tensor_4d(e.ctx, c.tv, c.D, c.H, c.L, c.B);
    tg_tensor *kn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.D, c.H, c.T, c.B);
    tg_tensor *vn = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.D, c.H, c.T, c.B);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, c.T, c.B);
    ASSERT_NE(e.alloc(), nullptr);
    std::mt19937 rng(44);
    sig::set_values(src, tgt::random_floats(rng, 8));
    sig::set_values(dst, tgt::random_floats(rng, 8));
    sig::set_values(kc, r.kc);
    sig::set_values(vc, r.vc);
    sig::set_values(kn, r.kn);
    sig::set_values(vn, r.vn);
    sig::set_i32(pos, r.pos);
    const std::vector<uint8_t> dst_before = sig::get_bytes(dst);
    const cache_snapshot before(kc, vc);
    tg_rope_params rp = tg_rope_default_params(c.n_rot);
    rp.mode = c.mode;
    tg_tensor *copy = tg_cpy(e.ctx, src, dst);
    tg_tensor *out = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, nullptr, nullptr, &rp);
    tg_tensor *out2 = tg_rope_kv_update(e.ctx, kc, vc, kn, vn, tg_cont(e.ctx, pos), nullptr, nullptr, &rp);
    ASSERT_TRUE(copy && out && out2) << tg_last_error();
    tg_graph *g = tg_graph_new(e.ctx);
    ASSERT_EQ(tg_graph_expand(g, copy), TG_OK);
    ASSERT_EQ(tg_graph_expand(g, out), TG_OK);
    EXPECT_EQ(tg_graph_compute(e.cpu, g), TG_ERR_ARG);
    EXPECT_TRUE(sig::starts_with(tg_last_error(), "[rope_kv_update] position 16 out of range [0, 16) in sequence 1"))
        << tg_last_error();
    EXPECT_EQ(sig::get_bytes(dst), dst_before) << "a node before the update wrote";
    EXPECT_TRUE(cache_snapshot(kc, vc) == before);
    // computed positions (cont of the leaf): checked right before the op
    EXPECT_EQ(sig::compute(e.ctx, e.cpu, out2), TG_ERR_ARG);
    EXPECT_TRUE(sig::starts_with(tg_last_error(), "[rope_kv_update] position 16")) << tg_last_error();
    EXPECT_TRUE(cache_snapshot(kc, vc) == before);
}

TEST(RopeKvUpdateBadInput, ConstructorRejectsBadArguments) {
    tgt::env e;
    auto t4 = [&](tg_type ty, int64_t a, int64_t b, int64_t c, int64_t d) {
        return tg_new_tensor_4d(e.ctx, ty, a, b, c, d);
    };
    // valid: D=8, Hkv=2, L=16, B=2, T=3
    tg_tensor *kc = t4(TG_TYPE_F16, 8, 2, 16, 2), *vc = t4(TG_TYPE_F32, 8, 2, 16, 2);
    tg_tensor *kn = t4(TG_TYPE_F32, 8, 2, 3, 2), *vn = t4(TG_TYPE_F32, 8, 2, 3, 2);
    tg_tensor *pos = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 3, 2);
    tg_tensor *cos = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 4, 16), *sin = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 4, 16);
    // wrong shapes and types
    tg_tensor *vc_L = t4(TG_TYPE_F32, 8, 2, 15, 2), *kn_D = t4(TG_TYPE_F32, 6, 2, 3, 2),
              *kn_B = t4(TG_TYPE_F32, 8, 2, 3, 1);
    tg_tensor *vn_T = t4(TG_TYPE_F32, 8, 2, 4, 2), *kn_f16 = t4(TG_TYPE_F16, 8, 2, 3, 2),
              *kc_i32 = t4(TG_TYPE_I32, 8, 2, 16, 2);
    tg_tensor *pos_f32 = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 3, 2),
              *pos_T = tg_new_tensor_2d(e.ctx, TG_TYPE_I32, 4, 2);
    tg_tensor *pos_3d = tg_new_tensor_3d(e.ctx, TG_TYPE_I32, 3, 2, 2);
    tg_tensor *cos_w = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 3, 16),
              *sin_L = tg_new_tensor_2d(e.ctx, TG_TYPE_F32, 4, 12);
    tg_tensor *cos_f16 = tg_new_tensor_2d(e.ctx, TG_TYPE_F16, 4, 16);
    ASSERT_NE(e.alloc(), nullptr);
    std::mt19937 rng(50);
    sig::set_values(kc, sig::random_stored(rng, TG_TYPE_F16, (size_t)tg_nelements(kc)));
    sig::set_values(vc, tgt::random_floats(rng, (size_t)tg_nelements(vc)));
    tg_tensor *kc_a = tg_view_4d(e.ctx, kc, 8, 2, 8, 2, tg_nb(kc, 1), tg_nb(kc, 2), tg_nb(kc, 3), 0);
    tg_tensor *kc_b = tg_view_4d(e.ctx, kc, 8, 2, 8, 2, tg_nb(kc, 1), tg_nb(kc, 2), tg_nb(kc, 3), 4 * tg_nb(kc, 2));
    tg_tensor *kc_as_vn = tg_view_4d(e.ctx, vc, 8, 2, 3, 2, tg_nb(vc, 1), tg_nb(vc, 2), tg_nb(vc, 3), 0);
    const cache_snapshot before(kc, vc);

    tg_rope_params ok = tg_rope_default_params(8);
    auto with_rot = [](int n_rot, int mode, float base) {
        tg_rope_params p = tg_rope_default_params(n_rot);
        memcpy(&p.mode, &mode, sizeof(int));  // as a C caller may store it, even out of range
        p.base = base;
        return p;
    };
    const tg_rope_params odd = with_rot(3, 0, 1e4f), big = with_rot(10, 0, 1e4f), zero = with_rot(0, 0, 1e4f);
    const tg_rope_params neg = with_rot(-2, 0, 1e4f), mode7 = with_rot(8, 7, 1e4f), base0 = with_rot(8, 0, 0.0f);
    const tg_rope_params base_nan = with_rot(8, 0, NAN), tab_big = with_rot(6, 0, 1e4f);
    struct bad {
        const char *what;
        tg_tensor *kc, *vc, *kn, *vn, *pos, *cos, *sin;
        const tg_rope_params *p;
    };
    const bad cases[] = {
        {"k_cache NULL", nullptr, vc, kn, vn, pos, cos, sin, &ok},
        {"v_cache NULL", kc, nullptr, kn, vn, pos, cos, sin, &ok},
        {"k_new NULL", kc, vc, nullptr, vn, pos, cos, sin, &ok},
        {"v_new NULL", kc, vc, kn, nullptr, pos, cos, sin, &ok},
        {"positions NULL", kc, vc, kn, vn, nullptr, cos, sin, &ok},
        {"params NULL", kc, vc, kn, vn, pos, cos, sin, nullptr},
        {"sin NULL only", kc, vc, kn, vn, pos, cos, nullptr, &ok},
        {"cos NULL only", kc, vc, kn, vn, pos, nullptr, sin, &ok},
        {"odd n_rot", kc, vc, kn, vn, pos, nullptr, nullptr, &odd},
        {"n_rot > D", kc, vc, kn, vn, pos, nullptr, nullptr, &big},
        {"n_rot 0", kc, vc, kn, vn, pos, nullptr, nullptr, &zero},
        {"n_rot < 0", kc, vc, kn, vn, pos, nullptr, nullptr, &neg},
        {"unknown mode", kc, vc, kn, vn, pos, nullptr, nullptr, &mode7},
        {"base 0", kc, vc, kn, vn, pos, nullptr, nullptr, &base0},
        {"base NaN", kc, vc, kn, vn, pos, nullptr, nullptr, &base_nan},
        {"tables of n_rot 8 with n_rot 6", kc, vc, kn, vn, pos, cos, sin, &tab_big},
        {"v_cache L differs", kc, vc_L, kn, vn, pos, cos, sin, &ok},
        {"k_new D differs", kc, vc, kn_D, vn, pos, cos, sin, &ok},
        {"k_new B differs", kc, vc, kn_B, vn, pos, cos, sin, &ok},
        {"v_new T differs", kc, vc, kn, vn_T, pos, cos, sin, &ok},
        {"k_new f16", kc, vc, kn_f16, vn, pos, cos, sin, &ok},
        {"k_cache i32", kc_i32, vc, kn, vn, pos, cos, sin, &ok},
        {"positions f32", kc, vc, kn, vn, pos_f32, cos, sin, &ok},
        {"positions T differs", kc, vc, kn, vn, pos_T, cos, sin, &ok},
        {"positions 3-D", kc, vc, kn, vn, pos_3d, cos, sin, &ok},
        {"cos ne0 != n_rot/2", kc, vc, kn, vn, pos, cos_w, sin, &ok},
        {"sin shape != cos", kc, vc, kn, vn, pos, cos, sin_L, &ok},
        {"cos f16", kc, vc, kn, vn, pos, cos_f16, sin, &ok},
        {"k_cache is v_cache", kc, kc, kn, vn, pos, cos, sin, &ok},
        {"v_cache overlaps k_cache", kc_a, kc_b, kn, vn, pos, cos, sin, &ok},
        {"v_new is a view of v_cache", kc, vc, kn, kc_as_vn, pos, cos, sin, &ok},
    };
    for (const bad &b : cases) {
        tg_tensor *t = tg_rope_kv_update(e.ctx, b.kc, b.vc, b.kn, b.vn, b.pos, b.cos, b.sin, b.p);
        EXPECT_EQ(t, nullptr) << b.what;
        EXPECT_TRUE(sig::starts_with(tg_last_error(), "[rope_kv_update] ")) << b.what << ": " << tg_last_error();
    }
    EXPECT_NE(tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, cos, sin, &ok), nullptr) << tg_last_error();
    EXPECT_NE(tg_rope_kv_update(e.ctx, kc, vc, kn, vn, pos, nullptr, nullptr, &ok), nullptr) << tg_last_error();
    EXPECT_TRUE(cache_snapshot(kc, vc) == before);
}

}  // namespace
