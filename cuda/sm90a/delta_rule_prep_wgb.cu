// delta_rule_prep_wgb.cu - the chunk-parallel form's prep kernel (phase 1 of
// cuda/delta_rule_chunked_phases.cu) with BF16 k and v at Dk = Dv = 128 on Hopper's BF16 warpgroup
// tensor cores (wgmma m64nNk16, sm_90a): delta_prep_wgb_kernel. run_phases takes it where the prep
// kernel's full instance would run with BF16 k and v (docs/ops.md). One block of 512 threads (four
// warpgroups) per (chunk, value head, sequence) unit, two blocks per SM (~103 KB of shared memory
// and 64 registers each), so that one block's copies overlap the other's products. It writes what
// delta_prep_kernel<true> writes, in the same layouts (F32 rows, or F16 rows with row scales where
// h16): Kd^T = (K (.) d(C-1, t))^T and, GATED_DELTA, W = T (beta d(t, -1) K), U = T (beta V) with
// T = (I + A)^-1, A = beta K K^T (.) d(t, s) (s < t); GATED_LINEAR: U = beta V (gamma and the gate
// arrays come from delta_gates_kernel). K is l2-normalized by scaling rows and columns of the
// products (1 / |k_t|), as in delta_wgb_kernel.
//   start   K's and V's raw rows into swizzled tiles and the chunk's gate arrays (delta_gates_kernel's)
//           by cp.async (GATED_DELTA: V's rows a second group, waited for at step 3's last barrier); barrier
//   1       K K^T (columns 16 wg ..) on wgmma; meanwhile 1 / |k_t| (warps 8-15); barrier
//   2       Kd^T from the raw K (F32 rows stored; h16: the rows' maxima); GATED_LINEAR: U = beta V
//           stored (h16: barrier, Kd^T's F16 rows) and done. A = beta_t K_t.K_s d(t, s) / |k_t| |k_s|
//           as F32 rows from the accumulators, A's diagonal 16 x 16 blocks inverted by the warps
//           that hold them; barrier
//   3       h16: Kd^T's F16 rows stored; the rest of the doubling (cuda/chunk_parts.cuh); barrier
//           (its predicate: every column factor beta_t d(t, -1) / |k_t| finite)
//   4       the factors finite: T diag(beta_t d(t, -1) / |k_t|) and T diag(beta_t) (lower triangle) as
//           hi and lo K-major tiles over A's rows and R's lo tile; else T's tiles, K' = beta_t d(t, -1)
//           K_t / |k_t| (keep-zero products) and R = beta_t V_t as hi (over the raw K, V) and lo; barrier
//   5       W = (T diag)_hi K + (T diag)_lo K and U the same with V, from the raw tiles (four products),
//           else W = T_hi K'_hi + T_hi K'_lo + T_lo K'_hi and U the same
//           with R (the lo x lo terms dropped), all on wgmma (value / key columns 32 wg ..); U stored;
//           h16: W's row maxima, barrier, W's F16 rows staged over T's F32 rows, barrier, copied out
// fo (the state pass makes the output, delta_rule_phases.cuh): Q's raw rows too (over K' lo's tile,
// free until step 4), Q K^T beside K K^T in step 1 (the first 8 warps meanwhile: 1 / |q_t| and each
// Q row's largest magnitude), and at the start of step 2 P's F16 rows (a power-of-two scale per row
// and 16-column block: the warp's quads hold them whole) and Q's F16 rows with their factors. FO is a
// template parameter: as a runtime flag inside step 1's wgmma span it made ptxas inject wgmma waits
// into both instances (C7517 / C7519). GATED_LINEAR with fo loads no V and stores no U: the state pass
// reads V's raw rows, and beta_t is folded into Kd^T's column t and P's column s instead.
// The stored values are rounded to TF32 as delta_prep_kernel's are (the state pass's products are
// TF32), but the products before that are near-F32 where delta_prep_kernel's run on TF32 operands.
#include "wgmma.cuh"
#include "../delta_rule_phases.cuh"

namespace {

// shared memory (bytes past the 1024-aligned base): K (raw, then K' hi), V (raw, then R hi), K' lo,
// R lo (64 rows x 128, two blocks of 64 columns each), A's F32 rows (T's hi and lo tiles over them
// once the doubling is done), T's F32 rows (W's F16 staging over them once T's tiles are made),
// then the gate arrays, 1 / |k_t|, the h16 row maxima (64 of W, 128 of Kd^T, 64 of Q) and 1 / |q_t|
constexpr int pK = 0, pV = 16384, pKl = 32768, pRl = 49152, pA = 65536, pTh = pA, pTl = pA + 8192;
constexpr int pT = pA + kC * kPS * 4, pF = pT + kC * kPS * 4;
static_assert(pT % 1024 == 0 && pTl + 8192 <= pT && kC * 128 * 2 <= kC * kPS * 4, "the prep kernel's tiles");
constexpr size_t kSmemP = pF + (8 * kC + 4) * 4 + 4 * kC * 4 + 128 * 4 + 1024;  // + the alignment slack
static_assert(2 * (kSmemP + 1024) <= 233472, "two blocks an SM");

// 8 F16 values (bits, in memory order) as one 16-byte unit
__device__ __forceinline__ uint4 h16_unit(const unsigned short *hs) {
    return make_uint4(hs[0] | (unsigned)hs[1] << 16, hs[2] | (unsigned)hs[3] << 16, hs[4] | (unsigned)hs[5] << 16,
                      hs[6] | (unsigned)hs[7] << 16);
}
// T's F32 rows (lower triangle and diagonal) with two column scalings, as hi and lo K-major BF16
// tiles (64 x 64 each), by kNT threads: T diag(beta_s d(s, -1) / |k_s|) into (thw, tlw) and T
// diag(beta_s) into (thu, tlu), so that W = T K' and U = T R come from the raw K and V tiles (where
// every beta_s d(s, -1) / |k_s|, computed in this order, is finite: a masked zero of T stays zero)
[[maybe_unused]] __device__ __forceinline__ void t_tiles_scaled(const float *sTm, const float *sB, const float *sD0,
                                                                const float *sNk, unsigned char *thw, unsigned char *tlw,
                                                                unsigned char *thu, unsigned char *tlu) {
#pragma unroll
    for (int m = 0; m < kC * kC / 4 / kNT; m++) {
        const int x = threadIdx.x + kNT * m, t = x >> 4, s0 = (x & 15) * 4;
        const float4 v = *(const float4 *)&sTm[t * kPS + s0];
        float e[4] = {s0 <= t ? v.x : 0.0f, s0 + 1 <= t ? v.y : 0.0f, s0 + 2 <= t ? v.z : 0.0f, s0 + 3 <= t ? v.w : 0.0f};
        float w[4];
        // (the four columns' factors as one 16-byte load each: 4 scalar loads at a 16-byte lane stride were 2-way conflicts)
        const float4 b4 = *(const float4 *)&sB[s0], d4 = *(const float4 *)&sD0[s0], n4 = *(const float4 *)&sNk[s0];
        const float bb[4] = {b4.x, b4.y, b4.z, b4.w}, dd[4] = {d4.x, d4.y, d4.z, d4.w}, nn[4] = {n4.x, n4.y, n4.z, n4.w};
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = e[i] * (bb[i] * dd[i] * nn[i]), e[i] *= bb[i];
        tile_hl4(thu, tlu, t, s0, e);
        tile_hl4(thw, tlw, t, s0, w);
    }
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// fo: unit u's P and Q F16 rows (delta_rule_phases.cuh) from this thread's Q K^T accumulators (a 64 x 16
// tile: columns s0 ..; rows r0 = 16 wq + g and r0 + 8, columns 8 (r >> 2) + c2 + (r & 1)) and the raw Q
// tile (sq, sw2's layout), by kNT threads. P's values are the output kernel's (p_entry); a quad holds a row's 16 columns of the block, so its scale needs no barrier, and each lane
// stores one 4-byte word of an 8-column group in h16_pos's order after one exchange with lane ^ 2.
__device__ __forceinline__ void fo_rows(const phase_args &a, long long u, const unsigned char *sq, const float (&acc)[8],
                                        int r0, int s0, const float *sNq, const float *sNk, const int *rmQ,
                                        const float *sL, const float *sSg, const int *sZ, const float *sEp,
                                        const float *sEm, const float *sD0, bool tab, const float *sBs) {
    const int tid = threadIdx.x, q = tid & 3;
    float *const Ph = a.Ph + u * kH16PFloats, *const Qh = a.Qh + u * kH16QFloats;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int t = r0 + 8 * hh;
        const float nq = sNq[t];
        float p[2][2];
        int mb = 0;
#pragma unroll
        for (int grp = 0; grp < 2; grp++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int s = s0 + 8 * grp + 2 * q + e;
                p[grp][e] = p_entry(acc[4 * grp + 2 * hh + e], t, s, nq, sNk, sL, sSg, sZ, sEp, sEm, tab);
                if (sBs) p[grp][e] *= sBs[s];  // (GATED_LINEAR: beta_s, V's rows raw in the state pass)
                mb = max(mb, h16_mag(p[grp][e]));
            }
        mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
        mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
        float mul, inv;
        h16_row_scale(mb, &mul, &inv);
#pragma unroll
        for (int grp = 0; grp < 2; grp++) {
            const float e0 = p[grp][0] * mul, e1 = p[grp][1] * mul;
            const float recv = __shfl_xor_sync(0xffffffffu, q < 2 ? e1 : e0, 2);
            const __half2 w = q < 2 ? __floats2half2_rn(e0, recv) : __floats2half2_rn(recv, e1);
            *(__half2 *)((__half *)Ph + t * kH16PLD + s0 + 8 * grp + 2 * ((q & 1) * 2 + (q >> 1))) = w;
        }
        if (q == 0) Ph[kH16PScale + 4 * t + s0 / 16] = inv;
    }
    // Q's rows: 16-byte units (8 columns each) from the raw tile, times the row's scale
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int x = tid + kNT * m, t = x >> 4, cu = x & 15;
        float mul, inv;
        h16_row_scale(rmQ[t], &mul, &inv);
        const uint4 v = *(const uint4 *)(sq + sw2(kC, t, 8 * cu));
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        unsigned short hs[8];
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const float2 y = bf_pair(w[f]);
            hs[h16_pos(2 * f)] = __half_as_ushort(__float2half_rn(y.x * mul));
            hs[h16_pos(2 * f + 1)] = __half_as_ushort(__float2half_rn(y.y * mul));
        }
        ((uint4 *)Qh)[t * (kH16WLD / 8) + cu] = h16_unit(hs);
    }
    if (tid < kC) {  // the rows' factors, and the padding of both (copied, never read)
        float mul, inv;
        h16_row_scale(rmQ[tid], &mul, &inv);
        Qh[kH16WScale + tid] = inv * sNq[tid];
        Qh[kH16WScale + kC + tid] = sD0[tid];
        ((uint4 *)Qh)[tid * (kH16WLD / 8) + 16] = make_uint4(0u, 0u, 0u, 0u);
        ((uint4 *)Ph)[tid * (kH16PLD / 8) + kC / 8] = make_uint4(0u, 0u, 0u, 0u);
    }
}
#endif

template <bool DELTA, bool FO> __global__ void __launch_bounds__(kNT, 2) delta_prep_wgb_kernel(const phase_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 psm4[];
    unsigned char *sm = (unsigned char *)psm4 + ((1024u - (smem_u32(psm4) & 1023u)) & 1023u);
    const uint32_t sb = smem_u32(sm);
    float *sL = (float *)(sm + pF), *sSg = sL + kC, *sB = sSg + kC, *sD0 = sB + kC, *sDl = sD0 + kC;
    float *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    float *sNk = (float *)(sTab + 4);
    int *rmW = (int *)(sNk + kC), *rmK = rmW + kC, *rmQ = rmK + 128;
    float *sNq = (float *)(rmQ + kC);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = wg_uniform(), wq = warp & 3;
    const phase_unit pu = unit_of(a, blockIdx.x);
    const int h = pu.h, b = pu.b, hk = pu.hk, n = pu.n;
    const long long t0 = pu.t0, u = pu.u;
    const bool h16 = a.h16; constexpr bool fo = FO;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    auto arow = [&](int r) { return 16 * wq + g + 8 * ((r >> 1) & 1); };
    auto acol = [&](int r) { return 8 * (r >> 2) + c2 + (r & 1); };

    // K and V rows (n of them, the rest zero-filled): two 16-byte units of each per thread. GATED_DELTA
    // first uses V in step 4, so its V rows are a second copy group, waited for at the barrier after
    // the doubling: their latency overlaps steps 1-3
    {
        if (!DELTA && !FO) cp_tiles2(sb + pK, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], sb + pV, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], n);
        else cp_tile(sb + pK, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], n);  // (GATED_LINEAR fo: V goes to the state pass raw)
        if (fo) cp_tile(sb + pKl, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], n);
        cp_gates(sb + pF, a.G, u);  // the chunk's gate arrays and flags (delta_gates_kernel's)
        cp_commit();
        if constexpr (DELTA) {
            cp_tile(sb + pV, tg_cuda_ptr(a.v, 0, h, t0, b), a.v.nb[2], n);
            cp_commit();
        }
    }
    if (tid < 2 * kC + 128) rmW[tid] = 0;  // (and rmK, rmQ)
    if (!a.l2norm && tid < kC) sNk[tid] = 1.0f, sNq[tid] = 1.0f;
    if constexpr (DELTA) tg_cp_async_wait<1>();  // (all but the newest group: V's rows)
    else cp_wait0();
    proxy_fence();
    __syncthreads();

    // 1: K K^T (DELTA) and Q K^T (fo); 1 / |k_t| (the last 8 warps, four threads a row); fo: 1 / |q_t| and
    // the Q rows' largest magnitudes (the first 8)
    float accA[8], accP[8];
    if constexpr (DELTA || FO) {
        pin(accA), pin(accP);
        wg_fence();
        if constexpr (DELTA) wgb_qk(accA, sdesc(sb + pK), sdesc(sb + pK + 16 * wg * 128));
        if constexpr (FO) wgb_qk(accP, sdesc(sb + pKl), sdesc(sb + pK + 16 * wg * 128));
        wg_commit();
    }
    if (a.l2norm && tid >= kNT - 4 * kC) {
        const int y = tid - (kNT - 4 * kC);
        const float r = bf_row_rnorm(sm + pK, y >> 2, y & 3);
        if ((y & 3) == 0) sNk[y >> 2] = r;
    }
    if (fo && tid < 4 * kC) {
        int mq;
        const float r = bf_row_rnorm(sm + pKl, tid >> 2, tid & 3, &mq);
        if ((tid & 3) == 0) {
            if (a.l2norm) sNq[tid >> 2] = r;
            rmQ[tid >> 2] = mq;
        }
    }
    __syncthreads();
    const int flags = *sTab;
    const bool tab = flags & 1, finl = flags & 4;
    if (fo) {
        wg_wait0();
        pin(accP);
        if constexpr (DELTA) pin(accA);
        fo_rows(a, u, sm + pKl, accP, arow(0), 16 * wg, sNq, sNk, rmQ, sL, sSg, sZ, sEp, sEm, sD0, tab, DELTA ? nullptr : sB);
    }

    // 2: Kd^T from the raw K (d(C-1, t) K[t][i] / |k_t|, rounded to TF32). The swizzle depends on t
    // mod 8 only, so lanes that read one column of K at tokens 8 apart meet in one bank. h16: thread
    // (ki, kq) has row ki's 16 tokens 16 kq .. (a warp's 32 lanes read 32 adjacent values of one K
    // row at a time), the rows' largest magnitudes by smem atomics, the F16 units stored after the
    // barrier. F32: 16 lanes a row (a float4 of tokens 4 q .. 4 q + 3 each, every store of a warp 512
    // contiguous bytes), lane q reading its four tokens from (q >> 1) mod 4 on, so that the 16 lanes of
    // a row meet 8 swizzled chunks, 2 lanes each (2 wavefronts: the least for one column).
    float *const Kd = a.Kd + u * kC * 128;
    const int ki = tid & 127, kq = tid >> 7;
    float ky[16];
    by_mul(finl, [&](auto mul) {
        if (h16) {
#pragma unroll
            for (int f = 0; f < 4; f++) {
                const float4 d = *(const float4 *)&sDl[16 * kq + 4 * f], nk = *(const float4 *)&sNk[16 * kq + 4 * f];
                const float dd[4] = {d.x, d.y, d.z, d.w}, nn[4] = {nk.x, nk.y, nk.z, nk.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = __bfloat162float(*(const __nv_bfloat16 *)(sm + pK + sw2(kC, 16 * kq + 4 * f + e, ki)));
                    // (GATED_LINEAR with fo: beta_t folded in; x 1 is exact, so the other instances are unchanged)
                    ky[4 * f + e] = tf32r(mul(dd[e], x * nn[e]) * (!DELTA && FO ? sB[16 * kq + 4 * f + e] : 1.0f));
                }
            }
            int mb = 0;
#pragma unroll
            for (int e = 0; e < 16; e++) mb = max(mb, h16_mag(ky[e]));
            atomicMax(&rmK[ki], mb);
        } else {
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const int x = tid + kNT * m, i = x >> 4, q = x & 15, t = 4 * q;
                const float4 d = *(const float4 *)&sDl[t], nk = *(const float4 *)&sNk[t];
                const float dd[4] = {d.x, d.y, d.z, d.w}, nn[4] = {nk.x, nk.y, nk.z, nk.w};
                float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int k = (e + (q >> 1)) & 3;
                    const float v = __bfloat162float(*(const __nv_bfloat16 *)(sm + pK + sw2(kC, t + k, i)));
                    float dk = dd[0], nkk = nn[0];
#pragma unroll
                    for (int z = 1; z < 4; z++) dk = k == z ? dd[z] : dk, nkk = k == z ? nn[z] : nkk;
                    // (GATED_LINEAR with fo: beta_t folded in here too, though fo always takes the F16 rows)
                    const float r = tf32r(mul(dk, v * nkk) * (!DELTA && FO ? sB[t + k] : 1.0f));
#pragma unroll
                    for (int z = 0; z < 4; z++) y[z] = k == z ? r : y[z];
                }
                *(float4 *)(Kd + i * kC + t) = make_float4(y[0], y[1], y[2], y[3]);
            }
        }
    });
    // ... and after the barrier (below), h16's units: row ki's tokens 16 kq .. as two 16-byte units
    // (8-token groups permuted by h16_pos), then the row's inverse scale
    auto kd_h16 = [&]() {
        float mk, inv;
        h16_row_scale(rmK[ki], &mk, &inv);
        unsigned short hs[16];
#pragma unroll
        for (int e = 0; e < 16; e++) hs[(e & 8) + h16_pos(e & 7)] = __half_as_ushort(__float2half_rn(ky[e] * mk));
        uint4 *const d = (uint4 *)((__half *)Kd + ki * kH16KLD + 16 * kq);
        d[0] = h16_unit(hs), d[1] = h16_unit(hs + 8);
        if (kq == 0) {  // the row's inverse scale, and its padding zeroed (copied, never read)
            Kd[kH16KScale + ki] = inv;
            ((uint4 *)Kd)[ki * (kH16KLD / 8) + kC / 8] = make_uint4(0u, 0u, 0u, 0u);
        }
    };
    float *const U = !DELTA && FO ? nullptr : a.U + u * kC * 128;  // (GATED_LINEAR with fo: no U)
    if constexpr (!DELTA) {
        // U = beta V (F32 rows, rounded to TF32): a warp's store is one row, 4 values a lane; fo: none (the
        // state pass reads V's raw rows, beta is in Kd^T's columns and P's)
#pragma unroll
        for (int m = 0; m < 4 && !FO; m++) {
            const int x = tid + kNT * m, t = x >> 5, j = 4 * (x & 31);
            const float bt = sB[t];
            const uint2 q = *(const uint2 *)(sm + pV + sw2(kC, t, j));
            const float2 v0 = bf_pair(q.x), v1 = bf_pair(q.y);
            *(float4 *)(U + t * 128 + j) = make_float4(tf32r(bt * v0.x), tf32r(bt * v0.y), tf32r(bt * v1.x), tf32r(bt * v1.y));
        }
        if (h16) {
            __syncthreads();
            kd_h16();
        }
        return;
    }
    float *const sAm = (float *)(sm + pA), *const sTm = (float *)(sm + pT);
    {
        wg_wait0();
        pin(accA);
        a_rows(accA, sAm, arow(0), 16 * wg + acol(0), sB, sNk, sL, sSg, sZ, sEp, sEm, tab);
        // A's diagonal block wg is this warpgroup's columns in warp wq = wg's rows
        if (wq == wg) {
            __syncwarp();
            if (lane < 16) invert_diag16(sAm, sTm, 16 * wg, lane);
        }
    }
    __syncthreads();
    if (h16) kd_h16();
    invert_unit_lower_doubling_rest<kNT>(sAm, sTm);
    cp_wait0();  // V's rows (the second copy group), for every thread after the barrier
    proxy_fence();
    // (the barrier also tells whether every column factor beta_t d(t, -1) / |k_t| is finite: a finite
    // decay times a zero key row's 1 / |k| = 1000 may not be, session 49's review)
    const bool scaled = __syncthreads_and(tid >= kC || isfinite(sB[tid] * sD0[tid] * sNk[tid]));

    // 4: every column factor finite: T diag(beta_t d(t, -1) / |k_t|) and T diag(beta_t) as hi and lo
    // tiles over A's rows and R's lo tile (W and U then come from the raw K and V: four products, not
    // six, and no pass over K and V); else T's tiles over A's rows, K' = beta_t d(t, -1) K_t / |k_t|
    // (keep-zero products) as hi (over the raw K) and lo, and R = beta_t V_t likewise over V
    if (scaled) {
        t_tiles_scaled(sTm, sB, sD0, sNk, sm + pTh, sm + pTl, sm + pRl, sm + pRl + 8192);
    } else {
        t_tiles(sTm, sm + pTh, sm + pTl);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            const int off = 16 * (tid + kNT * m), t = (off >> 7) & (kC - 1);
            const float bt = sB[t], dt = sD0[t], nk = sNk[t];
            bf_unit_split(sm + pK + off, sm + pKl + off,
                          [&](float2 v) { return make_float2(bt * keep_zero_mul(dt, v.x * nk), bt * keep_zero_mul(dt, v.y * nk)); });
            bf_unit_split(sm + pV + off, sm + pRl + off, [&](float2 v) { return make_float2(bt * v.x, bt * v.y); });
        }
    }
    proxy_fence();
    __syncthreads();

    // 5: W = T K', U = T R (A: T's tiles; B: K' / R, MN-major, columns 32 wg ..: block wg >> 1, 64
    // bytes into its rows for odd wg)
    float accW[16], accU[16];
#pragma unroll
    for (int r = 0; r < 16; r++) accW[r] = 0.0f, accU[r] = 0.0f;
    {
        const uint64_t dTh = sdesc(sb + pTh), cols = (wg >> 1) * 8192 + (wg & 1) * 64;
        const uint64_t dKb = sdesc(sb + pK + (uint32_t)cols), dVb = sdesc(sb + pV + (uint32_t)cols);
        constexpr uint64_t kTl = (pTl - pTh) / 16, kKl = (pKl - pK) / 16, kRl = (pRl - pV) / 16;
        pin(accW), pin(accU);
        if (scaled) {  // W = (T diag)_hi K + (T diag)_lo K, U the same with its tiles over R's lo and V
            const uint64_t dUh = sdesc(sb + pRl);
            wg_fence();
            wgb_pv(accU, dUh, dVb);
            wgb_pv(accU, dUh + 8192 / 16, dVb);
            wgb_pv(accW, dTh, dKb);
            wgb_pv(accW, dTh + kTl, dKb);
            wg_commit();
            wg_wait0();
        } else {
            wg_fence();
            wgb_pv(accU, dTh, dVb);
            wgb_pv(accU, dTh, dVb + kRl);
            wgb_pv(accU, dTh + kTl, dVb);
            wgb_pv(accW, dTh, dKb);
            wgb_pv(accW, dTh, dKb + kKl);
            wgb_pv(accW, dTh + kTl, dKb);
            wg_commit();
            wg_wait0();
        }
        pin(accW), pin(accU);
    }
    // rows arow(0), arow(2); columns 32 wg + c2 + 8 n8 and the next
#pragma unroll
    for (int r = 0; r < 16; r += 2)
        *(float2 *)&U[arow(r) * 128 + 32 * wg + acol(r)] = make_float2(tf32r(accU[r]), tf32r(accU[r + 1]));
    float *const W = a.W + u * kC * 128;
    if (!h16) {
#pragma unroll
        for (int r = 0; r < 16; r += 2)
            *(float2 *)&W[arow(r) * 128 + 32 * wg + acol(r)] = make_float2(tf32r(accW[r]), tf32r(accW[r + 1]));
        return;
    }
    int mb[2] = {0, 0};
#pragma unroll
    for (int r = 0; r < 16; r++) {
        accW[r] = tf32r(accW[r]);
        mb[(r >> 1) & 1] = max(mb[(r >> 1) & 1], h16_mag(accW[r]));
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        mb[hh] = max(mb[hh], __shfl_xor_sync(0xffffffffu, mb[hh], 1));
        mb[hh] = max(mb[hh], __shfl_xor_sync(0xffffffffu, mb[hh], 2));  // the 4 lanes of the row
        if ((lane & 3) == 0) atomicMax(&rmW[arow(2 * hh)], mb[hh]);
    }
    __syncthreads();
    // W's F16 rows staged at the global row stride (kH16WLD halves: 8 rows of a warp's store 4 banks
    // apart, no conflict), one 4-byte word a lane and 8-column group in h16_pos's order after one
    // exchange with lane ^ 2 (as fo_rows stores P), then copied out 16 bytes at a time
    __half *const stg = (__half *)sTm;
    static_assert(kC * kH16WLD * 2 <= kC * kPS * 4, "W's staging over T's rows");
    const int q = lane & 3;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int t = arow(2 * hh);
        float mw, inv;
        h16_row_scale(rmW[t], &mw, &inv);
#pragma unroll
        for (int grp = 0; grp < 4; grp++) {
            const float e0 = accW[4 * grp + 2 * hh] * mw, e1 = accW[4 * grp + 2 * hh + 1] * mw;
            const float recv = __shfl_xor_sync(0xffffffffu, q < 2 ? e1 : e0, 2);
            *(__half2 *)(stg + t * kH16WLD + 32 * wg + 8 * grp + 2 * ((q & 1) * 2 + (q >> 1))) =
                q < 2 ? __floats2half2_rn(e0, recv) : __floats2half2_rn(recv, e1);
        }
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int x = tid + kNT * m, i = (x >> 4) * (kH16WLD / 8) + (x & 15);
        ((uint4 *)W)[i] = ((const uint4 *)stg)[i];
    }
    if (tid < kC) {
        float mw, inv;
        h16_row_scale(rmW[tid], &mw, &inv);
        W[kH16WScale + tid] = inv;
        ((uint4 *)W)[tid * (kH16WLD / 8) + 16] = make_uint4(0u, 0u, 0u, 0u);  // the row's padding (copied, never read)
    }
#endif
}

}  // namespace

namespace tg_chunk {

size_t tg_cuda_delta_prep_wgb_smem() { return TG_WGMMA ? kSmemP : 0; }

// the kernel's instance for a mode and fo (the limit and the launch take the same one)
static phase_fn prep_instance(bool delta, bool fo) {
    static const phase_fn k[2][2] = {{delta_prep_wgb_kernel<false, false>, delta_prep_wgb_kernel<false, true>},
                                     {delta_prep_wgb_kernel<true, false>, delta_prep_wgb_kernel<true, true>}};
    return k[delta ? 1 : 0][fo ? 1 : 0];
}

tg_status tg_cuda_delta_prep_wgb_limit(tg_backend *be, bool delta, bool fo) {
    // slots WG+5..WG+8: one per instance (the limit is a property of the kernel, set once each)
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_WG + 8 < tg_cuda_impl::TG_CUDA_DSMEM_COUNT, "the prep kernel's slots");
    size_t &set = tg_cuda(be)->delta_smem_set[tg_cuda_impl::TG_CUDA_DSMEM_WG + 5 + (delta ? 0 : 1) + (fo ? 2 : 0)];
    return smem_limit(be, prep_instance(delta, fo), kSmemP, set, "delta_rule");
}

void tg_cuda_delta_prep_wgb_launch(tg_backend *be, const phase_args &a, unsigned grid) {
    prep_instance(a.delta, a.fo)<<<grid, kNT, kSmemP, tg_cuda(be)->stream>>>(a);
}

}  // namespace tg_chunk
