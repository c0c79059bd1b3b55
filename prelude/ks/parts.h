// ks/parts.h — one layer split over threads: the part of a kernel-layer call that each of N threads computes.
//
// With `[build] threads = N` the generated code runs a convolution or a matrix product of the kernel layer as
//     const int parts = ks::parts::conv_parts<float>(N, shape, images);
//     ks::pool::run(N, parts, [&](int part, int slot) {
//         ks::parts::conv<float>(part, parts, slot, shape, images, x, w, y, scratch, epilogue);
//     });
// Each part is one kernel-layer call of its own, on the scratch of the thread that runs it (`slot`; parts::room: N
// slices of the one call's scratch, 64-byte aligned), over a range of the images when they divide evenly among the
// threads (a batch of 8 on 2 threads: 4 images each, every weight read once per part), else, image by image, a range
// of the output channels (a batch of 1: each part reads its channels' weights and the whole image). A product's
// parts are ranges of its columns (whole blocks of panels) or, with fewer columns than parts × a block, of its rows.
// A split by channels or columns has up to 4 parts per thread when the layer is big enough and a part does not copy
// the whole image again (conv_parts, product_parts): the threads take parts until none is left, so a thread that
// starts late (a worker the system has not scheduled yet) leaves the others little to wait for. Nothing here starts
// a thread or uses the heap: the generated code decides whether the parts run in parallel, the kernels compute
// ranges, and a part gives the same results as the whole call gives there (each element's sum is the same sum, in
// the same order: tests/test_threads.py).
#ifndef KS_PARTS_H
#define KS_PARTS_H

#include <cstdint>

#include "kernels.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {
namespace parts {

// A range [begin, end) of items.
struct range {
    int64_t begin;
    int64_t end;

    constexpr int64_t size() const { return end - begin; }
};

// Part `part` of `parts` near-equal shares of n items, cut at multiples of `unit` (a register tile's rows, a panel's
// columns, a group's channels).
constexpr range share(int64_t n, int64_t unit, int part, int parts) {
    const int64_t units = (n + unit - 1) / unit;
    const int64_t b = units * part / parts * unit, e = units * (part + 1) / parts * unit;
    return {b < n ? b : n, e < n ? e : n};
}

// The scratch elements of `parts` parts, each `elements` of its own (64-byte aligned).
constexpr int64_t room(int parts, int64_t elements) {
    return parts * convs::aligned(elements);
}

// Whether the parts take ranges of images: they divide evenly among them.
constexpr bool by_images(int64_t images, int parts) {
    return images >= parts && images % parts == 0;
}

// The multiply-adds a part of a split by channels or columns should have at least (about 5 µs on one core), and the
// most parts per thread.
constexpr int64_t part_macs = int64_t(1) << 17;
constexpr int most_per_thread = 4;

// The parts of `units` units (register tiles' rows, groups, panels) of `macs` multiply-adds in all on `threads`
// threads: `threads` (at most `units`), more when each part keeps part_macs and two units, at most most_per_thread
// per thread, a multiple of `threads` (near-equal parts then end together: 3 parts on 2 threads kept one thread
// waiting a third of the layer).
constexpr int split(int threads, int64_t units, int64_t macs) {
    const int64_t most = int64_t(most_per_thread) * threads, by_units = units / 2 > threads ? units / 2 : threads;
    int64_t p = macs / part_macs;
    p = p < threads ? threads : p > most ? most : p;
    p = (p < by_units ? p : by_units) / threads * threads;
    return static_cast<int>(p < units ? p : units < 1 ? 1 : units);
}

// The output channels a part of a convolution computes: whole register tiles' rows, or whole groups.
constexpr range channels(const conv_shape& s, int part, int parts) {
    const int64_t unit = s.groups > 1 ? tiles::index_div(s.out_channels, s.groups) : tiles::row_block;
    return share(s.out_channels, unit, part, parts);
}

// The convolution of output channels r alone (whole groups when there are several).
constexpr conv_shape of_channels(const conv_shape& s, range r) {
    conv_shape p = s;
    p.out_channels = r.size();
    if (s.groups > 1) {
        p.groups = r.size() / tiles::index_div(s.out_channels, s.groups);
        p.channels = p.groups * tiles::index_div(s.channels, s.groups);
    }
    return p;
}

// Whether each part of a convolution by output channels copies the whole image again (a dense convolution with
// more than one tap or a stride: the padded image, its phases or im2col blocks; a depthwise or grouped part copies
// its own channels, a pointwise one reads the image as it is).
constexpr bool copies_image(const conv_shape& s) {
    return s.groups == 1 && (s.taps() > 1 || s.stride[0] * s.stride[1] * s.stride[2] > 1);
}

// The parts of a convolution (ks::conv, ks::conv_depthwise) of `images` images on `threads` threads: one per thread
// by images or when each part copies the image, else split's by output channels.
constexpr int conv_parts(int threads, const conv_shape& s, int64_t images) {
    if (by_images(images, threads) || copies_image(s)) {
        return threads;
    }
    const int64_t unit = s.groups > 1 ? tiles::index_div(s.out_channels, s.groups) : tiles::row_block;
    return split(threads, (s.out_channels + unit - 1) / unit, s.out_channels * s.depth() * s.positions());
}

// call(shape, images, x, w, y, epilogue): part `part` of a convolution whose kernel is w [M, C/G, taps...] (ks::conv,
// ks::conv_depthwise), as calls of the same kernel on the part's images or channels.
template <class T, class Call>
inline void conv_ranges(int part, int parts, const conv_shape& s, int64_t images, const T* x, const T* w, T* y,
                        const epilogue<T>& epi, const Call& call) {
    const int64_t in_image = s.channels * s.in_plane(), out_image = s.out_channels * s.positions();
    if (by_images(images, parts)) {
        const range r = share(images, 1, part, parts);
        call(s, r.size(), x + r.begin * in_image, w, y + r.begin * out_image, epi.group(r.begin, 0));
        return;
    }
    const range r = channels(s, part, parts);
    if (r.size() <= 0) {
        return;
    }
    const conv_shape p = of_channels(s, r);
    const int64_t first_group = s.groups > 1 ? r.begin / tiles::index_div(s.out_channels, s.groups) : 0;
    const int64_t first_input = first_group * tiles::index_div(s.channels, s.groups);  // (its first input channel)
    for (int64_t image = 0; image < images; ++image) {
        call(p, 1, x + image * in_image + first_input * s.in_plane(), w + r.begin * s.depth(),
             y + image * out_image + r.begin * s.positions(), epi.group(image, r.begin));
    }
}

// Part `part` of ks::conv(s, images, x, w, y, scratch, epi), run by thread `slot`; scratch: room(threads,
// conv_scratch<T>(s)) elements.
template <class T>
void conv(int part, int parts, int slot, const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
          const epilogue<T>& epi = {}) {
    T* mine = scratch + slot * convs::aligned(conv_scratch<T>(s));
    conv_ranges<T>(part, parts, s, images, x, w, y, epi,
                   [&](const conv_shape& p, int64_t n, const T* xp, const T* wp, T* yp, const epilogue<T>& e) {
                       ks::conv<T>(p, n, xp, wp, yp, mine, e);
                   });
}

// Part `part` of ks::conv_depthwise(...), run by thread `slot`; scratch: room(threads, depthwise_scratch<T>(s)).
template <class T>
void depthwise(int part, int parts, int slot, const conv_shape& s, int64_t images, const T* x, const T* w, T* y,
               T* scratch, const epilogue<T>& epi = {}) {
    T* mine = scratch + slot * convs::aligned(depthwise_scratch<T>(s));
    conv_ranges<T>(part, parts, s, images, x, w, y, epi,
                   [&](const conv_shape& p, int64_t n, const T* xp, const T* wp, T* yp, const epilogue<T>& e) {
                       conv_depthwise<T>(p, n, xp, wp, yp, mine, e);
                   });
}

// Part `part` of ks::conv_winograd(s, images, x, u, y, scratch, epi) (u: the transformed kernel [16][C][M], whose
// output channels are its last axis: conv_winograd_range takes the range), run by thread `slot`; scratch:
// room(threads, winograd_scratch<T>(s)) elements. One part per thread: each part of channels
// transforms the whole image's input tiles again. By images only when an image's tiles are whole blocks of
// winograd::tile_block: conv_winograd's blocks run on from one image into the next, and a part's blocks are then the
// whole batch's (a tile's sums over the channels are grouped by the block's panels: bit for bit the one-thread build).
template <class T>
void winograd(int part, int parts, int slot, const conv_shape& s, int64_t images, const T* x, const T* u, T* y,
              T* scratch, const epilogue<T>& epi = {}) {
    T* mine = scratch + slot * convs::aligned(winograd_scratch<T>(s));
    const int64_t tiles = (s.out[1] + 1) / 2 * ((s.out[2] + 1) / 2);
    if (by_images(images, parts) && tiles % winograd::tile_block<T> == 0) {
        const range r = share(images, 1, part, parts);
        conv_winograd<T>(s, r.size(), x + r.begin * s.channels * s.in_plane(), u,
                         y + r.begin * s.out_channels * s.positions(), mine, epi.group(r.begin, 0));
        return;
    }
    const range r = channels(s, part, parts);
    if (r.size() > 0) {
        conv_winograd_range<T>(s, images, x, u, y, mine, epi, r.begin, r.size());
    }
}

// An epilogue whose columns start at `first_column` of the whole product's (a part's columns): the run of
// shifted_epilogue.
template <class T>
struct shifted {
    epilogue<T> inner;
    int64_t first_column;
};

template <class T>
void run_shifted(const void* self, int64_t image, int64_t i, int64_t j, T* out, int64_t rs, int64_t cs, int64_t rows,
                 int64_t cols) {
    const shifted<T>& s = *static_cast<const shifted<T>*>(self);
    s.inner.run(s.inner.self, image, i, j + s.first_column, out, rs, cs, rows, cols);
}

// The columns of a product's part by columns come in whole blocks of the kernels' column loop (tiles::
// panels_per_block panels, from the product's first column): a block's panels go to tiles of up to panels_for(rows)
// panels from its first one, and a tile of fewer panels than that keeps more sums per element (micro's KU: the sum
// over k in another order). A part from the middle of a block grouped its panels otherwise: on AVX2, a linear
// layer at batch 2 (tiles of 3 panels, blocks of 4) differed from the whole product in the last bit of 40% of its
// outputs.
// (With fewer rows than a tall tile, ks::packed_gemm's blocks are wider: tiles::block_panels(m); a multiple of
// tiled_gemm's, so that a part starts at a block of either.)
template <class T>
constexpr int64_t column_unit(int64_t m) {
    return tiles::block_panels(m) * panel_width<T>;
}

// Whether a product's parts take ranges of columns (whole blocks; at least one each), else of rows.
template <class T>
constexpr bool by_columns(int64_t m, int64_t n, int parts) {
    return n >= parts * column_unit<T>(m);
}

// The range of a product's rows or columns a part computes.
template <class T>
constexpr range product_range(int64_t m, int64_t n, int part, int parts) {
    return by_columns<T>(m, n, parts) ? share(n, column_unit<T>(m), part, parts)
                                      : share(m, tiles::row_block, part, parts);
}

// The parts of an m x n product of depth k on `threads` threads: split's by columns (whole blocks) or rows.
template <class T>
constexpr int product_parts(int threads, int64_t m, int64_t n, int64_t k) {
    const int64_t units = by_columns<T>(m, n, threads) ? (n + column_unit<T>(m) - 1) / column_unit<T>(m)
                                                       : (m + tiles::row_block - 1) / tiles::row_block;
    return split(threads, units, m * n * k);
}

// call(m, n, a row offset, a column offset, epilogue) for part `part` of an m x n product.
template <class T, class Call>
inline void product_ranges(int part, int parts, int64_t m, int64_t n, const epilogue<T>& epi, const Call& call) {
    const range r = product_range<T>(m, n, part, parts);
    if (r.size() <= 0) {
        return;
    }
    // (An affine epilogue by column, ks::column_affine_epilogue: its first index is a column's, not a row's.)
    const bool by_column = epi.run == nullptr && epi.swapped;
    if (!by_columns<T>(m, n, parts)) {
        call(r.size(), n, r.begin, int64_t(0), by_column ? epi : epi.group(0, r.begin));
        return;
    }
    if (epi.run == nullptr) {  // (none, or a bias and bounds per row: the columns do not matter)
        call(m, r.size(), int64_t(0), r.begin, by_column ? epi.group(0, r.begin) : epi);
        return;
    }
    const shifted<T> moved{epi, r.begin};
    call(m, r.size(), int64_t(0), r.begin, epilogue<T>{&run_shifted<T>, &moved});
}

// Part `part` of ks::tiled_gemm(m, n, k, a, b, c, accumulate, scratch, epi), run by thread `slot`; scratch:
// room(threads, tiled_gemm_scratch<T>(m, n, k)) elements.
template <class T>
void tiled_gemm(int part, int parts, int slot, int64_t m, int64_t n, int64_t k, matrix<const T> a, matrix<const T> b,
                matrix<T> c, bool accumulate, T* scratch, const epilogue<T>& epi = {}) {
    T* mine = scratch + slot * convs::aligned(tiled_gemm_scratch<T>(m, n, k));
    product_ranges<T>(part, parts, m, n, epi, [&](int64_t mp, int64_t np, int64_t i0, int64_t j0, const epilogue<T>& e) {
        ks::tiled_gemm<T>(mp, np, k, {a.data + i0 * a.rs, a.rs, a.cs}, {b.data + j0 * b.cs, b.rs, b.cs},
                          {c.data + i0 * c.rs + j0 * c.cs, c.rs, c.cs}, accumulate, mine, e);
    });
}

// Part `part` of ks::packed_gemm(m, n, k, a, b, c, accumulate, epi) (a part's columns: whole blocks of b's panels).
template <class T>
void packed_gemm(int part, int parts, int /*slot*/, int64_t m, int64_t n, int64_t k, matrix<const T> a, panels<T> b, matrix<T> c,
                 bool accumulate, const epilogue<T>& epi = {}) {
    product_ranges<T>(part, parts, m, n, epi, [&](int64_t mp, int64_t np, int64_t i0, int64_t j0, const epilogue<T>& e) {
        ks::packed_gemm<T>(mp, np, k, {a.data + i0 * a.rs, a.rs, a.cs}, {b.data + j0 * b.k, b.k},
                           {c.data + i0 * c.rs + j0 * c.cs, c.rs, c.cs}, accumulate, e);
    });
}

}  // namespace parts
}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_PARTS_H
