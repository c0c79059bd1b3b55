"""Compile the two branches of an `if` into closed functions and bind a `cond`.

Each branch runs in a child scope; outer values it reads become captured parameters. Both
branch functions take the union of the captures, and their results are unified to one type.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ...ir.builder import Builder
from ...ir.core import Atom, Func, Var
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
    kept = [i for i, t in enumerate(types) if t is not None]  # (a value neither branch defines stays UNDEF)
    captured: dict[int, Atom] = {}
    for _, sc, _ in runs:
        for key, (outer, _) in sc.captured.items():
            captured.setdefault(key, outer)
    fns = [_finish(fc, bb, sc, [vals[i] for i in kept], [types[i] for i in kept], captured, node)
           for bb, sc, vals in runs]
    outs = b.bind(_prim(prim), [pred, *captured.values()], {"then_fn": fns[0], "else_fn": fns[1]})
    for i, out in zip(kept, outs):  # a result that is an outer tensor passed through is, in torch, that tensor
        passed = [outer for _, sc, vals in runs for outer, var in sc.captured.values() if var is vals[i]]
        if passed and out.type.rank:
            fc.picks[out] = tuple(passed)
    result: list[Value] = [UNDEF] * len(types)
    for i, out in zip(kept, outs):
        result[i] = out
    return result


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
    if x is UNDEF or y is UNDEF:
        from .scope import const_type
        v = y if x is UNDEF else x
        return None if v is UNDEF else const_type(v, fc.float_dtype) if isinstance(v, Const) else v.type
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
    results = [_zeros(t) if v is UNDEF else fc.as_atom(bb, v, t, node) for v, t in zip(vals, types)]
    return bb.func("branch", params, results)


def _zeros(t) -> Atom:
    from ...ops.create import full
    return full(t.shape, 0, t.dtype)


def _prim(name: str):
    from ...prims import PRIMS
    return PRIMS[name]


# ---- an if that may return on some paths and go on on others ------------------------------------------
#
# `if c: (return on some paths)` followed by `rest`, where both branches may also go on: compiling rest into
# both branches doubles it for every such if (24 of them in a row never finish). Instead the if becomes a cond
# whose results say whether it returned, what it returned and the values of the names it assigns; rest is
# then compiled once, in the else branch of a second cond on `returned`. While the branches of the first cond
# are compiled, a `return v` and the end of a branch (FallThrough) both produce that packed tuple.


class Undefined:
    """A value no path of a branch defines (what was not returned, a name not yet assigned): it takes the
    other branch's type, and zeros where a cond must produce it."""

    def __repr__(self) -> str:
        return "UNDEF"


UNDEF = Undefined()


class FallThrough(ast.Pass):
    """The end of a branch of an if that may return: the packed values with `returned` false."""


@dataclass(frozen=True)
class Frame:
    """The if being compiled with packed results: the names it assigns, how many values a return gives."""

    names: tuple[str, ...]
    arity: int


def packed(fc, scope: Scope, value: Value | None, where: ast.AST) -> tuple:
    """(returned, *returned values, *names' values) for the innermost Frame; value None: no return here."""
    frame = fc.frames[-1]
    values = [UNDEF] * frame.arity if value is None else _flatten(value)
    if len(values) != frame.arity:
        raise fc.src.error(where, f"this return gives {len(values)} value(s) where the function returns "
                           f"{frame.arity}", hint="return the same number of values on every path")
    current = [scope.lookup(n) for n in frame.names]
    return (Const(value is not None), *values, *[UNDEF if v is None else v for v in current])


def compile_early_returns(fc, b: Builder, scope: Scope, pred: Atom, s: ast.If, rest, names) -> Returned:
    """The Returned of `if pred: s.body else: s.orelse` then rest (see above); `names`: what the if assigns."""
    frame = Frame(tuple(names), _arity(fc, fc.src.functions[fc.active[-1]]))
    ends = [FallThrough(), FallThrough()]
    for end, body in zip(ends, (s.body, s.orelse)):
        ast.copy_location(end, body[-1] if body else s)
    fc.frames.append(frame)
    try:
        outs = compile_branches(fc, b, scope, pred, [s.body + [ends[0]], s.orelse + [ends[1]]], None, s)
    finally:
        fc.frames.pop()
    returned, values, after = outs[0], outs[1:1 + frame.arity], outs[1 + frame.arity:]
    for n, v in zip(frame.names, after):
        if v is not UNDEF:
            scope.names[n] = v
    hidden = [f"return#{i}" for i in range(frame.arity)]  # (not an identifier: no user name clashes)
    scope.names.update(zip(hidden, values))
    ret = ast.Return(value=_names(hidden) if len(hidden) > 1 else ast.Name(id=hidden[0], ctx=ast.Load()))
    for n in ast.walk(ret):
        ast.copy_location(n, s)
    if isinstance(returned, Const):
        fc.block(b, scope, [ret] if returned.value else rest)
        raise fc.src.error(s, "this code path does not return")
    final = compile_branches(fc, b, scope, returned, [[ret], rest], None, s)
    return Returned(final[0] if len(final) == 1 else tuple(final))


def always_returns(stmts) -> bool:
    """Whether every path through these statements ends in a return."""
    for s in stmts:
        if isinstance(s, ast.Return):
            return True
        if isinstance(s, ast.If) and always_returns(s.body) and always_returns(s.orelse):
            return True
    return False


def _names(hidden: list[str]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Name(id=h, ctx=ast.Load()) for h in hidden], ctx=ast.Load())


def _arity(fc, fn: ast.FunctionDef) -> int:
    """How many values the function returns: its tuple annotation's length, else its returns' (1 unless
    every return is a tuple display of one length)."""
    r = fn.returns
    if isinstance(r, ast.Subscript) and isinstance(r.value, ast.Name) and r.value.id in ("tuple", "Tuple"):
        return len(r.slice.elts) if isinstance(r.slice, ast.Tuple) else 1
    sizes = {len(n.value.elts) if isinstance(n.value, ast.Tuple) else 1
             for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None}
    return sizes.pop() if len(sizes) == 1 else 1
