// delta_rule.cu - the gated linear / gated delta-rule recurrence on CUDA
// (ggml_ops/delta_rule.cpp is the reference; DESIGN.md has the math).
// Kernels with the same arithmetic in the same order (bit-identical results
// for the same TPC), different data movement (bench/NOTES.md has the numbers):
//   delta_rule_kernel<NR, TPC, ST, VEC>  the chunk kernel (auto for T > 1):
//       one block per (column slice, value head h, sequence b); TPC threads
//       own one column j of S (Dk x Dv), NR rows each, in registers for the
//       whole time loop: the state is read once and written once. Per chunk of
//       TC steps, q/k (normalized), v, gate and beta go to shared memory
//       (cp.async, so that every load of a chunk is in flight at once); per
//       step each column group does its dot products with a butterfly of
//       TPC lanes. Rows are dealt in 4-row chunks, chunk c = r + TPC*m to
//       thread r, so that the TPC threads of a column read TPC*16 contiguous
//       bytes per access (coalesced state traffic). Small GLA heads (NR <= 8)
//       take a branch-free 4-step loop when the chunk has no rare case.
//   delta_decode_kernel<NR, TPC, ST>  the decode kernel (auto for T == 1):
//       the same thread layout, no block barrier: every load goes through
//       shared memory by cp.async (each thread its own state chunks, each warp
//       the q/k rows), one wait + __syncwarp, the step, the state stored from
//       registers; each warp runs load -> step -> store on its own.
//   delta_decode_persistent_kernel, delta_decode_reg_kernel: variants kept
//       for comparison (knob delta_kernel 4 and 3; both measured slower).
//   -> pick_kernel (variant choice) -> tg_cuda_delta_rule
//
// Variants: (NR, TPC) covers Dk <= NR*TPC: (4|8|16|32, 4) for Dk <= 16|32|64|128,
// (4|8|16|32, 8) for Dk <= 32|64|128|256; Dk = 64 and 128 are the unpadded fast paths.
// VEC: the state moves in 4-element vectors (F32 16 B, F16/BF16 8 B), when
// Dk % 4 == 0 and the pointer and strides allow it; otherwise the scalar
// any-stride path (chunk kernel). ST is the state's storage type (compute is F32).
#include <algorithm>
#include <climits>
#include <cstdint>

#include "common.cuh"
#include "delta_rule.cuh"
#include "delta_rule_chunked.cuh"
#include "delta_rule_decode.cuh"
#include "ops.h"
#include "signature.cuh"

namespace {

template <int NR, int TPC, typename ST, bool VEC>
__global__ void __launch_bounds__(kMaxThreads, NR >= 32 ? 3 : 4) delta_rule_kernel(const delta_args a) {
    static_assert(NR % 4 == 0 && 32 % TPC == 0, "layout");
    constexpr int NC = NR / 4;  // 4-row chunks per thread
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    const int DKP = a.DKP, CB = a.CB, TC = a.TC;
    float *sq = sm, *sk = sq + TC * DKP, *sv = sk + TC * DKP, *so = sv + TC * CB, *sg = so + TC * CB, *sb = sg + TC;

    const int tid = threadIdx.x, nth = blockDim.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const int jj = tid / TPC, r = tid % TPC, j = slice * CB + jj;
    const bool col = jj < CB && j < a.Dv;

    // 1. this thread's part of column j of S (rows 4c..4c+3, c = r + TPC*m): first, so its latency
    //    overlaps the staging of the first chunk
    float S[NR];
    const bool has_state = a.state.data != nullptr;
    const bool clear = tg_cuda_record_clear(a.err);  // read now, used before the state store
    const char *scol = has_state ? tg_cuda_ptr(a.state, 0, j, h, b) : nullptr;
    state_load<NR, TPC, ST, VEC>(S, scol, a.state, r, a.Dk, has_state && col);

    for (long long t0 = 0; t0 < a.T; t0 += TC) {
        const int n = (int)(a.T - t0 < TC ? a.T - t0 : TC);
        __syncthreads();  // the previous chunk's readers are done
        // 2. stage the chunk: q, k rows (zero-padded to DKP), v slice, a_t, beta_t.
        //    cp.async: no thread waits for one load before issuing the next
        //    (plain load -> store loops paid one memory latency per iteration).
        if (a.qk16) {
            // 16-byte rows (Dk % 4 == 0, unit stride, aligned): one copy per 4 elements
            const char *qb = tg_cuda_ptr(a.q, 0, hk, t0, b), *kb = tg_cuda_ptr(a.k, 0, hk, t0, b);
            const long long q2 = a.q.nb[2], k2 = a.k.nb[2];
            const int UP = DKP / 4;  // units per row
            int s = tid / UP, i = tid - s * UP;
            const int ds = nth / UP, di = nth - ds * UP;
#pragma unroll 1
            for (int x = tid; x < n * UP; x += nth) {
                if (4 * i < a.Dk) {
                    cp_async_n<16>(sq + 4 * x, qb + 16LL * i + s * q2);
                    cp_async_n<16>(sk + 4 * x, kb + 16LL * i + s * k2);
                } else {
                    *(float4 *)(sq + 4 * x) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    *(float4 *)(sk + 4 * x) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                i += di, s += ds;
                if (i >= UP) i -= UP, s++;
            }
        } else {
            const char *qb = tg_cuda_ptr(a.q, 0, hk, t0, b), *kb = tg_cuda_ptr(a.k, 0, hk, t0, b);
            const long long q0 = a.q.nb[0], q2 = a.q.nb[2], k0 = a.k.nb[0], k2 = a.k.nb[2];
            int s = tid / DKP, i = tid - s * DKP;
            const int ds = nth / DKP, di = nth - ds * DKP;
            #pragma unroll 1
            for (int x = tid; x < n * DKP; x += nth) {
                if (i < a.Dk) {
                    cp_async4(sq + x, qb + i * q0 + s * q2);
                    cp_async4(sk + x, kb + i * k0 + s * k2);
                } else {
                    sq[x] = 0.0f, sk[x] = 0.0f;
                }
                i += di, s += ds;
                if (i >= DKP) i -= DKP, s++;
            }
        }
        {
            const char *vb = tg_cuda_ptr(a.v, (long long)slice * CB, h, t0, b);
            const long long v0 = a.v.nb[0], v2 = a.v.nb[2];
            int s = tid / CB, c = tid - s * CB;
            const int ds = nth / CB, dc = nth - ds * CB;
            #pragma unroll 1
            for (int x = tid; x < n * CB; x += nth) {
                if (slice * CB + c < a.Dv) cp_async4(sv + x, vb + c * v0 + s * v2);
                else sv[x] = 0.0f;
                c += dc, s += ds;
                if (c >= CB) c -= CB, s++;
            }
        }
        #pragma unroll 1
        for (int s = tid; s < n; s += nth) {
            cp_async4(sg + s, tg_cuda_ptr(a.g, h, t0 + s, b, 0));
            cp_async4(sb + s, tg_cuda_ptr(a.beta, h, t0 + s, b, 0));
        }
        cp_async_wait_all();
        if (a.log_gate)  // on the values this thread copied itself
            for (int s = tid; s < n; s += nth) sg[s] = expf(sg[s]);
        __syncthreads();
        if (a.l2norm) {
            // as tg_l2_norm(x, 1e-6) and the CPU: sum of squares in double, one F32 multiplier
            const int w = tid / 32, lane = tid % 32, nw = nth / 32;
            for (int y = w; y < 2 * n; y += nw) {
                float *row = (y < n ? sq : sk) + (y % n) * DKP;
                double ss = 0.0;
                for (int i = lane; i < a.Dk; i += 32) ss += (double)row[i] * row[i];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
                const float inv = (float)(1.0 / sqrt(ss + (double)1e-6f));
                for (int i = lane; i < a.Dk; i += 32) row[i] *= inv;
            }
            __syncthreads();
        }

        // 3. the recurrence, step by step. k and q are read from shared memory
        //    chunk by chunk where they are used (not held in NR registers), so
        //    the state's registers dominate and more blocks fit per SM.
        //    Small heads (NR <= 8), GLA: when every gate and every u = beta v of
        //    the chunk is finite (one vote per chunk), the loop without the
        //    rare-case rules (the same operations), 4 steps unrolled, so that
        //    one step's loads and shuffles overlap the next steps' (the GLA
        //    chain is S -> S only): per step ~45 instructions, not ~100.
        bool fast = false;
        if constexpr (NR <= 8) {
            bool ok = !a.delta;
            if (ok) {
                for (int s = tid; s < n; s += nth) ok = ok && isfinite(sg[s]);
                for (int x = tid; x < n * CB; x += nth) ok = ok && isfinite(sb[x / CB] * sv[x]);
            }
            fast = __syncthreads_and(ok);
        }
        if (fast) {
            // 4 steps at a time: the S chain first, then the 4 column sums' shuffles
            // back to back (independent: their latencies overlap), then the stores
            constexpr int U = 4;
#pragma unroll 1
            for (int s0 = 0; s0 < n; s0 += U) {
                float part[U];
#pragma unroll
                for (int k = 0; k < U; k++) {
                    const int s = s0 + k < n ? s0 + k : n - 1;  // past the end: recomputed, not stored
                    const float at = sg[s], bt = sb[s], vj = col ? sv[s * CB + jj] : 0.0f;
                    const float4 *k4 = (const float4 *)(sk + s * DKP), *q4 = (const float4 *)(sq + s * DKP);
                    if (s0 + k < n) {
#pragma unroll
                        for (int x = 0; x < NR; x++) S[x] *= at;
                    }
                    float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (s0 + k < n) p = update_out<NC, TPC, false>(S, k4, q4, bt * vj, r, a.Dk, false);
                    part[k] = (p.x + p.y) + (p.z + p.w);
                }
#pragma unroll
                for (int off = TPC / 2; off > 0; off >>= 1)
#pragma unroll
                    for (int k = 0; k < U; k++) part[k] += __shfl_xor_sync(0xffffffffu, part[k], off);
#pragma unroll
                for (int k = 0; k < U; k++)
                    if (r == 0 && col && s0 + k < n) so[(s0 + k) * CB + jj] = a.scale * part[k];
            }
        } else {
#pragma unroll 1
        for (int s = 0; s < n; s++) {
            const float at = sg[s], bt = sb[s], vj = col ? sv[s * CB + jj] : 0.0f;
            const float4 *k4 = (const float4 *)(sk + s * DKP), *q4 = (const float4 *)(sq + s * DKP);
            decay<NR>(S, at);
            float u;  // column j's update: S[:, j] += k * u
            if (a.delta) {
                // u = beta (v - S^T k), on the decayed S
                u = bt * (vj - col_dot_k<NC, TPC>(S, k4, r));
            } else {
                u = bt * vj;
            }
            // the update, and o_t = scale * S^T q on the updated S. A non-finite u
            // (inf/NaN inputs) must not reach the zero padding rows (k = 0 there,
            // 0 * inf = NaN), which the CPU does not have.
            const float4 p = isfinite(u) ? update_out<NC, TPC, false>(S, k4, q4, u, r, a.Dk, a.delta)
                                         : update_out<NC, TPC, true>(S, k4, q4, u, r, a.Dk, a.delta);
            const float o = group_sum<TPC>((p.x + p.y) + (p.z + p.w));
            if (r == 0 && col) so[s * CB + jj] = a.scale * o;
        }
        }
        __syncthreads();
        // 4. the chunk's outputs, coalesced along Dv (division-free index stepping)
        {
            char *ob = tg_cuda_ptr(a.o, (long long)slice * CB, h, t0, b);
            const long long o0 = a.o.nb[0], o2 = a.o.nb[2];
            int s = tid / CB, c = tid - s * CB;
            const int ds = nth / CB, dc = nth - ds * CB;
#pragma unroll 1
            for (int x = tid; x < n * CB; x += nth) {
                if (slice * CB + c < a.Dv) *(float *)(ob + c * o0 + s * o2) = so[x];
                c += dc, s += ds;
                if (c >= CB) c -= CB, s++;
            }
        }
    }

    // 5. the final state, once (not after a bad position / id found earlier in the graph)
    if (has_state && col && clear) state_store<NR, TPC, ST, VEC>(S, (char *)scol, a.state, r, a.Dk);
}

// --- decode kernel -----------------------------------------------------------

// decode-reg (kept for comparison, bench gdn.decode/reg): one block per
// (column slice of CB columns, value head, sequence); blockDim = CB * TPC, a
// multiple of 32. Warps never wait for each other: each loads its state
// columns into registers first, then this step's inputs (q/k chunks straight
// from global memory into registers, the norms by lane-strided loads), and
// runs the recurrence with the chunk kernel's arithmetic. Holding S, k and q
// in registers costs 3*NR registers: occupancy is what limits it.
template <int NR, int TPC, typename ST, bool VEC>
__global__ void __launch_bounds__(kMaxThreads) delta_decode_reg_kernel(const delta_args a) {
    static_assert(NR % 4 == 0 && 32 % TPC == 0, "layout");
    constexpr int NC = NR / 4;
    const int tid = threadIdx.x, lane = tid & 31, CB = a.CB;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const int jj = tid / TPC, r = tid % TPC, j = slice * CB + jj;
    const bool col = j < a.Dv;
    int i0[NC];
#pragma unroll
    for (int m = 0; m < NC; m++) i0[m] = 4 * (r + TPC * m);

    float S[NR];
    const bool has_state = a.state.data != nullptr;
    const bool clear = tg_cuda_record_clear(a.err);
    const char *scol = has_state && col ? tg_cuda_ptr(a.state, 0, j, h, b) : nullptr;
    state_load<NR, TPC, ST, VEC>(S, scol, a.state, r, a.Dk, has_state && col);

#pragma unroll 1
    for (long long t = 0; t < a.T; t++) {
        const char *qrow = tg_cuda_ptr(a.q, 0, hk, t, b), *krow = tg_cuda_ptr(a.k, 0, hk, t, b);
        float4 kc[NC], qc[NC];
#pragma unroll
        for (int m = 0; m < NC; m++) {
            kc[m] = ld_row4(krow, i0[m], a.Dk);
            qc[m] = ld_row4(qrow, i0[m], a.Dk);
        }
        const float gv = ldf(a.g, h, t, b, 0), bt = ldf(a.beta, h, t, b, 0);
        const float vj = col ? ldf(a.v, j, h, t, b) : 0.0f;
        if (a.l2norm) {
            const float iq = inv_norm(qrow, a.q.nb[0], a.Dk, lane), ik = inv_norm(krow, a.k.nb[0], a.Dk, lane);
#pragma unroll
            for (int m = 0; m < NC; m++) scale_row4(qc[m], iq, i0[m], a.Dk), scale_row4(kc[m], ik, i0[m], a.Dk);
        }
        decay<NR>(S, a.log_gate ? expf(gv) : gv);
        float u;
        if (a.delta) {
            float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int m = 0; m < NC; m++) {
                p[0] = fmaf(S[4 * m], kc[m].x, p[0]);
                p[1] = fmaf(S[4 * m + 1], kc[m].y, p[1]);
                p[2] = fmaf(S[4 * m + 2], kc[m].z, p[2]);
                p[3] = fmaf(S[4 * m + 3], kc[m].w, p[3]);
            }
            u = bt * (vj - group_sum<TPC>((p[0] + p[1]) + (p[2] + p[3])));
        } else {
            u = bt * vj;
        }
        const float4 p = isfinite(u) ? update_out_r<NC, false>(S, kc, qc, u, i0, a.Dk)
                                     : update_out_r<NC, true>(S, kc, qc, u, i0, a.Dk);
        const float o = group_sum<TPC>((p.x + p.y) + (p.z + p.w));
        if (r == 0 && col) *(float *)tg_cuda_ptr(a.o, j, h, t, b) = a.scale * o;
    }
    if (has_state && col && clear) state_store<NR, TPC, ST, VEC>(S, (char *)scol, a.state, r, a.Dk);
}

// The decode kernel: grid and thread layout of decode-reg, but every load
// goes through shared memory by cp.async, so that bytes in flight cost no
// registers: each thread copies its own state chunks (at [m][lane], no bank
// conflicts), the lanes of a warp copy the step's q and k rows (zero-padded to
// DKP) into the warp's own buffers; then one wait and a __syncwarp, and the
// step (decode_step). No block barrier: each warp runs on its own.
// Needs 16-byte q/k rows and the 4-element state path (or no state).
template <int NR, int TPC, typename ST>
__global__ void __launch_bounds__(kMaxThreads) delta_decode_kernel(const delta_args a) {
    static_assert(NR % 4 == 0 && 32 % TPC == 0, "layout");
    constexpr int NC = NR / 4, CBY = 4 * (int)sizeof(ST);  // chunk bytes in the state's type
    extern __shared__ float4 dsm4[];
    const int DKP = a.DKP;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, CB = a.CB;
    float *wq = (float *)((char *)dsm4 + (size_t)w * (2 * DKP * 4 + 32 * NC * CBY)), *wk = wq + DKP;
    char *wst = (char *)(wk + DKP);
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk);
    const int jj = tid / TPC, r = tid % TPC, j = slice * CB + jj;
    const bool col = j < a.Dv;
    const bool has_state = a.state.data != nullptr;
    char *scol = has_state && col ? tg_cuda_ptr(a.state, 0, j, h, b) : nullptr;
    const bool clear = tg_cuda_record_clear(a.err);

    // 1. this thread's state chunks, in flight while the step's inputs come
    if (scol) issue_state<NR, TPC, ST>(wst, scol, a.Dk, r, lane);
    float S[NR];
#pragma unroll 1
    for (long long t = 0; t < a.T; t++) {
        // 2. the step's q and k rows, v, gate, beta
        __syncwarp();  // the previous step's readers of wq/wk are done
        issue_qk(wq, wk, tg_cuda_ptr(a.q, 0, hk, t, b), tg_cuda_ptr(a.k, 0, hk, t, b), DKP, a.Dk, lane);
        const float gv = ldf(a.g, h, t, b, 0), bt = ldf(a.beta, h, t, b, 0);
        const float vj = col ? ldf(a.v, j, h, t, b) : 0.0f;
        cp_async_wait_all();
        __syncwarp();
        if (t == 0) read_state<NR, TPC, ST>(S, wst, scol != nullptr, a.Dk, r, lane);
        // 3. the step
        const float o = decode_step<NR, TPC>(S, wq, wk, gv, bt, vj, a, r, lane);
        if (r == 0 && col) *(float *)tg_cuda_ptr(a.o, j, h, t, b) = a.scale * o;
    }
    // 4. the final state, straight from registers
    if (scol && clear) write_state<NR, TPC, ST>(S, scol, a.Dk, r);
}

// The persistent decode kernel (T == 1): as many blocks as fit at once; warp
// gw takes tiles gw, gw + W, ... (a tile: the 32/TPC columns of one value
// head and sequence that one warp owns; tiles of a head are consecutive), with
// two buffers per warp: the next tile's state, q/k rows, v, gate and beta are
// in flight (cp.async group) while the current tile computes, so every warp
// keeps loads outstanding all the time and no block ever starts cold.
template <int NR, int TPC, typename ST>
__global__ void __launch_bounds__(kMaxThreads) delta_decode_persistent_kernel(const delta_args a, int ntiles) {
    static_assert(NR % 4 == 0 && 32 % TPC == 0, "layout");
    constexpr int NC = NR / 4, CBY = 4 * (int)sizeof(ST), CPW = 32 / TPC;
    extern __shared__ float4 dsm4[];
    const int DKP = a.DKP;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = lane % TPC, jw = lane / TPC;
    const int per_buf = persistent_buf_bytes(DKP, NR, (int)sizeof(ST));
    char *wbase = (char *)dsm4 + (size_t)w * 2 * per_buf;
    const int cgs = (a.Dv + CPW - 1) / CPW;  // tiles per head
    const bool has_state = a.state.data != nullptr;
    const int W = gridDim.x * (blockDim.x >> 5);
    const bool clear = tg_cuda_record_clear(a.err);

    auto issue = [&](int tile, char *buf) {
        const int cg = tile % cgs, hb = tile / cgs, h = hb % a.Hv, b = hb / a.Hv, hk = h / (a.Hv / a.Hk);
        float *wq = (float *)buf, *wk = wq + DKP, *wv = (float *)(buf + 2 * DKP * 4 + 32 * NC * CBY);
        const int j = cg * CPW + jw;
        issue_qk(wq, wk, tg_cuda_ptr(a.q, 0, hk, 0, b), tg_cuda_ptr(a.k, 0, hk, 0, b), DKP, a.Dk, lane);
        if (has_state && j < a.Dv)
            issue_state<NR, TPC, ST>(buf + 2 * DKP * 4, tg_cuda_ptr(a.state, 0, j, h, b), a.Dk, r, lane);
        if (lane < CPW && cg * CPW + lane < a.Dv) cp_async_n<4>(wv + lane, tg_cuda_ptr(a.v, cg * CPW + lane, h, 0, b));
        if (lane == 0) {
            cp_async_n<4>(wv + CPW, tg_cuda_ptr(a.g, h, 0, b, 0));
            cp_async_n<4>(wv + CPW + 1, tg_cuda_ptr(a.beta, h, 0, b, 0));
        }
    };

    int tile = blockIdx.x * (blockDim.x >> 5) + w;
    if (tile < ntiles) issue(tile, wbase);
    cp_async_commit();
#pragma unroll 1
    for (int it = 0; tile < ntiles; it++, tile += W) {
        char *buf = wbase + (it & 1) * per_buf;
        if (tile + W < ntiles) issue(tile + W, wbase + ((it + 1) & 1) * per_buf);
        cp_async_commit();
        cp_async_wait_prior1();  // this tile's group is done (the next one may still fly)
        __syncwarp();
        const int cg = tile % cgs, hb = tile / cgs, h = hb % a.Hv, b = hb / a.Hv;
        const int j = cg * CPW + jw;
        const bool col = j < a.Dv;
        float *wq = (float *)buf, *wk = wq + DKP;
        const float *wv = (const float *)(buf + 2 * DKP * 4 + 32 * NC * CBY);
        float S[NR];
        read_state<NR, TPC, ST>(S, buf + 2 * DKP * 4, has_state && col, a.Dk, r, lane);
        const float o = decode_step<NR, TPC>(S, wq, wk, wv[CPW], wv[CPW + 1], col ? wv[jw] : 0.0f, a, r, lane);
        if (r == 0 && col) *(float *)tg_cuda_ptr(a.o, j, h, 0, b) = a.scale * o;
        if (has_state && col && clear) write_state<NR, TPC, ST>(S, tg_cuda_ptr(a.state, 0, j, h, b), a.Dk, r);
        __syncwarp();  // every lane is done with buf before the next iteration refills it
    }
}

// shared memory of the decode kernel per warp (bytes)
size_t decode_smem_per_warp(int DKP, int NR, size_t es) { return 2 * (size_t)DKP * 4 + 32 * (size_t)(NR / 4) * 4 * es; }

bool elem_aligned(const tg_tensor *t) {
    const size_t es = tg_type_size(t->type);
    if ((uintptr_t)t->data % es) return false;
    for (int i = 0; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % es) return false;
    return true;
}

typedef void (*delta_kernel_fn)(delta_args);

enum { KERN_AUTO = 0, KERN_CHUNK = 1, KERN_DECODE = 2, KERN_DECODE_REG = 3, KERN_PERSISTENT = 4 };

typedef void (*persistent_fn)(delta_args, int);
template <int NR, int TPC> persistent_fn pick_persistent(tg_type st) {
    if (st == TG_TYPE_F16) return delta_decode_persistent_kernel<NR, TPC, __half>;
    if (st == TG_TYPE_BF16) return delta_decode_persistent_kernel<NR, TPC, __nv_bfloat16>;
    return delta_decode_persistent_kernel<NR, TPC, float>;
}

template <int NR, int TPC> delta_kernel_fn pick_kernel(int kern, bool vec, tg_type st) {
    if (kern == KERN_DECODE) {
        if (st == TG_TYPE_F16) return delta_decode_kernel<NR, TPC, __half>;
        if (st == TG_TYPE_BF16) return delta_decode_kernel<NR, TPC, __nv_bfloat16>;
        return delta_decode_kernel<NR, TPC, float>;
    }
    if (kern == KERN_DECODE_REG) {
        if (!vec) return delta_decode_reg_kernel<NR, TPC, float, false>;
        if (st == TG_TYPE_F16) return delta_decode_reg_kernel<NR, TPC, __half, true>;
        if (st == TG_TYPE_BF16) return delta_decode_reg_kernel<NR, TPC, __nv_bfloat16, true>;
        return delta_decode_reg_kernel<NR, TPC, float, true>;
    }
    if (!vec) return delta_rule_kernel<NR, TPC, float, false>;
    if (st == TG_TYPE_F16) return delta_rule_kernel<NR, TPC, __half, true>;
    if (st == TG_TYPE_BF16) return delta_rule_kernel<NR, TPC, __nv_bfloat16, true>;
    return delta_rule_kernel<NR, TPC, float, true>;
}

// q/k rows as 16-byte vectors: unit stride, 16-byte aligned row starts.
bool rows_vec4(const tg_tensor *t) {
    if (t->nb[0] != 4 || (uintptr_t)t->data % 16) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16) return false;
    return true;
}

// Bytes of the F32 copies of 16-bit q, k, v that the scan reads (0: all F32), each 256-byte aligned.
size_t qkv32_bytes(const tg_tensor *const in[3], size_t off[3]) {
    size_t total = 0;
    for (int i = 0; i < 3; i++) off[i] = total, total += ((size_t)tg_nelements(in[i]) * 4 + 255) / 256 * 256;
    return in[0]->type == TG_TYPE_F32 && in[1]->type == TG_TYPE_F32 && in[2]->type == TG_TYPE_F32 ? 0 : total;
}

// The scan into an F32 o (dst); its F32 copies of 16-bit q/k/v at scratch offset scr_off.
tg_status delta_scan(tg_backend *be, const tg_tensor *dst, size_t scr_off) {
    const char *call = "delta_rule";
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *st = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], B = q->ne[3], Dv = v->ne[0], Hv = v->ne[1];

    // the scan reads F32 q/k/v: 16-bit ones are converted into the backend's scratch first
    tg_tensor qkv32[3];
    const tg_tensor *in[3] = {q, k, v};
    size_t off[3];
    if (const size_t total = qkv32_bytes(in, off)) {
        void *scr = nullptr;
        tg_status s = tg_cuda_scratch(be, scr_off + total, &scr, call);
        if (s != TG_OK) return s;
        scr = (char *)scr + scr_off;
        for (int i = 0; i < 3; i++) {
            qkv32[i] = *in[i];
            qkv32[i].type = TG_TYPE_F32;
            qkv32[i].data = (char *)scr + off[i];
            qkv32[i].nb[0] = 4;
            for (int d = 1; d < 4; d++) qkv32[i].nb[d] = qkv32[i].nb[d - 1] * (size_t)qkv32[i].ne[d - 1];
            if ((s = tg_cuda_copy(be, tg_cuda_desc_of(in[i]), tg_cuda_desc_of(&qkv32[i]), false, call)) != TG_OK)
                return s;
        }
        q = &qkv32[0], k = &qkv32[1], v = &qkv32[2];
    }
    if (Dk < 1 || Dk > 256 || Dv < 1 || Dv > 256 || Hk < 1 || Hv % Hk != 0)
        return tg_err(TG_ERR_ARG, "[%s] CUDA: Dk %lld, Dv %lld must be in [1, 256] and Hv %lld a multiple of Hk %lld",
                      call, (long long)Dk, (long long)Dv, (long long)Hv, (long long)Hk);
    const tg_tensor *ts[7] = {q, k, v, g, beta, dst, st};
    for (const tg_tensor *t : ts)
        if (t && !elem_aligned(t))
            return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: tensor '%s' is a view at an address or stride that is not a "
                          "multiple of its element size", call, t->name);

    // variant: threads per column (more threads when the grid is small and T long), rows per thread
    const int sms = tg_cuda_sms(cu);
    //    (auto: 8 for Dk > 128; for a small grid and T > 1 also for Dk in (64, 128] and Dk <= 32,
    //    where a step is a short dependent chain and twice the warps hide its latency; Dk in (32, 64]
    //    keeps 4: T tokens and T single steps then agree bit for bit there by default)
    int tpc = Dk > 128 ? 8 : 4;
    const bool small_grid = T > 1 && B * Hv * Dv * 4 < 2LL * sms * 1024;
    if (cu->sig.delta_tpc == 8 || (cu->sig.delta_tpc == 0 && small_grid && (Dk > 64 || Dk <= 32))) tpc = 8;
    const int rows = (int)((Dk + tpc - 1) / tpc);
    const int NR = rows <= 4 ? 4 : rows <= 8 ? 8 : rows <= 16 ? 16 : 32;
    bool vec = st && Dk % 4 == 0 && !cu->sig.delta_scalar;
    if (vec) {
        const size_t es = tg_type_size(st->type), al = 4 * es;
        vec = st->nb[0] == es && (uintptr_t)st->data % al == 0;
        for (int i = 1; i < 4; i++) vec = vec && (st->ne[i] == 1 || st->nb[i] % al == 0);
    }

    // kernel: decode (no block barriers) for single steps, chunk kernel for T > 1. The decode
    // kernels need 16-byte q/k rows (and the smem one the 4-element state path); other layouts
    // take the chunk kernel, which computes the same bits.
    const bool qk_vec = Dk % 4 == 0 && rows_vec4(q) && rows_vec4(k);
    int kern = cu->sig.delta_kernel;
    if (kern == KERN_AUTO) kern = T == 1 ? KERN_DECODE : KERN_CHUNK;
    if (kern == KERN_PERSISTENT && T != 1) kern = KERN_DECODE;
    if ((kern == KERN_DECODE || kern == KERN_PERSISTENT) && !(qk_vec && (!st || vec))) kern = KERN_CHUNK;
    if (kern == KERN_DECODE_REG && !qk_vec) kern = KERN_CHUNK;
    const bool dec = kern != KERN_CHUNK;

    delta_args a = {};
    a.q = tg_cuda_desc_of(q), a.k = tg_cuda_desc_of(k), a.v = tg_cuda_desc_of(v);
    a.g = tg_cuda_desc_of(g), a.beta = tg_cuda_desc_of(beta), a.o = tg_cuda_desc_of(dst);
    a.state = tg_cuda_desc_of(st);  // data NULL: no state
    a.Dk = (int)Dk, a.Dv = (int)Dv, a.Hk = (int)Hk, a.Hv = (int)Hv, a.B = (int)B, a.T = T;
    a.delta = dp.mode == TG_DELTA_GATED_DELTA;
    a.log_gate = dp.gate == TG_GATE_LOG;
    a.l2norm = dp.l2norm_qk;
    a.scale = dp.scale;
    a.DKP = NR * tpc;
    a.qk16 = qk_vec;
    a.err = cu->d_err;
    int threads;
    size_t smem = 0;
    if (dec) {
        // blocks of up to dec_threads (default 128) threads, whole warps of columns
        const int want = cu->sig.delta_dec_threads > 0 ? cu->sig.delta_dec_threads : 128;
        const int cpw = 32 / tpc, cb_max = (want < 32 ? 32 : want > kMaxThreads ? kMaxThreads : want) / 32 * cpw;
        const int cb_dv = (int)((Dv + cpw - 1) / cpw * cpw);
        a.CB = cb_dv < cb_max ? cb_dv : cb_max;
        if (kern == KERN_DECODE) {
            const size_t per_warp = decode_smem_per_warp(a.DKP, NR, st ? tg_type_size(st->type) : 4);
            while (a.CB > cpw && (size_t)(a.CB / cpw) * per_warp > 48 * 1024) a.CB /= 2;
            smem = (size_t)(a.CB / cpw) * per_warp;
        }
        a.nslices = (int)((Dv + a.CB - 1) / a.CB);
        threads = a.CB * tpc;
        a.TC = 1;
    } else {
        a.CB = (int)(Dv < kMaxThreads / tpc ? Dv : kMaxThreads / tpc);
        a.nslices = (int)((Dv + a.CB - 1) / a.CB);
        threads = (a.CB * tpc + 31) / 32 * 32;
        const size_t per_step = (2 * (size_t)a.DKP + 2 * (size_t)a.CB + 2) * sizeof(float);
        int tc = (int)(kSmemBudget / per_step);
        tc = tc < 1 ? 1 : tc > kMaxTC ? kMaxTC : tc;
        a.TC = (int)(T < tc ? T : tc);
        smem = per_step * a.TC;
    }
    const long long blocks = (long long)a.nslices * Hv * B;
    if (blocks > INT_MAX || Hv > INT_MAX || B > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid of %lld blocks too large", call, blocks);

    const tg_type stype = st ? st->type : TG_TYPE_F32;
    if (kern == KERN_PERSISTENT) {
        // warps of 32/tpc columns; blocks of up to dec_threads, 48 KB of buffers at most; as many
        // blocks as fit on the GPU at once (occupancy asked once per kernel and block shape)
        const int cpw = 32 / tpc;
        const long long tiles = (long long)B * Hv * ((Dv + cpw - 1) / cpw);
        if (tiles > INT_MAX) return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: %lld tiles too many", call, tiles);
        const int want = cu->sig.delta_dec_threads > 0 ? cu->sig.delta_dec_threads : 128;
        int wpb = (want < 32 ? 32 : want > kMaxThreads ? kMaxThreads : want) / 32;
        const size_t per_warp = 2 * (size_t)persistent_buf_bytes(a.DKP, NR, st ? (int)tg_type_size(st->type) : 4);
        while (wpb > 1 && wpb * per_warp > 48 * 1024) wpb /= 2;
        smem = wpb * per_warp;
        threads = wpb * 32;
        persistent_fn pf = nullptr;
        if (tpc == 4)
            pf = NR == 4 ? pick_persistent<4, 4>(stype) : NR == 8 ? pick_persistent<8, 4>(stype)
               : NR == 16 ? pick_persistent<16, 4>(stype) : pick_persistent<32, 4>(stype);
        else
            pf = NR == 4 ? pick_persistent<4, 8>(stype) : NR == 8 ? pick_persistent<8, 8>(stype)
               : NR == 16 ? pick_persistent<16, 8>(stype) : pick_persistent<32, 8>(stype);
        if ((const void *)pf != cu->delta_occ_fn || threads != cu->delta_occ_threads) {
            TG_CUDA_TRY(be, call, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cu->delta_occ, pf, threads, smem));
            cu->delta_occ_fn = (const void *)pf, cu->delta_occ_threads = threads;
        }
        const int occ = cu->delta_occ;
        const long long need = (tiles + wpb - 1) / wpb, fit = (long long)sms * (occ > 0 ? occ : 1);
        pf<<<(unsigned)(need < fit ? need : fit), threads, smem, cu->stream>>>(a, (int)tiles);
        TG_CUDA_LAUNCHED(be, call);
        snprintf(cu->delta_name, sizeof(cu->delta_name), "pdec%dx%d/%s/%s/b%d", NR, tpc, vec ? "vec" : "scalar",
                 st ? tg_type_name(st->type) : "nostate", threads);
        cu->delta_name_key[0] = -1;  // the name below is formatted again
        cu->sig_last[TG_CUDA_SIG_DELTA] = cu->delta_name;
        return TG_OK;
    }
    delta_kernel_fn fn = nullptr;
    if (tpc == 4)
        fn = NR == 4 ? pick_kernel<4, 4>(kern, vec, stype) : NR == 8 ? pick_kernel<8, 4>(kern, vec, stype)
           : NR == 16 ? pick_kernel<16, 4>(kern, vec, stype) : pick_kernel<32, 4>(kern, vec, stype);
    else
        fn = NR == 4 ? pick_kernel<4, 8>(kern, vec, stype) : NR == 8 ? pick_kernel<8, 8>(kern, vec, stype)
           : NR == 16 ? pick_kernel<16, 8>(kern, vec, stype) : pick_kernel<32, 8>(kern, vec, stype);
    fn<<<(unsigned)blocks, threads, smem, cu->stream>>>(a);
    TG_CUDA_LAUNCHED(be, call);

    // name of the variant, for bench/ (formatted only when it changes: keep the launch path lean)
    char *name = cu->delta_name;
    const size_t name_size = sizeof(cu->delta_name);
    int *last = cu->delta_name_key;
    const int now[6] = {NR, tpc, vec, st ? (int)st->type : -1, a.TC, kern * 1024 + (dec ? threads : 0)};
    if (memcmp(now, last, sizeof(now)) != 0 || cu->sig_last[TG_CUDA_SIG_DELTA] != name) {
        memcpy(last, now, sizeof(now));
        if (dec)
            snprintf(name, name_size, "%s%dx%d/%s/%s/b%d", kern == KERN_DECODE ? "dec" : "decreg", NR, tpc,
                     vec ? "vec" : "scalar",
                     st ? tg_type_name(st->type) : "nostate", threads);
        else
            snprintf(name, name_size, "rows%dx%d/%s/%s/tc%d", NR, tpc, vec ? "vec" : "scalar",
                     st ? tg_type_name(st->type) : "nostate", a.TC);
    }
    cu->sig_last[TG_CUDA_SIG_DELTA] = name;
    return TG_OK;
}

}  // namespace

// delta_rule: src q, k, v, g, beta, state|NULL -> dst o {Dv, Hv, T, B} F32/F16/BF16.
tg_status tg_cuda_delta_rule(tg_backend *be, const tg_tensor *dst) {
    const char *call = "delta_rule";
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], T = q->ne[2], B = q->ne[3], Dv = v->ne[0];
    if (T == 0 || B == 0) return TG_OK;

    // the chunked tensor-core path (cuda/delta_rule_chunked.cu): algo CHUNKED at any T; AUTO with
    // Dk >= 64 where it measured faster than the scan (bench/NOTES.md): from T >= 64 where it takes
    // the single-kernel form (tg_cuda_delta_single_form: the (sequence, value head) pairs fill the
    // GPU, or the BF16 wgmma kernel runs from fewer; gdn.T*/scan against /chunked, measured where
    // they fill), else from T >= kFewHeadsMinT (the chunk-parallel form, whose three launches cost
    // about 200 us whatever T: 4,804 us against the scan's 9,404 at B1 H16 T16384; the crossover is
    // estimated from that row and gdn.T16/chunked, not measured). Never with SCAN or a forced scan
    // kernel.
    // (The single kernel's full case: from T >= 32, gdn.T32/chunked 46.7 us against the scan's 50.2.)
    const long long min_t = cu->sig.delta_chunk_min_t > 0                                            ? cu->sig.delta_chunk_min_t
                            : T >= 32 && T < 64 && Dk == 128 && tg_cuda_delta_chunked_full(be, dst) ? 32
                                                                                                    : 64;
    // (the form is asked only where T alone does not decide: decode steps skip it)
    const bool auto_chunked = Dk >= 64 && T >= min_t && (T >= kFewHeadsMinT || tg_cuda_delta_single_form(be, dst));
    if (tg_cuda_delta_chunked_covers(Dk, Dv) && cu->sig.delta_kernel == KERN_AUTO &&
        (dp.algo == TG_DELTA_ALGO_CHUNKED || (dp.algo == TG_DELTA_ALGO_AUTO && auto_chunked)))
        return tg_cuda_delta_rule_chunked(be, dst);

    if (dst->type == TG_TYPE_F32) return delta_scan(be, dst, 0);
    // 16-bit o: the scan writes F32 rows into the scratch (reserved whole first, so that the scan's
    // q/k/v copies after it grow nothing), converted into o after
    tg_tensor o32 = *dst;
    o32.type = TG_TYPE_F32;
    o32.nb[0] = 4;
    for (int d = 1; d < 4; d++) o32.nb[d] = o32.nb[d - 1] * (size_t)o32.ne[d - 1];
    const size_t ob = ((size_t)tg_nelements(dst) * 4 + 255) / 256 * 256;
    const tg_tensor *in[3] = {q, k, v};
    size_t off[3];
    void *scr = nullptr;
    tg_status s = tg_cuda_scratch(be, ob + qkv32_bytes(in, off), &scr, call);
    if (s != TG_OK) return s;
    o32.data = scr;
    if ((s = delta_scan(be, &o32, ob)) != TG_OK) return s;
    return tg_cuda_copy(be, tg_cuda_desc_of(&o32), tg_cuda_desc_of(dst), false, call);
}
