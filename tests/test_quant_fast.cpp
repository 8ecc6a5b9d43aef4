// test_quant_fast.cpp - the CPU fast paths for quantized weights
// (src/cpu_fast/mul_mat_q.cpp, the q_quant / q_rows kernels of
// simd_quant_impl.h, get_rows):
//  - q_rows alone on every table: unit scales and integer activations, so
//    every output is an exact integer (the integer sums are exact), for 1..9
//    rows, 1..4 tokens, 1..9 blocks, with sentinels around the outputs;
//  - mul_mat with Q8_0/Q4_0/Q4_K weights (N <= 4, and any N with the VNNI
//    table: the integer path of mul_mat_q.cpp; N > 4 otherwise: the AVX2
//    q_gemm kernels for Q4_0 / Q4_K, else the F32 panels with dequantized
//    weight blocks), on
//    every vector table this CPU runs, at odd sizes (K a multiple of the block but not of the vector
//    width, M odd, N 1..17), b contiguous, strided, transposed, F16, broadcast
//    over dims 2/3, a as a whole-row view; 1 to 4 threads;
//  - each output against the float64 product of the DEQUANTIZED weights (an
//    independent decoder), within the bound of the activations' 8-bit
//    rounding: sum over blocks of (absmax_block(b) / 127 / 2) * sum |w| over
//    the block (docs/ops.md), plus F32 slack; the relative error must also be
//    small (the bound is not vacuous) and the fast path must be taken;
//  - outputs poisoned with NaN before each run; NaN in b reaches its column only;
//  - fast results bit-identical for 1..4 threads, and products of one b
//    run as one job (2+ threads) bit-identical to each alone; get_rows
//    bit-identical to the reference.
#include "cpu_fast/cpu_fast.h"
#include "cpu_fast/quant_act.h"
#include "internal.h"
#include "quant_util.h"
#include "test_util.h"

using namespace qtu;

namespace {

std::vector<const tg_simd *> tables() {
    const tg_simd *t[4];
    const int n = tg_simd_runnable(t, nullptr);
    return std::vector<const tg_simd *>(t, t + n);
}
struct forced {
    explicit forced(const tg_simd *t) { tg_simd_force(t); }
    ~forced() { tg_simd_force(nullptr); }
};

enum class blay { contig, strided, transposed, f16 };

struct mm_case {
    tg_type t;
    int64_t K, M, N, B2;
    blay bl;
    bool a_view;  // a is rows 1.. of a larger tensor
};

struct mm_result {
    std::vector<float> out;
    std::vector<double> ref, bound, mag;  // mag: sum_k |w x|
    bool fast_taken = false;
};

// float64 oracle and bound for out[m, n, i2] from the decoded weights w {K, M}
// and the exact b values x {K, N, B2}
void oracle(const mm_case &s, const std::vector<double> &w, const std::vector<double> &x, mm_result *r) {
    const int64_t bs = s.t == TG_TYPE_Q4_K ? 256 : 32;
    for (int64_t i2 = 0; i2 < s.B2; i2++)
        for (int64_t n = 0; n < s.N; n++)
            for (int64_t m = 0; m < s.M; m++) {
                double acc = 0, bound = 0, mag = 0;
                const double *xr = &x[(size_t)((i2 * s.N + n) * s.K)], *wr = &w[(size_t)(m * s.K)];
                for (int64_t k0 = 0; k0 < s.K; k0 += bs) {
                    double amax = 0, wsum = 0;
                    for (int64_t k = k0; k < k0 + bs; k++) {
                        acc += wr[k] * xr[k];
                        amax = std::max(amax, std::fabs(xr[k]));
                        wsum += std::fabs(wr[k]);
                        mag += std::fabs(wr[k] * xr[k]);
                    }
                    bound += amax / 127 / 2 * wsum;
                }
                r->ref.push_back(acc);
                r->mag.push_back(mag);
                r->bound.push_back(bound * 1.001 + 1e-5 * mag + 1e-30);
            }
}

mm_result run_case(const mm_case &s, int nth, bool fast, uint32_t seed) {
    std::mt19937 rng(seed);
    mm_result r;
    const int64_t arows = s.M + (s.a_view ? 1 : 0);
    const std::vector<float> wf = weights(rng, s.K, arows);
    const std::vector<uint8_t> q = quantized(s.t, wf);
    const size_t row = tg_row_size(s.t, s.K);
    const std::vector<double> wdec = decode(s.t, q.data() + (s.a_view ? row : 0), s.K * s.M);

    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_backend *be = tg_backend_cpu(nth);
    tg_tensor *aroot = tg_new_tensor_2d(ctx, s.t, s.K, arows);
    tg_tensor *a = s.a_view ? tg_view_2d(ctx, aroot, s.K, s.M, row, row) : aroot;
    // b: values exact in its type, stored in the chosen layout
    const tg_type bt = s.bl == blay::f16 ? TG_TYPE_F16 : TG_TYPE_F32;
    std::vector<double> x = opu::rand_vals(rng, bt, s.K * s.N * s.B2, -2.0, 2.0);
    tg_tensor *broot, *b;
    std::vector<uint8_t> bbytes;
    const size_t es = tg_type_size(bt);
    if (s.bl == blay::transposed) {
        broot = tg_new_tensor_3d(ctx, bt, s.N, s.K, s.B2);
        b = tg_transpose(ctx, broot);
        bbytes.resize(tg_nbytes(broot));
        for (int64_t i2 = 0; i2 < s.B2; i2++)
            for (int64_t n = 0; n < s.N; n++)
                for (int64_t k = 0; k < s.K; k++)
                    opu::store(bt, &bbytes[(size_t)((i2 * s.K + k) * s.N + n) * es], x[(size_t)((i2 * s.N + n) * s.K + k)]);
    } else {
        const int64_t pad = s.bl == blay::strided ? 5 : 0;
        broot = tg_new_tensor_3d(ctx, bt, s.K + pad, s.N, s.B2);
        b = pad ? tg_view_3d(ctx, broot, s.K, s.N, s.B2, tg_nb(broot, 1), tg_nb(broot, 2), 0) : broot;
        bbytes.assign(tg_nbytes(broot), 0xff);  // gaps NaN
        for (int64_t i = 0; i < s.N * s.B2; i++)
            for (int64_t k = 0; k < s.K; k++)
                opu::store(bt, &bbytes[(size_t)(i * (s.K + pad) + k) * es], x[(size_t)(i * s.K + k)]);
    }
    tg_tensor *y = tg_mul_mat(ctx, a, b);
    EXPECT_TRUE(y) << tg_last_error();
    if (!y) return r;
    tg_graph *g = tg_graph_new(ctx);
    tg_graph_expand(g, y);
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    EXPECT_TRUE(buf) << tg_last_error();
    EXPECT_EQ(TG_OK, tg_tensor_set(aroot, q.data(), 0, q.size()));
    EXPECT_EQ(TG_OK, tg_tensor_set(broot, bbytes.data(), 0, bbytes.size()));
    tg_backend_cpu_set_fast(be, fast);
    r.fast_taken = tg_op_get(TG_OP_MUL_MAT).cpu_fast->plan(y, nth) >= 0;
    // poison the planner's buffer: an output left unwritten stays NaN
    EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
    if (be->compute_buf) memset(be->compute_buf, 0xff, be->compute_size);
    EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
    r.out.assign((size_t)tg_nelements(y), 0.0f);
    EXPECT_EQ(TG_OK, tg_tensor_get(y, r.out.data(), 0, r.out.size() * 4)) << tg_last_error();
    oracle(s, wdec, x, &r);
    tg_buffer_free(buf);
    tg_backend_free(be);
    tg_free(ctx);
    return r;
}

std::string name_of(const mm_case &s) {
    const char *bl[] = {"contig", "strided", "transposed", "f16"};
    return std::string(tg_type_name(s.t)) + " K" + std::to_string(s.K) + " M" + std::to_string(s.M) + " N" +
           std::to_string(s.N) + " B2 " + std::to_string(s.B2) + " b " + bl[(int)s.bl] + (s.a_view ? " a view" : "");
}

std::vector<mm_case> cases() {
    std::vector<mm_case> v;
    for (tg_type t : k_qtypes) {
        const int64_t bs = tg_type_block_size(t);
        const int64_t Ks[] = {bs, 3 * bs, t == TG_TYPE_Q4_K ? 5 * bs : 9 * bs};
        int i = 0;
        for (int64_t K : Ks)
            for (int64_t N : {1, 2, 3, 4, 5, 8, 17}) {
                const blay bl = (blay)(i % 4);
                v.push_back({t, K, i % 3 == 0 ? 1 : i % 3 == 1 ? 7 : 67, N, i % 5 == 4 ? 2 : 1, bl, i % 6 == 5});
                i++;
            }
        // a b of more than 16384 values: quantized split over the threads (a
        // smaller one by every thread for itself)
        v.push_back({t, 4096, 13, 4, 2, blay::f16, false});
        v.push_back({t, 4096, 6, 3, 2, blay::strided, true});
    }
    return v;
}

class QuantFast : public ::testing::TestWithParam<int> {
  protected:
    const tg_simd *table() const { return tables()[(size_t)GetParam()]; }
};

TEST_P(QuantFast, MulMatWithinActivationBoundAndThreadIndependent) {
    forced use(table());
    uint32_t seed = 100;
    for (const mm_case &s : cases()) {
        SCOPED_TRACE(name_of(s));
        seed++;
        mm_result first;
        for (int nth = 1; nth <= 4; nth++) {
            SCOPED_TRACE("threads " + std::to_string(nth));
            const mm_result r = run_case(s, nth, true, seed);
            ASSERT_TRUE(r.fast_taken) << "fast path refused";
            ASSERT_EQ(r.ref.size(), r.out.size());
            size_t bad = 0, first_bad = 0;
            for (size_t i = 0; i < r.out.size(); i++) {
                const double err = std::fabs((double)r.out[i] - r.ref[i]);
                if (!(err <= r.bound[i]) && bad++ == 0) first_bad = i;  // NaN fails
            }
            EXPECT_EQ(0u, bad) << "first at " << first_bad << ": got " << r.out[first_bad] << ", want "
                               << r.ref[first_bad] << " within " << r.bound[first_bad];
            // and the error is small against the terms' magnitudes (8-bit rounding: ~1/254 per term at worst)
            double err = 0, mag = 0;
            for (size_t i = 0; i < r.out.size(); i++) err += std::fabs(r.out[i] - r.ref[i]), mag += r.mag[i];
            EXPECT_LT(err, 0.004 * mag) << "activation rounding larger than expected";
            if (nth == 1)
                first = r;
            else
                EXPECT_TRUE(first.out == r.out) << "fast results differ between 1 and " << nth << " threads";
        }
    }
}

// The reference path of the same cases is the dequantized product itself.
TEST(QuantFastRef, ReferenceMatchesOracle) {
    uint32_t seed = 500;
    int i = 0;
    for (const mm_case &s : cases()) {
        if (i++ % 4) continue;  // a quarter of the cases: the reference is slow
        SCOPED_TRACE(name_of(s));
        const mm_result r = run_case(s, 2, false, seed++);
        std::vector<double> got(r.out.begin(), r.out.end());
        EXPECT_TRUE(opu::close(got, r.ref, 1e-6));
    }
}

// A NaN in b poisons its own column (its activation block's scale) only:
// 3 tokens (q_rows) and 6, 9 (q_gemm where the table has it, else the panels).
TEST_P(QuantFast, NaNInBReachesItsColumnOnly) {
    forced use(table());
    for (tg_type t : k_qtypes)
        for (int64_t N : {3, 6, 9}) {
            SCOPED_TRACE(std::string(tg_type_name(t)) + " tokens " + std::to_string(N));
            std::mt19937 rng(3);
            const int64_t K = tg_type_block_size(t) * 2, M = 9;
            const std::vector<uint8_t> q = quantized(t, weights(rng, K, M));
            std::vector<float> x = tgt::random_floats(rng, (size_t)(K * N));
            x[(size_t)(1 * K + 5)] = NAN;  // column 1
            tg_init_params ip = {1 << 20, nullptr, true};
            tg_context *ctx = tg_init(ip);
            tg_backend *be = tg_backend_cpu(2);
            tg_tensor *a = tg_new_tensor_2d(ctx, t, K, M), *b = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, N);
            tg_tensor *y = tg_mul_mat(ctx, a, b);
            tg_graph *g = tg_graph_new(ctx);
            tg_graph_expand(g, y);
            tg_buffer *buf = tg_backend_alloc(be, ctx);
            tg_tensor_set(a, q.data(), 0, q.size());
            tg_tensor_set(b, x.data(), 0, x.size() * 4);
            ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
            std::vector<float> out((size_t)(M * N));
            tg_tensor_get(y, out.data(), 0, out.size() * 4);
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++) EXPECT_EQ(n == 1, std::isnan(out[(size_t)(n * M + m)])) << m << " " << n;
            tg_buffer_free(buf);
            tg_backend_free(be);
            tg_free(ctx);
        }
}

// The q_rows kernels alone. Weights: random quants with unit scales (F16
// 1.0; Q4_K d = dmin = 1, random 6-bit sub-block scales and mins);
// activations: integers in [-127, 127] with a 127 in every block, so d_a = 1
// and q_a = x. Every product and partial sum is then an integer far below
// 2^24, exact in F32 too: each output must equal the exact dot product of
// the decoded weights. R 1..9 (passes of 4 rows and single rows), C 1..4,
// whole and partial groups of blocks; the weights sit in a buffer of exactly
// R rows (a read past it is an ASan report), outputs at a stride of R + 3
// with sentinels in the gaps and after the last.
TEST_P(QuantFast, RowsKernelExactOnIntegers) {
    const tg_simd *t = table();
    std::mt19937 rng(11);
    const float sentinel = 1234.5f;
    for (tg_type qt : k_qtypes) {
        SCOPED_TRACE(tg_type_name(qt));
        const int qi = tg_simd_qindex(qt);
        const int64_t bs = tg_type_block_size(qt), bb = (int64_t)tg_type_size(qt);
        const std::vector<int64_t> nbs = qt == TG_TYPE_Q4_K ? std::vector<int64_t>{1, 2, 3}
                                                            : std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 9};
        for (int64_t nb : nbs)
            for (int64_t R = 1; R <= 9; R++)
                for (int C = 1; C <= 4; C++) {
                    SCOPED_TRACE("blocks " + std::to_string(nb) + " rows " + std::to_string(R) + " tokens " +
                                 std::to_string(C));
                    const int64_t K = nb * bs;
                    const size_t row = tg_row_size(qt, K);
                    std::vector<uint8_t> w(row * (size_t)R);
                    for (auto &x : w) x = (uint8_t)rng();
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t b = 0; b < nb; b++) {
                            uint8_t *blk = &w[(size_t)r * row + (size_t)(b * bb)];
                            blk[0] = 0x00, blk[1] = 0x3c;  // 1.0
                            if (qt == TG_TYPE_Q4_K) blk[2] = 0x00, blk[3] = 0x3c;
                        }
                    std::vector<float> x((size_t)(C * K));
                    for (auto &v : x) v = (float)((int)(rng() % 255) - 127);
                    for (int64_t b = 0; b < (int64_t)x.size() / bs; b++)
                        x[(size_t)(b * bs + (int64_t)(rng() % (uint32_t)bs))] = rng() % 2 ? 127.0f : -127.0f;
                    const size_t arb = t->q_act_bytes(qi, K), as = arb + 64;
                    std::vector<uint8_t> act(as * (size_t)C, 0xee);
                    for (int c = 0; c < C; c++) t->q_quant[qi](&x[(size_t)(c * K)], K, &act[(size_t)c * as]);
                    const size_t ldo = (size_t)R + 3;
                    std::vector<float> out(ldo * (size_t)C + 5, sentinel);
                    t->q_rows[qi](w.data(), row, R, act.data(), as, nb, out.data(), ldo, C);
                    for (int c = 0; c < C; c++)
                        for (size_t r = 0; r < ldo; r++) {
                            const float got = out[r + (size_t)c * ldo];
                            if (r >= (size_t)R) {
                                ASSERT_EQ(sentinel, got) << "wrote past row " << R << " at " << r << ", token " << c;
                                continue;
                            }
                            const std::vector<double> wr = decode(qt, &w[r * row], K);
                            double want = 0;
                            for (int64_t k = 0; k < K; k++) want += wr[(size_t)k] * x[(size_t)(c * K + k)];
                            ASSERT_EQ(want, (double)got) << "row " << r << " token " << c;
                        }
                    for (size_t i = ldo * (size_t)C; i < out.size(); i++) ASSERT_EQ(sentinel, out[i]) << "past the end";
                }
    }
}

// Sparse weights against activations of one sign: each row has one nonzero
// weight (Q4_0: every other nibble 8, Q8_0: 0) over 80 blocks of random F16
// scales, the activations integers 0..127 with a 127 per block (d_a = 1, so
// q_a = x exactly). The exact product is one term, d_w (n - 8) x; the kernel
// must give it within F32 rounding (1e-6 relative). A kernel that takes a
// Q4_0 offset back in F32 (d_w d_a sum n q_a minus d_w 8 d_a sum q_a, two
// large sums that cancel) was ~1e-4 off here (session 34's review).
TEST_P(QuantFast, RowsKernelSparseWeightsExact) {
    const tg_simd *t = table();
    std::mt19937 rng(29);
    for (tg_type qt : {TG_TYPE_Q4_0, TG_TYPE_Q8_0}) {
        SCOPED_TRACE(tg_type_name(qt));
        const int qi = tg_simd_qindex(qt);
        const int64_t nb = 80, K = nb * 32, R = 5;
        const size_t row = tg_row_size(qt, K), bb = tg_type_size(qt);
        std::vector<uint8_t> w(row * (size_t)R);
        std::vector<int64_t> at((size_t)R);
        std::vector<int> val((size_t)R);
        for (int64_t r = 0; r < R; r++) {
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = &w[(size_t)r * row + (size_t)(b * bb)];
                const uint16_t h = tg_fp32_to_fp16(0.01f + 0.09f * (float)(rng() % 1000) / 1000.0f);
                memcpy(blk, &h, 2);
                memset(blk + 2, qt == TG_TYPE_Q4_0 ? 0x88 : 0x00, bb - 2);
            }
            at[(size_t)r] = (int64_t)(rng() % (uint32_t)K);
            val[(size_t)r] = qt == TG_TYPE_Q4_0 ? (int)(rng() % 15) : (int)(rng() % 255) - 127;  // nibble 0..14 / q
            if (qt == TG_TYPE_Q4_0 && val[(size_t)r] >= 8) val[(size_t)r]++;  // not 8: nonzero
            if (qt == TG_TYPE_Q8_0 && val[(size_t)r] == 0) val[(size_t)r] = 1;
            const int64_t b = at[(size_t)r] / 32, i = at[(size_t)r] % 32;
            uint8_t *q = &w[(size_t)r * row + (size_t)(b * bb) + 2];
            if (qt == TG_TYPE_Q4_0)
                q[i % 16] = (uint8_t)(i < 16 ? (q[i % 16] & 0xf0) | val[(size_t)r] : (q[i % 16] & 0x0f) | val[(size_t)r] << 4);
            else
                q[i] = (uint8_t)(int8_t)val[(size_t)r];
        }
        for (int C = 1; C <= 4; C++) {
            SCOPED_TRACE("tokens " + std::to_string(C));
            std::vector<float> x((size_t)(C * K));
            for (auto &v : x) v = (float)(rng() % 128);
            for (int64_t b = 0; b < (int64_t)x.size() / 32; b++) x[(size_t)(b * 32 + (int64_t)(rng() % 32))] = 127.0f;
            const size_t arb = t->q_act_bytes(qi, K);
            std::vector<uint8_t> act(arb * (size_t)C, 0xee);
            for (int c = 0; c < C; c++) t->q_quant[qi](&x[(size_t)(c * K)], K, &act[(size_t)c * arb]);
            std::vector<float> out((size_t)(R * C), NAN);
            t->q_rows[qi](w.data(), row, R, act.data(), arb, nb, out.data(), (size_t)R, C);
            for (int c = 0; c < C; c++)
                for (int64_t r = 0; r < R; r++) {
                    const int64_t k = at[(size_t)r], b = k / 32;
                    uint16_t h;
                    memcpy(&h, &w[(size_t)r * row + (size_t)(b * bb)], 2);
                    const double want = (double)tg_fp16_to_fp32(h) * (qt == TG_TYPE_Q4_0 ? val[(size_t)r] - 8 : val[(size_t)r]) *
                                        x[(size_t)(c * K + k)];
                    const double got = out[(size_t)(r + c * R)];
                    EXPECT_TRUE(std::fabs(got - want) <= 1e-6 * std::fabs(want) + 1e-30)  // NaN fails
                        << "row " << r << " token " << c << ": " << got << ", want " << want;
                }
        }
    }
}

// An infinite F16 weight scale (d; Q4_K's dmin too) in one block of a row:
// that row's outputs are NaN for every token (the dequantized weights are NaN
// or infinite of both signs), the other rows finite; every type, 1..4 tokens,
// the block first, in the middle and last (Q4_0's pairs: either half).
TEST_P(QuantFast, RowsKernelInfiniteScaleGivesNaN) {
    const tg_simd *t = table();
    std::mt19937 rng(31);
    for (tg_type qt : k_qtypes) {
        const int qi = tg_simd_qindex(qt);
        const int64_t bs = tg_type_block_size(qt), nb = qt == TG_TYPE_Q4_K ? 3 : 7, K = nb * bs, R = 3;
        const size_t row = tg_row_size(qt, K), bb = tg_type_size(qt);
        for (int which = 0; which < (qt == TG_TYPE_Q4_K ? 2 : 1); which++)
            for (int64_t blk : {(int64_t)0, nb / 2, nb - 1}) {
                SCOPED_TRACE(std::string(tg_type_name(qt)) + (which ? " dmin" : " d") + " block " + std::to_string(blk));
                std::vector<float> wf((size_t)(R * K));
                for (auto &v : wf) v = (float)((int)(rng() % 2001) - 1000) / 1000.0f;
                std::vector<uint8_t> w(row * (size_t)R);
                ASSERT_EQ(tg_quantize(qt, wf.data(), w.data(), R * K), TG_OK);
                uint8_t *d = &w[1 * row + (size_t)blk * bb + 2 * (size_t)which];  // row 1
                d[0] = 0x00, d[1] = (uint8_t)(rng() % 2 ? 0x7c : 0xfc);           // +inf or -inf
                for (int C = 1; C <= 4; C++) {
                    std::vector<float> x((size_t)(C * K));
                    for (auto &v : x) v = (float)((int)(rng() % 2001) - 1000) / 1000.0f;
                    const size_t arb = t->q_act_bytes(qi, K);
                    std::vector<uint8_t> act(arb * (size_t)C);
                    for (int c = 0; c < C; c++) t->q_quant[qi](&x[(size_t)(c * K)], K, &act[(size_t)c * arb]);
                    std::vector<float> out((size_t)(R * C), 0.0f);
                    t->q_rows[qi](w.data(), row, R, act.data(), arb, nb, out.data(), (size_t)R, C);
                    for (int c = 0; c < C; c++)
                        for (int64_t r = 0; r < R; r++)
                            EXPECT_EQ(r == 1, std::isnan(out[(size_t)(r + c * R)]))
                                << "row " << r << " token " << c << ": " << out[(size_t)(r + c * R)];
                }
            }
    }
}

// Quantized products of one F32 b back to back (views between them) run as
// one job with 2+ threads (b quantized once per thread; backend_cpu.cpp):
// bit-identical to 1 thread, where each runs alone; a member of another type
// ends the group.
TEST_P(QuantFast, GroupedProductsEqualAlone) {
    forced use(table());
    const int64_t K = 768;  // whole Q4_K blocks
    for (int64_t N : {1, 3, 4}) {
        SCOPED_TRACE("tokens " + std::to_string(N));
        std::vector<std::vector<float>> first;
        for (int nth = 1; nth <= 4; nth++) {
            std::mt19937 rng(21);
            tg_init_params ip = {1 << 20, nullptr, true};
            tg_context *ctx = tg_init(ip);
            tg_backend *be = tg_backend_cpu(nth);
            tg_tensor *x = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, N);
            tg_tensor *b = tg_scale(ctx, x, 0.5f);
            const tg_type types[] = {TG_TYPE_Q4_0, TG_TYPE_Q4_0, TG_TYPE_Q4_0, TG_TYPE_Q8_0, TG_TYPE_Q8_0, TG_TYPE_Q4_K};
            const int64_t rows[] = {70, 33, 129, 40, 21, 50};
            std::vector<tg_tensor *> w, y;
            tg_graph *g = tg_graph_new(ctx);
            for (int i = 0; i < 6; i++) {
                w.push_back(tg_new_tensor_2d(ctx, types[i], K, rows[i]));
                y.push_back(tg_mul_mat(ctx, w.back(), b));
                // a view node between the products, as the models' reshapes of q and k
                tg_tensor *view = tg_reshape_2d(ctx, y.back(), N, rows[i]);
                ASSERT_TRUE(view) << tg_last_error();
                ASSERT_EQ(TG_OK, tg_graph_expand(g, view)) << tg_last_error();
            }
            tg_buffer *buf = tg_backend_alloc(be, ctx);
            ASSERT_TRUE(buf) << tg_last_error();
            for (int i = 0; i < 6; i++) {
                const std::vector<uint8_t> q = quantized(types[i], weights(rng, K, rows[i]));
                tg_tensor_set(w[(size_t)i], q.data(), 0, q.size());
            }
            const std::vector<float> xv = tgt::random_floats(rng, (size_t)(K * N));
            tg_tensor_set(x, xv.data(), 0, xv.size() * 4);
            ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
            if (be->compute_buf) memset(be->compute_buf, 0xff, be->compute_size);
            ASSERT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
            for (int i = 0; i < 6; i++) {
                std::vector<float> out((size_t)(rows[i] * N));
                tg_tensor_get(y[(size_t)i], out.data(), 0, out.size() * 4);
                for (float v : out) ASSERT_FALSE(std::isnan(v)) << "product " << i << ", " << nth << " threads";
                if (nth == 1)
                    first.push_back(out);
                else
                    EXPECT_TRUE(first[(size_t)i] == out) << "product " << i << " differs with " << nth << " threads";
            }
            tg_buffer_free(buf);
            tg_backend_free(be);
            tg_free(ctx);
        }
    }
}

TEST(QuantFastRows, GetRowsBitIdenticalToReference) {
    std::mt19937 rng(8);
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t E = tg_type_block_size(t) * 3, V = 13;
        const std::vector<uint8_t> q = quantized(t, weights(rng, E, V));
        const std::vector<double> deq = decode(t, q.data(), E * V);
        const int32_t ids[10] = {12, 0, 5, 5, 1, 7, 11, 2, 3, 9};
        std::vector<float> first;
        for (int nth = 1; nth <= 4; nth++)
            for (bool fast : {false, true}) {
                tg_init_params ip = {1 << 20, nullptr, true};
                tg_context *ctx = tg_init(ip);
                tg_backend *be = tg_backend_cpu(nth);
                tg_tensor *a = tg_new_tensor_2d(ctx, t, E, V), *id = tg_new_tensor_2d(ctx, TG_TYPE_I32, 5, 2);
                tg_tensor *y = tg_get_rows(ctx, a, id);
                tg_graph *g = tg_graph_new(ctx);
                tg_graph_expand(g, y);
                tg_buffer *buf = tg_backend_alloc(be, ctx);
                tg_tensor_set(a, q.data(), 0, q.size());
                tg_tensor_set(id, ids, 0, sizeof ids);
                tg_backend_cpu_set_fast(be, fast);
                EXPECT_GE(tg_op_get(TG_OP_GET_ROWS).cpu_fast->plan(y, nth), 0);
                ASSERT_EQ(TG_OK, tg_graph_compute(be, g));
                if (be->compute_buf) memset(be->compute_buf, 0xff, be->compute_size);
                ASSERT_EQ(TG_OK, tg_graph_compute(be, g));
                std::vector<float> out((size_t)(E * 10));
                tg_tensor_get(y, out.data(), 0, out.size() * 4);
                for (int r = 0; r < 10; r++)
                    for (int64_t k = 0; k < E; k++)
                        ASSERT_EQ((float)deq[(size_t)(ids[r] * E + k)], out[(size_t)(r * E + k)]) << r << " " << k;
                tg_buffer_free(buf);
                tg_backend_free(be);
                tg_free(ctx);
            }
    }
}

INSTANTIATE_TEST_SUITE_P(Tables, QuantFast, ::testing::Range(0, (int)tables().size()),
                         [](const ::testing::TestParamInfo<int> &i) { return std::string(tables()[(size_t)i.param]->name); });

}  // namespace
