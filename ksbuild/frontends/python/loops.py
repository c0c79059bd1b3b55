"""`for i in range(...)` loops: a `loop` prim whose carries are the names the body reassigns.

The trip count is computed from start/stop/step; the body gets the iteration number k and
computes i = start + k * step. Outer values the body reads are captured as loop constants.

A loop's `length` is its count when that is a literal or a dim. When the count is computed at
run time but bounded by a dim (`range(r)` with r the index of `range(d)`, `range(i + 1)`,
`range(k, n)`), `length` is that bound: reverse mode can then store each iteration's values
in a workspace sized by it. `IntFacts` records the ranges of loop counters for this.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ...ir.builder import Builder
from ...ir.core import Atom, Eqn, Func, Lit, Var
from ...ir.types import Dim, Type, dim_add, dim_floordiv, dim_sub
from ...ops.shape import flip
from .scope import Const, Returned, Scope, SymDim, assigned_names

I64 = Type("i64")


@dataclass
class IntFacts:
    """What the frontend knows about int values: `known[v] = (lo, hi)` says lo <= v < hi on every
    run (loop counters); `bodies[id(scope)]` is a loop body's (scope, builder), so that the range
    of a value captured from that body can be read from the equations that computed it."""

    known: dict = field(default_factory=dict)
    bodies: dict = field(default_factory=dict)


def for_loop(fc, b: Builder, scope: Scope, s: ast.For) -> None:
    """Compile a for statement into a loop equation and rebind the carried names."""
    if s.orelse:
        raise fc.src.error(s, "for ... else is not supported")
    bound = _target_names(fc, s.target)
    carried = [n for n in sorted(assigned_names(s.body)) if n not in bound and scope.lookup(n) is not None]
    listed, body = _appended(scope, s.body)
    ys = [body_append.value.args[0] for body_append in s.body[len(body):]]
    outs = counted_loop(fc, b, scope, s, s.target, s.iter, body, carried, ys)
    for n, o in zip(carried, outs):
        b.name(o, n)
        scope.names[n] = o
    if listed is not None:
        from .scope import AppendList
        b.name(outs[-1], listed)
        scope.names[listed] = AppendList(outs[-1])


def _appended(scope: Scope, stmts) -> tuple[str | None, list]:
    """(L, the statements before it) when the loop body ends with L.append(e) for an `L = []` not filled
    yet: e becomes the loop's stacked output (as in torch.stack([e for ...])); else (None, stmts)."""
    from .scope import AppendList
    last = stmts[-1] if stmts else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and not last.value.keywords
            and len(last.value.args) == 1 and isinstance(last.value.func, ast.Attribute)
            and last.value.func.attr == "append" and isinstance(last.value.func.value, ast.Name)):
        return None, list(stmts)
    name = last.value.func.value.id
    v = scope.lookup(name)
    if not isinstance(v, AppendList) or v.rows is not None:
        return None, list(stmts)
    return name, list(stmts[:-1])


def builtin_sum(fc, b: Builder, scope: Scope, call: ast.Call):
    """Python's sum(items, start=0) = start + items[0] + items[1] + ...: items a comprehension, a list or tuple,
    a tensor (iterating a tensor visits its rows, so this is start + x.sum(0)) or a list filled by .append."""
    from .scope import AppendList
    start_node = _sum_start(fc, call)
    start = Const(0) if start_node is None else fc.expr(b, scope, start_node)
    items = call.args[0]
    if isinstance(items, (ast.ListComp, ast.GeneratorExp)):
        return comprehension(fc, b, scope, call, "sum", start)
    value = fc.arg(b, scope, items)
    if isinstance(value, (list, tuple)):
        for v in value:
            start = fc.binop(b, ast.Add(), start, v, call)
        return start
    rows = value.rows if isinstance(value, AppendList) else value
    if not isinstance(rows, Atom) or not rows.type.rank:
        raise fc.src.error(items, "sum() of a single number: sum takes a tensor, a list, a tuple or a comprehension",
                           hint="write the number itself, or x.sum() for the sum of a tensor's elements")
    from .registry import REGISTRY
    return fc.binop(b, ast.Add(), start, REGISTRY["torch.sum"](fc, b, [rows, Const(0)], {}, call), call)


def _sum_start(fc, call: ast.Call) -> ast.expr | None:
    """The start argument of sum(items, start) / sum(items, start=...), after checking the call's form."""
    starts = call.args[1:] + [k.value for k in call.keywords if k.arg == "start"]
    if not call.args or len(starts) > 1 or len(call.args) > 2 or any(k.arg != "start" for k in call.keywords) \
            or any(isinstance(a, ast.Starred) for a in call.args):
        raise fc.src.error(call, "sum() takes an iterable and an optional start",
                           hint="sum(items) or sum(items, start)")
    return starts[0] if starts else None


def counted_loop(fc, b: Builder, scope: Scope, node, target: ast.expr, it: ast.expr, stmts, carried, y_exprs):
    """A loop over `it` (range, reversed(range), a tensor's rows, enumerate or zip of those) running stmts
    with `target` bound each iteration; returns the final carries then the stacked y_exprs."""
    (start, stop, step), bind = _iteration(fc, b, scope, target, it)
    trip, length, exact = _trip_count(fc, b, scope, start, stop, step, it)
    init = [scope.lookup(n) for n in carried]
    types = [_carry_type(fc, v, node) for v in init]
    for _ in range(3):  # a weak constant carry may need to widen (x = 0 then x = x + 0.5)
        body, sc, raw = _body(fc, scope, node, bind, stmts, carried, types,
                              (start, step, length, _counter_name(target, it, start, step)), y_exprs)
        widened = [w if isinstance(v, Const) and w is not None else t for t, w, v in zip(types, raw, init)]
        if widened == types:
            break
        types = widened
    if y_exprs and not exact:
        raise fc.src.error(it, "a comprehension needs a length known when the kernel is called",
                           hint="use range(n) with n a literal or a tensor dim such as x.shape[0]")
    consts = [outer for outer, _ in sc.captured.values()]
    body, consts = _hoist_rows(b, body, consts)
    init_atoms = [fc.as_atom(b, v, t, node) for v, t in zip(init, types)]
    outer, b.loc = b.loc, fc.src.loc(node)  # (the loop's line: the for statement or the comprehension)
    try:
        return b.bind(_prim("loop"), [trip, *consts, *init_atoms],
                      dict(body=body, n_consts=len(consts), n_carry=len(carried), length=length, reverse=False))
    finally:
        b.loc = outer


# ---- what a loop iterates over -------------------------------------------------------------------

def _target_names(fc, target: ast.expr) -> list[str]:
    """The names a loop target binds: `i` or `i, x` (no nesting)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
        return [t.id for t in target.elts]
    raise fc.src.error(target, "the loop variable must be a name or a tuple of names (for i, x in ...)")


def _counter_name(target: ast.expr, it: ast.expr, start, step) -> str:
    """The source's name of a loop's iteration number, where a name is bound to it: `i` of `for i in range(n)`
    and of `for i, x in enumerate(xs)`; "" otherwise (range(1, n) counts from 0 to n - 2, and i is 1 more)."""
    if _call_of(it, "enumerate") and isinstance(target, ast.Tuple) and isinstance(target.elts[0], ast.Name):
        return target.elts[0].id
    counts_from_0 = isinstance(start, Const) and start.value == 0 and isinstance(step, Const) and step.value == 1
    if _call_of(it, "range") and isinstance(target, ast.Name) and counts_from_0:
        return target.id
    return ""


def _call_of(it: ast.expr, name: str) -> bool:
    return isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == name


def _iteration(fc, b: Builder, scope: Scope, target: ast.expr, it: ast.expr):
    """((start, stop, step) of the counted range, bind(bb, sc, k, i)) for `for target in it`.
    bind puts the target names into the body's scope from the iteration number k and i = start + k*step."""
    names = _target_names(fc, target)
    if _call_of(it, "enumerate") or _call_of(it, "zip"):
        kind = it.func.id
        if it.keywords or not it.args or (kind == "enumerate" and len(it.args) != 1):
            raise fc.src.error(it, f"{kind}(...) of ranges or tensors is supported here (no keyword arguments)")
        if not isinstance(target, ast.Tuple) or len(names) != len(it.args) + (kind == "enumerate"):
            raise fc.src.error(target, f"unpack {kind}(...) into {len(it.args) + (kind == 'enumerate')} names")
        seqs = [_sequence(fc, b, scope, a) for a in it.args]
        if kind == "enumerate":
            rng, value = seqs[0]

            def bind(bb, sc, k, i):
                sc.names[names[0]] = k
                sc.names[names[1]] = value(bb, sc, k, i)
            return rng, bind
        length = _zip_length(fc, b, scope, seqs, it)

        def bind_zip(bb, sc, k, i):
            for n, (_, value) in zip(names, seqs):
                sc.names[n] = value(bb, sc, k, None)
        return (Const(0), length, Const(1)), bind_zip
    if len(names) != 1 and (_call_of(it, "range") or _call_of(it, "reversed")):
        raise fc.src.error(target, "unpacking in a for loop needs enumerate(...), zip(...) or rows to unpack")
    rng, value = _sequence(fc, b, scope, it)

    def bind_one(bb, sc, k, i):
        v = value(bb, sc, k, i)
        if len(names) == 1:
            sc.names[names[0]] = v
            return
        if not v.type.rank or v.type.shape[0] != len(names):  # for a, b in pairs: each row has 2 entries
            raise fc.src.error(target, f"cannot unpack a row of type {v.type} into {len(names)} names")
        for j, n in enumerate(names):
            sc.names[n] = bb.index(v, Lit(j, I64), axis=0)
    return rng, bind_one


def _sequence(fc, b: Builder, scope: Scope, it: ast.expr):
    """((start, stop, step), value(bb, sc, k, i)) of one iterable: range(...), reversed(range(...)) or a
    tensor (its rows along the first axis). value gets i = None when the loop counts 0.. instead."""
    backwards = _call_of(it, "reversed") and len(it.args) == 1 and not it.keywords and \
        not _call_of(it.args[0], "range")
    if (_call_of(it, "range") or _call_of(it, "reversed")) and not backwards:
        start, stop, step = _range_args(fc, b, scope, it)

        def value(bb, sc, k, i):
            return i if i is not None else _index(fc, bb, sc, k, start, step)
        return (start, stop, step), value
    x = fc.arg(b, scope, it.args[0] if backwards else it)  # reversed(COEFFS), reversed(x): the items last first
    if isinstance(x, (tuple, list)) and x:
        x = _tuple_rows(fc, b, x[::-1] if backwards else x, it)
    elif backwards and isinstance(x, Atom) and x.type.rank:
        x = flip(b, x, 0)
    if isinstance(x, (Const, SymDim, tuple, list, str)) or not x.type.rank:
        raise fc.src.error(it, "a for loop must iterate over range(...), the rows of a tensor, the items of a "
                               "tuple, reversed(...) of those, or enumerate/zip of those",
                           hint="for i in range(n): ...")
    from .tensors import dim_value

    def row(bb, sc, k, i):
        return bb.index(sc.capture(x), k, axis=0)
    return (Const(0), dim_value(x.type.shape[0]), Const(1)), row


def _tuple_rows(fc, b: Builder, items, it: ast.expr):
    """A tuple (or list) of numbers, of tuples of numbers, or of tensors of one type as one tensor whose rows
    the loop visits (as torch.tensor / torch.stack would build it)."""
    from .create import nested_items, tensor_literal
    leaves = nested_items(items)
    types = {v.type for v in items if not isinstance(v, (Const, tuple, list))}
    if not all(isinstance(v, Const) for v in leaves) and \
            (len(types) != 1 or any(isinstance(v, (tuple, list)) for v in items)):
        shown = ", ".join(sorted(str(t) for t in types)) or "nested tuples of values"
        raise fc.src.error(it, f"a for loop over a tuple needs numbers or tensors of one type (got {shown})",
                           hint="call a helper function once for each item instead")
    return tensor_literal(fc, b, [list(items)], {}, it)


def _zip_length(fc, b: Builder, scope: Scope, seqs, it: ast.expr):
    """The count of zip(...): the sequences' counts must be known when the kernel is called (the shortest
    of literal counts, or one shared dim)."""
    counts = []
    for rng in (r for r, _ in seqs):
        _, n, exact = _trip_count(fc, b, scope, *rng, it)
        if not exact:
            raise fc.src.error(it, "zip(...) of ranges whose lengths are computed at run time is not supported",
                               hint="use range(n) with n a literal or a dim, or index inside the loop")
        counts.append(n)
    if all(isinstance(n, int) for n in counts):
        return Const(min(counts))
    if len(set(counts)) == 1:
        return SymDim(counts[0]) if not isinstance(counts[0], int) else Const(counts[0])
    raise fc.src.error(it, f"zip(...) of sequences of different lengths ({', '.join(map(str, counts))})",
                       hint="zip stops at the shortest; index inside a `for i in range(...)` loop instead")


def comprehension(fc, b: Builder, scope: Scope, call: ast.Call, kind: str, start=Const(0)):
    """sum(e for i in range(n)) as a carried sum from `start`; torch.stack([e for i in range(n)]) as stacked ys."""
    comp = call.args[0]
    if len(comp.generators) != 1:
        raise fc.src.error(comp, "a comprehension with one `for` is supported (nest comprehensions instead)")
    g = comp.generators[0]
    if g.ifs or g.is_async:
        raise fc.src.error(comp, "comprehension filters (`if`) are not supported",
                           hint="use torch.where(...) inside the expression")
    if kind == "stack":
        dim = 0
        for k in call.keywords:
            if k.arg != "dim":
                raise fc.src.error(k.value, f"unsupported keyword argument '{k.arg}'")
            from .tensors import int_const
            dim = int_const(fc, fc.expr(b, scope, k.value), k.value, "dim")
        (ys,) = counted_loop(fc, b, scope, comp, g.target, g.iter, [], [], [comp.elt])
        from .tensors import move_axis0
        return move_axis0(b, ys, dim + ys.type.rank if dim < 0 else dim)
    acc = f"__sum_{comp.lineno}_{comp.col_offset}"  # not a Python name a user can write twice
    scope.names[acc] = start
    add = ast.Assign(targets=[ast.Name(acc, ast.Store())],
                     value=ast.BinOp(ast.Name(acc, ast.Load()), ast.Add(), comp.elt))
    ast.copy_location(add, comp.elt)
    ast.copy_location(add.targets[0], comp.elt)
    ast.copy_location(add.value, comp.elt)
    ast.copy_location(add.value.left, comp.elt)
    (out,) = counted_loop(fc, b, scope, comp, g.target, g.iter, [add], [acc], [])
    b.name(out, "sum")
    del scope.names[acc]
    return out


def _carry_type(fc, v, node) -> Type:
    if isinstance(v, tuple):
        raise fc.src.error(node, "a tuple cannot be carried through a loop; unpack it first")
    from .scope import const_type
    if isinstance(v, SymDim):  # k = x.shape[0] then k += 1 in the loop: the dim's size as a runtime int
        return I64
    return const_type(v, fc.float_dtype) if isinstance(v, Const) else v.type


def _body(fc, scope: Scope, node, bind, stmts, carried, types, counter, y_exprs):
    """The loop body; counter = (start, step, length, name) of the range (length: the count or a bound; name: the
    counter's name in the source, or "")."""

    start, step, length, name = counter
    bb, sc = Builder(fc.src.loc(node)), scope.child()
    k = Var(I64, name)
    if length is not None:
        fc.int_facts.known[k] = (0, length)
    fc.int_facts.bodies[id(sc)] = (sc, bb)
    carry_params = [Var(t, "sum" if n.startswith("__sum") else n) for n, t in zip(carried, types)]
    sc.names.update(zip(carried, carry_params))
    bind(bb, sc, k, _index(fc, bb, sc, k, start, step))
    early = next((n for st in stmts for n in ast.walk(st) if isinstance(n, ast.Return)), None)
    if early is not None:  # checked first: an `if` with a return would report a missing return instead
        raise fc.src.error(early, "return inside a for loop is not supported",
                           hint="carry the result in a variable (and a `found` flag) and return after the loop")
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


def _hoist_rows(b: Builder, body: Func, consts: list) -> tuple[Func, list]:
    """Move the `index` equations of the body whose operands are loop constants out of the loop:
    the row L[r] of L[r, c] in a loop over c. An index is a view (no load, no work), and in reverse
    mode the gradient of the row then accumulates across the iterations and is added into L's
    once, instead of a row-sized add per iteration."""
    n = len(consts)
    outer = {p: c for p, c in zip(body.params[1:1 + n], consts)}
    kept, hoisted = [], []
    same: dict[tuple, Var] = {}  # icf[k] written twice is one row (one gradient to accumulate)
    alias: dict[Var, Var] = {}
    for e in body.eqns:
        ins = tuple(alias.get(a, a) for a in e.ins)
        if e.prim.name == "index" and all(isinstance(a, Lit) or a in outer for a in ins):
            key = (e.params["axis"],) + tuple(a if isinstance(a, Lit) else id(a) for a in ins)
            if key in same:
                alias[e.outs[0]] = same[key]
                continue
            b.loc = e.loc
            (outer[e.outs[0]],) = b.bind(e.prim, [outer.get(a, a) for a in ins], dict(e.params))
            hoisted.append(e.outs[0])
            same[key] = e.outs[0]
        else:
            kept.append(Eqn(e.prim, ins, e.outs, e.params, e.loc) if ins != e.ins else e)
    if not hoisted:
        return body, consts
    results = tuple(alias.get(r, r) for r in body.results)
    read = {a for e in kept for a in e.ins} | set(results)
    const_params = [p for p in list(body.params[1:1 + n]) + hoisted if p in read]
    params = (body.params[0], *const_params, *body.params[1 + n:])
    return Func(body.name, params, tuple(kept), results, body.result_names), [outer[p] for p in const_params]


def _index(fc, bb: Builder, sc: Scope, k, start, step):
    """i = start + k * step inside the body (outer start/step values are captured)."""
    i = k
    if not (isinstance(step, Const) and step.value == 1):
        i = bb.mul(i, sc.capture(step) if not isinstance(step, Const) else Lit(step.value, I64))
    if isinstance(start, SymDim):  # a dim is read inside the body (it is not an outer value to capture)
        i = bb.add(i, bb.dim_size(dim=start.dim))
    elif not (isinstance(start, Const) and start.value == 0):
        i = bb.add(i, sc.capture(start) if not isinstance(start, Const) else Lit(start.value, I64))
    return i


def _range_args(fc, b: Builder, scope: Scope, it: ast.expr):
    """(start, stop, step) of range(...) or reversed(range(...)) (as the range that counts down)."""
    rev = _call_of(it, "reversed")
    if rev:
        if len(it.args) != 1 or it.keywords or not _call_of(it.args[0], "range"):
            raise fc.src.error(it, "reversed(...) of a range(...) is supported", hint="for i in reversed(range(n))")
        it = it.args[0]
    if not (_call_of(it, "range") and 1 <= len(it.args) <= 3 and not it.keywords):
        raise fc.src.error(it, "a for loop must iterate over range(...)", hint="for i in range(n): ...")
    args = [fc.expr(b, scope, a) for a in it.args]
    for a, node in zip(args, it.args):
        if isinstance(a, (tuple, list, str)) or (isinstance(a, Const) and type(a.value) is not int) or \
                (isinstance(a, Var) and a.type.dtype not in ("i32", "i64")):
            raise fc.src.error(node, "range() arguments must be integers")
    args = [a if isinstance(a, (Const, SymDim)) or a.type.dtype == "i64" else b.convert(a, dtype="i64")
            for a in args]
    if len(args) == 1:
        args = [Const(0), args[0]]
    start, stop, step = args[0], args[1], args[2] if len(args) == 3 else Const(1)
    return _reversed(fc, b, start, stop, step, it) if rev else (start, stop, step)


def _reversed(fc, b: Builder, start, stop, step, it: ast.Call):
    """The range that visits range(start, stop, step) backwards."""
    if not isinstance(step, Const) or step.value == 0:
        raise fc.src.error(it, "the range step must be a nonzero integer literal")
    if isinstance(start, Const) and isinstance(stop, Const):
        r = range(start.value, stop.value, step.value)[::-1]
        return Const(r.start), Const(r.stop), Const(r.step)
    if abs(step.value) != 1:
        raise fc.src.error(it, "reversed(range(a, b, step)) with a step other than 1 or -1 needs literal bounds",
                           hint="write the reverse range directly: range(last, first - 1, -step)")
    one = Const(step.value)  # reversed(range(a, b)) = range(b - 1, a - 1, -1), and the same for step -1
    return (fc.binop(b, ast.Sub(), stop, one, it), fc.binop(b, ast.Sub(), start, one, it), Const(-step.value))


def _trip_count(fc, b: Builder, scope: Scope, start, stop, step, node):
    """(trip atom, static length or None, whether the length is the count itself or only a bound)."""
    if not isinstance(step, Const) or step.value == 0:
        raise fc.src.error(node, "the range step must be a nonzero integer literal")
    if isinstance(start, Const) and isinstance(stop, Const):
        n = len(range(start.value, stop.value, step.value))
        return Lit(n, I64), n, True
    dimlike = [isinstance(v, SymDim) or isinstance(v, Const) for v in (start, stop)]
    if all(dimlike) and abs(step.value) == 1:  # range over dims: the length is a (symbolic) dim
        lo, hi = [v.dim if isinstance(v, SymDim) else v.value for v in (start, stop)][::step.value]
        n = dim_sub(hi, lo)
        return (Lit(n, I64) if isinstance(n, int) else b.dim_size(dim=n)), n, True
    s, e = [b.dim_size(dim=v.dim) if isinstance(v, SymDim) else v if not isinstance(v, Const) else Lit(v.value, I64)
            for v in (start, stop)]
    st = step.value
    span = b.sub(e, s) if st > 0 else b.sub(s, e)
    n = b.floordiv(b.add(span, Lit(abs(st) - 1, I64)), Lit(abs(st), I64))
    return b.max(n, Lit(0, I64)), _count_bound(fc, b, scope, start, stop, st), False


# ---- ranges of int values (for loop counts bounded by a dim) ---------------------------------------

def _count_bound(fc, b: Builder, scope: Scope, start, stop, step: int) -> Dim | None:
    """An upper bound of the count of range(start, stop, step) that is never negative, or None."""
    first, last = (start, stop) if step > 0 else (stop, start)
    lo, hi = _int_range(fc, b, scope, first), _int_range(fc, b, scope, last)
    if lo is None or hi is None:
        return None
    # count <= ceil((max(last) - min(first)) / |step|) with max(last) = hi[1] - 1; a symbolic
    # bound must be visibly >= 0 (a polynomial with no minus sign), else one more row will do
    span = dim_sub(dim_sub(hi[1], 1), lo[0])
    if not isinstance(span, int) and "-" in span:
        span = dim_sub(hi[1], lo[0])
        if not isinstance(span, int) and "-" in span:
            return None
    if isinstance(span, int):
        return max(0, -(-span // abs(step)))
    return span if abs(step) == 1 else dim_floordiv(dim_add(span, abs(step) - 1), abs(step))


def _int_range(fc, b: Builder, scope: Scope, v) -> tuple[Dim, Dim] | None:
    """(lo, hi) with lo <= v < hi whenever this code runs, or None if the frontend cannot tell."""
    if isinstance(v, (Const, Lit)) and type(v.value) is int:
        return v.value, v.value + 1
    if isinstance(v, SymDim):
        return v.dim, dim_add(v.dim, 1)
    if not isinstance(v, Var) or v.type.dtype not in ("i32", "i64"):
        return None
    if v in fc.int_facts.known:
        return fc.int_facts.known[v]
    eqn = next((e for e in reversed(b.eqns) if any(o is v for o in e.outs)), None)
    if eqn is not None:
        return _eqn_range(eqn, lambda a: _int_range(fc, b, scope, a))
    for outer, inner in scope.captured.values():  # a value of an enclosing body
        if inner is v and scope.parent is not None:
            _, pb = fc.int_facts.bodies.get(id(scope.parent), (None, Builder()))
            return _int_range(fc, pb, scope.parent, outer)
    return None


def _eqn_range(eqn: Eqn, range_of) -> tuple[Dim, Dim] | None:
    """The range of an int equation's result from the ranges of its operands (its prim's bounds rule)."""
    return eqn.prim.bounds(eqn, range_of) if eqn.prim.bounds is not None else None


def _prim(name: str):
    from ...prims import PRIMS
    return PRIMS[name]
