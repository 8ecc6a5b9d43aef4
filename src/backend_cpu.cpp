// backend_cpu.cpp - the CPU backend: host memory and a small thread pool that
// splits each op's rows.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu_fast/cpu_fast.h"
#include "graph.h"

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// Pauses a waiting thread spins before it starts yielding the core on every
// further try (~1.5 us at ~11 ns a pause; a yield with nothing else to run
// returns in ~0.2 us, so spinning on with yields costs little). Short on
// purpose: when the scheduler has put two of the pool's threads on one core
// (a process just started, or a busy machine), the thread being waited for
// runs only once the waiter yields, and every parallel node paid the whole
// spin: 2048 and 4096 pauses made a 0.26M model's 64-token prompt 3.3 ms
// instead of 0.75 ms under `taskset -c 0` (bench/README.md, 2026-12-03).
constexpr int k_pause_spins = 128;

// Spin on cond(): pause k_pause_spins times, then yield the core on every
// further try, so that more threads than cores (or a busy machine) still
// make progress.
template <typename C> inline void spin_wait(C cond) {
    for (int i = 0; !cond(); i++) {
        if (i < k_pause_spins)
            cpu_relax();
        else
            std::this_thread::yield();
    }
}

// How long an idle worker spins (then yields) before it sleeps: longer than
// a decode loop's host work between two graphs.
constexpr int64_t k_spin_ns = 2000000;

// A persistent pool: the caller is thread 0, workers 1..n-1 wait for the next
// job by spinning on a generation counter for a while, then sleep on a
// condition variable. A job is a node: a plain function pointer and the
// tensor, no allocation per node. Threads of a node meet at a spin barrier
// (sync()) and claim chunks of work from one atomic counter.
struct thread_pool {
    int n = 1;
    std::vector<std::thread> workers;

    // the job, written by thread 0 before gen is bumped (release), read after
    const tg_tensor *node = nullptr;
    tg_cpu_fn ref = nullptr;
    void (*fast)(const tg_tensor *, const tg_cpu_ctx &) = nullptr;
    void *work = nullptr;
    size_t work_cap = 0;
    alignas(64) std::atomic<int64_t> next{0};

    alignas(64) std::atomic<uint64_t> gen{0};
    alignas(64) std::atomic<int> done{0};
    alignas(64) std::atomic<int> bar_count{0};
    std::atomic<unsigned> bar_phase{0};
    alignas(64) std::atomic<int> sleeping{0};
    std::atomic<uint64_t> wake_gen{0};
    std::atomic<bool> stop{false};
    std::mutex m;
    std::condition_variable cv;

    explicit thread_pool(int n_threads) : n(n_threads) {
        workers.reserve((size_t)n);
        for (int i = 1; i < n; i++) workers.emplace_back([this, i] { loop(i); });
    }
    ~thread_pool() {
        stop.store(true);
        {
            std::lock_guard<std::mutex> lock(m);
        }
        cv.notify_all();
        for (auto &w : workers) w.join();
        std::free(work);
    }
    static void barrier(void *p) {
        auto *pool = (thread_pool *)p;
        const unsigned phase = pool->bar_phase.load(std::memory_order_acquire);
        if (pool->bar_count.fetch_add(1, std::memory_order_acq_rel) == pool->n - 1) {
            pool->bar_count.store(0, std::memory_order_relaxed);
            pool->bar_phase.fetch_add(1, std::memory_order_acq_rel);
        } else {
            spin_wait([&] { return pool->bar_phase.load(std::memory_order_acquire) != phase; });
        }
    }
    // A reference kernel's work space that does not fit (std::bad_alloc) is
    // an error of the node, never an exception out of a worker thread or
    // through the C API. (Fast kernels take their scratch from reserve()
    // and do not allocate.)
    std::atomic<bool> failed{false};
    void work_on(int ith) {
        try {
            if (fast) {
                const tg_cpu_ctx c = {ith, n, work, &next, barrier, this};
                fast(node, c);
            } else {
                ref(node, ith, n);
            }
        } catch (...) {
            failed.store(true);
        }
    }
    void loop(int ith) {
        uint64_t seen = 0;
        for (;;) {
            // spin for the next node up to k_spin_ns (a decode loop's host
            // work between graphs, sampling say, is shorter: the workers stay
            // awake), then sleep until a job, the stop or a wake()
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; gen.load(std::memory_order_acquire) == seen && !stop.load(); i++) {
                // pause first, then yield: on a machine with more runnable
                // threads than cores a spinning worker must not hold a core
                // the caller (or another process) is waiting for
                if (i < k_pause_spins)
                    cpu_relax();
                else
                    std::this_thread::yield();
                if ((i & 63) == 63 && std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(k_spin_ns)) break;
            }
            if (gen.load(std::memory_order_acquire) == seen && !stop.load()) {
                std::unique_lock<std::mutex> lock(m);
                sleeping.fetch_add(1);
                const uint64_t w = wake_gen.load();
                cv.wait(lock, [&] { return stop.load() || gen.load() != seen || wake_gen.load() != w; });
                sleeping.fetch_sub(1);
                if (!stop.load() && gen.load(std::memory_order_acquire) == seen) continue;  // woken ahead of a job
            }
            if (stop.load()) return;
            seen = gen.load(std::memory_order_acquire);
            work_on(ith);
            done.fetch_add(1, std::memory_order_acq_rel);
        }
    }
    // A group of mul_mat nodes (tg_mul_mat_group_ok) as one job on every thread.
    static constexpr size_t k_group_max = 8;
    tg_tensor *const *group = nullptr;
    int group_n = 0;
    static void group_fn(const tg_tensor *, const tg_cpu_ctx &c) {
        auto *pool = (thread_pool *)c.pool;
        tg_mul_mat_group_run(pool->group, pool->group_n, c);
    }
    void run_group(tg_tensor *const *nodes, int count) {
        group = nodes;
        group_n = count;
        run(nodes[0], nullptr, group_fn, false);
    }
    // Sleeping workers start spinning again (a graph is about to run: the
    // wake-up latency, tens of microseconds, overlaps the caller's checks
    // and first nodes instead of delaying the first parallel node).
    void wake() {
        if (sleeping.load() == 0) return;
        {
            std::lock_guard<std::mutex> lock(m);
            wake_gen.fetch_add(1);
        }
        cv.notify_all();
    }
    // Scratch of at least size bytes (grown, never shrunk); false when it
    // cannot be allocated.
    bool reserve(size_t size) {
        if (size <= work_cap) return true;
        size_t cap = (size + 4095) / 4096 * 4096;
        void *p = std::aligned_alloc(64, cap);
        if (!p) return false;
        std::free(work);
        work = p;
        work_cap = cap;
        return true;
    }
    // run the node on every thread (the caller being thread 0), or on the
    // caller alone when single
    void run(const tg_tensor *t, tg_cpu_fn ref_fn, void (*fast_fn)(const tg_tensor *, const tg_cpu_ctx &),
             bool single) {
        node = t;
        ref = ref_fn;
        fast = fast_fn;
        next.store(0, std::memory_order_relaxed);
        if (n == 1 || single) {
            try {  // as in work_on: a std::bad_alloc of a reference kernel is the node's error
                if (fast) {
                    const tg_cpu_ctx c = {0, 1, work, &next, barrier, this};
                    fast(node, c);
                } else {
                    ref(node, 0, 1);
                }
            } catch (...) {
                failed.store(true);
            }
            return;
        }
        done.store(0, std::memory_order_relaxed);
        gen.fetch_add(1);  // seq_cst: ordered against the workers' sleeping count
        if (sleeping.load() > 0) {
            { std::lock_guard<std::mutex> lock(m); }
            cv.notify_all();
        }
        work_on(0);
        spin_wait([&] { return done.load(std::memory_order_acquire) == n - 1; });
    }
};

// Rough work of a node (the op's fast path says, else elements of the result
// and of its first source): below k_small_work one thread runs it, as waking
// the others would cost more.
double node_work(const tg_tensor *t, const tg_cpu_fast *fast) {
    if (fast && fast->work) return fast->work(t);
    return (double)tg_nelements(t) + (t->src[0] ? (double)tg_nelements(t->src[0]) : 0.0);
}
constexpr double k_small_work = 32768;

struct cpu_impl {
    thread_pool pool;
    bool use_fast = true;
    explicit cpu_impl(int n) : pool(n) {}
};

void cpu_free(tg_backend *b) {
    delete (cpu_impl *)b->impl;
    delete b;
}
// Buffers of 4 MiB or more (weights read from a file, caches, states) are
// 2 MiB-aligned and asked for transparent huge pages (Linux, where THP is in
// "madvise" mode or "always"): a decode step streams every weight once, and
// with 4 KiB pages each page is a new TLB miss and a restart of the
// hardware prefetchers (bench/NOTES.md, "huge pages"). Advice only: when
// the kernel has no huge page to give, the buffer is ordinary memory.
constexpr size_t k_huge = (size_t)2 << 20;
tg_status cpu_alloc(tg_backend *b, size_t size, void **ptr) {
    size = (size + 63) / 64 * 64;
    const bool huge = size >= 2 * k_huge;
    if (huge) size = (size + k_huge - 1) / k_huge * k_huge;
    *ptr = std::aligned_alloc(huge ? k_huge : 64, size);
    if (!*ptr) return tg_err(TG_ERR_OOM, "[cpu] cannot allocate %zu bytes of host memory", size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) (void)madvise(*ptr, size, MADV_HUGEPAGE);
#endif
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
    // wake sleeping workers now when some node will need them (a graph of
    // small nodes only, a tiny model's decode step, leaves them asleep: a
    // worker spinning beside thread 0 on one core would only slow it)
    if (impl->pool.n > 1)
        for (const tg_tensor *t : nodes)
            if (t->op != TG_OP_VIEW && node_work(t, tg_op_get(t->op).cpu_fast) >= k_small_work) {
                impl->pool.wake();
                break;
            }
    // checks whose inputs are persistent (t->precheck) run before anything is
    // written, so a bad position or id leaves every cache and output as it
    // was; the others run right before their op, on the values it will read
    for (const tg_tensor *t : nodes)
        if (t->precheck) {
            tg_status s = tg_cpu_run_check(t);
            if (s != TG_OK) return s;
        }
    for (size_t i = 0; i < nodes.size(); i++) {
        const tg_tensor *t = nodes[i];
        const tg_op_info &op = tg_op_get(t->op);
        if (t->op == TG_OP_VIEW) continue;
        // matrix-vector products of one activation back to back (q, k, v;
        // gate, up) run as one job: one wake-up and one wait instead of one
        // per product, and the threads' row blocks run on from one matrix
        // into the next. Views between them (a reshape of q before k's
        // product) compute nothing and are stepped over.
        size_t j = i + 1;
        tg_tensor *members[thread_pool::k_group_max] = {nodes[i]};
        int count = 1;
        double group_work = 0.0;
        if (impl->use_fast && impl->pool.n > 1 && tg_mul_mat_group_ok(t, t)) {
            group_work = node_work(t, op.cpu_fast);
            for (size_t k = j; k < nodes.size() && count < (int)thread_pool::k_group_max; k++) {
                if (nodes[k]->op == TG_OP_VIEW) continue;
                if (!tg_mul_mat_group_ok(t, nodes[k])) break;
                group_work += node_work(nodes[k], op.cpu_fast);
                members[count++] = nodes[k];
                j = k + 1;
            }
        }
        if (count >= 2 && group_work >= k_small_work &&  // small products stay on one thread each, as alone
            impl->pool.reserve(tg_mul_mat_group_work(members[0], impl->pool.n))) {
            for (int g = 0; g < count; g++)
                if (!members[g]->precheck) {
                    tg_status s = tg_cpu_run_check(members[g]);
                    if (s != TG_OK) return s;
                }
            impl->pool.run_group(members, count);
            i = j - 1;
            continue;
        }
        if (!t->precheck) {
            tg_status s = tg_cpu_run_check(t);
            if (s != TG_OK) return s;
        }
        // the fast path when the op has one for this layout and its scratch exists
        const tg_cpu_fast *fast = impl->use_fast ? op.cpu_fast : nullptr;
        const bool single = node_work(t, op.cpu_fast) < k_small_work;
        const int64_t ws = fast ? fast->plan(t, single ? 1 : impl->pool.n) : -1;
        if (ws >= 0 && impl->pool.reserve((size_t)ws))
            impl->pool.run(t, op.cpu, fast->run, single);
        else
            impl->pool.run(t, op.cpu, nullptr, single);
        if (impl->pool.failed.exchange(false))
            return tg_err(TG_ERR_OOM, "[%s] out of host memory for the kernel's work space (result %s)", op.name,
                          tg_shape_str(t).c_str());
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

void tg_backend_cpu_set_fast(tg_backend *be, bool on) {
    if (be && be->iface == &k_cpu_iface) ((cpu_impl *)be->impl)->use_fast = on;
}
