"""Elementwise ops built from the elementwise prims (all broadcast like numpy)."""
from __future__ import annotations

import math

from ..ir.core import Atom
from ._util import error, scalar_lit


def relu(b, x: Atom) -> Atom:
    """0 if x <= 0 else x: the derivative at 0 is 0 (as torch's and JAX's), and NaN stays NaN (as torch's
    and numpy's maximum(x, 0), which the ONNX reference uses)."""
    zero = scalar_lit(0, x.type.dtype)
    return b.select(b.le(x, zero), zero, x)


def norm_root(b, s: Atom, p: float = 2.0) -> Atom:
    """s^(1/p) (the root of a p-norm's sum s ≥ 0) with derivative 0 where s = 0, as torch's norm
    takes it: the untaken side reads 1 instead of 0, so no inf · 0 reaches a gradient (the
    distance of a point to itself in cdist, ‖x − y‖ at x = y)."""
    zero = scalar_lit(0, s.type.dtype)
    at_zero = b.eq(s, zero)
    safe = b.select(at_zero, scalar_lit(1, s.type.dtype), s)
    root = b.sqrt(safe) if p == 2 else b.pow(safe, scalar_lit(1 / p, s.type.dtype))
    return b.select(at_zero, zero, root)


def clamp(b, x: Atom, lo: Atom | None = None, hi: Atom | None = None, bound_inside: bool = True) -> Atom:
    """min(max(x, lo), hi); a missing bound is not applied. A NaN stays NaN (torch, numpy and onnxruntime
    keep it; max/min would give the bound). x at a bound has derivative 1 when bound_inside (torch.clamp,
    ONNX Clip), else 0 (hardtanh, relu6)."""
    if not x.type.is_float:
        x = b.max(x, lo) if lo is not None else x
        return b.min(x, hi) if hi is not None else x
    if lo is not None:
        x = b.select(b.lt(x, lo) if bound_inside else b.le(x, lo), lo, x)
    if hi is not None:
        x = b.select(b.gt(x, hi) if bound_inside else b.ge(x, hi), hi, x)
    return x


def extremum(b, x: Atom, y: Atom, largest: bool) -> Atom:
    """The larger (or smaller) of x and y elementwise, as torch.maximum/minimum: a NaN in either gives NaN, and
    at a tie each side gets half the derivative."""
    if not x.type.is_float:
        return b.max(x, y) if largest else b.min(x, y)
    first, second = (b.gt(x, y), b.lt(x, y)) if largest else (b.lt(x, y), b.gt(x, y))
    tie = b.mul(b.add(x, y), _k(x, 0.5))  # x itself when equal; NaN if either is
    return b.select(first, x, b.select(second, y, tie))


def where(b, cond: Atom, x: Atom, y: Atom) -> Atom:
    """cond ? x : y elementwise (x and y of one dtype)."""
    if cond.type.dtype != "bool":
        raise error(b, f"a where condition must be bool, got {cond.type}")
    return b.select(cond, x, y)


def square(b, x: Atom) -> Atom:
    """x * x."""
    return b.ipow(x, n=2)


def to_float(b, x: Atom, float_dtype: str) -> Atom:
    """x unchanged if it is float, else converted to float_dtype."""
    return x if x.type.is_float else b.convert(x, dtype=float_dtype)


def cast(b, x: Atom, dtype: str) -> Atom:
    """x converted to dtype (no equation when it already has it)."""
    return x if x.type.dtype == dtype else b.convert(x, dtype=dtype)


def logical_and(b, x: Atom, y: Atom) -> Atom:
    """x and y elementwise (bool)."""
    return _bind(b, "and", x, y)


def logical_or(b, x: Atom, y: Atom) -> Atom:
    """x or y elementwise (bool)."""
    return _bind(b, "or", x, y)


def bitwise_not(b, x: Atom) -> Atom:
    """~x: not x for bool, every bit flipped for integers (x xor all ones)."""
    if x.type.dtype == "bool":
        return logical_not(b, x)
    ones = -1 if x.type.dtype.startswith("i") else (1 << int(x.type.dtype[1:])) - 1
    return b.bitwise(x, scalar_lit(ones, x.type.dtype), op="xor")


def logical_not(b, x: Atom) -> Atom:
    """not x elementwise (bool)."""
    return _bind(b, "not", x)


def _bind(b, name: str, *ins: Atom) -> Atom:
    return getattr(b, name)(*ins)


def _k(x: Atom, v) -> Atom:
    return scalar_lit(v, x.type.dtype)


def reciprocal(b, x: Atom) -> Atom:
    """1 / x."""
    return b.div(_k(x, 1), x)


def ceil(b, x: Atom) -> Atom:
    """-floor(-x)."""
    return b.neg(b.floor(b.neg(x)))


def trunc(b, x: Atom) -> Atom:
    """x rounded toward zero: sign(x)·floor(|x|)."""
    return b.select(b.lt(x, _k(x, 0)), ceil(b, x), b.floor(x))


def round_half_even(b, x: Atom) -> Atom:
    """x rounded to the nearest integer, halves to the even one (numpy, ONNX Round): r = floor(x) and the exact
    fraction x - r decide (floor(x + 0.5) would round 0.49999997 up), r's parity from floor(r / 2); selects only,
    no remainder call and no logical operators, so the loop vectorizes."""
    r = b.floor(x)
    frac = b.sub(x, r)
    parity = b.sub(r, b.mul(b.floor(b.mul(r, _k(x, 0.5))), _k(x, 2)))  # 1 for odd r, 0 for even
    tie = b.select(b.eq(frac, _k(x, 0.5)), parity, _k(x, 0))
    return b.add(r, b.select(b.gt(frac, _k(x, 0.5)), _k(x, 1), tie))


def fmod(b, x: Atom, y: Atom) -> Atom:
    """The remainder with the sign of x (C fmod): x - trunc(x / y)·y, exactly for floats (the fmod prim:
    x - trunc(x/y)·y in floating point loses it for large x/y, and fmod(x, ±inf) is x)."""
    if x.type.is_float:
        return _bind(b, "fmod", x, y)
    # integer div truncates toward zero; a remainder by 0 is 0 (numpy's fmod, ks::mod), not a trap
    return b.select(b.eq(y, _k(y, 0)), _k(x, 0), b.sub(x, b.mul(b.div(x, y), y)))


def tan(b, x: Atom) -> Atom:
    return b.div(b.sin(x), b.cos(x))


def sinh(b, x: Atom) -> Atom:
    """(e^x - e^-x) / 2, as (expm1(x) - expm1(-x)) / 2 so small x keeps its precision; past |x| = 20 (e^-|x|
    below the precision) ±(e^(|x|/2) / 2)·e^(|x|/2), finite up to the largest result (e^x alone overflows
    first)."""
    big = b.gt(b.abs(x), _k(x, 20.0))
    small = b.select(big, _k(x, 0), x)
    near = b.mul(_k(x, 0.5), b.sub(b.expm1(small), b.expm1(b.neg(small))))
    far = _half_exp_squared(b, b.select(big, x, _k(x, 20.0)))
    return b.select(big, far, near)


def cosh(b, x: Atom) -> Atom:
    """(e^x + e^-x) / 2; past |x| = 20 (e^(|x|/2) / 2)·e^(|x|/2), finite up to the largest result."""
    big = b.gt(b.abs(x), _k(x, 20.0))
    small = b.select(big, _k(x, 0), x)
    near = b.mul(_k(x, 0.5), b.add(b.exp(small), b.exp(b.neg(small))))
    return b.select(big, b.abs(_half_exp_squared(b, b.select(big, x, _k(x, 20.0)))), near)


def _half_exp_squared(b, x: Atom) -> Atom:
    """sign(x)·e^|x| / 2 as (e^(|x|/2) / 2)·e^(|x|/2) (|x| > 0)."""
    neg = b.lt(x, _k(x, 0))
    h = b.exp(b.mul(_k(x, 0.5), b.select(neg, b.neg(x), x)))
    r = b.mul(b.mul(_k(x, 0.5), h), h)
    return b.select(neg, b.neg(r), r)


def asin(b, x: Atom) -> Atom:
    """atan2(x, sqrt(1 - x²))."""
    return b.atan2(x, b.sqrt(b.sub(_k(x, 1), b.mul(x, x))))


def acos(b, x: Atom) -> Atom:
    """atan2(sqrt(1 - x²), x)."""
    return b.atan2(b.sqrt(b.sub(_k(x, 1), b.mul(x, x))), x)


def asinh(b, x: Atom) -> Atom:
    """±log1p(t + t²/(1 + sqrt(t² + 1))) of t = |x| (precise near 0), log 2 + log t past 2^28 (where t² would
    overflow in float32 and 1/(4t²) is below float64's precision). |x| and the sign are selects, not abs and
    sign, whose derivative at 0 is 0 (asinh's is 1); each branch reads a harmless value where it is not
    taken, so no inf or NaN reaches the derivative through it."""
    neg = b.lt(x, _k(x, 0))
    t = b.select(neg, b.neg(x), x)
    big = b.gt(t, _k(x, 2.0 ** 28))
    s = b.select(big, _k(x, 1), t)
    near = b.log1p(b.add(s, b.div(b.mul(s, s), b.add(_k(x, 1), b.sqrt(b.add(b.mul(s, s), _k(x, 1)))))))
    far = b.add(_k(x, math.log(2.0)), b.log(b.select(big, t, _k(x, 1))))
    r = b.select(big, far, near)
    return b.select(neg, b.neg(r), r)


def acosh(b, x: Atom) -> Atom:
    """log(x + sqrt(x² - 1)), past 2^28 log 2 + log x (x² would overflow; 1/(4x²) is below float64's
    precision there); NaN below 1."""
    big = b.gt(x, _k(x, 2.0 ** 28))
    s = b.select(big, _k(x, 2), x)
    near = b.log(b.add(s, b.sqrt(b.sub(b.mul(s, s), _k(x, 1)))))
    far = b.add(_k(x, math.log(2.0)), b.log(b.select(big, x, _k(x, 2))))
    return b.select(b.lt(x, _k(x, 1)), _k(x, math.nan), b.select(big, far, near))


def atanh(b, x: Atom) -> Atom:
    """(log1p(x) - log1p(-x)) / 2."""
    return b.mul(_k(x, 0.5), b.sub(b.log1p(x), b.log1p(b.neg(x))))


def torch_sign(b, x: Atom) -> Atom:
    """torch.sign: -1, 0 or 1, and 0 for NaN (the sign prim keeps NaN, as numpy and ONNX's Sign)."""
    y = b.sign(x)
    return b.select(b.ne(x, x), _k(x, 0), y) if x.type.is_float else y


def isnan(b, x: Atom) -> Atom:
    """x != x."""
    return b.ne(x, x)


def isfinite(b, x: Atom) -> Atom:
    """Neither NaN nor ±inf."""
    return logical_not(b, logical_or(b, isnan(b, x), isinf(b, x)))


def isinf(b, x: Atom, positive: bool = True, negative: bool = True) -> Atom:
    """x is +inf (if positive) or -inf (if negative)."""
    pos, neg = b.eq(x, _k(x, math.inf)), b.eq(x, _k(x, -math.inf))
    if positive and negative:
        return logical_or(b, pos, neg)
    return pos if positive else neg if negative else b.lt(x, x)  # neither: all false


def safe_pow(b, x: Atom, y: Atom, float_dtype: str = "f64") -> Atom:
    """x ** y with any numeric dtypes (the result has x's dtype); small integer literal exponents multiply."""
    from ..ir.core import Lit
    if isinstance(y, Lit) and y.type.rank == 0 and float(y.value).is_integer() and abs(y.value) <= 8 \
            and (x.type.is_float or y.value >= 0):
        return b.ipow(x, n=int(y.value))
    if x.type.is_float:
        return b.pow(x, y if y.type.dtype == x.type.dtype else b.convert(y, dtype=x.type.dtype))
    xf = b.convert(x, dtype=float_dtype)
    yf = y if y.type.dtype == float_dtype else b.convert(y, dtype=float_dtype)
    return b.convert(b.pow(xf, yf), dtype=x.type.dtype)


# Giles' single-precision erfinv ("Approximating the erfinv function", M. Giles, GPU Computing Gems Jade
# Edition, 2011): a polynomial in w - 2.5 where w = -log(1 - y²) < 5, else in sqrt(w) - 3.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(b, coefs, w: Atom) -> Atom:
    p = _k(w, coefs[0])
    for c in coefs[1:]:
        p = b.add(_k(w, c), b.mul(p, w))
    return p


def erfinv(b, y: Atom) -> Atom:
    """The inverse error function on [-1, 1] (±inf at ±1, NaN outside), computed in float64 whatever y's
    dtype, to about 1e-14 relative (a float32 result is correctly rounded but for near-ties)."""
    y64 = cast(b, y, "f64")
    neg = b.lt(y64, _k(y64, 0))
    a = b.select(neg, b.neg(y64), y64)
    return cast(b, _signed(b, neg, _erfinv(b, a, b.sub(_k(a, 1), a))), y.type.dtype)


def probit(b, p: Atom) -> Atom:
    """The standard normal quantile √2 · erfinv(2p - 1) (torch.special.ndtri; the ONNX-ML PROBIT post
    transform), with 1 - |2p - 1| taken as 2p or 2(1 - p), which keeps it precise for tiny p."""
    p64 = cast(b, p, "f64")
    low = b.lt(p64, _k(p64, 0.5))
    q = b.mul(_k(p64, 2), b.select(low, p64, b.sub(_k(p64, 1), p64)))
    x = _erfinv(b, b.sub(_k(p64, 1), q), q)
    return cast(b, b.mul(_k(p64, math.sqrt(2.0)), _signed(b, low, x)), p.type.dtype)


def _signed(b, neg: Atom, x: Atom) -> Atom:
    return b.select(neg, b.neg(x), x)


def _erfinv(b, a: Atom, q: Atom) -> Atom:
    """x ≥ 0 with erf(x) = a (float64), given q = 1 - a to full relative precision. Start: Giles' polynomials
    while w = -log(q(2 - q)) < 16 (their range), else the asymptote x² ≈ L - log(πL)/2 of L = -log q; then
    three Newton steps, on erf(x) = a below a = 1/2 and on log erfc(x) = log q above (where erf(x) - a would
    cancel). Each branch reads a harmless value where it is not taken (no inf reaches a derivative)."""
    zero = b.eq(q, _k(q, 0))
    q = b.select(zero, _k(q, 1), q)
    w = b.neg(b.log(b.mul(q, b.sub(_k(q, 2), q))))
    central, giles = b.lt(w, _k(q, 5.0)), b.lt(w, _k(q, 16.0))
    p_central = _horner(b, _ERFINV_CENTRAL, b.sub(b.select(central, w, _k(q, 2.5)), _k(q, 2.5)))
    p_tail = _horner(b, _ERFINV_TAIL, b.sub(b.sqrt(b.select(central, _k(q, 5.0), b.select(giles, w, _k(q, 5.0)))),
                                           _k(q, 3.0)))
    big = b.neg(b.log(b.select(giles, _k(q, 0.5), q)))
    asymptote = b.sqrt(b.sub(big, b.mul(_k(q, 0.5), b.log(b.mul(_k(q, math.pi), big)))))
    x = b.select(giles, b.mul(b.select(central, p_central, p_tail), b.select(zero, _k(q, 0), a)), asymptote)
    tail = b.gt(a, _k(q, 0.5))
    half_sqrt_pi = _k(q, math.sqrt(math.pi) / 2)
    log_q = b.log(q)
    for _ in range(3):
        xc = b.select(tail, _k(q, 0), x)
        step_c = b.mul(b.mul(b.sub(b.erf(xc), a), half_sqrt_pi), b.exp(b.mul(xc, xc)))
        xt = b.select(tail, x, _k(q, 1))
        e = b.erfc(xt)
        le = b.log(b.select(b.gt(e, _k(q, 0)), e, _k(q, 1)))  # (erfc underflows past 27: no step)
        step_t = b.mul(b.mul(b.sub(log_q, le), half_sqrt_pi), b.exp(b.add(le, b.mul(xt, xt))))
        x = b.select(tail, b.sub(x, b.select(b.gt(e, _k(q, 0)), step_t, _k(q, 0))), b.sub(x, step_c))
    at_one = b.select(zero, a, _k(q, 1))  # (±inf at ±1 with an infinite derivative there, as torch's)
    return b.select(zero, b.mul(at_one, _k(q, math.inf)), x)
