// Tests of the kernel layer (prelude/ks/kernels.h: ks/gemm.h and ks/conv.h) against written-out loops (the oracle): every
// strategy of ks::tiled_gemm (packed blocks, rows in place, dots, strided), ks::packed_gemm on panels,
// ks::conv with the register tiles and ks::conv_rows with a reference product, with and without an
// epilogue and an accumulator, over shapes that leave partial tiles and panels, in float and double.
// Built once with the target's own tile shape and once with KS_GEMM_TILE_OVERRIDE (other shapes, e.g.
// AVX-512's two panels per tile). No framework: prints each failure and returns nonzero.
#define KS_KERNELS_INSTANTIATE  // (the kernels instantiated here, as src/ks/kernels.cpp does)
#include <ks/kernels.h>
#include <ks/channels_last.h>  // (not in the kernel layer until a pass calls it: docs/performance.md)

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

namespace {

int runs = 0;
int failures = 0;

// argv[1]: run one check in this many (1 by default: all). The builds with another tile or instruction set
// (test_gemm_conv_wide, _native in CMakeLists.txt) keep one in three at random: every kind of shape, a third
// of the CPU.
int keep_every = 1;
uint64_t keep_state = 7;

// Whether to skip the next check, drawn at random (not every third in turn: the shapes' loops cycle through
// their kinds with trial % 3); the shapes are drawn either way, a skipped check draws no values.
bool skip_check() {
    keep_state = keep_state * 6364136223846793005ull + 1442695040888963407ull;
    return (keep_state >> 33) % static_cast<uint64_t>(keep_every) != 0;
}

// A deterministic pseudo-random value in [-1, 1).
double noise(uint64_t& state) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

template <class T>
double tolerance(int64_t depth) {
    return (sizeof(T) == 4 ? 1e-5 : 1e-13) * (1.0 + static_cast<double>(depth));
}

template <class T>
void report(double err, int64_t depth, const char* what, int64_t m, int64_t n, int64_t k, int flags) {
    ++runs;
    if (!(err <= tolerance<T>(depth))) {
        ++failures;
        std::printf("FAIL %s<%s> m=%lld n=%lld k=%lld flags=%d err=%g\n", what, sizeof(T) == 4 ? "float" : "double",
                    static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), flags, err);
    }
}

// c = epi(a·b (+ c)) through one of the entry points, against the loops; flags: bit 0 a transposed,
// 1 b transposed, 2 c transposed, 3 accumulate, 4 scratch given, 5 epilogue, 6 b as panels.
template <class T>
void check_gemm(int64_t m, int64_t n, int64_t k, int flags, uint64_t& state) {
    if (skip_check()) {
        return;
    }
    const bool ta = flags & 1, tb = flags & 2, tc = flags & 4, acc = flags & 8, scratch = flags & 16,
               epi_on = flags & 32, packed = flags & 64;
    std::vector<T> a(m * k), b(k * n), c(m * n), want(m * n), bias(n);
    for (auto& v : a) v = T(noise(state));
    for (auto& v : b) v = T(noise(state));
    for (auto& v : c) v = T(noise(state));
    for (auto& v : bias) v = T(noise(state));
    want = c;
    const ks::matrix<const T> ma = ta ? ks::matrix<const T>{a.data(), 1, m} : ks::matrix<const T>{a.data(), k, 1};
    const ks::matrix<const T> mb = tb ? ks::matrix<const T>{b.data(), 1, k} : ks::matrix<const T>{b.data(), n, 1};
    const ks::matrix<T> mc = tc ? ks::matrix<T>{c.data(), 1, m} : ks::matrix<T>{c.data(), n, 1};
    const auto epi = [&bias](int64_t i, int64_t j, T v) {
        const T t = v + bias[j] * T(i % 3);
        return t < T(0) ? T(0) : t;
    };
    std::vector<double> bs(k * n), d(n);  // (B in double; each row of C's sums runs over p for all its j at once)
    for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < n; ++j) {
            bs[p * n + j] = double(mb.data[p * mb.rs + j * mb.cs]);
        }
    }
    for (int64_t i = 0; i < m; ++i) {
        std::fill(d.begin(), d.end(), 0.0);
        for (int64_t p = 0; p < k; ++p) {
            const double aip = double(ma.data[i * ma.rs + p * ma.cs]);
            for (int64_t j = 0; j < n; ++j) {
                d[j] += aip * bs[p * n + j];
            }
        }
        for (int64_t j = 0; j < n; ++j) {
            T& w = want[i * mc.rs + j * mc.cs];
            const T v = acc ? T(w + d[j]) : T(d[j]);
            w = epi_on ? epi(i, j, v) : v;
        }
    }
    std::vector<T> room(ks::tiled_gemm_scratch<T>(m, n, k));
    T* s = scratch ? room.data() : nullptr;
    if (packed) {
        constexpr int P = ks::panel_width<T>;
        std::vector<T> panels((n + P - 1) / P * P * k, T(0));
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t j = 0; j < n; ++j) {
                panels[(j / P) * k * P + p * P + j % P] = mb.data[p * mb.rs + j * mb.cs];
            }
        }
        if (epi_on) {
            ks::packed_gemm<T>(m, n, k, ma, {panels.data(), k}, mc, acc, ks::product_epilogue<T>(epi));
        } else {
            ks::packed_gemm<T>(m, n, k, ma, {panels.data(), k}, mc, acc);
        }
    } else if (epi_on) {
        ks::tiled_gemm<T>(m, n, k, ma, mb, mc, acc, s, ks::product_epilogue<T>(epi));
    } else {
        ks::tiled_gemm<T>(m, n, k, ma, mb, mc, acc, s);
    }
    double err = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        err = std::fmax(err, std::fabs(double(c[i]) - double(want[i])) / (1.0 + std::fabs(double(want[i]))));
    }
    report<T>(err, k, packed ? "packed_gemm" : "tiled_gemm", m, n, k, flags);
}

template <class T>
void gemms(uint64_t& state) {
    // (packed_gemm's tall tiles: 13 = 7 + 6, 16 = 8 + 8, 20 = 12 + 8, 21 = 7 + 7 + 7, 25 = 2 x 12 + 1, 64 = 4 x 12 +
    // 2 x 8; 3 and 4 rows as padded tiles of 5 where vectors are 64 or 32 bytes)
    const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 16, 20, 21, 25, 64};
    const int64_t ns[] = {1, 3, 16, 17, 33, 130};
    const int64_t ks[] = {0, 1, 7, 300, 1100};
    for (int64_t m : ms) {
        for (int64_t n : ns) {
            for (int64_t k : ks) {
                for (int flags = 0; flags < 128; ++flags) {
                    const bool packed = flags & 64;
                    if ((packed && (flags & 18)) || (m * n * k > 100000 && flags % 5)) {
                        continue;  // (panels come untransposed and need no scratch; big products sampled)
                    }
                    check_gemm<T>(m, n, k, flags, state);
                }
            }
        }
    }
    // (packed_gemm with fewer rows than a tile: blocks of several tiles' panels, 384 or 512 columns for one row,
    // then a partial block; plain, accumulated, with an epilogue)
    for (int64_t m = 1; m <= 5; ++m) {
        for (int64_t n : {400, 1000}) {
            for (int flags : {64, 72, 96}) {
                check_gemm<T>(m, n, 300, flags, state);
            }
        }
    }
}

// A product for ks::conv_rows written out.
struct loop_product {
    template <class T>
    void operator()(int64_t m, int64_t n, int64_t k, ks::matrix<const T> a, ks::matrix<const T> b, ks::matrix<T> c,
                    bool accumulate) const {
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                T d = 0;
                for (int64_t p = 0; p < k; ++p) {
                    d += a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs];
                }
                T& out = c.data[i * c.rs + j * c.cs];
                out = accumulate ? out + d : d;
            }
        }
    }
};

// The convolution written out: y[n, m, o] = Σ_{c, t} x[n, g·C/G + c, o·s + t·d - pad] w[m, c, t]. Where each output
// position's tap reads in the input plane (-1: in the padding) is worked out once per call; the sum runs over c, then t,
// in double.
template <class T>
std::vector<T> conv_loops(const ks::conv_shape& s, int64_t images, const std::vector<T>& x, const std::vector<T>& w) {
    const int64_t cg = s.channels / s.groups, mg = s.out_channels / s.groups, taps = s.taps();
    std::vector<int64_t> reads(s.positions() * taps);
    for (int64_t q = 0; q < s.positions(); ++q) {
        const int64_t o[3] = {q / (s.out[1] * s.out[2]), q / s.out[2] % s.out[1], q % s.out[2]};
        for (int64_t t = 0; t < taps; ++t) {
            const int64_t tap[3] = {t / (s.kernel[1] * s.kernel[2]), t / s.kernel[2] % s.kernel[1], t % s.kernel[2]};
            int64_t at = 0;
            bool inside = true;
            for (int a = 0; a < 3; ++a) {
                const int64_t pos = o[a] * s.stride[a] + tap[a] * s.dilation[a] - s.pad[a];
                inside = inside && pos >= 0 && pos < s.in[a];
                at = at * s.in[a] + pos;
            }
            reads[q * taps + t] = inside ? at : -1;
        }
    }
    std::vector<T> y(images * s.out_channels * s.positions());
    for (int64_t i = 0; i < images; ++i) {
        for (int64_t m = 0; m < s.out_channels; ++m) {
            for (int64_t q = 0; q < s.positions(); ++q) {
                const int64_t* read = &reads[q * taps];
                double acc = 0;
                for (int64_t c = 0; c < cg; ++c) {
                    const T* plane = &x[(i * s.channels + m / mg * cg + c) * s.in_plane()];
                    const T* kernel = &w[(m * cg + c) * taps];
                    for (int64_t t = 0; t < taps; ++t) {
                        if (read[t] >= 0) {
                            acc += double(plane[read[t]]) * double(kernel[t]);
                        }
                    }
                }
                y[(i * s.out_channels + m) * s.positions() + q] = T(acc);
            }
        }
    }
    return y;
}

// The kernel with ks::affine_epilogue (bias, clamps) against the same epilogue as a lambda: equal bit for bit
// (the bias of channel 0 NaN, so that the NaN rules are compared too).
template <class T, class Run>
void check_affine(const ks::conv_shape& s, std::vector<T>& bias, unsigned bounds, const Run& run) {
    bias[0] = std::numeric_limits<T>::quiet_NaN();
    const T lo = T(-0.25), hi = T(0.5);
    const auto lambda = [&](int64_t, int64_t m, int64_t, T v) {
        T t = v + bias[m];
        t = (bounds & 1) && t < lo ? lo : t;
        return (bounds & 2) && t > hi ? hi : t;
    };
    const ks::affine<T> f = ks::make_affine<T>(bias.data(), bounds, lo, hi);
    const std::vector<T> a = run(ks::affine_epilogue<T>(f));
    const std::vector<T> b = run(ks::conv_epilogue<T>(lambda));
    const bool same = std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
    report<T>(same ? 0.0 : 1e9, s.depth(), "conv with ks::affine_epilogue", s.out_channels, s.positions(), s.depth(),
              int(bounds));
}

// how: 0 ks::conv, 1 ks::conv_rows, 2 ks::conv_depthwise.
template <class T>
void check_conv(const ks::conv_shape& s, int64_t images, bool epi_on, int how, uint64_t& state) {
    if (skip_check()) {
        return;
    }
    const bool rows = how == 1;
    std::vector<T> x(images * s.channels * s.in_plane()), w(s.out_channels * s.depth()), bias(s.out_channels);
    for (auto& v : x) v = T(noise(state));
    for (auto& v : w) v = T(noise(state));
    for (auto& v : bias) v = T(noise(state));
    if (epi_on && !rows) {
        check_affine<T>(s, bias, 1 + unsigned(state % 3), [&](const ks::epilogue<T>& e) {
            std::vector<T> y(images * s.out_channels * s.positions());
            std::vector<T> room(how == 2 ? ks::depthwise_scratch<T>(s) : ks::conv_scratch<T>(s));
            if (how == 2) {
                ks::conv_depthwise<T>(s, images, x.data(), w.data(), y.data(), room.data(), e);
            } else {
                ks::conv<T>(s, images, x.data(), w.data(), y.data(), room.data(), e);
            }
            return y;
        });
        bias[0] = T(noise(state));
    }
    const auto epi = [&bias](int64_t image, int64_t m, int64_t q, T v) {
        const T t = v + bias[m] - T(0.001) * T(q) + T(0.1) * T(image);
        return t < T(0) ? T(0) : t;
    };
    std::vector<T> want = conv_loops<T>(s, images, x, w);
    if (epi_on) {
        for (size_t e = 0; e < want.size(); ++e) {
            const int64_t q = int64_t(e) % s.positions(), m = int64_t(e) / s.positions() % s.out_channels;
            want[e] = epi(int64_t(e) / (s.positions() * s.out_channels), m, q, want[e]);
        }
    }
    std::vector<T> y(want.size() + 1, T(7));
    std::vector<T> room(how == 2 ? ks::depthwise_scratch<T>(s) : ks::conv_scratch<T>(s, rows),
                        std::numeric_limits<T>::quiet_NaN());  // (a place the kernel reads unwritten shows)
    if (how == 2) {
        if (epi_on) {
            ks::conv_depthwise<T>(s, images, x.data(), w.data(), y.data(), room.data(), ks::conv_epilogue<T>(epi));
        } else {
            ks::conv_depthwise<T>(s, images, x.data(), w.data(), y.data(), room.data());
        }
    } else if (rows) {
        if (epi_on) {
            ks::conv_rows<T>(s, images, x.data(), w.data(), y.data(), room.data(), loop_product{}, ks::conv_epilogue<T>(epi));
        } else {
            ks::conv_rows<T>(s, images, x.data(), w.data(), y.data(), room.data(), loop_product{});
        }
    } else if (epi_on) {
        ks::conv<T>(s, images, x.data(), w.data(), y.data(), room.data(), ks::conv_epilogue<T>(epi));
    } else {
        ks::conv<T>(s, images, x.data(), w.data(), y.data(), room.data());
    }
    double err = y.back() == T(7) ? 0 : 1e9;  // (nothing written past the result)
    for (size_t i = 0; i < want.size(); ++i) {  // (not fmax, which drops a NaN)
        const double d = std::fabs(double(y[i]) - double(want[i]));
        err = d <= err ? err : d;
    }
    report<T>(err, s.depth(), how == 2 ? "conv_depthwise" : rows ? "conv_rows" : "conv", s.out_channels,
              s.positions(), s.depth(), epi_on + 2 * how);
}

// Random sizes for the last `dims` spatial axes of s (the others 1): kernel taps up to 1 + 2·taps, strides up to
// 1 + 2·stride, dilations up to 1 + 2·dilation, inputs up to 1 + 2·in (2·wide along the last axis), leading
// padding below the window's span and trailing padding up to 2·pad. False when a window does not fit.
bool random_axes(ks::conv_shape& s, int dims, double taps, double stride, double dilation, double in, double wide,
                 double pad, uint64_t& state) {
    bool fits = true;
    for (int a = 0; a < 3; ++a) {
        if (a < 3 - dims) {
            s.in[a] = s.out[a] = s.kernel[a] = s.stride[a] = s.dilation[a] = 1;
            s.pad[a] = 0;
            continue;
        }
        s.kernel[a] = 1 + int64_t(noise(state) * taps + taps);
        s.stride[a] = 1 + int64_t(noise(state) * stride + stride);
        s.dilation[a] = 1 + int64_t(noise(state) * dilation + dilation);
        const double side = a == 2 ? wide : in;
        s.in[a] = 1 + int64_t(noise(state) * side + side);
        const int64_t span = (s.kernel[a] - 1) * s.dilation[a] + 1;
        const int64_t lo = int64_t(noise(state) * pad + pad) % span, hi = int64_t(noise(state) * pad + pad);
        s.pad[a] = lo;
        const int64_t room = s.in[a] + lo + hi - span;
        fits = fits && room >= 0;
        s.out[a] = fits ? room / s.stride[a] + 1 : 1;
    }
    return fits;
}

template <class T>
void convs(uint64_t& state) {
    for (int trial = 0; trial < 700; ++trial) {
        ks::conv_shape s{};
        s.groups = 1 + trial / 3 % 3;
        s.channels = s.groups * (1 + int64_t(noise(state) * 2 + 2));
        s.out_channels = s.groups * (1 + int64_t(noise(state) * 4.5 + 4.5));
        if (random_axes(s, 1 + trial % 3, 1.9, 1.4, 0.9, 9.9, 9.9, 1.4, state)) {
            check_conv<T>(s, 1 + trial % 2, trial & 8, (trial & 16) ? 1 : 0, state);
        }
    }
}

// Convolutions whose kernel is larger than two channel chunks and whose positions fit one block (ResNet's layers at
// 7 × 7): ks::conv's `chunks` method (ks/conv.h: chunks_all), which must be the method these shapes get; channel
// counts that leave a partial last chunk, rows of the kernel past the last whole tile, padding or none, strides 1 and
// 2, one image and several (the last positions of several images in one panel: chunks_all's tails, in groups of a
// panel's worth), with and without an epilogue.
template <class T>
void chunked_convs(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, side, kernel, stride, pad;
    };
    const case_ cases[] = {{200, 150, 7, 3, 1, 1}, {181, 203, 9, 3, 2, 1}, {600, 500, 13, 1, 2, 0},
                           {150, 260, 5, 3, 1, 0}, {110, 300, 14, 3, 2, 1}};
    int trial = 0;
    for (const case_& c : cases) {
        ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.side, c.side}, {}, {1, c.kernel, c.kernel}, {1, 1, c.stride},
                         {1, 1, 1}, {0, c.pad, c.pad}};
        s.stride[1] = c.stride;
        s.out[0] = 1;
        s.out[1] = s.out[2] = (c.side + 2 * c.pad - c.kernel) / c.stride + 1;
        const bool fits = s.positions() <= ks::convs::position_block * ks::panel_width<T>;  // (double: 32 positions)
        const bool chunks = ks::convs::method_of<T>(s, 1) == ks::convs::method::chunks;
        report<T>(chunks == fits ? 0.0 : 1e9, s.depth(), "conv: the chunks method chosen", s.out_channels, s.positions(),
                  s.depth(), 0);
        for (int images = 1; images <= 3; images += 2) {
            check_conv<T>(s, images, (trial++ & 1) != 0, 0, state);
        }
        if (c.channels == 200) {  // (49 positions: the images' last ones share panels, 16 images a group and one)
            check_conv<T>(s, 17, true, 0, state);
        }
    }
}

// Convolutions by the `panels` method with the kernel read as it is (one image, its positions in one block) and a
// k block of its rows over 512 KB (convs::streamed_kernel; a larger kernel runs by chunks, which chunked_convs checks): on AVX-512 (the native build) the first panels' tiles
// prefetch the kernel's next rows (tiles::ahead_block), the other panels by tiles::block; output channels past the
// last whole tile (ahead_block's rows left), 25 positions (two panels: ahead_block alone) and 49 (four: then
// tiles::block over the last two), with and without an epilogue. The method must be the one these shapes get.
template <class T>
void streamed_panels(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, side;
    };
    const case_ cases[] = {{64, 301, 13}, {64, 300, 9}};  // (kernels of 690 KB: under chunked's 1 MB)
    int trial = 0;
    for (const case_& c : cases) {
        ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.side, c.side}, {}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1},
                         {0, 1, 1}};
        s.out[0] = 1;
        s.out[1] = s.out[2] = (c.side + 2 - 3) / 2 + 1;
        const bool panels = ks::convs::method_of<T>(s, 1) == ks::convs::method::panels;
        report<T>(panels ? 0.0 : 1e9, s.depth(), "conv: the panels method chosen", s.out_channels, s.positions(),
                  s.depth(), 0);
        for (int e = 0; e < 2; ++e) {
            check_conv<T>(s, 1, (trial++ & 1) != 0, 0, state);
        }
    }
}

// Kernels of few rows over long output rows and a group's output over 1 MB (ks/conv.h: convs::long_rows, on AVX-512
// and AVX2 row tile by row tile over runs of up to 2048 positions, long_group): a pointwise layer from 16 channels over
// 90 × 90 (one row of 8100 positions as ks::conv runs it: four runs, the last panel partial; 44 output channels: a row
// tile of 4 after five whole ones), a 3 × 3 layer from 2 channels (depth 18, rows of 400, padded), two images; and two
// groups of 16 → 24 pointwise at 120 × 120, with and without an epilogue (the lambda's channel and position checked).
template <class T>
void long_row_convs(uint64_t& state) {
    const ks::conv_shape cases[] = {
        {16, 44, 1, {1, 90, 90}, {1, 90, 90}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
        {2, 24, 1, {1, 40, 400}, {1, 40, 400}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}},
        {32, 48, 2, {1, 120, 120}, {1, 120, 120}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
    };
    int k = 0;
    for (const ks::conv_shape& s : cases) {
        for (int e = 0; e < 2; ++e) {  // (one image and two; the epilogue on either, case by case)
            check_conv<T>(s, 1 + e, ((k + e) & 1) != 0, 0, state);
        }
        ++k;
    }
}

// ks::conv_winograd (its kernel transformed by ks::winograd_kernel) against the loops: transformed kernels over
// winograd::prefetched_kernel (512 KB of float), which on AVX2 run on the narrow tiles, their channels in k blocks
// when one block's sweep of two panels would pass narrow_sweep (ResNet-18's 256 channels: blocks of 64; 200 and 136
// channels: 4 blocks of 50, 3 of 46 and 44; 128: one block), 1 and 3 images of odd sides, an epilogue or none.
template <class T>
void winograd_convs(uint64_t& state) {
    static_assert(ks::winograd::narrow_step<float>(256) == 64 && ks::winograd::narrow_step<float>(200) == 50 &&
                  ks::winograd::narrow_step<float>(128) == 128 && ks::winograd::narrow_step<double>(136) == 46);
    struct case_ {
        int64_t channels, out_channels, h, w, images;
    };
    const case_ cases[] = {{256, 40, 7, 9, 1}, {200, 48, 9, 11, 3}, {136, 64, 6, 5, 1}, {128, 80, 5, 7, 3}};
    int k = 0;
    for (const case_& c : cases) {
        const ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.h, c.w}, {1, c.h, c.w}, {1, 3, 3}, {1, 1, 1},
                               {1, 1, 1}, {0, 1, 1}};
        std::vector<T> x(c.images * s.channels * s.in_plane()), w(s.out_channels * s.depth()), bias(s.out_channels);
        std::vector<T> u(16 * s.channels * s.out_channels), y(c.images * s.out_channels * s.positions());
        std::vector<T> scratch(ks::winograd_scratch<T>(s) + 64);
        for (auto& v : x) v = T(noise(state));
        for (auto& v : w) v = T(noise(state));
        for (auto& v : bias) v = T(noise(state));
        ks::winograd_kernel<T>(s.out_channels, s.channels, w.data(), u.data());
        const bool epi_on = (k++ & 1) != 0;
        const auto add_bias = [&](int64_t, int64_t m, int64_t, T v) { return v + bias[m]; };
        const ks::epilogue<T> epi = ks::conv_epilogue<T>(add_bias);
        T* aligned = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
        ks::conv_winograd<T>(s, c.images, x.data(), u.data(), y.data(), aligned, epi_on ? epi : ks::epilogue<T>{});
        const std::vector<T> want = conv_loops<T>(s, c.images, x, w);
        double err = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            const double d = double(y[i]) - double(want[i]) - (epi_on ? double(bias[i / s.positions() %
                                                                                     s.out_channels]) : 0.0);
            err = std::fabs(d) > err ? std::fabs(d) : err;
        }
        report<T>(err, s.depth(), "conv_winograd", s.out_channels, s.positions(), s.depth(), epi_on);
    }
}

// ks::conv_winograd with an infinite input value in the middle image of three whose tiles share one block of tiles
// (conv_winograd's blocks run on from one image into the next): that image again directly (winograd::direct_image,
// the outputs over the value infinite or NaN as the loops have them), the images before and after it as the loops.
template <class T>
void winograd_nonfinite(uint64_t& state) {
    const ks::conv_shape s{128, 80, 1, {1, 5, 7}, {1, 5, 7}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}};
    const int64_t images = 3;
    std::vector<T> x(images * s.channels * s.in_plane()), w(s.out_channels * s.depth());
    std::vector<T> u(16 * s.channels * s.out_channels), y(images * s.out_channels * s.positions());
    std::vector<T> scratch(ks::winograd_scratch<T>(s) + 64);
    for (auto& v : x) v = T(noise(state));
    for (auto& v : w) v = T(noise(state));
    x[(1 * s.channels + 5) * s.in_plane() + 2 * 7 + 3] = std::numeric_limits<T>::infinity();
    ks::winograd_kernel<T>(s.out_channels, s.channels, w.data(), u.data());
    T* aligned = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
    ks::conv_winograd<T>(s, images, x.data(), u.data(), y.data(), aligned);
    const std::vector<T> want = conv_loops<T>(s, images, x, w);
    double err = 0;
    int64_t infinite = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        if (std::isfinite(want[i])) {
            const double d = std::fabs(double(y[i]) - double(want[i]));
            err = std::isfinite(y[i]) && d <= err ? err : (std::isfinite(y[i]) ? d : 1e300);
        } else {
            ++infinite;
            const bool same = std::isnan(want[i]) ? std::isnan(y[i]) : y[i] == want[i];
            err = same ? err : 1e300;
        }
    }
    err = infinite > 0 ? err : 1e300;  // (the value must reach some outputs)
    report<T>(err, s.depth(), "conv_winograd nonfinite", s.out_channels, s.positions(), s.depth(), 0);
}

// ks::parts::winograd's parts, run one after another, against ks::conv_winograd over the whole batch, bit for bit:
// two images split by channels (their tiles are not whole blocks: conv_winograd's blocks run on from one image into
// the next, and a part of one image would group its tiles' sums otherwise) and two of 64 tiles each (whole blocks: by
// images).
template <class T>
void winograd_parts(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, side;
    };
    const case_ cases[] = {{128, 80, 7}, {136, 64, 11}, {48, 40, 16}};
    for (const case_& c : cases) {
        const ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.side, c.side}, {1, c.side, c.side}, {1, 3, 3},
                               {1, 1, 1}, {1, 1, 1}, {0, 1, 1}};
        const int64_t images = 2, room = ks::convs::aligned(ks::winograd_scratch<T>(s));
        std::vector<T> x(images * s.channels * s.in_plane()), w(s.out_channels * s.depth());
        std::vector<T> u(16 * s.channels * s.out_channels), whole(images * s.out_channels * s.positions());
        std::vector<T> parts(whole.size()), scratch(ks::parts::room(2, room) + 64);
        for (auto& v : x) v = T(noise(state));
        for (auto& v : w) v = T(noise(state));
        ks::winograd_kernel<T>(s.out_channels, s.channels, w.data(), u.data());
        T* aligned = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t(63));
        ks::conv_winograd<T>(s, images, x.data(), u.data(), whole.data(), aligned);
        for (int part = 0; part < 2; ++part) {
            ks::parts::winograd<T>(part, 2, part, s, images, x.data(), u.data(), parts.data(), aligned);
        }
        const bool same = std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(T)) == 0;
        report<T>(same ? 0.0 : 1e300, s.depth(), "parts::winograd bit for bit", s.out_channels, s.positions(),
                  s.depth(), 0);
    }
}

// Pointwise convolutions whose planes crowd the L1 cache's sets (ks/conv.h: convs::crowded, float on AVX2 and AVX-512):
// MobileNetV2's 144 → 24 at 56 × 56 (12544-byte planes, 16 sets: 9 lines a set) and 72 → 8 (4.5 a set), which must run
// by the `panels` method there and by the direct one elsewhere; 24 → 40 at 56 × 56 (1.5 lines a set), 32 → 16 at
// 112 × 112 (4 sets: left direct) and 16 → 30 at 112 × 112 (long_group's rows), direct on every level; one image and
// two, with and without an epilogue.
template <class T>
void crowded_convs(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, side;
        bool crowded;
    };
    const case_ cases[] = {{144, 24, 56, true}, {72, 8, 56, true}, {24, 40, 56, false},
                           {32, 16, 112, false}, {16, 30, 112, false}};
    int trial = 0;
    for (const case_& c : cases) {
        const ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.side, c.side}, {1, c.side, c.side}, {1, 1, 1},
                               {1, 1, 1}, {1, 1, 1}, {0, 0, 0}};
        const bool vectors = ks::tiles::vector_bytes >= 32 && sizeof(T) == 4;
        const ks::convs::method m = ks::convs::method_of<T>(s, 1);
        const bool panels = m == ks::convs::method::panels || m == ks::convs::method::panels_packed;
        report<T>(panels == (c.crowded && vectors) ? 0.0 : 1e9, s.depth(), "conv: the panels method for crowded planes",
                  s.out_channels, s.positions(), s.depth(), 0);
        for (int images = 1; images <= 2; ++images) {
            check_conv<T>(s, images, (trial++ & 1) != 0, 0, state);
        }
    }
}

// ks::conv_pointwise against the loops (float on AVX2: each image transposed first, convs::transpose_rows, whose
// output is checked alone as well): input channels past a multiple of 8 (13, 193) and positions past one (7 × 7,
// 14 × 14, 6 × 6), two blocks of k (1100 channels), output channels filling their last panel partly; one image and
// three, with and without an epilogue, the scratch filled with NaN.
template <class T>
void pointwise_convs(uint64_t& state) {
    constexpr int P = ks::panel_width<T>;
    const int64_t cases[][3] = {{13, 20, 7}, {193, 33, 14}, {1100, 16, 7}, {200, 24, 6}};
    int trial = 0;
    for (const auto& c : cases) {
        const ks::conv_shape s{c[0], c[1], 1, {1, c[2], c[2]}, {1, c[2], c[2]}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                               {0, 0, 0}};
        const int64_t n = s.positions();
#if defined(__AVX2__) && !defined(__AVX512F__)
        if constexpr (std::is_same_v<T, float>) {
            std::vector<float> x(c[0] * n), xt(c[0] * n);
            for (auto& v : x) v = float(noise(state));
            ks::convs::transpose_rows(x.data(), c[0], n, xt.data());
            double err = 0;
            for (int64_t k = 0; k < c[0]; ++k) {
                for (int64_t q = 0; q < n; ++q) {
                    err = xt[q * c[0] + k] == x[k * n + q] ? err : 1e9;
                }
            }
            report<T>(err, s.depth(), "convs::transpose_rows", c[0], n, 0, 0);
        }
#endif
        for (int64_t images = 1; images <= 3; images += 2) {
            const bool epi_on = (trial++ & 1) != 0;
            std::vector<T> x(images * c[0] * n), w(c[1] * c[0]), panels((c[1] + P - 1) / P * P * c[0], T(0));
            for (auto& v : x) v = T(noise(state));
            for (auto& v : w) v = T(noise(state));
            for (int64_t p = 0; p < c[0]; ++p) {  // (wᵀ [C, M] as panels)
                for (int64_t j = 0; j < c[1]; ++j) {
                    panels[(j / P) * c[0] * P + p * P + j % P] = w[j * c[0] + p];
                }
            }
            const auto epi = [](int64_t image, int64_t m, int64_t q, T v) {
                return v + T(0.01) * T(m) - T(0.001) * T(q) + T(0.1) * T(image);
            };
            std::vector<T> want = conv_loops<T>(s, images, x, w), y(want.size() + 1, T(7));
            std::vector<T> room(ks::pointwise_scratch<T>(s), std::numeric_limits<T>::quiet_NaN());
            if (epi_on) {
                ks::conv_pointwise<T>(s, images, x.data(), panels.data(), y.data(), room.data(), ks::conv_epilogue<T>(epi));
                for (size_t e = 0; e < want.size(); ++e) {
                    want[e] = epi(int64_t(e) / (n * c[1]), int64_t(e) / n % c[1], int64_t(e) % n, want[e]);
                }
            } else {
                ks::conv_pointwise<T>(s, images, x.data(), panels.data(), y.data(), room.data());
            }
            double err = y.back() == T(7) ? 0 : 1e9;
            for (size_t i = 0; i < want.size(); ++i) {
                const double d = std::fabs(double(y[i]) - double(want[i]));
                err = d <= err ? err : d;
            }
            report<T>(err, s.depth(), "conv_pointwise", c[1], n, c[0], epi_on);
        }
    }
}

// Strided 2-d convolutions whose rows hold four panels or more: ks::conv's `phases` methods (ks/conv.h: the image
// split into stride phases, read by the direct path's tiles), which must be the method these shapes get: a 7 × 7
// stride-2 stem of 3 channels, 3 × 3 stride-2 layers, strides 3 and (1, 2), odd sides, padding on one side or none,
// output channels past the last whole tile; one image (the kernel read in place) and three (packed); and two that
// must not get it (a 1 × 1 stride-2 kernel, rows of fewer than four panels), checked against the loops all the same.
template <class T>
void phased_convs(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, h, w, kh, kw, sh, sw, ph, pw;
    };
    const case_ cases[] = {{3, 20, 37, 141, 7, 7, 2, 2, 3, 3}, {13, 19, 30, 129, 3, 3, 2, 2, 1, 1},
                           {5, 9, 40, 200, 3, 5, 3, 3, 1, 2},  {6, 7, 12, 140, 3, 3, 1, 2, 1, 0},
                           {4, 17, 21, 140, 2, 4, 2, 2, 0, 1}, {3, 9, 19, 67, 7, 7, 2, 2, 3, 3},
                           {8, 11, 33, 140, 1, 1, 2, 2, 0, 0}, {13, 19, 30, 29, 3, 3, 2, 2, 1, 1}};
    int trial = 0;
    for (const case_& c : cases) {
        ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.h, c.w}, {}, {1, c.kh, c.kw}, {1, c.sh, c.sw},
                         {1, 1, 1}, {0, c.ph, c.pw}};
        s.out[0] = 1;
        s.out[1] = (c.h + 2 * c.ph - c.kh) / c.sh + 1;
        s.out[2] = (c.w + 2 * c.pw - c.kw) / c.sw + 1;
        const bool fits = s.out[2] >= 4 * ks::panel_width<T> && c.kh >= c.sh && c.kw >= c.sw;  // (the last two: not)
        const ks::convs::method m = ks::convs::method_of<T>(s, 1);
        const bool phases = m == ks::convs::method::phases || m == ks::convs::method::phases_packed;
        report<T>(phases == fits ? 0.0 : 1e9, s.depth(), "conv: the phases method chosen", s.out_channels,
                  s.positions(), s.depth(), 0);
        for (int images = 1; images <= 3; images += 2) {
            check_conv<T>(s, images, (trial++ & 1) != 0, 0, state);
        }
    }
}

// 2-d convolutions whose im2col blocks would be packed (rows under half a panel at stride 1, rows under four panels
// at stride 2 or 3): ks::conv's `flat` methods (ks/conv.h: flat_group, the output rows as wide as the padded or phase
// rows, the columns past them dropped), which must be the method these shapes get: grouped 3 × 3 stride-2 layers at
// odd sides, ResNeXt-like grouped 3 × 3 layers (groups 2 to 32, channels per group not multiples of 16), a 5 × 5
// kernel, strides (1, 2) and 3, padding on one side or none; one image (the kernel read in place) and three (packed),
// with and without an epilogue; stride-2 rows split at once (split_phases' short rows: 32 groups of 3 -> 5 channels
// from 14 × 14, 15 groups from 20 × 17; 2 × 2 and 4 × 4 kernels without padding over an odd number of rows, the last
// one read by no window and past the phase planes' rows); and five that
// must not get it (a 1 × 1 stride-2 kernel, a 5 × 5 map of a 3 × 3 kernel
// whose flat rows would be a third more panels, one group of 80 or of 19 output channels, 80 per group), checked
// against the loops all the same.
template <class T>
void flat_convs(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, groups, h, w, kh, kw, sh, sw, ph, pw;
        bool flat;
    };
    constexpr bool wide_panels = ks::panel_width<T> == 16;  // (double's panels of 8: other shapes are direct)
    const case_ cases[] = {{14, 20, 2, 29, 27, 3, 3, 2, 2, 1, 1, true},      {24, 40, 4, 15, 13, 3, 3, 2, 2, 1, 1, true},
                           {9, 21, 3, 13, 15, 3, 3, 2, 2, 1, 0, true},       {64, 96, 32, 7, 7, 3, 3, 1, 1, 1, 1, wide_panels},
                           {20, 30, 2, 9, 7, 3, 3, 1, 1, 1, 1, wide_panels}, {36, 18, 3, 14, 14, 3, 3, 2, 2, 1, 1, true},
                           {12, 20, 4, 6, 6, 3, 3, 1, 1, 1, 1, wide_panels}, {8, 12, 2, 17, 25, 5, 5, 1, 2, 2, 2, true},
                           {10, 14, 2, 31, 31, 3, 3, 3, 3, 1, 1, true},      {8, 10, 2, 33, 40, 1, 1, 2, 2, 0, 0, false},
                           {6, 10, 2, 5, 5, 3, 3, 1, 1, 1, 1, false},        {24, 80, 1, 15, 13, 3, 3, 2, 2, 1, 1, false},
                           {96, 160, 32, 14, 14, 3, 3, 2, 2, 1, 1, true},    {30, 45, 15, 20, 17, 3, 3, 2, 2, 1, 1, true},
                           {12, 20, 4, 15, 21, 2, 2, 2, 2, 0, 0, true},      {16, 24, 4, 13, 19, 4, 4, 2, 2, 0, 0, true},
                           {13, 19, 1, 29, 27, 3, 3, 2, 2, 1, 1, false},     {160, 160, 2, 15, 13, 3, 3, 2, 2, 1, 1, false}};
    int trial = 0;
    for (const case_& c : cases) {
        ks::conv_shape s{c.channels, c.out_channels, c.groups, {1, c.h, c.w}, {}, {1, c.kh, c.kw}, {1, c.sh, c.sw},
                         {1, 1, 1}, {0, c.ph, c.pw}};
        s.out[0] = 1;
        s.out[1] = (c.h + 2 * c.ph - c.kh) / c.sh + 1;
        s.out[2] = (c.w + 2 * c.pw - c.kw) / c.sw + 1;
        const ks::convs::method m = ks::convs::method_of<T>(s, 1);
        const bool flat = m == ks::convs::method::flat || m == ks::convs::method::flat_packed;
        report<T>(flat == c.flat ? 0.0 : 1e9, s.depth(), "conv: the flat method chosen", s.out_channels, s.positions(),
                  s.depth(), 0);
        // a part of the layer on a thread (ks/parts.h: whole groups, here one, which runs another method) fits the
        // scratch planned for the whole layer
        ks::conv_shape one = s;
        one.groups = 1;
        one.channels = s.channels / s.groups;
        one.out_channels = s.out_channels / s.groups;
        report<T>(ks::conv_scratch<T>(one) <= ks::conv_scratch<T>(s) ? 0.0 : 1e9, s.depth(), "conv: a group's scratch",
                  one.out_channels, s.positions(), s.depth(), 0);
        for (int images = 1; images <= 3; images += 2) {
            check_conv<T>(s, images, (trial++ & 1) != 0, 0, state);
        }
    }
}

// Stride-2 2-d convolutions of one group whose rows hold fewer than four panels: ks::conv's `panels` methods with the
// blocks packed from the image split into its stride phases (ks/conv.h: split_packed, copy_run), which must be what
// these shapes get: 3 × 3 layers at odd sides and padding on one side, 2 × 2 and 4 × 4 kernels without padding (the
// image copied all the same) over an odd number of rows, a 5 × 5 kernel, output channels past the last whole tile, rows
// of two panels and a part (ResNet-18's 28 × 28 out); and three that must not (a 1 × 1 stride-2 kernel, stride 3, a
// dilation of 2), checked against the loops all the same; one image and three (the kernel packed), with and without an
// epilogue.
template <class T>
void split_packed_convs(uint64_t& state) {
    struct case_ {
        int64_t channels, out_channels, h, w, kh, kw, sh, sw, ph, pw, dilation;
        bool split;
    };
    const case_ cases[] = {{13, 19, 29, 27, 3, 3, 2, 2, 1, 1, 1, true},  {17, 40, 56, 56, 3, 3, 2, 2, 1, 1, 1, true},
                           {9, 21, 13, 15, 3, 3, 2, 2, 1, 0, 1, true},   {12, 20, 15, 21, 2, 2, 2, 2, 0, 0, 1, true},
                           {16, 24, 13, 19, 4, 4, 2, 2, 0, 1, 1, true},  {7, 11, 23, 25, 5, 5, 2, 2, 2, 2, 1, true},
                           {8, 10, 33, 40, 1, 1, 2, 2, 0, 0, 1, false},  {10, 14, 31, 31, 3, 3, 3, 3, 1, 1, 1, false},
                           {6, 9, 21, 23, 3, 3, 2, 2, 2, 2, 2, false}};
    int trial = 0;
    for (const case_& c : cases) {
        ks::conv_shape s{c.channels, c.out_channels, 1, {1, c.h, c.w}, {}, {1, c.kh, c.kw}, {1, c.sh, c.sw},
                         {1, c.dilation, c.dilation}, {0, c.ph, c.pw}};
        s.out[0] = 1;
        s.out[1] = (c.h + 2 * c.ph - c.dilation * (c.kh - 1) - 1) / c.sh + 1;
        s.out[2] = (c.w + 2 * c.pw - c.dilation * (c.kw - 1) - 1) / c.sw + 1;
        const ks::convs::method m = ks::convs::method_of<T>(s, 1);
        const bool split = (m == ks::convs::method::panels || m == ks::convs::method::panels_packed) &&
                           ks::convs::split_packed<T>(ks::convs::plan_of<T>(s).s);
        report<T>(split == c.split ? 0.0 : 1e9, s.depth(), "conv: the panels method on split phases chosen",
                  s.out_channels, s.positions(), s.depth(), 0);
        for (int images = 1; images <= 3; images += 2) {
            check_conv<T>(s, images, (trial++ & 1) != 0, 0, state);
        }
    }
}

// Trial `trial` of the MobileNet-like depthwise shapes (3 or 5 wide, column stride 1 or 2, dilation 1): rows 1 to 40
// outputs wide, padding of half the kernel, none or more on one side.
ks::conv_shape mobile_depthwise_shape(int trial, int64_t channels) {
    ks::conv_shape s{};
    s.channels = s.groups = s.out_channels = channels;
    s.in[0] = s.out[0] = s.kernel[0] = s.stride[0] = s.dilation[0] = 1;
    const int64_t k = trial % 2 == 0 ? 3 : 5, stride = 1 + trial / 2 % 2, wide = 1 + trial / 4 % 40;
    for (int a = 1; a < 3; ++a) {
        s.kernel[a] = k;
        s.stride[a] = a == 2 ? stride : 1 + trial % 3 % 2;
        s.dilation[a] = 1;
        s.pad[a] = trial % 5 == 0 ? 0 : trial % 5 == 1 ? k - 1 : k / 2;
        const int64_t out = a == 2 ? wide : 1 + trial % 9;
        s.out[a] = out;
        s.in[a] = (out - 1) * s.stride[a] + k - 2 * s.pad[a] + (trial % 7 == 0 ? s.stride[a] - 1 : 0);
        if (s.in[a] < 1) {
            s.pad[a] = 0;
            s.in[a] = (out - 1) * s.stride[a] + k;
        }
    }
    return s;
}

// Depthwise convolutions (one group per input channel, one or two output channels each) through
// ks::conv_depthwise: rows from 1 to 150 columns (runs of 4 vectors and the vectors after them), strides and
// dilations 1 to 3, padding on either side.
template <class T>
void depthwise_convs(uint64_t& state) {
    for (int trial = 0; trial < 400; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = 1 + int64_t(noise(state) * 1.5 + 1.5);
        s.out_channels = s.channels * (1 + trial / 3 % 2);
        if (random_axes(s, 1 + trial % 3, 2.4, 1.4, 1.4, 5.5, 74.5, 1.9, state) && ks::is_depthwise(s)) {
            check_conv<T>(s, 1 + trial % 2, trial & 8, 2, state);
        }
    }
    // Many channels, one output channel each, 2-D: on AVX-512 the small planes are computed 16 channels at a
    // time (depthwise::across): whole groups and a partial last one, every stride, dilation and padding above.
    for (int trial = 0; trial < 160; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 12 + trial % 29;
        if (random_axes(s, 2, 2.4, 1.4, 1.4, 7.5, 9.5, 1.9, state)) {
            check_conv<T>(s, 1 + trial % 2, trial & 8, 2, state);
        }
    }
    // MobileNet's and EfficientNet's kernels (3 or 5 wide, column stride 1 or 2, dilation 1: on AVX-512,
    // depthwise::across_reuse): rows 1 to 40 outputs wide (runs of 8, of 4 and the 1-3 after them), channel counts
    // that are not multiples of 16, padding of half the kernel (or none, or more on one side).
    for (int trial = 0; trial < 160; ++trial) {
        const ks::conv_shape s = mobile_depthwise_shape(trial, 5 + trial % 37);
        check_conv<T>(s, 1 + trial % 2, trial & 8, 2, state);
    }
    // Rows in place (on AVX-512, ks::depthwise::by_rows: 3 × 3 at strides 1 and 2 and 5 × 5 at stride 1, output rows
    // of at least 28 and 14 outputs): rows 14 to 150 outputs wide (a partial last vector of 16 or none; below 28 at
    // stride 1 across channels), 1 to 11 rows (blocks of 4 or 2 rows and the rows after them), padding of half the
    // kernel, none or more on both sides, an input column or row past the last window.
    for (int trial = 0; trial < 66; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 1 + trial % 11;
        s.in[0] = s.out[0] = s.kernel[0] = s.stride[0] = s.dilation[0] = 1;
        const int64_t k = trial % 3 == 2 ? 5 : 3, stride = k == 3 ? 1 + trial / 3 % 2 : 1;
        for (int a = 1; a < 3; ++a) {
            s.kernel[a] = k;
            s.stride[a] = stride;
            s.dilation[a] = 1;
            s.pad[a] = trial % 4 == 0 ? 0 : trial % 4 == 1 ? k - 1 : k / 2;
            s.out[a] = a == 2 ? 14 + trial * 37 % 137 : 1 + trial % 11;
            s.in[a] = (s.out[a] - 1) * stride + k - 2 * s.pad[a] + (trial % 5 == 0 ? stride - 1 : 0);
        }
        if (s.in[1] >= 1) {
            check_conv<T>(s, 1 + trial % 2, trial & 4, 2, state);
        }
    }
    // Rows in place on AVX2 (ks::depthwise::by_rows_fits8: 3 × 3, output rows of at least 112 at stride 1 and 56 at
    // stride 2, 8 outputs a vector): rows 112 to 127 and 56 to 71 outputs wide (every partial last vector of 8 and
    // none), padding 0, 1 or 2 on both sides, an input column past the last window, 1 to 7 rows (blocks of 3 or 2
    // rows and the rows after them).
    for (int trial = 0; trial < 48; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 1 + trial % 5;
        s.in[0] = s.out[0] = s.kernel[0] = s.stride[0] = s.dilation[0] = 1;
        const int64_t stride = 1 + trial % 2;
        for (int a = 1; a < 3; ++a) {
            s.kernel[a] = 3;
            s.stride[a] = stride;
            s.dilation[a] = 1;
            s.pad[a] = trial / 2 % 3;
            s.out[a] = a == 2 ? 56 * (3 - stride) + trial / 2 % 16 : 1 + trial % 7;
            s.in[a] = (s.out[a] - 1) * stride + 3 - 2 * s.pad[a] + (trial % 5 == 0 ? stride - 1 : 0);
        }
        if (s.in[1] >= 1) {
            check_conv<T>(s, 1 + trial % 2, trial & 4, 2, state);
        }
    }
    // Small planes flat (on AVX-512, ks::depthwise::by_plane: 3 × 3 at stride 1 with one place of padding, rows
    // narrower than 28, at most 256 positions): 1 to 16 rows of 1 to 27 (a vector spanning 1 to 16 rows, a partial last
    // vector or none, the last block of 4 vectors past the plane), and planes of more than 256 positions (across).
    for (int trial = 0; trial < 48; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 1 + trial * 7 % 20;
        s.in[0] = s.out[0] = s.kernel[0] = s.stride[0] = s.dilation[0] = 1;
        for (int a = 1; a < 3; ++a) {
            s.kernel[a] = 3;
            s.stride[a] = s.dilation[a] = s.pad[a] = 1;
            s.in[a] = s.out[a] = a == 2 ? 1 + trial * 5 % 27 : 1 + trial * 3 % 16;
        }
        check_conv<T>(s, 1 + trial % 2, trial & 4, 2, state);
    }
    // Planes of more than 3136 outputs (across channels on AVX-512 in bands of rows, ks::depthwise::band_rows;
    // rows wider than a band's 896 positions: one row a band): bands whose windows reach the padding above, below
    // or neither, a last band shorter than the others.
    for (int trial = 0, banded = 0; banded < 24 && trial < 2000; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 8 + trial % 27;
        const bool wide = trial % 4 == 3;
        if (random_axes(s, 2, 2.4, 0.4, 0.9, wide ? 3.5 : 40.5, wide ? 600.5 : 70.5, 1.9, state) &&
            s.out[1] * s.out[2] > ks::depthwise::across_positions) {
            ++banded;
            check_conv<T>(s, 1 + trial % 2, trial & 8, 2, state);
        }
    }
}

// An affine epilogue by column (ks::column_affine_epilogue: bias[j], bounds; a channels-last product's) through
// ks::packed_gemm and ks::tiled_gemm (packed blocks and rows in place), against the loops and, bit for bit, against
// the same epilogue as a lambda (the bias of column 0 NaN; none at all every third product).
template <class T>
void check_column_affine(int64_t m, int64_t n, int64_t k, int how, uint64_t& state) {
    if (skip_check()) {
        return;
    }
    std::vector<T> a(m * k), b(k * n), bias(n);
    for (auto& v : a) v = T(noise(state));
    for (auto& v : b) v = T(noise(state));
    for (auto& v : bias) v = T(noise(state));
    const bool with_bias = (m + n + k) % 3 != 0;
    const unsigned bounds = 1 + unsigned(state % 3);
    const T lo = T(-0.25), hi = T(0.5);
    const auto lambda = [&](int64_t, int64_t j, T v) {
        T t = with_bias ? v + bias[j] : v;
        t = (bounds & 1) && t < lo ? lo : t;
        return (bounds & 2) && t > hi ? hi : t;
    };
    constexpr int P = ks::panel_width<T>;
    std::vector<T> panels((n + P - 1) / P * P * k, T(0)), room(ks::tiled_gemm_scratch<T>(m, n, k));
    for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < n; ++j) {
            panels[(j / P) * k * P + p * P + j % P] = b[p * n + j];
        }
    }
    const auto run = [&](const ks::epilogue<T>& e) {
        std::vector<T> c(m * n, T(3));
        const ks::matrix<const T> ma{a.data(), k, 1}, mb{b.data(), n, 1};
        const ks::matrix<T> mc{c.data(), n, 1};
        if (how == 0) {
            ks::packed_gemm<T>(m, n, k, ma, {panels.data(), k}, mc, false, e);
        } else if (how == 3) {  // (in 3 parts, as on 3 threads: ranges of whole panels, or of rows when n is small)
            for (int part = 0; part < 3; ++part) {
                ks::parts::packed_gemm<T>(part, 3, 0, m, n, k, ma, {panels.data(), k}, mc, false, e);
            }
        } else {
            ks::tiled_gemm<T>(m, n, k, ma, mb, mc, false, how == 1 ? room.data() : nullptr, e);
        }
        return c;
    };
    double err = 0;
    for (int pass = 0; pass < 2; ++pass) {
        bias[0] = pass == 0 ? T(noise(state)) : std::numeric_limits<T>::quiet_NaN();
        const ks::affine<T> f = ks::make_affine<T>(with_bias ? bias.data() : nullptr, bounds, lo, hi);
        const std::vector<T> got = run(ks::column_affine_epilogue<T>(f)), same = run(ks::product_epilogue<T>(lambda));
        err = std::memcmp(got.data(), same.data(), sizeof(T) * got.size()) == 0 ? err : 1e9;
        for (int64_t i = 0; pass == 0 && i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double d = 0;
                for (int64_t p = 0; p < k; ++p) {
                    d += double(a[i * k + p]) * double(b[p * n + j]);
                }
                const double e = std::fabs(double(got[i * n + j]) - double(lambda(i, j, T(d))));
                err = e <= err ? err : e;
            }
        }
    }
    const char* what = how == 0   ? "packed_gemm, affine by column"
                       : how == 3 ? "parts::packed_gemm, affine by column"
                                  : "tiled_gemm, affine by column";
    report<T>(err, k, what, m, n, k, how);
}

template <class T>
void column_affines(uint64_t& state) {
    const int64_t ms[] = {1, 3, 5, 8, 12, 13, 25, 49, 64};
    const int64_t ns[] = {1, 7, 16, 24, 33, 96, 130};
    const int64_t ks[] = {1, 8, 37, 300};
    for (int64_t m : ms) {
        for (int64_t n : ns) {
            for (int64_t k : ks) {
                for (int how = 0; how < 4; ++how) {
                    if (m * n * k <= 200000 || how == 0) {
                        check_column_affine<T>(m, n, k, how, state);
                    }
                }
            }
        }
    }
}

// ks::conv_depthwise_cl (channels-last images) against the loops (x and y transposed around it), with no epilogue,
// a lambda over each row (channel stride 1, position stride C) and an affine one, which must equal the lambda bit
// for bit (the bias of channel 0 NaN).
template <class T>
void check_depthwise_cl(const ks::conv_shape& s, int64_t images, int epi_kind, uint64_t& state) {
    if (skip_check()) {
        return;
    }
    const int64_t C = s.channels, in = s.in_plane(), n = s.positions();
    std::vector<T> x(images * C * in), w(C * s.taps()), bias(C);
    for (auto& v : x) v = T(noise(state));
    for (auto& v : w) v = T(noise(state));
    for (auto& v : bias) v = T(noise(state));
    std::vector<T> xl(x.size());
    for (int64_t i = 0; i < images; ++i) {
        for (int64_t c = 0; c < C; ++c) {
            for (int64_t p = 0; p < in; ++p) {
                xl[(i * in + p) * C + c] = x[(i * C + c) * in + p];
            }
        }
    }
    const auto epi = [&bias](int64_t image, int64_t m, int64_t q, T v) {
        const T t = v + bias[m] - T(0.001) * T(q) + T(0.1) * T(image);
        return t < T(0) ? T(0) : t;
    };
    const T lo = T(-0.25), hi = T(0.5);
    const auto clamp = [&bias, lo, hi](int64_t, int64_t m, int64_t, T v) {
        T t = v + bias[m];
        t = t < lo ? lo : t;
        return t > hi ? hi : t;
    };
    const auto run = [&](const ks::epilogue<T>& e) {
        std::vector<T> y(images * C * n + 1, T(7));
        std::vector<T> room(ks::depthwise_cl_scratch<T>(s), std::numeric_limits<T>::quiet_NaN());
        ks::conv_depthwise_cl<T>(s, images, xl.data(), w.data(), y.data(), room.data(), e);
        return y;
    };
    std::vector<T> want = conv_loops<T>(s, images, x, w);
    const ks::affine<T> f = ks::make_affine<T>(bias.data(), 3, lo, hi);
    std::vector<T> y = epi_kind == 0 ? run({}) : epi_kind == 1 ? run(ks::conv_epilogue<T>(epi))
                                                               : run(ks::affine_epilogue<T>(f));
    double err = y.back() == T(7) ? 0 : 1e9;  // (nothing written past the result)
    for (int64_t i = 0; i < images; ++i) {
        for (int64_t c = 0; c < C; ++c) {
            for (int64_t q = 0; q < n; ++q) {
                T v = want[(i * C + c) * n + q];
                v = epi_kind == 1 ? epi(i, c, q, v) : epi_kind == 2 ? clamp(i, c, q, v) : v;
                const double d = std::fabs(double(y[(i * n + q) * C + c]) - double(v));
                err = d <= err ? err : d;
            }
        }
    }
    if (epi_kind == 2) {
        bias[0] = std::numeric_limits<T>::quiet_NaN();
        const std::vector<T> a = run(ks::affine_epilogue<T>(f)), b = run(ks::conv_epilogue<T>(clamp));
        err = std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0 ? err : 1e9;
    }
    report<T>(err, s.depth(), "conv_depthwise_cl", C, n, s.depth(), epi_kind);
}

// Channels-last depthwise convolutions: MobileNet's and EfficientNet's kernels (3 × 3 and 5 × 5, strides 1 and 2,
// padding of half the kernel, none or more on one side; rows 1 to 40 wide: runs of 8, 4 and 1-3 between the edge
// positions; channel counts that are not multiples of a vector), then any kernel, stride, dilation and padding.
template <class T>
void depthwise_cl_convs(uint64_t& state) {
    for (int trial = 0; trial < 160; ++trial) {
        const ks::conv_shape s = mobile_depthwise_shape(trial, 1 + trial % 37);
        check_depthwise_cl<T>(s, 1 + trial % 2, trial % 3, state);
    }
    for (int trial = 0; trial < 160; ++trial) {
        ks::conv_shape s{};
        s.channels = s.groups = s.out_channels = 1 + trial % 41;
        if (random_axes(s, 2, 2.4, 1.4, 1.4, 7.5, 12.5, 1.9, state)) {
            check_depthwise_cl<T>(s, 1 + trial % 2, trial % 3, state);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    keep_every = argc > 1 ? std::atoi(argv[1]) : 1;
    if (keep_every < 1) {
        std::printf("usage: %s [keep_every >= 1]\n", argv[0]);
        return 2;
    }
    uint64_t state = 42;
    gemms<float>(state);
    gemms<double>(state);
    convs<float>(state);
    convs<double>(state);
    chunked_convs<float>(state);
    chunked_convs<double>(state);
    streamed_panels<float>(state);
    long_row_convs<float>(state);
    phased_convs<float>(state);
    phased_convs<double>(state);
    crowded_convs<float>(state);
    crowded_convs<double>(state);
    pointwise_convs<float>(state);
    pointwise_convs<double>(state);
    flat_convs<float>(state);
    flat_convs<double>(state);
    split_packed_convs<float>(state);
    split_packed_convs<double>(state);
    depthwise_convs<float>(state);
    depthwise_convs<double>(state);
    column_affines<float>(state);
    column_affines<double>(state);
    depthwise_cl_convs<float>(state);
    depthwise_cl_convs<double>(state);
    winograd_convs<float>(state);
    winograd_convs<double>(state);
    winograd_nonfinite<float>(state);
    winograd_nonfinite<double>(state);
    winograd_parts<float>(state);
    winograd_parts<double>(state);
    std::printf("%d checks, %d failed (tile %d x %d panels, one check in %d)\n", runs, failures,
                ks::tiles::row_block, ks::tiles::panel_block, keep_every);
    return failures != 0;
}
