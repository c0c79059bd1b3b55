"""Kernels from the third held-out red-team pass (2026-11-25, compositions of transformations and
control flow), each compiled and checked against an analytic value or torch:

- grad(grad(f)) of a scalar loop whose first derivative carried a factor (1 / (n + 1)) that the second
  derivative no longer reads: the loop kept it as a constant, and the C++ declared it unused, which
  -Werror rejected (loops now drop the constants their body does not read);
- jvp(grad(e)) of a product of three matrix products (a Hessian-vector product) failed to build: GCC saw
  ks::tiles::dots read its block of 4 dot products past the end under an opaque count and reported
  "'d' may be used uninitialized" under -Werror;
- `y[j:j + 3] += v` with a computed start (reads of such a window worked; assignments now write its
  positions one by one), and torch.diag of a vector (a diagonal matrix; it was read as torch.diagonal);
- an in-place update through a second name or a view (y = x; y += 1), or of a conditional's pick of
  another name's tensor (y = x if c else w; y += 1), changed only that name, where torch changes both: now a
  located error; so is reading a view taken before its base was updated in place (t = x.T; x += 1; t);
- an if whose branches both loop over `i` (or both use a loop temporary) was rejected: "'i' is assigned in
  only one branch"; names a loop introduces stay inside it.
"""
from __future__ import annotations

import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

KERNELS = '''
import torch


def power_plus(x: float, n: int) -> float:
    acc = 1.0
    for i in range(n // 2):
        acc = acc * x
    return acc + x / (n + 1)


def overlap_add(x: "float[n]", k: "float[3]") -> "float[n + 2]":
    y = torch.zeros(x.shape[0] + 2)
    for j in range(x.shape[0]):
        y[j:j + 3] += k * x[j]
    return y


def rows_add(x: "float[n, 4]", k: "float[2, 4]") -> "float[n + 1, 4]":
    y = torch.zeros(x.shape[0] + 1, 4)
    for j in range(x.shape[0]):
        y[j:j + 2] = y[j:j + 2] + k * x[j]
    return y


def jacobi_split(a: "float[n, n]") -> "float[n, n]":
    return a - torch.diag(torch.diagonal(a)) + torch.diag(a).sum()


def e(x: "float[t, d]", wk: "float[d, d]", wv: "float[d, d]") -> float:
    o = (x @ (x @ wk).T) @ (x @ wv)
    return (o * o).sum()
'''

MANIFEST = '''
[package]
name = "redteam_compose"
[build]
dtype = "float64"
[kernels.power_plus]
python = "k.py:power_plus"
[kernels.e]
python = "k.py:e"
[kernels.overlap_add]
python = "k.py:overlap_add"
[kernels.rows_add]
python = "k.py:rows_add"
[kernels.jacobi_split]
python = "k.py:jacobi_split"
[exports]
overlap_add = "overlap_add"
overlap_add_vjp = "vjp(overlap_add)"
rows_add = "rows_add"
jacobi_split = "jacobi_split"
e_hvp = "jvp(grad(e, argnums=(0, 1, 2)))"
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


def test_hessian_vector_product_of_chained_matrix_products(built):
    import numpy as np
    pkg, src = built
    rng = np.random.default_rng(0)
    x, wk, wv, dx, dwk, dwv = (rng.standard_normal((4, 3) if i % 3 == 0 else (3, 3)) for i in range(6))
    _, want = torch.func.jvp(torch.func.grad(src.e, argnums=(0, 1, 2)), tuple(map(torch.tensor, (x, wk, wv))),
                             tuple(map(torch.tensor, (dx, dwk, dwv))))
    for g, w in zip(pkg.e_hvp(x, wk, wv, dx, dwk, dwv), want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-10)


@pytest.fixture
def float64_default():
    """torch.zeros in the kernels makes float64 tensors, as the float64 build does."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def test_window_assignments_with_a_computed_start_and_diag_of_a_vector(built, float64_default):
    import numpy as np
    pkg, src = built
    rng = np.random.default_rng(1)
    x, k = rng.standard_normal(5), rng.standard_normal(3)
    want = src.overlap_add(torch.tensor(x), torch.tensor(k))
    np.testing.assert_allclose(pkg.overlap_add(x, k), want.numpy(), rtol=1e-12, atol=1e-12)
    ct = rng.standard_normal(7)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, k)]
    grads = torch.autograd.grad(src.overlap_add(*ts), ts, torch.tensor(ct))
    for g, w in zip(pkg.overlap_add_vjp(x, k, ct), grads):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-12, atol=1e-12)
    x2, k2 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    want = src.rows_add(torch.tensor(x2), torch.tensor(k2)).numpy()
    np.testing.assert_allclose(pkg.rows_add(x2, k2), want, rtol=1e-12, atol=1e-12)
    a = rng.standard_normal((4, 4))
    np.testing.assert_allclose(pkg.jacobi_split(a), src.jacobi_split(torch.tensor(a)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("body, message", [
    ("y = x\n    y += 1.0\n    return x * 1.0 + y", "in-place update of 'y', which is also 'x'"),
    ("r = x[0]\n    r += 10.0\n    return x * 1.0", "in-place update of 'r', which is a view of 'x'"),
    ("g = x\n    g[0] = 0.0\n    return x * 2.0", "in-place update of 'g', which is also 'x'"),
    ("y = x if x.sum() > 0.0 else x * 2.0\n    y += 1.0\n    return x * 1.0 + y", "update of 'y', which may be 'x'"),
    ("if x.sum() > 0.0:\n        y = x\n    else:\n        y = x * 2.0\n    y[0] = 1.0\n    return x * 1.0 + y",
     "in-place update of 'y', which may be 'x'"),
    ("t = x.T\n    x += 1.0\n    return t * 1.0", "'t' is a view of 'x', which was updated in place on line 6"),
    ("r = x[0]\n    x[0] = x[1]\n    return x + r", "'r' is a view of 'x', which was updated in place on line 6"),
])
def test_in_place_updates_of_shared_tensors_are_located_errors(tmp_path, body, message):
    """(Reading a view and writing back through the base, row = x[i]; x[i] = row * 2, stays allowed.)"""
    import ksbuild
    from ksbuild.errors import KsbuildError
    (tmp_path / "k.py").write_text(f'import torch\n\n\ndef f(x: "float[3, 3]") -> "float[3, 3]":\n    {body}\n')
    (tmp_path / "manifest.toml").write_text('[package]\nname = "alias"\n[kernels.f]\npython = "k.py:f"\n'
                                            '[exports]\nf = "f"\n')
    with pytest.raises(KsbuildError) as e:
        ksbuild.build(tmp_path / "manifest.toml")
    assert message in str(e.value) and "k.py:" in str(e.value), str(e.value)


def _build_f(tmp_path, kernels: str, name: str, exports: str = 'f = "f"\n'):
    """(package, source module) of one float64 kernel f in k.py."""
    manifest = (f'[package]\nname = "{name}"\n[build]\ndtype = "float64"\n[kernels.f]\npython = "k.py:f"\n'
                f'[exports]\n{exports}')
    return build_kernel_file(tmp_path, kernels, manifest, name)


def test_a_row_read_then_written_back_is_not_an_alias_error(tmp_path):
    import numpy as np
    kernels = ('import torch\n\n\ndef f(x: "float[3, 4]") -> "float[3, 4]":\n    y = x.clone()\n'
               '    for i in range(3):\n        row = y[i]\n        y[i] = row * 2.0\n    return y\n')
    pkg, _ = _build_f(tmp_path, kernels, "rowback")
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(pkg.f(x), 2 * x)


def test_a_view_taken_again_after_an_update_is_not_an_error(tmp_path):
    import numpy as np
    kernels = ('import torch\n\n\ndef f(x: "float[3, 4]") -> "float[4, 3]":\n    t = x.T\n    x += 1.0\n'
               '    t = x.T\n    return t * 1.0\n')
    pkg, src = _build_f(tmp_path, kernels, "retaken")
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(pkg.f(x), src.f(torch.tensor(x)).numpy())


def test_loops_in_both_branches_may_reuse_their_variable(tmp_path):
    kernels = (
        "def f(x: float) -> float:\n"
        "    if x > 0.0:\n        for i in range(3):\n            x = x * 0.5\n"
        "    else:\n        for i in range(5):\n            t = x * x\n            x = t\n"
        "    return x\n")
    pkg, src = _build_f(tmp_path, kernels, "loopvars", exports='f = "f"\nf_grad = "grad(f)"\n')
    for x in (0.8, -0.9):
        assert pkg.f(x) == pytest.approx(src.f(x), rel=1e-12)
    assert pkg.f_grad(0.8) == pytest.approx(0.125, rel=1e-12)


def test_updating_a_clone_leaves_the_original(tmp_path):
    """y = x.clone(); y += 1 is what the alias error suggests: a value of its own (clone was x itself)."""
    import numpy as np
    kernels = ('import torch\n\n\ndef f(x: "float[3]") -> "float[2, 3]":\n    y = x.clone()\n    y += 1.0\n'
               '    y[0] = 7.0\n    return torch.stack([x * 1.0, y])\n')
    pkg, src = _build_f(tmp_path, kernels, "cloned")
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(pkg.f(x), src.f(torch.tensor(x)).numpy())


def test_vmap_of_grad_through_a_loop_inside_a_batched_if(tmp_path):
    """vmap(grad(f), in_axes=(0, None)) where a loop with an unbatched count sits in an if on a batched value:
    the backward branch read the count as an output of the if (the other branch's 0 in lanes that took it),
    so under vmap the count differed between lanes and the build was refused. The if's backward branch now
    recomputes such residuals (counts, indices, views of its operands) from the operands themselves."""
    import numpy as np
    kernels = ('import torch\n\n\n'
               'def f(x: float, n: int) -> float:\n'
               '    if x > 0.0:\n        for i in range(n):\n            x = x * 0.5 + 1.0\n'
               '    else:\n        x = x * x\n    return x\n\n\n'
               'def g(x: "float[d]", w: "float[d, d]") -> float:\n'
               '    h = x\n    if x.sum() > 0.0:\n        for i in range(x.shape[0]):\n'
               '            h = torch.tanh(w @ h) + x * h[i]\n    return (h * h).sum()\n')
    manifest = ('[package]\nname = "vgrad_branch"\n[build]\ndtype = "float64"\n[kernels.f]\npython = "k.py:f"\n'
                '[kernels.g]\npython = "k.py:g"\n[exports]\nvgrad_f = "vmap(grad(f), in_axes=(0, None))"\n'
                'vvjp_f = "vmap(vjp(f), in_axes=(0, None, 0))"\nvgrad_g = "vmap(grad(g), in_axes=(0, None))"\n')
    pkg, src = build_kernel_file(tmp_path, kernels, manifest, "vgrad_branch")
    xs, n = np.array([0.7, -0.4, 1.5, 0.0]), 3
    want = [torch.func.grad(src.f)(torch.tensor(x), n).item() for x in xs]
    np.testing.assert_allclose(pkg.vgrad_f(xs, n), want, rtol=1e-12)
    np.testing.assert_allclose(pkg.vvjp_f(xs, n, np.full(4, 2.0)), 2 * np.array(want), rtol=1e-12)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 3)), rng.standard_normal((3, 3))
    want = np.stack([torch.func.grad(src.g)(torch.tensor(r), torch.tensor(w)).numpy() for r in x])
    got = pkg.vgrad_g(x, w)
    np.testing.assert_allclose(got[0] if isinstance(got, tuple) else got, want, rtol=1e-10, atol=1e-12)
