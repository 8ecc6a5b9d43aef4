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

// rope(q) and rope_kv_update(k, v) folded into a q/k/v launch (cuda/fuse.cu,
// knob rope_fold): jobs 0, 1, 2 are q, k_new and v_new, one batch of N = T B
// columns, their output (m, n) the element (m % D, m / D, n % T, n / T) of
// the rope's and the update's {D, H, T, B} inputs. Pairs are interleaved
// (m, m ^ 1) and a block's rows come in pairs, so the thread that stores a
// value holds its partner's sum as well. Besides the products (d, still
// written), the launch writes the rotated q to qr, and the rotated k and v
// to row pos(t, b) of the caches, all or nothing as the update's own kernel:
// each block checks every position (check) or, where the graph's pre-check
// validated them, only reads the error record; no cache write when either
// finds a fault, and block 0 reports the first bad position. Rotations and
// cache stores are rope.cu's (tg_cuda_rope_angle, tg_cuda_rope_rotate,
// tg_cuda_store): the same bits as the unfused kernels.
struct tg_cuda_mmv_rope {
    int D = 0;  // head dim of q and k; 0: no rope in the launch
    int n_rot = 0, T = 0, B = 0;
    long long L = 0;      // cache rows
    double base = 0.0;
    bool check = false;   // check the positions in every block (else pre-checked)
    bool pos_pre = false; // no node of the graph writes the positions: read before tg_pdl_wait
    tg_cuda_desc qr, kc, vc, pos;
    tg_cuda_err *err = nullptr;
};

// b of a quantized GEMV launch already quantized by the kernel before it
// (attention's combine kernel, cuda/fuse.cu's link, knob qlink), as
// quantize_b_kernel lays it out: column n's K int8 at q + n * K, its
// (d, d * sum q) per block of 32 at d + n * K / 32.
struct tg_cuda_mmv_qin {
    const int8_t *q = nullptr;  // nullptr: b quantized by this launch
    const float2 *d = nullptr;
};

struct tg_cuda_mmv {
    tg_cuda_mmv_job job[TG_CUDA_MMV_MAX_JOBS];
    int njob = 0;
    tg_cuda_desc b;      // shared by every job, F32
    bool swiglu = false; // njob == 2: h = swiglu(job 0's d, job 1's d)
    tg_cuda_desc h;
    tg_cuda_mmv_norm norm;
    tg_cuda_mmv_rope rope;
    tg_cuda_mmv_qin qin;  // quantized weights, no folded norm
};

// The folded rope's device steps (p.rope.D > 0). Before the products (ahead
// of the wait for the kernel before where the positions allow), every thread
// calls tg_cuda_mmv_rope_prep: it checks its share of the positions (position
// f = tid of the T * B, against the cache and the earlier tokens of its
// sequence) and returns whether it found a fault; and the thread of an output
// slot (slot = r * NMAX + n of the rows m0 + r of job j; -1: none) puts the
// slot's angle and position in cs[slot] (shared memory, read back by the same
// thread in the epilogue). The block's barrier then decides go: no fault
// anywhere and a clear record of earlier kernels; each slot's thread stores
// through tg_cuda_mmv_store_rope.
__device__ inline int tg_cuda_mmv_rope_pos(const tg_cuda_mmv_rope &r, int t, int b) {
    return *(const int *)tg_cuda_ptr(r.pos, t, b, 0, 0);
}
__device__ inline bool tg_cuda_mmv_rope_prep(const tg_cuda_mmv &p, int j, long long m0, int slot, int NMAX, int N,
                                             float (*cs)[3]) {
    const tg_cuda_mmv_rope &r = p.rope;
    const int n = slot % NMAX;
    const long long m = m0 + slot / NMAX;
    if (slot >= 0 && n < N && m < p.job[j].a.ne[1]) {
        const int d = (int)(m % r.D), pm = tg_cuda_mmv_rope_pos(r, n % r.T, n / r.T);
        float c = 1.0f, s = 0.0f;
        if (j < 2 && d < r.n_rot) tg_cuda_rope_angle(pm, d >> 1, r.n_rot, r.base, &c, &s);
        cs[slot][0] = c, cs[slot][1] = s, cs[slot][2] = __int_as_float(pm);
    }
    const int tid = threadIdx.x;
    if (!r.check || tid >= r.T * r.B) return false;
    const int t = tid % r.T, b = tid / r.T, pt = tg_cuda_mmv_rope_pos(r, t, b);
    bool bad = pt < 0 || pt >= r.L;
    for (int u = 0; u < t; u++) bad |= tg_cuda_mmv_rope_pos(r, u, b) == pt;
    return bad;
}
// The error record before this launch (thread 0 of a block; after the wait)
__device__ inline int tg_cuda_mmv_rope_prior(const tg_cuda_mmv_rope &r) {
    return r.err ? *(volatile const int *)&r.err->code : TG_CUDA_ERR_NONE;
}
// go == false: block (0, 0)'s thread 0 reports the first bad position of the
// launch, unless an earlier kernel had reported (prior) or the graph's
// pre-check did (no check here). The op is rope_kv_update's, so the message
// is the unfused update's.
__device__ inline void tg_cuda_mmv_rope_report(const tg_cuda_mmv_rope &r, int prior) {
    if (!r.check || prior != TG_CUDA_ERR_NONE || blockIdx.x != 0 || blockIdx.y != 0 || threadIdx.x != 0) return;
    for (int f = 0; f < r.T * r.B; f++) {
        const int t = f % r.T, b = f / r.T, p = tg_cuda_mmv_rope_pos(r, t, b);
        if (p < 0 || p >= r.L) {
            tg_cuda_report(r.err, TG_CUDA_ERR_POSITION_RANGE, TG_OP_ROPE_KV_UPDATE, p, r.L, b, t);
            return;
        }
        for (int u = 0; u < t; u++)
            if (tg_cuda_mmv_rope_pos(r, u, b) == p) {
                tg_cuda_report(r.err, TG_CUDA_ERR_POSITION_REPEAT, TG_OP_ROPE_KV_UPDATE, p, b, u, t);
                return;
            }
    }
}
// Output (m, n) of job j with value v and its pair partner's value o (row
// m ^ 1, same column); cs: the slot's angle and position
__device__ inline void tg_cuda_mmv_store_rope(const tg_cuda_mmv &p, int j, long long m, int n, float v, float o,
                                              const float *cs, bool go) {
    const tg_cuda_mmv_rope &r = p.rope;
    *(float *)tg_cuda_ptr(p.job[j].d, m, n, 0, 0) = v;
    const int d = (int)(m % r.D), h = (int)(m / r.D), t = n % r.T, b = n / r.T;
    const float y = j < 2 && d < r.n_rot ? tg_cuda_rope_rotate(v, o, cs[0], cs[1], (d & 1) == 0) : v;
    if (j == 0) {
        *(float *)tg_cuda_ptr(r.qr, d, h, t, b) = y;
    } else if (go) {
        const tg_cuda_desc &c = j == 1 ? r.kc : r.vc;
        tg_cuda_store(tg_cuda_ptr(c, d, h, __float_as_int(cs[2]), b), c.type, y);
    }
}

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
// unit stride along k, or quantized ones (Q8_0, Q4_0, Q4_K) unless knob
// mmq_kernel forces the per-product kernel), F32 b with unit stride
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
// p.rope can be folded into p's launch: quantized weights, or F16/BF16/F32
// weights on the 16-byte path; one batch of at most 8 columns.
bool tg_cuda_mmv_can_rope(const tg_cuda_mmv &p);
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
