"""vmap: batching, an interpreter that calls each primitive's batching rule.

Requires: a verified Func and which params are batched (batch axis 0). Guarantees: a Func on
the batched types whose results are batched at axis 0 (unbatched ones broadcast if forced).
A batched `cond` becomes a `select` of both branches: branch-free code that vectorizes.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import in_rule, located, rule
from ..ir.builder import Builder
from ..ir.core import Atom, Func, Var
from ..ir.types import Dim, Type
from ..prims.common import bcast_to
from .sink import sink


def batched_type(t: Type, size: Dim) -> Type:
    return Type(t.dtype, (size,) + t.shape)


def vmap_eqns(b: Builder, f: Func, args: Sequence[Atom], batched: Sequence[bool], size: Dim):
    """Append the batched body of f to b; return (results, which results are batched)."""
    env: dict[Var, tuple[Atom, bool]] = {p: (a, bt) for p, a, bt in zip(f.params, args, batched)}

    def read(a: Atom) -> tuple[Atom, bool]:
        return env[a] if isinstance(a, Var) else (a, False)

    for eqn in f.eqns:
        ins, bts = zip(*[read(a) for a in eqn.ins]) if eqn.ins else ((), ())
        b.loc = eqn.loc
        if not any(bts):
            outs, obts = b.bind(eqn.prim, ins, dict(eqn.params)), [False] * len(eqn.outs)
        else:
            with located(eqn.loc), in_rule(eqn, "batch"):
                outs, obts = rule(eqn.prim, "batch")(b, list(ins), list(bts), size, **eqn.params)
        b.name_like(outs, eqn.outs)
        for v, o, bt in zip(eqn.outs, outs, obts):
            env[v] = (o, bt)
    res = [read(r) for r in f.results]
    return [a for a, _ in res], [bt for _, bt in res]


def vmap_func(f: Func, batched: Sequence[bool], size: Dim, force_out: Sequence[bool] | None = None,
              name: str | None = None) -> tuple[Func, list[bool]]:
    """The batched f; results marked in force_out are broadcast to batched if they were not."""
    f = sink(f)  # what one branch of an if alone reads is computed in it (transforms/sink.py): under a per-lane
    # if, reverse mode then masks it with the branch, as it masks the branch's own work
    b = Builder()
    params = [Var(batched_type(p.type, size) if bt else p.type, p.hint) for p, bt in zip(f.params, batched)]
    outs, obts = vmap_eqns(b, f, params, batched, size)
    force = list(force_out) if force_out is not None else [False] * len(outs)
    final = []
    for o, bt, fo in zip(outs, obts, force):
        final.append(bcast_to(b, o, batched_type(o.type, size)) if fo and not bt else o)
    obts = [bt or fo for bt, fo in zip(obts, force)]
    return b.func(name or f"vmap_{f.name}", params, final, f.result_names), obts


def fresh_dim(f: Func, prefix: str = "n") -> str:
    """A symbolic dim name not used by f's parameter types."""
    used = {d for p in f.params for d in p.type.shape if isinstance(d, str)}
    if prefix not in used:
        return prefix
    i = 1
    while f"{prefix}{i}" in used:
        i += 1
    return f"{prefix}{i}"
