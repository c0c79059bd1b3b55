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
    const int64_t width = b_width<SWAP>();  // (a product's b: ks::qtile::product_cols columns, 4 on a microcontroller)
    count = count < width ? count : width;
    for (int64_t i = 0; i < q * rows * 4; ++i) {
        a_buf[i] = static_cast<uint8_t>(extremes ? (SWAP ? 255 : 0x80) : next());
    }
    for (int64_t i = 0; i < q * width * 4; ++i) {
        b_buf[i] = static_cast<uint8_t>(extremes ? (SWAP ? 0x80 : 255) : next());
    }
    for (int i = 0; i < 32; ++i) {
        offsets[i] = static_cast<int32_t>(next() % 2001) - 1000;
        scales[i] = 1.0f / static_cast<float>(64 + next() % 4096);
    }
    tile_out o{offsets, scales, true, false, -128.0f, 127.0f, 128, y_dsp, 32, ks::conv_dim(live), ks::conv_dim(count),
               acc_dsp, false};
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
                const uint8_t x = a_buf[(k / 4) * rows * 4 + i * 4 + k % 4];
                const uint8_t w = b_buf[(k / 4) * width * 4 + j * 4 + k % 4];
                sum += SWAP ? static_cast<int32_t>(x) * static_cast<int8_t>(w)
                            : static_cast<int8_t>(x) * static_cast<int32_t>(w);
            }
            bad += acc_dsp[i * 32 + j] != sum || acc_ref[i * 32 + j] != sum || y_dsp[i * 32 + j] != y_ref[i * 32 + j];
        }
    }
    return bad;
}

alignas(64) uint8_t x_buf[4 * 20 * 20];
alignas(64) int8_t w_buf[8 * 81];
alignas(64) uint8_t y_got[8 * 20 * 20];
alignas(64) uint8_t scratch[64 * 1024];
int32_t bias[8];

// A 2-d convolution's shape: c channels to m_n in `groups` groups, an h × w image, a kh × kw kernel.
ks::conv_shape shape_2d(int64_t c, int64_t m_n, int64_t groups, int64_t h, int64_t w, int64_t kh, int64_t kw,
                        int64_t stride, int64_t pad, int64_t dilation) {
    ks::conv_shape s{};
    s.channels = c;
    s.out_channels = m_n;
    s.groups = groups;
    const int64_t in[3] = {1, h, w}, kernel[3] = {1, kh, kw};
    for (int a = 0; a < 3; ++a) {
        s.in[a] = in[a];
        s.kernel[a] = kernel[a];
        s.stride[a] = a == 0 ? 1 : stride;
        s.dilation[a] = a == 0 ? 1 : dilation;
        s.pad[a] = a == 0 ? 0 : pad;
        s.out[a] = (in[a] + 2 * s.pad[a] - (kernel[a] - 1) * s.dilation[a] - 1) / s.stride[a] + 1;
    }
    return s;
}

// n random activations in x_buf, k weights in w_buf, biases and scales of m_n channels; the requantization with a
// random zero point of TX.
template <class TX>
ks::requant random_operands(int64_t n, int64_t k, int64_t m_n) {
    for (int64_t i = 0; i < n; ++i) {
        x_buf[i] = static_cast<uint8_t>(next());
    }
    for (int64_t i = 0; i < k; ++i) {
        w_buf[i] = static_cast<int8_t>(next());
    }
    for (int64_t i = 0; i < m_n; ++i) {
        bias[i] = static_cast<int32_t>(next() % 4001) - 2000;
        scales[i] = 1.0f / static_cast<float>(256 + next() % 8192);
    }
    const int32_t x_zero = static_cast<int32_t>(static_cast<TX>(next()));
    return ks::requant{bias, scales, ks::conv_dim(m_n), x_zero, 3, 0, 255};  // (sizes: int32 on a 32-bit core)
}

// A 2-d depthwise convolution (C channels, multiplier mult) through ks::qconv_depthwise (on a DSP core: SMLAD sums
// of taps in pairs, qtile::depthwise_sums_dsp) against int32 sums computed here, requantized by the same
// qtile::requantize; returns the number of mismatching outputs.
template <class TX>
int depthwise_case(int64_t c, int64_t mult, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
                   int64_t dilation) {
    const ks::conv_shape s = shape_2d(c, c * mult, c, h, w, kh, kw, stride, pad, dilation);
    const int64_t taps = kh * kw, p = s.positions(), m_n = c * mult;
    const ks::requant q = random_operands<TX>(c * h * w, m_n * taps, m_n);
    const int32_t x_zero = q.x_zero;
    const TX* x = reinterpret_cast<const TX*>(x_buf);
    ks::qconv_depthwise<TX, uint8_t>(s, 1, x, w_buf, y_got, scratch, q);
    int bad = 0;
    for (int64_t m = 0; m < m_n; ++m) {
        for (int64_t oh = 0; oh < s.out[1]; ++oh) {
            for (int64_t ow = 0; ow < s.out[2]; ++ow) {
                int32_t sum = bias[m];
                for (int64_t i = 0; i < kh; ++i) {
                    for (int64_t j = 0; j < kw; ++j) {
                        const int64_t r = oh * stride + i * dilation - pad, col = ow * stride + j * dilation - pad;
                        const bool inside = r >= 0 && r < h && col >= 0 && col < w;
                        const int32_t v = inside ? static_cast<int32_t>(x[(m / mult * h + r) * w + col]) : x_zero;
                        sum += (v - x_zero) * w_buf[m * taps + i * kw + j];
                    }
                }
                const int32_t want = ks::qtile::requantize(sum, scales[m], -3.0f, 252.0f, 3);
                bad += y_got[m * p + oh * s.out[2] + ow] != static_cast<uint8_t>(want);
            }
        }
    }
    return bad;
}

alignas(64) uint8_t packed_buf[4096];

// A dense 2-d convolution of 2 images (C to M channels) through ks::qconv (at -Os on a microcontroller: the blocks
// gathered from the image, qtile::gather_block; else the phase volumes) against int32 sums computed here.
template <class TX>
int dense_case(int64_t c, int64_t m_n, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t stride, int64_t pad,
               int64_t dilation) {
    const ks::conv_shape s = shape_2d(c, m_n, 1, h, w, kh, kw, stride, pad, dilation);
    const int64_t taps = kh * kw, p = s.positions();
    const ks::requant q = random_operands<TX>(2 * c * h * w, m_n * c * taps, m_n);
    const int32_t x_zero = q.x_zero;
    const TX* x = reinterpret_cast<const TX*>(x_buf);
    ks::qpack_rows(m_n, s.depth(), 1, w_buf, packed_buf);
    ks::qconv<TX, uint8_t>(s, 2, x, packed_buf, y_got, scratch, q);
    int bad = 0;
    for (int64_t n = 0; n < 2; ++n) {
        for (int64_t m = 0; m < m_n; ++m) {
            for (int64_t j = 0; j < p; ++j) {
                const int64_t oh = j / s.out[2], ow = j % s.out[2];
                int32_t sum = bias[m];
                for (int64_t k = 0; k < c * taps; ++k) {
                    const int64_t i = k % taps / kw, jj = k % kw;
                    const int64_t r = oh * stride + i * dilation - pad, col = ow * stride + jj * dilation - pad;
                    const bool inside = r >= 0 && r < h && col >= 0 && col < w;
                    const int32_t v = inside ? static_cast<int32_t>(x[((n * c + k / taps) * h + r) * w + col]) : x_zero;
                    sum += (v - x_zero) * w_buf[m * c * taps + k];
                }
                const int32_t want = ks::qtile::requantize(sum, scales[m], -3.0f, 252.0f, 3);
                bad += y_got[(n * m_n + m) * p + j] != static_cast<uint8_t>(want);
            }
        }
    }
    return bad;
}

// A product of `count` rows (lda apart: depth + 3) by n columns through ks::qmatmul_folded (rows read in place, 4
// columns of packed weights at a time; depths not a multiple of 4 end in a partial word, n not a multiple of 4 in a
// partial tile), against int32 sums computed here with the folded kernel's meaning: the bias plus Σ u(x)·w, u(x) the
// activation as the tiles read it (an int8 one + 128). Requantized per column (one scale for all when one_scale) to
// uint8, or the sums as int32 (MatMulInteger's form); returns the number of mismatching outputs.
template <class TX>
int product_case(int64_t count, int64_t depth, int64_t n, bool one_scale, bool sums) {
    const int64_t lda = depth + 3;
    ks::requant q = random_operands<TX>(count * lda, depth * n, n);
    q.scales = one_scale ? 1 : ks::conv_dim(n);
    const TX* x = reinterpret_cast<const TX*>(x_buf);
    ks::qpack_columns(depth, n, w_buf, packed_buf);  // (the sums after the packed columns are not read)
    int32_t* y32 = reinterpret_cast<int32_t*>(y_got);
    if (sums) {
        ks::qmatmul_folded<TX, int32_t>(count, depth, n, x, lda, packed_buf, y32, nullptr, q);
    } else {
        ks::qmatmul_folded<TX, uint8_t>(count, depth, n, x, lda, packed_buf, y_got, nullptr, q);
    }
    int bad = 0;
    for (int64_t i = 0; i < count; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            int32_t sum = bias[j];
            for (int64_t k = 0; k < depth; ++k) {
                sum += static_cast<int32_t>(ks::qtile::tile_byte(x[i * lda + k])) * w_buf[k * n + j];
            }
            const int32_t want = ks::qtile::requantize(sum, scales[one_scale ? 0 : j], -3.0f, 252.0f, 3);
            bad += sums ? y32[i * n + j] != sum : y_got[i * n + j] != static_cast<uint8_t>(want);
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
    // depthwise: channels, multiplier, image, kernel, stride, padding, dilation (taps odd and even; 81 taps: the
    // portable loops, past depthwise_sums_dsp's 64)
    const int64_t convs[][9] = {{3, 1, 7, 6, 3, 3, 1, 1, 1},     {2, 2, 9, 9, 3, 3, 2, 1, 1},
                                {3, 1, 11, 10, 5, 5, 1, 2, 1},   {2, 1, 6, 13, 1, 3, 1, 0, 2},
                                {1, 1, 20, 10, 10, 4, 2, 5, 1},  {2, 1, 12, 12, 9, 9, 1, 4, 1},
                                {4, 1, 5, 5, 3, 3, 1, 1, 2}};
    for (const auto& v : convs) {
        const int bad = depthwise_case<uint8_t>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]) +
                        depthwise_case<int8_t>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        failed += bad != 0;
        std::printf("case depthwise %dx%d taps %d stride %d %d\n", static_cast<int>(v[4]), static_cast<int>(v[5]),
                    static_cast<int>(v[4] * v[5]), static_cast<int>(v[6]), bad);
    }
    // dense: channels in and out, image, kernel, stride, padding, dilation (more than 32 positions: several blocks)
    const int64_t denses[][9] = {{3, 5, 12, 12, 3, 3, 1, 1, 1}, {2, 8, 9, 11, 3, 3, 2, 1, 1},
                                 {5, 3, 7, 9, 1, 1, 1, 0, 1},   {1, 4, 10, 6, 5, 3, 1, 2, 2}};
    for (const auto& v : denses) {
        const int bad = dense_case<uint8_t>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]) +
                        dense_case<int8_t>(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        failed += bad != 0;
        std::printf("case dense %dx%d channels %d to %d stride %d %d\n", static_cast<int>(v[4]),
                    static_cast<int>(v[5]), static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[6]),
                    bad);
    }
    // products (ks::qmatmul_folded): rows, depth, columns; per-column and one scale, int32 sums
    const int64_t products[][3] = {{1, 1, 1}, {1, 3, 10}, {2, 5, 4}, {3, 16, 13}, {1, 49, 10}, {2, 50, 7}};
    for (const auto& v : products) {
        int bad = 0;
        for (int form = 0; form < 3; ++form) {
            bad += product_case<uint8_t>(v[0], v[1], v[2], form == 1, form == 2) +
                   product_case<int8_t>(v[0], v[1], v[2], form == 1, form == 2);
        }
        failed += bad != 0;
        std::printf("case product %d x %d x %d %d\n", static_cast<int>(v[0]), static_cast<int>(v[1]),
                    static_cast<int>(v[2]), bad);
    }
    std::printf("failed %d\n", failed);
    return failed;
}
