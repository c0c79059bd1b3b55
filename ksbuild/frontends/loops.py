"""`for i in range(...)` loops: a `loop` prim whose carries are the names the body reassigns.

The trip count is computed from start/stop/step; the body gets the iteration number k and
computes i = start + k * step. Outer values the body reads are captured as loop constants.
"""
from __future__ import annotations

import ast

from ..ir.builder import Builder
from ..ir.core import Lit, Var
from ..ir.types import Type
from .scope import Const, Scope, SymDim

I64 = Type("i64")


def for_loop(fc, b: Builder, scope: Scope, s: ast.For) -> None:
    """Compile a for statement into a loop equation and rebind the carried names."""
    if not isinstance(s.target, ast.Name):
        raise fc.src.error(s.target, "the loop variable must be a plain name")
    if s.orelse:
        raise fc.src.error(s, "for ... else is not supported")
    from .python import _assigned
    carried = [n for n in sorted(_assigned(s.body)) if n != s.target.id and scope.lookup(n) is not None]
    outs = counted_loop(fc, b, scope, s, s.target.id, s.iter, s.body, carried, [])
    for n, o in zip(carried, outs):
        b.name(o, n)
        scope.names[n] = o


def counted_loop(fc, b: Builder, scope: Scope, node, target: str, it: ast.expr, stmts, carried, y_exprs):
    """A loop over range(...) running stmts; returns the final carries then the stacked y_exprs."""
    start, stop, step = _range_args(fc, b, scope, it)
    trip, length = _trip_count(fc, b, start, stop, step, node)
    init = [scope.lookup(n) for n in carried]
    types = [_carry_type(fc, v, node) for v in init]
    for _ in range(3):  # a weak constant carry may need to widen (x = 0 then x = x + 0.5)
        body, sc, raw = _body(fc, scope, node, target, stmts, carried, types, start, step, y_exprs)
        widened = [w if isinstance(v, Const) and w is not None else t for t, w, v in zip(types, raw, init)]
        if widened == types:
            break
        types = widened
    if y_exprs and length is None:
        raise fc.src.error(it, "a comprehension needs a length known when the kernel is called",
                           hint="use range(n) with n a literal or a tensor dim such as x.shape[0]")
    consts = [outer for outer, _ in sc.captured.values()]
    init_atoms = [fc.as_atom(b, v, t, node) for v, t in zip(init, types)]
    return b.bind(_prim("loop"), [trip, *consts, *init_atoms],
                  dict(body=body, n_consts=len(consts), n_carry=len(carried), length=length, reverse=False))


def comprehension(fc, b: Builder, scope: Scope, call: ast.Call, kind: str):
    """sum(e for i in range(n)) as a carried sum; torch.stack([e for i in range(n)]) as stacked ys."""
    comp = call.args[0]
    if len(comp.generators) != 1:
        raise fc.src.error(comp, "a comprehension with one `for` is supported (nest comprehensions instead)")
    g = comp.generators[0]
    if g.ifs or g.is_async or not isinstance(g.target, ast.Name):
        raise fc.src.error(comp, "comprehension filters (`if`) and tuple targets are not supported",
                           hint="use torch.where(...) inside the expression")
    if kind == "stack":
        dim = 0
        for k in call.keywords:
            if k.arg != "dim":
                raise fc.src.error(k.value, f"unsupported keyword argument '{k.arg}'")
            from .tensors import int_const
            dim = int_const(fc, fc.expr(b, scope, k.value), k.value, "dim")
        (ys,) = counted_loop(fc, b, scope, comp, g.target.id, g.iter, [], [], [comp.elt])
        from .tensors import move_axis0
        return move_axis0(b, ys, dim + ys.type.rank if dim < 0 else dim)
    acc = f"__sum_{comp.lineno}_{comp.col_offset}"  # not a Python name a user can write twice
    scope.names[acc] = Const(0)
    add = ast.Assign(targets=[ast.Name(acc, ast.Store())],
                     value=ast.BinOp(ast.Name(acc, ast.Load()), ast.Add(), comp.elt))
    ast.copy_location(add, comp.elt)
    ast.copy_location(add.targets[0], comp.elt)
    ast.copy_location(add.value, comp.elt)
    ast.copy_location(add.value.left, comp.elt)
    (out,) = counted_loop(fc, b, scope, comp, g.target.id, g.iter, [add], [acc], [])
    del scope.names[acc]
    return out


def _carry_type(fc, v, node) -> Type:
    if isinstance(v, tuple):
        raise fc.src.error(node, "a tuple cannot be carried through a loop; unpack it first")
    from .scope import const_type
    return const_type(v, fc.float_dtype) if isinstance(v, Const) else v.type


def _body(fc, scope: Scope, node, target: str, stmts, carried, types, start, step, y_exprs):
    from .python import Returned

    bb, sc = Builder(fc.src.loc(node)), scope.child()
    k = Var(I64, "k")
    carry_params = [Var(t, "sum" if n.startswith("__sum") else n) for n, t in zip(carried, types)]
    sc.names.update(zip(carried, carry_params))
    sc.names[target] = _index(fc, bb, sc, k, start, step)
    try:
        fc.block(bb, sc, stmts)
    except Returned:
        raise fc.src.error(node, "return inside a for loop is not supported",
                           hint="carry the result in a variable and return after the loop") from None
    values = [sc.lookup(n) for n in carried]
    raw = [None if isinstance(v, (Const, tuple, SymDim)) else v.type for v in values]
    # a weak-constant carry that comes back wider (0 then a float tensor) is retried with that type
    weak = [isinstance(scope.lookup(n), Const) for n in carried]
    outs = [fc.as_atom(bb, v, r if w and r is not None and r != t else t, node)
            for v, t, r, w in zip(values, types, raw, weak)]
    for e in y_exprs:
        outs.append(fc.as_atom(bb, fc.expr(bb, sc, e), None, e))
    consts = [inner for _, inner in sc.captured.values()]
    return bb.func("loop_body", [k, *consts, *carry_params], outs), sc, raw


def _index(fc, bb: Builder, sc: Scope, k, start, step):
    """i = start + k * step inside the body (outer start/step values are captured)."""
    i = k
    start = bb.dim_size(dim=start.dim) if isinstance(start, SymDim) else start
    if not (isinstance(step, Const) and step.value == 1):
        i = bb.mul(i, sc.capture(step) if not isinstance(step, Const) else Lit(step.value, I64))
    if not (isinstance(start, Const) and start.value == 0):
        i = bb.add(i, sc.capture(start) if not isinstance(start, Const) else Lit(start.value, I64))
    return i


def _range_args(fc, b: Builder, scope: Scope, it: ast.expr):
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and 1 <= len(it.args) <= 3 and not it.keywords):
        raise fc.src.error(it, "a for loop must iterate over range(...)", hint="for i in range(n): ...")
    args = [fc.expr(b, scope, a) for a in it.args]
    for a, node in zip(args, it.args):
        if isinstance(a, (tuple, list, str)) or (isinstance(a, Const) and type(a.value) is not int) or \
                (isinstance(a, Var) and a.type.dtype not in ("i32", "i64")):
            raise fc.src.error(node, "range() arguments must be integers")
    args = [a if isinstance(a, (Const, SymDim)) or a.type.dtype == "i64" else b.convert(a, dtype="i64")
            for a in args]
    if len(args) == 1:
        return Const(0), args[0], Const(1)
    return args[0], args[1], args[2] if len(args) == 3 else Const(1)


def _trip_count(fc, b: Builder, start, stop, step, node):
    """(trip atom, static length or None)."""
    if not isinstance(step, Const) or step.value == 0:
        raise fc.src.error(node.iter, "the range step must be a nonzero integer literal")
    if isinstance(start, Const) and isinstance(stop, Const):
        n = len(range(start.value, stop.value, step.value))
        return Lit(n, I64), n
    dimlike = [isinstance(v, SymDim) or isinstance(v, Const) for v in (start, stop)]
    if all(dimlike) and step.value == 1:  # range over dims: the length is a (symbolic) dim
        from ..ir.types import dim_sub
        lo, hi = [v.dim if isinstance(v, SymDim) else v.value for v in (start, stop)]
        n = dim_sub(hi, lo)
        return (Lit(n, I64) if isinstance(n, int) else b.dim_size(dim=n)), n
    s, e = [b.dim_size(dim=v.dim) if isinstance(v, SymDim) else v if not isinstance(v, Const) else Lit(v.value, I64)
            for v in (start, stop)]
    st = step.value
    span = b.sub(e, s) if st > 0 else b.sub(s, e)
    n = b.floordiv(b.add(span, Lit(abs(st) - 1, I64)), Lit(abs(st), I64))
    return b.max(n, Lit(0, I64)), None


def _prim(name: str):
    from ..prims import PRIMS
    return PRIMS[name]
