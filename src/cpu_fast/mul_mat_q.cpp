// mul_mat_q.cpp - fast mul_mat for quantized weights a {K, M, A2, A3} (Q8_0,
// Q4_0, Q4_K) and up to 4 tokens of any b (F32/F16/BF16), or any number with
// the VNNI table (simd.h q_many) or a q_gemm kernel (the AVX2 table's Q4_0
// and Q4_K; otherwise more tokens take mul_mat.cpp's F32 panels with the weights
// dequantized per block), as ggml does it on the CPU:
//   1. b's rows are quantized to 8 bits per block (simd.h q_quant, in the
//      vector table's layout, quant_act.h): a small b (decode: up to
//      k_own_values values) by every thread into its own scratch, so no
//      barrier separates this from step 2; a larger one split over the
//      threads, then a barrier;
//   2. every thread claims blocks of weight rows from the node's counter (a
//      matrix-vector product is split over weight rows, so decode uses every
//      thread); each block meets each group of up to 4 tokens in turn in simd.h
//      q_rows (integer dot products per block; the VNNI table takes 4 weight
//      rows per pass against the same activation loads), or, more than 4
//      tokens with a q_gemm kernel, 8 rows at a time packed once into the
//      thread's scratch and met by every token (simd_qgemm_impl.h).
// The error against the exact product of the dequantized weights is the
// activations' rounding: at most sum over blocks of (d_a / 2) * sum |w| over
// the block (d_a = the block's absmax / 127), docs/ops.md. Groups and blocks
// are fixed by the shapes, and q_rows' (q_gemm's) sums do not depend on the
// rows or tokens beside them, so results do not depend on the thread count.
#include "cpu_fast.h"
#include "quant_act.h"

namespace {

// b of at most this many values is quantized by every thread for itself
// (a decode step's b: 1-4 rows of a few thousand; about a microsecond, less
// than a barrier between two threads)
constexpr int64_t k_own_values = 16384;

bool own_act(const tg_tensor *b) { return b->ne[0] * tg_nrows(b) <= k_own_values; }

// weight rows per claimed block: about 4 blocks per thread, at least 16, a multiple of 4
int64_t row_block(int64_t M, int nth) {
    const int64_t mbs = (M + 4 * nth - 1) / (4 * nth);
    return mbs < 16 ? 16 : (mbs + 3) / 4 * 4;
}

// Quantizes b's rows [r0, r1) (row r = n + N * (i2 + B2 * i3)) into act +
// r * arb, through tmp (K floats) when b is not F32 with contiguous rows;
// then prep (q_gemm_act, when not NULL) on each row.
void quantize_rows(const tg_simd &simd, int qi, const tg_tensor *b, int64_t r0, int64_t r1, char *act, size_t arb,
                   float *tmp, void (*prep)(void *, int64_t)) {
    const int64_t K = b->ne[0], N = b->ne[1], B2 = b->ne[2];
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
        simd.q_quant[qi](x, K, act + (size_t)r * arb);
        if (prep) prep(act + (size_t)r * arb, K);
    }
}

// more than 4 tokens through the table's q_gemm kernel (simd.h)
bool use_gemm(const tg_simd &simd, const tg_tensor *a, const tg_tensor *b) {
    const int qi = tg_simd_qindex(a->type);
    return b->ne[1] > 4 && !simd.q_many && qi >= 0 && simd.q_gemm[qi];
}

// scratch: the shared activations (a large b), then per thread K floats,
// (a small b) its own activations and (q_gemm) its packed weight rows
struct scratch {
    size_t arb, shared, per_thread, pack;
    scratch(const tg_simd &simd, const tg_tensor *a, const tg_tensor *b) {
        const int qi = tg_simd_qindex(a->type);
        arb = simd.q_act_bytes(qi, a->ne[0]);
        const size_t all = tg_align64(arb * (size_t)tg_nrows(b));
        shared = own_act(b) ? 0 : all;
        pack = use_gemm(simd, a, b) ? tg_align64(simd.q_gemm_scratch(qi, a->ne[0])) : 0;
        per_thread = tg_align64((size_t)a->ne[0] * 4) + (own_act(b) ? all : 0) + pack;
    }
};

}  // namespace

bool tg_mul_mat_q_takes(const tg_tensor *dst) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    return b->ne[1] <= 4 || simd.q_many || use_gemm(simd, a, b);
}

int64_t tg_mul_mat_q_plan(const tg_tensor *dst, int nth) {
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    if (tg_simd_qindex(a->type) < 0 || !tg_fast_type(b->type) || dst->type != TG_TYPE_F32) return -1;
    // rows of whole blocks (a's views keep them); dst element-contiguous rows
    if (a->nb[0] != tg_type_size(a->type) || !tg_rows_contig(dst)) return -1;
    const scratch s(tg_simd_get(), a, b);
    return (int64_t)(s.shared + (size_t)nth * s.per_thread);
}

void tg_mul_mat_q_run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *a = dst->src[0], *b = dst->src[1];
    const int qi = tg_simd_qindex(a->type);
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    const scratch s(simd, a, b);
    char *mine = (char *)c.work + s.shared + (size_t)c.ith * s.per_thread;
    float *tmp = (float *)mine;
    void *pack = mine + s.per_thread - s.pack;

    // 1. b's rows as 8-bit blocks (for q_gemm in its form)
    char *act = (char *)c.work;
    void (*prep)(void *, int64_t) = s.pack ? simd.q_gemm_act[qi] : nullptr;
    if (own_act(b)) {
        act = mine + tg_align64((size_t)K * 4);
        quantize_rows(simd, qi, b, 0, tg_nrows(b), act, s.arb, tmp, prep);
    } else {
        int64_t r0, r1;
        tg_split_rows(tg_nrows(b), c.ith, c.nth, &r0, &r1);
        quantize_rows(simd, qi, b, r0, r1, act, s.arb, tmp, prep);
        c.sync();
    }

    // 2. blocks of weight rows x all tokens of one (i2, i3); q_gemm takes
    // them 8 rows at a time
    auto rows = simd.q_rows[qi];
    const bool gemm = s.pack != 0;
    const int64_t nblocks = K / tg_type_block_size(a->type);
    const int64_t mbs = gemm ? (row_block(M, c.nth) + 7) / 8 * 8 : row_block(M, c.nth), nmb = (M + mbs - 1) / mbs;
    const size_t ldo = dst->nb[1] / 4;
    for (int64_t item = c.claim(); item < nmb * B2 * B3; item = c.claim()) {
        const int64_t mb = item % nmb, bi = item / nmb, i2 = bi % B2, i3 = bi / B2;
        const char *abase = (const char *)a->data + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
        float *obase = (float *)((char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3]);
        const int64_t m0 = mb * mbs, m1 = m0 + mbs < M ? m0 + mbs : M;
        if (gemm) {
            for (int64_t m = m0; m < m1; m += 8)
                simd.q_gemm[qi](abase + m * a->nb[1], a->nb[1], m1 - m < 8 ? (int)(m1 - m) : 8,
                                act + (size_t)(bi * N) * s.arb, s.arb, N, nblocks, obase + m, ldo, pack);
            continue;
        }
        for (int64_t n = 0; n < N; n += 4) {
            const int C = N - n < 4 ? (int)(N - n) : 4;
            rows(abase + m0 * a->nb[1], a->nb[1], m1 - m0, act + (size_t)(bi * N + n) * s.arb, s.arb, nblocks,
                 obase + n * ldo + m0, ldo, C);
        }
    }
}

size_t tg_mul_mat_q_group_work(const tg_tensor *first, int nth) {
    const tg_tensor *a = first->src[0], *b = first->src[1];
    const tg_simd &simd = tg_simd_get();
    return (size_t)nth * tg_align64(simd.q_act_bytes(tg_simd_qindex(a->type), a->ne[0]) * (size_t)b->ne[1]);
}

// A group (tg_mul_mat_group_ok: one F32 b of 1-4 tokens read in place, 2-D
// weights of one quantized type): b quantized once per thread, then the row
// blocks every node would have alone, in one claimed sequence.
void tg_mul_mat_q_group_run(tg_tensor *const *dsts, int n, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *b = dsts[0]->src[1];
    const int qi = tg_simd_qindex(dsts[0]->src[0]->type);
    const int64_t K = b->ne[0], N = b->ne[1];
    const size_t arb = simd.q_act_bytes(qi, K);
    char *act = (char *)c.work + (size_t)c.ith * tg_align64(arb * (size_t)N);
    for (int64_t r = 0; r < N; r++)
        simd.q_quant[qi]((const float *)((const char *)b->data + r * b->nb[1]), K, act + (size_t)r * arb);
    tg_group_blocks(dsts, n, c, row_block, [&](int d, int64_t m0, int64_t m1) {
        const tg_tensor *dst = dsts[d], *a = dst->src[0];
        simd.q_rows[qi]((const char *)a->data + m0 * a->nb[1], a->nb[1], m1 - m0, act, arb,
                        K / tg_type_block_size(a->type), (float *)dst->data + m0, dst->nb[1] / 4, (int)N);
    });
}
