"""Tensors made from nothing or from an index grid: full, arange, eye, triangular masks."""
from __future__ import annotations

from typing import Sequence

from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type, dim_sub
from ._util import error


def full(shape: Sequence[Dim], value, dtype: str) -> Lit:
    """A tensor of shape with every element `value` (a splat literal: no memory)."""
    v = bool(value) if dtype == "bool" else float(value) if dtype in ("f32", "f64") else int(value)
    return Lit(v, Type(dtype, tuple(shape)))


def fill(b, shape: Sequence[Dim], value: Atom) -> Atom:
    """A tensor of shape with every element the scalar atom `value`."""
    return b.broadcast_to(value, shape=tuple(shape))


def arange(b, start: Dim, stop: Dim, dtype: str = "i64") -> Atom:
    """start, start+1, ..., stop-1 (static bounds: literals or dims)."""
    out = b.iota(shape=(dim_sub(stop, start),), axis=0, dtype=dtype)
    if start == 0:
        return out
    if isinstance(start, int):
        return b.add(out, Lit(start, Type(dtype)))
    off = b.dim_size(dim=start)
    return b.add(out, off if dtype == "i64" else b.convert(off, dtype=dtype))


def eye(b, n: Dim, m: Dim, dtype: str) -> Atom:
    """The n×m identity."""
    i = b.iota(shape=(n, m), axis=0, dtype="i64")
    j = b.iota(shape=(n, m), axis=1, dtype="i64")
    return b.convert(b.eq(i, j), dtype=dtype)


def triangle(b, x: Atom, k: int, lower: bool) -> Atom:
    """x with the elements above (lower) or below (upper) diagonal k set to zero (tril / triu)."""
    if x.type.rank < 2:
        raise error(b, f"tril/triu need a matrix, got {x.type}")
    i = b.iota(shape=x.type.shape, axis=x.type.rank - 2, dtype="i64")
    j = b.iota(shape=x.type.shape, axis=x.type.rank - 1, dtype="i64")
    shifted = b.add(i, Lit(k, Type("i64"))) if k else i
    keep = b.ge(shifted, j) if lower else b.le(shifted, j)
    return b.select(keep, x, Lit(0 if x.type.dtype != "bool" else False, x.type))


def array(b, arr) -> Atom:
    """A numpy array as an atom: a literal when all its elements are equal, else a `constant`."""
    import numpy as np

    from ..ir.dense import Dense
    from ..ir.types import dtype_of
    a = np.asarray(arr)
    dtype = dtype_of(a)
    t = Type(dtype, tuple(int(d) for d in a.shape))
    flat = a.reshape(-1)
    if dtype == "str" and (flat.size == 0 or all(s == flat[0] for s in flat)):
        v = flat[0] if flat.size else ""
        v = v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
        if "\0" in v:
            raise error(b, f"the string {v!r} holds a NUL character, which a C string cannot")
        return Lit(v, t)
    if flat.size == 0 or (np.all(flat == flat[0]) and not (a.dtype.kind == "f" and np.isnan(flat[0]))):
        v = flat[0].item() if flat.size else 0
        return Lit(bool(v) if dtype == "bool" else float(v) if dtype in ("f32", "f64") else int(v), t)
    if a.dtype.kind == "f" and np.all(np.isnan(flat)):
        return Lit(float("nan"), t)
    try:
        value = Dense.of(a)
    except ValueError as e:  # a string holding a NUL
        raise error(b, str(e)) from None
    return b.constant(value=value)
