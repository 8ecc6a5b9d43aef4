// error.cpp - thread-local error messages, status names, type facts.
#include <cstdio>
#include <cstdlib>

#include "internal.h"

static thread_local std::string t_last_error;

static tg_status set_message(tg_status s, const char *fmt, va_list ap) {
    if (!fmt) {  // tg_set_error is public: a NULL format is the caller's, not a crash in vsnprintf
        t_last_error = "[set_error] fmt is NULL";
        return s;
    }
    char buf[1024];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    t_last_error = buf;
    return s;
}

tg_status tg_err(tg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_message(s, fmt, ap);
    va_end(ap);
    return s;
}

// the public twin of tg_err, for code layered on tinygml
tg_status tg_set_error(tg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_message(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *tg_last_error(void) { return t_last_error.c_str(); }

const char *tg_status_name(tg_status s) {
    switch (s) {
        case TG_OK: return "ok";
        case TG_ERR_ARG: return "invalid argument";
        case TG_ERR_OOM: return "out of memory";
        case TG_ERR_IO: return "i/o error";
        case TG_ERR_FORMAT: return "bad file format";
        case TG_ERR_BACKEND: return "backend error";
        case TG_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

void tg_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "tinygml internal invariant failed: %s:%d: %s\n", file, line, expr);
    abort();
}

const char *tg_type_name(tg_type t) {
    switch (t) {
        case TG_TYPE_F32: return "f32";
        case TG_TYPE_F16: return "f16";
        case TG_TYPE_BF16: return "bf16";
        case TG_TYPE_I32: return "i32";
        case TG_TYPE_Q8_0: return "q8_0";
        case TG_TYPE_Q4_0: return "q4_0";
        case TG_TYPE_Q4_K: return "q4_k";
        default: return nullptr;
    }
}

size_t tg_type_size(tg_type t) {
    switch (t) {
        case TG_TYPE_F32: return 4;
        case TG_TYPE_F16: return 2;
        case TG_TYPE_BF16: return 2;
        case TG_TYPE_I32: return 4;
        case TG_TYPE_Q8_0: return 34;  // bytes per block (src/quant.h)
        case TG_TYPE_Q4_0: return 18;
        case TG_TYPE_Q4_K: return 144;
        default: return 0;
    }
}

int64_t tg_type_block_size(tg_type t) {
    switch (t) {
        case TG_TYPE_F32:
        case TG_TYPE_F16:
        case TG_TYPE_BF16:
        case TG_TYPE_I32: return 1;
        case TG_TYPE_Q8_0: return 32;
        case TG_TYPE_Q4_0: return 32;
        case TG_TYPE_Q4_K: return 256;
        default: return 0;
    }
}

bool tg_type_is_quantized(tg_type t) { return t == TG_TYPE_Q8_0 || t == TG_TYPE_Q4_0 || t == TG_TYPE_Q4_K; }

size_t tg_row_size(tg_type t, int64_t ne) {
    const int64_t bs = tg_type_block_size(t);
    if (bs == 0 || ne < 0 || ne % bs != 0) return 0;
    size_t n;
    if (__builtin_mul_overflow((size_t)(ne / bs), tg_type_size(t), &n)) return 0;
    return n;
}

// IEEE half <-> float, round to nearest even, with subnormals, inf and NaN.
float tg_fp16_to_fp32_impl(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tg_fp32_to_fp16_impl(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  // NaN
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  // overflow (rounds past 65504) or inf
    if (absu < 0x38800000u) {                                    // subnormal half or zero
        if (absu < 0x33000000u) return (uint16_t)sign;           // below half of the smallest subnormal
        uint32_t man = (absu & 0x7fffff) | 0x800000;
        // value = man * 2^(exp-150); half subnormal unit = 2^-24
        int e = (int)(absu >> 23) - 150 + 24;  // man * 2^e half-units, e < 0
        uint32_t q = man >> (-e);
        uint32_t rem = man & ((1u << (-e)) - 1);
        uint32_t half = 1u << (-e - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((absu >> 13) - ((127 - 15) << 10));
    uint32_t rem = absu & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

uint16_t tg_fp32_to_fp16(float f) { return tg_fp32_to_fp16_impl(f); }
float tg_fp16_to_fp32(uint16_t h) { return tg_fp16_to_fp32_impl(h); }
uint16_t tg_fp32_to_bf16(float f) { return tg_f32_to_bf16(f); }
float tg_bf16_to_fp32(uint16_t h) { return tg_bf16_to_f32(h); }
