"""Gather and scatter-add with tensor indices (ONNX Gather, GatherElements, GatherND, Scatter*).

gather[axis](x, idx)          x.shape[:axis] + idx.shape + x.shape[axis+1:]: x at idx along axis
scatter_add[axis](x, idx, v)  x with v added at idx along axis (v has gather's result shape);
                              repeated indices accumulate. The transpose of gather.
Indices are clamped into range, as `index` does; callers wrap negative indices first.
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.types import Type
from .base import Prim, finite, same_sign, unsigned
from .common import splat, zeros
from .tensor import _per_lane


def _gather_shape(x: Type, idx: Type, axis: int) -> tuple:
    return x.shape[:axis] + idx.shape + x.shape[axis + 1:]


def _check(x: Type, idx: Type, axis: int, what: str) -> None:
    if idx.dtype not in ("i32", "i64"):
        raise KsbuildError(f"{what} indices must be i32 or i64, got {idx}")
    if not 0 <= axis < x.rank:
        raise KsbuildError(f"cannot {what} {x} along axis {axis}")


def _gather_rule(in_types, axis):
    x, idx = in_types
    _check(x, idx, axis, "gather")
    return (Type(x.dtype, _gather_shape(x, idx, axis)),)


def _clip(idx, n):
    """prelude's ks::clamp_index, elementwise: negative counts from the end, then clamped."""
    idx = np.asarray(idx)
    return np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)


def _gather_batch(b, ins, batched, size, axis):
    x, idx = ins
    if batched[1]:
        return _per_lane(b, "gather", ins, batched, size, {"axis": axis})
    return [b.gather(x, idx, axis=axis + 1)], [True]


def _clamp_expr(i: str, n) -> str:
    from ..codegen.storage import dim_expr
    return f"ks::clamp_index({i}, {dim_expr(n)})"


def _gather_fusible(eqn) -> bool:
    """A gather from a 1-D table: each element of the output reads the table at the same element of idx."""
    return eqn.params["axis"] == 0 and eqn.ins[0].type.rank == 1


def _gather_emit(ctx, eqn) -> None:
    # out[pre, j.., post] = x[pre, clamp(idx[j..]), post]
    (x, idx), (out,), axis = eqn.ins, eqn.outs, eqn.params["axis"]
    if ctx.region is not None:  # fused (a 1-D table): the element at the current index
        ctx.assign(out, ctx.storage(x).at([_clamp_expr(ctx.scalar(idx), x.type.shape[0])]))
        return
    dst = ctx.target(out, "gathered")
    sx, si = ctx.storage(x), ctx.storage(idx)
    loops = ctx.open_loops(out.type.shape)
    pre, mid, post = loops[:axis], loops[axis:axis + idx.type.rank], loops[axis + idx.type.rank:]
    i = _clamp_expr(si.at(mid), x.type.shape[axis])
    ctx.line(f"{dst.at(loops)} = {sx.at(pre + [i] + post)};")
    ctx.close_loops(loops)
    ctx.env[out] = dst


gather = Prim(
    name="gather",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    takes=(1,),
    type_rule=_gather_rule,
    eval=lambda x, idx, axis, env: (np.take(x, _clip(idx, x.shape[axis]), axis=axis),),
    # linear in x: d x[idx] = dx[idx]; x̄ = zeros with ȳ added at idx (repeats accumulate)
    jvp=lambda b, p, t, axis: ([b.gather(p[0], p[1], axis=axis)],
                               [b.gather(t[0], p[1], axis=axis) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, axis: [
        b.scatter_add(zeros(ins[0].type), ins[1], cts[0], axis=axis) if cts[0] is not None else None, None],
    batch=_gather_batch,
    emit=_gather_emit,
    fusible=_gather_fusible,
    # a splat table (BERT's all-zero token types when none are given) reads its value at every index: the
    # indices are then dead (a fused loop declared them unread: -Wunused-variable under -Werror)
    simplify=lambda ins, out, axis: splat(ins[0], out),
    doc="x at a tensor of indices along an axis (numpy take); indices are clamped into range",
)


def _scatter_rule(in_types, axis):
    x, idx, v = in_types
    _check(x, idx, axis, "scatter into")
    want = Type(x.dtype, _gather_shape(x, idx, axis))
    if v != want:
        raise KsbuildError(f"scatter_add: the added values must be {want}, got {v}")
    return (x,)


def _scatter_eval(x, idx, v, axis, env):
    out = np.array(x, copy=True)
    moved = np.moveaxis(out, axis, 0)  # a view: adding into it adds into out
    vals = np.moveaxis(v, list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    np.add.at(moved, _clip(idx, x.shape[axis]), vals)
    return (out,)


def _scatter_jvp(b, p, t, axis):
    # linear in (x, v): d scatter_add(x, i, v) = scatter_add(dx, i, dv)
    x, idx, v = p
    y = b.scatter_add(x, idx, v, axis=axis)
    if t[0] is None and t[2] is None:
        return [y], [None]
    tx = t[0] if t[0] is not None else zeros(x.type)
    tv = t[2] if t[2] is not None else zeros(v.type)
    return [y], [b.scatter_add(tx, idx, tv, axis=axis)]


def _scatter_transpose(b, cts, ins, linear, axis):
    # x̄ = ȳ, v̄ = ȳ[idx]
    (ct,), idx = cts, ins[1]
    if ct is None:
        return [None, None, None]
    return [ct if linear[0] else None, None, b.gather(ct, idx, axis=axis) if linear[2] else None]


def _scatter_batch(b, ins, batched, size, axis):
    x, idx, v = ins
    if batched[1]:
        return _per_lane(b, "scatter_add", ins, batched, size, {"axis": axis})
    x = x if batched[0] else b.broadcast_to(x, shape=(size,) + x.type.shape)
    v = v if batched[2] else b.broadcast_to(v, shape=(size,) + v.type.shape)
    return [b.scatter_add(x, idx, v, axis=axis + 1)], [True]


def _scatter_emit(ctx, eqn) -> None:
    # out = x (in x's buffer when the plan says x is dead), then out[pre, clamp(idx[j..]), post] += v[pre, j.., post]
    (x, idx, v), (out,), axis = eqn.ins, eqn.outs, eqn.params["axis"]
    dst = ctx.accumulator(eqn, x, "scattered")
    sv, si = ctx.storage(v), ctx.storage(idx)
    loops = ctx.open_loops(v.type.shape)
    pre, mid, post = loops[:axis], loops[axis:axis + idx.type.rank], loops[axis + idx.type.rank:]
    i = _clamp_expr(si.at(mid), x.type.shape[axis])
    ctx.line(f"{dst.at(pre + [i] + post)} += {sv.at(loops)};")
    ctx.close_loops(loops)
    ctx.env[out] = dst


scatter_add = Prim(
    name="scatter_add",
    sign=unsigned,
    nonfinite=finite,
    inplace=lambda eqn: 0,
    takes=(1,),
    type_rule=_scatter_rule,
    eval=_scatter_eval,
    jvp=_scatter_jvp,
    transpose=_scatter_transpose,
    batch=_scatter_batch,
    emit=_scatter_emit,
    doc="x with v added at a tensor of indices along an axis (repeats accumulate)",
)
