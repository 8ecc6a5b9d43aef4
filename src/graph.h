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
};

void *tg_arena_take(tg_context *ctx, size_t n);
void tg_resolve_view(tg_tensor *t);

// The memory plan: an offset in one buffer for every intermediate that owns
// storage (op result, not a view). Offsets are multiples of TG_PLAN_ALIGN.
#define TG_PLAN_ALIGN 256
struct tg_plan {
    bool valid = false;
    bool planner = true;
    std::unordered_map<const tg_tensor *, size_t> offset;
    size_t size = 0;
    tg_graph_stats stats{};
};

struct tg_graph {
    tg_context *ctx = nullptr;
    std::vector<tg_tensor *> outputs;
    std::vector<tg_tensor *> nodes;  // op != NONE (views included), creation order
    std::vector<tg_tensor *> leafs;  // op NONE
    tg_plan plan;
};

// Plan g's intermediates (src/planner.cpp). Fills g->plan.
tg_status tg_plan_graph(tg_graph *g);
// Byte size the planner reserves for t.
size_t tg_plan_size(const tg_tensor *t);
