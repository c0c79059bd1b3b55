"""transpose: turn a function linear in some inputs into its adjoint (reverse mode).

Requires: f linear in the params marked in `linear` (every equation touching a linear value
has a transpose rule). Guarantees: f_T(nonlinear params, one cotangent per result) ->
one cotangent per linear param (zeros instantiated); with `accumulate`, f_T also takes a
starting cotangent per linear param and returns start + cotangent.

Cotangents of a value read by several equations are summed. A prim whose record says
`accumulates` (a loop) is handed the sum so far and returns the new sum: a loop nested in a
loop then adds into one gradient buffer instead of zeroing and adding a fresh one per run.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import KsbuildError, in_rule, located
from ..ir.builder import Builder
from ..ir.core import Atom, Func, Var
from ..prims.common import add_cts, zeros


def transpose_eqns(b: Builder, f: Func, linear: Sequence[bool], nonlin_args: Sequence[Atom],
                   cts_out: Sequence[Atom | None], start: Sequence[Atom | None] | None = None) -> list[Atom | None]:
    """Append the adjoint of f to b; return the cotangents of f's linear params (None = zero),
    plus `start` (one starting cotangent per linear param) if given."""
    env: dict[Var, Atom] = {}
    it = iter(nonlin_args)
    lin: set[Var] = set()
    ct: dict[Var, Atom | None] = {}
    starts = iter(start or [])
    for p, is_lin in zip(f.params, linear):
        if is_lin:
            lin.add(p)
            ct[p] = next(starts, None)
        else:
            env[p] = next(it)

    def read(a: Atom) -> Atom:
        return env.get(a, a) if isinstance(a, Var) else a

    linear_eqns = []
    for eqn in f.eqns:  # forward: replay what does not depend on linear inputs
        if any(isinstance(a, Var) and a in lin for a in eqn.ins):
            linear_eqns.append(eqn)
            lin.update(eqn.outs)
        else:
            b.loc = eqn.loc
            env.update(zip(eqn.outs, b.bind(eqn.prim, [read(a) for a in eqn.ins], dict(eqn.params))))

    for r, c in zip(f.results, cts_out):
        if isinstance(r, Var) and r in lin:
            ct[r] = add_cts(b, ct.get(r), c)
    for eqn in reversed(linear_eqns):
        couts = [ct.pop(v, None) for v in eqn.outs]
        if all(c is None for c in couts):
            continue
        if eqn.prim.transpose is None:
            raise KsbuildError(f"internal: '{eqn.prim.name}' appears in a linear position but is not linear",
                               eqn.loc)
        mask = [isinstance(a, Var) and a in lin for a in eqn.ins]
        b.loc = eqn.loc
        if eqn.prim.accumulates:
            with located(eqn.loc), in_rule(eqn, "transpose"):
                _transpose_accumulating(b, eqn, couts, [read(a) for a in eqn.ins], mask, ct)
            continue
        with located(eqn.loc), in_rule(eqn, "transpose"):
            cins = eqn.prim.transpose(b, couts, [read(a) for a in eqn.ins], mask, **eqn.params)
        for a, m, c in zip(eqn.ins, mask, cins):
            if m and c is not None:
                ct[a] = add_cts(b, ct.get(a), c)
                b.name(ct[a], cotangent_name(a.hint))
    return [ct.get(p) for p, is_lin in zip(f.params, linear) if is_lin]


def _transpose_accumulating(b: Builder, eqn, couts, ins, mask, ct: dict) -> None:
    """Transpose eqn handing it each linear operand's cotangent so far; it returns the new sums."""
    first = [m and not any(a is x for x in eqn.ins[:i]) for i, (a, m) in enumerate(zip(eqn.ins, mask))]
    acc = [ct.pop(a, None) if f else None for a, f in zip(eqn.ins, first)]
    cins = eqn.prim.transpose(b, couts, ins, mask, **eqn.params, acc=acc)
    for a, f, c in zip(eqn.ins, first, cins):
        if f and c is not None:
            ct[a] = c
    for a, m, f, c in zip(eqn.ins, mask, first, cins):  # an operand read twice: its second cotangent
        if m and not f and c is not None:
            ct[a] = add_cts(b, ct.get(a), c)


def transpose_func(f: Func, linear: Sequence[bool], name: str | None = None, accumulate: bool = False) -> Func:
    """The adjoint of f with respect to its linear params: f_T(nonlinear params, cotangents of the
    results[, starting cotangents of the linear params if accumulate]) -> cotangents of the linear params."""
    b = Builder()
    nonlin = [Var(p.type, p.hint) for p, is_lin in zip(f.params, linear) if not is_lin]
    ctp = [Var(r.type, "ct") for r in f.results]
    lin_params = [p for p, is_lin in zip(f.params, linear) if is_lin]
    start = [Var(p.type, "acc") for p in lin_params] if accumulate else []
    cts = transpose_eqns(b, f, linear, nonlin, ctp, start)
    results = [c if c is not None else zeros(p.type) for p, c in zip(lin_params, cts)]
    return b.func(name or f"transpose_{f.name}", nonlin + ctp + start, results)


def cotangent_name(hint: str) -> str:
    """d_x for the cotangent of x; the linear vars of a linearized function are tangents named dx."""
    if not hint:
        return ""
    return "d_" + (hint[1:] if hint.startswith("d") and len(hint) > 1 else hint)
