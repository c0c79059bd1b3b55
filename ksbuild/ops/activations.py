"""Activation functions as elementwise decompositions (ONNX and torch.nn share them)."""
from __future__ import annotations

import math

import numpy as np

from ..ir.core import Atom
from ._util import scalar_lit


def _c(x: Atom, v: float):
    return scalar_lit(v, x.type.dtype)


def leaky_relu(b, x: Atom, alpha: float) -> Atom:
    """x if x > 0 else alpha·x (so the derivative at 0 is alpha, as torch's)."""
    return b.select(b.gt(x, _c(x, 0)), x, b.mul(x, _c(x, alpha)))


def elu(b, x: Atom, alpha: float) -> Atom:
    """alpha·(e^x - 1) if x <= 0 else x: a NaN takes the x branch, so it stays NaN with derivative 1, as torch's
    (the exponential reads 0 where x >= 0, so a large x sends no inf into the derivative). At x = 0 the
    derivative is alpha and every higher one 0, as torch's (elu_backward takes x <= 0, its own derivative
    x < 0): see elu_below."""
    return b.select(b.le(x, _c(x, 0)), b.mul(_c(x, alpha), elu_below(b, x, 1.0)), x)


def elu_below(b, x: Atom, scale: float) -> Atom:
    """e^(scale·x) - 1 for x <= 0, written expm1(scale·n) + scale·z with n = x below 0 (else 0) and z = x at 0
    (else 0): z is 0, but its derivative is 1 at x = 0 alone, so the first derivative at 0 is scale and the
    higher ones are 0 (n's derivative is 0 there)."""
    n = b.select(b.lt(x, _c(x, 0)), x, _c(x, 0))
    z = b.select(b.eq(x, _c(x, 0)), x, _c(x, 0))
    if scale != 1:
        n, z = b.mul(n, _c(x, scale)), b.mul(z, _c(x, scale))
    return b.add(b.expm1(n), z)


def selu(b, x: Atom, alpha: float, gamma: float) -> Atom:
    """gamma·(x if x > 0 else alpha·(e^x - 1))."""
    return b.mul(_c(x, gamma), elu(b, x, alpha))


def celu(b, x: Atom, alpha: float) -> Atom:
    """max(0, x) + min(0, alpha·(e^(x/alpha) - 1))."""
    neg = b.mul(_c(x, alpha), b.expm1(b.div(b.min(x, _c(x, 0)), _c(x, alpha))))
    return b.add(b.max(x, _c(x, 0)), b.min(neg, _c(x, 0)))


def hard_sigmoid(b, x: Atom, alpha: float, beta: float) -> Atom:
    """max(0, min(1, alpha·x + beta)); alpha and beta rounded to x's dtype first (ONNX's attributes are float32:
    torch's 1/6 gives the same IR from torch.export as from ONNX)."""
    if x.type.dtype == "f32":
        alpha, beta = float(np.float32(alpha)), float(np.float32(beta))
    return b.max(_c(x, 0), b.min(_c(x, 1), b.add(b.mul(x, _c(x, alpha)), _c(x, beta))))


def hard_swish(b, x: Atom) -> Atom:
    """x · hard_sigmoid(x, 1/6, 1/2), as x · 0 from -3 down, x (x + 3) / 6 below 3 and x from 3 up (NaN too): its
    derivative is then torch's, 0 and 1 out there and at ±inf (x · 0 made it NaN), 1 at NaN; the middle piece
    reads 0 outside (-3, 3), so an infinite x sends no inf · 0 into it."""
    below = b.lt(x, _c(x, 3))
    inner = b.select(below, b.gt(x, _c(x, -3)), below)
    safe = b.select(inner, x, _c(x, 0))
    # (x (x + 3) times 1/6 rather than over 6, as onnxruntime's x · (x/6 + 1/2): within an ulp of the quotient, and
    # a vector loop of it is one division shorter: two of them had been most of a hardswish epilogue's time)
    mid = b.mul(b.mul(safe, b.add(safe, _c(x, 3))), _c(x, 1 / 6))
    # from -3 down x · hard_sigmoid(x), which is 0 there: -0 below, NaN at -inf (torch's, ONNX's); its derivative
    # is hard_sigmoid(x) = 0 (held constant: no inf · 0), read at -3 elsewhere (a NaN x sends no NaN through it)
    # (as torch, relu6(x + 3) / 6: x · 1/6 + 1/2 with a fused multiply-add is 2.8e-17, not 0, at x = -3)
    low_x = b.le(x, _c(x, -3))
    at = b.add(b.select(low_x, x, _c(x, -3)), _c(x, 3))
    low = b.mul(x, b.stop_gradient(b.mul(b.max(_c(x, 0), b.min(_c(x, 6), at)), _c(x, 1 / 6))))
    return b.select(low_x, low, b.select(below, mid, x))


def softplus(b, x: Atom) -> Atom:
    """log(1 + e^x), computed as m + log1p(e^-|x|) with m = x if x > 0 else 0, so it never overflows (+inf
    gives +inf, not inf - inf) and its derivatives are the sigmoid's everywhere, ½ and ¼ at 0 included (-|x|
    is a select, x there, not abs, whose derivative at 0 is 0)."""
    pos = b.gt(x, _c(x, 0))
    m = b.select(pos, x, _c(x, 0))
    return b.add(m, b.log1p(b.exp(b.select(pos, b.neg(x), x))))


def softsign(b, x: Atom) -> Atom:
    """x / (1 + |x|)."""
    return b.div(x, b.add(_c(x, 1), b.abs(x)))


def mish(b, x: Atom) -> Atom:
    """x · tanh(softplus(x))."""
    return b.mul(x, b.tanh(softplus(b, x)))


def gelu(b, x: Atom, approximate: str = "none") -> Atom:
    """x · Φ(x): exact with erf, or the tanh approximation."""
    if approximate == "tanh":
        inner = b.mul(_c(x, math.sqrt(2 / math.pi)), b.add(x, b.mul(_c(x, 0.044715), b.ipow(x, n=3))))
        return b.mul(b.mul(_c(x, 0.5), x), b.add(_c(x, 1), b.tanh(inner)))
    return b.mul(b.mul(_c(x, 0.5), x), b.add(_c(x, 1), b.erf(b.mul(x, _c(x, 1 / math.sqrt(2))))))


def thresholded_relu(b, x: Atom, alpha: float) -> Atom:
    """x if x > alpha else 0."""
    return b.select(b.gt(x, _c(x, alpha)), x, _c(x, 0))


def shrink(b, x: Atom, bias: float, lambd: float) -> Atom:
    """x - bias if x > lambd, x + bias if x < -lambd, else 0."""
    hi = b.select(b.gt(x, _c(x, lambd)), b.sub(x, _c(x, bias)), _c(x, 0))
    return b.select(b.lt(x, _c(x, -lambd)), b.add(x, _c(x, bias)), hi)


def prelu(b, x: Atom, slope: Atom) -> Atom:
    """x if x >= 0 else slope·x (slope broadcasts)."""
    return b.select(b.ge(x, _c(x, 0)), x, b.mul(x, slope))


def swish(b, x: Atom, alpha: float = 1.0) -> Atom:
    """x · sigmoid(alpha·x)."""
    return b.mul(x, b.logistic(b.mul(x, _c(x, alpha)) if alpha != 1 else x))


def glu(b, x: Atom, axis: int = -1) -> Atom:
    """The gated linear unit: the first half of x along axis times the sigmoid of the second half."""
    from ._util import error, norm_axis
    axis = norm_axis(b, axis, x.type.rank)
    n = x.type.shape[axis]
    if not isinstance(n, int) or n % 2:
        raise error(b, f"glu halves an axis of even size, got {n}")
    return b.mul(b.slice(x, axis=axis, start=0, stop=n // 2), b.logistic(b.slice(x, axis=axis, start=n // 2, stop=n)))
