"""Emit IR bodies through a Writer: fused loop nests, inlined branches, loops, calls."""
from __future__ import annotations

from typing import Sequence

from ..ir.core import Atom, Func, Lit, Var
from ..ir.types import Type
from .cpp import Handle, Writer, c_literal, element_region_key
from .storage import Storage, dim_expr


def use_sites(f: Func) -> dict[Var, set[int]]:
    """For each var, the indices of the equations reading it (len(eqns) stands for the results)."""
    uses: dict[Var, set[int]] = {}
    for i, eqn in enumerate(f.eqns):
        for a in eqn.ins:
            if isinstance(a, Var):
                uses.setdefault(a, set()).add(i)
    for r in f.results:
        if isinstance(r, Var):
            uses.setdefault(r, set()).add(len(f.eqns))
    return uses


def emit_body(w: Writer, f: Func, dests: dict[Var, Storage] | None = None) -> list[Handle]:
    """Emit f's equations (params already bound in w.env); the handles of its results."""
    dests = dests or {}
    uses = use_sites(f)
    saved_uses = w.uses
    w.level += 1
    accumulate = _accumulations(f, uses)
    done: set[int] = set()  # `add` equations already performed by an accumulating einsum
    i = 0
    while i < len(f.eqns):
        key = element_region_key(f.eqns[i])
        if i in done:
            i += 1
        elif key is None:
            eqn = f.eqns[i]
            if eqn.outs and eqn.outs[0] in dests and eqn.prim.name in WRITES_DEST:
                w.escaping[eqn.outs[0]] = dests[eqn.outs[0]]
            w.uses = (uses, i)
            if i in accumulate and _accumulate_into(w, eqn, f.eqns[accumulate[i][0]], accumulate[i][1]):
                done.add(accumulate[i][0])
            else:
                eqn.prim.emit(w, eqn)
            i += 1
        else:
            j = i
            while j < len(f.eqns) and element_region_key(f.eqns[j]) == key and j not in done:
                j += 1
            emit_region(w, f.eqns[i:j], range(i, j), uses, dests)
            i = j
        w.release(_live_roots(w, uses, i))
    w.uses = saved_uses
    handles = [handle_of(w, r) for r in f.results]
    w.level -= 1
    return handles


def _accumulations(f: Func, uses) -> dict[int, tuple[int, Var]]:
    """einsum results whose only use is `acc + result` with acc read nowhere else: the einsum can
    add into acc's buffer directly (the reverse pass's `gradient += outer product`)."""
    out: dict[int, tuple[int, Var]] = {}
    defined = set(f.params)
    for i, eqn in enumerate(f.eqns):
        if eqn.prim.name == "einsum" and eqn.outs[0].type.rank:
            r = eqn.outs[0]
            at = uses.get(r, set())
            if len(at) == 1 and (j := next(iter(at))) < len(f.eqns) and f.eqns[j].prim.name == "add":
                other = [a for a in f.eqns[j].ins if a is not r]
                if len(other) == 1 and isinstance(other[0], Var) and other[0] in defined \
                        and other[0].type == r.type == f.eqns[j].outs[0].type and uses.get(other[0]) == {j}:
                    out[i] = (j, other[0])
        defined.update(eqn.outs)
    return out


def _accumulate_into(w: Writer, eqn, add, acc: Var) -> bool:
    """Emit einsum as acc += product when acc owns its buffer; False if it does not."""
    h = w.env.get(acc)
    if not (isinstance(h, Storage) and h.literal is None and w.owner.get(h.root) is acc):
        return False
    w.einsum(eqn, into=h)
    w.env[add.outs[0]] = h
    w.owner[h.root] = add.outs[0]
    return True


def _live_roots(w: Writer, uses, next_eqn: int) -> set[str]:
    """The buffers that values read from equation next_eqn on (or returned) point into."""
    live = set()
    for v, at in uses.items():
        if max(at) >= next_eqn:
            h = w.env.get(v)
            if isinstance(h, Storage):
                live.add(h.root)
    return live


# prims whose emit writes a fresh buffer, which may as well be the caller's output
WRITES_DEST = {"reduce_sum", "reduce_max", "reduce_min", "einsum", "pad", "index_add"}


def emit_region(w: Writer, eqns, span: range, uses, dests) -> None:
    """One loop nest over the common shape; values read after it are stored."""
    shape = eqns[0].outs[0].type.shape
    for eqn in eqns:
        for v in eqn.outs:
            if uses.get(v, set()) - set(span):
                w.escaping[v] = dests.get(v) or w.alloc(v.type, v.hint or "tmp", owner=v)
    idx = w.open_loops(shape)
    w.region = (idx, shape)
    for eqn in eqns:
        eqn.prim.emit(w, eqn)
    w.region = None
    w.close_loops(len(idx))
    w.local.clear()
    for eqn in eqns:
        for v in eqn.outs:
            if v in w.escaping:
                w.env[v] = w.escaping[v]


def handle_of(w: Writer, a: Atom) -> Handle:
    if isinstance(a, Lit):
        return w.scalar(a) if a.type.rank == 0 else w.storage(a)
    return w.env[a]


def declare_outputs(w: Writer, outs: Sequence[Var]) -> list[Handle]:
    """Declare mutable targets for a cond's or loop's results (scalars: locals, tensors: buffers)."""
    handles: list[Handle] = []
    for v in outs:
        if v.type.rank == 0:
            name = w.namer.fresh(v.hint or "r")
            w.line(f"{w.ctype(v.type)} {name};")
            handles.append(name)
        else:
            handles.append(w.escaping.get(v) or w.alloc(v.type, v.hint or "r"))
    return handles


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
    dests = {r: o for r, o in zip(f.results, outs) if isinstance(r, Var) and isinstance(o, Storage)
             and list(f.results).count(r) == 1 and r not in f.params}
    results = emit_body(w, f, dests)
    for r, h, o in zip(f.results, results, outs):
        if h is not o:
            store(w, h, o, r.type)
    w.env = saved
    w.depth -= 1


def emit_loop(w: Writer, eqn) -> None:
    """A counted loop: carries are mutable locals/buffers, xs are read and ys written by slice."""
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    trip, consts = eqn.ins[0], list(eqn.ins[1:1 + nc])
    init, xs = list(eqn.ins[1 + nc:1 + nc + ncar]), list(eqn.ins[1 + nc + ncar:])
    carry = [_carry_home(w, v, a, eqn) for v, a in zip(eqn.outs[:ncar], init)]
    for h, a in zip(carry, init):
        store(w, handle_of(w, a), h, a.type)
    ys = declare_outputs(w, eqn.outs[ncar:])
    n = w.scalar(trip)
    k = w.namer.fresh("k")
    head = (f"for (int64_t {k} = {n} - 1; {k} >= 0; --{k}) {{" if p["reverse"]
            else f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {{")
    w.line(head)
    w.depth += 1
    saved = dict(w.env)
    w.env[body.params[0]] = k
    for prm, a in zip(body.params[1:1 + nc], consts):
        w.env[prm] = handle_of(w, a)
    for prm, h in zip(body.params[1 + nc:1 + nc + ncar], carry):
        w.env[prm] = h
        if isinstance(h, Storage):
            w.owner[h.root] = prm
    if p["length"] is not None:
        w.in_range[body.params[0]] = p["length"]
    for prm, a in zip(body.params[1 + nc + ncar:], xs):
        w.env[prm] = w.storage(a).slice0(k)
    results = emit_body(w, body)
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
    if ys and p["length"] is not None and not _runs_full_length(trip, n, p["length"]):
        _zero_rows(w, ys, eqn.outs[ncar:], n, p["length"])
    for v, h in zip(eqn.outs, carry + ys):
        w.env[v] = h
        if isinstance(h, Storage):
            w.owner[h.root] = v


def _carry_home(w: Writer, v: Var, init: Atom, eqn) -> Handle:
    """Where a loop carry lives: in its initial value's buffer when nothing reads that value after
    the loop (a gradient accumulated through nested loops stays in one buffer), else a new one."""
    h = w.updatable(init)
    if v.type.rank and v not in w.escaping and h is not None and sum(a is init for a in eqn.ins) == 1:
        return h
    return declare_outputs(w, [v])[0]


def _runs_full_length(trip: Atom, n: str, length) -> bool:
    """Whether the loop count is its length (else the length is only a bound of the count)."""
    return (isinstance(trip, Lit) and trip.value == length) or n == dim_expr(length)


def _zero_rows(w: Writer, ys, outs, start: str, length) -> None:
    """Rows start..length-1 of the stacked ys (past a count below its bound) are zero."""
    k = w.namer.fresh("k")
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
    """A call to another kernel: inlined as a block (the callee keeps its own names)."""
    fn = eqn.params["fn"]
    outs = declare_outputs(w, eqn.outs)
    w.line(f"{{  // {fn.name}({', '.join(p.hint or 'x' for p in fn.params)})")
    emit_inline(w, fn, list(eqn.ins), outs)
    w.line("}")
    for v, h in zip(eqn.outs, outs):
        w.env[v] = h
