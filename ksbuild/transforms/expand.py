"""expand: replace every equation whose prim has an `expand` rule by that decomposition.

Requires: a Func. Guarantees: an equivalent Func (same values) with no equation of a prim that
has an `expand` rule, sub-functions included; decompositions that produce such equations again
(a per-lane if nested in a per-lane if) are expanded in turn. Run before codegen: `lane_cond`
becomes both branches and a select per result, branch-free code that vectorizes.
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Var, freeze


def expand(f: Func) -> Func:
    """f with every expandable equation replaced by its decomposition (f itself if it has none)."""
    b = Builder()
    env: dict[Var, Atom] = {}
    if not _expand_eqns(b, f.eqns, env):
        return f
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    return b.func(f.name, list(f.params), [read(r) for r in f.results], f.result_names)


def _expand_eqns(b: Builder, eqns, env: dict[Var, Atom]) -> bool:
    """Append eqns to b, expanded; whether anything changed."""
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    changed = False
    for eqn in eqns:
        ins = [read(a) for a in eqn.ins]
        if eqn.prim.expand is not None:
            part = Builder(eqn.loc)
            outs = eqn.prim.expand(part, ins, **eqn.params)
            if len(part.eqns) == 1 and list(part.eqns[0].outs) == list(outs):  # one eqn: it keeps the names
                only = part.eqns[0]
                part.eqns[0], outs = Eqn(only.prim, only.ins, eqn.outs, only.params, only.loc), list(eqn.outs)
            _expand_eqns(b, part.eqns, env)
            env.update(zip(eqn.outs, [read(o) for o in outs]))
            changed = True
            continue
        params = {k: expand(v) if isinstance(v, Func) else v for k, v in eqn.params.items()}
        if ins == list(eqn.ins) and all(params[k] is v for k, v in eqn.params.items()):
            b.eqns.append(eqn)
        else:
            b.eqns.append(Eqn(eqn.prim, tuple(ins), eqn.outs, freeze(params), eqn.loc))
            changed = True
    return changed
