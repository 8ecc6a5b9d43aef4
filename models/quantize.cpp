// quantize.cpp - GGUF in, GGUF out with the matrices quantized (quantize.h).
#include "quantize.h"

#include <strings.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace tgm {

namespace {

struct gguf_del {
    void operator()(tg_gguf *g) const { tg_gguf_close(g); }
};
struct writer_del {
    void operator()(tg_gguf_writer *w) const { tg_gguf_writer_free(w); }
};

// Copy key/value i of g into w with its exact type.
tg_status copy_kv(const tg_gguf *g, int64_t i, tg_gguf_writer *w) {
    const char *key = tg_gguf_kv_key(g, i);
    uint64_t u = 0;
    int64_t s = 0;
    double d = 0;
    float f = 0;
    bool b = false;
    const char *str = nullptr;
    tg_status st;
    switch (tg_gguf_kv_type(g, i)) {
        case TG_GGUF_UINT8: return (st = tg_gguf_get_u64(g, key, &u)) ? st : tg_gguf_set_u8(w, key, (uint8_t)u);
        case TG_GGUF_UINT16: return (st = tg_gguf_get_u64(g, key, &u)) ? st : tg_gguf_set_u16(w, key, (uint16_t)u);
        case TG_GGUF_UINT32: return (st = tg_gguf_get_u64(g, key, &u)) ? st : tg_gguf_set_u32(w, key, (uint32_t)u);
        case TG_GGUF_UINT64: return (st = tg_gguf_get_u64(g, key, &u)) ? st : tg_gguf_set_u64(w, key, u);
        case TG_GGUF_INT8: return (st = tg_gguf_get_i64(g, key, &s)) ? st : tg_gguf_set_i8(w, key, (int8_t)s);
        case TG_GGUF_INT16: return (st = tg_gguf_get_i64(g, key, &s)) ? st : tg_gguf_set_i16(w, key, (int16_t)s);
        case TG_GGUF_INT32: return (st = tg_gguf_get_i64(g, key, &s)) ? st : tg_gguf_set_i32(w, key, (int32_t)s);
        case TG_GGUF_INT64: return (st = tg_gguf_get_i64(g, key, &s)) ? st : tg_gguf_set_i64(w, key, s);
        case TG_GGUF_FLOAT32: return (st = tg_gguf_get_f32(g, key, &f)) ? st : tg_gguf_set_f32(w, key, f);
        case TG_GGUF_FLOAT64: return (st = tg_gguf_get_f64(g, key, &d)) ? st : tg_gguf_set_f64(w, key, d);
        case TG_GGUF_BOOL: return (st = tg_gguf_get_bool(g, key, &b)) ? st : tg_gguf_set_bool(w, key, b);
        case TG_GGUF_STRING: return (st = tg_gguf_get_str(g, key, &str)) ? st : tg_gguf_set_str(w, key, str);
        case TG_GGUF_ARRAY: {
            tg_gguf_type et;
            uint64_t n;
            const void *data;
            if ((st = tg_gguf_get_arr(g, key, &et, &n, &data)) != TG_OK) return st;
            if (et != TG_GGUF_STRING) return tg_gguf_set_arr(w, key, et, n, data);
            std::vector<const char *> strs((size_t)n);
            for (uint64_t k = 0; k < n; k++)
                if ((st = tg_gguf_get_arr_str(g, key, k, &strs[(size_t)k])) != TG_OK) return st;
            return tg_gguf_set_arr_str(w, key, n, strs.data());
        }
        default: return tg_set_error(TG_ERR_FORMAT, "[quantize] key '%s' has an invalid type", key);
    }
}

// A tensor's bytes at write time: quantized from the source rows, or the
// source bytes as they are.
struct tensor_job {
    std::string name;
    const uint8_t *src;
    tg_type src_type, dst_type;
    int64_t ne0, nrows;
    size_t src_row, dst_row;  // bytes per row
    bool quantize;
    // the last row quantized (a piece may end mid-row)
    int64_t cached = -1;
    std::vector<uint8_t> qrow;
    std::vector<float> frow;
    FILE *progress;
    int next_report;  // percent
};

void row_to_f32(const uint8_t *src, tg_type t, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t) {
            case TG_TYPE_F32: memcpy(&dst[i], src + 4 * i, 4); break;
            case TG_TYPE_F16: memcpy(&h, src + 2 * i, 2), dst[i] = tg_fp16_to_fp32(h); break;
            default: memcpy(&h, src + 2 * i, 2), dst[i] = tg_bf16_to_fp32(h); break;
        }
    }
}

tg_status fill(void *user, void *dst, size_t offset, size_t n) {
    tensor_job *j = (tensor_job *)user;
    if (!j->quantize) {
        memcpy(dst, j->src + offset, n);
        return TG_OK;
    }
    uint8_t *out = (uint8_t *)dst;
    while (n > 0) {
        const int64_t r = (int64_t)(offset / j->dst_row);
        const size_t in_row = offset % j->dst_row, take = std::min(n, j->dst_row - in_row);
        if (r != j->cached) {
            row_to_f32(j->src + (size_t)r * j->src_row, j->src_type, j->ne0, j->frow.data());
            tg_status st = tg_quantize(j->dst_type, j->frow.data(), j->qrow.data(), j->ne0);
            if (st != TG_OK) return tg_set_error(st, "[quantize] tensor '%s': %s", j->name.c_str(), tg_last_error());
            j->cached = r;
        }
        memcpy(out, j->qrow.data() + in_row, take);
        out += take, offset += take, n -= take;
    }
    const int pct = (int)(100 * (offset / j->dst_row) / (size_t)j->nrows);
    if (j->progress && pct >= j->next_report) {
        fprintf(j->progress, "\r    %s: %d%%", j->name.c_str(), pct);
        if (pct >= 100) fputc('\n', j->progress);
        fflush(j->progress);
        j->next_report = pct + 10;
    }
    return TG_OK;
}

// llama.cpp's general.file_type of a file whose matrices are all of type t
// (LLAMA_FTYPE_MOSTLY_Q8_0 7, _Q4_0 2, _Q4_K_S 14).
uint32_t file_type_of(tg_type t) { return t == TG_TYPE_Q8_0 ? 7 : t == TG_TYPE_Q4_0 ? 2 : 14; }

}  // namespace

bool quantize_wanted(const char *name, tg_type type, int n_dims, const int64_t *ne, tg_type t) {
    if (type != TG_TYPE_F32 && type != TG_TYPE_F16 && type != TG_TYPE_BF16) return false;
    if (n_dims < 2 || strstr(name, "norm")) return false;
    return ne[0] % tg_type_block_size(t) == 0;
}

bool quantize_type_from_name(const char *name, tg_type *t) {
    for (tg_type c : {TG_TYPE_Q8_0, TG_TYPE_Q4_0, TG_TYPE_Q4_K})
        if (strcasecmp(name, tg_type_name(c)) == 0) {
            *t = c;
            return true;
        }
    return false;
}

tg_status quantize_file(const char *in_path, const char *out_path, tg_type t, FILE *progress,
                        quantize_stats *stats) {
    if (!in_path || !out_path) return tg_set_error(TG_ERR_ARG, "[quantize] a path is NULL");
    if (!tg_type_is_quantized(t))
        return tg_set_error(TG_ERR_ARG, "[quantize] type %s is not q8_0, q4_0 or q4_k",
                            tg_type_name(t) ? tg_type_name(t) : "(invalid)");
    // the same file under another name (./m.gguf, a link): the write would replace the input
    struct stat si, so;
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return tg_set_error(TG_ERR_ARG, "[quantize] the output '%s' is the input file '%s'", out_path, in_path);
    std::unique_ptr<tg_gguf, gguf_del> g(tg_gguf_open(in_path));
    if (!g) return tg_set_error(TG_ERR_FORMAT, "[quantize] %s", tg_last_error());
    std::unique_ptr<tg_gguf_writer, writer_del> w(tg_gguf_writer_new());
    if (!w) return tg_set_error(TG_ERR_OOM, "[quantize] %s", tg_last_error());
    tg_status st;
    for (int64_t i = 0; i < tg_gguf_n_kv(g.get()); i++)
        if ((st = copy_kv(g.get(), i, w.get())) != TG_OK)
            return tg_set_error(st, "[quantize] copying key '%s': %s", tg_gguf_kv_key(g.get(), i), tg_last_error());
    if ((st = tg_gguf_set_u32(w.get(), "general.file_type", file_type_of(t))) != TG_OK ||
        (st = tg_gguf_set_u32(w.get(), "general.quantization_version", 2)) != TG_OK)
        return tg_set_error(st, "[quantize] %s", tg_last_error());

    quantize_stats s;
    const int64_t n = tg_gguf_n_tensors(g.get());
    std::vector<std::unique_ptr<tensor_job>> jobs;
    uint64_t total_in = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t nb;
        tg_gguf_tensor_info(g.get(), i, nullptr, nullptr, nullptr, nullptr, &nb);
        total_in += nb;
    }
    const bool big = total_in > ((uint64_t)64 << 20);  // progress lines only where they help
    for (int64_t i = 0; i < n; i++) {
        const char *name;
        tg_type type;
        int nd;
        int64_t ne[4];
        size_t nbytes;
        if ((st = tg_gguf_tensor_info(g.get(), i, &name, &type, &nd, ne, &nbytes)) != TG_OK) return st;
        auto j = std::make_unique<tensor_job>();
        j->name = name;
        j->src = (const uint8_t *)tg_gguf_tensor_data(g.get(), i);
        j->src_type = type;
        j->quantize = quantize_wanted(name, type, nd, ne, t);
        j->dst_type = j->quantize ? t : type;
        j->ne0 = ne[0];
        j->nrows = ne[1] * ne[2] * ne[3];
        j->src_row = tg_row_size(type, ne[0]);
        j->dst_row = tg_row_size(j->dst_type, ne[0]);
        j->progress = progress && big && nbytes > ((size_t)16 << 20) ? progress : nullptr;
        j->next_report = 10;
        if (j->quantize) {
            j->qrow.resize(j->dst_row);
            j->frow.resize((size_t)ne[0]);
            s.n_quantized++;
        } else {
            s.n_kept++;
            if (nd >= 2 && type != TG_TYPE_I32 && !strstr(name, "norm") && !tg_type_is_quantized(type))
                s.n_kept_block++;
        }
        s.bytes_in += nbytes;
        s.bytes_out += j->dst_row * (uint64_t)j->nrows;
        if (progress && big)
            fprintf(progress, "[%4lld/%lld] %-32s %-5s -> %-5s {%lld, %lld}\n", (long long)i + 1, (long long)n, name,
                    tg_type_name(type), tg_type_name(j->dst_type), (long long)ne[0], (long long)j->nrows);
        if ((st = tg_gguf_add_tensor_fill(w.get(), name, j->dst_type, nd, ne, fill, j.get())) != TG_OK)
            return tg_set_error(st, "[quantize] %s", tg_last_error());
        jobs.push_back(std::move(j));
    }
    if ((st = tg_gguf_write(w.get(), out_path)) != TG_OK) return tg_set_error(st, "[quantize] %s", tg_last_error());
    if (stats) *stats = s;
    return TG_OK;
}

}  // namespace tgm
