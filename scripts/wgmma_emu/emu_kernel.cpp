// emu_kernel.cpp - the kernel TU: the tree's cuda/sm90a/delta_rule_chunked_wg.cu and
// delta_rule_chunked_wgb.cu as gen.py copied them (asm rewritten, host launch code cut), compiled
// as host C++ with -fsanitize=thread so that their memory accesses reach the hooks in emu_rt.cpp.
// emu_config.h (gen.py) says which kernel versions the tree has: TG_EMU_DELTA 1 for
// delta_wg_kernel<DELTA>, 0 for the GATED_LINEAR-only delta_wg_kernel of older trees; TG_EMU_WGB 1
// where it also has the BF16 GATED_LINEAR kernel delta_wgb_kernel (shared memory kSmemB).
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

// the BF16 GATED_LINEAR kernel delta_wgb_kernel(const chunk_args), where the tree has it
#if TG_EMU_WGB
static_assert(kSmemB <= 232448, "wsm4 holds the dynamic allocation");
bool tg_emu_has_wgb() { return true; }
size_t tg_emu_kSmemB() { return kSmemB; }
std::vector<EmuRegion> tg_emu_layout_b() { return {{"wgb smem", 0}}; }
void tg_emu_kernel_b(const EmuArgs &e) { delta_wgb_kernel(args_of(e)); }
#else
bool tg_emu_has_wgb() { return false; }
size_t tg_emu_kSmemB() { return 0; }
std::vector<EmuRegion> tg_emu_layout_b() { return {}; }
void tg_emu_kernel_b(const EmuArgs &) {}
#endif
