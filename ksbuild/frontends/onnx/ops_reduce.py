"""ONNX reductions, softmax family and products: Reduce*, Softmax, LogSoftmax, Hardmax,
MatMul, Gemm, Einsum."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import index as ix
from ...ops import linalg
from ...ops import reduce as red
from ...ops import shape as sh
from ...ops._util import numel, scalar_lit
from .graph import handler, symbolic
from .node import Node

AXES_AS_INPUT = {"ReduceSum": 13}  # the others take axes as an input from opset 18


def _reduce_axes(n: Node, rank: int):
    """(axes or None for all, keepdims); None axes with noop_with_empty_axes means 'no reduction'."""
    keep = bool(n.attr("keepdims", 1))
    since = AXES_AS_INPUT.get(n.op, 18)
    if n.opset >= since:
        noop = bool(n.attr("noop_with_empty_axes", 0))
        axes = n.ints(1, "axes") if n.has(1) else []
        if not axes:
            return ("noop" if noop else None), keep
    else:
        axes = n.attr("axes", None)
    if axes is None:
        return None, keep
    return sorted({a + rank if a < 0 else a for a in axes}), keep


def _numeric(n: Node, x):
    if x.type.dtype == "bool" and n.op not in ("ReduceMax", "ReduceMin"):
        raise n.error(f"{n.op} of a bool tensor is not supported")
    return x


REDUCERS = {
    "ReduceSum": lambda b, x, ax, k: red.sum(b, x, ax, k),
    "ReduceMean": lambda b, x, ax, k: red.mean(b, x, ax, k),
    "ReduceMax": lambda b, x, ax, k: red.amax(b, x, ax, k),
    "ReduceMin": lambda b, x, ax, k: red.amin(b, x, ax, k),
    "ReduceL1": lambda b, x, ax, k: red.sum(b, b.abs(x), ax, k),
    "ReduceL2": lambda b, x, ax, k: b.sqrt(red.sum(b, b.ipow(x, n=2), ax, k)),
    "ReduceSumSquare": lambda b, x, ax, k: red.sum(b, b.ipow(x, n=2), ax, k),
    "ReduceLogSum": lambda b, x, ax, k: b.log(red.sum(b, x, ax, k)),
    "ReduceLogSumExp": lambda b, x, ax, k: red.logsumexp(b, x, ax, k),
    "ReduceProd": lambda b, x, ax, k: red.prod(b, x, ax, k),
}


@handler(*REDUCERS)
def reduce(n: Node):
    x = _numeric(n, n.x(0))
    axes, keep = _reduce_axes(n, x.type.rank)
    if axes == "noop":
        return [n.val(0)]
    if n.op in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp") and not x.type.is_float:
        x = n.b.convert(x, dtype="f32")
    if n.op == "ReduceMean" and not x.type.is_float:
        raise n.error("ReduceMean of an integer tensor is not supported")
    if x.type.dtype == "bool":  # any / all (any of nothing is false, all of nothing true)
        y = REDUCERS[n.op](n.b, n.b.convert(x, dtype="i8"), axes, keep)
        if n.op == "ReduceMax":
            y = n.b.max(y, Lit(0, Type("i8")))
        return [n.b.ne(y, Lit(0, Type("i8")))]
    return [REDUCERS[n.op](n.b, x, axes, keep)]


@symbolic("ReduceProd", "ReduceSum")
def symbolic_reduce(n: Node, known):
    """A product or sum of symbolic sizes (x.numel() exports as ReduceProd of Shape(x): batch·7)."""
    x = known[0].astype(object)
    axes, keep = _reduce_axes(n, x.ndim)
    if axes == "noop":
        return [known[0]]
    ufunc = np.multiply if n.op == "ReduceProd" else np.add
    out = ufunc.reduce(x, axis=None if axes is None else tuple(axes), keepdims=keep)
    return [np.asarray(out, dtype=object)]


def _coerced(n: Node, x, fn):
    """Softmax before opset 13: the input is viewed as 2-D [prod(:axis), prod(axis:)]."""
    axis = n.attr("axis", 1 if n.opset < 13 else -1)
    r = x.type.rank
    axis = axis + r if axis < 0 else axis
    if n.opset >= 13:
        return fn(n.b, x, axis)
    flat = sh.reshape(n.b, x, [numel(x.type.shape[:axis]), numel(x.type.shape[axis:])])
    return sh.reshape(n.b, fn(n.b, flat, 1), list(x.type.shape))


@handler("Softmax", "LogSoftmax")
def softmax(n: Node):
    storage = n.dtype(0)
    if storage != n.x(0).type.dtype:  # f16, bf16...: computed in f32 as the ONNX function body does it
        return [_coerced(n, n.x(0), lambda b, x, axis: _stepwise_softmax(b, x, axis, storage, n.op))]
    fn = red.softmax if n.op == "Softmax" else red.log_softmax
    return [_coerced(n, n.x(0), fn)]


def _stepwise_softmax(b, x, axis: int, storage: str, op: str):
    """Softmax/LogSoftmax of values of a storage dtype (f16, bf16, ...) computed in f32, with every
    intermediate of the op's ONNX function body (Sub, Exp, ReduceSum, Log) rounded to the storage
    dtype as that body defines them; the onnx reference and its node tests compute it so.
    (Rounding only the result is a little more accurate and differs from them by an ulp.)"""
    def rounded(a, bb=b):
        return bb.convert(bb.convert(a, dtype=storage), dtype=a.type.dtype)
    m = red.amax(b, b.stop_gradient(x), [axis], keepdim=True)
    shifted = rounded(b.sub(x, b.broadcast_to(m, shape=x.type.shape)))
    e = rounded(b.exp(shifted))
    if storage == "bf16":  # numpy's sum of bfloat16 (ml_dtypes) rounds after each addition
        total = red.fold(b, e, [axis], True, 0.0, "bf16_sum_step", lambda bb, acc, v: rounded(bb.add(acc, v), bb))
    else:  # numpy's sum of float16 adds in float32 and rounds once
        total = rounded(red.sum(b, e, [axis], keepdim=True))
    s = b.broadcast_to(total, shape=x.type.shape)
    if op == "Softmax":
        return b.div(e, s)
    return b.sub(shifted, rounded(b.log(s)))


def _hardmax(b, x, axis):
    i = ix.arg_extremum(b, x, axis, True, True)
    pos = b.iota(shape=x.type.shape, axis=axis, dtype="i64")
    return b.convert(b.eq(pos, i), dtype=x.type.dtype)


@handler("Hardmax")
def hardmax(n: Node):
    return [_coerced(n, n.x(0), _hardmax)]


@handler("MatMul")
def matmul(n: Node):
    return [linalg.matmul(n.b, n.x(0), n.x(1))]


@handler("Gemm")
def gemm(n: Node):
    a, bm = n.x(0), n.x(1)
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if n.attr("transA", 0):
        a = sh.swap_axes(n.b, a, 0, 1)
    if n.attr("transB", 0) and a.type.rank == 2 and bm.type.rank == 2:  # a bᵀ as dot products of rows
        y = linalg.einsum(n.b, "xy,zy->xz", a, bm)
    else:
        bm = sh.swap_axes(n.b, bm, 0, 1) if n.attr("transB", 0) else bm
        y = linalg.matmul(n.b, a, bm)
    if alpha != 1:
        y = n.b.mul(y, scalar_lit(alpha, y.type.dtype))
    c = n.opt(2)
    if c is not None and not (isinstance(c, Lit) and c.value == 0):
        y = n.b.add(y, c if beta == 1 else n.b.mul(c, scalar_lit(beta, c.type.dtype)))
    return [y]


@handler("Einsum")
def einsum(n: Node):
    return [linalg.einsum_many(n.b, n.attr("equation"), n.xs())]



@handler("Det")
def det(n: Node):
    return [linalg.det(n.b, n.x(0))]
