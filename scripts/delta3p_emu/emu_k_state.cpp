// emu_k_state.cpp - kernel TU: delta_state128_kernel<BV, DELTA, true, true, true> (h16, bulk copies, the output
// made by the state pass) of the tree's cuda/delta_rule_state_pass.cu (gen.py's copy), with -fsanitize=thread.
#include "emu_rt.h"
namespace tg_chunk {
namespace {
alignas(4096) float4 ssm4[(232448 + 4096) / 16];  // the kernels' extern __shared__ ssm4
}  // namespace
}  // namespace tg_chunk
#include "delta_rule_state_pass.cu"
#include "emu_kcommon.h"

using namespace tg_chunk;
void tg_emu_state(int BV, int delta, const EmuPhase &e) {
    const phase_args a = tg_emu_phase_args(e);
#define TG_EMU_ST(bv)                                                  \
    if (BV == bv) {                                                    \
        if (delta) delta_state128_kernel<bv, true, true, true, true>(a);  \
        else delta_state128_kernel<bv, false, true, true, true>(a);       \
        return;                                                        \
    }
    TG_EMU_ST(8)
    TG_EMU_ST(16)
    TG_EMU_ST(32)
#undef TG_EMU_ST
    abort();
}
int tg_emu_state_threads() { return state128_threads(true); }
#if TG_EMU_HAS_S2 && TG_EMU_HAS_VD
// run_phases of such trees: s2 = fo && !delta && knob != 2 && state128_smem(BV, true, true, true, true) fits
// (knob delta_chunk_fo 0 here; session 48's diff also took GATED_DELTA's by knob 3, never the default); the
// launch's state128_smem(BV, h16, fo, s2, fo && !delta)
size_t tg_emu_state_smem(int BV, const EmuPhase &e) { return state128_smem(BV, true, true, e.s2, e.fo && !e.delta); }
int tg_emu_s2_rule(int BV, int delta, size_t optin) { return !delta && state128_smem(BV, true, true, true, !delta) <= optin; }
#else
size_t tg_emu_state_smem(int BV, const EmuPhase &) { return state128_smem(BV, true, true); }
int tg_emu_s2_rule(int, int, size_t) { return 0; }
#endif
int tg_emu_state_nbuf(int BV) { return state128_nbuf(true, true, BV); }
int tg_emu_state_nbuf_old(int DKP, int BV, size_t optin) { return state_smem(DKP, BV, 2) <= optin ? 2 : 1; }
std::vector<EmuRegion> tg_emu_state_layout(int BV, const EmuPhase &e) {
#if TG_EMU_HAS_VD
    const int NB = state128_nbuf(true, true, BV), BUF = state128_buf(BV, true, true, !e.delta);
#else
    const int NB = state128_nbuf(true, true, BV), BUF = state128_buf(BV, true, true);
#endif
    static const char *const nm[3][5] = {{"buf0 W", "buf0 Kd^T", "buf0 Qh", "buf0 Ph", "buf0 U"},
                                        {"buf1 W", "buf1 Kd^T", "buf1 Qh", "buf1 Ph", "buf1 U"},
                                        {"buf2 W", "buf2 Kd^T", "buf2 Qh", "buf2 Ph", "buf2 U"}};
    std::vector<EmuRegion> l;
    for (int b = 0; b < NB; b++) {
        const uint32_t o = (uint32_t)(b * BUF * 4);
        l.push_back({nm[b][0], o});
        l.push_back({nm[b][1], o + kH16WFloats * 4});
        l.push_back({nm[b][2], o + (kH16WFloats + kH16KFloats) * 4});
        l.push_back({nm[b][3], o + (kH16WFloats + kH16KFloats + kH16QFloats) * 4});
        l.push_back({nm[b][4], o + (kH16WFloats + kH16KFloats + kH16QFloats + kH16PFloats) * 4});
    }
    l.push_back({"sS", (uint32_t)(NB * BUF * 4)});
#if TG_EMU_HAS_SSIZE
    const int SSZ = state128_ssize(BV, true);
#else
    const int SSZ = 128 * (BV + 8);
#endif
    l.push_back({"sS (2nd copy) / mbarriers", (uint32_t)((NB * BUF + SSZ) * 4)});
    (void)e;
    return l;
}
void *tg_emu_state_smem_host() { return (void *)ssm4; }
size_t tg_emu_state_smem_host_bytes() { return sizeof(ssm4); }
