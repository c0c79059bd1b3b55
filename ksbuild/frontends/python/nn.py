"""torch.nn.functional's layers (ops/nn.py): linear, dropout (at inference), the convolutions and their
transposes, the pools (also adaptive), the normalizations (layer_norm, group_norm, batch_norm, instance_norm,
rms_norm, normalize), pad, interpolate, scaled_dot_product_attention, cosine_similarity and pairwise_distance.
Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

import math

from ...ir.core import Atom
from ...ops import aten, linalg, nn, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .linalg import _norm
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _c, _float_kw, _two_floats, float_tensor, int_const, tensor


@torch_function("torch.nn.functional.linear")
def _linear(fc, b, args, kw, node):
    """F.linear(x, w, b=None) = x @ wᵀ + b."""
    x, w = _two_floats(fc, b, args[:2], node, "linear")
    y = linalg.matmul(b, x, shape_ops.swap_axes(b, w, -1, -2) if w.type.rank == 2 else w)
    bias = _arg(fc, args, kw, 2, "bias", node, None)
    return y if bias is None else b.add(*fc.unify(b, y, tensor(fc, b, bias, node), node))


@torch_function("torch.nn.functional.dropout")
def _dropout(fc, b, args, kw, node):
    """F.dropout(x, p, training=False) is x; random dropout while training is not supported."""
    training = _arg(fc, args, kw, 2, "training", node, Const(True))
    if not isinstance(training, Const) or training.value:
        raise fc.src.error(node, "F.dropout with training=True draws random numbers; kernels are deterministic",
                           hint="pass training=False (dropout is the identity at inference)")
    return tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)


@torch_function("torch.nn.functional.rms_norm")
def _rms_norm(fc, b, args, kw, node):
    """F.rms_norm(input, normalized_shape, weight=None, eps=None) over the last len(normalized_shape) axes
    (ops.nn.rms_norm); eps None is the dtype's machine epsilon (torch's)."""
    import numpy as np
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    shape = _arg(fc, args, kw, 1, "normalized_shape", node)
    count = len(shape) if isinstance(shape, (tuple, list)) else 1
    w = _arg(fc, args, kw, 2, "weight", node, None)
    eps = _arg(fc, args, kw, 3, "eps", node, None)
    eps = float(np.finfo(np.float32 if x.type.dtype == "f32" else np.float64).eps) if eps is None else \
        float(eps.value)
    return nn.rms_norm(b, x, _c(x, 1.0) if w is None else tensor(fc, b, w, node), x.type.rank - count, eps)


@torch_function("torch.nn.functional.batch_norm")
def _batch_norm(fc, b, args, kw, node):
    """F.batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum, eps):
    inference with the running statistics."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    mean, var = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node)
                 for i, n in ((1, "running_mean"), (2, "running_var")))
    training = _arg(fc, args, kw, 5, "training", node, Const(False))
    if not isinstance(training, Const) or training.value:
        raise fc.src.error(node, "F.batch_norm with training=True updates running statistics in place",
                           hint="pass training=False (inference), or normalize with the batch's mean and var")
    w, bias = channel_affine(fc, b, x, _arg(fc, args, kw, 3, "weight", node, None),
                             _arg(fc, args, kw, 4, "bias", node, None), node)
    return nn.batch_norm(b, x, w, bias, mean, var, _float_kw(fc, args, kw, 7, "eps", node, 1e-5))


@torch_function("torch.nn.functional.instance_norm")
def _instance_norm(fc, b, args, kw, node):
    """F.instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
    momentum, eps): each sample's channels normalized over their spatial axes."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    w, bias = channel_affine(fc, b, x, _arg(fc, args, kw, 3, "weight", node, None),
                             _arg(fc, args, kw, 4, "bias", node, None), node)
    return nn.instance_norm(b, x, w, bias, _float_kw(fc, args, kw, 7, "eps", node, 1e-5))


@torch_function("torch.nn.functional.pairwise_distance")
def _pairwise_distance(fc, b, args, kw, node):
    """F.pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=False): ‖x1 - x2 + eps‖_p along the last axis."""
    x, y = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node) for i, n in enumerate(("x1", "x2")))
    p = _float_kw(fc, args, kw, 2, "p", node, 2.0)
    eps = _float_kw(fc, args, kw, 3, "eps", node, 1e-6)
    keep = _arg(fc, args, kw, 4, "keepdim", node, Const(False))
    d = b.add(b.sub(*fc.unify(b, x, y, node)), _c(x, eps))
    return aten.vector_norm(b, d, p, (d.type.rank - 1,), bool(keep.value) if isinstance(keep, Const) else False)


def _adaptive_pool(k: int, kind: str):
    """F.adaptive_avg_poolNd / adaptive_max_poolNd(input, output_size) where each input size is a multiple of
    its output size (windows of in/out, strided by it: equal windows, as torch's then are); None keeps a size."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        out = _arg(fc, args, kw, 1, "output_size", node)
        out = list(out) if isinstance(out, (tuple, list)) else [out] * k
        if x.type.rank not in (k + 1, k + 2) or len(out) != k:
            raise fc.src.error(node, f"F.adaptive_{kind}_pool{k}d takes [N, C, *{k} sizes] and {k} output sizes, "
                                     f"got {x.type}")
        sizes = x.type.shape[-k:]
        outs = [n if o is None or (isinstance(o, Const) and o.value is None) else int_const(fc, o, node, "size")
                for n, o in zip(sizes, out)]
        if not all(isinstance(n, int) and n % o == 0 for n, o in zip(sizes, outs)):
            raise fc.src.error(node, f"F.adaptive_{kind}_pool{k}d of sizes {list(sizes)} to {outs}: each size must "
                                     "be a literal multiple of its output size",
                               hint="torch's uneven windows (overlapping by a varying amount) are not supported")
        lead = x.type.rank == k + 1
        if lead:
            x = b.reshape(x, shape=(1,) + x.type.shape)
        win = [n // o for n, o in zip(sizes, outs)]
        y = nn.max_pool(b, x, win, win) if kind == "max" else nn.avg_pool(b, x, win, win)
        return b.reshape(y, shape=y.type.shape[1:]) if lead else y
    return fn


@torch_function("torch.nn.functional.normalize")
def _normalize(fc, b, args, kw, node):
    """F.normalize(x, p=2, dim=1, eps=1e-12): x / max(‖x‖_p, eps) along dim."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    p = _float_kw(fc, args, kw, 1, "p", node, 2.0)
    axis = int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(1)), node, "dim")
    eps = _float_kw(fc, args, kw, 3, "eps", node, 1e-12)
    norm = _norm(fc, b, [x, Const(p), Const(axis), Const(True)], {}, node)
    return b.div(x, math_ops.clamp(b, norm, _c(x, eps)))  # (a NaN norm stays NaN, as torch's clamp_min)


@torch_function("torch.cosine_similarity", "torch.nn.functional.cosine_similarity")
def _cosine_similarity(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args[:2], node, "cosine_similarity")
    axis = int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(1)), node, "dim")
    eps = _float_kw(fc, args, kw, 3, "eps", node, 1e-8)
    # torch's: each vector divided by max(its norm, eps), then the dot product (a zero vector has a finite
    # gradient; a norm's derivative at 0 is 0, ops.math.norm_root)
    nx = math_ops.norm_root(b, reduce.sum(b, b.ipow(x, n=2), [axis], keepdim=True))
    ny = math_ops.norm_root(b, reduce.sum(b, b.ipow(y, n=2), [axis], keepdim=True))
    xn = b.div(x, math_ops.clamp(b, nx, _c(x, eps)))
    yn = b.div(y, math_ops.clamp(b, ny, _c(y, eps)))
    return reduce.sum(b, b.mul(xn, yn), [axis])


@torch_function("torch.nn.functional.layer_norm")
def _layer_norm(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    shape = _arg(fc, args, kw, 1, "normalized_shape", node)
    count = len(shape) if isinstance(shape, (tuple, list)) else 1
    w = _arg(fc, args, kw, 2, "weight", node, None)
    bias = _arg(fc, args, kw, 3, "bias", node, None)
    eps = _float_kw(fc, args, kw, 4, "eps", node, 1e-5)
    w = None if w is None else tensor(fc, b, w, node)
    bias = None if bias is None else tensor(fc, b, bias, node)
    return nn.layer_norm(b, x, w, bias, x.type.rank - count, eps)[0]


def _conv_operands(fc, b, args, kw, node, what: str, k: int):
    """(input, weight, bias or None) of a k-d convolution call, both of rank k + 2."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    w = float_tensor(fc, b, _arg(fc, args, kw, 1, "weight", node), node)
    bias = _arg(fc, args, kw, 2, "bias", node, None)
    bias = None if bias is None or (isinstance(bias, Const) and bias.value is None) else \
        float_tensor(fc, b, bias, node)
    if x.type.rank != k + 2 or w.type.rank != k + 2:
        raise fc.src.error(node, f"{what} takes an input and a weight of rank {k + 2}, got {x.type} and {w.type}")
    return x, w, bias


def _conv_transpose(k: int):
    """F.conv_transpose1d/2d/3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
    dilation=1): the weight is [C_in, C_out / groups, *kernel]."""
    def fn(fc, b, args, kw, node):
        x, w, bias = _conv_operands(fc, b, args, kw, node, f"F.conv_transpose{k}d", k)
        if not all(isinstance(d, int) for d in w.type.shape):
            raise fc.src.error(node, f"F.conv_transpose{k}d needs a weight of literal sizes, got {w.type}")
        strides = _ints(fc, _arg(fc, args, kw, 3, "stride", node, Const(1)), k, node, "stride")
        lo = _ints(fc, _arg(fc, args, kw, 4, "padding", node, Const(0)), k, node, "padding")
        extra = _ints(fc, _arg(fc, args, kw, 5, "output_padding", node, Const(0)), k, node, "output_padding")
        groups = int_const(fc, _arg(fc, args, kw, 6, "groups", node, Const(1)), node, "groups")
        dilations = _ints(fc, _arg(fc, args, kw, 7, "dilation", node, Const(1)), k, node, "dilation")
        return nn.conv_transpose(b, x, w, bias, strides, lo + lo, dilations, groups, extra)
    return fn


@torch_function("torch.nn.functional.interpolate")
def _interpolate(fc, b, args, kw, node):
    """F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None, antialias=False) over literal image sizes (ops.resize.torch_interpolate)."""
    from ...ops import resize
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    k = x.type.rank - 2
    size, factor = _arg(fc, args, kw, 1, "size", node, None), _arg(fc, args, kw, 2, "scale_factor", node, None)
    mode = _arg(fc, args, kw, 3, "mode", node, "nearest")
    corners = _arg(fc, args, kw, 4, "align_corners", node, None)
    recompute = _arg(fc, args, kw, 5, "recompute_scale_factor", node, None)
    antialias = _arg(fc, args, kw, 6, "antialias", node, Const(False))
    mode = mode.value if isinstance(mode, Const) else mode
    if k < 1 or mode not in resize.TORCH_MODES:
        raise fc.src.error(node, f"F.interpolate of {x.type} with mode {mode!r} is not supported",
                           hint=f"modes: {', '.join(resize.TORCH_MODES)} of [N, C, *spatial] inputs")
    if isinstance(antialias, Const) and antialias.value:
        raise fc.src.error(node, "F.interpolate with antialias=True is not supported")
    if (size is None) == (factor is None):
        raise fc.src.error(node, "F.interpolate takes one of size and scale_factor")
    if not all(isinstance(d, int) for d in x.type.shape[2:]):
        raise fc.src.error(node, f"F.interpolate needs literal image sizes, got {x.type}",
                           hint='annotate the input with literal sizes, e.g. "float[n, c, 16, 16]"')
    if size is not None:
        out = _ints(fc, size, k, node, "size")
        scales = None
    else:
        factors = [float(f.value) if isinstance(f, Const) else f for f in
                   (factor if isinstance(factor, (tuple, list)) else [factor] * k)]
        if not all(isinstance(f, float) for f in factors) or len(factors) != k:
            raise fc.src.error(node, "scale_factor must be a number or one literal per spatial axis")
        out = [int(math.floor(n * f)) for n, f in zip(x.type.shape[2:], factors)]
        scales = None if isinstance(recompute, Const) and recompute.value else factors
    corners = bool(corners.value) if isinstance(corners, Const) and corners.value is not None else False
    return resize.torch_interpolate(b, x, out, scales, mode, corners)


@torch_function("torch.nn.functional.scaled_dot_product_attention")
def _sdpa(fc, b, args, kw, node):
    """F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
    scale=None, enable_gqa=False): ops.nn.attention (a query that attends to nothing gets 0)."""
    q = float_tensor(fc, b, _arg(fc, args, kw, 0, "query", node), node)
    k = float_tensor(fc, b, _arg(fc, args, kw, 1, "key", node), node)
    v = float_tensor(fc, b, _arg(fc, args, kw, 2, "value", node), node)
    mask = _arg(fc, args, kw, 3, "attn_mask", node, None)
    if _float_kw(fc, args, kw, 4, "dropout_p", node, 0.0) != 0.0:
        raise fc.src.error(node, "scaled_dot_product_attention with dropout_p > 0 draws random numbers",
                           hint="pass dropout_p=0.0 (no dropout at inference)")
    causal = _arg(fc, args, kw, 5, "is_causal", node, Const(False))
    scale = _arg(fc, args, kw, 6, "scale", node, None)
    gqa = _arg(fc, args, kw, 7, "enable_gqa", node, Const(False))
    if not isinstance(causal, Const) or not isinstance(gqa, Const) or (scale is not None and
                                                                       not isinstance(scale, Const)):
        raise fc.src.error(node, "is_causal, scale and enable_gqa must be literals")
    if gqa.value:
        raise fc.src.error(node, "scaled_dot_product_attention with enable_gqa=True is not supported",
                           hint="repeat the key/value heads (k.repeat_interleave) before the call")
    if mask is not None:
        mask = tensor(fc, b, mask, node)
        if mask.type.dtype != "bool" and mask.type.dtype != q.type.dtype:
            mask = b.convert(mask, dtype=q.type.dtype)
    return nn.attention(b, q, k, v, mask, bool(causal.value), None if scale is None else float(scale.value))


def channel_affine(fc, b, x, w, bias, node):
    """A normalization's per-channel weight and bias (dim 1 of x): ones and zeros where not given."""
    c = x.type.shape[1]
    w = b.broadcast_to(_c(x, 1.0), shape=(c,)) if w is None else tensor(fc, b, w, node)
    bias = b.broadcast_to(_c(x, 0.0), shape=(c,)) if bias is None else tensor(fc, b, bias, node)
    return w, bias


@torch_function("torch.nn.functional.group_norm")
def _group_norm(fc, b, args, kw, node):
    """F.group_norm(input, num_groups, weight=None, bias=None, eps=1e-5)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    groups = int_const(fc, _arg(fc, args, kw, 1, "num_groups", node), node, "num_groups")
    w, bias = channel_affine(fc, b, x, _arg(fc, args, kw, 2, "weight", node, None),
                             _arg(fc, args, kw, 3, "bias", node, None), node)
    return nn.group_norm(b, x, w, bias, groups, _float_kw(fc, args, kw, 4, "eps", node, 1e-5))


@torch_function("torch.nn.functional.pad")
def _pad(fc, b, args, kw, node):
    """F.pad(x, (left, right, top, bottom, ...), mode='constant', value=0): last axis first; the modes
    reflect, replicate and circular too (pad_modes)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    pads = _arg(fc, args, kw, 1, "pad", node)
    mode = _arg(fc, args, kw, 2, "mode", node, Const("constant"))
    mode = mode.value if isinstance(mode, Const) else mode
    value = _float_kw(fc, args, kw, 3, "value", node, 0.0)
    if mode not in ("constant", "reflect", "replicate", "circular") or not isinstance(pads, (tuple, list)) \
            or len(pads) % 2:
        raise fc.src.error(node, "F.pad takes a tuple of (low, high) pairs and mode 'constant', 'reflect', "
                                 "'replicate' or 'circular'")
    sizes = [int_const(fc, p, node, "a pad") for p in pads]
    if mode != "constant":
        return pad_modes(fc, b, x, sizes, mode, node)
    for k in range(len(sizes) // 2):
        x = nn.pad_axis(b, x, x.type.rank - 1 - k, sizes[2 * k], sizes[2 * k + 1], value)
    return x


def pad_modes(fc, b, x: Atom, sizes: list[int], mode: str, node) -> Atom:
    """F.pad's reflect, replicate and circular modes: (low, high) pairs from the last axis back."""
    ops_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    for k in range(len(sizes) // 2):
        axis = x.type.rank - 1 - k
        lo, hi = sizes[2 * k], sizes[2 * k + 1]
        n = x.type.shape[axis]
        if lo < 0 or hi < 0:
            raise fc.src.error(node, f"F.pad mode '{mode}' with a negative pad")
        if mode == "reflect" and isinstance(n, int) and max(lo, hi) >= n:
            raise fc.src.error(node, f"F.pad mode 'reflect': a pad of {max(lo, hi)} on an axis of {n} (it must be "
                                     "smaller than the axis)")
        x = shape_ops.pad_mode(b, x, axis, lo, hi, ops_mode)
    return x


def _ints(fc, v, k: int, node, what: str) -> list[int]:
    """An int or a tuple of k ints (torch's stride=2 / stride=(2, 1))."""
    vs = list(v) if isinstance(v, (tuple, list)) else [v] * k
    if len(vs) != k:
        raise fc.src.error(node, f"{what} needs {k} values, got {len(vs)}")
    return [int_const(fc, x, node, what) for x in vs]


def _conv(k: int):
    """F.conv1d/2d/3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); padding may be
    'valid' or 'same' (stride 1; an odd total puts the extra zero at the end, as torch does)."""
    def fn(fc, b, args, kw, node):
        x, w, bias = _conv_operands(fc, b, args, kw, node, f"F.conv{k}d", k)
        if not all(isinstance(d, int) for d in w.type.shape[2:]):
            sizes = ", ".join(["3"] * k)
            raise fc.src.error(node, f"F.conv{k}d needs a weight whose kernel sizes are literals, got {w.type}",
                               hint=f'annotate the weight with literal sizes, e.g. "float[co, ci, {sizes}]"')
        strides = _ints(fc, _arg(fc, args, kw, 3, "stride", node, Const(1)), k, node, "stride")
        padding = _arg(fc, args, kw, 4, "padding", node, Const(0))
        dilations = _ints(fc, _arg(fc, args, kw, 5, "dilation", node, Const(1)), k, node, "dilation")
        groups = int_const(fc, _arg(fc, args, kw, 6, "groups", node, Const(1)), node, "groups")
        if padding in ("valid", "same"):
            sizes = w.type.shape[2:]
            if padding == "same" and (any(s != 1 for s in strides) or not all(isinstance(d, int) for d in sizes)):
                raise fc.src.error(node, "padding='same' needs stride 1 and literal kernel sizes")
            total = [d * (s - 1) if padding == "same" else 0 for d, s in zip(dilations, sizes)]
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            lo = _ints(fc, padding, k, node, "padding")
            pads = lo + lo
        return nn.conv(b, x, w, bias, strides, pads, dilations, groups)
    return fn


def _pool(k: int, kind: str):
    """F.max_poolNd / F.avg_poolNd(input, kernel_size, stride=kernel_size, padding=0, ...)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        if x.type.rank != k + 2:
            raise fc.src.error(node, f"F.{kind}_pool{k}d takes an input of rank {k + 2} (batch, channels, ...), "
                                     f"got {x.type}")
        size = _ints(fc, _arg(fc, args, kw, 1, "kernel_size", node), k, node, "kernel_size")
        stride = _arg(fc, args, kw, 2, "stride", node, None)
        strides = size if stride is None or (isinstance(stride, Const) and stride.value is None) else \
            _ints(fc, stride, k, node, "stride")
        lo = _ints(fc, _arg(fc, args, kw, 3, "padding", node, Const(0)), k, node, "padding")
        if kind == "max":
            dil = _ints(fc, _arg(fc, args, kw, 4, "dilation", node, Const(1)), k, node, "dilation")
            ceil = bool(_arg(fc, args, kw, 5, "ceil_mode", node, Const(False)).value)
            return nn.max_pool(b, x, size, strides, lo + lo, dil, ceil)
        ceil = bool(_arg(fc, args, kw, 4, "ceil_mode", node, Const(False)).value)
        include = bool(_arg(fc, args, kw, 5, "count_include_pad", node, Const(True)).value)
        return nn.avg_pool(b, x, size, strides, lo + lo, None, ceil, include)
    return fn


for _k in (1, 2, 3):
    torch_function(f"torch.nn.functional.adaptive_avg_pool{_k}d")(_adaptive_pool(_k, "avg"))
    torch_function(f"torch.nn.functional.adaptive_max_pool{_k}d")(_adaptive_pool(_k, "max"))
for _k in (1, 2, 3):
    torch_function(f"torch.nn.functional.conv{_k}d")(_conv(_k))
    torch_function(f"torch.nn.functional.conv_transpose{_k}d")(_conv_transpose(_k))
for _k in (1, 2):
    torch_function(f"torch.nn.functional.max_pool{_k}d")(_pool(_k, "max"))
    torch_function(f"torch.nn.functional.avg_pool{_k}d")(_pool(_k, "avg"))
