// attention.cpp - fast causal attention over a KV cache. A work item is one
// (kv head, token, sequence): its `group` = Hq/Hkv query heads share every K
// and V row read (GQA rows shared). simd.h attn does the item: scores W keys
// at a time (vectorized over D, F32/F16/BF16 cache rows converted in
// registers), softmax in F32 with a vector exp, then each V row read once
// per chunk of Dv into register accumulators of up to 4 query rows. Needs
// contiguous head rows (q, caches, output) with strides that are whole
// elements; else the reference runs. F32 sums instead of the reference's
// double: within the 1e-5 of the float64 oracle.
#include <algorithm>

#include "cpu_fast.h"

namespace {

size_t thread_floats(int64_t group, int64_t L, int64_t Dv) { return tg_align64((size_t)(group * (L + Dv)) * 4) / 4; }

int64_t plan(const tg_tensor *dst, int nth) {
    const tg_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2];
    if (!tg_rows_contig(q) || q->nb[1] % 4 != 0 || !tg_rows_contig(dst) || dst->nb[1] % 4 != 0) return -1;
    if (!tg_fast_type(kc->type) || !tg_fast_type(vc->type) || !tg_rows_contig(kc) || !tg_rows_contig(vc)) return -1;
    if (kc->nb[2] % tg_type_size(kc->type) != 0 || vc->nb[2] % tg_type_size(vc->type) != 0) return -1;
    const int64_t group = q->ne[1] / kc->ne[1];
    return (int64_t)(nth * thread_floats(group, kc->ne[2], vc->ne[0]) * 4);
}

void run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *q = dst->src[0], *kc = dst->src[1], *vc = dst->src[2], *pos = dst->src[3];
    const float scale = tg_get_params<float>(dst);
    const int64_t D = q->ne[0], Hq = q->ne[1], T = q->ne[2], B = q->ne[3], Hkv = kc->ne[1], L = kc->ne[2];
    const int64_t Dv = vc->ne[0], group = Hq / Hkv;
    float *sc = (float *)c.work + (size_t)c.ith * thread_floats(group, L, Dv);
    const size_t ldk = kc->nb[2] / tg_type_size(kc->type), ldv = vc->nb[2] / tg_type_size(vc->type);
    const size_t ldq = q->nb[1] / 4, ldo = dst->nb[1] / 4;
    auto attn = simd.attn[tg_simd_type_index(kc->type)][tg_simd_type_index(vc->type)];

    for (int64_t item = c.claim(); item < Hkv * T * B; item = c.claim()) {
        const int64_t hk = item % Hkv, t = (item / Hkv) % T, b = item / (Hkv * T);
        const int32_t p = tg_get_i32(pos, t, b, 0, 0);
        const int64_t n = p < 0 ? 0 : (p < L ? (int64_t)p + 1 : L);
        attn(tg_ptr(kc, 0, hk, 0, b), ldk, tg_ptr(vc, 0, hk, 0, b), ldv, (const float *)tg_ptr(q, 0, hk * group, t, b),
             ldq, group, D, Dv, n, scale, sc, (float *)tg_ptr(dst, 0, hk * group, t, b), ldo);
    }
}

// the keys the positions reach (at most L; the positions are read when the
// node is about to run, so a decode step at position p counts p + 1 keys, not
// the cache's whole length: a tiny model's decode attention stays on one thread)
double work(const tg_tensor *dst) {
    const tg_tensor *pos = dst->src[3];
    const int64_t L = dst->src[1]->ne[2];
    int64_t n = 1;
    for (int64_t b = 0; b < pos->ne[1]; b++)
        for (int64_t t = 0; t < pos->ne[0]; t++) {
            const int64_t p = (int64_t)tg_get_i32(pos, t, b, 0, 0) + 1;
            n = p > n ? (p < L ? p : L) : n;
        }
    return (double)tg_nelements(dst->src[0]) * (double)n * 2;
}

}  // namespace

const tg_cpu_fast tg_fast_attention = {plan, run, work};
