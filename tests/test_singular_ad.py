"""Derivatives stay numbers where a zero (co)tangent meets an infinite derivative (issue 32).

Two ways a derivative used to come back nan where torch gives a number:
- an if-expression `math.sqrt(x) if x > 0.0 else 0.0` was a select, so its untaken side was
  differentiated: 0 * d sqrt(0) = 0 * inf = nan. It is now a cond_select: computed as a select,
  differentiated as an `if` statement;
- a value computed before an `if` and read only by the side not taken (ADBench's hand tracking:
  `n = sqrt(sum(aa**2))`, then `if n < 1e-4: return eye(3)`) gets a zero cotangent from the if,
  which sqrt's rule multiplied by 1 / (2 sqrt(0)) = inf. The derivative rules of the prims whose
  derivative can be inf or nan at a finite input multiply with `mulz`, where 0 times anything is 0.

The oracle is torch.func (grad, vjp, jvp, grad of grad) on the same kernel with a Python `if` or
if-expression, which torch runs on one side only; a `torch.where` kernel (torch: nan) is compared
with its `if` twin. Checked in the interpreter and compiled, with vmap over lanes on and around
the singular points (the lane-by-lane machinery is tests/test_branch_nan.py's; this file adds the
points outside the if, and the transformations grad, jvp and grad of grad).
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import grad_func, vjp_func
from ksbuild.transforms.vmap import vmap_func

SOURCE = '''\
import math
import torch


def sqrt_ifexp(x: float) -> float:
    return math.sqrt(x) if x > 0.0 else 0.0


def pow_ifexp(x: float) -> float:
    return math.pow(x, 1.5) if x >= 0.0 else 0.0


def rsqrt_ifexp(x: float, y: float) -> float:
    return y * torch.rsqrt(x) if x > 0.0 else y


def lgamma_ifexp(x: float) -> float:
    return torch.lgamma(x) if x > 0.0 else x


def nested_ifexp(x: float, y: float) -> float:
    return (torch.log(x) * y if y > 0.0 else math.sqrt(x)) if x > 0.0 else (x ** -2 if x != 0.0 else y)


def hand(aa: "float[3]", W: "float[3, 3]") -> float:
    """ADBench hand tracking's angle_axis_to_rotation_matrix, weighted: eye(3) below n = 1e-4."""
    n = torch.sqrt(torch.sum(aa ** 2))
    if n < 1e-4:
        return torch.sum(W * torch.eye(3))
    a = aa / n
    x, y, z = a[0], a[1], a[2]
    s, c = torch.sin(n), torch.cos(n)
    R = torch.stack([torch.stack([x * x + (1.0 - x * x) * c, x * y * (1.0 - c) - z * s, x * z * (1.0 - c) + y * s]),
                     torch.stack([x * y * (1.0 - c) + z * s, y * y + (1.0 - y * y) * c, y * z * (1.0 - c) - x * s]),
                     torch.stack([x * z * (1.0 - c) - y * s, z * y * (1.0 - c) + x * s, z * z + (1.0 - z * z) * c])])
    return torch.sum(W * R)


def div_before(x: float, w: float) -> float:
    q = w / x
    if x != 0.0:
        return q * torch.sin(w)
    return w * 2.0


def log_before(x: float, y: float) -> float:
    l = torch.log(x)
    if x > 0.0:
        return l * y
    return x * y


def exp_before(x: float) -> float:
    e = torch.exp(x)
    if x > 700.0:
        return x
    return torch.log1p(e)


def hypot_before(x: float, y: float) -> float:
    h = torch.hypot(x, y)
    if h == 0.0:
        return x + y
    return torch.atan2(y, x) * h


def fmod_before(x: float, y: float) -> float:
    r = torch.fmod(x, y)
    if y != 0.0:
        return r * r
    return x


def pow_before(x: float, y: float) -> float:
    p = x ** y
    if x > 0.0:
        return p
    return y


def log_where(x: float) -> float:
    return torch.where(x > 0.0, torch.log(x), x)


def log_where_if(x: float) -> float:
    if x > 0.0:
        return torch.log(x)
    return x
'''

TORCH_MATH = types.SimpleNamespace(sqrt=torch.sqrt, pow=torch.pow, log=torch.log, exp=torch.exp)
PY: dict = {}
exec(compile(SOURCE, "singular_kernels.py", "exec", dont_inherit=True), PY)
PY["math"] = TORCH_MATH  # math.sqrt(x) on a tensor, for the torch oracle

AA0, W = [0.0, 0.0, 0.0], np.arange(9.0).reshape(3, 3) / 4.0 - 1.0
# name -> (points on and around the singular values and branch edges, the torch twin that is the oracle)
CASES = {
    "sqrt_ifexp": ([(0.0,), (-1.0,), (2.25,)], None),
    "pow_ifexp": ([(0.0,), (-1.0,), (4.0,)], None),
    "rsqrt_ifexp": ([(0.0, 2.0), (-1.0, 3.0), (4.0, -1.0)], None),
    "lgamma_ifexp": ([(0.0,), (-1.0,), (-2.5,), (1.5,)], None),
    "nested_ifexp": ([(0.0, 1.0), (0.0, -1.0), (-1.0, 2.0), (2.0, 0.0), (0.5, -2.0)], None),
    "hand": ([(AA0, W), ([1e-5, 0.0, 0.0], W), ([0.3, -0.2, 0.1], W)], None),
    "div_before": ([(0.0, 3.0), (0.0, 0.0), (2.0, 3.0)], None),
    "log_before": ([(0.0, 2.0), (-1.0, 2.0), (0.5, -1.0)], None),
    "exp_before": ([(800.0,), (710.0,), (1.0,)], None),
    "hypot_before": ([(0.0, 0.0), (3.0, -4.0)], None),
    "fmod_before": ([(1.5, 0.0), (5.5, 2.0)], None),
    "pow_before": ([(0.0, 0.5), (-1.0, 1.5), (0.0, -1.0), (2.0, 0.5)], None),
    "log_where": ([(0.0,), (-1.0,), (2.0,)], "log_where_if"),
}
NAMES = list(CASES)
TWICE = [n for n in NAMES if n != "lgamma_ifexp"]  # (lgamma's second derivative, trigamma, is not implemented)
ONE_ARG = [n for n in TWICE if len(CASES[n][0][0]) == 1]


def points(name: str) -> list[tuple]:
    return [tuple(np.asarray(a, dtype=np.float64) for a in p) for p in CASES[name][0]]


def tensors(point) -> tuple:
    return tuple(torch.tensor(a, dtype=torch.float64) for a in point)


def torch_fn(name: str):
    """The oracle kernel as a function of tensors returning a tensor (a constant branch as 0 * x + c)."""
    f = PY[CASES[name][1] or name]

    def call(*xs):
        out = f(*xs)
        return out if isinstance(out, torch.Tensor) and out.requires_grad else xs[0].sum() * 0.0 + out

    return call


def numpy(xs) -> list[np.ndarray]:
    return [x.detach().numpy() for x in (xs if isinstance(xs, tuple) else (xs,))]


def torch_grad(name: str, p: tuple) -> list[np.ndarray]:
    return numpy(torch.func.grad(torch_fn(name), argnums=tuple(range(len(p))))(*tensors(p)))


def torch_jvp(name: str, p: tuple, t: tuple) -> list[np.ndarray]:
    return numpy(torch.func.jvp(torch_fn(name), tensors(p), tensors(t))[1])


def torch_hvp(name: str, p: tuple, t: tuple) -> list[np.ndarray]:
    """jvp(grad(f)): the Hessian times t."""
    g = torch.func.grad(torch_fn(name), argnums=tuple(range(len(p))))
    return numpy(torch.func.jvp(g, tensors(p), tensors(t))[1])


def assert_finite_close(got, want, what: str) -> None:
    """got equals the oracle, and neither is nan (an inf on the side taken is torch's too: x^1.5'' at 0)."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64)
        assert not np.any(np.isnan(w)), f"{what}: the oracle itself is nan"
        assert not np.any(np.isnan(g)), f"{what}: result {k} is nan: {g}"
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"{what}: result {k}")


def tangent(p: tuple, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(np.shape(a)) for a in p)


# ---- the interpreter ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "singular_kernels")


@pytest.mark.parametrize("name", NAMES)
def test_grad(name, ir):
    for p in points(name):
        assert_finite_close(eval_func(grad_func(ir(name)), list(p)), torch_grad(name, p), f"grad({name}) at {p}")


@pytest.mark.parametrize("name", NAMES)
def test_vjp(name, ir):
    for p in points(name):
        got = eval_func(vjp_func(ir(name)), [*p, np.float64(-1.5)])
        assert_finite_close(got, [-1.5 * g for g in torch_grad(name, p)], f"vjp({name}) at {p}")


@pytest.mark.parametrize("name", NAMES)
def test_jvp(name, ir):
    for k, p in enumerate(points(name)):
        t = tangent(p, k)
        got = eval_func(jvp_func(ir(name)), [*p, *t])
        assert_finite_close(got[1:], torch_jvp(name, p, t), f"jvp({name}) at {p}")


@pytest.mark.parametrize("name", TWICE)
def test_jvp_of_grad(name, ir):
    for k, p in enumerate(points(name)):
        t = tangent(p, 10 + k)
        got = eval_func(jvp_func(grad_func(ir(name))), [*p, *t])
        assert_finite_close(got[len(p):], torch_hvp(name, p, t), f"jvp(grad({name})) at {p}")


@pytest.mark.parametrize("name", ONE_ARG)
def test_grad_of_grad(name, ir):
    for p in points(name):
        want = numpy(torch.func.grad(torch.func.grad(torch_fn(name)))(*tensors(p)))
        assert_finite_close(eval_func(grad_func(grad_func(ir(name))), list(p)), want, f"grad(grad({name})) at {p}")


def stacked(name: str) -> list[np.ndarray]:
    return [np.stack(col) for col in zip(*points(name))]


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_grad_and_grad_of_vmap(name, ir):
    """vmap(grad(f)) lane by lane, and vjp(vmap(f)) with a cotangent of ones: the same per-lane gradients."""
    f = ir(name)
    n_in = len(f.params)
    want = [np.stack(col) for col in zip(*[torch_grad(name, p) for p in points(name)])]
    g = grad_func(f)
    vg = vmap_func(g, [True] * n_in, "n", [True] * len(g.results))[0]
    assert_finite_close(eval_func(vg, stacked(name)), want, f"vmap(grad({name}))")
    vf = vmap_func(f, [True] * n_in, "n", [True])[0]
    ones = np.ones(len(points(name)))
    assert_finite_close(eval_func(vjp_func(vf), stacked(name) + [ones]), want, f"vjp(vmap({name}))")


@pytest.mark.parametrize("name", NAMES)
def test_jvp_of_vmap(name, ir):
    f = ir(name)
    tans = [tangent(p, 20 + k) for k, p in enumerate(points(name))]
    want = np.stack([torch_jvp(name, p, t)[0] for p, t in zip(points(name), tans)])
    vf = vmap_func(f, [True] * len(f.params), "n", [True])[0]
    got = eval_func(jvp_func(vf), stacked(name) + [np.stack(col) for col in zip(*tans)])
    assert_finite_close(got[1:], [want], f"jvp(vmap({name}))")


def test_torch_where_is_nan_in_torch():
    """Why log_where's oracle is its if twin: torch's own derivative of the torch.where form is nan at 0."""
    x = torch.tensor(0.0, dtype=torch.float64)
    assert torch.isnan(torch.func.grad(PY["log_where"])(x))
    assert torch.func.grad(PY["log_where_if"])(x) == 1.0


def test_zero_tangent_meets_infinite_factor(ir):
    """jvp of sqrt(x) * y at x = 0 with the tangent of x zero: torch's forward mode says 0 * inf = nan,
    ksbuild 0 + sqrt(0) * dy = 0; where the tangent of x is not zero, inf as torch."""
    f = ir("rsqrt_ifexp")
    got = eval_func(jvp_func(f), [np.float64(4.0), np.float64(2.0), np.float64(0.0), np.float64(1.0)])
    assert got[1] == 0.5
    jf = jvp_func(ir("pow_ifexp"))
    assert eval_func(jf, [np.float64(0.0), np.float64(0.0)])[1] == 0.0
    assert eval_func(jvp_func(ir("sqrt_ifexp")), [np.float64(1e-320), np.float64(1.0)])[1] > 1e150


def test_if_expression_is_a_cond_select(ir):
    """x if p else y is a cond_select (differentiated as an if); after the pipeline, selects only (branch-free)."""
    from ksbuild.transforms.pipeline import lower
    from ksbuild.transforms.rewrite import walk_funcs

    f = ir("nested_ifexp")
    assert {e.prim.name for e in f.eqns} >= {"cond_select"} and "select" not in {e.prim.name for e in f.eqns}
    for g in (f, grad_func(f)):
        lowered = {e.prim.name for h in walk_funcs(lower(g)) for e in h.eqns}
        assert "select" in lowered and not {"cond", "cond_select"} & lowered


# ---- compiled ---------------------------------------------------------------------------------------


def exports(name: str) -> dict[str, str]:
    out = {f"{name}_grad": f"grad({name})", f"{name}_jvp": f"jvp({name})", f"{name}_vjp_vmap": f"vjp(vmap({name}))"}
    if name in TWICE:
        out[f"{name}_jvp_grad"] = f"jvp(grad({name}))"
    if name in ONE_ARG:
        out[f"{name}_grad_grad"] = f"grad(grad({name}))"
    return out


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "singular", {k: v for n in NAMES for k, v in exports(n).items()})


def as_list(x) -> list:
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("name", NAMES)
def test_compiled(name, pkg):
    pts = points(name)
    for k, p in enumerate(pts):
        assert_finite_close(getattr(pkg, f"{name}_grad")(*p), torch_grad(name, p), f"compiled grad({name}) at {p}")
        t = tangent(p, 30 + k)
        got = as_list(getattr(pkg, f"{name}_jvp")(*p, *t))
        assert_finite_close(got[-1:], torch_jvp(name, p, t), f"compiled jvp({name}) at {p}")
        if name in TWICE:
            got = as_list(getattr(pkg, f"{name}_jvp_grad")(*p, *t))
            assert_finite_close(got[-len(p):], torch_hvp(name, p, t), f"compiled jvp(grad({name})) at {p}")
        if name in ONE_ARG:
            want = numpy(torch.func.grad(torch.func.grad(torch_fn(name)))(*tensors(p)))
            assert_finite_close(getattr(pkg, f"{name}_grad_grad")(*p), want, f"compiled grad(grad({name})) at {p}")
    want = [np.stack(col) for col in zip(*[torch_grad(name, p) for p in pts])]
    got = getattr(pkg, f"{name}_vjp_vmap")(*stacked(name), np.ones(len(pts)))
    assert_finite_close(got, want, f"compiled vjp(vmap({name}))")
