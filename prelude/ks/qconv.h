// ks/qconv.h — integer matrix products and convolutions: 8-bit activations (uint8 or int8) times int8
// weights, summed in int32 and requantized to 8 bits, as ONNX's QLinearConv and QLinearMatMul (and
// com.microsoft's QGemm) define them:
//
//     y = saturate(round_half_even(float(Σ (x - x_zero)·w + bias) · scale) + y_zero)
//
// with the sum over a product's depth (a convolution's channels and taps, padding being x_zero), scale =
// x_scale · w_scale / y_scale in float (one per output channel or one for all) and the saturation bounds
// [lo, hi] the output type's range, narrowed by a Relu or Clip folded into the operator. This is onnxruntime's
// arithmetic (its MLAS kernels convert the int32 sum to float, multiply by the float scale and round to
// nearest even), so the results are theirs bit for bit.
//
// The products run on register tiles of up to 8 rows by 32 columns (qtile::rows × qtile::cols). One operand is
// packed as [quad][8 rows][4 bytes], the other as [quad][32 columns][4 bytes] (a quad: four consecutive depths),
// so that each step multiplies four depths of 32 columns by four of each row: AVX-512 VNNI's vpdpbusd does that
// in one instruction per row and 16 columns (unsigned bytes times signed bytes, summed in int32 without
// saturation), and requantizes and stores the tile from its registers; AVX2 widens the bytes to int16 pairs
// (vpmaddwd, exact); elsewhere (Arm, Cortex-M, baseline x86-64) plain loops. A convolution's rows are its output
// channels (the weights) and its columns the output positions; a matrix product's rows are the rows of a and its
// columns those of b (so that one row, batch 1, still fills the vectors). int8 activations are flipped to uint8
// by adding 128 to them and to their zero point, which leaves every x - x_zero unchanged. The weights' zero point
// is 0 (symmetric int8 weights, what onnxruntime's quantizer and TFLite write); the x_zero·Σw term of the sum is
// subtracted once per output channel.
//
// Sizes and indices are ks::conv_dim (ks/conv.h): int64_t, and int32_t on a 32-bit microcontroller, where the
// int64 arithmetic had taken two registers and a call or three instructions per product (a Cortex-M4's ks::qmatmul
// 522 -> 332 B at -Os, the gathered convolution's gather_block 676 -> 386 B; x86 code unchanged, the same type).
#ifndef KS_QCONV_H
#define KS_QCONV_H

#include <cstdint>

#include "conv.h"
#include "cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KS_QTILE_X86 1
#endif
// 32-bit Arm cores with the DSP extension (Cortex-M4, M7, M33 with it; 32-bit A-profile cores too): the dual 16-bit
// multiply-adds of ACLE's arm_acle.h (AArch64 has no such instructions and does not define __ARM_FEATURE_DSP).
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && (defined(__GNUC__) || defined(__clang__))
#include <arm_acle.h>
#define KS_QTILE_DSP 1
#endif
// 64-bit Arm cores with the dot product instructions (Armv8.2-A's optional FEAT_DotProd, Armv8.4-A on: Cortex-A55,
// A76 on, Neoverse; a build for -march=armv8.2-a+dotprod or a -mcpu that has it): the tiles multiply with SDOT, four
// int8 products summed into each int32 lane (the activations as signed bytes: signed_flip).
#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD) && (defined(__GNUC__) || defined(__clang__))
#include <arm_neon.h>
#define KS_QTILE_SDOT 1
#endif
// A microcontroller's build for size (`optimize = "size"`: -Os on an M-profile core): ks::qconv gathers each block of
// positions from the image itself (gather_block), without the phase volumes, tap offsets and wide positions of the
// other builds (about 2 KB of code less; more instructions per element packed, none more per product).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && defined(__OPTIMIZE_SIZE__)
#define KS_QCONV_GATHER 1
#endif

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {

// How an int32 sum becomes an 8-bit output (see the top of this file).
struct requant {
    const int32_t* bias;  // per output channel, or null
    const float* scale;   // per output channel (scales == channels) or one for all (scales == 1)
    conv_dim scales;
    int32_t x_zero;       // the activations' zero point (as stored: an int8 input's own)
    int32_t y_zero;
    int32_t lo, hi;       // saturation bounds of the output
};

namespace qtile {

constexpr conv_dim rows = 8;   // rows of a register tile
constexpr conv_dim cols = 32;  // columns of a register tile
// The columns of a matrix product's packed weights (qpack_columns, qmatmul: a tile's b): the tile's 32, and 4 on a
// microcontroller (an M-profile Arm core), whose tiles (tile_dsp: 4 columns at a time, tile_portable) compute as many
// columns as there are: a classifier's 10 columns are packed as 12, not 32 (with 8: 16, and the int8 MLP of
// benchmarks/cortex_m4 0.1 KB above emx-onnx-cgen's flash; 4 costs it 4% more instructions). ksbuild packs them so
// for such targets (ksbuild/transforms/narrow_qpacks.py; the generated code static_asserts that the two agree).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
constexpr conv_dim product_cols = 4;
#else
constexpr conv_dim product_cols = cols;
#endif
// The columns of a tile's b [quad][width][4]: a convolution's block of positions (SWAP false), a product's weights.
template <bool SWAP>
constexpr conv_dim b_width() {
    return SWAP ? product_cols : cols;
}
constexpr conv_dim depthwise_chunk = 512;  // wide positions a depthwise convolution sums at a time

constexpr conv_dim quads(conv_dim depth) {
    return (depth + 3) / 4;
}
// The part of an input axis of n elements that a padded copy with `room` elements after the padding holds.
constexpr conv_dim clip(conv_dim n, conv_dim room) {
    return n < room ? n : (room > 0 ? room : 0);
}
constexpr conv_dim round_up(conv_dim n, conv_dim to) {
    return tiles::index_div(n + to - 1, to) * to;
}
// Bytes of an operand of n rows (or columns) packed in tiles of `width`.
constexpr conv_dim packed_size(conv_dim n, conv_dim depth, conv_dim width) {
    return round_up(round_up(n, width) * quads(depth) * 4, 64);
}

// An activation as the unsigned byte the tiles multiply (int8: + 128); a weight as its byte.
inline uint8_t unsigned_byte(uint8_t v) {
    return v;
}
inline uint8_t unsigned_byte(int8_t v) {
    return static_cast<uint8_t>(static_cast<int32_t>(v) + 128);
}
template <class TX>
constexpr int32_t unsigned_zero(int32_t zero) {
    return static_cast<TX>(-1) < 0 ? zero + 128 : zero;
}
// What the packing xors an activation's unsigned byte with before the tiles read it: 0x80 where they multiply signed
// bytes by the signed weights (SDOT: Σ (u - 128)·w; the offsets then take the zero point less 128, tile_zero), else 0.
#ifdef KS_QTILE_SDOT
constexpr uint8_t signed_flip = 0x80;
#else
constexpr uint8_t signed_flip = 0;
#endif
// An activation as the tiles read it, and the zero point the offsets take (channel_offsets).
template <class TX>
inline uint8_t tile_byte(TX v) {
    return static_cast<uint8_t>(unsigned_byte(v) ^ signed_flip);
}
template <class TX>
constexpr int32_t tile_zero(int32_t zero) {
    return unsigned_zero<TX>(zero) - (signed_flip ? 128 : 0);
}
inline uint8_t weight_byte(int8_t v) {
    return static_cast<uint8_t>(v);
}

// src [n][depth] (element (i, k) at src[i·rs + k·ks]) packed in tiles of `width` rows, [tile][quad][width][4],
// each element as byte(element), zeros past the ends.
template <class T, class Byte>
void pack(const T* src, conv_dim n, conv_dim depth, conv_dim rs, conv_dim ks, conv_dim width, uint8_t* dst, Byte byte) {
    const conv_dim q = quads(depth);
    for (conv_dim i0 = 0; i0 < n; i0 += width) {
        uint8_t* tile = dst + i0 * q * 4;
        const conv_dim live = n - i0 < width ? n - i0 : width;
        for (conv_dim k = 0; k < q * 4; ++k) {
            uint8_t* out = tile + (k / 4) * width * 4 + k % 4;
            for (conv_dim r = 0; r < width; ++r) {
                out[r * 4] = r < live && k < depth ? byte(src[(i0 + r) * rs + k * ks]) : static_cast<uint8_t>(0);
            }
        }
    }
}

// What pack_rows xors each 4-byte word of activations with: tile_byte of every byte (an int8 byte + 128 is the byte
// xor 0x80; then signed_flip).
template <class TX>
constexpr uint32_t tile_flip() {
    return 0x01010101u * static_cast<uint32_t>((static_cast<TX>(-1) < 0 ? 0x80u : 0u) ^ signed_flip);
}

// pack(a, live, depth, lda, 1, rows, dst, tile_byte) of `live` <= rows contiguous rows of 8-bit activations (ks::qmatmul's
// block of rows), a quad (4 bytes) at a time: the same bytes, where pack's byte loop with its tests took ~9% of
// bert_small's dynamic model at batch 8 (a quarter of the time of the tiles it fed at n = 512).
template <class TX>
void pack_rows(const TX* a, conv_dim live, conv_dim depth, conv_dim lda, uint8_t* dst) {
    constexpr uint32_t flip = tile_flip<TX>();
    const conv_dim whole = depth / 4;
    for (conv_dim k = 0; k < whole; ++k) {
        uint8_t* out = dst + k * rows * 4;
        for (conv_dim r = 0; r < live; ++r) {
            uint32_t w;
            __builtin_memcpy(&w, a + r * lda + k * 4, 4);
            w ^= flip;
            __builtin_memcpy(out + r * 4, &w, 4);
        }
        for (conv_dim r = live; r < rows; ++r) {
            __builtin_memset(out + r * 4, 0, 4);
        }
    }
    if (whole * 4 < depth) {  // (the last quad: zeros past depth)
        uint8_t* out = dst + whole * rows * 4;
        for (conv_dim r = 0; r < rows; ++r) {
            for (conv_dim t = 0; t < 4; ++t) {
                const conv_dim k = whole * 4 + t;
                out[r * 4 + t] = r < live && k < depth ? tile_byte(a[r * lda + k]) : static_cast<uint8_t>(0);
            }
        }
    }
}

// The bytes a packed weights' parts (the tiles, the sums; a group's) are padded to: 64 where the tiles load vectors,
// 8 on a microcontroller (an M-profile core: words, no vectors), where the 64 left up to 60 B of zeros after each part
// in flash (the int8 CNN of benchmarks/cortex_m4: 64 B). ksbuild packs them so for such targets (prims/qlinear.py,
// param align = 8: transforms/narrow_qpacks.py; the generated code static_asserts that the two agree).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
constexpr conv_dim pack_align = 8;
#else
constexpr conv_dim pack_align = 64;
#endif
// The bytes of the tiles of packed weights (packed_size, padded to pack_align).
constexpr conv_dim tiles_size(conv_dim n, conv_dim depth, conv_dim width) {
    return round_up(round_up(n, width) * quads(depth) * 4, pack_align);
}

// Weights as the tiles read them: n rows of `depth` int8 weights packed in tiles of `width` (pack), then each row's
// sum Σ_k w[i, k] as int32 (for the x_zero·Σw part of the requantized sums).
constexpr conv_dim weights_size(conv_dim n, conv_dim depth, conv_dim width) {
    return tiles_size(n, depth, width) + round_up(n * 4, pack_align);
}

// w [n][depth] (element (i, k) at w[i·rs + k·ks]) packed as weights_size describes.
inline void pack_weights(const int8_t* w, conv_dim n, conv_dim depth, conv_dim rs, conv_dim ks, conv_dim width,
                         uint8_t* dst) {
    pack(w, n, depth, rs, ks, width, dst, weight_byte);
    int32_t* sums = reinterpret_cast<int32_t*>(dst + tiles_size(n, depth, width));
    for (conv_dim i = 0; i < n; ++i) {
        int32_t s = 0;
        for (conv_dim k = 0; k < depth; ++k) {
            s += w[i * rs + k * ks];
        }
        sums[i] = s;
    }
}

// offsets[i] = bias[i] - x_zero·Σ_k w[i, k] for the n rows of packed weights: the part of the requantized sum that is
// per output channel.
inline void channel_offsets(const uint8_t* weights, conv_dim n, conv_dim depth, conv_dim width, const int32_t* bias,
                            int32_t x_zero, int32_t* offsets) {
    const int32_t* sums = reinterpret_cast<const int32_t*>(weights + tiles_size(n, depth, width));
    for (conv_dim i = 0; i < n; ++i) {
        offsets[i] = (bias ? bias[i] : 0) - x_zero * sums[i];
    }
}

// Whether ks::qmatmul reads the bias as its offsets when the tiles' zero point (tile_zero) is 0, leaving the packed
// weights' sums unread: on a microcontroller, where ksbuild folds x_zero·Σw of constant weights into the bias when it
// compiles the package and packs them without the sums (transforms/narrow_qpacks.py: 0.6 KB of the int8 MLP's flash).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
constexpr bool bias_offsets = true;
#else
constexpr bool bias_offsets = false;
#endif

// Where a tile's results go: `live` rows of `count` columns, row r at y + r·ld (bytes: the int8 and uint8 outputs
// alike, each value already within its type), requantized with the offsets and scales of its rows (by_row) or of
// its columns (pointers at the tile's first), one scale for all when one_scale.
struct tile_out {
    const int32_t* offsets;
    const float* scale;
    bool by_row, one_scale;
    float lo, hi;  // the bounds less the zero point
    int32_t zero;
    uint8_t* y;
    conv_dim ld, live, count;
    int32_t* acc;  // room for the sums [8][32] (the paths that store from memory)
    bool sums;     // y holds int32 (ld in int32): the sums plus the offsets stored as they are, not requantized
};

// One requantized value (see the top of the file): clamped in float to the bounds less the zero point, then
// rounded half to even by adding and subtracting 1.5·2^23 (exact for the |v| < 2^22 the bounds leave).
inline int32_t requantize(int32_t sum, float scale, float lo, float hi, int32_t zero) {
    float v = static_cast<float>(sum) * scale;
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    v = (v + 12582912.0f) - 12582912.0f;
    return static_cast<int32_t>(v) + zero;
}

// The sums acc [8][32] plus the offsets of their columns, as int32 (o.sums: ks::qmatmul with int32 results).
inline void store_raw(const int32_t* acc, const tile_out& o) {
    for (conv_dim r = 0; r < o.live; ++r) {
        const int32_t* a = acc + r * cols;
        int32_t* y = reinterpret_cast<int32_t*>(o.y) + r * o.ld;
        KS_OMP_SIMD()
        for (conv_dim c = 0; c < o.count; ++c) {
            y[c] = a[c] + (o.by_row ? o.offsets[r] : o.offsets[c]);
        }
    }
}

// The sums acc [8][32] plus their offsets, requantized (every store but ks::qmatmul's with int32 results).
inline void store_requantized(const int32_t* acc, const tile_out& o) {
    for (conv_dim r = 0; r < o.live; ++r) {
        const int32_t* a = acc + r * cols;
        uint8_t* y = o.y + r * o.ld;
        if (o.by_row) {
            const int32_t off = o.offsets[r];
            const float scale = o.scale[o.one_scale ? 0 : r];
            KS_OMP_SIMD()
            for (conv_dim c = 0; c < o.count; ++c) {
                y[c] = static_cast<uint8_t>(requantize(a[c] + off, scale, o.lo, o.hi, o.zero));
            }
        } else {
            KS_OMP_SIMD()
            for (conv_dim c = 0; c < o.count; ++c) {
                const float scale = o.scale[o.one_scale ? 0 : c];
                y[c] = static_cast<uint8_t>(requantize(a[c] + o.offsets[c], scale, o.lo, o.hi, o.zero));
            }
        }
    }
}

// The sums acc [8][32] stored as o says.
inline void store_sums(const int32_t* acc, const tile_out& o) {
    if (o.sums) {
        store_raw(acc, o);
        return;
    }
    store_requantized(acc, o);
}

// A tile: sums over q quads of a [quad][8][4] (the broadcast operand) times b [quad][32][4]; SWAP says which one
// holds the unsigned bytes (false: b, the activations of a convolution; true: a, the rows of a matrix product).
template <bool SWAP>
void tile_portable(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    int32_t* acc = o.acc;
    for (conv_dim i = 0; i < rows * cols; ++i) {
        acc[i] = 0;
    }
    for (conv_dim k = 0; k < q; ++k) {
        const uint8_t* ak = a + k * rows * 4;
        const uint8_t* bk = b + k * b_width<SWAP>() * 4;
        for (conv_dim r = 0; r < o.live; ++r) {
            int32_t w[4];
            for (int t = 0; t < 4; ++t) {
                w[t] = SWAP ? static_cast<int32_t>(ak[r * 4 + t]) : static_cast<int8_t>(ak[r * 4 + t]);
            }
            int32_t* out = acc + r * cols;
            for (conv_dim c = 0; c < b_width<SWAP>(); ++c) {
                const uint8_t* x = bk + c * 4;
                int32_t s = 0;
                for (int t = 0; t < 4; ++t) {
                    s += w[t] * (SWAP ? static_cast<int32_t>(static_cast<int8_t>(x[t])) : static_cast<int32_t>(x[t]));
                }
                out[c] += s;
            }
        }
    }
    store_sums(acc, o);
}

#ifdef KS_QTILE_DSP
// A word of four bytes as two words of two 16-bit lanes (SXTB16 / UXTB16: bytes 0 and 2, sign- or zero-extended;
// their ROR #8 forms: bytes 1 and 3), which SMLAD multiplies lane by lane, adding both products to an int32: four
// byte products in two multiply-adds. The unsigned bytes (0..255) are exact as signed 16-bit lanes; each SMLAD adds
// at most 2 · 255 · 128 to a sum that stays within int32 as the portable loops' does.
struct byte_lanes {
    int32_t even, odd;
};

template <bool SIGNED>
inline byte_lanes lanes_of(const uint8_t* p) {
    uint32_t word;
    __builtin_memcpy(&word, p, 4);  // (one LDR: unaligned loads are allowed on the M4 and M7)
    byte_lanes l;
    if (SIGNED) {  // (GCC 12's arm_acle.h has no __ror, and does not fold a rotation into SXTB16: the ROR form by hand)
        l.even = __sxtb16(static_cast<int32_t>(word));
        __asm__("sxtb16 %0, %1, ror #8" : "=r"(l.odd) : "r"(word));
    } else {
        l.even = static_cast<int32_t>(__uxtb16(word));
        __asm__("uxtb16 %0, %1, ror #8" : "=r"(l.odd) : "r"(word));
    }
    return l;
}

inline int32_t dot4(const byte_lanes& a, const byte_lanes& b, int32_t sum) {
    return __smlad(a.odd, b.odd, __smlad(a.even, b.even, sum));
}

// tile_portable with SMLAD (Cortex-M4/M7): one row of a by 4 columns of b at a time, their 4 sums in registers over
// all quads (a row's quad extended once for the 4 columns: 5 loads, 10 extensions and 8 SMLAD per 16 products), the
// columns up to o.count rounded up to 4 (b's b_width columns are packed; the ones past o.count are not stored).
template <bool SWAP>
void tile_dsp(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    int32_t* acc = o.acc;
    const int32_t n = static_cast<int32_t>((o.count + 3) & ~conv_dim{3}), live = static_cast<int32_t>(o.live);
    const int32_t quads_n = static_cast<int32_t>(q);
    for (int32_t r = 0; r < live; ++r) {
        for (int32_t c = 0; c < n; c += 4) {
            const uint8_t* ak = a + r * 4;
            const uint8_t* bk = b + c * 4;
            int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            KS_ROLLED for (int32_t k = 0; k < quads_n; ++k, ak += rows * 4, bk += b_width<SWAP>() * 4) {
                const byte_lanes w = lanes_of<!SWAP>(ak);
                s0 = dot4(w, lanes_of<SWAP>(bk), s0);
                s1 = dot4(w, lanes_of<SWAP>(bk + 4), s1);
                s2 = dot4(w, lanes_of<SWAP>(bk + 8), s2);
                s3 = dot4(w, lanes_of<SWAP>(bk + 12), s3);
            }
            int32_t* out = acc + r * cols + c;
            out[0] = s0;
            out[1] = s1;
            out[2] = s2;
            out[3] = s3;
        }
    }
    if (SWAP) {
        store_sums(acc, o);
    } else {  // (a convolution's tile: never int32 results, so a microcontroller's program need not link store_raw)
        store_requantized(acc, o);
    }
}
#endif

#ifdef KS_QTILE_SDOT
// Rows r0 .. r0 + 4 of a quad of a (one vector: 4 rows of 4 bytes) times 16 columns of b (4 vectors of 4 columns):
// SDOT by element, lane i of a for row r0 + i (s[i][j]: row r0 + i, columns 4j .. 4j + 3).
template <int I>
inline void sdot_row(int32x4_t (&s)[4][4], int8x16_t a, const int8x16_t (&b)[4]) {
    for (int j = 0; j < 4; ++j) {
        s[I][j] = vdotq_laneq_s32(s[I][j], b[j], a, I);
    }
}

// tile_portable with SDOT (AArch64 FEAT_DotProd): 4 rows by 16 columns at a time, their 16 vectors of sums in
// registers over all quads (per quad 5 loads and 16 SDOT: 256 products); both operands signed bytes (the
// activations less 128: signed_flip), so one code for either SWAP.
template <bool SWAP>
void tile_sdot(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    for (conv_dim r0 = 0; r0 < o.live; r0 += 4) {
        for (conv_dim c0 = 0; c0 < o.count; c0 += 16) {
            int32x4_t s[4][4];
            for (int i = 0; i < 4; ++i) {
                for (int j = 0; j < 4; ++j) {
                    s[i][j] = vdupq_n_s32(0);
                }
            }
            const int8_t* ak = reinterpret_cast<const int8_t*>(a) + r0 * 4;
            const int8_t* bk = reinterpret_cast<const int8_t*>(b) + c0 * 4;
            for (conv_dim k = 0; k < q; ++k, ak += rows * 4, bk += b_width<SWAP>() * 4) {
                const int8x16_t av = vld1q_s8(ak);
                const int8x16_t bv[4] = {vld1q_s8(bk), vld1q_s8(bk + 16), vld1q_s8(bk + 32), vld1q_s8(bk + 48)};
                sdot_row<0>(s, av, bv);
                sdot_row<1>(s, av, bv);
                sdot_row<2>(s, av, bv);
                sdot_row<3>(s, av, bv);
            }
            for (int i = 0; i < 4; ++i) {
                for (int j = 0; j < 4; ++j) {
                    vst1q_s32(o.acc + (r0 + i) * cols + c0 + 4 * j, s[i][j]);
                }
            }
        }
    }
    store_sums(o.acc, o);
}
#endif

#ifdef KS_QTILE_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // (GCC 12's _mm512_undefined_ps() initializes a value with itself)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// acc + the sums of a's unsigned bytes times b's signed bytes, four to an int32 lane (vpdpbusd). GCC 12 gives
// _mm512_dpbusd_epi32's sums registers 16-31 and copies each one to a low register and back around every
// instruction (twice the tile's instructions, and spills), so for GCC the instruction is written out.
__attribute__((target("avx512f,avx512vnni"), always_inline)) inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
#if defined(__GNUC__) && !defined(__clang__)
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, a, b);
#endif
}

// The weights a tile reads next, fetched ahead into the caches (prefetcht0): `prefetch_ahead` bytes of a
// convolution's packed weights (32 bytes a quad: 128 quads ahead), twice as many of a matrix product's (128 bytes a
// quad). A network's weights come from memory or the L3 (ResNet-18's 11 MB; a 512-channel 3 × 3 layer's 2.4 MB read
// once per block of positions), at a pace the hardware prefetchers did not keep up with: in a sequence of ResNet-18's
// convolutions its 7 × 7 layers took 0.45 ms each against 0.29 ms with their weights in the caches; with this, 0.30
// (benchmarks/README.md, int8). Prefetches past the end of the weights are harmless (they do not fault).
constexpr conv_dim prefetch_ahead = 4096;

template <bool SWAP>
__attribute__((always_inline)) inline void prefetch_weights(const uint8_t* ak, const uint8_t* bk) {
    if (SWAP) {
        _mm_prefetch(reinterpret_cast<const char*>(bk + 2 * prefetch_ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(bk + 2 * prefetch_ahead + 64), _MM_HINT_T0);
    } else {
        _mm_prefetch(reinterpret_cast<const char*>(ak + prefetch_ahead), _MM_HINT_T0);
    }
}

// AVX-512 VNNI: R rows × V vectors of 16 columns (V = 1 for a tile of at most 16 columns: a last block's), one
// vpdpbusd per row and vector per quad; the sums requantized in registers (vcvtps2dq rounds half to even) and stored
// with masks.
template <bool SWAP, int R, int V>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_vnni_rows(const uint8_t* a, const uint8_t* b,
                                                                           conv_dim q, const tile_out& o) {
    // (o's fields copied first: the byte stores below may alias them, so GCC would load them again after each)
    const conv_dim n0 = o.count < 16 ? o.count : 16, n1 = o.count - n0;
    const __mmask16 m[2] = {static_cast<__mmask16>((1u << n0) - 1), static_cast<__mmask16>((1u << n1) - 1)};
    const bool by_row = o.by_row, one_scale = o.one_scale;
    const int32_t* offsets = o.offsets;
    const float* scales = o.scale;
    const bool raw = o.sums;
    __m512i c[R][V];  // (starting from the offsets)
    KS_UNROLL for (int r = 0; r < R; ++r) {
        KS_UNROLL for (int h = 0; h < V; ++h) {
            c[r][h] = by_row ? _mm512_set1_epi32(offsets[r]) : _mm512_maskz_loadu_epi32(m[h], offsets + 16 * h);
        }
    }
    for (conv_dim k = 0; k < q; ++k) {
        __m512i bv[V];
        KS_UNROLL for (int h = 0; h < V; ++h) {
            bv[h] = _mm512_loadu_si512(b + k * cols * 4 + 64 * h);
        }
        const uint8_t* ak = a + k * rows * 4;
        prefetch_weights<SWAP>(ak, b + k * cols * 4);
        KS_UNROLL for (int r = 0; r < R; ++r) {
            int32_t w;
            __builtin_memcpy(&w, ak + r * 4, 4);
            const __m512i wv = _mm512_set1_epi32(w);
            KS_UNROLL for (int h = 0; h < V; ++h) {
                c[r][h] = SWAP ? dpbusd(c[r][h], wv, bv[h]) : dpbusd(c[r][h], bv[h], wv);
            }
        }
    }
    const __m512 lo = _mm512_set1_ps(o.lo), hi = _mm512_set1_ps(o.hi);
    const __m512i zero = _mm512_set1_epi32(o.zero);
    uint8_t* y = o.y;
    const conv_dim ld = o.ld;
    if (raw) {  // (int32 results: the sums as they are)
        KS_UNROLL for (int r = 0; r < R; ++r) {
            KS_UNROLL for (int h = 0; h < V; ++h) {
                _mm512_mask_storeu_epi32(reinterpret_cast<int32_t*>(y) + r * ld + 16 * h, m[h], c[r][h]);
            }
        }
        return;
    }
    KS_UNROLL for (int r = 0; r < R; ++r) {
        KS_UNROLL for (int h = 0; h < V; ++h) {
            const __m512 scale = by_row ? _mm512_set1_ps(scales[one_scale ? 0 : r])
                                        : (one_scale ? _mm512_set1_ps(scales[0])
                                                     : _mm512_maskz_loadu_ps(m[h], scales + 16 * h));
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(c[r][h]), scale);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            _mm512_mask_cvtepi32_storeu_epi8(y + r * ld + 16 * h, m[h], _mm512_add_epi32(_mm512_cvtps_epi32(v), zero));
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <bool SWAP, int V>
void tile_vnni_vectors(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    switch (o.live) {
        case 1: return tile_vnni_rows<SWAP, 1, V>(a, b, q, o);
        case 2: return tile_vnni_rows<SWAP, 2, V>(a, b, q, o);
        case 3: return tile_vnni_rows<SWAP, 3, V>(a, b, q, o);
        case 4: return tile_vnni_rows<SWAP, 4, V>(a, b, q, o);
        case 5: return tile_vnni_rows<SWAP, 5, V>(a, b, q, o);
        case 6: return tile_vnni_rows<SWAP, 6, V>(a, b, q, o);
        case 7: return tile_vnni_rows<SWAP, 7, V>(a, b, q, o);
        default: return tile_vnni_rows<SWAP, 8, V>(a, b, q, o);
    }
}

template <bool SWAP>
void tile_vnni(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    if (o.count <= 16) {
        return tile_vnni_vectors<SWAP, 1>(a, b, q, o);
    }
    return tile_vnni_vectors<SWAP, 2>(a, b, q, o);
}

// The bytes of v's quads as int16 pairs: the even bytes and the odd ones, zero- or sign-extended.
template <bool SIGNED>
__attribute__((target("avx2"))) inline __m256i even_bytes(__m256i v) {
    return SIGNED ? _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8) : _mm256_and_si256(v, _mm256_set1_epi16(0x00ff));
}
template <bool SIGNED>
__attribute__((target("avx2"))) inline __m256i odd_bytes(__m256i v) {
    return SIGNED ? _mm256_srai_epi16(v, 8) : _mm256_srli_epi16(v, 8);
}

// AVX2 (x86-64-v3 without VNNI): both operands' bytes widened to int16 pairs (the even bytes of a quad, the odd ones)
// and multiplied with vpmaddwd, which sums each pair into int32 exactly (vpmaddubsw, onnxruntime's, saturates: the
// top of the file). A block of R rows (up to 4) by V vectors of 8 columns keeps its sums in registers over the whole
// depth and requantizes them there. The broadcast operand's rows (the weights of a convolution, the rows of a matrix
// product) are widened avx2_chunk quads at a time into a buffer on the stack and broadcast from it (vpbroadcastd
// from memory: a load, no vector instruction), so that a quad costs per row and vector two vpmaddwd and two
// additions, and per vector (shared by the rows) the widening of its bytes: about 2.3 vector instructions per
// vpmaddwd where widening both in registers took 3. (On the Zen 3 of the twentieth session the tile alone ran as
// fast with the rows widened in registers: there vpmaddwd and vpaddd share three pipes, 16 of each took 10.3 cycles
// and 16 vpmaddwd alone 7.9, which bounds both forms near 24 products a cycle; onnxruntime's inexact vpmaddubsw,
// vpmaddwd by ones and vpaddd, three instructions per 32 products, near 32.)
constexpr conv_dim avx2_chunk = 8;

// The quads k0 .. k0 + n of the 4 rows at a (a tile's [quad][8][4], from its row r0) as int16 pairs: wide[k][0] the
// even bytes of the rows' quads (one int32 pair a row), wide[k][1] the odd ones.
template <bool SIGNED>
__attribute__((target("avx2"))) inline void widen_rows(const uint8_t* a, conv_dim n, int32_t (*wide)[2][4]) {
    for (conv_dim k = 0; k < n; ++k) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + k * rows * 4));
        const __m128i e = SIGNED ? _mm_srai_epi16(_mm_slli_epi16(v, 8), 8) : _mm_and_si128(v, _mm_set1_epi16(0x00ff));
        const __m128i o = SIGNED ? _mm_srai_epi16(v, 8) : _mm_srli_epi16(v, 8);
        _mm_store_si128(reinterpret_cast<__m128i*>(wide[k][0]), e);
        _mm_store_si128(reinterpret_cast<__m128i*>(wide[k][1]), o);
    }
}

// Lanes i < n of 8 set (all bits), the others 0: a mask for vpmaskmovd.
__attribute__((target("avx2"))) inline __m256i lanes_below(conv_dim n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The low bytes of the int32 lanes of v[0 .. V) (each already within its 8-bit type), stored at y: n of them (up to
// 8·V; two vectors packed together, their 16 bytes put in order with one vpermd).
template <int V>
__attribute__((target("avx2"), always_inline)) inline void store_bytes(const __m256i (&v)[V], uint8_t* y, conv_dim n) {
    const __m256i low = _mm256_set1_epi16(0x00ff);
    __m128i bytes;
    if (V == 1) {
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v[0]), _mm256_extracti128_si256(v[0], 1));
        bytes = _mm_packus_epi16(_mm_and_si128(w, _mm256_castsi256_si128(low)), w);  // (exact: in int16)
    } else {  // (per 128-bit lane: positions 0-3 of v[0], of v[1]; then 4-7 of each)
        const __m256i w = _mm256_and_si256(_mm256_packs_epi32(v[0], v[V - 1]), low);
        const __m256i b = _mm256_packus_epi16(w, w);
        bytes = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
    }
    if (n >= 8 * V) {
        if (V == 1) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(y), bytes);
        } else {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y), bytes);
        }
        return;
    }
    alignas(16) uint8_t t[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), bytes);
    for (conv_dim i = 0; i < n; ++i) {
        y[i] = t[i];
    }
}

// The R × V sums of a block (rows r0 .., columns c0 ..) stored as o says: requantized to bytes (vcvtps2dq rounds
// half to even, as requantize), or as int32 (o.sums). (o's fields copied first: the byte stores may alias them.)
template <int R, int V>
__attribute__((target("avx2"), always_inline)) inline void store_block(__m256i (&c)[R][V], const tile_out& o, int r0,
                                                                       int c0) {
    const conv_dim n = o.count - c0, ld = o.ld;  // (n: the columns to store, 8·(V - 1) < n <= 8·V)
    const bool by_row = o.by_row, one_scale = o.one_scale, sums = o.sums;
    const int32_t* offsets = o.offsets;
    const float* scales = o.scale;
    uint8_t* y = o.y;
    const __m256 lo = _mm256_set1_ps(o.lo), hi = _mm256_set1_ps(o.hi);
    const __m256i zero = _mm256_set1_epi32(o.zero);
    __m256i live[V], off[V];
    __m256 col_scale[V];
    KS_UNROLL for (int h = 0; h < V; ++h) {
        live[h] = lanes_below(n - 8 * h);
        off[h] = by_row ? _mm256_setzero_si256() : _mm256_maskload_epi32(offsets + c0 + 8 * h, live[h]);
        col_scale[h] = one_scale ? _mm256_set1_ps(scales[0])
                       : by_row  ? _mm256_setzero_ps()
                                 : _mm256_maskload_ps(scales + c0 + 8 * h, live[h]);
    }
    KS_UNROLL for (int r = 0; r < R; ++r) {
        __m256i out[V];
        KS_UNROLL for (int h = 0; h < V; ++h) {
            out[h] = _mm256_add_epi32(c[r][h], by_row ? _mm256_set1_epi32(offsets[r0 + r]) : off[h]);
        }
        if (sums) {
            KS_UNROLL for (int h = 0; h < V; ++h) {
                _mm256_maskstore_epi32(reinterpret_cast<int*>(y) + (r0 + r) * ld + c0 + 8 * h, live[h], out[h]);
            }
            continue;
        }
        KS_UNROLL for (int h = 0; h < V; ++h) {
            const __m256 scale = by_row && !one_scale ? _mm256_set1_ps(scales[r0 + r]) : col_scale[h];
            const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(out[h]), scale), lo), hi);
            out[h] = _mm256_add_epi32(_mm256_cvtps_epi32(v), zero);
        }
        store_bytes<V>(out, y + (r0 + r) * ld + c0, n);
    }
}

// c + the pairs of x times the pairs of w summed (vpmaddwd, vpaddd). For GCC written out: it reassociates the
// additions of a quad's products (the even and odd bytes' summed first), which keeps twice the products live and
// spills the sums of a block.
__attribute__((target("avx2"), always_inline)) inline __m256i madd_add(__m256i c, __m256i x, __m256i w) {
#if defined(__GNUC__) && !defined(__clang__)
    __m256i t;
    asm("vpmaddwd %[w], %[x], %[t]\n\tvpaddd %[t], %[c], %[c]" : [c] "+x"(c), [t] "=&x"(t) : [x] "x"(x), [w] "x"(w));
    return c;
#else
    return _mm256_add_epi32(c, _mm256_madd_epi16(x, w));
#endif
}

// One block of a tile: rows r0 .. r0 + R of a, columns c0 .. c0 + 8·V of b.
template <bool SWAP, int R, int V>
__attribute__((target("avx2"))) void tile_avx2_block(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o,
                                                     int r0, int c0) {
    __m256i c[R][V];
    KS_UNROLL for (int r = 0; r < R; ++r) {
        KS_UNROLL for (int h = 0; h < V; ++h) {
            c[r][h] = _mm256_setzero_si256();
        }
    }
    alignas(16) int32_t wide[avx2_chunk][2][4];
    for (conv_dim k0 = 0; k0 < q; k0 += avx2_chunk) {
        const conv_dim n = q - k0 < avx2_chunk ? q - k0 : avx2_chunk;
        widen_rows<!SWAP>(a + k0 * rows * 4 + r0 * 4, n, wide);
        for (conv_dim k = 0; k < n; ++k) {
            const uint8_t* bk = b + (k0 + k) * b_width<SWAP>() * 4 + c0 * 4;
            prefetch_weights<SWAP>(a + (k0 + k) * rows * 4, bk);
            KS_UNROLL for (int half = 0; half < 2; ++half) {  // (the even bytes, then the odd: fewer registers live)
                __m256i x[V];
                KS_UNROLL for (int h = 0; h < V; ++h) {
                    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bk + 32 * h));
                    x[h] = half ? odd_bytes<SWAP>(v) : even_bytes<SWAP>(v);
                }
                KS_UNROLL for (int r = 0; r < R; ++r) {
                    const __m256i w = _mm256_set1_epi32(wide[k][half][r]);
                    KS_UNROLL for (int h = 0; h < V; ++h) {
                        c[r][h] = madd_add(c[r][h], x[h], w);
                    }
                }
            }
        }
    }
    store_block<R, V>(c, o, r0, c0);
}

template <bool SWAP, int V>
void tile_avx2_rows(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o, int r0, int c0) {
    switch (o.live - r0) {
        case 1: return tile_avx2_block<SWAP, 1, V>(a, b, q, o, r0, c0);
        case 2: return tile_avx2_block<SWAP, 2, V>(a, b, q, o, r0, c0);
        case 3: return tile_avx2_block<SWAP, 3, V>(a, b, q, o, r0, c0);
        default: return tile_avx2_block<SWAP, 4, V>(a, b, q, o, r0, c0);
    }
}

template <bool SWAP>
void tile_avx2(const uint8_t* a, const uint8_t* b, conv_dim q, const tile_out& o) {
    for (int r0 = 0; r0 < o.live; r0 += 4) {
        for (int c0 = 0; c0 < o.count; c0 += 16) {
            if (o.count - c0 <= 8) {
                tile_avx2_rows<SWAP, 1>(a, b, q, o, r0, c0);
            } else {
                tile_avx2_rows<SWAP, 2>(a, b, q, o, r0, c0);
            }
        }
    }
}

// The highest tile level (below) this object holds: every one, or with KS_QTILE_OWN_LEVEL only those of the level it
// is compiled for (-march: 0 at x86-64, 1 at x86-64-v3; the AVX-512 levels hold all). The generated CMake defines it
// for the int8 parts of a portable build's lower levels (kernels_<level>_int8u_own.o): the exports call those only on
// a CPU of that level (ks::cpu_level()), whose best tile is the level's own, so the other tiles (226 of the baseline
// object's 313 KB) never ran there; but with <package>_CPU_LEVEL_MAX, which caps the exports' level and not this one,
// they ran in place of the level's own, with the same results bit for bit. A build for one `cpu` keeps them all: its
// object runs on any CPU of that level or above.
#if defined(KS_QTILE_OWN_LEVEL) && !defined(__AVX512F__)
#ifdef __AVX2__
constexpr int top_level = 1;
#else
constexpr int top_level = 0;
#endif
#else
constexpr int top_level = 3;
#endif

// The tile level of this CPU: 2 with AVX-512 VNNI (cpuid leaf 7: ecx bit 11) on top of the AVX-512 level (3 with
// AVX-512 VBMI too, for the in-place depthwise kernels: depthwise_direct), 1 at the AVX2 level, else 0; the level capped by
// KS_CPU_LEVEL_MAX as ks::cpu_level() caps it. Asked once; the answer kept in a
// variable of internal linkage (an inline variable would be a GNU unique symbol, which the kernel layer's relocatable
// object, whose symbols are all its own, must not export).
[[maybe_unused]] static int tile_level = -1;

static inline int cpu_tile_level() {
    int level = __atomic_load_n(&tile_level, __ATOMIC_RELAXED);
    if (level < 0) {
        int cpu = cpu::detect();
#ifdef KS_CPU_LEVEL_MAX
        cpu = cpu < KS_CPU_LEVEL_MAX ? cpu : KS_CPU_LEVEL_MAX;
#endif
        const uint32_t ecx = cpu::cpuid(7, 0).c;
        const bool vnni = cpu >= cpu::x86_64_v4 && (ecx & (1u << 11)) != 0;
        level = vnni ? ((ecx & (1u << 1)) != 0 ? 3 : 2) : (cpu >= cpu::x86_64_v3 ? 1 : 0);  // (ecx bit 1: AVX-512 VBMI)
        __atomic_store_n(&tile_level, level, __ATOMIC_RELAXED);
    }
    return level;
}

// The tile this CPU runs best of those this object holds: cpu_tile_level() capped by top_level, inlined where it is
// asked so that GCC sees the cap (a constant) and leaves out the tiles above it.
__attribute__((always_inline)) static inline int best_level() {
    const int level = cpu_tile_level();
    return level < top_level ? level : top_level;
}
#endif

using tile_fn = void (*)(const uint8_t*, const uint8_t*, conv_dim, const tile_out&);

// The fastest tile this CPU runs.
template <bool SWAP>
tile_fn best_tile() {
#ifdef KS_QTILE_X86
    const int level = best_level();
    if (level >= 2) {
        return tile_vnni<SWAP>;
    }
    if (level == 1) {
        return tile_avx2<SWAP>;
    }
#endif
#ifdef KS_QTILE_SDOT
    return tile_sdot<SWAP>;
#elif defined(KS_QTILE_DSP)
    return tile_dsp<SWAP>;
#else
    return tile_portable<SWAP>;
#endif
}

// A convolution's input as the tiles read it. The image is copied once per image and group into `phases`: with
// its padding (x_zero), as unsigned bytes, and split by the strides into s_d·s_h·s_w phase volumes (phase (a, b, c)
// holds the padded elements at (i·s_d + a, j·s_h + b, k·s_w + c)). In a phase volume of sides (qd, qh, qw) a
// kernel tap reads, for the output positions (o_d, o_h, o_w), the elements at (o_d, o_h, o_w) + its own shift:
// numbered p = (o_d·qh + o_h)·qw + o_w ("wide positions", qw ≥ the output width, the extra ones discarded), those
// are consecutive bytes, so a block of 32 positions of one im2col row is 32 consecutive bytes of one phase.
struct wide_geometry {
    conv_dim side[3];  // qd, qh, qw
    conv_dim volume;   // qd·qh·qw: one channel of one phase
    conv_dim phases;   // s_d·s_h·s_w
    conv_dim wide;     // wide positions up to the last output position
};

constexpr wide_geometry wide_of(const conv_shape& s) {
    wide_geometry g{};
    g.phases = 1;
    for (int a = 0; a < 3; ++a) {
        g.side[a] = tiles::index_div(convs::extent(s, a) + s.stride[a] - 1, s.stride[a]);
        g.phases *= s.stride[a];
    }
    g.volume = g.side[0] * g.side[1] * g.side[2];
    g.wide = ((s.out[0] - 1) * g.side[1] + s.out[1] - 1) * g.side[2] + s.out[2];
    return g;
}

// Whether the wide positions are the output positions (no discarded ones).
constexpr bool wide_is_dense(const conv_shape& s) {
    return wide_of(s).side[2] == s.out[2] && (s.out[0] == 1 || wide_of(s).side[1] == s.out[1]);
}

// Bytes of the phase volumes of `count` channels.
constexpr conv_dim phases_size(const conv_shape& s, conv_dim count) {
    return round_up(wide_of(s).phases * count * wide_of(s).volume, 64);
}

#ifdef KS_QTILE_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // (GCC 12's _mm512_undefined_*() initializes a value with itself)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// copy_bytes with AVX-512 (steps 1 and 2): masked loads and stores, so that the short rows of small images (14 or 28
// bytes a phase) take one or two vector steps instead of a byte loop.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void copy_bytes_avx512(
    const uint8_t* in, conv_dim step, conv_dim n, uint8_t* o) {
    for (conv_dim j = 0; j < n; j += 32) {
        const conv_dim live = n - j < 32 ? n - j : 32;
        const __mmask32 store = static_cast<__mmask32>(live >= 32 ? ~0u : (1u << live) - 1);
        if (step == 1) {
            _mm256_mask_storeu_epi8(o + j, store, _mm256_maskz_loadu_epi8(store, in + j));
            continue;
        }
        const conv_dim bytes = 2 * live - 1;  // (the last one read: in[2·(n - 1)])
        const __mmask64 load = bytes >= 64 ? ~0ull : (1ull << bytes) - 1;
        const __m512i v = _mm512_maskz_loadu_epi8(load, in + 2 * j);
        _mm256_mask_storeu_epi8(o + j, store, _mm512_cvtepi16_epi8(v));  // (the low byte of each pair)
    }
}

// copy_bytes_avx512 of `count` channels: channel c from in + c·in_channel to o + c·o_channel.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void copy_channels_avx512(
    const uint8_t* in, conv_dim in_channel, conv_dim step, conv_dim n, uint8_t* o, conv_dim o_channel, conv_dim count) {
    for (conv_dim c = 0; c < count; ++c) {
        copy_bytes_avx512(in + c * in_channel, step, n, o + c * o_channel);
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#ifdef KS_QTILE_X86
// The 8 bytes in[0], in[2], .. in[14] (EVEN) or in[1], in[3], .. in[15] stored at o (SSE2).
template <bool EVEN>
inline void eight_of_sixteen(const uint8_t* in, uint8_t* o) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i w = EVEN ? _mm_and_si128(v, _mm_set1_epi16(0x00ff)) : _mm_srli_epi16(v, 8);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(o), _mm_packus_epi16(w, w));
}

// o[i] = in[2i] for j <= i < n (n > 8; the ones before j copied already): 16 of them from the window of 32 bytes
// ending at in[2n - 2] (its odd bytes) when n > 16, else 8 from in (even bytes) and 8 from the window of 16 ending
// there; nothing past in[2n - 2] or before in is read.
inline void copy_even_tail(const uint8_t* in, conv_dim n, conv_dim j, uint8_t* o) {
    if (n > 16) {
        const uint8_t* w = in + 2 * (n - 16) - 1;
        const __m128i a = _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)), 8);
        const __m128i b = _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)), 8);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + n - 16), _mm_packus_epi16(a, b));
        return;
    }
    if (j == 0) {
        eight_of_sixteen<true>(in, o);
    }
    eight_of_sixteen<false>(in + 2 * (n - 8) - 1, o + n - 8);
}

// o[j] = in[j·step] for j < n, a row of n < 8 (step 1) or n <= 8 (step 2) bytes, with one load of 16 bytes from in and
// one 8-byte store blended into the 8 bytes at o (those past the row kept): the caller knows that in + 16 and o + 8
// are within their buffers. (The byte loops of such rows, kws's rows of 5 and MobileNetV2's of 7, and the call per
// row and channel took more than the depthwise sums of those layers.)
inline void copy_short(const uint8_t* in, conv_dim step, conv_dim n, uint8_t* o) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i w = step == 1 ? v : _mm_packus_epi16(_mm_and_si128(v, _mm_set1_epi16(0x00ff)), v);
    uint64_t row, old;
    _mm_storel_epi64(reinterpret_cast<__m128i*>(&row), w);
    __builtin_memcpy(&old, o, 8);
    const uint64_t keep = n >= 8 ? 0 : ~0ull << (8 * n);
    row = (row & ~keep) | (old & keep);
    __builtin_memcpy(o, &row, 8);
}
#endif

// o[j] = the byte of src[j·step] for j < n.
template <class TX>
void copy_bytes(const TX* src, conv_dim step, conv_dim n, uint8_t* o) {
    const uint8_t* in = reinterpret_cast<const uint8_t*>(src);
    conv_dim j = 0;
    if (step == 1 && n >= 64) {
        __builtin_memcpy(o, in, static_cast<size_t>(n));
        return;
    }
    if (step == 1) {  // (a short row: a call of memcpy costs more than the copy)
#ifdef KS_QTILE_X86
        if (n >= 16) {  // (16 bytes at a time, the last 16 overlapping the others: SSE2; the byte loop took 40% of
                        // the AVX2 depthwise kernels' time on MobileNetV2's rows of 56 and fewer)
            for (; j + 16 < n; j += 16) {
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o + j),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j)));
            }
            _mm_storeu_si128(reinterpret_cast<__m128i*>(o + n - 16),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + n - 16)));
            return;
        }
        if (n >= 8) {
            uint64_t head, tail;
            __builtin_memcpy(&head, in, 8);
            __builtin_memcpy(&tail, in + n - 8, 8);
            __builtin_memcpy(o, &head, 8);
            __builtin_memcpy(o + n - 8, &tail, 8);
            return;
        }
#endif
        for (; j < n; ++j) {
            o[j] = in[j];
        }
        return;
    }
#ifdef KS_QTILE_X86
    if (step == 2) {  // (the even bytes of 32 at a time, while the 32 bytes end before the row's last byte read, which
                      // a window of 32 ending at in[2n - 1] passed: one byte past the input at its end; SSE2)
        const __m128i low = _mm_set1_epi16(0x00ff);
        for (; j + 16 < n; j += 16) {
            const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * j));
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * j + 16));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(o + j), _mm_packus_epi16(_mm_and_si128(a, low),
                                                                                  _mm_and_si128(b, low)));
        }
        if (j < n && n > 8) {  // (the last ones as the odd bytes of a window ending at the last byte read, which
                               // overlaps what is copied: the byte loop took ~45% of copy_bytes' time in MobileNetV2)
            copy_even_tail(in, n, j, o);
            return;
        }
    }
#endif
    for (; j < n; ++j) {
        o[j] = in[j * step];
    }
}

// Whether a kernel tap reads phase b of axis a (the taps t·d_a of the kernel, modulo the stride: a 1 × 1 kernel with
// stride 2 reads one phase of the four).
constexpr bool phase_read(const conv_shape& s, int a, conv_dim b) {
    for (conv_dim t = 0; t < s.kernel[a]; ++t) {
        if (tiles::index_mod(t * s.dilation[a], s.stride[a]) == b) {
            return true;
        }
    }
    return false;
}

// phase_read of axis a's phases b < 32 as bits (bit b); a phase past them counts as read (phases_read_at).
constexpr uint32_t phases_read(const conv_shape& s, int a) {
    uint32_t bits = 0;
    for (conv_dim b = 0; b < s.stride[a] && b < 32; ++b) {
        bits |= phase_read(s, a, b) ? 1u << b : 0u;
    }
    return bits;
}

// Whether phase b of an axis with phases_read bits `bits` is copied (a phase past 32 is, whether read or not).
constexpr bool phases_read_at(uint32_t bits, conv_dim b) {
    return b >= 32 || ((bits >> b) & 1u) != 0;
}

// The ends of what split_columns may read (the channels' input) and write (the phase volumes).
struct row_limits {
    const uint8_t* in;
    const uint8_t* out;
};

// copy_bytes of `count` channels' rows: channel c from src + c·in_channel to o + c·o_channel (on x86, rows of at
// most 8 as copy_short where its load and store stay within `limits`).
template <class TX>
inline void copy_rows(const TX* src, conv_dim in_channel, conv_dim step, conv_dim n, uint8_t* o, conv_dim o_channel,
                      conv_dim count, const row_limits& limits) {
    conv_dim c = 0;
#ifdef KS_QTILE_X86
    const uint8_t* in = reinterpret_cast<const uint8_t*>(src);
    if (n > 0 && (n < 8 || (n == 8 && step == 2)) && step <= 2) {
        for (; c < count && in + c * in_channel + 16 <= limits.in && o + c * o_channel + 8 <= limits.out; ++c) {
            copy_short(in + c * in_channel, step, n, o + c * o_channel);
        }
    }
#else
    (void)limits;
#endif
    for (; c < count; ++c) {
        copy_bytes(src + c * in_channel, step, n, o + c * o_channel);
    }
}

// Column phase b of channels [0, count) of image x into the phase volumes (split_phases): per input row the
// columns first, first + step, ... (n of them) to index j0 of the row's phase volume row. The row's phase and
// index along the height are counted, not divided (the 64-bit divisions of each row took ~40% of split_phases'
// time in MobileNetV2's depthwise layers on AVX2).
template <class TX>
void split_columns(const conv_shape& s, const wide_geometry& g, const TX* x, conv_dim count, conv_dim b,
                   uint8_t* dst) {
    const conv_dim step = s.stride[2], plane = s.in[1] * s.in[2];
    // input column w lands at padded column w + pad: phase (w + pad) % step, index (w + pad) / step
    // (b - pad mod step, as b + step - pad % step >= 0 is: 32-bit divisions on a 32-bit target)
    const conv_dim first = tiles::index_mod(b + step - tiles::index_mod(s.pad[2], step), step);
    const conv_dim j0 = tiles::index_div(first + s.pad[2], step), fit = g.side[2] - j0;
    const conv_dim left = tiles::index_div(s.in[2] - first + step - 1, step);
    const conv_dim n = left < fit ? left : fit;
    const uint32_t rows_read = phases_read(s, 1);
    const row_limits limits{reinterpret_cast<const uint8_t*>(x + count * s.in_plane()),
                            dst + g.phases * count * g.volume};
#ifdef KS_QTILE_X86
    const bool fast = best_level() >= 2;
#endif
    for (conv_dim d = 0; d < s.in[0]; ++d) {
        const conv_dim pd = d + s.pad[0], qd = tiles::index_div(pd, s.stride[0]), pd_phase = pd - qd * s.stride[0];
        if (qd >= g.side[0] || !phase_read(s, 0, pd_phase)) {
            continue;  // (rows past the extent the windows read, or a phase no tap reads)
        }
        conv_dim qh = tiles::index_div(s.pad[1], s.stride[1]), ph_phase = s.pad[1] - qh * s.stride[1];
        for (conv_dim h = 0; h < s.in[1] && qh < g.side[1]; ++h) {
            if (phases_read_at(rows_read, ph_phase)) {
                const conv_dim phase = (pd_phase * s.stride[1] + ph_phase) * step + b;
                const TX* src = x + d * plane + h * s.in[2] + first;
                uint8_t* o = dst + phase * count * g.volume + (qd * g.side[1] + qh) * g.side[2] + j0;
#ifdef KS_QTILE_X86
                if (fast && step <= 2 && n < 64) {  // (short rows: the channels' copies in one call)
                    copy_channels_avx512(reinterpret_cast<const uint8_t*>(src), s.in_plane(), step, n, o, g.volume,
                                         count);
                } else
#endif
                {
                    copy_rows(src, s.in_plane(), step, n, o, g.volume, count, limits);
                }
            }
            if (++ph_phase == s.stride[1]) {
                ph_phase = 0;
                ++qh;
            }
        }
    }
}

// Channels [0, count) of image x copied into the phase volumes (see wide_geometry), as they are (the padding: the
// byte of x_zero); the phases no tap reads are left as they are.
template <class TX>
void split_phases(const conv_shape& s, const wide_geometry& g, const TX* x, conv_dim count, uint8_t zero,
                  uint8_t* dst) {
    const conv_dim step = s.stride[2];
    for (conv_dim phase = 0; phase < g.phases; ++phase) {
        const conv_dim a = tiles::index_div(phase, s.stride[1] * step), b = tiles::index_div(phase, step);
        if (phase_read(s, 0, a) && phase_read(s, 1, b - a * s.stride[1]) && phase_read(s, 2, phase - b * step)) {
            __builtin_memset(dst + phase * count * g.volume, zero, static_cast<size_t>(count * g.volume));
        }
    }
    for (conv_dim b = 0; b < step; ++b) {
        if (phase_read(s, 2, b)) {
            split_columns(s, g, x, count, b, dst);
        }
    }
}

// Where im2col row k (channel c, taps kd, kh, kw) starts in the phase volumes of `count` channels.
inline int32_t tap_offset(const conv_shape& s, const wide_geometry& g, conv_dim count, conv_dim k) {
    const conv_dim n = s.taps(), c = tiles::index_div(k, n), t = k - c * n, th = tiles::index_div(t, s.kernel[2]);
    const conv_dim taps[3] = {conv_dim(tiles::index_div(th, s.kernel[1])), conv_dim(tiles::index_mod(th, s.kernel[1])),
                              t - th * s.kernel[2]};
    conv_dim phase = 0, shift = 0;
    for (int a = 0; a < 3; ++a) {
        const conv_dim at = taps[a] * s.dilation[a], q = tiles::index_div(at, s.stride[a]);
        phase = phase * s.stride[a] + at - q * s.stride[a];
        shift = shift * g.side[a] + q;
    }
    return static_cast<int32_t>((phase * count + c) * g.volume + shift);
}

// tap_offset of every im2col row: those of channel 0's taps, the other channels' one volume per channel on; the
// rows past the depth up to a multiple of 4 read row 0 (their weights are 0), so that the packing reads a whole
// quad's offsets without a test (the room for them: round_up(depth · 4, 64) bytes).
__attribute__((noinline)) inline void tap_offsets(const conv_shape& s, const wide_geometry& g, conv_dim count,
                                                  int32_t* offsets) {
    const conv_dim n = s.taps(), depth = s.depth();
    for (conv_dim t = 0; t < n; ++t) {
        offsets[t] = tap_offset(s, g, count, t);
    }
    for (conv_dim k = n; k < depth; ++k) {
        offsets[k] = offsets[k - n] + static_cast<int32_t>(g.volume);
    }
    for (conv_dim k = depth; k < round_up(depth, 4); ++k) {
        offsets[k] = offsets[0];
    }
}

// d [32][4] = the 32 bytes at r[0], r[1], r[2] and r[3] interleaved (d[4c + t] = r[t][c]) and xor'ed with flip
// (0x80 turns int8 activations into the unsigned bytes the tiles take, unsigned_byte).
inline void interleave4(const uint8_t* const* r, uint8_t flip, uint8_t* d) {
#ifdef KS_QTILE_X86
    const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
    for (conv_dim c0 = 0; c0 < cols; c0 += 16) {  // (SSE2: every x86-64)
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + c0));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + c0));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + c0));
        const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + c0));
        const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        const __m128i ce0 = _mm_unpacklo_epi8(c, e), ce1 = _mm_unpackhi_epi8(c, e);
        __m128i* out = reinterpret_cast<__m128i*>(d + c0 * 4);
        _mm_storeu_si128(out, _mm_xor_si128(_mm_unpacklo_epi16(ab0, ce0), f));
        _mm_storeu_si128(out + 1, _mm_xor_si128(_mm_unpackhi_epi16(ab0, ce0), f));
        _mm_storeu_si128(out + 2, _mm_xor_si128(_mm_unpacklo_epi16(ab1, ce1), f));
        _mm_storeu_si128(out + 3, _mm_xor_si128(_mm_unpackhi_epi16(ab1, ce1), f));
    }
#else
    for (conv_dim c = 0; c < cols; ++c) {
        for (int t = 0; t < 4; ++t) {
            d[4 * c + t] = static_cast<uint8_t>(r[t][c] ^ flip);
        }
    }
#endif
}

// Wide positions j0 .. j0 + count (count <= 32) of every im2col row, packed [quad][32][4] (rows past the depth
// read row 0: their weights are 0; a last block of fewer than 32 is copied first, reading nothing past the data).
#ifdef KS_QTILE_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // (GCC 12's _mm512_undefined_*() initializes a value with itself)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The 32 bytes at p in the low half, the 32 at q in the high half.
__attribute__((target("avx512f,avx512bw"))) inline __m512i pair(const uint8_t* p, const uint8_t* q) {
    const __m512i low = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_inserti64x4(low, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), 1);
}

// The bytes as the tiles take them: v xor'ed with f when FLIP (int8 activations, or uint8 ones where the tiles take
// signed bytes), else v (uint8 activations on x86: no instruction).
template <bool FLIP>
__attribute__((target("avx512f"), always_inline)) inline __m512i flipped(__m512i v, __m512i f) {
    return FLIP ? _mm512_xor_si512(v, f) : v;
}

// pack_wide's full blocks with AVX-512 VBMI: the 32 bytes of rows 0 and 1 in one register, of rows 2 and 3 in
// another, and two vpermt2b interleave them (byte 4c + t of the result: row t, position c).
template <bool FLIP>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void pack_wide_vbmi_as(const uint8_t* phases,
                                                                              const int32_t* offsets, conv_dim depth,
                                                                              conv_dim j0, uint8_t flip, uint8_t* dst) {
    alignas(64) uint8_t lanes[2][64];
    for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < 64; ++i) {
            lanes[h][i] = static_cast<uint8_t>((i % 4 & 1) * 32 + (i % 4 >> 1) * 64 + 16 * h + i / 4);
        }
    }
    const __m512i low = _mm512_load_si512(lanes[0]), high = _mm512_load_si512(lanes[1]);
    const __m512i f = _mm512_set1_epi8(static_cast<char>(flip));
    for (conv_dim k = 0; k < quads(depth); ++k) {
        const uint8_t* r[4];
        KS_UNROLL for (int t = 0; t < 4; ++t) {
            r[t] = phases + offsets[4 * k + t] + j0;  // (tap_offsets: rows past the depth read row 0)
        }
        const __m512i a = pair(r[0], r[1]), b = pair(r[2], r[3]);
        _mm512_storeu_si512(dst + k * cols * 4, flipped<FLIP>(_mm512_permutex2var_epi8(a, low, b), f));
        _mm512_storeu_si512(dst + k * cols * 4 + 64, flipped<FLIP>(_mm512_permutex2var_epi8(a, high, b), f));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void pack_wide_vbmi(const uint8_t* phases,
                                                                                 const int32_t* offsets, conv_dim depth,
                                                                                 conv_dim j0, uint8_t flip,
                                                                                 uint8_t* dst) {
    if (flip) {
        pack_wide_vbmi_as<true>(phases, offsets, depth, j0, flip, dst);
    } else {
        pack_wide_vbmi_as<false>(phases, offsets, depth, j0, flip, dst);
    }
}

// A block of 32 output positions in the wide positions: the window of 64 from `first` holds position i at
// index[i]; flip as pack_wide's; keep: the bytes of the two 64-byte halves of a quad's [32][4] the packing writes
// (all, or the columns of one image's piece of a block that spans images: compact_batch).
struct compact_block {
    conv_dim first;
    uint8_t index[32];
    uint8_t flip;
    uint64_t keep[2];
};

// pack_wide for a compact_block b: the bytes of its output positions of every im2col row. Per quad of rows: the four windows loaded, two vpermt2b gather rows
// 0 and 1 (rows 2 and 3) into the halves of one register (index, and index + 64 for the second window's half), and
// the two vpermt2b of pack_wide_vbmi interleave them. The windows read up to 63 bytes past the last wide position of
// the phase volumes (qconv_room: the wide room follows the phases).
template <bool FLIP>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void pack_compact_vbmi_as(
    const uint8_t* phases, const int32_t* offsets, conv_dim depth, const compact_block& b, uint8_t* dst) {
    alignas(64) uint8_t lanes[3][64];
    for (int i = 0; i < 64; ++i) {
        lanes[0][i] = static_cast<uint8_t>((i % 4 & 1) * 32 + (i % 4 >> 1) * 64 + i / 4);
        lanes[1][i] = static_cast<uint8_t>(lanes[0][i] + 16);
        lanes[2][i] = static_cast<uint8_t>(b.index[i % 32] + (i / 32) * 64);
    }
    const conv_dim first = b.first;
    const __m512i low = _mm512_load_si512(lanes[0]), high = _mm512_load_si512(lanes[1]);
    const __m512i gather = _mm512_load_si512(lanes[2]);
    const __m512i f = _mm512_set1_epi8(static_cast<char>(b.flip));
    const __mmask64 keep0 = b.keep[0], keep1 = b.keep[1];  // (in registers: the stores below may alias b)
    for (conv_dim k = 0; k < quads(depth); ++k) {
        __m512i w[4];
        KS_UNROLL for (int t = 0; t < 4; ++t) {
            w[t] = _mm512_loadu_si512(phases + offsets[4 * k + t] + first);  // (tap_offsets' padding)
        }
        const __m512i r01 = _mm512_permutex2var_epi8(w[0], gather, w[1]);
        const __m512i r23 = _mm512_permutex2var_epi8(w[2], gather, w[3]);
        _mm512_mask_storeu_epi8(dst + k * cols * 4, keep0,
                                flipped<FLIP>(_mm512_permutex2var_epi8(r01, low, r23), f));
        _mm512_mask_storeu_epi8(dst + k * cols * 4 + 64, keep1,
                                flipped<FLIP>(_mm512_permutex2var_epi8(r01, high, r23), f));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void pack_compact_vbmi(
    const uint8_t* phases, const int32_t* offsets, conv_dim depth, const compact_block& b, uint8_t* dst) {
    if (b.flip) {
        pack_compact_vbmi_as<true>(phases, offsets, depth, b, dst);
    } else {
        pack_compact_vbmi_as<false>(phases, offsets, depth, b, dst);
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

__attribute__((noinline)) inline void pack_wide(const uint8_t* phases, const int32_t* offsets, conv_dim depth, conv_dim j0, conv_dim count,
                      uint8_t flip, uint8_t* dst) {
#ifdef KS_QTILE_X86
    if (count == cols && best_level() == 3) {
        pack_wide_vbmi(phases, offsets, depth, j0, flip, dst);
        return;
    }
#endif
    const conv_dim q = quads(depth);
    uint8_t tail[4][cols];
    for (conv_dim k = 0; k < q; ++k) {
        const uint8_t* r[4];
        for (int t = 0; t < 4; ++t) {
            r[t] = phases + offsets[4 * k + t] + j0;
            if (count < cols) {
                for (conv_dim c = 0; c < cols; ++c) {
                    tail[t][c] = c < count ? r[t][c] : 0;
                }
                r[t] = tail[t];
            }
        }
        interleave4(r, flip, dst + k * cols * 4);
    }
}

// The wide position of output position j (see wide_geometry).
inline conv_dim wide_position(const conv_shape& s, const wide_geometry& g, conv_dim j) {
    const conv_dim row = tiles::index_div(j, s.out[2]), plane = tiles::index_div(row, s.out[1]);
    return ((plane * g.side[1] + row - plane * s.out[1]) * g.side[2]) + j - row * s.out[2];
}

// Where the output positions j0 .. j0 + count (count <= 32 - col) lie in the wide positions: the first one's
// returned, index[col + i] = wide(j0 + i) - first (the other entries 0); -1 when they span more than 64 of them.
inline conv_dim compact_window(const conv_shape& s, const wide_geometry& g, conv_dim j0, conv_dim col, conv_dim count,
                              uint8_t* index) {  // (index: 32 bytes)
    const conv_dim first = wide_position(s, g, j0), row_gap = g.side[2] - s.out[2];
    const conv_dim plane_gap = (g.side[1] - s.out[1]) * g.side[2];
    conv_dim row = tiles::index_div(j0, s.out[2]), column = j0 - row * s.out[2];
    conv_dim plane_row = row - tiles::index_div(row, s.out[1]) * s.out[1];
    conv_dim at = 0;
    for (conv_dim i = 0; i < col; ++i) {
        index[i] = 0;
    }
    for (conv_dim i = 0; i < cols - col; ++i) {  // (walking the positions: no divisions)
        index[col + i] = static_cast<uint8_t>(i < count ? at : 0);
        if (i < count && at > 63) {
            return -1;
        }
        at += 1;
        if (++column == s.out[2]) {
            column = 0;
            at += row_gap;
            if (++plane_row == s.out[1]) {
                plane_row = 0;
                at += plane_gap;
            }
        }
    }
    return first;
}

// Whether any 32 consecutive output positions span at most 64 wide positions, wherever they start (a bound: 31
// steps crossing at most ⌈31 / width⌉ row ends and ⌈31 / plane⌉ plane ends), so that blocks may start anywhere.
inline bool compact_anywhere(const conv_shape& s, const wide_geometry& g) {
    const conv_dim row_gap = g.side[2] - s.out[2], plane_gap = (g.side[1] - s.out[1]) * g.side[2];
    const conv_dim row_ends = tiles::index_div(cols - 2 + s.out[2], s.out[2]);
    const conv_dim plane_ends = tiles::index_div(cols - 2 + s.out[1] * s.out[2], s.out[1] * s.out[2]);
    return cols - 1 + row_gap * row_ends + plane_gap * plane_ends <= 63;
}

// Whether every block of 32 output positions spans at most 64 wide positions (compact_window).
inline bool compact_fits(const conv_shape& s, const wide_geometry& g) {
    const conv_dim p = s.positions();
    for (conv_dim j0 = 0; j0 < p; j0 += cols) {
        const conv_dim last = (p - j0 < cols ? p - j0 : cols) - 1;
        if (wide_position(s, g, j0 + last) - wide_position(s, g, j0) > 63) {
            return false;
        }
    }
    return true;
}

// y [m][positions] = the output positions of wide [m][ld] (each output row a run of the wide positions).
template <class TY>
void compact(const conv_shape& s, const wide_geometry& g, const uint8_t* wide, conv_dim ld, conv_dim m, TY* y) {
    // (the sizes as locals, the rows walked by pointers: the byte stores may alias s and g, whose fields the loop
    // read again after each of them, ~20 instructions a row of 5)
    const conv_dim width = s.out[2], depth = s.out[0], height = s.out[1], side1 = g.side[1], side2 = g.side[2];
#ifdef KS_QTILE_X86
    const uint8_t* const wide_end = wide + (m - 1) * ld + g.wide;
    const TY* const y_end = y + m * s.positions();
#endif
    TY* dst = y;
    for (conv_dim i = 0; i < m; ++i) {
        for (conv_dim d = 0; d < depth; ++d) {
            const uint8_t* src = wide + i * ld + d * side1 * side2;
            for (conv_dim h = 0; h < height; ++h, src += side2, dst += width) {
#ifdef KS_QTILE_X86
                if (width < 8 && src + 8 <= wide_end && dst + 8 <= y_end) {  // (rows of 1 to 7: 8 bytes copied, the
                    __builtin_memcpy(dst, src, 8);  // ones past the row rewritten by the rows after it; kws's rows of
                    continue;                       // 5 took 17% of its time at batch 8 as byte loops)
                }
                if (width >= 8) {  // (rows of 8 to 63: vector copies; the byte loop took 2.7% of MobileNetV2's time)
                    copy_bytes(src, 1, width, reinterpret_cast<uint8_t*>(dst));  // (TY: one byte)
                    continue;
                }
#endif
                if (width >= 32) {
                    __builtin_memcpy(dst, src, static_cast<size_t>(width));  // (TY: one byte)
                } else {
                    for (conv_dim v = 0; v < width; ++v) {
                        dst[v] = static_cast<TY>(src[v]);
                    }
                }
            }
        }
    }
}

// The requantization bounds of q less its zero point, as tile_out takes them.
inline tile_out output_of(const requant& q, const int32_t* offsets, const float* scale, bool by_row, int32_t* acc) {
    return tile_out{offsets, scale, by_row, q.scales == 1, static_cast<float>(q.lo - q.y_zero),
                    static_cast<float>(q.hi - q.y_zero), q.y_zero, nullptr, 0, 0, 0, acc, false};
}

// Scratch layout of ks::qconv: offsets, the sums' room, a block, tap offsets, phases, the wide output (when the
// wide positions are not the output's). The compact packing (compact_tiles, AVX-512 VBMI) leaves the wide output
// unused but reads up to 63 bytes past the phases into its room: a layout without it must keep 64 bytes there.
struct qconv_room {
    conv_dim offsets, acc, block, taps, phases, wide;

    static constexpr qconv_room of(const conv_shape& s) {
        const conv_dim m = tiles::index_div(s.out_channels, s.groups), cg = tiles::index_div(s.channels, s.groups);
        const conv_dim wide = wide_is_dense(s) ? 0 : round_up(m, rows) * round_up(wide_of(s).wide, cols);
        const bool direct = s.pad[0] == 0 && s.pad[1] == 0 && s.pad[2] == 0 && s.stride[0] == 1 && s.stride[1] == 1 &&
                            s.stride[2] == 1;
        return qconv_room{round_up(m * 4, 64), rows * cols * 4, packed_size(cols, s.depth(), cols),
                          round_up(s.depth() * 4, 64), direct ? 0 : phases_size(s, cg), round_up(wide, 64)};
    }
    constexpr conv_dim total() const {
        return offsets + acc + block + taps + phases + wide;
    }
};

// ks::qconv's once-per-image and once-per-group steps out of line (split_phases, compact and channel_offsets inlined
// into it had its frame at 0.6-1 KB: their loops' values spilled beside the tiles' loop's).
template <class TX>
__attribute__((noinline)) void split_image(const conv_shape& s, const wide_geometry& g, const TX* x, conv_dim count,
                                           uint8_t zero, uint8_t* dst) {
    split_phases(s, g, x, count, zero, dst);
}

__attribute__((noinline)) inline void group_offsets(const uint8_t* weights, conv_dim n, conv_dim depth, const int32_t* bias,
                                                    int32_t x_zero, int32_t* offsets) {
    channel_offsets(weights, n, depth, rows, bias, x_zero, offsets);
}

// One image of one group: each block of 32 wide positions packed, then m rows of weights wg times it, 8 at a time,
// the results where o says (its y, ld, offsets and scales at the first row and position).
__attribute__((noinline)) inline void wide_tiles(const uint8_t* image, const int32_t* taps, conv_dim depth, conv_dim wide,
                                                 const uint8_t* wg, conv_dim m, const tile_out& o, uint8_t flip,
                                                 uint8_t* block, tile_fn tile) {
    const conv_dim qd = quads(depth);
    for (conv_dim j0 = 0; j0 < wide; j0 += cols) {
        pack_wide(image, taps, depth, j0, wide - j0 < cols ? wide - j0 : cols, flip, block);
        for (conv_dim i0 = 0; i0 < m; i0 += rows) {
            tile_out t = o;
            t.offsets = o.offsets + i0;
            t.scale = o.one_scale ? o.scale : o.scale + i0;
            t.y = o.y + i0 * o.ld + j0;
            t.live = m - i0 < rows ? m - i0 : rows;
            t.count = wide - j0 < cols ? wide - j0 : cols;
            tile(wg + i0 * qd * 4, block, qd, t);
        }
    }
}

#ifdef KS_QTILE_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // (GCC 12's _mm512_undefined_*() initializes a value with itself)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The last R (1 to 4) columns c0 .. c0 + R of a packed block b [quad][32][4], for all m rows of the weights w (tiles of
// 8 rows, [tile][quad][8][4]), as o says (by_row; o.y at the block's first column): a tile turned around, the weights
// in the vectors (two tiles of 8 rows, 16 rows a vector) and the R columns' quads broadcast. Where a block's last
// columns would fill a vector of 16 by a quarter or less (ResNet's 7 × 7 layers: 49 = 3 · 16 + 1), the tiles leave
// them to this: one vpdpbusd per 16 rows and column instead of one per row.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tail_columns(const uint8_t* w, const uint8_t* b, conv_dim q,
                                                                         conv_dim m, conv_dim c0, const tile_out& o) {
    const __m512 lo = _mm512_set1_ps(o.lo), hi = _mm512_set1_ps(o.hi);
    const __m512i zero = _mm512_set1_epi32(o.zero);
    for (conv_dim i0 = 0; i0 < m; i0 += 16) {
        const conv_dim live = m - i0 < 16 ? m - i0 : 16;
        const __mmask16 rows16 = static_cast<__mmask16>(live >= 16 ? 0xffff : (1u << live) - 1);
        const uint8_t* w0 = w + i0 * q * 4;
        const uint8_t* w1 = live > 8 ? w0 + rows * q * 4 : w0;  // (no second tile: its rows are discarded)
        __m512i c[R];
        KS_UNROLL for (int j = 0; j < R; ++j) {
            c[j] = _mm512_maskz_loadu_epi32(rows16, o.offsets + i0);
        }
        for (conv_dim k = 0; k < q; ++k) {
            const __m512i wv = pair(w0 + k * rows * 4, w1 + k * rows * 4);
            prefetch_weights<false>(w0 + k * rows * 4, nullptr);
            prefetch_weights<false>(w1 + k * rows * 4, nullptr);
            KS_UNROLL for (int j = 0; j < R; ++j) {
                int32_t x;
                __builtin_memcpy(&x, b + k * cols * 4 + (c0 + j) * 4, 4);
                c[j] = dpbusd(c[j], _mm512_set1_epi32(x), wv);
            }
        }
        const __m512 scale = o.one_scale ? _mm512_set1_ps(o.scale[0]) : _mm512_maskz_loadu_ps(rows16, o.scale + i0);
        KS_UNROLL for (int j = 0; j < R; ++j) {
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(c[j]), scale);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            alignas(16) uint8_t bytes[16];
            _mm_store_si128(reinterpret_cast<__m128i*>(bytes),
                            _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), zero)));
            for (conv_dim r = 0; r < live; ++r) {
                o.y[(i0 + r) * o.ld + c0 + j] = bytes[r];
            }
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The columns of a block of `count` the tiles compute: all but the last count mod 16 when those are 1 to 4, which
// tail_columns computes.
inline conv_dim tiled_columns(conv_dim count) {
    const conv_dim tail = count % 16;
    return tail >= 1 && tail <= 4 ? count - tail : count;
}

__attribute__((noinline)) inline void tail_of(const uint8_t* w, const uint8_t* b, conv_dim q, conv_dim m, conv_dim c0,
                                              conv_dim n, const tile_out& o) {
    switch (n) {
        case 1: return tail_columns<1>(w, b, q, m, c0, o);
        case 2: return tail_columns<2>(w, b, q, m, c0, o);
        case 3: return tail_columns<3>(w, b, q, m, c0, o);
        default: return tail_columns<4>(w, b, q, m, c0, o);
    }
}

// The tiles of one packed block of `count` columns, all m rows of the weights wg (o.y: the block's first column).
__attribute__((noinline)) inline void block_tiles(const uint8_t* wg, const uint8_t* block, conv_dim qd, conv_dim m,
                                                  conv_dim count, const tile_out& o, tile_fn tile) {
    const conv_dim tiled = tiled_columns(count);
    for (conv_dim i0 = 0; i0 < m && tiled > 0; i0 += rows) {
        tile_out t = o;
        t.offsets = o.offsets + i0;
        t.scale = o.one_scale ? o.scale : o.scale + i0;
        t.y = o.y + i0 * o.ld;
        t.live = m - i0 < rows ? m - i0 : rows;
        t.count = tiled;
        tile(wg + i0 * qd * 4, block, qd, t);
    }
    if (tiled < count) {
        tail_of(wg, block, qd, m, tiled, count - tiled, o);
    }
}

// Output positions j0 .. j0 + count of the image in `image` packed into the block's columns col .. col + count
// (pack_wide_vbmi for a whole block within one output row, else pack_compact_vbmi, writing those columns only).
__attribute__((noinline)) inline void pack_positions(const conv_shape& s, const wide_geometry& g, const uint8_t* image, const int32_t* taps,
                           conv_dim j0, conv_dim col, conv_dim count, compact_block& b, uint8_t* block) {
    b.first = compact_window(s, g, j0, col, count, b.index);
    if (col == 0 && count == cols && b.index[count - 1] == count - 1) {
        pack_wide_vbmi(image, taps, s.depth(), b.first, b.flip, block);
        return;
    }
    const conv_dim end = col + count;
    b.keep[0] = (end >= 16 ? ~0ull : (1ull << 4 * end) - 1) & ~(col >= 16 ? ~0ull : (1ull << 4 * col) - 1);
    b.keep[1] = (end >= 32 ? ~0ull : (end <= 16 ? 0 : (1ull << 4 * (end - 16)) - 1)) &
                ~(col <= 16 ? 0 : (1ull << 4 * (col - 16)) - 1);
    pack_compact_vbmi(image, taps, s.depth(), b, block);
}

// wide_tiles with compact positions (AVX-512 VBMI, compact_fits): each block of 32 output positions gathered from the
// wide positions (pack_positions), the tiles' results stored in place (o.y: the group's output, o.ld: positions).
// Nothing computed is discarded but the last block's columns past the positions.
__attribute__((noinline)) inline void compact_tiles(const conv_shape& s, const wide_geometry& g, const uint8_t* image,
                                                    const int32_t* taps, const uint8_t* wg, conv_dim m,
                                                    const tile_out& o, uint8_t flip, uint8_t* block, tile_fn tile) {
    const conv_dim qd = quads(s.depth()), p = s.positions();
    compact_block b{};
    b.flip = flip;
    for (conv_dim j0 = 0; j0 < p; j0 += cols) {
        const conv_dim count = p - j0 < cols ? p - j0 : cols;
        pack_positions(s, g, image, taps, j0, 0, count, b, block);
        tile_out t = o;
        t.y = o.y + j0;
        block_tiles(wg, block, qd, m, count, t, tile);
    }
}

// One group's images for compact_batch: the input of its first image (`step` elements to the next) and the phase
// volumes' room, and which image they hold.
template <class TX>
struct batch_images {
    const TX* x;
    conv_dim step, images, held;
    uint8_t zero;
    uint8_t* phases;
};

// The phase volumes of image n (split_phases, unless they hold it already).
template <class TX>
void hold_image(const conv_shape& s, const wide_geometry& g, batch_images<TX>& in, conv_dim n) {
    if (in.held != n) {
        split_image(s, g, in.x + n * in.step, tiles::index_div(s.channels, s.groups), in.zero, in.phases);
        in.held = n;
    }
}

// The columns col .. col + count of the sums' rows (staging [m][32]) stored at y [m][positions] from position j.
__attribute__((target("avx512f,avx512bw,avx512vl"), noinline)) inline void store_piece(const uint8_t* staging, conv_dim m,
                                                                            conv_dim col, conv_dim count, uint8_t* y,
                                                                            conv_dim positions) {
    const __mmask32 keep = static_cast<__mmask32>(((count >= 32 ? 0ull : 1ull << count) - 1) << col);
    for (conv_dim r = 0; r < m; ++r) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(staging + r * cols));
        _mm256_mask_storeu_epi8(y + r * positions - col, keep, v);  // (bytes col .. col + count only)
    }
}

// compact_tiles over a group's whole batch (compact_anywhere): the images' output positions one after another in
// blocks of 32, so that a block may take the last positions of one image and the first of the next (ResNet's 7 × 7
// layers: 49 positions an image, 12¼ blocks for 8 images instead of 8 × 3). Each image's phases are split once, when
// its first piece is packed; a block within one image is stored in place, one that spans images into `staging`
// [m][32] (the wide output's room) and from there into each image's output (o.y: image 0's, y_step to the next; o's
// y and ld are the last block's on return).
template <class TX>
__attribute__((noinline)) void compact_batch(const conv_shape& s, const wide_geometry& g, batch_images<TX>& in,
                                             const int32_t* taps, const uint8_t* wg, conv_dim m, tile_out& o,
                                             conv_dim y_step, uint8_t* staging, uint8_t* block, tile_fn tile) {
    const conv_dim qd = quads(s.depth()), p = s.positions(), total = in.images * p;
    uint8_t* const y = o.y;
    compact_block b{};
    b.flip = static_cast<uint8_t>((static_cast<TX>(-1) < 0 ? 0x80 : 0) ^ signed_flip);
    for (conv_dim j0 = 0; j0 < total; j0 += cols) {
        const conv_dim count = total - j0 < cols ? total - j0 : cols, n0 = tiles::index_div(j0, p);
        if (j0 + count <= (n0 + 1) * p) {  // (within image n0: stored in place)
            hold_image(s, g, in, n0);
            pack_positions(s, g, in.phases, taps, j0 - n0 * p, 0, count, b, block);
            o.y = y + n0 * y_step + j0 - n0 * p;
            o.ld = p;
            block_tiles(wg, block, qd, m, count, o, tile);
            continue;
        }
        for (conv_dim col = 0, n = n0; col < count; ++n) {
            hold_image(s, g, in, n);
            const conv_dim j = j0 + col - n * p, piece = p - j < count - col ? p - j : count - col;
            pack_positions(s, g, in.phases, taps, j, col, piece, b, block);
            col += piece;
        }
        o.y = staging;
        o.ld = cols;
        block_tiles(wg, block, qd, m, count, o, tile);
        for (conv_dim col = 0, n = n0; col < count; ++n) {
            const conv_dim j = j0 + col - n * p, piece = p - j < count - col ? p - j : count - col;
            store_piece(staging, m, col, piece, y + n * y_step + j, p);
            col += piece;
        }
    }
}

// One group's images through compact_batch (out of line: qconv's frame stays small).
template <class TX>
__attribute__((noinline)) void batch_group(const conv_shape& s, const TX* x, conv_dim images, uint8_t zero,
                                           uint8_t* phases, const int32_t* taps, const uint8_t* wg, tile_out& o,
                                           uint8_t* staging, uint8_t* block, tile_fn tile) {
    batch_images<TX> in{x, s.channels * s.in_plane(), images, -1, zero, phases};
    compact_batch(s, wide_of(s), in, taps, wg, tiles::index_div(s.out_channels, s.groups), o,
                  s.out_channels * s.positions(), staging, block, tile);
}
#endif

template <class TY>
__attribute__((noinline)) void compact_image(const conv_shape& s, const wide_geometry& g, const uint8_t* wide,
                                             conv_dim ld, conv_dim m, TY* y) {
    compact(s, g, wide, ld, m, y);
}

#ifdef KS_QCONV_GATHER
// Output positions j0 .. j0 + count (count <= 32) of every im2col row of image x (one group's channels) packed as
// pack_wide packs them, [quad][32][4], each element read where it lies: the padding (and a row past the depth, whose
// weights are 0) the byte of x_zero. Per im2col row one channel and tap; per output row one input row (or none), its
// columns walked by the stride.
template <class TX>
__attribute__((noinline)) void gather_block(const conv_shape& s, const TX* x, conv_dim j0, conv_dim count, TX x_zero,
                                            uint8_t* block) {
    const conv_dim taps = s.taps(), depth = s.depth(), row0 = tiles::index_div(j0, s.out[2]);
    const int32_t width = static_cast<int32_t>(s.in[2]), step = static_cast<int32_t>(s.stride[2]);
    for (conv_dim k = 0; k < quads(depth) * 4; ++k) {
        const conv_dim c = tiles::index_div(k, taps), t = k - c * taps, th = tiles::index_div(t, s.kernel[2]);
        const conv_dim kd = tiles::index_div(th, s.kernel[1]), kh = th - kd * s.kernel[1], kw = t - th * s.kernel[2];
        conv_dim od = tiles::index_div(row0, s.out[1]), oh = row0 - od * s.out[1], ow = j0 - row0 * s.out[2];
        uint8_t* out = block + (k >> 2) * cols * 4 + (k & 3);
        for (conv_dim col = 0; col < count;) {
            const conv_dim run = s.out[2] - ow < count - col ? s.out[2] - ow : count - col;
            const conv_dim id = od * s.stride[0] - s.pad[0] + kd * s.dilation[0];
            const conv_dim ih = oh * s.stride[1] - s.pad[1] + kh * s.dilation[1];
            const bool row = k < depth && id >= 0 && id < s.in[0] && ih >= 0 && ih < s.in[1];
            const TX* src = row ? x + c * s.in_plane() + (id * s.in[1] + ih) * s.in[2] : x;
            int32_t iw = static_cast<int32_t>(ow * s.stride[2] - s.pad[2] + kw * s.dilation[2]);
            for (conv_dim i = 0; i < run; ++i, iw += step) {
                out[(col + i) * 4] = tile_byte(row && static_cast<uint32_t>(iw) < static_cast<uint32_t>(width) ? src[iw]
                                                                                                                : x_zero);
            }
            col += run;
            ow = 0;
            if (++oh == s.out[1]) {
                oh = 0;
                ++od;
            }
        }
    }
}
#endif

}  // namespace qtile

// The scratch bytes ks::qconv uses (qtile::qconv_room).
constexpr conv_dim qconv_scratch(const conv_shape& s) {
    return qtile::qconv_room::of(s).total();
}

// The bytes of a convolution's weights w [M, C/G, K...] (M = out_channels, depth = C/G·K) packed for ks::qconv:
// each group's rows in tiles of 8 with their sums (qtile::pack_weights), one group after another.
constexpr conv_dim qconv_packed_size(conv_dim out_channels, conv_dim depth, conv_dim groups) {
    return groups * qtile::weights_size(out_channels / groups, depth, qtile::rows);
}

// w packed as ks::qconv reads it (ksbuild packs constant weights when it compiles the package: prims/qlinear.py).
inline void qpack_rows(conv_dim out_channels, conv_dim depth, conv_dim groups, const int8_t* w, uint8_t* dst) {
    const conv_dim m = out_channels / groups;
    for (conv_dim g = 0; g < groups; ++g) {
        qtile::pack_weights(w + g * m * depth, m, depth, depth, 1, qtile::rows,
                            dst + g * qtile::weights_size(m, depth, qtile::rows));
    }
}

#ifdef KS_QCONV_GATHER
// ks::qconv of a microcontroller's build for size: per image, group and block of 32 positions, gather_block and
// the tiles (the scratch laid out as qconv_room's first three parts).
template <class TX, class TY>
__attribute__((noinline)) void qconv_gathered(const conv_shape& s, conv_dim images, const TX* x,
                                              const uint8_t* packed, TY* y, uint8_t* scratch, const requant& q) {
    using namespace qtile;
    const conv_dim m = tiles::index_div(s.out_channels, s.groups), depth = s.depth(), qd = quads(depth);
    const conv_dim cg = tiles::index_div(s.channels, s.groups), p = s.positions();
    int32_t* offsets = reinterpret_cast<int32_t*>(scratch);
    int32_t* acc = reinterpret_cast<int32_t*>(scratch + round_up(m * 4, 64));
    uint8_t* block = reinterpret_cast<uint8_t*>(acc) + rows * cols * 4;
    const tile_fn tile = best_tile<false>();
    for (conv_dim gi = 0; gi < s.groups; ++gi) {
        const uint8_t* wg = packed + gi * weights_size(m, depth, rows);
        group_offsets(wg, m, depth, q.bias ? q.bias + gi * m : nullptr, tile_zero<TX>(q.x_zero), offsets);
        for (conv_dim n = 0; n < images; ++n) {
            const TX* xg = x + (n * s.channels + gi * cg) * s.in_plane();
            tile_out o = output_of(q, offsets, q.scales == 1 ? q.scale : q.scale + gi * m, true, acc);
            o.y = reinterpret_cast<uint8_t*>(y + (n * s.out_channels + gi * m) * p);
            o.ld = p;
            for (conv_dim j0 = 0; j0 < p; j0 += cols) {
                const conv_dim count = p - j0 < cols ? p - j0 : cols;
                gather_block(s, xg, j0, count, static_cast<TX>(q.x_zero), block);
                for (conv_dim i0 = 0; i0 < m; i0 += rows) {
                    tile_out t = o;
                    t.offsets = o.offsets + i0;
                    t.scale = o.one_scale ? o.scale : o.scale + i0;
                    t.y = o.y + i0 * p + j0;
                    t.live = m - i0 < rows ? m - i0 : rows;
                    t.count = count;
                    tile(wg + i0 * qd * 4, block, qd, t);
                }
            }
        }
    }
}
#endif

// y [images, M, O...] = the requantized convolution of x [images, C, S...] (uint8 or int8) with the weights w
// [M, C/G, K...] (int8, zero point 0) packed by qpack_rows; scratch: qconv_scratch(s) bytes, 64-byte aligned.
template <class TX, class TY>
void qconv(const conv_shape& s, conv_dim images, const TX* x, const uint8_t* packed, TY* y, uint8_t* scratch,
           const requant& q) {
    using namespace qtile;
    const conv_dim m = tiles::index_div(s.out_channels, s.groups), depth = s.depth();
    const conv_dim cg = tiles::index_div(s.channels, s.groups), p = s.positions();
#ifdef KS_QCONV_GATHER
    qconv_gathered(s, images, x, packed, y, scratch, q);
    return;
#endif
    const wide_geometry g = wide_of(s);
    const qconv_room room = qconv_room::of(s);
    int32_t* offsets = reinterpret_cast<int32_t*>(scratch);
    int32_t* acc = reinterpret_cast<int32_t*>(scratch + room.offsets);
    uint8_t* block = reinterpret_cast<uint8_t*>(acc) + room.acc;
    int32_t* taps = reinterpret_cast<int32_t*>(block + room.block);
    uint8_t* phases = reinterpret_cast<uint8_t*>(taps) + room.taps;
    uint8_t* wide = phases + room.phases;
    tap_offsets(s, g, cg, taps);
    const int32_t zero = tile_zero<TX>(q.x_zero);
    const uint8_t flip = static_cast<uint8_t>((static_cast<TX>(-1) < 0 ? 0x80 : 0) ^ signed_flip);
    const bool direct = room.phases == 0;  // (no padding, stride 1: the image is its own phase volume)
    const tile_fn tile = best_tile<false>();
#ifdef KS_QTILE_X86
    // (compact positions: not for an image read in place, whose windows could read past it)
    const bool compact_blocks = room.wide && !direct && best_level() == 3 && compact_fits(s, g);
#else
    const bool compact_blocks = false;
#endif
    const conv_dim ld = room.wide && !compact_blocks ? round_up(g.wide, cols) : p;
    for (conv_dim gi = 0; gi < s.groups; ++gi) {
        const uint8_t* wg = packed + gi * weights_size(m, depth, rows);
        group_offsets(wg, m, depth, q.bias ? q.bias + gi * m : nullptr, zero, offsets);
        const float* scale = q.scales == 1 ? q.scale : q.scale + gi * m;
        tile_out o = output_of(q, offsets, scale, true, acc);
#ifdef KS_QTILE_X86
        if (compact_blocks && compact_anywhere(s, g)) {
            o.y = reinterpret_cast<uint8_t*>(y + gi * m * p);
            batch_group(s, x + gi * cg * s.in_plane(), images, static_cast<uint8_t>(q.x_zero), phases, taps, wg, o,
                        wide, block, tile);
            continue;
        }
#endif
        for (conv_dim n = 0; n < images; ++n) {
            const TX* xg = x + (n * s.channels + gi * cg) * s.in_plane();
            if (!direct) {
                split_image(s, g, xg, cg, static_cast<uint8_t>(q.x_zero), phases);
            }
            const uint8_t* image = direct ? reinterpret_cast<const uint8_t*>(xg) : phases;
            TY* yg = y + (n * s.out_channels + gi * m) * p;
            uint8_t* out = room.wide && !compact_blocks ? wide : reinterpret_cast<uint8_t*>(yg);
            o.y = out;
            o.ld = ld;
#ifdef KS_QTILE_X86
            if (compact_blocks) {
                compact_tiles(s, g, image, taps, wg, m, o, flip, block, tile);
                continue;
            }
#endif
            wide_tiles(image, taps, depth, g.wide, wg, m, o, flip, block, tile);
            if (room.wide) {
                compact_image(s, g, wide, ld, m, yg);
            }
        }
    }
}

// The bytes of a matrix product's weights b [depth, n] packed for ks::qmatmul: its columns in tiles of product_cols.
constexpr conv_dim qmatmul_packed_size(conv_dim depth, conv_dim n) {
    return qtile::weights_size(n, depth, qtile::product_cols);
}

// b packed as ks::qmatmul reads it (ksbuild packs constant weights when it compiles the package: prims/qlinear.py).
inline void qpack_columns(conv_dim depth, conv_dim n, const int8_t* b, uint8_t* dst) {
    qtile::pack_weights(b, n, depth, 1, n, qtile::product_cols, dst);  // (column j, depth k at b[k·n + j])
}

// The scratch bytes ks::qmatmul uses for a [rows, depth] · [depth, n] product: the offsets, a block of rows of a,
// the sums' room.
constexpr conv_dim qmatmul_scratch(conv_dim depth, conv_dim n) {
    return qtile::round_up(n * 4, 64) + qtile::packed_size(qtile::rows, depth, qtile::rows) +
           qtile::rows * qtile::cols * 4;
}

namespace qtile {
// A tile's sums (the int32 sums plus the offsets, at acc [rows][cols]) as float times the scale of their column (or
// the one scale): ks::qmatmul's float results, as onnxruntime's MatMulIntegerToFloat and its quantized LSTM convert
// theirs (MLAS_QGEMM_SCALE_BIAS_OUTPUT_PROCESSOR: float(sum) · scale).
inline void store_scaled(const int32_t* acc, conv_dim live, conv_dim count, const float* scale, bool one_scale,
                         float* y, conv_dim ld) {
    for (conv_dim r = 0; r < live; ++r) {
        const int32_t* s = acc + r * cols;
        float* out = y + r * ld;
        KS_OMP_SIMD()
        for (conv_dim c = 0; c < count; ++c) {
            out[c] = static_cast<float>(s[c]) * scale[one_scale ? 0 : c];
        }
    }
}

template <class TY>
constexpr bool float_results() {
    return false;
}
template <>
constexpr bool float_results<float>() {
    return true;
}
}  // namespace qtile

// y [count, n] = the requantized product of a [count, depth] (uint8 or int8, rows `lda` apart) with b [depth, n]
// (int8, zero point 0) packed by qpack_columns; bias and scales per column of y (or one scale). With int32 y (TY
// int32_t: ONNX MatMulInteger) the sums Σ (a - x_zero)·b plus the bias, not requantized (the scales unread); with
// float y (TY float: a MatMulInteger whose sums are converted and scaled, transforms/float_products.py) those sums
// as float times the scales, each tile's converted from the sums' room as it is computed.
template <class TX, class TY>
void qmatmul(conv_dim count, conv_dim depth, conv_dim n, const TX* a, conv_dim lda, const uint8_t* packed, TY* y,
             uint8_t* scratch, const requant& q) {
    using namespace qtile;
    constexpr bool floats = float_results<TY>();
    int32_t* offsets = reinterpret_cast<int32_t*>(scratch);
    uint8_t* block = scratch + round_up(n * 4, 64);
    int32_t* acc = reinterpret_cast<int32_t*>(block + packed_size(rows, depth, rows));
    const int32_t zero = tile_zero<TX>(q.x_zero);
    const int32_t* offs = offsets;
    if (bias_offsets && zero == 0 && q.bias) {
        offs = q.bias;  // (the sums unread: packed weights with a zero point folded into the bias may lack them)
    } else {
        channel_offsets(packed, n, depth, product_cols, q.bias, zero, offsets);
    }
    const tile_fn tile = best_tile<true>();
    const conv_dim qd = quads(depth);
    for (conv_dim i0 = 0; i0 < count; i0 += rows) {
        const conv_dim live = count - i0 < rows ? count - i0 : rows;
        pack_rows(a + i0 * lda, live, depth, lda, block);
        for (conv_dim j0 = 0; j0 < n; j0 += product_cols) {
            const float* scale = q.scales == 1 ? q.scale : q.scale + j0;
            tile_out o = output_of(q, offs + j0, scale, false, acc);
            o.sums = sizeof(TY) == 4;
            o.y = floats ? reinterpret_cast<uint8_t*>(acc) : reinterpret_cast<uint8_t*>(y + i0 * n + j0);
            o.ld = floats ? cols : n;
            o.live = live;
            o.count = n - j0 < product_cols ? n - j0 : product_cols;
            tile(block, packed + j0 * qd * 4, qd, o);
            if (floats) {
                store_scaled(acc, live, o.count, scale, q.scales == 1, reinterpret_cast<float*>(y + i0 * n + j0), n);
            }
        }
    }
}

#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
namespace qtile {

// Four activations of a row from element k on as the tiles read them (tile_byte: an int8 one + 128, which is its
// byte xor 0x80 where signed_flip is 0, as on every M-profile core), byte t of the word being element k + t; zeros
// past `depth`, where the packed weights hold zeros too (the row is read in place, never past its end).
template <class TX>
inline uint32_t row_quad(const TX* a, int32_t k, int32_t depth) {
    const uint32_t flip = static_cast<TX>(-1) < 0 ? 0x80808080u : 0u;
    uint32_t word = 0;
    if (k + 4 <= depth) {
        __builtin_memcpy(&word, a + k, 4);  // (one LDR: unaligned loads are allowed on the M3, M4, M7 and M33)
        return word ^ flip;
    }
    for (int32_t t = 0; k + t < depth; ++t) {
        word |= static_cast<uint32_t>(tile_byte(a[k + t])) << (8 * t);
    }
    return word;
}

}  // namespace qtile

// ks::qmatmul of weights packed without their sums (param sums = False: transforms/narrow_qpacks.py folded x_zero·Σw
// into the bias, and the tiles' zero point is 0), the bias being its offsets. A microcontroller's alone (as
// ks::qtile::bias_offsets): one row of a at a time, read in place, by the 4 columns of each tile of the packed
// weights, the 4 sums in registers and requantized from there: no scratch (`scratch` is not read: the generated code
// passes nullptr), no packed block of rows (qtile::rows of them, 1.6 KB of a 196-deep product's scratch for a row of
// 196 bytes), no room for a register tile's sums (1 KB), and no code of ks::qmatmul's (computing offsets from the
// sums, packing rows, tile_dsp, store_sums). Same arguments as ks::qmatmul; y int32 (MatMulInteger): the sums plus
// the bias, not requantized.
template <class TX, class TY>
void qmatmul_folded(conv_dim count, conv_dim depth, conv_dim n, const TX* a, conv_dim lda, const uint8_t* packed,
                    TY* y, uint8_t* scratch, const requant& q) {
    using namespace qtile;
    (void)scratch;
    static_assert(product_cols == 4, "a tile of the packed weights is 4 columns");
    const float lo = static_cast<float>(q.lo - q.y_zero), hi = static_cast<float>(q.hi - q.y_zero);
    const int32_t k_end = static_cast<int32_t>(depth);
    for (conv_dim i = 0; i < count; ++i) {
        const TX* row = a + i * lda;
        const uint8_t* b = packed;
        for (conv_dim j = 0; j < n;) {
            // The row by the 4 columns of a tile (b [quad][4][4]), the sums in registers: with SMLAD where the
            // core has it (5 loads, 10 extensions and 8 multiply-adds per quad, as tile_dsp), else byte by byte.
            int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            KS_ROLLED for (int32_t k = 0; k < k_end; k += 4, b += 16) {
                const uint32_t word = row_quad(row, k, k_end);
#ifdef KS_QTILE_DSP
                byte_lanes w;
                w.even = static_cast<int32_t>(__uxtb16(word));
                __asm__("uxtb16 %0, %1, ror #8" : "=r"(w.odd) : "r"(word));
                s0 = dot4(w, lanes_of<true>(b), s0);
                s1 = dot4(w, lanes_of<true>(b + 4), s1);
                s2 = dot4(w, lanes_of<true>(b + 8), s2);
                s3 = dot4(w, lanes_of<true>(b + 12), s3);
#else
                for (int t = 0; t < 4; ++t) {
                    const int32_t v = static_cast<int32_t>((word >> (8 * t)) & 0xffu);
                    s0 += v * static_cast<int8_t>(b[t]);
                    s1 += v * static_cast<int8_t>(b[4 + t]);
                    s2 += v * static_cast<int8_t>(b[8 + t]);
                    s3 += v * static_cast<int8_t>(b[12 + t]);
                }
#endif
            }
            // Stored column by column, the sums moving down a register each time (no array in memory).
            const conv_dim last = n - j < 4 ? n : j + 4;
            for (; j < last; ++j, s0 = s1, s1 = s2, s2 = s3) {
                const int32_t v = s0 + q.bias[j];
                y[i * n + j] = sizeof(TY) == 4 ? static_cast<TY>(v)
                                               : static_cast<TY>(requantize(v, q.scale[q.scales == 1 ? 0 : j], lo, hi,
                                                                            q.y_zero));
            }
        }
    }
}
#endif

namespace qtile {

// How many channels a depthwise convolution splits into phase volumes at once: about 16 KB of them (the copy's
// per-row work is then shared by the channels, which matters for small images: MobileNet's 7 × 7 layers).
constexpr conv_dim depthwise_batch(const conv_shape& s) {
    const conv_dim per = wide_of(s).phases * wide_of(s).volume;
    const conv_dim n = tiles::index_div(16384, per > 0 ? per : 1);
    return n < 1 ? 1 : (n > 64 ? 64 : n);
}

// The scratch bytes of depthwise_planes: a batch of channels' phase volumes (and 128 bytes after them), the taps'
// offsets, a chunk of int32 sums and the wide positions' bytes.
constexpr conv_dim planes_scratch(const conv_shape& s) {
    return phases_size(s, depthwise_batch(s)) + 128 + round_up(s.taps() * 4, 64) + depthwise_chunk * 4 +
           round_up(wide_of(s).wide, 64);
}

#ifdef KS_QTILE_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // (GCC 12's _mm512_undefined_*() initializes a value with itself)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The depthwise convolutions AVX-512 VBMI and VNNI run straight from the image (no padded copy): a kernel row's taps
// for 16 output positions all lie in one 64-byte window of the input row (15·s_w + (k_w - 1)·d_w < 64), at most 4
// quads of taps per kernel row and 16 in all (a 7 × 7 kernel takes 14, 3 × 3 × 3 takes 9).
constexpr bool direct_fits(const conv_shape& s) {
    const conv_dim groups = (s.kernel[2] + 3) / 4;
    return 15 * s.stride[2] + (s.kernel[2] - 1) * s.dilation[2] < 64 && groups <= 4 &&
           s.kernel[0] * s.kernel[1] * groups <= 16;
}

// The lanes i of a 64-byte window starting at column c of a row of n bytes with 0 <= c + i < n.
inline uint64_t window_lanes(conv_dim c, conv_dim n) {
    const conv_dim a = c < 0 ? -c : 0, b = n - c < 64 ? n - c : 64;
    if (b <= a) {
        return 0;
    }
    return (b >= 64 ? ~0ull : (1ull << b) - 1) & ~((1ull << a) - 1);
}

// What the channel kernels share over a layer. depthwise_channel: index[q], the vpermb indices (lane i: position
// i / 4, tap 4·q + i % 4 of a kernel row, at byte position·s_w + tap·d_w of the window). depthwise_narrow (output rows
// of at most 8 positions): a block of 16 positions holds `rows` whole output rows, whose taps of one kernel row all
// lie in one 64-byte window of the input (from the first output row's input row, the next ones s_h input rows on);
// index[q]: lane (position p = i / 4: output row j, column c; tap t) takes byte j·s_h·W_in + c·s_w + (4q + t)·d_w;
// columns[q]: the lanes whose input column lies in the row (the others, and rows outside the image, take the zero
// point: a masked vpermb); row_lanes[j]: the lanes of output row j; all_rows: those of all.
struct direct_layout {  // (in the scratch, whose alignment is the workspace's: read with unaligned loads)
    uint8_t index[4][64];
    uint64_t columns[4];
    uint64_t row_lanes[16];
    uint64_t all_rows;  // (the lanes of all `rows` output rows)
    conv_dim rows;
};
constexpr conv_dim direct_layout_size = round_up(sizeof(direct_layout), 64);  // (its room at the scratch's start)

// One channel of a depthwise convolution for AVX-512 VBMI and VNNI (x: its input plane, raw bytes; y: its output
// plane): R output rows × NB blocks of 16 positions at a time, one accumulator each (R·NB independent sums). Each
// input row those output rows read is loaded once per block, as the 64-byte window its taps read (masked: columns
// outside the row, and rows outside the image, read the zero point, as the padding does); vpermb arranges its bytes
// as 16 quads (position p, tap t of quad q: byte p·s_w + (4q + t)·d_w; l.index[q]), and one vpdpbusd adds them,
// times the quad's weights of the kernel row that links the input row to each output row, to that row's sum. The
// sums are requantized in registers and stored with masks. FLIP: int8 activations, their bytes xor'ed with 0x80.
template <bool FLIP, int NB, int R>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni"))) void depthwise_channel(
    const conv_shape& s, const uint8_t* x, const direct_layout& l, const int32_t* quads, int32_t off, float scale,
    const tile_out& o, uint8_t x_zero, uint8_t* y) {
    const conv_dim groups = (s.kernel[2] + 3) / 4, sw = s.stride[2], sh = s.stride[1], dh = s.dilation[1];
    const conv_dim kh_n = s.kernel[1];
    const __m512i fill = _mm512_set1_epi8(static_cast<char>(x_zero));
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512 lo = _mm512_set1_ps(o.lo), hi = _mm512_set1_ps(o.hi), sc = _mm512_set1_ps(scale);
    const __m512i y_zero = _mm512_set1_epi32(o.zero);
    for (conv_dim od = 0; od < s.out[0]; ++od) {
        for (conv_dim oh0 = 0; oh0 < s.out[1]; oh0 += R) {
            for (conv_dim ow0 = 0; ow0 < s.out[2]; ow0 += 16 * NB) {
                __m512i acc[R][NB];
                uint64_t lanes[NB];
                KS_UNROLL for (int k = 0; k < NB; ++k) {
                    lanes[k] = window_lanes((ow0 + 16 * k) * sw - s.pad[2], s.in[2]);
                    KS_UNROLL for (int j = 0; j < R; ++j) {
                        acc[j][k] = _mm512_set1_epi32(off);
                    }
                }
                for (conv_dim kd = 0; kd < s.kernel[0]; ++kd) {
                    const conv_dim id = od * s.stride[0] - s.pad[0] + kd * s.dilation[0];
                    const bool depth_inside = id >= 0 && id < s.in[0];
                    const int32_t* wd = quads + kd * kh_n * groups;
                    const conv_dim first = oh0 * sh - s.pad[1], last = first + (R - 1) * sh + (kh_n - 1) * dh;
                    for (conv_dim ih = first; ih <= last; ++ih) {
                        const bool inside = depth_inside && ih >= 0 && ih < s.in[1];
                        const uint8_t* row = x + (inside ? (id * s.in[1] + ih) * s.in[2] : 0) - s.pad[2];
                        for (conv_dim q0 = 0; q0 < groups; ++q0) {
                            __m512i arranged[NB];
                            KS_UNROLL for (int k = 0; k < NB; ++k) {
                                const __m512i v = _mm512_mask_loadu_epi8(fill, inside ? lanes[k] : 0,
                                                                         row + (ow0 + 16 * k) * sw);
                                arranged[k] = _mm512_permutexvar_epi8(_mm512_loadu_si512(l.index[q0]), v);
                                if (FLIP) {
                                    arranged[k] = _mm512_xor_si512(arranged[k], flip);
                                }
                            }
                            KS_UNROLL for (int j = 0; j < R; ++j) {
                                const conv_dim d = ih - first - j * sh;  // (kernel row d / d_h of output row j)
                                if (d < 0 || d >= kh_n * dh || (dh != 1 && d % dh != 0)) {
                                    continue;
                                }
                                const __m512i wq = _mm512_set1_epi32(wd[(dh == 1 ? d : d / dh) * groups + q0]);
                                KS_UNROLL for (int k = 0; k < NB; ++k) {
                                    acc[j][k] = dpbusd(acc[j][k], arranged[k], wq);
                                }
                            }
                        }
                    }
                }
                KS_UNROLL for (int j = 0; j < R; ++j) {
                    if (oh0 + j >= s.out[1]) {
                        break;
                    }
                    uint8_t* yr = y + (od * s.out[1] + oh0 + j) * s.out[2];
                    KS_UNROLL for (int k = 0; k < NB; ++k) {
                        const conv_dim left = s.out[2] - ow0 - 16 * k;
                        const auto store = static_cast<__mmask16>(left >= 16 ? 0xffff : (left > 0 ? (1u << left) - 1 : 0));
                        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j][k]), sc);
                        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
                        _mm512_mask_cvtepi32_storeu_epi8(yr + ow0 + 16 * k, store,
                                                         _mm512_add_epi32(_mm512_cvtps_epi32(v), y_zero));
                    }
                }
            }
        }
    }
}

constexpr conv_dim narrow_rows(const conv_shape& s) {
    return s.out[2] <= 8 ? 16 / s.out[2] : 1;
}

// Whether depthwise_narrow takes the shape (direct_fits, and narrow_rows output rows' taps in one window).
constexpr bool narrow_fits(const conv_shape& s) {
    return s.out[2] <= 8 && (narrow_rows(s) - 1) * s.stride[1] * s.in[2] + (s.out[2] - 1) * s.stride[2] +
                                (s.kernel[2] - 1) * s.dilation[2] < 64;
}

inline void narrow_of(const conv_shape& s, direct_layout& l) {
    const conv_dim kw = s.kernel[2], width = s.out[2];
    l.rows = narrow_rows(s);
    for (conv_dim q0 = 0; q0 < (kw + 3) / 4; ++q0) {
        for (int i = 0; i < 64; ++i) {
            const conv_dim p = i / 4, j = p / width, t = q0 * 4 + i % 4;
            const conv_dim column = p % width * s.stride[2] - s.pad[2] + (t < kw ? t * s.dilation[2] : 0);
            const bool live = j < l.rows && column >= 0 && column < s.in[2];
            l.index[q0][i] = static_cast<uint8_t>(live ? j * s.stride[1] * s.in[2] + column + s.pad[2] : 0);
            l.columns[q0] |= static_cast<uint64_t>(live) << i;
        }
    }
    for (int i = 0; i < 64; ++i) {
        const conv_dim j = i / 4 / width;
        if (j < l.rows) {
            l.row_lanes[j] |= 1ull << i;
            l.all_rows |= 1ull << i;
        }
    }
}


// depthwise_channel for the common layers, their loops known when compiled: 2-d, a K × K kernel (3 or 5) without
// dilation, a row stride SH (1 or 2). Which input row meets which kernel row of which output row is then fixed, the
// weights stay in registers and nothing but the borders is decided at run time.
template <bool FLIP, int NB, int R, int K, int SH>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni"))) void depthwise_square(
    const conv_shape& s, const uint8_t* x, const direct_layout& l, const int32_t* quads, int32_t off, float scale,
    const tile_out& o, uint8_t x_zero, uint8_t* y) {
    constexpr int G = (K + 3) / 4, span = (R - 1) * SH + K;
    const conv_dim sw = s.stride[2];
    const __m512i fill = _mm512_set1_epi8(static_cast<char>(x_zero));
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512 lo = _mm512_set1_ps(o.lo), hi = _mm512_set1_ps(o.hi), sc = _mm512_set1_ps(scale);
    const __m512i y_zero = _mm512_set1_epi32(o.zero);
    __m512i weights[K * G];
    KS_UNROLL for (int i = 0; i < K * G; ++i) {
        weights[i] = _mm512_set1_epi32(quads[i]);
    }
    for (conv_dim oh0 = 0; oh0 < s.out[1]; oh0 += R) {
        const conv_dim first = oh0 * SH - s.pad[1];
        for (conv_dim ow0 = 0; ow0 < s.out[2]; ow0 += 16 * NB) {
            __m512i acc[R][NB];
            uint64_t lanes[NB];
            KS_UNROLL for (int k = 0; k < NB; ++k) {
                lanes[k] = window_lanes((ow0 + 16 * k) * sw - s.pad[2], s.in[2]);
                KS_UNROLL for (int j = 0; j < R; ++j) {
                    acc[j][k] = _mm512_set1_epi32(off);
                }
            }
            KS_UNROLL for (int r = 0; r < span; ++r) {
                const conv_dim ih = first + r;
                const bool inside = ih >= 0 && ih < s.in[1];
                const uint8_t* row = x + (inside ? ih * s.in[2] : 0) - s.pad[2];
                KS_UNROLL for (int q0 = 0; q0 < G; ++q0) {
                    __m512i arranged[NB];
                    KS_UNROLL for (int k = 0; k < NB; ++k) {
                        const __m512i v = _mm512_mask_loadu_epi8(fill, inside ? lanes[k] : 0, row + (ow0 + 16 * k) * sw);
                        arranged[k] = _mm512_permutexvar_epi8(_mm512_loadu_si512(l.index[q0]), v);
                        if (FLIP) {
                            arranged[k] = _mm512_xor_si512(arranged[k], flip);
                        }
                    }
                    KS_UNROLL for (int j = 0; j < R; ++j) {
                        const int kh = r - j * SH;  // (the kernel row linking input row r to output row j)
                        if (kh >= 0 && kh < K) {
                            KS_UNROLL for (int k = 0; k < NB; ++k) {
                                acc[j][k] = dpbusd(acc[j][k], arranged[k], weights[kh * G + q0]);
                            }
                        }
                    }
                }
            }
            KS_UNROLL for (int j = 0; j < R; ++j) {
                if (oh0 + j >= s.out[1]) {
                    break;
                }
                uint8_t* yr = y + (oh0 + j) * s.out[2];
                KS_UNROLL for (int k = 0; k < NB; ++k) {
                    const conv_dim left = s.out[2] - ow0 - 16 * k;
                    const auto store = static_cast<__mmask16>(left >= 16 ? 0xffff : (left > 0 ? (1u << left) - 1 : 0));
                    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j][k]), sc);
                    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
                    _mm512_mask_cvtepi32_storeu_epi8(yr + ow0 + 16 * k, store,
                                                     _mm512_add_epi32(_mm512_cvtps_epi32(v), y_zero));
                }
            }
        }
    }
}

// The weights of channel m's kernel rows as quads (row r, quad q at quads[r·groups + q]; taps past the row's end 0).
inline void row_quads(const conv_shape& s, const int8_t* w, int32_t* quads) {
    const conv_dim kw = s.kernel[2], groups = (kw + 3) / 4, rows = s.kernel[0] * s.kernel[1];
    for (conv_dim r = 0; r < rows; ++r) {
        for (conv_dim q0 = 0; q0 < groups; ++q0) {
            const conv_dim n = kw - 4 * q0 < 4 ? kw - 4 * q0 : 4;
            uint32_t quad = 0;
            for (conv_dim t = 0; t < n; ++t) {
                quad |= static_cast<uint32_t>(static_cast<uint8_t>(w[r * kw + 4 * q0 + t])) << (8 * t);
            }
            quads[r * groups + q0] = static_cast<int32_t>(quad);
        }
    }
}

// One 64-byte window a block of depthwise_narrow reads: where it starts in the channel's volume, the bytes loaded
// (those in the volume), the lanes of output rows whose input row lies in the image.
struct narrow_read {
    conv_dim start;
    uint64_t load, inside;
};

// The windows of output depth od, steps [first, first + count) (a step: NB blocks of l.rows output rows), in the order
// depthwise_narrow reads them: step, kernel row (kd, kh), block.
__attribute__((noinline)) inline void plan_narrow(const conv_shape& s, const direct_layout& l, conv_dim nb, conv_dim od, conv_dim first,
                        conv_dim count, narrow_read* reads) {
    const conv_dim rows = l.rows, sh = s.stride[1];
    for (conv_dim i = 0; i < count; ++i) {
        for (conv_dim kd = 0; kd < s.kernel[0]; ++kd) {
            const conv_dim id = od * s.stride[0] - s.pad[0] + kd * s.dilation[0];
            const bool depth_inside = id >= 0 && id < s.in[0];
            for (conv_dim kh = 0; kh < s.kernel[1]; ++kh) {
                for (conv_dim k = 0; k < nb; ++k) {
                    const conv_dim ih0 = ((first + i) * nb + k) * rows * sh - s.pad[1] + kh * s.dilation[1];
                    uint64_t inside = 0;
                    for (conv_dim j = 0; j < rows && depth_inside; ++j) {
                        const conv_dim ih = ih0 + j * sh;
                        inside |= ih >= 0 && ih < s.in[1] ? l.row_lanes[j] : 0;
                    }
                    narrow_read& r = *reads++;
                    r.start = (id * s.in[1] + ih0) * s.in[2] - s.pad[2];
                    r.load = inside ? window_lanes(r.start, s.in_plane()) : 0;
                    r.inside = inside;
                }
            }
        }
    }
}

// Output channel m (weights wm, sums starting from off, scale) of one image of a narrow depthwise convolution at
// output depth od, steps [first, first + count) (depthwise_narrow; xc, yc: the channel's input and output planes, raw
// bytes; rd: the steps' planned windows). Each step: NB blocks of l.rows output rows, one accumulator each; per kernel
// row, a block's window (masked loads: bytes outside the volume are not read) is arranged by a masked vpermb (lanes
// of columns outside the row, or of rows outside the image, take the zero point, as the padding does) and one
// vpdpbusd per quad of taps adds it times the quad's weights. A leaf (no calls: its vectors stay in registers).
template <bool FLIP, int NB>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni"), noinline)) void narrow_channel(
    const conv_shape& s, const direct_layout& l, const uint8_t* xc, const int8_t* wm, int32_t off, float scale,
    const requant& q, const narrow_read* rd, conv_dim od, conv_dim first, conv_dim count, uint8_t* yc) {
    const conv_dim groups = (s.kernel[2] + 3) / 4, krows = s.kernel[0] * s.kernel[1];
    const conv_dim rows = l.rows, width = s.out[2];
    const __m512i fill = _mm512_set1_epi8(static_cast<char>(q.x_zero));
    const __m512 lo = _mm512_set1_ps(static_cast<float>(q.lo - q.y_zero));
    const __m512 hi = _mm512_set1_ps(static_cast<float>(q.hi - q.y_zero));
    const __m512 sc = _mm512_set1_ps(scale);
    for (conv_dim i = 0; i < count; ++i) {
        __m512i acc[NB];
        KS_UNROLL for (int k = 0; k < NB; ++k) {
            acc[k] = _mm512_set1_epi32(off);
        }
        for (conv_dim r = 0; r < krows; ++r, rd += NB) {
            __m512i v[NB];
            KS_UNROLL for (int k = 0; k < NB; ++k) {
                v[k] = _mm512_maskz_loadu_epi8(rd[k].load, xc + rd[k].start);
            }
            for (conv_dim q0 = 0; q0 < groups; ++q0) {
                const conv_dim n = s.kernel[2] - 4 * q0 < 4 ? s.kernel[2] - 4 * q0 : 4;
                uint32_t quad = 0;  // (the kernel row's taps 4·q0 .. 4·q0 + 3; those past its end 0)
                for (conv_dim t = 0; t < n; ++t) {
                    quad |= static_cast<uint32_t>(static_cast<uint8_t>(wm[r * s.kernel[2] + 4 * q0 + t])) << (8 * t);
                }
                const __m512i wq = _mm512_set1_epi32(static_cast<int32_t>(quad));
                KS_UNROLL for (int k = 0; k < NB; ++k) {
                    __m512i a = _mm512_mask_permutexvar_epi8(fill, l.columns[q0] & rd[k].inside,
                                                             _mm512_loadu_si512(l.index[q0]), v[k]);
                    if (FLIP) {
                        a = _mm512_xor_si512(a, _mm512_set1_epi8(static_cast<char>(0x80)));
                    }
                    acc[k] = dpbusd(acc[k], a, wq);
                }
            }
        }
        const conv_dim oh0 = (first + i) * NB * rows;
        KS_UNROLL for (int k = 0; k < NB; ++k) {
            const conv_dim left = s.out[1] - oh0 - k * rows, live = (left < rows ? left : rows) * width;
            __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[k]), sc);
            u = _mm512_min_ps(_mm512_max_ps(u, lo), hi);
            _mm512_mask_cvtepi32_storeu_epi8(yc + (od * s.out[1] + oh0 + k * rows) * width,
                                             static_cast<__mmask16>(live > 0 ? (1u << live) - 1 : 0),
                                             _mm512_add_epi32(_mm512_cvtps_epi32(u), _mm512_set1_epi32(q.y_zero)));
        }
    }
}

// One image of a narrow depthwise convolution (narrow_fits(s); x, y: the image's first channel planes, raw bytes;
// M = C·mult): the windows of a run of steps planned once for all channels, then each channel's steps
// (narrow_channel). reads: room for `room` windows (at least the 16 kernel rows × 4 blocks of one step:
// planes_scratch leaves 77).
template <bool FLIP, int NB>
void depthwise_narrow(const conv_shape& s, const direct_layout& l, const uint8_t* x, const int8_t* w, uint8_t* y,
                      const requant& q, int32_t zero_u, narrow_read* reads, conv_dim room) {
    const conv_dim krows = s.kernel[0] * s.kernel[1], taps = s.taps(), mult = s.out_channels / s.channels;
    const conv_dim steps = (s.out[1] + NB * l.rows - 1) / (NB * l.rows), chunk = room / (krows * NB);
    for (conv_dim od = 0; od < s.out[0]; ++od) {
        for (conv_dim first = 0; first < steps; first += chunk) {
            const conv_dim count = steps - first < chunk ? steps - first : chunk;
            plan_narrow(s, l, NB, od, first, count, reads);
            for (conv_dim m = 0; m < s.out_channels; ++m) {
                const int8_t* wm = w + m * taps;
                int32_t total = 0;
                for (conv_dim t = 0; t < taps; ++t) {
                    total += wm[t];
                }
                narrow_channel<FLIP, NB>(s, l, x + m / mult * s.in_plane(), wm, (q.bias ? q.bias[m] : 0) - zero_u * total,
                                         q.scale[q.scales == 1 ? 0 : m], q, reads, od, first, count,
                                         y + m * s.positions());
            }
        }
    }
}

using narrow_fn = void (*)(const conv_shape&, const direct_layout&, const uint8_t*, const int8_t*, uint8_t*,
                           const requant&, int32_t, narrow_read*, conv_dim);

// depthwise_narrow for s: NB blocks (at most 4) at a time, chosen so that the last step computes few blocks nobody
// reads.
template <bool FLIP>
narrow_fn narrow_kernel(const conv_shape& s) {
    const conv_dim blocks = (s.out[1] + narrow_rows(s) - 1) / narrow_rows(s);
    const conv_dim steps = (blocks + 3) / 4, nb = (blocks + steps - 1) / steps;
    return nb <= 1 ? depthwise_narrow<FLIP, 1>
                   : (nb == 2 ? depthwise_narrow<FLIP, 2>
                              : (nb == 3 ? depthwise_narrow<FLIP, 3> : depthwise_narrow<FLIP, 4>));
}

using depthwise_channel_fn = void (*)(const conv_shape&, const uint8_t*, const direct_layout&, const int32_t*, int32_t,
                                      float, const tile_out&, uint8_t, uint8_t*);

// depthwise_square for NB blocks (4 output rows at a time for 1 or 2 blocks, else 2), a K × K kernel and row stride SH.
template <bool FLIP, int K, int SH>
depthwise_channel_fn square_of(conv_dim nb) {
    return nb <= 1 ? depthwise_square<FLIP, 1, 4, K, SH>
                   : (nb == 2 ? depthwise_square<FLIP, 2, 4, K, SH>
                              : (nb == 3 ? depthwise_square<FLIP, 3, 2, K, SH> : depthwise_square<FLIP, 4, 2, K, SH>));
}

template <bool FLIP>
depthwise_channel_fn square_kernel(conv_dim nb, conv_dim k, conv_dim sh) {
    if (k == 3) {
        return sh == 1 ? square_of<FLIP, 3, 1>(nb) : square_of<FLIP, 3, 2>(nb);
    }
    return sh == 1 ? square_of<FLIP, 5, 1>(nb) : square_of<FLIP, 5, 2>(nb);
}

// The channel kernel for s (not narrow): NB blocks of 16 positions at a time, NB <= 4 chosen so that
// the last step computes few blocks nobody reads (and 4 or 2 output rows at a time: 8 sums or fewer in flight).
template <bool FLIP>
depthwise_channel_fn direct_kernel(const conv_shape& s) {
    const conv_dim blocks = (s.out[2] + 15) / 16;
    const conv_dim steps = (blocks + 3) / 4, nb = (blocks + steps - 1) / steps;
    const conv_dim k = s.kernel[1];
    const bool square = s.in[0] == 1 && s.kernel[0] == 1 && s.kernel[2] == k && (k == 3 || k == 5) &&
                        s.dilation[1] == 1 && s.dilation[2] == 1 && s.stride[1] <= 2;
    if (square) {
        return square_kernel<FLIP>(nb, k, s.stride[1]);
    }
    return nb <= 1 ? depthwise_channel<FLIP, 1, 4>
                   : (nb == 2 ? depthwise_channel<FLIP, 2, 4>
                              : (nb == 3 ? depthwise_channel<FLIP, 3, 2> : depthwise_channel<FLIP, 4, 2>));
}

// The layout depthwise_channel reads (its vpermb indices), or narrow_of(s) for depthwise_narrow, into l (zeroed).
inline void direct_of(const conv_shape& s, direct_layout& l) {
    if (narrow_fits(s)) {
        narrow_of(s, l);
        return;
    }
    const conv_dim kw = s.kernel[2];
    for (conv_dim q0 = 0; q0 < (kw + 3) / 4; ++q0) {
        for (int i = 0; i < 64; ++i) {
            const conv_dim t = q0 * 4 + i % 4;
            l.index[q0][i] = static_cast<uint8_t>(i / 4 * s.stride[2] + (t < kw ? t * s.dilation[2] : 0));
        }
    }
}

// A depthwise convolution (M = C·multiplier, direct_fits(s)) of 8-bit x with AVX-512 VBMI and VNNI, read in place
// (depthwise_channel, depthwise_narrow); y written in place; scratch (planes_scratch(s) bytes) holds the layout and
// the narrow kernels' planned windows.
template <class TX, class TY>
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni"), noinline)) void depthwise_direct(
    const conv_shape& s, conv_dim images, const TX* x, const int8_t* w, TY* y, uint8_t* scratch, const requant& q) {
    constexpr bool flip = static_cast<TX>(-1) < 0;
    const conv_dim taps = s.taps(), mult = s.out_channels / s.channels;
    __builtin_memset(scratch, 0, sizeof(direct_layout));
    direct_layout& layout = *reinterpret_cast<direct_layout*>(scratch);
    direct_of(s, layout);
    const int32_t zero_u = unsigned_zero<TX>(q.x_zero);
    if (narrow_fits(s)) {
        const narrow_fn narrow = narrow_kernel<flip>(s);
        narrow_read* reads = reinterpret_cast<narrow_read*>(scratch + direct_layout_size);
        const conv_dim room = (planes_scratch(s) - direct_layout_size) / static_cast<conv_dim>(sizeof(narrow_read));
        for (conv_dim n = 0; n < images; ++n) {
            narrow(s, layout, reinterpret_cast<const uint8_t*>(x + n * s.channels * s.in_plane()), w,
                   reinterpret_cast<uint8_t*>(y + n * s.out_channels * s.positions()), q, zero_u, reads, room);
        }
        return;
    }
    const depthwise_channel_fn channel = direct_kernel<flip>(s);
    const tile_out o = output_of(q, nullptr, q.scale, true, nullptr);
    int32_t quads[16];
    for (conv_dim n = 0; n < images; ++n) {
        for (conv_dim m = 0; m < s.out_channels; ++m) {
            const int8_t* wm = w + m * taps;
            int32_t total = 0;
            for (conv_dim t = 0; t < taps; ++t) {
                total += wm[t];
            }
            row_quads(s, wm, quads);
            const uint8_t* xc = reinterpret_cast<const uint8_t*>(x + (n * s.channels + m / mult) * s.in_plane());
            channel(s, xc, layout, quads, (q.bias ? q.bias[m] : 0) - zero_u * total, q.scale[q.scales == 1 ? 0 : m], o,
                    static_cast<uint8_t>(q.x_zero), reinterpret_cast<uint8_t*>(y + (n * s.out_channels + m) * s.positions()));
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#ifdef KS_QTILE_DSP
// Two 16-bit lanes: the low lanes of a and b (PKHBT), the high lanes of a and b (PKHTB).
inline int32_t low_lanes(int32_t a, int32_t b) {
    return static_cast<int32_t>((static_cast<uint32_t>(a) & 0xffffu) | (static_cast<uint32_t>(b) << 16));
}
inline int32_t high_lanes(int32_t a, int32_t b) {
    return static_cast<int32_t>((static_cast<uint32_t>(a) >> 16) | (static_cast<uint32_t>(b) & 0xffff0000u));
}

constexpr conv_dim depthwise_dsp_taps = 64;  // (the most taps depthwise_sums_dsp takes: 32 pairs of weights)

// depthwise_planes' sums of one chunk of `len` wide positions (a multiple of 4) of one channel (weights wm) with SMLAD:
// 4 positions at a time, their sums in registers over the taps two at a time: the two taps' bytes of a position side
// by side in 16-bit lanes (UXTB16/SXTB16 of a word of 4 positions of each tap, then PKHBT/PKHTB), times pairs[t / 2]
// (the two taps' weights as 16-bit lanes; a last odd tap's partner weighs 0 and reads at[taps] = at[taps - 1]). Out
// of line: its 128 B of pairs are not in depthwise_planes' frame (496 B at -O3 without them; the bound is 512).
template <class TX>
__attribute__((noinline)) void depthwise_sums_dsp(const TX* image, const int32_t* at, const int8_t* wm, conv_dim taps,
                                                  conv_dim len, int32_t off, int32_t* sums) {
    constexpr bool SIGNED = static_cast<TX>(-1) < 0;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(image);
    const int32_t n = static_cast<int32_t>(len), half = static_cast<int32_t>((taps + 1) / 2);
    int32_t pairs[depthwise_dsp_taps / 2];
    for (int32_t p = 0; p < half; ++p) {
        pairs[p] = low_lanes(wm[2 * p], 2 * p + 1 < taps ? wm[2 * p + 1] : 0);
    }
    for (int32_t i = 0; i < n; i += 4) {
        int32_t s0 = off, s1 = off, s2 = off, s3 = off;
        KS_ROLLED for (int32_t p = 0; p < half; ++p) {
            const byte_lanes a = lanes_of<SIGNED>(base + at[2 * p] + i);
            const byte_lanes b = lanes_of<SIGNED>(base + at[2 * p + 1] + i);
            const int32_t w = pairs[p];
            s0 = __smlad(low_lanes(a.even, b.even), w, s0);  // (position i: bytes 0 of both words)
            s1 = __smlad(low_lanes(a.odd, b.odd), w, s1);
            s2 = __smlad(high_lanes(a.even, b.even), w, s2);
            s3 = __smlad(high_lanes(a.odd, b.odd), w, s3);
        }
        sums[i] = s0;
        sums[i + 1] = s1;
        sums[i + 2] = s2;
        sums[i + 3] = s3;
    }
}
#endif
#ifdef KS_QTILE_X86
// depthwise_plane's sums with AVX2 (x86-64-v3 without VNNI, tile level 1): 16 positions in two registers
// over all the taps, two taps at a time: their bytes widened to int16 and interleaved into pairs (position i's byte
// of tap t beside its byte of tap t + 1) and multiplied by the two weights with vpmaddwd (exact), then requantized in
// the registers into `bytes`. pairs[p]: the weights of taps 2p and 2p + 1 as int16 (the second 0 past the taps).
// The loops the compiler vectorized instead multiplied each tap's bytes with vpmulld into sums kept in memory.
constexpr conv_dim depthwise_avx2_taps = 64;  // (the most taps it takes: pairs on the stack)

template <bool SIGNED>
__attribute__((target("avx2"), always_inline)) inline __m256i widen16(const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return SIGNED ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

template <bool SIGNED>
__attribute__((target("avx2"), noinline)) void depthwise_sums_avx2(const uint8_t* image, const int32_t* at,
                                                                   const int32_t* pairs, conv_dim taps, conv_dim len,
                                                                   int32_t off, float scale, float lo, float hi,
                                                                   int32_t zero, uint8_t* bytes) {
    const __m256 vs = _mm256_set1_ps(scale), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    const __m256i vz = _mm256_set1_epi32(zero), mask = _mm256_set1_epi16(0x00ff);
    for (conv_dim i = 0; i < len; i += 16) {
        __m256i c0 = _mm256_set1_epi32(off), c1 = c0;
        for (conv_dim t = 0; t < taps; t += 2) {
            const __m256i x0 = widen16<SIGNED>(image + at[t] + i);
            const __m256i x1 = t + 1 < taps ? widen16<SIGNED>(image + at[t + 1] + i) : _mm256_setzero_si256();
            const __m256i w = _mm256_set1_epi32(pairs[t / 2]);
            c0 = madd_add(c0, _mm256_unpacklo_epi16(x0, x1), w);  // (positions 0-3 and 8-11)
            c1 = madd_add(c1, _mm256_unpackhi_epi16(x0, x1), w);  // (4-7 and 12-15)
        }
        const __m256 v0 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c0), vs), vlo), vhi);
        const __m256 v1 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c1), vs), vlo), vhi);
        const __m256i y0 = _mm256_add_epi32(_mm256_cvtps_epi32(v0), vz);
        const __m256i y1 = _mm256_add_epi32(_mm256_cvtps_epi32(v1), vz);
        const __m256i w16 = _mm256_and_si256(_mm256_packs_epi32(y0, y1), mask);  // (in order per 128-bit lane)
        const __m256i b8 = _mm256_packus_epi16(w16, w16);  // (bytes 0-7 of each lane: positions 0-7, 8-15)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + i),
                         _mm256_castsi256_si128(_mm256_permute4x64_epi64(b8, 0x08)));
    }
}
#endif

// Output channel m of a depthwise convolution from its input channel's phase volume `image` (depthwise_planes; at:
// the taps' offsets; sums, bytes: its rooms in the scratch), requantized into y (the channel's output plane). Out of
// line (and split_phases called out of line) so that no frame holds the loops' spilled values: 0.8-0.9 KB inlined.
template <class TX, class TY>
__attribute__((noinline)) void depthwise_plane(const conv_shape& s, const wide_geometry& g, const TX* image,
                                               const int32_t* at, const int8_t* wm, int32_t off, float scale,
                                               const requant& q, int32_t* sums, uint8_t* bytes, TY* y) {
    const conv_dim taps = s.taps();
    const float lo = static_cast<float>(q.lo - q.y_zero), hi = static_cast<float>(q.hi - q.y_zero);
#ifdef KS_QTILE_X86
    if (best_level() == 1 && taps <= depthwise_avx2_taps) {  // (AVX2 without VNNI: the AVX-512 levels as before)
        int32_t pairs[depthwise_avx2_taps / 2];
        for (conv_dim t = 0; t < taps; t += 2) {
            const uint32_t second = t + 1 < taps ? static_cast<uint16_t>(static_cast<int16_t>(wm[t + 1])) : 0u;
            pairs[t / 2] = static_cast<int32_t>(static_cast<uint16_t>(static_cast<int16_t>(wm[t])) | second << 16);
        }
        depthwise_sums_avx2<(static_cast<TX>(-1) < 0)>(reinterpret_cast<const uint8_t*>(image), at, pairs, taps,
                                                      round_up(g.wide, 16), off, scale, lo, hi, q.y_zero, bytes);
        compact_image(s, g, bytes, 0, 1, y);
        return;
    }
#endif
    // a chunk of wide positions at a time, its sums in L1; whole vectors of 16 (the positions past the wide ones
    // are computed and never read)
    for (conv_dim j0 = 0; j0 < g.wide; j0 += depthwise_chunk) {
        const conv_dim len = round_up(g.wide - j0 < depthwise_chunk ? g.wide - j0 : depthwise_chunk, 16);
#ifdef KS_QTILE_DSP
        if (taps <= depthwise_dsp_taps) {
            depthwise_sums_dsp(image + j0, at, wm, taps, len, off, sums);
        } else
#endif
        {
            for (conv_dim i = 0; i < len; ++i) {
                sums[i] = off;
            }
            for (conv_dim t = 0; t < taps; ++t) {
                const TX* src = image + at[t] + j0;
                const int32_t wt = wm[t];
                KS_OMP_SIMD()
                for (conv_dim i = 0; i < len; ++i) {
                    sums[i] += wt * static_cast<int32_t>(src[i]);
                }
            }
        }
        KS_OMP_SIMD()
        for (conv_dim i = 0; i < len; ++i) {
            bytes[j0 + i] = static_cast<uint8_t>(requantize(sums[i], scale, lo, hi, q.y_zero));
        }
    }
    compact_image(s, g, bytes, 0, 1, y);
}

// Channels c0 .. c0 + count of image x (its first channel) of a depthwise convolution (depthwise_planes; one: s for
// one channel, g: its wide geometry): split into phase volumes, then each of their output channels computed by
// depthwise_plane into y (the image's output).
template <class TX, class TY>
__attribute__((noinline)) void depthwise_batch_planes(const conv_shape& s, const conv_shape& one, const wide_geometry& g,
                                                      const TX* x, conv_dim c0, conv_dim count, const int8_t* w, TY* y,
                                                      uint8_t* scratch, const requant& q) {
    uint8_t* phases = scratch;
    // (after the phases, room for what the last vector reads past the last channel)
    int32_t* at = reinterpret_cast<int32_t*>(scratch + phases_size(s, depthwise_batch(s)) + 128);
    int32_t* sums = at + round_up(s.taps() * 4, 64) / 4;
    uint8_t* bytes = reinterpret_cast<uint8_t*>(sums + depthwise_chunk);
    const conv_dim mult = tiles::index_div(s.out_channels, s.channels), taps = s.taps(), p = s.positions();
    split_image(one, g, x + c0 * s.in_plane(), count, static_cast<uint8_t>(q.x_zero), phases);
    tap_offsets(one, g, count, at);  // (one's depth: its taps)
#ifdef KS_QTILE_DSP
    if (taps & 1) {  // (an odd count of taps leaves room in at's 64-byte rounding for one more: depthwise_sums_dsp)
        at[taps] = at[taps - 1];
    }
#endif
    for (conv_dim ci = 0; ci < count * mult; ++ci) {
        const conv_dim m = c0 * mult + ci;
        const int8_t* wm = w + m * taps;
        int32_t total = 0;
        for (conv_dim t = 0; t < taps; ++t) {
            total += wm[t];
        }
        depthwise_plane(s, g, reinterpret_cast<const TX*>(phases) + tiles::index_div(ci, mult) * g.volume, at, wm,
                        (q.bias ? q.bias[m] : 0) - q.x_zero * total, q.scale[q.scales == 1 ? 0 : m], q, sums, bytes,
                        y + m * p);
    }
}

// A depthwise convolution (M = C·multiplier) of 8-bit x, requantized: a batch of channels split into phase volumes
// (as ks::qconv does), then for each channel, a chunk of wide positions at a time (its sums stay in L1), every tap's
// weight times the run of positions it reads, requantized into bytes; the output positions taken from those. With
// AVX-512 VBMI and VNNI (and a kernel depthwise_direct takes), depthwise_direct instead, from the image in place.
template <class TX, class TY>
void depthwise_planes(const conv_shape& s, conv_dim images, const TX* x, const int8_t* w, TY* y, uint8_t* scratch,
                      const requant& q) {
#ifdef KS_QTILE_X86
    if (best_level() == 3 && direct_fits(s)) {
        depthwise_direct(s, images, x, w, y, scratch, q);
        return;
    }
#endif
    const conv_dim batch = depthwise_batch(s);
    const wide_geometry g = wide_of(s);
    conv_shape one = s;
    one.channels = one.out_channels = one.groups = 1;
    for (conv_dim n = 0; n < images; ++n) {
        for (conv_dim c0 = 0; c0 < s.channels; c0 += batch) {
            const conv_dim count = s.channels - c0 < batch ? s.channels - c0 : batch;
            depthwise_batch_planes(s, one, g, x + n * s.channels * s.in_plane(), c0, count, w,
                                   y + n * s.out_channels * s.positions(), scratch, q);
        }
    }
}

}  // namespace qtile

// The scratch bytes ks::qconv_depthwise uses (qtile::planes_scratch).
constexpr conv_dim qconv_depthwise_scratch(const conv_shape& s) {
    return qtile::planes_scratch(s);
}

// A depthwise convolution (one group per input channel, M = C·multiplier) of 8-bit x, requantized (see
// qtile::depthwise_planes).
#ifdef KS_QCONV_GATHER
// The sum of one output position of a depthwise convolution, bias included: its taps read where they lie (those in
// the padding add (x_zero - x_zero)·w = 0: skipped), a kernel row without bounds checks when all its columns are
// inside the image; 32-bit indices (the target's word).
template <class TX>
int32_t depthwise_sum(const conv_shape& s, const TX* x, const int8_t* w, const conv_dim (&o)[3], int32_t sum,
                      int32_t x_zero) {
    const int32_t width = static_cast<int32_t>(s.in[2]), kw = static_cast<int32_t>(s.kernel[2]);
    const int32_t dw = static_cast<int32_t>(s.dilation[2]);
    const int32_t w0 = static_cast<int32_t>(o[2] * s.stride[2] - s.pad[2]);
    const bool inner = w0 >= 0 && w0 + (kw - 1) * dw < width;
    for (conv_dim kd = 0; kd < s.kernel[0]; ++kd) {
        const conv_dim id = o[0] * s.stride[0] - s.pad[0] + kd * s.dilation[0];
        for (conv_dim kh = 0; kh < s.kernel[1]; ++kh) {
            const conv_dim ih = o[1] * s.stride[1] - s.pad[1] + kh * s.dilation[1];
            if (id < 0 || id >= s.in[0] || ih < 0 || ih >= s.in[1]) {
                continue;
            }
            const TX* row = x + (id * s.in[1] + ih) * s.in[2];
            const int8_t* wr = w + (kd * s.kernel[1] + kh) * kw;
            for (int32_t t = 0, iw = w0; t < kw; ++t, iw += dw) {
                if (inner || static_cast<uint32_t>(iw) < static_cast<uint32_t>(width)) {
                    sum += (static_cast<int32_t>(row[iw]) - x_zero) * wr[t];
                }
            }
        }
    }
    return sum;
}

// ks::qconv_depthwise of a microcontroller's build for size: each output position's sum (depthwise_sum) requantized
// as the tiles requantize, no phase volumes (the scratch unused).
template <class TX, class TY>
__attribute__((noinline)) void depthwise_gathered(const conv_shape& s, conv_dim images, const TX* x, const int8_t* w,
                                                  TY* y, const requant& q) {
    const conv_dim mult = tiles::index_div(s.out_channels, s.channels), taps = s.taps(), p = s.positions();
    const float lo = static_cast<float>(q.lo - q.y_zero), hi = static_cast<float>(q.hi - q.y_zero);
    for (conv_dim n = 0; n < images; ++n) {
        for (conv_dim m = 0; m < s.out_channels; ++m) {
            const TX* xc = x + (n * s.channels + tiles::index_div(m, mult)) * s.in_plane();
            const float scale = q.scale[q.scales == 1 ? 0 : m];
            TY* ym = y + (n * s.out_channels + m) * p;
            conv_dim o[3] = {0, 0, 0};
            for (conv_dim j = 0; j < p; ++j) {
                const int32_t sum = depthwise_sum(s, xc, w + m * taps, o, q.bias ? q.bias[m] : 0, q.x_zero);
                ym[j] = static_cast<TY>(qtile::requantize(sum, scale, lo, hi, q.y_zero));
                for (int a = 2; a >= 0 && ++o[a] == s.out[a]; --a) {
                    o[a] = 0;
                }
            }
        }
    }
}
#endif

template <class TX, class TY>
void qconv_depthwise(const conv_shape& s, conv_dim images, const TX* x, const int8_t* w, TY* y, uint8_t* scratch,
                     const requant& q) {
#ifdef KS_QCONV_GATHER
    (void)scratch;
    depthwise_gathered(s, images, x, w, y, q);
#else
    qtile::depthwise_planes(s, images, x, w, y, scratch, q);
#endif
}

namespace qtile {

#ifdef KS_QTILE_X86
// qlookup with AVX-512 VBMI: 64 bytes at a time, each table half (128 entries) in two registers read by vpermi2b
// with the byte's low 7 bits, the byte's top bit choosing the half.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void lookup_vbmi(conv_dim n, const uint8_t* table,
                                                                              const uint8_t* x, uint8_t* y) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    for (conv_dim i = 0; i < n; i += 64) {
        const __mmask64 live = n - i >= 64 ? ~__mmask64(0) : (__mmask64(1) << (n - i)) - 1;
        const __m512i v = _mm512_maskz_loadu_epi8(live, x + i);
        const __m512i low = _mm512_permutex2var_epi8(t0, v, t1), high = _mm512_permutex2var_epi8(t2, v, t3);
        _mm512_mask_storeu_epi8(y + i, live, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high));
    }
}
#endif

}  // namespace qtile

// y[i] = table[the byte of x[i]] for i < n: an 8-bit tensor through a 256-entry table (a unary region of an int8
// model that ksbuild tabulated: transforms/tabulate.py).
template <class TX, class TY>
void qlookup(conv_dim n, const TY* table, const TX* x, TY* y) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(x);
#ifdef KS_QTILE_X86
    if (qtile::best_level() >= 3) {
        qtile::lookup_vbmi(n, reinterpret_cast<const uint8_t*>(table), bytes, reinterpret_cast<uint8_t*>(y));
        return;
    }
#endif
    for (conv_dim i = 0; i < n; ++i) {
        y[i] = table[bytes[i]];
    }
}

// onnxruntime's QLinearSoftmax along rows of n bytes (ksbuild/ops/quant.py: softmax_quantized): each byte's entry
// e = table[x - max(row) + 255], the row's f32 sum s of them added left to right, and
// y = clamp(round_half_even(e · ratio / s) + y_zero, lo, hi) with the quotient in double (e · ratio exact there;
// ratio = floor(1 / y_scale)), which is onnxruntime 1.32's result bit for bit. The sums run eight rows at a time,
// each row's in its order, so that eight chains of dependent additions overlap; the quotients are a loop the
// compiler vectorizes (a gather of the entries, double lanes).
namespace qtile {
constexpr conv_dim softmax_rows = 8;

template <class T>
int row_max(conv_dim n, const T* x) {
    int m = x[0];
    for (conv_dim k = 0; k < n; ++k) {  // (no omp simd: its reduction's per-lane arrays, inlined for 8 rows, made
                                        // ks::qsoftmax's frame 648 B; GCC vectorizes an integer max without it)
        m = m > int(x[k]) ? m : int(x[k]);
    }
    return m;
}

// round half to even of 0 <= q < 2^51 in the default rounding mode (the sum rounds away the fraction)
inline double round_even(double q) {
    const double big = 6755399441055744.0;  // 1.5 · 2^52
    return (q + big) - big;
}

// y[k] = round_half_even(min(e[k] · ratio / sum, top)) + y_zero for e[k] = t[x[k]]
template <class T>
void softmax_row(conv_dim n, const float* t, const T* x, T* y, double ratio, double sum, double top, int y_zero) {
    for (conv_dim k = 0; k < n; ++k) {
        const double q = double(t[int(x[k])]) * ratio / sum;
        y[k] = T(int(round_even(q < top ? q : top)) + y_zero);
    }
}
}  // namespace qtile

template <class T>
void qsoftmax(conv_dim rows, conv_dim n, const float* table, const T* x, T* y, double ratio, int y_zero, int lo,
              int hi) {
    (void)lo;  // (0 <= e · ratio / s and lo <= y_zero: no result is below lo)
    constexpr conv_dim g = qtile::softmax_rows;
    const double top = double(hi - y_zero);  // (a quotient above it saturates, an integer: round_even keeps it)
    for (conv_dim r0 = 0; r0 < rows; r0 += g) {
        const conv_dim live = rows - r0 < g ? rows - r0 : g;
        const float* t[g];
        const T* row[g];
        float s[g];
        for (conv_dim i = 0; i < g; ++i) {
            row[i] = x + (r0 + (i < live ? i : 0)) * n;
            t[i] = table + 255 - qtile::row_max(n, row[i]);
            s[i] = 0.0f;
        }
        for (conv_dim k = 0; k < n; ++k) {
            for (conv_dim i = 0; i < g; ++i) {
                s[i] += t[i][int(row[i][k])];
            }
        }
        for (conv_dim i = 0; i < live; ++i) {
            qtile::softmax_row(n, t[i], row[i], y + (r0 + i) * n, ratio, double(s[i]), top, y_zero);
        }
    }
}

// The integer kernels the layer compiles, for activations TX and outputs TY (ks/kernels.h).
#define KS_QUANT_LAYER(PREFIX, TX, TY)                                                                            \
    PREFIX void qconv<TX, TY>(const conv_shape&, conv_dim, const TX*, const uint8_t*, TY*, uint8_t*, const requant&); \
    PREFIX void qconv_depthwise<TX, TY>(const conv_shape&, conv_dim, const TX*, const int8_t*, TY*, uint8_t*,         \
                                        const requant&);                                                           \
    PREFIX void qmatmul<TX, TY>(conv_dim, conv_dim, conv_dim, const TX*, conv_dim, const uint8_t*, TY*, uint8_t*,       \
                                const requant&);                                                           \
    PREFIX void qlookup<TX, TY>(conv_dim, const TY*, const TX*, TY*);                                            \
    KS_QUANT_FOLDED(PREFIX, TX, TY)

// ks::qmatmul_folded: a microcontroller's alone (ks::qtile::bias_offsets).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
#define KS_QUANT_FOLDED(PREFIX, TX, TY)                                                                           \
    PREFIX void qmatmul_folded<TX, TY>(conv_dim, conv_dim, conv_dim, const TX*, conv_dim, const uint8_t*, TY*,    \
                                       uint8_t*, const requant&);
#else
#define KS_QUANT_FOLDED(PREFIX, TX, TY)
#endif

// ks::qmatmul with int32 results (ONNX MatMulInteger), and (but on a microcontroller, which ksbuild leaves them
// int32: transforms/float_products.py) with float ones, for activations TX; ks::qsoftmax of TX.
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M'
#define KS_QSUMS_LAYER(PREFIX, TX)                                                                                \
    PREFIX void qmatmul<TX, int32_t>(conv_dim, conv_dim, conv_dim, const TX*, conv_dim, const uint8_t*, int32_t*,  \
                                     uint8_t*, const requant&);                                                   \
    PREFIX void qsoftmax<TX>(conv_dim, conv_dim, const float*, const TX*, TX*, double, int, int, int);
#else
#define KS_QSUMS_LAYER(PREFIX, TX)                                                                                \
    PREFIX void qmatmul<TX, int32_t>(conv_dim, conv_dim, conv_dim, const TX*, conv_dim, const uint8_t*, int32_t*,  \
                                     uint8_t*, const requant&);                                                   \
    PREFIX void qmatmul<TX, float>(conv_dim, conv_dim, conv_dim, const TX*, conv_dim, const uint8_t*, float*,      \
                                   uint8_t*, const requant&);                                                     \
    PREFIX void qsoftmax<TX>(conv_dim, conv_dim, const float*, const TX*, TX*, double, int, int, int);
#endif

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_QCONV_H
