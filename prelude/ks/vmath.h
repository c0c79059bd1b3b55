// ks/vmath.h — exp, log and tanh that vectorize (included by ks/prelude.h).
//
// std::exp and std::log are library calls, so a loop that uses them runs one element at a
// time. These are inline, branch-free polynomial approximations with range reduction: bit
// casts, adds, multiplies, one divide and selects, all of which GCC and Clang vectorize with
// baseline SSE2 (no 64-bit shifts right, no int64 <-> double conversions). No tables, no
// errno, no library calls: they also build freestanding for Cortex-M.
//
// Accuracy: within 2 ulp of the correctly rounded result for normal and subnormal results
// (tests/cpp/test_prelude.cpp measures it); exp overflows to +inf and underflows to 0,
// log(0) = -inf, log(x < 0) = NaN, NaN in gives NaN out.
#ifndef KS_VMATH_H
#define KS_VMATH_H

#include <cstdint>
#include <cstring>

#include "namespace.h"

// Inlined wherever they are called, whatever the compiler's inlining budget for the whole file: an out-of-line
// exp in an epilogue's loop would make the loop scalar (a network of many SiLUs lost 30% of its time there).
#if defined(__GNUC__) || defined(__clang__)
#define KS_ALWAYS_INLINE __attribute__((always_inline))
#else
#define KS_ALWAYS_INLINE
#endif
// KS_MATH, the functions themselves (exp, log, tanh, logistic, erf): inlined so, except on a microcontroller (an
// M-profile core: no vector unit, no loop to vectorize), where each is one function the package calls: inlined,
// the LSTM's five gates made five copies of exp (about 0.1 KB each on a Cortex-M4).
#if defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M' && (defined(__GNUC__) || defined(__clang__))
#define KS_MATH __attribute__((noinline))
#else
#define KS_MATH KS_ALWAYS_INLINE
#endif

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {
namespace detail {

KS_ALWAYS_INLINE inline double bits_to_double(uint64_t u) {
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
}

KS_ALWAYS_INLINE inline uint64_t double_bits(double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
}

KS_ALWAYS_INLINE inline float bits_to_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

KS_ALWAYS_INLINE inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// 2^k for an integer k in [-1022, 1023] given as the difference of bit patterns below.
KS_ALWAYS_INLINE inline double pow2(uint64_t k) {
    return bits_to_double((k + 1023u) << 52);
}

KS_ALWAYS_INLINE inline float pow2f(uint32_t k) {
    return bits_to_float((k + 127u) << 23);
}

}  // namespace detail

// e^x. x = k ln2 + r with |r| <= ln2/2: k is rounded by adding 1.5 * 2^52 (its integer value
// is then the difference of bit patterns), ln2 is split in two (Cody–Waite) so that
// r = hi - lo carries the rounding of k ln2, and e^r = 1 - ((lo - r c / (2 - c)) - hi) with
// c = r - r² P(r²), the remez polynomial of fdlibm e_exp.c (Sun Microsystems). 2^k is applied
// as 2^(k/2) 2^(k - k/2), so results near the range ends (k up to ±1077) neither overflow nor
// flush early.
KS_MATH inline double exp(double x) {
    const double shifter = 6755399441055744.0;  // 1.5 * 2^52
    x = x < -746.0 ? -746.0 : (x > 710.0 ? 710.0 : x);  // NaN passes through
    const double t = x * 1.4426950408889634 + shifter;  // log2(e) x, rounded in the low bits
    const double kf = t - shifter;
    const double hi = x - kf * 6.93147180369123816490e-01;
    const double lo = kf * 1.90821492927058770002e-10;
    const double r = hi - lo;
    const double rr = r * r;
    const double c = r - rr * (1.66666666666666019037e-01 +
                               rr * (-2.77777777770155933842e-03 +
                                     rr * (6.61375632143793436117e-05 +
                                           rr * (-1.65339022054652515390e-06 + rr * 4.13813679705723846039e-08))));
    const double er = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    const uint64_t k = detail::double_bits(t) - detail::double_bits(shifter);
    const uint64_t k1 = detail::double_bits(kf * 0.5 + shifter) - detail::double_bits(shifter);
    return er * detail::pow2(k1) * detail::pow2(k - k1);
}

namespace detail {
constexpr float float_shifter = 12582912.0f;  // 1.5 * 2^23

// e^r for x = k ln2 + r, |r| <= ln2/2, and t = k + float_shifter (k in its low bits): the reduction and
// polynomial exp(float) and exp_one_scale share.
KS_ALWAYS_INLINE inline float exp_reduced(float x, float& t) {
    t = x * 1.44269504088896341f + float_shifter;
    const float kf = t - float_shifter;
    const float r = (x - kf * 0.693359375f) - kf * -2.12194440e-4f;
    const float rr = r * r;
    return (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
             1.6666665459e-1f) * r + 5.0000001201e-1f) * rr + r + 1.0f;
}
}  // namespace detail

// e^x in float: the same reduction with the float split of ln2 and the polynomial of
// Cephes expf.c.
KS_MATH inline float exp(float x) {
    x = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    float t;
    const float er = detail::exp_reduced(x, t);
    const float kf = t - detail::float_shifter;
    const uint32_t k = detail::float_bits(t) - detail::float_bits(detail::float_shifter);
    const uint32_t k1 = detail::float_bits(kf * 0.5f + detail::float_shifter) - detail::float_bits(detail::float_shifter);
    return er * detail::pow2f(k1) * detail::pow2f(k - k1);
}

namespace detail {
// e^x in float for what ks::logistic needs: exp(float)'s reduction and polynomial (exp_reduced), scaled by one power
// of 2 (k in [-126, 128]) instead of two, x clamped to [-87, 89]: below e^-87 (1.6e-38, about float's smallest
// normal) the result stays there, and from 88.4 on it is +inf (2^128), so 1 / (1 + e) is 0. Four instructions
// fewer than exp's, whose two scalings keep subnormal results and large finite ones.
KS_ALWAYS_INLINE inline float exp_one_scale(float x) {
    x = x < -87.0f ? -87.0f : (x > 89.0f ? 89.0f : x);  // NaN passes through
    float t;
    const float er = exp_reduced(x, t);
    return er * pow2f(float_bits(t) - float_bits(float_shifter));
}
}  // namespace detail

// log x. x = 2^e m with m in [√2/2, √2) read from the bits (subnormals are scaled by 2^54
// first); with f = m - 1 and s = f / (2 + f), log(1 + f) = f - (f²/2 - s (f²/2 + R(s²))) where R
// is the minimax polynomial of fdlibm e_log.c (Sun Microsystems), and e ln2 is added in two
// parts. The exponent becomes a double through the 2^52 bit trick (no int64 conversion).
KS_MATH inline double log(double x) {
    const bool tiny = x < 2.2250738585072014e-308;
    const double xs = tiny ? x * 18014398509481984.0 : x;  // 2^54
    const uint64_t b = detail::double_bits(xs);
    const double mant = detail::bits_to_double((b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
    const double ebits = detail::bits_to_double(((b >> 52) & 0x7ffu) | 0x4330000000000000ULL) - 4503599627370496.0;
    const bool high = mant > 1.4142135623730951;
    const double m = high ? mant * 0.5 : mant;
    const double e = ebits - (tiny ? 1077.0 : 1023.0) + (high ? 1.0 : 0.0);
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double z = s * s;
    const double w = z * z;
    const double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    const double t2 = z * (6.666666666666735130e-01 +
                           w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    const double hfsq = 0.5 * f * f;
    const double r = e * 6.93147180369123816490e-01 -
                     ((hfsq - (s * (hfsq + t1 + t2) + e * 1.90821492927058770002e-10)) - f);
    const double inf = __builtin_huge_val();
    return x > 0.0 ? (x < inf ? r : x) : (x == 0.0 ? -inf : __builtin_nan(""));
}

// log x in float: the same reduction with fdlibm e_logf.c's coefficients.
KS_MATH inline float log(float x) {
    const bool tiny = x < 1.17549435e-38f;
    const float xs = tiny ? x * 33554432.0f : x;  // 2^25
    const uint32_t b = detail::float_bits(xs);
    const float mant = detail::bits_to_float((b & 0x007fffffu) | 0x3f800000u);
    const float ebits = detail::bits_to_float(((b >> 23) & 0xffu) | 0x4b000000u) - 8388608.0f;
    const bool high = mant > 1.41421356f;
    const float m = high ? mant * 0.5f : mant;
    const float e = ebits - (tiny ? 152.0f : 127.0f) + (high ? 1.0f : 0.0f);
    const float f = m - 1.0f;
    const float s = f / (2.0f + f);
    const float z = s * s;
    const float w = z * z;
    const float t1 = w * (4.0000000596e-01f + w * (2.2222198546e-01f + w * 1.5313838422e-01f));
    const float t2 = z * (6.6666668653e-01f + w * (2.8571429849e-01f + w * (1.8183572590e-01f + w * 1.4798198640e-01f)));
    const float hfsq = 0.5f * f * f;
    const float r = e * 6.9313812256e-01f - ((hfsq - (s * (hfsq + t1 + t2) + e * 9.0580006145e-06f)) - f);
    const float inf = __builtin_huge_valf();
    return x > 0.0f ? (x < inf ? r : x) : (x == 0.0f ? -inf : __builtin_nanf(""));
}

// tanh x, odd: for |x| < 0.625 the rational (double) or polynomial (float) approximations of Cephes
// tanh.c / tanhf.c (Stephen L. Moshier), x + x³ R(x²); above, 1 - 2 / (e^(2|x|) + 1) from ks::exp, which
// loses nothing there (the result is above 0.55) and saturates to 1 when e^(2|x|) overflows. NaN gives NaN.
KS_MATH inline double tanh(double x) {
    const double a = x < 0 ? -x : x;
    const double big = 1.0 - 2.0 / (ks::exp(2.0 * a) + 1.0);
    const double z = x * x;
    const double p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3;
    const double q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
    const double small = x + x * z * (p / q);
    return a > 0.625 ? (x < 0 ? -big : big) : (a == 0.0 ? x : small);  // (tanh(-0) = -0)
}

KS_MATH inline float tanh(float x) {
    const float a = x < 0 ? -x : x;
    const float big = 1.0f - 2.0f / (ks::exp(2.0f * a) + 1.0f);
    const float z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                          1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    return a > 0.625f ? (x < 0 ? -big : big) : (a == 0.0f ? x : small);
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_VMATH_H
