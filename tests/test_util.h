// test_util.h - helpers for the GoogleTest suite: random data, float64
// comparison, a context + CPU backend bundle, output poisoning and sentinels.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tinygml.h"

namespace tgt {

std::vector<float> random_floats(std::mt19937 &rng, size_t n, float lo = -1.0f, float hi = 1.0f);
// ||out - ref|| / ||ref||; any NaN in out gives +inf.
double rel_error(const std::vector<float> &out, const std::vector<double> &ref);

// A no_alloc context and a CPU backend, freed together.
struct env {
    tg_context *ctx = nullptr;
    tg_backend *cpu = nullptr;
    std::vector<tg_buffer *> buffers;
    explicit env(size_t mem = 64 << 20, int threads = 2);
    ~env();
    tg_buffer *alloc(tg_backend *be = nullptr);  // tg_backend_alloc of ctx's tensors
};

}  // namespace tgt
