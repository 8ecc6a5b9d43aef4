// gguf_read.cpp - the strict GGUF v3 reader, and the helpers the writer shares.
//
// Every count, length and offset is checked against the bytes left before
// anything is allocated or read; sizes are computed with overflow checks; the
// first problem found is reported as "[call] 'file': where: what". Containers
// only grow as bytes are consumed, so memory stays within a small multiple of
// the file's size whatever its header declares.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <new>
#include <utility>

#include "gguf_impl.h"

// ---------------------------------------------------------------------------
// Helpers shared with the writer

size_t tg_gguf_scalar_size(tg_gguf_type t) {
    switch (t) {
        case TG_GGUF_UINT8:
        case TG_GGUF_INT8:
        case TG_GGUF_BOOL: return 1;
        case TG_GGUF_UINT16:
        case TG_GGUF_INT16: return 2;
        case TG_GGUF_UINT32:
        case TG_GGUF_INT32:
        case TG_GGUF_FLOAT32: return 4;
        case TG_GGUF_UINT64:
        case TG_GGUF_INT64:
        case TG_GGUF_FLOAT64: return 8;
        default: return 0;
    }
}

bool tg_gguf_is_integer(tg_gguf_type t) {
    switch (t) {
        case TG_GGUF_UINT8:
        case TG_GGUF_INT8:
        case TG_GGUF_UINT16:
        case TG_GGUF_INT16:
        case TG_GGUF_UINT32:
        case TG_GGUF_INT32:
        case TG_GGUF_UINT64:
        case TG_GGUF_INT64: return true;
        default: return false;
    }
}

bool tg_gguf_alignment_ok(uint64_t a) {
    return a != 0 && (a & (a - 1)) == 0 && a % TG_GGUF_MIN_ALIGNMENT == 0 && a <= TG_GGUF_MAX_ALIGNMENT;
}

const char *tg_gguf_type_name(tg_gguf_type t) {
    static const char *const names[TG_GGUF_TYPE_COUNT] = {"uint8", "int8",   "uint16", "int16",  "uint32",
                                                          "int32", "float32", "bool",  "string", "array",
                                                          "uint64", "int64",  "float64"};
    if ((int)t < 0 || (int)t >= TG_GGUF_TYPE_COUNT) return nullptr;
    return names[t];
}

// ggml's tensor type ids, for messages only (ids missing here are unknown or
// were removed from ggml).
static const struct {
    uint32_t id;
    const char *name;
} k_ggml_types[] = {
    {0, "f32"},      {1, "f16"},      {2, "q4_0"},    {3, "q4_1"},    {6, "q5_0"},    {7, "q5_1"},
    {8, "q8_0"},     {9, "q8_1"},     {10, "q2_K"},   {11, "q3_K"},   {12, "q4_K"},   {13, "q5_K"},
    {14, "q6_K"},    {15, "q8_K"},    {16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"}, {19, "iq1_s"},
    {20, "iq4_nl"},  {21, "iq3_s"},   {22, "iq2_s"},  {23, "iq4_xs"}, {24, "i8"},     {25, "i16"},
    {26, "i32"},     {27, "i64"},     {28, "f64"},    {29, "iq1_m"},  {30, "bf16"},   {34, "tq1_0"},
    {35, "tq2_0"},   {39, "mxfp4"},
};

const char *tg_gguf_ggml_type_name(uint32_t id) {
    for (const auto &e : k_ggml_types)
        if (e.id == id) return e.name;
    return nullptr;
}

bool tg_gguf_type_from_ggml(uint32_t id, tg_type *out) {
    switch (id) {
        case 0: *out = TG_TYPE_F32; return true;
        case 1: *out = TG_TYPE_F16; return true;
        case 30: *out = TG_TYPE_BF16; return true;
        case 26: *out = TG_TYPE_I32; return true;
        case 8: *out = TG_TYPE_Q8_0; return true;
        case 2: *out = TG_TYPE_Q4_0; return true;
        case 12: *out = TG_TYPE_Q4_K; return true;
        default: return false;
    }
}

uint32_t tg_gguf_type_to_ggml(tg_type t) {
    switch (t) {
        case TG_TYPE_F32: return 0;
        case TG_TYPE_F16: return 1;
        case TG_TYPE_BF16: return 30;
        case TG_TYPE_I32: return 26;
        case TG_TYPE_Q8_0: return 8;
        case TG_TYPE_Q4_0: return 2;
        case TG_TYPE_Q4_K: return 12;
        default: return UINT32_MAX;
    }
}

std::string tg_gguf_quote(const char *s, size_t n, size_t shown) {
    std::string out = "'";
    for (size_t i = 0; i < n && i < shown; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += (char)c;
        } else {
            char b[8];
            snprintf(b, sizeof(b), "\\x%02x", c);
            out += b;
        }
    }
    if (n > shown) out += "...";
    out += "'";
    return out;
}

int64_t tg_gguf_lookup(const tg_gguf_name_index &idx, const char *name) {
    auto it = std::lower_bound(idx.begin(), idx.end(), name,
                               [](const std::pair<const char *, int64_t> &e, const char *n) {
                                   return strcmp(e.first, n) < 0;
                               });
    if (it != idx.end() && strcmp(it->first, name) == 0) return it->second;
    return -1;
}

namespace {

std::string strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char *fmt, ...) {
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    return b;
}

// A cursor over the file's bytes that reports "[call] where ctx: what".
struct Parser {
    const unsigned char *p;
    size_t size;
    const char *call;
    std::string where;  // "'path': " for files
    std::string ctx;    // "kv 3 'key': ", "tensor 2 'name': "
    size_t pos = 0;

    Parser(const char *call_, std::string where_) : p(nullptr), size(0), call(call_), where(std::move(where_)) {}
    size_t left() const { return size - pos; }

    bool fail(tg_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4))) {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        tg_err(st, "[%s] %s%s%s", call, where.c_str(), ctx.c_str(), msg);
        return false;
    }
    bool need(uint64_t n, const char *what) {
        if (n <= left()) return true;
        return fail(TG_ERR_FORMAT, "%s at offset %zu needs %" PRIu64 " bytes, but only %zu are left", what, pos, n,
                    left());
    }
    bool u32(uint32_t *v, const char *what) {
        if (!need(4, what)) return false;
        memcpy(v, p + pos, 4);
        pos += 4;
        return true;
    }
    bool u64(uint64_t *v, const char *what) {
        if (!need(8, what)) return false;
        memcpy(v, p + pos, 8);
        pos += 8;
        return true;
    }
    // The body of a string whose u64 length was just read (at pos - 8).
    bool body(uint64_t len, const char *what, std::string *out) {
        if (len > left())
            return fail(TG_ERR_FORMAT, "%s length %" PRIu64 " at offset %zu exceeds the %zu bytes left", what, len,
                        pos - 8, left());
        out->assign((const char *)p + pos, (size_t)len);
        pos += (size_t)len;
        return true;
    }
    bool string(const char *what, std::string *out) {
        uint64_t len;
        return u64(&len, what) && body(len, what, out);
    }
};

// Sort (name, index) pairs; report the first name found twice.
bool build_index(Parser &ps, tg_gguf_name_index *idx, const char *what) {
    std::stable_sort(idx->begin(), idx->end(),
                     [](const std::pair<const char *, int64_t> &a, const std::pair<const char *, int64_t> &b) {
                         return strcmp(a.first, b.first) < 0;
                     });
    int64_t dup = -1, first = -1;
    for (size_t i = 1; i < idx->size(); i++) {
        if (strcmp((*idx)[i - 1].first, (*idx)[i].first) == 0 && (dup < 0 || (*idx)[i].second < dup)) {
            dup = (*idx)[i].second;
            first = (*idx)[i - 1].second;
        }
    }
    if (dup < 0) return true;
    const char *name = nullptr;
    for (const auto &e : *idx)
        if (e.second == dup) name = e.first;
    ps.ctx.clear();
    return ps.fail(TG_ERR_FORMAT, "%s %" PRId64 " %s: duplicate %s (first defined by %s %" PRId64 ")", what, dup,
                   tg_gguf_quote(name, strlen(name)).c_str(), strcmp(what, "kv") == 0 ? "key" : "name", what,
                   first);
}

bool check_bools(Parser &ps, const unsigned char *b, uint64_t n, bool is_array) {
    for (uint64_t i = 0; i < n; i++) {
        if (b[i] <= 1) continue;
        if (is_array) return ps.fail(TG_ERR_FORMAT, "bool element %" PRIu64 " is %u, not 0 or 1", i, b[i]);
        return ps.fail(TG_ERR_FORMAT, "bool value is %u, not 0 or 1", b[i]);
    }
    return true;
}

bool parse_value(Parser &ps, tg_gguf_kv &kv, uint32_t type) {
    if (type >= TG_GGUF_TYPE_COUNT)
        return ps.fail(TG_ERR_FORMAT, "unknown value type %u (%d as int32)", type, (int32_t)type);
    kv.type = (tg_gguf_type)type;
    if (kv.type == TG_GGUF_STRING) {
        kv.strs.emplace_back();
        return ps.string("string value", &kv.strs.back());
    }
    if (kv.type != TG_GGUF_ARRAY) {
        size_t sz = tg_gguf_scalar_size(kv.type);
        if (!ps.need(sz, "value")) return false;
        memcpy(kv.scalar, ps.p + ps.pos, sz);
        ps.pos += sz;
        return kv.type != TG_GGUF_BOOL || check_bools(ps, kv.scalar, 1, false);
    }
    uint32_t et;
    uint64_t n;
    if (!ps.u32(&et, "array element type")) return false;
    if (et == TG_GGUF_ARRAY) return ps.fail(TG_ERR_FORMAT, "array of arrays is not supported");
    if (et >= TG_GGUF_TYPE_COUNT)
        return ps.fail(TG_ERR_FORMAT, "unknown array element type %u (%d as int32)", et, (int32_t)et);
    if (!ps.u64(&n, "array count")) return false;
    kv.elem_type = (tg_gguf_type)et;
    kv.n = n;
    if (kv.elem_type == TG_GGUF_STRING) {
        if (n > ps.left() / 8)
            return ps.fail(TG_ERR_FORMAT,
                           "array count %" PRIu64 " of strings exceeds what the %zu bytes left can hold (8 or more each)",
                           n, ps.left());
        kv.strs.resize((size_t)n);  // bounded: at most left / 8 entries
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            if (!ps.u64(&len, "string element length")) return false;
            if (len > ps.left())
                return ps.fail(TG_ERR_FORMAT,
                               "string element %" PRIu64 ": length %" PRIu64 " at offset %zu exceeds the %zu bytes left",
                               i, len, ps.pos - 8, ps.left());
            if (!ps.body(len, "string element", &kv.strs[i])) return false;
        }
        return true;
    }
    size_t es = tg_gguf_scalar_size(kv.elem_type);
    if (n > ps.left() / es)
        return ps.fail(TG_ERR_FORMAT, "array count %" PRIu64 " of %s (%zu bytes each) exceeds the %zu bytes left", n,
                       tg_gguf_type_name(kv.elem_type), es, ps.left());
    size_t nb = (size_t)n * es;
    kv.num.assign(ps.p + ps.pos, ps.p + ps.pos + nb);
    ps.pos += nb;
    return kv.elem_type != TG_GGUF_BOOL || check_bools(ps, kv.num.data(), n, true);
}

bool parse_kvs(Parser &ps, tg_gguf *g, uint64_t n_kv) {
    for (uint64_t i = 0; i < n_kv; i++) {
        ps.ctx = strf("kv %" PRIu64 ": ", i);
        tg_gguf_kv kv;
        uint64_t len;
        if (!ps.u64(&len, "key length")) return false;
        if (len == 0) return ps.fail(TG_ERR_FORMAT, "empty key");
        if (len > TG_GGUF_MAX_KEY)
            return ps.fail(TG_ERR_FORMAT, "key length %" PRIu64 " exceeds %u", len, TG_GGUF_MAX_KEY);
        if (!ps.body(len, "key", &kv.key)) return false;
        ps.ctx = strf("kv %" PRIu64 " %s: ", i, tg_gguf_quote(kv.key).c_str());
        if (memchr(kv.key.data(), 0, kv.key.size())) return ps.fail(TG_ERR_FORMAT, "key contains a NUL byte");
        uint32_t type;
        if (!ps.u32(&type, "value type")) return false;
        if (!parse_value(ps, kv, type)) return false;
        g->kvs.push_back(std::move(kv));
    }
    ps.ctx.clear();
    g->kv_index.reserve(g->kvs.size());
    for (size_t i = 0; i < g->kvs.size(); i++) g->kv_index.emplace_back(g->kvs[i].key.c_str(), (int64_t)i);
    return build_index(ps, &g->kv_index, "kv");
}

bool read_alignment(Parser &ps, tg_gguf *g) {
    int64_t i = tg_gguf_lookup(g->kv_index, TG_GGUF_KEY_ALIGNMENT);
    if (i < 0) return true;
    const tg_gguf_kv &kv = g->kvs[(size_t)i];
    ps.ctx = strf("kv %" PRId64 " '" TG_GGUF_KEY_ALIGNMENT "': ", i);
    if (kv.type != TG_GGUF_UINT32)
        return ps.fail(TG_ERR_FORMAT, "has type %s, must be uint32", tg_gguf_type_name(kv.type));
    uint32_t a;
    memcpy(&a, kv.scalar, 4);
    if (a == 0) return ps.fail(TG_ERR_FORMAT, "alignment is 0");
    if (a & (a - 1)) return ps.fail(TG_ERR_FORMAT, "alignment %u is not a power of two", a);
    if (a % TG_GGUF_MIN_ALIGNMENT) return ps.fail(TG_ERR_FORMAT, "alignment %u is not a multiple of 8", a);
    if (!tg_gguf_alignment_ok(a))
        return ps.fail(TG_ERR_FORMAT, "alignment %u is above the supported %u", a, TG_GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    ps.ctx.clear();
    return true;
}

bool parse_tensor_info(Parser &ps, tg_gguf *g, uint64_t i) {
    tg_gguf_tensor_entry t;
    ps.ctx = strf("tensor %" PRIu64 ": ", i);
    uint64_t len;
    if (!ps.u64(&len, "name length")) return false;
    if (len == 0) return ps.fail(TG_ERR_FORMAT, "empty name");
    if (len >= TG_MAX_NAME)
        return ps.fail(TG_ERR_FORMAT, "name length %" PRIu64 " is %d or more (names are at most %d bytes)", len,
                       TG_MAX_NAME, TG_MAX_NAME - 1);
    if (!ps.body(len, "name", &t.name)) return false;
    ps.ctx = strf("tensor %" PRIu64 " %s: ", i, tg_gguf_quote(t.name).c_str());
    if (memchr(t.name.data(), 0, t.name.size())) return ps.fail(TG_ERR_FORMAT, "name contains a NUL byte");

    uint32_t n_dims;
    if (!ps.u32(&n_dims, "n_dims")) return false;
    if (n_dims < 1 || n_dims > TG_MAX_DIMS)
        return ps.fail(TG_ERR_FORMAT, "n_dims %u is not in [1, %d]", n_dims, TG_MAX_DIMS);
    t.n_dims = (int)n_dims;
    int64_t nelem = 1;
    for (int d = 0; d < TG_MAX_DIMS; d++) t.ne[d] = 1;
    for (int d = 0; d < t.n_dims; d++) {
        uint64_t v;
        if (!ps.u64(&v, "dim")) return false;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return ps.fail(TG_ERR_FORMAT, "dim %d is %" PRId64 " (dims must be >= 1)", d, (int64_t)v);
        t.ne[d] = (int64_t)v;
        if (__builtin_mul_overflow(nelem, t.ne[d], &nelem))
            return ps.fail(TG_ERR_FORMAT, "element count overflows int64 at dim %d (%" PRId64 ")", d, t.ne[d]);
    }

    uint32_t ggml_type;
    if (!ps.u32(&ggml_type, "tensor type")) return false;
    if (!tg_gguf_type_from_ggml(ggml_type, &t.type)) {
        const char *name = tg_gguf_ggml_type_name(ggml_type);
        if (name)
            return ps.fail(TG_ERR_UNSUPPORTED,
                           "ggml type %u (%s) is not supported (tinygml reads f32, f16, bf16, i32, q8_0, q4_0 and q4_K)", ggml_type,
                           name);
        return ps.fail(TG_ERR_FORMAT, "unknown ggml type %u", ggml_type);
    }
    // quantized rows are whole blocks; bytes = rows * row size
    const int64_t bs = tg_type_block_size(t.type);
    if (t.ne[0] % bs != 0)
        return ps.fail(TG_ERR_FORMAT, "ne[0] %" PRId64 " is not a multiple of %s's block size %" PRId64, t.ne[0],
                       tg_type_name(t.type), bs);
    uint64_t nbytes, padded;
    if (__builtin_mul_overflow((uint64_t)(nelem / t.ne[0]), (uint64_t)tg_row_size(t.type, t.ne[0]), &nbytes) ||
        (uint64_t)(size_t)nbytes != nbytes || tg_row_size(t.type, t.ne[0]) == 0)
        return ps.fail(TG_ERR_FORMAT, "byte size of %" PRId64 " %s elements overflows", nelem,
                       tg_type_name(t.type));
    if (__builtin_add_overflow(nbytes, (uint64_t)g->alignment - 1, &padded))
        return ps.fail(TG_ERR_FORMAT, "byte size %" PRIu64 " padded to alignment %zu overflows", nbytes,
                       g->alignment);
    t.nbytes = (size_t)nbytes;
    if (!ps.u64(&t.offset, "data offset")) return false;
    if (t.offset % g->alignment)
        return ps.fail(TG_ERR_FORMAT, "offset %" PRIu64 " is not a multiple of alignment %zu", t.offset,
                       g->alignment);
    g->tensors.push_back(std::move(t));
    return true;
}

// The data section: present, every tensor inside it, no two overlapping.
bool check_layout(Parser &ps, tg_gguf *g) {
    const uint64_t a = g->alignment;
    const uint64_t data_off = ((uint64_t)ps.pos + a - 1) / a * a;  // pos <= size: no overflow
    ps.ctx.clear();
    if (g->tensors.empty()) {
        g->data_offset = (size_t)std::min<uint64_t>(data_off, ps.size);
        return true;
    }
    if (data_off > ps.size)
        return ps.fail(TG_ERR_FORMAT,
                       "the data section would start at offset %" PRIu64
                       " (header end %zu aligned to %zu), past the end of the %zu-byte file",
                       data_off, ps.pos, g->alignment, ps.size);
    g->data_offset = (size_t)data_off;
    const uint64_t data_size = ps.size - data_off;
    std::vector<int64_t> order(g->tensors.size());
    for (size_t i = 0; i < order.size(); i++) {
        const tg_gguf_tensor_entry &t = g->tensors[i];
        order[i] = (int64_t)i;
        uint64_t end;
        if (t.offset > data_size || __builtin_add_overflow(t.offset, (uint64_t)t.nbytes, &end) || end > data_size) {
            ps.ctx = strf("tensor %zu %s: ", i, tg_gguf_quote(t.name).c_str());
            if (t.offset > data_size)
                return ps.fail(TG_ERR_FORMAT,
                               "data offset %" PRIu64 " is past the end of the %" PRIu64 "-byte data section",
                               t.offset, data_size);
            return ps.fail(TG_ERR_FORMAT,
                           "data [%" PRIu64 ", +%zu) ends %" PRIu64 " byte(s) past the end of the %" PRIu64
                           "-byte data section (file truncated?)",
                           t.offset, t.nbytes, t.offset + t.nbytes - data_size, data_size);
        }
    }
    std::sort(order.begin(), order.end(), [g](int64_t x, int64_t y) {
        const uint64_t ox = g->tensors[(size_t)x].offset, oy = g->tensors[(size_t)y].offset;
        return ox != oy ? ox < oy : x < y;
    });
    for (size_t k = 1; k < order.size(); k++) {
        const tg_gguf_tensor_entry &prev = g->tensors[(size_t)order[k - 1]];
        const tg_gguf_tensor_entry &cur = g->tensors[(size_t)order[k]];
        if (cur.offset < prev.offset + prev.nbytes) {
            int64_t ci = std::max(order[k - 1], order[k]), pi = std::min(order[k - 1], order[k]);
            const tg_gguf_tensor_entry &c = g->tensors[(size_t)ci], &p = g->tensors[(size_t)pi];
            ps.ctx = strf("tensor %" PRId64 " %s: ", ci, tg_gguf_quote(c.name).c_str());
            return ps.fail(TG_ERR_FORMAT,
                           "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor %" PRId64 " %s [%" PRIu64 ", %" PRIu64 ")",
                           c.offset, c.offset + c.nbytes, pi, tg_gguf_quote(p.name).c_str(), p.offset,
                           p.offset + p.nbytes);
        }
    }
    return true;
}

// The fixed header: magic, version, and the two counts against the bytes the
// file has after it (ps.size is the file's size; only the first
// TG_GGUF_HEADER_BYTES of ps.p are read).
bool parse_header(Parser &ps, tg_gguf *g, uint64_t *n_tensors_out, uint64_t *n_kv_out) {
    if (ps.size < 4)
        return ps.fail(TG_ERR_FORMAT, "file is %zu bytes, too short for GGUF (the header alone is 24 bytes)",
                       ps.size);
    if (memcmp(ps.p, TG_GGUF_MAGIC, 4) != 0)
        return ps.fail(TG_ERR_FORMAT, "bad magic %s (expected 'GGUF'): not a GGUF file",
                       tg_gguf_quote((const char *)ps.p, 4).c_str());
    ps.pos = 4;
    uint32_t version;
    if (!ps.u32(&version, "version")) return false;
    if (version != TG_GGUF_VERSION) {
        uint32_t swapped = __builtin_bswap32(version);
        if (swapped >= 1 && swapped <= TG_GGUF_VERSION)
            return ps.fail(TG_ERR_FORMAT,
                           "version field reads 0x%08x, version %u byte-swapped: a big-endian GGUF file "
                           "(only little-endian files are supported)",
                           version, swapped);
        if (version == 1 || version == 2)
            return ps.fail(TG_ERR_FORMAT, "GGUF version %u is not supported (only version 3; convert the file again)",
                           version);
        return ps.fail(TG_ERR_FORMAT, "unsupported GGUF version %u (this reader supports version 3)", version);
    }
    g->version = version;

    uint64_t n_tensors, n_kv;
    if (!ps.u64(&n_tensors, "tensor count") || !ps.u64(&n_kv, "kv count")) return false;
    if (n_tensors > (uint64_t)INT64_MAX)
        return ps.fail(TG_ERR_FORMAT, "tensor count %" PRIu64 " is negative as int64 (%" PRId64 ")", n_tensors,
                       (int64_t)n_tensors);
    if (n_kv > (uint64_t)INT64_MAX)
        return ps.fail(TG_ERR_FORMAT, "kv count %" PRIu64 " is negative as int64 (%" PRId64 ")", n_kv,
                       (int64_t)n_kv);
    // Smallest encodings: kv = key length + 1-byte key + type + 1-byte value;
    // tensor info = name length + 1-byte name + n_dims + one dim + type + offset.
    const uint64_t min_kv = 8 + 1 + 4 + 1, min_tensor = 8 + 1 + 4 + 8 + 4 + 8;
    if (n_kv > ps.left() / min_kv)
        return ps.fail(TG_ERR_FORMAT,
                       "kv count %" PRIu64 " cannot fit in the %zu bytes after the header (a kv takes %" PRIu64
                       " or more)",
                       n_kv, ps.left(), min_kv);
    if (n_tensors > (ps.left() - n_kv * min_kv) / min_tensor)
        return ps.fail(TG_ERR_FORMAT,
                       "tensor count %" PRIu64 " cannot fit in the %zu bytes after the header (with %" PRIu64
                       " kvs; a tensor info takes %" PRIu64 " or more)",
                       n_tensors, ps.left(), n_kv, min_tensor);
    *n_tensors_out = n_tensors;
    *n_kv_out = n_kv;
    return true;
}

bool parse(Parser &ps, tg_gguf *g) {
    uint64_t n_tensors, n_kv;
    if (!parse_header(ps, g, &n_tensors, &n_kv)) return false;
    if (!parse_kvs(ps, g, n_kv) || !read_alignment(ps, g)) return false;
    for (uint64_t i = 0; i < n_tensors; i++)
        if (!parse_tensor_info(ps, g, i)) return false;
    ps.ctx.clear();
    g->tensor_index.reserve(g->tensors.size());
    for (size_t i = 0; i < g->tensors.size(); i++)
        g->tensor_index.emplace_back(g->tensors[i].name.c_str(), (int64_t)i);
    return build_index(ps, &g->tensor_index, "tensor") && check_layout(ps, g);
}

// The file's bytes, aligned so that tensor data is aligned in memory too.
bool alloc_buffer(const char *call, const std::string &where, tg_gguf *g, size_t size) {
    g->buf = (unsigned char *)::operator new(size, std::align_val_t(TG_GGUF_BUF_ALIGN), std::nothrow);
    if (!g->buf) {
        tg_err(TG_ERR_OOM, "[%s] %scannot allocate %zu bytes for the file", call, where.c_str(), size);
        return false;
    }
    g->size = size;
    return true;
}

tg_gguf *finish(Parser &ps, std::unique_ptr<tg_gguf> &g) {
    ps.p = g->buf;
    ps.size = g->size;
    if (!parse(ps, g.get())) return nullptr;
    return g.release();
}

struct file_closer {
    void operator()(FILE *f) const { fclose(f); }
};

// What tg_gguf_open and tg_gguf_open_mmap check before reading or mapping:
// the path names a non-empty regular file that fits the address space.
bool check_stat(const char *call, const std::string &where, int fd, size_t *size) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tg_err(TG_ERR_IO, "[%s] %scannot stat: %s", call, where.c_str(), strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        tg_err(TG_ERR_IO, "[%s] %snot a regular file", call, where.c_str());
        return false;
    }
    if (st.st_size <= 0) {
        tg_err(TG_ERR_FORMAT, "[%s] %sfile is empty", call, where.c_str());
        return false;
    }
    if ((uint64_t)st.st_size != (uint64_t)(size_t)st.st_size) {
        tg_err(TG_ERR_OOM, "[%s] %sfile too large for this address space", call, where.c_str());
        return false;
    }
    *size = (size_t)st.st_size;
    return true;
}

struct fd_closer {
    int fd;
    ~fd_closer() {
        if (fd >= 0) close(fd);
    }
};

}  // namespace

tg_gguf::~tg_gguf() {
    if (!buf) return;
    if (mapped)
        munmap(buf, size);
    else
        ::operator delete(buf, std::align_val_t(TG_GGUF_BUF_ALIGN));
}

// ---------------------------------------------------------------------------
// Opening
//
// tg_gguf_open checks the header (magic, version, counts) from its first 24
// bytes before it allocates and reads the whole file.
//
// Both opens use O_NONBLOCK, then fstat (check_stat): opening a FIFO for
// reading otherwise waits for a writer, before any check could refuse it
// (a bad-input sweep of session 31 hung there). The flag changes nothing for
// the regular files that pass.
static int open_rdonly(const char *path) { return open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); }

tg_gguf *tg_gguf_open(const char *path) {
    const char *call = "gguf_open";
    if (!path) TG_FAIL_NULL(TG_ERR_ARG, "[%s] path is NULL", call);
    try {
        Parser ps(call, tg_gguf_quote(path, strlen(path), 200) + ": ");
        const int fd = open_rdonly(path);
        if (fd < 0) TG_FAIL_NULL(TG_ERR_IO, "[%s] %scannot open: %s", call, ps.where.c_str(), strerror(errno));
        std::unique_ptr<FILE, file_closer> f(fdopen(fd, "rb"));
        if (!f) {
            const int e = errno;
            close(fd);
            TG_FAIL_NULL(TG_ERR_IO, "[%s] %scannot open: %s", call, ps.where.c_str(), strerror(e));
        }
        size_t file_size;
        if (!check_stat(call, ps.where, fileno(f.get()), &file_size)) return nullptr;
        std::unique_ptr<tg_gguf> g(new tg_gguf);
        if (file_size >= TG_GGUF_HEADER_BYTES) {
            // the header first, from a small read: a file that is not GGUF (or
            // whose counts cannot fit) fails before the whole file is read
            unsigned char hdr[TG_GGUF_HEADER_BYTES];
            size_t got = fread(hdr, 1, sizeof hdr, f.get());
            if (got != sizeof hdr)
                TG_FAIL_NULL(TG_ERR_IO, "[%s] %sread %zu of the header's %zu bytes (%s)", call, ps.where.c_str(), got,
                             sizeof hdr, ferror(f.get()) ? strerror(errno) : "the file shrank while being read");
            Parser hp(call, ps.where);
            hp.p = hdr;
            hp.size = file_size;
            uint64_t n_tensors, n_kv;
            if (!parse_header(hp, g.get(), &n_tensors, &n_kv)) return nullptr;
            rewind(f.get());
        }
        if (!alloc_buffer(call, ps.where, g.get(), file_size)) return nullptr;
        size_t got = fread(g->buf, 1, g->size, f.get());
        if (got != g->size)
            TG_FAIL_NULL(TG_ERR_IO, "[%s] %sread %zu of %zu bytes (%s)", call, ps.where.c_str(), got, g->size,
                         ferror(f.get()) ? strerror(errno) : "the file shrank while being read");
        return finish(ps, g);
    } catch (const std::exception &e) {
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of memory (%s)", call, e.what());
    }
}

// tg_gguf_open_mmap validates from the map itself, with the same parser and
// checks as tg_gguf_open (the header first, then everything), so no pointer
// into a file that fails is ever handed out: a failed open unmaps (the
// tg_gguf's destructor). The map is private and read-only: writing through a
// tensor pointer faults, which is why a buffer over it is read-only
// (tg_backend_buffer_from_host_ptr). A file truncated while mapped raises
// SIGBUS on the first touch of a page past its new end (tinygml.h).
tg_gguf *tg_gguf_open_mmap(const char *path) {
    const char *call = "gguf_open_mmap";
    if (!path) TG_FAIL_NULL(TG_ERR_ARG, "[%s] path is NULL", call);
    try {
        Parser ps(call, tg_gguf_quote(path, strlen(path), 200) + ": ");
        fd_closer fd{open_rdonly(path)};
        if (fd.fd < 0) TG_FAIL_NULL(TG_ERR_IO, "[%s] %scannot open: %s", call, ps.where.c_str(), strerror(errno));
        size_t file_size;
        if (!check_stat(call, ps.where, fd.fd, &file_size)) return nullptr;
        void *map = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
        if (map == MAP_FAILED)
            TG_FAIL_NULL(errno == ENOMEM ? TG_ERR_OOM : TG_ERR_IO, "[%s] %scannot map %zu bytes: %s", call,
                         ps.where.c_str(), file_size, strerror(errno));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        // Advice only, before anything is read: pages of the file not yet in
        // the page cache come in as 2 MiB folios where the kernel can, so the
        // map is mostly PMD-mapped and a decode step's weight stream is not a
        // TLB miss per 4 KiB page. Pages already cached keep their folio
        // size. (bench/NOTES.md session 30: from a file not in the cache, a
        // 125M Q4_0 llama on 2 threads generates 239 tok/s mapped with it,
        // 214 without, 242 read into huge-page memory.)
        (void)madvise(map, file_size, MADV_HUGEPAGE);
#endif
        std::unique_ptr<tg_gguf> g(new (std::nothrow) tg_gguf);
        if (!g) {
            munmap(map, file_size);
            TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of memory", call);
        }
        g->buf = (unsigned char *)map;
        g->size = file_size;
        g->mapped = true;
        return finish(ps, g);  // the header's checks come first in parse, as in tg_gguf_open
    } catch (const std::exception &e) {
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of memory (%s)", call, e.what());
    }
}

bool tg_gguf_is_mapped(const tg_gguf *g) { return g && g->mapped; }

const void *tg_gguf_file_data(const tg_gguf *g, size_t *size) {
    if (!g) {
        if (size) *size = 0;
        TG_FAIL_NULL(TG_ERR_ARG, "[gguf_file_data] file is NULL");
    }
    if (size) *size = g->size;
    return g->buf;
}

tg_gguf *tg_gguf_open_memory(const void *data, size_t size) {
    const char *call = "gguf_open_memory";
    if (size == 0) TG_FAIL_NULL(TG_ERR_FORMAT, "[%s] file is empty", call);
    if (!data) TG_FAIL_NULL(TG_ERR_ARG, "[%s] data is NULL", call);
    try {
        Parser ps(call, "");
        std::unique_ptr<tg_gguf> g(new tg_gguf);
        if (!alloc_buffer(call, ps.where, g.get(), size)) return nullptr;
        memcpy(g->buf, data, size);
        return finish(ps, g);
    } catch (const std::exception &e) {
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of memory (%s)", call, e.what());
    }
}

void tg_gguf_close(tg_gguf *g) { delete g; }
