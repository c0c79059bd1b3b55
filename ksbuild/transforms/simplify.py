"""simplify: local algebraic rewrites, constant folding and dead-code elimination.

Requires: a Func. Guarantees: an equivalent Func (same values on every input) where
  - each primitive's own `simplify` rule (x + 0 = x, x * 1 = x, select(p, a, a) = a, ...) is applied,
  - nested selects on one condition are flattened (unnest_select),
  - a select between a scatter into zeros and zeros selects the scattered values (select_into_scatter),
  - a scatter into a zero row added at a row adds at the elements directly (nest_updates),
  - a loop's stacked output that is the same every iteration is a broadcast, or the const it reads a row of
    by the counter (invariant_stacks); one value stacked twice is stacked once (repeated_stacks),
  - row n - 1 of a loop's stacked output that is also a carry is the final carry (last_step),
  - in a loop's body, select(iota == k along one axis, v, x) with k the counter (so 0 <= k < the loop's length,
    that axis's size) and v the same along that axis is x with row k replaced by v: index_set (row_update),
  - a clamp that compares strictly compares inclusively: select(x < c, c, x) = select(x <= c, c, x)
    (clamp_inclusive),
  - a product of scaled operands is scaled once: einsum(a · c, b · d) = einsum(a, b) · (c d)
    (scale_after_product),
  - two transposes in a row are one (compose_transposes); two reshapes in a row are one, a transpose moving only
    unit axes is a reshape, a transpose between a reshape merging leading axes and one splitting them again is a
    transpose, not(x == y) is x != y, a select on a literal condition is its side broadcast (transforms/one_form.py),
  - a masked product by a finite nonzero literal is a plain product (plain_product),
  - a sum of a contraction over letters of one operand only sums that operand first (sum_first),
  - a fold of windows that tile their axis (stride = taps, dilation 1: a ConvTranspose whose stride is its
    kernel, the gradient of a 2x2 stride-2 window) is a reshape (tiling_fold),
  - a one-hot select (the derivative of a first-extremum reduction) that is scaled, summed or contracted is
    scattered at its positions instead (transforms/one_hot.py),
  - an equation whose inputs are all scalar literals is folded to a literal; a float32 literal holds a float32
    value (f32_literal),
  - equations whose results are unused are removed (pure IR: nothing has effects),
  - unused results of cond and loop are pruned by their prune rules (via dce).
Each rewrite is one named rule; the pass runs to a fixpoint capped at MAX_ROUNDS.
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Func, Lit, Var
from ..ir.interp import eval_func
from ..ir.types import Type, dim_mul
from ..prims.tensor import parse_spec
from .one_form import one_form_rules
from .one_hot import one_hot_rules

MAX_ROUNDS = 4


def rewrite(eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """The prim's own local simplification of eqn's single output, if it has one."""
    rule = eqn.prim.simplify
    return rule(ins, eqn.outs[0], **eqn.params) if rule is not None else None


def fold(eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """Evaluate an elementwise equation on literals of one value each (scalars, or tensors filled with one
    value: 1: f64[n, k] · -1 = -1: f64[n, k])."""
    if not eqn.prim.elementwise or len(eqn.outs) != 1 or not ins or not all(isinstance(a, Lit) for a in ins):
        return None
    if any(np.ndim(a.value) for a in ins) or eqn.prim.positional:
        return None
    b = Builder()
    ps = [Var(a.type.scalar()) for a in ins]
    outs = b.bind(eqn.prim, ps, dict(eqn.params))
    value = eval_func(b.func("fold", ps, outs), [np.asarray(a.value) for a in ins])[0]
    return Lit(value.item(), eqn.outs[0].type)


def _scatter_base(c: Atom, made: dict[Var, Eqn]) -> list[Eqn] | None:
    """If c = index_add(...(index_add(0, i1, v1)...), ik, vk), those equations, innermost first (each may
    take several indices: index_add(0, i, j, v))."""
    chain = []
    while isinstance(c, Var) and c in made and made[c].prim.name == "index_add":
        chain.append(made[c])
        c = made[c].ins[0]
    return chain[::-1] if chain and isinstance(c, Lit) and c.value == 0 else None


def accumulate(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """a + index_add(...index_add(0, i, v)...) = index_add(...index_add(a, i, v)...): gradients
    scattered into zeros and added to an accumulator are added at their rows directly (then
    updated in place by the codegen, not a whole-tensor add per loop iteration)."""
    if eqn.prim.name != "add" or eqn.outs[0].type.rank == 0:
        return None
    for a, c in (ins, ins[::-1]):
        chain = _scatter_base(c, made)
        if chain is not None and a.type == c.type == eqn.outs[0].type:
            out = a
            for e in chain:
                (out,) = b.bind(e.prim, [out, *e.ins[1:]], dict(e.params))
                made[out] = b.eqns[-1]
            return out
    return None


def nest_updates(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """index_add(a, i, index_add(...index_add(0, j, v)...)) = index_add(...index_add(a, i, j, v)...) when both
    update the same axis (x[i, j] reads x[i] then its element j; its transpose scatters into a zero row and
    adds that row at i): each value is added at its element directly, with no zeroed row and no whole-row
    add (per loop iteration in a reverse loop). Only when the row feeds nothing else (`once`)."""
    if eqn.prim.name != "index_add" or eqn.ins[-1] not in once:
        return None
    chain = _scatter_base(ins[-1], made)
    if chain is None or any(e.params["axis"] != eqn.params["axis"] for e in chain):
        return None
    out = ins[0]
    for e in chain:
        (out,) = b.bind(eqn.prim, [out, *ins[1:-1], *e.ins[1:]], dict(eqn.params))
        made[out] = b.eqns[-1]
    return out


def select_into_scatter(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """select(p, index_add(...index_add(0, i, v)...), 0) = index_add(...index_add(0, i, select(p, v, 0))...)
    for a scalar p, and likewise with the sides swapped: the mask that an if-expression's derivative puts on
    a tensor's cotangent (cond_select) moves onto the few values scattered into it, and the scatter stays one
    that `accumulate` adds into a loop's gradient in place (not a whole-tensor select per iteration)."""
    if eqn.prim.name != "select" or ins[0].type.rank:
        return None
    p, x, y = ins
    for k, (s, other) in enumerate(((x, y), (y, x))):
        chain = _scatter_base(s, made)
        if chain is None or not (isinstance(other, Lit) and other.value == 0) or s.type != eqn.outs[0].type:
            continue
        out = chain[0].ins[0]
        for e in chain:
            zero = Lit(0, e.ins[-1].type.scalar())
            v = b.select(p, e.ins[-1], zero) if k == 0 else b.select(p, zero, e.ins[-1])
            (out,) = b.bind(e.prim, [out, *e.ins[1:-1], v], dict(e.params))
            made[out] = b.eqns[-1]
        return out
    return None


INCLUSIVE = {"lt": "le", "gt": "ge"}


def clamp_inclusive(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """select(x < c, c, x) = select(x <= c, c, x) (and > as >=): at x = c both give c. A clamp is so in one form
    whichever frontend made it (ONNX Clip compares strictly, torch's hardtanh/relu6 not, for their derivatives at
    the bound, which are taken before this pass runs); ReLU's form, so a -0 clamped at 0 is +0 as in a ReLU."""
    if eqn.prim.name != "select" or not isinstance(ins[0], Var) or ins[0] not in made:
        return None
    p, c, x = ins
    cmp = made[ins[0]]
    if cmp.prim.name != "compare" or cmp.params["op"] not in INCLUSIVE or cmp.ins[0] is not x \
            or not _same_scalar(cmp.ins[1], c):
        return None
    return b.select(b.compare(x, cmp.ins[1], op=INCLUSIVE[cmp.params["op"]]), c, x)


def scale_after_product(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """einsum(a · c, b · d) = einsum(a, b) · (c d) for float scalar literals c, d (products read once): one
    scaling of the product, in the form torch.export's scaled_dot_product_attention has ((q kᵀ) · s), whatever
    the frontend (torch.onnx.export writes (q · √s)(kᵀ · √s)); c d rounded to the dtype."""
    if eqn.prim.name != "einsum" or not eqn.outs[0].type.is_float:
        return None
    operands, factor = [], 1.0
    for old, a in zip(eqn.ins, ins):
        c, x = _scaled(a, made) if old in once else (1.0, a)
        operands.append(x)
        factor *= c
    if operands == ins:
        return None
    product = b.bind(eqn.prim, operands, dict(eqn.params))[0]
    dtype = eqn.outs[0].type.dtype
    return b.mul(product, Lit(float(np.array(factor, dtype=np.float32 if dtype == "f32" else np.float64)),
                              Type(dtype)))


def compose_transposes(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """transpose(transpose(x, p), q) = transpose(x, [p[i] for i in q]) (x itself for the identity), when the inner
    transpose is read once: one permutation, as the other frontend writes it."""
    inner = made.get(ins[0]) if eqn.prim.name == "transpose" and eqn.ins[0] in once and isinstance(ins[0], Var) \
        else None
    if inner is None or inner.prim.name != "transpose":
        return None
    perm = tuple(inner.params["perm"][i] for i in eqn.params["perm"])
    x = inner.ins[0]
    return x if perm == tuple(range(len(perm))) else b.transpose(x, perm=perm)


def _scaled(a: Atom, made: dict[Var, Eqn]) -> tuple[float, Atom]:
    """(c, x) when a = x · c for a scalar float literal c, else (1, a)."""
    e = made.get(a) if isinstance(a, Var) else None
    if e is None or e.prim.name != "mul":
        return 1.0, a
    for lit, x in (e.ins, e.ins[::-1]):
        if isinstance(lit, Lit) and not lit.type.rank and lit.type.is_float and x.type == a.type and \
                isinstance(lit.value, (float, np.floating)):
            return float(lit.value), x
    return 1.0, a


def _same_scalar(a: Atom, c: Atom) -> bool:
    """a and c are one value: the same var, or scalar literals of one type and value."""
    if a is c:
        return True
    return isinstance(a, Lit) and isinstance(c, Lit) and a.type == c.type and not a.type.rank and \
        np.ndim(a.value) == 0 and a.value == c.value


def unnest_select(ins: list[Atom], made: dict[Var, Eqn]) -> list[Atom] | None:
    """select(p, select(p, a, b), c) = select(p, a, c) and select(p, a, select(p, b, c)) =
    select(p, a, c): under the same condition an inner select always takes the same side (the
    masks of per-lane branch derivatives stack up like this). The new operands, or None."""
    p, x, y = ins
    ex = made.get(x) if isinstance(x, Var) else None
    if ex is not None and ex.prim.name == "select" and ex.ins[0] is p and ex.ins[1].type == x.type:
        return [p, ex.ins[1], y]
    ey = made.get(y) if isinstance(y, Var) else None
    if ey is not None and ey.prim.name == "select" and ey.ins[0] is p and ey.ins[2].type == y.type:
        return [p, x, ey.ins[2]]
    return None


def sum_first(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """Σ_n einsum('nka,kab->nkb', x, y) = einsum('ka,kab->kb', Σ_n x, y): when every summed output
    letter belongs to one operand alone, that operand is summed before the product, which then
    has fewer terms. Only when the product feeds nothing else (`once`): reverse mode through a
    broadcast makes such sums (the GMM's mean gradient loses a whole batched matrix product)."""
    if eqn.prim.name != "reduce_sum" or eqn.ins[0] not in once or not isinstance(ins[0], Var):
        return None
    e = made.get(ins[0])
    if e is None or e.prim.name != "einsum":
        return None
    letters = list(parse_spec(e.params["spec"]))
    out = letters[2]
    summed = {out[i] for i in eqn.params["axes"]}
    for k in (0, 1):
        mine, other = letters[k], letters[1 - k]
        kept = "".join(c for c in mine if c not in summed)
        if summed & set(other) or not kept:
            continue
        operands = list(e.ins)
        operands[k] = b.reduce_sum(operands[k], axes=tuple(i for i, c in enumerate(mine) if c in summed))
        spec = [kept, other] if k == 0 else [other, kept]
        return b.einsum(*operands, spec=f"{spec[0]},{spec[1]}->{''.join(c for c in out if c not in summed)}")
    return None


def invariant_stacks(b: Builder, e: Eqn, made: dict[Var, Eqn]) -> dict[Var, Atom]:
    """A loop's stacked output that every iteration gives the same value needs no stacking: a const (or literal)
    of the loop stacked n times is that value broadcast to [n, ...] (a view, no memory), and row `counter` of a
    const with n rows stacked over the counter is the const itself. Only for a loop that runs its whole length
    (otherwise the rows past its count are zeros). After hoist, a vjp's forward pass keeps a table's values as a
    residual per iteration like this (GMM: an [n, K, d] copy of the [K, d] exp table)."""
    p = e.params
    if e.prim.name != "loop" or not _full_length(e.ins[0], p["length"], made):
        return {}
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    consts = dict(zip(body.params[1:1 + nc], e.ins[1:1 + nc]))
    inner = {o: q for q in body.eqns for o in q.outs}
    out: dict[Var, Atom] = {}
    for r, v in zip(body.results[ncar:], e.outs[ncar:]):
        if isinstance(r, Lit) or r in consts:
            out[v] = b.broadcast_to(consts.get(r, r), shape=v.type.shape)
        elif r in inner and _row_at_counter(inner[r], body.params[0], consts, v):
            out[v] = consts[inner[r].ins[0]]
    return out


def repeated_stacks(e: Eqn) -> dict[Var, Atom]:
    """A loop whose body gives one value as two stacked outputs stacks it once: the second output is the first
    (a vjp's forward pass keeps sin θ and cos θ of a BA observation as residuals of two derivative terms each)."""
    if e.prim.name != "loop":
        return {}
    ncar = e.params["n_carry"]
    first: dict[Var, Var] = {}
    out: dict[Var, Atom] = {}
    for r, v in zip(e.params["body"].results[ncar:], e.outs[ncar:]):
        if isinstance(r, Var) and first.setdefault(r, v) is not v:
            out[v] = first[r]
    return out


def _full_length(trip: Atom, length, made: dict[Var, Eqn]) -> bool:
    if isinstance(trip, Lit):
        return trip.value == length
    e = made.get(trip)
    return e is not None and e.prim.name == "dim_size" and e.params["dim"] == length


def _row_at_counter(e: Eqn, counter: Var, consts: dict, stacked: Var) -> bool:
    """Whether e is index[axis=0](c, counter) of a const c whose outer value has the stacked output's type."""
    return (e.prim.name == "index" and e.params["axis"] == 0 and e.ins[1] is counter and e.ins[0] in consts
            and consts[e.ins[0]].type == stacked.type)


def last_step(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """Row n - 1 of the stacked output Y of a forward loop run its full n steps, where each step's row is also a
    carry, is the loop's final carry: index(Y, n - 1) = carry, reshaped to the row's shape. Through views between
    them that keep the row's elements in order: a reshape keeping the leading axis or adding and dropping unit axes
    only, a transpose that moves no other axis of size > 1 past another. An ONNX GRU's or LSTM's Y[-1] (the last
    hidden state) and a batch-first torch.nn.LSTM's out[:, -1] then read the carry, and Y, steps × hidden, is not
    kept (dce prunes it from the loop: 2.5 KB of a Cortex-M4 RNN's 11 KB workspace)."""
    if eqn.prim.name not in ("index", "gather") or not isinstance(ins[1], Lit) or ins[1].type.rank:
        return None
    x, axis = ins[0], eqn.params["axis"]
    while isinstance(x, Var) and x in made and made[x].prim.name in ("transpose", "reshape"):
        view = made[x]
        src = view.ins[0].type.shape
        if view.prim.name == "transpose":
            perm = list(view.params["perm"])
            rest = [a for a in perm if a != perm[axis] and src[a] != 1]
            if rest != sorted(rest):
                return None
            axis = perm[axis]
        elif axis != 0 or src[:1] != x.type.shape[:1]:
            axis = _unit_reshape_axis(src, x.type.shape, axis)
            if axis is None:
                return None
        x = view.ins[0]
    loop = made.get(x) if isinstance(x, Var) else None
    if axis != 0 or loop is None or loop.prim.name != "loop" or loop.params["reverse"]:
        return None  # (a reverse loop computes row n - 1 first)
    n = loop.params["length"]
    if not isinstance(n, int) or ins[1].value != n - 1 or not _full_length(loop.ins[0], n, made):
        return None
    ncar, body = loop.params["n_carry"], loop.params["body"]
    row = body.results[loop.outs.index(x)]
    carries = list(body.results[:ncar])
    if loop.outs.index(x) < ncar or row not in carries:
        return None
    return b.reshape(loop.outs[carries.index(row)], shape=eqn.outs[0].type.shape)


def tiling_fold(b: Builder, eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """fold(y, axis) = reshape(y) when the windows tile the axis: each output element is one window's tap,
    added to the fold's zero (exact, but for a -0.0 tap, which the fold makes +0.0)."""
    if eqn.prim.name != "fold" or isinstance(ins[0], Lit):
        return None
    shape, p = ins[0].type.shape, eqn.params
    windows, taps = shape[p["axis"]], shape[p["axis"] + 1]
    if p["stride"] != taps or (p["dilation"] != 1 and taps != 1) or p["n"] != dim_mul(windows, taps):
        return None
    return b.reshape(ins[0], shape=eqn.outs[0].type.shape)


def _unit_reshape_axis(src: tuple, dst: tuple, axis: int) -> int | None:
    """The axis of src that axis `axis` of dst is, when reshaping src to dst only adds or drops axes of size 1
    (None otherwise, or when `axis` is one of those)."""
    keep_src = [i for i, d in enumerate(src) if d != 1]
    keep_dst = [i for i, d in enumerate(dst) if d != 1]
    if [src[i] for i in keep_src] != [dst[i] for i in keep_dst] or axis not in keep_dst:
        return None
    return keep_src[keep_dst.index(axis)]


def plain_product(eqn: Eqn, ins: list[Atom]):
    """x ⊙ c = x * c (mulz or mulzz as mul: the record's `unmasked` prim) for a finite nonzero scalar literal c: x * c
    is then 0, inf or nan exactly where x ⊙ c is, and needs no select (a division by a constant: its factor 1/c folds
    to a literal)."""
    if eqn.prim.unmasked is None:
        return eqn.prim
    finite = [isinstance(a, Lit) and not a.type.rank and a.value != 0 and np.isfinite(a.value) for a in ins]
    return eqn.prim.unmasked if any(finite) else eqn.prim


def f32_literal(a: Atom) -> Atom:
    """A float32 literal holds its value rounded to float32, as the C++ and the interpreter use it (a frontend's
    Python float 0.044715 and ONNX's float32 0.044714998 are one literal)."""
    if not isinstance(a, Lit) or a.type.dtype != "f32" or not isinstance(a.value, float):
        return a
    value = float(np.float32(a.value))
    return a if value == a.value or np.isnan(value) else Lit(value, a.type)


def used_once(f: Func) -> set[Var]:
    """The variables of f's body read by exactly one equation input or result."""
    count: dict[Var, int] = {}
    for a in [a for e in f.eqns for a in e.ins] + list(f.results):
        if isinstance(a, Var):
            count[a] = count.get(a, 0) + 1
    return {v for v, c in count.items() if c == 1}


def row_update(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], bounds: dict[Var, object]) -> Atom | None:
    """select(m, v, x) where m is iota == k along one axis of x (reshaped to x's rank), k a loop counter whose
    bound (the loop's length: the counter runs below it) is that axis's size, and v is the same along that axis:
    x with row k replaced by v, `index_set`, in place where x dies. `torch.where((torch.arange(b) == i)[:, None,
    None], new, result)` in a loop over i (GradBench's ht chains its 22 bones so) selected over all b rows of the
    carry, and over all directions' rows of its tangent, at every step."""
    if not bounds or eqn.prim.name != "select" or len(ins) != 3:
        return None
    m, v, x = ins
    out = eqn.outs[0].type
    if not isinstance(m, Var) or not isinstance(x, Var) or x.type != out or v.type.rank > out.rank:
        return None
    mask = m
    while isinstance(mask, Var) and mask in made and made[mask].prim.name == "reshape":
        mask = made[mask].ins[0]
    e = made.get(mask) if isinstance(mask, Var) else None
    if e is None or e.prim.name != "compare" or e.params.get("op") != "eq" or mask.type.rank != 1:
        return None
    n = mask.type.shape[0]
    k = next((c for a, c in (e.ins, e.ins[::-1]) if _iota_of(a, n, made) and c in bounds), None)
    if k is None or bounds[k] != n or n == 1 or [d for d in m.type.shape if d != 1] != [n]:
        return None
    axis = out.rank - m.type.rank + list(m.type.shape).index(n)
    full = (1,) * (out.rank - v.type.rank) + tuple(v.type.shape)
    if axis < 0 or out.shape[axis] != n or full[axis] != 1:
        return None
    row = tuple(out.shape[:axis] + out.shape[axis + 1:])
    if isinstance(v, Lit):
        value: Atom = Lit(v.value, Type(out.dtype, row))
    else:
        value = v
        if tuple(full[:axis] + full[axis + 1:]) != tuple(v.type.shape):
            value = b.reshape(value, shape=tuple(full[:axis] + full[axis + 1:]))
        if tuple(value.type.shape) != row:
            value = b.broadcast_to(value, shape=row)
    return b.index_set(x, k, value, axis=axis)


def _iota_of(a: Atom, n, made: dict[Var, Eqn]) -> bool:
    """Whether a is iota[axis=0, shape=(n,)]: the positions 0..n-1 (the positional prim)."""
    e = made.get(a) if isinstance(a, Var) else None
    return e is not None and e.prim.positional and tuple(e.params.get("shape", ())) == (n,) \
        and e.params.get("axis") == 0


def simplify_once(f: Func, counter_bound=None) -> Func:
    """One forward sweep of rewrites and folding, recursing into sub-functions; counter_bound: f is a loop's body
    and its counter (the first param) runs below this (the loop's length)."""
    b = Builder()
    params = [Var(p.type, p.hint) for p in f.params]
    bounds = {params[0]: counter_bound} if counter_bound is not None and params else {}
    env: dict[Var, Atom] = dict(zip(f.params, params))
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    made: dict[Var, Eqn] = {}
    once = used_once(f)
    for eqn in f.eqns:
        ins = [f32_literal(read(a)) for a in eqn.ins]
        b.loc = eqn.loc
        while eqn.prim.name == "select" and (flat := unnest_select(ins, made)) is not None:
            ins = flat
        acc = accumulate(b, eqn, ins, made) or sum_first(b, eqn, ins, made, once) or \
            select_into_scatter(b, eqn, ins, made) or nest_updates(b, eqn, ins, made, once) or \
            last_step(b, eqn, ins, made) or one_hot_rules(b, eqn, ins, made) or \
            clamp_inclusive(b, eqn, ins, made) or scale_after_product(b, eqn, ins, made, once) or \
            compose_transposes(b, eqn, ins, made, once) or one_form_rules(b, eqn, ins, made, once) or \
            row_update(b, eqn, ins, made, bounds) or tiling_fold(b, eqn, ins)
        if acc is not None:
            env[eqn.outs[0]] = acc
            continue
        if len(eqn.outs) == 1:
            new = rewrite(eqn, ins) or fold(eqn, ins)
            if new is not None:
                env[eqn.outs[0]] = new
                continue
        length = eqn.params.get("length") if eqn.prim.name == "loop" else None  # (its counter runs below it)
        sub = {k: _sweep(v, length if k == "body" else None) if isinstance(v, Func) else v
               for k, v in eqn.params.items()}
        b.loc = eqn.loc
        outs = b.bind(plain_product(eqn, ins), ins, sub)
        b.name_like(outs, eqn.outs)
        made.update((o, b.eqns[-1]) for o in outs)
        stacks = invariant_stacks(b, b.eqns[-1], made) | repeated_stacks(b.eqns[-1])
        env.update(zip(eqn.outs, (stacks.get(o, o) for o in outs)))
    return b.func(f.name, params, [read(r) for r in f.results], f.result_names)


def _sweep(f: Func, counter_bound=None) -> Func:
    """One sweep of rewrites, then dead code removed (dce prunes an if or loop's sub-functions only when
    their results or operands change, so each sub-function gets its own)."""
    from .dce import dce
    return dce(simplify_once(f, counter_bound))


def simplify(f: Func) -> Func:
    """Rewrite and remove dead code until nothing changes (at most MAX_ROUNDS sweeps a level of nesting).

    Each sweep covers the whole function, sub-functions included (a fixpoint per sub-function would print
    and sweep an if nested d deep d times in every sweep of the if around it). The texts compared show dense
    constants by digest (a network's weights in base64 made the text of bert_small 150 MB: printing and
    comparing it took 5 of the 9 s of its Python)."""
    from ..ir.printer import print_func

    text = print_func(f, elide_over=0)
    for _ in range(MAX_ROUNDS * (nesting_depth(f) + 1)):
        f = _sweep(f)
        new = print_func(f, elide_over=0)
        if new == text:
            break
        text = new
    return f


def nesting_depth(f: Func) -> int:
    """How deep sub-functions nest in f (0: none), without recursion."""
    deepest, stack = 0, [(f, 0)]
    while stack:
        g, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(v, depth + 1) for e in g.eqns for v in e.params.values() if isinstance(v, Func)]
    return deepest
