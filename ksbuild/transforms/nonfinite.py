"""mask_nonfinite: a product of a (co)tangent by a value that may be inf or nan is masked (0 where the
(co)tangent is 0).

Requires: a Func (a derivative program: the jvp's primal and tangent equations together). Guarantees: the same
function, where every `ctmul(c, y)` (a (co)tangent c times a value y: the tangent terms of the derivative rules and
mul's transpose) whose y may be nonfinite although the function's params are finite is `mulz(c, y)`: the same value
where y is finite, and 0 where c is 0 against an inf or nan y.

Why: a value computed on the way that the result does not read (sqrt of a negative in a branch not taken, on the
side of a select that is discarded, x ** -2 at 0) is nan or inf; its zero (co)tangent then met a rule's plain
product (tanh's 1 - t², mul's other operand) and 0 * nan = nan spread into the derivative, where torch, which
never differentiates what the result does not read, gives a number (fuzz/known.py had it as
"nonfinite-intermediate"). The fact "may be nonfinite" is a forward analysis: the results of an equation whose
record says it may give inf or nan from finite operands of the signs known (Prim.nonfinite: log of a value not known
> 0, x / y, an external function, a constant holding inf), and everything computed from one; the signs are the
records' too (Prim.sign: exp(x) >= 0, x * x >= 0, a sum of those). Products of values that are finite wherever the
params are stay plain ctmuls (no cost). Overflow (exp of a large x, x * y past the largest float), a reduction's
-inf over an empty axis and an inf written as a literal are not counted. Inside an if's branches or a loop's body
the fact is per body: every float param may be nonfinite when an operand of the equation may be, or when the body
itself makes one (a loop's carries).
"""
from __future__ import annotations

from ..ir.core import Eqn, Func, Lit, Var, freeze
from ..prims.base import ANY, literal_sign
from .rewrite import walk_funcs


def mask_nonfinite(f: Func) -> Func:
    """f with the products of a (co)tangent by a maybe nonfinite value masked (sub-functions too)."""
    return _Masker(_shared_bodies(f)).body(f, False)[0]


def _shared_bodies(f: Func) -> set[int]:
    """The ids of the bodies that more than one equation holds (a kept call's callee called twice): each is
    rewritten once, as if every param may be nonfinite, so that it stays one function."""
    seen: dict[int, int] = {}
    for g in walk_funcs(f):
        for e in g.eqns:
            for v in e.params.values():
                if isinstance(v, Func):
                    seen[id(v)] = seen.get(id(v), 0) + 1
    return {k for k, n in seen.items() if n > 1}


def lit_sign(a: Lit) -> int:
    """The sign of a literal (prims/base.py ANY, NONNEG, POSITIVE)."""
    return literal_sign(a.value)


def _branch_signs(e: Eqn, branch: str, signs: dict) -> tuple[int, ...]:
    """The sign facts of the params of e's body `branch`: an operand's own, or what the if's condition shows of it in
    that branch (its prim's `implies`: x > c for a literal c >= 0 shows x > 0 in the then branch)."""
    ops = e.ins[1:] if e.prim.sinks else e.ins
    out = [lit_sign(a) if isinstance(a, Lit) else signs.get(a, ANY) for a in ops]
    test = signs.get(("eqn", e.ins[0])) if e.prim.sinks and isinstance(e.ins[0], Var) else None
    if test is None or test.prim.implies is None or branch not in ("then_fn", "else_fn"):
        return tuple(out)
    for x, fact in test.prim.implies(test, branch == "then_fn"):
        out = [max(s, fact) if a is x else s for a, s in zip(ops, out)]
    return tuple(out)


class _Masker:
    """The analysis and the rewrite in one forward walk; a body is done once per set of maybe nonfinite params."""

    def __init__(self, shared: set[int]):
        self.shared = shared
        self.memo: dict[tuple, tuple[Func, tuple[bool, ...]]] = {}
        self.keep: list[Func] = []  # (the bodies memo's ids refer to, kept alive)

    def body(self, f: Func, dirty, signs=()) -> tuple[Func, tuple[bool, ...]]:
        """(f rewritten, which results of f may be nonfinite); dirty: which params may be (True: every one);
        signs: the params' sign facts (prims/base.py ANY, NONNEG, POSITIVE; () for none)."""
        if id(f) in self.shared:
            dirty, signs = True, ()
        dirty = (dirty,) * len(f.params) if isinstance(dirty, bool) else tuple(dirty)
        key = (id(f), dirty, tuple(signs))
        if key not in self.memo:
            self.keep.append(f)
            self.memo[key] = self._walk(f, dirty, signs)
        return self.memo[key]

    def _walk(self, f: Func, dirty, signs) -> tuple[Func, tuple[bool, ...]]:
        maybe: set[Var] = {p for p, d in zip(f.params, dirty) if d and p.type.is_float}
        known: dict = {p: s for p, s in zip(f.params, signs) if s}  # var -> sign; ("eqn", var) -> its eqn
        eqns = [self._eqn(e, maybe, known) for e in f.eqns]
        same = all(a is b for a, b in zip(eqns, f.eqns))
        out = f if same else Func(f.name, f.params, tuple(eqns), f.results, f.result_names, f.plan, f.notes, f.defaults)
        return out, tuple(isinstance(r, Var) and r in maybe for r in f.results)

    def _eqn(self, e: Eqn, maybe: set, signs: dict) -> Eqn:
        """e rewritten (a masked product, or its bodies rewritten); adds its maybe nonfinite results to maybe."""
        def sign(a):
            return lit_sign(a) if isinstance(a, Lit) else signs.get(a, ANY)

        signs[("eqn",) + e.outs[:1]] = e
        subs = [k for k, v in e.params.items() if isinstance(v, Func)]
        if subs:
            e, made = self._host(e, subs, [isinstance(a, Var) and a in maybe for a in e.ins], signs)
            maybe.update(v for v, m in zip(e.outs, made) if m and v.type.is_float)
            return e
        if e.prim.masked is not None and isinstance(e.ins[1], Var) and e.ins[1] in maybe:
            e = Eqn(e.prim.masked, e.ins, e.outs, e.params, e.loc)
        if any(isinstance(a, Var) and a in maybe for a in e.ins) or e.prim.nonfinite(e, sign):
            maybe.update(v for v in e.outs if v.type.is_float)
        if len(e.outs) == 1 and e.outs[0].type.is_float:
            signs[e.outs[0]] = e.prim.sign(e, sign)
        return e

    def _host(self, e: Eqn, subs: list, reads: list, signs: dict) -> tuple[Eqn, list]:
        """An equation with bodies rewritten, and which of its results may be nonfinite. An if's branches and a
        call's callee see which of their params may be, and a branch the sign its condition shows (the else
        branch of `if n < 1e-4` has n > 0); a loop's body too, its carries until nothing changes; any other body
        sees every param as maybe nonfinite when an operand is or when the body makes one."""
        if e.prim.sinks or e.prim.name == "call":
            mask = reads[1:] if e.prim.sinks else reads
            done = {k: self.body(e.params[k], mask, _branch_signs(e, k, signs)) for k in subs}
            made = [any(m[i] for _, m in done.values()) for i in range(len(e.outs))]
        elif e.prim.name == "loop":
            done, made = self._loop(e, reads)
        else:
            dirty = any(reads)
            done = {k: self.body(e.params[k], dirty) for k in subs}
            if not dirty and any(any(m) for _, m in done.values()):
                dirty, done = True, {k: self.body(e.params[k], True) for k in subs}
            made = [dirty] * len(e.outs)
        if all(g is e.params[k] for k, (g, _) in done.items()):
            return e, made
        params = {**e.params, **{k: g for k, (g, _) in done.items()}}
        return Eqn(e.prim, e.ins, e.outs, freeze(params), e.loc), made

    def _loop(self, e: Eqn, reads: list) -> tuple[dict, list]:
        """A loop (operands: the count, consts, carries' first values, stacked xs; its body's params: the counter
        and the same; results: the carries, then the stacked ys): its body's params marked as their operands are,
        and a carry also when the body's result for it is, until that holds."""
        nc, ncar = e.params["n_consts"], e.params["n_carry"]
        mask = [False] + list(reads[1:])
        while True:
            g, made = self.body(e.params["body"], mask)
            grown = [i for i in range(ncar) if made[i] and not mask[1 + nc + i]]
            if not grown:
                break
            for i in grown:
                mask[1 + nc + i] = True
        outs = [made[i] or mask[1 + nc + i] for i in range(ncar)] + list(made[ncar:])
        return {"body": (g, made)}, outs
