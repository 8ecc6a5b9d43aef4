// graph.h - context, graph and memory-plan structures (internal).
#pragma once
#include <unordered_map>
#include <vector>

#include "internal.h"

struct tg_context {
    char *mem = nullptr;
    size_t mem_size = 0;
    size_t used = 0;
    bool owns_mem = false;
    bool no_alloc = false;
    std::vector<tg_tensor *> tensors;  // creation order
    std::vector<tg_graph *> graphs;
    uint64_t gen = 0;  // unique per tg_init: tensors carry it (tg_tensor::ctx_gen)
};

// Liveness of contexts, their tensors and graphs (src/context.cpp): a cheap
// registry so that a handle of a freed context is refused, not dereferenced.
// It cannot tell a tensor apart from bytes a caller wrote into a live arena
// that mimic one; it catches the ordinary use after tg_free.
bool tg_context_live(const tg_context *ctx);
bool tg_tensor_live(const tg_tensor *t);  // t and every tensor down its view chain
bool tg_graph_live(const tg_graph *g);
void tg_graph_register(tg_graph *g, bool live);
// "[call] ..." error when g, or a context one of its tensors came from, was freed.
tg_status tg_graph_check_live(const char *call, const tg_graph *g);

void *tg_arena_take(tg_context *ctx, size_t n);
void tg_resolve_view(tg_tensor *t);

// The memory plan: an offset in one buffer for every intermediate that owns
// storage (op result, not a view). Offsets are multiples of TG_PLAN_ALIGN.
#define TG_PLAN_ALIGN 256
#define TG_PLAN_NONE SIZE_MAX  // a node_offset entry of a node that owns no storage
struct tg_plan {
    bool valid = false;
    bool planner = true;
    // by position in the graph's nodes (one index per node a compute
    // places; a hash map keyed by tensor was ~6 us of a 1.1B llama's decode
    // step); TG_PLAN_NONE for views, which own no storage
    std::vector<size_t> node_offset;
    size_t size = 0;
    tg_graph_stats stats{};
};

// What tg_graph_compute last found true of a graph before running it: every
// leaf has live storage in the backend's memory, every op a kernel there, no
// node writes read-only memory in place. Still true while the backend's
// memory kind and device, the storage registry's generation (tg_registry_generation) and each leaf's
// placement are as recorded; tg_graph_expand clears it. A decode step's
// graph is computed again and again with ~150 leaves: this saves a locked
// registry lookup per leaf per step.
struct tg_graph_checked {
    struct leaf {
        const void *data;
        uint64_t buffer_id;
        tg_mem mem;
        int device;
    };
    bool valid = false;
    tg_mem mem = TG_MEM_NONE;  // the backend's memory kind and device: all the checks ask of it
    int device = -1;
    uint64_t registry_gen = 0;
    std::vector<leaf> leafs;  // g->leafs' placements, in order
};

struct tg_graph {
    tg_context *ctx = nullptr;
    std::vector<tg_tensor *> outputs;
    std::vector<tg_tensor *> nodes;  // op != NONE (views included), creation order
    std::vector<tg_tensor *> leafs;  // op NONE
    std::vector<std::pair<const tg_context *, uint64_t>> ctxs;  // contexts (and generations) of its tensors
    tg_plan plan;
    tg_graph_checked checked;
};

// Set each node's precheck flag (see tg_tensor::precheck): a check input is
// persistent when its view root is a leaf that no earlier node writes in place
// (a cpy target, a rope_kv_update cache, a delta_rule state).
void tg_graph_mark_prechecks(const std::vector<tg_tensor *> &nodes);

// Plan g's intermediates (src/planner.cpp). Fills g->plan; "[call] ..." error
// when their total passes SIZE_MAX.
tg_status tg_plan_graph(tg_graph *g, const char *call);
// Byte size the planner reserves for t.
size_t tg_plan_size(const tg_tensor *t);
