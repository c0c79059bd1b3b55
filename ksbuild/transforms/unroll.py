"""unroll: a loop that runs a few known times becomes its body, that many times.

Requires: a Func after the transformations. Guarantees: the same values; a `loop` whose count is a literal
(its full length), at most MAX_TRIPS, and whose body times that count is at most MAX_EQNS equations is
replaced by its body inlined once per step with the counter a literal (a constant table's row k then folds),
its xs read row by row and its ys stacked. An elementwise body then fuses across the steps into one loop
nest: vmap of a scalar kernel with `for c in COEFFS` makes one pass over the batch, not one per step.
"""
from __future__ import annotations

from ..ir.builder import Builder, inline
from ..ir.core import Eqn, Func, Lit
from ..ir.types import Type
from ..ops.shape import stack
from .rewrite import rewrite, walk_funcs

MAX_TRIPS = 8
MAX_EQNS = 96


def unroll(f: Func) -> Func:
    """f with its short loops unrolled (inner loops first)."""
    return rewrite(f, _unrolled)


def _unrolled(b: Builder, eqn: Eqn, ins: list):
    if eqn.prim.name != "loop":
        return None
    p = eqn.params
    trip, body = ins[0], p["body"]
    if not isinstance(trip, Lit) or p["length"] is None or trip.value != p["length"] \
            or not 0 < trip.value <= MAX_TRIPS or trip.value * _size(body) > MAX_EQNS:
        return None
    nc, ncar = p["n_consts"], p["n_carry"]
    consts, carry, xs = ins[1:1 + nc], list(ins[1 + nc:1 + nc + ncar]), ins[1 + nc + ncar:]
    rows: list[dict] = [{} for _ in eqn.outs[ncar:]]
    steps = range(trip.value - 1, -1, -1) if p["reverse"] else range(trip.value)
    for k in steps:
        at = Lit(k, Type("i64"))
        outs = inline(b, body, [at, *consts, *carry, *[b.index(x, at, axis=0) for x in xs]])
        carry = outs[:ncar]
        for row, y in zip(rows, outs[ncar:]):
            row[k] = y
    return carry + [stack(b, [row[k] for k in range(trip.value)], 0) for row in rows]


def _size(body: Func) -> int:
    """The equations of a body and of the bodies inside it."""
    return sum(len(g.eqns) for g in walk_funcs(body))
