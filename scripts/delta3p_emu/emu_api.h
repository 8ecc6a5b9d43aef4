// emu_api.h - what the harness (emu_main.cpp) asks of the runtime (emu_rt.cpp) and of the kernel
// TU (emu_kernel.cpp). No CUDA or project headers here.
#pragma once
#include "emu_rt_api.h"
struct EmuPhase {
    EmuDesc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, DVP, NC, qk_vec, v_vec, o_pair, BV, nslices, nbuf, h16, fo, s2;
    float *W, *Kd, *U, *S, *gam, *Qh, *Ph, *G;
};
// emu_k_gates.cpp: delta_gates_kernel (256 threads, static shared memory), one thread's run of block
// blockIdx; phase_scratch's bytes and offsets; the static shared memory's host bytes and size
void tg_emu_gates(const EmuPhase &a, long long units);
size_t tg_emu_phase_scratch(long long units, int DKP, int DVP, bool delta, bool fo, size_t off[8]);
void *tg_emu_gates_smem_host();
size_t tg_emu_gates_smem_bytes();
size_t tg_emu_gates_smem();
// emu_k_prep.cpp: delta_prep_wgb_kernel<DELTA, FO> (kNT threads, kSmemP bytes)
void tg_emu_prep(int delta, int fo, const EmuPhase &a);
int tg_emu_prep_threads();
size_t tg_emu_prep_smem();
std::vector<EmuRegion> tg_emu_prep_layout();
void *tg_emu_prep_smem_host();
size_t tg_emu_prep_smem_host_bytes();
// emu_k_state.cpp: delta_state128_kernel<BV, DELTA, true, true, true> (state128_threads(true) threads)
void tg_emu_state(int BV, int delta, const EmuPhase &a);
int tg_emu_state_threads();
// the tree's run_phases rule for phase_args.s2 (0 where the tree has no s2)
int tg_emu_s2_rule(int BV, int delta, size_t optin);
size_t tg_emu_state_smem(int BV, const EmuPhase &a);
int tg_emu_state_nbuf(int BV);
int tg_emu_state_nbuf_old(int DKP, int BV, size_t optin);  // run_phases' a.nbuf: state_smem(DKP, BV, 2) <= optin ? 2 : 1
std::vector<EmuRegion> tg_emu_state_layout(int BV, const EmuPhase &a);
void *tg_emu_state_smem_host();
size_t tg_emu_state_smem_host_bytes();
