"""Everyday torch functions and methods a kernel reaches for, each a few ops of the op library: tensor plumbing
(torch.flatten, broadcast_to, narrow, movedim, swapaxes, t, unflatten, rot90), comparisons and logic as
functions and methods (torch.lt, x.gt, torch.logical_and, ...), NaN-aware reductions (nansum, nanmean,
fmax, fmin), count_nonzero, frac, heaviside, std_mean/var_mean, dist, trapezoid, and torch.nn.functional's
softmin, threshold, tanhshrink, softshrink, hardshrink, prelu, rms_norm, batch_norm (inference),
instance_norm, pairwise_distance (used by torch_losses' triplet margin) and the adaptive pools."""
from __future__ import annotations

import ast

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import activations, aten, nn, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .mathlib import CMPOPS
from .nn import _c, _float_kw, _var_std, channel_affine
from .registry import torch_function
from .scope import Const, FInfo, ValuesIndices
from .tensors import (
    _arg,
    _flatten,
    _like,
    _transpose,
    float_tensor,
    int_const,
    norm_axis,
    shape_args,
    tensor,
    tensor_literal,
    transpose_2d,
)


def _x(fc, b, args, kw, node, name="input"):
    return tensor(fc, b, _arg(fc, args, kw, 0, name, node), node)


def _dim(fc, args, kw, pos, node, rank, default=None, name="dim"):
    d = _arg(fc, args, kw, pos, name, node, default)
    return None if d is None else norm_axis(fc, int_const(fc, d, node, "dim"), rank, node)


# ---- plumbing ---------------------------------------------------------------------------------------

@torch_function("torch.flatten")
def _flatten_fn(fc, b, args, kw, node):
    """torch.flatten(input, start_dim=0, end_dim=-1)."""
    return _flatten(fc, b, _arg(fc, args, kw, 0, "input", node), args[1:], kw, node)


@torch_function("torch.broadcast_to", "Tensor.broadcast_to")
def _broadcast_to(fc, b, args, kw, node):
    """torch.broadcast_to(input, shape)."""
    x = _x(fc, b, args, kw, node)
    shape = shape_args(fc, [_arg(fc, args, kw, 1, "size", node)], node)
    return x if x.type.shape == tuple(shape) else b.broadcast_to(x, shape=tuple(shape))


@torch_function("torch.narrow", "Tensor.narrow")
def _narrow(fc, b, args, kw, node):
    """torch.narrow(input, dim, start, length): length entries from start along dim."""
    x = _x(fc, b, args, kw, node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank)
    start = int_const(fc, _arg(fc, args, kw, 2, "start", node), node, "start")
    length = int_const(fc, _arg(fc, args, kw, 3, "length", node), node, "length")
    return b.slice(x, axis=axis, start=start, stop=start + length)


@torch_function("torch.movedim", "torch.moveaxis", "Tensor.movedim", "Tensor.moveaxis")
def _movedim(fc, b, args, kw, node):
    """torch.movedim(input, source, destination) with one dim or tuples of dims."""
    x = _x(fc, b, args, kw, node)
    src, dst = _arg(fc, args, kw, 1, "source", node), _arg(fc, args, kw, 2, "destination", node)
    src = [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
           (src if isinstance(src, (tuple, list)) else [src])]
    dst = [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
           (dst if isinstance(dst, (tuple, list)) else [dst])]
    if len(src) != len(dst):
        raise fc.src.error(node, "movedim takes as many destinations as sources")
    rest = iter(i for i in range(x.type.rank) if i not in src)
    placed = dict(zip(dst, src))
    return shape_ops.permute(b, x, [placed[i] if i in placed else next(rest) for i in range(x.type.rank)])


@torch_function("torch.swapaxes", "torch.swapdims", "Tensor.swapaxes", "Tensor.swapdims")
def _swapaxes(fc, b, args, kw, node):
    """torch.swapaxes / swapdims(input, axis0, axis1)."""
    return _transpose(fc, b, _arg(fc, args, kw, 0, "input", node), args[1:], {}, node)


@torch_function("torch.t")
def _t(fc, b, args, kw, node):
    return transpose_2d(fc, b, _arg(fc, args, kw, 0, "input", node), node)


@torch_function("Tensor.unflatten", receiver=True)
def _unflatten(fc, b, x, args, kw, node):
    """x.unflatten(dim, sizes): dim split into sizes (one may be -1)."""
    x = tensor(fc, b, x, node)
    axis = _dim(fc, args, kw, 0, node, x.type.rank)
    sizes = shape_args(fc, [_arg(fc, args, kw, 1, "sizes", node)], node)
    return shape_ops.reshape(b, x, x.type.shape[:axis] + tuple(sizes) + x.type.shape[axis + 1:])


@torch_function("torch.rot90", "Tensor.rot90")
def _rot90(fc, b, args, kw, node):
    """torch.rot90(input, k=1, dims=(0, 1)): k quarter turns from the first dim towards the second."""
    x = _x(fc, b, args, kw, node)
    k = int_const(fc, _arg(fc, args, kw, 1, "k", node, Const(1)), node, "k") % 4
    dims = _arg(fc, args, kw, 2, "dims", node, (Const(0), Const(1)))
    d0, d1 = (norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in dims)
    from ...ops.shape import flip
    for _ in range(k):  # one turn: flip along d1, then swap d0 and d1
        x = shape_ops.swap_axes(b, flip(b, x, d1), d0, d1)
    return x


# ---- comparisons and logic --------------------------------------------------------------------------

def _comparison(op: type):
    """torch.lt(input, other) and friends (x.lt(other) through _method)."""
    def fn(fc, b, args, kw, node):
        x, y = fc.plain(b, _arg(fc, args, kw, 0, "input", node)), fc.plain(b, _arg(fc, args, kw, 1, "other", node))
        return CMPOPS[op](fc, b, x, y, node)
    return fn


def _logical(name: str):
    """torch.logical_and / or / xor (nonzero is true) and logical_not."""
    def fn(fc, b, args, kw, node):
        def truth(v):
            v = tensor(fc, b, v, node)
            return v if v.type.dtype == "bool" else b.ne(v, Lit(0, Type(v.type.dtype)))
        x = truth(_arg(fc, args, kw, 0, "input", node))
        if name == "not":
            return math_ops.logical_not(b, x)
        y = truth(_arg(fc, args, kw, 1, "other", node))
        if name == "xor":
            return b.ne(*fc.unify(b, x, y, node))
        return (math_ops.logical_and if name == "and" else math_ops.logical_or)(b, x, y)
    return fn


# ---- elementwise and reductions -----------------------------------------------------------------------

@torch_function("torch.frac", "Tensor.frac")
def _frac(fc, b, args, kw, node):
    """torch.frac(input) = input - trunc(input)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.sub(x, math_ops.trunc(b, x))


@torch_function("torch.heaviside", "Tensor.heaviside")
def _heaviside(fc, b, args, kw, node):
    """torch.heaviside(input, values): 0 below 0, values at 0, 1 above (NaN stays NaN)."""
    x = _x(fc, b, args, kw, node)
    v = tensor(fc, b, _arg(fc, args, kw, 1, "values", node), node)
    x, v = fc.unify(b, x, v, node)
    step = b.select(b.gt(x, _c(x, 0)), _c(x, 1), b.select(b.lt(x, _c(x, 0)), _c(x, 0), x))  # (NaN: x)
    return b.select(b.eq(x, _c(x, 0)), v, step)


def _fmax_fmin(largest: bool):
    """torch.fmax / fmin: the larger (smaller) of the two, ignoring a NaN (NaN only when both are)."""
    def fn(fc, b, args, kw, node):
        x, y = fc.unify(b, _x(fc, b, args, kw, node), tensor(fc, b, _arg(fc, args, kw, 1, "other", node), node),
                        node)
        pick = math_ops.extremum(b, x, y, largest)
        return b.select(b.ne(x, x), y, b.select(b.ne(y, y), x, pick)) if x.type.is_float else pick
    return fn


def _nan_reduce(mean: bool):
    """torch.nansum / nanmean(input, dim=None, keepdim=False): NaN counted as absent."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        axes = None if dim is None else [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
                                         (dim if isinstance(dim, (tuple, list)) else [dim])]
        keep = bool(keep.value) if isinstance(keep, Const) else False
        present = b.eq(x, x)
        total = reduce.sum(b, b.select(present, x, _c(x, 0)), axes, keepdim=keep)
        if not mean:
            return total
        count = reduce.sum(b, b.convert(present, dtype=x.type.dtype), axes, keepdim=keep)
        return b.div(total, count)
    return fn


@torch_function("torch.count_nonzero", "Tensor.count_nonzero")
def _count_nonzero(fc, b, args, kw, node):
    """torch.count_nonzero(input, dim=None): an i64 count."""
    x = _x(fc, b, args, kw, node)
    dim = _arg(fc, args, kw, 1, "dim", node, None)
    axes = None if dim is None else [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
                                     (dim if isinstance(dim, (tuple, list)) else [dim])]
    nz = b.ne(x, Lit(False if x.type.dtype == "bool" else 0, Type(x.type.dtype)))
    return reduce.sum(b, b.convert(nz, dtype="i64"), axes)


def _stat_mean(std: bool):
    """torch.std_mean / var_mean(input, dim=None, *, correction=1, keepdim=False) -> (std or var, mean)."""
    def fn(fc, b, args, kw, node):
        spread = _var_std(std)(fc, b, args, kw, node)
        mean_kw = {k: v for k, v in kw.items() if k in ("dim", "keepdim")}
        from .registry import REGISTRY
        return spread, REGISTRY["torch.mean"](fc, b, list(args[:2]), mean_kw, node)
    return fn


@torch_function("torch.dist", "Tensor.dist")
def _dist(fc, b, args, kw, node):
    """torch.dist(input, other, p=2): the p-norm of input - other (ops.aten.vector_norm)."""
    x, y = (float_tensor(fc, b, _arg(fc, args, kw, i, n, node), node) for i, n in enumerate(("input", "other")))
    d = b.sub(*fc.unify(b, x, y, node))
    return aten.vector_norm(b, d, _float_kw(fc, args, kw, 2, "p", node, 2.0), tuple(range(d.type.rank)), False)


@torch_function("torch.trapezoid", "torch.trapz")
def _trapezoid(fc, b, args, kw, node):
    """torch.trapezoid(y, dx=1, dim=-1): Σ (y[i] + y[i+1]) / 2 · dx along dim."""
    y = float_tensor(fc, b, _arg(fc, args, kw, 0, "y", node), node)
    dx = _float_kw(fc, args, kw, 99, "dx", node, 1.0)
    axis = _dim(fc, args, kw, 99, node, y.type.rank, Const(-1))
    n = y.type.shape[axis]
    from ...ir.types import dim_sub
    inner = b.add(b.slice(y, axis=axis, start=1, stop=n), b.slice(y, axis=axis, start=0, stop=dim_sub(n, 1)))
    return b.mul(reduce.sum(b, inner, [axis]), _c(y, 0.5 * dx))


# ---- torch.nn.functional ------------------------------------------------------------------------------

@torch_function("torch.nn.functional.softmin")
def _softmin(fc, b, args, kw, node):
    """F.softmin(input, dim): softmax of -input."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank)
    if axis is None:
        raise fc.src.error(node, "F.softmin needs dim=")
    return reduce.softmax(b, b.neg(x), axis)


@torch_function("torch.nn.functional.threshold")
def _threshold(fc, b, args, kw, node):
    """F.threshold(input, threshold, value): input above threshold, else value."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    th, value = _float_kw(fc, args, kw, 1, "threshold", node, None), _float_kw(fc, args, kw, 2, "value", node, None)
    return b.select(b.gt(x, _c(x, th)), x, _c(x, value))


@torch_function("torch.nn.functional.tanhshrink")
def _tanhshrink(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.sub(x, b.tanh(x))


def _shrink(soft: bool):
    """F.softshrink / hardshrink(input, lambd=0.5)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        lambd = _float_kw(fc, args, kw, 1, "lambd", node, 0.5)
        return activations.shrink(b, x, lambd if soft else 0.0, lambd)
    return fn


@torch_function("torch.nn.functional.prelu")
def _prelu(fc, b, args, kw, node):
    """F.prelu(input, weight): x where positive, weight·x else; weight has one value or one per channel (dim 1)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    w = float_tensor(fc, b, _arg(fc, args, kw, 1, "weight", node), node)
    if w.type.rank == 1 and w.type.shape[0] != 1 and x.type.rank >= 2:
        w = nn.channel(b, w, x.type.rank)
    return b.select(b.gt(x, _c(x, 0)), x, b.mul(*fc.unify(b, w, x, node)))


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


@torch_function("Tensor.type", receiver=True)
def _type(fc, b, x, args, kw, node):
    """x.type(dtype): a cast (x.type() without a dtype names it, which kernels have no use for)."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, 0, "dtype", node, None)
    if not isinstance(d, DtypeValue):
        raise fc.src.error(node, "x.type() needs a torch dtype such as torch.float64", hint="or use x.to(dtype)")
    x = tensor(fc, b, x, node)
    return x if x.type.dtype == d.dtype else b.convert(x, dtype=d.dtype)


@torch_function("torch.repeat_interleave", "Tensor.repeat_interleave")
def _repeat_interleave(fc, b, args, kw, node):
    """torch.repeat_interleave(input, repeats, dim=None) with a literal int repeats: each element repeats times
    in a row along dim (the flattened input when dim is None)."""
    x = _x(fc, b, args, kw, node)
    r = int_const(fc, _arg(fc, args, kw, 1, "repeats", node), node, "repeats")
    axis = _dim(fc, args, kw, 2, node, max(x.type.rank, 1))
    if axis is None:
        x, axis = shape_ops.reshape(b, x, [-1]), 0
    shape = x.type.shape
    from ...ir.types import dim_mul
    spread = b.broadcast_to(b.reshape(x, shape=shape[:axis + 1] + (1,) + shape[axis + 1:]),
                            shape=shape[:axis + 1] + (r,) + shape[axis + 1:])
    return b.reshape(spread, shape=shape[:axis] + (dim_mul(shape[axis], r),) + shape[axis + 1:])


def _cumulative_extremum(largest: bool):
    """torch.cummax / cummin(input, dim) -> (values, indices)."""
    def fn(fc, b, args, kw, node):
        from ...ops import index
        x = _x(fc, b, args, kw, node)
        axis = _dim(fc, args, kw, 1, node, x.type.rank)
        return ValuesIndices(*index.cumulative_extremum(b, x, axis, largest))
    return fn


@torch_function("torch.cov")
def _cov(fc, b, args, kw, node):
    """torch.cov(input, correction=1): the covariance of the rows (variables) over the columns (observations)
    of a 2-D input (a 1-D input is one variable)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    correction = int_const(fc, _arg(fc, args, kw, 1, "correction", node, Const(1)), node, "correction")
    if _arg(fc, args, kw, 2, "fweights", node, None) is not None or _arg(fc, args, kw, 3, "aweights", node, None) \
            is not None:
        raise fc.src.error(node, "torch.cov with fweights or aweights is not supported")
    one = x.type.rank == 1
    if one:
        x = b.reshape(x, shape=(1,) + x.type.shape)
    if x.type.rank != 2:
        raise fc.src.error(node, f"torch.cov takes a 1-D or 2-D input, got {x.type}")
    n = x.type.shape[1]
    from .torch_more import _count
    centred = b.sub(x, reduce.mean(b, x, [1], keepdim=True))
    from ...ops import linalg
    c = linalg.einsum_many(b, "io,jo->ij", [centred, centred])
    denominator = b.sub(_count(b, n, x.type.dtype), _c(x, float(correction)))
    c = b.div(c, denominator)
    return b.reshape(c, shape=()) if one else c


@torch_function("torch.logdet", "Tensor.logdet")
def _logdet(fc, b, args, kw, node):
    """torch.logdet(input): log det (NaN for a negative determinant, -inf for 0), by the LU determinant."""
    from ...ops import linalg
    return b.log(linalg.det(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)))


@torch_function("torch.diag_embed", "Tensor.diag_embed")
def _diag_embed(fc, b, args, kw, node):
    """torch.diag_embed(input): the last axis [.., n] as the diagonals of [.., n, n] (offset 0, last two dims)."""
    from ...ops import create
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    for name, pos in (("offset", 1), ("dim1", 2), ("dim2", 3)):
        if _arg(fc, args, kw, pos, name, node, None) is not None:
            raise fc.src.error(node, f"torch.diag_embed's {name}= is not supported", hint="the main diagonal of the "
                                     "last two dims is")
    if x.type.rank == 0:
        raise fc.src.error(node, "torch.diag_embed takes a tensor of at least one dim")
    n = x.type.shape[-1]
    return b.mul(b.reshape(x, shape=x.type.shape[:-1] + (1, n)), create.eye(b, n, n, x.type.dtype))


@torch_function("torch.block_diag")
def _block_diag(fc, b, args, kw, node):
    """torch.block_diag(*tensors): the matrices (a vector is one row, a number 1×1) along the diagonal."""
    from ...ops.shape import concatenate
    mats = []
    for a in args:
        m = float_tensor(fc, b, a, node)
        m = b.reshape(m, shape=(1, 1) if m.type.rank == 0 else (1,) + m.type.shape) if m.type.rank < 2 else m
        if m.type.rank != 2 or not all(isinstance(d, int) for d in m.type.shape):
            raise fc.src.error(node, f"torch.block_diag takes matrices of literal sizes, got {m.type}")
        mats.append(m)
    if not mats:
        raise fc.src.error(node, "torch.block_diag needs at least one tensor")
    width = sum(m.type.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        c = m.type.shape[1]
        rows.append(b.pad(m, axis=1, lo=left, hi=width - left - c))
        left += c
    return concatenate(b, rows, 0)


@torch_function("torch.vander")
def _vander(fc, b, args, kw, node):
    """torch.vander(x, N=None, increasing=False): the columns x^(N-1) .. x^0 (or increasing)."""
    from ...ops.shape import stack
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "x", node), node)
    n = _arg(fc, args, kw, 1, "N", node, None)
    n = x.type.shape[0] if n is None else int_const(fc, n, node, "N")
    if not isinstance(n, int):
        raise fc.src.error(node, "torch.vander over a symbolic length needs N= as a literal")
    increasing = _arg(fc, args, kw, 2, "increasing", node, Const(False))
    powers = [b.ipow(x, n=k) if k else b.broadcast_to(_c(x, 1.0), shape=x.type.shape) for k in range(n)]
    return stack(b, powers if isinstance(increasing, Const) and increasing.value else powers[::-1], 1)


@torch_function("Tensor.new_tensor", receiver=True)
def _new_tensor(fc, b, x, args, kw, node):
    """x.new_tensor(data): torch.tensor(data) of x's dtype (unless dtype= says otherwise)."""
    from .scope import DtypeValue
    x = tensor(fc, b, x, node)
    given = dict(kw)
    if "dtype" not in given:
        given["dtype"] = DtypeValue(x.type.dtype)
    return tensor_literal(fc, b, list(args), given, node)


@torch_function("torch.float_power", "Tensor.float_power")
def _float_power(fc, b, args, kw, node):
    """torch.float_power(input, exponent): the power computed in float64."""
    x, y = (_arg(fc, args, kw, i, n, node) for i, n in enumerate(("input", "exponent")))
    x = tensor(fc, b, x, node)
    x64 = x if x.type.dtype == "f64" else b.convert(x, dtype="f64")
    if isinstance(y, Const):
        return b.pow(x64, Lit(float(y.value), Type("f64")))
    y = tensor(fc, b, y, node)
    return b.pow(*fc.unify(b, x64, y if y.type.dtype == "f64" else b.convert(y, dtype="f64"), node))


@torch_function("torch.logspace")
def _logspace(fc, b, args, kw, node):
    """torch.logspace(start, end, steps, base=10.0) of literals: base ** linspace(start, end, steps)."""
    import numpy as np

    from ...ops import create
    start, end = (_arg(fc, args, kw, i, n, node) for i, n in ((0, "start"), (1, "end")))
    steps = int_const(fc, _arg(fc, args, kw, 2, "steps", node), node, "steps")
    base = _float_kw(fc, args, kw, 3, "base", node, 10.0)
    if not (isinstance(start, Const) and isinstance(end, Const)):
        raise fc.src.error(node, "torch.logspace needs start and end known when the kernel is compiled")
    dtype = np.float32 if fc.float_dtype == "f32" else np.float64
    return create.array(b, np.power(base, np.linspace(float(start.value), float(end.value), steps)).astype(dtype))


@torch_function("torch.finfo")
def _finfo(fc, b, args, kw, node):
    """torch.finfo(dtype): eps, max, min, tiny, resolution of a float dtype, as constants."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, 0, "type", node, None)
    if d is None:
        return FInfo(fc.float_dtype)
    if not isinstance(d, DtypeValue) or d.dtype not in ("f16", "f32", "f64"):
        raise fc.src.error(node, "torch.finfo takes a float dtype such as torch.float32 or x.dtype")
    return FInfo(d.dtype)


@torch_function("torch.unbind", "Tensor.unbind")
def _unbind(fc, b, args, kw, node):
    """torch.unbind(input, dim=0) / x.unbind(dim): the slices along dim, a tuple (the size must be a literal)."""
    x = _x(fc, b, args, kw, node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank, Const(0))
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise fc.src.error(node, f"unbind along a symbolic axis ({x.type})", hint="index the axis in a loop instead")
    rest = x.type.shape[:axis] + x.type.shape[axis + 1:]
    return tuple(b.reshape(b.slice(x, axis=axis, start=i, stop=i + 1), shape=rest) for i in range(n))


for _name, _op in (("lt", ast.Lt), ("le", ast.LtE), ("gt", ast.Gt), ("ge", ast.GtE), ("eq", ast.Eq),
                   ("ne", ast.NotEq), ("less", ast.Lt), ("greater", ast.Gt)):
    torch_function(f"torch.{_name}", f"Tensor.{_name}")(_comparison(_op))
for _name in ("and", "or", "xor", "not"):
    torch_function(f"torch.logical_{_name}", f"Tensor.logical_{_name}")(_logical(_name))
torch_function("torch.fmax", "Tensor.fmax")(_fmax_fmin(True))
torch_function("torch.fmin", "Tensor.fmin")(_fmax_fmin(False))
torch_function("torch.nansum", "Tensor.nansum")(_nan_reduce(False))
torch_function("torch.nanmean", "Tensor.nanmean")(_nan_reduce(True))
torch_function("torch.std_mean", "Tensor.std_mean")(_stat_mean(True))
torch_function("torch.var_mean", "Tensor.var_mean")(_stat_mean(False))
torch_function("torch.empty_like")(_like(0.0))
torch_function("torch.cummax", "Tensor.cummax")(_cumulative_extremum(True))
torch_function("torch.cummin", "Tensor.cummin")(_cumulative_extremum(False))
for _k in (1, 2, 3):
    torch_function(f"torch.nn.functional.adaptive_avg_pool{_k}d")(_adaptive_pool(_k, "avg"))
    torch_function(f"torch.nn.functional.adaptive_max_pool{_k}d")(_adaptive_pool(_k, "max"))
torch_function("torch.nn.functional.softshrink")(_shrink(True))
torch_function("torch.nn.functional.hardshrink")(_shrink(False))
