"""jvp: forward-mode differentiation, an interpreter that calls each primitive's jvp rule.

Requires: a verified Func. Guarantees: a Func whose params are the primals followed by one
tangent per differentiable input, and whose results are the primal results followed by one
tangent per float result (zeros instantiated). A tangent of None inside is a symbolic zero. An equation with no
float result is bound as it is, as one with no tangent operand is: its prim's jvp rule runs only when a tangent goes
in and a float result comes out.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import in_rule, located, rule
from ..ir.builder import Builder
from ..ir.core import Atom, Func, Var
from ..prims.common import zeros
from .nonfinite import mask_nonfinite
from .sink import sink


def jvp_eqns(b: Builder, f: Func, primals: Sequence[Atom], tangents: Sequence[Atom | None]):
    """Append the jvp of f's body to b; return (primal results, tangent results or None)."""
    env: dict[Var, Atom] = dict(zip(f.params, primals))
    tenv: dict[Var, Atom | None] = dict(zip(f.params, tangents))

    def read(a: Atom) -> Atom:
        return env[a] if isinstance(a, Var) else a

    def tread(a: Atom) -> Atom | None:
        return tenv.get(a) if isinstance(a, Var) else None

    for eqn in f.eqns:
        ins, tins = [read(a) for a in eqn.ins], [tread(a) for a in eqn.ins]
        b.loc = eqn.loc
        if all(t is None for t in tins) or not any(v.type.is_float for v in eqn.outs):
            # (no tangent comes in, or none goes out: an integer or bool result has no tangent)
            outs, touts = b.bind(eqn.prim, ins, dict(eqn.params)), [None] * len(eqn.outs)
        else:
            with located(eqn.loc), in_rule(eqn, "jvp"):
                outs, touts = rule(eqn.prim, "jvp")(b, ins, tins, **eqn.params)
        b.name_like(outs, eqn.outs)
        b.name_like(touts, eqn.outs, "d")
        for v, o, t in zip(eqn.outs, outs, touts):
            env[v] = o
            tenv[v] = t if v.type.is_float else None
    return [read(r) for r in f.results], [tread(r) for r in f.results]


def tangent_mask(types) -> list[bool]:
    """Which values of these types carry a tangent: the float ones."""
    return [t.is_float for t in types]


_depth = [0]  # how many jvp_funcs are under way: the innermost ones (an if's branches, a loop's body) are not masked


def jvp_func(f: Func, has_tangent: Sequence[bool] | None = None, name: str | None = None) -> Func:
    """The jvp of f: (primals, tangents of inputs with has_tangent) -> (results, tangents of float results)."""
    _depth[0] += 1
    try:
        out = _jvp_func(f, has_tangent, name)
    finally:
        _depth[0] -= 1
    # a (co)tangent times a value that may be inf or nan is 0 where the (co)tangent is (transforms/nonfinite.py):
    # decided once on the whole program, where a branch's params are known from the operands of its if
    return out if _depth[0] else mask_nonfinite(out)


def _jvp_func(f: Func, has_tangent: Sequence[bool] | None, name: str | None) -> Func:
    has_tangent = list(has_tangent if has_tangent is not None else tangent_mask(f.in_types))
    b = Builder()
    primals = [Var(p.type, p.hint) for p in f.params]
    tparams = [Var(p.type, "d" + p.hint if p.hint else "") for p, h in zip(f.params, has_tangent) if h]
    it = iter(tparams)
    tangents = [next(it) if h else None for h in has_tangent]
    outs, touts = jvp_eqns(b, f, primals, tangents)
    tres = [t if t is not None else zeros(o.type) for o, t in zip(outs, touts) if o.type.is_float]
    names = tuple(f.result_names) + tuple("d" + n for n, o in zip(f.result_names, outs) if o.type.is_float)
    # what only one branch of an if reads is computed there: the other branch's zero tangent is then a symbolic
    # zero, never a 0 * nan with a value that branch did not need (transforms/sink.py)
    return sink(b.func(name or f"jvp_{f.name}", primals + tparams, outs + tres, names if f.result_names else ()))
