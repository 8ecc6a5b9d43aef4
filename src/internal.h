// internal.h - engine internals shared by src/, ggml_ops/ and cuda/.
// Not installed; apps use tinygml.h only.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tinygml.h"

// ---------------------------------------------------------------------------
// Errors: set the thread's message and return the status. Messages start with
// "[call] ". Every public entry point validates its arguments first and
// returns through these, so that a failed call changes nothing.

tg_status tg_err(tg_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// For constructors: set the error and return NULL.
#define TG_FAIL_NULL(st, ...)       \
    do {                            \
        tg_err((st), __VA_ARGS__);  \
        return nullptr;             \
    } while (0)

// Internal invariants only (never caller input): prints and aborts.
#define TG_ASSERT(x)                                                                          \
    do {                                                                                      \
        if (!(x)) tg_assert_fail(__FILE__, __LINE__, #x);                                      \
    } while (0)
[[noreturn]] void tg_assert_fail(const char *file, int line, const char *expr);

// ---------------------------------------------------------------------------
// Ops

enum tg_op {
    TG_OP_NONE = 0,  // leaf: weights, caches, states, inputs
    TG_OP_VIEW,      // view / reshape / permute / transpose: metadata only
    TG_OP_CONT,
    TG_OP_CPY,
    TG_OP_GET_ROWS,
    TG_OP_ADD,
    TG_OP_MUL,
    TG_OP_SCALE,
    TG_OP_RMS_NORM,
    TG_OP_L2_NORM,
    TG_OP_SILU,
    TG_OP_SIGMOID,
    TG_OP_SOFTPLUS,
    TG_OP_SWIGLU,
    TG_OP_MUL_MAT,
    TG_OP_SOFTMAX,
    TG_OP_ATTENTION,
    TG_OP_ROPE,
    TG_OP_ROPE_KV_UPDATE,
    TG_OP_DELTA_RULE,
    TG_OP_COUNT
};

#define TG_MAX_SRC 8
#define TG_MAX_OP_PARAMS 16  // int32 slots; typed params are memcpy'd in

// Where a tensor's storage lives.
enum tg_mem { TG_MEM_NONE = 0, TG_MEM_HOST = 1, TG_MEM_DEVICE = 2 };

struct tg_tensor {
    tg_type type;
    int64_t ne[TG_MAX_DIMS];  // elements per dim, ne[0] innermost
    size_t nb[TG_MAX_DIMS];   // byte strides

    tg_op op;
    tg_tensor *src[TG_MAX_SRC];
    int32_t op_params[TG_MAX_OP_PARAMS];

    // Views and ops that write into a source (cpy, rope_kv_update) alias
    // view_src's storage at byte offset view_offs.
    tg_tensor *view_src;
    size_t view_offs;

    // Storage: data is the address of element 0 in host or device memory.
    void *data;
    tg_mem mem;
    uint64_t buffer_id;  // registry id of the buffer holding data (0: context arena)
    int device;          // CUDA device when mem == TG_MEM_DEVICE

    uint64_t id;  // global creation order: graphs run nodes by it
    tg_context *ctx;
    uint64_t ctx_gen;  // generation of ctx when made: a freed context's tensors are refused
    // Set by tg_graph_compute: the op's check (op table check_src) reads
    // persistent data that no earlier node of the graph writes, so the backend
    // runs it before any node writes; otherwise it runs right before the op.
    bool precheck;
    char name[TG_MAX_NAME];
};

// Typed op params, stored in op_params.
template <typename T> inline void tg_set_params(tg_tensor *t, const T &p) {
    static_assert(sizeof(T) <= sizeof(t->op_params), "op params too large");
    memcpy(t->op_params, &p, sizeof(T));
}
template <typename T> inline T tg_get_params(const tg_tensor *t) {
    T p;
    memcpy(&p, t->op_params, sizeof(T));
    return p;
}

// Per-op functions. CPU kernels split rows: thread ith of nth. A check runs on
// the host, single-threaded, before any op of the graph writes (when its
// inputs are persistent) or right before the op (when they are computed).
typedef void (*tg_cpu_fn)(const tg_tensor *dst, int ith, int nth);
typedef tg_status (*tg_check_fn)(const tg_tensor *dst);
typedef tg_status (*tg_cuda_fn)(tg_backend *be, const tg_tensor *dst);

// A CPU fast path (src/cpu_fast/): what one thread of a node sees. All nth
// threads run the kernel; work is claimed in chunks from `next` (0 when the
// node starts), and sync() is a barrier of the node's threads.
struct tg_cpu_ctx {
    int ith, nth;
    void *work;                  // scratch shared by the node's threads, 64-byte aligned
    std::atomic<int64_t> *next;  // chunk counter
    void (*barrier_fn)(void *pool);
    void *pool;
    void sync() const {
        if (nth > 1) barrier_fn(pool);
    }
    int64_t claim() const { return next->fetch_add(1, std::memory_order_relaxed); }
};
struct tg_cpu_fast {
    // Scratch bytes the kernel needs for dst with nth threads, or -1 when dst's
    // layout or types are not one it handles (the reference kernel runs then).
    int64_t (*plan)(const tg_tensor *dst, int nth);
    void (*run)(const tg_tensor *dst, const tg_cpu_ctx &c);
    // Rough work of the node (multiply-adds or elements touched), or NULL for
    // elements of dst + src[0]. Small nodes run on one thread.
    double (*work)(const tg_tensor *dst);
};

struct tg_op_info {
    tg_op op;
    const char *name;
    int n_src;        // sources the op needs (optional ones may be NULL past this count)
    bool inplace_ok;  // result may take src[0]'s memory when src[0] has no other consumer
    tg_check_fn cpu_check;
    int check_src;  // the source whose data cpu_check reads (-1: none)
    tg_cpu_fn cpu;
    tg_cuda_fn cuda;  // NULL when built without CUDA
    // the device-side form of cpu_check: the CUDA backend launches it for
    // every node whose check_src is persistent, before any node runs (NULL:
    // the op's kernels validate themselves, or no CUDA)
    tg_cuda_fn cuda_check = nullptr;
    const tg_cpu_fast *cpu_fast = nullptr;  // CPU fast path beside the reference (NULL: none)
};

const tg_op_info &tg_op_get(tg_op op);  // the table in src/op_table.cpp

// ---------------------------------------------------------------------------
// Tensor helpers

tg_context *tg_tensor_context(const tg_tensor *t);
// New op result in ctx: type, shape (n_dims entries of ne, rest 1), op and sources.
tg_tensor *tg_new_op(tg_context *ctx, const char *call, tg_op op, tg_type type, int n_dims, const int64_t *ne,
                     tg_tensor *const *srcs, int n_srcs);
// Result that aliases src's storage (views, cpy, rope_kv_update).
tg_tensor *tg_new_view_of(tg_context *ctx, const char *call, tg_op op, tg_tensor *src, int n_dims,
                          const int64_t *ne, const size_t *nb, size_t offset);

inline int64_t tg_nrows(const tg_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
bool tg_same_shape(const tg_tensor *a, const tg_tensor *b);
std::string tg_shape_str(const tg_tensor *t);  // "{4,2,1,1} f32"
tg_tensor *tg_view_root(tg_tensor *t);         // follow view_src to the tensor that owns storage
bool tg_is_leaf(const tg_tensor *t);           // op NONE and not a view

// Argument checks for constructors: NULL checks and type checks that set a
// "[call] ..." error. Return false on failure.
bool tg_check_not_null(const char *call, const char *what, const tg_tensor *t);
bool tg_check_type(const char *call, const char *what, const tg_tensor *t, tg_type type);
bool tg_check_float_type(const char *call, const char *what, const tg_tensor *t);  // F32/F16/BF16
// Refuse a quantized tensor with the message every op but mul_mat's and
// get_rows' a gives ("[add] a is q4_0: quantized tensors are only ...").
bool tg_check_not_quantized(const char *call, const char *what, const tg_tensor *t);

// ---------------------------------------------------------------------------
// Quantized rows (src/quant.cpp): n elements, n a multiple of t's block size,
// t quantized (checked by the callers).
void tg_quantize_row(tg_type t, const float *src, void *dst, int64_t n);
void tg_dequantize_row(tg_type t, const void *src, float *dst, int64_t n);

// ---------------------------------------------------------------------------
// Element access for the CPU reference kernels (any type, any strides).

float tg_fp16_to_fp32_impl(uint16_t h);
uint16_t tg_fp32_to_fp16_impl(float f);

inline float tg_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint16_t tg_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                               // round to nearest even
    return (uint16_t)(u >> 16);
}

inline float tg_load_f32(const void *p, tg_type type) {
    switch (type) {
        case TG_TYPE_F32: {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        case TG_TYPE_F16: {
            uint16_t h;
            memcpy(&h, p, 2);
            return tg_fp16_to_fp32_impl(h);
        }
        case TG_TYPE_BF16: {
            uint16_t h;
            memcpy(&h, p, 2);
            return tg_bf16_to_f32(h);
        }
        case TG_TYPE_I32: {
            int32_t i;
            memcpy(&i, p, 4);
            return (float)i;
        }
        default: return NAN;
    }
}
inline void tg_store_f32(void *p, tg_type type, float v) {
    switch (type) {
        case TG_TYPE_F32: memcpy(p, &v, 4); break;
        case TG_TYPE_F16: {
            uint16_t h = tg_fp32_to_fp16_impl(v);
            memcpy(p, &h, 2);
            break;
        }
        case TG_TYPE_BF16: {
            uint16_t h = tg_f32_to_bf16(v);
            memcpy(p, &h, 2);
            break;
        }
        case TG_TYPE_I32: {
            int32_t i = (int32_t)v;
            memcpy(p, &i, 4);
            break;
        }
        default: break;
    }
}
inline char *tg_ptr(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}
inline float tg_get_f32(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return tg_load_f32(tg_ptr(t, i0, i1, i2, i3), t->type);
}
inline void tg_set_f32(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v) {
    tg_store_f32(tg_ptr(t, i0, i1, i2, i3), t->type, v);
}
inline int32_t tg_get_i32(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int32_t v;
    memcpy(&v, tg_ptr(t, i0, i1, i2, i3), 4);
    return v;
}
// Rows [r0, r1) of nrows split evenly over nth threads.
inline void tg_split_rows(int64_t nrows, int ith, int nth, int64_t *r0, int64_t *r1) {
    int64_t per = (nrows + nth - 1) / nth;
    *r0 = per * ith < nrows ? per * ith : nrows;
    *r1 = *r0 + per < nrows ? *r0 + per : nrows;
}

// ---------------------------------------------------------------------------
// Buffers: a registry of live storage, so a tensor whose buffer was freed is
// detected instead of dereferenced.

struct tg_buffer_entry {
    tg_backend *backend;
    void *base;
    size_t size;
    bool read_only;  // caller memory that must not be written (tg_backend_buffer_from_host_ptr)
};
uint64_t tg_registry_add(tg_backend *be, void *base, size_t size, bool read_only = false);
// The tensor's storage is read-only caller memory (false when it has none).
bool tg_storage_read_only(const tg_tensor *t);
void tg_registry_remove(uint64_t id);
bool tg_registry_lookup(uint64_t id, tg_buffer_entry *out);
// Changes with every add and remove (so a lookup that succeeded still would
// while it is the same).
uint64_t tg_registry_generation();
// Storage check used by tensor_set/get and graph_compute: the tensor has data
// and its buffer is still live. Sets "[call] ..." on failure.
tg_status tg_check_storage(const char *call, const tg_tensor *t, tg_backend **owner);

// ---------------------------------------------------------------------------
// Backends

struct tg_plan;  // src/planner.h

struct tg_backend_iface {
    void (*free)(tg_backend *be);
    // device/host memory; alloc returns TG_ERR_OOM (with message) on failure
    tg_status (*alloc)(tg_backend *be, size_t size, void **ptr);
    void (*dealloc)(tg_backend *be, void *ptr);
    tg_status (*memset)(tg_backend *be, void *ptr, int value, size_t size);
    tg_status (*set)(tg_backend *be, void *dst, const void *host_src, size_t size);
    tg_status (*get)(tg_backend *be, void *host_dst, const void *src, size_t size);
    // run nodes (op != NONE, views included) in order; data pointers are set
    tg_status (*compute)(tg_backend *be, const std::vector<tg_tensor *> &nodes);
};

struct tg_backend {
    const tg_backend_iface *iface;
    void *impl;
    tg_mem mem;  // where its buffers live
    int device;
    std::string name;
    bool tf32;
    // buffers from tg_backend_alloc still live: tg_backend_free releases them
    // and leaves their handles empty (see tg_buffer_free)
    std::vector<tg_buffer *> buffers;
    // the planner's buffer for intermediates, grown on demand
    void *compute_buf;
    size_t compute_size;
    uint64_t compute_id;
};

// Live-handle registry of backends (src/backend.cpp): a freed backend passed
// to a call is refused, not dereferenced. The constructors register theirs.
void tg_backend_register(tg_backend *b, bool live);
bool tg_backend_live(const tg_backend *b);
tg_status tg_check_backend(const char *call, const tg_backend *b);

tg_backend *tg_backend_cuda_create(int device);  // cuda/backend.cu; NULL + error
bool tg_cuda_device_present(void);

// CPU backend knobs for tests and benches: whether nodes may take their fast
// path (default on; off runs the reference kernels only). src/backend_cpu.cpp.
void tg_backend_cpu_set_fast(tg_backend *be, bool on);

// Run an op's CPU check (if any) on host-resident data.
tg_status tg_cpu_run_check(const tg_tensor *node);
