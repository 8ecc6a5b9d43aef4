// sig_util.h - helpers for the signature-op tests (rope_kv_update,
// delta_rule): typed host <-> tensor copies, storage rounding, raw bytes,
// and comparisons in double.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tinygml.h"

namespace sig {

// The value v takes once stored as type (F32, F16 or BF16), rounded once to
// nearest even, computed here independently of the library's conversions:
// `bits` significant bits, normal exponents from emin (below: subnormal steps).
inline double round_bits(double v, int bits, int emin, double max_finite) {
    if (!std::isfinite(v) || v == 0.0) return v;
    int e;
    std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
    const int exp = std::max(e - 1, emin);
    const double step = std::ldexp(1.0, exp - (bits - 1));
    const double r = std::nearbyint(v / step) * step;  // ties to even (default rounding mode)
    return std::fabs(r) > max_finite ? std::copysign(INFINITY, v) : r;
}
inline float round_to(tg_type type, double v) {
    switch (type) {
        case TG_TYPE_F16: return (float)round_bits(v, 11, -14, 65504.0);
        case TG_TYPE_BF16: return (float)round_bits(v, 8, -126, 3.3895313892515355e38);
        default: return (float)v;
    }
}

// Host values <-> a contiguous tensor of type F32/F16/BF16/I32 (converted).
inline void set_values(tg_tensor *t, const std::vector<float> &v) {
    ASSERT_EQ((int64_t)v.size(), tg_nelements(t));
    const tg_type type = tg_tensor_type(t);
    if (type == TG_TYPE_F32) {
        ASSERT_EQ(tg_tensor_set(t, v.data(), 0, v.size() * 4), TG_OK) << tg_last_error();
        return;
    }
    ASSERT_TRUE(type == TG_TYPE_F16 || type == TG_TYPE_BF16);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = type == TG_TYPE_F16 ? tg_fp32_to_fp16(v[i]) : tg_fp32_to_bf16(v[i]);
    ASSERT_EQ(tg_tensor_set(t, h.data(), 0, h.size() * 2), TG_OK) << tg_last_error();
}
inline void set_i32(tg_tensor *t, const std::vector<int32_t> &v) {
    ASSERT_EQ((int64_t)v.size(), tg_nelements(t));
    ASSERT_EQ(tg_tensor_set(t, v.data(), 0, v.size() * 4), TG_OK) << tg_last_error();
}
inline std::vector<float> get_values(const tg_tensor *t) {
    const size_t n = (size_t)tg_nelements(t);
    std::vector<float> v(n);
    const tg_type type = tg_tensor_type(t);
    if (type == TG_TYPE_F32) {
        EXPECT_EQ(tg_tensor_get(t, v.data(), 0, n * 4), TG_OK) << tg_last_error();
        return v;
    }
    std::vector<uint16_t> h(n);
    EXPECT_EQ(tg_tensor_get(t, h.data(), 0, n * 2), TG_OK) << tg_last_error();
    for (size_t i = 0; i < n; i++) v[i] = type == TG_TYPE_F16 ? tg_fp16_to_fp32(h[i]) : tg_bf16_to_fp32(h[i]);
    return v;
}
inline std::vector<uint8_t> get_bytes(const tg_tensor *t) {
    std::vector<uint8_t> b(tg_nbytes(t));
    EXPECT_EQ(tg_tensor_get(t, b.data(), 0, b.size()), TG_OK) << tg_last_error();
    return b;
}

// Random values already representable in type (so stored == given).
inline std::vector<float> random_stored(std::mt19937 &rng, tg_type type, size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v = tgt::random_floats(rng, n, lo, hi);
    for (float &x : v) x = round_to(type, x);
    return v;
}

// ||out - ref|| / ||ref|| over all entries, in double; NaN or inf in out gives +inf.
inline double rel_err(const std::vector<double> &out, const std::vector<double> &ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return std::sqrt(num / den);
}
inline std::vector<double> to_double(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }

inline bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

// Build and compute a graph of one output on backend be; returns the status.
inline tg_status compute(tg_context *ctx, tg_backend *be, tg_tensor *out) {
    tg_graph *g = tg_graph_new(ctx);
    if (!g) return TG_ERR_OOM;
    tg_status s = tg_graph_expand(g, out);
    if (s != TG_OK) return s;
    return tg_graph_compute(be, g);
}

}  // namespace sig
