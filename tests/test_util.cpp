// test_util.cpp - shared test helpers (see test_util.h).
#include "test_util.h"

#include <cmath>

namespace tgt {

tg_status upload(tg_tensor *t, const std::vector<float> &v) {
    const tg_type type = tg_tensor_type(t);
    if (type == TG_TYPE_F32) return tg_tensor_set(t, v.data(), 0, v.size() * 4);
    if (tg_type_is_quantized(type)) {
        std::vector<uint8_t> q(tg_nbytes(t));
        const tg_status s = tg_quantize(type, v.data(), q.data(), (int64_t)v.size());
        return s != TG_OK ? s : tg_tensor_set(t, q.data(), 0, q.size());
    }
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = type == TG_TYPE_F16 ? tg_fp32_to_fp16(v[i]) : tg_fp32_to_bf16(v[i]);
    return tg_tensor_set(t, h.data(), 0, h.size() * 2);
}

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

double rel_error(const float *out, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(out[i]) || std::isnan(ref[i])) return INFINITY;
        const double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
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

void poison_compute_buffer(tg_backend *be, size_t bytes) {
    if (bytes < 4) return;
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_tensor *y = tg_scale(ctx, tg_new_tensor_1d(ctx, TG_TYPE_F32, (int64_t)(bytes / 4)), 1.0f);
    tg_graph *g = tg_graph_new(ctx);
    tg_graph_expand(g, y);
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    ASSERT_NE(buf, nullptr) << tg_last_error();
    ASSERT_EQ(tg_buffer_clear(buf, 0xFF), TG_OK) << tg_last_error();
    ASSERT_EQ(tg_graph_compute(be, g), TG_OK) << tg_last_error();
    tg_buffer_free(buf);
    tg_free(ctx);
}

}  // namespace tgt
