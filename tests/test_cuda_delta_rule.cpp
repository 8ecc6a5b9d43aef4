// test_cuda_delta_rule.cpp - delta_rule on CUDA against the CPU backend and
// a float64 oracle (helpers and conventions in cuda_sig_util.h).
#include "cuda_sig_util.h"

namespace {

// ===========================================================================
// delta_rule

struct dr_case {
    const char *name;
    int B, T, Hk, Hv, Dk, Dv;
    tg_delta_mode mode;
    tg_gate_kind gate;
    bool l2norm;
    int state;   // -1: no state, else a tg_type
    int layout;  // LAY_CONTIG; LAY_UNALIGNED: state view off by one element (scalar path), q/k/v cut from one
                 // fused qkv tensor; LAY_SCALAR: forced scalar state path
    int tpc;     // tg_cuda_sig.delta_tpc
    int kern;    // tg_cuda_sig.delta_kernel: 0 auto, 1 chunk, 2 decode, 3 decode-reg
    // the scan kernels are what this file tests (the chunked tensor path: test_cuda_delta_chunked.cpp)
    tg_delta_algo algo = TG_DELTA_ALGO_SCAN;
};
void PrintTo(const dr_case &c, std::ostream *os) { *os << c.name; }

struct dr_data {
    dr_case c;
    float scale;
    std::vector<float> q, k, v, g, beta, s0;  // logical layouts; s0: {Dk, Dv, Hv, B}
    placed ps;
    store st0;
};

dr_data make_dr(const dr_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    dr_data d;
    d.c = c;
    d.scale = 1.0f / std::sqrt((float)c.Dk);
    const size_t nq = (size_t)c.Dk * c.Hk * c.T * c.B, nv = (size_t)c.Dv * c.Hv * c.T * c.B, ng = (size_t)c.Hv * c.T * c.B;
    d.q = tgt::random_floats(rng, nq), d.k = tgt::random_floats(rng, nq), d.v = tgt::random_floats(rng, nv);
    // the delta rule is stable for beta |k|^2 < 2: scale k when it is not normalized
    if (c.mode == TG_DELTA_GATED_DELTA && !c.l2norm)
        for (auto &x : d.k) x /= std::sqrt((float)c.Dk);
    d.g = c.gate == TG_GATE_LOG ? tgt::random_floats(rng, ng, -0.15f, 0.0f) : tgt::random_floats(rng, ng, 0.85f, 1.0f);
    d.beta = tgt::random_floats(rng, ng, 0.0f, 1.0f);
    const int64_t off = c.layout == LAY_UNALIGNED ? 1 : 0;
    d.ps = place(c.state < 0 ? TG_TYPE_F32 : (tg_type)c.state, c.Dk, c.Dv, c.Hv, c.B, off, off);
    d.st0 = store(d.ps.type, d.ps.total);
    const auto r = tgt::random_floats(rng, d.ps.total, -0.5f, 0.5f);
    for (size_t i = 0; i < r.size(); i++) d.st0.set(i, r[i]);
    d.s0.resize((size_t)c.Dk * c.Dv * c.Hv * c.B);
    size_t n = 0;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++)
            for (int j = 0; j < c.Dv; j++)
                for (int i = 0; i < c.Dk; i++) d.s0[n++] = d.st0.get(d.ps.at(i, j, h, b));
    return d;
}

// o and the state's backing after the op on be.
void run_dr(tg_backend *be, const dr_data &d, std::vector<float> &o, store &st) {
    const dr_case &c = d.c;
    built x;
    tg_tensor *q, *k, *v, *qkv = nullptr, *tq = nullptr, *tk = nullptr, *tv = nullptr;
    const int64_t row = 2 * (int64_t)c.Dk * c.Hk + (int64_t)c.Dv * c.Hv;  // fused qkv row (per token)
    if (c.layout == LAY_UNALIGNED) {
        qkv = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, row, c.T, c.B);
        const size_t n2 = row * 4, n3 = n2 * c.T;
        q = tg_view_4d(x.ctx, qkv, c.Dk, c.Hk, c.T, c.B, c.Dk * 4, n2, n3, 0);
        k = tg_view_4d(x.ctx, qkv, c.Dk, c.Hk, c.T, c.B, c.Dk * 4, n2, n3, (size_t)c.Dk * c.Hk * 4);
        v = tg_view_4d(x.ctx, qkv, c.Dv, c.Hv, c.T, c.B, c.Dv * 4, n2, n3, (size_t)2 * c.Dk * c.Hk * 4);
    } else {
        q = tq = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        k = tk = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        v = tv = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dv, c.Hv, c.T, c.B);
    }
    tg_tensor *g = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *beta = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *sb = c.state >= 0 ? tg_new_tensor_1d(x.ctx, d.ps.type, d.ps.total) : nullptr;
    const tg_delta_params dp = {c.mode, c.gate, d.scale, c.l2norm, c.algo};
    tg_tensor *out = tg_delta_rule(x.ctx, q, k, v, g, beta, sb ? view_of(x.ctx, sb, d.ps) : nullptr, &dp);
    ASSERT_NE(out, nullptr) << tg_last_error();
    x.g = tg_graph_new(x.ctx);
    tg_graph_expand(x.g, out);
    x.buf = tg_backend_alloc(be, x.ctx);
    ASSERT_NE(x.buf, nullptr) << tg_last_error();
    if (qkv) {
        std::vector<float> f((size_t)row * c.T * c.B);
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < c.T; t++) {
                float *dst = &f[((size_t)b * c.T + t) * row];
                const size_t nqk = (size_t)c.Dk * c.Hk, nvv = (size_t)c.Dv * c.Hv, tok = (size_t)b * c.T + t;
                memcpy(dst, &d.q[tok * nqk], nqk * 4), memcpy(dst + nqk, &d.k[tok * nqk], nqk * 4);
                memcpy(dst + 2 * nqk, &d.v[tok * nvv], nvv * 4);
            }
        x.set(qkv, f.data());
    } else {
        x.set(tq, d.q.data()), x.set(tk, d.k.data()), x.set(tv, d.v.data());
    }
    x.set(g, d.g.data()), x.set(beta, d.beta.data());
    // compute, poison the intermediates, restore the state, compute again
    if (sb) x.set(sb, d.st0.b.data());
    ASSERT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    poison_compute_buffer(be);
    if (sb) x.set(sb, d.st0.b.data());
    ASSERT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    o.resize((size_t)c.Dv * c.Hv * c.T * c.B);
    x.get(out, o.data());
    st = store(d.ps.type, d.ps.total);
    if (sb) x.get(sb, st.b.data());
}

// Float64 oracle, straight from DESIGN.md, to tell a CPU fault from a GPU one.
void oracle_dr(const dr_data &d, std::vector<double> &o, std::vector<double> &sf) {
    const dr_case &c = d.c;
    o.assign((size_t)c.Dv * c.Hv * c.T * c.B, 0.0), sf.assign((size_t)c.Dk * c.Dv * c.Hv * c.B, 0.0);
    std::vector<double> S((size_t)c.Dk * c.Dv), q(c.Dk), k(c.Dk), u(c.Dv);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            const int hk = h / (c.Hv / c.Hk);
            for (size_t e = 0; e < S.size(); e++) S[e] = c.state >= 0 ? d.s0[((size_t)b * c.Hv + h) * S.size() + e] : 0.0;
            for (int t = 0; t < c.T; t++) {
                const size_t tok = (size_t)b * c.T + t, gi = tok * c.Hv + h;
                double nq = 0, nk = 0;
                for (int i = 0; i < c.Dk; i++) {
                    q[i] = d.q[(tok * c.Hk + hk) * c.Dk + i], k[i] = d.k[(tok * c.Hk + hk) * c.Dk + i];
                    nq += q[i] * q[i], nk += k[i] * k[i];
                }
                for (int i = 0; c.l2norm && i < c.Dk; i++) q[i] /= std::sqrt(nq + 1e-6), k[i] /= std::sqrt(nk + 1e-6);
                const double a = c.gate == TG_GATE_LOG ? std::exp((double)d.g[gi]) : d.g[gi], be = d.beta[gi];
                const float *vt = &d.v[(tok * c.Hv + h) * c.Dv];
                for (int j = 0; j < c.Dv; j++) {
                    double *col = &S[(size_t)j * c.Dk], dot = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] *= a, dot += col[i] * k[i];
                    u[j] = c.mode == TG_DELTA_GATED_DELTA ? be * (vt[j] - dot) : be * vt[j];
                    double y = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] += k[i] * u[j], y += col[i] * q[i];
                    o[(tok * c.Hv + h) * c.Dv + j] = d.scale * y;
                }
            }
            std::copy(S.begin(), S.end(), sf.begin() + ((size_t)b * c.Hv + h) * S.size());
        }
}

struct CudaSigDeltaRule : CudaSig, ::testing::WithParamInterface<dr_case> {};

TEST_P(CudaSigDeltaRule, MatchesCpu) {
    const dr_case &c = GetParam();
    const dr_data d = make_dr(c, 4321 + c.Dk * 3 + c.T);
    std::vector<float> oc, og;
    store sc, sg;
    run_dr(cpu, d, oc, sc);
    {
        knobs k(0, 0, c.tpc, c.layout == LAY_SCALAR, c.kern);
        run_dr(gpu, d, og, sg);
    }
    std::vector<double> oref, sref;
    oracle_dr(d, oref, sref);
    const double e_cpu = tgt::rel_error(og, std::vector<double>(oc.begin(), oc.end()));
    EXPECT_LT(e_cpu, 1e-4) << "o: GPU vs CPU (GPU vs float64 oracle " << tgt::rel_error(og, oref)
                           << ", CPU vs oracle " << tgt::rel_error(oc, oref) << ")";
    EXPECT_LT(tgt::rel_error(og, oref), 1e-4) << "o: GPU vs float64 oracle";
    if (c.state < 0) return;
    // final state: written elements vs the CPU; every other byte unchanged
    std::vector<char> in(d.ps.total, 0);
    std::vector<float> gs, cs;
    int bad_ulp = 0;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++)
            for (int j = 0; j < c.Dv; j++)
                for (int i = 0; i < c.Dk; i++) {
                    const int64_t e = d.ps.at(i, j, h, b);
                    in[e] = 1;
                    gs.push_back(sg.get(e)), cs.push_back(sc.get(e));
                    if (d.ps.type != TG_TYPE_F32 && std::abs(sg.ulp16(e) - sc.ulp16(e)) > 1) bad_ulp++;
                }
    EXPECT_LT(tgt::rel_error(gs, std::vector<double>(cs.begin(), cs.end())), d.ps.type == TG_TYPE_F32 ? 1e-4 : 1e-2)
        << "final state: GPU vs CPU (GPU vs oracle " << tgt::rel_error(gs, sref) << ")";
    EXPECT_EQ(bad_ulp, 0) << "final state: elements more than 1 ulp of the storage type from the CPU";
    const size_t es = tg_type_size(d.ps.type);
    int64_t changed = 0;
    for (int64_t e = 0; e < d.ps.total; e++)
        if (!in[e]) changed += memcmp(&sg.b[e * es], &d.st0.b[e * es], es) != 0;
    EXPECT_EQ(changed, 0) << "GPU wrote outside the state (gaps or sentinel)";
}

const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
const tg_gate_kind LIN = TG_GATE_LINEAR, LOG = TG_GATE_LOG;

std::vector<dr_case> dr_cases() {
    const int Tl = S(512, 48), Bd = S(4, 2);
    return {
        {"gla_seed", 4, 64, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 0},
        {"gla_seed_tpc4", 4, 64, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 4},
        {"gdn_D48_tpc8_state", 2, 19, 2, 2, 48, 40, GD, LOG, true, F32, LAY_CONTIG, 8},
        {"gla_D32_tpc8_decode_kernel", 2, 7, 2, 2, 32, 32, GL, LOG, false, BF16, LAY_CONTIG, 8, 2},
        {"gla_seed_B1_T1", 1, 1, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 0},
        {"gdn_decode_scaled", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_tpc8", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8},
        {"gdn_prefill_long", 2, Tl, 1, 2, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_prefill_long_tpc4", 1, Tl, 1, 1, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 4},
        {"gla_prefill_long_state", 2, Tl, 2, 2, 64, 64, GL, LOG, false, F32, LAY_CONTIG, 0},
        {"gdn_64_no_l2norm_linear_gate", 2, 40, 2, 4, 64, 64, GD, LIN, false, F32, LAY_CONTIG, 0},
        {"gdn_Hv2Hk_D80", 2, 17, 2, 4, 80, 80, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gla_Hv2Hk_D40", 3, 9, 1, 2, 40, 40, GL, LIN, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk100_Dv40", 2, 33, 2, 2, 100, 40, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk24_Dv200", 1, 12, 1, 2, 24, 200, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk256_Dv256", 1, 9, 1, 1, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gla_Dk3_Dv5_scalar", 2, 7, 1, 3, 3, 5, GL, LOG, false, F32, LAY_CONTIG, 0},
        {"gdn_Dk1_Dv1", 2, 5, 1, 1, 1, 1, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_f16_state", 2, 20, 2, 2, 128, 128, GD, LOG, true, F16, LAY_CONTIG, 0},
        {"gla_bf16_state_D64", 2, 20, 2, 4, 64, 64, GL, LIN, false, BF16, LAY_CONTIG, 0},
        {"gdn_unaligned_state_fused_qkv", 2, 11, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0},
        {"gdn_bf16_unaligned_state", 2, 11, 2, 2, 128, 64, GD, LOG, true, BF16, LAY_UNALIGNED, 0},
        {"gdn_forced_scalar_state", 2, 11, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0},
        {"gla_no_state_D128", 2, 30, 2, 2, 128, 128, GL, LOG, true, -1, LAY_CONTIG, 0},
        // the decode kernels (auto at T == 1) forced at any T, and the chunk kernel at T == 1
        {"gdn_decode_chunk_kernel", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 1},
        {"gdn_decode_reg_kernel", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 3},
        {"gdn_decode_D64_Hv2Hk", 3, 1, 2, 4, 64, 64, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk100_Dv40", 2, 1, 2, 2, 100, 40, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk256_Dv256", 1, 1, 1, 2, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk24_Dv200_bf16", 2, 1, 1, 2, 24, 200, GD, LOG, true, BF16, LAY_CONTIG, 0},
        {"gla_decode_f16_state_no_l2", 2, 1, 2, 2, 64, 48, GL, LIN, false, F16, LAY_CONTIG, 0},
        {"gdn_decode_unaligned_state", 2, 1, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0},
        {"gdn_decode_forced_scalar", 2, 1, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0},
        {"gdn_decode_no_state", 2, 1, 2, 2, 128, 128, GD, LOG, true, -1, LAY_CONTIG, 0},
        {"decode_kernel_T17_D80", 2, 17, 2, 4, 80, 80, GD, LOG, true, F32, LAY_CONTIG, 0, 2},
        {"decode_kernel_T9_f16_Dk100", 2, 9, 2, 2, 100, 40, GD, LOG, true, F16, LAY_CONTIG, 0, 2},
        {"decode_kernel_T12_gla_lin", 2, 12, 1, 3, 32, 24, GL, LIN, false, F32, LAY_CONTIG, 0, 2},
        {"decode_kernel_T9_Dk256", 1, 9, 1, 1, 256, 256, GD, LOG, true, BF16, LAY_CONTIG, 0, 2},
        {"decode_kernel_T11_tpc8", 2, 11, 1, 2, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8, 2},
        {"decode_reg_T11_scalar", 2, 11, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0, 3},
        {"decode_reg_T7_bf16_unaligned", 2, 7, 2, 2, 128, 64, GD, LOG, true, BF16, LAY_UNALIGNED, 0, 3},
        {"decode_kernel_fused_qkv_fallback", 2, 5, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0, 2},
        // the persistent decode kernel (T == 1; more tiles than warps, partial tiles, all state types)
        {"persistent_gdn_D128", S(40, 9), 1, 4, 8, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
        {"persistent_gdn_D128_tpc8", 9, 1, 4, 8, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8, 4},
        {"persistent_Dk100_Dv40_f16", 3, 1, 2, 2, 100, 40, GD, LOG, true, F16, LAY_CONTIG, 0, 4},
        {"persistent_Dk24_Dv200_bf16", 2, 1, 1, 2, 24, 200, GD, LOG, true, BF16, LAY_CONTIG, 0, 4},
        {"persistent_Dk256", 2, 1, 1, 2, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
        {"persistent_gla_no_state", 3, 1, 2, 4, 64, 36, GL, LIN, false, -1, LAY_CONTIG, 0, 4},
        {"persistent_T5_falls_back", 2, 5, 2, 4, 64, 64, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
    };
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigDeltaRule, ::testing::ValuesIn(dr_cases()),
                         [](const ::testing::TestParamInfo<dr_case> &i) { return std::string(i.param.name); });

// T tokens at once (chunk kernel) equals T decode steps carrying the state
// (on the GPU), bit for bit: the decode kernels do the chunk kernel's
// arithmetic in its order (same TPC). Each decode kernel, Dk 64 and 128.
struct steps_case {
    int Dk, tpc, step_kernel;  // step_kernel: tg_cuda_sig.delta_kernel of the T = 1 calls
};
void chunk_equals_steps(const steps_case &sc) {
    const dr_case c = {"steps", 2, 8, 2, 4, sc.Dk, 64, GD, LOG, true, F32, LAY_CONTIG, sc.tpc};
    const dr_data d = make_dr(c, 77 + sc.Dk);
    std::vector<float> o_all;
    store s_all;
    {
        knobs k(0, 0, sc.tpc, 0, 1);
        run_dr(CudaSig::gpu, d, o_all, s_all);
    }
    dr_data step = d;
    step.c.T = 1;
    std::vector<float> o_steps(o_all.size());
    for (int t = 0; t < c.T; t++) {
        auto slice = [&](const std::vector<float> &x, size_t per_tok) {
            std::vector<float> y;
            for (int b = 0; b < c.B; b++) {
                const float *p = &x[((size_t)b * c.T + t) * per_tok];
                y.insert(y.end(), p, p + per_tok);
            }
            return y;
        };
        step.q = slice(d.q, (size_t)c.Dk * c.Hk), step.k = slice(d.k, (size_t)c.Dk * c.Hk);
        step.v = slice(d.v, (size_t)c.Dv * c.Hv), step.g = slice(d.g, c.Hv), step.beta = slice(d.beta, c.Hv);
        std::vector<float> o1;
        store s1;
        {
            knobs k(0, 0, sc.tpc, 0, sc.step_kernel);
            run_dr(CudaSig::gpu, step, o1, s1);
        }
        step.st0 = s1;  // carry the state
        for (int b = 0; b < c.B; b++)
            std::copy(&o1[(size_t)b * c.Dv * c.Hv], &o1[(size_t)(b + 1) * c.Dv * c.Hv],
                      &o_steps[((size_t)b * c.T + t) * c.Dv * c.Hv]);
    }
    EXPECT_EQ(0, memcmp(o_steps.data(), o_all.data(), o_all.size() * sizeof(float)))
        << "outputs differ between one call and T decode steps (rel " 
        << tgt::rel_error(o_steps, std::vector<double>(o_all.begin(), o_all.end())) << ")";
    EXPECT_EQ(step.st0.b, s_all.b) << "final state differs between one call and T decode steps";
}
TEST_F(CudaSig, DeltaRuleChunkEqualsSteps) {
    for (const steps_case sc : {steps_case{64, 0, 0}, steps_case{64, 0, 2}, steps_case{64, 0, 3}, steps_case{64, 0, 4},
                                steps_case{64, 0, 1}, steps_case{128, 4, 0}, steps_case{128, 4, 4},
                                steps_case{128, 8, 2}, steps_case{128, 8, 3}, steps_case{128, 8, 4},
                                steps_case{32, 8, 0}, steps_case{32, 8, 4}}) {
        SCOPED_TRACE("Dk " + std::to_string(sc.Dk) + " tpc " + std::to_string(sc.tpc) + " step kernel " +
                     std::to_string(sc.step_kernel));
        chunk_equals_steps(sc);
    }
}

// Gates of +1e4 (LOG: a = inf) on a zero state, -inf (a = 0), and one NaN:
// no NaN where the math has none, and the NaN exactly where the CPU has it.
struct CudaSigDeltaGates : CudaSig, ::testing::WithParamInterface<int> {};
TEST_P(CudaSigDeltaGates, ExtremeGates) {
    const dr_case c = {"gates", 2, 6, 2, 2, 64, 64, GD, LOG, true, -1, LAY_CONTIG, 0};
    knobs kn(0, 0, 0, 0, GetParam());
    dr_data d = make_dr(c, 11);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            d.g[((size_t)b * c.T + 0) * c.Hv + h] = 1e4f;       // the first token of a fresh sequence
            d.g[((size_t)b * c.T + 3) * c.Hv + h] = -INFINITY;  // forget everything
        }
    d.g[((size_t)1 * c.T + 4) * c.Hv + 1] = NAN;  // sequence 1, head 1, from token 4 on
    std::vector<float> oc, og;
    store sc, sg;
    run_dr(cpu, d, oc, sc);
    run_dr(gpu, d, og, sg);
    std::vector<float> g;
    std::vector<double> r;
    int nan_mismatch = 0, nans = 0;
    for (size_t i = 0; i < oc.size(); i++) {
        nans += std::isnan(oc[i]);
        if (std::isnan(oc[i]) != std::isnan(og[i])) nan_mismatch++;
        else if (!std::isnan(oc[i])) g.push_back(og[i]), r.push_back(oc[i]);
    }
    EXPECT_GT(nans, 0);
    EXPECT_EQ(nan_mismatch, 0) << "NaN outputs differ between GPU and CPU";
    EXPECT_LT(tgt::rel_error(g, r), 1e-4);
}
// 0: auto (chunk kernel at T = 6), 2: decode kernel, 3: decode-reg kernel, both stepping T = 6
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigDeltaGates, ::testing::Values(0, 2, 3),
                         [](const ::testing::TestParamInfo<int> &i) { return "kernel" + std::to_string(i.param); });

}  // namespace
