// signature.cuh - internal knobs of the two signature ops' CUDA kernels
// (cuda/rope.cu, cuda/delta_rule.cu), for bench/ and tests/ only: force a
// kernel variant so that each one stays reachable and measured by name, and
// read back which variant the last launch used. Plain C++ (no CUDA headers),
// so host-only test code can include it. Per backend; not public API.
#pragma once
#include "tinygml.h"

struct tg_tensor;

// Kernel classes of a decode step, bits of knob pdl_mask
enum tg_cuda_pdl_class {
    TG_CUDA_PDL_NORM = 0,          // cuda/norm.cu: rms_norm (and * w), l2_norm, softmax
    TG_CUDA_PDL_MMV_ADD = 1,       // GEMV + residual add, K <= 4096 (a llama's o at these sizes)
    TG_CUDA_PDL_MMV_SWIGLU = 2,    // gate/up + swiglu
    TG_CUDA_PDL_MMV_OTHER = 3,     // other GEMVs: q/k/v, lm_head, plain
    TG_CUDA_PDL_ROPE = 4,          // rope, rope_kv_update, their pair
    TG_CUDA_PDL_ATTN = 5,          // attention's split, combine and cluster kernels
    TG_CUDA_PDL_MMV_PRE = 6,       // not a launch: the GEMVs' weight loads before their wait
    TG_CUDA_PDL_MMV_ADD_LONG = 7,  // GEMV + residual add, K > 4096 (a llama's down)
    TG_CUDA_PDL_ATTN_PRE = 8,      // not a launch: attention's K/V rows read before its wait
};
// (GEMV classes include the quantized GEMV and its quantize kernel.)

struct tg_cuda_sig_knobs {
    // rope_kv_update position validation: 0 auto (fused into the write kernel
    // when B*T <= 1024 and T <= 32, else a separate kernel first), 1 fused
    // whenever allowed, 2 always the separate validation kernel, 3 none
    // (bench only: times the write kernel alone; bad positions go unchecked).
    int kv_validate = 0;
    // rope / rope_kv_update chunks (of 4 values) per thread per tensor: 0 auto
    // (4, fewer while the grid would not fill the GPU; NEOX at most 2), else
    // forced to 1, 2 or 4 (each a kernel of its own register budget).
    int kv_rounds = 0;
    // 1: rope / rope_kv_update always take the scalar, any-stride path.
    int rope_scalar = 0;
    // delta_rule threads per state column: 0 auto, 4 or 8 (8 is implied for
    // Dk > 128).
    int delta_tpc = 0;
    // 1: delta_rule always takes the scalar, any-stride state path.
    int delta_scalar = 0;
    // delta_rule kernel: 0 auto (a decode kernel when T == 1, else the chunk
    // kernel), 1 chunk kernel always, 2 decode kernel (shared-memory staged)
    // for any T, 3 decode-reg kernel (registers only) for any T, 4 persistent
    // decode kernel (T == 1; else as 2). Layouts a decode kernel cannot take
    // fall back to the chunk kernel, which computes the same bits.
    int delta_kernel = 0;
    // decode kernels: threads per block (0 auto: 128; rounded to whole warps).
    int delta_dec_threads = 0;
    // chunked tensor-core path (algo AUTO): smallest T that takes it (0: the
    // default, 64; AUTO also needs Dk >= 64 and the single-kernel form, else
    // T >= 1024; algo CHUNKED
    // takes it at any T, SCAN never).
    int delta_chunk_min_t = 0;
    // chunked path: value columns per block (0 auto; 8, 16, 32, 64 or 128):
    // of the state pass in the chunk-parallel form, of the one kernel in the
    // single-kernel form.
    int delta_chunk_bv = 0;
    // chunked path: 0 auto (the single-kernel form when 2 B Hv exceeds the SM
    // count, or from fewer heads where its full case runs the BF16 wgmma
    // kernel: tg_cuda_delta_single_form; else the chunk-parallel one), 1 the single-kernel form (one block
    // per column slice walks every chunk), 2 the chunk-parallel form (prep,
    // state pass and output kernels over a scratch; the single-kernel form
    // where the scratch would pass its budget). AUTO's T threshold follows the
    // form (cuda/delta_rule.cu).
    int delta_chunk_fused = 0;
    // compile-time instances: 0 auto (the single-kernel form's full case where
    // Dk is 128 and every slice has 128 columns; the chunk-parallel form's
    // where delta_chunk_phase_full allows), 1 the generic kernels always
    // (before / after in bench).
    int delta_chunk_generic = 0;
    // chunk-parallel form where Dk = Dv = 128: 0 auto and 1 its compile-time
    // prep / output kernels and the state pass in registers, 2 the generic
    // kernels (before / after: gdn.long 3,076 -> 1,600 us on the H200,
    // session 32; docs/ops.md). Env TG_CUDA_DELTA_PHASE_FULL (0: off).
    int delta_chunk_phase_full = 0;
    // the chunk-parallel form's W and Kd^T between its prep and state-pass kernels (Dk = Dv = 128,
    // the state pass in registers): as F16 with a power-of-two scale per row (half the bytes each
    // state-pass block copies per chunk, three load buffers) at 0 auto where the pass has 16 value
    // columns or fewer (gdn.long 1,621 -> 1,509 us on an H100, session 35), or 32 with GATED_DELTA
    // (session 46), and at 1 always; as F32 at 2 (before / after; docs/ops.md). Env TG_CUDA_DELTA_H16
    // (0: F32 rows, 1: F16 rows always).
    int delta_chunk_h16 = 0;
    // the single-kernel form's full case (Dk 128, whole 128-column slices; either mode) with F16
    // or BF16 q, k and v on warpgroup tensor cores (wgmma; cuda/sm90a/delta_rule_chunked_wg.cu):
    // 0 auto (where the build has sm_90a code and the device is compute capability 9.0), 1 never
    // (delta_chunked_kernel<16, true>, before / after on an H100, us graph: gla.prefill.bf16 430 ->
    // 352, session 39; gdn.prefill.bf16 651 -> 617, session 40), 2 BF16 q/k/v (either mode) on
    // the TF32 wgmma kernel too (0 gives them delta_wgb_kernel: BF16 products, hi/lo operands, the
    // raw tiles by cp.async). Env TG_CUDA_DELTA_WG=0 sets 1, =2 sets 2. Not the same bits: the products sum
    // in another order (GATED_LINEAR: beta scales P and K~ instead of V).
    int delta_chunk_wg = 0;
    // the chunk-parallel form's prep kernel with BF16 k and v where delta_chunk_wg is 0: 0 auto
    // (delta_prep_wgb_kernel on BF16 wgmma where the device has it, cuda/sm90a/delta_rule_prep_wgb.cu),
    // 1 delta_prep_kernel<true> (TF32 mma.sync; before / after: bench row gdn.long/tf32prep, session
    // 45). Env TG_CUDA_DELTA_PREP=0 sets 1.
    int delta_chunk_prep = 0;
    // the chunk-parallel form's state pass with W and Kd^T as F16 rows: 0 auto, each chunk's W and
    // Kd^T regions as one bulk asynchronous copy each (cp.async.bulk, issued by one thread and counted
    // by an mbarrier per buffer) where the device and the build's code are compute capability 9.0 or
    // later (tg_cuda_delta_bulk_ready); 1 the regions as 16-byte cp.async from every thread (before /
    // after: bench row gdn.long/cpasync, session 46). Env TG_CUDA_DELTA_BULK=0 sets 1.
    int delta_chunk_bulk = 0;
    // the chunk-parallel form's output (BF16 q, k and v at Dk = Dv = 128, F16 rows by bulk copies, 32
    // value columns or fewer): 0 auto, made by the state pass from the chunk's state in registers,
    // with q's F16 rows and P = Q K^T (.) decay as F16 rows written by the prep kernel (no S_c or V'
    // through memory, no output kernel: cuda/delta_rule_state_pass.cu); 1 by the output kernel
    // (delta_out_wgb_kernel, before / after: bench row gdn.long/nofo, session 47); 2 made by the state
    // pass, GATED_LINEAR's state in one shared copy with two barriers a chunk (session 47's form; 0 keeps
    // two copies and one barrier: bench row gla.x32.bf16/3p-fo1s). Env
    // TG_CUDA_DELTA_FO=0 sets 1.
    int delta_chunk_fo = 0;
    // GATED_LINEAR on delta_wgb_kernel (BF16 q/k/v, Dk 128, whole 128-column slices) split along
    // the tokens: 0 auto (where the blocks fill at most half the SMs, T of at least 1,024: n
    // segments of at least 4 chunks, n <= 16, blocks x n <= SMs; docs/ops.md), 1 never (before /
    // after: bench row gla.x32.bf16/noseg), n >= 2 up to n segments at any T (at most 16, at
    // least a chunk each, within the 256 MiB scratch cap; whole chunks a segment can round n down).
    // Env TG_CUDA_DELTA_SEG (0: never; n: n).
    int delta_chunk_seg = 0;
    // the gate arrays of delta_wgb_kernel and GATED_LINEAR's segment kernels: made in the kernel by warp
    // 0 a chunk ahead (the other warps wait for its chain), or made for every chunk beforehand by
    // delta_gates_kernel into the scratch (2,064 bytes a chunk and value head, where that fits
    // kGateScratch) and copied beside each chunk's tiles. 0: beforehand (on an H100, session 54, knob 1
    // in brackets: gla.x32.bf16 282-285 [332-333] us, gla.prefill.bf16 203-207 [224], gdn.prefill.bf16
    // 490 [502]); 1: by warp 0 (bench rows */gk1). Env TG_CUDA_DELTA_GK=0 sets 1.
    int delta_chunk_gk = 0;
    // mul_mat GEMV (N <= 8, cuda/mmv.cu, and the quantized one of
    // cuda/mul_mat_quant.cu): rows per block of 128 threads (per group of
    // warps, quantized), 0 auto (1, 2 or 4 by N and the grid), else 1, 2 or 4
    // forced (never below what N needs: 2 from 3 columns, 4 from 5; and 2 for
    // gate/up + swiglu and a folded rope). Env TG_CUDA_MMV_ROWS.
    int mmv_rows = 0;
    // quantized GEMV, auto rows: doubled while the grid still fills the GPU
    // this many times, 0 auto (2, measured against 1 and 4: bench/NOTES.md
    // session 30), else forced (env TG_CUDA_MMVQ_FILL). Results do not
    // depend on it.
    int mmvq_fill = 0;
    // mul_mat GEMV (F16/BF16/F32 and quantized) under programmatic dependent
    // launch, where a block lets the next kernel launch: 0 (default) at the
    // block's start for an F16/BF16/F32 launch reading at least 4 MiB of
    // weights (kMmvEarlyTriggerBytes, cuda/mmv.cu; since session 61: a 1.1B
    // step 4% shorter, 5% more tok/s), else once its weight loads are done, before its
    // reduction (the quantized GEMV always so); 1 at the start everywhere; 2
    // after the loads everywhere (the default of sessions 26-60; bench/NOTES.md
    // sessions 26, 28 and 61). Env TG_CUDA_MMV_TRIGGER. Results do not depend
    // on it.
    int mmv_trigger = 0;
    // diagnostics (env TG_CUDA_PDL_MASK): bit c set (tg_cuda_pdl_class) takes
    // class c out of programmatic dependent launch (the edge into its kernels
    // only: they still let the next kernel launch early); bit
    // TG_CUDA_PDL_MMV_PRE keeps the GEMVs' weight loads after their wait, bit
    // TG_CUDA_PDL_ATTN_PRE attention's K/V rows (cuda/attention_cluster.cu,
    // attention_split.cu). 0 none. Results do not depend on it.
    int pdl_mask = 0;
    // rms_norm * w folded into the GEMV that reads it (cuda/fuse.cu,
    // docs/ops.md): 0 (default) folded where allowed (the GEMV multiplies x by
    // w as it loads it, or quantizes x * w, sums x's squares beside its
    // products and scales its sums by the norm's 1/rms at the end; the
    // products are then not the unfused bits, within F32 rounding of them), 1
    // never (the norm kernel runs, every fused result is the unfused bits).
    // Env TG_CUDA_NORM_FOLD=0 sets 1 when the backend is created.
    int norm_fold = 0;
    // rope(q) and rope_kv_update(k, v) folded into the epilogue of the q/k/v
    // GEMV launch that computes their inputs (cuda/fuse.cu, mmv.cuh
    // tg_cuda_mmv_rope): 0 (default) where allowed (interleaved pairs, no
    // tables, one batch of at most 8 columns) unless the attention reading
    // the caches takes the cluster kernel (measured slower after the fold),
    // 1 never (the rope pair kernel runs), 2 wherever allowed. The same bits
    // either way. Env TG_CUDA_ROPE_FOLD=0 sets 1, =2 sets 2, when the backend
    // is created.
    int rope_fold = 0;
    // quantized decode GEMV (cuda/mul_mat_quant.cu): 0 auto (the fused-job
    // kernel, b quantized once per launch, U units per row per lane in
    // flight; the fusions take quantized products too), 1 the per-product
    // kernel it replaced (one unit per row per lane; no fusion of quantized
    // products).
    int mmq_kernel = 0;
    // attention's output quantized by its combine kernel for the quantized o
    // GEMV after it (cuda/fuse.cu; where attention runs the split and combine
    // kernels), so that the GEMV launches no quantize kernel: 0 (default) on,
    // 1 never (env TG_CUDA_QLINK=0 sets 1 when the backend is created). The
    // same bits either way. On since session 37 (H100, 1.1B Q4_0 batch 1,
    // same binary: bench/NOTES.md session 37); the GEMV-to-GEMV form of the
    // link (session 36) lost and was removed.
    int qlink = 0;
    // attention with several ranges of KV rows per query (decode): 0 auto
    // (one kernel of thread-block clusters on sm_90, cuda/attention_cluster.cu,
    // where each block's rows fit one tile at any position; else the split and
    // combine kernels), 1 the split kernel and its combine kernel
    // (cuda/attention_split.cu), 2 the cluster kernel wherever it can run
    // (tg_cuda_attention_clusters: where the device has clusters).
    int attn_split = 0;
    // the cluster kernel's blocks per cluster at most: 0 auto (the most the
    // device schedules, up to 16), else 2, 4, 8 or 16 (env
    // TG_CUDA_ATTN_CLUSTER, bench A/B). Results do not depend on it beyond
    // the order of the merge's sums.
    int attn_cluster = 0;
    // the split kernel (cuda/attention_split.cu): 0 auto and 1 its instances
    // with the head dim fixed at compile time where D = Dv is 64 or 128
    // (32-bit index arithmetic, and the K row's loop unrolled whole where a
    // lane scores each row; the same bits), 2 the
    // runtime-D kernel only (attn.decode.f16 23.5 -> 18.4 us, session 32).
    // Env TG_CUDA_ATTN_SPLIT_DC (0: off).
    int attn_split_dc = 0;
    // the split kernel's rows (cuda/attention_split.cu): 0 (default) ranges
    // of KV rows that follow the positions (ceil(nmax / nsplit) rounded up to
    // 16) and G threads per row when a tile has few rows; bit 1 the ranges of
    // the cache's length (s * chunk), bit 2 one thread per row (the kernel of
    // session 35). Env TG_CUDA_ATTN_ROWS (0 to 3), for A/B. Results do not
    // depend on it beyond the order of sums: bit 1 moves the ranges'
    // boundaries (the online softmax's and the combine's sums), bit 2 the
    // scores' order; 3 gives the bits of before (and, with a lane per row,
    // the K row's loop unrolled whole for D 64 or 128 again, since session 38).
    int attn_split_rows = 0;
};
// The knobs of one CUDA backend (all 0, auto, when it is created): state of
// the backend, not of the process, so two backends never share them. Change
// them only while no compute runs on that backend.
tg_cuda_sig_knobs *tg_cuda_knobs(tg_backend *be);
// The SM count the backend's size rules use (tests of rules that depend on it).
int tg_cuda_sm_count(tg_backend *be);

// Name of the variant the last launch of each op on backend be used, e.g.
// "vec4/fused" or "rows32x4/vec/f32" ("" before any launch). mul_mat (fused
// or not): "gemv", "quant/gemv" (quantized decode), "quant/vec" (its
// per-product kernel), "tc" (16-bit GEMM), "quant/gemm" (dequantized to F16,
// then GEMM), "generic" (F32 SGEMM).
// attention: "cluster", "split" (with the combine kernel), "split1" (one
// range per query), "tc" (tensor-core prefill), "generic"; the first three
// with "/pre" where cache rows are read before the wait for the kernel before
// (tg_cuda_attention_rows_pre).
enum tg_cuda_sig_op {
    TG_CUDA_SIG_ROPE = 0,
    TG_CUDA_SIG_KV = 1,
    TG_CUDA_SIG_DELTA = 2,
    TG_CUDA_SIG_MUL_MAT = 3,
    TG_CUDA_SIG_ATTN = 4
};
const char *tg_cuda_sig_last(tg_backend *be, tg_cuda_sig_op op);

// Whether backend be runs attention decode's cluster kernel at all (sm_90
// code, clusters schedulable; cuda/attention_cluster.cu). Without them knob
// attn_split 2 and auto take the split and combine kernels.
bool tg_cuda_attention_clusters(tg_backend *be);

// Whether backend be runs the full chunked case (either mode) with 16-bit q, k and v on warpgroup
// tensor cores (cuda/sm90a/delta_rule_chunked_wg.cu): 0 yes; else why not: 1 knob delta_chunk_wg
// says never, 2 the device is not compute capability 9.0, 3 this build has no sm_90a code (nvcc
// before 12.0).
int tg_cuda_delta_wgmma_state(tg_backend *be);

// Whether backend be's chunk-parallel state pass copies F16 rows by bulk copies where it takes F16
// rows (cuda/delta_rule_state_pass.cu): a compute capability 9.0 device, the build's code for it,
// knob delta_chunk_bulk 0.
bool tg_cuda_delta_bulk_ready(tg_backend *be);
// Whether this build's bulk state-pass code is compute capability 9.0's (binary and PTX; a build for an
// older architecture has the bulk copies compiled out). Asked once per backend at init.
bool tg_cuda_delta_state_bulk_built();

// Device pre-check of a rope_kv_update node's positions (range, table,
// repeats): the op table's cuda_check, launched by the backend before any
// node runs where an earlier node writes persistent tensors
// (cuda/backend.cu enqueue_prechecks): with it, one bad position stops every
// writer of the graph, as the CPU backend's host checks do. Without it the
// update validates itself before it writes.
tg_status tg_cuda_check_rope_kv_update(tg_backend *be, const tg_tensor *dst);

// CUDA graphs of a backend (cuda/graph_exec.cu): captures it holds now and
// replays it has launched, for tests and bench.
void tg_cuda_graph_counts(tg_backend *be, int *n_captured, long long *n_replays);
// Kernel nodes of the CUDA graph the last compute replayed or captured (-1:
// it ran plainly), for bench's kernels-per-decode-step column.
int tg_cuda_graph_kernels(tg_backend *be);
// Microseconds the backend's calls have spent so far blocked on the device
// (the synchronization after a compute's graph, and a tensor_get's copy that
// was not read back), for bench's host time per step (wall minus this).
double tg_cuda_wait_us(tg_backend *be);
// Tensor-core products that found their b already rounded in the scratch by
// the previous product of the same b (cuda/mul_mat_fast.cu), so far: counted
// when the launches are enqueued (a plain run or a capture, also one that
// failed and re-ran plainly), not per replay of a captured graph.
long long tg_cuda_mm_b_reuses(tg_backend *be);

// Fusions (cuda/fuse.cuh) the last enqueued graph took, by kind: rms_norm*w,
// mul_mat+add, gate/up+swiglu, mul_mats sharing b, rope(q)+rope_kv_update,
// (kind 5) rms_norm*w folded into the GEMV after it (also counted as kind 0,
// and as its GEMV's kind 1-3 where it has one), and (kind 6) rope(q) +
// rope_kv_update folded into the q/k/v GEMV launch (also counted as kind 3,
// not as kind 4), and (kind 7) a quantized GEMV launch whose b the attention
// kernel before it quantized (knob qlink). All 0 with fusion off.
constexpr int TG_CUDA_FUSION_KINDS = 8;
void tg_cuda_fusions_last(tg_backend *be, int counts[TG_CUDA_FUSION_KINDS]);
// Fusion on or off for this backend (default: on unless TG_CUDA_FUSE=0 when it
// was created). Change it only while no compute runs; captures taken with the
// other setting are not reused.
void tg_cuda_set_fuse(tg_backend *be, bool on);
