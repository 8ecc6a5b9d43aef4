// graph.cpp - graphs: collect nodes, plan, compute on a backend.
#include <algorithm>
#include <new>
#include <unordered_set>

#include "graph.h"

tg_graph *tg_graph_new(tg_context *ctx) {
    if (!ctx) TG_FAIL_NULL(TG_ERR_ARG, "[graph_new] context is NULL");
    if (!tg_context_live(ctx)) TG_FAIL_NULL(TG_ERR_ARG, "[graph_new] context %p was freed", (void *)ctx);
    if (!tg_arena_take(ctx, tg_graph_overhead()))
        TG_FAIL_NULL(TG_ERR_OOM, "[graph_new] context arena exhausted (%zu of %zu bytes used)", ctx->used,
                     ctx->mem_size);
    tg_graph *g = new (std::nothrow) tg_graph();
    if (!g) TG_FAIL_NULL(TG_ERR_OOM, "[graph_new] out of host memory");
    g->ctx = ctx;
    g->ctxs.push_back({ctx, ctx->gen});
    ctx->graphs.push_back(g);
    tg_graph_register(g, true);
    return g;
}

tg_status tg_graph_expand(tg_graph *g, tg_tensor *t) {
    if (!g) return tg_err(TG_ERR_ARG, "[graph_expand] graph is NULL");
    if (!t) return tg_err(TG_ERR_ARG, "[graph_expand] tensor is NULL (did an op constructor fail? %s)", tg_last_error());
    tg_status st = tg_graph_check_live("graph_expand", g);
    if (st != TG_OK) return st;
    if (!tg_tensor_live(t))
        return tg_err(TG_ERR_ARG, "[graph_expand] tensor %p is not live: its context was freed", (void *)t);
    std::unordered_set<tg_tensor *> seen(g->nodes.begin(), g->nodes.end());
    seen.insert(g->leafs.begin(), g->leafs.end());
    std::vector<tg_tensor *> stack{t}, found;
    while (!stack.empty()) {
        tg_tensor *x = stack.back();
        stack.pop_back();
        if (!seen.insert(x).second) continue;
        // a source (or view source) in a context freed since it was used: refused
        // before any of its fields is read
        if (!tg_tensor_live(x))
            return tg_err(TG_ERR_ARG, "[graph_expand] tensor %p reached from '%s' is not live: its context was freed",
                          (void *)x, t->name);
        found.push_back(x);
        for (tg_tensor *s : x->src)
            if (s) stack.push_back(s);
        if (x->view_src) stack.push_back(x->view_src);
    }
    for (tg_tensor *x : found) {
        (x->op == TG_OP_NONE ? g->leafs : g->nodes).push_back(x);
        const std::pair<const tg_context *, uint64_t> c{x->ctx, x->ctx_gen};
        if (std::find(g->ctxs.begin(), g->ctxs.end(), c) == g->ctxs.end()) g->ctxs.push_back(c);
    }
    auto by_id = [](const tg_tensor *a, const tg_tensor *b) { return a->id < b->id; };
    std::sort(g->nodes.begin(), g->nodes.end(), by_id);
    std::sort(g->leafs.begin(), g->leafs.end(), by_id);
    if (std::find(g->outputs.begin(), g->outputs.end(), t) == g->outputs.end()) g->outputs.push_back(t);
    g->plan.valid = false;
    g->checked.valid = false;
    return TG_OK;
}

int tg_graph_n_nodes(const tg_graph *g) { return tg_graph_live(g) ? (int)g->nodes.size() : 0; }
tg_tensor *tg_graph_node(const tg_graph *g, int i) {
    if (!tg_graph_live(g) || i < 0 || i >= (int)g->nodes.size()) return nullptr;
    return g->nodes[i];
}

tg_status tg_graph_plan(tg_graph *g, tg_graph_stats *stats) {
    if (!g) return tg_err(TG_ERR_ARG, "[graph_plan] graph is NULL");
    tg_status st = tg_graph_check_live("graph_plan", g);
    if (st != TG_OK) return st;
    if (!g->plan.valid) {
        tg_status s = tg_plan_graph(g, "graph_plan");
        if (s != TG_OK) return s;
    }
    if (stats) *stats = g->plan.stats;
    return TG_OK;
}

tg_status tg_graph_set_planner(tg_graph *g, bool enabled) {
    if (!g) return tg_err(TG_ERR_ARG, "[graph_set_planner] graph is NULL");
    if (!tg_graph_live(g)) return tg_err(TG_ERR_ARG, "[graph_set_planner] graph is not live (its context was freed)");
    g->plan.planner = enabled;
    g->plan.valid = false;
    return TG_OK;
}

// Leaves need live storage where the backend computes.
static tg_status check_leaf(tg_backend *b, const tg_tensor *t) {
    tg_backend *owner = nullptr;
    if (!t->data)
        return tg_err(TG_ERR_ARG, "[graph_compute] input '%s' %s has no storage: allocate it with tg_backend_alloc",
                      t->name, tg_shape_str(t).c_str());
    tg_status s = tg_check_storage("graph_compute", t, &owner);
    if (s != TG_OK) return s;
    if (t->mem != b->mem || (b->mem == TG_MEM_DEVICE && t->device != b->device))
        return tg_err(TG_ERR_ARG, "[graph_compute] input '%s' lives in %s memory, but the backend is %s", t->name,
                      t->mem == TG_MEM_HOST ? "host" : "device", b->name.c_str());
    return TG_OK;
}

// Leaves of persistent storage that node t writes in place.
static int written_roots(tg_tensor *t, tg_tensor **out) {
    int n = 0;
    switch (t->op) {
        case TG_OP_CPY: out[n++] = tg_view_root(t); break;  // b
        case TG_OP_ROPE_KV_UPDATE:
            out[n++] = tg_view_root(t->src[0]);  // k_cache
            out[n++] = tg_view_root(t->src[1]);  // v_cache
            break;
        case TG_OP_DELTA_RULE:
            if (t->src[5]) out[n++] = tg_view_root(t->src[5]);  // state
            break;
        default: break;
    }
    return n;
}

// No op may write read-only caller memory (a mapped file's weights): refused
// before any node runs, where the write would fault.
static tg_status check_writes(const std::vector<tg_tensor *> &nodes) {
    for (tg_tensor *t : nodes) {
        tg_tensor *w[2];
        for (int k = 0, n = written_roots(t, w); k < n; k++)
            if (tg_is_leaf(w[k]) && tg_storage_read_only(w[k]))
                return tg_err(TG_ERR_ARG,
                              "[graph_compute] %s '%s' writes tensor '%s' in place, but it is in read-only memory "
                              "(a read-only buffer from tg_backend_buffer_from_host_ptr, e.g. a mapped file)",
                              tg_op_get(t->op).name, t->name, w[k]->name);
    }
    return TG_OK;
}

// Every leaf's placement as g->checked records it
static bool leafs_as_checked(const tg_graph *g) {
    const std::vector<tg_graph_checked::leaf> &c = g->checked.leafs;
    if (c.size() != g->leafs.size()) return false;
    for (size_t i = 0; i < c.size(); i++) {
        const tg_tensor *t = g->leafs[i];
        if (t->data != c[i].data || t->buffer_id != c[i].buffer_id || t->mem != c[i].mem || t->device != c[i].device)
            return false;
    }
    return true;
}

// The checks before a compute: leaf storage, a kernel for every op, no
// in-place write to read-only memory. Skipped while g->checked still holds.
static tg_status check_inputs(tg_backend *b, tg_graph *g) {
    tg_graph_checked &c = g->checked;
    const uint64_t gen = tg_registry_generation();  // read first: a change during the checks is seen next time
    if (c.valid && c.mem == b->mem && c.device == b->device && c.registry_gen == gen &&
        leafs_as_checked(g))
        return TG_OK;
    c.valid = false;
    tg_status s;
    for (const tg_tensor *t : g->leafs)
        if ((s = check_leaf(b, t)) != TG_OK) return s;
    for (const tg_tensor *t : g->nodes)
        if (!tg_op_get(t->op).cpu && b->mem == TG_MEM_HOST)
            return tg_err(TG_ERR_UNSUPPORTED, "[graph_compute] op %s has no CPU kernel", tg_op_get(t->op).name);
    if ((s = check_writes(g->nodes)) != TG_OK) return s;
    try {
        c.leafs.resize(g->leafs.size());
    } catch (...) {
        return TG_OK;  // checked, just not recorded
    }
    for (size_t i = 0; i < g->leafs.size(); i++) {
        const tg_tensor *t = g->leafs[i];
        c.leafs[i] = {t->data, t->buffer_id, t->mem, t->device};
    }
    c.mem = b->mem;
    c.device = b->device;
    c.registry_gen = gen;
    c.valid = true;
    return TG_OK;
}

void tg_graph_mark_prechecks(const std::vector<tg_tensor *> &nodes) {
    std::vector<tg_tensor *> written;  // few: the caches, states and cpy targets
    for (tg_tensor *t : nodes) {
        const int i = tg_op_get(t->op).check_src;
        t->precheck = false;
        if (i >= 0 && t->src[i]) {
            tg_tensor *root = tg_view_root(t->src[i]);
            t->precheck = tg_is_leaf(root) && std::find(written.begin(), written.end(), root) == written.end();
        }
        tg_tensor *w[2];
        for (int k = 0, n = written_roots(t, w); k < n; k++)
            if (std::find(written.begin(), written.end(), w[k]) == written.end()) written.push_back(w[k]);
    }
}

// Make a new pool of size bytes the backend's compute buffer (registered);
// the caller keeps (and later frees) the old one. Nothing changes on failure.
static tg_status pool_take(tg_backend *b, size_t size, const char *call) {
    void *ptr = nullptr;
    tg_status s = b->iface->alloc(b, size, &ptr);
    if (s != TG_OK)
        return tg_err(s, "[%s] cannot allocate %zu bytes for intermediates on %s: %s", call, size, b->name.c_str(),
                      tg_last_error());
    b->compute_buf = ptr;
    b->compute_size = size;
    b->compute_id = tg_registry_add(b, ptr, size);
    return TG_OK;
}

tg_status tg_graph_compute(tg_backend *b, tg_graph *g) {
    tg_status s = tg_check_backend("graph_compute", b);
    if (s != TG_OK) return s;
    if (!g) return tg_err(TG_ERR_ARG, "[graph_compute] graph is NULL");
    s = tg_graph_check_live("graph_compute", g);
    if (s != TG_OK) return s;
    if ((s = check_inputs(b, g)) != TG_OK) return s;
    const bool planned = g->plan.valid && g->plan.node_offset.size() == g->nodes.size();
    if (!planned && (s = tg_plan_graph(g, "graph_compute")) != TG_OK) return s;
    tg_graph_mark_prechecks(g->nodes);

    // Grow the backend's pool for intermediates when the plan needs more. The
    // old pool stays until the compute succeeds: a failed compute keeps it, so
    // the previous graph's results stay readable (their values too when the
    // failure is found before any node runs, as a bad position or id is).
    void *old_buf = b->compute_buf;
    const size_t old_size = b->compute_size;
    const uint64_t old_id = b->compute_id;
    const bool grow = g->plan.size > b->compute_size;
    if (grow && (s = pool_take(b, g->plan.size, "graph_compute")) != TG_OK) return s;
    // where each node's result was before: restored when the compute fails, so
    // a node this graph shares with an earlier one still reads that graph's value
    struct placed {
        void *data;
        tg_mem mem;
        int device;
        uint64_t buffer_id;
    };
    std::vector<placed> before;
    before.reserve(g->nodes.size());
    for (const tg_tensor *t : g->nodes) before.push_back({t->data, t->mem, t->device, t->buffer_id});
    for (size_t i = 0; i < g->nodes.size(); i++) {
        tg_tensor *t = g->nodes[i];
        if (t->view_src) {
            tg_resolve_view(t);
            continue;
        }
        t->data = (char *)b->compute_buf + g->plan.node_offset[i];
        t->mem = b->mem;
        t->device = b->device;
        t->buffer_id = b->compute_id;
    }
    s = b->iface->compute(b, g->nodes);
    if (s != TG_OK)
        for (size_t i = 0; i < g->nodes.size(); i++) {
            tg_tensor *t = g->nodes[i];
            t->data = before[i].data;
            t->mem = before[i].mem;
            t->device = before[i].device;
            t->buffer_id = before[i].buffer_id;
        }
    if (grow) {
        // free whichever pool lost: the old one on success, the new one on failure
        void *drop = s == TG_OK ? old_buf : b->compute_buf;
        const uint64_t drop_id = s == TG_OK ? old_id : b->compute_id;
        if (s != TG_OK) {
            b->compute_buf = old_buf;
            b->compute_size = old_size;
            b->compute_id = old_id;
        }
        if (drop) {
            tg_registry_remove(drop_id);
            b->iface->dealloc(b, drop);
        }
    }
    return s;
}

tg_status tg_backend_reserve(tg_backend *b, tg_graph *g) {
    tg_status st = tg_check_backend("backend_reserve", b);
    if (st != TG_OK) return st;
    if (!g) return tg_err(TG_ERR_ARG, "[backend_reserve] graph is NULL");
    if ((st = tg_graph_check_live("backend_reserve", g)) != TG_OK) return st;
    if (!g->plan.valid && (st = tg_plan_graph(g, "backend_reserve")) != TG_OK) return st;
    if (g->plan.size <= b->compute_size) return TG_OK;
    // allocate the new buffer before releasing the old one: on failure the
    // old buffer (and every output in it) stays as it was
    void *old_buf = b->compute_buf;
    const uint64_t old_id = b->compute_id;
    if ((st = pool_take(b, g->plan.size, "backend_reserve")) != TG_OK) return st;
    if (old_buf) {
        tg_registry_remove(old_id);
        b->iface->dealloc(b, old_buf);
    }
    return TG_OK;
}
