// ks/pool.h — the threads of `[build] threads = N` (N > 1): N - 1 workers that help the calling thread with the
// parts of one layer (ks/parts.h), started at the library's first call that has parts to share.
//
// Why not an OpenMP parallel region per layer: a region ends in a barrier that waits for every thread of its team,
// so on a machine busier than its cores a layer waits for a worker the system has not scheduled yet (the shared
// 2-core machine at load 11-14: MobileNetV2 at batch 1 took 1133 ms on 2 OpenMP threads against 69 ms on one).
// Here the parts are claimed one at a time from a shared counter: the calling thread takes the parts no worker
// has taken, and waits only for parts a worker has started, as onnxruntime's thread pool does. A layer has more
// parts than threads when it is big enough (ks/parts.h), so a worker that starts late leaves the calling thread one
// part to wait for at most.
//
// Waiting: a worker spins a short while for the next layer (a network's layers follow each other within
// microseconds), then sleeps; the calling thread, its own parts done, spins a short while for the parts a worker is
// running, then sleeps until the last one ends. Sleeping is a futex on Linux (a wake costs a system call only when
// someone sleeps), a condition variable elsewhere; the design of XNNPACK's pthreadpool and onnxruntime's pool
// (spin, then block), not their code. A sleeping thread uses no CPU time, so an idle pool does not take a core
// the machine's other work needs.
//
// Hosted targets only (POSIX threads; the library is then not runtime-free). Calls from several threads at once
// are safe: a caller that finds the pool busy runs its parts alone. No heap: the pool is one static object per
// library (ks::KS_KERNELS, hidden, local to each library: ks/namespace.h).
#ifndef KS_POOL_H
#define KS_POOL_H

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "namespace.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {
namespace pool {

// The claim word: generation (24 bits), parts (20 bits), next part to take (20 bits). One atomic word, so that a
// worker that read an old generation cannot take a part of the next job.
constexpr int parts_shift = 20, generation_shift = 40;
constexpr uint64_t field = (uint64_t(1) << 20) - 1;
constexpr uint32_t generations = (uint32_t(1) << 24) - 1;
// How long a thread spins before it sleeps, in nanoseconds: a worker for the next layer, the calling thread for the
// parts a worker is running. (By the clock: a pause instruction takes 3 ns on one x86 core and 150 ns on another,
// e.g. this machine's virtual Zen 3; a count of 2^10 pauses spun 0.2 ms here.)
constexpr int64_t worker_spin_ns = 30000, caller_spin_ns = 10000;

struct state {
    std::atomic<uint64_t> claim{0};
    std::atomic<uint32_t> posted{0};  // the generation of the last job posted (the workers sleep on it)
    std::atomic<uint32_t> left{0};    // parts of the current job not finished (the calling thread sleeps on it)
    std::atomic<int> sleepers{0};     // workers asleep (or about to be)
    std::atomic<int> caller_asleep{0};
    std::atomic<int> started{0};      // 0: no workers yet, 1: being started, 2: running
    std::atomic<bool> busy{false};    // a caller holds the pool
    void (*run)(const void*, int, int) = nullptr;
    const void* context = nullptr;
    int workers = 0;
#if !defined(__linux__)
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
#endif
};

inline state the_pool;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

inline int64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Spin until ready() or `ns` nanoseconds have passed (the clock read every 8 pauses); whether ready().
template <class Ready>
inline bool spin(int64_t ns, const Ready& ready) {
    const int64_t end = now_ns() + ns;
    for (int i = 1;; ++i) {
        if (ready()) {
            return true;
        }
        relax();
        if (i % 8 == 0 && now_ns() > end) {
            return ready();
        }
    }
}

// Sleep while `word` holds `value` (may return early: callers check again).
inline void sleep_while(state& s, std::atomic<uint32_t>& word, uint32_t value) {
#if defined(__linux__)
    (void)s;
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr, 0);
#else
    pthread_mutex_lock(&s.mutex);
    while (word.load(std::memory_order_seq_cst) == value) {
        pthread_cond_wait(&s.wake, &s.mutex);
    }
    pthread_mutex_unlock(&s.mutex);
#endif
}

// Wake every thread sleeping on `word` (which has changed).
inline void wake_all(state& s, std::atomic<uint32_t>& word) {
#if defined(__linux__)
    (void)s;
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
    (void)word;
    pthread_mutex_lock(&s.mutex);
    pthread_cond_broadcast(&s.wake);
    pthread_mutex_unlock(&s.mutex);
#endif
}

// Take and run the parts of generation g left (by any thread), as thread `slot`.
inline void help(state& s, uint64_t g, int slot) {
    uint64_t c = s.claim.load(std::memory_order_acquire);
    while ((c >> generation_shift) == g && (c & field) < ((c >> parts_shift) & field)) {
        if (s.claim.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
            s.run(s.context, static_cast<int>(c & field), slot);
            // (seq_cst with caller_asleep's load, against the calling thread's store and load of them)
            if (s.left.fetch_sub(1, std::memory_order_seq_cst) == 1 && s.caller_asleep.load(std::memory_order_seq_cst)) {
                wake_all(s, s.left);
            }
            c = s.claim.load(std::memory_order_acquire);
        }
    }
}

// The generation after `seen`, once posted: spinning a while, then asleep.
inline uint32_t next_job(state& s, uint32_t seen) {
    uint32_t g = seen;
    spin(worker_spin_ns, [&] { return (g = s.posted.load(std::memory_order_acquire)) != seen; });
    while (g == seen) {
        s.sleepers.fetch_add(1, std::memory_order_seq_cst);  // (then posted's load: against run's store and load)
        if (s.posted.load(std::memory_order_seq_cst) == seen) {
            sleep_while(s, s.posted, seen);
        }
        s.sleepers.fetch_sub(1, std::memory_order_seq_cst);
        g = s.posted.load(std::memory_order_acquire);
    }
    return g;
}

// A worker (thread `slot` of the parts, 1 to N - 1): wait for a new job, help with it, again.
inline void* work(void* slot) {
    state& s = the_pool;
    uint32_t seen = s.posted.load(std::memory_order_acquire);
    for (;;) {
        seen = next_job(s, seen);
        help(s, seen, static_cast<int>(reinterpret_cast<intptr_t>(slot)));
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
        if (pthread_create(&t, &attr, &work, reinterpret_cast<void*>(intptr_t(made + 1))) != 0) {
            break;
        }
    }
    pthread_attr_destroy(&attr);
    s.workers = made;
    s.started.store(2, std::memory_order_release);
    return made > 0;
}

// Until every part of the job is done: spinning a while, then asleep.
inline void wait_for_parts(state& s) {
    if (spin(caller_spin_ns, [&] { return s.left.load(std::memory_order_acquire) == 0; })) {
        return;
    }
    for (;;) {
        s.caller_asleep.store(1, std::memory_order_seq_cst);  // (then left's load: against help's)
        const uint32_t left = s.left.load(std::memory_order_seq_cst);
        if (left == 0) {
            break;
        }
        sleep_while(s, s.left, left);
    }
    s.caller_asleep.store(0, std::memory_order_relaxed);
}

// f(part, slot) for part in [0, parts), on the calling thread (slot 0) and the pool's workers (threads - 1 of them,
// slots 1 to threads - 1, started at the first call); `slot` tells a part whose scratch it may use. Returns when
// every part is done.
template <class F>
void run(int threads, int parts, const F& f) {
    state& s = the_pool;
    if (parts <= 1 || threads <= 1 || !ready(s, threads - 1) || s.busy.exchange(true, std::memory_order_acquire)) {
        for (int p = 0; p < parts; ++p) {
            f(p, 0);
        }
        return;
    }
    s.run = [](const void* context, int part, int slot) { (*static_cast<const F*>(context))(part, slot); };
    s.context = &f;
    s.left.store(static_cast<uint32_t>(parts), std::memory_order_relaxed);
    const uint32_t g = (s.posted.load(std::memory_order_relaxed) + 1) & generations;
    s.claim.store(uint64_t(g) << generation_shift | uint64_t(parts) << parts_shift, std::memory_order_release);
    s.posted.store(g, std::memory_order_seq_cst);
    if (s.sleepers.load(std::memory_order_seq_cst) > 0) {  // (a worker that went to sleep before the post)
        wake_all(s, s.posted);
    }
    help(s, g, 0);
    wait_for_parts(s);
    s.busy.store(false, std::memory_order_release);
}

}  // namespace pool
}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_POOL_H
