// test_cuda_signature.cpp - the two signature ops (and plain rope) on CUDA
// against the CPU backend, which is the reference: rope, rope_kv_update,
// delta_rule. Each case runs the same graph on the same data on both
// backends. Caches and states live inside larger backing tensors, so that
// every byte the op must not touch (other rows, stride gaps, a sentinel tail)
// is checked to be bit-identical afterwards; outputs that are intermediates
// are computed into a compute buffer poisoned with NaN first.
// TG_TEST_SMALL=1 shrinks the shapes (for compute-sanitizer runs).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "internal.h"
#include "test_util.h"
#ifdef TG_HAVE_CUDA
#include "../cuda/signature.cuh"
#endif

namespace {

bool small_run() {
    const char *e = getenv("TG_TEST_SMALL");
    return e && *e && strcmp(e, "0") != 0;
}
int S(int full, int small) { return small_run() ? small : full; }

// Set a CUDA kernel knob for one scope (no-op without CUDA).
struct knobs {
#ifdef TG_HAVE_CUDA
    tg_cuda_sig_knobs saved = tg_cuda_sig;
    knobs(int kv_validate, int rope_scalar, int delta_tpc, int delta_scalar, int delta_kernel = 0, int kv_rounds = 0) {
        tg_cuda_sig.kv_validate = kv_validate, tg_cuda_sig.rope_scalar = rope_scalar;
        tg_cuda_sig.delta_tpc = delta_tpc, tg_cuda_sig.delta_scalar = delta_scalar;
        tg_cuda_sig.delta_kernel = delta_kernel, tg_cuda_sig.kv_rounds = kv_rounds;
    }
    ~knobs() { tg_cuda_sig = saved; }
#else
    knobs(int, int, int, int, int = 0, int = 0) {}
#endif
};

// ---------------------------------------------------------------------------
// Host storage of any float type, and a tensor placed inside a 1-D backing
// leaf at an element offset, with pad0 extra elements per row and a tail.

struct store {
    tg_type type;
    std::vector<uint8_t> b;
    store(tg_type t = TG_TYPE_F32, size_t n = 0) : type(t), b(n * tg_type_size(t)) {}
    size_t size() const { return b.size() / tg_type_size(type); }
    void set(size_t i, float v) {
        if (type == TG_TYPE_F32) {
            memcpy(&b[4 * i], &v, 4);
            return;
        }
        const uint16_t h = type == TG_TYPE_F16 ? tg_fp32_to_fp16(v) : tg_fp32_to_bf16(v);
        memcpy(&b[2 * i], &h, 2);
    }
    float get(size_t i) const {
        if (type == TG_TYPE_F32) {
            float f;
            memcpy(&f, &b[4 * i], 4);
            return f;
        }
        uint16_t h;
        memcpy(&h, &b[2 * i], 2);
        return type == TG_TYPE_F16 ? tg_fp16_to_fp32(h) : tg_bf16_to_fp32(h);
    }
    int ulp16(size_t i) const {  // 16-bit patterns as an ordered integer
        uint16_t h;
        memcpy(&h, &b[2 * i], 2);
        return (h & 0x8000) ? -(int)(h & 0x7fff) : (int)h;
    }
};

struct placed {
    tg_type type = TG_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1}, st[4] = {1, 1, 1, 1}, off = 0, total = 0;
    int64_t at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
        return off + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
    }
};
placed place(tg_type t, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t pad0, int64_t off, int64_t tail = 67) {
    placed p;
    p.type = t;
    const int64_t ne[4] = {n0, n1, n2, n3};
    memcpy(p.ne, ne, sizeof(ne));
    p.st[1] = n0 + pad0, p.st[2] = p.st[1] * n1, p.st[3] = p.st[2] * n2;
    p.off = off;
    p.total = off + p.st[3] * n3 + tail;
    return p;
}
tg_tensor *view_of(tg_context *ctx, tg_tensor *back, const placed &p) {
    const size_t es = tg_type_size(p.type);
    return tg_view_4d(ctx, back, p.ne[0], p.ne[1], p.ne[2], p.ne[3], p.st[1] * es, p.st[2] * es, p.st[3] * es,
                      p.off * es);
}
// Scatter a logical (contiguous ne-order) array into placed storage.
void scatter(const std::vector<float> &x, const placed &p, store &s) {
    size_t n = 0;
    for (int64_t i3 = 0; i3 < p.ne[3]; i3++)
        for (int64_t i2 = 0; i2 < p.ne[2]; i2++)
            for (int64_t i1 = 0; i1 < p.ne[1]; i1++)
                for (int64_t i0 = 0; i0 < p.ne[0]; i0++) s.set(p.at(i0, i1, i2, i3), x[n++]);
}

// A context + buffer + graph for one backend, freed together.
struct built {
    tg_context *ctx = nullptr;
    tg_buffer *buf = nullptr;
    tg_graph *g = nullptr;
    built() { ctx = tg_init({4u << 20, nullptr, true}); }
    ~built() {
        tg_buffer_free(buf);
        tg_free(ctx);
    }
    void set(tg_tensor *t, const void *d) { ASSERT_EQ(tg_tensor_set(t, d, 0, tg_nbytes(t)), TG_OK) << tg_last_error(); }
    void get(tg_tensor *t, void *d) { ASSERT_EQ(tg_tensor_get(t, d, 0, tg_nbytes(t)), TG_OK) << tg_last_error(); }
};
// NaN over the backend's whole compute buffer (intermediates), so that an
// output element the kernel forgets stays NaN and fails the comparison.
void poison_compute_buffer(tg_backend *be) {
    if (be->compute_buf) be->iface->memset(be, be->compute_buf, 0xff, be->compute_size);
}

struct CudaSig : ::testing::Test {
    static tg_backend *cpu, *gpu;
    static void SetUpTestSuite() {
        cpu = tg_backend_cpu(4);
        gpu = tg_cuda_available() ? tg_backend_cuda(0) : nullptr;
    }
    static void TearDownTestSuite() {
        tg_backend_free(gpu);
        tg_backend_free(cpu);
        gpu = cpu = nullptr;
    }
    void SetUp() override {
        if (!gpu) GTEST_SKIP() << "no CUDA device";
    }
};
tg_backend *CudaSig::cpu = nullptr;
tg_backend *CudaSig::gpu = nullptr;

// ===========================================================================
// rope_kv_update

enum { LAY_CONTIG, LAY_PADDED, LAY_UNALIGNED, LAY_PERMUTED, LAY_SCALAR };
enum { ANG_BASE, ANG_TABLE, ANG_TABLE_LONG };

struct kv_case {
    const char *name;
    int B, T, H, D, L, n_rot;
    tg_rope_mode mode;
    int angles;
    tg_type kt, vt;
    int layout;
    int validate;  // tg_cuda_sig.kv_validate: 0 auto, 1 fused, 2 separate kernel
    int rounds;    // tg_cuda_sig.kv_rounds: 0 auto, else chunks per thread forced
    int minb;      // tg_cuda_sig.kv_min_blocks
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
        tg_cuda_sig.kv_min_blocks = c.minb;
#endif
        ASSERT_EQ(run_kv(gpu, d, kg, vg), TG_OK) << tg_last_error();
    }
    check_cache(d, d.pk, d.k0, kc, kg, "K");
    check_cache(d, d.pv, d.v0, vc, vg, "V");
}

const tg_type F32 = TG_TYPE_F32, F16 = TG_TYPE_F16, BF16 = TG_TYPE_BF16;
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
        {"prefill_rounds4_minblocks3", Bp, Tl, 4, 128, 512, 128, IL, ANG_TABLE, F32, F32, LAY_CONTIG, 0, 4, 3},
        {"fused_minblocks3_bf16", 2, 16, 8, 128, 64, 128, IL, ANG_TABLE, BF16, F16, LAY_CONTIG, 0, 4, 3},
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
// delta_rule

struct dr_case {
    const char *name;
    int B, T, Hk, Hv, Dk, Dv;
    tg_delta_mode mode;
    tg_gate_kind gate;
    bool l2norm;
    int state;   // -1: no state, else a tg_type
    int layout;  // LAY_CONTIG; LAY_UNALIGNED: state view off by one element (scalar path), q/k/v cut from one
                 // fused qkv tensor; LAY_SCALAR: forced scalar state path
    int tpc;     // tg_cuda_sig.delta_tpc
    int kern;    // tg_cuda_sig.delta_kernel: 0 auto, 1 chunk, 2 decode, 3 decode-reg
};
void PrintTo(const dr_case &c, std::ostream *os) { *os << c.name; }

struct dr_data {
    dr_case c;
    float scale;
    std::vector<float> q, k, v, g, beta, s0;  // logical layouts; s0: {Dk, Dv, Hv, B}
    placed ps;
    store st0;
};

dr_data make_dr(const dr_case &c, uint32_t seed) {
    std::mt19937 rng(seed);
    dr_data d;
    d.c = c;
    d.scale = 1.0f / std::sqrt((float)c.Dk);
    const size_t nq = (size_t)c.Dk * c.Hk * c.T * c.B, nv = (size_t)c.Dv * c.Hv * c.T * c.B, ng = (size_t)c.Hv * c.T * c.B;
    d.q = tgt::random_floats(rng, nq), d.k = tgt::random_floats(rng, nq), d.v = tgt::random_floats(rng, nv);
    // the delta rule is stable for beta |k|^2 < 2: scale k when it is not normalized
    if (c.mode == TG_DELTA_GATED_DELTA && !c.l2norm)
        for (auto &x : d.k) x /= std::sqrt((float)c.Dk);
    d.g = c.gate == TG_GATE_LOG ? tgt::random_floats(rng, ng, -0.15f, 0.0f) : tgt::random_floats(rng, ng, 0.85f, 1.0f);
    d.beta = tgt::random_floats(rng, ng, 0.0f, 1.0f);
    const int64_t off = c.layout == LAY_UNALIGNED ? 1 : 0;
    d.ps = place(c.state < 0 ? TG_TYPE_F32 : (tg_type)c.state, c.Dk, c.Dv, c.Hv, c.B, off, off);
    d.st0 = store(d.ps.type, d.ps.total);
    const auto r = tgt::random_floats(rng, d.ps.total, -0.5f, 0.5f);
    for (size_t i = 0; i < r.size(); i++) d.st0.set(i, r[i]);
    d.s0.resize((size_t)c.Dk * c.Dv * c.Hv * c.B);
    size_t n = 0;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++)
            for (int j = 0; j < c.Dv; j++)
                for (int i = 0; i < c.Dk; i++) d.s0[n++] = d.st0.get(d.ps.at(i, j, h, b));
    return d;
}

// o and the state's backing after the op on be.
void run_dr(tg_backend *be, const dr_data &d, std::vector<float> &o, store &st) {
    const dr_case &c = d.c;
    built x;
    tg_tensor *q, *k, *v, *qkv = nullptr, *tq = nullptr, *tk = nullptr, *tv = nullptr;
    const int64_t row = 2 * (int64_t)c.Dk * c.Hk + (int64_t)c.Dv * c.Hv;  // fused qkv row (per token)
    if (c.layout == LAY_UNALIGNED) {
        qkv = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, row, c.T, c.B);
        const size_t n2 = row * 4, n3 = n2 * c.T;
        q = tg_view_4d(x.ctx, qkv, c.Dk, c.Hk, c.T, c.B, c.Dk * 4, n2, n3, 0);
        k = tg_view_4d(x.ctx, qkv, c.Dk, c.Hk, c.T, c.B, c.Dk * 4, n2, n3, (size_t)c.Dk * c.Hk * 4);
        v = tg_view_4d(x.ctx, qkv, c.Dv, c.Hv, c.T, c.B, c.Dv * 4, n2, n3, (size_t)2 * c.Dk * c.Hk * 4);
    } else {
        q = tq = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        k = tk = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dk, c.Hk, c.T, c.B);
        v = tv = tg_new_tensor_4d(x.ctx, TG_TYPE_F32, c.Dv, c.Hv, c.T, c.B);
    }
    tg_tensor *g = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *beta = tg_new_tensor_3d(x.ctx, TG_TYPE_F32, c.Hv, c.T, c.B);
    tg_tensor *sb = c.state >= 0 ? tg_new_tensor_1d(x.ctx, d.ps.type, d.ps.total) : nullptr;
    const tg_delta_params dp = {c.mode, c.gate, d.scale, c.l2norm};
    tg_tensor *out = tg_delta_rule(x.ctx, q, k, v, g, beta, sb ? view_of(x.ctx, sb, d.ps) : nullptr, &dp);
    ASSERT_NE(out, nullptr) << tg_last_error();
    x.g = tg_graph_new(x.ctx);
    tg_graph_expand(x.g, out);
    x.buf = tg_backend_alloc(be, x.ctx);
    ASSERT_NE(x.buf, nullptr) << tg_last_error();
    if (qkv) {
        std::vector<float> f((size_t)row * c.T * c.B);
        for (int b = 0; b < c.B; b++)
            for (int t = 0; t < c.T; t++) {
                float *dst = &f[((size_t)b * c.T + t) * row];
                const size_t nqk = (size_t)c.Dk * c.Hk, nvv = (size_t)c.Dv * c.Hv, tok = (size_t)b * c.T + t;
                memcpy(dst, &d.q[tok * nqk], nqk * 4), memcpy(dst + nqk, &d.k[tok * nqk], nqk * 4);
                memcpy(dst + 2 * nqk, &d.v[tok * nvv], nvv * 4);
            }
        x.set(qkv, f.data());
    } else {
        x.set(tq, d.q.data()), x.set(tk, d.k.data()), x.set(tv, d.v.data());
    }
    x.set(g, d.g.data()), x.set(beta, d.beta.data());
    // compute, poison the intermediates, restore the state, compute again
    if (sb) x.set(sb, d.st0.b.data());
    ASSERT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    poison_compute_buffer(be);
    if (sb) x.set(sb, d.st0.b.data());
    ASSERT_EQ(tg_graph_compute(be, x.g), TG_OK) << tg_last_error();
    o.resize((size_t)c.Dv * c.Hv * c.T * c.B);
    x.get(out, o.data());
    st = store(d.ps.type, d.ps.total);
    if (sb) x.get(sb, st.b.data());
}

// Float64 oracle, straight from DESIGN.md, to tell a CPU fault from a GPU one.
void oracle_dr(const dr_data &d, std::vector<double> &o, std::vector<double> &sf) {
    const dr_case &c = d.c;
    o.assign((size_t)c.Dv * c.Hv * c.T * c.B, 0.0), sf.assign((size_t)c.Dk * c.Dv * c.Hv * c.B, 0.0);
    std::vector<double> S((size_t)c.Dk * c.Dv), q(c.Dk), k(c.Dk), u(c.Dv);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            const int hk = h / (c.Hv / c.Hk);
            for (size_t e = 0; e < S.size(); e++) S[e] = c.state >= 0 ? d.s0[((size_t)b * c.Hv + h) * S.size() + e] : 0.0;
            for (int t = 0; t < c.T; t++) {
                const size_t tok = (size_t)b * c.T + t, gi = tok * c.Hv + h;
                double nq = 0, nk = 0;
                for (int i = 0; i < c.Dk; i++) {
                    q[i] = d.q[(tok * c.Hk + hk) * c.Dk + i], k[i] = d.k[(tok * c.Hk + hk) * c.Dk + i];
                    nq += q[i] * q[i], nk += k[i] * k[i];
                }
                for (int i = 0; c.l2norm && i < c.Dk; i++) q[i] /= std::sqrt(nq + 1e-6), k[i] /= std::sqrt(nk + 1e-6);
                const double a = c.gate == TG_GATE_LOG ? std::exp((double)d.g[gi]) : d.g[gi], be = d.beta[gi];
                const float *vt = &d.v[(tok * c.Hv + h) * c.Dv];
                for (int j = 0; j < c.Dv; j++) {
                    double *col = &S[(size_t)j * c.Dk], dot = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] *= a, dot += col[i] * k[i];
                    u[j] = c.mode == TG_DELTA_GATED_DELTA ? be * (vt[j] - dot) : be * vt[j];
                    double y = 0;
                    for (int i = 0; i < c.Dk; i++) col[i] += k[i] * u[j], y += col[i] * q[i];
                    o[(tok * c.Hv + h) * c.Dv + j] = d.scale * y;
                }
            }
            std::copy(S.begin(), S.end(), sf.begin() + ((size_t)b * c.Hv + h) * S.size());
        }
}

struct CudaSigDeltaRule : CudaSig, ::testing::WithParamInterface<dr_case> {};

TEST_P(CudaSigDeltaRule, MatchesCpu) {
    const dr_case &c = GetParam();
    const dr_data d = make_dr(c, 4321 + c.Dk * 3 + c.T);
    std::vector<float> oc, og;
    store sc, sg;
    run_dr(cpu, d, oc, sc);
    {
        knobs k(0, 0, c.tpc, c.layout == LAY_SCALAR, c.kern);
        run_dr(gpu, d, og, sg);
    }
    std::vector<double> oref, sref;
    oracle_dr(d, oref, sref);
    const double e_cpu = tgt::rel_error(og, std::vector<double>(oc.begin(), oc.end()));
    EXPECT_LT(e_cpu, 1e-4) << "o: GPU vs CPU (GPU vs float64 oracle " << tgt::rel_error(og, oref)
                           << ", CPU vs oracle " << tgt::rel_error(oc, oref) << ")";
    EXPECT_LT(tgt::rel_error(og, oref), 1e-4) << "o: GPU vs float64 oracle";
    if (c.state < 0) return;
    // final state: written elements vs the CPU; every other byte unchanged
    std::vector<char> in(d.ps.total, 0);
    std::vector<float> gs, cs;
    int bad_ulp = 0;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++)
            for (int j = 0; j < c.Dv; j++)
                for (int i = 0; i < c.Dk; i++) {
                    const int64_t e = d.ps.at(i, j, h, b);
                    in[e] = 1;
                    gs.push_back(sg.get(e)), cs.push_back(sc.get(e));
                    if (d.ps.type != TG_TYPE_F32 && std::abs(sg.ulp16(e) - sc.ulp16(e)) > 1) bad_ulp++;
                }
    EXPECT_LT(tgt::rel_error(gs, std::vector<double>(cs.begin(), cs.end())), d.ps.type == TG_TYPE_F32 ? 1e-4 : 1e-2)
        << "final state: GPU vs CPU (GPU vs oracle " << tgt::rel_error(gs, sref) << ")";
    EXPECT_EQ(bad_ulp, 0) << "final state: elements more than 1 ulp of the storage type from the CPU";
    const size_t es = tg_type_size(d.ps.type);
    int64_t changed = 0;
    for (int64_t e = 0; e < d.ps.total; e++)
        if (!in[e]) changed += memcmp(&sg.b[e * es], &d.st0.b[e * es], es) != 0;
    EXPECT_EQ(changed, 0) << "GPU wrote outside the state (gaps or sentinel)";
}

const tg_delta_mode GL = TG_DELTA_GATED_LINEAR, GD = TG_DELTA_GATED_DELTA;
const tg_gate_kind LIN = TG_GATE_LINEAR, LOG = TG_GATE_LOG;

std::vector<dr_case> dr_cases() {
    const int Tl = S(512, 48), Bd = S(4, 2);
    return {
        {"gla_seed", 4, 64, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 0},
        {"gla_seed_tpc4", 4, 64, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 4},
        {"gdn_D48_tpc8_state", 2, 19, 2, 2, 48, 40, GD, LOG, true, F32, LAY_CONTIG, 8},
        {"gla_D32_tpc8_decode_kernel", 2, 7, 2, 2, 32, 32, GL, LOG, false, BF16, LAY_CONTIG, 8, 2},
        {"gla_seed_B1_T1", 1, 1, 8, 8, 24, 24, GL, LIN, false, -1, LAY_CONTIG, 0},
        {"gdn_decode_scaled", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_tpc8", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8},
        {"gdn_prefill_long", 2, Tl, 1, 2, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_prefill_long_tpc4", 1, Tl, 1, 1, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 4},
        {"gla_prefill_long_state", 2, Tl, 2, 2, 64, 64, GL, LOG, false, F32, LAY_CONTIG, 0},
        {"gdn_64_no_l2norm_linear_gate", 2, 40, 2, 4, 64, 64, GD, LIN, false, F32, LAY_CONTIG, 0},
        {"gdn_Hv2Hk_D80", 2, 17, 2, 4, 80, 80, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gla_Hv2Hk_D40", 3, 9, 1, 2, 40, 40, GL, LIN, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk100_Dv40", 2, 33, 2, 2, 100, 40, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk24_Dv200", 1, 12, 1, 2, 24, 200, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_Dk256_Dv256", 1, 9, 1, 1, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gla_Dk3_Dv5_scalar", 2, 7, 1, 3, 3, 5, GL, LOG, false, F32, LAY_CONTIG, 0},
        {"gdn_Dk1_Dv1", 2, 5, 1, 1, 1, 1, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_f16_state", 2, 20, 2, 2, 128, 128, GD, LOG, true, F16, LAY_CONTIG, 0},
        {"gla_bf16_state_D64", 2, 20, 2, 4, 64, 64, GL, LIN, false, BF16, LAY_CONTIG, 0},
        {"gdn_unaligned_state_fused_qkv", 2, 11, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0},
        {"gdn_bf16_unaligned_state", 2, 11, 2, 2, 128, 64, GD, LOG, true, BF16, LAY_UNALIGNED, 0},
        {"gdn_forced_scalar_state", 2, 11, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0},
        {"gla_no_state_D128", 2, 30, 2, 2, 128, 128, GL, LOG, true, -1, LAY_CONTIG, 0},
        // the decode kernels (auto at T == 1) forced at any T, and the chunk kernel at T == 1
        {"gdn_decode_chunk_kernel", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 1},
        {"gdn_decode_reg_kernel", Bd, 1, 4, 4, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 3},
        {"gdn_decode_D64_Hv2Hk", 3, 1, 2, 4, 64, 64, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk100_Dv40", 2, 1, 2, 2, 100, 40, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk256_Dv256", 1, 1, 1, 2, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0},
        {"gdn_decode_Dk24_Dv200_bf16", 2, 1, 1, 2, 24, 200, GD, LOG, true, BF16, LAY_CONTIG, 0},
        {"gla_decode_f16_state_no_l2", 2, 1, 2, 2, 64, 48, GL, LIN, false, F16, LAY_CONTIG, 0},
        {"gdn_decode_unaligned_state", 2, 1, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0},
        {"gdn_decode_forced_scalar", 2, 1, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0},
        {"gdn_decode_no_state", 2, 1, 2, 2, 128, 128, GD, LOG, true, -1, LAY_CONTIG, 0},
        {"decode_kernel_T17_D80", 2, 17, 2, 4, 80, 80, GD, LOG, true, F32, LAY_CONTIG, 0, 2},
        {"decode_kernel_T9_f16_Dk100", 2, 9, 2, 2, 100, 40, GD, LOG, true, F16, LAY_CONTIG, 0, 2},
        {"decode_kernel_T12_gla_lin", 2, 12, 1, 3, 32, 24, GL, LIN, false, F32, LAY_CONTIG, 0, 2},
        {"decode_kernel_T9_Dk256", 1, 9, 1, 1, 256, 256, GD, LOG, true, BF16, LAY_CONTIG, 0, 2},
        {"decode_kernel_T11_tpc8", 2, 11, 1, 2, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8, 2},
        {"decode_reg_T11_scalar", 2, 11, 2, 2, 128, 128, GD, LOG, true, F32, LAY_SCALAR, 0, 3},
        {"decode_reg_T7_bf16_unaligned", 2, 7, 2, 2, 128, 64, GD, LOG, true, BF16, LAY_UNALIGNED, 0, 3},
        {"decode_kernel_fused_qkv_fallback", 2, 5, 2, 4, 64, 48, GD, LOG, true, F32, LAY_UNALIGNED, 0, 2},
        // the persistent decode kernel (T == 1; more tiles than warps, partial tiles, all state types)
        {"persistent_gdn_D128", S(40, 9), 1, 4, 8, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
        {"persistent_gdn_D128_tpc8", 9, 1, 4, 8, 128, 128, GD, LOG, true, F32, LAY_CONTIG, 8, 4},
        {"persistent_Dk100_Dv40_f16", 3, 1, 2, 2, 100, 40, GD, LOG, true, F16, LAY_CONTIG, 0, 4},
        {"persistent_Dk24_Dv200_bf16", 2, 1, 1, 2, 24, 200, GD, LOG, true, BF16, LAY_CONTIG, 0, 4},
        {"persistent_Dk256", 2, 1, 1, 2, 256, 256, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
        {"persistent_gla_no_state", 3, 1, 2, 4, 64, 36, GL, LIN, false, -1, LAY_CONTIG, 0, 4},
        {"persistent_T5_falls_back", 2, 5, 2, 4, 64, 64, GD, LOG, true, F32, LAY_CONTIG, 0, 4},
    };
}
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigDeltaRule, ::testing::ValuesIn(dr_cases()),
                         [](const ::testing::TestParamInfo<dr_case> &i) { return std::string(i.param.name); });

// T tokens at once (chunk kernel) equals T decode steps carrying the state
// (on the GPU), bit for bit: the decode kernels do the chunk kernel's
// arithmetic in its order (same TPC). Each decode kernel, Dk 64 and 128.
struct steps_case {
    int Dk, tpc, step_kernel;  // step_kernel: tg_cuda_sig.delta_kernel of the T = 1 calls
};
void chunk_equals_steps(const steps_case &sc) {
    const dr_case c = {"steps", 2, 8, 2, 4, sc.Dk, 64, GD, LOG, true, F32, LAY_CONTIG, sc.tpc};
    const dr_data d = make_dr(c, 77 + sc.Dk);
    std::vector<float> o_all;
    store s_all;
    {
        knobs k(0, 0, sc.tpc, 0, 1);
        run_dr(CudaSig::gpu, d, o_all, s_all);
    }
    dr_data step = d;
    step.c.T = 1;
    std::vector<float> o_steps(o_all.size());
    for (int t = 0; t < c.T; t++) {
        auto slice = [&](const std::vector<float> &x, size_t per_tok) {
            std::vector<float> y;
            for (int b = 0; b < c.B; b++) {
                const float *p = &x[((size_t)b * c.T + t) * per_tok];
                y.insert(y.end(), p, p + per_tok);
            }
            return y;
        };
        step.q = slice(d.q, (size_t)c.Dk * c.Hk), step.k = slice(d.k, (size_t)c.Dk * c.Hk);
        step.v = slice(d.v, (size_t)c.Dv * c.Hv), step.g = slice(d.g, c.Hv), step.beta = slice(d.beta, c.Hv);
        std::vector<float> o1;
        store s1;
        {
            knobs k(0, 0, sc.tpc, 0, sc.step_kernel);
            run_dr(CudaSig::gpu, step, o1, s1);
        }
        step.st0 = s1;  // carry the state
        for (int b = 0; b < c.B; b++)
            std::copy(&o1[(size_t)b * c.Dv * c.Hv], &o1[(size_t)(b + 1) * c.Dv * c.Hv],
                      &o_steps[((size_t)b * c.T + t) * c.Dv * c.Hv]);
    }
    EXPECT_EQ(0, memcmp(o_steps.data(), o_all.data(), o_all.size() * sizeof(float)))
        << "outputs differ between one call and T decode steps (rel " 
        << tgt::rel_error(o_steps, std::vector<double>(o_all.begin(), o_all.end())) << ")";
    EXPECT_EQ(step.st0.b, s_all.b) << "final state differs between one call and T decode steps";
}
TEST_F(CudaSig, DeltaRuleChunkEqualsSteps) {
    for (const steps_case sc : {steps_case{64, 0, 0}, steps_case{64, 0, 2}, steps_case{64, 0, 3}, steps_case{64, 0, 4},
                                steps_case{64, 0, 1}, steps_case{128, 4, 0}, steps_case{128, 4, 4},
                                steps_case{128, 8, 2}, steps_case{128, 8, 3}, steps_case{128, 8, 4},
                                steps_case{32, 8, 0}, steps_case{32, 8, 4}}) {
        SCOPED_TRACE("Dk " + std::to_string(sc.Dk) + " tpc " + std::to_string(sc.tpc) + " step kernel " +
                     std::to_string(sc.step_kernel));
        chunk_equals_steps(sc);
    }
}

// Gates of +1e4 (LOG: a = inf) on a zero state, -inf (a = 0), and one NaN:
// no NaN where the math has none, and the NaN exactly where the CPU has it.
struct CudaSigDeltaGates : CudaSig, ::testing::WithParamInterface<int> {};
TEST_P(CudaSigDeltaGates, ExtremeGates) {
    const dr_case c = {"gates", 2, 6, 2, 2, 64, 64, GD, LOG, true, -1, LAY_CONTIG, 0};
    knobs kn(0, 0, 0, 0, GetParam());
    dr_data d = make_dr(c, 11);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            d.g[((size_t)b * c.T + 0) * c.Hv + h] = 1e4f;       // the first token of a fresh sequence
            d.g[((size_t)b * c.T + 3) * c.Hv + h] = -INFINITY;  // forget everything
        }
    d.g[((size_t)1 * c.T + 4) * c.Hv + 1] = NAN;  // sequence 1, head 1, from token 4 on
    std::vector<float> oc, og;
    store sc, sg;
    run_dr(cpu, d, oc, sc);
    run_dr(gpu, d, og, sg);
    std::vector<float> g;
    std::vector<double> r;
    int nan_mismatch = 0, nans = 0;
    for (size_t i = 0; i < oc.size(); i++) {
        nans += std::isnan(oc[i]);
        if (std::isnan(oc[i]) != std::isnan(og[i])) nan_mismatch++;
        else if (!std::isnan(oc[i])) g.push_back(og[i]), r.push_back(oc[i]);
    }
    EXPECT_GT(nans, 0);
    EXPECT_EQ(nan_mismatch, 0) << "NaN outputs differ between GPU and CPU";
    EXPECT_LT(tgt::rel_error(g, r), 1e-4);
}
// 0: auto (chunk kernel at T = 6), 2: decode kernel, 3: decode-reg kernel, both stepping T = 6
INSTANTIATE_TEST_SUITE_P(Cuda, CudaSigDeltaGates, ::testing::Values(0, 2, 3),
                         [](const ::testing::TestParamInfo<int> &i) { return "kernel" + std::to_string(i.param); });

}  // namespace
