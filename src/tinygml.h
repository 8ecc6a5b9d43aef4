// tinygml.h - the whole public C API of tinygml.
//
// A minimal ggml-style engine: build a graph of tensor ops in a context, plan
// its memory, compute it on the CPU (the reference) or on a CUDA GPU.
//
// Conventions (see README.md for more):
//  - Tensors have up to 4 dims in ggml order: ne[0] is the innermost,
//    contiguous dim; nb[i] are byte strides. PyTorch [B, T, H, D] is
//    ne = {D, H, T, B}.
//  - Compute is F32. F16/BF16 are storage types (weights, caches, states).
//  - Every call that can fail returns tg_status (or NULL); tg_last_error()
//    then holds a message that starts with the call's name in brackets,
//    e.g. "[add] cannot broadcast b {3,1,1,1} to a {4,2,1,1}". A failed call
//    changes nothing. The library never aborts or exits on caller input.
//  - Op constructors only record (op, sources, params, result shape) and
//    validate shapes and types. Nothing is computed until tg_graph_compute.
#ifndef TINYGML_H
#define TINYGML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TG_API __declspec(dllexport)
#else
#define TG_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------
// Status and errors

typedef enum tg_status {
    TG_OK = 0,
    TG_ERR_ARG = 1,          // bad argument: NULL, shape, type, range, misuse
    TG_ERR_OOM = 2,          // host or device allocation failed / arena full
    TG_ERR_IO = 3,           // file could not be opened / read / written
    TG_ERR_FORMAT = 4,       // malformed file (GGUF)
    TG_ERR_BACKEND = 5,      // CUDA error, or backend refuses work after one
    TG_ERR_UNSUPPORTED = 6,  // valid request this build/backend cannot do
} tg_status;

// Message of the last failed call on this thread ("" if none yet).
TG_API const char *tg_last_error(void);
TG_API const char *tg_status_name(tg_status s);

// ---------------------------------------------------------------------------
// Types

typedef enum tg_type {
    TG_TYPE_F32 = 0,
    TG_TYPE_F16 = 1,
    TG_TYPE_BF16 = 2,
    TG_TYPE_I32 = 3,
    TG_TYPE_COUNT
} tg_type;

#define TG_MAX_DIMS 4
#define TG_MAX_NAME 64  // names are at most 63 bytes + NUL (as GGUF)

TG_API const char *tg_type_name(tg_type t);  // "f32", "f16", "bf16", "i32"; NULL if invalid
TG_API size_t tg_type_size(tg_type t);       // bytes per element; 0 if invalid

// Scalar conversions (round to nearest even), usable by apps and tests.
TG_API uint16_t tg_fp32_to_fp16(float f);
TG_API float tg_fp16_to_fp32(uint16_t h);
TG_API uint16_t tg_fp32_to_bf16(float f);
TG_API float tg_bf16_to_fp32(uint16_t h);

// ---------------------------------------------------------------------------
// Contexts: an arena for tensor metadata (and, unless no_alloc, tensor data
// in host memory), as ggml_init.

typedef struct tg_context tg_context;
typedef struct tg_tensor tg_tensor;
typedef struct tg_graph tg_graph;
typedef struct tg_backend tg_backend;
typedef struct tg_buffer tg_buffer;

typedef struct tg_init_params {
    size_t mem_size;   // arena bytes (metadata + data unless no_alloc)
    void *mem_buffer;  // caller-owned arena, or NULL to allocate mem_size
    bool no_alloc;     // true: tensors get no data here (backend buffers / planner)
} tg_init_params;

TG_API tg_context *tg_init(tg_init_params params);  // NULL + error on failure
TG_API void tg_free(tg_context *ctx);               // frees graphs made in ctx too
TG_API size_t tg_used_mem(const tg_context *ctx);
// Bytes of arena one tensor's metadata takes (to size no_alloc contexts).
TG_API size_t tg_tensor_overhead(void);
TG_API size_t tg_graph_overhead(void);

// ---------------------------------------------------------------------------
// Tensors

TG_API tg_tensor *tg_new_tensor(tg_context *ctx, tg_type type, int n_dims, const int64_t *ne);
TG_API tg_tensor *tg_new_tensor_1d(tg_context *ctx, tg_type type, int64_t ne0);
TG_API tg_tensor *tg_new_tensor_2d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1);
TG_API tg_tensor *tg_new_tensor_3d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1, int64_t ne2);
TG_API tg_tensor *tg_new_tensor_4d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                                   int64_t ne3);

TG_API tg_tensor *tg_set_name(tg_tensor *t, const char *name);  // returns t; NULL + error if too long
TG_API const char *tg_get_name(const tg_tensor *t);
TG_API tg_tensor *tg_get_tensor(tg_context *ctx, const char *name);  // first tensor of that name, or NULL

TG_API tg_type tg_tensor_type(const tg_tensor *t);
TG_API int tg_n_dims(const tg_tensor *t);  // 1 + index of the last dim with ne > 1
TG_API int64_t tg_ne(const tg_tensor *t, int dim);
TG_API size_t tg_nb(const tg_tensor *t, int dim);
TG_API int64_t tg_nelements(const tg_tensor *t);
TG_API size_t tg_nbytes(const tg_tensor *t);  // bytes spanned by the tensor's elements
TG_API bool tg_is_contiguous(const tg_tensor *t);
// Host pointer to the tensor's first element when its data is in host memory
// (a host context or the CPU backend); NULL otherwise.
TG_API void *tg_tensor_data(const tg_tensor *t);

// Copy bytes into / out of a tensor's storage (host or device), with bounds
// checks: offset + size must lie within tg_nbytes(t). The tensor must be
// contiguous and have storage (a host context, a backend buffer, or an
// intermediate of the last graph computed).
TG_API tg_status tg_tensor_set(tg_tensor *t, const void *data, size_t offset, size_t size);
TG_API tg_status tg_tensor_get(const tg_tensor *t, void *data, size_t offset, size_t size);

// ---------------------------------------------------------------------------
// Views (metadata only; the view shares its source's storage) and copies.
// view_Nd: offset and nb1..nb3 are bytes from a's first element; ne0 is
// element-contiguous (nb0 = type size) even when a is permuted, as in ggml.
// The view must lie within a's bytes (tg_nbytes(a)).

TG_API tg_tensor *tg_view_1d(tg_context *ctx, tg_tensor *a, int64_t ne0, size_t offset);
TG_API tg_tensor *tg_view_2d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
TG_API tg_tensor *tg_view_3d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1,
                             size_t nb2, size_t offset);
TG_API tg_tensor *tg_view_4d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                             size_t nb1, size_t nb2, size_t nb3, size_t offset);
// reshape: a must be contiguous; same element count.
TG_API tg_tensor *tg_reshape(tg_context *ctx, tg_tensor *a, int n_dims, const int64_t *ne);
TG_API tg_tensor *tg_reshape_2d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1);
TG_API tg_tensor *tg_reshape_3d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2);
TG_API tg_tensor *tg_reshape_4d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
// permute (ggml semantics): source dim i becomes result dim axis_i.
TG_API tg_tensor *tg_permute(tg_context *ctx, tg_tensor *a, int axis0, int axis1, int axis2, int axis3);
TG_API tg_tensor *tg_transpose(tg_context *ctx, tg_tensor *a);  // swap dims 0 and 1
// cont: contiguous copy of a (same type).
TG_API tg_tensor *tg_cont(tg_context *ctx, tg_tensor *a);
// cpy: copy a into b (same element count, any types; F32 compute). The
// result is a view of b that runs the copy; b is written in place.
TG_API tg_tensor *tg_cpy(tg_context *ctx, tg_tensor *a, tg_tensor *b);

// ---------------------------------------------------------------------------
// Ops. Results are F32 unless stated. Shapes in ne order.

// get_rows: a {E, V} (any type), ids {n0, n1, n2} I32 -> {E, n0, n1, n2}; row
// ids[i] of a. Ids outside [0, V) make tg_graph_compute fail, writing nothing.
TG_API tg_tensor *tg_get_rows(tg_context *ctx, tg_tensor *a, tg_tensor *ids);
// add / mul: elementwise a (+|*) b, b broadcast over a: a.ne[i] % b.ne[i] == 0.
TG_API tg_tensor *tg_add(tg_context *ctx, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_mul(tg_context *ctx, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_scale(tg_context *ctx, tg_tensor *a, float s);  // a * s
// rms_norm: x / sqrt(mean(x^2) + eps) over ne0.
TG_API tg_tensor *tg_rms_norm(tg_context *ctx, tg_tensor *a, float eps);
// l2_norm: x / sqrt(sum(x^2) + eps) over ne0 (the delta rule's q/k norm with eps 1e-6).
TG_API tg_tensor *tg_l2_norm(tg_context *ctx, tg_tensor *a, float eps);
TG_API tg_tensor *tg_silu(tg_context *ctx, tg_tensor *a);      // x * sigmoid(x); 0 at x = -inf
TG_API tg_tensor *tg_sigmoid(tg_context *ctx, tg_tensor *a);   // 1 / (1 + exp(-x))
TG_API tg_tensor *tg_softplus(tg_context *ctx, tg_tensor *a);  // log(1 + exp(x)), = x for x > 20
// swiglu: silu(a) * b, a and b of the same shape.
TG_API tg_tensor *tg_swiglu(tg_context *ctx, tg_tensor *a, tg_tensor *b);
// mul_mat: a {K, M, A2, A3} (F32/F16/BF16), b {K, N, B2, B3} (F32/F16/BF16)
// -> {M, N, B2, B3}; out[m, n] = sum_k a[k, m] * b[k, n]; a broadcast over
// dims 2 and 3 (B2 % A2 == 0, B3 % A3 == 0), as ggml_mul_mat.
TG_API tg_tensor *tg_mul_mat(tg_context *ctx, tg_tensor *a, tg_tensor *b);
// softmax over ne0 of (a * scale). -inf entries are a mask: 0 out, whatever
// the scale; a row of all -inf gives zeros; a NaN entry makes its row NaN.
TG_API tg_tensor *tg_softmax(tg_context *ctx, tg_tensor *a, float scale);
// attention: causal attention of new queries over a KV cache.
//   q {D, Hq, T, B} F32; k_cache {D, Hkv, L, B}, v_cache {Dv, Hkv, L, B}
//   (F32/F16/BF16); positions {T, B} I32 -> {Dv, Hq, T, B}.
//   Query (t, b) at position p attends to cache rows j with 0 <= j <= p and
//   j < L, with scores scale * q.k; query head h reads kv head h / (Hq/Hkv)
//   (Hq % Hkv == 0). A query with no valid row (p < 0) outputs zeros.
TG_API tg_tensor *tg_attention(tg_context *ctx, tg_tensor *q, tg_tensor *k_cache, tg_tensor *v_cache,
                               tg_tensor *positions, float scale);

typedef enum tg_rope_mode {
    TG_ROPE_INTERLEAVED = 0,  // pairs (2i, 2i+1): the seed's, ggml's NORMAL, llama.cpp's llama
    TG_ROPE_NEOX = 1,         // pairs (i, i + n_rot/2)
} tg_rope_mode;

typedef struct tg_rope_params {
    int n_rot;          // rotated dims: even, 1 < n_rot <= D; dims past n_rot are copied
    tg_rope_mode mode;
    float base;         // theta_i = p * base^(-2i/n_rot), used when no cos/sin tables
} tg_rope_params;

TG_API tg_rope_params tg_rope_default_params(int n_rot);  // INTERLEAVED, base 10000

// rope: a {D, H, T, B} F32, positions {T, B} I32 -> a rotated, same shape.
// Positions need not be in any table range (angles from base). Pair i of dims
// (e, o) becomes (x_e c - x_o s, x_e s + x_o c), c = cos(p theta_i), s = sin(..).
TG_API tg_tensor *tg_rope(tg_context *ctx, tg_tensor *a, tg_tensor *positions, const tg_rope_params *params);

// rope_kv_update: rotate new keys and write K and V rows into the caches, in
// place. k_cache, v_cache {D, Hkv, L, B} (F32/F16/BF16); k_new, v_new
// {D, Hkv, T, B} F32; positions {T, B} I32; cos, sin {n_rot/2, L_tab} F32 or
// both NULL (angles from params->base). For each (t, b), p = positions[t, b]:
//   k_cache[:, h, p, b] = rope(k_new[:, h, t, b], p);  v_cache[:, h, p, b] = v_new[:, h, t, b]
// p outside [0, L) or past the table, or repeated within a sequence, makes
// tg_graph_compute fail and writes nothing. Cost grows with T, not L. The
// result is a view of k_cache: use it (or k_cache, later in the graph) to read.
TG_API tg_tensor *tg_rope_kv_update(tg_context *ctx, tg_tensor *k_cache, tg_tensor *v_cache, tg_tensor *k_new,
                                    tg_tensor *v_new, tg_tensor *positions, tg_tensor *cos, tg_tensor *sin,
                                    const tg_rope_params *params);

typedef enum tg_delta_mode {
    TG_DELTA_GATED_LINEAR = 0,  // S = a S + beta k v^T
    TG_DELTA_GATED_DELTA = 1,   // S = a S; u = beta (v - S^T k); S += k u^T
} tg_delta_mode;

typedef enum tg_gate_kind {
    TG_GATE_LINEAR = 0,  // a = g (the seed's)
    TG_GATE_LOG = 1,     // a = exp(g) (fla's and ggml's)
} tg_gate_kind;

typedef struct tg_delta_params {
    tg_delta_mode mode;
    tg_gate_kind gate;
    float scale;     // output scale: o_t = scale * S^T q_t
    bool l2norm_qk;  // normalize q and k as x / sqrt(sum x^2 + 1e-6) first
} tg_delta_params;

// delta_rule: gated linear / gated delta-rule recurrence.
//   q, k {Dk, Hk, T, B}; v {Dv, Hv, T, B}; g, beta {Hv, T, B}; all F32;
//   Hv % Hk == 0 (value head h reads q/k head h / (Hv/Hk)); Dk, Dv in [1, 256].
//   state {Dk, Dv, Hv, B} (F32/F16/BF16; S[i][j] at i + j*Dk) or NULL.
//   -> o {Dv, Hv, T, B}. With a state, S starts from it and the final S is
//   written back in place; with NULL, S starts at zero and is dropped.
TG_API tg_tensor *tg_delta_rule(tg_context *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *g,
                                tg_tensor *beta, tg_tensor *state, const tg_delta_params *params);

// ---------------------------------------------------------------------------
// Graphs

// A graph made in ctx (freed with it). Nodes are the tensors reachable from
// the expanded outputs, run in creation order.
TG_API tg_graph *tg_graph_new(tg_context *ctx);
TG_API tg_status tg_graph_expand(tg_graph *g, tg_tensor *t);
TG_API int tg_graph_n_nodes(const tg_graph *g);                 // op nodes (views included)
TG_API tg_tensor *tg_graph_node(const tg_graph *g, int i);      // i-th node in run order

typedef struct tg_graph_stats {
    size_t planned_bytes;   // size of the planned buffer for intermediates (peak)
    size_t naive_bytes;     // sum of all intermediates' sizes (no reuse)
    size_t lower_bound;     // max over steps of the bytes live at that step
    int n_intermediates;    // tensors placed by the planner
    int n_inplace;          // of those, placed in place on their input
} tg_graph_stats;

// Plan the graph's memory (as tg_graph_compute would) and report its figures.
TG_API tg_status tg_graph_plan(tg_graph *g, tg_graph_stats *stats);
// Planner switch, for tests: when off, every intermediate gets its own memory.
TG_API tg_status tg_graph_set_planner(tg_graph *g, bool enabled);

// ---------------------------------------------------------------------------
// Backends and buffers

TG_API tg_backend *tg_backend_cpu(int n_threads);  // n_threads <= 0: hardware threads
// NULL + error when CUDA is not built in, no driver, or no such device.
TG_API tg_backend *tg_backend_cuda(int device);
TG_API void tg_backend_free(tg_backend *b);
TG_API const char *tg_backend_name(const tg_backend *b);  // "cpu" or "cuda:N"
TG_API bool tg_cuda_available(void);  // built with CUDA and at least one device present
// TF32 for mul_mat on CUDA (off by default: full FP32). No effect on the CPU.
TG_API tg_status tg_backend_set_tf32(tg_backend *b, bool enabled);

// Allocate storage on backend b for every tensor of ctx that has none and is
// not a view or an op result (weights, caches, states, inputs). The buffer
// holds that storage until tg_buffer_free; using a tensor afterwards is an error.
TG_API tg_buffer *tg_backend_alloc(tg_backend *b, tg_context *ctx);
TG_API void tg_buffer_free(tg_buffer *buf);
TG_API size_t tg_buffer_size(const tg_buffer *buf);
// Fill the whole buffer with one byte value (e.g. 0 to clear caches).
TG_API tg_status tg_buffer_clear(tg_buffer *buf, uint8_t value);

// Plan (if needed) and compute the graph on backend b. Persistent tensors
// (leaves) must have storage on b. Intermediates live in b's compute buffer
// until the next compute on b. On error, ops that write persistent tensors
// (caches, states, cpy targets) have written nothing if their input check
// failed; see the op's comment.
TG_API tg_status tg_graph_compute(tg_backend *b, tg_graph *g);
// Bytes of the backend's compute buffer (the planner's pool), for reports.
TG_API size_t tg_backend_compute_buffer_size(const tg_backend *b);

#ifdef __cplusplus
}
#endif

#endif  // TINYGML_H
