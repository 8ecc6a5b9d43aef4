// graph_exec.cu - one CUDA-graph replay per computed graph.
//
// A decode step computes the same tg_graph again and again; only the values
// in its input tensors (token ids, positions) change, and those live in device
// memory. So the launches of a graph are the same every step: they are
// captured once (cudaStreamBeginCapture ... cudaGraphInstantiate) and then
// replayed with one cudaGraphLaunch, which costs a few microseconds of host
// time whatever the number of nodes.
//
// A graph is captured when it is computed twice in a row (a decode loop), or
// a third time; shapes that only come back now and then (prompt lengths) run
// plainly, as an instantiation costs more than it saves there.
//
// When is a replay valid? Launch arguments are tensor shapes, strides, op
// parameters and data pointers, plus backend resources (scratch, cuBLAS
// settings, bench knobs). The key of a capture holds, per node, its creation
// id (unique for the life of the process, and a tensor's shape, type, op and
// params never change after creation), its data pointer and its sources' data
// pointers; plus TF32, the knobs and the resource generation. Same key, same
// launches. Anything else (another graph, a buffer freed and reallocated
// elsewhere, a larger compute buffer, grown scratch) is another key: run
// plainly, captured on its next run.
//
// The key is built and looked up before the compute's checks
// (tg_cuda_graph_lookup): a key with a capture is one whose layout and op
// checks passed, so cuda_compute skips them, and the previous compute's entry
// is tried first by one comparison (a decode loop), before any hash.
//
// The error record is copied to mapped host memory and cleared by the graph's
// last node (the tail kernel, cuda/backend.cu), so every compute, plain or
// replayed, starts with a clear record and a replay reports bad positions and
// ids as a plain run does.
#include <cstring>

#include "common.cuh"
#include "signature.cuh"

namespace {
constexpr int kMaxEntries = 16;  // captures kept per backend (least recently used dropped)
}

struct tg_cuda_graph_entry {
    std::vector<uintptr_t> key;
    uint64_t hash = 0;
    cudaGraphExec_t exec = nullptr;
    std::vector<tg_cuda_impl::readback> rb;  // the capture's read-back copies
    int seen = 0;             // computes of this key so far
    bool no_capture = false;  // its capture failed once: always run plainly
    int kernels = -1;         // kernel nodes of the capture
    uint64_t last_use = 0;
};

struct tg_cuda_graph_cache {
    std::vector<tg_cuda_graph_entry> entries;
    std::vector<uintptr_t> key;  // the current compute's key (reused storage)
    // tg_cuda_graph_lookup's result for the compute under way: its entry (NULL: none yet)
    // and the key's hash (0: not computed: the entry was the previous compute's)
    bool looked_up = false;
    const std::vector<tg_tensor *> *looked_nodes = nullptr;  // the node list it was made for
    tg_cuda_graph_entry *cur = nullptr;
    uint64_t cur_hash = 0;
    uint64_t clock = 0;
    const tg_cuda_graph_entry *last = nullptr;  // the entry of the previous compute
    int last_kernels = -1;                      // kernel nodes of the last compute's CUDA graph (-1: plain)
    long long replays = 0;
};

namespace {

// Four independent multiply-shift chains over the words (one chain's latency
// per word made this ~8 us for a 1.1B llama's ~5,600 words), then mixed;
// never 0 (0 marks "not computed"). Equal hashes are confirmed by comparing
// the keys, so a collision costs a comparison, never a wrong replay.
uint64_t hash_words(const std::vector<uintptr_t> &w) {
    uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull};
    const size_t n = w.size();
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) {
            h[k] = (h[k] ^ (uint64_t)w[i + k]) * 1099511628211ull;
            h[k] ^= h[k] >> 29;  // high bits of a word reach the low ones
        }
    for (; i < n; i++) {
        h[0] = (h[0] ^ (uint64_t)w[i]) * 1099511628211ull;
        h[0] ^= h[0] >> 29;
    }
    uint64_t r = n;
    for (int k = 0; k < 4; k++) {
        r ^= h[k] ^ (h[k] >> 29);
        r *= 0xff51afd7ed558ccdull;
        r ^= r >> 32;
    }
    return r ? r : 1;
}

void build_key(tg_backend *be, const std::vector<tg_tensor *> &nodes, std::vector<uintptr_t> &key) {
    tg_cuda_impl *impl = tg_cuda(be);
    constexpr size_t kKnobWords = (sizeof(tg_cuda_sig_knobs) + sizeof(uintptr_t) - 1) / sizeof(uintptr_t);
    constexpr size_t kPerNode = 2 + TG_MAX_SRC;
    key.resize(4 + kKnobWords + nodes.size() * kPerNode);
    uintptr_t *k = key.data();
    *k++ = nodes.size();
    *k++ = be->tf32;
    *k++ = impl->fuse;
    *k++ = (uintptr_t)impl->resource_gen;
    uintptr_t knobs[kKnobWords] = {};
    memcpy(knobs, &impl->sig, sizeof(tg_cuda_sig_knobs));
    for (uintptr_t x : knobs) *k++ = x;
    for (const tg_tensor *t : nodes) {
        *k++ = (uintptr_t)t->id;
        *k++ = (uintptr_t)t->data;
        for (const tg_tensor *s : t->src) *k++ = s ? (uintptr_t)s->data : 0;
    }
}

// Kernel nodes of a captured graph (cuBLAS's included; copies and memsets not).
int count_kernels(cudaGraph_t g) {
    size_t n = 0;
    if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return (void)cudaGetLastError(), -1;
    std::vector<cudaGraphNode_t> v(n);
    if (n && cudaGraphGetNodes(g, v.data(), &n) != cudaSuccess) return (void)cudaGetLastError(), -1;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        cudaGraphNodeType t;
        if (cudaGraphNodeGetType(v[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) k++;
    }
    return k;
}

void destroy_entry(tg_cuda_graph_entry &e) {
    if (e.exec) (void)cudaGraphExecDestroy(e.exec);
    e.exec = nullptr;
}

}  // namespace

void tg_cuda_graph_cache_free(tg_cuda_impl *impl) {
    if (!impl->graph_cache) return;
    for (tg_cuda_graph_entry &e : impl->graph_cache->entries) destroy_entry(e);
    delete impl->graph_cache;
    impl->graph_cache = nullptr;
}

void tg_cuda_graph_counts(tg_backend *be, int *n_captured, long long *n_replays) {
    tg_cuda_impl *impl = tg_cuda(be);
    int n = 0;
    if (impl->graph_cache)
        for (const tg_cuda_graph_entry &e : impl->graph_cache->entries) n += e.exec != nullptr;
    if (n_captured) *n_captured = n;
    if (n_replays) *n_replays = impl->graph_cache ? impl->graph_cache->replays : 0;
}

double tg_cuda_wait_us(tg_backend *be) { return tg_cuda(be)->wait_us; }

int tg_cuda_graph_kernels(tg_backend *be) {
    tg_cuda_impl *impl = tg_cuda(be);
    return impl->graph_cache ? impl->graph_cache->last_kernels : -1;
}

void tg_cuda_set_fuse(tg_backend *be, bool on) { tg_cuda(be)->fuse = on; }

bool tg_cuda_graph_lookup(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    tg_cuda_impl *impl = tg_cuda(be);
    if (!impl->graphs) return false;
    if (!impl->graph_cache) {
        impl->graph_cache = new (std::nothrow) tg_cuda_graph_cache();
        if (!impl->graph_cache) return false;
    }
    tg_cuda_graph_cache &c = *impl->graph_cache;
    build_key(be, nodes, c.key);
    c.looked_up = true;
    c.looked_nodes = &nodes;
    c.cur = nullptr;
    c.cur_hash = 0;
    // a decode loop computes the previous compute's graph: one comparison, no hash
    if (c.last && c.last->key == c.key) {
        c.cur = const_cast<tg_cuda_graph_entry *>(c.last);
    } else {
        c.cur_hash = hash_words(c.key);
        for (tg_cuda_graph_entry &x : c.entries)
            if (x.hash == c.cur_hash && x.key == c.key) {
                c.cur = &x;
                break;
            }
    }
    return c.cur && c.cur->exec;
}

tg_status tg_cuda_graph_run(tg_backend *be, const std::vector<tg_tensor *> &nodes, tg_cuda_enqueue_fn enqueue) {
    const char *call = "graph_compute";
    tg_cuda_impl *impl = tg_cuda(be);
    if (!impl->graphs) return enqueue(be, nodes);
    if (!impl->graph_cache || !impl->graph_cache->looked_up || impl->graph_cache->looked_nodes != &nodes)
        tg_cuda_graph_lookup(be, nodes);
    if (!impl->graph_cache) return enqueue(be, nodes);
    tg_cuda_graph_cache &c = *impl->graph_cache;
    c.looked_up = false;  // the next compute looks up its own key
    tg_cuda_graph_entry *e = c.cur;
    const uint64_t h = e ? e->hash : c.cur_hash;
    const tg_cuda_graph_entry *prev = c.last;
    c.last = nullptr;
    c.last_kernels = -1;
    if (e && e->exec) {  // replay
        c.last_kernels = e->kernels;
        e->last_use = ++c.clock;
        c.last = e;
        c.replays++;
        impl->rb = e->rb;
        TG_CUDA_TRY(be, call, cudaGraphLaunch(e->exec, impl->stream));
        return TG_OK;
    }
    if (!e) {  // first sight: remember the key, run plainly
        if ((int)c.entries.size() >= kMaxEntries) {
            auto lru = c.entries.begin();  // (never the previous entry: it was used last)
            for (auto it = c.entries.begin(); it != c.entries.end(); ++it)
                if (it->last_use < lru->last_use) lru = it;
            destroy_entry(*lru);
            c.entries.erase(lru);
        }
        c.entries.emplace_back();
        tg_cuda_graph_entry &n = c.entries.back();
        n.key = c.key;
        n.hash = h;
        n.seen = 1;
        n.last_use = ++c.clock;
        c.last = &n;
        return enqueue(be, nodes);
    }
    e->last_use = ++c.clock;
    e->seen++;
    c.last = e;
    // capture a graph computed twice in a row (a decode loop) or a third time;
    // a shape seen again only now and then (a prompt length) is not worth an
    // instantiation
    if (e->no_capture || (prev != e && e->seen < 3)) return enqueue(be, nodes);

    // second sight: capture. Nothing runs on the device while capturing, so a
    // capture that fails has changed nothing: restore the backend's fault
    // state and run plainly (which reports any real error itself).
    const bool was_failed = impl->failed;
    const std::string was_msg = impl->fail_msg;
    auto give_up = [&](cudaGraph_t g) {
        if (g) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        impl->failed = was_failed;
        impl->fail_msg = was_msg;
        e->no_capture = true;
        return enqueue(be, nodes);
    };
    if (cudaStreamBeginCapture(impl->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return give_up(nullptr);
    impl->capturing = true;
    const tg_status s = enqueue(be, nodes);
    impl->capturing = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ce = cudaStreamEndCapture(impl->stream, &graph);
    if (s != TG_OK || ce != cudaSuccess || !graph) return give_up(graph);
    e->kernels = count_kernels(graph);
    c.last_kernels = e->kernels;
    cudaGraphExec_t exec = nullptr;
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess || !exec) return give_up(graph);
    (void)cudaGraphDestroy(graph);
    e->exec = exec;
    e->rb = impl->rb;
    TG_CUDA_TRY(be, call, cudaGraphLaunch(exec, impl->stream));
    return TG_OK;
}
