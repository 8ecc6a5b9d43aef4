// delta_rule.cpp - fast gated linear / gated delta-rule recurrence.
//
// Work items are (value head, sequence) pairs, claimed from the node's counter
// in runs of consecutive items (heads across threads). The item's state S
// (Dk x Dv, S[i][j] at i + j*Dk) is worked on as Dv rows S_j in the storage
// order: in place when the state is F32 and Dk a multiple of the vector
// width, else copied into the thread's scratch (padded with zeros to the
// vector width, converted from F16/BF16) and stored back once at the end.
// The head's state stays in cache over the T tokens, and each token is one
// pass over the rows from memory (simd.h dr_token: S_j.k and S_j.q of the
// old row, then the decayed, updated row written back while in L1),
// vectorized over the key index; at decode (T = 1) the whole state streams
// through once, so the kernel is bound by memory bandwidth and prefetches
// rows ahead, across item boundaries. q, k, v, g, beta and o need contiguous
// rows (any other strides); the state (F32/F16/BF16) contiguous rows too;
// else the reference runs. Sums are blocked F32 sums instead of the
// reference's sequential F32 sums, and o_j = scale*(a S_j.q + u_j k.q) is
// the reference's scale*(S_j'.q) expanded: within the recurrences' 1e-5 of
// the float64 oracle. The fused l2norm_qk is computed exactly as the fast
// l2_norm op (norm.cpp), so the two agree bit for bit.
#include "cpu_fast.h"

namespace {

constexpr float k_l2norm_eps = 1e-6f;  // as ggml_ops/delta_rule.cpp

int64_t padded(int64_t n, int w) { return (n + w - 1) / w * w; }

// per-thread floats: S (Dv * Dkp), q, k (Dkp each)
size_t thread_floats(int64_t Dk, int64_t Dv, int w) {
    const int64_t Dkp = padded(Dk, w);
    return tg_align64((size_t)(Dv * Dkp + 2 * Dkp) * 4) / 4;
}

int64_t plan(const tg_tensor *dst, int nth) {
    // algo CHUNKED asks for the chunked reference (ggml_ops/delta_rule_chunked.cpp), not this scan
    if (tg_get_params<tg_delta_params>(dst).algo == TG_DELTA_ALGO_CHUNKED) return -1;
    for (int i = 0; i < 5; i++)
        if (dst->src[i]->type != TG_TYPE_F32 || !tg_rows_contig(dst->src[i])) return -1;
    const tg_tensor *state = dst->src[5];
    if (state && (!tg_fast_type(state->type) || !tg_rows_contig(state))) return -1;
    if (dst->type != TG_TYPE_F32 || !tg_rows_contig(dst)) return -1;  // 16-bit o: the reference
    const int w = tg_simd_get().width;
    return (int64_t)(nth * thread_floats(dst->src[0]->ne[0], dst->src[2]->ne[0], w) * 4);
}

// x (n values) scaled by 1 / sqrt(sum x^2 + eps): the fast l2_norm's arithmetic
void l2norm(float *x, int64_t n, const tg_simd &simd) {
    const double sum = simd.sumsq(x, n);
    simd.mul1(x, (float)(1.0 / std::sqrt(sum + k_l2norm_eps)), x, n);
}

void run(const tg_tensor *dst, const tg_cpu_ctx &c) {
    const tg_simd &simd = tg_simd_get();
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *state = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], Dv = v->ne[0], Hv = v->ne[1], B = v->ne[3];
    const int64_t group = Hv / Hk, Dkp = padded(Dk, simd.width);
    float *S = (float *)c.work + (size_t)c.ith * thread_floats(Dk, Dv, simd.width);
    float *qt = S + Dv * Dkp, *kt = qt + Dkp;
    const bool delta = dp.mode == TG_DELTA_GATED_DELTA;
    const int st = state ? tg_simd_type_index(state->type) : 0;

    // An F32 state whose rows are whole vectors is updated where it lies (no
    // copy in or out); otherwise it is copied into the padded scratch.
    const bool direct = state && state->type == TG_TYPE_F32 && Dk % simd.width == 0 && state->nb[1] % 4 == 0;
    float *const scratch = S;
    memset(qt, 0, (size_t)(2 * Dkp) * 4);  // padding of q and k is zero
    // Items are claimed in runs of consecutive ones (up to 64, at least 4 runs
    // per thread): with a state laid out item after item, each thread then
    // streams whole megabytes in memory order, and the prefetch of a run's
    // last token reaches into its next item.
    const int64_t n_items = Hv * B, run_len = std::max<int64_t>(1, std::min<int64_t>(64, n_items / (4 * c.nth)));
    const bool follows = direct && state->nb[2] == (size_t)Dv * state->nb[1] && state->nb[3] == (size_t)Hv * state->nb[2];
    for (int64_t r0 = c.claim() * run_len; r0 < n_items; r0 = c.claim() * run_len)
    for (int64_t item = r0; item < std::min(n_items, r0 + run_len); item++) {
        const int64_t h = item % Hv, b = item / Hv, hk = h / group;
        const bool next_follows = follows && item + 1 < std::min(n_items, r0 + run_len);
        int64_t lds = Dkp;
        if (direct) {
            S = (float *)tg_ptr(state, 0, 0, h, b);
            lds = (int64_t)(state->nb[1] / 4);
        } else {
            S = scratch;
            memset(S, 0, (size_t)(Dv * Dkp) * 4);  // padding of S is zero
            if (state)
                for (int64_t j = 0; j < Dv; j++) simd.to_f32[st](tg_ptr(state, 0, j, h, b), S + j * Dkp, Dk);
        }

        for (int64_t t = 0; t < T; t++) {
            memcpy(qt, tg_ptr(q, 0, hk, t, b), (size_t)Dk * 4);
            memcpy(kt, tg_ptr(k, 0, hk, t, b), (size_t)Dk * 4);
            if (dp.l2norm_qk) {
                l2norm(qt, Dk, simd);
                l2norm(kt, Dk, simd);
            }
            const float gt = *(const float *)tg_ptr(g, h, t, b, 0), bt = *(const float *)tg_ptr(beta, h, t, b, 0);
            float a = dp.gate == TG_GATE_LOG ? std::exp(gt) : gt;
            if (std::isinf(a)) {
                // a zero entry stays zero under an infinite decay (the reference's gate_mul)
                for (int64_t j = 0; j < Dv; j++)
                    for (int64_t i = 0; i < Dkp; i++) S[j * lds + i] = S[j * lds + i] == 0.0f ? 0.0f : a * S[j * lds + i];
                a = 1.0f;
            }
            // prefetch: the item's rows on its first token (later tokens find
            // them in cache), the next item's on the last
            const int64_t pf_from = t == 0 ? 0 : Dv, pf_to = t == T - 1 && next_follows ? 2 * Dv : Dv;
            simd.dr_token(S, lds, Dv, Dkp, kt, qt, (const float *)tg_ptr(v, 0, h, t, b), a, bt, dp.scale, delta,
                          (float *)tg_ptr(dst, 0, h, t, b), pf_from, pf_to);
        }

        if (state && !direct)
            for (int64_t j = 0; j < Dv; j++) simd.from_f32[st](S + j * Dkp, tg_ptr(state, 0, j, h, b), Dk);
    }
}

double work(const tg_tensor *dst) { return (double)tg_nelements(dst) * (double)dst->src[0]->ne[0] * 4; }

}  // namespace

const tg_cpu_fast tg_fast_delta_rule = {plan, run, work};
