"""ONNX neural-network ops: Conv, ConvTranspose, pooling, normalizations."""
from __future__ import annotations

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import nn
from ...ops import reduce as red
from ...ops._util import scalar_lit
from .graph import handler
from .node import Node

AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _window_attrs(n: Node, x, kernel) -> tuple[list[int], list[int], list[int]]:
    """(strides, pads, dilations) with auto_pad resolved."""
    k = len(kernel)
    strides = n.attr("strides", None) or [1] * k
    dilations = n.attr("dilations", None) or [1] * k
    pads = n.attr("pads", None) or [0] * (2 * k)
    auto = n.attr_in("auto_pad", AUTO_PAD, "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = nn.same_pads(n.b, x.type.shape[2:], kernel, strides, dilations, auto == "SAME_UPPER")
    elif auto == "VALID":
        pads = [0] * (2 * k)
    return list(strides), list(pads), list(dilations)


def _kernel(n: Node, w) -> list[int]:
    kernel = list(w.type.shape[2:])
    given = n.attr("kernel_shape", None)
    if given is not None and list(given) != kernel:
        raise n.error(f"{n.op}: kernel_shape {given} does not match the weights {w.type}")
    if not all(isinstance(d, int) for d in kernel):
        raise n.error(f"{n.op}: the kernel size must be static, got {w.type}")
    return kernel


@handler("Conv")
def conv(n: Node):
    x, w = n.x(0), n.x(1)
    kernel = _kernel(n, w)
    strides, pads, dilations = _window_attrs(n, x, kernel)
    return [nn.conv(n.b, x, w, n.opt(2), strides, pads, dilations, n.attr("group", 1))]


@handler("ConvTranspose")
def conv_transpose(n: Node):
    x, w = n.x(0), n.x(1)
    kernel = _kernel(n, w)
    k = len(kernel)
    strides = n.attr("strides", None) or [1] * k
    dilations = n.attr("dilations", None) or [1] * k
    extra = n.attr("output_padding", None) or [0] * k
    pads = n.attr("pads", None)
    out_shape = n.attr("output_shape", None)
    auto = n.attr_in("auto_pad", AUTO_PAD, "NOTSET")
    groups = n.attr("group", 1)
    sizes = x.type.shape[2:]
    if out_shape is not None or (auto in ("SAME_UPPER", "SAME_LOWER") and pads is None):
        target = list(out_shape[-k:]) if out_shape is not None else [s * st for s, st in zip(sizes, strides)]
        lo, hi = [], []
        for s, st, kk, d, e, t in zip(sizes, strides, kernel, dilations, extra, target):
            if not isinstance(s, int):
                raise n.error("ConvTranspose with output_shape or SAME padding needs static sizes")
            total = st * (s - 1) + e + (kk - 1) * d + 1 - t
            small, big = total // 2, total - total // 2
            lo.append(small if auto == "SAME_UPPER" else big)
            hi.append(big if auto == "SAME_UPPER" else small)
        pads = lo + hi
    pads = pads or [0] * (2 * k)
    return [nn.conv_transpose(n.b, x, w, n.opt(2), strides, pads, dilations, groups, extra)]


def _pool_kernel(n: Node) -> list[int]:
    return list(n.attr("kernel_shape"))


@handler("MaxPool")
def max_pool(n: Node):
    x = n.x(0)
    kernel = _pool_kernel(n)
    strides, pads, dilations = _window_attrs(n, x, kernel)
    ceil = bool(n.attr("ceil_mode", 0))
    column_major = bool(n.attr_in("storage_order", (0, 1), 0))
    y = nn.max_pool(n.b, x, kernel, strides, pads, dilations, ceil)
    if not n.out_used(1):
        return [y]
    return [y, nn.max_pool_indices(n.b, x, kernel, strides, pads, dilations, ceil, column_major)]


@handler("AveragePool")
def avg_pool(n: Node):
    x = n.x(0)
    kernel = _pool_kernel(n)
    strides, pads, dilations = _window_attrs(n, x, kernel)
    ceil = bool(n.attr("ceil_mode", 0))
    include = bool(n.attr("count_include_pad", 0))
    return [nn.avg_pool(n.b, x, kernel, strides, pads, dilations, ceil, include)]


@handler("LpPool")
def lp_pool(n: Node):
    x = n.x(0)
    kernel = _pool_kernel(n)
    strides, pads, dilations = _window_attrs(n, x, kernel)
    return [nn.lp_pool(n.b, x, kernel, n.attr("p", 2), strides, pads, dilations, bool(n.attr("ceil_mode", 0)))]


@handler("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(n: Node):
    x = n.x(0)
    axes = list(range(2, x.type.rank))
    if n.op == "GlobalAveragePool":
        return [red.mean(n.b, x, axes, True)]
    if n.op == "GlobalMaxPool":
        return [red.amax(n.b, x, axes, True)]
    p = n.attr("p", 2)
    s = red.sum(n.b, n.b.ipow(n.b.abs(x), n=p), axes, True)
    return [n.b.pow(s, scalar_lit(1.0 / p, x.type.dtype))]


@handler("BatchNormalization")
def batch_norm(n: Node):
    x, scale, bias, mean, var = (n.x(i) for i in range(5))
    eps = n.attr("epsilon", 1e-5)
    momentum = n.attr("momentum", 0.9)
    if n.opset < 9:
        n.attr_in("spatial", (1,), 1)
    if n.opset < 7:
        n.attr("is_test", 0)
    training = bool(n.attr("training_mode", 0)) if n.opset >= 14 else False
    if not training:
        return [nn.batch_norm(n.b, x, scale, bias, mean, var, eps)]
    axes = [0] + list(range(2, x.type.rank))
    mu = red.mean(n.b, x, axes)
    centered = n.b.sub(x, nn.channel(n.b, mu, x.type.rank))
    batch_var = red.mean(n.b, n.b.ipow(centered, n=2), axes)
    y = nn.batch_norm(n.b, x, scale, bias, mu, batch_var, eps)
    m = scalar_lit(momentum, x.type.dtype)
    rest = scalar_lit(1 - momentum, x.type.dtype)
    running_mean = n.b.add(n.b.mul(mean, m), n.b.mul(mu, rest))
    running_var = n.b.add(n.b.mul(var, m), n.b.mul(batch_var, rest))
    return [y, running_mean, running_var]


@handler("InstanceNormalization")
def instance_norm(n: Node):
    return [nn.instance_norm(n.b, n.x(0), n.x(1), n.x(2), n.attr("epsilon", 1e-5))]


@handler("LayerNormalization")
def layer_norm(n: Node):
    x = n.x(0)
    axis = n.attr("axis", -1)
    axis = axis + x.type.rank if axis < 0 else axis
    n.attr("stash_type", 1)
    y, mu, inv = nn.layer_norm(n.b, x, n.x(1), n.opt(2), axis, n.attr("epsilon", 1e-5))
    return [y, mu, inv]


@handler("GroupNormalization")
def group_norm(n: Node):
    x, scale, bias = n.x(0), n.x(1), n.x(2)
    groups = n.attr("num_groups")
    n.attr("stash_type", 1)
    c = x.type.shape[1]
    if scale.type.shape[0] != c:  # opset 18: one scale per group
        per = c // groups
        scale = n.b.reshape(n.b.broadcast_to(n.b.reshape(scale, shape=(groups, 1)), shape=(groups, per)), shape=(c,))
        bias = n.b.reshape(n.b.broadcast_to(n.b.reshape(bias, shape=(groups, 1)), shape=(groups, per)), shape=(c,))
    return [nn.group_norm(n.b, x, scale, bias, groups, n.attr("epsilon", 1e-5))]


@handler("LRN")
def lrn(n: Node):
    return [nn.lrn(n.b, n.x(0), n.attr("size"), n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0))]


@handler("RMSNormalization")
def rms_norm(n: Node):
    x = n.x(0)
    axis = n.attr("axis", -1)
    n.attr("stash_type", 1)
    return [nn.rms_norm(n.b, x, n.x(1), axis + x.type.rank if axis < 0 else axis, n.attr("epsilon", 1e-5))]


@handler("LpNormalization")
def lp_normalization(n: Node):
    x = n.x(0)
    axis, p = n.attr("axis", -1), n.attr("p", 2)
    if p not in (1, 2):
        raise n.error(f"LpNormalization: p must be 1 or 2, got {p}")
    a = [axis + x.type.rank if axis < 0 else axis]
    norm = red.sum(n.b, n.b.abs(x), a, True) if p == 1 else n.b.sqrt(red.sum(n.b, n.b.ipow(x, n=2), a, True))
    zero = scalar_lit(0, x.type.dtype)
    return [n.b.select(n.b.eq(norm, zero), Lit(0.0, Type(x.type.dtype)), n.b.div(x, norm))]


@handler("Col2Im")
def col2im(n: Node):
    image, block = n.ints(1, "image_shape"), n.ints(2, "block_shape")
    return [nn.col2im(n.b, n.x(0), image, block, n.attr("strides", None), n.attr("pads", None),
                      n.attr("dilations", None))]


@handler("CenterCropPad")
def center_crop_pad(n: Node):
    x = n.x(0)
    target = n.ints(1, "shape")
    r = x.type.rank
    axes = [a + r if a < 0 else a for a in (n.attr("axes", None) or range(r))]
    for a, t in zip(axes, target):
        size = x.type.shape[a]
        if not isinstance(size, int):
            raise n.error("CenterCropPad needs static sizes")
        if t < size:
            lo = (size - t) // 2
            x = n.b.slice(x, axis=a, start=lo, stop=lo + t)
        elif t > size:
            lo = (t - size) // 2
            x = nn.pad_axis(n.b, x, a, lo, t - size - lo)
    return [x]
