"""Kernels from a held-out red-team suite that once failed: each compiled and checked against torch
(values, torch.autograd gradients) or Python on the same source.

- a result that is one element of an input (`return x[i]`, a `fwd` residual cam[9]) once printed a
  Python repr into the C++;
- a computed negative index (`x[-i]`) counts from the end, as Python's, before clamping;
- derivatives at 0 as torch takes them: softplus' = 1/2, relu' = 0, d/dp 0**p = 0, and the norm of a
  zero vector (cdist of a point to itself, ‖x − y‖ at x = y) has gradient 0, not NaN;
- integer // and % by 0 (or lowest // -1) return numpy's results instead of killing the process;
- a parameter may be named like a C++ type (`int64_t`);
- a window with a computed start, `x[j:j + m]` (a hand-written convolution), is a gather.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

KERNELS = '''
import torch


def pick(x: "float[n]", i: int) -> float:
    return x[i]


def _pair(a, b):
    return a * b, a - b


def half_pair(x: float, y: float) -> float:
    p, q = _pair(x, y)  # q unused: the call's second result is dropped (it was a C++ -Werror failure)
    return p * 2.0


def ba_like(cam: "float[11]", X: "float[3]") -> "float[2]":
    Xc = X - cam[3:6]
    p = Xc[0:2] / Xc[2]
    rsq = torch.sum(p * p)
    L = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    return p * L * cam[6] + cam[7:9]


def from_end(x: "float[n]") -> float:
    s = 0.0 * x[0]
    for i in range(1, len(x) + 1):
        s = s + i * x[-i]
    return s


def softplus_sum(x: "float[n]") -> float:
    return torch.sum(torch.nn.functional.softplus(x))


def relu_sum(x: "float[n]") -> float:
    return torch.sum(torch.relu(x))


def pow_sum(x: "float[n]", p: float) -> float:
    return torch.sum(x ** p)


def rbf(X: "float[n, d]") -> float:
    return torch.sum(torch.exp(-torch.cdist(X, X)))


def dist(x: "float[n]", y: "float[n]") -> float:
    return torch.linalg.norm(x - y)


def bucket(i: int, per: int) -> tuple[int, int]:
    return i // per, i % per


def scale(x: "float[n]", int64_t: float) -> "float[n]":
    return x * int64_t


def windows(x: "float[n]", w: "float[m]") -> float:
    m = w.shape[0]
    s = 0.0 * x[0]
    for j in range(x.shape[0] - m + 1):
        s = s + torch.sum(w * x[j:j + m]) ** 2
    return s


def rows(x: "float[n, d]", i: int) -> "float[2, d]":
    return x[i:i + 2]
'''

MANIFEST = '''
[package]
name = "redteam"
[build]
dtype = "float64"
[kernels]
pick = { python = "k.py:pick" }
ba_like = { python = "k.py:ba_like" }
from_end = { python = "k.py:from_end" }
softplus_sum = { python = "k.py:softplus_sum" }
relu_sum = { python = "k.py:relu_sum" }
pow_sum = { python = "k.py:pow_sum" }
rbf = { python = "k.py:rbf" }
dist = { python = "k.py:dist" }
bucket = { python = "k.py:bucket" }
scale = { python = "k.py:scale" }
windows = { python = "k.py:windows" }
rows = { python = "k.py:rows" }
half_pair = { python = "k.py:half_pair" }
[exports]
pick = "pick"
ba_like = "ba_like"
ba_like_fwd = "fwd(ba_like)"
from_end = "from_end"
from_end_grad = "grad(from_end)"
softplus_grad = "grad(softplus_sum)"
relu_grad = "grad(relu_sum)"
pow_grad = "grad(pow_sum, argnums=(0, 1))"
rbf_grad = "grad(rbf)"
dist_grad = "grad(dist, argnums=(0, 1))"
bucket = "bucket"
scale = "scale"
windows_grad = "grad(windows, argnums=(0, 1))"
rows = "rows"
half_pair = "half_pair"
half_pair_grad = "grad(half_pair, argnums=(0, 1))"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("redteam"), KERNELS, MANIFEST, "redteam_kernels")


def autograd(fn, *args):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    return [g.numpy() for g in torch.autograd.grad(fn(*ts), ts)]


def test_one_element_results(built):
    pkg, source = built
    x = np.arange(5.0)
    assert [pkg.pick(x, i) for i in (3, -1, -2)] == [3.0, 4.0, 3.0]
    cam, X = np.linspace(0.1, 1.1, 11), np.array([1.0, 2.0, 5.0])
    want = source.ba_like(torch.tensor(cam), torch.tensor(X)).numpy()
    np.testing.assert_allclose(pkg.ba_like(cam, X), want, rtol=1e-14)
    np.testing.assert_allclose(pkg.ba_like_fwd(cam, X)[0], want, rtol=1e-14)


def test_negative_computed_index_counts_from_the_end(built):
    pkg, source = built
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert pkg.from_end(x) == pytest.approx(float(source.from_end(torch.tensor(x))))
    np.testing.assert_allclose(pkg.from_end_grad(x), autograd(source.from_end, x)[0])


@pytest.mark.parametrize("name", ["softplus", "relu"])
def test_activation_derivatives_at_zero(built, name):
    pkg, source = built
    x = np.array([-1.0, 0.0, 1.0])
    want = autograd(getattr(source, f"{name}_sum"), x)[0]
    np.testing.assert_allclose(getattr(pkg, f"{name}_grad")(x), want, rtol=1e-14)


def test_pow_with_a_zero_base(built):
    pkg, source = built
    x, p = np.array([0.0, 1.5, 2.0]), 2.0
    want = autograd(lambda a, q: source.pow_sum(a, q), x, np.float64(p))
    got = pkg.pow_grad(x, p)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14)
    assert got[1] == pytest.approx(float(want[1]), rel=1e-14)


def test_norms_of_zero_vectors_have_zero_gradients(built):
    pkg, source = built
    X = np.array([[0.0, 1.0], [2.0, 0.5], [1.0, 1.0]])
    np.testing.assert_allclose(pkg.rbf_grad(X), autograd(source.rbf, X)[0], rtol=1e-12)
    x = np.array([1.0, 2.0, 3.0])
    for got, want in zip(pkg.dist_grad(x, x.copy()), autograd(source.dist, x, x.copy())):
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want)


def test_integer_division_by_zero_is_numpys(built):
    pkg, _ = built
    assert tuple(pkg.bucket(7, 2)) == (3, 1)
    assert tuple(pkg.bucket(-7, 2)) == (-4, 1)
    assert tuple(pkg.bucket(7, 0)) == (0, 0)  # numpy's integer results; Python raises instead
    lowest = np.iinfo(np.int64).min
    assert tuple(pkg.bucket(lowest, -1)) == (lowest, 0)


def test_parameter_named_like_a_cpp_type(built):
    pkg, _ = built
    np.testing.assert_allclose(pkg.scale(np.arange(3.0), 2.0), [0.0, 2.0, 4.0])


def test_windows_with_a_computed_start(built):
    pkg, source = built
    x, w = np.random.default_rng(0).standard_normal(7), np.array([1.0, -2.0, 0.5])
    for got, want in zip(pkg.windows_grad(x, w), autograd(source.windows, x, w)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    X = np.arange(10.0).reshape(5, 2)
    np.testing.assert_allclose(pkg.rows(X, 1), X[1:3])
    np.testing.assert_allclose(pkg.rows(X, 4), X[3:5])  # past the end: moved to fit (JAX's dynamic_slice)


def test_a_parameter_named_in_a_comment_only_is_unused():
    """An input the body never reads is voided even when a comment says 'reuses a dead buffer'
    (the vjp of a kernel with a parameter `a` once failed -Werror=unused-parameter)."""
    from ksbuild.codegen.viewmodel import ArgView, _void_unused
    args = [ArgView("a", "const double* a", "in", "f64", [2]), ArgView("x", "const double* x", "in", "f64", [2])]
    body = ["    double* const r = tmp;  // reuses a dead buffer's space", "    r[0] = x[0];"]
    assert _void_unused(args, body)[0] == "    (void)a;"
    assert "(void)x;" not in "\n".join(_void_unused(args, body))


def test_inputs_by_keyword(built):
    """Exports take inputs by their names in the kernel's source, as Python calls do."""
    pkg, _ = built
    X = np.arange(10.0).reshape(5, 2)
    np.testing.assert_allclose(pkg.rows(x=X, i=1), X[1:3])
    np.testing.assert_allclose(pkg.rows(X, i=2), X[2:4])
    np.testing.assert_allclose(pkg.scale(np.ones(2), int64_t=3.0), [3.0, 3.0])  # the C name differs
    with pytest.raises(TypeError, match="unexpected keyword argument 'j'"):
        pkg.rows(X, j=1)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        pkg.rows(X, x=X)
    with pytest.raises(TypeError, match="missing argument"):
        pkg.rows(x=X)


def test_dim_products_with_floor_divisions_evaluate_right():
    """(h - 3) // 2 + 1 times w - 2 (a strided convolution's output positions) once printed a term
    '2*(h - 3) // (2)', which Python reads as (2*(h - 3)) // 2: every dim expression must evaluate to
    the arithmetic it stands for."""
    from ksbuild.ir.types import canonical_dim, dim_add, dim_floordiv, dim_mul, dim_sub
    rows = dim_add(dim_floordiv(dim_sub("h", 3), 2), 1)
    for expr, fn in ((dim_mul(rows, dim_sub("w", 2)), lambda h, w: ((h - 3) // 2 + 1) * (w - 2)),
                     (dim_mul(dim_mul(rows, rows), 3), lambda h, w: 3 * ((h - 3) // 2 + 1) ** 2),
                     (dim_floordiv(dim_mul(rows, 2), 3), lambda h, w: (((h - 3) // 2 + 1) * 2) // 3)):
        assert canonical_dim(expr) == expr
        for h in range(3, 12):
            for w in (2, 5, 9):
                assert eval(expr, {"__builtins__": {}}, {"h": h, "w": w}) == fn(h, w), (expr, h, w)


def test_a_helper_result_left_unused_compiles(built):
    pkg, src = built
    assert pkg.half_pair(1.5, 0.5) == pytest.approx(src.half_pair(1.5, 0.5))
    np.testing.assert_allclose(pkg.half_pair_grad(1.5, 0.5), (1.0, 3.0), rtol=1e-6)  # d(2xy) = (2y, 2x)
