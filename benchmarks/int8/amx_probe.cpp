// A probe, not part of ksbuild (issue 35; docs/quantization.md, Not yet: AMX): an AMX TDPBUSD product over ksbuild's
// packed weights as ks::qpack_columns lays them out ([n/32][quads][32][4]: a quad's 32 columns are two 64-byte rows of
// an AMX B tile, loaded with a stride of 128), the activations' tiles loaded in place (uint8, stride lda), against
// ks::qmatmul<uint8_t, float> (the AVX-512 VNNI tiles), same inputs, CPU time in turn (median of 15), results compared
// bit for bit. Only whole tiles: rows % 32, columns % 32, depth % 64 == 0. Linux (the arch_prctl permission request
// for the tile data, as onnxruntime's MLAS makes it), a CPU with amx_tile and amx_int8:
//
//     g++ -std=c++17 -O3 -march=x86-64-v4 -fno-math-errno -Iprelude benchmarks/int8/amx_probe.cpp -o amx_probe
//     ./amx_probe           (built with -DROWS_OUTER: blocks of rows outermost, the blocks of columns inside)
#define KS_KERNELS_INSTANTIATE
#include <ks/kernels.h>

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

struct alignas(64) tile_config {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static bool amx_permitted() {
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}

// y [m, n] f32 = (Σ_k a[i, k]·b[k, j] - x_zero·colsum[j] + bias[j]) · scale[j]: m % 32 == 0, n % 32 == 0, k % 64 == 0.
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl"))) __attribute__((noinline))
void amx_qmatmul(int64_t m, int64_t depth, int64_t n, const uint8_t* a, int64_t lda, const uint8_t* packed,
                 const int32_t* offsets, const float* scale, float* y) {
    tile_config cfg{};
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    alignas(64) int32_t acc[32 * 32];
    const int64_t quads = depth / 4;
#ifdef ROWS_OUTER
    for (int64_t i0 = 0; i0 < m; i0 += 32) {
        for (int64_t j0 = 0; j0 < n; j0 += 32) {
            const uint8_t* bt = packed + (j0 / 32) * quads * 128;
#else
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
        const uint8_t* bt = packed + (j0 / 32) * quads * 128;
        for (int64_t i0 = 0; i0 < m; i0 += 32) {
#endif
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t k0 = 0; k0 < depth; k0 += 64) {
                _tile_loadd(4, a + i0 * lda + k0, lda);
                _tile_loadd(5, a + (i0 + 16) * lda + k0, lda);
                _tile_loadd(6, bt + (k0 / 4) * 128, 128);
                _tile_loadd(7, bt + (k0 / 4) * 128 + 64, 128);
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 4, 7);
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
            }
            _tile_stored(0, acc, 128);
            _tile_stored(1, acc + 16, 128);
            _tile_stored(2, acc + 16 * 32, 128);
            _tile_stored(3, acc + 16 * 32 + 16, 128);
            const __m512 s0 = _mm512_loadu_ps(scale + j0), s1 = _mm512_loadu_ps(scale + j0 + 16);
            const __m512i o0 = _mm512_loadu_si512(offsets + j0), o1 = _mm512_loadu_si512(offsets + j0 + 16);
            for (int r = 0; r < 32; ++r) {
                float* yr = y + (i0 + r) * n + j0;
                _mm512_storeu_ps(yr, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(acc + r * 32), o0)), s0));
                _mm512_storeu_ps(yr + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(acc + r * 32 + 16), o1)), s1));
            }
        }
    }
    _tile_release();
}

static double cpu() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main() {
    if (!amx_permitted()) {
        std::printf("no AMX permission\n");
        return 1;
    }
    const int64_t shapes[][3] = {{1024, 512, 2048}, {1024, 2048, 512}, {1024, 512, 512}, {128, 512, 2048}};
    uint64_t state = 7;
    for (const auto& s : shapes) {
        const int64_t m = s[0], depth = s[1], n = s[2];
        std::vector<uint8_t> a(static_cast<size_t>(m * depth));
        std::vector<int8_t> b(static_cast<size_t>(depth * n));
        for (auto& v : a) v = static_cast<uint8_t>((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 56);
        for (auto& v : b) v = static_cast<int8_t>((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 56);
        std::vector<int32_t> bias(static_cast<size_t>(n));
        std::vector<float> scale(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
            bias[j] = static_cast<int32_t>(j * 37 % 1000) - 500;
            scale[j] = 1e-4f * static_cast<float>(1 + j % 7);
        }
        const int32_t x_zero = 131;
        std::vector<uint8_t> packed(static_cast<size_t>(ks::qmatmul_packed_size(depth, n)));
        ks::qpack_columns(depth, n, b.data(), packed.data());
        std::vector<int32_t> offsets(static_cast<size_t>(n));
        const int32_t* sums = reinterpret_cast<const int32_t*>(packed.data() + ks::qtile::tiles_size(n, depth, 32));
        for (int64_t j = 0; j < n; ++j) offsets[j] = bias[j] - x_zero * sums[j];
        std::vector<uint64_t> scratch(static_cast<size_t>(ks::qmatmul_scratch(depth, n) / 8 + 8));
        uint8_t* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
        std::vector<float> y1(static_cast<size_t>(m * n)), y2(static_cast<size_t>(m * n));
        const ks::requant q{bias.data(), scale.data(), n, x_zero, 0, 0, 0};
        auto ks_run = [&] { ks::qmatmul<uint8_t, float>(m, depth, n, a.data(), depth, packed.data(), y1.data(), aligned, q); };
        auto amx_run = [&] { amx_qmatmul(m, depth, n, a.data(), depth, packed.data(), offsets.data(), scale.data(), y2.data()); };
        ks_run();
        amx_run();
        const bool same = std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0;
        std::vector<double> t1, t2;
        for (int r = 0; r < 15; ++r) {
            double t = cpu();
            for (int i = 0; i < 5; ++i) ks_run();
            t1.push_back((cpu() - t) / 5);
            t = cpu();
            for (int i = 0; i < 5; ++i) amx_run();
            t2.push_back((cpu() - t) / 5);
        }
        std::sort(t1.begin(), t1.end());
        std::sort(t2.begin(), t2.end());
        std::printf("[%lld, %lld] · [%lld, %lld]: ks::qmatmul %.3f ms, AMX %.3f ms, AMX / ks %.2f, equal %s\n",
                    (long long)m, (long long)depth, (long long)depth, (long long)n, t1[7] * 1e3, t2[7] * 1e3,
                    t2[7] / t1[7], same ? "yes" : "NO");
    }
    return 0;
}
