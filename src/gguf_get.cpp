// gguf_get.cpp - accessors and typed getters of a parsed GGUF file. They
// allocate nothing (lookups are binary searches over sorted names) and report
// misuse or a missing / mistyped key as "[call] key 'k': ...".
#include <cfloat>
#include <cinttypes>

#include "gguf_impl.h"

// ---------------------------------------------------------------------------
// Accessors

static bool have_handle(const char *call, const tg_gguf *g) {
    if (g) return true;
    tg_err(TG_ERR_ARG, "[%s] the gguf handle is NULL", call);
    return false;
}

uint32_t tg_gguf_version(const tg_gguf *g) {
    if (!have_handle("gguf_version", g)) return 0;
    return g->version;
}

size_t tg_gguf_alignment(const tg_gguf *g) {
    if (!have_handle("gguf_alignment", g)) return 0;
    return g->alignment;
}

size_t tg_gguf_data_offset(const tg_gguf *g) {
    if (!have_handle("gguf_data_offset", g)) return 0;
    return g->data_offset;
}

int64_t tg_gguf_n_kv(const tg_gguf *g) {
    if (!have_handle("gguf_n_kv", g)) return 0;
    return (int64_t)g->kvs.size();
}

static const tg_gguf_kv *kv_at(const char *call, const tg_gguf *g, int64_t i) {
    if (!g) {
        tg_err(TG_ERR_ARG, "[%s] the gguf handle is NULL", call);
        return nullptr;
    }
    if (i < 0 || (uint64_t)i >= g->kvs.size()) {
        tg_err(TG_ERR_ARG, "[%s] kv index %" PRId64 " out of range [0, %zu)", call, i, g->kvs.size());
        return nullptr;
    }
    return &g->kvs[(size_t)i];
}

const char *tg_gguf_kv_key(const tg_gguf *g, int64_t i) {
    const tg_gguf_kv *kv = kv_at("gguf_kv_key", g, i);
    return kv ? kv->key.c_str() : nullptr;
}

tg_gguf_type tg_gguf_kv_type(const tg_gguf *g, int64_t i) {
    const tg_gguf_kv *kv = kv_at("gguf_kv_type", g, i);
    return kv ? kv->type : TG_GGUF_INVALID;
}

int64_t tg_gguf_find_key(const tg_gguf *g, const char *key) {
    if (!have_handle("gguf_find_key", g)) return -1;
    if (!key) {
        tg_err(TG_ERR_ARG, "[gguf_find_key] key is NULL");
        return -1;
    }
    return tg_gguf_lookup(g->kv_index, key);
}

// The kv for key, or an error naming the key.
static tg_status find_kv(const char *call, const tg_gguf *g, const char *key, const void *out,
                         const tg_gguf_kv **kv) {
    if (!g) return tg_err(TG_ERR_ARG, "[%s] the gguf handle is NULL", call);
    if (!key) return tg_err(TG_ERR_ARG, "[%s] key is NULL", call);
    if (!out) return tg_err(TG_ERR_ARG, "[%s] key '%s': out is NULL", call, key);
    int64_t i = tg_gguf_lookup(g->kv_index, key);
    if (i < 0) return tg_err(TG_ERR_FORMAT, "[%s] key '%s' not found", call, key);
    *kv = &g->kvs[(size_t)i];
    return TG_OK;
}

static tg_status wrong_type(const char *call, const tg_gguf_kv *kv, const char *expected) {
    return tg_err(TG_ERR_FORMAT, "[%s] key '%s' has type %s, expected %s", call, kv->key.c_str(),
                  tg_gguf_type_name(kv->type), expected);
}

// An integer value of any integer type, checked against [lo, hi]. On TG_OK,
// *neg tells whether the value is negative (then in *s) or not (then in *u).
static tg_status get_integer(const char *call, const tg_gguf *g, const char *key, const void *out, int64_t lo,
                             uint64_t hi, const char *target, bool *neg, int64_t *s, uint64_t *u) {
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv(call, g, key, out, &kv);
    if (st != TG_OK) return st;
    if (!tg_gguf_is_integer(kv->type)) return wrong_type(call, kv, "an integer type");
    const unsigned char *b = kv->scalar;
    int64_t sv = 0;
    uint64_t uv = 0;
    bool is_signed = true;
    switch (kv->type) {
        case TG_GGUF_INT8: sv = (int8_t)b[0]; break;
        case TG_GGUF_INT16: { int16_t v; memcpy(&v, b, 2); sv = v; break; }
        case TG_GGUF_INT32: { int32_t v; memcpy(&v, b, 4); sv = v; break; }
        case TG_GGUF_INT64: memcpy(&sv, b, 8); break;
        case TG_GGUF_UINT8: is_signed = false; uv = b[0]; break;
        case TG_GGUF_UINT16: { uint16_t v; memcpy(&v, b, 2); is_signed = false; uv = v; break; }
        case TG_GGUF_UINT32: { uint32_t v; memcpy(&v, b, 4); is_signed = false; uv = v; break; }
        default: memcpy(&uv, b, 8); is_signed = false; break;  // UINT64
    }
    *neg = is_signed && sv < 0;
    if (*neg) {
        if (sv < lo)
            return tg_err(TG_ERR_FORMAT, "[%s] key '%s': value %" PRId64 " (%s) does not fit in %s", call,
                          kv->key.c_str(), sv, tg_gguf_type_name(kv->type), target);
        *s = sv;
        return TG_OK;
    }
    if (is_signed) uv = (uint64_t)sv;
    if (uv > hi)
        return tg_err(TG_ERR_FORMAT, "[%s] key '%s': value %" PRIu64 " (%s) does not fit in %s", call,
                      kv->key.c_str(), uv, tg_gguf_type_name(kv->type), target);
    *u = uv;
    return TG_OK;
}

tg_status tg_gguf_get_u32(const tg_gguf *g, const char *key, uint32_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    tg_status st = get_integer("gguf_get_u32", g, key, out, 0, UINT32_MAX, "uint32", &neg, &s, &u);
    if (st == TG_OK) *out = (uint32_t)u;
    return st;
}

tg_status tg_gguf_get_i32(const tg_gguf *g, const char *key, int32_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    tg_status st = get_integer("gguf_get_i32", g, key, out, INT32_MIN, INT32_MAX, "int32", &neg, &s, &u);
    if (st == TG_OK) *out = neg ? (int32_t)s : (int32_t)u;
    return st;
}

tg_status tg_gguf_get_u64(const tg_gguf *g, const char *key, uint64_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    tg_status st = get_integer("gguf_get_u64", g, key, out, 0, UINT64_MAX, "uint64", &neg, &s, &u);
    if (st == TG_OK) *out = u;
    return st;
}

tg_status tg_gguf_get_i64(const tg_gguf *g, const char *key, int64_t *out) {
    bool neg = false;
    int64_t s = 0;
    uint64_t u = 0;
    tg_status st = get_integer("gguf_get_i64", g, key, out, INT64_MIN, INT64_MAX, "int64", &neg, &s, &u);
    if (st == TG_OK) *out = neg ? s : (int64_t)u;
    return st;
}

static tg_status get_double(const char *call, const tg_gguf *g, const char *key, const void *out, double *d) {
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv(call, g, key, out, &kv);
    if (st != TG_OK) return st;
    if (kv->type == TG_GGUF_FLOAT32) {
        float f;
        memcpy(&f, kv->scalar, 4);
        *d = f;
    } else if (kv->type == TG_GGUF_FLOAT64) {
        memcpy(d, kv->scalar, 8);
    } else {
        return wrong_type(call, kv, "float32 or float64");
    }
    return TG_OK;
}

tg_status tg_gguf_get_f32(const tg_gguf *g, const char *key, float *out) {
    double d;
    tg_status st = get_double("gguf_get_f32", g, key, out, &d);
    if (st != TG_OK) return st;
    if (std::isfinite(d) && std::fabs(d) > (double)FLT_MAX)
        return tg_err(TG_ERR_FORMAT, "[gguf_get_f32] key '%s': value %g does not fit in float32", key, d);
    *out = (float)d;
    return TG_OK;
}

tg_status tg_gguf_get_f64(const tg_gguf *g, const char *key, double *out) {
    double d;
    tg_status st = get_double("gguf_get_f64", g, key, out, &d);
    if (st == TG_OK) *out = d;
    return st;
}

tg_status tg_gguf_get_bool(const tg_gguf *g, const char *key, bool *out) {
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv("gguf_get_bool", g, key, out, &kv);
    if (st != TG_OK) return st;
    if (kv->type != TG_GGUF_BOOL) return wrong_type("gguf_get_bool", kv, "bool");
    *out = kv->scalar[0] != 0;
    return TG_OK;
}

tg_status tg_gguf_get_str(const tg_gguf *g, const char *key, const char **out) {
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv("gguf_get_str", g, key, out, &kv);
    if (st != TG_OK) return st;
    if (kv->type != TG_GGUF_STRING) return wrong_type("gguf_get_str", kv, "string");
    *out = kv->strs[0].c_str();
    return TG_OK;
}

tg_status tg_gguf_get_arr(const tg_gguf *g, const char *key, tg_gguf_type *elem_type, uint64_t *n,
                          const void **data) {
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv("gguf_get_arr", g, key, "", &kv);  // every out is optional
    if (st != TG_OK) return st;
    if (kv->type != TG_GGUF_ARRAY) return wrong_type("gguf_get_arr", kv, "array");
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = kv->num.empty() ? nullptr : kv->num.data();
    return TG_OK;
}

tg_status tg_gguf_get_arr_str(const tg_gguf *g, const char *key, uint64_t i, const char **out) {
    const char *call = "gguf_get_arr_str";
    const tg_gguf_kv *kv = nullptr;
    tg_status st = find_kv(call, g, key, out, &kv);
    if (st != TG_OK) return st;
    if (kv->type != TG_GGUF_ARRAY) return wrong_type(call, kv, "array of string");
    if (kv->elem_type != TG_GGUF_STRING)
        return tg_err(TG_ERR_FORMAT, "[%s] key '%s' is an array of %s, expected array of string", call, key,
                      tg_gguf_type_name(kv->elem_type));
    if (i >= kv->n)
        return tg_err(TG_ERR_ARG, "[%s] key '%s': index %" PRIu64 " out of range (the array has %" PRIu64 ")", call,
                      key, i, kv->n);
    *out = kv->strs[(size_t)i].c_str();
    return TG_OK;
}

// ---------------------------------------------------------------------------
// Tensors

int64_t tg_gguf_n_tensors(const tg_gguf *g) {
    if (!have_handle("gguf_n_tensors", g)) return 0;
    return (int64_t)g->tensors.size();
}

int64_t tg_gguf_find_tensor(const tg_gguf *g, const char *name) {
    if (!have_handle("gguf_find_tensor", g)) return -1;
    if (!name) {
        tg_err(TG_ERR_ARG, "[gguf_find_tensor] name is NULL");
        return -1;
    }
    return tg_gguf_lookup(g->tensor_index, name);
}

static const tg_gguf_tensor_entry *tensor_at(const char *call, const tg_gguf *g, int64_t i) {
    if (!g) {
        tg_err(TG_ERR_ARG, "[%s] the gguf handle is NULL", call);
        return nullptr;
    }
    if (i < 0 || (uint64_t)i >= g->tensors.size()) {
        tg_err(TG_ERR_ARG, "[%s] tensor index %" PRId64 " out of range [0, %zu)", call, i, g->tensors.size());
        return nullptr;
    }
    return &g->tensors[(size_t)i];
}

tg_status tg_gguf_tensor_info(const tg_gguf *g, int64_t i, const char **name, tg_type *type, int *n_dims,
                              int64_t ne[4], size_t *nbytes) {
    const tg_gguf_tensor_entry *t = tensor_at("gguf_tensor_info", g, i);
    if (!t) return TG_ERR_ARG;
    if (name) *name = t->name.c_str();
    if (type) *type = t->type;
    if (n_dims) *n_dims = t->n_dims;
    if (ne)
        for (int d = 0; d < TG_MAX_DIMS; d++) ne[d] = t->ne[d];
    if (nbytes) *nbytes = t->nbytes;
    return TG_OK;
}

const void *tg_gguf_tensor_data(const tg_gguf *g, int64_t i) {
    const tg_gguf_tensor_entry *t = tensor_at("gguf_tensor_data", g, i);
    if (!t) return nullptr;
    return g->buf + g->data_offset + t->offset;
}
