"""Signs of integer scalars in loop code: which computed indices are never negative, and which stay below a bound.

Loop-style code indexes with arithmetic of loop counters and sizes: ADBench's GMM reads
`icf[k, d + c * (2 * d - c - 1) // 2 + r - c - 1]` inside `for r in range(d): for c in range(r):`. Such an index
is clamped into its axis (ks::clamp_index: a negative one counts from the end, then clamped into [0, n - 1]), and
`//` rounds toward -inf (ks::floordiv: a remainder and a sign test). When the index is never negative, the clamp
is one comparison (ks::clamp_high) and a `//` by a positive literal the unsigned division (a shift); when it also
stays below the axis' size, there is no clamp at all.

The facts: every symbolic size is >= 0 (the shape checks return err_shape otherwise) and a loop counter lies in
[0, trip). A value is written as a polynomial in sizes, counters and opaque values (a product of two unknowns, a
`//`), each opaque value with its own sign from its prim's `sign` rule. A polynomial is shown >= 0 by taking the
counters out from the innermost loop outwards: where it is linear in counter c with a coefficient a of known sign,
c is replaced by its least value 0 (a >= 0) or its largest trip - 1 (a <= 0), the trip a polynomial of outer
values: `r - c - 1` with c < r is r - (r - 1) - 1 = 0. What is left must have only positive terms in sizes and
values >= 0. Relations between sizes that the shape checks enforce (T >= d) are not known here.

Prims take part through facts of their records (prims/base.py): `bounds` (interval arithmetic, which gives
the exact value of add, sub, a product with a literal, a conversion, a size), `sign` (what is known of the result's
sign given the operands': the same rule transforms/nonfinite.py reads for floats; here only >= 0 or not) and
`int_value`. The Writer records the equations of integer scalars as it emits them, the loops'
counters and trips, and the outer values a body's params stand for (codegen/body.py).
"""
from __future__ import annotations

import re

from ..ir.core import Atom, Eqn, Lit, Var
from ..ir.types import Dim, _plus, _poly, _scale, _text, _times, dim_add, dim_sub

SIGNED = ("i32", "i64")
MAX_STEPS = 64  # counters taken out of one polynomial at most (nested proofs included)
_TOKEN = re.compile(r"ks_v[0-9]+_")  # the name of a counter or an opaque value in a polynomial's factor


class IntSigns:
    """What the Writer knows of the integer scalars of the function it emits (see the module doc)."""

    def __init__(self) -> None:
        self.defs: dict[Var, Eqn] = {}             # an integer scalar -> its equation
        self.alias: dict[Var, Atom] = {}           # a body's param -> the outer atom it stands for
        self.counters: dict[Var, tuple[Atom, int]] = {}  # a loop counter -> (its trip, the loop's depth)
        self._names: dict[str, Var] = {}           # the names of counters and opaque values in polynomials
        self._of: dict[Var, str] = {}
        self._values: dict[Var, Dim | None] = {}
        self._nonneg: dict[Var, bool] = {}
        self.facts: list[Dim] = []  # sizes of the function's dims that its shape checks keep >= 0 (T - d)

    # ---- recording ---------------------------------------------------------------------------------

    # (a body emitted twice, an inlined function at two calls, binds its params anew: what was derived from
    # the old binding is forgotten)

    def define(self, eqn: Eqn) -> None:
        for v in eqn.outs:
            if v.type.rank == 0 and v.type.dtype in SIGNED:
                self._set(self.defs, v, eqn)

    def loop(self, counter: Var, trip: Atom, depth: int) -> None:
        self._set(self.counters, counter, (trip, depth))

    def bind(self, param: Var, outer: Atom) -> None:
        if param.type.rank == 0 and param.type.dtype in SIGNED:
            self._set(self.alias, param, outer)

    def _set(self, table: dict, key: Var, value) -> None:
        old = table.get(key)
        if old is not None and (old is not value if not isinstance(old, tuple) else
                                old[0] is not value[0] or old[1] != value[1]):
            self._values.clear()
            self._nonneg.clear()
        table[key] = value

    # ---- queries -----------------------------------------------------------------------------------

    def nonneg(self, a: Atom) -> bool:
        """Whether the integer scalar a is >= 0 wherever it is computed."""
        a = self._resolve(a)
        if isinstance(a, Lit):
            return _is_int_literal(a) and int(a.value) >= 0
        if not isinstance(a, Var) or a.type.rank != 0 or a.type.dtype not in SIGNED:
            return False
        if a in self._nonneg:
            return self._nonneg[a]
        self._nonneg[a] = False  # (no cycles in an IR, but a guard costs nothing)
        out = a in self.counters
        eqn = self.defs.get(a)
        if not out and eqn is not None:
            from ..prims.base import NONNEG  # (prims import codegen: not at module level)
            out = eqn.prim.sign(eqn, self._sign) >= NONNEG
        if not out:
            v = self.value(a)
            out = v is not None and self._prove(v, [MAX_STEPS])
        self._nonneg[a] = out
        return out

    def _sign(self, a: Atom) -> int:
        """a's sign as a prim's sign rule reads it (prims/base.py): NONNEG or ANY, a literal's own."""
        from ..prims.base import ANY, NONNEG, literal_sign  # (prims import codegen: not at module level)
        if isinstance(a, Lit):
            return literal_sign(a.value) if _is_int_literal(a) else ANY
        return NONNEG if self.nonneg(a) else ANY

    def below(self, a: Atom, n: Dim) -> bool:
        """Whether the integer scalar a is at most n - 1 (n a size) wherever it is computed."""
        v = self.value(a)
        return v is not None and self._prove(dim_sub(dim_sub(n, 1), v), [MAX_STEPS])

    def value(self, a: Atom) -> Dim | None:
        """a as a polynomial in sizes, counters and opaque values (None: not an integer scalar known here)."""
        a = self._resolve(a)
        if isinstance(a, Lit):
            return int(a.value) if _is_int_literal(a) else None
        if not isinstance(a, Var) or a.type.rank != 0 or a.type.dtype not in SIGNED:
            return None
        if a in self._values:
            return self._values[a]
        self._values[a] = None
        if a in self.counters:
            out = self._name(a)
        else:
            out = self._exact(a)
        self._values[a] = out
        return out

    def affine(self, a: Atom, counter: Var, inside: set) -> bool:
        """Whether the integer scalar a moves by a fixed step with the loop counter: made outside the loop body
        (`inside`: the values the body makes), or a polynomial of degree <= 1 in the counter whose opaque values
        are made outside. An index read from memory, a product of the counter with itself or a `//` of it is not."""
        a = self._resolve(a)
        if not isinstance(a, Var) or (a not in inside and a is not counter):
            return True
        v = self.value(a)
        if v is None:
            return False
        c = self._of.get(counter)
        for m in _poly(v):
            if c is not None and m.count(c) > 1:
                return False
            if any(n in self._names and self._names[n] in inside for n in m):
                return False
        return True

    def rising(self, a: Atom, counter: Var, varying: set) -> bool:
        """Whether the integer scalar a never decreases as the loop counter grows, all else fixed: a polynomial of
        degree <= 1 in the counter, with a coefficient shown >= 0, whose other counters and opaque values are
        none of `varying` (the body's values that change from one iteration to the next). Its largest value in
        the loop is then its value at the last count (body.py's range guards)."""
        v = self.value(a)
        c = self._of.get(counter)
        if v is None or c is None:
            return False
        poly = _poly(v)
        for m in poly:
            names = [t for f in m for t in _TOKEN.findall(f)]
            if any(self._names.get(t) in varying for t in names if t != c) or names.count(c) > m.count(c):
                return False  # (the counter inside a `//` factor: not linear)
        parts = _split(poly, c)
        return parts is not None and bool(parts[0]) and self._prove(_text(parts[0]), [MAX_STEPS])

    # ---- inside --------------------------------------------------------------------------------------

    def _resolve(self, a: Atom) -> Atom:
        while isinstance(a, Var) and a in self.alias:
            a = self.alias[a]
        return a

    def _name(self, v: Var) -> str:
        if v not in self._of:
            self._of[v] = f"ks_v{len(self._of)}_"
            self._names[self._of[v]] = v
        return self._of[v]

    def _exact(self, v: Var) -> Dim | None:
        """v's value from its equation: the prim's int_value rule, else its bounds rule when that gives one value
        without a `//`; else v is an opaque value of its own (defined here: its sign is its prim's)."""
        eqn = self.defs.get(v)
        if eqn is None:
            return None
        if eqn.prim.int_value is not None:
            out = eqn.prim.int_value(eqn, self.value, self.nonneg)
            if out is not None:
                return out
        if eqn.prim.bounds is not None and len(eqn.outs) == 1:
            def exact(x):
                e = self.value(x)
                return None if e is None else (e, dim_add(e, 1))
            r = eqn.prim.bounds(eqn, exact)
            if r is not None and dim_sub(r[1], r[0]) == 1 and (isinstance(r[0], int) or "//" not in r[0]):
                return r[0]
        return self._name(v)

    def _prove(self, p: Dim, budget: list[int], facts: bool = True) -> bool:
        """Whether the polynomial p (of sizes, counters, opaque values) is >= 0 (see the module doc)."""
        poly = _poly(p)
        while True:
            budget[0] -= 1
            if budget[0] < 0:
                return False
            ctrs = {n for m in poly for n in m if n in self._names and self._names[n] in self.counters}
            if not ctrs:
                break
            c = max(ctrs, key=lambda n: self.counters[self._names[n]][1])
            parts = _split(poly, c)
            if parts is None:
                return False
            coef, rest = parts
            if self._prove(_text(coef), budget):
                poly = rest  # c = 0
                continue
            if not self._prove(_text(_scale(coef, -1)), budget):
                return False
            trip = self.value(self.counters[self._names[c]][0])
            if trip is None:
                return False
            poly = _plus(rest, _times(coef, _plus(_poly(trip), {(): -1})))  # c = trip - 1
        if all(k >= 0 and not any(n in self._names and not self.nonneg(self._names[n]) for n in m)
               for m, k in poly.items()):
            return True
        # what is left may be a size the shape checks keep >= 0, plus more that is (T - 1 - r with r < d is T - d)
        return facts and any(self._prove(_text(_plus(poly, _scale(_poly(f), -1))), budget, False)
                             for f in self.facts)


def _split(poly: dict, c: str) -> tuple[dict, dict] | None:
    """A polynomial as coef * c + rest (None when it is of degree 2 or more in c)."""
    coef: dict = {}
    rest: dict = {}
    for m, k in poly.items():
        if m.count(c) > 1:
            return None
        if c in m:
            rm = list(m)
            rm.remove(c)
            coef[tuple(rm)] = coef.get(tuple(rm), 0) + k
        else:
            rest[m] = k
    return coef, rest


def _is_int_literal(a: Lit) -> bool:
    return a.type.rank == 0 and a.type.dtype in SIGNED and not isinstance(a.value, bool)
