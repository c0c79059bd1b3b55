"""The canonical text form of the IR: `print_func` (the inverse of `parser.parse_func`).

    func relu3(%x: f32) -> (f32) {
      %0: bool = lt(%x, 0.0: f32)
      %1: f32 = cond(%0, %x)
        else_fn = func inner(%2: f32) -> (f32) {
          ...
        }
        then_fn = func zero(%10: f32) -> (f32) {
          return 0.0: f32
        }
      return %1
    }

A var is printed as `%hint` when its hint is an identifier no other var of the whole
function (nested bodies included) shares, as `%hint_K` for the K-th var sharing a hint (that
does not end in a digit), otherwise as `%N`, N counting in text order.
Names never depend on `Var.uid`. Params are sorted by key; literal params go in brackets
as Python literals, sub-function params follow the equation as indented blocks.
Result names, when there is one per result, are printed in the result types: `-> (dx: f32)`.
"""
from __future__ import annotations

import re
from collections import ChainMap, Counter
from contextvars import ContextVar
from typing import Any, Iterator, Mapping

import numpy as np

from ..errors import KsbuildError
from .core import Atom, Eqn, Func, Lit, Var
from .dense import Dense
from .types import Type

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
INDENT = "  "


def print_func(f: Func, elide_over: int | None = None) -> str:
    """The canonical text of f: byte-identical for structurally identical functions.

    With `elide_over`, dense constants of more elements are shown by digest only (for reading;
    such text does not parse back)."""
    namer = _Namer(f)
    lines: list[str] = []
    token = _ELIDE.set(elide_over)
    try:
        _func_lines(f, "func", namer, 0, lines)
    finally:
        _ELIDE.reset(token)
    return "\n".join(lines) + "\n"


_ELIDE: ContextVar[int | None] = ContextVar("elide_over", default=None)


def walk_vars(f: Func) -> Iterator[Var]:
    """Every var f defines, nested bodies included, in text order (a shared body once per use). A stack of what
    is left to walk, not a generator per level: helpers nested 300 deep would pass each var up 300 generators."""
    todo: list[Func | Eqn] = [f]
    while todo:
        item = todo.pop()
        if isinstance(item, Func):
            yield from item.params
            todo.extend(reversed(item.eqns))
        else:
            yield from item.outs
            todo.extend(reversed([sub for _, sub in func_params(item)]))


def func_params(eqn: Eqn) -> list[tuple[str, Func]]:
    """The (key, sub-function) params of an equation, sorted by key."""
    return [(k, v) for k, v in sorted(eqn.params.items()) if isinstance(v, Func)]


class _Namer:
    """Gives each var definition a name: its hint if unique in the whole function, `hint_K` for the
    K-th of several vars sharing a hint, otherwise a number."""

    def __init__(self, f: Func):
        self.hints = Counter(v.hint for v in walk_vars(f))
        self.count = 0
        self.per_hint: Counter = Counter()
        self.plan = f.plan

    def define(self, scope: dict[Var, str], v: Var) -> str:
        if IDENT.match(v.hint) and self.hints[v.hint] == 1:
            name = f"%{v.hint}"
        elif IDENT.match(v.hint) and not v.hint[-1].isdigit():
            self.per_hint[v.hint] += 1
            name = f"%{v.hint}_{self.per_hint[v.hint]}"
        else:
            name = f"%{self.count}"
            self.count += 1
        scope[v] = name
        return name


def _func_lines(f: Func, head: str, namer: _Namer, depth: int, lines: list[str], outer: Mapping | None = None) -> None:
    """f's lines; `outer` names the enclosing functions' values (a body's result may be placed in the buffer of
    its equation's output)."""
    pad = INDENT * depth
    scope: dict[Var, str] = {}
    params = ", ".join(f"{namer.define(scope, p)}: {format_type(p.type)}" for p in f.params)
    lines.append(f"{pad}{head} {format_name(f.name)}({params}) -> ({_result_types(f)}) {{")
    known = ChainMap(scope, outer or {})  # (a view, not a copy per equation: copies made long functions quadratic)
    for eqn in f.eqns:
        lines.append(pad + INDENT + _eqn_line(eqn, namer, scope) + _placement(eqn, namer, known))
        for key, sub in func_params(eqn):
            _func_lines(sub, f"{key} = func", namer, depth + 2, lines, known)
    results = ", ".join(_atom(r, scope) for r in f.results)
    lines.append(f"{pad}{INDENT}return {results}".rstrip())
    lines.append(f"{pad}}}")


def _placement(eqn: Eqn, namer: _Namer, scope: Mapping[Var, str]) -> str:
    """A comment saying where the memory plan puts the equation's outputs (if there is a plan)."""
    if namer.plan is None:
        return ""
    places = [(v, namer.plan.places[v]) for v in eqn.outs if v in namer.plan.places]
    shown = [f"{scope[v]} in {p.text(lambda u: scope.get(u, '?'))}" for v, p in places]
    return "  # " + ", ".join(shown) if shown else ""


def _result_types(f: Func) -> str:
    types = [format_type(r.type) for r in f.results]
    if len(f.result_names) == len(types) and types:
        types = [f"{format_name(n)}: {t}" for n, t in zip(f.result_names, types)]
    return ", ".join(types)


def _eqn_line(eqn: Eqn, namer: _Namer, scope: dict[Var, str]) -> str:
    args = ", ".join(_atom(a, scope) for a in eqn.ins)
    from ..prims.base import form_name
    name = form_name(eqn.prim, eqn.params)  # (lt(x, y) for compare[op="lt"](x, y))
    fixed = eqn.prim.forms.get(name, {})
    literal = [f"{k}={format_value(v)}" for k, v in sorted(eqn.params.items())
               if not isinstance(v, Func) and k not in fixed]
    brackets = f"[{', '.join(literal)}]" if literal else ""
    outs = ", ".join(f"{namer.define(scope, v)}: {format_type(v.type)}" for v in eqn.outs)
    return f"{outs or '()'} = {name}{brackets}({args})"


def _atom(a: Atom, scope: dict[Var, str]) -> str:
    if isinstance(a, Lit):
        return f"{format_scalar(a.value)}: {format_type(a.type)}"
    if a not in scope:
        raise KsbuildError(f"internal: cannot print {a!r}: it is not defined in this function")
    return scope[a]


def format_type(t: Type) -> str:
    """A type as text: `f32`, `f32[n, 3]` (a dim that is not an identifier is quoted)."""
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{', '.join(format_value(d) if isinstance(d, int) else format_name(d) for d in t.shape)}]"


def format_name(name: str) -> str:
    """A name as an identifier if it is one, else as a quoted Python string."""
    return name if IDENT.match(name) else repr(name)


def format_scalar(value: Any) -> str:
    """A literal's value: `True`, `3`, `0.5`, `-inf` (floats keep a `.` or exponent), `'text'`."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    raise KsbuildError(f"internal: cannot print literal value {value!r}")


def format_value(value: Any) -> str:
    """A param value as a Python literal: scalars, strings, None, tuples and lists of them, or a
    dense constant `dense(f32[2, 3], 'base64 of the bytes')`."""
    if isinstance(value, Dense):
        limit = _ELIDE.get()
        if limit is not None and value.size > limit:
            return f"dense({format_type(value.type)}, sha256:{value.digest[:16]})"
        return f"dense({format_type(value.type)}, '{value.text}')"
    if value is None or isinstance(value, str):
        return repr(value)
    if isinstance(value, tuple):
        items = [format_value(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(format_value(v) for v in value)}]"
    return format_scalar(value)
