// ks::parts::split (ks/parts.h): how many parts a layer of `units` units and `macs` multiply-adds has on N threads:
// N or more, up to 4 per thread, two units each at least, and a multiple of N (near-equal parts end together).
// Compile-time checks: tests/test_threads.py compiles this file.
#define KS_KERNELS parts_test
#include <ks/parts.h>

namespace {

using ks::parts::split;
constexpr int64_t unit = ks::parts::part_macs;  // (the multiply-adds a part should have at least)

static_assert(split(2, 16, 3 * unit) == 2, "3 parts' work on 2 threads: 2 parts, not 3");
static_assert(split(2, 100, 5 * unit) == 4 && split(2, 100, 7 * unit) == 6, "a multiple of the threads");
static_assert(split(2, 100, 100 * unit) == 8, "at most 4 parts per thread");
static_assert(split(2, 100, unit) == 2, "a small layer: one part per thread");
static_assert(split(3, 100, 7 * unit) == 6 && split(3, 100, unit) == 3, "3 threads");
static_assert(split(2, 5, 100 * unit) == 2, "two units per part at least");
static_assert(split(2, 1, 100 * unit) == 1, "one unit: one part");

}  // namespace

int main() { return 0; }
