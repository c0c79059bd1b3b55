"""Builder: appends equations, inferring output types with each primitive's type rule."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import KsbuildError, Location
from .core import Atom, Eqn, Func, Lit, Var, freeze
from .types import Type


class Builder:
    """Collects equations for one function body. `b.add(x, y)` binds the prim named `add`."""

    def __init__(self, loc: Location | None = None):
        self.eqns: list[Eqn] = []
        self.loc = loc

    def bind(self, prim: Any, ins: Sequence[Atom], params: dict[str, Any] | None = None) -> tuple[Var, ...]:
        """Append `outs = prim[params](ins)` and return the new output vars."""
        params = dict(params or {})
        try:
            out_types = prim.type_rule([a.type for a in ins], **params)
        except KsbuildError as e:
            raise e.at(self.loc) from None
        outs = tuple(Var(t) for t in out_types)
        self.eqns.append(Eqn(prim, tuple(ins), outs, freeze(params), self.loc))
        return outs

    def __getattr__(self, name: str):
        from ..prims.base import PRIMS

        if name.startswith("_") or name not in PRIMS:
            raise AttributeError(name)
        prim = PRIMS[name]

        def call(*ins: Atom, **params: Any):
            outs = self.bind(prim, ins, params)
            return outs[0] if len(outs) == 1 else outs

        return call

    def lit(self, value: Any, type: Type) -> Lit:
        return Lit(value, type)

    def func(self, name: str, params: Sequence[Var], results: Sequence[Atom], result_names=()) -> Func:
        return Func(name, tuple(params), tuple(self.eqns), tuple(results), tuple(result_names))


def inline(b: Builder, func: Func, args: Sequence[Atom]) -> list[Atom]:
    """Append the body of `func` applied to `args` to `b`, renaming every var; return its results."""
    env: dict[Var, Atom] = dict(zip(func.params, args))

    def read(a: Atom) -> Atom:
        return env.get(a, a) if isinstance(a, Var) else a

    for eqn in func.eqns:
        outs = tuple(Var(v.type, v.hint) for v in eqn.outs)
        b.eqns.append(Eqn(eqn.prim, tuple(read(a) for a in eqn.ins), outs, eqn.params, eqn.loc))
        env.update(zip(eqn.outs, outs))
    return [read(r) for r in func.results]
