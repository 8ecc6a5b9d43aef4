// delta_rule_chunked.cuh - host entry of the chunked tensor-core delta rule
// (cuda/delta_rule_chunked.cu), called by tg_cuda_delta_rule (cuda/delta_rule.cu).
#pragma once
#include "tinygml.h"

struct tg_tensor;

// Whether the tensor path takes these head dims (Dk a multiple of 8 in [8, 256], Dv <= 256).
bool tg_cuda_delta_chunked_covers(long long Dk, long long Dv);
// The chunked form of dst's delta_rule node (any T; q/k/v F32, F16 or BF16).
tg_status tg_cuda_delta_rule_chunked(tg_backend *be, const tg_tensor *dst);
