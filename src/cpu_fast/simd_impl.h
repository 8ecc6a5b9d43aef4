// simd_impl.h - the body of one tg_simd table, included once by each ISA file
// with one of TG_SIMD_AVX512 (and TG_SIMD_VNNI for the AVX512-VNNI/VBMI
// table), TG_SIMD_AVX2 or TG_SIMD_GENERIC defined and
// TG_SIMD_FN naming the exported getter. Everything here is in an anonymous
// namespace and calls no inline function of other headers (see simd.h).
#include <cmath>
#include <cstring>

#include "quant_act.h"
#include "simd.h"

#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
#include <immintrin.h>
#endif

namespace {

// ---------------------------------------------------------------------------
// The vector type and its few operations.

#if defined(TG_SIMD_AVX512)
typedef __m512 vf;
constexpr int W = 16;
inline vf vld(const float *p) { return _mm512_loadu_ps(p); }
inline void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vld_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
inline vf vld_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
// F32 -> F16 round to nearest even; a NaN becomes the library's 0x7e00 (sign
// kept): it is replaced first by the float quiet NaN that converts to it
inline void vst_f16(uint16_t *p, vf v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u));
    v = _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000))));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#define TG_HAVE_VST_F16 1
#elif defined(TG_SIMD_AVX2)
typedef __m256 vf;
constexpr int W = 8;
inline vf vld(const float *p) { return _mm256_loadu_ps(p); }
inline void vst(float *p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vld_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
inline vf vld_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
inline void vst_f16(uint16_t *p, vf v) {
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 canon = _mm256_or_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))),
                                      _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    v = _mm256_blendv_ps(v, canon, nan);
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#define TG_HAVE_VST_F16 1
#else
typedef float vf __attribute__((vector_size(32)));
constexpr int W = 8;
inline vf vld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
inline void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }
inline vf vzero() { return vf{}; }
inline vf vset1(float x) { return vf{} + x; }
inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
inline vf vadd(vf a, vf b) { return a + b; }
inline vf vmul(vf a, vf b) { return a * b; }
inline vf vld_f16(const uint16_t *p) {
    float t[W];
    for (int i = 0; i < W; i++) t[i] = tg_fp16_to_fp32_impl(p[i]);
    return vld(t);
}
inline vf vld_bf16(const uint16_t *p) {
    uint32_t t[W];
    for (int i = 0; i < W; i++) t[i] = (uint32_t)p[i] << 16;
    vf v;
    memcpy(&v, t, sizeof v);
    return v;
}
#endif

// Lanes added in a fixed tree (halves folded), the same for every call.
#if defined(TG_SIMD_AVX512)
inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
#elif defined(TG_SIMD_AVX2)
inline float vsum(vf v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
#else
inline float vsum(vf v) {
    float t[W];
    memcpy(t, &v, sizeof t);
    for (int w = W / 2; w > 0; w /= 2)
        for (int i = 0; i < w; i++) t[i] += t[i + w];
    return t[0];
}
#endif

inline float f16_to_f32(uint16_t h) { return tg_fp16_to_fp32_impl(h); }
inline float bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// as tg_f32_to_bf16: round to nearest even, NaN kept quiet
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// Typed loads: T = float (F32), or a tag for the two 16-bit types.
struct f16_t {
    uint16_t bits;
};
struct bf16_t {
    uint16_t bits;
};
inline vf vload(const float *p) { return vld(p); }
inline vf vload(const f16_t *p) { return vld_f16((const uint16_t *)p); }
inline vf vload(const bf16_t *p) { return vld_bf16((const uint16_t *)p); }
inline float sload(const float *p) { return *p; }
inline float sload(const f16_t *p) { return f16_to_f32(p->bits); }
inline float sload(const bf16_t *p) { return bf16_to_f32(p->bits); }

// ---------------------------------------------------------------------------
// Matrix product tile

#ifndef TG_PF_BYTES
#define TG_PF_BYTES 8192
#endif
constexpr int64_t k_pf_bytes = TG_PF_BYTES;

template <typename T, int R, int C>
void tile(const T *a, size_t lda, const float *b, size_t ldb, int64_t K, float *out, size_t ldo, bool accumulate) {
    vf acc[R][C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = vzero();
    // Software prefetch k_pf_bytes ahead along the tile's rows taken as one
    // stream (rows of a matrix are contiguous, so this runs on into the next
    // tile's rows): a decode step reads every weight once from memory, and the
    // hardware prefetchers, which restart at every short row block, keep too
    // few lines in flight. Prefetches never fault; a tile over other strides
    // only wastes them.
    constexpr int64_t step = (int64_t)(R * W * sizeof(T));
    const char *pf = (const char *)a + k_pf_bytes;
    int64_t k = 0;
    for (; k + W <= K; k += W, pf += step) {
        for (int64_t j = 0; j < step; j += 64) __builtin_prefetch(pf + j, 0, 3);
        vf bv[C];
        for (int c = 0; c < C; c++) bv[c] = vld(b + c * ldb + k);
        for (int r = 0; r < R; r++) {
            const vf av = vload(a + r * lda + k);
            for (int c = 0; c < C; c++) acc[r][c] = vfma(av, bv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float s = vsum(acc[r][c]), t = 0.0f;
            for (int64_t kk = k; kk < K; kk++) t += sload(a + r * lda + kk) * b[c * ldb + kk];
            out[r + c * ldo] = (accumulate ? out[r + c * ldo] : 0.0f) + (s + t);
        }
}

template <typename T>
void mm_tile(const void *av, size_t lda, const float *b, size_t ldb, int64_t K, float *out, size_t ldo, int R, int C,
             bool accumulate) {
    const T *a = (const T *)av;
#define TG_TILE(r, c) \
    case (r)*8 + (c): tile<T, r, c>(a, lda, b, ldb, K, out, ldo, accumulate); return;
    switch (R * 8 + C) {
        TG_TILE(1, 1) TG_TILE(1, 2) TG_TILE(1, 3) TG_TILE(1, 4)
        TG_TILE(2, 1) TG_TILE(2, 2) TG_TILE(2, 3) TG_TILE(2, 4)
        TG_TILE(3, 1) TG_TILE(3, 2) TG_TILE(3, 3) TG_TILE(3, 4)
        TG_TILE(4, 1) TG_TILE(4, 2) TG_TILE(4, 3) TG_TILE(4, 4)
        default: return;
    }
#undef TG_TILE
}

// Matrix-vector rows (decode): one weight row at a time, read front to back,
// against C in 1..4 tokens. Each output sums in 4 partial accumulators (vector
// step i of K goes to partial i % 4), folded (p0 + p1) + (p2 + p3), lanes in
// the fixed tree, then the tail in order: the same for any C and any grouping
// of the tokens. One row read sequentially is a stream the hardware
// prefetchers follow (interleaved 4-row tiles read 4 short streams at once and
// reached ~75-85% of this one's speed at K 768-2048 on Zen 4, 1 thread).
// Each 64-byte line of the weights is also prefetched k_mv_prefetch bytes
// ahead (into the next rows: a thread's rows are one contiguous stream; a
// prefetch past the matrix's end is harmless). On the 480 MiB-L3 Xeon of
// 2026-12-03 the hardware prefetchers alone kept a 2048x2048 F16 product
// from memory at 400-465 us; 3 KB ahead 279-315 us in the same rounds
// (bench/README.md); 0.5-2 KB ahead did less, 4 KB was no better than none.
constexpr size_t k_mv_prefetch = 3072;

template <typename T, int C>
void mv_row(const T *a, const float *b, size_t ldb, int64_t K, float *out, size_t ldo) {
    vf acc[C][4];
    for (int c = 0; c < C; c++)
        for (int j = 0; j < 4; j++) acc[c][j] = vzero();
    int64_t k = 0;
    for (; k + 4 * W <= K; k += 4 * W)
        for (int j = 0; j < 4; j++) {
            if ((j * W * sizeof(T)) % 64 == 0) __builtin_prefetch((const char *)(a + k + j * W) + k_mv_prefetch);
            const vf av = vload(a + k + j * W);
            for (int c = 0; c < C; c++) acc[c][j] = vfma(av, vld(b + c * ldb + k + j * W), acc[c][j]);
        }
    for (int j = 0; k + W <= K; k += W, j++) {
        const vf av = vload(a + k);
        for (int c = 0; c < C; c++) acc[c][j] = vfma(av, vld(b + c * ldb + k), acc[c][j]);
    }
    for (int c = 0; c < C; c++) {
        float s = vsum(vadd(vadd(acc[c][0], acc[c][1]), vadd(acc[c][2], acc[c][3]))), t = 0.0f;
        for (int64_t kk = k; kk < K; kk++) t += sload(a + kk) * b[c * ldb + kk];
        out[c * ldo] = s + t;
    }
}

// Tokens per pass over a row: all 4 with 32 vector registers (16
// accumulators), else 2 (a row's second pass reads it from L1).
constexpr int k_mv_tokens = W == 16 ? 4 : 2;

template <typename T>
void mv(const void *av, size_t lda, const float *b, size_t ldb, int64_t K, float *out, size_t ldo, int64_t R, int C) {
    for (int64_t r = 0; r < R; r++) {
        const T *a = (const T *)av + r * lda;
        for (int c0 = 0; c0 < C; c0 += k_mv_tokens) {
            const int g = C - c0 < k_mv_tokens ? C - c0 : k_mv_tokens;
            const float *bc = b + c0 * ldb;
            float *o = out + r + c0 * ldo;
            switch (g) {
                case 1: mv_row<T, 1>(a, bc, ldb, K, o, ldo); break;
                case 2: mv_row<T, 2>(a, bc, ldb, K, o, ldo); break;
#if defined(TG_SIMD_AVX512)
                case 3: mv_row<T, 3>(a, bc, ldb, K, o, ldo); break;
                case 4: mv_row<T, 4>(a, bc, ldb, K, o, ldo); break;
#endif
                default: break;
            }
        }
    }
}

template <int R> void panel(const float *a, size_t lda, const float *bp, int64_t K, float *out, size_t ldo, int nj) {
    vf acc[R][2];
    for (int r = 0; r < R; r++) acc[r][0] = vzero(), acc[r][1] = vzero();
    for (int64_t k = 0; k < K; k++) {
        const vf b0 = vld(bp + k * 2 * W), b1 = vld(bp + k * 2 * W + W);
        for (int r = 0; r < R; r++) {
            const vf av = vset1(a[r * lda + k]);
            acc[r][0] = vfma(av, b0, acc[r][0]);
            acc[r][1] = vfma(av, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        float t[2 * W];
        vst(t, acc[r][0]);
        vst(t + W, acc[r][1]);
        for (int j = 0; j < nj; j++) out[r + j * ldo] = t[j];
    }
}
void mm_panel(const float *a, size_t lda, const float *bp, int64_t K, float *out, size_t ldo, int R, int nj) {
    switch (R) {
        case 1: panel<1>(a, lda, bp, K, out, ldo, nj); return;
        case 2: panel<2>(a, lda, bp, K, out, ldo, nj); return;
        case 3: panel<3>(a, lda, bp, K, out, ldo, nj); return;
        case 4: panel<4>(a, lda, bp, K, out, ldo, nj); return;
#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
        case 5: panel<5>(a, lda, bp, K, out, ldo, nj); return;
        case 6: panel<6>(a, lda, bp, K, out, ldo, nj); return;
#endif
#if defined(TG_SIMD_AVX512)
        case 7: panel<7>(a, lda, bp, K, out, ldo, nj); return;
        case 8: panel<8>(a, lda, bp, K, out, ldo, nj); return;
#endif
        default: return;
    }
}

// ---------------------------------------------------------------------------
// Vector helpers over n values

template <typename T> void axpy(float *y, const void *xv, float s, int64_t n) {
    const T *x = (const T *)xv;
    const vf sv = vset1(s);
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(y + i, vfma(sv, vload(x + i), vld(y + i)));
    for (; i < n; i++) y[i] += s * sload(x + i);
}

template <typename T> void to_f32(const void *src, float *dst, int64_t n) {
    const T *x = (const T *)src;
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(dst + i, vload(x + i));
    for (; i < n; i++) dst[i] = sload(x + i);
}

void from_f32_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void from_f32_f16(const float *src, void *dst, int64_t n) {
    uint16_t *y = (uint16_t *)dst;
    int64_t i = 0;
#ifdef TG_HAVE_VST_F16
    for (; i + W <= n; i += W) vst_f16(y + i, vld(src + i));
#endif
    for (; i < n; i++) y[i] = tg_fp32_to_fp16_impl(src[i]);
}
void from_f32_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *y = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_bf16(src[i]);
}

void add(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(y + i, vadd(vld(a + i), vld(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}
void mul(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(y + i, vmul(vld(a + i), vld(b + i)));
    for (; i < n; i++) y[i] = a[i] * b[i];
}
void add1(const float *a, float b, float *y, int64_t n) {
    const vf bv = vset1(b);
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(y + i, vadd(vld(a + i), bv));
    for (; i < n; i++) y[i] = a[i] + b;
}
void mul1(const float *a, float b, float *y, int64_t n) {
    const vf bv = vset1(b);
    int64_t i = 0;
    for (; i + W <= n; i += W) vst(y + i, vmul(vld(a + i), bv));
    for (; i < n; i++) y[i] = a[i] * b;
}
float dot(const float *a, const float *b, int64_t n) {
    vf acc0 = vzero(), acc1 = vzero();
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        acc0 = vfma(vld(a + i), vld(b + i), acc0);
        acc1 = vfma(vld(a + i + W), vld(b + i + W), acc1);
    }
    for (; i + W <= n; i += W) acc0 = vfma(vld(a + i), vld(b + i), acc0);
    float t = 0.0f;
    for (; i < n; i++) t += a[i] * b[i];
    return vsum(vadd(acc0, acc1)) + t;
}
float sumsq(const float *x, int64_t n) { return dot(x, x, n); }

#include "simd_quant_impl.h"  // q_quant, q_rows: quantized rows against 8-bit activations
#include "simd_qgemm_impl.h"  // q_gemm: Q4_0 / Q4_K weights against many tokens (AVX2)

// ---------------------------------------------------------------------------
// Delta rule token

// out[r] = the sum of acc[r]'s lanes, r < N
template <int N> inline void vsums(const vf *acc, float *out) {
#if defined(TG_SIMD_AVX512)
    if (N == 16) {
        // a transposing tree: 16 vectors in, their 16 sums in one vector (45
        // shuffles and adds, against 16 separate reductions of ~8 each)
        __m512 l1[8], l2[4], l3[2];
        // l1[i], 128-bit blocks: a.b0+a.b2, a.b1+a.b3, b.b0+b.b2, b.b1+b.b3 (a, b = acc[2i], acc[2i+1])
        for (int i = 0; i < 8; i++)
            l1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0x44),
                                  _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0xee));
        // l2[i], block c: a 4-lane partial sum of acc[4i + c]
        for (int i = 0; i < 4; i++)
            l2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], 0x88),
                                  _mm512_shuffle_f32x4(l1[2 * i], l1[2 * i + 1], 0xdd));
        // l3[i], block c: lanes 0-1 a 2-lane partial of acc[8i + c], lanes 2-3 of acc[8i + 4 + c]
        for (int i = 0; i < 2; i++)
            l3[i] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], 0x44),
                                  _mm512_shuffle_ps(l2[2 * i], l2[2 * i + 1], 0xee));
        // block c: the sums of acc[c], acc[4 + c], acc[8 + c], acc[12 + c]
        const __m512 l4 = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], 0x88), _mm512_shuffle_ps(l3[0], l3[1], 0xdd));
        const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, l4));
        return;
    }
#endif
    for (int r = 0; r < N; r++) out[r] = vsum(acc[r]);
}

// ---------------------------------------------------------------------------
// Attention of a group of query rows over n cache rows (simd.h attn)

// e^x lane-wise: x = m ln2 + r with m = round(x log2 e), |r| <= ln2/2 (ln2 in
// two parts, so r is exact to F32), e^r by the degree-6 series of Cephes'
// expf (its published coefficients; relative error ~1e-7 on that range),
// times 2^m. x is clamped to [-87.3, 88.7]: below, the result is the
// smallest normal (~1e-38) instead of a denormal or 0. A NaN stays NaN: x86
// max/min return their second operand when either is NaN, so x goes second
// (the clamp once turned a NaN score into ~1e-38, and attention swallowed it).
#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
inline vf vexp(vf x) {
#if defined(TG_SIMD_AVX512)
    x = _mm512_min_ps(vset1(88.7228391116729996f), _mm512_max_ps(vset1(-87.3365478515625f), x));
    const vf m = _mm512_roundscale_ps(vmul(x, vset1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(m, vset1(0.693359375f), x);
    r = _mm512_fnmadd_ps(m, vset1(-2.12194440e-4f), r);
#else
    x = _mm256_min_ps(vset1(88.7228391116729996f), _mm256_max_ps(vset1(-87.3365478515625f), x));
    const vf m = _mm256_round_ps(vmul(x, vset1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(m, vset1(0.693359375f), x);
    r = _mm256_fnmadd_ps(m, vset1(-2.12194440e-4f), r);
#endif
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    const vf y = vadd(vfma(vmul(p, r), r, r), vset1(1.0f));
#if defined(TG_SIMD_AVX512)
    return _mm512_scalef_ps(y, m);
#else
    // m is in [-126, 128]: 2^m built in the exponent field, in two halves so
    // that m = 128 does not overflow it
    const __m256i mi = _mm256_cvtps_epi32(m), h = _mm256_srai_epi32(mi, 1);
    const vf s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    const vf s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(mi, h), _mm256_set1_epi32(127)), 23));
    return vmul(vmul(y, s1), s2);
#endif
}
inline vf vmax(vf a, vf b) {
#if defined(TG_SIMD_AVX512)
    return _mm512_max_ps(a, b);
#else
    return _mm256_max_ps(a, b);
#endif
}
#else
inline vf vexp(vf x) {
    float t[W];
    memcpy(t, &x, sizeof t);
    for (int i = 0; i < W; i++) t[i] = expf(t[i]);
    memcpy(&x, t, sizeof t);
    return x;
}
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
#endif
inline float vmaxall(vf v) {
    float t[W];
    memcpy(t, &v, sizeof t);
    float m = t[0];
    for (int i = 1; i < W; i++) m = t[i] > m ? t[i] : m;
    return m;
}

// s[j] = scale * q.k_j for j < n: W keys per block, each an accumulator over
// the vector steps of D, the block's W sums at once (vsums), then D's tail.
template <typename TK> void attn_scores(const TK *k, size_t ldk, const float *q, int64_t D, int64_t n, float scale, float *s) {
    const int64_t Dw = D / W * W;
    for (int64_t j0 = 0; j0 < n; j0 += W) {
        const int nk = n - j0 < W ? (int)(n - j0) : W;
        const TK *kb = k + j0 * ldk;
        vf acc[W];
        for (int r = 0; r < W; r++) acc[r] = vzero();
        if (nk == W) {
            for (int64_t d = 0; d < Dw; d += W) {
                const vf qv = vld(q + d);
                for (int r = 0; r < W; r++) acc[r] = vfma(vload(kb + r * ldk + d), qv, acc[r]);
            }
        } else {
            for (int64_t d = 0; d < Dw; d += W) {
                const vf qv = vld(q + d);
                for (int r = 0; r < nk; r++) acc[r] = vfma(vload(kb + r * ldk + d), qv, acc[r]);
            }
        }
        float t[W];
        vsums<W>(acc, t);
        for (int r = 0; r < nk; r++) {
            float u = 0.0f;
            for (int64_t d = Dw; d < D; d++) u += sload(kb + r * ldk + d) * q[d];
            s[j0 + r] = (t[r] + u) * scale;
        }
    }
}

// s[j] = exp(s[j] - max) in place; returns the sum
inline float attn_softmax(float *s, int64_t n) {
    vf mv = vset1(-INFINITY);
    int64_t j = 0;
    for (; j + W <= n; j += W) mv = vmax(mv, vld(s + j));
    float mx = vmaxall(mv);
    for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    const vf mxv = vset1(mx);
    vf sv = vzero();
    for (j = 0; j + W <= n; j += W) {
        const vf e = vexp(vadd(vld(s + j), vmul(mxv, vset1(-1.0f))));
        vst(s + j, e);
        sv = vadd(sv, e);
    }
    float sum = vsum(sv);
    for (; j < n; j++) sum += (s[j] = expf(s[j] - mx));
    return sum;
}

// out[g*ldo + i] = inv[g] * sum_j p[g*n + j] v_j[i] for GB query rows: the
// accumulators of CV vectors of Dv for all GB rows stay in registers while
// every V row is read once per chunk (the group shares it), then Dv's tail.
template <int GB> constexpr int attn_cv() { return W == 16 ? (GB <= 2 ? 8 : 4) : (GB == 1 ? 4 : GB == 2 ? 4 : 2); }
template <typename TV, int GB>
void attn_pv(const TV *v, size_t ldv, const float *p, int64_t n, int64_t Dv, const float *inv, float *out, size_t ldo) {
    constexpr int CV = attn_cv<GB>();
    const int64_t Dw = Dv / W * W;
    for (int64_t c0 = 0; c0 < Dw; c0 += CV * W) {
        const int cv = (Dw - c0) / W < CV ? (int)((Dw - c0) / W) : CV;
        vf acc[GB][CV];
        for (int g = 0; g < GB; g++)
            for (int i = 0; i < CV; i++) acc[g][i] = vzero();
        for (int64_t j = 0; j < n; j++) {
            const TV *vr = v + j * ldv + c0;
            vf x[CV];
            for (int i = 0; i < CV; i++) x[i] = i < cv ? vload(vr + i * W) : vzero();
            for (int g = 0; g < GB; g++) {
                const vf pv = vset1(p[g * n + j]);
                for (int i = 0; i < CV; i++)
                    if (i < cv) acc[g][i] = vfma(pv, x[i], acc[g][i]);
            }
        }
        for (int g = 0; g < GB; g++)
            for (int i = 0; i < cv; i++) vst(out + g * ldo + c0 + i * W, vmul(acc[g][i], vset1(inv[g])));
    }
    for (int g = 0; g < GB; g++)
        for (int64_t d = Dw; d < Dv; d++) {
            float a = 0.0f;
            for (int64_t j = 0; j < n; j++) a += p[g * n + j] * sload(v + j * ldv + d);
            out[g * ldo + d] = a * inv[g];
        }
}

template <typename TK, typename TV>
void attn(const void *kv, size_t ldk, const void *vv, size_t ldv, const float *q, size_t ldq, int64_t G, int64_t D,
          int64_t Dv, int64_t n, float scale, float *s, float *out, size_t ldo) {
    const TK *k = (const TK *)kv;
    const TV *v = (const TV *)vv;
    if (n == 0) {
        for (int64_t g = 0; g < G; g++) memset(out + g * ldo, 0, (size_t)Dv * 4);
        return;
    }
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
        const int gb = G - g0 < 4 ? (int)(G - g0) : 4;
        float inv[4];
        for (int g = 0; g < gb; g++) {
            attn_scores(k, ldk, q + (g0 + g) * ldq, D, n, scale, s + g * n);
            inv[g] = 1.0f / attn_softmax(s + g * n, n);
        }
        float *o = out + g0 * ldo;
        switch (gb) {
            case 1: attn_pv<TV, 1>(v, ldv, s, n, Dv, inv, o, ldo); break;
            case 2: attn_pv<TV, 2>(v, ldv, s, n, Dv, inv, o, ldo); break;
            case 3: attn_pv<TV, 3>(v, ldv, s, n, Dv, inv, o, ldo); break;
            default: attn_pv<TV, 4>(v, ldv, s, n, Dv, inv, o, ldo); break;
        }
    }
}

// Rows j .. j+NR-1 of the state together (NR independent reductions in
// flight). One read pass takes S_j.k and S_j.q of the old rows; the output
// follows from them, o_j = scale*(a S_j.q + u_j k.q) (kq = k.q, once per
// token), so the second pass, over rows still in L1, only writes
// S_j = a S_j + u_j k: 4 vector operations per 16 state values instead of 5.
template <int NR, bool DELTA>
void dr_rows(float *S, int64_t lds, int64_t Dkp, const float *k, const float *q, const float *v, float a, float kq,
             float beta, float scale, float *o) {
    constexpr int NA = DELTA ? 2 * NR : NR;              // S.q of each row, then S.k
    constexpr int NP = W == 16 && NA == 8 ? 16 : NA;     // padded to the AVX-512 tree's 16
    vf acc[NP];
    for (int r = 0; r < NP; r++) acc[r] = vzero();
    for (int64_t i = 0; i < Dkp; i += W) {
        const vf kv = vld(k + i), qv = vld(q + i);
        for (int r = 0; r < NR; r++) {
            vf x = vld(S + r * lds + i);
#if defined(TG_SIMD_AVX512)
            __asm__("" : "+v"(x));  // one load for both FMAs (the compiler would fold it into each)
#endif
            acc[r] = vfma(x, qv, acc[r]);
            if (DELTA) acc[NR + r] = vfma(x, kv, acc[NR + r]);
        }
    }
    float sum[NP];
    vsums<NP>(acc, sum);
    vf uv[NR];
    for (int r = 0; r < NR; r++) {
        const float u = DELTA ? beta * (v[r] - a * sum[NR + r]) : beta * v[r];
        o[r] = scale * (a * sum[r] + u * kq);
        uv[r] = vset1(u);
    }
    const vf av = vset1(a);
    for (int64_t i = 0; i < Dkp; i += W) {
        const vf kv = vld(k + i);
        for (int r = 0; r < NR; r++) vst(S + r * lds + i, vfma(uv[r], kv, vmul(av, vld(S + r * lds + i))));
    }
}

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Rows per block: 8 with 32 vector registers (16 accumulators), else 4.
constexpr int k_dr_rows = W == 16 ? 8 : 4;

template <bool DELTA>
void dr_token_t(float *S, int64_t lds, int64_t Dv, int64_t Dkp, const float *k, const float *q, const float *v,
                float a, float beta, float scale, float *o, int64_t pf_from, int64_t pf_to) {
    const float kq = dot(k, q, Dkp);
    // rows ~24 KB ahead into L2: a decode step streams the state from memory
    // once, and the hardware prefetchers alone keep too few lines in flight
    const int64_t ahead = imax(k_dr_rows, (24576 / (lds * 4)) / k_dr_rows * k_dr_rows);
    int64_t j = 0;
    for (; j + k_dr_rows <= Dv; j += k_dr_rows) {
        for (int64_t r = imax(j + ahead, pf_from); r < imin(j + ahead + k_dr_rows, pf_to); r++)
            for (int64_t i = 0; i < Dkp; i += 64 / 4) __builtin_prefetch(S + r * lds + i, 0, 2);
        dr_rows<k_dr_rows, DELTA>(S + j * lds, lds, Dkp, k, q, v + j, a, kq, beta, scale, o + j);
    }
    for (; j < Dv; j++) dr_rows<1, DELTA>(S + j * lds, lds, Dkp, k, q, v + j, a, kq, beta, scale, o + j);
}

void dr_token(float *S, int64_t lds, int64_t Dv, int64_t Dkp, const float *k, const float *q, const float *v, float a,
              float beta, float scale, bool delta, float *o, int64_t pf_from, int64_t pf_to) {
    if (delta) dr_token_t<true>(S, lds, Dv, Dkp, k, q, v, a, beta, scale, o, pf_from, pf_to);
    else dr_token_t<false>(S, lds, Dv, Dkp, k, q, v, a, beta, scale, o, pf_from, pf_to);
}

const tg_simd k_table = {
    TG_SIMD_NAME,
    W,
    {mm_tile<float>, mm_tile<f16_t>, mm_tile<bf16_t>},
    {mv<float>, mv<f16_t>, mv<bf16_t>},
    mm_panel,
#if defined(TG_SIMD_AVX512)
    8,
#elif defined(TG_SIMD_AVX2)
    6,
#else
    4,
#endif
    {axpy<float>, axpy<f16_t>, axpy<bf16_t>},
    {to_f32<float>, to_f32<f16_t>, to_f32<bf16_t>},
    {from_f32_f32, from_f32_f16, from_f32_bf16},
    add,
    mul,
    add1,
    mul1,
    sumsq,
    dot,
    q_act_bytes,
    {q_quant<0>, q_quant<1>, q_quant<2>},
    {q_rows<0>, q_rows<1>, q_rows<2>},
#if defined(TG_SIMD_VNNI)
    true,
#else
    false,
#endif
#if defined(TG_HAVE_Q_GEMM)
    {nullptr, q4_gemm, q4k_gemm},
    q_gemm_scratch,
    {nullptr, q4_gemm_act, nullptr},
#else
    {nullptr, nullptr, nullptr},
    nullptr,
    {nullptr, nullptr, nullptr},
#endif
#if defined(TG_HAVE_Q_DEQUANT)
    {q8_dequant, nullptr, nullptr},
#else
    {nullptr, nullptr, nullptr},
#endif
    dr_token,
    {{attn<float, float>, attn<float, f16_t>, attn<float, bf16_t>},
     {attn<f16_t, float>, attn<f16_t, f16_t>, attn<f16_t, bf16_t>},
     {attn<bf16_t, float>, attn<bf16_t, f16_t>, attn<bf16_t, bf16_t>}},
};

}  // namespace

const tg_simd *TG_SIMD_FN() { return &k_table; }
