// simd_qgemm_impl.h - part of simd_impl.h (included by it, inside its
// anonymous namespace, after simd_quant_impl.h, whose helpers it uses): the
// AVX2 table's quantized weights against many tokens (simd.h q_gemm), for
// prompts. Not a header of its own: no include guard, nothing to include
// first.
//
// Why a kernel of its own: on AVX2 a signed 8-bit dot product is maddubs
// (32 products into 16 int16 pair sums) then madd (int16 pairs into int32),
// two multiplies on the one pipe that has them: 16 products per cycle, the
// same as F32 FMA, so q_rows gains nothing over dequantized F32 panels at
// many tokens. Q4_0 weights are small enough to skip most of the madds:
// with the weights as the signed side (the nibble - 8, in [-8, 7]) and the
// activations as the unsigned side (q + 128, in [1, 255]: each row's bytes
// flipped once by q4_gemm_act after q_quant), a pair sum is at
// most 2 * 255 * 8 = 4080 in magnitude, so the int16 pair sums of a whole
// block (8 maddubs of 4 values per row) add up to at most 32640 and one madd
// per block and token is left: ~28 products per multiply-pipe cycle.
//
// Layout: 8 weight rows of one block interleaved (q4_pack: slice j holds
// values 4j..4j+3 of each row, one 32-bit lane per row), so that one
// broadcast of a token's 4 activation bytes meets 8 rows at once and every
// int32 lane of the result is one row. The + 128 is taken back per row and
// block: sum_i (q_i + 128) w_i = sum_i q_i w_i + 128 sum_i w_i, the last term
// packed with the weights (wsum).
// Per output: sum over blocks in order of (d_w d_a) * integer sum (exact in
// int32; Q4_K's super-block sums can pass 2^24 and round in the conversion
// to F32), one F32 FMA per block, the same for any other rows or tokens of
// the call (each lane and token has its accumulator), so results do not
// depend on the row or token grouping. A block with an infinite weight scale
// gives NaN, as the reference's dequantized product does.

#if defined(TG_SIMD_AVX2)
struct q4_pack_block {
    int8_t q[8][32];  // q[j][4 r + i] = weight 4 j + i of row r (nibble - 8)
    int32_t wsum[8];  // 128 * the sum of row r's 32 weights
    float d[8];       // row r's scale
};
static_assert(sizeof(q4_pack_block) == 320, "q4 pack block size");

// dword transpose: v[r] lane j -> v[j] lane r (8 x 8 32-bit values)
inline void transpose8_epi32(__m256i v[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

// F16 scales to F32 with an infinite one made NaN: the reference's weights
// d * q of such a block are NaN (q = 0) or of both signs, so its products
// are NaN; an inf scale times the block's integer sum would be +-inf instead
inline __m256 scales_f32(const uint16_t *h) {
    const __m256 d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)h));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256 is_inf = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), d), inf, _CMP_EQ_OQ);
    return _mm256_blendv_ps(d, _mm256_set1_ps(NAN), is_inf);
}

// R (1..8) Q4_0 rows of nb blocks into nb pack blocks (rows past R: zero)
void q4_pack(const void *w, size_t ldw, int R, int64_t nb, q4_pack_block *dst) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        __m256i v[8];
        alignas(16) uint16_t dh[8];
        for (int r = 0; r < 8; r++) {
            if (r < R) {
                const tg_block_q4_0 *blk = (const tg_block_q4_0 *)((const char *)w + (size_t)r * ldw) + b;
                v[r] = _mm256_sub_epi8(nibbles(blk->qs), _mm256_set1_epi8(8));
                dh[r] = blk->d;
            } else {
                v[r] = _mm256_setzero_si256();
                dh[r] = 0;
            }
        }
        transpose8_epi32(v);
        __m256i s = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            _mm256_storeu_si256((__m256i *)dst[b].q[j], v[j]);
            s = _mm256_add_epi16(s, _mm256_maddubs_epi16(ones8, v[j]));
        }
        _mm256_storeu_si256((__m256i *)dst[b].wsum, _mm256_slli_epi32(_mm256_madd_epi16(s, ones16), 7));
        _mm256_storeu_ps(dst[b].d, scales_f32(dh));
    }
}

// lanes r < R of acc[c] to out[r + c * ldo]
template <int C> inline void store_rows(const __m256 *acc, float *out, size_t ldo, int R) {
    for (int c = 0; c < C; c++) {
        if (R == 8) {
            _mm256_storeu_ps(out + c * ldo, acc[c]);
        } else {
            alignas(32) float t[8];
            _mm256_store_ps(t, acc[c]);
            for (int r = 0; r < R; r++) out[r + c * ldo] = t[r];
        }
    }
}

// simd.h q_gemm_act for Q4_0: a row's activation bytes (the paired layout,
// quant_act.h tg_act_q4p) q -> q + 128 (as unsigned bytes: the sign bit
// flipped), once per row instead of once per broadcast
void q4_gemm_act(void *act, int64_t K) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    tg_act_q4p *a = (tg_act_q4p *)act;
    for (int64_t i = 0; i < (K / 32 + 1) / 2; i++) {
        _mm256_storeu_si256((__m256i *)a[i].lo, _mm256_xor_si256(load32(a[i].lo), flip));
        _mm256_storeu_si256((__m256i *)a[i].hi, _mm256_xor_si256(load32(a[i].hi), flip));
    }
}

// C (1..4) tokens (tg_act_q4p rows at act + c * as, after q4_gemm_act)
// against 8 packed rows; rows r < R stored at out[r + c * ldo]. Block b's
// values 4 j..4 j + 3 are bytes 16 (b % 2) + 4 j of its pair's lo (j < 4)
// or hi (j - 4).
template <int C>
void q4_gemm_tile(const q4_pack_block *p, int64_t nb, const char *act, size_t as, float *out, size_t ldo, int R) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const tg_act_q4p *a[C];
        const int h = (int)(b % 2);
        __m256i s[C];
        for (int c = 0; c < C; c++) a[c] = (const tg_act_q4p *)(act + c * as) + b / 2, s[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)p[b].q[j]);
            for (int c = 0; c < C; c++) {
                int32_t q4;
                memcpy(&q4, (j < 4 ? a[c]->lo : a[c]->hi) + 16 * h + 4 * (j % 4), 4);
                s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(_mm256_set1_epi32(q4), x));
            }
        }
        const __m256i ws = _mm256_loadu_si256((const __m256i *)p[b].wsum);
        const __m256 dw = _mm256_loadu_ps(p[b].d);
        for (int c = 0; c < C; c++) {
            const __m256i i32 = _mm256_sub_epi32(_mm256_madd_epi16(s[c], ones16), ws);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_mul_ps(dw, _mm256_set1_ps(a[c]->d[h])), acc[c]);
        }
    }
    store_rows<C>(acc, out, ldo, R);
}

// Q4_K: the nibbles are unsigned (x = d sc_j q - dmin m_j), so they are the
// unsigned side and the activations (tg_act_q8k) the signed one: a pair sum is
// at most 2 * 15 * 127 = 3810, a sub-block's 8 maddubs at most 30480 per
// int16 lane. One madd per sub-block and token multiplies the lanes by the
// row's 6-bit scale sc_j into an int32 sum over the super-block (at most
// 8 * 63 * 32 * 15 * 127 < 2^31); the mins meet the activations' sub-block
// sums in 4 more madds per super-block and token.
struct q4k_pack_block {
    uint8_t q[8][8][32];  // q[j][s][4 r + i] = value 4 s + i of sub-block j of row r
    int16_t sc[8][16];    // sc[j][2 r], sc[j][2 r + 1] = sub-block j's scale of row r
    int16_t mn[4][16];    // mn[p][2 r + h] = sub-block 2 p + h's min of row r
    float d[8], dmin[8];
};
static_assert(sizeof(q4k_pack_block) == 2496, "q4_k pack block size");

void q4k_pack(const void *w, size_t ldw, int R, int64_t nb, q4k_pack_block *dst) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; b++) {
        const tg_block_q4_k *blk[8];
        alignas(16) uint16_t dh[8], mh[8];
        for (int r = 0; r < 8; r++) {
            blk[r] = r < R ? (const tg_block_q4_k *)((const char *)w + (size_t)r * ldw) + b : nullptr;
            dh[r] = blk[r] ? blk[r]->d : 0;
            mh[r] = blk[r] ? blk[r]->dmin : 0;
            for (int j = 0; j < 8; j++) {
                int sc = 0, m = 0;
                if (blk[r]) k4_scale_min(j, blk[r]->scales, &sc, &m);
                dst[b].sc[j][2 * r] = dst[b].sc[j][2 * r + 1] = (int16_t)sc;
                dst[b].mn[j / 2][2 * r + j % 2] = (int16_t)m;
            }
        }
        for (int g = 0; g < 4; g++) {
            __m256i lo[8], hi[8];
            for (int r = 0; r < 8; r++) {
                const __m256i v = blk[r] ? load32(blk[r]->qs + 32 * g) : _mm256_setzero_si256();
                lo[r] = _mm256_and_si256(v, low4);
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            }
            transpose8_epi32(lo);
            transpose8_epi32(hi);
            for (int s = 0; s < 8; s++) {
                _mm256_storeu_si256((__m256i *)dst[b].q[2 * g][s], lo[s]);
                _mm256_storeu_si256((__m256i *)dst[b].q[2 * g + 1][s], hi[s]);
            }
        }
        _mm256_storeu_ps(dst[b].d, scales_f32(dh));
        _mm256_storeu_ps(dst[b].dmin, scales_f32(mh));
    }
}

template <int C>
void q4k_gemm_tile(const q4k_pack_block *p, int64_t nb, const char *act, size_t as, float *out, size_t ldo, int R) {
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const tg_act_q8k *a[C];
        __m256i isum[C];
        for (int c = 0; c < C; c++) a[c] = (const tg_act_q8k *)(act + c * as) + b, isum[c] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i s[C];
            for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)p[b].q[j][k]);
                for (int c = 0; c < C; c++) {
                    int32_t q4;
                    memcpy(&q4, a[c]->qs + 32 * j + 4 * k, 4);
                    s[c] = _mm256_add_epi16(s[c], _mm256_maddubs_epi16(x, _mm256_set1_epi32(q4)));
                }
            }
            const __m256i sc = _mm256_loadu_si256((const __m256i *)p[b].sc[j]);
            for (int c = 0; c < C; c++) isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s[c], sc));
        }
        const __m256 d = _mm256_loadu_ps(p[b].d), dmin = _mm256_loadu_ps(p[b].dmin);
        for (int c = 0; c < C; c++) {
            // the mins against the sub-block sums (bsums per 16, paired)
            __m256i msum = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++) {
                const int16_t *bs = a[c]->bsums + 4 * q;
                const int32_t pair = (int32_t)(uint16_t)(int16_t)(bs[0] + bs[1]) |
                                     (int32_t)((uint32_t)(uint16_t)(int16_t)(bs[2] + bs[3]) << 16);
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)p[b].mn[q]),
                                                                _mm256_set1_epi32(pair)));
            }
            const __m256 da = _mm256_set1_ps(a[c]->d);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(d, da), acc[c]);
            acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, da), acc[c]);
        }
    }
    store_rows<C>(acc, out, ldo, R);
}

size_t q_gemm_scratch(int qi, int64_t K) {
    return qi == 1 ? (size_t)(K / 32) * sizeof(q4_pack_block)
           : qi == 2 ? (size_t)(K / TG_QK_K) * sizeof(q4k_pack_block)
                     : 0;
}

// every group of up to 4 tokens against the packed rows
template <typename P, void (*Tile4)(const P *, int64_t, const char *, size_t, float *, size_t, int),
          void (*Tile3)(const P *, int64_t, const char *, size_t, float *, size_t, int),
          void (*Tile2)(const P *, int64_t, const char *, size_t, float *, size_t, int),
          void (*Tile1)(const P *, int64_t, const char *, size_t, float *, size_t, int)>
void gemm_tokens(const P *p, int64_t nb, const char *a, size_t as, int64_t N, float *out, size_t ldo, int R) {
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) Tile4(p, nb, a + n * as, as, out + n * ldo, ldo, R);
    switch (N - n) {
        case 1: Tile1(p, nb, a + n * as, as, out + n * ldo, ldo, R); break;
        case 2: Tile2(p, nb, a + n * as, as, out + n * ldo, ldo, R); break;
        case 3: Tile3(p, nb, a + n * as, as, out + n * ldo, ldo, R); break;
        default: break;
    }
}

// simd.h q_gemm (Q4_0, Q4_K): the R rows packed once into scratch, then
// every group of up to 4 tokens streams the pack
void q4_gemm(const void *w, size_t ldw, int R, const void *act, size_t as, int64_t N, int64_t nb, float *out,
             size_t ldo, void *scratch) {
    q4_pack_block *p = (q4_pack_block *)scratch;
    q4_pack(w, ldw, R, nb, p);
    gemm_tokens<q4_pack_block, q4_gemm_tile<4>, q4_gemm_tile<3>, q4_gemm_tile<2>, q4_gemm_tile<1>>(
        p, nb, (const char *)act, as, N, out, ldo, R);
}
void q4k_gemm(const void *w, size_t ldw, int R, const void *act, size_t as, int64_t N, int64_t nb, float *out,
              size_t ldo, void *scratch) {
    q4k_pack_block *p = (q4k_pack_block *)scratch;
    q4k_pack(w, ldw, R, nb, p);
    gemm_tokens<q4k_pack_block, q4k_gemm_tile<4>, q4k_gemm_tile<3>, q4k_gemm_tile<2>, q4k_gemm_tile<1>>(
        p, nb, (const char *)act, as, N, out, ldo, R);
}
#define TG_HAVE_Q_GEMM 1
#endif

#if defined(TG_SIMD_AVX512) || defined(TG_SIMD_AVX2)
// simd.h q_dequant for Q8_0 (the F32 panels' weight blocks, mul_mat.cpp)
void q8_dequant(const void *w, float *x, int64_t nb) {
    const tg_block_q8_0 *blk = (const tg_block_q8_0 *)w;
    for (int64_t b = 0; b < nb; b++, x += 32) {
        const __m256 d = _mm256_set1_ps(half_to_f32(blk[b].d));
        const __m256i q = load32(blk[b].qs);
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        _mm256_storeu_ps(x, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(x + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(x + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(x + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}
#define TG_HAVE_Q_DEQUANT 1
#endif
