// mul_mat.cpp - matrix product with ggml's shape rule.
#include "ops.h"

// a {K, M, A2, A3} (float or quantized), b {K, N, B2, B3} -> {M, N, B2, B3}
tg_tensor *tg_mul_mat(tg_context *ctx, tg_tensor *a, tg_tensor *b) {
    if (!tg_check_not_null("mul_mat", "a", a)) return nullptr;
    if (!tg_type_is_quantized(a->type) && !tg_check_float_type("mul_mat", "a", a)) return nullptr;
    if (!tg_check_float_type("mul_mat", "b", b)) return nullptr;
    if (a->ne[0] != b->ne[0])
        TG_FAIL_NULL(TG_ERR_ARG, "[mul_mat] inner dims differ: a %s, b %s", tg_shape_str(a).c_str(),
                     tg_shape_str(b).c_str());
    if (b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0)
        TG_FAIL_NULL(TG_ERR_ARG, "[mul_mat] a %s cannot broadcast over b %s in dims 2, 3", tg_shape_str(a).c_str(),
                     tg_shape_str(b).c_str());
    const int64_t ne[4] = {a->ne[1], b->ne[1], b->ne[2], b->ne[3]};
    tg_tensor *srcs[2] = {a, b};
    return tg_new_op(ctx, "mul_mat", TG_OP_MUL_MAT, TG_TYPE_F32, 4, ne, srcs, 2);
}

// One output row (fixed n, i2, i3) per work item: the b column is converted
// to F32 once, then dotted with every row of a (accumulated in double). A
// quantized a is dequantized row by row: the reference is the exact product
// of the dequantized weights (no activation quantization).
void tg_cpu_mul_mat(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0];
    const bool quant = tg_type_is_quantized(a->type);
    std::vector<float> bcol((size_t)K), arow((size_t)K);
    int64_t r0, r1;
    tg_split_rows(tg_nrows(dst), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r % dst->ne[1], i2 = (r / dst->ne[1]) % dst->ne[2], i3 = r / (dst->ne[1] * dst->ne[2]);
        const int64_t a2 = i2 / (b->ne[2] / a->ne[2]), a3 = i3 / (b->ne[3] / a->ne[3]);
        for (int64_t k = 0; k < K; k++) bcol[k] = tg_get_f32(b, k, n, i2, i3);
        for (int64_t m = 0; m < dst->ne[0]; m++) {
            double acc = 0.0;
            if (quant) {
                tg_dequantize_row(a->type, tg_ptr(a, 0, m, a2, a3), arow.data(), K);
                for (int64_t k = 0; k < K; k++) acc += (double)arow[k] * bcol[k];
                tg_set_f32(dst, m, n, i2, i3, (float)acc);
                continue;
            }
            for (int64_t k = 0; k < K; k++) acc += (double)tg_get_f32(a, k, m, a2, a3) * bcol[k];
            tg_set_f32(dst, m, n, i2, i3, (float)acc);
        }
    }
}
