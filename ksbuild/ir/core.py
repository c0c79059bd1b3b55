"""The IR: immutable, typed, first-order, in A-normal form.

A `Func` is typed parameters, a list of equations `outs = prim[params](ins)` and results.
Atoms are `Var`s (defined once) and `Lit`s (constants; a tensor-typed literal is a splat).
Control flow is carried as sub-`Func`s in equation params (`cond`, `loop`, `call`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Union

from ..errors import Location
from .types import Type

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Var:
    """A value defined exactly once; compared by identity. `hint` is a readable name."""

    type: Type
    hint: str = ""
    uid: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"Var({self.hint or 'v'}{self.uid}: {self.type})"


@dataclass(frozen=True)
class Lit:
    """A constant. With a tensor type, every element equals `value`."""

    value: Any
    type: Type

    def __repr__(self) -> str:
        return f"Lit({self.value}: {self.type})"


Atom = Union[Var, Lit]


def freeze(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(params or {}))


@dataclass(frozen=True, eq=False)
class Eqn:
    """`outs = prim[params](ins)`; `loc` points at the user's source when known."""

    prim: Any  # ksbuild.prims.base.Prim (kept untyped to avoid an import cycle)
    ins: tuple[Atom, ...]
    outs: tuple[Var, ...]
    params: Mapping[str, Any] = field(default_factory=lambda: freeze(None))
    loc: Location | None = None


@dataclass(frozen=True, eq=False)
class Func:
    """A function: parameters, equations in order, results."""

    name: str
    params: tuple[Var, ...]
    eqns: tuple[Eqn, ...]
    results: tuple[Atom, ...]
    result_names: tuple[str, ...] = ()
    plan: Any = None  # the memory plan (transforms.plan_memory.Plan) once the pipeline has made one
    notes: tuple[str, ...] = ()  # a frontend's words on the C ABI of its parameters (ONNX sequences, optionals)
    defaults: tuple[tuple[str, Any], ...] = ()  # a Python kernel's parameter defaults (name, value): the Python API's

    @property
    def in_types(self) -> tuple[Type, ...]:
        return tuple(p.type for p in self.params)

    @property
    def out_types(self) -> tuple[Type, ...]:
        return tuple(r.type for r in self.results)

    def renamed(self, name: str) -> "Func":
        return Func(name, self.params, self.eqns, self.results, self.result_names, self.plan, self.notes,
                    self.defaults)


def sub_funcs(eqn: Eqn) -> list[Func]:
    """The sub-functions an equation carries in its params, in param order."""
    return [v for _, v in sorted(eqn.params.items()) if isinstance(v, Func)]
