"""per_row: run a chain of layers that treat each image of a batch alone one image at a time.

Requires: contractions and convolutions selected (select_backend), nothing fused yet.
Guarantees: the same function, with each worthwhile chain of row-wise equations replaced by one
`loop` over the n rows of its values (axis 0, the batch): the loop's body is the chain on a
single row ([1, ...] instead of [n, ...]), reading row k of the values it slices and the others
(weights) whole, and writing its results into row k of the loop's outputs (plan_memory places
them there). Equations of the chain's stretch that read none of its values (constants, a kernel's
Winograd transform) move before the loop.

Why: a CNN evaluated layer by layer over a batch writes each activation for every image before
the next layer reads it back, through main memory or L3 once the batch is large; image by image,
an activation is read again while it is still in L1/L2. But the loop reads every weight once per
row: a chain is cut where its weights so far outweigh one row's activations so far (a ResNet's
first layers run image by image, its deep 512-channel layers over the batch, where each weight is
read once for all images). A chain is worthwhile when it (so cut) holds a convolution and another
layer (a convolution, a pooling or other reduction: not a view, not elementwise work, which joins
a convolution's epilogue anyway). Matrix products stay outside: over the whole batch they read
each weight once for all rows.

Which equations are row-wise is each primitive's `rows` rule (prims/base.py); elementwise
primitives are row-wise by construction. With threads > 1 the function is unchanged: the
parallelize pass splits the batch loops of the layers instead.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Atom, Eqn, Func, Lit, Var, freeze
from ..ir.types import Dim, Type, numpy_dtype
from ..prims.base import PRIMS, broadcast_rows


def per_row(f: Func, threads: int = 0) -> Func:
    """f with its worthwhile row-wise chains run one row at a time."""
    if threads > 1 or not any(e.prim.name == "convolve" for e in f.eqns):  # (a chain needs a convolution)
        return f
    eqns = list(f.eqns)
    out: list[Eqn] = []
    i = 0
    while i < len(eqns):
        chain = _chain(eqns, i)
        if chain is None:
            out.append(eqns[i])
            i += 1
            continue
        n, group, moved, end = chain
        later = {a for e in eqns[end:] for a in e.ins if isinstance(a, Var)} | \
            {a for a in f.results if isinstance(a, Var)}
        out += moved + _looped(group, n, later)
        i = end
    if len(out) == len(eqns) and all(a is b for a, b in zip(out, eqns)):
        return f
    return Func(f.name, f.params, tuple(out), f.results, f.result_names, f.plan, f.notes, f.defaults)


def row_rule(eqn: Eqn, n: Dim):
    """(params on one row, which operands are sliced) when eqn is row-wise over n rows, else None."""
    if eqn.prim.rows is not None:
        return eqn.prim.rows(eqn, n)
    if eqn.prim.elementwise and not eqn.prim.positional:  # (iota makes its shape: it reads no rows)
        return broadcast_rows(eqn, n)
    return None


def _chain(eqns: list[Eqn], i: int):
    """The worthwhile chain starting at eqns[i]: (n, its row-wise equations with their row rules, the equations
    moved before it, the index after it), or None."""
    first = eqns[i]
    if not first.outs or first.outs[0].type.rank == 0:
        return None
    n = first.outs[0].type.shape[0]
    if n == 1 or row_rule(first, n) is None:
        return None
    group: list[tuple[Eqn, tuple]] = []
    moved: list[Eqn] = []
    made: set[Var] = set()
    j = i
    while j < len(eqns):
        e = eqns[j]
        reads = any(isinstance(a, Var) and a in made for a in e.ins)
        rule = row_rule(e, n)
        if rule is not None and (reads or any(rule[1])) and \
                all(s or not (isinstance(a, Var) and a in made) for a, s in zip(e.ins, rule[1])):
            group.append((e, rule))
            made.update(e.outs)
        elif not reads:
            moved.append(e)
        else:
            break
        j += 1
    group = group[:_paying_prefix(group)]
    while group and group[-1][0].prim.view:  # a trailing view (the flatten before a matrix product) stays out
        group.pop()
    layers = [e for e, _ in group if not (e.prim.view or e.prim.elementwise)]
    if len(layers) < 2 or not any(e.prim.name == "convolve" for e in layers):
        return None
    # the equations after the last one in the chain go back in place; the moved ones before it stay moved
    last = eqns.index(group[-1][0])
    moved = [e for e in moved if eqns.index(e) < last]
    return n, group, moved, last + 1


def _paying_prefix(group: list[tuple[Eqn, tuple]]) -> int:
    """How many of the chain's first equations pay for running row by row: the row loop reads every weight
    (an operand read whole) once per row, where the layers over the whole batch read it once; that is worth it
    while the weights read so far take no more bytes than one row's activations made so far (which then stay
    in cache). Sizes must be literal (else 0: nothing is looped)."""
    made: set[Var] = set()
    weights: set[Var] = set()
    weight_bytes = row_bytes = 0
    best = 0
    for k, (e, (_, sliced)) in enumerate(group):
        for a, s in zip(e.ins, sliced):
            if isinstance(a, Var) and not s and a not in made and a not in weights:
                weights.add(a)
                size = _bytes(a.type.shape, a.type.dtype)
                if size is None:
                    return best
                weight_bytes += size
        if not e.prim.view:
            for v in e.outs:
                size = _bytes(v.type.shape[1:], v.type.dtype)
                if size is None:
                    return best
                row_bytes += size
        made.update(e.outs)
        if weight_bytes <= row_bytes:
            best = k + 1
    return best


def _bytes(shape, dtype: str) -> int | None:
    """The bytes of a tensor of literal shape (None for a symbolic one)."""
    if not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape) * np.dtype(numpy_dtype(dtype)).itemsize


def _row_type(t: Type) -> Type:
    return Type(t.dtype, (1,) + tuple(t.shape[1:]))


def _looped(group: list[tuple[Eqn, tuple]], n: Dim, later: set) -> list[Eqn]:
    """The equations running the chain as one loop over the n rows: views of its inputs with a unit axis added,
    the loop, and views of its stacked outputs as the chain's own result vars."""
    i64 = Type("i64")
    before: list[Eqn] = []
    k = Var(i64, "row")
    consts: dict[Var, Var] = {}   # an operand read whole -> the body's param
    xs: dict[Var, Var] = {}       # an operand sliced -> the body's param (its row)
    x_views: dict[Var, Var] = {}  # an operand sliced -> its [n, 1, ...] view, the loop's operand
    env: dict[Var, Atom] = {}     # a chain value -> its row in the body
    body_eqns: list[Eqn] = []
    for e, (params, sliced) in group:
        ins = []
        for a, s in zip(e.ins, sliced):
            if isinstance(a, Lit):
                ins.append(Lit(a.value, _row_type(a.type)) if s else a)
            elif a in env:  # (a chain value: sliced, as _chain checked)
                ins.append(env[a])
            elif s:
                if a not in xs:
                    view = Var(Type(a.type.dtype, (n, 1) + tuple(a.type.shape[1:])), a.hint)
                    before.append(Eqn(PRIMS["reshape"], (a,), (view,), freeze({"shape": view.type.shape}), e.loc))
                    x_views[a] = view
                    xs[a] = Var(_row_type(a.type), a.hint)
                ins.append(xs[a])
            else:
                consts.setdefault(a, Var(a.type, a.hint))
                ins.append(consts[a])
        outs = tuple(Var(_row_type(v.type), v.hint) for v in e.outs)
        want = e.prim.type_rule([a.type for a in ins], **params)
        if tuple(want) != tuple(v.type for v in outs):
            raise KsbuildError(f"internal: the rows rule of {e.prim.name} gives {want}, not one row")
        body_eqns.append(Eqn(e.prim, tuple(ins), outs, freeze(params), e.loc))
        env.update(zip(e.outs, outs))
    escaping = [v for e, _ in group for v in e.outs if v in later]
    body = Func("per_row", (k,) + tuple(consts.values()) + tuple(xs.values()), tuple(body_eqns),
                tuple(env[v] for v in escaping))
    stacked = tuple(Var(Type(v.type.dtype, (n, 1) + tuple(v.type.shape[1:])), v.hint or "stacked") for v in escaping)
    trip: Atom
    if isinstance(n, int):
        trip = Lit(n, i64)
    else:
        trip = Var(i64, "rows")
        before.append(Eqn(PRIMS["dim_size"], (), (trip,), freeze({"dim": n}), group[0][0].loc))
    loop = Eqn(PRIMS["loop"], (trip,) + tuple(consts) + tuple(x_views.values()), stacked,
               freeze(dict(body=body, n_consts=len(consts), n_carry=0, length=n, reverse=False)), group[0][0].loc)
    after = [Eqn(PRIMS["reshape"], (s,), (v,), freeze({"shape": v.type.shape}), group[0][0].loc)
             for s, v in zip(stacked, escaping)]
    return before + [loop] + after
