// wgmma.cuh - what the sm_90a chunked delta-rule kernels share (cuda/sm90a/delta_rule_chunked_wg.cu,
// TF32 products; cuda/sm90a/delta_rule_chunked_wgb.cu, delta_rule_prep_wgb.cu and
// delta_rule_out_wgb.cu, BF16): the block size, the shared-memory operand descriptor, the wgmma
// fences and accumulator pins, the BF16 tiles' swizzle, hi/lo pairs, l2norm's row norms, A's rows and
// T's tiles of the UT transform, cp.async of raw tiles and gate arrays, the BF16 product chains the
// BF16 kernels use, and the O store from a 64 x 32 accumulator tile.
#pragma once
#include <cstdint>

#include "../chunk_parts.cuh"
#include "../delta_rule_chunked.cuh"
#include "../delta_rule_phases.cuh"
#include "ops.h"
#include "../signature.cuh"

using namespace tg_chunk;

namespace {

constexpr int kNT = 512;  // 16 warps: four warpgroups

// The descriptor of the K-major operand whose rows start at shared address a (1024-aligned
// but for the k step's 32-byte offsets): 128-byte swizzle, 8-row groups 1024 bytes apart.
[[maybe_unused]] __device__ __forceinline__ uint64_t sdesc(uint32_t a) {
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// (k step kk of a tile of ROWS rows starts (kk >> 2) blocks of 32 columns and (kk & 3) 32-byte steps
// past k 0: the chains below add that to the descriptor's address field, in 16-byte units)

// The thread's warpgroup (threadIdx.x / 128) by a shuffle from lane 0, which ptxas knows is the same
// in every lane of the warp: the wgmma descriptors made from it stay in uniform registers and step by
// one UIADD3 a k step, where from tid >> 7 each step was built in vector registers and moved over by
// two R2UR (delta_wgb_kernel<true>: 192 R2UR in its SASS before, 1 after). The whole-sequence kernels
// use it for their descriptors only: as every use of wg it raised ptxas's spills in the TF32 kernel and
// GATED_LINEAR's BF16 instances.
[[maybe_unused]] __device__ __forceinline__ int wg_uniform() { return __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0); }

// Byte offset of element (r, k) in a K-major tile of `rows` rows of 16-bit values, 128-byte swizzle.
[[maybe_unused]] __device__ __forceinline__ int sw2(int rows, int r, int k) {
    return (k >> 6) * rows * 128 + r * 128 + ((((k >> 3) & 7) ^ (r & 7)) << 4) + ((k & 7) << 1);
}
// x, y as BF16 pairs hi (round to nearest) and lo = x - hi (0 where hi is infinite, so that hi + lo
// keeps an infinity; a NaN stays NaN)
[[maybe_unused]] __device__ __forceinline__ void bf_split(float x, float y, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(isinf(hf.x) ? 0.0f : x - hf.x, isinf(hf.y) ? 0.0f : y - hf.y);
    memcpy(&hi, &h, 4), memcpy(&lo, &l, 4);
}
[[maybe_unused]] __device__ __forceinline__ float2 bf_pair(uint32_t u) {
    __nv_bfloat162 h;
    memcpy(&h, &u, 4);
    return __bfloat1622float2(h);
}
// A Q S accumulator tile (64 x 32; this thread's rows r0 and r0 + 8) times d(t, -1) / |q_t| per row:
// plain products where every d(t, -1) of the chunk is finite (fin), else an exact zero stays zero
[[maybe_unused]] __device__ __forceinline__ void qs_rows(float (&acc)[16], const float *sD0, const float *sNq, int r0, bool fin) {
    const float d0 = sD0[r0], d1 = sD0[r0 + 8], n0 = sNq[r0], n1 = sNq[r0 + 8];
    by_mul(fin, [&](auto mul) {
#pragma unroll
        for (int r = 0; r < 16; r++) acc[r] = mul((r & 2) ? d1 : d0, acc[r] * ((r & 2) ? n1 : n0));
    });
}
// 1 / |x_t| (l2norm's, with its 1e-6) of row t of a raw BF16 tile (kC rows of 128 values in sw2's
// layout) by the four lanes q = 0..3 of a quad, 32 values each; every lane of the quad gets it. mag:
// also the largest h16_mag of the row's values into *mag (every lane of the quad).
[[maybe_unused]] __device__ __forceinline__ float bf_row_rnorm(const unsigned char *tile, int t, int q, int *mag = nullptr) {
    float ss = 0.0f;
    int mb = 0;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const uint4 u = *(const uint4 *)(tile + sw2(kC, t, 8 * (4 * q + e)));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const float2 x = bf_pair(w[f]);
            ss = fmaf(x.x, x.x, ss), ss = fmaf(x.y, x.y, ss);
            if (mag) mb = max(mb, max(h16_mag(x.x), h16_mag(x.y)));
        }
    }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (mag) {
        mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
        *mag = max(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
    }
    return rsqrtf(ss + 1e-6f);
}
// l2norm's 1 / |q_t| and 1 / |k_t| of a raw BF16 Q tile at qk and the K tile 16384 bytes on (kC rows of
// 128 values in sw2's layout) into sq and sk, by kNT threads: four a row
[[maybe_unused]] __device__ __forceinline__ void bf_norms(const unsigned char *qk, float *sq, float *sk) {
    const int tid = threadIdx.x, y = tid >> 2, t = y & (kC - 1);
    const float r = bf_row_rnorm(qk + (y >> 6) * 16384, t, tid & 3);
    if ((tid & 3) == 0) (y < kC ? sq : sk)[t] = r;
}
// A 16-byte unit of 8 BF16 values at p (in place) mapped pairwise by f (float2 -> float2) and written
// back as BF16 hi over it and lo at lo
template <typename F> __device__ __forceinline__ void bf_unit_split(unsigned char *p, unsigned char *lo, F f) {
    const uint4 q = *(const uint4 *)p;
    const uint32_t x[4] = {q.x, q.y, q.z, q.w};
    uint32_t h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = f(bf_pair(x[i]));
        bf_split(v.x, v.y, h[i], l[i]);
    }
    *(uint4 *)p = make_uint4(h[0], h[1], h[2], h[3]);
    *(uint4 *)lo = make_uint4(l[0], l[1], l[2], l[3]);
}
// GATED_DELTA's A = beta_t K_t.K_s d(t, s) / |k_t| |k_s| (s < t, else 0) as F32 rows (stride kPS) from
// a K K^T accumulator tile (64 x 16: this warpgroup's columns 16 wg ..; rows r0 = 16 wq + g and
// r0 + 8, columns 8 (r >> 2) + c2 + (r & 1))
[[maybe_unused]] __device__ __forceinline__ void a_rows(const float (&acc)[8], float *sAm, int r0, int s0, const float *sB,
                                                        const float *sNk, const float *sL, const float *sSg, const int *sZ,
                                                        const float *sEp, const float *sEm, bool tab) {
#pragma unroll
    for (int r = 0; r < 8; r += 2) {
        const int t = r0 + 8 * ((r >> 1) & 1), s = s0 + 8 * (r >> 2);
        const float bt = sB[t] * sNk[t];
        const float a0 = s < t ? bt * acc[r] * sNk[s] * decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s) : 0.0f;
        const float a1 = s + 1 < t ? bt * acc[r + 1] * sNk[s + 1] * decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s + 1) : 0.0f;
        *(float2 *)&sAm[t * kPS + s] = make_float2(a0, a1);
    }
}
// P = Q K^T (.) d(t, s) / |q_t| |k_s| at (t, s) from its Q K^T accumulator x (nq: 1 / |q_t|), 0 past the
// diagonal (s > t): the BF16 output kernel's and, where the state pass makes the output, the prep's
[[maybe_unused]] __device__ __forceinline__ float p_entry(float x, int t, int s, float nq, const float *sNk, const float *sL,
                                                          const float *sSg, const int *sZ, const float *sEp,
                                                          const float *sEm, bool tab) {
    return s <= t ? x * decay_ts(sL, sSg, sZ, sEp, sEm, tab, t, s) * sNk[s] * nq : 0.0f;
}
// T = (I + A)^-1's F32 rows (lower triangle and diagonal: the doubling leaves partial sums above) as
// hi and lo K-major BF16 tiles (64 x 64), by kNT threads
// ... one thread's four values of such a tile's row t, columns s0 .. s0 + 3 (s0 a multiple of 4)
[[maybe_unused]] __device__ __forceinline__ void tile_hl4(unsigned char *th, unsigned char *tl, int t, int s0, const float (&e)[4]) {
    uint32_t hi[2], lo[2];
    bf_split(e[0], e[1], hi[0], lo[0]);
    bf_split(e[2], e[3], hi[1], lo[1]);
    *(uint2 *)(th + sw2(kC, t, s0)) = make_uint2(hi[0], hi[1]);
    *(uint2 *)(tl + sw2(kC, t, s0)) = make_uint2(lo[0], lo[1]);
}
[[maybe_unused]] __device__ __forceinline__ void t_tiles(const float *sTm, unsigned char *th, unsigned char *tl) {
#pragma unroll
    for (int m = 0; m < kC * kC / 4 / kNT; m++) {
        const int u = threadIdx.x + kNT * m, t = u >> 4, s0 = (u & 15) * 4;
        const float4 x = *(const float4 *)&sTm[t * kPS + s0];
        tile_hl4(th, tl, t, s0, {s0 <= t ? x.x : 0.0f, s0 + 1 <= t ? x.y : 0.0f, s0 + 2 <= t ? x.z : 0.0f, s0 + 3 <= t ? x.w : 0.0f});
    }
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Pins accumulator registers at this point of the program: the compiler moves no read or write of
// them into the span between wg_fence and wg_wait0 (a non-wgmma access there serializes every
// wgmma of the span).
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i]));
}
// this thread's shared-memory writes visible to the async proxy (wgmma), before the barrier
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The products' k steps, each product's in one asm block so that no other instruction sits between
// its wgmmas (accumulator copies there made ptxas serialize them all). A chain starts at the
// descriptors of k 0 (operands N and N + 1 after the accumulators) and steps both by a k step's
// offset in 16-byte units: 2 (32 bytes) within a block of 32 columns, to the next block ROWS * 128
// bytes less the 96 already stepped (506 for a 64-row tile, 1018 for 128 rows). FIRST 0: the first
// wgmma overwrites D (D = A B^T), 1: every wgmma accumulates.
#define TG_ACC8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define TG_ACC16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define TG_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
__device__ __forceinline__ void cp16(uint32_t dst, const char *src, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// cp.async of unit u's gate arrays (delta_gates_kernel's: kGateWords words at G + u kGateWords, 129
// 16-byte units) to shared address dst, by the block's first 129 threads
__device__ __forceinline__ void cp_gates(uint32_t dst, const float *G, long long u) {
    if (threadIdx.x < kGateWords / 4) cp16(dst + 16 * threadIdx.x, (const char *)(G + u * kGateWords) + 16 * threadIdx.x, 16u);
}
// cp.async of a raw 64 x 128 16-bit tile (n rows from x, row stride st bytes; the rest zero-filled)
// into a swizzled tile at shared address d: two 16-byte units per thread of kNT
__device__ __forceinline__ void cp_tile(uint32_t d, const char *x, long long st, int n) {
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int y = threadIdx.x + kNT * m, t = y >> 4, cu = y & 15, tt = t < n ? t : 0;
        cp16(d + sw2(kC, t, 8 * cu), x + tt * st + 16 * cu, t < n ? 16u : 0u);
    }
}
// ... two of them (x0 into d0, x1 into d1)
__device__ __forceinline__ void cp_tiles2(uint32_t d0, const char *x0, long long st0, uint32_t d1, const char *x1,
                                          long long st1, int n) {
    cp_tile(d0, x0, st0, n);
    cp_tile(d1, x1, st1, n);
}
__device__ __forceinline__ void cp_wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// BF16 chains: as the TF32 ones, k16 steps (32 bytes along a K-major row; 2048 bytes, two 8-row
// groups, down an MN-major tile), TA / TB the operands' majors (0 K-major, 1 MN-major)
#define TG_WB(SHAPE, ACC, TA, TB) "wgmma.mma_async.sync.aligned." SHAPE ".f32.bf16.bf16 " ACC ", da, db, p, 1, 1, " #TA ", " #TB ";\n"
#define TG_WB_HEAD(SHAPE, ACC, IA, IB, FIRST, TA, TB) \
    "{\n.reg .b64 da, db;\n.reg .pred p;\nmov.b64 da, %" #IA ";\nmov.b64 db, %" #IB ";\nsetp.ne.b32 p, " #FIRST ", 0;\n" TG_WB(SHAPE, ACC, TA, TB)
#define TG_WB_STEP(SHAPE, ACC, JA, JB, TA, TB) \
    "add.s64 da, da, " #JA ";\nadd.s64 db, db, " #JB ";\nsetp.ne.b32 p, 1, 0;\n" TG_WB(SHAPE, ACC, TA, TB)
#define TG_WB_3(SHAPE, ACC, JA, JB, TA, TB) \
    TG_WB_STEP(SHAPE, ACC, JA, JB, TA, TB) TG_WB_STEP(SHAPE, ACC, JA, JB, TA, TB) TG_WB_STEP(SHAPE, ACC, JA, JB, TA, TB)
#define TG_OUT8(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define TG_OUT16(d) TG_OUT8(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define TG_OUT32(d) TG_OUT16(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
    "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// Q (K-major, 64 rows) times a B 128 deep into a 64 x 32 tile (FIRST 0: overwrites D): B steps JB
// (16-byte units) a k step and JB2 where Q moves to its second block of 64 columns, TB B's major
#define TG_WB_Q128(FIRST, JB, JB2, TB) \
    asm volatile(TG_WB_HEAD("m64n32k16", TG_ACC16, 16, 17, FIRST, 0, TB) TG_WB_3("m64n32k16", TG_ACC16, 2, JB, 0, TB) \
                 TG_WB_STEP("m64n32k16", TG_ACC16, 506, JB2, 0, TB) TG_WB_3("m64n32k16", TG_ACC16, 2, JB, 0, TB) "}\n" \
                 : TG_OUT16(d) : "l"(da), "l"(db))
// Q K^T: 64 x 16, k over 128 (Q and K K-major, 64 rows: the second block of 64 columns 8192 bytes on)
__device__ __forceinline__ void wgb_qk(float (&d)[8], uint64_t da, uint64_t db) {
    asm volatile(TG_WB_HEAD("m64n16k16", TG_ACC8, 8, 9, 0, 0, 0) TG_WB_3("m64n16k16", TG_ACC8, 2, 2, 0, 0)
                 TG_WB_STEP("m64n16k16", TG_ACC8, 506, 506, 0, 0) TG_WB_3("m64n16k16", TG_ACC8, 2, 2, 0, 0) "}\n"
                 : TG_OUT8(d) : "l"(da), "l"(db));
}
// O += P V: 64 x 32, k over the chunk's 64 tokens (P K-major, V MN-major)
__device__ __forceinline__ void wgb_pv(float (&d)[16], uint64_t da, uint64_t db) {
    asm volatile(TG_WB_HEAD("m64n32k16", TG_ACC16, 16, 17, 1, 0, 1) TG_WB_3("m64n32k16", TG_ACC16, 2, 128, 0, 1) "}\n"
                 : TG_OUT16(d) : "l"(da), "l"(db));
}
#endif

#ifdef __CUDACC__  // (the launch syntax needs nvcc: scripts/wgmma_emu compiles this header with g++)
// One sm_90a kernel's launch (512 threads a block, smem bytes of dynamic shared memory, its limit
// raised first: set is its slot of delta_smem_set); the caller checks the launch
template <typename K>
inline tg_status wg_launch(tg_backend *be, K kernel, size_t smem, size_t &set, const chunk_args &a, unsigned grid) {
    if (const tg_status s = smem_limit(be, kernel, smem, set, "delta_rule"); s != TG_OK) return s;
    kernel<<<grid, kNT, smem, tg_cuda(be)->stream>>>(a);
    return TG_OK;
}
#endif

// O's rows row0 and row0 + 8 of the chunk at token t0 (those < n; obase: token 0 of the slice)
// from a 64 x 32 accumulator tile: columns col0 + 8 n8 (n8 < 4) and the next, two per store
template <class A>
__device__ __forceinline__ void store_o(const A &a, char *obase, long long t0, int n, int row0, int col0,
                                        const float (&acc)[16]) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int t = row0 + 8 * hh;
        if (t >= n) continue;
        char *const p = obase + (t0 + t) * a.o.nb[2] + col0 * a.o.nb[0];
        if (a.o.type == TG_TYPE_F32 && a.o_pair) {
#pragma unroll
            for (int n8 = 0; n8 < 4; n8++)
                *(float2 *)(p + 32 * n8) = make_float2(a.scale * acc[4 * n8 + 2 * hh], a.scale * acc[4 * n8 + 2 * hh + 1]);
        } else {
#pragma unroll
            for (int n8 = 0; n8 < 4; n8++)
                store_pair(p + 8 * n8 * a.o.nb[0], a.o.nb[0], a.o.type, a.scale * acc[4 * n8 + 2 * hh],
                           a.scale * acc[4 * n8 + 2 * hh + 1], true, a.o_pair);
        }
    }
}

}  // namespace
