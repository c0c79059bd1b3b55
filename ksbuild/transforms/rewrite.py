"""A shared driver for passes that rewrite equations one at a time, recursing into bodies."""
from __future__ import annotations

from typing import Callable

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Var

# rule(b, eqn, ins) -> the new outputs (atoms) of eqn, or None to keep eqn as it is
Rule = Callable[[Builder, Eqn, list], "list[Atom] | None"]


def rewrite(f: Func, rule: Rule) -> Func:
    """f with each equation (also inside cond/loop/call/fusion bodies) replaced by what rule
    builds for it. Vars of untouched equations keep their identity (and names); a body shared
    by several equations is rewritten once."""
    memo: dict[int, Func] = {}

    def body(g: Func) -> Func:
        if id(g) not in memo:
            memo[id(g)] = _rewrite_body(g, rule, body)
        return memo[id(g)]

    return body(f)


def _rewrite_body(f: Func, rule: Rule, recurse: Callable[[Func], Func]) -> Func:
    b = Builder()
    env: dict[Var, Atom] = {}

    def read(a: Atom) -> Atom:
        return env.get(a, a) if isinstance(a, Var) else a

    for eqn in f.eqns:
        b.loc = eqn.loc
        ins = [read(a) for a in eqn.ins]
        if any(isinstance(v, Func) for v in eqn.params.values()):
            params = {k: recurse(v) if isinstance(v, Func) else v for k, v in eqn.params.items()}
            eqn = Eqn(eqn.prim, eqn.ins, eqn.outs, params, eqn.loc)
        new = rule(b, eqn, ins)
        env.update(zip(eqn.outs, keep(b, eqn, ins) if new is None else new))
    return b.func(f.name, list(f.params), [read(r) for r in f.results], f.result_names)


def keep(b: Builder, eqn: Eqn, ins: list) -> list[Atom]:
    """Append eqn with (possibly renamed) inputs; its outputs keep their names."""
    if all(a is c for a, c in zip(ins, eqn.ins)):
        outs = eqn.outs
    else:
        types = eqn.prim.type_rule([a.type for a in ins], **eqn.params)
        outs = tuple(Var(t, v.hint) for t, v in zip(types, eqn.outs))
    b.eqns.append(Eqn(eqn.prim, tuple(ins), outs, eqn.params, eqn.loc))
    return list(outs)


def bind_like(b: Builder, eqn: Eqn, prim, ins: list, params: dict) -> list[Atom]:
    """Bind prim in place of eqn; the new outputs take the names of eqn's outputs."""
    types = prim.type_rule([a.type for a in ins], **params)
    outs = tuple(Var(t, v.hint) for t, v in zip(types, eqn.outs))
    b.eqns.append(Eqn(prim, tuple(ins), outs, params, eqn.loc))
    return list(outs)


def use_counts(f: Func) -> dict[Var, int]:
    """How many times each var is read in f's body (results included; bodies are closed)."""
    n: dict[Var, int] = {}
    for a in [a for e in f.eqns for a in e.ins] + list(f.results):
        if isinstance(a, Var):
            n[a] = n.get(a, 0) + 1
    return n


def walk_funcs(f: Func):
    """f and every function nested in it (each shared body once)."""
    seen: set[int] = set()
    stack = [f]
    while stack:
        g = stack.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        yield g
        stack.extend(v for e in g.eqns for v in e.params.values() if isinstance(v, Func))
