// copy.cpp - fast cont, cpy and get_rows.
//   cont / cpy: both sides fully contiguous (shapes may differ, the element
//     order is the flat one), or the same shape with contiguous rows (any
//     other strides: permutes that keep dim 0). Same type: bytes moved; else
//     converted through F32 in segments (F16/BF16 stores round to nearest
//     even and write NaN as the reference does). Other layouts: the reference.
//   get_rows: rows of a {E, V} with contiguous rows, converted to F32
//     (quantized rows: dequantized with the reference's tg_dequantize_row).
#include "cpu_fast.h"

namespace {

constexpr int64_t k_seg = 4096;

enum copy_kind { k_flat, k_rows };

int copy_kind_of(const tg_tensor *src, const tg_tensor *dst) {
    if (tg_type_is_quantized(src->type) || tg_type_is_quantized(dst->type)) return -1;  // the reference's block copy
    if (!tg_fast_type(src->type) && src->type != dst->type) return -1;
    if (!tg_fast_type(dst->type) && src->type != dst->type) return -1;
    if (tg_fully_contig(src) && tg_fully_contig(dst)) return k_flat;
    if (tg_same_shape(src, dst) && tg_rows_contig(src) && tg_rows_contig(dst)) return k_rows;
    return -1;
}

int64_t plan_copy(const tg_tensor *dst, int nth) {
    if (copy_kind_of(dst->src[0], dst) < 0) return -1;
    return (int64_t)nth * k_seg * 4;
}

// n elements from s (type st) to d (type dt)
void copy_run(const char *s, tg_type st, char *d, tg_type dt, int64_t n, float *buf, const tg_simd &simd) {
    if (st == dt) {
        memmove(d, s, (size_t)n * tg_type_size(st));
        return;
    }
    const size_t ss = tg_type_size(st), ds = tg_type_size(dt);
    for (int64_t i = 0; i < n; i += k_seg) {
        const int64_t m = n - i < k_seg ? n - i : k_seg;
        const float *f = (const float *)(s + i * ss);
        if (st != TG_TYPE_F32) {
            simd.to_f32[tg_simd_type_index(st)](s + i * ss, buf, m);
            f = buf;
        }
        simd.from_f32[tg_simd_type_index(dt)](f, d + i * ds, m);
    }
}

void run_copy(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *src = dst->src[0];
    float *buf = (float *)c.work + (size_t)c.ith * k_seg;
    const size_t ss = tg_type_size(src->type), ds = tg_type_size(dst->type);
    if (copy_kind_of(src, dst) == k_flat) {
        const int64_t n = tg_nelements(dst), nitems = (n + k_seg - 1) / k_seg;
        for (int64_t it = c.claim(); it < nitems; it = c.claim()) {
            const int64_t i0 = it * k_seg, m = n - i0 < k_seg ? n - i0 : k_seg;
            copy_run((const char *)src->data + i0 * ss, src->type, (char *)dst->data + i0 * ds, dst->type, m, buf,
                     simd);
        }
        return;
    }
    const int64_t nrows = tg_nrows(dst);
    for (int64_t r = c.claim(); r < nrows; r = c.claim())
        copy_run(tg_row_ptr(src, r), src->type, tg_row_ptr(dst, r), dst->type, dst->ne[0], buf, simd);
}

int64_t plan_get_rows(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0];
    const bool quant_rows = tg_type_is_quantized(a->type) && a->nb[0] == tg_type_size(a->type);
    if (!(quant_rows || tg_fast_type(a->type)) || !(quant_rows || tg_rows_contig(a)) || dst->type != TG_TYPE_F32 ||
        !tg_rows_contig(dst))
        return -1;
    return 0;
}
void run_get_rows(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *ids = dst->src[1];
    const int64_t nrows = tg_nrows(dst);
    if (tg_type_is_quantized(a->type)) {
        // a row's blocks, dequantized straight into dst's row (the reference's
        // conversion: bit-identical), rows claimed in parallel
        for (int64_t r = c.claim(); r < nrows; r = c.claim()) {
            const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
            const int32_t id = tg_get_i32(ids, i1, i2, i3, 0);
            tg_dequantize_row(a->type, (const char *)a->data + id * a->nb[1], (float *)tg_row_ptr(dst, r), dst->ne[0]);
        }
        return;
    }
    auto cvt = simd.to_f32[tg_simd_type_index(a->type)];
    for (int64_t r = c.claim(); r < nrows; r = c.claim()) {
        const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        const int32_t id = tg_get_i32(ids, i1, i2, i3, 0);  // checked before the graph ran
        cvt((const char *)a->data + id * a->nb[1], (float *)tg_row_ptr(dst, r), dst->ne[0]);
    }
}

}  // namespace

const tg_cpu_fast tg_fast_cont = {plan_copy, run_copy, nullptr};
const tg_cpu_fast tg_fast_cpy = {plan_copy, run_copy, nullptr};
namespace {
// the rows read and written, not the whole table they come from
double work_get_rows(const tg_tensor *dst) { return (double)tg_nelements(dst) * 2; }
}  // namespace
const tg_cpu_fast tg_fast_get_rows = {plan_get_rows, run_get_rows, work_get_rows};
