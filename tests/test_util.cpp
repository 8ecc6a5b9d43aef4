// test_util.cpp - shared test helpers (see test_util.h).
#include "test_util.h"

#include <cmath>

namespace tgt {

std::vector<float> random_floats(std::mt19937 &rng, size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng);
    return v;
}

double rel_error(const std::vector<float> &out, const std::vector<double> &ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (std::isnan(out[i])) return INFINITY;  // NaN never passes
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return std::sqrt(num / den);
}

env::env(size_t mem, int threads) {
    tg_init_params ip = {mem, nullptr, true};
    ctx = tg_init(ip);
    cpu = tg_backend_cpu(threads);
}
env::~env() {
    for (tg_buffer *b : buffers) tg_buffer_free(b);
    tg_backend_free(cpu);
    tg_free(ctx);
}
tg_buffer *env::alloc(tg_backend *be) {
    tg_buffer *b = tg_backend_alloc(be ? be : cpu, ctx);
    if (b) buffers.push_back(b);
    return b;
}

}  // namespace tgt
