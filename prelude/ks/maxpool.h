// ks/maxpool.h — max pooling in portable C++ (no heap, no library), a kernel of the kernel layer (ks/kernels.h).
//
// ks::max_pool takes planes (images × channels) of h × w elements and writes, per plane, oh × ow maxima over
// windows of kh × kw taps spaced by the dilations (dh, dw), moved by the strides (sh, sw), the first window starting
// ph rows above and pw columns left of the plane (the padding never wins: -inf, as ONNX MaxPool and torch's
// max_pool2d pad; ceil_mode is more padding at the end, which the caller counts into oh and ow). A 1-d pooling is a
// 2-d one of one row. A NaN in a window is its maximum (ks::running_max, the generated reductions' rule).
//
// Per output row, the maxima over the window's rows of each column are taken first (whole rows: consecutive
// elements, vectors), into a row of scratch that holds the padded row (-inf left and right of the plane's
// columns); then each output element is the maximum of kw elements of that row. The common kernels (3 × 3, 2 × 2
// of stride 1 or 2, dilation 1) have loops of constant taps and stride, which the compiler vectorizes.
#ifndef KS_MAXPOOL_H
#define KS_MAXPOOL_H

#include <cstdint>

#include "gemm.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

// The geometry of a max pooling of 2-d planes (a 1-d one: h = oh = kh = sh = dh = 1, ph = 0).
struct pool_shape {
    int64_t h, w;    // the input plane
    int64_t oh, ow;  // the output plane
    int64_t kh, kw;  // the window's taps
    int64_t sh, sw;  // strides
    int64_t dh, dw;  // dilations
    int64_t ph, pw;  // leading padding
};

// The scratch elements of ks::max_pool: one padded row, as many columns as the windows of an output row span.
template <class T>
constexpr int64_t max_pool_scratch(const pool_shape& s) {
    return (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1;
}

namespace pools {

// row[i] = max(a[i], b[i], c[i]) (into: also row[i]) for i in [lo, hi): one pass over three rows of the window.
template <class T, bool INTO>
__attribute__((noinline)) void three_rows(T* row, const T* a, const T* b, const T* c, int64_t lo, int64_t hi) {
    KS_OMP_SIMD()
    for (int64_t i = lo; i < hi; ++i) {
        T m = running_max(running_max(a[i], b[i]), c[i]);
        row[i] = INTO ? running_max(row[i], m) : m;
    }
}

// row[0, span) = the maximum over the window rows of output row oy, of padded columns -pw ... span - pw - 1: the
// plane's rows in the window taken three at a time (a row repeated when fewer are left).
template <class T>
__attribute__((noinline)) void column_maxima(const pool_shape& s, const T* plane, int64_t oy, T* row) {
    const int64_t span = max_pool_scratch<T>(s);
    const int64_t a = s.pw < span ? s.pw : span;  // the plane's columns: [a, e) of the row
    const int64_t e = s.pw + s.w < span ? s.pw + s.w : span;
    const int64_t top = oy * s.sh - s.ph;
    int64_t ky = top < 0 ? tiles::index_div(-top + s.dh - 1, s.dh) : 0;  // the window's first row in the plane
    const int64_t below = s.h - 1 - top;                 // (its last: ky · dh <= below)
    const int64_t down = below < 0 ? 0 : tiles::index_div(below, s.dh);
    const int64_t last = below < 0 ? -1 : (down < s.kh - 1 ? down : s.kh - 1);
    const bool any = ky <= last;
    T* inside = row + s.pw;  // (column i of the plane; at most one past the row's end: a, e = span)
    for (bool into = false; ky <= last; ky += 3, into = true) {
        const T* r0 = plane + (top + ky * s.dh) * s.w;
        const T* r1 = ky + 1 <= last ? r0 + s.dh * s.w : r0;
        const T* r2 = ky + 2 <= last ? r0 + 2 * s.dh * s.w : r1;
        if (into) {
            three_rows<T, true>(inside, r0, r1, r2, a - s.pw, e - s.pw);
        } else {
            three_rows<T, false>(inside, r0, r1, r2, a - s.pw, e - s.pw);
        }
    }
    for (int64_t i = any ? e : 0; i < span; ++i) {  // (no plane row in the window: all padding)
        row[i] = lowest<T>();
    }
    for (int64_t i = 0; i < a; ++i) {
        row[i] = lowest<T>();
    }
}

// out[ox] = max over kx of row[ox · SW + kx · DW] for ox < ow, taps, stride and dilation constant.
template <class T, int KW, int SW, int DW>
__attribute__((noinline)) void row_maxima(const T* row, T* out, int64_t ow) {
    KS_OMP_SIMD()
    for (int64_t ox = 0; ox < ow; ++ox) {
        T m = row[ox * SW];
        KS_UNROLL for (int kx = 1; kx < KW; ++kx) {
            m = running_max(m, row[ox * SW + kx * DW]);
        }
        out[ox] = m;
    }
}

// The same for any taps, stride and dilation.
template <class T>
__attribute__((noinline)) void row_maxima_any(const pool_shape& s, const T* row, T* out) {
    for (int64_t ox = 0; ox < s.ow; ++ox) {
        const T* r = row + ox * s.sw;
        T m = r[0];
        for (int64_t kx = 1; kx < s.kw; ++kx) {
            m = running_max(m, r[kx * s.dw]);
        }
        out[ox] = m;
    }
}

template <class T>
void row_of(const pool_shape& s, const T* row, T* out) {
    if (s.dw == 1 && s.kw == 3 && s.sw == 2) {
        row_maxima<T, 3, 2, 1>(row, out, s.ow);
    } else if (s.dw == 1 && s.kw == 3 && s.sw == 1) {
        row_maxima<T, 3, 1, 1>(row, out, s.ow);
    } else if (s.dw == 1 && s.kw == 2 && s.sw == 2) {
        row_maxima<T, 2, 2, 1>(row, out, s.ow);
    } else {
        row_maxima_any(s, row, out);
    }
}

}  // namespace pools

// y [planes, oh, ow] = the window maxima of x [planes, h, w]; scratch: ks::max_pool_scratch elements.
template <class T>
void max_pool(const pool_shape& s, int64_t planes, const T* x, T* y, T* scratch) {
    for (int64_t p = 0; p < planes; ++p) {
        const T* plane = x + p * s.h * s.w;
        T* out = y + p * s.oh * s.ow;
        for (int64_t oy = 0; oy < s.oh; ++oy) {
            pools::column_maxima(s, plane, oy, scratch);
            pools::row_of(s, scratch, out + oy * s.ow);
        }
    }
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_MAXPOOL_H
