// test_delta_rule_chunked.cpp - the chunked form of delta_rule on the CPU
// (algo CHUNKED, ggml_ops/delta_rule_chunked.cpp) against a float64 oracle of
// the scan's definition and against the scan itself: chunk edges (T 1, 63,
// 64, 65, 130), head dims 16/24/64/128, grouped value heads, Dk != Dv, log
// gates down to -30, zero and negative LINEAR gates, -inf LOG gates, beta 0
// and 1, F16/BF16 q/k/v, F16/BF16 o, and state chaining across calls split anywhere.
// Shapes stay small: the whole file runs in about a second (ASan included).
#include <algorithm>

#include "sig_util.h"

namespace {

struct ck_case {
    std::string name;
    tg_delta_mode mode;
    tg_gate_kind gate;
    bool l2norm;
    int64_t Dk, Dv, Hk, Hv, T, B;
    bool state;
    float g_lo, g_hi, beta_lo, beta_hi;
    tg_type io = TG_TYPE_F32;  // type of q, k, v
    int zero_gates = 0;        // how many gates (random positions) to set to exactly 0 / -inf
};
void PrintTo(const ck_case &c, std::ostream *os) { *os << c.name; }

struct ck_data {
    ck_case c;
    float scale;
    std::vector<float> q, k, v, g, beta, s0;  // ne order, contiguous; q/k/v representable in c.io
};

ck_data make_ck(const ck_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    ck_data d;
    d.c = c;
    d.scale = (float)(1.0 / std::sqrt((double)c.Dk));
    const float qk = c.l2norm ? 1.0f : (float)(1.0 / std::sqrt((double)c.Dk));
    d.q = sig::random_stored(rng, c.io, (size_t)(c.Dk * c.Hk * c.T * c.B), -qk, qk);
    d.k = sig::random_stored(rng, c.io, d.q.size(), -qk, qk);
    d.v = sig::random_stored(rng, c.io, (size_t)(c.Dv * c.Hv * c.T * c.B));
    d.g = tgt::random_floats(rng, (size_t)(c.Hv * c.T * c.B), c.g_lo, c.g_hi);
    d.beta = tgt::random_floats(rng, d.g.size(), c.beta_lo, c.beta_hi);
    for (int z = 0; z < c.zero_gates; z++)
        d.g[rng() % d.g.size()] = c.gate == TG_GATE_LOG ? -INFINITY : 0.0f;
    if (c.state) d.s0 = tgt::random_floats(rng, (size_t)(c.Dk * c.Dv * c.Hv * c.B), -0.5f, 0.5f);
    return d;
}

// float64 oracle of the scan's definition (src/tinygml.h), from t0 for n tokens on S (Dk x Dv per head).
void oracle(const ck_data &d, std::vector<double> &o, std::vector<double> &S) {
    const ck_case &c = d.c;
    o.assign((size_t)(c.Dv * c.Hv * c.T * c.B), 0.0);
    S.assign((size_t)(c.Dk * c.Dv * c.Hv * c.B), 0.0);
    if (c.state) std::copy(d.s0.begin(), d.s0.end(), S.begin());
    std::vector<double> q((size_t)c.Dk), k((size_t)c.Dk), u((size_t)c.Dv);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t h = 0; h < c.Hv; h++) {
            double *Sh = &S[(size_t)((b * c.Hv + h) * c.Dk * c.Dv)];  // S[i][j] at i + j*Dk
            const int64_t hk = h / (c.Hv / c.Hk);
            for (int64_t t = 0; t < c.T; t++) {
                double nq = 0, nk = 0;
                for (int64_t i = 0; i < c.Dk; i++) {
                    q[i] = d.q[(size_t)(i + c.Dk * (hk + c.Hk * (t + c.T * b)))];
                    k[i] = d.k[(size_t)(i + c.Dk * (hk + c.Hk * (t + c.T * b)))];
                    nq += q[i] * q[i], nk += k[i] * k[i];
                }
                for (int64_t i = 0; c.l2norm && i < c.Dk; i++) q[i] /= std::sqrt(nq + 1e-6), k[i] /= std::sqrt(nk + 1e-6);
                const size_t gi = (size_t)(h + c.Hv * (t + c.T * b));
                const double a = c.gate == TG_GATE_LOG ? std::exp((double)d.g[gi]) : d.g[gi], be = d.beta[gi];
                for (int64_t j = 0; j < c.Dv; j++) {
                    double *col = Sh + j * c.Dk, sk = 0;
                    for (int64_t i = 0; i < c.Dk; i++) col[i] = col[i] == 0.0 ? 0.0 : a * col[i], sk += col[i] * k[i];
                    const double vj = d.v[(size_t)(j + c.Dv * (h + c.Hv * (t + c.T * b)))];
                    u[j] = c.mode == TG_DELTA_GATED_DELTA ? be * (vj - sk) : be * vj;
                }
                for (int64_t j = 0; j < c.Dv; j++) {
                    double *col = Sh + j * c.Dk, y = 0;
                    for (int64_t i = 0; i < c.Dk; i++) col[i] += k[i] * u[j], y += col[i] * q[i];
                    o[(size_t)(j + c.Dv * (h + c.Hv * (t + c.T * b)))] = d.scale * y;
                }
            }
        }
}

// The op on the CPU with the given algo: o, and the final state (when c.state).
void run_cpu(const ck_data &d, tg_delta_algo algo, std::vector<float> &o, std::vector<float> &s_out) {
    const ck_case &c = d.c;
    tgt::env e(32 << 20, 2);
    tg_tensor *q = tg_new_tensor_4d(e.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
    tg_tensor *k = tg_new_tensor_4d(e.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
    tg_tensor *v = tg_new_tensor_4d(e.ctx, c.io, c.Dv, c.Hv, c.T, c.B);
    tg_tensor *g = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *beta = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *st = c.state ? tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.Dk, c.Dv, c.Hv, c.B) : nullptr;
    const tg_delta_params dp = {c.mode, c.gate, d.scale, c.l2norm, algo};
    tg_tensor *out = tg_delta_rule(e.ctx, q, k, v, g, beta, st, &dp);
    ASSERT_NE(out, nullptr) << tg_last_error();
    ASSERT_NE(e.alloc(), nullptr) << tg_last_error();
    sig::set_values(q, d.q), sig::set_values(k, d.k), sig::set_values(v, d.v);
    sig::set_values(g, d.g), sig::set_values(beta, d.beta);
    if (st) sig::set_values(st, d.s0);
    ASSERT_EQ(sig::compute(e.ctx, e.cpu, out), TG_OK) << tg_last_error();
    o = sig::get_values(out);
    if (st) s_out = sig::get_values(st);
}

struct DeltaChunked : ::testing::TestWithParam<ck_case> {};

TEST_P(DeltaChunked, MatchesOracleAndScan) {
    const ck_case c = GetParam();
    const ck_data d = make_ck(c, 101 + (uint32_t)(c.T * 7 + c.Dk));
    std::vector<float> oc, sc, os, ss;
    run_cpu(d, TG_DELTA_ALGO_CHUNKED, oc, sc);
    run_cpu(d, TG_DELTA_ALGO_SCAN, os, ss);
    std::vector<double> oref, sref;
    oracle(d, oref, sref);
    const double e_o = sig::rel_err(sig::to_double(oc), oref);
    EXPECT_LT(e_o, 2e-5) << "chunked o vs float64 oracle (scan vs oracle " << sig::rel_err(sig::to_double(os), oref)
                         << ")";
    EXPECT_LT(sig::rel_err(sig::to_double(oc), sig::to_double(os)), 2e-5) << "chunked o vs the scan";
    if (!c.state) return;
    // the oracle's S is [i + j*Dk] per head, as the state tensor
    EXPECT_LT(sig::rel_err(sig::to_double(sc), sref), 2e-5) << "chunked final state vs float64 oracle";
    EXPECT_LT(sig::rel_err(sig::to_double(sc), sig::to_double(ss)), 2e-5) << "chunked final state vs the scan";
}

const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
const tg_gate_kind LIN = TG_GATE_LINEAR, LOG = TG_GATE_LOG;

std::vector<ck_case> ck_cases() {
    std::vector<ck_case> v;
    for (int64_t T : {1, 63, 64, 65, 130})
        v.push_back({"gdn_D64_T" + std::to_string(T), GD, LOG, true, 64, 64, 1, 2, T, 2, true, -0.3f, 0.0f, 0.0f, 1.0f});
    for (int64_t D : {16, 24, 128}) {
        v.push_back({"gdn_D" + std::to_string(D), GD, LOG, true, D, D, 1, 1, 70, 1, true, -0.3f, 0.0f, 0.0f, 1.0f});
        v.push_back({"gla_D" + std::to_string(D), GL, LOG, false, D, D, 1, 1, 70, 1, true, -0.3f, 0.0f, 0.0f, 1.0f});
    }
    v.push_back({"gdn_Dk24_Dv40_Hv4Hk2", GD, LOG, true, 24, 40, 2, 4, 67, 2, true, -0.5f, 0.0f, 0.0f, 1.0f});
    v.push_back({"gdn_Dk64_Dv16_no_state", GD, LOG, true, 64, 16, 1, 3, 129, 1, false, -0.5f, 0.0f, 0.0f, 1.0f});
    v.push_back({"gdn_log_gates_to_-30", GD, LOG, true, 32, 32, 1, 2, 130, 1, true, -30.0f, 0.0f, 0.0f, 1.0f});
    v.push_back({"gla_log_gates_to_-30", GL, LOG, true, 32, 32, 1, 2, 130, 1, true, -30.0f, 0.0f, 0.0f, 1.0f});
    v.push_back({"gdn_beta_0", GD, LOG, true, 32, 32, 1, 1, 80, 1, true, -0.2f, 0.0f, 0.0f, 0.0f});
    v.push_back({"gdn_beta_1", GD, LOG, true, 32, 32, 1, 1, 80, 1, true, -0.2f, 0.0f, 1.0f, 1.0f});
    v.push_back({"gdn_linear_gates", GD, LIN, false, 32, 24, 1, 2, 100, 1, true, 0.8f, 1.0f, 0.0f, 1.0f});
    v.push_back({"gdn_linear_negative_gates", GD, LIN, true, 32, 24, 1, 2, 100, 1, true, -1.0f, 1.0f, 0.0f, 1.0f});
    v.push_back({"gla_linear_zero_gates", GL, LIN, false, 24, 24, 2, 2, 130, 2, true, 0.7f, 1.0f, 0.0f, 1.0f, TG_TYPE_F32, 9});
    v.push_back({"gdn_linear_zero_gates", GD, LIN, true, 24, 24, 2, 2, 130, 2, true, 0.7f, 1.0f, 0.0f, 1.0f, TG_TYPE_F32, 9});
    v.push_back({"gdn_log_-inf_gates", GD, LOG, true, 24, 24, 1, 2, 130, 2, true, -0.2f, 0.0f, 0.0f, 1.0f, TG_TYPE_F32, 7});
    v.push_back({"gdn_f16_io", GD, LOG, true, 64, 64, 1, 2, 70, 1, true, -0.3f, 0.0f, 0.0f, 1.0f, TG_TYPE_F16});
    v.push_back({"gla_bf16_io", GL, LOG, false, 64, 48, 1, 2, 70, 1, true, -0.3f, 0.0f, 0.0f, 1.0f, TG_TYPE_BF16});
    v.push_back({"gdn_D256_T65", GD, LOG, true, 256, 256, 1, 1, 65, 1, true, -0.3f, 0.0f, 0.0f, 1.0f});
    return v;
}
INSTANTIATE_TEST_SUITE_P(Cpu, DeltaChunked, ::testing::ValuesIn(ck_cases()),
                         [](const ::testing::TestParamInfo<ck_case> &i) {
                             std::string s = i.param.name;
                             for (char &ch : s)
                                 if (!isalnum((unsigned char)ch)) ch = '_';
                             return s;
                         });

// T split at any point equals one call: output and final state (F32 state).
TEST(DeltaChunkedState, SplitCallsEqualOneCall) {
    const ck_case c = {"split", GD, LOG, true, 24, 32, 1, 2, 130, 2, true, -0.4f, 0.0f, 0.0f, 1.0f};
    const ck_data d = make_ck(c, 5);
    std::vector<float> o_all, s_all;
    run_cpu(d, TG_DELTA_ALGO_CHUNKED, o_all, s_all);
    for (int64_t cut : {1, 37, 64, 100, 129}) {
        SCOPED_TRACE("cut at " + std::to_string(cut));
        ck_data a = d, b = d;
        a.c.T = cut, b.c.T = c.T - cut;
        auto part = [&](const std::vector<float> &x, int64_t per_tok, int64_t t0, int64_t n) {
            std::vector<float> y;
            for (int64_t bb = 0; bb < c.B; bb++) {
                const float *p = &x[(size_t)((bb * c.T + t0) * per_tok)];
                y.insert(y.end(), p, p + n * per_tok);
            }
            return y;
        };
        const int64_t nqk = c.Dk * c.Hk, nv = c.Dv * c.Hv;
        a.q = part(d.q, nqk, 0, cut), a.k = part(d.k, nqk, 0, cut), a.v = part(d.v, nv, 0, cut);
        a.g = part(d.g, c.Hv, 0, cut), a.beta = part(d.beta, c.Hv, 0, cut);
        b.q = part(d.q, nqk, cut, b.c.T), b.k = part(d.k, nqk, cut, b.c.T), b.v = part(d.v, nv, cut, b.c.T);
        b.g = part(d.g, c.Hv, cut, b.c.T), b.beta = part(d.beta, c.Hv, cut, b.c.T);
        std::vector<float> oa, sa, ob, sb;
        run_cpu(a, TG_DELTA_ALGO_CHUNKED, oa, sa);
        b.s0 = sa;
        run_cpu(b, TG_DELTA_ALGO_CHUNKED, ob, sb);
        std::vector<float> o_split;
        for (int64_t bb = 0; bb < c.B; bb++) {
            o_split.insert(o_split.end(), oa.begin() + bb * cut * nv, oa.begin() + (bb + 1) * cut * nv);
            o_split.insert(o_split.end(), ob.begin() + bb * b.c.T * nv, ob.begin() + (bb + 1) * b.c.T * nv);
        }
        EXPECT_LT(sig::rel_err(sig::to_double(o_split), sig::to_double(o_all)), 1e-5) << "outputs";
        EXPECT_LT(sig::rel_err(sig::to_double(sb), sig::to_double(s_all)), 1e-5) << "final state";
    }
}

// A NaN input reaches the chunked outputs of its own head and sequence only.
TEST(DeltaChunkedNumbers, NaNStaysInItsHead) {
    const ck_case c = {"nan", GD, LOG, true, 16, 16, 2, 2, 70, 2, true, -0.3f, 0.0f, 0.0f, 1.0f};
    ck_data d = make_ck(c, 9);
    d.v[(size_t)(3 + c.Dv * (1 + c.Hv * (66 + c.T * 1)))] = NAN;  // head 1, token 66, sequence 1
    std::vector<float> o, s;
    run_cpu(d, TG_DELTA_ALGO_CHUNKED, o, s);
    int nan_other = 0, nan_here = 0;
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t t = 0; t < c.T; t++)
            for (int64_t h = 0; h < c.Hv; h++)
                for (int64_t j = 0; j < c.Dv; j++) {
                    const bool nan = std::isnan(o[(size_t)(j + c.Dv * (h + c.Hv * (t + c.T * b)))]);
                    if (b == 1 && h == 1 && t >= 66) nan_here += nan;
                    else nan_other += nan;
                }
    EXPECT_GT(nan_here, 0);
    EXPECT_EQ(nan_other, 0);
}

// F16 / BF16 o (params out_type), scan and chunked: the F32 sums rounded once at the store, so
// within the type's rounding of the float64 oracle; an out_type outside F32/F16/BF16 is refused.
TEST(DeltaChunkedNumbers, SixteenBitOutput) {
    const ck_case c = {"o16", GD, LOG, true, 32, 24, 1, 2, 130, 2, true, -0.3f, 0.0f, 0.0f, 1.0f};
    const ck_data d = make_ck(c, 77);
    std::vector<double> oref, sref;
    oracle(d, oref, sref);
    for (tg_delta_algo algo : {TG_DELTA_ALGO_SCAN, TG_DELTA_ALGO_CHUNKED})
        for (tg_type ot : {TG_TYPE_F16, TG_TYPE_BF16}) {
            SCOPED_TRACE(std::string(tg_type_name(ot)) + (algo == TG_DELTA_ALGO_SCAN ? " scan" : " chunked"));
            tgt::env e(32 << 20, 2);
            tg_tensor *q = tg_new_tensor_4d(e.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
            tg_tensor *k = tg_new_tensor_4d(e.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
            tg_tensor *v = tg_new_tensor_4d(e.ctx, c.io, c.Dv, c.Hv, c.T, c.B);
            tg_tensor *g = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
            tg_tensor *beta = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
            tg_tensor *st = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, c.Dk, c.Dv, c.Hv, c.B);
            const tg_delta_params dp = {c.mode, c.gate, d.scale, c.l2norm, algo, ot};
            tg_tensor *out = tg_delta_rule(e.ctx, q, k, v, g, beta, st, &dp);
            ASSERT_NE(out, nullptr) << tg_last_error();
            EXPECT_EQ(tg_tensor_type(out), ot);
            ASSERT_NE(e.alloc(), nullptr) << tg_last_error();
            sig::set_values(q, d.q), sig::set_values(k, d.k), sig::set_values(v, d.v);
            sig::set_values(g, d.g), sig::set_values(beta, d.beta), sig::set_values(st, d.s0);
            ASSERT_EQ(sig::compute(e.ctx, e.cpu, out), TG_OK) << tg_last_error();
            const std::vector<float> o = sig::get_values(out), s = sig::get_values(st);
            EXPECT_LT(sig::rel_err(sig::to_double(o), oref), ot == TG_TYPE_BF16 ? 4e-3 : 5e-4) << "o";
            EXPECT_LT(sig::rel_err(sig::to_double(s), sref), 2e-5) << "state (F32)";
            int off_grid = 0;  // every value is one of the type's
            for (float x : o) {
                const float r = ot == TG_TYPE_F16 ? tg_fp16_to_fp32(tg_fp32_to_fp16(x)) : tg_bf16_to_fp32(tg_fp32_to_bf16(x));
                off_grid += !(r == x);
            }
            EXPECT_EQ(off_grid, 0);
        }
    tgt::env e(1 << 20, 1);
    tg_tensor *q = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1), *k = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1);
    tg_tensor *v = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1);
    tg_tensor *g = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, 1, 4, 1), *beta = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, 1, 4, 1);
    for (tg_type bad : {TG_TYPE_I32, TG_TYPE_Q8_0}) {
        const tg_delta_params dp = {GD, LOG, 1.0f, true, TG_DELTA_ALGO_AUTO, bad};
        EXPECT_EQ(tg_delta_rule(e.ctx, q, k, v, g, beta, nullptr, &dp), nullptr);
        EXPECT_NE(std::string(tg_last_error()).find("out_type"), std::string::npos) << tg_last_error();
    }
}

TEST(DeltaChunkedBadInput, UnknownAlgoRejected) {
    tgt::env e(1 << 20, 1);
    tg_tensor *q = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1), *k = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1);
    tg_tensor *v = tg_new_tensor_4d(e.ctx, TG_TYPE_F32, 8, 1, 4, 1);
    tg_tensor *g = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, 1, 4, 1), *beta = tg_new_tensor_3d(e.ctx, TG_TYPE_F32, 1, 4, 1);
    tg_delta_params dp = {GD, LOG, 1.0f, true, TG_DELTA_ALGO_AUTO};
    memset(&dp.algo, 0x7f, sizeof(dp.algo));
    EXPECT_EQ(tg_delta_rule(e.ctx, q, k, v, g, beta, nullptr, &dp), nullptr);
    EXPECT_NE(std::string(tg_last_error()).find("unknown algo"), std::string::npos) << tg_last_error();
    // g must stay F32 even though q/k/v may be 16-bit
    tg_tensor *g16 = tg_new_tensor_3d(e.ctx, TG_TYPE_F16, 1, 4, 1);
    dp.algo = TG_DELTA_ALGO_CHUNKED;
    EXPECT_EQ(tg_delta_rule(e.ctx, q, k, v, g16, beta, nullptr, &dp), nullptr);
}

}  // namespace
