"""onnxruntime's quantized operators (domain com.microsoft), which its quantizer writes in the QOperator format:
QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, and the dynamic products DynamicQuantizeMatMul and MatMulIntegerToFloat (which
onnxruntime's optimizer writes into an optimized model for DynamicQuantizeLinear → MatMulInteger → Cast → Mul).

QGemm is an integer product (prims/qlinear.py's qmatmul when its operands allow, else int32 IR); the others are
what onnxruntime's contrib op schemas define: the inputs dequantized, the float operation, the result quantized.
QLinearMul computes as onnxruntime's MLAS kernel does (an int32 product times one f32 scale ratio), so its results are
onnxruntime's. onnxruntime computes others its own way (QLinearAdd with precomputed scale ratios, the unary ones
through a 256-entry table built with its own logistic): results agree within one quantization step
(docs/quantization.md).
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type, numel
from ...ops import activations, linalg, nn
from ...ops import quant as q
from ...ops import reduce as red
from ...ops.shape import concatenate
from .graph import handler
from .node import Node
from .ops_nn import _pool_kernel, _window_attrs
from .ops_quant import _requantize, dynamic_quantize, integer_kernel_params, integer_sums
from .values import Val, compute_dtype

MS = "com.microsoft"
"""The domain of onnxruntime's contrib operators."""


def _dequant(n: Node, x: int, scale: int, zero: int):
    """Input x dequantized with the scale and zero point at those inputs (per tensor), as f32."""
    s = n.x(scale)
    s = n.b.reshape(s, shape=()) if s.type.rank else s
    z = n.opt(zero) if zero is not None else None
    if z is not None and z.type.rank:
        z = n.b.reshape(z, shape=())
    return q.dequantize(n.b, n.x(x), s if s.type.dtype == "f32" else n.b.convert(s, dtype="f32"), z)


def _quant(n: Node, y, scale: int, zero: int) -> Val:
    """A float result quantized with the scale and zero point at those inputs (the zero point's type)."""
    s = n.x(scale)
    s = n.b.reshape(s, shape=()) if s.type.rank else s
    z = n.opt(zero)
    to = n.dtype(zero) if z is not None else "u8"
    if z is not None and z.type.rank:
        z = n.b.reshape(z, shape=())
    return Val(q.quantize_int(n.b, y, s, z, to, compute_dtype(to)), None, to)


@handler("QGemm", domain=MS)
def qgemm(n: Node):
    a, bm = n.x(0), n.x(3)
    trans_a, trans_b, alpha = n.attr("transA", 0), n.attr("transB", 0), n.attr("alpha", 1.0)
    if trans_a:
        a = n.b.transpose(a, perm=(1, 0))
    if trans_b:
        bm = n.b.transpose(bm, perm=(1, 0))
    if alpha == 1.0 and n.has(8) and not trans_a:
        fast = _qgemm_kernel(n, a, bm)
        if fast is not None:
            return [fast]
    acc = linalg.matmul(n.b, q.integer_operand(n.b, a, n.x(2)), q.integer_operand(n.b, bm, n.x(5), 1))
    if n.has(6):
        acc = n.b.add(acc, n.x(6))
    s_b = n.x(4)
    s_b = n.b.reshape(s_b, shape=()) if s_b.type.rank and s_b.type.shape[0] == 1 else s_b
    s_a = n.b.reshape(n.x(1), shape=()) if n.x(1).type.rank else n.x(1)
    scale = n.b.mul(n.b.mul(Lit(float(alpha), Type("f32")), s_a), s_b)  # (onnxruntime: alpha · a_scale · b_scale)
    if not n.has(7):
        return [n.b.mul(n.b.convert(acc, dtype="f32"), scale)]
    y_s = n.b.reshape(n.x(7), shape=()) if n.x(7).type.rank else n.x(7)
    return [_requantize(n, acc, scale, y_s, n.b.reshape(n.x(8), shape=()) if n.x(8).type.rank else n.x(8),
                        n.dtype(8))]


def _qgemm_kernel(n: Node, a, bm):
    """QGemm on the integer kernel: B's zero point 0, a bias of one value per column (or none)."""
    channels = bm.type.shape[1]
    bias = n.known(6) if n.has(6) else None
    if n.has(6) and (bias is None or bias.size not in (1, channels) if isinstance(channels, int) else True):
        return None
    k = integer_kernel_params(n, 0, 3, 7, None, channels)
    if k is None:
        return None
    if bias is not None:
        from ...ir.dense import Dense
        k["bias"] = n.b.constant(value=Dense.of(np.broadcast_to(bias.reshape(-1), (channels,)).astype(np.int32)))
    return Val(n.b.qmatmul(a, bm, k["bias"], k["scale"], **k["params"]), None, k["params"]["out"])


@handler("QLinearAdd", domain=MS)
def qlinear_add(n: Node):
    """onnxruntime's arithmetic (ops/quant.py: add_quantized) when both tensors have one shape and the scales and
    zero points are constants; else the schema's definition (within one step of it)."""
    known = [n.known(i) if n.has(i) else np.zeros((), np.uint8) for i in (1, 2, 4, 5, 6, 7)]
    to = n.dtype(7) if n.has(7) else "u8"
    a, x = n.x(0), n.x(3)
    if a.type.shape == x.type.shape and to in ("u8", "i8") and n.dtype(0) == to and n.dtype(3) == to and \
            all(k is not None and k.size == 1 for k in known):
        a_s, a_z, x_s, x_z, y_s, y_z = (k.reshape(-1)[0] for k in known)
        if all(np.asarray(s).dtype == np.float32 for s in (a_s, x_s, y_s)):
            ratios = q.add_ratios(a_s, int(a_z), x_s, int(x_z), y_s, int(y_z))
            return [Val(q.add_quantized(n.b, a, x, *ratios, to, compute_dtype(to)), None, to)]
    return [_quant(n, n.b.add(_dequant(n, 0, 1, 2), _dequant(n, 3, 4, 5)), 6, 7)]


@handler("QLinearMul", domain=MS)
def qlinear_mul(n: Node):
    """onnxruntime's arithmetic (ops/quant.py: multiply_quantized), so that the results are its own."""
    scalars = [_scalar(n, i) for i in (1, 2, 4, 5, 6, 7)]
    to = n.dtype(7) if n.has(7) else "u8"
    if any(s is not None and s.type.dtype not in ("f32", "u8", "i8") for s in scalars):
        return [_quant(n, n.b.mul(_dequant(n, 0, 1, 2), _dequant(n, 3, 4, 5)), 6, 7)]
    a_s, a_z, x_s, x_z, y_s, y_z = scalars
    return [Val(q.multiply_quantized(n.b, n.x(0), a_s, a_z, n.x(3), x_s, x_z, y_s, y_z, to, compute_dtype(to)),
                None, to)]


def _scalar(n: Node, i: int):
    """The per-tensor scale or zero point at input i as a scalar (None when absent)."""
    v = n.opt(i)
    return n.b.reshape(v, shape=()) if v is not None and v.type.rank else v


@handler("QLinearConcat", domain=MS)
def qlinear_concat(n: Node):
    axis = n.attr("axis")
    parts = [_dequant(n, i, i + 1, i + 2) for i in range(2, n.n_in, 3)]
    if axis < 0:
        axis += parts[0].type.rank
    return [_quant(n, concatenate(n.b, parts, axis), 0, 1)]


@handler("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(n: Node):
    """onnxruntime's arithmetic (ops/quant.py: global_average_quantized: an int32 sum and one scale) when the scales
    and zero points are constants of the input's type; else the schema's definition."""
    first = 1 if n.attr("channels_last", 0) else 2
    rank = n.x(0).type.rank
    axes = [i for i in range(first, rank) if not (first == 1 and i == rank - 1)]
    known = [n.known(i) if n.has(i) else np.zeros((), np.uint8) for i in (1, 2, 3, 4)]
    to = n.dtype(4) if n.has(4) else n.dtype(0)
    count = 1
    for a in axes:
        count = count * n.x(0).type.shape[a] if isinstance(n.x(0).type.shape[a], int) else 0
    if to in ("u8", "i8") and n.dtype(0) == to and count and all(k is not None and k.size == 1 for k in known):
        x_s, x_z, y_s, y_z = (k.reshape(-1)[0] for k in known)
        if np.asarray(x_s).dtype == np.float32 and np.asarray(y_s).dtype == np.float32:
            scale = q.global_average_scale(x_s, y_s, count)
            return [Val(q.global_average_quantized(n.b, n.x(0), axes, scale, int(x_z), int(y_z), to,
                                                   compute_dtype(to)), None, to)]
    x = _dequant(n, 0, 1, 2)
    return [_quant(n, red.mean(n.b, x, axes, keepdim=True), 3, 4)]


@handler("QLinearAveragePool", domain=MS)
def qlinear_average_pool(n: Node):
    if n.attr("channels_last", 0):
        raise n.unsupported("QLinearAveragePool with channels_last = 1")
    x = _dequant(n, 0, 1, 2)
    kernel = _pool_kernel(n)
    strides, pads, dilations = _window_attrs(n, x, kernel)
    y = nn.avg_pool(n.b, x, kernel, strides, pads, dilations, bool(n.attr("ceil_mode", 0)),
                    bool(n.attr("count_include_pad", 0)))
    return [_quant(n, y, 3, 4)]


@handler("QLinearSigmoid", domain=MS)
def qlinear_sigmoid(n: Node):
    return [_quant(n, n.b.logistic(_dequant(n, 0, 1, 2)), 3, 4)]


@handler("QLinearLeakyRelu", domain=MS)
def qlinear_leaky_relu(n: Node):
    return [_quant(n, activations.leaky_relu(n.b, _dequant(n, 0, 1, 2), n.attr("alpha", 0.01)), 3, 4)]


@handler("QLinearSoftmax", domain=MS)
def qlinear_softmax(n: Node):
    """onnxruntime's arithmetic (ops/quant.py: softmax_quantized: its table of exponentials, floor(1 / y_scale)) for
    constant scales and zero points, along the last axis (opset >= 13: one axis); else the schema's definition
    (dequantize, softmax, quantize)."""
    x = n.x(0)
    rank = x.type.rank
    opset = n.attr("opset", 13)
    axis = n.attr("axis", -1 if opset >= 13 else 1)
    axis = axis + rank if axis < 0 else axis
    known = [n.known(i) if n.has(i) else np.zeros((), np.uint8) for i in (1, 3, 4)]
    to = n.dtype(4) if n.has(4) else n.dtype(0)
    length = x.type.shape[axis] if axis == rank - 1 else None
    if to in ("u8", "i8") and n.dtype(0) == to and isinstance(length, int) and \
            all(k is not None and k.size == 1 for k in known):
        x_s, y_s, y_z = (k.reshape(-1)[0] for k in known)
        from ...ir.dense import Dense
        table = n.b.constant(value=Dense.of(q.softmax_table(float(x_s), length)))
        return [Val(q.softmax_quantized(n.b, x, axis, table, float(y_s), int(y_z), to, compute_dtype(to)), None, to)]
    if opset < 13 and axis != rank - 1:
        raise n.unsupported("QLinearSoftmax of opset < 13 over more than the last axis")
    return [_quant(n, red.softmax(n.b, _dequant(n, 0, 1, 2), axis), 3, 4)]


@handler("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(n: Node):
    """Y = (DynamicQuantizeLinear(A) · B as int32) · (a_scale · b_scale) + bias (onnxruntime's contrib schema; inputs
    A, B, b_scale, b_zero_point, bias)."""
    a, a_scale, a_zero = dynamic_quantize(n.b, n.x(0))
    return [_integer_to_float(n, a, "u8", a_scale, a_zero, None, 1, 2, 3 if n.has(3) else None, 4)]


@handler("MatMulIntegerToFloat", domain=MS)
def matmul_integer_to_float(n: Node):
    """Y = (A - a_zero) · (B - b_zero) as int32 · (a_scale · b_scale) + bias (onnxruntime's contrib schema; inputs
    A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias)."""
    a_zero = n.opt(4)
    return [_integer_to_float(n, n.x(0), n.dtype(0), n.x(2), a_zero, n.known(4) if a_zero is not None else None, 1, 3,
                              5 if n.has(5) else None, 6)]


def _integer_to_float(n: Node, a, a_type: str, a_scale, a_zero, a_zero_value, w: int, w_scale: int, w_zero, bias: int):
    """The int32 product of 8-bit a and the weights at input w, times a_scale · (the scale at w_scale), plus the bias
    at input `bias` if given: on the integer kernel when it takes them (ops_quant.integer_sums), else int32 loops."""
    w_zero_value = n.known(w_zero) if w_zero is not None else np.zeros((), np.int8)
    acc = integer_sums(n.b, a, a_type, a_zero, a_zero_value, n.x(w), n.known(w), w_zero_value)
    if acc is None:
        axis = a.type.rank - 2 if a.type.rank >= 2 else None
        acc = linalg.matmul(n.b, q.integer_operand(n.b, a, a_zero, axis),
                            q.integer_operand(n.b, n.x(w), n.opt(w_zero) if w_zero is not None else None,
                                              n.x(w).type.rank - 1))
    s_a = n.b.reshape(a_scale, shape=()) if a_scale.type.rank else a_scale
    s_w = n.x(w_scale)
    s_w = n.b.reshape(s_w, shape=()) if s_w.type.rank and numel(s_w.type.shape) == 1 else s_w
    y = n.b.mul(n.b.convert(acc, dtype="f32"), n.b.mul(s_a, s_w))
    return n.b.add(y, n.x(bias)) if n.has(bias) else y
