// gguf_fuzz.cpp - libFuzzer target for the GGUF reader (RELIABILITY 10).
//
// Each input is opened from memory, and through the memory-mapped reader from
// an in-memory file (memfd): both accept the same inputs and read the same.
// A rejected input must come with a "[gguf_open_memory] ..." message. An accepted one must answer every
// accessor and getter, and survive a round trip: copied key by key and
// tensor by tensor into a writer, written and reopened, it reads back the
// same, and writing the copy again gives the same bytes. Any violation traps.
// Build: scripts/fuzz.sh, or cmake -DTG_FUZZ=ON with clang (cmake/fuzz.cmake).
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tinygml.h"

#define FUZZ_CHECK(x)                                                                                   \
    do {                                                                                                \
        if (!(x)) {                                                                                     \
            fprintf(stderr, "gguf_fuzz: check failed at line %d: %s (last error: %s)\n", __LINE__, #x, \
                    tg_last_error());                                                                   \
            __builtin_trap();                                                                           \
        }                                                                                               \
    } while (0)

namespace {

// Call every getter on key; what they return is checked by the round trip.
void poke_getters(const tg_gguf *g, const char *key) {
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    const char *s;
    tg_gguf_type et;
    uint64_t n = 0;
    const void *data;
    tg_gguf_get_u32(g, key, &u32);
    tg_gguf_get_i32(g, key, &i32);
    tg_gguf_get_u64(g, key, &u64);
    tg_gguf_get_i64(g, key, &i64);
    tg_gguf_get_f32(g, key, &f32);
    tg_gguf_get_f64(g, key, &f64);
    tg_gguf_get_bool(g, key, &b);
    if (tg_gguf_get_str(g, key, &s) == TG_OK) FUZZ_CHECK(strlen(s) < (1u << 20));
    if (tg_gguf_get_arr(g, key, &et, &n, &data) == TG_OK && n > 0 && et != TG_GGUF_STRING) {
        FUZZ_CHECK(data != nullptr);
        volatile unsigned char last = ((const unsigned char *)data)[n - 1];  // in bounds (ASan)
        (void)last;
    }
    tg_gguf_get_arr_str(g, key, 0, &s);
    tg_gguf_get_arr_str(g, key, n, &s);  // one past the end: an error
}

// Copy kv i of g into w with its exact type.
void copy_kv(const tg_gguf *g, int64_t i, tg_gguf_writer *w) {
    const char *key = tg_gguf_kv_key(g, i);
    FUZZ_CHECK(key != nullptr);
    uint64_t u = 0;
    int64_t s = 0;
    double d = 0;
    float f = 0;
    bool b = false;
    const char *str = nullptr;
    switch (tg_gguf_kv_type(g, i)) {
        case TG_GGUF_UINT8: FUZZ_CHECK(tg_gguf_get_u64(g, key, &u) == TG_OK && tg_gguf_set_u8(w, key, (uint8_t)u) == TG_OK); break;
        case TG_GGUF_UINT16: FUZZ_CHECK(tg_gguf_get_u64(g, key, &u) == TG_OK && tg_gguf_set_u16(w, key, (uint16_t)u) == TG_OK); break;
        case TG_GGUF_UINT32: FUZZ_CHECK(tg_gguf_get_u64(g, key, &u) == TG_OK && tg_gguf_set_u32(w, key, (uint32_t)u) == TG_OK); break;
        case TG_GGUF_UINT64: FUZZ_CHECK(tg_gguf_get_u64(g, key, &u) == TG_OK && tg_gguf_set_u64(w, key, u) == TG_OK); break;
        case TG_GGUF_INT8: FUZZ_CHECK(tg_gguf_get_i64(g, key, &s) == TG_OK && tg_gguf_set_i8(w, key, (int8_t)s) == TG_OK); break;
        case TG_GGUF_INT16: FUZZ_CHECK(tg_gguf_get_i64(g, key, &s) == TG_OK && tg_gguf_set_i16(w, key, (int16_t)s) == TG_OK); break;
        case TG_GGUF_INT32: FUZZ_CHECK(tg_gguf_get_i64(g, key, &s) == TG_OK && tg_gguf_set_i32(w, key, (int32_t)s) == TG_OK); break;
        case TG_GGUF_INT64: FUZZ_CHECK(tg_gguf_get_i64(g, key, &s) == TG_OK && tg_gguf_set_i64(w, key, s) == TG_OK); break;
        case TG_GGUF_FLOAT32: FUZZ_CHECK(tg_gguf_get_f32(g, key, &f) == TG_OK && tg_gguf_set_f32(w, key, f) == TG_OK); break;
        case TG_GGUF_FLOAT64: FUZZ_CHECK(tg_gguf_get_f64(g, key, &d) == TG_OK && tg_gguf_set_f64(w, key, d) == TG_OK); break;
        case TG_GGUF_BOOL: FUZZ_CHECK(tg_gguf_get_bool(g, key, &b) == TG_OK && tg_gguf_set_bool(w, key, b) == TG_OK); break;
        case TG_GGUF_STRING: FUZZ_CHECK(tg_gguf_get_str(g, key, &str) == TG_OK && tg_gguf_set_str(w, key, str) == TG_OK); break;
        case TG_GGUF_ARRAY: {
            tg_gguf_type et;
            uint64_t n;
            const void *data;
            FUZZ_CHECK(tg_gguf_get_arr(g, key, &et, &n, &data) == TG_OK);
            if (et != TG_GGUF_STRING) {
                FUZZ_CHECK(tg_gguf_set_arr(w, key, et, n, data) == TG_OK);
                break;
            }
            std::vector<const char *> strs(n);
            for (uint64_t k = 0; k < n; k++) FUZZ_CHECK(tg_gguf_get_arr_str(g, key, k, &strs[k]) == TG_OK);
            FUZZ_CHECK(tg_gguf_set_arr_str(w, key, n, strs.data()) == TG_OK);
            break;
        }
        default: FUZZ_CHECK(!"kv of an invalid type");
    }
}

tg_gguf_writer *copy_file(const tg_gguf *g) {
    tg_gguf_writer *w = tg_gguf_writer_new();
    FUZZ_CHECK(w != nullptr);
    for (int64_t i = 0; i < tg_gguf_n_kv(g); i++) copy_kv(g, i, w);
    for (int64_t i = 0; i < tg_gguf_n_tensors(g); i++) {
        const char *name;
        tg_type type;
        int n_dims;
        int64_t ne[4];
        size_t nbytes;
        FUZZ_CHECK(tg_gguf_tensor_info(g, i, &name, &type, &n_dims, ne, &nbytes) == TG_OK);
        const unsigned char *data = (const unsigned char *)tg_gguf_tensor_data(g, i);
        FUZZ_CHECK(data != nullptr && nbytes > 0);
        volatile unsigned char edge = data[0] ^ data[nbytes - 1];  // both ends in bounds (ASan)
        (void)edge;
        FUZZ_CHECK((uintptr_t)data % 8 == 0);
        FUZZ_CHECK(tg_gguf_add_tensor(w, name, type, n_dims, ne, data) == TG_OK);
    }
    return w;
}

std::vector<unsigned char> write_bytes(const tg_gguf_writer *w) {
    void *p = nullptr;
    size_t n = 0;
    FUZZ_CHECK(tg_gguf_write_memory(w, &p, &n) == TG_OK);
    std::vector<unsigned char> v((unsigned char *)p, (unsigned char *)p + n);
    tg_gguf_free_memory(p);
    return v;
}

bool same_scalar(const tg_gguf *a, const tg_gguf *b, const char *key, tg_gguf_type t) {
    if (t == TG_GGUF_FLOAT32 || t == TG_GGUF_FLOAT64) {
        double x = 0, y = 0;
        FUZZ_CHECK(tg_gguf_get_f64(a, key, &x) == TG_OK && tg_gguf_get_f64(b, key, &y) == TG_OK);
        return (std::isnan(x) && std::isnan(y)) || memcmp(&x, &y, sizeof(x)) == 0;
    }
    if (t == TG_GGUF_BOOL) {
        bool x = false, y = false;
        FUZZ_CHECK(tg_gguf_get_bool(a, key, &x) == TG_OK && tg_gguf_get_bool(b, key, &y) == TG_OK);
        return x == y;
    }
    if (t == TG_GGUF_STRING) {
        const char *x = nullptr, *y = nullptr;
        FUZZ_CHECK(tg_gguf_get_str(a, key, &x) == TG_OK && tg_gguf_get_str(b, key, &y) == TG_OK);
        return strcmp(x, y) == 0;
    }
    int64_t x = 0, y = 0;
    uint64_t ux = 0, uy = 0;
    if (tg_gguf_get_i64(a, key, &x) == TG_OK) return tg_gguf_get_i64(b, key, &y) == TG_OK && x == y;
    FUZZ_CHECK(tg_gguf_get_u64(a, key, &ux) == TG_OK && tg_gguf_get_u64(b, key, &uy) == TG_OK);
    return ux == uy;
}

void check_same(const tg_gguf *a, const tg_gguf *b) {
    FUZZ_CHECK(tg_gguf_n_kv(a) == tg_gguf_n_kv(b));
    FUZZ_CHECK(tg_gguf_n_tensors(a) == tg_gguf_n_tensors(b));
    FUZZ_CHECK(tg_gguf_alignment(a) == tg_gguf_alignment(b));
    for (int64_t i = 0; i < tg_gguf_n_kv(a); i++) {
        const char *key = tg_gguf_kv_key(a, i);
        tg_gguf_type t = tg_gguf_kv_type(a, i);
        FUZZ_CHECK(strcmp(key, tg_gguf_kv_key(b, i)) == 0 && t == tg_gguf_kv_type(b, i));
        if (t != TG_GGUF_ARRAY) {
            FUZZ_CHECK(same_scalar(a, b, key, t));
            continue;
        }
        tg_gguf_type ea, eb;
        uint64_t na, nb;
        const void *da, *db;
        FUZZ_CHECK(tg_gguf_get_arr(a, key, &ea, &na, &da) == TG_OK && tg_gguf_get_arr(b, key, &eb, &nb, &db) == TG_OK);
        FUZZ_CHECK(ea == eb && na == nb);
        if (ea != TG_GGUF_STRING) {
            size_t es = ea == TG_GGUF_UINT8 || ea == TG_GGUF_INT8 || ea == TG_GGUF_BOOL ? 1
                        : ea == TG_GGUF_UINT16 || ea == TG_GGUF_INT16                   ? 2
                        : ea == TG_GGUF_UINT32 || ea == TG_GGUF_INT32 || ea == TG_GGUF_FLOAT32 ? 4
                                                                                            : 8;
            FUZZ_CHECK(na == 0 || memcmp(da, db, na * es) == 0);
            continue;
        }
        for (uint64_t k = 0; k < na; k++) {
            const char *sa, *sb;
            FUZZ_CHECK(tg_gguf_get_arr_str(a, key, k, &sa) == TG_OK && tg_gguf_get_arr_str(b, key, k, &sb) == TG_OK);
            FUZZ_CHECK(strcmp(sa, sb) == 0);
        }
    }
    for (int64_t i = 0; i < tg_gguf_n_tensors(a); i++) {
        const char *na, *nb;
        tg_type ta, tb;
        int da, db;
        int64_t ea[4], eb[4];
        size_t sa, sb;
        FUZZ_CHECK(tg_gguf_tensor_info(a, i, &na, &ta, &da, ea, &sa) == TG_OK);
        FUZZ_CHECK(tg_gguf_tensor_info(b, i, &nb, &tb, &db, eb, &sb) == TG_OK);
        FUZZ_CHECK(strcmp(na, nb) == 0 && ta == tb && da == db && memcmp(ea, eb, sizeof(ea)) == 0 && sa == sb);
        FUZZ_CHECK(tg_gguf_find_tensor(b, na) == i);
        FUZZ_CHECK(memcmp(tg_gguf_tensor_data(a, i), tg_gguf_tensor_data(b, i), sa) == 0);
    }
}

}  // namespace

// The memory-mapped reader on the same bytes (an in-memory file): it must
// accept exactly what open_memory accepts, and read the same.
void check_mapped(const uint8_t *data, size_t size, const tg_gguf *g) {
    int fd = memfd_create("gguf_fuzz", MFD_CLOEXEC);
    if (fd < 0) return;  // no memfd here: nothing to compare
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) break;
        done += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    tg_gguf *m = done == size ? tg_gguf_open_mmap(path) : nullptr;
    if (done == size) {
        FUZZ_CHECK((m != nullptr) == (g != nullptr));
        if (!m) FUZZ_CHECK(strncmp(tg_last_error(), "[gguf_open_mmap] ", 17) == 0);
    }
    if (m && g) check_same(g, m);
    tg_gguf_close(m);
    close(fd);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tg_gguf *g = tg_gguf_open_memory(data, size);
    const std::string msg = g ? "" : tg_last_error();
    check_mapped(data, size, g);
    if (!g) {
        FUZZ_CHECK(strncmp(msg.c_str(), "[gguf_open_memory] ", 19) == 0);
        return 0;
    }
    FUZZ_CHECK(tg_gguf_version(g) == 3);
    for (int64_t i = 0; i < tg_gguf_n_kv(g); i++) {
        const char *key = tg_gguf_kv_key(g, i);
        FUZZ_CHECK(key && tg_gguf_find_key(g, key) == i);
        poke_getters(g, key);
    }
    tg_gguf_writer *w = copy_file(g);
    std::vector<unsigned char> bytes = write_bytes(w);
    tg_gguf_writer_free(w);
    tg_gguf *g2 = tg_gguf_open_memory(bytes.data(), bytes.size());
    FUZZ_CHECK(g2 != nullptr);
    check_same(g, g2);
    tg_gguf_writer *w2 = copy_file(g2);
    FUZZ_CHECK(write_bytes(w2) == bytes);  // the writer is deterministic
    tg_gguf_writer_free(w2);
    tg_gguf_close(g2);
    tg_gguf_close(g);
    return 0;
}
