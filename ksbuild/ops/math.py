"""Elementwise ops built from the elementwise prims (all broadcast like numpy)."""
from __future__ import annotations

from ..ir.core import Atom
from ._util import error, scalar_lit


def relu(b, x: Atom) -> Atom:
    """max(x, 0)."""
    return b.max(x, scalar_lit(0, x.type.dtype))


def clamp(b, x: Atom, lo: Atom | None = None, hi: Atom | None = None) -> Atom:
    """min(max(x, lo), hi); a missing bound is not applied."""
    if lo is not None:
        x = b.max(x, lo)
    if hi is not None:
        x = b.min(x, hi)
    return x


def where(b, cond: Atom, x: Atom, y: Atom) -> Atom:
    """cond ? x : y elementwise (x and y of one dtype)."""
    if cond.type.dtype != "bool":
        raise error(b, f"a where condition must be bool, got {cond.type}")
    return b.select(cond, x, y)


def square(b, x: Atom) -> Atom:
    """x * x."""
    return b.ipow(x, n=2)


def to_float(b, x: Atom, float_dtype: str) -> Atom:
    """x unchanged if it is float, else converted to float_dtype."""
    return x if x.type.is_float else b.convert(x, dtype=float_dtype)


def cast(b, x: Atom, dtype: str) -> Atom:
    """x converted to dtype (no equation when it already has it)."""
    return x if x.type.dtype == dtype else b.convert(x, dtype=dtype)
