// backend.cu - the CUDA backend: device selection, device memory, one
// non-blocking stream, a cuBLAS handle, graph execution, and the read-back of
// the device error record (bad positions / ids found by kernels). Error
// conversion and the scratch: cuda/status.cu.
//
// Faults: a CUDA error that poisons the context (illegal address, launch
// failure, ...) marks the backend failed; every later call on it is refused
// with TG_ERR_BACKEND until it is freed and recreated (RELIABILITY 22).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "attention.cuh"
#include "common.cuh"
#include "fuse.cuh"
#include "ops.h"
#include "signature.cuh"

// ---------------------------------------------------------------------------
// The backend interface

namespace {

// Live backends per device: a device whose context was poisoned by a fault is
// reset only when no backend on it is left (they are all unusable anyway).
std::mutex g_live_mutex;
std::map<int, int> g_live;

tg_status refuse(tg_backend *be, const char *call) {
    return tg_err(TG_ERR_BACKEND, "[%s] cuda backend is unusable after an earlier CUDA error (%s): recreate it", call,
                  tg_cuda(be)->fail_msg.c_str());
}

// Backends with staged tensor_set copies not yet known to be done, each with
// an event recorded after its last one. A graph on another backend may read
// those tensors (same device): its compute waits on these events first.
std::mutex g_stage_mutex;
std::vector<tg_cuda_impl *> g_staged;
std::atomic<int> g_n_staged{0};

void staged_forget(tg_cuda_impl *impl) {  // its stream was synchronized (or it is going away)
    if (impl->staging_used == 0) return;
    impl->staging_used = 0;
    std::lock_guard<std::mutex> lock(g_stage_mutex);
    for (size_t i = 0; i < g_staged.size(); i++)
        if (g_staged[i] == impl) {
            g_staged.erase(g_staged.begin() + (long)i);
            g_n_staged--;
            break;
        }
}

// Every entry point: refuse after a fault, then make the backend's device current.
tg_status enter(tg_backend *be, const char *call) {
    if (tg_cuda(be)->failed) return refuse(be, call);
    TG_CUDA_TRY(be, call, cudaSetDevice(tg_cuda(be)->device));
    return TG_OK;
}

void destroy_impl(tg_cuda_impl *impl) {
    if (!impl) return;
    (void)cudaSetDevice(impl->device);
    if (impl->stream) (void)cudaStreamSynchronize(impl->stream);
    staged_forget(impl);
    tg_cuda_graph_cache_free(impl);
    if (impl->stage_ev) (void)cudaEventDestroy(impl->stage_ev);
    if (impl->staging) (void)cudaFreeHost(impl->staging);
    if (impl->h_err) (void)cudaFreeHost(impl->h_err);
    if (impl->rb_host) (void)cudaFreeHost(impl->rb_host);
    if (impl->cublas_ws) (void)cudaFree(impl->cublas_ws);
    if (impl->scratch) (void)cudaFree(impl->scratch);
    if (impl->d_err) (void)cudaFree(impl->d_err);
    if (impl->cublas) (void)cublasDestroy(impl->cublas);
    if (impl->stream) (void)cudaStreamDestroy(impl->stream);
    (void)cudaGetLastError();
    delete impl;
}

void cuda_free(tg_backend *be) {
    const int dev = tg_cuda(be)->device;
    destroy_impl(tg_cuda(be));
    {
        std::lock_guard<std::mutex> lock(g_live_mutex);
        if (--g_live[dev] <= 0) g_live.erase(dev);
    }
    delete be;
}

tg_status cuda_alloc(tg_backend *be, size_t size, void **ptr) {
    *ptr = nullptr;
    tg_status s = enter(be, "cuda_alloc");
    if (s != TG_OK) return s;
    if (size == 0) size = 256;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // an allocation failure is not sticky: clear it
        if (tg_cuda_is_sticky(e)) return tg_cuda_status(be, e, "cuda_alloc", "cudaMalloc");
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
        return tg_err(e == cudaErrorMemoryAllocation ? TG_ERR_OOM : TG_ERR_BACKEND,
                      "[cuda_alloc] cannot allocate %zu bytes on %s (%zu of %zu bytes free): %s", size,
                      be->name.c_str(), free_b, total_b, cudaGetErrorName(e));
    }
    *ptr = p;
    return TG_OK;
}

void cuda_dealloc(tg_backend *be, void *ptr) {
    if (!ptr) return;
    tg_cuda(be)->rb_valid = false;  // a read-back may point into it
    (void)cudaSetDevice(tg_cuda(be)->device);
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

tg_status cuda_memset(tg_backend *be, void *ptr, int value, size_t size) {
    tg_status s = enter(be, "buffer_clear");
    if (s != TG_OK) return s;
    tg_cuda_impl *impl = tg_cuda(be);
    impl->rb_valid = false;
    TG_CUDA_TRY(be, "buffer_clear", cudaMemsetAsync(ptr, value, size, impl->stream));
    TG_CUDA_TRY(be, "buffer_clear", cudaStreamSynchronize(impl->stream));
    staged_forget(impl);
    return TG_OK;
}

// Copies go through the backend's stream, so they are ordered after its
// kernels and before later ones. A small set (a step's token ids, positions)
// is copied into pinned staging and sent asynchronously: the caller's memory
// is free on return and the next compute sees the data by stream order
// (another backend's compute waits on stage_ev). The staging is reused once
// the stream has been synchronized; when full, the set synchronizes first.
// Larger sets are synchronous.
constexpr size_t kStageMax = (size_t)64 << 10;

tg_status cuda_set(tg_backend *be, void *dst, const void *src, size_t size) {
    tg_status s = enter(be, "tensor_set");
    if (s != TG_OK) return s;
    tg_cuda_impl *impl = tg_cuda(be);
    impl->rb_valid = false;
    if (impl->staging && size <= kStageMax) {
        if (impl->staging_used + size > impl->staging_size) {
            TG_CUDA_TRY(be, "tensor_set", cudaStreamSynchronize(impl->stream));
            staged_forget(impl);
        }
        char *stage = impl->staging + impl->staging_used;
        memcpy(stage, src, size);
        TG_CUDA_TRY(be, "tensor_set", cudaMemcpyAsync(dst, stage, size, cudaMemcpyHostToDevice, impl->stream));
        TG_CUDA_TRY(be, "tensor_set", cudaEventRecord(impl->stage_ev, impl->stream));
        if (impl->staging_used == 0) {
            std::lock_guard<std::mutex> lock(g_stage_mutex);
            g_staged.push_back(impl);
            g_n_staged++;
        }
        impl->staging_used += (size + 255) / 256 * 256;
        return TG_OK;
    }
    TG_CUDA_TRY(be, "tensor_set", cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, impl->stream));
    TG_CUDA_TRY(be, "tensor_set", cudaStreamSynchronize(impl->stream));
    staged_forget(impl);
    return TG_OK;
}

// cudaStreamSynchronize, its time added to wait_us (tg_cuda_wait_us).
cudaError_t timed_sync(tg_cuda_impl *impl) {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaStreamSynchronize(impl->stream);
    impl->wait_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return e;
}

tg_status cuda_get(tg_backend *be, void *dst, const void *src, size_t size) {
    tg_status s = enter(be, "tensor_get");
    if (s != TG_OK) return s;
    tg_cuda_impl *impl = tg_cuda(be);
    if (impl->rb_valid)  // an output of the last compute, already on the host
        for (const tg_cuda_impl::readback &r : impl->rb)
            if ((const char *)src >= r.dev && (const char *)src + size <= r.dev + r.size) {
                memcpy(dst, impl->rb_host + r.off + ((const char *)src - r.dev), size);
                return TG_OK;
            }
    TG_CUDA_TRY(be, "tensor_get", cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToHost, impl->stream));
    const cudaError_t e = timed_sync(impl);
    if (e != cudaSuccess) return tg_cuda_status(be, e, "tensor_get", "cudaStreamSynchronize(impl->stream)");
    staged_forget(impl);
    return TG_OK;
}

// Quantized tensors (the op constructors already refuse them elsewhere; this
// keeps a graph built some other way from reaching a kernel that would read
// blocks as elements): mul_mat's and get_rows' a, and cont/cpy's same-type
// contiguous copies. The kernels read Q8_0/Q4_0 blocks with 2-byte alignment
// and Q4_K blocks with 16-byte loads (cuda/quant.cuh); tensors and whole-row
// views of them always are, unless a view was placed by hand.
tg_status check_quantized(const tg_tensor *node, const tg_tensor *t, int src) {
    const char *op = tg_op_get(node->op).name;
    const bool weights = (node->op == TG_OP_MUL_MAT || node->op == TG_OP_GET_ROWS) && src == 0;
    const bool copy = node->op == TG_OP_CONT || node->op == TG_OP_CPY;
    if (!weights && !copy)
        return tg_err(TG_ERR_UNSUPPORTED,
                      "[%s] tensor '%s' is %s: quantized tensors are only supported as mul_mat's a and get_rows' a", op,
                      t->name, tg_type_name(t->type));
    if (!t->data) return TG_OK;
    const size_t align = t->type == TG_TYPE_Q4_K ? 16 : 2;
    bool ok = (uintptr_t)t->data % align == 0;
    for (int d = 1; ok && d < TG_MAX_DIMS; d++) ok = t->ne[d] == 1 || t->nb[d] % align == 0;
    if (!ok)
        return tg_err(TG_ERR_UNSUPPORTED,
                      "[%s] %s tensor '%s' %s is not %zu-byte aligned (view offset or stride): the CUDA kernels need it",
                      op, tg_type_name(t->type), t->name, tg_shape_str(t).c_str(), align);
    return TG_OK;
}

// Kernels read elements with their natural alignment: a view at an offset
// that is not a multiple of its element size is refused up front (a misaligned
// access would poison the context), never computed wrong (RELIABILITY 17).
tg_status check_layout(const tg_tensor *node) {
    const tg_tensor *ts[TG_MAX_SRC + 1] = {node};
    for (int i = 0; i < TG_MAX_SRC; i++) ts[i + 1] = node->src[i];
    for (int i = 0; i <= TG_MAX_SRC; i++) {
        const tg_tensor *t = ts[i];
        if (!t) continue;
        if (tg_type_is_quantized(t->type)) {
            tg_status s = check_quantized(node, t, i - 1);
            if (s != TG_OK) return s;
            continue;
        }
        if (!t->data) continue;
        const size_t es = tg_type_size(t->type);
        bool ok = es != 0 && (uintptr_t)t->data % es == 0;
        for (int d = 0; ok && d < TG_MAX_DIMS; d++) ok = t->ne[d] == 1 || t->nb[d] % es == 0;
        if (!ok)
            return tg_err(TG_ERR_UNSUPPORTED,
                          "[%s] tensor '%s' %s is not aligned to its %zu-byte elements (view offset or stride): the "
                          "CUDA backend needs element-aligned views",
                          tg_op_get(node->op).name, t->name, tg_shape_str(t).c_str(), es);
    }
    return TG_OK;
}

tg_status record_to_status(const tg_cuda_err &r) {
    const char *op = r.op > 0 && r.op < TG_OP_COUNT ? tg_op_get((tg_op)r.op).name : "graph_compute";
    switch (r.code) {
        case TG_CUDA_ERR_POSITION_RANGE:
            return tg_err(TG_ERR_ARG, "[%s] position %lld out of range [0, %lld) in sequence %lld, token %lld", op,
                          r.info[0], r.info[1], r.info[2], r.info[3]);
        case TG_CUDA_ERR_POSITION_REPEAT:
            return tg_err(TG_ERR_ARG, "[%s] position %lld repeated in sequence %lld (tokens %lld and %lld)", op,
                          r.info[0], r.info[1], r.info[2], r.info[3]);
        case TG_CUDA_ERR_ID_RANGE:
            return tg_err(TG_ERR_ARG, "[%s] id %lld out of range [0, %lld) at ids element %lld", op, r.info[0],
                          r.info[1], r.info[2]);
        default:
            return tg_err(TG_ERR_ARG, "[%s] a kernel reported bad input (code %d, info %lld %lld %lld %lld)", op,
                          r.code, r.info[0], r.info[1], r.info[2], r.info[3]);
    }
}

}  // namespace

tg_cuda_sig_knobs *tg_cuda_knobs(tg_backend *be) { return &tg_cuda(be)->sig; }
int tg_cuda_sm_count(tg_backend *be) { return tg_cuda_sms(tg_cuda(be)); }
bool tg_cuda_delta_bulk_ready(tg_backend *be) { return tg_cuda(be)->bulk && tg_cuda(be)->sig.delta_chunk_bulk == 0; }
const char *tg_cuda_sig_last(tg_backend *be, tg_cuda_sig_op op) { return tg_cuda(be)->sig_last[op]; }

bool tg_cuda_kv_prechecked(tg_backend *be, const tg_tensor *dst) {
    for (const tg_tensor *t : tg_cuda(be)->kv_prechecked)
        if (t == dst) return true;
    return false;
}

namespace {

// Same positions, same limits: one validation covers every rope_kv_update
// that shares them (each layer of a model updates its caches at the same
// positions).
bool same_kv_check(const tg_tensor *a, const tg_tensor *b) {
    const tg_tensor *pa = a->src[4], *pb = b->src[4];
    if (pa->data != pb->data || a->src[0]->ne[2] != b->src[0]->ne[2]) return false;
    if ((a->src[5] ? a->src[5]->ne[1] : -1) != (b->src[5] ? b->src[5]->ne[1] : -1)) return false;
    for (int d = 0; d < 2; d++)
        if (pa->ne[d] != pb->ne[d] || pa->nb[d] != pb->nb[d]) return false;
    return true;
}

// Ops that may write persistent tensors (they skip once the record is set).
bool writes_persistent(const tg_tensor *t) {
    return t->op == TG_OP_CPY || t->op == TG_OP_ROPE_KV_UPDATE || (t->op == TG_OP_DELTA_RULE && t->src[5]);
}

// The graph's last node: copies the read-back outputs into the mapped host
// buffer, then the error record to the mapped host record, and clears d_err.
// One kernel: a copy node in a replayed graph costs ~10-15 us of device time
// on an H200 where this kernel costs ~2 (bench/NOTES.md, session 23).
constexpr int kTailCopies = 8;
struct tail_args {
    const char *src[kTailCopies];
    char *dst[kTailCopies];
    size_t n[kTailCopies];
    int count;
};
__global__ void graph_tail_kernel(tail_args a, tg_cuda_err *d, tg_cuda_err *h) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
    for (int j = 0; j < a.count; j++) {
        const size_t n = a.n[j];
        if ((((uintptr_t)a.src[j] | (uintptr_t)a.dst[j]) & 15) == 0) {
            const uint4 *s = (const uint4 *)a.src[j];
            uint4 *o = (uint4 *)a.dst[j];
            for (size_t i = tid; i < n / 16; i += nth) o[i] = s[i];
            for (size_t i = n / 16 * 16 + tid; i < n; i += nth) a.dst[j][i] = a.src[j][i];
        } else {
            for (size_t i = tid; i < n; i += nth) a.dst[j][i] = a.src[j][i];
        }
    }
    if (tid == 0) {
        volatile tg_cuda_err *vd = d, *vh = h;
        vh->op = vd->op;
        for (int i = 0; i < 4; i++) vh->info[i] = vd->info[i];
        vh->code = vd->code;
        vd->code = 0;
    }
}

// The device pre-checks a graph needs, launched before its first node. An
// op's own kernel validates its input and reports it before any later node
// runs; a pre-check is needed only where a writer of persistent tensors runs
// earlier in the graph (it must see the report to skip). A rope_kv_update
// whose positions an earlier check already covered (a pre-check, or an update
// that validated itself before any writer) only reads the record.
tg_status enqueue_prechecks(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    tg_cuda_impl *impl = tg_cuda(be);
    std::vector<const tg_tensor *> covered;  // rope_kv_update checks done (or self-done) so far
    // storage the graph writes in place: positions there may change between a
    // check and an update, so such an update always validates itself
    std::vector<const tg_tensor *> written;
    for (const tg_tensor *t : nodes) {
        if (t->op == TG_OP_CPY) written.push_back(tg_view_root(t->src[1]));
        if (t->op == TG_OP_ROPE_KV_UPDATE)
            written.push_back(tg_view_root(t->src[0])), written.push_back(tg_view_root(t->src[1]));
        if (t->op == TG_OP_DELTA_RULE && t->src[5]) written.push_back(tg_view_root(t->src[5]));
    }
    bool writer_before = false;
    tg_status s = TG_OK;
    for (const tg_tensor *t : nodes) {
        if (t->op == TG_OP_VIEW) continue;
        const tg_cuda_fn check = tg_op_get(t->op).cuda_check;
        if (check && t->precheck) {  // persistent, written by no earlier node (tg_graph_mark_prechecks)
            const tg_tensor *in = tg_view_root(t->src[tg_op_get(t->op).check_src]);
            const bool rewritten = std::find(written.begin(), written.end(), in) != written.end();
            if (t->op == TG_OP_ROPE_KV_UPDATE && rewritten) {
                if (writer_before && (s = check(be, t)) != TG_OK) return s;  // as before: checked, then self-checked
            } else if (t->op == TG_OP_ROPE_KV_UPDATE) {
                bool done = false;
                for (const tg_tensor *o : covered) done = done || same_kv_check(o, t);
                if (!done && writer_before && (s = check(be, t)) != TG_OK) return s;
                if (done || writer_before) impl->kv_prechecked.push_back(t);
                if (!done) covered.push_back(t);
            } else if (writer_before && (s = check(be, t)) != TG_OK) {
                return s;
            }
        }
        writer_before = writer_before || writes_persistent(t);
    }
    return TG_OK;
}

// The graph's small outputs to read back (nodes nothing later reads, with
// their own storage in the compute buffer, of at most 128 KiB: logits of a
// decode step; a larger copy nobody may read would cost more device time than
// a read-back trip saves), at most kTailCopies of them, the last ones in node
// order first (the logits are usually the last node); then the tail kernel
// that copies them into the mapped read-back buffer and writes the record.
constexpr size_t kReadbackMax = (size_t)128 << 10;
tg_status enqueue_tail(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    tg_cuda_impl *impl = tg_cuda(be);
    impl->rb.clear();
    tail_args a = {};
    size_t total = 0;
    if (impl->rb_host_dev) {
        std::vector<const tg_tensor *> read;
        for (const tg_tensor *t : nodes) {
            for (const tg_tensor *s : t->src)
                if (s) read.push_back(tg_view_root(const_cast<tg_tensor *>(s)));
            if (t->view_src) read.push_back(tg_view_root(const_cast<tg_tensor *>(t)));
        }
        std::sort(read.begin(), read.end());
        size_t off = 0;
        for (auto it = nodes.rbegin(); it != nodes.rend() && a.count < kTailCopies; ++it) {
            const tg_tensor *t = *it;
            if (t->view_src || t->op == TG_OP_VIEW || t->buffer_id != be->compute_id || !t->data) continue;
            if (std::binary_search(read.begin(), read.end(), t)) continue;
            const size_t n = tg_nbytes(t);
            if (!tg_is_contiguous(t) || n == 0 || n > kReadbackMax || off + n > impl->rb_cap) continue;
            a.src[a.count] = (const char *)t->data;
            a.dst[a.count] = impl->rb_host_dev + off;
            a.n[a.count++] = n;
            impl->rb.push_back({(const char *)t->data, n, off});
            off += (n + 255) / 256 * 256;
            total += n;
        }
    }
    const int blocks = (int)std::min<size_t>(64, std::max<size_t>(1, (total / 16 + 255) / 256));
    graph_tail_kernel<<<blocks, 256, 0, impl->stream>>>(a, impl->d_err, impl->h_err_dev);
    TG_CUDA_LAUNCHED(be, "graph_compute");
    return TG_OK;
}

// The graph's work on the stream, never synchronizing (it may be captured):
// (plain runs: a record reset), the pre-checks, the nodes in order, the tail
// kernel (read-back copies and the record out to the host, which clears it).
// Stops at the first host-side error.
tg_status enqueue_graph(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    const char *call = "graph_compute";
    tg_cuda_impl *impl = tg_cuda(be);
    if (!impl->capturing)  // a replay relies on the last compute's clear
        TG_CUDA_TRY(be, call, cudaMemsetAsync(impl->d_err, 0, sizeof(tg_cuda_err), impl->stream));
    impl->kv_prechecked.clear();
    tg_status s = enqueue_prechecks(be, nodes);
    if (s == TG_OK) s = tg_cuda_enqueue_nodes(be, nodes);  // fused where allowed (cuda/fuse.cu)
    impl->kv_prechecked.clear();
    if (s == TG_OK) s = enqueue_tail(be, nodes);
    if (s != TG_OK && !impl->capturing)
        (void)cudaMemsetAsync(impl->d_err, 0, sizeof(tg_cuda_err), impl->stream);  // the next compute starts clear
    return s;
}

tg_status cuda_compute(tg_backend *be, const std::vector<tg_tensor *> &nodes) {
    const char *call = "graph_compute";
    tg_status s = enter(be, call);
    if (s != TG_OK) return s;
    tg_cuda_impl *impl = tg_cuda(be);
    impl->rb_valid = false;
    // a replay's key (node ids: their ops, shapes and types; data pointers)
    // is a capture's whose checks passed: ~12 us of a 1.1B llama's step skipped
    if (!tg_cuda_graph_lookup(be, nodes)) {
        for (const tg_tensor *t : nodes)
            if (t->op != TG_OP_VIEW && (s = check_layout(t)) != TG_OK) return s;
        for (const tg_tensor *t : nodes)
            if (t->op != TG_OP_VIEW && !tg_op_get(t->op).cuda)
                return tg_err(TG_ERR_UNSUPPORTED, "[%s] op %s has no CUDA kernel", call, tg_op_get(t->op).name);
    }
    TG_CUBLAS_TRY(be, call,
                  cublasSetMathMode(impl->cublas, be->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    // inputs another backend staged may feed this graph: wait for their copies
    if (g_n_staged.load() > (impl->staging_used ? 1 : 0)) {
        std::lock_guard<std::mutex> lock(g_stage_mutex);
        for (tg_cuda_impl *o : g_staged)
            if (o != impl) TG_CUDA_TRY(be, call, cudaStreamWaitEvent(impl->stream, o->stage_ev, 0));
    }
    impl->h_err->code = -1;  // "not written": a graph that stopped early leaves this
    s = tg_cuda_graph_run(be, nodes, enqueue_graph);

    // one synchronization: drain the stream even after a host-side error, so
    // that nothing still runs on our buffers when we return. A failure here
    // came from a kernel: the context is suspect, so the backend refuses
    // further work.
    cudaError_t e = timed_sync(impl);
    if (e != cudaSuccess) {
        tg_status fs = tg_cuda_status(be, e, call, "cudaStreamSynchronize after the graph's kernels");
        if (!impl->failed) {
            impl->failed = true;
            impl->fail_msg = tg_last_error();
        }
        return fs;
    }
    staged_forget(impl);
    if (impl->failed) return refuse(be, call);  // a sticky error seen by an op
    if (s != TG_OK) return s;
    impl->rb_valid = true;  // the intermediates are final, whatever the record says
    tg_cuda_err rec;
    memcpy(&rec, (const void *)impl->h_err, sizeof rec);  // written by the device before the synchronization
    if (rec.code < 0) return tg_err(TG_ERR_BACKEND, "[%s] the error record was not read back", call);
    if (rec.code != TG_CUDA_ERR_NONE) return record_to_status(rec);
    return TG_OK;
}

const tg_backend_iface k_cuda_iface = {cuda_free, cuda_alloc, cuda_dealloc, cuda_memset,
                                       cuda_set,  cuda_get,   cuda_compute};

// Make the device's context usable: a context poisoned by an earlier fault is
// reset when no backend on the device is left.
tg_status open_device(int device) {
    const char *call = "backend_cuda";
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaFree(nullptr);  // creates the context; shows a poisoned one
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (!tg_cuda_is_sticky(e))
            return tg_err(TG_ERR_BACKEND, "[%s] cannot use device %d: CUDA error %s: %s", call, device,
                          cudaGetErrorName(e), cudaGetErrorString(e));
        bool others;
        {
            std::lock_guard<std::mutex> lock(g_live_mutex);
            others = g_live.count(device) && g_live[device] > 0;
        }
        if (others)
            return tg_err(TG_ERR_BACKEND,
                          "[%s] device %d is in an error state (%s): free every cuda backend on it, then recreate", call,
                          device, cudaGetErrorName(e));
        (void)cudaDeviceReset();
        (void)cudaGetLastError();
        TG_CUDA_TRY(nullptr, call, cudaSetDevice(device));
        TG_CUDA_TRY(nullptr, call, cudaFree(nullptr));
    }
    return TG_OK;
}

tg_status init_impl(tg_cuda_impl *impl, int device) {
    const char *call = "backend_cuda";
    impl->device = device;
    TG_CUDA_TRY(nullptr, call, cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, device));
    if (const char *env = getenv("TG_CUDA_MM_BUDGET")) {  // tests: force chunked weight conversion
        const long long v = atoll(env);
        if (v >= 1024) impl->mm_budget = (size_t)v;
    }
    // bench A/B of whole models: 1 = the per-product quantized GEMV (signature.cuh mmq_kernel)
    if (const char *env = getenv("TG_CUDA_MMQ_KERNEL")) impl->sig.mmq_kernel = atoi(env) == 1 ? 1 : 0;
    TG_CUDA_TRY(nullptr, call, cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
    TG_CUBLAS_TRY(nullptr, call, cublasCreate(&impl->cublas));
    TG_CUBLAS_TRY(nullptr, call, cublasSetStream(impl->cublas, impl->stream));
    TG_CUBLAS_TRY(nullptr, call, cublasSetMathMode(impl->cublas, CUBLAS_DEFAULT_MATH));
    // 32 MiB: cuBLAS's recommended workspace on Hopper (4 MiB before); set
    // explicitly so that GEMMs captured into CUDA graphs allocate nothing
    const size_t ws = (size_t)32 << 20;
    TG_CUDA_TRY(nullptr, call, cudaMalloc(&impl->cublas_ws, ws));
    TG_CUBLAS_TRY(nullptr, call, cublasSetWorkspace(impl->cublas, impl->cublas_ws, ws));
    if (const char *env = getenv("TG_CUDA_GRAPHS")) impl->graphs = strcmp(env, "0") != 0;
    if (const char *env = getenv("TG_CUDA_FUSE")) impl->fuse = strcmp(env, "0") != 0;
    int cc_major = 0;
    TG_CUDA_TRY(nullptr, call, cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
    impl->pdl = cc_major >= 9;
    cudaFuncAttributes fa;  // the kernels' griddepcontrol is compiled in only for sm_90 and later
    // (both: a build for an older arch JIT-compiled here reports binaryVersion 90
    // from PTX in which the griddepcontrol instructions were compiled out)
    if (impl->pdl && (cudaFuncGetAttributes(&fa, graph_tail_kernel) != cudaSuccess || fa.binaryVersion < 90 ||
                      fa.ptxVersion < 90))
        impl->pdl = false;
    (void)cudaGetLastError();
    if (const char *env = getenv("TG_CUDA_PDL")) impl->pdl = impl->pdl && strcmp(env, "0") != 0;
    impl->bulk = cc_major >= 9 && tg_cuda_delta_state_bulk_built();
    TG_CUDA_TRY(nullptr, call, tg_cuda_attention_mma_init());
    int cluster_launch = 0;
    (void)cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device);
    if (cc_major < 9 || !cluster_launch || tg_cuda_attention_cluster_init(&impl->cluster_max) != cudaSuccess)
        impl->cluster_max = 0;
    (void)cudaGetLastError();
    // bench A/B of whole models: attention decode by 1 the split and combine
    // kernels, 2 the cluster kernel wherever it can run (knob attn_split)
    if (const char *env = getenv("TG_CUDA_ATTN_SPLIT")) {
        const int v = atoi(env);
        impl->sig.attn_split = v == 1 || v == 2 ? v : 0;
    }
    if (const char *env = getenv("TG_CUDA_ATTN_CLUSTER")) {
        const int v = atoi(env);
        impl->sig.attn_cluster = v == 2 || v == 4 || v == 8 || v == 16 ? v : 0;
    }
    // diagnostics and A/B of the launch chain (knobs pdl_mask, mmv_trigger)
    if (const char *env = getenv("TG_CUDA_PDL_MASK")) impl->sig.pdl_mask = (int)strtol(env, nullptr, 0);
    if (const char *env = getenv("TG_CUDA_MMV_TRIGGER")) {  // 0, 1 or 2; anything else keeps the default
        const int v = atoi(env);
        if (v >= 0 && v <= 2) impl->sig.mmv_trigger = v;
    }
    if (const char *env = getenv("TG_CUDA_MMV_ROWS")) impl->sig.mmv_rows = atoi(env);
    if (const char *env = getenv("TG_CUDA_DELTA_PHASE_FULL")) impl->sig.delta_chunk_phase_full = atoi(env) == 0 ? 2 : 1;
    if (const char *env = getenv("TG_CUDA_DELTA_H16")) impl->sig.delta_chunk_h16 = atoi(env) == 0 ? 2 : 1;
    if (const char *env = getenv("TG_CUDA_DELTA_WG")) {
        const int v = atoi(env);
        impl->sig.delta_chunk_wg = v == 0 ? 1 : v == 2 ? 2 : 0;
    }
    if (const char *env = getenv("TG_CUDA_DELTA_PREP")) impl->sig.delta_chunk_prep = atoi(env) == 0 ? 1 : 0;
    if (const char *env = getenv("TG_CUDA_DELTA_BULK")) impl->sig.delta_chunk_bulk = atoi(env) == 0 ? 1 : 0;
    if (const char *env = getenv("TG_CUDA_DELTA_FO")) impl->sig.delta_chunk_fo = atoi(env) == 0 ? 1 : 0;
    if (const char *env = getenv("TG_CUDA_DELTA_SEG")) impl->sig.delta_chunk_seg = atoi(env) <= 0 ? 1 : atoi(env);
    if (const char *env = getenv("TG_CUDA_DELTA_GK")) impl->sig.delta_chunk_gk = atoi(env) == 0 ? 1 : 0;
    if (const char *env = getenv("TG_CUDA_ATTN_SPLIT_DC")) impl->sig.attn_split_dc = atoi(env) == 0 ? 2 : 1;
    if (const char *env = getenv("TG_CUDA_ATTN_ROWS")) {
        const int v = atoi(env);
        impl->sig.attn_split_rows = v >= 0 && v <= 3 ? v : 0;
    }
    if (const char *env = getenv("TG_CUDA_MMVQ_FILL")) impl->sig.mmvq_fill = std::max(0, atoi(env));
    // 0 = rms_norm*w never folded into the GEMV after it (knob norm_fold)
    if (const char *env = getenv("TG_CUDA_NORM_FOLD")) impl->sig.norm_fold = strcmp(env, "0") == 0 ? 1 : 0;
    // 0 = attention's combine kernel never quantizes the o product's b (knob qlink 1)
    if (const char *env = getenv("TG_CUDA_QLINK")) impl->sig.qlink = strcmp(env, "0") == 0 ? 1 : 0;
    // 0 = rope(q) + rope_kv_update never folded into the q/k/v GEMV (knob rope_fold)
    if (const char *env = getenv("TG_CUDA_ROPE_FOLD"))
        impl->sig.rope_fold = strcmp(env, "0") == 0 ? 1 : strcmp(env, "2") == 0 ? 2 : 0;
    TG_CUDA_TRY(nullptr, call, cudaHostAlloc((void **)&impl->h_err, sizeof(tg_cuda_err), cudaHostAllocMapped));
    TG_CUDA_TRY(nullptr, call, cudaHostGetDevicePointer((void **)&impl->h_err_dev, impl->h_err, 0));
    impl->rb_cap = (size_t)1 << 20;
    TG_CUDA_TRY(nullptr, call, cudaHostAlloc((void **)&impl->rb_host, impl->rb_cap, cudaHostAllocMapped));
    TG_CUDA_TRY(nullptr, call, cudaHostGetDevicePointer((void **)&impl->rb_host_dev, impl->rb_host, 0));
    impl->staging_size = (size_t)1 << 20;
    TG_CUDA_TRY(nullptr, call, cudaMallocHost((void **)&impl->staging, impl->staging_size));
    TG_CUDA_TRY(nullptr, call, cudaEventCreateWithFlags(&impl->stage_ev, cudaEventDisableTiming));
    TG_CUDA_TRY(nullptr, call, cudaMalloc(&impl->d_err, sizeof(tg_cuda_err)));
    TG_CUDA_TRY(nullptr, call, cudaMemsetAsync(impl->d_err, 0, sizeof(tg_cuda_err), impl->stream));
    TG_CUDA_TRY(nullptr, call, cudaStreamSynchronize(impl->stream));
    return TG_OK;
}

}  // namespace

bool tg_cuda_device_present(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n > 0;
}

tg_backend *tg_backend_cuda_create(int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        // Without a driver the runtime reports cudaErrorInsufficientDriver
        // ("driver version is insufficient"): say what is really missing.
        int drv = 0, rt = 0;
        (void)cudaDriverGetVersion(&drv);  // 0 when no driver is installed
        (void)cudaRuntimeGetVersion(&rt);
        if (e == cudaErrorNoDevice)
            TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[backend_cuda] no CUDA device present");
        if (drv == 0)
            TG_FAIL_NULL(TG_ERR_UNSUPPORTED,
                         "[backend_cuda] no CUDA device present (no NVIDIA driver is installed on this machine)");
        if (e == cudaErrorInsufficientDriver)
            TG_FAIL_NULL(TG_ERR_UNSUPPORTED,
                         "[backend_cuda] the NVIDIA driver supports CUDA %d.%d, older than this build's CUDA runtime "
                         "%d.%d: update the driver",
                         drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[backend_cuda] no usable CUDA device (%s: %s)", cudaGetErrorName(e),
                     cudaGetErrorString(e));
    }
    if (n <= 0) TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[backend_cuda] no CUDA device present");
    if (device < 0 || device >= n)
        TG_FAIL_NULL(TG_ERR_ARG, "[backend_cuda] device %d out of range [0, %d)", device, n);
    if (open_device(device) != TG_OK) return nullptr;

    tg_cuda_impl *impl = new (std::nothrow) tg_cuda_impl();
    tg_backend *be = new (std::nothrow) tg_backend();
    if (!impl || !be) {
        delete impl;
        delete be;
        TG_FAIL_NULL(TG_ERR_OOM, "[backend_cuda] out of host memory");
    }
    if (init_impl(impl, device) != TG_OK) {
        destroy_impl(impl);
        delete be;
        return nullptr;
    }
    be->iface = &k_cuda_iface;
    be->impl = impl;
    be->mem = TG_MEM_DEVICE;
    be->device = device;
    be->name = "cuda:" + std::to_string(device);
    be->tf32 = false;
    {
        std::lock_guard<std::mutex> lock(g_live_mutex);
        g_live[device]++;
    }
    tg_backend_register(be, true);
    return be;
}
