"""The IR verifier: run after every pass in tests; any failure is a ksbuild bug ("internal: ...").

Checks, recursing into every sub-function carried in equation params:
- every var is defined exactly once in the whole tree and used only after its definition, in
  the function that defines it (sub-functions are closed: they capture nothing);
- each equation's prim is the registered one and its out types are what the type rule gives;
- every literal holds a Python bool/int/float that fits its dtype.
A sub-function object shared by several equations is checked once.
"""
from __future__ import annotations

from ..errors import KsbuildError
from .core import Atom, Eqn, Func, Lit, Var
from .types import DTYPES, FLOAT_DTYPES, Type

_INT_RANGE = {"i8": (-2**7, 2**7 - 1), "i16": (-2**15, 2**15 - 1), "i32": (-2**31, 2**31 - 1),
              "i64": (-2**63, 2**63 - 1), "u8": (0, 2**8 - 1), "u16": (0, 2**16 - 1), "u32": (0, 2**32 - 1),
              "u64": (0, 2**64 - 1), "i4": (-8, 7), "u4": (0, 15), "i2": (-2, 1), "u2": (0, 3)}


def verify(f: Func) -> None:
    """Raise KsbuildError("internal: ...") if f (or any function nested in it) is malformed."""
    _Verifier().func(f, f.name)


def lit_problem(lit: Lit) -> str | None:
    """Why a literal is malformed, or None if its value fits its type."""
    v, t = lit.value, lit.type
    if not isinstance(t, Type) or t.dtype not in DTYPES:
        return f"literal {v!r} has no valid type: {t!r}"
    if t.dtype == "str" or type(v) is str:
        return None if t.dtype == "str" and type(v) is str else f"literal value {v!r} does not fit its type {t}"
    if type(v) not in (bool, int, float):
        return f"literal value {v!r} is a {type(v).__name__}, not a Python bool, int or float"
    if t.dtype == "bool":
        ok = type(v) is bool
    elif t.dtype in FLOAT_DTYPES or t.dtype not in _INT_RANGE:  # f32, f64 and the narrow storage floats
        ok = type(v) in (int, float)
    else:
        low, high = _INT_RANGE[t.dtype]
        ok = type(v) is int and low <= v <= high
    return None if ok else f"literal value {v!r} does not fit its type {t}"


class _Verifier:
    """Walks a function tree, remembering every var definition and every function seen."""

    def __init__(self):
        self.defined: set[Var] = set()
        self.seen: set[int] = set()

    def fail(self, where: str, message: str) -> KsbuildError:
        return KsbuildError(f"internal: in {where}: {message}")

    def func(self, f: Func, where: str) -> None:
        if id(f) in self.seen:
            return
        self.seen.add(id(f))
        scope: set[Var] = set()
        for p in f.params:
            self.define(p, scope, f"{where}, parameter")
        for i, eqn in enumerate(f.eqns):
            at = f"{where}, equation {i} ({_named(eqn)})"
            self.eqn(eqn, scope, at)
        for r in f.results:
            self.use(r, scope, f"{where}, results")

    def define(self, v: Var, scope: set[Var], where: str) -> None:
        if not isinstance(v, Var) or not isinstance(v.type, Type):
            raise self.fail(where, f"{v!r} is not a typed Var")
        if v in self.defined:
            raise self.fail(where, f"{v!r} is defined twice")
        self.defined.add(v)
        scope.add(v)

    def use(self, a: Atom, scope: set[Var], where: str) -> None:
        if isinstance(a, Lit):
            problem = lit_problem(a)
            if problem:
                raise self.fail(where, problem)
        elif not isinstance(a, Var):
            raise self.fail(where, f"{a!r} is neither a Var nor a Lit")
        elif a not in scope:
            how = "captured from another function" if a in self.defined else "used before its definition"
            raise self.fail(where, f"{a!r} is {how}")

    def eqn(self, eqn: Eqn, scope: set[Var], where: str) -> None:
        from ..prims.base import PRIMS

        if PRIMS.get(getattr(eqn.prim, "name", None)) is not eqn.prim:
            raise self.fail(where, f"{eqn.prim!r} is not a registered primitive")
        for a in eqn.ins:
            self.use(a, scope, where)
        for key, value in sorted(eqn.params.items()):
            if isinstance(value, Func):
                self.func(value, f"{where}, param {key} '{value.name}'")
        self.check_types(eqn, where)
        for v in eqn.outs:
            self.define(v, scope, where)

    def check_types(self, eqn: Eqn, where: str) -> None:
        try:
            want = tuple(eqn.prim.type_rule([a.type for a in eqn.ins], **eqn.params))
        except KsbuildError as e:
            raise self.fail(where, f"the type rule rejects it: {e.message}") from None
        got = tuple(v.type for v in eqn.outs)
        if got != want:
            shown = lambda ts: ", ".join(map(str, ts))  # noqa: E731
            raise self.fail(where, f"out types ({shown(got)}) differ from the type rule's ({shown(want)})")


def _named(eqn: Eqn) -> str:
    """The equation's prim by the name its form is written with (exp for math[fn="exp"], lt for compare[op="lt"])."""
    from ..prims.base import Prim, form_name
    return form_name(eqn.prim, eqn.params) if isinstance(eqn.prim, Prim) else str(getattr(eqn.prim, "name", eqn.prim))
