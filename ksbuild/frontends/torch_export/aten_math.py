"""Core ATen elementwise ops and reductions over the op library.

Binary ops compute in the dtype torch promotes to (`torch.result_type` of the operands'
recorded values): operands are converted to it first, numbers become literals of it.
"""
from __future__ import annotations

import operator

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import activations as act
from ...ops import aten
from ...ops import index as ix
from ...ops import math as m
from ...ops import reduce as red
from ...ops._util import norm_axes, scalar_lit
from .node import Node, handler, ir_dtype

# ---- unary --------------------------------------------------------------------------------------------

UNARY = {
    "abs.default": lambda b, x: b.abs(x), "neg.default": lambda b, x: b.neg(x),
    "exp.default": lambda b, x: b.exp(x), "log.default": lambda b, x: b.log(x),
    "log1p.default": lambda b, x: b.log1p(x), "expm1.default": lambda b, x: b.expm1(x),
    "sqrt.default": lambda b, x: b.sqrt(x), "rsqrt.default": lambda b, x: m.reciprocal(b, b.sqrt(x)),
    "tanh.default": lambda b, x: b.tanh(x), "sin.default": lambda b, x: b.sin(x), "cos.default": lambda b, x: b.cos(x),
    "tan.default": m.tan, "atan.default": lambda b, x: b.atan(x), "asin.default": m.asin, "acos.default": m.acos,
    "sinh.default": m.sinh, "cosh.default": m.cosh, "asinh.default": m.asinh, "acosh.default": m.acosh,
    "atanh.default": m.atanh, "sigmoid.default": lambda b, x: b.logistic(x), "erf.default": lambda b, x: b.erf(x),
    "erfc.default": lambda b, x: b.erfc(x), "erfinv.default": m.erfinv, "special_ndtri.default": m.probit,
    "floor.default": lambda b, x: b.floor(x), "ceil.default": m.ceil, "trunc.default": m.trunc,
    "round.default": m.round_half_even, "sign.default": m.torch_sign, "reciprocal.default": m.reciprocal,
    "relu.default": aten.relu, "lgamma.default": lambda b, x: b.lgamma(x), "digamma.default": lambda b, x: b.digamma(x),
    "log2.default": lambda b, x: aten.log_base(b, x, 2.0), "log10.default": lambda b, x: aten.log_base(b, x, 10.0),
    "exp2.default": lambda b, x: b.exp(b.mul(x, scalar_lit(0.6931471805599453, x.type.dtype))),
    "hardswish.default": act.hard_swish, "mish.default": act.mish, "silu.default": act.swish,
}
FLOAT_ONLY = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan", "atan", "asin", "acos",
              "sinh", "cosh", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "special_ndtri", "lgamma",
              "digamma", "log2", "log10", "exp2", "reciprocal"}


@handler(*UNARY)
def unary(n: Node):
    """Elementwise functions; integer inputs of float functions are converted to the result's float dtype."""
    key = n.op.removeprefix("aten.")
    return UNARY[key](n.b, n.operand(n.x(), n.dtype))


@handler("logical_not.default")
def logical_not(n: Node):
    return m.logical_not(n.b, n.operand(n.x(), "bool"))


@handler("bitwise_not.default")
def bitwise_not(n: Node):
    """~x: logical not of bools (attention masks), the bits of integers flipped."""
    return m.bitwise_not(n.b, n.x())


@handler("isnan.default", "isinf.default")
def isnan(n: Node):
    """NaN / infinity tests (never true for integers)."""
    x = n.x()
    if not x.type.is_float:
        return Lit(False, Type("bool", x.type.shape))
    return m.isnan(n.b, x) if n.op.split(".")[1] == "isnan" else m.isinf(n.b, x)


# ---- binary -------------------------------------------------------------------------------------------

ARITH = {"add": lambda b, x, y: b.add(x, y), "sub": lambda b, x, y: b.sub(x, y), "mul": lambda b, x, y: b.mul(x, y),
         "maximum": lambda b, x, y: b.max(x, y), "minimum": lambda b, x, y: b.min(x, y),
         "remainder": lambda b, x, y: b.mod(x, y), "fmod": m.fmod, "atan2": lambda b, x, y: b.atan2(x, y),
         "hypot": lambda b, x, y: b.hypot(x, y),
         "pow": lambda b, x, y: m.safe_pow(b, x, y), "rsub": lambda b, x, y: b.sub(y, x)}
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")  # (aten's names are compare's ops)
LOGIC = {"logical_and": m.logical_and, "logical_or": m.logical_or, "logical_xor": lambda b, x, y: b.ne(x, y)}


def _promoted(n: Node, *names: str) -> str:
    """The dtype torch computes a binary op in: torch.result_type of the recorded operands."""
    import torch
    vals = [n.meta(k) for k in names]
    vals = [v if isinstance(v, (torch.Tensor, bool, int, float)) else 1 for v in vals]
    return ir_dtype(torch.result_type(*vals), n.loc) if any(isinstance(v, torch.Tensor) for v in vals) \
        else n.dtype


@handler("add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Tensor", "rsub.Scalar", "mul.Tensor",
         "mul.Scalar", "maximum.default", "minimum.default", "remainder.Tensor", "remainder.Scalar", "fmod.Tensor",
         "fmod.Scalar", "atan2.default", "hypot.default")
def arith(n: Node):
    """x op y (with alpha: x + alpha·y) in the result dtype."""
    name = n.op.split(".")[1]
    dtype = n.dtype
    x, y = n.operand(n.a("self"), dtype), n.operand(n.a("other"), dtype)
    alpha = n.a("alpha", 1)
    if alpha != 1:
        y = n.b.mul(y, n.operand(alpha, dtype))
    return ARITH[name](n.b, x, y)


@handler("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode")
def div(n: Node):
    """True division (ints become floats), or rounded toward zero / down with rounding_mode."""
    mode = n.a("rounding_mode", None)
    dtype = n.dtype
    x, y = n.operand(n.a("self"), dtype), n.operand(n.a("other"), dtype)
    if mode is None:
        return n.b.div(x, y)
    if mode == "floor":
        return n.b.floor(n.b.div(x, y)) if x.type.is_float else n.b.floordiv(x, y)
    return m.trunc(n.b, n.b.div(x, y)) if x.type.is_float else n.b.div(x, y)


@handler("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")
def power(n: Node):
    """x ** y; a small integer exponent multiplies."""
    dtype = n.dtype
    base = n.a("self")
    x = n.operand(base, dtype)
    e = n.a("exponent")
    if isinstance(e, (int, float)) and not isinstance(e, bool) and float(e).is_integer() and abs(e) <= 8:
        return n.b.ipow(x, n=int(e)) if x.type.is_float or e >= 0 else m.safe_pow(n.b, x, n.operand(e, dtype))
    return m.safe_pow(n.b, x, n.operand(e, dtype))


@handler(*[f"{op}.{o}" for op in COMPARE for o in ("Tensor", "Scalar")])
def compare(n: Node):
    dtype = _promoted(n, "self", "other")
    x, y = n.operand(n.a("self"), dtype), n.operand(n.a("other"), dtype)
    if dtype == "bool" and n.op.split(".")[1] in ("eq", "ne"):
        ne = n.b.ne(x, y)
        return ne if n.op.split(".")[1] == "ne" else m.logical_not(n.b, ne)
    return n.b.compare(x, y, op=n.op.split(".")[1])


@handler(*[f"{op}.default" for op in LOGIC])
def logic(n: Node):
    x, y = n.operand(n.a("self"), "bool"), n.operand(n.a("other"), "bool")
    return LOGIC[n.op.split(".")[1]](n.b, x, y)


@handler(*[f"bitwise_{op}.{o}" for op in ("and", "or", "xor") for o in ("Tensor", "Scalar")])
def bitwise(n: Node):
    """x & y, x | y, x ^ y: logical for bools (masks), bitwise for integers, in torch's promoted dtype."""
    op = n.op.split(".")[1].removeprefix("bitwise_")
    dtype = n.dtype
    x, y = n.operand(n.a("self"), dtype), n.operand(n.a("other"), dtype)
    if dtype == "bool":
        return LOGIC["logical_" + op](n.b, x, y)
    return n.b.bitwise(x, y, op=op)


@handler("where.self")
def where(n: Node):
    dtype = n.dtype
    cond = n.operand(n.a("condition"), "bool")
    return n.b.select(cond, n.operand(n.a("self"), dtype), n.operand(n.a("other"), dtype))


@handler("clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_max.default", "clamp_min.Tensor",
         "clamp_max.Tensor")
def clamp(n: Node):
    dtype = n.dtype
    x = n.operand(n.x(), dtype)
    name = n.op.split(".")[1]
    lo = n.a("min", None) if name == "clamp" else n.a("min") if name == "clamp_min" else None
    hi = n.a("max", None) if name == "clamp" else n.a("max") if name == "clamp_max" else None
    return m.clamp(n.b, x, n.operand(lo, dtype) if lo is not None else None,
                   n.operand(hi, dtype) if hi is not None else None)


@handler("hardtanh.default")
def hardtanh(n: Node):
    x = n.x()
    return m.clamp(n.b, x, n.operand(n.a("min_val"), x.type.dtype), n.operand(n.a("max_val"), x.type.dtype),
                   bound_inside=False)  # (derivative 0 at the bounds, as torch's hardtanh)


# ---- activations with parameters ------------------------------------------------------------------------

@handler("gelu.default")
def gelu(n: Node):
    approximate = n.a("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise n.unsupported(f"approximate='{approximate}'")
    return act.gelu(n.b, n.x(), approximate)


@handler("leaky_relu.default")
def leaky_relu(n: Node):
    return aten.leaky_relu(n.b, n.x(), float(n.a("negative_slope")))


@handler("elu.default")
def elu(n: Node):
    return aten.elu(n.b, n.x(), float(n.a("alpha")), float(n.a("scale")), float(n.a("input_scale")))


@handler("hardsigmoid.default")
def hardsigmoid(n: Node):
    return act.hard_sigmoid(n.b, n.x(), 1 / 6, 0.5)


@handler("softplus.default")
def softplus(n: Node):
    return aten.softplus(n.b, n.x(), float(n.a("beta")), float(n.a("threshold")))


# ---- reductions -----------------------------------------------------------------------------------------

def _axes(n: Node, x, name: str = "dim"):
    """The reduced axes: None or [] mean all of them."""
    dims = n.a(name, None)
    if dims is None or dims == []:
        return tuple(range(x.type.rank))
    return norm_axes(n.b, [dims] if isinstance(dims, int) else dims, x.type.rank)


@handler("sum.dim_IntList", "sum.default", "mean.dim", "mean.default", "prod.dim_int", "prod.default")
def sum_mean(n: Node):
    """Sums, means and products in the result dtype (torch sums integers as int64)."""
    x = n.operand(n.x(), n.dtype)
    kind = n.op.split(".")[1]
    axes = _axes(n, x) if kind != "prod" or n.op.endswith("dim_int") else tuple(range(x.type.rank))
    keep = bool(n.a("keepdim", False))
    fn = {"sum": red.sum, "mean": red.mean, "prod": red.prod}[kind]
    return fn(n.b, x, axes, keep)


@handler("amax.default", "amin.default")
def amax(n: Node):
    x = n.x()
    fn = red.amax if n.op.split(".")[1] == "amax" else red.amin
    return fn(n.b, x, _axes(n, x), bool(n.a("keepdim", False)))


@handler("max.default", "min.default")
def max_all(n: Node):
    x = n.x()
    return (red.amax if n.op.split(".")[1] == "max" else red.amin)(n.b, x, None, False)


@handler("max.dim", "min.dim")
def max_dim(n: Node):
    """(values, indices) along dim (the first position of the extremum, as torch's CPU kernels give)."""
    x, dim, keep = n.x(), n.a("dim"), bool(n.a("keepdim", False))
    largest = n.op.split(".")[1] == "max"
    values = (red.amax if largest else red.amin)(n.b, x, [dim], keep)
    return values, ix.arg_extremum(n.b, x, dim, keep, largest)


@handler("argmax.default", "argmin.default")
def argmax(n: Node):
    x, dim, keep = n.x(), n.a("dim", None), bool(n.a("keepdim", False))
    largest = n.op.split(".")[1] == "argmax"
    if dim is None:
        flat = n.b.reshape(x, shape=(aten.numel_of(x),))
        out = ix.arg_extremum(n.b, flat, 0, False, largest)
        return n.b.reshape(out, shape=(1,) * x.type.rank) if keep else out
    return ix.arg_extremum(n.b, x, dim, keep, largest)


@handler("var.correction", "var_mean.correction", "std.correction")
def var(n: Node):
    x = n.x()
    correction = n.a("correction", None)
    v, mu = aten.var(n.b, x, _axes(n, x), 1.0 if correction is None else float(correction), bool(n.a("keepdim", False)))
    kind = n.op.split(".")[1]
    return (v, mu) if kind == "var_mean" else n.b.sqrt(v) if kind == "std" else v


@handler("any.default", "any.dim", "any.dims", "all.default", "all.dim", "all.dims")
def any_all(n: Node):
    x = n.operand(n.x(), "bool")
    axes = _axes(n, x) if not n.op.endswith("default") else tuple(range(x.type.rank))
    return aten.any_all(n.b, x, axes, bool(n.a("keepdim", False)), n.op.split(".")[1] == "any")


@handler("linalg_vector_norm.default")
def vector_norm(n: Node):
    """The p-norm over dim (all axes when None): (Σ |x|^p)^(1/p), max |x| for p = inf."""
    x = n.operand(n.x(), n.dtype)
    return aten.vector_norm(n.b, x, float(n.a("ord", 2)), _axes(n, x), bool(n.a("keepdim", False)))


@handler("cumsum.default")
def cumsum(n: Node):
    return ix.cumsum(n.b, n.operand(n.x(), n.dtype), n.a("dim"))


@handler("cumprod.default")
def cumprod(n: Node):
    return ix.cumprod(n.b, n.operand(n.x(), n.dtype), n.a("dim"))


@handler("logcumsumexp.default")
def logcumsumexp(n: Node):
    return ix.logcumsumexp(n.b, n.operand(n.x(), n.dtype), n.a("dim"))


@handler("sort.default", "sort.stable")
def sort(n: Node):
    """(values, indices); ties keep their order (what stable=True promises)."""
    return ix.sort(n.b, n.x(), n.a("dim", -1), bool(n.a("descending", False)))


@handler("argsort.default", "argsort.stable")
def argsort(n: Node):
    return ix.sort(n.b, n.x(), n.a("dim", -1), bool(n.a("descending", False)))[1]


@handler("bucketize.Tensor")
def bucketize(n: Node):
    out = ix.searchsorted(n.b, n.x("boundaries"), n.x(), bool(n.a("right", False)))
    return n.b.convert(out, dtype="i32") if n.a("out_int32", False) else out


@handler("searchsorted.Tensor")
def searchsorted(n: Node):
    side = n.a("side", None)
    out = ix.searchsorted(n.b, n.x("sorted_sequence"), n.x(), bool(n.a("right", False)) or side == "right")
    return n.b.convert(out, dtype="i32") if n.a("out_int32", False) else out


@handler("_cdist_forward.default")
def cdist(n: Node):
    if float(n.a("p", 2.0)) != 2.0:
        raise n.unsupported(f"cdist with p = {n.a('p')}", hint="p = 2 (Euclidean) is")
    from ...ops import linalg
    return linalg.cdist(n.b, n.x("x1"), n.x("x2"))


@handler("_softmax.default", "_log_softmax.default", "softmax.int", "log_softmax.int")
def softmax(n: Node):
    x = n.operand(n.x(), n.dtype)
    fn = red.log_softmax if "log" in n.op else red.softmax
    return fn(n.b, x, n.a("dim"))


@handler("_safe_softmax.default")
def safe_softmax(n: Node):
    return red.safe_softmax(n.b, n.operand(n.x(), n.dtype), n.a("dim"))


@handler("logsumexp.default")
def logsumexp(n: Node):
    x = n.x()
    return red.logsumexp(n.b, x, _axes(n, x), bool(n.a("keepdim", False)))


@handler(operator.neg)
def neg_size(n: Node):
    from ...ir.types import dim_sub
    (a,) = n.args
    if not isinstance(a, (int, str)):
        raise n.error(f"negation of {a!r} is not size arithmetic")
    return dim_sub(0, a)
