// backend.cpp - buffer registry, backend buffers, tensor set/get, backend
// selection.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>

#include "graph.h"

// ---------------------------------------------------------------------------
// registry of live storage

static std::mutex g_reg_mutex;
static std::unordered_map<uint64_t, tg_buffer_entry> g_registry;
static uint64_t g_next_buffer_id = 1;
static std::atomic<uint64_t> g_registry_gen{1};  // changes with every add and remove

uint64_t tg_registry_add(tg_backend *be, void *base, size_t size, bool read_only) {
    std::lock_guard<std::mutex> lock(g_reg_mutex);
    uint64_t id = g_next_buffer_id++;
    g_registry[id] = tg_buffer_entry{be, base, size, read_only};
    g_registry_gen.fetch_add(1, std::memory_order_release);
    return id;
}
void tg_registry_remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(g_reg_mutex);
    g_registry.erase(id);
    g_registry_gen.fetch_add(1, std::memory_order_release);
}
uint64_t tg_registry_generation() { return g_registry_gen.load(std::memory_order_acquire); }
bool tg_registry_lookup(uint64_t id, tg_buffer_entry *out) {
    std::lock_guard<std::mutex> lock(g_reg_mutex);
    auto it = g_registry.find(id);
    if (it == g_registry.end()) return false;
    if (out) *out = it->second;
    return true;
}

tg_status tg_check_storage(const char *call, const tg_tensor *t, tg_backend **owner) {
    *owner = nullptr;
    if (!t->data || t->mem == TG_MEM_NONE)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s' has no storage", call, t->name);
    if (t->buffer_id == 0) return TG_OK;  // host context arena
    tg_buffer_entry e;
    if (!tg_registry_lookup(t->buffer_id, &e))
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s': its buffer was freed (or replaced by a larger compute buffer)",
                      call, t->name);
    *owner = e.backend;
    return TG_OK;
}

bool tg_storage_read_only(const tg_tensor *t) {
    tg_buffer_entry e;
    return t->data && t->buffer_id != 0 && tg_registry_lookup(t->buffer_id, &e) && e.read_only;
}

// ---------------------------------------------------------------------------
// buffers

// backend == NULL: the backend was freed first and released the storage;
// the handle stays until tg_buffer_free, refusing use.
struct tg_buffer {
    tg_backend *backend;
    void *base;
    size_t size;
    uint64_t id;
    bool owned = true;       // false: caller memory (from_host_ptr), never deallocated here
    bool read_only = false;  // caller memory that must not be written
};

static std::mutex g_handles_mu;
static std::unordered_set<const tg_backend *> g_backends;
static std::unordered_set<const tg_buffer *> g_buffers;

void tg_backend_register(tg_backend *b, bool live) {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    if (live)
        g_backends.insert(b);
    else
        g_backends.erase(b);
}
bool tg_backend_live(const tg_backend *b) {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    return b && g_backends.count(b);
}
tg_status tg_check_backend(const char *call, const tg_backend *b) {
    if (!b) return tg_err(TG_ERR_ARG, "[%s] backend is NULL", call);
    if (!tg_backend_live(b)) return tg_err(TG_ERR_ARG, "[%s] backend %p was freed", call, (const void *)b);
    return TG_OK;
}
static bool buffer_live(const tg_buffer *buf) {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    return buf && g_buffers.count(buf);
}
// Release buf's storage (registry entry first, so no tensor reaches it).
static void buffer_release(tg_buffer *buf) {
    tg_registry_remove(buf->id);
    if (buf->owned) buf->backend->iface->dealloc(buf->backend, buf->base);
    buf->backend = nullptr;
    buf->base = nullptr;
    buf->size = 0;
}

// Register buf (allocated, its fields set) with backend b and the live-handle
// set; on failure release its storage and delete it.
static tg_buffer *buffer_register(tg_backend *b, tg_buffer *buf, const char *call) {
    buf->id = tg_registry_add(b, buf->base, buf->size, buf->read_only);
    try {
        b->buffers.push_back(buf);
        std::lock_guard<std::mutex> lock(g_handles_mu);
        g_buffers.insert(buf);
    } catch (...) {
        b->buffers.erase(std::remove(b->buffers.begin(), b->buffers.end(), buf), b->buffers.end());
        buffer_release(buf);
        delete buf;
        TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of host memory", call);
    }
    return buf;
}

static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

tg_buffer *tg_backend_alloc(tg_backend *b, tg_context *ctx) {
    if (tg_check_backend("backend_alloc", b) != TG_OK) return nullptr;
    if (!ctx) TG_FAIL_NULL(TG_ERR_ARG, "[backend_alloc] context is NULL");
    if (!tg_context_live(ctx)) TG_FAIL_NULL(TG_ERR_ARG, "[backend_alloc] context %p was freed", (void *)ctx);
    // leaves with no live storage get a slot
    std::vector<tg_tensor *> todo;
    size_t total = 0;
    for (tg_tensor *t : ctx->tensors) {
        if (!tg_is_leaf(t)) continue;
        tg_backend *owner;
        if (t->data && tg_check_storage("backend_alloc", t, &owner) == TG_OK) continue;
        size_t n = align256(tg_nbytes(t));
        if (__builtin_add_overflow(total, n, &total))
            TG_FAIL_NULL(TG_ERR_OOM, "[backend_alloc] total size overflows");
        todo.push_back(t);
    }
    if (total == 0) total = 256;  // an empty buffer is still a valid handle
    tg_buffer *buf = new (std::nothrow) tg_buffer();
    if (!buf) TG_FAIL_NULL(TG_ERR_OOM, "[backend_alloc] out of host memory");
    void *base = nullptr;
    tg_status s = b->iface->alloc(b, total, &base);
    if (s != TG_OK) {
        delete buf;
        TG_FAIL_NULL(s, "[backend_alloc] cannot allocate %zu bytes on %s: %s", total, b->name.c_str(), tg_last_error());
    }
    buf->backend = b;
    buf->base = base;
    buf->size = total;
    if (!buffer_register(b, buf, "backend_alloc")) return nullptr;
    size_t off = 0;
    for (tg_tensor *t : todo) {
        t->data = (char *)base + off;
        t->mem = b->mem;
        t->device = b->device;
        t->buffer_id = buf->id;
        off += align256(tg_nbytes(t));
    }
    // views made before the allocation see the new storage (views of a freed
    // context's tensors are skipped: they are refused everywhere)
    for (tg_tensor *t : ctx->tensors)
        if (t->view_src && tg_tensor_live(t)) tg_resolve_view(t);
    return buf;
}

tg_buffer *tg_backend_buffer_from_host_ptr(tg_backend *b, void *ptr, size_t size, bool read_only) {
    const char *call = "backend_buffer_from_host_ptr";
    if (tg_check_backend(call, b) != TG_OK) return nullptr;
    if (b->mem != TG_MEM_HOST)
        TG_FAIL_NULL(TG_ERR_UNSUPPORTED,
                     "[%s] backend %s cannot use host memory in place: allocate with tg_backend_alloc and upload "
                     "with tg_tensor_set",
                     call, b->name.c_str());
    if (!ptr) TG_FAIL_NULL(TG_ERR_ARG, "[%s] ptr is NULL", call);
    if (size == 0) TG_FAIL_NULL(TG_ERR_ARG, "[%s] size is 0", call);
    uintptr_t end;
    if (__builtin_add_overflow((uintptr_t)ptr, size, &end))
        TG_FAIL_NULL(TG_ERR_ARG, "[%s] range %p + %zu wraps the address space", call, ptr, size);
    tg_buffer *buf = new (std::nothrow) tg_buffer();
    if (!buf) TG_FAIL_NULL(TG_ERR_OOM, "[%s] out of host memory", call);
    buf->backend = b;
    buf->base = ptr;
    buf->size = size;
    buf->owned = false;
    buf->read_only = read_only;
    return buffer_register(b, buf, call);
}

tg_status tg_buffer_place(tg_buffer *buf, tg_tensor *t, size_t offset) {
    const char *call = "buffer_place";
    if (!buf) return tg_err(TG_ERR_ARG, "[%s] buffer is NULL", call);
    if (!buffer_live(buf)) return tg_err(TG_ERR_ARG, "[%s] buffer %p was freed", call, (void *)buf);
    if (!buf->backend) return tg_err(TG_ERR_ARG, "[%s] the buffer's backend was freed", call);
    if (buf->owned)
        return tg_err(TG_ERR_ARG, "[%s] only buffers from tg_backend_buffer_from_host_ptr take placed tensors", call);
    if (!t) return tg_err(TG_ERR_ARG, "[%s] tensor is NULL", call);
    if (!tg_tensor_live(t))
        return tg_err(TG_ERR_ARG, "[%s] tensor %p is not live: its context was freed", call, (const void *)t);
    if (!tg_is_leaf(t))
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s' is a view or an op result: only leaves take storage", call,
                      t->name);
    tg_backend *owner;
    if (t->data && tg_check_storage(call, t, &owner) == TG_OK)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s' already has storage", call, t->name);
    const size_t nbytes = tg_nbytes(t);
    size_t end;
    if (__builtin_add_overflow(offset, nbytes, &end) || end > buf->size)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s' of %zu bytes at offset %zu ends past the buffer's %zu bytes",
                      call, t->name, nbytes, offset, buf->size);
    char *data = (char *)buf->base + offset;
    // element alignment, as the kernels' loads assume (a block type whose size
    // is not a power of two needs none beyond its parts', read bytewise)
    size_t align = tg_type_size(t->type);
    if (align & (align - 1)) align = 1;
    if ((uintptr_t)data % align != 0)
        return tg_err(TG_ERR_ARG, "[%s] tensor '%s' at offset %zu is not aligned to its %zu-byte elements", call,
                      t->name, offset, align);
    t->data = data;
    t->mem = buf->backend->mem;
    t->device = buf->backend->device;
    t->buffer_id = buf->id;
    tg_context *ctx = tg_tensor_context(t);
    for (tg_tensor *v : ctx->tensors)
        if (v->view_src && tg_tensor_live(v) && tg_view_root(v) == t) tg_resolve_view(v);
    return TG_OK;
}

bool tg_buffer_is_read_only(const tg_buffer *buf) { return buffer_live(buf) && buf->read_only; }

// Either order of tg_buffer_free and tg_backend_free is fine: the backend
// frees its buffers' storage when it goes first, and the handles stay (empty)
// until tg_buffer_free. A handle freed twice is ignored.
void tg_buffer_free(tg_buffer *buf) {
    {
        std::lock_guard<std::mutex> lock(g_handles_mu);
        if (!buf || !g_buffers.erase(buf)) return;
    }
    if (tg_backend *b = buf->backend) {
        b->buffers.erase(std::remove(b->buffers.begin(), b->buffers.end(), buf), b->buffers.end());
        buffer_release(buf);
    }
    delete buf;
}

size_t tg_buffer_size(const tg_buffer *buf) { return buffer_live(buf) ? buf->size : 0; }

tg_status tg_buffer_clear(tg_buffer *buf, uint8_t value) {
    if (!buf) return tg_err(TG_ERR_ARG, "[buffer_clear] buffer is NULL");
    if (!buffer_live(buf)) return tg_err(TG_ERR_ARG, "[buffer_clear] buffer %p was freed", (void *)buf);
    if (!buf->backend) return tg_err(TG_ERR_ARG, "[buffer_clear] the buffer's backend was freed (its storage with it)");
    if (buf->read_only)
        return tg_err(TG_ERR_ARG, "[buffer_clear] buffer %p is read-only memory (tg_backend_buffer_from_host_ptr)",
                      (void *)buf);
    return buf->backend->iface->memset(buf->backend, buf->base, value, buf->size);
}

// ---------------------------------------------------------------------------
// tensor set / get

static tg_status check_range(const char *call, const tg_tensor *t, size_t offset, size_t size, const void *data) {
    if (!t) return tg_err(TG_ERR_ARG, "[%s] tensor is NULL", call);
    if (!tg_tensor_live(t))
        return tg_err(TG_ERR_ARG, "[%s] tensor %p is not live: its context was freed", call, (const void *)t);
    if (!data && size) return tg_err(TG_ERR_ARG, "[%s] data pointer is NULL", call);
    if (!tg_is_contiguous(t)) return tg_err(TG_ERR_ARG, "[%s] tensor '%s' is not contiguous", call, t->name);
    size_t end;
    if (__builtin_add_overflow(offset, size, &end) || end > tg_nbytes(t))
        return tg_err(TG_ERR_ARG, "[%s] range [%zu, %zu + %zu) outside tensor '%s' of %zu bytes", call, offset, offset,
                      size, t->name, tg_nbytes(t));
    return TG_OK;
}

tg_status tg_tensor_set(tg_tensor *t, const void *data, size_t offset, size_t size) {
    tg_status s = check_range("tensor_set", t, offset, size, data);
    if (s != TG_OK) return s;
    tg_backend *owner;
    if ((s = tg_check_storage("tensor_set", t, &owner)) != TG_OK) return s;
    if (tg_storage_read_only(t))
        return tg_err(TG_ERR_ARG,
                      "[tensor_set] tensor '%s' is in read-only memory (a read-only buffer from "
                      "tg_backend_buffer_from_host_ptr, e.g. a mapped file)",
                      t->name);
    if (size == 0) return TG_OK;
    if (t->mem == TG_MEM_HOST) {
        memcpy((char *)t->data + offset, data, size);
        return TG_OK;
    }
    return owner->iface->set(owner, (char *)t->data + offset, data, size);
}

tg_status tg_tensor_get(const tg_tensor *t, void *data, size_t offset, size_t size) {
    tg_status s = check_range("tensor_get", t, offset, size, data);
    if (s != TG_OK) return s;
    tg_backend *owner;
    if ((s = tg_check_storage("tensor_get", t, &owner)) != TG_OK) return s;
    if (size == 0) return TG_OK;
    if (t->mem == TG_MEM_HOST) {
        memcpy(data, (const char *)t->data + offset, size);
        return TG_OK;
    }
    return owner->iface->get(owner, data, (const char *)t->data + offset, size);
}

// ---------------------------------------------------------------------------
// backends

void tg_backend_free(tg_backend *b) {
    if (!tg_backend_live(b)) return;  // NULL, or freed already
    tg_backend_register(b, false);
    for (tg_buffer *buf : b->buffers) buffer_release(buf);
    b->buffers.clear();
    if (b->compute_buf) {
        tg_registry_remove(b->compute_id);
        b->iface->dealloc(b, b->compute_buf);
    }
    b->iface->free(b);
}

const char *tg_backend_name(const tg_backend *b) { return tg_backend_live(b) ? b->name.c_str() : ""; }
bool tg_backend_is_host(const tg_backend *b) { return tg_backend_live(b) && b->mem == TG_MEM_HOST; }
size_t tg_backend_compute_buffer_size(const tg_backend *b) { return tg_backend_live(b) ? b->compute_size : 0; }

tg_status tg_backend_set_tf32(tg_backend *b, bool enabled) {
    if (tg_status s = tg_check_backend("backend_set_tf32", b)) return s;
    b->tf32 = enabled;
    return TG_OK;
}

tg_backend *tg_backend_cuda(int device) {
#ifdef TG_HAVE_CUDA
    return tg_backend_cuda_create(device);
#else
    (void)device;
    TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[backend_cuda] this build of tinygml has no CUDA backend (TG_CUDA=OFF)");
#endif
}

bool tg_cuda_available(void) {
#ifdef TG_HAVE_CUDA
    return tg_cuda_device_present();
#else
    return false;
#endif
}

tg_status tg_cpu_run_check(const tg_tensor *node) {
    tg_check_fn f = tg_op_get(node->op).cpu_check;
    return f ? f(node) : TG_OK;
}
