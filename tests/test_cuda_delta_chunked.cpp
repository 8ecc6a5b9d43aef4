// test_cuda_delta_chunked.cpp - delta_rule's chunked tensor-core path on CUDA
// (cuda/delta_rule_chunked.cu) against a float64 oracle of the scan's
// definition: chunk edges and long T (1 .. 8193), head dims 16/24/64/128/256
// and one the tensor path leaves to the scan, grouped heads, Dk != Dv, log
// gates to -30, zero LINEAR and -inf LOG gates, beta 0 and 1, F32/F16/BF16
// q/k/v, F32/F16/BF16 o, F32/BF16 states, the SCAN switch, the chunk-parallel
// and single-kernel forms and the kernel each case must run (state chaining,
// NaN reach and the failed graph: test_cuda_delta_chunked_state.cpp).
// TG_TEST_SMALL=1 shrinks the long shapes (sanitizers).
#include "cuda_delta_chunked_util.h"

namespace {

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
    int prep_knob = 0;  // knob delta_chunk_prep (env TG_CUDA_DELTA_PREP)
    int bulk_knob = 0;  // knob delta_chunk_bulk (env TG_CUDA_DELTA_BULK)
    int fo_knob = 0;  // knob delta_chunk_fo (env TG_CUDA_DELTA_FO)
    bool bulk_ready = false;  // tg_cuda_delta_bulk_ready with the case's knobs
    int wg_state = -1;  // tg_cuda_delta_wgmma_state with the case's knobs
    [[maybe_unused]] int sms = 132;  // the SM count the backend's rules use (tg_cuda_sm_count)
    {
#ifdef TG_HAVE_CUDA
        const tg_cuda_sig_knobs saved = *tg_cuda_knobs(CudaSig::gpu);
        h16_knob = c.h16 != 0 ? c.h16 : saved.delta_chunk_h16;
        if (c.h16 != 0) tg_cuda_knobs(CudaSig::gpu)->delta_chunk_h16 = c.h16;
        prep_knob = saved.delta_chunk_prep;
        bulk_knob = saved.delta_chunk_bulk;
        fo_knob = saved.delta_chunk_fo;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_bv = c.bv;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_fused = c.fused;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_generic = c.generic;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_wg = c.wg;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_seg = c.seg;
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_gk = c.gk;
        // the chunk-parallel form's compile-time kernels: the default (0); the cases named "s128_"
        // ask for them (1), the other chunk-parallel cases at D128 keep the generic kernels (2)
        tg_cuda_knobs(CudaSig::gpu)->delta_chunk_phase_full = phase_full ? 1 : 2;
#endif
        run_gpu(d, o, st, &variant);
#ifdef TG_HAVE_CUDA
        if (CudaSig::gpu) wg_state = tg_cuda_delta_wgmma_state(CudaSig::gpu), sms = tg_cuda_sm_count(CudaSig::gpu);
        if (CudaSig::gpu) bulk_ready = tg_cuda_delta_bulk_ready(CudaSig::gpu);
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
    // AUTO at fewer heads than fill the GPU (the "wgbx_" and "wgbn_" cases, Dv 128): the single-kernel form on
    // delta_wgb_kernel exactly where docs/ops.md's rule says so for this device's SM count (BF16 q/k/v,
    // knob delta_chunk_wg 0, heads that fill or B Hv blocks of at least 5/12 (GATED_DELTA, T below 1024) /
    // 2/7 (GATED_LINEAR) of the SMs) and the device has wgmma; never elsewhere
    // GATED_LINEAR's segments where delta_wgb_kernel runs (docs/ops.md): knob n >= 2 asks for n, auto from T 1024
    // where the blocks (B Hv Dv / 128) fill at most half the SMs for SMs / blocks; at most 16, at least 4 chunks each
    // (auto) or 1 (asked), 64 KB of scratch a block and segment up to 256 MiB; then ceil(chunks / n) chunks a segment
    // and as many segments as that takes; 2 or more, or none
    // (no whole 128-column slice: never)
    const long long chunks = (c.T + 63) / 64, blocks = (long long)c.B * c.Hv * (c.Dv / 128);
    long long want_seg = 0;
    if (blocks > 0) {
        want_seg = c.seg >= 2 ? c.seg : 2 * blocks <= sms && c.T >= 1024 ? sms / blocks : 1;
        want_seg = std::min(std::min(want_seg, 16LL), c.seg >= 2 ? chunks : chunks / 4);
        want_seg = std::min(want_seg, (256LL << 20) / (blocks * 65536));
        if (want_seg >= 2) want_seg = (chunks + (chunks + want_seg - 1) / want_seg - 1) / ((chunks + want_seg - 1) / want_seg);
    }
    if (c.mode == TG_DELTA_GATED_DELTA || c.seg == 1 || want_seg < 2) want_seg = 0;
    const bool wgb_ran = variant.rfind("chunked-bf16/dk128/bv128/w16/full/wgmma", 0) == 0;
    const size_t seg_at = variant.find("/seg");
    EXPECT_EQ(seg_at == std::string::npos ? 0LL : std::atoll(variant.c_str() + seg_at + 4), wgb_ran ? want_seg : 0LL)
        << variant << " (segments) on " << sms << " SMs";
    if (std::string(c.name).rfind("seg_", 0) == 0 && wg_state == 0) EXPECT_TRUE(wgb_ran && want_seg >= 2) << c.name << ": " << variant;
    // delta_wgb_kernel's and the segment kernels' gate arrays: made beforehand by delta_gates_kernel unless knob
    // delta_chunk_gk is 1 (then by their warp 0)
    EXPECT_EQ(variant.find("/gk1") != std::string::npos, wgb_ran && c.gk == 1) << variant;
    if (std::string(c.name).rfind("wgbx_", 0) == 0 || std::string(c.name).rfind("wgbn_", 0) == 0) {
        const long long pairs = (long long)c.B * c.Hv;
        const bool rule = 2 * pairs > sms || (c.mode == TG_DELTA_GATED_DELTA ? pairs * 12 >= 5LL * sms && c.T < 1024
                                                                            : pairs * 7 >= 2LL * sms || want_seg >= 2);
        const bool want = c.io == TG_TYPE_BF16 && c.wg == 0 && rule && wg_state == 0;
        EXPECT_EQ(variant.rfind("chunked-bf16/dk128/bv128/w16/full/wgmma", 0) == 0, want) << variant << " on " << sms << " SMs";
        // (the cases are chosen so that on an H100 / H200's 132 SMs the rule says yes for "wgbx_", no for "wgbn_")
        if (sms == 132 && wg_state == 0) EXPECT_EQ(want, std::string(c.name).rfind("wgbx_", 0) == 0) << c.name;
    }
#endif
    const bool phases = variant.rfind("chunked-3p", 0) == 0;
    // the chunk-parallel form's BF16 output kernel (delta_out_wgb_kernel) where the full instances run with
    // BF16 q/k on a device with wgmma, unless knob delta_chunk_wg says no; its BF16 prep kernel where k and v
    // are BF16 (delta_prep_wgb_kernel, whatever q's type; unless knob delta_chunk_prep says no)
    const bool full3 = phases && variant.find("/full") != std::string::npos;
    const bool owgb = full3 && c.io == TG_TYPE_BF16 && q_type(c) == TG_TYPE_BF16 && c.wg == 0 && wg_state == 0;
    const bool pwgb = full3 && c.io == TG_TYPE_BF16 && c.wg == 0 && wg_state == 0 && prep_knob == 0;
    // where the state pass may make the output (fo: both, bulk copies, knob delta_chunk_fo 0 or 2; 32 columns or fewer)
    const bool fo_ok = owgb && pwgb && bulk_ready && fo_knob != 1 && variant.find("/full-s128") != std::string::npos;
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
        // knob delta_chunk_h16 is 1, or 0 (auto) at 16 columns or fewer, or 32 with GATED_DELTA or where
        // the state pass may make the output; else F32 rows (H16RowsMatchF32Rows compares the two)
        const bool narrow = variant.find("/bv8/") != std::string::npos || variant.find("/bv16/") != std::string::npos ||
                            (variant.find("/bv32/") != std::string::npos && (c.mode == TG_DELTA_GATED_DELTA || fo_ok));
        const bool want_h16 = variant.find("/full-s128") != std::string::npos && (h16_knob == 1 || (h16_knob == 0 && narrow));
        EXPECT_EQ(variant.find("/h16") != std::string::npos, want_h16) << variant;
        // F16 rows by bulk copies unless knob delta_chunk_bulk says no, on a compute capability 9.0 device
        // with code built for it (BulkCopiesMatchCpAsync compares the two); never without F16 rows
        EXPECT_EQ(variant.find("/h16/bulk") != std::string::npos, want_h16 && bulk_ready) << variant;
        if (bulk_knob != 0) EXPECT_FALSE(bulk_ready);
    }
    if (phases && !phase_full) EXPECT_EQ(variant.find("/full"), std::string::npos) << variant;  // knob 2
    // the BF16 prep and output kernels where they run (above)
    if (phases) {
        EXPECT_EQ(variant.find("/pwgb") != std::string::npos, pwgb) << variant;
        // the output made by the state pass instead (no output kernel) where both would run, the F16 rows come
        // by bulk copies and the slice has 32 columns or fewer, unless knob delta_chunk_fo says no
        // (FusedOutputMatchesOutputKernel compares the two)
        const bool narrow32 = variant.find("/bv8/") != std::string::npos || variant.find("/bv16/") != std::string::npos ||
                              variant.find("/bv32/") != std::string::npos;
        const bool fo = fo_ok && variant.find("/h16/bulk") != std::string::npos && narrow32;
        EXPECT_EQ(variant.find("/fo") != std::string::npos, fo) << variant;
        // with the state in two shared copies: GATED_LINEAR's unless knob delta_chunk_fo is 2
        // (FusedOutputTwoStateCopiesMatchOne compares the two)
        const bool s2 = c.mode == TG_DELTA_GATED_LINEAR && fo_knob != 2;
        EXPECT_EQ(variant.find("/fo2") != std::string::npos, fo && s2) << variant;
        EXPECT_EQ(variant.find("/owgb") != std::string::npos, owgb && !fo) << variant;
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
        // F32 rows in the state pass where the default takes F16 ones (knob delta_chunk_h16 2): GATED_DELTA at
        // BV 32 with -inf gates (the keep-zero products of a zero gamma), and BV 64's default F32 rows with them
        {"s128_gdn_log_-inf_gates_bv32_f32rows", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, F32, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 32, F32, 0, 0, 0, 0.0f, -1, 2},
        {"s128_gla_log_-inf_gates_bv64", 2, 200, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 64},
        {"s128_gla_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 16},
        {"s128_gdn_Hv4Hk1_log_gates_to_-30_bf16", 1, 300, 1, 4, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 16, F16},
        {"s128_gdn_bv16_bf16_knob1", 2, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 0, 0, 1},
        // BF16 k and v with an F32 or F16 q: the BF16 prep kernel ("/pwgb") beside the TF32 output kernel (the gate
        // kernel for the prep alone), h16 rows and F32 rows, both modes
        {"s128_gdn_bv16_f32q_bf16kv", 2, 200, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 0, 0, 0, 0.0f, F32},
        {"s128_gla_bv32_f16q_bf16kv", 2, 130, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32, F32, 0, 0, 0, 0.0f, F16},
        // a LOG gate of +85 at the short last chunk's first token (token 128 of 130), with a state: its decays
        // are finite (e^85) but times a zero padding row's 1 / |k| (1000) they overflow F32, so the BF16 prep
        // must not fold beta d / |k| into T there (session 49's review); BV 16 and 32, F16 and F32 state-pass rows
        {"s128_gdn_T130_gate85_last_chunk_bf16", 1, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 0, 0, 0, 85.0f, -1, 0, 128},
        {"s128_gdn_T130_gate85_last_chunk_bv32_f32rows", 1, 130, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32, F32, 0, 0, 0, 85.0f, -1, 2, 128},
        {"s128_gla_T130_gate85_last_chunk_bf16", 1, 130, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 32, F32, 0, 0, 0, 85.0f, -1, 0, 128},
        // GATED_LINEAR's segments on delta_wgb_kernel ("seg_": the test checks the count the rule gives): auto at
        // 32 pairs (gla.x32.bf16's heads: 4 segments on 132 SMs; from T 1024), and asked for: one-chunk segments
        // with linear zero gates and a state, a short last segment with -inf log gates, no l2norm, a BF16 state and
        // two column slices, 16 segments at long T (a one-token last segment at 8641) with an F16 output, log gates
        // to -30 (every segment's decay 0), a gate of +85 at the third segment's first token with a state, +100 at
        // the first token on no state with a -inf gate later in the same first segment (its decays inf, then 0,
        // a decay product the combine never reads), and the same in the middle one of three after zero values
        // (its decay product NaN with no decay NaN, meeting exact-zero state entries, which must stay zero as
        // in the walk, not turn NaN: the combine's NaN flag); and the single kernel without segments at long T
        // (knob 1)
        {"seg_gla_x32_auto", 2, 1030, 4, 16, 128, 128, GL, LOG, true, F32, BF16, AUTO},
        {"seg_gla_4x1_linear_zero_gates", 1, 256, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 0, F32, 0, 0, 0, 0.0f, -1, 0, 0, 4},
        {"seg_gla_3_short_last_-inf_gates_Hv4Hk1_Dv256_bf16_state", 2, 400, 1, 4, 128, 256, GL, LOG, false, BF16, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 0, F32, 0, 0, 0, 0.0f, -1, 0, 0, 3},
        {"seg_gla_16_f16_out", 1, S(8641, 1000), 1, 1, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F16, 0, 0, 0, 0.0f, -1, 0, 0, 16},
        {"seg_gla_5_gates_to_-30", 1, 600, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -30.0f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 0, 0, 0, 0.0f, -1, 0, 0, 5},
        {"seg_gla_gate85_at_third_segment", 1, 400, 1, 2, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 0, 0, 0, 85.0f, -1, 0, 256, 4},
        {"seg_gla_big_first_gate_then_-inf_no_state", 2, 384, 1, 2, 128, 128, GL, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 0, 0, 0, 100.0f, -1, 0, 0, 3, -INFINITY, 100},
        {"seg_gla_zero_v_then_big_then_-inf_mid_segment_no_state", 2, 384, 1, 2, 128, 128, GL, LOG, true, -1, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 0, F32, 0, 0, 0, 100.0f, -1, 0, 128, 3, -INFINITY, 200, 128},
        // the same kernels with their gate arrays made by warp 0 (knob delta_chunk_gk 1; the other cases take them
        // from delta_gates_kernel): segments with a short last one and -inf gates, linear negative and linear zero
        // gates on the single kernel, both modes
        {"seg_gla_gk1_3_short_last_-inf_gates_Hv4Hk1_Dv256_bf16_state", 2, 400, 1, 4, 128, 256, GL, LOG, false, BF16, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 9, 0, F32, 0, 0, 0, 0.0f, -1, 0, 0, 3, 0.0f, 0, 0, 1},
        {"full_gla_bf16k_gk1_linear_negative_gates", 2, 200, 1, 2, 128, 128, GL, LIN, true, F32, BF16, CHUNKED, -1.0f, 1.0f, 0.0f, 1.0f, 0, 128, F32, 1, 0, 0, 0.0f, -1, 0, 0, 0, 0.0f, 0, 0, 1},
        {"full_gdn_gk1_linear_zero_gates_bf16", 2, 200, 1, 2, 128, 128, GD, LIN, true, F32, BF16, CHUNKED, 0.7f, 1.0f, 0.0f, 1.0f, 11, 128, F32, 1, 0, 0, 0.0f, -1, 0, 0, 0, 0.0f, 0, 0, 1},
        {"full_gla_bf16k_T8193_noseg", 1, Tx, 1, 1, 128, 128, GL, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 128, BF16, 1, 0, 0, 0.0f, -1, 0, 0, 1},
        {"3p_generic_gdn_D128_bv16_bf16", 1, 300, 1, 2, 128, 128, GD, LOG, true, F32, BF16, CHUNKED, -0.2f, 0.0f, 0.0f, 1.0f, 0, 16, F32, 2, 1},
        // BF16 q/k/v at 48 and 64 (sequence, value head) pairs, fewer than fill the GPU: AUTO takes the
        // single-kernel form on delta_wgb_kernel ("wgbx_": the test checks it where the device has
        // wgmma), from T 32 at 64 pairs of GATED_DELTA
        {"wgbx_gdn_x64_auto", 4, 130, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbx_gdn_x64_T40_auto", 4, 40, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbx_gla_x48_auto", 3, 130, 4, 16, 128, 128, GL, LOG, false, -1, BF16, AUTO},
        // ... and not where the rule says no ("wgbn_": never the BF16 kernel; at T 130 with heads that do
        // not fill, AUTO runs the scan): 32 and 48 GATED_DELTA pairs, 64 at T 1030 (the chunk-parallel
        // form from T 1024 there), F16 q/k/v, knob delta_chunk_wg 2
        {"wgbn_gdn_x32_auto", 2, 130, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbn_gdn_x48_auto", 3, 130, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
        {"wgbn_gdn_x64_T1030_auto", 4, 1030, 4, 16, 128, 128, GD, LOG, true, F32, BF16, AUTO},
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

}  // namespace
