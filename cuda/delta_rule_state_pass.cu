// delta_rule_state_pass.cu - the chunk-parallel form's state pass (its only sequential part; the
// prep and output kernels and the host side are in cuda/delta_rule_chunked_phases.cu).
#include "delta_rule_phases.cuh"
#include "bulk_copy.cuh"

namespace tg_chunk {
namespace {

// Phase 2, the sequential part: one block of 256 threads per (value column slice of BV, value
// head, sequence) carries its slice of S (DKP x BV, F32, shared memory) over the chunks: stores it
// as the chunk's S_c, then (GATED_DELTA) U <- V' = U - W S_c in place, and
// S = gamma S + Kd^T V'. The next chunk's W, Kd^T, U slice are in flight (cp.async) meanwhile when
// two buffers fit (nbuf 2). The state is read once and written once (skipped when the graph's
// device error record is set: a failed graph leaves it unchanged). 8 warps: one block per SM at
// most (shared memory), so its warps are all the latency hiding there is.
__global__ void __launch_bounds__(256) delta_state_kernel(const phase_args a) {
    constexpr int NW = 8, NT = 256;
    extern __shared__ float4 ssm4[];
    const int DKP = a.DKP, DVP = a.DVP, BV = a.BV, QS = q_stride(DKP), VS = v_stride(BV);
    const int bufsz = state_buf(DKP, BV);
    float *sS = (float *)ssm4 + a.nbuf * bufsz;
    const int tid = threadIdx.x;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int j0 = slice * BV, nv = min(BV, DVP - j0), nvr = min(BV, a.Dv - j0);  // nv: a multiple of 8
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    const long long u0 = ((long long)b * a.Hv + h) * a.NC;
    const idiv by_ku(DKP / 4), by_vu(nv / 4);  // 16-byte units per row of W (and of S_c), of U

    for (int x = tid; x < DKP * nv; x += NT) {
        const int jj = x / DKP, i = x - jj * DKP;  // i fastest: coalesced along the state's rows
        sS[i * VS + jj] = has_state && i < a.Dk && jj < nvr ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }
    __syncthreads();  // the slice is in place before the first S_c store reads it
    // chunk c's W (rows of DKP), Kd^T (rows of kC) and U slice (rows of nv) into buffer c % nbuf
    auto bufs = [&](int c, float *&sW, float *&sKd, float *&sU) {
        sW = (float *)ssm4 + (c % a.nbuf) * bufsz, sKd = sW + kC * QS, sU = sKd + DKP * kPS;
    };
    auto issue = [&](int c) {
        float *sW, *sKd, *sU;
        bufs(c, sW, sKd, sU);
        const float *W = a.W + (u0 + c) * kC * DKP, *Kd = a.Kd + (u0 + c) * kC * DKP;
        const float *U = a.U + (u0 + c) * kC * DVP + j0;
        for (int x = tid; x < kC * (DKP / 4) && a.delta; x += NT) {
            int t, i;
            by_ku.split(x, t, i);
            cp_async_stream<16>(&sW[t * QS + 4 * i], &W[t * DKP + 4 * i]);
        }
        for (int x = tid; x < DKP * (kC / 4); x += NT) {
            const int i = x / (kC / 4), t = 4 * (x % (kC / 4));
            cp_async_stream<16>(&sKd[i * kPS + t], &Kd[i * kC + t]);
        }
        for (int x = tid; x < kC * (nv / 4); x += NT) {
            int t, j;
            by_vu.split(x, t, j);
            cp_async_stream<16>(&sU[t * VS + 4 * j], &U[t * DVP + 4 * j]);
        }
        cp_async_commit();
    };
    if (a.nbuf == 2) issue(0);
#pragma unroll 1
    for (int c = 0; c < a.NC; c++) {
        const long long u = u0 + c;
        if (a.nbuf == 1) issue(c);
        else if (c + 1 < a.NC) issue(c + 1);
        float *Sc = a.S + u * DKP * DVP + j0;
        for (int x = tid; x < DKP * (nv / 4); x += NT) {
            int i, jj;
            by_vu.split(x, i, jj);
            *(float4 *)&Sc[(long long)i * DVP + 4 * jj] = *(const float4 *)&sS[i * VS + 4 * jj];
        }
        if (a.nbuf == 2 && c + 1 < a.NC) cp_async_wait_prior1();
        else cp_async_wait_all();
        __syncthreads();
        float *sW, *sKd, *sU;
        bufs(c, sW, sKd, sU);
        if (a.delta) {
            float *U = a.U + u * kC * DVP + j0;
            using WT = wtiles<NW, 4, 1>;  // 16 x 8 tiles: 8 of them at BV 16, one per warp
            for (int p = 0, np = WT::passes(kC, nv); p < np; p++) {
                const WT wt(p * NW * 4, kC, nv);
                float acc[4][1][4];
                zero(acc);
                wmma1<NW, 4, 1, false>(acc, wt, DKP, [&](int m, int k) { return lda_rows(sW, QS, m, k); },
                                       [&](int k, int j) { return ldb_cols(sS, VS, k, j); });
                for_pairs(wt, [&](int r, int mi, int e, int t, int j) {
                    const float x = tf32r(sU[t * VS + j] - acc[r][mi][e]);
                    const float y = tf32r(sU[t * VS + j + 1] - acc[r][mi][e + 1]);
                    sU[t * VS + j] = x, sU[t * VS + j + 1] = y;
                    *(float2 *)&U[t * DVP + j] = make_float2(x, y);
                });
            }
            __syncthreads();
        }
        const float gam = __ldg(&a.gam[u]);
        using ST = wtiles<NW, 4, 2>;
        for (int p = 0, np = ST::passes(DKP, nv); p < np; p++) {
            const ST wt(p * NW * 4, DKP, nv);
            float acc[4][2][4];
            zero(acc);
            wmma1<NW, 4, 2, false>(acc, wt, kC, [&](int m, int k) { return lda_rows(sKd, kPS, m, k); },
                                   [&](int k, int j) { return ldb_cols(sU, VS, k, j); });
            for_pairs(wt, [&](int r, int mi, int e, int i, int j) {
                float *x = &sS[i * VS + j];
                x[0] = keep_zero_mul(gam, x[0]) + acc[r][mi][e], x[1] = keep_zero_mul(gam, x[1]) + acc[r][mi][e + 1];
            });
        }
        __syncthreads();
    }
    if (!has_state || !clear) return;
    for (int x = tid; x < a.Dk * nvr; x += NT) {
        const int jj = x / a.Dk, i = x - jj * a.Dk;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sS[i * VS + jj]);
    }
}

// Phase 2 for Dk = Dv = 128 with two load buffers (BV 8, 16, 32 or 64): the same pass with compile-time
// sizes and the slice of S in registers. Session 31's ncu of the generic kernel at gdn.long (B1 T16384
// H16, BV 16) counted ~1,950 instructions per warp per chunk for 32 mma.sync, mostly address
// arithmetic (ALU the busiest pipe) and shared-memory round trips of S. Here:
//   - each thread's 16-byte copy units are fixed over the chunks: one offset each, set once (F32 rows
//     and the U slice; H16's regions go as units in order, or as bulk copies);
//   - warp w owns S rows 16w .. 16w + 15 of every column tile (the accumulator layout of the update
//     S = gamma S + Kd^T V'), so S stays in registers; it is written to shared memory once per chunk
//     as the B operand of the next W S, and each warp stores its rows of S_c from there, V' from the
//     copy buffer, in 16-byte units;
//   - GATED_DELTA: two barriers per chunk: after the chunk's copies land (then the next chunk's copies
//     are issued: every warp is past the chunk before, the last reader of that buffer), and after V'
//     is made; GATED_LINEAR only the first.
// Same operations in the same order per element as delta_state_kernel (W S in one k order, V' =
// tf32(U - W S), S = keep_zero_mul(gamma, S) + Kd^T V', a plain product where gamma is finite: the
// same value up to the sign of a zero), but W S in two partial sums (even and odd k steps, added at
// the end) to halve its dependent chain: results differ from the generic kernel's in the last bits.
// H16 (knob delta_chunk_h16): W and Kd^T arrive as F16 rows with their inverse row scales (the
// scratch's padded regions, delta_rule_phases.cuh), half the bytes per chunk, in three load buffers
// (chunk c + 2's copies issued while chunk c runs); the A fragments come from F16 (lda16_rows2, exact)
// and each product row is multiplied by its inverse scale (a power of two: the same value as the F32
// operands give, wherever the F16 rows hold them exactly). BULK (knob delta_chunk_bulk, compute
// capability 9.0): thread 0 copies each region whole with one bulk copy (cp.async.bulk) counted by the
// buffer's mbarrier, where cp.async took 2,288 16-byte copies per chunk, ~9 from every thread (the U
// slice stays on cp.async); the same bytes in the same places (gdn.long 975-990 -> 960 us on an H100,
// session 46).
// FO (bulk copies, BV <= 32): the output too, so that neither S_c nor V' goes through memory and no
// output kernel runs: each chunk's buffer also holds Q's and P's F16 rows (delta_prep_wgb_kernel's,
// delta_rule_phases.cuh), and the block has 16 warps: warps 0-7 carry the state exactly as without FO,
// warps 8-15 make the output between the same two barriers (session 47 measured this the same as the
// output's products in the state warps themselves: gdn.long 847-851 us either way on an H100; the
// state's code stays as without FO). Output warp w makes state warp w's tiles of W S as tiles
// of Q S_c before the second barrier, then the same tiles of P V' (one product per 16-token block,
// times that block's row scales) while the state warps run Kd^T V'; O = scale (d(t, -1) qs_t Q S_c +
// P V') for the chunk's tokens is stored from registers. s2 (GATED_LINEAR by default): the state in two
// shared copies, the state warps writing chunk c + 1's into the one the output warps do not read, and
// the output warps make Q S_c after the second barrier, beside P V': GATED_LINEAR's chunks then need no
// second barrier (its state warps had nothing to do before it but wait for Q S_c; knob delta_chunk_fo
// 2: one copy and the second barrier, session 47's form). GATED_DELTA keeps one copy (two, with Q S_c
// after the barrier, measured slower: gdn.x32.bf16 742 -> 765 us, session 49). With FO the shared state
// is stored transposed (BV rows of 132 floats), so that W S's and Q S_c's B fragments come two k steps
// at a time by ldmatrix (gla.x32.bf16 466-467 -> 458-462 us, GATED_DELTA's rows unchanged within 1%,
// session 49).
// The products are TF32 (S_c, V' and the F16 rows' values), where the output kernel's are near-F32.
template <int BV, bool DELTA, bool H16, bool BULK, bool FO>
__global__ void __launch_bounds__(state128_threads(FO), 1) delta_state128_kernel(const phase_args a) {
    constexpr int NT = state128_threads(FO), DK = 128, DV = 128, QS = DK + 4, VS = BV + 8, NTN = BV / 8;
    constexpr int WLD = kH16WLD, KLD = kH16KLD;  // H16 row strides (halves): the scratch's
    // W S: 4 row blocks x NTN column tiles, WN per warp (BV 8: warps 0-3 one each, 4-7 none)
    constexpr int WT = 4 * NTN, WN = WT >= 8 ? WT / 8 : 1;
    // W S and Q S_c: two accumulator sets a tile (even and odd k steps of 8), summed at the end (four,
    // for shorter chains of dependent mma, measured no faster: session 49)
    auto zero_acc = [](float (&acc)[2][WN][4]) {
#pragma unroll
        for (int p = 0; p < 2; p++)
#pragma unroll
            for (int r = 0; r < WN; r++) acc[p][r][0] = acc[p][r][1] = acc[p][r][2] = acc[p][r][3] = 0.0f;
    };
    auto sum_acc = [](const float (&acc)[2][WN][4], int r, int e) { return acc[0][r][e] + acc[1][r][e]; };
    constexpr int BUF = state128_buf(BV, H16, FO, FO && !DELTA), NB = state128_nbuf(H16, FO, BV);
    static_assert(BV == 8 || BV == 16 || BV == 32 || BV == 64, "state pass slices");
    static_assert(!BULK || H16, "bulk copies: F16 rows");
    static_assert(!FO || (BULK && BV <= 32), "the output in the state pass: bulk copies, 32 columns or fewer");
    static_assert(BUF % 4 == 0 && (kC * WLD / 2) % 4 == 0 && (DK * KLD / 2) % 4 == 0, "16-byte aligned regions");
    extern __shared__ float4 ssm4[];
    // the state's shared copy: (k, n) at sS[sidx(k, n)]; FO transposed (BV rows of DK + 4: the B fragments
    // of W S and Q S_c by ldmatrix, two k steps an instruction), else DK rows of VS
    constexpr bool TR = FO;
    constexpr int TS = DK + 4, SSZ = state128_ssize(BV, FO);
    auto sidx = [](int k, int n) { return TR ? n * TS + k : k * VS + n; };
    // s2 (FO, GATED_LINEAR): the state's two shared copies, chunk c's at sS + (c & 1) SSZ
    const bool s2 = FO && !DELTA && a.s2;
    float *const sS = (float *)ssm4 + NB * BUF;
    unsigned long long *const full = (unsigned long long *)(sS + (s2 ? 2 : 1) * SSZ);  // BULK: a buffer's mbarrier
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    // FO: warps 8-15 make the output (ow), warps 0-7 the state as without it; warp: the index within its set
    const bool ow = FO && tid >= state128_threads(false);
    const int warp = (tid >> 5) & 7;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int j0 = slice * BV;
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    const long long u0 = ((long long)b * a.Hv + h) * a.NC;

    for (int x = tid; x < DK * BV; x += NT) {
        const int jj = x / DK, i = x % DK;  // i fastest: coalesced along the state's rows
        sS[sidx(i, jj)] = has_state ? tg_cuda_load(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type) : 0.0f;
    }
    if (BULK && tid == 0) {  // (one thread initializes the barriers and makes them visible to the copies)
        for (int i = 0; i < NB; i++) mbar_init(&full[i]);
        mbar_init_fence();
    }
    __syncthreads();
    // the warp's S rows (16 warp + g, + 8) and columns (8 r + 2 c4, + 1) in accumulator order
    float S[NTN][4];
    const int sr = 16 * warp + g;
#pragma unroll
    for (int r = 0; r < NTN; r++) {
        const int n = 8 * r + 2 * c4;
        S[r][0] = sS[sidx(sr, n)], S[r][1] = sS[sidx(sr, n + 1)];
        S[r][2] = sS[sidx(sr + 8, n)], S[r][3] = sS[sidx(sr + 8, n + 1)];
    }
    // a buffer's regions: F32 W (kC x QS), Kd^T (DK x kPS), U; H16 W's and Kd^T's regions as the scratch
    // has them (the F16 rows, then their inverse scales), U
    auto buf_of = [&](int c) { return (float *)ssm4 + (c % NB) * BUF; };
    constexpr int OFF_K = H16 ? kH16WFloats : kC * QS, OFF_Q = OFF_K + kH16KFloats, OFF_P = OFF_Q + kH16QFloats;
    constexpr int OFF_U = FO ? OFF_P + kH16PFloats : OFF_K + (H16 ? kH16KFloats : DK * kPS);
    constexpr int OFF_WS = kH16WScale, OFF_KS = OFF_K + kH16KScale;
    // copy units: F32 W 64 rows x 32 (row (tid >> 5) + 8 i), Kd^T 128 rows x 16 (row (tid >> 4) + 16 i);
    // H16 each region's 16-byte units in order (or one bulk copy each); the U slice 64 rows x BV / 4
    // (row tid / UPR + UROWS i)
    constexpr int UPR = BV / 4, UROWS = NT / UPR, UCNT = kC * UPR, UN = (UCNT + NT - 1) / NT;
    // VD (FO, GATED_LINEAR): V' is V itself (beta is in Kd^T's and P's columns): the slice's BF16 rows from v
    // into the U region at a stride of VSH halves, one 16-byte unit per thread (row tid / VPR), zero-filled
    // past the sequence's end
    constexpr bool VD = FO && !DELTA;
    constexpr int VSH = BV + 8, VPR = BV / 8;
    static_assert(!VD || kC * VPR <= NT, "V's units: one a thread");
    const int v_row = tid / VPR, v_col = j0 + 8 * (tid % VPR);
    const int w_src = (tid >> 5) * DK + (tid & 31) * 4, w_dst = (tid >> 5) * QS + (tid & 31) * 4;
    const int k_src = (tid >> 4) * kC + (tid & 15) * 4, k_dst = (tid >> 4) * kPS + (tid & 15) * 4;
    const int u_src = (tid / UPR) * DV + (tid % UPR) * 4, u_dst = (tid / UPR) * VS + (tid % UPR) * 4;
    // V' B fragments: F32 rows at a stride of VS, or (VD) V's BF16 rows at VSH
    auto ldb_v = [&](const float *sU, int k0, int n0) {
        return VD ? ldb_cols_bf16((const unsigned short *)sU, VSH, k0, n0) : ldb_cols(sU, VS, k0, n0);
    };
    auto issue = [&](int c) {
        float *bf = buf_of(c), *sU = bf + OFF_U;
        const long long u = u0 + c;
        const float *W = a.W + u * (kC * DK), *Kd = a.Kd + u * (kC * DK);
        if constexpr (BULK) {  // thread 0: one bulk copy per region, counted by the buffer's mbarrier
            if (tid == 0) {
                unsigned long long *bar = &full[c % NB];
                mbar_expect(bar, (DELTA ? kH16WFloats * 4 : 0) + kH16KFloats * 4 + (FO ? (kH16QFloats + kH16PFloats) * 4 : 0));
                if (DELTA) bulk_copy(bf, W, kH16WFloats * 4, bar);
                bulk_copy(bf + OFF_K, Kd, kH16KFloats * 4, bar);
                if (FO) {
                    bulk_copy(bf + OFF_Q, a.Qh + u * kH16QFloats, kH16QFloats * 4, bar);
                    bulk_copy(bf + OFF_P, a.Ph + u * kH16PFloats, kH16PFloats * 4, bar);
                }
            }
        } else if constexpr (H16) {  // each region's 16-byte units in order
            if (DELTA)
                for (int x = tid; x < kH16WFloats / 4; x += NT) cp_async_stream<16>(bf + 4 * x, W + 4 * x);
            for (int x = tid; x < kH16KFloats / 4; x += NT) cp_async_stream<16>(bf + OFF_K + 4 * x, Kd + 4 * x);
        } else {
            float *sW = bf, *sKd = bf + OFF_K;
            if (DELTA)
#pragma unroll
                for (int i = 0; i < 8; i++) cp_async_stream<16>(sW + w_dst + i * 8 * QS, W + w_src + i * 8 * DK);
#pragma unroll
            for (int i = 0; i < 8; i++) cp_async_stream<16>(sKd + k_dst + i * 16 * kPS, Kd + k_src + i * 16 * kC);
        }
        if constexpr (VD) {
            const long long t0 = (long long)c * kC;
            if (tid < kC * VPR) {
                const bool in = t0 + v_row < a.T;
                tg_cp_async16((unsigned short *)sU + v_row * VSH + 8 * (tid % VPR),
                              tg_cuda_ptr(a.v, v_col, h, in ? t0 + v_row : t0, b), in ? 16 : 0);
            }
        } else {
            const float *U = a.U + u * (kC * DV) + j0;
#pragma unroll
            for (int i = 0; i < UN; i++)
                if (UCNT % NT == 0 || tid + i * NT < UCNT) cp_async_stream<16>(sU + u_dst + i * UROWS * VS, U + u_src + i * UROWS * DV);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int c = 0; c < NB - 1; c++)
        if (c < a.NC) issue(c);
#pragma unroll 1
    for (int c = 0; c < a.NC; c++) {
        const long long u = u0 + c;
        // S_c, the state at the chunk's start: the warp's 16 rows from sS (which the warp itself wrote at the
        // end of chunk c - 1; c 0: the load above, behind its barrier), in 16-byte stores (the per-register
        // float2 stores compiled to 4-byte ones, and their queue held up the loop: session 44's profile)
        if constexpr (!FO) {
            float *Sc = a.S + u * (DK * DV) + j0 + 16 * warp * DV;
            static_assert(!TR, "S_c's rows from sS");
            const float *src = sS + 16 * warp * VS;
            __syncwarp();
#pragma unroll
            for (int i = 0; i < BV / 8; i++) {
                const int x = lane + 32 * i, row = x / (BV / 4), c4u = x % (BV / 4);
                __stcs((float4 *)&Sc[row * DV + 4 * c4u], *(const float4 *)&src[row * VS + 4 * c4u]);
            }
        }
        // chunk c's copies landed: with H16 chunk c + 1's may still be in flight (the latest group)
        if constexpr (BULK) {
            fence_async_smem();  // this thread's accesses of chunk c - 1's buffer before its next bulk copies
            mbar_wait(&full[c % NB], (unsigned)(c / NB) & 1u);
        }
        if (NB == 3 && c + 1 < a.NC) cp_async_wait_prior1();
        else cp_async_wait_all();
        __syncthreads();  // chunk c's buffer and sS (written at the end of chunk c - 1) are in place
        // the buffer of chunk c + NB - 1 was chunk c - 1's: every warp is past it
        if (c + NB - 1 < a.NC) issue(c + NB - 1);
        const float *bf = buf_of(c);
        float *sU = (float *)bf + OFF_U;
        // the state at the chunk's start (read by W S and Q S_c) and where the update writes the next one
        const float *const sSc = sS + (s2 && (c & 1) ? SSZ : 0);
        float *const sSn = sS + (s2 && !(c & 1) ? SSZ : 0);
        // B fragments of S_c for k steps k0 and k0 + 8, columns n0 ..
        auto ldb_s2 = [&](int k0, int n0, frag_b &b0, frag_b &b1) {
            if constexpr (TR) ldb_rows2(sSc, TS, k0, n0, b0, b1);
            else b0 = ldb_cols(sSc, VS, k0, n0), b1 = ldb_cols(sSc, VS, k0 + 8, n0);
        };
        // the warp's tiles of W S (and FO: of Q S_c and P V'): rows m0 .., columns nb + 8 r (r < WN)
        const int m0 = (warp & 3) * 16, nb = (warp >> 2) * WN * 8;
        const bool tiles = WT >= 8 || warp < WT;
        float o[WN][4];  // FO: the output warp's tiles of O
        // Q S_c: o = d(t, -1) qs_t Q S_c (qs_t: the row's inverse scale times 1 / |q_t|); before the second
        // barrier, or with s2 (the state warps write the next state into the other copy) after it
        auto q_sc = [&]() {
            float acc[2][WN][4];
            zero_acc(acc);
#pragma unroll
            for (int k0 = 0; k0 < DK; k0 += 16) {
                frag_a f0, f1;
                lda16_rows2((const __half *)(bf + OFF_Q), WLD, m0, k0, f0, f1);
#pragma unroll
                for (int r = 0; r < WN; r++) {
                    frag_b b0, b1;
                    ldb_s2(k0, nb + 8 * r, b0, b1);
                    mma_tf32(acc[0][r], f0, b0);
                    mma_tf32(acc[1][r], f1, b1);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int t = m0 + g + 4 * e;  // e 0: row g, e 2: row g + 8
                const float qs = bf[OFF_Q + kH16WScale + t], d0 = bf[OFF_Q + kH16WScale + kC + t];
#pragma unroll
                for (int r = 0; r < WN; r++) {
                    o[r][e] = keep_zero_mul(d0, sum_acc(acc, r, e) * qs);
                    o[r][e + 1] = keep_zero_mul(d0, sum_acc(acc, r, e + 1) * qs);
                }
            }
        };
        if (ow) {
            if (tiles && !s2) q_sc();
        } else if (DELTA && tiles) {  // V' = U - W S_c, into sU (and without FO the scratch's U)
            float acc[2][WN][4];
            zero_acc(acc);
            if constexpr (H16) {
#pragma unroll
                for (int k0 = 0; k0 < DK; k0 += 16) {
                    frag_a f0, f1;
                    lda16_rows2((const __half *)bf, WLD, m0, k0, f0, f1);
#pragma unroll
                    for (int r = 0; r < WN; r++) {
                        frag_b b0, b1;
                        ldb_s2(k0, nb + 8 * r, b0, b1);
                        mma_tf32(acc[0][r], f0, b0);
                        mma_tf32(acc[1][r], f1, b1);
                    }
                }
            } else {
#pragma unroll
                for (int k0 = 0; k0 < DK; k0 += 8) {
                    const frag_a fa = lda_rows(bf, QS, m0, k0);
#pragma unroll
                    for (int r = 0; r < WN; r++) {
                        static_assert(!TR, "F32 W rows: no FO");
                        mma_tf32(acc[(k0 >> 3) & 1][r], fa, ldb_cols(sSc, VS, k0, nb + 8 * r));
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < WN; r++) {
                const int n = nb + 8 * r + 2 * c4;
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int t = m0 + g + 4 * e;  // e 0: row g, e 2: row g + 8
                    const float ws = H16 ? bf[OFF_WS + t] : 1.0f;
                    const float x = tf32r(sU[t * VS + n] - sum_acc(acc, r, e) * ws);
                    const float y = tf32r(sU[t * VS + n + 1] - sum_acc(acc, r, e + 1) * ws);
                    *(float2 *)&sU[t * VS + n] = make_float2(x, y);
                }
            }
        }
        // V' complete; every read of this chunk's S is done (s2: the update writes the other copy)
        if (DELTA || (FO && !s2)) __syncthreads();
        if (DELTA && !FO) {
            // V' into the scratch's U from sU, 16-byte units (read again by the product below; the buffer is
            // next written after chunk c + 1's first barrier)
            float *U = a.U + u * (kC * DV) + j0;
#pragma unroll
            for (int i = 0; i < (kC * BV / 4 + NT - 1) / NT; i++) {
                const int x = tid + NT * i, t = x / (BV / 4), c4u = x % (BV / 4);
                if ((kC * BV / 4) % NT == 0 || x < kC * BV / 4)
                    __stcs((float4 *)&U[t * DV + 4 * c4u], *(const float4 *)&sU[t * VS + 4 * c4u]);
            }
        }
        if (ow) {
            if (tiles) {  // O = scale (o + P V'), one product per 16-token block times the block's row scales
                if (s2) q_sc();
#pragma unroll
                for (int k0 = 0; k0 < kC; k0 += 16) {
                    frag_a p0, p1;
                    lda16_rows2((const __half *)(bf + OFF_P), kH16PLD, m0, k0, p0, p1);
                    const float ps0 = bf[OFF_P + kH16PScale + 4 * (m0 + g) + k0 / 16];
                    const float ps1 = bf[OFF_P + kH16PScale + 4 * (m0 + g + 8) + k0 / 16];
#pragma unroll
                    for (int r = 0; r < WN; r++) {
                        float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        mma_tf32(x, p0, ldb_v(sU, k0, nb + 8 * r));
                        mma_tf32(x, p1, ldb_v(sU, k0 + 8, nb + 8 * r));
                        o[r][0] += x[0] * ps0, o[r][1] += x[1] * ps0, o[r][2] += x[2] * ps1, o[r][3] += x[3] * ps1;
                    }
                }
                const long long t0 = (long long)c * kC;  // the chunk's rows of O (those of its n tokens)
                const int nrows = a.T - t0 < kC ? (int)(a.T - t0) : kC;
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int t = m0 + g + 4 * e;
                    if (t >= nrows) continue;
#pragma unroll
                    for (int r = 0; r < WN; r++)
                        store_pair(tg_cuda_ptr(a.o, j0 + nb + 8 * r + 2 * c4, h, t0 + t, b), a.o.nb[0], a.o.type,
                                   a.scale * o[r][e], a.scale * o[r][e + 1], true, a.o_pair);
                }
            }
            continue;
        }
        // S = gamma S + Kd^T V' (rows 16 warp .., all BV columns)
        const float gam = __ldg(&a.gam[u]);
        float acc[NTN][4];
#pragma unroll
        for (int r = 0; r < NTN; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
        if constexpr (H16) {
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 16) {
                frag_a f0, f1;
                lda16_rows2((const __half *)(bf + OFF_K), KLD, 16 * warp, k0, f0, f1);
#pragma unroll
                for (int r = 0; r < NTN; r++) {
                    mma_tf32(acc[r], f0, ldb_v(sU, k0, 8 * r));
                    mma_tf32(acc[r], f1, ldb_v(sU, k0 + 8, 8 * r));
                }
            }
        } else {
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 8) {
                const frag_a fa = lda_rows(bf + OFF_K, kPS, 16 * warp, k0);
#pragma unroll
                for (int r = 0; r < NTN; r++) mma_tf32(acc[r], fa, ldb_cols(sU, VS, k0, 8 * r));
            }
        }
        const float ks0 = H16 ? bf[OFF_KS + sr] : 1.0f, ks1 = H16 ? bf[OFF_KS + sr + 8] : 1.0f;
        by_mul(isfinite(gam), [&](auto mul) {  // (a finite gamma keeps a zero a zero: no test per element)
#pragma unroll
            for (int r = 0; r < NTN; r++) {
                const int n = 8 * r + 2 * c4;
                S[r][0] = mul(gam, S[r][0]) + acc[r][0] * ks0, S[r][1] = mul(gam, S[r][1]) + acc[r][1] * ks0;
                S[r][2] = mul(gam, S[r][2]) + acc[r][2] * ks1, S[r][3] = mul(gam, S[r][3]) + acc[r][3] * ks1;
                if constexpr (TR) {  // (4-byte stores: lanes g, c4 in 32 banks)
                    sSn[sidx(sr, n)] = S[r][0], sSn[sidx(sr, n + 1)] = S[r][1];
                    sSn[sidx(sr + 8, n)] = S[r][2], sSn[sidx(sr + 8, n + 1)] = S[r][3];
                } else {
                    *(float2 *)&sSn[sr * VS + n] = make_float2(S[r][0], S[r][1]);
                    *(float2 *)&sSn[(sr + 8) * VS + n] = make_float2(S[r][2], S[r][3]);
                }
            }
        });
        // GATED_LINEAR without FO: sS is read by no product, so its write needs no barrier before it; the
        // next chunk's barrier orders the buffers (FO: the second barrier, or s2's other copy)
    }
    __syncthreads();
    if (!has_state || !clear) return;
    const float *const sSf = sS + (s2 && (a.NC & 1) ? SSZ : 0);  // the last chunk's update
    for (int x = tid; x < DK * BV; x += NT) {
        const int jj = x / DK, i = x % DK;
        tg_cuda_store(tg_cuda_ptr(a.state, i, j0 + jj, h, b), a.state.type, sSf[sidx(i, jj)]);
    }
}

}  // namespace

phase_fn state_pass_kernel(int BV, bool delta, bool h16, bool bulk, bool fo, bool s128, int *slot) {
    if (!s128) {
        *slot = 1;
        return delta_state_kernel;
    }
    const int ib = BV == 8 ? 0 : BV == 16 ? 1 : BV == 32 ? 2 : 3;
    if (fo && h16 && bulk && ib < 3) {
        static const phase_fn tf[2][3] = {
            {delta_state128_kernel<8, false, true, true, true>, delta_state128_kernel<16, false, true, true, true>,
             delta_state128_kernel<32, false, true, true, true>},
            {delta_state128_kernel<8, true, true, true, true>, delta_state128_kernel<16, true, true, true, true>,
             delta_state128_kernel<32, true, true, true, true>}};
        *slot = 29 + 3 * (delta ? 1 : 0) + ib;
        return tf[delta ? 1 : 0][ib];
    }
    if (h16 && bulk) {
        static const phase_fn tb[2][4] = {
            {delta_state128_kernel<8, false, true, true, false>, delta_state128_kernel<16, false, true, true, false>,
             delta_state128_kernel<32, false, true, true, false>, delta_state128_kernel<64, false, true, true, false>},
            {delta_state128_kernel<8, true, true, true, false>, delta_state128_kernel<16, true, true, true, false>,
             delta_state128_kernel<32, true, true, true, false>, delta_state128_kernel<64, true, true, true, false>}};
        *slot = 21 + 4 * (delta ? 1 : 0) + ib;
        return tb[delta ? 1 : 0][ib];
    }
    static const phase_fn tab[2][2][4] = {
        {{delta_state128_kernel<8, false, false, false, false>, delta_state128_kernel<16, false, false, false, false>,
          delta_state128_kernel<32, false, false, false, false>, delta_state128_kernel<64, false, false, false, false>},
         {delta_state128_kernel<8, true, false, false, false>, delta_state128_kernel<16, true, false, false, false>,
          delta_state128_kernel<32, true, false, false, false>, delta_state128_kernel<64, true, false, false, false>}},
        {{delta_state128_kernel<8, false, true, false, false>, delta_state128_kernel<16, false, true, false, false>,
          delta_state128_kernel<32, false, true, false, false>, delta_state128_kernel<64, false, true, false, false>},
         {delta_state128_kernel<8, true, true, false, false>, delta_state128_kernel<16, true, true, false, false>,
          delta_state128_kernel<32, true, true, false, false>, delta_state128_kernel<64, true, true, false, false>}}};
    *slot = 3 + 4 * (delta ? 1 : 0) + ib + (h16 ? 10 : 0);
    return tab[h16 ? 1 : 0][delta ? 1 : 0][ib];
}

}  // namespace tg_chunk

bool tg_cuda_delta_state_bulk_built() {
    cudaFuncAttributes fa = {};
    if (cudaFuncGetAttributes(&fa, tg_chunk::delta_state128_kernel<16, true, true, true, false>) != cudaSuccess)
        return (void)cudaGetLastError(), false;  // (clears only the error this call made)
    return fa.binaryVersion >= 90 && fa.ptxVersion >= 90;
}
