"""inline_calls: replace `call` equations (at any depth) by the callee's body.

Requires: a Func. Guarantees: an equivalent Func without `call` equations, or, with `keep`, without the call
equations `keep` refuses. Used before linearize with keep=kept_call (prims/control.py): partial evaluation
splits a kept call into a call of its callee's forward and one of its linear part, the others it needs flat.
"""
from __future__ import annotations

from typing import Callable

from ..ir.builder import Builder, inline
from ..ir.core import Eqn, Func, Var


def inline_calls(f: Func, keep: Callable[[Eqn], bool] = lambda eqn: False) -> Func:
    """f with calls inlined, recursively (sub-functions of cond/loop too), but the call equations `keep` accepts."""
    if not _has_call(f, keep):
        return f
    b = Builder()
    params = [Var(p.type, p.hint) for p in f.params]
    env = dict(zip(f.params, params))

    def read(a):
        return env.get(a, a) if isinstance(a, Var) else a

    for eqn in f.eqns:
        b.loc = eqn.loc
        ins = [read(a) for a in eqn.ins]
        if eqn.prim.name == "call" and not keep(eqn):
            outs = inline(b, inline_calls(eqn.params["fn"], keep), ins)
        else:
            sub = {k: inline_calls(v, keep) if isinstance(v, Func) else v for k, v in eqn.params.items()}
            outs = b.bind(eqn.prim, ins, sub)
            b.name_like(outs, eqn.outs)
        env.update(zip(eqn.outs, outs))
    return b.func(f.name, params, [read(r) for r in f.results], f.result_names)


def _has_call(f: Func, keep) -> bool:
    for eqn in f.eqns:
        if eqn.prim.name == "call" and not keep(eqn):
            return True
        if any(isinstance(v, Func) and _has_call(v, keep) for v in eqn.params.values()):
            return True
    return False
