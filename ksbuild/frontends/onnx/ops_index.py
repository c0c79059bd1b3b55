"""ONNX indexing ops: Gather*, Scatter*, OneHot, ArgMax/ArgMin, TopK, CumSum, Compress, NonZero,
ReverseSequence."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import index as ix
from .graph import handler, symbolic
from .node import Node
from .values import SymDim, is_symbolic


def _axis(n: Node, axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise n.error(f"{n.op}: axis {axis} is out of range for a tensor of rank {rank}")
    return a


def _check_known_indices(n: Node, i: int, size) -> None:
    """Indices known at import time must be in range (ONNX leaves the result undefined otherwise)."""
    k = n.known(i)
    if k is None or not isinstance(size, int) or k.dtype == object:
        return
    bad = (k < -size) | (k >= size)
    if np.any(bad):
        raise n.error(f"{n.op}: index {int(k[bad].reshape(-1)[0])} is out of range for an axis of {size}")


@handler("Gather")
def gather(n: Node):
    x = n.x(0)
    axis = _axis(n, n.attr("axis", 0), x.type.rank)
    _check_known_indices(n, 1, x.type.shape[axis])
    return [ix.gather(n.b, x, n.x(1), axis)]


@symbolic("Gather")
def symbolic_gather(n: Node, known):
    x, i = known
    axis = n.attr("axis", 0)
    i = i.astype(np.int64)
    return [np.take(x, np.where(i < 0, i + x.shape[axis], i), axis=axis)]


@handler("GatherElements")
def gather_elements(n: Node):
    return [ix.gather_elements(n.b, n.x(0), n.x(1), n.attr("axis", 0))]


@handler("GatherND")
def gather_nd(n: Node):
    return [ix.gather_nd(n.b, n.x(0), n.x(1), n.attr("batch_dims", 0))]


REDUCTIONS = ("none", "add", "mul", "max", "min")


@handler("ScatterElements", "Scatter")
def scatter_elements(n: Node):
    reduction = n.attr_in("reduction", REDUCTIONS, "none") if n.op == "ScatterElements" else "none"
    return [ix.scatter_elements(n.b, n.x(0), n.x(1), n.x(2), n.attr("axis", 0), reduction)]


@handler("ScatterND")
def scatter_nd(n: Node):
    return [ix.scatter_nd(n.b, n.x(0), n.x(1), n.x(2), n.attr_in("reduction", REDUCTIONS, "none"))]


@handler("OneHot")
def one_hot(n: Node):
    depth = n.const(1, "depth")
    d = int(np.asarray(depth).reshape(-1)[0])
    values = n.x(2)
    off = n.b.reshape(n.b.slice(values, axis=0, start=0, stop=1), shape=())
    on = n.b.reshape(n.b.slice(values, axis=0, start=1, stop=2), shape=())
    idx = n.x(0)
    idx = idx if idx.type.is_int else n.b.convert(idx, dtype="i64")
    return [ix.one_hot(n.b, idx, d, off, on, n.attr("axis", -1))]


@handler("ArgMax", "ArgMin")
def arg_extremum(n: Node):
    x = n.x(0)
    return [ix.arg_extremum(n.b, x, n.attr("axis", 0), bool(n.attr("keepdims", 1)), n.op == "ArgMax",
                            bool(n.attr("select_last_index", 0)))]


@handler("TopK")
def topk(n: Node):
    x = n.x(0)
    n.attr("sorted", 1)
    axis, largest = _axis(n, n.attr("axis", -1), x.type.rank), bool(n.attr("largest", 1))
    k = n.known(1) if n.opset >= 10 else None
    if k is not None and is_symbolic(k):  # torch.sort along a symbolic axis: k is that axis' size
        if SymDim.unwrap(k.reshape(-1)[0]) != x.type.shape[axis]:
            raise n.unsupported(f"TopK with a symbolic k ({k.reshape(-1)[0].dim}) other than the size of the axis "
                                f"({x.type.shape[axis]})")
        return list(ix.sort(n.b, x, axis, largest))
    k = n.ints(1, "k")[0] if n.opset >= 10 else n.attr("k")
    return list(ix.topk(n.b, x, k, axis, largest))


@handler("CumSum")
def cumsum(n: Node):
    x = n.x(0)
    axis = n.ints(1, "axis")[0]
    return [ix.cumsum(n.b, x, axis, bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))]


@handler("Compress")
def compress(n: Node):
    x = n.x(0)
    cond = n.const(1, "the condition (the output size depends on it)")
    picked = np.nonzero(np.asarray(cond).reshape(-1))[0].astype(np.int64)
    axis = n.attr("axis", None)
    if axis is None:
        x = n.b.reshape(x, shape=(_numel(x.type.shape),))
        axis = 0
    axis = _axis(n, axis, x.type.rank)
    picked = picked[picked < x.type.shape[axis]]
    if picked.size == 0:
        raise n.unsupported("a condition that selects nothing (an empty tensor)")
    return [n.b.gather(x, n.lit_atom(picked), axis=axis)]


def _numel(shape):
    from ...ops._util import numel
    return numel(shape)


@handler("NonZero")
def nonzero(n: Node):
    x = n.const(0, "the input (the output size depends on its values)",
                hint="torch exports a boolean-mask assignment `x[mask] = v` as NonZero: write "
                     "`torch.where(mask, v, x)` instead")
    return [np.array(np.nonzero(x), dtype=np.int64)]


@handler("ReverseSequence")
def reverse_sequence(n: Node):
    x = n.x(0)
    lens = n.ints(1, "sequence_lens")
    t_axis, b_axis = n.attr("time_axis", 0), n.attr("batch_axis", 1)
    steps = x.type.shape[t_axis]
    if not isinstance(steps, int):
        raise n.error("ReverseSequence needs a static time axis")
    idx_shape = [1] * x.type.rank
    idx_shape[t_axis], idx_shape[b_axis] = steps, len(lens)
    t = np.arange(steps)[:, None]
    src = np.where(t < np.array(lens)[None, :], np.array(lens)[None, :] - 1 - t, t)
    src = src if t_axis < b_axis else src.T
    idx = n.lit_atom(src.reshape(idx_shape).astype(np.int64))
    idx = n.b.broadcast_to(idx, shape=x.type.shape) if not isinstance(idx, Lit) else Lit(idx.value, Type(
        "i64", x.type.shape))
    return [ix.gather_elements(n.b, x, idx, t_axis)]


@handler("CumProd")
def cumprod(n: Node):
    axis = n.ints(1, "axis")[0]
    return [ix.cumprod(n.b, n.x(0), axis, bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))]


@handler("BitCast")
def bitcast(n: Node):
    from .values import Val, onnx_dtype
    to = onnx_dtype(n.attr("to"), "BitCast's 'to'", n.loc)
    x = n.x(0)
    if x.type.dtype == "bool":
        x = n.b.convert(x, dtype="u8")
    if to == "bool":
        raise n.unsupported("BitCast to bool")
    if to == x.type.dtype:  # (the same bits read as they are)
        return [Val(x, None, to)]
    return [Val(n.b.bitcast(x, dtype=to), None, to)]


@handler("TensorScatter")
def tensor_scatter(n: Node):
    cache, update = n.x(0), n.x(1)
    mode = n.attr_in("mode", ("linear", "circular"), "linear")
    axis = n.attr("axis", -2)
    r = cache.type.rank
    axis = axis + r if axis < 0 else axis
    idx = n.opt(2)
    length = cache.type.shape[axis]
    b = n.b
    batch = cache.type.shape[0]
    start = idx if idx is not None else Lit(0, Type("i64", (batch,)))
    start = start if start.type.dtype == "i64" else b.convert(start, dtype="i64")
    pos = b.add(b.reshape(start, shape=(batch,) + (1,) * (r - 1)),
                b.iota(shape=update.type.shape, axis=axis, dtype="i64"))
    if mode == "circular":
        pos = b.mod(pos, ix.dim_atom(b, length))
    return [ix.scatter_elements(b, cache, b.broadcast_to(pos, shape=update.type.shape), update, axis, "none")]


@handler("MaxUnpool")
def max_unpool(n: Node):
    x, idx = n.x(0), n.x(1)
    kernel = n.attr("kernel_shape")
    k = len(kernel)
    strides = n.attr("strides", None) or [1] * k
    pads = n.attr("pads", None) or [0] * (2 * k)
    sizes = x.type.shape[2:]
    default = list(x.type.shape[:2]) + [(s - 1) * st + kk - pads[i] - pads[k + i]
                                       for i, (s, st, kk) in enumerate(zip(sizes, strides, kernel))]
    shape = n.ints(2, "output_shape") if n.has(2) else default
    from ...ops._util import numel
    b = n.b
    idx = idx if idx.type.dtype == "i64" else b.convert(idx, dtype="i64")
    if list(shape) != list(default):  # indices count in the default shape: move them into the given one
        flat = None
        for a in range(len(shape)):
            inner, inner_out = numel(default[a + 1:]), numel(shape[a + 1:])
            coord = b.mod(b.floordiv(idx, Lit(inner, Type("i64"))), Lit(default[a], Type("i64")))
            term = b.mul(coord, Lit(inner_out, Type("i64")))
            flat = term if flat is None else b.add(flat, term)
        idx = flat
    zeros = Lit(0.0 if x.type.is_float else 0, Type(x.type.dtype, (numel(shape),)))
    out = ix.scatter_rows(b, zeros, idx, x, "none")
    return [n.b.reshape(out, shape=tuple(shape))]
