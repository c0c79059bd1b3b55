// Tests of the integer kernels (prelude/ks/qconv.h) against written-out loops (the oracle): ks::qconv over 1-d,
// 2-d and 3-d shapes with strides, dilations, padding and groups (and over ResNet-like layers: output rows of 1 to
// 40 positions, the compact packing's blocks across rows and planes), ks::qconv_depthwise with channel multipliers (and
// over MobileNet-like layers: 3×3 to 7×7 kernels, images up to 130 wide),
// ks::qmatmul from one row up (and with int32 results); ks::qlookup; uint8 and int8 activations and outputs, one
// scale or one per channel, with and without a bias, with bounds narrowed as a folded Relu narrows them. The
// reference rounds with nearbyintf (half to even) after clamping in float, as onnxruntime's kernels do. Built
// three times: with the best tile this CPU has (AVX-512 VNNI here), capped at AVX2 (KS_CPU_LEVEL_MAX=1) and at the
// portable loops (0).
#define KS_KERNELS_INSTANTIATE
#include <ks/kernels.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int runs = 0;
int failures = 0;
uint64_t state = 12345;

int64_t draw(int64_t n) {  // uniform in [0, n)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(n));
}

template <class T>
constexpr int32_t low() {
    return static_cast<T>(-1) < 0 ? -128 : 0;
}

int32_t reference(int64_t sum, float scale, int32_t zero, int32_t lo, int32_t hi) {
    float v = static_cast<float>(sum) * scale;
    v = std::fmin(std::fmax(v, static_cast<float>(lo - zero)), static_cast<float>(hi - zero));
    return static_cast<int32_t>(std::nearbyintf(v)) + zero;
}

struct params {
    std::vector<int32_t> bias;
    std::vector<float> scale;
    ks::requant q;
};

template <class TX, class TY>
params make_params(int64_t channels) {
    params p;
    const bool with_bias = draw(4) != 0;
    p.bias.resize(static_cast<size_t>(channels));
    for (auto& b : p.bias) {
        b = static_cast<int32_t>(draw(4001) - 2000);
    }
    const int64_t scales = draw(2) ? channels : 1;
    p.scale.resize(static_cast<size_t>(scales));
    for (auto& s : p.scale) {
        s = 0.0002f * static_cast<float>(1 + draw(40));
    }
    const int32_t lo_t = low<TY>(), hi_t = lo_t + 255;
    const int32_t y_zero = static_cast<int32_t>(lo_t + draw(256));
    const int32_t lo = draw(3) == 0 ? y_zero : lo_t;  // (a folded Relu: max(y, y_zero))
    p.q = ks::requant{with_bias ? p.bias.data() : nullptr, p.scale.data(), scales,
                      static_cast<int32_t>(low<TX>() + draw(256)), y_zero, lo, hi_t};
    return p;
}

template <class T>
std::vector<T> random_bytes(int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    for (auto& e : v) {
        e = static_cast<T>(low<T>() + draw(256));
    }
    return v;
}

template <class TY>
void check(const char* what, const std::vector<TY>& got, const std::vector<int32_t>& want, int64_t trial) {
    ++runs;
    for (size_t i = 0; i < want.size(); ++i) {
        if (static_cast<int32_t>(got[i]) != want[i]) {
            ++failures;
            std::printf("FAIL %s trial %lld: element %zu is %d, expected %d\n", what, static_cast<long long>(trial), i,
                        static_cast<int>(got[i]), want[i]);
            return;
        }
    }
}

// A random convolution: 1 to 3 spatial axes, groups (depthwise when `depthwise`).
ks::conv_shape random_shape(bool depthwise) {
    const int64_t k = 1 + draw(3);
    ks::conv_shape s{};
    const int64_t groups = depthwise ? 1 + draw(12) : (draw(3) == 0 ? 1 + draw(3) : 1);
    s.groups = groups;
    s.channels = depthwise ? groups : groups * (1 + draw(k == 3 ? 4 : 12));
    s.out_channels = groups * (depthwise ? 1 + draw(3) : 1 + draw(20));
    for (int a = 0; a < 3; ++a) {
        const bool live = a >= 3 - k;
        s.kernel[a] = live ? 1 + draw(3) : 1;
        s.stride[a] = live ? 1 + draw(2) : 1;
        s.dilation[a] = live && draw(4) == 0 ? 2 : 1;
        s.pad[a] = live ? draw(s.kernel[a]) : 0;
        const int64_t span = (s.kernel[a] - 1) * s.dilation[a] + 1;
        s.in[a] = live ? span + draw(k == 3 ? 6 : (k == 2 ? 14 : 70)) : 1;
        s.out[a] = (s.in[a] + 2 * s.pad[a] - span) / s.stride[a] + 1;
    }
    return s;
}

// A depthwise layer as MobileNets and keyword spotters have them: 2-d, square kernels of 3, 5 or 7 taps a side
// (dilated 2 at times), stride 1 or 2, "same" padding, images from 1 to 130 wide (rows of one to nine blocks of 16
// output positions; the narrow ones several output rows to a block).
ks::conv_shape mobile_shape() {
    ks::conv_shape s{};
    const int64_t k = 3 + 2 * draw(3);
    s.groups = s.channels = 1 + draw(4);
    s.out_channels = s.channels * (draw(4) == 0 ? 2 : 1);
    s.kernel[0] = s.stride[0] = s.dilation[0] = s.in[0] = s.out[0] = 1;
    for (int a = 1; a < 3; ++a) {
        s.kernel[a] = k;
        s.stride[a] = 1 + draw(2);
        s.dilation[a] = draw(5) == 0 ? 2 : 1;
        s.pad[a] = (k - 1) * s.dilation[a] / 2;
        s.in[a] = 1 + draw(a == 2 ? 130 : 20);
        s.out[a] = (s.in[a] + 2 * s.pad[a] - (k - 1) * s.dilation[a] - 1) / s.stride[a] + 1;
    }
    return s;
}

// A dense layer as ResNets have them, for the compact packing of ks::qconv (blocks of 32 output positions gathered
// across output rows, and planes): 2-d or 3-d, odd kernels of 1 to 7 taps a side (or a wide 1 × 9 kernel, whose
// blocks can span more than a window: the wide positions' path), stride 1 or 2, "same" padding or none, output rows
// of 1 to about 40 positions (7, 14, 28 among them), up to 70 channels (more than 16 quads of depth), and late
// layers (more output channels than positions).
ks::conv_shape resnet_shape() {
    ks::conv_shape s{};
    const bool three = draw(5) == 0, wide_kernel = draw(6) == 0, late = !three && draw(3) == 0;
    const int64_t k = 1 + 2 * draw(4);
    s.groups = 1;
    s.channels = 1 + draw(three ? 8 : 70);
    // (late: more output channels than positions, as ResNet's 7 × 7 layers: tail_columns over several 16-row groups)
    s.out_channels = late ? 33 + draw(40) : 1 + draw(three ? 12 : 40);
    const int64_t sides[] = {7, 14, 28, 5, 13, 33};
    const int64_t late_sides[] = {7, 5, 3, 1, 2, 4};
    for (int a = 0; a < 3; ++a) {
        const bool live = a >= (three ? 0 : 1);
        s.kernel[a] = !live ? 1 : (wide_kernel ? (a == 2 ? 9 : 1) : (three ? 1 + 2 * draw(2) : k));
        s.stride[a] = live ? 1 + draw(2) : 1;
        s.dilation[a] = 1;
        s.pad[a] = live && draw(4) != 0 ? s.kernel[a] / 2 : 0;
        const int64_t side = late ? late_sides[draw(6)] : (draw(2) ? sides[draw(6)] : 1 + draw(40));
        s.in[a] = !live ? 1 : (three ? s.kernel[a] + draw(6) : s.stride[a] * side);
        if (s.in[a] + 2 * s.pad[a] < s.kernel[a]) {
            s.in[a] = s.kernel[a];
        }
        s.out[a] = (s.in[a] + 2 * s.pad[a] - s.kernel[a]) / s.stride[a] + 1;
    }
    return s;
}

template <class TX, class TY>
void test_conv(int64_t trial, bool depthwise, bool mobile = false, bool resnet = false) {
    const ks::conv_shape s = mobile ? mobile_shape() : (resnet ? resnet_shape() : random_shape(depthwise));
    // (ResNet-like layers: up to 5 images, so that blocks of 32 positions span two images and more: compact_batch)
    const int64_t images = 1 + draw(resnet ? 5 : 2), cg = s.channels / s.groups, m = s.out_channels;
    const int64_t mg = m / s.groups;
    const auto x = random_bytes<TX>(images * s.channels * s.in_plane());
    const auto w = random_bytes<int8_t>(m * cg * s.taps());
    const params p = make_params<TX, TY>(m);
    std::vector<TY> y(static_cast<size_t>(images * m * s.positions()));
    const int64_t room = depthwise ? ks::qconv_depthwise_scratch(s) : ks::qconv_scratch(s);
    std::vector<uint64_t> scratch(static_cast<size_t>(room / 8 + 16));
    // (64-byte aligned, or 16 bytes past that: the generated code's workspace slots are 16-byte aligned)
    uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64) +
                       (draw(2) ? 16 : 0);
    if (depthwise) {
        ks::qconv_depthwise<TX, TY>(s, images, x.data(), w.data(), y.data(), aligned, p.q);
    } else {
        std::vector<uint8_t> packed(static_cast<size_t>(ks::qconv_packed_size(s.out_channels, s.depth(), s.groups)));
        ks::qpack_rows(s.out_channels, s.depth(), s.groups, w.data(), packed.data());
        ks::qconv<TX, TY>(s, images, x.data(), packed.data(), y.data(), aligned, p.q);
    }
    // (the written-out convolution: where each output position's tap reads in the input plane, -1 in the padding,
    // worked out once)
    const int64_t positions = s.out[0] * s.out[1] * s.out[2], taps = s.taps();
    std::vector<int64_t> reads(static_cast<size_t>(positions * taps));
    for (int64_t q = 0; q < positions; ++q) {
        const int64_t od = q / (s.out[1] * s.out[2]), oh = q / s.out[2] % s.out[1], ow = q % s.out[2];
        for (int64_t t = 0; t < taps; ++t) {
            const int64_t kd = t / (s.kernel[1] * s.kernel[2]), kh = t / s.kernel[2] % s.kernel[1], kw = t % s.kernel[2];
            const int64_t d = od * s.stride[0] - s.pad[0] + kd * s.dilation[0];
            const int64_t h = oh * s.stride[1] - s.pad[1] + kh * s.dilation[1];
            const int64_t v = ow * s.stride[2] - s.pad[2] + kw * s.dilation[2];
            const bool inside = d >= 0 && d < s.in[0] && h >= 0 && h < s.in[1] && v >= 0 && v < s.in[2];
            reads[static_cast<size_t>(q * taps + t)] = inside ? (d * s.in[1] + h) * s.in[2] + v : -1;
        }
    }
    std::vector<int32_t> want;
    for (int64_t n = 0; n < images; ++n) {
        for (int64_t o = 0; o < m; ++o) {
            const int64_t g = o / mg;
            for (int64_t q = 0; q < positions; ++q) {
                const int64_t* read = &reads[static_cast<size_t>(q * taps)];
                int64_t sum = p.q.bias ? p.q.bias[o] : 0;
                for (int64_t c = 0; c < cg; ++c) {
                    const TX* plane = &x[static_cast<size_t>((n * s.channels + g * cg + c) * s.in_plane())];
                    const int8_t* kernel = &w[static_cast<size_t>((o * cg + c) * taps)];
                    for (int64_t t = 0; t < taps; ++t) {
                        if (read[t] >= 0) {
                            sum += (static_cast<int64_t>(plane[read[t]]) - p.q.x_zero) * kernel[t];
                        }
                    }
                }
                want.push_back(reference(sum, p.q.scale[p.q.scales == 1 ? 0 : o], p.q.y_zero, p.q.lo, p.q.hi));
            }
        }
    }
    check(depthwise ? "qconv_depthwise" : "qconv", y, want, trial);
}

// ks::qmatmul of random a [rows, depth] and b [depth, n] into y (which has room for rows·n results): the exact
// sums Σ (a - x_zero)·b plus the bias, row by row, to compare y with.
template <class TX, class TY>
std::vector<int64_t> run_matmul(const params& p, int64_t rows, int64_t depth, int64_t n, std::vector<TY>& y) {
    const int64_t lda = depth + (draw(2) == 0 ? draw(9) : 0);  // (rows apart by more than depth: a view's)
    const auto a = random_bytes<TX>(rows * lda);
    const auto b = random_bytes<int8_t>(depth * n);
    std::vector<uint64_t> scratch(static_cast<size_t>(ks::qmatmul_scratch(depth, n) / 8 + 8));
    uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    std::vector<uint8_t> packed(static_cast<size_t>(ks::qmatmul_packed_size(depth, n)));
    ks::qpack_columns(depth, n, b.data(), packed.data());
    ks::qmatmul<TX, TY>(rows, depth, n, a.data(), lda, packed.data(), y.data(), aligned, p.q);
    std::vector<int64_t> sums;
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            int64_t sum = p.q.bias ? p.q.bias[j] : 0;
            for (int64_t k = 0; k < depth; ++k) {
                sum += (static_cast<int64_t>(a[static_cast<size_t>(i * lda + k)]) - p.q.x_zero) *
                       b[static_cast<size_t>(k * n + j)];
            }
            sums.push_back(sum);
        }
    }
    return sums;
}

template <class TX, class TY>
void test_matmul(int64_t trial) {
    const int64_t rows = draw(4) == 0 ? 1 : 1 + draw(40), depth = 1 + draw(70), n = 1 + draw(70);
    const params p = make_params<TX, TY>(n);
    std::vector<TY> y(static_cast<size_t>(rows * n));
    const std::vector<int64_t> sums = run_matmul<TX, TY>(p, rows, depth, n, y);
    std::vector<int32_t> want;
    for (size_t e = 0; e < sums.size(); ++e) {
        const int64_t j = static_cast<int64_t>(e) % n;
        want.push_back(reference(sums[e], p.q.scale[p.q.scales == 1 ? 0 : j], p.q.y_zero, p.q.lo, p.q.hi));
    }
    check("qmatmul", y, want, trial);
}

// ks::qmatmul with int32 results (MatMulInteger): the sums Σ (a - x_zero)·b plus the bias, not requantized.
template <class TX>
void test_matmul_sums(int64_t trial) {
    const int64_t rows = draw(4) == 0 ? 1 : 1 + draw(40), depth = 1 + draw(70), n = 1 + draw(70);
    const params p = make_params<TX, uint8_t>(n);
    std::vector<int32_t> y(static_cast<size_t>(rows * n) + 1, 99);
    std::vector<int32_t> want;
    for (const int64_t sum : run_matmul<TX, int32_t>(p, rows, depth, n, y)) {
        want.push_back(static_cast<int32_t>(sum));
    }
    want.push_back(99);  // (nothing written past the end)
    check("qmatmul (int32 sums)", y, want, trial);
}

// ks::qlookup over lengths around the 64-byte vectors (and 0), every byte present: y[i] = table[byte of x[i]].
template <class TX, class TY>
void test_lookup(int64_t trial) {
    const int64_t n = trial < 4 ? trial * 64 + (trial % 2) : draw(700);
    const auto table = random_bytes<TY>(256);
    auto x = random_bytes<TX>(n);
    for (int64_t i = 0; i < n && i < 256; ++i) {
        x[static_cast<size_t>(i)] = static_cast<TX>(static_cast<uint8_t>(i));
    }
    std::vector<TY> y(static_cast<size_t>(n) + 1, static_cast<TY>(99));
    ks::qlookup<TX, TY>(n, table.data(), x.data(), y.data());
    std::vector<int32_t> want;
    for (const TX v : x) {
        want.push_back(table[static_cast<uint8_t>(v)]);
    }
    want.push_back(99);  // (nothing written past the end)
    check("qlookup", y, want, trial);
}

// The extreme products: every activation 255 from its zero point (uint8 255 with zero 0, int8 127 with zero -128)
// times weights of -128 or 127, so that two adjacent products sum to -65280 or 64770, beyond int16 (vpmaddubsw would
// saturate them: docs/quantization.md), and long depths (to 4096) that reach -1.3e8 in int32. Each column's scale
// maps its sum into the output's range, so a wrong sum shows. Through ks::qmatmul (the tiles with SWAP) and a 1 × 1
// ks::qconv (without).
template <class TX, class TY>
void test_worst_case(int64_t trial) {
    const int64_t rows = 1 + trial % 9, depth = trial < 3 ? 4096 : 4 + 4 * draw(40), n = 1 + draw(40);
    const int32_t x_zero = low<TX>();
    const std::vector<TX> a(static_cast<size_t>(rows * depth), static_cast<TX>(x_zero + 255));
    std::vector<int8_t> b(static_cast<size_t>(depth * n));
    for (int64_t k = 0; k < depth; ++k) {
        for (int64_t j = 0; j < n; ++j) {  // (columns of -128, of 127, and of the two in turn along the depth)
            b[static_cast<size_t>(k * n + j)] = static_cast<int8_t>(j % 3 == 0 || (j % 3 == 2 && k % 2) ? -128 : 127);
        }
    }
    std::vector<float> scale(static_cast<size_t>(n), 100.0f / (255.0f * 128.0f * static_cast<float>(depth)));
    const int32_t y_zero = low<TY>() + 128;
    const ks::requant q{nullptr, scale.data(), n, x_zero, y_zero, low<TY>(), low<TY>() + 255};
    std::vector<int32_t> want;
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            int64_t sum = 0;
            for (int64_t k = 0; k < depth; ++k) {
                sum += 255 * b[static_cast<size_t>(k * n + j)];
            }
            want.push_back(reference(sum, scale[static_cast<size_t>(j)], y_zero, q.lo, q.hi));
        }
    }
    std::vector<TY> y(static_cast<size_t>(rows * n));
    std::vector<uint64_t> scratch(static_cast<size_t>(ks::qmatmul_scratch(depth, n) / 8 + 8));
    uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    std::vector<uint8_t> packed(static_cast<size_t>(ks::qmatmul_packed_size(depth, n)));
    ks::qpack_columns(depth, n, b.data(), packed.data());
    ks::qmatmul<TX, TY>(rows, depth, n, a.data(), depth, packed.data(), y.data(), aligned, q);
    check("qmatmul (extreme products)", y, want, trial);
    // the same sums as a 1 × 1 convolution: n output channels (weights w[j][k] = b[k][j]) over `rows` positions
    ks::conv_shape s{};
    s.channels = depth;
    s.out_channels = n;
    s.groups = 1;
    for (int ax = 0; ax < 3; ++ax) {
        s.in[ax] = s.out[ax] = s.kernel[ax] = s.stride[ax] = s.dilation[ax] = 1;
    }
    s.in[2] = s.out[2] = rows;
    std::vector<int8_t> w(static_cast<size_t>(n * depth));
    for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < depth; ++k) {
            w[static_cast<size_t>(j * depth + k)] = b[static_cast<size_t>(k * n + j)];
        }
    }
    std::vector<uint8_t> rows_packed(static_cast<size_t>(ks::qconv_packed_size(n, depth, 1)));
    ks::qpack_rows(n, depth, 1, w.data(), rows_packed.data());
    std::vector<uint64_t> room(static_cast<size_t>(ks::qconv_scratch(s) / 8 + 8));
    uint8_t* at = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(room.data()) + 63) / 64 * 64);
    ks::qconv<TX, TY>(s, 1, a.data(), rows_packed.data(), y.data(), at, q);
    std::vector<int32_t> by_channel;  // (y [n][rows]: want transposed)
    for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < rows; ++i) {
            by_channel.push_back(want[static_cast<size_t>(i * n + j)]);
        }
    }
    check("qconv 1 x 1 (extreme products)", y, by_channel, trial);
}

template <class TX, class TY>
void test_types(int64_t trials) {
    for (int64_t trial = 0; trial < 12; ++trial) {
        test_worst_case<TX, TY>(trial);
    }
    for (int64_t trial = 0; trial < trials; ++trial) {
        test_conv<TX, TY>(trial, false);
        test_conv<TX, TY>(trial, true);
        test_conv<TX, TY>(trial, true, true);
        test_conv<TX, TY>(trial, false, false, true);
        test_matmul<TX, TY>(trial);
        test_lookup<TX, TY>(trial);
        if (sizeof(TY) == 1 && static_cast<TY>(-1) > 0) {  // (once per activation type: with the uint8 outputs)
            test_matmul_sums<TX>(trial);
        }
    }
}

// One pass over every type pair: from the same random state, so a pass checks what a program of its own did.
void test_all(int64_t trials) {
    state = 12345;
    test_types<uint8_t, uint8_t>(trials);
    test_types<uint8_t, int8_t>(trials);
    test_types<int8_t, uint8_t>(trials);
    test_types<int8_t, int8_t>(trials);
}

}  // namespace

// argv[1]: random trials per type pair, 60 by default (tests/test_qtile_aarch64.py runs 20 under qemu-aarch64, where
// a trial costs 20-50 times as much: 66 s of CPU per run with 60). argv[2] (x86-64): random trials of two more passes,
// 0 by default: the tile capped at AVX2 and at the portable loops, as builds with KS_CPU_LEVEL_MAX=1 and 0 choose them
// (qtile::best_level: the tile level min(best, cap)), so that one compile checks all three (CMakeLists.txt).
int main(int argc, char** argv) {
    const int64_t trials = argc > 1 ? std::atoll(argv[1]) : 60;
    test_all(trials);
#ifdef KS_QTILE_X86
    const int64_t capped = argc > 2 ? std::atoll(argv[2]) : 0;
    const int best = ks::qtile::best_level();
    for (int cap = 1; cap >= 0 && capped > 0; --cap) {
        ks::qtile::tile_level = best < cap ? best : cap;
        test_all(capped);
        std::printf("tile level %d done: %d checks, %d failures so far\n", ks::qtile::best_level(), runs, failures);
    }
#endif
#ifdef KS_QTILE_SDOT
    std::printf("tile sdot\n");  // (tests/test_qtile_aarch64.py: an AArch64 build with the dot product)
#endif
    std::printf("%d checks, %d failures (cpu level %d)\n", runs, failures, ks::cpu::detect());
    return failures == 0 ? 0 : 1;
}
