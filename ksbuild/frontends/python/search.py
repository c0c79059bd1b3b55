"""Sorting, searching and differences in Python kernels: torch.sort, torch.topk, torch.searchsorted,
torch.bucketize, torch.diff (and their methods). Each is a call into the shared op library (ops.index's
sort and topk, which the ONNX frontend's TopK uses too) or a few core operations."""
from __future__ import annotations

from ...ir.types import dim_sub
from ...ops import index
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const, ValuesIndices
from .tensors import _arg, int_const, norm_axis, tensor


def _bool(fc, args, kw, pos: int, name: str, node, default: bool) -> bool:
    v = _arg(fc, args, kw, pos, name, node, Const(default))
    if not isinstance(v, Const) or not isinstance(v.value, bool):
        raise fc.src.error(node, f"'{name}' must be True or False here")
    return v.value


@torch_function("torch.sort", "Tensor.sort")
def _sort(fc, b, args, kw, node):
    """torch.sort(input, dim=-1, descending=False, stable=False) -> (values, indices); ties keep their order
    (what stable=True promises). The values are the input at the indices, so gradients go back there."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(-1)), node, "dim"), x.type.rank, node)
    descending = _bool(fc, args, kw, 2, "descending", node, False)
    _bool(fc, args, kw, 3, "stable", node, False)
    values, indices = index.sort(b, x, axis, descending)
    return ValuesIndices(values, indices)


@torch_function("torch.topk", "Tensor.topk")
def _topk(fc, b, args, kw, node):
    """torch.topk(input, k, dim=-1, largest=True, sorted=True) -> (values, indices), k a literal."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    k = int_const(fc, _arg(fc, args, kw, 1, "k", node), node, "k")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(-1)), node, "dim"), x.type.rank, node)
    largest = _bool(fc, args, kw, 3, "largest", node, True)
    if not _bool(fc, args, kw, 4, "sorted", node, True):
        raise fc.src.error(node, "topk with sorted=False is not supported", hint="the values come sorted")
    values, indices = index.topk(b, x, k, axis, largest)
    return ValuesIndices(values, indices)


@torch_function("torch.searchsorted")
def _searchsorted(fc, b, args, kw, node):
    """torch.searchsorted(sorted_sequence, input, right=False, side=None) with a 1-D sequence."""
    seq = tensor(fc, b, _arg(fc, args, kw, 0, "sorted_sequence", node), node)
    values = tensor(fc, b, _arg(fc, args, kw, 1, "input", node), node)
    right = _bool(fc, args, kw, 4, "right", node, False)
    side = _arg(fc, args, kw, 5, "side", node, None)
    if side is not None:
        if side not in ("left", "right"):
            raise fc.src.error(node, f"side must be 'left' or 'right', got {side!r}")
        right = side == "right"
    return index.searchsorted(b, seq, values, right)


@torch_function("torch.bucketize")
def _bucketize(fc, b, args, kw, node):
    """torch.bucketize(input, boundaries, right=False): searchsorted(boundaries, input, right)."""
    values = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    seq = tensor(fc, b, _arg(fc, args, kw, 1, "boundaries", node), node)
    return index.searchsorted(b, seq, values, _bool(fc, args, kw, 3, "right", node, False))


@torch_function("torch.diff", "Tensor.diff")
def _diff(fc, b, args, kw, node):
    """torch.diff(input, n=1, dim=-1, prepend=None, append=None): x[1:] - x[:-1] along dim, n times."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    times = int_const(fc, _arg(fc, args, kw, 1, "n", node, Const(1)), node, "n")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(-1)), node, "dim"), x.type.rank, node)
    ends = [_arg(fc, args, kw, 3, "prepend", node, None), _arg(fc, args, kw, 4, "append", node, None)]
    if ends[0] is not None or ends[1] is not None:
        parts = [x] if ends[0] is None else [tensor(fc, b, ends[0], node), x]
        parts += [] if ends[1] is None else [tensor(fc, b, ends[1], node)]
        same = [p if p.type.dtype == x.type.dtype else b.convert(p, dtype=x.type.dtype) for p in parts]
        x = shape_ops.concatenate(b, same, axis)
    if x.type.dtype == "bool":
        raise fc.src.error(node, "diff of a bool tensor is not supported")
    for _ in range(times):
        n = x.type.shape[axis]
        if n == 0 or n == 1:
            raise fc.src.error(node, f"diff of an axis of {n} element(s)")
        x = b.sub(b.slice(x, axis=axis, start=1, stop=n), b.slice(x, axis=axis, start=0, stop=dim_sub(n, 1)))
    return x


@torch_function("torch.argsort", "Tensor.argsort")
def _argsort(fc, b, args, kw, node):
    """torch.argsort(input, dim=-1, descending=False, stable=False): sort's indices (ties keep their order)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(-1)), node, "dim"), x.type.rank, node)
    descending = _bool(fc, args, kw, 2, "descending", node, False)
    _bool(fc, args, kw, 3, "stable", node, False)
    return index.sort(b, x, axis, descending)[1]


def _order_statistic(fc, b, x, axis: int, k: int, keep: bool, node) -> ValuesIndices:
    """The k-th smallest (0-based) along axis and where it is, by a stable sort (ties keep their order)."""
    values, indices = index.sort(b, x, axis, False)
    v, i = (b.slice(a, axis=axis, start=k, stop=k + 1) for a in (values, indices))
    if not keep:
        v, i = (b.reshape(a, shape=a.type.shape[:axis] + a.type.shape[axis + 1:]) for a in (v, i))
    return ValuesIndices(v, i)


@torch_function("torch.median", "Tensor.median")
def _median(fc, b, args, kw, node):
    """torch.median(input): the lower median of all elements; torch.median(input, dim, keepdim=False) ->
    (values, indices), the lower median along dim and where it is."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    dim = _arg(fc, args, kw, 1, "dim", node, None)
    keep = _bool(fc, args, kw, 2, "keepdim", node, False)
    whole = dim is None
    if whole:
        x = shape_ops.reshape(b, x, [-1])
    axis = 0 if whole else norm_axis(fc, int_const(fc, dim, node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise fc.src.error(node, f"torch.median along a symbolic axis ({x.type})", hint="give the axis a literal size")
    picked = _order_statistic(fc, b, x, axis, (n - 1) // 2, keep, node)
    return b.reshape(picked.values, shape=()) if whole else picked


@torch_function("torch.kthvalue", "Tensor.kthvalue")
def _kthvalue(fc, b, args, kw, node):
    """torch.kthvalue(input, k, dim=-1, keepdim=False) -> (values, indices): the k-th smallest (1-based)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    k = int_const(fc, _arg(fc, args, kw, 1, "k", node), node, "k")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(-1)), node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if isinstance(n, int) and not 1 <= k <= n:
        raise fc.src.error(node, f"kthvalue: k = {k} is outside 1..{n}")
    return _order_statistic(fc, b, x, axis, k - 1, _bool(fc, args, kw, 3, "keepdim", node, False), node)
