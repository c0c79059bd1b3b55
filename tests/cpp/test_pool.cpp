// ks::pool::run (ks/pool.h): every part runs exactly once and on a slot below the thread count, for 1 to 63 parts;
// with parts long enough that the calling thread sleeps for a worker's, pauses long enough that the workers sleep
// between jobs, and calls from three threads at once (the pool busy: a caller runs its parts alone).
#define KS_KERNELS pool_test
#include <ks/pool.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <thread>

namespace {

constexpr int most_parts = 64;

// Failures of `rounds` calls of `parts` parts on `threads` threads; each part spins part_us microseconds (or less)
// and the caller pauses pause_us between calls.
int check(int threads, int parts, int rounds, int part_us, int pause_us) {
    int bad = 0;
    for (int r = 0; r < rounds; ++r) {
        std::atomic<int> count[most_parts] = {};
        std::atomic<int> wrong_slot{0};
        ks::pool::run(threads, parts, [&](int part, int slot) {
            count[part].fetch_add(1);
            wrong_slot.fetch_add(slot < 0 || slot >= threads);
            if (part_us > 0) {
                usleep(static_cast<useconds_t>(part % 3 == 1 ? part_us : 0));
            }
        });
        for (int p = 0; p < most_parts; ++p) {
            bad += count[p].load() != (p < parts ? 1 : 0);
        }
        bad += wrong_slot.load();
        if (pause_us > 0) {
            usleep(static_cast<useconds_t>(pause_us));
        }
    }
    return bad;
}

}  // namespace

int main() {
    int bad = 0;
    for (int parts : {0, 1, 2, 3, 7, 8, 63}) {
        bad += check(3, parts, 200, 0, 0);
    }
    bad += check(3, 5, 50, 300, 0);    // (the calling thread sleeps while a worker's part runs)
    bad += check(3, 4, 50, 0, 400);    // (the workers sleep between jobs)
    bad += check(3, 7, 30, 200, 300);
    std::atomic<int> others{0};
    std::thread a([&] { others += check(3, 17, 1000, 0, 0); });
    std::thread b([&] { others += check(3, 5, 300, 50, 20); });
    bad += check(3, 9, 1000, 0, 0);
    a.join();
    b.join();
    bad += others.load();
    std::printf("%d failures\n", bad);
    return bad != 0;
}
