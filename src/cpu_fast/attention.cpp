// attention.cpp - fast causal attention over a KV cache. A work item is one
// (kv head, token, sequence): its `group` = Hq/Hkv query heads share every K
// and V row read (GQA rows shared). Scores for the group are a small matrix
// product of the K rows and the queries (simd.h mm_tile, 4 keys x 4 queries
// per register tile, vectorized over D, F32/F16/BF16 cache rows converted in
// registers), softmax in F32 (max, expf, sum), then each V row is added into
// the group's accumulators (axpy, vectorized over Dv). Needs contiguous head
// rows (q, caches, output) with strides that are whole elements; else the
// reference runs. F32 sums instead of the reference's double: within the
// 1e-5 of the float64 oracle.
#include <algorithm>

#include "cpu_fast.h"

namespace {

size_t thread_floats(int64_t group, int64_t L, int64_t Dv) { return tg_align64((size_t)(group * (L + Dv)) * 4) / 4; }

int64_t plan(const tg_tensor *dst, int nth) {
    const tg_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2];
    if (!tg_rows_contig(q) || q->nb[1] % 4 != 0 || !tg_rows_contig(dst)) return -1;
    if (!tg_fast_type(kc->type) || !tg_fast_type(vc->type) || !tg_rows_contig(kc) || !tg_rows_contig(vc)) return -1;
    if (kc->nb[2] % tg_type_size(kc->type) != 0) return -1;
    const int64_t group = q->ne[1] / kc->ne[1];
    return (int64_t)(nth * thread_floats(group, kc->ne[2], vc->ne[0]) * 4);
}

void run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2], *pos = dst->src[3];
    const float scale = tg_get_params<float>(dst);
    const int64_t D = q->ne[0], Hq = q->ne[1], T = q->ne[2], B = q->ne[3], Hkv = kc->ne[1], L = kc->ne[2];
    const int64_t Dv = vc->ne[0], group = Hq / Hkv;
    float *sc = (float *)c.work + (size_t)c.ith * thread_floats(group, L, Dv), *acc = sc + group * L;
    const size_t lda = kc->nb[2] / tg_type_size(kc->type), ldq = q->nb[1] / 4;
    auto tile = simd.mm_tile[tg_simd_type_index(kc->type)];
    auto axpy = simd.axpy[tg_simd_type_index(vc->type)];

    for (int64_t item = c.claim(); item < Hkv * T * B; item = c.claim()) {
        const int64_t hk = item % Hkv, t = (item / Hkv) % T, b = item / (Hkv * T);
        const int32_t p = tg_get_i32(pos, t, b, 0, 0);
        const int64_t n = p < 0 ? 0 : (p < L ? (int64_t)p + 1 : L);
        const float *q0 = (const float *)tg_ptr(q, 0, hk * group, t, b);
        const char *k0 = tg_ptr(kc, 0, hk, 0, b);
        // sc[g*n + j] = q_g . k_j
        for (int64_t g = 0; g < group; g += 4) {
            const int C = group - g < 4 ? (int)(group - g) : 4;
            for (int64_t j = 0; j < n; j += 4) {
                const int R = n - j < 4 ? (int)(n - j) : 4;
                tile(k0 + j * kc->nb[2], lda, q0 + g * ldq, ldq, D, sc + g * n + j, (size_t)n, R, C, false);
            }
        }
        for (int64_t g = 0; g < group; g++) {
            float *s = sc + g * n, mx = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j < n; j++) mx = std::max(mx, s[j] *= scale);
            for (int64_t j = 0; j < n; j++) sum += (s[j] = expf(s[j] - mx));
            const float inv = n ? 1.0f / sum : 0.0f;
            for (int64_t j = 0; j < n; j++) s[j] *= inv;
        }
        memset(acc, 0, (size_t)(group * Dv) * 4);
        for (int64_t j = 0; j < n; j++) {
            const char *vrow = tg_ptr(vc, 0, hk, j, b);
            for (int64_t g = 0; g < group; g++) axpy(acc + g * Dv, vrow, sc[g * n + j], Dv);
        }
        for (int64_t g = 0; g < group; g++) memcpy(tg_ptr(dst, 0, hk * group + g, t, b), acc + g * Dv, (size_t)Dv * 4);
    }
}

double work(const tg_tensor *dst) { return (double)tg_nelements(dst->src[0]) * (double)dst->src[1]->ne[2] * 2; }

}  // namespace

const tg_cpu_fast tg_fast_attention = {plan, run, work};
