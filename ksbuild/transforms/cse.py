"""cse: common subexpression elimination.

Requires: a Func. Guarantees: within each function body, no two equations have the same primitive, inputs and
params; later ones read the first's outputs instead. Equations with sub-functions (cond, loop, call, map) compare
their bodies by structure (`_BodyKeys`: prims, params, types and how values flow, not var names or hints nor the
bodies' names): jacfwd in two argnums inlines two jvps whose primal parts are the same loops and calls on the same
inputs (GradBench's ht: the 22-bone chain of 4 x 4 products was computed twice). Before that, two conds of one
predicate that share an operand become one cond (`join_conds`), so that what both branches compute from the shared
operands is computed once (gather_early's choice between the rows read and all rows, made for the primal's skinning
and again for its tangents'). (Bodies are closed, so nothing is shared across them.)
"""
from __future__ import annotations

import weakref

from ..ir.builder import Builder, inline
from ..ir.core import Atom, Eqn, Func, Lit, Var, freeze
from .rewrite import keep, rewrite


def _key_atom(a: Atom):
    return ("lit", a.type, repr(a.value)) if isinstance(a, Lit) else ("var", id(a))


def cse(f: Func) -> Func:
    """f with repeated equations merged (per body); then conds of one predicate joined, and merged again inside
    them (a cond's predicate is often one of the repeated equations)."""
    merged = _cse(f)
    joined = join_conds(merged)
    return merged if joined is merged else _cse(joined)


def _cse(f: Func) -> Func:
    seen_by_body: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # one table per body's builder
    keys = _BodyKeys()

    def rule(b, eqn, ins):
        seen = seen_by_body.setdefault(b, {})
        params = tuple(sorted((k, ("func", keys.of(v)) if isinstance(v, Func) else v)
                              for k, v in eqn.params.items()))
        key = (eqn.prim.name, tuple(_key_atom(a) for a in ins), params)
        if key in seen:
            return seen[key]
        outs = keep(b, eqn, ins)
        seen[key] = outs
        return outs

    return rewrite(f, rule)


def join_conds(f: Func) -> Func:
    """f where a cond follows another of the same predicate (a var) with an operand in common, and reads none of
    its results (not even through the equations between them), as one cond at the first's place: the equations
    the second needs from between them move before it, the branches run one after the other on the operands once
    each (then cse merges what both computed). Per body, nested ones included."""
    memo: dict[int, Func] = {}

    def body(g: Func) -> Func:
        if id(g) not in memo:
            eqns = [e if not any(isinstance(v, Func) for v in e.params.values()) else Eqn(
                e.prim, e.ins, e.outs, freeze({k: body(v) if isinstance(v, Func) else v for k, v in e.params.items()}),
                e.loc) for e in g.eqns]
            while _join_one(eqns):
                pass
            memo[id(g)] = g if all(a is c for a, c in zip(eqns, g.eqns)) and len(eqns) == len(g.eqns) else \
                Func(g.name, g.params, tuple(eqns), g.results, g.result_names, g.plan, g.notes, g.defaults)
        return memo[id(g)]

    return body(f)


def _join_one(eqns: list[Eqn]) -> bool:
    """Join the first pair of conds that can be joined (in place); whether there was one."""
    conds = [e.prim.name == "cond" for e in eqns]
    for j, second in enumerate(eqns):
        if not conds[j] or not isinstance(second.ins[0], Var):
            continue
        shared = {id(a) for a in second.ins[1:] if isinstance(a, Var)}
        for i in range(j - 1, -1, -1):
            first = eqns[i]
            if not conds[i] or first.ins[0] is not second.ins[0] or not any(id(a) in shared for a in first.ins[1:]):
                continue
            need = {id(a) for a in second.ins if isinstance(a, Var)}
            moved = []
            for k in range(j - 1, i, -1):
                if any(id(v) in need for v in eqns[k].outs):
                    moved.append(k)
                    need |= {id(a) for a in eqns[k].ins if isinstance(a, Var)}
            if any(id(v) in need for v in first.outs):
                continue  # the second reads the first's results
            rest = [eqns[k] for k in range(i + 1, j) if k not in moved]
            eqns[i:j + 1] = [eqns[k] for k in sorted(moved)] + [_joined(first, second)] + rest
            return True
    return False


def _joined(first: Eqn, second: Eqn) -> Eqn:
    """One cond running both conds' branches: operands once each, results the first's then the second's."""
    ops: list[Atom] = []
    where: dict[int, int] = {}
    places = []
    for e in (first, second):
        for a in e.ins[1:]:
            if isinstance(a, Lit) or id(a) not in where:
                if isinstance(a, Var):
                    where[id(a)] = len(ops)
                places.append(len(ops))
                ops.append(a)
            else:
                places.append(where[id(a)])
    n1 = len(first.ins) - 1
    branches = {}
    for key in ("then_fn", "else_fn"):
        b = Builder()
        f1, f2 = first.params[key], second.params[key]
        params = [Var(p.type, p.hint) for p in _op_params(f1, f2, places, len(ops))]
        results = inline(b, f1, [params[k] for k in places[:n1]]) + inline(b, f2, [params[k] for k in places[n1:]])
        branches[key] = b.func(f1.name, params, results)
    params = freeze({**first.params, **branches})
    return Eqn(first.prim, (first.ins[0], *ops), first.outs + second.outs, params, first.loc)


def _op_params(f1: Func, f2: Func, places: list[int], n: int) -> list[Var]:
    """For each joined operand, a param of the branch that reads it (for its type and hint)."""
    given: list = [None] * n
    for p, k in zip(list(f1.params) + list(f2.params), places):
        given[k] = given[k] or p
    return given


class _BodyKeys:
    """A number per body structure: equal for two bodies that compute the same thing the same way (their params'
    types, then per equation its prim, its inputs (a param or an earlier output by position, or a literal), its
    params (bodies by their own numbers) and its outputs' types, then the results; names, hints and locations left
    out). Each body's structure is hashed once; a key holds its sub-bodies' numbers, not their structures."""

    def __init__(self):
        self.numbers: dict[tuple, int] = {}
        self.by_id: dict[int, tuple[Func, int]] = {}  # (the body kept alive: its id is not reused meanwhile)

    def of(self, g: Func) -> int:
        if id(g) not in self.by_id:
            self.by_id[id(g)] = (g, self.numbers.setdefault(self._structure(g), len(self.numbers)))
        return self.by_id[id(g)][1]

    def _structure(self, g: Func) -> tuple:
        number: dict[Var, int] = {}

        def atom(a: Atom):
            return ("lit", a.type, repr(a.value)) if isinstance(a, Lit) else number[a]

        for p in g.params:
            number[p] = len(number)
        eqns = []
        for e in g.eqns:
            params = tuple(sorted((k, ("func", self.of(v)) if isinstance(v, Func) else v)
                                  for k, v in e.params.items()))
            eqns.append((e.prim.name, tuple(atom(a) for a in e.ins), params, tuple(v.type for v in e.outs)))
            for v in e.outs:
                number[v] = len(number)
        return tuple(p.type for p in g.params), tuple(eqns), tuple(atom(r) for r in g.results)
