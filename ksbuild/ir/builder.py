"""Builder: appends equations, inferring output types with each primitive's type rule."""
from __future__ import annotations

import re
from typing import Any, Sequence

from ..errors import KsbuildError, Location
from .core import Atom, Eqn, Func, Lit, Var, freeze
from .types import Type


class Builder:
    """Collects equations for one function body. `b.add(x, y)` binds the prim named `add`, `b.lt(x, y)`
    the form lt of compare (compare[op="lt"])."""

    def __init__(self, loc: Location | None = None):
        self.eqns: list[Eqn] = []
        self.loc = loc
        self.names: dict[Var, str] = {}  # readable names for vars made here, applied by func()

    def bind(self, prim: Any, ins: Sequence[Atom], params: dict[str, Any] | None = None) -> tuple[Var, ...]:
        """Append `outs = prim[params](ins)` and return the new output vars."""
        params = dict(params or {})
        if not prim.strings and any(a.type.dtype == "str" for a in ins):
            raise KsbuildError(f"strings are only compared for equality and moved: '{prim.name}' does not take them",
                               self.loc)
        try:
            out_types = prim.type_rule([a.type for a in ins], **params)
        except KsbuildError as e:
            raise e.at(self.loc) from None
        outs = tuple(Var(t) for t in out_types)
        self.eqns.append(Eqn(prim, tuple(ins), outs, freeze(params), self.loc))
        return outs

    def __getattr__(self, name: str):
        from ..prims.base import FORMS, PRIMS, lookup

        if name.startswith("_") or (name not in PRIMS and name not in FORMS):
            raise AttributeError(name)
        prim, fixed = lookup(name)

        def call(*ins: Atom, **params: Any):
            outs = self.bind(prim, ins, {**params, **fixed})
            return outs[0] if len(outs) == 1 else outs

        return call

    def lit(self, value: Any, type: Type) -> Lit:
        return Lit(value, type)

    def name(self, a: Atom | None, hint: str) -> None:
        """Give a var made here without a name the user's name for it (e.g. the variable it is
        assigned to); the first name given wins."""
        if isinstance(a, Var) and not a.hint and hint and hint.isidentifier():
            # (a leading __ is reserved in C++; a comprehension's accumulator __sum_3_8 is sum, __x is x)
            bare = re.sub(r"(_\d+)+$", "", hint.lstrip("_")) if hint.startswith("__") else hint
            self.names.setdefault(a, bare or hint.lstrip("_") or hint)

    def name_like(self, outs: Sequence[Atom], like: Sequence[Var], prefix: str = "") -> None:
        """Name each of outs after the var it stands for in like (prefixed, e.g. d for a tangent)."""
        for a, v in zip(outs, like):
            if v.hint:
                self.name(a, prefix + v.hint)

    def func(self, name: str, params: Sequence[Var], results: Sequence[Atom], result_names=()) -> Func:
        eqns, results = self._named(list(results))
        return Func(name, tuple(params), tuple(eqns), tuple(results), tuple(result_names))

    def _named(self, results: list) -> tuple[list[Eqn], list]:
        """The equations and results with every var in self.names replaced by a named copy."""
        defined = {v for e in self.eqns for v in e.outs}
        new = {v: Var(v.type, h) for v, h in self.names.items() if v in defined}
        if not new:
            return self.eqns, results
        swap = lambda a: new.get(a, a) if isinstance(a, Var) else a  # noqa: E731
        eqns = [e if not any(isinstance(a, Var) and a in new for a in e.ins + e.outs) else
                Eqn(e.prim, tuple(swap(a) for a in e.ins), tuple(swap(v) for v in e.outs), e.params, e.loc)
                for e in self.eqns]
        return eqns, [swap(r) for r in results]


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
