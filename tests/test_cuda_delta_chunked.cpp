// test_cuda_delta_chunked.cpp - delta_rule's chunked tensor-core path on CUDA
// (cuda/delta_rule_chunked.cu) against a float64 oracle of the scan's
// definition: chunk edges and long T (1 .. 8193), head dims 16/24/64/128/256
// and one the tensor path leaves to the scan, grouped heads, Dk != Dv, log
// gates to -30, zero LINEAR and -inf LOG gates, beta 0 and 1, F32/F16/BF16
// q/k/v, F32/F16/BF16 o, F32/BF16 states, the SCAN switch, state chaining, the
// chunk-parallel form (default) and the single-kernel form (knob); and the device
// error record: a graph that found a bad id leaves every delta-rule state as
// it was (each kernel). TG_TEST_SMALL=1 shrinks the long shapes (sanitizers).
#include "cuda_sig_util.h"

namespace {

struct ck_case {
    const char *name;
    int B, T, Hk, Hv, Dk, Dv;
    tg_delta_mode mode;
    tg_gate_kind gate;
    bool l2norm;
    int state;  // -1: none, else a tg_type
    tg_type io;
    tg_delta_algo algo;
    float g_lo = -0.2f, g_hi = 0.0f, b_lo = 0.0f, b_hi = 1.0f;
    int zero_gates = 0;
    int bv = 0;  // knob delta_chunk_bv (0 auto)
    tg_type out = TG_TYPE_F32;  // o's type (params out_type)
    int fused = 0;              // knob delta_chunk_fused: 0 auto, 1 the single-kernel form, 2 chunk-parallel
    int generic = 0;            // knob delta_chunk_generic: 1 the single kernel's generic tiles in the full case
    int wg = 0;                 // knob delta_chunk_wg: 1 keeps the full case off wgmma
    float first_gate = 0.0f;    // != 0: every sequence's first token gets this gate in every head (a LOG gate of
                                // +100 on a zero state: exp overflows F32, the state must stay zero through
                                // that token's decay)
};
void PrintTo(const ck_case &c, std::ostream *os) { *os << c.name; }

struct ck_data {
    ck_case c;
    float scale;
    std::vector<float> q, k, v, g, beta;  // contiguous, representable in c.io
    placed ps;
    store st0;
    std::vector<double> s0;  // logical {Dk, Dv, Hv, B}
};

std::vector<float> rounded(std::mt19937 &rng, tg_type t, size_t n, float lo, float hi) {
    std::vector<float> x = tgt::random_floats(rng, n, lo, hi);
    for (float &e : x) {
        if (t == TG_TYPE_F16) e = tg_fp16_to_fp32(tg_fp32_to_fp16(e));
        if (t == TG_TYPE_BF16) e = tg_bf16_to_fp32(tg_fp32_to_bf16(e));
    }
    return x;
}

ck_data make_ck(const ck_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    ck_data d;
    d.c = c;
    d.scale = 1.0f / std::sqrt((float)c.Dk);
    const float qk = c.l2norm ? 1.0f : 1.0f / std::sqrt((float)c.Dk);
    const size_t nq = (size_t)c.Dk * c.Hk * c.T * c.B, nv = (size_t)c.Dv * c.Hv * c.T * c.B, ng = (size_t)c.Hv * c.T * c.B;
    d.q = rounded(rng, c.io, nq, -qk, qk), d.k = rounded(rng, c.io, nq, -qk, qk), d.v = rounded(rng, c.io, nv, -1, 1);
    d.g = tgt::random_floats(rng, ng, c.g_lo, c.g_hi), d.beta = tgt::random_floats(rng, ng, c.b_lo, c.b_hi);
    for (int z = 0; z < c.zero_gates; z++) d.g[rng() % ng] = c.gate == TG_GATE_LOG ? -INFINITY : 0.0f;
    for (int b = 0; c.first_gate != 0.0f && b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) d.g[(size_t)b * c.T * c.Hv + h] = c.first_gate;
    d.ps = place(c.state < 0 ? TG_TYPE_F32 : (tg_type)c.state, c.Dk, c.Dv, c.Hv, c.B, 0, 0);
    d.st0 = store(d.ps.type, d.ps.total);
    const auto r = tgt::random_floats(rng, d.ps.total, -0.5f, 0.5f);
    for (size_t i = 0; i < r.size(); i++) d.st0.set(i, r[i]);
    d.s0.resize((size_t)c.Dk * c.Dv * c.Hv * c.B);
    for (size_t i = 0; i < d.s0.size(); i++) d.s0[i] = c.state < 0 ? 0.0 : d.st0.get(i);
    return d;
}

// float64 oracle of the scan's definition (src/tinygml.h); S per head as the state: [i + j*Dk]
void oracle(const ck_data &d, std::vector<double> &o, std::vector<double> &S) {
    const ck_case &c = d.c;
    o.assign((size_t)c.Dv * c.Hv * c.T * c.B, 0.0);
    S = d.s0;
    std::vector<double> q(c.Dk), k(c.Dk), u(c.Dv);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            double *Sh = &S[((size_t)b * c.Hv + h) * c.Dk * c.Dv];
            const int hk = h / (c.Hv / c.Hk);
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
                    double *col = Sh + (size_t)j * c.Dk, dot = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] = col[i] == 0.0 ? 0.0 : a * col[i], dot += col[i] * k[i];
                    u[j] = c.mode == TG_DELTA_GATED_DELTA ? be * (vt[j] - dot) : be * vt[j];
                    double y = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] += k[i] * u[j], y += col[i] * q[i];
                    o[(tok * c.Hv + h) * c.Dv + j] = d.scale * y;
                }
            }
        }
}

void set_io(built &x, tg_tensor *t, const std::vector<float> &v) {
    const tg_type ty = tg_tensor_type(t);
    if (ty == TG_TYPE_F32) return x.set(t, v.data());
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = ty == TG_TYPE_F16 ? tg_fp32_to_fp16(v[i]) : tg_fp32_to_bf16(v[i]);
    x.set(t, h.data());
}

// The op on the GPU: o, the state's backing store after it, and the variant used. bad_id >= 0: the
// graph also holds a get_rows with that id (vocab 4); returns the compute status.
tg_status run_gpu(const ck_data &d, std::vector<float> &o, store &st, std::string *variant = nullptr, int bad_id = -1) {
    const ck_case &c = d.c;
    built x;
    tg_tensor *q = tg_new_tensor_4d(x.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
    tg_tensor *k = tg_new_tensor_4d(x.ctx, c.io, c.Dk, c.Hk, c.T, c.B);
    tg_tensor *v = tg_new_tensor_4d(x.ctx, c.io, c.Dv, c.Hv, c.T, c.B);
    tg_tensor *g = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *beta = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *sb = c.state >= 0 ? tg_new_tensor_1d(x.ctx, d.ps.type, d.ps.total) : nullptr;
    const tg_delta_params dp = {c.mode, c.gate, d.scale, c.l2norm, c.algo, c.out};
    tg_tensor *out = tg_delta_rule(x.ctx, q, k, v, g, beta, sb ? view_of(x.ctx, sb, d.ps) : nullptr, &dp);
    EXPECT_NE(out, nullptr) << tg_last_error();
    if (!out) return TG_ERR_ARG;
    tg_tensor *emb = nullptr, *ids = nullptr, *rows = nullptr;
    if (bad_id >= 0) {
        emb = tg_new_tensor_2d(x.ctx, TG_TYPE_F32, 8, 4);
        ids = tg_new_tensor_1d(x.ctx, TG_TYPE_I32, 2);
        rows = tg_get_rows(x.ctx, emb, ids);
    }
    x.g = tg_graph_new(x.ctx);
    if (rows) tg_graph_expand(x.g, rows);  // first: its id check runs before the delta rule
    tg_graph_expand(x.g, out);
    x.buf = tg_backend_alloc(CudaSig::gpu, x.ctx);
    EXPECT_NE(x.buf, nullptr) << tg_last_error();
    if (!x.buf) return TG_ERR_OOM;
    set_io(x, q, d.q), set_io(x, k, d.k), set_io(x, v, d.v);
    x.set(g, d.g.data()), x.set(beta, d.beta.data());
    if (emb) {
        std::vector<float> e(32, 0.5f);
        const int32_t id[2] = {1, bad_id};
        x.set(emb, e.data()), x.set(ids, id);
    }
    if (sb) x.set(sb, d.st0.b.data());
    tg_status s = tg_graph_compute(CudaSig::gpu, x.g);
    if (bad_id < 0) {
        // again on a poisoned compute buffer, from the same state
        EXPECT_EQ(s, TG_OK) << tg_last_error();
        poison_compute_buffer(CudaSig::gpu);
        if (sb) x.set(sb, d.st0.b.data());
        s = tg_graph_compute(CudaSig::gpu, x.g);
        EXPECT_EQ(s, TG_OK) << tg_last_error();
    }
#ifdef TG_HAVE_CUDA
    if (variant) *variant = tg_cuda_sig_last(CudaSig::gpu, TG_CUDA_SIG_DELTA);
#endif
    o.resize((size_t)c.Dv * c.Hv * c.T * c.B);
    if (s == TG_OK && c.out == TG_TYPE_F32) x.get(out, o.data());
    if (s == TG_OK && c.out != TG_TYPE_F32) {
        std::vector<uint16_t> h(o.size());
        x.get(out, h.data());
        for (size_t i = 0; i < o.size(); i++) o[i] = c.out == TG_TYPE_F16 ? tg_fp16_to_fp32(h[i]) : tg_bf16_to_fp32(h[i]);
    }
    st = store(d.ps.type, d.ps.total);
    if (sb) x.get(sb, st.b.data());
    return s;
}

struct CudaDeltaChunked : CudaSig, ::testing::WithParamInterface<ck_case> {};

TEST_P(CudaDeltaChunked, MatchesFloat64Oracle) {
    const ck_case &c = GetParam();
    const ck_data d = make_ck(c, 900 + c.T + c.Dk);
    std::vector<float> o;
    store st;
    std::string variant;
    // (and the generic case at D128: knob delta_chunk_generic 1 must win over it)
    const bool phase_full = std::string(c.name).rfind("s128_", 0) == 0 || std::string(c.name).rfind("3p_generic", 0) == 0;
    int h16_knob = 0;  // knob delta_chunk_h16 as the backend has it (env TG_CUDA_DELTA_H16)
    int wg_state = -1;  // tg_cuda_delta_wgmma_state with the case's knobs
    {
#ifdef TG_HAVE_CUDA
        const tg_cuda_sig_knobs saved = *tg_cuda_knobs(CudaSig::gpu);
        h16_knob = saved.delta_chunk_h16;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = c.bv;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = c.fused;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_generic = c.generic;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_wg = c.wg;
        // the chunk-parallel form's compile-time kernels: the default (0); the cases named "s128_"
        // ask for them (1), the other chunk-parallel cases at D128 keep the generic kernels (2)
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_phase_full = phase_full ? 1 : 2;
#endif
        run_gpu(d, o, st, &variant);
#ifdef TG_HAVE_CUDA
        if (CudaSig::gpu) wg_state = tg_cuda_delta_wgmma_state(CudaSig::gpu);
        *tg_cuda_knobs(CudaSig::gpu) = saved;
#endif
    }
    // CHUNKED takes the tensor path wherever it covers the dims, SCAN never; AUTO decides by T,
    // Dk and the grid against the device's SM count (docs/ops.md): either is right, each is held to
    // its own tolerance
    const bool tensor = variant.rfind("chunked", 0) == 0, covered = c.Dk % 8 == 0;
    if (c.algo == TG_DELTA_ALGO_CHUNKED) EXPECT_EQ(tensor, covered) << "variant " << variant;
    // AUTO starts the tensor path at T 32 where the single kernel's full case runs it (Dk 128, whole
    // 128-column slices, the single-kernel form), else at 64
    const bool full_shape = c.Dk == 128 && c.Dv % 128 == 0;
    if (c.algo == TG_DELTA_ALGO_SCAN || !covered ||
        (c.algo == TG_DELTA_ALGO_AUTO && (c.T < (full_shape ? 32 : 64) || c.Dk < 64)))
        EXPECT_FALSE(tensor) << "variant " << variant;
    // 2 B Hv = 384 fills any GPU: the full case from T 32
    if (c.algo == TG_DELTA_ALGO_AUTO && full_shape && c.B * c.Hv >= 192 && c.T >= 32)
        EXPECT_NE(variant.find("/full"), std::string::npos) << "variant " << variant;
    // the form: forced by the knob (1 single-kernel, 2 chunk-parallel), else by the grid (either)
    if (tensor && c.fused) EXPECT_EQ(variant.rfind("chunked-3p", 0) == 0, c.fused == 2) << "variant " << variant;
    if (std::string(c.name).rfind("full_", 0) == 0) EXPECT_NE(variant.find("/full"), std::string::npos) << variant;
#ifdef TG_HAVE_CUDA
    // the full case with 16-bit q/k/v (either mode) runs on wgmma wherever the build and the device
    // have it, unless the knob says no; F32 q/k/v never do
    if (std::string(c.name).rfind("full_", 0) == 0) {
        const bool wg16 = c.io != TG_TYPE_F32;
        EXPECT_EQ(wg_state == 1, c.wg == 1) << "knob delta_chunk_wg " << c.wg << ", state " << wg_state;
        EXPECT_EQ(variant.find("/wgmma") != std::string::npos, wg16 && wg_state == 0) << variant;
        // BF16 q/k/v (either mode): BF16 products (delta_wgb_kernel) unless knob 2
        const bool bf16k = c.io == TG_TYPE_BF16 && wg_state == 0 && c.wg == 0;
        EXPECT_EQ(variant.rfind("chunked-bf16/", 0) == 0, bf16k) << variant;
#ifdef TG_WGMMA_BUILT
        // the library was built with sm_90a code: a compute capability 9.0 device must find it
        EXPECT_NE(wg_state, 3) << "this build's wgmma kernel is a stub";
#endif
        if (wg16 && c.wg == 0 && wg_state != 0)
            std::printf("note: %s ran delta_chunked_kernel (wgmma state %d: 2 = not a compute capability 9.0 device, 3 = no "
                        "sm_90a code)\n", c.name, wg_state);
    }
    // AUTO at fewer heads than fill the GPU: the single-kernel form on delta_wgb_kernel (where the device
    // has no wgmma, whatever the old rule gives: the chunk-parallel form, the scan or the TF32 kernel)
    if (std::string(c.name).rfind("wgbx_", 0) == 0)
        EXPECT_EQ(variant.rfind("chunked-bf16/dk128/bv128/w16/full/wgmma", 0) == 0, wg_state == 0) << variant;
    if (std::string(c.name).rfind("wgbn_", 0) == 0) EXPECT_NE(variant.rfind("chunked-bf16/", 0), 0u) << variant;
#endif
    const bool phases = variant.rfind("chunked-3p", 0) == 0;
    if (c.generic && !phases) EXPECT_NE(variant.find("bv128/w16"), std::string::npos) << variant;  // the full case's shape
    if (c.generic) EXPECT_EQ(variant.find("/full"), std::string::npos) << variant;
    // the chunk-parallel form at Dk = Dv = 128 (contiguous 16-byte rows here) with the knob: compile-time
    // prep and output kernels, and the state pass in registers wherever two load buffers fit and BV <= 64
    if (phases && !c.generic && c.Dk == 128 && c.Dv == 128 && phase_full) {
        EXPECT_NE(variant.find("/full"), std::string::npos) << variant;
        const bool bv_le64 = variant.find("/bv128/") == std::string::npos;
        if (bv_le64 && (variant.find("/nb2") != std::string::npos || variant.find("/nb3") != std::string::npos))
            EXPECT_NE(variant.find("/full-s128"), std::string::npos) << variant;
        // W and Kd^T as F16 rows (three buffers of at most 55 KB fit wherever two of F32 do) where
        // knob delta_chunk_h16 is 1, or 0 (auto) at 16 columns or fewer; else F32 rows
        // (H16RowsMatchF32Rows compares the two)
        const bool narrow = variant.find("/bv8/") != std::string::npos || variant.find("/bv16/") != std::string::npos;
        const bool want_h16 = variant.find("/full-s128") != std::string::npos && (h16_knob == 1 || (h16_knob == 0 && narrow));
        EXPECT_EQ(variant.find("/h16") != std::string::npos, want_h16) << variant;
    }
    if (phases && !phase_full) EXPECT_EQ(variant.find("/full"), std::string::npos) << variant;  // knob 2
    // the output kernel on BF16 wgmma (delta_out_wgb_kernel) where the full instances run with BF16 q/k
    // on a device with wgmma, unless knob delta_chunk_wg says no
    if (phases) {
        const bool full3 = variant.find("/full") != std::string::npos;
        EXPECT_EQ(variant.find("/owgb") != std::string::npos, full3 && c.io == TG_TYPE_BF16 && c.wg == 0 && wg_state == 0)
            << variant;
    }
    // (delta_wgb_kernel's hi/lo BF16 products are near-F32: ~3e-6 in the host emulator; its own tier
    // keeps a lost lo product, 1.5e-3..1.9e-3 there, from passing)
    const double tol = variant.rfind("chunked-bf16/", 0) == 0 ? 2e-4 : tensor ? 2e-3 : 1e-4;
    std::vector<double> oref, sref;
    oracle(d, oref, sref);
    // a 16-bit o adds its one rounding
    const double o_tol = tol + (c.out == TG_TYPE_BF16 ? 4e-3 : c.out == TG_TYPE_F16 ? 5e-4 : 0.0);
    EXPECT_LT(tgt::rel_error(o, oref), o_tol) << "o vs float64 oracle (" << variant << ")";
    if (c.state < 0) return;
    std::vector<float> s(sref.size());
    for (size_t i = 0; i < s.size(); i++) s[i] = st.get(i);
    const double st_tol = tol + (d.ps.type == TG_TYPE_BF16 ? 4e-3 : d.ps.type == TG_TYPE_F16 ? 5e-4 : 0.0);
    EXPECT_LT(tgt::rel_error(s, sref), st_tol) << "final state vs float64 oracle (" << variant << ")";
    const size_t es = tg_type_size(d.ps.type);
    EXPECT_EQ(0, memcmp(&st.b[sref.size() * es], &d.st0.b[sref.size() * es], (d.ps.total - sref.size()) * es))
        << "bytes past the state (sentinel) changed";
}

const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
const tg_gate_kind LIN = TG_GATE_LINEAR, LOG = TG_GATE_LOG;
const tg_delta_algo AUTO = TG_DELTA_ALGO_AUTO, CHUNKED = TG_DELTA_ALGO_CHUNKED, SCAN = TG_DELTA_ALGO_SCAN;

std::vector<ck_case> ck_cases() {
    const int Tl = S(2048, 130), Tx = S(8193, 193), Bl = S(2, 1);
    std::vector<ck_case> v = {
        {"gdn_D128_T1_chunked", 2, 1, 2, 4, 128, 128, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_D128_T63_chunked", 2, 63, 2, 4, 128, 128, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_D128_T64_auto", 2, 64, 2, 4, 128, 128, GD, LOG, true, F32, F32, AUTO},
        {"gdn_D128_T65_auto", 2, 65, 2, 4, 128, 128, GD, LOG, true, F32, F32, AUTO},
        {"gdn_D128_T130_auto", 2, 130, 2, 4, 128, 128, GD, LOG, true, F32, F32, AUTO},
        {"gdn_D128_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED},
        {"gdn_D128_T8193_bf16", 1, Tx, 1, 1, 128, 128, GD, LOG, true, F32, BF16, CHUNKED},
        {"gla_D128_T2048_f16", 1, Tl, 1, 2, 128, 128, GL, LOG, true, F32, F16, CHUNKED},
        {"gla_D128_T8193_f32", 1, Tx, 1, 1, 128, 128, GL, LOG, true, F32, F32, CHUNKED},
        {"gdn_D16", 2, 130, 1, 2, 16, 16, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_D24_seed_dims", 4, 130, 8, 8, 24, 24, GD, LOG, true, F32, F32, CHUNKED},
        {"gla_D24_linear_gates", 4, 130, 8, 8, 24, 24, GL, LIN, false, -1, F32, CHUNKED, 0.85f, 1.0f},
        {"gdn_D64", 2, 200, 2, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_D256", 1, 130, 1, 2, 256, 256, GD, LOG, true, F32, BF16, CHUNKED},
        {"gdn_Dk128_Dv64_Hv4Hk1", 2, 100, 1, 4, 128, 64, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_Dk64_Dv200", 1, 100, 1, 2, 64, 200, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_Dk32_Dv20_no_state", 2, 100, 1, 2, 32, 20, GD, LOG, true, -1, F32, CHUNKED},
        {"gdn_log_gates_to_-30", 1, 200, 1, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f},
        {"gla_log_gates_to_-30", 1, 200, 1, 2, 64, 64, GL, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f},
        {"gdn_beta_0", 1, 100, 1, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 0.0f},
        {"gdn_beta_1", 1, 100, 1, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f},
        {"gdn_linear_zero_gates", 2, 200, 1, 2, 64, 64, GD, LIN, true, F32, F32, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11},
        {"gla_linear_negative_gates", 2, 200, 1, 2, 64, 64, GL, LIN, true, F32, F32, CHUNKED, -1.0f, 1.0f},
        {"gdn_log_-inf_gates", 2, 200, 1, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9},
        {"gdn_bf16_state_f16_io", 2, 130, 2, 2, 128, 128, GD, LOG, true, BF16, F16, CHUNKED},
        {"gla_no_l2norm", 2, 130, 2, 2, 64, 64, GL, LOG, false, F32, F32, CHUNKED},
        // column slices forced: 128 (one slice per head), 64, 32, 8 (Dv 20: three slices, one partial); Dv 13:
        // element-wise v loads (rows of 52 bytes)
        {"gdn_D128_bv128_f16", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128},
        {"gla_D128_bv128_no_state", 1, 200, 1, 2, 128, 128, GL, LOG, true, -1, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128},
        {"gdn_Dk32_Dv13_element_loads", 2, 100, 1, 2, 32, 13, GD, LOG, true, F32, F32, CHUNKED},
        {"gdn_D128_bv64", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64},
        {"gla_D128_bv32_bf16", 2, 130, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32},
        {"gdn_D256_bv32", 1, 70, 1, 1, 256, 256, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32},
        {"gdn_Dk64_Dv20_bv8", 2, 70, 1, 2, 64, 20, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8},
        // the tensor path leaves Dk % 8 != 0 to the scan, also when CHUNKED is asked (16-bit q/k/v converted first)
        {"scan_fallback_Dk100_bf16", 2, 130, 1, 2, 100, 40, GD, LOG, true, F32, BF16, CHUNKED},
        // AUTO with many heads (the tensor path on an H200: 2 B Hv > SMs) and with few (the scan)
        {"gdn_D64_auto_many_heads", 4, 64, 1, 17, 64, 64, GD, LOG, true, F32, F32, AUTO},
        // AUTO with heads that fill the GPU: the full case from T 32, the scan below
        {"auto_D128_T40_many_heads", 8, 40, 2, 24, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"auto_D128_T31_many_heads", 8, 31, 2, 24, 128, 128, GD, LOG, true, F32, F32, AUTO},
        // 16-bit o: the chunked forms store it directly, the scan (prefill and decode) converts its F32 rows
        {"gdn_D128_T2048_bf16_out", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, BF16},
        {"gla_D64_f16_out", 2, 200, 1, 2, 64, 64, GL, LOG, true, -1, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F16},
        {"gdn_Dk32_Dv20_bf16_out", 2, 100, 1, 2, 32, 20, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, BF16},
        {"scan_bf16_out", 2, 130, 1, 2, 64, 64, GD, LOG, true, F32, BF16, SCAN, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, BF16},
        {"scan_decode_f16_out", 4, 1, 1, 2, 128, 128, GD, LOG, true, F32, F32, AUTO, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F16},
        {"fused_bf16_out", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, BF16, 1},
        // (the same on delta_chunked_kernel's generic tiles: with BF16 q/k/v the single form runs the BF16 wgmma
        // kernel at BV 128 where the device has it)
        {"fused_bf16_out_bv16", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, BF16, 1},
        // the single-kernel form (knob delta_chunk_fused), kept reachable
        {"fused_gdn_D128_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 1},
        {"fused_gla_D24_linear_gates", 4, 130, 8, 8, 24, 24, GL, LIN, false, -1, F32, CHUNKED, 0.85f, 1.0f, 0.0f, 1.0f, 0, 0, F32, 1},
        {"fused_gdn_linear_zero_gates", 2, 200, 1, 2, 64, 64, GD, LIN, true, F32, F32, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 0, F32, 1},
        {"fused_gdn_D128_bv128_f16", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"fused_generic_gdn_D128_bv128", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 1},
        {"fused_generic_gla_D128_bv128_bf16", 2, 130, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 1},
        // DKP > 128: the state update's K^T fragments by element loads (no room for the transposed copy)
        {"fused_gdn_D256_bf16", 1, 130, 1, 2, 256, 256, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 1},
        {"fused_gla_D192", 1, 100, 1, 2, 192, 64, GL, LOG, true, -1, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 1},
        // the chunk-parallel form at Dk = Dv = 128 with the state pass in registers (delta_state128_kernel),
        // each BV it has (8 is the default at few heads), both modes, LINEAR gates with zeros, strong
        // decays, no state; names "s128_" check the variant; and the generic kernels at the same shape
        {"s128_gdn_bv16_T8193_bf16", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16},
        {"s128_gdn_bv8_T65_beta_1_f16", 2, 65, 2, 4, 128, 128, GD, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f, 0, 8},
        {"s128_gla_bv16_linear_zero_gates", 2, 200, 1, 2, 128, 128, GL, LIN, false, F32, F32, CHUNKED, 0.85f, 1.0f, 0.0f, 1.0f, 7, 16},
        {"s128_gdn_bv32_log_gates_to_-30", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 32},
        {"s128_gdn_bv64_no_state_bf16", 2, 130, 2, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64},
        {"s128_gdn_linear_zero_gates_bv8", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, F32, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 8},
        {"s128_gdn_D128_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED},
        {"s128_gla_D128_T8193_f32", 1, Tx, 1, 1, 128, 128, GL, LOG, true, F32, F32, CHUNKED},
        {"s128_gdn_bf16_state_f16_io", 2, 130, 2, 2, 128, 128, GD, LOG, true, BF16, F16, CHUNKED},
        {"s128_gdn_long_few_heads_auto", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"s128_gdn_D128_bf16_out_bv16", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, BF16},
        {"s128_gla_bv32_f16", 2, 130, 1, 2, 128, 128, GL, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32},
        {"s128_gla_bv64_no_state", 1, 200, 1, 2, 128, 128, GL, LOG, true, -1, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64},
        // BF16 q/k/v: the output kernel on BF16 wgmma where the device has it ("/owgb"), both modes, -inf
        // and zero gates, no l2norm, Hk < Hv, and on delta_out_kernel with knob delta_chunk_wg 1
        {"s128_gla_bv16_bf16", 2, 200, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16},
        {"s128_gdn_log_-inf_gates_no_l2norm_bf16", 2, 200, 1, 2, 128, 128, GD, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 32},
        {"s128_gla_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 16},
        {"s128_gdn_Hv4Hk1_log_gates_to_-30_bf16", 1, 300, 1, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 16, F16},
        {"s128_gdn_bv16_bf16_knob1", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 0, 0, 1},
        {"3p_generic_gdn_D128_bv16_bf16", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 2, 1},
        // BF16 q/k/v at 48 and 64 (sequence, value head) pairs, fewer than fill the GPU: AUTO takes the
        // single-kernel form on delta_wgb_kernel ("wgbx_": the test checks it where the device has
        // wgmma), from T 32 at 64 pairs of GATED_DELTA
        {"wgbx_gdn_x64_auto", 4, 130, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbx_gdn_x64_T40_auto", 4, 40, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbx_gla_x48_auto", 3, 130, 4, 16, 128, 128, GL, LOG, false, -1, BF16, AUTO},
        // ... and not where the rule says no ("wgbn_": never the BF16 kernel; at T 130 with heads that do
        // not fill, AUTO runs the scan): 32 GATED_DELTA pairs, F16 q/k/v, knob delta_chunk_wg 2
        {"wgbn_gdn_x32_auto", 2, 130, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbn_gdn_f16_x48_auto", 3, 130, 4, 16, 128, 128, GD, LOG, true, F32, F16, AUTO},
        {"wgbn_gla_x48_knob2_auto", 3, 130, 4, 16, 128, 128, GL, LOG, false, -1, BF16, AUTO, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 0, 0, 2},
        // few heads, long T (gdn.long's shape, smaller): AUTO takes the chunk-parallel form
        {"gdn_long_few_heads_auto", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        // the single kernel's full case (Dk 128, whole 128-column slices: compile-time tiles, decay
        // tables), reached by forcing 128 columns; the names start with "full_" and the test checks
        // that the variant says so
        {"full_gdn_f32_io", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_T64", 1, 64, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_T1", 2, 1, 2, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_T8193_f32", 1, Tx, 1, 1, 128, 128, GL, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_bf16_no_state", 2, 200, 1, 2, 128, 128, GL, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_log_gates_to_-30", 1, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_log_gates_mixed", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -2.5f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_linear_zero_gates", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, F32, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1},
        {"full_gla_linear_negative_gates", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, F32, CHUNKED, -1.0f, 1.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_log_-inf_gates", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, F32, 1},
        {"full_gdn_no_l2norm_f16_out", 2, 130, 2, 2, 128, 128, GD, LOG, false, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F16, 1},
        {"full_gdn_Hv4Hk1_Dv256_bf16_state", 2, 200, 1, 4, 128, 256, GD, LOG, true, BF16, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1},
        {"full_gdn_beta_1", 1, 100, 1, 2, 128, 128, GD, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f, 0, 128, F32, 1},
        // GATED_DELTA's full case with 16-bit q/k/v on wgmma (above: T1, T2048, no l2norm, Hv4/Hk1
        // Dv256, beta 1), and the same on delta_chunked_kernel (knob delta_chunk_wg 1)
        {"full_gdn_log_gates_to_-30_bf16", 1, 200, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_log_gates_mixed_f16", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, F16, CHUNKED, -2.5f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1},
        {"full_gdn_log_-inf_gates_f16_no_state", 2, 200, 1, 2, 128, 128, GD, LOG, true, -1, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, F32, 1},
        {"full_gdn_T8193_bf16", 1, Tx, 1, 1, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1},
        {"full_gdn_mma_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 1},
        {"full_gdn_mma_linear_zero_gates_f16", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, F16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1, 0, 1},
        // GATED_LINEAR's full case with 16-bit q/k/v on wgmma (cuda/sm90a/delta_rule_chunked_wg.cu),
        // and the same on delta_chunked_kernel (knob delta_chunk_wg 1)
        {"full_gla_log_gates_to_-30_bf16", 1, 200, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_log_-inf_gates_f16", 2, 200, 1, 2, 128, 128, GL, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, F32, 1},
        {"full_gla_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1},
        {"full_gla_linear_negative_gates_f16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, F16, CHUNKED, -1.0f, 1.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_beta_1_T64_bf16", 1, 64, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_T1_f16", 2, 1, 2, 2, 128, 128, GL, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_Hv4Hk1_Dv256_f16_out_bf16_state", 2, 130, 1, 4, 128, 256, GL, LOG, false, BF16, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F16, 1},
        {"full_gla_T2048_bf16_io", Bl, Tl, 2, 4, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1},
        {"full_gla_T2048_f32_io", Bl, Tl, 2, 4, 128, 128, GL, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_mma_T2048_bf16_io", Bl, Tl, 2, 4, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1, 0, 1},
        {"full_gla_mma_linear_zero_gates_f16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, F16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1, 0, 1},
        // GATED_LINEAR with BF16 q/k/v on delta_wgb_kernel (BF16 products; the cases above with BF16
        // inputs run it too), and on the TF32 wgmma kernel (knob delta_chunk_wg 2)
        {"full_gla_bf16k_T1", 2, 1, 2, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_bf16k_log_-inf_gates_no_l2norm", 2, 200, 1, 2, 128, 128, GL, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, BF16, 1},
        {"full_gla_bf16k_linear_negative_gates", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, -1.0f, 1.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gla_bf16k_Hv4Hk1_Dv256_bf16_state", 2, 130, 1, 4, 128, 256, GL, LOG, false, BF16, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F16, 1},
        {"full_gla_bf16k_T8193", 1, Tx, 1, 1, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1},
        {"full_gla_tf32_T2048_bf16_io", Bl, Tl, 2, 4, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1, 0, 2},
        {"full_gla_tf32_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1, 0, 2},
        // GATED_DELTA with BF16 q/k/v on delta_wgb_kernel<true> (the full_gdn cases above with BF16
        // inputs run it too), and on the TF32 wgmma kernel (knob delta_chunk_wg 2)
        {"full_gdn_bf16k_log_-inf_gates_no_l2norm", 2, 200, 1, 2, 128, 128, GD, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, BF16, 1},
        {"full_gdn_bf16k_linear_negative_gates", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, BF16, CHUNKED, -1.0f, 1.0f, 0.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_bf16k_no_state_beta_1", 2, 130, 2, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f, 0, 128, F32, 1},
        {"full_gdn_bf16k_beta_0_T64", 1, 64, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 0.0f, 0, 128, F32, 1},
        // a LOG gate of +100 at each sequence's first token on a zero state (no state given): the chunk's
        // decays from the state overflow F32 while the state is zero, which must stay zero (docs/ops.md)
        {"full_gdn_bf16k_big_first_gate_no_state", 2, 130, 1, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 0, 100.0f},
        {"full_gla_bf16k_big_first_gate_no_state", 2, 130, 1, 2, 128, 128, GL, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 0, 100.0f},
        {"full_gdn_big_first_gate_no_state_f16", 2, 130, 1, 2, 128, 128, GD, LOG, true, -1, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 0, 100.0f},
        {"full_gla_big_first_gate_no_state_f16", 2, 130, 1, 2, 128, 128, GL, LOG, true, -1, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 0, 100.0f},
        {"full_gdn_bf16k_Hv4Hk1_Dv256_f16_out", 2, 130, 1, 4, 128, 256, GD, LOG, false, BF16, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F16, 1},
        {"full_gdn_tf32_T2048_bf16", Bl, Tl, 2, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 2},
        {"full_gdn_tf32_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1, 0, 2},
        // F32 q/k/v (delta_chunked_kernel's F32 instance: the wgmma kernel takes 16-bit q/k/v only)
        {"full_gla_log_-inf_gates_f32_no_l2norm_bf16_state", 2, 200, 1, 2, 128, 128, GL, LOG, false, BF16, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 128, BF16, 1},
        {"full_gla_Hv4Hk1_Dv256_f32_T1", 2, 1, 1, 4, 128, 256, GL, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 1.0f, 1.0f, 0, 128, F32, 1},
        // the precision switch: the exact F32 scan at any T, also for 16-bit q/k/v
        {"scan_switch_D128_T2048", 1, Tl, 1, 2, 128, 128, GD, LOG, true, F32, F32, SCAN},
        {"scan_switch_f16_io", 2, 130, 1, 2, 64, 64, GD, LOG, true, F32, F16, SCAN},
    };
    return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeltaChunked, ::testing::ValuesIn(ck_cases()),
                         [](const ::testing::TestParamInfo<ck_case> &i) {
                             std::string s = i.param.name;
                             for (char &ch : s)
                                 if (!isalnum((unsigned char)ch)) ch = '_';
                             return s;
                         });

struct CudaDeltaChunkedState : CudaSig {};

// T split anywhere (inside a chunk, on a chunk edge) equals one call, output and final state.
TEST_F(CudaDeltaChunkedState, SplitEqualsOneCall) {
    const ck_case c = {"split", 2, 200, 1, 2, 64, 64, GD, LOG, true, F32, F32, CHUNKED};
    const ck_data d = make_ck(c, 31);
    std::vector<float> o_all;
    store s_all;
    run_gpu(d, o_all, s_all);
    for (int cut : {37, 64, 150}) {
        SCOPED_TRACE("cut at " + std::to_string(cut));
        ck_data a = d, b = d;
        a.c.T = cut, b.c.T = c.T - cut;
        auto part = [&](const std::vector<float> &x, size_t per, int t0, int n) {
            std::vector<float> y;
            for (int bb = 0; bb < c.B; bb++) {
                const float *p = &x[((size_t)bb * c.T + t0) * per];
                y.insert(y.end(), p, p + (size_t)n * per);
            }
            return y;
        };
        const size_t nqk = (size_t)c.Dk * c.Hk, nv = (size_t)c.Dv * c.Hv;
        a.q = part(d.q, nqk, 0, cut), a.k = part(d.k, nqk, 0, cut), a.v = part(d.v, nv, 0, cut);
        a.g = part(d.g, c.Hv, 0, cut), a.beta = part(d.beta, c.Hv, 0, cut);
        b.q = part(d.q, nqk, cut, b.c.T), b.k = part(d.k, nqk, cut, b.c.T), b.v = part(d.v, nv, cut, b.c.T);
        b.g = part(d.g, c.Hv, cut, b.c.T), b.beta = part(d.beta, c.Hv, cut, b.c.T);
        std::vector<float> oa, ob;
        store sa, sb;
        run_gpu(a, oa, sa);
        b.st0 = sa;
        run_gpu(b, ob, sb);
        std::vector<float> o_split;
        for (int bb = 0; bb < c.B; bb++) {
            o_split.insert(o_split.end(), oa.begin() + (size_t)bb * cut * nv, oa.begin() + (size_t)(bb + 1) * cut * nv);
            o_split.insert(o_split.end(), ob.begin() + (size_t)bb * b.c.T * nv, ob.begin() + (size_t)(bb + 1) * b.c.T * nv);
        }
        EXPECT_LT(tgt::rel_error(o_split, std::vector<double>(o_all.begin(), o_all.end())), 2e-3) << "outputs";
        std::vector<float> x(d.s0.size());
        std::vector<double> y(d.s0.size());
        for (size_t i = 0; i < x.size(); i++) x[i] = sb.get(i), y[i] = s_all.get(i);
        EXPECT_LT(tgt::rel_error(x, y), 2e-3) << "final state";
    }
}

// The chunk-parallel form's W and Kd^T between its kernels as F16 rows with power-of-two row scales
// (knob delta_chunk_h16 1; the default at 16 columns or fewer) against F32 rows (2), state pass in registers both times: the
// F16 rows hold every value of at least 2^-14 of its row's largest exactly, so the two agree far
// inside the tensor path's tolerance. Cases: gdn.long's slice width at long T; one and two chunks
// (no state); log gates to -30 (rows of Kd^T over 30 binades, W rows of tiny decays); keys far past
// F16's range (GATED_LINEAR without l2norm: |k| ~ 2.6e5, inf in F16 unscaled); a NaN key and an
// infinite one (GATED_LINEAR), which must give NaN and +-inf at the same outputs and state entries
// on both.
TEST_F(CudaDeltaChunkedState, H16RowsMatchF32Rows) {
    struct hcase {
        ck_case c;
        float kmul;
        int bad_token;      // >= 0: one element of that token's key is bad_value
        float bad_value = NAN;
    };
    const int Tx = S(8193, 193);
    const hcase cases[] = {
        {{"gdn_bv16_T8193_bf16", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv32_log_gates_to_-30", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gla_bv64_keys_past_f16", 2, 200, 1, 2, 128, 128, GL, LOG, false, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64}, 3e6f, -1},
        {{"gdn_bv8_nan_key", 1, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8}, 1.0f, 150},
        {{"gla_bv16_inf_key", 1, 200, 1, 2, 128, 128, GL, LOG, false, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, 100, INFINITY},
        {{"gdn_bv16_T64_one_chunk", 2, 64, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv32_T100_two_chunks_no_state", 1, 100, 1, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
    };
    for (const hcase &w : cases) {
        SCOPED_TRACE(w.c.name);
        ck_data d = make_ck(w.c, 77);
        for (float &x : d.k) x *= w.kmul;
        if (w.bad_token >= 0) d.k[(size_t)w.bad_token * w.c.Dk * w.c.Hk + 5] = w.bad_value;
        std::vector<float> o[2];
        store st[2];
        std::string var[2];
        for (int i = 0; i < 2; i++) {
#ifdef TG_HAVE_CUDA
            const tg_cuda_sig_knobs saved = *tg_cuda_knobs(CudaSig::gpu);
            tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = w.c.bv;
            tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = 2;
            tg_cuda_knobs(CudaSig::gpu)->delta_chunk_phase_full = 1;
            tg_cuda_knobs(CudaSig::gpu)->delta_chunk_h16 = i == 0 ? 1 : 2;
#endif
            EXPECT_EQ(run_gpu(d, o[i], st[i], &var[i]), TG_OK) << tg_last_error();
#ifdef TG_HAVE_CUDA
            *tg_cuda_knobs(CudaSig::gpu) = saved;
#endif
            EXPECT_NE(var[i].find("/full-s128"), std::string::npos) << var[i];
        }
        EXPECT_NE(var[0].find("/h16"), std::string::npos) << var[0];
        EXPECT_EQ(var[1].find("/h16"), std::string::npos) << var[1];
        std::vector<float> s[2];
        for (int i = 0; i < 2; i++)
            for (size_t j = 0; j < d.s0.size(); j++) s[i].push_back(st[i].get(j));
        // NaN and +-inf exactly where the F32 rows give them; the finite rest within 1e-5 (relative L2)
        auto agree = [&](const std::vector<float> &a, const std::vector<float> &b, const char *what) {
            ASSERT_EQ(a.size(), b.size());
            auto cls = [](float x) { return std::isnan(x) ? 3 : std::isinf(x) ? (x > 0 ? 1 : 2) : 0; };
            std::vector<float> fa;
            std::vector<double> fb;
            size_t bad_a = 0, bad_b = 0, mismatch = 0;
            for (size_t j = 0; j < a.size(); j++) {
                bad_a += cls(a[j]) != 0, bad_b += cls(b[j]) != 0;
                if (cls(a[j]) != cls(b[j])) mismatch++;
                else if (cls(a[j]) == 0) fa.push_back(a[j]), fb.push_back(b[j]);
            }
            EXPECT_EQ(mismatch, 0u) << what << ": NaN or inf in " << bad_a << " (F16 rows) and " << bad_b << " (F32 rows)";
            if (w.bad_token >= 0) EXPECT_GT(bad_b, 0u) << what << ": the bad key reached nothing";
            else EXPECT_EQ(bad_b, 0u) << what;
            EXPECT_LT(tgt::rel_error(fa, fb), 1e-5) << what;
        };
        agree(o[0], o[1], "o");
        if (w.c.state >= 0) agree(s[0], s[1], "final state");
        if (w.bad_token >= 0) continue;
        std::vector<double> oref, sref;
        oracle(d, oref, sref);
        EXPECT_LT(tgt::rel_error(o[0], oref), 2e-3) << "o (F16 rows) vs float64 oracle";
        if (w.c.state >= 0) EXPECT_LT(tgt::rel_error(s[0], sref), 2e-3) << "final state (F16 rows) vs float64 oracle";
    }
}

// A NaN input is reported by propagation (docs/ops.md "NaN"): a NaN in one value element of token r
// reaches that value column of its own head and sequence from r on (outputs and final state), a
// NaN gate the whole head from r on; the chunks before r's, other heads and other sequences stay
// finite. Inside r's chunk of 64 the tensor-core products may also reach earlier tokens (masked
// products multiply exact zeros by NaN), so those are not checked. Each single-kernel full-case
// kernel: BF16 products (delta_wgb_kernel, both modes), TF32 wgmma (F16 inputs; BF16 by knob 2),
// mma.sync (knob 1), F32 inputs.
TEST_F(CudaDeltaChunkedState, NanInputStaysInItsHeadAndLaterTokens) {
    struct nan_case {
        const char *name;
        tg_delta_mode mode;
        tg_type io;
        int wg;         // knob delta_chunk_wg
        bool gate_nan;  // else one value element
    };
    const int T = 200, r = 150, col = 37, bad_b = 1, bad_h = 0;  // r in the chunk [128, 192)
    for (const nan_case &w : {nan_case{"gla_bf16k_v", GL, BF16, 0, false}, nan_case{"gdn_bf16k_v", GD, BF16, 0, false},
                              nan_case{"gla_bf16k_g", GL, BF16, 0, true}, nan_case{"gdn_bf16k_g", GD, BF16, 0, true},
                              nan_case{"gdn_tf32_f16_v", GD, F16, 0, false}, nan_case{"gla_tf32_bf16_g", GL, BF16, 2, true},
                              nan_case{"gdn_mma_bf16_v", GD, BF16, 1, false}, nan_case{"gla_f32_g", GL, F32, 0, true}}) {
        SCOPED_TRACE(w.name);
        const ck_case c = {"nan", 2, T, 1, 2, 128, 128, w.mode, LOG, true, F32, w.io, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, w.wg};
        ck_data d = make_ck(c, 77);
        const int Hv = c.Hv, Dv = c.Dv, Dk = c.Dk;
        if (w.gate_nan) d.g[((size_t)bad_b * T + r) * Hv + bad_h] = NAN;
        else d.v[(((size_t)bad_b * T + r) * Hv + bad_h) * Dv + col] = NAN;
        std::vector<float> o;
        store st;
        std::string variant;
        {
            knobs kn(0, 0, 0, 0);
#ifdef TG_HAVE_CUDA
            if (CudaSig::gpu) {
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = 1;
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = 128;
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_wg = w.wg;
            }
#endif
            ASSERT_EQ(run_gpu(d, o, st, &variant), TG_OK) << tg_last_error();
        }
        EXPECT_NE(variant.find("/full"), std::string::npos) << variant;
#ifdef TG_HAVE_CUDA
        // the kernel the case names: BF16 products (BF16 inputs, knob 0), TF32 wgmma (16-bit inputs,
        // knob 0 or 2), mma.sync (knob 1, F32 inputs); where the device has no wgmma, mma.sync
        if (CudaSig::gpu && tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0) {
            const bool wg16 = w.io != TG_TYPE_F32 && w.wg != 1;
            EXPECT_EQ(variant.find("/wgmma") != std::string::npos, wg16) << variant;
            EXPECT_EQ(variant.rfind("chunked-bf16/", 0) == 0, w.io == TG_TYPE_BF16 && w.wg == 0) << variant;
        } else if (CudaSig::gpu) {
            std::printf("note: %s ran without wgmma (variant %s)\n", w.name, variant.c_str());
        }
#endif
        int bad_before = 0, clean_after = 0, bad_elsewhere = 0;
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < Hv; h++)
                    for (int j = 0; j < Dv; j++) {
                        const float x = o[(((size_t)b * T + t) * Hv + h) * Dv + j];
                        const bool reached = b == bad_b && h == bad_h && (w.gate_nan || j == col);
                        if (!reached) bad_elsewhere += !std::isfinite(x);
                        else if (t < r / 64 * 64) bad_before += !std::isfinite(x);
                        else if (t >= r) clean_after += !std::isnan(x);
                    }
        EXPECT_EQ(bad_elsewhere, 0) << "non-finite outputs outside the NaN's head and column (" << variant << ")";
        EXPECT_EQ(bad_before, 0) << "non-finite outputs in the chunks before the NaN's (" << variant << ")";
        EXPECT_EQ(clean_after, 0) << "outputs at or after the NaN's token without NaN (" << variant << ")";
        int s_bad = 0, s_clean = 0;
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < Hv; h++)
                for (int j = 0; j < Dv; j++)
                    for (int i = 0; i < Dk; i++) {
                        const float x = st.get((((size_t)b * Hv + h) * Dv + j) * Dk + i);
                        const bool reached = b == bad_b && h == bad_h && (w.gate_nan || j == col);
                        if (reached) s_clean += !std::isnan(x);
                        else s_bad += !std::isfinite(x);
                    }
        EXPECT_EQ(s_bad, 0) << "non-finite state entries outside the NaN's head and column (" << variant << ")";
        EXPECT_EQ(s_clean, 0) << "state entries the NaN reaches without NaN (" << variant << ")";
    }
}

// Issue 9 item 4: a graph whose get_rows found a bad id fails, and no delta-rule kernel writes the
// state (chunked, chunk, decode, decode-reg, persistent); with a good id the same graph writes it.
TEST_F(CudaDeltaChunkedState, FailedGraphLeavesStateUnchanged) {
    struct variant {
        const char *name;
        int T, kern;
        tg_delta_algo algo;
        int fused = 0, D = 64, bv = 0;
        tg_delta_mode mode = TG_DELTA_GATED_DELTA;
        tg_type io = TG_TYPE_F32;
    };
    for (const variant &w : {variant{"chunked", 70, 0, CHUNKED, 2}, variant{"chunked_fused", 70, 0, CHUNKED, 1},
                             variant{"chunked_full", 70, 0, CHUNKED, 1, 128, 128}, variant{"chunked_s128", 70, 0, CHUNKED, 2, 128, 16},
                             variant{"chunked_full_gla_bf16", 70, 0, CHUNKED, 1, 128, 128, GL, BF16},
                             variant{"chunked_full_gdn_f16", 70, 0, CHUNKED, 1, 128, 128, GD, F16},
                             variant{"chunked_full_gdn_bf16", 70, 0, CHUNKED, 1, 128, 128, GD, BF16},
                             variant{"chunk_scan", 70, 0, SCAN},
                             variant{"decode", 1, 0, AUTO}, variant{"decode_reg", 1, 3, AUTO},
                             variant{"persistent", 1, 4, AUTO}}) {
        SCOPED_TRACE(w.name);
        const ck_case c = {"err", 2, w.T, 2, 4, w.D, w.D, w.mode, LOG, true, F32, w.io, w.algo};
        const ck_data d = make_ck(c, 3);
        knobs kn(0, 0, 0, 0, w.kern);
#ifdef TG_HAVE_CUDA
        if (CudaSig::gpu) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = w.fused;
        if (CudaSig::gpu) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = w.bv;
        if (CudaSig::gpu) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_phase_full = 1;
        if (CudaSig::gpu) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_wg = 0;  // (whatever TG_CUDA_DELTA_WG says)
#endif
        std::vector<float> o;
        store st;
        EXPECT_NE(run_gpu(d, o, st, nullptr, 7), TG_OK);
        EXPECT_NE(std::string(tg_last_error()).find("get_rows"), std::string::npos) << tg_last_error();
        EXPECT_EQ(st.b, d.st0.b) << "state changed by a failed graph";
        std::string ran;
        EXPECT_EQ(run_gpu(d, o, st, &ran, 2), TG_OK) << tg_last_error();
        if (w.bv == 128) EXPECT_NE(ran.find("/full"), std::string::npos) << "variant " << ran;
#ifdef TG_HAVE_CUDA
        // the full case with 16-bit q/k/v: the wgmma kernel where the device has it
        if (w.bv == 128 && w.io != TG_TYPE_F32 && CudaSig::gpu)
            EXPECT_EQ(ran.find("/wgmma") != std::string::npos, tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0) << ran;
#endif
        if (w.bv == 16) EXPECT_NE(ran.find("/full-s128"), std::string::npos) << "variant " << ran;
        EXPECT_NE(st.b, d.st0.b) << "a good graph did not write the state";
    }
}

}  // namespace
