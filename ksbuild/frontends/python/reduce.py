"""Reductions, scans and statistics (ops/reduce.py): torch.sum, mean, amax, amin, logsumexp, max, min
(also with dim: values and indices), prod, softmax, log_softmax, argmax, argmin, any, all, nansum, nanmean,
count_nonzero, var, std, var_mean, std_mean, cov, dist, trapezoid, cumsum, cumprod, cummax, cummin and
logcumsumexp. Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import aten, index, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const, ValuesIndices
from .tensors import (
    _arg,
    _c,
    _count,
    _dim,
    _float_kw,
    _ints,
    _x,
    axes_arg,
    float_tensor,
    int_const,
    is_dimlike,
    norm_axis,
    tensor,
)


def _as_dtype_kw(fc, b, x, args, kw, pos: int, node):
    """x converted to the dtype= keyword (torch.sum, softmax, ...: computed in that dtype), when given."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, pos, "dtype", node, None)
    if d is None:
        return x
    if not isinstance(d, DtypeValue):
        raise fc.src.error(node, "dtype= must be a torch dtype such as torch.float64")
    return x if x.type.dtype == d.dtype else b.convert(x, dtype=d.dtype)


def _reduce(op, to_float: bool = False):
    """torch.sum/mean/amax/amin(input, dim=None, keepdim=False, *, dtype=None)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        x = _as_dtype_kw(fc, b, x, args, kw, 3, node)
        if to_float:
            x = float_tensor(fc, b, x, node)
        axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        return op(b, x, axes, keep.value)
    return fn


def _softmax(log: bool):
    """torch.softmax / log_softmax(input, dim, dtype=None)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _as_dtype_kw(fc, b, tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node),
                                             args, kw, 2, node), node)
        dim = _arg(fc, args, kw, 1, "dim", node)
        if isinstance(dim, Const) and dim.value is None:
            raise fc.src.error(node, "softmax needs its dim (torch's implicit choice for None is deprecated)")
        (axis,) = axes_arg(fc, dim, x.type.rank, node)
        return reduce.log_softmax(b, x, axis) if log else reduce.softmax(b, x, axis)
    return fn


def max_with_dim(largest: bool):
    """torch.max(x, dim, keepdim=False) -> (values, indices), with .values and .indices."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, args[0], node)
        dim = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value
        axes = axes_arg(fc, Const(dim), x.type.rank, node)
        indices = index.arg_extremum(b, b.stop_gradient(x), dim, keep, largest)
        if not x.type.is_float:
            return ValuesIndices((reduce.amax if largest else reduce.amin)(b, x, axes, keep), indices)
        # among equal maxima the gradient goes to the first, the one the index names (torch's), not shared as
        # amax's: the reduction with ties="first" (the values need no index; its derivative scatters to one
        # element per row: transforms/one_hot.py)
        values = (b.reduce_max if largest else b.reduce_min)(x, axes=axes, ties="first")
        return ValuesIndices(shape_ops.unsqueeze(b, values, axes[0]) if keep else values, indices)
    return fn


def _max_or_min(kind: str):
    """torch.max(x) (a full reduction) or torch.max(a, b) (elementwise)."""
    def fn(fc, b, args, kw, node):
        if len(args) == 2 and not kw and not is_dimlike(args[1]):
            from .mathlib import LIBRARY
            return LIBRARY["maximum" if kind == "max" else "minimum"](fc, b, args, node)
        if len(args) > 1 or kw:
            return max_with_dim(kind == "max")(fc, b, args, kw, node)
        return _reduce(reduce.amax if kind == "max" else reduce.amin)(fc, b, args, kw, node)
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
    from .tensors import _count
    centred = b.sub(x, reduce.mean(b, x, [1], keepdim=True))
    from ...ops import linalg
    c = linalg.einsum_many(b, "io,jo->ij", [centred, centred])
    denominator = b.sub(_count(b, n, x.type.dtype), _c(x, float(correction)))
    c = b.div(c, denominator)
    return b.reshape(c, shape=()) if one else c


def _var_std(std: bool):
    """x.var(dim=None, unbiased=True, keepdim=False) (also correction=): Σ(x - mean)² / (N - correction)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
        unbiased = _arg(fc, args, kw, 2, "unbiased", node, Const(True))
        correction = kw.get("correction", Const(1 if unbiased.value else 0))
        keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False))
        mu = reduce.mean(b, x, axes, keepdim=True)
        ss = reduce.sum(b, b.ipow(b.sub(x, mu), n=2), axes, keepdim=keep.value)
        from ...ops._util import numel
        count = numel([x.type.shape[a] for a in axes])
        denom = b.sub(_count(b, count, x.type.dtype), _c(x, correction.value))
        v = b.div(ss, denom)
        return math_ops.norm_root(b, v) if std else v  # the std of equal values has gradient 0, as torch's
    return fn


@torch_function("torch.prod", "Tensor.prod")
def _prod(fc, b, args, kw, node):
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
    return reduce.prod(b, x, axes, _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value)


def _cumulative(op):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        axis = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
        return op(b, x, norm_axis(fc, axis, x.type.rank, node))
    return fn


def _arg_ext(largest: bool):
    """torch.argmax(x, dim=None, keepdim=False): the first position of the maximum (flattened without dim)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value
        if dim is None:
            flat = shape_ops.reshape(b, x, (-1,)) if x.type.rank != 1 else x
            return index.arg_extremum(b, flat, 0, False, largest)
        return index.arg_extremum(b, x, int_const(fc, dim, node, "dim"), keep, largest)
    return fn


@torch_function("torch.logcumsumexp", "Tensor.logcumsumexp")
def _logcumsumexp(fc, b, args, kw, node):
    """torch.logcumsumexp(input, dim): log of the running sum of exp (a scan that rescales as it goes)."""
    from ...ops import index
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim"), x.type.rank, node)
    return index.logcumsumexp(b, x, axis)


def _any_all(is_any: bool):
    """torch.any / torch.all(input, dim=None, keepdim=False): a bool tensor (whether any / every element is
    nonzero)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        axes = None if dim is None else [norm_axis(fc, a, x.type.rank, node) for a in _ints(fc, dim, node, "dim")]
        nonzero = x if x.type.dtype == "bool" else b.ne(x, Lit(0, Type(x.type.dtype)))
        flags = b.convert(nonzero, dtype="i64")
        pick = reduce.amax if is_any else reduce.amin
        return b.ne(pick(b, flags, axes, keepdim=bool(keep.value)), Lit(0, Type("i64")))
    return fn


torch_function("torch.sum", "Tensor.sum")(_reduce(reduce.sum))
torch_function("torch.mean", "Tensor.mean")(_reduce(reduce.mean, to_float=True))
torch_function("torch.amax", "Tensor.amax")(_reduce(reduce.amax))
torch_function("torch.amin", "Tensor.amin")(_reduce(reduce.amin))
torch_function("torch.logsumexp", "Tensor.logsumexp")(_reduce(reduce.logsumexp, to_float=True))
torch_function("torch.max", "Tensor.max")(_max_or_min("max"))
torch_function("torch.min", "Tensor.min")(_max_or_min("min"))
torch_function("torch.softmax", "torch.nn.functional.softmax", "Tensor.softmax")(_softmax(False))
torch_function("torch.log_softmax", "torch.nn.functional.log_softmax", "Tensor.log_softmax")(_softmax(True))
torch_function("torch.nansum", "Tensor.nansum")(_nan_reduce(False))
torch_function("torch.nanmean", "Tensor.nanmean")(_nan_reduce(True))
torch_function("torch.std_mean", "Tensor.std_mean")(_stat_mean(True))
torch_function("torch.var_mean", "Tensor.var_mean")(_stat_mean(False))
torch_function("torch.cummax", "Tensor.cummax")(_cumulative_extremum(True))
torch_function("torch.cummin", "Tensor.cummin")(_cumulative_extremum(False))
torch_function("torch.var", "Tensor.var")(_var_std(False))
torch_function("torch.std", "Tensor.std")(_var_std(True))
torch_function("torch.cumsum", "Tensor.cumsum")(_cumulative(index.cumsum))
torch_function("torch.cumprod", "Tensor.cumprod")(_cumulative(index.cumprod))
torch_function("torch.argmax", "Tensor.argmax")(_arg_ext(True))
torch_function("torch.argmin", "Tensor.argmin")(_arg_ext(False))
torch_function("torch.any", "Tensor.any")(_any_all(True))
torch_function("torch.all", "Tensor.all")(_any_all(False))
