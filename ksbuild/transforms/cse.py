"""cse: common subexpression elimination.

Requires: a Func. Guarantees: within each function body, no two equations without
sub-functions have the same primitive, inputs and params; later ones read the first's
outputs instead. (Bodies are closed, so nothing is shared across them.)
"""
from __future__ import annotations

import weakref

from ..ir.core import Atom, Func, Lit
from .rewrite import keep, rewrite


def _key_atom(a: Atom):
    return ("lit", a.type, repr(a.value)) if isinstance(a, Lit) else ("var", id(a))


def cse(f: Func) -> Func:
    """f with repeated equations merged (per body)."""
    seen_by_body: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # one table per body's builder

    def rule(b, eqn, ins):
        if any(isinstance(v, Func) for v in eqn.params.values()):
            return None
        seen = seen_by_body.setdefault(b, {})
        key = (eqn.prim.name, tuple(_key_atom(a) for a in ins), tuple(sorted(eqn.params.items())))
        if key in seen:
            return seen[key]
        outs = keep(b, eqn, ins)
        seen[key] = outs
        return outs

    return rewrite(f, rule)
