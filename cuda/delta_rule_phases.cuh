// delta_rule_phases.cuh - what the chunk-parallel form's kernels share (cuda/delta_rule_chunked_phases.cu:
// the prep and output kernels and the host side; cuda/delta_rule_state_pass.cu: the state pass): the
// kernels' arguments, the scratch's F16 row layout, the state pass's shared-memory sizes and its
// kernel choice.
#pragma once
#include "chunk_parts.cuh"

namespace tg_chunk {

struct phase_args {
    tg_cuda_desc q, k, v, g, beta, state, o;
    int Dk, Dv, Hk, Hv;
    long long T;
    int delta, log_gate, l2norm;
    float scale;
    int DKP, DVP, NC;       // padded head dims (multiples of 16 and 8), chunks per sequence
    int qk_vec, v_vec;      // q/k rows (whole v rows) load as 16-byte units
    int o_pair;             // output column pairs (j even) store as one
    int BV, nslices, nbuf;  // state pass: value columns per block, slices per head, load buffers
    int h16;                // FULL prep and delta_state128_kernel<.., true>: W and Kd^T as F16 (below)
    int fo;                 // the output made by the state pass (delta_prep_wgb_kernel writes Qh, Ph; below)
    int s2;                 // fo, GATED_LINEAR: the state in two shared copies (state128_sbufs)
    // scratch per (sequence, value head, chunk) unit u = (b Hv + h) NC + c: W (kC x DKP),
    // Kd^T (DKP x kC), U (kC x DVP; not GATED_LINEAR with fo), S_c (DKP x DVP; not with fo), gamma; fo: Qh (kH16QFloats), Ph
    // (kH16PFloats)
    float *W, *Kd, *U, *S, *gam, *Qh, *Ph;
    // (the BF16 wgmma prep and output kernels) unit u's gate arrays as chunk_gates leaves them, kGateWords
    // words at G + u kGateWords: sL, sSg, sB, sD0, sDl, sEp, sEm (kC floats each), sZ (kC ints), the
    // flags and 3 zero words; written by delta_gates_kernel, copied by cp.async beside the tiles
    float *G;
    const tg_cuda_err *err;
};
// h16 (Dk = Dv = 128): unit u's W rows as F16, kC rows of 128 halves at a stride of kH16WLD (each
// 8-column group permuted as chunk_mma.cuh's h16_pos; 8 halves of padding a row), then kC floats, each
// row's inverse power-of-two scale, in W's F32 region; Kd^T's 128 rows of kC halves at a stride of
// kH16KLD, then 128 scales, in Kd's. The strides are the state pass's shared-memory ones (ldmatrix
// without bank conflicts), so that each region lands there in one copy. A row's values are stored
// times its scale, which puts the largest magnitude in [1, 2): every value at least 2^-14 of the
// row's largest is exact in F16 (they are TF32 values: 10-bit mantissas), smaller ones are off by at
// most 2^-25 of the largest (F16's subnormal step). The state pass multiplies a product's row by the
// inverse.
constexpr int kH16WLD = 136, kH16KLD = kC + 8;              // row strides (halves)
constexpr int kH16WScale = kC * kH16WLD / 2;                // floats before W's scales
constexpr int kH16KScale = 128 * kH16KLD / 2;               // ... before Kd^T's
constexpr int kH16WFloats = kH16WScale + kC, kH16KFloats = kH16KScale + 128;  // each region (floats)
static_assert(kH16WFloats <= kC * 128 && kH16KFloats <= kC * 128 && kH16WFloats % 4 == 0 && kH16KFloats % 4 == 0,
              "the F16 regions fit the F32 ones, in 16-byte units");
// fo (the output made by the state pass, delta_prep_wgb_kernel's BF16 q): unit u's raw q rows as F16
// in W's layout (kC rows at a stride of kH16WLD, each 8-column group permuted, a power-of-two scale a
// row putting its largest magnitude in [1, 2): every BF16 value of at least 2^-14 of it exact), then
// kC floats qs_t (the row's inverse scale times 1 / |q_t| with l2norm) and kC floats d(t, -1), the
// row's decay from the chunk's start; and P = Q K^T (.) d(t, s) / |q_t| |k_s| (s <= t, else 0) as F16
// rows of kC at a stride of kH16PLD (permuted likewise), each row's four 16-column blocks with a
// power-of-two scale of their own (so that the prep makes them within a warp), then the 4 kC inverse
// scales (row t's block b at 4 t + b).
constexpr int kH16PLD = kC + 8;
constexpr int kH16QFloats = kH16WScale + 2 * kC;
constexpr int kH16PScale = kC * kH16PLD / 2, kH16PFloats = kH16PScale + 4 * kC;
static_assert(kH16QFloats % 4 == 0 && kH16PFloats % 4 == 0, "the fo regions in 16-byte units");
constexpr int kGateWords = 8 * kC + 4;  // a unit's gate arrays (G): 2064 bytes, 129 16-byte units
// chunk_gates into one unit's arrays at s in G's layout: L, sigma, beta, d(t, -1), d(C-1, t), the two
// factor tables (floats), zero's index (ints), then the flags (and 3 words of padding, not written here)
__device__ inline void gate_arrays(const float (&gl)[2], const float (&bl)[2], int log_gate, float *s) {
    chunk_gates(gl, bl, log_gate, s, s + 2 * kC, s + kC, (int *)(s + 7 * kC), s + 3 * kC, s + 4 * kC, s + 5 * kC, s + 6 * kC,
                (int *)(s + 8 * kC));
}
// One warp: the gate arrays of the chunk at token t0 (n tokens) of value head h, sequence b, made by
// chunk_gates in shared s (kGateWords floats) and copied to g in G's layout; returns d(C-1, -1), the
// chunk's decay. A: phase_args or chunk_args (their g, beta and log_gate).
template <class A> __device__ inline float gate_unit(const A &a, int h, int b, long long t0, int n, float *s, float *g) {
    const int lane = threadIdx.x & 31;
    float gl[2], bl[2];
    load_chunk_gates(a, h, b, t0, n, gl, bl);
    if (lane < 3) ((int *)s)[8 * kC + 1 + lane] = 0;
    gate_arrays(gl, bl, a.log_gate, s);
    __syncwarp();
    for (int i = lane; i < kGateWords; i += 32) g[i] = s[i];
    return chunk_decay(s, s + kC, (const int *)(s + 7 * kC), kC - 1, -1);
}
// Unit x = (b Hv + h) NC + c of the chunk-parallel form: chunk c of value head h (key head hk) of
// sequence b, its first token t0 and its n tokens (kC but in a short last chunk)
struct phase_unit {
    int c, h, b, hk, n;
    long long t0, u;
};
__device__ inline phase_unit unit_of(const phase_args &a, long long x) {
    phase_unit p;
    p.u = x, p.c = (int)(x % a.NC), p.h = (int)((x / a.NC) % a.Hv), p.b = (int)(x / ((long long)a.NC * a.Hv));
    p.hk = p.h / (a.Hv / a.Hk), p.t0 = (long long)p.c * kC;
    p.n = (int)(a.T - p.t0 < kC ? a.T - p.t0 : kC);
    return p;
}
// delta_gates_kernel's work for the calling warp: unit blockIdx.x 8 + warp of units (none past them), its
// arrays made in s (the warp's kGateWords shared floats) and written to a.G, its gamma to a.gam where set
__device__ inline void gates_warp(const phase_args &a, long long units, float *s) {
    const long long u = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (u >= units) return;  // (whole warps; no block barrier)
    const phase_unit pu = unit_of(a, u);
    const float gam = gate_unit(a, pu.h, pu.b, pu.t0, pu.n, s, a.G + u * kGateWords);
    if ((threadIdx.x & 31) == 0 && a.gam) a.gam[u] = gam;
}
// delta_gates_kernel's arguments for the chunks of the single-kernel form's c (delta_wgb_kernel's a.G;
// no gamma)
inline phase_args gates_args(const chunk_args &c, float *G) {
    phase_args a = {};
    a.g = c.g, a.beta = c.beta, a.Hk = c.Hk, a.Hv = c.Hv, a.T = c.T, a.log_gate = c.log_gate;
    a.NC = (int)((c.T + kC - 1) / kC), a.G = G;
    return a;
}
// one load buffer: W (kC rows of DKP), Kd^T (DKP rows of kC), the U slice (kC rows of BV)
__host__ __device__ inline int state_buf(int DKP, int BV) {
    return kC * q_stride(DKP) + DKP * kPS + kC * v_stride(BV);
}
inline size_t state_smem(int DKP, int BV, int nbuf) {
    return ((size_t)nbuf * state_buf(DKP, BV) + (size_t)DKP * v_stride(BV)) * 4;
}
// delta_state128_kernel's load buffer in floats (Dk = Dv = 128): F32 as state_buf(128, BV); F16: W's and
// Kd^T's regions as the scratch has them (row strides of 16 mod 128 bytes: ldmatrix without bank
// conflicts; each row's inverse scales after the rows), then (fo) Qh's and Ph's, then the U slice.
// F16 takes three buffers (fo at 32 columns: two), F32 two.
// vd (fo, GATED_LINEAR): the U region holds V's BF16 rows (kC rows of BV + 8 halves) instead of F32 ones.
constexpr int state128_buf(int BV, bool h16, bool fo = false, bool vd = false) {
    return h16 ? kH16WFloats + kH16KFloats + (fo ? kH16QFloats + kH16PFloats : 0) + (vd ? kC * (BV + 8) / 2 : kC * (BV + 8))
               : kC * 132 + 128 * kPS + kC * (BV + 8);
}
constexpr int state128_nbuf(bool h16, bool fo = false, int BV = 0) { return h16 ? (fo && BV > 16 ? 2 : 3) : 2; }
// its block: 8 warps, 16 where fo (8 for the state, 8 for the output)
constexpr int state128_threads(bool fo) { return fo ? 512 : 256; }
// the state's shared copies: two where s2 (fo, GATED_LINEAR: the output warps read chunk c's state from
// one while the state warps write chunk c + 1's into the other), each 128 x (BV + 8) floats, or (fo)
// transposed, BV x (128 + 4)
constexpr int state128_sbufs(bool s2) { return s2 ? 2 : 1; }
constexpr int state128_ssize(int BV, bool fo) { return fo ? BV * (128 + 4) : 128 * (BV + 8); }
inline size_t state128_smem(int BV, bool h16, bool fo = false, bool s2 = false, bool vd = false) {  // (+ 32 bytes: the mbarriers)
    return ((size_t)state128_nbuf(h16, fo, BV) * state128_buf(BV, h16, fo, vd) + (size_t)state128_sbufs(s2) * state128_ssize(BV, fo)) * 4 + 32;
}

// The state pass's kernel: delta_state128_kernel (S in registers, Dk = Dv = 128, BV 8..64, F16 rows
// where h16, copied by bulk copies where bulk too; the output made there too where fo: bulk, BV <= 32)
// where s128, else delta_state_kernel; *slot: its index among the phases' shared-memory slots (1,
// 3-10, 13-34).
using phase_fn = void (*)(phase_args);
phase_fn state_pass_kernel(int BV, bool delta, bool h16, bool bulk, bool fo, bool s128, int *slot);

// The output kernel with BF16 q and k on BF16 wgmma (cuda/sm90a/delta_rule_out_wgb.cu; Dk = Dv = 128,
// 16-byte rows): its shared memory (0 where the build has no sm_90a code), its limit raised (before
// any of the form's launches), its launch (one block per unit, as delta_out_kernel).
size_t tg_cuda_delta_out_wgb_smem();
tg_status tg_cuda_delta_out_wgb_limit(tg_backend *be);
void tg_cuda_delta_out_wgb_launch(tg_backend *be, const phase_args &a, unsigned grid);
// The prep kernel with BF16 k and v on BF16 wgmma (cuda/sm90a/delta_rule_prep_wgb.cu; Dk = Dv = 128,
// 16-byte rows; writes what delta_prep_kernel<true> writes, F32 or h16 rows): the same three.
size_t tg_cuda_delta_prep_wgb_smem();
tg_status tg_cuda_delta_prep_wgb_limit(tg_backend *be, bool delta, bool fo);
void tg_cuda_delta_prep_wgb_launch(tg_backend *be, const phase_args &a, unsigned grid);

}  // namespace tg_chunk
