// emu_rt_api.h - what a harness asks of the emulators' shared runtime (scripts/emu_common/emu_rt.cpp):
// the block's shared memory and layout, global tensors, running a block's threads, the findings. No
// CUDA or project headers here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// a named part of the kernel's shared-memory layout: bytes from the 1024-aligned base the kernel
// computes, up to the next part's start (findings name the part and the offset into it)
struct EmuRegion {
    const char *name;
    uint32_t lo;
};

// the block's shared memory: host bytes, the shared-window address of its first byte, the dynamic
// allocation's size (kSmem: accesses past it are reported) and the kernel's layout (lo ascending)
void emu_set_smem(void *host, size_t host_bytes, uint32_t shared_base, size_t alloc, std::vector<EmuRegion> layout);
// global tensors: kind 0 input (read only), 1 output (each byte written once), 2 state (read, then written once)
void emu_clear_globals();
void emu_add_global(const char *name, void *lo, size_t bytes, int kind);
// a global tensor's kind from now on (e.g. a scratch one kernel wrote, an input to the next)
void emu_set_global_kind(const char *name, int kind);
// per-byte write counts of a global tensor (for the harness's coverage check)
const std::vector<uint8_t> &emu_global_writes(const char *name);
// one block of 512 threads running body() each; order 0: tids ascending, 1: descending, 2: shuffled
// (the interleaving of the fibers between synchronization points)
void emu_run_block(int block, int order, const std::function<void()> &body);
// prints the findings so far (deduplicated, source lines by addr2line on exe); returns how many
int emu_print_findings(const char *exe);
void emu_clear_findings();
// the kinds of the findings so far (one entry per distinct finding)
std::vector<std::string> emu_finding_kinds();
// bytes of the shared window at a host offset, read past the hazard tracker (for the self-test)
void emu_smem_peek(size_t host_off, void *dst, size_t n);
void emu_finding(const std::string &kind, const std::string &detail);
// since the last call: the bytes tracked, and each wgmma (warpgroup, shape, operand start
// addresses) with its count
void emu_print_stats();

// threads of the next emu_run_block's block (at most 512; default 512)
void emu_set_threads(int n);

// phase_args (cuda/delta_rule_phases.cuh) without the project's headers; the kernel TUs convert it
struct EmuDesc {
    char *data;
    int type;  // 0 F32, 1 F16, 2 BF16
    long long ne[4], nb[4];
};
