// elementwise.cpp - fast add, mul, swiglu, scale, silu, sigmoid, softplus on
// rows whose ne0 elements are contiguous (other strides free; b of the binary
// ops broadcast as ggml's rule, its row either full or one value). Work items
// are (row, segment of 8192 values) claimed from the node's counter, so one
// long row is split over threads too. F16/BF16 inputs are converted per
// segment into the thread's slice of the scratch. add/mul/scale use vector
// kernels; the transcendental ops run the reference's scalar formula on
// contiguous F32 (the same value per element, without the typed accessors).
#include "cpu_fast.h"

namespace {

constexpr int64_t k_seg = 8192;

bool rows_ok(const tg_tensor *t) { return tg_fast_type(t->type) && tg_rows_contig(t); }

// scratch: two segments of F32 per thread (a and b converted)
int64_t plan_unary(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0];
    if (dst->type != TG_TYPE_F32 || !tg_rows_contig(dst) || !rows_ok(a)) return -1;
    return (int64_t)nth * 2 * k_seg * 4;
}
int64_t plan_binary(const tg_tensor *dst, int nth) {
    const tg_tensor *b = dst->src[1];
    if (plan_unary(dst, nth) < 0 || !rows_ok(b) || (b->ne[0] != dst->ne[0] && b->ne[0] != 1)) return -1;
    return (int64_t)nth * 2 * k_seg * 4;
}

// Segment [i0, i0 + n) of t's row (i1, i2, i3) as F32: in place when t is
// F32, else converted into buf.
const float *seg_f32(const tg_tensor *t, int64_t i0, int64_t n, int64_t i1, int64_t i2, int64_t i3, float *buf,
                     const tg_simd &simd) {
    const char *p = tg_ptr(t, i0, i1, i2, i3);
    if (t->type == TG_TYPE_F32) return (const float *)p;
    simd.to_f32[tg_simd_type_index(t->type)](p, buf, n);
    return buf;
}

// f(a, b, y, n, simd) over every segment; b is NULL for unary ops
template <typename F> void for_segments(const tg_tensor *dst, const tg_cpu_ctx &c, bool binary, F f) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *b = binary ? dst->src[1] : nullptr;
    float *abuf = (float *)c.work + (size_t)c.ith * 2 * k_seg, *bbuf = abuf + k_seg;
    // segments of k_seg, shorter when there are fewer rows than threads (a
    // decode step's single row still splits over every thread)
    const int64_t ne0 = dst->ne[0];
    int64_t seg = k_seg;
    if (tg_nrows(dst) < c.nth) {
        seg = (ne0 + c.nth - 1) / c.nth;
        seg = seg < 256 ? 256 : seg > k_seg ? k_seg : (seg + 63) / 64 * 64;
    }
    const int64_t nseg = (ne0 + seg - 1) / seg, nitems = tg_nrows(dst) * nseg;
    for (int64_t it = c.claim(); it < nitems; it = c.claim()) {
        const int64_t r = it / nseg, i0 = it % nseg * seg, n = ne0 - i0 < seg ? ne0 - i0 : seg;
        const int64_t i1 = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        const float *av = seg_f32(a, i0, n, i1, i2, i3, abuf, simd);
        const float *bv = nullptr;
        bool b_scalar = false;
        if (b) {
            b_scalar = b->ne[0] == 1 && ne0 != 1;
            bv = seg_f32(b, b_scalar ? 0 : i0, b_scalar ? 1 : n, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3], bbuf,
                         simd);
        }
        f(av, bv, b_scalar, (float *)tg_ptr(dst, i0, i1, i2, i3), n, simd);
    }
}

template <typename G> void unary_scalar(const tg_tensor *dst, const tg_cpu_ctx &c, G g) {
    for_segments(dst, c, false, [&](const float *a, const float *, bool, float *y, int64_t n, const tg_simd &) {
        for (int64_t i = 0; i < n; i++) y[i] = g(a[i]);
    });
}

void run_add(const tg_tensor *dst, const tg_cpu_ctx &c) {
    for_segments(dst, c, true, [](const float *a, const float *b, bool bs, float *y, int64_t n, const tg_simd &s) {
        if (bs) s.add1(a, b[0], y, n);
        else s.add(a, b, y, n);
    });
}
void run_mul(const tg_tensor *dst, const tg_cpu_ctx &c) {
    for_segments(dst, c, true, [](const float *a, const float *b, bool bs, float *y, int64_t n, const tg_simd &s) {
        if (bs) s.mul1(a, b[0], y, n);
        else s.mul(a, b, y, n);
    });
}
// silu(-inf) is 0 (its limit), as in the reference
inline float silu(float x) { return x == -INFINITY ? 0.0f : x / (1.0f + expf(-x)); }
void run_swiglu(const tg_tensor *dst, const tg_cpu_ctx &c) {
    for_segments(dst, c, true, [](const float *a, const float *b, bool bs, float *y, int64_t n, const tg_simd &) {
        for (int64_t i = 0; i < n; i++) y[i] = silu(a[i]) * b[bs ? 0 : i];
    });
}
void run_scale(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const float s = tg_get_params<float>(dst);
    for_segments(dst, c, false, [s](const float *a, const float *, bool, float *y, int64_t n, const tg_simd &simd) {
        simd.mul1(a, s, y, n);
    });
}
void run_silu(const tg_tensor *dst, const tg_cpu_ctx &c) { unary_scalar(dst, c, silu); }
void run_sigmoid(const tg_tensor *dst, const tg_cpu_ctx &c) {
    unary_scalar(dst, c, [](float x) { return 1.0f / (1.0f + expf(-x)); });
}
void run_softplus(const tg_tensor *dst, const tg_cpu_ctx &c) {
    unary_scalar(dst, c, [](float x) { return x > 20.0f ? x : log1pf(expf(x)); });
}

}  // namespace

const tg_cpu_fast tg_fast_add = {plan_binary, run_add, nullptr};
const tg_cpu_fast tg_fast_mul = {plan_binary, run_mul, nullptr};
// the ops with an expf per element: ~16 elements' worth of work each, so a
// decode step's swiglu over ff 2048 values runs on every thread
namespace {
double work_transcendental(const tg_tensor *dst) { return (double)tg_nelements(dst) * 16; }
}  // namespace
const tg_cpu_fast tg_fast_swiglu = {plan_binary, run_swiglu, work_transcendental};
const tg_cpu_fast tg_fast_scale = {plan_unary, run_scale, nullptr};
const tg_cpu_fast tg_fast_silu = {plan_unary, run_silu, work_transcendental};
const tg_cpu_fast tg_fast_sigmoid = {plan_unary, run_sigmoid, work_transcendental};
const tg_cpu_fast tg_fast_softplus = {plan_unary, run_softplus, work_transcendental};
