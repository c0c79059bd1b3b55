"""vjp and grad: reverse mode as linearize (jvp + partial_eval) then transpose.

Requires: a verified Func. Guarantees: vjp(f)(primals, one cotangent per float result) ->
one cotangent per float param; grad(f)(primals) -> the same with the cotangent fixed to 1
(f must have exactly one float scalar result). fwd(f)/bwd(f) split vjp(f) in two so that the
forward pass is not recomputed: fwd(f)(primals) -> (results, residuals) and
bwd(f)(primals, residuals, cotangents) -> the cotangents vjp(f) returns.
"""
from __future__ import annotations

from ..errors import KsbuildError
from ..ir.builder import Builder, inline
from ..ir.core import Func, Lit, Var
from ..prims.control import kept_call
from .inline_calls import inline_calls
from .jvp import jvp_func, tangent_mask
from .partial_eval import partial_eval
from .transpose import transpose_func


def linearize(f: Func, argnums=None):
    """(forward, linear, n_results, n_res): forward(primals) -> (results, residuals);
    linear(residuals, tangents) -> tangents of the float results (of the argnums params only)."""
    f = inline_calls(f, keep=kept_call)
    has_t = diff_mask(f, argnums)
    jf = jvp_func(f, has_t)
    n_out, n_t = len(f.results), sum(has_t)
    n_tout = len(jf.results) - n_out
    known = [True] * len(f.params) + [False] * n_t
    fwd, lin, _, n_res = partial_eval(jf, known, [False] * n_out + [True] * n_tout)
    return fwd, lin, n_out, n_res


def diff_mask(f: Func, argnums) -> list[bool]:
    """Which params get a (co)tangent: the float ones, restricted to argnums if given."""
    mask = tangent_mask(f.in_types)
    if argnums is None:
        return mask
    for i in argnums:
        if i >= len(f.params):
            raise KsbuildError(f"argnums {i} is out of range: '{f.name}' takes {len(f.params)} arguments")
        if not mask[i]:
            raise KsbuildError(f"argnums {i}: argument '{f.params[i].hint or i}' of '{f.name}' is not a float, so it "
                               "has no derivative")
    return [i in argnums for i in range(len(f.params))]


def vjp_body(b: Builder, f: Func, primals, cts, argnums=None):
    """Append vjp(f) to b: cotangents of the float params of f (of argnums, if given)."""
    fwd, lin, n_out, n_res = linearize(f, argnums)
    n_t = len(lin.params) - n_res
    lin_t = transpose_func(lin, [False] * n_res + [True] * n_t)
    outs = inline(b, fwd, primals)
    return inline(b, lin_t, outs[n_out:] + list(cts))


def vjp_func(f: Func, name: str | None = None, argnums=None) -> Func:
    """vjp(f): (primals, cotangent per float result) -> cotangent per float param."""
    b = Builder()
    primals = [Var(p.type, p.hint) for p in f.params]
    cts = [Var(t, f"ct_{n}" if n else "ct") for t, n in zip(f.out_types, _names(f)) if t.is_float]
    if not cts:
        raise KsbuildError(f"vjp of '{f.name}': it has no float result to differentiate")
    res = vjp_body(b, f, primals, cts, argnums)
    return b.func(name or f"vjp_{f.name}", primals + cts, res, _grad_names(f, argnums))


def grad_func(f: Func, name: str | None = None, argnums=None) -> Func:
    """grad(f) for f with one float scalar result: (primals) -> d result / d each float param."""
    outs = f.out_types
    if len(outs) != 1 or not outs[0].is_float or not outs[0].is_scalar:
        shown = ", ".join(map(str, outs))
        raise KsbuildError(f"grad of '{f.name}' needs exactly one float scalar result, it returns ({shown})",
                           hint="use vjp(...) for functions with several or tensor results")
    b = Builder()
    primals = [Var(p.type, p.hint) for p in f.params]
    res = vjp_body(b, f, primals, [Lit(1, outs[0])], argnums)
    return b.func(name or f"grad_{f.name}", primals, res, _grad_names(f, argnums))


def fwd_func(f: Func, name: str | None = None, argnums=None) -> Func:
    """fwd(f): (primals) -> (results of f, the stored residuals that bwd(f) reads); the forward half of vjp(f)."""
    fwd, stored, _, n_out = _split_residuals(f, argnums, "fwd")
    names = tuple(_names(f)) + tuple(f"res{i}" for i in range(len(stored)))
    return Func(name or f"fwd_{f.name}", fwd.params, fwd.eqns, fwd.results[:n_out] + tuple(stored), names)


def bwd_func(f: Func, name: str | None = None, argnums=None) -> Func:
    """bwd(f): (primals, stored residuals of fwd(f), cotangent per float result) -> cotangent per float param.

    Residuals that are elementwise functions of the primals are recomputed here (fused into the
    backward loops) instead of being stored; the others (reductions, products, loop states) are read."""
    fwd, stored, lin_t, n_out = _split_residuals(f, argnums, "bwd")
    ct_names = [f"ct_{n}" if n else "ct" for t, n in zip(f.out_types, _names(f)) if t.is_float]
    primals = [Var(p.type, p.hint) for p in f.params]
    res_params = [Var(r.type, f"res{i}") for i, r in enumerate(stored)]
    n_res = len(fwd.results) - n_out
    cts = [Var(p.type, n) for p, n in zip(lin_t.params[n_res:], ct_names)]
    b = Builder()
    env = dict(zip(stored, res_params))
    recomputed = inline(b, fwd, primals)[n_out:]
    residuals = [env.get(r, x) for r, x in zip(fwd.results[n_out:], recomputed)]
    res = inline(b, lin_t, residuals + cts)
    return b.func(name or f"bwd_{f.name}", primals + res_params + cts, res, _grad_names(f, argnums))


def _split_residuals(f: Func, argnums, what: str):
    """(forward, the residual atoms it must store, the transposed linear part, number of results of f)."""
    _need_float_result(f, what)
    fwd, lin, n_out, n_res = linearize(f, argnums)
    lin_t = transpose_func(lin, [False] * n_res + [True] * (len(lin.params) - n_res))
    cheap = _elementwise_of_params(fwd)
    stored: list = []
    for r in fwd.results[n_out:]:
        if isinstance(r, Var) and r not in cheap and r not in stored:
            stored.append(r)
    return fwd, stored, lin_t, n_out


def _elementwise_of_params(f: Func) -> set:
    """The vars of f computed from its params (and literals) by elementwise primitives only: cheap to recompute."""
    cheap = set(f.params)
    for eqn in f.eqns:
        if eqn.prim.elementwise and all(not isinstance(a, Var) or a in cheap for a in eqn.ins):
            cheap.update(eqn.outs)
    return cheap


def _need_float_result(f: Func, what: str) -> None:
    if not any(t.is_float for t in f.out_types):
        raise KsbuildError(f"{what} of '{f.name}': it has no float result to differentiate")


def _names(f: Func):
    return f.result_names or ("",) * len(f.results)


def _grad_names(f: Func, argnums=None) -> tuple[str, ...]:
    mask = diff_mask(f, argnums)
    return tuple(f"d_{p.hint or i}" for i, (p, m) in enumerate(zip(f.params, mask)) if m)
