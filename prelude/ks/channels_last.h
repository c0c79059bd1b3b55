// ks/channels_last.h — a depthwise convolution of channels-last images (x [images, H, W, C] -> y [images, OH, OW, C]).
//
// Each vector holds L channels of one position, read where it is (no copy, no transpose: ks::conv_depthwise's
// `across` path transposes 16 planes in and out). Per output row, run by run of output positions, each run through
// every group of L channels (so the input lines a run reads, a few positions of a few rows, come from L1 for every
// group): the positions whose windows lie inside the image's columns (the interior) run 8 or 4 at a time, each input
// vector of a kernel row loaded once for all the taps of the run that read it, as depthwise::across_reuse; the runs
// that reach the left or right padding, and the last few positions of a row, skip the input vectors outside the image
// (run_masked: a 7-wide row is one run). Kernel rows that fall in the top or bottom padding are skipped for the whole
// output row. So no padded copy: only the last group of channels, when C is not a multiple of L, is read and written
// with partial vectors.
//
// The weights [C, taps] (ONNX's layout) are transposed into scratch as [taps, C rounded up to L], zero-padded
// (depthwise_cl_scratch elements); an affine epilogue (bias by channel: one per lane, bounds) is applied to the
// accumulators before they are stored, any other epilogue over each output row (rows: channels, 1 apart; columns:
// positions, C apart).
#ifndef KS_CHANNELS_LAST_H
#define KS_CHANNELS_LAST_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "conv.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

namespace cl {

// The first n lanes of a vector at p (the others zero).
template <class T>
inline typename tiles::simd<T>::v load_part(const T* p, conv_dim n) {
    using V = typename tiles::simd<T>::v;
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) {
        if constexpr (sizeof(T) == 4) {
            const __m512 v = _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p);
            return reinterpret_cast<const V&>(v);
        } else {
            const __m512d v = _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1), p);
            return reinterpret_cast<const V&>(v);
        }
    }
#endif
#if defined(__AVX2__)
    if constexpr (sizeof(V) == 32) {  // (AVX2's masked loads: no array in the frame)
        if constexpr (sizeof(T) == 4) {
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const __m256 v = _mm256_maskload_ps(reinterpret_cast<const float*>(p), mask);
            return reinterpret_cast<const V&>(v);
        } else {
            const __m256i mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
            const __m256d v = _mm256_maskload_pd(reinterpret_cast<const double*>(p), mask);
            return reinterpret_cast<const V&>(v);
        }
    }
#endif
    T lanes[tiles::simd<T>::lanes] = {};
    for (conv_dim l = 0; l < n; ++l) {
        lanes[l] = p[l];
    }
    V r;
    std::memcpy(&r, lanes, sizeof r);
    return r;
}

// The vector of L channels at p: whole (PART false) or its first n lanes.
template <class T, bool PART>
__attribute__((always_inline)) inline typename tiles::simd<T>::v at(const T* p, conv_dim n) {
    if constexpr (PART) {
        return load_part<T>(p, n);
    } else {
        (void)n;
        return tiles::load<T>(p);
    }
}

// What one output row of one group of channels reads: the image row of kernel row 0 (`top`), the kernel rows inside
// the image [i0, i1), the group's first channel's input and weights, the output row.
template <class T>
struct row_job {
    const T* x;   // (the image, from the group's first channel)
    const T* w;   // (the transposed weights, from the group's first channel)
    T* y;         // (the output row, from the group's first channel)
    conv_dim top;  // (image row of kernel row 0)
    conv_dim i0;
    conv_dim i1;
    conv_dim n;    // (the group's channels, at most L)
    typename tiles::simd<T>::v bias;
};

// U output positions of a row from ow by the generic rule: any kernel, stride and dilation, taps j in [j0, j1)
// (the columns inside the image), the sums stored with the affine epilogue (fin) applied.
template <class T, int U, bool PART>
KS_OWN_FRAME void run_any(const conv_shape& s, const row_job<T>& job, conv_dim C, conv_dim cw,
                                                   conv_dim ow, conv_dim j0, conv_dim j1, const affine<T>& fin) {
    using V = typename tiles::simd<T>::v;
    constexpr int L = tiles::simd<T>::lanes;
    const conv_dim in2 = s.in[2], kw = s.kernel[2], dh = s.dilation[1], dw = s.dilation[2], sw = s.stride[2];
    const conv_dim left = ow * sw - s.pad[2];
    V acc[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        acc[u] = tiles::splat<T>(T(0));
    }
    for (conv_dim i = job.i0; i < job.i1; ++i) {
        const T* row = job.x + ((job.top + i * dh) * in2 + left) * C;
        for (conv_dim j = j0; j < j1; ++j) {
            const V wv = tiles::load<T>(job.w + (i * kw + j) * cw);
            const T* p = row + j * dw * C;
#pragma GCC unroll 8
            for (int u = 0; u < U; ++u) {
                acc[u] += wv * at<T, PART>(p + u * sw * C, job.n);
            }
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        V v = fin ? tiles::finish_lanes<T>(acc[u], fin, job.bias) : acc[u];
        tiles::store<T>(v, job.y + (ow + u) * C, PART ? static_cast<int>(job.n) : L, false);
    }
}

// U interior positions from ow for a kernel KW wide, column stride S and dilation 1 (MobileNet's and EfficientNet's
// 3 × 3 and 5 × 5, stride 1 or 2; any row dilation): each input vector of a kernel row loaded once for the U positions' taps that read
// it ((U - 1) · S + KW loads a kernel row, not U · KW), the row's KW weight vectors once for the U.
template <class T, int U, int KW, int S, bool PART>
KS_OWN_FRAME void run_reuse(const conv_shape& s, const row_job<T>& job, conv_dim C,
                                                     conv_dim cw, conv_dim ow, const affine<T>& fin) {
    using V = typename tiles::simd<T>::v;
    constexpr int L = tiles::simd<T>::lanes;
    constexpr int loads = (U - 1) * S + KW;
    const conv_dim in2 = s.in[2], down = s.dilation[1] * in2 * C;
    const T* row = job.x + ((job.top + job.i0 * s.dilation[1]) * in2 + ow * S - s.pad[2]) * C;
    const T* wrow = job.w + job.i0 * KW * cw;
    V acc[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        acc[u] = tiles::splat<T>(T(0));
    }
    for (conv_dim i = job.i0; i < job.i1; ++i, row += down, wrow += KW * cw) {
        V wv[KW];
#pragma GCC unroll 8
        for (int j = 0; j < KW; ++j) {
            wv[j] = tiles::load<T>(wrow + j * cw);
        }
#pragma GCC unroll 32
        for (int v = 0; v < loads; ++v) {
            const V in = at<T, PART>(row + v * C, job.n);
#pragma GCC unroll 8
            for (int u = 0; u < U; ++u) {  // (tap j = v - u · S of position u, when the kernel has it)
                if (v - u * S >= 0 && v - u * S < KW) {
                    acc[u] += wv[v - u * S] * in;
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        V v = fin ? tiles::finish_lanes<T>(acc[u], fin, job.bias) : acc[u];
        tiles::store<T>(v, job.y + (ow + u) * C, PART ? static_cast<int>(job.n) : L, false);
    }
}

// The same for U positions from ow of which the first `count` are stored, whose windows may reach the left or right
// padding: the input vectors outside the image's columns are neither loaded nor used (a row's edges and its last few
// positions; a 7 × 7 plane's row is one such run, where one position at a time read each vector up to 5 times).
template <class T, int U, int KW, int S, bool PART>
KS_OWN_FRAME void run_masked(const conv_shape& s, const row_job<T>& job, conv_dim C,
                                                      conv_dim cw, conv_dim ow, conv_dim count, const affine<T>& fin) {
    using V = typename tiles::simd<T>::v;
    constexpr int L = tiles::simd<T>::lanes;
    constexpr int loads = (U - 1) * S + KW;
    const conv_dim in2 = s.in[2], down = s.dilation[1] * in2 * C, first = ow * S - s.pad[2];
    const conv_dim va = first < 0 ? -first : 0, vb = in2 - first;  // (the slots v inside the image: [va, vb))
    const T* row = job.x + (job.top + job.i0 * s.dilation[1]) * in2 * C;
    const T* wrow = job.w + job.i0 * KW * cw;
    V acc[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        acc[u] = tiles::splat<T>(T(0));
    }
    for (conv_dim i = job.i0; i < job.i1; ++i, row += down, wrow += KW * cw) {
        V wv[KW];
#pragma GCC unroll 8
        for (int j = 0; j < KW; ++j) {
            wv[j] = tiles::load<T>(wrow + j * cw);
        }
#pragma GCC unroll 32
        for (int v = 0; v < loads; ++v) {
            if (v < va || v >= vb) {
                continue;
            }
            const V in = at<T, PART>(row + (first + v) * C, job.n);
#pragma GCC unroll 8
            for (int u = 0; u < U; ++u) {
                if (v - u * S >= 0 && v - u * S < KW) {
                    acc[u] += wv[v - u * S] * in;
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
        if (u < count) {
            V v = fin ? tiles::finish_lanes<T>(acc[u], fin, job.bias) : acc[u];
            tiles::store<T>(v, job.y + (ow + u) * C, PART ? static_cast<int>(job.n) : L, false);
        }
    }
}

// The taps [j0, j1) of the kernel's columns that read inside the image for output column ow.
inline void inside_taps(const conv_shape& s, conv_dim ow, conv_dim& j0, conv_dim& j1) {
    const conv_dim left = ow * s.stride[2] - s.pad[2], dw = s.dilation[2], kw = s.kernel[2];
    j0 = left >= 0 ? 0 : tiles::index_div(-left + dw - 1, dw);
    const conv_dim room = s.in[2] - left;  // (taps j with left + j · dw < in)
    j1 = room <= 0 ? 0 : tiles::index_div(room + dw - 1, dw);
    j1 = j1 < kw ? j1 : kw;
    j0 = j0 < j1 ? j0 : j1;
}

// The output columns [lo, hi) whose windows lie inside the image's columns.
inline void interior(const conv_shape& s, conv_dim& lo, conv_dim& hi) {
    const conv_dim sw = s.stride[2], span = (s.kernel[2] - 1) * s.dilation[2];
    lo = tiles::index_div(s.pad[2] + sw - 1, sw);
    const conv_dim last = s.in[2] - 1 - span + s.pad[2];  // (ow · sw ≤ last)
    hi = last < 0 ? 0 : tiles::index_div(last, sw) + 1;
    hi = hi < s.out[2] ? hi : s.out[2];
    lo = lo < hi ? lo : hi;
}

// f(part, job) for each group of L channels of an output row (part: std::true_type for a last, partial group): the
// positions of a run are computed for all channels before the next run, so that the input lines they read (a few
// positions of a few rows, all channels) are read from L1 by every group.
template <class T, class F>
__attribute__((always_inline)) inline void each_group(const row_job<T>& whole, conv_dim C, const affine<T>& fin,
                                                      const F& f) {
    constexpr int L = tiles::simd<T>::lanes;
    row_job<T> job = whole;
    conv_dim c0 = 0;
    for (; c0 + L <= C; c0 += L) {
        job.x = whole.x + c0;
        job.w = whole.w + c0;
        job.y = whole.y + c0;
        job.n = L;
        job.bias = fin && fin.bias != nullptr ? tiles::load<T>(fin.bias + c0) : tiles::splat<T>(T(0));
        f(std::false_type{}, job);
    }
    if (c0 < C) {
        job.x = whole.x + c0;
        job.w = whole.w + c0;
        job.y = whole.y + c0;
        job.n = C - c0;
        job.bias = fin && fin.bias != nullptr ? load_part<T>(fin.bias + c0, C - c0) : tiles::splat<T>(T(0));
        f(std::true_type{}, job);
    }
}

// One output row, all channels, each run of positions through every group of channels before the next: for kernels 3
// or 5 wide, column stride 1 or 2 and dilation 1, runs of 8 or 4 positions inside the image's columns (run_reuse) and
// masked runs elsewhere (run_masked); for other kernels the edge positions one by one over their taps inside the image
// and the interior by runs of 4 (run_any).
template <class T, int KW, int S>
__attribute__((noinline)) void row(const conv_shape& s, const row_job<T>& whole, conv_dim C, conv_dim cw, conv_dim lo,
                                   conv_dim hi, const affine<T>& fin) {
    const conv_dim width = s.out[2];
    conv_dim j0, j1;
    const auto edge = [&](conv_dim ow) {
        inside_taps(s, ow, j0, j1);
        each_group(whole, C, fin, [&](auto part, const row_job<T>& job) {
            run_any<T, 1, decltype(part)::value>(s, job, C, cw, ow, j0, j1, fin);
        });
    };
    conv_dim ow = 0;
    if constexpr (KW > 0) {  // (runs of 8 or 4 inside the columns, masked runs of 8, 4 or 1 elsewhere)
        const auto runs = [&](auto u) {
            constexpr int U = decltype(u)::value;
            each_group(whole, C, fin, [&](auto part, const row_job<T>& job) {
                if constexpr (decltype(part)::value && U == 8) {  // (a partial group: runs of 4, frames under 512 B)
                    run_reuse<T, 4, KW, S, true>(s, job, C, cw, ow, fin);
                    run_reuse<T, 4, KW, S, true>(s, job, C, cw, ow + 4, fin);
                } else {
                    run_reuse<T, U, KW, S, decltype(part)::value>(s, job, C, cw, ow, fin);
                }
            });
            ow += U;
        };
        const auto masked = [&](auto u, conv_dim count) {
            constexpr int U = decltype(u)::value;
            each_group(whole, C, fin, [&](auto part, const row_job<T>& job) {
                if constexpr (decltype(part)::value && U == 8) {
                    run_masked<T, 4, KW, S, true>(s, job, C, cw, ow, count < 4 ? count : 4, fin);
                    if (count > 4) {
                        run_masked<T, 4, KW, S, true>(s, job, C, cw, ow + 4, count - 4, fin);
                    }
                } else {
                    run_masked<T, U, KW, S, decltype(part)::value>(s, job, C, cw, ow, count, fin);
                }
            });
            ow += count;
        };
        while (ow < width) {
            if (ow >= lo && ow + 8 <= hi) {
                runs(std::integral_constant<int, 8>{});
            } else if (ow >= lo && ow + 4 <= hi) {
                runs(std::integral_constant<int, 4>{});
            } else {
                const conv_dim left = width - ow;
                if (left >= 5) {  // (a run ending at the interior: it would not stop there)
                    masked(std::integral_constant<int, 8>{}, left < 8 ? left : 8);
                } else if (left >= 2) {
                    masked(std::integral_constant<int, 4>{}, left);
                } else {
                    masked(std::integral_constant<int, 1>{}, left);
                }
            }
        }
        (void)edge;
        return;
    } else {
        for (; ow < lo; ++ow) {
            edge(ow);
        }
        for (; ow + 4 <= hi; ow += 4) {
            each_group(whole, C, fin, [&](auto part, const row_job<T>& job) {
                run_any<T, 4, decltype(part)::value>(s, job, C, cw, ow, 0, s.kernel[2], fin);
            });
        }
        for (; ow < hi; ++ow) {
            each_group(whole, C, fin, [&](auto part, const row_job<T>& job) {
                run_any<T, 1, decltype(part)::value>(s, job, C, cw, ow, 0, s.kernel[2], fin);
            });
        }
    }
    for (ow = hi > lo ? hi : lo; ow < width; ++ow) {
        edge(ow);
    }
}

// One output row (image row `top` of kernel row 0, kernel rows [i0, i1) inside the image) by the row function of its
// kernel. (Out of line: the job's vector in a frame of its own.)
template <class T>
KS_OWN_FRAME void row_of(const conv_shape& s, const T* x, const T* w, T* y, conv_dim top, conv_dim i0, conv_dim i1,
                         conv_dim C, conv_dim cw, conv_dim lo, conv_dim hi, const affine<T>& fin) {
    const row_job<T> job{x, w, y, top, i0, i1, tiles::simd<T>::lanes, tiles::splat<T>(T(0))};
    const conv_dim kw = s.kernel[2], sw = s.stride[2];
    if constexpr (sizeof(T) == 4) {  // (float alone: double takes the generic runs, a quarter of the code)
        if (s.dilation[2] == 1 && (kw == 3 || kw == 5) && (sw == 1 || sw == 2)) {
            return kw == 3 ? (sw == 1 ? row<T, 3, 1>(s, job, C, cw, lo, hi, fin) : row<T, 3, 2>(s, job, C, cw, lo, hi, fin))
                           : (sw == 1 ? row<T, 5, 1>(s, job, C, cw, lo, hi, fin) : row<T, 5, 2>(s, job, C, cw, lo, hi, fin));
        }
    }
    row<T, 0, 1>(s, job, C, cw, lo, hi, fin);
}

// The weights w [C, taps] into out [taps, cw], the channels past C zero. (Out of line: a frame of its own.)
template <class T>
KS_OWN_FRAME void transpose_weights(const T* w, conv_dim taps, conv_dim C, conv_dim cw, T* out) {
    for (conv_dim t = 0; t < taps; ++t) {
        for (conv_dim c = 0; c < cw; ++c) {
            out[t * cw + c] = c < C ? w[c * taps + t] : T(0);
        }
    }
}

// The channels rounded up to whole vectors (the transposed weights' row).
template <class T>
constexpr conv_dim weight_row(const conv_shape& s) {
    return (s.channels + tiles::simd<T>::lanes - 1) / tiles::simd<T>::lanes * tiles::simd<T>::lanes;
}

}  // namespace cl

// Whether ks::conv_depthwise_cl computes a convolution: 2-D (the depth axis 1), one output channel per input
// channel.
constexpr bool depthwise_cl_fits(const conv_shape& s) {
    return s.kernel[0] == 1 && s.in[0] == 1 && s.out[0] == 1 && s.groups == s.channels && s.out_channels == s.channels &&
           s.channels > 0;
}

// The scratch elements ks::conv_depthwise_cl uses: the weights transposed, [taps, C rounded up to a vector].
template <class T>
constexpr conv_dim depthwise_cl_scratch(const conv_shape& s) {
    return s.taps() * cl::weight_row<T>(s);
}

// y [images, OH, OW, C] = epi(conv(x, w)) for a depthwise convolution of channels-last images x [images, H, W, C]
// (depthwise_cl_fits; w [C, taps] as ONNX has it). The epilogue's rows are the channels, its columns the positions
// (f(image, c, q, v), as ks::conv_depthwise's).
template <class T>
void conv_depthwise_cl(const conv_shape& s, int64_t images, const T* x, const T* w, T* y, T* scratch,
                       const epilogue<T>& epi = {}) {
    const conv_dim C = s.channels, taps = s.taps(), cw = cl::weight_row<T>(s);
    const conv_dim in_image = s.in[1] * s.in[2] * C, out_image = s.out[1] * s.out[2] * C;
    cl::transpose_weights<T>(w, taps, C, cw, scratch);
    conv_dim lo, hi;
    cl::interior(s, lo, hi);
    const conv_dim kh = s.kernel[1], dh = s.dilation[1];
    for (conv_dim image = 0; image < images; ++image) {
        const epilogue<T> eg = epi.group(image, 0);
        const affine<T> fin = eg.in_registers(0);
        for (conv_dim oh = 0; oh < s.out[1]; ++oh) {
            const conv_dim top = oh * s.stride[1] - s.pad[1];
            conv_dim i0 = top >= 0 ? 0 : tiles::index_div(-top + dh - 1, dh);
            const conv_dim room = s.in[1] - top;
            conv_dim i1 = room <= 0 ? 0 : tiles::index_div(room + dh - 1, dh);
            i1 = i1 < kh ? i1 : kh;
            i0 = i0 < i1 ? i0 : i1;
            T* yrow = y + image * out_image + oh * s.out[2] * C;
            cl::row_of<T>(s, x + image * in_image, scratch, yrow, top, i0, i1, C, cw, lo, hi, fin);
            if (!fin) {
                eg(0, oh * s.out[2], yrow, 1, C, C, s.out[2]);
            }
        }
    }
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_CHANNELS_LAST_H
