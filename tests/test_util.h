// test_util.h - helpers for the GoogleTest suite: random data, float64
// comparison, a context + CPU backend bundle, output poisoning and sentinels.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>  // alarm

#include "tinygml.h"

// ASan reports a too-large allocation and exits rather than throwing
// std::bad_alloc or returning NULL: tests that need either know it by this.
#if defined(__SANITIZE_ADDRESS__)
#define TG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_TEST_ASAN 1
#endif
#endif

// The last error message starts with "[call]".
#define EXPECT_ERR_NAMES(call) EXPECT_EQ(std::string(tg_last_error()).rfind("[" call "]", 0), 0u) << tg_last_error()

namespace tgt {

// A case that would block forever if the code under test regressed (an open
// of a FIFO waiting for a writer): SIGALRM ends the test binary after
// `seconds` (its default action), so ctest reports a failure at once instead
// of waiting out its 600 s timeout.
struct watchdog {
    explicit watchdog(unsigned seconds) { alarm(seconds); }
    ~watchdog() { alarm(0); }
    watchdog(const watchdog &) = delete;
    watchdog &operator=(const watchdog &) = delete;
};

// TG_TEST_SMALL=1 (the compute-sanitizer runs): the CUDA tests shrink their shapes.
inline bool small() {
    const char *e = getenv("TG_TEST_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}

std::vector<float> random_floats(std::mt19937 &rng, size_t n, float lo = -1.0f, float hi = 1.0f);
// ||out - ref|| / ||ref||; any NaN in out gives +inf.
double rel_error(const std::vector<float> &out, const std::vector<double> &ref);
// The same for n floats against n floats (logits against logits); a NaN in
// either gives +inf.
double rel_error(const float *out, const float *ref, size_t n);

// Upload float values into t of any float or quantized type (rounded to
// F16/BF16, or quantized with tg_quantize: the same blocks on every backend).
tg_status upload(tg_tensor *t, const std::vector<float> &v);

// Host storage of n values of a float type (F32/F16/BF16) as its bytes:
// set and get convert from and to F32 (the library's rounding).
struct store {
    tg_type type;
    std::vector<uint8_t> b;
    store(tg_type t = TG_TYPE_F32, size_t n = 0) : type(t), b(n * tg_type_size(t)) {}
    size_t size() const { return b.size() / tg_type_size(type); }
    void set(size_t i, float v) {
        if (type == TG_TYPE_F32) {
            memcpy(&b[4 * i], &v, 4);
            return;
        }
        const uint16_t h = type == TG_TYPE_F16 ? tg_fp32_to_fp16(v) : tg_fp32_to_bf16(v);
        memcpy(&b[2 * i], &h, 2);
    }
    float get(size_t i) const {
        if (type == TG_TYPE_F32) {
            float f;
            memcpy(&f, &b[4 * i], 4);
            return f;
        }
        uint16_t h;
        memcpy(&h, &b[2 * i], 2);
        return type == TG_TYPE_F16 ? tg_fp16_to_fp32(h) : tg_bf16_to_fp32(h);
    }
    int ulp16(size_t i) const {  // 16-bit patterns as an ordered integer
        uint16_t h;
        memcpy(&h, &b[2 * i], 2);
        return (h & 0x8000) ? -(int)(h & 0x7fff) : (int)h;
    }
};

// A no_alloc context and a CPU backend, freed together.
struct env {
    tg_context *ctx = nullptr;
    tg_backend *cpu = nullptr;
    std::vector<tg_buffer *> buffers;
    explicit env(size_t mem = 64 << 20, int threads = 2);
    ~env();
    tg_buffer *alloc(tg_backend *be = nullptr);  // tg_backend_alloc of ctx's tensors
};

// Fill the first `bytes` of be's compute buffer with NaN (0xFF bytes): a
// graph whose only intermediate has exactly that size runs first. Used
// before a graph whose intermediates must all be written by it.
void poison_compute_buffer(tg_backend *be, size_t bytes);

}  // namespace tgt
