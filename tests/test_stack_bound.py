"""The stack of reverse-mode loop code (issue 36: no frame above 512 B, scratch in the workspace).

grad of a loop keeps a residual per step. An export with a tensor parameter takes a workspace and keeps them there;
one whose signature is scalars only has no workspace (the scalar C ABI), so they are an array on its stack, and
the build warns (ksbuild/packaging/package.py, warn_scalar_stacks) with the way out. Both gradients against
torch.autograd."""
from __future__ import annotations

import warnings

import pytest
import torch
from conftest import build_kernel_file

from ksbuild.errors import KsbuildWarning
from ksbuild.packaging.package import SCALAR_STACK_BOUND

KERNELS = '''import torch

STEPS = 1000


def walk(x: float) -> float:
    y = x
    for _ in range(STEPS):
        y = torch.sin(y) * 0.9 + 0.1 * x
    return y


def walk1(x: "float[1]") -> float:
    return walk(x[0])
'''

MANIFEST = '''[package]
name = "stack_bound"
version = "0.1.0"

[build]
dtype = "float64"

[kernels.walk]
python = "k.py:walk"

[kernels.walk1]
python = "k.py:walk1"

[exports]
walk_grad = "grad(walk)"
walk1_grad = "grad(walk1)"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", KsbuildWarning)
        pkg, source = build_kernel_file(tmp_path_factory.mktemp("stack_bound"), KERNELS, MANIFEST, "stack_bound_k")
    return pkg, source, [str(w.message) for w in seen if isinstance(w.message, KsbuildWarning)]


def torch_grad(source, x: float) -> float:
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    return float(torch.autograd.grad(source.walk(t), t)[0])


def test_a_tensor_signature_keeps_the_residuals_in_the_workspace(built):
    """walk1_grad: at most 512 B of stack (its frame and the calls below it, as P.json measures them) and the
    1000 steps' residuals in the workspace; its gradient is torch's."""
    pkg, source, said = built
    export = pkg.walk1_grad
    if export.desc.get("stack_bytes") is None:
        pytest.skip("the compiler wrote no call graphs (GCC 10 or later does)")
    assert export.desc["stack_bytes"] <= SCALAR_STACK_BOUND, export.desc["stack_bytes"]
    assert export.ws_fn() >= 1000 * 8, export.ws_fn()
    for x in (0.3, -1.2):
        assert export([x])[0] == pytest.approx(torch_grad(source, x), rel=1e-12)
    assert not any("walk1_grad" in m for m in said), said


def test_a_scalar_signature_with_residuals_on_the_stack_warns(built):
    """walk_grad has no workspace: its residuals are on the stack, the build says so and how to avoid it; its
    gradient is torch's too."""
    pkg, source, said = built
    if pkg.walk_grad.desc.get("stack_bytes") is None:
        pytest.skip("the compiler wrote no call graphs (GCC 10 or later does)")
    assert pkg.walk_grad.desc["stack_bytes"] > SCALAR_STACK_BOUND
    assert any("'walk_grad' uses" in m and "float[1]" in m for m in said), said
    assert pkg.walk_grad(0.3) == pytest.approx(torch_grad(source, 0.3), rel=1e-12)
