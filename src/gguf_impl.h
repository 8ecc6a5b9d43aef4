// gguf_impl.h - internals shared by the GGUF reader (gguf_read.cpp) and
// writer (gguf_write.cpp). Not installed.
#pragma once

#include <new>
#include <string>
#include <utility>
#include <vector>

#include "internal.h"

// GGUF is little-endian and the reader hands out packed array payloads as-is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tinygml's GGUF code needs a little-endian host");

#define TG_GGUF_MAGIC "GGUF"
#define TG_GGUF_VERSION 3u
#define TG_GGUF_DEFAULT_ALIGNMENT 32u
#define TG_GGUF_MIN_ALIGNMENT 8u   // the spec: a multiple of 8 (and a power of two)
// Largest alignment accepted (reader and writer): padding is written and held
// in memory, so a tiny file must not make a reader or a rewrite allocate
// gigabytes (RELIABILITY 9; a fuzz input asked for 2^29). Real files use 32.
#define TG_GGUF_MAX_ALIGNMENT (1u << 20)
#define TG_GGUF_MAX_KEY 65535u     // the spec: keys are at most 2^16 - 1 bytes
#define TG_GGUF_KEY_ALIGNMENT "general.alignment"
#define TG_GGUF_BUF_ALIGN 64       // the reader's file buffer alignment
#define TG_GGUF_HEADER_BYTES 24u   // magic, version, tensor count, kv count

// One key/value pair. Scalars (numeric, bool) keep their little-endian bytes
// in `scalar`; STRING keeps its one string in strs[0]; ARRAY keeps elem_type,
// n, and either packed little-endian elements in `num` or n strings in `strs`.
struct tg_gguf_kv {
    std::string key;
    tg_gguf_type type = TG_GGUF_INVALID;
    tg_gguf_type elem_type = TG_GGUF_INVALID;  // ARRAY only
    uint64_t n = 0;                            // ARRAY only: element count
    unsigned char scalar[8] = {0};
    std::vector<unsigned char> num;
    std::vector<std::string> strs;
};

// Bytes of one value of a numeric or bool type; 0 for STRING, ARRAY, invalid.
size_t tg_gguf_scalar_size(tg_gguf_type t);
bool tg_gguf_is_integer(tg_gguf_type t);
// A nonzero power of two, a multiple of TG_GGUF_MIN_ALIGNMENT, at most TG_GGUF_MAX_ALIGNMENT.
bool tg_gguf_alignment_ok(uint64_t a);

// ggml tensor type ids (the file's) <-> tg_type. Unknown id: false.
bool tg_gguf_type_from_ggml(uint32_t ggml_id, tg_type *out);
uint32_t tg_gguf_type_to_ggml(tg_type t);
// Name of a ggml type id, for messages ("q4_0"); NULL if the id is unknown.
const char *tg_gguf_ggml_type_name(uint32_t ggml_id);

// Printable, quoted form of a key or name from a file: non-printable bytes as
// \xNN, cut to a few dozen bytes with "..." so messages stay readable.
std::string tg_gguf_quote(const char *s, size_t n, size_t shown = 48);
inline std::string tg_gguf_quote(const std::string &s) { return tg_gguf_quote(s.data(), s.size()); }

// ---------------------------------------------------------------------------
// The parsed file (gguf_read.cpp builds it, gguf_get.cpp reads it)

struct tg_gguf_tensor_entry {
    std::string name;
    tg_type type;
    int n_dims;
    int64_t ne[TG_MAX_DIMS];
    size_t nbytes;
    uint64_t offset;  // from the start of the data section
};

// (name, index) sorted by name: lookups by strcmp, with no allocation.
typedef std::vector<std::pair<const char *, int64_t>> tg_gguf_name_index;

struct tg_gguf {
    uint32_t version = 0;
    size_t alignment = TG_GGUF_DEFAULT_ALIGNMENT;
    std::vector<tg_gguf_kv> kvs;
    tg_gguf_name_index kv_index;
    std::vector<tg_gguf_tensor_entry> tensors;
    tg_gguf_name_index tensor_index;
    // The whole file: a TG_GGUF_BUF_ALIGN-aligned copy, or (mapped) a
    // read-only private map of it, page-aligned, unmapped by the destructor.
    unsigned char *buf = nullptr;
    size_t size = 0;
    size_t data_offset = 0;
    bool mapped = false;

    tg_gguf() = default;
    tg_gguf(const tg_gguf &) = delete;
    tg_gguf &operator=(const tg_gguf &) = delete;
    ~tg_gguf();  // gguf_read.cpp
};

// Index of name in a sorted index, or -1.
int64_t tg_gguf_lookup(const tg_gguf_name_index &idx, const char *name);
