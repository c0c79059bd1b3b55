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


def einsum_many(b, equation: str, xs: list[Atom]) -> Atom:
    """numpy einsum with any number of operands, '...' and an implicit output; operands are
    contracted left to right, each pair summing out the letters nothing later needs."""
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise error(b, f"einsum '{equation}' names {len(terms)} operands but gets {len(xs)}")
    terms, ell = _expand_ellipsis(b, terms, xs, equation)
    if not arrow:
        counts = {c: sum(t.count(c) for t in terms) for c in set("".join(terms))}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    for t in terms:
        if len(set(t)) != len(t):
            raise error(b, f"einsum '{equation}': a repeated letter in one operand (a diagonal) is not supported")
    acc, acc_t = xs[0], terms[0]
    for i in range(1, len(xs)):
        later = set(out) | set("".join(terms[i + 1:]))
        keep = "".join(dict.fromkeys(c for c in acc_t + terms[i] if c in later))
        acc = einsum(b, f"{acc_t},{terms[i]}->{keep}", acc, xs[i])
        acc_t = keep
    return _finish(b, acc, acc_t, out)


def _finish(b, x: Atom, have: str, want: str) -> Atom:
    """x with letters `have` summed down to and permuted into `want`."""
    drop = tuple(i for i, c in enumerate(have) if c not in want)
    if drop:
        x = b.reduce_sum(x, axes=drop)
        have = "".join(c for c in have if c in want)
    perm = tuple(have.index(c) for c in want)
    return b.transpose(x, perm=perm) if perm != tuple(range(len(perm))) else x


def _expand_ellipsis(b, terms: list[str], xs: list[Atom], equation: str) -> tuple[list[str], str]:
    """Terms with '...' replaced by letters for the broadcast dims (the longest run is used)."""
    used = set("".join(terms))
    spare = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used]
    n_ell = max((x.type.rank - (len(t) - 3) for t, x in zip(terms, xs) if "..." in t), default=0)
    ell = "".join(spare[:n_ell])
    out = []
    for t, x in zip(terms, xs):
        if "..." in t:
            k = x.type.rank - (len(t) - 3)
            t = t.replace("...", ell[n_ell - k:])
        if len(t) != x.type.rank:
            raise error(b, f"einsum '{equation}': '{t}' does not match an operand of type {x.type}")
        out.append(t)
    return out, ell
