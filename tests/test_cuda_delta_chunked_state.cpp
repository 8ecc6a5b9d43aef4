// test_cuda_delta_chunked_state.cpp - the chunked delta rule's state on CUDA: T split anywhere
// equals one call (output and final state), W and Kd^T as F16 rows match F32 rows, the state pass's
// bulk copies match its cp.async ones, its output matches the output kernel's, a NaN reaches only its own head and later tokens, and a graph
// that found a bad id leaves every delta-rule state as it was (each kernel: the device error record). Cases and oracle: cuda_delta_chunked_util.h.
#include "cuda_delta_chunked_util.h"

namespace {

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

// One case run twice through the chunk-parallel form's compile-time kernels (knobs delta_chunk_fused 2,
// phase_full 1, the case's bv), run i with the knobs set(i, knobs) leaves: NaN and +-inf exactly where
// run 1 gives them (classes: only non-finite vs finite), and somewhere where the case has a bad key,
// nowhere else; the finite rest within tol (relative L2; 0: the same values), outputs and final state;
// run 0 within 2e-3 of the float64 oracle where no key is bad. k is scaled by kmul first.
struct hcase {
    ck_case c;
    float kmul;
    int bad_token;  // >= 0: one element of that token's key is bad_value
    float bad_value = NAN;
};
template <typename Set> void run_pair(const hcase &w, Set set, std::string (&var)[2], double tol, bool classes = true) {
    SCOPED_TRACE(w.c.name);
    ck_data d = make_ck(w.c, 77);
    for (float &x : d.k) x *= w.kmul;
    if (w.bad_token >= 0) d.k[(size_t)w.bad_token * w.c.Dk * w.c.Hk + 5] = w.bad_value;
    std::vector<float> o[2];
    store st[2];
    for (int i = 0; i < 2; i++) {
#ifdef TG_HAVE_CUDA
        const tg_cuda_sig_knobs saved = *tg_cuda_knobs(CudaSig::gpu);
        tg_cuda_sig_knobs *kn = tg_cuda_knobs(CudaSig::gpu);
        kn->delta_chunk_bv = w.c.bv, kn->delta_chunk_fused = 2, kn->delta_chunk_phase_full = 1;
        set(i, kn);
#endif
        EXPECT_EQ(run_gpu(d, o[i], st[i], &var[i]), TG_OK) << tg_last_error();
#ifdef TG_HAVE_CUDA
        *tg_cuda_knobs(CudaSig::gpu) = saved;
#endif
        EXPECT_NE(var[i].find("/full-s128"), std::string::npos) << var[i];
    }
    std::vector<float> s[2];
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < d.s0.size(); j++) s[i].push_back(st[i].get(j));
    auto agree = [&](const std::vector<float> &a, const std::vector<float> &b, const char *what) {
        ASSERT_EQ(a.size(), b.size());
        auto cls = [&](float x) { return std::isfinite(x) ? 0 : !classes ? 1 : std::isnan(x) ? 3 : x > 0 ? 1 : 2; };
        std::vector<float> fa;
        std::vector<double> fb;
        size_t bad_a = 0, bad_b = 0, mismatch = 0;
        for (size_t j = 0; j < a.size(); j++) {
            bad_a += cls(a[j]) != 0, bad_b += cls(b[j]) != 0;
            if (cls(a[j]) != cls(b[j])) mismatch++;
            else if (cls(a[j]) == 0) fa.push_back(a[j]), fb.push_back(b[j]);
        }
        EXPECT_EQ(mismatch, 0u) << what << ": NaN or inf in " << bad_a << " (" << var[0] << ") and " << bad_b << " (" << var[1] << ")";
        if (w.bad_token >= 0) EXPECT_GT(bad_b, 0u) << what << ": the bad key reached nothing";
        else EXPECT_EQ(bad_b, 0u) << what;
        const double e = tgt::rel_error(fa, fb);
        EXPECT_LE(e, tol) << what;
        std::printf("note: %s %s: %s vs %s relative L2 %.3g\n", w.c.name, what, var[0].c_str(), var[1].c_str(), e);
    };
    agree(o[0], o[1], "o");
    if (w.c.state >= 0) agree(s[0], s[1], "final state");
    if (w.bad_token >= 0) return;
    std::vector<double> oref, sref;
    oracle(d, oref, sref);
    EXPECT_LT(tgt::rel_error(o[0], oref), 2e-3) << "o (" << var[0] << ") vs float64 oracle";
    if (w.c.state >= 0) EXPECT_LT(tgt::rel_error(s[0], sref), 2e-3) << "final state (" << var[0] << ") vs float64 oracle";
}

// The chunk-parallel form's W and Kd^T between its kernels as F16 rows with power-of-two row scales
// (knob delta_chunk_h16 1; the default at 16 columns or fewer, 32 for GATED_DELTA) against F32 rows
// (2), state pass in registers both times: the F16 rows hold every value of at least 2^-14 of its
// row's largest exactly, so the two agree far inside the tensor path's tolerance (1e-5). Cases: gdn.long's slice width at long T; one and two chunks (no state); log gates
// to -30 (rows of Kd^T over 30 binades, W rows of tiny decays); keys far past F16's range
// (GATED_LINEAR without l2norm: |k| ~ 2.6e5, inf in F16 unscaled); a NaN key and an infinite one
// (GATED_LINEAR), which must give NaN and +-inf at the same outputs and state entries on both.
TEST_F(CudaDeltaChunkedState, H16RowsMatchF32Rows) {
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
        std::string var[2];
        run_pair(w, [](int i, [[maybe_unused]] void *kn) {
#ifdef TG_HAVE_CUDA
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_h16 = i == 0 ? 1 : 2;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_fo = 1;  // (the output kernel both times: fo needs F16 rows)
#endif
        }, var, 1e-5);
        EXPECT_NE(var[0].find("/h16"), std::string::npos) << var[0];
        EXPECT_EQ(var[1].find("/h16"), std::string::npos) << var[1];
    }
}

// Whether the backend takes bulk copies where knob delta_chunk_bulk is 0 (a compute capability 9.0 device
// and code built for it), whatever the knob says now.
bool bulk_capable() {
#ifdef TG_HAVE_CUDA
    tg_cuda_sig_knobs *kn = tg_cuda_knobs(CudaSig::gpu);
    const int saved = kn->delta_chunk_bulk;
    kn->delta_chunk_bulk = 0;
    const bool ready = tg_cuda_delta_bulk_ready(CudaSig::gpu);
    kn->delta_chunk_bulk = saved;
    return ready;
#else
    return false;
#endif
}

// The state pass's copies of F16 rows as bulk copies counted by mbarriers (knob delta_chunk_bulk 0, a
// compute capability 9.0 device) against cp.async by every thread (1): the same bytes land in the same
// places, so outputs and final states are the same values (NaN and inf included). Cases: every slice
// width of both modes (GATED_LINEAR copies no W), long T (the three buffers' phases wrap many times),
// one and two chunks (fewer chunks than buffers), a NaN key.
TEST_F(CudaDeltaChunkedState, BulkCopiesMatchCpAsync) {
    const int Tx = S(8193, 193);
    const hcase cases[] = {
        {{"gdn_bv16_T8193_bf16", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv8_T200", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8}, 1.0f, -1},
        {{"gdn_bv32_log_gates_to_-30", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gdn_bv64_T130_no_state_bf16", 2, 130, 2, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64}, 1.0f, -1},
        {{"gla_bv16_T2048_f16", 1, S(2048, 130), 1, 2, 128, 128, GL, LOG, true, F32, F16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gla_bv64_keys_past_f16", 2, 200, 1, 2, 128, 128, GL, LOG, false, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 64}, 3e6f, -1},
        {{"gdn_bv16_T64_one_chunk", 2, 64, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv32_T100_two_chunks_no_state", 1, 100, 1, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gdn_bv8_nan_key", 1, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8}, 1.0f, 150},
    };
    for (const hcase &w : cases) {
        std::string var[2];
        run_pair(w, [](int i, [[maybe_unused]] void *kn) {
#ifdef TG_HAVE_CUDA
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_h16 = 1;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_bulk = i == 0 ? 0 : 1;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_fo = 1;  // (the output kernel both times: fo needs bulk copies)
#endif
        }, var, 0.0);
        EXPECT_NE(var[0].find("/h16"), std::string::npos) << var[0];
        EXPECT_EQ(var[1].find("/bulk"), std::string::npos) << var[1];
        // (the knob is 0 in run 0: ready means a compute capability 9.0 device and code built for it)
        EXPECT_EQ(var[0].find("/h16/bulk") != std::string::npos, bulk_capable()) << var[0];
    }
}

// The chunk-parallel form's output made by the state pass (knob delta_chunk_fo 0: Q's and P's F16 rows
// from the prep kernel, TF32 products from the state in registers) against the output kernel's
// (delta_out_wgb_kernel, near-F32 products from S_c and V' through memory; knob 1), F16 rows by bulk
// copies both times: the two agree within the TF32 products' rounding (1e-3, 3e-3 for a BF16 output:
// its own rounding; run 0 also within 2e-3 of the float64 oracle), non-finite values at the same places
// (not always the same class: where the output kernel's hi / lo split of an infinite P meets a zero lo
// of V' it makes inf * 0 = NaN, where the TF32 product gives the infinity). Cases: both modes at every slice width it takes
// (8, 16, 32), long T, one chunk, a short last chunk without a state (rows past T unwritten), log gates
// to -30 and -inf gates (decays that overflow: an exact zero stays zero), keys far past F16's range
// without l2norm (2^21 times) (P's block scales), a BF16 output, a NaN key and an infinite one.
TEST_F(CudaDeltaChunkedState, FusedOutputMatchesOutputKernel) {
    const int Tx = S(8193, 193);
    const hcase cases[] = {
        {{"gdn_bv16_T8193", 1, Tx, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv8_T200", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8}, 1.0f, -1},
        {{"gdn_bv32_log_gates_to_-30", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gdn_bv16_-inf_gates_no_l2norm_bf16_out", 2, 200, 1, 2, 128, 128, GD, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 16, BF16}, 1.0f, -1},
        {{"gla_bv16_T2048", 1, S(2048, 130), 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gla_bv32_keys_past_f16", 2, 200, 1, 2, 128, 128, GL, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 2097152.0f, -1},
        {{"gla_bv8_linear_zero_gates", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 8}, 1.0f, -1},
        {{"gdn_bv16_T64_one_chunk", 2, 64, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gdn_bv32_T100_two_chunks_no_state", 1, 100, 1, 2, 128, 128, GD, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gdn_bv8_nan_key", 1, 200, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 8}, 1.0f, 150},
        {{"gla_bv16_inf_key", 1, 200, 1, 2, 128, 128, GL, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, 100, INFINITY},
    };
    for (const hcase &w : cases) {
        std::string var[2];
        run_pair(w, [](int i, [[maybe_unused]] void *kn) {
#ifdef TG_HAVE_CUDA
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_h16 = 1;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_bulk = 0;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_fo = i == 0 ? 0 : 1;
#endif
        }, var, w.c.out == TG_TYPE_F32 ? 1e-3 : 3e-3, false);
        EXPECT_EQ(var[1].find("/fo"), std::string::npos) << var[1];
        EXPECT_NE(var[1].find("/owgb"), std::string::npos) << var[1];
#ifdef TG_HAVE_CUDA
        // (run 0 takes it wherever both BF16 kernels and the bulk copies run: wgmma and compute capability 9.0)
        const bool ready = tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0 && bulk_capable();
        EXPECT_EQ(var[0].find("/h16/bulk") != std::string::npos && var[0].find("/fo") != std::string::npos, ready) << var[0];
#endif
    }
}

// GATED_LINEAR's fo pass with the state in two shared copies (s2, knob delta_chunk_fo 0) against one
// copy (knob 2, session 47's form): the same products in the same order, so the same values; odd and
// even chunk counts (the final state comes from either copy), one chunk without a state, linear zero
// gates, slices of 8, 16 and 32. GATED_DELTA keeps one copy under both knobs.
TEST_F(CudaDeltaChunkedState, FusedOutputTwoStateCopiesMatchOne) {
    const hcase cases[] = {
        {{"gla_bv32_T900_odd_chunks", 1, S(900, 130), 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gla_bv16_T1000_even_chunks", 2, S(1000, 200), 1, 2, 128, 128, GL, LOG, false, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16}, 1.0f, -1},
        {{"gla_bv8_linear_zero_gates", 2, 130, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 8}, 1.0f, -1},
        {{"gla_bv32_T64_one_chunk_no_state", 2, 64, 1, 2, 128, 128, GL, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
        {{"gdn_bv32_T900_one_copy", 1, S(900, 130), 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32}, 1.0f, -1},
    };
    for (const hcase &w : cases) {
        std::string var[2];
        run_pair(w, []([[maybe_unused]] int i, [[maybe_unused]] void *kn) {
#ifdef TG_HAVE_CUDA
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_h16 = 1;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_bulk = 0;
            ((tg_cuda_sig_knobs *)kn)->delta_chunk_fo = i == 1 ? 2 : 0;
#endif
        }, var, 0.0);
#ifdef TG_HAVE_CUDA
        const bool ready = tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0 && bulk_capable();
        const bool gla = w.c.mode == GL;
        EXPECT_EQ(var[0].find("/fo2") != std::string::npos, ready && gla) << var[0];
        EXPECT_EQ(var[1].find("/fo") != std::string::npos && var[1].find("/fo2") == std::string::npos, ready) << var[1];
        if (!gla) EXPECT_EQ(var[0], var[1]);
#endif
    }
}

// A NaN input is reported by propagation (docs/ops.md "NaN"): a NaN in one value element of token r
// reaches that value column of its own head and sequence from r on (outputs and final state), a
// NaN gate the whole head from r on; the chunks before r's, other heads and other sequences stay
// finite. Inside r's chunk of 64 the tensor-core products may also reach earlier tokens (masked
// products multiply exact zeros by NaN), so those are not checked. Each single-kernel full-case
// kernel: BF16 products (delta_wgb_kernel, both modes), TF32 wgmma (F16 inputs; BF16 by knob 2),
// mma.sync (knob 1), F32 inputs; and the chunk-parallel form with BF16 inputs (its prep on BF16
// wgmma: a NaN gate makes the chunk's decays non-finite, so its keep-zero products run).
TEST_F(CudaDeltaChunkedState, NanInputStaysInItsHeadAndLaterTokens) {
    struct nan_case {
        const char *name;
        tg_delta_mode mode;
        tg_type io;
        int wg;         // knob delta_chunk_wg
        bool gate_nan;  // else one value element
        bool phases;    // the chunk-parallel form (knob delta_chunk_fused 2)
        int seg = 0;    // knob delta_chunk_seg (GATED_LINEAR's segments: 4 of one chunk, the NaN in the third)
    };
    const int T = 200, r = 150, col = 37, bad_b = 1, bad_h = 0;  // r in the chunk [128, 192)
    for (const nan_case &w : {nan_case{"gla_bf16k_v", GL, BF16, 0, false, false}, nan_case{"gdn_bf16k_v", GD, BF16, 0, false, false},
                              nan_case{"gla_bf16k_g", GL, BF16, 0, true, false}, nan_case{"gdn_bf16k_g", GD, BF16, 0, true, false},
                              nan_case{"gdn_tf32_f16_v", GD, F16, 0, false, false}, nan_case{"gla_tf32_bf16_g", GL, BF16, 2, true, false},
                              nan_case{"gdn_mma_bf16_v", GD, BF16, 1, false, false}, nan_case{"gla_f32_g", GL, F32, 0, true, false},
                              nan_case{"gdn_3p_bf16_g", GD, BF16, 0, true, true}, nan_case{"gdn_3p_bf16_v", GD, BF16, 0, false, true},
                              nan_case{"gla_3p_bf16_g", GL, BF16, 0, true, true},
                              nan_case{"gla_bf16k_v_seg4", GL, BF16, 0, false, false, 4}, nan_case{"gla_bf16k_g_seg4", GL, BF16, 0, true, false, 4}}) {
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
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = w.phases ? 2 : 1;
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = w.phases ? 0 : 128;
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_wg = w.wg;
                tg_cuda_knobs(CudaSig::gpu)->delta_chunk_seg = w.seg;
            }
#endif
            ASSERT_EQ(run_gpu(d, o, st, &variant), TG_OK) << tg_last_error();
        }
        EXPECT_NE(variant.find("/full"), std::string::npos) << variant;
#ifdef TG_HAVE_CUDA
        // the kernel the case names: BF16 products (BF16 inputs, knob 0), TF32 wgmma (16-bit inputs,
        // knob 0 or 2), mma.sync (knob 1, F32 inputs); where the device has no wgmma, mma.sync
        if (CudaSig::gpu && w.phases) {  // (the BF16 prep where the device has the wgmma code)
            EXPECT_EQ(variant.rfind("chunked-3p/", 0), 0u) << variant;
            EXPECT_EQ(variant.find("/pwgb") != std::string::npos, tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0) << variant;
        } else if (CudaSig::gpu && tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0) {
            const bool wg16 = w.io != TG_TYPE_F32 && w.wg != 1;
            EXPECT_EQ(variant.find("/wgmma") != std::string::npos, wg16) << variant;
            EXPECT_EQ(variant.rfind("chunked-bf16/", 0) == 0, w.io == TG_TYPE_BF16 && w.wg == 0) << variant;
            EXPECT_EQ(variant.find("/seg4") != std::string::npos, w.seg == 4) << variant;
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
        int seg = 0;  // knob delta_chunk_seg (GATED_LINEAR's segments: the last one's blocks write the state)
    };
    for (const variant &w : {variant{"chunked", 70, 0, CHUNKED, 2}, variant{"chunked_fused", 70, 0, CHUNKED, 1},
                             variant{"chunked_full", 70, 0, CHUNKED, 1, 128, 128}, variant{"chunked_s128", 70, 0, CHUNKED, 2, 128, 16},
                             variant{"chunked_full_gla_bf16", 70, 0, CHUNKED, 1, 128, 128, GL, BF16},
                             variant{"chunked_full_gla_bf16_seg2", 200, 0, CHUNKED, 1, 128, 128, GL, BF16, 2},
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
        if (CudaSig::gpu) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_seg = w.seg;
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
        if (w.seg && CudaSig::gpu)
            EXPECT_EQ(ran.find("/seg2") != std::string::npos, tg_cuda_delta_wgmma_state(CudaSig::gpu) == 0) << ran;
#endif
        if (w.bv == 16) EXPECT_NE(ran.find("/full-s128"), std::string::npos) << "variant " << ran;
        EXPECT_NE(st.b, d.st0.b) << "a good graph did not write the state";
    }
}

}  // namespace
