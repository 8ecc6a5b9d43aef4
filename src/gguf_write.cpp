// gguf_write.cpp - the GGUF v3 writer.
//
// Layout written: header, key/values in the order first set, tensor infos in
// the order added, zero padding to the alignment, then each tensor's bytes
// padded with zeros to the alignment (offsets relative to the data section).
// Everything a reader would reject is refused at set/add time instead.

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <string>

#include "file_replace.h"
#include "gguf_impl.h"

struct tg_gguf_writer_tensor {
    std::string name;
    tg_type type;
    int n_dims;
    int64_t ne[TG_MAX_DIMS];
    uint64_t nbytes = 0;
    std::vector<unsigned char> data;    // copied bytes, or empty when fill is set
    tg_gguf_fill_fn fill = nullptr;     // streamed: called at write time
    void *user = nullptr;
};

struct tg_gguf_writer {
    std::vector<tg_gguf_kv> kvs;
    std::vector<tg_gguf_writer_tensor> tensors;
    uint32_t alignment = TG_GGUF_DEFAULT_ALIGNMENT;
};

tg_gguf_writer *tg_gguf_writer_new(void) {
    tg_gguf_writer *w = new (std::nothrow) tg_gguf_writer;
    if (!w) TG_FAIL_NULL(TG_ERR_OOM, "[gguf_writer_new] out of memory");
    return w;
}

void tg_gguf_writer_free(tg_gguf_writer *w) { delete w; }

// ---------------------------------------------------------------------------
// Key/values

static tg_status check_key(const char *call, const tg_gguf_writer *w, const char *key) {
    if (!w) return tg_err(TG_ERR_ARG, "[%s] the writer is NULL", call);
    if (!key) return tg_err(TG_ERR_ARG, "[%s] key is NULL", call);
    size_t n = strlen(key);
    if (n == 0) return tg_err(TG_ERR_ARG, "[%s] empty key", call);
    if (n > TG_GGUF_MAX_KEY)
        return tg_err(TG_ERR_ARG, "[%s] key length %zu exceeds %u", call, n, TG_GGUF_MAX_KEY);
    return TG_OK;
}

// Store kv under key (validated), replacing an existing value. Nothing
// changes on failure.
static tg_status put(const char *call, tg_gguf_writer *w, const char *key, tg_gguf_kv &kv) {
    uint32_t align = 0;
    if (strcmp(key, TG_GGUF_KEY_ALIGNMENT) == 0) {
        if (kv.type != TG_GGUF_UINT32)
            return tg_err(TG_ERR_ARG, "[%s] key '%s' must be a uint32 (set it with tg_gguf_set_u32)", call, key);
        memcpy(&align, kv.scalar, 4);
        if (!tg_gguf_alignment_ok(align))
            return tg_err(TG_ERR_ARG, "[%s] key '%s': alignment %u must be a power of two, a multiple of 8 and at most %u",
                          call, key, align, TG_GGUF_MAX_ALIGNMENT);
    }
    try {
        kv.key = key;
        tg_gguf_kv *slot = nullptr;
        for (tg_gguf_kv &e : w->kvs)
            if (e.key == kv.key) slot = &e;
        if (slot) {
            *slot = std::move(kv);
        } else {
            w->kvs.push_back(std::move(kv));
        }
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] key '%s': out of memory (%s)", call, key, e.what());
    }
    if (align) w->alignment = align;
    return TG_OK;
}

static tg_status set_scalar(const char *call, tg_gguf_writer *w, const char *key, tg_gguf_type type,
                            const void *v) {
    tg_status st = check_key(call, w, key);
    if (st != TG_OK) return st;
    tg_gguf_kv kv;
    kv.type = type;
    memcpy(kv.scalar, v, tg_gguf_scalar_size(type));
    return put(call, w, key, kv);
}

tg_status tg_gguf_set_u8(tg_gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar("gguf_set_u8", w, key, TG_GGUF_UINT8, &v);
}
tg_status tg_gguf_set_i8(tg_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar("gguf_set_i8", w, key, TG_GGUF_INT8, &v);
}
tg_status tg_gguf_set_u16(tg_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar("gguf_set_u16", w, key, TG_GGUF_UINT16, &v);
}
tg_status tg_gguf_set_i16(tg_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar("gguf_set_i16", w, key, TG_GGUF_INT16, &v);
}
tg_status tg_gguf_set_u32(tg_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar("gguf_set_u32", w, key, TG_GGUF_UINT32, &v);
}
tg_status tg_gguf_set_i32(tg_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar("gguf_set_i32", w, key, TG_GGUF_INT32, &v);
}
tg_status tg_gguf_set_u64(tg_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar("gguf_set_u64", w, key, TG_GGUF_UINT64, &v);
}
tg_status tg_gguf_set_i64(tg_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar("gguf_set_i64", w, key, TG_GGUF_INT64, &v);
}
tg_status tg_gguf_set_f32(tg_gguf_writer *w, const char *key, float v) {
    return set_scalar("gguf_set_f32", w, key, TG_GGUF_FLOAT32, &v);
}
tg_status tg_gguf_set_f64(tg_gguf_writer *w, const char *key, double v) {
    return set_scalar("gguf_set_f64", w, key, TG_GGUF_FLOAT64, &v);
}
tg_status tg_gguf_set_bool(tg_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar("gguf_set_bool", w, key, TG_GGUF_BOOL, &b);
}

tg_status tg_gguf_set_str(tg_gguf_writer *w, const char *key, const char *v) {
    const char *call = "gguf_set_str";
    tg_status st = check_key(call, w, key);
    if (st != TG_OK) return st;
    if (!v) return tg_err(TG_ERR_ARG, "[%s] key '%s': value is NULL", call, key);
    tg_gguf_kv kv;
    kv.type = TG_GGUF_STRING;
    try {
        kv.strs.emplace_back(v);
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] key '%s': out of memory (%s)", call, key, e.what());
    }
    return put(call, w, key, kv);
}

tg_status tg_gguf_set_arr(tg_gguf_writer *w, const char *key, tg_gguf_type elem_type, uint64_t n,
                          const void *data) {
    const char *call = "gguf_set_arr";
    tg_status st = check_key(call, w, key);
    if (st != TG_OK) return st;
    if (elem_type == TG_GGUF_STRING)
        return tg_err(TG_ERR_ARG, "[%s] key '%s': string arrays are set with tg_gguf_set_arr_str", call, key);
    if (elem_type == TG_GGUF_ARRAY)
        return tg_err(TG_ERR_ARG, "[%s] key '%s': arrays of arrays are not supported", call, key);
    size_t es = tg_gguf_scalar_size(elem_type);
    if (es == 0) return tg_err(TG_ERR_ARG, "[%s] key '%s': invalid element type %d", call, key, (int)elem_type);
    uint64_t nb;
    if (__builtin_mul_overflow(n, (uint64_t)es, &nb) || (uint64_t)(size_t)nb != nb)
        return tg_err(TG_ERR_ARG, "[%s] key '%s': %" PRIu64 " elements of %zu bytes overflow", call, key, n, es);
    if (n > 0 && !data) return tg_err(TG_ERR_ARG, "[%s] key '%s': data is NULL", call, key);
    const unsigned char *b = (const unsigned char *)data;
    if (elem_type == TG_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return tg_err(TG_ERR_ARG, "[%s] key '%s': bool element %" PRIu64 " is %u, not 0 or 1", call, key, i,
                              b[i]);
    tg_gguf_kv kv;
    kv.type = TG_GGUF_ARRAY;
    kv.elem_type = elem_type;
    kv.n = n;
    try {
        if (n > 0) kv.num.assign(b, b + nb);
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] key '%s': out of memory for %" PRIu64 " bytes (%s)", call, key, nb, e.what());
    }
    return put(call, w, key, kv);
}

tg_status tg_gguf_set_arr_str(tg_gguf_writer *w, const char *key, uint64_t n, const char *const *strs) {
    const char *call = "gguf_set_arr_str";
    tg_status st = check_key(call, w, key);
    if (st != TG_OK) return st;
    if (n > 0 && !strs) return tg_err(TG_ERR_ARG, "[%s] key '%s': strs is NULL", call, key);
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) return tg_err(TG_ERR_ARG, "[%s] key '%s': string %" PRIu64 " is NULL", call, key, i);
    tg_gguf_kv kv;
    kv.type = TG_GGUF_ARRAY;
    kv.elem_type = TG_GGUF_STRING;
    kv.n = n;
    try {
        kv.strs.reserve((size_t)n);
        for (uint64_t i = 0; i < n; i++) kv.strs.emplace_back(strs[i]);
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] key '%s': out of memory (%s)", call, key, e.what());
    }
    return put(call, w, key, kv);
}

// ---------------------------------------------------------------------------
// Tensors

// Validate and append one tensor entry; its bytes come from data (copied) or,
// when fill is set, from fill at write time. Nothing changes on failure.
static tg_status add_tensor(const char *call, tg_gguf_writer *w, const char *name, tg_type type, int n_dims,
                            const int64_t *ne, const void *data, tg_gguf_fill_fn fill, void *user) {
    if (!w) return tg_err(TG_ERR_ARG, "[%s] the writer is NULL", call);
    if (!name) return tg_err(TG_ERR_ARG, "[%s] name is NULL", call);
    size_t len = strlen(name);
    if (len == 0) return tg_err(TG_ERR_ARG, "[%s] empty name", call);
    if (len >= TG_MAX_NAME)
        return tg_err(TG_ERR_ARG, "[%s] name %s is %zu bytes (at most %d)", call, tg_gguf_quote(name, len).c_str(),
                      len, TG_MAX_NAME - 1);
    for (const tg_gguf_writer_tensor &t : w->tensors)
        if (t.name == name) return tg_err(TG_ERR_ARG, "[%s] tensor '%s' was already added", call, name);
    if (tg_type_size(type) == 0) return tg_err(TG_ERR_ARG, "[%s] tensor '%s': invalid type %d", call, name, (int)type);
    if (n_dims < 1 || n_dims > TG_MAX_DIMS)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s': n_dims %d is not in [1, %d]", call, name, n_dims, TG_MAX_DIMS);
    if (!ne) return tg_err(TG_ERR_ARG, "[%s] tensor '%s': ne is NULL", call, name);
    if (!data && !fill) return tg_err(TG_ERR_ARG, "[%s] tensor '%s': data is NULL", call, name);
    int64_t nelem = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return tg_err(TG_ERR_ARG, "[%s] tensor '%s': ne[%d] is %" PRId64 " (must be >= 1)", call, name, d, ne[d]);
        if (__builtin_mul_overflow(nelem, ne[d], &nelem))
            return tg_err(TG_ERR_ARG, "[%s] tensor '%s': element count overflows int64", call, name);
    }
    const int64_t bs = tg_type_block_size(type);
    if (ne[0] % bs != 0)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s': ne[0] %" PRId64 " is not a multiple of %s's block size %" PRId64,
                      call, name, ne[0], tg_type_name(type), bs);
    uint64_t nbytes;
    const size_t row = tg_row_size(type, ne[0]);
    if (row == 0 || __builtin_mul_overflow((uint64_t)(nelem / ne[0]), (uint64_t)row, &nbytes) ||
        nbytes > (uint64_t)PTRDIFF_MAX)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s': byte size overflows", call, name);
    try {
        tg_gguf_writer_tensor t;
        t.name = name;
        t.type = type;
        t.n_dims = n_dims;
        for (int d = 0; d < TG_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
        t.nbytes = nbytes;
        if (fill) {
            t.fill = fill;
            t.user = user;
        } else {
            const unsigned char *b = (const unsigned char *)data;
            t.data.assign(b, b + nbytes);
        }
        w->tensors.push_back(std::move(t));
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] tensor '%s': out of memory for %" PRIu64 " bytes (%s)", call, name, nbytes,
                      e.what());
    }
    return TG_OK;
}

tg_status tg_gguf_add_tensor(tg_gguf_writer *w, const char *name, tg_type type, int n_dims, const int64_t *ne,
                             const void *data) {
    return add_tensor("gguf_add_tensor", w, name, type, n_dims, ne, data, nullptr, nullptr);
}

tg_status tg_gguf_add_tensor_fill(tg_gguf_writer *w, const char *name, tg_type type, int n_dims, const int64_t *ne,
                                  tg_gguf_fill_fn fill, void *user) {
    const char *call = "gguf_add_tensor_fill";
    if (!fill) return tg_err(TG_ERR_ARG, "[%s] tensor '%s': fill is NULL", call, name ? name : "(null)");
    return add_tensor(call, w, name, type, n_dims, ne, nullptr, fill, user);
}

// ---------------------------------------------------------------------------
// Serialization

namespace {

struct Out {
    std::vector<unsigned char> b;
    void raw(const void *p, size_t n) {
        const unsigned char *c = (const unsigned char *)p;
        b.insert(b.end(), c, c + n);
    }
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v) { raw(&v, 8); }
    void str(const std::string &s) {
        u64(s.size());
        raw(s.data(), s.size());
    }
};

// Header (padded to the alignment) and each tensor's offset in the data
// section; *data_size is the padded size of the data section.
tg_status build_header(const char *call, const tg_gguf_writer *w, Out *o, std::vector<uint64_t> *offsets,
                       uint64_t *data_size) {
    const uint64_t a = w->alignment;
    o->raw(TG_GGUF_MAGIC, 4);
    o->u32(TG_GGUF_VERSION);
    o->u64(w->tensors.size());
    o->u64(w->kvs.size());
    for (const tg_gguf_kv &kv : w->kvs) {
        o->str(kv.key);
        o->u32((uint32_t)kv.type);
        if (kv.type == TG_GGUF_STRING) {
            o->str(kv.strs[0]);
        } else if (kv.type == TG_GGUF_ARRAY) {
            o->u32((uint32_t)kv.elem_type);
            o->u64(kv.n);
            if (kv.elem_type == TG_GGUF_STRING) {
                for (const std::string &s : kv.strs) o->str(s);
            } else {
                o->raw(kv.num.data(), kv.num.size());
            }
        } else {
            o->raw(kv.scalar, tg_gguf_scalar_size(kv.type));
        }
    }
    uint64_t off = 0;
    for (const tg_gguf_writer_tensor &t : w->tensors) {
        o->str(t.name);
        o->u32((uint32_t)t.n_dims);
        for (int d = 0; d < t.n_dims; d++) o->u64((uint64_t)t.ne[d]);
        o->u32(tg_gguf_type_to_ggml(t.type));
        o->u64(off);
        offsets->push_back(off);
        uint64_t end;
        if (__builtin_add_overflow(off, t.nbytes, &end) || end > UINT64_MAX - a)
            return tg_err(TG_ERR_ARG, "[%s] the data section size overflows", call);
        off = (end + a - 1) / a * a;
    }
    o->b.resize((o->b.size() + a - 1) / a * a, 0);
    *data_size = off;
    return TG_OK;
}

tg_status build(const char *call, const tg_gguf_writer *w, Out *o, std::vector<uint64_t> *offsets,
                uint64_t *data_size) {
    try {
        return build_header(call, w, o, offsets, data_size);
    } catch (const std::exception &e) {
        return tg_err(TG_ERR_OOM, "[%s] out of memory for the header (%s)", call, e.what());
    }
}

bool write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

// Streamed tensors are produced in pieces of at most this many bytes.
const size_t kFillChunk = (size_t)4 << 20;

// Let tensor t's fill write bytes [0, nbytes) into dst, in order, in pieces.
// put(piece, n) takes each piece (NULL: fill writes straight into dst + off).
tg_status run_fill(const char *call, const tg_gguf_writer_tensor &t, unsigned char *dst,
                   const std::function<bool(const unsigned char *, size_t)> &put) {
    for (uint64_t off = 0; off < t.nbytes; off += kFillChunk) {
        size_t n = (size_t)std::min<uint64_t>(kFillChunk, t.nbytes - off);
        unsigned char *p = put ? dst : dst + off;
        tg_status st = t.fill(t.user, p, (size_t)off, n);
        if (st != TG_OK)
            return tg_err(st, "[%s] tensor '%s': fill failed at byte %" PRIu64 ": %s", call, t.name.c_str(), off,
                          tg_last_error());
        if (put && !put(p, n)) return TG_ERR_IO;
    }
    return TG_OK;
}

bool write_zeros(FILE *f, uint64_t n) {
    static const unsigned char zeros[4096] = {0};
    while (n > 0) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        if (!write_all(f, zeros, k)) return false;
        n -= k;
    }
    return true;
}

}  // namespace

tg_status tg_gguf_write(const tg_gguf_writer *w, const char *path) {
    const char *call = "gguf_write";
    if (!w) return tg_err(TG_ERR_ARG, "[%s] the writer is NULL", call);
    if (!path) return tg_err(TG_ERR_ARG, "[%s] path is NULL", call);
    if (!*path) return tg_err(TG_ERR_ARG, "[%s] path is empty", call);
    Out o;
    std::vector<uint64_t> offsets;
    uint64_t data_size = 0;
    tg_status st = build(call, w, &o, &offsets, &data_size);
    if (st != TG_OK) return st;
    // written beside the target and renamed over it (file_replace.h)
    tg_file_replace out;
    if ((st = tg_file_replace_open(call, path, &out)) != TG_OK) return st;
    FILE *f = out.f;
    bool ok = write_all(f, o.b.data(), o.b.size());
    int err = ok ? 0 : errno;
    tg_status fill_st = TG_OK;
    const uint64_t a = w->alignment;
    std::vector<unsigned char> chunk;
    for (size_t i = 0; ok && i < w->tensors.size(); i++) {
        const tg_gguf_writer_tensor &t = w->tensors[i];
        if (t.fill) {
            try {
                chunk.resize((size_t)std::min<uint64_t>(kFillChunk, t.nbytes));
            } catch (const std::exception &e) {
                fill_st = tg_err(TG_ERR_OOM, "[%s] out of memory for a fill buffer (%s)", call, e.what());
                ok = false;
                break;
            }
            bool write_failed = false;
            fill_st = run_fill(call, t, chunk.data(), [&](const unsigned char *p, size_t n) {
                write_failed = !write_all(f, p, n);
                return !write_failed;
            });
            ok = fill_st == TG_OK;
            if (write_failed) {  // the write itself failed: reported below with errno
                err = errno;
                fill_st = TG_OK;
            }
        } else {
            ok = write_all(f, t.data.data(), t.data.size());
        }
        if (ok && !write_zeros(f, (a - t.nbytes % a) % a)) ok = false;
        if (!ok && fill_st == TG_OK && err == 0) err = errno;
    }
    err = tg_file_replace_finish(&out, ok, err);
    if (!ok || err != 0) {
        if (fill_st != TG_OK) return fill_st;  // the fill's own message
        return tg_err(TG_ERR_IO, "[%s] '%s': write failed: %s", call, path, strerror(err));
    }
    return TG_OK;
}

tg_status tg_gguf_write_memory(const tg_gguf_writer *w, void **data, size_t *size) {
    const char *call = "gguf_write_memory";
    if (!w) return tg_err(TG_ERR_ARG, "[%s] the writer is NULL", call);
    if (!data || !size) return tg_err(TG_ERR_ARG, "[%s] data or size is NULL", call);
    Out o;
    std::vector<uint64_t> offsets;
    uint64_t data_size = 0;
    tg_status st = build(call, w, &o, &offsets, &data_size);
    if (st != TG_OK) return st;
    uint64_t total;
    if (__builtin_add_overflow((uint64_t)o.b.size(), data_size, &total) || total > (uint64_t)PTRDIFF_MAX)
        return tg_err(TG_ERR_OOM, "[%s] the file size overflows", call);
    unsigned char *p = (unsigned char *)calloc(1, (size_t)total);
    if (!p) return tg_err(TG_ERR_OOM, "[%s] cannot allocate %" PRIu64 " bytes", call, total);
    memcpy(p, o.b.data(), o.b.size());
    for (size_t i = 0; i < w->tensors.size(); i++) {
        const tg_gguf_writer_tensor &t = w->tensors[i];
        unsigned char *dst = p + o.b.size() + offsets[i];
        if (t.fill) {
            tg_status fs = run_fill(call, t, dst, nullptr);
            if (fs != TG_OK) {
                free(p);
                return fs;
            }
        } else if (!t.data.empty()) {
            memcpy(dst, t.data.data(), t.data.size());
        }
    }
    *data = p;
    *size = (size_t)total;
    return TG_OK;
}

void tg_gguf_free_memory(void *data) { free(data); }
