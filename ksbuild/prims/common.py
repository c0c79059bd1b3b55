"""Helpers shared by primitive rules: zero handling, broadcasting, un-broadcasting."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Atom, Lit
from ..ir.types import Dim, Type, broadcast_shapes, numpy_dtype


def zeros(t: Type) -> Lit:
    return Lit(False if t.dtype == "bool" else 0, t)


def ones(t: Type) -> Lit:
    return Lit(True if t.dtype == "bool" else 1, t)


def splat(x: Atom, out) -> Lit | None:
    """The simplify rule of a prim whose result's elements are elements of its first operand x (a view, a pick): when
    x is a literal filled with one value, the result is that literal in its own shape (torch.export's LSTM slices its
    initial state of zeros, ONNX's not)."""
    return Lit(x.value, out.type) if isinstance(x, Lit) and not np.ndim(x.value) else None


def is_zero(a: Atom | None) -> bool:
    return a is None or (isinstance(a, Lit) and a.value == 0)


def np_value(lit: Lit, env: dict[str, int]) -> np.ndarray:
    """A literal as a numpy array of its (concrete) shape."""
    from ..ir.types import concrete_shape

    return np.full(concrete_shape(lit.type, env), lit.value, dtype=numpy_dtype(lit.type.dtype))


def broadcast_types(name: str, types: Sequence[Type], dtype: str | None = None) -> Type:
    """The broadcast result type of an elementwise op; a KsbuildError names both operands."""
    shape: tuple[Dim, ...] = ()
    for t in types:
        s = broadcast_shapes(shape, t.shape)
        if s is None:
            listed = " and ".join(str(t) for t in types)
            floor = any(isinstance(d, str) and "//" in d for t in types for d in t.shape)
            raise KsbuildError(f"cannot {name} {listed}: shapes do not broadcast",
                               hint="a size computed with // (the halves of an odd size differ) is equal to "
                                    "another only when the dim is a multiple: write it so in the annotation, e.g. "
                                    '"float[t, 2 * h]"' if floor else None)
        shape = s
    return Type(dtype or types[0].dtype, shape)


def bcast_to(b, x: Atom, t: Type) -> Atom:
    """x broadcast to type t's shape (a no-op when the shape already matches)."""
    if x.type.shape == t.shape:
        return x
    if isinstance(x, Lit):
        return Lit(x.value, x.type.with_shape(t.shape))
    return b.broadcast_to(x, shape=t.shape)


def unbroadcast(b, ct: Atom | None, t: Type) -> Atom | None:
    """Sum a cotangent of a broadcast result back to the operand type t (transpose of broadcast)."""
    if ct is None or ct.type.shape == t.shape:
        return ct
    if isinstance(ct, Lit) and ct.value == 0:
        return zeros(t)
    lead = ct.type.rank - t.rank
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(t.shape) if d == 1 and ct.type.shape[lead + i] != 1
    )
    summed = b.reduce_sum(ct, axes=axes)
    return summed if summed.type.shape == t.shape else b.reshape(summed, shape=t.shape)


def add_cts(b, a: Atom | None, c: Atom | None) -> Atom | None:
    """Sum of two (co)tangents where None is zero."""
    if is_zero(a):
        return c if c is not None else a
    if is_zero(c):
        return a
    return b.add(a, c)


def move_batch_rank(b, x: Atom, batched: bool, out_rank: int) -> Atom:
    """For elementwise batching: give a batched operand [B, *s] the shape [B, 1.., *s] of rank out_rank+1."""
    if not batched or x.type.rank == out_rank + 1:
        return x
    shape = (x.type.shape[0],) + (1,) * (out_rank + 1 - x.type.rank) + x.type.shape[1:]
    return b.reshape(x, shape=shape)
