// mul_mat.cpp - fast matrix product for weights a {K, M, A2, A3} (F32, F16 or
// BF16, rows contiguous; quantized weights: mul_mat_q.cpp up to 4 tokens, or
// any number with the VNNI table or a q_gemm kernel, else the panels below,
// dequantized per block) and any b: b is converted to F32 once per mul_mat
// (unless it already is F32 with contiguous rows).
//   Up to 4 tokens (decode): every thread claims blocks of weight rows (about
//     4 per thread, at least 32 rows) from the node's counter, so a matrix-vector product is split over weight rows
//     and uses every thread; simd.h mv reads each weight row once, front to
//     back, for all tokens (a sequential stream per thread); sums are
//     lane-wise FMA over K in 4 partials, lanes added in a fixed tree (a
//     blocked sum, error ~ eps * K / width per term), the same for 1..4 tokens.
//   More than 4 tokens (prompt): the tokens are packed k-major in panels of
//     2*width once, each claimed block of weight rows (32, or 30: whole
//     passes of simd.h panel_rows) is converted to F32 once, then simd.h
//     mm_panel broadcasts weights against token vectors (no horizontal sums;
//     one FMA chain per output, in k order).
// Blocks and tiles depend on the shapes only, so the results do not depend on
// the thread count.
#include "cpu_fast.h"
#include "quant_act.h"

namespace {

constexpr int64_t k_mb = 32, k_nb = 32;  // rows and tokens per claimed block

// per thread: a block of k_mb weight rows converted to F32 (16-bit weights
// used by more than 4 tokens: converted once per block, not once per tile)
size_t wblock_bytes(const tg_tensor *a) { return a->type == TG_TYPE_F32 ? 0 : tg_align64((size_t)(k_mb * a->ne[0]) * 4); }

// decode row blocks: about 4 per thread, at least k_mb rows
int64_t decode_rows(int64_t M, int nth) {
    const int64_t mbs = (M + 4 * nth - 1) / (4 * nth);
    return mbs < k_mb ? k_mb : (mbs + 3) / 4 * 4;
}

// more than 4 tokens: weight rows per claimed block, whole passes of the
// table's panel_rows (30 for AVX2's 6, 32 otherwise), at most k_mb
int64_t panel_block(const tg_simd &simd) { return k_mb / simd.panel_rows * simd.panel_rows; }

// more than 4 tokens: b packed k-major in panels of P = 2*width tokens
int64_t panel_width(int w) { return 2 * (int64_t)w; }
size_t panels_bytes(const tg_tensor *b, int w) {
    if (b->ne[1] <= 4) return 0;
    const int64_t P = panel_width(w), np = (b->ne[1] + P - 1) / P;
    return tg_align64((size_t)(np * P * b->ne[0] * b->ne[2] * b->ne[3]) * 4);
}

bool b_in_place(const tg_tensor *b) { return b->type == TG_TYPE_F32 && tg_rows_contig(b) && b->nb[1] % 4 == 0; }

// Quantized weights: up to 4 tokens take the integer path (mul_mat_q.cpp),
// and so do more with the VNNI table (simd.h q_many) or a q_gemm kernel
// (AVX2 Q4_0 and Q4_K); otherwise more tokens take the panels below, each claimed
// weight block dequantized to F32 once (as 16-bit weights are converted),
// faster there than maddubs + madd and exact.
bool quant_panels(const tg_tensor *dst) {
    return tg_type_is_quantized(dst->src[0]->type) && !tg_mul_mat_q_takes(dst);
}

int64_t plan(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    if (tg_type_is_quantized(a->type) && !quant_panels(dst)) return tg_mul_mat_q_plan(dst, nth);
    const bool quant = tg_type_is_quantized(a->type);
    if (!(quant || tg_fast_type(a->type)) || !tg_fast_type(b->type) || dst->type != TG_TYPE_F32) return -1;
    const size_t ts = tg_type_size(a->type);
    // rows of elements (quantized: of whole blocks, at any byte address)
    const bool a_rows = quant ? a->nb[0] == ts : tg_rows_contig(a);
    if (!a_rows || a->nb[1] % ts != 0 || !tg_rows_contig(dst) || dst->nb[1] % 4 != 0) return -1;
    const size_t bsize = b_in_place(b) ? 0 : tg_align64((size_t)(b->ne[0] * tg_nrows(b)) * 4);
    return (int64_t)(bsize + panels_bytes(b, tg_simd_get().width) + (size_t)nth * wblock_bytes(a));
}

void run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    if (tg_type_is_quantized(dst->src[0]->type) && !quant_panels(dst)) return tg_mul_mat_q_run(dst, c);
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    const size_t ts = tg_type_size(a->type), lda = a->nb[1] / ts, ldo = dst->nb[1] / 4;

    // b as F32 rows of K: converted into the scratch once, by all threads
    const bool in_place = b_in_place(b);
    float *bw = (float *)c.work;
    if (!in_place) {
        const int64_t nrows = tg_nrows(b);
        int64_t r0, r1;
        tg_split_rows(nrows, c.ith, c.nth, &r0, &r1);
        for (int64_t r = r0; r < r1; r++) {
            const int64_t n = r % N, i2 = (r / N) % B2, i3 = r / (N * B2);
            float *row = bw + r * K;
            if (tg_rows_contig(b))
                simd.to_f32[tg_simd_type_index(b->type)](tg_ptr(b, 0, n, i2, i3), row, K);
            else
                for (int64_t k = 0; k < K; k++) row[k] = tg_get_f32(b, k, n, i2, i3);
        }
        c.sync();
    }
    const size_t ldb = in_place ? b->nb[1] / 4 : (size_t)K;
    auto mv = simd.mv[tg_simd_type_index(a->type)];
    const size_t bsize = in_place ? 0 : tg_align64((size_t)(K * tg_nrows(b)) * 4);
    float *panels = (float *)((char *)c.work + bsize);
    float *wblock = (float *)((char *)c.work + bsize + panels_bytes(b, simd.width) + (size_t)c.ith * wblock_bytes(a));
    auto brow = [&](int64_t n, int64_t i2, int64_t i3) {
        return in_place ? (const float *)((const char *)b->data + n * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3])
                        : bw + ((i3 * B2 + i2) * N + n) * K;
    };

    if (N > 4) {
        // pack the tokens k-major, a panel per item (static split), then
        // every thread claims blocks of panel_block weight rows x all tokens
        const int64_t P = panel_width(simd.width), np = (N + P - 1) / P;
        for (int64_t it = c.ith; it < np * B2 * B3; it += c.nth) {
            const int64_t p = it % np, bi = it / np, n0 = p * P;
            float *dstp = panels + it * P * K;
            for (int64_t j = 0; j < P; j++) {
                if (n0 + j >= N) {
                    for (int64_t k = 0; k < K; k++) dstp[k * P + j] = 0.0f;
                    continue;
                }
                const float *src = brow(n0 + j, bi % B2, bi / B2);
                for (int64_t k = 0; k < K; k++) dstp[k * P + j] = src[k];
            }
        }
        c.sync();
        const int64_t pb = panel_block(simd), nmb = (M + pb - 1) / pb;
        for (int64_t item = c.claim(); item < nmb * B2 * B3; item = c.claim()) {
            const int64_t mb = item % nmb, bi = item / nmb, i2 = bi % B2, i3 = bi / B2;
            const char *abase = (const char *)a->data + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
            float *obase = (float *)((char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3]);
            const int64_t m0 = mb * pb, m1 = m0 + pb < M ? m0 + pb : M;
            const float *w = (const float *)(abase + m0 * lda * ts);
            size_t wld = lda;
            if (a->type != TG_TYPE_F32) {
                // the block's 16-bit weight rows as F32 once
                const int qi = tg_simd_qindex(a->type);
                for (int64_t m = m0; m < m1; m++)
                    if (qi >= 0 && simd.q_dequant[qi])
                        simd.q_dequant[qi](abase + m * lda * ts, wblock + (m - m0) * K, K / tg_type_block_size(a->type));
                    else if (qi >= 0)
                        tg_dequantize_row(a->type, abase + m * lda * ts, wblock + (m - m0) * K, K);
                    else
                        simd.to_f32[tg_simd_type_index(a->type)](abase + m * lda * ts, wblock + (m - m0) * K, K);
                w = wblock;
                wld = (size_t)K;
            }
            for (int64_t p = 0; p < np; p++) {
                const int nj = N - p * P < P ? (int)(N - p * P) : (int)P;
                for (int64_t m = m0; m < m1; m += simd.panel_rows) {
                    const int R = m1 - m < simd.panel_rows ? (int)(m1 - m) : simd.panel_rows;
                    simd.mm_panel(w + (m - m0) * wld, wld, panels + (bi * np + p) * P * K, K,
                                  obase + p * P * ldo + m, ldo, R, nj);
                }
            }
        }
        return;
    }

    // decode: longer row blocks (about 4 per thread, at least 32 rows) keep
    // each thread's weight stream sequential for longer; the row sums (and
    // so every output) do not depend on the block size
    const int64_t mbs = decode_rows(M, c.nth);
    const int64_t nmb = (M + mbs - 1) / mbs, nnb = (N + k_nb - 1) / k_nb, per_batch = nmb * nnb;
    for (int64_t item = c.claim(); item < per_batch * B2 * B3; item = c.claim()) {
        const int64_t bi = item / per_batch, mb = item % per_batch % nmb, nb = item % per_batch / nmb;
        const int64_t i2 = bi % B2, i3 = bi / B2;
        const char *abase = (const char *)a->data + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
        const float *bbase = in_place ? (const float *)((const char *)b->data + i2 * b->nb[2] + i3 * b->nb[3])
                                      : bw + (i3 * B2 + i2) * N * K;
        float *obase = (float *)((char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3]);
        const int64_t m0 = mb * mbs, m1 = m0 + mbs < M ? m0 + mbs : M;
        const int64_t n0 = nb * k_nb, n1 = n0 + k_nb < N ? n0 + k_nb : N;
        for (int64_t n = n0; n < n1; n += 4) {
            const int C = n1 - n < 4 ? (int)(n1 - n) : 4;
            mv(abase + m0 * lda * ts, lda, bbase + n * ldb, ldb, K, obase + n * ldo + m0, ldo, m1 - m0, C);
        }
    }
}

double work(const tg_tensor *dst) { return (double)tg_nelements(dst->src[0]) * (double)tg_nrows(dst->src[1]); }

}  // namespace

const tg_cpu_fast tg_fast_mul_mat = {plan, run, work};

bool tg_mul_mat_group_ok(const tg_tensor *first, const tg_tensor *t) {
    if (t->op != TG_OP_MUL_MAT || first->op != TG_OP_MUL_MAT || t->src[1] != first->src[1]) return false;
    const tg_tensor *a = t->src[0], *b = t->src[1];
    // weights that no node computes: an intermediate a could share memory
    // with another member's result (the planner frees it after its last use)
    if (tg_view_root(const_cast<tg_tensor *>(a))->op != TG_OP_NONE) return false;
    if (tg_type_is_quantized(a->type) || tg_type_is_quantized(first->src[0]->type)) {
        // one quantized type (b is quantized once for the group), rows of whole blocks
        if (a->type != first->src[0]->type || tg_mul_mat_q_plan(t, 1) < 0) return false;
    } else if (!tg_fast_type(a->type) || !tg_rows_contig(a) || a->nb[1] % tg_type_size(a->type) != 0) {
        return false;
    }
    if (!b_in_place(b) || b->ne[1] > 4 || b->ne[2] != 1 || b->ne[3] != 1 || a->ne[2] != 1 || a->ne[3] != 1) return false;
    return t->type == TG_TYPE_F32 && tg_rows_contig(t) && t->nb[1] % 4 == 0;
}

size_t tg_mul_mat_group_work(const tg_tensor *first, int nth) {
    return tg_type_is_quantized(first->src[0]->type) ? tg_mul_mat_q_group_work(first, nth) : 0;
}

// The decode row blocks every node would have alone (decode_rows), in one
// claimed sequence: the same row sums, so the same outputs.
void tg_mul_mat_group_run(tg_tensor *const *dsts, int n, const tg_cpu_ctx &c) {
    if (tg_type_is_quantized(dsts[0]->src[0]->type)) return tg_mul_mat_q_group_run(dsts, n, c);
    const tg_simd &simd = tg_simd_get();
    tg_group_blocks(dsts, n, c, decode_rows, [&](int d, int64_t m0, int64_t m1) {
        const tg_tensor *dst = dsts[d], *a = dst->src[0], *b = dst->src[1];
        const size_t ts = tg_type_size(a->type), lda = a->nb[1] / ts, ldb = b->nb[1] / 4, ldo = dst->nb[1] / 4;
        simd.mv[tg_simd_type_index(a->type)]((const char *)a->data + m0 * lda * ts, lda, (const float *)b->data, ldb,
                                             a->ne[0], (float *)dst->data + m0, ldo, m1 - m0, (int)b->ne[1]);
    });
}
