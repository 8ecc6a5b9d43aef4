// test_sampler.cpp - the CLI's sampler (tgm::sampler): llama.cpp's chain
// (repetition penalty, top-k, top-p, min-p, temperature, draw), each stage
// against a float64 reference on random logits at the shipped vocabulary
// (259) and a real one (32000); the draws against the distribution the chain
// leaves (a chi-square bound that the usual bugs fail); seeds; and the old
// guarantees: a temperature near 0 is greedy, NaN and inf logits are never
// drawn, -1 when no logit is finite.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "model.h"
#include "test_util.h"

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(unsigned seed, int n, float lo = -8.0f, float hi = 8.0f) {
    std::mt19937 rng(seed);
    return tgt::random_floats(rng, (size_t)n, lo, hi);
}

// Logits on a grid of 0.25 in [-4, 4]: many exact ties.
std::vector<float> tied_logits(unsigned seed, int n) {
    std::vector<float> l = random_logits(seed, n, -4.0f, 4.0f);
    for (float &x : l) x = std::round(x * 4.0f) / 4.0f;
    return l;
}

int argmax(const std::vector<float> &v) {
    int b = 0;
    for (int i = 1; i < (int)v.size(); i++)
        if (v[i] > v[b]) b = i;
    return b;
}

std::vector<tgm::candidate> all_of(const std::vector<float> &l) { return tgm::sample_candidates(l.data(), (int)l.size()); }

std::vector<int32_t> ids(const std::vector<tgm::candidate> &c) {
    std::vector<int32_t> r;
    for (const tgm::candidate &x : c) r.push_back(x.id);
    return r;
}

// --- the float64 reference chain: plain loops over (id, logit) ---------------

struct ref_tok {
    int id;
    double logit;
};

std::vector<ref_tok> ref_finite(const std::vector<float> &l) {
    std::vector<ref_tok> r;
    for (int i = 0; i < (int)l.size(); i++)
        if (std::isfinite(l[i])) r.push_back({i, (double)l[i]});
    return r;
}

// llama.cpp's penalty_repeat over the last n history tokens (n < 0: all)
void ref_penalty(std::vector<ref_tok> &r, const std::vector<int32_t> &hist, int n, double penalty) {
    if (n == 0) return;
    size_t from = n < 0 || (size_t)n >= hist.size() ? 0 : hist.size() - (size_t)n;
    const std::set<int32_t> window(hist.begin() + (long)from, hist.end());
    for (ref_tok &t : r)
        if (window.count(t.id)) t.logit = t.logit > 0 ? t.logit / penalty : t.logit * penalty;
}

// the k largest; ties: the smaller id first (a stable sort of the id order)
void ref_top_k(std::vector<ref_tok> &r, int k) {
    std::stable_sort(r.begin(), r.end(), [](const ref_tok &a, const ref_tok &b) { return a.logit > b.logit; });
    if (k > 0 && (size_t)k < r.size()) r.resize((size_t)k);
}

std::vector<double> ref_softmax(const std::vector<ref_tok> &r, double temp = 1.0) {
    double mx = -INFINITY, sum = 0;
    for (const ref_tok &t : r) mx = std::max(mx, t.logit);
    std::vector<double> p;
    for (const ref_tok &t : r) sum += p.emplace_back(std::exp((t.logit - mx) / temp));
    for (double &x : p) x /= sum;
    return p;
}

// the smallest prefix of the sorted list whose probability reaches p
void ref_top_p(std::vector<ref_tok> &r, double p) {
    if (p >= 1.0) return;
    ref_top_k(r, 0);
    const std::vector<double> q = ref_softmax(r);
    double s = 0;
    for (size_t m = 1; m <= r.size(); m++)
        if ((s += q[m - 1]) >= p) {
            r.resize(m);
            return;
        }
}

void ref_min_p(std::vector<ref_tok> &r, double p) {
    if (p <= 0.0) return;
    const std::vector<double> q = ref_softmax(r);
    const double qmax = *std::max_element(q.begin(), q.end());
    std::vector<ref_tok> keep;
    for (size_t i = 0; i < r.size(); i++)
        if (q[i] >= p * qmax) keep.push_back(r[i]);
    r = keep;
}

struct chain {
    float temp, top_p, min_p, penalty;
    int top_k, last_n;
};

// The probability of each id under the chain (0 where it is cut); the
// broken variants are the bugs the draw test must catch.
enum class bug { none, temp_first, no_penalty, no_top_p, no_min_p };
std::vector<double> ref_distribution(const std::vector<float> &l, const std::vector<int32_t> &hist, const chain &c,
                                     bug b = bug::none) {
    std::vector<ref_tok> r = ref_finite(l);
    if (b == bug::temp_first)
        for (ref_tok &t : r) t.logit /= c.temp;
    if (b != bug::no_penalty) ref_penalty(r, hist, c.last_n, c.penalty);
    ref_top_k(r, c.top_k);
    if (b != bug::no_top_p) ref_top_p(r, c.top_p);
    if (b != bug::no_min_p) ref_min_p(r, c.min_p);
    const std::vector<double> q = ref_softmax(r, b == bug::temp_first ? 1.0 : c.temp);
    std::vector<double> dist(l.size(), 0.0);
    for (size_t i = 0; i < r.size(); i++) dist[(size_t)r[i].id] = q[i];
    return dist;
}

tgm::sampler make(const chain &c, uint64_t seed) {
    tgm::sampler s;
    s.temp = c.temp;
    s.top_k = c.top_k;
    s.top_p = c.top_p;
    s.min_p = c.min_p;
    s.repeat_penalty = c.penalty;
    s.repeat_last_n = c.last_n;
    s.rng.seed(seed);
    return s;
}

// Pearson's statistic of counts against dist; +inf when a token of zero
// probability was drawn.
double chi_square(const std::vector<int> &count, const std::vector<double> &dist, int n) {
    double x2 = 0;
    for (size_t i = 0; i < dist.size(); i++) {
        const double e = dist[i] * n;
        if (e == 0.0) {
            if (count[i] > 0) return INFINITY;
            continue;
        }
        x2 += (count[i] - e) * (count[i] - e) / e;
    }
    return x2;
}

// --- the stages --------------------------------------------------------------

// The defaults are llama.cpp's (common_params_sampling).
TEST(Sampler, DefaultsAreLlamaCpps) {
    tgm::sampler s;
    EXPECT_EQ(s.temp, 0.8f);
    EXPECT_EQ(s.top_k, 40);
    EXPECT_EQ(s.top_p, 0.95f);
    EXPECT_EQ(s.min_p, 0.05f);
    EXPECT_EQ(s.repeat_penalty, 1.0f);
    EXPECT_EQ(s.repeat_last_n, 64);
    EXPECT_FALSE(s.greedy());
}

// Top-k keeps exactly the k largest logits, in order, ties by the smaller id.
TEST(Sampler, TopKKeepsTheKLargest) {
    for (int n : {259, 32000}) {
        for (unsigned seed = 0; seed < (n == 259 ? 4u : 2u); seed++) {
            const std::vector<float> l = seed % 2 ? tied_logits(seed, n) : random_logits(seed, n);
            for (int k : {1, 2, 5, 40, 258, 259, 1000, 0, -3, n, n + 7}) {
                std::vector<tgm::candidate> c = all_of(l);
                tgm::sample_top_k(c, k);
                std::vector<ref_tok> r = ref_finite(l);
                ref_top_k(r, k);
                ASSERT_EQ(c.size(), r.size()) << "n " << n << " k " << k;
                for (size_t i = 0; i < r.size(); i++) {
                    ASSERT_EQ(c[i].id, r[i].id) << "n " << n << " k " << k << " rank " << i;
                    ASSERT_EQ(c[i].logit, r[i].logit);
                }
            }
        }
    }
    // all equal: the first k ids
    std::vector<float> flat(100, 0.5f);
    std::vector<tgm::candidate> c = all_of(flat);
    tgm::sample_top_k(c, 3);
    EXPECT_EQ(ids(c), (std::vector<int32_t>{0, 1, 2}));
}

// Top-p keeps the smallest prefix of the sorted tokens whose probability
// reaches p (at least one token), sorted first if it was not.
TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
    int n_cut = 0;
    for (int n : {259, 32000}) {
        for (unsigned seed = 0; seed < (n == 259 ? 4u : 2u); seed++) {
            // a narrow range at 32000 so that p cuts in the middle, not after a few tokens
            const std::vector<float> l = random_logits(seed + 10, n, -4.0f, n == 259 ? 8.0f : 2.0f);
            for (float p : {0.0f, 0.1f, 0.5f, 0.9f, 0.95f, 0.999f, 1.0f}) {
                for (bool presorted : {true, false}) {
                    std::vector<tgm::candidate> c = all_of(l);
                    if (presorted) tgm::sample_top_k(c, 0);
                    tgm::sample_top_p(c, p);
                    std::vector<ref_tok> r = ref_finite(l);
                    ref_top_p(r, p);
                    if (p >= 1.0f) ref_top_k(r, 0);  // off: our stage leaves the list sorted only if it was
                    ASSERT_EQ(c.size(), r.size()) << "n " << n << " p " << p;
                    std::vector<int32_t> got = ids(c), want;
                    for (const ref_tok &t : r) want.push_back(t.id);
                    if (p >= 1.0f && !presorted) std::sort(got.begin(), got.end()), std::sort(want.begin(), want.end());
                    ASSERT_EQ(got, want) << "n " << n << " p " << p;
                    n_cut += c.size() > 1 && c.size() < (size_t)n;
                }
            }
        }
    }
    EXPECT_GT(n_cut, 20);  // the cases cut inside the list, not only at its ends
}

// Min-p keeps the tokens whose probability is at least min_p times the
// largest, in their order.
TEST(Sampler, MinPKeepsTokensAboveTheFraction) {
    for (int n : {259, 32000}) {
        for (unsigned seed = 0; seed < (n == 259 ? 4u : 2u); seed++) {
            const std::vector<float> l = random_logits(seed + 20, n, -6.0f, 6.0f);
            for (float p : {0.0f, 0.001f, 0.05f, 0.2f, 0.5f, 0.9f, 1.0f}) {
                std::vector<tgm::candidate> c = all_of(l);
                tgm::sample_min_p(c, p);
                std::vector<ref_tok> r = ref_finite(l);
                ref_min_p(r, p);
                std::vector<int32_t> want;
                for (const ref_tok &t : r) want.push_back(t.id);
                ASSERT_EQ(ids(c), want) << "n " << n << " p " << p;
                ASSERT_GE(c.size(), 1u);
            }
        }
    }
    // past 1 nothing would pass, so it acts as 1: the largest (and its ties) stay
    std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
    for (float p : {1.5f, kInf}) {
        std::vector<tgm::candidate> c = all_of(l);
        tgm::sample_min_p(c, p);
        EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 3})) << p;
    }
}

// The repetition penalty as llama.cpp defines it: a token among the last n
// of the history has its logit divided by the penalty when positive and
// multiplied when not, once however often it occurs; others are untouched.
TEST(Sampler, RepeatPenaltyDividesPositiveMultipliesNegative) {
    for (int n : {259, 32000}) {
        std::mt19937 rng(7);
        std::vector<float> l = random_logits(30, n, -5.0f, 5.0f);
        l[3] = 0.0f;
        std::vector<int32_t> hist(300);
        // repeats, and ids past the vocabulary that must be ignored
        for (int32_t &h : hist) h = (int32_t)(rng() % 80 == 0 ? n + rng() % 5 : rng() % std::min(n, 400));
        hist[299] = 3;
        for (float pen : {1.3f, 0.7f, 1.0f, 4.0f}) {
            for (int last_n : {0, 1, 10, 64, 299, 300, 1000, -1}) {
                std::vector<tgm::candidate> c = all_of(l);
                tgm::sample_penalty(c, hist.data(), hist.size(), pen, last_n);
                std::vector<ref_tok> r = ref_finite(l);
                ref_penalty(r, hist, last_n, pen);
                ASSERT_EQ(c.size(), r.size());
                int changed = 0;
                for (size_t i = 0; i < r.size(); i++) {
                    ASSERT_EQ(c[i].id, r[i].id);
                    ASSERT_EQ(c[i].logit, r[i].logit) << "token " << r[i].id << " penalty " << pen << " last " << last_n;
                    changed += c[i].logit != l[i];
                }
                if (pen != 1.0f && last_n >= 10) EXPECT_GT(changed, 5) << pen << " " << last_n;
                if (pen == 1.0f || last_n == 0) EXPECT_EQ(changed, 0);
            }
        }
    }
    // a penalty that is not a positive finite number changes nothing
    std::vector<float> l = {2.0f, -2.0f};
    std::vector<int32_t> h = {0, 1};
    for (float pen : {0.0f, -1.0f, kNaN, kInf}) {
        std::vector<tgm::candidate> c = all_of(l);
        tgm::sample_penalty(c, h.data(), h.size(), pen, -1);
        EXPECT_EQ(c[0].logit, 2.0);
        EXPECT_EQ(c[1].logit, -2.0);
    }
}

// Greedy is the largest logit after the penalty (the other stages keep it).
TEST(Sampler, GreedyTakesTheLargestLogitAfterThePenalty) {
    std::vector<float> l = random_logits(40, 259, -2.0f, 2.0f);
    l[10] = 3.0f;
    l[11] = 2.9f;
    tgm::sampler s;
    s.temp = 0.0f;
    EXPECT_EQ(s.sample(l.data(), 259), 10);
    s.repeat_penalty = 1.1f;  // 3.0 / 1.1 < 2.9
    const int32_t h[] = {10};
    EXPECT_EQ(s.sample(l.data(), 259, h, 1), 11);
    s.repeat_last_n = 0;
    EXPECT_EQ(s.sample(l.data(), 259, h, 1), 10);
    // ties: the smaller id
    std::vector<float> flat(50, 1.0f);
    EXPECT_EQ(s.sample(flat.data(), 50), 0);
    // the direct scan of greedy without a penalty: non-finite logits skipped,
    // the first of equal maxima, nothing finite -> -1
    s.repeat_penalty = 1.0f;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float mixed[] = {nan, inf, 2.0f, 5.0f, -inf, 5.0f, nan};
    EXPECT_EQ(s.sample(mixed, 7), 3);
    const float none[] = {nan, -inf, inf};
    EXPECT_EQ(s.sample(none, 3), -1);
    const float neg[] = {-inf, -7.0f, -3.0f, -3.0f};
    EXPECT_EQ(s.sample(neg, 4, h, 1), 2);  // penalty 1: off, the history does not matter
}

// greedy_argmax (the vectorized scan) against a plain one over every length
// up to 70 (all lane and tail positions) and a vocabulary of 32000: random
// logits with NaN, +inf and -inf sprinkled in, maxima tied across lanes and
// in the tail, +0/-0 ties, and rows with nothing finite.
TEST(Sampler, GreedyArgmaxMatchesAPlainScan) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    auto plain = [](const std::vector<float> &l) {
        int32_t best = -1;
        for (size_t i = 0; i < l.size(); i++)
            if (std::isfinite(l[i]) && (best < 0 || l[i] > l[(size_t)best])) best = (int32_t)i;
        return best;
    };
    std::mt19937 rng(5);
    int checked = 0;
    for (int n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 70, 32000}) {
        for (int trial = 0; trial < 40; trial++) {
            std::vector<float> l = random_logits(1000 + trial + n, n, -3.0f, 3.0f);
            std::uniform_int_distribution<int> at(0, n - 1);
            const int kind = trial % 8;
            for (int k = 0; k < 1 + n / 8; k++) {
                if (kind == 1) l[(size_t)at(rng)] = nan;
                if (kind == 2) l[(size_t)at(rng)] = inf;
                if (kind == 3) l[(size_t)at(rng)] = -inf;
            }
            if (kind == 4) {  // the maximum several times, one of them maybe in the tail
                for (int k = 0; k < 3; k++) l[(size_t)at(rng)] = 9.0f;
                l[(size_t)(n - 1)] = 9.0f;
            }
            if (kind == 5) {  // +0 and -0 as the maximum
                for (float &v : l) v = -std::fabs(v) - 1.0f;
                l[(size_t)at(rng)] = -0.0f;
                l[(size_t)at(rng)] = 0.0f;
            }
            if (kind == 6)  // nothing finite
                for (size_t i = 0; i < l.size(); i++) l[i] = i % 3 == 0 ? nan : i % 3 == 1 ? inf : -inf;
            if (kind == 7) {  // one finite value among non-finite ones
                for (size_t i = 0; i < l.size(); i++) l[i] = i % 2 ? nan : -inf;
                l[(size_t)at(rng)] = -1e30f;
            }
            ASSERT_EQ(tgm::greedy_argmax(l.data(), n), plain(l)) << "n " << n << " trial " << trial;
            ASSERT_EQ(tgm::greedy_argmax_portable(l.data(), n), plain(l)) << "portable, n " << n << " trial " << trial;
            checked++;
        }
    }
    EXPECT_EQ(checked, 15 * 40);
    const float one = 1.0f;
    EXPECT_EQ(tgm::greedy_argmax(&one, 0), -1);  // nothing to choose from
    EXPECT_EQ(tgm::greedy_argmax_portable(&one, 0), -1);
    // no logits at all (a caller's missing buffer) with a vocabulary: -1, not a crash
    EXPECT_EQ(tgm::greedy_argmax(nullptr, 300), -1);
    EXPECT_EQ(tgm::greedy_argmax_portable(nullptr, 300), -1);
    EXPECT_TRUE(tgm::sample_candidates(nullptr, 300).empty());
    tgm::sampler greedy_s;
    greedy_s.temp = 0.0f;
    EXPECT_EQ(greedy_s.sample(nullptr, 300, nullptr, 0), -1);
    tgm::sampler drawing;
    drawing.temp = 0.8f;
    EXPECT_EQ(drawing.sample(nullptr, 300, nullptr, 0), -1);
}

// --- the draws ---------------------------------------------------------------

// The draws follow the distribution the whole chain leaves: Pearson's
// chi-square of 10,000 draws against the float64 reference under a bound of
// df + 6 sqrt(2 df) (a p-value far below 1e-6 for the df here); the same
// counts against the distribution of each usual bug (temperature applied
// first, no penalty, no top-p, no min-p) exceed the bound, so the check can fail.
TEST(Sampler, DrawsFollowTheChainsDistribution) {
    const int V = 259, N = 10000;
    const std::vector<float> l = random_logits(50, V, -3.0f, 3.0f);
    std::vector<int32_t> hist;
    std::vector<ref_tok> sorted = ref_finite(l);
    ref_top_k(sorted, 0);
    for (int i = 0; i < 12; i += 2) hist.push_back(sorted[(size_t)i].id);  // penalize some of the top tokens
    // each chain makes one stage cut a large share: top-p, min-p, penalty with all tokens
    std::vector<int> caught(5, 0);
    for (const chain &c : {chain{0.7f, 0.6f, 0.01f, 1.5f, 40, 64}, chain{1.3f, 0.999f, 0.2f, 1.2f, 0, 3},
                           chain{0.5f, 0.97f, 0.02f, 2.0f, 0, -1}}) {
        const std::vector<double> dist = ref_distribution(l, hist, c);
        int df = -1;
        for (double p : dist) df += p > 0;
        ASSERT_GE(df, 4) << "the chain should leave several tokens";
        tgm::sampler s = make(c, 99);
        std::vector<int> count(V, 0);
        for (int i = 0; i < N; i++) {
            const int32_t t = s.sample(l.data(), V, hist.data(), hist.size());
            ASSERT_GE(t, 0);
            count[(size_t)t]++;
        }
        const double bound = df + 6.0 * std::sqrt(2.0 * df);
        EXPECT_LT(chi_square(count, dist, N), bound) << "temp " << c.temp << " df " << df;
        // a bug that changes the distribution by 2% (total variation) must be caught
        for (bug b : {bug::temp_first, bug::no_penalty, bug::no_top_p, bug::no_min_p}) {
            const std::vector<double> wrong = ref_distribution(l, hist, c, b);
            double tv = 0;
            for (int i = 0; i < V; i++) tv += 0.5 * std::fabs(wrong[(size_t)i] - dist[(size_t)i]);
            if (tv < 0.02) continue;
            EXPECT_GT(chi_square(count, wrong, N), bound) << "bug " << (int)b << " would pass, temp " << c.temp;
            caught[(size_t)b]++;
        }
    }
    for (bug b : {bug::temp_first, bug::no_penalty, bug::no_top_p, bug::no_min_p})
        EXPECT_GT(caught[(size_t)b], 0) << "no chain tells bug " << (int)b << " apart";
}

// At temperature 0.7 with every cut off, the draw frequencies follow
// softmax(logits / 0.7) (20,000 draws, 5-sigma bounds per token).
TEST(Sampler, DrawsFollowTheSoftmax) {
    const std::vector<float> l = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, kNaN};
    std::vector<double> p(5);
    double sum = 0;
    for (int i = 0; i < 5; i++) sum += (p[i] = std::exp((double)l[i] / 0.7));
    tgm::sampler s = make(chain{0.7f, 1.0f, 0.0f, 1.0f, 0, 64}, 3);
    const int N = 20000;
    std::vector<int> count(6, 0);
    for (int i = 0; i < N; i++) count[(size_t)s.sample(l.data(), 6)]++;
    EXPECT_EQ(count[5], 0);
    for (int i = 0; i < 5; i++) {
        double q = p[i] / sum, sd = std::sqrt(q * (1 - q) / N);
        EXPECT_NEAR((double)count[i] / N, q, 5 * sd) << "token " << i;
    }
}

// A seed gives the same tokens: two samplers with one seed agree on 1,000
// draws over changing logits and history, another seed does not, and the
// first draws of seed 42 are pinned (mt19937_64 and the draw are fully
// specified, so this holds on every platform).
TEST(Sampler, ASeedReproducesTheDraws) {
    const chain c{1.0f, 0.95f, 0.05f, 1.1f, 40, 64};
    tgm::sampler a = make(c, 42), b = make(c, 42), other = make(c, 43);
    std::vector<int32_t> ha, hb, ho;
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        const std::vector<float> l = random_logits(1000 + i, 259, -2.0f, 2.0f);
        const int32_t ta = a.sample(l.data(), 259, ha.data(), ha.size());
        const int32_t tb = b.sample(l.data(), 259, hb.data(), hb.size());
        const int32_t to = other.sample(l.data(), 259, ho.data(), ho.size());
        ASSERT_EQ(ta, tb) << "draw " << i;
        differ += ta != to;
        ha.push_back(ta), hb.push_back(tb), ho.push_back(to);
    }
    EXPECT_GT(differ, 250);
    tgm::sampler s = make(chain{1.0f, 1.0f, 0.0f, 1.0f, 0, 0}, 42);
    const std::vector<float> l = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // uniform: the draw is u * 8
    std::vector<int32_t> first;
    for (int i = 0; i < 12; i++) first.push_back(s.sample(l.data(), 8));
    std::mt19937_64 g(42);
    std::vector<int32_t> want;
    for (int i = 0; i < 12; i++) want.push_back((int32_t)((double)(g() >> 11) * 0x1.0p-53 * 8.0));
    EXPECT_EQ(first, want);
}

// --- the guarantees of issue 8 -----------------------------------------------

// Below kMinTemp the draw is the argmax: logits / 1e-38 overflow float, and
// the old sampler then drew from NaN weights.
TEST(Sampler, TinyTemperatureIsGreedy) {
    for (float t : {1e-38f, 1e-30f, 1e-10f, 5e-5f, 0.0f, -1.0f, kNaN}) {
        for (unsigned seed = 0; seed < 20; seed++) {
            std::vector<float> l = random_logits(seed, 259);
            l[seed * 7] = 30.0f;  // far ahead: also what a large finite logit / t gives
            l[seed * 7 + 1] = 29.5f;
            tgm::sampler s;
            s.temp = t;
            s.top_k = 0;
            s.top_p = 1.0f;
            s.rng.seed(seed);
            EXPECT_TRUE(s.greedy());
            EXPECT_EQ(s.sample(l.data(), (int)l.size()), argmax(l)) << "temp " << t << " seed " << seed;
        }
    }
}

// sample_draw itself (public, model.h) follows the same rule: a temp of 0, a
// negative one or NaN drew the least likely candidate (session 32's sweep:
// every weight NaN, or the softmax inverted), now the largest logit; one
// rng() per draw either way.
TEST(Sampler, DrawWithATemperatureBelowTheMinimumIsGreedy) {
    const float l[5] = {1, 5, 3, -2, 5};
    std::vector<tgm::candidate> c = tgm::sample_candidates(l, 5);
    for (float t : {0.0f, -0.0f, -1.0f, 5e-5f, kNaN, -kInf}) {
        std::mt19937_64 rng(7), ref(7);
        EXPECT_EQ(tgm::sample_draw(c, t, rng), 1) << "temp " << t;  // 5, the smaller id of the tie
        ref();
        EXPECT_EQ(rng(), ref()) << "temp " << t << ": one rng() per draw";
    }
    std::mt19937_64 rng(7);
    EXPECT_EQ(tgm::sample_draw({}, 0.0f, rng), -1);
}

// Greedy and sampled draws skip NaN, +inf and -inf logits wherever they are
// (index 0 included), whatever the stages, and a row with no finite logit
// gives -1.
TEST(Sampler, NonFiniteLogitsAreNeverDrawn) {
    for (float temp : {0.0f, 1.0f, 1e-38f, 50.0f}) {
        for (unsigned seed = 0; seed < 50; seed++) {
            std::vector<float> l = random_logits(seed + 100, 64);
            l[0] = kNaN;
            l[5 + seed % 10] = kInf;
            l[20 + seed % 7] = -kInf;
            l[40 + seed % 5] = kNaN;
            tgm::sampler s;
            s.temp = temp;
            s.top_k = seed % 2 ? 0 : 10;
            s.top_p = seed % 3 ? 1.0f : 0.9f;
            s.min_p = seed % 4 ? 0.0f : 0.3f;
            s.repeat_penalty = seed % 5 ? 1.0f : 1.5f;
            s.rng.seed(seed);
            std::vector<int32_t> hist = {0, 5, 6, 20, 40};
            for (int draw = 0; draw < 20; draw++) {
                int32_t tok = s.sample(l.data(), (int)l.size(), hist.data(), hist.size());
                ASSERT_GE(tok, 0);
                ASSERT_LT(tok, 64);
                EXPECT_TRUE(std::isfinite(l[tok])) << "temp " << temp << " drew token " << tok;
                hist.push_back(tok);
            }
        }
    }
    std::vector<float> all = {kNaN, kInf, -kInf, kNaN};
    tgm::sampler s;
    s.temp = 0.0f;
    EXPECT_EQ(s.sample(all.data(), 4), -1);
    s.temp = 1.0f;
    EXPECT_EQ(s.sample(all.data(), 4), -1);
    EXPECT_EQ(s.sample(all.data(), 0), -1);
}

}  // namespace
