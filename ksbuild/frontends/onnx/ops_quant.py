"""ONNX quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv (and the helpers of onnxruntime's ops_quant_contrib.py)."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.dense import Dense
from ...ir.types import Type, numel
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
    y, scale, zero = dynamic_quantize(n.b, n.x(0))
    return [Val(y, None, "u8"), scale, Val(zero, None, "u8")]


def dynamic_quantize(b, x):
    """(x as uint8, its scale, its zero point as uint8) by ONNX DynamicQuantizeLinear's definition: the range of x
    and 0 over 255 steps, the zero point and the values rounded half to even."""
    zero = Lit(0.0, Type(x.type.dtype))
    top, bottom = red.amax(b, x), red.amin(b, x)  # (both before any scalar: fuse makes them one pass over x)
    hi, lo = b.max(top, zero), b.min(bottom, zero)
    scale = b.div(b.sub(hi, lo), Lit(255.0, Type(x.type.dtype)))
    zp_f = b.max(b.min(round_half_even(b, b.div(b.neg(lo), scale)), Lit(255.0, Type(x.type.dtype))), zero)
    return q.quantize_int(b, x, scale, zp_f, "u8", "u8"), scale, b.convert(zp_f, dtype="u8")


@handler("MatMulInteger")
def matmul_integer(n: Node):
    fast = integer_sums(n.b, n.x(0), n.dtype(0), n.opt(2), n.known(2), n.x(1), n.known(1),
                        n.known(3) if n.has(3) else np.zeros((), np.int8))
    if fast is not None:
        return [fast]
    a = q.integer_operand(n.b, n.x(0), n.opt(2), n.x(0).type.rank - 2 if n.x(0).type.rank >= 2 else None)
    bm = q.integer_operand(n.b, n.x(1), n.opt(3), n.x(1).type.rank - 1)
    return [linalg.matmul(n.b, a, bm)]


def integer_sums(b, a, a_type: str, a_zp, a_zp_value, w, w_value, w_zp_value):
    """Σ_k (a - a_zp)·w as int32 on the integer kernel (qmatmul with int32 results) when w is a constant int8
    [K, N] (w_value) with zero point 0 and a an 8-bit tensor with one zero point (a_zp, or None; its value
    a_zp_value when known), else None. A zero point known only at run time (DynamicQuantizeLinear's) is taken out
    after the product: Σ (a - z)·w = Σ a·w - z·Σ_k w[k, :]."""
    if w_value is None or w_value.ndim != 2 or w_value.dtype != np.int8 or w_zp_value is None or \
            np.any(w_zp_value != 0) or a_type not in RANGES or a.type.rank < 1 or \
            (a_zp is not None and numel(a_zp.type.shape) != 1):
        return None
    z = a_zp_value if a_zp is not None else np.zeros((), np.int64)
    x_zero = int(_scalar(z)) if z is not None else 0
    bias = b.constant(value=Dense.of(np.zeros(w_value.shape[1], np.int32)))
    scale = b.constant(value=Dense.of(np.ones(1, np.float32)))
    y = b.qmatmul(a, w, bias, scale, x_zero=x_zero, y_zero=0, lo=0, hi=0, out="i32")
    if z is not None:
        return y
    sums = b.constant(value=Dense.of(w_value.astype(np.int32).sum(0).astype(np.int32)))
    return b.sub(y, b.mul(b.convert(b.reshape(a_zp, shape=()), dtype="i32"), sums))


@handler("ConvInteger")
def conv_integer(n: Node):
    x = q.integer_operand(n.b, n.x(0), n.opt(2))
    w = q.integer_operand(n.b, n.x(1), n.opt(3), 0)
    kernel = _kernel(n, n.x(1))
    strides, pads, dilations = _window_attrs(n, x, kernel)
    return [nn.conv(n.b, x, w, None, strides, pads, dilations, n.attr("group", 1))]


def _requantize(n: Node, acc, scale, y_scale, y_zp, to: str, b=None):
    """An int32 accumulator as the output type: round(acc · scale / y_scale) + y_zp, saturated (to the bounds of
    a folded Relu or Clip too). As onnxruntime's MLAS requantizes (and ks::qtile::requantize): the f32 product
    clamped to the bounds less the zero point, then rounded half to even. The clamp also keeps the product a
    rounded f32: without it GCC fused the product into the rounding's addition ((v + 1.5·2^23) - 1.5·2^23, -ffp-
    contract=fast at x86-64-v3 and v4), rounding the exact product, one step off where the f32 product falls on
    a half (bert_small's QDQ attention products: 1 of 131072 values, which then spread through the layers after).
    b: the builder (n's, or a loop body's)."""
    b = b if b is not None else n.b
    real = b.mul(b.convert(acc, dtype="f32"), b.div(scale, y_scale))
    if to in RANGES:
        zf = y_zp if y_zp.type.dtype == "f32" else b.convert(y_zp, dtype="f32")
        lo, hi = (Lit(float(v), Type("f32")) for v in _bounds(n, to))
        real = b.max(b.min(real, b.sub(hi, zf)), b.sub(lo, zf))
    y = q.quantize_int(b, real, Lit(1.0, Type("f32")), y_zp, to, compute_dtype(to))
    if to in RANGES and _bounds(n, to) != RANGES[to]:
        lo, hi = _bounds(n, to)
        y = b.max(b.min(y, Lit(hi, Type(y.type.dtype))), Lit(lo, Type(y.type.dtype)))
    return Val(y, None, to)


def _f32(n: Node, a):
    return a if a.type.dtype == "f32" else n.b.convert(a, dtype="f32")


@handler("QLinearMatMul")
def qlinear_matmul(n: Node):
    b = n.x(3)
    if b.type.rank == 2 and n.x(0).type.rank >= 1:
        k = integer_kernel_params(n, 0, 3, 6, None, b.type.shape[1])
        if k is not None:
            return [Val(n.b.qmatmul(n.x(0), b, k["bias"], k["scale"], **k["params"]), None, k["params"]["out"])]
    fast = _activation_product(n)
    if fast is not None:
        return [fast]
    a = q.integer_operand(n.b, n.x(0), n.x(2))
    bm = q.integer_operand(n.b, n.x(3), n.x(5))
    acc = linalg.matmul(n.b, a, bm)
    scale = n.b.mul(_f32(n, n.b.reshape(n.x(1), shape=())), _f32(n, n.b.reshape(n.x(4), shape=())))
    y_zp = n.b.reshape(n.x(7), shape=())
    return [_requantize(n, acc, scale, _f32(n, n.b.reshape(n.x(6), shape=())), y_zp, n.dtype(7))]


def _activation_product(n: Node):
    """QLinearMatMul of two 8-bit activations a [..., M, K] and b [..., K, N] of the same batch shape (attention's
    products of a quantized transformer: QOperator, or folded from QDQ) on ks::qmatmul, one call per matrix in a loop
    over the batch, when the scales and zero points are constants; else None (int32 loops). The kernel takes int8
    weights with zero point 0, so b is taken as b' = b - c (c = 128 for uint8, 0 for int8: b' is int8), packed in
    the loop's step, and Σ_k (a - a_zero)·(b - b_zero) = Σ_k (a - a_zero)·b' + (c - b_zero)·Σ_k (a - a_zero), the
    last a sum per row of a: the same int32 sums as the loops', requantized as they are (_requantize, with
    onnxruntime's output scale a_scale · b_scale / y_scale in f32)."""
    from ...prims.control import PRIMS_LOOP, wrap
    a, bm = n.x(0), n.x(3)
    xd, bd, yd = n.dtype(0), n.dtype(3), n.dtype(7)
    known = [n.known(i) for i in (1, 2, 4, 5, 6, 7)]
    shapes = a.type.shape + bm.type.shape
    if xd not in RANGES or bd not in RANGES or yd not in RANGES or any(k is None for k in known) or \
            any(_scalar(k) is None for k in known) or a.type.rank < 3 or bm.type.rank != a.type.rank or \
            a.type.shape[:-2] != bm.type.shape[:-2] or not all(isinstance(d, int) for d in shapes) or \
            n.known(3) is not None:
        return None
    lead, (m, k), cols = a.type.shape[:-2], a.type.shape[-2:], bm.type.shape[-1]
    count = int(np.prod(lead))
    b = n.b
    a_s, a_zero, b_s, b_zero, y_s, y_zero = (_scalar(v) for v in known)
    ratio = (np.float32(a_s) * np.float32(b_s)) / np.float32(y_s)  # (ComputeOutputScale's, in f32)
    shift = 128 if bd == "u8" else 0
    b_signed = b.convert(b.sub(b.convert(bm, dtype="i32"), Lit(shift, Type("i32"))), dtype="i8")
    xs = [b.reshape(a, shape=(count, m, k)), b.reshape(b_signed, shape=(count, k, cols))]
    if shift != int(b_zero):  # (c - b_zero) · Σ_k (a - a_zero), per row of a
        centred = b.sub(b.convert(a, dtype="i32"), Lit(int(a_zero), Type("i32")))
        rows = b.mul(red.sum(b, centred, axes=[a.type.rank - 1], keepdim=True), Lit(shift - int(b_zero), Type("i32")))
        xs.append(b.reshape(rows, shape=(count, m, 1)))

    def step(bb, ps):
        acc = bb.qmatmul(ps[1], ps[2], bb.constant(value=Dense.of(np.zeros(cols, np.int32))),
                         bb.constant(value=Dense.of(np.ones(1, np.float32))), x_zero=int(a_zero), y_zero=0, lo=0,
                         hi=0, out="i32")
        if len(ps) > 3:
            acc = bb.add(acc, ps[3])
        y = _requantize(n, acc, Lit(float(ratio), Type("f32")), Lit(1.0, Type("f32")),
                        Lit(int(y_zero), Type(yd)), yd, bb)
        return [y.atom]

    body = wrap("activation_product", [Type("i64")] + [Type(x.type.dtype, x.type.shape[1:]) for x in xs], step)
    (y,) = b.bind(PRIMS_LOOP, [Lit(count, Type("i64")), *xs], dict(body=body, n_consts=0, n_carry=0, length=count,
                                                                    reverse=False))
    return Val(b.reshape(y, shape=tuple(lead) + (m, cols)), None, yd)


# ---- the integer kernels (prims/qlinear.py): 8-bit activations, int8 weights with zero point 0, known scales ---------

RANGES = {"u8": (0, 255), "i8": (-128, 127)}


def _bounds(n: Node, out: str) -> tuple[int, int]:
    """The output's saturation bounds: its type's range, narrowed by a Relu or Clip that qdq.py folded into the node
    (its private attributes ksbuild_lo, ksbuild_hi)."""
    lo, hi = RANGES[out]
    return max(lo, n.attr("ksbuild_lo", lo)), min(hi, n.attr("ksbuild_hi", hi))


def _scalar(arr) -> int | float | None:
    return None if arr is None or np.asarray(arr).size != 1 else np.asarray(arr).reshape(-1)[0]


def integer_kernel_params(n: Node, x: int, w: int, y: int, bias: int | None, channels) -> dict | None:
    """The bias, scale and zero points of an integer kernel for node n's inputs (x at x, x_scale, x_zero, w at w,
    ...), or None when the node is outside what the kernels take (then it runs as int32 IR)."""
    xd, wd, yd = n.dtype(x), n.dtype(w), n.dtype(y + 1)
    known = [n.known(i) for i in (x + 1, x + 2, w + 1, w + 2, y, y + 1)]
    if xd not in RANGES or wd != "i8" or yd not in RANGES or any(k is None for k in known) or \
            not isinstance(channels, int):
        return None
    x_s, x_zp, w_s, w_zp, y_s, y_zp = (np.asarray(k) for k in known)
    if np.any(w_zp != 0) or any(_scalar(v) is None for v in (x_s, x_zp, y_s, y_zp)) or \
            w_s.size not in (1, channels):
        return None
    b = n.known(bias) if bias is not None and n.has(bias) else np.zeros(channels, np.int32)
    if b is None or b.size != channels:
        return None
    # onnxruntime's output scale: x_scale · w_scale / y_scale in float (qlinearconv.cc, ComputeOutputScale)
    scale = (np.float32(_scalar(x_s)) * w_s.astype(np.float32).reshape(-1)) / np.float32(_scalar(y_s))
    lo, hi = _bounds(n, yd)
    return dict(bias=n.b.constant(value=Dense.of(b.astype(np.int32).reshape(-1))),
                scale=n.b.constant(value=Dense.of(scale.astype(np.float32))),
                params=dict(x_zero=int(_scalar(x_zp)), y_zero=int(_scalar(y_zp)), lo=lo, hi=hi, out=yd))


def _integer_conv(n: Node, strides, pads, dilations):
    x, w = n.x(0), n.x(3)
    if not 3 <= x.type.rank <= 5:
        return None
    k = integer_kernel_params(n, 0, 3, 6, 8, w.type.shape[0])
    if k is None:
        return None
    y = n.b.qconv(x, w, k["bias"], k["scale"], strides=tuple(strides), pads=tuple(pads), dilations=tuple(dilations),
                  groups=n.attr("group", 1), **k["params"])
    return [Val(y, None, k["params"]["out"])]


@handler("QLinearConv")
def qlinear_conv(n: Node):
    kernel = _kernel(n, n.x(3))
    strides, pads, dilations = _window_attrs(n, n.x(0), kernel)
    fast = _integer_conv(n, strides, pads, dilations)
    if fast is not None:
        return fast
    x = q.integer_operand(n.b, n.x(0), n.x(2))
    w = q.integer_operand(n.b, n.x(3), n.x(5), 0)
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
