"""inline_calls: replace every `call` equation (at any depth) by the callee's body.

Requires: a Func. Guarantees: an equivalent Func without `call` equations. Used before
linearize, whose partial evaluation works on one flat body.
"""
from __future__ import annotations

from ..ir.builder import Builder, inline
from ..ir.core import Func, Var


def inline_calls(f: Func) -> Func:
    """f with calls inlined, recursively (sub-functions of cond/loop too)."""
    if not _has_call(f):
        return f
    b = Builder()
    params = [Var(p.type, p.hint) for p in f.params]
    env = dict(zip(f.params, params))

    def read(a):
        return env.get(a, a) if isinstance(a, Var) else a

    for eqn in f.eqns:
        b.loc = eqn.loc
        ins = [read(a) for a in eqn.ins]
        if eqn.prim.name == "call":
            outs = inline(b, inline_calls(eqn.params["fn"]), ins)
        else:
            sub = {k: inline_calls(v) if isinstance(v, Func) else v for k, v in eqn.params.items()}
            outs = b.bind(eqn.prim, ins, sub)
            b.name_like(outs, eqn.outs)
        env.update(zip(eqn.outs, outs))
    return b.func(f.name, params, [read(r) for r in f.results], f.result_names)


def _has_call(f: Func) -> bool:
    for eqn in f.eqns:
        if eqn.prim.name == "call":
            return True
        if any(isinstance(v, Func) and _has_call(v) for v in eqn.params.values()):
            return True
    return False
