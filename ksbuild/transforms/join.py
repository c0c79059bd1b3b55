"""join: a concatenation, which the transformations see as pieces padded with zeros and added, is one `join`.

Requires: a Func after the transformations (ops/shape.py's concatenate writes pad + add, whose derivative and
batching rules AD and vmap already have). Guarantees: the same values (the pieces, not a sum with zeros: a -0.0
stays -0.0); an `add` whose operands are, through a tree of adds, `pad`s along one axis that together cover that
axis once, in order and without overlap, becomes `join[axis](*pieces)`, which copies each piece into its range
once (prims/lowering.py). Pads and adds left unread are dropped.

Why: pad + add writes a zero-padded copy of every piece the size of the result, then reads them all back to add
them: a Fire module's concatenation (SqueezeNet) moved five times the bytes of its result instead of two.
"""
from __future__ import annotations

from ..ir.core import Eqn, Func, Var
from ..ir.types import dim_add
from ..prims.lowering import join as join_prim
from .dce import dce


def join(f: Func) -> Func:
    """f (and every body nested in it) with its concatenations as joins."""
    return _join(f, {})


def _join(f: Func, memo: dict) -> Func:
    if id(f) in memo:
        return memo[id(f)]
    trees: dict[Var, tuple] = {}  # (the pieces of each pad or add tree made so far: each add looks at its operands')
    eqns, changed = [], False
    for e in f.eqns:
        e2 = _recursed(e, memo)
        pieces = _pieces(e2, trees)
        if e2.prim.name == "add" and pieces is not None and _covers(pieces, e2.outs[0]):
            e2, pieces = Eqn(join_prim, tuple(x for _, x in pieces[1]), e2.outs, {"axis": pieces[0]}, e2.loc), None
        changed |= e2 is not e
        if pieces is not None:
            trees[e2.outs[0]] = pieces
        eqns.append(e2)
    if not changed:
        memo[id(f)] = f
        return f
    pruned = dce(Func(f.name, f.params, tuple(eqns), f.results, f.result_names))
    memo[id(f)] = Func(f.name, f.params, pruned.eqns, f.results, f.result_names, f.plan, f.notes, f.defaults)
    return memo[id(f)]


def _recursed(e: Eqn, memo: dict) -> Eqn:
    if not any(isinstance(v, Func) for v in e.params.values()):
        return e
    params = {k: _join(v, memo) if isinstance(v, Func) else v for k, v in e.params.items()}
    return e if all(params[k] is e.params[k] for k in params) else Eqn(e.prim, e.ins, e.outs, params, e.loc)


def _pieces(e: Eqn, trees: dict):
    """(axis, [(lo, piece)]) when e is a pad, or an add of such trees (trees: those of the equations before e)
    along one axis, all of its result's type. Each add reads its operands' trees, so that a chain of n adds (a sum of
    5000 terms) costs n steps, not n²."""
    if e.prim.name == "pad":
        return e.params["axis"], [(e.params["lo"], e.ins[0])]
    if e.prim.name != "add" or any(not isinstance(a, Var) or a.type != e.outs[0].type for a in e.ins):
        return None
    left, right = trees.get(e.ins[0]), trees.get(e.ins[1])
    if left is None or right is None or left[0] != right[0]:
        return None
    return left[0], left[1] + right[1]


def _covers(pieces, out: Var) -> bool:
    """Whether the pieces tile the axis of out exactly; if so they are put in that order."""
    axis, ranges = pieces
    left, ordered, at = list(ranges), [], 0
    while left:
        nxt = next((r for r in left if r[0] == at), None)
        if nxt is None:
            return False
        left.remove(nxt)
        ordered.append(nxt)
        at = dim_add(at, nxt[1].type.shape[axis])
    if at != out.type.shape[axis]:
        return False
    ranges[:] = ordered
    return True
