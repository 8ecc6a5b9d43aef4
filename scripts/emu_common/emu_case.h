// emu_case.h - what the emulators' harnesses share (scripts/wgmma_emu, scripts/delta3p_emu): BF16 /
// F16 conversions by hand, the cases' knobs, deterministic inputs, the float64 sequential oracle of
// tg_delta_rule's recurrence (docs/ops.md) and the relative L2 error; EmuDesc from emu_rt_api.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "emu_rt_api.h"

// ---------------------------------------------------------------- BF16 / F16 by hand (no CUDA headers here)
static uint16_t f2bf(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return (uint16_t)((u >> 16) | ((u & 0xFFFF) ? 0x40 : 0));
    u += 0x7FFFu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f2h(float x) {  // round to nearest even, normals and subnormals (|x| < 65504 here)
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sgn = (u >> 16) & 0x8000;
    const float a = std::fabs(x);
    if (a < 6.103515625e-05f) {  // subnormal half: multiples of 2^-24
        const float q = std::nearbyint(a * 16777216.0f);
        return (uint16_t)(sgn | (uint32_t)q);
    }
    uint32_t m = u & 0x7FFFFFFF;
    uint32_t e = (m >> 23) - 127 + 15, f = m & 0x7FFFFF;
    uint32_t h = (e << 10) | (f >> 13);
    const uint32_t rest = f & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sgn | h);
}
static float h2f(uint16_t h) {
    const uint32_t sgn = (h & 0x8000) << 16, e = (h >> 10) & 31, f = h & 1023;
    float v = e == 0 ? std::ldexp((float)f, -24) : std::ldexp((float)(f | 1024), (int)e - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sgn;
    memcpy(&v, &u, 4);
    return v;
}
static uint16_t enc(int type, float x) { return type == 1 ? f2h(x) : f2bf(x); }
static float dec(int type, uint16_t h) { return type == 1 ? h2f(h) : bf2f(h); }

struct Buf {  // a tensor with 64 KB guards on both sides
    std::vector<unsigned char> mem;
    size_t bytes;
    char *data() { return (char *)mem.data() + 65536; }
    void alloc(size_t n) { bytes = n, mem.assign(n + 2 * 65536, 0xCD); }
};

struct Case {
    const char *name;
    int delta;        // 1 GATED_DELTA, 0 GATED_LINEAR
    long long T;
    int B, Hk, Hv, Dv;
    float glo, ghi;   // log gates uniform in [glo, ghi]
    int ninf;         // -inf gates: 1 = a pattern of them
    int l2norm;
    int has_state;
    int otype;        // 0 F32, 2 BF16
    int lin = 0;      // 1: LINEAR gates (a = g; glo..ghi, with zeros and some negative gates)
    int qkvtype = 2;  // 2 BF16, 1 F16
    int betas = 0;    // 0 uniform in [0, 1); 1: exact 0 and 1 in a pattern among them; 2: all 1
    int big0 = 0;     // 1: LOG gate +100 at each sequence's first token (expf overflows: a = inf on a
                      // zero state, which stays zero; the chunk's decays from its start are all inf)
    float bigg = 0.0f;     // with bigt >= 0: LOG gate bigg at token bigt of each sequence and head (a large
    long long bigt = -1;   // finite decay: e^85 ~ 8e36, times 1 / |k| = 1000 of a zero padding row overflows)
    float bigg2 = 0.0f;    // with bigt2 >= 0: a second such gate
    long long bigt2 = -1;
    long long zerov = 0;   // values of tokens < zerov exactly zero (their state contributions exact zeros)
};


static double relL2(const std::vector<double> &ref, const std::vector<float> &x) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = (double)x[i] - ref[i];
        num += d * d, den += ref[i] * ref[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1e-300));
}

// the inputs of a case, deterministic
struct Inputs {
    int Dk = 128;
    std::vector<uint16_t> q, k, v;  // BF16 or F16 bits (Case::qkvtype)
    std::vector<float> g, beta, s0;
};
static Inputs make_inputs(const Case &c) {
    Inputs in;
    std::mt19937_64 rng(0x5eed + c.T * 131 + c.delta);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    const int Dk = in.Dk;
    const float qks = c.l2norm ? 1.0f : 1.0f / std::sqrt((float)Dk);
    in.q.resize((size_t)Dk * c.Hk * c.T * c.B);
    in.k.resize(in.q.size());
    in.v.resize((size_t)c.Dv * c.Hv * c.T * c.B);
    for (auto &x : in.q) x = enc(c.qkvtype, nd(rng) * qks);
    for (auto &x : in.k) x = enc(c.qkvtype, nd(rng) * qks);
    for (auto &x : in.v) x = enc(c.qkvtype, nd(rng));
    in.g.resize((size_t)c.Hv * c.T * c.B);
    in.beta.resize(in.g.size());
    for (size_t i = 0; i < in.g.size(); i++) {
        in.g[i] = c.glo + (c.ghi - c.glo) * ud(rng);
        in.beta[i] = ud(rng);
        if (c.lin && i % 23 == 7) in.g[i] = 0.0f;                   // zero gates (cut the chunk)
        if (c.lin && i % 29 == 3) in.g[i] = -in.g[i];               // negative gates (sign path)
        if (c.betas == 2 || (c.betas == 1 && i % 3 == 0)) in.beta[i] = 1.0f;
        if (c.betas == 1 && i % 3 == 1) in.beta[i] = 0.0f;
    }
    if (c.big0)
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.Hv; h++) in.g[(size_t)h + (size_t)c.Hv * (c.T * b)] = 100.0f;
    if (c.bigt >= 0 && c.bigt < c.T)
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.Hv; h++) in.g[(size_t)h + (size_t)c.Hv * (c.bigt + c.T * b)] = c.bigg;
    if (c.bigt2 >= 0 && c.bigt2 < c.T)
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.Hv; h++) in.g[(size_t)h + (size_t)c.Hv * (c.bigt2 + c.T * b)] = c.bigg2;
    for (int b = 0; b < c.B; b++)
        for (long long t = 0; t < std::min(c.zerov, c.T); t++)
            for (size_t j = 0; j < (size_t)c.Dv * c.Hv; j++) in.v[j + (size_t)c.Dv * c.Hv * (t + c.T * b)] = enc(c.qkvtype, 0.0f);
    if (c.ninf) {  // -inf gates: the first token, a chunk's last and first, and a pattern
        for (int b = 0; b < c.B; b++)
            for (int h = 0; h < c.Hv; h++)
                for (long long t = 0; t < c.T; t++)
                    if ((h == 1 && t == 0) || t == 63 || t == 64 || t % 37 == 5 || (h == 1 && t == 100) || t == c.T - 1)
                        in.g[(size_t)h + (size_t)c.Hv * (t + c.T * b)] = -INFINITY;
    }
    in.s0.resize((size_t)Dk * c.Dv * c.Hv * c.B);
    for (auto &x : in.s0) x = 0.3f * nd(rng);
    return in;
}

// float64 sequential recurrence (docs/ops.md, tg_delta_rule):
//   GATED_LINEAR: S = a_t S + beta_t k_t v_t^T;                      o_t = scale S^T q_t
//   GATED_DELTA:  S = a_t S; u = beta_t (v_t - S^T k_t); S += k_t u^T; o_t = scale S^T q_t
// a_t = exp(g_t) (LOG gates), q/k l2-normalized first (x / sqrt(sum x^2 + 1e-6)) when asked.
static void oracle(const Case &c, const Inputs &in, float scale, std::vector<double> &o, std::vector<double> &s) {
    const int Dk = in.Dk, Dv = c.Dv;
    o.assign((size_t)Dv * c.Hv * c.T * c.B, 0.0);
    s.assign(in.s0.size(), 0.0);
    const int grp = c.Hv / c.Hk;
    std::vector<double> S((size_t)Dk * Dv), q(Dk), k(Dk), u(Dv);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.Hv; h++) {
            const int hk = h / grp;
            for (int j = 0; j < Dv; j++)
                for (int i = 0; i < Dk; i++) S[(size_t)i * Dv + j] = c.has_state ? in.s0[(size_t)i + (size_t)Dk * (j + (size_t)Dv * (h + (size_t)c.Hv * b))] : 0.0;
            for (long long t = 0; t < c.T; t++) {
                double nq = 0, nk = 0;
                for (int i = 0; i < Dk; i++) {
                    q[i] = dec(c.qkvtype, in.q[(size_t)i + (size_t)Dk * (hk + (size_t)c.Hk * (t + c.T * b))]);
                    k[i] = dec(c.qkvtype, in.k[(size_t)i + (size_t)Dk * (hk + (size_t)c.Hk * (t + c.T * b))]);
                    nq += q[i] * q[i], nk += k[i] * k[i];
                }
                if (c.l2norm) {
                    const double iq = 1.0 / std::sqrt(nq + 1e-6), ik = 1.0 / std::sqrt(nk + 1e-6);
                    for (int i = 0; i < Dk; i++) q[i] *= iq, k[i] *= ik;
                }
                const size_t gi = (size_t)h + (size_t)c.Hv * (t + c.T * b);
                const double gv = in.g[gi], a = c.lin ? gv : gv == -INFINITY ? 0.0 : std::exp(gv), beta = in.beta[gi];
                auto vj = [&](int j) { return (double)dec(c.qkvtype, in.v[(size_t)j + (size_t)Dv * (h + (size_t)c.Hv * (t + c.T * b))]); };
                for (auto &x : S) x = x == 0.0 && !std::isnan(a) ? 0.0 : x * a;  // (a zero stays zero under any gate)
                if (c.delta) {
                    for (int j = 0; j < Dv; j++) {
                        double sk = 0;
                        for (int i = 0; i < Dk; i++) sk += S[(size_t)i * Dv + j] * k[i];
                        u[j] = beta * (vj(j) - sk);
                    }
                } else {
                    for (int j = 0; j < Dv; j++) u[j] = beta * vj(j);
                }
                for (int i = 0; i < Dk; i++)
                    for (int j = 0; j < Dv; j++) S[(size_t)i * Dv + j] += k[i] * u[j];
                for (int j = 0; j < Dv; j++) {
                    double y = 0;
                    for (int i = 0; i < Dk; i++) y += S[(size_t)i * Dv + j] * q[i];
                    o[(size_t)j + (size_t)Dv * (h + (size_t)c.Hv * (t + c.T * b))] = scale * y;
                }
            }
            for (int j = 0; j < Dv; j++)
                for (int i = 0; i < Dk; i++) s[(size_t)i + (size_t)Dk * (j + (size_t)Dv * (h + (size_t)c.Hv * b))] = S[(size_t)i * Dv + j];
        }
}

static EmuDesc desc(char *data, int type, long long n0, long long n1, long long n2, long long n3) {
    EmuDesc d;
    d.data = data, d.type = type;
    const long long es = type == 0 ? 4 : 2;
    d.ne[0] = n0, d.ne[1] = n1, d.ne[2] = n2, d.ne[3] = n3;
    d.nb[0] = es, d.nb[1] = es * n0, d.nb[2] = es * n0 * n1, d.nb[3] = es * n0 * n1 * n2;
    return d;
}

// the harnesses' command line: [CASE-SUBSTRING] [--order N] [--stats], and the options more(i) takes
// (true: argv[i] taken; it may step i past an argument); false after printing the usage
template <class More>
inline bool emu_args(int argc, char **argv, const char *usage, std::string &filter, int &order, bool &stats, More more) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--order") && i + 1 < argc) order = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stats")) stats = true;
        else if (more(i)) continue;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s %s\n", argv[0], usage);
            return false;
        } else filter = argv[i];
    }
    return true;
}
