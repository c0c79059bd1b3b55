// tests/test_qtile_m4.py: the integer kernels' DSP paths (SMLAD, ks/qconv.h's KS_QTILE_DSP) on QEMU's mps2-an386
// (a Cortex-M4), against the portable loops of the same file and against plain int32 sums computed here. Prints one
// line per case ("case <name> <mismatches>") and, for the test to compare with numpy, the requantized bytes of a few
// products ("bytes <name> <b0> <b1> ...").
#include <cstdint>
#include <cstdio>

#include "ks/qconv.h"

namespace {

uint32_t state = 12345u;

uint32_t next() {  // (a fixed linear congruential sequence: numpy's side reads the bytes printed, not the seed)
    state = state * 1664525u + 1013904223u;
    return state >> 8;
}

alignas(64) uint8_t a_buf[64 * 8 * 4];
alignas(64) uint8_t b_buf[64 * 32 * 4];
alignas(64) int32_t acc_dsp[8 * 32];
alignas(64) int32_t acc_ref[8 * 32];
alignas(64) uint8_t y_dsp[8 * 32];
alignas(64) uint8_t y_ref[8 * 32];
int32_t offsets[32];
float scales[32];

// One tile of q quads with `live` rows and `count` columns through tile_dsp and tile_portable, and the raw sums
// against a plain loop over the packed bytes; returns the number of mismatching values.
template <bool SWAP>
int tile_case(int64_t q, int64_t live, int64_t count, bool extremes) {
    using namespace ks::qtile;
    for (int64_t i = 0; i < q * rows * 4; ++i) {
        a_buf[i] = static_cast<uint8_t>(extremes ? (SWAP ? 255 : 0x80) : next());
    }
    for (int64_t i = 0; i < q * cols * 4; ++i) {
        b_buf[i] = static_cast<uint8_t>(extremes ? (SWAP ? 0x80 : 255) : next());
    }
    for (int i = 0; i < 32; ++i) {
        offsets[i] = static_cast<int32_t>(next() % 2001) - 1000;
        scales[i] = 1.0f / static_cast<float>(64 + next() % 4096);
    }
    tile_out o{offsets, scales, true, false, -128.0f, 127.0f, 128, y_dsp, 32, live, count, acc_dsp};
    tile_out r = o;
    r.y = y_ref;
    r.acc = acc_ref;
#ifdef KS_QTILE_DSP
    tile_dsp<SWAP>(a_buf, b_buf, q, o);
#else
    tile_portable<SWAP>(a_buf, b_buf, q, o);
#endif
    tile_portable<SWAP>(a_buf, b_buf, q, r);
    int bad = 0;
    for (int64_t i = 0; i < live; ++i) {
        for (int64_t j = 0; j < count; ++j) {
            int32_t sum = 0;
            for (int64_t k = 0; k < q * 4; ++k) {
                const uint8_t x = a_buf[(k / 4) * rows * 4 + i * 4 + k % 4], w = b_buf[(k / 4) * cols * 4 + j * 4 + k % 4];
                sum += SWAP ? static_cast<int32_t>(x) * static_cast<int8_t>(w)
                            : static_cast<int8_t>(x) * static_cast<int32_t>(w);
            }
            bad += acc_dsp[i * 32 + j] != sum || acc_ref[i * 32 + j] != sum || y_dsp[i * 32 + j] != y_ref[i * 32 + j];
        }
    }
    return bad;
}

}  // namespace

int main() {
#ifdef KS_QTILE_DSP
    std::printf("dsp 1\n");
#else
    std::printf("dsp 0\n");
#endif
    int failed = 0;
    const int64_t depths[] = {1, 2, 3, 16, 49}, counts[] = {1, 3, 10, 29, 32};
    for (int64_t q : depths) {
        for (int64_t live = 1; live <= 8; live += 3) {
            for (int64_t count : counts) {
                const int bad = tile_case<false>(q, live, count, false) + tile_case<true>(q, live, count, false);
                failed += bad != 0;
                std::printf("case tile q%d r%d c%d %d\n", static_cast<int>(q), static_cast<int>(live),
                            static_cast<int>(count), bad);
            }
        }
    }
    // the largest products: 255 · -128 in every lane, a depth of 64 quads (sums near -2^23)
    const int bad = tile_case<false>(64, 8, 32, true) + tile_case<true>(64, 8, 32, true);
    failed += bad != 0;
    std::printf("case tile extremes %d\n", bad);
    std::printf("failed %d\n", failed);
    return failed;
}
