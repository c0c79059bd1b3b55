"""Compile the two branches of an `if` into closed functions and bind a `cond`.

Each branch runs in a child scope; outer values it reads become captured parameters. Both
branch functions take the union of the captures, and their results are unified to one type.
"""
from __future__ import annotations

import ast

from ..ir.builder import Builder
from ..ir.core import Atom, Func, Var
from .scope import Const, Returned, Scope, Value


def compile_branches(fc, b: Builder, scope: Scope, pred: Atom, bodies, names, node: ast.AST,
                     prim: str = "cond") -> list[Value]:
    """Run both bodies; `names` lists the variables to return (None: the bodies return); bind `prim` (cond, or
    cond_select for an if-expression)."""
    runs = [_run(fc, scope, body, names, node) for body in bodies]
    values = [v for _, _, v in runs]
    if len({len(v) for v in values}) != 1:
        raise fc.src.error(node, "the branches of this if return different numbers of values")
    types = [_meet(fc, a, c, node) for a, c in zip(*values)]
    captured: dict[int, Atom] = {}
    for _, sc, _ in runs:
        for key, (outer, _) in sc.captured.items():
            captured.setdefault(key, outer)
    fns = [_finish(fc, bb, sc, vals, types, captured, node) for bb, sc, vals in runs]
    outs = b.bind(_prim(prim), [pred, *captured.values()], {"then_fn": fns[0], "else_fn": fns[1]})
    for i, out in enumerate(outs):  # a result that is an outer tensor passed through is, in torch, that tensor
        passed = [outer for _, sc, vals in runs for outer, var in sc.captured.values() if var is vals[i]]
        if passed and out.type.rank:
            fc.picks[out] = tuple(passed)
    return list(outs)


def _run(fc, scope: Scope, body, names, node):

    bb, sc = Builder(fc.src.loc(node)), scope.child()
    if names is None:
        return bb, sc, _flatten(fc.run_body(bb, sc, body, node))
    try:
        fc.block(bb, sc, body)
    except Returned:
        raise fc.src.error(node, "internal: unexpected return in a non-returning if") from None
    vals = []
    for n in names:
        v = sc.lookup(n)
        if v is None:
            raise fc.src.error(node, f"'{n}' is assigned in only one branch of this if and not before it",
                               hint=f"give '{n}' a value before the if")
        vals.append(v)
    return bb, sc, vals


def _flatten(v: Value) -> list[Value]:
    return list(v) if isinstance(v, tuple) else [v]


def _meet(fc, x: Value, y: Value, node):
    """The type both branch values convert to."""
    if isinstance(x, tuple) or isinstance(y, tuple):
        raise fc.src.error(node, "a branch produces a nested tuple")
    if isinstance(x, Const) and isinstance(y, Const):
        from .scope import const_type
        return const_type(Const(x.value + y.value) if not isinstance(x.value, bool) else x, fc.float_dtype)
    t = fc.unify(Builder(), x, y, node)[0].type if not (isinstance(x, Const) or isinstance(y, Const)) else None
    if t is not None:
        return t
    from .mathlib import common_type
    a = y if isinstance(x, Const) else x
    return common_type(fc, x, y, node).with_shape(a.type.shape)


def _finish(fc, bb: Builder, sc: Scope, vals, types, captured: dict[int, Atom], node) -> Func:
    params = []
    for key, outer in captured.items():
        params.append(sc.captured[key][1] if key in sc.captured else Var(outer.type, outer.hint))
    results = [fc.as_atom(bb, v, t, node) for v, t in zip(vals, types)]
    return bb.func("branch", params, results)


def _prim(name: str):
    from ..prims import PRIMS
    return PRIMS[name]
