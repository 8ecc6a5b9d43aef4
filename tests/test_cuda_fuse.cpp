// test_cuda_fuse.cpp - the CUDA backend's node fusions (cuda/fuse.cuh):
// rms_norm*w (and its fold into the GEMV after it), mul_mat+add,
// gate/up+swiglu, mul_mats sharing b.
//
// One llama layer (norm, q/k/v, o + residual, norm, gate/up/swiglu, down +
// residual) runs on CUDA with fusion on, with fusion off, and on the CPU
// backend, on the same random data, at the 1.1B model's sizes and at odd
// ones (K not a multiple of 8, odd M, N 1..8, and N 9 where only the norm
// fuses), with F32/F16/BF16 and quantized (Q8_0, Q4_0, Q4_K) weights. The
// fused kernels compute the unfused kernels' arithmetic in the same order, so
// with the norm not folded into its GEMV (knob norm_fold) fused and unfused
// results must be bit-identical; with the fold (the default, F16/BF16/F32
// weights on the 16-byte path, quantized weights) within 1e-5 relative L2
// of them (1e-3 quantized; the norm's scale applied after the products),
// and the fold must have been taken where it can be. All must match the
// CPU within 1e-4 relative L2 (F32 accumulation in another order). The
// compute buffer is poisoned with NaN before each compute, every output lands in a sink whose random tail must come back intact, and the
// fused graph is computed three times (plain, captured, replayed). A variant
// whose graph also outputs the intermediates (so those fusions must not
// happen) must be just as correct; one that outputs the mul's results that
// the GEMVs read (the norm still folds and must write them) too. Llama
// models (a toy F16 one and the shipped llama-recall) decode the same tokens
// with identical logits unfused and fused without the norm fold, and within
// 1e-4 of those logits with it. The norm fold's other GEMV launches (a lone
// product, a product plus residual) run on their own graphs.
// TG_TEST_SMALL=1 shrinks the shapes (compute-sanitizer).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "internal.h"
#include "model_util.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

using tgt::small;

#ifdef TG_HAVE_CUDA

struct layer_case {
    const char *name;
    tg_type wt;
    int64_t E, F, QD, KD, N;
    bool use_intermediates;  // outputs also read the norm, the o product and the gate product
    int mmv_rows = 0;        // GEMV knob mmv_rows: 0 auto, else rows per block forced
    int mmv_trigger = 0;     // GEMV knob mmv_trigger: 1 the next kernel's launch at the block's start, 2 after the loads
    int pdl_mask = 0;        // knob pdl_mask: kernel classes launched without PDL
    bool norm_outs = false;  // outputs also read the mul results the GEMVs read (the folded norm writes them)
};
void PrintTo(const layer_case &c, std::ostream *os) { *os << c.name; }

// Host values of every leaf, generated once per case (stored-type exact).
struct layer_data {
    std::vector<std::vector<float>> vals;  // x, wn1, wn2, wq, wk, wv, wo, wg, wu, wd
    std::vector<std::vector<int64_t>> shapes;
    std::vector<tg_type> types;
};

layer_data make_data(const layer_case &c) {
    layer_data d;
    const tg_type F32 = TG_TYPE_F32;
    d.shapes = {{c.E, c.N}, {c.E}, {c.E}, {c.E, c.QD}, {c.E, c.KD}, {c.E, c.KD},
                {c.QD, c.E}, {c.E, c.F}, {c.E, c.F}, {c.F, c.E}};
    d.types = {F32, F32, F32, c.wt, c.wt, c.wt, c.wt, c.wt, c.wt, c.wt};
    std::mt19937 rng(1234 + (unsigned)c.E);
    for (size_t i = 0; i < d.shapes.size(); i++) {
        size_t n = 1;
        for (int64_t x : d.shapes[i]) n *= (size_t)x;
        const int64_t K = d.shapes[i][0];
        // weights scaled by 1/sqrt(K) keep every layer's values O(1); norm weights near 1
        const float s = i == 0 ? 2.0f : i <= 2 ? 0.2f : 1.0f / std::sqrt((float)K);
        std::vector<float> v = tgt::random_floats(rng, n, -s, s);
        if (i == 1 || i == 2)
            for (float &x : v) x += 1.0f;
        if (d.types[i] == TG_TYPE_F16)
            for (float &x : v) x = tg_fp16_to_fp32(tg_fp32_to_fp16(x));
        if (d.types[i] == TG_TYPE_BF16)
            for (float &x : v) x = tg_bf16_to_fp32(tg_fp32_to_bf16(x));
        d.vals.push_back(std::move(v));
    }
    return d;
}

using tgt::upload;

struct layer_result {
    std::vector<std::vector<float>> outs;  // one per output, per compute
    bool tails_ok = true;
    int fusions[TG_CUDA_FUSION_KINDS] = {};
};

constexpr int kTail = 37;

// Build the layer on backend be, compute it `runs` times, read the outputs.
void run_layer(tg_backend *be, const layer_case &c, const layer_data &d, int runs, layer_result *r) {
    tg_init_params ip = {256 * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true};
    tg_context *ctx = tg_init(ip);
    ASSERT_NE(ctx, nullptr);
    std::unique_ptr<tg_context, void (*)(tg_context *)> ctx_guard(ctx, tg_free);
    std::vector<tg_tensor *> lf;
    for (size_t i = 0; i < d.shapes.size(); i++)
        lf.push_back(tg_new_tensor(ctx, d.types[i], (int)d.shapes[i].size(), d.shapes[i].data()));
    tg_tensor *x0 = lf[0], *wn1 = lf[1], *wn2 = lf[2], *wq = lf[3], *wk = lf[4], *wv = lf[5], *wo = lf[6],
              *wg = lf[7], *wu = lf[8], *wd = lf[9];
    // the layer's input as an intermediate (as in a model): the residual add
    // may then run in place on it, so it does not take the storage of the
    // o product's input (which would rule the mm+add fusion out)
    tg_tensor *x = tg_scale(ctx, x0, 1.0f);
    tg_tensor *n1 = tg_rms_norm(ctx, x, 1e-5f);
    tg_tensor *xn = tg_mul(ctx, n1, wn1);
    tg_tensor *q = tg_mul_mat(ctx, wq, xn);
    tg_tensor *k = tg_mul_mat(ctx, wk, xn);
    tg_tensor *v = tg_mul_mat(ctx, wv, xn);
    tg_tensor *o = tg_mul_mat(ctx, wo, q);
    tg_tensor *x1 = tg_add(ctx, x, o);  // the residual as src[0]
    tg_tensor *n2 = tg_rms_norm(ctx, x1, 1e-5f);
    tg_tensor *xm = tg_mul(ctx, n2, wn2);
    tg_tensor *up = tg_mul_mat(ctx, wu, xm);  // up before gate: swiglu's operands in node order reversed
    tg_tensor *gate = tg_mul_mat(ctx, wg, xm);
    tg_tensor *h = tg_swiglu(ctx, gate, up);
    tg_tensor *x2 = tg_add(ctx, tg_mul_mat(ctx, wd, h), x1);  // the product as src[0]
    std::vector<tg_tensor *> outs = {x2, k, v};
    if (c.use_intermediates) outs.push_back(n1), outs.push_back(o), outs.push_back(gate);
    if (c.norm_outs) outs.push_back(xn), outs.push_back(xm);
    tg_graph *g = tg_graph_new(ctx);
    std::vector<tg_tensor *> sinks;
    for (tg_tensor *t : outs) {
        ASSERT_NE(t, nullptr) << tg_last_error();
        const int64_t n = tg_nelements(t);
        tg_tensor *sink = tg_new_tensor_1d(ctx, TG_TYPE_F32, n + kTail);
        sinks.push_back(sink);
        ASSERT_EQ(tg_graph_expand(g, tg_cpy(ctx, t, tg_view_1d(ctx, sink, n, 0))), TG_OK) << tg_last_error();
    }
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    ASSERT_NE(buf, nullptr) << tg_last_error();
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> buf_guard(buf, tg_buffer_free);
    for (size_t i = 0; i < lf.size(); i++) ASSERT_EQ(upload(lf[i], d.vals[i]), TG_OK) << tg_last_error();
    ASSERT_EQ(tg_backend_reserve(be, g), TG_OK) << tg_last_error();
    std::mt19937 trng(77);
    for (int run = 0; run < runs; run++) {
        std::vector<std::vector<uint32_t>> bits;
        for (size_t s = 0; s < sinks.size(); s++) {
            const int64_t n = tg_nelements(outs[s]);
            std::vector<uint32_t> b((size_t)(n + kTail), 0x7fc00000u);
            for (int64_t i = n; i < n + kTail; i++) b[(size_t)i] = (uint32_t)trng();
            ASSERT_EQ(tg_tensor_set(sinks[s], b.data(), 0, b.size() * 4), TG_OK) << tg_last_error();
            bits.push_back(std::move(b));
        }
        // NaN over the intermediates: an element a kernel forgets stays NaN
        if (be->compute_buf) ASSERT_EQ(be->iface->memset(be, be->compute_buf, 0xff, be->compute_size), TG_OK);
        ASSERT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
        if (be->mem == TG_MEM_DEVICE) tg_cuda_fusions_last(be, r->fusions);
        for (size_t s = 0; s < sinks.size(); s++) {
            const int64_t n = tg_nelements(outs[s]);
            std::vector<uint32_t> back(bits[s].size());
            ASSERT_EQ(tg_tensor_get(sinks[s], back.data(), 0, back.size() * 4), TG_OK) << tg_last_error();
            r->tails_ok = r->tails_ok && memcmp(back.data() + n, bits[s].data() + n, (size_t)kTail * 4) == 0;
            std::vector<float> f((size_t)n);
            memcpy(f.data(), back.data(), (size_t)n * 4);
            r->outs.push_back(std::move(f));
        }
    }
}

double rel_l2(const std::vector<float> &a, const std::vector<float> &ref) {
    std::vector<double> r(ref.begin(), ref.end());
    return tgt::rel_error(a, r);
}

class CudaFuseLayer : public ::testing::TestWithParam<layer_case> {};

TEST_P(CudaFuseLayer, FusedEqualsUnfusedAndCpu) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const layer_case &c = GetParam();
    const layer_data d = make_data(c);
    tg_backend *gpu = tg_backend_cuda(0);
    ASSERT_NE(gpu, nullptr) << tg_last_error();
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> gpu_guard(gpu, tg_backend_free);
    tg_backend *cpu = tg_backend_cpu(2);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> cpu_guard(cpu, tg_backend_free);

    layer_result fused, nofold, plain, ref;
    tg_cuda_knobs(gpu)->mmv_rows = c.mmv_rows;
    tg_cuda_knobs(gpu)->mmv_trigger = c.mmv_trigger;
    tg_cuda_knobs(gpu)->pdl_mask = c.pdl_mask;
    tg_cuda_set_fuse(gpu, true);
    run_layer(gpu, c, d, 3, &fused);  // plain run, capture, replay
    if (HasFatalFailure()) return;
    tg_cuda_knobs(gpu)->norm_fold = 1;
    run_layer(gpu, c, d, 3, &nofold);
    if (HasFatalFailure()) return;
    tg_cuda_knobs(gpu)->norm_fold = 0;
    tg_cuda_set_fuse(gpu, false);
    run_layer(gpu, c, d, 1, &plain);
    if (HasFatalFailure()) return;
    run_layer(cpu, c, d, 1, &ref);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(fused.tails_ok && nofold.tails_ok && plain.tails_ok && ref.tails_ok) << "a sink's tail was overwritten";
    // launch knobs change when kernels start, never what they compute: the
    // fused replay equals the default launches' bit for bit; so does the
    // quantized GEMV at any rows per group (a row's units are summed by the
    // same lanes in the same order)
    const bool quant_knobs = tg_type_is_quantized(c.wt) && c.mmv_rows;
    if (c.mmv_trigger || c.pdl_mask || quant_knobs) {
        tg_cuda_knobs(gpu)->mmv_trigger = 0;
        tg_cuda_knobs(gpu)->pdl_mask = 0;
        tg_cuda_knobs(gpu)->mmv_rows = 0;
        tg_cuda_set_fuse(gpu, true);
        layer_result dflt;
        run_layer(gpu, c, d, 3, &dflt);
        if (HasFatalFailure()) return;
        EXPECT_TRUE(dflt.tails_ok) << "a sink's tail was overwritten";
        ASSERT_EQ(dflt.outs.size(), fused.outs.size());
        for (size_t o = 0; o < fused.outs.size(); o++)
            EXPECT_EQ(memcmp(dflt.outs[o].data(), fused.outs[o].data(), fused.outs[o].size() * 4), 0)
                << "output " << o << ": launch knobs changed the result";
    }

    // which fusions the fused graph took (the last enqueue: the capture)
    const bool gemv = c.N <= 8;
    const int expect[4] = {c.use_intermediates ? 1 : 2, gemv ? (c.use_intermediates ? 1 : 2) : 0,
                           gemv && !c.use_intermediates ? 1 : 0, gemv ? (c.use_intermediates ? 2 : 1) : 0};
    for (int k = 0; k < 4; k++) EXPECT_EQ(fused.fusions[k], expect[k]) << "fusion kind " << k;
    for (int k = 0; k < 4; k++) EXPECT_EQ(nofold.fusions[k], expect[k]) << "fusion kind " << k << " without the fold";
    EXPECT_EQ(fused.fusions[4], 0) << "a rope pair in a graph without rope";
    // the norm folded into the GEMV after it: quantized weights, or float ones on the 16-byte path
    const bool quant = tg_type_is_quantized(c.wt);
    const bool fold = gemv && (quant || c.E % (c.wt == TG_TYPE_F32 ? 4 : 8) == 0);
    EXPECT_EQ(fused.fusions[5], fold ? expect[0] : 0) << "norms folded into their GEMV";
    EXPECT_EQ(nofold.fusions[5], 0) << "a norm folded with knob norm_fold 1";
    // (kind 7, b quantized by the attention before the product: no attention here)
    EXPECT_EQ(fused.fusions[7], 0) << "a product linked to an attention in a graph without one";
    for (int k = 0; k < TG_CUDA_FUSION_KINDS; k++) EXPECT_EQ(plain.fusions[k], 0) << "fusion kind " << k << " with fusion off";

    const size_t nout = ref.outs.size();
    ASSERT_EQ(plain.outs.size(), nout);
    ASSERT_EQ(fused.outs.size(), 3 * nout);
    ASSERT_EQ(nofold.outs.size(), 3 * nout);
    for (size_t o = 0; o < nout; o++) {
        const size_t n = plain.outs[o].size();
        for (int run = 0; run < 3; run++) {
            const std::vector<float> &f = nofold.outs[run * nout + o], &g = fused.outs[run * nout + o];
            ASSERT_EQ(f.size(), n);
            ASSERT_EQ(g.size(), n);
            EXPECT_EQ(memcmp(f.data(), plain.outs[o].data(), n * 4), 0)
                << "output " << o << " run " << run << ": fused (no fold) differs from unfused";
            // the fold: the same bits in every run (plain, capture, replay); the unfused bits without it
            EXPECT_EQ(memcmp(g.data(), (fold ? fused.outs[o] : plain.outs[o]).data(), n * 4), 0)
                << "output " << o << " run " << run << (fold ? ": folded runs differ" : ": fused differs from unfused");
        }
        for (float v : fused.outs[o]) ASSERT_TRUE(std::isfinite(v)) << "output " << o;
        const double e = rel_l2(plain.outs[o], ref.outs[o]), ef = rel_l2(fused.outs[o], plain.outs[o]);
        printf("[ fuse     ] %-22s output %zu: relative L2 error vs CPU %.3g, folded vs unfused %.3g\n", c.name, o,
               e, ef);
        // (quantized: b's 8-bit rounding of x * w may differ from that of (x * s) * w in a rare element)
        if (fold) EXPECT_LE(ef, quant ? 1e-3 : 1e-5) << "output " << o << ": the folded norm";
        // N > 8: 16-bit weights multiply on tensor cores with b rounded to their type;
        // quantized weights: the GPU rounds b to 8 bits per block of 32 (the CPU
        // quantizes activations its own way), through four products in a row
        const double tol = quant ? 3e-2 : c.N > 8 && c.wt != TG_TYPE_F32 ? 4e-3 : 1e-4;
        EXPECT_LE(e, tol) << "output " << o;
        EXPECT_LE(rel_l2(fused.outs[o], ref.outs[o]), tol) << "output " << o << " (fused)";
    }
}

std::vector<layer_case> layer_cases() {
    const tg_type F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16, F32 = TG_TYPE_F32;
    const bool s = small();
    // the 1.1B llama's shapes (n_embd 2048, ff 8192, 32/8 heads of 128)
    const int64_t E = s ? 256 : 2048, F = s ? 512 : 8192, QD = E, KD = E / 4;
    return {
        {"llm_1p1b_f16_n1", F16, E, F, QD, KD, 1, false},
        {"llm_1p1b_bf16_n4", BF16, E, F, QD, KD, 4, false},
        {"llm_1p1b_f16_uses", F16, E, F, QD, KD, 1, true},
        {"odd_f16_n1", F16, 1003, 517, 1003, 37, 1, false},
        {"odd_bf16_n3", BF16, 1001, 333, 1001, 75, 3, false},
        {"odd_f32_n8", F32, 999, 129, 999, 33, 8, false},
        {"odd_f16_n5_uses", F16, 1003, 517, 1003, 37, 5, true},
        {"odd_f32_n2", F32, 7, 5, 7, 3, 2, false},
        {"odd_f16_n9_prefill", F16, 1003, 517, 1003, 37, 9, false},
        {"f16_n7", F16, 256, 1024, 256, 64, 7, false},
        // quantized weights (the fused-job GEMV, b quantized once per launch);
        // K of every product a multiple of the block (256 for Q4_K), odd M
        {"llm_1p1b_q4_0_n1", TG_TYPE_Q4_0, E, F, QD, KD, 1, false},
        {"llm_1p1b_q8_0_n1", TG_TYPE_Q8_0, E, F, QD, KD, 1, false},
        {"llm_1p1b_q4_k_n1", TG_TYPE_Q4_K, E, F, QD, KD, 1, false},
        {"llm_1p1b_q4_0_uses", TG_TYPE_Q4_0, E, F, QD, KD, 1, true},
        {"odd_q8_0_n3", TG_TYPE_Q8_0, 288, 544, 288, 40, 3, false},
        {"odd_q4_0_n5_uses", TG_TYPE_Q4_0, 288, 544, 288, 41, 5, true},
        {"odd_q4_k_n8", TG_TYPE_Q4_K, 256, 768, 256, 37, 8, false},
        {"odd_q4_0_n2", TG_TYPE_Q4_0, 32, 96, 32, 3, 2, false},
        // every rows-per-block of the GEMV (knob mmv_rows) at the 1.1B and odd sizes
        {"llm_1p1b_f16_n1_r1", F16, E, F, QD, KD, 1, false, 1},
        {"llm_1p1b_f16_n1_r2", F16, E, F, QD, KD, 1, false, 2},
        {"llm_1p1b_f16_n1_r4", F16, E, F, QD, KD, 1, false, 4},
        {"odd_bf16_n3_r4", BF16, 1001, 333, 1001, 75, 3, false, 4},
        {"odd_f16_n1_uses_r1", F16, 1003, 517, 1003, 37, 1, true, 1},
        {"odd_f32_n2_r4", F32, 7, 5, 7, 3, 2, false, 4},
        // launch knobs: the GEMV's trigger at the block's start; every class without PDL
        // (and the GEMVs' weight loads after their wait)
        // (at the 1.1B's full sizes the default triggers every GEMV at its start, as knob 1; under
        // TG_TEST_SMALL every product is under 4 MiB and the default is knob 2: each knob differs from
        // the default at one of the two sizes, and the 125M's below at both)
        {"llm_1p1b_f16_n1_trigger_start", F16, E, F, QD, KD, 1, false, 0, 1, 0},
        {"llm_1p1b_f16_n1_trigger_after_loads", F16, E, F, QD, KD, 1, false, 0, 2, 0},
        // the 125M's shapes at every TG_TEST_SMALL: by default its q/k/v and o launches (under 4 MiB of
        // weights) trigger after their loads and gate/up and down (over) at their start: against both knobs
        {"llm_125m_f16_n1_trigger_start", F16, 768, 3072, 768, 768, 1, false, 0, 1, 0},
        {"llm_125m_f16_n1_trigger_after_loads", F16, 768, 3072, 768, 768, 1, false, 0, 2, 0},
        {"llm_1p1b_q4_0_n1_trigger_start", TG_TYPE_Q4_0, E, F, QD, KD, 1, false, 0, 1, 0},
        {"llm_1p1b_f16_uses_no_pdl", F16, E, F, QD, KD, 1, true, 0, 0, 0xFF},
        {"llm_1p1b_q8_0_n1_no_pdl", TG_TYPE_Q8_0, E, F, QD, KD, 1, false, 0, 0, 0xFF},
        // down's rows of 4096 and more at any TG_TEST_SMALL (the sanitizer runs), 4 rows
        // forced; F32 K 4104: the last round of loads partial
        {"long_k_f16_n1_r4", F16, 256, 4096, 256, 64, 1, false, 4},
        {"long_k_f32_n1_r4", F32, 128, 4104, 128, 32, 1, false, 4},
        // the mul results the folded GEMVs read are outputs too: the fold writes them
        {"llm_1p1b_f16_n1_norm_outs", F16, E, F, QD, KD, 1, false, 0, 0, 0, true},
        {"f32_n3_norm_outs", F32, 256, 512, 256, 64, 3, false, 0, 0, 0, true},
        {"llm_1p1b_q4_0_n1_norm_outs", TG_TYPE_Q4_0, E, F, QD, KD, 1, false, 0, 0, 0, true},
        {"odd_q8_0_n3_norm_outs", TG_TYPE_Q8_0, 288, 544, 288, 40, 3, false, 0, 0, 0, true},
        // the quantized GEMV's rows per group forced (the 1.1B's auto on a
        // 132-SM GPU: 1 for o, 2 for q/k/v, 4 for gate/up and down)
        {"llm_1p1b_q4_0_n1_r1", TG_TYPE_Q4_0, E, F, QD, KD, 1, false, 1},
        {"llm_1p1b_q4_0_n1_r4", TG_TYPE_Q4_0, E, F, QD, KD, 1, false, 4},
        {"llm_1p1b_q8_0_n1_r2", TG_TYPE_Q8_0, E, F, QD, KD, 1, false, 2},
        {"odd_q4_0_n1_uses_r2", TG_TYPE_Q4_0, 288, 544, 288, 41, 1, true, 2},
        {"odd_q8_0_n1_norm_outs_r4", TG_TYPE_Q8_0, 288, 544, 288, 40, 1, false, 4, 0, 0, true},
    };
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFuseLayer, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<layer_case> &i) { return std::string(i.param.name); });

// TG_CUDA_FUSE=0 when the backend is created turns fusion off.
TEST(CudaFuse, EnvironmentSwitchTurnsFusionOff) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const char *old = getenv("TG_CUDA_FUSE");
    const std::string saved = old ? old : "";
    setenv("TG_CUDA_FUSE", "0", 1);
    tg_backend *off = tg_backend_cuda(0);
    if (old) setenv("TG_CUDA_FUSE", saved.c_str(), 1);
    else unsetenv("TG_CUDA_FUSE");
    ASSERT_NE(off, nullptr) << tg_last_error();
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> guard(off, tg_backend_free);
    const layer_case c = {"env", TG_TYPE_F16, 64, 96, 64, 16, 1, false};
    layer_result r;
    run_layer(off, c, make_data(c), 1, &r);
    for (int k = 0; k < TG_CUDA_FUSION_KINDS; k++) EXPECT_EQ(r.fusions[k], 0) << "fusion kind " << k;
}

// Greedy decoding of m on its backend gpu: a prompt of 5, then steps tokens
// (each step a CUDA-graph replay after the first); the tokens, every step's
// logits, and the fusions of the last step. With force, its tokens are fed
// instead of the greedy ones (and returned).
void greedy_decode(tg_backend *gpu, tgm::model *m, int steps, std::vector<int32_t> *toks, std::vector<float> *logits,
                   int f[TG_CUDA_FUSION_KINDS], const std::vector<int32_t> *force = nullptr) {
    const int V = m->hp.n_vocab, P = 5;
    tgm::session *s = tgm::session_new(m, 1, P + steps + 1);
    ASSERT_NE(s, nullptr) << tg_last_error();
    std::vector<int32_t> prompt = {1, 17, 42, 99, 7};
    std::vector<float> l;
    ASSERT_EQ(tgm::session_eval(s, 0, 1, prompt.data(), P, false, &l), TG_OK) << tg_last_error();
    tgm::sampler greedy;
    for (int i = 0; i < steps; i++) {
        int32_t t = greedy.sample(l.data(), V);
        if (force) t = (*force)[(size_t)i];
        toks->push_back(t);
        logits->insert(logits->end(), l.begin(), l.end());
        ASSERT_EQ(tgm::session_eval(s, 0, 1, &t, 1, false, &l), TG_OK) << tg_last_error();
    }
    tg_cuda_fusions_last(gpu, f);
    tgm::session_free(s);
}

void expect_same(const std::vector<int32_t> (&toks)[2], const std::vector<float> (&logits)[2]) {
    EXPECT_EQ(toks[0], toks[1]);
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0) << "logits differ";
    for (float x : logits[0]) ASSERT_TRUE(std::isfinite(x));
}

// Greedy decoding of a llama unfused, fused without the norm fold (knob
// norm_fold 1: same tokens, same logits bit for bit), and fused with it, fed
// the unfused tokens: every step's logits within 1e-4 relative L2 of the
// unfused ones, and the same argmax wherever the unfused top two differ by
// more than 1e-3 of the top's magnitude.
void decode_both(const std::string &path, int steps) {
    tg_backend *gpu = tg_backend_cuda(0);
    ASSERT_NE(gpu, nullptr) << tg_last_error();
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> guard(gpu, tg_backend_free);
    tgm::model *m = tgm::model_load(path.c_str(), gpu);
    ASSERT_NE(m, nullptr) << tg_last_error();
    std::vector<int32_t> toks[3];
    std::vector<float> logits[3];
    for (int pass = 0; pass < 3; pass++) {  // unfused, fused without the fold, fused
        tg_cuda_set_fuse(gpu, pass > 0);
        tg_cuda_knobs(gpu)->norm_fold = pass == 1 ? 1 : 0;
        tg_cuda_knobs(gpu)->rope_fold = pass == 2 ? 2 : 0;  // (pass 2: also before the cluster kernel)
        int f[TG_CUDA_FUSION_KINDS];
        greedy_decode(gpu, m, steps, &toks[pass], &logits[pass], f, pass == 2 ? &toks[0] : nullptr);
        if (::testing::Test::HasFatalFailure()) break;
        int all = 0;
        for (int k = 0; k < TG_CUDA_FUSION_KINDS; k++) all += f[k];
        if (pass == 0) {
            EXPECT_EQ(all, 0);
        } else {
            EXPECT_GT(f[0] + f[1] + f[2] + f[3], 0) << "no GEMV or norm fusion in a llama decode step";
            EXPECT_EQ(f[4] + f[6], m->hp.n_layer) << "rope(q) + rope_kv_update not one launch in every layer";
            if (pass == 1) EXPECT_EQ(f[5], 0) << "a norm folded with knob norm_fold 1";
            // every norm folds: two per layer and the output head's (the planner keeps the last
            // row's storage past the logits' product, src/planner.cpp release_at)
            else EXPECT_EQ(f[5], 2 * m->hp.n_layer + 1) << "a norm not folded into its GEMV";
            // with the norm folded, q's rotation may take the norm's storage
            // (dead after the products), and the rope (knob 2) folds into every q/k/v launch
            if (pass == 2) EXPECT_EQ(f[6], m->hp.n_layer) << "rope not folded into the q/k/v GEMV in every layer";
        }
    }
    tg_cuda_knobs(gpu)->norm_fold = 0;
    tg_cuda_knobs(gpu)->rope_fold = 0;
    const size_t V = (size_t)m->hp.n_vocab;
    tgm::model_free(m);
    if (::testing::Test::HasFatalFailure()) return;
    expect_same({toks[0], toks[1]}, {logits[0], logits[1]});
    ASSERT_EQ(logits[2].size(), logits[0].size());
    ASSERT_EQ(logits[0].size(), (size_t)steps * V);
    int clear = 0;
    for (int i = 0; i < steps; i++) {
        const std::vector<float> a(logits[2].begin() + i * V, logits[2].begin() + (i + 1) * V);
        const std::vector<double> r(logits[0].begin() + i * V, logits[0].begin() + (i + 1) * V);
        for (float x : a) ASSERT_TRUE(std::isfinite(x)) << "step " << i;
        EXPECT_LE(tgt::rel_error(a, r), 1e-4) << "step " << i << ": folded norm";
        const size_t top = (size_t)(std::max_element(r.begin(), r.end()) - r.begin());
        double second = -INFINITY;
        for (size_t v = 0; v < V; v++)
            if (v != top) second = std::max(second, r[v]);
        if (r[top] - second <= 1e-3 * std::fabs(r[top])) continue;
        clear++;
        EXPECT_EQ((size_t)(std::max_element(a.begin(), a.end()) - a.begin()), top) << "step " << i;
    }
    EXPECT_GT(clear, 0) << "no step with a clear top token";
}

// A toy F16 llama (8/2 heads) written to a temp file, TG_TEST_SMALL shrinking
// its widths: the path ("" on failure).
std::string toy_llama(int n_embd, int n_ff, int n_layer, int n_ctx, unsigned seed, const char *name) {
    tgt::toy_config cfg;
    cfg.n_embd = small() ? 64 : n_embd, cfg.n_ff = small() ? 96 : n_ff, cfg.n_head = 8, cfg.n_head_kv = 2;
    cfg.n_layer = n_layer, cfg.n_ctx = n_ctx, cfg.wtype = TG_TYPE_F16;
    return tgt::write_temp_model(tgt::toy_model_writer(cfg, seed), name);
}

TEST(CudaFuse, ToyLlamaSameTokensFusedAndUnfused) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const std::string path = toy_llama(256, 688, 3, 64, 21, "fuse_llama");
    ASSERT_FALSE(path.empty()) << tg_last_error();
    decode_both(path, small() ? 6 : 24);
    std::remove(path.c_str());
}

TEST(CudaFuse, ShippedLlamaSameTokensFusedAndUnfused) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    decode_both(std::string(TG_SOURCE_DIR) + "/models/llama-recall.gguf", small() ? 6 : 32);
}

// A GEMV whose weights a node of the same graph writes just before it (here
// the rms_norm of a 2048 x 2048 F32 matrix, itself launched by programmatic
// dependent launch, so the GEMV could start while it runs) must not load them
// before its wait: it must see the norm's results. Against the CPU backend.
std::vector<float> norm_then_gemv(tg_backend *be, const std::vector<float> &a, const std::vector<float> &x, int K,
                                  int M) {
    tg_context *ctx = tg_init({1u << 20, nullptr, true});
    std::unique_ptr<tg_context, void (*)(tg_context *)> cg(ctx, tg_free);
    tg_tensor *ta = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, M), *tx = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, 1);
    tg_tensor *y = tg_mul_mat(ctx, tg_rms_norm(ctx, ta, 1e-5f), tx);
    tg_graph *g = tg_graph_new(ctx);
    EXPECT_EQ(tg_graph_expand(g, y), TG_OK) << tg_last_error();
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    EXPECT_NE(buf, nullptr) << tg_last_error();
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> bg(buf, tg_buffer_free);
    std::vector<float> out((size_t)M, NAN);
    if (!buf) return out;
    EXPECT_EQ(tg_tensor_set(ta, a.data(), 0, a.size() * 4), TG_OK);
    EXPECT_EQ(tg_tensor_set(tx, x.data(), 0, x.size() * 4), TG_OK);
    tg_graph_stats st{};
    EXPECT_EQ(tg_graph_plan(g, &st), TG_OK) << tg_last_error();
    for (int rep = 0; rep < 3; rep++) {  // plain, capture, replay
        tgt::poison_compute_buffer(be, st.planned_bytes);
        EXPECT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
    }
    EXPECT_EQ(tg_tensor_get(y, out.data(), 0, out.size() * 4), TG_OK);
    return out;
}

// The norm folded into the GEMV launches the layer test does not take: a
// lone product (its output read by a later node) and a product plus a
// residual, with float and quantized weights, 1 to 3 columns. Fused with
// the fold against the fold off (1e-5; quantized 1e-3) and the CPU (1e-4;
// quantized 3e-2), sinks' tails intact, and both folds taken.
struct fold_graph_out {
    std::vector<float> lone, resid;
    bool tails_ok = true;
    int fusions[TG_CUDA_FUSION_KINDS] = {};
};
// split_w: the norm weights as {K / 2, 2}, which mul broadcasts over x's
// {K, N} by modulo (ggml's rule; N even): K elements, but not one row of K,
// so no fold may take them.
fold_graph_out fold_graph(tg_backend *be, tg_type wt, int64_t K, int64_t M, int64_t N, const std::vector<float> (&v)[7],
                          bool split_w = false) {
    fold_graph_out r;
    tg_context *ctx = tg_init({64 * tg_tensor_overhead() + tg_graph_overhead() + 4096, nullptr, true});
    std::unique_ptr<tg_context, void (*)(tg_context *)> cg(ctx, tg_free);
    const int64_t shapes[7][2] = {{K, N}, {K, 1}, {K, M}, {K, N}, {K, 1}, {K, M}, {M, N}};
    const tg_type types[7] = {TG_TYPE_F32, TG_TYPE_F32, wt, TG_TYPE_F32, TG_TYPE_F32, wt, TG_TYPE_F32};
    tg_tensor *t[7];
    for (int i = 0; i < 7; i++)  // the norm weights (1 and 4) one row of K, or split_w
        t[i] = i != 1 && i != 4 ? tg_new_tensor_2d(ctx, types[i], shapes[i][0], shapes[i][1])
               : split_w        ? tg_new_tensor_2d(ctx, types[i], K / 2, 2)
                                : tg_new_tensor_1d(ctx, types[i], K);
    tg_tensor *w1 = t[1], *w2 = t[4];
    tg_tensor *lone = tg_mul_mat(ctx, t[2], tg_mul(ctx, tg_rms_norm(ctx, t[0], 1e-5f), w1));
    tg_tensor *resid = tg_add(ctx, tg_mul_mat(ctx, t[5], tg_mul(ctx, tg_rms_norm(ctx, t[3], 1e-6f), w2)), t[6]);
    tg_tensor *outs[2] = {tg_scale(ctx, lone, 2.0f), resid};  // lone's product read by a later node
    tg_tensor *sinks[2];
    tg_graph *g = tg_graph_new(ctx);
    for (int o = 0; o < 2; o++) {
        sinks[o] = tg_new_tensor_1d(ctx, TG_TYPE_F32, M * N + kTail);
        EXPECT_EQ(tg_graph_expand(g, tg_cpy(ctx, outs[o], tg_view_1d(ctx, sinks[o], M * N, 0))), TG_OK) << tg_last_error();
    }
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    EXPECT_NE(buf, nullptr) << tg_last_error();
    if (!buf) return r;
    std::unique_ptr<tg_buffer, void (*)(tg_buffer *)> bg(buf, tg_buffer_free);
    for (int i = 0; i < 7; i++) EXPECT_EQ(upload(t[i], v[i]), TG_OK) << tg_last_error();
    std::vector<uint32_t> tail(kTail);
    std::mt19937 trng(9);
    for (auto &x : tail) x = (uint32_t)trng();
    for (int o = 0; o < 2; o++) {
        std::vector<uint32_t> b((size_t)(M * N), 0x7fc00000u);
        b.insert(b.end(), tail.begin(), tail.end());
        EXPECT_EQ(tg_tensor_set(sinks[o], b.data(), 0, b.size() * 4), TG_OK);
    }
    tg_graph_stats st{};
    EXPECT_EQ(tg_graph_plan(g, &st), TG_OK) << tg_last_error();
    tgt::poison_compute_buffer(be, st.planned_bytes);
    EXPECT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
    if (be->mem == TG_MEM_DEVICE) tg_cuda_fusions_last(be, r.fusions);
    for (int o = 0; o < 2; o++) {
        std::vector<uint32_t> back((size_t)(M * N + kTail));
        EXPECT_EQ(tg_tensor_get(sinks[o], back.data(), 0, back.size() * 4), TG_OK);
        r.tails_ok = r.tails_ok && memcmp(back.data() + M * N, tail.data(), kTail * 4) == 0;
        std::vector<float> &f = o == 0 ? r.lone : r.resid;
        f.resize((size_t)(M * N));
        memcpy(f.data(), back.data(), f.size() * 4);
    }
    return r;
}

TEST(CudaFuse, NormFoldsIntoLoneAndResidualGemv) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tg_backend *gpu = tg_backend_cuda(0), *cpu = tg_backend_cpu(2);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> g1(gpu, tg_backend_free), g2(cpu, tg_backend_free);
    ASSERT_TRUE(gpu && cpu) << tg_last_error();
    const int64_t K = 512, M = small() ? 96 : 1000;
    for (tg_type wt : {TG_TYPE_F16, TG_TYPE_F32, TG_TYPE_BF16, TG_TYPE_Q4_0, TG_TYPE_Q8_0})
        for (int64_t N : {1, 2, 3}) {
            SCOPED_TRACE(std::string(tg_type_name(wt)) + " N " + std::to_string(N));
            std::mt19937 rng(31 + (unsigned)N);
            std::vector<float> v[7];
            const int64_t sizes[7] = {K * N, K, K * M, K * N, K, K * M, M * N};
            for (int i = 0; i < 7; i++) {
                const bool weight = i == 2 || i == 5, norm_w = i == 1 || i == 4;
                v[i] = tgt::random_floats(rng, (size_t)sizes[i], weight ? -0.05f : -1.0f, weight ? 0.05f : 1.0f);
                if (norm_w)
                    for (float &x : v[i]) x = 1.0f + 0.2f * x;
                if (weight && wt == TG_TYPE_F16)
                    for (float &x : v[i]) x = tg_fp16_to_fp32(tg_fp32_to_fp16(x));
                if (weight && wt == TG_TYPE_BF16)
                    for (float &x : v[i]) x = tg_bf16_to_fp32(tg_fp32_to_bf16(x));
            }
            tg_cuda_knobs(gpu)->norm_fold = 0;
            const fold_graph_out fused = fold_graph(gpu, wt, K, M, N, v);
            tg_cuda_knobs(gpu)->norm_fold = 1;
            const fold_graph_out nofold = fold_graph(gpu, wt, K, M, N, v);
            tg_cuda_knobs(gpu)->norm_fold = 0;
            const fold_graph_out ref = fold_graph(cpu, wt, K, M, N, v);
            if (HasFatalFailure()) return;
            EXPECT_TRUE(fused.tails_ok && nofold.tails_ok && ref.tails_ok) << "a sink's tail was overwritten";
            EXPECT_EQ(fused.fusions[5], 2) << "norms folded (lone and residual GEMV)";
            EXPECT_EQ(fused.fusions[1], 1) << "the product + residual as one GEMV";
            EXPECT_EQ(nofold.fusions[5], 0);
            const bool quant = tg_type_is_quantized(wt);
            for (int o = 0; o < 2; o++) {
                const std::vector<float> &f = o ? fused.resid : fused.lone, &u = o ? nofold.resid : nofold.lone,
                                         &c = o ? ref.resid : ref.lone;
                for (float x : f) ASSERT_TRUE(std::isfinite(x)) << "output " << o;
                EXPECT_LE(rel_l2(f, u), quant ? 1e-3 : 1e-5) << "output " << o << ": folded vs not";
                EXPECT_LE(rel_l2(f, c), quant ? 3e-2 : 1e-4) << "output " << o << ": folded vs CPU";
                EXPECT_LE(rel_l2(u, c), quant ? 3e-2 : 1e-4) << "output " << o << ": not folded vs CPU";
            }
            if (N % 2 != 0) continue;
            // norm weights broadcast by modulo: the norm kernel, as on the CPU
            const fold_graph_out bf = fold_graph(gpu, wt, K, M, N, v, true), bc = fold_graph(cpu, wt, K, M, N, v, true);
            if (HasFatalFailure()) return;
            EXPECT_TRUE(bf.tails_ok && bc.tails_ok) << "a sink's tail was overwritten";
            EXPECT_EQ(bf.fusions[5], 0) << "a norm weight of {K/2, 2} folded";
            EXPECT_EQ(bf.fusions[0], 2) << "rms_norm*w not fused";
            EXPECT_LE(rel_l2(bf.lone, bc.lone), quant ? 3e-2 : 1e-4) << "broadcast norm weight";
            EXPECT_LE(rel_l2(bf.resid, bc.resid), quant ? 3e-2 : 1e-4) << "broadcast norm weight";
        }
}

TEST(CudaFuse, GemvSeesWeightsTheGraphWroteJustBefore) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const int K = 2048, M = small() ? 256 : 2048;
    std::mt19937 rng(17);
    const std::vector<float> a = tgt::random_floats(rng, (size_t)K * M), x = tgt::random_floats(rng, K);
    tg_backend *gpu = tg_backend_cuda(0), *cpu = tg_backend_cpu(2);
    std::unique_ptr<tg_backend, void (*)(tg_backend *)> g1(gpu, tg_backend_free), g2(cpu, tg_backend_free);
    ASSERT_TRUE(gpu && cpu) << tg_last_error();
    const std::vector<float> got = norm_then_gemv(gpu, a, x, K, M), want = norm_then_gemv(cpu, a, x, K, M);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LE(tgt::rel_error(got, std::vector<double>(want.begin(), want.end())), 1e-5);
}

// Programmatic dependent launch (early weight loads included) changes no
// bits: a backend created with TG_CUDA_PDL=0 decodes the shipped llama, and a
// toy with 512 positions, with the default backend's tokens and logits, over
// replayed steps.
TEST(CudaFuse, PdlChangesNoBits) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    const std::string toy = toy_llama(512, 1024, 2, 512, 5, "pdl_llama");
    ASSERT_FALSE(toy.empty()) << tg_last_error();
    for (const std::string &path : {std::string(TG_SOURCE_DIR) + "/models/llama-recall.gguf", toy}) {
        std::vector<int32_t> toks[2];
        std::vector<float> logits[2];
        for (int pass = 0; pass < 2; pass++) {
            const char *old = getenv("TG_CUDA_PDL");
            const std::string saved = old ? old : "";
            if (pass == 1) setenv("TG_CUDA_PDL", "0", 1);
            tg_backend *gpu = tg_backend_cuda(0);
            if (old) setenv("TG_CUDA_PDL", saved.c_str(), 1);
            else unsetenv("TG_CUDA_PDL");
            ASSERT_NE(gpu, nullptr) << tg_last_error();
            std::unique_ptr<tg_backend, void (*)(tg_backend *)> guard(gpu, tg_backend_free);
            tgm::model *m = tgm::model_load(path.c_str(), gpu);
            ASSERT_NE(m, nullptr) << tg_last_error();
            int f[TG_CUDA_FUSION_KINDS];
            greedy_decode(gpu, m, small() ? 6 : 40, &toks[pass], &logits[pass], f);
            tgm::model_free(m);
            if (HasFatalFailure()) return;
        }
        expect_same(toks, logits);
    }
    std::remove(toy.c_str());
}

#else

TEST(CudaFuse, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif  // TG_HAVE_CUDA

}  // namespace
