"""plan_memory: decide where every tensor value lives in the generated C++.

Requires: a lowered Func (fused, contractions selected). Guarantees: the same Func carrying a
`Plan` that places every value which needs memory of its own (a tensor made by an equation
that is not a view):
- `arg k`: a top-level result written straight into the caller's k-th output argument, or a temporary that
  such a result then overwrites elementwise (`reuse`: the exps of a softmax's gradient computed in its output);
- `into v`: the result of an if-branch or a call written straight into the buffer of v, the
  enclosing equation's output;
- `row v`: a loop body's per-iteration result written straight into its row of v, the loop's
  stacked output;
- `reuse v`: an in-place update (index_add, contract with an accumulator) writing into the
  buffer of its operand v, which nothing reads afterwards; also a loop body's new carry made
  by a fusion from the old one elementwise (acc = acc * x + c), which then needs no copy back;
- `slot s`: workspace slot s. A value whose size is known when the library is built has a slot of
  its own at a byte offset of the workspace's *arena*: values whose lifetimes do not overlap share
  bytes there, packed largest first at the lowest offset free for the whole lifetime (greedy by
  size, as TensorFlow Lite's arena planner), so the arena is near the most bytes live at once and
  a layer writes where a dead one's data still sits in cache. Values sized at run time share a
  slot after the arena when they have the same element type and number of elements.
The scratch a kernel-layer call works in (a convolution's packed kernel and im2col blocks, a product's
panels: the prim's `scratch` rule, prims/scratch.py, sized for the register tiles of every level in `tiles`)
is a buffer of the arena too, live during its equation alone (`Plan.scratch`), so that it lies where the
activations dead at that point were.
A call kept as a function of its own with tensors (prims/control.py kept_call: a batched helper) is one equation
here, like any other whose outputs need buffers; its callee gets a plan of its own (its results written into the
output pointers the caller passes, its slots in the workspace the caller passes: codegen/helpers.py).
Scalars, literals, parameters and views (broadcast, reshape, transpose, slices, index) need
no memory of their own: a view keeps the buffer it points into alive.

Lifetimes are positions in emission order. A loop's or if's body runs between the equation's
start and end; the equation reads its operands (and its outputs, which the body writes) at the
end, so a buffer read by a loop stays alive for every iteration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..ir.core import Atom, Eqn, Func, Var, freeze
from ..ir.types import Type, dim_mul, element_bytes, numel
from ..prims.control import keeps_call, kept_call
from ..prims.scratch import ALL_TILES


@dataclass(frozen=True)
class Place:
    """Where one value is written: kind arg | into | reuse | slot."""

    kind: str
    index: int = -1          # arg: output argument; slot: slot number
    of: Var | None = None    # into / reuse: the var whose buffer is written

    def text(self, name_of) -> str:
        if self.kind == "arg":
            return f"output {self.index}"
        if self.kind == "slot":
            return f"slot {self.index}"
        return f"{self.kind} {name_of(self.of)}"


@dataclass(frozen=True)
class Plan:
    """The placement of every value that needs memory, and the slots' types."""

    places: Mapping[Var, Place]
    slots: tuple[Type, ...]
    offsets: tuple[int | None, ...] = ()  # per slot: its byte offset in the arena, or None (laid out after it)
    arena: int = 0                        # the arena's bytes
    scratch: Mapping[Eqn, tuple[int, int]] = field(default_factory=dict)  # kernel call -> its scratch's offset, bytes

    def offset(self, k: int) -> int | None:
        return self.offsets[k] if k < len(self.offsets) else None


def plan_memory(f: Func, tiles=ALL_TILES, align: int | None = None) -> Func:
    """f with its memory plan attached (f.plan), and each callee of a kept tensor call with its own; `tiles`: the
    register tiles of the levels its kernels are built for (prims/scratch.py), which the scratch of kernel calls is
    sized for; `align`: the bytes every arena offset is a multiple of (ARENA_ALIGN, or arena_align's for a core
    without vectors)."""
    align = align or ARENA_ALIGN
    f = _plan_callees(f, {}, tuple(tiles), align)
    w = _Walk(tiles=tuple(tiles), align=align)
    w.top(f)
    return Func(f.name, f.params, f.eqns, f.results, f.result_names, plan=w.plan())


def _plan_callees(f: Func, memo: dict, tiles, align: int) -> Func:
    """f with the callees of its kept calls that have tensors planned (at any depth; a body shared stays shared)."""
    if id(f) in memo:
        return memo[id(f)][1]
    eqns = []
    for e in f.eqns:
        subs = {k: v for k, v in e.params.items() if isinstance(v, Func)}
        if kept_call(e) and not keeps_call(e.params["fn"]):
            new = {"fn": plan_memory(e.params["fn"], tiles, align)}
        else:
            new = {k: _plan_callees(v, memo, tiles, align) for k, v in subs.items()}
        same = all(new[k] is subs[k] for k in new)
        eqns.append(e if same else Eqn(e.prim, e.ins, e.outs, freeze(dict(e.params, **new)), e.loc))
    g = f if all(a is b for a, b in zip(eqns, f.eqns)) else \
        Func(f.name, f.params, tuple(eqns), f.results, f.result_names, f.plan, f.notes, f.defaults)
    memo[id(f)] = (f, g)  # (f kept alive with its id)
    return g


def inplace_operand(eqn: Eqn) -> int | None:
    """The operand an equation may update in place, if any."""
    return eqn.prim.inplace(eqn) if eqn.prim.inplace is not None else None


@dataclass
class _Walk:
    """One pass over the function tree in emission order."""

    pos: int = 0
    root: dict = field(default_factory=dict)       # var -> the var whose buffer it lives in
    owner: dict = field(default_factory=dict)      # root -> the var holding the buffer's current value
    defined: dict = field(default_factory=dict)    # root -> first position written
    last: dict = field(default_factory=dict)       # root -> last position read
    places: dict = field(default_factory=dict)
    seen_bodies: set = field(default_factory=set)
    carried: dict = field(default_factory=dict)    # a loop body's carry result -> its carry param
    reshaped: dict = field(default_factory=dict)   # a reshape's result -> its operand
    results: set = field(default_factory=set)      # every body's results
    tiles: tuple = ALL_TILES                       # the levels' register tiles the scratch is sized for
    align: int = 64                                # the bytes every arena offset is a multiple of (ARENA_ALIGN)
    scratch: dict = field(default_factory=dict)    # a kernel call -> [its scratch's bytes, first, last position]
    outputs: dict = field(default_factory=dict)    # a top-level result -> its output argument
    top_eqns: frozenset = frozenset()              # the ids of the top-level function's equations

    def top(self, f: Func) -> None:
        dests = {}
        for k, r in enumerate(f.results):
            if isinstance(r, Var) and r not in f.params and r.type.rank and r not in dests:
                dests[r] = k
        self.outputs, self.top_eqns = dests, frozenset(map(id, f.eqns))
        self.body(f, dests=None)
        for v, k in dests.items():
            r = self.root.get(v)
            if r is v and v not in self.places:
                self.places[v] = Place("arg", k)
            elif v in self.places and self.places[v].kind == "reuse" and self._scratch_output(r, v):
                self.places[r] = Place("arg", k)  # (v is written over r's value in the output: see simple)
            elif v not in self.places and self.unreshaped(v) is r and self._scratch_output(r, v, reshaped=True):
                self.places[r] = Place("arg", k)  # (v is r's elements in r's order: a reshape of the output)
        self.read_all(f.results)

    def _scratch_output(self, r, v: Var, reshaped: bool = False) -> bool:
        """Whether buffer r, which top-level result v overwrites in place (or, `reshaped`, is a reshape of), may be
        the output argument v is written to: a buffer of v's type (its elements) that an equation made (not a
        parameter, nor already placed), that no other result lives in."""
        fits = r is not None and (r.type == v.type or reshaped and r.type.dtype == v.type.dtype
                                  and numel(r.type.shape) == numel(v.type.shape))
        return fits and r is not v and r in self.defined and r not in self.places \
            and r not in self.outputs and not any(self.root.get(u) is r for u in self.outputs if u is not v)

    # ---- lifetimes -----------------------------------------------------------------------------

    def read(self, a: Atom) -> None:
        r = self.root.get(a) if isinstance(a, Var) else None
        if r is not None:
            self.last[r] = max(self.last.get(r, -1), self.pos)

    def read_all(self, atoms) -> None:
        for a in atoms:
            self.read(a)

    def alias(self, v: Var, of: Atom) -> None:
        r = self.root.get(of) if isinstance(of, Var) else None
        if r is not None:
            self.root[v] = r

    def own(self, v: Var) -> None:
        """v gets a buffer of its own, written from now on."""
        if v.type.rank == 0:
            return
        self.root[v] = v
        self.owner[v] = v
        self.defined.setdefault(v, self.pos)

    def take_over(self, v: Var, init: Atom, eqn: Eqn, uses_after: set) -> bool:
        """A loop carry lives in its initial value's buffer when nothing else reads that value (a
        gradient accumulated through nested loops stays in one buffer)."""
        r = self.root.get(init) if isinstance(init, Var) else None
        if not v.type.rank or r is None or self.owner.get(r) is not init or self.live_after(r, uses_after) \
                or self.readers(eqn, r) != 1:
            return False
        self.root[v] = r
        self.owner[r] = v
        self.places[v] = Place("reuse", of=init)
        return True

    def take_back(self, outs) -> None:
        """After a body: the equation's outputs hold their buffers' values."""
        for v in outs:
            if v in self.root:
                self.owner[self.root[v]] = v

    def readers(self, eqn: Eqn, r: Var) -> int:
        """How many of eqn's operands live in buffer r (the value itself or views of it)."""
        return sum(isinstance(a, Var) and self.root.get(a) is r for a in eqn.ins)

    def live_after(self, r: Var, uses_after: set) -> bool:
        return any(self.root.get(v) is r for v in uses_after)

    # ---- bodies ---------------------------------------------------------------------------------

    def body(self, f: Func, dests: dict | None, kind: str = "into") -> None:
        """Walk a body whose params are already aliased; `dests` maps its results to enclosing outs, which they are
        written into (kind "into") or into a row of (kind "row", a loop's stacked outputs)."""
        shared = id(f) in self.seen_bodies
        self.seen_bodies.add(id(f))
        self.results.update(r for r in f.results if isinstance(r, Var))
        later = _reads_from(f)
        for i, eqn in enumerate(f.eqns):
            self.pos += 1
            self.eqn(eqn, later[i + 1])
        self.pos += 1
        if dests and not shared:
            for r, out in dests.items():
                if self.root.get(r) is r and self.owner.get(r) is r and r not in self.places:
                    self.places[r] = Place(kind, of=out)
                    self.root[r] = self.root.get(out, out)
        self.read_all(f.results)

    def eqn(self, eqn: Eqn, uses_after: set) -> None:
        if eqn.prim.name == "loop":
            self.loop(eqn, uses_after)
        elif eqn.prim.name == "cond" or (eqn.prim.name == "call" and not kept_call(eqn)):
            self.branches(eqn)
        else:
            self.simple(eqn, uses_after)

    def simple(self, eqn: Eqn, uses_after: set) -> None:
        self.read_all(eqn.ins)
        self.note_scratch(eqn)
        if eqn.prim.view:  # a view of its operand, or of static data (a constant)
            if eqn.ins:
                self.alias(eqn.outs[0], eqn.ins[0])
                if eqn.prim.name == "reshape" and isinstance(eqn.ins[0], Var):
                    self.reshaped[eqn.outs[0]] = eqn.ins[0]
            return
        k, j = inplace_operand(eqn), 0
        if k is None and eqn.prim.name == "fusion":
            k, j = self.carry_in_place(eqn) or (None, 0)
            k = self.elementwise_in_place(eqn) if k is None else k
        base = eqn.ins[k] if k is not None else None
        r = self.root.get(base) if isinstance(base, Var) else None
        # in place only when no other operand reads the same buffer: y + W @ y must not update y
        # while the product still reads it
        if r is not None and self.owner.get(r) is self.unreshaped(base) and not self.live_after(r, uses_after) \
                and self.readers(eqn, r) == 1:
            self.root[eqn.outs[j]] = r
            self.owner[r] = eqn.outs[j]
            self.places[eqn.outs[j]] = Place("reuse", of=base)
            for v in eqn.outs[:j] + eqn.outs[j + 1:]:
                self.own(v)
            return
        for v in eqn.outs:
            self.own(v)

    def note_scratch(self, eqn: Eqn) -> None:
        """The scratch of a kernel call of static size, live while it runs (a body walked twice: both times)."""
        size = eqn.prim.scratch(eqn, self.tiles) if eqn.prim.scratch is not None else None
        if not size:
            return
        if eqn in self.scratch:
            self.scratch[eqn][2] = self.pos
        else:
            self.scratch[eqn] = [size, self.pos, self.pos]

    def carry_in_place(self, eqn: Eqn) -> tuple[int, int] | None:
        """(operand, output): the old value of a loop carry a fusion makes, which that output may overwrite: read
        only elementwise at the element being written (same type; not gathered), or by reductions whose results
        nothing in the fusion reads (llsq's reverse loop: Σ c and c · t in one pass over c; each element of c is
        read in the iteration that writes it); the caller checks that nothing else reads it."""
        body: Func = eqn.params["body"]
        for j, out in enumerate(eqn.outs):
            old = self.carried.get(out)
            for k, (a, prm) in enumerate(zip(eqn.ins, body.params)):
                if old is not None and a is old and a.type == out.type and _read_in_place(body, prm, j):
                    return k, j
        return None

    def elementwise_in_place(self, eqn: Eqn) -> int | None:
        """The operand a fusion of elementwise equations alone may overwrite: one of its result's type, which each
        element of the result reads at its own index (the caller checks that nothing else reads it). A bias added
        after a product the epilogue could not take (a reshape between them: an RNN's input projection) then needs
        no second buffer of the product's size."""
        body: Func = eqn.params["body"]
        out = eqn.outs[0] if len(eqn.outs) == 1 else None
        if out is None or not all(e.prim.elementwise for e in body.eqns):
            return None
        if out in self.results:  # (a body's result is written where the enclosing equation wants it instead)
            if not (id(eqn) in self.top_eqns and out in self.outputs):
                return None
            # a top-level result made elementwise from a temporary of its type (lse's gradient, exp(x - a) / Σ,
            # from the exps): the temporary is computed in the output argument and the result overwrites it there
            # (top: no workspace for it, one buffer less in cache). The C ABI lets no input overlap an output of a
            # function of more than one equation (codegen/aliasing.py), so the temporary clobbers no input.
            return next((k for k, a in enumerate(eqn.ins) if isinstance(a, Var) and a.type == out.type
                         and self._scratch_output(self.root.get(a), out)), None)
        return next((k for k, a in enumerate(eqn.ins) if isinstance(a, Var) and a.type == out.type), None)

    def unreshaped(self, v: Atom) -> Atom:
        """The value v is a reshape of (through reshapes: the same elements in the same order), else v."""
        while v in self.reshaped:
            v = self.reshaped[v]
        return v

    def loop(self, eqn: Eqn, uses_after: set) -> None:
        p = eqn.params
        body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
        init = eqn.ins[1 + nc:1 + nc + ncar]
        for v, a in zip(eqn.outs[:ncar], init):
            if not self.take_over(v, a, eqn, uses_after):
                self.own(v)
        for v in eqn.outs[ncar:]:
            self.own(v)
        consts, xs = eqn.ins[1:1 + nc], eqn.ins[1 + nc + ncar:]
        for prm, a in zip(body.params[1:1 + nc], consts):
            self.alias(prm, a)
        carries = body.params[1 + nc:1 + nc + ncar]
        for prm, out in zip(carries, eqn.outs[:ncar]):
            self.alias(prm, out)
            if prm.type.rank:
                self.owner[self.root[out]] = prm  # the body may update its carries in place
        for prm, a in zip(body.params[1 + nc + ncar:], xs):
            self.alias(prm, a)
        self.carried.update({r: prm for r, prm in zip(body.results[:ncar], carries)
                             if isinstance(r, Var) and r.type.rank and list(body.results).count(r) == 1})
        self.body(body, _unique_results(body, body.results[ncar:], eqn.outs[ncar:]), "row")
        self.take_back(eqn.outs)
        self.read_all(list(eqn.ins) + list(eqn.outs))

    def branches(self, eqn: Eqn) -> None:
        for v in eqn.outs:
            self.own(v)
        fns = [v for _, v in sorted(eqn.params.items()) if isinstance(v, Func)]
        ops = eqn.ins[1:] if eqn.prim.name == "cond" else eqn.ins
        for fn in fns:
            for prm, a in zip(fn.params, ops):
                self.alias(prm, a)
            self.body(fn, _unique_results(fn, fn.results, eqn.outs))
        self.take_back(eqn.outs)
        self.read_all(list(eqn.ins) + list(eqn.outs))

    # ---- slots ------------------------------------------------------------------------------------

    def plan(self) -> Plan:
        """Slots for the owned buffers without another place: an arena offset each when their size is static,
        else a slot shared with an equal-sized buffer whose last occupant died."""
        slots: list[Type] = []
        keys: list[tuple] = []
        free_at: list[int] = []  # slot -> last position its occupant is read
        roots = sorted((v for v in self.defined if v not in self.places and v.type.rank),
                       key=lambda v: (self.defined[v], v.uid))
        static = [v for v in roots if _static_bytes(v.type) is not None]
        items = [(v, _static_bytes(v.type, self.align), self.defined[v], self.last.get(v, self.defined[v]), v.uid)
                 for v in static]
        items += [(e, -(-n // self.align) * self.align, start, end, -1 - i)
                  for i, (e, (n, start, end)) in enumerate(self.scratch.items())]
        offsets, arena = _pack(items)
        for v in static:
            slots.append(v.type)
            keys.append(None)
            free_at.append(0)
            self.places[v] = Place("slot", len(slots) - 1)
        for v in roots:
            if v in offsets:
                continue
            start, end = self.defined[v], self.last.get(v, self.defined[v])
            key = _slot_key(v.type)
            k = next((i for i, kk in enumerate(keys) if kk == key and free_at[i] < start), None)
            if k is None:
                slots.append(v.type)
                keys.append(key)
                free_at.append(end)
                k = len(slots) - 1
            free_at[k] = max(free_at[k], end)
            self.places[v] = Place("slot", k)
        scratch = {e: (offsets[e], n) for e, (n, _, _) in self.scratch.items()}
        return Plan(MappingProxyType(dict(self.places)), tuple(slots),
                    tuple(offsets[v] for v in static) + (None,) * (len(slots) - len(static)), arena,
                    MappingProxyType(scratch))


ARENA_ALIGN = 64
"""Bytes an arena offset is a multiple of (a cache line; an AVX-512 vector)."""


def arena_align(vectors: bool) -> int:
    """The bytes arena offsets are multiples of for a target with or without a vector unit (Target.vectors): a
    microcontroller has no cache lines nor vectors to align for, and its kernels read at most 4-byte words (8: a
    double), so 8 there (the int8 MLP of benchmarks/cortex_m4: its 196 quantized inputs took 256 B of a 320 B
    workspace), else ARENA_ALIGN."""
    return ARENA_ALIGN if vectors else 8


def _read_in_place(body: Func, prm: Var, j: int) -> bool:
    """Whether a fusion body reads prm only elementwise or by reductions whose results it does not read itself,
    and an elementwise equation loads it (each element once, codegen/cpp.py scalar) no later than the body
    computes its result j, which is stored at once (codegen/fusion.py emits the reductions' updates last, after
    every store: a reduction alone would read the element after it is overwritten). Never with an arg reduction
    (reduce_argmax): its position loop reads the row again after the first loop's stores."""
    if any(e.prim.reduction.startswith("arg") for e in body.eqns):
        return False
    reduced = {v for e in body.eqns if e.prim.reduction for v in e.outs}
    readers = [k for k, e in enumerate(body.eqns) if any(x is prm for x in e.ins)]
    loads = [k for k in readers if not body.eqns[k].prim.reduction]
    made = next((k for k, e in enumerate(body.eqns) if body.results[j] in e.outs), None)
    return all(body.eqns[k].prim.elementwise or body.eqns[k].prim.reduction for k in readers) and \
        not any(x in reduced for e in body.eqns for x in e.ins) and \
        made is not None and (not readers or (bool(loads) and loads[0] <= made))


def _static_bytes(t: Type, align: int = ARENA_ALIGN) -> int | None:
    """A buffer's bytes when every dim is a literal, rounded up to `align`."""
    if not all(isinstance(d, int) for d in t.shape):
        return None
    n = element_bytes(t.dtype) * math.prod(t.shape)
    return -(-max(n, 1) // align) * align


def _pack(items: list) -> tuple[dict, int]:
    """Arena offsets for buffers of static size, items (key, bytes, first position, last position, tie): largest
    first (ties: first defined, then `tie`), each at the lowest offset where no buffer live at the same time already
    lies. Lifetimes [first, last] overlap unless one ends before the other starts."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, bytes, start, end)
    offsets: dict = {}
    for key, size, start, end, _ in sorted(items, key=lambda it: (-it[1], it[2], it[4])):
        at = 0
        for o, n, s, e in sorted(p for p in placed if not (p[3] < start or end < p[2])):
            if o >= at + size:
                break
            at = max(at, o + n)
        offsets[key] = at
        placed.append((at, size, start, end))
    return offsets, max((o + n for o, n, _, _ in placed), default=0)


def _unique_results(f: Func, results, outs) -> dict:
    """The results of body f that may be written straight into (a row of) the matching outs: vars made in the body
    that are not also another of its results."""
    return {r: o for r, o in zip(results, outs)
            if isinstance(r, Var) and list(f.results).count(r) == 1 and r not in f.params}


def _slot_key(t: Type) -> tuple:
    """What values sharing a slot must agree on: element type and element count ([n, 4] fits [4*n])."""
    n = 1
    for d in t.shape:
        n = dim_mul(n, d)
    return t.dtype, n


def _reads_from(f: Func) -> list[set]:
    """For each equation index i, the vars read by equations i.. and the results (index len: results)."""
    out = [set() for _ in range(len(f.eqns) + 1)]
    acc = {a for a in f.results if isinstance(a, Var)}
    out[len(f.eqns)] = set(acc)
    for i in range(len(f.eqns) - 1, -1, -1):
        acc |= {a for a in f.eqns[i].ins if isinstance(a, Var)}
        out[i] = set(acc)
    return out
