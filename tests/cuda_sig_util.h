// cuda_sig_util.h - shared pieces of the CUDA signature-op tests
// (test_cuda_rope_kv.cpp, test_cuda_delta_rule.cpp): backing stores with
// stride gaps and sentinel tails, placed views, kernel knobs, the fixture.
// against the CPU backend, which is the reference: rope, rope_kv_update,
// delta_rule. Each case runs the same graph on the same data on both
// backends. Caches and states live inside larger backing tensors, so that
// every byte the op must not touch (other rows, stride gaps, a sentinel tail)
// is checked to be bit-identical afterwards; outputs that are intermediates
// are computed into a compute buffer poisoned with NaN first.
// TG_TEST_SMALL=1 shrinks the shapes (for compute-sanitizer runs).
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "internal.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {


bool small_run() {
    const char *e = getenv("TG_TEST_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}
int S(int full, int small) { return small_run() ? small : full; }


// ---------------------------------------------------------------------------
// Host storage of any float type, and a tensor placed inside a 1-D backing
// leaf at an element offset, with pad0 extra elements per row and a tail.

using tgt::store;  // (test_util.h)

struct placed {
    tg_type type = TG_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1}, st[4] = {1, 1, 1, 1}, off = 0, total = 0;
    int64_t at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
        return off + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
    }
};
placed place(tg_type t, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t pad0, int64_t off, int64_t tail = 67) {
    placed p;
    p.type = t;
    const int64_t ne[4] = {n0, n1, n2, n3};
    memcpy(p.ne, ne, sizeof(ne));
    p.st[1] = n0 + pad0, p.st[2] = p.st[1] * n1, p.st[3] = p.st[2] * n2;
    p.off = off;
    p.total = off + p.st[3] * n3 + tail;
    return p;
}
tg_tensor *view_of(tg_context *ctx, tg_tensor *back, const placed &p) {
    const size_t es = tg_type_size(p.type);
    return tg_view_4d(ctx, back, p.ne[0], p.ne[1], p.ne[2], p.ne[3], p.st[1] * es, p.st[2] * es, p.st[3] * es,
                      p.off * es);
}
// Scatter a logical (contiguous ne-order) array into placed storage.
void scatter(const std::vector<float> &x, const placed &p, store &s) {
    size_t n = 0;
    for (int64_t i3 = 0; i3 < p.ne[3]; i3++)
        for (int64_t i2 = 0; i2 < p.ne[2]; i2++)
            for (int64_t i1 = 0; i1 < p.ne[1]; i1++)
                for (int64_t i0 = 0; i0 < p.ne[0]; i0++) s.set(p.at(i0, i1, i2, i3), x[n++]);
}

// A context + buffer + graph for one backend, freed together.
struct built {
    tg_context *ctx = nullptr;
    tg_buffer *buf = nullptr;
    tg_graph *g = nullptr;
    built() { ctx = tg_init({4u << 20, nullptr, true}); }
    ~built() {
        tg_buffer_free(buf);
        tg_free(ctx);
    }
    void set(tg_tensor *t, const void *d) { ASSERT_EQ(tg_tensor_set(t, d, 0, tg_nbytes(t)), TG_OK) << tg_last_error(); }
    void get(tg_tensor *t, void *d) { ASSERT_EQ(tg_tensor_get(t, d, 0, tg_nbytes(t)), TG_OK) << tg_last_error(); }
};
// NaN over the backend's whole compute buffer (intermediates), so that an
// output element the kernel forgets stays NaN and fails the comparison.
void poison_compute_buffer(tg_backend *be) {
    if (be->compute_buf) be->iface->memset(be, be->compute_buf, 0xff, be->compute_size);
}

struct CudaSig : ::testing::Test {
    static tg_backend *cpu, *gpu;
    static void SetUpTestSuite() {
        cpu = tg_backend_cpu(4);
        gpu = tg_cuda_available() ? tg_backend_cuda(0) : nullptr;
    }
    static void TearDownTestSuite() {
        tg_backend_free(gpu);
        tg_backend_free(cpu);
        gpu = cpu = nullptr;
    }
    void SetUp() override {
        if (!gpu) GTEST_SKIP() << "no CUDA device";
    }
};
tg_backend *CudaSig::cpu = nullptr;
tg_backend *CudaSig::gpu = nullptr;

// Set the shared CUDA backend's kernel knobs for one scope (no-op without CUDA).
struct knobs {
#ifdef TG_HAVE_CUDA
    tg_cuda_sig_knobs saved{};
    knobs(int kv_validate, int rope_scalar, int delta_tpc, int delta_scalar, int delta_kernel = 0, int kv_rounds = 0) {
        if (!CudaSig::gpu) return;
        tg_cuda_sig_knobs &k = *tg_cuda_knobs(CudaSig::gpu);
        saved = k;
        k.kv_validate = kv_validate, k.rope_scalar = rope_scalar;
        k.delta_tpc = delta_tpc, k.delta_scalar = delta_scalar;
        k.delta_kernel = delta_kernel, k.kv_rounds = kv_rounds;
    }
    ~knobs() {
        if (CudaSig::gpu) *tg_cuda_knobs(CudaSig::gpu) = saved;
    }
#else
    knobs(int, int, int, int, int = 0, int = 0) {}
#endif
};

enum { LAY_CONTIG, LAY_PADDED, LAY_UNALIGNED, LAY_PERMUTED, LAY_SCALAR };
const tg_type F32 = TG_TYPE_F32, F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16;

}  // namespace
