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

The gradient. vjp turns that triangle into a reverse loop over r whose body runs a reverse loop over c < r that only
adds into arrays: `for r in reversed(range(N)): for c in reversed(range(r)): A[c] += a(r, c); B[i(r, c)] += b(r, c)`
(A: d_x, d_mu, added to at c; B: d_icf, at a computed index), followed in the outer body by adds at r only
(A[r] += ..., the diagonal). The inner loop's other inputs come from r, the consts, the stacked residuals x_r and
carries the loop passes through unchanged (the cotangent d_row = 2 d_sqnorm row_r). Such a loop becomes

    t[r] = (the inner loop's inputs computed from r) for every r         (a loop stacking them)
    for c in reversed(range(N)): s = A[c]; for r in reversed(range(c + 1, N)): s += a(r, c); B[i(r, c)] += b(r, c)
                                 A[c] = s
    the outer loop without its inner loop (its adds at r on the arrays the columns made)

Each A[c] gets a(N - 1, c), ..., a(c + 1, c) and then the outer body's add at r = c, in that order, as before, so d_x
is the same to the last bit; the sum runs in a register where the rows form read and wrote A[c] in memory once per
add, and the index of B moves by one per step (c's part computed once per column) where it was recomputed from the
quadratic formula per add. Each B slot gets its adds in the same order when no two (r, c) of the triangle hit the
same slot (GMM's packed triangle: one slot each; tests/test_triangles.py compares every gradient bitwise); if two did,
their adds would come in another order (the same terms). No branch on N: at N = 2 the two forms cost the same
(benchmarks/README.md "loops"). Not taken: a gradient that sums a row of cotangents in a local array and adds it
after the inner loop (B[r] += row: the `sum(... for c in range(r))` form's d_L), and outer bodies that add into the
arrays at other indices than r or read them.
"""
from __future__ import annotations

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.types import Type
from ..prims.base import PRIMS
from .rewrite import keep, rewrite


def triangles(f: Func) -> Func:
    """f with every triangular row-by-row sum (above) computed column by column, and every reverse loop of such a
    triangle's transpose (a gradient's, below) as well."""
    return rewrite(f, _rule)


def _rule(b: Builder, eqn: Eqn, ins: list):
    out = _interchanged(b, eqn, ins)
    return out if out is not None else _transposed(b, eqn, ins)


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
    if not _counts_r(e.ins[0], r, made):
        return False
    last = _last_add(body)
    if last is None:
        return False
    reads = sum(a is carry for x in body.eqns for a in x.ins) + sum(a is carry for a in body.results)
    return reads == 1


def _counts_r(count: Atom, r: Var, made: dict) -> bool:
    """Whether a loop's count is r or max(r, 0) (the frontend's count of `range(r)`)."""
    if count is r:
        return True
    m = made.get(count) if isinstance(count, Var) else None
    zero = m is not None and m.prim.name == "max" and any(isinstance(a, Lit) and a.value == 0 for a in m.ins)
    return zero and r in m.ins


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


def _per_column(ibody: Func, skip: list, per_column: set) -> tuple[list[Eqn], list[Var]]:
    """The equations of the inner body (all but skip) computed from the vars per_column (c and what does not
    change with r) alone, in order, and those of their outputs the other equations or the results read."""
    hoisted = []
    per_column = set(per_column)
    for x in ibody.eqns:
        if x not in skip and all(not isinstance(a, Var) or a in per_column for a in x.ins):
            hoisted.append(x)
            per_column.update(x.outs)
    made = {v for h in hoisted for v in h.outs}
    kept = [x for x in ibody.eqns if x not in hoisted]
    reads = [a for x in kept for a in x.ins] + list(ibody.results)
    return hoisted, list(dict.fromkeys(a for a in reads if isinstance(a, Var) and a in made))


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


# ---- the transposed triangle: a reverse loop's scatter over c < r -----------------------------------------------

def _transposed(b: Builder, eqn: Eqn, ins: list):
    """The reverse loop a vjp makes of a triangle, interchanged (the module's docstring, "The gradient")."""
    if eqn.prim.name != "loop":
        return None
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    if not p["reverse"] or p["length"] is None or len(eqn.outs) != ncar:
        return None
    r = body.params[0]
    carries = list(body.params[1 + nc:1 + nc + ncar])
    invariant = {c for c, res in zip(carries, body.results) if res is c}
    free = {r, *body.params[1:1 + nc], *invariant, *body.params[1 + nc + ncar:]}
    made: dict[Var, Eqn] = {}
    for e in body.eqns:
        if all(not isinstance(a, Var) or a in free for a in e.ins):
            free.update(e.outs)
        made.update((v, e) for v in e.outs)
    uses = _uses(body)
    plan = next((pl for e in body.eqns if (pl := _reverse_triangle(e, body, nc, ncar, free, made, uses))), None)
    if plan is None:
        return None
    b.loc = plan.inner.loc
    arrays = _transposed_columns(b, eqn, plan, ins)
    b.loc = eqn.loc
    start = list(ins)
    for j, a in zip(plan.arrays, arrays):
        start[1 + nc + carries.index(plan.outer_carry[j])] = a
    outs = b.bind(eqn.prim, start, dict(p, body=_without_inner(body, plan)))
    b.name_like(outs, eqn.outs)
    return list(outs)


class _Plan:
    """What _transposed moves out of the reverse loop over r: the inner loop (over c < r), its carries by kind
    (the positions of the arrays added to at c: `acc`; at other indices: `scatter`; passed through unchanged:
    `passed`), their index_adds, the outer loop's carry each array starts from, and the inner loop's inputs that
    are computed in the outer body (stacked over r in a table before the columns)."""

    def __init__(self, inner, acc, scatter, passed, adds, outer_carry):
        self.inner, self.acc, self.scatter, self.passed = inner, acc, scatter, passed
        self.adds, self.outer_carry = adds, outer_carry
        self.arrays = acc + scatter


def _uses(body: Func) -> dict:
    """How many times each var is read in body (its equations' operands and its results)."""
    n: dict[Var, int] = {}
    for a in [a for e in body.eqns for a in e.ins] + list(body.results):
        if isinstance(a, Var):
            n[a] = n.get(a, 0) + 1
    return n


def _reverse_triangle(e: Eqn, body: Func, nc: int, ncar: int, free: set, made: dict, uses: dict):
    """The _Plan if e is a reverse `for c in range(r)` (count r or max(r, 0)) whose carries are arrays only added
    to (one index_add each, along axis 0, its index and value free of the arrays) that start from the outer
    loop's carries, read nowhere else and added to after it at r only, or values passed through unchanged."""
    r = body.params[0]
    if e.prim.name != "loop":
        return None
    q = e.params
    ibody, inc, incar = q["body"], q["n_consts"], q["n_carry"]
    if not q["reverse"] or len(e.ins) != 1 + inc + incar or len(e.outs) != incar:
        return None
    if not _counts_r(e.ins[0], r, made):
        return None
    if any(isinstance(a, Var) and a not in free for a in e.ins[1:1 + inc]):
        return None
    c = ibody.params[0]
    icarries = ibody.params[1 + inc:]
    iuses = _uses(ibody)
    carries = list(body.params[1 + nc:1 + nc + ncar])
    acc, scatter, passed, adds, outer_carry = [], [], [], {}, {}
    for j, (param, res, init) in enumerate(zip(icarries, ibody.results, e.ins[1 + inc:])):
        if res is param:
            if isinstance(init, Var) and init not in free:
                return None
            passed.append(j)
            continue
        add = next((x for x in ibody.eqns if res in x.outs), None)
        if (add is None or add.prim.name != "index_add" or add.params["axis"] != 0 or add.ins[0] is not param
                or any(a is param for a in add.ins[1:]) or iuses.get(param) != 1 or iuses.get(res) != 1):
            return None
        if not (isinstance(init, Var) and init in carries and init not in outer_carry.values()
                and uses.get(init) == 1):
            return None
        if not _added_at_r_after(body, e.outs[j], body.results[carries.index(init)], r, uses):
            return None
        adds[j], outer_carry[j] = add, init
        at_c = len(add.ins) == 3 and add.ins[1] is c and param.type.rank == 1 and param.type.dtype in ("f32", "f64")
        (acc if at_c else scatter).append(j)
    if not acc and not scatter:
        return None
    return _Plan(e, acc, scatter, passed, adds, outer_carry)


def _added_at_r_after(body: Func, v: Var, result: Atom, r: Var, uses: dict) -> bool:
    """Whether v (the inner loop's array) reaches `result` (the outer body's result for that carry) through
    index_adds at r only (along axis 0), each step read once."""
    while v is not result:
        if uses.get(v) != 1:
            return False
        e = next((x for x in body.eqns if v in x.ins), None)
        if (e is None or e.prim.name != "index_add" or len(e.ins) != 3 or e.ins[0] is not v or e.ins[1] is not r
                or e.ins[2] is v or e.params["axis"] != 0):
            return False
        v = e.outs[0]
    return uses.get(v) == 1


def _transposed_columns(b: Builder, outer: Eqn, plan: _Plan, ins: list) -> list[Atom]:
    """The inner loop's adds for every r, column by column: for c in reversed(range(N)): acc = A[c] (each array
    added to at c); for r in reversed(range(c + 1, N)): acc += a(r, c), B[i(r, c)] += b(r, c); A[c] = acc.
    Returns the arrays (acc ones, then scatter ones) after all of them."""
    from ..prims.control import PRIMS_LOOP, wrap
    p = outer.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    r, consts = body.params[0], list(body.params[1:1 + nc])
    carries = list(body.params[1 + nc:1 + nc + ncar])
    n, oconsts, oinits, oxs = ins[0], ins[1:1 + nc], ins[1 + nc:1 + nc + ncar], ins[1 + nc + ncar:]
    invariant = [i for i, cr in enumerate(carries) if body.results[i] is cr]
    inner = plan.inner
    q = inner.params
    ibody, inc = q["body"], q["n_consts"]
    # the inner loop's inputs the columns read: r, the outer consts and invariant carries, literals; the rest
    # (computed from r, the consts, x_r) a table over r
    needed = [*inner.ins[1:1 + inc], *(inner.ins[1 + inc + j] for j in plan.passed)]
    direct = {r, *consts, *(carries[i] for i in invariant)}
    computed = list(dict.fromkeys(a for a in needed if isinstance(a, Var) and a not in direct))
    tables = _tables(b, outer, computed, n, oconsts, [oinits[i] for i in invariant], oxs) if computed else []
    i64 = Type("i64")
    side = list(oconsts) + [oinits[i] for i in invariant] + tables  # (the column loops' consts after c, N)
    side_vars = consts + [carries[i] for i in invariant]  # (what the first len(side_vars) of them stand for)
    arrays = [oinits[carries.index(plan.outer_carry[j])] for j in plan.arrays]
    na = len(plan.acc)

    def value(a, rr, sp, tb):  # an inner input in the column loops: sp, tb: the side consts, the tables' values
        if not isinstance(a, Var):
            return a
        if a is r:
            return rr
        if a in side_vars:
            return sp[side_vars.index(a)]
        return tb[computed.index(a)]

    # what the inner body computes from c, the consts and literals alone is computed once per column
    icarries = ibody.params[1 + inc:]
    sources = dict(zip(ibody.params[1:1 + inc], inner.ins[1:1 + inc]))
    sources.update((icarries[k], inner.ins[1 + inc + k]) for k in plan.passed)
    per_column = {ibody.params[0]} | {prm for prm, a in sources.items() if not isinstance(a, Var) or a in side_vars}
    hoisted, moved = _per_column(ibody, list(plan.adds.values()), per_column)
    kept = [x for x in ibody.eqns if x not in hoisted]
    nm = len(moved)

    def row_step(bb: Builder, ps):  # (j, c, side..., per-column values..., accs..., scatter arrays...): r = c + 1 + j
        j, c, *rest = ps
        sp, mv = rest[:len(side)], rest[len(side):len(side) + nm]
        accs, scs = rest[len(side) + nm:len(side) + nm + na], rest[len(side) + nm + na:]
        rr = bb.add(bb.add(c, Lit(1, i64)), j)
        bb.name(rr, r.hint)
        tb = [bb.index(t, rr, axis=0) for t in sp[len(side_vars):]]
        ienv = {ibody.params[0]: c, **dict(zip(moved, mv))}
        ienv.update((prm, value(a, rr, sp, tb)) for prm, a in zip(ibody.params[1:1 + inc], inner.ins[1:1 + inc]))
        for k in plan.passed:
            ienv[icarries[k]] = value(inner.ins[1 + inc + k], rr, sp, tb)
        ienv.update((icarries[k], s) for k, s in zip(plan.scatter, scs))
        acc_of = {plan.adds[k]: (k, a) for k, a in zip(plan.acc, accs)}
        new_acc = {}
        for x in kept:
            if x in acc_of:
                k, a = acc_of[x]
                term = ienv.get(x.ins[2], x.ins[2]) if isinstance(x.ins[2], Var) else x.ins[2]
                new_acc[k] = bb.add(a, term)
                ienv[x.outs[0]] = new_acc[k]
            else:
                _replay(bb, [x], ienv)
        res = ibody.results
        return [new_acc[k] for k in plan.acc] + [ienv.get(res[k], res[k]) for k in plan.scatter]

    def column(bb: Builder, ps):  # (c, N, side..., acc arrays..., scatter arrays...)
        c, nn, *rest = ps
        sp, accs_in, scs = rest[:len(side)], rest[len(side):len(side) + na], rest[len(side) + na:]
        trip = bb.sub(bb.sub(nn, c), Lit(1, i64))
        starts = [bb.index(a, c, axis=0) for a in accs_in]
        env = {ibody.params[0]: c}
        env.update((prm, value(a, None, sp, None)) for prm, a in sources.items() if prm in per_column)
        _replay(bb, hoisted, env)
        mv = [env[a] for a in moved]
        f = wrap("column", [i64, i64] + [a.type for a in [*sp, *mv, *starts, *scs]], row_step, hints=("below",))
        params = dict(body=f, n_consts=1 + len(sp) + nm, n_carry=na + len(scs), length=p["length"], reverse=True)
        outs = bb.bind(PRIMS_LOOP, [trip, c, *sp, *mv, *starts, *scs], params)
        accs, scs = outs[:na], outs[na:]
        return [bb.index_set(a, c, v, axis=0) for a, v in zip(accs_in, accs)] + list(scs)

    f = wrap("columns", [i64, i64] + [a.type for a in side] + [a.type for a in arrays], column,
             hints=(ibody.params[0].hint or "c",))
    params = dict(body=f, n_consts=1 + len(side), n_carry=len(arrays), length=p["length"], reverse=True)
    return list(b.bind(PRIMS_LOOP, [n, n, *side, *arrays], params))


def _tables(b: Builder, outer: Eqn, wanted: list, n: Atom, oconsts: list, invariant_inits: list, oxs: list):
    """wanted (values the outer body computes from r, its consts, invariant carries and x_r) for every r: a loop
    over r stacking them."""
    from ..prims.control import PRIMS_LOOP, wrap
    p = outer.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    carries = list(body.params[1 + nc:1 + nc + ncar])
    inv_params = [cr for i, cr in enumerate(carries) if body.results[i] is cr]
    xs = list(body.params[1 + nc + ncar:])

    def make(bb: Builder, ps):
        k, rest = ps[0], ps[1:]
        env = dict(zip([body.params[0], *body.params[1:1 + nc], *inv_params], [k, *rest[:nc + len(inv_params)]]))
        env.update(zip(xs, rest[nc + len(inv_params):]))
        _replay(bb, _free_eqns(body, nc, wanted), env)
        return [env.get(a, a) for a in wanted]

    slices = [Type(x.type.dtype, x.type.shape[1:]) for x in oxs]
    f = wrap("row_terms", [Type("i64")] + [a.type for a in [*oconsts, *invariant_inits]] + slices, make,
             hints=(body.params[0].hint,))
    params = dict(body=f, n_consts=len(oconsts) + len(invariant_inits), n_carry=0, length=p["length"],
                  reverse=False)
    return list(b.bind(PRIMS_LOOP, [n, *oconsts, *invariant_inits, *oxs], params))


def _without_inner(body: Func, plan: _Plan) -> Func:
    """The outer body without the inner loop: its arrays are the outer carries as they come (the columns added
    to them before the loop), its passed-through values their inputs."""
    b = Builder()
    env: dict[Var, Atom] = {}
    inner = plan.inner
    inc = inner.params["n_consts"]
    for e in body.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.ins]
        if e is inner:
            for j in plan.arrays:
                env[e.outs[j]] = plan.outer_carry[j]
            for j in plan.passed:
                a = inner.ins[1 + inc + j]
                env[e.outs[j]] = env.get(a, a) if isinstance(a, Var) else a
            continue
        env.update(zip(e.outs, keep(b, e, ins)))
    results = [env.get(x, x) if isinstance(x, Var) else x for x in body.results]
    return b.func(body.name, list(body.params), results, body.result_names)
