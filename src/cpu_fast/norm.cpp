// norm.cpp - fast rms_norm, l2_norm and softmax over rows whose ne0 elements
// are contiguous (F32, or F16/BF16 converted per row into the thread's
// scratch). Rows are claimed from the node's counter.
//   rms_norm / l2_norm: the sum of squares in F32 with the vector kernel
//     (lane-wise FMA, a blocked sum), one F32 multiplier per row as the
//     reference; within the reductions' 1e-5 of the float64 oracle.
//   softmax: the reference's double-precision formula on contiguous data.
#include <algorithm>

#include "cpu_fast.h"

namespace {

int64_t plan(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0];
    if (dst->type != TG_TYPE_F32 || !tg_rows_contig(dst) || !tg_fast_type(a->type) || !tg_rows_contig(a)) return -1;
    return (int64_t)nth * (int64_t)tg_align64((size_t)a->ne[0] * 4);
}

// row r of a as F32 (in place or converted into buf)
const float *row_f32(const tg_tensor *a, int64_t r, float *buf, const tg_simd &simd) {
    const char *p = tg_row_ptr(a, r);
    if (a->type == TG_TYPE_F32) return (const float *)p;
    simd.to_f32[tg_simd_type_index(a->type)](p, buf, a->ne[0]);
    return buf;
}
float *scratch(const tg_tensor *dst, const tg_cpu_ctx &c) {
    return (float *)((char *)c.work + (size_t)c.ith * tg_align64((size_t)dst->src[0]->ne[0] * 4));
}

void norm(const tg_tensor *dst, const tg_cpu_ctx &c, bool mean) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0];
    const float eps = tg_get_params<float>(dst);
    const int64_t n = a->ne[0], nrows = tg_nrows(dst);
    float *buf = scratch(dst, c);
    for (int64_t r = c.claim(); r < nrows; r = c.claim()) {
        const float *x = row_f32(a, r, buf, simd);
        double sum = simd.sumsq(x, n);
        if (mean) sum /= (double)n;
        simd.mul1(x, (float)(1.0 / std::sqrt(sum + eps)), (float *)tg_row_ptr(dst, r), n);
    }
}
void run_rms(const tg_tensor *dst, const tg_cpu_ctx &c) { norm(dst, c, true); }
void run_l2(const tg_tensor *dst, const tg_cpu_ctx &c) { norm(dst, c, false); }

// softmax(scale * x): -inf entries are masked to 0, a row of all -inf gives
// 0s, a NaN makes its row NaN (the reference's rules and arithmetic).
void run_softmax(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0];
    const double scale = tg_get_params<float>(dst);
    const int64_t n = a->ne[0], nrows = tg_nrows(dst);
    float *buf = scratch(dst, c);
    for (int64_t r = c.claim(); r < nrows; r = c.claim()) {
        const float *x = row_f32(a, r, buf, simd);
        float *y = (float *)tg_row_ptr(dst, r);
        double mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            const double l = x[i] == -INFINITY ? -INFINITY : scale * x[i];
            mx = std::isnan(l) || std::isnan(mx) ? NAN : std::max(mx, l);
        }
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++)
            if (x[i] != -INFINITY) sum += std::exp(scale * x[i] - mx);
        for (int64_t i = 0; i < n; i++) {
            const double e = x[i] == -INFINITY ? 0.0 : std::exp(scale * x[i] - mx);
            y[i] = mx == -INFINITY ? 0.0f : (float)(e / sum);
        }
    }
}

}  // namespace

const tg_cpu_fast tg_fast_rms_norm = {plan, run_rms, nullptr};
const tg_cpu_fast tg_fast_l2_norm = {plan, run_l2, nullptr};
const tg_cpu_fast tg_fast_softmax = {plan, run_softmax, nullptr};
