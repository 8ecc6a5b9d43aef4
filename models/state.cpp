// state.cpp - session state save and load (models/README.md, "State files").
//
// Layout, little-endian, version 1:
//   header  48 bytes: magic "TGMSTATE", u32 version, u32 kind (0 session,
//           1 sequence), u64 model identity, u32 type_k, type_v, type_state
//           (tg_type ids), u32 n_layer, u32 n_records, u32 0
//   records n_records of: u32 sequence, u32 n (its length), i32 tokens[n],
//           then per layer in order: attention: K rows [0, n), V rows [0, n)
//           (the cache types' bytes); delta rule: the whole state
//   trailer u64 FNV-1a 64 of every byte before it
// Loading parses and checks everything (sizes, checksum, identity, types,
// ranges) before it writes any byte of the session.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "file_replace.h"
#include "model.h"

namespace tgm {

namespace {

constexpr char kMagic[8] = {'T', 'G', 'M', 'S', 'T', 'A', 'T', 'E'};
constexpr size_t kHeader = 48, kTrailer = 8, kRecordHead = 8;

struct header {
    char magic[8];
    uint32_t version, kind;
    uint64_t identity;
    uint32_t type_k, type_v, type_state, n_layer, n_records, reserved;
};
static_assert(sizeof(header) == kHeader, "the header is 48 packed bytes");

// Bytes of one record of n tokens with element sizes tk, tv, ts (the
// file's types: its layout is walked before its types are compared).
size_t record_bytes(const session *s, size_t n, size_t tk, size_t tv, size_t ts) {
    const hparams &hp = s->m->hp;
    size_t b = kRecordHead + 4 * n;
    for (int il = 0; il < hp.n_layer; il++)
        b += hp.is_attention(il) ? (size_t)hp.head_dim * hp.n_head_kv * (tk + tv) * n
                                 : (size_t)hp.ssm_dk * hp.ssm_dv * hp.ssm_hv * ts;
    return b;
}
size_t record_bytes(const session *s, size_t n) {
    return record_bytes(s, n, tg_type_size(s->type_k), tg_type_size(s->type_v), tg_type_size(s->type_state));
}

bool storage_type(uint32_t t) { return t == TG_TYPE_F32 || t == TG_TYPE_F16 || t == TG_TYPE_BF16; }

// Where one parsed record lies in the input.
struct record {
    int seq, n;
    const uint8_t *tokens, *data;  // data: the layers' bytes, in order
};

// Parse and check a state for session s. kind_want: 0 or 1, or -1 for either.
tg_status parse(const session *s, const uint8_t *p, size_t size, int kind_want, std::vector<record> *out,
                const char *who) {
    if (!p && size) return tg_set_error(TG_ERR_ARG, "[%s] data is NULL", who);
    if (size < kHeader + kTrailer)
        return tg_set_error(TG_ERR_FORMAT, "[%s] truncated: %zu bytes, less than a header and a trailer (%zu)", who,
                            size, kHeader + kTrailer);
    header h;
    memcpy(&h, p, kHeader);
    if (memcmp(h.magic, kMagic, 8) != 0)
        return tg_set_error(TG_ERR_FORMAT, "[%s] not a tinygml session state (bad magic)", who);
    if (h.version != state_version)
        return tg_set_error(TG_ERR_FORMAT, "[%s] state version %u; this build reads version %u", who, h.version,
                            state_version);
    if (h.kind > 1 || h.reserved != 0)
        return tg_set_error(TG_ERR_FORMAT, "[%s] bad header: kind %u (0 session, 1 sequence), reserved %u", who,
                            h.kind, h.reserved);
    // the records' sizes, from their lengths, must fill the bytes exactly
    std::vector<record> recs;
    size_t at = kHeader;
    const size_t end = size - kTrailer;
    if ((size_t)h.n_records > (end - at) / kRecordHead)
        return tg_set_error(TG_ERR_FORMAT, "[%s] truncated: %u records cannot fit in %zu bytes", who, h.n_records,
                            size);
    if (!storage_type(h.type_k) || !storage_type(h.type_v) || !storage_type(h.type_state))
        return tg_set_error(TG_ERR_FORMAT, "[%s] bad cache type ids %u, %u, %u (f32 0, f16 1, bf16 2)", who, h.type_k,
                            h.type_v, h.type_state);
    const size_t tk = tg_type_size((tg_type)h.type_k), tv = tg_type_size((tg_type)h.type_v),
                 ts = tg_type_size((tg_type)h.type_state);
    if (h.n_layer != (uint32_t)s->m->hp.n_layer)
        return tg_set_error(TG_ERR_FORMAT, "[%s] the state has %u layers, the model %d", who, h.n_layer,
                            s->m->hp.n_layer);
    for (uint32_t r = 0; r < h.n_records; r++) {
        if (end - at < kRecordHead)
            return tg_set_error(TG_ERR_FORMAT, "[%s] truncated in record %u's head (offset %zu)", who, r, at);
        uint32_t q, n;
        memcpy(&q, p + at, 4);
        memcpy(&n, p + at + 4, 4);
        if (n > (uint32_t)s->n_ctx)
            return tg_set_error(TG_ERR_FORMAT, "[%s] record %u holds %u tokens, more than this session's context %d",
                                who, r, n, s->n_ctx);
        const size_t need = record_bytes(s, n, tk, tv, ts);
        if (end - at < need)
            return tg_set_error(TG_ERR_FORMAT, "[%s] truncated: record %u (%u tokens) needs %zu bytes at offset %zu, "
                                "%zu are left before the trailer", who, r, n, need, at, end - at);
        recs.push_back({(int)q, (int)n, p + at + kRecordHead, p + at + kRecordHead + 4 * (size_t)n});
        at += need;
    }
    if (at != end)
        return tg_set_error(TG_ERR_FORMAT, "[%s] %zu bytes after the last record (truncated or corrupted)", who,
                            end - at);
    uint64_t stored;
    memcpy(&stored, p + end, 8);
    const uint64_t sum = state_checksum(p, size);
    if (stored != sum)
        return tg_set_error(TG_ERR_FORMAT, "[%s] checksum mismatch (stored %016llx, computed %016llx): corrupted",
                            who, (unsigned long long)stored, (unsigned long long)sum);
    if (h.identity != s->m->identity)
        return tg_set_error(TG_ERR_FORMAT, "[%s] the state is of another model (identity %016llx, this model %016llx)",
                            who, (unsigned long long)h.identity, (unsigned long long)s->m->identity);
    if (h.type_k != (uint32_t)s->type_k || h.type_v != (uint32_t)s->type_v || h.type_state != (uint32_t)s->type_state) {
        auto nm = [](uint32_t t) {
            const char *n = t < TG_TYPE_COUNT ? tg_type_name((tg_type)t) : nullptr;
            return n ? n : "?";
        };
        return tg_set_error(TG_ERR_FORMAT,
                            "[%s] the state's cache types are K %s, V %s, state %s; this session's K %s, V %s, "
                            "state %s (no conversion: save and load with the same types)",
                            who, nm(h.type_k), nm(h.type_v), nm(h.type_state), tg_type_name(s->type_k),
                            tg_type_name(s->type_v), tg_type_name(s->type_state));
    }
    if (kind_want >= 0 && h.kind != (uint32_t)kind_want)
        return tg_set_error(TG_ERR_FORMAT, "[%s] a %s state was given where a %s state is needed", who,
                            h.kind ? "sequence" : "session", kind_want ? "sequence" : "session");
    if (h.kind == 1 && h.n_records != 1)
        return tg_set_error(TG_ERR_FORMAT, "[%s] a sequence state has %u records, not 1", who, h.n_records);
    std::vector<bool> seen((size_t)s->n_seq, false);
    for (const record &r : recs) {
        if (h.kind == 0) {
            if (r.seq < 0 || r.seq >= s->n_seq)
                return tg_set_error(TG_ERR_FORMAT, "[%s] the state's sequence %d is outside this session's [0, %d)",
                                    who, r.seq, s->n_seq);
            if (seen[(size_t)r.seq])
                return tg_set_error(TG_ERR_FORMAT, "[%s] sequence %d appears twice", who, r.seq);
            seen[(size_t)r.seq] = true;
        }
        for (int t = 0; t < r.n; t++) {
            int32_t tok;
            memcpy(&tok, r.tokens + 4 * (size_t)t, 4);
            if (tok < 0 || tok >= s->m->hp.n_vocab)
                return tg_set_error(TG_ERR_FORMAT, "[%s] sequence %d: token %d is id %d, outside [0, %d)", who,
                                    r.seq, t, tok, s->m->hp.n_vocab);
        }
    }
    *out = std::move(recs);
    return TG_OK;
}

// Write record r into sequence dst.
tg_status apply(session *s, const record &r, int dst) {
    const uint8_t *d = r.data;
    tg_status st = TG_OK;
    for (int il = 0; il < s->m->hp.n_layer && st == TG_OK; il++) {
        if (s->state[il]) {
            const size_t per = tg_nb(s->state[il], 3);
            st = tg_tensor_set(s->state[il], d, per * (size_t)dst, per);
            d += per;
        } else {
            for (tg_tensor *t : {s->k_cache[il], s->v_cache[il]}) {
                const size_t bytes = tg_nb(t, 2) * (size_t)r.n;
                if (st == TG_OK && bytes) st = tg_tensor_set(t, d, tg_nb(t, 3) * (size_t)dst, bytes);
                d += bytes;
            }
        }
    }
    if (st != TG_OK) return st;
    s->n_past[dst] = r.n;
    s->snap_pos[dst] = -1;  // checkpoints are not part of a state
    s->tokens[dst].resize((size_t)r.n);
    if (r.n) memcpy(s->tokens[dst].data(), r.tokens, 4 * (size_t)r.n);
    return TG_OK;
}

tg_status append_record(const session *s, int q, std::vector<uint8_t> *out) {
    const uint32_t n = (uint32_t)s->n_past[q], sq = (uint32_t)q;
    const size_t at = out->size();
    out->resize(at + record_bytes(s, n));
    uint8_t *p = out->data() + at;
    memcpy(p, &sq, 4);
    memcpy(p + 4, &n, 4);
    if (n) memcpy(p + kRecordHead, s->tokens[q].data(), 4 * (size_t)n);
    p += kRecordHead + 4 * (size_t)n;
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        if (s->state[il]) {
            const size_t per = tg_nb(s->state[il], 3);
            tg_status st = tg_tensor_get(s->state[il], p, per * (size_t)q, per);
            if (st != TG_OK) return st;
            p += per;
        } else {
            for (tg_tensor *t : {s->k_cache[il], s->v_cache[il]}) {
                const size_t bytes = tg_nb(t, 2) * (size_t)n;
                if (bytes) {
                    tg_status st = tg_tensor_get(t, p, tg_nb(t, 3) * (size_t)q, bytes);
                    if (st != TG_OK) return st;
                }
                p += bytes;
            }
        }
    }
    return TG_OK;
}

}  // namespace

uint64_t state_checksum(const uint8_t *data, size_t size) {
    uint64_t h = 1469598103934665603ull;
    const size_t n = size >= kTrailer ? size - kTrailer : 0;
    for (size_t i = 0; i < n; i++) h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

tg_status session_state_save(session *s, int seq, std::vector<uint8_t> *out) {
    if (!s || !out) return tg_set_error(TG_ERR_ARG, "[session_state_save] NULL argument");
    if (seq < -1 || seq >= s->n_seq)
        return tg_set_error(TG_ERR_ARG, "[session_state_save] sequence %d outside [0, %d) (or -1: the session)", seq,
                            s->n_seq);
    header h = {};
    memcpy(h.magic, kMagic, 8);
    h.version = state_version;
    h.kind = seq < 0 ? 0 : 1;
    h.identity = s->m->identity;
    h.type_k = (uint32_t)s->type_k;
    h.type_v = (uint32_t)s->type_v;
    h.type_state = (uint32_t)s->type_state;
    h.n_layer = (uint32_t)s->m->hp.n_layer;
    h.n_records = seq < 0 ? (uint32_t)s->n_seq : 1;
    std::vector<uint8_t> buf(kHeader);
    memcpy(buf.data(), &h, kHeader);
    for (int q = seq < 0 ? 0 : seq; q < (seq < 0 ? s->n_seq : seq + 1); q++) {
        tg_status st = append_record(s, q, &buf);
        if (st != TG_OK) return tg_set_error(st, "[session_state_save] %s", tg_last_error());
    }
    buf.resize(buf.size() + kTrailer);
    const uint64_t sum = state_checksum(buf.data(), buf.size());
    memcpy(buf.data() + buf.size() - kTrailer, &sum, 8);
    *out = std::move(buf);
    return TG_OK;
}

tg_status session_state_load(session *s, int dst, const uint8_t *data, size_t size) {
    const char *who = "session_state_load";
    if (!s) return tg_set_error(TG_ERR_ARG, "[%s] session is NULL", who);
    if (dst < -1 || dst >= s->n_seq)
        return tg_set_error(TG_ERR_ARG, "[%s] sequence %d outside [0, %d) (or -1: the session)", who, dst, s->n_seq);
    std::vector<record> recs;
    tg_status st = parse(s, data, size, dst < 0 ? 0 : 1, &recs, who);
    if (st != TG_OK) return st;
    // everything is checked: only a backend failure can stop the writes now
    if (dst >= 0) {
        st = apply(s, recs[0], dst);
    } else {
        std::vector<const record *> by_seq((size_t)s->n_seq, nullptr);
        for (const record &r : recs) by_seq[(size_t)r.seq] = &r;
        for (int q = 0; q < s->n_seq && st == TG_OK; q++) {
            if (by_seq[(size_t)q]) {
                st = apply(s, *by_seq[(size_t)q], q);
            } else {
                st = session_reset(s, q);
            }
        }
    }
    if (st != TG_OK) {
        // the checked state could not be written: leave no half-written sequence behind
        const std::string why = tg_last_error();
        for (int q = dst < 0 ? 0 : dst; q < (dst < 0 ? s->n_seq : dst + 1); q++) session_reset(s, q);
        return tg_set_error(st, "[%s] writing the state failed (%s): the sequences it covers are now empty", who,
                            why.c_str());
    }
    return TG_OK;
}

tg_status session_state_tokens(const session *s, const uint8_t *data, size_t size, std::vector<int32_t> *tokens) {
    if (!s || !tokens) return tg_set_error(TG_ERR_ARG, "[session_state_tokens] NULL argument");
    std::vector<record> recs;
    tg_status st = parse(s, data, size, 1, &recs, "session_state_tokens");
    if (st != TG_OK) return st;
    tokens->resize((size_t)recs[0].n);
    if (recs[0].n) memcpy(tokens->data(), recs[0].tokens, 4 * (size_t)recs[0].n);
    return TG_OK;
}

// Written beside the target and renamed over it (src/file_replace.h): a
// failed save leaves the file that was there as it was; only a regular file
// (or none) is a target; a symbolic link is followed.
tg_status session_state_save_file(session *s, int seq, const char *path) {
    const char *who = "session_state_save_file";
    if (!path) return tg_set_error(TG_ERR_ARG, "[%s] path is NULL", who);
    std::vector<uint8_t> buf;
    tg_status st = session_state_save(s, seq, &buf);
    if (st != TG_OK) return tg_set_error(st, "[%s] %s", who, tg_last_error());
    tg_file_replace out;
    if ((st = tg_file_replace_open(who, path, &out)) != TG_OK) return st;
    const bool ok = fwrite(buf.data(), 1, buf.size(), out.f) == buf.size();
    const int err = tg_file_replace_finish(&out, ok, ok ? 0 : errno);
    if (!ok || err != 0) return tg_set_error(TG_ERR_IO, "[%s] cannot write '%s': %s", who, path, strerror(err));
    return TG_OK;
}

// Read a whole state file (states are loaded whole: they are checked before
// use). Only a regular file of at most the largest state this session can
// take is read: a FIFO, a device (/dev/zero) or a big file given by mistake
// would otherwise be read without end or into memory it cannot have.
tg_status session_state_read_file(const session *s, const char *path, std::vector<uint8_t> *out) {
    const char *who = "session_state_read_file";
    if (!s || !path || !out) return tg_set_error(TG_ERR_ARG, "[%s] NULL argument", who);
    // checked before the open too: opening a FIFO would wait for a writer
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return tg_set_error(TG_ERR_IO, "[%s] '%s' is not a regular file", who, path);
    FILE *f = fopen(path, "rb");
    if (!f) return tg_set_error(TG_ERR_IO, "[%s] cannot open '%s'", who, path);
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced since the stat
        fclose(f);
        return tg_set_error(TG_ERR_IO, "[%s] '%s' is not a regular file", who, path);
    }
    // the largest state of s: every sequence full, in 4-byte types (a state's
    // layout is walked in its own types, at most 4 bytes each)
    const size_t max = kHeader + kTrailer + (size_t)s->n_seq * record_bytes(s, (size_t)s->n_ctx, 4, 4, 4);
    if ((uint64_t)st.st_size > (uint64_t)max) {
        fclose(f);
        return tg_set_error(TG_ERR_FORMAT, "[%s] '%s' has %lld bytes, more than any state of this session (at most %zu)",
                            who, path, (long long)st.st_size, max);
    }
    std::vector<uint8_t> buf;
    uint8_t chunk[1 << 16];
    size_t n;
    bool too_big = false;
    while (!too_big && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        too_big = n > max - buf.size();  // the file grew while it was read
        if (!too_big) buf.insert(buf.end(), chunk, chunk + n);
    }
    const bool err = ferror(f) != 0;
    fclose(f);
    if (too_big)
        return tg_set_error(TG_ERR_FORMAT, "[%s] '%s' grew past the largest state of this session (%zu bytes)", who,
                            path, max);
    if (err) return tg_set_error(TG_ERR_IO, "[%s] cannot read '%s'", who, path);
    *out = std::move(buf);
    return TG_OK;
}

tg_status session_state_load_file(session *s, int dst, const char *path) {
    if (!s) return tg_set_error(TG_ERR_ARG, "[session_state_load_file] session is NULL");
    if (!path) return tg_set_error(TG_ERR_ARG, "[session_state_load_file] path is NULL");
    std::vector<uint8_t> buf;
    tg_status st = session_state_read_file(s, path, &buf);
    if (st != TG_OK) return tg_set_error(st, "[session_state_load_file] %s", tg_last_error());
    st = session_state_load(s, dst, buf.data(), buf.size());
    if (st != TG_OK) {
        const std::string why = tg_last_error();
        return tg_set_error(st, "[session_state_load_file] '%s': %s", path, why.c_str());
    }
    return TG_OK;
}

}  // namespace tgm
