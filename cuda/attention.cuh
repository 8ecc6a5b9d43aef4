// attention.cuh - the paths of attention on the CUDA backend (cuda/attention.cu
// dispatches): tensor cores for prefill with 16-bit caches, the split kernel
// for 16-byte-aligned caches of one type, and the generic kernel (one block
// per query) for everything else.
#pragma once
#include "common.cuh"

// K/V rows shared by a GQA group, KV rows split over the grid when there are
// few queries (cuda/attention_split.cu). Ranges of at least min_split_rows
// rows. Returns false when the case does not qualify (nothing launched);
// otherwise *st holds the result.
bool tg_cuda_attention_split(tg_backend *be, const tg_tensor *dst, int min_split_rows, tg_status *st);

// Prefill on tensor cores (cuda/attention_mma.cu): F16/BF16 caches of one
// type, D = Dv in {64, 128}, at least 64 queries per kv head. Same contract.
bool tg_cuda_attention_mma(tg_backend *be, const tg_tensor *dst, tg_status *st);
// Its kernels' shared memory beyond the default, allowed on the current device
// (called when a backend is created).
cudaError_t tg_cuda_attention_mma_init();

// Every layout and type mix: one block per query row.
tg_status tg_cuda_attention_generic(tg_backend *be, const tg_tensor *dst);
