// delta_rule_chunked.cpp - the chunked form of the gated linear / gated
// delta-rule recurrence on the CPU (tg_delta_params.algo = CHUNKED): a
// readable F32 reference of what cuda/delta_rule_chunked.cu computes with
// tensor-core products, so that the two algorithms can be compared without a
// GPU. The scan (delta_rule.cpp) stays the exact reference.
//
// Math (Yang et al., "Parallelizing Linear Transformers with the Delta Rule
// over Sequence Length", 2024; "Gated Delta Networks", 2024), per value head
// and sequence, per chunk of C = 64 tokens t = 0..n-1 with S the state at the
// chunk's start (Dk x Dv):
//   d(t, s)  decay from after token s to after token t: prod_{s < r <= t} a_r
//            (s = -1: from the chunk start), d(t, t) = 1
//   A[t][s]  = beta_t (k_t . k_s) d(t, s) for s < t      (strictly lower)
//   T        = (I + A)^-1 by forward substitution (the UT transform)
//   GATED_DELTA:  U = T R,  R_t = beta_t (v_t - d(t, -1) S^T k_t)
//   GATED_LINEAR: U_t = beta_t v_t  (no T)
//   o_t      = scale (d(t, -1) S^T q_t + sum_{s <= t} d(t, s) (q_t . k_s) U_s)
//   S'       = d(n-1, -1) S + sum_s d(n-1, s) k_s U_s^T
// (U is the update u_t of the scan: u_t = beta_t (v_t - S_{t-1}'^T k_t) with
// S_{t-1}' the decayed state, expanded over the chunk.)
//
// Decays without log(0): the gates of a chunk become a prefix of
// (L, sign, Z): L_t the sum of log|a_r| over the nonzero gates r <= t, sign_t
// the product of their signs, Z_t the last r <= t with a_r = 0 (-1: none).
// Then d(t, s) = 0 if Z_t > s, else sign_t sign_s exp(L_t - L_s): a zero gate
// (LINEAR g = 0, LOG g = -inf) cuts the chunk exactly, and the exponent is a
// difference of prefix sums (never exp(L_t) exp(-L_s), which overflows for
// log gates of -30). A state term multiplied by d(t, -1) stays zero when the
// state's contribution is exactly zero (the scan's rule for huge gates on a
// zero state), as long as the in-chunk differences stay finite.
#include "ops.h"

namespace {

constexpr int64_t kChunk = 64;
constexpr float kL2Eps = 1e-6f;

// The scan's rule: an exact zero stays zero under any non-NaN factor.
inline float keep_zero_mul(float d, float x) { return x == 0.0f && !std::isnan(d) ? 0.0f : d * x; }

void l2norm_row(float *x, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    const float inv = (float)(1.0 / std::sqrt(sum + kL2Eps));
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// The gate prefix of one chunk (see the top of the file).
struct gate_prefix {
    float L[kChunk], sign[kChunk];
    int Z[kChunk];
    void build(const float *g, int n, bool log_gate) {
        float l = 0.0f, sg = 1.0f;
        int z = -1;
        for (int r = 0; r < n; r++) {
            const bool zero = log_gate ? g[r] == -INFINITY : g[r] == 0.0f;
            if (zero) {
                z = r;
            } else {
                l += log_gate ? g[r] : std::log(std::fabs(g[r]));  // NaN stays NaN
                if (!log_gate && g[r] < 0.0f) sg = -sg;
            }
            L[r] = l, sign[r] = sg, Z[r] = z;
        }
    }
    // d(t, s), s in [-1, t]
    float decay(int t, int s) const {
        if (Z[t] > s) return 0.0f;
        const float ls = s < 0 ? 0.0f : L[s], ss = s < 0 ? 1.0f : sign[s];
        return sign[t] * ss * std::exp(L[t] - ls);
    }
};

}  // namespace

void tg_cpu_delta_rule_chunked(const tg_tensor *dst, int ith, int nth) {
    const tg_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4];
    const tg_tensor *state = dst->src[5];
    const tg_delta_params dp = tg_get_params<tg_delta_params>(dst);
    const int64_t Dk = q->ne[0], Hk = q->ne[1], T = q->ne[2], Dv = v->ne[0], Hv = v->ne[1], B = v->ne[3];
    const int64_t group = Hv / Hk, C = kChunk;
    const bool delta = dp.mode == TG_DELTA_GATED_DELTA, log_gate = dp.gate == TG_GATE_LOG;

    // S[i][j] at i * Dv + j (row i of S is a key direction); chunk rows t at t * D
    std::vector<float> S((size_t)(Dk * Dv)), Q((size_t)(C * Dk)), K((size_t)(C * Dk)), V((size_t)(C * Dv));
    std::vector<float> U((size_t)(C * Dv)), R((size_t)(C * Dv)), A((size_t)(C * C)), Tm((size_t)(C * C));
    std::vector<float> gc((size_t)C), bc((size_t)C), y((size_t)Dv);
    gate_prefix gp;
    int64_t r0, r1;
    tg_split_rows(Hv * B, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t h = r % Hv, b = r / Hv, hk = h / group;
        for (int64_t i = 0; i < Dk; i++)
            for (int64_t j = 0; j < Dv; j++) S[i * Dv + j] = state ? tg_get_f32(state, i, j, h, b) : 0.0f;

        for (int64_t t0 = 0; t0 < T; t0 += C) {
            const int n = (int)std::min(C, T - t0);
            // 1. the chunk's inputs (16-bit q/k/v converted on load), q and k normalized
            for (int t = 0; t < n; t++) {
                for (int64_t i = 0; i < Dk; i++) {
                    Q[t * Dk + i] = tg_get_f32(q, i, hk, t0 + t, b);
                    K[t * Dk + i] = tg_get_f32(k, i, hk, t0 + t, b);
                }
                if (dp.l2norm_qk) {
                    l2norm_row(&Q[t * Dk], Dk);
                    l2norm_row(&K[t * Dk], Dk);
                }
                for (int64_t j = 0; j < Dv; j++) V[t * Dv + j] = tg_get_f32(v, j, h, t0 + t, b);
                gc[t] = tg_get_f32(g, h, t0 + t, b, 0);
                bc[t] = tg_get_f32(beta, h, t0 + t, b, 0);
            }
            gp.build(gc.data(), n, log_gate);

            // 2. the updates U of the chunk
            if (delta) {
                // A = tril(beta K K^T (.) decay, -1); T = (I + A)^-1 by forward substitution:
                // T[t][j] = [t == j] - sum_{j <= s < t} A[t][s] T[s][j]
                for (int t = 0; t < n; t++)
                    for (int s = 0; s < t; s++) A[t * C + s] = bc[t] * dot(&K[t * Dk], &K[s * Dk], Dk) * gp.decay(t, s);
                for (int t = 0; t < n; t++)
                    for (int j = 0; j <= t; j++) {
                        float x = t == j ? 1.0f : 0.0f;
                        for (int s = j; s < t; s++) x -= A[t * C + s] * Tm[s * C + j];
                        Tm[t * C + j] = x;
                    }
                // R_t = beta_t (v_t - d(t, -1) S^T k_t);  U = T R
                for (int t = 0; t < n; t++) {
                    const float d0 = gp.decay(t, -1);
                    for (int64_t j = 0; j < Dv; j++) {
                        float sk = 0.0f;
                        for (int64_t i = 0; i < Dk; i++) sk += S[i * Dv + j] * K[t * Dk + i];
                        R[t * Dv + j] = bc[t] * (V[t * Dv + j] - keep_zero_mul(d0, sk));
                    }
                }
                for (int t = 0; t < n; t++)
                    for (int64_t j = 0; j < Dv; j++) {
                        float x = 0.0f;
                        for (int s = 0; s <= t; s++) x += Tm[t * C + s] * R[s * Dv + j];
                        U[t * Dv + j] = x;
                    }
            } else {
                for (int t = 0; t < n; t++)
                    for (int64_t j = 0; j < Dv; j++) U[t * Dv + j] = bc[t] * V[t * Dv + j];
            }

            // 3. outputs: o_t = scale (d(t, -1) S^T q_t + sum_{s <= t} d(t, s) (q_t . k_s) U_s)
            for (int t = 0; t < n; t++) {
                const float d0 = gp.decay(t, -1);
                for (int64_t j = 0; j < Dv; j++) {
                    float sq = 0.0f;
                    for (int64_t i = 0; i < Dk; i++) sq += S[i * Dv + j] * Q[t * Dk + i];
                    y[j] = keep_zero_mul(d0, sq);
                }
                for (int s = 0; s <= t; s++) {
                    const float p = dot(&Q[t * Dk], &K[s * Dk], Dk) * gp.decay(t, s);
                    for (int64_t j = 0; j < Dv; j++) y[j] += p * U[s * Dv + j];
                }
                for (int64_t j = 0; j < Dv; j++) tg_set_f32(dst, j, h, t0 + t, b, dp.scale * y[j]);
            }

            // 4. the state after the chunk: S = d(n-1, -1) S + sum_s d(n-1, s) k_s U_s^T
            const float dl = gp.decay(n - 1, -1);
            for (float &x : S) x = keep_zero_mul(dl, x);
            for (int s = 0; s < n; s++) {
                const float ds = gp.decay(n - 1, s);
                for (int64_t i = 0; i < Dk; i++) {
                    const float ki = ds * K[s * Dk + i];
                    for (int64_t j = 0; j < Dv; j++) S[i * Dv + j] += ki * U[s * Dv + j];
                }
            }
        }

        if (state)
            for (int64_t j = 0; j < Dv; j++)
                for (int64_t i = 0; i < Dk; i++) tg_set_f32(state, i, j, h, b, S[i * Dv + j]);
    }
}
