"""`lane_cond`: an if whose condition differs between the lanes of a vmap.

lane_cond[then_fn, else_fn, lanes](pred, *ops) -> outs
    pred: bool[B], one condition per lane; ops[i] carries the lane axis B in front iff lanes[i];
    then_fn / else_fn take one lane's operand types; outs[j] is [B, *then_fn.out_types[j]].
    Lane l's results are then_fn(lane l's operands) if pred[l] else else_fn(...).

vmap makes one of these from a `cond` with a batched condition. Before codegen it is expanded
(its `expand` rule) into both branches run on every lane and a `select` per result: branch-free
code that vectorizes. It stays a structured prim until then so that differentiation can work
lane by lane (see `_lane_jvp`): the untaken branch's derivative never reaches a result.

cond_select[then_fn, else_fn](pred, *ops) -> outs
    pred: a bool scalar. The if-expression `x if p else y`: computed as both sides and a select
    (as it always was: branch-free, vectorizes in a loop), differentiated as an if: its jvp, partial
    evaluation and transpose are cond's, making cond_selects of the sides' derivatives, so only the
    side taken has a derivative, at every order (the NaN *values* of the side not taken never meet a
    zero cotangent in a product: a second derivative of `x if x > 0 else log(y)` at y < 0 is 0).
"""
from __future__ import annotations

from ..errors import KsbuildError
from ..ir.builder import Builder, inline
from ..ir.core import Eqn, Func, Lit, Var, freeze
from ..ir.types import Type, dim_mul
from .base import Prim, finite, from_bodies, unsigned
from .common import bcast_to, move_batch_rank, zeros
from .control import (
    _bind_literals,
    _cond_eval,
    _cond_prune,
    _cond_rule,
    _narrow,
    _reads,
    cond_batch,
    if_jvp,
    if_partial_eval,
    if_transpose,
)


def _tr():
    from ..transforms import jvp, vmap

    return jvp, vmap


def _lane_types(in_types, lanes) -> list[Type]:
    """One lane's operand types."""
    return [Type(t.dtype, t.shape[1:]) if lane else t for t, lane in zip(in_types, lanes)]


def _lane_rule(in_types, then_fn, else_fn, lanes):
    pred, ops = in_types[0], list(in_types[1:])
    if pred.dtype != "bool" or pred.rank != 1 or len(lanes) != len(ops):
        raise KsbuildError(f"internal: lane_cond needs a bool[B] condition and one lane flag per operand, got {pred}")
    size = pred.shape[0]
    if any(lane and (not t.shape or t.shape[0] != size) for t, lane in zip(ops, lanes)):
        raise KsbuildError(f"internal: a lane_cond operand lacks the lane axis {size}")
    outs = _cond_rule([Type("bool")] + _lane_types(ops, lanes), then_fn, else_fn)
    return tuple(Type(t.dtype, (size,) + t.shape) for t in outs)


def _pick(b, pred, x, y):
    """select(pred, x, y) per lane, pred [B] aligned with the lane axis of x and y."""
    return b.select(move_batch_rank(b, pred, True, max(x.type.rank, y.type.rank) - 1), x, y)


def _to_lanes(b, x, size):
    """x (shared by every lane) broadcast to one copy per lane."""
    return bcast_to(b, x, Type(x.type.dtype, (size,) + x.type.shape))


def _lane_expand(b, ins, then_fn, else_fn, lanes):
    """Both branches on every lane, then one select per result (branch-free: the loop vectorizes)."""
    _, vmap = _tr()
    pred, ops = ins[0], list(ins[1:])
    size = pred.type.shape[0]
    res = []
    for f in (then_fn, else_fn):
        outs, bts = vmap.vmap_eqns(b, f, ops, list(lanes), size)
        res.append([o if bt else b.broadcast_to(o, shape=(size,) + o.type.shape) for o, bt in zip(outs, bts)])
    return [_pick(b, pred, t, e) for t, e in zip(*res)]


def _lane_eval(pred, *ops, then_fn, else_fn, lanes, env):
    # the interpreter runs what the C++ runs: the expansion
    from ..ir.interp import as_value, eval_func

    types = [Type("bool", (len(pred),))] + [Type(t.dtype, (len(pred),) + t.shape) if lane else t
                                            for t, lane in zip(then_fn.in_types, lanes)]
    b = Builder()
    params = [Var(t) for t in types]
    f = b.func("lanes", params, _lane_expand(b, params, then_fn, else_fn, lanes))
    return tuple(eval_func(f, [as_value(a, t) for a, t in zip((pred, *ops), types)], env))


def _lane_jvp(b, primals, tangents, then_fn, else_fn, lanes):
    # Differentiate lane by lane. On the lanes that take the other branch, a branch's partial
    # derivatives may be inf or nan (d sqrt(x) = dx / (2 sqrt(x)) at x = 0 where `if x > 0:
    # sqrt(x)` is not taken): the chain rule multiplies them by a zero tangent (inf * 0 = nan),
    # and reverse mode adds that nan into the operands' cotangents. So each branch sees its
    # operands' tangents zeroed on the lanes it does not own: select(p, t, 0) for then_fn,
    # select(p, 0, t) for else_fn. Transposed, the same select zeroes the cotangents leaving the
    # branch on those lanes, and the result select zeroes those entering it, so nothing the
    # untaken branch computes reaches a result (JAX's "double where", done for the user).
    # A shared float operand with a tangent is broadcast to every lane first, so that reverse
    # mode masks its per-lane cotangents before it sums them.
    # The branch's float operands go in through lane_owned, their value on every lane, whose own derivative is
    # zero on the other branch's lanes: a second derivative masks the first one's primal work the same way.
    jvp, vmap = _tr()
    pred, size = primals[0], primals[0].type.shape[0]
    ts = list(tangents[1:])
    per_lane = [lane or t is not None for lane, t in zip(lanes, ts)]
    ops = [o if lane or not pl else _to_lanes(b, o, size) for o, lane, pl in zip(primals[1:], lanes, per_lane)]
    ts = [t if t is None or lane else _to_lanes(b, t, size) for t, lane in zip(ts, lanes)]
    branches = []
    for f, own in ((then_fn, True), (else_fn, False)):
        vf, _ = vmap.vmap_func(f, per_lane, size, [True] * len(f.results))
        owned = [None if t is None else _pick(b, pred, t, zeros(t.type.scalar())) if own
                 else _pick(b, pred, zeros(t.type.scalar()), t) for t in ts]
        mine = [b.lane_owned(pred, o, then=own) if pl and o.type.is_float else o for o, pl in zip(ops, per_lane)]
        branches.append(jvp.jvp_eqns(b, vf, mine, owned))
    (t_outs, t_tans), (e_outs, e_tans) = branches
    outs = [_pick(b, pred, x, y) for x, y in zip(t_outs, e_outs)]
    touts = []
    for o, x, y in zip(outs, t_tans, e_tans):
        if not o.type.is_float or (x is None and y is None):
            touts.append(None)
        else:
            zero = zeros(o.type.scalar())
            touts.append(_pick(b, pred, zero if x is None else x, zero if y is None else y))
    return outs, touts


def _flatten_lanes(b, x, outer: bool, inner: bool, size, n_inner):
    """x with its outer (vmap) and inner (lane) axes, each broadcast if missing, merged into one."""
    rest = x.type.shape[int(outer) + int(inner):]
    if outer and not inner:
        x = b.reshape(x, shape=(size, 1) + rest)
    x = bcast_to(b, x, Type(x.type.dtype, (size, n_inner) + rest))
    return b.reshape(x, shape=(dim_mul(size, n_inner),) + rest)


def _lane_batch(b, ins, batched, size, then_fn, else_fn, lanes):
    # vmap of a per-lane if: one per-lane if over the outer × inner lanes, flattened
    pred = ins[0]
    n_inner = pred.type.shape[-1]
    args, new_lanes = [], []
    for x, outer, inner in zip(ins, batched, (True,) + tuple(lanes)):
        if outer or inner:
            x = _flatten_lanes(b, x, outer, inner, size, n_inner)
        args.append(x)
        new_lanes.append(outer or inner)
    outs = b.bind(lane_cond, args, {"then_fn": then_fn, "else_fn": else_fn, "lanes": tuple(new_lanes[1:])})
    return [b.reshape(o, shape=(size, n_inner) + o.type.shape[1:]) for o in outs], [True] * len(outs)


def _lane_prune(eqn, used):
    # unused results are dropped from both branches; shared literal operands are substituted
    # into the branches; operands that neither branch reads are dropped
    keep = [i for i, u in enumerate(used) if u]
    lanes = eqn.params["lanes"]
    ops = list(eqn.ins[1:])
    shared_lits = [None if lane else a for a, lane in zip(ops, lanes)]
    fns = [_bind_literals(_narrow(eqn.params[k], keep), shared_lits) for k in ("then_fn", "else_fn")]
    kept = [i for i, a in enumerate(ops) if not (isinstance(a, Lit) and not lanes[i])
            and any(_reads(f, f.params[i]) for f in fns)]
    if len(kept) == len(ops) and len(keep) == len(used):
        return eqn
    fns = [Func(f.name, tuple(f.params[i] for i in kept), f.eqns, f.results, f.result_names) for f in fns]
    params = dict(eqn.params, then_fn=fns[0], else_fn=fns[1], lanes=tuple(lanes[i] for i in kept))
    ins = (eqn.ins[0],) + tuple(ops[i] for i in kept)
    return Eqn(eqn.prim, ins, tuple(eqn.outs[i] for i in keep), freeze(params), eqn.loc)


lane_cond = Prim(
    name="lane_cond",
    sign=unsigned,
    nonfinite=from_bodies,
    branches=True,
    strings=True,
    type_rule=_lane_rule,
    eval=_lane_eval,
    jvp=_lane_jvp,
    batch=_lane_batch,
    emit=None,
    prune=_lane_prune,
    expand=_lane_expand,
    doc="a per-lane if (vmap of an if): both branches on every lane, one select per result",
    opt_outs=("transpose: not linear (its jvp is made of selects, which are)",
              "emit: expanded into both branches and selects first (transforms/expand.py, the pipeline's first pass)"),
)


# ---- lane_owned: an operand of one branch of a per-lane if, in that branch's derivative -----------------------


def _owned_rule(in_types, then):
    pred, x = in_types
    if pred.dtype != "bool" or tuple(x.shape[:pred.rank]) != tuple(pred.shape):
        raise KsbuildError(f"internal: lane_owned needs a bool condition whose shape begins {x}'s, got {pred}")
    return (x,)


def _owned_jvp(b, primals, tangents, then):
    # the value x; its tangent dx on the lanes where the branch is taken (pred is `then`), 0 on the others
    pred, x = primals
    out = b.lane_owned(pred, x, then=then)
    t = tangents[1]
    if t is None:
        return [out], [None]
    zero = zeros(t.type.scalar())
    mask = b.reshape(pred, shape=pred.type.shape + (1,) * (t.type.rank - pred.type.rank))
    return [out], [b.select(mask, t, zero) if then else b.select(mask, zero, t)]


def _owned_batch(b, ins, batched, size, then):
    pred, x = (a if bt else _to_lanes(b, a, size) for a, bt in zip(ins, batched))
    return [b.lane_owned(pred, x, then=then)], [True]


def _owned_sign(eqn, sign_of) -> int:
    return sign_of(eqn.ins[1])  # (x itself)


lane_owned = Prim(
    name="lane_owned",
    sign=_owned_sign,
    nonfinite=finite,
    type_rule=_owned_rule,
    eval=lambda pred, x, then, env: (x,),
    jvp=_owned_jvp,
    batch=_owned_batch,
    emit=None,
    expand=lambda b, ins, then: [ins[1]],
    elementwise=True,  # (its condition is x's leading axes: a mask, as select's)
    remat=True,
    opt_outs=("jvp: zero on the other branch's lanes on purpose, not the derivative of its value there",
              "transpose: not linear (its jvp is a select, which is)", "emit: expanded into x itself first"),
    doc="x itself (pred: one condition per lane, the leading axes of x), as an operand of the branch of a per-lane "
        "if taken where pred is `then`: its derivative is zero on the other lanes, so a second derivative of the "
        "per-lane if masks the primal work of the branch not taken (the expand pass removes it)",
)


# ---- cond_select: an if-expression ----------------------------------------------------------------


def _select_expand(b, ins, then_fn, else_fn):
    """Both branches, then one select per result."""
    ops = list(ins[1:])
    sides = [inline(b, f, ops) for f in (then_fn, else_fn)]
    return [b.select(ins[0], x, y) for x, y in zip(*sides)]


cond_select = Prim(
    name="cond_select",
    sign=unsigned,
    nonfinite=from_bodies,
    branches=True,
    sinks=True,
    strings=True,
    type_rule=_cond_rule,
    eval=_cond_eval,
    jvp=if_jvp("cond_select"),
    batch=cond_batch("cond_select"),
    emit=None,
    transpose=if_transpose("cond_select"),
    partial_eval=if_partial_eval,
    prune=_cond_prune,
    expand=_select_expand,
    doc="x if p else y: both sides and a select, differentiated as an if (only the side taken)",
    opt_outs=("emit: expanded into both sides and a select first",),
)
