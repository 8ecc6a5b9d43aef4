// fuse.cuh - the CUDA backend's fusions of adjacent nodes (cuda/fuse.cu),
// chosen by pattern when a graph is enqueued (so also when it is captured):
//   rms_norm, mul(by a broadcast weight)          -> one norm kernel
//   mul_mat (GEMV), add(of a same-shape tensor)   -> the add in the GEMV's epilogue
//   mul_mat gate, mul_mat up, swiglu(gate, up)    -> one GEMV reading both weights
//   up to 3 mul_mat sharing b (q, k, v)           -> one GEMV launch
//   rope(q), rope_kv_update at the same positions -> one rope launch
//   rms_norm, mul, then one of the GEMV launches above (or a lone GEMV)
//                                                 -> the norm folded into the GEMV
//   q/k/v launch, rope(q), rope_kv_update(k, v)   -> the rope pair in the GEMV's
//                                                    epilogue (mmv.cuh tg_cuda_mmv_rope)
//   attention (split and combine kernels), then the quantized o GEMV (+ residual)
//   (knob qlink; on by default)                   -> the combine kernel quantizes its output
//                                                    for the GEMV, which launches no quantize
//                                                    kernel (mmv.cuh tg_cuda_mmv_qin)
// Each fused kernel computes the same bits as the unfused kernels and still
// writes the intermediate results (cheap at decode sizes), so an
// intermediate read later (a graph output, a planner-off test) is intact.
// The exception is the folded norm (knob norm_fold, mmv.cuh
// tg_cuda_mmv_norm): the GEMV scales its sums by the norm's 1 / rms after
// the products, within F32 rounding of the unfused result; it writes the
// mul's result z (which may have later readers) and the norm's y unless y
// shares storage with z or with an output of the launch (nothing else reads y).
// A fusion is taken only where the intermediate has no reader but its
// partner (the folded norm: the norm's result; the mul's may have others),
// only views lie between the fused nodes, and no tensor written early
// overlaps one still to be read. Environment TG_CUDA_FUSE=0 (read when
// the backend is created) turns fusion off.
#pragma once
#include <vector>

#include "common.cuh"

// Enqueue the graph's nodes (views skipped), fusing where allowed.
tg_status tg_cuda_enqueue_nodes(tg_backend *be, const std::vector<tg_tensor *> &nodes);

// cuda/norm.cu: norm = rms_norm(x), mul = norm * w (or w * norm), in one kernel.
tg_status tg_cuda_rms_norm_mul(tg_backend *be, const tg_tensor *norm, const tg_tensor *mul, const tg_tensor *w);

// cuda/rope.cu: rope (of q) and rope_kv_update (of k, v) in one launch; false
// when the pair does not fit one launch (nothing launched, *st untouched).
bool tg_cuda_rope_pair(tg_backend *be, const tg_tensor *rope, const tg_tensor *kv, tg_status *st);
