"""Linear quantization (ONNX QuantizeLinear, DequantizeLinear and the integer products).

A scale or zero point is a scalar, one value per slice along `axis`, or one per block of
`block` elements along it; `expand` shapes it to broadcast against x.
"""
from __future__ import annotations

from ..ir.core import Atom, Lit
from ..ir.types import Type
from ._util import error, numel
from .math import round_half_even

INT_RANGES = {"u8": (0, 255), "i8": (-128, 127), "u16": (0, 65535), "i16": (-32768, 32767), "u4": (0, 15),
              "i4": (-8, 7), "u2": (0, 3), "i2": (-2, 1), "i32": (-2**31, 2**31 - 1)}


def expand(b, p: Atom, x: Atom, axis: int, block: int = 0) -> Atom:
    """A scale or zero point shaped to broadcast against x (per tensor, per axis or per block)."""
    r = x.type.rank
    axis = axis + r if axis < 0 else axis
    if p.type.rank == 0 or (p.type.rank == 1 and p.type.shape[0] == 1 and not block):
        return b.reshape(p, shape=()) if p.type.rank else p
    if block:
        n = x.type.shape[axis]
        if not isinstance(n, int):
            raise error(b, "blocked quantization needs a static axis")
        import numpy as np

        from .create import array
        return b.gather(p, array(b, np.arange(n, dtype=np.int64) // block), axis=axis)
    if p.type.rank != 1 or p.type.shape[0] != x.type.shape[axis]:
        raise error(b, f"a per-axis scale {p.type} does not match axis {axis} of {x.type}")
    return b.reshape(p, shape=tuple(p.type.shape[0] if i == axis else 1 for i in range(r)))


ROUNDING_CONSTANT = {"f32": 1.5 * 2.0**23, "f64": 1.5 * 2.0**52}  # 1.5 · 2^(the mantissa's bits)


def round_to_saturate(b, v: Atom, dtype: str) -> Atom:
    """v rounded half to even, for a result saturated to dtype's range afterwards. When that range fits in 16 bits
    and v is f32 or f64: (v + M) - M with M = ROUNDING_CONSTANT, which rounds exactly as round_half_even for
    |v| < M / 3 (the addition rounds to nearest even; onnxruntime's MLAS rounds with vcvtps2dq, the same) and
    otherwise keeps v's sign and a magnitude past every 16-bit bound, so that the saturation gives the exact result:
    two additions in the loop instead of round_half_even's floors and selects. Else round_half_even."""
    lo, hi = INT_RANGES[dtype]
    if v.type.dtype not in ROUNDING_CONSTANT or hi - lo > 65535:
        return round_half_even(b, v)
    m = Lit(ROUNDING_CONSTANT[v.type.dtype], Type(v.type.dtype))
    return b.sub(b.add(v, m), m)


def quantize_int(b, x: Atom, scale: Atom, zp: Atom | None, dtype: str, compute: str) -> Atom:
    """round(x / scale) + zero point, saturated to dtype's range, in `compute` (its compute dtype)."""
    lo, hi = INT_RANGES[dtype]
    q = round_to_saturate(b, b.div(x, scale), dtype)
    if zp is not None:
        q = b.add(q, zp if zp.type.dtype == q.type.dtype else b.convert(zp, dtype=q.type.dtype))
    q = b.max(b.min(q, Lit(float(hi), Type(q.type.dtype))), Lit(float(lo), Type(q.type.dtype)))
    return b.convert(q, dtype=compute)


def multiply_quantized(b, a: Atom, a_scale: Atom, a_zp: Atom | None, x: Atom, x_scale: Atom, x_zp: Atom | None,
                       y_scale: Atom, y_zp: Atom | None, dtype: str, compute: str) -> Atom:
    """The product of two 8-bit tensors as onnxruntime's QLinearMul computes it on x86 and arm64 (MLAS qlmul.cpp):
    the exact int32 product (a - a_zp)·(x - x_zp), times the f32 ratio a_scale · x_scale / y_scale, plus y_zp, in
    f32, rounded half to even and saturated to dtype. (The schema's definition, dequantize, multiply, quantize,
    rounds differently now and then: one step.)"""
    lo, hi = INT_RANGES[dtype]
    ai, xi = integer_operand(b, a, a_zp), integer_operand(b, x, x_zp)
    if _fewer(xi, ai):  # (the smaller operand first: then the larger one's loop joins the product's, see fuse's sink)
        ai, xi = xi, ai
    product = b.convert(b.mul(ai, xi), dtype="f32")
    v = b.mul(product, b.div(b.mul(a_scale, x_scale), y_scale))
    if y_zp is not None:
        v = b.add(v, b.convert(y_zp, dtype="f32"))
    q = round_to_saturate(b, v, dtype)
    q = b.max(b.min(q, Lit(float(hi), Type("f32"))), Lit(float(lo), Type("f32")))
    return b.convert(q, dtype=compute)


def add_quantized(b, a: Atom, x: Atom, ratio_a: float, ratio_x: float, fixed: float, dtype: str,
                  compute: str) -> Atom:
    """The sum of two 8-bit tensors of one shape as onnxruntime's QLinearAdd computes it on x86-64 with AVX2 (MLAS
    qladd_avx2.cpp; add_ratios gives the constants): a · ratio_a + (x · ratio_x + fixed) in f32, each product and
    sum one fused multiply-add, rounded half to even and saturated to dtype. The C++ is written so that GCC's
    contraction (-ffp-contract=fast, the default for C++) makes exactly those two fused operations where the
    instruction set has them (x86-64-v3 and v4, the levels on which onnxruntime runs that kernel); without FMA the
    two products round separately (the reference interpreter too), within one step of it."""
    lo, hi = INT_RANGES[dtype]
    f = Type("f32")
    inner = b.add(b.mul(b.convert(x, dtype="f32"), Lit(ratio_x, f)), Lit(fixed, f))
    v = b.add(b.mul(b.convert(a, dtype="f32"), Lit(ratio_a, f)), inner)
    q = round_to_saturate(b, v, dtype)
    q = b.max(b.min(q, Lit(float(hi), f)), Lit(float(lo), f))
    return b.convert(q, dtype=compute)


def add_ratios(a_scale: float, a_zp: int, x_scale: float, x_zp: int, y_scale: float, y_zp: int):
    """(ratio_a, ratio_x, fixed) of add_quantized, in f32 as MLAS computes them: a_scale / y_scale,
    x_scale / y_scale and y_zp - fma(ratio_a, a_zp, ratio_x · x_zp) (onnxruntime's build contracts that sum, as
    measured against its QLinearAdd over every pair of bytes: docs/quantization.md)."""
    import numpy as np
    f32 = np.float32
    ra, rx = f32(f32(a_scale) / f32(y_scale)), f32(f32(x_scale) / f32(y_scale))
    return float(ra), float(rx), float(f32(f32(y_zp) - fma_f32(ra, f32(a_zp), f32(rx * f32(x_zp)))))


def global_average_quantized(b, x: Atom, axes, scale: float, x_zp: int, y_zp: int, dtype: str,
                             compute: str) -> Atom:
    """The average of an 8-bit tensor over `axes` (keeping them) as onnxruntime's QLinearGlobalAveragePool computes
    it (MLAS qlgavgpool.cpp): the exact int32 sum less x_zp per element, times the f32 `scale` of
    global_average_scale, rounded half to even, plus y_zp, saturated to dtype. An integer sum (vectorized, no
    chain of float additions) and one product."""
    from .reduce import sum as reduce_sum
    lo, hi = INT_RANGES[dtype]
    f = Type("f32")
    total = reduce_sum(b, b.convert(x, dtype="i32"), axes, keepdim=True)
    count = 1
    for a in axes:
        count *= x.type.shape[a]
    if x_zp:
        total = b.sub(total, Lit(x_zp * count, Type("i32")))
    q = round_to_saturate(b, b.mul(b.convert(total, dtype="f32"), Lit(scale, f)), dtype)
    if y_zp:
        q = b.add(q, Lit(float(y_zp), f))
    q = b.max(b.min(q, Lit(float(hi), f)), Lit(float(lo), f))
    return b.convert(q, dtype=compute)


def global_average_scale(x_scale: float, y_scale: float, count: int) -> float:
    """onnxruntime's scale of a global average: x_scale / (y_scale · count), in f32 as it computes it."""
    import numpy as np
    f32 = np.float32
    return float(f32(f32(x_scale) / f32(f32(y_scale) * f32(count))))


def fma_f32(x, y, z):
    """x · y + z rounded once to f32 (x, y, z f32 values), exactly: the product and sum as fractions, then the
    nearest f32 (ties to even)."""
    from fractions import Fraction

    import numpy as np
    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    near = np.float32(float(exact))  # (within one f32 step of the exact value: the nearest is one of three)
    if not np.isfinite(near):
        return near
    cands = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1))


def _fewer(a: Atom, x: Atom) -> bool:
    """Whether a has (statically) fewer elements than x."""
    na, nx = numel(a.type.shape), numel(x.type.shape)
    return isinstance(na, int) and isinstance(nx, int) and na < nx


def dequantize(b, x: Atom, scale: Atom, zp: Atom | None) -> Atom:
    """(x - zero point) · scale in scale's float dtype."""
    dt = scale.type.dtype
    xf = x if x.type.dtype == dt else b.convert(x, dtype=dt)
    if zp is not None:
        xf = b.sub(xf, zp if zp.type.dtype == dt else b.convert(zp, dtype=dt))
    return b.mul(xf, scale)


def integer_operand(b, x: Atom, zp: Atom | None, axis: int | None = None) -> Atom:
    """x - zero point as int32 (the zero point per tensor, or per row/channel along axis)."""
    xi = b.convert(x, dtype="i32")
    if zp is None:
        return xi
    zi = b.convert(zp, dtype="i32")
    if zi.type.rank and numel(zi.type.shape) != 1 and axis is not None:
        zi = b.reshape(zi, shape=tuple(zi.type.shape[0] if i == axis else 1 for i in range(x.type.rank)))
    elif zi.type.rank:
        zi = b.reshape(zi, shape=())
    return b.sub(xi, zi)


def softmax_table(x_scale: float, length: int):
    """onnxruntime's QLinearSoftmax table (contrib_ops/cpu/quantization/qlinear_softmax.cc): entry i is
    exp((i - 255 + shift) · x_scale) in double, stored as f32, with shift = max(0, log(FLT_MAX / length) - 5) / x_scale
    (so that a sum of `length` entries stays finite); entry 255 belongs to a row's largest byte. The logarithm is
    the f32 one (its argument FLT_MAX / length is an f32, and onnxruntime 1.32's tables are those of logf: with the
    double log 8-17 of 524288 results of tests/test_int8.py's rows differ from it)."""
    import math

    import numpy as np
    f32 = np.float32
    logf = f32(math.log(float(f32(np.finfo(f32).max) / f32(length))))  # (the f32 log, correctly rounded)
    shift = max(0.0, float(logf) - 5.0) / float(f32(x_scale))
    return np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * float(f32(x_scale))).astype(f32)


def softmax_quantized(b, x: Atom, axis: int, table: Atom, y_scale: float, y_zp: int, dtype: str,
                      compute: str) -> Atom:
    """The softmax of an 8-bit tensor along `axis` (the last) as onnxruntime's QLinearSoftmax computes it: each
    byte's table entry e = table[x - max(x) + 255] (softmax_table), the row's f32 sum s of them added left to right,
    and round_half_even(e · floor(1 / y_scale) / s) + y_zp in double (e · floor(1 / y_scale) is exact there; in f32
    it overflows for rows shorter than about 110 and a y_scale of 1 / 16384), saturated (its kernel multiplies by
    floor(1 / y_scale), not by 1 / y_scale). The qsoftmax prim (ks::qsoftmax); onnxruntime 1.32's results are
    those, bit for bit (docs/quantization.md)."""
    import numpy as np
    if axis != x.type.rank - 1:
        raise error(b, f"softmax_quantized along axis {axis} of {x.type}: the last axis only")
    lo, hi = INT_RANGES[dtype]
    ratio = float(np.floor(np.float32(1.0) / np.float32(y_scale)))
    y = b.qsoftmax(table, b.convert(x, dtype=dtype), ratio=ratio, y_zero=int(y_zp), lo=int(lo), hi=int(hi))
    return b.convert(y, dtype=compute)
