"""reroll: a run of repetitions of the same equations becomes one `loop` (the inverse of unroll).

torch.export runs a model's Python loops while it traces, so `for t in range(T)` reaches the IR as T copies
of the loop body: the C++ then has T copies too (ADBench's LSTM at c = 1024 characters: ~94k equations).
This pass finds such copies in a straight-line function and puts a `loop` back.

Requires: a Func (the torch.export frontend's, before any transformation). Guarantees: the same values.
A run of k >= 2 consecutive blocks of p equations is replaced by loop(k) over one block when:
- every block has the same prims, params and types, equation by equation (`_signature`);
- every operand of block r is read the same way in every block: a value of the same block (same
  position), of the block before (same position: a carried value, whose first block reads the
  initial value from before the run), a value from before the run (the same in every block: a loop
  constant) or a literal (the same in every block);
- an integer literal may advance arithmetically, v0 + r s in block r, only where it is the position a prim
  takes a row at (its record's fact `takes == ()`: index, index_set, index_add, whose scalar positions are
  run-time operands, clamped into range); there the body computes it from the counter;
- no block reads a block two or more before it (the run is cut where one does; a first block that differs
  from the others, or whose initial carries are not values from before the run or scalar literals, is
  left before the loop);
- k and p are beyond what the unroll pass would unroll again (unroll.MAX_TRIPS / MAX_EQNS).
Values read after the run become the loop's final carries (the last block's carried values) or rows of
its stacked outputs (any other block's value: `index(ys, r)`). Bodies are rerolled in turn (nested loops).
When a check fails the blocks stay as they are: correctness first.

How runs are found (`find_runs`): each equation gets a signature id (prim, params, operand kinds and types,
result types; an advancing literal's value left out). Candidate periods are the distances between
consecutive occurrences of the same 4 signatures in a row (the most frequent ones); for a period p the
stretches where sig[i] == sig[i + p] for at least p equations are periodic, of floor(len / p) + 1 blocks.
The largest stretches are checked first and the runs kept do not overlap.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.types import Type
from . import unroll

MAX_PERIODS = 16  # candidate periods tried per function
GRAM = 4  # signatures in a row that locate a repetition


@dataclass(frozen=True)
class Run:
    """Blocks eqns[start + r * period : start + (r + 1) * period] for r < count repeat one another."""

    start: int
    period: int
    count: int

    @property
    def stop(self) -> int:
        return self.start + self.period * self.count


def reroll(f: Func) -> Func:
    """f with every run of repeated equations found by find_runs made a loop (bodies rerolled too)."""
    runs = find_runs(f)
    if not runs:
        return f
    return _rolled(f, runs)


def find_runs(f: Func) -> list[Run]:
    """The runs of f's top-level equations that reroll makes loops, in order, not overlapping."""
    eqns = f.eqns
    sigs = _signature_ids(eqns)
    graph = _Graph(f)
    kept: list[Run] = []
    for cand in sorted(_periodic_stretches(sigs), key=lambda r: -r.period * r.count):
        if any(cand.start < k.stop and k.start < cand.stop for k in kept):
            continue
        run = _checked(graph, cand)
        if run is not None:
            kept.append(run)
    return sorted(kept, key=lambda r: r.start)


# ---- signatures and periodic stretches ----------------------------------------------------------------

def _dynamic(e: Eqn, q: int) -> bool:
    """True if operand q of e is an integer literal that may become a run-time value: a scalar position."""
    a = e.ins[q]
    return isinstance(a, Lit) and e.prim.takes == () and q >= 1 and a.type.dtype in ("i32", "i64") \
        and a.type.is_scalar


def _signature(e: Eqn):
    """What two repetitions of an equation share: prim, params, the kinds and types of operands, result types."""
    ops = tuple(("v", a.type) if isinstance(a, Var) else ("i", a.type) if _dynamic(e, q)
                else ("l", a.type, repr(a.value)) for q, a in enumerate(e.ins))
    key = (e.prim.name, tuple(sorted(e.params.items())), ops, tuple(v.type for v in e.outs))
    try:
        hash(key)
    except TypeError:
        return ("unique", id(e))
    return key


def _signature_ids(eqns) -> np.ndarray:
    ids: dict = {}
    return np.array([ids.setdefault(_signature(e), len(ids)) for e in eqns], dtype=np.int64)


def _candidate_periods(sigs: np.ndarray) -> list[int]:
    """The most frequent distances between consecutive occurrences of GRAM signatures in a row."""
    grams: dict = {}
    last: dict[int, int] = {}
    dist: Counter = Counter()
    for i in range(len(sigs) - GRAM + 1):
        g = grams.setdefault(tuple(sigs[i:i + GRAM]), len(grams))
        if g in last:
            dist[i - last[g]] += 1
        last[g] = i
    return [d for d, _ in dist.most_common(MAX_PERIODS)]


def _periodic_stretches(sigs: np.ndarray) -> list[Run]:
    """For each candidate period p, the stretches of at least two blocks where sig[i] == sig[i + p]."""
    runs = []
    for p in _candidate_periods(sigs):
        same = np.concatenate([[False], sigs[:-p] == sigs[p:], [False]])
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for lo, hi in zip(edges[::2], edges[1::2]):
            if hi - lo >= p:
                runs.append(Run(int(lo), p, int((hi - lo) // p + 1)))
    return runs


# ---- the dataflow check -------------------------------------------------------------------------------

def worth_rolling(period: int, count: int) -> bool:
    """True unless the unroll pass would unroll the loop again (a few steps of a small body)."""
    return count >= 2 and not (count <= unroll.MAX_TRIPS and count * period <= unroll.MAX_EQNS)


class _Graph:
    """Where each var of f is defined (equation index, result position) and last read."""

    def __init__(self, f: Func):
        self.eqns = f.eqns
        self.where = {v: (i, o) for i, e in enumerate(f.eqns) for o, v in enumerate(e.outs)}
        self.last_read: dict[Var, int] = {}
        for i, e in enumerate(f.eqns):
            for a in e.ins:
                if isinstance(a, Var):
                    self.last_read[a] = i
        for a in f.results:
            if isinstance(a, Var):
                self.last_read[a] = len(f.eqns)


@dataclass
class _Block:
    """How one block reads its operands: a key per operand, and the values of its advancing literals."""

    keys: list
    ints: list
    atoms: list  # the operands themselves (initial carries are read from block 0's)


def _block(g: _Graph, run: Run, r: int) -> _Block | None:
    """Block r's operand keys: ("in", j, o) this block, ("prev", j, o) the block before, ("ext", v) before the
    run, ("i", type) an advancing literal, ("l", ...) a fixed one; None if it reads an older block."""
    base = run.start + r * run.period
    keys, ints, atoms = [], [], []
    for e in g.eqns[base:base + run.period]:
        for q, a in enumerate(e.ins):
            atoms.append(a)
            if isinstance(a, Lit):
                keys.append(("i", a.type) if _dynamic(e, q) else ("l", a.type, repr(a.value)))
                if _dynamic(e, q):
                    ints.append(a.value)
                continue
            i, o = g.where.get(a, (-1, 0))
            if i >= base:
                keys.append(("in", i - base, o))
            elif r >= 1 and i >= base - run.period:
                keys.append(("prev", i - base + run.period, o))
            elif i < run.start:
                keys.append(("ext", a))
            else:
                return None
    return _Block(keys, ints, atoms)


def _initial_carries(first: _Block, model: _Block) -> dict | None:
    """(j, o) -> the value block 0 reads where later blocks read the block before; None if block 0 differs."""
    inits: dict = {}
    for k0, k1, a in zip(first.keys, model.keys, first.atoms):
        if k1[0] == "prev":
            lit_ok = k0[0] == "l" and a.type.is_scalar  # (a tensor splat literal is no loop operand)
            if not (k0[0] == "ext" or lit_ok) or inits.setdefault(k1[1:], a) != a:
                return None
        elif k0 != k1:
            return None
    return inits


def _checked(g: _Graph, cand: Run) -> Run | None:
    """The longest run of cand's leading blocks that passes the checks (from cand.start or one block later)."""
    for shift in range(2):
        run = Run(cand.start + shift * cand.period, cand.period, cand.count - shift)
        n = _valid_blocks(g, run)
        if n and worth_rolling(run.period, n):
            return Run(run.start, run.period, n)
    return None


def _valid_blocks(g: _Graph, run: Run) -> int:
    """How many leading blocks of run repeat block 1 (0 if fewer than two, or block 0 does not start it)."""
    if run.count < 2:
        return 0
    first, model = _block(g, run, 0), _block(g, run, 1)
    if first is None or model is None or _initial_carries(first, model) is None:
        return 0
    steps = [b - a for a, b in zip(first.ints, model.ints)]
    for r in range(2, run.count):
        blk = _block(g, run, r)
        if blk is None or blk.keys != model.keys or \
                any(v != v0 + r * s for v, v0, s in zip(blk.ints, first.ints, steps)):
            return r
    return run.count


# ---- building the loop --------------------------------------------------------------------------------

def _rolled(f: Func, runs: list[Run]) -> Func:
    """f with each run replaced by a loop equation and the reads of its values after it."""
    g = _Graph(f)
    sub: dict[Var, Atom] = {}
    b = Builder()
    at = 0
    for run in runs:
        _copy(b, f.eqns[at:run.start], sub)
        _emit_loop(b, g, run, sub)
        at = run.stop
    _copy(b, f.eqns[at:], sub)
    results = [sub.get(a, a) if isinstance(a, Var) else a for a in f.results]
    return Func(f.name, f.params, tuple(b.eqns), tuple(results), f.result_names, f.plan, f.notes, f.defaults)


def _copy(b: Builder, eqns, sub: dict) -> None:
    for e in eqns:
        ins = tuple(sub.get(a, a) if isinstance(a, Var) else a for a in e.ins)
        b.eqns.append(e if ins == e.ins else Eqn(e.prim, ins, e.outs, e.params, e.loc))


@dataclass
class _Plan:
    """The loop's operands: constants (vars from before), carries ((j, o) -> initial value), stacked (j, o)."""

    consts: list
    carries: dict
    ys: list


def _plan(g: _Graph, run: Run) -> tuple[_Plan, _Block, _Block]:
    first, model = _block(g, run, 0), _block(g, run, 1)
    consts = list(dict.fromkeys(k[1] for k in model.keys if k[0] == "ext"))
    carries = _initial_carries(first, model)
    ys = []
    for r in range(run.count):
        base = run.start + r * run.period
        for j, e in enumerate(g.eqns[base:base + run.period]):
            for o, v in enumerate(e.outs):
                read_after = g.last_read.get(v, -1) >= run.stop
                if read_after and not (r == run.count - 1 and (j, o) in carries) and (j, o) not in ys:
                    ys.append((j, o))
    return _Plan(consts, carries, sorted(ys)), first, model


def _emit_loop(b: Builder, g: _Graph, run: Run, sub: dict) -> None:
    """Append the loop for run and the reads of its results; sub maps the run's vars read later to them."""
    from ..prims.base import PRIMS

    plan, first, model = _plan(g, run)
    body = reroll(_body(g, run, plan, first, model))
    read = lambda a: sub.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    ins = [Lit(run.count, Type("i64")), *map(read, plan.consts), *map(read, plan.carries.values())]
    b.loc = g.eqns[run.start].loc
    outs = b.bind(PRIMS["loop"], ins, dict(body=body, n_consts=len(plan.consts), n_carry=len(plan.carries),
                                           length=run.count, reverse=False))
    last = run.start + (run.count - 1) * run.period
    for (j, o), v in zip(plan.carries, outs):
        sub[g.eqns[last + j].outs[o]] = v
    for (j, o), ys in zip(plan.ys, outs[len(plan.carries):]):
        for r in range(run.count):
            v = g.eqns[run.start + r * run.period + j].outs[o]
            if g.last_read.get(v, -1) >= run.stop and v not in sub:
                sub[v] = b.index(ys, Lit(r, Type("i64")), axis=0)


def _body(g: _Graph, run: Run, plan: _Plan, first: _Block, model: _Block) -> Func:
    """loop_body(k, *consts, *carries) -> (*carries, *ys): block 1's equations over the loop's operands."""
    bb = Builder()
    k = Var(Type("i64"), "t")
    consts = {v: Var(v.type, v.hint) for v in plan.consts}
    carries = {jo: Var(a.type, getattr(a, "hint", "")) for jo, a in plan.carries.items()}
    local: dict = {}
    counters: dict = {}  # (before the block's equations: a nested run then starts at its first equation)
    types = [key[1] for key in model.keys if key[0] == "i"]
    positions = [_counter(bb, k, v0, v1 - v0, t, counters) for v0, v1, t in zip(first.ints, model.ints, types)]
    keys, ints = iter(model.keys), iter(positions)
    base = run.start + run.period
    for j, e in enumerate(g.eqns[base:base + run.period]):
        ins = [_operand(next(keys), a, consts, carries, local, ints) for a in e.ins]
        bb.loc = e.loc
        outs = bb.bind(e.prim, ins, dict(e.params))
        bb.name_like(outs, e.outs)
        local.update({(j, o): v for o, v in enumerate(outs)})
    results = [local[jo] for jo in plan.carries] + [local[jo] for jo in plan.ys]
    return bb.func("loop_body", [k, *consts.values(), *carries.values()], results)


def _operand(key, a: Atom, consts, carries, local, positions) -> Atom:
    """Block 1's operand a (read as key says) inside the body."""
    kind = key[0]
    if kind == "in":
        return local[key[1:]]
    if kind == "prev":
        return carries[key[1:]]
    if kind == "ext":
        return consts[key[1]]
    return next(positions) if kind == "i" else a


def _counter(bb: Builder, k: Var, v0: int, step: int, t: Type, counters: dict) -> Atom:
    """v0 + step * k as a t (one equation chain per distinct (v0, step, t))."""
    if step == 0:
        return Lit(v0, t)
    if (v0, step, t) not in counters:
        x = k if t.dtype == "i64" else bb.convert(k, dtype=t.dtype)
        x = x if step == 1 else bb.mul(x, Lit(step, t))
        counters[(v0, step, t)] = x if v0 == 0 else bb.add(x, Lit(v0, t))
    return counters[(v0, step, t)]

