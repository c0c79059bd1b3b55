// ks/conv.h — convolutions in portable C++ (no heap, no library).
//
// Generated code calls ks::conv for every `convolve` equation (ksbuild/prims/lowering.py), on the whole
// batch of images. A convolution of an image x [C, D, H, W] with a kernel w [M, C/G, KD, KH, KW] is, for
// each group g, the matrix product y_g [M/G, O] = w_g [M/G, C/G·K] · im2col_g [C/G·K, O] (O: the output
// positions, K: the kernel taps). The kernel is packed once per call into the row tiles of ks/gemm.h's
// register tiles. The im2col matrix is never built whole: blocks of it are copied from the image into
// the panels the tiles read (the image is first copied with its zero padding when the windows reach
// outside it, one small pass), and the epilogue (ks::epilogue: a bias and an activation) runs over each
// tile the tiles store, with i the output channel and j the flat output position. With a BLAS (backend
// blas or aten) the block is copied row-major instead and multiplied by the library's gemm (`product`),
// and the epilogue runs over the block just computed. 1-d and 2-d convolutions are 3-d ones with leading sizes of 1.
#ifndef KS_CONV_H
#define KS_CONV_H

#include <cstdint>

#include "gemm.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

// The integer type of a conv_shape's sizes: int64_t, and int32_t on a 32-bit target (a microcontroller, where no
// tensor has 2^31 elements), whose 21 fields are then 84 bytes of read-only data per convolution instead of 168 and
// whose arithmetic on them takes one register, not two (issue 36: the Cortex-M4 benchmark's flash at -Os).
#if INTPTR_MAX > INT32_MAX
using conv_dim = int64_t;
#else
using conv_dim = int32_t;
#endif

// The geometry of a convolution: channels, groups, and per spatial axis (d, h, w) the input and output
// sizes, kernel taps, stride, dilation and leading padding.
struct conv_shape {
    conv_dim channels;
    conv_dim out_channels;
    conv_dim groups;
    conv_dim in[3];
    conv_dim out[3];
    conv_dim kernel[3];
    conv_dim stride[3];
    conv_dim dilation[3];
    conv_dim pad[3];

    constexpr conv_dim taps() const { return kernel[0] * kernel[1] * kernel[2]; }
    // K: the rows of a group's im2col
    constexpr conv_dim depth() const { return conv_dim(tiles::index_div(channels, groups)) * taps(); }
    constexpr conv_dim positions() const { return out[0] * out[1] * out[2]; }
    constexpr conv_dim in_plane() const { return in[0] * in[1] * in[2]; }
};

namespace convs {

constexpr int64_t position_block = tiles::panels_per_block;  // panels of positions copied at a time

// Elements rounded up to a multiple of 16 (so that the next scratch region stays 64-byte aligned).
constexpr int64_t aligned(int64_t count) {
    return (count + 15) / 16 * 16;
}

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
//
// Not a pointwise convolution whose rows, read where they lie, crowd the L1 cache's sets (crowded): float on AVX2 and
// AVX-512, one group, planes of 4 KB or more whose size in bytes is a multiple of `low` (the largest power of two
// dividing it), so that the first lines of the C planes fall into 4096 / low of the 64 sets of a 4 KB way (56 × 56
// floats: 12544 B, 16 sets), more than 4 lines a set (half of an 8-way L1). A panel of the direct tiles reads one line
// of every plane, and every row tile reads them again: with 9 lines to a set (MobileNetV2's 144 → 24 at 56², AMD Zen 3)
// those reads missed L1, 1.3× the time of the same layer channels-last, 1.0× packed into panels (the `panels` method's
// copy reads each line once). Planes in fewer than 16 sets (112 × 112: 4) are left direct: there the output rows'
// stores crowd the same sets, and 32 → 16 at 112² was no faster packed (docs/performance.md, "Crowded planes").
template <class T>
constexpr bool crowded(const conv_shape& s) {
    const int64_t bytes = s.in[0] * s.in[1] * s.in[2] * int64_t(sizeof(T)), low = bytes & -bytes;
    return tiles::vector_bytes >= 32 && sizeof(T) == 4 && s.groups == 1 && s.taps() == 1 && bytes >= 4096 &&
           low <= 256 && s.channels * low > 4 * 4096;
}

template <class T>
constexpr bool direct(const conv_shape& s) {
    return s.stride[2] == 1 && 2 * s.out[2] >= panel_width<T> && s.channels * s.in[0] * s.in[1] * s.in[2] < (1ll << 30) &&
           !crowded<T>(s);
}

// Whether a strided 2-d convolution reads its windows straight from the image split into stride phases (method
// `phases`): padded element (y, x) copied to phase plane (y mod stride_h, x mod stride_w) at (y / stride_h,
// x / stride_w), so that tap (kh, kw) of consecutive outputs of a row reads consecutive elements of plane
// (kh mod stride_h, kw mod stride_w), as a stride-1 convolution does from the image: no im2col copy per block.
// One group, dilation 1, taps that reach every phase (a 1 × 1 stride-2 kernel reads one plane of four: the copy of
// the others cost it 1.5-1.75× its time) and rows of four panels or more (ResNet's 7×7 stride-2 stem, 112 × 112:
// 1.7 -> 1.3 ms, its im2col copies had taken 37% of its time; its 3×3 stride-2 layers at 28 × 28 ran 5-15% slower
// this way than by im2col, the output rows of two panels, the second partial, each a pass over the kernel).
template <class T>
constexpr bool phased(const conv_shape& s) {
    return s.groups == 1 && s.out[0] == 1 && s.in[0] == 1 && s.kernel[0] == 1 && s.pad[0] == 0 && s.stride[2] > 1 &&
           s.dilation[1] == 1 && s.dilation[2] == 1 && s.out[2] >= 4 * panel_width<T> && s.kernel[1] >= s.stride[1] &&
           s.kernel[2] >= s.stride[2] &&
           s.channels * s.stride[1] * s.stride[2] * (tiles::index_div(extent(s, 1), s.stride[1]) + 1) *
                   (tiles::index_div(extent(s, 2), s.stride[2]) + 1) <
               (1ll << 30);
}

// Whether the `panels` method packs its im2col blocks from the image split into stride phases (split_phases) instead
// of from the padded image: a 2-d convolution of stride 2 both ways, one group, dilation 1, a kernel of 2 × 2 or more
// (taps in every phase), neither few positions nor `chunks` (a `phases` shape is split all the same and a `flat` one
// has groups, so method_for's tests for those are not repeated: their code had made plan_at 3 KB larger). Each run of
// a block's positions in one output row is then consecutive elements of a plane, copied as whole vectors (copy_run),
// where the padded image's every second element was copied one by one (ResNet-18's 3 × 3 stride-2 layer 64 -> 128 at
// 28 × 28: the copy a third of its time).
template <class T>
constexpr bool split_packed(const conv_shape& s);  // (below, after chunked)

// The rows and columns of each phase plane (phased): the padded extent over the stride, rounded up.
constexpr int64_t phase_rows(const conv_shape& s) {
    return tiles::index_div(extent(s, 1) + s.stride[1] - 1, s.stride[1]);
}
constexpr int64_t phase_cols(const conv_shape& s) {
    return tiles::index_div(extent(s, 2) + s.stride[2] - 1, s.stride[2]);
}

// Whether im2col rows are copied from the image split into stride phases (split_packed; ks::conv_pointwise's windowed
// blocks): a 2-d convolution of stride 2 both ways, dilation 1, a kernel of at least 2 × 2 (taps in every phase).
constexpr bool split_rows(const conv_shape& s) {
    return s.out[0] == 1 && s.in[0] == 1 && s.kernel[0] == 1 && s.pad[0] == 0 && s.stride[1] == 2 && s.stride[2] == 2 &&
           s.dilation[1] == 1 && s.dilation[2] == 1 && s.kernel[1] >= 2 && s.kernel[2] >= 2 &&
           s.channels * 4 * (phase_rows(s) + 1) * (phase_cols(s) + 1) < (1ll << 30);
}

// The stride-1 shape over one phase plane of the split image (direct_group's with phase_offsets; pack_panels' runs).
constexpr conv_shape phase_shape(const conv_shape& s) {
    conv_shape p = s;
    p.in[1] = phase_rows(s);
    p.in[2] = phase_cols(s);
    p.stride[1] = p.stride[2] = 1;
    p.pad[1] = p.pad[2] = 0;
    return p;
}

// Whether a 2-d convolution runs flattened (method `flat`): the windows read straight from the padded image (stride 1)
// or from its stride phases (split as for `phased`), each output row taken as wide as a row of what is read
// (phase_cols: the padded width over the column stride), so that output position (oh, ow) is element oh · phase_cols
// + ow of a flat run and the im2col row of every tap is one run of consecutive elements: panels of 16 positions cross
// the output rows, nothing is packed per block, and the (kernel - 1) / stride columns past each output row are
// computed and dropped (flat_out: the tiles store a block into scratch, copied out row by row). For the shapes the
// other paths pack im2col blocks for (rows shorter than half a panel at stride 1: 7 × 7 maps; strided rows under four
// panels), grouped, with at most flat_rows output channels per group (ResNeXt's grouped 3 × 3 layers at 7 × 7 and
// stride 2: the copy of a group's im2col block was a third of their time); the flat run at most a quarter more
// panels than the positions (a 5 × 5 map of a 3 × 3 kernel, 33 flat for 25: not), taps that reach every phase (not
// a 1 × 1 stride-2 kernel), dilation 1 when strided.
// The flat run's positions (flattened): the output rows phase_cols apart, the last one out[2] long.
constexpr conv_dim flat_positions(const conv_shape& s) {
    return conv_dim((s.out[1] - 1) * phase_cols(s) + s.out[2]);
}

// Whether the flat method reads the stride phases (a stride above 1), else the padded image.
constexpr bool flat_split(const conv_shape& s) {
    return s.stride[1] > 1 || s.stride[2] > 1;
}

template <class T>
constexpr bool flattened(const conv_shape& s);  // (below, after chunked)

// The most output channels per group the flat method takes (groups > 1): an im2col block packed for more is shared by
// so many row tiles that its copy costs less than the tiles lose reading the windows where they lie (ResNet-18's
// 3 × 3 stride-2 layers, 128-512 output channels: 128 -> 256 at 14 × 14 3-27% slower flat; ResNeXt's grouped layers,
// 8-32 per group: 0.47-0.80 of the packed time). One group: not taken, whatever its channels, so that the parts of a
// layer split by output channels (ks/parts.h, threads) run the method the whole layer's scratch was planned for
// (whole groups per part keep a grouped layer's).
constexpr conv_dim flat_rows = 64;

// Whether the image is copied first: to pad it, or because the tiles of a direct convolution whose rows
// end in a partial panel read up to a panel past them (the copy has that much room after it).
template <class T>
constexpr bool copies_image(const conv_shape& s) {
    return needs_padding(s) || (direct<T>(s) && s.out[2] % panel_width<T> != 0) || phased<T>(s) || flattened<T>(s) ||
           split_packed<T>(s);
}

// The elements of the zero-padded copy of the image and its room after (0 when there is no copy); split into
// phase planes when phased.
template <class T>
constexpr int64_t padded_size(const conv_shape& s) {
    const int64_t planes = s.stride[1] * s.stride[2] * phase_rows(s) * phase_cols(s);
    const int64_t plain = s.channels * extent(s, 0) * extent(s, 1) * extent(s, 2);
    const bool split = phased<T>(s) || (flattened<T>(s) && flat_split(s)) || split_packed<T>(s);
    return copies_image<T>(s) ? (split && s.channels * planes > plain ? s.channels * planes : plain) + panel_width<T>
                              : 0;
}

// A pointwise convolution (one tap, stride 1, no padding) as the same convolution of images of one row
// holding all positions: the tiles' panels then hold 16 consecutive positions whatever the rows' width (a
// 14 × 14 layer had panels of 14, and the epilogue's stores of 14 went partly scalar).
constexpr void to_canonical(conv_shape& c) {
    for (int a = 0; a < 3; ++a) {
        if (c.kernel[a] != 1 || c.stride[a] != 1 || c.pad[a] != 0 || c.out[a] != c.in[a]) {
            return;
        }
    }
    const int64_t positions = c.positions();
    for (int a = 0; a < 2; ++a) {
        c.in[a] = c.out[a] = c.dilation[a] = 1;
    }
    c.in[2] = c.out[2] = positions;
    c.dilation[2] = 1;
}

constexpr conv_shape canonical(const conv_shape& s) {
    conv_shape c = s;
    to_canonical(c);
    return c;
}

// The same convolution of the padded image: its spatial sizes are the extents, with no padding.
constexpr void to_padded(conv_shape& p) {
    for (int a = 0; a < 3; ++a) {
        p.in[a] = extent(p, a);  // (the extent reads neither in nor pad)
        p.pad[a] = 0;
    }
}

constexpr conv_shape padded_shape(const conv_shape& s) {
    conv_shape p = s;
    to_padded(p);
    return p;
}

// x [C, in...] copied into dst [C, extents...] with zeros where the windows read padding (and a panel of
// zeros after): each row of dst written once, the image's part copied and the rest zeroed.
template <class T>
__attribute__((noinline)) void pad_image(const conv_shape& s, const T* x, T* dst) {
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
    const int64_t c0 = tiles::index_div(k0, taps), t = k0 - c0 * taps, th = tiles::index_div(t, s.kernel[2]);
    int64_t c = c0, kw = t - th * s.kernel[2], kh = tiles::index_mod(th, s.kernel[1]);
    int64_t kd = tiles::index_div(th, s.kernel[1]);
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
__attribute__((noinline)) inline void row_offsets(const conv_shape& s, int32_t* out) {
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
    const int64_t rows = tiles::index_div(j0, s.out[2]);
    int64_t ow = j0 - rows * s.out[2], oh = tiles::index_mod(rows, s.out[1]), od = tiles::index_div(rows, s.out[1]);
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
// chunk i copying count[i] elements from the row's first element + src[i] (stride apart) to dst[i]. (3 KB:
// they live in the convolution's scratch, not on the stack: chunks_room.)
template <class T>
struct chunks {
    static constexpr int64_t most = 2 * position_block * panel_width<T>;  // runs cut at panel edges
    int64_t n;
    int64_t src[most];
    int64_t dst[most];
    int64_t count[most];
};

// The elements of scratch that hold a chunks<T> (at its end, 64-byte aligned).
template <class T>
constexpr int64_t chunks_room() {
    return aligned((int64_t(sizeof(chunks<T>)) + int64_t(sizeof(T)) - 1) / int64_t(sizeof(T)));
}

// An empty chunks<T> in the last chunks_room<T>() elements of the `size` elements of scratch.
template <class T>
inline chunks<T>& chunks_at(T* scratch, int64_t size) {
    chunks<T>* cs = reinterpret_cast<chunks<T>*>(scratch + size - chunks_room<T>());
    cs->n = 0;
    return *cs;
}

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

// The first element of each row [k0, k0 + kc) of a 2-d stride-2 convolution's im2col matrix in image x split into its
// stride phases (split_phases; s: the convolution's shape): row (c, kh, kw) starts in channel c's plane (kh mod 2,
// kw mod 2) at row kh / 2, column kw / 2 (phase_offsets' offsets, counted without a division per row).
template <class T, class Row>
inline void phase_im2col_rows(const conv_shape& s, const T* x, conv_dim k0, conv_dim kc, Row row) {
    const conv_dim pw = conv_dim(phase_cols(s)), plane = conv_dim(phase_rows(s)) * pw, kw_count = conv_dim(s.kernel[2]);
    const conv_dim taps = conv_dim(s.taps()), c0 = conv_dim(tiles::index_div(k0, taps));
    const conv_dim th = conv_dim(tiles::index_div(k0 - c0 * taps, kw_count));
    conv_dim c = c0, kh = th, kw = k0 - c0 * taps - th * kw_count;
    for (conv_dim p = 0; p < kc; ++p) {
        row(p, x + ((c * 2 + (kh & 1)) * 2 + (kw & 1)) * plane + (kh >> 1) * pw + (kw >> 1));
        if (++kw < kw_count) {
            continue;
        }
        kw = 0;
        if (++kh < s.kernel[1]) {
            continue;
        }
        kh = 0;
        ++c;
    }
}

// count consecutive elements from src to out in whole vectors, the last one stored in part (src readable up to a
// vector past the run: the split image has a panel of room after it).
template <class T>
inline void copy_run(const T* src, T* out, conv_dim count) {
    constexpr int L = tiles::simd<T>::lanes;
    for (conv_dim u = 0; u < count; u += L) {
        tiles::store<T>(tiles::load<T>(src + u), out + u, count - u < L ? int(count - u) : L, false);
    }
}

// Rows [k0, k0 + kc) and positions [j0, j0 + cols) of image x's im2col matrix (x needs no padding; split: x split
// into its stride phases, split_packed), copied into panels at dst ([ceil(cols / P)][kc][P], zero-padded): for a
// group of rows at a time, chunk by chunk, so that each panel is written front to back. (Out of line: inlined in
// packed_group, its row table and loops' values shared the register tiles' frame.)
template <class T>
__attribute__((noinline)) void pack_panels(const conv_shape& s, const T* x, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst,
                 chunks<T>& cs, bool split = false) {
    constexpr int P = panel_width<T>;
    constexpr int64_t group = 16;  // (rows whose first elements are kept: 128 bytes of stack)
    const int64_t step = s.stride[2];
    cs.n = 0;
    if (split) {  // (a block's runs along the plane's rows: stride 1, rows phase_cols apart)
        panel_chunks<T>(phase_shape(s), j0, cols, kc, cs);
    } else {
        panel_chunks<T>(s, j0, cols, kc, cs);
    }
    const T* firsts[group];
    for (int64_t p0 = 0; p0 < kc; p0 += group) {
        const int64_t rows = kc - p0 < group ? kc - p0 : group;
        const auto keep = [&firsts](int64_t p, const T* first) { firsts[p] = first; };
        if (split) {
            phase_im2col_rows<T>(s, x, conv_dim(k0 + p0), conv_dim(rows), keep);
        } else {
            im2col_rows<T>(s, x, k0 + p0, rows, keep);
        }
        for (int64_t i = 0; i < cs.n; ++i) {
            T* out = dst + cs.dst[i] + p0 * P;  // row p of the chunk's panel at out + p * P
            const int64_t src = cs.src[i], count = cs.count[i];
            if (split) {
                for (int64_t p = 0; p < rows; ++p) {
                    copy_run<T>(firsts[p] + src, out + p * P, conv_dim(count));
                }
                continue;
            }
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

// The same block at dst[p * p_stride + q * q_stride] (row-major: (cols, 1); columns contiguous: (1, kc)).
template <class T>
__attribute__((noinline)) void pack_strided(const conv_shape& s, const T* x, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst,
                  int64_t p_stride, int64_t q_stride, chunks<T>& cs) {
    const int64_t step = s.stride[2];
    cs.n = 0;
    position_runs(s, j0, cols, [&cs](int64_t r, int64_t offset, int64_t count) {
        cs.src[cs.n] = offset;
        cs.dst[cs.n] = r;
        cs.count[cs.n++] = count;
    });
    im2col_rows<T>(s, x, k0, kc, [&](int64_t p, const T* first) {
        for (int64_t i = 0; i < cs.n; ++i) {
            const T* src = first + cs.src[i];
            T* out = dst + p * p_stride + cs.dst[i] * q_stride;
            for (int64_t u = 0; u < cs.count[i]; ++u) {
                out[u * q_stride] = src[u * step];
            }
        }
    });
}

// The same block row-major: dst[p * cols + q].
template <class T>
void pack_rows(const conv_shape& s, const T* x, int64_t k0, int64_t kc, int64_t j0, int64_t cols, T* dst,
               chunks<T>& cs) {
    pack_strided(s, x, k0, kc, j0, cols, dst, cols, 1, cs);
}

// Whether an image's output positions are so few (at most two blocks of dot_block) that dot products of
// the kernel's rows with the im2col matrix's columns beat the register tiles, whose panels would be mostly
// padding (a batch-1 ResNet's last layers at 2 × 2: the kernel, read once, is then loaded as vectors).
constexpr bool few_positions(const conv_shape& s) {
    return s.positions() <= 2 * tiles::dot_block;
}

// y [m, n] = epi(w [m, depth] · colsᵀ) with colsᵀ [n, depth] (n <= 2·dot_block, few_positions): four kernel rows
// at a time against dot_block columns, 16 vector accumulators along depth, so that four of the kernel's rows
// stream from memory at once (one row at a time, as ks::tiles::dots goes, left a 512-channel layer at 2 × 2 15%
// slower than the register tiles). Rows and columns past the end repeat the first ones and are not stored.
// (Four rows, 16 accumulators, with AVX-512 (32 vector registers) and one lane; two rows below AVX-512 on x86, whose
// 16 vector registers do not hold 16 accumulators and the vectors they read: kept in the frame, 0.6 KB.)
// d plus a[p] · b[p] over p in [from, to), in order: the depths past few_dots' last whole vector. (Out of line:
// GCC vectorized it for every row and column of few_dots' tile, 16 copies, most of its 9-14 KB of code.)
template <class T>
__attribute__((noinline)) T tail_dot(const T* a, const T* b, int64_t from, int64_t to, T d) {
    for (int64_t p = from; p < to; ++p) {
        d += a[p] * b[p];
    }
    return d;
}

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
constexpr int few_rows = 2;
#else
constexpr int few_rows = 4;
#endif
template <class T>
__attribute__((noinline)) void few_dots(int64_t m, int64_t n, int64_t depth, const T* w, const T* cols, T* y, const epilogue<T>& epi) {
    using V = typename tiles::simd<T>::v;
    constexpr int L = tiles::simd<T>::lanes, R = few_rows, Q = tiles::dot_block;
    const int64_t whole = depth - depth % L;
    for (int64_t i0 = 0; i0 < m; i0 += R) {
        const T* a[R];
        for (int r = 0; r < R; ++r) {
            a[r] = w + (i0 + r < m ? i0 + r : i0) * depth;
        }
        for (int64_t j0 = 0; j0 < n; j0 += Q) {
            const T* b[Q];
            for (int q = 0; q < Q; ++q) {
                b[q] = cols + (j0 + q < n ? j0 + q : j0) * depth;
            }
            V acc[R][Q];
            for (int r = 0; r < R; ++r) {
                for (int q = 0; q < Q; ++q) {
                    acc[r][q] = tiles::splat<T>(T(0));
                }
            }
            for (int64_t p = 0; p < whole; p += L) {
                V bv[Q];
                for (int q = 0; q < Q; ++q) {
                    bv[q] = tiles::load<T>(b[q] + p);
                }
                for (int r = 0; r < R; ++r) {
                    const V av = tiles::load<T>(a[r] + p);
                    for (int q = 0; q < Q; ++q) {
                        acc[r][q] += av * bv[q];
                    }
                }
            }
            KS_UNROLL for (int r = 0; r < R; ++r) {  // (unrolled: the accumulators stay in registers)
                KS_UNROLL for (int q = 0; q < Q; ++q) {
                    if (i0 + r >= m || j0 + q >= n) {
                        continue;
                    }
                    T d = T(0);
                    if constexpr (L == 1) {
                        d += acc[r][q];
                    } else {
                        KS_UNROLL for (int l = 0; l < L; ++l) {
                            d += acc[r][q][l];
                        }
                    }
                    y[(i0 + r) * n + j0 + q] = d;
                }
            }
            for (int r = 0; whole < depth && r < R && i0 + r < m; ++r) {  // (after: no vector is live across the calls)
                for (int q = 0; q < Q && j0 + q < n; ++q) {
                    T& d = y[(i0 + r) * n + j0 + q];
                    d = tail_dot<T>(a[r], b[q], whole, depth, d);
                }
            }
        }
        epi(i0, 0, y + i0 * n, n, 1, m - i0 < R ? m - i0 : R, n);
    }
}

// The im2col block's columns: a few panels of positions (all of them when fewer).
template <class T>
constexpr int64_t block_columns(const conv_shape& s) {
    constexpr int64_t block = position_block * panel_width<T>;
    return s.positions() < block ? (s.positions() + panel_width<T> - 1) / panel_width<T> * panel_width<T> : block;
}


// How many times the register tiles read the kernel of a group over a batch of images: once per block of
// output positions (the direct path: per position_block rows of at most one panel, else per output row).
template <class T>
constexpr int64_t kernel_passes(const conv_shape& s, int64_t images) {
    constexpr int64_t block = position_block * panel_width<T>;
    if (!direct<T>(s)) {
        return images * ((s.positions() + block - 1) / block);
    }
    const int64_t per_plane = s.out[2] <= panel_width<T> ? (s.out[1] + position_block - 1) / position_block
                                                         : s.out[1] * ((s.out[2] + block - 1) / block);
    return images * s.out[0] * per_plane;
}

// The packed kernel's elements: every group's rows in tiles (tiles::pack_a).
constexpr int64_t packed_kernel_size(const conv_shape& s) {
    return s.groups * tiles::packed_a_size(tiles::index_div(s.out_channels, s.groups), s.depth());
}

// What ks::conv runs for a given shape: the convolution of the canonical shape's image, or of its padded copy,
// and where its scratch regions start (elements). It lives at the start of the scratch (plan_room), written by
// plan_at: the given shape's canonical and padded copies in ks::conv's frame had it at 0.7-0.9 KB.
struct conv_plan {
    conv_shape s;     // the shape the tiles run (padded_shape(canonical(given)) when the image is copied)
    bool copy;        // the image copied first (pad_given)
    int64_t image;    // elements of one image as given
    int64_t padded;   // the padded copy of the image in scratch
    int64_t rest;     // the rows' offsets or the im2col block in scratch
    int64_t room;     // the scratch's size (conv_scratch)
};

// The elements of scratch that hold a conv_plan (64-byte aligned after it).
template <class T>
constexpr int64_t plan_room() {
    return aligned((int64_t(sizeof(conv_plan)) + int64_t(sizeof(T)) - 1) / int64_t(sizeof(T)));
}

}  // namespace convs

// The scratch elements ks::conv uses: its plan (convs::conv_plan), the kernel packed in row tiles (with the
// register tiles), the padded image, then the im2col rows' offsets (direct) or one im2col block (panels with the
// register tiles, rows with a library's gemm).
namespace convs {

template <class T>
constexpr bool chunked(const conv_shape& s);

// The room of the `chunks` method's tail columns (chunks_all: a panel's columns of every output channel), before
// the chunks<T>.
template <class T>
constexpr int64_t tails_room(const conv_shape& s) {
    return chunked<T>(s) ? aligned(s.out_channels * panel_width<T>) : 0;
}

// conv_scratch of a canonical shape (not rows); `packs`: with room for the kernel packed in row tiles.
template <class T>
constexpr int64_t tiles_room(const conv_shape& s, bool packs = true) {
    const int64_t image = aligned(padded_size<T>(s));
    const int64_t panels = tiles::k_step(s.depth()) * block_columns<T>(s);  // (an im2col block; chunks too)
    // flattened: the offsets, then a block of results of a group; at least an im2col block, which a part of the layer
    // (ks/parts.h: whole groups, perhaps one) packs if it runs another method
    const int64_t flat_block = aligned(s.depth()) +
                               aligned(tiles::index_div(s.out_channels, s.groups) * position_block * panel_width<T>);
    const int64_t flat = flat_block > panels ? flat_block : panels;
    const int64_t phases = phased<T>(s) && aligned(s.depth()) > panels ? aligned(s.depth()) : panels;
    const int64_t rest = direct<T>(s) ? aligned(s.depth())  // (int32 offsets, one per element)
                                      : (flattened<T>(s) ? flat : phases);
    const int64_t columns = few_positions(s) ? s.positions() * s.depth() : 0;  // (the im2col matrix transposed)
    return plan_room<T>() + (packs ? aligned(packed_kernel_size(s)) : 0) + image +
           aligned(rest > columns ? rest : columns) + tails_room<T>(s) + chunks_room<T>();
}

// The shape the tiles run for `given` (conv_plan::s): canonical, and padded when the image is copied.
template <class T>
constexpr conv_shape run_shape(const conv_shape& given) {
    conv_shape s = canonical(given);
    if (copies_image<T>(s)) {
        to_padded(s);
    }
    return s;
}

// Whether ks::conv packs the kernel in row tiles for `images` images (method_for's *_packed methods: the tiles read
// it more than once); images <= 0, not known: room for it all the same. (A batch-1 network's deep layers read their
// kernel once: ResNet-18's 512-channel ones had 9.4 MB of scratch for a packed kernel they never made.)
// (The methods: method_for below.)
enum class method {
    few, direct_packed, direct, panels_packed, panels, chunks, phases_packed, phases, flat_packed, flat
};
template <class T>
constexpr method method_for(const conv_shape& s, int64_t images);

template <class T>
constexpr bool packs_kernel(const conv_shape& given, int64_t images) {
    if (images <= 0) {
        return true;
    }
    const method m = method_for<T>(run_shape<T>(given), images);
    return m == method::direct_packed || m == method::panels_packed || m == method::phases_packed ||
           m == method::flat_packed;
}

}  // namespace convs

// The scratch elements of ks::conv (rows: of ks::conv_rows); `images` > 0: of ks::conv_as over that many images (the
// generated code's call when the shapes are constants), whose method may not pack the kernel.
template <class T>
constexpr int64_t conv_scratch(const conv_shape& shape, bool rows = false, int64_t images = 0) {
    if (rows) {
        return convs::aligned(convs::padded_size<T>(shape)) +
               convs::aligned(shape.depth() * convs::block_columns<T>(shape)) + convs::chunks_room<T>();
    }
    return convs::tiles_room<T>(convs::canonical(shape), convs::packs_kernel<T>(shape, images));
}

namespace convs {

// The kernel rows k0... of one group: packed in row tiles by pack_a (PACKED), else the group's rows of w [mg, depth].
template <class T, bool PACKED>
tiles::row_tiles<T> kernel_rows(const T* kernel, int64_t depth, int64_t k0) {
    if constexpr (PACKED) {
        return {kernel + k0 * tiles::row_block, 1, tiles::row_block, depth * tiles::row_block};
    } else {
        return tiles::rows_of(kernel + k0, depth, 1);
    }
}

// A convolution's block of tiles (tiles::block, the affine epilogue in its tiles), in a frame of its own.
// With a streamed kernel (row_tiles::streamed: read once from memory), its first panels by tiles::ahead_block, whose
// tiles prefetch the kernel's next rows, then the others by tiles::block.
template <class T, bool PACKED, class Rows>
KS_OWN_FRAME void conv_block(int64_t m, int64_t kc, const tiles::row_tiles<T>& a, const Rows& b, int panels, T* c,
                             int64_t c_rs, int64_t cols, bool load_c, bool last, int64_t j, const epilogue<T>& epi) {
    if constexpr (tiles::rows_ahead<T> && !PACKED && std::is_same<Rows, tiles::panel_rows<T>>::value) {
        constexpr int NP = tiles::panel_block;
        if (a.streamed && !b.streamed && m >= 2 * tiles::row_block && panels >= NP) {
            const int64_t w = cols < int64_t(NP) * panel_width<T> ? cols : int64_t(NP) * panel_width<T>;
            tiles::ahead_block<T, true>(m, kc, a, b, c, c_rs, w, load_c, last, j, epi);
            if (panels > NP) {
                tiles::block<T, PACKED>(m, kc, a, b.from(NP), panels - NP, c + w, c_rs, cols - w, load_c, last, j + w,
                                        epi);
            }
            return;
        }
    }
    tiles::block<T, PACKED>(m, kc, a, b, panels, c, c_rs, cols, load_c, last, j, epi);
}

// Whether direct_group runs row tile by row tile over long runs of an output row (long_group): a kernel of few rows
// (depth at most long_depth: a pointwise layer from 16 or 24 channels, MobileNetV2's 16 → 96 at 112 × 112), output
// rows of 16 panels or more, more than one row tile and a group's output larger than 1 MB (half of a core's L2), in
// float on AVX-512 and AVX2 (measured on both; its code, ~2.5 KB, on those levels alone). Block by block of 4 panels,
// each block's tiles store to every output channel's plane, 96 streams of 128 bytes at a time for 16 → 96 at 112², and
// those stores (4.8 MB) missed: 1.4-2.5× the time of the same tiles row tile by row tile over 2048 positions (AVX2 on
// an AMD Zen 3, 6-row tiles: 16 → 96 at 112² 0.47-0.68 of the blocks' time, 2.0-2.9× onnxruntime's before; 24 → 144
// at 56² 0.82-0.93). With an output that stays in L2 (16 → 72 at 56², 0.9 MB) or deeper kernels (32 → 192 at 56², 64
// → 384 at 28²), the blocks were as fast or faster (their im2col rows in L1; on AVX2 24 → 88 at 28², 0.28 MB, took
// 1.14× the blocks' time row tile by row tile).
constexpr int64_t long_depth = 24;

template <class T>
constexpr bool long_rows(const conv_shape& s, int64_t mg) {
    return tiles::vector_bytes >= 32 && sizeof(T) == 4 && s.depth() <= long_depth &&
           s.out[2] >= 16 * panel_width<T> && mg > tiles::row_block &&
           mg * s.positions() * int64_t(sizeof(T)) > (int64_t(1) << 20);
}

// direct_group for long_rows: per output row, runs of up to `span` positions (whose im2col rows take at most 128 KB,
// so that they stay in L2 while every row tile reads them), and per run the row tiles one after another, each over
// all its panels, so that a tile's stores go to row_block planes at a time, front to back. The same tiles, the same
// sums in the same order: the results are direct_group's bit for bit.
template <class T, bool PACKED>
__attribute__((noinline)) void long_group(const conv_shape& s, const T* x, const T* kernel, const int32_t* offsets,
                                          T* y, const epilogue<T>& epi) {
    constexpr conv_dim P = panel_width<T>, R = tiles::row_block;
    const conv_dim mg = conv_dim(tiles::index_div(s.out_channels, s.groups)), depth = s.depth();
    const conv_dim n = s.positions(), row_step = s.stride[1] * s.in[2];
    const conv_dim most = conv_dim(tiles::index_div(32768, depth)) / P * P;  // (128 KB of floats)
    const conv_dim span = most < P ? P : most;
    for (conv_dim od = 0; od < s.out[0]; ++od) {
        const T* plane = x + od * s.stride[0] * s.in[1] * s.in[2];
        for (conv_dim oh = 0; oh < s.out[1]; ++oh) {
            for (conv_dim ow = 0; ow < s.out[2]; ow += span) {
                const conv_dim cols = s.out[2] - ow < span ? s.out[2] - ow : span;
                const conv_dim q = (od * s.out[1] + oh) * s.out[2] + ow;
                const tiles::table_rows<T> b{plane + oh * row_step + ow, offsets, P, static_cast<int>(P)};
                for (conv_dim r0 = 0; r0 < mg; r0 += R) {
                    const tiles::row_tiles<T> a = kernel_rows<T, PACKED>(kernel + r0 * depth, depth, 0);
                    conv_block<T, PACKED>(mg - r0 < R ? mg - r0 : R, depth, a, b, static_cast<int>((cols + P - 1) / P),
                                          y + r0 * n + q, n, cols, false, true, q, epi.group(0, r0));
                }
            }
        }
    }
}

// One group of one image, the windows read straight from the (padded) image x through the rows' offsets: per
// output plane, `items` blocks of positions, each position_block output rows of at most one panel (a panel per
// row), or up to position_block panels of one output row. (One call of tiles::block, inlined once: two calls had
// the frame at 0.7-0.9 KB.)
template <class T, bool PACKED>
__attribute__((noinline)) void direct_group(const conv_shape& s, const T* x, const T* kernel, const int32_t* offsets, T* y, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const int64_t mg = tiles::index_div(s.out_channels, s.groups), depth = s.depth(), n = s.positions();
    const int64_t step = tiles::k_step(depth), block = position_block * P;
    const int64_t row_step = s.stride[1] * s.in[2];  // (the image elements between two output rows)
    const bool narrow = s.out[2] <= P;  // rows of at most one panel
    const int64_t per_row = narrow ? 1 : tiles::index_div(s.out[2] + block - 1, block);
    const int64_t items = narrow ? (s.out[1] + position_block - 1) / position_block : s.out[1] * per_row;
    if (long_rows<T>(s, mg)) {
        return long_group<T, PACKED>(s, x, kernel, offsets, y, epi);
    }
    for (int64_t k0 = 0; k0 < depth; k0 += step) {
        const int64_t kc = depth - k0 < step ? depth - k0 : step;
        const tiles::row_tiles<T> a = kernel_rows<T, PACKED>(kernel, depth, k0);
        for (int64_t od = 0; od < s.out[0]; ++od) {
            const T* plane = x + od * s.stride[0] * s.in[1] * s.in[2];
            for (int64_t item = 0; item < items; ++item) {
                const int64_t oh = narrow ? item * position_block : tiles::index_div(item, per_row);
                const int64_t ow = narrow ? 0 : (item - oh * per_row) * block;
                const int64_t rows = s.out[1] - oh < position_block ? s.out[1] - oh : position_block;
                const int64_t cols = narrow ? rows * s.out[2] : (s.out[2] - ow < block ? s.out[2] - ow : block);
                const int64_t q = (od * s.out[1] + oh) * s.out[2] + ow;
                const tiles::table_rows<T> b{plane + oh * row_step + ow, offsets + k0, narrow ? row_step : P,
                                             static_cast<int>(narrow ? s.out[2] : P)};
                conv_block<T, PACKED>(mg, kc, a, b, static_cast<int>(narrow ? rows : (cols + P - 1) / P), y + q, n,
                                      cols, k0 > 0, k0 + kc >= depth, q, epi);
            }
        }
    }
}

// Positions [j0, j0 + cols) of a flat run (flat_group: output rows s.in[2] apart) from the block of results at
// from (rows fs apart) into y (rows n apart), the columns past each output row dropped; then the epilogue over each
// row's part unless the tiles applied it (`done`: an affine epilogue, the same at every position).
template <class T>
__attribute__((noinline)) void flat_out(const conv_shape& s, conv_dim j0, conv_dim cols, conv_dim m, const T* from,
                                        conv_dim fs, T* y, bool done, const epilogue<T>& epi) {
    const conv_dim wide = s.in[2], ow = s.out[2], n = s.positions();
    for (conv_dim oh = conv_dim(tiles::index_div(j0, wide)); oh < s.out[1] && oh * wide < j0 + cols; ++oh) {
        const conv_dim a = j0 > oh * wide ? j0 : oh * wide;
        const conv_dim b = j0 + cols < oh * wide + ow ? j0 + cols : oh * wide + ow;
        if (a >= b) {
            continue;
        }
        const conv_dim q = oh * ow + a - oh * wide, len = b - a;
        for (conv_dim r = 0; r < m; ++r) {
            const T* src = from + r * fs + (a - j0);
            T* dst = y + r * n + q;
            for (conv_dim u = 0; u < len; ++u) {
                dst[u] = src[u];
            }
        }
        if (!done) {
            epi(0, q, y + q, n, 1, m, len);
        }
    }
}

#ifndef KS_FLAT_DEPTH
#define KS_FLAT_DEPTH 96
#endif
// The im2col rows a block of flat_group's tiles reads before it stores: few enough that their rows of a block
// (position_block panels, each row read where it lies, most straddling two cache lines) stay in the L1 cache while
// every row tile reads them. (With k_step's 1024 they were read from L2 by each row tile, 30% slower than packed
// panels.)
template <class T>
constexpr conv_dim flat_depth = KS_FLAT_DEPTH;

// One group of one image by the flat method (flattened): s is the stride-1 shape over the padded image or one phase
// plane (phase_shape), whose rows are s.in[2] wide; output position (oh, ow) is flat position oh · s.in[2] + ow, and
// row p of the im2col matrix at flat positions [q, q + P) is P consecutive elements from x + offsets[p] + q. Per block
// of position_block panels of flat positions, the tiles store into `block` (the group's rows, a block of columns
// each), flat_out copies the output rows' parts into y.
template <class T, bool PACKED>
__attribute__((noinline)) void flat_group(const conv_shape& s, const T* x, const T* kernel, const int32_t* offsets,
                                          T* block, T* y, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const conv_dim mg = conv_dim(tiles::index_div(s.out_channels, s.groups)), depth = s.depth();
    // (index_div: a 64-bit division by a variable is a call of libgcc's __aeabi_ldivmod on a Cortex-M)
    const conv_dim columns = position_block * P;
    const conv_dim parts = conv_dim(tiles::index_div(depth + flat_depth<T> - 1, flat_depth<T>));
    const conv_dim step = conv_dim(tiles::index_div(depth + parts - 1, parts));
    const conv_dim flat = (s.out[1] - 1) * s.in[2] + s.out[2];
    const bool done = epi.run == nullptr;  // (an affine epilogue or none: applied by the tiles, whatever the position)
    const epilogue<T> none{};
    for (conv_dim j0 = 0; j0 < flat; j0 += columns) {
        const conv_dim cols = flat - j0 < columns ? flat - j0 : columns;
        for (conv_dim k0 = 0; k0 < depth; k0 += step) {
            const conv_dim kc = depth - k0 < step ? depth - k0 : step;
            conv_block<T, PACKED>(mg, kc, kernel_rows<T, PACKED>(kernel, depth, k0),
                                  tiles::table_rows<T>{x + j0, offsets + k0, P, P},
                                  static_cast<int>((cols + P - 1) / P), block, columns, cols, k0 > 0,
                                  done && k0 + kc >= depth, 0, done ? epi : none);
        }
        flat_out<T>(s, j0, cols, mg, block, columns, y, done, epi);
    }
}

// The bytes of kernel rows over which the `panels` method's tiles prefetch them (tiles::rows_ahead): a kernel that
// small may still be in L2 (as winograd::prefetched_kernel).
constexpr int64_t streamed_kernel = 512 * 1024;

// One group of one image, the im2col matrix packed into panels block by block (split: from x split into its stride
// phases, split_packed).
template <class T, bool PACKED>
__attribute__((noinline)) void packed_group(const conv_shape& s, const T* x, const T* kernel, T* panels, chunks<T>& cs, T* y,
                  const epilogue<T>& epi, bool split) {
    constexpr int P = panel_width<T>;
    const int64_t mg = tiles::index_div(s.out_channels, s.groups), depth = s.depth(), n = s.positions();
    const int64_t step = tiles::k_step(depth), block = position_block * P;
    for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t cols = n - j0 < block ? n - j0 : block;
        for (int64_t k0 = 0; k0 < depth; k0 += step) {
            const int64_t kc = depth - k0 < step ? depth - k0 : step;
            pack_panels<T>(s, x, k0, kc, j0, cols, panels, cs, split);
            tiles::row_tiles<T> a = kernel_rows<T, PACKED>(kernel, depth, k0);
            // (the kernel as it is, read once: method panels; prefetched when its rows of this block are larger than
            // L2 keeps from one layer's call to the next)
            a.streamed = !PACKED && mg * kc * int64_t(sizeof(T)) > streamed_kernel;
            conv_block<T, PACKED>(mg, kc, a, tiles::panel_rows<T>{panels, P, kc * P},
                                  static_cast<int>((cols + P - 1) / P), y + j0, n, cols, k0 > 0, k0 + kc >= depth, j0,
                                  epi);
        }
    }
}

// The kernel's bytes a channel chunk of ks::conv's `chunks` method reads (all output channels, the chunk's
// rows of the im2col matrix): about half of a core's L2 cache, so that they stay there while every image's
// tiles read them.
constexpr int64_t chunk_bytes = 512 * 1024;

// The input channels of a chunk: as many as keep its kernel rows within chunk_bytes (at least one), and no more
// im2col rows than one block of the scratch holds (k_step).
template <class T>
constexpr int64_t chunk_channels(const conv_shape& s) {
    const int64_t per = s.out_channels * s.taps() * int64_t(sizeof(T));
    const int64_t most = tiles::index_div(tiles::k_step(s.depth()), s.taps());
    const int64_t cc = tiles::index_div(chunk_bytes, per);
    return cc < 1 ? 1 : (cc > most ? most : cc);
}

// Whether ks::conv runs by channel chunks (method `chunks`): im2col packed into panels (not direct, not few
// positions), one group, an image's positions in one block of panels, and a kernel larger than two chunks
// (ResNet's 3×3 layers at 7 × 7 with 256-512 channels: the kernel, 2-9 MB, was read from L3 once per image and per
// pair of panels, 92 GFLOP/s at batch 8 against onnxruntime's 178).
template <class T>
constexpr bool chunked(const conv_shape& s) {
    return !few_positions(s) && !direct<T>(s) && s.groups == 1 && s.positions() <= position_block * panel_width<T> &&
           s.out_channels * s.depth() * int64_t(sizeof(T)) > 2 * chunk_bytes && tiles::k_step(s.depth()) >= s.taps();
}

template <class T>
constexpr bool flattened(const conv_shape& s) {
    constexpr conv_dim P = panel_width<T>;
    const conv_dim n = s.positions(), flat = flat_positions(s);
    const bool taps = !flat_split(s) || (s.dilation[1] == 1 && s.dilation[2] == 1 && s.kernel[1] >= s.stride[1] &&
                                         s.kernel[2] >= s.stride[2]);
    const bool few_rows = s.groups > 1 && tiles::index_div(s.out_channels, s.groups) <= flat_rows &&
                          s.depth() <= tiles::k_block;  // (so that no part of one group runs by chunks)
    return s.out[0] == 1 && s.in[0] == 1 && s.kernel[0] == 1 && s.pad[0] == 0 && n > 2 * tiles::dot_block &&
           few_rows && !direct<T>(s) && !phased<T>(s) && !chunked<T>(s) && taps &&
           4 * ((flat + P - 1) / P) <= 5 * ((n + P - 1) / P) &&
           s.channels * s.stride[1] * s.stride[2] * (phase_rows(s) + 1) * (phase_cols(s) + 1) < (1ll << 30);
}

template <class T>
constexpr bool split_packed(const conv_shape& s) {  // (a phased shape is split anyway, a flattened one has groups)
    return s.groups == 1 && split_rows(s) && !few_positions(s) && !chunked<T>(s);
}

// Positions [full, full + tail) of the im2col rows [0, kc) of one image x (as pack_panels reads it) into columns
// [at, at + tail) of one panel (kc rows of P).
template <class T>
__attribute__((noinline)) void pack_tail(const conv_shape& s, const T* x, int64_t kc, int64_t full, int64_t at,
                                         T* panel, chunks<T>& cs) {
    constexpr int P = panel_width<T>;
    const int64_t tail = s.positions() - full, step = s.stride[2];
    cs.n = 0;
    panel_chunks<T>(s, full, tail, kc, cs);  // (one chunk per output row the tail covers, from column 0)
    im2col_rows<T>(s, x, 0, kc, [&](int64_t p, const T* first) {
        for (int64_t i = 0; i < cs.n; ++i) {
            for (int64_t u = 0; u < cs.count[i]; ++u) {
                panel[p * P + at + cs.dst[i] + u] = first[cs.src[i] + u * step];
            }
        }
    });
}

// Columns [used, P) of a panel of kc rows: zeros.
template <class T>
__attribute__((noinline)) void zero_columns(T* panel, int64_t kc, int64_t used) {
    constexpr int P = panel_width<T>;
    for (int64_t p = 0; used < P && p < kc; ++p) {
        for (int64_t q = used; q < P; ++q) {
            panel[p * P + q] = T(0);
        }
    }
}

// The tails' results (m rows of P columns: image g0 + i's positions [full, n) at columns [i · tail, ...)) into y,
// then the epilogue over them.
template <class T>
__attribute__((noinline)) void spread_tails(const T* tails, int64_t m, int64_t n, int64_t full, int64_t g0,
                                            int64_t g1, T* y, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const int64_t tail = n - full;
    for (int64_t image = g0; image < g1; ++image) {
        T* out = y + image * m * n + full;
        const T* from = tails + (image - g0) * tail;
        for (int64_t r = 0; r < m; ++r) {
            for (int64_t q = 0; q < tail; ++q) {
                out[r * n + q] = from[r * P + q];
            }
        }
        epi.group(image, 0)(0, full, out, n, 1, m, tail);
    }
}

// Channels [c0, c0 + count) of one image x (the given, unpadded layout) copied zero-padded into dst, as the
// plan's padded shape with `count` channels reads them.
template <class T>
__attribute__((noinline)) void pad_channels(const conv_shape& given, int64_t count, const T* x, T* dst) {
    conv_shape part = canonical(given);
    part.channels = count;
    pad_image<T>(part, x, dst);
}

// Places [i0, i1) of column phase r of a split row (phase_cols places) that hold the image's columns
// r + i·sw - pad in [0, in); the others are zeros.
constexpr void split_span(const conv_shape& s, int64_t r, int64_t& i0, int64_t& i1) {
    const int64_t sw = s.stride[2], pw = phase_cols(s), first = s.pad[2] - r, last = s.pad[2] + s.in[2] - r;
    const int64_t q0 = first > 0 ? tiles::index_div(first + sw - 1, sw) : 0;
    const int64_t q1 = last > 0 ? tiles::index_div(last + sw - 1, sw) : 0;
    i0 = q0 < pw ? q0 : pw;
    i1 = q1 < pw ? q1 : pw;
    i1 = i1 < i0 ? i0 : i1;
}

// A split row's places (phase_cols) and the spans of its column phases 0 and 1 (split_span): the same for every row
// of an image, so split_phases computes them once. (Per row, their five 64-bit divisions and split_phases' two were
// most of split_row's time on short rows: ResNeXt's grouped 3 × 3 stride-2 layer from 14 × 14, flat, spent 37% of its
// time splitting 1024 channels of 16 rows of 8 places.)
struct row_spans {
    conv_dim places, rows, a0, a1, b0, b1;  // (rows: the padded rows the planes hold, phase_rows · stride)
};

constexpr row_spans spans_of(const conv_shape& s) {
    int64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    split_span(s, 0, a0, a1);
    split_span(s, 1, b0, b1);
    return {conv_dim(phase_cols(s)), conv_dim(phase_rows(s) * s.stride[1]), conv_dim(a0), conv_dim(a1), conv_dim(b0),
            conv_dim(b1)};
}

// Stride 2's two column phases of a row (place i of phase r: src[at + 2 i + r]): places [a0, a1) of phase 0 into
// out, [b0, b1) of phase 1 into odd; both in one loop over the places both hold (GCC vectorizes that pair of
// strided reads, not one alone), then the places only one phase holds.
template <class T>
inline void pair_phases(const T* src, int64_t at, T* out, T* odd, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    const int64_t both0 = a0 > b0 ? a0 : b0, both1 = a1 < b1 ? a1 : b1;
    for (int64_t i = both0; i < both1; ++i) {
        out[i] = src[at + 2 * i];
        odd[i] = src[at + 2 * i + 1];
    }
    for (int64_t i = a0; i < a1 && i < both0; ++i) {
        out[i] = src[at + 2 * i];
    }
    for (int64_t i = both1 > a0 ? both1 : a0; i < a1; ++i) {
        out[i] = src[at + 2 * i];
    }
    for (int64_t i = b0; i < b1 && i < both0; ++i) {
        odd[i] = src[at + 2 * i + 1];
    }
    for (int64_t i = both1 > b0 ? both1 : b0; i < b1; ++i) {
        odd[i] = src[at + 2 * i + 1];
    }
}

// Places [0, i0) and [i1, n) of a split row zeroed.
template <class T>
inline void zero_outside(T* o, int64_t i0, int64_t i1, int64_t n) {
    for (int64_t i = 0; i < i0; ++i) {
        o[i] = T(0);
    }
    for (int64_t i = i1; i < n; ++i) {
        o[i] = T(0);
    }
}

// Image row src (padded columns from -pad) into its column phases at out (phase r at out + r · plane), every place
// written. Stride 2 moves both phases in one loop over the places both hold (GCC vectorizes that pair of strided
// reads, not one alone: the element-wise bounds test per place had left the copy scalar, 100 us of MobileNet's
// 3 × 224 × 224 stem).
template <class T>
KS_OWN_FRAME void split_row(const conv_shape& s, const T* src, T* out, int64_t plane, const row_spans& sp) {
    const int64_t sw = s.stride[2], pw = sp.places, at = -s.pad[2];
    if (sw == 2) {
        T* odd = out + plane;
        pair_phases(src, at, out, odd, sp.a0, sp.a1, sp.b0, sp.b1);
        zero_outside(out, sp.a0, sp.a1, pw);
        zero_outside(odd, sp.b0, sp.b1, pw);
        return;
    }
    for (int64_t r = 0; r < sw; ++r) {
        int64_t i0, i1;
        split_span(s, r, i0, i1);
        T* o = out + r * plane;
        for (int64_t i = i0; i < i1; ++i) {
            o[i] = src[at + r + i * sw];
        }
        zero_outside(o, i0, i1, pw);
    }
}

// One channel x [h][w] split as split_row does with stride 2, for rows of a few panels: its planes zeroed first (one
// memset of sh · 2 · plane places), then each image row's two column phases copied over their spans, one phase a
// loop (pair_phases' vector loops, which rows this short never run, spilled into a frame of 0.6-0.9 KB here).
template <class T>
KS_OWN_FRAME void split_short_rows(const conv_shape& s, const T* x, T* out, int64_t plane, const row_spans& sp) {
    const conv_dim sh = s.stride[1], pw = sp.places, at = -s.pad[2];
    for (int64_t i = 0; i < sh * 2 * plane; ++i) {
        out[i] = T(0);
    }
    conv_dim q = conv_dim(tiles::index_div(s.pad[1], sh)), r = s.pad[1] - q * sh;  // (image row sy: padded q · sh + r)
    const conv_dim rows = s.in[1] < sp.rows - s.pad[1] ? s.in[1] : sp.rows - s.pad[1];  // (the rows the planes hold)
    for (conv_dim sy = 0; sy < rows; ++sy) {
        const T* src = x + sy * s.in[2] + at;
        T* row = out + r * 2 * plane + q * pw;
        for (conv_dim i = sp.a0; i < sp.a1; ++i) {
            row[i] = src[2 * i];
        }
        for (conv_dim i = sp.b0; i < sp.b1; ++i) {
            row[plane + i] = src[2 * i + 1];
        }
        if (++r == sh) {
            r = 0;
            ++q;
        }
    }
}

// One image x [C][h][w] (the given layout, s: its canonical shape) zero-padded and split into its stride phases at
// dst [C][stride_h · stride_w][phase_rows][phase_cols] (phased), a panel of zeros after.
template <class T>
__attribute__((noinline)) void split_phases(const conv_shape& s, const T* x, T* dst) {
    const int64_t sh = s.stride[1], sw = s.stride[2], ph = phase_rows(s), pw = phase_cols(s);
    const int64_t plane = ph * pw;
    const row_spans sp = spans_of(s);
    // rows of a few panels (the flat method's) with stride 2: a channel's planes zeroed at once, then the spans of
    // its image rows copied (split_row's zeros were a memset call or two per row, the row a call of its own)
    const bool short_rows = sw == 2 && pw < 4 * panel_width<T>;
    for (int64_t c = 0; c < s.channels; ++c) {
        T* out = dst + c * sh * sw * plane;
        if (short_rows) {
            split_short_rows<T>(s, x + c * s.in[1] * s.in[2], out, plane, sp);
            continue;
        }
        for (int64_t q = 0; q < ph; ++q) {  // (padded row y = q · sh + r: row q of the phase planes of row phase r)
            for (int64_t r = 0; r < sh; ++r) {
                const int64_t sy = q * sh + r - s.pad[1];
                T* row = out + r * sw * plane + q * pw;
                if (sy >= 0 && sy < s.in[1]) {
                    split_row<T>(s, x + (c * s.in[1] + sy) * s.in[2], row, plane, sp);
                    continue;
                }
                for (int64_t u = 0; u < sw; ++u) {
                    zero_outside(row + u * plane, 0, 0, pw);
                }
            }
        }
    }
    T* room = dst + s.channels * sh * sw * plane;
    for (int64_t i = 0; i < panel_width<T>; ++i) {
        room[i] = T(0);
    }
}

// The offset of each im2col row (c, kh, kw) from the split image (split_phases), for direct_group over phase_shape.
// (A group's rows: depth() of them.)
__attribute__((noinline)) inline void phase_offsets(const conv_shape& s, int32_t* out) {
    const int64_t sh = s.stride[1], sw = s.stride[2], plane = phase_rows(s) * phase_cols(s), depth = s.depth();
    int64_t p = 0;
    for (int64_t c = 0; p < depth; ++c) {
        for (int64_t kh = 0; kh < s.kernel[1]; ++kh) {
            for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
                const int64_t ih = tiles::index_div(kh, sh), iw = tiles::index_div(kw, sw);  // (row, column of the plane)
                out[p++] = static_cast<int32_t>((c * sh * sw + (kh - ih * sh) * sw + kw - iw * sw) * plane +
                                                ih * phase_cols(s) + iw);
            }
        }
    }
}

// ks::conv by channel chunks: per chunk of input channels (chunk_channels), every image's rows of the im2col
// matrix for them packed into panels and multiplied by the chunk's kernel rows (read as they are, from L2 after
// the first image), adding to the outputs; the epilogue with the last chunk. Each image's channels are padded
// once, chunk by chunk, into the padded copy's room. With several images whose positions end in a partial panel
// of at most half a panel (ResNet's 7 × 7 layers: 49 = 3 · 16 + 1), a group of images shares one panel of those
// last positions (`tails`: a quarter of the tiles' work had been padding), in images' groups of a panel's
// worth; their results go to `tails` (m rows of a panel, through all chunks), then to y with the epilogue.
template <class T>
__attribute__((noinline)) void chunk_images(const conv_shape& given, const conv_plan& plan, int64_t g0, int64_t g1,
                                            int64_t c0, bool fold, const T* x, const T* w, T* padded, T* panels,
                                            chunks<T>& cs, T* y, T* tails, const epilogue<T>& epi);

template <class T>
__attribute__((noinline)) void chunks_all(const conv_shape& given, const conv_plan& plan, int64_t images, const T* x,
                                          const T* w, T* padded, T* panels, chunks<T>& cs, T* y,
                                          const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const conv_shape& s = plan.s;
    const int64_t n = s.positions(), tail = tiles::index_mod(n, P), cc = chunk_channels<T>(s);
    const bool fold = images > 1 && tail > 0 && 2 * tail <= P;
    const int64_t group = fold ? tiles::index_div(P, tail) : images;
    T* tails = reinterpret_cast<T*>(&cs) - tails_room<T>(s);
    for (int64_t g0 = 0; g0 < images; g0 += group) {
        const int64_t g1 = images - g0 < group ? images : g0 + group;
        for (int64_t c0 = 0; c0 < s.channels; c0 += cc) {
            chunk_images<T>(given, plan, g0, g1, c0, fold, x, w, padded, panels, cs, y, tails, epi);
        }
        if (fold) {
            spread_tails<T>(tails, s.out_channels, n, n - tail, g0, g1, y, epi);
        }
    }
}

// One channel chunk (from c0) of chunks_all for images [g0, g1): each image's whole panels (all its positions without
// `fold`) into its output, the epilogue with the last chunk; with `fold`, its last positions into the shared panel,
// then that panel's product added into the tails.
template <class T>
__attribute__((noinline)) void chunk_images(const conv_shape& given, const conv_plan& plan, int64_t g0, int64_t g1,
                                            int64_t c0, bool fold, const T* x, const T* w, T* padded, T* panels,
                                            chunks<T>& cs, T* y, T* tails, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const conv_shape& s = plan.s;
    const int64_t m = s.out_channels, n = s.positions(), cc = chunk_channels<T>(s);
    const int64_t full = n - tiles::index_mod(n, P), tail = n - full, cols = fold ? full : n;
    const int64_t count = s.channels - c0 < cc ? s.channels - c0 : cc, kc = count * s.taps();
    tiles::row_tiles<T> a = kernel_rows<T, false>(w, s.depth(), c0 * s.taps());
    const bool first = c0 == 0, last = c0 + count >= s.channels;
    T* tail_panel = panels + tiles::index_div(full, P) * kc * P;  // (the panel after the whole ones)
    const int64_t plane = tiles::index_div(plan.image, s.channels);
    for (int64_t image = g0; image < g1; ++image) {
        const T* xi = x + image * plan.image + c0 * plane;
        if (plan.copy) {
            pad_channels<T>(given, count, xi, padded);
            xi = padded;
        }
        if (cols > 0) {
            pack_panels<T>(s, xi, 0, kc, 0, cols, panels, cs);
            a.streamed = image == g0;  // (the chunk's kernel rows from memory for the first image, then from L2)
            conv_block<T, false>(m, kc, a, tiles::panel_rows<T>{panels, P, kc * P}, static_cast<int>((cols + P - 1) / P),
                                 y + image * m * n, n, cols, !first, last, 0, epi.group(image, 0));
        }
        if (fold) {
            pack_tail<T>(s, xi, kc, full, (image - g0) * tail, tail_panel, cs);
        }
    }
    if (fold) {
        const int64_t used = (g1 - g0) * tail;
        zero_columns<T>(tail_panel, kc, used);
        conv_block<T, false>(m, kc, a, tiles::panel_rows<T>{tail_panel, P, kc * P}, 1, tails, P, used, !first, false, 0,
                             epilogue<T>{});
    }
}

}  // namespace convs

namespace convs {

// ks::conv's plan for `given` written into p (plan_of: a constant in the generated code when the shapes are, its code
// then not linked; plan_at: at the start of scratch); images > 0: for that many images (conv_scratch<T>(given, false,
// images) elements), whose method may not pack the kernel.
template <class T>
constexpr void plan_into(conv_plan& p, const conv_shape& given, int64_t images) {
    p.s = given;
    to_canonical(p.s);
    p.copy = copies_image<T>(p.s);
    p.image = p.s.channels * p.s.in_plane();
    const bool packs = packs_kernel<T>(given, images);
    p.padded = plan_room<T>() + (packs ? aligned(packed_kernel_size(p.s)) : 0);
    p.rest = p.padded + aligned(padded_size<T>(p.s));
    p.room = tiles_room<T>(p.s, packs);
    if (p.copy) {
        to_padded(p.s);
    }
}

template <class T>
constexpr conv_plan plan_of(const conv_shape& given, int64_t images = 0) {
    conv_plan p{given, false, 0, 0, 0, 0};
    plan_into<T>(p, given, images);
    return p;
}

// The same written at the start of scratch (not in ks::conv's frame: plan_into writes it there, no copy of the
// plan in plan_at's frame either, which held one beside packs_kernel's shapes, 560 B on x86-64's baseline level
// with the flat method's tests inlined).
template <class T>
__attribute__((noinline)) const conv_plan& plan_at(T* scratch, const conv_shape& given) {
    conv_plan& p = *reinterpret_cast<conv_plan*>(scratch);
    plan_into<T>(p, given, 0);
    return p;
}

// split_phases of the canonical shape of `given`.
template <class T>
__attribute__((noinline)) void split_given(const conv_shape& given, const T* x, T* dst) {
    split_phases<T>(canonical(given), x, dst);
}

// pad_image of the canonical shape of `given`.
template <class T>
__attribute__((noinline)) void pad_given(const conv_shape& given, const T* x, T* dst) {
    pad_image<T>(canonical(given), x, dst);
}

}  // namespace convs

namespace convs {

// The algorithm ks::conv runs (one per call: method_of): dot products for few positions (few_dots), the windows
// read straight from the image (direct_group) or packed into panels (packed_group), each with the kernel packed in
// row tiles (_packed) or read as it is.
// The method for `given` over `images` images: a constant when they are (then the generated code calls
// conv_as<T, method_of<T>(...)> and links that method's code alone, not all five: issue 36, a Cortex-M4's flash).
// The kernel is packed in row tiles when the tiles read it more than once; read once (one image whose positions
// fit one block: a batch-1 network's deep layers), packing would only copy it. With few positions, dot products
// read it as it is.
template <class T>
constexpr method method_for(const conv_shape& s, int64_t images) {  // (s: the plan's shape)
    if (few_positions(s)) {
        return method::few;
    }
    if (chunked<T>(s)) {
        return method::chunks;
    }
    if (phased<T>(s)) {
        return kernel_passes<T>(phase_shape(s), images) > 1 ? method::phases_packed : method::phases;
    }
    if (flattened<T>(s)) {
        constexpr conv_dim block = position_block * panel_width<T>;
        return images * ((flat_positions(s) + block - 1) / block) > 1 ? method::flat_packed : method::flat;
    }
    const bool pack = kernel_passes<T>(s, images) > 1;
    if (direct<T>(s)) {
        return pack ? method::direct_packed : method::direct;
    }
    return pack ? method::panels_packed : method::panels;
}

template <class T>
constexpr method method_of(const conv_shape& given, int64_t images) {
    return method_for<T>(plan_of<T>(given).s, images);
}

}  // namespace convs

// y [images, M, positions] = epi(conv(x [images, C, in...], w [M, C/G, taps...])) with the register tiles by
// method M (convs::method_of<T>(given, images)) and plan convs::plan_of<T>(given): the epilogue at (image, output
// channel m, flat position q).
template <class T, convs::method M>
void conv_as(const convs::conv_plan& plan, const conv_shape& given, int64_t images, const T* x, const T* w, T* y,
             T* scratch, const epilogue<T>& epi = {}) {
    using convs::method;
    constexpr bool few = M == method::few, direct = M == method::direct_packed || M == method::direct;
    constexpr bool phases = M == method::phases_packed || M == method::phases;
    constexpr bool flat = M == method::flat_packed || M == method::flat;
    constexpr bool panels = M == method::panels_packed || M == method::panels;
    constexpr bool pack = M == method::direct_packed || M == method::panels_packed || M == method::phases_packed ||
                          M == method::flat_packed;
    x = tiles::opaque(x);
    w = tiles::opaque(w);
    const conv_shape& s = plan.s;
    const int64_t mg = tiles::index_div(s.out_channels, s.groups), depth = s.depth(), n = s.positions();
    const int64_t kernel_size = tiles::packed_a_size(mg, depth);
    T* kernels = scratch + convs::plan_room<T>();  // (the kernel packed in row tiles, group by group)
    T* padded = scratch + plan.padded;
    T* rest = scratch + plan.rest;
    int32_t* offsets = reinterpret_cast<int32_t*>(rest);  // (direct: the rows' offsets; else the im2col block)
    convs::chunks<T>& cs = convs::chunks_at(scratch, plan.room);
    for (int64_t g = 0; pack && g < s.groups; ++g) {
        tiles::pack_a<T>(mg, depth, w + g * mg * depth, depth, 1, kernels + g * kernel_size);
    }
    if constexpr (direct) {
        convs::row_offsets(s, offsets);
    }
    if constexpr (phases) {
        convs::phase_offsets(s, offsets);
    }
    // (flat, panels: the image split into phases, else padded)
    const bool split = flat ? convs::flat_split(s) : panels && convs::split_packed<T>(s);
    if constexpr (flat) {
        if (split) {
            convs::phase_offsets(s, offsets);
        } else {
            convs::row_offsets(s, offsets);
        }
    }
    // a channel's elements in the copy (the phase planes', when split)
    const int64_t channel = split ? s.stride[1] * s.stride[2] * convs::phase_rows(s) * convs::phase_cols(s)
                                  : s.in_plane();
    if constexpr (M == method::chunks) {
        return convs::chunks_all<T>(given, plan, images, x, w, padded, rest, cs, y, epi);
    }
    for (int64_t image = 0; image < images; ++image) {
        const T* xi = x + image * plan.image;
        if (plan.copy) {
            if (phases || split) {
                convs::split_given<T>(given, xi, padded);
            } else {
                convs::pad_given<T>(given, xi, padded);
            }
            xi = padded;
        }
        for (int64_t g = 0; g < s.groups; ++g) {
            const T* xg = xi + g * tiles::index_div(s.channels, s.groups) * channel;
            T* yg = y + (image * s.out_channels + g * mg) * n;
            const epilogue<T> eg = epi.group(image, g * mg);
            const T* kernel = pack ? kernels + g * kernel_size : w + g * mg * depth;
            if constexpr (few) {
                convs::pack_strided<T>(s, xg, 0, depth, 0, n, rest, 1, depth, cs);
                convs::few_dots<T>(mg, n, depth, kernel, rest, yg, eg);
            } else if constexpr (direct) {
                convs::direct_group<T, pack>(s, xg, kernel, offsets, yg, eg);
            } else if constexpr (phases) {
                convs::direct_group<T, pack>(convs::phase_shape(s), xg, kernel, offsets, yg, eg);
            } else if constexpr (flat) {
                convs::flat_group<T, pack>(split ? convs::phase_shape(s) : s, xg, kernel, offsets,
                                           rest + convs::aligned(depth), yg, eg);
            } else {
                convs::packed_group<T, pack>(s, xg, kernel, rest, cs, yg, eg, split);
            }
        }
    }
}

// The same, the method chosen at run time (shapes known only then).
template <class T>
void conv(const conv_shape& given, int64_t images, const T* x, const T* w, T* y, T* scratch, const epilogue<T>& epi = {}) {
    using convs::method;
    const convs::conv_plan& plan = convs::plan_at<T>(scratch, given);
    switch (convs::method_for<T>(plan.s, images)) {
    case method::few:
        return conv_as<T, method::few>(plan, given, images, x, w, y, scratch, epi);
    case method::direct_packed:
        return conv_as<T, method::direct_packed>(plan, given, images, x, w, y, scratch, epi);
    case method::direct:
        return conv_as<T, method::direct>(plan, given, images, x, w, y, scratch, epi);
    case method::panels_packed:
        return conv_as<T, method::panels_packed>(plan, given, images, x, w, y, scratch, epi);
    case method::panels:
        return conv_as<T, method::panels>(plan, given, images, x, w, y, scratch, epi);
    case method::chunks:
        return conv_as<T, method::chunks>(plan, given, images, x, w, y, scratch, epi);
    case method::phases_packed:
        return conv_as<T, method::phases_packed>(plan, given, images, x, w, y, scratch, epi);
    case method::phases:
        return conv_as<T, method::phases>(plan, given, images, x, w, y, scratch, epi);
    case method::flat_packed:
        return conv_as<T, method::flat_packed>(plan, given, images, x, w, y, scratch, epi);
    case method::flat:
        return conv_as<T, method::flat>(plan, given, images, x, w, y, scratch, epi);
    }
}

// The same with a library's matrix product: product(m, n, k, a, b, c, accumulate) (ks::library_gemm).
template <class T, class Product>
void conv_rows(const conv_shape& shape, int64_t images, const T* x, const T* w, T* y, T* scratch,
               const Product& product, const epilogue<T>& epi = {}) {
    const bool pad = convs::copies_image<T>(shape);
    const conv_shape s = pad ? convs::padded_shape(shape) : shape;
    const int64_t mg = tiles::index_div(s.out_channels, s.groups), depth = s.depth(), n = s.positions();
    const int64_t block = convs::position_block * panel_width<T>;
    T* rows = scratch + convs::aligned(convs::padded_size<T>(shape));
    convs::chunks<T>& cs = convs::chunks_at(scratch, conv_scratch<T>(shape, true));
    for (int64_t image = 0; image < images; ++image) {
        const T* xi = x + image * shape.channels * shape.in_plane();
        if (pad) {
            convs::pad_image<T>(shape, xi, scratch);
            xi = scratch;
        }
        for (int64_t g = 0; g < s.groups; ++g) {
            const T* xg = xi + g * tiles::index_div(s.channels, s.groups) * s.in_plane();
            T* yg = y + (image * s.out_channels + g * mg) * n;
            for (int64_t j0 = 0; j0 < n; j0 += block) {
                const int64_t cols = n - j0 < block ? n - j0 : block;
                convs::pack_rows<T>(s, xg, 0, depth, j0, cols, rows, cs);
                product(mg, cols, depth, matrix<const T>{w + g * mg * depth, depth, 1},
                        matrix<const T>{rows, cols, 1}, matrix<T>{yg + j0, n, 1}, false);
                epi.group(image, g * mg)(0, j0, yg + j0, n, 1, mg, cols);
            }
        }
    }
}

// ---- Pointwise convolutions over few positions ---------------------------------------------------------------
// A pointwise convolution (one group, 1 × 1 taps, stride 1, no padding) whose n output positions leave a large part
// of the last panel empty (7 × 7: 49 = 3 · 16 + 1, a quarter of the tiles' lanes padding; prims/convolve.py:
// pointwise_applies) runs transposed, as onnxruntime's NCHWc kernels do: yᵀ [n, M] = xᵀ [n, C] · wᵀ [C, M], the
// positions as the tiles' rows (read where they lie: position r of channel p at x[p·n + r], MR consecutive values a
// k step) and the output channels as their panels (wᵀ stored as panels when the package was compiled:
// transforms/layout_constants.py), so that only the last tile of rows is partial. The tiles store yᵀ into scratch;
// then each output channel's row is copied out of it into y with the epilogue.
namespace convs {

// Whether ks::conv_pointwise computes a convolution with a window (taps, a stride or padding: not a pointwise one) by
// its im2col blocks: yᵀ [n, M] = im2colᵀ [n, C·K] · wᵀ [C·K, M] (windowed_block below).
constexpr bool windowed(const conv_shape& s) {
    return s.taps() > 1 || s.stride[0] * s.stride[1] * s.stride[2] > 1 || s.pad[0] + s.pad[1] + s.pad[2] > 0 ||
           s.out[0] != s.in[0] || s.out[1] != s.in[1] || s.out[2] != s.in[2];
}

// The input channels of one block of a windowed kernel: as many as keep the block's rows of all output channels within
// chunk_bytes (as the `chunks` method's, at least one), all of them at most. The kernel's panels are stored block by
// block ([blocks][ceil(M / P)][rows of the block][P]: transforms/layout_constants.py, prims/convolve.py's
// window_panels), so that the tiles' prefetch of the next panels (tiles::panel_rows::next) reads one run.
constexpr conv_dim window_channels(const conv_shape& s, int64_t bytes) {
    const int64_t per = s.out_channels * s.taps() * bytes;
    const int64_t cc = tiles::index_div(512 * 1024, per);
    return conv_dim(cc < 1 ? 1 : (cc > s.channels ? s.channels : cc));
}

// The images whose positions one windowed block takes as the tiles' rows (at most window_rows of them, one at least),
// so that each block of the kernel's panels is read from memory once for them.
constexpr conv_dim window_rows = 256;
constexpr conv_dim window_images(const conv_shape& s) {
    const conv_dim g = conv_dim(tiles::index_div(window_rows, s.positions()));
    return g < 1 ? 1 : g;
}

}  // namespace convs

namespace convs {

// The elements of a windowed block's channels padded (or split into their stride phases: split_rows), a panel of room
// after: the first part of pointwise_scratch.
template <class T>
constexpr int64_t window_padded(const conv_shape& s) {
    const int64_t cc = window_channels(s, sizeof(T)), plain = cc * extent(s, 0) * extent(s, 1) * extent(s, 2);
    const int64_t planes = split_rows(s) ? cc * 4 * phase_rows(s) * phase_cols(s) : 0;
    return aligned((planes > plain ? planes : plain) + panel_width<T>);
}

// Whether windowed_images copies a block's im2col rows once more, as row tiles of the positions (tile_cols:
// tiles::pack_a's layout), before the tiles read them: float on AVX2 (x86-64-v3). Read where they lay ([rows]
// [positions]), a 6-row tile's k step was a cache line of its own, 252 lines per tile for ResNet-18's 512-channel
// layer, and a block's rows (49-247 KB) did not stay in Zen 3's 32 KB L1 cache while every panel of output channels
// read them again (perf: the multiply-adds waiting on their loads). Packed, a tile's rows are one run of 6 KB: 512 ->
// 512 channels at 7 × 7 0.80 of the time, 256 -> 512 at stride 2 0.83, 128 -> 256 0.87 (one image). AVX-512's tall
// tiles read them as they lie (not measured). The packed tiles run in conv_block, the `panels` method's block:
// tiles::block inlined into a function of its own here, GCC 12 read b's vectors from L1 at every multiply-add (a
// memory operand each, 12 loads per k instead of 2), and the layers took 1.3× their old time.
template <class T>
constexpr bool window_tiles = std::is_same_v<T, float> && tiles::vector_bytes == 32;

// Float on AVX2 (window_tiles): ks::conv_pointwise reads each image's rows transposed, xt [n][C] (transpose_rows), so
// that a row tile's rows run along k, 16 values of a line each, as ks::packed_gemm's do on a channels-last image: read
// where they lie, x [C][n] gave 6 floats of a line per k, and the lines of 576 or more input channels left L1 before
// the next row tile read them again (576 -> 96 at 14 × 14: 1.46 of onnxruntime's node time; the same product
// channels-last 1.02). The tiles and their sums are the same: the results too, bit for bit.
template <class T>
#if defined(__AVX2__) && !defined(__AVX512F__)
constexpr bool pointwise_rows = window_tiles<T>;
#else
constexpr bool pointwise_rows = false;
#endif

// The elements of windowed_images' row tiles (window_tiles): the rows of a block for a group of images, rounded up to
// whole tiles.
template <class T>
constexpr int64_t window_tiled(conv_dim rows, conv_dim depth) {
    return window_tiles<T> ? aligned(int64_t(rows + tiles::row_block - 1) / tiles::row_block * tiles::row_block * depth)
                           : 0;
}

}  // namespace convs

template <class T>
constexpr int64_t pointwise_scratch(const conv_shape& s) {
    if (!convs::windowed(s)) {  // (float on AVX2: and the image transposed, convs::pointwise_rows)
        return convs::aligned(s.positions() * 2 * panel_width<T>) +
               (convs::pointwise_rows<T> ? convs::aligned(s.positions() * s.channels) : 0);
    }
    // a block's channels padded, its im2col rows for a group of images, their yᵀ [images · n][ceil(M / P) · P]
    const int64_t cc = convs::window_channels(s, sizeof(T)), rows = convs::window_images(s) * s.positions();
    const int64_t padded = convs::window_padded<T>(s);
    const int64_t width = (s.out_channels + panel_width<T> - 1) / panel_width<T> * panel_width<T>;
    return convs::aligned(padded) + convs::aligned(cc * s.taps() * rows) + convs::aligned(rows * width) +
           convs::window_tiled<T>(conv_dim(rows), conv_dim(cc * s.taps())) + convs::chunks_room<T>();
}

namespace convs {

#if defined(__AVX512F__)
// The lanes l of a 16-lane vector whose place base + l lies in [lo, hi), as a mask.
inline __mmask16 lanes_in(int64_t lo, int64_t hi, int64_t base) {
    const int64_t a = lo - base > 0 ? lo - base : 0, b = hi - base < 16 ? hi - base : 16;
    return b > a ? __mmask16(((1u << b) - 1) & ~((1u << a) - 1)) : __mmask16(0);
}

// r[k] = lane c of the 16 vectors r becomes lane k of vector c (a 16 × 16 transpose: pairs of lanes, then
// pairs of pairs, then 128-bit quarters twice).
inline void transpose16(__m512* r) {
    const __mmask16 all = 0xFFFF;  // (the masked forms: the unmasked ones start from an undefined vector, which
                                   // GCC 12's -Wuninitialized reports)
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_mask_unpacklo_ps(r[2 * i], all, r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_mask_unpackhi_ps(r[2 * i], all, r[2 * i], r[2 * i + 1]);
    }
    __m512 u[16];
    for (int i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(a, 0xFF, a, c));  // (lane quarter q: rows 4i.., column 4q + 0)
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(a, 0xFF, a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_mask_unpacklo_pd(b, 0xFF, b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_mask_unpackhi_pd(b, 0xFF, b, d));
    }
    for (int k = 0; k < 4; ++k) {
        const __m512 x00 = _mm512_mask_shuffle_f32x4(u[k], all, u[k], u[4 + k], 0x88);
        const __m512 x01 = _mm512_mask_shuffle_f32x4(u[k], all, u[k], u[4 + k], 0xDD);
        const __m512 x10 = _mm512_mask_shuffle_f32x4(u[8 + k], all, u[8 + k], u[12 + k], 0x88);
        const __m512 x11 = _mm512_mask_shuffle_f32x4(u[8 + k], all, u[8 + k], u[12 + k], 0xDD);
        r[k] = _mm512_mask_shuffle_f32x4(x00, all, x00, x10, 0x88);
        r[8 + k] = _mm512_mask_shuffle_f32x4(x00, all, x00, x10, 0xDD);
        r[4 + k] = _mm512_mask_shuffle_f32x4(x01, all, x01, x11, 0x88);
        r[12 + k] = _mm512_mask_shuffle_f32x4(x01, all, x01, x11, 0xDD);
    }
}
#endif

#if defined(__AVX2__)
// r[k] = lane c of the 8 vectors r becomes lane k of vector c (an 8 × 8 transpose: pairs of lanes, pairs of pairs
// within each 128-bit half, then the halves).
inline void transpose8(__m256* r) {
    __m256 t[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    __m256 u[8];
    for (int i = 0; i < 2; ++i) {
        const __m256d a = _mm256_castps_pd(t[4 * i]), b = _mm256_castps_pd(t[4 * i + 1]);
        const __m256d c = _mm256_castps_pd(t[4 * i + 2]), d = _mm256_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));  // (rows 4i.., columns 0 and 4)
        u[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    for (int k = 0; k < 4; ++k) {
        r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
        r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// untranspose's copy for float on AVX2 (16 ymm registers): 8 positions a step, each half of their rows of t (channels
// 0-7, then 8-15: one vector per row) transposed in registers (transpose8), then each channel's vector finished
// (tiles::finish) and stored, the last step's lanes past n by tiles::store's masked move. (The scalar copy had been 2%
// of ks::conv_pointwise's time at 7 × 7 from 960 channels, and more from fewer.)
inline void untranspose8(const float* t, int64_t ld, int64_t m, int64_t n, float* y, const affine<float>& fin) {
    for (int64_t q = 0; q < n; q += 8) {
        const int left = n - q < 8 ? int(n - q) : 8;
        for (int h = 0; h < 2 && 8 * h < m; ++h) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {  // (rows past n: zeros, never stored)
                r[j] = j < left ? _mm256_loadu_ps(t + (q + j) * ld + 8 * h) : _mm256_setzero_ps();
            }
            transpose8(r);
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const int64_t c = 8 * h + k;
                if (c < m) {
                    const typename tiles::simd<float>::v x = r[k];
                    tiles::store<float>(fin ? tiles::finish<float>(x, fin, fin.bias != nullptr ? fin.bias[c] : 0.0f)
                                            : x,
                                        y + c * n + q, left, false);
                }
            }
        }
    }
}
#endif

// y [m, n] = epi(t [n, ld]ᵀ) for m <= P output channels from row i of the whole result (one cache line of each of
// t's rows read, m rows of y written front to back), the affine epilogue as each value is copied, any other after.
// Float on AVX-512: 16 positions a step, their rows of t (one vector each) transposed in registers (transpose16),
// then each channel's vector finished (tiles::finish: the same operations as affine::apply, lane by lane) and stored,
// masked past n. (The scalar copy had been 7% of ResNet-18's 128 -> 256 stride-2 layer at batch 8.) Float on AVX2:
// the same 8 positions at a time (untranspose8).
template <class T>
KS_OWN_FRAME void untranspose(const T* t, int64_t ld, int64_t m, int64_t n, T* y, const epilogue<T>& epi, int64_t i) {
    constexpr int P = panel_width<T>;
    const affine<T> fin = epi.in_registers(i);
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float> && P == 16 && tiles::simd<T>::lanes == 16) {
        for (int64_t q = 0; q < n; q += 16) {
            const int64_t left = n - q < 16 ? n - q : 16;
            __m512 r[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; ++j) {  // (rows past n: zeros, never stored; lanes past m: not stored either)
                r[j] = j < left ? _mm512_loadu_ps(t + (q + j) * ld) : _mm512_setzero_ps();
            }
            transpose16(r);
            const __mmask16 lanes = lanes_in(0, left, 0);
#pragma GCC unroll 16
            for (int k = 0; k < 16; ++k) {
                if (k < m) {
                    const typename tiles::simd<T>::v x = r[k];
                    _mm512_mask_storeu_ps(y + k * n + q, lanes,
                                          fin ? tiles::finish<T>(x, fin, fin.bias != nullptr ? fin.bias[k] : T(0)) : x);
                }
            }
        }
        if (!fin) {
            epi(i, 0, y, n, 1, m, n);
        }
        return;
    }
#elif defined(__AVX2__)
    if constexpr (std::is_same_v<T, float> && P == 16 && tiles::simd<T>::lanes == 8) {
        untranspose8(t, ld, m, n, y, fin);
        if (!fin) {
            epi(i, 0, y, n, 1, m, n);
        }
        return;
    }
#endif
    T bias[P];
    for (int r = 0; r < P; ++r) {
        bias[r] = fin.bias != nullptr && r < m ? fin.bias[r] : T(0);
    }
    for (int64_t q = 0; q < n; ++q) {
        for (int r = 0; r < m; ++r) {
            y[r * n + q] = fin ? fin.apply(t[q * ld + r], bias[r]) : t[q * ld + r];
        }
    }
    if (!fin) {
        epi(i, 0, y, n, 1, m, n);
    }
}

// Rows [0, n) of yᵀ at c (row stride ld) for `cols` output channels over kc input channels: the tall tiles over a
// (the image's positions, read where they lie) and b (the kernel's panels), in a frame of their own.
template <class T>
KS_OWN_FRAME void pointwise_block(int64_t n, int64_t kc, const tiles::row_tiles<T>& a, const tiles::panel_rows<T>& b,
                                  T* c, int64_t ld, int64_t cols, bool load_c) {
    constexpr int P = panel_width<T>;
    tiles::block<T, false, tiles::tall_block>(n, kc, a, b, static_cast<int>((cols + P - 1) / P), c,
                                                                   ld, cols, load_c, false, 0, epilogue<T>{});
}

// cols [kc][count] (a block's im2col rows, the positions side by side) copied into row tiles of the positions at out
// ([ceil(count / MR)][kc][MR]: tiles::pack_a's layout, a's rows the positions), zeros past count.
template <class T>
__attribute__((noinline)) void tile_cols(const T* cols, conv_dim kc, conv_dim count, T* out) {
    constexpr int MR = tiles::row_block;
    for (conv_dim q0 = 0; q0 < count; q0 += MR) {
        const int live = count - q0 < MR ? int(count - q0) : MR;
        T* o = out + int64_t(q0) * kc;
        for (conv_dim p = 0; p < kc; ++p) {
            const T* src = cols + int64_t(p) * count + q0;
            for (int r = 0; r < MR; ++r) {
                o[p * MR + r] = r < live ? src[r] : T(0);
            }
        }
    }
}

// Rows [0, kc) of the im2col matrix of x split into its stride phases (split_rows; s: the convolution's shape) at
// dst [p · p_stride + q]: each output row's run of positions consecutive elements of a plane, copied as whole vectors.
template <class T>
__attribute__((noinline)) void pack_split(const conv_shape& s, const T* x, conv_dim kc, T* dst, conv_dim p_stride,
                                          chunks<T>& cs) {
    cs.n = 0;
    position_runs(phase_shape(s), 0, s.positions(), [&cs](int64_t r, int64_t offset, int64_t count) {
        cs.src[cs.n] = offset;
        cs.dst[cs.n] = r;
        cs.count[cs.n++] = count;
    });
    phase_im2col_rows<T>(s, x, 0, kc, [&](conv_dim p, const T* first) {
        for (int64_t i = 0; i < cs.n; ++i) {
            copy_run<T>(first + cs.src[i], dst + p * p_stride + cs.dst[i], conv_dim(cs.count[i]));
        }
    });
}

// The im2col rows of input channels [c0, c0 + k) of images [g0, g1) of the convolution `given` (windowed) into cols
// ([k · taps][(g1 - g0) · n]: the images' positions side by side), each image's channels padded first when the windows
// reach outside it, or split into their stride phases (split_rows). (Out of line: the shape of the block's padded
// channels in a frame of its own.)
template <class T>
__attribute__((noinline)) void window_cols(const conv_shape& given, conv_dim c0, conv_dim k, int64_t g0, int64_t g1,
                                           const T* x, T* padded, T* cols, chunks<T>& cs) {
    const bool split = split_rows(given), pad = !split && needs_padding(given);
    conv_shape part = pad ? padded_shape(given) : given;  // (the shape the rows are read from; split: the given one)
    part.channels = k;
    const conv_dim n = conv_dim(given.positions()), count = conv_dim(g1 - g0) * n;
    for (int64_t image = g0; image < g1; ++image) {
        const T* xi = x + (image * given.channels + c0) * given.in_plane();
        if (split) {
            split_phases<T>(part, xi, padded);
            pack_split<T>(part, padded, k * given.taps(), cols + conv_dim(image - g0) * n, count, cs);
            continue;
        }
        if (pad) {
            pad_channels<T>(given, k, xi, padded);
            xi = padded;
        }
        pack_strided<T>(part, xi, 0, k * given.taps(), 0, n, cols + conv_dim(image - g0) * n, count, 1, cs);
    }
}

// The convolution `given` (windowed: canonical as it is) of images [g0, g1) (at most window_images) transposed: per
// block of input channels (window_channels), the block's im2col rows of every image (window_cols), and the tall tiles
// add yᵀ [images · n, M] += im2colᵀ · wᵀ, the block's panels of wᵀ (stored block by block) read once for all the
// images, the next ones prefetched as the tiles run; then each image's yᵀ copied out into y with the epilogue
// (untranspose).
template <class T>
__attribute__((noinline)) void windowed_images(const conv_shape& s, int64_t g0, int64_t g1, const T* x, const T* w,
                                               T* y, T* scratch, const epilogue<T>& epi) {
    constexpr int P = panel_width<T>;
    const conv_dim m = s.out_channels, n = conv_dim(s.positions()), taps = s.taps();
    const conv_dim width = (m + P - 1) / P * P;
    const conv_dim cc = window_channels(s, sizeof(T)), rows = window_images(s) * n, count = conv_dim(g1 - g0) * n;
    T* padded = scratch;
    T* cols = padded + window_padded<T>(s);
    T* t = cols + aligned(cc * taps * rows);
    chunks<T>& cs = chunks_at(scratch, pointwise_scratch<T>(s));
    for (conv_dim c0 = 0; c0 < s.channels; c0 += cc) {
        const conv_dim k = s.channels - c0 < cc ? s.channels - c0 : cc;
        window_cols<T>(s, c0, k, g0, g1, x, padded, cols, cs);
        const tiles::panel_rows<T> b{w + c0 * taps * width, P, k * taps * P, true};
        if constexpr (window_tiles<T>) {
            T* tiled = t + aligned(rows * width);
            tile_cols<T>(cols, k * taps, count, tiled);  // (conv_block: the packed panels' block, out of line)
            const tiles::row_tiles<T> a{tiled, 1, tiles::row_block, k * taps * tiles::row_block};
            conv_block<T, true>(count, k * taps, a, b, int(width / P), t, width, m, c0 > 0, false, 0, epilogue<T>{});
        } else {
            pointwise_block<T>(count, k * taps, tiles::rows_of(cols, 1, count), b, t, width, m, c0 > 0);
        }
    }
    for (int64_t image = g0; image < g1; ++image) {
        const epilogue<T> eg = epi.group(image, 0);
        for (int64_t u = 0; u < m; u += P) {
            untranspose<T>(t + (image - g0) * n * width + u, width, m - u < P ? m - u : P, n, y + (image * m + u) * n,
                           eg, u);
        }
    }
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// xt [n][c] = x [c][n]ᵀ (float on AVX2: pointwise_rows): blocks of 8 channels by 8 positions transposed in registers
// (transpose8), the channels past a multiple of 8 and the positions past one one at a time. (Out of line: its
// registers spilled into conv_pointwise's frame made it 656 B.)
__attribute__((noinline)) inline void transpose_rows(const float* x, int64_t c, int64_t n, float* xt) {
    const int64_t c8 = c - c % 8, n8 = n - n % 8;
    for (int64_t k = 0; k < c8; k += 8) {
        for (int64_t q = 0; q < n8; q += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                r[j] = _mm256_loadu_ps(x + (k + j) * n + q);
            }
            transpose8(r);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                _mm256_storeu_ps(xt + (q + j) * c + k, r[j]);
            }
        }
    }
    for (int64_t k = 0; k < c; ++k) {
        for (int64_t q = k < c8 ? n8 : 0; q < n; ++q) {
            xt[q * c + k] = x[k * n + q];
        }
    }
}
#endif

}  // namespace convs

// y [images, M, n] = epi(conv(x [images, C, n], w)) for a pointwise convolution s, its kernel w [M, C] stored
// transposed as panels (ks::panels of wᵀ [C, M]; scratch: pointwise_scratch elements). A convolution with a window
// (convs::windowed: taps, a stride, padding) by its im2col blocks the same way, its kernel's transpose wᵀ [C·K, M]
// stored as panels block by block (convs::window_channels), a group of images at a time (convs::windowed_images).
template <class T>
void conv_pointwise(const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
                    const epilogue<T>& epi = {}) {
    constexpr int P = panel_width<T>, NP = 2;  // (two panels of output channels at a time: AVX-512's tiles)
    if (convs::windowed(s)) {
        const int64_t group = convs::window_images(s);
        for (int64_t g0 = 0; g0 < images; g0 += group) {
            convs::windowed_images<T>(s, g0, images - g0 < group ? images : g0 + group, tiles::opaque(x),
                                      tiles::opaque(w), y, scratch, epi);
        }
        return;
    }
    const int64_t m = s.out_channels, depth = s.channels, n = s.positions(), step = tiles::k_step(depth);
    T* xt = scratch + convs::aligned(n * NP * P);  // (pointwise_rows: the image transposed)
    for (int64_t image = 0; image < images; ++image) {
        const T* xi = tiles::opaque(x + image * depth * n);
        const epilogue<T> eg = epi.group(image, 0);
#if defined(__AVX2__) && !defined(__AVX512F__)
        if constexpr (convs::pointwise_rows<T>) {
            convs::transpose_rows(xi, depth, n, xt);
        }
#endif
        for (int64_t i0 = 0; i0 < m; i0 += NP * P) {  // (a tile's panels of output channels, then out of scratch)
            const int64_t cols = m - i0 < NP * P ? m - i0 : NP * P;
            for (int64_t k0 = 0; k0 < depth; k0 += step) {
                const int64_t kc = depth - k0 < step ? depth - k0 : step;
                convs::pointwise_block<T>(n, kc, convs::pointwise_rows<T> ? tiles::rows_of(xt + k0, depth, 1)
                                                                          : tiles::rows_of(xi + k0 * n, 1, n),
                                          tiles::panel_rows<T>{w + i0 * depth + k0 * P, P, depth * P, true}, scratch,
                                          NP * P, cols, k0 > 0);
            }
            for (int64_t u = 0; u < cols; u += P) {
                convs::untranspose<T>(scratch + u, NP * P, cols - u < P ? cols - u : P, n, y + (image * m + i0 + u) * n, eg, i0 + u);
            }
        }
    }
}

// ---- Dot products on one lane (a microcontroller) ------------------------------------------------------------
// On a target without a vector unit (tiles::dot_products: an M-profile Arm core) every float convolution, depthwise
// ones too, is ks::conv_dots (impl "dots": transforms/dot_convs.py): per output position, the window's values (C/G·K
// of them) are dotted with 4 kernel rows at a time in scalar registers (each value loaded once for the 4), then the
// epilogue runs over each output channel's row. A window inside the image is read where it is, through a table of
// its values' offsets; one that reads padding is first gathered into scratch, zeros included. About 2 KB of a
// Cortex-M4's flash for all the convolutions of a network, where the register tiles, their packing and the padded
// copies took 16-28 KB; the scratch is the table and one window.
namespace convs {

// The elements of scratch ks::conv_dots uses: the window's offsets in the image, the identity offsets of a gathered
// window (int32 each) and one gathered window.
constexpr int64_t dots_scratch(const conv_shape& s) {
    return 3 * aligned(s.depth());
}

// aligned(count) for count >= 0 in dot_index (32 bits on a 32-bit target: no 64-bit sum and sign fix-up).
constexpr tiles::dot_index dots_aligned(tiles::dot_index count) {
    return (count + 15) & ~tiles::dot_index(15);
}

// off[(c·KD + kd)·KH·KW + kh·KW + kw]: where a window's value is in a group's image, from its first value's place;
// ident[t] = t.
KS_DOTS inline void window_offsets(const conv_shape& s, int32_t* off, int32_t* ident) {
    using index = tiles::dot_index;
    const index cg = index(tiles::index_div(s.channels, s.groups)), in1 = index(s.in[1]), in2 = index(s.in[2]);
    const index plane = index(s.in[0]) * in1 * in2;
    index t = 0;
    for (index c = 0; c < cg; ++c) {
        for (index kd = 0; kd < index(s.kernel[0]); ++kd) {
            for (index kh = 0; kh < index(s.kernel[1]); ++kh) {
                for (index kw = 0; kw < index(s.kernel[2]); ++kw, ++t) {
                    off[t] = int32_t(c * plane + (kd * index(s.dilation[0]) * in1 + kh * index(s.dilation[1])) * in2 +
                                     kw * index(s.dilation[2]));
                    ident[t] = int32_t(t);
                }
            }
        }
    }
}

// The window whose first value is at (z0, y0, x0) of group image xg (those may be negative: padding), gathered
// into win with zeros where it reads padding (unsigned compares: a negative index is out of range too).
template <class T>
KS_DOTS void gather_window(const conv_shape& s, const T* xg, tiles::dot_index z0, tiles::dot_index y0,
                           tiles::dot_index x0, T* win) {
    using index = tiles::dot_index;
    const index cg = index(tiles::index_div(s.channels, s.groups)), in0 = index(s.in[0]), in1 = index(s.in[1]);
    const index in2 = index(s.in[2]), dx = index(s.dilation[2]);
    for (index c = 0; c < cg; ++c) {
        for (index kd = 0; kd < index(s.kernel[0]); ++kd) {
            const index iz = z0 + kd * index(s.dilation[0]);
            for (index kh = 0; kh < index(s.kernel[1]); ++kh) {
                const index iy = y0 + kh * index(s.dilation[1]);
                const bool row = uint32_t(iz) < uint32_t(in0) && uint32_t(iy) < uint32_t(in1);
                const T* r = xg + ((c * in0 + iz) * in1 + iy) * in2 + x0;
                KS_ROLLED for (index kw = 0; kw < index(s.kernel[2]); ++kw) {
                    *win++ = row && uint32_t(x0 + kw * dx) < uint32_t(in2) ? r[kw * dx] : T(0);
                }
            }
        }
    }
}

// out[i·n] = Σ_k x[off[k]] · w[i·depth + k] for the m kernel rows i: 4 rows at a time, then one at a time.
template <class T>
inline void window_dots(const T* x, const int32_t* off, const T* w, tiles::dot_index depth, tiles::dot_index m,
                        T* out, tiles::dot_index n) {
    using index = tiles::dot_index;
    index i = 0;
    for (; i + 4 <= m; i += 4, w += 4 * depth, out += 4 * n) {
        const T *w0 = w, *w1 = w + depth, *w2 = w1 + depth, *w3 = w2 + depth;
        T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
        for (index k = 0; k < depth; ++k) {
            const T a = x[off[k]];
            d0 += a * w0[k];
            d1 += a * w1[k];
            d2 += a * w2[k];
            d3 += a * w3[k];
        }
        out[0] = d0;
        out[n] = d1;
        out[2 * n] = d2;
        out[3 * n] = d3;
    }
    for (; i < m; ++i, w += depth, out += n) {
        T d = 0;
        KS_ROLLED for (index k = 0; k < depth; ++k) {
            d += x[off[k]] * w[k];
        }
        *out = d;
    }
}

// out[i·n] = Σ_k win[k·xs] · w[i·depth + k] for the m kernel rows i: 4 rows at a time, then one at a time (a gathered
// window, xs 1, or a one-tap convolution's values where they are, xs the image's plane: ks::conv_dots at optimize =
// "size").
template <class T>
inline void gathered_dots(const T* win, tiles::dot_index xs, const T* w, tiles::dot_index depth, tiles::dot_index m,
                          T* out, tiles::dot_index n) {
    using index = tiles::dot_index;
    index i = 0;
    for (; i + 4 <= m; i += 4, w += 4 * depth, out += 4 * n) {
        const T *w1 = w + depth, *w2 = w1 + depth, *w3 = w2 + depth;
        T d0 = 0, d1 = 0, d2 = 0, d3 = 0;
        for (index k = 0; k < depth; ++k) {
            const T a = win[k * xs];
            d0 += a * w[k];
            d1 += a * w1[k];
            d2 += a * w2[k];
            d3 += a * w3[k];
        }
        out[0] = d0;
        out[n] = d1;
        out[2 * n] = d2;
        out[3 * n] = d3;
    }
    for (; i < m; ++i, w += depth, out += n) {
        T d = 0;
        KS_ROLLED for (index k = 0; k < depth; ++k) {
            d += win[k * xs] * w[k];
        }
        *out = d;
    }
}

// Whether a window starting at `first` along an axis of `size` values, `span` wide, is inside it.
inline bool inside(tiles::dot_index first, tiles::dot_index span, tiles::dot_index size) {
    return first >= 0 && first <= size - span;
}

// One group of one image: yg [mg, positions] = epi(wg [mg, depth] · windows); scratch as conv_dots's.
template <class T>
KS_DOTS void dots_group(const conv_shape& s, const T* xg, const T* wg, T* yg, T* scratch, const epilogue<T>& eg) {
    using index = tiles::dot_index;
    const index mg = index(tiles::index_div(s.out_channels, s.groups)), depth = index(s.depth());
    const index n = index(s.positions()), in1 = index(s.in[1]), in2 = index(s.in[2]);
    index span[3];  // (a window's extent along each axis)
    for (int a = 0; a < 3; ++a) {
        span[a] = index((s.kernel[a] - 1) * s.dilation[a] + 1);
    }
    const int32_t* off = reinterpret_cast<const int32_t*>(scratch);
    const int32_t* ident = off + dots_aligned(depth);
    T* win = scratch + 2 * dots_aligned(depth);
    index q = 0;
    for (index oz = 0; oz < index(s.out[0]); ++oz) {
        const index z0 = oz * index(s.stride[0]) - index(s.pad[0]);
        for (index oy = 0; oy < index(s.out[1]); ++oy) {
            const index y0 = oy * index(s.stride[1]) - index(s.pad[1]);
            const bool rows = inside(z0, span[0], index(s.in[0])) && inside(y0, span[1], in1);
            for (index ox = 0; ox < index(s.out[2]); ++ox, ++q) {
                const index x0 = ox * index(s.stride[2]) - index(s.pad[2]);
                const bool in = rows && inside(x0, span[2], in2);
                if (!in) {
                    gather_window<T>(s, xg, z0, y0, x0, win);
                }
                window_dots<T>(in ? xg + (z0 * in1 + y0) * in2 + x0 : win, in ? off : ident, wg, depth, mg, yg + q, n);
            }
        }
    }
    for (index i = 0; eg && i < mg; ++i) {
        tiles::dot_epilogue<T>(eg, i, yg + i * n, 1, n);
    }
}

}  // namespace convs

#if KS_SIZE_DOTS
namespace convs {
// A convolution's epilogue over the m output channels from channel `first` of one image's group, y [m, n]: one call of
// its run over them all, or its affine (bias by channel and bounds; a convolution's is never by column) in a loop
// here, instead of tiles::dot_epilogue per channel (ks::conv_dots at optimize = "size": 0.2 KB less flash).
template <class T>
inline void rows_epilogue(const epilogue<T>& epi, tiles::dot_index image, tiles::dot_index first, T* y,
                          tiles::dot_index m, tiles::dot_index n) {
    using index = tiles::dot_index;
    if (epi.run != nullptr) {
        epi.run(epi.self, epi.image + image, first, 0, y, n, 1, m, n);
        return;
    }
    if (epi.self == nullptr) {
        return;
    }
    const affine<T>& f = epi.simple();
    for (index i = 0; i < m; ++i) {
        const T b = f.bias != nullptr ? f.bias[first + i] : T(0);
        KS_ROLLED for (index q = 0; q < n; ++q, ++y) {
            *y = f.apply(*y, b);
        }
    }
}
}  // namespace convs

// y [images, M, positions] = epi(conv(x [images, C, in...], w [M, C/G, taps...])) at optimize = "size" on a
// microcontroller: every window gathered into scratch (zeros where it reads padding), then dotted with 4 kernel rows
// at a time, one function and gather_window (no table of offsets, no separate path for windows inside the image); a
// one-tap window inside the image (a pointwise convolution's, a product's) is read where it is, not gathered.
template <class T>
void conv_dots(const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
               const epilogue<T>& epi = {}) {
    using index = tiles::dot_index;
    const index groups = index(s.groups), mg = index(s.out_channels) / groups, cg = index(s.channels) / groups;
    const index taps = index(s.kernel[0] * s.kernel[1] * s.kernel[2]), n = index(s.out[0] * s.out[1] * s.out[2]);
    const index in1 = index(s.in[1]), in2 = index(s.in[2]), plane = index(s.in[0]) * in1 * in2;
    const index depth = cg * taps;  // (the sizes' products here: conv_shape's accessors are calls at -Os)
    for (index gi = 0; gi < index(images) * groups; ++gi, x += cg * plane, y += mg * n) {
        const T* wg = w + gi % groups * mg * depth;
        index q = 0;
        for (index oz = 0; oz < index(s.out[0]); ++oz) {
            const index z0 = oz * index(s.stride[0]) - index(s.pad[0]);
            for (index oy = 0; oy < index(s.out[1]); ++oy) {
                const index y0 = oy * index(s.stride[1]) - index(s.pad[1]);
                for (index ox = 0; ox < index(s.out[2]); ++ox, ++q) {
                    const index x0 = ox * index(s.stride[2]) - index(s.pad[2]);
                    const bool there = taps == 1 && uint32_t(z0) < uint32_t(s.in[0]) && uint32_t(y0) < uint32_t(in1) &&
                                       uint32_t(x0) < uint32_t(in2);
                    if (!there) {
                        convs::gather_window<T>(s, x, z0, y0, x0, scratch);
                    }
                    convs::gathered_dots<T>(there ? x + (z0 * in1 + y0) * in2 + x0 : scratch, there ? plane : 1, wg,
                                            depth, mg, y + q, n);
                }
            }
        }
        convs::rows_epilogue<T>(epi, gi / groups, index(epi.first) + gi % groups * mg, y, mg, n);
    }
}
#else
// y [images, M, positions] = epi(conv(x [images, C, in...], w [M, C/G, taps...])) by dot products (one lane:
// convs::dots_group); scratch holds convs::dots_scratch(s) elements.
template <class T>
void conv_dots(const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
               const epilogue<T>& epi = {}) {
    using index = tiles::dot_index;  // (the image's and the result's groups follow one another)
    const index mg = index(tiles::index_div(s.out_channels, s.groups)), depth = index(s.depth());
    const index x_step = index(tiles::index_div(s.channels, s.groups) * s.in_plane()), y_step = mg * index(s.positions());
    int32_t* off = reinterpret_cast<int32_t*>(scratch);
    convs::window_offsets(s, off, off + convs::dots_aligned(depth));
    for (index image = 0; image < index(images); ++image) {
        for (index g = 0; g < index(s.groups); ++g, x += x_step, y += y_step) {
            convs::dots_group<T>(s, x, w + g * mg * depth, y, scratch, epi.group(image, g * mg));
        }
    }
}
#endif

// A literal conv_shape in 8 or 16 bits a size (U: uint8_t or uint16_t; 21 or 42 bytes of read-only data, not 84):
// what the generated code passes ks::conv_dots at optimize = "size" on a microcontroller (ks::dots_shape<U>: the
// narrowest U that holds every size), widened here into a conv_shape on the stack. The Cortex-M4 benchmark's keyword
// spotter and MobileNet-like net (ten convolutions each) keep 0.6 KB of flash (issue 36 item 3: their geometries
// were 840 B); the widening costs about 90 instructions a call and 112 B of stack, so for speed the generated code
// passes the conv_shape itself.
template <class U>
struct narrow_shape {  // (conv_shape's fields, in their order)
    U channels;
    U out_channels;
    U groups;
    U in[3];
    U out[3];
    U kernel[3];
    U stride[3];
    U dilation[3];
    U pad[3];
};
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && defined(__OPTIMIZE_SIZE__)
template <class U>
using dots_shape = narrow_shape<U>;
#else
template <class U>
using dots_shape = conv_shape;
#endif

template <class T, class U>
KS_DOTS void conv_dots(const narrow_shape<U>& narrow, int64_t images, const T* x, const T* w, T* y, T* scratch,
                       const epilogue<T>& epi = {}) {
    static_assert(sizeof(conv_shape) == 21 * sizeof(conv_dim) && sizeof(narrow_shape<U>) == 21 * sizeof(U),
                  "conv_shape and narrow_shape: the same 21 sizes and nothing else");
    conv_shape s;  // (size by size, as bytes: a loop of 6 instructions)
    for (int i = 0; i < 21; ++i) {
        U given;
        __builtin_memcpy(&given, reinterpret_cast<const unsigned char*>(&narrow) + i * sizeof given, sizeof given);
        const conv_dim size = given;
        __builtin_memcpy(reinterpret_cast<unsigned char*>(&s) + i * sizeof size, &size, sizeof size);
    }
    conv_dots<T>(s, images, x, w, y, scratch, epi);
}

// ---- Winograd F(2×2, 3×3) --------------------------------------------------------------------------------
// A 3×3 convolution with stride 1, dilation 1 and one group computes each 2×2 block of its output from the
// 4×4 block of (padded) input under it with 16 multiplications per channel pair instead of 36 (Lavin and
// Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016). With each kernel g [3×3] transformed
// to u = G g Gᵀ and each input tile d [4×4] to v = Bᵀ d B, an output tile is Aᵀ (Σ_c u ⊙ v) A, where
//     Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1],  Aᵀ = [1 1 1 0; 0 1 -1 -1].
// The sum over input channels at each of the 16 points ξ of a tile is a matrix product,
//     prod_ξ [out channels × tiles] = u_ξ [out channels × in channels] · v_ξ [in channels × tiles],
// run by ks/gemm.h's register tiles on a block of tiles at a time. The kernel u is stored [16][C][M] (its
// transpose per point: a tile reads MR consecutive out channels per input channel), transformed when the
// package is compiled if it is a constant (transforms/layout_constants.py), else by winograd_kernel.
// The select_backend pass picks this for convolutions with enough channels (prims/convolve.py).

#ifndef KS_WINOGRAD_PANELS
#define KS_WINOGRAD_PANELS 4
#endif

namespace winograd {

// The tiles transformed and multiplied at a time: a few panels of them. A block takes the tiles of all images in turn,
// an image's last ones with the next image's first (ResNet-18's 7 × 7 tiles at 14 × 14: with a block per image, 15 of
// each 64 products' columns were padding; at batch 8 the layer took 0.84-0.86 of the time: docs/performance.md).
template <class T>
constexpr int64_t tile_block = KS_WINOGRAD_PANELS * panel_width<T>;

// The tiles the input transform takes at a time: a vector's lanes.
template <class T>
constexpr int64_t lanes = tiles::simd<T>::lanes;

// A block of transformed tiles is stored [ξ][C][run] (point ξ's rows one run apart: a tile's k steps read lines
// 4.5 lines apart, 14 rows a page; stored [C][ξ][run] as the products still are, each k step had read a line 4.6 KB
// from the last, on a page of its own), their products [M][ξ][run] (an output transform reaches an output channel's
// 16 points at constant offsets from one pointer). A run is TB tiles and a vector's room after them (the input
// transform stores whole vectors). The products' rows are a cache line more than 16 runs apart, so that rows a
// multiple of 4 KiB apart do not compete for the same few sets of the L1 cache.
template <class T>
constexpr int64_t run_stride = tile_block<T> + lanes<T>;
template <class T>
constexpr int64_t row_stride = 16 * run_stride<T> + panel_width<T>;

// The elements of one point's rows of the transformed tiles ([C][run]).
template <class T>
constexpr int64_t point_stride(int64_t channels) {
    return run_stride<T> * channels;
}

// The padded image's rows and their length: the output rounded up to whole 2×2 tiles, plus 2.
constexpr int64_t padded_rows(const conv_shape& s) {
    return (s.out[1] + 1) / 2 * 2 + 2;
}
constexpr int64_t padded_row(const conv_shape& s) {
    return (s.out[2] + 1) / 2 * 2 + 2;
}

// The image x [C][h][w] zero-padded into dst [C][padded_rows][padded_row] with each row's even columns
// first and its odd columns after (column q of a row at (q % 2)·half + q / 2): a tile, whose columns
// start at an even position, then reads its four columns from two runs of consecutive elements. A vector of
// zeros follows (the input transform reads whole vectors).
template <class T>
__attribute__((noinline)) void split_image(const conv_shape& s, const T* x, T* dst) {
    const int64_t rows = padded_rows(s), ww = padded_row(s), half = ww / 2;
    const int64_t h = s.in[1], w = s.in[2], top = s.pad[1], left = s.pad[2];
    const int64_t last = w < ww - left ? w : ww - left;  // (the columns past the padded row are never read)
    // column q of the image is column q + left of the padded row: even ones at k = (q + left) / 2 for k in
    // [(left + 1) / 2, (last + left + 1) / 2), odd ones at half + k for k in [left / 2, (last + left) / 2)
    const int64_t even0 = (left + 1) / 2, even1 = (last + left + 1) / 2, odd0 = left / 2, odd1 = (last + left) / 2;
    const int64_t r0 = top > 0 ? top : 0, r1 = h + top < rows ? h + top : rows;  // the padded rows with image rows
    for (int64_t c = 0; c < s.channels; ++c) {
        T* plane = dst + c * rows * ww;
        for (int64_t q = 0; q < rows * ww; ++q) {  // (zeroing the whole plane first is faster than its borders)
            plane[q] = T(0);
        }
        for (int64_t r = r0; r < r1; ++r) {
            T* row = plane + r * ww;
            const T* src = x + (c * h + r - top) * w - left;  // (src[q + left]: image column q)
            KS_OMP_SIMD()
            for (int64_t k = even0; k < even1; ++k) {
                row[k] = src[2 * k];
            }
            KS_OMP_SIMD()
            for (int64_t k = odd0; k < odd1; ++k) {
                row[half + k] = src[2 * k + 1];
            }
        }
    }
    for (int64_t q = 0; q < lanes<T>; ++q) {
        dst[s.channels * rows * ww + q] = T(0);
    }
}

// Calls run(i, j0, j1, first) for each tile row met by tiles [t0, t0 + count) of a grid tw tiles wide: its
// tiles j0 .. j1 - 1, the first of them the block's tile `first`.
template <class Run>
inline void for_tile_rows(int64_t tw, int64_t t0, int64_t count, const Run& run) {
    int64_t i = tiles::index_div(t0, tw), j0 = t0 - i * tw;
    for (int64_t first = 0; first < count; ++i, j0 = 0) {
        const int64_t n = tw - j0 < count - first ? tw - j0 : count - first;
        run(i, j0, j0 + n, first);
        first += n;
    }
}

// Calls run(n, t0, count, col) for each image n met by tiles [b0, b0 + count) of all images' tiles (`per_image` each,
// image after image): its tiles t0 .. t0 + count - 1, at the block's column `col` on.
template <class Run>
inline void for_images(int64_t per_image, int64_t b0, int64_t count, const Run& run) {
    int64_t n = tiles::index_div(b0, per_image), t0 = b0 - n * per_image;
    for (int64_t col = 0; col < count; ++n, t0 = 0) {
        const int64_t part = per_image - t0 < count - col ? per_image - t0 : count - col;
        run(n, t0, part, col);
        col += part;
    }
}

// Tiles j0 .. j1 - 1 of tile row i of one channel of the split image (its first row at r0, rows ww apart)
// transformed (Bᵀ d B) into oc[ξ·xs + j], a vector of tiles at a time. The lanes of the last vector
// past j1 compute tiles that are not there, stored into the run's room or over the next tile row's slots,
// which input_tiles fills after this row.
template <class T>
inline void input_row(const T* r0, int64_t ww, int64_t j0, int64_t j1, T* oc, int64_t xs) {
    using V = typename tiles::simd<T>::v;
    constexpr int64_t L = lanes<T>;
    const int64_t half = ww / 2;
    {
        for (int64_t j = j0; j < j1; j += L) {
            V d[4][4];
            for (int k = 0; k < 4; ++k) {
                const T* r = r0 + k * ww + j;
                d[k][0] = tiles::load<T>(r);
                d[k][1] = tiles::load<T>(r + half);
                d[k][2] = tiles::load<T>(r + 1);
                d[k][3] = tiles::load<T>(r + half + 1);
            }
            V a[4][4];  // Bᵀ d: the tile's rows combined
            for (int k = 0; k < 4; ++k) {
                a[0][k] = d[0][k] - d[2][k];
                a[1][k] = d[1][k] + d[2][k];
                a[2][k] = d[2][k] - d[1][k];
                a[3][k] = d[1][k] - d[3][k];
            }
            for (int r = 0; r < 4; ++r) {  // (Bᵀ d) B: its columns combined
                const V e0 = a[r][0] - a[r][2], e1 = a[r][1] + a[r][2], e2 = a[r][2] - a[r][1], e3 = a[r][1] - a[r][3];
                std::memcpy(oc + (4 * r + 0) * xs + j, &e0, sizeof(V));
                std::memcpy(oc + (4 * r + 1) * xs + j, &e1, sizeof(V));
                std::memcpy(oc + (4 * r + 2) * xs + j, &e2, sizeof(V));
                std::memcpy(oc + (4 * r + 3) * xs + j, &e3, sizeof(V));
            }
        }
    }
}

// v [16][C][run]: the tiles [t0, t0 + count) of the split image transformed, channel by channel, into the block's
// columns [col, col + count); the columns from there up to `end` are zero (a block's last image: up to a whole panel).
template <class T>
__attribute__((noinline)) void input_tiles(const conv_shape& s, const T* image, int64_t t0, int64_t count, T* v,
                                           int64_t col, int64_t end) {
    const int64_t ww = padded_row(s), tw = ww / 2 - 1, plane = padded_rows(s) * ww, xs = point_stride<T>(s.channels);
    for (int64_t c = 0; c < s.channels; ++c) {
        T* vc = v + c * run_stride<T>;
        for_tile_rows(tw, t0, count, [=](int64_t i, int64_t j0, int64_t j1, int64_t first) {
            input_row<T>(image + c * plane + 2 * i * ww, ww, j0, j1, vc + col + first - j0, xs);
        });
        for (int xi = 0; xi < 16; ++xi) {
            for (int64_t t = col + count; t < end; ++t) {
                vc[xi * xs + t] = T(0);
            }
        }
    }
}

// One output tile: its 2×2 values, row by row.
template <class T>
struct quad {
    T v00, v01, v10, v11;
};

// Aᵀ m A of the tile at in[ξ·run_stride].
template <class T>
inline quad<T> output_tile(const T* in) {
    constexpr int64_t RUN = run_stride<T>;
    T s0[4], s1[4];  // Aᵀ m: the rows combined
    for (int k = 0; k < 4; ++k) {
        s0[k] = in[k * RUN] + in[(4 + k) * RUN] + in[(8 + k) * RUN];
        s1[k] = in[(4 + k) * RUN] - in[(8 + k) * RUN] - in[(12 + k) * RUN];
    }
    return {s0[0] + s0[1] + s0[2], s0[1] - s0[2] - s0[3], s1[0] + s1[1] + s1[2], s1[1] - s1[2] - s1[3]};
}

// 1 when v is infinite or NaN (v - v is 0 for every finite v), else 0.
template <class T>
inline int nonfinite(T v) {
    return (v - v) != T(0);
}

// The tiles j0 .. j1 - 1 of a tile row from io[ξ·run_stride + j] into y0's row (and y1's, with two_rows): both
// columns of the tiles before `pairs`, the first of the others (the last tile of an odd width); 1 when a value was
// infinite or NaN, else 0. (Out of line: its vectorized loops' values made output_tiles' frame 0.5-0.9 KB.)
template <class T>
KS_OWN_FRAME int output_values(const T* io, int64_t j0, int64_t j1, int64_t pairs, T* y0, T* y1,
                                            bool two_rows) {
    int bad = 0;
    if (two_rows) {
        KS_OMP_SIMD(simdlen(8) reduction(| : bad))
        for (int64_t j = j0; j < pairs; ++j) {
            const quad<T> r = output_tile(io + j);
            bad |= nonfinite(r.v00) | nonfinite(r.v01) | nonfinite(r.v10) | nonfinite(r.v11);
            y0[2 * j] = r.v00;
            y0[2 * j + 1] = r.v01;
            y1[2 * j] = r.v10;
            y1[2 * j + 1] = r.v11;
        }
    } else {
        KS_OMP_SIMD(simdlen(8) reduction(| : bad))
        for (int64_t j = j0; j < pairs; ++j) {
            const quad<T> r = output_tile(io + j);
            bad |= nonfinite(r.v00) | nonfinite(r.v01);
            y0[2 * j] = r.v00;
            y0[2 * j + 1] = r.v01;
        }
    }
    for (int64_t j = pairs > j0 ? pairs : j0; j < j1; ++j) {  // the last tile of an odd width: one column
        const quad<T> r = output_tile(io + j);
        bad |= nonfinite(r.v00);
        y0[2 * j] = r.v00;
        if (two_rows) {
            bad |= nonfinite(r.v10);
            y1[2 * j] = r.v10;
        }
    }
    return bad;
}

// Tiles j0 .. j1 - 1 of tile row i of output channel o, from io[ξ·run_stride + j], stored into y [oh][ow] of
// the channel, then the epilogue over them (the parts of the last tiles past the output dropped). Returns
// whether a value (before the epilogue) was infinite or NaN.
template <class T>
inline bool output_row(const conv_shape& s, const T* io, int64_t i, int64_t j0, int64_t j1, int64_t image, int64_t o,
                       T* y, const epilogue<T>& epi) {
    const int64_t oh = s.out[1], ow = s.out[2], q0 = 2 * i * ow;
    const int64_t pairs = j1 < ow / 2 ? j1 : ow / 2;  // tiles whose two columns are both in the output
    const bool two_rows = 2 * i + 1 < oh;
    T* y0 = y + q0;
    const int bad = output_values<T>(io, j0, j1, pairs, y0, y0 + ow, two_rows);
    const int64_t c0 = 2 * j0, c1 = 2 * j1 < ow ? 2 * j1 : ow;  // (the columns stored)
    // (a whole tile row: its two output rows are consecutive, one call; else one per row; one call site)
    const bool whole = two_rows && c0 == 0 && c1 == ow;
    for (int r = 0; r < (two_rows && !whole ? 2 : 1); ++r) {
        epi.group(image, 0)(o, q0 + r * ow + c0, y0 + r * ow + c0, 0, 1, 1, whole ? 2 * ow : c1 - c0);
    }
    return bad != 0;
}

// The output tiles [t0, t0 + count) of one image from prod [mc][16][run] into y [mc][oh][ow], output channels
// [first, first + mc) (the epilogue's rows from first; RANGE false: all of them, first and mc constants, the code
// of a whole convolution as it was before ranges); whether a value was infinite or NaN.
template <class T, bool RANGE>
__attribute__((noinline)) bool output_tiles(const conv_shape& s, int64_t first, int64_t mc, const T* prod, int64_t t0,
                                            int64_t count, int64_t image, T* y, const epilogue<T>& epi) {
    if constexpr (!RANGE) {
        first = 0;
        mc = s.out_channels;
    }
    const epilogue<T> shifted = RANGE ? epi.group(0, first) : epilogue<T>{};  // (the rows from first)
    const epilogue<T>& e = RANGE ? shifted : epi;
    const int64_t tw = (s.out[2] + 1) / 2, plane = s.out[1] * s.out[2];
    bool bad = false;
    for (int64_t o = 0; o < mc; ++o) {  // (channel by channel: its 16 runs stay in the L1 cache)
        const T* po = prod + o * row_stride<T>;
        for_tile_rows(tw, t0, count, [&](int64_t i, int64_t j0, int64_t j1, int64_t first_tile) {
            bad |= output_row<T>(s, po + first_tile - j0, i, j0, j1, image, o, y + o * plane, e);
        });
    }
    return bad;
}

// The transformed image's runs as the products' panels (tiles::panel_rows), and what the tiles of the first panels
// prefetch into L2 as they run: the next line of the transformed kernel's columns u_ξ[p][i + P...] (the rows of the
// next row tiles), which the tiles of the later panels and row tiles then find in L2. u_ξ is read as columns, each k
// row a cache line of its own (a layer's M floats apart): ResNet-18's 256-channel layers at 14 × 14 read 4 MB of it
// per image, from L3, and on an Intel Xeon (family 6 model 207) whose hardware prefetchers did not fetch those lines
// ahead each row tile waited on them: the layer took 1.65-1.7 times onnxruntime's time, 1.09-1.15 with this
// (docs/performance.md, "Intel Xeon vs Zen 5"). Only when the whole transformed kernel is larger than
// prefetched_kernel: a smaller one stays in L2 from one block of tiles to the next (64 channels: 256 KB). Only with
// 64-byte vectors (AVX-512: where it was measured; on x86-64-v3 it spilled one more value of point_products<double>,
// a frame of 560 B): the other levels compile the products as before (kernel_prefetch).
constexpr int64_t prefetched_kernel = 512 * 1024;
constexpr bool kernel_prefetch = tiles::prefetch_ahead && tiles::vector_bytes == 64;

template <class T>
struct kernel_ahead : tiles::panel_rows<T> {
    const T* a;  // u_ξ from its block of channels on ([kc][M])
    int64_t m;
    bool on;     // (the transformed kernel is larger than prefetched_kernel)

    // (block asks next(u + NP, NP, ...) of the tile at panel u and row tile `part`: u + NP == NP for the first panels)
    tiles::ahead next(int u, int np, int64_t, int64_t part, int64_t) const {
        if (!tiles::prefetch_ahead || !on || u != np) {
            return {};
        }
        const int64_t at = part * tiles::row_block + panel_width<T>;  // (an address only: it may lie past u's end)
        return {reinterpret_cast<uintptr_t>(a) + uintptr_t(at) * sizeof(T), (m * int64_t(sizeof(T))) << 16};
    }
};

// Whether the products of a transformed kernel larger than prefetched_kernel run on tiles of narrow_rows rows by two
// panels (narrow_block) instead of tiles::block's: with 32-byte vectors (x86-64-v3: 16 registers, tiles::block's
// tiles 6 rows by one panel, without kernel_ahead's prefetch). u_ξ's columns are read where they lie, a line a
// layer's M floats from the last at each k; 3 rows by two panels read half as many of them per multiply-add, and
// prefetch the next ones (kernel_ahead). On a Zen 3, with the transformed tiles' rows one run apart (above),
// ResNet-18 took 0.90 of its time at batch 1, ResNet-34 0.91 (docs/performance.md, "Winograd on AVX2").
constexpr bool narrow_tiles = tiles::vector_bytes == 32;
constexpr int narrow_rows = 3;

// The channels of one k block of the narrow tiles' products: all of them while a tile's sweep of v's two panels
// (kc rows of 2 · P elements) is at most narrow_sweep bytes, else equal blocks of at most half that. Every row tile
// of a panel pair sweeps the same rows of v again, and u's columns are read a line per k beside them: with
// ResNet-18's 256 channels one sweep was 32 KB, all of a Zen 3's L1. In a test program of conv_winograd alone (Zen 3,
// x86-64-v3, in turn with the old code, load 13): 256 channels at 14 × 14 0.93-0.94 of the time at batch 1 and 8,
// 512 at 14 × 14 0.76-0.81; 128 at 28 × 28 (16 KB) 1.00-1.06 with blocks of 64, so it keeps its one block.
constexpr int64_t narrow_sweep = 16 * 1024;

// Whether point_products runs on the narrow tiles: a transformed kernel of `channels` × m larger than prefetched_kernel.
template <class T>
constexpr bool narrow_products(int64_t channels, int64_t m) {
    return narrow_tiles && 16 * channels * m * int64_t(sizeof(T)) > prefetched_kernel;
}

template <class T>
constexpr int64_t narrow_step(int64_t channels) {
    constexpr int64_t row = 2 * panel_width<T> * int64_t(sizeof(T)), most = narrow_sweep / 2 / row;
    if (channels * row <= narrow_sweep) {
        return channels;
    }
    const int64_t blocks = (channels + most - 1) / most;
    return (channels + blocks - 1) / blocks;
}

// The last panel of narrow_block when their count is odd (its `cols` columns at c), rows [0, whole): tiles of
// narrow_rows rows by one panel. (Out of line: in narrow_block, its tile made the frame 528 B.)
template <class T>
KS_OWN_FRAME void narrow_panel(int64_t whole, int64_t kc, const tiles::row_tiles<T>& a, const tiles::panel_rows<T>& b,
                               T* c, int64_t c_rs, int cols, bool load_c) {
    constexpr int R = narrow_rows;
    for (int64_t i = 0; i < whole; i += R) {
        tiles::tile<T, R, 1, false>(kc, a, a.data + i, b, c + i * c_rs, c_rs, cols, load_c);
    }
}

// The rows [whole, rows) of narrow_block (1 or 2): tiles::rest_rows' tiles of that many rows. (Out of line: in
// narrow_block they made its frame 528 B.)
template <class T>
KS_OWN_FRAME void narrow_rest(int64_t rows, int64_t whole, int64_t kc, const tiles::row_tiles<T>& a,
                              const tiles::panel_rows<T>& b, int panels, T* c, int64_t c_rs, int64_t count,
                              bool load_c) {
    tiles::rest_rows<T, narrow_rows - 1, false>(static_cast<int>(rows - whole), kc, a, a.data + whole, b, panels,
                                                c + whole * c_rs, c_rs, count, load_c, {}, whole);
}

// point_products' block on narrow tiles: rows x count of c (rows c_rs apart) (+)= a [rows × kc] · b, tiles of
// narrow_rows rows by two panels (the last panel alone when their count is odd: narrow_panel), the rows left (1 or
// 2) by narrow_rest; the tiles of the first panels prefetch u_ξ's next columns (kernel_ahead).
template <class T>
KS_OWN_FRAME void narrow_block(int64_t rows, int64_t kc, const tiles::row_tiles<T>& a, const kernel_ahead<T>& b,
                               int panels, T* c, int64_t c_rs, int64_t count, bool load_c) {
    constexpr int R = narrow_rows, NP = 2, P = panel_width<T>;
    const int64_t whole = rows - rows % R;
    for (int u = 0; u + NP <= panels; u += NP) {
        const int64_t left = count - int64_t(u) * P;
        const int w = static_cast<int>(left < NP * P ? left : NP * P);
        for (int64_t i = 0; i < whole; i += R) {
            const tiles::ahead pf = b.on && u == 0 ? tiles::ahead{reinterpret_cast<uintptr_t>(a.data + i + P),
                                                                  (b.m * int64_t(sizeof(T))) << 16}
                                                   : tiles::ahead{};
            tiles::tile<T, R, NP, false>(kc, a, a.data + i, b.from(u), c + i * c_rs + u * P, c_rs, w, load_c, {}, i,
                                         u * P, pf);
        }
    }
    if (panels % NP != 0) {
        const int u = panels - 1;
        narrow_panel<T>(whole, kc, a, b.from(u), c + u * P, c_rs, static_cast<int>(count - int64_t(u) * P), load_c);
    }
    if (whole < rows) {
        narrow_rest<T>(rows, whole, kc, a, b, panels, c, c_rs, count, load_c);
    }
}

// The 16 products of a block of `count` tiles, prod_ξ [M × tiles] = u_ξ [M × C] · v_ξ [C × tiles], by the register
// tiles, one ξ and block of kc channels from k0 on at a time (tiles::block in a function of its own, flatten: the
// tiles inlined there, where the strides of the transformed kernel and image runs are constants; inlined into
// conv_winograd's loops, they filled a frame of 0.55-0.7 KB on AVX-512).
template <class T>
__attribute__((flatten)) KS_OWN_FRAME void point_products(int64_t rows, int64_t m, int64_t channels, int64_t k0,
                                                          int64_t kc, const T* u, const T* v, int panels, int64_t count,
                                                          T* prod) {
    constexpr int P = panel_width<T>, MR = tiles::row_block;
    constexpr int64_t RS = row_stride<T>;
    const tiles::row_tiles<T> a{u + k0 * m, 1, m, MR};
    const tiles::panel_rows<T> runs{v + k0 * run_stride<T>, run_stride<T>, P};
    if constexpr (narrow_tiles) {
        if (narrow_products<T>(channels, m)) {
            narrow_block<T>(rows, kc, a, kernel_ahead<T>{runs, a.data, m, true}, panels, prod, RS, count, k0 > 0);
            return;
        }
    }
    if constexpr (kernel_prefetch) {
        const kernel_ahead<T> b{runs, a.data, m, 16 * channels * m * int64_t(sizeof(T)) > prefetched_kernel};
        tiles::block<T, false, MR, tiles::never_affine>(rows, kc, a, b, panels, prod, RS, count, k0 > 0,
                                                        k0 + kc >= channels, 0, epilogue<T>{});
    } else {
        tiles::block<T, false, MR, tiles::never_affine>(rows, kc, a, runs, panels, prod, RS, count, k0 > 0,
                                                        k0 + kc >= channels, 0, epilogue<T>{});
    }
}

// The 16 products of a block of `count` tiles (point_products for each ξ and block of channels), for `rows` output
// channels of the M (u's row stride) from u on.
template <class T>
inline void products(int64_t rows, int64_t m, int64_t channels, const T* u, const T* v, int64_t count, T* prod) {
    constexpr int64_t RUN = run_stride<T>;
    const int64_t step = narrow_products<T>(channels, m) ? narrow_step<T>(channels) : tiles::k_step(channels);
    const int panels = static_cast<int>((count + panel_width<T> - 1) / panel_width<T>);
    for (int xi = 0; xi < 16; ++xi) {
        for (int64_t k0 = 0; k0 < channels; k0 += step) {
            const int64_t kc = channels - k0 < step ? channels - k0 : step;
            point_products<T>(rows, m, channels, k0, kc, u + xi * channels * m, v + xi * point_stride<T>(channels),
                              panels, count, prod + xi * RUN);
        }
    }
}

// One image's output channels [m0, m0 + mc) y [mc][oh][ow] computed directly, window by window (the epilogue at
// rows m0...), with each 3×3 kernel recovered from
// its transform (g = L u Lᵀ with L = [1 0 0 0; 0 1 -1 0; 0 0 0 1], a left inverse of G: rows 0, 1 - 2 and 3
// of u). The path for an image whose Winograd result had an infinite or NaN value: an infinite input (whose
// transforms subtract it from itself) or one near the largest float (whose transforms overflow). Slow (plain
// loops), and as IEEE arithmetic has it: the same infinities as a direct convolution.
template <class T>
__attribute__((noinline)) void direct_image(const conv_shape& s, int64_t m0, int64_t mc, const T* x, const T* u,
                                            int64_t image, T* y, const epilogue<T>& epi) {
    const int64_t channels = s.channels, m = s.out_channels, h = s.in[1], w = s.in[2];
    const int64_t oh = s.out[1], ow = s.out[2], plane = channels * m;
    for (int64_t q = 0; q < mc * oh * ow; ++q) {
        y[q] = T(0);
    }
    for (int64_t o = 0; o < mc; ++o) {
        for (int64_t c = 0; c < channels; ++c) {
            const T* uc = u + c * m + m0 + o;
            T lu[3][4];  // L u: u's rows 0, 1 - 2 and 3
            for (int r = 0; r < 4; ++r) {
                lu[0][r] = uc[r * plane];
                lu[1][r] = uc[(4 + r) * plane] - uc[(8 + r) * plane];
                lu[2][r] = uc[(12 + r) * plane];
            }
            T g[3][3];  // (L u) Lᵀ
            for (int k = 0; k < 3; ++k) {
                g[k][0] = lu[k][0];
                g[k][1] = lu[k][1] - lu[k][2];
                g[k][2] = lu[k][3];
            }
            const T* xc = x + c * h * w;
            T* yo = y + o * oh * ow;
            for (int64_t r = 0; r < oh; ++r) {
                for (int64_t q = 0; q < ow; ++q) {
                    T acc = yo[r * ow + q];
                    for (int a = 0; a < 3; ++a) {
                        const int64_t sr = r + a - s.pad[1];
                        for (int bb = 0; bb < 3; ++bb) {
                            const int64_t sq = q + bb - s.pad[2];
                            if (sr >= 0 && sr < h && sq >= 0 && sq < w) {
                                acc += xc[sr * w + sq] * g[a][bb];
                            }
                        }
                    }
                    yo[r * ow + q] = acc;
                }
            }
        }
    }
    epi.group(image, m0)(0, 0, y, oh * ow, 1, mc, oh * ow);
}

}  // namespace winograd

// u [16][C][M] = G g Gᵀ for every kernel g = w[m][c] [3×3] of w [M][C][3][3]: element (ξ, c, m) at
// u[(ξ·C + c)·M + m], ξ = 4·row + column of the transformed 4×4 kernel.
template <class T>
void winograd_kernel(int64_t out_channels, int64_t channels, const T* w, T* u) {
    const int64_t plane = channels * out_channels;
    for (int64_t c = 0; c < channels; ++c) {
        T* uc = u + c * out_channels;
        for (int64_t m = 0; m < out_channels; ++m) {
            const T* g = w + (m * channels + c) * 9;
            T t[4][3];  // G g
            for (int k = 0; k < 3; ++k) {
                t[0][k] = g[k];
                t[1][k] = (g[k] + g[3 + k] + g[6 + k]) * T(0.5);
                t[2][k] = (g[k] - g[3 + k] + g[6 + k]) * T(0.5);
                t[3][k] = g[6 + k];
            }
            for (int r = 0; r < 4; ++r) {  // (G g) Gᵀ
                uc[(4 * r + 0) * plane + m] = t[r][0];
                uc[(4 * r + 1) * plane + m] = (t[r][0] + t[r][1] + t[r][2]) * T(0.5);
                uc[(4 * r + 2) * plane + m] = (t[r][0] - t[r][1] + t[r][2]) * T(0.5);
                uc[(4 * r + 3) * plane + m] = t[r][2];
            }
        }
    }
}

// The scratch elements conv_winograd uses: the split image, then a block of transformed tiles and their
// products.
template <class T>
constexpr int64_t winograd_scratch(const conv_shape& s) {
    return convs::aligned(s.channels * winograd::padded_rows(s) * winograd::padded_row(s) + winograd::lanes<T>) +
           16 * winograd::point_stride<T>(s.channels) + s.out_channels * winograd::row_stride<T>;
}

namespace winograd {

// conv_winograd's output channels [first, first + mc) (RANGE false: all, first and mc constants). Each image is split
// when its first tiles are transformed (a block's images one after another: the split image is the last one's), and
// computed again directly (direct_image) once its last tiles are stored if one of its values was infinite or NaN.
template <class T, bool RANGE>
__attribute__((always_inline)) inline void channels(const conv_shape& s, int64_t images, const T* x, const T* u, T* y,
                                                    T* scratch, const epilogue<T>& epi, int64_t first, int64_t mc) {
    constexpr int64_t TB = winograd::tile_block<T>;
    if constexpr (!RANGE) {
        first = 0;
        mc = s.out_channels;
    }
    x = tiles::opaque(x);
    u = tiles::opaque(u);
    const int64_t channels = s.channels, m = s.out_channels;
    const int64_t tiles_all = (s.out[1] + 1) / 2 * ((s.out[2] + 1) / 2);
    T* image = scratch;
    T* v = image + convs::aligned(channels * winograd::padded_rows(s) * winograd::padded_row(s) + winograd::lanes<T>);
    T* prod = v + 16 * winograd::point_stride<T>(channels);
    const int64_t plane = s.out[1] * s.out[2], total = images * tiles_all;
    bool bad = false;  // (of the image whose tiles are being computed)
    for (int64_t b0 = 0; b0 < total; b0 += TB) {  // blocks of TB tiles of all images, an image's last with the next's
        const int64_t count = total - b0 < TB ? total - b0 : TB;
        const int64_t end = (count + panel_width<T> - 1) / panel_width<T> * panel_width<T>;
        for_images(tiles_all, b0, count, [&](int64_t n, int64_t t0, int64_t part, int64_t col) {
            if (t0 == 0) {
                winograd::split_image<T>(s, x + n * channels * s.in_plane(), image);
            }
            winograd::input_tiles<T>(s, image, t0, part, v, col, col + part < count ? col + part : end);
        });
        winograd::products<T>(mc, m, channels, u + first, v, count, prod);
        for_images(tiles_all, b0, count, [&](int64_t n, int64_t t0, int64_t part, int64_t col) {
            T* yn = y + (n * m + first) * plane;
            bad |= winograd::output_tiles<T, RANGE>(s, first, mc, prod + col, t0, part, n, yn, epi);
            if (t0 + part == tiles_all) {  // the image's last tiles
                if (bad) {  // an infinite or NaN value: the image again, directly (IEEE's infinities, no overflow)
                    winograd::direct_image<T>(s, first, mc, x + n * channels * s.in_plane(), u, n, yn, epi);
                }
                bad = false;
            }
        });
    }
}

}  // namespace winograd

// y [images, M, oh, ow] = epi(conv(x [images, C, h, w], kernel)) for a 2-d 3×3 convolution with stride 1,
// dilation 1 and one group, its kernel given transformed (u [16][C][M], winograd_kernel), the epilogue at
// (image, output channel m, flat position q).
// (flatten: the tiles inlined here whatever else uses the same instantiation; a gradient's products share it,
// and GCC then called it out of line, 13% slower (measured again: 10-15%): the strides of the transformed kernel
// and image runs are constants only here)
template <class T>
__attribute__((flatten)) void conv_winograd(const conv_shape& s, int64_t images, const T* x, const T* u, T* y,
                                            T* scratch, const epilogue<T>& epi = {}) {
    winograd::channels<T, false>(s, images, x, u, y, scratch, epi, 0, s.out_channels);
}

// The same for output channels [first, first + count) alone (the part of the layer one thread computes:
// ks/parts.h), the rest of y untouched.
template <class T>
__attribute__((flatten)) void conv_winograd_range(const conv_shape& s, int64_t images, const T* x, const T* u, T* y,
                                                  T* scratch, const epilogue<T>& epi, int64_t first, int64_t count) {
    winograd::channels<T, true>(s, images, x, u, y, scratch, epi, first, count);
}

// ---- Depthwise convolutions ------------------------------------------------------------------------------
// A convolution with one group per input channel (MobileNet's 3×3 layers, a Conv1d with groups = channels)
// is, per output channel m (input channel m / (M / C)), a sum over its taps of the channel's plane shifted and
// scaled: no products between channels, so the register tiles would run rows of one kernel row against
// panels of a few taps. Here each input channel is copied once into scratch, zero-padded and split by stride
// phase along rows and columns: padded element (row y, column x) of depth plane z goes to phase plane
// (y mod stride_h, x mod stride_w) of z, at row y / stride_h and place x / stride_w. The inputs of consecutive
// outputs are then consecutive for any stride and dilation: tap (kd, kh, kw) of output (od, oh, ow) reads
// phase plane (kh·dil_h mod stride_h, kw·dil_w mod stride_w) of depth plane od·stride_d + kd·dil_d, at row
// oh + kh·dil_h / stride_h and place ow + kw·dil_w / stride_w. A run of U vectors of outputs adds each tap's
// weight times U vectors of the copy; the epilogue runs over each output row (each plane, flat) once stored.
// The select_backend pass picks this for such convolutions (prims/convolve.py: depthwise_applies).

namespace depthwise {

constexpr int run_vectors = 4;  // U: the vectors of a run

// The places of a phase row (an output row and the last tap's reach past it) and the rows of a phase plane.
constexpr int64_t places(const conv_shape& s) {
    return s.out[2] + tiles::index_div((s.kernel[2] - 1) * s.dilation[2], s.stride[2]);
}
constexpr int64_t rows(const conv_shape& s) {
    return s.out[1] + tiles::index_div((s.kernel[1] - 1) * s.dilation[1], s.stride[1]);
}
// The elements of a depth plane's phase planes.
constexpr int64_t depth_plane(const conv_shape& s) {
    return s.stride[1] * s.stride[2] * rows(s) * places(s);
}

// Whether a depth plane's outputs run flat: computed as one run over its phase rows (as if they were one long
// row), the places past each output row computed too and dropped, and the sums moved together before the
// epilogue. Rows that end in a partial vector or are shorter than a run (56, 14 or 7 wide) then fill whole
// runs; rows of whole runs and vectors (112 wide on AVX-512) run row by row, which needs no second pass
// (measured on AVX-512, one thread: 384 channels at 14 × 14 145 -> 75 us flat; 32 channels at 112 × 112 10%
// slower flat than row by row).
template <class T>
constexpr bool flat(const conv_shape& s) {
    constexpr int64_t L = tiles::simd<T>::lanes;
    return s.out[2] % L != 0 || s.out[2] < run_vectors * L;
}

// The elements of a channel's copy and a run's room after it, and of a flat plane's sums.
template <class T>
constexpr int64_t copy_size(const conv_shape& s) {
    return convs::aligned(convs::extent(s, 0) * depth_plane(s) + run_vectors * tiles::simd<T>::lanes);
}
template <class T>
constexpr int64_t sums_size(const conv_shape& s) {
    return flat<T>(s) ? convs::aligned(rows(s) * places(s) + run_vectors * tiles::simd<T>::lanes) : 0;
}

// One input channel x [in...] copied into its phase planes at dst: only the places that hold the channel's
// elements are written; the others (where the windows read padding) are the zeros ks::conv_depthwise writes
// once per call, the same for every channel.
// Places [i0, i1) of column phase r hold columns r + i·sw in [pad, pad + in) of a padded row (clamped to the
// row's places).
inline void phase_span(const conv_shape& s, int64_t r, int64_t& i0, int64_t& i1) {
    const int64_t sw = s.stride[2], pw = places(s), first = s.pad[2] - r, last = s.pad[2] + s.in[2] - r;
    const int64_t q0 = first > 0 ? tiles::index_div(first + sw - 1, sw) : 0;
    const int64_t q1 = last > 0 ? tiles::index_div(last + sw - 1, sw) : 0;
    i0 = q0 < pw ? q0 : pw;
    i1 = q1 < pw ? q1 : pw;
}

#if defined(__AVX512F__)
using convs::lanes_in;  // (convs: ks::conv_pointwise's untranspose uses it too)

// Row y's places [a0, a1) of phase 0 (and [b0, b1) of phase 1 at odd, when stride 2) from src, 16 places a step:
// masked loads of the 16 (stride 2: 32) elements they read, of those inside the row [0, n), split into the phases
// by vpermt2ps, masked stores. A row of 7 or 14 is then one step, not 7 or 14 scalar moves (the loops below).
template <int S>
inline void copy_row_avx512(const float* src, int64_t at, int64_t n, float* out, float* odd, int64_t a0,
                            int64_t a1, int64_t b0, int64_t b1) {
    const int64_t lo = S == 1 || a0 < b0 ? a0 : b0, hi = S == 1 || a1 > b1 ? a1 : b1;
    const __m512i even_lanes = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_lanes = _mm512_add_epi32(even_lanes, _mm512_set1_epi32(1));
    for (int64_t i = lo; i < hi; i += 16) {
        const int64_t p = at + S * i;  // (the row's element that place i of phase 0 reads)
        const float* from = src + p;
        const __m512 first = _mm512_maskz_loadu_ps(lanes_in(0, n, p), from);
        if constexpr (S == 1) {
            _mm512_mask_storeu_ps(out + i, lanes_in(a0, a1, i), first);
        } else {
            const __m512 second = _mm512_maskz_loadu_ps(lanes_in(0, n, p + 16), from + 16);
            _mm512_mask_storeu_ps(out + i, lanes_in(a0, a1, i), _mm512_permutex2var_ps(first, even_lanes, second));
            _mm512_mask_storeu_ps(odd + i, lanes_in(b0, b1, i), _mm512_permutex2var_ps(first, odd_lanes, second));
        }
    }
}

// copy_channel for floats with a column stride of 1 or 2: the shape's sizes read once into locals (the masked
// stores may alias anything, so GCC re-read and re-divided them for every row), each row by copy_row_avx512.
template <int S>
void copy_channel_avx512(const conv_shape& s, const float* x, float* dst, int64_t a0, int64_t a1, int64_t b0,
                         int64_t b1) {
    const int64_t sh = s.stride[1], pw = places(s), rh = rows(s), plane = depth_plane(s), odd = rh * pw;
    const int64_t e0 = convs::extent(s, 0), e1 = convs::extent(s, 1), at = -s.pad[2];
    const int64_t p0 = s.pad[0], p1 = s.pad[1], in0 = s.in[0], in1 = s.in[1], in2 = s.in[2];
    for (int64_t z = p0; z < e0 && z - p0 < in0; ++z) {
        int64_t phase = p1 % sh, row = p1 / sh;  // (of padded row y: y = row · sh + phase)
        const float* src = x + (z - p0) * in1 * in2;
        for (int64_t y = p1; y < e1 && y - p1 < in1 && row < rh; ++y, src += in2) {
            float* out = dst + z * plane + (phase * S * rh + row) * pw;
            copy_row_avx512<S>(src, at, in2, out, out + odd, a0, a1, b0, b1);
            if (++phase == sh) {
                phase = 0;
                ++row;
            }
        }
    }
}
#endif

// Padded row y of the channel, src, into its places of every column phase (phase r's at out + r · rh · pw); a0..b1:
// the spans of phases 0 and 1 (phase_span). (Out of line: the loops' bounds, hoisted out of copy_channel's loop
// over the rows, filled a frame of 0.6-0.8 KB.)
template <class T>
KS_OWN_FRAME void copy_row(const conv_shape& s, const T* src, T* out, int64_t a0, int64_t a1, int64_t b0,
                                        int64_t b1) {
    const int64_t sw = s.stride[2], at = -s.pad[2];  // (place i of phase r: src[at + r + i · sw])
    if (sw == 1) {
        for (int64_t i = a0; i < a1; ++i) {
            out[i] = src[at + i];
        }
    } else if (sw == 2) {  // both phases in one loop: GCC vectorizes the pair of strided reads
        convs::pair_phases(src, at, out, out + rows(s) * places(s), a0, a1, b0, b1);
    } else {
        for (int64_t r = 0; r < sw; ++r) {
            int64_t i0, i1;
            phase_span(s, r, i0, i1);
            for (int64_t i = i0; i < i1; ++i) {
                out[r * rows(s) * places(s) + i] = src[at + r + i * sw];
            }
        }
    }
}

template <class T>
void copy_channel(const conv_shape& s, const T* x, T* dst) {
    const int64_t sh = s.stride[1], sw = s.stride[2], pw = places(s), rh = rows(s);
    const int64_t e0 = convs::extent(s, 0), e1 = convs::extent(s, 1);
    int64_t a0, a1, b0, b1;  // (stride 2: the spans of phases 0 and 1, and the places both hold)
    phase_span(s, 0, a0, a1);
    phase_span(s, 1, b0, b1);
#if defined(__AVX512F__)
    if constexpr (sizeof(T) == 4) {
        if (sw <= 2) {
            const float* from = reinterpret_cast<const float*>(x);
            float* to = reinterpret_cast<float*>(dst);
            return sw == 1 ? copy_channel_avx512<1>(s, from, to, a0, a1, a0, a1)
                           : copy_channel_avx512<2>(s, from, to, a0, a1, b0, b1);
        }
    }
#endif
    for (int64_t z = s.pad[0]; z < e0 && z - s.pad[0] < s.in[0]; ++z) {
        int64_t row = tiles::index_div(s.pad[1], sh), phase = s.pad[1] - row * sh;  // (padded row y = row · sh + phase)
        for (int64_t y = s.pad[1]; y < e1 && y - s.pad[1] < s.in[1] && row < rh; ++y) {
            const T* src = x + ((z - s.pad[0]) * s.in[1] + y - s.pad[1]) * s.in[2];
            copy_row<T>(s, src, dst + z * depth_plane(s) + (phase * sw * rh + row) * pw, a0, a1, b0, b1);
            if (++phase == sh) {
                phase = 0;
                ++row;
            }
        }
    }
}

// Where each tap reads, from an output's place in the copy.
inline void tap_offsets(const conv_shape& s, int64_t* out) {
    const int64_t sh = s.stride[1], sw = s.stride[2], pw = places(s), rh = rows(s);
    int64_t t = 0;
    for (int64_t kd = 0; kd < s.kernel[0]; ++kd) {
        for (int64_t kh = 0; kh < s.kernel[1]; ++kh) {
            for (int64_t kw = 0; kw < s.kernel[2]; ++kw, ++t) {
                const int64_t y = kh * s.dilation[1], x = kw * s.dilation[2];
                const int64_t yq = tiles::index_div(y, sh), xq = tiles::index_div(x, sw);
                out[t] = kd * s.dilation[0] * depth_plane(s) + (((y - yq * sh) * sw + x - xq * sw) * rh + yq) * pw + xq;
            }
        }
    }
}

// U vectors of sums from the copy: each tap's weight w[t] times U vectors at base + offsets[t].
template <class T, int U>
inline void sums(const T* base, const int64_t* offsets, int64_t taps, const T* w, T* out, const affine<T>& fin) {
    using V = typename tiles::simd<T>::v;
    constexpr int L = tiles::simd<T>::lanes;
    V acc[U];
    for (int u = 0; u < U; ++u) {
        acc[u] = tiles::splat<T>(T(0));
    }
    for (int64_t t = 0; t < taps; ++t) {
        const V wv = tiles::splat<T>(w[t]);
        const T* p = base + offsets[t];
        for (int u = 0; u < U; ++u) {
            acc[u] += wv * tiles::load<T>(p + u * L);
        }
    }
    for (int u = 0; u < U; ++u) {
        if (fin) {  // (the channel's bias at fin.bias[0])
            acc[u] = tiles::finish<T>(acc[u], fin, fin.bias != nullptr ? fin.bias[0] : T(0));
        }
        std::memcpy(out + u * L, &acc[u], sizeof acc[u]);
    }
}


// Small planes across channels: 16 channels at a time (8 on AVX2: AL below), each vector one position of the 16
// planes (the planes transposed into a zero-padded scratch), each tap one weight vector; the sums transposed back. A
// plane of 7 × 7 or 14 × 14 outputs then costs no copy, run or epilogue call of its own (measured on AVX-512, one
// thread, bias + ReLU6: docs/performance.md "Depthwise convolutions"). Taps in the same order as the sums above: the
// same results, bit for bit.
constexpr int64_t across_positions = 3136;   // (the most output positions a plane may have to be computed whole)
constexpr int64_t across_band = 1792;        // (larger planes: the output positions of a band of rows, about)

// The output rows computed at a time: the whole plane when it is small, else bands of about across_band
// positions, whose padded input rows (16 planes of them, transposed) and sums stay in L2: 16 rows of 112, 250 KB
// (whole 112 × 112 planes, 1.6 MB transposed, did not, and the copy was 10% faster there; in bands of 16 rows
// they are 10-15% faster than the copy at batch 1 and 25-40% at batch 8, in bands of 8 rows a little slower).
constexpr int64_t band_rows(const conv_shape& s) {
    return s.out[1] * s.out[2] <= across_positions ? s.out[1]
                                                   : (s.out[2] < across_band ? tiles::index_div(across_band, s.out[2]) : 1);
}
// The padded input rows that `rows` output rows read.
constexpr int64_t band_extent(const conv_shape& s, int64_t rows) {
    return (rows - 1) * s.stride[1] + (s.kernel[1] - 1) * s.dilation[1] + 1;
}

// Whether a convolution's shape is computed across channels, on any level: 2-D, one output channel per input
// channel, a small output plane or (in bands) at least 8 channels.
constexpr bool across_fits(const conv_shape& s) {
    return s.kernel[0] == 1 && s.in[0] == 1 && s.out[0] == 1 && s.out_channels == s.channels &&
           (s.out[1] * s.out[2] <= across_positions || s.channels >= 8);
}

// Whether a convolution is computed across channels: float on AVX-512 or AVX2 and a shape that fits.
template <class T>
constexpr bool across(const conv_shape& s) {
#if defined(__AVX512F__) || defined(__AVX2__)
    return std::is_same_v<T, float> && across_fits(s);
#else
    return s.out[0] < 0;  // (never; constexpr and s used on every level)
#endif
}

// The elements of scratch `across` uses: a band's padded planes, its sums and the weights, 16 lanes each.
constexpr int64_t across_size(const conv_shape& s) {
    return 16 * (band_extent(s, band_rows(s)) * convs::extent(s, 2) + band_rows(s) * s.out[2] + s.taps() + 1);
}

#if defined(__AVX512F__) || defined(__AVX2__)
// The vectors of the `across` path: AL channels of one position each, 16 on AVX-512, 8 on AVX2 (x86-64-v3, 16 ymm
// registers: the same code, half the channels per pass; before, AVX2 ran every depthwise layer by the copy below,
// 1.1-4.6 times onnxruntime's time on the MobileNets' 7 × 7 to 28 × 28 planes on an AMD Zen 3; across, 0.3-0.7 of
// the copy's time at 7 × 7 to 112 × 112: docs/performance.md). The scratch is planned for 16 lanes on every level
// (across_size), more than 8 need.
#if defined(__AVX512F__)
constexpr int AL = 16;
using lanes_v = __m512;
using lanes_m = __mmask16;
inline lanes_m lanes_mask(int64_t lo, int64_t hi, int64_t base) { return convs::lanes_in(lo, hi, base); }
inline lanes_v zeros() { return _mm512_setzero_ps(); }
inline lanes_v load_lanes(const float* p) { return _mm512_load_ps(p); }
inline void store_lanes(float* p, lanes_v v) { _mm512_store_ps(p, v); }
inline lanes_v load_masked(lanes_m m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline void store_masked(float* p, lanes_m m, lanes_v v) { _mm512_mask_storeu_ps(p, m, v); }
// The same where all lanes may be in m (whole): masked all the same (cheap on AVX-512).
inline lanes_v load_part(lanes_m m, const float* p, bool) { return load_masked(m, p); }
inline void store_part(float* p, lanes_m m, lanes_v v, bool) { store_masked(p, m, v); }
inline lanes_v fmadd(lanes_v a, lanes_v b, lanes_v c) { return _mm512_fmadd_ps(a, b, c); }
inline void transpose_lanes(lanes_v* r) { convs::transpose16(r); }
#else
constexpr int AL = 8;
using lanes_v = __m256;
using lanes_m = __m256i;
// The lanes l whose place base + l lies in [lo, hi), as a mask (all bits of a lane set).
inline lanes_m lanes_mask(int64_t lo, int64_t hi, int64_t base) {
    const int64_t a = lo - base < 0 ? 0 : (lo - base > AL ? AL : lo - base);
    const int64_t b = hi - base < 0 ? 0 : (hi - base > AL ? AL : hi - base);
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(a)), l),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(int(b)), l));
}
inline lanes_v zeros() { return _mm256_setzero_ps(); }
inline lanes_v load_lanes(const float* p) { return _mm256_load_ps(p); }
inline void store_lanes(float* p, lanes_v v) { _mm256_store_ps(p, v); }
inline lanes_v load_masked(lanes_m m, const float* p) { return _mm256_maskload_ps(p, m); }
inline void store_masked(float* p, lanes_m m, lanes_v v) { _mm256_maskstore_ps(p, m, v); }
// The same, unmasked when all lanes are in m (whole): a masked store (vmaskmovps) is slow on AMD's cores (perf of
// mobilenet_v2 on a Zen 3: across_out, its stores all masked, as much time as the sums).
inline lanes_v load_part(lanes_m m, const float* p, bool whole) {
    return whole ? _mm256_loadu_ps(p) : load_masked(m, p);
}
inline void store_part(float* p, lanes_m m, lanes_v v, bool whole) {
    if (whole) {
        _mm256_storeu_ps(p, v);
    } else {
        store_masked(p, m, v);
    }
}
inline lanes_v fmadd(lanes_v a, lanes_v b, lanes_v c) { return _mm256_fmadd_ps(a, b, c); }
inline void transpose_lanes(lanes_v* r) { convs::transpose8(r); }
#endif

// The padded rows j < e1 of a band whose image row (top + j) lies outside the image, zeroed (AL · e2 elements each).
inline void zero_padding_rows(float* planes, int64_t top, int64_t e1, int64_t rows, int64_t e2) {
    for (int64_t j = 0; j < e1; ++j) {
        if (top + j < 0 || top + j >= rows) {
            for (int64_t i = 0; i < AL * e2; ++i) {
                planes[j * e2 * AL + i] = 0.0f;
            }
        }
    }
}

// Channels [c0, c0 + nc) of one image (nc ≤ AL) into the padded planes of a band, padded rows [y0, y0 + e1):
// position (r, c) of the image at ((r + pad_h - y0) · E2 + c + pad_w) · AL, lane = channel. In bands, the band's
// rows of padding are zeroed (a row may have held the image in the band before); the columns of padding are the
// zeros across_channels wrote once. AL positions a step (they may span rows: a row of 7 or 14 fills no vector),
// transposed in registers, then stored one place apart, skipping E2 - W places at the end of each row. The
// shape's sizes are read once into locals (the stores may alias anything: GCC re-read and re-divided them for
// every position, which was half of this function's time).
__attribute__((noinline)) inline void across_in(const conv_shape& s, const float* x, int64_t nc, float* planes,
                                                int64_t y0, int64_t e1) {
    const int64_t in1 = s.in[1], in2 = s.in[2], n = in1 * in2, e2 = convs::extent(s, 2), pad = s.pad[2];
    const int64_t top = y0 - s.pad[1];  // (image row of band row 0)
    const int64_t r0 = top > 0 ? top : 0, r1 = top + e1 < in1 ? top + e1 : in1;
    const int64_t cols = in2 + pad <= e2 ? in2 : e2 - pad;  // (the columns the windows read)
    if (band_rows(s) < s.out[1]) {  // (a whole plane: zeroed once, never written)
        zero_padding_rows(planes, top, e1, in1, e2);
    }
    lanes_v r[AL];
    const int64_t q1 = r1 * in2;
    for (int64_t q = r0 * in2; q < q1; q += AL) {
        const lanes_m m = lanes_mask(0, q1, q);
        const bool whole = q + AL <= q1;
        for (int64_t c = 0; c < AL; ++c) {
            r[c] = c < nc ? load_part(m, x + c * n + q, whole) : zeros();
        }
        transpose_lanes(r);
        const int64_t row = q / in2, last = q1 - q < AL ? q1 - q : AL;
        int64_t col = q - row * in2;
        float* at = planes + ((row - top) * e2 + col + pad) * AL;
#pragma GCC unroll 16
        for (int k = 0; k < AL; ++k) {  // (unrolled: r stays in registers)
            if (k < last && col < cols) {
                store_lanes(at, r[k]);
            }
            at += AL;
            if (++col == in2) {
                col = 0;
                at += (e2 - in2) * AL;
            }
        }
    }
}

// U vectors of sums stored at out (AL elements apart), the affine epilogue applied (bias: the AL channels').
template <int U>
__attribute__((always_inline)) inline void across_store(const lanes_v* acc, float* out, const affine<float>& fin,
                                                        lanes_v bias) {
    for (int u = 0; u < U; ++u) {
        tiles::simd<float>::v v = acc[u];
        if (fin) {
            v = fin.bias != nullptr ? v + tiles::simd<float>::v(bias) : v;
            const tiles::simd<float>::v lo = tiles::splat<float>(fin.lo), hi = tiles::splat<float>(fin.hi);
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
        }
        store_lanes(out + u * AL, v);
    }
}

// U output positions of a row from (oh, ow): their AL channels' sums into sums (position p at p · AL), w16 the
// taps' weight vectors (each loaded once for the U), the affine epilogue applied (bias: the AL channels').
template <int U>
inline void across_run(const conv_shape& s, const float* planes, const float* w16, float* sums, int64_t oh,
                       int64_t ow, const affine<float>& fin, lanes_v bias) {
    const int64_t e2 = convs::extent(s, 2), kh = s.kernel[1], kw = s.kernel[2], step = s.stride[2] * AL;
    const float* at = planes + (oh * s.stride[1] * e2 + ow * s.stride[2]) * AL;
    lanes_v acc[U];
    for (int u = 0; u < U; ++u) {
        acc[u] = zeros();
    }
    for (int64_t i = 0; i < kh; ++i) {
        const float* row = at + i * s.dilation[1] * e2 * AL;
        for (int64_t j = 0; j < kw; ++j) {
            const lanes_v wv = load_lanes(w16 + (i * kw + j) * AL);
            const float* p = row + j * s.dilation[2] * AL;
            for (int u = 0; u < U; ++u) {
                acc[u] = fmadd(wv, load_lanes(p + u * step), acc[u]);
            }
        }
    }
    across_store<U>(acc, sums + (oh * s.out[2] + ow) * AL, fin, bias);
}

// The same for a kernel KW wide, column stride S and dilation 1 (MobileNet's and EfficientNet's 3 × 3 and 5 × 5,
// stride 1 or 2): each vector of a kernel row loaded once for the taps of the U positions that read it, (U - 1) · S
// + KW loads a kernel row where across_run makes U · KW (and loads each tap's weights once for 8 positions, not 4).
// Each sum adds its taps in across_run's order: the same results, bit for bit.
template <int U, int KW, int S>
__attribute__((always_inline)) inline void across_reuse(const conv_shape& s, const float* planes, const float* w16,
                                                        float* sums, int64_t oh, int64_t ow, const affine<float>& fin,
                                                        lanes_v bias) {
    constexpr int loads = (U - 1) * S + KW;
    const int64_t e2 = convs::extent(s, 2), kh = s.kernel[1], down = s.dilation[1] * e2 * AL;
    const float* row = planes + (oh * s.stride[1] * e2 + ow * S) * AL;
    lanes_v acc[U];
    for (int u = 0; u < U; ++u) {
        acc[u] = zeros();
    }
    for (int64_t i = 0; i < kh; ++i, row += down) {
        lanes_v wv[KW];
        for (int j = 0; j < KW; ++j) {
            wv[j] = load_lanes(w16 + (i * KW + j) * AL);
        }
#pragma GCC unroll 32
        for (int v = 0; v < loads; ++v) {
            const lanes_v in = load_lanes(row + v * AL);
#pragma GCC unroll 8
            for (int u = 0; u < U; ++u) {  // (tap j = v - u · S of position u, when the kernel has it)
                if (v - u * S >= 0 && v - u * S < KW) {
                    acc[u] = fmadd(wv[v - u * S], in, acc[u]);
                }
            }
        }
    }
    across_store<U>(acc, sums + (oh * s.out[2] + ow) * AL, fin, bias);
}

// The taps' weight vectors of channels [0, nc) (w: [nc, taps]; the lanes past nc zero).
// (Channel by channel, the lanes past nc apart: with the AL lanes of a position as the inner loop, GCC unrolled and
// vectorized it into a frame of 712 B on AVX2.)
__attribute__((noinline)) inline void across_weights(const float* w, int64_t taps, int64_t nc, float* w16) {
    for (int64_t c = 0; c < nc; ++c) {
        for (int64_t t = 0; t < taps; ++t) {
            w16[t * AL + c] = w[c * taps + t];
        }
    }
    for (int64_t c = nc; c < AL; ++c) {
        for (int64_t t = 0; t < taps; ++t) {
            w16[t * AL + c] = 0.0f;
        }
    }
}

// A row's last 1-3 positions from ow in one run (each weight loaded once for them: rows of 7 had run 3 times 1).
inline void across_tail(const conv_shape& s, const float* planes, const float* w16, float* sums, int64_t oh,
                        int64_t ow, const affine<float>& fin, lanes_v bias) {
    const int64_t left = s.out[2] - ow;
    if (left == 3) {
        across_run<3>(s, planes, w16, sums, oh, ow, fin, bias);
    } else if (left == 2) {
        across_run<2>(s, planes, w16, sums, oh, ow, fin, bias);
    } else if (left == 1) {
        across_run<1>(s, planes, w16, sums, oh, ow, fin, bias);
    }
}

// The sums of a band of `rows` output rows by across_reuse: 8 positions of a row at a time, then 4, then the 1-3 left
// in one run (a 14 × 14 layer 5-7% faster than with across_run for the 1-3, and 2.5 KB less code).
template <int KW, int S>
__attribute__((noinline)) void across_rows(const conv_shape& s, const float* planes, const float* w16, float* sums,
                                           const affine<float>& fin, lanes_v bias, int64_t rows) {
    const int64_t width = s.out[2];
    for (int64_t oh = 0; oh < rows; ++oh) {
        int64_t ow = 0;
        for (; ow + 8 <= width; ow += 8) {
            across_reuse<8, KW, S>(s, planes, w16, sums, oh, ow, fin, bias);
        }
        if (ow + 4 <= width) {
            across_reuse<4, KW, S>(s, planes, w16, sums, oh, ow, fin, bias);
            ow += 4;
        }
        const int64_t left = width - ow;
        if (left == 3) {
            across_reuse<3, KW, S>(s, planes, w16, sums, oh, ow, fin, bias);
        } else if (left == 2) {
            across_reuse<2, KW, S>(s, planes, w16, sums, oh, ow, fin, bias);
        } else if (left == 1) {
            across_reuse<1, KW, S>(s, planes, w16, sums, oh, ow, fin, bias);
        }
    }
}

// Every output position's sums of a band of `rows` output rows: by across_rows for kernels 3 or 5 wide, column
// stride 1 or 2 and dilation 1, else across_run, 4 positions of a row at a time, then the tail (nc: the channels
// the bias has).
__attribute__((noinline)) inline void across_sums(const conv_shape& s, const float* planes, const float* w16,
                                                  float* sums, const affine<float>& fin, int64_t nc, int64_t rows) {
    const lanes_v bias = fin && fin.bias != nullptr ? load_masked(lanes_mask(0, nc, 0), fin.bias) : zeros();
    const int64_t kw = s.kernel[2], sw = s.stride[2];
    if (s.dilation[2] == 1 && (kw == 3 || kw == 5) && (sw == 1 || sw == 2)) {
        return kw == 3 ? (sw == 1 ? across_rows<3, 1>(s, planes, w16, sums, fin, bias, rows)
                                  : across_rows<3, 2>(s, planes, w16, sums, fin, bias, rows))
                       : (sw == 1 ? across_rows<5, 1>(s, planes, w16, sums, fin, bias, rows)
                                  : across_rows<5, 2>(s, planes, w16, sums, fin, bias, rows));
    }
    for (int64_t oh = 0; oh < rows; ++oh) {
        int64_t ow = 0;
        for (; ow + 4 <= s.out[2]; ow += 4) {
            across_run<4>(s, planes, w16, sums, oh, ow, fin, bias);
        }
        across_tail(s, planes, w16, sums, oh, ow, fin, bias);
    }
}

// The sums of channels [0, nc) at `positions` places back into their planes y (`plane` elements apart).
__attribute__((noinline)) inline void across_out(const float* sums, int64_t positions, int64_t plane, int64_t nc,
                                                 float* y) {
    lanes_v r[AL];
    for (int64_t p = 0; p < positions; p += AL) {
        for (int64_t k = 0; k < AL; ++k) {
            r[k] = p + k < positions ? load_lanes(sums + (p + k) * AL) : zeros();
        }
        transpose_lanes(r);
        const lanes_m m = lanes_mask(0, positions, p);
        const bool whole = p + AL <= positions;
        for (int64_t c = 0; c < nc; ++c) {
            store_part(y + c * plane + p, m, r[c], whole);
        }
    }
}
#endif

// Depth plane od of output channel m (its outputs from flat position q0 on at ym + q0), row by row from base, its
// od-th depth plane of the copy: whole runs of U vectors, then vectors; the epilogue (eg, when fin does not apply
// it) over each row. (Out of line, as flat_plane: ks::conv_depthwise's frame held both loops' values, 0.5-0.7 KB.)
template <class T>
KS_OWN_FRAME void plane_rows(const conv_shape& s, const T* base, const int64_t* offsets, const T* wm,
                                          T* ym, int64_t q0, const affine<T>& fin, const epilogue<T>& eg, int64_t m) {
    constexpr int L = tiles::simd<T>::lanes, U = run_vectors;
    const int64_t taps = s.taps(), pw = places(s), whole = s.out[2] - s.out[2] % (U * L);
    for (int64_t oh = 0; oh < s.out[1]; ++oh) {
        const T* row = base + oh * pw;
        const int64_t q = q0 + oh * s.out[2];
        for (int64_t ow = 0; ow < whole; ow += U * L) {
            sums<T, U>(row + ow, offsets, taps, wm, ym + q + ow, fin);
        }
        for (int64_t ow = whole; ow < s.out[2]; ow += L) {
            sums<T, 1>(row + ow, offsets, taps, wm, ym + q + ow, fin);
        }
        if (!fin) {
            eg(m, q, ym + q, 0, 1, 1, s.out[2]);
        }
    }
}

// The same for a flat plane (flat<T>(s)): one run over all its rows into `sums`, each output row's sums copied to
// its place from ym + q0.
template <class T>
KS_OWN_FRAME void flat_plane(const conv_shape& s, const T* base, const int64_t* offsets, const T* wm,
                                          T* ym, int64_t q0, T* sums, const affine<T>& fin, const epilogue<T>& eg,
                                          int64_t m) {
    constexpr int L = tiles::simd<T>::lanes, U = run_vectors;
    const int64_t taps = s.taps(), pw = places(s), plane = s.out[1] * s.out[2];
    const int64_t length = (s.out[1] - 1) * pw + s.out[2];  // (a flat run over a depth plane's output rows)
    for (int64_t f = 0; f < length; f += U * L) {
        depthwise::sums<T, U>(base + f, offsets, taps, wm, sums + f, fin);
    }
    for (int64_t oh = 0; oh < s.out[1]; ++oh) {  // each output row's sums, without the places past it
        std::memcpy(ym + q0 + oh * s.out[2], sums + oh * pw, sizeof(T) * s.out[2]);
    }
    if (!fin) {
        eg(m, q0, ym + q0, 0, 1, 1, plane);
    }
}

}  // namespace depthwise

// Whether a convolution is depthwise: one group per input channel (each output channel reads one).
constexpr bool is_depthwise(const conv_shape& s) {
    return s.groups == s.channels && s.groups > 0 && s.out_channels % s.groups == 0;
}

// The scratch elements ks::conv_depthwise uses: one input channel's copy, a flat plane's sums and the taps'
// offsets in the copy.
template <class T>
constexpr int64_t depthwise_scratch(const conv_shape& s) {
    const int64_t copied = depthwise::copy_size<T>(s) + depthwise::sums_size<T>(s) +
                           (s.taps() * int64_t(sizeof(int64_t)) + sizeof(T) - 1) / sizeof(T);
    return depthwise::across_fits(s) && depthwise::across_size(s) > copied
               ? depthwise::across_size(s)  // (on every instruction set level: the sizes do not depend on it)
               : copied;
}

#if defined(__AVX512F__) || defined(__AVX2__)
// One band of output rows [o0, o0 + rows) of channels [c0, c0 + nc) (at x and yc) across channels, its epilogue
// (eg, when fin does not apply it) over the band while it is in cache.
__attribute__((noinline)) inline void across_band(const conv_shape& s, const float* x, float* yc, int64_t c0,
                                                  int64_t nc, int64_t o0, int64_t rows, float* planes, const float* w16,
                                                  const affine<float>& fin, const epilogue<float>& eg) {
    const int64_t n = s.positions(), at = o0 * s.out[2], count = rows * s.out[2];
    float* sums = planes + depthwise::AL * depthwise::band_extent(s, depthwise::band_rows(s)) * convs::extent(s, 2);
    depthwise::across_in(s, x, nc, planes, o0 * s.stride[1], depthwise::band_extent(s, rows));
    depthwise::across_sums(s, planes, w16, sums, fin, nc, rows);
    depthwise::across_out(sums, count, n, nc, yc + at);
    if (!fin) {
        eg(c0, at, yc + at, n, 1, nc, count);
    }
}

// ks::conv_depthwise by rows of the image where it lies (AVX-512, floats; depthwise::by_rows): no copy and no
// transposition. Each output vector is 16 consecutive outputs of a row; tap (kh, kw) of it reads 16 elements of input
// row oh·S - pad_h + kh from column S·ow + kw - pad_w on: one masked load at stride 1 (the lanes outside the row are
// the padding's zeros), at stride 2 the even lanes of two masked loads (vpermt2ps). 4 output rows at a time at stride
// 1 (2 at stride 2) share each input row loaded; 3 × 3 at stride 2 walks the row, each input row's pair of loads
// kept for the next vector's last tap (rows_walk). The column taps' masks are made once per call (row_masks: all
// lanes but at a row's ends), 3 × 3 weights are broadcast once per channel; the affine epilogue in registers, any
// other over the plane after. (The `across` path transposes 16 planes in and out, about half of its time on large
// planes: docs/performance.md "Depthwise rows in place, and ExecuTorch layer by layer".)
namespace depthwise {

// The narrowest output rows computed in place at stride 1 and at stride 2: narrower ones waste lanes of the 16 and
// run across channels (measured on the Xeon, one image, bias + ReLU6: 3 × 3 at 14 × 14 0.87-1.08 of `across`'s time,
// 5 × 5 1.15; stride 2 to 14 wide 0.77, to 7 wide 1.98).
constexpr conv_dim rows_min_width[2] = {28, 14};
constexpr conv_dim plane_max_vectors = 16;  // (by_plane: planes of at most 16 vectors of positions)

// Whether a convolution runs by rows in place: 2-D, one output channel per input channel, dilation 1, kernels 3 × 3
// at strides 1 or 2 or 5 × 5 at stride 1 (the same stride along both axes), output rows of at least
// rows_min_width, at most 16 places of padding left and right of a row (row_masks' vectors between the first two and
// the last two then read only the row's columns). (5 × 5 at stride 2 stays across channels: 1.2-1.6 of its time,
// each tap's two loads and a permutation.)
constexpr bool by_rows_fits(const conv_shape& s) {
    return s.kernel[0] == 1 && s.in[0] == 1 && s.out[0] == 1 && s.out_channels == s.channels && s.channels > 0 &&
           s.kernel[2] == s.kernel[1] && s.dilation[1] == 1 && s.dilation[2] == 1 && s.stride[2] == s.stride[1] &&
           ((s.kernel[1] == 3 && (s.stride[1] == 1 || s.stride[1] == 2)) || (s.kernel[1] == 5 && s.stride[1] == 1)) &&
           s.out[2] >= rows_min_width[s.stride[1] - 1] && s.pad[2] <= 16 &&
           s.stride[2] * (s.out[2] - 1) + s.kernel[2] - s.in[2] - s.pad[2] <= 16;
}

// Whether a convolution runs flat over its whole plane (depthwise::by_plane): 2-D, one output channel per input
// channel, 3 × 3 at stride 1 and dilation 1 with one place of padding on each side (the output plane as large as the
// input), output rows narrower than rows_min_width, planes of at most 16 · plane_max_vectors positions (14 × 14 and
// 7 × 7: 16 positions a vector span rows). (5 × 5 stays across channels: 25 weight vectors and 5 rows of chunks do
// not fit the registers; a first version with the weights from memory took 1.3-1.6 of its time at 14 × 14.)
constexpr bool by_plane_fits(const conv_shape& s) {
    return s.kernel[0] == 1 && s.in[0] == 1 && s.out[0] == 1 && s.out_channels == s.channels && s.channels > 0 &&
           s.kernel[2] == s.kernel[1] && s.kernel[1] == 3 && s.dilation[1] == 1 &&
           s.dilation[2] == 1 && s.stride[1] == 1 && s.stride[2] == 1 && 2 * s.pad[1] == s.kernel[1] - 1 &&
           2 * s.pad[2] == s.kernel[2] - 1 && s.out[1] == s.in[1] && s.out[2] == s.in[2] &&
           s.out[2] < rows_min_width[0] && s.out[1] * s.out[2] <= 16 * plane_max_vectors;
}

template <class T>
constexpr bool by_plane(const conv_shape& s) {
#if defined(__AVX512F__)
    return std::is_same_v<T, float> && by_plane_fits(s);
#else
    return s.out[0] < 0;  // (never; constexpr and s used on every level)
#endif
}

// On AVX2 (8 lanes, by_rows8): 3 × 3 only, output rows of at least 112 at stride 1 and 56 at stride 2, and the
// vectors between a row's first two and last two read only the row's columns (stride 1: 8·(T - 3) + 7 + K - 1 - pad_w
// < W for T = ceil(OW / 8) vectors). (Measured on a Zen 3, one image, bias + ReLU6, against across: 32 ch at 112²
// 0.55-0.8 of its time, 96 ch 112² → 56² 0.92, 16 ch 0.82; 144 ch at 56² 0.8-1.0 alone but slower in the network in
// two of three network_steps.py runs; 192 ch at 28² 1.3, 88 ch at 28² 1.15-1.3, 5 × 5 at 28² 2.2 and stride 2 to 28
// wide 1.0-1.45: those stay across channels.)
constexpr conv_dim rows_min_width8[2] = {112, 56};
constexpr bool by_rows_fits8(const conv_shape& s) {
    return by_rows_fits(s) && s.kernel[1] == 3 && s.out[2] >= rows_min_width8[s.stride[1] - 1] &&
           (s.stride[1] == 2 ? 2 * s.out[2] - s.pad[2] - s.in[2] <= 16
                             : s.out[2] + s.kernel[2] - 1 - s.pad[2] - s.in[2] <= 9);
}

template <class T>
constexpr bool by_rows(const conv_shape& s) {
#if defined(__AVX512F__)
    return std::is_same_v<T, float> && by_rows_fits(s);
#elif defined(__AVX2__)
    return std::is_same_v<T, float> && by_rows_fits8(s);
#else
    return s.out[0] < 0;  // (never; constexpr and s used on every level)
#endif
}

#if defined(__AVX512F__)
// The 16 inputs of column tap `at` (the first one's column, S·ow + kw - pad_w) of row r: lanes whose column lies
// outside the row are zero (masks m0, and m1 for stride 2's second load).
template <int S>
__attribute__((always_inline)) inline __m512 row_taps(const float* r, conv_dim at, __mmask16 m0, __mmask16 m1,
                                                      __m512i even) {
    if constexpr (S == 1) {
        return _mm512_maskz_loadu_ps(m0, r + at);
    } else {
        return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m0, r + at), even, _mm512_maskz_loadu_ps(m1, r + at + 16));
    }
}

// A channel's K × K weights as the FMAs read them: 3 × 3 ones broadcast once per channel into 9 registers (as memory
// operands they were 9 of a vector's 13-22 loads), 5 × 5 ones from memory (25 registers would spill).
template <int K>
struct tap_weights {
    const float* w;
    explicit tap_weights(const float* wc) : w(wc) {}
    __m512 at(int i) const { return _mm512_set1_ps(w[i]); }
};
template <>
struct tap_weights<3> {
    __m512 v[9];
    explicit tap_weights(const float* wc) {
#pragma GCC unroll 9
        for (int i = 0; i < 9; ++i) {
            v[i] = _mm512_set1_ps(wc[i]);
        }
    }
    __m512 at(int i) const { return v[i]; }
};

// R output rows [oh, oh + R) of the 16 outputs from column ow on, stored through mask out: each of the (R - 1)·S + K
// input rows they read loaded once (its K column taps) and added into every output row that reads it.
template <int K, int S, int R>
__attribute__((always_inline)) inline void rows_block(const float* xc, conv_dim H, conv_dim W, conv_dim OW,
                                                      conv_dim oh, conv_dim top, conv_dim at,
                                                      const tap_weights<K>& wc, const __mmask16* m0, const __mmask16* m1, __mmask16 out,
                                                      __m512i even, bool on, const affine<float>& fin, float b,
                                                      float* yc) {
    __m512 acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_setzero_ps();
    }
#pragma GCC unroll 16
    for (int i = 0; i < (R - 1) * S + K; ++i) {
        if (top + i < 0 || top + i >= H) {
            continue;
        }
        const float* row = xc + (top + i) * W;
        __m512 v[K];
        if constexpr (S == 2 && K == 3) {  // (taps 0 and 1: the even and odd lanes of one pair of loads)
            const __m512 lo = _mm512_maskz_loadu_ps(m0[0], row + at), hi = _mm512_maskz_loadu_ps(m1[0], row + at + 16);
            v[0] = _mm512_permutex2var_ps(lo, even, hi);
            v[1] = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
            v[2] = row_taps<S>(row, at + 2, m0[2], m1[2], even);
        } else {
#pragma GCC unroll 8
            for (int kw = 0; kw < K; ++kw) {
                v[kw] = row_taps<S>(row, at + kw, m0[kw], S == 2 ? m1[kw] : __mmask16(0), even);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const int kh = i - r * S;
            if (kh >= 0 && kh < K) {
#pragma GCC unroll 8
                for (int kw = 0; kw < K; ++kw) {
                    acc[r] = _mm512_fmadd_ps(wc.at(kh * K + kw), v[kw], acc[r]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        if (on) {
            tiles::simd<float>::v t = acc[r];
            acc[r] = tiles::finish<float>(t, fin, b);
        }
        _mm512_mask_storeu_ps(yc + (oh + r) * OW, out, acc[r]);
    }
}

// The column masks of one vector of outputs: its K column taps' (m0, and m1 for stride 2's second load) and its
// stores'.
template <int K, int S>
struct column_masks {
    __mmask16 m0[K], m1[S == 2 ? K : 1], out;
};

// The column masks of a row's vectors, made once per call (the same for every row and channel): vectors 0 and 1,
// T - 2, T - 1 and T (T vectors to a row; vector T is the one stride 2's walk loads ahead), and an inner one for the
// vectors between, whose lanes all lie in the row (the first's columns at least 16·S - pad_w >= 0, the last's past
// them at least 16 outputs before the row's end).
template <int K, int S>
struct row_masks {
    column_masks<K, S> edge[6];
    conv_dim T;

    row_masks(conv_dim W, conv_dim OW, conv_dim pw) : T(tiles::index_div(OW + 15, 16)) {
        const conv_dim at[6] = {0, 1, T - 2, T - 1, T, 2};
#pragma GCC unroll 1
        for (int e = 0; e < 6; ++e) {  // (not unrolled: once per call, 1 KB of code each when unrolled)
            const conv_dim ow = 16 * at[e], x = S * ow - pw;  // (lane l of column tap kw reads column x + kw + S·l)
#pragma GCC unroll 1
            for (int kw = 0; kw < K; ++kw) {
                edge[e].m0[kw] = lanes_in(0, W, x + kw);
                edge[e].m1[S == 2 ? kw : 0] = S == 1 ? __mmask16(0) : lanes_in(0, W, x + kw + 16);  // (stride 2's)
            }
            edge[e].out = lanes_in(0, OW, ow);
        }
    }
    // Vector t's masks (t <= T).
    const column_masks<K, S>& of(conv_dim t) const { return edge[t < 2 ? t : t >= T - 2 ? t - T + 4 : 5]; }
};

// Output rows [oh, oh + R) of a 3 × 3 stride-2 layer, walking the row 16 outputs at a time: per input row and
// vector one pair of masked loads (the columns of tap 0, 32 of them) split by vpermt2ps into tap 0's lanes (even)
// and tap 1's (odd), kept for the next vector; tap 2's lanes are tap 0's moved down one lane, the last one from the
// next vector's tap 0 (valignd). 2 loads and 3 permutations per input row and vector instead of 4 and 3, the same
// values (outside the row the masks' zeros) and sums in the same order as rows_block.
template <int R>
__attribute__((always_inline)) inline void rows_walk(const float* xc, conv_dim H, conv_dim W, conv_dim OW,
                                                     conv_dim oh, conv_dim top, conv_dim pw, const tap_weights<3>& wc,
                                                     const row_masks<3, 2>& m, bool on, const affine<float>& fin,
                                                     float b, float* yc) {
    constexpr int I = 2 * (R - 1) + 3;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 e[I], o[I];  // (per input row: the current vector's tap 0 and tap 1)
#pragma GCC unroll 8
    for (int i = 0; i < I; ++i) {
        const float* row = xc + (top + i) * W - pw;
        const column_masks<3, 2>& c = m.of(0);
        const bool live = top + i >= 0 && top + i < H;
        const __m512 lo = _mm512_maskz_loadu_ps(live ? c.m0[0] : 0, row), hi = _mm512_maskz_loadu_ps(live ? c.m1[0] : 0, row + 16);
        e[i] = _mm512_permutex2var_ps(lo, even, hi);
        o[i] = _mm512_permutex2var_ps(lo, odd, hi);
    }
    for (conv_dim t = 0; t < m.T; ++t) {
        const column_masks<3, 2>& c = m.of(t + 1);
        __m512 acc[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            acc[r] = _mm512_setzero_ps();
        }
#pragma GCC unroll 8
        for (int i = 0; i < I; ++i) {
            if (top + i < 0 || top + i >= H) {
                continue;
            }
            const float* row = xc + (top + i) * W + 32 * (t + 1) - pw;
            const __m512 lo = _mm512_maskz_loadu_ps(c.m0[0], row), hi = _mm512_maskz_loadu_ps(c.m1[0], row + 16);
            const __m512 next = _mm512_permutex2var_ps(lo, even, hi);
            const __m512 v2 = _mm512_castsi512_ps(_mm512_mask_alignr_epi32(
                _mm512_castps_si512(e[i]), 0xFFFF, _mm512_castps_si512(next), _mm512_castps_si512(e[i]), 1));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const int kh = i - r * 2;
                if (kh >= 0 && kh < 3) {
                    acc[r] = _mm512_fmadd_ps(wc.at(kh * 3), e[i], acc[r]);
                    acc[r] = _mm512_fmadd_ps(wc.at(kh * 3 + 1), o[i], acc[r]);
                    acc[r] = _mm512_fmadd_ps(wc.at(kh * 3 + 2), v2, acc[r]);
                }
            }
            e[i] = next;
            o[i] = _mm512_permutex2var_ps(lo, odd, hi);
        }
        const __mmask16 out = m.of(t).out;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            if (on) {
                tiles::simd<float>::v v = acc[r];
                acc[r] = tiles::finish<float>(v, fin, b);
            }
            _mm512_mask_storeu_ps(yc + (oh + r) * OW + 16 * t, out, acc[r]);
        }
    }
}

// Output rows [oh, oh + R) across the row, 16 outputs at a time (the column masks from m).
template <int K, int S, int R>
__attribute__((always_inline)) inline void rows_across(const float* xc, conv_dim H, conv_dim W, conv_dim OW,
                                                       conv_dim oh, conv_dim top, conv_dim pw,
                                                       const tap_weights<K>& wc, const row_masks<K, S>& m, __m512i even, bool on,
                                                       const affine<float>& fin, float b, float* yc) {
    for (conv_dim t = 0; t < m.T; ++t) {
        const column_masks<K, S>& c = m.of(t);
        rows_block<K, S, R>(xc, H, W, OW, oh, top, S * 16 * t - pw, wc, c.m0, c.m1, c.out, even, on, fin, b,
                            yc + 16 * t);
    }
}

// One channel's output plane yc from its input plane xc and its K × K weights wc, the affine fin in registers:
// R rows at a time (4 at stride 1, 2 at stride 2), then row by row, each across the row 16 outputs at a time.
// (The affine is copied into a local: read through fin, GCC reloaded its bias and bounds for every vector, as the
// masked stores may alias them.)
template <int K, int S>
KS_OWN_FRAME void rows_plane(const conv_shape& s, const float* xc, const float* wc, float* yc,
                                          const affine<float>& fin, const row_masks<K, S>& m) {
    constexpr int R = S == 1 ? 4 : 2;
    const conv_dim H = s.in[1], W = s.in[2], OH = s.out[1], OW = s.out[2], ph = s.pad[1], pw = s.pad[2];
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const affine<float> f = fin;
    const tap_weights<K> wt(wc);
    const bool on = bool(f);
    const float b = on && f.bias != nullptr ? f.bias[0] : 0.0f;
    conv_dim oh = 0;
    if constexpr (K == 3 && S == 2) {
        if (m.T > 1) {  // (rows of one vector: the walk's vector ahead would be all padding)
            for (; oh + R <= OH; oh += R) {
                rows_walk<R>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, on, f, b, yc);
            }
            if (oh < OH) {  // (an odd last row: by rows_across, a walk of one row is 1.5 KB more code)
                rows_across<K, S, 1>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, even, on, f, b, yc);
            }
            return;
        }
    }
    for (; oh + R <= OH; oh += R) {
        rows_across<K, S, R>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, even, on, f, b, yc);
    }
    for (; oh < OH; ++oh) {
        rows_across<K, S, 1>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, even, on, f, b, yc);
    }
}

// Every channel of every image by rows_plane<K, S>, the column masks made once.
template <int K, int S>
__attribute__((noinline)) void rows_images(const conv_shape& s, conv_dim images, const float* x, const float* w,
                                           float* y, const epilogue<float>& epi) {
    const conv_dim taps = s.taps(), n = s.positions(), in = s.in_plane(), C = s.channels;
    const row_masks<K, S> m(s.in[2], s.out[2], s.pad[2]);
    for (conv_dim image = 0; image < images; ++image) {
        const epilogue<float> eg = epi.group(image, 0);
        for (conv_dim c = 0; c < C; ++c) {
            float* yc = y + (image * C + c) * n;
            const affine<float> fin = eg.in_registers(c);
            rows_plane<K, S>(s, x + (image * C + c) * in, w + c * taps, yc, fin, m);
            if (!fin) {
                eg(c, 0, yc, n, 1, 1, n);
            }
        }
    }
}

inline void rows_channels(const conv_shape& s, conv_dim images, const float* x, const float* w, float* y,
                          const epilogue<float>& epi) {
    if (s.kernel[1] == 5) {
        rows_images<5, 1>(s, images, x, w, y, epi);
    } else {
        s.stride[1] == 2 ? rows_images<3, 2>(s, images, x, w, y, epi) : rows_images<3, 1>(s, images, x, w, y, epi);
    }
}

// One image's small planes flat (depthwise::by_plane, 3 × 3, P = 1): 16 consecutive outputs of the whole plane a
// vector, which may span rows. At stride 1 with one place of padding an output plane is as wide as its input, so tap
// (kh, kw) of output p reads input p + (kh - P)·W + kw - P. Per channel, the input is read as 16-element chunks at
// p0 + (kh - P)·W (zero outside the plane [0, n): a lane whose input row lies outside the image reads a zero), each
// chunk loaded once and kept for the next vector, the taps kw ≠ P made from two neighbouring chunks by valignd; a lane
// whose input column lies outside the image keeps its sum (the FMA's mask: a row's end reads the next row's start
// there; so a non-finite weight of a column tap does not reach the outputs at the image's left and right edges, where
// the padded paths add 0 · w). The chunks' and columns' masks are made once per call (the same for every channel); the
// affine epilogue in registers, any other over each plane after it. Planes of at most plane_max_vectors · 16
// positions.
//
// Lane l: element l + D of the chunk b (from a's last lanes or c's first when l + D leaves it). (The masked form of
// valignd: the unmasked one starts from an undefined vector, which GCC 12's -Wmaybe-uninitialized reports.)
template <int D>
__attribute__((always_inline)) inline __m512 plane_shifted(__m512 a, __m512 b, __m512 c) {
    const __m512i lo = _mm512_castps_si512(D < 0 ? a : b), hi = _mm512_castps_si512(D < 0 ? b : c);
    if constexpr (D == 0) {
        return b;
    } else {
        return _mm512_castsi512_ps(_mm512_mask_alignr_epi32(lo, 0xFFFF, hi, lo, D < 0 ? 16 + D : D));
    }
}

// One kernel row's 3 taps of one vector into acc (a, b, c: the chunks before, at and after the vector's; w: the row's
// weight vectors; left, right: the lanes whose input column ow - 1, ow + 1 lies in the image).
__attribute__((always_inline)) inline __m512 plane_row(__m512 acc, __m512 a, __m512 b, __m512 c, const __m512* w,
                                                       __mmask16 left, __mmask16 right) {
    acc = _mm512_mask3_fmadd_ps(w[0], plane_shifted<-1>(a, b, c), acc, left);
    acc = _mm512_fmadd_ps(w[1], b, acc);
    return _mm512_mask3_fmadd_ps(w[2], plane_shifted<1>(a, b, c), acc, right);
}

constexpr int plane_block = 4;  // (by_plane: the vectors of a channel at a time, their sums' FMA chains in flight)

// The masks by_plane's vectors share: vector t's lanes whose column ow - 1 and ow + 1 lies in the image, and the
// lanes of chunk t - 1 of kernel row k that lie in the plane [0, n).
struct plane_masks {
    __mmask16 left[plane_max_vectors + plane_block], right[plane_max_vectors + plane_block];
    __mmask16 loads[3][plane_max_vectors + plane_block + 2];
};

// One channel's plane yc from xc (w: its 9 weights), the affine epilogue fin (bias b0) in registers when on.
__attribute__((noinline)) inline void plane_channel(const float* xc, const float* w, float* yc, conv_dim W, conv_dim n,
                                                   const plane_masks& m, const affine<float>& fin, bool on, float b0) {
    constexpr int K = 3, U = plane_block;
    const conv_dim T = tiles::index_div(n + 15, 16);
    __m512 wv[K * K], a[K], b[K];
#pragma GCC unroll 16
    for (int i = 0; i < K * K; ++i) {
        wv[i] = _mm512_set1_ps(w[i]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) {  // (chunks -1 and 0 of each kernel row)
        a[k] = _mm512_maskz_loadu_ps(m.loads[k][0], xc + (k - 1) * W - 16);
        b[k] = _mm512_maskz_loadu_ps(m.loads[k][1], xc + (k - 1) * W);
    }
    for (conv_dim t = 0; t < T; t += U) {  // (the last U may reach past the plane: masked loads and stores)
        __m512 acc[U];
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) {
            acc[u] = _mm512_setzero_ps();
        }
#pragma GCC unroll 4
        for (int k = 0; k < K; ++k) {
            __m512 next[U];
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
                next[u] = _mm512_maskz_loadu_ps(m.loads[k][t + 2 + u], xc + 16 * (t + 1 + u) + (k - 1) * W);
            }
            acc[0] = plane_row(acc[0], a[k], b[k], next[0], wv + k * K, m.left[t], m.right[t]);
            acc[1] = plane_row(acc[1], b[k], next[0], next[1], wv + k * K, m.left[t + 1], m.right[t + 1]);
#pragma GCC unroll 4
            for (int u = 2; u < U; ++u) {
                acc[u] = plane_row(acc[u], next[u - 2], next[u - 1], next[u], wv + k * K, m.left[t + u],
                                   m.right[t + u]);
            }
            a[k] = next[U - 2];
            b[k] = next[U - 1];
        }
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) {
            if (on) {
                tiles::simd<float>::v v = acc[u];
                acc[u] = tiles::finish<float>(v, fin, b0);
            }
            _mm512_mask_storeu_ps(yc + 16 * (t + u), lanes_in(0, n, 16 * (t + u)), acc[u]);
        }
    }
}

__attribute__((noinline)) inline void plane_channels(const conv_shape& s, const float* x, const float* w, float* y,
                                                    const epilogue<float>& eg) {
    constexpr int U = plane_block;
    const conv_dim W = s.in[2], n = s.in[1] * W, C = s.channels, T = tiles::index_div(n + 15, 16);
    const affine<float> fin = eg.in_registers(0);
    const bool on = bool(fin);
    plane_masks m;
    for (conv_dim t = 0; t < T + U + 2; ++t) {
        for (int k = 0; k < 3; ++k) {
            m.loads[k][t] = lanes_in(0, n, 16 * (t - 1) + (k - 1) * W);
        }
    }
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i wide = _mm512_set1_epi32(int(W)), step = _mm512_set1_epi32(int(16 - tiles::index_div(16, W) * W));
    __m512i col = lane;  // (the lanes' columns, p mod W)
    for (int q = 0; q < 16; ++q) {
        col = _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, wide), col, wide);
    }
    for (conv_dim t = 0; t < T + U; ++t) {
        m.left[t] = _mm512_cmpge_epi32_mask(col, _mm512_set1_epi32(1));
        m.right[t] = _mm512_cmplt_epi32_mask(col, _mm512_set1_epi32(int(W - 1)));
        col = _mm512_add_epi32(col, step);
        col = _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, wide), col, wide);
    }
    for (conv_dim c = 0; c < C; ++c) {
        plane_channel(x + c * n, w + c * 9, y + c * n, W, n, m, fin, on, on && fin.bias != nullptr ? fin.bias[c] : 0.0f);
        if (!on) {
            eg(c, 0, y + c * n, n, 1, 1, n);
        }
    }
}

__attribute__((noinline)) inline void plane_images(const conv_shape& s, conv_dim images, const float* x,
                                                   const float* w, float* y, const epilogue<float>& epi) {
    const conv_dim n = s.positions(), C = s.channels;
    for (conv_dim image = 0; image < images; ++image) {
        const epilogue<float> eg = epi.group(image, 0);
        plane_channels(s, x + image * C * n, w, y + image * C * n, eg);
    }
}
#elif defined(__AVX2__)
// by_rows on AVX2 (by_rows_fits8: 3 × 3 at strides 1 and 2): the same walk as AVX-512's with 8 outputs a vector.
// The vectors between a row's first two and last two (`Inner`) load and store whole vectors; the others load the
// taps that reach past the row through AVX2's masked moves (vmaskmovps: no fault on a lane left out) and store a
// partial last vector by 4, 2 and 1 lanes. At stride 2 an input row's 16 columns from the vector's first tap on
// (two loads) give taps 0 and 1 as their even and odd places, two more loads from 2 columns on give tap 2: vshufps
// takes places [0 2 8 10 | 4 6 12 14] (or the odd ones) of each pair, so every tap's lanes hold outputs
// [0 1 4 5 2 3 6 7] of the vector, and the sums are put in order once (vpermpd) before they are stored.
constexpr int RL = 8;

// The first n < 8 lanes of v stored at out, by 4, 2 and 1 (not vmaskmovps: a row's last vector, 28 wide, took 1.6
// of across's time with it on a Zen 3).
__attribute__((always_inline)) inline void store_first(float* out, __m256 v, int n) {
    __m128 q = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(out, q);
        q = _mm256_extractf128_ps(v, 1);
        out += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi(reinterpret_cast<__m64*>(out), q);
        q = _mm_movehl_ps(q, q);
        out += 2;
        n -= 2;
    }
    if (n >= 1) {
        _mm_store_ss(out, q);
    }
}

// The 3 × 3 weights of a channel, broadcast once into 9 registers.
struct tap_weights8 {
    __m256 v[9];
    explicit tap_weights8(const float* wc) {
#pragma GCC unroll 9
        for (int i = 0; i < 9; ++i) {
            v[i] = _mm256_broadcast_ss(wc + i);
        }
    }
};

// The loads of one input row a vector of outputs makes (stride 1: one per tap, from column at + kw; stride 2: from
// columns at, at + 8, at + 2 and at + 10) and their places from `at`.
template <int S>
constexpr int row_loads8 = S == 1 ? 3 : 4;
template <int S>
constexpr int load_place8(int j) {
    return S == 1 ? j : (j & 1) * 8 + (j >> 1) * 2;
}

// The column masks of one vector of outputs: its loads' (lanes [a[j], b[j]) in the row; full[j]: all 8, loaded
// whole) and the outputs it stores (count: 1 to 8). (As lane bounds, not vectors: four vectors' masks in the frame of
// rows_images8 made it 0.6-0.9 KB.)
template <int S>
struct column_masks8 {
    int8_t a[row_loads8<S>], b[row_loads8<S>];
    bool full[row_loads8<S>];
    int8_t count;
};

// Lanes [a, b) of a vector, as a mask.
__attribute__((always_inline)) inline __m256i range_mask(int a, int b) {
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(a), l), _mm256_cmpgt_epi32(_mm256_set1_epi32(b), l));
}

// The column masks of a row's vectors, made once per call: vectors 0, 1, T - 2 and T - 1 (T vectors to a row); the
// vectors between read whole vectors (by_rows_fits8).
template <int S>
struct row_masks8 {
    column_masks8<S> edge[4];
    conv_dim T;

    row_masks8(conv_dim W, conv_dim OW, conv_dim pw) : T(tiles::index_div(OW + RL - 1, RL)) {
        const conv_dim at[4] = {0, 1, T - 2, T - 1};
#pragma GCC unroll 1
        for (int e = 0; e < 4; ++e) {
            const conv_dim ow = RL * at[e], x = S * ow - pw;
#pragma GCC unroll 1
            for (int j = 0; j < row_loads8<S>; ++j) {
                const conv_dim c = x + load_place8<S>(j);
                edge[e].a[j] = int8_t(c >= 0 ? 0 : -c < RL ? -c : RL);
                edge[e].b[j] = int8_t(W - c >= RL ? RL : W - c > 0 ? W - c : 0);
                edge[e].full[j] = c >= 0 && c + RL <= W;
            }
            edge[e].count = int8_t(OW - ow < RL ? OW - ow : RL);
        }
    }
    const column_masks8<S>& of(conv_dim t) const { return edge[t < 2 ? t : t - T + 4]; }
};

// R output rows [oh, oh + R) of the 8 outputs from column ow on (their first tap's column at): each of the
// (R - 1)·S + 3 input rows they read loaded once (its 3 column taps) and added into every output row that reads it.
// Masked loads through c unless Inner (every tap and output inside the row).
template <int S, int R, bool Inner>
__attribute__((always_inline)) inline void rows_block8(const float* xc, conv_dim H, conv_dim W, conv_dim OW,
                                                       conv_dim oh, conv_dim top, conv_dim at,
                                                       const tap_weights8& wc, const column_masks8<S>* c, bool on,
                                                       const affine<float>& fin, float b, float* yc) {
    constexpr int K = 3, J = row_loads8<S>;
    __m256 acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_setzero_ps();
    }
#pragma GCC unroll 16
    for (int i = 0; i < (R - 1) * S + K; ++i) {
        if (top + i < 0 || top + i >= H) {
            continue;
        }
        const float* row = xc + (top + i) * W + at;
        __m256 l[J], v[K];
#pragma GCC unroll 4
        for (int j = 0; j < J; ++j) {
            const float* p = row + load_place8<S>(j);
            l[j] = Inner || c->full[j] ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, range_mask(c->a[j], c->b[j]));
        }
        if constexpr (S == 1) {
            v[0] = l[0];
            v[1] = l[1];
            v[2] = l[2];
        } else {
            v[0] = _mm256_shuffle_ps(l[0], l[1], 0x88);
            v[1] = _mm256_shuffle_ps(l[0], l[1], 0xDD);
            v[2] = _mm256_shuffle_ps(l[2], l[3], 0x88);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const int kh = i - r * S;
            if (kh >= 0 && kh < K) {
#pragma GCC unroll 8
                for (int kw = 0; kw < K; ++kw) {
                    acc[r] = _mm256_fmadd_ps(wc.v[kh * K + kw], v[kw], acc[r]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        if constexpr (S == 2) {
            acc[r] = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(acc[r]), 0xD8));
        }
        if (on) {
            tiles::simd<float>::v t = acc[r];
            acc[r] = tiles::finish<float>(t, fin, b);
        }
        if (Inner || c->count == RL) {
            _mm256_storeu_ps(yc + (oh + r) * OW, acc[r]);
        } else {
            store_first(yc + (oh + r) * OW, acc[r], c->count);
        }
    }
}

// Output rows [oh, oh + R) across the row, 8 outputs at a time.
template <int S, int R>
__attribute__((always_inline)) inline void rows_across8(const float* xc, conv_dim H, conv_dim W, conv_dim OW,
                                                        conv_dim oh, conv_dim top, conv_dim pw,
                                                        const tap_weights8& wc, const row_masks8<S>& m, bool on,
                                                        const affine<float>& fin, float b, float* yc) {
    const conv_dim T = m.T, i1 = T - 2 > 2 ? T - 2 : 2;
    for (conv_dim t = 0; t < (T < 2 ? T : 2); ++t) {
        rows_block8<S, R, false>(xc, H, W, OW, oh, top, S * RL * t - pw, wc, &m.of(t), on, fin, b, yc + RL * t);
    }
    for (conv_dim t = 2; t < i1; ++t) {
        rows_block8<S, R, true>(xc, H, W, OW, oh, top, S * RL * t - pw, wc, nullptr, on, fin, b, yc + RL * t);
    }
    for (conv_dim t = i1; t < T; ++t) {
        rows_block8<S, R, false>(xc, H, W, OW, oh, top, S * RL * t - pw, wc, &m.of(t), on, fin, b, yc + RL * t);
    }
}

// One channel's output plane yc from its input plane xc and its 3 × 3 weights wc, the affine fin in registers: R
// rows at a time (3 at stride 1, 2 at stride 2), then row by row.
template <int S>
KS_OWN_FRAME void rows_plane8(const conv_shape& s, const float* xc, const float* wc, float* yc,
                              const affine<float>& fin, const row_masks8<S>& m) {
    constexpr int R = S == 1 ? 3 : 2;
    const conv_dim H = s.in[1], W = s.in[2], OH = s.out[1], OW = s.out[2], ph = s.pad[1], pw = s.pad[2];
    const affine<float> f = fin;
    const tap_weights8 wt(wc);
    const bool on = bool(f);
    const float b = on && f.bias != nullptr ? f.bias[0] : 0.0f;
    conv_dim oh = 0;
    for (; oh + R <= OH; oh += R) {
        rows_across8<S, R>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, on, f, b, yc);
    }
    for (; oh < OH; ++oh) {
        rows_across8<S, 1>(xc, H, W, OW, oh, oh * S - ph, pw, wt, m, on, f, b, yc);
    }
}

template <int S>
__attribute__((noinline)) void rows_images8(const conv_shape& s, conv_dim images, const float* x, const float* w,
                                            float* y, const epilogue<float>& epi) {
    const conv_dim taps = s.taps(), n = s.positions(), in = s.in_plane(), C = s.channels;
    const row_masks8<S> m(s.in[2], s.out[2], s.pad[2]);
    for (conv_dim image = 0; image < images; ++image) {
        const epilogue<float> eg = epi.group(image, 0);
        for (conv_dim c = 0; c < C; ++c) {
            float* yc = y + (image * C + c) * n;
            const affine<float> fin = eg.in_registers(c);
            rows_plane8<S>(s, x + (image * C + c) * in, w + c * taps, yc, fin, m);
            if (!fin) {
                eg(c, 0, yc, n, 1, 1, n);
            }
        }
    }
}

inline void rows_channels(const conv_shape& s, conv_dim images, const float* x, const float* w, float* y,
                          const epilogue<float>& epi) {
    s.stride[1] == 2 ? rows_images8<2>(s, images, x, w, y, epi) : rows_images8<1>(s, images, x, w, y, epi);
}
#endif

}  // namespace depthwise

// ks::conv_depthwise across channels (depthwise::across): depthwise::AL channels at a time (16 on AVX-512, 8 on
// AVX2), in bands of output rows.
__attribute__((noinline)) inline void across_channels(const conv_shape& s, int64_t images, const float* x, const float* w, float* y,
                            float* scratch, const epilogue<float>& epi) {
    constexpr int64_t AL = depthwise::AL;
    const int64_t taps = s.taps(), n = s.positions(), in = s.in_plane(), band = depthwise::band_rows(s);
    const int64_t padded = AL * depthwise::band_extent(s, band) * convs::extent(s, 2);
    float* planes = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    float* w16 = planes + padded + AL * band * s.out[2];
    for (int64_t i = 0; i < padded; ++i) {
        planes[i] = 0.0f;  // (the padding; each group overwrites the image's places)
    }
    for (int64_t image = 0; image < images; ++image) {
        const epilogue<float> eg = epi.group(image, 0);
        for (int64_t c0 = 0; c0 < s.channels; c0 += AL) {
            const int64_t nc = s.channels - c0 < AL ? s.channels - c0 : AL;
            depthwise::across_weights(w + c0 * taps, taps, nc, w16);
            const affine<float> fin = eg.in_registers(c0);
            for (int64_t o0 = 0; o0 < s.out[1]; o0 += band) {
                across_band(s, x + (image * s.channels + c0) * in, y + (image * s.out_channels + c0) * n, c0, nc, o0,
                            s.out[1] - o0 < band ? s.out[1] - o0 : band, planes, w16, fin, eg);
            }
        }
    }
}
#endif

// y [images, M, positions] = epi(conv(x, w)) for a depthwise convolution (is_depthwise): each input channel
// copied into scratch (depthwise_scratch elements), then its M / C output channels computed from the copy.
template <class T>
void conv_depthwise(const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
                    const epilogue<T>& epi = {}) {
    const int64_t per = tiles::index_div(s.out_channels, s.channels), taps = s.taps(), n = s.positions(), plane = s.out[1] * s.out[2];
    const int64_t depth_step = s.stride[0] * depthwise::depth_plane(s);
    const bool flat = depthwise::flat<T>(s);
#if defined(__AVX512F__) || defined(__AVX2__)
    if constexpr (std::is_same_v<T, float>) {
        if (depthwise::by_rows<T>(s)) {
            depthwise::rows_channels(s, images, x, w, y, epi);
            return;
        }
    }
#endif
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
        if (depthwise::by_plane<T>(s)) {
            depthwise::plane_images(s, images, x, w, y, epi);
            return;
        }
    }
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
    if constexpr (std::is_same_v<T, float>) {
        if (depthwise::across<T>(s)) {
            across_channels(s, images, x, w, y, scratch, epi);
            return;
        }
    }
#endif
    T* sums = scratch + depthwise::copy_size<T>(s);
    int64_t* offsets = reinterpret_cast<int64_t*>(sums + depthwise::sums_size<T>(s));
    depthwise::tap_offsets(s, offsets);
    for (int64_t i = 0; i < depthwise::copy_size<T>(s); ++i) {
        scratch[i] = T(0);  // (the padding's places, and the room a run reads past the copy)
    }
    for (int64_t image = 0; image < images; ++image) {
        const epilogue<T> eg = epi.group(image, 0);
        for (int64_t c = 0; c < s.channels; ++c) {
            depthwise::copy_channel<T>(s, x + (image * s.channels + c) * s.in_plane(), scratch);
            for (int64_t m = c * per; m < (c + 1) * per; ++m) {
                T* ym = y + (image * s.out_channels + m) * n;
                const T* wm = w + m * taps;
                const affine<T> fin = eg.in_registers(m);  // (the epilogue sums applies, or none)
                for (int64_t od = 0; od < s.out[0]; ++od) {
                    const T* base = scratch + od * depth_step;
                    if (flat) {
                        depthwise::flat_plane<T>(s, base, offsets, wm, ym, od * plane, sums, fin, eg, m);
                    } else {
                        depthwise::plane_rows<T>(s, base, offsets, wm, ym, od * plane, fin, eg, m);
                    }
                }
            }
        }
    }
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_CONV_H
