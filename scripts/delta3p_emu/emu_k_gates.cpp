// emu_k_gates.cpp - kernel TU: delta_gates_kernel of the tree's cuda/delta_rule_chunked_phases.cu (gen.py's
// copy: asm rewritten, host side cut, its static __shared__ array a reference to tg_emu_static_sm),
// compiled with -fsanitize=thread so that its accesses reach emu_rt.cpp's hooks.
#include "emu_rt.h"
alignas(4096) float4 tg_emu_static_sm[(65536 + 4096) / 16];
#include "delta_rule_chunked_phases.cu"
#include "emu_kcommon.h"

void tg_emu_gates(const EmuPhase &e, long long units) { tg_chunk::delta_gates_kernel(tg_emu_phase_args(e), units); }
size_t tg_emu_phase_scratch(long long units, int DKP, int DVP, bool delta, bool fo, size_t off[8]) {
    return tg_chunk::phase_scratch(units, DKP, DVP, delta, fo, off);
}
void *tg_emu_gates_smem_host() { return (void *)tg_emu_static_sm; }
size_t tg_emu_gates_smem_bytes() { return sizeof(tg_emu_static_sm); }
size_t tg_emu_gates_smem() { return sizeof(float) * 8 * tg_chunk::kGateWords; }
