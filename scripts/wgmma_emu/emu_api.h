// emu_api.h - what the harness (emu_main.cpp) asks of the runtime (emu_rt.cpp) and of the kernel
// TU (emu_kernel.cpp). No CUDA or project headers here.
#pragma once
#include "emu_rt_api.h"
struct EmuArgs {
    EmuDesc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv, B;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, BV, nslices, qk_vec, v_vec, o_pair;
    long long tseg;  // GATED_LINEAR's segments (chunk_args' fields; nseg 0: none)
    int nseg;
    float *seg_s, *seg_g;
    float *G;  // the BF16 kernels' gate arrays made beforehand (chunk_args::G; NULL: by the kernel's warp 0)
};
// whether the tree's kernel has GATED_DELTA (delta_wg_kernel<DELTA>; gen.py decides)
bool tg_emu_has_delta();
// one thread's run of the block's code (delta: the template argument; ignored by a GATED_LINEAR-only kernel)
void tg_emu_kernel(int delta, const EmuArgs &a);
size_t tg_emu_kSmem(int delta);
std::vector<EmuRegion> tg_emu_layout(int delta);
void *tg_emu_smem_host();
size_t tg_emu_smem_host_bytes();
// the BF16 kernel delta_wgb_kernel (gen.py: TG_EMU_WGB), launched as delta_wg_kernel (same
// chunk_args, 512 threads) with kSmemB<DELTA> bytes of shared memory: whether the tree has it for
// that mode (template <bool DELTA> delta_wgb_kernel: both; the plain kernel of older trees:
// GATED_LINEAR only), its shared memory, layout and one thread's run
bool tg_emu_has_wgb(int delta);
size_t tg_emu_kSmemB(int delta);
std::vector<EmuRegion> tg_emu_layout_b(int delta);
void tg_emu_kernel_b(int delta, const EmuArgs &a);  // (a.G set: delta_wgb_pre_kernel<delta>, below)
// GATED_LINEAR's segment kernels (gen.py: TG_EMU_SEG): whether the tree has them, and one thread's run
// of delta_wgb_seg_kernel<seg> (1: the segments' states, 2: the outputs; shared memory kSmemB<false>)
bool tg_emu_has_seg();
void tg_emu_kernel_seg(int seg, const EmuArgs &a);  // (a.G set: delta_wgb_segpre_kernel<seg>, below)
// the BF16 kernels that copy gate arrays made beforehand (gen.py: TG_EMU_G: delta_wgb_pre_kernel<DELTA> and
// delta_wgb_segpre_kernel<SEG>, which tg_emu_kernel_b and tg_emu_kernel_seg run where a.G is set): whether the
// tree has them, their shared memory (kSmemB<DELTA, true>) and layout, a unit's words (kGateWords), and one
// thread's run of delta_gates_kernel's work as
// tg_cuda_delta_gates_launch gives it (8 units a block of 256 threads, gate_unit by each warp into the
// block's static shared memory: tg_emu_gates_smem bytes at the start of the shared window)
bool tg_emu_has_g();
size_t tg_emu_kSmemBP(int delta);
std::vector<EmuRegion> tg_emu_layout_bp(int delta);
int tg_emu_gate_words();
size_t tg_emu_gates_smem();
void tg_emu_gates_b(const EmuArgs &a, long long units);
