"""Indexing with tensors: gather/scatter families, one-hot, argmax/argmin, top-k, cumulative sums.

Everything reduces to the `gather` and `scatter_add` prims along one axis, using flat
(row-major) positions computed with integer arithmetic when an op indexes several axes.
ONNX's negative indices count from the end; `wrap` turns them into positions first.
"""
from __future__ import annotations

from typing import Sequence

from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type, broadcast_shapes
from ._util import dim_atom, error, norm_axis, numel, scalar_lit
from .math import logical_or

LETTERS = "abcdefghijklmnopqrstuvwy"


def _i64(b, v: Atom) -> Atom:
    if not v.type.is_int:
        raise error(b, f"indices must be integers, got {v.type}")
    return v if v.type.dtype == "i64" else b.convert(v, dtype="i64")


def wrap(b, idx: Atom, n: Dim) -> Atom:
    """Indices with negative entries counted from the end of an axis of size n."""
    idx = _i64(b, idx)
    if isinstance(idx, Lit):
        return Lit(idx.value + n, idx.type) if idx.value < 0 and isinstance(n, int) else idx
    return b.select(b.lt(idx, Lit(0, Type("i64"))), b.add(idx, dim_atom(b, n)), idx)


def gather(b, x: Atom, idx: Atom, axis: int) -> Atom:
    """numpy take: x.shape[:axis] + idx.shape + x.shape[axis+1:] (negative indices wrap)."""
    axis = norm_axis(b, axis, x.type.rank)
    return b.gather(x, wrap(b, idx, x.type.shape[axis]), axis=axis)


def _clamped(b, idx: Atom, n: Dim) -> Atom:
    """An index into one of several axes read through one flat position: wrapped, then clamped into its own
    axis as one gather's index is (out of range, it would otherwise reach another row)."""
    return b.max(b.min(wrap(b, idx, n), b.sub(dim_atom(b, n), Lit(1, Type("i64")))), Lit(0, Type("i64")))


def take_many(b, x: Atom, idxs: Sequence[Atom], axis: int) -> Atom:
    """x[..., i0, i1, ...] with integer tensors on the consecutive axes from `axis` (torch's and numpy's
    advanced indexing): the indices broadcast together and pick elementwise, x[.., i0[s], i1[s], ..] for each
    position s of their broadcast shape, which takes the axes' place. Negative indices wrap, and each index is
    then clamped into its own axis, as one gather's is (a flat position would otherwise reach another row)."""
    shape: tuple | None = ()
    for i in idxs:
        shape = broadcast_shapes(shape, i.type.shape)
        if shape is None:
            raise error(b, "index tensors whose shapes do not broadcast: "
                           f"{', '.join(str(list(i.type.shape)) for i in idxs)}")
    k = len(idxs)
    dims = x.type.shape[axis:axis + k]
    pos = None
    for j, (i, d) in enumerate(zip(idxs, dims)):
        w = _clamped(b, i, d)
        stride = numel(dims[j + 1:])
        term = w if stride == 1 else b.mul(w, dim_atom(b, stride))
        pos = term if pos is None else b.add(pos, term)
    flat = b.reshape(x, shape=x.type.shape[:axis] + (numel(dims),) + x.type.shape[axis + k:])
    return b.gather(flat, pos, axis=axis)


def _strides(shape: Sequence[Dim]) -> list[Dim]:
    return [numel(shape[i + 1:]) for i in range(len(shape))]


def _coord(b, shape, axis: int) -> Atom:
    return b.iota(shape=tuple(shape), axis=axis, dtype="i64")


def flat_positions(b, x_shape, idx: Atom, axis: int) -> Atom:
    """Row-major positions into x of an elementwise index along axis (GatherElements' addressing)."""
    pos = None
    for d, stride in enumerate(_strides(x_shape)):
        c = idx if d == axis else _coord(b, idx.type.shape, d)
        term = c if stride == 1 else b.mul(c, dim_atom(b, stride))
        pos = term if pos is None else b.add(pos, term)
    return pos


def gather_elements(b, x: Atom, idx: Atom, axis: int) -> Atom:
    """out[i] = x[i with axis coordinate idx[i]] (out has idx's shape)."""
    axis = norm_axis(b, axis, x.type.rank)
    if idx.type.rank != x.type.rank:
        raise error(b, f"indices {idx.type} must have the rank of the data {x.type}")
    idx = wrap(b, idx, x.type.shape[axis])
    flat = b.reshape(x, shape=(numel(x.type.shape),))
    return b.gather(flat, flat_positions(b, x.type.shape, idx, axis), axis=0)


def _nd_rows(b, x_shape, idx: Atom, batch_dims: int) -> tuple[Atom, int]:
    """Row positions into x viewed as [prod(x.shape[:batch_dims + k]), rest] for GatherND/ScatterND indices."""
    k = idx.type.shape[-1]
    if not isinstance(k, int):
        raise error(b, "the last axis of the indices must have a static size")
    lead = x_shape[:batch_dims + k]
    strides = _strides(lead)
    out_shape = idx.type.shape[:-1]
    pos = None
    for j in range(batch_dims + k):
        if j < batch_dims:
            c = _coord(b, out_shape, j)
        else:
            c = _clamped(b, b.reshape(b.slice(idx, axis=idx.type.rank - 1, start=j - batch_dims,
                                              stop=j - batch_dims + 1), shape=out_shape), x_shape[j])
        term = c if strides[j] == 1 else b.mul(c, dim_atom(b, strides[j]))
        pos = term if pos is None else b.add(pos, term)
    return pos, k


def gather_nd(b, x: Atom, idx: Atom, batch_dims: int = 0) -> Atom:
    """ONNX GatherND: idx [..., k] picks slices x[batch..., i0..ik-1] (out = idx.shape[:-1] + rest)."""
    idx = _i64(b, idx)
    rows, k = _nd_rows(b, x.type.shape, idx, batch_dims)
    lead = x.type.shape[:batch_dims + k]
    x2 = b.reshape(x, shape=(numel(lead),) + x.type.shape[batch_dims + k:])
    return b.gather(x2, rows, axis=0)


def scatter_rows(b, x2: Atom, rows: Atom, upd: Atom, reduction: str) -> Atom:
    """x2 [R, ...] with upd [P..., ...] combined at rows [P...] along axis 0 by `reduction`."""
    if reduction == "add":
        return b.scatter_add(x2, rows, upd, axis=0)
    if reduction == "none":
        zero = Lit(False if x2.type.dtype == "bool" else 0, x2.type)
        hit_t = Type("i64", x2.type.shape)
        hits = b.scatter_add(Lit(0, hit_t), rows, b.broadcast_to(Lit(1, Type("i64")), shape=upd.type.shape), axis=0)
        placed = b.scatter_add(zero, rows, upd, axis=0) if x2.type.dtype != "bool" else \
            b.ne(b.scatter_add(Lit(0, hit_t), rows, b.convert(upd, dtype="i64"), axis=0), Lit(0, Type("i64")))
        return b.select(b.gt(hits, Lit(0, Type("i64"))), placed, x2)
    return _scatter_loop(b, x2, rows, upd, reduction)


def _scatter_loop(b, x2: Atom, rows: Atom, upd: Atom, reduction: str) -> Atom:
    """mul/max/min scatters, one update after the other (a loop over the updates)."""
    from ..prims.control import PRIMS_LOOP
    from ..prims.control import wrap as wrap_fn
    n = numel(rows.type.shape)
    rows1 = b.reshape(rows, shape=(n,))
    upd1 = b.reshape(upd, shape=(n,) + upd.type.shape[rows.type.rank:])
    row_t = Type(x2.type.dtype, x2.type.shape[1:])

    def body(bb, ps):
        _, acc, r, u = ps
        old = bb.index(acc, r, axis=0)
        new = {"mul": lambda: bb.mul(old, u), "max": lambda: bb.max(old, u), "min": lambda: bb.min(old, u)}[reduction]()
        return [bb.index_add(acc, r, bb.sub(new, old), axis=0)]

    f = wrap_fn("scatter_update", [Type("i64"), x2.type, Type("i64"), row_t], body)
    trip = dim_atom(b, n)
    return b.bind(PRIMS_LOOP, [trip, x2, rows1, upd1], dict(body=f, n_consts=0, n_carry=1, length=n,
                                                             reverse=False))[0]


def scatter_elements(b, x: Atom, idx: Atom, upd: Atom, axis: int, reduction: str = "none") -> Atom:
    """ONNX ScatterElements: x with upd put (or combined) at the elementwise index along axis."""
    axis = norm_axis(b, axis, x.type.rank)
    idx = wrap(b, idx, x.type.shape[axis])
    flat = b.reshape(x, shape=(numel(x.type.shape),))
    pos = flat_positions(b, x.type.shape, idx, axis)
    return b.reshape(scatter_rows(b, flat, pos, upd, reduction), shape=x.type.shape)


def scatter_nd(b, x: Atom, idx: Atom, upd: Atom, reduction: str = "none") -> Atom:
    """ONNX ScatterND: x with the slices upd put (or combined) at the index tuples idx [..., k]."""
    idx = _i64(b, idx)
    rows, k = _nd_rows(b, x.type.shape, idx, 0)
    x2 = b.reshape(x, shape=(numel(x.type.shape[:k]),) + x.type.shape[k:])
    return b.reshape(scatter_rows(b, x2, rows, upd, reduction), shape=x.type.shape)


def one_hot(b, idx: Atom, depth: int, off: Atom, on: Atom, axis: int = -1) -> Atom:
    """on where the position along the new axis equals idx (negative indices wrap), else off."""
    r = idx.type.rank + 1
    axis = axis + r if axis < 0 else axis
    if not 0 <= axis < r:
        raise error(b, f"axis {axis} is out of range for one-hot of {idx.type}")
    idx = wrap(b, idx, depth)
    shape = idx.type.shape[:axis] + (depth,) + idx.type.shape[axis:]
    expanded = b.reshape(idx, shape=idx.type.shape[:axis] + (1,) + idx.type.shape[axis:])
    hit = b.eq(b.iota(shape=shape, axis=axis, dtype="i64"), expanded)
    return b.select(hit, on, off)


def same(b, x: Atom, m: Atom) -> Atom:
    """x == m, NaN matching NaN (where a reduction's NaN came from: torch's max, argmax and topk take NaN as the
    largest value)."""
    if not x.type.is_float:
        return b.eq(x, m)
    from .math import isnan, logical_and
    return logical_or(b, b.eq(x, m), logical_and(b, isnan(b, x), isnan(b, m)))


def arg_extremum(b, x: Atom, axis: int, keepdims: bool, largest: bool, last: bool = False) -> Atom:
    """The (first, or last) position of the max (or min) along axis, as i64."""
    axis = norm_axis(b, axis, x.type.rank)
    kept = tuple(1 if i == axis else d for i, d in enumerate(x.type.shape))
    if not last and x.type.dtype != "bool":  # (one loop nest with the extremum: prims/tensor.py reduce_argmax)
        out = (b.reduce_argmax if largest else b.reduce_argmin)(x, axes=(axis,))
        return b.reshape(out, shape=kept) if keepdims else out
    m = b.reduce_max(x, axes=(axis,)) if largest else b.reduce_min(x, axes=(axis,))
    hit = same(b, x, b.reshape(m, shape=kept))
    pos = b.iota(shape=x.type.shape, axis=axis, dtype="i64")
    if last:
        out = b.reduce_max(b.select(hit, pos, Lit(-1, Type("i64"))), axes=(axis,))
    else:
        out = b.reduce_min(b.select(hit, pos, Lit(2**62, Type("i64"))), axes=(axis,))
    return b.reshape(out, shape=kept) if keepdims else out


def topk(b, x: Atom, k: int, axis: int, largest: bool = True) -> tuple[Atom, Atom]:
    """The k largest (or smallest) values along axis, sorted, with their positions (ties: lower first)."""
    from .shape import concatenate
    _ordered(b, x, "topk")
    axis = norm_axis(b, axis, x.type.rank)
    n = x.type.shape[axis]
    if isinstance(n, int) and not 0 <= k <= n:
        raise error(b, f"k = {k} is out of range for an axis of {n}")
    taken = Lit(False, Type("bool", x.type.shape))
    pos = b.iota(shape=x.type.shape, axis=axis, dtype="i64")
    kept = tuple(1 if i == axis else d for i, d in enumerate(x.type.shape))
    fill = scalar_lit(float("-inf") if largest else float("inf"), x.type.dtype) if x.type.is_float else \
        scalar_lit(_int_limit(x.type.dtype, largest), x.type.dtype)
    values, indices = [], []
    for _ in range(k):
        cand = b.select(taken, fill, x)
        m = b.reduce_max(cand, axes=(axis,)) if largest else b.reduce_min(cand, axes=(axis,))
        hit = logical_and_not(b, same(b, cand, b.reshape(m, shape=kept)), taken)
        i = b.reduce_min(b.select(hit, pos, Lit(2**62, Type("i64"))), axes=(axis,))
        i = b.reshape(i, shape=kept)
        at = b.eq(pos, i)  # the value is read where the index points: its gradient goes there alone, as torch's
        picked = b.reduce_sum(b.select(at, x, Lit(0, Type(x.type.dtype))), axes=(axis,))
        values.append(b.reshape(picked, shape=kept))
        indices.append(i)
        taken = logical_or(b, taken, b.eq(pos, i))
    if k == 0:
        raise error(b, "top-k with k = 0 gives empty tensors, which are not supported")
    return concatenate(b, values, axis), concatenate(b, indices, axis)


def sort(b, x: Atom, axis: int, descending: bool = True) -> tuple[Atom, Atom]:
    """x sorted along axis with the positions it came from (ties: lower position first), for an axis of
    any size, symbolic too: each element's rank counts the elements ahead of it (n² comparisons), and
    the result at rank r selects the element of that rank."""
    from .math import logical_and
    from .shape import permute
    _ordered(b, x, "sort")
    axis = norm_axis(b, axis, x.type.rank)
    r = x.type.rank
    perm = tuple(i for i in range(r) if i != axis) + (axis,)
    xt = permute(b, x, perm)
    lead, n = xt.type.shape[:-1], xt.type.shape[-1]
    pair = lead + (n, n)
    xi, xj = b.reshape(xt, shape=lead + (n, 1)), b.reshape(xt, shape=lead + (1, n))
    i, j = b.iota(shape=pair, axis=r - 1, dtype="i64"), b.iota(shape=pair, axis=r, dtype="i64")
    ahead = _less(b, xi, xj) if descending else _less(b, xj, xi)
    before = logical_or(b, ahead, logical_and(b, same(b, xj, xi), b.lt(j, i)))
    rank = b.reduce_sum(b.convert(before, dtype="i64"), axes=(r,))
    at = b.eq(b.reshape(rank, shape=lead + (1, n)), i)  # at[..., k, m]: element m has rank k
    values = b.reduce_sum(b.select(at, xj, Lit(0, Type(x.type.dtype))), axes=(r,))
    indices = b.reduce_sum(b.select(at, j, Lit(0, Type("i64"))), axes=(r,))
    back = tuple(perm.index(k) for k in range(r))
    return permute(b, values, back), permute(b, indices, back)


def _less(b, x: Atom, y: Atom) -> Atom:
    """x < y in torch's sort order, where NaN is larger than every number (so each element gets its own rank)."""
    if not x.type.is_float:
        return b.lt(x, y)
    from .math import isnan
    return logical_or(b, b.lt(x, y), logical_and_not(b, isnan(b, y), isnan(b, x)))


def logical_and_not(b, x: Atom, y: Atom) -> Atom:
    from .math import logical_and, logical_not
    return logical_and(b, x, logical_not(b, y))


def _ordered(b, x: Atom, what: str) -> None:
    """x has an order (strings, which are only compared for equality, do not)."""
    if x.type.is_str:
        raise error(b, f"{what} needs numbers: strings are only compared for equality")


def _int_limit(dtype: str, largest: bool) -> int:
    import numpy as np

    from ..ir.types import numpy_dtype
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min if largest else info.max)


def loop_rows(b, rows: Atom, inits: Sequence[Atom], step, name: str, reverse: bool = False) -> list[Atom]:
    """A loop over the leading axis of rows (from its end when reverse) carrying values started at inits:
    step(builder, carries, row) -> (new carries, ys of that row). Returns the final carries, then each y
    stacked along a new leading axis."""
    from ..prims.control import PRIMS_LOOP
    from ..prims.control import wrap as wrap_fn
    n = rows.type.shape[0]
    row = Type(rows.type.dtype, rows.type.shape[1:])

    def body(bb, ps):
        carries, ys = step(bb, list(ps[1:1 + len(inits)]), ps[-1])
        return [*carries, *ys]

    f = wrap_fn(name, [Type("i64"), *(a.type for a in inits), row], body)
    return list(b.bind(PRIMS_LOOP, [dim_atom(b, n), *inits, rows], dict(body=f, n_consts=0, n_carry=len(inits),
                                                                        length=n, reverse=reverse)))


def scan(b, x: Atom, axis: int, inits: Sequence[Atom], step, reverse: bool = False, name: str = "scan") -> Atom:
    """The y of a loop along axis (from its end when reverse) that carries values started at inits: at each
    position step(builder, carries, x at that position) -> (new carries, y at that position); the ys come back
    stacked along axis. One pass, each element read once: running sums, products, log-sum-exps."""
    axis = norm_axis(b, axis, x.type.rank)
    perm = (axis,) + tuple(i for i in range(x.type.rank) if i != axis)
    moved = b.transpose(x, perm=perm) if axis else x

    def one_y(bb, carries, xk):
        new, y = step(bb, carries, xk)
        return new, [y]

    ys = loop_rows(b, moved, inits, one_y, f"{name}_step", reverse)[-1]
    inv = tuple(perm.index(i) for i in range(x.type.rank))
    return b.transpose(ys, perm=inv) if axis else ys


def _row(x: Atom, axis: int) -> Type:
    """The type of x without axis (what a scan along axis carries)."""
    return Type(x.type.dtype, tuple(d for i, d in enumerate(x.type.shape) if i != axis))


def cumsum(b, x: Atom, axis: int, exclusive: bool = False, reverse: bool = False) -> Atom:
    """Running sums along axis (a scan: each element added once, so an inf or NaN reaches only the sums after
    it, as in torch; a product with a triangular matrix made 0 · inf = NaN of the sums before it)."""
    axis = norm_axis(b, axis, x.type.rank)

    def step(bb, carries, xk):
        new = bb.add(carries[0], xk)
        return [new], carries[0] if exclusive else new
    return scan(b, x, axis, [Lit(0.0 if x.type.is_float else 0, _row(x, axis))], step, reverse, "cumsum")


def cumprod(b, x: Atom, axis: int, exclusive: bool = False, reverse: bool = False) -> Atom:
    """Running products along axis: a loop carrying the product (a scan)."""
    axis = norm_axis(b, axis, x.type.rank)

    def step(bb, carries, xk):
        new = bb.mul(carries[0], xk)
        return [new], carries[0] if exclusive else new
    return scan(b, x, axis, [Lit(1.0 if x.type.is_float else 1, _row(x, axis))], step, reverse, "cumprod")


def logcumsumexp(b, x: Atom, axis: int) -> Atom:
    """log(cumsum(exp(x))) along axis, by a scan carrying the running maximum m and the sum s of exp(x - m),
    rescaled when m grows: no prefix underflows however far below the axis' maximum it lies ([0, 1000] gives
    [0, 1000]). Prefixes of -inf give -inf; once an inf is reached, inf."""
    from .math import isfinite
    axis = norm_axis(b, axis, x.type.rank)
    row = _row(x, axis)

    def step(bb, carries, xk):
        m, s = carries
        new_m = bb.select(bb.gt(xk, m), xk, m)
        finite = isfinite(bb, new_m)
        shift = bb.select(finite, new_m, Lit(0.0, row))
        new_s = bb.add(bb.mul(s, bb.exp(bb.sub(m, shift))), bb.exp(bb.sub(xk, shift)))
        return [new_m, new_s], bb.select(finite, bb.add(shift, bb.log(new_s)), new_m)
    return scan(b, x, axis, [Lit(float("-inf"), row), Lit(0.0, row)], step, name="logcumsumexp")


def cumulative_extremum(b, x: Atom, axis: int, largest: bool) -> tuple[Atom, Atom]:
    """(values, indices) of torch.cummax / cummin along axis: the running max (min), a NaN kept from where it
    appears, and the last position at or before each where that value stands (torch's index at ties). The
    values are one scan; the indices compare every pair of positions along the axis (n² of them)."""
    from .math import extremum
    axis = norm_axis(b, axis, x.type.rank)
    def step(bb, carries, xk):
        m = extremum(bb, carries[0], xk, largest)
        return [m], m

    values = scan(b, x, axis, [_first(b, x, axis)], step, name="cummax" if largest else "cummin")
    n = x.type.shape[axis]
    xj = b.reshape(x, shape=x.type.shape[:axis + 1] + (1,) + x.type.shape[axis + 1:])        # x[.., j, 1, ..]
    vi = b.reshape(values, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:])           # v[.., 1, i, ..]
    pair = x.type.shape[:axis] + (n, n) + x.type.shape[axis + 1:]
    j = b.iota(shape=pair, axis=axis, dtype="i64")
    i = b.iota(shape=pair, axis=axis + 1, dtype="i64")
    hit = b.select(b.le(j, i), same(b, b.broadcast_to(xj, shape=pair), b.broadcast_to(vi, shape=pair)),
                   Lit(False, Type("bool")))
    indices = b.reduce_max(b.select(hit, j, Lit(-1, Type("i64"))), axes=(axis,))
    return values, indices


def _first(b, x: Atom, axis: int) -> Atom:
    """x at position 0 of axis, without the axis (a scan's first carry)."""
    first = b.slice(x, axis=axis, start=0, stop=1)
    return b.reshape(first, shape=tuple(d for k, d in enumerate(x.type.shape) if k != axis))


def searchsorted(b, boundaries: Atom, values: Atom, right: bool) -> Atom:
    """For each value the number of sorted 1-D boundaries below it (right: at or below it), its insertion
    index, an i64 tensor of the values' shape (torch.searchsorted, torch.bucketize): one comparison per
    boundary, summed."""
    if boundaries.type.rank != 1:
        raise error(b, f"the sorted sequence must be 1-D, got {boundaries.type}", hint="search row by row in a loop")
    if values.type.dtype != boundaries.type.dtype:
        values = b.convert(values, dtype=boundaries.type.dtype)
    column = b.reshape(values, shape=values.type.shape + (1,))
    below = b.le(boundaries, column) if right else b.lt(boundaries, column)
    return b.reduce_sum(b.convert(below, dtype="i64"), axes=(values.type.rank,))


def index_add(b, x: Atom, axis: int, idx: Atom, source: Atom) -> Atom:
    """x with source's slices added at the positions idx [k] along axis (torch.index_add; repeats add up)."""
    axis = norm_axis(b, axis, x.type.rank)
    if idx.type.rank != 1:
        raise error(b, f"index_add takes a 1-D index, got {idx.type}")
    along = tuple(idx.type.shape[0] if i == axis else 1 for i in range(source.type.rank))
    spread = b.broadcast_to(b.reshape(idx, shape=along), shape=source.type.shape)
    return scatter_elements(b, x, spread, source, axis, "add")
