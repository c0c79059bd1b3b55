"""Defects the differential fuzzer (fuzz/, README "The fuzzer") found, each reduced to a kernel and checked
against torch.func, interpreted and compiled (one package for the file)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.ir.interp import eval_func
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.vjp import grad_func

SOURCE = '''\
import math


def ignores(a: float, b: float = 0.25) -> float:
    return b


def twice(a: float) -> float:
    return a * 2.0


def dead_call(x: float) -> float:
    return ignores(twice(x)) + x


def nan_side(x: float, y: float) -> float:
    return y if x > 0.5 else math.exp(x) * math.log(y)
'''

EXPORTS = {"dead_call": "dead_call", "nan_side_gg": "grad(grad(nan_side, argnums=(0,)), argnums=(0,))",
           "nan_side_h": "hessian(nan_side, argnums=(0, 1))"}


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "fuzz_regressions")


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "fuzz_regressions", EXPORTS)


def test_unread_call_argument_is_dead(ir):
    """fuzz seed 3 kernel 1: `ignores(twice(x))` kept the call of `twice` (its result unread), and the C++
    variable it set was unused: -Werror stopped the build. The call's prune rule drops unread arguments."""
    names = {e.params["fn"].name for f in walk_funcs(lower(ir("dead_call"))) for e in f.eqns if e.prim.name == "call"}
    assert "twice" not in names


def test_unread_call_argument_compiles(pkg):
    assert pkg.dead_call(3.0) == 3.25


def torch_nan_side(x, y):
    return y if x > 0.5 else torch.exp(x) * torch.log(y)


POINTS = [(1.0, -0.3), (0.75, -2.0), (0.0, 2.0), (1.0, 2.0), (0.25, 1.5)]


@pytest.mark.parametrize("x, y", POINTS)
def test_second_derivative_of_if_expression(ir, pkg, x, y):
    """fuzz seed 3 kernel 6: the second derivative of an if-expression whose side not taken has a NaN value
    (log of a negative) was NaN: the first derivative's selects put that side's values into the derivative
    program, where the zero cotangent met them in a plain product (0 * nan). Its derivatives are now
    cond_selects of the sides' derivatives (differentiated as an if at every order)."""
    tx, ty = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    want = torch.func.grad(torch.func.grad(torch_nan_side))(tx, ty).item()
    gg = grad_func(grad_func(ir("nan_side"), argnums=(0,)), argnums=(0,))
    assert eval_func(gg, [np.float64(x), np.float64(y)])[0] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert pkg.nan_side_gg(x, y) == pytest.approx(want, rel=1e-12, abs=1e-12)
    want_h = torch.func.hessian(torch_nan_side, argnums=(0, 1))(tx, ty)
    got_h = pkg.nan_side_h(x, y)
    for got, w in zip(got_h, [h for row in want_h for h in row]):
        assert not np.isnan(w.item()) and got == pytest.approx(w.item(), rel=1e-12, abs=1e-12)
