"""Contractions: einsum, matmul (numpy semantics, batch dims broadcast), dot, outer."""
from __future__ import annotations

from ..ir.core import Atom
from ..ir.types import broadcast_shapes
from ._util import error

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def einsum(b, spec: str, x: Atom, y: Atom) -> Atom:
    """A two-operand einsum with an explicit output, e.g. 'bij,bjk->bik'."""
    text = spec.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    parts = lhs.split(",")
    if len(parts) != 2 or not arrow or "..." in text:
        raise error(b, f"einsum '{spec}': two operands and an explicit '->' output are supported")
    a, c = parts
    for letters, t in ((a, x.type), (c, y.type)):
        if len(letters) != t.rank:
            raise error(b, f"einsum '{spec}': '{letters}' does not match an operand of type {t}")
    x, y = _broadcast_unit_axes(b, a, x, c, y)
    return b.einsum(x, y, spec=f"{a},{c}->{out}")


def _broadcast_unit_axes(b, a: str, x: Atom, c: str, y: Atom):
    """Size-1 axes broadcast against the other operand's size for the same letter (as torch does)."""
    sizes = {}
    for letters, t in ((a, x.type), (c, y.type)):
        for ch, d in zip(letters, t.shape):
            if d != 1:
                sizes.setdefault(ch, d)

    def fix(letters: str, v: Atom) -> Atom:
        shape = tuple(sizes.get(ch, 1) if d == 1 else d for ch, d in zip(letters, v.type.shape))
        return v if shape == v.type.shape else b.broadcast_to(v, shape=shape)

    return fix(a, x), fix(c, y)


def matmul(b, x: Atom, y: Atom) -> Atom:
    """numpy/torch matmul: vectors are promoted and the added axis removed; batch dims broadcast."""
    rx, ry = x.type.rank, y.type.rank
    if rx == 0 or ry == 0:
        raise error(b, f"matmul needs tensors of rank >= 1, got {x.type} and {y.type}")
    if x.type.dtype != y.type.dtype:
        raise error(b, f"matmul needs operands of one dtype, got {x.type} and {y.type}")
    bx, by = x.type.shape[:-2], y.type.shape[:-2]
    batch = broadcast_shapes(bx, by)
    if batch is None:
        raise error(b, f"matmul of {x.type} and {y.type}: the batch dims do not broadcast")
    k1, k2 = x.type.shape[-1], (y.type.shape[-2] if ry > 1 else y.type.shape[0])
    if k1 != k2:
        raise error(b, f"matmul of {x.type} and {y.type}: the contracted dims differ ({k1} and {k2})")
    nb = len(batch)
    bl = LETTERS[:nb]
    m, k, n = "x", "y", "z"
    sx = bl[nb - len(bx):] + (m if rx > 1 else "") + k
    sy = bl[nb - len(by):] + k + (n if ry > 1 else "")
    out = bl + (m if rx > 1 else "") + (n if ry > 1 else "")
    x = _expand_batch(b, x, bx, batch)
    y = _expand_batch(b, y, by, batch)
    return b.einsum(x, y, spec=f"{sx},{sy}->{out}")


def _expand_batch(b, v: Atom, own, batch) -> Atom:
    """v's batch dims that are 1 where the broadcast batch is larger, broadcast (a free view)."""
    lead = len(batch) - len(own)
    want = tuple(batch[lead + i] if d == 1 else d for i, d in enumerate(own))
    if want == tuple(own):
        return v
    return b.broadcast_to(v, shape=want + v.type.shape[len(own):])


def dot(b, x: Atom, y: Atom) -> Atom:
    """Σ x·y of two vectors."""
    if x.type.rank != 1 or y.type.rank != 1:
        raise error(b, f"dot needs two vectors, got {x.type} and {y.type}")
    return einsum(b, "i,i->", x, y)


def outer(b, x: Atom, y: Atom) -> Atom:
    """x[i]·y[j] of two vectors."""
    if x.type.rank != 1 or y.type.rank != 1:
        raise error(b, f"outer needs two vectors, got {x.type} and {y.type}")
    return einsum(b, "i,j->ij", x, y)
