"""fuse: group elementwise equations into loop nests.

Requires: a Func after the transformations (no fusion yet). Guarantees: each elementwise
equation with a tensor result is first moved down to just before its first reader (`sink`), so a
value recomputed in the reverse pass (2·x of d(x²)) joins the loop that reads it; then every maximal run of
consecutive elementwise equations (or `fusible` ones: a gather from a 1-D table) with the same
tensor result shape S is one `fusion` equation, together with the reductions that directly follow
it over a suffix of S's axes (all over the same axes); consecutive reductions over a suffix of their
operand's axes also form a fusion of their own. The fusion's body holds those equations; its results
are the values read after the run. Every elementwise equation with a tensor result is in a fusion.
"""
from __future__ import annotations

from typing import Sequence

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Var
from ..prims.lowering import fusion
from .rewrite import use_counts


def fuse(f: Func) -> Func:
    """f (and every body nested in it) with its elementwise runs fused."""
    memo: dict[int, Func] = {}
    return _fuse(f, memo)


def _fuse(f: Func, memo: dict[int, Func]) -> Func:
    if id(f) in memo:
        return memo[id(f)]
    eqns = sink([_recursed(e, memo) for e in f.eqns], f.results)
    b = Builder()
    env: dict[Var, Atom] = {}
    i = 0
    while i < len(eqns):
        j = run_end(eqns, i)
        if j == i:
            e = eqns[i]
            b.eqns.append(Eqn(e.prim, tuple(_read(env, a) for a in e.ins), e.outs, e.params, e.loc))
            i += 1
            continue
        later = eqns[j:]
        _bind_fusion(b, env, eqns[i:j], later, f.results)
        i = j
    memo[id(f)] = b.func(f.name, list(f.params), [_read(env, r) for r in f.results], f.result_names)
    return memo[id(f)]


def sink(eqns: Sequence[Eqn], results: Sequence[Atom]) -> list[Eqn]:
    """The equations in an order where each fusible one comes right before its first reader
    (readers keep their relative order; unread fusible equations are dropped as dead). What only the function's
    results read, when it is one loop nest (one region shape), keeps the order it was written in: a jvp's results
    z and dz are computed step by step together, z_k then dz_k, as its rules wrote them, not the whole z chain
    first (whose values would all be live until the dz chain reads them: 1.7 times slower on a 200-step helper,
    docs/architecture.md "Calls")."""
    pending: dict[Var, Eqn] = {}
    order: list[Eqn] = []

    def need(atoms) -> None:
        stack = [(a, False) for a in reversed(list(atoms))]
        while stack:
            a, ready = stack.pop()
            if ready:
                order.append(a)
            elif isinstance(a, Var) and a in pending:
                e = pending.pop(a)
                stack.append((e, True))
                stack.extend((x, False) for x in reversed(e.ins))

    produced = {v for e in eqns for v in e.outs}
    pulled: set[int] = set()
    for i, e in enumerate(eqns):
        if id(e) in pulled:
            continue
        if region_shape(e) is not None and len(e.outs) == 1:
            pending[e.outs[0]] = e
            continue
        need(e.ins)
        if _suffix_reduction(e, e.ins[0].type.shape if e.ins else (), None):
            for sibling in _siblings(e, eqns[i + 1:], produced, order):
                pulled.add(id(sibling))
                order.append(sibling)
        order.append(e)
    position = {id(e): i for i, e in enumerate(eqns)}
    tail = len(order)
    need(results)
    if len({region_shape(e) for e in order[tail:]}) == 1:  # (the written order is topological)
        order[tail:] = sorted(order[tail:], key=lambda e: position[id(e)])
    return order


def _siblings(reduction: Eqn, later: Sequence[Eqn], produced: set, order: list) -> list[Eqn]:
    """Later fusible equations of the reduction's operand shape that read that operand and only values already
    computed, when they are all its later readers and what they compute is stored anyway (no fusible equation
    reads it): moved right before the reduction, they join its loop (the reverse pass of a loop reads its
    cotangent y for Σ y and for y · t, a carry: one pass over y instead of two)."""
    operand = reduction.ins[0]
    done = {v for e in order for v in e.outs}
    readers = [e for e in later if operand in e.ins]
    pulled = [e for e in readers if len(e.outs) == 1 and region_shape(e) == operand.type.shape
              and all(not isinstance(a, Var) or a not in produced or a in done for a in e.ins)
              and not any(e.outs[0] in r.ins and region_shape(r) is not None for r in later)]
    return pulled if len(pulled) == len(readers) else []  # (another pass reads it anyway: nothing to gain)


def _recursed(e: Eqn, memo) -> Eqn:
    if not any(isinstance(v, Func) for v in e.params.values()):
        return e
    params = {k: _fuse(v, memo) if isinstance(v, Func) else v for k, v in e.params.items()}
    return Eqn(e.prim, e.ins, e.outs, params, e.loc)


def region_shape(e: Eqn):
    """The loop-nest shape an equation fuses into, or None if it is not fusible."""
    if (e.prim.elementwise or (e.prim.fusible is not None and e.prim.fusible(e))) and e.outs[0].type.rank > 0:
        return e.outs[0].type.shape
    return None


def run_end(eqns: Sequence[Eqn], i: int) -> int:
    """The end of the run of fusible equations starting at i (i itself when eqns[i] is not fusible)."""
    shape = region_shape(eqns[i])
    if shape is None and _suffix_reduction(eqns[i], eqns[i].ins[0].type.shape if eqns[i].ins else (), None):
        shape = eqns[i].ins[0].type.shape  # a run of reductions only
    if shape is None:
        return i
    j, made = i, set()
    while j < len(eqns) and region_shape(eqns[j]) == shape:
        e = eqns[j]
        if not e.prim.elementwise and e.ins and e.ins[0] in made:  # a gather from a table the run computes
            break  # (it reads the table at other elements: the table must be whole first)
        made.update(e.outs)
        j += 1
    axes = None
    while j < len(eqns) and _suffix_reduction(eqns[j], shape, axes):
        axes = eqns[j].params["axes"]
        j += 1
    return j


def _suffix_reduction(e: Eqn, shape, axes) -> bool:
    """A sum/max/min of a value of the run's shape over trailing axes (the same as earlier ones)."""
    if not e.prim.reduction or e.ins[0].type.shape != shape:
        return False
    ax = tuple(e.params["axes"])
    suffix = bool(ax) and ax == tuple(range(len(shape) - len(ax), len(shape)))
    return suffix and (axes is None or tuple(axes) == ax)


def _read(env: dict, a: Atom) -> Atom:
    return env.get(a, a) if isinstance(a, Var) else a


def _bind_fusion(b: Builder, env: dict, group: list[Eqn], later: list[Eqn], results) -> None:
    """Append one fusion equation for `group`; later reads of its values go to the fusion's outputs."""
    defined = {v for e in group for v in e.outs}
    outer: list[Var] = []
    for e in group:
        for a in e.ins:
            if isinstance(a, Var) and a not in defined and a not in outer:
                outer.append(a)
    read_later = set(use_counts(Func("", (), tuple(later), tuple(results))))
    escaping = [v for e in group for v in e.outs if v in read_later]
    if not escaping:
        return
    params = [Var(v.type, v.hint) for v in outer]
    inner = dict(zip(outer, params))
    body_eqns = [Eqn(e.prim, tuple(_read(inner, a) for a in e.ins), e.outs, e.params, e.loc) for e in group]
    body = Func("fused", tuple(params), tuple(body_eqns), tuple(escaping))
    b.loc = group[0].loc
    outs = b.bind(fusion, [_read(env, v) for v in outer], {"body": body})
    named = tuple(Var(o.type, v.hint) for o, v in zip(outs, escaping))
    last = b.eqns[-1]
    b.eqns[-1] = Eqn(last.prim, last.ins, named, last.params, last.loc)
    env.update(zip(escaping, named))
