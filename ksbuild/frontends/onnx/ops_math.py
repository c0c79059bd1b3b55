"""ONNX elementwise ops: arithmetic, math functions, comparisons, logic, casts, activations."""
from __future__ import annotations

import numpy as np

from ...ir.core import Atom
from ...ops import activations as act
from ...ops import math as m
from ...ops._util import scalar_lit
from .graph import handler, symbolic
from .node import Node
from .values import Val, atom_of_shape, compute_dtype, onnx_dtype

# ---- unary ------------------------------------------------------------------------------------------

UNARY = {
    "Abs": lambda b, x: b.abs(x), "Neg": lambda b, x: b.neg(x), "Exp": lambda b, x: b.exp(x),
    "Log": lambda b, x: b.log(x), "Sqrt": lambda b, x: b.sqrt(x), "Tanh": lambda b, x: b.tanh(x),
    "Sin": lambda b, x: b.sin(x), "Cos": lambda b, x: b.cos(x), "Atan": lambda b, x: b.atan(x),
    "Sigmoid": lambda b, x: b.logistic(x), "Erf": lambda b, x: b.erf(x), "Floor": lambda b, x: b.floor(x),
    "Ceil": m.ceil, "Round": m.round_half_even, "Sign": lambda b, x: b.sign(x), "Reciprocal": m.reciprocal,
    "Relu": m.relu, "Tan": m.tan, "Asin": m.asin, "Acos": m.acos, "Sinh": m.sinh, "Cosh": m.cosh,
    "Asinh": m.asinh, "Acosh": m.acosh, "Atanh": m.atanh, "Softplus": act.softplus, "Softsign": act.softsign,
    "IsNaN": m.isnan, "Not": m.logical_not, "HardSwish": act.hard_swish, "Mish": act.mish,
}


@handler(*UNARY)
def unary(n: Node):
    return [UNARY[n.op](n.b, n.x(0))]


@handler("Identity")
def identity(n: Node):
    return [n.val(0)]


@handler("IsInf")
def isinf(n: Node):
    return [m.isinf(n.b, n.x(0), bool(n.attr("detect_positive", 1)), bool(n.attr("detect_negative", 1)))]


# ---- binary and variadic ------------------------------------------------------------------------------

BINARY = {
    "Add": lambda b, x, y: b.add(x, y), "Sub": lambda b, x, y: b.sub(x, y), "Mul": lambda b, x, y: b.mul(x, y),
    "Div": lambda b, x, y: b.div(x, y), "Equal": lambda b, x, y: b.eq(x, y), "Less": lambda b, x, y: b.lt(x, y),
    "LessOrEqual": lambda b, x, y: b.le(x, y), "Greater": lambda b, x, y: b.gt(x, y),
    "GreaterOrEqual": lambda b, x, y: b.ge(x, y), "And": m.logical_and, "Or": m.logical_or,
    "Xor": lambda b, x, y: b.ne(x, y), "BitwiseAnd": lambda b, x, y: b.bitwise(x, y, op="and"),
    "BitwiseOr": lambda b, x, y: b.bitwise(x, y, op="or"), "BitwiseXor": lambda b, x, y: b.bitwise(x, y, op="xor"),
}


@handler(*BINARY)
def binary(n: Node):
    x, y = n.x(0), n.x(1)
    if n.op == "Equal" and x.type.dtype == "bool":
        return [m.logical_not(n.b, n.b.ne(x, y))]
    return [BINARY[n.op](n.b, x, y)]


@symbolic("Add", "Sub", "Mul", "Div", "Equal")
def symbolic_binary(n: Node, known):
    x, y = known
    fns = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.floor_divide, "Equal": np.equal}
    out = fns[n.op](x.astype(object), y.astype(object))
    return [np.asarray(out, dtype=bool) if n.op == "Equal" else out]


@handler("BitwiseNot")
def bitwise_not(n: Node):
    return [m.bitwise_not(n.b, n.x(0))]


@handler("BitShift")
def bitshift(n: Node):
    direction = n.attr_in("direction", ("LEFT", "RIGHT"))
    return [n.b.bitwise(n.x(0), n.x(1), op="shl" if direction == "LEFT" else "shr")]


@handler("Pow")
def power(n: Node):
    return [m.safe_pow(n.b, n.x(0), n.x(1))]


@handler("Mod")
def mod(n: Node):
    fmod = n.attr("fmod", 0)
    x, y = n.x(0), n.x(1)
    return [m.fmod(n.b, x, y) if fmod else n.b.mod(x, y)]


VARIADIC = {"Max": lambda b, x, y: b.max(x, y), "Min": lambda b, x, y: b.min(x, y), "Sum": lambda b, x, y: b.add(x, y),
            "Mean": lambda b, x, y: b.add(x, y)}


@handler(*VARIADIC)
def variadic(n: Node):
    xs = n.xs()
    out = xs[0]
    for x in xs[1:]:
        if n.op in ("Max", "Min"):
            out = m.extremum(n.b, out, x, n.op == "Max")
        else:
            out = VARIADIC[n.op](n.b, out, x)
    if n.op == "Mean":
        out = n.b.div(out, scalar_lit(len(xs), out.type.dtype))
    if len(xs) == 1 and n.op != "Mean":
        return [n.val(0) if not n.fold else out]
    return [out]


@handler("Where")
def where(n: Node):
    return [m.where(n.b, n.x(0), n.x(1), n.x(2))]


@symbolic("Where")
def symbolic_where(n: Node, known):
    c, x, y = known
    return [np.where(c.astype(bool), x.astype(object), y.astype(object))]


@handler("Clip")
def clip(n: Node):
    x = n.x(0)
    if n.opset < 11:
        lo, hi = n.attr("min", None), n.attr("max", None)
        lo = scalar_lit(lo, x.type.dtype) if lo is not None else None
        hi = scalar_lit(hi, x.type.dtype) if hi is not None else None
    else:
        lo, hi = n.opt(1), n.opt(2)
    return [m.clamp(n.b, x, lo, hi)]


# ---- activations with attributes ----------------------------------------------------------------------

@handler("LeakyRelu")
def leaky_relu(n: Node):
    return [act.leaky_relu(n.b, n.x(0), n.attr("alpha", 0.01))]


@handler("Elu")
def elu(n: Node):
    return [act.elu(n.b, n.x(0), n.attr("alpha", 1.0))]


@handler("Selu")
def selu(n: Node):
    alpha, gamma = n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    return [act.selu(n.b, n.x(0), alpha, gamma)]


@handler("Celu")
def celu(n: Node):
    return [act.celu(n.b, n.x(0), n.attr("alpha", 1.0))]


@handler("HardSigmoid")
def hard_sigmoid(n: Node):
    return [act.hard_sigmoid(n.b, n.x(0), n.attr("alpha", 0.2), n.attr("beta", 0.5))]


@handler("ThresholdedRelu")
def thresholded_relu(n: Node):
    return [act.thresholded_relu(n.b, n.x(0), n.attr("alpha", 1.0))]


@handler("Shrink")
def shrink(n: Node):
    return [act.shrink(n.b, n.x(0), n.attr("bias", 0.0), n.attr("lambd", 0.5))]


@handler("Gelu")
def gelu(n: Node):
    return [act.gelu(n.b, n.x(0), n.attr_in("approximate", ("none", "tanh"), "none"))]


@handler("QuickGelu", domain="com.microsoft")
def quick_gelu(n: Node):
    """onnxruntime's QuickGelu (its transformer optimizer fuses CLIP's x · sigmoid(1.702 x) into it)."""
    return [act.swish(n.b, n.x(0), n.attr("alpha", 1.702))]


@handler("PRelu")
def prelu(n: Node):
    return [act.prelu(n.b, n.x(0), n.x(1))]


@handler("Swish")
def swish(n: Node):
    return [act.swish(n.b, n.x(0), n.attr("alpha", 1.0))]


# ---- casts ----------------------------------------------------------------------------------------------

SATURATING = ("f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz")
F8_MAX = {"f8e4m3fn": 448.0, "f8e4m3fnuz": 240.0, "f8e5m2": 57344.0, "f8e5m2fnuz": 57344.0}


@handler("Cast")
def cast(n: Node):
    to = onnx_dtype(n.attr("to"), "Cast's 'to'", n.loc)
    saturate = bool(n.attr("saturate", 1))
    n.attr_in("round_mode", ("up",), "up")
    return [Val(cast_atom(n, n.x(0), n.dtype(0), to, saturate), None, to)]


@handler("CastLike")
def cast_like(n: Node):
    to = n.dtype(1)
    saturate = bool(n.attr("saturate", 1))
    n.attr_in("round_mode", ("up",), "up")
    return [Val(cast_atom(n, n.x(0), n.dtype(0), to, saturate), None, to)]


@symbolic("Cast", "CastLike")
def symbolic_cast(n: Node, known):
    to = onnx_dtype(n.attr("to"), "Cast's 'to'", n.loc) if n.op == "Cast" else n.dtype(1)
    saturate = bool(n.attr("saturate", 1))
    if to in ("i64", "i32"):
        return [known[0]]
    # a dim used as a number (x * x.shape[1], torch.full(..., float(n))): its value at run time
    return [Val(cast_atom(n, atom_of_shape(n.b, known[0]), "i64", to, saturate), None, to, dims=known[0])]


def cast_atom(n: Node, x: Atom, src: str, to: str, saturate: bool) -> Atom:
    """x (computed in src's compute dtype) cast to `to`, then held in to's compute dtype."""
    b = n.b
    if to == "f8e8m0" and not saturate:
        raise n.unsupported("Cast to float8e8m0 without saturation")
    target = compute_dtype(to)
    if to == target:
        return x if x.type.dtype == to else b.convert(x, dtype=to)
    if to in SATURATING and saturate and x.type.is_float:
        hi = scalar_lit(F8_MAX[to], x.type.dtype)
        lo = scalar_lit(-F8_MAX[to], x.type.dtype)
        x = b.select(b.gt(x, hi), hi, b.select(b.lt(x, lo), lo, x))  # NaN stays NaN
    if x.type.dtype == "bool":
        x = b.convert(x, dtype=target)
    elif x.type.is_int and target == "f32":
        x = b.convert(x, dtype="f32")
    narrow = b.convert(x, dtype=to)  # rounds to the narrow type
    return b.convert(narrow, dtype=target)
