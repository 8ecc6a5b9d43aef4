// cpu_fast.h - the CPU fast paths, one tg_cpu_fast per op (plan + run), named
// in the op table (src/op_table.cpp) beside the reference kernels of
// ggml_ops/, which stay the oracle they are tested against. A plan returns -1
// for layouts or types a fast path does not handle: the reference runs then.
#pragma once
#include "internal.h"
#include "simd.h"

extern const tg_cpu_fast tg_fast_cont, tg_fast_cpy, tg_fast_get_rows;
extern const tg_cpu_fast tg_fast_add, tg_fast_mul, tg_fast_scale, tg_fast_swiglu;
extern const tg_cpu_fast tg_fast_silu, tg_fast_sigmoid, tg_fast_softplus;
extern const tg_cpu_fast tg_fast_rms_norm, tg_fast_l2_norm, tg_fast_softmax;
extern const tg_cpu_fast tg_fast_mul_mat, tg_fast_attention;
extern const tg_cpu_fast tg_fast_rope, tg_fast_rope_kv_update, tg_fast_delta_rule;

// mul_mat with quantized weights (mul_mat_q.cpp), reached through tg_fast_mul_mat
// (and a group of them through tg_mul_mat_group_run).
// Whether the integer path takes a quantized product of this many tokens:
// up to 4, or any number with the VNNI table or a q_gemm kernel for the type
// (otherwise mul_mat.cpp's F32 panels take it).
bool tg_mul_mat_q_takes(const tg_tensor *dst);
int64_t tg_mul_mat_q_plan(const tg_tensor *dst, int nth);
void tg_mul_mat_q_run(const tg_tensor *dst, const tg_cpu_ctx &c);
size_t tg_mul_mat_q_group_work(const tg_tensor *first, int nth);
void tg_mul_mat_q_group_run(tg_tensor *const *dsts, int n, const tg_cpu_ctx &c);

// Matrix-vector products run as one job (backend_cpu.cpp): t can join a group
// led by first (same F32 activation b read in place, 1 to 4 tokens, 2-D,
// 16-bit or F32 weights with contiguous rows, or weights of first's quantized
// type); tg_mul_mat_group_ok(t, t) says whether t can lead one. The group's
// outputs equal each node's alone. tg_mul_mat_group_work: the scratch bytes
// a group led by first needs (quantized: b's 8-bit rows, one copy per thread).
bool tg_mul_mat_group_ok(const tg_tensor *first, const tg_tensor *t);
size_t tg_mul_mat_group_work(const tg_tensor *first, int nth);
void tg_mul_mat_group_run(tg_tensor *const *dsts, int n, const tg_cpu_ctx &c);

// A group's row blocks (mbs_of(M, nth) rows each, member after member) in
// one claimed sequence: fn(d, m0, m1) for each block of member d this thread
// claims. At most 8 members.
template <typename Rows, typename Fn>
void tg_group_blocks(tg_tensor *const *dsts, int n, const tg_cpu_ctx &c, Rows mbs_of, Fn fn) {
    int64_t first[9] = {0};
    for (int d = 0; d < n && d < 8; d++) {
        const int64_t M = dsts[d]->src[0]->ne[1], mbs = mbs_of(M, c.nth);
        first[d + 1] = first[d] + (M + mbs - 1) / mbs;
    }
    int d = 0;
    for (int64_t item = c.claim(); item < first[n]; item = c.claim()) {
        while (item >= first[d + 1]) d++;
        const int64_t M = dsts[d]->src[0]->ne[1], mbs = mbs_of(M, c.nth), m0 = (item - first[d]) * mbs;
        fn(d, m0, m0 + mbs < M ? m0 + mbs : M);
    }
}

// Layout helpers
inline bool tg_fast_type(tg_type t) { return t == TG_TYPE_F32 || t == TG_TYPE_F16 || t == TG_TYPE_BF16; }
// The data pointer and every stride are whole multiples of the element size
// (the fast kernels load elements as typed values; a byte-misaligned view
// runs the reference, which reads through memcpy).
inline bool tg_elem_aligned(const tg_tensor *t) {
    const size_t ts = tg_type_size(t->type);
    if (ts == 0 || (uintptr_t)t->data % ts != 0) return false;
    for (int i = 0; i < TG_MAX_DIMS; i++)
        if (t->nb[i] % ts != 0) return false;
    return true;
}
// ne0 elements of each row are contiguous (and element-aligned)
inline bool tg_rows_contig(const tg_tensor *t) {
    return (t->ne[0] == 1 || t->nb[0] == tg_type_size(t->type)) && tg_elem_aligned(t);
}
inline bool tg_fully_contig(const tg_tensor *t) {
    if (!tg_elem_aligned(t)) return false;
    size_t nb = tg_type_size(t->type);
    for (int i = 0; i < TG_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != nb) return false;
        nb *= (size_t)t->ne[i];
    }
    return true;
}
// Start of row r = (i1, i2, i3) of t.
inline char *tg_row_ptr(const tg_tensor *t, int64_t r) {
    const int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}
inline size_t tg_align64(size_t n) { return (n + 63) / 64 * 64; }
