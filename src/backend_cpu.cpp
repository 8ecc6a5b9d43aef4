// backend_cpu.cpp - the CPU backend: host memory and a small thread pool that
// splits each op's rows.
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <new>
#include <thread>

#include "graph.h"

namespace {
struct thread_pool {
    int n = 1;
    std::vector<std::thread> workers;
    std::mutex m;
    std::condition_variable start_cv, done_cv;
    uint64_t generation = 0;
    int pending = 0;
    bool stop = false;
    const std::function<void(int, int)> *job = nullptr;

    explicit thread_pool(int n_threads) : n(n_threads) {
        for (int i = 1; i < n; i++) workers.emplace_back([this, i] { loop(i); });
    }
    ~thread_pool() {
        {
            std::lock_guard<std::mutex> lock(m);
            stop = true;
        }
        start_cv.notify_all();
        for (auto &w : workers) w.join();
    }
    void loop(int ith) {
        uint64_t seen = 0;
        for (;;) {
            const std::function<void(int, int)> *j;
            {
                std::unique_lock<std::mutex> lock(m);
                start_cv.wait(lock, [&] { return stop || generation != seen; });
                if (stop) return;
                seen = generation;
                j = job;
            }
            (*j)(ith, n);
            std::lock_guard<std::mutex> lock(m);
            if (--pending == 0) done_cv.notify_one();
        }
    }
    // run f(ith, n) on every thread, the caller being thread 0
    void run(const std::function<void(int, int)> &f) {
        if (n == 1) {
            f(0, 1);
            return;
        }
        {
            std::lock_guard<std::mutex> lock(m);
            job = &f;
            pending = n - 1;
            generation++;
        }
        start_cv.notify_all();
        f(0, n);
        std::unique_lock<std::mutex> lock(m);
        done_cv.wait(lock, [&] { return pending == 0; });
    }
};

struct cpu_impl {
    thread_pool pool;
    explicit cpu_impl(int n) : pool(n) {}
};

void cpu_free(tg_backend *b) {
    delete (cpu_impl *)b->impl;
    delete b;
}
tg_status cpu_alloc(tg_backend *b, size_t size, void **ptr) {
    size = (size + 63) / 64 * 64;
    *ptr = std::aligned_alloc(64, size);
    if (!*ptr) return tg_err(TG_ERR_OOM, "[cpu] cannot allocate %zu bytes of host memory", size);
    return TG_OK;
}
void cpu_dealloc(tg_backend *b, void *ptr) { std::free(ptr); }
tg_status cpu_memset(tg_backend *b, void *ptr, int value, size_t size) {
    memset(ptr, value, size);
    return TG_OK;
}
tg_status cpu_copy(tg_backend *b, void *dst, const void *src, size_t size) {
    memcpy(dst, src, size);
    return TG_OK;
}

tg_status cpu_compute(tg_backend *b, const std::vector<tg_tensor *> &nodes) {
    auto *impl = (cpu_impl *)b->impl;
    // checks whose inputs are persistent (t->precheck) run before anything is
    // written, so a bad position or id leaves every cache and output as it
    // was; the others run right before their op, on the values it will read
    for (const tg_tensor *t : nodes)
        if (t->precheck) {
            tg_status s = tg_cpu_run_check(t);
            if (s != TG_OK) return s;
        }
    for (const tg_tensor *t : nodes) {
        const tg_op_info &op = tg_op_get(t->op);
        if (t->op == TG_OP_VIEW) continue;
        if (!t->precheck) {
            tg_status s = tg_cpu_run_check(t);
            if (s != TG_OK) return s;
        }
        std::function<void(int, int)> f = [&](int ith, int nth) { op.cpu(t, ith, nth); };
        impl->pool.run(f);
    }
    return TG_OK;
}

const tg_backend_iface k_cpu_iface = {cpu_free, cpu_alloc, cpu_dealloc, cpu_memset, cpu_copy, cpu_copy, cpu_compute};
}  // namespace

tg_backend *tg_backend_cpu(int n_threads) {
    if (n_threads <= 0) n_threads = (int)std::thread::hardware_concurrency();
    if (n_threads <= 0) n_threads = 1;
    if (n_threads > 256) TG_FAIL_NULL(TG_ERR_ARG, "[backend_cpu] n_threads %d is above 256", n_threads);
    tg_backend *b = new (std::nothrow) tg_backend();
    if (!b) TG_FAIL_NULL(TG_ERR_OOM, "[backend_cpu] out of host memory");
    try {
        b->impl = new cpu_impl(n_threads);
    } catch (...) {
        delete b;
        TG_FAIL_NULL(TG_ERR_OOM, "[backend_cpu] cannot start %d threads", n_threads);
    }
    b->iface = &k_cpu_iface;
    b->mem = TG_MEM_HOST;
    b->device = -1;
    b->name = "cpu";
    tg_backend_register(b, true);
    return b;
}
