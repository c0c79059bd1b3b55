"""triangles: a triangular sum computed row by row becomes running sums updated column by column.

Requires: a Func after the transformations. Guarantees: the same values, bit for bit. A loop over r (counter r,
count N, not reversed, no stacked inputs) whose body runs an inner loop over c < r (count r, or max(r, 0)) that only
adds to one float scalar carry, `row = a(r); for c in range(r): row = row + g(r, c)`, where a(r) and the inner
loop's operands are computed from r, the outer loop's consts and literals (not its carries), is computed as

    rows[r] = a(r) for every r                          (a loop over r stacking a(r))
    for c in range(N): for r in range(c + 1, N): rows[r] = rows[r] + g(r, c)
    the outer loop, reading rows[r] where it ran the inner loop

Each rows[r] gets g(r, 0), g(r, 1), ... g(r, r - 1) added in that order, as the inner loop added them, so every sum
is the same (the reference interpreter's values bit for bit). Both forms are kept behind a `cond` on N >= COLUMNS_FROM
(a literal N picks one when simplify runs): short triangles run the row-by-row loops as before. What changes is the
order of the work: the row-by-row form is one serial chain of r dependent adds per row, each waiting for the last;
column by column the N - c - 1 adds of a step are independent (d running sums, as ADBench's hand-written GMM updates
Q(x - mu) column by column: benchmarks/loops/hand.cpp). Loop code ported from C has this shape (benchmarks/loops/
kernels.py: the GMM's `for c in range(r)` over the triangle of Q_k).
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.types import Type
from ..prims.base import PRIMS
from .rewrite import keep, rewrite


def triangles(f: Func) -> Func:
    """f with every triangular row-by-row sum (above) computed column by column."""
    return rewrite(f, _interchanged)


def _interchanged(b: Builder, eqn: Eqn, ins: list):
    if eqn.prim.name != "loop":
        return None
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    if p["reverse"] or p["length"] is None or len(eqn.ins) != 1 + nc + ncar:
        return None
    r = body.params[0]
    free = {r, *body.params[1:1 + nc]}  # (values the same whatever the carries: r, the consts, what they make)
    made: dict[Var, Eqn] = {}
    for e in body.eqns:
        if all(not isinstance(a, Var) or a in free for a in e.ins):
            free.update(e.outs)
        made.update((v, e) for v in e.outs)
    inner = next((e for e in body.eqns if _triangle(e, r, free, made)), None)
    if inner is None:
        return None
    from ..prims.control import wrap
    operands = list(dict.fromkeys(a for a in ins if isinstance(a, Var)))

    def given(ps):
        env = dict(zip(operands, ps))
        return [env.get(a, a) if isinstance(a, Var) else a for a in ins]

    def by_columns(bb: Builder, ps):
        n, *rest = given(ps)
        consts = rest[:nc]
        bb.loc = inner.loc
        rows = _columns(bb, eqn, inner, n, consts, _first_terms(bb, eqn, inner, n, consts))
        bb.loc = eqn.loc
        return list(bb.bind(eqn.prim, [n, *consts, rows, *rest[nc:]], dict(p, body=_reading_rows(body, nc, inner,
                                                                                                    rows.type),
                                                                             n_consts=nc + 1)))

    def by_rows(bb: Builder, ps):
        bb.loc = eqn.loc
        return list(bb.bind(eqn.prim, given(ps), dict(p)))

    types = [a.type for a in operands]
    branches = {"then_fn": wrap("by_columns", types, by_columns), "else_fn": wrap("by_rows", types, by_rows)}
    b.loc = eqn.loc
    wide = b.ge(ins[0], Lit(COLUMNS_FROM, ins[0].type))
    outs = b.bind(PRIMS["cond"], [wide, *operands], branches)
    b.name_like(outs, eqn.outs)
    return list(outs)


COLUMNS_FROM = 8
"""Triangles of at least this many rows are computed column by column (a run-time branch on the count when it is not
a literal): at 2 rows the separate loops cost more than the chains they shorten (the loop-style GMM at d = 2, K = 5:
F 1.2 -> 1.55 of the hand-written C++ column by column), at 20 they gain (1.25 -> 0.7-1.0)."""


def _triangle(e: Eqn, r: Var, free: set, made: dict) -> bool:
    """Whether e is `for c in range(r): row = row + g(r, c)` (one float scalar carry, only added to), its count r
    or max(r, 0), its operands free of the outer loop's carries."""
    if e.prim.name != "loop":
        return False
    p = e.params
    body, nc = p["body"], p["n_consts"]
    if p["reverse"] or p["n_carry"] != 1 or len(e.ins) != 2 + nc or len(e.outs) != 1:
        return False
    carry = body.params[-1]
    if carry.type.rank or carry.type.dtype not in ("f32", "f64"):
        return False
    if any(isinstance(a, Var) and a not in free for a in e.ins[1:]):
        return False
    count = e.ins[0]
    if count is not r:
        m = made.get(count) if isinstance(count, Var) else None
        zero = m is not None and m.prim.name == "max" and any(isinstance(a, Lit) and a.value == 0 for a in m.ins)
        if not (zero and r in m.ins):
            return False
    last = _last_add(body)
    if last is None:
        return False
    reads = sum(a is carry for x in body.eqns for a in x.ins) + sum(a is carry for a in body.results)
    return reads == 1


def _last_add(body: Func) -> tuple[Eqn, Atom] | None:
    """(the add, g) if body returns add(carry, g) (or add(g, carry)) with g not the carry."""
    carry = body.params[-1]
    (res,) = body.results
    e = next((x for x in body.eqns if res in x.outs), None)
    if e is None or e.prim.name != "add" or res.type != carry.type:
        return None
    x, y = e.ins
    if x is carry and y is not carry:
        return e, y
    if y is carry and x is not carry:
        return e, x
    return None


def _free_eqns(body: Func, nc: int, wanted: list) -> list[Eqn]:
    """The equations of the outer body that compute `wanted` from r and the consts, in order."""
    need = {a for a in wanted if isinstance(a, Var)}
    out = []
    for e in reversed(body.eqns):
        if any(v in need for v in e.outs):
            out.append(e)
            need.update(a for a in e.ins if isinstance(a, Var))
    return out[::-1]


def _replay(b: Builder, eqns: list[Eqn], env: dict) -> None:
    """Append copies of eqns (vars of their own) to b, reading env (updated with their outputs)."""
    for e in eqns:
        ins = tuple(env.get(a, a) if isinstance(a, Var) else a for a in e.ins)
        types = e.prim.type_rule([a.type for a in ins], **e.params)
        outs = tuple(Var(t, v.hint) for t, v in zip(types, e.outs))
        b.eqns.append(Eqn(e.prim, ins, outs, e.params, e.loc))
        env.update(zip(e.outs, outs))


def _first_terms(b: Builder, outer: Eqn, inner: Eqn, n: Atom, consts: list) -> Atom:
    """rows[r] = a(r), the inner loop's carry before it, for every r: a loop over r stacking it."""
    from ..prims.control import PRIMS_LOOP, wrap
    body, nc = outer.params["body"], outer.params["n_consts"]
    init = inner.ins[-1]

    def make(bb: Builder, ps):
        if not isinstance(init, Var):
            return [init]
        env = dict(zip(body.params[:1 + nc], ps))
        _replay(bb, _free_eqns(body, nc, [init]), env)
        return [env.get(init, init)]

    f = wrap("first_terms", [Type("i64")] + [a.type for a in consts], make, hints=(body.params[0].hint,))
    params = dict(body=f, n_consts=len(consts), n_carry=0, length=outer.params["length"], reverse=False)
    return b.bind(PRIMS_LOOP, [n, *consts], params)[0]


def _columns(b: Builder, outer: Eqn, inner: Eqn, n: Atom, consts: list, rows: Atom) -> Atom:
    """for c in range(N): for r in range(c + 1, N): rows[r] = rows[r] + g(r, c)."""
    from ..prims.control import PRIMS_LOOP, wrap
    body, nc = outer.params["body"], outer.params["n_consts"]
    ibody, inc = inner.params["body"], inner.params["n_consts"]
    add, g = _last_add(ibody)
    iconsts = list(inner.ins[1:1 + inc])
    pre = _free_eqns(body, nc, iconsts)
    length = outer.params["length"]
    i64 = Type("i64")

    def row_step(bb: Builder, ps):  # (j, c, N, consts..., rows): r = c + 1 + j
        j, c, _, *cs, rws = ps
        rr = bb.add(bb.add(c, Lit(1, i64)), j)
        bb.name(rr, body.params[0].hint)  # (the row: the outer loop's counter)
        env = dict(zip(body.params[:1 + nc], [rr, *cs]))
        _replay(bb, pre, env)
        ienv = dict(zip(ibody.params[:1 + inc], [c, *[env.get(a, a) if isinstance(a, Var) else a for a in iconsts]]))
        _replay(bb, [x for x in ibody.eqns if x is not add], ienv)
        term = ienv.get(g, g) if isinstance(g, Var) else g
        return [bb.index_add(rws, rr, term, axis=0)]

    def column(bb: Builder, ps):  # (c, N, consts..., rows)
        c, nn, *cs, rws = ps
        trip = bb.sub(bb.sub(nn, c), Lit(1, i64))
        f = wrap("column", [i64, i64, i64] + [a.type for a in cs] + [rws.type], row_step, hints=("below",))
        params = dict(body=f, n_consts=2 + len(cs), n_carry=1, length=length, reverse=False)
        return [bb.bind(PRIMS_LOOP, [trip, c, nn, *cs, rws], params)[0]]

    f = wrap("columns", [i64, i64] + [a.type for a in consts] + [rows.type], column,
             hints=(ibody.params[0].hint or "c",))
    params = dict(body=f, n_consts=1 + len(consts), n_carry=1, length=length, reverse=False)
    return b.bind(PRIMS_LOOP, [n, n, *consts, rows], params)[0]


def _reading_rows(body: Func, nc: int, inner: Eqn, rows_type: Type) -> Func:
    """The outer body with one more const (the rows) read at r where it ran the inner loop."""
    b = Builder()
    rows = Var(rows_type, "rows")
    env: dict[Var, Atom] = {}
    for e in body.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.ins]
        if e is inner:
            b.loc = e.loc
            outs = [b.index(rows, body.params[0], axis=0)]
        else:
            outs = keep(b, e, ins)
        env.update(zip(e.outs, outs))
    params = [*body.params[:1 + nc], rows, *body.params[1 + nc:]]
    results = [env.get(r, r) if isinstance(r, Var) else r for r in body.results]
    return b.func(body.name, params, results, body.result_names)
