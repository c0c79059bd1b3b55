"""gather_early: compute only the rows that a gather reads.

Requires: a Func before select_backend (einsums, not contracts). Guarantees: the same function, where a
`y = gather[axis](x, idx)` whose operand x is read by nothing else and made by an equation that works
position by position along that axis (the prim's `along` rule: elementwise work, einsums that keep the axis'
letter, views that keep the axis) reads the positions idx of that equation's operands instead:
    gather(f(a, b), idx) = f(gather(a, idx), b)    (b read whole along the axis: a weight, a broadcast row)
    take(matmul(A, B), idx) = matmul(take(A, idx), B)
recursively through the operands that are in turn read only there. The equations then compute len(idx)
positions instead of x.shape[axis]; those that made x are left dead (dce removes them). Indices are clamped
into range by every gather, and every operand taken has x's length along its axis, so the values are the same.

A call that is not kept as a function of its own (kept_call: one with tensors, which the C++ writes in place as
a block anyway) is opened when a gather alone reads one of its results: the callee's body replaces it, and the
gather moves into that body as into any other work.

A gather that reads as many positions as x has or more (len(idx) >= x.shape[axis], also n of n: a
permutation) would compute as much or more; it stays, as does one of views only (no work to save). When the
sizes are symbolic the choice is made when the function runs: a `cond` computes the narrowed work when
len(idx) < x.shape[axis] and the original work otherwise (both are in the code).

Why: a derivative (jacfwd, jvp) pushes tangents through everything its primal computed, also through the rows
a later gather throws away. GradBench's hand tracking poses all 10 000 vertices of a hand, then reads the
100-200 that correspond to points; its forward Jacobian in 26 directions skinned every vertex 26 times.
"""
from __future__ import annotations

from ..ir.builder import Builder, inline
from ..ir.core import Atom, Eqn, Func, Lit, Var, freeze
from ..ir.types import Type, dim_sub, numel
from ..prims.base import PRIMS, broadcast_along, resized
from ..prims.control import fresh_copy, kept_call
from .dce import dce
from .rewrite import use_counts


def gather_early(f: Func) -> Func:
    """f with each gather from position-wise work moved before that work (sub-functions too)."""
    return _early(f, {})


def along_rule(eqn: Eqn, axis: int, n):
    """(params with the axis n long, the operands' axes) when eqn works position by position along its output's
    axis, else None."""
    if len(eqn.outs) != 1 or any(isinstance(v, Func) for v in eqn.params.values()):
        return None
    if eqn.prim.along is not None:
        return eqn.prim.along(eqn, axis, n)
    if eqn.prim.elementwise and not eqn.prim.positional:  # (iota's value is its position)
        return broadcast_along(eqn, axis, n)
    return None


def _early(f: Func, memo: dict) -> Func:
    if id(f) in memo:
        return memo[id(f)][1]
    f0, f = f, _open_gathered_calls(f)
    made = {v: e for e in f.eqns for v in e.outs}
    order = {id(e): i for i, e in enumerate(f.eqns)}
    reads = use_counts(f)
    out: list[Eqn] = []
    for e in f.eqns:
        e = _inside(e, memo)
        region = _region(e, made, reads) if e.prim is PRIMS["gather"] else None
        if region is None:
            out.append(e)
        elif _fewer(*_sizes(e)):
            out += _narrowed(e, region)
        else:
            original = sorted((q for q, _ in region.values()), key=lambda q: order[id(q)])
            out += _guarded(e, _narrowed(e, region), original)
    if f is f0 and len(out) == len(f.eqns) and all(a is b for a, b in zip(out, f.eqns)):
        memo[id(f)] = (f, f)
        return f
    g = dce(Func(f.name, f.params, tuple(out), f.results, f.result_names))
    g = Func(g.name, g.params, g.eqns, g.results, f.result_names, f.plan, f.notes, f.defaults)
    memo[id(f0)] = (f0, g)  # (f0 kept alive with its id)
    return g


def _open_gathered_calls(f: Func) -> Func:
    """f with each call that is not kept as a function (kept_call: one with tensors, which the C++ writes as a
    block in place anyway) replaced by its callee's body where a gather alone reads one of its results, so that
    the gather can move into that body."""
    reads = use_counts(f)
    made = {v: e for e in f.eqns for v in e.outs}
    opened = {id(made[g.ins[0]]) for g in f.eqns if g.prim is PRIMS["gather"] and isinstance(g.ins[0], Var)
              and reads.get(g.ins[0]) == 1 and g.ins[0] in made and _opens(made[g.ins[0]])}
    if not opened:
        return f
    b = Builder()
    env: dict[Var, Atom] = {}
    for e in f.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.ins]
        if id(e) in opened:
            env.update(zip(e.outs, inline(b, fresh_copy(e.params["fn"]), ins)))
        else:
            b.eqns.append(Eqn(e.prim, tuple(ins), e.outs, e.params, e.loc))
    res = tuple(env.get(r, r) if isinstance(r, Var) else r for r in f.results)
    return Func(f.name, f.params, tuple(b.eqns), res, f.result_names, f.plan, f.notes, f.defaults)


def _opens(e: Eqn) -> bool:
    return e.prim is PRIMS["call"] and not kept_call(e)


def _inside(e: Eqn, memo: dict) -> Eqn:
    """e with its sub-functions narrowed."""
    subs = {k: v for k, v in e.params.items() if isinstance(v, Func)}
    if not subs:
        return e
    new = {k: _early(v, memo) for k, v in subs.items()}
    if all(new[k] is v for k, v in subs.items()):
        return e
    return Eqn(e.prim, e.ins, e.outs, freeze(dict(e.params, **new)), e.loc)


def _region(g: Eqn, made: dict, reads: dict):
    """The position-wise equations whose rows the gather g reads (each read by nothing else), as a dict
    var -> (its equation, the axis holding the positions); None when there are none or it would not pay."""
    x, idx = g.ins
    axis = g.params["axis"]
    if not isinstance(x, Var) or _fewer(*_sizes(g)) is False:
        return None
    region: dict[Var, tuple[Eqn, int]] = {}
    todo = [(x, axis)]
    while todo:
        v, k = todo.pop()
        e = made.get(v)
        if e is None or reads.get(v, 0) != 1 or along_rule(e, k, 1) is None:
            continue
        region[v] = (e, k)
        _, axes = along_rule(e, k, 1)
        todo += [(a, ak) for a, ak in zip(e.ins, axes) if ak is not None and isinstance(a, Var)]
    if all(e.prim.view for e, _ in region.values()):  # (views of x only: no work to save)
        return None
    return region


def _sizes(g: Eqn) -> tuple:
    """(how many positions the gather g reads, how many its operand has along the axis)."""
    x, idx = g.ins
    return numel(idx.type.shape), x.type.shape[g.params["axis"]]


def _fewer(count, rows) -> bool | None:
    """Whether count positions are fewer than rows; None when that depends on the symbolic sizes (n against n
    is known: a permutation x[perm] reads as many positions as there are)."""
    difference = dim_sub(count, rows)
    return difference < 0 if isinstance(difference, int) else None


def _guarded(g: Eqn, narrowed: list[Eqn], original: list[Eqn]) -> list[Eqn]:
    """g's var from a cond: the narrowed equations when the gather reads fewer positions than its operand has,
    else the original ones (the region's equations, then g)."""
    b = Builder(g.loc)
    count, rows = (b.dim_size(dim=d) if not isinstance(d, int) else Lit(d, Type("i64")) for d in _sizes(g))
    fewer = b.lt(count, rows)
    made = {v for e in narrowed + original for v in e.outs}
    free = list(dict.fromkeys(a for e in narrowed + original + [g] for a in e.ins
                              if isinstance(a, Var) and a not in made))
    branches = {key: fresh_copy(Func(key, tuple(free), tuple(eqns), g.outs))
                for key, eqns in (("then_fn", narrowed), ("else_fn", original + [g]))}
    return b.eqns + [Eqn(PRIMS["cond"], (fewer, *free), g.outs, freeze(branches), g.loc)]


def _narrowed(g: Eqn, region: dict) -> list[Eqn]:
    """The equations computing g's result (its var) from the region's operands taken at idx (flattened to one
    axis)."""
    x, idx = g.ins
    n = numel(idx.type.shape)
    new: list[Eqn] = []
    if idx.type.rank != 1:
        flat = Var(Type(idx.type.dtype, (n,)), idx.hint if isinstance(idx, Var) else "")
        new.append(Eqn(PRIMS["reshape"], (idx,), (flat,), freeze({"shape": (n,)}), g.loc))
        idx = flat

    def taken(a: Atom, k: int) -> Atom:
        if isinstance(a, Lit):
            return Lit(a.value, a.type.with_shape(resized(a.type.shape, k, n)))
        if a not in region:
            v = Var(a.type.with_shape(resized(a.type.shape, k, n)), f"{a.hint}_taken" if a.hint else "taken")
            new.append(Eqn(PRIMS["gather"], (a, idx), (v,), freeze({"axis": k}), g.loc))
            return v
        e, _ = region[a]
        params, axes = along_rule(e, k, n)
        ins = tuple(b if bk is None else taken(b, bk) for b, bk in zip(e.ins, axes))
        (t,) = e.prim.type_rule([b.type for b in ins], **params)
        v = Var(t, e.outs[0].hint)
        new.append(Eqn(e.prim, ins, (v,), freeze(params), e.loc))
        return v

    y = taken(x, g.params["axis"])
    (out,) = g.outs
    if y.type == out.type:  # the last equation (it made y) makes g's var instead
        last = new.pop()
        new.append(Eqn(last.prim, last.ins, (out,), last.params, last.loc))
    else:  # (an index of several axes was flattened: its axes back)
        new.append(Eqn(PRIMS["reshape"], (y,), (out,), freeze({"shape": out.type.shape}), g.loc))
    return new
