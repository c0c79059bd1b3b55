"""Control flow: `cond` (if/else), `loop` (a scan: carried state plus stacked per-iteration
values), `call` (another kernel). Their rules recurse into the sub-functions they carry.

cond[then_fn, else_fn](pred, *ops) -> outs
loop[body, n_consts, n_carry, length, reverse](trip, *consts, *carry, *xs) -> (*carry, *ys)
    body(k, *consts, *carry, *x_k) -> (*carry, *y_k); k runs 0..trip-1 (downwards if reverse);
    xs and ys are stacked along axis 0, of size `length` (a literal or symbolic dim, or None for
    a loop without xs and ys). trip <= length: a count computed at run time may have a dim as its
    bound (range(r) inside a loop over r in range(d)); then rows trip..length-1 of xs are not
    read and those of ys are zero.
call[fn](*args) -> outs
"""
from __future__ import annotations

import weakref

import numpy as np

from ..codegen import body as codegen_body
from ..errors import KsbuildError
from ..ir.builder import Builder, inline
from ..ir.core import Eqn, Func, Lit, Var, freeze
from ..ir.types import Type
from .base import PRIMS, Prim, from_bodies, unsigned
from .common import add_cts, zeros


def _tr():
    from .. import transforms
    from ..transforms import jvp, partial_eval, transpose, vmap

    return transforms, jvp, vmap, partial_eval, transpose


def _interp():
    from ..ir.interp import eval_func

    return eval_func


def permuted(f: Func, order_in: list[int], order_out: list[int], name: str | None = None) -> Func:
    """A Func whose param i is f's param order_in[i] and whose result j is f's result order_out[j]."""
    b = Builder()
    params = [Var(f.params[i].type, f.params[i].hint) for i in order_in]
    args = [None] * len(f.params)
    for p, i in zip(params, order_in):
        args[i] = p
    outs = inline(b, f, args)
    return b.func(name or f.name, params, [outs[j] for j in order_out])


def wrap(name: str, param_types, body, hints=()) -> Func:
    """A Func built by body(b, params) -> results; hints name the first params (a loop body's counter keeps the
    source's name: i of `for i in range(n)` in the loop that runs it backwards)."""
    b = Builder()
    params = [Var(t, h) for t, h in zip(param_types, list(hints) + [""] * len(param_types))]
    return b.func(name, params, body(b, params))


# ---- cond ------------------------------------------------------------------------------------

def _cond_rule(in_types, then_fn, else_fn):
    pred, ops = in_types[0], list(in_types[1:])
    if pred.dtype != "bool" or not pred.is_scalar:
        raise KsbuildError(f"an if condition must be a bool scalar, got {pred}")
    if list(then_fn.in_types) != ops or list(else_fn.in_types) != ops:
        raise KsbuildError("internal: cond operands do not match its branches")
    if then_fn.out_types != else_fn.out_types:
        shown = lambda f: ", ".join(map(str, f.out_types))  # noqa: E731
        raise KsbuildError(f"the branches of this if produce different types: ({shown(then_fn)}) "
                           f"and ({shown(else_fn)})")
    return then_fn.out_types


def _cond_eval(pred, *ops, then_fn, else_fn, env):
    return tuple(_interp()(then_fn if bool(pred) else else_fn, list(ops), env))


def if_jvp(name: str):
    """The jvp rule of the if-like prim `name` (cond, cond_select): the same prim over the jvps of its branches,
    so that only the branch taken has a derivative, at every order."""
    def rule(b, primals, tangents, then_fn, else_fn):
        return _if_jvp(b, PRIMS[name], primals, tangents, then_fn, else_fn)
    return rule


def _if_jvp(b, prim, primals, tangents, then_fn, else_fn):
    # the derivative of an if is the derivative of the branch taken
    _, jvp, *_ = _tr()
    has_t = [t is not None for t in tangents[1:]]
    branches = [jvp.jvp_func(f, has_t) for f in (then_fn, else_fn)]
    ts = [t for t in tangents[1:] if t is not None]
    outs = list(b.bind(prim, [primals[0], *primals[1:], *ts], {"then_fn": branches[0], "else_fn": branches[1]}))
    n = len(then_fn.results)
    it = iter(outs[n:])
    return outs[:n], [next(it) if t.is_float else None for t in then_fn.out_types]


def cond_batch(name: str):
    """The batching rule of an if-like prim `name` (cond, cond_select): with a shared predicate the same prim over
    both branches batched alike; with a per-lane predicate a lane_cond (both branches and a select per result
    once expanded; differentiated lane by lane until then, see prims/lanes.py)."""
    from .base import PRIMS

    def batch(b, ins, batched, size, then_fn, else_fn):
        _, _, vmap, *_ = _tr()
        pred, ops, op_bt = ins[0], ins[1:], batched[1:]
        if not batched[0]:
            flags = [any(x) for x in zip(*(vmap.vmap_func(f, op_bt, size)[1] for f in (then_fn, else_fn)))]
            fs = [vmap.vmap_func(f, op_bt, size, flags)[0] for f in (then_fn, else_fn)]
            outs = b.bind(PRIMS[name], [pred, *ops], {"then_fn": fs[0], "else_fn": fs[1]})
            return outs, flags
        outs = b.bind(PRIMS["lane_cond"], [pred, *ops], {"then_fn": then_fn, "else_fn": else_fn,
                                                         "lanes": tuple(op_bt)})
        return list(outs), [True] * len(outs)

    return batch


def if_partial_eval(s, eqn, mask):
    """Split an if (cond, cond_select) whose operands are partly known into a known if and an unknown if."""
    _, _, _, pe, _ = _tr()
    then_fn, else_fn = eqn.params["then_fn"], eqn.params["else_fn"]
    if not mask[0]:
        raise KsbuildError("internal: the condition of an if depends on a tangent", eqn.loc)
    op_known = mask[1:]
    unknown_out = pe.out_unknown_fixpoint([then_fn, else_fn], op_known)
    splits = [pe.partial_eval(f, op_known, unknown_out) for f in (then_fn, else_fn)]
    (tk, tu, _, _), (ek, eu, _, _) = splits
    n_known_out = unknown_out.count(False)
    # residuals that are views of the branch's operands or cheap scalar arithmetic on them (a loop count, an
    # index) are recomputed by the backward branch from those operands, not made outputs of the if: as
    # outputs they would take the other branch's zeros, and under vmap with a batched condition a loop
    # count read from one would differ between lanes
    res_t, res_e = list(tk.results[n_known_out:]), list(ek.results[n_known_out:])
    remat_t, remat_e = _cheap_part(tk, res_t, tk.params), _cheap_part(ek, res_e, ek.params)
    own_t = [r for r in res_t if r not in remat_t.results]
    own_e = [r for r in res_e if r not in remat_e.results]
    # the known operands the recomputations read (positions among the known operands)
    reads = sorted({tk.params.index(q) for q in remat_t.params} | {ek.params.index(q) for q in remat_e.params})
    kin = [t for t, k in zip(then_fn.in_types, op_known) if k]

    def known_branch(f, first):
        def body(b, ps):
            outs = inline(b, f, ps)
            main, res = outs[:n_known_out], outs[n_known_out:]
            own = [v for v, r in zip(res, f.results[n_known_out:]) if r in (own_t if first else own_e)]
            pad_t = own if first else [zeros(r.type) for r in own_t]
            pad_e = [zeros(r.type) for r in own_e] if first else own
            return main + pad_t + pad_e
        return wrap(f.name, kin, body)

    kops = [s.read_known(a) for a, k in zip(eqn.ins[1:], op_known) if k]
    pred = s.read_known(eqn.ins[0])
    kouts = s.kb.bind(eqn.prim, [pred, *kops], {"then_fn": known_branch(tk, True),
                                                   "else_fn": known_branch(ek, False)})
    main, rest = kouts[:n_known_out], kouts[n_known_out:]
    uin = [t for t, k in zip(then_fn.in_types, op_known) if not k]
    n_own = len(own_t) + len(own_e)

    def unknown_branch(f, first, known_f, remat, own):
        def body(b, ps):
            mine = ps[:len(own_t)] if first else ps[len(own_t):n_own]
            read = dict(zip(reads, ps[n_own:n_own + len(reads)]))
            again = dict(zip(remat.results, inline(b, remat, [read[known_f.params.index(q)] for q in remat.params])))
            got = dict(zip(own, mine))
            res = [got[r] if r in got else again[r] for r in known_f.results[n_known_out:]]
            return inline(b, f, res + ps[n_own + len(reads):])
        return wrap(f.name, [r.type for r in own_t + own_e] + [kin[j] for j in reads] + uin, body)

    uops = [s.read_unknown(a) for a, k in zip(eqn.ins[1:], op_known) if not k]
    upred = s.residual(pred)
    res_args = [s.residual(r) for r in list(rest) + [kops[j] for j in reads]]
    uouts = s.ub.bind(eqn.prim, [upred, *res_args, *uops],
                      {"then_fn": unknown_branch(tu, True, tk, remat_t, own_t),
                       "else_fn": unknown_branch(eu, False, ek, remat_e, own_e)})
    ki, ui = iter(main), iter(uouts)
    for v, unk in zip(eqn.outs, unknown_out):
        if unk:
            s.unknown[v] = next(ui)
        else:
            s.known[v] = next(ki)


def if_transpose(name: str):
    """The transpose rule of the if-like prim `name`: the same prim over the adjoints of its branches."""
    def rule(b, cts, ins, linear, then_fn, else_fn):
        return _if_transpose(b, PRIMS[name], cts, ins, linear, then_fn, else_fn)
    return rule


def _if_transpose(b, prim, cts, ins, linear, then_fn, else_fn):
    # the adjoint of an if is the if of the adjoints of its branches
    *_, tp = _tr()
    mask = linear[1:]
    fs = [tp.transpose_func(f, mask) for f in (then_fn, else_fn)]
    nonlin = [a for a, m in zip(ins[1:], mask) if not m]
    cts = [c if c is not None else zeros(t) for c, t in zip(cts, then_fn.out_types)]
    outs = b.bind(prim, [ins[0], *nonlin, *cts], {"then_fn": fs[0], "else_fn": fs[1]})
    it = iter(outs)
    return [None] + [next(it) if m else None for m in mask]


def _narrow(f: Func, keep: list[int]) -> Func:
    from ..transforms.dce import dce
    return dce(Func(f.name, f.params, f.eqns, tuple(f.results[i] for i in keep)))


def _cond_prune(eqn, used):
    # unused results are dropped from both branches; operands that are literals are substituted
    # into the branches, operands that neither branch reads are dropped
    keep = [i for i, u in enumerate(used) if u]
    fns = [_narrow(eqn.params[k], keep) for k in ("then_fn", "else_fn")]
    ops = list(eqn.ins[1:])
    fns = [_bind_literals(f, ops) for f in fns]
    read = [any(_reads(f, f.params[i]) for f in fns) for i in range(len(ops))]
    drop = [i for i, a in enumerate(ops) if isinstance(a, Lit) or not read[i]]
    if not drop and len(keep) == len(used):
        return eqn
    kept_ops = [i for i in range(len(ops)) if i not in drop]
    fns = [Func(f.name, tuple(f.params[i] for i in kept_ops), f.eqns, f.results, f.result_names) for f in fns]
    params = dict(eqn.params, then_fn=fns[0], else_fn=fns[1])
    ins = (eqn.ins[0],) + tuple(ops[i] for i in kept_ops)
    return Eqn(eqn.prim, ins, tuple(eqn.outs[i] for i in keep), freeze(params), eqn.loc)


def _reads(f: Func, v: Var) -> bool:
    return any(v is a for e in f.eqns for a in e.ins) or any(v is r for r in f.results)


def _bind_literals(f: Func, args) -> Func:
    """f with the params whose argument is a literal replaced by that literal (params kept)."""
    lits = {p: a for p, a in zip(f.params, args) if isinstance(a, Lit)}
    if not lits:
        return f
    b = Builder()
    env = dict(lits)
    for p in f.params:
        env.setdefault(p, p)
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    for e in f.eqns:
        b.loc = e.loc
        env.update(zip(e.outs, b.bind(e.prim, [read(a) for a in e.ins], dict(e.params))))
    return b.func(f.name, list(f.params), [read(r) for r in f.results], f.result_names)


cond = Prim(
    name="cond",
    sign=unsigned,
    nonfinite=from_bodies,
    branches=True,
    sinks=True,
    strings=True,
    type_rule=_cond_rule,
    eval=_cond_eval,
    jvp=if_jvp("cond"),
    batch=cond_batch("cond"),
    emit=lambda ctx, eqn: codegen_body.emit_cond(ctx, eqn),
    transpose=if_transpose("cond"),
    partial_eval=if_partial_eval,
    prune=_cond_prune,
    doc="if/else: runs then_fn or else_fn on the operands",
)
PRIMS_COND = cond


# ---- loop ------------------------------------------------------------------------------------

def _loop_parts(ins, n_consts, n_carry):
    trip, rest = ins[0], list(ins[1:])
    return trip, rest[:n_consts], rest[n_consts:n_consts + n_carry], rest[n_consts + n_carry:]


def _stacked(t: Type, length) -> Type:
    return Type(t.dtype, (length,) + t.shape)


def _loop_rule(in_types, body, n_consts, n_carry, length, reverse):
    trip, consts, carry, xs = _loop_parts(in_types, n_consts, n_carry)
    if trip.dtype not in ("i32", "i64") or not trip.is_scalar:
        raise KsbuildError(f"a loop count must be an integer scalar, got {trip}")
    slices = [Type(x.dtype, x.shape[1:]) for x in xs]
    expect = [Type("i64")] + consts + carry + slices
    if list(body.in_types) != expect:
        raise KsbuildError("internal: loop operands do not match its body: "
                           f"{list(map(str, body.in_types))} vs {list(map(str, expect))}")
    outs = list(body.out_types)
    if outs[:n_carry] != carry:
        got = ", ".join(map(str, outs[:n_carry]))
        raise KsbuildError(f"a loop-carried value changes type inside the loop: "
                           f"({', '.join(map(str, carry))}) becomes ({got})")
    return tuple(carry) + tuple(_stacked(t, length) for t in outs[n_carry:])


def _loop_eval(trip, *rest, body, n_consts, n_carry, length, reverse, env):
    consts, carry, xs = list(rest[:n_consts]), list(rest[n_consts:n_consts + n_carry]), rest[n_consts + n_carry:]
    from ..ir.types import concrete_shape, numpy_dtype

    n = int(trip)
    rows = n if length is None else concrete_shape(_stacked(Type("i64"), length), env)[0]
    if n > rows:
        raise KsbuildError(f"internal: a loop runs {n} times but its length (bound) is {rows}")
    ys = [np.zeros(concrete_shape(_stacked(t, rows), env), numpy_dtype(t.dtype)) for t in body.out_types[n_carry:]]
    for k in (range(n - 1, -1, -1) if reverse else range(n)):
        outs = _interp()(body, [np.int64(k)] + consts + carry + [x[k] for x in xs], env)
        carry = list(outs[:n_carry])
        for y, o in zip(ys, outs[n_carry:]):
            y[k] = o
    return tuple(carry) + tuple(ys)


def _loop_jvp(b, primals, tangents, body, n_consts, n_carry, length, reverse):
    # d(loop) = loop of the jvp of the body, tangents carried beside primals
    _, jvp, *_ = _tr()
    trip, consts, carry, xs = _loop_parts(primals, n_consts, n_carry)
    _, tc, tcar, txs = _loop_parts([None] + list(tangents[1:]), n_consts, n_carry)
    ct = [t is not None for t in tc]
    xt = [t is not None for t in txs]
    car = [t is not None for t in tcar]
    while True:  # a carry has a tangent if it starts with one or the body gives it one
        jb = jvp.jvp_func(body, [False] + ct + car + xt)
        touts = jb.results[len(body.results):]
        float_outs = [i for i, t in enumerate(body.out_types) if t.is_float]
        new = list(car)
        for i, r in zip(float_outs, touts):
            if i < n_carry and not (isinstance(r, Lit) and r.value == 0):
                new[i] = True
        if new == car:
            break
        car = new
    nk = 1 + n_consts + n_carry + len(xs)
    n_tc, n_tcar = sum(ct), sum(car)
    order_in = ([0] + list(range(1, 1 + n_consts)) + list(range(nk, nk + n_tc))
                + list(range(1 + n_consts, 1 + n_consts + n_carry)) + list(range(nk + n_tc, nk + n_tc + n_tcar))
                + list(range(1 + n_consts + n_carry, nk)) + list(range(nk + n_tc + n_tcar, len(jb.params))))
    nr = len(body.results)
    tpos = {i: nr + j for j, i in enumerate(float_outs)}
    order_out = (list(range(n_carry)) + [tpos[i] for i in range(n_carry) if car[i]]
                 + list(range(n_carry, nr)) + [tpos[i] for i in float_outs if i >= n_carry])
    nb = permuted(jb, order_in, order_out, f"jvp_{body.name}")
    tcar_init = [t if t is not None else zeros(c.type) for t, c, m in zip(tcar, carry, car) if m]
    args = [trip, *consts, *[t for t in tc if t is not None], *carry, *tcar_init, *xs,
            *[t for t in txs if t is not None]]
    outs = b.bind(PRIMS_LOOP, args, dict(body=nb, n_consts=n_consts + n_tc, n_carry=n_carry + n_tcar,
                                           length=length, reverse=reverse))
    it_c, it_tc = iter(outs[:n_carry]), iter(outs[n_carry:n_carry + n_tcar])
    ys = outs[n_carry + n_tcar:]
    n_ys = nr - n_carry
    prim_outs = list(it_c) + list(ys[:n_ys])
    yts = iter(ys[n_ys:])
    touts = [next(it_tc) if m else None for m in car]
    touts += [next(yts) if t.is_float else None for t in body.out_types[n_carry:]]
    return prim_outs, touts


def _loop_batch(b, ins, batched, size, body, n_consts, n_carry, length, reverse):
    _, _, vmap, *_ = _tr()
    if batched[0]:
        raise KsbuildError("vmap over a loop whose count differs between lanes is not supported yet",
                           hint="pass the loop count unbatched, e.g. in_axes=(0, None)")
    trip, consts, carry, xs = _loop_parts(ins, n_consts, n_carry)
    _, cb, carb, xb = _loop_parts(batched, n_consts, n_carry)
    xs = [b.transpose(x, perm=(1, 0) + tuple(range(2, x.type.rank))) if bt else x for x, bt in zip(xs, xb)]
    carb = list(carb)
    while True:
        _, obt = vmap.vmap_func(body, [False] + cb + carb + xb, size)
        new = [c or o for c, o in zip(carb, obt[:n_carry])]
        if new == carb:
            break
        carb = new
    force = carb + obt[n_carry:]
    vb, obt = vmap.vmap_func(body, [False] + cb + carb + xb, size, force)
    carry = [c if bt or not f else b.broadcast_to(c, shape=(size,) + c.type.shape)
             for c, bt, f in zip(carry, batched[1 + n_consts:1 + n_consts + n_carry], carb)]
    outs = b.bind(PRIMS_LOOP, [trip, *consts, *carry, *xs],
                  dict(body=vb, n_consts=n_consts, n_carry=n_carry, length=length, reverse=reverse))
    ys = [b.transpose(y, perm=(1, 0) + tuple(range(2, y.type.rank))) if bt else y
          for y, bt in zip(outs[n_carry:], obt[n_carry:])]
    return list(outs[:n_carry]) + ys, obt


def _loop_partial_eval(s, eqn, mask):
    """Split a loop: the known loop stacks per-iteration residuals, the unknown loop reads them."""
    _, _, _, pe, _ = _tr()
    p = eqn.params
    body, n_consts, n_carry = p["body"], p["n_consts"], p["n_carry"]
    if not mask[0]:
        raise KsbuildError("internal: a loop count depends on a tangent", eqn.loc)
    _, ck, cark, xk = _loop_parts(mask, n_consts, n_carry)
    body_known = [True] + ck + cark + xk
    unknown_out = pe.out_unknown_fixpoint([body], body_known, n_carry_from=1 + n_consts, n_carry=n_carry)
    unknown_out = [u or not k for u, k in zip(unknown_out[:n_carry], cark)] + unknown_out[n_carry:]
    cark = [not u for u in unknown_out[:n_carry]]
    body_known = [True] + ck + cark + xk
    bk, bu, _, nres = pe.partial_eval(body, body_known, unknown_out)
    n_kout = unknown_out.count(False)
    kconst_params = bk.params[1:1 + sum(ck)]
    res = list(bk.results[n_kout:])
    remat = _rematerialized(bk, res, kconst_params)      # cheap from k and consts: recompute them
    inv = [r for r in res if r in kconst_params]          # loop-invariant residuals: pass as consts
    var = [r for r in res if r not in kconst_params and r not in remat.results]  # the others: stack them
    inv += [p for p in remat.params[1:] if p not in inv]  # consts the recomputation reads
    n_kc, n_kcar = sum(ck), sum(cark)
    recompute = bool(var) and p["length"] is None  # no size to stack them by: recompute them instead
    if recompute and any(xk):
        raise KsbuildError("reverse mode through this loop needs its count as a dim", eqn.loc,
                           hint="loop over range(<literal>) or over a tensor dimension such as range(len(x))")
    if recompute:
        inv, var, remat = [], [], Func("remat", (), (), ())  # every residual comes from recomputed()
    order = list(range(len(bk.results)))
    kbody = permuted(bk, list(range(len(bk.params))),
                     order[:n_kout] + [n_kout + res.index(r) for r in var], f"{body.name}_fwd")
    _, consts, carry, xs = _loop_parts(eqn.ins, n_consts, n_carry)
    kargs = ([s.read_known(eqn.ins[0])] + [s.read_known(a) for a, k in zip(consts, ck) if k]
             + [s.read_known(a) for a, k in zip(carry, cark) if k] + [s.read_known(a) for a, k in zip(xs, xk) if k])
    kouts = s.kb.bind(PRIMS_LOOP, kargs, dict(body=kbody, n_consts=n_kc, n_carry=n_kcar,
                                               length=p["length"], reverse=p["reverse"]))
    # unknown loop: params (k, inv residuals, unknown consts, unknown carry, unknown xs, residual slices)
    ucar_types = [t for t, u in zip(body.in_types[1 + n_consts:1 + n_consts + n_carry], unknown_out) if u]
    uc_types = [t for t, k in zip(body.in_types[1:1 + n_consts], ck) if not k]
    ux_types = [t for t, k in zip(body.in_types[1 + n_consts + n_carry:], xk) if not k]
    inv_pos = [kconst_params.index(r) for r in inv]

    kcarry_body = permuted(bk, list(range(len(bk.params))), list(range(n_kcar)), f"{body.name}_steps")

    i64 = Type("i64")
    # a reverse loop's iteration k comes after the steps n-1, ..., k+1: a reverse loop of n-1-k steps whose
    # index is shifted by k+1 (an extra const) reruns them
    shifted_body = wrap(f"{body.name}_steps_from", [i64, i64] + list(kcarry_body.in_types[1:]),
                        lambda b, ps: inline(b, kcarry_body, [b.add(ps[0], ps[1])] + list(ps[2:])))

    def recomputed(b, k, start):
        """Iteration k's residuals, from the known consts and initial carry: rerun the steps before it."""
        kcs, kcar0 = start[:n_kc], start[n_kc:n_kc + n_kcar]
        if p["reverse"]:
            after = b.add(k, Lit(1, i64))
            kcar = b.bind(PRIMS_LOOP, [b.sub(start[-1], after), after, *kcs, *kcar0],
                          dict(body=shifted_body, n_consts=n_kc + 1, n_carry=n_kcar, length=None, reverse=True))
        else:
            kcar = b.bind(PRIMS_LOOP, [k, *kcs, *kcar0], dict(body=kcarry_body, n_consts=n_kc, n_carry=n_kcar,
                                                              length=None, reverse=False))
        return inline(b, bk, [k, *kcs, *kcar])[n_kout:]

    kcarry_args = [s.read_known(a) for a, k in zip(carry, cark) if k]
    kconst_args = [s.read_known(a) for a, k in zip(consts, ck) if k]
    # recompute: the unknown loop takes the known consts and initial carries (and, reversed, the count) as
    # consts of its own
    start = kconst_args + kcarry_args + ([s.read_known(eqn.ins[0])] if p["reverse"] else []) if recompute else []

    def ubody(b, ps):
        i = 0
        k = ps[i]; i += 1  # noqa: E702
        invs = ps[i:i + len(inv)]; i += len(inv)  # noqa: E702
        starts = ps[i:i + len(start)]; i += len(start)  # noqa: E702
        ucs = ps[i:i + len(uc_types)]; i += len(uc_types)  # noqa: E702
        ucar = ps[i:i + len(ucar_types)]; i += len(ucar_types)  # noqa: E702
        uxs = ps[i:i + len(ux_types)]; i += len(ux_types)  # noqa: E702
        rsl = ps[i:]
        if recompute:
            return inline(b, bu, recomputed(b, k, starts) + list(ucs) + list(ucar) + list(uxs))
        rmap = {id(r): a for r, a in zip(inv, invs)} | {id(r): a for r, a in zip(var, rsl)}
        again = inline(b, remat, [k] + [rmap[id(p)] for p in remat.params[1:]])
        rmap |= {id(r): a for r, a in zip(remat.results, again)}
        resid_args = [rmap[id(r)] for r in res]
        return inline(b, bu, resid_args + list(ucs) + list(ucar) + list(uxs))

    inv_args = [s.residual(kconst_args[j]) for j in inv_pos]
    stacked = kouts[n_kout:]
    ubody_f = wrap(f"{body.name}_lin", [Type("i64")] + [r.type for r in inv] + [a.type for a in start] + uc_types
                   + ucar_types + ux_types + [r.type for r in var], ubody,
                   _lin_body_hints(body, inv + start, var, ck, unknown_out[:n_carry], xk))
    ucar_args = []
    for a, u, k in zip(carry, unknown_out[:n_carry], cark):
        if u:
            ucar_args.append(s.read_unknown(a))
    uargs = ([s.residual(s.read_known(eqn.ins[0]))] + inv_args + [s.residual(a) for a in start]
             + [s.read_unknown(a) for a, k in zip(consts, ck) if not k] + ucar_args
             + [s.read_unknown(a) for a, k in zip(xs, xk) if not k] + [s.residual(r) for r in stacked])
    uouts = s.ub.bind(PRIMS_LOOP, uargs, dict(body=ubody_f, n_consts=len(inv) + len(start) + len(uc_types),
                                              n_carry=len(ucar_types), length=p["length"], reverse=p["reverse"]))
    s.kb.name_like(stacked, var)  # a stacked residual keeps the name of the value it stacks
    ki, ui = iter(kouts), iter(uouts)
    carry_outs = [(next(ui) if u else next(ki)) for u in unknown_out[:n_carry]]
    y_outs = [(next(ui) if u else next(ki)) for u in unknown_out[n_carry:]]
    for v, o, u in zip(eqn.outs, carry_outs + y_outs, unknown_out):
        (s.unknown if u else s.known)[v] = o
        (s.ub if u else s.kb).name_like([o], [v])


def _rematerialized(bk: Func, res, kconst_params) -> Func:
    """remat(k, *the consts it reads) -> the residuals of a loop body that are cheap functions of
    the counter k and loop constants (the index k itself, x[k], L[r, k] - mu[k]): the reverse loop
    recomputes them instead of reading them from a stack of one per iteration."""
    remat = _cheap_part(bk, [r for r in res if r not in kconst_params], [bk.params[0], *kconst_params])
    params = [bk.params[0]] + [p for p in remat.params if p is not bk.params[0]]
    return Func("remat", tuple(params), remat.eqns, remat.results)


def _cheap_part(f: Func, res, leaves) -> Func:
    """part(*the leaves it reads, in f's order) -> those of res that are views of leaves or scalar integer-like
    arithmetic on them (a loop count, an index), which a backward pass recomputes rather than receives: each made
    by a prim whose record says `loop_remat` ("any" rank, or "scalar")."""
    made = {o: e for e in f.eqns for o in e.outs}
    leaf_set = set(leaves)
    cheap: dict[Var, bool] = {}

    def is_cheap(a) -> bool:
        if isinstance(a, Lit) or a in leaf_set:
            return True
        if a not in cheap:
            e = made.get(a)
            kind = e.prim.loop_remat if e is not None else ""
            kind_ok = kind == "any" or (kind == "scalar" and not a.type.rank)
            cheap[a] = kind_ok and all(is_cheap(x) for x in e.ins)
        return cheap[a]

    out = [r for r in res if is_cheap(r)]
    needed = set(out)
    eqns = []
    for e in reversed(f.eqns):
        if any(o in needed for o in e.outs):
            eqns.append(e)
            needed.update(a for a in e.ins if isinstance(a, Var))
    return Func("remat", tuple(p for p in leaves if p in needed), tuple(reversed(eqns)), tuple(out))


def _lin_body_hints(body: Func, residuals, stacked, ck, unknown_carry, xk) -> list[str]:
    """The names of the unknown loop body's params (partial eval): the counter's, each residual's, and those of the
    body's unknown consts, carries and xs (a tangent dsum stays dsum: the reverse loop's carry becomes d_sum)."""
    consts, carry, xs = _loop_parts(body.params, len(ck), len(unknown_carry))[1:]
    return ([body.params[0].hint] + [getattr(r, "hint", "") for r in residuals]
            + [p.hint for p, k in zip(consts, ck) if not k] + [p.hint for p, u in zip(carry, unknown_carry) if u]
            + [p.hint for p, k in zip(xs, xk) if not k] + [r.hint for r in stacked])


def _transposed_body_hints(body: Func, n_consts: int, n_carry: int, cl, xl, cotangent_name) -> list[str]:
    """The names of the reverse loop body's params: the counter's, the nonlinear consts' own, the cotangent sums of
    the linear consts and of the carries (d_x for x), the nonlinear xs', the cotangents of the ys."""
    _, consts, carry, xs = _loop_parts(body.params, n_consts, n_carry)
    ys = body.results[n_carry:]
    return ([body.params[0].hint] + [p.hint for p, m in zip(consts, cl) if not m]
            + [cotangent_name(p.hint) for p, m in zip(consts, cl) if m] + [cotangent_name(p.hint) for p in carry]
            + [p.hint for p, m in zip(xs, xl) if not m] + [cotangent_name(getattr(r, "hint", "")) for r in ys])


def _loop_transpose(b, cts, ins, linear, body, n_consts, n_carry, length, reverse, acc=None):
    # adjoint of a linear scan: run the loop backwards; the carry cotangent flows back, the
    # cotangents of linear consts accumulate as extra carries, those of xs come out as ys.
    # `acc` holds each operand's cotangent so far (the loop `accumulates`): the const carries
    # start from it, so a loop nested in a loop adds into one gradient instead of a fresh zero one.
    *_, tp = _tr()
    trip, consts, carry, xs = _loop_parts(ins, n_consts, n_carry)
    _, cl, carl, xl = _loop_parts(linear, n_consts, n_carry)
    _, acc_c, acc_car, acc_x = _loop_parts(acc or [None] * len(ins), n_consts, n_carry)
    carl = [True] * n_carry  # a carry of a linear loop is linear even when it starts as a literal zero
    ct_carry = [c if c is not None else zeros(t) for c, t in zip(cts[:n_carry], body.out_types[:n_carry])]
    ct_ys = [c if c is not None else zeros(t) for c, t in zip(cts[n_carry:], [_stacked(t, length) for t in
                                                                           body.out_types[n_carry:]])]
    body_t = tp.transpose_func(body, [False] + cl + carl + xl, accumulate=True)
    # body_t(k, nonlin consts, nonlin x slices, ct carry out, ct y slices, start per linear param)
    #   -> (ct lin consts, ct carry, ct lin xs), each plus its start
    nl_c_types = [t for t, m in zip(body.in_types[1:1 + n_consts], cl) if not m]
    lin_c_types = [t for t, m in zip(body.in_types[1:1 + n_consts], cl) if m]
    nl_x_types = [t for t, m in zip(body.in_types[1 + n_consts + n_carry:], xl) if not m]
    lin_x_types = [t for t, m in zip(body.in_types[1 + n_consts + n_carry:], xl) if m]
    car_types = list(body.in_types[1 + n_consts:1 + n_consts + n_carry])
    ys_types = list(body.out_types[n_carry:])
    n_lc = len(lin_c_types)

    def tbody(bb, ps):
        k, rest = ps[0], ps[1:]
        ncs, rest = rest[:len(nl_c_types)], rest[len(nl_c_types):]
        sums, rest = rest[:n_lc], rest[n_lc:]
        ctc, rest = rest[:n_carry], rest[n_carry:]
        nxs, cty = rest[:len(nl_x_types)], rest[len(nl_x_types):]
        fresh = [zeros(t) for t in car_types + lin_x_types]
        return inline(bb, body_t, [k, *ncs, *nxs, *ctc, *cty, *sums, *fresh])

    tb = wrap(f"{body.name}_T", [Type("i64")] + nl_c_types + lin_c_types + car_types + nl_x_types + ys_types, tbody,
              _transposed_body_hints(body, n_consts, n_carry, cl, xl, tp.cotangent_name))
    nl_consts = [a for a, m in zip(consts, cl) if not m]
    acc0 = [a if a is not None else zeros(t) for a, t in zip([a for a, m in zip(acc_c, cl) if m], lin_c_types)]
    nl_xs = [a for a, m in zip(xs, xl) if not m]
    outs = b.bind(PRIMS_LOOP, [trip, *nl_consts, *acc0, *ct_carry, *nl_xs, *ct_ys],
                  dict(body=tb, n_consts=len(nl_c_types), n_carry=n_lc + n_carry, length=length,
                       reverse=not reverse))
    lc, cc, lx = iter(outs[:n_lc]), iter(outs[n_lc:n_lc + n_carry]), iter(outs[n_lc + n_carry:])
    return ([None] + [next(lc) if m else None for m in cl] + [add_cts(b, a, next(cc)) for a in acc_car]
            + [add_cts(b, a, next(lx)) if m else None for a, m in zip(acc_x, xl)])


def _loop_prune(eqn, used):
    # drop unused ys, then carries that are unused after the loop and read by no kept result, then the
    # constants and stacked inputs the remaining body does not read (a factor that only a dropped derivative used)
    p = eqn.params
    body, nc, ncar = p["body"], p["n_consts"], p["n_carry"]
    keep_c = [i for i in range(ncar) if used[i]]
    while True:
        keep = keep_c + [ncar + j for j, u in enumerate(used[ncar:]) if u]
        live = _narrow(body, keep)
        read = {a for e in live.eqns for a in e.ins} | set(live.results)
        need = sorted(set(keep_c) | {i for i in range(ncar) if body.params[1 + nc + i] in read})
        if need == keep_c:
            break
        keep_c = need
    keep_k = [j for j in range(nc) if body.params[1 + j] in read]
    all_xs = range(1 + nc + ncar, len(body.params))
    xs_pos = [i for i in all_xs if body.params[i] in read]  # (a stacked input the body no longer reads)
    if len(keep) == len(used) and len(keep_k) == nc and len(xs_pos) == len(all_xs):
        return eqn
    cpos = [1 + nc + i for i in keep_c]
    order_in = [0] + [1 + j for j in keep_k] + cpos + xs_pos
    nb = permuted(live, order_in, list(range(len(keep))), body.name)
    ins = [eqn.ins[i] for i in order_in]
    params = dict(p, body=nb, n_carry=len(keep_c), n_consts=len(keep_k))
    return Eqn(eqn.prim, tuple(ins), tuple(eqn.outs[i] for i in keep), freeze(params), eqn.loc)


loop = Prim(
    name="loop",
    sign=unsigned,
    nonfinite=from_bodies,
    strings=True,
    type_rule=_loop_rule,
    eval=_loop_eval,
    jvp=_loop_jvp,
    batch=_loop_batch,
    emit=lambda ctx, eqn: codegen_body.emit_loop(ctx, eqn),
    transpose=_loop_transpose,
    accumulates=True,
    partial_eval=_loop_partial_eval,
    prune=_loop_prune,
    doc="a counted loop with carried state and stacked per-iteration values (a scan)",
)
PRIMS_LOOP = loop


# ---- call ------------------------------------------------------------------------------------

def keeps_call(fn: Func) -> bool:
    """Whether a call of fn stays a call: in the C++ a function of its own (codegen/helpers.py), and under jvp and
    vjp a call of its transformed callee. The rule: fn's values are all scalars (non-string), nested bodies
    included. A callee with tensors stays a call only where its call is marked `kept` (call_params: large enough to
    pay; vmap's batched callees); other calls are inlined by the transformations and emitted as blocks
    (docs/architecture.md, "Calls")."""
    return _scalars_only(fn)


_SCALARS_ONLY: "weakref.WeakKeyDictionary[Func, bool]" = weakref.WeakKeyDictionary()


def _scalars_only(fn: Func) -> bool:
    """Whether every value of fn, nested bodies included, is a non-string scalar. Each body once (Funcs are
    immutable: the answer is kept while fn lives): keeps_call on a chain of 300 calls, asked at every level, took
    130 s through printer.walk_vars, then a quarter of the front end's time (tests/test_frontend_robustness.py) with
    a walk of the whole chain per question."""
    known = _SCALARS_ONLY.get(fn)
    if known is None:
        known = all(v.type.rank == 0 and v.type.dtype != "str" for v in fn.params) and all(
            all(v.type.rank == 0 and v.type.dtype != "str" for v in e.outs) and
            all(_scalars_only(sub) for sub in e.params.values() if isinstance(sub, Func)) for e in fn.eqns)
        _SCALARS_ONLY[fn] = known
    return known


def kept_call(eqn) -> bool:
    """Whether a call equation stays a call: its callee keeps_call, or the call is marked `kept` (vmap batched a
    kept call: its callee is the batched helper, a tensor function with a C++ function and memory plan of its own,
    codegen/helpers.py; the calls jvp and vjp derive from such a call are marked too)."""
    return eqn.prim is call and (bool(eqn.params.get("kept")) or keeps_call(eqn.params["fn"]))


def call_params(fn: Func) -> dict:
    """The params of a user's call of fn (frontends): a callee with tensors is marked `kept` (a function of its own,
    transformed as a call) when it is large enough to pay for passing its arrays through memory: as for a batched
    callee, at least BATCHED_CALL_EQNS_PER_ARRAY equations per tensor argument and tensor result; a smaller one is
    inlined, where its loops can join the caller's and it writes straight into the caller's buffers."""
    if keeps_call(fn) or not _pays_as_call(fn):
        return {"fn": fn}
    return {"fn": fn, "kept": True}


def _pays_as_call(fn: Func) -> bool:
    from ..ir.printer import walk_vars
    if any(v.type.dtype == "str" for v in walk_vars(fn)):
        return False
    arrays = sum(t.rank > 0 for t in (*fn.in_types, *fn.out_types))
    return _equations(fn) >= BATCHED_CALL_EQNS_PER_ARRAY * arrays


def _bind_kept(b, ins, fn):
    """Bind a kept call of fn (marked `kept` when fn has tensors, which keeps_call alone would inline)."""
    return b.bind(call, list(ins), {"fn": fn} if keeps_call(fn) else {"fn": fn, "kept": True})


def _call_rule(in_types, fn, kept=False):
    if list(in_types) != list(fn.in_types):
        want = ", ".join(map(str, fn.in_types))
        got = ", ".join(map(str, in_types))
        raise KsbuildError(f"'{fn.name}' takes ({want}) but is called with ({got})")
    return fn.out_types


def _call_jvp(b, primals, tangents, fn, kept=False):
    # d f(x) = (jvp f)(x, dx): a kept call (kept_call) calls the jvp of its callee, the others are inlined
    _, jvp, *_ = _tr()
    if not (kept or keeps_call(fn)):
        return jvp.jvp_eqns(b, fn, primals, tangents)
    has_t = tuple(t is not None for t in tangents)
    jf = _derived(fn, ("jvp", has_t), lambda: jvp.jvp_func(fn, has_t, f"jvp_{fn.name}"))
    if not (keeps_call(jf) or _pays_as_call(jf)):
        return jvp.jvp_eqns(b, fn, primals, tangents)
    outs = _bind_kept(b, [*primals, *(t for t in tangents if t is not None)], jf)
    n = len(fn.results)
    it = iter(outs[n:])
    return outs[:n], [next(it) if t.is_float else None for t in fn.out_types]


def _call_partial_eval(s, eqn, mask):
    # a kept call of (jvp f) splits into a call of its known part (the primal results and the residuals) and a
    # call of its unknown part (residuals, tangents) -> tangents: the forward and the linear half of its callee
    _, _, _, pe, _ = _tr()
    fn = eqn.params["fn"]
    unknown_out = tuple(pe.out_unknown_fixpoint([fn], mask))
    known, unknown, _, _ = _derived(fn, ("split", tuple(mask), unknown_out),
                                    lambda: _split_callee(fn, list(mask), list(unknown_out)))
    if not (keeps_call(known) or _pays_as_call(known)):
        return _split_inline(s, eqn, fn, unknown_out)
    n_known = unknown_out.count(False)
    kouts = _bind_kept(s.kb, [s.read_known(a) for a, k in zip(eqn.ins, mask) if k], known)
    uins = [s.residual(r) for r in kouts[n_known:]] + [s.read_unknown(a) for a, k in zip(eqn.ins, mask) if not k]
    uouts = _bind_kept(s.ub, uins, unknown)
    ki, ui = iter(kouts[:n_known]), iter(uouts)
    for v, unk in zip(eqn.outs, unknown_out):
        if unk:
            s.unknown[v] = next(ui)
        else:
            s.known[v] = next(ki)


def _split_inline(s, eqn, fn: Func, unknown_out) -> None:
    """The callee's equations split in place of the call: its forward half would pass more arrays than it pays for
    (_pays_as_call: a residual per step of a helper with tensors; as a call, 5-7 times slower on cheap arithmetic)."""
    from ..transforms.partial_eval import split_eqns
    g = fresh_copy(fn)
    for p, a in zip(g.params, eqn.ins):
        if s.is_known(a):
            s.known[p] = s.read_known(a)
        else:
            s.unknown[p] = s.read_unknown(a)
    split_eqns(s, g)
    for v, r, unk in zip(eqn.outs, g.results, unknown_out):
        if unk:
            s.unknown[v] = s.read_unknown(r)
        else:
            s.known[v] = s.read_known(r)


def _split_callee(fn: Func, mask, unknown_out):
    _, _, _, pe, _ = _tr()
    known, unknown, out_known, n_res = pe.partial_eval(fn, mask, unknown_out)
    base = fn.name[4:] if fn.name.startswith("jvp_") else fn.name
    return known.renamed(f"fwd_{base}"), unknown.renamed(f"lin_{base}"), out_known, n_res


def _call_transpose(b, cts, ins, linear, fn, kept=False):
    # the adjoint of a call of a linear function is a call of the adjoint of that function
    *_, tp = _tr()
    base = fn.name[4:] if fn.name.startswith("lin_") else fn.name
    ft = _derived(fn, ("transpose", tuple(linear)), lambda: tp.transpose_func(fn, linear, f"bwd_{base}"))
    nonlin = [a for a, m in zip(ins, linear) if not m]
    cts = [c if c is not None else zeros(t) for c, t in zip(cts, fn.out_types)]
    it = iter(_bind_kept(b, [*nonlin, *cts], ft))
    return [next(it) if m else None for m in linear]


# callee -> {what was derived from it: the derived Func}. Funcs are immutable, so every call of one callee transformed
# alike gets the same transformed callee (one C++ function, codegen/helpers.py), and it is built once.
_DERIVED: "weakref.WeakKeyDictionary[Func, dict]" = weakref.WeakKeyDictionary()


def _derived(fn: Func, key: tuple, make):
    table = _DERIVED.setdefault(fn, {})
    if key not in table:
        table[key] = make()
    return table[key]


# vmap keeps a call only when its callee does at least this many equations (nested bodies included) per array it
# passes through memory (each batched argument and each result): as a call its loops cannot join the caller's and its
# arguments and results go through buffers. Measured (docs/architecture.md, "The size rule"): with 64 per array the
# forward batched call of a helper costs at most 9% over the inlined one and its code is smaller from ~64 (cheap
# arithmetic) to ~256 (sin-bound) equations, while vmap of a vjp's forward half, whose residuals are as many arrays as
# it has steps, is 4.5-7.6 times slower as a call from 64 equations on: so it stays inlined.
BATCHED_CALL_EQNS_PER_ARRAY = 64


def _pays_as_batched_call(fn: Func, batched) -> bool:
    """Whether vmap keeps a call of fn with these arguments batched (BATCHED_CALL_EQNS_PER_ARRAY)."""
    arrays = sum(map(bool, batched)) + len(fn.results)
    return _equations(fn) >= BATCHED_CALL_EQNS_PER_ARRAY * arrays


def _equations(fn: Func) -> int:
    return sum(1 + sum(_equations(v) for v in e.params.values() if isinstance(v, Func)) for e in fn.eqns)


def _call_batch(b, ins, batched, size, fn, kept=False):
    # vmap f at a kept call is a call of (vmap f), batched as this call's arguments are (the unbatched ones stay
    # unbatched in the callee), built once per batching; the other calls, and small callees, are inlined
    _, _, vmap, *_ = _tr()
    if not (kept or keeps_call(fn)) or not _pays_as_batched_call(fn, batched):
        return vmap.vmap_eqns(b, fn, ins, batched, size)
    vf, obts = _derived(fn, ("vmap", tuple(batched), size), lambda: _batched_callee(vmap, fn, batched, size))
    return list(_bind_kept(b, ins, vf)), obts


def _batched_callee(vmap, fn: Func, batched, size):
    """(vmap fn, which results are batched), with vars of its own at every depth (the batching rules of its
    equations may keep sub-functions of fn, which fn batched otherwise at another call also holds)."""
    vf, obts = vmap.vmap_func(fn, batched, size, name=f"vmap_{fn.name}")
    return fresh_copy(vf), obts


def fresh_copy(f: Func, memo: dict | None = None) -> Func:
    """f with new vars at every depth (a body shared inside f stays shared in the copy)."""
    memo = {} if memo is None else memo
    if id(f) in memo:
        return memo[id(f)]
    env: dict = {p: Var(p.type, p.hint) for p in f.params}
    eqns = []
    for e in f.eqns:
        params = {k: fresh_copy(v, memo) if isinstance(v, Func) else v for k, v in e.params.items()}
        outs = tuple(Var(v.type, v.hint) for v in e.outs)
        eqns.append(Eqn(e.prim, tuple(env.get(a, a) if isinstance(a, Var) else a for a in e.ins), outs,
                        freeze(params), e.loc))
        env.update(zip(e.outs, outs))
    memo[id(f)] = Func(f.name, tuple(env[p] for p in f.params), tuple(eqns),
                       tuple(env.get(r, r) if isinstance(r, Var) else r for r in f.results), f.result_names)
    return memo[id(f)]


def _call_prune(eqn, used):
    # results nobody reads are dropped from the callee (a helper's `p, q = pair(x)` with q unused), then the
    # arguments the callee does not read (`h(g(x))` with h ignoring its argument: g's call is then dead)
    keep = [i for i, u in enumerate(used) if u]
    fn = _narrow(eqn.params["fn"], keep) if len(keep) < len(used) else eqn.params["fn"]
    args = [i for i, p in enumerate(fn.params) if _reads(fn, p)]
    if len(keep) == len(used) and len(args) == len(fn.params):
        return eqn
    # (a narrowed callee gets vars of its own at every depth: the whole one may still be called elsewhere, and a
    # var is defined once)
    fn = fresh_copy(Func(fn.name, tuple(fn.params[i] for i in args), fn.eqns, fn.results, fn.result_names))
    return Eqn(eqn.prim, tuple(eqn.ins[i] for i in args), tuple(eqn.outs[i] for i in keep),
               freeze(dict(eqn.params, fn=fn)), eqn.loc)


call = Prim(
    name="call",
    sign=unsigned,
    nonfinite=from_bodies,
    strings=True,
    type_rule=_call_rule,
    eval=lambda *args, fn, env, kept=False: tuple(_interp()(fn, list(args), env)),
    jvp=_call_jvp,
    batch=_call_batch,
    emit=lambda ctx, eqn: codegen_body.emit_call(ctx, eqn),
    transpose=_call_transpose,
    partial_eval=_call_partial_eval,
    prune=_call_prune,
    runs="fn",
    doc="a call to another kernel of the same module",
)
