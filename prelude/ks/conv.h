// ks/conv.h — convolutions in portable C++ (no heap, no library).
//
// Generated code calls ks::conv for every `convolve` equation (ksbuild/prims/lowering.py), on the whole
// batch of images. A convolution of an image x [C, D, H, W] with a kernel w [M, C/G, KD, KH, KW] is, for
// each group g, the matrix product y_g [M/G, O] = w_g [M/G, C/G·K] · im2col_g [C/G·K, O] (O: the output
// positions, K: the kernel taps). The kernel is packed once per call into the row tiles of ks/gemm.h's
// register tiles. The im2col matrix is never built whole: blocks of it are copied from the image into
// the panels the tiles read (the image is first copied with its zero padding when the windows reach
// outside it, one small pass), and the tiles store epi(image, m, q, v) for output channel m and flat
// position q (a bias and an activation fused into the store). With a BLAS (backend blas or aten) the
// block is copied row-major instead and multiplied by the library's gemm (`product`), and the epilogue
// runs over the block just computed. 1-d and 2-d convolutions are 3-d ones with leading sizes of 1.
#ifndef KS_CONV_H
#define KS_CONV_H

#include <cstdint>

#include "gemm.h"

namespace ks {

// The geometry of a convolution: channels, groups, and per spatial axis (d, h, w) the input and output
// sizes, kernel taps, stride, dilation and leading padding.
struct conv_shape {
    int64_t channels;
    int64_t out_channels;
    int64_t groups;
    int64_t in[3];
    int64_t out[3];
    int64_t kernel[3];
    int64_t stride[3];
    int64_t dilation[3];
    int64_t pad[3];

    constexpr int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
    constexpr int64_t depth() const { return channels / groups * taps(); }  // K: the rows of a group's im2col
    constexpr int64_t positions() const { return out[0] * out[1] * out[2]; }
    constexpr int64_t in_plane() const { return in[0] * in[1] * in[2]; }
};

namespace convs {

constexpr int64_t position_block = tiles::panels_per_block;  // panels of positions copied at a time

// The extent of axis a the windows read: positions [-pad, extent - pad) of the input.
constexpr int64_t extent(const conv_shape& s, int a) {
    return (s.out[a] - 1) * s.stride[a] + (s.kernel[a] - 1) * s.dilation[a] + 1;
}

// Whether the windows read outside the image (then it is copied, zero-padded, first).
constexpr bool needs_padding(const conv_shape& s) {
    for (int a = 0; a < 3; ++a) {
        if (s.pad[a] > 0 || extent(s, a) - s.pad[a] > s.in[a]) {
            return true;
        }
    }
    return false;
}

// Whether the tiles read the windows straight from the image (stride 1 along its rows, rows of at least
// half a panel of positions): row (c, tap) of the im2col matrix at positions [q, q + P) of one output row
// is P consecutive elements of the image. Otherwise blocks of the im2col matrix are packed into panels.
template <class T>
constexpr bool direct(const conv_shape& s) {
    return s.stride[2] == 1 && 2 * s.out[2] >= panel_width<T> && s.channels * s.in[0] * s.in[1] * s.in[2] < (1ll << 30);
}

// Whether the image is copied first: to pad it, or because the tiles of a direct convolution whose rows
// end in a partial panel read up to a panel past them (the copy has that much room after it).
template <class T>
constexpr bool copies_image(const conv_shape& s) {
    return needs_padding(s) || (direct<T>(s) && s.out[2] % panel_width<T> != 0);
}

// The elements of the zero-padded copy of the image and its room after (0 when there is no copy).
template <class T>
constexpr int64_t padded_size(const conv_shape& s) {
    return copies_image<T>(s) ? s.channels * extent(s, 0) * extent(s, 1) * extent(s, 2) + panel_width<T> : 0;
}

// The same convolution of the padded image: its spatial sizes are the extents, with no padding.
constexpr conv_shape padded_shape(const conv_shape& s) {
    conv_shape p = s;
    for (int a = 0; a < 3; ++a) {
        p.in[a] = extent(s, a);
        p.pad[a] = 0;
    }
    return p;
}

// x [C, in...] copied into dst [C, extents...] with zeros where the windows read padding (and a panel of
// zeros after): each row of dst written once, the image's part copied and the rest zeroed.
template <class T>
void pad_image(const conv_shape& s, const T* x, T* dst) {
    const int64_t e0 = extent(s, 0), e1 = extent(s, 1), e2 = extent(s, 2);
    // the input's planes, rows and columns that fall inside the extents: [0, d1) x [0, h1) x [0, w1)
    const int64_t d1 = s.in[0] < e0 - s.pad[0] ? s.in[0] : e0 - s.pad[0];
    const int64_t h1 = s.in[1] < e1 - s.pad[1] ? s.in[1] : e1 - s.pad[1];
    const int64_t w1 = s.in[2] < e2 - s.pad[2] ? s.in[2] : e2 - s.pad[2];
    for (int64_t c = 0; c < s.channels; ++c) {
        for (int64_t d = 0; d < e0; ++d) {
            for (int64_t h = 0; h < e1; ++h) {
                T* row = dst + ((c * e0 + d) * e1 + h) * e2;
                const int64_t sd = d - s.pad[0], sh = h - s.pad[1];
                const int64_t w0 = sd >= 0 && sd < d1 && sh >= 0 && sh < h1 ? s.pad[2] : e2;  // (no source row: all zeros)
                const int64_t w2 = w0 < e2 ? w0 + w1 : e2;
                for (int64_t w = 0; w < w0; ++w) {
                    row[w] = T(0);
                }
                if (w0 < e2) {
                    const T* src = x + ((c * s.in[0] + sd) * s.in[1] + sh) * s.in[2];
                    for (int64_t w = w0; w < w2; ++w) {
                        row[w] = src[w - w0];
                    }
                }
                for (int64_t w = w2; w < e2; ++w) {
                    row[w] = T(0);
                }
            }
        }
    }
    T* room = dst + s.channels * e0 * e1 * e2;
    for (int64_t i = 0; i < panel_width<T>; ++i) {
        room[i] = T(0);
    }
}

// The first element of each row [k0, k0 + kc) of image x's im2col matrix (x needs no padding) at output
// position 0, found without a division per row: row (c, kd, kh, kw) starts at channel c's tap.
template <class T, class Row>
inline void im2col_rows(const conv_shape& s, const T* x, int64_t k0, int64_t kc, Row row) {
    const int64_t taps = s.taps(), plane = s.in_plane();
    int64_t c = k0 / taps, t = k0 % taps;
    int64_t kw = t % s.kernel[2], kh = t / s.kernel[2] % s.kernel[1], kd = t / (s.kernel[2] * s.kernel[1]);
    for (int64_t p = 0; p < kc; ++p) {
        row(p, x + c * plane + (kd * s.dilation[0] * s.in[1] + kh * s.dilation[1]) * s.in[2] + kw * s.dilation[2]);
        if (++kw < s.kernel[2]) {
            continue;
        }
        kw = 0;
        if (++kh < s.kernel[1]) {
            continue;
        }
        kh = 0;
        if (++kd < s.kernel[0]) {
            continue;
        }
        kd = 0;
        ++c;
    }
}

// The offset of each row [0, depth) of one group's im2col matrix from the group's image (no padding):
// row (c, kd, kh, kw) starts at channel c's tap.
inline void row_offsets(const conv_shape& s, int32_t* out) {
    const int64_t depth = s.depth();
    int64_t p = 0;
    for (int64_t c = 0; p < depth; ++c) {
        for (int64_t kd = 0; kd < s.kernel[0]; ++kd) {
            for (int64_t kh = 0; kh < s.kernel[1]; ++kh) {
                for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
                    out[p++] = static_cast<int32_t>(c * s.in_plane() +
                                                    (kd * s.dilation[0] * s.in[1] + kh * s.dilation[1]) * s.in[2] +
                                                    kw * s.dilation[2]);
                }
            }
        }
    }
}

// Calls run(r, offset, count) for the output rows over positions [j0, j0 + cols): positions
// [r, r + count) read the im2col row's first element + offset + u * stride[2].
template <class Run>
inline void position_runs(const conv_shape& s, int64_t j0, int64_t cols, Run run) {
    int64_t ow = j0 % s.out[2], oh = j0 / s.out[2] % s.out[1], od = j0 / (s.out[2] * s.out[1]);
    for (int64_t r = 0; r < cols;) {
        const int64_t count = s.out[2] - ow < cols - r ? s.out[2] - ow : cols - r;
        run(r, (od * s.stride[0] * s.in[1] + oh * s.stride[1]) * s.in[2] + ow * s.stride[2], count);
        r += count;
        ow = 0;
        if (++oh == s.out[1]) {
            oh = 0;
            ++od;
        }
    }
}

// The copies that make one im2col row's stretch of a position block, the same for every row: `n` chunks,
// chunk i copying count[i] elements from the row's first element + src[i] (stride apart) to dst[i].
template <class T>
struct chunks {
    static constexpr int64_t most = 2 * position_block * panel_width<T>;  // runs cut at panel edges
    int64_t n = 0;
    int64_t src[most];
    int64_t dst[most];
    int64_t count[most];
};

// The chunks of positions [j0, j0 + cols) into panels of kc rows (element q at (q / P)·kc·P + q % P): each
// output row's run cut where a panel ends.
template <class T>
inline void panel_chunks(const conv_shape& s, int64_t j0, int64_t cols, int64_t kc, chunks<T>& out) {
    constexpr int P = panel_width<T>;
    position_runs(s, j0, cols, [&](int64_t r, int64_t offset, int64_t count) {
        while (count > 0) {
            const int64_t off = r % P, n = P - off < count ? P - off : count;
            out.src[out.n] = offset;
            out.dst[out.n] = (r / P) * kc * P + off;
            out.count[out.n++] = n;
            r += n;
            offset += n * s.stride[2];
            count -= n;
        }
    });
}

// Rows [k0, k0 + kc) and positions [j0, j0 + cols) of image x's im2col matrix (x needs no padding), copied
// into panels at dst ([ceil(cols / P)][kc][P], zero-padded): for a group of rows at a time, chunk by chunk,
// so that each panel is written front to back.
template <class T>
void pack_panels(const conv_shape& s, const T* x, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst) {
    constexpr int P = panel_width<T>;
    constexpr int64_t group = 64;
    const int64_t step = s.stride[2];
    chunks<T> cs;
    panel_chunks<T>(s, j0, cols, kc, cs);
    const T* firsts[group];
    for (int64_t p0 = 0; p0 < kc; p0 += group) {
        const int64_t rows = kc - p0 < group ? kc - p0 : group;
        im2col_rows<T>(s, x, k0 + p0, rows, [&firsts](int64_t p, const T* first) { firsts[p] = first; });
        for (int64_t i = 0; i < cs.n; ++i) {
            T* out = dst + cs.dst[i] + p0 * P;  // row p of the chunk's panel at out + p * P
            const int64_t src = cs.src[i], count = cs.count[i];
            if (step == 1 && count == P) {
                for (int64_t p = 0; p < rows; ++p) {
                    std::memcpy(out + p * P, firsts[p] + src, sizeof(T) * P);
                }
                continue;
            }
            for (int64_t p = 0; p < rows; ++p) {
                for (int64_t u = 0; u < count; ++u) {
                    out[p * P + u] = firsts[p][src + u * step];
                }
            }
        }
    }
    for (int64_t q = cols; q % P != 0; ++q) {  // the last panel's columns past the block: zeros
        for (int64_t p = 0; p < kc; ++p) {
            dst[(q / P) * kc * P + p * P + q % P] = T(0);
        }
    }
}

// The same block row-major: dst[p * cols + q].
template <class T>
void pack_rows(const conv_shape& s, const T* x, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst) {
    const int64_t step = s.stride[2];
    chunks<T> cs;
    position_runs(s, j0, cols, [&cs](int64_t r, int64_t offset, int64_t count) {
        cs.src[cs.n] = offset;
        cs.dst[cs.n] = r;
        cs.count[cs.n++] = count;
    });
    im2col_rows<T>(s, x, k0, kc, [&](int64_t p, const T* first) {
        for (int64_t i = 0; i < cs.n; ++i) {
            const T* src = first + cs.src[i];
            T* out = dst + p * cols + cs.dst[i];
            for (int64_t u = 0; u < cs.count[i]; ++u) {
                out[u] = src[u * step];
            }
        }
    });
}

// An epilogue seen from one group's product for one image: its rows are output channels from `first` on.
template <class Epi>
struct channels_from {
    const Epi& epi;
    int64_t image;
    int64_t first;
    template <class T>
    T operator()(int64_t i, int64_t j, T v) const {
        return epi(image, first + i, j, v);
    }
};

// The im2col block's columns: a few panels of positions (all of them when fewer).
template <class T>
constexpr int64_t block_columns(const conv_shape& s) {
    constexpr int64_t block = position_block * panel_width<T>;
    return s.positions() < block ? (s.positions() + panel_width<T> - 1) / panel_width<T> * panel_width<T> : block;
}

// Elements rounded up to a multiple of 16 (so that the next scratch region stays 64-byte aligned).
constexpr int64_t aligned(int64_t count) {
    return (count + 15) / 16 * 16;
}

// The packed kernel's elements: every group's rows in tiles (tiles::pack_a).
constexpr int64_t packed_kernel_size(const conv_shape& s) {
    return s.groups * tiles::packed_a_size(s.out_channels / s.groups, s.depth());
}

}  // namespace convs

// The scratch elements ks::conv uses: the kernel packed in row tiles (with the register tiles), the padded
// image, then the im2col rows' offsets (direct) or one im2col block (panels with the register tiles, rows
// with a library's gemm).
template <class T>
constexpr int64_t conv_scratch(const conv_shape& s, bool rows = false) {
    const int64_t image = convs::aligned(convs::padded_size<T>(s));
    if (rows) {
        return image + s.depth() * convs::block_columns<T>(s);
    }
    const int64_t rest = convs::direct<T>(s) ? convs::aligned(s.depth())  // (int32 offsets, one per element)
                                              : tiles::k_step(s.depth()) * convs::block_columns<T>(s);
    return convs::aligned(convs::packed_kernel_size(s)) + image + rest;
}

namespace convs {

// One group of one image, the windows read straight from the (padded) image x through the rows' offsets.
template <class T, class Epi>
void direct_group(const conv_shape& s, const T* x, const T* kernel, const int32_t* offsets, T* y, const Epi& epi) {
    constexpr int P = panel_width<T>, MR = tiles::row_block;
    const int64_t mg = s.out_channels / s.groups, depth = s.depth(), n = s.positions();
    const int64_t step = tiles::k_step(depth), block = position_block * P;
    const int64_t row_step = s.stride[1] * s.in[2];  // (the image elements between two output rows)
    for (int64_t k0 = 0; k0 < depth; k0 += step) {
        const int64_t kc = depth - k0 < step ? depth - k0 : step;
        const tiles::row_tiles<T> a{kernel + k0 * MR, 1, MR, depth * MR};
        for (int64_t od = 0; od < s.out[0]; ++od) {
            const T* plane = x + od * s.stride[0] * s.in[1] * s.in[2];
            if (s.out[2] <= P) {  // rows of at most one panel: a panel per output row, position_block rows at a time
                const int width = static_cast<int>(s.out[2]);
                for (int64_t oh = 0; oh < s.out[1]; oh += position_block) {
                    const int rows = static_cast<int>(s.out[1] - oh < position_block ? s.out[1] - oh : position_block);
                    const int64_t q0 = (od * s.out[1] + oh) * s.out[2];
                    tiles::block<T, true>(mg, kc, a, tiles::table_rows<T>{plane + oh * row_step, offsets + k0, row_step, width},
                                          rows, y + q0, n, rows * s.out[2], k0 > 0, k0 + kc >= depth, q0, epi);
                }
                continue;
            }
            for (int64_t oh = 0; oh < s.out[1]; ++oh) {
                const T* row = plane + oh * row_step;
                const int64_t q0 = (od * s.out[1] + oh) * s.out[2];
                for (int64_t ow = 0; ow < s.out[2]; ow += block) {
                    const int64_t cols = s.out[2] - ow < block ? s.out[2] - ow : block;
                    tiles::block<T, true>(mg, kc, a, tiles::table_rows<T>{row + ow, offsets + k0, P, P},
                                          static_cast<int>((cols + P - 1) / P), y + q0 + ow, n, cols, k0 > 0,
                                          k0 + kc >= depth, q0 + ow, epi);
                }
            }
        }
    }
}

// One group of one image, the im2col matrix packed into panels block by block.
template <class T, class Epi>
void packed_group(const conv_shape& s, const T* x, const T* kernel, T* panels, T* y, const Epi& epi) {
    constexpr int P = panel_width<T>, MR = tiles::row_block;
    const int64_t mg = s.out_channels / s.groups, depth = s.depth(), n = s.positions();
    const int64_t step = tiles::k_step(depth), block = position_block * P;
    for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t cols = n - j0 < block ? n - j0 : block;
        for (int64_t k0 = 0; k0 < depth; k0 += step) {
            const int64_t kc = depth - k0 < step ? depth - k0 : step;
            pack_panels<T>(s, x, k0, kc, j0, cols, panels);
            const tiles::row_tiles<T> a{kernel + k0 * MR, 1, MR, depth * MR};
            tiles::block<T, true>(mg, kc, a, tiles::panel_rows<T>{panels, P, kc * P},
                                  static_cast<int>((cols + P - 1) / P), y + j0, n, cols, k0 > 0, k0 + kc >= depth, j0,
                                  epi);
        }
    }
}

}  // namespace convs

// y [images, M, positions] = epi(conv(x [images, C, in...], w [M, C/G, taps...])) with the register tiles:
// epi(image, m, q, value) for output channel m and flat position q.
template <class T, class Epi = no_epilogue>
void conv(const conv_shape& shape, int64_t images, const T* x, const T* w, T* y, T* scratch, const Epi& epi = Epi()) {
    x = tiles::opaque(x);
    w = tiles::opaque(w);
    const bool copy = convs::copies_image<T>(shape), direct = convs::direct<T>(shape);
    const conv_shape s = copy ? convs::padded_shape(shape) : shape;
    const int64_t mg = s.out_channels / s.groups, depth = s.depth(), n = s.positions();
    const int64_t kernel_size = tiles::packed_a_size(mg, depth);
    T* padded = scratch + convs::aligned(convs::packed_kernel_size(shape));
    T* rest = padded + convs::aligned(convs::padded_size<T>(shape));
    int32_t* offsets = reinterpret_cast<int32_t*>(rest);  // (direct: the rows' offsets; else the im2col block)
    for (int64_t g = 0; g < s.groups; ++g) {
        tiles::pack_a<T>(mg, depth, w + g * mg * depth, depth, 1, scratch + g * kernel_size);
    }
    if (direct) {
        convs::row_offsets(s, offsets);
    }
    for (int64_t image = 0; image < images; ++image) {
        const T* xi = x + image * shape.channels * shape.in_plane();
        if (copy) {
            convs::pad_image<T>(shape, xi, padded);
            xi = padded;
        }
        for (int64_t g = 0; g < s.groups; ++g) {
            const T* xg = xi + g * (s.channels / s.groups) * s.in_plane();
            T* yg = y + (image * s.out_channels + g * mg) * n;
            const convs::channels_from<Epi> eg{epi, image, g * mg};
            if (direct) {
                convs::direct_group<T>(s, xg, scratch + g * kernel_size, offsets, yg, eg);
            } else {
                convs::packed_group<T>(s, xg, scratch + g * kernel_size, rest, yg, eg);
            }
        }
    }
}

// The same with a library's matrix product: product(m, n, k, a, b, c, accumulate) (ks::library_gemm).
template <class T, class Product, class Epi = no_epilogue>
void conv_rows(const conv_shape& shape, int64_t images, const T* x, const T* w, T* y, T* scratch,
               const Product& product, const Epi& epi = Epi()) {
    const bool pad = convs::copies_image<T>(shape);
    const conv_shape s = pad ? convs::padded_shape(shape) : shape;
    const int64_t mg = s.out_channels / s.groups, depth = s.depth(), n = s.positions();
    const int64_t block = convs::position_block * panel_width<T>;
    T* rows = scratch + convs::aligned(convs::padded_size<T>(shape));
    for (int64_t image = 0; image < images; ++image) {
        const T* xi = x + image * shape.channels * shape.in_plane();
        if (pad) {
            convs::pad_image<T>(shape, xi, scratch);
            xi = scratch;
        }
        for (int64_t g = 0; g < s.groups; ++g) {
            const T* xg = xi + g * (s.channels / s.groups) * s.in_plane();
            T* yg = y + (image * s.out_channels + g * mg) * n;
            for (int64_t j0 = 0; j0 < n; j0 += block) {
                const int64_t cols = n - j0 < block ? n - j0 : block;
                convs::pack_rows<T>(s, xg, 0, depth, j0, cols, rows);
                product(mg, cols, depth, matrix<const T>{w + g * mg * depth, depth, 1},
                        matrix<const T>{rows, cols, 1}, matrix<T>{yg + j0, n, 1}, false);
                for (int64_t i = 0; i < mg; ++i) {
                    T* out = yg + i * n + j0;
                    for (int64_t q = 0; q < cols; ++q) {
                        out[q] = epi(image, g * mg + i, j0 + q, out[q]);
                    }
                }
            }
        }
    }
}

}  // namespace ks

#endif  // KS_CONV_H
