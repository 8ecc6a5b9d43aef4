// cuda_delta_chunked_util.h - what the chunked delta-rule CUDA tests share
// (tests/test_cuda_delta_chunked.cpp: the oracle cases; test_cuda_delta_chunked_state.cpp: state
// chaining, F16 rows, NaN reach, the failed graph): a case, its random data (representable in its
// q/k/v type), the float64 oracle of the scan's definition and the op run on the GPU (outputs
// poisoned first, the state's sentinel kept). Each test file includes it once, before its tests.
#pragma once
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
    int q_io = -1;              // q's type where it differs from k's and v's (io); -1: io
    int h16 = 0;                // != 0: knob delta_chunk_h16 (1 F16 rows, 2 F32 rows) for the chunk-parallel form
    int gate_at = 0;            // the token first_gate goes to (0: the first)
    int seg = 0;                // knob delta_chunk_seg (0 auto, 1 never, n >= 2: n segments)
    float second_gate = 0.0f;   // != 0: this gate at token second_at of every sequence and head too
    int second_at = 0;
    int zero_v = 0;             // values of tokens < zero_v exactly zero (their state contributions exact zeros)
    int gk = 0;                 // knob delta_chunk_gk (1: delta_wgb_kernel's and the segment kernels' gate arrays
                                // by their warp 0, "/gk1"; 0: made beforehand by delta_gates_kernel)
};
tg_type q_type(const ck_case &c) { return c.q_io < 0 ? c.io : (tg_type)c.q_io; }
void PrintTo(const ck_case &c, std::ostream *os) { *os << c.name; }

struct ck_data {
    ck_case c;
    float scale;
    std::vector<float> q, k, v, g, beta;  // contiguous, representable in their types (q_type(c), c.io)
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
    d.q = rounded(rng, q_type(c), nq, -qk, qk), d.k = rounded(rng, c.io, nq, -qk, qk), d.v = rounded(rng, c.io, nv, -1, 1);
    d.g = tgt::random_floats(rng, ng, c.g_lo, c.g_hi), d.beta = tgt::random_floats(rng, ng, c.b_lo, c.b_hi);
    for (int z = 0; z < c.zero_gates; z++) d.g[rng() % ng] = c.gate == TG_GATE_LOG ? -INFINITY : 0.0f;
    for (int b = 0; c.first_gate != 0.0f && b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) d.g[((size_t)b * c.T + c.gate_at) * c.Hv + h] = c.first_gate;
    for (int b = 0; c.second_gate != 0.0f && b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) d.g[((size_t)b * c.T + c.second_at) * c.Hv + h] = c.second_gate;
    for (int b = 0; b < c.B; b++)
        for (size_t i = 0; i < (size_t)std::min(c.zero_v, c.T) * c.Hv * c.Dv; i++) d.v[(size_t)b * c.T * c.Hv * c.Dv + i] = 0.0f;
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
    tg_tensor *q = tg_new_tensor_4d(x.ctx, q_type(c), c.Dk, c.Hk, c.T, c.B);
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

const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
const tg_gate_kind LIN = TG_GATE_LINEAR, LOG = TG_GATE_LOG;
const tg_delta_algo AUTO = TG_DELTA_ALGO_AUTO, CHUNKED = TG_DELTA_ALGO_CHUNKED, SCAN = TG_DELTA_ALGO_SCAN;

}  // namespace
