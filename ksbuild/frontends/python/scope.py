"""Values and scopes of the Python frontend.

A value is an IR atom or a `Const` (a Python number or bool not yet given a dtype: weak, like
a literal in torch). A `Scope` maps names to values; a nested scope compiles a closed
sub-function (an if-branch or a loop body) and captures outer values as its parameters.
"""
from __future__ import annotations

import ast
import collections
from dataclasses import dataclass, field
from typing import Union

from ...ir.core import Atom, Lit, Var
from ...ir.types import Type


@dataclass(frozen=True)
class Const:
    """A Python constant (bool, int or float) with no dtype yet."""

    value: Union[bool, int, float]


@dataclass(frozen=True)
class SymDim:
    """A symbolic tensor dimension (from x.shape or len(x)) used as a Python int: it stays a dim
    through + - * // with ints and other dims, so range(n) and torch.zeros(n) keep their shapes."""

    dim: str


@dataclass(frozen=True)
class DtypeValue:
    """A torch dtype used as a value (torch.float64, torch.int64, ...), e.g. in dtype=..."""

    dtype: str


@dataclass(frozen=True)
class AppendList:
    """`out = []` filled by `out.append(e)` as the last statement of a following for loop: before the
    loop `rows` is None; after it, the loop's stacked values (one row per iteration, along axis 0)."""

    rows: object = None


TORCH_DTYPES = {"float32": "f32", "float": "f32", "float64": "f64", "double": "f64", "int32": "i32",
                "int": "i32", "int64": "i64", "long": "i64", "bool": "bool"}

Value = Union[Atom, Const, SymDim, DtypeValue, tuple]


def dim_value(d) -> "Const | SymDim":
    """A tensor dim as a frontend value."""
    return Const(d) if isinstance(d, int) else SymDim(d)


def const_type(c: Const, float_dtype: str) -> Type:
    """The dtype a weak constant takes when it must have one."""
    if isinstance(c.value, bool):
        return Type("bool")
    return Type("i64") if isinstance(c.value, int) else Type(float_dtype)


def const_lit(c: Const, t: Type) -> Lit:
    v = c.value
    if t.dtype == "bool":
        return Lit(bool(v), t)
    return Lit(float(v) if t.is_float else int(v), t)


@dataclass
class Scope:
    """Names visible while compiling one closed function body."""

    names: dict[str, Value] = field(default_factory=dict)
    parent: "Scope | None" = None
    captured: dict[int, tuple[Atom, Var]] = field(default_factory=dict)

    def lookup(self, name: str) -> Value | None:
        if name in self.names:
            return self.names[name]
        if self.parent is None:
            return None
        outer = self.parent.lookup(name)
        if outer is None:
            return None
        value = self.capture(outer)
        self.names[name] = value
        return value

    def capture(self, outer: Value) -> Value:
        """The inner stand-in for an outer value (constants and literals are copied)."""
        if isinstance(outer, (Const, Lit, SymDim)):
            return outer
        if isinstance(outer, tuple):
            return tuple(self.capture(v) for v in outer)
        if id(outer) not in self.captured:
            self.captured[id(outer)] = (outer, Var(outer.type, outer.hint))
        return self.captured[id(outer)][1]

    def child(self) -> "Scope":
        return Scope(parent=self)


class Keywords(dict):
    """A call's keyword arguments that remember which ones the function's handler looked at, so that one it
    never read (a loss's weight= the decomposition does not implement) is an error instead of being ignored."""

    def __init__(self, values: dict):
        super().__init__(values)
        self.seen: set[str] = set()

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self.seen.add(key)
        return super().__contains__(key)

    def __iter__(self):
        self.seen.update(self.keys())
        return super().__iter__()

    def items(self):
        self.seen.update(self.keys())
        return super().items()

    def unread(self) -> list[str]:
        """The keywords given that nobody read, in the call's order."""
        return [k for k in self.keys() if k not in self.seen]


class Returned(Exception):
    """Internal: raised to unwind a block after a `return`, carrying the returned value."""

    def __init__(self, value: Value):
        self.value = value


class FInfo:
    """torch.finfo(dtype): its eps, max, min, tiny and resolution as constants of the kernel."""

    FIELDS = ("eps", "max", "min", "tiny", "smallest_normal", "resolution")

    def __init__(self, dtype: str):
        self.dtype = dtype

    def value(self, field: str) -> float:
        import numpy as np
        info = np.finfo({"f16": np.float16, "f32": np.float32}.get(self.dtype, np.float64))
        return float(getattr(info, "tiny" if field == "smallest_normal" else field))


def assigned_names(stmts: list[ast.stmt], loops: bool = True) -> set[str]:
    """Names stored to anywhere in these statements (x[i] = v stores to x); with loops=False, not those stored
    to only inside for/while loops."""
    out = set()
    for s in stmts:
        if not loops and isinstance(s, (ast.For, ast.While)):
            continue
        if not loops and isinstance(s, ast.If):
            out |= assigned_names(s.body, loops) | assigned_names(s.orelse, loops)
            continue
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name):
                out.add(n.value.id)
    return out


# torch.max(x, dim) and friends return a pair with .values and .indices
ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])
