"""Rewrites that keep one-hot selects sparse (rules of the simplify pass).

A one-hot select is H = select(iota_z == i, v, 0): H[.., j, ..] = v where j = i[..] and 0 elsewhere along
axis z. The derivative of a reduction to the first extremum (torch.min(x, dim).values, max pooling: the
`ties="first"` reductions) has this form, with i the extremum's position: the reverse pass scatters each
row's cotangent to one element. Dense, H is an [n, k] mask that the rest of the reverse pass multiplies and
sums like any tensor: kmeans' gradient Σ_i H[i, j] P[i, :] cost a [k, n] × [n, d] product. These rules give
the same values from the n positions alone (at most one nonzero per row):

  one_hot_scale    H · c = select(iota_z == i, v · c, 0) for a finite scalar literal c
  one_hot_sum      Σ_z H = v at i (0 where i is out of range);  Σ_x H = scatter_add(0, i, v at i) (rank 2)
  one_hot_product  Σ_x H[x, z] B[x, ..] = scatter_add over z of (v at i) B[x, ..] (rank 2, x contracted);
                   Σ_z H[x, z] B[z, ..] = (v at i) B[i, ..], a gather (z contracted)

"v at i" is v itself when it is constant along z (a literal or a broadcast row value: the cotangent of a
reduction is), else the rules leave H dense. Where B holds inf or nan the dense product gives nan in every
column of that row and the scatter in the one column i: the same wherever B is finite.
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Lit, Var
from ..ir.types import Type
from ..prims.tensor import parse_spec


def _made(a: Atom, made: dict[Var, Eqn], name: str) -> Eqn | None:
    e = made.get(a) if isinstance(a, Var) else None
    return e if e is not None and e.prim.name == name else None


def _strip_broadcast(a: Atom, made: dict[Var, Eqn]) -> Atom:
    e = _made(a, made, "broadcast_to")
    return e.ins[0] if e is not None else a


def one_hot(m: Atom, made: dict[Var, Eqn]) -> tuple[Atom, int] | None:
    """(c, z) if m = (iota along z == c) with c of m's shape but 1 along z (possibly broadcast): m is true
    along z exactly at position c."""
    e = _made(m, made, "compare")
    if e is None or e.params["op"] != "eq" or m.type.rank == 0:
        return None
    for a, c in (e.ins, e.ins[::-1]):
        iota = _made(a, made, "iota")
        if iota is None or tuple(iota.params["shape"]) != m.type.shape:
            continue
        z = iota.params["axis"]
        c = _strip_broadcast(c, made)
        want = tuple(1 if k == z else d for k, d in enumerate(m.type.shape))
        if c.type.shape == want and c.type.dtype in ("i32", "i64"):
            return c, z
    return None


def _one_hot_select(a: Atom, made: dict[Var, Eqn]) -> tuple[Atom, Atom, int, Eqn] | None:
    """(c, v, z, the select) if a = select(m, v, 0) with m one-hot along z (c as in `one_hot`)."""
    e = _made(a, made, "select")
    if e is None or not (isinstance(e.ins[2], Lit) and e.ins[2].value == 0) or e.ins[0].type.shape != a.type.shape:
        return None
    hot = one_hot(e.ins[0], made)
    return (hot[0], e.ins[1], hot[1], e) if hot is not None else None


def _value_at(b: Builder, v: Atom, z: int, shape: tuple, made: dict[Var, Eqn]) -> Atom | None:
    """v at the hot position of each row, of `shape` (the one-hot's shape without z), when v is the same all
    along z; else None."""
    v = _strip_broadcast(v, made)
    if isinstance(v, Lit) and np.ndim(v.value) == 0:
        return Lit(v.value, Type(v.type.dtype, shape))
    if v.type.rank == len(shape) + 1 and v.type.shape[z] == 1:
        return b.reshape(v, shape=shape)
    return None


def _in_range(b: Builder, c: Atom, size, w: Atom) -> Atom:
    """w where 0 <= c < size (the one-hot row has a hot element), else 0."""
    n = Lit(size, Type(c.type.dtype)) if isinstance(size, int) else b.convert(b.dim_size(dim=size),
                                                                             dtype=c.type.dtype)
    inside = getattr(b, "and")(b.ge(c, Lit(0, Type(c.type.dtype))), b.lt(c, n))
    return b.select(inside, w, Lit(0, Type(w.type.dtype)))


def _hot_values(b: Builder, hot, made) -> tuple[Atom, Atom] | None:
    """(positions, values) of a one-hot select's rows, each of its shape without z; None if v varies along z."""
    c, v, z, e = hot
    shape = tuple(d for k, d in enumerate(e.outs[0].type.shape) if k != z)
    w = _value_at(b, v, z, shape, made)
    if w is None:
        return None
    pos = b.reshape(c, shape=shape)
    return pos, _in_range(b, pos, e.outs[0].type.shape[z], w)


def one_hot_scale(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """select(hot, v, 0) · c = select(hot, v · c, 0) for a finite scalar literal c (exact: 0 · c = 0)."""
    if eqn.prim.name != "mul":
        return None
    for h, c in (ins, ins[::-1]):
        hot = _one_hot_select(h, made)
        finite = isinstance(c, Lit) and c.type.rank == 0 and np.isfinite(c.value)
        if hot is not None and finite and h.type == eqn.outs[0].type:
            sel = hot[3]
            out = b.select(sel.ins[0], b.mul(sel.ins[1], c), sel.ins[2])
            made[out] = b.eqns[-1]
            return out
    return None


def one_hot_sum(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """Σ_z select(hot, v, 0) = v at the hot position; Σ over the other axis of a rank-2 one (x) =
    scatter_add(0, position, v at it): no pass over the [x, z] mask."""
    hot = _one_hot_select(ins[0], made) if eqn.prim.name == "reduce_sum" else None
    if hot is None:
        return None
    axes, z, rank = tuple(eqn.params["axes"]), hot[2], ins[0].type.rank
    if z not in axes and (rank != 2 or axes != (1 - z,)):
        return None
    rows = _hot_values(b, hot, made)
    if rows is None:
        return None
    pos, w = rows
    if z not in axes:  # rank 2, summed over the other axis
        return b.scatter_add(Lit(0, eqn.outs[0].type), pos, w, axis=0)
    rest = tuple(a - (a > z) for a in axes if a != z)
    return b.reduce_sum(w, axes=rest) if rest else w


def one_hot_product(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """einsum of a rank-2 select(hot, v, 0) [x, z] with B, contracted over x: out[.., z, ..] = Σ_x [z = i_x] v_x
    B[x, ..] = scatter_add along z of v_x B[x, ..] at i_x; contracted over z: out[x, ..] = v_x B[i_x, ..], a
    gather. n rows of B either way, not an n × k product."""
    if eqn.prim.name != "einsum":
        return None
    letters = parse_spec(eqn.params["spec"])
    for k in (0, 1):
        hot = _one_hot_select(ins[k], made)
        if hot is None or ins[k].type.rank != 2:
            continue
        mine, other, out = letters[k], letters[1 - k], letters[2]
        z, x = mine[hot[2]], mine[1 - hot[2]]
        summed, kept = (x, z) if x not in out else (z, x)
        rest = "".join(c for c in other if c != summed)
        if kept not in out or kept in other or summed not in other or len(set(other)) != len(other) \
                or sorted(out) != sorted(kept + rest):
            continue
        rows = _hot_values(b, hot, made)
        if rows is None:
            return None
        operand = ins[1 - k]
        if other[0] != summed:
            operand = b.transpose(operand, perm=tuple(other.index(c) for c in summed + rest))
        got = (_scattered if summed == x else _gathered)(b, operand, *rows, len(rest), eqn.outs[0].type.dtype,
                                                         (eqn.outs[0].type.shape[out.index(kept)],))
        order = kept + rest
        return got if order == out else b.transpose(got, perm=tuple(order.index(c) for c in out))
    return None


def _scattered(b: Builder, operand: Atom, pos: Atom, w: Atom, n_rest: int, dtype: str, size: tuple) -> Atom:
    """scatter_add(0 [z, ..], pos, w · operand) for operand [x, ..]."""
    weighted = b.mul(operand, b.reshape(w, shape=w.type.shape + (1,) * n_rest))
    return b.scatter_add(Lit(0, Type(dtype, size + operand.type.shape[1:])), pos, weighted, axis=0)


def _gathered(b: Builder, operand: Atom, pos: Atom, w: Atom, n_rest: int, dtype: str, size: tuple) -> Atom:
    """w · operand[pos] for operand [z, ..] (pos out of range has w = 0)."""
    return b.mul(b.gather(operand, pos, axis=0), b.reshape(w, shape=w.type.shape + (1,) * n_rest))


def one_hot_rules(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """The first of the rules above that applies to eqn, or None."""
    return one_hot_scale(b, eqn, ins, made) or one_hot_sum(b, eqn, ins, made) or \
        one_hot_product(b, eqn, ins, made)
