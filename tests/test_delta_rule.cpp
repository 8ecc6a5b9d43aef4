// test_delta_rule.cpp - the gated linear / gated delta-rule recurrence on the
// CPU against a float64 oracle written here from DESIGN.md's formulas, the
// seed's function, the unfused l2 norm, state carry across calls, special
// gate values and bad input.
#include <algorithm>

#include "sig_util.h"

namespace {

constexpr int k_no_state = -1;

struct delta_case {
    std::string name;
    tg_delta_mode mode;
    tg_gate_kind gate;
    bool l2norm;
    float scale;  // < 0: 1/sqrt(Dk)
    int64_t Dk, Dv, Hk, Hv, T, B;
    int state;  // k_no_state or the tg_type of the state
    float g_lo, g_hi, beta_lo, beta_hi;
};
void PrintTo(const delta_case &c, std::ostream *os) { *os << c.name; }

struct delta_data {
    delta_case c;
    float scale;
    std::vector<float> q, k, v, g, beta, s0;  // ne order, contiguous; s0 as stored
};

size_t qk_idx(const delta_case &c, int64_t i, int64_t h, int64_t t, int64_t b) {
    return (size_t)(i + c.Dk * (h + c.Hk * (t + c.T * b)));
}
size_t v_idx(const delta_case &c, int64_t j, int64_t h, int64_t t, int64_t b) {
    return (size_t)(j + c.Dv * (h + c.Hv * (t + c.T * b)));
}
size_t g_idx(const delta_case &c, int64_t h, int64_t t, int64_t b) { return (size_t)(h + c.Hv * (t + c.T * b)); }
size_t s_idx(const delta_case &c, int64_t i, int64_t j, int64_t h, int64_t b) {
    return (size_t)(i + c.Dk * (j + c.Dv * (h + c.Hv * b)));
}

// Random inputs; q and k scaled by 1/sqrt(Dk) without the l2 norm, so that
// the delta rule stays contractive (beta |k|^2 < 2).
delta_data make_data(const delta_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    delta_data d;
    d.c = c;
    d.scale = c.scale < 0 ? (float)(1.0 / std::sqrt((double)c.Dk)) : c.scale;
    const float qk = c.l2norm ? 1.0f : (float)(1.0 / std::sqrt((double)c.Dk));
    d.q = tgt::random_floats(rng, (size_t)(c.Dk * c.Hk * c.T * c.B), -qk, qk);
    d.k = tgt::random_floats(rng, d.q.size(), -qk, qk);
    d.v = tgt::random_floats(rng, (size_t)(c.Dv * c.Hv * c.T * c.B));
    d.g = tgt::random_floats(rng, (size_t)(c.Hv * c.T * c.B), c.g_lo, c.g_hi);
    d.beta = tgt::random_floats(rng, d.g.size(), c.beta_lo, c.beta_hi);
    if (c.state != k_no_state)
        d.s0 = sig::random_stored(rng, (tg_type)c.state, (size_t)(c.Dk * c.Dv * c.Hv * c.B), -0.5f, 0.5f);
    return d;
}

// The float64 oracle, step by step from DESIGN.md (and the documented rule
// that a zero entry of S stays zero under any non-NaN gate).
void oracle(const delta_data &d, std::vector<double> *o, std::vector<double> *S_final) {
    const delta_case &c = d.c;
    o->assign((size_t)(c.Dv * c.Hv * c.T * c.B), 0.0);
    S_final->assign((size_t)(c.Dk * c.Dv * c.Hv * c.B), 0.0);
    std::vector<double> S((size_t)(c.Dk * c.Dv)), q((size_t)c.Dk), k((size_t)c.Dk), u((size_t)c.Dv);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.Hv; h++) {
            const int64_t hk = h / (c.Hv / c.Hk);
            for (int64_t j = 0; j < c.Dv; j++)
                for (int64_t i = 0; i < c.Dk; i++) S[i + j * c.Dk] = d.s0.empty() ? 0.0 : d.s0[s_idx(c, i, j, h, b)];
            for (int64_t t = 0; t < c.T; t++) {
                double qq = 0.0, kk = 0.0;
                for (int64_t i = 0; i < c.Dk; i++) {
                    q[i] = d.q[qk_idx(c, i, hk, t, b)];
                    k[i] = d.k[qk_idx(c, i, hk, t, b)];
                    qq += q[i] * q[i];
                    kk += k[i] * k[i];
                }
                if (c.l2norm)
                    for (int64_t i = 0; i < c.Dk; i++) {
                        q[i] /= std::sqrt(qq + 1e-6);
                        k[i] /= std::sqrt(kk + 1e-6);
                    }
                const double g = d.g[g_idx(c, h, t, b)], beta = d.beta[g_idx(c, h, t, b)];
                const double a = c.gate == TG_GATE_LOG ? std::exp(g) : g;
                for (double &s : S) s = (s == 0.0 && !std::isnan(a)) ? 0.0 : a * s;
                for (int64_t j = 0; j < c.Dv; j++) {
                    double sk = 0.0;
                    for (int64_t i = 0; i < c.Dk; i++) sk += S[i + j * c.Dk] * k[i];
                    const double vj = d.v[v_idx(c, j, h, t, b)];
                    u[j] = c.mode == TG_DELTA_GATED_DELTA ? beta * (vj - sk) : beta * vj;
                }
                for (int64_t j = 0; j < c.Dv; j++)
                    for (int64_t i = 0; i < c.Dk; i++) S[i + j * c.Dk] += k[i] * u[j];
                for (int64_t j = 0; j < c.Dv; j++) {
                    double sq = 0.0;
                    for (int64_t i = 0; i < c.Dk; i++) sq += S[i + j * c.Dk] * q[i];
                    (*o)[v_idx(c, j, h, t, b)] = (double)d.scale * sq;
                }
            }
            for (int64_t j = 0; j < c.Dv; j++)
                for (int64_t i = 0; i < c.Dk; i++) (*S_final)[s_idx(c, i, j, h, b)] = S[i + j * c.Dk];
        }
}

// The op on a CPU backend with contiguous tensors.
struct delta_run {
    tgt::env e;
    tg_tensor *q, *k, *v, *g, *beta, *state = nullptr, *o = nullptr;
    tg_delta_params dp;
    explicit delta_run(const delta_data &d, int threads = 2) : e(64 << 20, threads) {
        const delta_case &c = d.c;
        q = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        k = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        v = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.Dv, c.Hv, c.T, c.B);
        g = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
        beta = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
        if (c.state != k_no_state) state = tg_new_tensor_4d(e.ctx, (tg_type)c.state, c.Dk, c.Dv, c.Hv, c.B);
        EXPECT_NE(e.alloc(), nullptr) << tg_last_error();
        sig::set_values(q, d.q);
        sig::set_values(k, d.k);
        sig::set_values(v, d.v);
        sig::set_values(g, d.g);
        sig::set_values(beta, d.beta);
        if (state) sig::set_values(state, d.s0);
        dp = {c.mode, c.gate, d.scale, c.l2norm, TG_DELTA_ALGO_AUTO};
        o = tg_delta_rule(e.ctx, q, k, v, g, beta, state, &dp);
        EXPECT_NE(o, nullptr) << tg_last_error();
    }
    tg_status compute() { return sig::compute(e.ctx, e.cpu, o); }
};

// o within 1e-5 of the oracle; the final state within 1e-5 (F32) or no
// further from it than its rounding to the storage type allows.
void check_run(const delta_data &d, delta_run &run) {
    std::vector<double> o_ref, s_ref;
    oracle(d, &o_ref, &s_ref);
    EXPECT_LT(sig::rel_err(sig::to_double(sig::get_values(run.o)), o_ref), 1e-5) << "output vs float64 oracle";
    if (!run.state) return;
    const std::vector<double> s_out = sig::to_double(sig::get_values(run.state));
    if (d.c.state == TG_TYPE_F32) {
        EXPECT_LT(sig::rel_err(s_out, s_ref), 1e-5) << "final state vs float64 oracle";
    } else {
        std::vector<double> rounded(s_ref.size());
        for (size_t i = 0; i < s_ref.size(); i++) rounded[i] = sig::round_to((tg_type)d.c.state, s_ref[i]);
        EXPECT_LE(sig::rel_err(s_out, s_ref), 1.01 * sig::rel_err(rounded, s_ref) + 1e-5)
            << "final " << tg_type_name((tg_type)d.c.state) << " state vs float64 oracle";
    }
}

class DeltaRule : public ::testing::TestWithParam<delta_case> {};

TEST_P(DeltaRule, MatchesFloat64Oracle) {
    const delta_case c = GetParam();
    delta_data d = make_data(c, 17);
    delta_run run(d);
    ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
    check_run(d, run);
}

// Every mode x gate x state storage, over head dims 1..256 (Dk != Dv too),
// head ratios 1, 2, 4, with and without the l2 norm, and several scales.
std::vector<delta_case> matrix_cases() {
    struct dims {
        int64_t Dk, Dv, T;
    };
    const dims dl[] = {{24, 24, 17},  {64, 64, 17},  {1, 1, 17},    {100, 100, 9},
                       {24, 100, 17}, {100, 24, 17}, {256, 256, 5}, {64, 256, 7}};
    const int states[] = {k_no_state, TG_TYPE_F32, TG_TYPE_F16, TG_TYPE_BF16};
    std::vector<delta_case> out;
    int n = 0;
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        for (tg_gate_kind gate : {TG_GATE_LINEAR, TG_GATE_LOG})
            for (int st : states) {
                const dims dm = dl[n % 8];
                const int64_t ratio = (int64_t)1 << (n % 3);  // Hv = Hk, 2 Hk, 4 Hk
                const int64_t Hk = n % 2 ? 1 : 2;
                const bool l2 = n % 4 >= 2;
                const float scale = n % 3 == 0 ? 1.0f : (n % 3 == 1 ? -1.0f : 0.37f);
                const float g_lo = gate == TG_GATE_LOG ? -1.0f : 0.5f, g_hi = gate == TG_GATE_LOG ? 0.0f : 1.0f;
                std::string name = std::string(mode == TG_DELTA_GATED_DELTA ? "delta" : "linear") +
                                   (gate == TG_GATE_LOG ? "_loggate" : "_lingate") + "_state_" +
                                   (st == k_no_state ? "none" : tg_type_name((tg_type)st)) + "_dk" +
                                   std::to_string(dm.Dk) + "_dv" + std::to_string(dm.Dv) + "_hv" +
                                   std::to_string(Hk * ratio) + "_hk" + std::to_string(Hk) + (l2 ? "_l2" : "");
                out.push_back(
                    {name, mode, gate, l2, scale, dm.Dk, dm.Dv, Hk, Hk * ratio, dm.T, 2, st, g_lo, g_hi, 0.0f, 1.0f});
                n++;
            }
    // Gated DeltaNet: log gates in [-20, 0), beta in [0, 1], scale 1/sqrt(Dk)
    for (bool l2 : {false, true})
        for (int st : {k_no_state, (int)TG_TYPE_F32})
            out.push_back(
                {std::string("gated_deltanet") + (l2 ? "_l2" : "") + (st == k_no_state ? "_nostate" : "_f32state"),
                 TG_DELTA_GATED_DELTA, TG_GATE_LOG, l2, -1.0f, 64, 64, 2, 4, 33, 2, st, -20.0f, 0.0f, 0.0f, 1.0f});
    // the seed's case: GATED_LINEAR, linear gate, scale 1, no state, head dim 24
    out.push_back({"seed_gated_linear", TG_DELTA_GATED_LINEAR, TG_GATE_LINEAR, false, 1.0f, 24, 24, 4, 4, 16, 2,
                   k_no_state, 0.0f, 1.0f, 0.0f, 1.0f});
    // beta outside [0, 1] is plain math
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        out.push_back({std::string("beta_outside_unit_") + (mode == TG_DELTA_GATED_DELTA ? "delta" : "linear"), mode,
                       TG_GATE_LOG, true, 1.0f, 16, 16, 2, 2, 12, 2, TG_TYPE_F32, -0.5f, 0.0f, -1.0f, 2.0f});
    return out;
}
INSTANTIATE_TEST_SUITE_P(Cases, DeltaRule, ::testing::ValuesIn(matrix_cases()),
                         [](const ::testing::TestParamInfo<delta_case> &i) { return i.param.name; });

// The seed's PyTorch function, literally: S = gate*S + beta*k v^T, y = q^T S.
TEST(DeltaRuleSeed, ReproducesSeedFunction) {
    delta_case c{
        "seed", TG_DELTA_GATED_LINEAR, TG_GATE_LINEAR, false, 1.0f, 24, 24, 4, 4, 16, 2, k_no_state, 0.0f, 1.0f, 0.0f,
        1.0f};
    delta_data d = make_data(c, 3);
    std::vector<double> y;
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.Hv; h++) {
            std::vector<double> S((size_t)(c.Dk * c.Dv), 0.0);  // S[i, j] at i*D + j, as PyTorch's
            for (int64_t t = 0; t < c.T; t++) {
                const double gt = d.g[g_idx(c, h, t, b)], bt = d.beta[g_idx(c, h, t, b)];
                for (int64_t i = 0; i < c.Dk; i++)
                    for (int64_t j = 0; j < c.Dv; j++)
                        S[i * c.Dv + j] = gt * S[i * c.Dv + j] +
                                          bt * ((double)d.k[qk_idx(c, i, h, t, b)] * d.v[v_idx(c, j, h, t, b)]);
                for (int64_t j = 0; j < c.Dv; j++) {
                    double acc = 0.0;
                    for (int64_t i = 0; i < c.Dk; i++) acc += (double)d.q[qk_idx(c, i, h, t, b)] * S[i * c.Dv + j];
                    y.resize(std::max(y.size(), v_idx(c, j, h, t, b) + 1));
                    y[v_idx(c, j, h, t, b)] = acc;
                }
            }
        }
    delta_run run(d);
    ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
    EXPECT_LT(sig::rel_err(sig::to_double(sig::get_values(run.o)), y), 1e-5);
}

// T tokens in one call equal the same tokens in calls of 1, 3 and 7 tokens
// (separate graphs over strided views of the inputs) carrying the state.
TEST(DeltaRuleState, SplitCallsCarryTheState) {
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        for (tg_gate_kind gate : {TG_GATE_LINEAR, TG_GATE_LOG}) {
            delta_case c{"carry",
                         mode,
                         gate,
                         mode == TG_DELTA_GATED_DELTA,
                         0.5f,
                         24,
                         40,
                         2,
                         4,
                         23,
                         2,
                         TG_TYPE_F32,
                         gate == TG_GATE_LOG ? -1.0f : 0.6f,
                         gate == TG_GATE_LOG ? 0.0f : 1.0f,
                         0.0f,
                         1.0f};
            delta_data d = make_data(c, 5);
            delta_run run(d);  // state A: all tokens at once
            ASSERT_EQ(run.compute(), TG_OK) << tg_last_error();
            const std::vector<float> o_all = sig::get_values(run.o), s_all = sig::get_values(run.state);
            check_run(d, run);

            tg_context *ctx = run.e.ctx;
            tg_tensor *state_b = tg_new_tensor_4d(ctx, TG_TYPE_F32, c.Dk, c.Dv, c.Hv, c.B);
            ASSERT_NE(run.e.alloc(), nullptr);
            sig::set_values(state_b, d.s0);
            std::vector<float> o_split(o_all.size(), NAN);
            int64_t t0 = 0;
            for (int64_t n : {1, 3, 7, 1, 3, 7, 1}) {
                auto v4 = [&](tg_tensor *x) {
                    return tg_view_4d(ctx, x, tg_ne(x, 0), tg_ne(x, 1), n, tg_ne(x, 3), tg_nb(x, 1), tg_nb(x, 2),
                                      tg_nb(x, 3), (size_t)t0 * tg_nb(x, 2));
                };
                auto v3 = [&](tg_tensor *x) {
                    return tg_view_3d(ctx, x, tg_ne(x, 0), n, tg_ne(x, 2), tg_nb(x, 1), tg_nb(x, 2),
                                      (size_t)t0 * tg_nb(x, 1));
                };
                tg_tensor *o =
                    tg_delta_rule(ctx, v4(run.q), v4(run.k), v4(run.v), v3(run.g), v3(run.beta), state_b, &run.dp);
                ASSERT_NE(o, nullptr) << tg_last_error();
                ASSERT_EQ(sig::compute(ctx, run.e.cpu, o), TG_OK) << tg_last_error();
                const std::vector<float> part = sig::get_values(o);
                for (int64_t b = 0; b < c.B; b++)
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t h = 0; h < c.Hv; h++)
                            for (int64_t j = 0; j < c.Dv; j++)
                                o_split[v_idx(c, j, h, t0 + t, b)] =
                                    part[(size_t)(j + c.Dv * (h + c.Hv * (t + n * b)))];
                t0 += n;
            }
            ASSERT_EQ(t0, c.T);
            EXPECT_LT(sig::rel_err(sig::to_double(o_split), sig::to_double(o_all)), 1e-6)
                << "mode " << mode << " gate " << gate;
            EXPECT_LT(sig::rel_err(sig::to_double(sig::get_values(state_b)), sig::to_double(s_all)), 1e-6);
        }
}

// A NULL state is a zero state (and a given state is really read: a random
// one changes the output).
TEST(DeltaRuleState, NullStateEqualsZeroState) {
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA}) {
        delta_case c{"null", mode, TG_GATE_LOG, true, 1.0f, 16, 8, 1, 2, 9, 2, TG_TYPE_F32, -1.0f, 0.0f, 0.0f, 1.0f};
        delta_data d = make_data(c, 9);
        delta_data d0 = d;
        std::fill(d0.s0.begin(), d0.s0.end(), 0.0f);
        delta_data dn = d;
        dn.c.state = k_no_state;
        dn.s0.clear();
        delta_run zero(d0), none(dn), rnd(d);
        ASSERT_EQ(zero.compute(), TG_OK);
        ASSERT_EQ(none.compute(), TG_OK);
        ASSERT_EQ(rnd.compute(), TG_OK);
        EXPECT_EQ(sig::get_values(zero.o), sig::get_values(none.o));
        EXPECT_NE(sig::get_values(rnd.o), sig::get_values(none.o));
        check_run(dn, none);
        check_run(d, rnd);
    }
}

// l2norm_qk equals tg_l2_norm(x, 1e-6) applied first, bit for bit.
TEST(DeltaRuleFusion, L2NormEqualsUnfusedChain) {
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA}) {
        delta_case c{"l2", mode, TG_GATE_LOG, true, 0.25f, 32, 16, 2, 4, 11, 2, k_no_state, -2.0f, 0.0f, 0.0f, 1.0f};
        delta_data d = make_data(c, 13);
        delta_run run(d);
        tg_delta_params plain = run.dp;
        plain.l2norm_qk = false;
        tg_tensor *o2 = tg_delta_rule(run.e.ctx, tg_l2_norm(run.e.ctx, run.q, 1e-6f),
                                      tg_l2_norm(run.e.ctx, run.k, 1e-6f), run.v, run.g, run.beta, nullptr, &plain);
        ASSERT_NE(o2, nullptr) << tg_last_error();
        tg_graph *g = tg_graph_new(run.e.ctx);
        ASSERT_EQ(tg_graph_expand(g, run.o), TG_OK);
        ASSERT_EQ(tg_graph_expand(g, o2), TG_OK);
        ASSERT_EQ(tg_graph_compute(run.e.cpu, g), TG_OK) << tg_last_error();
        EXPECT_EQ(sig::get_values(run.o), sig::get_values(o2));
        check_run(d, run);
    }
}

// Nothing leaks between the sequences of a batch, and the thread split does
// not change a bit.
TEST(DeltaRuleState, SequencesAndThreadsIndependent) {
    delta_case c{"batch", TG_DELTA_GATED_DELTA, TG_GATE_LOG, true, 1.0f, 20,  12, 1, 3, 10,
                 3,       TG_TYPE_BF16,         -3.0f,       0.0f, 0.0f, 1.0f};
    delta_data d = make_data(c, 19);
    delta_run all(d, 3), one_thread(d, 1);
    ASSERT_EQ(all.compute(), TG_OK);
    ASSERT_EQ(one_thread.compute(), TG_OK);
    const std::vector<float> o_all = sig::get_values(all.o), s_all = sig::get_values(all.state);
    EXPECT_EQ(o_all, sig::get_values(one_thread.o));
    EXPECT_EQ(s_all, sig::get_values(one_thread.state));
    for (int64_t b = 0; b < c.B; b++) {
        delta_data db = d;
        db.c.B = 1;
        auto slice = [&](const std::vector<float> &x) {
            const size_t n = x.size() / (size_t)c.B;
            return std::vector<float>(x.begin() + (long)(n * b), x.begin() + (long)(n * (b + 1)));
        };
        db.q = slice(d.q), db.k = slice(d.k), db.v = slice(d.v), db.g = slice(d.g), db.beta = slice(d.beta);
        db.s0 = slice(d.s0);
        delta_run single(db);
        ASSERT_EQ(single.compute(), TG_OK);
        EXPECT_EQ(sig::get_values(single.o), slice(o_all)) << "sequence " << b;
        EXPECT_EQ(sig::get_values(single.state), slice(s_all)) << "sequence " << b;
    }
}

// ---------------------------------------------------------------------------
// Numbers: gates of +-1e4, +-inf and NaN, as tinygml.h documents them.

bool all_finite(const std::vector<float> &x) {
    return std::all_of(x.begin(), x.end(), [](float f) { return std::isfinite(f); });
}

// A log gate of -1e4 or -inf forgets the state exactly: what follows no
// longer depends on the initial state, and nothing turns NaN.
TEST(DeltaRuleNumbers, VeryNegativeLogGatesForget) {
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA}) {
        delta_case c{"forget", mode, TG_GATE_LOG, true,        1.0f,  12,   10,   1,
                     2,        12,   2,           TG_TYPE_F32, -1.0f, 0.0f, 0.0f, 1.0f};
        delta_data d = make_data(c, 23);
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t h = 0; h < c.Hv; h++) {
                d.g[g_idx(c, h, 4, b)] = -1e4f;
                d.g[g_idx(c, h, 9, b)] = -INFINITY;
            }
        delta_data d2 = d;  // another initial state
        for (float &x : d2.s0) x = -2.0f * x + 0.25f;
        delta_run run(d), run2(d2);
        ASSERT_EQ(run.compute(), TG_OK);
        ASSERT_EQ(run2.compute(), TG_OK);
        const std::vector<float> o = sig::get_values(run.o), o2 = sig::get_values(run2.o);
        EXPECT_TRUE(all_finite(o));
        check_run(d, run);
        int64_t differ_before = 0, differ_after = 0;
        for (int64_t b = 0; b < c.B; b++)
            for (int64_t t = 0; t < c.T; t++)
                for (int64_t h = 0; h < c.Hv; h++)
                    for (int64_t j = 0; j < c.Dv; j++) {
                        const size_t i = v_idx(c, j, h, t, b);
                        (t < 4 ? differ_before : differ_after) += o[i] != o2[i];
                    }
        EXPECT_GT(differ_before, 0) << "the initial state was not read";
        EXPECT_EQ(differ_after, 0) << "the state survived a gate of exp(-1e4)";
        EXPECT_EQ(sig::get_values(run.state), sig::get_values(run2.state));
    }
}

// Gates that overflow (or are infinite) on a zero state: a zero entry stays
// zero, so the first token of a fresh sequence is still exact and finite.
TEST(DeltaRuleNumbers, HugeGatesOnZeroStateStayFinite) {
    struct gate_value {
        tg_gate_kind gate;
        float g;
    };
    const gate_value vals[] = {{TG_GATE_LOG, 1e4f},     {TG_GATE_LOG, INFINITY},    {TG_GATE_LINEAR, 1e4f},
                               {TG_GATE_LINEAR, -1e4f}, {TG_GATE_LINEAR, INFINITY}, {TG_GATE_LINEAR, -INFINITY}};
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        for (const gate_value &gv : vals) {
            SCOPED_TRACE("mode " + std::to_string(mode) + " gate " + std::to_string(gv.gate) + " g " +
                         std::to_string(gv.g));
            delta_case c{"huge",
                         mode,
                         gv.gate,
                         true,
                         1.0f,
                         8,
                         6,
                         1,
                         2,
                         6,
                         2,
                         k_no_state,
                         gv.gate == TG_GATE_LOG ? -1.0f : 0.5f,
                         gv.gate == TG_GATE_LOG ? 0.0f : 1.0f,
                         0.0f,
                         1.0f};
            delta_data d = make_data(c, 29);
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t h = 0; h < c.Hv; h++) d.g[g_idx(c, h, 0, b)] = gv.g;
            if (gv.gate == TG_GATE_LINEAR && std::isfinite(gv.g))  // a finite linear gate later on, too
                for (int64_t b = 0; b < c.B; b++) d.g[g_idx(c, 1, 3, b)] = gv.g;
            delta_run run(d);
            ASSERT_EQ(run.compute(), TG_OK);
            EXPECT_TRUE(all_finite(sig::get_values(run.o)));
            check_run(d, run);
        }
}

// An overflowing gate on a nonzero state, a NaN gate or a NaN beta at
// (head 1, token 5, sequence 1): that head's outputs from token 5 on are
// non-finite (NaN for NaN inputs), every other output and state is exact.
TEST(DeltaRuleNumbers, OverflowAndNaNStayInTheirHead) {
    enum { overflow, nan_g, nan_beta };
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        for (tg_gate_kind gate : {TG_GATE_LINEAR, TG_GATE_LOG})
            for (int kind : {overflow, nan_g, nan_beta}) {
                if (kind == overflow && gate == TG_GATE_LINEAR) continue;  // a linear 1e4 does not overflow
                SCOPED_TRACE("mode " + std::to_string(mode) + " gate " + std::to_string(gate) + " kind " +
                             std::to_string(kind));
                delta_case c{"nan",
                             mode,
                             gate,
                             false,
                             1.0f,
                             8,
                             6,
                             1,
                             2,
                             10,
                             2,
                             TG_TYPE_F32,
                             gate == TG_GATE_LOG ? -1.0f : 0.5f,
                             gate == TG_GATE_LOG ? 0.0f : 1.0f,
                             0.0f,
                             1.0f};
                delta_data d = make_data(c, 31);
                const int64_t H = 1, Tb = 5, Bb = 1;
                if (kind == overflow) d.g[g_idx(c, H, Tb, Bb)] = 1e4f;
                if (kind == nan_g) d.g[g_idx(c, H, Tb, Bb)] = NAN;
                if (kind == nan_beta) d.beta[g_idx(c, H, Tb, Bb)] = NAN;
                delta_run run(d);
                ASSERT_EQ(run.compute(), TG_OK);
                std::vector<double> o_ref, s_ref;
                oracle(d, &o_ref, &s_ref);
                const std::vector<float> o = sig::get_values(run.o), s = sig::get_values(run.state);
                std::vector<double> o_rest, o_rest_ref, s_rest, s_rest_ref;
                int64_t hit_finite = 0, hit_not_nan = 0;
                for (int64_t b = 0; b < c.B; b++)
                    for (int64_t t = 0; t < c.T; t++)
                        for (int64_t h = 0; h < c.Hv; h++)
                            for (int64_t j = 0; j < c.Dv; j++) {
                                const size_t i = v_idx(c, j, h, t, b);
                                if (h == H && b == Bb && t >= Tb) {
                                    hit_finite += std::isfinite(o[i]);
                                    hit_not_nan += !std::isnan(o[i]);
                                } else {
                                    o_rest.push_back(o[i]);
                                    o_rest_ref.push_back(o_ref[i]);
                                }
                            }
                for (int64_t b = 0; b < c.B; b++)
                    for (int64_t h = 0; h < c.Hv; h++)
                        for (int64_t j = 0; j < c.Dv; j++)
                            for (int64_t i = 0; i < c.Dk; i++) {
                                const size_t x = s_idx(c, i, j, h, b);
                                if (h == H && b == Bb) {
                                    if (kind != overflow) hit_not_nan += !std::isnan(s[x]);
                                } else {
                                    s_rest.push_back(s[x]);
                                    s_rest_ref.push_back(s_ref[x]);
                                }
                            }
                EXPECT_EQ(hit_finite, 0);
                if (kind != overflow) {
                    EXPECT_EQ(hit_not_nan, 0) << "a NaN input must give NaN in its head";
                }
                EXPECT_LT(sig::rel_err(o_rest, o_rest_ref), 1e-5);
                EXPECT_LT(sig::rel_err(s_rest, s_rest_ref), 1e-5);
            }
}

// A NaN gate is reported even where the state is zero (a fresh sequence).
TEST(DeltaRuleNumbers, NaNGateOnZeroStateIsNaN) {
    for (tg_delta_mode mode : {TG_DELTA_GATED_LINEAR, TG_DELTA_GATED_DELTA})
        for (tg_gate_kind gate : {TG_GATE_LINEAR, TG_GATE_LOG}) {
            delta_case c{"nan0", mode, gate, true, 1.0f, 8, 6, 1, 2, 4, 2, k_no_state, 0.0f, 0.5f, 0.0f, 1.0f};
            delta_data d = make_data(c, 33);
            d.g[g_idx(c, 1, 0, 1)] = NAN;
            delta_run run(d);
            ASSERT_EQ(run.compute(), TG_OK);
            const std::vector<float> o = sig::get_values(run.o);
            int64_t nan_in_head = 0, nan_elsewhere = 0;
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t t = 0; t < c.T; t++)
                    for (int64_t h = 0; h < c.Hv; h++)
                        for (int64_t j = 0; j < c.Dv; j++)
                            (h == 1 && b == 1 ? nan_in_head : nan_elsewhere) += std::isnan(o[v_idx(c, j, h, t, b)]);
            EXPECT_EQ(nan_in_head, c.T * c.Dv) << "mode " << mode << " gate " << gate;
            EXPECT_EQ(nan_elsewhere, 0);
        }
}

// ---------------------------------------------------------------------------
// Bad arguments: "[delta_rule] ..." and the state untouched.

TEST(DeltaRuleBadInput, ConstructorRejectsBadArguments) {
    tgt::env e;
    auto t4 = [&](tg_type ty, int64_t a, int64_t b, int64_t c, int64_t d) {
        return tg_new_tensor_4d(e.ctx, ty, a, b, c, d);
    };
    auto t3 = [&](tg_type ty, int64_t a, int64_t b, int64_t c) { return tg_new_tensor_3d(e.ctx, ty, a, b, c); };
    // valid: Dk=8, Dv=4, Hk=2, Hv=4, T=3, B=2
    tg_tensor *q = t4(TG_TYPE_F32, 8, 2, 3, 2), *k = t4(TG_TYPE_F32, 8, 2, 3, 2), *v = t4(TG_TYPE_F32, 4, 4, 3, 2);
    tg_tensor *g = t3(TG_TYPE_F32, 4, 3, 2), *beta = t3(TG_TYPE_F32, 4, 3, 2);
    tg_tensor *state = t4(TG_TYPE_BF16, 8, 4, 4, 2), *state_f32 = t4(TG_TYPE_F32, 8, 4, 4, 2);
    tg_tensor *state_all = t4(TG_TYPE_F16, 8, 4, 4, 4);
    tg_tensor *q_i32 = t4(TG_TYPE_I32, 8, 2, 3, 2), *g_i32 = t3(TG_TYPE_I32, 4, 3, 2),
              *beta_f16 = t3(TG_TYPE_F16, 4, 3, 2);
    tg_tensor *v_i32 = t4(TG_TYPE_I32, 4, 4, 3, 2), *state_i32 = t4(TG_TYPE_I32, 8, 4, 4, 2);
    tg_tensor *q_h3 = t4(TG_TYPE_F32, 8, 3, 3, 2), *k_h3 = t4(TG_TYPE_F32, 8, 3, 3, 2);
    tg_tensor *q_257 = t4(TG_TYPE_F32, 257, 2, 3, 2), *k_257 = t4(TG_TYPE_F32, 257, 2, 3, 2);
    tg_tensor *v_257 = t4(TG_TYPE_F32, 257, 4, 3, 2), *k_T = t4(TG_TYPE_F32, 8, 2, 4, 2);
    tg_tensor *v_T = t4(TG_TYPE_F32, 4, 4, 4, 2), *v_B = t4(TG_TYPE_F32, 4, 4, 3, 1);
    tg_tensor *g_H = t3(TG_TYPE_F32, 3, 3, 2), *beta_T = t3(TG_TYPE_F32, 4, 2, 2), *g_4d = t4(TG_TYPE_F32, 4, 3, 2, 2);
    tg_tensor *state_B = t4(TG_TYPE_F32, 8, 4, 4, 1), *state_swap = t4(TG_TYPE_F32, 4, 8, 4, 2);
    ASSERT_NE(e.alloc(), nullptr);
    std::mt19937 rng(37);
    sig::set_values(state, sig::random_stored(rng, TG_TYPE_BF16, (size_t)tg_nelements(state)));
    sig::set_values(state_f32, tgt::random_floats(rng, (size_t)tg_nelements(state_f32)));
    tg_tensor *q_in_state = tg_view_4d(e.ctx, state_f32, 8, 2, 3, 2, 32, 64, 192, 0);
    tg_tensor *state_cont = tg_cont(e.ctx, state_f32);
    tg_tensor *state_view = tg_view_4d(e.ctx, state_all, 8, 4, 4, 2, tg_nb(state_all, 1), tg_nb(state_all, 2),
                                       tg_nb(state_all, 3), 2 * tg_nb(state_all, 3));
    ASSERT_TRUE(q_in_state && state_cont && state_view) << tg_last_error();
    const std::vector<uint8_t> before = sig::get_bytes(state), before_f32 = sig::get_bytes(state_f32);

    const tg_delta_params ok = {TG_DELTA_GATED_DELTA, TG_GATE_LOG, 0.5f, true, TG_DELTA_ALGO_AUTO};
    tg_delta_params s_nan = ok, s_inf = ok, mode5 = ok, gate9 = ok;
    s_nan.scale = NAN;
    s_inf.scale = -INFINITY;
    const int five = 5, nine = 9;  // stored as a C caller may (an out-of-range enum value)
    memcpy(&mode5.mode, &five, sizeof(int));
    memcpy(&gate9.gate, &nine, sizeof(int));
    struct bad {
        const char *what;
        tg_tensor *q, *k, *v, *g, *beta, *state;
        const tg_delta_params *p;
    };
    const bad cases[] = {
        {"q NULL", nullptr, k, v, g, beta, state, &ok},
        {"k NULL", q, nullptr, v, g, beta, state, &ok},
        {"v NULL", q, k, nullptr, g, beta, state, &ok},
        {"g NULL", q, k, v, nullptr, beta, state, &ok},
        {"beta NULL", q, k, v, g, nullptr, state, &ok},
        {"params NULL", q, k, v, g, beta, state, nullptr},
        {"q i32", q_i32, k, v, g, beta, state, &ok},
        {"v i32", q, k, v_i32, g, beta, state, &ok},
        {"g i32", q, k, v, g_i32, beta, state, &ok},
        {"beta f16", q, k, v, g, beta_f16, state, &ok},
        {"state i32", q, k, v, g, beta, state_i32, &ok},
        {"Hv % Hk != 0", q_h3, k_h3, v, g, beta, state, &ok},
        {"Dk 257", q_257, k_257, v, g, beta, nullptr, &ok},
        {"Dv 257", q, k, v_257, g, beta, nullptr, &ok},
        {"k shape != q", q, k_T, v, g, beta, state, &ok},
        {"v T differs", q, k, v_T, g, beta, state, &ok},
        {"v B differs", q, k, v_B, g, beta, state, &ok},
        {"g heads differ", q, k, v, g_H, beta, state, &ok},
        {"beta T differs", q, k, v, g, beta_T, state, &ok},
        {"g 4-D", q, k, v, g_4d, beta, state, &ok},
        {"state B differs", q, k, v, g, beta, state_B, &ok},
        {"state Dk, Dv swapped", q, k, v, g, beta, state_swap, &ok},
        {"scale NaN", q, k, v, g, beta, state, &s_nan},
        {"scale -inf", q, k, v, g, beta, state, &s_inf},
        {"unknown mode", q, k, v, g, beta, state, &mode5},
        {"unknown gate", q, k, v, g, beta, state, &gate9},
        {"state computed by the graph", q, k, v, g, beta, state_cont, &ok},
        {"q inside the state", q_in_state, k, v, g, beta, state_f32, &ok},
    };
    for (const bad &b : cases) {
        tg_tensor *t = tg_delta_rule(e.ctx, b.q, b.k, b.v, b.g, b.beta, b.state, b.p);
        EXPECT_EQ(t, nullptr) << b.what;
        EXPECT_TRUE(sig::starts_with(tg_last_error(), "[delta_rule] ")) << b.what << ": " << tg_last_error();
    }
    // the same arguments, fixed, are accepted (a view of a persistent state too)
    EXPECT_NE(tg_delta_rule(e.ctx, q, k, v, g, beta, state, &ok), nullptr) << tg_last_error();
    EXPECT_NE(tg_delta_rule(e.ctx, q, k, v, g, beta, nullptr, &ok), nullptr) << tg_last_error();
    EXPECT_NE(tg_delta_rule(e.ctx, q, k, v, g, beta, state_view, &ok), nullptr) << tg_last_error();
    tg_delta_params l2_byte = ok;  // a C caller's bool of byte value 2 reads as true
    const unsigned char two = 2;
    memcpy(&l2_byte.l2norm_qk, &two, 1);
    EXPECT_NE(tg_delta_rule(e.ctx, q, k, v, g, beta, nullptr, &l2_byte), nullptr) << tg_last_error();
    EXPECT_EQ(sig::get_bytes(state), before);
    EXPECT_EQ(sig::get_bytes(state_f32), before_f32);
}

// A state held in a larger persistent tensor (one slice per layer): only its
// slice is read and written.
TEST(DeltaRuleState, StateViewOfLayerSlice) {
    delta_case c{"slice", TG_DELTA_GATED_DELTA, TG_GATE_LOG, true, 1.0f, 16,  8, 2, 2, 7,
                 2,       TG_TYPE_F16,          -1.0f,       0.0f, 0.0f, 1.0f};
    delta_data d = make_data(c, 41);
    delta_run run(d);  // for the inputs; its own op is not computed
    tg_tensor *all = tg_new_tensor_4d(run.e.ctx, TG_TYPE_F16, c.Dk, c.Dv, c.Hv, 3 * c.B);  // 3 layers
    ASSERT_NE(run.e.alloc(), nullptr);
    std::mt19937 rng(42);
    std::vector<float> all_v = sig::random_stored(rng, TG_TYPE_F16, (size_t)tg_nelements(all), -0.5f, 0.5f);
    const size_t per_layer = d.s0.size();
    std::copy(d.s0.begin(), d.s0.end(), all_v.begin() + (long)per_layer);  // layer 1
    sig::set_values(all, all_v);
    tg_tensor *st = tg_view_4d(run.e.ctx, all, c.Dk, c.Dv, c.Hv, c.B, tg_nb(all, 1), tg_nb(all, 2), tg_nb(all, 3),
                               (size_t)c.B * tg_nb(all, 3));
    tg_tensor *o = tg_delta_rule(run.e.ctx, run.q, run.k, run.v, run.g, run.beta, st, &run.dp);
    ASSERT_NE(o, nullptr) << tg_last_error();
    ASSERT_EQ(sig::compute(run.e.ctx, run.e.cpu, o), TG_OK) << tg_last_error();
    std::vector<double> o_ref, s_ref;
    oracle(d, &o_ref, &s_ref);
    EXPECT_LT(sig::rel_err(sig::to_double(sig::get_values(o)), o_ref), 1e-5);
    const std::vector<float> after = sig::get_values(all);
    std::vector<double> s_out(after.begin() + (long)per_layer, after.begin() + (long)(2 * per_layer)), rounded;
    for (double x : s_ref) rounded.push_back(sig::round_to(TG_TYPE_F16, x));
    EXPECT_LE(sig::rel_err(s_out, s_ref), 1.01 * sig::rel_err(rounded, s_ref) + 1e-5);
    EXPECT_TRUE(std::equal(after.begin(), after.begin() + (long)per_layer, all_v.begin())) << "layer 0 written";
    EXPECT_TRUE(std::equal(after.begin() + (long)(2 * per_layer), after.end(), all_v.begin() + (long)(2 * per_layer)))
        << "layer 2 written";
}

}  // namespace
