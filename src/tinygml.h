// tinygml.h - the whole public C API of tinygml.
//
// A minimal ggml-style engine: build a graph of tensor ops in a context, plan
// its memory, compute it on the CPU (the reference) or on a CUDA GPU.
//
// Conventions (see README.md for more):
//  - Tensors have up to 4 dims in ggml order: ne[0] is the innermost,
//    contiguous dim; nb[i] are byte strides. PyTorch [B, T, H, D] is
//    ne = {D, H, T, B}.
//  - Compute is F32. F16/BF16 are storage types (weights, caches, states);
//    Q8_0/Q4_0/Q4_K are weight types (mul_mat's and get_rows' a only).
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
// Set this thread's message (printf format; start it with "[call] ") and
// return s: for libraries and apps layered on tinygml (the models use it), so
// that callers read every error in one place. A NULL fmt sets
// "[set_error] fmt is NULL" (and still returns s).
TG_API tg_status tg_set_error(tg_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---------------------------------------------------------------------------
// Types

typedef enum tg_type {
    TG_TYPE_F32 = 0,
    TG_TYPE_F16 = 1,
    TG_TYPE_BF16 = 2,
    TG_TYPE_I32 = 3,
    // Quantized weight types, ggml's block layouts (docs/ops.md "Quantized
    // types"): a row of ne[0] elements is ne[0] / block blocks, each one scale
    // (and min) plus packed integers. Allowed as mul_mat's a and get_rows' a
    // only; every other op refuses them.
    TG_TYPE_Q8_0 = 4,  // 32 elements in 34 bytes: f16 d, int8 q[32]; x = d * q
    TG_TYPE_Q4_0 = 5,  // 32 elements in 18 bytes: f16 d, 16 bytes of nibbles; x = d * (q - 8)
    TG_TYPE_Q4_K = 6,  // 256 elements in 144 bytes: f16 d, dmin, 8 sub-blocks of 32 with 6-bit
                       // scale and min; x = d * sc * q - dmin * m
    TG_TYPE_COUNT
} tg_type;

#define TG_MAX_DIMS 4
#define TG_MAX_NAME 64  // names are at most 63 bytes + NUL (as GGUF)

TG_API const char *tg_type_name(tg_type t);  // "f32", "f16", "bf16", "i32", "q8_0", "q4_0", "q4_k"; NULL if invalid
// Bytes per block: per element for F32/F16/BF16/I32 (block size 1), 34 / 18 /
// 144 for Q8_0 / Q4_0 / Q4_K; 0 if invalid.
TG_API size_t tg_type_size(tg_type t);
TG_API int64_t tg_type_block_size(tg_type t);  // elements per block: 1, 32 (Q8_0, Q4_0), 256 (Q4_K); 0 if invalid
TG_API bool tg_type_is_quantized(tg_type t);   // Q8_0, Q4_0, Q4_K
// Bytes of ne consecutive elements (a row of ne[0] = ne); 0 if t is invalid,
// ne < 0 or ne is not a multiple of the block size.
TG_API size_t tg_row_size(tg_type t, int64_t ne);
// Reference (de)quantization of n elements (n a multiple of the block size;
// src and dst do not overlap), for tools and tests. Quantizing is ggml's
// reference rounding: Q8_0 d = absmax / 127, q = round(x / d); Q4_0 d = v / -8
// for v the element of largest magnitude, q = min(15, trunc(x / d + 8.5));
// Q4_K: per sub-block scale and min fitted by ggml's iterative search, then
// 6-bit quantized against the super-block's d and dmin, every element then
// rounded to the nearest of its sub-block's 16 levels. Per element, Q8_0 and
// Q4_0 are within d/2 of x (Q4_0's values near -v, which would need level
// 16, within d) plus |q| times the F16 rounding of d (docs/ops.md). NaN or
// inf in a block gives a NaN scale (the block dequantizes to NaN). TG_ERR_ARG
// for a type that is not quantized, NULL pointers or a bad n.
TG_API tg_status tg_quantize(tg_type t, const float *src, void *dst, int64_t n);
TG_API tg_status tg_dequantize(tg_type t, const void *src, float *dst, int64_t n);

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
// tg_free frees the graphs made in ctx too. Its tensors and graphs are then
// refused by every call ("... its context was freed"), not dereferenced, and
// so are views and ops of other contexts that reach its tensors (except
// tg_nelements, tg_nbytes and tg_is_contiguous, which do not check); freeing
// a context twice is ignored.
TG_API void tg_free(tg_context *ctx);
TG_API size_t tg_used_mem(const tg_context *ctx);
// Bytes of arena one tensor's metadata takes (to size no_alloc contexts).
TG_API size_t tg_tensor_overhead(void);
TG_API size_t tg_graph_overhead(void);

// ---------------------------------------------------------------------------
// Tensors

// A quantized type needs ne[0] a multiple of its block size ("[new_tensor]
// ne[0] 33 is not a multiple of q4_0's block size 32"); then nb[0] is the
// bytes of one block, nb[1] = tg_row_size(type, ne[0]), nb[i+1] = nb[i] * ne[i].
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
// intermediate of the last graph computed). tg_tensor_set has copied `data`
// when it returns; on CUDA a small set (up to 64 KiB) may still be on its way
// to the device, ordered before any later compute, get or set.
TG_API tg_status tg_tensor_set(tg_tensor *t, const void *data, size_t offset, size_t size);
TG_API tg_status tg_tensor_get(const tg_tensor *t, void *data, size_t offset, size_t size);

// ---------------------------------------------------------------------------
// Views (metadata only; the view shares its source's storage) and copies.
// view_Nd: offset and nb1..nb3 are bytes from a's first element; ne0 is
// element-contiguous (nb0 = type size) even when a is permuted, as in ggml.
// The view must lie within a's bytes (tg_nbytes(a)). A view of a quantized
// tensor keeps whole rows: ne0 == a's ne0, offset and nb1..nb3 multiples of
// its row size; reshape must keep ne0; permute/transpose may not move dim 0.

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
// cont: contiguous copy of a (same type). A quantized a must be contiguous
// already (else TG_ERR_UNSUPPORTED).
TG_API tg_tensor *tg_cont(tg_context *ctx, tg_tensor *a);
// cpy: copy a into b (same element count, any types; F32 compute). a and b
// may not share bytes (cpy(transpose(m), m) is refused: copy tg_cont(a)),
// unless a is the very same view as b. From or to a quantized tensor: only
// a same-type copy between contiguous tensors of one ne0 (else
// TG_ERR_UNSUPPORTED; quantize with tg_quantize). The
// result is a view of b that runs the copy; b is written in place.
TG_API tg_tensor *tg_cpy(tg_context *ctx, tg_tensor *a, tg_tensor *b);

// ---------------------------------------------------------------------------
// Ops. Results are F32 unless stated. Shapes in ne order.

// get_rows: a {E, V} (F32/F16/BF16 or quantized), ids {n0, n1, n2} I32 ->
// {E, n0, n1, n2}; row ids[i] of a (a quantized row dequantized exactly). Ids outside [0, V) make tg_graph_compute fail, writing nothing.
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
// mul_mat: a {K, M, A2, A3} (F32/F16/BF16 or quantized), b {K, N, B2, B3}
// (F32/F16/BF16) -> {M, N, B2, B3}; out[m, n] = sum_k a[k, m] * b[k, n]; a
// broadcast over dims 2 and 3 (B2 % A2 == 0, B3 % A3 == 0), as ggml_mul_mat.
// With a quantized a the product is of the dequantized weights; for up to 4
// tokens (decode) the CPU fast path quantizes b to 8 bits per block first, as
// ggml does (docs/ops.md: per output at most sum over blocks of
// absmax(b block) / 254 * sum |w| more error than the exact product); so
// does CUDA for N <= 8 columns, and for more it rounds the dequantized
// weights and b to F16 (tensor cores).
// Every other op refuses quantized inputs ("[add] a is q4_0: quantized
// tensors are only supported as mul_mat's a and get_rows' a").
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
// place (the fused RoPE + KV-cache update).
//   k_cache, v_cache {D, Hkv, L, B}, same shape, each F32, F16 or BF16 (K and
//   V types may differ); k_new, v_new {D, Hkv, T, B} F32; positions {T, B} I32;
//   cos, sin {n_rot/2, L_tab} F32 (row p: the angles of position p), or both
//   NULL: theta_i = p * params->base^(-2i/n_rot). params->n_rot even, <= D.
// For each sequence b, token t, kv head h, with p = positions[t, b]:
//   k_cache[:, h, p, b] = rope(k_new[:, h, t, b], p)  (pairs by params->mode
//                         over dims < n_rot: (x_e c - x_o s, x_e s + x_o c);
//                         dims >= n_rot copied)
//   v_cache[:, h, p, b] = v_new[:, h, t, b]
// Values are rounded to the cache type (nearest even); every other cache row
// keeps its bytes. Strided views work anywhere; the caches may share no bytes
// with each other or with an input. Positions are checked before the op writes
// (before any op of the graph writes when positions is a persistent tensor
// that no earlier node of the graph writes; otherwise right before this op,
// on the values it reads):
// p outside [0, L), p >= L_tab with tables, or p repeated within a sequence
// makes tg_graph_compute return TG_ERR_ARG ("[rope_kv_update] position 130 out
// of range [0, 128) in sequence 1 ...") with both caches untouched. Cost grows
// with T*Hkv*B, never with L. The result is a view of k_cache: read K through
// it (or through k_cache, or v_cache, by ops created after it).
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

// Which algorithm computes the recurrence (the precision switch, as ggml's
// mul_mat_set_prec): a zero-initialized field (C aggregate init) is AUTO.
typedef enum tg_delta_algo {
    TG_DELTA_ALGO_AUTO = 0,     // CPU: the scan; CUDA: the chunked tensor-core form where it measured
                                // faster (T >= 64 and Dk >= 64; docs/ops.md), else the scan
    TG_DELTA_ALGO_SCAN = 1,     // the exact F32 sequential scan on every backend
    TG_DELTA_ALGO_CHUNKED = 2,  // the chunked form at any T (CPU: the chunked F32 reference; CUDA: tensor
                                // cores, or the scan where the head dims are not covered)
} tg_delta_algo;

typedef struct tg_delta_params {
    tg_delta_mode mode;
    tg_gate_kind gate;
    float scale;     // output scale: o_t = scale * S^T q_t
    bool l2norm_qk;  // normalize q and k as x / sqrt(sum x^2 + 1e-6) first
    tg_delta_algo algo;  // AUTO (0), SCAN or CHUNKED
    tg_type out_type;    // o's type: F32 (0, the default), F16 or BF16 (rounded once, at the store)
} tg_delta_params;

// delta_rule: gated linear / gated delta-rule recurrence.
//   q, k {Dk, Hk, T, B}; v {Dv, Hv, T, B}: F32, F16 or BF16 (converted to F32 on load);
//   g, beta {Hv, T, B} F32;
//   Hv % Hk == 0 (value head h reads q/k head h / (Hv/Hk)); Dk, Dv in [1, 256];
//   state {Dk, Dv, Hv, B} F32/F16/BF16 (S[i][j] at i + j*Dk) or NULL.
//   -> o {Dv, Hv, T, B} of params->out_type (F32, F16 or BF16; sums are F32 either way).
// Per sequence b and value head h, S (Dk x Dv, F32) runs over t = 0 .. T-1:
//   a = g (LINEAR gate) or exp(g) (LOG gate);  S = a*S
//   GATED_LINEAR: u = beta * v_t               GATED_DELTA: u = beta * (v_t - S^T k_t)
//   S = S + k_t u^T;  o_t = scale * S^T q_t
// (q_t, k_t first normalized as x / sqrt(sum x^2 + 1e-6) when l2norm_qk.)
// With a state, S starts from it and the final S is written back in place
// (rounded to its type), so decode steps continue the sequence: with an F32
// state, T tokens at once equal T calls of one token each. The state must be
// persistent (a leaf or a view of one) and share no bytes with an input.
// With NULL, S starts at zero and is dropped.
// Numbers: any beta is allowed. A zero entry of S stays zero under any non-NaN
// gate, so g = -inf or -1e4 (a = 0) forgets the state, and a gate that
// overflows to inf (LOG g > ~88) on a zero state is still exact. A gate that
// overflows on a nonzero state gives inf/NaN (beyond F32) in that head and
// sequence only. A NaN input reaches the outputs and state entries that
// depend on it, in its own sequence and value heads only (a NaN g or beta:
// the whole S of that head from that token on); reset the state to recover.
// The chunked form (algo, above; docs/ops.md) computes the same recurrence per
// chunk of 64 tokens with matrix products: CUDA rounds the products' inputs to
// TF32 (relative error ~1e-3 vs float64 with l2-normalized q, k), and T tokens
// at once then equal T single steps only to that tolerance (bit for bit with
// SCAN). It handles zero gates (LINEAR g = 0, LOG g = -inf) exactly; the
// infinite-gate-on-zero-state rule above holds for the scan only.
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
// Frees the backend, its compute buffer and the storage of every buffer it
// allocated: their handles stay valid but empty (tensors in them are refused)
// until tg_buffer_free. Freeing twice is ignored.
TG_API void tg_backend_free(tg_backend *b);
TG_API const char *tg_backend_name(const tg_backend *b);  // "cpu" or "cuda:N"
TG_API bool tg_backend_is_host(const tg_backend *b);      // computes on host memory (the CPU); false if freed
TG_API bool tg_cuda_available(void);  // built with CUDA and at least one device present
// TF32 for mul_mat on CUDA (off by default: full FP32). No effect on the CPU.
TG_API tg_status tg_backend_set_tf32(tg_backend *b, bool enabled);

// Allocate storage on backend b for every tensor of ctx that has none and is
// not a view or an op result (weights, caches, states, inputs). The buffer
// holds that storage until tg_buffer_free; using a tensor afterwards is an error.
TG_API tg_buffer *tg_backend_alloc(tg_backend *b, tg_context *ctx);
// A buffer over caller memory, for tensors used in place with no copy (the
// weights of a memory-mapped file: tg_gguf_open_mmap). Host backends (the
// CPU) only: a CUDA backend refuses (TG_ERR_UNSUPPORTED; upload with
// tg_backend_alloc + tg_tensor_set, which streams from the pointer). The
// buffer starts empty; tg_buffer_place puts tensors in it.
// Lifetime: the memory stays the caller's: tinygml never frees or unmaps it
// (tg_buffer_free and tg_backend_free only drop the buffer's handle and its
// tensors' storage). It must stay valid (a map open: tg_gguf_close after
// tg_buffer_free) as long as the buffer is live and no backend call uses it.
// read_only: the memory must never be written (a PROT_READ map). Every write
// tinygml would make into it is refused with TG_ERR_ARG instead: tg_tensor_set
// and tg_buffer_clear on it, and tg_graph_compute of a graph with an op that
// writes a tensor of it in place (cpy into it, rope_kv_update's caches,
// delta_rule's state), refused before any node runs ("... is in read-only
// memory"). With read_only false the caller's memory must be writable.
TG_API tg_buffer *tg_backend_buffer_from_host_ptr(tg_backend *b, void *ptr, size_t size, bool read_only);
// Place tensor t of a no_alloc context at byte offset of buf (a buffer from
// tg_backend_buffer_from_host_ptr): t's data is then ptr + offset, used in
// place. t must be a leaf (not a view or op result) without live storage; the
// range [offset, offset + tg_nbytes(t)) must lie within the buffer and
// ptr + offset be aligned to t's element size. Views of t made earlier see the
// storage. Tensors not placed can get storage from tg_backend_alloc as usual.
TG_API tg_status tg_buffer_place(tg_buffer *buf, tg_tensor *t, size_t offset);
TG_API bool tg_buffer_is_read_only(const tg_buffer *buf);  // false for NULL or freed
// Either before or after the buffer's backend is freed; twice is ignored.
TG_API void tg_buffer_free(tg_buffer *buf);
TG_API size_t tg_buffer_size(const tg_buffer *buf);
// Fill the whole buffer with one byte value (e.g. 0 to clear caches).
TG_API tg_status tg_buffer_clear(tg_buffer *buf, uint8_t value);

// Plan (if needed) and compute the graph on backend b. Persistent tensors
// (leaves) must have storage on b. Intermediates live in b's compute buffer
// until the next successful compute on b. On error, ops that write persistent
// tensors (caches, states, cpy targets) have written nothing if their input
// check failed; see the op's comment. A failed compute never replaces the
// compute buffer and puts its nodes' storage back, so the previous graph's
// results stay readable (nodes it shares with the failed one too); when the
// failure is a bad position or id in a persistent input (found before any
// node runs), their values are unchanged too on the CPU backend, and on CUDA
// when the failed graph needed a larger buffer than the previous one.
// On CUDA, computing the same graph again (same tensors, same buffers)
// replays its launches as one CUDA graph, captured on its second consecutive
// (or third) compute; values in tensors may change freely between computes.
// Environment TG_CUDA_GRAPHS=0, read when the backend is created, turns this
// off (docs/ops.md). The CUDA backend also fuses adjacent nodes (rms_norm*w,
// mul_mat+add, gate/up+swiglu, products sharing b; float or quantized
// weights) with results identical to the unfused kernels'; TG_CUDA_FUSE=0
// turns that off.
TG_API tg_status tg_graph_compute(tg_backend *b, tg_graph *g);
// Bytes of the backend's compute buffer (the planner's pool), for reports.
TG_API size_t tg_backend_compute_buffer_size(const tg_backend *b);
// Reserve b's compute buffer for g, as ggml-alloc's reserve: plan g (as
// tg_graph_compute would) and grow the buffer now to at least g's planned
// bytes. Computes nothing; g's leaves need no storage yet. Reserve once with
// the largest graph a session will run (its longest prompt): every compute
// whose plan fits then runs in the same buffer, so the buffer never grows or
// moves mid-session. Growing here replaces the buffer: outputs of earlier
// computes on b are invalidated (reading them fails cleanly); a reserve that
// fits (or fails) changes nothing. TG_ERR_OOM when the buffer cannot grow.
TG_API tg_status tg_backend_reserve(tg_backend *b, tg_graph *g);

// ---------------------------------------------------------------------------
// GGUF files (version 3, little-endian): a strict reader and a writer.
//
// The reader checks the header (magic, version, counts against the file's
// size) from the first 24 bytes, then loads the whole file into host memory
// (or maps it: tg_gguf_open_mmap) and validates it before it returns: every count and length against the bytes left, every size with
// overflow checks, value and tensor types, names (unique, 1..63 bytes, no
// NUL), keys (unique, 1..65535 bytes, no NUL), general.alignment (uint32, a
// power of two, a multiple of 8, at most 1 MiB; default 32), shapes (1..4 dims, each >= 1),
// offsets (aligned, in the data section, not overlapping). A bad file gives
// NULL and a message naming what and where, e.g. "[gguf_open] 'm.gguf':
// tensor 3 'blk.0.attn_q.weight': offset 96 is not a multiple of alignment 64".
// Tensor types: ggml F32 (0), F16 (1), BF16 (30), I32 (26), Q8_0 (8), Q4_0
// (2) and Q4_K (12); a quantized tensor whose ne[0] is not a multiple of its
// block size is a format error, its bytes are rows * tg_row_size(type, ne[0]).
// Any other ggml type (other quantizations, ...) is rejected
// (TG_ERR_UNSUPPORTED) with its id and name in the message.

typedef struct tg_gguf tg_gguf;                // a parsed, validated file (reader)
typedef struct tg_gguf_writer tg_gguf_writer;  // key/values + tensors to write

typedef enum tg_gguf_type {  // metadata value types (the file's ids)
    TG_GGUF_INVALID = -1,    // returned for an out-of-range index
    TG_GGUF_UINT8 = 0,
    TG_GGUF_INT8 = 1,
    TG_GGUF_UINT16 = 2,
    TG_GGUF_INT16 = 3,
    TG_GGUF_UINT32 = 4,
    TG_GGUF_INT32 = 5,
    TG_GGUF_FLOAT32 = 6,
    TG_GGUF_BOOL = 7,  // one byte, 0 or 1
    TG_GGUF_STRING = 8,
    TG_GGUF_ARRAY = 9,  // of one non-array type
    TG_GGUF_UINT64 = 10,
    TG_GGUF_INT64 = 11,
    TG_GGUF_FLOAT64 = 12,
    TG_GGUF_TYPE_COUNT = 13
} tg_gguf_type;

TG_API const char *tg_gguf_type_name(tg_gguf_type t);  // "uint8" .. "float64"; NULL if invalid

// Reader. Strings and pointers returned stay valid until tg_gguf_close.
TG_API tg_gguf *tg_gguf_open(const char *path);                     // NULL + error ("[gguf_open] ...")
TG_API tg_gguf *tg_gguf_open_memory(const void *data, size_t size);  // copies data; NULL + error
// Memory-mapped reader: maps the file read-only (mmap PROT_READ, MAP_PRIVATE)
// instead of reading it, and validates it from the map with every check of
// tg_gguf_open, in the same order, before it returns; a file that fails is
// unmapped and gives NULL + "[gguf_open_mmap] 'path': ..." (the same message
// otherwise). Opening costs no copy: pages are read from the page cache when
// first touched, and the process's file-backed RSS grows as they are (its
// anonymous RSS does not). tg_gguf_tensor_data then points into the map
// (page-aligned file start, so tensors keep the alignment guarantee below);
// the bytes are read-only: writing through them faults (SIGSEGV). Metadata
// (keys, strings, arrays) is copied out at open, as for tg_gguf_open.
// The map lives until tg_gguf_close: close it only after every buffer made
// over its bytes (tg_backend_buffer_from_host_ptr) is freed.
// SIGBUS: the map follows the file. If the file is truncated (or rewritten
// in place) while mapped, touching a page past its new end raises SIGBUS in
// whatever thread touches it (a compute, a tensor_get), which kills the
// process by default; MAP_PRIVATE does not protect against this (it only
// keeps this process's writes private), and a page the file changes under
// the map may show the new bytes. Replacing the file by rename (a new inode)
// is safe: the map keeps the old file. Callers that cannot keep their files
// immutable while a session runs should read instead (tg_gguf_open, or
// tinygml-run --no-mmap), or install a SIGBUS handler of their own.
TG_API tg_gguf *tg_gguf_open_mmap(const char *path);
TG_API bool tg_gguf_is_mapped(const tg_gguf *g);  // opened by tg_gguf_open_mmap (false for NULL)
// The whole file's bytes as loaded (the map, or the reader's copy), *size
// bytes (size may be NULL); NULL + error for a NULL g. Tensor i's bytes are at
// tg_gguf_tensor_data(g, i) - tg_gguf_file_data(g, NULL) within it.
TG_API const void *tg_gguf_file_data(const tg_gguf *g, size_t *size);
TG_API void tg_gguf_close(tg_gguf *g);                               // NULL is fine
TG_API uint32_t tg_gguf_version(const tg_gguf *g);                   // 3
TG_API size_t tg_gguf_alignment(const tg_gguf *g);                   // general.alignment, or 32
TG_API size_t tg_gguf_data_offset(const tg_gguf *g);                 // file offset of the data section
TG_API int64_t tg_gguf_n_kv(const tg_gguf *g);                       // key/value pairs, in file order
TG_API const char *tg_gguf_kv_key(const tg_gguf *g, int64_t i);      // key of pair i; NULL if out of range
TG_API tg_gguf_type tg_gguf_kv_type(const tg_gguf *g, int64_t i);    // TG_GGUF_INVALID if out of range
TG_API int64_t tg_gguf_find_key(const tg_gguf *g, const char *key);  // index of key, or -1 if absent

// Typed getters by key: TG_OK, or TG_ERR_FORMAT naming the key when it is
// missing, of another type or out of the target's range (NULL g/key/out:
// TG_ERR_ARG). *out is written only on TG_OK.
// Integer getters accept any integer type whose value fits the target.
TG_API tg_status tg_gguf_get_u32(const tg_gguf *g, const char *key, uint32_t *out);
TG_API tg_status tg_gguf_get_i32(const tg_gguf *g, const char *key, int32_t *out);
TG_API tg_status tg_gguf_get_u64(const tg_gguf *g, const char *key, uint64_t *out);
TG_API tg_status tg_gguf_get_i64(const tg_gguf *g, const char *key, int64_t *out);
TG_API tg_status tg_gguf_get_f32(const tg_gguf *g, const char *key, float *out);   // FLOAT32 or FLOAT64
TG_API tg_status tg_gguf_get_f64(const tg_gguf *g, const char *key, double *out);  // FLOAT32 or FLOAT64
TG_API tg_status tg_gguf_get_bool(const tg_gguf *g, const char *key, bool *out);
// STRING value as a NUL-terminated string (a value holding a NUL byte reads as cut there).
TG_API tg_status tg_gguf_get_str(const tg_gguf *g, const char *key, const char **out);
// ARRAY: element type and count (each out may be NULL). Numeric and bool
// arrays: *data = packed little-endian elements, aligned for the element type
// (NULL when n is 0); string arrays: *data = NULL, read them with get_arr_str.
TG_API tg_status tg_gguf_get_arr(const tg_gguf *g, const char *key, tg_gguf_type *elem_type, uint64_t *n,
                                 const void **data);
TG_API tg_status tg_gguf_get_arr_str(const tg_gguf *g, const char *key, uint64_t i, const char **out);  // element i

// Tensors, in file order. ne has 4 entries; dims past n_dims are 1. Each out may be NULL.
TG_API int64_t tg_gguf_n_tensors(const tg_gguf *g);
TG_API int64_t tg_gguf_find_tensor(const tg_gguf *g, const char *name);  // index, or -1 if absent
TG_API tg_status tg_gguf_tensor_info(const tg_gguf *g, int64_t i, const char **name, tg_type *type, int *n_dims,
                                     int64_t ne[4], size_t *nbytes);
// Host pointer to tensor i's bytes in the loaded data section, aligned to
// min(alignment, 64) bytes; NULL (+ error) if i is out of range.
TG_API const void *tg_gguf_tensor_data(const tg_gguf *g, int64_t i);

// Writer. Keys keep the order of their first set; setting a key again
// replaces its value (and type). general.alignment may only be set with
// tg_gguf_set_u32 to a power of two that is a multiple of 8, at most 1 MiB; tensor data is
// laid out at that alignment (default 32). Errors: ARG (+ message), OOM.
TG_API tg_gguf_writer *tg_gguf_writer_new(void);  // NULL + error on OOM
TG_API void tg_gguf_writer_free(tg_gguf_writer *w);
TG_API tg_status tg_gguf_set_u8(tg_gguf_writer *w, const char *key, uint8_t v);
TG_API tg_status tg_gguf_set_i8(tg_gguf_writer *w, const char *key, int8_t v);
TG_API tg_status tg_gguf_set_u16(tg_gguf_writer *w, const char *key, uint16_t v);
TG_API tg_status tg_gguf_set_i16(tg_gguf_writer *w, const char *key, int16_t v);
TG_API tg_status tg_gguf_set_u32(tg_gguf_writer *w, const char *key, uint32_t v);
TG_API tg_status tg_gguf_set_i32(tg_gguf_writer *w, const char *key, int32_t v);
TG_API tg_status tg_gguf_set_u64(tg_gguf_writer *w, const char *key, uint64_t v);
TG_API tg_status tg_gguf_set_i64(tg_gguf_writer *w, const char *key, int64_t v);
TG_API tg_status tg_gguf_set_f32(tg_gguf_writer *w, const char *key, float v);
TG_API tg_status tg_gguf_set_f64(tg_gguf_writer *w, const char *key, double v);
TG_API tg_status tg_gguf_set_bool(tg_gguf_writer *w, const char *key, bool v);
TG_API tg_status tg_gguf_set_str(tg_gguf_writer *w, const char *key, const char *v);  // copies v
// Numeric or bool array of n packed little-endian elements (copied; data may be NULL if n is 0).
TG_API tg_status tg_gguf_set_arr(tg_gguf_writer *w, const char *key, tg_gguf_type elem_type, uint64_t n,
                                 const void *data);
TG_API tg_status tg_gguf_set_arr_str(tg_gguf_writer *w, const char *key, uint64_t n, const char *const *strs);
// Tensor of n_dims (1..4) dims ne (each >= 1); rows * tg_row_size(type, ne[0]) bytes copied from
// data (prod(ne) * tg_type_size(type) for the unquantized types; a quantized ne[0] must be a
// multiple of the block size).
TG_API tg_status tg_gguf_add_tensor(tg_gguf_writer *w, const char *name, tg_type type, int n_dims,
                                    const int64_t *ne, const void *data);
// Streamed tensor: the same checks, but no bytes are held. At write time the
// writer calls fill(user, dst, offset, n) for consecutive pieces [offset,
// offset + n) of the tensor's bytes, in increasing order, each at most 4 MiB;
// fill writes n bytes to dst and returns TG_OK, or an error (+ message) that
// fails the write. user (and what fill reads) must stay valid until the last
// write. Lets a multi-GB file be written with a few MiB of memory.
typedef tg_status (*tg_gguf_fill_fn)(void *user, void *dst, size_t offset, size_t n);
TG_API tg_status tg_gguf_add_tensor_fill(tg_gguf_writer *w, const char *name, tg_type type, int n_dims,
                                         const int64_t *ne, tg_gguf_fill_fn fill, void *user);
// Write the file: to PATH.tmp-PID-N, renamed over path once complete (a link
// is followed). An IO or fill error removes the temporary file and leaves
// what was at path as it was; a path that is not a regular file (a FIFO, a
// device, a directory) is refused (TG_ERR_IO), never opened.
TG_API tg_status tg_gguf_write(const tg_gguf_writer *w, const char *path);
// Write into a malloc'ed buffer; the caller frees *data with tg_gguf_free_memory.
TG_API tg_status tg_gguf_write_memory(const tg_gguf_writer *w, void **data, size_t *size);
TG_API void tg_gguf_free_memory(void *data);

#ifdef __cplusplus
}
#endif

#endif  // TINYGML_H
