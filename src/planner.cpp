// planner.cpp - the memory planner.
//
// Every intermediate that owns storage (an op result that is not a view) gets
// an offset in one buffer. Nodes are visited in run order: a node's result is
// placed (in place on src[0] when allowed, else best fit in the free list,
// else at the end), then the blocks whose last consumer was this node are
// freed and merged with free neighbours (the input of a norm that a backend
// may fold into the product after it: after that product, release_at).
// Graph outputs stay live to the end.
#include <algorithm>
#include <map>

#include "graph.h"

size_t tg_plan_size(const tg_tensor *t) {
    size_t n = tg_nbytes(t);
    return (n + TG_PLAN_ALIGN - 1) / TG_PLAN_ALIGN * TG_PLAN_ALIGN;
}

static bool owns_storage(const tg_tensor *t) { return t->op != TG_OP_NONE && !t->view_src; }

namespace {
// Free list of [offset, offset + size) blocks, kept sorted and merged.
struct free_list {
    std::map<size_t, size_t> blocks;  // offset -> size
    size_t end = 0;                   // high-water mark
    bool overflow = false;            // end would pass SIZE_MAX
    size_t grow_to(size_t off, size_t size) {
        if (__builtin_add_overflow(off, size, &end)) overflow = true;
        return off;
    }

    size_t take(size_t size) {
        auto best = blocks.end();
        for (auto it = blocks.begin(); it != blocks.end(); ++it)
            if (it->second >= size && (best == blocks.end() || it->second < best->second)) best = it;
        if (best != blocks.end()) {
            size_t off = best->first, left = best->second - size;
            blocks.erase(best);
            if (left) blocks[off + size] = left;
            return off;
        }
        // none fits: grow from a free block touching the end, or append
        if (!blocks.empty()) {
            auto last = std::prev(blocks.end());
            if (last->first + last->second == end) {
                size_t off = last->first;
                blocks.erase(last);
                return grow_to(off, size);
            }
        }
        return grow_to(end, size);
    }
    void give(size_t off, size_t size) {
        auto it = blocks.emplace(off, size).first;
        auto next = std::next(it);
        if (next != blocks.end() && off + size == next->first) {
            it->second += next->second;
            blocks.erase(next);
        }
        if (it != blocks.begin()) {
            auto prev = std::prev(it);
            if (prev->first + prev->second == it->first) {
                prev->second += it->second;
                blocks.erase(it);
            }
        }
    }
};
}  // namespace

tg_status tg_plan_graph(tg_graph *g, const char *call) {
    tg_plan &p = g->plan;
    p.valid = false;  // until the end: a failed plan leaves none
    p.node_offset.assign(g->nodes.size(), TG_PLAN_NONE);
    p.stats = tg_graph_stats{};
    const auto &nodes = g->nodes;
    const int n = (int)nodes.size();
    const int k_forever = n;

    // last step at which each storage-owning intermediate is read
    std::unordered_map<const tg_tensor *, int> last_use;
    for (int i = 0; i < n; i++) {
        if (owns_storage(nodes[i])) last_use[nodes[i]] = i;
        for (int s = 0; s < TG_MAX_SRC; s++) {
            const tg_tensor *src = nodes[i]->src[s];
            if (!src) continue;
            const tg_tensor *r = tg_view_root(const_cast<tg_tensor *>(src));
            if (owns_storage(r)) last_use[r] = std::max(last_use[r], i);
        }
        if (nodes[i]->view_src) {
            const tg_tensor *r = tg_view_root(nodes[i]);
            if (owns_storage(r)) last_use[r] = std::max(last_use[r], i);
        }
    }
    for (const tg_tensor *o : g->outputs) {
        const tg_tensor *r = tg_view_root(const_cast<tg_tensor *>(o));
        if (owns_storage(r)) last_use[r] = k_forever;
    }

    // The storage of an rms_norm's input goes back to the free list after the
    // products in `mul_mat(w2, rms_norm(x) * w)` (norm, mul and product back
    // to back, views aside), not after the norm: a backend may run them as one
    // launch (the CUDA backend's folded norm, cuda/fuse.cu), which reads x
    // while it writes its results, and declines the fusion where a result was
    // placed over x (a llama's logits over the last token's row: one norm
    // kernel, ~7 us, per 1.1B decode step). Such a launch may also take the
    // next products of the same operand (q, k, v; gate and up) and a swiglu or
    // add after them, so x is held until those are placed too. The cost is x
    // held a few nodes longer in that pattern only.
    auto next_node = [&](int i) {
        while (++i < n && nodes[i]->op == TG_OP_VIEW) {}
        return i;
    };
    auto release_at = [&](int lu) {
        if (lu >= n || nodes[lu]->op != TG_OP_RMS_NORM) return lu;
        const int j = next_node(lu);
        int k = j < n ? next_node(j) : n;
        if (k >= n || nodes[j]->op != TG_OP_MUL || nodes[k]->op != TG_OP_MUL_MAT || nodes[k]->src[1] != nodes[j] ||
            (nodes[j]->src[0] != nodes[lu] && nodes[j]->src[1] != nodes[lu]))
            return lu;
        for (int more = 0, q; more < 2 && (q = next_node(k)) < n && nodes[q]->op == TG_OP_MUL_MAT &&
                              nodes[q]->src[1] == nodes[j];
             more++)
            k = q;
        const int e = next_node(k);
        return e < n && (nodes[e]->op == TG_OP_SWIGLU || nodes[e]->op == TG_OP_ADD) ? e : k;
    };

    // blocks: one per allocation; an in-place result continues its input's block
    struct block {
        size_t off, size;
        int first, last;
    };
    std::vector<block> blocks;
    std::unordered_map<const tg_tensor *, int> block_of;
    std::vector<std::vector<int>> frees_at(n + 1);
    free_list fl;

    auto place = [&](int i, tg_tensor *t) {
        size_t size = tg_plan_size(t);
        p.stats.naive_bytes += size;
        p.stats.n_intermediates++;
        int b = -1;
        if (p.planner && tg_op_get(t->op).inplace_ok && t->src[0] && owns_storage(t->src[0])) {
            tg_tensor *s0 = t->src[0];
            bool ok = last_use[s0] == i && tg_is_contiguous(s0) && tg_is_contiguous(t) && s0->type == t->type &&
                      tg_same_shape(s0, t) && block_of.count(s0);
            for (int s = 1; ok && s < TG_MAX_SRC; s++)
                if (t->src[s] && tg_view_root(t->src[s]) == s0) ok = false;  // another operand aliases it
            if (ok) {
                b = block_of[s0];
                // (the block was due back at its release point, i itself unless release_at held it)
                auto &fa = frees_at[blocks[b].last < k_forever ? blocks[b].last : i];
                fa.erase(std::remove(fa.begin(), fa.end(), b), fa.end());
                p.stats.n_inplace++;
            }
        }
        if (b < 0) {
            size_t off;
            if (p.planner) {
                off = fl.take(size);
            } else {
                off = fl.grow_to(fl.end, size);
            }
            blocks.push_back({off, size, i, i});
            b = (int)blocks.size() - 1;
        }
        int lu = release_at(last_use[t]);
        blocks[b].last = lu;
        block_of[t] = b;
        p.node_offset[(size_t)i] = blocks[b].off;
        if (lu < k_forever) frees_at[lu].push_back(b);
    };

    for (int i = 0; i < n; i++) {
        if (owns_storage(nodes[i])) place(i, nodes[i]);
        if (p.planner)
            for (int fb : frees_at[i]) fl.give(blocks[fb].off, blocks[fb].size);
    }
    if (fl.overflow)
        return tg_err(TG_ERR_OOM, "[%s] the graph's intermediates need more than %zu bytes", call,
                      (size_t)SIZE_MAX);
    p.size = fl.end;
    p.stats.planned_bytes = fl.end;
    // lower bound: the most bytes live at any one step
    std::vector<size_t> live(n + 1, 0);
    for (const block &bl : blocks)
        for (int s = bl.first; s <= std::min(bl.last, n - 1); s++) live[s] += bl.size;
    for (size_t v : live) p.stats.lower_bound = std::max(p.stats.lower_bound, v);
    p.valid = true;
    return TG_OK;
}
