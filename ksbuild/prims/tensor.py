"""Tensor primitives: indexing and slicing, max/min reductions, contraction, index grids.

index[axis](x, i)          x at position i of `axis` (i clamped into range, as JAX does)
index_add[axis](x, i, v)   x with v added at position i of `axis` (the transpose of index);
                           index_add[axis](x, i, j, v) at x[..., i, j, ...] (axes axis, axis + 1)
index_set[axis](x, i, v)   x with position i of `axis` replaced by v (x[i] = v)
slice[axis, start, stop]   the static range start:stop of `axis` (a view)
pad[axis, lo, hi]          zeros before and after along `axis` (the transpose of slice)
reduce_max / reduce_min    over `axes`
reduce_argmax / reduce_argmin   the first position of the max / min over `axes` (i64; row-major over them)
stop_gradient(x)           x, with a zero derivative (logsumexp's shift)
einsum[spec](a, b)         a two-operand contraction such as "kab,kb->ka" (matmul, dot, outer)
iota[shape, axis, dtype]   the index along `axis` at every position of `shape`
dim_size[dim]              a symbolic dim as an i64 value
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Lit
from ..ir.types import Type, concrete_shape, dim_add, dim_mul, dim_sub, dim_value, numpy_dtype
from .base import NONNEG, PRIMS, Prim, finite, first_along, first_rows, same_sign, unsigned
from .common import splat, zeros


def _shift(axes, by=1):
    return tuple(a + by for a in axes)


def _per_lane(b, prim_name, ins, batched, size, params):
    """vmap with a per-lane index: a loop over the lanes, each applying the prim to its slices."""
    from ..ir.core import Lit
    from .control import PRIMS_LOOP, wrap
    xs = [a if bt else b.broadcast_to(a, shape=(size,) + a.type.shape) for a, bt in zip(ins, batched)]
    slices = [Type(a.type.dtype, a.type.shape[1:]) for a in xs]

    def body(bb, ps):
        return [bb.bind(PRIMS[prim_name], ps[1:], params)[0]]

    f = wrap(f"{prim_name}_lanes", [Type("i64")] + slices, body)
    trip = Lit(size, Type("i64")) if isinstance(size, int) else b.dim_size(dim=size)
    out = b.bind(PRIMS_LOOP, [trip, *xs], dict(body=f, n_consts=0, n_carry=0, length=size, reverse=False))
    return [out[0]], [True]


def _clamp(i, n):
    """prelude's ks::clamp_index: negative counts from the end, then clamped into [0, n - 1]."""
    i = int(i)
    return int(min(max(i + n if i < 0 else i, 0), n - 1))


# ---- index -------------------------------------------------------------------------------------

def _index_rule(in_types, axis):
    x, i = in_types
    if i.dtype not in ("i32", "i64") or i.rank:
        raise KsbuildError(f"an index must be an integer scalar, got {i}")
    if not 0 <= axis < x.rank:
        raise KsbuildError(f"cannot index {x} along axis {axis}")
    return (Type(x.dtype, x.shape[:axis] + x.shape[axis + 1:]),)


def _index_eval(x, i, axis, env):
    return (np.take(x, _clamp(i, x.shape[axis]), axis=axis),)


def _index_batch(b, ins, batched, size, axis):
    x, i = ins
    if batched[1]:
        return _per_lane(b, "index", ins, batched, size, {"axis": axis})
    return [b.index(x, i, axis=axis + 1)], [True]


index = Prim(
    name="index",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    takes=(),
    view=True,
    loop_remat="any",
    type_rule=_index_rule,
    eval=_index_eval,
    # linear in x: d x[i] = dx[i]; x̄ = zeros with ȳ added at i
    jvp=lambda b, p, t, axis: ([b.index(p[0], p[1], axis=axis)],
                               [b.index(t[0], p[1], axis=axis) if t[0] is not None else None]),
    transpose=lambda b, cts, ins, linear, axis: [
        b.index_add(zeros(ins[0].type), ins[1], cts[0], axis=axis) if cts[0] is not None else None, None],
    batch=_index_batch,
    emit=lambda ctx, eqn: ctx.view(eqn, lambda s: s.take(eqn.params["axis"], ctx.clamped_index(eqn)),
                                   n_ins=2),
    # the output's axes are x's without `axis`
    along=lambda eqn, axis, n: first_along(eqn, axis, n, in_axis=axis if axis < eqn.params["axis"] else axis + 1),
    simplify=lambda ins, out, axis: splat(ins[0], out),
    doc="x[i] along an axis; the index is clamped into range",
)


# ---- index_add ---------------------------------------------------------------------------------

def _index_add_rule(in_types, axis):
    x, *idx, v = in_types
    if not idx:
        raise KsbuildError("an update takes a position: x, at least one index, then the value")
    want = x
    for i in idx:
        (want,) = _index_rule([want, i], axis)
    if v != want:
        raise KsbuildError(f"{'index_add' if len(idx) == 1 else 'an update'}: the added value must be {want}, got {v}")
    return (x,)


def _position(x, idx, axis):
    """The numpy index of the clamped position idx (consecutive axes from `axis`) in x."""
    sl = [slice(None)] * x.ndim
    for k, i in enumerate(idx):
        sl[axis + k] = _clamp(i, x.shape[axis + k])
    return tuple(sl)


def _index_add_eval(x, *rest, axis, env):
    *idx, v = rest
    out = np.array(x, copy=True)
    out[_position(x, idx, axis)] += v
    return (out,)


def _update_jvp(name: str):
    """jvp of an update at a position (index_add, index_set), linear in (x, v): the same update of
    the tangents, d out = update(dx, i..., dv)."""
    def jvp(b, p, t, axis):
        x, *idx, v = p
        y = b.bind(PRIMS[name], p, {"axis": axis})[0]
        if t[0] is None and t[-1] is None:
            return [y], [None]
        tx = t[0] if t[0] is not None else zeros(x.type)
        tv = t[-1] if t[-1] is not None else zeros(v.type)
        return [y], [b.bind(PRIMS[name], [tx, *idx, tv], {"axis": axis})[0]]
    return jvp


def _index_add_transpose(b, cts, ins, linear, axis):
    # x̄ = ȳ; v̄ = ȳ at the position (one index per axis from `axis`)
    (ct,), idx = cts, ins[1:-1]
    if ct is None:
        return [None] * len(ins)
    v_ct = None
    if linear[-1]:
        v_ct = ct
        for i in idx:
            v_ct = b.index(v_ct, i, axis=axis)
    return [ct if linear[0] else None, *(None for _ in idx), v_ct]


def _update_batch(name: str):
    """Batching of an update at a position: a loop over lanes for a per-lane index, else the update
    one axis further in with x and v both batched."""
    def batch(b, ins, batched, size, axis):
        x, *idx, v = ins
        if any(batched[1:-1]):
            return _per_lane(b, name, ins, batched, size, {"axis": axis})
        x = x if batched[0] else b.broadcast_to(x, shape=(size,) + x.type.shape)
        v = v if batched[-1] else b.broadcast_to(v, shape=(size,) + v.type.shape)
        return [b.bind(PRIMS[name], [x, *idx, v], {"axis": axis + 1})[0]], [True]
    return batch


def _index_add_emit(ctx, eqn) -> None:
    # out = x with v added at the position, in x's buffer when the memory plan says x is dead afterwards
    x, v = eqn.ins[0], eqn.ins[-1]
    dst = ctx.accumulator(eqn, x, "acc")
    row = dst
    for k in range(1, len(eqn.ins) - 1):
        row = row.take(eqn.params["axis"], ctx.clamped_index(eqn, k))
    src = ctx.storage(v)
    idx = ctx.open_loops(v.type.shape)
    ctx.line(f"{row.at(idx)} += {src.broadcast(v.type.shape).at(idx)};")
    ctx.close_loops(idx)
    ctx.env[eqn.outs[0]] = dst


index_add = Prim(
    name="index_add",
    sign=unsigned,
    nonfinite=finite,
    inplace=lambda eqn: 0,
    takes=(),
    type_rule=_index_add_rule,
    eval=_index_add_eval,
    jvp=_update_jvp("index_add"),
    transpose=_index_add_transpose,
    batch=_update_batch("index_add"),
    emit=_index_add_emit,
    doc="x with v added at position i along an axis, or at x[..., i, j, ...] given several indices for the "
        "axes from `axis` on (in place when x is dead afterwards)",
    # index_add(x, i..., 0) = x
    simplify=lambda ins, out, axis: ins[0] if isinstance(ins[-1], Lit) and ins[-1].value == 0 and
    not isinstance(ins[-1].value, bool) and ins[0].type == out.type else None,
)


# ---- index_set ----------------------------------------------------------------------------------

def _index_set_rule(in_types, axis):
    if len(in_types) != 3:
        raise KsbuildError(f"index_set takes x, one index and the value, got {len(in_types)} operands")
    return _index_add_rule(in_types, axis)


def _index_set_eval(x, i, v, axis, env):
    out = np.array(x, copy=True)
    sl = [slice(None)] * x.ndim
    sl[axis] = _clamp(i, x.shape[axis])
    out[tuple(sl)] = v
    return (out,)


def _index_set_transpose(b, cts, ins, linear, axis):
    # x̄ = ȳ with position i zeroed; v̄ = ȳ[i]
    (ct,), i = cts, ins[1]
    if ct is None:
        return [None, None, None]
    x_ct = b.index_set(ct, i, zeros(ins[2].type), axis=axis) if linear[0] else None
    return [x_ct, None, b.index(ct, i, axis=axis) if linear[2] else None]


def _index_set_emit(ctx, eqn) -> None:
    # out = x with position i replaced by v, in x's buffer when the memory plan says x is dead afterwards
    x, _, v = eqn.ins
    dst = ctx.accumulator(eqn, x, "upd")
    row = dst.take(eqn.params["axis"], ctx.clamped_index(eqn))
    ctx.copy(ctx.storage(v), row, v.type)
    ctx.env[eqn.outs[0]] = dst


index_set = Prim(
    name="index_set",
    sign=unsigned,
    nonfinite=finite,
    strings=True,
    inplace=lambda eqn: 0,
    takes=(),
    type_rule=_index_set_rule,
    eval=_index_set_eval,
    jvp=_update_jvp("index_set"),
    transpose=_index_set_transpose,
    batch=_update_batch("index_set"),
    emit=_index_set_emit,
    doc="x with position i along an axis replaced by v (x[i] = v; in place when x is dead afterwards)",
)


# ---- slice and pad -------------------------------------------------------------------------------

def _slice_rule(in_types, axis, start, stop):
    (x,) = in_types
    if not 0 <= axis < x.rank:
        raise KsbuildError(f"cannot slice {x} along axis {axis}")
    n = dim_sub(stop, start)
    return (Type(x.dtype, x.shape[:axis] + (n,) + x.shape[axis + 1:]),)


def _slice_eval(x, axis, start, stop, env):
    sl = [slice(None)] * x.ndim
    sl[axis] = slice(dim_value(start, env), dim_value(stop, env))
    return (np.ascontiguousarray(x[tuple(sl)]),)


def _slice_transpose(b, cts, ins, linear, axis, start, stop):
    (ct,), (x,) = cts, ins
    if ct is None:
        return [None]
    return [b.pad(ct, axis=axis, lo=start, hi=dim_sub(x.type.shape[axis], stop))]


slice_ = Prim(
    name="slice",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    view=True,
    loop_remat="any",
    type_rule=_slice_rule,
    eval=_slice_eval,
    jvp=lambda b, p, t, axis, start, stop: (
        [b.slice(p[0], axis=axis, start=start, stop=stop)],
        [b.slice(t[0], axis=axis, start=start, stop=stop) if t[0] is not None else None]),
    transpose=_slice_transpose,
    along=lambda eqn, axis, n: first_along(eqn, axis, n) if axis != eqn.params["axis"] else None,
    batch=lambda b, ins, batched, size, axis, start, stop: (
        [b.slice(ins[0], axis=axis + 1, start=start, stop=stop)], [True]),
    emit=lambda ctx, eqn: ctx.view(eqn, lambda s: s.narrow(eqn.params["axis"], eqn.params["start"],
                                                          eqn.outs[0].type.shape[eqn.params["axis"]])),
    simplify=lambda ins, out, axis, start, stop: splat(ins[0], out),
    doc="the static range start:stop of an axis (a view, no copy)",
)


def _pad_rule(in_types, axis, lo, hi):
    (x,) = in_types
    if not 0 <= axis < x.rank:
        raise KsbuildError(f"cannot pad {x} along axis {axis}")
    from ..ir.types import dim_add
    n = dim_add(dim_add(lo, x.shape[axis]), hi)
    return (Type(x.dtype, x.shape[:axis] + (n,) + x.shape[axis + 1:]),)


def _pad_eval(x, axis, lo, hi, env):
    widths = [(0, 0)] * x.ndim
    widths[axis] = (dim_value(lo, env), dim_value(hi, env))
    return (np.pad(x, widths, constant_values="" if x.dtype == object else 0),)


def _pad_transpose(b, cts, ins, linear, axis, lo, hi):
    (ct,), (x,) = cts, ins
    if ct is None:
        return [None]
    from ..ir.types import dim_add
    return [b.slice(ct, axis=axis, start=lo, stop=dim_add(lo, x.type.shape[axis]))]


def _pad_emit(ctx, eqn) -> None:
    # zeros in the ranges :lo and lo+len: (each element is written once), x copied into lo:lo+len
    (x,), (out,), p = eqn.ins, eqn.outs, eqn.params
    axis, lo, hi, n = p["axis"], p["lo"], p["hi"], x.type.shape[p["axis"]]
    dst = ctx.target(out, "padded")
    zero = ctx.literal(0, out.type)
    shape = out.type.shape
    for start, size in ((0, lo), (dim_add(lo, n), hi)):
        if size != 0:
            edge = Type(out.type.dtype, shape[:axis] + (size,) + shape[axis + 1:])
            ctx.fill(dst.narrow(axis, start, size), zero, edge)
    ctx.copy(ctx.storage(x), dst.narrow(axis, lo, n), x.type)
    ctx.env[out] = dst


pad = Prim(
    name="pad",
    sign=unsigned,
    nonfinite=finite,
    strings=True,
    type_rule=_pad_rule,
    eval=_pad_eval,
    jvp=lambda b, p, t, axis, lo, hi: ([b.pad(p[0], axis=axis, lo=lo, hi=hi)],
                                       [b.pad(t[0], axis=axis, lo=lo, hi=hi) if t[0] is not None else None]),
    transpose=_pad_transpose,
    along=lambda eqn, axis, n: first_along(eqn, axis, n) if axis != eqn.params["axis"] else None,
    batch=lambda b, ins, batched, size, axis, lo, hi: ([b.pad(ins[0], axis=axis + 1, lo=lo, hi=hi)], [True]),
    emit=_pad_emit,
    doc="zeros before (lo) and after (hi) along an axis",
)


# ---- max / min reductions --------------------------------------------------------------------------

def _extremum(name: str, fn, kind: str) -> Prim:
    prim: Prim

    def rule(in_types, axes, ties="share"):
        from .shape import _reduce_rule
        if in_types[0].dtype == "bool":
            raise KsbuildError(f"{name} does not take bool operands")
        if ties not in ("share", "first"):
            raise KsbuildError(f"{name}: ties must be 'share' or 'first', got {ties!r}")
        return _reduce_rule(in_types, axes)

    def jvp(b, p, t, axes, ties="share"):
        # the derivative flows to the positions attaining the extremum: shared equally among ties (torch's
        # amax), or all to the first of them in row-major order of the reduced axes (torch's max pooling)
        (x,), (tx,) = p, t
        params = {"axes": axes} if ties == "share" else {"axes": axes, "ties": ties}
        y = b.bind(prim, [x], params)[0]
        if tx is None:
            return [y], [None]
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
        if ties == "first" and len(axes) == 1:
            # the first extremum's position from reduce_arg{max,min}, which a fused loop nest accumulates with y
            # in one pass (over several axes, as in max pooling's windows, `_first` below compares with y)
            at = b.bind(PRIMS[f"reduce_arg{kind}"], [x], {"axes": tuple(axes)})[0]
            first = b.eq(b.iota(shape=x.type.shape, axis=axes[0], dtype="i64"),
                         b.broadcast_to(b.reshape(at, shape=kept), shape=x.type.shape))
            return [y], [b.reduce_sum(b.select(first, tx, zeros(x.type)), axes=axes)]
        yb = b.broadcast_to(b.reshape(y, shape=kept), shape=x.type.shape)
        hit = b.eq(x, yb)
        if x.type.is_float:  # a NaN extremum came from the NaNs: they get the derivative (torch's max())
            hit = getattr(b, "or")(hit, getattr(b, "and")(b.ne(x, x), b.ne(yb, yb)))
        if ties == "first":
            return [y], [b.reduce_sum(b.select(_first(b, hit, axes, kept), tx, zeros(x.type)), axes=axes)]
        count = b.reduce_sum(b.select(hit, _one(x.type), zeros(x.type)), axes=axes)
        picked = b.reduce_sum(b.select(hit, tx, zeros(x.type)), axes=axes)
        return [y], [b.div(picked, count)]

    def batch(b, ins, batched, size, axes, ties="share"):
        params = {"axes": _shift(axes)} if ties == "share" else {"axes": _shift(axes), "ties": ties}
        return [b.bind(prim, [ins[0]], params)[0]], [True]

    prim = Prim(
        name=name,
        sign=same_sign,  # (of a nonempty axis: an empty one's -inf or inf is not finite)
        nonfinite=finite,  # (an empty axis aside, as overflow)
        type_rule=rule,
        eval=lambda x, axes, env, ties="share": (
            np.asarray(fn(x, axis=tuple(axes))) if x.size else
            np.full(np.delete(x.shape, list(axes)), np.inf if kind == "min" else -np.inf, dtype=x.dtype),),
        jvp=jvp,
        batch=batch,
        emit=lambda ctx, eqn: ctx.reduce(eqn, kind),
        reduction=kind,
        rows=lambda eqn, n: first_rows(eqn, n) if 0 not in eqn.params["axes"] else None,
        doc=f"{kind}imum over the given axes (ties='first': the derivative goes to the first extremum)",
        opt_outs=("transpose: not linear",),
        simplify=_simp_uniform_extremum,
    )
    return prim


def _simp_uniform_extremum(ins, out, axes, ties="share"):
    # max (or min) of a literal filled with one value c over nonempty axes is c (a mask known to be all True)
    (x,) = ins
    if isinstance(x, Lit) and isinstance(x.value, (int, float)) and all(x.type.shape[a] != 0 for a in axes):
        return Lit(x.value, out.type)
    return None


def _first(b, hit, axes, kept):
    """hit where it is the first hit over the reduced axes (row-major order of those axes): its position there
    equals the least position of a hit."""
    shape = hit.type.shape
    if not all(isinstance(shape[a], int) for a in axes[1:]):
        raise KsbuildError("ties='first' needs literal sizes along the reduced axes")
    pos, stride = None, 1
    for a in reversed(axes):
        term = b.iota(shape=shape, axis=a, dtype="i64")
        term = term if stride == 1 else b.mul(term, Lit(stride, Type("i64")))
        pos = term if pos is None else b.add(pos, term)
        stride = stride * shape[a] if isinstance(shape[a], int) else stride
    least = b.reduce_min(b.select(hit, pos, Lit(2**62, Type("i64"))), axes=axes)
    return b.eq(pos, b.broadcast_to(b.reshape(least, shape=kept), shape=shape))


def _one(t: Type):
    from .common import ones
    return ones(t)


reduce_max = _extremum("reduce_max", np.max, "max")
reduce_min = _extremum("reduce_min", np.min, "min")


def _arg_extremum(name: str, fn, kind: str) -> Prim:
    """The first position of the extremum over `axes` (flattened row-major over them), i64; a NaN is the extremum
    (its first one), as numpy's and torch's argmax/argmin. A fused loop nest accumulates it together with the
    extremum itself in one pass (codegen/fusion.py): the derivative of a reduction with ties="first" takes the
    position from it, not from a second pass comparing every element with the reduced value."""
    prim: Prim

    def rule(in_types, axes):
        from .shape import _reduce_rule
        if in_types[0].dtype == "bool":
            raise KsbuildError(f"{name} does not take bool operands")
        if not axes:
            raise KsbuildError(f"{name} needs at least one axis")
        return (Type("i64", _reduce_rule(in_types, axes)[0].shape),)

    def evaluate(x, axes, env):
        axes = tuple(axes)
        kept = [i for i in range(x.ndim) if i not in axes]
        moved = np.transpose(x, kept + list(axes))
        flat = moved.reshape(moved.shape[:len(kept)] + (-1,))
        if flat.shape[-1] == 0:  # (an empty axis has no position; the codegen's accumulator starts at 0)
            return (np.zeros(flat.shape[:-1], np.int64),)
        return (np.asarray(fn(flat, axis=-1)).astype(np.int64),)

    prim = Prim(
        name=name,
        sign=lambda eqn, sign_of: NONNEG,  # (a position)
        nonfinite=finite,
        type_rule=rule,
        eval=evaluate,
        jvp=None,  # (an integer result: transforms/jvp.py binds it as it is)
        batch=lambda b, ins, batched, size, axes: ([b.bind(prim, [ins[0]], {"axes": _shift(axes)})[0]], [True]),
        emit=lambda ctx, eqn: ctx.arg_reduce(eqn, f"arg{kind}"),
        reduction=f"arg{kind}",
        rows=lambda eqn, n: first_rows(eqn, n) if 0 not in eqn.params["axes"] else None,
        doc=f"the first position of the {kind}imum over the given axes (row-major over them), i64",
        opt_outs=("jvp: an integer result has no tangent", "transpose: not linear"),
    )
    return prim


reduce_argmax = _arg_extremum("reduce_argmax", np.argmax, "max")
reduce_argmin = _arg_extremum("reduce_argmin", np.argmin, "min")


stop_gradient = Prim(
    name="stop_gradient",
    sign=same_sign,
    nonfinite=finite,
    strings=True,
    type_rule=lambda in_types: (in_types[0],),
    eval=lambda x, env: (x,),
    jvp=lambda b, p, t: ([b.stop_gradient(p[0])], [None]),
    batch=lambda b, ins, batched, size: ([b.stop_gradient(ins[0])], [True]),
    emit=None,  # (no `view` either: nothing after simplify sees one)
    # the pass pipeline runs after every transformation: there it is x, and fusion sees through it
    simplify=lambda ins, out: ins[0],
    doc="x, treated as a constant by differentiation",
    opt_outs=("jvp: zero by definition (not the derivative finite differences see)",
              "transpose: not linear (its derivative is zero)",
              "emit: the simplify pass replaces it by its operand first"),
)


# ---- einsum ----------------------------------------------------------------------------------------

def parse_spec(spec: str) -> tuple[str, str, str]:
    lhs, out = spec.split("->")
    a, b = lhs.split(",")
    return a, b, out


def _einsum_rule(in_types, spec):
    ta, tb = in_types
    try:
        a, b, out = parse_spec(spec)
    except ValueError:
        raise KsbuildError(f"bad einsum spec '{spec}': expected two operands like 'ij,jk->ik'") from None
    sizes: dict[str, object] = {}
    for letters, t in ((a, ta), (b, tb)):
        if len(letters) != t.rank or len(set(letters)) != len(letters):
            raise KsbuildError(f"einsum '{spec}': '{letters}' does not fit an operand of type {t}",
                               hint="one distinct letter per axis of each operand")
        for c, d in zip(letters, t.shape):
            if sizes.setdefault(c, d) != d:
                raise KsbuildError(f"einsum '{spec}': axis '{c}' is {sizes[c]} in one operand and {d} in the "
                                   f"other ({ta} and {tb})")
    if len(set(out)) != len(out) or any(c not in sizes for c in out):
        raise KsbuildError(f"einsum '{spec}': every output letter must appear once, and in an operand")
    if ta.dtype != tb.dtype or ta.dtype == "bool":
        raise KsbuildError(f"einsum needs two numeric operands of one dtype, got {ta} and {tb}")
    return (Type(ta.dtype, tuple(sizes[c] for c in out)),)


def _einsum_jvp(b, p, t, spec):
    x, y = p
    z = b.einsum(x, y, spec=spec)
    # d Σ x·y = Σ dx·y + Σ x·dy, each a cteinsum (ct: the tangent's operand), an einsum whose own derivative keeps
    # a zero tangent zero against an infinite cotangent (reverse over forward, prims/cteinsum.py)
    out = None
    if t[0] is not None:
        out = b.cteinsum(t[0], y, spec=spec, ct=0)
    if t[1] is not None:
        e = b.cteinsum(x, t[1], spec=spec, ct=1)
        out = e if out is None else b.add(out, e)
    return [z], [out]


def _einsum_transpose(b, cts, ins, linear, spec):
    # z = Σ x·y: x̄ = Σ z̄·y over the letters not in x, then broadcast over x's letters found nowhere else; a
    # cteinsum (the cotangent first): an einsum in C++, whose own derivative keeps a zero z̄ zero (prims/cteinsum.py)
    (ct,) = cts
    a, bl, out = parse_spec(spec)
    res = [None, None]
    if ct is None:
        return res
    for pos, (mine, other_letters, other) in enumerate(((a, bl, ins[1]), (bl, a, ins[0]))):
        if not linear[pos]:
            continue
        me = ins[pos]
        present = "".join(c for c in mine if c in out or c in other_letters)
        g = b.cteinsum(ct, other, spec=f"{out},{other_letters}->{present}", ct=0)
        if present != mine:
            shape = tuple(me.type.shape[mine.index(c)] if c in present else 1 for c in mine)
            g = b.broadcast_to(b.reshape(g, shape=shape), shape=me.type.shape)
        res[pos] = g
    return res


def batched_spec(spec: str, batched) -> str:
    """`spec` with a new leading letter on the output and on each operand that `batched` marks."""
    a, bl, out = parse_spec(spec)
    z = next(c for c in "zyxwvutsrqponmlkjihgfedcba" if c not in a + bl)
    a2 = z + a if batched[0] else a
    b2 = z + bl if batched[1] else bl
    return f"{a2},{b2}->{z}{out}"


def _einsum_batch(b, ins, batched, size, spec):
    return [b.einsum(ins[0], ins[1], spec=batched_spec(spec, batched))], [True]


def _einsum_select(b, eqn, ins, backend, threads):
    """A contract: impl "gemm" (the backend's ks::gemm) for a float matrix product when the backend has one
    (Backend.gemm), else "tiles" (on several threads too: ks/parts.h splits it) unless it is tiny (_tiny_product);
    "loops" for those and any other contraction (transforms/select_backend.py)."""
    from ..transforms.rewrite import bind_like
    from .lowering import contract, gemm_axes
    spec = eqn.params["spec"]
    impl = "loops"
    if eqn.outs[0].type.is_float and gemm_axes(spec) is not None:
        impl = "gemm" if backend.gemm else "loops" if _tiny_product(eqn) else "tiles"
    if impl == "tiles" and (one := _batches_as_rows(b, eqn, ins) or _batches_side_by_side(b, eqn, ins)) is not None:
        return one
    return bind_like(b, eqn, contract, ins, {"spec": spec, "impl": impl, "acc": False})


def _batches_as_rows(b, eqn, ins):
    """'wmk,kn->wmn', a product batched in its left operand only, as one product of all batches' rows: A [w, m, k]
    viewed [w·m, k] (a reshape), C = A · B in one ks::tiled_gemm (B packed once, not once per batch), viewed
    [w, m, n]. None where the spec is another."""
    from .lowering import contract, gemm_axes
    batch, m, n, k = gemm_axes(eqn.params["spec"])
    a, right, out = parse_spec(eqn.params["spec"])
    if not batch or a != "".join(batch) + m + k or right != k + n or out != "".join(batch) + m + n:
        return None
    x, y = ins
    rows = x.type.shape[-2]
    for d in x.type.shape[:-2]:
        rows = dim_mul(d, rows)
    flat = b.reshape(x, shape=(rows, x.type.shape[-1]))
    (product,) = b.bind(contract, [flat, y], {"spec": "mk,kn->mn", "impl": "tiles", "acc": False})
    return [b.reshape(product, shape=tuple(eqn.outs[0].type.shape))]


def _batches_side_by_side(b, eqn, ins):
    """'mk,wkn->wmn', a product batched in its right operand only (jvp directions through a shared left operand:
    GradBench's ht skins the corresponded vertices' weights [3c, 22] by each direction's bone transforms [22, 12]),
    as one product of the left operand by every batch's columns side by side: B [w, k, n] copied to [k, w·n] (small:
    the shared operand is the large one), C = A · B' [m, w·n] in one ks::tiled_gemm (A packed once, not once per
    batch; w·n columns fill the register tiles where n = 12 left a remainder), and the result read as C viewed
    [m, w, n] transposed to [w, m, n] (a view: loop nests read it by strides). None where the spec is another."""
    from .lowering import contract, gemm_axes
    batch, m, n, k = gemm_axes(eqn.params["spec"])
    a, right, out = parse_spec(eqn.params["spec"])
    if not batch or a != m + k or right != "".join(batch) + k + n or out != "".join(batch) + m + n:
        return None
    x, y = ins
    w = len(batch)
    inner, cols = y.type.shape[w], y.type.shape[w + 1]
    if not (isinstance(inner, int) and isinstance(cols, int) and (inner >= cols or cols < SIDE_BY_SIDE_COLS)):
        return None  # (a consumer that needs the result contiguous copies it: at most w·m·n, less than the
        # (w - 1)·m·k of A's packings saved when k >= n; narrow n wastes most of each batch's last register tile)
    sizes = list(y.type.shape[:w])
    width = y.type.shape[w + 1]
    for d in sizes:
        width = dim_mul(d, width)
    columns = b.reshape(b.transpose(y, perm=(w, *range(w), w + 1)), shape=(y.type.shape[w], width))
    (product,) = b.bind(contract, [x, columns], {"spec": "mk,kn->mn", "impl": "tiles", "acc": False})
    rows = b.reshape(product, shape=(x.type.shape[0], *sizes, y.type.shape[w + 1]))
    return [b.transpose(rows, perm=(*range(1, w + 1), 0, w + 1))]


SIDE_BY_SIDE_COLS = 16  # _batches_side_by_side: batches of fewer columns than a register tile go side by side
TINY_PRODUCT = 64  # multiply-adds: at most a 4 × 4 by 4 × 4 product costs less than a register-tile call


def _tiny_product(eqn) -> bool:
    """Whether each matrix product of the einsum (per batch index) is at most TINY_PRODUCT multiply-adds, of
    literal sizes: a loop nest computes it in fewer cycles than a ks::tiled_gemm call that packs its operands
    into panels (the bone chains of GradBench's ht: 26 directions × 22 bones of 4 × 4 products). A backend that
    takes products (blas, aten) still gets them all."""
    from .lowering import gemm_axes
    a, b, _ = parse_spec(eqn.params["spec"])
    _, m, n, k = gemm_axes(eqn.params["spec"])
    sizes = dict(zip(a, eqn.ins[0].type.shape)) | dict(zip(b, eqn.ins[1].type.shape))
    dims = [sizes[m], sizes[n], sizes[k]]
    return all(isinstance(d, int) for d in dims) and dims[0] * dims[1] * dims[2] <= TINY_PRODUCT


def _einsum_along(eqn, axis: int, n):
    """Each operand holding the output's letter at `axis` (once) is taken along that letter's axis."""
    a, b, out = parse_spec(eqn.params["spec"])
    letter = out[axis]
    if a.count(letter) > 1 or b.count(letter) > 1:
        return None
    return dict(eqn.params), tuple(s.index(letter) if letter in s else None for s in (a, b))


einsum = Prim(
    name="einsum",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_einsum_rule,
    eval=lambda x, y, spec, env: (np.asarray(np.einsum(spec, x, y)).astype(x.dtype, copy=False),),
    jvp=_einsum_jvp,
    transpose=_einsum_transpose,
    batch=_einsum_batch,
    emit=None,
    select_backend=_einsum_select,
    along=_einsum_along,
    doc="a two-operand contraction: matmul 'ij,jk->ik', dot 'i,i->', outer 'i,j->ij', batched forms",
    opt_outs=("emit: the select_backend pass makes every einsum a contract (prims/lowering.py) first",),
)


# ---- iota and dim_size --------------------------------------------------------------------------------

def _iota_rule(in_types, shape, axis, dtype):
    if not 0 <= axis < len(shape):
        raise KsbuildError(f"iota axis {axis} out of range for shape {list(shape)}")
    return (Type(dtype, tuple(shape)),)


def _iota_eval(shape, axis, dtype, env):
    s = concrete_shape(Type(dtype, tuple(shape)), env)
    grid = np.arange(s[axis]).reshape([-1 if i == axis else 1 for i in range(len(s))])
    return (np.broadcast_to(grid, s).astype(numpy_dtype(dtype)),)


iota = Prim(
    name="iota",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_iota_rule,
    eval=_iota_eval,
    jvp=None,  # (no operands: jvp and vmap bind it as it is)
    batch=None,
    emit=lambda ctx, eqn: ctx.assign(eqn.outs[0], ctx.iota(eqn)),
    elementwise=True,
    positional=True,
    doc="arange along one axis of a shape (torch.arange, eye, tril masks)",
    opt_outs=("jvp: takes no operands", "batch: takes no operands", "transpose: takes no operands"),
)


def _size_sign(eqn, sign_of) -> int:
    return NONNEG  # (a size is >= 0: the shape checks return err_shape otherwise)


dim_size = Prim(
    name="dim_size",
    sign=_size_sign,
    nonfinite=finite,
    loop_remat="any",
    bounds=lambda eqn, range_of: (eqn.params["dim"], dim_add(eqn.params["dim"], 1)),  # [n, n + 1)
    type_rule=lambda in_types, dim: (Type("i64"),),
    eval=lambda dim, env: (np.int64(dim_value(dim, env)),),
    jvp=None,  # (no operands: jvp and vmap bind it as it is)
    batch=None,
    emit=lambda ctx, eqn: ctx.dim_size(eqn),
    doc="the value of a (symbolic) dimension, e.g. x.shape[0]",
    opt_outs=("jvp: takes no operands", "batch: takes no operands", "transpose: takes no operands"),
)
