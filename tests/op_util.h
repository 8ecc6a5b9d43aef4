// op_util.h - header-only helpers for the per-op-family tests (test_copy,
// test_binary, ...):
//  - an independent float64 model of f16 / bf16 (decode with ldexp, round to
//    nearest even with nearbyint), so oracles never call the library's
//    converters;
//  - inputs whose float64 values are known exactly, stored in any type and in
//    four layouts (contiguous, permuted, strided with NaN-filled gaps, strided
//    at a byte-misaligned offset);
//  - output sinks: a persistent view inside a larger persistent buffer whose
//    own elements are poisoned with NaN and whose other bytes are random
//    sentinels that must come back bit-identical;
//  - run(): compute an op result, poison it (and, when it is the only
//    intermediate, the planner's padding after it), compute again, read it
//    back, and check the tg_cpy of it into a sink.
// A test built on these fails on a NaN anywhere in an output, a stray write
// into a sentinel, or an element left unwritten (it stays NaN).
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tinygml.h"

namespace opu {

using shape = std::array<int64_t, 4>;

inline int64_t numel(const shape &ne) { return ne[0] * ne[1] * ne[2] * ne[3]; }
inline int64_t flat(const shape &ne, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
}
inline shape shape_of(const tg_tensor *t) { return {tg_ne(t, 0), tg_ne(t, 1), tg_ne(t, 2), tg_ne(t, 3)}; }
inline std::string shape_str(const shape &ne) {
    return "{" + std::to_string(ne[0]) + "," + std::to_string(ne[1]) + "," + std::to_string(ne[2]) + "," +
           std::to_string(ne[3]) + "}";
}

// ---------------------------------------------------------------------------
// Independent float64 model of the 16-bit storage types.

inline double f16_value(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp((double)m, -24)
                      : e == 31 ? (m ? NAN : INFINITY) : std::ldexp((double)(m + 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
inline double bf16_value(uint16_t b) {
    const int e = (b >> 7) & 255, m = b & 127;
    double v = e == 0 ? std::ldexp((double)m, -133)
                      : e == 255 ? (m ? NAN : INFINITY) : std::ldexp((double)(m + 128), e - 134);
    return (b & 0x8000) ? -v : v;
}

// x rounded to nearest even in a binary format of p significant bits,
// smallest normal exponent emin and largest finite value maxv; overflow
// gives +-inf. x / q and n * q are exact in double, so only nearbyint rounds.
inline double round_to_format(double x, int p, int emin, double maxv) {
    if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
    int e = std::ilogb(x);
    if (e < emin) e = emin;
    const double q = std::ldexp(1.0, e - (p - 1));
    const double r = std::nearbyint(x / q) * q;  // default mode: ties to even
    if (std::fabs(r) > maxv) return std::copysign(INFINITY, x);
    return std::copysign(r, x);
}
// Bits of a value r that the format represents exactly.
inline uint16_t encode_16(double r, int man_bits, int emin, int bias) {
    const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
    const uint16_t exp_mask = (uint16_t)(((1 << (15 - man_bits)) - 1) << man_bits);
    if (std::isnan(r)) return (uint16_t)(sign | exp_mask | (1u << (man_bits - 1)));
    const double a = std::fabs(r);
    if (std::isinf(a)) return (uint16_t)(sign | exp_mask);
    if (a == 0.0) return sign;
    const int e = std::ilogb(a);
    if (e < emin) return (uint16_t)(sign | (uint16_t)(a / std::ldexp(1.0, emin - man_bits)));
    const uint32_t m = (uint32_t)(a / std::ldexp(1.0, e - man_bits)) - (1u << man_bits);
    return (uint16_t)(sign | (uint32_t)(e + bias) << man_bits | m);
}
inline double round_f16(double x) { return round_to_format(x, 11, -14, 65504.0); }
inline double round_bf16(double x) { return round_to_format(x, 8, -126, std::ldexp(255.0, 120)); }
inline uint16_t f16_bits(double x) { return encode_16(round_f16(x), 10, -14, 15); }
inline uint16_t bf16_bits(double x) { return encode_16(round_bf16(x), 7, -126, 127); }

inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Store v (rounded to nearest even for the 16-bit types) / load as float64.
inline void store(tg_type t, uint8_t *p, double v) {
    switch (t) {
        case TG_TYPE_F32: {
            float f = (float)v;
            memcpy(p, &f, 4);
            break;
        }
        case TG_TYPE_F16: {
            uint16_t h = f16_bits(v);
            memcpy(p, &h, 2);
            break;
        }
        case TG_TYPE_BF16: {
            uint16_t h = bf16_bits(v);
            memcpy(p, &h, 2);
            break;
        }
        case TG_TYPE_I32: {
            int32_t i = (int32_t)v;
            memcpy(p, &i, 4);
            break;
        }
        default: ADD_FAILURE() << "bad type";
    }
}
inline double load(tg_type t, const uint8_t *p) {
    switch (t) {
        case TG_TYPE_F32: {
            float f;
            memcpy(&f, p, 4);
            return f;
        }
        case TG_TYPE_F16: {
            uint16_t h;
            memcpy(&h, p, 2);
            return f16_value(h);
        }
        case TG_TYPE_BF16: {
            uint16_t h;
            memcpy(&h, p, 2);
            return bf16_value(h);
        }
        case TG_TYPE_I32: {
            int32_t i;
            memcpy(&i, p, 4);
            return i;
        }
        default: ADD_FAILURE() << "bad type"; return NAN;
    }
}
inline double quantize(tg_type t, double v) {
    uint8_t b[4];
    store(t, b, v);
    return load(t, b);
}
// A NaN of type t (I32: a value no test uses) written at p.
inline void store_poison(tg_type t, uint8_t *p) {
    if (t == TG_TYPE_I32) {
        const int32_t v = 0x7eadbeef;
        memcpy(p, &v, 4);
    } else {
        store(t, p, NAN);
    }
}

inline std::vector<double> rand_vals(std::mt19937 &rng, tg_type t, int64_t n, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<double> v((size_t)n);
    for (auto &x : v) x = quantize(t, d(rng));
    return v;
}

// ---------------------------------------------------------------------------
// Comparisons

// ||out - ref|| / ||ref||; +inf when out has a NaN the reference does not,
// when sizes differ, or when ref is all zeros and out is not.
inline double rel_err(const std::vector<double> &out, const std::vector<double> &ref) {
    if (out.size() != ref.size()) return INFINITY;
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (std::isnan(out[i])) return INFINITY;
        const double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return std::sqrt(num / den);
}
inline ::testing::AssertionResult close(const std::vector<double> &out, const std::vector<double> &ref, double tol) {
    const double e = rel_err(out, ref);
    if (e < tol) return ::testing::AssertionSuccess();
    auto r = ::testing::AssertionFailure();
    r << "relative error " << e << " >= " << tol << " (" << out.size() << " values, " << ref.size() << " expected)";
    double worst = -1;
    size_t wi = 0;
    for (size_t i = 0; i < out.size() && i < ref.size(); i++) {
        double d = std::isnan(out[i]) ? INFINITY : std::fabs(out[i] - ref[i]);
        if (d > worst) worst = d, wi = i;
    }
    if (worst >= 0) r << "; worst at " << wi << ": got " << out[wi] << ", want " << ref[wi];
    return r;
}
// Exact equality, NaN matching NaN (copies and conversions).
inline ::testing::AssertionResult same(const std::vector<double> &out, const std::vector<double> &ref) {
    if (out.size() != ref.size())
        return ::testing::AssertionFailure() << out.size() << " values, " << ref.size() << " expected";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const bool ok = (std::isnan(out[i]) && std::isnan(ref[i])) ||
                        (out[i] == ref[i] && std::signbit(out[i]) == std::signbit(ref[i]));
        if (!ok && bad++ == 0) first = i;
    }
    if (!bad) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << ref.size() << " values differ; first at " << first
                                         << ": got " << out[first] << ", want " << ref[first];
}
// A constructor returned NULL and the error names the call.
inline ::testing::AssertionResult fails(const void *result, const char *prefix) {
    const char *e = tg_last_error();
    if (result) return ::testing::AssertionFailure() << "expected NULL from " << prefix << ", got a tensor";
    if (strncmp(e, prefix, strlen(prefix)) != 0)
        return ::testing::AssertionFailure() << "error \"" << e << "\" does not start with " << prefix;
    return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult fails(tg_status s, const char *prefix) {
    const char *e = tg_last_error();
    if (s == TG_OK) return ::testing::AssertionFailure() << "expected a failure from " << prefix << ", got TG_OK";
    if (strncmp(e, prefix, strlen(prefix)) != 0)
        return ::testing::AssertionFailure() << "error \"" << e << "\" does not start with " << prefix;
    return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// Layouts of an input as the op sees it.

enum class lay {
    contig,      // a plain tensor
    permuted,    // a tg_permute (dims reversed) of a tensor stored the other way round
    strided,     // a tg_view_4d with padded strides at an odd element offset; gaps hold NaN
    misaligned,  // as strided, at a byte offset that is not a multiple of the element size
};
inline const char *lay_name(lay l) {
    switch (l) {
        case lay::contig: return "contig";
        case lay::permuted: return "permuted";
        case lay::strided: return "strided";
        case lay::misaligned: return "misaligned";
    }
    return "?";
}
static const lay k_all_lays[] = {lay::contig, lay::permuted, lay::strided, lay::misaligned};

inline const char *type_str(tg_type t) { return tg_type_name(t) ? tg_type_name(t) : "bad"; }

// An output sink: dst, a view inside the persistent root, poisoned with NaN;
// every other byte of root is a random sentinel.
struct sink {
    tg_tensor *root = nullptr, *dst = nullptr;
    tg_type type = TG_TYPE_F32;
    shape ne{};
    std::vector<uint8_t> init;     // root bytes before each run
    std::vector<size_t> elem_off;  // byte offset in root of each dst element, logical order
};

// A no_alloc context, a CPU backend, inputs and sinks whose bytes are
// uploaded once storage exists (ready()).
class harness {
  public:
    tg_context *ctx = nullptr;
    tg_backend *be = nullptr;

    explicit harness(int threads = 2, uint32_t seed = 7) : rng_(seed) {
        tg_init_params ip = {1u << 20, nullptr, true};
        ctx = tg_init(ip);
        be = tg_backend_cpu(threads);
        EXPECT_TRUE(ctx && be) << tg_last_error();
    }
    ~harness() {
        for (tg_buffer *b : bufs_) tg_buffer_free(b);
        tg_backend_free(be);
        tg_free(ctx);
    }
    harness(const harness &) = delete;
    harness &operator=(const harness &) = delete;

    // An input of type t and logical shape ne holding vals (logical order,
    // ne0 fastest; rounded to t), in layout l.
    tg_tensor *input(tg_type t, const shape &ne, lay l, const std::vector<double> &vals) {
        const size_t es = tg_type_size(t);
        tg_tensor *root = nullptr, *x = nullptr;
        size_t base = 0;
        if (l == lay::contig) {
            x = root = tg_new_tensor(ctx, t, 4, ne.data());
        } else if (l == lay::permuted) {
            const int64_t rev[4] = {ne[3], ne[2], ne[1], ne[0]};
            root = tg_new_tensor(ctx, t, 4, rev);
            x = tg_permute(ctx, root, 3, 2, 1, 0);
        } else {
            // padded strides; the misaligned variant shifts everything by a byte
            // count that is not a multiple of the element size
            const size_t shift = l == lay::misaligned ? 1 : 0;
            const size_t nb1 = (size_t)(ne[0] + 3) * es + shift, nb2 = nb1 * (size_t)(ne[1] + 1) + shift,
                         nb3 = nb2 * (size_t)(ne[2] + 1);
            base = 5 * es + shift;
            const size_t bytes = base + nb3 * (size_t)ne[3] + 4 * es;
            root = tg_new_tensor_1d(ctx, t, (int64_t)((bytes + es - 1) / es));
            x = tg_view_4d(ctx, root, ne[0], ne[1], ne[2], ne[3], nb1, nb2, nb3, base);
            if (!x && l == lay::misaligned) {
                // a build may refuse byte-misaligned views; it must say so cleanly
                EXPECT_TRUE(fails(x, "[view_4d]"));
                return input(t, ne, lay::strided, vals);
            }
        }
        EXPECT_TRUE(x) << tg_last_error();
        if (!x) return nullptr;
        inputs_.push_back({x, root, base, t, ne});
        pending p;
        p.root = root;
        p.bytes = encode(inputs_.back(), vals);
        fills_.push_back(std::move(p));
        return x;
    }
    // New values for an input made by input() (uploaded now when it has storage).
    void set(tg_tensor *x, const std::vector<double> &vals) {
        for (const input_rec &r : inputs_)
            if (r.x == x) {
                pending p{r.root, encode(r, vals)};
                if (tg_tensor_data(r.root))
                    EXPECT_EQ(TG_OK, tg_tensor_set(r.root, p.bytes.data(), 0, p.bytes.size())) << tg_last_error();
                else
                    fills_.push_back(std::move(p));
                return;
            }
        ADD_FAILURE() << "set: not an input of this harness";
    }
    // Random input in [lo, hi); *vals gets the exact stored values.
    tg_tensor *rand_input(tg_type t, const shape &ne, lay l, std::mt19937 &rng, std::vector<double> *vals,
                          double lo = -1.0, double hi = 1.0) {
        *vals = rand_vals(rng, t, numel(ne), lo, hi);
        return input(t, ne, l, *vals);
    }

    // A sink of type t and shape ne; strided: gaps between rows (sentinels).
    sink *out(tg_type t, const shape &ne, bool strided = true) {
        const size_t es = tg_type_size(t);
        sinks_.emplace_back();
        sink &s = sinks_.back();
        s.type = t;
        s.ne = ne;
        const size_t nb1 = (size_t)(ne[0] + (strided ? 2 : 0)) * es, nb2 = nb1 * (size_t)(ne[1] + (strided ? 1 : 0)),
                     nb3 = nb2 * (size_t)ne[2];
        const size_t base = 3 * es, span = nb3 * (size_t)ne[3];
        s.root = tg_new_tensor_1d(ctx, t, (int64_t)((base + span) / es + 37));  // 37 sentinel elements after
        s.dst = tg_view_4d(ctx, s.root, ne[0], ne[1], ne[2], ne[3], nb1, nb2, nb3, base);
        EXPECT_TRUE(s.root && s.dst) << tg_last_error();
        s.init.resize(tg_nbytes(s.root));
        for (auto &b : s.init) b = (uint8_t)rng_();
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                        const size_t off = base + i0 * es + i1 * nb1 + i2 * nb2 + i3 * nb3;
                        s.elem_off.push_back(off);
                        store_poison(t, &s.init[off]);
                    }
        return &s;
    }

    // Allocate storage for every new leaf and upload pending input bytes.
    void ready() {
        bool need = false;
        for (const pending &p : fills_) need |= tg_tensor_data(p.root) == nullptr;
        for (const sink &s : sinks_) need |= tg_tensor_data(s.root) == nullptr;
        if (need) {
            tg_buffer *b = tg_backend_alloc(be, ctx);
            EXPECT_TRUE(b) << tg_last_error();
            if (b) bufs_.push_back(b);
        }
        for (const pending &p : fills_)
            EXPECT_EQ(TG_OK, tg_tensor_set(p.root, p.bytes.data(), 0, p.bytes.size())) << tg_last_error();
        fills_.clear();
        for (sink &s : sinks_) poison(&s);
    }
    void poison(sink *s) {
        EXPECT_EQ(TG_OK, tg_tensor_set(s->root, s->init.data(), 0, s->init.size())) << tg_last_error();
    }
    // Root bytes unchanged (after a failed compute).
    ::testing::AssertionResult untouched(const sink *s) {
        std::vector<uint8_t> now(s->init.size());
        if (tg_tensor_get(s->root, now.data(), 0, now.size()) != TG_OK)
            return ::testing::AssertionFailure() << tg_last_error();
        size_t bad = 0;
        for (size_t i = 0; i < now.size(); i++) bad += now[i] != s->init[i];
        if (bad) return ::testing::AssertionFailure() << bad << " bytes of the sink changed";
        return ::testing::AssertionSuccess();
    }
    // The dst values; every byte outside dst's elements must be as before.
    std::vector<double> read(const sink *s) {
        std::vector<uint8_t> now(s->init.size());
        EXPECT_EQ(TG_OK, tg_tensor_get(s->root, now.data(), 0, now.size())) << tg_last_error();
        std::vector<uint8_t> mask(now.size(), 0);
        const size_t es = tg_type_size(s->type);
        std::vector<double> v;
        for (size_t off : s->elem_off) {
            memset(&mask[off], 1, es);
            v.push_back(load(s->type, &now[off]));
        }
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < now.size(); i++)
            if (!mask[i] && now[i] != s->init[i] && bad++ == 0) first = i;
        EXPECT_EQ(0u, bad) << "sentinel bytes overwritten, first at byte " << first << " of " << now.size();
        return v;
    }

    tg_graph *graph(tg_tensor *a, tg_tensor *b = nullptr) {
        tg_graph *g = tg_graph_new(ctx);
        EXPECT_TRUE(g) << tg_last_error();
        EXPECT_EQ(TG_OK, tg_graph_expand(g, a)) << tg_last_error();
        if (b) {
            EXPECT_EQ(TG_OK, tg_graph_expand(g, b)) << tg_last_error();
        }
        return g;
    }

    // Run node (which writes s->dst, e.g. a tg_cpy into it) on the poisoned
    // sink and return what landed there.
    std::vector<double> run_into(tg_tensor *node, sink *s) {
        tg_graph *g = graph(node);
        ready();
        poison(s);
        EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
        return read(s);
    }

    // Compute an op result (contiguous, any type): once to place it, then again
    // after poisoning it and its sink. Returns the graph output as read back;
    // the sink (a tg_cpy of the result, into a strided view by default) must
    // hold the same values with its sentinels intact.
    std::vector<double> run(tg_tensor *result, bool strided_sink = true) {
        if (!result) {
            ADD_FAILURE() << "op constructor failed: " << tg_last_error();
            return {};
        }
        const tg_type t = tg_tensor_type(result);
        sink *s = out(t, shape_of(result), strided_sink);
        tg_tensor *c = tg_cpy(ctx, result, s->dst);
        EXPECT_TRUE(c) << tg_last_error();
        tg_graph *g = graph(result, c);
        ready();
        EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
        const size_t es = tg_type_size(t), n = (size_t)tg_nelements(result);
        std::vector<uint8_t> raw(n * es);
        for (size_t i = 0; i < n; i++) store_poison(t, &raw[i * es]);
        EXPECT_EQ(TG_OK, tg_tensor_set(result, raw.data(), 0, raw.size())) << tg_last_error();
        poison(s);
        // When the result is the graph's only intermediate the planner puts it
        // at the start of the CPU backend's compute buffer: the planned bytes
        // past it are padding the op must not write. Fill them with sentinels.
        tg_graph_stats st{};
        EXPECT_EQ(TG_OK, tg_graph_plan(g, &st));
        uint8_t *data = (uint8_t *)tg_tensor_data(result);
        std::vector<uint8_t> pad;
        if (st.n_intermediates == 1 && data && st.planned_bytes > raw.size()) {
            pad.resize(st.planned_bytes - raw.size());
            for (auto &b : pad) b = (uint8_t)rng_();
            memcpy(data + raw.size(), pad.data(), pad.size());
        }
        EXPECT_EQ(TG_OK, tg_graph_compute(be, g)) << tg_last_error();
        if (!pad.empty()) {
            EXPECT_EQ(0, memcmp(data + raw.size(), pad.data(), pad.size())) << "op wrote past its result";
        }
        EXPECT_EQ(TG_OK, tg_tensor_get(result, raw.data(), 0, raw.size())) << tg_last_error();
        std::vector<double> v(n);
        for (size_t i = 0; i < n; i++) v[i] = load(t, &raw[i * es]);
        EXPECT_TRUE(same(read(s), v)) << "the copy of the output into the sink differs from the output";
        return v;
    }

  private:
    struct input_rec {
        tg_tensor *x, *root;
        size_t base;  // byte offset of x's first element in root
        tg_type type;
        shape ne;
    };
    // root's bytes with vals at x's elements; gaps 0xff (NaN for float types, -1 for i32)
    static std::vector<uint8_t> encode(const input_rec &r, const std::vector<double> &vals) {
        EXPECT_EQ((size_t)numel(r.ne), vals.size());
        std::vector<uint8_t> bytes(tg_nbytes(r.root), 0xff);
        const shape &ne = r.ne;
        for (int64_t i3 = 0; i3 < ne[3]; i3++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i1 = 0; i1 < ne[1]; i1++)
                    for (int64_t i0 = 0; i0 < ne[0]; i0++) {
                        const size_t off = r.base + i0 * tg_nb(r.x, 0) + i1 * tg_nb(r.x, 1) + i2 * tg_nb(r.x, 2) +
                                           i3 * tg_nb(r.x, 3);
                        if (off + tg_type_size(r.type) > bytes.size()) {
                            ADD_FAILURE() << "input element outside its root";
                            return bytes;
                        }
                        store(r.type, &bytes[off], vals[(size_t)flat(ne, i0, i1, i2, i3)]);
                    }
        return bytes;
    }
    std::vector<input_rec> inputs_;
    struct pending {
        tg_tensor *root;
        std::vector<uint8_t> bytes;
    };
    std::vector<pending> fills_;
    std::deque<sink> sinks_;  // stable addresses
    std::vector<tg_buffer *> bufs_;
    std::mt19937 rng_;
};

}  // namespace opu
