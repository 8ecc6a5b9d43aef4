// emu_main.cpp - the harness of the chunk-parallel delta rule's emulation (README.md): deterministic
// BF16 inputs, the host sequence of run_phases (cuda/delta_rule_chunked_phases.cu) for fo, h16 and
// bulk copies -- delta_gates_kernel, delta_prep_wgb_kernel<DELTA, true>, delta_state128_kernel<BV,
// DELTA, true, true, true> -- every block on the emulated block (emu_rt.cpp + the kernel TUs), a
// float64 sequential oracle (scripts/wgmma_emu's: tg_delta_rule's recurrence, docs/ops.md) and the
// comparison. Usage: emu [CASE-SUBSTRING] [--order N] [--stats]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu_api.h"

#include "emu_case.h"


// wgb: delta_wgb_kernel (BF16 q/k/v; <c.delta> where it is the template) instead of delta_wg_kernel

struct Result {
    bool cover_ok;
    int s2 = 0;
    std::vector<float> o, s;
};

// the three kernels of run_phases (fo = 1, h16 = 1, bulk), value columns BV
static Result run_phases(const Case &c, const Inputs &in, int order, float scale, int BV, bool stats) {
    const int Dk = in.Dk;
    Buf bq, bk, bv, bg, bb, bs, bo, bscr;
    bq.alloc(in.q.size() * 2), bk.alloc(in.k.size() * 2), bv.alloc(in.v.size() * 2);
    memcpy(bq.data(), in.q.data(), bq.bytes), memcpy(bk.data(), in.k.data(), bk.bytes), memcpy(bv.data(), in.v.data(), bv.bytes);
    bg.alloc(in.g.size() * 4), bb.alloc(in.beta.size() * 4);
    memcpy(bg.data(), in.g.data(), bg.bytes), memcpy(bb.data(), in.beta.data(), bb.bytes);
    bs.alloc(in.s0.size() * 4);
    memcpy(bs.data(), in.s0.data(), bs.bytes);
    const size_t no = (size_t)c.Dv * c.Hv * c.T * c.B;
    bo.alloc(no * 4);
    memset(bo.data(), 0xFF, bo.bytes);  // NaN pattern: unwritten outputs show
    EmuPhase a = {};
    a.q = desc(bq.data(), 2, Dk, c.Hk, c.T, c.B);
    a.k = desc(bk.data(), 2, Dk, c.Hk, c.T, c.B);
    a.v = desc(bv.data(), 2, c.Dv, c.Hv, c.T, c.B);
    a.g = desc(bg.data(), 0, c.Hv, c.T, c.B, 1);
    a.beta = desc(bb.data(), 0, c.Hv, c.T, c.B, 1);
    a.state = desc(bs.data(), 0, Dk, c.Dv, c.Hv, c.B);
    a.o = desc(bo.data(), 0, c.Dv, c.Hv, c.T, c.B);
    // run_phases: chunk_args' fields, then the phases' own
    a.Dk = Dk, a.Dv = c.Dv, a.Hk = c.Hk, a.Hv = c.Hv, a.T = c.T;
    a.delta = c.delta, a.log_gate = 1, a.l2norm = c.l2norm, a.scale = scale;
    a.DKP = 128, a.DVP = (c.Dv + 7) / 8 * 8;
    const long long NC = (c.T + 63) / 64, units = NC * c.Hv * c.B;
    a.NC = (int)NC;
    const size_t optin = 232448;  // sm_90's opt-in shared memory per block
    a.BV = BV, a.nslices = (a.DVP + BV - 1) / BV, a.nbuf = tg_emu_state_nbuf_old(a.DKP, BV, optin);
    a.qk_vec = 1, a.o_pair = 1, a.v_vec = 1;
    a.h16 = 1, a.fo = 1;
    a.s2 = tg_emu_s2_rule(BV, a.delta, optin);  // (0 on trees without it)
    size_t off[8];
    const size_t bytes = tg_emu_phase_scratch(units, a.DKP, a.DVP, a.delta, a.fo, off);
    bscr.alloc(bytes);
    memset(bscr.data(), 0xFF, bytes);  // NaN pattern: a read of something no kernel wrote shows
    float *scr = (float *)bscr.data();
    a.W = scr + off[0], a.Kd = scr + off[1], a.U = scr + off[2], a.S = nullptr, a.gam = scr + off[4];
#if TG_EMU_HAS_VD
    if (!a.delta) a.U = nullptr;  // (GATED_LINEAR with fo: the state pass reads v; no U scratch)
#endif
    a.G = scr + off[5], a.Qh = scr + off[6], a.Ph = scr + off[7];
    auto inputs = [&](int scr_kind, bool state) {
        emu_clear_globals();
        emu_add_global("q", bq.data(), bq.bytes, 0);
        emu_add_global("k", bk.data(), bk.bytes, 0);
        emu_add_global("v", bv.data(), bv.bytes, 0);
        emu_add_global("g", bg.data(), bg.bytes, 0);
        emu_add_global("beta", bb.data(), bb.bytes, 0);
        emu_add_global("scratch", bscr.data(), bscr.bytes, scr_kind);
        if (state) {
            emu_add_global("state", bs.data(), bs.bytes, 2);
            emu_add_global("o", bo.data(), bo.bytes, 1);
        } else {  // (not the gates' or prep's to touch)
            emu_add_global("state", bs.data(), bs.bytes, 0);
            emu_add_global("o", bo.data(), bo.bytes, 0);
        }
    };
    // 1. delta_gates_kernel<<<(units + 7) / 8, 256>>> (static shared memory)
    inputs(1, false);
    emu_set_threads(256);
    emu_set_smem(tg_emu_gates_smem_host(), tg_emu_gates_smem_bytes(), 1024, tg_emu_gates_smem(), {{"sg", 0}});
    for (long long blk = 0; blk < (units + 7) / 8; blk++) emu_run_block((int)blk, order, [&]() { tg_emu_gates(a, units); });
    if (stats) emu_print_stats();
    // 2. delta_prep_wgb_kernel<DELTA, FO><<<units, kNT, kSmemP>>> (the kernel aligns its base to 1024)
    inputs(1, false);
    emu_set_threads(tg_emu_prep_threads());
    emu_set_smem(tg_emu_prep_smem_host(), tg_emu_prep_smem_host_bytes(), 16, tg_emu_prep_smem(), tg_emu_prep_layout());
    for (long long blk = 0; blk < units; blk++) emu_run_block((int)blk, order, [&]() { tg_emu_prep(c.delta, 1, a); });
    if (stats) emu_print_stats();
    // 3. the state pass <<<nslices Hv B, state128_threads(fo), state128_smem(BV, h16, fo)>>>
    inputs(0, true);
    emu_set_threads(tg_emu_state_threads());
    emu_set_smem(tg_emu_state_smem_host(), tg_emu_state_smem_host_bytes(), 1024, tg_emu_state_smem(BV, a), tg_emu_state_layout(BV, a));
    for (long long blk = 0; blk < (long long)a.nslices * c.Hv * c.B; blk++)
        emu_run_block((int)blk, order, [&]() { tg_emu_state(BV, c.delta, a); });
    if (stats) emu_print_stats();
    Result r;
    r.cover_ok = true;
    r.s2 = a.s2;
    const auto &wo = emu_global_writes("o");
    for (size_t i = 0; i < wo.size(); i++)
        if (wo[i] != 1) {
            r.cover_ok = false;
            emu_finding("output byte written != once", "o byte " + std::to_string(i) + " written " + std::to_string(wo[i]) + "x");
            break;
        }
    const auto &ws = emu_global_writes("state");
    for (size_t i = 0; i < ws.size(); i++)
        if (ws[i] != 1) {
            r.cover_ok = false;
            emu_finding("state byte written != once", "state byte " + std::to_string(i) + " written " + std::to_string(ws[i]) + "x");
            break;
        }
    r.o.resize(no);
    memcpy(r.o.data(), bo.data(), no * 4);
    r.s.resize(in.s0.size());
    memcpy(r.s.data(), bs.data(), bs.bytes);
    return r;
}

int main(int argc, char **argv) {
    std::string filter;
    int order = 0;
    bool stats = false;
    if (!emu_args(argc, argv, "[CASE-SUBSTRING] [--order 0|1|2] [--stats]", filter, order, stats, [](int &) { return false; }))
        return 2;
    // name, delta, T, B, Hk, Hv, Dv, glo, ghi, ninf, l2norm, has_state, otype (F32)
    const Case cases[] = {
        {"gd_T64", 1, 64, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gd_T130", 1, 130, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gd_T130_weak_gates_beta1", 1, 130, 1, 1, 2, 128, -0.01f, 0.0f, 0, 1, 1, 0, 0, 2, 2},
        {"gd_T200", 1, 200, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gl_T64", 0, 64, 1, 1, 2, 128, -0.2f, 0.0f, 0, 0, 1, 0},
        {"gl_T130", 0, 130, 1, 1, 2, 128, -0.2f, 0.0f, 0, 0, 1, 0},
        {"gl_T200", 0, 200, 1, 1, 2, 128, -0.2f, 0.0f, 0, 0, 1, 0},
        // a LOG gate of +85 at the short last chunk's first token: its decays are finite (e^85) but times a
        // zero padding row's 1 / |k| (1000) they overflow (session 49's review of the prep's scaled T tiles)
        {"gd_T130_g85", 1, 130, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 1, 0, 0, 2, 0, 0, 85.0f, 128},
    };
    const int bvs[] = {8, 16, 32};
    const float scale = 1.0f / std::sqrt(128.0f);
    int bad = 0, runs = 0;
    double orel_hi = 0, srel_hi = 0;
    for (const Case &c : cases)
        for (int BV : bvs) {
            const std::string cname = std::string(c.name) + "_bv" + std::to_string(BV);
            if (!filter.empty() && cname.find(filter) == std::string::npos) continue;
            const Inputs in = make_inputs(c);
            std::vector<double> oref, sref;
            oracle(c, in, scale, oref, sref);
            emu_clear_findings();
            const Result r = run_phases(c, in, order, scale, BV, stats);
            runs++;
            const double orel = relL2(oref, r.o), srel = relL2(sref, r.s);
            bool finite = true;
            for (float x : r.o) finite &= std::isfinite(x);
            for (float x : r.s) finite &= std::isfinite(x);
            const bool ok = orel < 2e-3 && srel < 2e-3 && finite && r.cover_ok;
            printf("%-14s %s%s  o rel-L2 %.3e  state rel-L2 %.3e  %s%s\n", cname.c_str(), c.delta ? "GATED_DELTA " : "GATED_LINEAR", r.s2 ? " s2" : "   ", orel, srel,
                   ok ? "OK" : "MISMATCH", finite ? "" : " NaN/inf");
            fflush(stdout);
            const int nf = emu_print_findings(argv[0]);
            if (!ok || nf) bad++;
            orel_hi = std::max(orel_hi, orel), srel_hi = std::max(srel_hi, srel);
        }
    if (!runs) {
        printf("no case ran (filter '%s')\n", filter.c_str());
        return 2;
    }
    printf("%s: %d runs, o rel-L2 <= %.1e, state rel-L2 <= %.1e (tolerance 2e-3)\n",
           bad ? "SOME CASES FAILED OR HAD FINDINGS" : "ALL CASES OK, NO FINDINGS", runs, orel_hi, srel_hi);
    return bad ? 1 : 0;
}
