// mul_mat_q.cpp - fast mul_mat for quantized weights a {K, M, A2, A3} (Q8_0,
// Q4_0, Q4_K) and up to 4 tokens of any b (F32/F16/BF16; more tokens take
// mul_mat.cpp's F32 panels with the weights dequantized per block), as ggml
// does it on the CPU:
//   1. b's rows are quantized once per mul_mat to 8 bits per block
//      (quant_act.h: 32-value blocks for Q8_0/Q4_0, 256-value blocks with
//      per-16 sums for Q4_K), the rows split over the threads;
//   2. every thread claims blocks of weight rows from the node's counter (a
//      matrix-vector product is split over weight rows, so decode uses every
//      thread); for each group of up to 4 tokens, each weight row of the
//      block meets the group in one integer dot product per block (simd.h
//      q_dot), its unpacked weights reused across the group.
// The error against the exact product of the dequantized weights is the
// activations' rounding: at most sum over blocks of (d_a / 2) * sum |w| over
// the block (d_a = the block's absmax / 127), docs/ops.md. Groups and blocks
// are fixed by the shapes, so results do not depend on the thread count.
#include "cpu_fast.h"
#include "quant_act.h"

namespace {

bool is_k(tg_type t) { return t == TG_TYPE_Q4_K; }

// bytes of one activation row of K values
size_t act_row_bytes(tg_type wt, int64_t K) {
    return is_k(wt) ? (size_t)(K / TG_QK_K) * sizeof(tg_act_q8k) : (size_t)(K / 32) * sizeof(tg_act_q8);
}

// x * 0 is NaN exactly when x is NaN or inf
bool finite_block(const float *x, int n) {
    float z = 0.0f;
    for (int i = 0; i < n; i++) z += x[i] * 0.0f;
    return z == 0.0f;
}

// d = absmax / 127, q = round(x / d) (|q| <= 127); a NaN or inf in the block: d = NaN
float quantize_block(const float *x, int n, int8_t *q) {
    if (!finite_block(x, n)) {
        memset(q, 0, (size_t)n);
        return NAN;
    }
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;  // finite: no NaN rules needed
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) {
        const float v = std::nearbyint(x[i] * id);
        q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
    return d;
}

void quantize_act(tg_type wt, const float *x, int64_t K, void *dst) {
    if (is_k(wt)) {
        tg_act_q8k *y = (tg_act_q8k *)dst;
        for (int64_t b = 0; b < K / TG_QK_K; b++, x += TG_QK_K) {
            y[b].d = quantize_block(x, TG_QK_K, y[b].qs);
            for (int j = 0; j < TG_QK_K / 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += y[b].qs[16 * j + i];
                y[b].bsums[j] = (int16_t)s;
            }
        }
        return;
    }
    tg_act_q8 *y = (tg_act_q8 *)dst;
    for (int64_t b = 0; b < K / 32; b++, x += 32) y[b].d = quantize_block(x, 32, y[b].qs);
}

}  // namespace

int64_t tg_mul_mat_q_plan(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    if (tg_simd_qindex(a->type) < 0 || !tg_fast_type(b->type) || dst->type != TG_TYPE_F32) return -1;
    // rows of whole blocks (a's views keep them); dst element-contiguous rows
    if (a->nb[0] != tg_type_size(a->type) || !tg_rows_contig(dst)) return -1;
    const int64_t K = a->ne[0];
    return (int64_t)(tg_align64(act_row_bytes(a->type, K) * (size_t)tg_nrows(b)) +
                     (size_t)nth * tg_align64((size_t)K * 4));
}

void tg_mul_mat_q_run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    const size_t arb = act_row_bytes(a->type, K);
    char *act = (char *)c.work;
    float *tmp = (float *)(act + tg_align64(arb * (size_t)tg_nrows(b)) + (size_t)c.ith * tg_align64((size_t)K * 4));

    // 1. b's rows as 8-bit blocks, row r = n + N * (i2 + B2 * i3)
    int64_t r0, r1;
    tg_split_rows(tg_nrows(b), c.ith, c.nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t n = r % N, i2 = (r / N) % B2, i3 = r / (N * B2);
        const char *row = tg_ptr(b, 0, n, i2, i3);
        const float *x = (const float *)row;
        if (b->type != TG_TYPE_F32 || !tg_rows_contig(b)) {
            if (tg_rows_contig(b))
                simd.to_f32[tg_simd_type_index(b->type)](row, tmp, K);
            else
                for (int64_t k = 0; k < K; k++) tmp[k] = tg_get_f32(b, k, n, i2, i3);
            x = tmp;
        }
        quantize_act(a->type, x, K, act + (size_t)r * arb);
    }
    c.sync();

    // 2. blocks of weight rows x all tokens of one (i2, i3): about 4 blocks
    // per thread, 16 to 64 rows (a block's weights stay in L2 while every
    // group of 4 tokens passes over them)
    auto dotf = simd.q_dot[tg_simd_qindex(a->type)];
    const int64_t nblocks = K / tg_type_block_size(a->type);
    int64_t mbs = (M + 4 * c.nth - 1) / (4 * c.nth);
    mbs = mbs < 16 ? 16 : mbs > 64 && N > 4 ? 64 : mbs;
    const int64_t nmb = (M + mbs - 1) / mbs;
    for (int64_t item = c.claim(); item < nmb * B2 * B3; item = c.claim()) {
        const int64_t mb = item % nmb, bi = item / nmb, i2 = bi % B2, i3 = bi / B2;
        const char *abase = (const char *)a->data + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
        char *obase = (char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3];
        const int64_t m0 = mb * mbs, m1 = m0 + mbs < M ? m0 + mbs : M;
        for (int64_t n = 0; n < N; n += 4) {
            const int C = N - n < 4 ? (int)(N - n) : 4;
            const char *ag = act + (size_t)(bi * N + n) * arb;
            for (int64_t m = m0; m < m1; m++) {
                float out[4];
                dotf(abase + m * a->nb[1], ag, arb, nblocks, out, C);
                for (int j = 0; j < C; j++) *(float *)(obase + (n + j) * dst->nb[1] + m * 4) = out[j];
            }
        }
    }
}
