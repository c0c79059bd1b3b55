// ks::parts::split (ks/parts.h): how many parts a layer of `units` units and `macs` multiply-adds has on N threads:
// N or more, up to 4 per thread, two units each at least, and a multiple of N (near-equal parts end together); and
// where a product's parts by columns begin (product_range).
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

// Whether each part of an m x n product by columns begins where the kernels' column loop begins a block (tiles::
// panels_per_block panels): its tiles then group the panels as the whole product's do, each sum in the same order.
template <class T>
constexpr bool parts_begin_blocks(int64_t m, int64_t n, int parts) {
    for (int part = 0; part < parts; ++part) {
        const int64_t begin = ks::parts::product_range<T>(m, n, part, parts).begin;
        if (begin % (ks::tiles::panels_per_block * ks::panel_width<T>) != 0) {
            return false;
        }
    }
    return true;
}
static_assert(parts_begin_blocks<float>(2, 1001, 8) && parts_begin_blocks<double>(2, 1001, 8) &&
                  parts_begin_blocks<float>(1, 1024, 6),
              "a linear layer's parts: whole blocks of panels (on AVX2 a part from panel 7 differed in the last bit)");

}  // namespace

int main() { return 0; }
