// sampler.cpp - llama.cpp's sampler chain: repetition penalty, top-k, top-p,
// min-p, temperature, draw (model.h). Candidates hold double logits, so a
// penalty or 1 / temp never overflows and the stages compare exactly what a
// float64 reference computes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "model.h"

namespace tgm {

namespace {

// sample_top_k's order: a strict total order, so ties never depend on the sort
bool before(const candidate &a, const candidate &b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

void sort_candidates(std::vector<candidate> &c) {
    if (!std::is_sorted(c.begin(), c.end(), before)) std::sort(c.begin(), c.end(), before);
}

}  // namespace

std::vector<candidate> sample_candidates(const float *logits, int n_vocab) {
    std::vector<candidate> c;
    if (!logits) return c;  // no logits: no candidates (sample: -1)
    c.reserve((size_t)std::max(n_vocab, 0));
    for (int i = 0; i < n_vocab; i++)
        if (std::isfinite(logits[i])) c.push_back({i, (double)logits[i]});
    return c;
}

void sample_penalty(std::vector<candidate> &c, const int32_t *history, size_t n_history, float penalty, int last_n) {
    // 1 is off; so is a penalty that is not a positive finite number (it would make NaNs)
    if (!(penalty > 0.0f && std::isfinite(penalty)) || penalty == 1.0f || last_n == 0 || !history || !n_history)
        return;
    const size_t n = last_n < 0 ? n_history : std::min(n_history, (size_t)last_n);
    std::vector<int32_t> seen(history + (n_history - n), history + n_history);
    std::sort(seen.begin(), seen.end());
    for (candidate &x : c)
        if (std::binary_search(seen.begin(), seen.end(), x.id))
            x.logit = x.logit <= 0 ? x.logit * penalty : x.logit / penalty;
}

void sample_top_k(std::vector<candidate> &c, int k) {
    if (k <= 0 || (size_t)k >= c.size()) {
        sort_candidates(c);
        return;
    }
    std::partial_sort(c.begin(), c.begin() + k, c.end(), before);
    c.resize((size_t)k);
}

void sample_top_p(std::vector<candidate> &c, float p) {
    if (!(p < 1.0f) || c.empty()) return;
    sort_candidates(c);
    std::vector<double> w(c.size());
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); i++) sum += (w[i] = std::exp(c[i].logit - c[0].logit));
    double cum = 0.0;
    for (size_t i = 0; i < c.size(); i++) {
        cum += w[i] / sum;
        if (cum >= p) {
            c.resize(i + 1);
            return;
        }
    }
}

void sample_min_p(std::vector<candidate> &c, float p) {
    if (!(p > 0.0f) || c.empty()) return;
    double mx = c[0].logit;
    for (const candidate &x : c) mx = std::max(mx, x.logit);
    // p_i >= p * p_max  <=>  logit_i - logit_max >= log(p); the largest always stays (p > 1 acts as 1)
    const double cut = std::min(std::log((double)p), 0.0);
    c.erase(std::remove_if(c.begin(), c.end(), [&](const candidate &x) { return x.logit - mx < cut; }), c.end());
}

int32_t sample_draw(const std::vector<candidate> &c, float temp, std::mt19937_64 &rng) {
    if (c.empty()) return -1;
    if (!(temp >= sampler::kMinTemp)) {
        // the sampler's greedy rule: 0, a negative or a NaN temp made every
        // weight NaN or inverted the softmax, and the least likely id was drawn
        (void)rng();  // still one rng() per draw
        return std::min_element(c.begin(), c.end(), before)->id;
    }
    double mx = c[0].logit;
    for (const candidate &x : c) mx = std::max(mx, x.logit);
    std::vector<double> w(c.size());
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); i++) sum += (w[i] = std::exp((c[i].logit - mx) / temp));
    // u in [0, 1) from the top 53 bits: the same on every platform
    const double target = (double)(rng() >> 11) * 0x1.0p-53 * sum;
    double cum = 0.0;
    for (size_t i = 0; i < c.size(); i++)
        if ((cum += w[i]) > target) return c[i].id;
    return c.back().id;  // rounding left target at the very end
}

// The largest finite logit, the smallest id on ties (before's order), without
// building the candidate list: part of a decode step's host time (a scalar
// scan of 32000 logits took 87 us here, this one ~6). Two passes: the
// maximum over the finite logits (non-finite ones count as -inf), then the
// first logit equal to it (equal to a finite value: finite; +0 and -0 are
// equal, as in the scalar comparison). None finite: -1.
namespace {
// The largest finite value of logits[i, n) and mx (x > mx is false for NaN,
// x <= FLT_MAX for +inf), and the first index in [i, n) holding mx (-1: none).
float max_finite(const float *logits, int i, int n, float mx) {
    for (; i < n; i++) {
        const float x = logits[i];
        mx = x > mx && x <= FLT_MAX ? x : mx;
    }
    return mx;
}
int32_t first_equal(const float *logits, int i, int n, float mx) {
    for (; i < n; i++)
        if (logits[i] == mx) return i;
    return -1;
}
}  // namespace

int32_t greedy_argmax_portable(const float *logits, int n) {
    if (!logits) return -1;
    const float mx = max_finite(logits, 0, n, -INFINITY);
    return mx == -INFINITY ? -1 : first_equal(logits, 0, n, mx);
}

int32_t greedy_argmax(const float *logits, int n) {
    if (!logits) return -1;
#if defined(__SSE2__)
    const __m128 big = _mm_set1_ps(FLT_MAX), ninf = _mm_set1_ps(-INFINITY), sign = _mm_set1_ps(-0.0f);
    __m128 m0 = ninf, m1 = ninf;
    int i = 0;
    for (; n - i >= 8; i += 8) {
        const __m128 x0 = _mm_loadu_ps(logits + i), x1 = _mm_loadu_ps(logits + i + 4);
        // |x| <= FLT_MAX is false for +-inf and NaN: those become -inf
        const __m128 f0 = _mm_cmple_ps(_mm_andnot_ps(sign, x0), big), f1 = _mm_cmple_ps(_mm_andnot_ps(sign, x1), big);
        m0 = _mm_max_ps(m0, _mm_or_ps(_mm_and_ps(f0, x0), _mm_andnot_ps(f0, ninf)));
        m1 = _mm_max_ps(m1, _mm_or_ps(_mm_and_ps(f1, x1), _mm_andnot_ps(f1, ninf)));
    }
    float lanes[8];
    _mm_storeu_ps(lanes, m0), _mm_storeu_ps(lanes + 4, m1);
    const float mx = max_finite(logits, i, n, max_finite(lanes, 0, 8, -INFINITY));
    if (mx == -INFINITY) return -1;
    const __m128 target = _mm_set1_ps(mx);
    for (i = 0; n - i >= 8; i += 8) {
        const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(logits + i), target)) |
                        _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(logits + i + 4), target)) << 4;
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    return first_equal(logits, i, n, mx);
#else
    return greedy_argmax_portable(logits, n);
#endif
}

int32_t sampler::sample(const float *logits, int n_vocab, const int32_t *history, size_t n_history) {
    const bool penalty_off = !(repeat_penalty > 0.0f && std::isfinite(repeat_penalty)) || repeat_penalty == 1.0f ||
                             repeat_last_n == 0 || !history || !n_history;  // sample_penalty's "off"
    if (greedy() && penalty_off) {
        return greedy_argmax(logits, n_vocab);
    }
    std::vector<candidate> c = sample_candidates(logits, n_vocab);  // a NaN or inf is never a candidate
    if (c.empty()) return -1;
    sample_penalty(c, history, n_history, repeat_penalty, repeat_last_n);
    if (greedy()) {
        // top-k, top-p and min-p all keep the largest logit, so greedy skips them
        return std::min_element(c.begin(), c.end(), before)->id;
    }
    sample_top_k(c, top_k);
    sample_top_p(c, top_p);
    sample_min_p(c, min_p);
    return sample_draw(c, temp, rng);
}

}  // namespace tgm
