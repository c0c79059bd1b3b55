"""Shape ops: reshape, unsqueeze, squeeze, transpose/permute, concatenate, stack."""
from __future__ import annotations

from typing import Sequence

from ..ir.core import Atom
from ..ir.types import Dim, dim_add, dim_sub, promote
from ._util import error, norm_axis, numel


def reshape(b, x: Atom, dims: Sequence[Dim]) -> Atom:
    """x with a new shape; one entry may be -1 (inferred from the others)."""
    dims = list(dims)
    if dims.count(-1) > 1:
        raise error(b, "only one -1 is allowed in a shape")
    if -1 in dims:
        dims[dims.index(-1)] = _infer(b, x, dims)
    known = all(isinstance(d, int) for d in dims + list(x.type.shape))
    if known and numel(dims) != numel(x.type.shape):
        raise error(b, f"cannot reshape {x.type} to [{', '.join(map(str, dims))}]")
    return b.reshape(x, shape=tuple(dims)) if tuple(dims) != x.type.shape else x


def _infer(b, x: Atom, dims: list) -> Dim:
    """The -1 entry of a reshape: the elements of x over the product of the other entries."""
    rest = list(x.type.shape)
    for d in dims:
        if d == -1 or d == 1:
            continue
        if d in rest:
            rest.remove(d)
        elif isinstance(d, int) and all(isinstance(r, int) for r in rest) and numel(rest) % d == 0:
            rest = [numel(rest) // d]
        else:
            raise error(b, f"cannot infer the -1 in reshape of {x.type} to {dims}", hint="give every dim explicitly")
    return numel(rest)


def unsqueeze(b, x: Atom, axis: int) -> Atom:
    """A new axis of size 1 at position axis (negative counts from the end of the result)."""
    a = axis + x.type.rank + 1 if axis < 0 else axis
    if not 0 <= a <= x.type.rank:
        raise error(b, f"dim {axis} is out of range for unsqueeze of {x.type}")
    return b.reshape(x, shape=x.type.shape[:a] + (1,) + x.type.shape[a:])


def squeeze(b, x: Atom, axes: Sequence[int] | None = None) -> Atom:
    """x without the given size-1 axes (None: every size-1 axis; axes of other sizes are kept, as torch does)."""
    if axes is None:
        keep = [d for d in x.type.shape if d != 1]
    else:
        drop = {norm_axis(b, a, x.type.rank) for a in axes}
        keep = [d for i, d in enumerate(x.type.shape) if i not in drop or d != 1]
    return b.reshape(x, shape=tuple(keep)) if len(keep) != x.type.rank else x


def swap_axes(b, x: Atom, i: int, j: int) -> Atom:
    """x with axes i and j exchanged."""
    i, j = norm_axis(b, i, x.type.rank), norm_axis(b, j, x.type.rank)
    perm = list(range(x.type.rank))
    perm[i], perm[j] = perm[j], perm[i]
    return permute(b, x, perm)


def permute(b, x: Atom, perm: Sequence[int]) -> Atom:
    """x with its axes permuted: result axis k is x's axis perm[k]."""
    perm = tuple(norm_axis(b, p, x.type.rank) for p in perm)
    if sorted(perm) != list(range(x.type.rank)):
        raise error(b, f"bad permutation {list(perm)} for a tensor of rank {x.type.rank}")
    return b.transpose(x, perm=perm) if perm != tuple(range(x.type.rank)) else x


def concatenate(b, xs: Sequence[Atom], axis: int) -> Atom:
    """xs joined along axis (dtypes promoted); each piece is padded with zeros and the pieces added."""
    if not xs:
        raise error(b, "concatenate needs at least one tensor")
    axis = norm_axis(b, axis, xs[0].type.rank)
    dtype = xs[0].type.dtype
    for x in xs:
        dtype = promote(dtype, x.type.dtype)
    xs = [x if x.type.dtype == dtype else b.convert(x, dtype=dtype) for x in xs]
    total: Dim = 0
    first = [d for i, d in enumerate(xs[0].type.shape) if i != axis]
    for x in xs:
        if x.type.rank != xs[0].type.rank or [d for i, d in enumerate(x.type.shape) if i != axis] != first:
            raise error(b, f"cannot concatenate {xs[0].type} and {x.type} along dim {axis}")
        total = dim_add(total, x.type.shape[axis])
    if len(xs) == 1:
        return xs[0]
    out, lo = None, 0
    for x in xs:
        n = x.type.shape[axis]
        padded = b.pad(x, axis=axis, lo=lo, hi=dim_sub(total, dim_add(lo, n)))
        out = padded if out is None else b.add(out, padded)
        lo = dim_add(lo, n)
    return out


def stack(b, xs: Sequence[Atom], axis: int) -> Atom:
    """xs joined along a new axis."""
    if not xs:
        raise error(b, "stack needs at least one tensor")
    a = axis + xs[0].type.rank + 1 if axis < 0 else axis
    return concatenate(b, [unsqueeze(b, x, a) for x in xs], a)


def move_axis0(b, x: Atom, axis: int) -> Atom:
    """Axis 0 of x moved to position axis (the others keep their order)."""
    if axis == 0:
        return x
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, x.type.rank))
    return b.transpose(x, perm=tuple(perm))
