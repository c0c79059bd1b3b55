// ks/kernels.h — the kernel layer: matrix products and convolutions compiled once, not per package.
//
// ks::tiled_gemm, ks::packed_gemm, ks::conv (and ks::conv_as, one method of it), ks::conv_winograd,
// ks::conv_depthwise, ks::winograd_kernel and ks::max_pool
// (ks/gemm.h, ks/conv.h, ks/maxpool.h), and the integer ks::qconv, ks::qconv_depthwise and ks::qmatmul (ks/qconv.h) take every shape, stride and epilogue at run time. For float and double they are
// compiled from one source, src/ks/kernels.cpp, once per target, instruction set level and part (products and
// convs per element type, int8 per activation type: an object each, which a package compiles and links only if it calls them; ksbuild
// keeps the objects in its cache, shared by every package built with the same compiler and flags), and
// the generated code only calls them: the declarations below tell its compiler not to instantiate them.
// Their namespace is ks::KS_KERNELS (one per instruction set level in a portable x86-64 build); a
// library's relocatable link makes those symbols local to it, so two libraries never share them.
//
// The generated code's epilogues are lambdas, f(i, j, v) of a product's element (i, j) or f(image, m, q, v)
// of a convolution's output channel m and flat position q; ks::product_epilogue and ks::conv_epilogue
// wrap one in a ks::epilogue, whose one small loop over a block of results is all that is compiled per
// epilogue.
#ifndef KS_KERNELS_H
#define KS_KERNELS_H

#include <cstdint>

#include "conv.h"
#include "maxpool.h"
#include "qconv.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

// ks::conv by one method (ks::conv_as), which the generated code calls when a convolution's shapes are constants.
#define KS_CONV_METHOD(PREFIX, T, M)                                                                             \
    PREFIX void conv_as<T, convs::method::M>(const convs::conv_plan&, const conv_shape&, int64_t, const T*,       \
                                             const T*, T*, T*, const epilogue<T>&);

// The kernels the layer compiles, for one element type T; PREFIX is `extern template` (here, for the
// generated code) or `template` (src/ks/kernels.cpp, which instantiates them). Two objects per type (32: float, 64:
// double): the products (kernels_<level>_products32.o), which a package of matrix products alone (an MLP, a
// transformer, most derivative code) compiles, a quarter of the layer, and the whole layer of the type
// (kernels_<level>_convs32.o: the convolutions, pooling and the products, which share the register tiles), which a
// package that calls a convolution compiles.
#define KS_PRODUCTS_LAYER(PREFIX, T)                                                                             \
    PREFIX void tiled_gemm<T>(int64_t, int64_t, int64_t, matrix<const T>, matrix<const T>, matrix<T>, bool, T*,   \
                              const epilogue<T>&);                                                                \
    PREFIX void packed_gemm<T>(int64_t, int64_t, int64_t, matrix<const T>, panels<T>, matrix<T>, bool,            \
                               const epilogue<T>&);
#define KS_CONVS_LAYER(PREFIX, T)                                                                                \
    PREFIX void conv<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&);              \
    KS_CONV_METHOD(PREFIX, T, few)                                                                                \
    KS_CONV_METHOD(PREFIX, T, direct_packed)                                                                      \
    KS_CONV_METHOD(PREFIX, T, direct)                                                                             \
    KS_CONV_METHOD(PREFIX, T, panels_packed)                                                                      \
    KS_CONV_METHOD(PREFIX, T, panels)                                                                             \
    KS_CONV_METHOD(PREFIX, T, chunks)                                                                             \
    KS_CONV_METHOD(PREFIX, T, phases_packed)                                                                      \
    KS_CONV_METHOD(PREFIX, T, phases)                                                                             \
    KS_CONV_METHOD(PREFIX, T, flat_packed)                                                                        \
    KS_CONV_METHOD(PREFIX, T, flat)                                                                               \
    PREFIX void conv_winograd<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&);     \
    PREFIX void conv_winograd_range<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&, \
                                       int64_t, int64_t);                                                         \
    PREFIX void conv_depthwise<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&);    \
    PREFIX void winograd_kernel<T>(int64_t, int64_t, const T*, T*);                                               \
    PREFIX void conv_pointwise<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&);    \
    PREFIX void max_pool<T>(const pool_shape&, int64_t, const T*, T*, T*);
#define KS_KERNEL_LAYER(PREFIX, T) KS_PRODUCTS_LAYER(PREFIX, T) KS_CONVS_LAYER(PREFIX, T)

// ks::conv_dots (impl "dots"): the convolutions of a target without a vector unit, compiled for those alone.
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
#define KS_DOTS_LAYER(PREFIX, T)                                                                                  \
    PREFIX void conv_dots<T>(const conv_shape&, int64_t, const T*, const T*, T*, T*, const epilogue<T>&);        \
    PREFIX void conv_dots<T, uint8_t>(const narrow_shape<uint8_t>&, int64_t, const T*, const T*, T*, T*,         \
                                      const epilogue<T>&);                                                       \
    PREFIX void conv_dots<T, uint16_t>(const narrow_shape<uint16_t>&, int64_t, const T*, const T*, T*, T*,       \
                                       const epilogue<T>&);
#else
#define KS_DOTS_LAYER(PREFIX, T)
#endif

#ifndef KS_KERNELS_INSTANTIATE
KS_DOTS_LAYER(extern template, float)
KS_DOTS_LAYER(extern template, double)
KS_KERNEL_LAYER(extern template, float)
KS_KERNEL_LAYER(extern template, double)
KS_QUANT_LAYER(extern template, uint8_t, uint8_t)
KS_QUANT_LAYER(extern template, uint8_t, int8_t)
KS_QUANT_LAYER(extern template, int8_t, uint8_t)
KS_QUANT_LAYER(extern template, int8_t, int8_t)
KS_QSUMS_LAYER(extern template, uint8_t)
KS_QSUMS_LAYER(extern template, int8_t)
#endif

// A block of results is often a register tile's: a few rows of a few dozen columns. Each row runs in chunks of
// `chunk` columns, a loop of known length that compiles to whole vectors (no peeling, no alias checks: each
// element is read and written at its own index, so KS_OMP_SIMD is safe), then the columns left one by one.
// Without a vector unit (one lane: Cortex-M) there are no chunks: unrolled, they made each epilogue 1-2 KB of a
// Cortex-M4's flash at -O3.
// (GCC checks a chunk's reads against the arrays the epilogue reads when it can see them, e.g. a static bias of
// 10 columns, and warns "iteration 10 invokes undefined behavior" for chunks that never run for that product.)
constexpr int64_t epilogue_chunk = 16;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif

// f at one result: f(i, j, v) of a matrix product, f(image, m, q, v) of a convolution (IMAGE).
template <bool IMAGE, class F, class T>
inline T apply_at(const F& f, int64_t image, int64_t i, int64_t j, T v) {
    if constexpr (IMAGE) {
        return f(image, i, j, v);
    } else {
        return f(i, j, v);
    }
}

// KS_EPILOGUE_FRAME: GCC's global common subexpression elimination and loop-invariant motion off for run_block
// alone. With them, on AVX2 (16 ymm registers) GCC hoists every constant an inlined ks::erf or ks::exp broadcasts out
// of the block's loops and spills them to the frame: GELU epilogues with a batch norm (ConvMixer's) had frames of
// 1256-1352 B, above the 512 B the kernel layer keeps to. Without them each constant is read where it is used:
// 56-360 B, the same results bit for bit, and no slower (one such epilogue over a register tile's 6 x 16 blocks of
// 256 x 1024 results: 0.64-0.75 ms against 0.69-0.97; over whole rows 0.46-0.51 against 0.48-0.54). Turning off
// tree-pre as well made it 56 B and 5x slower. AVX-512 (32 registers) and the baseline level had 56 B either way, so
// only AVX2 without AVX-512 takes it (and only GCC: Clang has no such attribute).
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX2__) && !defined(__AVX512F__)
#define KS_EPILOGUE_FRAME __attribute__((optimize("no-gcse", "no-tree-loop-im")))
#else
#define KS_EPILOGUE_FRAME
#endif

// f over a block of results, element (r, q) at out[r·rs + q·cs] being (i + r, j + q) (the run of
// ks::product_epilogue and ks::conv_epilogue).
template <class T, class F, bool IMAGE>
KS_EPILOGUE_FRAME void run_block(const void* self, int64_t image, int64_t i, int64_t j, T* out, int64_t rs,
                                 int64_t cs, int64_t rows, int64_t cols) {
    const F& f = *static_cast<const F*>(self);
    if constexpr (tiles::dot_products) {  // (a microcontroller: one rolled loop of 32-bit indices; GCC had unrolled
        using index = tiles::dot_index;    // the loop of a 10-column bias into 0.8 KB of a Cortex-M4's flash at -O3)
        for (index r = 0; r < index(rows); ++r) {
            KS_ROLLED for (index q = 0; q < index(cols); ++q) {
                T& o = out[r * index(rs) + q * index(cs)];
                o = apply_at<IMAGE>(f, image, i + r, j + q, o);
            }
        }
        return;
    }
    for (int64_t r = 0; r < rows; ++r) {
        T* o = out + r * rs;
        if (cs != 1) {
            for (int64_t q = 0; q < cols; ++q) {
                o[q * cs] = apply_at<IMAGE>(f, image, i + r, j + q, o[q * cs]);
            }
            continue;
        }
        int64_t q = 0;
        for (; tiles::simd<T>::lanes > 1 && q + epilogue_chunk <= cols; q += epilogue_chunk) {
            KS_OMP_SIMD()
            for (int64_t l = 0; l < epilogue_chunk; ++l) {
                o[q + l] = apply_at<IMAGE>(f, image, i + r, j + q + l, o[q + l]);
            }
        }
        for (; q < cols; ++q) {
            o[q] = apply_at<IMAGE>(f, image, i + r, j + q, o[q]);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The epilogue f(i, j, v) -> value of a matrix product (f must outlive the call it is passed to).
template <class T, class F>
epilogue<T> product_epilogue(const F& f) {
    return {&run_block<T, F, false>, &f};
}

// The epilogue f(image, m, q, v) -> value of a convolution.
template <class T, class F>
epilogue<T> conv_epilogue(const F& f) {
    return {&run_block<T, F, true>, &f};
}

// The epilogue v + bias[channel] (no bias: nullptr), then clamped below at lo (bounds bit 1) and above at hi
// (bit 2): a ks::affine, which the kernels apply as they store (no call), passed by ks::affine_epilogue (f
// must outlive the call it is passed to).
template <class T>
affine<T> make_affine(const T* bias, unsigned bounds = 0, T lo = T(0), T hi = T(0)) {
    affine<T> a;
    a.bias = bias;
    a.lo = (bounds & 1) != 0 ? lo : a.lo;
    a.hi = (bounds & 2) != 0 ? hi : a.hi;
    a.on = true;
    return a;
}

template <class T>
epilogue<T> affine_epilogue(const affine<T>& f) {
    return {nullptr, &f};
}

// The same by column: v + bias[j] of a product's column j (a channels-last result's output channel: one per vector
// lane), then the bounds; ks::packed_gemm's and ks::tiled_gemm's tiles apply it to their accumulators as they store.
template <class T>
epilogue<T> column_affine_epilogue(const affine<T>& f) {
    epilogue<T> e{nullptr, &f};
    e.swapped = true;
    return e;
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#include "parts.h"  // (a layer split over threads: the generated code of `threads = N`)

#endif  // KS_KERNELS_H
