// ks/gemm.h — matrix products in portable C++ (no heap, no library), for backend = "plain".
//
// Generated code calls ks::tiled_gemm for every float contraction shaped like a (batched) matrix
// product, c = a · b or c += a · b, on strided operands, and ks::packed_gemm when b is a constant
// stored as panels when the package was compiled (transforms/layout_constants.py).
//
// The work is done by one register tile, `micro`: an MR x (NP panels of P columns) block of c held in
// vector registers while the k loop adds a[i][p] · b[p][j..j+P) to each of its rows. Every b vector
// loaded is used MR times, every a element NP·P times. The vectors are GCC/Clang vector extensions of
// the widest size the target compiles for (AVX-512, AVX, SSE2, NEON; one lane elsewhere), so the
// accumulators stay in registers without intrinsics. b is read as panels: P = 64 bytes of columns
// (16 floats, 8 doubles) by k rows, contiguous, the last panel zero-padded. A run-time b is packed
// into panels block by block in the caller's scratch (`tiled_gemm_scratch` elements); without
// scratch, or for fewer rows than a tile, b's rows are read where they are.
//
// An epilogue runs over each block of c once it holds its final values: c[i][j] = f(i, j, c[i][j]), where f is
// the elementwise work that followed the product (a bias and an activation: fuse_epilogue). It is a run-time
// value (ks::epilogue: a function pointer and its data) so that these kernels are compiled once per target and
// instruction set level (src/ks/kernels.cpp) whatever epilogues the generated code passes them; the generated
// code makes one with ks::product_epilogue / ks::conv_epilogue (ks/kernels.h) from a lambda.
//
// Measured (docs/performance.md): a 64 x 784 by 784 x 512 float product with b packed runs at about
// 90 GFLOP/s with AVX2 + FMA on one core of an AMD EPYC (Zen 3).
#ifndef KS_GEMM_H
#define KS_GEMM_H

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "prelude.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif


namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

// A strided matrix: element (i, j) is data[i * rs + j * cs].
template <class T>
struct matrix {
    T* data;
    int64_t rs;
    int64_t cs;

    matrix<T> transposed() const { return {data, cs, rs}; }
};

// Columns per panel: 64 bytes (a cache line).
template <class T>
constexpr int panel_width = 64 / static_cast<int>(sizeof(T));

// A k x n matrix stored as ceil(n / P) panels of k rows of P consecutive columns, the last one
// zero-padded: element (p, j) is data[(j / P) * k * P + p * P + j % P].
template <class T>
struct panels {
    const T* data;
    int64_t k;
};

// The commonest epilogue as data: v + bias[i] (i: the row of the result, a convolution's output channel), then
// clamped below at lo and above at hi (no bias: nullptr; no bound: an infinite one, which changes nothing). The
// kernels that can apply it to their accumulators before they store do (ks::tiles::micro, the depthwise sums):
// no call and no second pass over the results. The comparisons are the generated code's own (v < lo ? lo : v),
// so the results are the lambda's, bit for bit, NaN included.
template <class T>
struct affine {
    const T* bias = nullptr;
    T lo = -std::numeric_limits<T>::infinity();
    T hi = std::numeric_limits<T>::infinity();
    bool on = false;
    bool columns = false;  // (the bias by column, bias[j]: a channels-last product's, set by epilogue::in_tiles)

    explicit operator bool() const { return on; }

    // This epilogue from the result's row `from` on.
    affine from(int64_t i) const {
        affine a = *this;
        a.bias = bias != nullptr ? bias + i : nullptr;
        return a;
    }

    // Row i's value v with the bias added and the bounds applied (ks::tiles::finish: a vector of them).
    T at(int64_t i, T v) const { return apply(v, bias != nullptr ? bias[i] : T(0)); }
    T apply(T v, T b) const {
        v = bias != nullptr ? v + b : v;
        v = v < lo ? lo : v;
        return v > hi ? hi : v;
    }
};

// The elementwise work that follows a product or a convolution, applied to a block of results once they are
// final: run(self, image, i, j, out, rs, cs, rows, cols) sets out[r·rs + q·cs] = f(image, i + r, j + q, that
// value) for r < rows, q < cols. Of a matrix product, (i, j) is the element of c (image 0); of a convolution,
// i is the output channel and j the flat output position. No run: nothing to apply, or, with self, self is a
// ks::affine (ks::affine_epilogue: no member of its own, so that the epilogues the kernels copy stay small; one
// more made GCC's frames of tiles::block 60% larger).
// Whether the tiles apply an affine epilogue by column (ks::column_affine_epilogue) to their accumulators: for float;
// a double one runs as any epilogue over each block (in the tiles it made tiles::block<double, .., 8, ..>'s frame 560 B
// on AVX-512, over the kernel layer's 512 B).
template <class T>
constexpr bool columns_in_tiles = sizeof(T) == 4;

template <class T>
struct epilogue {
    using run_fn = void (*)(const void* self, int64_t image, int64_t i, int64_t j, T* out, int64_t rs, int64_t cs,
                            int64_t rows, int64_t cols);
    run_fn run = nullptr;
    const void* self = nullptr;
    int64_t image = 0;     // (a convolution's image, for its products' blocks)
    int64_t first = 0;     // (the row of the whole result where this product's rows start: a group's channels)
    bool swapped = false;  // (the product computed transposed: cᵀ = bᵀ · aᵀ)

    explicit operator bool() const { return run != nullptr || self != nullptr; }

    // The affine epilogue a kernel applies itself to the rows of its result from row i on, as it stores them, or
    // none (then it calls this epilogue over what it stored).
    affine<T> in_registers(int64_t i) const {
        return run == nullptr && self != nullptr && !swapped ? simple().from(first + i) : affine<T>{};
    }
    const affine<T>& simple() const { return *static_cast<const affine<T>*>(self); }

    // The affine epilogue a block of tiles applies itself to its result from (i, j) on: by row as in_registers, or,
    // for an affine epilogue by column (ks::column_affine_epilogue: swapped, the bias per column j, which is a
    // channels-last product's output channel, one per vector lane), by column from j on.
    affine<T> in_tiles(int64_t i, int64_t j) const {
        if (run != nullptr || self == nullptr || (swapped && !columns_in_tiles<T>)) {
            return affine<T>{};
        }
        affine<T> a = simple().from(first + (swapped ? j : i));
        a.columns = swapped;
        return a;
    }

    // f over rows x cols results from (i, j) of this product at out (element (r, q) at out[r·rs + q·cs]).
    void operator()(int64_t i, int64_t j, T* out, int64_t rs, int64_t cs, int64_t rows, int64_t cols) const {
        if (rows <= 0 || cols <= 0) {
            return;
        }
        if (run == nullptr) {
            if (self != nullptr) {
                apply_simple(i, j, out, rs, cs, rows, cols);
            }
            return;
        }
        if (swapped) {
            run(self, image, first + j, i, out, cs, rs, cols, rows);
        } else {
            run(self, image, first + i, j, out, rs, cs, rows, cols);
        }
    }

    __attribute__((noinline)) void apply_simple(int64_t i, int64_t j, T* out, int64_t rs, int64_t cs, int64_t rows,
                                                int64_t cols) const {
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t q = 0; q < cols; ++q) {
                T& o = out[r * rs + q * cs];
                o = simple().at(first + (swapped ? j + q : i + r), o);
            }
        }
    }

    // This epilogue as seen by one group's product of one image: its rows are output channels from `from` on.
    // (Added to this one's own image and first row: the part of a layer one thread computes (ks/parts.h) passes
    // the kernel an epilogue already moved to its first image and channel.)
    epilogue group(int64_t of_image, int64_t from) const {
        epilogue e = *this;
        e.image = image + of_image;
        e.first = first + from;
        return e;
    }

    // As seen by the transposed product.
    epilogue transposed() const {
        epilogue e = *this;
        e.swapped = !swapped;
        return e;
    }
};

namespace tiles {

// The target's vectors and the register tile: MR rows by NP panels (its accumulators fill about
// three quarters of the vector registers).
#if defined(__AVX512F__)
constexpr int vector_bytes = 64;
#define KS_GEMM_TILE 8, 2
#elif defined(__AVX__)
constexpr int vector_bytes = 32;
#define KS_GEMM_TILE 6, 1
#elif defined(__aarch64__)
constexpr int vector_bytes = 16;
#define KS_GEMM_TILE 6, 1
#elif defined(__SSE2__) || defined(__ARM_NEON)
constexpr int vector_bytes = 16;
#define KS_GEMM_TILE 3, 1
#else
constexpr int vector_bytes = 0;  // no vector unit: one lane
#define KS_GEMM_TILE 1, 1
#endif
// Whether the tiles apply an affine epilogue to their accumulators (ks::affine): with vectors. With one lane (a
// microcontroller) the block applies it after its tiles, as any epilogue: in the tile it made each of the
// Cortex-M4's four blocks of tiles about 1 KB larger.
constexpr bool affine_in_tiles = vector_bytes > 0;
// The AFFINE argument of ks::tiles::block for the blocks that never get an affine epilogue (the Winograd products):
// false, no code for it in their tiles; with one lane, where no tile applies one, true:
// the other blocks' instantiation, not a copy of it in a microcontroller's flash.
constexpr bool never_affine = !affine_in_tiles;
#ifdef KS_GEMM_TILE_OVERRIDE  // (rows, panels), to measure other shapes
#undef KS_GEMM_TILE
#define KS_GEMM_TILE KS_GEMM_TILE_OVERRIDE
#endif
constexpr int tile_shape[2] = {KS_GEMM_TILE};
constexpr int row_block = tile_shape[0];
constexpr int panel_block = tile_shape[1];
// The rows of ks::packed_gemm's tiles: with 32 vector registers, 12 rows x 2 panels (24 accumulators) read
// each vector of a constant's panels 12 times instead of 8 (measured: docs/performance.md).
#ifdef KS_GEMM_TALL_OVERRIDE  // (rows), to test the tall tiles on any target
constexpr int tall_block = KS_GEMM_TALL_OVERRIDE;
#else
constexpr int tall_block = vector_bytes == 64 && row_block == 8 && panel_block == 2 ? 12 : row_block;
#endif

// Tiles of fewer than min_rows rows use each vector of b's panels at most 4 times per k, and GCC 12 on x86 then
// reads it again from L1 for every row (a memory operand of each multiply-add) instead of keeping it in a
// register: on AVX-512, tiles of 2 to 4 rows ran at 40-60% of the FMA peak where tiles of 5 to 8 ran at 95-100%
// (docs/performance.md). So the rows left below the tall tiles make tiles of min_rows to row_block rows where they
// can, and 3 or 4 rows left run as a tile of min_rows whose extra rows are computed but not stored (padded).
#if defined(__x86_64__) || defined(__i386__)
constexpr int min_rows = 5;
#else
constexpr int min_rows = 1;  // (no multiply-add takes a memory operand)
#endif

// Whether the tiles prefetch a constant's next panels (panel_rows::next): not on a microcontroller (an M-profile
// Arm core: no data cache to fetch into), where the arithmetic only added code and two 64-bit divisions per tile.
// There a block of tiles is also called, not inlined (KS_BLOCK): one copy of the tile for all the products and
// convolutions that use it (inlined into packed_gemm, in_place and packed_group: 2.3-5.6 KB each at -O3).
// Its products are dot products, not tiles (dot_products: see tiles::panel_dots).
// KS_SIZE_DOTS (1 at optimize = "size" on such a core, -Os): the dot products and ks::conv_dots in their smaller
// forms (4 columns or kernel rows at a time, an epilogue over a whole block, convolution windows gathered).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && defined(__OPTIMIZE_SIZE__)
#define KS_SIZE_DOTS 1
#else
#define KS_SIZE_DOTS 0
#endif
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
constexpr bool prefetch_ahead = false;
constexpr bool dot_products = true;
#if defined(__GNUC__) && !defined(__clang__)
#define KS_BLOCK __attribute__((noinline, noclone))  // (GCC cloned it per caller's constants: two copies again)
// The dot products' functions (tiles::panel_dots): out of line, and at -O3 without a second copy of each loop for a
// stride of 1 (-fversion-loops-for-strides: no gain without vectors; panel_dot<float, 16> 544 -> 388 B), and no
// loop made a call of memset (-ftree-loop-distribute-patterns: a convolution window's row of padding; the build's
// stack figure counts libc's calls as 0 B, and newlib's memset pushes 12 B).
#define KS_DOTS                                                                                                  \
    __attribute__((noinline, noclone, optimize("no-version-loops-for-strides", "no-tree-loop-distribute-patterns")))
#define KS_DENSE                                                                                                 \
    __attribute__((noinline, noclone,                                                                            \
                   optimize("no-version-loops-for-strides", "no-tree-loop-distribute-patterns", "no-unswitch-loops")))
#else
#define KS_BLOCK __attribute__((noinline))
#define KS_DOTS __attribute__((noinline))
#define KS_DENSE __attribute__((noinline))
#endif
#define KS_OWN_FRAME __attribute__((always_inline)) inline
#else
constexpr bool prefetch_ahead = true;
constexpr bool dot_products = false;
// (noclone in the matrix products' object, which compiles them alone (KS_KERNELS_PRODUCTS: ks/kernels.cpp): GCC's copy
// of a block specialized for a caller's constants had a frame of 560 B there, the block's own 496; in the whole
// layer's translation unit noclone made another block's frame 560 B)
#if defined(KS_KERNELS_PRODUCTS) && defined(__GNUC__) && !defined(__clang__)
#define KS_BLOCK inline __attribute__((noclone))
#else
#define KS_BLOCK inline
#endif
#define KS_DOTS __attribute__((noinline))
#define KS_DENSE __attribute__((noinline))
// KS_OWN_FRAME: a function called out of line, so that its values do not fill its caller's frame beside the
// caller's own (the rows a block of tiles leaves below them, a convolution's block of tiles: frames of 0.5-0.75 KB
// on the x86 levels; issue 36: none above 512 B); inlined on a microcontroller, whose flash a call costs.
#define KS_OWN_FRAME __attribute__((noinline))
#endif

// Whether a block of tiles whose a is read once from beyond L2 (row_tiles::streamed: a layer's kernel rows read as
// they are) prefetches a's next row tile from the tiles of its first panels (ahead_block). On AVX-512 only, where it
// was measured (an Intel Xeon whose hardware prefetchers did not fetch those rows ahead: docs/performance.md); the
// other levels' code is as it was. Of float: a double one would be 5 KB more code no network measured here runs.
template <class T>
constexpr bool rows_ahead = prefetch_ahead && vector_bytes == 64 && sizeof(T) == 4;

// a / b of indices (a >= 0, b > 0): in 32 bits on a 32-bit target, where every index into memory fits, so that no
// 64-bit division is compiled there (on a Cortex-M a call of libgcc's __aeabi_ldivmod: 0.7 KB of code, ~100
// instructions a call).
constexpr int64_t index_div(int64_t a, int64_t b) {
    if (sizeof(void*) < 8) {
        return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b));
    }
    return a / b;
}

// a % b of indices (a >= 0, b > 0), the same way.
constexpr int64_t index_mod(int64_t a, int64_t b) {
    return a - index_div(a, b) * b;
}

#ifndef KS_GEMM_KC
#define KS_GEMM_KC 1024
#endif
#ifndef KS_GEMM_NCP
#define KS_GEMM_NCP 4
#endif
constexpr int64_t k_block = KS_GEMM_KC;       // KC: the k rows of b a tile runs over before c is stored
constexpr int64_t panels_per_block = KS_GEMM_NCP;  // NC / P: the columns of b packed at a time
constexpr int dot_block = 4;

// A vector of B bytes of T; with one lane (no vector unit: Cortex-M) the element type itself: GCC kept a 1-lane
// vector type in memory, so a Cortex-M4 tile loaded and stored every accumulator around each multiply-add (126
// instructions per k step of a 16-column panel); as floats they stay in the FPU's registers. (A member typedef,
// not std::conditional: a template argument would drop the vector_size attribute.)
template <class T, int B, bool one_lane>
struct vector_of {
    typedef T type __attribute__((vector_size(B)));
};
template <class T, int B>
struct vector_of<T, B, true> {
    typedef T type;
};

template <class T>
struct simd {
    static constexpr int bytes = vector_bytes > 0 ? vector_bytes : static_cast<int>(sizeof(T));
    static constexpr int lanes = bytes / static_cast<int>(sizeof(T));
    typedef typename vector_of<T, bytes, lanes == 1>::type v;
};

// x in every lane. (x - 0 is x exactly, so GCC and Clang emit one broadcast; a loop over the lanes
// becomes a chain of inserts.)
template <class T>
inline typename simd<T>::v splat(T x) {
    return x - typename simd<T>::v{};
}

// p, with what the compiler knows of the object it points into forgotten (no instruction is emitted). The
// kernels read whole panels and tiles in code whose bounds depend on run-time sizes; when a caller's
// operand is a small array GCC can see (a constant of a few elements), -Warray-bounds would otherwise
// flag reads in the branches for larger sizes that never run for it.
template <class T>
inline T* opaque(T* p) {
    __asm__("" : "+r"(p));
    return p;
}

// x, as if computed here (no instruction is emitted): the arithmetic on it stays after this point, in the loop
// around it, not hoisted out of that loop (a volatile asm does not move). A register tile's row addresses are
// computed from its c and a this way, so that a block of tiles does not keep each row's address, of each tile
// shape it inlines, in its frame across its loops (tiles::block's frames on AVX-512: 0.7-1 KB of them). Not on an
// M-profile core, whose frames were under 512 B without (its code there is as it was).
template <class V>
inline V fresh(V x) {
#if !defined(__ARM_ARCH_PROFILE) || __ARM_ARCH_PROFILE != 'M'
    __asm__ volatile("" : "+r"(x));
#endif
    return x;
}

// x, as if it were read (no instruction is emitted): a tile's rows computed only to keep b's vectors in registers.
template <class V>
inline void sink(const V& x) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : : "v"(x));
#else
    (void)x;
#endif
}

template <class T>
inline typename simd<T>::v load(const T* p) {
    if constexpr (simd<T>::lanes == 1) {
        return *p;
    }
    typename simd<T>::v r;
    std::memcpy(&r, p, sizeof r);
    return r;
}

// How many panels a tile of `rows` rows covers: a full tile's, or more when there are fewer rows (a
// vector times a matrix), so that enough independent accumulators hide the latency of the adds.
constexpr int panels_for(int rows) {
    return rows >= row_block ? panel_block
                             : (row_block * panel_block / rows < 8 ? row_block * panel_block / rows : 8);
}

// How many k values each block of k_block at most gets: k cut into equal blocks.
constexpr int64_t k_step(int64_t k) {
    const int64_t blocks = (k + k_block - 1) / k_block;
    return blocks > 1 ? index_div(k + blocks - 1, blocks) : k;
}

// The first n lanes of a vector stored at out (added to what is there when load_c). (GCC 12 with AVX-512 warns,
// in a convolution's vjp built with cpu = "native", that the vector may be read uninitialized here: micro sets
// every accumulator first, so the warning is silenced for this function alone.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// x, a vector of row values, with an affine epilogue applied (ks::affine::at): b is the row's bias.
template <class T>
inline typename simd<T>::v finish(typename simd<T>::v x, const affine<T>& e, T b) {
    using V = typename simd<T>::v;
    if (e.bias != nullptr) {
        x += splat<T>(b);
    }
    const V lo = splat<T>(e.lo), hi = splat<T>(e.hi);
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

// The same with a vector of biases, one per lane (an affine epilogue by column: ks::affine::columns).
template <class T>
inline typename simd<T>::v finish_lanes(typename simd<T>::v x, const affine<T>& e, typename simd<T>::v b) {
    using V = typename simd<T>::v;
    if (e.bias != nullptr) {
        x += b;
    }
    const V lo = splat<T>(e.lo), hi = splat<T>(e.hi);
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

template <class T>
inline void store(typename simd<T>::v x, T* out, int n, bool load_c) {
    if (n == simd<T>::lanes) {
        if (load_c) {
            x += load<T>(out);
        }
        std::memcpy(out, &x, sizeof x);
        return;
    }
#if defined(__AVX512F__)
    if constexpr (sizeof x == 64) {  // (a masked store: the vector stays in its register, out of the frame)
        const unsigned mask = (1u << n) - 1;
        if constexpr (sizeof(T) == 4) {
            __m512 v = reinterpret_cast<__m512&>(x);
            v = load_c ? _mm512_add_ps(v, _mm512_maskz_loadu_ps(__mmask16(mask), out)) : v;
            _mm512_mask_storeu_ps(out, __mmask16(mask), v);
        } else {
            __m512d v = reinterpret_cast<__m512d&>(x);
            v = load_c ? _mm512_add_pd(v, _mm512_maskz_loadu_pd(__mmask8(mask), out)) : v;
            _mm512_mask_storeu_pd(out, __mmask8(mask), v);
        }
        return;
    }
#endif
#if defined(__AVX2__)
    if constexpr (sizeof x == 32) {  // (the same with AVX2's masked moves)
        if constexpr (sizeof(T) == 4) {
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            __m256 v = reinterpret_cast<__m256&>(x);
            v = load_c ? _mm256_add_ps(v, _mm256_maskload_ps(out, mask)) : v;
            _mm256_maskstore_ps(out, mask, v);
        } else {
            const __m256i mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
            __m256d v = reinterpret_cast<__m256d&>(x);
            v = load_c ? _mm256_add_pd(v, _mm256_maskload_pd(out, mask)) : v;
            _mm256_maskstore_pd(out, mask, v);
        }
        return;
    }
#endif
    T lanes[simd<T>::lanes];
    std::memcpy(lanes, &x, sizeof x);
    for (int l = 0; l < simd<T>::lanes; ++l) {
        if (l < n) {
            out[l] = load_c ? out[l] + lanes[l] : lanes[l];
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// An affine epilogue over rows just stored (rows x cols at c, rows c_rs apart), read back from cache and written
// again: the rows a tall block leaves to ks::tiles::block's default tiles, a partial tile's. `first`: the bias index
// of c's first row (an affine by row) or of its first column (by column, fin.columns).
template <class T>
__attribute__((noinline)) void finish_rows(const affine<T>& fin, int64_t first, T* c, int64_t c_rs, int64_t rows,
                                           int64_t cols) {
    constexpr int L = simd<T>::lanes;
    const T* by_column = fin.columns && fin.bias != nullptr ? fin.bias + first : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
        T* o = c + r * c_rs;
        const T b = fin.bias != nullptr && !fin.columns ? fin.bias[first + r] : T(0);
        int64_t q = 0;
        for (; q + L <= cols; q += L) {
            const typename simd<T>::v x = by_column != nullptr
                                              ? finish_lanes<T>(load<T>(o + q), fin, load<T>(by_column + q))
                                              : finish<T>(load<T>(o + q), fin, b);
            std::memcpy(o + q, &x, sizeof x);
        }
        for (; q < cols; ++q) {
            o[q] = fin.apply(o[q], by_column != nullptr ? by_column[q] : b);
        }
    }
}

// What a tile prefetches into L2 while it runs: the byte at `from + (p · step >> 16)` as it reaches k row p
// (step: bytes per row, 16-bit fixed point), or nothing when from is 0. When b is a constant's panels read
// once per product (packed_gemm: a layer's weights, which rarely fit in L2), the tiles that share a block of
// panels fetch the panels after it, part by part, so that those arrive from L3 or memory while this block
// computes (docs/performance.md). Panels packed into scratch just before are in cache already: no prefetch.
struct ahead {
    uintptr_t from = 0;
    int64_t step = 0;
};

// Where b's rows are, for the tiles: row p of panel u (P contiguous elements) at row(p, u); and where the
// panels' columns go in c: panel u's first width() columns at column u * width(). Panels stored as
// ks::panels or packed into a block: data + u * ps + p * rs, every column stored (width P).
template <class T>
struct panel_rows {
    const T* data;
    int64_t rs;
    int64_t ps;
    bool streamed = false;  // read from beyond L2 (a constant's panels): prefetch the next ones

    const T* row(int64_t p, int u) const { return data + u * ps + p * rs; }
    panel_rows from(int u) const { return {data + u * ps, rs, ps, streamed}; }  // the panels from u on
    static constexpr int width() { return panel_width<T>; }
    // part `part` of `parts` of the np panels from u on, when they are one run of whole panels (kc rows each)
    ahead next(int u, int np, int64_t kc, int64_t part, int64_t parts) const {
        if (!prefetch_ahead || !streamed || rs != panel_width<T> || ps != kc * panel_width<T> || kc <= 0) {
            return {};
        }
        const int64_t bytes = np * kc * int64_t(sizeof(T)) * panel_width<T> / parts;
        return {reinterpret_cast<uintptr_t>(data) + uintptr_t(u * ps + part * bytes / int64_t(sizeof(T))) * sizeof(T),
                (bytes << 16) / kc};
    }
};

// Rows read where they lie, through a table: row p of panel u at base + offsets[p] + u * ps (the windows
// of a stride-1 convolution read straight from the image: ks/conv.h). Panels are P apart along one output
// row (ps = P, width P), or one output row each when a row has at most P positions (ps: the image rows
// between two output rows; width: the positions of a row, the rest of the panel not stored).
template <class T>
struct table_rows {
    const T* base;
    const int32_t* offsets;
    int64_t ps;
    int cols;

    const T* row(int64_t p, int u) const { return base + offsets[p] + u * ps; }
    table_rows from(int u) const { return {base + u * ps, offsets, ps, cols}; }
    int width() const { return cols; }
    ahead next(int, int, int64_t, int64_t, int64_t) const { return {}; }  // (the rows are the image's own)
};

// c[0..MR)[0..cols) (+)= a[MR x kc] · b[kc x cols], cols <= NP * P, with b's rows where rows(p, u) says. `load`:
// add c's old value. (The epilogue runs over the whole block of tiles afterwards: ks::tiles::block.)
// PACKED: a is packed by pack_a (a_rs = 1, a_cs = row_block), constants in the k loop's address arithmetic; a
// template flag rather than folded arguments, so that they stay constants where GCC calls a tile out of line
// (it does when many products share an instantiation, e.g. a gradient's: docs/performance.md).
// LIVE < MR: only the first LIVE rows are c's; row LIVE + r repeats a's row r negated and is not stored (padded).
// FIN: the tile applies an affine epilogue fin when fin is not null (its bias from index `first` on: of the tile's
// first row, or of its first column for an affine by column); without, no code for it. (One offset for both: a
// column offset of its own made ks::tiles::block's frame 560-576 B on AVX-512, over the kernel layer's 512 B.)
// ROWS: pf is a's next row tile instead (ahead_block): its first row at pf.from, its rows pf.step bytes apart; at k
// row p the tile prefetches element p of that tile's row p % MR, so that every cache line of its rows is fetched.
// UNIT: a's rows are consecutive (a_rs = 1, a constant here: unit_tiles).
template <class T, int MR, int NP, bool PACKED = false, int LIVE = MR, bool FIN = false, bool ROWS = false,
          bool UNIT = false, class Rows>
inline void micro(int64_t kc, const T* a, int64_t a_rs, int64_t a_cs, const Rows& b, T* c,
                                     int64_t c_rs, int cols, bool load_c, ahead pf = {}, const affine<T>* fin = nullptr,
                                     int64_t first = 0) {
    using V = typename simd<T>::v;
    constexpr int P = panel_width<T>;
    constexpr int W = P / simd<T>::lanes;  // vectors per panel row
    // A tile of few accumulators (a vector times one panel) keeps KU sets of them, for KU consecutive values
    // of k, so that the adds do not all wait on one another; they are summed at the end.
    constexpr int KU = MR * NP * W >= 8 ? 1 : 8 / (MR * NP * W);
    a = fresh(a);
    a_rs = UNIT ? 1 : fresh(a_rs);
    V acc[KU][MR][NP * W];
    KS_UNROLL for (int h = 0; h < KU; ++h) {
        KS_UNROLL for (int r = 0; r < MR; ++r) {
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                acc[h][r][q] = splat<T>(T(0));
            }
        }
    }
    const int64_t whole = kc - kc % KU;
    for (int64_t p0 = 0; p0 < kc; p0 += KU) {
        KS_UNROLL for (int h = 0; h < KU; ++h) {
            const int64_t p = p0 + h;
            if (KU > 1 && p0 >= whole && p >= kc) {
                break;
            }
            if (ROWS && pf.from) {
                const uint64_t row = uint64_t(p) % MR;
                __builtin_prefetch(reinterpret_cast<const char*>(pf.from + uintptr_t(row * pf.step) +
                                                                 uintptr_t(p * a_cs) * sizeof(T)), 0, 2);
            } else if (!ROWS && pf.from) {
                __builtin_prefetch(reinterpret_cast<const char*>(pf.from + uintptr_t((p * pf.step) >> 16)), 0, 2);
            }
            V bv[NP * W];
            KS_UNROLL for (int u = 0; u < NP; ++u) {
                KS_UNROLL for (int w = 0; w < W; ++w) {
                    bv[u * W + w] = load<T>(b.row(p, u) + w * simd<T>::lanes);
                }
            }
            KS_UNROLL for (int r = 0; r < MR; ++r) {
                const int ra = r < LIVE ? r : r - LIVE;
                const T ax = PACKED ? a[ra + p * row_block] : UNIT ? a[ra + p * a_cs] : a[ra * a_rs + p * a_cs];
                const V x = splat<T>(r < LIVE ? ax : -ax);  // (negated: else GCC finds the row equal to the last)
                KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                    acc[h][r][q] += x * bv[q];
                }
            }
        }
    }
    KS_UNROLL for (int h = 1; h < KU; ++h) {
        KS_UNROLL for (int r = 0; r < MR; ++r) {
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                acc[0][r][q] += acc[h][r][q];
            }
        }
    }
    KS_UNROLL for (int r = LIVE; r < MR; ++r) {  // rows kept only to keep b's vectors in registers: computed, not stored
        KS_UNROLL for (int q = 0; q < NP * W; ++q) {
            sink(acc[0][r][q]);
        }
    }
    c = fresh(c);  // (the rows' addresses computed here, per tile: fresh)
    c_rs = fresh(c_rs);
    const int width = b.width();
    // (Both stores unrolled: the accumulators stay in registers, and the frame small: KS_UNROLL.)
    if (width == P && cols == NP * P) {  // a whole tile: the accumulators stored as they are
        if constexpr (columns_in_tiles<T>) {
          if (FIN && fin != nullptr && fin->columns) {  // (by column: a bias vector per column vector, for every row)
            const T* bias = fin->bias != nullptr ? fin->bias + first : nullptr;
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                const V b = bias != nullptr ? load<T>(bias + q * simd<T>::lanes) : splat<T>(T(0));
                KS_UNROLL for (int r = 0; r < LIVE; ++r) {
                    T* out = c + r * c_rs + q * simd<T>::lanes;
                    V x = acc[0][r][q];
                    if (load_c) {
                        x += load<T>(out);
                    }
                    x = finish_lanes<T>(x, *fin, b);
                    std::memcpy(out, &x, sizeof x);
                }
            }
            return;
          }
        }
        const bool by_row = FIN && fin != nullptr && (!columns_in_tiles<T> || !fin->columns);
        KS_UNROLL for (int r = 0; r < LIVE; ++r) {
            T* out = c + r * c_rs;
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                V x = acc[0][r][q];
                if (load_c) {
                    x += load<T>(out + q * simd<T>::lanes);
                }
                if (by_row) {
                    x = finish<T>(x, *fin, fin->bias != nullptr ? fin->bias[first + r] : T(0));
                }
                std::memcpy(out + q * simd<T>::lanes, &x, sizeof x);
            }
        }
    } else if constexpr (simd<T>::lanes == 1) {  // a partial tile of one lane (no vector unit): each stored column
        KS_UNROLL for (int r = 0; r < LIVE; ++r) {  // (32-bit tests: 64-bit ones made each tile 2 KB of a Cortex-M's flash)
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                const int u = q / W, at = q % W;  // (panel u, its column at)
                if (at < width && u * width + at < cols) {
                    T* out = c + r * c_rs + u * width + at;
                    *out = load_c ? *out + acc[0][r][q] : acc[0][r][q];
                }
            }
        }
    } else {  // a partial tile: vector by vector, the last of each panel's stored columns lane by lane
        const int64_t stored = cols;  // (a run-time count: GCC then checks no read at columns never stored)
        KS_UNROLL for (int r = 0; r < LIVE; ++r) {
            KS_UNROLL for (int q = 0; q < NP * W; ++q) {
                const int u = q / W, at = (q % W) * simd<T>::lanes;  // (panel u, its columns from `at` on)
                const int64_t left = stored - int64_t(u) * width, panel = left < width ? left : width;
                const int n = panel - at < simd<T>::lanes ? static_cast<int>(panel - at) : simd<T>::lanes;
                if (n <= 0) {
                    continue;
                }
                store<T>(acc[0][r][q], c + r * c_rs + u * width + at, n, load_c);
            }
        }
        if (FIN && fin != nullptr) {  // (a partial tile, at an edge: from cache, not in every store)
            finish_rows<T>(*fin, first, c, c_rs, LIVE, cols);
        }
    }
}

// Where a's rows are: element (r, p) of row tile t (rows [t·MR, t·MR + MR)) is at data + t·ts + r·rs + p·cs.
// As a is given, ts = MR·rs; packed by pack_a, rs = 1, cs = MR, ts = k·MR: a tile's k loop then reads one
// stream, and (PACKED, a template flag) the strides are constants the compiler folds into the loop.
template <class T>
struct row_tiles {
    const T* data;
    int64_t rs;
    int64_t cs;
    int64_t ts;
    bool streamed = false;  // read once, from beyond L2 (a layer's kernel rows as they are): see rows_ahead
};

template <class T>
inline row_tiles<T> rows_of(const T* a, int64_t a_rs, int64_t a_cs) {
    return {a, a_rs, a_cs, row_block * a_rs};
}

// Where a block applies its epilogue tile by tile (see block): the epilogue, and the block's (i, j) in c.
template <class T>
struct tile_epilogue {
    const epilogue<T>* epi = nullptr;
    int64_t i = 0;
    int64_t j = 0;
    const affine<T>* regs = nullptr;  // (the block's affine epilogue, from its first row on: each tile applies it)
};

// Whether a tile of MR rows by NP panels has a second form for an a whose rows are consecutive elements (a_rs = 1:
// ks::conv_pointwise's im2colᵀ and images, read where they lie), micro's UNIT: the float tall tiles of two panels.
// With a_rs a run-time value GCC kept the 12 rows' offsets in registers and spilled 6 of them to the stack, reloading
// them every k (about 60 instructions for 24 multiply-adds); with a_rs = 1 each row is a constant displacement from
// one pointer (ResNet-18's stride-2 layers 0.93-0.96 of the time). Float alone: the second form is ~8 KB of text.
template <class T, int MR, int NP>
constexpr bool unit_tiles = std::is_same_v<T, float> && MR == tall_block && MR != row_block && NP == panel_block;

// One tile: micro with a's strides, folded to constants for a packed a (LIVE: see micro); then, with `after`,
// the epilogue over it (its rows r0... and columns c0... of the block).
template <class T, int MR, int NP, bool PACKED, int LIVE = MR, bool FIN = false, bool ROWS = false, class Rows>
inline void tile(int64_t kc, const row_tiles<T>& a, const T* at, const Rows& b, T* c, int64_t c_rs, int cols,
                 bool load_c, const tile_epilogue<T>& after = {}, int64_t r0 = 0, int64_t c0 = 0, ahead pf = {}) {
    constexpr bool fin = FIN && affine_in_tiles;  // (with one lane, no code for it)
    const int64_t first = fin && after.regs != nullptr && after.regs->columns ? c0 : r0;  // (the affine's bias index)
    if constexpr (PACKED) {
        micro<T, MR, NP, true, LIVE, fin, ROWS>(kc, at, 1, row_block, b, c, c_rs, cols, load_c, pf, after.regs, first);
    } else if constexpr (unit_tiles<T, MR, NP>) {
        if (a.rs == 1) {
            micro<T, MR, NP, false, LIVE, fin, ROWS, true>(kc, at, 1, a.cs, b, c, c_rs, cols, load_c, pf, after.regs,
                                                           first);
        } else {
            micro<T, MR, NP, false, LIVE, fin, ROWS>(kc, at, a.rs, a.cs, b, c, c_rs, cols, load_c, pf, after.regs,
                                                     first);
        }
    } else {
        micro<T, MR, NP, false, LIVE, fin, ROWS>(kc, at, a.rs, a.cs, b, c, c_rs, cols, load_c, pf, after.regs, first);
    }
    if (after.epi != nullptr) {
        (*after.epi)(after.i + r0, after.j + c0, c, c_rs, 1, LIVE, cols);
    }
}

// Whether a tile of `rows` rows runs as one of min_rows rows, the others computed and not stored (see min_rows):
// 3 and 4 rows with 64-byte vectors, 4 with 32-byte ones (a 3-row tile of two 32-byte panels ran at 95% of the
// peak as it is). Measured on AVX-512, per block of 4 panels and 784 values of k: 4 rows 6.4 -> 4.5 us, 3 rows
// 7.2 -> 4.6 us (5 rows: 4.3 us); on AVX2, 4 rows 6.7 -> 4.5 us.
constexpr bool padded(int rows) {
    return rows < min_rows && min_rows < row_block && rows >= (vector_bytes == 64 ? 3 : 4) && 2 * rows >= min_rows;
}

// The panels of rows_tiles' tile of `rows` rows.
constexpr int rest_panels(int rows) {
    return panels_for(padded(rows) ? min_rows : rows);
}

// The panels of packed_gemm's column blocks for m rows: panels_per_block; with fewer rows than a tall tile, whose
// one tile covers rest_panels(m) panels, a whole number of those tiles (b is read once whatever the block). The
// parts of a threaded product start at these blocks (ks/parts.h column_unit), so that they tile as the whole does.
constexpr int64_t block_panels(int64_t m) {
    return m < tall_block ? panels_per_block * rest_panels(static_cast<int>(m)) : panels_per_block;
}

// Rows [i0, m) of c (fewer than row_block): one tile of exactly that many rows, NP = panels_for(rows), or of
// min_rows rows when padded(rows).
// (Out of line, one function per row count, called from rest_rows' chain of tests: the chain inlined adds no
// frames, and each count's tiles have a frame of their own, not one frame holding all of them.)
template <class T, int R, bool PACKED, class Rows>
__attribute__((noinline)) void rows_tiles(int64_t kc, const row_tiles<T>& a, const T* at, const Rows& b,
                                          int panels, T* c, int64_t c_rs, int64_t cols, bool load_c,
                                          const tile_epilogue<T>& after, int64_t r0) {
    constexpr int MR = padded(R) ? min_rows : R;
    constexpr int NP = rest_panels(R);
    const int P = b.width();  // (the columns of c a panel stores)
    for (int u = 0; u < panels; u += NP) {
        const int np = panels - u < NP ? panels - u : NP;
        const int64_t left = cols - int64_t(u) * P;
        const int w = static_cast<int>(left < int64_t(np) * P ? left : int64_t(np) * P);
        if (np == NP) {
            tile<T, MR, NP, PACKED, R>(kc, a, at, b.from(u), c + u * P, c_rs, w, load_c, after, r0, u * P);
        } else {
            for (int v = 0; v < np; ++v) {
                const int wv = w - v * P < P ? w - v * P : P;
                tile<T, MR, 1, PACKED, R>(kc, a, at, b.from(u + v), c + (u + v) * P, c_rs, wv, load_c, after, r0,
                                          (u + v) * P);
            }
        }
    }
}

template <class T, int R, bool PACKED, class Rows>
__attribute__((always_inline)) inline void rest_rows(int rows, int64_t kc, const row_tiles<T>& a, const T* at,
                                                     const Rows& b, int panels, T* c, int64_t c_rs, int64_t cols,
                                                     bool load_c, const tile_epilogue<T>& after, int64_t r0) {
    if constexpr (R >= 1) {
        if (rows != R) {
            rest_rows<T, R - 1, PACKED>(rows, kc, a, at, b, panels, c, c_rs, cols, load_c, after, r0);
            return;
        }
        rows_tiles<T, R, PACKED>(kc, a, at, b, panels, c, c_rs, cols, load_c, after, r0);
    }
}

// Whether `rows` rows split evenly into tiles of min_rows to row_block rows each.
constexpr bool splits(int64_t rows) {
    return rows == 0 || rows / ((rows + row_block - 1) / row_block) >= min_rows;
}

template <class T, bool PACKED = false, int MR = row_block, bool AFFINE = true, class Rows>
KS_BLOCK void block(int64_t m, int64_t kc, const row_tiles<T>& a, const Rows& b, int panels, T* c, int64_t c_rs,
                    int64_t cols, bool load_c, bool last, int64_t j, const epilogue<T>& epi, int64_t i0 = 0);

// The rows [whole, m) of tiles::block's c (fewer than MR): by tiles of row_block rows when MR is taller, else of
// exactly that many rows; after.epi: then the epilogue tile by tile; after.regs: then the affine epilogue over them
// (after.i, after.j: c's first row and column for the epilogue).
template <class T, bool PACKED, int MR, class Rows>
KS_OWN_FRAME void block_rest(int64_t m, int64_t whole, int64_t kc, const row_tiles<T>& a, const Rows& b, int panels,
                             T* c, int64_t c_rs, int64_t cols, bool load_c, const tile_epilogue<T>& after,
                             const epilogue<T>& epi) {
    if constexpr (MR != row_block) {
        const int64_t left = m - whole, parts = splits(left) ? (left + row_block - 1) / row_block : 1;
        for (int64_t part = 0, i = whole; part < parts; ++part) {  // the rows left, in equal tiles where they split
            const int64_t rows = parts == 1 ? left : left / parts + (part < left % parts ? 1 : 0);
            block<T>(rows, kc, rows_of(a.data + i * a.rs, a.rs, a.cs), b, panels, c + i * c_rs, c_rs, cols,
                     load_c, after.epi != nullptr, after.j, epi, after.i + i);
            i += rows;
        }
    } else {
        rest_rows<T, MR - 1, PACKED>(static_cast<int>(m - whole), kc, a, a.data + (whole / MR) * a.ts, b, panels,
                                     c + whole * c_rs, c_rs, cols, load_c, {after.epi, after.i, after.j}, whole);
    }
    if (after.regs != nullptr) {  // (here, not in the tiles above: its tiles made this frame 70% larger)
        finish_rows<T>(*after.regs, after.regs->columns ? 0 : whole, c + whole * c_rs, c_rs, m - whole, cols);
    }
}

// All m rows of c over a block of `panels` panels (cols valid columns) and kc values of k (a's tiles
// already start at the block's first k): tiles of MR rows by panel_block panels, then the rows left (by
// tiles of row_block rows when MR is taller). `last`: then the epilogue (c's first row is row i0 and its first
// column j for it): over the whole block in one call, while it is in cache (per tile, the calls cost more than
// the epilogue: MobileNetV2 10-13% slower), except when c's rows are a multiple of 4 KB apart, so that they
// share the L1 cache's sets and the block's first rows are evicted before the call (the benchmark CNN's first
// convolution, 32 x 32 outputs: 20% slower): then tile by tile, each just stored.
// AFFINE: an affine epilogue (ks::affine_epilogue) is applied by the whole tiles to their accumulators, and by
// finish_rows to the rows left below them (rest_rows' tiles of fewer rows store as they are: the affine in each
// of them was a third of the kernel layer's text). The generated code passes one to convolutions alone
// (prims/convolve.py); the products' blocks share the convolutions' instantiation (one copy of its code), and the
// Winograd products, which never get one, have no code for it (never_affine). packed_gemm's tall tiles apply one too:
// an affine epilogue by column (ks::column_affine_epilogue), a channels-last pointwise layer's bias and bounds, in the
// accumulators' registers, one bias vector per column vector of the tile (through a lambda over each block, the
// epilogue had made such a product 1.4-1.7 times as slow on large planes: docs/performance.md).
template <class T, bool PACKED, int MR, bool AFFINE, class Rows>
KS_BLOCK void block(int64_t m, int64_t kc, const row_tiles<T>& a, const Rows& b, int panels, T* c,
                  int64_t c_rs, int64_t cols, bool load_c, bool last, int64_t j, const epilogue<T>& epi, int64_t i0) {
    static_assert(MR == row_block || !PACKED, "a packed a is cut into tiles of row_block rows");
    constexpr int NP = panel_block;
    const int P = b.width();  // (the columns of c a panel stores)
    const affine<T> regs = AFFINE && affine_in_tiles && last ? epi.in_tiles(i0, j) : affine<T>{};
    const bool per_tile = last && epi && !regs && (c_rs * int64_t(sizeof(T))) % 4096 == 0 && m > MR;
    const tile_epilogue<T> after{per_tile ? &epi : nullptr, i0, j, regs ? &regs : nullptr};
    int64_t whole = m - m % MR;
    if (MR != row_block && whole >= MR && !splits(m - whole) && splits(m - whole + MR)) {
        whole -= MR;  // one tall tile fewer, so that the rows left make tiles of min_rows or more (64 = 4·12 + 2·8)
    }
    for (int u = 0; u < panels; u += NP) {
        const int np = panels - u < NP ? panels - u : NP;
        const int64_t left = cols - int64_t(u) * P;
        const int w = static_cast<int>(left < int64_t(np) * P ? left : int64_t(np) * P);
        for (int64_t i = 0; i < whole; i += MR) {
            const T* at = PACKED ? a.data + (i / MR) * a.ts : a.data + i * a.rs;
            if (np == NP) {
                tile<T, MR, NP, PACKED, MR, AFFINE>(kc, a, at, b.from(u), c + i * c_rs + u * P, c_rs, w, load_c, after,
                                                    i, u * P, b.next(u + NP, NP, kc, i / MR, whole / MR));
                continue;
            }
            for (int v = 0; v < np; ++v) {  // the last panels, fewer than a tile's: one at a time
                const int wv = w - v * P < P ? w - v * P : P;
                tile<T, MR, 1, PACKED, MR, AFFINE>(kc, a, at, b.from(u + v), c + i * c_rs + (u + v) * P, c_rs, wv,
                                                   load_c, after, i, (u + v) * P);
            }
        }
    }
    if (whole < m) {
        block_rest<T, PACKED, MR>(m, whole, kc, a, b, panels, c, c_rs, cols, load_c, after, epi);
    }
    if (last && !per_tile && !regs) {  // (the block's columns are consecutive in c, whatever the panels' width)
        epi(i0, j, c, c_rs, 1, m, cols);
    }
}

// tiles::block<T, false, row_block, AFFINE> over its first panel_block panels (cols columns), for an a read once
// from beyond L2 (row_tiles::streamed, rows_ahead): each whole row tile prefetches into L2 the next one's
// rows (micro's ROWS), which that tile, and those of the later panels, then find there; the rest as block does it,
// the same arithmetic, so the same results bit for bit. (A function of its own, which a convolution's block calls
// before tiles::block over the panels after these: in block, the choice of tile spilled one more value of its frame,
// 496 -> 560 B.)
template <class T, bool AFFINE>
KS_OWN_FRAME void ahead_block(int64_t m, int64_t kc, const row_tiles<T>& a, const panel_rows<T>& b, T* c, int64_t c_rs,
                              int64_t cols, bool load_c, bool last, int64_t j, const epilogue<T>& epi) {
    constexpr int MR = row_block;
    const affine<T> regs = AFFINE && affine_in_tiles && last ? epi.in_tiles(0, j) : affine<T>{};
    const bool per_tile = last && epi && !regs && (c_rs * int64_t(sizeof(T))) % 4096 == 0 && m > MR;
    const tile_epilogue<T> after{per_tile ? &epi : nullptr, 0, j, regs ? &regs : nullptr};
    const int64_t whole = m - m % MR;
    for (int64_t i = 0; i < whole; i += MR) {
        const T* at = a.data + i * a.rs;
        const bool next = i + MR < whole;  // (the last one's next rows are block_rest's, or past a's end: none)
        const ahead pf{next ? reinterpret_cast<uintptr_t>(at) + uintptr_t(MR * a.rs) * sizeof(T) : 0,
                       a.rs * int64_t(sizeof(T))};
        tile<T, MR, panel_block, false, MR, AFFINE, true>(kc, a, at, b, c + i * c_rs, c_rs, static_cast<int>(cols),
                                                          load_c, after, i, 0, pf);
    }
    if (whole < m) {
        block_rest<T, false, MR>(m, whole, kc, a, b, panel_block, c, c_rs, cols, load_c, after, epi);
    }
    if (last && !per_tile && !regs) {
        epi(0, j, c, c_rs, 1, m, cols);
    }
}

// One whole tile of row_block rows of a (from `rows`, any strides) copied to out [k][MR]. (Out of line: with
// AVX-512, GCC's vectorized transposition kept its values in pack_a's frame: 0.7-0.8 KB.)
template <class T>
KS_OWN_FRAME void pack_tile(int64_t k, const T* rows, int64_t a_rs, int64_t a_cs, T* out) {
    constexpr int MR = row_block;
    for (int64_t p = 0; p < k; ++p) {
        for (int r = 0; r < MR; ++r) {
            out[p * MR + r] = rows[r * a_rs + p * a_cs];
        }
    }
}

// The last tile, of `left` rows (fewer than row_block), the others zero: row by row (once per packing: its code
// small, not the 6-9 KB GCC's vectorized transposition with masks was).
template <class T>
KS_OWN_FRAME void pack_last(int64_t k, const T* rows, int64_t a_rs, int64_t a_cs, int left, T* out) {
    constexpr int MR = row_block;
    for (int64_t p = 0; p < k * MR; ++p) {
        out[p] = T(0);
    }
    for (int r = 0; r < left; ++r) {
        for (int64_t p = 0; p < k; ++p) {
            out[p * MR + r] = rows[r * a_rs + p * a_cs];
        }
    }
}

// a (m x k, any strides) copied into row tiles at dst: [ceil(m / MR)][k][MR], the last tile's missing rows zero.
template <class T>
__attribute__((noinline)) void pack_a(int64_t m, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, T* dst) {
    constexpr int MR = row_block;
    for (int64_t t = 0; t * MR < m; ++t) {
        T* out = dst + t * k * MR;
        const T* rows = a + t * MR * a_rs;
        if ((t + 1) * MR <= m) {
            pack_tile<T>(k, rows, a_rs, a_cs, out);
        } else {
            pack_last<T>(k, rows, a_rs, a_cs, static_cast<int>(m - t * MR), out);
        }
    }
}

// The elements pack_a writes.
constexpr int64_t packed_a_size(int64_t m, int64_t k) {
    return (m + row_block - 1) / row_block * row_block * k;
}

// Columns [j0, j0 + cols) and k rows [k0, k0 + kc) of b copied into panels at dst (zero-padded).
template <class T>
inline void pack(const matrix<const T>& b, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst) {
    constexpr int P = panel_width<T>;
    for (int64_t u = 0; u * P < cols; ++u) {
        const int w = static_cast<int>(cols - u * P < P ? cols - u * P : P);
        T* out = dst + u * kc * P;
        const T* src = b.data + k0 * b.rs + (j0 + u * P) * b.cs;
        for (int64_t p = 0; p < kc; ++p) {
            const T* row = src + p * b.rs;
            if (w == P && b.cs == 1) {
                std::memcpy(out + p * P, row, sizeof(T) * P);
                continue;
            }
            for (int q = 0; q < P; ++q) {
                out[p * P + q] = q < w ? row[q * b.cs] : T(0);
            }
        }
    }
}

// c (+)= a · b with b packed block by block into scratch (tiled_gemm_scratch<T>(m, n, k) elements).
template <class T>
void packed_blocks(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b,
                   const matrix<T>& c, bool accumulate, T* scratch, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const int64_t step = k_step(k), nc = panels_per_block * P;
    for (int64_t j0 = 0; j0 < n; j0 += nc) {
        const int64_t cols = n - j0 < nc ? n - j0 : nc;
        const int count = static_cast<int>((cols + P - 1) / P);
        for (int64_t k0 = 0; k0 < k; k0 += step) {
            const int64_t kc = k - k0 < step ? k - k0 : step;
            pack<T>(b, k0, kc, j0, cols, scratch);
            block<T>(m, kc, rows_of(a.data + k0 * a.cs, a.rs, a.cs), panel_rows<T>{scratch, P, kc * P}, count, c.data + j0, c.rs, cols,
                     accumulate || k0 > 0, k0 + kc >= k, j0, epi);
        }
    }
}

// c (+)= a · b reading b's rows where they are (b.cs == 1): whole panels by tiles, the last n % P
// columns by dot products.
template <class T>
void in_place(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b,
              const matrix<T>& c, bool accumulate, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const int64_t whole = n - n % P, step = k_step(k);
    for (int64_t j0 = 0; j0 < whole; j0 += panels_per_block * P) {
        const int64_t cols = whole - j0 < panels_per_block * P ? whole - j0 : panels_per_block * P;
        for (int64_t k0 = 0; k0 < k; k0 += step) {
            const int64_t kc = k - k0 < step ? k - k0 : step;
            block<T>(m, kc, rows_of(a.data + k0 * a.cs, a.rs, a.cs), panel_rows<T>{b.data + k0 * b.rs + j0, b.rs, P},
                     static_cast<int>(cols / P), c.data + j0, c.rs, cols, accumulate || k0 > 0, k0 + kc >= k, j0, epi);
        }
    }
    const int tail = static_cast<int>(n - whole);
    for (int64_t i = 0; tail > 0 && i < m; ++i) {  // the last columns: one row of them at a time
        T acc[P] = {};
        for (int64_t p = 0; p < k; ++p) {
            const T x = a.data[i * a.rs + p * a.cs];
            const T* row = b.data + p * b.rs + whole;
            for (int q = 0; q < tail; ++q) {
                acc[q] += x * row[q];
            }
        }
        T* out = c.data + i * c.rs + whole;
        for (int q = 0; q < tail; ++q) {
            out[q] = accumulate ? out[q] + acc[q] : acc[q];
        }
        epi(i, whole, out, 0, 1, 1, tail);
    }
}

// The dot products of x with y0 and the next dot_block - 1 columns (cs apart), k long, stored (or added: accumulate)
// at out[q · out_cs]. (Out of line: the vectorized reductions' copies in dots' frame made it 0.6 KB with AVX-512.)
template <class T>
KS_OWN_FRAME void dot_run(int64_t k, const T* x, const T* y0, int64_t cs, T* out, int64_t out_cs,
                                       bool accumulate) {
    const T* y1 = y0 + cs;
    const T* y2 = y1 + cs;
    const T* y3 = y2 + cs;
    T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    KS_OMP_SIMD(reduction(+ : d0, d1, d2, d3))
    for (int64_t p = 0; p < k; ++p) {
        d0 += x[p] * y0[p];
        d1 += x[p] * y1[p];
        d2 += x[p] * y2[p];
        d3 += x[p] * y3[p];
    }
    const T d[dot_block] = {d0, d1, d2, d3};
    for (int q = 0; q < dot_block; ++q) {
        out[q * out_cs] = accumulate ? out[q * out_cs] + d[q] : d[q];
    }
}

// c (+)= a · b with a and b contiguous along k (a.cs == b.rs == 1): dot products, DOT at a time; the epilogue
// over each row of c once it is computed.
template <class T>
void dots(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
          bool accumulate, const epilogue<T>& epi) {
    for (int64_t i = 0; i < m; ++i) {
        const T* x = a.data + i * a.rs;
        const int64_t whole = n - n % dot_block;
        for (int64_t j = 0; j < whole; j += dot_block) {
            dot_run<T>(k, x, b.data + j * b.cs, b.cs, c.data + i * c.rs + j * c.cs, c.cs, accumulate);
        }
        for (int64_t j = whole; j < n; ++j) {
            const T* y = b.data + j * b.cs;
            T d = 0;
            KS_OMP_SIMD(reduction(+ : d))
            for (int64_t p = 0; p < k; ++p) {
                d += x[p] * y[p];
            }
            T& out = c.data[i * c.rs + j * c.cs];
            out = accumulate ? out + d : d;
        }
        epi(i, 0, c.data + i * c.rs, 0, c.cs, 1, n);
    }
}

// Any strides: one dot product per element.
template <class T>
void strided(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
             bool accumulate, const epilogue<T>& epi) {
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
    epi(0, 0, c.data, c.rs, c.cs, m, n);
}

// On a microcontroller (dot_products: one lane, no cache) a product is dot products along k: per row of a, a panel
// of b's columns at a time, a's element loaded once for all of them, each column a chain of multiply-adds of its own
// in a register (tiles::panel_dots: a constant b; tiles::dot_rows: any b). The register tiles' blocks, the packing
// and the partial tiles' stores cost about 5 KB of a Cortex-M4's flash for a small network, and 16-column panels up
// to 15 zero-padded columns. Indices in 32 bits on a 32-bit target (no 64-bit multiplies).
using dot_index = std::conditional<(sizeof(void*) < 8), int32_t, int64_t>::type;

// The epilogue over row i of a product's result (n values, cs apart): ks::epilogue's operator() for one row, without
// its out-of-line ks::epilogue::apply_simple (0.9 KB of a Cortex-M4's flash at -O3). epi is not transposed (swapped:
// only ks::tiled_gemm's column-major path makes one, which these kernels replace; the generated code never does).
// Sizes in dot_index (32 bits on a 32-bit target; int64_t, the same code as before, on a 64-bit one).
template <class T>
KS_DOTS void dot_epilogue(const epilogue<T>& epi, dot_index i, T* out, dot_index cs, dot_index n) {
    if (epi.run != nullptr) {
        epi.run(epi.self, epi.image, epi.first + i, 0, out, 0, cs, 1, n);
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
    } else if (epi.self != nullptr) {
        // An affine epilogue in a loop of its own, by row or, transposed (ks::column_affine_epilogue), by column:
        // on a microcontroller ks::epilogue's operator() and its out-of-line apply_simple, which only the transposed
        // case reached and which were linked all the same (0.9 KB of a Cortex-M4's flash at -O3, 0.4 KB at -Os), are
        // not. (Elsewhere the code is as it was: the x86 kernel layer is byte for byte the same.)
        const affine<T>& f = epi.simple();
        const T* bias = f.bias != nullptr ? f.bias + dot_index(epi.first) : nullptr;
        if (epi.swapped) {
            KS_ROLLED for (dot_index q = 0; q < n; ++q) {
                T& o = out[q * cs];
                o = f.apply(o, bias != nullptr ? bias[q] : T(0));
            }
            return;
        }
        const T b = bias != nullptr ? bias[i] : T(0);
        KS_ROLLED for (dot_index q = 0; q < n; ++q) {
            T& o = out[q * cs];
            o = f.apply(o, b);
        }
    }
#else
    } else if (epi.swapped) {  // (an affine epilogue by column, ks::column_affine_epilogue: ks::epilogue's own loop)
        epi(i, 0, out, 0, cs, 1, n);
    } else if (epi.self != nullptr) {  // (an affine epilogue: the row's bias and bounds)
        const affine<T>& f = epi.simple();
        const T b = f.bias != nullptr ? f.bias[epi.first + i] : T(0);
        KS_ROLLED for (dot_index q = 0; q < dot_index(n); ++q) {
            T& o = out[q * dot_index(cs)];
            o = f.apply(o, b);
        }
    }
#endif
}

// The epilogue over m rows of n results at out (rows rs apart, columns cs apart) at once (KS_SIZE_DOTS: the dot
// products', in place of dot_epilogue per row; ks::conv_dots has its own, convs::rows_epilogue): one call of its run
// over them all, or its affine, the bias by row or, transposed (ks::column_affine_epilogue), by column.
template <class T>
KS_DOTS void block_epilogue(const epilogue<T>& epi, T* out, dot_index rs, dot_index cs, dot_index m, dot_index n) {
    if (epi.run != nullptr) {
        epi.run(epi.self, epi.image, epi.first, 0, out, rs, cs, m, n);
        return;
    }
    if (epi.self == nullptr) {
        return;
    }
    const affine<T>& f = epi.simple();
    for (dot_index r = 0; r < m; ++r) {
        KS_ROLLED for (dot_index q = 0; q < n; ++q) {
            T& o = out[r * rs + q * cs];
            o = f.apply(o, f.bias != nullptr ? f.bias[dot_index(epi.first) + (epi.swapped ? q : r)] : T(0));
        }
    }
}

// The first `live` of the sums d at out (cs apart), added to what is there when accumulate: one rolled loop for every
// panel width (unrolled, each width's stores were 0.2-0.5 KB of a Cortex-M4's flash at -O3).
template <class T>
KS_DOTS void dot_store(const T* d, T* out, dot_index cs, dot_index live, bool accumulate) {
    KS_ROLLED for (dot_index q = 0; q < live; ++q) {
        T& o = out[q * cs];
        o = accumulate ? o + d[q] : d[q];
    }
}

// Row x of a (k values, as apart) times 4 columns of b from y (k values each, bs apart; the columns bc apart), the
// first `live` of the 4 results at out (cs apart); a missing column (live < 4) is column 0 computed again and not
// stored. Also the last columns of a constant's panels (a panel of 4: bs = 4, bc = 1).
template <class T>
KS_DOTS void dot4(const T* x, dot_index as, const T* y, dot_index bs, dot_index bc, dot_index k, T* out, dot_index cs,
                  dot_index live, bool accumulate) {
    const T* y0 = y;
    const T* y1 = live > 1 ? y + bc : y;
    const T* y2 = live > 2 ? y + 2 * bc : y;
    const T* y3 = live > 3 ? y + 3 * bc : y;
    T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (; k > 0; --k, x += as, y0 += bs, y1 += bs, y2 += bs, y3 += bs) {
        const T v = *x;
        d0 += v * *y0;
        d1 += v * *y1;
        d2 += v * *y2;
        d3 += v * *y3;
    }
    const T d[4] = {d0, d1, d2, d3};
    dot_store<T>(d, out, cs, live < 4 ? live : 4, accumulate);
}

// Row x of a (k values, as apart) times one panel y of W columns (k rows of W), the first `live` of its W results
// at out (cs apart): W accumulators, in registers (the loops over them unrolled), then stored by dot_store.
// (A panel of 16: for 4 columns, dot4.)
template <class T, int W>
KS_DOTS void panel_dot(const T* x, dot_index as, const T* y, dot_index k, T* out, dot_index cs,
                                         dot_index live, bool accumulate) {
    T d[W];
    KS_UNROLL for (int q = 0; q < W; ++q) {
        d[q] = T(0);
    }
    for (; k > 0; --k, x += as, y += W) {
        const T v = *x;
        KS_UNROLL for (int q = 0; q < W; ++q) {
            d[q] += v * y[q];
        }
    }
    T sums[W];  // (d's address never taken: it stays in registers; 0.2 KB less code at -O3)
    KS_UNROLL for (int q = 0; q < W; ++q) {
        sums[q] = d[q];
    }
    dot_store<T>(sums, out, cs, live < W ? live : W, accumulate);
}

// c (+)= a · b with b a constant stored for a target without a vector unit (layout_constants): panels of P columns
// (ks::panel_width: k rows of P), then the last n % P columns as panels of 4 = dot_block (k rows of 4, the last one
// zero-padded), at most 3 columns of zeros where 16-column panels had up to 15. Per row of a, P dot products at
// a time (a's element loaded once for them; 2.3 instructions per multiply-add on a Cortex-M4), then 4 at a time
// (dot4, which ks::tiled_gemm's dot_rows uses too).
template <class T>
KS_DOTS void panel_dots(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const T* b,
                                          const matrix<T>& c, bool accumulate, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    static_assert(dot_block == 4, "the last columns are panels of 4");
    const dot_index as = dot_index(a.cs), cs = dot_index(c.cs), depth = dot_index(k), cols = dot_index(n);
    const dot_index wide = cols - cols % P;
    for (dot_index i = 0; i < dot_index(m); ++i) {
        T* out = c.data + i * dot_index(c.rs);
        const T* x = a.data + i * dot_index(a.rs);
        const T* y = b;
        for (dot_index j = 0; j < wide; j += P, y += depth * P) {
#if KS_SIZE_DOTS  // (the panel 4 columns at a time by dot4, without panel_dot's 0.3 KB of a Cortex-M4's flash)
            for (int q = 0; q < P; q += 4) {
                dot4<T>(x, as, y + q, P, 1, depth, out + (j + q) * cs, cs, 4, accumulate);
            }
#else
            panel_dot<T, P>(x, as, y, depth, out + j * cs, cs, P, accumulate);
#endif
        }
        for (dot_index j = wide; j < cols; j += 4, y += depth * 4) {
            dot4<T>(x, as, y, 4, 1, depth, out + j * cs, cs, cols - j, accumulate);
        }
        if constexpr (!KS_SIZE_DOTS) {
            dot_epilogue<T>(epi, i, out, c.cs, n);
        }
    }
    if constexpr (KS_SIZE_DOTS) {
        block_epilogue<T>(epi, c.data, dot_index(c.rs), cs, dot_index(m), cols);
    }
}

// c (+)= a · b, any strides (ks::tiled_gemm on a microcontroller): 4 columns of b at a time (dot4).
template <class T>
KS_DOTS void dot_rows(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b,
                      const matrix<T>& c, bool accumulate, const epilogue<T>& epi) {
    const dot_index as = dot_index(a.cs), bs = dot_index(b.rs), bc = dot_index(b.cs), cs = dot_index(c.cs);
    const dot_index cols = dot_index(n);
    for (dot_index i = 0; i < dot_index(m); ++i) {
        T* out = c.data + i * dot_index(c.rs);
        const T* x = a.data + i * dot_index(a.rs);
        for (dot_index j = 0; j < cols; j += 4) {
            dot4<T>(x, as, b.data + j * bc, bs, bc, dot_index(k), out + j * cs, cs, cols - j, accumulate);
        }
        if constexpr (!KS_SIZE_DOTS) {
            dot_epilogue<T>(epi, i, out, c.cs, n);
        }
    }
    if constexpr (KS_SIZE_DOTS) {
        block_epilogue<T>(epi, c.data, dot_index(c.rs), cs, dot_index(m), cols);
    }
}

// A microcontroller's dense layer of one row (impl "dense", transforms/dot_convs.py: a batch-1 MLP's layers, a
// classifier): out[j] = f(Σ_p x[p]·w[j·k + p]) for j < n, x contiguous, w the layer's [n, k] weight as stored
// (an ONNX Gemm's with transB, a Linear's), k >= 1, f v + bias[j] (no bias: nullptr) then, with `relu`, v < 0 ? 0 :
// v (as ks::affine::apply clamps below at 0: NaN stays NaN); another epilogue is the caller's loop after the call.
// C columns at a time, x's element loaded once for them: 4, the last 4 overlapping the block before when 4 does not
// divide n (n >= 4: a few columns computed twice, the same values, instead of a loop of single columns); or 2 with n
// even (contract `block` 2: optimize = "size", dot_convs.py dense_params; 3.5 instructions a multiply-add at -Os on
// a Cortex-M4, 60 B less code than 4 columns). Then f in one rolled loop. One function for every such layer of a
// package (the epilogue as arguments: a copy per kind of epilogue as template parameters was 0.2 KB more; KS_DENSE:
// GCC's unswitching on the bias made two copies of that loop): the generated code's own loop nests, one per layer,
// and their epilogue loops were 732 B of a Cortex-M4's flash for the benchmark's MLP at -O3, this and its three
// calls 368 B. The bound is a flag, not two floats lo and hi: each call loaded both from a literal pool (the MLP's
// three calls 24 B, their constants 12 B) and the function compared twice (issue 36: the MLP above emx-onnx-cgen's
// flash); the dot loop tests its end after a step (k >= 1: GCC's -Os loop tested before each and jumped back).
template <class T, int C = 4>
KS_DENSE void dense_row(const T* x, const T* w, T* out, dot_index n, dot_index k, const T* bias, bool relu) {
    static_assert(C == 2 || C == 4, "dense_row: 2 or 4 columns at a time");
    const T* const end = x + k;
    for (dot_index j = 0; j < n; j += C) {
        const dot_index at = C == 2 || j + C <= n ? j : n - C;
        const T* w0 = w + at * k;
        const T* w1 = w0 + k;
        const T* w2 = w1 + k;
        const T* w3 = w2 + k;
        T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
        const T* p = x;
        do {
            const T v = *p++;
            d0 += v * *w0++;
            d1 += v * *w1++;
            if constexpr (C == 4) {
                d2 += v * *w2++;
                d3 += v * *w3++;
            }
        } while (p != end);
        out[at] = d0;
        out[at + 1] = d1;
        if constexpr (C == 4) {
            out[at + 2] = d2;
            out[at + 3] = d3;
        }
    }
    KS_ROLLED for (dot_index j = 0; j < n; ++j) {
        T v = out[j];
        v = bias != nullptr ? v + bias[j] : v;
        out[j] = relu && v < T(0) ? T(0) : v;
    }
}

// c = epi(c or 0) everywhere: the product of an empty sum.
template <class T>
void empty_sum(int64_t m, int64_t n, const matrix<T>& c, bool accumulate, const epilogue<T>& epi) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            T& out = c.data[i * c.rs + j * c.cs];
            out = accumulate ? out : T(0);
        }
    }
    epi(0, 0, c.data, c.rs, c.cs, m, n);
}

}  // namespace tiles

namespace tiles {
// The scratch elements packed_blocks uses for an m x n x k product (0: it packs nothing).
template <class T>
constexpr int64_t scratch_for(int64_t m, int64_t n, int64_t k) {
    const int64_t nc = panels_per_block * panel_width<T>;
    const int64_t cols = n < nc ? (n + panel_width<T> - 1) / panel_width<T> * panel_width<T> : nc;
    return vector_bytes > 0 && m >= row_block && n > 0 && k > 0 ? k_step(k) * cols : 0;
}
}  // namespace tiles

// The scratch elements ks::tiled_gemm may use to pack b for an m x n x k product, in either orientation
// (a column-major c is computed as cᵀ = bᵀ · aᵀ).
template <class T>
constexpr int64_t tiled_gemm_scratch(int64_t m, int64_t n, int64_t k) {
    const int64_t one = tiles::scratch_for<T>(m, n, k), other = tiles::scratch_for<T>(n, m, k);
    return one > other ? one : other;
}

namespace tiles {
// tiled_gemm for a result with rows contiguous or strided (not column-major).
template <class T>
void rows(int64_t m, int64_t n, int64_t k, const matrix<const T>& a, const matrix<const T>& b, const matrix<T>& c,
          bool accumulate, T* scratch, const epilogue<T>& epi) {
    if (k <= 0) {
        empty_sum<T>(m, n, c, accumulate, epi);
    } else if (c.cs == 1 && scratch != nullptr && scratch_for<T>(m, n, k) > 0) {
        packed_blocks<T>(m, n, k, a, b, c, accumulate, scratch, epi);
    } else if (c.cs == 1 && (b.cs == 1 || n == 1)) {
        in_place<T>(m, n, k, a, {b.data, b.rs, 1}, c, accumulate, epi);
    } else if ((a.cs == 1 || k == 1) && (b.rs == 1 || k == 1)) {
        dots<T>(m, n, k, {a.data, a.rs, 1}, {b.data, 1, b.cs}, c, accumulate, epi);
    } else {
        strided<T>(m, n, k, a, b, c, accumulate, epi);
    }
}

}  // namespace tiles

// c = epi(a · b) (or epi(c + a · b) when accumulate): a is m x k, b is k x n, c is m x n, any strides.
// scratch (tiled_gemm_scratch<T>(m, n, k) elements, or nullptr) lets it pack b into panels.
template <class T>
void tiled_gemm(int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b, matrix<T> c, bool accumulate,
                T* scratch = nullptr, const epilogue<T>& epi = {}) {
    if (m <= 0 || n <= 0) {
        return;
    }
    a.data = tiles::opaque(a.data);
    b.data = tiles::opaque(b.data);
    if constexpr (tiles::dot_products) {  // (a microcontroller: tiles::dot_rows)
        tiles::dot_rows<T>(m, n, k, a, b, c, accumulate, epi);
        return;
    }
    if (c.cs != 1 && c.rs == 1) {  // a column-major result: compute cᵀ = bᵀ · aᵀ instead
        tiles::rows<T>(n, m, k, b.transposed(), a.transposed(), c.transposed(), accumulate, scratch,
                       epi.transposed());
        return;
    }
    tiles::rows<T>(m, n, k, a, b, c, accumulate, scratch, epi);
}

// c = epi(a · b) (or epi(c + a · b)) with b stored as panels (ks::panels): no packing on any call. An affine epilogue
// (by row, or by column: ks::column_affine_epilogue) is applied in the tiles' registers. (It was
// `flatten`, after GCC had called the 12-row tile out of line 7-10% slower (docs/performance.md); with the tiles'
// accumulators in registers (KS_UNROLL) it runs as fast without, in a 0.5 KB frame instead of 3 KB.)
template <class T>
void packed_gemm(int64_t m, int64_t n, int64_t k, matrix<const T> a, panels<T> b, matrix<T> c,
                                          bool accumulate, const epilogue<T>& epi = {}) {
    constexpr int P = panel_width<T>;
    if (m <= 0 || n <= 0) {
        return;
    }
    a.data = tiles::opaque(a.data);
    b.data = tiles::opaque(b.data);
    if constexpr (tiles::dot_products) {  // (a microcontroller: tiles::panel_dots)
        tiles::panel_dots<T>(m, n, k, a, b.data, c, accumulate, epi);
        return;
    }
    if (k <= 0 || c.cs != 1) {
        if (k <= 0) {
            tiles::empty_sum<T>(m, n, c, accumulate, epi);
            return;
        }
        for (int64_t i = 0; i < m; ++i) {  // (a strided result: one element at a time)
            for (int64_t j = 0; j < n; ++j) {
                T d = 0;
                for (int64_t p = 0; p < k; ++p) {
                    d += a.data[i * a.rs + p * a.cs] * b.data[(j / P) * b.k * P + p * P + j % P];
                }
                T& out = c.data[i * c.rs + j * c.cs];
                out = accumulate ? out + d : d;
            }
        }
        epi(0, 0, c.data, c.rs, c.cs, m, n);
        return;
    }
    // (tiles::block_panels: with fewer rows than a tile, whole tiles of the rows, not 4 panels each cut into
    // one-panel tiles: a vector times [256 x 1024] on AVX2 in 0.75-0.89 of the time.)
    const int64_t step = tiles::k_step(k), nc = tiles::block_panels(m) * P;
    for (int64_t j0 = 0; j0 < n; j0 += nc) {
        const int64_t cols = n - j0 < nc ? n - j0 : nc;
        const int count = static_cast<int>((cols + P - 1) / P);
        for (int64_t k0 = 0; k0 < k; k0 += step) {
            const int64_t kc = k - k0 < step ? k - k0 : step;
            tiles::block<T, false, tiles::tall_block, true>(
                m, kc, tiles::rows_of(a.data + k0 * a.cs, a.rs, a.cs),
                tiles::panel_rows<T>{b.data + (j0 / P) * b.k * P + k0 * P, P, b.k * P, true}, count, c.data + j0, c.rs,
                cols, accumulate || k0 > 0, k0 + kc >= k, j0, epi);
        }
    }
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_GEMM_H
