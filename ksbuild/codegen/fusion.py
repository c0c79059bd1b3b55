"""Emit a `fusion` equation: one loop nest, intermediates as scalar locals.

The body's elementwise equations run at every index of the nest's shape; a value read after
the fusion is stored into its planned buffer as soon as it is computed. Trailing reductions
(over the last axes) accumulate in scalar locals declared between the outer and the inner
loops, so `sum(x * y, -1)` is one pass with no temporary.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import rule
from ..ir.core import Eqn, Var
from ..ir.types import numel
from .body import read_once
from .cpp import REDUCE_UPDATE, Writer, buffer_name, flat_position, reduce_init, simd_pragma
from .storage import Storage, dim_expr


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
    targets = {r: dests[o] if o in dests else w.target(o, w.hint(o) or "tmp")
               for r, o in zip(body.results, eqn.outs) if o.type.rank}
    merged = _merged_views(w, eqn, body, shape, targets, n_red)
    shape, written, n_red = merged if merged is not None else (shape, targets, n_red)  # (results keep their views)
    stores = {r: t for r, t in written.items() if r not in reduced}
    outer = w.open_loops(shape[:len(shape) - n_red], threads=eqn.params.get("threads", 0), work=shape)
    twins = _twins(reductions)
    accs = [_accumulator(w, e, e.outs[0] in targets) if k not in twins else "" for k, e in enumerate(reductions)]
    best = {k: _best(w, e, accs[k]) for k, e in enumerate(reductions) if e.prim.reduction.startswith("arg")}
    accs = [best[twins[k]] if k in twins else a for k, a in enumerate(accs)]  # (the extremum its position's sweep has)
    floats = [k for k, e in enumerate(reductions) if e.ins[0].type.dtype in ("f32", "f64") and k not in twins
              and (k in best or e.prim.reduction in ("max", "min"))]  # (an arg one's extremum, a plain max or min)
    row = numel(shape[len(shape) - n_red:])
    long_rows = bool(floats) and (not isinstance(row, int) or row >= VECTOR_ROW)
    flags: dict = {}  # (one NaN flag per operand: a max and a min of one tensor, DynamicQuantizeLinear's, share it)
    nans = {k: flags.get(reductions[k].ins[0]) or flags.setdefault(reductions[k].ins[0], _nan_flag(w))
            for k in floats} if long_rows else {}
    sweep = (w, body, inner_eqns, reductions, accs, best, twins, stores, outer, shape, n_red)
    arg = {k: (accs[k], b) for k, b in best.items()}
    block = _arg_block(w, best, nans, row, n_red)
    if long_rows and not isinstance(row, int):  # (rows of a run-time length: the loops for either length)
        w.line(f"if ({dim_expr(row)} >= {VECTOR_ROW}) {{")
        w.depth += 1
        _first_sweep(*sweep, nans, block)
        if best:
            _position_sweep(w, inner_eqns, reductions, arg, outer, shape, n_red, True, _block_range(block, nans, row))
        w.depth -= 1
        w.line("} else {")
        w.depth += 1
        _first_sweep(*sweep, {})
        if best:
            _position_sweep(w, inner_eqns, reductions, arg, outer, shape, n_red, False)
        w.depth -= 1
        w.line("}")
    else:
        _first_sweep(*sweep, nans, block if long_rows else None)
        if best:
            _position_sweep(w, inner_eqns, reductions, arg, outer, shape, n_red, long_rows,
                            _block_range(block, nans, row) if long_rows else None)
    scalars = _store_reduced(w, reductions, accs, written, outer)
    w.close_loops(outer)
    w.env = saved_env
    for r, o in zip(body.results, eqn.outs):
        w.env[o] = targets[r] if r in targets else scalars[r]
    w.note_source(first_line, [e.loc for e in body.eqns])  # (every line the group computes)


VECTOR_ROW = 32
"""Rows of at least this many elements have the float max or min of a max / min reduction, or the extremum of an
arg reduction, as two vectorized reductions (the numbers' extremum and whether there is a NaN: 1.5x faster than
the running max or min at kmeans' rows of 1000; the running max's select on NaN is a chain GCC 12 does not
vectorize) and an arg reduction's position as an `omp simd` min; shorter ones the running max or min and a plain
loop for the position (at 10 elements the vector loops' set-up and lane reductions cost more: kmeans' J at k = 10
15-25% slower). A tie of -0.0 and +0.0 then gives either zero (the lanes' order), as numpy's vectorized max."""


ARG_BLOCK = 128
"""A long row's arg reduction (an argmin of floats, as kmeans' nearest centroid) finds its extremum in blocks of this
many elements, keeping the first block that holds it; the sweep for the position then reads that block alone, not
the row again (kmeans' J at k = 1000: the second sweep was a quarter of the argmin's time). A block's own extremum
is an `omp simd` min (max) too; at 128 elements its lane reduction costs less than the sweep it saves."""


@dataclass
class ArgBlock:
    """The one arg reduction (k) of a fusion whose extremum is found block by block: `first`, the local holding the
    first position of the block where it is, and `extremum`, the local of a block's own extremum."""

    k: int
    first: str
    extremum: str


def _arg_block(w: Writer, best: dict, nans: dict, row, n_red: int) -> ArgBlock | None:
    """An ArgBlock (its locals declared) for a fusion with one arg reduction of floats over one axis longer than a
    block (or of a run-time length), else None."""
    if len(best) != 1 or n_red != 1 or isinstance(row, int) and row <= ARG_BLOCK or next(iter(best)) not in nans:
        return None
    k = next(iter(best))
    first = w.namer.fresh(f"{best[k]}_block")
    w.line(f"int64_t {first} = 0;")
    return ArgBlock(k, first, w.namer.fresh(f"{best[k]}_part"))


def _block_range(block: ArgBlock | None, nans: dict, row) -> tuple[str, str] | None:
    """[lo, hi) of the position sweep of a blocked arg reduction: its extremum's block, or the whole row where a NaN
    is (the first NaN is the extremum: any block may hold it)."""
    if block is None:
        return None
    flag, n, first = nans[block.k], dim_expr(row), block.first
    return f"({flag} ? 0 : {first})", f"({flag} || {n} - {first} <= {ARG_BLOCK} ? {n} : {first} + {ARG_BLOCK})"


def _first_sweep(w: Writer, body, inner_eqns, reductions, accs, best, twins, stores, outer, shape, n_red: int,
                 nans: dict, block: ArgBlock | None = None) -> None:
    """The loop over the reduced axes: the elementwise equations at each element (stores of the values read after
    the fusion), the reductions' updates, the arg reductions' extrema (nans: {k: its NaN flag} for those kept as
    two vectorized reductions, else a running max or min; `block`: one of them found block by block)."""
    sums = [a for a, e in zip(accs, reductions) if e.prim.reduction == "sum"]
    parts, start, end = _blocks(w, shape[-1], [a for a, e in zip(accs, reductions) if _blocked(e, n_red, shape)],
                                block is not None)
    updated = [parts.get(a, a) for a in accs]
    clauses = [f"reduction(+:{', '.join(parts.get(a, a) for a in sums)})"] if sums else []
    extremum = {k: best.get(k, updated[k]) for k in nans}  # (an arg reduction's extremum, a plain one's accumulator)
    if block is not None:
        c, kind = w.ctype(reductions[block.k].ins[0].type), reductions[block.k].prim.reduction[3:]
        w.line(f"{c} {block.extremum} = {reduce_init(kind, c)};")
        extremum[block.k] = block.extremum
    firsts = {flag: k for k, flag in reversed(nans.items())}  # (a flag shared by two reductions: updated once)
    clauses += [f"reduction({reductions[k].prim.reduction.removeprefix('arg')}:{extremum[k]})" +
                (f" reduction(|:{flag})" if firsts[flag] == k else "") for k, flag in nans.items()]
    if start:  # the last axis in blocks: the float sums add up per block, then block by block
        inner = [w.namer.index(w.depth + 1)]
        w.line(simd_pragma(" ".join(clauses)))
        w.line(f"for (int64_t {inner[0]} = {start}; {inner[0]} < {end}; ++{inner[0]}) {{")
        w.depth += 1
    else:
        inner = w.open_loops(shape[len(shape) - n_red:], " ".join(clauses) if clauses else None)
    w.region, w.escaping = (outer + inner, shape), stores
    w.foldable |= read_once(body, elements=True)
    for e in inner_eqns:
        rule(e.prim, "emit")(w, e)
    for k, (acc, e) in enumerate(zip(updated, reductions)):
        if k in nans:  # (the extremum of the numbers and whether there is a NaN: two reductions that vectorize)
            x, op = w.scalar(e.ins[0]), "<" if e.prim.reduction.endswith("min") else ">"
            w.line(f"{extremum[k]} = {x} {op} {extremum[k]} ? {x} : {extremum[k]};")
            if firsts[nans[k]] == k:
                w.line(f"{nans[k]} |= {x} != {x};")
        elif k in best:  # (its extremum first, as a max or min reduction's; the position in the sweep below)
            w.line(REDUCE_UPDATE[e.prim.reduction[3:]].format(a=best[k], x=w.scalar(e.ins[0])))
        elif k not in twins:
            w.line(REDUCE_UPDATE[e.prim.reduction].format(a=acc, x=w.scalar(e.ins[0])))
    w.region, w.escaping = None, {}
    w.local.clear()
    w.close_loops(inner)
    for acc, part in parts.items():
        w.line(f"{acc} += {part};")
    if block is not None:  # (strictly beyond: the first block holding the extremum stays)
        op, at = "<" if reductions[block.k].prim.reduction == "argmin" else ">", best[block.k]
        w.line(f"if ({block.extremum} {op} {at}) {{ {at} = {block.extremum}; {block.first} = {start}; }}")
    if start:
        w.close_loops(1)
    for k, flag in nans.items():  # (a NaN is the extremum, as running_min and running_max make it)
        nan = f'static_cast<{w.ctype(reductions[k].ins[0].type)}>(__builtin_nan(""))'
        kept = best.get(k, updated[k])  # (a blocked arg reduction's: the row's, not its last block's)
        w.line(f"{kept} = {flag} ? {nan} : {kept};")


def _merged_views(w: Writer, eqn: Eqn, body, shape, targets: dict, n_red: int):
    """(the nest's shape with adjacent axes merged, the targets' views, the number of reduced axes left) when every
    operand and result walks two neighbouring axes as one, i.e. row-major over the pair (stride of the outer = size
    x stride of the inner) or broadcast along both; the operands' views in w.env are replaced by merged ones. One
    loop then covers what were several: the [C, 7, 7] residual adds of a MobileNet, or the mean over [7, 7] of a
    squeeze-excite block with its [C, 1, 1] bias, whose innermost loops of 7 did not vectorize. Reduced axes merge
    only with reduced axes. None when nothing merges or the nest must keep its axes (a gather or an iota, whose
    elements depend on each axis' index). (With threads, the parts share the first two outer axes left.)"""
    if any(not (e.prim.elementwise or e.prim.reduction) or e.prim.positional for e in body.eqns):
        return None  # (a gather's or an iota's element depends on each axis' index)
    views = {p: _broadcast(w.env[p], shape) for p in body.params if p.type.rank and not isinstance(w.env[p], str)}
    n_outer = len(shape) - n_red
    reduced = [t for t in targets.values() if len(t.shape) == n_outer and n_red]
    full = [v for v in [*views.values(), *targets.values()] if tuple(v.shape) == tuple(shape)]
    if len(full) != len(views) + len(targets) - len(reduced):
        return None
    groups = _axis_groups(shape, n_outer, full, reduced)
    if len([g for g in groups if _size(shape, g) != 1]) >= len([d for d in shape if d != 1]):
        return None
    merged_shape = tuple(_size(shape, g) for g in groups)
    for p, v in views.items():
        w.env[p] = _merge(v, groups, merged_shape)
    outer_groups = [g for g in groups if g[0] < n_outer]
    new_targets = {r: _merge(t, groups, merged_shape) if t in full else
                   _merge(t, outer_groups, merged_shape[:len(outer_groups)]) for r, t in targets.items()}
    return merged_shape, new_targets, len(groups) - len(outer_groups)


def _broadcast(v, shape):
    return v if tuple(v.shape) == tuple(shape) else v.broadcast(shape)


def _axis_groups(shape, n_outer: int, full: list, reduced: list) -> list[tuple[int, int]]:
    """Runs [lo, hi) of adjacent axes every view walks as one axis (reduced views: over the outer axes). Axes of
    size 1 join any run; the others are checked against the run's last axis that is not of size 1."""
    groups: list[tuple[int, int]] = []
    last = None  # (the current run's last axis of size > 1)
    for j, d in enumerate(shape):
        views = full + (reduced if j < n_outer else [])
        if groups and j != n_outer and (d == 1 or last is None or all(_joins(v, last, j, shape) for v in views)):
            groups[-1] = (groups[-1][0], j + 1)
        else:
            groups.append((j, j + 1))
            last = None
        last = j if d != 1 else last
    return groups


def _joins(v, i: int, j: int, shape) -> bool:
    """Whether view v walks axis i and axis j (the next of size > 1 after i) as one axis."""
    if v.literal is not None or v.contiguous or v.dense():
        return True
    si, sj = v.strides[i], v.strides[j]
    if si == "0" and sj == "0":
        return True
    return si.isdigit() and sj.isdigit() and isinstance(shape[j], int) and int(si) == int(sj) * shape[j]


def _size(shape, g: tuple[int, int]):
    dims = [d for d in shape[g[0]:g[1]] if d != 1]
    return dims[0] if len(dims) == 1 else numel(dims)


def _merge(v, groups, merged_shape):
    """v with each group of axes as one: the stride of the group's innermost axis that is not of size 1."""
    if v.literal is not None:
        return Storage.splat(v.literal, merged_shape)
    strides = []
    for lo, hi in groups:
        walked = [s for d, s in zip(v.shape[lo:hi], v.strides[lo:hi]) if d != 1]
        strides.append(walked[-1] if walked else "0")
    return replace(v, shape=tuple(merged_shape), strides=tuple(strides),
                   contiguous=v.contiguous or v.dense())


SUM_BLOCK = 512
"""A float32 sum over a long last axis adds up blocks of this many elements, then the blocks' sums: added in
order along a few vector lanes, a sum of 1e5 floats was off by 1e-6..5e-6 relative (torch and numpy sum
pairwise, 2e-8); in blocks it is within about 1e-7, at the speed of the plain loop."""


def _blocked(e: Eqn, n_red: int, shape) -> bool:
    """A float sum over one last axis that is long or symbolic."""
    n = shape[-1]
    return e.prim.reduction == "sum" and n_red == 1 and e.outs[0].type.dtype == "f32" and \
        (not isinstance(n, int) or n > 2 * SUM_BLOCK)


def _blocks(w: Writer, n, accs: list[str], arg: bool = False) -> tuple[dict, str, str]:
    """Open the loop over blocks of the last axis and declare each sum's block sum: ({acc: its block sum}, the
    block's first index, one past its last); ({}, "", "") when no sum is blocked and no arg reduction (`arg`:
    blocks of ARG_BLOCK elements, for it and the sums)."""
    if not accs and not arg:
        return {}, "", ""
    block = ARG_BLOCK if arg else SUM_BLOCK
    size, start, end = dim_expr(n), w.namer.fresh("block", w.depth + 1), w.namer.fresh("block_end", w.depth + 1)
    w.line(f"for (int64_t {start} = 0; {start} < {size}; {start} += {block}) {{")
    w.depth += 1
    w.line(f"const int64_t {end} = {size} - {start} < {block} ? {size} : {start} + {block};")
    parts = {}
    for acc in accs:
        parts[acc] = w.namer.fresh(f"{acc}_block")
        w.line(f"float {parts[acc]} = 0;")
    return parts, start, end


def _accumulator(w: Writer, e: Eqn, element: bool) -> str:
    """The local a reduction accumulates in: named after its result, else after what it reduces (qs_sum, the sum of
    the elements of qs; scores_max), else acc; `element`: one element of a tensor result (qs_sum_i of qs_sum)."""
    x, kind = e.ins[0], e.prim.reduction
    of = w.hint(x) if isinstance(x, Var) and w.hint(x) else buffer_name(w.env[x].root) \
        if isinstance(x, Var) and isinstance(w.env.get(x), Storage) else "x"
    name = e.outs[0].hint or (f"{of}_{kind}" if of != "x" else "acc")
    name = w.namer.fresh(f"{name}_i" if element else name, source=bool(e.outs[0].hint))
    c = w.ctype(e.outs[0].type)
    w.line(f"{c} {name} = {reduce_init(e.prim.reduction, c)};")
    return name


NO_POSITION = "int64_t{4611686018427387904}"
"""An arg reduction's position before its sweep finds one (2^62: more than any axis has)."""


def _position_sweep(w: Writer, inner_eqns, reductions, arg: dict, outer, shape, n_red: int, simd: bool,
                    span: tuple[str, str] | None = None) -> None:
    """The positions of the arg reductions (arg: {k: (its position's local, its extremum's local)}), once the loop
    over the reduced axes has their extrema: a second loop over them, recomputing what their operands need from
    the row (in cache: no [rows, k] buffer is written and read back, as a second fusion comparing with the reduced
    value did), takes the least position where the operand equals its extremum (or is NaN when it is NaN). Both
    loops are min reductions that vectorize; one loop keeping the position beside a running extremum is a chain of
    a compare and two selects per element, which does not (2 to 3 times slower at kmeans' rows of 100-1000).
    `simd`: an `omp simd` min reduction (long rows; at 10 elements its set-up costs more than it saves); `span`: the
    [lo, hi) of the one reduced axis to sweep (the block of a blocked arg reduction's extremum), else all of it."""
    wanted = {reductions[k].ins[0] for k in arg}
    needed = []
    for e in reversed(inner_eqns):
        if any(v in wanted for v in e.outs):
            needed.append(e)
            wanted.update(a for a in e.ins if isinstance(a, Var))
    needed.reverse()
    dims = shape[len(shape) - n_red:]
    for at, _ in arg.values():
        w.line(f"{at} = {NO_POSITION};")
    clause = f"reduction(min:{', '.join(at for at, _ in arg.values())})" if simd else None
    inner = w.open_loops(dims, clause) if span is None else _open_span(w, span, clause)
    w.region, w.escaping = (outer + inner, shape), {}
    w.local.clear()
    for e in needed:
        rule(e.prim, "emit")(w, e)
    j = flat_position(inner, dims)
    for k, (at, extremum) in arg.items():
        x = w.scalar(reductions[k].ins[0])
        same = f"{x} == {extremum}" + (f" || ({x} != {x} && {extremum} != {extremum})"
                                       if reductions[k].ins[0].type.is_float else "")
        here = w.namer.fresh("here")
        w.line(f"const int64_t {here} = ({same}) ? {j} : {NO_POSITION};")
        w.line(f"{at} = {here} < {at} ? {here} : {at};")
    w.region = None
    w.local.clear()
    w.close_loops(inner)
    for at, _ in arg.values():  # (an empty axis has no position: 0, as the interpreter's)
        w.line(f"{at} = {at} == {NO_POSITION} ? 0 : {at};")


def _open_span(w: Writer, span: tuple[str, str], clause: str | None) -> list[str]:
    """Open a loop over [lo, hi) (its `omp simd` clause, if any); its index, for close_loops."""
    i = w.namer.index(w.depth + 1)
    if clause is not None:
        w.line(simd_pragma(clause))
    w.line(f"for (int64_t {i} = {span[0]}; {i} < {span[1]}; ++{i}) {{")
    w.depth += 1
    return [i]


def _twins(reductions: list[Eqn]) -> dict[int, int]:
    """{k: j} for each max (min) reduction k of the same operand as an argmax (argmin) reduction j: the extremum
    that j's step keeps beside its position is k's value (the same, NaN included), so k has no accumulator of its
    own (torch.min(x, dim) and its derivative's position: one compare and two selects per element)."""
    arg = {(e.ins[0], e.prim.reduction[3:]): j for j, e in enumerate(reductions)
           if e.prim.reduction.startswith("arg") and isinstance(e.ins[0], Var)}
    return {k: arg[(e.ins[0], e.prim.reduction)] for k, e in enumerate(reductions)
            if (e.ins[0], e.prim.reduction) in arg and e.outs[0].type.dtype == e.ins[0].type.dtype}


def _nan_flag(w: Writer) -> str:
    """Declare whether an arg reduction's operand had a NaN so far (an int64_t: GCC 12 vectorizes no `omp simd`
    reduction of a bool); its name."""
    name = w.namer.fresh("has_nan")
    w.line(f"int64_t {name} = 0;")
    return name


def _best(w: Writer, e: Eqn, acc: str) -> str:
    """Declare the extremum so far beside an arg reduction's position acc; its name."""
    name = w.namer.fresh(f"{acc}_value")
    c = w.ctype(e.ins[0].type)
    w.line(f"{c} {name} = {reduce_init(e.prim.reduction[3:], c)};")
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
