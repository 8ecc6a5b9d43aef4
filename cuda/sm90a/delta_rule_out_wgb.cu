// delta_rule_out_wgb.cu - the chunk-parallel form's output kernel (phase 3 of
// cuda/delta_rule_chunked_phases.cu) with BF16 q and k at Dk = Dv = 128 on Hopper's BF16 warpgroup
// tensor cores (wgmma m64nNk16, sm_90a): delta_out_wgb_kernel. run_phases takes it where the prep
// and output kernels' full instances run (docs/ops.md). One block of 512 threads (four
// warpgroups) per (chunk, value head, sequence) unit:
//   O = scale (d(t, -1) Q S_c / |q_t| + (Q K^T (.) d(t, s) / |q_t| |k_s|, s <= t) V')
// (the 1 / |.| factors only with l2norm). Q's and K's raw rows are copied into swizzled K-major
// tiles by cp.async; S_c (the state before the chunk, F32 rows [i][j] in the scratch) and V'
// (F32 rows [t][j]) are written as BF16 hi and lo MN-major tiles (value columns along N), so that
// every product runs on BF16 wgmma with F32 accumulators and near-F32 operands, as in
// delta_wgb_kernel: Q S_c = Q S_hi + Q S_lo, P V' = P_hi V_hi + P_lo V_hi + P_hi V_lo (the lo x lo
// term dropped). Warpgroup wg makes P's token columns 16 wg .. (Q K^T, m64n16) and O's value
// columns 32 wg .. (m64n32). Where delta_out_kernel rounds Q, K, S_c, P and V' to TF32, this
// kernel's only roundings past the F32 accumulators are the dropped lo x lo terms (~2^-16).
#include "wgmma.cuh"
#include "../delta_rule_phases.cuh"

namespace {

// shared memory (bytes past the 1024-aligned base): Q and K (64 rows x 128, two blocks of 64
// columns each), S_c hi and lo (128 rows i x 128 columns j, two blocks by j), V' hi and lo (64
// rows t x 128 j), P hi and lo (64 x 64), then the gate arrays (delta_gates_kernel's, copied) and
// 1 / |q_t|, 1 / |k_t|
constexpr int oQ = 0, oK = 16384, oSh = 32768, oSl = 65536, oVh = 98304, oVl = 114688, oPh = 131072, oPl = 139264;
constexpr int oF = 147456;
constexpr size_t kSmemO = oF + (8 * kC + 4) * 4 + 2 * kC * 4 + 1024;  // + the alignment slack

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Q S_c_hi (overwrites) or + Q S_c_lo: 64 x 32, k over the 128 key dims (S_c MN-major, 128 rows:
// 2048 bytes a k step)
__device__ __forceinline__ void wgb_qsc0(float (&d)[16], uint64_t da, uint64_t db) { TG_WB_Q128(0, 128, 128, 1); }
__device__ __forceinline__ void wgb_qsc1(float (&d)[16], uint64_t da, uint64_t db) { TG_WB_Q128(1, 128, 128, 1); }
#endif

// F32 rows (row stride 128 floats) of `rows` rows into hi and lo MN-major tiles of that many rows
// (sw2's layout: block j >> 6, 128-byte rows), 4 values per item, items tid, tid + kNT, ...
template <int ROWS> __device__ __forceinline__ void split_rows(unsigned char *hi, unsigned char *lo, const float *src) {
#pragma unroll
    for (int m = 0; m < ROWS * 32 / kNT; m++) {
        const int x = threadIdx.x + kNT * m, r = x >> 5, j = 4 * (x & 31);
        const float4 v = __ldg((const float4 *)(src + r * 128 + j));
        uint32_t h[2], l[2];
        bf_split(v.x, v.y, h[0], l[0]);
        bf_split(v.z, v.w, h[1], l[1]);
        const int off = sw2(ROWS, r, j);
        *(uint2 *)(hi + off) = make_uint2(h[0], h[1]);
        *(uint2 *)(lo + off) = make_uint2(l[0], l[1]);
    }
}

__global__ void __launch_bounds__(kNT, 1) delta_out_wgb_kernel(const phase_args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 osm4[];
    unsigned char *sm = (unsigned char *)osm4 + ((1024u - (smem_u32(osm4) & 1023u)) & 1023u);
    const uint32_t sb = smem_u32(sm);
    float *sL = (float *)(sm + oF), *sSg = sL + kC, *sB = sSg + kC, *sD0 = sB + kC, *sDl = sD0 + kC;
    float *sEp = sDl + kC, *sEm = sEp + kC;
    int *sZ = (int *)(sEm + kC), *sTab = sZ + kC;
    float *sNq = (float *)(sTab + 4), *sNk = sNq + kC;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = wg_uniform(), wq = warp & 3;
    const phase_unit pu = unit_of(a, blockIdx.x);
    const int h = pu.h, b = pu.b, hk = pu.hk, n = pu.n;
    const long long t0 = pu.t0, u = pu.u;
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    auto arow = [&](int r) { return 16 * wq + g + 8 * ((r >> 1) & 1); };
    auto acol = [&](int r) { return 8 * (r >> 2) + c2 + (r & 1); };

    // Q and K rows (n of them, the rest zero-filled): two 16-byte units of each per thread
    {
        cp_tiles2(sb + oQ, tg_cuda_ptr(a.q, 0, hk, t0, b), a.q.nb[2], sb + oK, tg_cuda_ptr(a.k, 0, hk, t0, b), a.k.nb[2], n);
        cp_gates(sb + oF, a.G, u);  // the chunk's gate arrays and flags (delta_gates_kernel's)
        cp_commit();
    }
    // S_c and V' as hi and lo tiles
    split_rows<128>(sm + oSh, sm + oSl, a.S + u * 128 * 128);
    split_rows<64>(sm + oVh, sm + oVl, a.U + u * kC * 128);
    if (!a.l2norm && tid < kC) sNq[tid] = 1.0f, sNk[tid] = 1.0f;
    cp_wait0();
    proxy_fence();
    __syncthreads();

    // Q K^T (token columns 16 wg ..) and Q S_c (value columns 32 wg ..)
    const uint64_t dQ = sdesc(sb + oQ), dK = sdesc(sb + oK + 16 * wg * 128);
    const uint64_t dSh = sdesc(sb + oSh + (wg >> 1) * 16384 + (wg & 1) * 64), dVh = sdesc(sb + oVh + (wg >> 1) * 8192 + (wg & 1) * 64);
    const uint64_t dPh = sdesc(sb + oPh);
    constexpr uint64_t kSl = (oSl - oSh) / 16, kVl = (oVl - oVh) / 16, kPl = (oPl - oPh) / 16;
    float accO[16], accP[8];
    pin(accO), pin(accP);
    wg_fence();
    wgb_qk(accP, dQ, dK);
    wgb_qsc0(accO, dQ, dSh);
    wgb_qsc1(accO, dQ, dSh + kSl);
    wg_commit();
    // l2norm: 1 / |q_t|, 1 / |k_t| while they run
    if (a.l2norm) {
        bf_norms(sm, sNq, sNk);
        __syncthreads();
    }
    wg_wait0();
    pin(accO), pin(accP);
    const int flags = *sTab;
    const bool tab = flags & 1;
    // P = Q K^T (.) d(t, s) / |q_t| |k_s| (s <= t) as hi and lo
#pragma unroll
    for (int r = 0; r < 8; r += 2) {
        const int t = arow(r), s = 16 * wg + acol(r);
        const float nq = sNq[t];
        float p[2];
#pragma unroll
        for (int e = 0; e < 2; e++)
            p[e] = p_entry(accP[r + e], t, s + e, nq, sNk, sL, sSg, sZ, sEp, sEm, tab);
        uint32_t hi, lo;
        bf_split(p[0], p[1], hi, lo);
        *(uint32_t *)(sm + oPh + sw2(kC, t, s)) = hi, *(uint32_t *)(sm + oPl + sw2(kC, t, s)) = lo;
    }
    // Q S_c times d(t, -1) / |q_t| (an exact zero stays zero where a decay overflows)
    qs_rows(accO, sD0, sNq, arow(0), flags & 2);
    proxy_fence();
    __syncthreads();  // P's tiles complete
    pin(accO);
    wg_fence();
    wgb_pv(accO, dPh, dVh);
    wgb_pv(accO, dPh + kPl, dVh);
    wgb_pv(accO, dPh, dVh + kVl);
    wg_commit();
    wg_wait0();
    pin(accO);
    store_o(a, tg_cuda_ptr(a.o, 0, h, 0, b), t0, n, arow(0), 32 * wg + c2, accO);
#endif
}

}  // namespace

namespace tg_chunk {

size_t tg_cuda_delta_out_wgb_smem() { return TG_WGMMA ? kSmemO : 0; }

tg_status tg_cuda_delta_out_wgb_limit(tg_backend *be) {
    static_assert(tg_cuda_impl::TG_CUDA_DSMEM_WG + 4 < tg_cuda_impl::TG_CUDA_DSMEM_COUNT, "the output kernel's slot");
    return smem_limit(be, delta_out_wgb_kernel, kSmemO, tg_cuda(be)->delta_smem_set[tg_cuda_impl::TG_CUDA_DSMEM_WG + 4],
                      "delta_rule");
}

void tg_cuda_delta_out_wgb_launch(tg_backend *be, const phase_args &a, unsigned grid) {
    delta_out_wgb_kernel<<<grid, kNT, kSmemO, tg_cuda(be)->stream>>>(a);
}

}  // namespace tg_chunk
