"""sink: compute a value that only one branch of an if reads inside that branch.

Requires: a Func. Guarantees: the same function, where every equation whose results are read by nothing but
the operands of one if (a prim with `sinks`: cond, cond_select) that at most one of its branches reads is moved
into that branch (recursively: what it alone reads follows it; sub-functions too).

Used on derivative programs (linearize, jvp). A derivative computed before an if for the branch that is not
taken meets a zero (co)tangent there: `t = tanh(sqrt(x)); return t if y > 0 else y` at x = -1 has t = nan,
and the zero cotangent of t times tanh'(nan) made d/dx nan where torch, which only differentiates what the
result reads, gives 0. Inside the branch, the transpose of the other branch gives a symbolic zero that is
never multiplied (docs/ad-correctness.md). A scalar if is a C++ if, so the moved work runs only where it is
needed; an if-expression becomes both sides and a select, which computes the same work as before.
"""
from __future__ import annotations

from ..ir.builder import Builder, inline
from ..ir.core import Eqn, Func, Var, freeze
from .dce import dce


def sink(f: Func) -> Func:
    """f with what only one branch of an if reads computed in that branch (sub-functions too)."""
    return _sink(dce(f), {})  # a dead reader (a tangent nothing uses) would keep a value out of the branch


def _sink(f: Func, memo: dict) -> Func:
    """f sunk; a sub-function shared by several equations (two calls of one callee) is sunk once and stays shared
    (two copies would define the same variables twice)."""
    if id(f) in memo:
        return memo[id(f)][1]
    eqns: list[Eqn | None] = list(f.eqns)
    readers = _readers(eqns, f.results)
    index = {id(e): k for k, e in enumerate(eqns)}
    retired = []  # equations replaced here, kept alive so that their ids are not reused
    for i in range(len(eqns) - 1, -1, -1):
        j = _sole_branch_reader(eqns, i, readers, index)
        if j is None:
            continue
        moved, host = eqns[i], eqns[j]
        retired += [moved, host]
        eqns[j], eqns[i] = _absorb(host, moved), None
        index[id(eqns[j])] = j
        for a in host.ins + moved.ins:  # the vars the new if reads: the old if's and the moved equation's
            if isinstance(a, Var):
                readers[a] = (readers[a] - {id(moved), id(host)}) | {id(eqns[j])}
    body = tuple(_sink_inside(e, memo) for e in eqns if e is not None)
    out = Func(f.name, f.params, body, f.results, f.result_names, f.plan, f.notes, f.defaults)
    memo[id(f)] = (f, out)  # (f kept alive with its id)
    return out


def _readers(eqns, results) -> dict[Var, set]:
    """For each var, the ids of the equations that read it ("result" when f returns it)."""
    readers: dict[Var, set] = {}
    for e in eqns:
        for a in e.ins:
            if isinstance(a, Var):
                readers.setdefault(a, set()).add(id(e))
    for r in results:
        if isinstance(r, Var):
            readers.setdefault(r, set()).add("result")
    return readers


def _sole_branch_reader(eqns, i: int, readers, index) -> int | None:
    """The index of the if that alone reads eqns[i]'s results, as operands that only one branch reads."""
    e = eqns[i]
    if e.prim.branches and not e.prim.sinks:
        return None
    ids = set().union(*(readers.get(v, set()) for v in e.outs))
    if len(ids) != 1 or "result" in ids:
        return None
    (rid,) = ids
    j = index.get(rid)
    host = eqns[j] if j is not None else None
    if host is None or id(host) != rid or not host.prim.sinks or host.ins[0] in e.outs:
        return None
    slots = [k for k, a in enumerate(host.ins[1:]) if a in e.outs]
    sides = [any(_reads(host.params[b], host.params[b].params[k]) for k in slots) for b in ("then_fn", "else_fn")]
    return j if sides.count(True) <= 1 else None  # (read by neither: it is dead once moved)


def _reads(f: Func, v: Var) -> bool:
    return any(v is a for q in f.eqns for a in q.ins) or any(v is r for r in f.results)


def _absorb(host: Eqn, moved: Eqn) -> Eqn:
    """host (an if) with moved computed at the start of both branches from moved's operands (dead code is then
    removed from the branch that does not read it)."""
    ops = list(host.ins[1:])
    keep = [k for k, a in enumerate(ops) if a not in moved.outs]
    new_ops = list(dict.fromkeys(a for a in moved.ins if isinstance(a, Var)))
    params = dict(host.params)
    for key in ("then_fn", "else_fn"):
        params[key] = dce(_branch_with(host.params[key], ops, keep, moved, new_ops))
    ins = (host.ins[0], *[ops[k] for k in keep], *new_ops)
    return Eqn(host.prim, ins, host.outs, freeze(params), host.loc)


def _branch_with(fn: Func, ops, keep, moved: Eqn, new_ops) -> Func:
    """fn taking the kept operands and moved's operands, computing moved's results first."""
    b = Builder(moved.loc)
    kept = [Var(fn.params[k].type, fn.params[k].hint) for k in keep]
    fresh = [Var(a.type, a.hint) for a in new_ops]
    env = dict(zip(new_ops, fresh))
    outs = b.bind(moved.prim, [env.get(a, a) if isinstance(a, Var) else a for a in moved.ins], dict(moved.params))
    b.name_like(outs, moved.outs)
    made = dict(zip(moved.outs, outs))
    args = [made[a] if a in made else None for a in ops]
    for k, v in zip(keep, kept):
        args[k] = v
    res = inline(b, fn, args)
    return b.func(fn.name, kept + fresh, res, fn.result_names)


def _sink_inside(e: Eqn, memo: dict) -> Eqn:
    subs = {k: v for k, v in e.params.items() if isinstance(v, Func)}
    if not subs:
        return e
    return Eqn(e.prim, e.ins, e.outs, freeze(dict(e.params, **{k: _sink(v, memo) for k, v in subs.items()})), e.loc)
