// emu_k_prep.cpp - kernel TU: delta_prep_wgb_kernel<DELTA, FO> of the tree's cuda/sm90a/delta_rule_prep_wgb.cu
// (gen.py's copy), compiled with -fsanitize=thread.
#include "emu_rt.h"
namespace {
alignas(4096) float4 psm4[(232448 + 4096) / 16];  // the kernel's extern __shared__ psm4
}  // namespace
#include "sm90a/delta_rule_prep_wgb.cu"
#include "emu_kcommon.h"

static_assert(kSmemP <= 232448, "psm4 holds the dynamic allocation");
void tg_emu_prep(int delta, int fo, const EmuPhase &e) {
    const tg_chunk::phase_args a = tg_emu_phase_args(e);
    if (delta) fo ? delta_prep_wgb_kernel<true, true>(a) : delta_prep_wgb_kernel<true, false>(a);
    else fo ? delta_prep_wgb_kernel<false, true>(a) : delta_prep_wgb_kernel<false, false>(a);
}
int tg_emu_prep_threads() { return kNT; }
size_t tg_emu_prep_smem() { return kSmemP; }
std::vector<EmuRegion> tg_emu_prep_layout() {
    return {{"K / K' hi", pK}, {"V / R hi", pV}, {"K' lo", pKl}, {"R lo", pRl}, {"A (F32) / T hi, lo", pA},
            {"T (F32) / W staging", pT}, {"gates, norms, row maxima", pF}};
}
void *tg_emu_prep_smem_host() { return (void *)psm4; }
size_t tg_emu_prep_smem_host_bytes() { return sizeof(psm4); }
