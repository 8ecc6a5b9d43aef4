// emu_rt.cpp (scripts/emu_common: scripts/wgmma_emu's and scripts/delta3p_emu's; mma.sync m16n8k8 TF32,
// ldmatrix, mbarriers and cp.async.bulk, and a block size per kernel, added for the latter) - the runtime of the host emulation of one thread block (not instrumented):
//   * 512 fibers (ucontext) run the kernel TU's code; __syncthreads, __syncwarp, the warp
//     shuffles/votes and each wgmma.mma_async are collectives (block / warp / warpgroup)
//   * every load and store of the kernel TU reaches the __tsan_* hooks below: the shared-memory
//     hazard tracker (per byte, per barrier phase) and the global-memory checks
//   * the inline PTX that gen.py turned into tg_emu_asm calls is interpreted here: wgmma chains
//     from the PTX ISA's definition (matrix descriptor, K-major and MN-major 128-byte swizzle,
//     m64nNk8 TF32 and m64nNk16 BF16/F16 with the .f32 D fragment layout), fences, commit/wait
//     groups, cvt.rna.tf32.f32, and cp.async (issue, commit_group, wait_group N, wait_all) with its
//     shared-memory writes landing at the issuing thread's wait
#include <algorithm>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "emu_rt_api.h"
#include "emu_rt.h"

namespace {

constexpr int kThreads = 512;  // the most; g_nthr: this kernel's block
int g_nthr = kThreads;
constexpr size_t kStack = 512 * 1024;

// ---------------------------------------------------------------- findings
struct Finding {
    std::string kind, detail;
    void *pc1, *pc2;
    long count;
};
std::map<std::string, Finding> g_findings;

// ---------------------------------------------------------------- threads
struct WgArgs {
    int N, K;       // K 8 (TF32) or 16 (16-bit types)
    int ty;         // operand type: 0 TF32, 1 F16, 2 BF16
    int ta, tb;     // imm-trans-a / -b: 0 K-major, 1 MN-major
    uint64_t da, db;
    bool scale_d;
    int sa, sb;
    float *my[128];  // this thread's accumulator registers, in the asm's list order
    int gid;
};
struct Thread {
    int tid;
    ucontext_t ctx;
    char *stack = nullptr;
    bool done = false, blocked = false;
    uint64_t cval = 0, cres = 0;  // a shuffle's / vote's value and result
    WgArgs *wga = nullptr;
    // wgmma state
    bool fence_ok = false;
    int committed = 0, waited = 0, uncommitted = 0;
    std::vector<uint32_t> wait_epoch;  // group k waited for in phase wait_epoch[k]
    std::vector<std::pair<uint64_t, uint32_t>> fences;  // fence.proxy.async executed: (seq, epoch)
    std::vector<std::pair<float *, int>> inflight;  // accumulator registers of wgmma issued and not yet waited for, with their group
    // cp.async: copies issued and not yet retired (issue order), each with its group (-1: not
    // committed yet); groups committed so far
    struct CpAsync {
        size_t off;  // host offset of the destination in the shared window
        int n;
        unsigned char data[16];  // the source bytes read at issue, zero-filled past src-size
        int group;
        void *pc;
    };
    std::vector<CpAsync> cpa;
    int cpa_groups = 0;
    // mma.sync / ldmatrix operands while the warp's collective gathers
    uint32_t mma_a[4], mma_b[2];
    float mma_c[4];
    float *mma_d[4];
    uint32_t ldm_addr;
    unsigned *ldm_out[4];
    void *ldm_pc;
    bool yielded = false;           // left the fiber at a failed mbarrier try_wait
    std::vector<int> mobs;          // per mbarrier: its completed phases this thread has seen (try_wait)
};
Thread g_thr[kThreads];
ucontext_t g_main;
Thread *g_cur = nullptr;
int g_block = 0;
const std::function<void()> *g_body = nullptr;

// ---------------------------------------------------------------- memory
unsigned char *g_sm = nullptr;  // host bytes of the shared window's dynamic part
size_t g_sm_bytes = 0, g_alloc = 0;
uint32_t g_sbase = 0;
uint32_t g_epoch = 0, g_wsync[16];
uint64_t g_seq = 0;
std::vector<uint64_t> g_barrier_seq;  // seq at the end of each epoch

struct Rec {
    int32_t wtid = -1;
    uint32_t wepoch = 0, wsync = 0;
    uint64_t wseq = 0;
    void *wpc = nullptr;
    uint32_t repoch = UINT32_MAX;
    uint8_t nr = 0;
    bool rover = false;
    int16_t rtid[4];
    uint32_t rsync[4];
    void *rpc[4];
    uint32_t aepoch = UINT32_MAX;
    uint8_t amask = 0;
    int32_t agroup[4];
    bool init = false;
    bool watomic = false;  // the last write was an atomic (atomics of one phase do not conflict)
};
std::vector<Rec> g_rec;
std::vector<uint16_t> g_cpa_pend;  // per byte: cp.async copies in flight (any thread) that write it
// mbarriers (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier"): the
// expected arrival count, the arrivals and the transaction count pending in the current phase, the
// phase number; bulk copies (cp.async.bulk) done at issue wait in `copies` and land when the phase
// completes; obs_epoch[k]: the first barrier epoch in which a thread saw phase k complete
struct BulkCopy {
    size_t off;
    std::vector<unsigned char> data;
    int tid;
    void *pc;
};
struct Mbar {
    uint32_t addr;
    int count, pending;
    long long tx;
    int phase;
    std::vector<uint32_t> obs_epoch;
    std::vector<BulkCopy> copies;
};
std::vector<Mbar> g_mbar;
long g_mbar_changes = 0;
std::vector<int32_t> g_bulk_bar, g_bulk_phase;  // per byte: the mbarrier (index + 1) and phase of the bulk copy that wrote it; 0 none

struct Global {
    std::string name;
    unsigned char *lo;
    size_t bytes;
    int kind;
    std::vector<uint8_t> writes;
};
std::vector<Global> g_glob;

// wgmma statistics
std::map<std::string, long> g_stats;

std::vector<EmuRegion> g_layout;
std::string region(uint32_t off) {  // offset from the aligned base sm (the kernel's layout)
    const EmuRegion *in = nullptr;
    for (const EmuRegion &r : g_layout)
        if (r.lo <= off) in = &r;
    if (!in) return "off " + std::to_string(off);
    return std::string(in->name) + "+" + std::to_string(off - in->lo);
}
uint32_t sm_aligned_off(size_t host_off) {  // offset from the 1024-aligned base the kernel computes
    const uint32_t a = g_sbase + (uint32_t)host_off;
    const uint32_t base = (g_sbase + 1023u) & ~1023u;
    return a - base;
}

void finding(const std::string &kind, const std::string &detail, void *pc1, void *pc2) {
    std::ostringstream key;
    key << kind << "|" << pc1 << "|" << pc2;
    auto it = g_findings.find(key.str());
    if (it == g_findings.end()) g_findings[key.str()] = {kind, detail, pc1, pc2, 1};
    else it->second.count++;
}

bool same_warp_synced(int a, uint32_t async, int b) {  // a's access is ordered before b's by __syncwarp
    return (a >> 5) == (b >> 5) && async < g_wsync[b >> 5];
}
std::string tname(int t) {
    char b[64];
    snprintf(b, sizeof b, "t%d(wg%d w%d l%d)", t, t >> 7, t >> 5, t & 31);
    return b;
}

long g_nr = 0, g_nw = 0, g_ng = 0;
// mode 0: a generic access of the kernel's code; 1: a cp.async's write landing (at its thread's
// wait); 2: a cp.async's issue, checked as a write (WAW/WAR with this phase's other accesses, a
// copy still in flight to the same bytes) but not recorded
enum { SM_GENERIC = 0, SM_CPA_LAND = 1, SM_CPA_ISSUE = 2, SM_ATOMIC = 3 };
void smem_access(size_t off, size_t n, bool write, void *pc, int mode = SM_GENERIC) {
    if (mode != SM_CPA_ISSUE) (write ? g_nw : g_nr) += (long)n;
    const int me = g_cur->tid;
    if (off + n > g_alloc) {
        finding("smem access past the dynamic allocation (kSmem)", "host off " + std::to_string(off), pc, nullptr);
    }
    for (size_t i = 0; i < n; i++) {
        Rec &r = g_rec[off + i];
        const uint32_t so = sm_aligned_off(off + i);
        if (mode != SM_CPA_LAND && g_cpa_pend[off + i]) {
            if (mode == SM_CPA_ISSUE)
                finding("WAW hazard with cp.async: cp.async to a byte another cp.async still in flight writes",
                        region(so) + " by " + tname(me), pc, nullptr);
            else if (write)
                finding("WAW hazard with cp.async: generic write of a byte a cp.async still in flight writes (before its thread's wait_group)",
                        region(so) + " written by " + tname(me), pc, nullptr);
            else
                finding("RAW hazard with cp.async: generic read of a byte a cp.async still in flight writes (before its thread's wait_group)",
                        region(so) + " read by " + tname(me), pc, nullptr);
        }
        if (!write) {
            if (!r.init) finding("generic read of never-written shared memory", region(so) + " by " + tname(me), pc, nullptr);
            bool bulk_seen = false;  // a byte of a bulk copy: ordered by the mbarrier's phase, not by a barrier
            if (mode == SM_GENERIC && g_bulk_bar[off + i]) {
                const int mi = g_bulk_bar[off + i] - 1, k = g_bulk_phase[off + i];
                const Mbar &m = g_mbar[mi];
                bulk_seen = ((int)g_thr[me].mobs.size() > mi && g_thr[me].mobs[mi] > k) || ((int)m.obs_epoch.size() > k && m.obs_epoch[k] < g_epoch);
                if (!bulk_seen)
                    finding("RAW hazard with cp.async.bulk: read of a bulk-copied byte by a thread that has not seen its mbarrier phase complete (try_wait) and is not behind a barrier after a thread that has",
                            region(so) + " read by " + tname(me), pc, nullptr);
            }
            if (!bulk_seen && r.wtid >= 0 && r.wepoch == g_epoch && r.wtid != me && !same_warp_synced(r.wtid, r.wsync, me))
                finding("RAW hazard: read of a byte written by another thread in the same phase",
                        region(so) + " written by " + tname(r.wtid) + ", read by " + tname(me), r.wpc, pc);
            if (r.repoch != g_epoch) r.repoch = g_epoch, r.nr = 0, r.rover = false;
            bool have = false;
            for (int k = 0; k < r.nr; k++)
                if (r.rtid[k] == me) have = true, r.rsync[k] = g_wsync[me >> 5], r.rpc[k] = pc;
            if (!have) {
                if (r.nr < 4) r.rtid[r.nr] = (int16_t)me, r.rsync[r.nr] = g_wsync[me >> 5], r.rpc[r.nr] = pc, r.nr++;
                else r.rover = true;
            }
        } else {
            if (mode == SM_ATOMIC && !r.init) finding("atomic on never-written shared memory", region(so) + " by " + tname(me), pc, nullptr);
            if (r.wtid >= 0 && r.wepoch == g_epoch && r.wtid != me && !same_warp_synced(r.wtid, r.wsync, me) && !(mode == SM_ATOMIC && r.watomic))
                finding("WAW hazard: two threads write a byte in the same phase",
                        region(so) + " " + tname(r.wtid) + " then " + tname(me), r.wpc, pc);
            if (r.repoch == g_epoch) {
                for (int k = 0; k < r.nr; k++)
                    if (r.rtid[k] != me && !same_warp_synced(r.rtid[k], r.rsync[k], me))
                        finding("WAR hazard: write of a byte another thread read in the same phase",
                                region(so) + " read by " + tname(r.rtid[k]) + ", written by " + tname(me), r.rpc[k], pc);
                if (r.rover) finding("WAR hazard (more than 4 readers, some other thread)", region(so) + " written by " + tname(me), pc, nullptr);
            }
            // a wgmma's reads last until its warpgroup waits for the group (a barrier may come
            // between: the reads then reach into the later phases, up to the one of the wait)
            auto reads_live = [&](int w) {
                const Thread &x = g_thr[w * 128];  // (wgmma is warpgroup-collective: the same groups)
                const int gq = r.agroup[w];
                return r.aepoch == g_epoch || gq >= (int)x.wait_epoch.size() || x.wait_epoch[gq] == g_epoch;
            };
            if (r.aepoch != UINT32_MAX) {
                for (int w = 0; w < 4; w++) {
                    if (!(r.amask & (1 << w)) || !reads_live(w)) continue;
                    if (w != (me >> 7))
                        finding("async-proxy hazard: generic write to a byte another warpgroup's wgmma reads in the same phase or still in flight",
                                region(so) + " wgmma of wg" + std::to_string(w) + ", written by " + tname(me), pc, nullptr);
                    else if (g_thr[me].waited <= r.agroup[w])
                        finding("async-proxy hazard: generic write to a byte its own warpgroup's wgmma reads, before wgmma.wait_group",
                                region(so) + " written by " + tname(me), pc, nullptr);
                }
            }
            if (mode != SM_CPA_ISSUE) g_bulk_bar[off + i] = 0, r.watomic = mode == SM_ATOMIC;
            if (mode != SM_CPA_ISSUE)
                r.wtid = me, r.wepoch = g_epoch, r.wsync = g_wsync[me >> 5], r.wseq = ++g_seq, r.wpc = pc, r.init = true;
        }
    }
}

void global_access(unsigned char *p, size_t n, bool write, void *pc) {
    g_ng += (long)n;
    for (auto &g : g_glob) {
        if (p + n <= g.lo - 65536 || p >= g.lo + g.bytes + 65536) continue;
        if (p < g.lo || p + n > g.lo + g.bytes) {
            finding("global access out of a tensor's bounds", g.name + (write ? " write" : " read"), pc, nullptr);
            return;
        }
        if (write) {
            if (g.kind == 0) finding("write to an input tensor", g.name, pc, nullptr);
            for (size_t i = 0; i < n; i++) g.writes[(p - g.lo) + i]++;
        }
        return;
    }
}

inline void access(void *addr, size_t n, bool write, void *pc, bool aligned = true) {
    if (!g_cur) return;
    unsigned char *p = (unsigned char *)addr;
    if (aligned && (n == 8 || n == 16) && ((uintptr_t)p % n) != 0 && ((p >= g_sm && p < g_sm + g_sm_bytes) || !g_glob.empty()))
        finding("misaligned vector access", std::to_string(n) + " bytes", pc, nullptr);
    for (const auto &fg : g_cur->inflight)
        if ((unsigned char *)fg.first < p + n && p < (unsigned char *)(fg.first + 1))
            finding("accumulator register accessed while its wgmma is in flight (before wgmma.wait_group)", tname(g_cur->tid), pc, nullptr);
    if (p >= g_sm && p < g_sm + g_sm_bytes) {
        smem_access(p - g_sm, n, write, pc);
        return;
    }
    if (!g_glob.empty()) global_access(p, n, write, pc);
}

// ---------------------------------------------------------------- fibers and collectives
void block_me() {
    Thread *t = g_cur;
    t->blocked = true;
    swapcontext(&t->ctx, &g_main);
    g_cur = t;
}

enum { K_SYNCTHREADS = 100, K_SYNCWARP = 101, K_WGMMA = 102, K_MMA = 103, K_LDM = 104 };
struct Coll {
    int kind = 0, arg = 0, count = 0;
    std::vector<int> who;
};
Coll g_warp[16], g_wg[4], g_blk;

void do_wgmma(int wg, std::vector<int> &who);
void do_mma(int w);
void do_ldmatrix(int w, int cnt);

void arrive(Coll &c, int size, int kind, int arg, const char *what) {
    Thread *t = g_cur;
    if (c.count == 0) c.kind = kind, c.arg = arg, c.who.clear();
    else if (c.kind != kind || c.arg != arg) {
        char b[160];
        snprintf(b, sizeof b, "%s: %s meets kind %d arg %d (kind %d arg %d waiting)", what, tname(t->tid).c_str(), kind, arg, c.kind, c.arg);
        finding("divergent collective (threads of one warp/warpgroup/block at different collectives)", b, nullptr, nullptr);
    }
    c.count++;
    c.who.push_back(t->tid);
    if (c.count < size) {
        block_me();
        return;
    }
    // complete
    std::vector<int> who = c.who;
    c.count = 0;
    if (kind == K_SYNCTHREADS) {
        for (int i = 0; i < g_nthr; i++) {
            Thread &x = g_thr[i];
            if (x.uncommitted) finding("barrier with uncommitted wgmma", tname(i), nullptr, nullptr);
            // (a group not waited for may stay in flight across the barrier: its reads are checked
            // against later writes until the wait, smem_access)
        }
        g_barrier_seq.push_back(++g_seq);
        g_epoch++;
        if (arg == 1) {  // __syncthreads_and: every thread's predicate
            bool all = true;
            for (int i = 0; i < g_nthr; i++) all &= g_thr[i].cval != 0;
            for (int i = 0; i < g_nthr; i++) g_thr[i].cres = all;
        }
    } else if (kind == K_SYNCWARP) {
        g_wsync[who[0] >> 5]++;
    } else if (kind == K_WGMMA) {
        do_wgmma(who[0] >> 7, who);
    } else if (kind == K_MMA) {
        do_mma(who[0] >> 5);
    } else if (kind == K_LDM) {
        do_ldmatrix(who[0] >> 5, arg);
    } else {  // warp shuffle / vote
        const int w = who[0] >> 5;
        uint64_t v[32];
        for (int l = 0; l < 32; l++) v[l] = g_thr[32 * w + l].cval;
        bool any = false, all = true;
        for (int l = 0; l < 32; l++) any |= v[l] != 0, all &= v[l] != 0;
        for (int l = 0; l < 32; l++) {
            uint64_t r = 0;
            if (kind == TG_SHFL_XOR) r = v[l ^ arg];
            else if (kind == TG_SHFL_UP) r = l >= arg ? v[l - arg] : v[l];
            else if (kind == TG_SHFL_IDX) r = v[arg & 31];  // (width 32 only: tg_emu_warp_op; the source lane the same in every lane)
            else if (kind == TG_VOTE_ANY) r = any;
            else if (kind == TG_VOTE_ALL) r = all;
            g_thr[32 * w + l].cres = r;
        }
    }
    for (int i : who) g_thr[i].blocked = false;
}

void fiber_main(int tid) {
    g_cur = &g_thr[tid];
    (*g_body)();
    g_thr[tid].done = true;
    if (g_thr[tid].uncommitted || g_thr[tid].waited != g_thr[tid].committed)
        finding("thread exits with wgmma not committed / waited", tname(tid), nullptr, nullptr);
    if (!g_thr[tid].cpa.empty())
        finding("thread exits with cp.async not waited for (pending or uncommitted copies)", tname(tid), g_thr[tid].cpa[0].pc, nullptr);
    swapcontext(&g_thr[tid].ctx, &g_main);
}

// ---------------------------------------------------------------- wgmma from the PTX ISA's definition
// (PTX ISA 9.7.15.5.1.2, "Asynchronous Warpgroup Level Matrix Shared Memory Layout"; README.md
// lists the statements relied on)
}  // namespace
namespace {
float tf32_trunc(float x) {  // the tensor core reads the TF32 part of an F32 operand
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xFFFFE000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
float half_to_float(uint16_t h) {  // exact: every F16 value is an F32 value
    const uint32_t sgn = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) return bits_to_float(sgn | 0x7F800000u | (m << 13));
    const float v = e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 1024), (int)e - 25);
    return sgn ? -v : v;
}
float operand_value(uint32_t raw, int ty) {
    if (ty == 0) return tf32_trunc(bits_to_float(raw));
    if (ty == 2) return bits_to_float(raw << 16);  // BF16: the upper half of an F32
    return half_to_float((uint16_t)raw);
}
// The matrix descriptor (Matrix Descriptor Format): start address, leading / stride dimension byte
// offsets (each (x & 0x3FFFF) >> 4 in 14 bits), base offset (bits 49-51), swizzle mode (bits 62-63,
// 1 = 128-byte). Only the 128-byte swizzle with base offset 0 is modelled: the operand's swizzle
// pattern then starts on a 1024-byte boundary, so the start lies within the pattern's first row.
struct Desc {
    uint32_t start, lbo, sbo;
};
Desc decode(uint64_t d, const char *which) {
    Desc D;
    D.start = (uint32_t)(d & 0x3FFF) << 4;
    D.lbo = (uint32_t)((d >> 16) & 0x3FFF) << 4;
    D.sbo = (uint32_t)((d >> 32) & 0x3FFF) << 4;
    const uint32_t base_off = (uint32_t)((d >> 49) & 7), mode = (uint32_t)(d >> 62);
    const uint64_t reserved = d & ((3ull << 14) | (3ull << 30) | (7ull << 46) | (0x3FFull << 52));
    if (reserved) finding("descriptor has bits set in reserved fields (carry out of a field?)", which, nullptr, nullptr);
    if (mode != 1) finding("descriptor swizzle mode is not 128B", which, nullptr, nullptr);
    if (base_off != 0) finding("descriptor base offset nonzero", which, nullptr, nullptr);
    if ((D.start & 0x380) != 0)
        finding("operand start not within the first 128-byte row of a 1024-byte swizzle pattern (needs base offset)", which, nullptr, nullptr);
    return D;
}
// 128-byte swizzle on the shared-memory address: the 16-byte unit (bits 4-6) XOR-ed with the
// 128-byte row within the 1024-byte pattern (bits 7-9)
uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7) << 4); }
// K-major (canonical ((8,m),(T,2k)):((8T,SBO),(1,T)), T elements = 16 bytes): MN index r in
// 128-byte rows, 8-row groups SBO apart; k index kk along the row, es bytes an element
uint32_t kmajor_addr(const Desc &D, int r, int kk, int es) {
    return swizzle128(D.start + (uint32_t)(r >> 3) * D.sbo + (uint32_t)(r & 7) * 128 + (uint32_t)(kk * es));
}
// MN-major, 16-bit elements (canonical ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8): MN index mn
// along a 128-byte row (64 elements), one row per k, 8 k rows per 1024-byte atom; further 64-element
// MN blocks LBO apart, further 8-row k groups SBO apart
uint32_t mnmajor_addr(const Desc &D, int mn, int kk) {
    return swizzle128(D.start + (uint32_t)(mn >> 6) * D.lbo + (uint32_t)(mn & 63) * 2 + (uint32_t)(kk & 7) * 128 +
                      (uint32_t)(kk >> 3) * D.sbo);
}
// the shared address of element (mn, kk) of an operand with MN extent `ext`, after the layout checks
struct Operand {
    Desc D;
    int trans, es, K;
    uint32_t addr(int mn, int kk) const { return trans ? mnmajor_addr(D, mn, kk) : kmajor_addr(D, mn, kk, es); }
};
Operand operand(uint64_t d, int trans, int ty, int K, int ext, const char *which) {
    Operand o{decode(d, which), trans, ty == 0 ? 4 : 2, K};
    if (!trans) {
        if ((o.D.start & 127) + (uint32_t)(K * o.es) > 128) finding("k slice crosses the 128-byte swizzle row (K-major)", which, nullptr, nullptr);
        if (ext > 8 && o.D.sbo == 0) finding("descriptor SBO zero: 8-row groups of a K-major operand coincide", which, nullptr, nullptr);
    } else {
        if ((o.D.start & 127) + (uint32_t)(std::min(ext, 64) * 2) > 128)
            finding("MN slice crosses the 128-byte swizzle row (MN-major)", which, nullptr, nullptr);
        if (o.D.sbo == 0) finding("descriptor SBO zero: the k groups of an MN-major operand coincide", which, nullptr, nullptr);
        if (ext > 64 && o.D.lbo == 0) finding("descriptor LBO zero: 64-element MN blocks of an MN-major operand coincide", which, nullptr, nullptr);
    }
    return o;
}
uint32_t read_async(uint32_t saddr, int n, int wg, int gid, const char *which) {
    const size_t off = saddr - g_sbase;
    if (saddr < g_sbase || off + n > g_sm_bytes) {
        finding("wgmma operand outside shared memory", which, nullptr, nullptr);
        return 0x7FC00000u;
    }
    if (off + n > g_alloc) finding("wgmma operand past the dynamic allocation", which, nullptr, nullptr);
    for (int i = 0; i < n; i++) {
        Rec &r = g_rec[off + i];
        const uint32_t so = sm_aligned_off(off + i);
        if (!r.init) finding("wgmma reads never-written shared memory", std::string(which) + " " + region(so), nullptr, nullptr);
        if (g_cpa_pend[off + i])
            finding("wgmma reads a byte a cp.async still in flight writes", std::string(which) + " " + region(so), nullptr, nullptr);
        if (r.wtid >= 0 && r.wepoch == g_epoch)
            finding("async-proxy RAW hazard: wgmma reads a byte written in the same phase (no barrier between)",
                    std::string(which) + " " + region(so) + " written by " + tname(r.wtid) + ", wgmma of wg" + std::to_string(wg), r.wpc, nullptr);
        else if (r.wtid >= 0) {
            // the writer's first fence.proxy.async after the write must come before the barrier
            // that began the reading phase
            auto &f = g_thr[r.wtid].fences;
            auto it = std::lower_bound(f.begin(), f.end(), std::make_pair(r.wseq + 1, 0u));
            if (it == f.end() || g_epoch == 0 || it->first > g_barrier_seq[g_epoch - 1])
                finding("missing fence.proxy.async: generic write read by wgmma without the writer's proxy fence before the barrier",
                        std::string(which) + " " + region(so) + " written by " + tname(r.wtid), r.wpc, nullptr);
        }
        if (r.aepoch != g_epoch) r.aepoch = g_epoch, r.amask = 0;
        r.amask |= 1 << wg;
        r.agroup[wg] = gid;
    }
    uint32_t u = 0;
    memcpy(&u, g_sm + off, n);
    return u;
}

void do_wgmma(int wg, std::vector<int> &who) {
    WgArgs &a0 = *g_thr[who[0]].wga;
    for (int t : who) {
        WgArgs &a = *g_thr[t].wga;
        if (a.N != a0.N || a.K != a0.K || a.ty != a0.ty || a.ta != a0.ta || a.tb != a0.tb || a.da != a0.da || a.db != a0.db ||
            a.scale_d != a0.scale_d || a.sa != a0.sa || a.sb != a0.sb || a.gid != a0.gid)
            finding("wgmma operands not uniform over the warpgroup", tname(t), nullptr, nullptr);
    }
    const int N = a0.N, K = a0.K;
    {
        static const char *tyn[3] = {"tf32", "f16", "bf16"};
        char b[160];
        if (a0.ty == 0)
            snprintf(b, sizeof b, "wg%d m64n%dk8 A@0x%05x B@0x%05x", wg, N, (unsigned)((a0.da & 0x3FFF) << 4), (unsigned)((a0.db & 0x3FFF) << 4));
        else
            snprintf(b, sizeof b, "wg%d m64n%dk16.%s A%s@0x%05x B%s@0x%05x", wg, N, tyn[a0.ty], a0.ta ? "(MN)" : "",
                     (unsigned)((a0.da & 0x3FFF) << 4), a0.tb ? "(MN)" : "", (unsigned)((a0.db & 0x3FFF) << 4));
        g_stats[b]++;
    }
    static float A[64][16], B[256][16], D[64][256];
    const Operand oa = operand(a0.da, a0.ta, a0.ty, K, 64, "A"), ob = operand(a0.db, a0.tb, a0.ty, K, N, "B");
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < K; k++) A[m][k] = operand_value(read_async(oa.addr(m, k), oa.es, wg, a0.gid, "A"), a0.ty);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) B[n][k] = operand_value(read_async(ob.addr(n, k), ob.es, wg, a0.gid, "B"), a0.ty);
    // accumulators in (PTX ISA, "Register Fragments", wgmma .m64nNk8 and .m64nNk16 D, .f32: the same
    // layout): warp w of the warpgroup rows 16 w .. 16 w + 15; d[i]: row 16 w + lane/4 + 8 ((i >> 1) & 1),
    // column 8 (i >> 2) + 2 (lane % 4) + (i & 1)
    static bool seen[64][256];
    memset(seen, 0, sizeof seen);
    for (int t : who) {
        const int wq = (t >> 5) & 3, lane = t & 31;
        for (int i = 0; i < N / 2; i++) {
            const int row = 16 * wq + (lane >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
            if (seen[row][col]) finding("accumulator element held twice", "", nullptr, nullptr);
            seen[row][col] = true;
            D[row][col] = *g_thr[t].wga->my[i];
        }
    }
    // D = A B^T (+ D): the k products summed in float64, rounded once to F32
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += (double)(a0.sa * A[m][k]) * (double)(a0.sb * B[n][k]);
            D[m][n] = (float)((a0.scale_d ? (double)D[m][n] : 0.0) + s);
        }
    for (int t : who) {
        const int wq = (t >> 5) & 3, lane = t & 31;
        for (int i = 0; i < N / 2; i++) {
            const int row = 16 * wq + (lane >> 2) + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
            *g_thr[t].wga->my[i] = D[row][col];
        }
    }
}

// ---------------------------------------------------------------- cp.async
// The copy's destination bytes land when the issuing thread's wait retires its group: they count
// as that thread's generic writes at that moment (the hazard tracker's RAW / WAW / WAR and the
// proxy-fence rule apply from there); from issue to landing any other access to them is flagged.
void cpa_land(Thread *t, const Thread::CpAsync &c) {
    for (int i = 0; i < c.n; i++) g_cpa_pend[c.off + i]--;
    smem_access(c.off, (size_t)c.n, true, c.pc, SM_CPA_LAND);
    memcpy(g_sm + c.off, c.data, (size_t)c.n);
    (void)t;
}
// retires the committed groups of t but the `keep` most recent ones, in order
void cpa_wait(Thread *t, int keep) {
    const int upto = t->cpa_groups - keep;  // groups [0, upto) complete
    std::vector<Thread::CpAsync> rest;
    for (const auto &c : t->cpa) {
        if (c.group >= 0 && c.group < upto) cpa_land(t, c);
        else rest.push_back(c);
    }
    t->cpa.swap(rest);
}

// ---------------------------------------------------------------- mma.sync, ldmatrix (warp collectives)
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, PTX ISA "Matrix Fragments for mma.m16n8k8"
// (.tf32): groupID g = lane >> 2, threadID_in_group c = lane % 4;
//   A (16 x 8, row): a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4)
//   B (8 x 8, col):  b0 (k c, n g), b1 (k c + 4, n g)
//   C, D (16 x 8):   c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1)
// operands read as TF32 (low 13 mantissa bits dropped); the 8 products and C summed in float64,
// rounded once to F32
float tf32_trunc(float x);
void do_mma(int w) {
    float A[16][8], B[8][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const Thread &x = g_thr[32 * w + l];
        const int g = l >> 2, c = l & 3;
        float f[4];
        for (int i = 0; i < 4; i++) memcpy(&f[i], &x.mma_a[i], 4);
        A[g][c] = f[0], A[g + 8][c] = f[1], A[g][c + 4] = f[2], A[g + 8][c + 4] = f[3];
        float b0, b1;
        memcpy(&b0, &x.mma_b[0], 4), memcpy(&b1, &x.mma_b[1], 4);
        B[c][g] = b0, B[c + 4][g] = b1;
        C[g][2 * c] = x.mma_c[0], C[g][2 * c + 1] = x.mma_c[1], C[g + 8][2 * c] = x.mma_c[2], C[g + 8][2 * c + 1] = x.mma_c[3];
    }
    float D[16][8];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = C[m][n];
            for (int k = 0; k < 8; k++) s += (double)tf32_trunc(A[m][k]) * (double)tf32_trunc(B[k][n]);
            D[m][n] = (float)s;
        }
    g_stats["mma.sync m16n8k8 tf32"]++;
    for (int l = 0; l < 32; l++) {
        const Thread &x = g_thr[32 * w + l];
        const int g = l >> 2, c = l & 3;
        *x.mma_d[0] = D[g][2 * c], *x.mma_d[1] = D[g][2 * c + 1], *x.mma_d[2] = D[g + 8][2 * c], *x.mma_d[3] = D[g + 8][2 * c + 1];
    }
}
// ldmatrix.sync.aligned.m8n8.{x2,x4}.shared.b16, PTX ISA "ldmatrix": matrix i's 8 rows (16 bytes
// each) at the addresses of threads 8i .. 8i + 7; each thread receives in register i the 32-bit word
// lane % 4 of row lane / 4 of matrix i (.x2: the addresses of threads 0-15). Each row's read counts as
// a shared-memory read by the thread that gave its address.
void do_ldmatrix(int w, int cnt) {
    Thread *cur = g_cur;
    uint32_t rows[4][8][4];
    for (int i = 0; i < cnt; i++)
        for (int r = 0; r < 8; r++) {
            Thread &p = g_thr[32 * w + 8 * i + r];
            const uint32_t a = p.ldm_addr;
            const size_t off = (size_t)a - g_sbase;
            if (a % 16) finding("ldmatrix row address not 16-byte aligned", tname(p.tid), p.ldm_pc, nullptr);
            if (a < g_sbase || off + 16 > g_sm_bytes) {
                finding("ldmatrix row outside shared memory", tname(p.tid), p.ldm_pc, nullptr);
                memset(rows[i][r], 0, 16);
                continue;
            }
            g_cur = &p;
            smem_access(off, 16, false, p.ldm_pc);
            memcpy(rows[i][r], g_sm + off, 16);
        }
    g_cur = cur;
    for (int l = 0; l < 32; l++) {
        Thread &x = g_thr[32 * w + l];
        for (int i = 0; i < cnt; i++) *x.ldm_out[i] = rows[i][l >> 2][l & 3];
    }
}

// ---------------------------------------------------------------- mbarriers and bulk copies
int mbar_find(uint32_t addr, void *pc) {
    for (size_t i = 0; i < g_mbar.size(); i++)
        if (g_mbar[i].addr == addr) return (int)i;
    finding("mbarrier operation on an address no mbarrier.init initialized", tname(g_cur->tid), pc, nullptr);
    return -1;
}
// the phase completes when its arrivals and its transaction count are done: the bulk copies counted by
// it land (as writes of their issuing threads), the next phase starts
void mbar_check(int mi) {
    Mbar &m = g_mbar[mi];
    if (m.pending != 0 || m.tx != 0) return;
    const int k = m.phase;
    Thread *cur = g_cur;
    for (const BulkCopy &c : m.copies) {
        for (size_t i = 0; i < c.data.size(); i++) g_cpa_pend[c.off + i]--;
        g_cur = &g_thr[c.tid];
        smem_access(c.off, c.data.size(), true, c.pc, SM_CPA_LAND);
        memcpy(g_sm + c.off, c.data.data(), c.data.size());
        for (size_t i = 0; i < c.data.size(); i++) g_bulk_bar[c.off + i] = mi + 1, g_bulk_phase[c.off + i] = k;
    }
    g_cur = cur;
    m.copies.clear();
    m.phase++;
    m.pending = m.count;
    m.obs_epoch.push_back(UINT32_MAX);
    g_mbar_changes++;
}

// ---------------------------------------------------------------- the PTX interpreter
std::string trim(const std::string &s) {
    size_t a = s.find_first_not_of(" \t\n{}"), b = s.find_last_not_of(" \t\n{}");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}
uint32_t cvt_rna_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return (u & 0x7FFFFFu) ? 0x7FFFFFFFu : u;
    u += 0x1000u;  // half a TF32 ulp on the magnitude: to nearest, ties away from zero
    return u & 0xFFFFE000u;
}

}  // namespace

// ================================================================ the shims' entry points
uint3 tg_emu_tid() { return make_uint3((unsigned)g_cur->tid, 0, 0); }
uint3 tg_emu_bid() { return make_uint3((unsigned)g_block, 0, 0); }
void __syncthreads() { arrive(g_blk, g_nthr, K_SYNCTHREADS, 0, "__syncthreads"); }
int __syncthreads_and(int pred) {
    g_cur->cval = pred != 0;
    arrive(g_blk, g_nthr, K_SYNCTHREADS, 1, "__syncthreads_and");
    return (int)g_cur->cres;
}
void __syncwarp(unsigned mask) {
    if (mask != 0xffffffffu) finding("__syncwarp with a partial mask", "", nullptr, nullptr);
    arrive(g_warp[g_cur->tid >> 5], 32, K_SYNCWARP, 0, "__syncwarp");
}
uint64_t tg_emu_warp_op(int op, uint64_t v, int arg, unsigned mask, int width) {
    if (mask != 0xffffffffu || width != 32) finding("warp shuffle/vote with partial mask or width", "", __builtin_return_address(0), nullptr);
    g_cur->cval = v;
    arrive(g_warp[g_cur->tid >> 5], 32, op, arg, "shfl/vote");
    return g_cur->cres;
}
size_t tg_emu_cvta_shared(const void *p) {
    const unsigned char *q = (const unsigned char *)p;
    if (q < g_sm || q > g_sm + g_sm_bytes) {
        finding("__cvta_generic_to_shared of a non-shared pointer", "", __builtin_return_address(0), nullptr);
        return 0;
    }
    return g_sbase + (size_t)(q - g_sm);
}

static void emu_asm(const char *tmpl, std::vector<tg_emu_op> &ops, const int nout, void *pc);
void tg_emu_asm(const char *tmpl, std::initializer_list<tg_emu_op> outs, std::initializer_list<tg_emu_op> ins) {
    std::vector<tg_emu_op> ops(outs);
    ops.insert(ops.end(), ins.begin(), ins.end());
    emu_asm(tmpl, ops, (int)outs.size(), __builtin_return_address(0));
}
void tg_emu_asm_v(const char *tmpl, const std::vector<tg_emu_op> &outs, const std::vector<tg_emu_op> &ins) {
    std::vector<tg_emu_op> ops(outs);
    ops.insert(ops.end(), ins.begin(), ins.end());
    emu_asm(tmpl, ops, (int)outs.size(), __builtin_return_address(0));
}
static void emu_asm(const char *tmpl, std::vector<tg_emu_op> &ops, const int nout, void *pc) {
    auto opnd = [&](const std::string &s) -> tg_emu_op & {
        if (s.empty() || s[0] != '%') {
            fprintf(stderr, "asm operand '%s'\n", s.c_str());
            abort();
        }
        const int i = atoi(s.c_str() + 1);
        if (i < 0 || i >= (int)ops.size()) {
            fprintf(stderr, "asm operand %d of %zu\n", i, ops.size());
            abort();
        }
        return ops[i];
    };
    std::map<std::string, uint64_t> reg;
    std::map<std::string, bool> pred;
    std::string all(tmpl);
    std::vector<std::string> st;
    {
        std::string cur;
        for (char ch : all) {
            if (ch == ';') st.push_back(trim(cur)), cur.clear();
            else cur += ch;
        }
        if (!trim(cur).empty()) st.push_back(trim(cur));
    }
    Thread *t = g_cur;
    for (const std::string &s : st) {
        // (trim took the scope braces off; ".reg .b64 da, db" declares nothing the interpreter needs)
        if (s.empty() || s[0] == '.') continue;
        std::istringstream is(s);
        std::string opc;
        is >> opc;
        std::string rest;
        std::getline(is, rest);
        std::vector<std::string> args;
        {
            std::string cur;
            int depth = 0;
            for (char ch : rest) {
                if (ch == '{') depth++;
                if (ch == '}') depth--;
                if (ch == ',' && depth == 0) args.push_back(cur), cur.clear();
                else cur += ch;
            }
            if (!cur.empty()) args.push_back(cur);
            for (auto &x : args) {
                size_t a = x.find_first_not_of(" \t\n"), b = x.find_last_not_of(" \t\n");
                x = a == std::string::npos ? "" : x.substr(a, b - a + 1);
            }
        }
        auto val = [&](const std::string &x) -> uint64_t {
            if (x[0] == '%') return opnd(x).u;
            if (reg.count(x)) return reg[x];
            return (uint64_t)strtoll(x.c_str(), nullptr, 0);
        };
        if (opc == "mov.b64") {
            reg[args[0]] = val(args[1]);
        } else if (opc == "add.s64") {
            reg[args[0]] = val(args[1]) + val(args[2]);
        } else if (opc == "setp.ne.b32") {
            pred[args[0]] = (uint32_t)val(args[1]) != (uint32_t)val(args[2]);
        } else if (opc == "wgmma.fence.sync.aligned") {
            t->fence_ok = true;
        } else if (opc == "wgmma.commit_group.sync.aligned") {
            t->committed++;
            t->uncommitted = 0;
        } else if (opc == "wgmma.wait_group.sync.aligned") {
            // wait_group N: every committed group but the newest N complete
            const int n = atoi(args[0].c_str());
            if (n < 0 || n > 7) finding("wait_group N out of 0..7", "", pc, nullptr);
            if (t->uncommitted) finding("wgmma.wait_group with uncommitted wgmma", tname(t->tid), pc, nullptr);
            const int done = std::max(t->waited, t->committed - std::max(n, 0));
            while ((int)t->wait_epoch.size() < done) t->wait_epoch.push_back(g_epoch);
            t->waited = done;
            t->fence_ok = false;
            t->inflight.erase(std::remove_if(t->inflight.begin(), t->inflight.end(),
                                             [&](const std::pair<float *, int> &fg) { return fg.second < done; }),
                              t->inflight.end());
        } else if (opc == "fence.proxy.async.shared::cta") {
            t->fences.push_back({++g_seq, g_epoch});
        } else if (opc == "cvt.rna.tf32.f32") {
            *(uint32_t *)opnd(args[0]).p = cvt_rna_tf32(opnd(args[1]).f);
        } else if (opc == "prefetch.global.L2") {
            // no effect on results
        } else if (opc == "cp.async.cg.shared.global" || opc == "cp.async.ca.shared.global") {
            // cp.async.{cg,ca}.shared.global [dst], [src], cp-size{, src-size}: dst a 32-bit shared-window
            // address, src a global (generic) address; the bytes past src-size are zeros
            auto addr = [&](const std::string &x) {
                if (x.size() < 3 || x.front() != '[' || x.back() != ']') {
                    fprintf(stderr, "cp.async operand '%s' (template '%s')\n", x.c_str(), tmpl);
                    abort();
                }
                return val(trim(x.substr(1, x.size() - 2)));
            };
            if (args.size() != 3 && args.size() != 4) {
                fprintf(stderr, "cp.async with %zu operands (template '%s')\n", args.size(), tmpl);
                abort();
            }
            const uint32_t dst = (uint32_t)addr(args[0]);
            unsigned char *src = (unsigned char *)(uintptr_t)addr(args[1]);
            const int n = (int)val(args[2]);
            const int srcn = args.size() == 4 ? (int)(uint32_t)val(args[3]) : n;
            if (!((n == 16) || (opc == "cp.async.ca.shared.global" && (n == 4 || n == 8)))) {
                fprintf(stderr, "cp.async cp-size %d (template '%s')\n", n, tmpl);
                abort();
            }
            if (srcn < 0 || srcn > n) finding("cp.async src-size outside 0..cp-size", std::to_string(srcn), pc, nullptr);
            if (dst % (uint32_t)n) finding("cp.async destination not aligned to cp-size", tname(t->tid), pc, nullptr);
            if ((uintptr_t)src % (uintptr_t)n) finding("cp.async source not aligned to cp-size", tname(t->tid), pc, nullptr);
            const size_t off = (size_t)dst - g_sbase;
            if (dst < g_sbase || off + n > g_sm_bytes) {
                finding("cp.async destination outside shared memory", tname(t->tid), pc, nullptr);
                continue;
            }
            Thread::CpAsync c;
            c.off = off, c.n = n, c.group = -1, c.pc = pc;
            memset(c.data, 0, sizeof c.data);
            const int rd = std::max(0, std::min(srcn, n));
            if (rd) {  // the global bytes are read at issue
                if (!g_glob.empty()) global_access(src, (size_t)rd, false, pc);
                memcpy(c.data, src, (size_t)rd);
            }
            smem_access(off, (size_t)n, true, pc, SM_CPA_ISSUE);
            for (int i = 0; i < n; i++) g_cpa_pend[off + i]++;
            t->cpa.push_back(c);
        } else if (opc == "cp.async.commit_group") {
            for (auto &c : t->cpa)
                if (c.group < 0) c.group = t->cpa_groups;
            t->cpa_groups++;
        } else if (opc == "cp.async.wait_group") {
            const int n = (int)val(args.at(0));
            if (n < 0 || n > 7) finding("cp.async.wait_group N outside 0..7", std::to_string(n), pc, nullptr);
            cpa_wait(t, std::max(n, 0));
        } else if (opc == "cp.async.wait_all") {  // = cp.async.commit_group; cp.async.wait_group 0
            for (auto &c : t->cpa)
                if (c.group < 0) c.group = t->cpa_groups;
            t->cpa_groups++;
            cpa_wait(t, 0);
        } else if (opc.rfind("wgmma.mma_async.sync.aligned.", 0) == 0) {
            // wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32 {d...}, da, db, p, sa, sb
            // wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16.bf16,f16.f16} {d...}, da, db, p, sa, sb, ta, tb
            const std::string shape = opc.substr(strlen("wgmma.mma_async.sync.aligned."));
            int N = 0, K = 0;
            char ta_[16] = "", tb_[16] = "";
            std::string ty;
            if (sscanf(shape.c_str(), "m64n%dk%d.f32.%15[a-z0-9].%15[a-z0-9]", &N, &K, ta_, tb_) == 4) ty = ta_;
            const bool ok = N >= 8 && N <= 256 && N % 8 == 0 && ty == tb_ &&
                            ((K == 8 && ty == "tf32") || (K == 16 && (ty == "bf16" || ty == "f16"))) &&
                            shape == "m64n" + std::to_string(N) + "k" + std::to_string(K) + ".f32." + ty + "." + ty;
            if (!ok) {
                fprintf(stderr, "unsupported wgmma %s\n", opc.c_str());
                abort();
            }
            if (args.size() != (K == 8 ? 6u : 8u)) {
                fprintf(stderr, "wgmma args %zu\n", args.size());
                abort();
            }
            WgArgs w;
            w.N = N, w.K = K, w.ty = ty == "tf32" ? 0 : ty == "f16" ? 1 : 2;
            w.ta = w.tb = 0;
            if (K == 16) {
                w.ta = (int)(int64_t)val(args[6]), w.tb = (int)(int64_t)val(args[7]);
                if ((w.ta != 0 && w.ta != 1) || (w.tb != 0 && w.tb != 1)) {
                    fprintf(stderr, "wgmma imm-trans %s %s\n", args[6].c_str(), args[7].c_str());
                    abort();
                }
            }
            // the accumulator list
            std::string lst = args[0];
            lst = lst.substr(lst.find('{') + 1);
            lst = lst.substr(0, lst.find('}'));
            std::vector<std::string> dl;
            {
                std::string cur;
                for (char ch : lst) {
                    if (ch == ',') dl.push_back(trim(cur)), cur.clear();
                    else if (ch != ' ' && ch != '\n') cur += ch;
                }
                if (!cur.empty()) dl.push_back(trim(cur));
            }
            if ((int)dl.size() != N / 2) finding("wgmma accumulator list length != N/2", opc, pc, nullptr);
            for (int i = 0; i < (int)dl.size() && i < 128; i++) {
                tg_emu_op &o = opnd(dl[i]);
                const int idx = atoi(dl[i].c_str() + 1);
                if (idx >= nout || strcmp(o.cons, "+f") != 0) finding("wgmma accumulator is not a \"+f\" output", dl[i], pc, nullptr);
                w.my[i] = (float *)o.p;
            }
            w.da = val(args[1]);
            w.db = val(args[2]);
            if (!pred.count(args[3])) finding("wgmma scale-d predicate undefined", args[3], pc, nullptr);
            w.scale_d = pred[args[3]];
            w.sa = (int)(int64_t)val(args[4]);
            w.sb = (int)(int64_t)val(args[5]);
            if ((w.sa != 1 && w.sa != -1) || (w.sb != 1 && w.sb != -1)) finding("wgmma imm-scale not 1 or -1", opc, pc, nullptr);
            w.gid = t->committed;
            if (!t->fence_ok) finding("wgmma.mma_async without wgmma.fence since the last wait", tname(t->tid), pc, nullptr);
            t->uncommitted++;
            for (int i = 0; i < (int)dl.size() && i < 128; i++) t->inflight.push_back({w.my[i], w.gid});
            t->wga = &w;
            arrive(g_wg[t->tid >> 7], 128, K_WGMMA, 0, "wgmma");
            t->wga = nullptr;
        } else if (opc == "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") {
            // {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}
            auto lst = [&](const std::string &x) {
                std::vector<std::string> v;
                std::string cur;
                for (char ch : x) {
                    if (ch == '{' || ch == ' ' || ch == '\n' || ch == '\t') continue;
                    if (ch == '}' || ch == ',') {
                        if (!cur.empty()) v.push_back(cur);
                        cur.clear();
                    } else cur += ch;
                }
                if (!cur.empty()) v.push_back(cur);
                return v;
            };
            auto bits = [&](const std::string &x) -> uint32_t {  // an operand's 32 bits (an output: its current value)
                tg_emu_op &o = opnd(x);
                if (o.p) return *(uint32_t *)o.p;
                if (o.cons[0] == 'f') {
                    uint32_t u;
                    memcpy(&u, &o.f, 4);
                    return u;
                }
                return (uint32_t)o.u;
            };
            if (args.size() != 4) {
                fprintf(stderr, "mma.sync with %zu operands\n", args.size());
                abort();
            }
            const auto D = lst(args[0]), A = lst(args[1]), Bv = lst(args[2]), Cv = lst(args[3]);
            if (D.size() != 4 || A.size() != 4 || Bv.size() != 2 || Cv.size() != 4) {
                fprintf(stderr, "mma.sync operand lists (template '%s')\n", tmpl);
                abort();
            }
            for (int i = 0; i < 4; i++) {
                t->mma_a[i] = bits(A[i]);
                const uint32_t cb = bits(Cv[i]);
                memcpy(&t->mma_c[i], &cb, 4);
                tg_emu_op &o = opnd(D[i]);
                if (!o.p) {
                    fprintf(stderr, "mma.sync D operand %s is not an output\n", D[i].c_str());
                    abort();
                }
                t->mma_d[i] = (float *)o.p;
            }
            t->mma_b[0] = bits(Bv[0]), t->mma_b[1] = bits(Bv[1]);
            arrive(g_warp[t->tid >> 5], 32, K_MMA, 0, "mma.sync");
        } else if (opc == "ldmatrix.sync.aligned.m8n8.x4.shared.b16" || opc == "ldmatrix.sync.aligned.m8n8.x2.shared.b16" ||
                   opc == "ldmatrix.sync.aligned.m8n8.x1.shared.b16") {
            const int cnt = opc.find(".x4.") != std::string::npos ? 4 : opc.find(".x2.") != std::string::npos ? 2 : 1;
            std::string l = args.at(0), ad = args.at(1);
            std::vector<std::string> outs;
            {
                std::string cur;
                for (char ch : l) {
                    if (ch == '{' || ch == ' ') continue;
                    if (ch == '}' || ch == ',') {
                        if (!cur.empty()) outs.push_back(cur);
                        cur.clear();
                    } else cur += ch;
                }
                if (!cur.empty()) outs.push_back(cur);
            }
            if ((int)outs.size() != cnt || ad.size() < 3 || ad.front() != '[') {
                fprintf(stderr, "ldmatrix operands (template '%s')\n", tmpl);
                abort();
            }
            for (int i = 0; i < cnt; i++) t->ldm_out[i] = (unsigned *)opnd(outs[i]).p;
            t->ldm_addr = (uint32_t)val(trim(ad.substr(1, ad.size() - 2)));
            t->ldm_pc = pc;
            arrive(g_warp[t->tid >> 5], 32, K_LDM, cnt, "ldmatrix");
        } else if (opc == "mbarrier.init.shared::cta.b64") {
            const uint32_t ad = (uint32_t)val(trim(args.at(0).substr(1, args[0].size() - 2)));
            const int cnt = (int)val(args.at(1));
            if (ad % 8) finding("mbarrier not 8-byte aligned", tname(t->tid), pc, nullptr);
            smem_access((size_t)ad - g_sbase, 8, true, pc);
            int mi = -1;
            for (size_t i = 0; i < g_mbar.size(); i++)
                if (g_mbar[i].addr == ad) mi = (int)i;
            if (mi >= 0 && !g_mbar[mi].copies.empty()) finding("mbarrier.init on an mbarrier with bulk copies pending", tname(t->tid), pc, nullptr);
            if (mi < 0) g_mbar.push_back(Mbar()), mi = (int)g_mbar.size() - 1;
            Mbar &m = g_mbar[mi];
            m.addr = ad, m.count = m.pending = cnt, m.tx = 0, m.phase = 0, m.obs_epoch.clear(), m.copies.clear();
            g_mbar_changes++;
        } else if (opc == "fence.mbarrier_init.release.cluster") {
            // (the init's visibility to the async proxy; the barrier after it is checked by the reads below)
        } else if (opc == "mbarrier.arrive.expect_tx.shared::cta.b64") {
            // _, [bar], tx: tx-count += tx, then one arrival
            const uint32_t ad = (uint32_t)val(trim(args.at(1).substr(1, args[1].size() - 2)));
            const long long tx = (long long)(uint32_t)val(args.at(2));
            smem_access((size_t)ad - g_sbase, 8, false, pc);
            const int mi = mbar_find(ad, pc);
            if (mi >= 0) {
                Mbar &m = g_mbar[mi];
                m.tx += tx;
                if (--m.pending < 0) finding("mbarrier: more arrivals than its count in a phase", tname(t->tid), pc, nullptr);
                g_mbar_changes++;
                mbar_check(mi);
            }
        } else if (opc == "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") {
            // [dst], [src], size, [bar]: done at issue (global bytes read now); lands when the phase completes
            auto inner = [&](const std::string &x) { return val(trim(x.substr(1, x.size() - 2))); };
            const uint32_t dst = (uint32_t)inner(args.at(0));
            unsigned char *src = (unsigned char *)(uintptr_t)inner(args.at(1));
            const uint32_t n = (uint32_t)val(args.at(2));
            const uint32_t ad = (uint32_t)inner(args.at(3));
            if (dst % 16 || (uintptr_t)src % 16 || n % 16 || n == 0)
                finding("cp.async.bulk: destination, source or size not a multiple of 16", tname(t->tid), pc, nullptr);
            const size_t off = (size_t)dst - g_sbase;
            if (dst < g_sbase || off + n > g_alloc) {
                finding("cp.async.bulk destination outside the dynamic allocation", tname(t->tid), pc, nullptr);
                continue;
            }
            const int mi = mbar_find(ad, pc);
            if (mi < 0) continue;
            BulkCopy c;
            c.off = off, c.tid = t->tid, c.pc = pc;
            if (!g_glob.empty()) global_access(src, n, false, pc);
            c.data.assign(src, src + n);
            smem_access(off, n, true, pc, SM_CPA_ISSUE);
            for (uint32_t i = 0; i < n; i++) g_cpa_pend[off + i]++;
            Mbar &m = g_mbar[mi];
            m.copies.push_back(std::move(c));
            m.tx -= n;
            g_stats["cp.async.bulk bytes"] += n;
            g_mbar_changes++;
            mbar_check(mi);
        } else if (opc == "mbarrier.try_wait.parity.shared::cta.b64") {
            // p, [bar], parity: true once the phase of that parity has completed (the current phase's
            // parity differs); false: this fiber yields (the kernel's loop tries again)
            const uint32_t ad = (uint32_t)val(trim(args.at(1).substr(1, args[1].size() - 2)));
            const uint32_t par = (uint32_t)val(args.at(2)) & 1u;
            smem_access((size_t)ad - g_sbase, 8, false, pc);
            const int mi = mbar_find(ad, pc);
            bool ok = true;
            if (mi >= 0) {
                Mbar &m = g_mbar[mi];
                ok = ((uint32_t)m.phase & 1u) != par;
                if (ok) {
                    if ((int)t->mobs.size() <= mi) t->mobs.resize(mi + 1, 0);
                    t->mobs[mi] = std::max(t->mobs[mi], m.phase);
                    if (m.phase > 0 && m.obs_epoch[m.phase - 1] > g_epoch) m.obs_epoch[m.phase - 1] = g_epoch;
                } else {
                    t->yielded = true;
                    swapcontext(&t->ctx, &g_main);
                    g_cur = t;
                }
            }
            pred[args.at(0)] = ok;
        } else if (opc == "selp.u32") {
            if (!pred.count(args.at(3))) finding("selp predicate undefined", args[3], pc, nullptr);
            *(uint32_t *)opnd(args.at(0)).p = pred[args[3]] ? (uint32_t)val(args[1]) : (uint32_t)val(args[2]);
        } else if (opc == "griddepcontrol.wait" || opc == "griddepcontrol.launch_dependents") {
            // one kernel at a time here: no effect
        } else {
            fprintf(stderr, "unsupported PTX statement '%s' (template '%s')\n", s.c_str(), tmpl);
            abort();
        }
    }
}

int atomicMax(int *a, int v) {
    if (g_cur && (unsigned char *)a >= g_sm && (unsigned char *)a < g_sm + g_sm_bytes)
        smem_access((unsigned char *)a - g_sm, 4, true, __builtin_return_address(0), SM_ATOMIC);
    else if (g_cur && !g_glob.empty()) global_access((unsigned char *)a, 4, true, __builtin_return_address(0));
    const int o = *a;
    if (v > o) *a = v;
    return o;
}
unsigned atomicMax(unsigned *a, unsigned v) {
    if (g_cur && (unsigned char *)a >= g_sm && (unsigned char *)a < g_sm + g_sm_bytes)
        smem_access((unsigned char *)a - g_sm, 4, true, __builtin_return_address(0), SM_ATOMIC);
    else if (g_cur && !g_glob.empty()) global_access((unsigned char *)a, 4, true, __builtin_return_address(0));
    const unsigned o = *a;
    if (v > o) *a = v;
    return o;
}

// ================================================================ instrumentation hooks
extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit() {}
#define TG_HOOK(N)                                                                                          \
    void __tsan_read##N(void *a) { access(a, N, false, __builtin_return_address(0)); }                     \
    void __tsan_write##N(void *a) { access(a, N, true, __builtin_return_address(0)); }                     \
    void __tsan_unaligned_read##N(void *a) { access(a, N, false, __builtin_return_address(0), false); }    \
    void __tsan_unaligned_write##N(void *a) { access(a, N, true, __builtin_return_address(0), false); }    \
    void __tsan_volatile_read##N(void *a) { access(a, N, false, __builtin_return_address(0)); }            \
    void __tsan_volatile_write##N(void *a) { access(a, N, true, __builtin_return_address(0)); }
TG_HOOK(1)
TG_HOOK(2)
TG_HOOK(4)
TG_HOOK(8)
TG_HOOK(16)
void __tsan_read_range(void *a, unsigned long n) { access(a, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void *a, unsigned long n) { access(a, n, true, __builtin_return_address(0)); }
void __tsan_vptr_update(void **, void *) {}
// -fsanitize=alignment (UBSan) handlers: a typed access through a pointer misaligned for its type
// (float2: 8, float4 / uint4: 16 bytes), which faults on the GPU
void __ubsan_handle_type_mismatch_v1(void *, void *) {
    if (g_cur) finding("misaligned typed access (UBSan alignment)", "", __builtin_return_address(0), nullptr);
}
void __ubsan_handle_type_mismatch_v1_abort(void *d, void *ptr) { __ubsan_handle_type_mismatch_v1(d, ptr); }
void __tsan_vptr_read(void **) {}
}

// ================================================================ the harness API
void emu_set_smem(void *host, size_t host_bytes, uint32_t shared_base, size_t alloc, std::vector<EmuRegion> layout) {
    g_sm = (unsigned char *)host, g_sm_bytes = host_bytes, g_sbase = shared_base, g_alloc = alloc;
    g_layout = std::move(layout);
}
void emu_clear_globals() { g_glob.clear(); }
void emu_add_global(const char *name, void *lo, size_t bytes, int kind) {
    g_glob.push_back({name, (unsigned char *)lo, bytes, kind, std::vector<uint8_t>(bytes, 0)});
}
void emu_set_global_kind(const char *name, int kind) {
    for (auto &g : g_glob)
        if (g.name == name) g.kind = kind;
}
const std::vector<uint8_t> &emu_global_writes(const char *name) {
    for (auto &g : g_glob)
        if (g.name == name) return g.writes;
    static std::vector<uint8_t> none;
    return none;
}
void emu_finding(const std::string &kind, const std::string &detail) { finding(kind, detail, nullptr, nullptr); }

void emu_set_threads(int n) { g_nthr = std::max(32, std::min(n, kThreads)); }
void emu_run_block(int block, int order, const std::function<void()> &body) {
    const int NT = g_nthr;
    g_block = block;
    g_body = &body;
    g_rec.assign(g_sm_bytes, Rec());
    g_cpa_pend.assign(g_sm_bytes, 0);
    g_bulk_bar.assign(g_sm_bytes, 0);
    g_bulk_phase.assign(g_sm_bytes, 0);
    g_mbar.clear();
    g_epoch = 0;
    g_seq = 0;
    g_barrier_seq.clear();
    memset(g_wsync, 0, sizeof g_wsync);
    // garbage in shared memory (a quiet NaN pattern): nothing may rely on zeros
    for (size_t i = 0; i + 4 <= g_sm_bytes; i += 4) {
        const uint32_t v = 0x7FC0A5A5u ^ (uint32_t)(i * 2654435761u & 0xFFFF);
        memcpy(g_sm + i, &v, 4);
    }
    for (auto &c : g_warp) c = Coll();
    for (auto &c : g_wg) c = Coll();
    g_blk = Coll();
    std::vector<int> ord(NT);
    for (int i = 0; i < NT; i++) ord[i] = order == 1 ? NT - 1 - i : i;
    if (order == 2) std::shuffle(ord.begin(), ord.end(), std::mt19937(1234 + block));
    for (int i = 0; i < NT; i++) {
        Thread &t = g_thr[i];
        if (!t.stack) t.stack = (char *)malloc(kStack);
        t.tid = i, t.done = false, t.blocked = false, t.fence_ok = false, t.committed = t.waited = t.uncommitted = 0, t.wait_epoch.clear();
        t.fences.clear();
        t.inflight.clear();
        t.cpa.clear();
        t.cpa_groups = 0;
        t.yielded = false;
        t.mobs.clear();
        getcontext(&t.ctx);
        t.ctx.uc_stack.ss_sp = t.stack;
        t.ctx.uc_stack.ss_size = kStack;
        t.ctx.uc_link = &g_main;
        makecontext(&t.ctx, (void (*)())fiber_main, 1, i);
    }
    int ndone = 0, idle_rounds = 0;
    while (ndone < NT) {
        bool any = false, progress = false;
        const long mch = g_mbar_changes;
        ndone = 0;
        for (int k = 0; k < NT; k++) {
            Thread &t = g_thr[ord[k]];
            if (t.done) {
                ndone++;
                continue;
            }
            if (t.blocked) continue;
            g_cur = &t;
            t.yielded = false;
            swapcontext(&g_main, &t.ctx);
            g_cur = nullptr;
            any = true;
            if (!t.yielded) progress = true;  // (a failed mbarrier try_wait alone is no progress)
        }
        if (mch != g_mbar_changes) progress = true;
        idle_rounds = progress ? 0 : idle_rounds + 1;
        if ((!any && ndone < NT) || idle_rounds >= 2) {
            int nb = 0;
            for (int i = 0; i < NT; i++) nb += !g_thr[i].done;
            finding("deadlock: threads blocked at collectives or mbarrier waits that never complete", std::to_string(nb) + " threads", nullptr, nullptr);
            break;
        }
    }
    for (const Mbar &m : g_mbar)
        if (!m.copies.empty()) finding("block ends with bulk copies whose mbarrier phase never completed", std::to_string(m.copies.size()) + " copies", m.copies[0].pc, nullptr);
    g_cur = nullptr;
}

void emu_clear_findings() { g_findings.clear(); }
std::vector<std::string> emu_finding_kinds() {
    std::vector<std::string> k;
    for (auto &kv : g_findings) k.push_back(kv.second.kind);
    return k;
}
void emu_smem_peek(size_t host_off, void *dst, size_t n) { memcpy(dst, g_sm + host_off, n); }

static std::string symbolize(const char *exe, void *pc) {
    if (!pc) return "";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "addr2line -i -e %s %p 2>/dev/null", exe, (void *)((char *)pc - 1));
    FILE *f = popen(cmd, "r");
    if (!f) return "";
    std::string out;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        std::string l(line);
        if (!l.empty() && l.back() == '\n') l.pop_back();
        const size_t s = l.find("gen/");
        if (s != std::string::npos) l = l.substr(s + 4);
        if (!out.empty()) out += " <- ";
        out += l;
    }
    pclose(f);
    return out;
}

int emu_print_findings(const char *exe) {
    for (auto &kv : g_findings) {
        const Finding &f = kv.second;
        printf("  FINDING [%ld x] %s\n      e.g. %s\n", f.count, f.kind.c_str(), f.detail.c_str());
        if (f.pc1) printf("      at %s\n", symbolize(exe, f.pc1).c_str());
        if (f.pc2) printf("      and %s\n", symbolize(exe, f.pc2).c_str());
    }
    return (int)g_findings.size();
}

void emu_print_stats() {
    printf("  tracked: smem bytes read %ld, written %ld; global bytes %ld\n", g_nr, g_nw, g_ng);
    g_nr = g_nw = g_ng = 0;
    for (auto &kv : g_stats) printf("  %s: %ld wgmma\n", kv.first.c_str(), kv.second);
    g_stats.clear();
}
