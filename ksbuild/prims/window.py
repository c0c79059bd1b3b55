"""Sliding windows (the patches of convolution and pooling) and their transpose.

window[axis, size, stride, dilation](x)   [..., n, ...] -> [..., m, size, ...] with
    out[..., o, k, ...] = x[..., o*stride + k*dilation, ...],  m = (n - dilation*(size-1) - 1) // stride + 1
    A strided view (no copy in C++). Convolution is an einsum over windows of every spatial axis;
    pooling is a reduction over them.
fold[axis, stride, dilation, n](y)        [..., m, size, ...] -> [..., n, ...], the transpose:
    out[..., o*stride + k*dilation, ...] += y[..., o, k, ...] (overlapping windows add up)
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.types import Dim, Type, dim_add, dim_floordiv, dim_sub, dim_value
from .base import Prim, finite, first_rows, unsigned


def window_count(n: Dim, size: int, stride: int, dilation: int) -> Dim:
    """How many windows of `size` taps (spaced by dilation, moved by stride) fit in n."""
    span = dilation * (size - 1) + 1
    return dim_add(dim_floordiv(dim_sub(n, span), stride), 1)


def _check(axis: int, rank: int, size: int, stride: int, dilation: int) -> None:
    if not 0 <= axis < rank:
        raise KsbuildError(f"window axis {axis} out of range for rank {rank}")
    if size < 1 or stride < 1 or dilation < 1:
        raise KsbuildError(f"window size, stride and dilation must be >= 1, got {size}, {stride}, {dilation}")


def _window_rule(in_types, axis, size, stride, dilation):
    (x,) = in_types
    _check(axis, x.rank, size, stride, dilation)
    n = x.shape[axis]
    m = window_count(n, size, stride, dilation)
    if isinstance(m, int) and m < 1:
        raise KsbuildError(f"a window of {size} taps (dilation {dilation}) does not fit in an axis of {n}")
    return (Type(x.dtype, x.shape[:axis] + (m, size) + x.shape[axis + 1:]),)


def _taps(m: int, size: int, stride: int, dilation: int) -> np.ndarray:
    """[m, size] positions read by each window."""
    return np.arange(m)[:, None] * stride + np.arange(size)[None, :] * dilation


def _window_eval(x, axis, size, stride, dilation, env):
    m = (x.shape[axis] - dilation * (size - 1) - 1) // stride + 1
    return (np.take(x, _taps(m, size, stride, dilation), axis=axis),)


def _window_emit(ctx, eqn) -> None:
    # a strided view: [o, k] reads o*stride + k*dilation
    p, out = eqn.params, eqn.outs[0]
    count = out.type.shape[p["axis"]]
    ctx.view(eqn, lambda s: s.window(p["axis"], count, p["size"], p["stride"], p["dilation"]))


window = Prim(
    name="window",
    sign=unsigned,
    nonfinite=finite,
    strings=True,
    view=True,
    type_rule=_window_rule,
    eval=_window_eval,
    # linear: d window(x) = window(dx); x̄ = fold(ȳ)
    jvp=lambda b, p, t, axis, size, stride, dilation: (
        [b.window(p[0], axis=axis, size=size, stride=stride, dilation=dilation)],
        [b.window(t[0], axis=axis, size=size, stride=stride, dilation=dilation) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, axis, size, stride, dilation: [
        b.fold(cts[0], axis=axis, stride=stride, dilation=dilation, n=ins[0].type.shape[axis])
        if cts[0] is not None else None],
    batch=lambda b, ins, batched, size_, axis, size, stride, dilation: (
        [b.window(ins[0], axis=axis + 1, size=size, stride=stride, dilation=dilation)], [True]),
    emit=_window_emit,
    rows=lambda eqn, n: first_rows(eqn, n) if eqn.params["axis"] != 0 else None,
    doc="sliding windows along an axis: [.., n, ..] -> [.., windows, taps, ..] (a strided view)",
)


def _fold_rule(in_types, axis, stride, dilation, n):
    (y,) = in_types
    if not 0 <= axis < y.rank - 1:
        raise KsbuildError(f"fold axis {axis} out of range for {y}")
    size = y.shape[axis + 1]
    _check(axis, y.rank, size if isinstance(size, int) else 1, stride, dilation)
    if not isinstance(size, int) or window_count(n, size, stride, dilation) != y.shape[axis]:
        raise KsbuildError(f"fold of {y} along axis {axis}: {y.shape[axis]} windows of {size} taps do not come "
                           f"from an axis of {n} (stride {stride}, dilation {dilation})")
    return (Type(y.dtype, y.shape[:axis] + (n,) + y.shape[axis + 2:]),)


def _fold_eval(y, axis, stride, dilation, n, env):
    m, size = y.shape[axis], y.shape[axis + 1]
    n = dim_value(n, env)
    out = np.zeros(y.shape[:axis] + (n,) + y.shape[axis + 2:], dtype=y.dtype)
    moved = np.moveaxis(out, axis, 0)
    vals = np.moveaxis(y, [axis, axis + 1], [0, 1])
    np.add.at(moved, _taps(m, size, stride, dilation), vals)
    return (out,)


def _fold_emit(ctx, eqn) -> None:
    # zeros, then every window added back at its positions (through a window view of the output)
    (y,), (out,), p = eqn.ins, eqn.outs, eqn.params
    dst = ctx.target(out, "folded")
    ctx.fill(dst, ctx.literal(0, out.type), out.type)
    view = dst.window(p["axis"], y.type.shape[p["axis"]], y.type.shape[p["axis"] + 1], p["stride"], p["dilation"])
    sy = ctx.storage(y)
    order = _fold_loop_order(y.type.shape, p["axis"], p["stride"])
    opened = ctx.open_loops([y.type.shape[j] for j in order])
    loops = [opened[order.index(j)] for j in range(y.type.rank)]
    ctx.line(f"{view.at(loops)} += {sy.at(loops)};")
    ctx.close_loops(loops)
    ctx.env[out] = dst


def _fold_loop_order(shape, axis: int, stride: int) -> list[int]:
    """The loops of a fold over y's axes in order, except that when the taps end the shape and the windows
    move by one (a stride-1 convolution's input gradient), the tap loop goes just outside the window loop:
    the innermost loop then runs along consecutive output positions, which vectorizes, instead of over a
    few taps."""
    if axis + 2 != len(shape) or stride != 1:
        return list(range(len(shape)))
    return list(range(axis)) + [axis + 1, axis]


fold = Prim(
    name="fold",  # (no strings: it sums the windows' overlapping elements)
    sign=unsigned,
    nonfinite=finite,
    type_rule=_fold_rule,
    eval=_fold_eval,
    # linear: d fold(y) = fold(dy); ȳ = window(x̄)
    jvp=lambda b, p, t, axis, stride, dilation, n: (
        [b.fold(p[0], axis=axis, stride=stride, dilation=dilation, n=n)],
        [b.fold(t[0], axis=axis, stride=stride, dilation=dilation, n=n) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, axis, stride, dilation, n: [
        b.window(cts[0], axis=axis, size=ins[0].type.shape[axis + 1], stride=stride, dilation=dilation)
        if cts[0] is not None else None],
    batch=lambda b, ins, batched, size_, axis, stride, dilation, n: (
        [b.fold(ins[0], axis=axis + 1, stride=stride, dilation=dilation, n=n)], [True]),
    emit=_fold_emit,
    doc="overlap-add of windows back into an axis (the transpose of window)",
)
