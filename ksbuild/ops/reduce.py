"""Reductions: sum, mean, max, min over axes (keepdim or not), logsumexp, softmax."""
from __future__ import annotations

from typing import Sequence

from ..ir.core import Atom
from ._util import error, norm_axes, scalar_lit, size_as


def keep_dims(b, y: Atom, x: Atom, axes: Sequence[int]) -> Atom:
    """A reduction result of x with the reduced axes put back as size 1 (keepdim=True)."""
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
    return b.reshape(y, shape=shape) if shape != y.type.shape else y


def expand_back(b, y: Atom, x: Atom, axes: Sequence[int]) -> Atom:
    """A reduction result broadcast back over the reduced axes of x."""
    return b.broadcast_to(keep_dims(b, y, x, axes), shape=x.type.shape)


def _reduce(b, prim: str, x: Atom, axes, keepdim: bool) -> Atom:
    ax = norm_axes(b, axes, x.type.rank)
    y = b.bind(_prim(prim), [x], {"axes": ax})[0] if ax else x
    return keep_dims(b, y, x, ax) if keepdim else y


def sum(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:  # noqa: A001
    """Σ over axes (None: all); bools are counted as i64."""
    if x.type.dtype == "bool":
        x = b.convert(x, dtype="i64")
    return _reduce(b, "reduce_sum", x, axes, keepdim)


def mean(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:
    """The average over axes (x must be float)."""
    if not x.type.is_float:
        raise error(b, f"mean needs a float tensor, got {x.type}")
    ax = norm_axes(b, axes, x.type.rank)
    s = _reduce(b, "reduce_sum", x, ax, keepdim)
    return b.div(s, size_as(b, [x.type.shape[a] for a in ax], x.type.dtype))


def amax(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:
    """The maximum over axes."""
    _numeric(b, x, "max")
    return _reduce(b, "reduce_max", x, axes, keepdim)


def amin(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:
    """The minimum over axes."""
    _numeric(b, x, "min")
    return _reduce(b, "reduce_min", x, axes, keepdim)


def _numeric(b, x: Atom, what: str) -> None:
    if x.type.dtype == "bool":
        raise error(b, f"{what} of a bool tensor is not supported")


def logsumexp(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:
    """log Σ exp(x) = m + log Σ exp(x − m), with m = max x held constant under differentiation (0 where the
    max is ±inf, as torch's: the sum of exps is then inf or 0, never inf − inf)."""
    ax = norm_axes(b, axes, x.type.rank)
    m = b.reduce_max(b.stop_gradient(x), axes=ax)
    if x.type.is_float:
        inf, zero = scalar_lit(float("inf"), x.type.dtype), scalar_lit(0, x.type.dtype)
        m = b.select(b.eq(b.abs(m), inf), zero, m)
    s = b.reduce_sum(b.exp(b.sub(x, expand_back(b, m, x, ax))), axes=ax)
    y = b.add(b.log(s), m)
    return keep_dims(b, y, x, ax) if keepdim else y


def _minus_max(b, x: Atom, ax) -> Atom:
    """x − max x along the axes, the max held constant under differentiation. Subtracting it first keeps the
    precision softmax needs: x − logsumexp(x) loses log n when |x| is large (a row masked with -1e9 in
    float32 gave softmax 1 everywhere). An infinite max makes the row NaN, as in torch."""
    return b.sub(x, expand_back(b, b.reduce_max(b.stop_gradient(x), axes=ax), x, ax))


def log_softmax(b, x: Atom, axis: int) -> Atom:
    """(x − max) − log Σ exp(x − max) along one axis."""
    ax = norm_axes(b, [axis], x.type.rank)
    d = _minus_max(b, x, ax)
    return b.sub(d, expand_back(b, b.log(b.reduce_sum(b.exp(d), axes=ax)), x, ax))


def softmax(b, x: Atom, axis: int) -> Atom:
    """exp(x − max) / Σ exp(x − max) along one axis."""
    ax = norm_axes(b, [axis], x.type.rank)
    e = b.exp(_minus_max(b, x, ax))
    return b.div(e, expand_back(b, b.reduce_sum(e, axes=ax), x, ax))


def safe_softmax(b, x: Atom, axis: int, rows: Atom | None = None) -> Atom:
    """softmax along axis, 0 for a row that is all -inf (attention's query that may attend to nothing: torch's
    _safe_softmax), with finite derivatives there too: e = exp(x - m) is 0 in such a row and the sum it is
    divided by is taken as 1, so no 0 · NaN or 0 / 0 reaches the backward pass (exp(x - logsumexp(x)) then
    masking the NaN would). rows: which rows are not all -inf, when the caller knows (a mask's rows): the
    guards then read it (and vanish where it is a literal True)."""
    ax = norm_axes(b, [axis], x.type.rank)
    m = b.reduce_max(b.stop_gradient(x), axes=ax)
    inf, zero = scalar_lit(float("inf"), x.type.dtype), scalar_lit(0, x.type.dtype)
    m = b.select(b.eq(b.abs(m), inf), zero, m) if rows is None else b.select(rows, m, zero)
    e = b.exp(b.sub(x, expand_back(b, m, x, ax)))
    s = b.reduce_sum(e, axes=ax)
    s = b.select(b.eq(s, zero), scalar_lit(1, x.type.dtype), s) if rows is None else \
        b.select(rows, s, scalar_lit(1, x.type.dtype))
    return b.div(e, expand_back(b, s, x, ax))


def _prim(name: str):
    from ..prims import PRIMS
    return PRIMS[name]


def prod(b, x: Atom, axes: Sequence[int] | None = None, keepdim: bool = False) -> Atom:
    """The product over axes: a loop multiplying the reduced elements into an accumulator."""
    one = True if x.type.dtype == "bool" else 1
    return fold(b, x, axes, keepdim, one, "prod_step", lambda bb, acc, v: bb.mul(acc, v))


def fold(b, x: Atom, axes: Sequence[int] | None, keepdim: bool, init, name: str, step) -> Atom:
    """A loop over the reduced elements in order: acc = step(acc, element), from acc = init."""
    from ..ir.core import Lit
    from ..ir.types import Type
    from ._util import numel
    from .index import loop_rows
    ax = norm_axes(b, axes, x.type.rank)
    if not ax:
        return x
    rest = [i for i in range(x.type.rank) if i not in ax]
    rest_shape = tuple(x.type.shape[i] for i in rest)
    count = numel([x.type.shape[i] for i in ax])
    moved = b.transpose(x, perm=tuple(ax) + tuple(rest)) if tuple(ax) + tuple(rest) != tuple(range(x.type.rank)) \
        else x
    flat = b.reshape(moved, shape=(count,) + rest_shape)
    acc_t = Type(x.type.dtype, rest_shape)
    y = loop_rows(b, flat, [Lit(init, acc_t)], lambda bb, accs, v: ([step(bb, accs[0], v)], []), name)[0]
    return keep_dims(b, y, x, ax) if keepdim else y
