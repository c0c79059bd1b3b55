"""Shape ops: reshape, unsqueeze, squeeze, transpose/permute, concatenate, stack."""
from __future__ import annotations

import re
from typing import Sequence

from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub, promote
from ._util import dim_atom, error, norm_axis, numel


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
    if not known and _sizes_differ(numel(dims), numel(x.type.shape)):
        raise error(b, f"cannot reshape {x.type} to [{', '.join(map(str, dims))}]: the numbers of elements "
                    f"{numel(x.type.shape)} and {numel(dims)} differ for most values of the symbolic dims",
                    hint="a fixed size where a dim is symbolic (torch.onnx.export(dynamo=False) bakes some traced "
                         "sizes into Reshape targets; export with dynamo=True, or make that axis static)")
    return b.reshape(x, shape=tuple(dims)) if tuple(dims) != x.type.shape else x


def _sizes_differ(a: Dim, b: Dim) -> bool:
    """True when two element counts are different polynomials of the symbolic dims (a floor division in
    either may be equal for the values the caller passes, e.g. n and 2*(n // 2) for an even n: not judged)."""
    return a != b and "//" not in str(a) + str(b)


def _infer(b, x: Atom, dims: list) -> Dim:
    """The -1 entry of a reshape: the elements of x over the product of the other entries (factors
    common to both sides cancel first, so symbolic sizes divide out: [4*batch, 5] to [batch, 4, -1])."""
    rest = [f for d in x.type.shape for f in _factors(d)]
    known = []
    for f in (f for d in dims if d != -1 for f in _factors(d)):
        if f == 1:
            continue
        if f in rest:
            rest.remove(f)
        else:
            known.append(f)
    n, k = numel(rest), numel(known)
    if isinstance(k, int) and k > 0:
        q = dim_floordiv(n, k)
        if dim_mul(q, k) == n:
            return q
    raise error(b, f"cannot infer the -1 in reshape of {x.type} to {dims}", hint="give every dim explicitly")


def _factors(d: Dim) -> list[Dim]:
    """A dim as the factors of its product: 4*batch is [4, 'batch']; a sum such as n + 1 is one factor."""
    if isinstance(d, str) and re.fullmatch(r"\w+(\*\w+)*", d):
        return [int(f) if f.isdigit() else f for f in d.split("*")]
    return [d]


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
    """xs joined along axis (dtypes promoted); each piece is padded with zeros and the pieces added (or'ed,
    for bool pieces padded with false; strings, which have no sum, picked by their position along axis)."""
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
            rest = [d for i, d in enumerate(x.type.shape) if i != axis]
            differ = [(u, v) for u, v in zip(first, rest) if u != v and not (isinstance(u, int) and isinstance(v, int))]
            hint = None
            if x.type.rank == xs[0].type.rank and differ:
                names = all(isinstance(d, str) and d.isidentifier() for pair in differ for d in pair)
                hint = (f"{differ[0][0]} and {differ[0][1]} are run-time sizes of their own, which ksbuild cannot "
                        "know to be equal: give them one name (a dim_param, Dim or annotation) if they are one") \
                    if names else ("these sizes are equal only for some values of the run-time dims (a size halved "
                                   "by pooling and doubled by upsampling is the original only when it is even), "
                                   "which ksbuild cannot know: give those dims fixed sizes when exporting")
            raise error(b, f"cannot concatenate {xs[0].type} and {x.type} along dim {axis}", hint)
        total = dim_add(total, x.type.shape[axis])
    if len(xs) == 1:
        return xs[0]
    out, lo = None, 0
    for x in xs:
        n = x.type.shape[axis]
        padded = b.pad(x, axis=axis, lo=lo, hi=dim_sub(total, dim_add(lo, n)))
        if out is None:
            out = padded
        elif dtype == "bool":
            from .math import logical_or
            out = logical_or(b, out, padded)
        elif dtype == "str":
            from .math import logical_and
            at = b.iota(shape=padded.type.shape, axis=axis, dtype="i64")
            mine = logical_and(b, b.ge(at, dim_atom(b, lo)), b.lt(at, dim_atom(b, dim_add(lo, n))))
            out = b.select(mine, padded, out)
        else:
            out = b.add(out, padded)
        lo = dim_add(lo, n)
    return out


def stack(b, xs: Sequence[Atom], axis: int) -> Atom:
    """xs joined along a new axis."""
    if not xs:
        raise error(b, "stack needs at least one tensor")
    other = next((x for x in xs if x.type.shape != xs[0].type.shape), None)
    if other is not None:
        raise error(b, f"cannot stack {xs[0].type} and {other.type}: the tensors must have one shape")
    a = axis + xs[0].type.rank + 1 if axis < 0 else axis
    return concatenate(b, [unsqueeze(b, x, a) for x in xs], a)


def move_axis0(b, x: Atom, axis: int) -> Atom:
    """Axis 0 of x moved to position axis (the others keep their order)."""
    if axis == 0:
        return x
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, x.type.rank))
    return b.transpose(x, perm=tuple(perm))


def expand(b, x: Atom, dims: Sequence[Dim]) -> Atom:
    """x broadcast with dims (numpy rules in both directions: a 1 in dims keeps x's size)."""
    from ..ir.types import broadcast_shapes
    out = broadcast_shapes(x.type.shape, tuple(dims))
    if out is None:
        raise error(b, f"cannot expand {x.type} to [{', '.join(map(str, dims))}]")
    return x if out == x.type.shape else b.broadcast_to(x, shape=out)


def tile(b, x: Atom, repeats: Sequence[int]) -> Atom:
    """x repeated `repeats[i]` times along each axis i."""
    if len(repeats) != x.type.rank:
        raise error(b, f"tile of {x.type} needs {x.type.rank} repeats, got {len(repeats)}")
    for axis, r in enumerate(repeats):
        if r == 1:
            continue
        s = x.type.shape
        lifted = b.reshape(x, shape=s[:axis] + (1,) + s[axis:])
        spread = b.broadcast_to(lifted, shape=s[:axis] + (r,) + s[axis:])
        x = b.reshape(spread, shape=s[:axis] + (dim_mul(r, s[axis]),) + s[axis + 1:])
    return x


def repeat_each(b, x: Atom, axis: int, r: int) -> Atom:
    """Each element along axis repeated r times in place (torch's repeat_interleave(r, axis))."""
    s = x.type.shape
    lifted = b.reshape(x, shape=s[:axis + 1] + (1,) + s[axis + 1:])
    spread = b.broadcast_to(lifted, shape=s[:axis + 1] + (r,) + s[axis + 1:])
    return b.reshape(spread, shape=s[:axis] + (dim_mul(r, s[axis]),) + s[axis + 1:])


def strided_slice(b, x: Atom, axis: int, start: Dim, stop: Dim, step: int) -> Atom:
    """x[start:stop:step] along axis with bounds already clamped (step > 0: a window view)."""
    if step == 1:
        return x if (start, stop) == (0, x.type.shape[axis]) else b.slice(x, axis=axis, start=start, stop=stop)
    if step < 0:
        n = x.type.shape[axis]
        # reversed positions start, start+step, ... > stop map to n-1-start, ... in flip(x)
        return strided_slice(b, flip(b, x, axis), axis, dim_sub(dim_sub(n, 1), start), dim_sub(dim_sub(n, 1), stop),
                             -step)
    part = b.slice(x, axis=axis, start=start, stop=stop)
    length = part.type.shape[axis]
    if not isinstance(length, int):  # x[:, ::2] of a dynamic axis: ceil(length / step) elements, gathered
        count = dim_floordiv(dim_add(length, step - 1), step)
        at = b.mul(b.iota(shape=(count,), axis=0, dtype="i64"), Lit(step, Type("i64")))
        return b.gather(part, at, axis=axis)
    count = -(-length // step)
    if count == 0:
        raise error(b, "an empty slice is not supported")
    part = b.slice(part, axis=axis, start=0, stop=(count - 1) * step + 1)
    w = b.window(part, axis=axis, size=1, stride=step, dilation=1)
    return b.reshape(w, shape=part.type.shape[:axis] + (count,) + part.type.shape[axis + 1:])


def pad_mode(b, x: Atom, axis: int, lo: int, hi: int, mode: str) -> Atom:
    """x extended along axis by `reflect` (mirror, edge excluded), `edge` (repeat) or `wrap` (periodic)."""
    n = x.type.shape[axis]
    if lo == 0 and hi == 0:
        return x
    if mode in ("edge", "wrap") and lo >= 0 and hi >= 0 and (mode == "edge" or _fits(n, max(lo, hi))):
        return _pad_by_slices(b, x, axis, lo, hi, mode)
    total = dim_add(dim_add(lo, n), hi)
    pos = b.sub(b.iota(shape=(total,), axis=0, dtype="i64"), _lit_i64(lo))
    last = b.sub(dim_atom(b, n), _lit_i64(1))
    if mode == "edge":
        src = b.max(b.min(pos, last), _lit_i64(0))
    elif mode == "wrap":
        src = b.mod(pos, dim_atom(b, n))
    elif mode == "reflect":
        period = b.mul(last, _lit_i64(2))
        p = b.mod(pos, b.max(period, _lit_i64(1)))
        src = b.select(b.gt(p, last), b.sub(period, p), p)
    else:
        raise error(b, f"unknown pad mode '{mode}'")
    return b.gather(x, src, axis=axis)


def _fits(n: Dim, k: int) -> bool:
    return isinstance(n, int) and k <= n


def _pad_by_slices(b, x: Atom, axis: int, lo: int, hi: int, mode: str) -> Atom:
    """x with lo and hi positions joined to it along axis: its edge slices broadcast (edge) or its far ends (wrap);
    views and one copy, where the gather of a clamped or wrapped index reads an index per element."""
    n, shape = x.type.shape[axis], x.type.shape

    def piece(start: Dim, count: int) -> Atom:
        if mode == "wrap":
            return b.slice(x, axis=axis, start=start, stop=dim_add(start, count))
        one = b.slice(x, axis=axis, start=start, stop=dim_add(start, 1))
        return one if count == 1 else b.broadcast_to(one, shape=shape[:axis] + (count,) + shape[axis + 1:])
    low = [piece(dim_sub(n, lo) if mode == "wrap" else 0, lo)] if lo else []
    high = [piece(0 if mode == "wrap" else dim_sub(n, 1), hi)] if hi else []
    return concatenate(b, low + [x] + high, axis)


def _lit_i64(v: int):
    from ..ir.core import Lit
    from ..ir.types import Type
    return Lit(v, Type("i64"))


def split(b, x: Atom, axis: int, sizes: Sequence[Dim]) -> list[Atom]:
    """x cut along axis into consecutive pieces of the given sizes."""
    axis = norm_axis(b, axis, x.type.rank)
    total: Dim = 0
    out = []
    for s in sizes:
        out.append(b.slice(x, axis=axis, start=total, stop=dim_add(total, s)))
        total = dim_add(total, s)
    if total != x.type.shape[axis]:
        raise error(b, f"split sizes {list(sizes)} do not add up to {x.type.shape[axis]}")
    return out


def depth_to_space(b, x: Atom, block: int, mode: str = "DCR") -> Atom:
    """[N, C, H, W] -> [N, C / block², H·block, W·block] (DCR: depth-column-row order, CRD: column-row-depth)."""
    n, c, h, w = x.type.shape
    c2 = dim_floordiv_exact(b, c, block * block)
    if mode == "DCR":
        t = b.reshape(x, shape=(n, block, block, c2, h, w))
        t = b.transpose(t, perm=(0, 3, 4, 1, 5, 2))
    else:
        t = b.reshape(x, shape=(n, c2, block, block, h, w))
        t = b.transpose(t, perm=(0, 1, 4, 2, 5, 3))
    return b.reshape(t, shape=(n, c2, dim_mul(h, block), dim_mul(w, block)))


def space_to_depth(b, x: Atom, block: int, mode: str = "DCR") -> Atom:
    """[N, C, H, W] -> [N, C·block², H / block, W / block] (the inverse of depth_to_space in that mode)."""
    n, c, h, w = x.type.shape
    h2, w2 = dim_floordiv_exact(b, h, block), dim_floordiv_exact(b, w, block)
    t = b.reshape(x, shape=(n, c, h2, block, w2, block))
    t = b.transpose(t, perm=(0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return b.reshape(t, shape=(n, dim_mul(c, block * block), h2, w2))


def dim_floordiv_exact(b, d: Dim, k: int) -> Dim:
    from ..ir.types import dim_floordiv
    if isinstance(d, int) and d % k:
        raise error(b, f"{d} is not divisible by {k}")
    return dim_floordiv(d, k)


def flip(b, x: Atom, axis: int) -> Atom:
    """x reversed along axis."""
    axis = norm_axis(b, axis, x.type.rank)
    n = x.type.shape[axis]
    rev = b.sub(dim_atom(b, n) if not isinstance(n, int) else Lit(n, Type("i64")),
                b.add(b.iota(shape=(n,), axis=0, dtype="i64"), Lit(1, Type("i64"))))
    return b.gather(x, rev, axis=axis)
