"""partial_eval: split a function into the part computable from known inputs and the rest.

Used by linearize: after jvp, primal inputs are known and tangents unknown, so the known part
is the forward pass and the unknown part is linear in the tangents. Known values the unknown
part reads become residuals. Control-flow prims split themselves with their partial_eval rule.

Requires: a Func and a known-mask over its params. Guarantees: (known, unknown, out_known, nres)
where known: (known params) -> (known results, residuals) and
unknown: (residuals, unknown params) -> (unknown results).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import located
from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var


@dataclass
class Split:
    """The state of one partial evaluation: two builders and how values cross between them."""

    kb: Builder = field(default_factory=Builder)
    ub: Builder = field(default_factory=Builder)
    known: dict[Var, Atom] = field(default_factory=dict)
    unknown: dict[Var, Atom] = field(default_factory=dict)
    residuals: dict[int, tuple[Atom, Var]] = field(default_factory=dict)
    made: dict[int, Eqn] = field(default_factory=dict)     # id of a known var -> its equation
    remade: dict[int, Atom] = field(default_factory=dict)  # id of a known var -> its recomputation

    def is_known(self, a: Atom) -> bool:
        return not isinstance(a, Var) or a in self.known

    def read_known(self, a: Atom) -> Atom:
        return self.known[a] if isinstance(a, Var) else a

    def read_unknown(self, a: Atom) -> Atom:
        """The value of a in the unknown part; a known var becomes a residual."""
        if isinstance(a, Lit):
            return a
        if a in self.unknown:
            return self.unknown[a]
        return self.residual(self.known[a])

    def residual(self, k: Atom) -> Atom:
        """The unknown-side param carrying known value k (literals cross as themselves)."""
        if isinstance(k, Lit):
            return k
        if id(k) in self.remade:
            return self.remade[id(k)]
        if id(k) not in self.residuals:
            e = self.cheap(k)
            if e is not None:
                (v,) = self.ub.bind(e.prim, [self.residual(a) for a in e.ins], dict(e.params))
                self.ub.name_like([v], [k])
                self.remade[id(k)] = v
                return v
            self.residuals[id(k)] = (k, Var(k.type, k.hint))  # (unnamed: codegen names it after its value)
        return self.residuals[id(k)][1]

    def cheap(self, k: Atom) -> Eqn | None:
        """k's equation if the unknown part should recompute k (its prim's `remat`), else None."""
        e = self.made.get(id(k))
        if e is None or not e.prim.remat or len(e.outs) != 1:
            return None
        operands = [a for a in e.ins if isinstance(a, Var)]
        if not operands or any(a.type.shape != k.type.shape for a in operands):
            return None
        # at most one operand is read from memory; the others (a lane's condition) are recomputed in turn
        stored = [a for a in operands if id(a) not in self.remade and self.cheap(a) is None]
        return e if len(stored) <= 1 else None


def split_eqns(s: Split, f: Func) -> None:
    """Partially evaluate f's equations into s (params must already be in s.known/s.unknown)."""
    for eqn in f.eqns:
        mask = [s.is_known(a) for a in eqn.ins]
        s.kb.loc = s.ub.loc = eqn.loc
        if all(mask):
            outs = s.kb.bind(eqn.prim, [s.read_known(a) for a in eqn.ins], dict(eqn.params))
            s.kb.name_like(outs, eqn.outs)
            s.known.update(zip(eqn.outs, outs))
            s.made.update((id(o), s.kb.eqns[-1]) for o in outs)
        elif eqn.prim.partial_eval is not None:
            with located(eqn.loc):
                eqn.prim.partial_eval(s, eqn, mask)
        else:
            outs = s.ub.bind(eqn.prim, [s.read_unknown(a) for a in eqn.ins], dict(eqn.params))
            s.ub.name_like(outs, eqn.outs)
            s.unknown.update(zip(eqn.outs, outs))


def partial_eval(f: Func, known_in: Sequence[bool], force_unknown: Sequence[bool] | None = None):
    """Split f by which inputs are known; results in force_unknown are returned by the unknown part."""
    s = Split()
    kparams, uparams = [], []
    for p, k in zip(f.params, known_in):
        v = Var(p.type, p.hint)
        (kparams if k else uparams).append(v)
        (s.known if k else s.unknown)[p] = v
    split_eqns(s, f)
    force = list(force_unknown or [False] * len(f.results))
    out_known = [s.is_known(r) and not fu for r, fu in zip(f.results, force)]
    kouts = [s.read_known(r) for r, k in zip(f.results, out_known) if k]
    uouts = [s.read_unknown(r) for r, k in zip(f.results, out_known) if not k]
    res = list(s.residuals.values())
    known = s.kb.func(f"{f.name}_known", kparams, kouts + [k for k, _ in res])
    unknown = s.ub.func(f"{f.name}_lin", [v for _, v in res] + uparams, uouts)
    return known, unknown, out_known, len(res)


def out_unknown_fixpoint(funcs: Sequence[Func], known_in: Sequence[bool], n_carry_from: int | None = None,
                         n_carry: int = 0) -> list[bool]:
    """Which results are unknown in any of funcs (branches); for loops also feeds carries back."""
    known_in = list(known_in)
    while True:
        unknown = [False] * len(funcs[0].results)
        for f in funcs:
            unknown = [u or not k for u, k in zip(unknown, _out_known(f, tuple(known_in)))]
        if n_carry_from is None:
            return unknown
        new = list(known_in)
        for j in range(n_carry):
            new[n_carry_from + j] = known_in[n_carry_from + j] and not unknown[j]
        if new == known_in:
            return unknown
        known_in = new


# Func -> {known inputs: which results are known}. Funcs are immutable, so the answer never changes; without
# it, an if nested d deep in the other's branches is split 2**d times (once to find its unknown results and
# once for real, at every level: 24 ifs of early returns in a row never finished).
_OUT_KNOWN: "weakref.WeakKeyDictionary[Func, dict]" = weakref.WeakKeyDictionary()


def _out_known(f: Func, known_in: tuple[bool, ...]) -> list[bool]:
    """Which of f's results partial_eval finds known when the inputs known_in are (cached)."""
    cache = _OUT_KNOWN.setdefault(f, {})
    if known_in not in cache:
        cache[known_in] = partial_eval(f, known_in)[2]
    return cache[known_in]
