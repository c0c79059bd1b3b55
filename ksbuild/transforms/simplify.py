"""simplify: local algebraic rewrites, constant folding and dead-code elimination.

Requires: a Func. Guarantees: an equivalent Func (same values on every input) where
  - x + 0 = x, x - 0 = x, x * 1 = x, x * 0 = 0 (splat zero), 0 / x = 0, --x = x, select(p, a, a) = a,
  - an equation whose inputs are all scalar literals is folded to a literal,
  - equations whose results are unused are removed (pure IR: nothing has effects),
  - unused results of cond and loop are pruned by their prune rules (via dce).
Each rewrite is one named rule; the pass runs to a fixpoint capped at MAX_ROUNDS.
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.interp import eval_func

MAX_ROUNDS = 4


def _is(a: Atom, value) -> bool:
    return isinstance(a, Lit) and a.value == value and not isinstance(a.value, bool)


def _shape_ok(a: Atom, out: Var) -> bool:
    return a.type == out.type


def rewrite(eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """A replacement atom for eqn's single output, or None. Each rule states its algebra."""
    name, out = eqn.prim.name, eqn.outs[0]
    if name == "add":  # x + 0 = x
        for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
            if _is(b, 0) and _shape_ok(a, out):
                return a
    if name == "sub" and _is(ins[1], 0) and _shape_ok(ins[0], out):  # x - 0 = x
        return ins[0]
    if name == "mul":
        for a, b in ((ins[0], ins[1]), (ins[1], ins[0])):
            if _is(b, 1) and _shape_ok(a, out):  # x * 1 = x
                return a
            if _is(b, 0) and out.type.is_float:  # x * 0 = 0 (AD zeros; x is finite where it matters)
                return Lit(0, out.type)
    if name == "div" and _is(ins[0], 0) and out.type.is_float:  # 0 / x = 0
        return Lit(0, out.type)
    if name == "neg" and isinstance(ins[0], Lit) and ins[0].value == 0:  # -0 = 0
        return Lit(0, out.type)
    if name == "select" and ins[1] == ins[2] and _shape_ok(ins[1], out):  # select(p, a, a) = a
        return ins[1]
    if name in ("broadcast_to", "reshape") and isinstance(ins[0], Lit):  # a splat stays a splat
        return Lit(ins[0].value, out.type)
    return None


def fold(eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """Evaluate an elementwise equation on scalar literals."""
    if not eqn.prim.elementwise or len(eqn.outs) != 1 or not all(isinstance(a, Lit) for a in ins):
        return None
    if any(a.type.rank for a in ins) or eqn.outs[0].type.rank:
        return None
    b = Builder()
    ps = [Var(a.type) for a in ins]
    outs = b.bind(eqn.prim, ps, dict(eqn.params))
    value = eval_func(b.func("fold", ps, outs), [np.asarray(a.value) for a in ins])[0]
    return Lit(value.item(), eqn.outs[0].type)


def simplify_once(f: Func) -> Func:
    """One forward sweep of rewrites and folding, recursing into sub-functions."""
    b = Builder()
    params = [Var(p.type, p.hint) for p in f.params]
    env: dict[Var, Atom] = dict(zip(f.params, params))
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    for eqn in f.eqns:
        ins = [read(a) for a in eqn.ins]
        if len(eqn.outs) == 1:
            new = rewrite(eqn, ins) or fold(eqn, ins)
            if new is not None:
                env[eqn.outs[0]] = new
                continue
        sub = {k: simplify(v) if isinstance(v, Func) else v for k, v in eqn.params.items()}
        b.loc = eqn.loc
        env.update(zip(eqn.outs, b.bind(eqn.prim, ins, sub)))
    return b.func(f.name, params, [read(r) for r in f.results], f.result_names)


def simplify(f: Func) -> Func:
    """Rewrite to a fixpoint (at most MAX_ROUNDS sweeps), then remove dead code."""
    from .dce import dce

    for _ in range(MAX_ROUNDS):
        g = dce(simplify_once(f))
        if len(g.eqns) == len(f.eqns):
            return g
        f = g
    return f
