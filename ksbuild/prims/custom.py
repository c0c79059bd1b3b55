"""Functions with derivatives the user wrote (JAX's custom_jvp / custom_vjp): every transformation uses the rule.

custom_jvp[fn, rule](*args) -> outs
    rule(*args, *tangents of the float args) -> (*outs, *tangents of the float outs); jvp inlines the rule
    instead of differentiating fn, and reverse mode transposes what it inlined (the rule must be linear in
    its tangents, as in JAX).
custom_vjp[fn, fwd, bwd](*args) -> outs
    fwd(*args) -> (*outs, *residuals); bwd(*residuals, *cotangents of the float outs) -> cotangents of the
    float args. jvp inlines fwd and leaves the tangents to a custom_vjp_lin, whose transpose is bwd.
custom_vjp_lin[bwd, n_res](*residuals, *tangents of the float args) -> tangents of the float outs
    linear in the tangents; its transpose inlines bwd; evaluated forward (jvp of a custom_vjp function) it is
    bwd transposed in its cotangents.
vmap batches fn and the rules alike (every result batched), so the derivative of a vmap uses the batched rule.
Evaluated or compiled, a custom function is its body: `expand` turns it into a call of fn.
"""
from __future__ import annotations

from ..errors import KsbuildError
from ..ir.builder import inline
from ..ir.core import Func
from .base import Prim, from_bodies, unsigned
from .common import bcast_to, zeros


def _tr():
    from ..transforms import transpose, vmap

    return vmap, transpose


def _interp():
    from ..ir.interp import eval_func

    return eval_func


def _call_prim():
    from .control import call

    return call


def _floats(types) -> list:
    return [t for t in types if t.is_float]


def _check_args(in_types, fn: Func) -> tuple:
    if list(in_types) != list(fn.in_types):
        raise KsbuildError(f"internal: '{fn.name}' takes ({', '.join(map(str, fn.in_types))}) but is given "
                           f"({', '.join(map(str, in_types))})")
    return fn.out_types


def _instantiate(primals, tangents) -> list:
    """One tangent per float primal, zeros where the tangent is symbolically zero."""
    return [t if t is not None else zeros(p.type) for p, t in zip(primals, tangents) if p.type.is_float]


def _spread(types, touts) -> list:
    """Tangents of the float results laid out over all results (None for the others)."""
    it = iter(touts)
    return [next(it) if t.is_float else None for t in types]


def _batched_all(b, ins, batched, size) -> list:
    """Every operand batched (an unbatched one broadcast along a new leading axis)."""
    vmap, _ = _tr()
    return [x if bt else bcast_to(b, x, vmap.batched_type(x.type, size)) for x, bt in zip(ins, batched)]


def _vmapped(f: Func, batched, size) -> Func:
    """f batched over the inputs marked in `batched`, with every result batched."""
    vmap, _ = _tr()
    return vmap.vmap_func(f, batched, size, [True] * len(f.results), name=f.name)[0]


def _expand_to_call(b, ins, fn, **_):
    # evaluated or compiled, a custom function is its body
    return list(b.bind(_call_prim(), ins, {"fn": fn}))


# ---- custom_jvp ------------------------------------------------------------------------------

def _custom_jvp_jvp(b, primals, tangents, fn, rule):
    # d fn(x)[dx] := rule(x, dx)[tangent part]: the user's rule replaces the derivative of the body
    outs = inline(b, rule, list(primals) + _instantiate(primals, tangents))
    n = len(fn.results)
    return outs[:n], _spread(fn.out_types, outs[n:])


def _custom_jvp_batch(b, ins, batched, size, fn, rule):
    # vmap(f) keeps the rule: f and its rule batched alike (tangents batched like their primals)
    t_batched = [bt for x, bt in zip(ins, batched) if x.type.is_float]
    outs = b.bind(custom_jvp, ins, {"fn": _vmapped(fn, batched, size),
                                    "rule": _vmapped(rule, list(batched) + t_batched, size)})
    return list(outs), [True] * len(outs)


custom_jvp = Prim(
    name="custom_jvp",
    sign=unsigned,
    nonfinite=from_bodies,
    type_rule=lambda in_types, fn, rule: _check_args(in_types, fn),
    eval=lambda *args, fn, rule, env: tuple(_interp()(fn, list(args), env)),
    jvp=_custom_jvp_jvp,
    batch=_custom_jvp_batch,
    emit=None,
    expand=_expand_to_call,
    doc="a function whose jvp is the user's rule (ksbuild.custom_jvp)",
    opt_outs=("emit: expanded into a call of its body first",),
)


# ---- custom_vjp ------------------------------------------------------------------------------

def _custom_vjp_jvp(b, primals, tangents, fn, fwd, bwd):
    # the forward pass of the rule runs; the tangents go through custom_vjp_lin, whose transpose is bwd
    outs = inline(b, fwd, list(primals))
    n = len(fn.results)
    lin = b.bind(custom_vjp_lin, outs[n:] + _instantiate(primals, tangents), {"bwd": bwd, "n_res": len(outs) - n})
    return outs[:n], _spread(fn.out_types, lin)


def _custom_vjp_batch(b, ins, batched, size, fn, fwd, bwd):
    # f, fwd and bwd batched alike: every result of fwd (so every residual) and of bwd is batched
    n_ct = len(_floats(fn.out_types))
    params = {"fn": _vmapped(fn, batched, size), "fwd": _vmapped(fwd, batched, size),
              "bwd": _vmapped(bwd, [True] * (len(bwd.params) - n_ct) + [True] * n_ct, size)}
    outs = b.bind(custom_vjp, ins, params)
    return list(outs), [True] * len(outs)


custom_vjp = Prim(
    name="custom_vjp",
    sign=unsigned,
    nonfinite=from_bodies,
    type_rule=lambda in_types, fn, fwd, bwd: _check_args(in_types, fn),
    eval=lambda *args, fn, fwd, bwd, env: tuple(_interp()(fn, list(args), env)),
    jvp=_custom_vjp_jvp,
    batch=_custom_vjp_batch,
    emit=None,
    expand=_expand_to_call,
    doc="a function whose vjp is the user's forward and backward rules (ksbuild.custom_vjp)",
    opt_outs=("emit: expanded into a call of its body first",),
)


# ---- custom_vjp_lin --------------------------------------------------------------------------

def _lin_type(in_types, bwd, n_res):
    if list(in_types) != list(bwd.in_types[:n_res]) + list(bwd.out_types):
        raise KsbuildError("internal: custom_vjp_lin operands do not match its rule")
    return tuple(bwd.in_types[n_res:])


def forward_of(bwd: Func, n_res: int) -> Func:
    """bwd transposed in its cotangents: (residuals, tangents of the args) -> tangents of the results; a located
    error if bwd is not linear in its cotangents."""
    _, transpose = _tr()
    try:
        return transpose.transpose_func(bwd, [False] * n_res + [True] * (len(bwd.params) - n_res))
    except KsbuildError as e:
        why = e.message.removeprefix("internal: ")
        raise KsbuildError(f"forward mode (jvp) of a custom_vjp function runs its backward rule '{bwd.name}' "
                           f"transposed, and it is not linear in its cotangents: {why}", e.loc,
                           hint="use ksbuild.custom_jvp for a function differentiated in forward mode; reverse "
                                "mode (vjp, grad) calls the rule as written") from None


def _lin_transpose(b, cts_out, ins, linear, bwd, n_res):
    # <ct, lin(res, t)> = <bwd(res, ct), t>: the transpose of the linear part is the user's backward rule
    if any(linear[:n_res]):
        raise KsbuildError("internal: a residual of a custom_vjp is linear")
    cts = [c if c is not None else zeros(t) for c, t in zip(cts_out, bwd.in_types[n_res:])]
    return [None] * n_res + list(inline(b, bwd, list(ins[:n_res]) + cts))


def _lin_jvp(b, primals, tangents, bwd, n_res):
    # linear in the tangents: d lin(res, t)[dt] = lin(res, dt) when the residuals do not move
    if any(t is not None for t in tangents[:n_res]):
        raise KsbuildError("second derivatives through a custom_vjp function are not supported: its backward "
                           "rule is used once, as written", hint="use ksbuild.custom_jvp, whose rule is "
                                                                 "differentiated again")
    outs = b.bind(custom_vjp_lin, primals, {"bwd": bwd, "n_res": n_res})
    douts = b.bind(custom_vjp_lin, list(primals[:n_res]) + _instantiate(primals[n_res:], tangents[n_res:]),
                   {"bwd": bwd, "n_res": n_res})
    return list(outs), list(douts)


def _lin_batch(b, ins, batched, size, bwd, n_res):
    outs = b.bind(custom_vjp_lin, _batched_all(b, ins, batched, size),
                  {"bwd": _vmapped(bwd, [True] * len(bwd.params), size), "n_res": n_res})
    return list(outs), [True] * len(outs)


def _lin_eval(*args, bwd, n_res, env):
    return tuple(_interp()(forward_of(bwd, n_res), list(args), env))


def _lin_expand(b, ins, bwd, n_res):
    return inline(b, forward_of(bwd, n_res), list(ins))


custom_vjp_lin = Prim(
    name="custom_vjp_lin",
    sign=unsigned,
    nonfinite=from_bodies,
    type_rule=_lin_type,
    eval=_lin_eval,
    jvp=_lin_jvp,
    batch=_lin_batch,
    emit=None,
    transpose=_lin_transpose,
    expand=_lin_expand,
    doc="the tangent map of a custom_vjp function: linear, transposed into the user's backward rule",
    opt_outs=("emit: expanded into its forward form first",),
)
