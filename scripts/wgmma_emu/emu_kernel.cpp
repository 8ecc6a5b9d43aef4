// emu_kernel.cpp - the kernel TU: the tree's cuda/sm90a/delta_rule_chunked_wg.cu and
// delta_rule_chunked_wgb.cu as gen.py copied them (asm rewritten, host launch code cut), compiled
// as host C++ with -fsanitize=thread so that their memory accesses reach the hooks in emu_rt.cpp.
// emu_config.h (gen.py) says which kernel versions the tree has: TG_EMU_DELTA 1 for
// delta_wg_kernel<DELTA>, 0 for the GATED_LINEAR-only delta_wg_kernel of older trees; TG_EMU_WGB 2
// where it also has the BF16 kernel template <bool DELTA> delta_wgb_kernel (both modes, shared memory
// kSmemB<DELTA>), 1 where it has the plain GATED_LINEAR-only one of older trees (kSmemB), 0 neither.
#include "emu_config.h"
#include "emu_rt.h"
namespace {
// the block's dynamic shared memory: sm_90's most (227 KB) and room for the --base offsets
alignas(4096) float4 wsm4[(232448 + 4096) / 16];
}  // namespace
#include "sm90a/delta_rule_chunked_wg.cu"
#include "sm90a/delta_rule_chunked_wgb.cu"  // (gen.py: a comment where the tree has no delta_wgb_kernel)
#include "emu_api.h"

void *tg_emu_smem_host() { return (void *)wsm4; }
size_t tg_emu_smem_host_bytes() { return sizeof(wsm4); }

static tg_cuda_desc cv(const EmuDesc &e) {
    tg_cuda_desc d;
    d.data = e.data;
    d.type = (tg_type)e.type;
    for (int i = 0; i < 4; i++) d.ne[i] = e.ne[i], d.nb[i] = e.nb[i];
    return d;
}
static chunk_args args_of(const EmuArgs &e) {
    chunk_args a = {};
    a.q = cv(e.q), a.k = cv(e.k), a.v = cv(e.v), a.g = cv(e.g), a.beta = cv(e.beta), a.state = cv(e.state), a.o = cv(e.o);
    a.Dk = e.Dk, a.Dv = e.Dv, a.Hk = e.Hk, a.Hv = e.Hv, a.B = e.B, a.T = e.T;
    a.delta = e.delta, a.log_gate = e.log_gate, a.l2norm = e.l2norm, a.scale = e.scale;
    a.DKP = e.DKP, a.BV = e.BV, a.nslices = e.nslices, a.qk_vec = e.qk_vec, a.v_vec = e.v_vec, a.o_pair = e.o_pair;
    a.err = nullptr;
#if TG_EMU_SEG
    a.tseg = e.tseg, a.nseg = e.nseg, a.seg_s = e.seg_s, a.seg_g = e.seg_g;
#endif
#if TG_EMU_G
    a.G = e.G;
#endif
    return a;
}

#if TG_EMU_DELTA
static_assert(kSmem<true> <= 232448 && kSmem<false> <= 232448, "wsm4 holds the dynamic allocation");
bool tg_emu_has_delta() { return true; }
size_t tg_emu_kSmem(int delta) { return delta ? kSmem<true> : kSmem<false>; }
std::vector<EmuRegion> tg_emu_layout(int delta) {
    if (!delta)
        return {{"Q", oQ}, {"K", oK}, {"V^T", oV}, {"S^T", oS}, {"P", oP}, {"K~^T", oKt}, {"gates", oF<false>},
                {"past the gates", oF<false> + (8 * kC + 4) * 4}};
    return {{"Q", oQ},
            {"K", oK},
            {"V^T (R^T, U^T)", oV},
            {"S^T", oS},
            {"P", oP},
            {"K~^T / A (F32) / T tile", oAf},
            {"K~^T / T (F32)", oTf},
            {"T (F32)", oKt + 32768},
            {"gates", oF<true>},
            {"past the gates", oF<true> + (8 * kC + 4) * 4}};
}
void tg_emu_kernel(int delta, const EmuArgs &e) {
    const chunk_args a = args_of(e);
    if (delta) delta_wg_kernel<true>(a);
    else delta_wg_kernel<false>(a);
}
#else
static_assert(kSmem <= 232448, "wsm4 holds the dynamic allocation");
bool tg_emu_has_delta() { return false; }
size_t tg_emu_kSmem(int) { return kSmem; }
std::vector<EmuRegion> tg_emu_layout(int) {
    return {{"Q", oQ}, {"K", oK}, {"V^T", oV}, {"S^T", oS}, {"P", oP}, {"K~^T", oKt}, {"gates", oF},
            {"past the gates", oF + (8 * kC + 4) * 4}};
}
void tg_emu_kernel(int, const EmuArgs &e) { delta_wg_kernel(args_of(e)); }
#endif

// the BF16 kernel delta_wgb_kernel, where the tree has it: template <bool DELTA> (TG_EMU_WGB 2, both
// modes, kSmemB<DELTA>) or the plain GATED_LINEAR-only kernel of older trees (TG_EMU_WGB 1, kSmemB)
#if TG_EMU_WGB
// its layout: the two buffers of raw tiles, S^T's hi and lo tiles, then P's and Kw's (GATED_LINEAR) or
// A / T / P / R's lo tile (GATED_DELTA), the gate arrays and the norms
static std::vector<EmuRegion> layout_b_common(bool delta) {
    std::vector<EmuRegion> l;
    for (int b = 0; b < 2; b++) {
        static const char *const nl[2][3] = {{"buffer 0: Q", "buffer 0: K", "buffer 0: V"}, {"buffer 1: Q", "buffer 1: K", "buffer 1: V"}};
        static const char *const nd[2][3] = {{"buffer 0: Q / Kw lo", "buffer 0: K / Kw hi", "buffer 0: V / R hi / U hi"},
                                             {"buffer 1: Q / Kw lo", "buffer 1: K / Kw hi", "buffer 1: V / R hi / U hi"}};
        for (int t = 0; t < 3; t++) l.push_back({(delta ? nd : nl)[b][t], (uint32_t)(b * bBuf + t * 16384)});
    }
    l.push_back({"S^T hi", (uint32_t)bSh});
    l.push_back({"S^T lo", (uint32_t)bSl});
    return l;
}
static void layout_b_tail(std::vector<EmuRegion> &l, uint32_t f, bool pre = false) {
    if (pre) {  // (two gate buffers: TG_EMU_G's kernels)
        l.push_back({"gate buffer 0", f});
        l.push_back({"gate buffer 1", f + (8 * kC + 4) * 4});
        f += (8 * kC + 4) * 4;
    } else {
        l.push_back({"gates", f});
    }
    l.push_back({"1 / |q_t|, 1 / |k_t|", f + (8 * kC + 4) * 4});
    l.push_back({"past the norms", f + (8 * kC + 4) * 4 + 2 * kC * 4});
}
#endif
#if TG_EMU_WGB == 2
static_assert(kSmemB<false> <= 232448 && kSmemB<true> <= 232448, "wsm4 holds the dynamic allocation");
bool tg_emu_has_wgb(int) { return true; }
size_t tg_emu_kSmemB(int delta) { return delta ? kSmemB<true> : kSmemB<false>; }
static std::vector<EmuRegion> layout_b(int delta, bool pre) {
    std::vector<EmuRegion> l = layout_b_common(delta);
    if (!delta) {
        l.insert(l.end(), {{"P hi", (uint32_t)bPh}, {"P lo", (uint32_t)bPl}, {"Kw hi", (uint32_t)bWh}, {"Kw lo", (uint32_t)bWl}});
        layout_b_tail(l, bF<false>, pre);
    } else {
        l.insert(l.end(), {{"A (F32) / T hi", (uint32_t)bAf},
                           {"A (F32) / T lo", (uint32_t)bTl},
                           {"A (F32)", (uint32_t)(bTl + 8192)},
                           {"T (F32) / P hi", (uint32_t)bPhD},
                           {"T (F32) / P lo", (uint32_t)bPlD},
                           {"T (F32)", (uint32_t)(bPlD + 8192)},
                           {"R lo / U lo", (uint32_t)bRl}});
        layout_b_tail(l, bF<true>, pre);
    }
    return l;
}
std::vector<EmuRegion> tg_emu_layout_b(int delta) { return layout_b(delta, false); }
void tg_emu_kernel_b(int delta, const EmuArgs &e) {
    const chunk_args a = args_of(e);
#if TG_EMU_G
    if (e.G) {
        if (delta) delta_wgb_pre_kernel<true>(a);
        else delta_wgb_pre_kernel<false>(a);
        return;
    }
#endif
    if (delta) delta_wgb_kernel<true>(a);
    else delta_wgb_kernel<false>(a);
}
#elif TG_EMU_WGB == 1
static_assert(kSmemB <= 232448, "wsm4 holds the dynamic allocation");
bool tg_emu_has_wgb(int delta) { return !delta; }
size_t tg_emu_kSmemB(int) { return kSmemB; }
std::vector<EmuRegion> tg_emu_layout_b(int) {
    std::vector<EmuRegion> l = layout_b_common(false);
    l.insert(l.end(), {{"P hi", (uint32_t)bPh}, {"P lo", (uint32_t)bPl}, {"Kw hi", (uint32_t)bWh}, {"Kw lo", (uint32_t)bWl}});
    layout_b_tail(l, bF);
    return l;
}
void tg_emu_kernel_b(int, const EmuArgs &e) { delta_wgb_kernel(args_of(e)); }
#else
bool tg_emu_has_wgb(int) { return false; }
size_t tg_emu_kSmemB(int) { return 0; }
std::vector<EmuRegion> tg_emu_layout_b(int) { return {}; }
void tg_emu_kernel_b(int, const EmuArgs &) {}
#endif

#if TG_EMU_SEG
bool tg_emu_has_seg() { return true; }
void tg_emu_kernel_seg(int seg, const EmuArgs &e) {
    const chunk_args a = args_of(e);
#if TG_EMU_G
    if (e.G) {
        if (seg == 1) delta_wgb_segpre_kernel<1>(a);
        else delta_wgb_segpre_kernel<2>(a);
        return;
    }
#endif
    if (seg == 1) delta_wgb_seg_kernel<1>(a);
    else delta_wgb_seg_kernel<2>(a);
}
#else
bool tg_emu_has_seg() { return false; }
void tg_emu_kernel_seg(int, const EmuArgs &) {}
#endif

#if TG_EMU_G
bool tg_emu_has_g() { return true; }
size_t tg_emu_kSmemBP(int delta) { return delta ? kSmemB<true, true> : kSmemB<false, true>; }
std::vector<EmuRegion> tg_emu_layout_bp(int delta) { return layout_b(delta, true); }
int tg_emu_gate_words() { return kGateWords; }
size_t tg_emu_gates_smem() { return 8 * kGateWords * 4; }
void tg_emu_gates_b(const EmuArgs &e, long long units) {  // (the shared window starts at wsm4)
    gates_warp(gates_args(args_of(e), e.G), units, (float *)wsm4 + (threadIdx.x >> 5) * kGateWords);
}
#else
bool tg_emu_has_g() { return false; }
size_t tg_emu_kSmemBP(int) { return 0; }
std::vector<EmuRegion> tg_emu_layout_bp(int) { return {}; }
int tg_emu_gate_words() { return 0; }
size_t tg_emu_gates_smem() { return 0; }
void tg_emu_gates_b(const EmuArgs &, long long) {}
#endif
