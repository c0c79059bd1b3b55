"""accumulate: a product added to an accumulator is accumulated into it.

Requires: contractions lowered (select_backend). Guarantees: `s = add(acc, c)` where
c = contract(a, b) is read only by that add and has acc's type becomes
`s = contract[acc=True](acc, a, b)` (the reverse pass's `grad += outer product`), so the
product is never stored on its own. Whether acc's buffer is updated in place is decided
later, by plan_memory.
"""
from __future__ import annotations

from ..ir.core import Eqn, Func, Var
from ..prims.lowering import contract
from .rewrite import bind_like, rewrite, use_counts, walk_funcs


def folds(f: Func) -> dict[Eqn, Eqn]:
    """add equation -> the contract equation it absorbs, over the whole tree."""
    out: dict[Eqn, Eqn] = {}
    for g in walk_funcs(f):
        uses = use_counts(g)
        made = {v: e for e in g.eqns for v in e.outs}
        for e in g.eqns:
            if e.prim.name != "add" or not e.outs[0].type.rank:
                continue
            for acc, c in (e.ins, e.ins[::-1]):
                src = made.get(c) if isinstance(c, Var) else None
                if src is not None and src.prim is contract and not src.params["acc"] and uses[c] == 1 \
                        and acc.type == c.type == e.outs[0].type:
                    out[e] = src
                    break
    return out


def accumulate(f: Func) -> Func:
    """f with products folded into the additions that consume them."""
    absorbed = folds(f)
    into = {id(c): add for add, c in absorbed.items()}
    pending: dict[Var, list] = {}

    def rule(b, eqn, ins):
        if id(eqn) in into:
            pending[eqn.outs[0]] = ins  # emitted at its add
            return list(eqn.outs)
        if eqn in absorbed:
            c = absorbed[eqn]
            acc = ins[1] if eqn.ins[0] is c.outs[0] else ins[0]
            return bind_like(b, eqn, contract, [acc, *pending.pop(c.outs[0])], dict(c.params, acc=True))
        return None

    return rewrite(f, rule)
