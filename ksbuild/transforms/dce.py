"""dce: remove equations whose results are never read; prune unused cond/loop results.

Requires: a Func. Guarantees: the same results, no equation whose outputs are all unused,
and every cond/loop narrowed by its prim's `prune` rule to the results that are read.
"""
from __future__ import annotations

from ..ir.core import Eqn, Func, Var


def dce(f: Func) -> Func:
    """f without dead equations (sub-functions cleaned recursively)."""
    live: set[Var] = {r for r in f.results if isinstance(r, Var)}
    kept: list[Eqn] = []
    for eqn in reversed(f.eqns):
        used = [v in live for v in eqn.outs]
        if not any(used):
            continue
        prune = getattr(eqn.prim, "prune", None)
        if prune is not None:
            eqn = prune(eqn, used)
        live.update(a for a in eqn.ins if isinstance(a, Var))
        kept.append(eqn)
    return Func(f.name, f.params, tuple(reversed(kept)), f.results, f.result_names)
