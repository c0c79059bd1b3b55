"""The float math functions of one operand (exp, log, tanh, erf, ...): one prim, `math`, whose param `fn` names
the function, and one `MathFn` record per function holding all that differs between them: the value, the C++
expression, the derivative, the doc and the facts of the function alone (`singular`, its sign, where it is finite,
an opt-out).

They shared every rule but those (a float type rule, a derivative times the tangent, elementwise batching, a
C++ expression of the operand) and every fact of the prim record (elementwise, costly: a call worth computing
once), so they are one record with a form per function (`b.exp(x)` binds math[fn="exp"], and the IR text and
the C++ write `exp(x)` and `ks::exp(x)` as before: prims/base.py `forms`). The form is a param, chosen when the
C++ is written: the generated loops hold the function's expression, no branch on it. floor (a whole result, not
costly), abs and sign (integers too) and neg (linear) state other facts and stay prims of their own
(prims/elementwise.py).

A function is added as one `MathFn` entry of `FUNCTIONS`, a sample `math:<fn>` in tests/prim_samples.py and, for
users, its name in frontends/python/mathlib.py.
"""
from __future__ import annotations

import math as pymath
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..errors import KsbuildError
from ..ir.types import dtype_of, numpy_dtype
from .base import ANY, NONNEG, POSITIVE, Prim, opted_out
from .common import broadcast_types
from .elementwise import _one, batch_elementwise, scale


@dataclass(frozen=True)
class MathFn:
    """One function of the math prim.

    numpy: its value on an array (the reference interpreter); cpp: its C++ expression of the operand's, {0};
    deriv(b, x, y): dy/dx, written with the result y where that is cheaper (None: not differentiable, `opt_outs`
    saying why); singular: dy/dx may be inf or nan at a finite x (exp past overflow, log at 0), so the tangent
    multiplies it with mulz (a zero tangent stays 0: prims/elementwise.py `scale`); opt_outs: "jvp: why", as
    Prim.opt_outs, for this function alone. Two facts every function states (None: not stated, which
    tests/test_prim_facts.py refuses), read by math's Prim.sign and Prim.nonfinite: sign(s), the sign of y for a
    finite x of sign s (prims/base.py ANY, NONNEG, POSITIVE), and finite_on, the least sign of a finite x from
    which y is finite (ANY: everywhere, overflow aside; NOWHERE: not known for any sign)."""

    numpy: Callable
    cpp: str
    deriv: Optional[Callable]
    doc: str
    singular: bool = False
    opt_outs: tuple[str, ...] = ()
    sign: Optional[Callable] = None
    finite_on: Optional[int] = None


NOWHERE = POSITIVE + 1  # (a finite_on beyond every sign)


def _rounded(s: int) -> int:
    """The sign rule of a function >= 0 where x is (f(0) = 0, increasing: tanh, atan, erf, expm1, log1p), which may
    round a tiny positive x to 0."""
    return min(NONNEG, s)


def _nonneg(s: int) -> int:
    """The sign rule of a function >= 0 everywhere that may underflow to 0 (exp, logistic, erfc)."""
    return NONNEG


def _root(s: int) -> int:
    """sqrt: >= 0 (where finite), > 0 where x is."""
    return max(NONNEG, s)


def _unknown(s: int) -> int:
    return ANY


def _np_digamma(x):
    """ψ(x) as ks::digamma computes it: below 0 the reflection ψ(1 - x) - π / tan(πr) of x's distance r to
    the nearest integer (tan has period π; πx would round away r's digits), then shifts up by
    ψ(x) = ψ(x + 1) - 1/x until x >= 10, then the asymptotic series ln x - 1/(2x) - Σ B_2k / (2k x^2k)
    (Abramowitz & Stegun 6.3.7, 6.3.18); ψ(±0) = ∓inf, NaN at the poles and at -inf, as torch."""
    x0 = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        whole = np.floor(x0)
        neg, pole = x0 < 0, (x0 < 0) & (x0 == whole)
        acc = np.where(neg & ~pole, -np.pi / np.tan(np.pi * (x0 - np.round(x0))), 0.0)
        x = np.where(neg, 1.0 - x0, x0)
        for _ in range(10):
            small = x < 10
            acc = acc - np.where(small, 1.0 / x, 0.0)
            x = np.where(small, x + 1.0, x)
        r = 1.0 / (x * x)
        series = r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r * (1 / 132 - r * 691 / 32760)))))
        out = acc + np.log(x) - 0.5 / x - series
    out = np.where(pole, np.nan, out)
    return np.where(x0 == 0, np.where(np.signbit(x0), np.inf, -np.inf), out)


def _lgamma1(v: float) -> float:
    """log |Γ(v)|, inf at the poles 0, -1, -2, ... (C's and torch's; math.lgamma raises there)."""
    return pymath.inf if v <= 0 and v == pymath.floor(v) else pymath.lgamma(v)


def _elementwise(fn):
    """A numpy function from a Python one of one float (applied to each element, the array's dtype kept)."""
    return lambda x: np.vectorize(fn, otypes=[x.dtype])(x)


def _d_erf(sign: float):
    # d erf = 2/√π e^-x², d erfc = -2/√π e^-x²
    return lambda b, x, y: b.mul(b.lit(sign * 2 / pymath.sqrt(pymath.pi), x.type.scalar()), b.exp(b.neg(b.mul(x, x))))


# singular: exp and expm1 overflow (x > 709 in f64), log at 0, log1p at -1, sqrt at 0 (nan below 0), lgamma at its
# poles 0, -1, ...; finite_on: log and lgamma need x > 0, log1p and sqrt x >= 0, digamma's -1/x overflows near 0
FUNCTIONS = {
    "exp": MathFn(np.exp, "ks::exp({0})", lambda b, x, y: y, "e^x", singular=True,  # d e^x = e^x
                  sign=_nonneg, finite_on=ANY),
    "log": MathFn(np.log, "ks::log({0})", lambda b, x, y: b.div(_one(b, x), x), "natural log",  # 1/x
                  singular=True, sign=_unknown, finite_on=POSITIVE),
    "log1p": MathFn(np.log1p, "std::log1p({0})", lambda b, x, y: b.div(_one(b, x), b.add(_one(b, x), x)),
                    "log(1 + x)", singular=True, sign=_rounded, finite_on=NONNEG),  # 1/(1+x)
    "expm1": MathFn(np.expm1, "std::expm1({0})", lambda b, x, y: b.add(y, _one(b, x)), "e^x - 1",  # e^x
                    singular=True, sign=_rounded, finite_on=ANY),
    "sqrt": MathFn(np.sqrt, "std::sqrt({0})", lambda b, x, y: b.div(b.lit(0.5, x.type.scalar()), y),
                   "square root", singular=True, sign=_root, finite_on=NONNEG),  # 1/(2 sqrt x)
    "tanh": MathFn(np.tanh, "ks::tanh({0})", lambda b, x, y: b.sub(_one(b, x), b.mul(y, y)),
                   "hyperbolic tangent", sign=_rounded, finite_on=ANY),  # 1 - tanh²
    "sin": MathFn(np.sin, "std::sin({0})", lambda b, x, y: b.cos(x), "sine", sign=_unknown, finite_on=ANY),  # cos x
    "cos": MathFn(np.cos, "std::cos({0})", lambda b, x, y: b.neg(b.sin(x)), "cosine",  # -sin x
                  sign=_unknown, finite_on=ANY),
    "logistic": MathFn(lambda x: 1 / (1 + np.exp(-x)), "ks::logistic({0})",
                       lambda b, x, y: b.mul(y, b.sub(_one(b, x), y)), "1 / (1 + e^-x)",  # y (1 - y)
                       sign=_nonneg, finite_on=ANY),
    "atan": MathFn(np.arctan, "std::atan({0})", lambda b, x, y: b.div(_one(b, x), b.add(_one(b, x), b.mul(x, x))),
                   "arctangent", sign=_rounded, finite_on=ANY),  # 1/(1+x²)
    "erf": MathFn(_elementwise(pymath.erf), "ks::erf({0})", _d_erf(1.0), "error function 2/√π ∫₀ˣ e^-t² dt",
                  sign=_rounded, finite_on=ANY),
    "erfc": MathFn(_elementwise(pymath.erfc), "ks::erfc({0})", _d_erf(-1.0),
                   "complementary error function 1 - erf x, precise where it is tiny", sign=_nonneg, finite_on=ANY),
    "lgamma": MathFn(_elementwise(_lgamma1), "std::lgamma({0})", lambda b, x, y: b.digamma(x), "log |Γ(x)|",
                     singular=True, sign=_unknown, finite_on=POSITIVE),  # d lgamma = digamma (poles at 0, -1, ...)
    "digamma": MathFn(lambda x: _np_digamma(x).astype(x.dtype), "ks::digamma({0})", None, "ψ(x) = d/dx log Γ(x)",
                      opt_outs=("jvp: its derivative (trigamma) is not supported: lgamma can be differentiated once, "
                                "not twice",), sign=_unknown, finite_on=NOWHERE),
}


def _type_rule(in_types, fn):
    if fn not in math.table:
        raise KsbuildError(f"unknown math function '{fn}'; valid: {', '.join(math.table)}")
    t = broadcast_types(fn, in_types)
    if not in_types[0].is_float:
        raise KsbuildError(f"{fn} needs float operands, got {in_types[0]}")
    return (t,)


def _eval(x, fn, env=None):
    return (np.asarray(math.table[fn].numpy(x)).astype(numpy_dtype(dtype_of(x)), copy=False),)


def _jvp(b, primals, tangents, fn):
    # dy = f'(x) dx, masked by the tangent where f' may be inf or nan (singular)
    (x,), (tx,) = primals, tangents
    form = math.table[fn]
    if form.deriv is None:
        raise KsbuildError(f"'{fn}' has no jvp rule: {opted_out(math, {'fn': fn}, 'jvp')}")
    y = b.bind(math, [x], {"fn": fn})[0]
    if tx is None:
        return [y], [None]
    return [y], [scale(b, form.deriv(b, x, y), tx, form.singular)]


def _emit(ctx, eqn):
    ctx.assign(eqn.outs[0], math.table[eqn.params["fn"]].cpp.format(*ctx.args(eqn)))


math = Prim(
    name="math",
    type_rule=_type_rule,
    eval=_eval,
    jvp=_jvp,
    batch=lambda b, ins, batched, size, fn: batch_elementwise(b, ins, batched, size, math, fn=fn),
    emit=_emit,
    elementwise=True,
    costly=True,  # (a call of a float function: the hoist pass computes a loop-invariant one before the loop)
    doc="a float function of one operand, fn one of " + ", ".join(FUNCTIONS) + " (each form's doc: its MathFn)",
    forms={fn: {"fn": fn} for fn in FUNCTIONS},
    table=FUNCTIONS,
    sign=lambda eqn, sign_of: math.table[eqn.params["fn"]].sign(sign_of(eqn.ins[0])),
    nonfinite=lambda eqn, sign_of: sign_of(eqn.ins[0]) < math.table[eqn.params["fn"]].finite_on,
)
