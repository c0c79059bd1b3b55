// ks::qconv alone on ResNet-18's convolution shapes (benchmarks/int8/layers.py --kernels times onnxruntime's
// QLinearConv on the same shapes, uint8 in and out): CPU time per call, best of 7 samples of >= 30 ms.
//     g++ -std=c++17 -O3 -fno-math-errno -Iprelude benchmarks/int8/qconv_layers.cpp -o /tmp/qconv_layers
//     /tmp/qconv_layers [images] [layer]
#define KS_KERNELS_INSTANTIATE
#include <ks/kernels.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <ctime>
static double now() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {  // (inputs, weights: fixed patterns; the checksum says two builds agree)
    struct L { const char* name; int64_t cin, cout, k, s, side; };
    L ls[] = {{"conv1",3,64,7,2,224},{"l1_3x3",64,64,3,1,56},{"l2_3x3s2",64,128,3,2,56},{"l2_1x1s2",64,128,1,2,56},
              {"l2_3x3",128,128,3,1,28},{"l3_3x3s2",128,256,3,2,28},{"l3_1x1s2",128,256,1,2,28},{"l3_3x3",256,256,3,1,14},
              {"l4_3x3s2",256,512,3,2,14},{"l4_1x1s2",256,512,1,2,14},{"l4_3x3",512,512,3,1,7},{"dense1x1",1024,256,1,1,32}};
    const int images = argc > 1 ? atoi(argv[1]) : 1;
    const char* only = argc > 2 ? argv[2] : nullptr;
    for (const L& l : ls) {
        if (only && strcmp(only, l.name)) continue;
        ks::conv_shape s{};
        s.channels = l.cin; s.out_channels = l.cout; s.groups = 1;
        s.in[0] = s.out[0] = s.kernel[0] = s.stride[0] = s.dilation[0] = 1;
        for (int a = 1; a < 3; ++a) { s.in[a] = l.side; s.kernel[a] = l.k; s.stride[a] = l.s; s.dilation[a] = 1; s.pad[a] = l.k / 2;
            s.out[a] = (l.side + 2 * s.pad[a] - l.k) / l.s + 1; }
        std::vector<uint8_t> x(images * s.channels * s.in_plane(), 3);
        for (size_t i = 0; i < x.size(); ++i) x[i] = (uint8_t)(i * 7 + i / 13);
        std::vector<int8_t> w(s.out_channels * s.depth());
        for (size_t i = 0; i < w.size(); ++i) w[i] = (int8_t)(i * 5 + 1);
        std::vector<uint8_t> packed(ks::qconv_packed_size(s.out_channels, s.depth(), 1));
        ks::qpack_rows(s.out_channels, s.depth(), 1, w.data(), packed.data());
        std::vector<float> sc(s.out_channels, 0.0001f);
        ks::requant q{nullptr, sc.data(), s.out_channels, 7, 3, 3, 255};
        std::vector<uint8_t> y(images * s.out_channels * s.positions());
        std::vector<uint64_t> scr(ks::qconv_scratch(s) / 8 + 16);
        uint8_t* scratch = (uint8_t*)(((uintptr_t)scr.data() + 63) / 64 * 64);
        ks::qconv<uint8_t, uint8_t>(s, images, x.data(), packed.data(), y.data(), scratch, q);
        double best = 1e9;
        for (int r = 0; r < 7; ++r) {
            int n = 0; double t0 = now(), t;
            do { ks::qconv<uint8_t, uint8_t>(s, images, x.data(), packed.data(), y.data(), scratch, q); ++n; t = now() - t0; } while (t < 0.03);
            best = std::min(best, t / n);
        }
        unsigned sum = 0; for (auto v : y) sum = sum * 31 + v;
        const double macs = double(images) * s.out_channels * s.positions() * s.depth();
        std::printf("%-10s %8.3f ms %6.1f GMAC/s  checksum %08x\n", l.name, best * 1e3, macs / best * 1e-9, sum);
    }
}
