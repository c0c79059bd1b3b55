"""Core ATen matrix products and neural-network layers: convolution, pooling, normalization
(inference), recurrent layers."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import aten, nn
from ...ops import linalg as la
from ...ops.create import array
from .node import Node, handler

# ---- matrix products ------------------------------------------------------------------------------------


@handler("mm.default", "bmm.default", "matmul.default", "dot.default", "mv.default")
def mm(n: Node):
    dtype = n.dtype
    x, y = n.operand(n.x(), dtype), n.operand(n.x("mat2" if "mat2" in n._named else "other" if "other" in n._named
                                                  else "vec" if "vec" in n._named else "tensor"), dtype)
    return la.matmul(n.b, x, y)


@handler("addmm.default", "baddbmm.default", "addmv.default")
def addmm(n: Node):
    """beta·self + alpha·(mat1 @ mat2)."""
    dtype = n.dtype
    names = ("mat1", "mat2") if "mat1" in n._named else ("batch1", "batch2") if "batch1" in n._named else ("mat", "vec")
    prod = la.matmul(n.b, n.operand(n.x(names[0]), dtype), n.operand(n.x(names[1]), dtype))
    alpha, beta = n.a("alpha", 1), n.a("beta", 1)
    if alpha != 1:
        prod = n.b.mul(prod, n.operand(alpha, dtype))
    if beta == 0:
        return prod
    bias = n.operand(n.x(), dtype)
    return n.b.add(n.b.mul(bias, n.operand(beta, dtype)) if beta != 1 else bias, prod)


# ---- convolution and pooling ----------------------------------------------------------------------------

def _per_axis(values, k: int) -> list[int]:
    """torch's int-or-list arguments (a single entry applies to every spatial axis)."""
    vals = [values] if isinstance(values, int) else list(values)
    return vals * k if len(vals) == 1 else vals


@handler("convolution.default", "conv2d.default", "conv1d.default", "conv3d.default")
def convolution(n: Node):
    return _convolve(n, n.x("weight"), n.a("bias", None))


def _convolve(n: Node, w, bias):
    """The convolution node n with these weights and bias."""
    x = n.x("input")
    k = x.type.rank - 2
    strides, dilations = _per_axis(n.a("stride", 1), k), _per_axis(n.a("dilation", 1), k)
    padding = n.a("padding", 0)
    if isinstance(padding, str):
        raise n.unsupported(f"padding='{padding}'")
    pads = _per_axis(padding, k)
    groups = n.a("groups", 1)
    if n.a("transposed", False):
        extra = _per_axis(n.a("output_padding", 0), k)
        return nn.conv_transpose(n.b, x, w, bias, strides, pads + pads, dilations, groups, extra)
    return nn.conv(n.b, x, w, bias, strides, pads + pads, dilations, groups)


def _folded_convolution(n: Node):
    """A batch norm whose input is a convolution only it reads, both with embedded weights: that convolution
    with the batch norm folded into its weights and bias (torch's fuse_conv_bn_weights: W·s and
    (b - mean)·s + beta per output channel, s = gamma / √(var + eps)), as torch.onnx.export folds them in eval
    mode, so that the network has the same IR from both frontends; None otherwise. The original convolution is
    left unread (dead code)."""
    conv = n.node.args[0]
    if getattr(conv, "op", None) != "call_function" or len(conv.users) != 1 \
            or n.imp.target_name(conv) != "aten.convolution.default":
        return None
    c = Node(n.imp, conv, n.imp.node_loc(conv))
    if c.a("transposed", False):
        return None
    given = [(c, "weight"), (c, "bias"), (n, "running_mean"), (n, "running_var"), (n, "weight"), (n, "bias")]
    values = [_embedded(m, name) for m, name in given]
    if any(v is _NOT_EMBEDDED for v in values) or values[0] is None or values[0].dtype.kind != "f":
        return None
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_weights
    w, bias, mean, var, gamma, beta = [None if v is None else torch.from_numpy(np.array(v, copy=True))
                                       for v in values]
    w2, b2 = fuse_conv_bn_weights(w, bias, mean, var, float(n.a("eps")), gamma, beta)
    n.b.loc = c.loc
    out = _convolve(c, array(n.b, w2.detach().numpy()), array(n.b, b2.detach().numpy()))
    n.b.loc = n.loc
    return out


_NOT_EMBEDDED = object()


def _embedded(n: Node, name: str):
    """The numpy value of an optional tensor argument: None when it is None, _NOT_EMBEDDED when it is an input,
    a computed value or an external weight."""
    v = n.a(name, None)
    if v is None:
        return None
    value = n.array(v)
    return _NOT_EMBEDDED if value is None else value


def _pool_args(n: Node, k: int):
    kernel = _per_axis(n.a("kernel_size"), k)
    stride = n.a("stride", [])
    strides = kernel if stride in ([], None) else _per_axis(stride, k)
    pads = _per_axis(n.a("padding", 0), k)
    return kernel, strides, pads + pads


@handler("max_pool2d_with_indices.default", "max_pool3d_with_indices.default", "max_pool1d.default",
         "max_pool2d.default", "max_pool3d.default")
def max_pool(n: Node):
    """The maximum over each window (its indices are not supported)."""
    x = n.x()
    k = x.type.rank - 2
    kernel, strides, pads = _pool_args(n, k)
    y = nn.max_pool(n.b, x, kernel, strides, pads, _per_axis(n.a("dilation", 1), k), bool(n.a("ceil_mode", False)))
    return (y, None) if "with_indices" in n.op else y


@handler("avg_pool1d.default", "avg_pool2d.default", "avg_pool3d.default")
def avg_pool(n: Node):
    x = n.x()
    k = x.type.rank - 2
    kernel, strides, pads = _pool_args(n, k)
    ceil = bool(n.a("ceil_mode", False))
    include = bool(n.a("count_include_pad", True))
    divisor = n.a("divisor_override", None)
    if divisor is None:
        return nn.avg_pool(n.b, x, kernel, strides, pads, None, ceil, include)
    if ceil:
        raise n.unsupported("divisor_override with ceil_mode")
    mean = nn.avg_pool(n.b, x, kernel, strides, pads, None, False, True)
    size = 1
    for s in kernel:
        size *= s
    return n.b.mul(mean, n.operand(size / divisor, x.type.dtype))


@handler("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default", "adaptive_avg_pool1d.default",
         "adaptive_avg_pool2d.default")
def adaptive_avg_pool(n: Node):
    return aten.adaptive_avg_pool(n.b, n.x(), list(n.a("output_size")))


@handler("adaptive_max_pool2d.default", "adaptive_max_pool1d.default", "adaptive_max_pool3d.default")
def adaptive_max_pool(n: Node):
    """Adaptive max pooling whose windows tile the input evenly (a plain max pool)."""
    x, sizes = n.x(), list(n.a("output_size"))
    spatial = x.type.shape[x.type.rank - len(sizes):]
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, sizes)):
        raise n.unsupported(f"adaptive max pooling of {list(spatial)} to {sizes} (uneven windows)")
    kernel = [s // o for s, o in zip(spatial, sizes)]
    return nn.max_pool(n.b, x, kernel, kernel, None, None, False), None


# ---- normalization --------------------------------------------------------------------------------------

def _or_const(n: Node, name: str, c: int, value: float):
    v = n.a(name, None)
    return v if v is not None else Lit(float(value), Type(n.dtype, (c,)))


@handler("_native_batch_norm_legit_no_training.default")
def batch_norm(n: Node):
    """Inference batch normalization with the running statistics."""
    folded = _folded_convolution(n)
    if folded is not None:
        return folded, None, None
    x = n.x("input")
    c = x.type.shape[1]
    y = nn.batch_norm(n.b, x, _or_const(n, "weight", c, 1), _or_const(n, "bias", c, 0), n.x("running_mean"),
                      n.x("running_var"), float(n.a("eps")))
    return y, None, None


@handler("_native_batch_norm_legit.no_stats", "_native_batch_norm_legit.default")
def batch_norm_batch_stats(n: Node):
    """Normalization with the statistics of the batch (instance norm, batch norm without running
    statistics): over every axis but the channels, then the per-channel affine."""
    if n.a("running_mean", None) is not None:
        raise n.unsupported("batch normalization that updates its running statistics (training mode)",
                            hint="make() should return the module in eval mode (ksbuild calls .eval())")
    x = n.x("input")
    c, r = x.type.shape[1], x.type.rank
    y, _, _ = nn.normalize(n.b, x, (0,) + tuple(range(2, r)), float(n.a("eps")))
    y = n.b.mul(y, nn.channel(n.b, _or_const(n, "weight", c, 1), r))
    return n.b.add(y, nn.channel(n.b, _or_const(n, "bias", c, 0), r)), None, None


@handler("_native_batch_norm_legit_functional.default", "native_batch_norm.default")
def batch_norm_training(n: Node):
    raise n.unsupported("batch normalization in training mode",
                        hint="make() should return the module in eval mode (ksbuild calls .eval())")


@handler("native_layer_norm.default")
def layer_norm(n: Node):
    """(y, mean, 1/std) over the trailing normalized_shape axes."""
    x = n.x("input")
    axis = x.type.rank - len(n.a("normalized_shape"))
    y, mu, inv = nn.layer_norm(n.b, x, n.a("weight", None), n.a("bias", None), axis, float(n.a("eps")))
    return y, mu, inv


@handler("native_group_norm.default")
def group_norm(n: Node):
    x = n.x("input")
    c = x.type.shape[1]
    y = nn.group_norm(n.b, x, _or_const(n, "weight", c, 1), _or_const(n, "bias", c, 0), int(n.a("group")),
                      float(n.a("eps")))
    return y, None, None


# ---- attention ------------------------------------------------------------------------------------------

@handler("scaled_dot_product_attention.default")
def scaled_dot_product_attention(n: Node):
    """softmax(q kᵀ · scale + mask) v (kept whole: capture.KEEP_WHOLE)."""
    if n.a("dropout_p", 0.0):
        raise n.unsupported("dropout_p > 0 (random numbers)", hint="export the module in eval mode")
    dtype = n.dtype
    q, k, v = (n.operand(n.x(name), dtype) for name in ("query", "key", "value"))
    mask = n.a("attn_mask", None)
    if mask is not None and mask.type.dtype != "bool":
        mask = n.operand(mask, dtype)
    scale = n.a("scale", None)
    return nn.attention(n.b, q, k, v, mask, bool(n.a("is_causal", False)),
                        None if scale is None else float(scale), bool(n.a("enable_gqa", False)))


# ---- recurrent layers -----------------------------------------------------------------------------------

@handler("gru.input", "lstm.input", "rnn_tanh.input", "rnn_relu.input")
def recurrent(n: Node):
    """torch.nn.RNN / GRU / LSTM: one IR loop per layer and direction (ops/rnn.py)."""
    if n.a("train") and n.a("dropout"):
        raise n.unsupported("dropout between recurrent layers in training mode")
    kind = n.op.split(".")[1]
    hx = n.a("hx")
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    params = list(n.a("params"))
    known = [n.array(p) for p in params]
    outs = aten.recurrent(n.b, kind, n.x("input"), hx, params, bool(n.a("has_biases")), int(n.a("num_layers")),
                          bool(n.a("bidirectional")), bool(n.a("batch_first")),
                          known if all(k is not None for k in known) else None)
    return tuple(outs)


# ---- resizing -------------------------------------------------------------------------------------------

UPSAMPLE = {"upsample_nearest1d": "nearest", "upsample_nearest2d": "nearest", "upsample_nearest3d": "nearest",
            "_upsample_nearest_exact1d": "nearest-exact", "_upsample_nearest_exact2d": "nearest-exact",
            "_upsample_nearest_exact3d": "nearest-exact", "upsample_linear1d": "linear",
            "upsample_bilinear2d": "bilinear", "upsample_trilinear3d": "trilinear", "upsample_bicubic2d": "bicubic"}
"""aten's upsample ops by torch's interpolate mode (ops/resize.py: torch_interpolate)."""


@handler(*[f"{op}.vec" for op in UPSAMPLE])
def upsample(n: Node):
    from ...ops import resize
    x = n.x("input")
    k = x.type.rank - 2
    out = n.out_type.shape[2:2 + k]
    if not all(isinstance(d, int) for d in out + x.type.shape[2:]):
        raise n.unsupported("resizing a symbolic spatial axis")
    return resize.torch_interpolate(n.b, x, list(out), n.a("scale_factors", None), UPSAMPLE[n.op.split(".")[1]],
                                    bool(n.a("align_corners", False)))


GRID_MODES = ("linear", "nearest", "cubic")  # grid_sampler's interpolation_mode 0, 1, 2 (bicubic: a = -0.75, as ONNX's)
GRID_PADDINGS = ("zeros", "border", "reflection")  # its padding_mode 0, 1, 2


@handler("grid_sampler_2d.default", "grid_sampler_3d.default", "grid_sampler.default")
def grid_sampler(n: Node):
    """F.grid_sample: input sampled at grid's normalized points (ONNX GridSample's computation)."""
    from ...ops import resize
    mode, padding = n.a("interpolation_mode"), n.a("padding_mode")
    if mode not in range(len(GRID_MODES)) or padding not in range(len(GRID_PADDINGS)):
        raise n.unsupported(f"grid_sample with interpolation_mode={mode}, padding_mode={padding}")
    if mode == 2 and n.x("input").type.rank != 4:
        raise n.unsupported("bicubic grid_sample of a volume")
    return resize.grid_sample(n.b, n.x("input"), n.x("grid"), GRID_MODES[mode], GRID_PADDINGS[padding],
                              bool(n.a("align_corners")))
