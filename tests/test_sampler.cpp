// test_sampler.cpp - the CLI's sampler (tgm::sampler, issue 8 item 7): a
// temperature near 0 is greedy, NaN and inf logits are never drawn, and
// sampling still follows the temperature-scaled softmax.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model.h"
#include "test_util.h"

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(unsigned seed, int n) {
    std::mt19937 rng(seed);
    return tgt::random_floats(rng, (size_t)n, -8.0f, 8.0f);
}

int argmax(const std::vector<float> &v) {
    int b = 0;
    for (int i = 1; i < (int)v.size(); i++)
        if (v[i] > v[b]) b = i;
    return b;
}

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
            EXPECT_EQ(s.sample(l.data(), (int)l.size()), argmax(l)) << "temp " << t << " seed " << seed;
        }
    }
}

// Greedy and sampled draws skip NaN, +inf and -inf logits wherever they are
// (index 0 included), and a row with no finite logit gives -1.
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
            s.rng.seed(seed);
            for (int draw = 0; draw < 20; draw++) {
                int32_t tok = s.sample(l.data(), (int)l.size());
                ASSERT_GE(tok, 0);
                ASSERT_LT(tok, 64);
                EXPECT_TRUE(std::isfinite(l[tok])) << "temp " << temp << " drew token " << tok;
            }
        }
    }
    std::vector<float> all = {kNaN, kInf, -kInf, kNaN};
    tgm::sampler s;
    EXPECT_EQ(s.sample(all.data(), 4), -1);
    s.temp = 1.0f;
    EXPECT_EQ(s.sample(all.data(), 4), -1);
}

// At temperature 1 with no top-k/top-p cut, the draw frequencies follow
// softmax(logits) (a float64 oracle; 20,000 draws, 5-sigma bounds).
TEST(Sampler, DrawsFollowTheSoftmax) {
    const std::vector<float> l = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, kNaN};
    std::vector<double> p(5);
    double sum = 0;
    for (int i = 0; i < 5; i++) sum += (p[i] = std::exp((double)l[i] / 0.7));
    tgm::sampler s;
    s.temp = 0.7f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.rng.seed(3);
    const int N = 20000;
    std::vector<int> count(6, 0);
    for (int i = 0; i < N; i++) count[(size_t)s.sample(l.data(), 6)]++;
    EXPECT_EQ(count[5], 0);
    for (int i = 0; i < 5; i++) {
        double q = p[i] / sum, sd = std::sqrt(q * (1 - q) / N);
        EXPECT_NEAR((double)count[i] / N, q, 5 * sd) << "token " << i;
    }
}

}  // namespace
