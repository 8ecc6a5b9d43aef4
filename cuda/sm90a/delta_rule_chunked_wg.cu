// delta_rule_chunked_wg.cu - the single-kernel chunked delta rule's full case with 16-bit q/k/v on
// Hopper's warpgroup tensor cores (wgmma, sm_90a; cuda/delta_rule_chunked.cu has the form and the
// math, docs/ops.md the policy).
//
// Same walk as delta_chunked_kernel<16, true>: one block of 16 warps per (128-column slice of
// Dv, value head, sequence) takes the chunks of C = 64 tokens in order. What differs is where the
// products' operands live: wgmma reads A and B straight from shared memory (descriptors of
// K-major tiles in the 128-byte swizzled layout: rows of 32 TF32 values, 16-byte units of a row
// XOR-ed with the row's index mod 8), so no warp loads fragments into registers. The state slice
// (F32) lives in shared memory as S^T, the B operand of Q S; each warpgroup updates a 64 x 64
// block of it in its accumulator registers. Per chunk:
//   stage   Q, K (l2-normalized if asked, TF32) as 64 x 128 tiles, V^T (128 x 64, TF32), gates
//   A       Q S (warpgroup w: columns 32w .. 32w + 31) and P = Q K^T (columns 16w .. 16w + 15)
//   P       masked, times the decays and beta (beta folded here and into K~ instead of into V:
//           U = beta V never materializes), to shared memory; K~^T = (K (.) d(C-1, t) beta)^T
//   B       O = d(t, -1) Q S + P V (to global), S = d(C-1, -1) S + K~^T V; while B's wgmmas run,
//           the next chunk's Q, K and gates are staged (its V^T after them, past a barrier)
// GATED_DELTA (DELTA) first turns V into U by the UT transform: K S and K K^T (as Q S and Q K^T),
// R = beta (V - d(t, -1) K S) over V^T, A = beta K K^T (.) decay as F32 rows, T = (I + A)^-1
// (invert_unit_lower_doubling: diagonal blocks on CUDA cores, the rest on mma.sync), U = T R (T as
// a swizzled A operand) over R^T; then P and K~ without beta (U has it) and the same phase B. F32
// q/k/v stay on delta_chunked_kernel. Knob delta_chunk_wg.
#include "wgmma.cuh"

namespace {

// shared memory, bytes from a 1024-byte aligned base (the swizzle's atoms are 8 rows of 128 bytes)
[[maybe_unused]] constexpr int oQ = 0;          // Q: 64 rows x 128 (4 blocks of 32 columns of 64 x 128 B)
[[maybe_unused]] constexpr int oK = 32768;      // K: the same
[[maybe_unused]] constexpr int oV = 65536;      // V^T: 128 rows (value columns) x 64 (tokens): 2 blocks of 128 x 128 B
[[maybe_unused]] constexpr int oS = 98304;      // S^T: 128 rows (value columns) x 128 (key dims): 4 blocks of 128 x 128 B
[[maybe_unused]] constexpr int oP = 163840;     // P: 64 x 64: 2 blocks of 64 x 128 B
[[maybe_unused]] constexpr int oKt = 180224;    // K~^T: 128 rows (key dims) x 64 (tokens): 2 blocks of 128 x 128 B
// GATED_DELTA: A = beta K K^T (.) decay and T = (I + A)^-1 as F32 64 x 64 (row stride kPS) for
// the substitution, over K~^T's region (both are read before K~^T is built) and 2 KB past it; T
// then as a swizzled A operand (64 x 64) over A's rows (read by then)
[[maybe_unused]] constexpr int oAf = oKt;
[[maybe_unused]] constexpr int oTf = oKt + kC * kPS * 4;
// gates and decays: 7 x 64 floats, 64 ints, the flags
template <bool DELTA> constexpr int oF = DELTA ? oTf + kC * kPS * 4 : 212992;
template <bool DELTA> constexpr size_t kSmem = oF<DELTA> + (8 * kC + 4) * 4 + 1024;  // + the alignment slack
static_assert(oF<true> >= oKt + 32768 && oF<false> == oKt + 32768, "the gates past K~^T (and A, T)");

// Byte offset of element (r, k) in a K-major tile of `rows` rows, 128-byte swizzle.
[[maybe_unused]] __device__ __forceinline__ int sw(int rows, int r, int k) {
    return (k >> 5) * rows * 128 + r * 128 + ((((k >> 2) & 7) ^ (r & 7)) << 4) + ((k & 3) << 2);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TG_WG(SHAPE, ACC) "wgmma.mma_async.sync.aligned." SHAPE ".f32.tf32.tf32 " ACC ", da, db, p, 1, 1;\n"
#define TG_WG_HEAD(SHAPE, ACC, IA, IB, FIRST) \
    "{\n.reg .b64 da, db;\n.reg .pred p;\nmov.b64 da, %" #IA ";\nmov.b64 db, %" #IB ";\nsetp.ne.b32 p, " #FIRST ", 0;\n" TG_WG(SHAPE, ACC)
#define TG_WG_STEP(SHAPE, ACC, JA, JB) \
    "add.s64 da, da, " #JA ";\nadd.s64 db, db, " #JB ";\nsetp.ne.b32 p, 1, 0;\n" TG_WG(SHAPE, ACC)
// the three further steps of a 32-column block
#define TG_WG_REST(SHAPE, ACC) TG_WG_STEP(SHAPE, ACC, 2, 2) TG_WG_STEP(SHAPE, ACC, 2, 2) TG_WG_STEP(SHAPE, ACC, 2, 2)
// a further block of 32 columns: its first step jumps by JA / JB
#define TG_WG_BLOCK(SHAPE, ACC, JA, JB) TG_WG_STEP(SHAPE, ACC, JA, JB) TG_WG_REST(SHAPE, ACC)

// Q S: 64 x 32 outputs, k over 128 (Q 64 rows, S^T 128 rows)
__device__ __forceinline__ void wg_qs(float (&d)[16], uint64_t da, uint64_t db) {
    asm volatile(TG_WG_HEAD("m64n32k8", TG_ACC16, 16, 17, 0) TG_WG_REST("m64n32k8", TG_ACC16)
                 TG_WG_BLOCK("m64n32k8", TG_ACC16, 506, 1018) TG_WG_BLOCK("m64n32k8", TG_ACC16, 506, 1018)
                 TG_WG_BLOCK("m64n32k8", TG_ACC16, 506, 1018) "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db));
}
// Q K^T: 64 x 16 outputs, k over 128 (Q and K 64 rows)
__device__ __forceinline__ void wg_qk(float (&d)[8], uint64_t da, uint64_t db) {
    asm volatile(TG_WG_HEAD("m64n16k8", TG_ACC8, 8, 9, 0) TG_WG_REST("m64n16k8", TG_ACC8)
                 TG_WG_BLOCK("m64n16k8", TG_ACC8, 506, 506) TG_WG_BLOCK("m64n16k8", TG_ACC8, 506, 506)
                 TG_WG_BLOCK("m64n16k8", TG_ACC8, 506, 506) "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db));
}
// O += P V: 64 x 32 outputs, k over the chunk's 64 tokens (P 64 rows, V^T 128 rows)
__device__ __forceinline__ void wg_pv(float (&d)[16], uint64_t da, uint64_t db) {
    asm volatile(TG_WG_HEAD("m64n32k8", TG_ACC16, 16, 17, 1) TG_WG_REST("m64n32k8", TG_ACC16)
                 TG_WG_BLOCK("m64n32k8", TG_ACC16, 506, 1018) "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db));
}
// S += K~^T V: 64 x 64 outputs, k over the chunk's 64 tokens (K~^T and V^T 128 rows)
__device__ __forceinline__ void wg_upd(float (&d)[32], uint64_t da, uint64_t db) {
    asm volatile(TG_WG_HEAD("m64n64k8", TG_ACC32, 32, 33, 1) TG_WG_REST("m64n64k8", TG_ACC32)
                 TG_WG_BLOCK("m64n64k8", TG_ACC32, 1018, 1018) "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db));
}
#endif

// q, k and v F16 or BF16 (8 values per 16-byte unit). (An F32 instance, 4 values per unit, lost
// to delta_chunked_kernel's both before the asm chains below (476 against 449 us at gla.prefill on
// an H100, session 39) and after them (471 against 447, session 40): F32 stays there.)
// DELTA: GATED_DELTA (the UT transform), else GATED_LINEAR.
template <bool DELTA>
__global__ void __launch_bounds__(kNT, 1) delta_wg_kernel(const chunk_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int W = 8;
    extern __shared__ float4 wsm4[];
    // (the base moved by a byte count, not by integer casts: the pointer stays a shared-memory one
    // to the compiler, 32-bit addresses and shared loads and stores)
    unsigned char *sm = (unsigned char *)wsm4 + ((1024u - (smem_u32(wsm4) & 1023u)) & 1023u);
    const uint32_t sb = smem_u32(sm);
    float *sL = (float *)(sm + oF<DELTA>), *sSg = sL + kC, *sB = sSg + kC, *sD0 = sB + kC, *sDl = sD0 + kC;
    float *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    auto at = [&](int off, int rows, int r, int k) -> float & { return *(float *)(sm + off + sw(rows, r, k)); };

    // (wg from a lane-0 shuffle, warp-uniform to the compiler, for every use took the kernel from 58
    // to 450 bytes of spills; the descriptors below take it (wgu) for themselves only)
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2, wq = warp & 3;
    const int slice = blockIdx.x % a.nslices, h = (blockIdx.x / a.nslices) % a.Hv, b = blockIdx.x / (a.nslices * a.Hv);
    const int hk = h / (a.Hv / a.Hk), j0 = slice * 128;
    const bool clear = tg_cuda_record_clear(a.err);
    const bool has_state = a.state.data != nullptr;
    // accumulator element r of a 64 x N tile: row 16 wq + g + 8 ((r >> 1) & 1), column 8 (r >> 2) + 2 c + (r & 1)
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    auto arow = [&](int r) { return 16 * wq + g + 8 * ((r >> 1) & 1); };
    auto acol = [&](int r) { return 8 * (r >> 2) + c2 + (r & 1); };

    // the state slice, F32, as S^T in shared memory: the B operand of Q S (the tensor cores read
    // its TF32 part, as delta_chunked_kernel's ldmatrix fragments do) and the update's start.
    // Warpgroup wg updates rows i of block ib = wg >> 1, columns of block jb = wg & 1, in the
    // accumulator layout
    const int ib = 64 * (wg >> 1), jb = 64 * (wg & 1);
    // (element r at one of four thread bases, by (r >> 1) & 1 and r & 1, plus (r >> 2) 1024 bytes:
    // row jb + acol(r), column ib + arow(r) of S^T)
    unsigned char *s_base[2][2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int e = 0; e < 2; e++) s_base[hh][e] = sm + oS + sw(128, jb + c2 + e, ib + 16 * wq + g + 8 * hh);
    auto s_at = [&](int r) -> float & { return *(float *)(s_base[(r >> 1) & 1][r & 1] + (r >> 2) * 1024); };
#pragma unroll 4
    for (int r = 0; r < 32; r++)
        s_at(r) = has_state ? tg_cuda_load(tg_cuda_ptr(a.state, ib + arow(r), j0 + jb + acol(r), h, b), a.state.type) : 0.0f;

    char *const obase = tg_cuda_ptr(a.o, j0, h, 0, b);
    // Staging of chunk t0's rows (nn of them; rows past nn are zeros, the tiles are restaged whole):
    // Q and K by units as stage3_128 (a row's units are adjacent lanes), V^T by a warp taking 8 rows
    // t by 4 units (64-byte pieces of rows; its scattered stores spread over the banks). Loads and
    // stores are apart, so that the loads of the next chunk are in flight while this one's wgmma runs.
    constexpr int SH = 4, M = (kC << SH) / kNT;  // 16 units per row (2^SH), M per thread and tensor
    const int vt = (warp & 7) * 8 + (lane & 7), vc0 = (warp >> 3) * 4 + (lane >> 3);
    auto rows_of = [&](long long c0) { return (int)(a.T - c0 < kC ? a.T - c0 : kC); };
    // (one tensor at a time, j 0 = q, 1 = k: fewer registers live beside the accumulators)
    auto load_qk = [&](int j, long long c0, uint4 (&rq)[M]) {
        const int nn = rows_of(c0);
        const tg_cuda_desc &x = j == 0 ? a.q : a.k;
        const unit_walk wk = unit_walk::of<kNT>({(float *)sm, 0, tg_cuda_ptr(x, 0, hk, c0, b), x.nb[2], x.type, nn, 128});
#pragma unroll
        for (int m = 0; m < M; m++)
            if (wk.row0 + m * wk.rstep < nn) rq[m] = __ldg((const uint4 *)(wk.src + m * wk.sstep));
    };
    auto store_qk = [&](int j, long long c0, const uint4 (&rq)[M]) {
        const int nn = rows_of(c0), row0 = tid >> SH, col = tid & ((1 << SH) - 1), off = j == 0 ? oQ : oK;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int t = row0 + m * (kNT >> SH);
            float f[8];
            unit_floats(rq[m], j == 0 ? a.q.type : a.k.type, t < nn, f);
            qk_unit_finish(f, SH, a.l2norm);
            *(float4 *)(sm + off + sw(kC, t, col * W)) = make_float4(f[0], f[1], f[2], f[3]);
            *(float4 *)(sm + off + sw(kC, t, col * W + 4)) = make_float4(f[4], f[5], f[6], f[7]);
        }
    };
    auto load_v = [&](long long c0, uint4 (&rv)[M]) {
        const int nn = rows_of(c0);
        const char *vsrc = tg_cuda_ptr(a.v, j0, h, c0, b) + vt * a.v.nb[2] + 16LL * vc0;
#pragma unroll
        for (int m = 0; m < M; m++)
            if (vt < nn) rv[m] = __ldg((const uint4 *)(vsrc + 16LL * 8 * m));
    };
    auto store_v = [&](long long c0, const uint4 (&rv)[M]) {
        const int nn = rows_of(c0);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float f[8];
            unit_floats(rv[m], a.v.type, vt < nn, f);
#pragma unroll
            for (int e = 0; e < W; e++) at(oV, 128, (vc0 + 8 * m) * W + e, vt) = tf32r(f[e]);
        }
    };
    // gates and beta of chunk c0 (warp 0), into registers a phase before they are used
    auto load_gates = [&](long long c0, float (&gl)[2], float (&bl)[2]) { load_chunk_gates(a, h, b, c0, rows_of(c0), gl, bl); };
    auto gates = [&](const float (&gl)[2], const float (&bl)[2]) {
        chunk_gates(gl, bl, a.log_gate, sL, sB, sSg, sZ, sD0, sDl, sEp, sEm, sTab);
    };
    // the rows of the chunk after t0 into L2 (while t0 computes)
    auto prefetch_next = [&](long long c0) {
        if (c0 + kC >= a.T) return;
        const int nn = rows_of(c0 + kC);
        prefetch3_128<kNT>({(float *)sm, 0, tg_cuda_ptr(a.q, 0, hk, c0 + kC, b), a.q.nb[2], a.q.type, nn, 128},
                           {(float *)sm, 0, tg_cuda_ptr(a.k, 0, hk, c0 + kC, b), a.k.nb[2], a.k.type, nn, 128},
                           {(float *)sm, 0, tg_cuda_ptr(a.v, j0, h, c0 + kC, b), a.v.nb[2], a.v.type, nn, 128});
    };

    // the operands' descriptors at k 0: Q (A of Q S and Q K^T), S^T rows 32 wg .. (B of Q S), K rows
    // 16 wg .. (B of Q K^T), P (A of P V), V^T rows 32 wg .. (B of P V), K~^T rows ib .. (A of the
    // update), V^T rows jb .. (its B); wgu = wg, so 64 (wgu >> 1) = ib and 64 (wgu & 1) = jb
    const int wgu = wg_uniform();  // (the descriptors in uniform registers: wgmma.cuh)
    const uint64_t dQ = sdesc(sb + oQ), dS = sdesc(sb + oS + 32 * wgu * 128), dK = sdesc(sb + oK + 16 * wgu * 128);
    const uint64_t dP = sdesc(sb + oP), dVo = sdesc(sb + oV + 32 * wgu * 128), dKt = sdesc(sb + oKt + 64 * (wgu >> 1) * 128),
                   dVs = sdesc(sb + oV + 64 * (wgu & 1) * 128);
    // GATED_DELTA: K (A of K S and K K^T; B of K K^T is dK) and T (A of U = T R)
    [[maybe_unused]] const uint64_t dKa = sdesc(sb + oK), dT = sdesc(sb + oAf);

    // the first chunk
    {
        uint4 rq[2][M], rv[M];
        load_qk(0, 0, rq[0]);
        load_qk(1, 0, rq[1]);
        load_v(0, rv);
        prefetch_next(0);
        if (warp == 0) {
            float gl[2], bl[2];
            load_gates(0, gl, bl);
            gates(gl, bl);
        }
        store_qk(0, 0, rq[0]);
        store_qk(1, 0, rq[1]);
        store_v(0, rv);
    }
    proxy_fence();
    __syncthreads();
#pragma unroll 1
    for (long long t0 = 0; t0 < a.T; t0 += kC) {
        // (declared per chunk: Q S and P start over with each chunk's first wgmma (no accumulate),
        // and accumulators carried across the loop got copies between wgmmas, which serialize them)
        float accQ[16], accP[8];
        const int n = rows_of(t0);
        const bool more = t0 + kC < a.T;
        float gl[2], bl[2];  // the next chunk's gates (warp 0)
        if (warp == 0 && more) load_gates(t0 + kC, gl, bl);
        const int flags = *sTab;
        const bool tab = flags & 1;  // (flags & 2, every decay finite: keep_zero_mul below needs no branch)
        auto decay = [&](int t, int s) { return decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s); };

        // A: Q S (columns 32 wg ..) and Q K^T (columns 16 wg ..), k over the 128 key dims;
        // GATED_DELTA first K S (columns 32 wg ..) and K K^T (columns 16 wg ..), its Q S and Q K^T
        // later, beside U = T R (with all four here, 90 bytes of spills)
        [[maybe_unused]] float accR[DELTA ? 16 : 1], accA[DELTA ? 8 : 1];
        if constexpr (DELTA) {
            pin(accR), pin(accA);
            wg_fence();
            wg_qs(accR, dKa, dS);
            wg_qk(accA, dKa, dK);
            wg_commit();
            wg_wait0();
            pin(accR), pin(accA);
        } else {
            pin(accQ), pin(accP);
            wg_fence();
            wg_qs(accQ, dQ, dS);
            wg_qk(accP, dQ, dK);
            wg_commit();
            wg_wait0();
            pin(accQ), pin(accP);
        }
        // P (.) decay, s <= t, to shared memory: GATED_LINEAR times beta_s (U = beta V is never
        // built), GATED_DELTA not (beta is in R, so in U); Q S times d(t, -1)
        auto p_and_qs = [&]() {
#pragma unroll
            for (int r = 0; r < 8; r += 2) {
                const int t = arow(r), s = 16 * wg + acol(r);
                const float b0 = DELTA ? 1.0f : sB[s], b1 = DELTA ? 1.0f : sB[s + 1];
                const float p0 = s <= t ? tf32r(accP[r] * decay(t, s) * b0) : 0.0f;
                const float p1 = s + 1 <= t ? tf32r(accP[r + 1] * decay(t, s + 1) * b1) : 0.0f;
                *(float2 *)&at(oP, kC, t, s) = make_float2(p0, p1);
            }
            // (keep_zero_mul everywhere: with every decay finite it is the plain product but for a
            // zero's sign; one code path keeps the accumulators where the wgmma pipeline has them)
            const float d0 = sD0[arow(0)], d1 = sD0[arow(2)];
#pragma unroll
            for (int r = 0; r < 16; r++) accQ[r] = keep_zero_mul((r & 2) ? d1 : d0, accQ[r]);
        };
        if constexpr (!DELTA) p_and_qs();
        [[maybe_unused]] float *const sAm = (float *)(sm + oAf), *const sTm = (float *)(sm + oTf);
        if constexpr (DELTA) {
            // A = beta_t K_t . K_s d(t, s), s < t (F32, read by the doubling only); R = beta_t
            // (V_t - d(t, -1) (K S)_t) over V^T (each warpgroup its own 32 value columns: the rows
            // 32 wg .. of V^T, which only it reads until barrier (1))
#pragma unroll
            for (int r = 0; r < 8; r += 2) {
                const int t = arow(r), s = 16 * wg + acol(r);
                const float a0 = s < t ? sB[t] * accA[r] * decay(t, s) : 0.0f;
                const float a1 = s + 1 < t ? sB[t] * accA[r + 1] * decay(t, s + 1) : 0.0f;
                *(float2 *)&sAm[t * kPS + s] = make_float2(a0, a1);
            }
#pragma unroll
            for (int r = 0; r < 16; r++) {
                const int t = arow(r);
                float &x = at(oV, 128, 32 * wg + acol(r), t);
                x = tf32r(sB[t] * (x - keep_zero_mul(sD0[t], accR[r])));
            }
        }
        if constexpr (DELTA) {
            // T = (I + A)^-1 (F32), then T as the A operand of U = T R (its upper triangle zero: the
            // substitution keeps partial sums there), then U = T R, U^T over R^T (each warpgroup its
            // own rows again)
            __syncthreads();  // (1a) A complete
            invert_unit_lower_doubling<kNT>(sAm, sTm);
            __syncthreads();
            // (T's tile over A's rows, read by now: Q stays for Q S and Q K^T beside U)
            static_assert(oAf % 1024 == 0, "swizzle atoms");
#pragma unroll
            for (int m = 0; m < kC * kC / 4 / kNT; m++) {
                const int u = tid + kNT * m, t = u >> 4, s0 = (u & 15) * 4;
                const float4 x = *(const float4 *)&sTm[t * kPS + s0];
                *(float4 *)(sm + oAf + sw(kC, t, s0)) =
                    make_float4(s0 <= t ? tf32r(x.x) : 0.0f, s0 + 1 <= t ? tf32r(x.y) : 0.0f, s0 + 2 <= t ? tf32r(x.z) : 0.0f,
                                s0 + 3 <= t ? tf32r(x.w) : 0.0f);
            }
            proxy_fence();
            __syncthreads();  // (1b) T and R^T ready; A and T's F32 rows free (K~^T goes there)
#pragma unroll
            for (int r = 0; r < 16; r++) accR[r] = 0.0f;
            pin(accQ), pin(accP), pin(accR);
            wg_fence();
            wg_qs(accQ, dQ, dS);
            wg_qk(accP, dQ, dK);
            wg_pv(accR, dT, dVo);
            wg_commit();
            wg_wait0();
            pin(accQ), pin(accP), pin(accR);
#pragma unroll
            for (int r = 0; r < 16; r++) at(oV, 128, 32 * wg + acol(r), arow(r)) = tf32r(accR[r]);
            p_and_qs();
            __syncthreads();  // (1c) every warpgroup's U = T R has read T (K~^T goes over it)
        }
        // K~^T = (K (.) d(C-1, t) beta_t)^T (GATED_DELTA: without beta_t, which U has): a warp
        // reads 32 rows t of one 16-byte unit, writes 32 distinct banks
#pragma unroll
        for (int m = 0; m < kC * 32 / kNT; m++) {
            const int u = tid + kNT * m, t = u & (kC - 1), i0 = (u >> 6) * 4;
            const float4 kv = *(const float4 *)(sm + oK + sw(kC, t, i0));
            const float w = DELTA ? sDl[t] : sDl[t] * sB[t];
            at(oKt, 128, i0, t) = tf32r(kv.x * w), at(oKt, 128, i0 + 1, t) = tf32r(kv.y * w);
            at(oKt, 128, i0 + 2, t) = tf32r(kv.z * w), at(oKt, 128, i0 + 3, t) = tf32r(kv.w * w);
        }
        // the last decay, read before the barrier: warp 0 rebuilds the arrays for the next chunk after it
        const float dl = sD0[kC - 1];
        proxy_fence();
        __syncthreads();  // (1) Q (or T), K, the gate arrays free; P, K~^T, V^T (U^T) ready

        // B: O += P V (k over the chunk's tokens), S = d(C-1, -1) S + K~^T V (Q S read S^T in A,
        // before the barrier above)
        float accS[32];
#pragma unroll
        for (int r = 0; r < 32; r++) accS[r] = keep_zero_mul(dl, s_at(r));
        pin(accQ), pin(accS);
        wg_fence();
        wg_pv(accQ, dP, dVo);
        wg_upd(accS, dKt, dVs);
        wg_commit();
        // while it runs: the next chunk's Q and K into their (free) tiles, its gates (warp 0), and
        // its V rows into registers
        uint4 rv[M];
        if (more) {
            uint4 rq[M];
            load_qk(0, t0 + kC, rq);
            prefetch_next(t0 + kC);
            if (warp == 0) gates(gl, bl);
            store_qk(0, t0 + kC, rq);
            load_qk(1, t0 + kC, rq);
            store_qk(1, t0 + kC, rq);
            load_v(t0 + kC, rv);
        }
        wg_wait0();
        pin(accQ), pin(accS);
        // S^T back (every read of it, phase A's, ended before barrier (1)), then O (rows arow(0), arow(2))
#pragma unroll
        for (int r = 0; r < 32; r++) s_at(r) = accS[r];
        store_o(a, obase, t0, n, arow(0), 32 * wg + c2, accQ);
        if (!more) break;
        __syncthreads();  // (2) every warpgroup's B is done with V^T
        store_v(t0 + kC, rv);
        proxy_fence();
        __syncthreads();  // (3) the next chunk's tiles, gates and S^T ready
    }
    if (!has_state || !clear) return;
#pragma unroll 4
    for (int r = 0; r < 32; r++)
        tg_cuda_store(tg_cuda_ptr(a.state, ib + arow(r), j0 + jb + acol(r), h, b), a.state.type, s_at(r));
#endif
}

}  // namespace

namespace tg_chunk {

bool tg_cuda_delta_wg_ready(tg_backend *be) { return tg_cuda_delta_wgmma_state(be) == 0; }

bool tg_cuda_delta_wg_bf16(tg_backend *be, const chunk_args &a) {
    return a.q.type == TG_TYPE_BF16 && a.k.type == TG_TYPE_BF16 && a.v.type == TG_TYPE_BF16 &&
           tg_cuda(be)->sig.delta_chunk_wg == 0;
}

size_t tg_cuda_delta_wg_smem(tg_backend *be, const chunk_args &a) {
    if (!TG_WGMMA) return 0;
    return tg_cuda_delta_wg_bf16(be, a) ? tg_cuda_delta_wgb_smem(a.delta) : a.delta ? kSmem<true> : kSmem<false>;
}

bool tg_cuda_delta_wg_takes(const chunk_args &a) {
    auto half = [](tg_type t) { return t == TG_TYPE_F16 || t == TG_TYPE_BF16; };
    return half(a.q.type) && half(a.k.type) && half(a.v.type);
}

tg_status tg_cuda_delta_wg_launch(tg_backend *be, const chunk_args &a, unsigned grid) {
    if (tg_cuda_delta_wg_bf16(be, a)) return tg_cuda_delta_wgb_launch(be, a, grid);
    // (a slot per instance: the shared-memory limit is a kernel's own attribute)
    size_t &set = tg_cuda(be)->delta_smem_set[tg_cuda_impl::TG_CUDA_DSMEM_WG + (a.delta ? 1 : 0)];
    return a.delta ? wg_launch(be, delta_wg_kernel<true>, kSmem<true>, set, a, grid)
                   : wg_launch(be, delta_wg_kernel<false>, kSmem<false>, set, a, grid);
}

}  // namespace tg_chunk

int tg_cuda_delta_wgmma_state(tg_backend *be) {
    if (tg_cuda(be)->sig.delta_chunk_wg == 1) return 1;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return (void)cudaGetLastError(), 2;
    if (major != 9 || minor != 0) return 2;
    return TG_WGMMA ? 0 : 3;
}
