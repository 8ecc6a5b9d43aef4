// mmv.cuh - the GEMV of mul_mat for N <= 8 columns (cuda/mmv.cu), with the
// epilogues the backend's fusions need (cuda/fuse.cu): one launch computes
// up to three products that share b (q, k, v), each optionally followed by
// an add of a same-shape tensor (the residual), or the pair gate/up followed
// by swiglu; and, folded in, the rms_norm * w that produces b.
#pragma once
#include "common.cuh"

// One product d = a b (mul_mat's shape rule) and its optional epilogue add:
// s = d + r (r.data == nullptr: none). d is always written (so a fused
// intermediate stays readable); s may be d itself (an add in place).
struct tg_cuda_mmv_job {
    tg_cuda_desc a, d, r, s;
};

constexpr int TG_CUDA_MMV_MAX_JOBS = 3;

// b = rms_norm(x) * w folded into the GEMV (cuda/fuse.cu, knob norm_fold):
// b is not read. Each block multiplies x by w as it loads them, sums x's
// squares beside its products (every block covers all of K) and scales its
// sums by the column's 1 / rms at the end (quantized weights: the quantize
// kernel quantizes x * w and writes x's sums of squares per block of 32,
// which the GEMV adds up at its end): sum_k a[k] (x[k] w[k]) * s where
// the unfused kernels compute sum_k a[k] ((x[k] s) w[k]); the same value
// within F32 rounding, not the same bits. x: the N columns of b, contiguous
// rows of K floats (one batch); w: K floats. y = rms_norm(x) and z = y * w
// (= b) are written by the blocks (a few elements each) with the launch's
// scale, each skipped when nullptr.
struct tg_cuda_mmv_norm {
    const float *x = nullptr;  // nullptr: no norm folded in
    const float *w = nullptr;
    float *y = nullptr, *z = nullptr;
    float eps = 0.0f;
};

struct tg_cuda_mmv {
    tg_cuda_mmv_job job[TG_CUDA_MMV_MAX_JOBS];
    int njob = 0;
    tg_cuda_desc b;      // shared by every job, F32
    bool swiglu = false; // njob == 2: h = swiglu(job 0's d, job 1's d)
    tg_cuda_desc h;
    tg_cuda_mmv_norm norm;
};

// The rms_norm scale of a row of n values whose squares sum to ss (the norm
// kernel's formula, cuda/norm.cu).
__device__ inline float tg_cuda_rms_scale(float ss, long long n, float eps) {
    return 1.0f / sqrtf(ss / (float)n + eps);
}

// Device helpers shared by the F16/F32 GEMV (mmv.cu) and the quantized one
// (mul_mat_quant.cu), so both kernels address rows and write epilogues alike.
// Row r of a block of R rows starting at m0 of job j: for swiglu the first
// R/2 rows are gate rows (job 0), the others the up rows (job 1) of the same
// m. Rows past a's end are clamped to its last row (their sums are dropped).
__device__ inline const char *tg_cuda_mmv_row(const tg_cuda_mmv &p, int j, long long m0, int r, int R, long long i2,
                                              long long i3) {
    const tg_cuda_desc &d0 = p.job[j].d;
    const int jr = p.swiglu ? (r < R / 2 ? 0 : 1) : j;
    const long long m = m0 + (p.swiglu && r >= R / 2 ? r - R / 2 : r);
    const tg_cuda_desc &a = p.job[jr].a;
    const long long M = a.ne[1];
    // broadcast batches; no 64-bit division for the usual 2-D weights (a
    // division is ~70 instructions, and these run before the first load)
    const long long a2 = a.ne[2] == 1 ? 0 : i2 / (d0.ne[2] / a.ne[2]);
    const long long a3 = a.ne[3] == 1 ? 0 : i3 / (d0.ne[3] / a.ne[3]);
    return tg_cuda_ptr(a, 0, m < M ? m : M - 1, a2, a3);
}
// Output batch (i2, i3) of a GEMV block: blockIdx.y = i2 + ne2 * i3 (< 65536)
__device__ inline void tg_cuda_mmv_batch(const tg_cuda_desc &d, long long *i2, long long *i3) {
    const unsigned y = blockIdx.y, n2 = (unsigned)d.ne[2];
    *i2 = n2 == 1 ? 0 : y % n2;
    *i3 = n2 == 1 ? y : y / n2;
}
// Epilogues of output (m, n): the gate/up pair and h = swiglu(g, u), or one
// job's d and its optional residual add s = d + r. r is read before d is
// written (s may be r or d: an add in place).
__device__ inline void tg_cuda_mmv_store_swiglu(const tg_cuda_mmv &p, long long m, long long n, long long i2,
                                                long long i3, float g, float u) {
    *(float *)tg_cuda_ptr(p.job[0].d, m, n, i2, i3) = g;
    *(float *)tg_cuda_ptr(p.job[1].d, m, n, i2, i3) = u;
    *(float *)tg_cuda_ptr(p.h, m, n, i2, i3) = tg_cuda_swiglu(g, u);
}
__device__ inline void tg_cuda_mmv_store(const tg_cuda_mmv_job &jb, long long m, long long n, long long i2,
                                         long long i3, float v) {
    const float x = jb.r.data ? tg_cuda_load(tg_cuda_ptr(jb.r, m, n, i2, i3), jb.r.type) : 0.0f;
    *(float *)tg_cuda_ptr(jb.d, m, n, i2, i3) = v;
    if (jb.r.data) *(float *)tg_cuda_ptr(jb.s, m, n, i2, i3) = v + x;
}

// The job of a mul_mat node when the GEMV takes it (F32/F16/BF16 weights with
// unit stride along k, or quantized ones (Q8_0, Q4_0, Q4_K) when the backend
// quantizes b for them (tg_cuda_impl::mmq_q8b_min_n), F32 b with unit stride
// along k, at most 8 columns, possibly after merging b's batch dims into
// columns), with b's descriptor; false otherwise. The descriptors may be
// reshaped views of the tensors (batches merged into columns), so build
// epilogue descriptors with tg_cuda_mmv_like.
bool tg_cuda_mmv_job_of(tg_backend *be, const tg_tensor *mm, tg_cuda_mmv_job *job, tg_cuda_desc *b);
// True where every batch of b (dim 2, with dim 3 of 1) shares one 2-D weight
// of at least kBatchGemmMinWeightBytes, and the batches' columns, merged (b and the result
// hold them at one stride: a batch of sequences decoding a token each), are
// more than 8: one GEMM of all the columns then reads the weights once where
// the GEMV reads them once per batch (H200: 12.6 against 86.8 us for the 1.1B
// llama's 2048 x 8192 at 16 sequences). Smaller weights stay on the GEMV and
// its fusions: their re-reads come from L2 (llama-recall's 48 KB matrices at
// batch 16: 107.8K tok/s on the GEMV, 79.6K with the GEMMs; bench/NOTES.md).
constexpr size_t kBatchGemmMinWeightBytes = (size_t)1 << 20;
bool tg_cuda_mm_batches_to_gemm(const tg_tensor *mm);
// t's descriptor in the layout of job.d (t has d's shape): false when t's
// strides cannot follow d's merged columns.
bool tg_cuda_mmv_like(const tg_cuda_mmv_job &job, const tg_tensor *mm, const tg_tensor *t, tg_cuda_desc *out);

// Launch p. The jobs must share b, a's type, N and the batch dims (checked:
// false when they do not, nothing launched).
bool tg_cuda_mmv_compatible(const tg_cuda_mmv &p);
// p.norm can be folded into p's launch: quantized weights (b quantized from
// x * w, the scale in the quantized GEMV's epilogue), or F16/BF16/F32
// weights on the 16-byte path (K a multiple of a load's elements, every row
// and x, w 16-byte aligned); one batch of at most 8 columns.
bool tg_cuda_mmv_can_fold(const tg_cuda_mmv &p);
// The launch class of a GEMV launch (knob pdl_mask), F16/BF16/F32 or quantized
tg_cuda_pdl_class tg_cuda_mmv_pdl_class(const tg_cuda_mmv &p);
tg_status tg_cuda_mmv_launch(tg_backend *be, const tg_cuda_mmv &p, const char *call);
// cuda/mul_mat_quant.cu: the same jobs and epilogues with quantized weights
// (b quantized to 8 bits once per launch, int8 dot products); what
// tg_cuda_mmv_launch calls for them.
tg_status tg_cuda_mmvq_launch(tg_backend *be, const tg_cuda_mmv &p, const char *call);
// Its scratch: the bytes for b quantized (ncols columns of K), of which the
// first *q_bytes hold the int8 values (column c at c * K), then the (d, d * sum)
// pairs (column c at c * K / 32), then (256-byte aligned) a folded norm's sums
// of squares (one float per block of 32).
size_t tg_cuda_mmvq_scratch(long long K, long long ncols, size_t *q_bytes);
