// attention_mma.cu - attention prefill on tensor cores (cuda/attention.cu
// dispatches; see there for the op).
//
// F16/BF16 caches of one type, D = Dv in {64, 128}, 16-byte-aligned rows, and
// at least 64 queries per kv head (group heads times tokens). A block of 4
// warps takes 64 query rows of one kv head (row f -> token f / group, head
// hk*group + f % group), 16 per warp, and walks the cache in tiles of 64 rows
// up to the largest n = min(p + 1, L) among its rows (causal by positions),
// two K/V tile buffers in dynamic shared memory (69.6 KB at D 128): the next
// tile's rows go in by cp.async while the current tile is multiplied:
//   S = Q K^T     mma.sync m16n8k16, Q rounded once to the cache's type and
//                 kept as A fragments; K rows from shared memory (ldmatrix)
//   softmax       online, per row, in F32 (exp of S * scale - running max);
//                 rows past a query's n are masked, p < 0 leaves no row
//   O += P V      P rounded to the cache's type straight from the S
//                 accumulators (FlashAttention-2's register reuse), V from
//                 shared memory (ldmatrix.trans); F32 accumulation
// This is attention's 16-bit tier: Q and P rounded to 16 bits (docs/ops.md).
#include <climits>

#include "attention.cuh"
#include "ops.h"

namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kQRows = 16 * kWarps, kKRows = 64;

template <typename T> __device__ inline uint32_t pack2(float a, float b);
template <> __device__ inline uint32_t pack2<__half>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}
template <> __device__ inline uint32_t pack2<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}

template <typename T> __device__ inline void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> __device__ inline void mma<__half>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ inline void mma<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ inline void ldsm_x4(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ inline void ldsm_x4_t(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

struct mma_args {
    tg_cuda_desc q, k, v, pos, out;
    float scale;
    int group, nqc, hkv;  // Hq / Hkv; query chunks of kQRows per kv head; Hkv
};

// Shared memory: K and V tiles, two of each (the next tile's copies run while
// the current one is multiplied), rows of D + 8 elements (16-byte pad: no
// bank conflicts in ldmatrix).
template <typename T, int D> constexpr size_t mma_smem() { return (size_t)4 * kKRows * (D + 8) * sizeof(T); }

// grid: x over query chunks * Hkv, the chunks with the latest queries (the
// most keys, causally) first so that the long blocks do not trail; y over
// sequences.
template <typename T, int D> __global__ void __launch_bounds__(kThreads) mma_kernel(mma_args A) {
    constexpr int LD = D + 8;  // shared row length in elements
    constexpr int KS = D / 16, NT = D / 8;
    extern __shared__ __align__(16) unsigned char mma_sm[];
    T *const tiles = (T *)mma_sm;  // [2 buffers][K, V][kKRows * LD]
    __shared__ int nrow[kQRows];
    const long long Tn = A.q.ne[2], L = A.k.ne[2];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = (lane % 4) * 2;
    const int qc = A.nqc - 1 - (int)(blockIdx.x / A.hkv);
    const long long hk = blockIdx.x % A.hkv, b = blockIdx.y;
    const long long nflat = (long long)A.group * Tn, f0 = (long long)qc * kQRows;

    if (tid < kQRows) {
        const long long f = f0 + tid;
        int n = 0;
        if (f < nflat) {
            const int p = *(const int *)tg_cuda_ptr(A.pos, f / A.group, b, 0, 0);
            n = p < 0 ? 0 : ((long long)p < L ? p + 1 : (int)L);
        }
        nrow[tid] = n;
    }
    // this warp's rows r0 = g and r1 = g + 8 (of its 16), as flat query indices
    const long long fr[2] = {f0 + warp * 16 + g, f0 + warp * 16 + g + 8};
    uint32_t qa[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const long long f = fr[i] < nflat ? fr[i] : nflat - 1;
        const char *qr = tg_cuda_ptr(A.q, 0, hk * A.group + f % A.group, f / A.group, b);
#pragma unroll
        for (int ks_ = 0; ks_ < KS; ks_++) {
            const int d = ks_ * 16 + c;
            const float x0 = *(const float *)(qr + d * A.q.nb[0]), x1 = *(const float *)(qr + (d + 1) * A.q.nb[0]);
            const float x8 = *(const float *)(qr + (d + 8) * A.q.nb[0]), x9 = *(const float *)(qr + (d + 9) * A.q.nb[0]);
            qa[ks_][i] = pack2<T>(x0, x1);
            qa[ks_][2 + i] = pack2<T>(x8, x9);
        }
    }
    __syncthreads();
    int nmax = 0;
    for (int i = 0; i < kQRows; i++) nmax = max(nmax, nrow[i]);
    const int n0 = nrow[warp * 16 + g], n1 = nrow[warp * 16 + g + 8];

    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this thread's part of the row sum

    // stage the K and V tiles of rows [j0, j0 + kKRows) into buffer buf: rows
    // past nmax are zeros (and masked); their source is row 0, not read
    auto stage = [&](long long j0, int buf) {
        constexpr int CH = D / 8;  // 16-byte chunks per row
        T *ks = tiles + (size_t)buf * 2 * kKRows * LD, *vs = ks + kKRows * LD;
        for (int i = tid; i < kKRows * CH; i += kThreads) {
            const int r = i / CH, ch = i % CH;
            const bool in = j0 + r < nmax;
            const long long row = in ? j0 + r : 0;
            tg_cp_async16(&ks[r * LD + ch * 8], (const uint4 *)(tg_cuda_ptr(A.k, 0, hk, row, b)) + ch, in ? 16 : 0);
            tg_cp_async16(&vs[r * LD + ch * 8], (const uint4 *)(tg_cuda_ptr(A.v, 0, hk, row, b)) + ch, in ? 16 : 0);
        }
    };
    if (nmax > 0) stage(0, 0);
    tg_cp_async_commit();
    int buf = 0;
    for (long long j0 = 0; j0 < nmax; j0 += kKRows, buf ^= 1) {
        // the next tile's copies (into the buffer the tile before used: every
        // warp passed the barrier at that tile's end), then wait for this one's
        if (j0 + kKRows < nmax) stage(j0 + kKRows, buf ^ 1);
        tg_cp_async_commit();
        tg_cp_async_wait<1>();
        __syncthreads();
        const T *ks = tiles + (size_t)buf * 2 * kKRows * LD, *vs = ks + kKRows * LD;
        // S = Q K^T: 16 rows x 64 keys per warp
        float s[kKRows / 8][4];
#pragma unroll
        for (int j = 0; j < kKRows / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int ks_ = 0; ks_ < KS; ks_++)
#pragma unroll
            for (int j = 0; j < kKRows / 8; j += 2) {
                uint32_t bk[4];
                ldsm_x4(bk, &ks[(j * 8 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks_ * 16 + ((lane >> 3) & 1) * 8]);
                mma<T>(s[j], qa[ks_], bk[0], bk[1]);
                mma<T>(s[j + 1], qa[ks_], bk[2], bk[3]);
            }
        // online softmax over the tile, rows g (i = 0) and g + 8 (i = 1)
        float corr[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int n = i ? n1 : n0;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < kKRows / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const long long key = j0 + j * 8 + c + e;
                    float &x = s[j][2 * i + e];
                    x = key < n ? x * A.scale : -INFINITY;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[i], mx);
            corr[i] = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
            float ls = 0.0f;
#pragma unroll
            for (int j = 0; j < kKRows / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &x = s[j][2 * i + e];
                    x = x == -INFINITY ? 0.0f : expf(x - m_new);
                    ls += x;
                }
            l[i] = l[i] * corr[i] + ls;
            m[i] = m_new;
        }
#pragma unroll
        for (int j = 0; j < NT; j++) o[j][0] *= corr[0], o[j][1] *= corr[0], o[j][2] *= corr[1], o[j][3] *= corr[1];
        // O += P V
#pragma unroll
        for (int kk = 0; kk < kKRows / 16; kk++) {
            uint32_t pa[4];
            pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                uint32_t bv[4];
                ldsm_x4_t(bv, &vs[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + j * 8 + (lane >> 4) * 8]);
                mma<T>(o[j], pa, bv[0], bv[1]);
                mma<T>(o[j + 1], pa, bv[2], bv[3]);
            }
        }
        __syncthreads();  // this buffer is refilled by the next tile's copies
    }
    // row sums over the 4 lanes of a row, then the output
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        if (fr[i] >= nflat) continue;
        const long long f = fr[i];
        const float inv = (i ? n1 : n0) > 0 ? 1.0f / l[i] : 0.0f;  // rows: o / l whatever l is (NaN stays)
        char *orow = tg_cuda_ptr(A.out, 0, hk * A.group + f % A.group, f / A.group, b);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            *(float *)(orow + (j * 8 + c) * A.out.nb[0]) = o[j][2 * i] * inv;
            *(float *)(orow + (j * 8 + c + 1) * A.out.nb[0]) = o[j][2 * i + 1] * inv;
        }
    }
}

bool rows16(const tg_tensor *t) {
    if (t->nb[0] != tg_type_size(t->type) || (uintptr_t)t->data % 16 != 0) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % 16 != 0) return false;
    return true;
}

template <typename T, int D> cudaError_t allow_smem() {
    constexpr size_t smem = mma_smem<T, D>();
    if (smem <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename T, int D> tg_status launch(tg_backend *be, const mma_args &A, dim3 grid) {
    mma_kernel<T, D><<<grid, kThreads, mma_smem<T, D>(), tg_cuda(be)->stream>>>(A);
    TG_CUDA_LAUNCHED(be, "attention");
    return TG_OK;
}

}  // namespace

// The kernels' shared memory above the 48 KB default (D 128: 69.6 KB), allowed
// once per backend on its device, when it is created (not while capturing).
cudaError_t tg_cuda_attention_mma_init() {
    cudaError_t e = allow_smem<__half, 64>();
    if (e == cudaSuccess) e = allow_smem<__half, 128>();
    if (e == cudaSuccess) e = allow_smem<__nv_bfloat16, 64>();
    if (e == cudaSuccess) e = allow_smem<__nv_bfloat16, 128>();
    return e;
}

bool tg_cuda_attention_mma(tg_backend *be, const tg_tensor *dst, tg_status *st, bool dry) {
    const tg_tensor *tq = dst->src[0], *tk = dst->src[1], *tv = dst->src[2], *tp = dst->src[3];
    if (tk->type != tv->type || (tk->type != TG_TYPE_F16 && tk->type != TG_TYPE_BF16)) return false;
    if (!rows16(tk) || !rows16(tv)) return false;
    const long long D = tq->ne[0], Hq = tq->ne[1], T = tq->ne[2], B = tq->ne[3], Hkv = tk->ne[1], L = tk->ne[2];
    if (tv->ne[0] != D || (D != 64 && D != 128) || L > INT_MAX) return false;
    const long long group = Hq / Hkv, nflat = group * T;
    if (nflat < kQRows) return false;
    const long long nqc = (nflat + kQRows - 1) / kQRows;
    if (nqc * Hkv > INT_MAX || B > 65535 || group > INT_MAX) return false;
    if (dry) return true;
    mma_args A;
    A.q = tg_cuda_desc_of(tq), A.k = tg_cuda_desc_of(tk), A.v = tg_cuda_desc_of(tv), A.pos = tg_cuda_desc_of(tp);
    A.out = tg_cuda_desc_of(dst);
    A.scale = tg_get_params<float>(dst);
    A.group = (int)group, A.nqc = (int)nqc, A.hkv = (int)Hkv;
    const dim3 grid((unsigned)(nqc * Hkv), (unsigned)B);
    if (tk->type == TG_TYPE_F16)
        *st = D == 64 ? launch<__half, 64>(be, A, grid) : launch<__half, 128>(be, A, grid);
    else
        *st = D == 64 ? launch<__nv_bfloat16, 64>(be, A, grid) : launch<__nv_bfloat16, 128>(be, A, grid);
    return true;
}
