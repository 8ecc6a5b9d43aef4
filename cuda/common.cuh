// common.cuh - shared pieces of the CUDA backend: the backend state, error
// checks that turn CUDA failures into tg_status, and the device error record
// that kernels use to report bad input (positions, ids) without aborting.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "internal.h"
#include "signature.cuh"

// Bad input found on the device: the first report wins (atomicCAS on code).
// The backend reads it back after the graph and turns it into an error.
struct tg_cuda_err {
    int code;     // 0: none; otherwise a TG_CUDA_ERR_* value
    int op;       // tg_op of the reporting node
    long long info[4];
};
enum {
    TG_CUDA_ERR_NONE = 0,
    TG_CUDA_ERR_POSITION_RANGE = 1,  // info: position, limit, sequence, token
    TG_CUDA_ERR_POSITION_REPEAT = 2,  // info: position, sequence, token, other token
    TG_CUDA_ERR_ID_RANGE = 3,         // info: id, vocab, index
};

__device__ inline void tg_cuda_report(tg_cuda_err *e, int code, int op, long long a, long long b, long long c,
                                      long long d) {
    if (atomicCAS(&e->code, 0, code) == 0) {
        e->op = op;
        e->info[0] = a;
        e->info[1] = b;
        e->info[2] = c;
        e->info[3] = d;
    }
}

struct tg_cuda_impl {
    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    tg_cuda_err *d_err = nullptr;  // device error record, cleared before each graph
    bool failed = false;           // a CUDA error happened: refuse further work
    std::string fail_msg;
    int sm_count = 0;
    // grow-only scratch for ops (mul_mat conversions); see tg_cuda_scratch
    void *scratch = nullptr;
    size_t scratch_size = 0;
    // mul_mat: most bytes of F32 weights converted at once (env TG_CUDA_MM_BUDGET)
    size_t mm_budget = (size_t)256 << 20;
    // cuBLAS workspace, set explicitly so that captured GEMMs allocate nothing
    void *cublas_ws = nullptr;
    // Mapped pinned host copy of the error record: the graph's last kernel
    // writes it (through h_err_dev) and clears d_err, so every compute starts
    // with a clear record; the one synchronization after the graph makes it
    // readable.
    tg_cuda_err *h_err = nullptr, *h_err_dev = nullptr;
    // Read-back: small outputs of the last compute (graph sinks in the compute
    // buffer), written into mapped pinned host memory by the graph's last
    // kernel (the one that writes the error record), so that reading the
    // logits needs no second trip to the device and the graph no copy node.
    // Valid from a finished compute until the next set, memset or compute.
    struct readback {
        const char *dev;
        size_t size, off;
    };
    char *rb_host = nullptr, *rb_host_dev = nullptr;
    size_t rb_cap = 0;
    std::vector<readback> rb;
    bool rb_valid = false;
    // CUDA graphs (cuda/graph_exec.cu): a graph computed again with the same
    // nodes and buffers replays its captured launches. Env TG_CUDA_GRAPHS=0: off.
    bool graphs = true;
    bool capturing = false;     // a capture is being recorded: ops must not synchronize or (de)allocate
    uint64_t resource_gen = 0;  // bumped whenever something launches point at (scratch) is replaced
    struct tg_cuda_graph_cache *graph_cache = nullptr;
    double wait_us = 0;  // time blocked on the device (tg_cuda_wait_us)
    // Pinned staging of small tensor_set copies: copied asynchronously in
    // stream order; reused after the next full synchronization of the stream.
    char *staging = nullptr;
    size_t staging_size = 0, staging_used = 0;
    cudaEvent_t stage_ev = nullptr;  // recorded after the last staged copy
    // rope_kv_update nodes whose positions the graph's pre-check pass has
    // validated (only during a compute): their launches skip their own check
    std::vector<const tg_tensor *> kv_prechecked;
    // node fusions (cuda/fuse.cu; env TG_CUDA_FUSE=0: off) and the count of
    // each kind the last enqueued graph took (tests)
    bool fuse = true;
    int fusions[TG_CUDA_FUSION_KINDS] = {};
    // an attention launch's output quantized for the quantized GEMV after it
    // (knob qlink, cuda/fuse.cu): set by the fuse pass around that one launch
    // (want; the quantized b at the scratch's start, the split kernel's
    // partial sums at part_off past it), q and d set by the split path where
    // its combine kernel took it
    struct attn_qlink_t {
        bool want = false;
        size_t part_off = 0;
        int8_t *q = nullptr;
        float2 *d = nullptr;
    } attn_qlink;
    // programmatic dependent launch of the decode-path kernels (GEMV, norms,
    // rope, attention): on from sm_90; env TG_CUDA_PDL=0 turns it off
    bool pdl = false;
    // the chunk-parallel delta rule's state pass may take bulk copies (a compute capability 9.0 device
    // and the build's code for it: tg_cuda_delta_state_bulk_built), set once at init
    bool bulk = false;
    // thread-block clusters (sm_90): attention decode merges its splits in one
    // kernel (cuda/attention_cluster.cu). The largest cluster (2 to 16 blocks)
    // of that kernel, at its most shared memory, that the device can schedule;
    // 0: none (no sm_90 code, no cluster launch), the kernel is not used.
    int cluster_max = 0;
    // mul_mat on tensor cores (cuda/mul_mat_fast.cu): the b whose rounding to
    // tc_type the scratch holds, so that the next product of the same b in the
    // graph (q, k and v; gate and up) skips its conversion. Only during an
    // enqueue (tc_reuse); cleared by any tg_cuda_scratch call and before any
    // node that writes b's bytes (cuda/fuse.cu). tc_reused counts the skips.
    const tg_tensor *tc_b = nullptr;
    tg_type tc_type = TG_TYPE_F32;
    bool tc_reuse = false;
    long long tc_reused = 0;
    // byte ranges [lo, hi) the graph being enqueued writes (its nodes, and the
    // sources ops write in place), set by tg_cuda_enqueue_nodes for the time
    // of the enqueue (empty otherwise): a GEMV whose weights overlap none of
    // them loads them before its tg_pdl_wait (tg_cuda_graph_const)
    std::vector<std::pair<uintptr_t, uintptr_t>> graph_written;
    // the graph's nodes, for the same time (tg_cuda_attention_rows_pre)
    const std::vector<tg_tensor *> *graph_nodes = nullptr;
    // kernel-variant knobs and the variant names of the last launches (bench, tests)
    tg_cuda_sig_knobs sig;
    const char *sig_last[5] = {"", "", "", "", ""};
    // slots of delta_smem_set: the single-kernel form's 3 kernels (cuda/delta_rule_chunked.cu), the
    // chunk-parallel form's 35 (cuda/delta_rule_chunked_phases.cu), the wgmma kernels' fifteen (TF32
    // GATED_LINEAR and GATED_DELTA: cuda/sm90a/delta_rule_chunked_wg.cu; BF16 GATED_LINEAR and
    // GATED_DELTA: cuda/sm90a/delta_rule_chunked_wgb.cu; the chunk-parallel form's BF16 output
    // kernel: cuda/sm90a/delta_rule_out_wgb.cu; its BF16 prep kernels, GATED_DELTA and
    // GATED_LINEAR: cuda/sm90a/delta_rule_prep_wgb.cu; GATED_LINEAR's two segment kernels:
    // cuda/sm90a/delta_rule_chunked_wgb.cu) and the four BF16 / segment kernels that copy gate arrays
    // made beforehand (the same file)
    enum { TG_CUDA_DSMEM_SINGLE = 0, TG_CUDA_DSMEM_PHASES = 3, TG_CUDA_DSMEM_WG = 38, TG_CUDA_DSMEM_COUNT = 53 };
    // the delta-rule launches' per-backend state (never process-wide: two backends may run on two
    // threads, or on two devices whose kernels' attributes are set separately): the dynamic
    // shared-memory limits raised so far per kernel (slots TG_CUDA_DSMEM_*), the persistent
    // decode kernel's occupancy for its last (kernel, threads), the variant name
    size_t delta_smem_set[TG_CUDA_DSMEM_COUNT] = {};
    const void *delta_occ_fn = nullptr;
    int delta_occ_threads = 0, delta_occ = 0;
    int delta_name_key[6] = {-1, -1, -1, -1, -1, -1};
    char delta_name[64] = {};
    char rope_name[2][48] = {};
    int rope_last[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
};

inline tg_cuda_impl *tg_cuda(tg_backend *be) { return (tg_cuda_impl *)be->impl; }
// The SM count the size rules use (132, an H100 / H200's, where the device did not say).
inline int tg_cuda_sms(const tg_cuda_impl *cu) { return cu->sm_count > 0 ? cu->sm_count : 132; }
// Whether kernels of class c launch by programmatic dependent launch: the
// backend's pdl, less the classes knob pdl_mask takes out (diagnostics)
inline bool tg_cuda_pdl_for(const tg_cuda_impl *impl, tg_cuda_pdl_class c) {
    return impl->pdl && !((impl->sig.pdl_mask >> (int)c) & 1);
}

// Turn a CUDA runtime error into a status; a sticky error (kernel fault) also
// marks the backend failed so that later calls are refused.
tg_status tg_cuda_status(tg_backend *be, cudaError_t e, const char *call, const char *what);
tg_status tg_cublas_status(tg_backend *be, cublasStatus_t s, const char *call, const char *what);
// Errors after which the CUDA context is unusable (cuda/status.cu).
bool tg_cuda_is_sticky(cudaError_t e);

#define TG_CUDA_TRY(be, call, expr)                                         \
    do {                                                                    \
        cudaError_t e_ = (expr);                                            \
        if (e_ != cudaSuccess) return tg_cuda_status((be), e_, (call), #expr); \
    } while (0)

// Check the launch that just happened (configuration errors, not faults).
#define TG_CUDA_LAUNCHED(be, call) TG_CUDA_TRY(be, call, cudaGetLastError())

// Programmatic dependent launch (sm_90 and later; tg_cuda_impl::pdl). A
// kernel launched by tg_cuda_launch with pdl set may begin while the kernel
// before it in the stream is finishing (once every block of that one has
// called tg_pdl_trigger or ended), so its blocks start and its first loads
// are in flight instead of the GPU draining between two kernels of a decode
// step. Where a kernel calls tg_pdl_trigger decides how early the next one
// is scheduled: the GEMVs at their start where a launch reads at least 4 MiB
// of weights, else after their weight loads (knob mmv_trigger; docs/ops.md),
// the other kernels at or near their start.
// A kernel launched so calls tg_pdl_wait() before it reads anything an earlier
// launch writes and before it writes anything: wait returns once the
// kernel before has ended and its writes are visible. Before the wait it may
// only do arithmetic and read tensors that no node of the graph writes (the
// GEMV's weights: tg_cuda_impl::graph_written). Both are no-ops below sm_90
// and in a launch without the attribute (then the stream orders as usual).
__device__ __forceinline__ void tg_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void tg_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// 16 bytes global -> shared without a register round trip (L2 only); src_bytes
// 0 writes zeros (a row past the tile's end: nothing is read).
__device__ inline void tg_cp_async16(void *dst, const void *src, int src_bytes = 16) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ inline void tg_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// until at most N of this thread's committed groups are still in flight
template <int N> __device__ inline void tg_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic
// serialization attribute when pdl is set (the kernel must call tg_pdl_wait
// as above). Errors as a <<<>>> launch: check with TG_CUDA_LAUNCHED.
template <typename... KP, typename... A>
inline void tg_cuda_launch(bool pdl, cudaStream_t stream, void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem,
                           A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    if (pdl) cfg.attrs = at, cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// Grid size for n items with block threads, capped for grid-stride loops.
inline unsigned tg_cuda_blocks(long long n, int threads, long long cap = 65535LL * 16) {
    long long b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

// Strided element access on the device, as tg_get_f32 on the host.
__device__ inline float tg_cuda_load(const char *p, tg_type type) {
    switch (type) {
        case TG_TYPE_F32: return *(const float *)p;
        case TG_TYPE_F16: return __half2float(*(const __half *)p);
        case TG_TYPE_BF16: return __bfloat162float(*(const __nv_bfloat16 *)p);
        case TG_TYPE_I32: return (float)*(const int *)p;
        default: return __int_as_float(0x7fc00000);
    }
}
__device__ inline void tg_cuda_store(char *p, tg_type type, float v) {
    switch (type) {
        case TG_TYPE_F32: *(float *)p = v; break;
        case TG_TYPE_F16: *(__half *)p = __float2half_rn(v); break;
        case TG_TYPE_BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn(v); break;
        case TG_TYPE_I32: *(int *)p = (int)v; break;
        default: break;
    }
}

// A tensor's shape and strides by value, for kernel arguments.
struct tg_cuda_desc {
    char *data;
    tg_type type;
    long long ne[4];
    long long nb[4];
};
inline tg_cuda_desc tg_cuda_desc_of(const tg_tensor *t) {
    tg_cuda_desc d;
    d.data = t ? (char *)t->data : nullptr;
    d.type = t ? t->type : TG_TYPE_F32;
    for (int i = 0; i < 4; i++) {
        d.ne[i] = t ? t->ne[i] : 1;
        d.nb[i] = t ? (long long)t->nb[i] : 0;
    }
    return d;
}

// The bytes of d are written by no node of the graph being enqueued (false
// outside an enqueue): a PDL kernel may read them before its tg_pdl_wait.
bool tg_cuda_graph_const(const tg_cuda_impl *impl, const tg_cuda_desc &d);
// Attention node dst's K and V rows other than its own positions' are written
// by no node of the graph being enqueued (false outside an enqueue): every node
// writing bytes of K or V is a rope_kv_update into exactly those caches (the
// same data, shape and strides) with dst's positions, which no node writes
// (also true when no node writes them). So with p_min the least position of a
// sequence, its rows below p_min may be read before the wait
// (cuda/attention_cluster.cu, attention_split.cu). Also required: K and V map
// each element to bytes of its own and start their rows (positions,
// sequences) on 128-byte lines (no line read early holds a byte written
// later), at most 16 tokens, and position validation on (knob kv_validate).
// (No kernel of an earlier compute can still run: a compute ends with a
// synchronization, and a graph launch waits for everything before it.)
bool tg_cuda_attention_rows_pre(const tg_cuda_impl *impl, const tg_tensor *dst);
// The bytes two tensors may touch intersect (cuda/fuse.cu).
bool tg_cuda_overlap(const tg_tensor *a, const tg_tensor *b);
__device__ inline char *tg_cuda_ptr(const tg_cuda_desc &d, long long i0, long long i1, long long i2, long long i3) {
    return d.data + i0 * d.nb[0] + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
}

// ---------------------------------------------------------------------------
// Added by the backend (cuda/backend.cu, cuda/copy.cu): scratch, flat index
// decomposition, warp reductions, device-side input checks.

// At least `size` bytes of the backend's scratch (grow-only: no cudaMalloc in
// steady state). Growing synchronizes the stream first, since queued work may
// still read the old scratch. The pointer is valid until the next call.
tg_status tg_cuda_scratch(tg_backend *be, size_t size, void **ptr, const char *call);
// x rounded up to a multiple of 256 (offsets of the parts of a scratch)
inline size_t tg_cuda_align256(size_t x) { return (x + 255) / 256 * 256; }

#define TG_CUBLAS_TRY(be, call, expr)                                          \
    do {                                                                       \
        cublasStatus_t s_ = (expr);                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) return tg_cublas_status((be), s_, (call), #expr); \
    } while (0)

// True while no kernel of this graph has reported bad input. Kernels that
// write persistent tensors (cpy targets, caches, states) return early when it
// is false, so a failed graph leaves them as they were.
__device__ inline bool tg_cuda_record_clear(const tg_cuda_err *e) {
    return e == nullptr || *(volatile const int *)&e->code == 0;
}

// Byte offset of element i, in row-major order of d's shape (i0 fastest).
// I is the index type: unsigned when every index fits 32 bits (cheaper
// division), long long otherwise (RELIABILITY 16).
template <typename I> __device__ inline long long tg_cuda_offset(const tg_cuda_desc &d, I i) {
    const I i0 = i % (I)d.ne[0];
    i /= (I)d.ne[0];
    const I i1 = i % (I)d.ne[1];
    i /= (I)d.ne[1];
    const I i2 = i % (I)d.ne[2];
    const I i3 = i / (I)d.ne[2];
    return (long long)i0 * d.nb[0] + (long long)i1 * d.nb[1] + (long long)i2 * d.nb[2] + (long long)i3 * d.nb[3];
}
inline long long tg_cuda_nelements(const tg_cuda_desc &d) { return d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3]; }
// Elements stored densely in row-major order (strides of a fresh tensor).
inline bool tg_cuda_is_contiguous(const tg_cuda_desc &d, size_t es) {
    long long expect = (long long)es;
    for (int i = 0; i < 4; i++) {
        if (d.ne[i] != 1 && d.nb[i] != expect) return false;
        expect *= d.ne[i];
    }
    return true;
}
// A contiguous descriptor for n-dim data at ptr (strides from shape).
inline tg_cuda_desc tg_cuda_desc_dense(void *ptr, tg_type type, const long long ne[4]) {
    tg_cuda_desc d;
    d.data = (char *)ptr;
    d.type = type;
    long long nb = (long long)tg_type_size(type);
    for (int i = 0; i < 4; i++) {
        d.ne[i] = ne[i];
        d.nb[i] = nb;
        nb *= ne[i];
    }
    return d;
}

// swiglu(x, y) = silu(x) * y, as the CPU computes it (binary.cu and the fused
// GEMV epilogue share it, so fused and unfused results are the same bits).
__device__ __forceinline__ float tg_cuda_swiglu(float x, float y) {
    return (x == -INFINITY ? 0.0f : x / (1.0f + expf(-x))) * y;
}

// Rope's pair i at position p: theta = p * base^(-2i/n_rot) in double, as
// the CPU computes it; the F32 cos/sin then equal the CPU's except at a
// rounding tie of the double value. And one rotated value of a pair (x_e,
// x_o) -> (x_e c - x_o s, x_e s + x_o c): x the value, o its partner, first
// whether x is x_e; explicitly rounded products (no FMA contraction), as the
// CPU reference. Shared by cuda/rope.cu and the rope folded into the q/k/v
// GEMV (cuda/mmv.cuh), so both give the same bits.
__device__ inline void tg_cuda_rope_angle(long long p, int i, int n_rot, double base, float *c, float *s) {
    const double theta = (double)p * pow(base, -2.0 * i / n_rot);
    double sd, cd;
    sincos(theta, &sd, &cd);
    *c = (float)cd;
    *s = (float)sd;
}
__device__ __forceinline__ float tg_cuda_rope_rotate(float x, float o, float c, float s, bool first) {
    return first ? __fsub_rn(__fmul_rn(x, c), __fmul_rn(o, s)) : __fadd_rn(__fmul_rn(o, s), __fmul_rn(x, c));
}

__device__ inline float tg_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float tg_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Copy src's elements into dst element by element in row-major order of each
// (same count, any float types, or I32 to I32), as tg_cpu_cpy. With
// skip_on_error the kernel writes nothing once the graph's error record is set.
tg_status tg_cuda_copy(tg_backend *be, const tg_cuda_desc &src, const tg_cuda_desc &dst, bool skip_on_error,
                       const char *call);

// Device-side checks of inputs that are persistent (the op table's
// check_src is a leaf): run before any node of the graph launches, they fill
// the error record, so that every writer of persistent tensors skips.
tg_status tg_cuda_check_get_rows(tg_backend *be, const tg_tensor *dst);

// Whether dst (a rope_kv_update node) had its positions validated by this
// compute's pre-check pass (then its write launch needs no check of its own).
bool tg_cuda_kv_prechecked(tg_backend *be, const tg_tensor *dst);

// cuda/graph_exec.cu: run a graph's work on the stream. enqueue puts the
// record reset, checks, launches and the record copy on the stream (never
// synchronizing). It runs plainly the first time a graph (its nodes, their
// data and the backend's resources) is seen; the second time it is captured
// into a CUDA graph and launched; after that the capture is replayed with no
// host work. A capture that fails (an op that cannot be captured) falls back
// to a plain run, and that graph is not captured again. Returns enqueue's
// status (or a launch error); the caller synchronizes once and reads h_err.
typedef tg_status (*tg_cuda_enqueue_fn)(tg_backend *be, const std::vector<tg_tensor *> &nodes);
// (the read-back list impl->rb is the enqueued graph's; a replay restores it)
// Build this compute's key and find its entry (cuda/graph_exec.cu): true when
// a capture of exactly these launches exists, so the checks that passed when
// it was made (layouts, ops the backend has) hold again. tg_cuda_graph_run
// uses the lookup (or makes it, when none was made for this compute).
bool tg_cuda_graph_lookup(tg_backend *be, const std::vector<tg_tensor *> &nodes);
tg_status tg_cuda_graph_run(tg_backend *be, const std::vector<tg_tensor *> &nodes, tg_cuda_enqueue_fn enqueue);
void tg_cuda_graph_cache_free(tg_cuda_impl *impl);

// The 16 bytes u as 4 F32, 8 F16 or 8 BF16 values, widened to F32 into f
// (the last argument picks the type): the vector loads of GEMV and attention.
__device__ inline void tg_cuda_cvt16(const uint4 &u, float *f, float) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
}
__device__ inline void tg_cuda_cvt16(const uint4 &u, float *f, __half) {
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 v = __half22float2(h[j]);
        f[2 * j] = v.x, f[2 * j + 1] = v.y;
    }
}
__device__ inline void tg_cuda_cvt16(const uint4 &u, float *f, __nv_bfloat16) {
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 v = __bfloat1622float2(h[j]);
        f[2 * j] = v.x, f[2 * j + 1] = v.y;
    }
}
