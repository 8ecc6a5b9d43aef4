// test_fp16.cpp - the scalar converters tg_fp16_to_fp32 / tg_fp32_to_fp16 and
// tg_bf16_to_fp32 / tg_fp32_to_bf16 against an independent float64 model
// (op_util.h: decode with ldexp, round with nearbyint). Exhaustive over all
// 65536 16-bit patterns; rounding checked at every value, tie and tie
// neighbour of each format, at the overflow and underflow edges, and on
// random f32 bit patterns.
#include <cfloat>
#include <limits>

#include "op_util.h"

using namespace opu;

namespace {

struct format16 {
    const char *name;
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
    double (*value)(uint16_t);   // independent decoder
    uint16_t (*bits)(double);    // independent round-to-nearest-even encoder
    uint16_t inf_bits;           // 0x7c00 / 0x7f80
    int man_bits;                // 10 / 7
    int emax;                    // 15 / 127
};

const format16 k_f16 = {"f16", tg_fp16_to_fp32, tg_fp32_to_fp16, f16_value, f16_bits, 0x7c00, 10, 15};
const format16 k_bf16 = {"bf16", tg_bf16_to_fp32, tg_fp32_to_bf16, bf16_value, bf16_bits, 0x7f80, 7, 127};

bool is_nan16(uint16_t h, const format16 &f) { return (h & 0x7fff) > f.inf_bits; }

// Every 16-bit pattern decodes to the model's value (NaN to a NaN), and
// encoding that float gives the pattern back (NaN: a NaN).
void exhaustive_round_trip(const format16 &f) {
    int n_sub = 0, n_nan = 0, n_inf = 0, n_zero = 0, bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float x = f.to_f32(h);
        const double want = f.value(h);
        const uint16_t back = f.from_f32(x);
        const int e = (h & 0x7fff) >> f.man_bits;
        if (std::isnan(want)) {
            n_nan++;
            if (!std::isnan(x) || !is_nan16(back, f)) {
                if (bad++ < 5) ADD_FAILURE() << f.name << " NaN 0x" << std::hex << h << " -> " << x << " -> 0x" << back;
            }
            continue;
        }
        n_inf += std::isinf(want);
        n_zero += want == 0.0;
        n_sub += e == 0 && want != 0.0;
        if ((double)x != want || std::signbit(x) != std::signbit(want) || back != h) {
            if (bad++ < 5)
                ADD_FAILURE() << f.name << " 0x" << std::hex << h << std::dec << ": to_f32 " << x << " (want " << want
                              << "), back 0x" << std::hex << back;
        }
    }
    EXPECT_EQ(0, bad);
    const int n_man = (1 << f.man_bits) - 1;
    EXPECT_EQ(2 * n_man, n_sub);  // the sweep did cover subnormals, inf, NaN and both zeros
    EXPECT_EQ(2 * n_man, n_nan);
    EXPECT_EQ(2, n_inf);
    EXPECT_EQ(2, n_zero);
}

// The floats where rounding decides: each finite value, the exact midpoint to
// the next one up (a tie), and the f32 neighbours of both; negated too.
std::vector<float> rounding_points(const format16 &f) {
    std::vector<float> pts;
    for (uint32_t h = 0; h < f.inf_bits; h++) {
        const double v = f.value((uint16_t)h);
        // past the largest finite value the next step is 2^(emax+1) (the overflow tie)
        const double next = h + 1 < f.inf_bits ? f.value((uint16_t)(h + 1)) : std::ldexp(1.0, f.emax + 1);
        const float mid = (float)((v + next) / 2);
        EXPECT_EQ((v + next) / 2, (double)mid) << "midpoint not exact in f32";
        for (float p : {(float)v, mid}) {
            for (float q : {p, std::nextafter(p, INFINITY), std::nextafter(p, -INFINITY)}) {
                pts.push_back(q);
                pts.push_back(-q);
            }
        }
    }
    const float specials[] = {0.0f, INFINITY, FLT_MAX, FLT_MIN, std::numeric_limits<float>::denorm_min(),
                              f32_from_bits(0x7fc00000u), f32_from_bits(0x7f800001u), f32_from_bits(0x7fffffffu),
                              65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, 5.9604645e-8f, 2.9802322e-8f};
    for (float s : specials) {
        pts.push_back(s);
        pts.push_back(-s);
    }
    std::mt19937 rng(1234);
    for (int i = 0; i < (1 << 20); i++) pts.push_back(f32_from_bits((uint32_t)rng()));  // any exponent, NaNs
    std::uniform_int_distribution<int> near_exp(std::max(0, 127 - f.emax - 14), std::min(254, 127 + f.emax + 2));
    for (int i = 0; i < (1 << 20); i++) {
        uint32_t u = (uint32_t)rng() & 0x807fffffu;
        u |= (uint32_t)near_exp(rng) << 23;  // exponents around the format's range
        pts.push_back(f32_from_bits(u));
    }
    return pts;
}

void rounding_matches_model(const format16 &f) {
    const std::vector<float> pts = rounding_points(f);
    int bad = 0, inexact = 0;
    for (float x : pts) {
        const uint16_t got = f.from_f32(x), want = f.bits((double)x);
        const bool ok = std::isnan(x) ? is_nan16(got, f) : got == want;
        if (!ok && bad++ < 5)
            ADD_FAILURE() << f.name << "(" << std::hexfloat << x << std::defaultfloat << " = " << x << "): got 0x"
                          << std::hex << got << ", want 0x" << want;
        // count the points where rounding had to happen, proof the sweep is not trivial
        inexact += !std::isnan(x) && (double)x != f.value(want);
    }
    EXPECT_EQ(0, bad) << "of " << pts.size() << " points";
    EXPECT_GT(inexact, 100000);
}

TEST(Fp16, ExhaustiveRoundTrip) { exhaustive_round_trip(k_f16); }
TEST(Fp16, RoundsToNearestEven) { rounding_matches_model(k_f16); }
TEST(Bf16, ExhaustiveRoundTrip) { exhaustive_round_trip(k_bf16); }
TEST(Bf16, RoundsToNearestEven) { rounding_matches_model(k_bf16); }

// Points whose answer is known by hand, so the model itself is checked too.
TEST(Fp16, KnownValues) {
    struct kv {
        float x;
        uint16_t h;
    };
    const kv cases[] = {
        {1.0f, 0x3c00},       {-2.0f, 0xc000},          {65504.0f, 0x7bff},      {65519.0f, 0x7bff},
        {65520.0f, 0x7c00},   {1e6f, 0x7c00},           {-1e6f, 0xfc00},         {5.9604645e-8f, 0x0001},  // 2^-24
        {2.9802322e-8f, 0x0000},                                                 // 2^-25: tie to even (0)
        {4.4703484e-8f, 0x0001},                                                 // 1.5 * 2^-25 -> 2^-24
        {8.940697e-8f, 0x0002},                                                  // 1.5 * 2^-24: tie -> even 2
        {6.1035156e-5f, 0x0400},                                                 // 2^-14, smallest normal
        {1.0009766f, 0x3c01},  {1.00048828125f, 0x3c00},                        // tie 1 + 2^-11 -> 1 (even)
        {1.00146484375f, 0x3c02},                                                // tie 1 + 3*2^-11 -> 1 + 2^-9
        {-0.0f, 0x8000},
    };
    for (const kv &c : cases) {
        EXPECT_EQ(c.h, tg_fp32_to_fp16(c.x)) << c.x;
        EXPECT_EQ(c.h, f16_bits(c.x)) << "model: " << c.x;
    }
    EXPECT_EQ(0x3f80, tg_fp32_to_bf16(1.0f));
    EXPECT_EQ(0x3f80, tg_fp32_to_bf16(f32_from_bits(0x3f808000u)));  // tie -> even
    EXPECT_EQ(0x3f82, tg_fp32_to_bf16(f32_from_bits(0x3f818000u)));  // tie -> even (up)
    EXPECT_EQ(0x7f80, tg_fp32_to_bf16(FLT_MAX));                     // rounds past the largest bf16
    EXPECT_EQ(0x7f7f, tg_fp32_to_bf16(f32_from_bits(0x7f7f7fffu)));
    EXPECT_TRUE(std::isnan(tg_bf16_to_fp32(tg_fp32_to_bf16(f32_from_bits(0x7f800001u)))));  // sNaN stays NaN
    EXPECT_TRUE(std::isnan(tg_fp16_to_fp32(tg_fp32_to_fp16(f32_from_bits(0xff800001u)))));
}

}  // namespace
