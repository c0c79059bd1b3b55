// ks/pool.h — the threads of `[build] threads = N` (N > 1): N - 1 workers that help the calling thread with the
// parts of one layer (ks/parts.h), started at the library's first call that has parts to share.
//
// Why not an OpenMP parallel region per layer: a region ends in a barrier that waits for every thread of its team,
// so on a machine busier than its cores a layer waits for a worker the system has not scheduled yet (the shared
// 2-core machine at load 11-14: MobileNetV2 at batch 1 took 1133 ms on 2 OpenMP threads against 69 ms on one).
// Here the parts are claimed one at a time from a shared counter: the calling thread takes the parts no worker
// has taken, and waits only for parts a worker has started, as onnxruntime's thread pool does. A worker spins a
// while for the next layer (a network's layers follow each other within microseconds), then sleeps.
//
// Hosted targets only (POSIX threads; the library is then not runtime-free). Calls from several threads at once
// are safe: a caller that finds the pool busy runs its parts alone. No heap: the pool is one static object per
// library (ks::KS_PACKAGE, each library's own namespace).
#ifndef KS_POOL_H
#define KS_POOL_H

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>

namespace ks {
inline namespace KS_PACKAGE {
namespace pool {

// The claim word: generation (24 bits), parts (20 bits), next part to take (20 bits). One atomic word, so that a
// worker that read an old generation cannot take a part of the next job.
constexpr int parts_shift = 20, generation_shift = 40;
constexpr uint64_t field = (uint64_t(1) << 20) - 1;
constexpr int spins = 1 << 10;  // (about 20-50 µs of pause instructions before a worker sleeps)

struct state {
    std::atomic<uint64_t> claim{0};
    std::atomic<int> done{0};          // parts of the current job finished
    std::atomic<uint32_t> posted{0};   // the generation of the last job posted
    std::atomic<int> sleepers{0};      // workers waiting on `wake`
    std::atomic<int> started{0};       // 0: no workers yet, 1: being started, 2: running
    std::atomic<bool> busy{false};     // a caller holds the pool
    void (*run)(const void*, int) = nullptr;
    const void* context = nullptr;
    int workers = 0;
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
};

inline state the_pool;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// Take and run the parts of generation g left (by any thread).
inline void help(state& s, uint64_t g) {
    uint64_t c = s.claim.load(std::memory_order_acquire);
    while ((c >> generation_shift) == g && (c & field) < ((c >> parts_shift) & field)) {
        if (s.claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
            s.run(s.context, static_cast<int>(c & field));
            s.done.fetch_add(1, std::memory_order_acq_rel);
            c = s.claim.load(std::memory_order_acquire);
        }
    }
}

// A worker: wait for a new job (spinning, then asleep), help with it, again.
inline void* work(void*) {
    state& s = the_pool;
    uint32_t seen = s.posted.load(std::memory_order_acquire);
    for (;;) {
        uint32_t g = s.posted.load(std::memory_order_acquire);
        for (int i = 0; g == seen && i < spins; ++i) {
            relax();
            g = s.posted.load(std::memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&s.mutex);
            s.sleepers.fetch_add(1, std::memory_order_seq_cst);  // (then posted read: seq_cst against run's order)
            while ((g = s.posted.load(std::memory_order_seq_cst)) == seen) {
                pthread_cond_wait(&s.wake, &s.mutex);
            }
            s.sleepers.fetch_sub(1, std::memory_order_acq_rel);
            pthread_mutex_unlock(&s.mutex);
        }
        seen = g;
        help(s, g & ((uint32_t(1) << 24) - 1));
    }
    return nullptr;
}

// Start `count` workers once (the first caller; a caller meanwhile runs its parts alone). Whether they run.
inline bool ready(state& s, int count) {
    int stage = s.started.load(std::memory_order_acquire);
    if (stage == 2) {
        return s.workers > 0;
    }
    if (stage != 0 || !s.started.compare_exchange_strong(stage, 1, std::memory_order_acq_rel)) {
        return false;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int made = 0;
    for (; made < count; ++made) {
        pthread_t t;
        if (pthread_create(&t, &attr, &work, nullptr) != 0) {
            break;
        }
    }
    pthread_attr_destroy(&attr);
    s.workers = made;
    s.started.store(2, std::memory_order_release);
    return made > 0;
}

// f(part) for part in [0, parts), on the calling thread and the pool's workers (threads - 1 of them, started at
// the first call). Returns when every part is done.
template <class F>
void run(int threads, int parts, const F& f) {
    state& s = the_pool;
    if (parts <= 1 || threads <= 1 || !ready(s, threads - 1) || s.busy.exchange(true, std::memory_order_acquire)) {
        for (int p = 0; p < parts; ++p) {
            f(p);
        }
        return;
    }
    s.run = [](const void* context, int part) { (*static_cast<const F*>(context))(part); };
    s.context = &f;
    s.done.store(0, std::memory_order_relaxed);
    const uint32_t g = (s.posted.load(std::memory_order_relaxed) + 1) & ((uint32_t(1) << 24) - 1);
    s.claim.store(uint64_t(g) << generation_shift | uint64_t(parts) << parts_shift, std::memory_order_release);
    s.posted.store(g, std::memory_order_seq_cst);
    if (s.sleepers.load(std::memory_order_seq_cst) > 0) {  // (a worker that went to sleep before the post)
        pthread_mutex_lock(&s.mutex);
        pthread_cond_broadcast(&s.wake);
        pthread_mutex_unlock(&s.mutex);
    }
    help(s, g);
    for (int i = 0; s.done.load(std::memory_order_acquire) < parts; ++i) {  // (parts a worker is running)
        if (i < spins) {
            relax();
        } else {
            sched_yield();
        }
    }
    s.busy.store(false, std::memory_order_release);
}

}  // namespace pool
}  // inline namespace KS_PACKAGE
}  // namespace ks

#endif  // KS_POOL_H
