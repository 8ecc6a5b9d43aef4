// signature.cuh - internal knobs of the two signature ops' CUDA kernels
// (cuda/rope.cu, cuda/delta_rule.cu), for bench/ and tests/ only: force a
// kernel variant so that each one stays reachable and measured by name, and
// read back which variant the last launch used. Plain C++ (no CUDA headers),
// so host-only test code can include it. Not thread-safe; not public API.
#pragma once
#include "tinygml.h"

struct tg_tensor;

struct tg_cuda_sig_knobs {
    // rope_kv_update position validation: 0 auto (fused into the write kernel
    // when B*T <= 1024 and T <= 32, else a separate kernel first), 1 fused
    // whenever allowed, 2 always the separate validation kernel.
    int kv_validate = 0;
    // 1: rope / rope_kv_update always take the scalar, any-stride path.
    int rope_scalar = 0;
    // delta_rule threads per state column: 0 auto, 4 or 8 (8 needs Dk <= 128
    // or is implied for Dk > 128).
    int delta_tpc = 0;
    // 1: delta_rule always takes the scalar, any-stride state path.
    int delta_scalar = 0;
};
extern tg_cuda_sig_knobs tg_cuda_sig;

// Name of the variant the last launch of each op used, e.g.
// "vec4/fused" or "rows32x4/vec/f32" (static strings).
extern const char *tg_cuda_sig_last_rope;
extern const char *tg_cuda_sig_last_kv;
extern const char *tg_cuda_sig_last_delta;

// Device pre-check of a rope_kv_update node's positions (range, table,
// repeats), for the backend's pass over persistent inputs before any node
// runs (cuda/backend.cu device_check_of): with it, one bad position stops
// every cache update of the graph, as the CPU backend's host checks do.
// Without it each update still validates itself before it writes.
tg_status tg_cuda_check_rope_kv_update(tg_backend *be, const tg_tensor *dst);
