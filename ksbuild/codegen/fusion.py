"""Emit a `fusion` equation: one loop nest, intermediates as scalar locals.

The body's elementwise equations run at every index of the nest's shape; a value read after
the fusion is stored into its planned buffer as soon as it is computed. Trailing reductions
(over the last axes) accumulate in scalar locals declared between the outer and the inner
loops, so `sum(x * y, -1)` is one pass with no temporary.
"""
from __future__ import annotations

from ..ir.core import Eqn, Var
from ..ir.types import numel
from .cpp import REDUCE_UPDATE, Writer, reduce_init
from .storage import dim_expr


def emit_fusion(w: Writer, eqn: Eqn, dests: dict | None = None) -> None:
    """The loop nest of one fusion equation (dests: storages for outputs, instead of their planned places)."""
    body = eqn.params["body"]
    first_line = len(w.lines)
    inner_eqns = [e for e in body.eqns if not e.prim.reduction]
    reductions = [e for e in body.eqns if e.prim.reduction]  # (accumulated into scalars, each by REDUCE_UPDATE)
    shape = (inner_eqns[0].outs[0] if inner_eqns else reductions[0].ins[0]).type.shape
    n_red = len(reductions[0].params["axes"]) if reductions else 0
    saved_env = dict(w.env)
    for p, a in zip(body.params, eqn.ins):
        w.env[p] = w.env[a] if isinstance(a, Var) else w.storage(a) if a.type.rank else w.scalar(a)
    reduced = {e.outs[0] for e in reductions}
    dests = dests or {}
    targets = {r: dests[o] if o in dests else w.target(o, o.hint or "tmp")
               for r, o in zip(body.results, eqn.outs) if o.type.rank}
    flat = _flat_views(w, eqn, body, shape, targets) if not reductions else None
    shape, written = flat if flat is not None else (shape, targets)  # (the results keep their own views)
    stores = {r: t for r, t in written.items() if r not in reduced}
    outer = w.open_loops(shape[:len(shape) - n_red], threads=eqn.params.get("threads", 0))
    accs = [_accumulator(w, e) for e in reductions]
    sums = [a for a, e in zip(accs, reductions) if e.prim.reduction == "sum"]
    parts, start, end = _blocks(w, shape[-1], [a for a, e in zip(accs, reductions) if _blocked(e, n_red, shape)])
    updated = [parts.get(a, a) for a in accs]
    if parts:  # the last axis in blocks: the float sums add up per block, then block by block
        inner = [w.namer.index(w.depth + 1)]
        w.line(f"KS_OMP_SIMD(reduction(+:{', '.join(parts.get(a, a) for a in sums)}))")
        w.line(f"for (int64_t {inner[0]} = {start}; {inner[0]} < {end}; ++{inner[0]}) {{")
        w.depth += 1
    else:
        inner = w.open_loops(shape[len(shape) - n_red:], f"reduction(+:{', '.join(sums)})" if sums else None)
    w.region, w.escaping = (outer + inner, shape), stores
    for e in inner_eqns:
        e.prim.emit(w, e)
    for acc, e in zip(updated, reductions):
        w.line(REDUCE_UPDATE[e.prim.reduction].format(a=acc, x=w.scalar(e.ins[0])))
    w.region, w.escaping = None, {}
    w.local.clear()
    w.close_loops(inner)
    for acc, part in parts.items():
        w.line(f"{acc} += {part};")
    if parts:
        w.close_loops(1)
    scalars = _store_reduced(w, reductions, accs, targets, outer)
    w.close_loops(outer)
    w.env = saved_env
    for r, o in zip(body.results, eqn.outs):
        w.env[o] = targets[r] if r in targets else scalars[r]
    w.note_source(first_line, [e.loc for e in body.eqns])  # (every line the group computes)


def _flat_views(w: Writer, eqn: Eqn, body, shape, targets: dict):
    """(the nest's shape as one axis, the targets as 1-D views) when every operand and result of an elementwise nest
    is a whole row-major tensor of its shape or a scalar (the operands' views in w.env made 1-D too): one loop then
    covers it, e.g. the [C, 7, 7] residual adds of a MobileNet, whose innermost loops of 7 did not vectorize; None
    when the nest must keep its axes (a broadcast operand, a strided view, an index-dependent iota, threads)."""
    if len([d for d in shape if d != 1]) < 2 or eqn.params.get("threads", 0) > 1:
        return None
    if any(not e.prim.elementwise or e.prim.positional for e in body.eqns):
        return None
    views = {}
    for p in body.params:
        h = w.env[p]
        if p.type.rank == 0 or isinstance(h, str):
            continue
        if tuple(h.shape) != tuple(shape) or not (h.literal is not None or h.contiguous or h.dense()):
            return None
        views[p] = h
    if any(tuple(t.shape) != tuple(shape) or t.literal is not None or not (t.contiguous or t.dense())
           for t in targets.values()):
        return None
    flat = (numel(shape),)
    for p, h in views.items():
        w.env[p] = h.reshape(flat)
    return flat, {r: t.reshape(flat) for r, t in targets.items()}


SUM_BLOCK = 512
"""A float32 sum over a long last axis adds up blocks of this many elements, then the blocks' sums: added in
order along a few vector lanes, a sum of 1e5 floats was off by 1e-6..5e-6 relative (torch and numpy sum
pairwise, 2e-8); in blocks it is within about 1e-7, at the speed of the plain loop."""


def _blocked(e: Eqn, n_red: int, shape) -> bool:
    """A float sum over one last axis that is long or symbolic."""
    n = shape[-1]
    return e.prim.reduction == "sum" and n_red == 1 and e.outs[0].type.dtype == "f32" and \
        (not isinstance(n, int) or n > 2 * SUM_BLOCK)


def _blocks(w: Writer, n, accs: list[str]) -> tuple[dict, str, str]:
    """Open the loop over blocks of the last axis and declare each sum's block sum: ({acc: its block sum}, the
    block's first index, one past its last); ({}, "", "") when no sum is blocked."""
    if not accs:
        return {}, "", ""
    size, start, end = dim_expr(n), w.namer.fresh("block", w.depth + 1), w.namer.fresh("block_end", w.depth + 1)
    w.line(f"for (int64_t {start} = 0; {start} < {size}; {start} += {SUM_BLOCK}) {{")
    w.depth += 1
    w.line(f"const int64_t {end} = {size} - {start} < {SUM_BLOCK} ? {size} : {start} + {SUM_BLOCK};")
    parts = {}
    for acc in accs:
        parts[acc] = w.namer.fresh(f"{acc}_block")
        w.line(f"float {parts[acc]} = 0;")
    return parts, start, end


def _accumulator(w: Writer, e: Eqn) -> str:
    name = w.namer.fresh(e.outs[0].hint or "acc", source=bool(e.outs[0].hint))
    c = w.ctype(e.outs[0].type)
    w.line(f"{c} {name} = {reduce_init(e.prim.reduction, c)};")
    return name


def _store_reduced(w: Writer, reductions, accs, targets: dict, outer: list[str]) -> dict:
    """Store each tensor reduction's accumulator at the outer index; the scalar ones' names."""
    scalars: dict = {}
    for acc, e in zip(accs, reductions):
        r = e.outs[0]
        if r in targets:
            w.line(f"{targets[r].at(outer)} = {acc};")
        else:
            scalars[r] = acc
    return scalars
