// copy.cpp - cont, cpy, get_rows, and the no-op kernel of views.
#include "ops.h"

tg_tensor *tg_cont(tg_context *ctx, tg_tensor *a) {
    if (!tg_check_not_null("cont", "a", a)) return nullptr;
    // a quantized tensor's blocks are copied whole: only as the contiguous bytes they are
    if (tg_type_is_quantized(a->type) && !tg_is_contiguous(a))
        TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[cont] a %s is quantized and not contiguous: only a contiguous copy is supported",
                     tg_shape_str(a).c_str());
    tg_tensor *srcs[1] = {a};
    return tg_new_op(ctx, "cont", TG_OP_CONT, a->type, 4, a->ne, srcs, 1);
}

// a and b address the same elements in the same order with the same type.
static bool same_view(tg_tensor *a, tg_tensor *b) {
    if (a->type != b->type || !tg_same_shape(a, b) || tg_view_root(a) != tg_view_root(b)) return false;
    for (int i = 0; i < TG_MAX_DIMS; i++)
        if (a->ne[i] > 1 && a->nb[i] != b->nb[i]) return false;
    size_t oa = 0, ob = 0;
    for (const tg_tensor *x = a; x->view_src; x = x->view_src) oa += x->view_offs;
    for (const tg_tensor *x = b; x->view_src; x = x->view_src) ob += x->view_offs;
    return oa == ob;
}

tg_tensor *tg_cpy(tg_context *ctx, tg_tensor *a, tg_tensor *b) {
    if (!tg_check_not_null("cpy", "a", a) || !tg_check_not_null("cpy", "b", b)) return nullptr;
    if (tg_nelements(a) != tg_nelements(b))
        TG_FAIL_NULL(TG_ERR_ARG, "[cpy] a %s and b %s differ in element count", tg_shape_str(a).c_str(),
                     tg_shape_str(b).c_str());
    if ((a->type == TG_TYPE_I32) != (b->type == TG_TYPE_I32))
        TG_FAIL_NULL(TG_ERR_ARG, "[cpy] cannot copy %s into %s", tg_type_name(a->type), tg_type_name(b->type));
    // quantized: raw blocks between two contiguous tensors of one type and shape only
    // (quantize with tg_quantize, dequantize through get_rows)
    if ((tg_type_is_quantized(a->type) || tg_type_is_quantized(b->type)) &&
        (a->type != b->type || a->ne[0] != b->ne[0] || !tg_is_contiguous(a) || !tg_is_contiguous(b)))
        TG_FAIL_NULL(TG_ERR_UNSUPPORTED,
                     "[cpy] a %s into b %s: a quantized copy must be between contiguous tensors of one type and ne0",
                     tg_shape_str(a).c_str(), tg_shape_str(b).c_str());
    // An element copy between overlapping views would read bytes it already
    // wrote (cpy(transpose(m), m)): refused, unless a and b are the same view.
    if (tg_storage_overlaps(a, b) && !same_view(a, b))
        TG_FAIL_NULL(TG_ERR_ARG,
                     "[cpy] a %s and b %s share storage (overlapping views of '%s'): copy through tg_cont(a) first",
                     tg_shape_str(a).c_str(), tg_shape_str(b).c_str(), tg_view_root(b)->name);
    tg_tensor *t = tg_new_view_of(ctx, "cpy", TG_OP_CPY, b, 4, b->ne, b->nb, 0);
    if (!t) return nullptr;
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

void tg_cpu_noop(const tg_tensor *, int, int) {}

// Copy src into dst element by element in row-major order of each, so shapes
// may differ when the counts agree. Same-type copies move raw bytes.
static void copy_elements(const tg_tensor *src, const tg_tensor *dst, int ith, int nth) {
    int64_t n = tg_nelements(dst), r0, r1;
    tg_split_rows(n, ith, nth, &r0, &r1);
    const size_t es = tg_type_size(dst->type);
    for (int64_t i = r0; i < r1; i++) {
        int64_t j = i;
        const int64_t s0 = j % src->ne[0], s1 = (j / src->ne[0]) % src->ne[1],
                      s2 = (j / (src->ne[0] * src->ne[1])) % src->ne[2], s3 = j / (src->ne[0] * src->ne[1] * src->ne[2]);
        const int64_t d0 = j % dst->ne[0], d1 = (j / dst->ne[0]) % dst->ne[1],
                      d2 = (j / (dst->ne[0] * dst->ne[1])) % dst->ne[2], d3 = j / (dst->ne[0] * dst->ne[1] * dst->ne[2]);
        if (src->type == dst->type)
            memcpy(tg_ptr(dst, d0, d1, d2, d3), tg_ptr(src, s0, s1, s2, s3), es);
        else
            tg_set_f32(dst, d0, d1, d2, d3, tg_get_f32(src, s0, s1, s2, s3));
    }
}

// Quantized (same type, both contiguous, checked at construction): the bytes, split by rows.
static void copy_blocks(const tg_tensor *src, const tg_tensor *dst, int ith, int nth) {
    const size_t row = tg_row_size(dst->type, dst->ne[0]);
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    if (r1 > r0) memcpy((char *)dst->data + r0 * row, (const char *)src->data + r0 * row, (size_t)(r1 - r0) * row);
}
static void copy_any(const tg_tensor *src, const tg_tensor *dst, int ith, int nth) {
    if (tg_type_is_quantized(dst->type))
        copy_blocks(src, dst, ith, nth);
    else
        copy_elements(src, dst, ith, nth);
}

void tg_cpu_cont(const tg_tensor *dst, int ith, int nth) { copy_any(dst->src[0], dst, ith, nth); }
void tg_cpu_cpy(const tg_tensor *dst, int ith, int nth) { copy_any(dst->src[0], dst, ith, nth); }

tg_tensor *tg_get_rows(tg_context *ctx, tg_tensor *a, tg_tensor *ids) {
    if (!tg_check_not_null("get_rows", "a", a) || !tg_check_type("get_rows", "ids", ids, TG_TYPE_I32)) return nullptr;
    if (a->type == TG_TYPE_I32) TG_FAIL_NULL(TG_ERR_ARG, "[get_rows] a must be a float or quantized type");
    if (a->ne[2] != 1 || a->ne[3] != 1)
        TG_FAIL_NULL(TG_ERR_ARG, "[get_rows] a must be 2-D {E, V}, got %s", tg_shape_str(a).c_str());
    if (ids->ne[3] != 1) TG_FAIL_NULL(TG_ERR_ARG, "[get_rows] ids must have at most 3 dims, got %s", tg_shape_str(ids).c_str());
    const int64_t ne[4] = {a->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]};
    tg_tensor *srcs[2] = {a, ids};
    return tg_new_op(ctx, "get_rows", TG_OP_GET_ROWS, TG_TYPE_F32, 4, ne, srcs, 2);
}

tg_status tg_check_get_rows(const tg_tensor *dst) {
    const tg_tensor *a = dst->src[0], *ids = dst->src[1];
    for (int64_t i2 = 0; i2 < ids->ne[2]; i2++)
        for (int64_t i1 = 0; i1 < ids->ne[1]; i1++)
            for (int64_t i0 = 0; i0 < ids->ne[0]; i0++) {
                int32_t id = tg_get_i32(ids, i0, i1, i2, 0);
                if (id < 0 || id >= a->ne[1])
                    return tg_err(TG_ERR_ARG, "[get_rows] id %d at (%lld,%lld,%lld) out of range [0, %lld)", id,
                                  (long long)i0, (long long)i1, (long long)i2, (long long)a->ne[1]);
            }
    return TG_OK;
}

// dst {E, n0, n1, n2}: one row per id (a quantized row dequantized whole, its
// blocks being contiguous whatever a's row stride)
void tg_cpu_get_rows(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *a = dst->src[0], *ids = dst->src[1];
    const bool quant = tg_type_is_quantized(a->type);
    std::vector<float> row(quant ? (size_t)a->ne[0] : 0);
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        const int32_t id = tg_get_i32(ids, i1, i2, i3, 0);
        if (quant) {
            tg_dequantize_row(a->type, tg_ptr(a, 0, id, 0, 0), row.data(), a->ne[0]);
            for (int64_t e = 0; e < dst->ne[0]; e++) tg_set_f32(dst, e, i1, i2, i3, row[e]);
            continue;
        }
        for (int64_t e = 0; e < dst->ne[0]; e++) tg_set_f32(dst, e, i1, i2, i3, tg_get_f32(a, e, id, 0, 0));
    }
}
