// test_quant.cpp - the quantized types Q8_0, Q4_0, Q4_K (host side):
//  - type facts (names, block sizes, row sizes);
//  - tg_quantize against float64 within each type's bound, per element; the
//    bytes decoded by an independent float64 decoder of the layout
//    (quant_util.h) equal tg_dequantize; dequantize -> quantize round trips;
//    NaN/inf blocks; argument errors;
//  - tensors: ne[0] not a multiple of the block refused, strides and sizes in
//    blocks, whole-row views / reshape / permute, other views refused;
//  - ops: every op but mul_mat's a and get_rows' a refuses quantized inputs;
//    cont / cpy of quantized bytes; the reference get_rows and mul_mat
//    against float64 of the dequantized weights;
//  - GGUF: quantized tensors written and read back byte for byte.
#include <cmath>

#include "internal.h"  // tg_backend_cpu_set_fast
#include "quant_util.h"
#include "test_util.h"

using namespace qtu;
using opu::fails;

namespace {

TEST(Quant, TypeFacts) {
    EXPECT_STREQ("q8_0", tg_type_name(TG_TYPE_Q8_0));
    EXPECT_STREQ("q4_0", tg_type_name(TG_TYPE_Q4_0));
    EXPECT_STREQ("q4_k", tg_type_name(TG_TYPE_Q4_K));
    EXPECT_EQ(7, (int)TG_TYPE_COUNT);
    EXPECT_EQ(34u, tg_type_size(TG_TYPE_Q8_0));
    EXPECT_EQ(18u, tg_type_size(TG_TYPE_Q4_0));
    EXPECT_EQ(144u, tg_type_size(TG_TYPE_Q4_K));
    EXPECT_EQ(4u, tg_type_size(TG_TYPE_F32));
    EXPECT_EQ(32, tg_type_block_size(TG_TYPE_Q8_0));
    EXPECT_EQ(32, tg_type_block_size(TG_TYPE_Q4_0));
    EXPECT_EQ(256, tg_type_block_size(TG_TYPE_Q4_K));
    EXPECT_EQ(1, tg_type_block_size(TG_TYPE_BF16));
    EXPECT_EQ(0, tg_type_block_size(TG_TYPE_COUNT));
    EXPECT_EQ(0u, tg_type_size(TG_TYPE_COUNT));
    EXPECT_EQ(nullptr, tg_type_name(TG_TYPE_COUNT));
    EXPECT_TRUE(tg_type_is_quantized(TG_TYPE_Q4_K));
    EXPECT_FALSE(tg_type_is_quantized(TG_TYPE_F16));
    EXPECT_FALSE(tg_type_is_quantized(TG_TYPE_COUNT));
    EXPECT_EQ(34u * 4, tg_row_size(TG_TYPE_Q8_0, 128));
    EXPECT_EQ(18u * 3, tg_row_size(TG_TYPE_Q4_0, 96));
    EXPECT_EQ(144u * 2, tg_row_size(TG_TYPE_Q4_K, 512));
    EXPECT_EQ(0u, tg_row_size(TG_TYPE_Q4_K, 128));
    EXPECT_EQ(0u, tg_row_size(TG_TYPE_Q8_0, 33));
    EXPECT_EQ(0u, tg_row_size(TG_TYPE_Q8_0, -32));
    EXPECT_EQ(0u, tg_row_size(TG_TYPE_COUNT, 32));
    EXPECT_EQ(12u, tg_row_size(TG_TYPE_F32, 3));
    EXPECT_EQ(0u, tg_row_size(TG_TYPE_Q8_0, 0));
}

// Hand-made blocks: the layout as the format describes it.
TEST(Quant, KnownBlocks) {
    // Q8_0: d = 0.5 (f16 0x3800), q[i] = i - 16
    uint8_t q8[34] = {0x00, 0x38};
    for (int i = 0; i < 32; i++) q8[2 + i] = (uint8_t)(int8_t)(i - 16);
    std::vector<float> out(256);
    ASSERT_EQ(TG_OK, tg_dequantize(TG_TYPE_Q8_0, q8, out.data(), 32));
    for (int i = 0; i < 32; i++) EXPECT_EQ(0.5f * (i - 16), out[i]) << i;
    // Q4_0: d = 2 (0x4000); byte i holds element i (low) and i + 16 (high)
    uint8_t q4[18] = {0x00, 0x40};
    for (int i = 0; i < 16; i++) q4[2 + i] = (uint8_t)(i | (15 - i) << 4);
    ASSERT_EQ(TG_OK, tg_dequantize(TG_TYPE_Q4_0, q4, out.data(), 32));
    for (int i = 0; i < 16; i++) {
        EXPECT_EQ(2.0f * (i - 8), out[i]) << i;
        EXPECT_EQ(2.0f * (15 - i - 8), out[i + 16]) << i;
    }
    // Q4_K: d = 1, dmin = 0.25; sub-block j: scale j + 1, min 2j (j >= 4: split
    // over the nibbles of byte j + 4 and the top bits of bytes j - 4, j)
    uint8_t qk[144] = {0x00, 0x3c, 0x00, 0x34};
    for (int j = 0; j < 8; j++) {
        const int sc = j + 1 + (j >= 4 ? 40 : 0), m = 2 * j + (j >= 4 ? 20 : 0);  // > 15 for j >= 4: top bits used
        if (j < 4) {
            qk[4 + j] = (uint8_t)sc;
            qk[4 + j + 4] = (uint8_t)m;
        } else {
            qk[4 + j + 4] = (uint8_t)((sc & 15) | (m & 15) << 4);
            qk[4 + j - 4] |= (uint8_t)((sc >> 4) << 6);
            qk[4 + j] |= (uint8_t)((m >> 4) << 6);
        }
    }
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) qk[16 + 32 * g + l] = (uint8_t)((l % 16) | ((l + g) % 16) << 4);
    ASSERT_EQ(TG_OK, tg_dequantize(TG_TYPE_Q4_K, qk, out.data(), 256));
    for (int j = 0; j < 8; j++) {
        const int sc = j + 1 + (j >= 4 ? 40 : 0), m = 2 * j + (j >= 4 ? 20 : 0);
        for (int l = 0; l < 32; l++) {
            const int q = j % 2 ? (l + j / 2) % 16 : l % 16;
            EXPECT_EQ((float)(1.0 * sc * q - 0.25 * m), out[32 * j + l]) << "sub-block " << j << " element " << l;
        }
    }
    // the independent decoder agrees on all three
    const std::vector<double> d8 = decode(TG_TYPE_Q8_0, q8, 32), dk = decode(TG_TYPE_Q4_K, qk, 256);
    EXPECT_EQ(0.5 * 15, d8[31]);
    EXPECT_EQ((float)dk[255], out[255]);
}

// Per element error bound of the round trip, from the block's own data (in
// float64) and the F16 scale the bytes hold.
struct bound_stats {
    double max_excess = -1;  // max over elements of err - bound (must be <= 0)
    double sq_err = 0, sq_x = 0;
};
bound_stats check_bounds(tg_type t, const std::vector<float> &x, const std::vector<uint8_t> &q) {
    const std::vector<double> y = decode(t, q.data(), (int64_t)x.size());
    bound_stats st;
    const int64_t bs = tg_type_block_size(t);
    for (size_t b0 = 0; b0 < x.size(); b0 += (size_t)bs) {
        const uint8_t *blk = q.data() + b0 / (size_t)bs * tg_type_size(t);
        double amax = 0, vmax = 0;
        for (int64_t i = 0; i < bs; i++)
            if (std::fabs(x[b0 + i]) > amax) amax = std::fabs(x[b0 + i]), vmax = x[b0 + i];
        for (int64_t i = 0; i < bs; i++) {
            const double xi = x[b0 + i], err = std::fabs(xi - y[b0 + i]);
            double bound;
            if (t == TG_TYPE_Q8_0) {
                // |x - d q| <= d/2 (q = round(x / d)), plus the scale's F16 rounding times |q| <= 127
                const double d = amax / 127, dh = half(blk);
                bound = d * (0.5 + 1e-5) + 127 * std::fabs(d - dh);
            } else if (t == TG_TYPE_Q4_0) {
                // d = vmax / -8: x / d in [-8, 8]; the top level 16 is clamped to 15 (error up to d)
                const double d = std::fabs(vmax / 8), dh = std::fabs(half(blk));
                const bool clamped = xi / (vmax / -8) >= 7.5 - 1e-6;
                bound = d * ((clamped ? 1.0 : 0.5) + 1e-5) + 8 * std::fabs(d - dh);
            } else {
                // Q4_K: each element is the nearest of its sub-block's 16 levels
                // (d sc q - dmin m), the levels clamped to [0, 15]
                const int j = (int)(i / 32);
                int sc, m;
                k4_scale_min(j, blk + 4, &sc, &m);
                const double step = half(blk) * sc, lo = -half(blk + 2) * m, hi = lo + 15 * step;
                const double dist = xi < lo ? lo - xi : xi > hi ? xi - hi : 0.0;
                bound = dist + step * (0.5 + 1e-4) + 1e-7 * amax;
            }
            st.max_excess = std::max(st.max_excess, err - bound);
            st.sq_err += err * err;
            st.sq_x += xi * xi;
        }
    }
    return st;
}

TEST(Quant, RoundTripWithinBounds) {
    std::mt19937 rng(11);
    for (tg_type t : k_qtypes)
        for (float scale : {1e-3f, 0.05f, 1.0f, 300.0f}) {
            SCOPED_TRACE(std::string(tg_type_name(t)) + " scale " + std::to_string(scale));
            std::vector<float> x = weights(rng, 1024, 16);
            for (float &v : x) v *= scale;
            x[7] = 0.0f;  // a zero, and a block of one sign
            for (int i = 256; i < 512; i++) x[(size_t)i] = std::fabs(x[(size_t)i]);
            const std::vector<uint8_t> q = quantized(t, x);
            const bound_stats st = check_bounds(t, x, q);
            EXPECT_LE(st.max_excess, 0.0);
            // the relative RMS error of these weights (docs/ops.md's table)
            const double rms = std::sqrt(st.sq_err / st.sq_x);
            // (Q8_0 at scale 1e-3: d is an F16 subnormal, coarser)
            const double want = t == TG_TYPE_Q8_0 ? (scale < 0.01f ? 0.012 : 0.0075) : t == TG_TYPE_Q4_0 ? 0.12 : 0.09;
            EXPECT_LT(rms, want);
            EXPECT_GT(rms, want / 20) << "suspiciously exact";
            // tg_dequantize equals the independent decoder exactly
            std::vector<float> y(x.size(), NAN);
            ASSERT_EQ(TG_OK, tg_dequantize(t, q.data(), y.data(), (int64_t)y.size()));
            const std::vector<double> ref = decode(t, q.data(), (int64_t)x.size());
            for (size_t i = 0; i < y.size(); i++) ASSERT_EQ((float)ref[i], y[i]) << i;
        }
}

// Dequantize -> quantize: Q8_0 and Q4_0 give back the same bytes (their
// levels are exact in the F16 scale); Q4_K's second round stays within its
// bound of the dequantized values.
TEST(Quant, DequantizeQuantizeRoundTrip) {
    std::mt19937 rng(5);
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const std::vector<float> x = weights(rng, 512, 8);
        const std::vector<uint8_t> q = quantized(t, x);
        std::vector<float> y(x.size());
        ASSERT_EQ(TG_OK, tg_dequantize(t, q.data(), y.data(), (int64_t)y.size()));
        const std::vector<uint8_t> q2 = quantized(t, y);
        if (t != TG_TYPE_Q4_K)
            EXPECT_TRUE(q == q2);
        else
            EXPECT_LE(check_bounds(t, y, q2).max_excess, 0.0);
    }
}

TEST(Quant, NonFiniteBlocksDecodeToNaN) {
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t bs = tg_type_block_size(t);
        for (float bad : {NAN, INFINITY, -INFINITY}) {
            std::vector<float> x((size_t)(2 * bs), 0.25f);
            x[3] = bad;  // block 0 only
            const std::vector<uint8_t> q = quantized(t, x);
            std::vector<float> y(x.size());
            ASSERT_EQ(TG_OK, tg_dequantize(t, q.data(), y.data(), 2 * bs));
            for (int64_t i = 0; i < bs; i++) EXPECT_TRUE(std::isnan(y[(size_t)i])) << i;
            for (int64_t i = bs; i < 2 * bs; i++) EXPECT_NEAR(0.25, y[(size_t)i], 0.02) << i;
        }
    }
}

TEST(Quant, ArgumentErrors) {
    float x[256] = {1};
    uint8_t q[512];
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_F32, x, q, 32), "[quantize] type f32 is not a quantized type"));
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_COUNT, x, q, 32), "[quantize] invalid type 7"));
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_Q4_0, x, q, 33), "[quantize] n 33 is not a multiple of q4_0's block size 32"));
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_Q4_K, x, q, 32), "[quantize] n 32 is not a multiple of q4_k's block size 256"));
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_Q8_0, x, q, -32), "[quantize] n -32"));
    EXPECT_TRUE(fails(tg_quantize(TG_TYPE_Q8_0, nullptr, q, 32), "[quantize] src is NULL"));
    EXPECT_TRUE(fails(tg_dequantize(TG_TYPE_Q8_0, q, nullptr, 32), "[dequantize] dst is NULL"));
    EXPECT_TRUE(fails(tg_dequantize(TG_TYPE_I32, q, x, 32), "[dequantize] type i32 is not a quantized type"));
    EXPECT_EQ(TG_OK, tg_quantize(TG_TYPE_Q8_0, x, q, 0));
}

// ---------------------------------------------------------------------------
// Tensors and views

struct qctx {
    tg_context *ctx;
    qctx(bool no_alloc = false) {
        tg_init_params ip = {8 << 20, nullptr, no_alloc};
        ctx = tg_init(ip);
    }
    ~qctx() { tg_free(ctx); }
};

TEST(Quant, TensorShapesAndStrides) {
    qctx c;
    EXPECT_TRUE(fails(tg_new_tensor_2d(c.ctx, TG_TYPE_Q4_0, 33, 2), "[new_tensor] ne[0] 33 is not a multiple of q4_0's block size 32"));
    EXPECT_TRUE(fails(tg_new_tensor_1d(c.ctx, TG_TYPE_Q4_K, 32), "[new_tensor] ne[0] 32 is not a multiple of q4_k's block size 256"));
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t K = 2 * tg_type_block_size(t);
        tg_tensor *w = tg_new_tensor_3d(c.ctx, t, K, 3, 2);
        ASSERT_TRUE(w) << tg_last_error();
        const size_t row = tg_row_size(t, K);
        EXPECT_EQ(tg_type_size(t), tg_nb(w, 0));
        EXPECT_EQ(row, tg_nb(w, 1));
        EXPECT_EQ(3 * row, tg_nb(w, 2));
        EXPECT_EQ(6 * row, tg_nb(w, 3));
        EXPECT_EQ(6 * row, tg_nbytes(w));
        EXPECT_EQ(K * 6, tg_nelements(w));
        EXPECT_TRUE(tg_is_contiguous(w));
        EXPECT_EQ(t, tg_tensor_type(w));
        // raw bytes in and out
        std::vector<uint8_t> bytes(tg_nbytes(w)), back(bytes.size());
        for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (uint8_t)(i * 7 + 1);
        ASSERT_EQ(TG_OK, tg_tensor_set(w, bytes.data(), 0, bytes.size())) << tg_last_error();
        ASSERT_EQ(TG_OK, tg_tensor_get(w, back.data(), 0, back.size())) << tg_last_error();
        EXPECT_TRUE(bytes == back);
        EXPECT_NE(TG_OK, tg_tensor_set(w, bytes.data(), 1, bytes.size()));

        // whole-row views: rows 1..2 of plane 1; a reshape keeping ne0; a permute of dims 1..3
        tg_tensor *v = tg_view_2d(c.ctx, w, K, 2, row, 4 * row);
        ASSERT_TRUE(v) << tg_last_error();
        EXPECT_EQ((uint8_t *)tg_tensor_data(w) + 4 * row, tg_tensor_data(v));
        EXPECT_EQ(2 * row, tg_nbytes(v));
        EXPECT_TRUE(tg_is_contiguous(v));
        tg_tensor *r = tg_reshape_2d(c.ctx, w, K, 6);
        ASSERT_TRUE(r) << tg_last_error();
        EXPECT_EQ(row, tg_nb(r, 1));
        tg_tensor *p = tg_permute(c.ctx, w, 0, 2, 1, 3);
        ASSERT_TRUE(p) << tg_last_error();
        EXPECT_FALSE(tg_is_contiguous(p));
        EXPECT_EQ(6 * row, tg_nbytes(p));

        // views that would split a row or a block
        EXPECT_TRUE(fails(tg_view_1d(c.ctx, w, K / 2, 0), "[view_1d]"));
        EXPECT_TRUE(fails(tg_view_2d(c.ctx, w, K, 2, row, 1), "[view_2d]"));
        EXPECT_TRUE(fails(tg_view_2d(c.ctx, w, K, 2, row + 2, 0), "[view_2d]"));
        EXPECT_TRUE(fails(tg_view_2d(c.ctx, w, K, 2, row, tg_type_size(t)), "[view_2d]"));
        EXPECT_TRUE(fails(tg_view_2d(c.ctx, w, K, 7, row, 0), "[view_2d]"));  // past the end
        EXPECT_TRUE(fails(tg_reshape_2d(c.ctx, w, K / 2, 12), "[reshape]"));
        EXPECT_TRUE(fails(tg_transpose(c.ctx, w), "[permute]"));
        EXPECT_TRUE(fails(tg_permute(c.ctx, w, 1, 0, 2, 3), "[permute]"));
    }
}

// ---------------------------------------------------------------------------
// Ops

TEST(Quant, OtherOpsRefuseQuantized) {
    qctx c(true);
    tg_tensor *q = tg_new_tensor_2d(c.ctx, TG_TYPE_Q4_0, 64, 4);
    tg_tensor *f = tg_new_tensor_2d(c.ctx, TG_TYPE_F32, 64, 4);
    tg_tensor *pos = tg_new_tensor_1d(c.ctx, TG_TYPE_I32, 4);
    ASSERT_TRUE(q && f && pos);
    EXPECT_TRUE(fails(tg_add(c.ctx, q, f), "[add] a is q4_0: quantized tensors are only supported as mul_mat's a and get_rows' a"));
    EXPECT_TRUE(fails(tg_mul(c.ctx, f, q), "[mul] b is q4_0: quantized"));
    EXPECT_TRUE(fails(tg_scale(c.ctx, q, 2.0f), "[scale] a is q4_0"));
    EXPECT_TRUE(fails(tg_rms_norm(c.ctx, q, 1e-5f), "[rms_norm] a is q4_0"));
    EXPECT_TRUE(fails(tg_l2_norm(c.ctx, q, 1e-5f), "[l2_norm] a is q4_0"));
    EXPECT_TRUE(fails(tg_silu(c.ctx, q), "[silu] a is q4_0"));
    EXPECT_TRUE(fails(tg_swiglu(c.ctx, q, q), "[swiglu] a is q4_0"));
    EXPECT_TRUE(fails(tg_softmax(c.ctx, q, 1.0f), "[softmax] a is q4_0"));
    EXPECT_TRUE(fails(tg_mul_mat(c.ctx, f, q), "[mul_mat] b is q4_0"));
    EXPECT_TRUE(fails(tg_get_rows(c.ctx, f, q), "[get_rows] ids is q4_0"));
    tg_tensor *q4 = tg_new_tensor_4d(c.ctx, TG_TYPE_Q8_0, 64, 2, 4, 1);
    tg_tensor *f4 = tg_new_tensor_4d(c.ctx, TG_TYPE_F32, 64, 2, 4, 1);
    tg_rope_params rp = tg_rope_default_params(64);
    EXPECT_TRUE(fails(tg_rope(c.ctx, q4, pos, &rp), "[rope] a is q8_0"));
    EXPECT_TRUE(fails(tg_attention(c.ctx, f4, q4, f4, pos, 1.0f), "[attention] k_cache is q8_0"));
    EXPECT_TRUE(fails(tg_rope_kv_update(c.ctx, q4, f4, f4, f4, pos, nullptr, nullptr, &rp), "[rope_kv_update] k_cache is q8_0"));
    // copies: only same-type contiguous bytes
    tg_tensor *q2 = tg_new_tensor_2d(c.ctx, TG_TYPE_Q4_0, 64, 4), *k2 = tg_new_tensor_2d(c.ctx, TG_TYPE_Q8_0, 64, 4);
    tg_tensor *res = tg_cpy(c.ctx, f, q2);
    EXPECT_TRUE(fails(res, "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(c.ctx, q, f), "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(c.ctx, q, k2), "[cpy]"));
    EXPECT_TRUE(fails(tg_cpy(c.ctx, q, tg_new_tensor_2d(c.ctx, TG_TYPE_Q4_0, 128, 2)), "[cpy]"));
    EXPECT_TRUE(tg_cpy(c.ctx, q, q2)) << tg_last_error();
    EXPECT_TRUE(tg_cont(c.ctx, q)) << tg_last_error();
    EXPECT_TRUE(fails(tg_cont(c.ctx, tg_permute(c.ctx, q4, 0, 2, 1, 3)), "[cont] a {64,4,2,1} q8_0 is quantized and not contiguous"));
}

// A CPU backend with storage for quantized weights (bytes from tg_quantize)
// and F32 inputs.
struct qenv {
    tg_context *ctx;
    tg_backend *be;
    tg_buffer *buf = nullptr;
    std::vector<std::pair<tg_tensor *, std::vector<uint8_t>>> init;
    explicit qenv(int nth = 2) {
        tg_init_params ip = {4 << 20, nullptr, true};
        ctx = tg_init(ip);
        be = tg_backend_cpu(nth);
    }
    ~qenv() {
        tg_buffer_free(buf);
        tg_backend_free(be);
        tg_free(ctx);
    }
    tg_tensor *tensor(tg_type t, int64_t ne0, int64_t ne1, const void *bytes, int64_t ne2 = 1) {
        tg_tensor *x = tg_new_tensor_3d(ctx, t, ne0, ne1, ne2);
        const uint8_t *b = (const uint8_t *)bytes;
        init.push_back({x, std::vector<uint8_t>(b, b + tg_nbytes(x))});
        return x;
    }
    std::vector<float> run(tg_tensor *y) {
        tg_graph *g = tg_graph_new(ctx);
        EXPECT_EQ(TG_OK, tg_graph_expand(g, y)) << tg_last_error();
        if (!buf) buf = tg_backend_alloc(be, ctx);
        for (auto &p : init) EXPECT_EQ(TG_OK, tg_tensor_set(p.first, p.second.data(), 0, p.second.size()));
        EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
        std::vector<float> out((size_t)tg_nelements(y), NAN);
        EXPECT_EQ(TG_OK, tg_tensor_get(y, out.data(), 0, out.size() * 4)) << tg_last_error();
        return out;
    }
};

TEST(Quant, ContAndCpyCopyTheBlocks) {
    std::mt19937 rng(3);
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t K = tg_type_block_size(t) * 3, M = 5;
        const std::vector<uint8_t> q = quantized(t, weights(rng, K, M));
        qenv e(3);
        tg_tensor *w = e.tensor(t, K, M, q.data());
        tg_tensor *dst = e.tensor(t, K, M, std::vector<uint8_t>(q.size(), 0x5a).data());
        tg_tensor *c = tg_cont(e.ctx, w), *cp = tg_cpy(e.ctx, w, dst);
        ASSERT_TRUE(c && cp) << tg_last_error();
        tg_graph *g = tg_graph_new(e.ctx);
        ASSERT_EQ(TG_OK, tg_graph_expand(g, c));
        ASSERT_EQ(TG_OK, tg_graph_expand(g, cp));
        e.buf = tg_backend_alloc(e.be, e.ctx);
        for (auto &p : e.init) ASSERT_EQ(TG_OK, tg_tensor_set(p.first, p.second.data(), 0, p.second.size()));
        ASSERT_EQ(TG_OK, tg_graph_compute(e.be, g)) << tg_last_error();
        std::vector<uint8_t> a(q.size()), b(q.size());
        ASSERT_EQ(TG_OK, tg_tensor_get(c, a.data(), 0, a.size()));
        ASSERT_EQ(TG_OK, tg_tensor_get(dst, b.data(), 0, b.size()));
        EXPECT_TRUE(a == q);
        EXPECT_TRUE(b == q);
    }
}

TEST(Quant, ReferenceGetRowsDequantizes) {
    std::mt19937 rng(9);
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t E = tg_type_block_size(t) * 2, V = 11;
        const std::vector<uint8_t> q = quantized(t, weights(rng, E, V));
        const std::vector<double> deq = decode(t, q.data(), E * V);
        const int32_t ids[7] = {3, 0, 10, 3, 7, 1, 9};
        qenv e;
        tg_tensor *w = e.tensor(t, E, V, q.data());
        tg_tensor *id = e.tensor(TG_TYPE_I32, 7, 1, ids);
        tg_backend_cpu_set_fast(e.be, false);
        const std::vector<float> out = e.run(tg_get_rows(e.ctx, w, id));
        for (int r = 0; r < 7; r++)
            for (int64_t k = 0; k < E; k++)
                ASSERT_EQ((float)deq[(size_t)(ids[r] * E + k)], out[(size_t)(r * E + k)]) << r << " " << k;
    }
}

TEST(Quant, ReferenceMulMatIsTheDequantizedProduct) {
    std::mt19937 rng(21);
    for (tg_type t : k_qtypes) {
        SCOPED_TRACE(tg_type_name(t));
        const int64_t K = tg_type_block_size(t) * 3, M = 7, N = 3, B2 = 2;
        const std::vector<uint8_t> q = quantized(t, weights(rng, K, M));
        const std::vector<double> w = decode(t, q.data(), K * M);
        std::vector<float> x = tgt::random_floats(rng, (size_t)(K * N * B2));
        qenv e;
        tg_tensor *a = e.tensor(t, K, M, q.data());
        tg_tensor *b = e.tensor(TG_TYPE_F32, K, N, x.data(), B2);
        tg_backend_cpu_set_fast(e.be, false);
        const std::vector<float> out = e.run(tg_mul_mat(e.ctx, a, b));
        std::vector<double> ref;
        std::vector<double> got(out.begin(), out.end());
        for (int64_t n = 0; n < N * B2; n++)
            for (int64_t m = 0; m < M; m++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) acc += w[(size_t)(m * K + k)] * x[(size_t)(n * K + k)];
                ref.push_back(acc);
            }
        EXPECT_TRUE(opu::close(got, ref, 1e-6));
    }
}

// The CUDA backend has no quantized kernels yet: a graph with a quantized
// tensor is refused cleanly (TG_ERR_UNSUPPORTED naming the tensor), and the
// backend keeps working. (Replaced by kernel tests when the kernels land.)
TEST(Quant, CudaRefusesQuantizedCleanly) {
    if (!tg_cuda_available()) GTEST_SKIP() << "no CUDA device";
    tg_init_params ip = {1 << 20, nullptr, true};
    tg_context *ctx = tg_init(ip);
    tg_backend *be = tg_backend_cuda(0);
    ASSERT_TRUE(ctx && be) << tg_last_error();
    tg_tensor *w = tg_new_tensor_2d(ctx, TG_TYPE_Q8_0, 64, 4), *x = tg_new_tensor_2d(ctx, TG_TYPE_F32, 64, 2);
    tg_set_name(w, "w");
    tg_tensor *y = tg_mul_mat(ctx, w, x), *z = tg_scale(ctx, x, 2.0f);
    tg_graph *g = tg_graph_new(ctx), *g2 = tg_graph_new(ctx);
    ASSERT_EQ(TG_OK, tg_graph_expand(g, y));
    ASSERT_EQ(TG_OK, tg_graph_expand(g2, z));
    tg_buffer *buf = tg_backend_alloc(be, ctx);
    ASSERT_TRUE(buf) << tg_last_error();
    EXPECT_EQ(TG_ERR_UNSUPPORTED, tg_graph_compute(be, g));
    EXPECT_NE(nullptr, strstr(tg_last_error(), "'w' is q8_0")) << tg_last_error();
    EXPECT_EQ(TG_OK, tg_graph_compute(be, g2)) << tg_last_error();
    tg_buffer_free(buf);
    tg_backend_free(be);
    tg_free(ctx);
}

// ---------------------------------------------------------------------------
// GGUF

TEST(Quant, GgufRoundTrip) {
    std::mt19937 rng(17);
    tg_gguf_writer *w = tg_gguf_writer_new();
    ASSERT_TRUE(w);
    std::vector<std::vector<uint8_t>> data;
    const int64_t shapes[3][2] = {{64, 3}, {96, 5}, {512, 2}};
    for (int i = 0; i < 3; i++) {
        const tg_type t = k_qtypes[i];
        data.push_back(quantized(t, weights(rng, shapes[i][0], shapes[i][1])));
        ASSERT_EQ(TG_OK, tg_gguf_add_tensor(w, tg_type_name(t), t, 2, shapes[i], data.back().data())) << tg_last_error();
    }
    const float norm[5] = {1, 2, 3, 4, 5};
    const int64_t n5 = 5;
    ASSERT_EQ(TG_OK, tg_gguf_add_tensor(w, "norm", TG_TYPE_F32, 1, &n5, norm));
    const int64_t bad[2] = {33, 2};
    EXPECT_TRUE(fails(tg_gguf_add_tensor(w, "bad", TG_TYPE_Q4_0, 2, bad, data[0].data()),
                      "[gguf_add_tensor] tensor 'bad': ne[0] 33 is not a multiple of q4_0's block size 32"));
    void *mem = nullptr;
    size_t size = 0;
    ASSERT_EQ(TG_OK, tg_gguf_write_memory(w, &mem, &size)) << tg_last_error();
    tg_gguf_writer_free(w);
    tg_gguf *g = tg_gguf_open_memory(mem, size);
    tg_gguf_free_memory(mem);
    ASSERT_TRUE(g) << tg_last_error();
    ASSERT_EQ(4, tg_gguf_n_tensors(g));
    for (int i = 0; i < 3; i++) {
        const char *name;
        tg_type t;
        int nd;
        int64_t ne[4];
        size_t nbytes;
        ASSERT_EQ(TG_OK, tg_gguf_tensor_info(g, i, &name, &t, &nd, ne, &nbytes));
        EXPECT_EQ(k_qtypes[i], t);
        EXPECT_STREQ(tg_type_name(t), name);
        EXPECT_EQ(shapes[i][0], ne[0]);
        EXPECT_EQ(shapes[i][1], ne[1]);
        EXPECT_EQ(data[(size_t)i].size(), nbytes);
        EXPECT_EQ(0, memcmp(data[(size_t)i].data(), tg_gguf_tensor_data(g, i), nbytes));
    }
    tg_gguf_close(g);
}

}  // namespace
