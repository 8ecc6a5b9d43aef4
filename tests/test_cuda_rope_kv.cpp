// test_cuda_rope_kv.cpp - rope_kv_update and plain rope on CUDA against the
// CPU backend (helpers and conventions in cuda_sig_util.h).
#include "cuda_sig_util.h"

namespace {

// ===========================================================================
// rope_kv_update

enum { ANG_BASE, ANG_TABLE, ANG_TABLE_LONG };

struct kv_case {
    const char *name;
    int B, T, H, D, L, n_rot;
    tg_rope_mode mode;
    int angles;
    tg_type kt, vt;
    int layout;
    int validate;  // knob kv_validate: 0 auto, 1 fused, 2 separate kernel
    int rounds;    // knob kv_rounds: 0 auto, else chunks per thread forced
};
void PrintTo(const kv_case &c, std::ostream *os) { *os << c.name; }

struct kv_data {
    kv_case c;
    int64_t Ltab = 0;
    placed pk, pv, pn;  // K, V caches; k_new / v_new
    store k0, v0, kn, vn;
    std::vector<float> cs, sn;
    std::vector<int32_t> pos;
};

// T distinct positions in [0, limit) per sequence, {T, B}.
std::vector<int32_t> distinct_positions(std::mt19937 &rng, int B, int T, int limit) {
    std::vector<int32_t> all(limit), pos;
    for (int b = 0; b < B; b++) {
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        pos.insert(pos.end(), all.begin(), all.begin() + T);
    }
    return pos;
}

kv_data make_kv(const kv_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    kv_data d;
    d.c = c;
    const int64_t pad = c.layout == LAY_PADDED ? 4 : c.layout == LAY_UNALIGNED ? 1 : 0;
    const int64_t off = c.layout == LAY_PADDED ? 8 : c.layout == LAY_UNALIGNED ? 1 : 0;
    d.pk = place(c.kt, c.D, c.H, c.L, c.B, pad, off);
    d.pv = place(c.vt, c.D, c.H, c.L, c.B, pad, off + 2 * pad);
    d.pn = c.layout == LAY_PERMUTED ? place(TG_TYPE_F32, c.D, c.T, c.H, c.B, 0, 0, 0)  // {D,T,H,B} leaf, permuted
                                    : place(TG_TYPE_F32, c.D, c.H, c.T, c.B, pad, off, 0);
    d.k0 = store(c.kt, d.pk.total), d.v0 = store(c.vt, d.pv.total);
    for (auto *s : {&d.k0, &d.v0}) {
        const auto r = tgt::random_floats(rng, s->size(), -2.0f, 2.0f);
        for (size_t i = 0; i < r.size(); i++) s->set(i, r[i]);
    }
    d.kn = store(TG_TYPE_F32, d.pn.total), d.vn = store(TG_TYPE_F32, d.pn.total);
    for (auto *s : {&d.kn, &d.vn}) {
        const auto r = tgt::random_floats(rng, s->size());
        for (size_t i = 0; i < r.size(); i++) s->set(i, r[i]);
    }
    d.Ltab = c.angles == ANG_TABLE_LONG ? c.L + 5 : c.L;
    const int half = c.n_rot / 2;
    if (c.angles != ANG_BASE)
        for (int64_t p = 0; p < d.Ltab; p++)
            for (int i = 0; i < half; i++) {
                const double th = (double)p * std::pow(10000.0, -2.0 * i / c.n_rot);
                d.cs.push_back((float)std::cos(th));
                d.sn.push_back((float)std::sin(th));
            }
    d.pos = distinct_positions(rng, c.B, c.T, c.L);
    return d;
}

// Run the update on be; the caches' backing bytes come back in k, v.
tg_status run_kv(tg_backend *be, const kv_data &d, store &k, store &v) {
    const kv_case &c = d.c;
    built x;
    tg_tensor *kb = tg_new_tensor_1d(x.ctx, c.kt, d.pk.total), *vb = tg_new_tensor_1d(x.ctx, c.vt, d.pv.total);
    tg_tensor *knb = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, d.pn.total), *vnb = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, d.pn.total);
    tg_tensor *kn = view_of(x.ctx, knb, d.pn), *vn = view_of(x.ctx, vnb, d.pn);
    if (c.layout == LAY_PERMUTED) kn = tg_permute(x.ctx, kn, 0, 2, 1, 3), vn = tg_permute(x.ctx, vn, 0, 2, 1, 3);
    tg_tensor *pos = tg_new_tensor_2d(x.ctx, TG_TYPE_I32, c.T, c.B), *cs = nullptr, *sn = nullptr;
    if (c.angles != ANG_BASE)
        cs = tg_new_tensor_2d(x.ctx, TG_TYPE_F32, c.n_rot / 2, d.Ltab), sn = tg_new_tensor_2d(x.ctx, TG_TYPE_F32, c.n_rot / 2, d.Ltab);
    tg_rope_params rp = tg_rope_default_params(c.n_rot);
    rp.mode = c.mode;
    tg_tensor *out = tg_rope_kv_update(x.ctx, view_of(x.ctx, kb, d.pk), view_of(x.ctx, vb, d.pv), kn, vn, pos, cs, sn, &rp);
    EXPECT_NE(out, nullptr) << tg_last_error();
    if (!out) return TG_ERR_ARG;
    x.g = tg_graph_new(x.ctx);
    EXPECT_EQ(tg_graph_expand(x.g, out), TG_OK);
    x.buf = tg_backend_alloc(be, x.ctx);
    EXPECT_NE(x.buf, nullptr) << tg_last_error();
    x.set(kb, d.k0.b.data()), x.set(vb, d.v0.b.data()), x.set(knb, d.kn.b.data()), x.set(vnb, d.vn.b.data());
    x.set(pos, d.pos.data());
    if (cs) x.set(cs, d.cs.data()), x.set(sn, d.sn.data());
    const tg_status st = tg_graph_compute(be, x.g);
    k = store(c.kt, d.pk.total), v = store(c.vt, d.pv.total);
    x.get(kb, k.b.data()), x.get(vb, v.b.data());
    return st;
}

// Written elements: GPU vs CPU (F32: relative error; F16/BF16: <= 1 ulp);
// every other byte of the backing (other rows, gaps, tail): as before.
void check_cache(const kv_data &d, const placed &p, const store &init, const store &cpu, const store &gpu,
                 const char *what) {
    std::vector<char> written(p.total, 0);
    std::vector<float> g;
    std::vector<double> r;
    int bad_ulp = 0;
    for (int b = 0; b < d.c.B; b++)
        for (int t = 0; t < d.c.T; t++)
            for (int h = 0; h < d.c.H; h++)
                for (int i = 0; i < d.c.D; i++) {
                    const int64_t e = p.at(i, h, d.pos[b * d.c.T + t], b);
                    written[e] = 1;
                    g.push_back(gpu.get(e)), r.push_back(cpu.get(e));
                    if (p.type != TG_TYPE_F32 && std::abs(gpu.ulp16(e) - cpu.ulp16(e)) > 1) bad_ulp++;
                }
    const double err = tgt::rel_error(g, r);
    EXPECT_LT(err, 1e-5) << what << ": written rows differ from the CPU";
    EXPECT_EQ(bad_ulp, 0) << what << ": elements more than 1 ulp from the CPU";
    const size_t es = tg_type_size(p.type);
    int64_t changed = 0, cpu_changed = 0;
    for (int64_t e = 0; e < p.total; e++)
        if (!written[e]) {
            changed += memcmp(&gpu.b[e * es], &init.b[e * es], es) != 0;
            cpu_changed += memcmp(&cpu.b[e * es], &init.b[e * es], es) != 0;
        }
    EXPECT_EQ(changed, 0) << what << ": GPU wrote outside the named rows (or the sentinel)";
    EXPECT_EQ(cpu_changed, 0) << what << ": CPU wrote outside the named rows";
}

struct CudaSigKvUpdate : CudaSig, ::testing::WithParamInterface<kv_case> {};

TEST_P(CudaSigKvUpdate, MatchesCpu) {
    const kv_case &c = GetParam();
    const kv_data d = make_kv(c, 1234 + c.B * 7 + c.T);
    store kc, vc, kg, vg;
    ASSERT_EQ(run_kv(cpu, d, kc, vc), TG_OK) << tg_last_error();
    {
        knobs k(c.validate, c.layout == LAY_SCALAR, 0, 0, 0, c.rounds);
#ifdef TG_HAVE_CUDA
#endif
        ASSERT_EQ(run_kv(gpu, d, kg, vg), TG_OK) << tg_last_error();
    }
    check_cache(d, d.pk, d.k0, kc, kg, "K");
    check_cache(d, d.pv, d.v0, vc, vg, "V");
}

const tg_rope_mode IL = TG_ROPE_INTERLEAVED, NX = TG_ROPE_NEOX;

std::vector<kv_case> kv_cases() {
    const int Tl = S(200, 40), Bp = S(2, 1);
    return {
        {"seed", 2, 16, 4, 32, 128, 32, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0},
        {"seed_separate_validation", 2, 16, 4, 32, 128, 32, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 2},
        {"decode_scaled", 8, 1, 8, 128, 256, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0},
        {"prefill_scaled", Bp, Tl, 4, 128, 512, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0},
        {"prefill_fused_forced", Bp, Tl, 4, 128, 512, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 1},
        {"B1_T1_base", 1, 1, 2, 64, 64, 64, IL, ANG_BASE, F32, F32, LAY_CONTIG, 0},
        {"base_neox", 3, 5, 3, 64, 100, 64, NX, ANG_BASE, F32, F32, LAY_CONTIG, 0},
        {"table_neox_partial", 2, 7, 2, 80, 50, 48, NX, ANG_TABLE_LONG, F32, F32, LAY_CONTIG, 0},
        {"neox_half_odd", 2, 6, 2, 40, 30, 12, NX, ANG_TABLE, F32, F32, LAY_CONTIG, 0},
        {"interleaved_partial_D100", 2, 9, 3, 100, 64, 20, IL, ANG_BASE, F32, F32, LAY_CONTIG, 0},
        {"D24_rot10", 3, 4, 2, 24, 16, 10, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0},
        {"f16_caches", 2, 12, 4, 128, 64, 128, IL, ANG_TABLE, F16, F16, LAY_CONTIG, 0},
        {"bf16_caches_neox", 2, 12, 4, 128, 64, 64, NX, ANG_BASE, BF16, BF16, LAY_CONTIG, 0},
        {"mixed_f16_k_bf16_v", 2, 3, 2, 64, 32, 64, IL, ANG_TABLE, F16, BF16, LAY_CONTIG, 0},
        {"padded_strided_views", 2, 8, 3, 64, 40, 64, IL, ANG_TABLE, F32, F32, LAY_PADDED, 0},
        {"padded_bf16", 2, 8, 3, 64, 40, 32, NX, ANG_TABLE, BF16, F32, LAY_PADDED, 0},
        {"unaligned_views_scalar", 2, 8, 3, 64, 40, 64, IL, ANG_TABLE, F32, F32, LAY_UNALIGNED, 0},
        {"unaligned_f16_neox", 2, 8, 3, 40, 40, 40, NX, ANG_BASE, F16, F16, LAY_UNALIGNED, 2},
        {"permuted_k_new", 2, 6, 4, 32, 20, 32, IL, ANG_TABLE, F32, F16, LAY_PERMUTED, 0},
        {"forced_scalar", 2, 6, 4, 32, 20, 32, NX, ANG_TABLE, F32, F32, LAY_SCALAR, 0},
        {"long_T_separate", 1, S(600, 300), 2, 32, 1024, 32, IL, ANG_BASE, F32, F32, LAY_CONTIG, 0},
        // each chunks-per-thread kernel (own register budget), vector and scalar, both modes
        {"prefill_rounds1", Bp, Tl, 4, 128, 512, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0, 1},
        {"prefill_rounds2", Bp, Tl, 4, 128, 512, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0, 2},
        {"prefill_rounds4_f16", Bp, Tl, 8, 128, 512, 128, IL, ANG_TABLE, F16, BF16, LAY_CONTIG, 0, 4},
        {"neox_rounds1_partial", 2, 7, 2, 80, 50, 48, NX, ANG_TABLE_LONG, F32, F32, LAY_CONTIG, 0, 1},
        {"scalar_rounds2", 2, 6, 4, 32, 20, 32, NX, ANG_TABLE, F32, F32, LAY_SCALAR, 0, 2},
        {"decode_rounds4_fused", 8, 1, 8, 128, 256, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0, 4},
        {"fused_rounds4_bf16", 2, 16, 8, 128, 64, 128, IL, ANG_TABLE, BF16, F16, LAY_CONTIG, 0, 4},
    };
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigKvUpdate, ::testing::ValuesIn(kv_cases()),
                         [](const ::testing::TestParamInfo<kv_case> &i) { return std::string(i.param.name); });

// --- bad positions: an error naming the op, and both caches untouched -------

struct kv_bad {
    const char *name;
    int bad;  // 0: L, 1: L+1, 2: INT32_MAX, 3: -1, 4: repeat, 5: past the table
    int T, validate;
};
void PrintTo(const kv_bad &c, std::ostream *os) { *os << c.name; }
struct CudaSigKvBadPosition : CudaSig, ::testing::WithParamInterface<kv_bad> {};

TEST_P(CudaSigKvBadPosition, ErrorAndNothingWritten) {
    const kv_bad &c = GetParam();
    const kv_case base = {"", 3, c.T, 2, 16, 512, 16, IL, ANG_TABLE, F32, F16, LAY_CONTIG, c.validate};
    kv_data d = make_kv(base, 99 + c.bad);
    if (c.bad == 5) d.Ltab = base.L - 16, d.cs.resize(d.Ltab * 8), d.sn.resize(d.Ltab * 8);
    std::mt19937 rng(5);
    d.pos = distinct_positions(rng, base.B, c.T, base.L - 16);  // valid, also for the short table
    const int t = c.T - 1, b = 1;                                // the middle sequence's last token
    int32_t &p = d.pos[b * c.T + t];
    const int32_t L = base.L, good = p;
    const int32_t vals[6] = {L, L + 1, INT32_MAX, -1, d.pos[b * c.T], L - 3};
    p = vals[c.bad];
    store k, v;
    {
        knobs kb(c.validate, 0, 0, 0);
        EXPECT_NE(run_kv(gpu, d, k, v), TG_OK);
    }
    EXPECT_NE(std::string(tg_last_error()).find("rope_kv_update"), std::string::npos) << tg_last_error();
    EXPECT_EQ(k.b, d.k0.b) << "K cache changed by a failed update";
    EXPECT_EQ(v.b, d.v0.b) << "V cache changed by a failed update";
    // the backend still works, and the error does not stick to the next graph
    p = good;
    EXPECT_EQ(run_kv(gpu, d, k, v), TG_OK) << tg_last_error();
    EXPECT_NE(k.b, d.k0.b);
}
std::vector<kv_bad> kv_bad_cases() {
    std::vector<kv_bad> v;
    const char *names[6] = {"L", "Lplus1", "INT32_MAX", "minus1", "repeat", "past_table"};
    static std::vector<std::string> keep;
    for (int val : {0, 2})
        for (int T : {1, 8, 300})
            for (int bad = 0; bad < 6; bad++) {
                if (bad == 4 && T == 1) continue;
                keep.push_back(std::string(names[bad]) + "_T" + std::to_string(T) + (val == 2 ? "_separate" : "_auto"));
                v.push_back({nullptr, bad, T, val});
            }
    for (size_t i = 0; i < v.size(); i++) v[i].name = keep[i].c_str();
    return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigKvBadPosition, ::testing::ValuesIn(kv_bad_cases()),
                         [](const ::testing::TestParamInfo<kv_bad> &i) { return std::string(i.param.name); });

// ===========================================================================
// rope (plain): angles from base, any position

struct rope_case {
    const char *name;
    int B, T, H, D, n_rot;
    tg_rope_mode mode;
    float base;
    int layout;  // LAY_CONTIG, LAY_UNALIGNED (input view off by one element), LAY_SCALAR
    int32_t pmin, pmax;
};
void PrintTo(const rope_case &c, std::ostream *os) { *os << c.name; }
struct CudaSigRope : CudaSig, ::testing::WithParamInterface<rope_case> {};

std::vector<float> run_rope(tg_backend *be, const rope_case &c, const placed &pa, const store &a,
                            const std::vector<int32_t> &pos) {
    built x;
    tg_tensor *ab = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, pa.total);
    tg_tensor *p = tg_new_tensor_2d(x.ctx, TG_TYPE_I32, c.T, c.B);
    tg_rope_params rp = tg_rope_default_params(c.n_rot);
    rp.mode = c.mode, rp.base = c.base;
    tg_tensor *out = tg_rope(x.ctx, view_of(x.ctx, ab, pa), p, &rp);
    EXPECT_NE(out, nullptr) << tg_last_error();
    std::vector<float> o((size_t)c.B * c.T * c.H * c.D);
    if (!out) return o;
    x.g = tg_graph_new(x.ctx);
    tg_graph_expand(x.g, out);
    x.buf = tg_backend_alloc(be, x.ctx);
    x.set(ab, a.b.data()), x.set(p, pos.data());
    EXPECT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    poison_compute_buffer(be);
    EXPECT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    x.get(out, o.data());
    return o;
}

TEST_P(CudaSigRope, MatchesCpu) {
    const rope_case &c = GetParam();
    std::mt19937 rng(7 + c.D);
    const int64_t off = c.layout == LAY_UNALIGNED ? 1 : 0;
    const placed pa = place(TG_TYPE_F32, c.D, c.H, c.T, c.B, off, off, 0);
    store a(TG_TYPE_F32, pa.total);
    const auto r = tgt::random_floats(rng, pa.total);
    for (size_t i = 0; i < r.size(); i++) a.set(i, r[i]);
    std::vector<int32_t> pos(c.T * c.B);
    std::uniform_int_distribution<int32_t> pd(c.pmin, c.pmax);
    for (auto &p : pos) p = pd(rng);
    const auto want = run_rope(cpu, c, pa, a, pos);
    knobs k(0, c.layout == LAY_SCALAR, 0, 0);
    const auto got = run_rope(gpu, c, pa, a, pos);
    EXPECT_LT(tgt::rel_error(got, std::vector<double>(want.begin(), want.end())), 1e-5);
}
INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaSigRope,
    ::testing::Values(rope_case{"q_decode", 4, 1, 8, 128, 128, IL, 10000.0f, LAY_CONTIG, 0, 4095},
                      rope_case{"q_prefill_neox", 2, S(64, 16), 8, 128, 128, NX, 10000.0f, LAY_CONTIG, 0, 4095},
                      rope_case{"large_positions", 2, 16, 2, 64, 64, IL, 500000.0f, LAY_CONTIG, 100000, 2000000},
                      rope_case{"negative_positions_partial", 2, 8, 3, 80, 40, NX, 10000.0f, LAY_CONTIG, -300, 300},
                      rope_case{"odd_D_scalar", 2, 5, 3, 26, 14, IL, 10000.0f, LAY_CONTIG, 0, 99},
                      rope_case{"unaligned_view", 2, 5, 3, 64, 64, IL, 10000.0f, LAY_UNALIGNED, 0, 99},
                      rope_case{"forced_scalar_neox", 2, 5, 3, 64, 32, NX, 10000.0f, LAY_SCALAR, 0, 99}),
    [](const ::testing::TestParamInfo<rope_case> &i) { return std::string(i.param.name); });


// ===========================================================================
// rope(q) and rope_kv_update at the same positions: the CUDA backend fuses
// the pair into one launch (cuda/fuse.cu); the results are the two launches'
// bit for bit, and a bad position still leaves both caches as they were.

struct pair_case {
    const char *name;
    int B, T, Hq, Hkv, D;
    tg_rope_mode mode;
    tg_type kt, vt;
    int validate;  // knob kv_validate (0 auto: the update checks itself in the fused kernel; 2 separate kernel)
    int n_rot = 0;          // 0: D
    bool kv_first = false;  // the update's node before the rope's
};
void PrintTo(const pair_case &c, std::ostream *os) { *os << c.name; }
struct CudaSigRopePair : CudaSig, ::testing::WithParamInterface<pair_case> {};

struct pair_out {
    tg_status st = TG_OK;
    std::vector<float> q;  // the rotated q
    store k, v;            // the caches' backing bytes
    int fused = -1;        // rope pairs the last enqueue took (CUDA)
};

pair_out run_pair(tg_backend *be, const pair_case &c, const kv_data &d, const store &qin, const placed &pq) {
    pair_out r;
    built x;
    const kv_case &kc = d.c;
    tg_tensor *qb = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, pq.total);
    tg_tensor *kb = tg_new_tensor_1d(x.ctx, kc.kt, d.pk.total), *vb = tg_new_tensor_1d(x.ctx, kc.vt, d.pv.total);
    tg_tensor *knb = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, d.pn.total), *vnb = tg_new_tensor_1d(x.ctx, TG_TYPE_F32, d.pn.total);
    tg_tensor *pos = tg_new_tensor_2d(x.ctx, TG_TYPE_I32, c.T, c.B);
    tg_rope_params rp = tg_rope_default_params(c.n_rot ? c.n_rot : c.D);
    rp.mode = c.mode;
    tg_tensor *qr = tg_rope(x.ctx, view_of(x.ctx, qb, pq), pos, &rp);
    tg_tensor *kw = tg_rope_kv_update(x.ctx, view_of(x.ctx, kb, d.pk), view_of(x.ctx, vb, d.pv), view_of(x.ctx, knb, d.pn),
                                      view_of(x.ctx, vnb, d.pn), pos, nullptr, nullptr, &rp);
    EXPECT_TRUE(qr && kw) << tg_last_error();
    if (!qr || !kw) return (r.st = TG_ERR_ARG), r;
    x.g = tg_graph_new(x.ctx);
    EXPECT_EQ(tg_graph_expand(x.g, c.kv_first ? kw : qr), TG_OK);
    EXPECT_EQ(tg_graph_expand(x.g, c.kv_first ? qr : kw), TG_OK);
    x.buf = tg_backend_alloc(be, x.ctx);
    EXPECT_NE(x.buf, nullptr) << tg_last_error();
    x.set(qb, qin.b.data()), x.set(kb, d.k0.b.data()), x.set(vb, d.v0.b.data());
    x.set(knb, d.kn.b.data()), x.set(vnb, d.vn.b.data()), x.set(pos, d.pos.data());
    tg_graph_stats gs{};
    EXPECT_EQ(tg_graph_plan(x.g, &gs), TG_OK) << tg_last_error();
    poison_compute_buffer(be);
    r.st = tg_graph_compute(be, x.g);
#ifdef TG_HAVE_CUDA
    if (be->mem == TG_MEM_DEVICE) {
        int f[TG_CUDA_FUSION_KINDS];
        tg_cuda_fusions_last(be, f);
        r.fused = f[4];
    }
#endif
    r.q.resize((size_t)c.B * c.T * c.Hq * c.D);
    if (r.st == TG_OK) x.get(qr, r.q.data());
    r.k = store(kc.kt, d.pk.total), r.v = store(kc.vt, d.pv.total);
    x.get(kb, r.k.b.data()), x.get(vb, r.v.b.data());
    return r;
}

TEST_P(CudaSigRopePair, OneLaunchSameBitsAsTwo) {
#ifdef TG_HAVE_CUDA
    const pair_case &c = GetParam();
    const kv_case kc = {"", c.B, c.T, c.Hkv, c.D, 256, c.n_rot ? c.n_rot : c.D, c.mode, ANG_BASE, c.kt, c.vt, LAY_CONTIG,
                        c.validate};
    kv_data d = make_kv(kc, 31 + c.D);
    std::mt19937 rng(3 + c.B);
    const placed pq = place(TG_TYPE_F32, c.D, c.Hq, c.T, c.B, 0, 0, 0);
    store qin(TG_TYPE_F32, pq.total);
    const auto r = tgt::random_floats(rng, pq.total);
    for (size_t i = 0; i < r.size(); i++) qin.set(i, r[i]);
    knobs kb(c.validate, 0, 0, 0);
    for (int bad = 0; bad < 2; bad++) {
        if (bad) d.pos[d.pos.size() - 1] = 256;  // one past the cache: the update must fail and write nothing
        tg_cuda_set_fuse(gpu, true);
        const pair_out fused = run_pair(gpu, c, d, qin, pq);
        tg_cuda_set_fuse(gpu, false);
        const pair_out plain = run_pair(gpu, c, d, qin, pq);
        tg_cuda_set_fuse(gpu, true);
        if (HasFatalFailure()) return;
        EXPECT_EQ(fused.fused, 1) << "the pair was not one launch";
        EXPECT_EQ(plain.fused, 0);
        if (bad) {
            EXPECT_NE(fused.st, TG_OK);
            EXPECT_NE(plain.st, TG_OK);
            EXPECT_EQ(fused.k.b, d.k0.b) << "K cache changed by a failed fused update";
            EXPECT_EQ(fused.v.b, d.v0.b) << "V cache changed by a failed fused update";
            continue;
        }
        ASSERT_EQ(fused.st, TG_OK) << tg_last_error();
        ASSERT_EQ(plain.st, TG_OK) << tg_last_error();
        EXPECT_EQ(memcmp(fused.q.data(), plain.q.data(), fused.q.size() * 4), 0) << "rotated q differs";
        EXPECT_EQ(fused.k.b, plain.k.b) << "K cache differs";
        EXPECT_EQ(fused.v.b, plain.v.b) << "V cache differs";
        const pair_out ref = run_pair(cpu, c, d, qin, pq);
        ASSERT_EQ(ref.st, TG_OK) << tg_last_error();
        for (float x : fused.q) ASSERT_TRUE(std::isfinite(x));
        EXPECT_LT(tgt::rel_error(fused.q, std::vector<double>(ref.q.begin(), ref.q.end())), 1e-5) << "q vs the CPU";
        check_cache(d, d.pk, d.k0, ref.k, fused.k, "K");
        check_cache(d, d.pv, d.v0, ref.v, fused.v, "V");
    }
#endif
}
INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaSigRopePair,
    ::testing::Values(pair_case{"decode_d64_f32", 1, 1, 32, 8, 64, IL, F32, F32, 0},
                      pair_case{"decode_d128_neox_f16_b3", 3, 1, 32, 8, 128, NX, F16, F16, 0},
                      pair_case{"t4_d64_bf16_b2", 2, 4, 12, 4, 64, IL, BF16, F32, 0},
                      pair_case{"decode_separate_check", 2, 1, 16, 16, 64, IL, F32, F16, 2},
                      pair_case{"update_first_partial_rot_neox", 1, 1, 8, 2, 128, NX, F16, F32, 0, 64, true},
                      pair_case{"partial_rot_t3", 2, 3, 6, 3, 64, IL, F32, BF16, 0, 32}),
    [](const ::testing::TestParamInfo<pair_case> &i) { return std::string(i.param.name); });

}  // namespace
