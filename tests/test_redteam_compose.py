"""Kernels from the third held-out red-team pass (2026-11-25, compositions of transformations and
control flow), each compiled and checked against an analytic value or torch:

- grad(grad(f)) of a scalar loop whose first derivative carried a factor (1 / (n + 1)) that the second
  derivative no longer reads: the loop kept it as a constant, and the C++ declared it unused, which
  -Werror rejected (loops now drop the constants their body does not read).
"""
from __future__ import annotations

import pytest
from conftest import build_kernel_file

KERNELS = '''
def power_plus(x: float, n: int) -> float:
    acc = 1.0
    for i in range(n // 2):
        acc = acc * x
    return acc + x / (n + 1)
'''

MANIFEST = '''
[package]
name = "redteam_compose"
[build]
dtype = "float64"
[kernels.power_plus]
python = "k.py:power_plus"
[exports]
power_plus_d = "grad(power_plus)"
power_plus_dd = "grad(grad(power_plus))"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("redteam_compose"), KERNELS, MANIFEST, "redteam_compose")


@pytest.mark.parametrize("n", [0, 3, 4, 7])
def test_second_derivative_of_a_loop_whose_first_one_has_a_dead_constant(built, n):
    pkg, _ = built
    x, k = 0.3, n // 2
    first = (k * x ** (k - 1) if k >= 1 else 0.0) + 1 / (n + 1)
    assert pkg.power_plus_d(x, n) == pytest.approx(first, rel=1e-12)
    want = k * (k - 1) * x ** (k - 2) if k >= 2 else 0.0
    assert pkg.power_plus_dd(x, n) == pytest.approx(want, rel=1e-12, abs=1e-15)
