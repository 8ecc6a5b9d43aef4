// emu_main.cpp - the harness: deterministic inputs, every block of a small problem run on the
// emulated block (emu_rt.cpp + emu_kernel.cpp), a float64 sequential oracle of tg_delta_rule's
// recurrence (docs/ops.md), and the comparison.
// Usage: emu [CASE-SUBSTRING] [--order N] [--base B] [--all-orders] [--stats]
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

struct Result {
    bool cover_ok;
    std::vector<float> o, s;
};

// wgb: delta_wgb_kernel (BF16 q/k/v; <c.delta> where it is the template) instead of delta_wg_kernel;
// nseg >= 2 (GATED_LINEAR, wgb): delta_wgb_seg_kernel<1> over the first nseg - 1 segments' blocks, then
// <2> over every segment's (as tg_cuda_delta_wgb_seg_launch; nseg asked for, recomputed as the host does);
// wgb on a tree whose BF16 kernels read gate arrays made beforehand (tg_emu_has_g): those first, by
// delta_gates_kernel's work (tg_emu_gates_b), unless gk1 (knob delta_chunk_gk 1: made by the kernel's warp 0)
static Result run_kernel(const Case &c, const Inputs &in, int order, uint32_t sbase, float scale, bool wgb, int nseg = 0,
                         bool gk1 = false) {
    const int Dk = in.Dk;
    Buf bq, bk, bv, bg, bb, bs, bo;
    bq.alloc(in.q.size() * 2), bk.alloc(in.k.size() * 2), bv.alloc(in.v.size() * 2);
    memcpy(bq.data(), in.q.data(), bq.bytes), memcpy(bk.data(), in.k.data(), bk.bytes), memcpy(bv.data(), in.v.data(), bv.bytes);
    bg.alloc(in.g.size() * 4), bb.alloc(in.beta.size() * 4);
    memcpy(bg.data(), in.g.data(), bg.bytes), memcpy(bb.data(), in.beta.data(), bb.bytes);
    bs.alloc(in.s0.size() * 4);
    memcpy(bs.data(), in.s0.data(), bs.bytes);
    const size_t no = (size_t)c.Dv * c.Hv * c.T * c.B;
    const int oes = c.otype == 0 ? 4 : 2;
    bo.alloc(no * oes);
    memset(bo.data(), 0xFF, bo.bytes);  // NaN pattern: unwritten outputs show
    EmuArgs a = {};
    a.q = desc(bq.data(), c.qkvtype, Dk, c.Hk, c.T, c.B);
    a.k = desc(bk.data(), c.qkvtype, Dk, c.Hk, c.T, c.B);
    a.v = desc(bv.data(), c.qkvtype, c.Dv, c.Hv, c.T, c.B);
    a.g = desc(bg.data(), 0, c.Hv, c.T, c.B, 1);
    a.beta = desc(bb.data(), 0, c.Hv, c.T, c.B, 1);
    a.state = c.has_state ? desc(bs.data(), 0, Dk, c.Dv, c.Hv, c.B) : desc(nullptr, 0, 1, 1, 1, 1);
    if (!c.has_state) a.state.nb[0] = a.state.nb[1] = a.state.nb[2] = a.state.nb[3] = 0;
    a.o = desc(bo.data(), c.otype, c.Dv, c.Hv, c.T, c.B);
    a.Dk = Dk, a.Dv = c.Dv, a.Hk = c.Hk, a.Hv = c.Hv, a.B = c.B, a.T = c.T;
    a.delta = c.delta, a.log_gate = !c.lin, a.l2norm = c.l2norm, a.scale = scale;
    a.DKP = 128, a.BV = 128, a.nslices = c.Dv / 128, a.qk_vec = 1, a.v_vec = 1, a.o_pair = 1;
    emu_clear_globals();
    emu_add_global("q", bq.data(), bq.bytes, 0);
    emu_add_global("k", bk.data(), bk.bytes, 0);
    emu_add_global("v", bv.data(), bv.bytes, 0);
    emu_add_global("g", bg.data(), bg.bytes, 0);
    emu_add_global("beta", bb.data(), bb.bytes, 0);
    if (c.has_state) emu_add_global("state", bs.data(), bs.bytes, 2);
    emu_add_global("o", bo.data(), bo.bytes, 1);
    const int blocks = c.B * c.Hv * (c.Dv / 128);
    Buf bss, bsg;
    if (nseg >= 2) {
        const long long nch = (c.T + 63) / 64, cps = (nch + nseg - 1) / nseg;
        a.nseg = (int)((nch + cps - 1) / cps), a.tseg = cps * 64;
        bss.alloc((size_t)blocks * a.nseg * 16384 * 4), bsg.alloc((size_t)c.B * c.Hv * (a.nseg - 1) * 8);
        memset(bss.data(), 0xFF, bss.bytes), memset(bsg.data(), 0xFF, bsg.bytes);  // (NaN: unwritten entries show)
        a.seg_s = (float *)bss.data(), a.seg_g = (float *)bsg.data();
        emu_add_global("segment states", bss.data(), bss.bytes, 1);
        emu_add_global("segment decays", bsg.data(), bsg.bytes, 1);
    }
    Buf bgt;
    if (wgb && tg_emu_has_g() && !gk1) {  // the gate arrays: each byte written once, then an input
        const long long units = (c.T + 63) / 64 * c.Hv * c.B;
        bgt.alloc((size_t)units * tg_emu_gate_words() * 4);
        memset(bgt.data(), 0xFF, bgt.bytes);
        a.G = (float *)bgt.data();
        emu_add_global("gate arrays", bgt.data(), bgt.bytes, 1);
        emu_set_threads(256);
        emu_set_smem(tg_emu_smem_host(), tg_emu_smem_host_bytes(), 1024, tg_emu_gates_smem(), {{"sg", 0}});
        for (long long blk = 0; blk < (units + 7) / 8; blk++) emu_run_block((int)blk, order, [&]() { tg_emu_gates_b(a, units); });
        emu_set_threads(512);
        const auto &w = emu_global_writes("gate arrays");
        for (size_t i = 0; i < w.size(); i++)
            if (w[i] != 1) {
                emu_finding("gate array byte written other than once", "byte " + std::to_string(i) + " written " + std::to_string(w[i]) + "x");
                break;
            }
        emu_set_global_kind("gate arrays", 0);
    }
    const size_t ksm = a.G ? tg_emu_kSmemBP(c.delta) : wgb ? tg_emu_kSmemB(c.delta) : tg_emu_kSmem(c.delta);
    // the shared window: the dynamic allocation starts at sbase (16-byte aligned); the kernel aligns
    emu_set_smem(tg_emu_smem_host(), tg_emu_smem_host_bytes(), sbase, ksm,
                 a.G ? tg_emu_layout_bp(c.delta) : wgb ? tg_emu_layout_b(c.delta) : tg_emu_layout(c.delta));
    if (nseg >= 2) {
        for (int seg = 1; seg <= 2; seg++)
            for (int blk = 0; blk < blocks * (seg == 1 ? a.nseg - 1 : a.nseg); blk++)
                emu_run_block(blk, order, [&]() { tg_emu_kernel_seg(seg, a); });
    } else {
        for (int blk = 0; blk < blocks; blk++)
            emu_run_block(blk, order, [&]() {
                if (wgb) tg_emu_kernel_b(c.delta, a);
                else tg_emu_kernel(c.delta, a);
            });
    }
    if (nseg >= 2) {  // SEG 1 wrote every segment state and decay once (the last slot, the call's state, where it has one)
        for (const char *nm : {"segment states", "segment decays"}) {
            const auto &w = emu_global_writes(nm);
            const size_t slot = (size_t)16384 * 4;
            for (size_t i = 0; i < w.size(); i++) {
                const bool state_copy = std::string(nm) == "segment states" && (i / slot) % a.nseg == (size_t)a.nseg - 1;
                if (w[i] != (state_copy && !c.has_state ? 0 : 1)) {
                    emu_finding("segment scratch byte written other than once", std::string(nm) + " byte " + std::to_string(i) + " written " + std::to_string(w[i]) + "x");
                    break;
                }
            }
        }
    }
    Result r;
    r.cover_ok = true;
    const auto &wo = emu_global_writes("o");
    for (size_t i = 0; i < wo.size(); i++)
        if (wo[i] != 1) {
            r.cover_ok = false;
            emu_finding("output byte written != once", "o byte " + std::to_string(i) + " written " + std::to_string(wo[i]) + "x");
        }
    if (c.has_state) {
        const auto &ws = emu_global_writes("state");
        for (size_t i = 0; i < ws.size(); i++)
            if (ws[i] != 1) {
                r.cover_ok = false;
                emu_finding("state byte written != once", "state byte " + std::to_string(i) + " written " + std::to_string(ws[i]) + "x");
            }
    }
    r.o.resize(no);
    for (size_t i = 0; i < no; i++) {
        if (c.otype == 0) memcpy(&r.o[i], bo.data() + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, bo.data() + 2 * i, 2);
            r.o[i] = bf2f(h);
        }
    }
    r.s.resize(in.s0.size());
    memcpy(r.s.data(), bs.data(), bs.bytes);
    return r;
}

// per chunk of 64 tokens, the o rel-L2; and the largest element error over rms(o)
static void print_chunks(const Case &c, const std::vector<double> &oref, const std::vector<float> &o) {
    std::string pc;
    double mx = 0, rms = 0;
    for (double x : oref) rms += x * x;
    rms = std::sqrt(rms / oref.size());
    for (long long c0 = 0; c0 < c.T; c0 += 64) {
        double num = 0, den = 0;
        for (int b = 0; b < c.B; b++)
            for (long long t = c0; t < std::min(c.T, c0 + 64); t++)
                for (size_t j = 0; j < (size_t)c.Dv * c.Hv; j++) {
                    const size_t i = j + (size_t)c.Dv * c.Hv * (t + c.T * b);
                    const double d = o[i] - oref[i];
                    num += d * d, den += oref[i] * oref[i], mx = std::max(mx, std::fabs(d) / rms);
                }
        char b[48];
        snprintf(b, sizeof b, " %.2e", std::sqrt(num / den));
        pc += b;
    }
    printf("    o rel-L2 per chunk:%s; max |err| / rms(o) %.2e\n", pc.c_str(), mx);
}

int main(int argc, char **argv) {
    std::string filter;
    int order = 0;
    uint32_t sbase = 16;
    bool all_orders = false, stats = false;
    auto more = [&](int &i) {
        if (!strcmp(argv[i], "--base") && i + 1 < argc) return sbase = (uint32_t)atoi(argv[++i]), true;
        if (!strcmp(argv[i], "--all-orders")) return all_orders = true;
        return false;
    };
    if (!emu_args(argc, argv, "[CASE-SUBSTRING] [--order 0|1|2] [--base B] [--all-orders] [--stats]", filter, order, stats, more))
        return 2;
    // name, delta, T, B, Hk, Hv, Dv, glo, ghi, ninf, l2norm, has_state, otype[, lin, qkvtype, betas, big0]
    const Case cases[] = {
        {"gd_T130_g0.2", 1, 130, 1, 1, 2, 256, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gd_T64", 1, 64, 1, 1, 1, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gd_T1", 1, 1, 1, 1, 1, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gd_T130_g30", 1, 130, 1, 1, 1, 128, -30.0f, 0.0f, 0, 1, 1, 0},
        {"gd_T130_inf", 1, 130, 1, 1, 2, 128, -0.2f, 0.0f, 1, 1, 1, 0},
        {"gd_T130_inf_nostate", 1, 130, 1, 1, 2, 128, -0.2f, 0.0f, 1, 1, 0, 0},
        {"gd_T200_nol2_bf16o", 1, 200, 2, 1, 2, 128, -0.5f, 0.0f, 0, 0, 1, 2},
        {"gd_T200_linear_zero_neg_f16", 1, 200, 1, 1, 2, 128, 0.7f, 1.0f, 0, 1, 1, 0, 1, 1},
        {"gd_T200_linear_zero_neg_bf16", 1, 200, 1, 1, 2, 128, 0.7f, 1.0f, 0, 1, 1, 0, 1, 2},
        {"gd_T130_nol2_g30_inf", 1, 130, 1, 1, 2, 128, -30.0f, 0.0f, 1, 0, 1, 0},
        {"gd_T200_nol2_inf_bf16o_Dv256_Hv4", 1, 200, 1, 1, 4, 256, -0.5f, 0.0f, 1, 0, 1, 2},
        {"gd_T130_beta01", 1, 130, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 1, 0, 0, 2, 1},
        {"gd_T64_beta1", 1, 64, 1, 1, 1, 128, -0.2f, 0.0f, 0, 1, 1, 0, 0, 2, 2},
        // weak gates and beta 1: T's blocks far from the diagonal are not damped (the doubling's far products matter)
        {"gd_T64_weak_gates_beta1", 1, 64, 1, 1, 1, 128, -0.01f, 0.0f, 0, 1, 1, 0, 0, 2, 2},
        {"gl_T200_linear_zero_neg_f16", 0, 200, 1, 1, 2, 128, 0.7f, 1.0f, 0, 1, 1, 0, 1, 1},
        {"gl_T130_g0.2", 0, 130, 1, 1, 2, 256, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gl_T64", 0, 64, 1, 1, 1, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gl_T1", 0, 1, 1, 1, 1, 128, -0.2f, 0.0f, 0, 1, 1, 0},
        {"gl_T130_g30", 0, 130, 1, 1, 1, 128, -30.0f, 0.0f, 0, 1, 1, 0},
        {"gl_T130_inf", 0, 130, 1, 1, 2, 128, -0.2f, 0.0f, 1, 1, 1, 0},
        {"gl_T200_linear_zero_neg_bf16", 0, 200, 1, 1, 2, 128, 0.7f, 1.0f, 0, 1, 1, 0, 1, 2},
        {"gl_T200_nol2_inf_bf16o_Dv256", 0, 200, 2, 1, 2, 256, -0.5f, 0.0f, 1, 0, 1, 2},
        {"gl_T130_nostate", 0, 130, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 0, 0},
        // a gate of +100 first on a zero state: tables hold, d(t, -1) = inf in F32 (by_mul's keep-zero side)
        {"gl_T130_big_first_nostate", 0, 130, 2, 1, 2, 128, -0.2f, 0.0f, 0, 1, 0, 0, 0, 2, 0, 1},
        {"gd_T130_big_first_nostate", 1, 130, 2, 1, 2, 128, -0.2f, 0.0f, 0, 1, 0, 0, 0, 2, 0, 1},
        // ... and a -inf gate later in the same chunks (decays inf, then 0: a segment's gamma 0 x inf; session 51's review)
        {"gl_T256_big_first_zero_later_nostate", 0, 256, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 0, 0, 0, 2, 0, 1, -INFINITY, 100},
        // a middle segment whose chunk decays are inf, then 0 (gamma NaN, no decay NaN) after exact-zero state entries
        // (zero values before it): those entries stay zero, as in the walk (wgbseg3_: segments of chunks 0-1, 2-3, 4)
        // longer segments: 4 and 6 chunks a segment (wgbseg3_, wgbseg2_), 11 segments of one chunk, a short last chunk
        {"gl_T700_long_segments", 0, 700, 1, 1, 2, 128, -0.1f, 0.0f, 0, 1, 1, 0},
        {"gl_T320_zero_v_mid_big_then_zero_nostate", 0, 320, 1, 1, 2, 128, -0.2f, 0.0f, 0, 1, 0, 0, 0, 2, 0, 0, 100.0f, 128,
         -INFINITY, 200, 128},
    };
    const float scale = 1.0f / std::sqrt(128.0f);
    const bool has_delta = tg_emu_has_delta();
    // (per mode: GATED_LINEAR, GATED_DELTA)
    int bad = 0, runs = 0, skipped = 0, mode_runs[2] = {}, wgb_runs[2] = {}, wgb_absent[2] = {};
    double orel_lo = INFINITY, orel_hi = 0, srel_lo = INFINITY, srel_hi = 0;
    // each case on delta_wg_kernel; those with BF16 q/k/v also on delta_wgb_kernel (as "wgb_" + the
    // case's name) where the tree has it for their mode (older trees: GATED_LINEAR only)
    // GATED_LINEAR's BF16 cases of two chunks or more also run on the segment kernels where the tree has
    // them ("wgbseg<n>_" + the name): one chunk a segment, two segments, and three (five chunks or more)
    // Where the tree's BF16 kernels take gate arrays made beforehand, those runs have them; each BF16 case
    // also runs on delta_wgb_kernel with the arrays made by its warp 0 ("wgbgk1_": knob delta_chunk_gk 1),
    // and GATED_LINEAR's with two segments or more on the segment kernels so too ("wgbseg<n>gk1_")
    struct run_item {
        const Case *c;
        bool wgb;
        int nseg;
        bool gk1;
    };
    std::vector<run_item> runlist;
    int seg_runs = 0;
    for (const Case &c : cases) {
        runlist.push_back({&c, false, 0, false});
        if (c.qkvtype == 2) runlist.push_back({&c, true, 0, false});
        if (c.qkvtype == 2 && tg_emu_has_g()) runlist.push_back({&c, true, 0, true});
        const int nch = (int)((c.T + 63) / 64);
        if (c.qkvtype == 2 && !c.delta && nch >= 2 && tg_emu_has_seg()) {
            runlist.push_back({&c, true, nch, false});
            if (nch >= 3) runlist.push_back({&c, true, 2, false});
            if (nch >= 5) runlist.push_back({&c, true, 3, false});
            if (tg_emu_has_g()) runlist.push_back({&c, true, nch >= 3 ? 2 : nch, true});
        }
    }
    for (const auto &rl : runlist) {
        const Case &c = *rl.c;
        const bool wgb = rl.wgb;
        const std::string gk = rl.gk1 ? "gk1" : "";
        const std::string cname = (rl.nseg ? "wgbseg" + std::to_string(rl.nseg) + gk + "_" : wgb ? "wgb" + gk + "_" : "") + std::string(c.name);
        if (!filter.empty() && cname.find(filter) == std::string::npos) continue;
        if (wgb && !tg_emu_has_wgb(c.delta)) {
            wgb_absent[c.delta]++;
            continue;
        }
        seg_runs += rl.nseg != 0;
        if (c.delta && !has_delta) {
            printf("%-27s GATED_DELTA not present in this tree's kernel (no delta_wg_kernel<DELTA>): skipped\n", c.name);
            skipped++;
            continue;
        }
        const Inputs in = make_inputs(c);
        std::vector<double> oref, sref;
        oracle(c, in, scale, oref, sref);
        emu_clear_findings();
        const Result r = run_kernel(c, in, order, sbase, scale, wgb, rl.nseg, rl.gk1);
        runs++, mode_runs[c.delta]++, wgb_runs[c.delta] += wgb;
        const double orel = relL2(oref, r.o), srel = c.has_state ? relL2(sref, r.s) : 0.0;
        bool same = true;
        if (all_orders)
            for (int ord = 1; ord <= 2; ord++) {  // other interleavings and shared-window bases
                const Result r2 = run_kernel(c, in, ord, sbase + 16 * 37 * ord, scale, wgb, rl.nseg, rl.gk1);
                same &= r2.o == r.o && r2.s == r.s;
            }
        bool finite = true;
        for (float x : r.o) finite &= std::isfinite(x);
        for (float x : r.s) finite &= std::isfinite(x);
        // delta_wgb_kernel's hi/lo products are near-F32: its own tier, so that a lost lo product fails;
        // a BF16 o keeps its rounding's allowance. GATED_LINEAR 2e-6..5e-6 here (a lost P lo 1.5e-3..1.9e-3);
        // GATED_DELTA (UT transform, lo x lo terms dropped) 2.5e-7..5.2e-6, the same tier: U as one BF16
        // tile (its lo products dropped) o 1.3e-3..1.7e-3 (F32 o, T > 1), state 9.4e-5..1.8e-3; a lost
        // T_hi R_lo alike; a lost T_lo R_hi 1.2e-4..3e-4 where T is not near I (README: what passes)
        const double tol = c.otype == 0 ? (wgb ? 3e-5 : 2e-3) : 5e-3, stol = wgb ? 3e-5 : 2e-3;
        const bool ok = orel < tol && srel < stol && finite && r.cover_ok;
        char st[32];
        snprintf(st, sizeof st, c.has_state ? "%.3e" : "(no state)", srel);
        printf("%-27s %s  o rel-L2 %.3e  state rel-L2 %-10s  %s%s%s\n", cname.c_str(), c.delta ? "GATED_DELTA " : "GATED_LINEAR", orel, st,
               ok ? "OK" : "MISMATCH", finite ? "" : " NaN/inf",
               all_orders ? (same ? "  [3 interleavings, bitwise same]" : "  [INTERLEAVINGS DIFFER]") : "");
        print_chunks(c, oref, r.o);
        if (c.otype == 2) {  // the floor: the oracle itself rounded to BF16
            std::vector<float> rb(oref.size());
            for (size_t i = 0; i < oref.size(); i++) rb[i] = bf2f(f2bf((float)oref[i]));
            printf("    (BF16 output: the oracle rounded to BF16 alone has o rel-L2 %.3e)\n", relL2(oref, rb));
        }
        const int nf = emu_print_findings(argv[0]);
        if (!ok || nf || (all_orders && !same)) bad++;
        orel_lo = std::min(orel_lo, orel), orel_hi = std::max(orel_hi, orel);
        if (c.has_state) srel_lo = std::min(srel_lo, srel), srel_hi = std::max(srel_hi, srel);
        if (stats) emu_print_stats();
    }
    // (not in the tree, or left out by TG_EMU_WGB=0; older trees have the GATED_LINEAR-only kernel)
    if (wgb_absent[0])
        printf("delta_wgb_kernel not present in this tree's kernel (or left out): its %d GATED_LINEAR BF16 runs skipped\n", wgb_absent[0]);
    if (wgb_absent[1])
        printf("delta_wgb_kernel<DELTA> not present in this tree's kernel%s: its %d GATED_DELTA BF16 runs skipped\n",
               tg_emu_has_wgb(0) ? " (the plain GATED_LINEAR-only delta_wgb_kernel)" : " (or left out)", wgb_absent[1]);
    if (!runs) {
        printf("no case ran (filter '%s'%s)\n", filter.c_str(), skipped ? ", GATED_DELTA not in this tree" : "");
        return 2;
    }
    char srange[48] = "(no state)";
    if (srel_hi > 0) snprintf(srange, sizeof srange, "%.1e..%.1e", srel_lo, srel_hi);
    char modes[128];
    snprintf(modes, sizeof modes, "GATED_LINEAR %d, GATED_DELTA %d", mode_runs[0], mode_runs[1]);
    if (!has_delta) snprintf(modes, sizeof modes, "GATED_LINEAR %d", mode_runs[0]);
    if (wgb_runs[0] + wgb_runs[1])
        snprintf(modes + strlen(modes), sizeof modes - strlen(modes), "; delta_wgb_kernel %d of them (%d + %d)", wgb_runs[0] + wgb_runs[1],
                 wgb_runs[0], wgb_runs[1]);
    if (seg_runs) snprintf(modes + strlen(modes), sizeof modes - strlen(modes), ", %d on the segment kernels", seg_runs);
    printf("%s: %d runs (%s), o rel-L2 %.1e..%.1e, state rel-L2 %s", bad ? "SOME CASES FAILED OR HAD FINDINGS" : "ALL CASES OK, NO FINDINGS",
           runs, modes, orel_lo, orel_hi, srange);
    if (skipped) printf("; GATED_DELTA not present in this tree (%d cases skipped)", skipped);
    printf("\n");
    return bad ? 1 : 0;
}
