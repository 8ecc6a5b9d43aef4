// simd_quant_impl.h - part of simd_impl.h (included by it, inside its
// anonymous namespace, after the float kernels it uses: hsum256, the vf
// helpers): the quantized weight rows against 8-bit activations of simd.h's
// q_dot (Q8_0, Q4_0, Q4_K), for each ISA the including file selects.
// Not a header of its own: no include guard, nothing to include first.

// ---------------------------------------------------------------------------
// Quantized weight rows against 8-bit activations (simd.h q_dot)

// Q4_K sub-block j's 6-bit scale and min (a copy of quant.h's
// tg_get_scale_min_k4: this namespace calls no inline function of other headers)
inline void k4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
// 256-bit integer code (AVX2; the AVX-512 table, whose file is built with
// -mavx2 too, pairs blocks in 512 bits where it can): maddubs multiplies unsigned by signed bytes, so a signed
// product is |x| * sign(y, x); pairs of products fit int16 (|q| <= 128).
inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }
inline float hsum256(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}
// 8 int32 sums of x[i] * y[i] over 32 signed bytes
inline __m256i dot_s8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// 16 bytes of nibbles -> 32 bytes: the low nibbles (elements 0..15) then the high ones
inline __m256i nibbles(const uint8_t *q) {
    const __m128i t = _mm_loadu_si128((const __m128i *)q);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}
inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

// Block b's 32 signed weight bytes (Q4_0: the nibbles minus 8) and scale.
template <bool Q4> inline __m256i q32_weights(const void *wv, int64_t b, float *dw) {
    if (Q4) {
        const tg_block_q4_0 *w = (const tg_block_q4_0 *)wv + b;
        *dw = half_to_f32(w->d);
        return _mm256_sub_epi8(nibbles(w->qs), _mm256_set1_epi8(8));
    }
    const tg_block_q8_0 *w = (const tg_block_q8_0 *)wv + b;
    *dw = half_to_f32(w->d);
    return load32(w->qs);
}

#if defined(TG_SIMD_AVX512)
// AVX-512BW: two blocks per 512-bit register (block 2i in the low half, 2i+1
// in the high half), |x| * sign(y, x) through a mask (no 512-bit sign_epi8)
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512i dot_s8_x2(__m512i x, __m512i y) {
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(x), sy), _mm512_set1_epi16(1));
}
// Q8_0 and Q4_0: block pairs in 512 bits, an odd last block in 256
template <bool Q4, int C>
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    __m512 acc[C];
    __m256 tail[C];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), tail[c] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        float d0, d1;
        const __m256i w0 = q32_weights<Q4>(wv, b, &d0), w1 = q32_weights<Q4>(wv, b + 1, &d1);
        const __m512i wq = join(w0, w1);
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            const __m512 s = _mm512_cvtepi32_ps(dot_s8_x2(wq, join(load32(a[0].qs), load32(a[1].qs))));
            const __m512 sc = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d0 * a[0].d), _mm512_set1_ps(d1 * a[1].d));
            acc[c] = _mm512_fmadd_ps(sc, s, acc[c]);
        }
    }
    if (b < nb) {
        float dw;
        const __m256i wq = q32_weights<Q4>(wv, b, &dw);
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            tail[c] = _mm256_mul_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(dot_s8(wq, load32(a->qs))));
        }
    }
    for (int c = 0; c < C; c++) out[c] = _mm512_reduce_add_ps(acc[c]) + hsum256(tail[c]);
}
#else
// Q8_0 and Q4_0 (the nibbles minus 8): signed weight bytes per block
template <bool Q4, int C>
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float dw;
        const __m256i wq = q32_weights<Q4>(wv, b, &dw);
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            const __m256 s = _mm256_cvtepi32_ps(dot_s8(wq, load32(a->qs)));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d), s, acc[c]);
        }
    }
    for (int c = 0; c < C; c++) out[c] = hsum256(acc[c]);
}
#endif

#if defined(TG_SIMD_AVX512)
// Q4_K: sub-blocks 2g and 2g+1 in one 512-bit register, against the 64
// contiguous activation bytes of the pair
template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    __m512 acc[C];
    float mins[C];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), mins[c] = 0.0f;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *w = (const tg_block_q4_k *)wv + b;
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) k4_scale_min(j, w->scales, &sc[j], &m[j]);
        __m512i q[4], scv[4];
        for (int g = 0; g < 4; g++) {
            const __m256i x = load32(w->qs + 32 * g);
            q[g] = _mm512_and_si512(join(x, _mm256_srli_epi16(x, 4)), low4);
            scv[g] = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)sc[2 * g]),
                                             _mm512_set1_epi16((short)sc[2 * g + 1]));
        }
        const float d = half_to_f32(w->d), dmin = half_to_f32(w->dmin);
        for (int c = 0; c < C; c++) {
            const tg_act_q8k *a = (const tg_act_q8k *)(act + c * as) + b;
            __m512i sum = _mm512_setzero_si512();
            for (int g = 0; g < 4; g++) {
                const __m512i p = _mm512_maddubs_epi16(q[g], _mm512_loadu_si512((const void *)(a->qs + 64 * g)));
                sum = _mm512_add_epi32(sum, _mm512_madd_epi16(p, scv[g]));
            }
            int summ = 0;
            for (int j = 0; j < 8; j++) summ += m[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
            acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(d * a->d), _mm512_cvtepi32_ps(sum), acc[c]);
            mins[c] += dmin * a->d * (float)summ;
        }
    }
    for (int c = 0; c < C; c++) out[c] = _mm512_reduce_add_ps(acc[c]) - mins[c];
}
#else
template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    __m256 acc[C];
    float mins[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps(), mins[c] = 0.0f;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *w = (const tg_block_q4_k *)wv + b;
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) k4_scale_min(j, w->scales, &sc[j], &m[j]);
        __m256i lo[4], hi[4];  // sub-blocks 2g and 2g + 1, unsigned 0..15
        for (int g = 0; g < 4; g++) {
            const __m256i q = load32(w->qs + 32 * g);
            lo[g] = _mm256_and_si256(q, low4);
            hi[g] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
        const float d = half_to_f32(w->d), dmin = half_to_f32(w->dmin);
        for (int c = 0; c < C; c++) {
            const tg_act_q8k *a = (const tg_act_q8k *)(act + c * as) + b;
            __m256i sum = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i p0 = _mm256_maddubs_epi16(lo[g], load32(a->qs + 64 * g));
                const __m256i p1 = _mm256_maddubs_epi16(hi[g], load32(a->qs + 64 * g + 32));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p0, _mm256_set1_epi16((short)sc[2 * g])));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p1, _mm256_set1_epi16((short)sc[2 * g + 1])));
            }
            int summ = 0;
            for (int j = 0; j < 8; j++) summ += m[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(sum), acc[c]);
            mins[c] += dmin * a->d * (float)summ;
        }
    }
    for (int c = 0; c < C; c++) out[c] = hsum256(acc[c]) - mins[c];
}
#endif
#else
// Portable: integer sums per block in plain loops (the compiler vectorizes them).
inline float half_to_f32(uint16_t h) { return tg_fp16_to_fp32_impl(h); }

template <bool Q4, int C>
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    float acc[C] = {};
    for (int64_t b = 0; b < nb; b++) {
        int8_t wq[32];
        float dw;
        if (Q4) {
            const tg_block_q4_0 *w = (const tg_block_q4_0 *)wv + b;
            for (int i = 0; i < 16; i++) wq[i] = (int8_t)((w->qs[i] & 15) - 8), wq[i + 16] = (int8_t)((w->qs[i] >> 4) - 8);
            dw = half_to_f32(w->d);
        } else {
            const tg_block_q8_0 *w = (const tg_block_q8_0 *)wv + b;
            memcpy(wq, w->qs, 32);
            dw = half_to_f32(w->d);
        }
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += wq[i] * a->qs[i];
            acc[c] += dw * a->d * (float)s;
        }
    }
    for (int c = 0; c < C; c++) out[c] = acc[c];
}

template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out) {
    float acc[C] = {}, mins[C] = {};
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *w = (const tg_block_q4_k *)wv + b;
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) k4_scale_min(j, w->scales, &sc[j], &m[j]);
        uint8_t q[256];  // sub-block j's element l at 32 j + l
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) q[64 * g + l] = w->qs[32 * g + l] & 15, q[64 * g + 32 + l] = w->qs[32 * g + l] >> 4;
        const float d = half_to_f32(w->d), dmin = half_to_f32(w->dmin);
        for (int c = 0; c < C; c++) {
            const tg_act_q8k *a = (const tg_act_q8k *)(act + c * as) + b;
            int32_t sum = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                int32_t s = 0;
                for (int l = 0; l < 32; l++) s += q[32 * j + l] * a->qs[32 * j + l];
                sum += sc[j] * s;
                summ += m[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
            }
            acc[c] += d * a->d * (float)sum;
            mins[c] += dmin * a->d * (float)summ;
        }
    }
    for (int c = 0; c < C; c++) out[c] = acc[c] - mins[c];
}
#endif

template <int Q> void q_dot(const void *w, const void *act, size_t as, int64_t nb, float *out, int C) {
    const char *a = (const char *)act;
#define TG_QDOT(c)                                      \
    case c:                                             \
        if (Q == 2)                                     \
            q4k_dot<c>(w, a, as, nb, out);              \
        else                                            \
            q32_dot<Q == 1, c>(w, a, as, nb, out);      \
        return;
    switch (C) {
        TG_QDOT(1) TG_QDOT(2) TG_QDOT(3) TG_QDOT(4)
        default: return;
    }
#undef TG_QDOT
}
