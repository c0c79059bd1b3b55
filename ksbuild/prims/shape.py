"""Shape primitives: broadcast_to, reshape, reduce_sum (the linear glue of broadcasting)."""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.types import Type, concrete_shape
from .base import NONNEG, Prim, broadcast_along, broadcast_rows, finite, first_along, first_rows, same_sign
from .common import move_batch_rank, splat, unbroadcast


def _broadcast_rule(in_types, shape):
    (x,) = in_types
    lead = len(shape) - x.rank
    ok = lead >= 0 and all(d == 1 or d == shape[lead + i] for i, d in enumerate(x.shape))
    if not ok:
        raise KsbuildError(f"cannot broadcast {x} to shape [{', '.join(map(str, shape))}]")
    return (Type(x.dtype, tuple(shape)),)


def _broadcast_batch(b, ins, batched, size, shape):
    (x,) = ins
    x = move_batch_rank(b, x, True, len(shape))
    return [b.broadcast_to(x, shape=(x.type.shape[0],) + tuple(shape))], [True]


broadcast_to = Prim(
    name="broadcast_to",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    view=True,
    type_rule=_broadcast_rule,
    eval=lambda x, shape, env: (np.broadcast_to(x, concrete_shape(Type("f32", shape), env)).copy(),),
    # linear: d broadcast(x) = broadcast(dx)
    jvp=lambda b, p, t, shape: ([b.broadcast_to(p[0], shape=shape)],
                                [b.broadcast_to(t[0], shape=shape) if t[0] is not None else None]),
    # x̄ = sum of ȳ over the broadcast axes
    transpose=lambda b, cts, ins, linear, shape: [unbroadcast(b, cts[0], ins[0].type)],
    batch=_broadcast_batch,
    emit=lambda ctx, eqn: ctx.view(eqn, lambda s: s.broadcast(eqn.params["shape"])),
    rows=lambda eqn, n: broadcast_rows(eqn, n, "shape"),
    along=lambda eqn, axis, n: broadcast_along(eqn, axis, n, "shape"),
    simplify=lambda ins, out, shape: splat(ins[0], out),
    doc="numpy broadcasting to a larger shape",
)


def _reshape_rule(in_types, shape):
    return (Type(in_types[0].dtype, tuple(shape)),)


def _reshape_along(eqn, axis: int, n):
    """A reshape that keeps the axes up to `axis` as they are (it splits or merges later ones only) keeps the
    output's positions along `axis` at the operand's."""
    keep = axis + 1
    if tuple(eqn.ins[0].type.shape[:keep]) != tuple(eqn.outs[0].type.shape[:keep]):
        return None
    return first_along(eqn, axis, n, shape_param="shape")


reshape = Prim(
    name="reshape",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    view=True,
    loop_remat="any",
    type_rule=_reshape_rule,
    eval=lambda x, shape, env: (np.reshape(x, concrete_shape(Type("f32", shape), env)),),
    # linear: d reshape(x) = reshape(dx); x̄ = reshape(ȳ, shape of x)
    jvp=lambda b, p, t, shape: ([b.reshape(p[0], shape=shape)],
                                [b.reshape(t[0], shape=shape) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, shape: [
        b.reshape(cts[0], shape=ins[0].type.shape) if cts[0] is not None else None],
    batch=lambda b, ins, batched, size, shape: ([b.reshape(ins[0], shape=(ins[0].type.shape[0],) + tuple(shape))],
                                                [True]),
    emit=lambda ctx, eqn: ctx.view(eqn, lambda s: s.reshape(eqn.params["shape"])),
    rows=lambda eqn, n: first_rows(eqn, n, "shape"),
    along=lambda eqn, axis, n: _reshape_along(eqn, axis, n),
    simplify=lambda ins, out, shape: splat(ins[0], out),
    doc="same elements (row-major), new shape",
)


def _reduce_rule(in_types, axes):
    (x,) = in_types
    if any(a < 0 or a >= x.rank for a in axes):
        raise KsbuildError(f"reduction axes {list(axes)} out of range for {x}")
    return (Type(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes)),)


def _reduce_sum_transpose(b, cts, ins, linear, axes):
    # y = Σ_axes x: x̄ = broadcast of ȳ back over the summed axes
    (ct,), (x,) = cts, ins
    if ct is None:
        return [None]
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
    return [b.broadcast_to(b.reshape(ct, shape=kept), shape=x.type.shape)]


def _sum_sign(eqn, sign_of) -> int:
    # a sum of values >= 0 is >= 0; of positives too (an empty axis sums to 0)
    return min(NONNEG, sign_of(eqn.ins[0]))


reduce_sum = Prim(
    name="reduce_sum",
    sign=_sum_sign,
    nonfinite=finite,
    type_rule=_reduce_rule,
    eval=lambda x, axes, env: (np.asarray(np.sum(x, axis=tuple(axes), dtype=x.dtype)),),
    jvp=lambda b, p, t, axes: ([b.reduce_sum(p[0], axes=axes)],
                               [b.reduce_sum(t[0], axes=axes) if t[0] is not None else None]),
    transpose=_reduce_sum_transpose,
    batch=lambda b, ins, batched, size, axes: ([b.reduce_sum(ins[0], axes=tuple(a + 1 for a in axes))], [True]),
    emit=lambda ctx, eqn: ctx.reduce(eqn, "sum"),
    reduction="sum",
    rows=lambda eqn, n: first_rows(eqn, n) if 0 not in eqn.params["axes"] else None,
    # output axis k is the k-th axis not summed
    along=lambda eqn, axis, n: first_along(eqn, axis, n, in_axis=[
        i for i in range(eqn.ins[0].type.rank) if i not in eqn.params["axes"]][axis]),
    doc="sum over the given axes",
)


def _transpose_rule(in_types, perm):
    (x,) = in_types
    if sorted(perm) != list(range(x.rank)):
        raise KsbuildError(f"bad axis permutation {list(perm)} for {x}")
    return (Type(x.dtype, tuple(x.shape[p] for p in perm)),)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


transpose = Prim(
    name="transpose",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    view=True,
    type_rule=_transpose_rule,
    eval=lambda x, perm, env: (np.ascontiguousarray(np.transpose(x, perm)),),
    # linear: d xᵀ = (dx)ᵀ; x̄ = ȳ permuted back
    jvp=lambda b, p, t, perm: ([b.transpose(p[0], perm=perm)],
                               [b.transpose(t[0], perm=perm) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, perm: [
        b.transpose(cts[0], perm=_inverse(perm)) if cts[0] is not None else None],
    batch=lambda b, ins, batched, size, perm: ([b.transpose(ins[0], perm=(0,) + tuple(p + 1 for p in perm))],
                                               [True]),
    emit=lambda ctx, eqn: ctx.view(eqn, lambda s: s.permute(eqn.params["perm"])),
    rows=lambda eqn, n: first_rows(eqn, n) if eqn.params["perm"][0] == 0 else None,
    along=lambda eqn, axis, n: first_along(eqn, axis, n, in_axis=eqn.params["perm"][axis]),
    simplify=lambda ins, out, perm: splat(ins[0], out),
    doc="permute axes",
)
