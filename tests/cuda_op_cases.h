// cuda_op_cases.h - the cases of the CUDA-vs-CPU op harness
// (tests/test_cuda_ops.cpp): every standard op in contiguous, permuted,
// viewed, in-place and F16/BF16 variants, with their error bounds. Included
// once, inside test_cuda_ops.cpp's anonymous namespace, after the harness
// types (op_case, builder, S) it uses.
#pragma once

// ---------------------------------------------------------------------------
// The cases

const double kElem = 1e-5, kMat = 1e-4, kExact = 0.0;
// mul_mat's 16-bit tensor-core tier (b rounded to the weights' type; docs/ops.md)
const double kTcF16 = 1e-3, kTcBF16 = 4e-3;
const tg_type F32 = TG_TYPE_F32, F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16;

std::vector<op_case> unary_cases() {
    std::vector<op_case> v;
    const int64_t N = S(1000, 64), R = S(257, 5);
    struct u {
        const char *name;
        std::function<tg_tensor *(tg_context *, tg_tensor *)> f;
        double lo, hi;
    };
    const std::vector<u> ops = {
        {"scale", [](tg_context *c, tg_tensor *x) { return tg_scale(c, x, -1.75f); }, -1, 1},
        {"silu", [](tg_context *c, tg_tensor *x) { return tg_silu(c, x); }, -8, 8},
        {"sigmoid", [](tg_context *c, tg_tensor *x) { return tg_sigmoid(c, x); }, -8, 8},
        {"softplus", [](tg_context *c, tg_tensor *x) { return tg_softplus(c, x); }, -30, 30},
    };
    for (const u &o : ops) {
        auto f = o.f;
        double lo = o.lo, hi = o.hi;
        v.push_back({std::string(o.name) + "_contig", [=](builder &b) { return f(b.ctx, b.rnd(F32, {N, R}, lo, hi)); }, kElem});
        v.push_back({std::string(o.name) + "_permuted",
                     [=](builder &b) { return f(b.ctx, b.swap01(b.rnd(F32, {R, N, 3}, lo, hi))); }, kElem});
        v.push_back({std::string(o.name) + "_f16", [=](builder &b) { return f(b.ctx, b.rnd(F16, {N, 3}, lo, hi)); }, kElem});
        // a view 4 bytes into its source: not 16-byte aligned, odd length
        v.push_back({std::string(o.name) + "_offset_view",
                     [=](builder &b) { return f(b.ctx, tg_view_1d(b.ctx, b.rnd(F32, {N * 3 + 8}, lo, hi), N * 3 + 3, 4)); },
                     kElem});
    }
    v.push_back({"unary_inplace_chain",
                 [=](builder &b) {
                     tg_tensor *x = tg_add(b.ctx, b.rnd(F32, {N, R}), b.rnd(F32, {N, R}));
                     return tg_softplus(b.ctx, tg_sigmoid(b.ctx, tg_silu(b.ctx, tg_scale(b.ctx, x, 3.0f))));
                 },
                 kElem, true});
    return v;
}

std::vector<op_case> binary_cases() {
    std::vector<op_case> v;
    const int64_t N = S(1024, 64), R = S(300, 6);
    struct bop {
        const char *name;
        tg_tensor *(*f)(tg_context *, tg_tensor *, tg_tensor *);
    };
    for (bop o : {bop{"add", tg_add}, bop{"mul", tg_mul}, bop{"swiglu", tg_swiglu}}) {
        auto f = o.f;
        const std::string nm = o.name;
        v.push_back({nm + "_contig", [=](builder &b) { return f(b.ctx, b.rnd(F32, {N, R}), b.rnd(F32, {N, R})); }, kElem});
        v.push_back({nm + "_permuted",
                     [=](builder &b) { return f(b.ctx, b.swap01(b.rnd(F32, {R, N})), b.rnd(F32, {N, R})); }, kElem});
        v.push_back({nm + "_f16_bf16", [=](builder &b) { return f(b.ctx, b.rnd(F16, {N, 5}), b.rnd(BF16, {N, 5})); }, kElem});
        // gate and up packed in one tensor: two strided views
        v.push_back({nm + "_packed_views",
                     [=](builder &b) {
                         tg_tensor *gu = b.rnd(F32, {2 * N, R});
                         const size_t nb1 = tg_nb(gu, 1);
                         return f(b.ctx, tg_view_2d(b.ctx, gu, N, R, nb1, 0), tg_view_2d(b.ctx, gu, N, R, nb1, N * 4));
                     },
                     kElem});
        v.push_back({nm + "_offset_view",
                     [=](builder &b) {
                         tg_tensor *x = b.rnd(F32, {N * 2 + 4});
                         return f(b.ctx, tg_view_1d(b.ctx, x, N * 2 + 1, 4), tg_view_1d(b.ctx, x, N * 2 + 1, 8));
                     },
                     kElem});
    }
    for (bop o : {bop{"add", tg_add}, bop{"mul", tg_mul}}) {
        auto f = o.f;
        const std::string nm = o.name;
        v.push_back({nm + "_bcast_row", [=](builder &b) { return f(b.ctx, b.rnd(F32, {N, R}), b.rnd(F32, {N})); }, kElem});
        v.push_back({nm + "_bcast_4d",
                     [=](builder &b) { return f(b.ctx, b.rnd(F32, {6, 4, 3, 2}), b.rnd(F32, {3, 2, 1, 2})); }, kElem});
        v.push_back({nm + "_bcast_col_permuted",
                     [=](builder &b) { return f(b.ctx, b.swap01(b.rnd(F32, {R, N})), b.swap01(b.rnd(F32, {R, 1}))); },
                     kElem});
    }
    v.push_back({"binary_inplace_chain",
                 [=](builder &b) {
                     tg_tensor *m = tg_mul(b.ctx, b.rnd(F32, {N, R}), b.rnd(F32, {N, R}));
                     tg_tensor *a = tg_add(b.ctx, m, b.rnd(F32, {N}));  // in place, broadcast b
                     return tg_swiglu(b.ctx, a, b.rnd(F32, {N, R}));    // in place
                 },
                 kElem, true});
    return v;
}

std::vector<op_case> norm_cases() {
    std::vector<op_case> v;
    for (int64_t D : {S(64, 32), S(768, 300), S(1000, 40), S(2048, 520), S(4096, 1500)}) {
        const int64_t R = S(70, 5);
        const std::string d = std::to_string(D);
        v.push_back({"rms_norm_" + d, [=](builder &b) { return tg_rms_norm(b.ctx, b.rnd(F32, {D, R, 2}), 1e-5f); }, kElem});
        v.push_back({"l2_norm_" + d, [=](builder &b) { return tg_l2_norm(b.ctx, b.rnd(F32, {D, R}), 1e-6f); }, kElem});
        v.push_back({"softmax_" + d, [=](builder &b) { return tg_softmax(b.ctx, b.rnd(F32, {D, R}, -4, 4), 0.7f); }, kElem});
        v.push_back({"rms_norm_permuted_" + d,
                     [=](builder &b) { return tg_rms_norm(b.ctx, b.swap01(b.rnd(F32, {R, D})), 1e-5f); }, kElem});
        v.push_back({"softmax_permuted_" + d,
                     [=](builder &b) { return tg_softmax(b.ctx, b.swap01(b.rnd(F32, {R, D}, -4, 4)), 1.3f); }, kElem});
        v.push_back({"rms_norm_bf16_" + d, [=](builder &b) { return tg_rms_norm(b.ctx, b.rnd(BF16, {D, R}), 1e-5f); }, kElem});
        // masked: every third entry -inf, row 0 entirely -inf (gives zeros)
        v.push_back({"softmax_masked_" + d,
                     [=](builder &b) {
                         tg_tensor *mask = b.leaf(F32, {D, R}, [D](std::mt19937 &, int64_t i) {
                             return i < D || i % 3 == 0 ? -INFINITY : 0.0;
                         });
                         return tg_softmax(b.ctx, tg_add(b.ctx, b.rnd(F32, {D, R}, -4, 4), mask), 1.0f);
                     },
                     kElem});
    }
    return v;
}

std::vector<op_case> copy_cases() {
    std::vector<op_case> v;
    const int64_t N = S(513, 40), R = S(129, 7);
    for (tg_type t : {F32, F16, BF16, TG_TYPE_I32}) {
        const std::string tn = tg_type_name(t);
        auto src = [=](builder &b, std::vector<int64_t> ne) {
            return t == TG_TYPE_I32 ? b.ints(ne, -100000, 100000) : b.rnd(t, ne);
        };
        v.push_back({"cont_permuted_" + tn, [=](builder &b) { return tg_cont(b.ctx, b.swap01(src(b, {R, N, 3}))); }, kExact});
        v.push_back({"cont_permuted4d_" + tn,
                     [=](builder &b) { return tg_cont(b.ctx, tg_permute(b.ctx, src(b, {5, 4, 3, 6}), 2, 0, 3, 1)); }, kExact});
        v.push_back({"cont_contig_" + tn, [=](builder &b) { return tg_cont(b.ctx, src(b, {N, R})); }, kExact});
    }
    for (tg_type from : {F32, F16, BF16})
        for (tg_type to : {F32, F16, BF16}) {
            const std::string nm = std::string("cpy_") + tg_type_name(from) + "_to_" + tg_type_name(to);
            // into a persistent target, contiguous and transposed (then read through the view)
            v.push_back({nm, [=](builder &b) { return tg_cpy(b.ctx, b.rnd(from, {N, R}), b.rnd(to, {N * R})); }, kExact});
            v.push_back({nm + "_transposed",
                         [=](builder &b) { return tg_cpy(b.ctx, b.rnd(from, {R, N}), b.swap01(b.rnd(to, {R, N}))); },
                         kExact});
        }
    v.push_back({"cpy_offset_view",
                 [=](builder &b) {
                     tg_tensor *dst = tg_view_1d(b.ctx, b.rnd(F32, {N + 8}), N + 1, 4);
                     return tg_cpy(b.ctx, tg_view_1d(b.ctx, b.rnd(F32, {N + 8}), N + 1, 8), dst);
                 },
                 kExact});
    // get_rows
    const int64_t E = S(320, 24), V = S(1000, 50);
    for (tg_type t : {F32, F16, BF16}) {
        const std::string tn = tg_type_name(t);
        v.push_back({"get_rows_" + tn, [=](builder &b) { return tg_get_rows(b.ctx, b.rnd(t, {E, V}), b.ints({7, 3, 2}, 0, (int)V - 1)); },
                     kExact});
    }
    v.push_back({"get_rows_ids_transposed",
                 [=](builder &b) { return tg_get_rows(b.ctx, b.rnd(F32, {E, V}), b.swap01(b.ints({5, 9}, 0, (int)V - 1))); },
                 kExact});
    v.push_back({"get_rows_computed_ids",
                 [=](builder &b) { return tg_get_rows(b.ctx, b.rnd(F32, {E, V}), tg_cont(b.ctx, b.ints({33}, 0, (int)V - 1))); },
                 kExact});
    v.push_back({"get_rows_table_transposed",
                 [=](builder &b) { return tg_get_rows(b.ctx, b.swap01(b.rnd(F16, {V, E})), b.ints({17}, 0, (int)V - 1)); },
                 kExact});
    return v;
}

std::vector<op_case> mul_mat_cases() {
    std::vector<op_case> v;
    const int64_t K = S(512, 64), M = S(384, 48), N = S(96, 9);
    auto mm = [](builder &b, tg_tensor *a, tg_tensor *x) { return tg_mul_mat(b.ctx, a, x); };
    v.push_back({"mul_mat_f32", [=](builder &b) { return mm(b, b.rnd(F32, {K, M}), b.rnd(F32, {K, N})); }, kMat});
    v.push_back({"mul_mat_f32_large",
                 [=](builder &b) { return mm(b, b.rnd(F32, {S(1024, 96), S(1024, 80)}), b.rnd(F32, {S(1024, 96), S(128, 12)})); },
                 kMat});
    v.push_back({"mul_mat_f32_batched",
                 [=](builder &b) { return mm(b, b.rnd(F32, {64, 48, 4, 2}), b.rnd(F32, {64, 33, 4, 2})); }, kMat});
    v.push_back({"mul_mat_f32_bcast",
                 [=](builder &b) { return mm(b, b.rnd(F32, {64, 48, 2, 1}), b.rnd(F32, {64, 17, 6, 3})); }, kMat});
    v.push_back({"mul_mat_b_transposed",
                 [=](builder &b) { return mm(b, b.rnd(F32, {K, M}), b.swap01(b.rnd(F32, {N, K}))); }, kMat});
    v.push_back({"mul_mat_a_transposed",
                 [=](builder &b) { return mm(b, b.swap01(b.rnd(F32, {M, K})), b.rnd(F32, {K, N})); }, kMat});
    v.push_back({"mul_mat_a_row_view",  // rows padded: lda > K
                 [=](builder &b) {
                     tg_tensor *w = b.rnd(F32, {K + 16, M});
                     return mm(b, tg_view_2d(b.ctx, w, K, M, tg_nb(w, 1), 0), b.rnd(F32, {K, N}));
                 },
                 kMat});
    v.push_back({"mul_mat_b_f16", [=](builder &b) { return mm(b, b.rnd(F32, {K, M}), b.rnd(F16, {K, N})); }, kMat});
    for (tg_type t : {F16, BF16}) {
        const std::string tn = tg_type_name(t);
        const double tc = t == F16 ? kTcF16 : kTcBF16;
        v.push_back({"mul_mat_" + tn, [=](builder &b) { return mm(b, b.rnd(t, {K, M}), b.rnd(F32, {K, N})); }, tc});
        v.push_back({"mul_mat_" + tn + "_vec_n1", [=](builder &b) { return mm(b, b.rnd(t, {K, M}), b.rnd(F32, {K, 1})); }, kMat});
        v.push_back({"mul_mat_" + tn + "_vec_n3_odd_k",
                     [=](builder &b) { return mm(b, b.rnd(t, {K + 3, M}), b.rnd(F32, {K + 3, 3})); }, kMat});
        v.push_back({"mul_mat_" + tn + "_vec_n4_bcast",
                     [=](builder &b) { return mm(b, b.rnd(t, {128, 40, 2}), b.rnd(F32, {128, 4, 6})); }, kMat});
        v.push_back({"mul_mat_" + tn + "_both", [=](builder &b) { return mm(b, b.rnd(t, {K, M}), b.rnd(t, {K, N})); }, kMat});
        // transposed weights (no fast path) converted in chunks of 64 rows (forced by a small budget)
        op_case c{"mul_mat_" + tn + "_chunked",
                  [=](builder &b) { return mm(b, b.swap01(b.rnd(t, {S(1000, 200), 256, 2})), b.rnd(F32, {256, 16, 4})); },
                  kMat};
        c.mm_budget = "65536";
        v.push_back(c);
    }
    return v;
}

std::vector<op_case> attention_cases() {
    std::vector<op_case> v;
    struct shape {
        const char *name;
        int64_t D, Dv, Hq, Hkv, T, B, L;
        tg_type kt, vt;
        bool q_permuted;
        int pos_lo, pos_hi;  // positions uniform in [lo, hi] (clamped by the op)
    };
    const int64_t L = S(300, 40), Llong = S(1000, 150);
    const std::vector<shape> shapes = {
        {"attn_decode_f32", 64, 64, 4, 4, 1, 2, L, F32, F32, false, 0, (int)L - 1},
        {"attn_gqa_f16", 64, 64, 8, 2, 5, 2, L, F16, F16, false, -3, (int)L + 3},
        {"attn_gqa_bf16_dv32", 64, 32, 6, 3, 3, 2, L, BF16, BF16, false, -1, (int)L - 1},
        {"attn_mixed_f16_bf16", 128, 128, 4, 1, 4, 1, L, F16, BF16, false, 0, (int)L - 1},
        {"attn_q_permuted", 32, 48, 4, 2, 6, 2, L, F32, F16, true, 0, (int)L + 10},
        {"attn_long_tiles", 128, 128, 2, 1, 2, 2, Llong, F32, F32, false, (int)Llong - 5, (int)Llong + 5},
        {"attn_no_valid_rows", 64, 64, 2, 2, 3, 1, L, F16, F16, false, -5, -1},
        {"attn_odd_head_dim", 24, 40, 3, 1, 4, 2, L, F32, F32, false, 0, (int)L - 1},
    };
    for (const shape &s : shapes) {
        v.push_back({s.name,
                     [=](builder &b) {
                         tg_tensor *q = s.q_permuted ? tg_permute(b.ctx, b.rnd(F32, {s.D, s.T, s.Hq, s.B}), 0, 2, 1, 3)
                                                     : b.rnd(F32, {s.D, s.Hq, s.T, s.B});
                         tg_tensor *kc = b.rnd(s.kt, {s.D, s.Hkv, s.L, s.B});
                         tg_tensor *vc = b.rnd(s.vt, {s.Dv, s.Hkv, s.L, s.B});
                         tg_tensor *pos = b.ints({s.T, s.B}, s.pos_lo, s.pos_hi);
                         return tg_attention(b.ctx, q, kc, vc, pos, 1.0f / std::sqrt((float)s.D));
                     },
                     kMat});
    }
    return v;
}

std::vector<op_case> all_cases() {
    std::vector<op_case> v;
    for (auto part : {unary_cases(), binary_cases(), norm_cases(), copy_cases(), mul_mat_cases(), attention_cases()})
        v.insert(v.end(), part.begin(), part.end());
    return v;
}
