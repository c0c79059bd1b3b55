"""Emit IR bodies through a Writer: equations in order; inlined branches, loops, calls."""
from __future__ import annotations

from typing import Sequence

from ..errors import rule
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.types import INT_DTYPES, Type
from . import steps as steps_
from .cpp import Handle, Writer, c_literal
from .storage import Storage, dim_expr


def emit_body(w: Writer, f: Func, steps: bool = False) -> list[Handle]:
    """Emit f's equations (params already bound in w.env); the handles of its results. `steps`: mark each
    equation's lines as a step (codegen/steps.py), and those of the bodies of loops without carries among them."""
    w.foldable |= read_once(f)
    for eqn in f.eqns:
        w.steps = steps and w.depth == 1
        if steps:
            w.line(steps_.BEGIN)
        start = len(w.lines)
        w.int_signs.define(eqn)
        rule(eqn.prim, "emit")(w, eqn)
        w.note_source(start, [eqn.loc])
        if steps:
            w.line(steps_.end(all(_in_buffer(w, v) for v in eqn.outs)))
    w.steps = False
    return [handle_of(w, r) for r in f.results]


def _in_buffer(w: Writer, v: Var) -> bool:
    """Whether v's value is a tensor in a buffer (not a local of the code that computed it)."""
    h = w.env.get(v)
    return v.type.rank > 0 and isinstance(h, Storage) and h.literal is None


def read_once(f: Func, elements: bool = False) -> set[Var]:
    """The values of f that exactly one equation of f reads, and that are not results of f, where that equation
    reads it once, right where it is emitted: one with scalar results, no body (a loop's or an if's would read it
    in another block) and not a view (a view's subscript is read wherever the view is, in later loops too); not a
    float operand its prim evaluates lazily (select's branches). `elements`: f is a fusion's body, every equation
    of which computes one element where it is emitted."""
    count: dict[Var, int] = {}
    for eqn in f.eqns:
        once = elements or not eqn.prim.view and all(v.type.rank == 0 for v in eqn.outs) and \
            not any(isinstance(v, Func) for v in eqn.params.values())
        for i, a in enumerate(eqn.ins):  # (x * x reads x twice: it stays a local)
            if isinstance(a, Var):
                lazy = i in eqn.prim.lazy and a.type.is_float
                count[a] = count.get(a, 0) + (1 if once and not lazy else 2)
    for r in f.results:
        if isinstance(r, Var):
            count[r] = 2
    return {v for v, n in count.items() if n == 1}


def handle_of(w: Writer, a: Atom) -> Handle:
    if isinstance(a, Lit):
        return w.scalar(a) if a.type.rank == 0 else w.storage(a)
    return w.env[a]


def declare_outputs(w: Writer, outs: Sequence[Var], inner: Sequence[str] = ()) -> list[Handle]:
    """Declare mutable targets for a cond's or loop's results (scalars: locals, tensors: their
    planned buffers); the tensor ones are bound at once, so bodies can write into them. A result without a name
    takes the name its body gives it (`inner`: a loop's `sum` of sum(...), an if's `x` of both branches)."""
    handles: list[Handle] = []
    for v, hint in zip(outs, list(inner) + [""] * len(outs)):
        hint = v.hint or hint or w.derived.get(v, "")
        if v.type.rank == 0:
            name = w.namer.fresh(hint or "res", source=bool(hint))
            w.line(f"{w.ctype(v.type)} {name};")
            handles.append(name)
        else:
            handles.append(w.target(v, hint or "res"))
            w.env[v] = handles[-1]
    return handles


def _hints(*groups: Sequence[Atom], skip: Sequence[Var] = ()) -> list[str]:
    """Per position, the first name any group gives it (a result of a body, a loop's carried parameter), but the
    names of `skip` (an if's operands passed through: the branch's `ct` is not what the if computes)."""
    out = []
    for atoms in zip(*groups):
        out.append(next((a.hint for a in atoms if isinstance(a, Var) and a.hint and a not in skip), ""))
    return out


def store(w: Writer, src: Handle, dst: Handle, t) -> None:
    """dst = src for a scalar local or a tensor buffer."""
    if isinstance(dst, str):
        src = src.at([]) if isinstance(src, Storage) else src  # a rank-0 view, e.g. s = x[i] in a loop
        if dst != src:
            w.line(f"{dst} = {src};")
    elif src == dst:
        return  # updated in place
    else:
        w.copy(src if isinstance(src, Storage) else Storage.splat(src, t.shape), dst, t)


def emit_inline(w: Writer, f: Func, args: Sequence[Atom], outs: Sequence[Handle]) -> None:
    """Emit f's body in a nested block with params bound to args; store results into outs."""
    w.depth += 1
    saved = dict(w.env)
    for p, a in zip(f.params, args):
        w.env[p] = handle_of(w, a)
        w.int_signs.bind(p, a)
    direct = {r: o for r, o in zip(f.results, outs) if isinstance(o, str) and isinstance(r, Var)
              and f.results.count(r) == 1 and any(r in e.outs and len(e.outs) == 1 for e in f.eqns)}
    w.updates.update(direct)  # (a scalar result is assigned to its out where it is made: r = t23 - t25)
    results = emit_body(w, f)
    for r in direct:
        del w.updates[r]
    for r, h, o in zip(f.results, results, outs):
        if h is not o:
            store(w, h, o, r.type)
    w.env = saved
    w.depth -= 1


def emit_loop(w: Writer, eqn) -> None:
    """A counted loop: carries are mutable locals/buffers, xs are read and ys written by slice."""
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    trip, init = eqn.ins[0], list(eqn.ins[1 + nc:1 + nc + ncar])
    carried = body.params[1 + nc:1 + nc + ncar]
    carry = declare_outputs(w, eqn.outs[:ncar], _hints(carried, body.results[:ncar], skip=body.params[:1 + nc]))
    for h, a in zip(carry, init):  # (into a dead initial value's buffer, if the plan says so)
        store(w, handle_of(w, a), h, a.type)
    ys = declare_outputs(w, eqn.outs[ncar:], _hints(body.results[ncar:], skip=body.params))
    n = w.scalar(trip)
    guards = _range_guards(w, eqn, n)
    if guards:
        _emit_guarded(w, eqn, n, carry, ys, guards)
    else:
        _emit_for(w, eqn, n, carry, ys)
    if ys and p["length"] is not None and not _runs_full_length(trip, n, p["length"]):
        _zero_rows(w, ys, eqn.outs[ncar:], n, p["length"])
    for v, h in zip(eqn.outs, carry + ys):
        w.env[v] = h


def _emit_guarded(w: Writer, eqn, n: str, carry: list, ys: list, guards: dict) -> None:
    """The loop twice: where the guards' test passes, without the clamps of their indices; else as it is."""
    w.line(f"if ({' && '.join(f'{last} < {dim_expr(size)}' for last, size in guards.values())}) {{")
    w.depth += 1
    w.trusted.update((i, size) for i, (_, size) in guards.items())
    _emit_for(w, eqn, n, carry, ys)
    for i in guards:
        del w.trusted[i]
    w.depth -= 1
    w.line("} else {")
    w.depth += 1
    _emit_for(w, eqn, n, carry, ys)
    w.depth -= 1
    w.line("}")


def _emit_for(w: Writer, eqn, n: str, carry: list, ys: list) -> None:
    """The for loop of emit_loop: its counter, the body, the stores of its ys and carries."""
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    trip, consts = eqn.ins[0], list(eqn.ins[1:1 + nc])
    xs = list(eqn.ins[1 + nc + ncar:])
    hint = body.params[0].hint  # the source's name of the counter, if it has one
    k = w.namer.fresh(hint, depth=w.depth + 1, source=True) if hint else w.namer.index(w.depth + 1)
    head = (f"for (int64_t {k} = {n} - 1; {k} >= 0; --{k}) {{" if p["reverse"]
            else f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {{")
    w.line(head)
    w.depth += 1
    saved = dict(w.env)
    w.env[body.params[0]] = k
    w.int_signs.loop(body.params[0], trip, w.depth)
    for prm, a in zip(body.params[1:1 + nc], consts):
        w.int_signs.bind(prm, a)
    if _kept_scalar(w, body, nc, ncar):
        w.line("KS_SCALAR_LOOP();")
    for prm, a in zip(body.params[1:1 + nc], consts):
        w.env[prm] = handle_of(w, a)
    for prm, h in zip(body.params[1 + nc:1 + nc + ncar], carry):
        w.env[prm] = h
    if p["length"] is not None:
        w.in_range[body.params[0]] = p["length"]
    for prm, a in zip(body.params[1 + nc + ncar:], xs):
        w.env[prm] = w.storage(a).slice0(k)
    w.row_of.update((v, k) for v in eqn.outs[ncar:])
    direct = _updated_in_place(body, nc, ncar, carry)
    w.updates.update(direct)
    results = emit_body(w, body, w.steps and not ncar)  # (a batch's image loop: its layers are steps too)
    for r in direct:
        del w.updates[r]
    # ys first: a y may be the old value of a carry, which the carry update below overwrites
    for h, dst, r in zip(results[ncar:], ys, body.results[ncar:]):
        store(w, h, dst.slice0(k), r.type)
    names = {h for h in carry if isinstance(h, str)}
    roots = {h.root for h in carry if isinstance(h, Storage)}
    staged = [_stage(w, h, v.type, names, roots, dst) for h, v, dst in zip(results[:ncar], body.results[:ncar], carry)]
    for h, dst, r in zip(staged, carry, body.results[:ncar]):
        store(w, h, dst, r.type)
    w.env = saved
    w.depth -= 1
    w.line("}")


def _range_guards(w: Writer, eqn, n: str) -> dict:
    """The clamped indices of an innermost loop that one test before it can show in range: computed in the body
    (no memory read, no nested body), never negative, and never decreasing as the counter grows (a polynomial of
    degree 1 in it: GMM's triangle `icf[k, d + c * (2 * d - c - 1) // 2 + r - c - 1]` with r = c + 1 + below),
    but not shown below their axis' size. Their values at the last count are computed before the loop (the
    body's equations that make them, the counter n - 1); {index: (that value, the axis' size)}. The C++ compiler
    vectorizes a loop that reads and adds at such an index, not one that clamps it (GMM: 1.7x less time)."""
    body, nc = eqn.params["body"], eqn.params["n_consts"]
    if any(isinstance(v, Func) for e in body.eqns for v in e.params.values()):
        return {}
    made = {v: e for e in body.eqns for v in e.outs}
    found = {}
    for e in body.eqns:
        if e.prim.takes == ():
            found.update(_clamped_positions(e, made))
    if not found:
        return {}
    counter = body.params[0]
    w.int_signs.loop(counter, eqn.ins[0], w.depth + 1)
    for prm, a in zip(body.params[1:1 + nc], eqn.ins[1:1 + nc]):
        w.int_signs.bind(prm, a)
    for e in body.eqns:
        w.int_signs.define(e)
    varying = _varying(body, nc)
    slices = {i: _int_slice(i, made) for i in found}
    found = {i: size for i, size in found.items() if slices[i] is not None and w.int_signs.nonneg(i)
             and not w.int_signs.below(i, size) and w.int_signs.rising(i, counter, varying)}
    return {i: (_value_at_last(w, eqn, slices[i], i, n), size) for i, size in found.items()}


def _clamped_positions(e: Eqn, made: dict) -> dict:
    """The integer scalar positions an equation of index, index_add or index_set takes (made in the loop's body),
    with the sizes of their axes: operand k for axis `axis + k - 1`; an update's last operand is its value."""
    x = e.ins[0]
    count = len(e.ins) - 1 if e.outs[0].type.rank < x.type.rank else len(e.ins) - 2
    out = {}
    for k, i in enumerate(e.ins[1:1 + count], start=1):
        if isinstance(i, Var) and i in made and i.type.rank == 0 and i.type.dtype in INT_DTYPES:
            out[i] = x.type.shape[e.params["axis"] + k - 1]
    return out


def _varying(body: Func, nc: int) -> set:
    """The values of a loop's body that may change from one iteration to the next: the counter, the carries and
    xs, and what is computed from them."""
    out = {body.params[0], *body.params[1 + nc:]}
    for e in body.eqns:
        if any(isinstance(a, Var) and a in out for a in e.ins):
            out.update(e.outs)
    return out


def _int_slice(i: Var, made: dict) -> list | None:
    """The body's equations that compute i, in order, when each is of scalars without a body or a memory read."""
    need, stack = {}, [i]
    while stack:
        v = stack.pop()
        e = made.get(v)
        if e is None or id(e) in need:
            continue
        if e.prim.takes is not None or any(o.type.rank for o in (*e.ins, *e.outs)):
            return None
        need[id(e)] = e
        stack.extend(a for a in e.ins if isinstance(a, Var))
    order = {id(e): j for j, e in enumerate(made.values())}
    return sorted(need.values(), key=lambda e: order[id(e)])


def _value_at_last(w: Writer, eqn, eqns: list, i: Var, n: str) -> str:
    """A local holding i's value at the loop's last count: eqns emitted before the loop with the counter n - 1,
    as one expression (integer scalars fold into their reader, codegen/cpp.py Writer.assign)."""
    body, nc = eqn.params["body"], eqn.params["n_consts"]
    saved, folded = dict(w.env), {v for e in eqns for v in e.outs} - w.foldable
    w.env[body.params[0]] = f"({n} - 1)"
    for prm, a in zip(body.params[1:1 + nc], eqn.ins[1:1 + nc]):
        w.env[prm] = handle_of(w, a)
    w.foldable |= folded
    for e in eqns:
        rule(e.prim, "emit")(w, e)
    name = w.namer.fresh(f"last_{w.hint(i) or 'at'}")
    w.line(f"const {w.ctype(i.type)} {name} = {w.scalar(i)};")
    w.foldable -= folded
    w.env = saved
    return name


def _kept_scalar(w: Writer, body: Func, nc: int, ncar: int) -> bool:
    """Whether an innermost loop is kept scalar (KS_SCALAR_LOOP, prelude.h): it carries a float scalar, which the
    C++ compiler may vectorize only as an in-order (fold-left) sum, the adds one by one as before, and it reads a
    tensor at an index that does not move by a fixed step with the counter (GMM's `icf[k, d + c(2d - c - 1)//2 +
    r - c - 1]`), whose lanes the vectorized loop loads one by one and inserts; its body calls no costly function
    (exp, log: those gain from lanes). On GMM's triangle (trips 0 to 19) the vectorized loop took 1.3-1.4x the
    time of the scalar one."""
    carried = body.params[1 + nc:1 + nc + ncar]
    if not any(p.type.rank == 0 and p.type.is_float for p in carried):
        return False
    if any(e.prim.costly or any(isinstance(v, Func) for v in e.params.values()) for e in body.eqns):
        return False
    inside = {v for e in body.eqns for v in e.outs}
    for e in body.eqns:
        w.int_signs.define(e)
    counter = body.params[0]
    return any(not w.int_signs.affine(a, counter, inside)
               for e in body.eqns if e.prim.takes == () for a in e.ins[1:]
               if a.type.rank == 0 and a.type.dtype in INT_DTYPES)  # (index_add's last operand: the value)


def _updated_in_place(body: Func, nc: int, ncar: int, carry) -> dict:
    """The new values of scalar carries that the body may assign to the carry's own local where it computes them
    (`slse = slse + t4;`, not `const double slse1 = slse + t4;` and `slse = slse1;` at the end): those whose old
    value no equation after that one reads (nor one that reads an integer or bool made from it, which the C++
    may fold into its reader), that are no other result of the body, made by an equation of one result."""
    out = {}
    for prm, r, h in zip(body.params[1 + nc:1 + nc + ncar], body.results[:ncar], carry):
        if not isinstance(h, str) or not isinstance(r, Var) or prm in body.results or body.results.count(r) != 1:
            continue
        made = next((i for i, e in enumerate(body.eqns) if r in e.outs and len(e.outs) == 1), None)
        tainted, last = {prm}, -1
        for i, e in enumerate(body.eqns):
            if any(isinstance(a, Var) and a in tainted for a in e.ins):
                last = i
                tainted.update(v for v in e.outs if v.type.rank == 0)
        if made is not None and last <= made:
            out[r] = h
    return out


def _runs_full_length(trip: Atom, n: str, length) -> bool:
    """Whether the loop count is its length (else the length is only a bound of the count)."""
    return (isinstance(trip, Lit) and trip.value == length) or n == dim_expr(length)


def _zero_rows(w: Writer, ys, outs, start: str, length) -> None:
    """Rows start..length-1 of the stacked ys (past a count below its bound) are zero."""
    k = w.namer.index(w.depth + 1)
    w.line(f"for (int64_t {k} = {start}; {k} < {dim_expr(length)}; ++{k}) {{")
    w.depth += 1
    for h, v in zip(ys, outs):
        row = v.type.shape[1:]
        w.copy(Storage.splat(c_literal(0, v.type), row), h.slice0(k), Type(v.type.dtype, row))
    w.depth -= 1
    w.line("}")


def _stage(w: Writer, h: Handle, t, carry_names, carry_roots, dst) -> Handle:
    """Copy a new carry value aside if it lives in another carry's storage, so updating that
    carry cannot clobber it (a value already in its own carry's buffer stays where it is)."""
    if isinstance(h, str):
        if h not in carry_names or h == dst:
            return h
        name = w.namer.fresh("next")
        w.line(f"const {w.ctype(t)} {name} = {h};")
        return name
    if h == dst or h.root not in carry_roots:
        return h
    buf = w.alloc(t, "next")
    w.copy(h, buf, t)
    return buf


def emit_call(w: Writer, eqn) -> None:
    """A call to another kernel: a call of its helper function (codegen/helpers.py) where the call stays a call
    (prims/control.py kept_call), else inlined as a block (the callee keeps its own names)."""
    from ..prims.control import keeps_call, kept_call
    fn = eqn.params["fn"]
    if kept_call(eqn) and w.helpers is not None:
        if keeps_call(fn):
            _call_helper(w, eqn, w.helpers.get(fn, w.dims, w))
        else:
            _call_tensor_helper(w, eqn, w.helpers.get(fn, w.dims, w, _strided_args(w, eqn)))
        return
    outs = declare_outputs(w, eqn.outs, result_hints(fn))
    w.line(f"{{  // {fn.name}({', '.join(p.hint or 'x' for p in fn.params)})")
    emit_inline(w, fn, list(eqn.ins), outs)
    w.line("}")
    for v, h in zip(eqn.outs, outs):
        w.env[v] = h


def result_hints(fn: Func) -> list[str]:
    """A name per result of a callee: its value's name in the callee, else (one result) the callee's name (a batched
    callee's without vmap_: the values of softplus(x) over the batch are `softplus`)."""
    hints = [r.hint if isinstance(r, Var) and r.hint else "" for r in fn.results]
    base = fn.name
    while base.startswith("vmap_"):
        base = base[len("vmap_"):]
    return [base] if len(hints) == 1 and not hints[0] and base.isidentifier() else hints


def _call_helper(w: Writer, eqn, helper) -> None:
    """outs = detail::helper(dims, args): one result is returned, several written through pointers."""
    args = helper.dims + [w.scalar(a) for a in eqn.ins]
    if len(eqn.outs) == 1:
        w.assign(eqn.outs[0], f"detail::{helper.name}({', '.join(args)})")
        return
    outs = declare_outputs(w, eqn.outs)
    w.line(f"detail::{helper.name}({', '.join(args + [f'&{o}' for o in outs])});")
    w.env.update(zip(eqn.outs, outs))


def _call_tensor_helper(w: Writer, eqn, helper) -> None:
    """detail::helper(dims, args, outs, workspace) for a callee with tensors: a tensor argument is passed as a
    pointer to dense elements (a view that is not: a packed copy first), a result is written into its planned
    buffer (or a dense buffer of the writer's own, then copied there), a scalar one into a local; the callee's
    workspace is a part of the caller's, shared by every helper call (codegen/helpers.py)."""
    strided = {i for i, _ in _strided_args(w, eqn)}
    args = helper.dims + [arg for i, a in enumerate(eqn.ins) for arg in
                          (_strided_pointer(w, a) if i in strided else
                           [_dense_pointer(w, a) if a.type.rank else w.scalar(a)])]
    copies, outs = [], []
    for v, hint in zip(eqn.outs, result_hints(eqn.params["fn"])):
        hint = v.hint or hint or "res"
        if v.type.rank == 0:
            name = w.namer.fresh(hint, source=True)
            w.line(f"{w.ctype(v.type)} {name};")
            w.env[v] = name
            outs.append(f"&{name}")
            continue
        dst = w.target(v, hint)
        buf = dst if _is_dense(dst) else w.alloc(v.type, hint, True)
        copies += [] if buf is dst else [(buf, dst, v.type)]
        w.env[v] = dst
        outs.append(_as_bytes(buf.base, v.type, ""))
    ws = [w.scratch("uint8_t", helper.workspace, required=True)] if helper.workspace != "0" else []
    w.line(f"detail::{helper.name}({', '.join(args + outs + ws)});")
    for src, dst, t in copies:
        w.copy(src, dst, t)


def _strided_args(w: Writer, eqn) -> tuple[tuple[int, bool], ...]:
    """The tensor operands of a kept call passed as a pointer and strides: views that are not dense (a column, rows
    of a wider matrix; a splat of a scalar is still packed), each with whether its last stride is 1 (not passed)."""
    return tuple((i, s.strides[-1] == "1") for i, a in enumerate(eqn.ins) if a.type.rank and isinstance(a, Var)
                 and (s := w.storage(a)).literal is None and not _is_dense(s))


def _strided_pointer(w: Writer, a: Atom) -> list[str]:
    """A view's pointer to its first element and its strides in elements (but a last one of 1)."""
    src = w.storage(a)
    strides = src.strides[:-1] if src.strides[-1] == "1" else src.strides
    return [_as_bytes(src.base, a.type, "const "), *strides]


def _is_dense(s) -> bool:
    return isinstance(s, Storage) and s.literal is None and (s.contiguous or s.dense())


def _dense_pointer(w: Writer, a: Atom) -> str:
    """A pointer to a's elements in row-major order: its own buffer's, or a packed copy's."""
    src = w.storage(a)
    if _is_dense(src):
        return _as_bytes(src.base, a.type, "const ")
    packed = w.alloc(a.type, f"{getattr(a, 'hint', None) or 'x'}_packed")  # (a literal: a splat, no hint)
    w.copy(src, packed, a.type)
    return _as_bytes(packed.base, a.type, "const ")


def _as_bytes(pointer: str, t, const: str) -> str:
    """A bool tensor's pointer as the helper takes it: uint8_t (an export's own bool arguments are bool)."""
    return f"reinterpret_cast<{const}uint8_t*>({pointer})" if t.dtype == "bool" else pointer


def emit_cond(w: Writer, eqn: Eqn) -> None:
    """A cond equation: if/else over the two branches, each inlined, writing the same outputs."""
    then_fn, else_fn = eqn.params["then_fn"], eqn.params["else_fn"]
    outs = declare_outputs(w, eqn.outs, _hints(then_fn.results, else_fn.results, skip=then_fn.params + else_fn.params))
    w.line(f"if ({w.scalar(eqn.ins[0])}) {{")
    emit_inline(w, eqn.params["then_fn"], list(eqn.ins[1:]), outs)
    w.line("} else {")
    emit_inline(w, eqn.params["else_fn"], list(eqn.ins[1:]), outs)
    w.line("}")
    w.env.update(zip(eqn.outs, outs))
