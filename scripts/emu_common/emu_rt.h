// emu_rt.h (scripts/emu_common, both emulators') - host shims of the CUDA device environment, so that the real kernel source (as gen.py
// copies it) compiles as host C++ and runs one block on 512 fibers (emu_rt.cpp). Every memory
// access of the kernel TU reaches emu_rt.cpp's hazard tracker through GCC's -fsanitize=thread
// instrumentation hooks (__tsan_read*/__tsan_write*); gen.py rewrites each inline asm into
// tg_emu_asm(template, outputs, inputs), which emu_rt.cpp's PTX interpreter executes.
#pragma once
#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define __launch_bounds__(...)
#define TG_EMU_CUDA_ARCH 900  // gen.py: __CUDA_ARCH__ (bulk_copy.cuh's code is for 9.0 and later)
// the window of a kernel's static __shared__ array (gen.py rewrites the declaration into a reference to it)
extern float4 tg_emu_static_sm[];
// st.global.cs: a plain store here (the cache hint has no effect on results)
template <class T> static inline void tg_emu_stcs(T *p, const T &v) { *p = v; }
#define __stcs tg_emu_stcs
#ifndef __CUDA_ARCH_FEAT_SM90_ALL
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#endif
using std::max;
using std::min;

// an inline-asm operand: constraint and where it lives / its value
struct tg_emu_op {
    const char *cons;
    void *p;      // outputs
    uint64_t u;   // inputs ("l", "r")
    float f;      // inputs ("f")
};
static inline tg_emu_op tg_emu_out(const char *c, float &x) { return {c, &x, 0, 0.0f}; }
static inline tg_emu_op tg_emu_out(const char *c, unsigned &x) { return {c, &x, 0, 0.0f}; }
static inline tg_emu_op tg_emu_in(const char *c, uint64_t x) { return {c, nullptr, x, 0.0f}; }
static inline tg_emu_op tg_emu_in(const char *c, long long x) { return {c, nullptr, (uint64_t)x, 0.0f}; }
static inline tg_emu_op tg_emu_in(const char *c, unsigned x) { return {c, nullptr, x, 0.0f}; }
static inline tg_emu_op tg_emu_in(const char *c, int x) { return {c, nullptr, (uint64_t)(unsigned)x, 0.0f}; }
static inline tg_emu_op tg_emu_in(const char *c, float x) { return {c, nullptr, 0, x}; }
static inline tg_emu_op tg_emu_in(const char *c, const void *x) { return {c, nullptr, (uint64_t)(uintptr_t)x, 0.0f}; }
void tg_emu_asm(const char *tmpl, std::initializer_list<tg_emu_op> outs, std::initializer_list<tg_emu_op> ins);
// the same with operand lists built at run time (the self-test's chains of any N)
void tg_emu_asm_v(const char *tmpl, const std::vector<tg_emu_op> &outs, const std::vector<tg_emu_op> &ins);

uint3 tg_emu_tid();
uint3 tg_emu_bid();
#define threadIdx (tg_emu_tid())
#define blockIdx (tg_emu_bid())
void __syncthreads();
int __syncthreads_and(int pred);  // a barrier that also returns whether pred held in every thread
void __syncwarp(unsigned mask = 0xffffffffu);

enum { TG_SHFL_XOR = 1, TG_SHFL_UP = 2, TG_VOTE_ANY = 3, TG_VOTE_ALL = 4, TG_SHFL_IDX = 5 };
uint64_t tg_emu_warp_op(int op, uint64_t v, int arg, unsigned mask, int width);
template <class T> static inline T tg_emu_shfl(int op, unsigned m, T v, int off, int width) {
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    u = tg_emu_warp_op(op, u, off, m, width);
    T r;
    memcpy(&r, &u, sizeof(T));
    return r;
}
static inline float __shfl_xor_sync(unsigned m, float v, int o, int w = 32) { return tg_emu_shfl(TG_SHFL_XOR, m, v, o, w); }
static inline int __shfl_xor_sync(unsigned m, int v, int o, int w = 32) { return tg_emu_shfl(TG_SHFL_XOR, m, v, o, w); }
static inline double __shfl_xor_sync(unsigned m, double v, int o, int w = 32) { return tg_emu_shfl(TG_SHFL_XOR, m, v, o, w); }
static inline int __shfl_sync(unsigned m, int v, int src, int w = 32) { return tg_emu_shfl(TG_SHFL_IDX, m, v, src, w); }
static inline float __shfl_sync(unsigned m, float v, int src, int w = 32) { return tg_emu_shfl(TG_SHFL_IDX, m, v, src, w); }
static inline float __shfl_up_sync(unsigned m, float v, unsigned o, int w = 32) { return tg_emu_shfl(TG_SHFL_UP, m, v, (int)o, w); }
static inline int __shfl_up_sync(unsigned m, int v, unsigned o, int w = 32) { return tg_emu_shfl(TG_SHFL_UP, m, v, (int)o, w); }
static inline int __any_sync(unsigned m, int p) { return (int)tg_emu_warp_op(TG_VOTE_ANY, p != 0, 0, m, 32); }
static inline int __all_sync(unsigned m, int p) { return (int)tg_emu_warp_op(TG_VOTE_ALL, p != 0, 0, m, 32); }
template <class T> static inline T __ldg(const T *p) { return *p; }
size_t tg_emu_cvta_shared(const void *p);
static inline size_t __cvta_generic_to_shared(const void *p) { return tg_emu_cvta_shared(p); }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int atomicCAS(int *a, int c, int v) { int o = *a; if (o == c) *a = v; return o; }
// atomics on shared memory (emu_rt.cpp, not instrumented): checked as atomic writes (no hazard among
// atomics of one phase; with plain accesses as writes)
int atomicMax(int *a, int v);
unsigned atomicMax(unsigned *a, unsigned v);
