"""Derivatives inside a kernel (nested AD, issue 32 item 8: GradBench's particle and saddle evals):
`torch.func.grad(helper, argnums)(args)` and `torch.func.jvp(helper, primals, tangents)` in a kernel, and every
transformation of such a kernel (second order).

Oracle: the kernel file itself run by PyTorch (torch.func.grad and jvp are torch's there), differentiated again by
torch.func; the IR through the reference interpreter, and one compiled package.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter, source_module

from ksbuild.errors import KsbuildError
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import grad_func

SOURCE = '''\
import torch


def f(x: float, y: float) -> float:
    return x * x * y + torch.sin(x * y)


def df_dx(x: float, y: float) -> float:
    return torch.func.grad(f)(x, y)


def df_dy_forward(x: float, y: float) -> float:
    _, dy = torch.func.jvp(f, (x, y), (torch.zeros_like(x), torch.ones_like(y)))
    return dy


def both(x: float, y: float) -> float:
    gx, gy = torch.func.grad(f, argnums=(0, 1))(x, y)
    return gx * gy


def energy(p: "float[2]", w: float) -> float:
    return torch.sum((p - w) ** 2) + 0.1 * torch.sum(p ** 4)


def descend(w: float, start: "float[2]") -> float:
    """20 steps of gradient descent on energy(., w), a step taken only when it lowers the energy; the
    minimum's energy."""
    p = start
    for _ in range(20):
        q = p - 0.1 * torch.func.grad(energy)(p, w)
        if energy(q, w) < energy(p, w):
            p = q
    return energy(p, w)
'''


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "nested_src")


@pytest.fixture(scope="module")
def torch_module(tmp_path_factory):
    """The kernel file as a Python module: the oracle (torch.func inside it is torch's)."""
    return source_module(tmp_path_factory, SOURCE, "nested_torch")


POINTS = [(0.7, 1.3), (-1.1, 0.4), (2.0, -0.5)]
SCALAR_KERNELS = ["df_dx", "df_dy_forward", "both"]


def torch_values(module, name: str, args) -> tuple[float, list[float]]:
    """The function's value and its gradient in every argument, by torch.func over the PyTorch file."""
    tensors = [torch.tensor(a, dtype=torch.float64) for a in args]
    fn = getattr(module, name)
    grads = torch.func.grad(fn, argnums=tuple(range(len(tensors))))(*tensors)
    return float(fn(*tensors)), [np.asarray(g) for g in grads]


@pytest.mark.parametrize("name", SCALAR_KERNELS)
@pytest.mark.parametrize("point", POINTS)
def test_nested_value_grad_and_jvp(ir, torch_module, name, point):
    """The kernel (an inner derivative), its grad (second order by reverse over reverse or over forward) and
    its jvp, against torch.func."""
    f = ir(name)
    value, grads = torch_values(torch_module, name, point)
    np.testing.assert_allclose(eval_func(f, list(point))[0], value, rtol=1e-12)
    np.testing.assert_allclose(eval_func(grad_func(f), list(point)), grads, rtol=1e-12, atol=1e-14)
    _, tangent = eval_func(jvp_func(f), [*point, 0.3, -0.7])
    np.testing.assert_allclose(tangent, 0.3 * grads[0] - 0.7 * grads[1], rtol=1e-12, atol=1e-14)


def test_gradient_descent_differentiated(ir, torch_module):
    """A fixed count of gradient-descent steps whose direction is an inner torch.func.grad, each taken under an
    `if`: the result and its gradient in w (through every step and the inner gradient) equal torch's."""
    start = np.array([1.5, -0.5])
    for w in (0.3, -0.8):
        value, grads = torch_values(torch_module, "descend", (w, start))
        got = eval_func(grad_func(ir("descend")), [w, start])
        np.testing.assert_allclose(eval_func(ir("descend"), [w, start])[0], value, rtol=1e-12)
        np.testing.assert_allclose(got[0], grads[0], rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(got[1], grads[1], rtol=1e-10, atol=1e-13)


def test_compiled(tmp_path_factory, torch_module):
    """The same kernels compiled: values and second derivatives as torch's."""
    pkg = build_source(tmp_path_factory, SOURCE, "nested_pkg",
                       {"df_dx_grad": "grad(df_dx)", "both_grad": "grad(both)", "descend_grad": "grad(descend)",
                        "df_dy_forward": "df_dy_forward"})
    for point in POINTS:
        np.testing.assert_allclose(pkg.df_dx_grad(*point), torch_values(torch_module, "df_dx", point)[1], rtol=1e-12)
        np.testing.assert_allclose(pkg.both_grad(*point), torch_values(torch_module, "both", point)[1], rtol=1e-12)
        np.testing.assert_allclose(pkg.df_dy_forward(*point), torch_values(torch_module, "df_dy_forward", point)[0],
                                   rtol=1e-12)
    start = np.array([1.5, -0.5])
    want = torch_values(torch_module, "descend", (0.3, start))[1]
    got = pkg.descend_grad(0.3, start)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-13)


BAD = [
    ("return torch.func.grad(lambda a: a * a)(x)", "function of this file"),
    ("return torch.func.grad(f, argnums=1.5)(x, x)", "argnums must be"),
    ("return torch.func.grad(f, argnums=2)(x, x)", "out of range"),
    ("return torch.func.jvp(f, (x, x), (1.0,))[1]", "two tuples of one length"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_errors_are_located(tmp_path, line, message):
    """Misuses are errors at the call's line, with a message (no traceback)."""
    from ksbuild.frontends.python.source import compile_python_kernel

    path = tmp_path / "bad.py"
    path.write_text(SOURCE + f"\n\ndef bad(x: float) -> float:\n    {line}\n")
    with pytest.raises(KsbuildError, match=message) as info:
        compile_python_kernel(path, "bad", "f64")
    assert "bad.py:" in str(info.value)


STATIC_SOURCE = '''\
def cost(outer, x: float) -> float:
    if outer:
        return descend(False, x) + x * x
    return (x - 1.0) ** 2


def descend(outer, x: float) -> float:
    """The same loop for both levels: the outer level's cost runs the inner level's loop."""
    for _ in range(3):
        x = x - 0.1 * cost(outer, x)
    return x


def two_levels(x: float) -> float:
    return descend(True, x)


def forever(x: float) -> float:
    return forever(x)


def unending(n, x: float) -> float:
    return unending(n + 1, x)


def unending_from(x: float) -> float:
    return unending(0, x)
'''


def test_a_call_with_other_static_arguments_is_not_recursion(tmp_path):
    """descend(True) reaches descend(False) through cost(True), whose `if outer` the compiler decides: two functions,
    not recursion (GradBench's saddle runs one gradient descent loop at both levels). A call with the same static
    arguments, or a chain of new ones that does not end, is still refused, with a located error."""
    from ksbuild.frontends.python.source import compile_python_kernel

    path = tmp_path / "levels.py"
    path.write_text(STATIC_SOURCE)
    namespace: dict = {}
    exec(compile(STATIC_SOURCE, str(path), "exec"), namespace)
    f = compile_python_kernel(path, "two_levels", "f64")
    for x in (0.3, 2.0):
        assert eval_func(f, [x])[0] == pytest.approx(namespace["two_levels"](x), rel=1e-14)
        assert eval_func(grad_func(f), [x])[0] == pytest.approx(
            float(torch.func.grad(namespace["two_levels"])(torch.tensor(x, dtype=torch.float64))), rel=1e-12)
    for name in ("forever", "unending_from"):
        with pytest.raises(KsbuildError, match="calls itself") as info:
            compile_python_kernel(path, name, "f64")
        assert "levels.py:" in str(info.value)
