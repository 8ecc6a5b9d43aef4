// test_quant_gemm.cpp - the vector tables' prompt kernels for quantized
// weights (simd.h q_gemm: many tokens, the AVX2 table's Q4_0 and Q4_K; and
// q_dequant: the F32 panels' weight blocks; simd_qgemm_impl.h):
//  - exact on integers: unit weight scales and integer activations with a
//    127 in every block (so d_a = 1 and q_a = x), for 1..8 rows, 1..9 tokens
//    and 1..9 blocks, so every output must equal the exact dot product of the
//    decoded weights; weights in a buffer of exactly R rows and a scratch of
//    exactly q_gemm_scratch bytes (a read or write past either is an ASan
//    report), outputs at a stride of R + 3 with sentinels in the gaps;
//  - the int16 pair sums at their limit: every weight -8 against every
//    activation 127 (and -127), the sums the kernel's bound was written for;
//  - through mul_mat with 5..33 tokens: the same bits as the kernel called
//    directly (so it is the path taken), and within F32 rounding of the
//    decode path (q_rows, 1 token a product), weights whole rows or a view;
//  - an infinite weight scale: NaN in its row only, as on the decode path;
//  - q_dequant bit for bit against tg_dequantize_row.
#include "cpu_fast/cpu_fast.h"
#include "cpu_fast/quant_act.h"
#include "internal.h"
#include "quant_util.h"
#include "test_util.h"

using namespace qtu;

namespace {

struct gemm_table {
    const tg_simd *t;
    int qi;
};

std::vector<gemm_table> gemm_tables() {
    const tg_simd *t[4];
    const int n = tg_simd_runnable(t, nullptr);
    std::vector<gemm_table> v;
    for (int i = 0; i < n; i++)
        for (int qi = 0; qi < 3; qi++)
            if (t[i]->q_gemm[qi]) v.push_back({t[i], qi});
    return v;
}

tg_type qtype(int qi) { return qi == 0 ? TG_TYPE_Q8_0 : qi == 1 ? TG_TYPE_Q4_0 : TG_TYPE_Q4_K; }

// unit scales (F16 1.0) in every block of R rows of nb blocks
void unit_scales(tg_type qt, std::vector<uint8_t> *w, int64_t R, int64_t nb) {
    const size_t row = tg_row_size(qt, nb * tg_type_block_size(qt)), bb = tg_type_size(qt);
    for (int64_t r = 0; r < R; r++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = &(*w)[(size_t)r * row + (size_t)b * bb];
            blk[0] = 0x00, blk[1] = 0x3c;
            if (qt == TG_TYPE_Q4_K) blk[2] = 0x00, blk[3] = 0x3c;
        }
}

// Runs the kernel on R rows x N tokens of integer activations x and checks
// every output against the exact integer dot product: equal, or within rel
// times the sum of the products' magnitudes (sums past 2^24, not exact in F32).
void check_exact(const gemm_table &g, const std::vector<uint8_t> &w, int64_t R, const std::vector<float> &x,
                 int64_t N, int64_t nb, double rel = 0) {
    const tg_type qt = qtype(g.qi);
    const int64_t K = nb * tg_type_block_size(qt);
    const size_t row = tg_row_size(qt, K), arb = g.t->q_act_bytes(g.qi, K), as = arb + 64;
    std::vector<uint8_t> act(as * (size_t)N, 0xee);
    for (int64_t n = 0; n < N; n++) {
        g.t->q_quant[g.qi](&x[(size_t)(n * K)], K, &act[(size_t)n * as]);
        if (g.t->q_gemm_act[g.qi]) g.t->q_gemm_act[g.qi](&act[(size_t)n * as], K);
    }
    const float sentinel = 1234.5f;
    const size_t ldo = (size_t)R + 3;
    std::vector<float> out(ldo * (size_t)N + 5, sentinel);
    std::vector<uint8_t> scratch(g.t->q_gemm_scratch(g.qi, K));
    std::vector<uint8_t> wr(w.begin(), w.begin() + (ptrdiff_t)(row * (size_t)R));  // exactly R rows
    g.t->q_gemm[g.qi](wr.data(), row, (int)R, act.data(), as, N, nb, out.data(), ldo, scratch.data());
    for (int64_t n = 0; n < N; n++)
        for (size_t r = 0; r < ldo; r++) {
            const float got = out[r + (size_t)n * ldo];
            if (r >= (size_t)R) {
                ASSERT_EQ(sentinel, got) << "wrote past row " << R << " at " << r << ", token " << n;
                continue;
            }
            const std::vector<double> wd = decode(qt, &wr[r * row], K);
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                want += wd[(size_t)k] * x[(size_t)(n * K + k)];
                mag += std::fabs(wd[(size_t)k] * x[(size_t)(n * K + k)]);
            }
            if (rel == 0)
                ASSERT_EQ(want, (double)got) << "row " << r << " token " << n;
            else
                ASSERT_TRUE(std::fabs(want - got) <= rel * mag)  // NaN fails
                    << "row " << r << " token " << n << ": got " << got << ", want " << want;
        }
    for (size_t i = ldo * (size_t)N; i < out.size(); i++) ASSERT_EQ(sentinel, out[i]) << "past the end";
}

class QuantGemm : public ::testing::TestWithParam<int> {
  protected:
    void SetUp() override {
        if (gemm_tables().empty()) GTEST_SKIP() << "no vector table of this CPU has a q_gemm kernel";
    }
    gemm_table table() const { return gemm_tables()[(size_t)GetParam()]; }
};

TEST_P(QuantGemm, ExactOnIntegers) {
    const gemm_table g = table();
    const tg_type qt = qtype(g.qi);
    const int64_t bs = tg_type_block_size(qt);
    std::mt19937 rng(31);
    for (int64_t nb : {1, 2, 3, 5, 9})
        for (int64_t R = 1; R <= 8; R++)
            for (int64_t N = 1; N <= 9; N++) {
                SCOPED_TRACE("blocks " + std::to_string(nb) + " rows " + std::to_string(R) + " tokens " +
                             std::to_string(N));
                const int64_t K = nb * bs;
                std::vector<uint8_t> w(tg_row_size(qt, K) * (size_t)R);
                for (auto &v : w) v = (uint8_t)rng();
                unit_scales(qt, &w, R, nb);
                std::vector<float> x((size_t)(N * K));
                for (auto &v : x) v = (float)((int)(rng() % 255) - 127);
                for (int64_t b = 0; b < (int64_t)x.size() / bs; b++)
                    x[(size_t)(b * bs + (int64_t)(rng() % (uint32_t)bs))] = rng() % 2 ? 127.0f : -127.0f;
                check_exact(g, w, R, x, N, nb);
                if (HasFatalFailure()) return;
            }
}

// The largest int16 pair sums: Q4_0 weights all -8 (nibble 0) or all 7
// against activations all 127 or all -127; Q4_K nibbles all 15 (bytes 0xff,
// its 6-bit scales and mins 63 too: sums past 2^24, so within F32 rounding;
// an int16 overflow would be off by multiples of 65536).
TEST_P(QuantGemm, PairSumsAtTheirLimit) {
    const gemm_table g = table();
    const tg_type qt = qtype(g.qi);
    const int64_t nb = 3, K = nb * tg_type_block_size(qt), R = 8, N = 6;
    for (uint8_t nib : {0x00, 0xff, 0x0f})
        for (float a : {127.0f, -127.0f}) {
            SCOPED_TRACE("weight bytes " + std::to_string(nib) + " activations " + std::to_string(a));
            std::vector<uint8_t> w(tg_row_size(qt, K) * (size_t)R, nib);
            unit_scales(qt, &w, R, nb);
            std::vector<float> x((size_t)(N * K), a);
            for (int64_t n = 1; n < N; n += 2) x[(size_t)(n * K + 3)] = -a;  // mixed signs in some tokens
            check_exact(g, w, R, x, N, nb, qt == TG_TYPE_Q4_K ? 1e-6 : 0);
        }
}

struct forced {
    explicit forced(const tg_simd *t) { tg_simd_force(t); }
    ~forced() { tg_simd_force(nullptr); }
};

// mul_mat of weights q (rows of K: with skip 1, a is a view of rows 1..M of
// M + 1 rows; views of quantized rows keep whole rows) and x (N rows of K),
// `per_call` tokens per compute (N: one product; 1: a product per token, the
// decode path); outputs {M, N}, poisoned with NaN before each compute.
std::vector<float> mul_mat_out(tg_type qt, const std::vector<uint8_t> &q, int64_t K, int64_t M, int64_t skip,
                               const std::vector<float> &x, int64_t N, int64_t per_call) {
    std::vector<float> out;
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_backend *be = tg_backend_cpu(2);
    const size_t row = tg_row_size(qt, K);
    tg_tensor *aroot = tg_new_tensor_2d(ctx, qt, K, M + skip);
    tg_tensor *a = skip ? tg_view_2d(ctx, aroot, K, M, row, row) : aroot;
    EXPECT_TRUE(a) << tg_last_error();
    tg_tensor *b = tg_new_tensor_2d(ctx, TG_TYPE_F32, K, per_call);
    tg_tensor *y = tg_mul_mat(ctx, a, b);
    tg_graph *gr = tg_graph_new(ctx);
    tg_graph_expand(gr, y);
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    EXPECT_TRUE(buf) << tg_last_error();
    if (buf) {
        EXPECT_EQ(TG_OK, tg_tensor_set(aroot, q.data(), 0, q.size())) << tg_last_error();
        for (int64_t n = 0; n < N; n += per_call) {
            tg_tensor_set(b, &x[(size_t)(n * K)], 0, (size_t)(K * per_call) * 4);
            if (be->compute_buf) memset(be->compute_buf, 0xff, be->compute_size);  // NaN
            EXPECT_EQ(TG_OK, tg_graph_compute(be, gr)) << tg_last_error();
            std::vector<float> o((size_t)tg_nelements(y));
            tg_tensor_get(y, o.data(), 0, o.size() * 4);
            out.insert(out.end(), o.begin(), o.end());
        }
        tg_buffer_free(buf);
    }
    tg_backend_free(be);
    tg_free(ctx);
    return out;
}

// The kernel called directly on the same rows and activations (q_quant and
// q_gemm_act of each token, then q_gemm 8 rows at a time): {M, N}
std::vector<float> kernel_out(const gemm_table &g, const std::vector<uint8_t> &q, int64_t K, int64_t M,
                              int64_t skip, const std::vector<float> &x, int64_t N) {
    const tg_type qt = qtype(g.qi);
    const size_t ldw = tg_row_size(qt, K), arb = g.t->q_act_bytes(g.qi, K);
    std::vector<uint8_t> act(arb * (size_t)N), scratch(g.t->q_gemm_scratch(g.qi, K));
    for (int64_t n = 0; n < N; n++) {
        g.t->q_quant[g.qi](&x[(size_t)(n * K)], K, &act[(size_t)n * arb]);
        if (g.t->q_gemm_act[g.qi]) g.t->q_gemm_act[g.qi](&act[(size_t)n * arb], K);
    }
    std::vector<float> out((size_t)(M * N), NAN);
    for (int64_t m = 0; m < M; m += 8)
        g.t->q_gemm[g.qi](&q[(size_t)(m + skip) * ldw], ldw, (int)std::min<int64_t>(8, M - m), act.data(), arb, N,
                          K / tg_type_block_size(qt), &out[(size_t)m], (size_t)M, scratch.data());
    return out;
}

// mul_mat with more than 4 tokens takes the kernel (the same bits as the
// kernel called directly: the F32 panels would differ), and each output
// agrees with the decode path's (q_rows, one token per product) up to the
// F32 rounding of the same integer sums. Weights a whole tensor or a view of
// its rows 1..; b small (quantized by every thread) and large (split over
// the threads).
TEST_P(QuantGemm, MulMatTakesItAndAgreesWithTheDecodePath) {
    const gemm_table g = table();
    forced use(g.t);
    const tg_type qt = qtype(g.qi);
    std::mt19937 rng(77);
    struct shape {
        int64_t blocks, M, N, skip;
    };
    const int64_t bs = tg_type_block_size(qt);
    const shape shapes[] = {{7 * 32 / bs + 1, 8, 5, 0}, {7 * 32 / bs + 1, 13, 8, 1}, {7 * 32 / bs + 1, 70, 33, 0},
                            {1024 / bs, 21, 33, 0},  // K N > 16384: b quantized split over the threads
                            {2, 9, 6, 1}};
    for (const shape &sh : shapes) {
        const int64_t K = sh.blocks * bs, M = sh.M, N = sh.N;
        SCOPED_TRACE("K " + std::to_string(K) + " rows " + std::to_string(M) + " tokens " + std::to_string(N) +
                     (sh.skip ? " a view" : ""));
        const std::vector<uint8_t> q = quantized(qt, weights(rng, K, M + sh.skip));
        const std::vector<float> x = tgt::random_floats(rng, (size_t)(K * N));
        const std::vector<float> many = mul_mat_out(qt, q, K, M, sh.skip, x, N, N);
        const std::vector<float> one = mul_mat_out(qt, q, K, M, sh.skip, x, N, 1);
        const std::vector<float> direct = kernel_out(g, q, K, M, sh.skip, x, N);
        ASSERT_EQ(many.size(), (size_t)(M * N));
        ASSERT_EQ(one.size(), (size_t)(M * N));
        EXPECT_EQ(0, memcmp(many.data(), direct.data(), many.size() * 4)) << "mul_mat did not take q_gemm";
        for (size_t i = 0; i < many.size(); i++) {
            const int64_t m = (int64_t)i % M, n = (int64_t)i / M;
            const std::vector<double> wd = decode(qt, &q[(size_t)(m + sh.skip) * tg_row_size(qt, K)], K);
            double mag = 0;  // sum |w x|: the scale of the F32 rounding of either order
            for (int64_t k = 0; k < K; k++) mag += std::fabs(wd[(size_t)k] * x[(size_t)(n * K + k)]);
            ASSERT_TRUE(std::fabs((double)many[i] - one[i]) <= 1e-5 * mag)  // NaN fails
                << "output " << i << ": many tokens " << many[i] << ", one token " << one[i];
        }
    }
}

// A block with an infinite weight scale: its row is NaN for every token, as
// in the dequantized product (whose weights d q are NaN at q = 0 and of both
// signs), on the prompt path and on the decode path, for d and Q4_K's dmin;
// the other rows finite. (Until session 34 the decode path's Q4_K gave +-inf
// for an infinite dmin: its mins term is dmin d_a times an integer sum.)
TEST_P(QuantGemm, InfiniteWeightScaleGivesNaN) {
    const gemm_table g = table();
    forced use(g.t);
    const tg_type qt = qtype(g.qi);
    std::mt19937 rng(9);
    const int64_t bs = tg_type_block_size(qt), K = (qt == TG_TYPE_Q4_K ? 2 : 5) * bs, M = 11, N = 6;
    for (int which = 0; which < (qt == TG_TYPE_Q4_K ? 2 : 1); which++) {  // Q4_K: d, then dmin
        SCOPED_TRACE(which ? "dmin inf" : "d inf");
        std::vector<uint8_t> q = quantized(qt, weights(rng, K, M));
        const size_t row = tg_row_size(qt, K), blk = tg_type_size(qt);
        uint8_t *d = &q[3 * row + blk + 2 * (size_t)which];  // row 3, block 1
        d[0] = 0x00, d[1] = 0x7c;  // +inf
        const std::vector<float> x = tgt::random_floats(rng, (size_t)(K * N));
        for (int64_t per_call : {N, (int64_t)1}) {
            const std::vector<float> out = mul_mat_out(qt, q, K, M, 0, x, N, per_call);
            ASSERT_EQ(out.size(), (size_t)(M * N));
            for (int64_t n = 0; n < N; n++)
                for (int64_t m = 0; m < M; m++)
                    EXPECT_EQ(m == 3, std::isnan(out[(size_t)(n * M + m)]))
                        << "row " << m << " token " << n << " (" << per_call << " per product): " << out[(size_t)(n * M + m)];
        }
    }
}

// q_dequant (the F32 panels' weight blocks) gives tg_dequantize_row's bits:
// random blocks with every scale bit pattern but NaN's (subnormal and inf
// scales included), outputs poisoned, a sentinel after the last.
TEST(QuantDequant, SameBitsAsTheReference) {
    const tg_simd *t[4];
    const int n = tg_simd_runnable(t, nullptr);
    int checked = 0;
    std::mt19937 rng(5);
    for (int i = 0; i < n; i++)
        for (int qi = 0; qi < 3; qi++) {
            if (!t[i]->q_dequant[qi]) continue;
            const tg_type qt = qtype(qi);
            SCOPED_TRACE(std::string(t[i]->name) + " " + tg_type_name(qt));
            for (int64_t nb : {1, 2, 7, 64}) {
                const int64_t K = nb * tg_type_block_size(qt);
                std::vector<uint8_t> w(tg_row_size(qt, K));
                for (auto &v : w) v = (uint8_t)rng();
                const size_t bb = tg_type_size(qt);
                for (int64_t b = 0; b < nb; b++)
                    if ((w[(size_t)b * bb + 1] & 0x7c) == 0x7c) w[(size_t)b * bb] = 0;  // inf, not NaN
                std::vector<float> want((size_t)K), got((size_t)K + 1, NAN);
                got[(size_t)K] = 1234.5f;
                tg_dequantize_row(qt, w.data(), want.data(), K);
                t[i]->q_dequant[qi](w.data(), got.data(), nb);
                ASSERT_EQ(0, memcmp(want.data(), got.data(), (size_t)K * 4)) << nb << " blocks";
                ASSERT_EQ(1234.5f, got[(size_t)K]) << "wrote past the row";
                checked++;
            }
        }
    if (!checked) GTEST_SKIP() << "no vector table of this CPU has a q_dequant entry";
}

INSTANTIATE_TEST_SUITE_P(Tables, QuantGemm, ::testing::Range(0, std::max(1, (int)gemm_tables().size())),
                         [](const ::testing::TestParamInfo<int> &i) {
                             const std::vector<gemm_table> v = gemm_tables();
                             if (v.empty()) return std::string("none");
                             const gemm_table &g = v[(size_t)i.param];
                             return std::string(g.t->name) + "_" + tg_type_name(qtype(g.qi));
                         });

}  // namespace
