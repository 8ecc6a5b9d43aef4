// rope.cu - CUDA kernels of the rope family (ggml_ops/rope.cpp is the
// reference). Three levels, as in the rest of cuda/:
//   rope_rows_kernel<VEC, KIND>  one block per (token, slice of its H*D values):
//       KIND_ROPE      rotates a[:, :, t, b] into dst[:, :, t, b]
//       KIND_KV        rotates k_new[:, :, t, b] into K row p and copies
//                      v_new[:, :, t, b] into V row p: both caches, one launch
//       KIND_KV_FUSED  the same, after every block has checked all B*T
//                      positions itself (decode-sized calls: one launch total)
//   kv_validate_kernel  range + pairwise repeat check of the positions, run
//       before KIND_KV when B*T or T is too large to fuse
//   -> launch_rows -> tg_cuda_rope / tg_cuda_rope_kv_update
//
// Bad positions are reported through the backend's device error record
// (tg_cuda_report); the write kernel looks at the record first and writes
// nothing when any report is there, so a failed update leaves both caches
// bit-identical. VEC=4 moves 16-byte vectors (k_new/v_new F32 rows, cache rows
// of 4 elements) when every pointer and stride allows it; VEC=1 is the
// any-stride fallback (RELIABILITY 17). Rotations use explicitly rounded
// products (no FMA contraction), as the CPU reference does, so that with
// tables the results are bit-identical to the CPU's.
#include <climits>
#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "ops.h"
#include "signature.cuh"


namespace {

constexpr int kThreads = 256;          // largest block of the row kernel
constexpr int kRounds = 4;             // chunks per thread per tensor, at most (NEOX: 2, its
                                       // partner values need registers too)
constexpr int kFusedMaxTokens = 1024;  // B*T positions a block may check itself
constexpr int kFusedMaxT = 32;         // ... with at most T*(T-1)/2 pairs per sequence
constexpr int kValTile = 256;          // validation: tokens per block, and per compared segment
constexpr int kMaxSmem = 48 * 1024;

enum { KIND_ROPE = 0, KIND_KV = 1, KIND_KV_FUSED = 2 };

struct rope_args {
    tg_cuda_desc x, xv;   // k_new (rope: a), v_new
    tg_cuda_desc y, yv;   // K cache (rope: dst), V cache
    tg_cuda_desc pos;     // {T, B} I32
    tg_cuda_desc cs, sn;  // {n_rot/2, Ltab} F32 tables; cs.data NULL: angles from base
    long long L, Ltab;    // cache rows, table rows
    int T, B;             // T*B < 2^31 (checked at launch)
    int n_rot, half, neox;
    double base;
    int cpr, N;       // chunks (of VEC values) per row; per token and tensor (H * cpr < 2^31)
    int rounds, bpt;  // chunks per thread per tensor (1, 2, 4); blocks per token
    bool pdl;         // launched by programmatic dependent launch (host side only)
};

template <int VEC> __device__ inline void load_vec(const char *p, float (&v)[VEC]) {
    if constexpr (VEC == 4) {
        const float4 q = __ldg((const float4 *)p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
        v[0] = __ldg((const float *)p);
    }
}

// 4 values to a cache row in its storage type; p is aligned to 4 elements.
__device__ inline void store4(char *p, tg_type type, const float (&y)[4]) {
    if (type == TG_TYPE_F32) {
        *(float4 *)p = make_float4(y[0], y[1], y[2], y[3]);
        return;
    }
    uint2 u;
    if (type == TG_TYPE_F16) {
        const __half2 lo = __floats2half2_rn(y[0], y[1]), hi = __floats2half2_rn(y[2], y[3]);
        memcpy(&u.x, &lo, 4);
        memcpy(&u.y, &hi, 4);
    } else {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(y[0], y[1]), hi = __floats2bfloat162_rn(y[2], y[3]);
        memcpy(&u.x, &lo, 4);
        memcpy(&u.y, &hi, 4);
    }
    *(uint2 *)p = u;
}
template <int VEC> __device__ inline void store_vec(char *p, tg_type type, const float (&y)[VEC]) {
    if constexpr (VEC == 4)
        store4(p, type, y);
    else
        tg_cuda_store(p, type, y[0]);
}

template <bool NEOX> __device__ inline int partner_of(int d, const rope_args &a) {
    return NEOX ? (d < a.half ? d + a.half : d - a.half) : (d ^ 1);
}

__device__ inline int load_pos(const tg_cuda_desc &pos, int t, int b) {
    return *(const int *)tg_cuda_ptr(pos, t, b, 0, 0);
}

// One block's work of a launch of a (blk: the block's index in that launch).
template <int VEC, int KIND, bool NEOX, int R>
__device__ __forceinline__ void rope_rows_block(const rope_args &a, const int blk, tg_cuda_err *err) {
    static_assert(R == 1 || R == 2 || (R == 4 && !NEOX), "chunks per thread (NEOX: at most 2)");
    extern __shared__ float sm[];  // cos[half], sin[half]
    float *sc = sm, *ss = sm + a.half;
    __shared__ int s_bad;  // (failure only) smallest flat index b*T+t of a bad position

    constexpr bool kv = KIND != KIND_ROPE;
    const int tid = threadIdx.x, nth = blockDim.x;
    const int tok = blk / a.bpt, part = blk % a.bpt;
    const int t = tok % a.T, b = tok / a.T;
    const long long nb0 = a.x.nb[0];

    // 0. the loads that gate writing start first: this token's position (the
    //    angle rows depend on it) and the error record of earlier kernels (read
    //    once here instead of after the first barrier: one memory latency less
    //    per block; reports of this launch come from its own fused check below)
    const int p = load_pos(a.pos, t, b);
    const int prior_err = kv && tid == 0 ? *(volatile const int *)&err->code : TG_CUDA_ERR_NONE;

    // 1. this thread's chunks of k_new / v_new (and NEOX partners): they do not
    //    depend on the position, so their latency overlaps what follows
    float x[R][VEC], xp[R][VEC], xv[R][VEC];
    const int c0 = part * a.rounds * nth + tid;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int c = c0 + r * nth;
        if (c < a.N) {
            const int h = c / a.cpr, d0 = (c - h * a.cpr) * VEC;
            const char *row = tg_cuda_ptr(a.x, 0, h, t, b);
            load_vec<VEC>(row + d0 * nb0, x[r]);
            if (VEC == 4 && NEOX && (a.half & 3) == 0) {
                if (d0 < a.n_rot) load_vec<VEC>(row + partner_of<NEOX>(d0, a) * nb0, xp[r]);
            } else if (VEC == 1 || NEOX) {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    if (d0 + e < a.n_rot) xp[r][e] = __ldg((const float *)(row + partner_of<NEOX>(d0 + e, a) * nb0));
            }
            if (kv) load_vec<VEC>(tg_cuda_ptr(a.xv, d0, h, t, b), xv[r]);
        }
    }

    // 2. (fused) this thread's share of the check of every position of the call,
    //    read from global memory (L1/L2; no staging barrier): position f against
    //    the range and the earlier tokens of its sequence (no early exit, so the
    //    loads pipeline); then the angle row
    const bool tables = a.cs.data != nullptr;
    int first_bad = INT_MAX;  // smallest flat index b*T+t of a bad position this thread saw
    if (KIND == KIND_KV_FUSED)
        for (int f = tid; f < a.T * a.B; f += nth) {
            const int tf = f % a.T, bf = f / a.T, pf = load_pos(a.pos, tf, bf);
            bool bad = pf < 0 || pf >= a.L || (tables && pf >= a.Ltab);
            for (int u = 0; u < tf; u++) bad |= load_pos(a.pos, u, bf) == pf;
            if (bad && first_bad == INT_MAX) first_bad = f;
        }
    for (int i = tid; i < a.half; i += nth) {
        float c, s;
        if (tables) {  // row clamped into the table: in bounds even before p is checked
            const long long pr = p < 0 ? 0 : (p >= a.Ltab ? a.Ltab - 1 : p);
            c = *(const float *)tg_cuda_ptr(a.cs, i, pr, 0, 0);
            s = *(const float *)tg_cuda_ptr(a.sn, i, pr, 0, 0);
        } else {
            tg_cuda_rope_angle(p, i, a.n_rot, a.base, &c, &s);
        }
        sc[i] = c;
        ss[i] = s;
    }
    if (!kv) {
        __syncthreads();
    } else if (__syncthreads_or(first_bad != INT_MAX || prior_err != TG_CUDA_ERR_NONE)) {
        // one barrier makes the angles visible and is the go/no-go: every block saw the same
        // positions, so either all write or none does. Nothing is written; block 0 reports the
        // first bad position of this launch (unless an earlier kernel reported already).
        if (KIND == KIND_KV_FUSED && blk == 0) {
            if (tid == 0) s_bad = INT_MAX;
            __syncthreads();
            if (first_bad != INT_MAX) atomicMin(&s_bad, first_bad);
            __syncthreads();
            const int bad = s_bad;
            if (tid == 0 && prior_err == TG_CUDA_ERR_NONE && bad != INT_MAX) {
                const int tf = bad % a.T, bf = bad / a.T, pf = load_pos(a.pos, tf, bf);
                if (pf < 0 || pf >= a.L)
                    tg_cuda_report(err, TG_CUDA_ERR_POSITION_RANGE, TG_OP_ROPE_KV_UPDATE, pf, a.L, bf, tf);
                else if (tables && pf >= a.Ltab)
                    tg_cuda_report(err, TG_CUDA_ERR_POSITION_RANGE, TG_OP_ROPE_KV_UPDATE, pf, a.Ltab, bf, tf);
                else
                    for (int u = 0; u < tf; u++)
                        if (load_pos(a.pos, u, bf) == pf) {
                            tg_cuda_report(err, TG_CUDA_ERR_POSITION_REPEAT, TG_OP_ROPE_KV_UPDATE, pf, bf, u, tf);
                            break;
                        }
            }
        }
        return;
    }

    // 3. rotate and store: K (rope: dst) row p (rope: t), V row p
    const long long row_out = kv ? (long long)p : (long long)t;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int c = c0 + r * nth;
        if (c < a.N) {
            const int h = c / a.cpr, d0 = (c - h * a.cpr) * VEC;
            float y[VEC];
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const int d = d0 + e;
                if (d < a.n_rot) {
                    const bool first = NEOX ? d < a.half : (d & 1) == 0;
                    const int i = NEOX ? (first ? d : d - a.half) : d >> 1;
                    const float o = (VEC == 4 && !NEOX) ? x[r][e ^ (VEC == 4 ? 1 : 0)] : xp[r][e];
                    const float cc = sc[i], s = ss[i];
                    // CPU: out[e] = x[e]*c - x[o]*s;  out[o] = x[e]*s + x[o]*c
                    y[e] = tg_cuda_rope_rotate(x[r][e], o, cc, s, first);
                } else {
                    y[e] = x[r][e];
                }
            }
            store_vec<VEC>(tg_cuda_ptr(a.y, d0, h, row_out, b), a.y.type, y);
            if (kv) store_vec<VEC>(tg_cuda_ptr(a.yv, d0, h, row_out, b), a.yv.type, xv[r]);
        }
    }
}

template <int VEC, int KIND, bool NEOX, int R, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) rope_rows_kernel(const rope_args a, tg_cuda_err *err) {
    tg_pdl_trigger();
    tg_pdl_wait();
    rope_rows_block<VEC, KIND, NEOX, R>(a, blockIdx.x, err);
}

// rope of q (blocks [0, qblocks), launch q) and rope_kv_update (the other
// blocks, launch a) in one grid: a decode step's pair at the same positions.
// Each block does what it would do in its own launch (the update's go/no-go
// is among the update's blocks only), so the results are the two launches'.
template <int VEC, int KIND, bool NEOX, int R, int MINB>
__global__ void __launch_bounds__(kThreads, MINB)
    rope_pair_kernel(const __grid_constant__ rope_args q, const __grid_constant__ rope_args a, int qblocks,
                     tg_cuda_err *err) {
    tg_pdl_trigger();
    tg_pdl_wait();
    if ((int)blockIdx.x < qblocks) rope_rows_block<VEC, KIND_ROPE, NEOX, R>(q, blockIdx.x, err);
    else rope_rows_block<VEC, KIND, NEOX, R>(a, blockIdx.x - qblocks, err);
}

// Grid: nt*nt*B blocks (token tile ti, segment si, sequence b), nt = ceil(T/256).
// Token t is bad when out of range, or when an earlier token t' < t of its
// sequence has the same position; tiles compare against earlier segments only.
__global__ void __launch_bounds__(kValTile)
    kv_validate_kernel(tg_cuda_desc pos, int T, long long L, long long Ltab, int nt, tg_cuda_err *err) {
    __shared__ __align__(16) int seg[kValTile];
    const int ti = blockIdx.x % nt, si = (blockIdx.x / nt) % nt, b = blockIdx.x / (nt * nt);
    if (si > ti) return;  // uniform per block: no earlier tokens there
    const int t = ti * kValTile + threadIdx.x, s0 = si * kValTile;
    const int p = t < T ? load_pos(pos, t, b) : 0;  // in flight together with the segment's load
    if (s0 + (int)threadIdx.x < T) seg[threadIdx.x] = load_pos(pos, s0 + threadIdx.x, b);
    __syncthreads();
    if (t >= T) return;
    if (si == 0) {
        if (p < 0 || p >= L) {
            tg_cuda_report(err, TG_CUDA_ERR_POSITION_RANGE, TG_OP_ROPE_KV_UPDATE, p, L, b, t);
            return;
        }
        if (Ltab >= 0 && p >= Ltab) {
            tg_cuda_report(err, TG_CUDA_ERR_POSITION_RANGE, TG_OP_ROPE_KV_UPDATE, p, Ltab, b, t);
            return;
        }
    }
    // repeat check against seg[0, n): 16-byte broadcast reads, no early exit, so that the
    // loads pipeline (one dependent shared load per compare made this kernel ~10 us at T 1024);
    // the first repeat is searched for only when there is one
    const int n = min(s0 + kValTile, t) - s0;
    const int4 *seg4 = (const int4 *)seg;
    bool hit = false;
#pragma unroll 8
    for (int u = 0; u < n; u += 4) {
        const int4 w = seg4[u >> 2];
        hit |= (w.x == p) | ((w.y == p) & (u + 1 < n)) | ((w.z == p) & (u + 2 < n)) | ((w.w == p) & (u + 3 < n));
    }
    if (hit)
        for (int u = 0; u < n; u++)
            if (seg[u] == p) {
                tg_cuda_report(err, TG_CUDA_ERR_POSITION_REPEAT, TG_OP_ROPE_KV_UPDATE, p, b, s0 + u, t);
                return;
            }
}

// Byte address and strides are multiples of the element size (else even a
// scalar access would fault: such views get a clean error instead).
bool elem_aligned(const tg_tensor *t) {
    const size_t es = tg_type_size(t->type);
    if ((uintptr_t)t->data % es) return false;
    for (int i = 0; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % es) return false;
    return true;
}
// Rows of 4-element vectors: unit inner stride, every row start 4-element aligned.
bool vec4_ok(const tg_tensor *t) {
    const size_t es = tg_type_size(t->type), al = 4 * es;
    if (t->nb[0] != es || (uintptr_t)t->data % al) return false;
    for (int i = 1; i < 4; i++)
        if (t->ne[i] > 1 && t->nb[i] % al) return false;
    return true;
}

// A launch of the row kernel (q == nullptr), or of the pair kernel: q's
// qblocks blocks first, then a's (VEC 4 only: decode-sized contiguous rows).
struct rows_launch {
    int kind;
    dim3 grid;
    int threads;
    size_t smem;
    cudaStream_t st;
    const rope_args *q;
    int qblocks;
};
template <int VEC, bool NEOX, int R, int MINB> void launch_r(const rows_launch &L, const rope_args &a, tg_cuda_err *e) {
    auto go = [&](auto k) {
        constexpr int K = decltype(k)::value;
        if constexpr (K != KIND_ROPE && VEC == 4)
            if (L.q) {
                tg_cuda_launch(a.pdl, L.st, rope_pair_kernel<VEC, K, NEOX, R, MINB>, L.grid, L.threads, L.smem, *L.q, a,
                               L.qblocks, e);
                return;
            }
        tg_cuda_launch(a.pdl, L.st, rope_rows_kernel<VEC, K, NEOX, R, MINB>, L.grid, L.threads, L.smem, a, e);
    };
    if (L.kind == KIND_ROPE) go(std::integral_constant<int, KIND_ROPE>());
    if (L.kind == KIND_KV) go(std::integral_constant<int, KIND_KV>());
    if (L.kind == KIND_KV_FUSED) go(std::integral_constant<int, KIND_KV_FUSED>());
}
// R (chunks per thread) and the register budget: 4 blocks of 256 per SM (R 4: 64 registers, 8 bytes
// of spill; 128 KB of loads in flight per SM). The R 4 kernel of v1 (76 registers, 3 blocks per SM)
// was 4% slower on kv.prefill and is no longer built (bench/NOTES.md, kv.prefill/mb3).
template <int VEC, bool NEOX> void launch_kind(const rows_launch &L, const rope_args &a, tg_cuda_err *e) {
    if (a.rounds == 1) launch_r<VEC, NEOX, 1, 4>(L, a, e);
    else if (NEOX || a.rounds == 2) launch_r<VEC, NEOX, 2, 4>(L, a, e);
    else launch_r<VEC, NEOX, NEOX ? 2 : 4, 4>(L, a, e);
}

// The launch shape of one rope / rope_kv_update, with a's fields filled in.
struct rows_plan {
    int kind = KIND_ROPE;
    bool vec = false, empty = false;
    bool validate = false;  // the separate validation kernel first
    int threads = 0;
    long long blocks = 0;
    size_t smem = 0;
};

// Shared host side: checks, variant choice, launch shape. ts[0, n_vec): the
// row tensors whose layout decides the vector path; ts[n_vec, n_ts): the
// others (positions, tables), which only need element alignment.
// pre: (rope_kv_update) the graph's pre-check pass has validated the
// positions already (tg_cuda_kv_prechecked): the write launch only reads the
// error record, with no check of its own. threads > 0: that block size
// (a pair launch shares one).
tg_status plan_rows(tg_backend *be, const char *call, bool kv, rope_args &a, const tg_tensor *const *ts, int n_vec,
                    int n_ts, int64_t D, int64_t H, int64_t T, int64_t B, const tg_rope_params &rp, bool pre,
                    int threads, rows_plan *pl) {
    tg_cuda_impl *cu = tg_cuda(be);
    *pl = rows_plan();
    if (T * B == 0 || D * H == 0) return (pl->empty = true), TG_OK;
    if (T * B > INT_MAX || D * H > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: T*B = %lld or D*H = %lld above 2^31-1", call,
                      (long long)(T * B), (long long)(D * H));
    bool vec = D % 4 == 0 && !cu->sig.rope_scalar;
    for (int i = 0; i < n_ts; i++) {
        if (!elem_aligned(ts[i]))
            return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: tensor '%s' is a view at an address or stride that is not "
                          "a multiple of its element size", call, ts[i]->name);
        if (i < n_vec) vec = vec && vec4_ok(ts[i]);
    }
    a.T = (int)T, a.B = (int)B;
    a.pdl = tg_cuda_pdl_for(cu, TG_CUDA_PDL_ROPE);
    a.n_rot = rp.n_rot, a.half = rp.n_rot / 2, a.neox = rp.mode == TG_ROPE_NEOX;
    a.base = (double)rp.base;
    const int VEC = vec ? 4 : 1;
    a.cpr = (int)(D / VEC);
    a.N = (int)(H * a.cpr);

    // fused validation when every block can afford to check all positions
    const long long tokens = T * B;
    int kind = KIND_ROPE;
    if (kv && pre) {
        kind = KIND_KV;
    } else if (kv) {
        const bool can_fuse = tokens <= kFusedMaxTokens;
        const bool fuse = cu->sig.kv_validate == 1   ? can_fuse
                          : cu->sig.kv_validate >= 2 ? false
                                                         : can_fuse && T <= kFusedMaxT;
        kind = fuse ? KIND_KV_FUSED : KIND_KV;
    }
    const size_t angles = (size_t)a.half * 2 * sizeof(float);
    if (angles > kMaxSmem)
        return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: n_rot %d above the supported %d", call, rp.n_rot,
                      (int)(kMaxSmem / sizeof(float)));

    // block: up to 256 threads, each with up to 4 chunks per tensor; fewer
    // chunks per thread (more blocks) while the grid would not fill the GPU
    const int sms = tg_cuda_sms(cu);
    if (threads <= 0) threads = a.N >= kThreads ? kThreads : (a.N + 31) / 32 * 32;
    const int rmax = a.neox ? kRounds / 2 : kRounds;
    a.rounds = rmax;
    auto per_token = [&](int rounds) { return (a.N + threads * rounds - 1) / (threads * rounds); };
    while (a.rounds > 1 && tokens * per_token(a.rounds) < 2LL * sms) a.rounds /= 2;
    if (cu->sig.kv_rounds > 0) a.rounds = cu->sig.kv_rounds < rmax ? cu->sig.kv_rounds : rmax;
    if (a.rounds == 3) a.rounds = 2;
    a.bpt = per_token(a.rounds);
    if (tokens * a.bpt > INT_MAX) return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: grid too large", call);
    if (kind == KIND_KV && !pre && cu->sig.kv_validate != 3) {
        const long long nt = (T + kValTile - 1) / kValTile;
        if (nt * nt * B > INT_MAX) return tg_err(TG_ERR_UNSUPPORTED, "[%s] CUDA: T = %lld too large", call, (long long)T);
        pl->validate = true;
    }
    pl->kind = kind, pl->vec = vec, pl->threads = threads, pl->blocks = tokens * a.bpt, pl->smem = angles;
    return TG_OK;
}

tg_status launch_validate(tg_backend *be, const char *call, const rope_args &a) {
    tg_cuda_impl *cu = tg_cuda(be);
    const long long nt = (a.T + kValTile - 1) / kValTile;
    kv_validate_kernel<<<(unsigned)(nt * nt * a.B), kValTile, 0, cu->stream>>>(a.pos, a.T, a.L, a.cs.data ? a.Ltab : -1,
                                                                             (int)nt, cu->d_err);
    TG_CUDA_LAUNCHED(be, call);
    return TG_OK;
}

// variant name for bench/ (formatted only when it changes: keep the launch path lean)
void name_variant(tg_cuda_impl *cu, bool kv, const rope_args &a, const rows_plan &pl, bool pre, bool pair) {
    static const char *const kinds[3] = {"", "/validate+write", "/fused"};
    char (&name)[2][48] = cu->rope_name;
    int (&last)[2][4] = cu->rope_last;
    const int now[4] = {a.neox + 2 * pair, pl.vec, pl.kind * 8 + (kv && cu->sig.kv_validate == 3) + 2 * pre, a.rounds};
    if (memcmp(now, last[kv], sizeof(now)) != 0) {
        memcpy(last[kv], now, sizeof(now));
        snprintf(name[kv], sizeof(name[kv]), "%s%s%s%s/r%d", pl.vec ? "vec4" : "scalar", a.neox ? "/neox" : "",
                 kv && cu->sig.kv_validate == 3 ? "/write-only" : pre ? "/prechecked" : kinds[pl.kind],
                 pair ? "/with-q" : "", a.rounds);
    }
    cu->sig_last[kv ? TG_CUDA_SIG_KV : TG_CUDA_SIG_ROPE] = name[kv];
}

tg_status launch_rows(tg_backend *be, const char *call, bool kv, rope_args &a, const tg_tensor *const *ts, int n_vec,
                      int n_ts, int64_t D, int64_t H, int64_t T, int64_t B, const tg_rope_params &rp,
                      bool pre = false) {
    tg_cuda_impl *cu = tg_cuda(be);
    rows_plan pl;
    tg_status s = plan_rows(be, call, kv, a, ts, n_vec, n_ts, D, H, T, B, rp, pre, 0, &pl);
    if (s != TG_OK || pl.empty) return s;
    if (pl.validate && (s = launch_validate(be, call, a)) != TG_OK) return s;
    const rows_launch L = {pl.kind, dim3((unsigned)pl.blocks), pl.threads, pl.smem, cu->stream, nullptr, 0};
    if (pl.vec) (a.neox ? launch_kind<4, true> : launch_kind<4, false>)(L, a, cu->d_err);
    else (a.neox ? launch_kind<1, true> : launch_kind<1, false>)(L, a, cu->d_err);
    TG_CUDA_LAUNCHED(be, call);
    name_variant(cu, kv, a, pl, pre, false);
    return TG_OK;
}

// The arguments of a rope node and of a rope_kv_update node.
void rope_args_of(const tg_tensor *dst, rope_args *a) {
    *a = rope_args();
    a->x = tg_cuda_desc_of(dst->src[0]);
    a->y = tg_cuda_desc_of(dst);
    a->xv = a->yv = a->x;  // unused
    a->pos = tg_cuda_desc_of(dst->src[1]);
    a->cs = a->sn = tg_cuda_desc_of(nullptr);
}
void kv_args_of(const tg_tensor *dst, rope_args *a) {
    const tg_tensor *kc = dst->src[0], *cs = dst->src[5];
    *a = rope_args();
    a->x = tg_cuda_desc_of(dst->src[2]);
    a->xv = tg_cuda_desc_of(dst->src[3]);
    a->y = tg_cuda_desc_of(kc);
    a->yv = tg_cuda_desc_of(dst->src[1]);
    a->pos = tg_cuda_desc_of(dst->src[4]);
    a->cs = tg_cuda_desc_of(cs);
    a->sn = tg_cuda_desc_of(dst->src[6]);
    a->L = kc->ne[2];
    a->Ltab = cs ? cs->ne[1] : 0;
}

}  // namespace

// rope: a {D, H, T, B} F32, positions {T, B} I32 -> dst, angles from base.
tg_status tg_cuda_rope(tg_backend *be, const tg_tensor *dst) {
    const tg_tensor *x = dst->src[0], *pos = dst->src[1];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    rope_args a;
    rope_args_of(dst, &a);
    const tg_tensor *ts[3] = {x, dst, pos};
    return launch_rows(be, "rope", false, a, ts, 2, 3, x->ne[0], x->ne[1], x->ne[2], x->ne[3], rp);
}

// Optional device pre-check for the backend's "checks of persistent inputs
// first" pass: the validation kernel alone, so that a bad position in any
// update of the graph stops every update (all-or-nothing across nodes, as on
// the CPU). The write launch validates again either way.
tg_status tg_cuda_check_rope_kv_update(tg_backend *be, const tg_tensor *dst) {
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_tensor *pos = dst->src[4], *cs = dst->src[5];
    const int64_t T = pos->ne[0], B = pos->ne[1];
    if (T * B == 0) return TG_OK;
    const long long nt = (T + kValTile - 1) / kValTile;
    if (T > INT_MAX || nt * nt * B > INT_MAX)
        return tg_err(TG_ERR_UNSUPPORTED, "[rope_kv_update] CUDA: T = %lld too large", (long long)T);
    if (!elem_aligned(pos)) return TG_OK;  // the write launch reports it
    kv_validate_kernel<<<(unsigned)(nt * nt * B), kValTile, 0, cu->stream>>>(
        tg_cuda_desc_of(pos), (int)T, dst->src[0]->ne[2], cs ? cs->ne[1] : -1, (int)nt, cu->d_err);
    TG_CUDA_LAUNCHED(be, "rope_kv_update");
    return TG_OK;
}

// rope_kv_update: src k_cache, v_cache, k_new, v_new, positions, cos|NULL, sin|NULL.
tg_status tg_cuda_rope_kv_update(tg_backend *be, const tg_tensor *dst) {
    const tg_tensor *kc = dst->src[0], *vc = dst->src[1], *kn = dst->src[2], *vn = dst->src[3];
    const tg_tensor *pos = dst->src[4], *cs = dst->src[5], *sn = dst->src[6];
    const tg_rope_params rp = tg_get_params<tg_rope_params>(dst);
    rope_args a;
    kv_args_of(dst, &a);
    const tg_tensor *ts[7] = {kc, vc, kn, vn, pos, cs, sn};
    return launch_rows(be, "rope_kv_update", true, a, ts, 4, cs ? 7 : 5, kn->ne[0], kn->ne[1], kn->ne[2], kn->ne[3], rp,
                       tg_cuda_kv_prechecked(be, dst));
}

// rope(q) and rope_kv_update in one launch (cuda/fuse.cu checks that they may
// run together: same positions and parameters, no tables, nothing one writes
// is read or written by the other). false: not fusable here (nothing done).
bool tg_cuda_rope_pair(tg_backend *be, const tg_tensor *rope, const tg_tensor *kv, tg_status *st) {
    tg_cuda_impl *cu = tg_cuda(be);
    const tg_rope_params rq = tg_get_params<tg_rope_params>(rope), rk = tg_get_params<tg_rope_params>(kv);
    if (rq.n_rot != rk.n_rot || rq.mode != rk.mode || rq.base != rk.base || kv->src[5] || rope->src[1] != kv->src[4])
        return false;
    const tg_tensor *x = rope->src[0], *kn = kv->src[2];
    if (x->ne[2] != kn->ne[2] || x->ne[3] != kn->ne[3]) return false;
    const bool pre = tg_cuda_kv_prechecked(be, kv);
    rope_args q, a;
    rope_args_of(rope, &q);
    kv_args_of(kv, &a);
    const tg_tensor *tq[3] = {x, rope, rope->src[1]};
    const tg_tensor *tk[5] = {kv->src[0], kv->src[1], kn, kv->src[3], kv->src[4]};
    rows_plan pq, pk;
    // the natural block sizes first, then the larger one for both
    for (int threads = 0, pass = 0; pass < 2; pass++) {
        if (plan_rows(be, "rope", false, q, tq, 2, 3, x->ne[0], x->ne[1], x->ne[2], x->ne[3], rq, false, threads, &pq) !=
                TG_OK ||
            plan_rows(be, "rope_kv_update", true, a, tk, 4, 5, kn->ne[0], kn->ne[1], kn->ne[2], kn->ne[3], rk, pre,
                      threads, &pk) != TG_OK) {
            return false;  // the unfused launches report it
        }
        if (pq.empty || pk.empty || !pq.vec || !pk.vec) return false;
        if (pq.threads == pk.threads) break;
        threads = pq.threads > pk.threads ? pq.threads : pk.threads;
    }
    if (pq.threads != pk.threads || q.rounds != a.rounds || pq.smem != pk.smem || pq.blocks + pk.blocks > INT_MAX)
        return false;
    if (pk.validate && (*st = launch_validate(be, "rope_kv_update", a)) != TG_OK) return true;
    const rows_launch L = {pk.kind, dim3((unsigned)(pq.blocks + pk.blocks)), pk.threads, pk.smem, cu->stream, &q,
                           (int)pq.blocks};
    (a.neox ? launch_kind<4, true> : launch_kind<4, false>)(L, a, cu->d_err);
    *st = TG_OK;
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) *st = tg_cuda_status(be, e, "rope_kv_update", "launch");
    if (*st == TG_OK) name_variant(cu, false, q, pq, false, true), name_variant(cu, true, a, pk, pre, true);
    return true;
}
