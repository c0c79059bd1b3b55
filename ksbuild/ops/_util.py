"""Small helpers shared by the ops: errors at the builder's location, axes, sizes."""
from __future__ import annotations

from typing import Sequence

from ..errors import KsbuildError
from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type, numel  # noqa: F401 (numel: the ops import it from here)


def error(b, message: str, hint: str | None = None) -> KsbuildError:
    """A KsbuildError at the place the frontend is building (b.loc)."""
    return KsbuildError(message, b.loc, hint)


def norm_axis(b, axis: int, rank: int) -> int:
    """A possibly negative axis as an index into a shape of `rank` (rank 0 accepts 0 and -1)."""
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise error(b, f"dim {axis} is out of range for a tensor of rank {rank}")
    return a


def norm_axes(b, axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """Sorted, normalized axes; None means all axes."""
    if axes is None:
        return tuple(range(rank))
    out = sorted({norm_axis(b, a, rank) for a in axes})
    if len(out) != len(axes):
        raise error(b, f"an axis is repeated in {list(axes)}")
    return tuple(out)


def size_as(b, dims: Sequence[Dim], dtype: str) -> Atom:
    """The number of elements of `dims` as a scalar of dtype."""
    n = numel(dims)
    if isinstance(n, int):
        return Lit(float(n) if dtype in ("f32", "f64") else n, Type(dtype))
    return b.convert(b.dim_size(dim=n), dtype=dtype)


def scalar_lit(value, dtype: str) -> Lit:
    """A scalar literal of dtype (bool, int or float value as the dtype wants)."""
    if dtype == "bool":
        return Lit(bool(value), Type(dtype))
    return Lit(float(value) if dtype in ("f32", "f64") else int(value), Type(dtype))


def dim_atom(b, d: Dim) -> Atom:
    """A dim as an i64 scalar."""
    return Lit(d, Type("i64")) if isinstance(d, int) else b.dim_size(dim=d)
