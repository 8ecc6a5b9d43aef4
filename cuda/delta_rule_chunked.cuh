// delta_rule_chunked.cuh - host entry of the chunked tensor-core delta rule
// (cuda/delta_rule_chunked.cu), called by tg_cuda_delta_rule (cuda/delta_rule.cu).
#pragma once
#include "tinygml.h"

struct tg_tensor;

// Whether the tensor path takes these head dims (Dk a multiple of 8 in [8, 256], Dv <= 256).
bool tg_cuda_delta_chunked_covers(long long Dk, long long Dv);
// Whether the (sequence, value head) pairs alone fill the GPU (2 B Hv above the SM count): the
// single-kernel chunked form then, the chunk-parallel one otherwise (docs/ops.md).
bool tg_cuda_delta_heads_fill(tg_backend *be, long long B, long long Hv);
// The chunked form of dst's delta_rule node (any T; q/k/v F32, F16 or BF16).
tg_status tg_cuda_delta_rule_chunked(tg_backend *be, const tg_tensor *dst);
