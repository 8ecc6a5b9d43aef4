// delta_rule_chunked_wgb.cu - the single-kernel chunked delta rule's full case with BF16 q/k/v on
// Hopper's BF16 warpgroup tensor cores (wgmma m64nNk16, sm_90a), both modes: delta_wgb_kernel
// (cuda/sm90a/delta_rule_chunked_wg.cu has the TF32 kernel and the dispatch between the two;
// docs/ops.md the policy).
//
// Every product on BF16 wgmma (k16), the raw chunk tiles copied
// straight from global memory into their swizzled tiles by cp.async, a chunk ahead (two buffers).
// The operands the tensor cores read as they are: Q and K (K-major A and B of Q K^T, A of Q S), V
// (MN-major: the B of P V and the A of the update, value columns along M or N). The F32 values
// that feed a product (S^T, P, K (.) w) are written as a BF16 pair hi + lo (hi = bf16(x), lo =
// bf16(x - hi): x to about 2^-17) and each such product runs twice, once on hi and once on lo, into
// the same F32 accumulators: every product is then near-F32 exact, where the TF32 path rounds its
// operands to 2^-11. l2norm scales rows and columns of the products (1 / |q_t|, 1 / |k_s|) instead
// of the tiles. Per chunk (buffer c of the two):
//   start   the next chunk's Q, K, V rows into the other buffer (cp.async), and its gate arrays
//           (delta_gates_kernel's, a.G) into the other gate buffer; without a.G, its gates (warp 0)
//   A       Q K^T (columns 16 wg ..), Q S = Q S_hi + Q S_lo (value columns 32 wg ..); while they
//           run, l2norm's 1 / |q_t|, 1 / |k_t| from the staged tiles, barrier (3); then P (.)
//           decay beta / |q| |k| as hi and lo, Q S times d(t, -1) / |q_t|, and the update's
//           Kw = K (.) d(C-1, t) beta_t / |k_t| (hi, lo) in the raw K tile's layout; barrier (1)
//   B       O = ... + P_hi V + P_lo V; S^T (block jb, ib) = d(C-1, -1) S^T + V^T Kw_hi + V^T Kw_lo
//           (M = value columns: the accumulator's pairs are adjacent key dims, one 4-byte store
//           each into S^T's hi and lo tiles); without a.G, the next chunk's gate arrays (warp 0: a
//           dependent chain that the other warps wait for at (2))
//   end     the copies waited for, barrier (2)
// The state block stays in the update's F32 accumulators from chunk to chunk (S^T's hi and lo tiles
// are Q S's copy of it); the final state is stored from them.
// GATED_DELTA (DELTA) first turns V into U by the UT transform, as delta_wg_kernel<true> does:
//   A1      K S = K S_hi + K S_lo (value columns 32 wg ..) and K K^T (columns 16 wg ..) (l2norm's
//           norms and barrier (3) while they run); A = beta_t
//           K_t.K_s d(t, s) / |k_t| |k_s| (s < t) as F32 rows, R = beta_t (V_t - d(t, -1) (K S)_t /
//           |k_t|) as hi over the raw V tile and lo (each warpgroup its own value columns), A's
//           diagonal 16 x 16 blocks inverted meanwhile by the warps that hold them; (1a)
//   T       the rest of T = (I + A)^-1 (its products on mma.sync), then
//           T as hi and lo K-major tiles over them; (1b)
//   A2      Q K^T, Q S and U = T_hi R_hi + T_hi R_lo + T_lo R_hi (the lo x lo term dropped); U as
//           hi and lo over R (own columns), P (.) decay / |q| |k| without beta (U has it); (1c)
//           every warpgroup is done with the raw Q and K: Kw without beta, hi over the raw K tile,
//           lo over the raw Q tile; (1)
//   B       as GATED_LINEAR with U for V, three products each (hi hi, hi lo, lo hi)
#include "wgmma.cuh"

namespace {

constexpr int bBuf = 49152;   // a buffer of raw tiles: Q, K, V (64 rows x 128, 128-byte rows of 64 values, 2 blocks)
constexpr int bSh = 98304;    // S^T hi: 128 rows (value columns j) x 128 (key dims i): 2 blocks of 128 x 128 B
constexpr int bSl = 131072;   // S^T lo
constexpr int bPh = 163840;   // P hi: 64 x 64 (one block of 64 x 128 B)
constexpr int bPl = 172032;   // P lo
constexpr int bWh = 180224;   // Kw hi: 64 rows (tokens) x 128 (key dims), the raw K tile's layout
constexpr int bWl = 196608;   // Kw lo
// GATED_DELTA past S^T's tiles: A (F32 rows, stride kPS) and T = (I + A)^-1 (F32 rows); T's hi and lo
// tiles (64 x 64) over A's rows; P's over T's rows (dead by then); R's and U's lo tile in V's
// layout (their hi tile is the raw V tile of the chunk's buffer); Kw's tiles over the raw K (hi)
// and Q (lo) tiles of the chunk's buffer
constexpr int bAf = 163840, bTf = bAf + kC * kPS * 4, bTh = bAf, bTl = bAf + 8192;
constexpr int bPhD = bTf, bPlD = bTf + 8192, bRl = bTf + kC * kPS * 4;
static_assert(bTl + 8192 <= bTf && bPlD + 8192 <= bRl && bTf % 1024 == 0 && bRl % 1024 == 0, "GATED_DELTA's tiles");
// the gate arrays as delta_gates_kernel writes a unit's (kGateWords words: 7 x 64 floats, 64 ints, the
// flags, 3 zero words), in one buffer that warp 0 rewrites for the next chunk after barrier (1), or (PRE:
// copied from a.G beside the tiles) in two, chunk c's in buffer c & 1; then 1 / |q_t|, 1 / |k_t|
template <bool DELTA> constexpr int bF = DELTA ? bRl + 16384 : 212992;
constexpr int kGB = kGateWords * 4;  // (2064 bytes: a 16-byte multiple, as cp_gates needs)
template <bool DELTA, bool PRE> constexpr int bN = bF<DELTA> + (PRE ? 2 : 1) * kGB;
template <bool DELTA, bool PRE = false> constexpr size_t kSmemB = bN<DELTA, PRE> + 2 * kC * 4 + 1024;  // + the alignment slack
static_assert(kGB % 16 == 0 && bF<false> % 16 == 0 && bF<true> % 16 == 0, "the gate buffers' copies");
static_assert(kSmemB<false, true> <= 232448 && kSmemB<true, true> <= 232448, "227 KB a block");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Q S_hi (overwrites) or + Q S_lo: 64 x 32, k over 128 (S^T K-major, 128 rows: 16384 bytes a block)
__device__ __forceinline__ void wgb_qs0(float (&d)[16], uint64_t da, uint64_t db) { TG_WB_Q128(0, 2, 1018, 0); }
__device__ __forceinline__ void wgb_qs1(float (&d)[16], uint64_t da, uint64_t db) { TG_WB_Q128(1, 2, 1018, 0); }
// S^T += V^T Kw: 64 x 64, k over the chunk's 64 tokens (both MN-major)
__device__ __forceinline__ void wgb_upd(float (&d)[32], uint64_t da, uint64_t db) {
    asm volatile(TG_WB_HEAD("m64n64k16", TG_ACC32, 32, 33, 1, 1, 1) TG_WB_3("m64n64k16", TG_ACC32, 128, 128, 1, 1) "}\n"
                 : TG_OUT32(d) : "l"(da), "l"(db));
}
#endif


// The kernel's body. SEG 0: delta_wgb_kernel (every chunk of a sequence); GATED_LINEAR's segments
// (delta_wgb_seg_kernel, a.nseg segments of a.tseg tokens, the last one shorter; a unit's scratch is
// a.nseg slots of 16,384 floats, each a block's accumulators in their order, 32 floats a thread):
// SEG 1 the state only over each segment but the last (no Q, no output), segment 0 from the call's
// state (copied as it was into slot nseg - 1) and the others from zero, the end state into slot sg
// and the segment's decay (gamma, and whether a chunk's decay was NaN) into a.seg_g; SEG 2 every
// segment with its output, segment 0 from slot nseg - 1, segment j > 0 from S = slot 0, then
// S = gamma_i S + slot i for i = 1 .. j - 1 (a zero entry stays zero unless a decay was NaN, as the
// keep-zero products of the walk do); only the last segment stores the final state. The call's
// state is read by SEG 1 and written by SEG 2 only (never both in one grid).
// PRE: the gate arrays come from a.G (delta_gates_kernel's, two gate buffers), else warp 0 makes them.
template <bool DELTA, int SEG, bool PRE> __device__ __forceinline__ void wgb_body(const chunk_args &a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(SEG == 0 || !DELTA, "segments are GATED_LINEAR's");
    extern __shared__ float4 wsm4[];
    unsigned char *sm = (unsigned char *)wsm4 + ((1024u - (smem_u32(wsm4) & 1023u)) & 1023u);
    const uint32_t sb = smem_u32(sm);
    // gate buffer c's arrays (sL, sSg, sB, sD0, sDl, sEp, sEm, sZ, the flags: delta_gates_kernel's order)
    auto garr = [&](int c) { return (float *)(sm + bF<DELTA> + (PRE ? c * kGB : 0)); };
    float *const sNq = (float *)(sm + bN<DELTA, PRE>), *const sNk = sNq + kC;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2, wq = warp & 3;
    // the block's unit: (slice, h, b), and with segments (SEG 1: all but the last) the segment sg
    // innermost; its tokens tb .. te
    const unsigned nsg = SEG == 0 ? 1u : SEG == 1 ? a.nseg - 1 : a.nseg, ub = SEG == 0 ? blockIdx.x : blockIdx.x / nsg;
    const int sg = SEG == 0 ? 0 : (int)(blockIdx.x % nsg);
    const int slice = ub % a.nslices, h = (ub / a.nslices) % a.Hv, b = ub / (a.nslices * a.Hv);
    const long long tb = SEG == 0 ? 0 : sg * a.tseg, te = SEG == 0 ? a.T : (tb + a.tseg < a.T ? tb + a.tseg : a.T);
    const int hk = h / (a.Hv / a.Hk), j0 = slice * 128;
    const bool clear = tg_cuda_record_clear(a.err);
    const long long gu0 = ((long long)b * a.Hv + h) * ((a.T + kC - 1) / kC);  // a.G's unit of the sequence's chunk 0
    const bool has_state = a.state.data != nullptr;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    auto arow = [&](int r) { return 16 * wq + g + 8 * ((r >> 1) & 1); };
    auto acol = [&](int r) { return 8 * (r >> 2) + c2 + (r & 1); };
    auto t_end = [&]() { return SEG == 0 ? a.T : te; };  // (SEG 0 reads a.T where it always did)
    auto rows_of = [&](long long c0) { return (int)(t_end() - c0 < kC ? t_end() - c0 : kC); };

    // This warpgroup's block of the state: value columns jb .. jb + 63 (the update's M), key dims
    // ib .. ib + 63 (its N). Accumulator elements r (even) and r + 1 are S^T's row jb + arow(r),
    // columns ib + acol(r) and the next: one 4-byte pair of each of the hi and lo tiles, at
    const int jb = 64 * (wg >> 1), ib = 64 * (wg & 1);
    const int s_off0 = (wg & 1) * 16384 + (jb + 16 * wq + g) * 128 + 2 * c2;
    auto s_off = [&](int r) { return s_off0 + ((r >> 1) & 1) * 1024 + (((r >> 2) ^ g) << 4); };
    // (the block stays in these accumulators from chunk to chunk; S^T's tiles are Q S's copy)
    float accS[32];
    const bool load_state = SEG == 0 ? has_state : SEG == 1 && sg == 0 && has_state;  // (SEG 2: from the scratch)
#pragma unroll
    for (int r = 0; r < 32; r++)
        accS[r] = load_state ? tg_cuda_load(tg_cuda_ptr(a.state, ib + acol(r), j0 + jb + arow(r), h, b), a.state.type) : 0.0f;
    // GATED_LINEAR's segments: unit ub's slot i (this thread's 32 floats)
    [[maybe_unused]] auto slot = [&](int i) { return (float4 *)(a.seg_s + ((long long)ub * a.nseg + i) * 16384 + 32 * tid); };
    [[maybe_unused]] auto put_slot = [&](int i) {
        float4 *const d = slot(i);
#pragma unroll
        for (int m = 0; m < 8; m++) d[m] = make_float4(accS[4 * m], accS[4 * m + 1], accS[4 * m + 2], accS[4 * m + 3]);
    };
    if constexpr (SEG == 1) {  // segment 0: the call's state as it was, for SEG 2's segment 0
        if (load_state) put_slot(a.nseg - 1);
    }
    auto s_tiles = [&]() {
#pragma unroll
        for (int r = 0; r < 32; r += 2) {
            uint32_t hi, lo;
            bf_split(accS[r], accS[r + 1], hi, lo);
            *(uint32_t *)(sm + bSh + s_off(r)) = hi, *(uint32_t *)(sm + bSl + s_off(r)) = lo;
        }
    };
    // SEG 2: the segment's starting state from SEG 1's slots (above)
    if constexpr (SEG == 2) {
        if (sg > 0 || has_state) {
            const float4 *const s0 = slot(sg > 0 ? 0 : a.nseg - 1);
#pragma unroll
            for (int m = 0; m < 8; m++) {
                const float4 x = s0[m];
                accS[4 * m] = x.x, accS[4 * m + 1] = x.y, accS[4 * m + 2] = x.z, accS[4 * m + 3] = x.w;
            }
        }
        const float *const gs = a.seg_g + 2 * ((long long)b * a.Hv + h) * (a.nseg - 1);
        for (int i = 1; i < sg; i++) {
            const float gam = __ldg(gs + 2 * i);
            const bool gnan = __ldg(gs + 2 * i + 1) != 0.0f;
            const float4 *const si = slot(i);
            auto kz = [&](float x) { return x == 0.0f && !gnan ? 0.0f : gam * x; };
#pragma unroll
            for (int m = 0; m < 8; m++) {
                const float4 x = si[m];
                accS[4 * m] = kz(accS[4 * m]) + x.x, accS[4 * m + 1] = kz(accS[4 * m + 1]) + x.y;
                accS[4 * m + 2] = kz(accS[4 * m + 2]) + x.z, accS[4 * m + 3] = kz(accS[4 * m + 3]) + x.w;
            }
        }
    }
    if constexpr (SEG != 1) s_tiles();
    float gseg = 1.0f;  // SEG 1: the segment's decay so far, keep-zero (thread 0), and whether a chunk's was NaN
    bool gnan = false;

    // Chunk c0's Q, K and V rows (nn of them; the rest zero-filled) into buffer buf: two 16-byte
    // units of each per thread, unit cu of row t at its swizzled place; with a.G its gate arrays
    // into gate buffer buf
    auto stage = [&](long long c0, int buf) {
        const int nn = rows_of(c0);
        const char *qb = tg_cuda_ptr(a.q, 0, hk, c0, b), *kb = tg_cuda_ptr(a.k, 0, hk, c0, b), *vb = tg_cuda_ptr(a.v, j0, h, c0, b);
        const uint32_t d = sb + buf * bBuf;
#pragma unroll
        for (int m = 0; m < 2; m++) {
            const int u = tid + kNT * m, t = u >> 4, cu = u & 15, tt = t < nn ? t : 0;
            const uint32_t bytes = t < nn ? 16u : 0u, off = sw2(kC, t, 8 * cu);
            if (SEG != 1) cp16(d + off, qb + tt * a.q.nb[2] + 16 * cu, bytes);  // (SEG 1: no Q)
            cp16(d + 16384 + off, kb + tt * a.k.nb[2] + 16 * cu, bytes);
            cp16(d + 32768 + off, vb + tt * a.v.nb[2] + 16 * cu, bytes);
        }
        if (PRE) cp_gates(sb + bF<DELTA> + buf * kGB, a.G, gu0 + c0 / kC);
        cp_commit();
    };
    // l2norm: 1 / |q_t| and 1 / |k_t| of buffer buf's rows
    auto norms = [&](int buf) {
        if (SEG != 1 || tid >= 4 * kC) bf_norms(sm + buf * bBuf, sNq, sNk);  // (SEG 1: 1 / |k_t| only)
    };
    auto load_gates = [&](long long c0, float (&gl)[2], float (&bl)[2]) { load_chunk_gates(a, h, b, c0, rows_of(c0), gl, bl); };
    auto gates = [&](const float (&gl)[2], const float (&bl)[2], int buf) { gate_arrays(gl, bl, a.log_gate, garr(buf)); };

    // descriptors at k 0 in buffer 0 (+ kBufD: buffer 1): Q (A of Q K^T and Q S; GATED_DELTA's K
    // the same at 16384), K rows 16 wg .. (B of Q K^T, K K^T), S^T rows 32 wg .. (B of Q S, K S),
    // P (A of P V / P U), V's value columns 32 wg .. (B of P V: block wg >> 1, 64 bytes into its
    // rows for odd wg; GATED_DELTA: R's and U's hi tile, B of T R and P U), V's columns jb .. (A
    // of the update; U's hi tile), Kw's key dims ib .. (its B; GATED_DELTA: the raw K tile's
    // place, + kBufD for buffer 1)
    constexpr uint64_t kBufD = bBuf >> 4;
    const int wgu = wg_uniform();  // (the descriptors in uniform registers: wgmma.cuh)
    const uint64_t dQ = sdesc(sb), dK = sdesc(sb + 16384 + 16 * wgu * 128);
    // (the lo tiles' descriptors: the hi ones' plus the distance)
    const uint64_t dSh = sdesc(sb + bSh + 32 * wgu * 128), dPh = sdesc(sb + (DELTA ? bPhD : bPh));
    const uint64_t dVb = sdesc(sb + 32768 + (wgu >> 1) * 8192 + (wgu & 1) * 64), dVa = sdesc(sb + 32768 + (wgu >> 1) * 8192);
    const uint64_t dWh = sdesc(sb + (DELTA ? 16384 : bWh) + (wgu & 1) * 8192);
    constexpr uint64_t kPl = ((DELTA ? bPlD : bPl) - (DELTA ? bPhD : bPh)) / 16;
    // GATED_DELTA: K (A of K S and K K^T), T's hi tile (A of T R); R's and U's lo tile as B (value columns 32 wg ..) and
    // as A (columns jb ..); Kw's lo tile (the raw Q tile's place) relative to its hi one
    [[maybe_unused]] const uint64_t dKa = sdesc(sb + 16384), dTh = sdesc(sb + bTh), dRlb = sdesc(sb + bRl + (wgu >> 1) * 8192 + (wgu & 1) * 64),
                                    dRla = sdesc(sb + bRl + (wgu >> 1) * 8192);
    constexpr uint64_t kTl = (bTl - bTh) / 16;
    constexpr int64_t kWl = DELTA ? -(16384 / 16) : (bWl - bWh) / 16;

    // the first chunk
    if (!a.l2norm && tid < kC) sNq[tid] = 1.0f, sNk[tid] = 1.0f;
    stage(tb, 0);
    if (warp == 0 && !PRE) {
        float gl[2], bl[2];
        load_gates(tb, gl, bl);
        gates(gl, bl, 0);
    }
    cp_wait0();
    proxy_fence();
    __syncthreads();
    char *const obase = tg_cuda_ptr(a.o, j0, h, 0, b);
    int c = 0;  // this chunk's buffer
#pragma unroll 1
    for (long long t0 = tb; t0 < t_end(); t0 += kC, c ^= 1) {
        float accQ[16], accP[8];
        const int n = rows_of(t0);
        const bool more = t0 + kC < t_end();
        if (more) stage(t0 + kC, c ^ 1);
        float gl[2], bl[2];  // the next chunk's gates (warp 0, without a.G)
        if (warp == 0 && more && !PRE) load_gates(t0 + kC, gl, bl);
        // this chunk's gate arrays (gate buffer c)
        float *const sL = garr(c), *const sSg = sL + kC, *const sB = sSg + kC, *const sD0 = sB + kC, *const sDl = sD0 + kC;
        float *const sEp = sDl + kC, *const sEm = sEp + kC;
        int *const sZ = (int *)(sEm + kC), *const sTab = sZ + kC;
        const int flags = *sTab;
        const bool tab = flags & 1;
        const uint64_t bd = c * kBufD;
        unsigned char *const qraw = sm + c * bBuf, *const kraw = qraw + 16384, *const vraw = qraw + 32768;

        if constexpr (DELTA) {
            // A1: K S and K K^T
            float accR[16], accA[8];
            pin(accR), pin(accA);
            wg_fence();
            wgb_qs0(accR, dKa + bd, dSh);
            wgb_qs1(accR, dKa + bd, dSh + (bSl - bSh) / 16);
            wgb_qk(accA, dKa + bd, dK + bd);
            wg_commit();
            // l2norm: this chunk's 1 / |q_t|, 1 / |k_t| while the products run (the last readers of
            // the previous chunk's were before its barrier (1))
            if (a.l2norm) {
                norms(c);
                __syncthreads();  // (3)
            }
            wg_wait0();
            pin(accR), pin(accA);
            // A = beta_t K_t.K_s d(t, s) / |k_t| |k_s| (s < t), F32 rows for (I + A)^-1
            float *const sAm = (float *)(sm + bAf), *const sTm = (float *)(sm + bTf);
            a_rows(accA, sAm, arow(0), 16 * wg + acol(0), sB, sNk, sL, sSg, sZ, sEp, sEm, tab);
            // A's diagonal block wg is this warpgroup's columns in warp wq = wg's rows: that warp
            // inverts it at once (lanes 0-15, a column each) while the other warps build R
            if (wq == wg) {
                __syncwarp();
                if (lane < 16) invert_diag16(sAm, sTm, 16 * wg, lane);
            }
            // R = beta_t (V_t - d(t, -1) (K S)_t / |k_t|): hi over the raw V (this warpgroup's value
            // columns, which only its own T R reads), lo into R's lo tile
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                const int t = arow(r), off = sw2(kC, t, 32 * wg + acol(r));
                const float bt = sB[t], dt = sD0[t], nk = sNk[t];
                const float2 v = bf_pair(*(const uint32_t *)(vraw + off));
                uint32_t hi, lo;
                bf_split(bt * (v.x - keep_zero_mul(dt, accR[r] * nk)), bt * (v.y - keep_zero_mul(dt, accR[r + 1] * nk)), hi, lo);
                *(uint32_t *)(vraw + off) = hi, *(uint32_t *)(sm + bRl + off) = lo;
            }
            __syncthreads();  // (1a) A and T's diagonal blocks complete
            invert_unit_lower_doubling_rest<kNT>(sAm, sTm);
            __syncthreads();
            // T as hi and lo K-major tiles over A's rows
            t_tiles(sTm, sm + bTh, sm + bTl);
            proxy_fence();
            __syncthreads();  // (1b) T's and R's tiles ready; A's and T's F32 rows free (P goes there)
            // A2: Q K^T, Q S and U = T R (R's hi tile: the raw V tile's place, columns 32 wg ..)
            float accU[16];
#pragma unroll
            for (int r = 0; r < 16; r++) accU[r] = 0.0f;
            pin(accQ), pin(accP), pin(accU);
            wg_fence();
            wgb_qk(accP, dQ + bd, dK + bd);
            wgb_qs0(accQ, dQ + bd, dSh);
            wgb_qs1(accQ, dQ + bd, dSh + (bSl - bSh) / 16);
            wgb_pv(accU, dTh, dVb + bd);
            wgb_pv(accU, dTh, dRlb);
            wgb_pv(accU, dTh + kTl, dVb + bd);
            wg_commit();
            wg_wait0();
            pin(accQ), pin(accP), pin(accU);
            // U as hi and lo over R (own columns: every read of them was this warpgroup's T R)
#pragma unroll
            for (int r = 0; r < 16; r += 2) {
                const int off = sw2(kC, arow(r), 32 * wg + acol(r));
                uint32_t hi, lo;
                bf_split(accU[r], accU[r + 1], hi, lo);
                *(uint32_t *)(vraw + off) = hi, *(uint32_t *)(sm + bRl + off) = lo;
            }
        } else {
            // A: Q K^T, Q S
            if constexpr (SEG != 1) {
                pin(accQ), pin(accP);
                wg_fence();
                wgb_qk(accP, dQ + bd, dK + bd);
                wgb_qs0(accQ, dQ + bd, dSh);
                wgb_qs1(accQ, dQ + bd, dSh + (bSl - bSh) / 16);
                wg_commit();
            }
            // l2norm: this chunk's 1 / |q_t|, 1 / |k_t| while the products run (the last readers of
            // the previous chunk's were before its barrier (1))
            if (a.l2norm) {
                norms(c);
                __syncthreads();  // (3)
            }
        }
        // Kw = K (.) d(C-1, t) beta_t / |k_t| (GATED_DELTA without beta_t, which U has): a 16-byte
        // unit at the same place in K's tile and Kw's (GATED_LINEAR: while Q K^T and Q S run;
        // GATED_DELTA: over the raw K (hi) and Q (lo) tiles, once every warpgroup is done with them)
        auto kw = [&]() {
            unsigned char *const wh = DELTA ? kraw : sm + bWh, *const wl = DELTA ? qraw : sm + bWl;
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int off = 16 * (tid + kNT * m), t = (off >> 7) & (kC - 1);
                const float w = DELTA ? sDl[t] * sNk[t] : sDl[t] * sB[t] * sNk[t];
                const uint4 u = *(const uint4 *)(kraw + off);
                const uint32_t x[4] = {u.x, u.y, u.z, u.w};
                uint32_t hi[4], lo[4];
#pragma unroll
                for (int f = 0; f < 4; f++) {
                    const float2 v = bf_pair(x[f]);
                    bf_split(v.x * w, v.y * w, hi[f], lo[f]);
                }
                *(uint4 *)(wh + off) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                *(uint4 *)(wl + off) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            }
        };
        if constexpr (!DELTA) kw();
        if constexpr (SEG != 1) {  // (SEG 1: no P, no Q S)
            // (and P's factors: this thread's two rows t and four columns s)
            float ept[2], nqt[2], ems[4], bks[4];
            int zt[2];
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int t = arow(2 * hh);
                ept[hh] = sEp[t], nqt[hh] = sNq[t], zt[hh] = sZ[t];
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int s = 16 * wg + 8 * (q >> 1) + c2 + (q & 1);
                ems[q] = sEm[s], bks[q] = DELTA ? sNk[s] : sB[s] * sNk[s];
            }
            if constexpr (!DELTA) {
                wg_wait0();
                pin(accQ), pin(accP);
            }
            // P (.) d(t, s) beta_s / |q_t| |k_s|, s <= t (GATED_DELTA without beta_s; d by the tables
            // where they hold, as decay_ts)
            unsigned char *const ph = sm + (DELTA ? bPhD : bPh), *const pl = sm + (DELTA ? bPlD : bPl);
#pragma unroll
            for (int r = 0; r < 8; r += 2) {
                const int t = arow(r), s = 16 * wg + acol(r), hh = (r >> 1) & 1, q = (r >> 2) << 1;
                float p[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float d = tab ? (zt[hh] > s + e ? 0.0f : ept[hh] * ems[q + e]) : chunk_decay(sL, sSg, sZ, t, s + e);
                    p[e] = s + e <= t ? accP[r + e] * d * bks[q + e] * nqt[hh] : 0.0f;
                }
                uint32_t hi, lo;
                bf_split(p[0], p[1], hi, lo);
                *(uint32_t *)(ph + sw2(kC, t, s)) = hi, *(uint32_t *)(pl + sw2(kC, t, s)) = lo;
            }
            qs_rows(accQ, sD0, sNq, arow(0), flags & 2);
        }
        if constexpr (DELTA) {
            __syncthreads();  // (1c) every warpgroup's Q K^T, Q S and T R done: the raw Q and K free
            kw();
        }
        const float dl = sD0[kC - 1];  // (the last read of gate buffer c: the next chunk's copies go there)
        if (SEG == 1 && tid == 0) gseg = keep_zero_mul(dl, gseg), gnan = gnan || isnan(dl);
        proxy_fence();
        __syncthreads();  // (1) P, Kw (and U) ready; the gate arrays, norms and the raw Q and K free

        // B: O += P V (GATED_DELTA P U), S^T = d(C-1, -1) S^T + V^T Kw (U^T Kw)
        by_mul(flags & 2, [&](auto mul) {
#pragma unroll
            for (int r = 0; r < 32; r++) accS[r] = mul(dl, accS[r]);
        });
        if constexpr (SEG != 1) pin(accQ);
        pin(accS);
        wg_fence();
        if constexpr (SEG != 1) {
            wgb_pv(accQ, dPh, dVb + bd);
            wgb_pv(accQ, dPh + kPl, dVb + bd);
        }
        if constexpr (DELTA) wgb_pv(accQ, dPh, dRlb);
        wgb_upd(accS, dVa + bd, dWh + (DELTA ? bd : 0));
        wgb_upd(accS, dVa + bd, dWh + (DELTA ? bd : 0) + (uint64_t)kWl);
        if constexpr (DELTA) wgb_upd(accS, dRla, dWh + bd);
        wg_commit();
        if (warp == 0 && more && !PRE) gates(gl, bl, c ^ 1);
        wg_wait0();
        if constexpr (SEG != 1) pin(accQ);
        pin(accS);
        if (more) {
            if constexpr (SEG != 1) s_tiles();
        } else if constexpr (SEG == 1) {  // the segment's end state and decay
            put_slot(sg);
            if (tid == 0 && slice == 0) {
                float *const gp = a.seg_g + 2 * (((long long)b * a.Hv + h) * (a.nseg - 1) + sg);
                gp[0] = gseg, gp[1] = gnan ? 1.0f : 0.0f;
            }
        } else if (has_state && clear && (SEG == 0 || sg == a.nseg - 1)) {
#pragma unroll
            for (int r = 0; r < 32; r++)
                tg_cuda_store(tg_cuda_ptr(a.state, ib + acol(r), j0 + jb + arow(r), h, b), a.state.type, accS[r]);
        }
        // O: rows arow(0), arow(2); columns 32 wg + c2 + 8 n8 (n8 < 4)
        if constexpr (SEG != 1) store_o(a, obase, t0, n, arow(0), 32 * wg + c2, accQ);
        if (!more) break;
        cp_wait0();
        proxy_fence();
        __syncthreads();  // (2) the next chunk's tiles, gates and S^T ready
    }
#endif
}

template <bool DELTA>
__global__ void __launch_bounds__(kNT, 1) delta_wgb_kernel(const chunk_args a) {
    wgb_body<DELTA, 0, false>(a);
}
// ... with the gate arrays from a.G (shared memory kSmemB<DELTA, true>)
template <bool DELTA>
__global__ void __launch_bounds__(kNT, 1) delta_wgb_pre_kernel(const chunk_args a) {
    wgb_body<DELTA, 0, true>(a);
}
// GATED_LINEAR's segments (wgb_body): SEG 1 the segments' states, SEG 2 the outputs
template <int SEG>
__global__ void __launch_bounds__(kNT, 1) delta_wgb_seg_kernel(const chunk_args a) {
    wgb_body<false, SEG, false>(a);
}
template <int SEG>
__global__ void __launch_bounds__(kNT, 1) delta_wgb_segpre_kernel(const chunk_args a) {
    wgb_body<false, SEG, true>(a);
}

}  // namespace

namespace tg_chunk {

size_t tg_cuda_delta_wgb_smem(bool delta) { return TG_WGMMA ? (delta ? kSmemB<true, true> : kSmemB<false, true>) : 0; }  // (the larger)

tg_status tg_cuda_delta_wgb_seg_launch(tg_backend *be, const chunk_args &a, unsigned units) {
    // slots WG+9 and WG+10 (WG+5..WG+8 are the prep kernel's); with a.G WG+13 and WG+14
    size_t *set = tg_cuda(be)->delta_smem_set + tg_cuda_impl::TG_CUDA_DSMEM_WG;
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_WG + 14 < tg_cuda_impl::TG_CUDA_DSMEM_COUNT, "the segment kernels' slots");
    const unsigned n1 = units * (unsigned)(a.nseg - 1), n2 = units * (unsigned)a.nseg;
    constexpr size_t sm = kSmemB<false>, smp = kSmemB<false, true>;
    tg_status s = a.G ? wg_launch(be, delta_wgb_segpre_kernel<1>, smp, set[13], a, n1) : wg_launch(be, delta_wgb_seg_kernel<1>, sm, set[9], a, n1);
    if (s != TG_OK) return s;
    TG_CUDA_LAUNCHED(be, "delta_rule");
    return a.G ? wg_launch(be, delta_wgb_segpre_kernel<2>, smp, set[14], a, n2) : wg_launch(be, delta_wgb_seg_kernel<2>, sm, set[10], a, n2);
}

tg_status tg_cuda_delta_wgb_launch(tg_backend *be, const chunk_args &a, unsigned grid) {
    // slots WG+2 (GATED_LINEAR) and WG+3 (GATED_DELTA); with a.G WG+11 and WG+12
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_WG + 12 < tg_cuda_impl::TG_CUDA_DSMEM_COUNT, "the BF16 kernels' slots");
    size_t &set = tg_cuda(be)->delta_smem_set[tg_cuda_impl::TG_CUDA_DSMEM_WG + (a.G ? 11 : 2) + (a.delta ? 1 : 0)];
    if (a.G)
        return a.delta ? wg_launch(be, delta_wgb_pre_kernel<true>, kSmemB<true, true>, set, a, grid)
                       : wg_launch(be, delta_wgb_pre_kernel<false>, kSmemB<false, true>, set, a, grid);
    return a.delta ? wg_launch(be, delta_wgb_kernel<true>, kSmemB<true>, set, a, grid)
                   : wg_launch(be, delta_wgb_kernel<false>, kSmemB<false>, set, a, grid);
}

}  // namespace tg_chunk
