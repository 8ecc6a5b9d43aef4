// delta_rule_chunked.cuh - host entry of the chunked tensor-core delta rule
// (cuda/delta_rule_chunked.cu), called by tg_cuda_delta_rule (cuda/delta_rule.cu).
#pragma once
#include "tinygml.h"

struct tg_tensor;

// Whether the tensor path takes these head dims (Dk a multiple of 8 in [8, 256], Dv <= 256).
bool tg_cuda_delta_chunked_covers(long long Dk, long long Dv);
// AUTO's smallest T for the chunked path where it takes the chunk-parallel form (cuda/delta_rule.cu
// tg_cuda_delta_rule), and from which GATED_DELTA's fewer-heads rule leaves the single-kernel form
// (tg_cuda_delta_single_form)
constexpr long long kFewHeadsMinT = 1024;
// Whether the (sequence, value head) pairs alone fill the GPU (2 B Hv above the SM count): the
// single-kernel chunked form then (and from fewer pairs on the BF16 wgmma kernel:
// tg_cuda_delta_single_form), the chunk-parallel one otherwise (docs/ops.md).
bool tg_cuda_delta_heads_fill(tg_backend *be, long long B, long long Hv);
// Whether dst's node takes the single-kernel chunked form: knob delta_chunk_fused 1 / 2 forces it /
// the chunk-parallel one; else where the heads fill the GPU, or where the full case runs
// delta_wgb_kernel (BF16 q/k/v) on B Hv Dv / 128 blocks of at least 5/12 (GATED_DELTA, T below kFewHeadsMinT)
// or 2/7 (GATED_LINEAR) of the SMs: there its chunks cost less than the chunk-parallel form's
// kernels (bench rows gdn.x* / gla.x*; docs/ops.md).
bool tg_cuda_delta_single_form(tg_backend *be, const tg_tensor *dst);
// Whether dst's delta_rule node would run the single kernel's full case (Dk 128, whole 128-column
// slices, 16-byte rows, the single-kernel form with BV 128): AUTO takes the chunked path from T >= 32 there
// (gdn.T32: 46.7 us against the scan's 50.2; bench/NOTES.md "Session 22"), from 64 elsewhere.
bool tg_cuda_delta_chunked_full(tg_backend *be, const tg_tensor *dst);
// The chunked form of dst's delta_rule node (any T; q/k/v F32, F16 or BF16).
tg_status tg_cuda_delta_rule_chunked(tg_backend *be, const tg_tensor *dst);
