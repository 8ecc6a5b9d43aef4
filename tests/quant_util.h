// quant_util.h - helpers for the quantized-type tests: an independent float64
// decoder of the three block layouts (written from the format description,
// never calling the library), random weights, and quantized tensors with
// storage on a CPU backend.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "op_util.h"
#include "tinygml.h"

namespace qtu {

inline const tg_type k_qtypes[] = {TG_TYPE_Q8_0, TG_TYPE_Q4_0, TG_TYPE_Q4_K};

inline double half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return opu::f16_value(h);
}

// Q4_K sub-block j's 6-bit scale and min from the 12 packed bytes.
inline void k4_scale_min(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The n values (n a multiple of the block size) that the bytes at p encode.
inline std::vector<double> decode(tg_type t, const uint8_t *p, int64_t n) {
    std::vector<double> out((size_t)n);
    if (t == TG_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / 32; b++, p += 34)
            for (int i = 0; i < 32; i++) out[(size_t)(b * 32 + i)] = half(p) * (double)(int8_t)p[2 + i];
    } else if (t == TG_TYPE_Q4_0) {
        for (int64_t b = 0; b < n / 32; b++, p += 18)
            for (int i = 0; i < 16; i++) {
                out[(size_t)(b * 32 + i)] = half(p) * ((p[2 + i] & 15) - 8);
                out[(size_t)(b * 32 + i + 16)] = half(p) * ((p[2 + i] >> 4) - 8);
            }
    } else if (t == TG_TYPE_Q4_K) {
        for (int64_t b = 0; b < n / 256; b++, p += 144) {
            const double d = half(p), dmin = half(p + 2);
            const uint8_t *sc = p + 4, *qs = p + 16;
            for (int j = 0; j < 8; j++) {
                int s, m;
                k4_scale_min(j, sc, &s, &m);
                for (int l = 0; l < 32; l++) {
                    const uint8_t byte = qs[32 * (j / 2) + l];
                    const int q = j % 2 ? byte >> 4 : byte & 15;
                    out[(size_t)(b * 256 + 32 * j + l)] = d * s * q - dmin * m;
                }
            }
        }
    } else {
        ADD_FAILURE() << "not a quantized type";
    }
    return out;
}

// Weights as models have them: normal, a few outliers, per-row scales.
inline std::vector<float> weights(std::mt19937 &rng, int64_t K, int64_t M) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> sd(0.02f, 0.2f);
    std::vector<float> w((size_t)(K * M));
    for (int64_t m = 0; m < M; m++) {
        const float s = sd(rng);
        for (int64_t k = 0; k < K; k++) w[(size_t)(m * K + k)] = s * nd(rng) * (k % 97 == 5 ? 4.0f : 1.0f);
    }
    return w;
}

inline std::vector<uint8_t> quantized(tg_type t, const std::vector<float> &x) {
    std::vector<uint8_t> q(tg_row_size(t, (int64_t)x.size()));
    EXPECT_EQ(TG_OK, tg_quantize(t, x.data(), q.data(), (int64_t)x.size())) << tg_last_error();
    return q;
}

}  // namespace qtu
