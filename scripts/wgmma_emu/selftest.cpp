// selftest.cpp - the PTX interpreter's own test (make selftest): 16-bit wgmma chains and cp.async,
// run on the emulated block (emu_rt.cpp) without the project's kernel. Compiled like the kernel TU
// (-fsanitize=thread), so that the test's own shared-memory stores reach the hazard tracker.
//   wgmma: BF16 / F16 tiles placed in shared memory by the placement code below (written from the
//     tiles' row/column picture, not from the descriptor), read by m64nNk16 chains through
//     descriptors, compared to a float64 matmul. K-major and MN-major A and B, N 16/32/64 (and 128
//     for the MN-major LBO), k chains over two 64-column blocks (K-major) and 2048-byte steps
//     (MN-major), an MN-major B 64 bytes into its rows; and chains that must NOT match (wrong
//     major, LBO/SBO swapped, a k step off) or must be flagged (no proxy fence).
//   cp.async: zero fill, landing at wait_group (ordering of groups, wait_all), cp.async feeding a
//     wgmma, and broken sequences whose findings must fire.
// Exit 1 if any check fails.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emu_api.h"
#include "emu_rt.h"

namespace {

alignas(4096) unsigned char smbuf[160 * 1024];
constexpr uint32_t kBase = 3 * 1024;  // the shared-window address of smbuf[0] (1024-aligned)
int g_fail = 0, g_checks = 0;

void check(bool ok, const std::string &name, const std::string &detail = "") {
    g_checks++;
    if (!ok) g_fail++;
    printf("  %-58s %s%s%s\n", name.c_str(), ok ? "OK" : "FAIL", detail.empty() ? "" : "  ", detail.c_str());
}
bool has_kind(const std::string &sub) {
    for (const std::string &k : emu_finding_kinds())
        if (k.find(sub) != std::string::npos) return true;
    return false;
}
std::string kinds() {
    std::string s;
    for (const std::string &k : emu_finding_kinds()) s += (s.empty() ? "" : "; ") + k;
    return s.empty() ? "no findings" : s;
}
void reset_smem() { emu_set_smem(smbuf, sizeof smbuf, kBase, sizeof smbuf, {{"tiles", 0}}); }

// ---------------------------------------------------------------- 16-bit values
uint16_t to16(float x, int ty) {  // x exactly representable (the tests' values are)
    uint32_t u;
    memcpy(&u, &x, 4);
    if (ty == 2) return (uint16_t)(u >> 16);
    const __half h = __float2half_rn(x);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

// ---------------------------------------------------------------- tile placement (test side)
// A tile of `mn` rows (the M or N index) and `kt` columns (k) at shared offset `base` (1024-aligned),
// 16-bit elements, 128-byte swizzle, drawn as the kernel author draws it:
//  K-major: 64-column blocks one after the other (block b at base + b * mn * 128); in a block, row r
//    is the 128 bytes at r * 128, column c the 2 bytes at 2 c, and the 16-byte chunk (c / 8) of row r
//    stored at chunk (c / 8) ^ (r % 8).
//  MN-major: the transposed picture: 64-row blocks of the MN index (block b at base + b * kt * 128);
//    in a block, k is the 128-byte row (k * 128), the MN index (mod 64) the 2 bytes along it, the
//    16-byte chunk XOR-ed with k % 8.
size_t place(int major_mn, uint32_t base, int mn, int kt, int r, int c) {
    if (!major_mn) return base + (size_t)(c / 64) * mn * 128 + (size_t)r * 128 + ((((c % 64) / 8) ^ (r % 8)) << 4) + (c % 8) * 2;
    return base + (size_t)(r / 64) * kt * 128 + (size_t)c * 128 + ((((r % 64) / 8) ^ (c % 8)) << 4) + (r % 8) * 2;
}
uint64_t desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

// ---------------------------------------------------------------- one wgmma chain case
struct WCase {
    std::string name;
    int N, ta, tb, ty;   // ty 1 F16, 2 BF16
    int kt;              // k extent (k16 steps: kt / 16)
    int bcol0 = 0;       // MN-major B: its columns start at tile column bcol0 (a start 2 bcol0 bytes into the rows)
    int bw = 0;          // MN-major B: the tile's MN width (default N + bcol0, at least 64)
    bool first_acc = false;  // the chain accumulates onto preset D (else its first wgmma overwrites)
    bool dyadic = true;      // values k/8 (exact sums) or general BF16/F16 values (tolerance)
    // faults the check must see: 0 none, 1 B read with the other major, 2 LBO/SBO swapped in B,
    // 3 the K-major k step 3 units instead of 2, 4 no fence.proxy.async before the barrier
    int fault = 0;
    bool via_cpasync = false;  // the tiles come from global memory by cp.async (16-byte units)
    int cpa_fence = 1;         // via_cpasync: 1 fence after the wait, 0 none, 2 fence before the wait, 3 no wait before the wgmma
};

struct Buf {  // a global tensor with 64 KB guards
    std::vector<unsigned char> mem;
    size_t bytes = 0;
    unsigned char *data() { return mem.data() + 65536; }
    void alloc(size_t n) { bytes = n, mem.assign(n + 2 * 65536, 0xCD); }
};

// runs the case on all four warpgroups; returns "" or what went wrong (mismatch / findings)
void run_wcase(const WCase &w) {
    const int N = w.N, kt = w.kt, steps = kt / 16;
    const int bw = w.tb ? std::max(64, w.bw ? w.bw : N + w.bcol0) : N;
    std::mt19937 rng(1234 + N * 7 + w.ta * 3 + w.tb * 5 + kt);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto value = [&]() {
        if (w.dyadic) return (float)((int)(rng() % 17) - 8) / 8.0f;
        const float x = nd(rng);
        uint16_t b = to16(x, 2);  // BF16 by truncation; for F16 a value F16 holds too
        if (w.ty == 1) return __half2float(__float2half_rn(x));
        uint32_t u = (uint32_t)b << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    };
    std::vector<float> A((size_t)64 * kt), B((size_t)N * kt), D0((size_t)64 * N);
    for (auto &x : A) x = value();
    for (auto &x : B) x = value();
    for (auto &x : D0) x = w.first_acc ? value() : NAN;
    // placement: A at 0, B at 32768 (tile B's MN width bw; its column n + bcol0 holds B's row n)
    const uint32_t oA = 0, oB = 32768;
    struct El {
        size_t off;
        uint16_t bits;
    };
    std::vector<El> els;
    std::vector<unsigned char> img(65536, 0);  // the tiles' bytes (for cp.async's source)
    std::vector<unsigned char> have(65536, 0);
    auto put = [&](size_t off, float x) {
        const uint16_t b = to16(x, w.ty);
        els.push_back({off, b});
        memcpy(&img[off], &b, 2);
        have[off] = have[off + 1] = 1;
    };
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < kt; k++) put(place(w.ta, oA, 64, kt, m, k), A[(size_t)m * kt + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < kt; k++) put(place(w.tb, oB, bw, kt, n + (w.tb ? w.bcol0 : 0), k), B[(size_t)n * kt + k]);
    // MN-major B wider than its N columns: the other columns of the tile hold zeros (they are read by nobody)
    // descriptors and the chain's steps (16-byte units)
    const uint32_t sA = kBase + oA, sB = kBase + oB + (w.tb ? 2 * (w.bcol0 % 64) + (w.bcol0 / 64) * kt * 128 : 0);
    uint64_t dA = w.ta ? desc(sA, 0, 1024) : desc(sA, 16, 1024);
    uint64_t dB = w.tb ? desc(sB, kt * 128, 1024) : desc(sB, 16, 1024);
    if (w.fault == 2) dB = desc(sB, 1024, kt * 128);
    const int tbr = w.fault == 1 ? !w.tb : w.tb;
    const int kstep = w.fault == 3 ? 3 : 2;
    auto step = [&](int major_mn, int rows, int s) {  // the descriptor advance before k16 step s (s >= 1)
        if (major_mn) return 128;                     // 2048 bytes: two 8-row k groups
        return s % 4 ? kstep : (rows * 128 - 96) / 16;  // 32 bytes in a 64-column block, then the next block
    };
    const char *tys = w.ty == 2 ? "bf16" : "f16";
    std::string acc = "{";
    for (int i = 0; i < N / 2; i++) acc += (i ? ", %" : "%") + std::to_string(i);
    acc += "}";
    char wg[1024];
    snprintf(wg, sizeof wg, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s %s, da, db, p, 1, 1, %d, %d;\n", N, tys, tys, acc.c_str(),
             w.ta, tbr);
    std::string chain = "{\n.reg .b64 da, db;\n.reg .pred p;\nmov.b64 da, %" + std::to_string(N / 2) + ";\nmov.b64 db, %" +
                        std::to_string(N / 2 + 1) + ";\nsetp.ne.b32 p, " + (w.first_acc ? "1" : "0") + ", 0;\n" + wg;
    for (int s = 1; s < steps; s++)
        chain += "add.s64 da, da, " + std::to_string(step(w.ta, 64, s)) + ";\nadd.s64 db, db, " + std::to_string(step(w.tb, N, s)) +
                 ";\nsetp.ne.b32 p, 1, 0;\n" + wg;
    chain += "}\n";

    // global source for cp.async: the tiles' image, 16-byte units (units no element lies in are skipped)
    Buf g;
    g.alloc(img.size());
    memcpy(g.data(), img.data(), img.size());
    std::vector<size_t> units;
    for (size_t u = 0; u < img.size(); u += 16)
        if (have[u] || have[u + 8]) units.push_back(u);
    emu_clear_globals();
    if (w.via_cpasync) emu_add_global("tiles", g.data(), g.bytes, 0);

    std::vector<float> out((size_t)4 * 64 * N, NAN);
    reset_smem();
    emu_clear_findings();
    emu_run_block(0, 0, [&]() {
        const int tid = (int)threadIdx.x;
        if (!w.via_cpasync) {
            for (size_t e = tid; e < els.size(); e += 512) *(uint16_t *)(smbuf + els[e].off) = els[e].bits;
            if (w.fault != 4) tg_emu_asm("fence.proxy.async.shared::cta;\n", {}, {});
        } else {
            for (size_t e = tid; e < units.size(); e += 512)
                tg_emu_asm("cp.async.cg.shared.global [%0], [%1], 16, %2;\n", {},
                           {tg_emu_in("r", (unsigned)(kBase + units[e])), tg_emu_in("l", (const void *)(g.data() + units[e])),
                            tg_emu_in("r", 16u)});
            tg_emu_asm("cp.async.commit_group;\n", {}, {});
            if (w.cpa_fence == 2) tg_emu_asm("fence.proxy.async.shared::cta;\n", {}, {});
            if (w.cpa_fence != 3) tg_emu_asm("cp.async.wait_group %0;\n", {}, {tg_emu_in("n", 0)});
            if (w.cpa_fence == 1) tg_emu_asm("fence.proxy.async.shared::cta;\n", {}, {});
        }
        __syncthreads();
        float d[128];
        const int wq = (tid >> 5) & 3, lane = tid & 31, wgi = tid >> 7;
        for (int i = 0; i < N / 2; i++) {
            const int row = 16 * wq + (lane >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
            d[i] = D0[(size_t)row * N + col];
        }
        std::vector<tg_emu_op> outs, ins;
        for (int i = 0; i < N / 2; i++) outs.push_back(tg_emu_out("+f", d[i]));
        ins.push_back(tg_emu_in("l", (uint64_t)dA));
        ins.push_back(tg_emu_in("l", (uint64_t)dB));
        tg_emu_asm("wgmma.fence.sync.aligned;\n", {}, {});
        tg_emu_asm_v(chain.c_str(), outs, ins);
        tg_emu_asm("wgmma.commit_group.sync.aligned;\n", {}, {});
        tg_emu_asm("wgmma.wait_group.sync.aligned 0;\n", {}, {});
        for (int i = 0; i < N / 2; i++) {
            const int row = 16 * wq + (lane >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
            out[((size_t)wgi * 64 + row) * N + col] = d[i];
        }
        if (w.via_cpasync && w.cpa_fence == 3) tg_emu_asm("cp.async.wait_group 0;\n", {}, {});
    });
    emu_clear_globals();
    // float64 reference: D(m, n) = sum_k A(m, k) B(n, k) (+ D0)
    double maxerr = 0, worst = 0;
    bool exact = true;
    for (int wgi = 0; wgi < 4; wgi++)
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < N; n++) {
                double s = w.first_acc ? D0[(size_t)m * N + n] : 0.0, mag = std::fabs(s);
                for (int k = 0; k < kt; k++) {
                    const double p = (double)A[(size_t)m * kt + k] * B[(size_t)n * kt + k];
                    s += p, mag += std::fabs(p);
                }
                const float x = out[((size_t)wgi * 64 + m) * N + n];
                exact &= x == (float)s;
                const double e = std::isfinite(x) ? std::fabs(x - s) / (mag > 0 ? mag : 1) : INFINITY;
                maxerr = std::max(maxerr, e);
                worst = std::max(worst, e);
            }
    const bool match = w.dyadic ? exact : maxerr < 1e-6;
    char det[96];
    snprintf(det, sizeof det, "%s, max err / sum|ab| %.1e", w.dyadic ? (exact ? "bitwise exact" : "not exact") : "general values", maxerr);
    const int nf = (int)emu_finding_kinds().size();
    if (w.fault == 0 && w.cpa_fence == 1)
        check(match && nf == 0, w.name, std::string(det) + "; " + kinds());
    else if (w.fault == 4 || (w.via_cpasync && w.cpa_fence == 0) || (w.via_cpasync && w.cpa_fence == 2))
        check(has_kind("missing fence.proxy.async"), w.name + " (must be flagged)", kinds());
    else if (w.via_cpasync && w.cpa_fence == 3)
        check(has_kind("wgmma reads a byte a cp.async still in flight"), w.name + " (must be flagged)", kinds());
    else
        check(!match, w.name + " (must not match)", std::string(det) + "; " + kinds());
}

// ---------------------------------------------------------------- cp.async sequences
void cp16(uint32_t dst, const void *src, unsigned bytes) {
    tg_emu_asm("cp.async.cg.shared.global [%0], [%1], 16, %2;\n", {}, {tg_emu_in("r", dst), tg_emu_in("l", src), tg_emu_in("r", bytes)});
}
void commit() { tg_emu_asm("cp.async.commit_group;\n", {}, {}); }
void wait(int n) { tg_emu_asm("cp.async.wait_group %0;\n", {}, {tg_emu_in("n", n)}); }

void cp_tests() {
    Buf g;
    g.alloc(16384);
    for (size_t i = 0; i < g.bytes; i++) g.data()[i] = (unsigned char)(i * 7 + 3);
    auto run = [&](const std::function<void()> &body) {
        reset_smem();
        emu_clear_globals();
        emu_add_global("src", g.data(), g.bytes, 0);
        emu_clear_findings();
        emu_run_block(0, 0, body);
        emu_clear_globals();
    };
    auto expect = [&](const std::string &name, const std::string &kind) { check(has_kind(kind), name + " (must be flagged)", kinds()); };
    // zero fill: src-size 16, 8 and 0; landed at the wait, read by another thread after the barrier
    {
        int bad = 0;
        run([&]() {
            const int t = (int)threadIdx.x;
            const unsigned sz = t % 3 == 0 ? 16u : t % 3 == 1 ? 8u : 0u;
            cp16(kBase + 16 * t, g.data() + 16 * t, sz);
            commit();
            wait(0);
            __syncthreads();
            const int u = (t + 1) % 512, usz = u % 3 == 0 ? 16 : u % 3 == 1 ? 8 : 0;
            for (int i = 0; i < 16; i++)
                if (smbuf[16 * u + i] != (i < usz ? g.data()[16 * u + i] : 0)) bad++;
        });
        check(bad == 0 && emu_finding_kinds().empty(), "cp.async src-size 16 / 8 / 0 (zero fill), read after the barrier",
              std::to_string(bad) + " wrong bytes; " + kinds());
    }
    // group order: wait_group 1 lands the older group only; wait_group 0 the rest; wait_all commits first
    {
        int bad = 0;
        run([&]() {
            const int t = (int)threadIdx.x;
            const uint32_t x = 16 * t, y = 8192 + 16 * t, z = 16384 + 16 * t;
            cp16(kBase + x, g.data() + x, 16);
            commit();
            cp16(kBase + y, g.data() + y, 16);
            commit();
            wait(1);
            unsigned char bx[16], by[16], bz[16];
            emu_smem_peek(x, bx, 16), emu_smem_peek(y, by, 16);
            bad += memcmp(bx, g.data() + x, 16) != 0;  // landed
            bad += memcmp(by, g.data() + y, 16) == 0;   // not yet
            bad += smbuf[x] != g.data()[x];             // own read of the landed bytes: no finding
            wait(0);
            emu_smem_peek(y, by, 16);
            bad += memcmp(by, g.data() + y, 16) != 0;
            cp16(kBase + z, g.data() + (z % 16384), 16);  // not committed: wait_all commits and waits
            tg_emu_asm("cp.async.wait_all;\n", {}, {});
            emu_smem_peek(z, bz, 16);
            bad += memcmp(bz, g.data() + (z % 16384), 16) != 0;
        });
        check(bad == 0 && emu_finding_kinds().empty(), "cp.async wait_group 1 / 0 order, wait_all commits",
              std::to_string(bad) + " wrong; " + kinds());
    }
    // broken sequences
    run([&]() {  // landed at thread 0's wait, read by thread 1 in the same phase
        const int t = (int)threadIdx.x;
        if (t == 0) cp16(kBase, g.data(), 16), commit(), wait(0);
        if (t == 1) (void)*(volatile unsigned char *)smbuf;
        __syncthreads();
    });
    expect("cp.async read by another thread before a barrier", "RAW hazard: read of a byte written by another thread");
    run([&]() {  // read while thread 0's copy is in flight
        const int t = (int)threadIdx.x;
        if (t == 0) cp16(kBase, g.data(), 16), commit();
        __syncthreads();
        if (t == 1) (void)*(volatile unsigned char *)smbuf;
        __syncthreads();
        if (t == 0) wait(0);
    });
    expect("generic read while the cp.async is in flight", "RAW hazard with cp.async");
    run([&]() {  // write while in flight (a later phase: the barrier does not complete the copy)
        const int t = (int)threadIdx.x;
        if (t == 0) cp16(kBase, g.data(), 16), commit();
        __syncthreads();
        if (t == 1) *(volatile unsigned char *)(smbuf + 5) = 1;
        __syncthreads();
        if (t == 0) wait(0);
    });
    expect("generic write while the cp.async is in flight", "WAW hazard with cp.async");
    run([&]() {  // two copies in flight to the same bytes
        const int t = (int)threadIdx.x;
        if (t < 2) cp16(kBase, g.data() + 16 * t, 16), commit();
        __syncthreads();
        if (t < 2) wait(0);
    });
    expect("two cp.async in flight to the same bytes", "cp.async to a byte another cp.async still in flight");
    run([&]() {  // issued over bytes another thread read in the same phase
        const int t = (int)threadIdx.x;
        if (t == 0) smbuf[32] = 1;
        __syncthreads();
        if (t == 0) (void)*(volatile unsigned char *)(smbuf + 32);
        if (t == 1) cp16(kBase + 32, g.data(), 16), commit();
        __syncthreads();
        if (t == 1) wait(0);
    });
    expect("cp.async issued over bytes read in the same phase", "WAR hazard");
    run([&]() {  // thread exits with a committed group pending, another with an uncommitted copy
        const int t = (int)threadIdx.x;
        if (t == 0) cp16(kBase, g.data(), 16), commit();
        if (t == 1) cp16(kBase + 16, g.data(), 16);
    });
    expect("thread exits with cp.async pending", "thread exits with cp.async not waited for");
    run([&]() {
        if (threadIdx.x == 0) cp16(kBase + 8, g.data(), 16), commit(), wait(0);
    });
    expect("cp.async destination not 16-byte aligned", "cp.async destination not aligned");
    run([&]() {
        if (threadIdx.x == 0) cp16(kBase, g.data() + 4, 16), commit(), wait(0);
    });
    expect("cp.async source not 16-byte aligned", "cp.async source not aligned");
    run([&]() {
        if (threadIdx.x == 0) cp16(kBase, g.data() + g.bytes, 16), commit(), wait(0);
    });
    expect("cp.async source past the tensor", "global access out of a tensor's bounds");
    {  // ... but src-size 0 past the tensor reads nothing
        run([&]() {
            if (threadIdx.x == 0) cp16(kBase, g.data() + g.bytes, 0), commit(), wait(0);
        });
        check(emu_finding_kinds().empty(), "cp.async src-size 0 past the tensor: nothing read", kinds());
    }
}

}  // namespace

int main() {
    printf("wgmma m64nNk16 (BF16 / F16), tiles placed by the test, against a float64 matmul:\n");
    std::vector<WCase> cs;
    for (int ty : {2, 1})
        for (int N : {16, 32, 64})
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    WCase w;
                    w.N = N, w.ta = ta, w.tb = tb, w.ty = ty;
                    w.kt = 128;  // K-major: two 64-column blocks; MN-major: 8 k16 steps of 2048 bytes
                    w.first_acc = (N + ta + tb) % 2 == 1;
                    char b[96];
                    snprintf(b, sizeof b, "%s m64n%dk16 A %s B %s, k 128%s", ty == 2 ? "bf16" : "f16 ", N, ta ? "MN" : "K ", tb ? "MN" : "K ",
                             w.first_acc ? ", onto preset D" : "");
                    w.name = b;
                    cs.push_back(w);
                }
    auto add = [&](const char *name, int N, int ta, int tb, int kt, int bcol0, int bw, int fault, bool dyadic = true) {
        WCase w;
        w.name = name, w.N = N, w.ta = ta, w.tb = tb, w.ty = 2, w.kt = kt, w.bcol0 = bcol0, w.bw = bw, w.fault = fault, w.dyadic = dyadic;
        cs.push_back(w);
        return &cs.back();
    };
    add("bf16 m64n32k16 B MN 64 bytes into its rows (cols 32..63)", 32, 0, 1, 64, 32, 64, 0);
    add("bf16 m64n16k16 B MN 96 bytes into its rows (cols 48..63)", 16, 1, 1, 64, 48, 64, 0);
    add("bf16 m64n128k16 B MN: two 64-column blocks LBO apart", 128, 1, 1, 64, 0, 128, 0);
    add("bf16 m64n64k16 A MN B K, general values", 64, 1, 0, 128, 0, 0, 0, false);
    add("bf16 m64n32k16 A K B MN, general values", 32, 0, 1, 128, 0, 0, 0, false);
    add("bf16 m64n64k16 B MN read as K-major", 64, 0, 1, 64, 0, 0, 1);
    add("bf16 m64n32k16 B K read as MN-major", 32, 0, 0, 64, 0, 0, 1);
    add("bf16 m64n128k16 B MN with LBO and SBO swapped", 128, 0, 1, 64, 0, 128, 2);
    add("bf16 m64n32k16 K-major k step 48 bytes", 32, 0, 0, 64, 0, 0, 3);
    add("bf16 m64n32k16 tiles without fence.proxy.async", 32, 0, 1, 64, 0, 0, 4);
    for (auto &w : cs) run_wcase(w);

    printf("cp.async:\n");
    {
        WCase w;
        w.N = 32, w.ta = 0, w.tb = 1, w.ty = 2, w.kt = 64, w.bcol0 = 32, w.bw = 64, w.via_cpasync = true;
        for (int f : {1, 0, 2, 3}) {
            w.cpa_fence = f;
            w.name = f == 1 ? "cp.async tiles, wait, fence.proxy.async, barrier, wgmma"
                     : f == 0 ? "cp.async tiles, wait, barrier (no proxy fence), wgmma"
                     : f == 2 ? "cp.async tiles, proxy fence BEFORE the wait, barrier, wgmma"
                              : "cp.async tiles, no wait before barrier and wgmma";
            run_wcase(w);
        }
    }
    cp_tests();
    printf("selftest: %d/%d checks passed%s\n", g_checks - g_fail, g_checks, g_fail ? " -- FAILURES" : "");
    return g_fail ? 1 : 0;
}
