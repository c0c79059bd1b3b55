"""ONNX quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv."""
from __future__ import annotations

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import linalg, nn
from ...ops import quant as q
from ...ops import reduce as red
from ...ops.math import round_half_even
from .graph import handler
from .node import Node
from .ops_math import cast_atom
from .ops_nn import _kernel, _window_attrs
from .values import Val, compute_dtype, onnx_dtype


def _params(n: Node):
    axis = n.attr("axis", 1)
    block = n.attr("block_size", 0) if n.opset >= 21 else 0
    return axis, block


@handler("QuantizeLinear")
def quantize_linear(n: Node):
    x, scale = n.x(0), n.x(1)
    zp = n.opt(2)
    axis, block = _params(n)
    saturate = bool(n.attr("saturate", 1)) if n.opset >= 19 else True
    out = onnx_dtype(n.attr("output_dtype"), "output_dtype", n.loc) if "output_dtype" in n.attrs else None
    n.attr("output_dtype", 0)
    n.attr("precision", 0)
    to = n.dtype(2) if zp is not None else out or "u8"
    if not x.type.is_float:
        raise n.error(f"QuantizeLinear of {x.type}: the input must be float")
    s = q.expand(n.b, scale if scale.type.dtype == x.type.dtype else n.b.convert(scale, dtype=x.type.dtype), x,
                 axis, block)
    z = q.expand(n.b, zp, x, axis, block) if zp is not None else None
    if to in q.INT_RANGES:
        return [Val(q.quantize_int(n.b, x, s, z, to, compute_dtype(to)), None, to)]
    y = n.b.div(x, s)
    if to == "f4e2m1" and z is not None:
        y = n.b.add(y, n.b.convert(z, dtype=y.type.dtype) if z.type.dtype != y.type.dtype else z)
    return [Val(cast_atom(n, y, "f32", to, saturate), None, to)]


@handler("DequantizeLinear")
def dequantize_linear(n: Node):
    x, scale = n.x(0), n.x(1)
    zp = n.opt(2)
    axis, block = _params(n)
    out = n.dtype(1)
    if "output_dtype" in n.attrs:
        out = onnx_dtype(n.attr("output_dtype"), "output_dtype", n.loc)
    s = q.expand(n.b, scale, x, axis, block)
    z = q.expand(n.b, zp, x, axis, block) if zp is not None else None
    y = q.dequantize(n.b, x, s, z)
    if out != n.dtype(1):
        y = cast_atom(n, y, n.dtype(1), out, True)
    return [Val(y, None, out)]


@handler("DynamicQuantizeLinear")
def dynamic_quantize_linear(n: Node):
    x = n.x(0)
    b = n.b
    zero = Lit(0.0, Type(x.type.dtype))
    hi = b.max(red.amax(b, x), zero)
    lo = b.min(red.amin(b, x), zero)
    scale = b.div(b.sub(hi, lo), Lit(255.0, Type(x.type.dtype)))
    zp_f = b.max(b.min(round_half_even(b, b.div(b.neg(lo), scale)), Lit(255.0, Type(x.type.dtype))), zero)
    y = q.quantize_int(b, x, scale, zp_f, "u8", "u8")
    return [Val(y, None, "u8"), scale, Val(b.convert(zp_f, dtype="u8"), None, "u8")]


@handler("MatMulInteger")
def matmul_integer(n: Node):
    a = q.integer_operand(n.b, n.x(0), n.opt(2), n.x(0).type.rank - 2 if n.x(0).type.rank >= 2 else None)
    bm = q.integer_operand(n.b, n.x(1), n.opt(3), n.x(1).type.rank - 1)
    return [linalg.matmul(n.b, a, bm)]


@handler("ConvInteger")
def conv_integer(n: Node):
    x = q.integer_operand(n.b, n.x(0), n.opt(2))
    w = q.integer_operand(n.b, n.x(1), n.opt(3), 0)
    kernel = _kernel(n, n.x(1))
    strides, pads, dilations = _window_attrs(n, x, kernel)
    return [nn.conv(n.b, x, w, None, strides, pads, dilations, n.attr("group", 1))]


def _requantize(n: Node, acc, scale, y_scale, y_zp, to: str):
    """An int32 accumulator as the output type: round(acc · scale / y_scale) + y_zp, saturated."""
    b = n.b
    real = b.mul(b.convert(acc, dtype="f32"), b.div(scale, y_scale))
    return Val(q.quantize_int(b, real, Lit(1.0, Type("f32")), y_zp, to, compute_dtype(to)), None, to)


def _f32(n: Node, a):
    return a if a.type.dtype == "f32" else n.b.convert(a, dtype="f32")


@handler("QLinearMatMul")
def qlinear_matmul(n: Node):
    a = q.integer_operand(n.b, n.x(0), n.x(2))
    bm = q.integer_operand(n.b, n.x(3), n.x(5))
    acc = linalg.matmul(n.b, a, bm)
    scale = n.b.mul(_f32(n, n.b.reshape(n.x(1), shape=())), _f32(n, n.b.reshape(n.x(4), shape=())))
    y_zp = n.b.reshape(n.x(7), shape=())
    return [_requantize(n, acc, scale, _f32(n, n.b.reshape(n.x(6), shape=())), y_zp, n.dtype(7))]


@handler("QLinearConv")
def qlinear_conv(n: Node):
    x = q.integer_operand(n.b, n.x(0), n.x(2))
    w = q.integer_operand(n.b, n.x(3), n.x(5), 0)
    kernel = _kernel(n, n.x(3))
    strides, pads, dilations = _window_attrs(n, x, kernel)
    acc = nn.conv(n.b, x, w, n.opt(8), strides, pads, dilations, n.attr("group", 1))
    w_scale = n.x(4)
    if w_scale.type.rank and w_scale.type.shape[0] != 1:
        w_scale = nn.channel(n.b, w_scale, acc.type.rank)
    else:
        w_scale = n.b.reshape(w_scale, shape=()) if w_scale.type.rank else w_scale
    scale = n.b.mul(_f32(n, n.b.reshape(n.x(1), shape=()) if n.x(1).type.rank else n.x(1)), _f32(n, w_scale))
    y_scale = n.b.reshape(n.x(6), shape=()) if n.x(6).type.rank else n.x(6)
    y_zp = n.b.reshape(n.x(7), shape=()) if n.x(7).type.rank else n.x(7)
    return [_requantize(n, acc, scale, _f32(n, y_scale), y_zp, n.dtype(7))]
