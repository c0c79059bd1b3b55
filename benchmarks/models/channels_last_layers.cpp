// The layers of depthwise-separable networks alone, today's NCHW kernels against the channels-last ones
// (docs/performance.md, "A channels-last layout: the kernels"). Built and run as
//
//     g++ -std=c++17 -O3 -march=x86-64-v4 -Iprelude benchmarks/models/channels_last_layers.cpp -o /tmp/cl_layers
//     ROUNDS=7 /tmp/cl_layers [NAME PARTS...]        e.g. /tmp/cl_layers dw5 "pw 960"
//     ROUNDS=7 /tmp/cl_layers dw:K:S:C:SIDE pw:CIN:COUT:SIDE tr:C:SIDE ...  (those sizes, in that order; tr: a
//     transposition [C, SIDE²] -> [SIDE², C] as "old", and back as "new")
//
// Each layer (one image, float, bias + ReLU6 as the affine epilogue), old and new called in turn ROUNDS times; a
// sample is the thread CPU time of enough calls for about 20 ms, divided by them; printed: the medians (µs) and
// new / old. Old: ks::conv_depthwise (NCHW; on AVX-512 the `across` path) and, for a 1 × 1 layer, ks::conv (its method
// chosen as the generated code's) or ks::conv_pointwise where prims/convolve.py's pointwise_applies picks it. New:
// ks::conv_depthwise_cl on [H, W, C] and ks::packed_gemm of the [H·W, C] matrix by the kernel's panels with the
// affine epilogue by column (ks::column_affine_epilogue); "lambda": the same product with the epilogue as a lambda
// over each block (before it was in the tiles' registers). err: the largest difference between old and new.
#define KS_KERNELS_INSTANTIATE
#include <ks/kernels.h>
#include <ks/channels_last.h>  // (not in the kernel layer until a pass calls it: docs/performance.md)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

double now() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <class F>
double sample(const F& f, int calls) {
    const double t0 = now();
    for (int i = 0; i < calls; ++i) {
        f();
    }
    return (now() - t0) / calls * 1e6;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

float noise(uint64_t& s) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct layer {
    std::string name;
    int64_t cin, cout, k, stride, side;  // (cout 0: depthwise)
};

int rounds() {
    const char* r = std::getenv("ROUNDS");
    return r != nullptr ? std::atoi(r) : 7;
}

// The old and new calls of a layer, timed in turn (three columns when `third` is given).
template <class A, class B, class C>
void time_layer(const layer& l, const A& old_call, const B& new_call, const C* third, double err) {
    const int calls = std::max(1, int(20000.0 / std::max(1.0, sample(old_call, 3))));
    std::vector<double> a, b, c;
    for (int r = 0; r < rounds(); ++r) {
        a.push_back(sample(old_call, calls));
        b.push_back(sample(new_call, calls));
        if (third != nullptr) {
            c.push_back(sample(*third, calls));
        }
    }
    const double ma = median(a), mb = median(b);
    std::printf("%-22s old %9.1f  new %9.1f  new/old %5.2f", l.name.c_str(), ma, mb, mb / ma);
    if (third != nullptr) {
        std::printf("  lambda %9.1f (%4.2f)", median(c), median(c) / ma);
    }
    std::printf("  err %.1e\n", err);
    std::fflush(stdout);
}

void depthwise(const layer& l, uint64_t& st) {
    const int64_t C = l.cin, pad = l.k / 2, out = (l.side + 2 * pad - l.k) / l.stride + 1;
    ks::conv_shape s{C, C, C, {1, l.side, l.side}, {1, out, out}, {1, l.k, l.k}, {1, l.stride, l.stride},
                     {1, 1, 1}, {0, pad, pad}};
    const int64_t in = l.side * l.side, n = out * out;
    std::vector<float> x(C * in), xl(C * in), w(C * l.k * l.k), bias(C), y(C * n), yl(C * n);
    for (auto& v : x) v = noise(st);
    for (auto& v : w) v = noise(st);
    for (auto& v : bias) v = noise(st);
    for (int64_t c = 0; c < C; ++c) {
        for (int64_t p = 0; p < in; ++p) {
            xl[p * C + c] = x[c * in + p];
        }
    }
    std::vector<float> room(ks::depthwise_scratch<float>(s) + 16), room_cl(ks::depthwise_cl_scratch<float>(s));
    const ks::affine<float> f = ks::make_affine<float>(bias.data(), 3, 0.0f, 6.0f);
    const auto old_call = [&] {
        ks::conv_depthwise<float>(s, 1, x.data(), w.data(), y.data(), room.data(), ks::affine_epilogue<float>(f));
    };
    const auto new_call = [&] {
        ks::conv_depthwise_cl<float>(s, 1, xl.data(), w.data(), yl.data(), room_cl.data(), ks::affine_epilogue<float>(f));
    };
    old_call();
    new_call();
    double err = 0;
    for (int64_t c = 0; c < C; ++c) {
        for (int64_t p = 0; p < n; ++p) {
            err = std::max(err, double(std::fabs(y[c * n + p] - yl[p * C + c])));
        }
    }
    time_layer(l, old_call, new_call, static_cast<decltype(old_call)*>(nullptr), err);
}

void pointwise(const layer& l, uint64_t& st) {
    const int64_t C = l.cin, M = l.cout, n = l.side * l.side;
    constexpr int P = ks::panel_width<float>;
    ks::conv_shape s{C, M, 1, {1, l.side, l.side}, {1, l.side, l.side}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}};
    std::vector<float> x(C * n), xl(C * n), w(M * C), bias(M), y(M * n), yl(M * n);
    for (auto& v : x) v = noise(st);
    for (auto& v : w) v = noise(st);
    for (auto& v : bias) v = noise(st);
    for (int64_t c = 0; c < C; ++c) {
        for (int64_t p = 0; p < n; ++p) {
            xl[p * C + c] = x[c * n + p];
        }
    }
    std::vector<float> panels((M + P - 1) / P * P * C, 0.0f);  // (wᵀ [C, M] as panels: conv_pointwise's too)
    for (int64_t p = 0; p < C; ++p) {
        for (int64_t j = 0; j < M; ++j) {
            panels[(j / P) * C * P + p * P + j % P] = w[j * C + p];
        }
    }
    const bool transposed = n >= 16 && n % P > 0 && n % P <= P / 2 && C >= 192;  // (pointwise_applies)
    std::vector<float> room(std::max(ks::conv_scratch<float>(s, false, 1), ks::pointwise_scratch<float>(s)) + 16);
    const ks::affine<float> f = ks::make_affine<float>(bias.data(), 3, 0.0f, 6.0f);
    const auto old_call = [&] {
        if (transposed) {
            ks::conv_pointwise<float>(s, 1, x.data(), panels.data(), y.data(), room.data(), ks::affine_epilogue<float>(f));
        } else {
            ks::conv<float>(s, 1, x.data(), w.data(), y.data(), room.data(), ks::affine_epilogue<float>(f));
        }
    };
    const ks::matrix<const float> a{xl.data(), C, 1};
    const ks::matrix<float> c{yl.data(), M, 1};
    const auto new_call = [&] {
        ks::packed_gemm<float>(n, M, C, a, {panels.data(), C}, c, false, ks::column_affine_epilogue<float>(f));
    };
    const auto lambda = [&](int64_t, int64_t j, float v) {
        float t = v + bias[j];
        t = t < 0.0f ? 0.0f : t;
        return t > 6.0f ? 6.0f : t;
    };
    const auto lambda_call = [&] {
        ks::packed_gemm<float>(n, M, C, a, {panels.data(), C}, c, false, ks::product_epilogue<float>(lambda));
    };
    old_call();
    new_call();
    double err = 0;
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t p = 0; p < n; ++p) {
            err = std::max(err, double(std::fabs(y[m * n + p] - yl[p * M + m])));
        }
    }
    time_layer(l, old_call, new_call, &lambda_call, err);
}

// What a channels-last region's entry or exit costs: [C, H·W] -> [H·W, C] ("old") and back ("new"), 16 × 16 blocks
// (whole blocks with literal bounds, which GCC turns into vector shuffles; the edges by plain loops).
void transpose(const float* from, float* to, int64_t rows, int64_t cols) {  // to [cols, rows] = fromᵀ
    const int64_t whole_r = rows / 16 * 16, whole_c = cols / 16 * 16;
    for (int64_t r0 = 0; r0 < whole_r; r0 += 16) {
        for (int64_t c0 = 0; c0 < whole_c; c0 += 16) {
            float b[16][16];
            for (int r = 0; r < 16; ++r) {
                for (int c = 0; c < 16; ++c) {
                    b[c][r] = from[(r0 + r) * cols + c0 + c];
                }
            }
            for (int c = 0; c < 16; ++c) {
                std::memcpy(to + (c0 + c) * rows + r0, b[c], sizeof b[c]);
            }
        }
    }
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = r < whole_r ? whole_c : 0; c < cols; ++c) {
            to[c * rows + r] = from[r * cols + c];
        }
    }
}

void transposes(const layer& l, uint64_t& st) {
    const int64_t C = l.cin, n = l.side * l.side;
    std::vector<float> x(C * n), t(C * n), y(C * n);
    for (auto& v : x) v = noise(st);
    const auto in_call = [&] { transpose(x.data(), t.data(), C, n); };
    const auto out_call = [&] { transpose(t.data(), y.data(), n, C); };
    in_call();
    out_call();
    double err = 0;
    for (int64_t i = 0; i < C * n; ++i) {
        err = std::max(err, double(std::fabs(x[i] - y[i])));
    }
    time_layer(l, in_call, out_call, static_cast<decltype(in_call)*>(nullptr), err);
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<layer> layers = {
        // MobileNetV2's depthwise layers (3 × 3), EfficientNet-B0's 5 × 5 ones, MobileNetV3-small's 72 and 88 channels
        {"dw3 32x112", 32, 0, 3, 1, 112},   {"dw3 144x56", 144, 0, 3, 1, 56},  {"dw3 192x28", 192, 0, 3, 1, 28},
        {"dw3 384x14", 384, 0, 3, 1, 14},   {"dw3 576x14", 576, 0, 3, 1, 14},  {"dw3 960x7", 960, 0, 3, 1, 7},
        {"dw3 96x112 s2", 96, 0, 3, 2, 112}, {"dw3 144x56 s2", 144, 0, 3, 2, 56}, {"dw3 192x28 s2", 192, 0, 3, 2, 28},
        {"dw3 576x14 s2", 576, 0, 3, 2, 14}, {"dw3 88x28", 88, 0, 3, 1, 28},   {"dw3 72x56 s2", 72, 0, 3, 2, 56},
        {"dw5 120x28", 120, 0, 5, 1, 28},   {"dw5 480x14", 480, 0, 5, 1, 14},  {"dw5 1152x7", 1152, 0, 5, 1, 7},
        {"dw5 72x56 s2", 72, 0, 5, 2, 56},  {"dw5 240x28 s2", 240, 0, 5, 2, 28}, {"dw5 672x14 s2", 672, 0, 5, 2, 14},
        // MobileNetV2's pointwise layers
        {"pw 16>96 x112", 16, 96, 1, 1, 112}, {"pw 24>144 x56", 24, 144, 1, 1, 56}, {"pw 144>24 x56", 144, 24, 1, 1, 56},
        {"pw 32>192 x28", 32, 192, 1, 1, 28}, {"pw 192>32 x28", 192, 32, 1, 1, 28}, {"pw 64>384 x14", 64, 384, 1, 1, 14},
        {"pw 384>64 x14", 384, 64, 1, 1, 14}, {"pw 576>96 x14", 576, 96, 1, 1, 14}, {"pw 96>576 x14", 96, 576, 1, 1, 14},
        {"pw 160>960 x7", 160, 960, 1, 1, 7}, {"pw 960>160 x7", 960, 160, 1, 1, 7}, {"pw 960>320 x7", 960, 320, 1, 1, 7},
        {"pw 320>1280 x7", 320, 1280, 1, 1, 7},
    };
    uint64_t st = 7;
    // (an argument "dw:K:S:C:SIDE", "pw:CIN:COUT:SIDE" or "tr:C:SIDE" times that layer alone: benchmarks/models/depthwise_layers.py
    // passes a network's layers so)
    bool specs = false;
    for (int i = 1; i < argc; ++i) {
        long a = 0, b = 0, c = 0, d = 0;
        if (std::sscanf(argv[i], "dw:%ld:%ld:%ld:%ld", &a, &b, &c, &d) == 4) {
            depthwise({argv[i], c, 0, a, b, d}, st);
            specs = true;
        } else if (std::sscanf(argv[i], "tr:%ld:%ld", &a, &b) == 2) {
            transposes({argv[i], a, 0, 1, 1, b}, st);
            specs = true;
        } else if (std::sscanf(argv[i], "pw:%ld:%ld:%ld", &a, &b, &c) == 3) {
            pointwise({argv[i], a, b, 1, 1, c}, st);
            specs = true;
        }
    }
    if (specs) {
        return 0;
    }
    for (const layer& l : layers) {
        bool chosen = argc < 2;
        for (int i = 1; i < argc; ++i) {
            chosen = chosen || l.name.find(argv[i]) != std::string::npos;
        }
        if (!chosen) {
            continue;
        }
        if (l.cout == 0) {
            depthwise(l, st);
        } else {
            pointwise(l, st);
        }
    }
    return 0;
}
