"""Names for the values the source does not name, after what computes them: `exp_icf` for exp(icf[k, r]),
`x_sub_means` for x[i, r] - means[k, r], `qs_sum` for a sum of qs's elements. The Writer gives a value its IR hint
(the user's name, or one the transformations derived from it: d_x, dx) first, this name second, t<N> last.

Two levels at most: an operand lends its name when the source names it (or it is a view of, or a parameter bound
to, a named value); a value made from a value named here gets `<form>_<its name>` (exp_x_sub_means) when no operand
has a source name, and lends that name no further, so names never grow into chains (select_select_...). A body's
parameter bound to a value named here (a fusion's element of scores_max) takes that name on the same terms. A choice
between a value and a literal, select(p, x, 0), is `<x>_if_<p>` (exp_q_if_i_eq_j), or `<x>_unless_<p>`. The test
abs(x) == inf (logsumexp's, of its maximum) is `<x>_is_inf`; what a function returns, when nothing names it, `result`.
"""
from __future__ import annotations

from ..ir.core import Atom, Eqn, Func, Lit, Var, sub_funcs

LONGEST = 20
"""The longest name made here (`alphas_add_icf_sum`); a longer one is shortened to the form and its first operand."""


def derived_names(f: Func) -> dict[Var, str]:
    """A name for each var of f (and of its bodies) that has no hint and can be named after what computes it."""
    base: dict[Var, str] = {}      # vars that stand for a named value: views, bound params, a body's results
    names: dict[Var, str] = {}
    _walk(f, base, names, set())   # (the set: names made from a made name, which lend theirs no further)
    _positions(f, base, names)
    if len(f.results) == 1 and isinstance(f.results[0], Var) and not f.results[0].hint \
            and f.results[0] not in names and f.results[0] not in f.params:
        names[f.results[0]] = "result"  # (what the function returns, when nothing else names it)
    return names


def _positions(f: Func, base: dict[Var, str], names: dict[Var, str]) -> None:
    """An integer scalar the source does not name that picks a position of a named tensor (the operand of a prim that
    `takes` elements: index, gather, ...) is `<tensor>_at`: icf_k_at for the d + j·(2d - j - 1)/2 + i - j - 1 of
    icf_k[...], rather than a name after what computes it (add_d)."""
    for e in f.eqns:
        for body in sub_funcs(e):
            _positions(body, base, names)
        if e.prim.takes is None or not e.ins:
            continue
        of = _name(e.ins[0], base)
        for a in e.ins[1:]:
            if of and isinstance(a, Var) and not a.hint and a not in base and a.type.rank == 0 \
                    and a.type.dtype.startswith(("i", "u")) and len(of) + 3 <= LONGEST:
                names[a] = f"{of}_at"


def _name(a: Atom, base: dict[Var, str]) -> str:
    return (a.hint or base.get(a, "")) if isinstance(a, Var) else ""


def _walk(f: Func, base: dict[Var, str], names: dict[Var, str], compound: set) -> None:
    for e in f.eqns:
        bodies = sub_funcs(e)
        for body in bodies:  # (a body's params are its equation's last operands: a loop's counter is its count's)
            for p, a in zip(reversed(body.params), reversed(e.ins)):
                if not p.hint and _name(a, base) and p.type.dtype == a.type.dtype:
                    base[p] = _name(a, base)
                elif not p.hint and isinstance(a, Var) and a in names and p.type.dtype == a.type.dtype:
                    names[p] = names[a]  # (bound to a value named here: scores_max in a fusion's body)
                    if a in compound:
                        compound.add(p)
            _walk(body, base, names, compound)
        results = next((b.results for b in bodies if len(b.results) == len(e.outs)), [None] * len(e.outs))
        for v, name, r in zip(e.outs, _names_of(e, bodies, base, names, compound), results):
            if not v.hint and name:
                names[v] = name
                if e.prim.view or isinstance(r, Var) and r.hint:  # (a loop's result the source names)
                    base[v] = name
                if isinstance(r, Var) and r in compound:
                    compound.add(v)


def _names_of(e: Eqn, bodies: list[Func], base: dict[Var, str], names: dict[Var, str], compound: set) -> list[str]:
    """The names e's results take: a body's results' (a loop's, an if's, a fusion's), a view's operand's, a
    reduction's `<operand>_<kind>`, else `<form>_<operand>` or `<a>_<form>_<b>` of the named operands of the
    result's element type (of any type when none has it: a comparison's)."""
    if bodies:  # (an if's result is named so only when both branches name it alike)
        given = [[(r.hint or names.get(r, "")) if isinstance(r, Var) else "" for r in b.results] for b in bodies
                 if len(b.results) == len(e.outs)]
        return [n[0] if n and len(set(n)) == 1 else "" for n in zip(*given)] if given else [""] * len(e.outs)
    dim = e.params.get("dim") if not e.ins and len(e.outs) == 1 else None
    if isinstance(dim, str) and dim.isidentifier():  # (the value of a dim: d, read as an integer, is named d)
        base[e.outs[0]] = dim
        return [dim]
    if len(e.outs) != 1 or not e.ins:
        return [""] * len(e.outs)
    first = _name(e.ins[0], base)
    if e.prim.view:
        return [first]
    if e.prim.reduction:  # (of a made name too: exp_sub_scores_sum, the sum of exp(scores - max))
        of = first or (names.get(e.ins[0], "") if isinstance(e.ins[0], Var) else "")
        if not first and isinstance(e.ins[0], Var) and e.ins[0] in compound:
            compound.add(e.outs[0])
        return [f"{of}_{e.prim.reduction}" if of else ""]
    picked = _picked(e, base, names, compound)
    if picked:
        return [picked]
    from ..prims.base import form_name
    form = form_name(e.prim, e.params)
    infinite = _is_inf(e, form, base, names)
    if infinite:
        compound.add(e.outs[0])
        return [infinite]
    dtype = e.outs[0].type.dtype  # (index_add(acc, r, v) is not named after its index r; i == j is i_eq_j)
    same = [a for a in e.ins if isinstance(a, Var) and a.type.dtype == dtype]
    operands = same or [a for a in e.ins if isinstance(a, Var)]
    given = [_name(a, base) for a in operands]  # the source's names (and their views')
    made = [n for a in operands if (n := names.get(a, "")) and not n.startswith(form + "_") and a not in compound]
    both = f"{given[0]}_{form}_{given[1]}" if len(given) == 2 and all(given) else ""
    one = next((f"{form}_{n}" for n in given if n), "")
    for name in (both, one):
        if name and len(name) <= LONGEST and name.isidentifier():
            return [name]
    if made and len(f"{form}_{made[0]}") <= LONGEST:  # (exp of x_sub_means: exp_x_sub_means, no further)
        compound.add(e.outs[0])
        return [f"{form}_{made[0]}"]
    return [""]


def _is_inf(e: Eqn, form: str, base: dict[Var, str], names: dict[Var, str]) -> str:
    """abs(x) == inf (the test logsumexp and softmax make of their maximum) is `<x>_is_inf`: scores_max_is_inf."""
    if form != "eq" or len(e.ins) != 2:
        return ""
    lit = next((a for a in e.ins if isinstance(a, Lit)), None)
    var = next((a for a in e.ins if isinstance(a, Var)), None)
    if lit is None or var is None or not isinstance(lit.value, float) or lit.value != float("inf"):
        return ""
    of = _name(var, base) or names.get(var, "")
    name = f"{of[4:]}_is_inf" if of.startswith("abs_") else ""
    return name if len(name) <= LONGEST and name.isidentifier() else ""


def _picked(e: Eqn, base: dict[Var, str], names: dict[Var, str], compound: set) -> str:
    """A choice between a value and a literal (a prim whose record says its branches are `lazy`: select(p, x, 0))
    is `<x>_if_<p>` (`<x>_unless_<p>` when the literal is picked where p holds): exp_q_if_i_eq_j, the diagonal of a
    triangular factor, rather than select_exp_q beside the select(i == j, exp_q, below) of the whole factor."""
    if len(e.prim.lazy) != 2 or len(e.ins) != 3 or not isinstance(e.ins[0], Var):
        return ""
    x, y = (e.ins[k] for k in e.prim.lazy)
    if isinstance(x, Var) == isinstance(y, Var):
        return ""
    value, word = (x, "if") if isinstance(x, Var) else (y, "unless")
    cond = _name(e.ins[0], base) or names.get(e.ins[0], "")
    of = _name(value, base) or names.get(value, "")
    name = f"{of}_{word}_{cond}"
    if not (cond and of) or len(name) > LONGEST or not name.isidentifier():
        return ""
    if not _name(value, base) or e.ins[0] in compound:
        compound.add(e.outs[0])
    return name
