"""Signs of integer index arithmetic in loop code (codegen/int_signs.py).

An index that the compiler shows is never negative is clamped from above only (ks::clamp_index_nonneg), one that
also stays below its axis is not clamped, and a `//` of a never negative value by a positive literal is C++'s
unsigned division (ks::floordiv_nonneg); indices that may be negative keep the full clamp (they count from the
end) and `//` of a value that may be negative keeps the floor. A loop carrying a float sum that reads at an index
not moving by a fixed step is kept scalar (KS_SCALAR_LOOP, codegen/body.py). An innermost loop whose index is never
negative and grows with the counter, but is not shown below its axis, runs unclamped when a test before the loop
shows its last value in range (body.py's range guards), as it is otherwise. Checked on the generated C++ of one
package (one build, ~15 s on a quiet machine) and on its values and gradients against the same kernels run by
torch.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from source_kernels import build_source

SOURCE = '''\
import torch


def packed(x: "float[d]", p: "float[T]") -> float:
    """Rows of a lower triangle packed as ADBench's icf below the diagonal: p[c (2d - c - 1) // 2 + r - c - 1]."""
    d = x.shape[0]
    s = 0.0
    for r in range(d):
        row = x[r]
        for c in range(r):
            row = row + p[c * (2 * d - c - 1) // 2 + r - c - 1] * x[c]
        s = s + row * row
    return s


def tail(x: "float[n]", y: "float[m]") -> float:
    """x[i - m + j] for j < m is never negative only when n >= m: x[i + j] and y[n - 1 - i] never are."""
    n = x.shape[0]
    m = y.shape[0]
    s = 0.0
    for i in range(n):
        for j in range(m):
            s = s + x[i - m + j] * y[j] + x[i + j] * y[n - 1 - i]
    return s


def columns(x: "float[d]", p: "float[T]") -> float:
    """p read column by column at c * d + j: never negative, one step per j, below T only when T >= d * d."""
    d = x.shape[0]
    s = 0.0
    for c in range(d):
        for j in range(d - c - 1):
            s = s + p[c * d + j] * x[c]
    return s


def negative(x: "float[n]") -> float:
    """Indices that may be negative (they count from the end) and a // of a negative value."""
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        s = s + x[i - 2] * x[(i - 3) // 2] + x[i // 2] * x[i + 1]
    return s
'''

EXPORTS = {"packed": "packed", "packed_grad": "grad(packed, argnums=(0, 1))", "tail": "tail",
           "tail_grad": "grad(tail, argnums=(0, 1))", "negative": "negative", "negative_grad": "grad(negative)",
           "columns": "columns", "columns_grad": "grad(columns, argnums=(0, 1))"}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "int_signs", EXPORTS)


@pytest.fixture(scope="module")
def functions(pkg):
    """The generated C++ of each function of the package, by export name."""
    src = next(p for p in (pkg.root if hasattr(pkg, "root") else pkg.path).rglob("int_signs.cpp"))
    text = src.read_text()
    out = {}
    for name in EXPORTS:
        m = re.search(rf"\n[^\n]* int_signs_{name}\(.*?\n}}\n", text, re.S)
        assert m is not None, name
        out[name] = m.group(0)
    return out


def torch_kernels():
    """The kernels run by torch, with ksbuild's (and JAX's) indexing: a negative index counts from the end, then
    every index is clamped into its axis (torch raises past the ends)."""
    class Clamped:
        def __init__(self, t):
            self.t, self.shape = t, t.shape

        def __getitem__(self, i):
            n = self.t.shape[0]
            i = i + n if i < 0 else i
            return self.t[min(max(i, 0), n - 1)]

    scope: dict = {}
    exec(SOURCE, scope)
    return {name: (lambda f: lambda *a: f(*(Clamped(t) for t in a)))(scope[name])
            for name in ("packed", "tail", "negative", "columns")}


def test_packed_index_is_neither_floored_nor_clamped_from_below(functions):
    for name in ("packed", "packed_grad"):
        code = functions[name]
        assert "ks::floordiv_nonneg(" in code and "ks::floordiv(" not in code, name
        assert "ks::clamp_index_nonneg(" in code and "ks::clamp_index(" not in code, name
        assert "KS_SCALAR_LOOP();" in code, name  # (a float sum read at an index of degree 2 in the counter)


def test_signed_indices_keep_the_full_clamp_and_the_floor(functions):
    code = functions["negative"]
    assert "ks::clamp_index(" in code and "ks::floordiv(" in code
    assert "ks::floordiv_nonneg(" in code  # i // 2
    tail = functions["tail"]
    assert "ks::clamp_index(" in tail  # x[i - m + j]: negative when n < m... and i < m - j
    assert "ks::clamp_index_nonneg(" in tail  # x[i + j] may pass n - 1
    assert "KS_SCALAR_LOOP" not in tail  # (its indices move by one with j: the loop may be vectorized)


@pytest.mark.parametrize("sizes", [(6, 21), (2, 1), (5, 3)])
def test_packed_values_and_gradients(pkg, sizes):
    d, T = sizes
    rng = np.random.default_rng(d)
    check_x_p(pkg, "packed", rng.normal(size=d), rng.normal(size=T))  # (T = 3 < 10: the clamp from above is taken)


def check_x_p(pkg, name: str, x, p) -> None:
    """The export `name` of (x, p) and its gradient against torch's."""
    xt, pt = (torch.tensor(a, requires_grad=True) for a in (x, p))
    ref = torch_kernels()[name](xt, pt)
    ref.backward()
    np.testing.assert_allclose(getattr(pkg, name)(x, p), ref.item(), rtol=1e-12)
    gx, gp = getattr(pkg, f"{name}_grad")(x, p)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gp, pt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sizes", [(7, 3), (2, 5)])
def test_tail_and_negative_values_and_gradients(pkg, sizes):
    n, m = sizes
    rng = np.random.default_rng(n + m)
    x, y = rng.normal(size=n), rng.normal(size=m)
    k = torch_kernels()
    xt, yt = (torch.tensor(a, requires_grad=True) for a in (x, y))
    ref = k["tail"](xt, yt)
    ref.backward()
    np.testing.assert_allclose(pkg.tail(x, y), ref.item(), rtol=1e-12)
    gx, gy = pkg.tail_grad(x, y)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, yt.grad.numpy(), rtol=1e-12, atol=1e-12)
    xt = torch.tensor(x, requires_grad=True)
    ref = k["negative"](xt)
    ref.backward()
    np.testing.assert_allclose(pkg.negative(x), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(pkg.negative_grad(x), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_rising_index_is_tested_once_before_its_loop(functions):
    """`p[c * d + j]`: one test of its value at the last j before the loop, then a loop with no clamp; the clamped
    loop stays for a short p (forward and the gradient's index_add alike)."""
    for name in ("columns", "columns_grad"):
        code = functions[name]
        assert re.search(r"const int64_t last_\w+ = .*;\n\s*if \(last_\w+ < T\) \{", code), name
        fast, slow = code.split("} else {", 1)
        assert "ks::clamp_index_nonneg(" not in fast.split("if (last_", 1)[1], name
        assert "ks::clamp_index_nonneg(" in slow, name


@pytest.mark.parametrize("sizes", [(5, 25), (5, 7), (2, 1), (4, 13)])
def test_columns_values_and_gradients(pkg, sizes):
    d, T = sizes  # (T >= d * d: the unclamped loops; T = 7: some columns clamped; T = 13: the last ones)
    rng = np.random.default_rng(d + T)
    check_x_p(pkg, "columns", rng.normal(size=d), rng.normal(size=T))
