// context.cpp - the context arena, tensors, views.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>

#include "graph.h"
#include "internal.h"

static std::atomic<uint64_t> g_next_tensor_id{1};

static constexpr size_t k_meta_align = 16;
static constexpr size_t k_data_align = 64;

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---------------------------------------------------------------------------
// liveness registry: live arenas by address, live contexts and graphs

namespace {
struct arena_entry {
    size_t size;
    const tg_context *ctx;
};
std::mutex g_live_mu;
std::multimap<uintptr_t, arena_entry> g_arenas;            // arena base -> entry
std::unordered_map<const tg_context *, uint64_t> g_live;   // context -> generation
std::unordered_set<const tg_graph *> g_graphs;
uint64_t g_next_gen = 1;
}  // namespace

bool tg_context_live(const tg_context *ctx) {
    std::lock_guard<std::mutex> lock(g_live_mu);
    return ctx && g_live.count(ctx);
}

// t must lie inside a live arena before any of its bytes are read; then its
// context and generation must match a live context (catches a freed arena
// whose address a new context reuses).
static bool tensor_live_locked(const tg_tensor *t) {
    const uintptr_t p = (uintptr_t)t;
    auto it = g_arenas.upper_bound(p);
    for (int n = 0; n < 8 && it != g_arenas.begin(); n++) {
        --it;
        const uintptr_t base = it->first;
        if (p - base > it->second.size || it->second.size - (p - base) < sizeof(tg_tensor)) continue;
        const tg_context *ctx = it->second.ctx;
        auto live = g_live.find(ctx);
        return t->ctx == ctx && live != g_live.end() && live->second == t->ctx_gen;
    }
    return false;
}

// A view is live when every tensor down to its root is: a view made in a live
// context of a freed context's tensor is refused, not followed into the freed
// arena (each link is checked before its view_src is read).
bool tg_tensor_live(const tg_tensor *t) {
    if (!t) return false;
    std::lock_guard<std::mutex> lock(g_live_mu);
    for (; t; t = t->view_src)
        if (!tensor_live_locked(t)) return false;
    return true;
}

bool tg_graph_live(const tg_graph *g) {
    std::lock_guard<std::mutex> lock(g_live_mu);
    return g && g_graphs.count(g);
}
void tg_graph_register(tg_graph *g, bool live) {
    std::lock_guard<std::mutex> lock(g_live_mu);
    if (live)
        g_graphs.insert(g);
    else
        g_graphs.erase(g);
}

tg_status tg_graph_check_live(const char *call, const tg_graph *g) {
    if (!tg_graph_live(g)) return tg_err(TG_ERR_ARG, "[%s] graph %p is not live (its context was freed)", call, (const void *)g);
    std::lock_guard<std::mutex> lock(g_live_mu);
    for (const auto &c : g->ctxs) {
        auto live = g_live.find(c.first);
        if (live == g_live.end() || live->second != c.second)
            return tg_err(TG_ERR_ARG, "[%s] the graph holds tensors of a context that was freed", call);
    }
    return TG_OK;
}

size_t tg_tensor_overhead(void) { return align_up(sizeof(tg_tensor), k_meta_align); }
size_t tg_graph_overhead(void) { return align_up(sizeof(tg_graph), k_meta_align); }

tg_context *tg_init(tg_init_params p) {
    if (p.mem_size == 0) TG_FAIL_NULL(TG_ERR_ARG, "[init] mem_size is 0");
    // the arena is rounded up to k_data_align: refuse sizes where that wraps
    if (p.mem_size > SIZE_MAX - k_data_align)
        TG_FAIL_NULL(TG_ERR_ARG, "[init] mem_size %zu is too large (at most %zu)", p.mem_size,
                     (size_t)(SIZE_MAX - k_data_align));
    tg_context *ctx = new (std::nothrow) tg_context();
    if (!ctx) TG_FAIL_NULL(TG_ERR_OOM, "[init] out of host memory");
    ctx->mem_size = p.mem_size;
    ctx->no_alloc = p.no_alloc;
    if (p.mem_buffer) {
        ctx->mem = (char *)p.mem_buffer;
        ctx->owns_mem = false;
    } else {
        ctx->mem = (char *)std::aligned_alloc(k_data_align, align_up(p.mem_size, k_data_align));
        if (!ctx->mem) {
            delete ctx;
            TG_FAIL_NULL(TG_ERR_OOM, "[init] cannot allocate an arena of %zu bytes", p.mem_size);
        }
        ctx->owns_mem = true;
    }
    std::lock_guard<std::mutex> lock(g_live_mu);
    ctx->gen = g_next_gen++;
    g_live[ctx] = ctx->gen;
    g_arenas.insert({(uintptr_t)ctx->mem, arena_entry{ctx->mem_size, ctx}});
    return ctx;
}

void tg_free(tg_context *ctx) {
    if (!ctx) return;
    {
        std::lock_guard<std::mutex> lock(g_live_mu);
        if (!g_live.erase(ctx)) return;  // freed already (or never a context): nothing to do
        auto range = g_arenas.equal_range((uintptr_t)ctx->mem);
        for (auto it = range.first; it != range.second; ++it)
            if (it->second.ctx == ctx) {
                g_arenas.erase(it);
                break;
            }
        for (tg_graph *g : ctx->graphs) g_graphs.erase(g);
    }
    for (tg_graph *g : ctx->graphs) delete g;
    if (ctx->owns_mem) std::free(ctx->mem);
    delete ctx;
}

size_t tg_used_mem(const tg_context *ctx) { return tg_context_live(ctx) ? ctx->used : 0; }

// Reserve n bytes of the arena at alignment a; NULL when it does not fit.
static void *arena_take(tg_context *ctx, size_t n, size_t a) {
    uintptr_t base = (uintptr_t)ctx->mem;
    size_t off = align_up(base + ctx->used, a) - base;
    if (off > ctx->mem_size || n > ctx->mem_size - off) return nullptr;
    ctx->used = off + n;
    return ctx->mem + off;
}

void *tg_arena_take(tg_context *ctx, size_t n) { return arena_take(ctx, n, k_meta_align); }

tg_context *tg_tensor_context(const tg_tensor *t) { return t->ctx; }

// A new tensor in ctx with contiguous strides; data from the arena when
// with_data. Sets "[call] ..." errors.
static tg_tensor *new_tensor_impl(tg_context *ctx, const char *call, tg_type type, int n_dims, const int64_t *ne,
                                  bool with_data) {
    if (!ctx) TG_FAIL_NULL(TG_ERR_ARG, "[%s] context is NULL", call);
    if (!tg_context_live(ctx)) TG_FAIL_NULL(TG_ERR_ARG, "[%s] context %p was freed", call, (void *)ctx);
    if (tg_type_size(type) == 0) TG_FAIL_NULL(TG_ERR_ARG, "[%s] invalid type %d", call, (int)type);
    if (n_dims < 1 || n_dims > TG_MAX_DIMS) TG_FAIL_NULL(TG_ERR_ARG, "[%s] n_dims %d not in [1, 4]", call, n_dims);
    if (!ne) TG_FAIL_NULL(TG_ERR_ARG, "[%s] ne is NULL", call);
    int64_t full[TG_MAX_DIMS] = {1, 1, 1, 1};
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 1) TG_FAIL_NULL(TG_ERR_ARG, "[%s] ne[%d] = %lld must be >= 1", call, i, (long long)ne[i]);
        full[i] = ne[i];
        if (__builtin_mul_overflow(n, ne[i], &n) || n > INT64_MAX / 8)
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] element count overflows", call);
    }
    // quantized rows are whole blocks
    const int64_t bs = tg_type_block_size(type);
    if (full[0] % bs != 0)
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] ne[0] %lld is not a multiple of %s's block size %lld", call,
                     (long long)full[0], tg_type_name(type), (long long)bs);
    const size_t row = tg_row_size(type, full[0]);
    size_t bytes = row * (size_t)(n / full[0]);
    size_t need = tg_tensor_overhead() + (with_data ? bytes + k_data_align : 0);
    size_t free_bytes = ctx->mem_size > ctx->used ? ctx->mem_size - ctx->used : 0;
    if (need > free_bytes)
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] context arena exhausted: need %zu bytes, %zu of %zu free", call, need,
                     free_bytes, ctx->mem_size);
    size_t used_before = ctx->used;
    tg_tensor *t = (tg_tensor *)arena_take(ctx, sizeof(tg_tensor), k_meta_align);
    void *data = nullptr;
    if (t && with_data) data = arena_take(ctx, bytes, k_data_align);
    if (!t || (with_data && !data)) {
        ctx->used = used_before;
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] context arena exhausted", call);
    }
    memset(t, 0, sizeof(*t));
    t->type = type;
    for (int i = 0; i < TG_MAX_DIMS; i++) t->ne[i] = full[i];
    t->nb[0] = tg_type_size(type);  // a block's bytes (one element unless quantized)
    t->nb[1] = row;
    for (int i = 2; i < TG_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
    t->op = TG_OP_NONE;
    t->id = g_next_tensor_id++;
    t->ctx = ctx;
    t->ctx_gen = ctx->gen;
    if (data) {
        t->data = data;
        t->mem = TG_MEM_HOST;
    }
    ctx->tensors.push_back(t);
    return t;
}

tg_tensor *tg_new_tensor(tg_context *ctx, tg_type type, int n_dims, const int64_t *ne) {
    if (ctx && !tg_context_live(ctx)) TG_FAIL_NULL(TG_ERR_ARG, "[new_tensor] context %p was freed", (void *)ctx);
    return new_tensor_impl(ctx, "new_tensor", type, n_dims, ne, ctx && !ctx->no_alloc);
}
tg_tensor *tg_new_tensor_1d(tg_context *ctx, tg_type type, int64_t ne0) { return tg_new_tensor(ctx, type, 1, &ne0); }
tg_tensor *tg_new_tensor_2d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return tg_new_tensor(ctx, type, 2, ne);
}
tg_tensor *tg_new_tensor_3d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return tg_new_tensor(ctx, type, 3, ne);
}
tg_tensor *tg_new_tensor_4d(tg_context *ctx, tg_type type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return tg_new_tensor(ctx, type, 4, ne);
}

tg_tensor *tg_new_op(tg_context *ctx, const char *call, tg_op op, tg_type type, int n_dims, const int64_t *ne,
                     tg_tensor *const *srcs, int n_srcs) {
    TG_ASSERT(n_srcs <= TG_MAX_SRC);
    tg_tensor *t = new_tensor_impl(ctx, call, type, n_dims, ne, false);
    if (!t) return nullptr;
    t->op = op;
    for (int i = 0; i < n_srcs; i++) t->src[i] = srcs[i];
    return t;
}

// Copy storage facts from the view source (data may still be unknown).
void tg_resolve_view(tg_tensor *t) {
    tg_tensor *s = t->view_src;
    if (!s) return;
    if (s->view_src) tg_resolve_view(s);
    t->mem = s->mem;
    t->buffer_id = s->buffer_id;
    t->device = s->device;
    t->data = s->data ? (char *)s->data + t->view_offs : nullptr;
}

tg_tensor *tg_new_view_of(tg_context *ctx, const char *call, tg_op op, tg_tensor *src, int n_dims, const int64_t *ne,
                          const size_t *nb, size_t offset) {
    if (!tg_check_not_null(call, "source", src)) return nullptr;
    if (n_dims < 1 || n_dims > TG_MAX_DIMS) TG_FAIL_NULL(TG_ERR_ARG, "[%s] n_dims %d not in [1, 4]", call, n_dims);
    // quantized: dim 0 is whole blocks of bytes nb[0] (the callers keep rows whole)
    const int64_t bs = tg_type_block_size(src->type);
    if (ne[0] % bs != 0 || (bs > 1 && nb[0] != tg_type_size(src->type)))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] view of %s '%s' must keep whole blocks in dim 0", call,
                     tg_type_name(src->type), src->name);
    // bounds first: the view's last byte must lie within the source's span
    size_t span = tg_type_size(src->type);
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 1) TG_FAIL_NULL(TG_ERR_ARG, "[%s] ne[%d] = %lld must be >= 1", call, i, (long long)ne[i]);
        const int64_t units = i == 0 ? ne[0] / bs : ne[i];  // dim 0 steps block by block
        size_t step;
        if (__builtin_mul_overflow((size_t)(units - 1), nb[i], &step) || __builtin_add_overflow(span, step, &span))
            span = SIZE_MAX;
    }
    size_t end;
    if (__builtin_add_overflow(offset, span, &end) || end > tg_nbytes(src))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] view of %zu bytes at offset %zu exceeds source '%s' of %zu bytes", call, span,
                     offset, src->name, tg_nbytes(src));
    tg_tensor *t = new_tensor_impl(ctx, call, src->type, n_dims, ne, false);
    if (!t) return nullptr;
    for (int i = 0; i < TG_MAX_DIMS; i++) t->nb[i] = i < n_dims ? nb[i] : t->nb[i];
    t->op = op;
    t->src[0] = src;
    t->view_src = src;
    t->view_offs = offset;
    snprintf(t->name, sizeof(t->name), "%.50s (view)", src->name);
    tg_resolve_view(t);
    return t;
}

// ---------------------------------------------------------------------------
// accessors

tg_tensor *tg_set_name(tg_tensor *t, const char *name) {
    if (!t) TG_FAIL_NULL(TG_ERR_ARG, "[set_name] tensor is NULL");
    if (!tg_tensor_live(t)) TG_FAIL_NULL(TG_ERR_ARG, "[set_name] tensor %p is not live: its context was freed", (void *)t);
    if (!name) TG_FAIL_NULL(TG_ERR_ARG, "[set_name] name is NULL");
    if (strlen(name) >= TG_MAX_NAME)
        TG_FAIL_NULL(TG_ERR_ARG, "[set_name] name of %zu bytes is too long (max %d)", strlen(name), TG_MAX_NAME - 1);
    snprintf(t->name, sizeof(t->name), "%s", name);
    return t;
}
const char *tg_get_name(const tg_tensor *t) { return tg_tensor_live(t) ? t->name : ""; }
tg_tensor *tg_get_tensor(tg_context *ctx, const char *name) {
    if (!ctx || !name || !tg_context_live(ctx)) return nullptr;
    for (tg_tensor *t : ctx->tensors)
        if (strcmp(t->name, name) == 0) return t;
    return nullptr;
}
tg_type tg_tensor_type(const tg_tensor *t) { return tg_tensor_live(t) ? t->type : TG_TYPE_COUNT; }
int tg_n_dims(const tg_tensor *t) {
    if (!tg_tensor_live(t)) return 0;
    for (int i = TG_MAX_DIMS - 1; i >= 1; i--)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}
int64_t tg_ne(const tg_tensor *t, int dim) { return tg_tensor_live(t) && dim >= 0 && dim < TG_MAX_DIMS ? t->ne[dim] : 0; }
size_t tg_nb(const tg_tensor *t, int dim) { return tg_tensor_live(t) && dim >= 0 && dim < TG_MAX_DIMS ? t->nb[dim] : 0; }
int64_t tg_nelements(const tg_tensor *t) { return t ? t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] : 0; }
// Dim 0 counts blocks (ne[0] / block size of nb[0] bytes each): elements for
// the unquantized types.
static int64_t units(const tg_tensor *t, int dim) {
    return dim == 0 ? t->ne[0] / tg_type_block_size(t->type) : t->ne[dim];
}
size_t tg_nbytes(const tg_tensor *t) {
    if (!t || tg_type_block_size(t->type) == 0) return 0;
    size_t n = tg_type_size(t->type);
    for (int i = 0; i < TG_MAX_DIMS; i++) n += (size_t)(units(t, i) - 1) * t->nb[i];
    return n;
}
bool tg_is_contiguous(const tg_tensor *t) {
    if (!t || tg_type_block_size(t->type) == 0) return false;
    size_t expect = tg_type_size(t->type);
    for (int i = 0; i < TG_MAX_DIMS; i++) {
        if (units(t, i) != 1 && t->nb[i] != expect) return false;
        expect *= (size_t)units(t, i);
    }
    return true;
}
void *tg_tensor_data(const tg_tensor *t) { return tg_tensor_live(t) && t->mem == TG_MEM_HOST ? t->data : nullptr; }

bool tg_same_shape(const tg_tensor *a, const tg_tensor *b) {
    for (int i = 0; i < TG_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}
std::string tg_shape_str(const tg_tensor *t) {
    char buf[128];
    snprintf(buf, sizeof(buf), "{%lld,%lld,%lld,%lld} %s", (long long)t->ne[0], (long long)t->ne[1],
             (long long)t->ne[2], (long long)t->ne[3], tg_type_name(t->type));
    return buf;
}
tg_tensor *tg_view_root(tg_tensor *t) {
    while (t && t->view_src) t = t->view_src;
    return t;
}
bool tg_is_leaf(const tg_tensor *t) { return t->op == TG_OP_NONE && !t->view_src; }

bool tg_check_not_null(const char *call, const char *what, const tg_tensor *t) {
    if (!t) {
        tg_err(TG_ERR_ARG, "[%s] %s is NULL", call, what);
        return false;
    }
    if (!tg_tensor_live(t)) {
        tg_err(TG_ERR_ARG, "[%s] %s (%p) is not a live tensor: its context was freed", call, what, (const void *)t);
        return false;
    }
    return true;
}
bool tg_check_type(const char *call, const char *what, const tg_tensor *t, tg_type type) {
    if (!tg_check_not_null(call, what, t)) return false;
    if (t->type == type) return true;
    if (!tg_check_not_quantized(call, what, t)) return false;
    tg_err(TG_ERR_ARG, "[%s] %s must be %s, got %s", call, what, tg_type_name(type), tg_type_name(t->type));
    return false;
}
bool tg_check_not_quantized(const char *call, const char *what, const tg_tensor *t) {
    if (!tg_type_is_quantized(t->type)) return true;
    tg_err(TG_ERR_ARG, "[%s] %s is %s: quantized tensors are only supported as mul_mat's a and get_rows' a", call,
           what, tg_type_name(t->type));
    return false;
}
bool tg_check_float_type(const char *call, const char *what, const tg_tensor *t) {
    if (!tg_check_not_null(call, what, t) || !tg_check_not_quantized(call, what, t)) return false;
    if (t->type == TG_TYPE_F32 || t->type == TG_TYPE_F16 || t->type == TG_TYPE_BF16) return true;
    tg_err(TG_ERR_ARG, "[%s] %s must be f32, f16 or bf16, got %s", call, what, tg_type_name(t->type));
    return false;
}

// ---------------------------------------------------------------------------
// views

static tg_tensor *view_nd(tg_context *ctx, const char *call, tg_tensor *a, int n_dims, const int64_t *ne,
                          const size_t *nb_in, size_t offset) {
    if (!tg_check_not_null(call, "a", a)) return nullptr;
    if (tg_type_is_quantized(a->type)) {
        // whole rows only: a row's blocks are only meaningful together
        const size_t row = tg_row_size(a->type, a->ne[0]);
        if (ne[0] != a->ne[0])
            TG_FAIL_NULL(TG_ERR_ARG, "[%s] view of %s tensor '%s' must keep whole rows: ne0 %lld != %lld", call,
                         tg_type_name(a->type), a->name, (long long)ne[0], (long long)a->ne[0]);
        bool ok = offset % row == 0;
        for (int i = 1; i < n_dims; i++) ok = ok && nb_in[i - 1] % row == 0;
        if (!ok)
            TG_FAIL_NULL(TG_ERR_ARG,
                         "[%s] view of %s tensor '%s': offset %zu and strides must be multiples of its row size %zu",
                         call, tg_type_name(a->type), a->name, offset, row);
    }
    // as ggml: offset and strides are bytes from a's first element, and rows
    // are element-contiguous whatever a's own strides (a may be permuted)
    size_t nb[TG_MAX_DIMS];
    nb[0] = tg_type_size(a->type);
    for (int i = 1; i < n_dims; i++) nb[i] = nb_in[i - 1];
    return tg_new_view_of(ctx, call, TG_OP_VIEW, a, n_dims, ne, nb, offset);
}

tg_tensor *tg_view_1d(tg_context *ctx, tg_tensor *a, int64_t ne0, size_t offset) {
    const int64_t ne[1] = {ne0};
    return view_nd(ctx, "view_1d", a, 1, ne, nullptr, offset);
}
tg_tensor *tg_view_2d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
    const int64_t ne[2] = {ne0, ne1};
    const size_t nb[1] = {nb1};
    return view_nd(ctx, "view_2d", a, 2, ne, nb, offset);
}
tg_tensor *tg_view_3d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2,
                      size_t offset) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    const size_t nb[2] = {nb1, nb2};
    return view_nd(ctx, "view_3d", a, 3, ne, nb, offset);
}
tg_tensor *tg_view_4d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1,
                      size_t nb2, size_t nb3, size_t offset) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    const size_t nb[3] = {nb1, nb2, nb3};
    return view_nd(ctx, "view_4d", a, 4, ne, nb, offset);
}

tg_tensor *tg_reshape(tg_context *ctx, tg_tensor *a, int n_dims, const int64_t *ne) {
    if (!tg_check_not_null("reshape", "a", a)) return nullptr;
    if (!tg_is_contiguous(a)) TG_FAIL_NULL(TG_ERR_ARG, "[reshape] a %s is not contiguous", tg_shape_str(a).c_str());
    if (n_dims < 1 || n_dims > TG_MAX_DIMS) TG_FAIL_NULL(TG_ERR_ARG, "[reshape] n_dims %d not in [1, 4]", n_dims);
    if (!ne) TG_FAIL_NULL(TG_ERR_ARG, "[reshape] ne is NULL");
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 1 || __builtin_mul_overflow(n, ne[i], &n))
            TG_FAIL_NULL(TG_ERR_ARG, "[reshape] bad dim ne[%d] = %lld", i, (long long)ne[i]);
    }
    if (n != tg_nelements(a))
        TG_FAIL_NULL(TG_ERR_ARG, "[reshape] %lld elements cannot become %lld", (long long)tg_nelements(a), (long long)n);
    if (tg_type_is_quantized(a->type) && ne[0] != a->ne[0])
        TG_FAIL_NULL(TG_ERR_ARG, "[reshape] %s tensor '%s' must keep ne0 %lld (whole rows), got %lld",
                     tg_type_name(a->type), a->name, (long long)a->ne[0], (long long)ne[0]);
    size_t nb[TG_MAX_DIMS];
    nb[0] = a->nb[0];
    nb[1] = tg_type_is_quantized(a->type) ? tg_row_size(a->type, ne[0]) : nb[0] * (size_t)ne[0];
    for (int i = 2; i < TG_MAX_DIMS; i++) nb[i] = nb[i - 1] * (size_t)(i - 1 < n_dims ? ne[i - 1] : 1);
    return tg_new_view_of(ctx, "reshape", TG_OP_VIEW, a, n_dims, ne, nb, 0);
}
tg_tensor *tg_reshape_2d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return tg_reshape(ctx, a, 2, ne);
}
tg_tensor *tg_reshape_3d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return tg_reshape(ctx, a, 3, ne);
}
tg_tensor *tg_reshape_4d(tg_context *ctx, tg_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return tg_reshape(ctx, a, 4, ne);
}

tg_tensor *tg_permute(tg_context *ctx, tg_tensor *a, int axis0, int axis1, int axis2, int axis3) {
    if (!tg_check_not_null("permute", "a", a)) return nullptr;
    const int ax[4] = {axis0, axis1, axis2, axis3};
    bool seen[4] = {false, false, false, false};
    for (int i = 0; i < 4; i++) {
        if (ax[i] < 0 || ax[i] > 3 || seen[ax[i]])
            TG_FAIL_NULL(TG_ERR_ARG, "[permute] axes (%d,%d,%d,%d) are not a permutation of 0..3", axis0, axis1,
                         axis2, axis3);
        seen[ax[i]] = true;
    }
    if (tg_type_is_quantized(a->type) && ax[0] != 0)
        TG_FAIL_NULL(TG_ERR_ARG, "[permute] %s tensor '%s': dim 0 (its blocks) cannot move", tg_type_name(a->type),
                     a->name);
    int64_t ne[4];
    size_t nb[4];
    for (int i = 0; i < 4; i++) {
        ne[ax[i]] = a->ne[i];
        nb[ax[i]] = a->nb[i];
    }
    return tg_new_view_of(ctx, "permute", TG_OP_VIEW, a, 4, ne, nb, 0);
}

tg_tensor *tg_transpose(tg_context *ctx, tg_tensor *a) { return tg_permute(ctx, a, 1, 0, 2, 3); }
