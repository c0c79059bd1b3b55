"""vjp and grad: reverse mode as linearize (jvp + partial_eval) then transpose.

Requires: a verified Func. Guarantees: vjp(f)(primals, one cotangent per float result) ->
one cotangent per float param; grad(f)(primals) -> the same with the cotangent fixed to 1
(f must have exactly one float scalar result). fwd(f)/bwd(f) split vjp(f) in two so that the
forward pass is not recomputed: fwd(f)(primals) -> (results, residuals) and
bwd(f)(residuals, cotangents) -> the cotangents vjp(f) returns.
"""
from __future__ import annotations

from ..errors import KsbuildError
from ..ir.builder import Builder, inline
from ..ir.core import Func, Lit, Var
from .inline_calls import inline_calls
from .jvp import jvp_func, tangent_mask
from .partial_eval import partial_eval
from .transpose import transpose_func


def linearize(f: Func, argnums=None):
    """(forward, linear, n_results, n_res): forward(primals) -> (results, residuals);
    linear(residuals, tangents) -> tangents of the float results (of the argnums params only)."""
    f = inline_calls(f)
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
    """fwd(f): (primals) -> (results of f, residuals that bwd(f) reads); the forward half of vjp(f)."""
    _need_float_result(f, "fwd")
    fwd, _, n_out, n_res = linearize(f, argnums)
    names = tuple(_names(f)) + tuple(f"res{i}" for i in range(n_res))
    return Func(name or f"fwd_{f.name}", fwd.params, fwd.eqns, fwd.results, names)


def bwd_func(f: Func, name: str | None = None, argnums=None) -> Func:
    """bwd(f): (residuals of fwd(f), cotangent per float result) -> cotangent per float param of f."""
    _need_float_result(f, "bwd")
    _, lin, _, n_res = linearize(f, argnums)
    n_t = len(lin.params) - n_res
    lin_t = transpose_func(lin, [False] * n_res + [True] * n_t)
    ct_names = [f"ct_{n}" if n else "ct" for t, n in zip(f.out_types, _names(f)) if t.is_float]
    params = tuple(Var(p.type, f"res{i}") for i, p in enumerate(lin_t.params[:n_res]))
    params += tuple(Var(p.type, n) for p, n in zip(lin_t.params[n_res:], ct_names))
    b = Builder()
    res = inline(b, lin_t, params)
    return b.func(name or f"bwd_{f.name}", params, res, _grad_names(f, argnums))


def _need_float_result(f: Func, what: str) -> None:
    if not any(t.is_float for t in f.out_types):
        raise KsbuildError(f"{what} of '{f.name}': it has no float result to differentiate")


def _names(f: Func):
    return f.result_names or ("",) * len(f.results)


def _grad_names(f: Func, argnums=None) -> tuple[str, ...]:
    mask = diff_mask(f, argnums)
    return tuple(f"d_{p.hint or i}" for i, (p, m) in enumerate(zip(f.params, mask)) if m)
