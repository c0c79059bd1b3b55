"""hoist: costly values a loop recomputes in every iteration, computed once before it, into a table.

Requires: a Func after the transformations. Guarantees: the same values; inside a `loop`, a scalar equation of a
`costly` prim (exp, log, sin, pow, ...) whose operands are the same in every iteration of the loop -- computed from
its consts, literals and the counters of loops nested in it whose counts and lengths are the same in every
iteration too -- is computed before the loop, once for every value of those counters, into a table (a loop
nest over the nested loops' lengths; a scalar when it reads no counter), and read from the table by the counters.
`for i in range(n): for k in range(K): for r in range(d): exp(icf[k, r])` computes exp K·d times, not n·K·d,
as a C programmer precomputes exp(icf) before the loops. Loops are visited innermost first, so a value moves as
far out as the loops it does not depend on allow.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var, freeze
from ..ir.types import Type
from .rewrite import bind_like, keep, rewrite

Recipe = tuple  # ("outer", atom) | ("count", loop eqn id) | ("eqn", eqn, output position, operand recipes)


@dataclass(frozen=True)
class Axis:
    """A loop nested in the hoisting loop whose counter a table is indexed by."""

    loop: Eqn
    trip: Recipe


@dataclass(frozen=True)
class Candidate:
    """A costly value to hoist: its var, the loops from the hoisting loop's body down to it, the axes it reads."""

    var: Var
    recipe: Recipe
    path: tuple[Eqn, ...]
    axes: tuple[Axis, ...]


def hoist(f: Func) -> Func:
    """f with the costly loop-invariant values of every loop computed before it."""
    return rewrite(f, _hoisted)


def _hoisted(b: Builder, eqn: Eqn, ins: list):
    if eqn.prim.name != "loop":
        return None
    body, nc = eqn.params["body"], eqn.params["n_consts"]
    known = {p: (("outer", a), frozenset()) for p, a in zip(body.params[1:1 + nc], ins[1:1 + nc])}
    found: list[Candidate] = []
    _search(body, known, (), {}, found)
    if not found:
        return None
    tables = [_table(b, c) for c in found]
    new_body = _plumb(body, nc, found, [t.type for t in tables], 0)
    params = dict(eqn.params, body=new_body, n_consts=nc + len(tables))
    b.loc = eqn.loc
    outs = b.bind(eqn.prim, [*ins[:1 + nc], *tables, *ins[1 + nc:]], params)
    b.name_like(outs, eqn.outs)
    return list(outs)


# ---- finding what to hoist --------------------------------------------------------------------

def _search(body: Func, known: dict, path: tuple, axes: dict, found: list) -> None:
    """Record in `known` the recipe and axes of every value of body computable before the hoisting loop; collect
    the costly ones in `found`. `axes` maps the id of each loop on the path usable as a table axis to its Axis."""
    for e in body.eqns:
        ops = [_known(a, known) for a in e.ins]
        if e.prim.name == "loop":
            _enter(e, ops, known, path, axes, found)
            continue
        if any(o is None for o in ops) or any(isinstance(v, Func) for v in e.params.values()):
            continue
        deps = frozenset().union(*(d for _, d in ops))
        for k, v in enumerate(e.outs):
            known[v] = (("eqn", e, k, tuple(r for r, _ in ops)), deps)
        v = e.outs[0]
        if e.prim.costly and len(e.outs) == 1 and v.type.rank == 0 and v.type.dtype in ("f32", "f64"):
            found.append(Candidate(v, known[v][0], path, tuple(axes[i] for i in _ordered(deps, path))))


def _enter(e: Eqn, ops: list, known: dict, path: tuple, axes: dict, found: list) -> None:
    """Search a nested loop's body: its consts keep their recipes; its counter is an axis when the loop's count
    and length do not change with the hoisting loop's iterations."""
    p, body = e.params, e.params["body"]
    nc = p["n_consts"]
    inner = dict(known)
    for prm, op in zip(body.params[1:1 + nc], ops[1:1 + nc]):
        if op is not None:
            inner[prm] = op
    trip = ops[0]
    if trip is not None and not trip[1] and p["length"] is not None:
        axes = {**axes, id(e): Axis(e, trip[0])}
        inner[body.params[0]] = (("count", id(e)), frozenset({id(e)}))
    _search(body, inner, path + (e,), axes, found)


def _known(a: Atom, known: dict):
    if isinstance(a, Lit):
        return ("outer", a), frozenset()
    return known.get(a)


def _ordered(deps: frozenset, path: tuple) -> list[int]:
    """The axes a value depends on, outermost loop first."""
    return [id(e) for e in path if id(e) in deps]


# ---- building the tables -------------------------------------------------------------------------

def _table(b: Builder, c: Candidate) -> Atom:
    """The candidate's values for every value of its axes' counters: a loop nest before the hoisting loop."""
    leaves: dict = {}
    b.loc = c.recipe[1].loc  # (the table's loops trace back to the expression it holds, not to the loop it left)
    for r in (c.recipe, *(a.trip for a in c.axes)):
        _leaves(r, leaves)
    return _level(b, c, 0, leaves)


def _leaves(r: Recipe, out: dict) -> None:
    """The outer vars a recipe reads, as env entries (key ("outer", var) -> var)."""
    stack = [r]
    while stack:
        r = stack.pop()
        if r[0] == "outer" and isinstance(r[1], Var):
            out[r] = r[1]
        elif r[0] == "eqn":
            stack.extend(r[3])


def _level(b: Builder, c: Candidate, depth: int, env: dict) -> Atom:
    """The table from axis `depth` in (the value itself past the last axis); env: what the recipe reads here."""
    if depth == len(c.axes):
        return _build(b, c.recipe, env, {})
    from ..prims.control import PRIMS_LOOP, wrap
    axis = c.axes[depth]
    trip = _build(b, axis.trip, env, {})
    outer = list(env.items())

    def body(bb: Builder, ps):
        inner = {key: p for (key, _), p in zip(outer, ps[1:])}
        inner[("count", id(axis.loop))] = ps[0]
        return [_level(bb, c, depth + 1, inner)]

    types = [Type("i64")] + [a.type for _, a in outer]
    f = wrap("hoisted_table", types, body, hints=(axis.loop.params["body"].params[0].hint,))
    params = dict(body=f, n_consts=len(outer), n_carry=0, length=axis.loop.params["length"], reverse=False)
    return b.bind(PRIMS_LOOP, [trip, *(a for _, a in outer)], params)[0]


def _build(b: Builder, r: Recipe, env: dict, memo: dict) -> Atom:
    """The value of a recipe in b, its outer vars and counters read from env."""
    if r[0] == "outer":
        return r[1] if isinstance(r[1], Lit) else env[r]
    if r[0] == "count":
        return env[r]
    if id(r) not in memo:
        _, e, k, ops = r
        memo[id(r)] = b.bind(e.prim, [_build(b, o, env, memo) for o in ops], dict(e.params))[k]
    return memo[id(r)]


# ---- reading the tables --------------------------------------------------------------------------

def _plumb(body: Func, nc: int, cands: list[Candidate], types: list[Type], depth: int) -> Func:
    """body with one more const per candidate (its table, indexed first by this body's counter when that is one of
    the candidate's axes), passed on to the loop on the candidate's path; a candidate computed here is read from
    its table instead. depth: 0 for the hoisting loop's body, j for the body of the j-th loop on the path."""
    b = Builder()
    tparams = [Var(t) for t in types]
    here = [_by_counter(b, c, t, body.params[0], depth) for c, t in zip(cands, tparams)]
    env: dict[Var, Atom] = {}
    for e in body.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.ins]
        through = [(c, t) for c, t in zip(cands, here) if len(c.path) > depth and c.path[depth] is e]
        done = [t for c, t in zip(cands, here) if len(c.path) == depth and c.var is e.outs[0]]
        if through:
            outs = _pass_on(b, e, ins, through, depth)
        elif done:
            outs = [done[0]]
        else:
            outs = keep(b, e, ins)
        env.update(zip(e.outs, outs))
    params = [*body.params[:1 + nc], *tparams, *body.params[1 + nc:]]
    results = [env.get(r, r) if isinstance(r, Var) else r for r in body.results]
    return b.func(body.name, params, results, body.result_names)


def _by_counter(b: Builder, c: Candidate, table: Atom, counter: Var, depth: int) -> Atom:
    """The table's row at this body's counter when the body's loop is one of the candidate's axes."""
    if depth and any(a.loop is c.path[depth - 1] for a in c.axes):
        return b.index(table, counter, axis=0)
    return table


def _pass_on(b: Builder, e: Eqn, ins: list, through: list, depth: int) -> list[Atom]:
    """The loop e with the tables of the candidates below it as extra consts."""
    p = e.params
    nc = p["n_consts"]
    tables = [t for _, t in through]
    body = _plumb(p["body"], nc, [c for c, _ in through], [t.type for t in tables], depth + 1)
    params = freeze(dict(p, body=body, n_consts=nc + len(tables)))
    return bind_like(b, e, e.prim, [*ins[:1 + nc], *tables, *ins[1 + nc:]], params)
