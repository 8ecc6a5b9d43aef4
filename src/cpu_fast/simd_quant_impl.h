// simd_quant_impl.h - part of simd_impl.h (included by it, inside its
// anonymous namespace, after the float kernels it uses: hsum256, the vf
// helpers): the activations' 8-bit quantization and the quantized weight
// rows against them of simd.h's q_quant / q_rows (Q8_0, Q4_0, Q4_K), for
// each ISA the including file selects.
// Not a header of its own: no include guard, nothing to include first.

// ---------------------------------------------------------------------------
// Quantized weight rows against 8-bit activations (simd.h q_rows)

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
inline float half_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#else
inline float half_to_f32(uint16_t h) { return tg_fp16_to_fp32_impl(h); }
#endif
// A weight block's F16 scale (d, Q4_K's dmin) in F32, an infinite one made
// NaN (d + d * 0): the dequantized weights of such a block are NaN or
// infinite of both signs, so the reference's products are NaN, while an
// infinite scale times an integer sum would give +-inf. The AVX2 / AVX-512
// 32-value rows and the AVX2 Q4_K rows instead flag an infinite scale on its
// bits (half_inf) and make the row's output NaN at the end: an FMA per block
// cost the Q8_0 rows ~5% here.
inline float wscale(uint16_t h) {
    const float d = half_to_f32(h);
    return d + d * 0.0f;
}
inline bool half_inf(uint16_t h) { return (h & 0x7fff) == 0x7c00; }

#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
// 256-bit integer code (AVX2; the AVX-512 table, whose file is built with
// -mavx2 too, pairs blocks in 512 bits where it can): maddubs multiplies unsigned by signed bytes, so a signed
// product is |x| * sign(y, x); pairs of products fit int16 (|q| <= 128).
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
// (*inf set when the scale is infinite: the caller's output is then NaN)
template <bool Q4> inline __m256i q32_weights(const void *wv, int64_t b, float *dw, bool *inf) {
    if (Q4) {
        const tg_block_q4_0 *w = (const tg_block_q4_0 *)wv + b;
        *dw = half_to_f32(w->d), *inf |= half_inf(w->d);
        return _mm256_sub_epi8(nibbles(w->qs), _mm256_set1_epi8(8));
    }
    const tg_block_q8_0 *w = (const tg_block_q8_0 *)wv + b;
    *dw = half_to_f32(w->d), *inf |= half_inf(w->d);
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
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    __m512 acc[C];
    __m256 tail[C];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), tail[c] = _mm256_setzero_ps();
    bool inf = false;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        float d0, d1;
        const __m256i w0 = q32_weights<Q4>(wv, b, &d0, &inf), w1 = q32_weights<Q4>(wv, b + 1, &d1, &inf);
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
        const __m256i wq = q32_weights<Q4>(wv, b, &dw, &inf);
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            tail[c] = _mm256_mul_ps(_mm256_set1_ps(dw * a->d), _mm256_cvtepi32_ps(dot_s8(wq, load32(a->qs))));
        }
    }
    for (int c = 0; c < C; c++) out[c * ldo] = inf ? NAN : _mm512_reduce_add_ps(acc[c]) + hsum256(tail[c]);
}
#else
// Q8_0 and Q4_0 (the nibbles minus 8): signed weight bytes per block (one
// accumulator per token: two, for blocks 2i and 2i + 1, measured 2-7% slower
// for Q8_0 here, session 34)
template <bool Q4, int C>
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    bool inf = false;
    const size_t bb = Q4 ? sizeof(tg_block_q4_0) : sizeof(tg_block_q8_0);
    const char *pf = (const char *)wv + k_pf_bytes;
    for (int64_t b = 0; b < nb; b++) {
        for (const char *to = (const char *)wv + (size_t)(b + 1) * bb + k_pf_bytes; pf < to; pf += 64)
            __builtin_prefetch(pf, 0, 2);
        float dw;
        const __m256i wq = q32_weights<Q4>(wv, b, &dw, &inf);
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            const __m256 s = _mm256_cvtepi32_ps(dot_s8(wq, load32(a->qs)));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a->d), s, acc[c]);
        }
    }
    for (int c = 0; c < C; c++) out[c * ldo] = inf ? NAN : hsum256(acc[c]);
}
#endif

#if defined(TG_SIMD_AVX2)
// Q4_0 against the paired activations (quant_act.h tg_act_q4p), two blocks
// per step: one 32-byte vector of the pair's nibbles gives the low nibbles
// (values 0..15 of both blocks) and the high ones, unsigned, against the
// activations stored in that order; the two maddubs add in int16 (at most
// 2 * 3810), one madd makes lanes 0..3 block 2i's and 4..7 block 2i + 1's
// int32 sums, the offset (nibble - 8) is taken back exactly in int32 (the
// stored 8 sum q_a of each lane's 8 values), so every lane holds the exact
// partial sum of its 8 products (no large terms that cancel in F32: sparse
// weights stay exact), and one FMA scales the lanes by their block's d_w
// d_a. Against q32_dot's sign trick per block: no sign or byte subtract, one
// madd, one scale conversion and FMA per two blocks. An infinite weight
// scale is made NaN (as wscale does).
template <int C> void q4_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    // two accumulators per token, pairs 2p and 2p + 1 (a pair's work is
    // about one FMA latency: a single chain would wait on it every pair)
    __m256 acc0[C], acc1[C];
    for (int c = 0; c < C; c++) acc0[c] = acc1[c] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const tg_block_q4_0 *w = (const tg_block_q4_0 *)wv;
    const char *pf = (const char *)wv + k_pf_bytes;
    auto pair = [&](int64_t b, __m256 *acc) {  // blocks b, b + 1 (b + 1 < nb: two)
        const bool two = b + 1 < nb;  // else the row's last block alone, block 1 of its pair zero
        for (const char *to = (const char *)(w + b + 2) + k_pf_bytes; pf < to; pf += 64) __builtin_prefetch(pf, 0, 2);
        const __m128i q0 = _mm_loadu_si128((const __m128i *)w[b].qs);
        const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)w[b + 1].qs) : _mm_setzero_si128();
        const __m256i raw = _mm256_set_m128i(q1, q0);
        const __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        __m128i dh = _mm_cvtsi32_si128(w[b].d);
        if (two) dh = _mm_insert_epi16(dh, w[b + 1].d, 1);
        __m128 dw = _mm_cvtph_ps(dh);                   // d_w of blocks b, b + 1, then zeros
        dw = _mm_fmadd_ps(dw, _mm_setzero_ps(), dw);  // inf -> NaN (wscale)
        for (int c = 0; c < C; c++) {
            const tg_act_q4p *a = (const tg_act_q4p *)(act + c * as) + b / 2;
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(a->lo)),
                                                 _mm256_maddubs_epi16(hi, load32(a->hi)));
            const __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones16), load32(a->corr));
            const __m128 da = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)a->d));
            const __m256 dd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(dw, da)), spread);
            acc[c] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc[c]);
        }
    };
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) pair(b, acc0), pair(b + 2, acc1);
    if (b < nb) pair(b, acc0);
    if (b + 2 < nb) pair(b + 2, acc1);
    for (int c = 0; c < C; c++) out[c * ldo] = hsum256(_mm256_add_ps(acc0[c], acc1[c]));
}
#endif

#if defined(TG_SIMD_AVX512)
// Q4_K: sub-blocks 2g and 2g+1 in one 512-bit register, against the 64
// contiguous activation bytes of the pair
template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
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
        const float d = wscale(w->d), dmin = wscale(w->dmin);
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
    for (int c = 0; c < C; c++) out[c * ldo] = _mm512_reduce_add_ps(acc[c]) - mins[c];
}
#else
// Q4_K's 12 scale bytes as 8 6-bit scales (bytes 0..7) and 8 6-bit mins
// (bytes 8..15), four sub-blocks per 32-bit word (k4_scale_min's unpacking
// done on whole words)
inline __m128i k4_scales_mins(const uint8_t *s) {
    uint32_t a0, a1, a2;
    memcpy(&a0, s, 4), memcpy(&a1, s + 4, 4), memcpy(&a2, s + 8, 4);
    const uint32_t sc_hi = (a2 & 0x0f0f0f0fu) | ((a0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 2) & 0x30303030u);
    return _mm_set_epi32((int)m_hi, (int)(a1 & 0x3f3f3f3fu), (int)sc_hi, (int)(a0 & 0x3f3f3f3fu));
}
// Sub-block j's scale (int16 j of each 128-bit lane) in all 16 int16 lanes
template <int J> inline __m256i k4_scale_of(__m256i scales) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(2 * J | (2 * J + 1) << 8)));
}
// Per block: the 8 scales and mins unpacked in vector registers, the
// sub-blocks' maddubs sums weighted by their scale in madd (int32 lanes,
// exact: at most 8 * 2 * 63 * 3810 in magnitude), and the mins against the
// activations' pair sums of bsums in one more madd; both in F32 FMAs.
template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    __m256 acc[C];
    __m128 accm[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps(), accm[c] = _mm_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    bool inf = false;
    const char *pf = (const char *)wv + k_pf_bytes;
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *w = (const tg_block_q4_k *)wv + b;
        for (const char *to = (const char *)(w + 1) + k_pf_bytes; pf < to; pf += 64) __builtin_prefetch(pf, 0, 2);
        const __m256i sm = _mm256_cvtepu8_epi16(k4_scales_mins(w->scales));  // scales 0..7, mins 0..7 (int16)
        const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);
        const __m128i mins = _mm256_extracti128_si256(sm, 1);
        const __m256i s[8] = {k4_scale_of<0>(scales), k4_scale_of<1>(scales), k4_scale_of<2>(scales),
                              k4_scale_of<3>(scales), k4_scale_of<4>(scales), k4_scale_of<5>(scales),
                              k4_scale_of<6>(scales), k4_scale_of<7>(scales)};
        __m256i lo[4], hi[4];  // sub-blocks 2g and 2g + 1, unsigned 0..15
        for (int g = 0; g < 4; g++) {
            const __m256i q = load32(w->qs + 32 * g);
            lo[g] = _mm256_and_si256(q, low4);
            hi[g] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
        const float d = half_to_f32(w->d), dmin = half_to_f32(w->dmin);
        inf |= half_inf(w->d) | half_inf(w->dmin);
        for (int c = 0; c < C; c++) {
            const tg_act_q8k *a = (const tg_act_q8k *)(act + c * as) + b;
            __m256i sum = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i p0 = _mm256_maddubs_epi16(lo[g], load32(a->qs + 64 * g));
                const __m256i p1 = _mm256_maddubs_epi16(hi[g], load32(a->qs + 64 * g + 32));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p0, s[2 * g]));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p1, s[2 * g + 1]));
            }
            // bsums in pairs: sub-block j's sum of 32 activations (at most 4064 in magnitude)
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums),
                                              _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(sum), acc[c]);
            accm[c] = _mm_fmadd_ps(_mm_set1_ps(dmin * a->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins, bs)), accm[c]);
        }
    }
    for (int c = 0; c < C; c++) {
        __m128 m = _mm_add_ps(accm[c], _mm_movehl_ps(accm[c], accm[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[c * ldo] = inf ? NAN : hsum256(acc[c]) - _mm_cvtss_f32(m);
    }
}
#endif
#else
// Portable: integer sums per block in plain loops (the compiler vectorizes them).

template <bool Q4, int C>
void q32_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    float acc[C] = {};
    for (int64_t b = 0; b < nb; b++) {
        int8_t wq[32];
        float dw;
        if (Q4) {
            const tg_block_q4_0 *w = (const tg_block_q4_0 *)wv + b;
            for (int i = 0; i < 16; i++) wq[i] = (int8_t)((w->qs[i] & 15) - 8), wq[i + 16] = (int8_t)((w->qs[i] >> 4) - 8);
            dw = wscale(w->d);
        } else {
            const tg_block_q8_0 *w = (const tg_block_q8_0 *)wv + b;
            memcpy(wq, w->qs, 32);
            dw = wscale(w->d);
        }
        for (int c = 0; c < C; c++) {
            const tg_act_q8 *a = (const tg_act_q8 *)(act + c * as) + b;
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += wq[i] * a->qs[i];
            acc[c] += dw * a->d * (float)s;
        }
    }
    for (int c = 0; c < C; c++) out[c * ldo] = acc[c];
}

template <int C> void q4k_dot(const void *wv, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    float acc[C] = {}, mins[C] = {};
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *w = (const tg_block_q4_k *)wv + b;
        int sc[8], m[8];
        for (int j = 0; j < 8; j++) k4_scale_min(j, w->scales, &sc[j], &m[j]);
        uint8_t q[256];  // sub-block j's element l at 32 j + l
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) q[64 * g + l] = w->qs[32 * g + l] & 15, q[64 * g + 32 + l] = w->qs[32 * g + l] >> 4;
        const float d = wscale(w->d), dmin = wscale(w->dmin);
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
    for (int c = 0; c < C; c++) out[c * ldo] = acc[c] - mins[c];
}
#endif

#if defined(TG_SIMD_VNNI)
// ---------------------------------------------------------------------------
// Q4_0 and Q8_0 with AVX512-VNNI vpdpbusd (unsigned weight bytes x signed
// activation bytes, 4 products per 32-bit lane added exactly) on the grouped
// activations of quant_act.h. A group of G blocks of BS bytes (Q4_0 4 x 18,
// Q8_0 2 x 34: S = G * BS bytes) is read as two 64-byte loads, at 0 and at
// S - 64; vpermb (AVX512-VBMI) gathers the quants into the byte order of the
// activations and the F16 scales to the 32-bit lanes of their block. The
// last group of a row is loaded masked to its blocks (no byte past the row
// is read, the rest is zero: zero quants, zero scales).
template <bool Q4> struct qgroup {
    static constexpr int G = Q4 ? 4 : 2, BS = Q4 ? 18 : 34, S = G * BS, OFF = S - 64;
    static constexpr size_t AG = Q4 ? sizeof(tg_act_q4g) : sizeof(tg_act_q8g);
    // lanes of the quant vector taken from the second load
    static constexpr __mmask64 SECOND = Q4 ? 0xFFFF000000000000ull : 0xFFFFFFFF00000000ull;
};
// vpermb indices: quants (byte p of the vector: Q4_0 block p / 16 byte 2 +
// p % 16 (its 16 bytes of nibbles); Q8_0 block p / 32 byte 2 + p % 32) and
// scales (16 halves, lane l's block l / (16 / G))
template <bool Q4> void qgroup_index(__m512i *iq, __m512i *id) {
    using g = qgroup<Q4>;
    alignas(64) int8_t q[64], d[64];
    for (int p = 0; p < 64; p++) {
        const int per = 64 / g::G, j = p / per, byte = g::BS * j + 2 + p % per;  // byte of the group
        q[p] = (int8_t)(j < g::G - 1 ? byte : byte - g::OFF);  // the last block from the second load (SECOND)
        const int lane = (p / 2) % 16;
        d[p] = (int8_t)(g::BS * (lane / (16 / g::G)) + (p & 1));
    }
    *iq = _mm512_load_si512((const void *)q);
    *id = _mm512_load_si512((const void *)d);
}

template <bool Q4, int R, int C>
void qg_rows(const char *w, size_t ldw, const char *act, size_t as, int64_t nb, float *out, size_t ldo, __m512i iq,
             __m512i id) {
    using g = qgroup<Q4>;
    __m512 acc[R][C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8((char)0x80);
    // software prefetch k_pf_bytes ahead along the R rows taken as one
    // stream, as tile() does, each 64-byte line once, into L2 (prefetcht1:
    // 125M Q8_0 generation 152-159 -> 194-199 tok/s, Q4_0 +10%, against
    // prefetcht0, 3 interleaved runs; prefetchnta 40-60% slower)
    const char *pf = w + k_pf_bytes, *pf_to = pf;
    for (int64_t gi = 0; gi * g::G < nb; gi++) {
        for (pf_to += (int64_t)R * g::S; pf < pf_to; pf += 64) __builtin_prefetch(pf, 0, 2);
        const int64_t left = nb - gi * g::G;
        const int used = left < g::G ? (int)left * g::BS : g::S;
        const __mmask64 m0 = used >= 64 ? ~0ull : (1ull << used) - 1;
        const __mmask64 m1 = used >= g::S ? ~0ull : used <= g::OFF ? 0ull : (1ull << (used - g::OFF)) - 1;
        for (int r = 0; r < R; r++) {
            const char *p = w + r * ldw + gi * g::S;
            __m512i raw0, raw1;
            if (used == g::S) {
                raw0 = _mm512_loadu_si512((const void *)p);
                raw1 = _mm512_loadu_si512((const void *)(p + g::OFF));
            } else {
                raw0 = _mm512_maskz_loadu_epi8(m0, p);
                raw1 = _mm512_maskz_loadu_epi8(m1, p + g::OFF);
            }
            const __m512i q = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(iq, raw0), g::SECOND, iq, raw1);
            __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi8(id, raw0)));
            dw = _mm512_fmadd_ps(dw, _mm512_setzero_ps(), dw);  // inf -> NaN (wscale)
            // unsigned weights: Q4_0 the nibbles (element i < 16 low, 16 + i high), Q8_0 q + 128
            const __m512i u0 = Q4 ? _mm512_and_si512(q, low4) : _mm512_xor_si512(q, bias);
            const __m512i u1 = Q4 ? _mm512_and_si512(_mm512_srli_epi16(q, 4), low4) : u0;
            for (int c = 0; c < C; c++) {
                const char *a = act + c * as + gi * g::AG;
                __m512i s;
                if (Q4) {
                    const tg_act_q4g *x = (const tg_act_q4g *)a;
                    s = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)x->corr), u0,
                                            _mm512_loadu_si512((const void *)x->lo));
                    s = _mm512_dpbusd_epi32(s, u1, _mm512_loadu_si512((const void *)x->hi));
                } else {
                    const tg_act_q8g *x = (const tg_act_q8g *)a;
                    s = _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)x->corr), u0,
                                            _mm512_loadu_si512((const void *)x->qs));
                }
                const tg_act_q4g *x4 = (const tg_act_q4g *)a;
                const tg_act_q8g *x8 = (const tg_act_q8g *)a;
                const __m512 da = _mm512_loadu_ps(Q4 ? x4->d : x8->d);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out[r + c * ldo] = _mm512_reduce_add_ps(acc[r][c]);
}

// Q4_K, one row: each 64 bytes of quants as two vectors of nibbles (low:
// sub-blocks 0, 2 or 4, 6; high: 1, 3 or 5, 7), against the activations
// stored in that order (tg_act_q8kv); maddubs pairs, then vpdpwssd by the
// sub-blocks' 6-bit scales (16-bit words spread by vpermw); the mins against
// the activations' per-sub-block sums in 128 bits (pmaddwd). Exact in int32.
// Rows one after the other (row r at w + r * ldw), prefetched as qg_rows does.
template <int C>
void q4k_vnni(const char *w, size_t ldw, int64_t R, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // vpermw indices: words 0..15 take scale A, 16..31 scale B, (A, B) = (0, 2), (1, 3), (4, 6), (5, 7)
    __m512i idx[4];
    for (int v = 0; v < 4; v++) {
        const int a = (v / 2) * 4 + v % 2;
        idx[v] = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)a), _mm512_set1_epi16((short)(a + 2)));
    }
    const char *pf = w + k_pf_bytes, *pf_to = pf;
    for (int64_t r = 0; r < R; r++) {
        __m512 acc[C];
        __m128 macc[C];
        for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps(), macc[c] = _mm_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            for (pf_to += sizeof(tg_block_q4_k); pf < pf_to; pf += 64) __builtin_prefetch(pf, 0, 2);
            const tg_block_q4_k *blk = (const tg_block_q4_k *)(w + r * ldw) + b;
            uint32_t u0, u1, u2, dd;
            memcpy(&u0, blk->scales, 4);
            memcpy(&u1, blk->scales + 4, 4);
            memcpy(&u2, blk->scales + 8, 4);
            memcpy(&dd, blk, 4);  // d, dmin
            // the 6-bit scales and mins, a byte each (quant.h tg_get_scale_min_k4, 4 at a time)
            const uint64_t sc = (uint64_t)(u0 & 0x3f3f3f3fu) | (uint64_t)((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32;
            const uint64_t mn = (uint64_t)(u1 & 0x3f3f3f3fu) | (uint64_t)(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u))
                                                                 << 32;
            const __m512i scw = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            const __m128i mw = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
            __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));  // d, dmin, 0, 0
            dm = _mm_fmadd_ps(dm, _mm_setzero_ps(), dm);           // inf -> NaN (wscale)
            __m512i q[4], s16[4];
            for (int h = 0; h < 2; h++) {
                const __m512i x = _mm512_loadu_si512((const void *)(blk->qs + 64 * h));
                q[2 * h] = _mm512_and_si512(x, low4);
                q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), low4);
            }
            for (int v = 0; v < 4; v++) s16[v] = _mm512_permutexvar_epi16(idx[v], scw);
            for (int c = 0; c < C; c++) {
                const tg_act_q8kv *a = (const tg_act_q8kv *)(act + c * as) + b;
                __m512i s = _mm512_setzero_si512();
                for (int v = 0; v < 4; v++)
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512((const void *)(a->qs + 64 * v))),
                                            s16[v]);
                const __m128 f = _mm_mul_ps(dm, _mm_set1_ps(a->d));  // d d_a, dmin d_a
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_broadcastss_ps(f), acc[c]);
                const __m128i ms = _mm_madd_epi16(mw, _mm_loadu_si128((const __m128i *)a->sums));
                macc[c] = _mm_fmadd_ps(_mm_cvtepi32_ps(ms), _mm_shuffle_ps(f, f, 0x55), macc[c]);
            }
        }
        for (int c = 0; c < C; c++) {
            __m128 m = _mm_add_ps(macc[c], _mm_movehl_ps(macc[c], macc[c]));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            out[r + c * ldo] = _mm512_reduce_add_ps(acc[c]) - _mm_cvtss_f32(m);
        }
    }
}

// 4 rows per pass, then one at a time
template <bool Q4, int C>
void qg_dot(const char *w, size_t ldw, int64_t R, const char *act, size_t as, int64_t nb, float *out, size_t ldo) {
    __m512i iq, id;
    qgroup_index<Q4>(&iq, &id);
    int64_t r = 0;
    for (; r + 4 <= R; r += 4) qg_rows<Q4, 4, C>(w + r * ldw, ldw, act, as, nb, out + r, ldo, iq, id);
    for (; r < R; r++) qg_rows<Q4, 1, C>(w + r * ldw, ldw, act, as, nb, out + r, ldo, iq, id);
}
#endif

// ---------------------------------------------------------------------------
// Activations to 8 bits (simd.h q_quant): one block of n values,
// d = absmax / 127, q = round(x / d) to nearest even (|q| <= 127; x / d
// when 1 / d overflows, else x * (1 / d)); a NaN or inf in the block: q = 0,
// d = NaN.
#if defined(TG_SIMD_AVX512)
float quant_block(const float *x, int n, int8_t *q) {  // n a multiple of 16
    const __m512 zero = _mm512_setzero_ps();
    __m512 amax = zero, z = zero;
    for (int i = 0; i < n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
        z = _mm512_add_ps(z, _mm512_mul_ps(v, zero));  // x * 0 is NaN exactly when x is NaN or inf
    }
    if (_mm512_cmp_ps_mask(z, zero, _CMP_NEQ_UQ)) {
        memset(q, 0, (size_t)n);
        return NAN;
    }
    const float d = _mm512_reduce_max_ps(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const bool div = id > 3.4e38f;
    const __m512 idv = _mm512_set1_ps(id), dv = _mm512_set1_ps(d);
    for (int i = 0; i < n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        __m512i r = _mm512_cvtps_epi32(div ? _mm512_div_ps(v, dv) : _mm512_mul_ps(v, idv));
        r = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(r));
    }
    return d;
}
#else
float quant_block(const float *x, int n, int8_t *q) {
    float z = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) z += x[i] * 0.0f;  // x * 0 is NaN exactly when x is NaN or inf
    if (z != 0.0f) {
        memset(q, 0, (size_t)n);
        return NAN;
    }
    for (int i = 0; i < n; i++) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const bool div = id > 3.4e38f;
    for (int i = 0; i < n; i++) {
        const float v = std::nearbyint(div ? x[i] / d : x[i] * id);
        q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
    return d;
}
#endif

inline int block_sum(const int8_t *q, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += q[i];
    return s;
}

size_t q_act_bytes(int qi, int64_t K) {
#if defined(TG_SIMD_VNNI)
    if (qi == 2) return (size_t)(K / TG_QK_K) * sizeof(tg_act_q8kv);
#endif
    if (qi == 2) return (size_t)(K / TG_QK_K) * sizeof(tg_act_q8k);
#if defined(TG_SIMD_VNNI)
    const int64_t G = qi == 1 ? 4 : 2;
    return (size_t)((K / 32 + G - 1) / G) * (qi == 1 ? sizeof(tg_act_q4g) : sizeof(tg_act_q8g));
#else
#if defined(TG_SIMD_AVX2)
    if (qi == 1) return (size_t)((K / 32 + 1) / 2) * sizeof(tg_act_q4p);
#endif
    return (size_t)(K / 32) * sizeof(tg_act_q8);
#endif
}

template <int Q> void q_quant(const float *x, int64_t K, void *dst) {
#if defined(TG_SIMD_VNNI)
    if (Q == 2) {
        static const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
        tg_act_q8kv *y = (tg_act_q8kv *)dst;
        for (int64_t b = 0; b < K / TG_QK_K; b++, x += TG_QK_K) {
            int8_t q[TG_QK_K];
            memset(&y[b], 0, sizeof y[b]);
            y[b].d = quant_block(x, TG_QK_K, q);
            for (int p = 0; p < 8; p++) memcpy(y[b].qs + 32 * p, q + 32 * order[p], 32);
            for (int j = 0; j < 8; j++) y[b].sums[j] = (int16_t)block_sum(q + 32 * j, 32);
        }
        return;
    }
#endif
    if (Q == 2) {
        tg_act_q8k *y = (tg_act_q8k *)dst;
        for (int64_t b = 0; b < K / TG_QK_K; b++, x += TG_QK_K) {
            y[b].d = quant_block(x, TG_QK_K, y[b].qs);
            for (int j = 0; j < TG_QK_K / 16; j++) y[b].bsums[j] = (int16_t)block_sum(y[b].qs + 16 * j, 16);
        }
        return;
    }
#if defined(TG_SIMD_AVX2)
    if (Q == 1) {
        tg_act_q4p *y = (tg_act_q4p *)dst;
        const int64_t nb = K / 32;
        memset(dst, 0, q_act_bytes(Q, K));
        for (int64_t b = 0; b < nb; b++, x += 32) {
            int8_t q[32];
            const float d = quant_block(x, 32, q);
            tg_act_q4p *g = y + b / 2;
            const int j = (int)(b % 2);
            memcpy(g->lo + 16 * j, q, 16);
            memcpy(g->hi + 16 * j, q + 16, 16);
            for (int k = 0; k < 4; k++)  // lane 4 j + k: values 4 k.. and 16 + 4 k.. (4 each)
                g->corr[4 * j + k] = 8 * (block_sum(q + 4 * k, 4) + block_sum(q + 16 + 4 * k, 4));
            g->d[j] = d;
        }
        return;
    }
#endif
#if defined(TG_SIMD_VNNI)
    memset(dst, 0, q_act_bytes(Q, K));
    for (int64_t b = 0; b < K / 32; b++, x += 32) {
        int8_t q[32];
        const float d = quant_block(x, 32, q);
        if (Q == 1) {
            tg_act_q4g *g = (tg_act_q4g *)dst + b / 4;
            const int j = (int)(b % 4);
            memcpy(g->lo + 16 * j, q, 16);
            memcpy(g->hi + 16 * j, q + 16, 16);
            for (int k = 0; k < 4; k++)  // lane 4 j + k: values 4 k.. and 16 + 4 k.. (4 each)
                g->corr[4 * j + k] = -8 * (block_sum(q + 4 * k, 4) + block_sum(q + 16 + 4 * k, 4));
            for (int l = 0; l < 4; l++) g->d[4 * j + l] = d;
        } else {
            tg_act_q8g *g = (tg_act_q8g *)dst + b / 2;
            const int j = (int)(b % 2);
            memcpy(g->qs + 32 * j, q, 32);
            for (int k = 0; k < 8; k++) g->corr[8 * j + k] = -128 * block_sum(q + 4 * k, 4);  // lane 8 j + k: values 4 k..
            for (int l = 0; l < 8; l++) g->d[8 * j + l] = d;
        }
    }
#else
    tg_act_q8 *y = (tg_act_q8 *)dst;
    for (int64_t b = 0; b < K / 32; b++, x += 32) y[b].d = quant_block(x, 32, y[b].qs);
#endif
}

// One Q8_0 / Q4_0 row against C tokens in this table's activation layout
// (the AVX2 table's Q4_0: the paired one, q4_dot)
template <int Q, int C> void q32_row(const void *w, const char *a, size_t as, int64_t nb, float *out, size_t ldo) {
#if defined(TG_SIMD_AVX2)
    if (Q == 1) return q4_dot<C>(w, a, as, nb, out, ldo);
#endif
    q32_dot<Q == 1, C>(w, a, as, nb, out, ldo);
}

template <int Q>
void q_rows(const void *w, size_t ldw, int64_t R, const void *act, size_t as, int64_t nb, float *out, size_t ldo,
            int C) {
    const char *a = (const char *)act, *wr = (const char *)w;
#if defined(TG_SIMD_VNNI)
#define TG_QROWS(c)                                                          \
    case c:                                                                  \
        if (Q == 2) {                                                        \
            q4k_vnni<c>(wr, ldw, R, a, as, nb, out, ldo);                    \
        } else {                                                             \
            qg_dot<Q == 1, c>(wr, ldw, R, a, as, nb, out, ldo);              \
        }                                                                    \
        return;
#else
#define TG_QROWS(c)                                                          \
    case c:                                                                  \
        for (int64_t r = 0; r < R; r++)                                      \
            if (Q == 2)                                                      \
                q4k_dot<c>(wr + r * ldw, a, as, nb, out + r, ldo);           \
            else                                                             \
                q32_row<Q, c>(wr + r * ldw, a, as, nb, out + r, ldo);        \
        return;
#endif
    switch (C) {
        TG_QROWS(1) TG_QROWS(2) TG_QROWS(3) TG_QROWS(4)
        default: return;
    }
#undef TG_QROWS
}
