// emu_kcommon.h - what the three kernel TUs share: EmuPhase (emu_api.h) as the tree's phase_args.
#pragma once
#include "emu_api.h"
#include "emu_config.h"

static inline tg_cuda_desc tg_emu_cv(const EmuDesc &e) {
    tg_cuda_desc d;
    d.data = e.data;
    d.type = (tg_type)e.type;
    for (int i = 0; i < 4; i++) d.ne[i] = e.ne[i], d.nb[i] = e.nb[i];
    return d;
}
static inline tg_chunk::phase_args tg_emu_phase_args(const EmuPhase &e) {
    tg_chunk::phase_args a = {};
    a.q = tg_emu_cv(e.q), a.k = tg_emu_cv(e.k), a.v = tg_emu_cv(e.v), a.g = tg_emu_cv(e.g), a.beta = tg_emu_cv(e.beta);
    a.state = tg_emu_cv(e.state), a.o = tg_emu_cv(e.o);
    a.Dk = e.Dk, a.Dv = e.Dv, a.Hk = e.Hk, a.Hv = e.Hv, a.T = e.T;
    a.delta = e.delta, a.log_gate = e.log_gate, a.l2norm = e.l2norm, a.scale = e.scale;
    a.DKP = e.DKP, a.DVP = e.DVP, a.NC = e.NC, a.qk_vec = e.qk_vec, a.v_vec = e.v_vec, a.o_pair = e.o_pair;
    a.BV = e.BV, a.nslices = e.nslices, a.nbuf = e.nbuf, a.h16 = e.h16, a.fo = e.fo;
#if TG_EMU_HAS_S2
    a.s2 = e.s2;
#endif
    a.W = e.W, a.Kd = e.Kd, a.U = e.U, a.S = e.S, a.gam = e.gam, a.Qh = e.Qh, a.Ph = e.Ph, a.G = e.G;
    a.err = nullptr;
    return a;
}
