"""Python kernels' values and derivatives as Python and torch give them: indexing, integer division, derivatives
at 0, keyword inputs, names the C++ must not spell as written; each compiled and checked against torch or
Python on the same source.

Kernels from a held-out red-team suite that once failed: each compiled and checked against torch
(values, torch.autograd gradients) or Python on the same source.

- a result that is one element of an input (`return x[i]`, a `fwd` residual cam[9]) once printed a
  Python repr into the C++;
- a computed negative index (`x[-i]`) counts from the end, as Python's, before clamping;
- derivatives at 0 as torch takes them: softplus' = 1/2, relu' = 0, d/dp 0**p = 0, and the norm of a
  zero vector (cdist of a point to itself, ‖x − y‖ at x = y) has gradient 0, not NaN;
- integer // and % by 0 (or lowest // -1) return numpy's results instead of killing the process;
- a parameter may be named like a C++ type (`int64_t`);
- a window with a computed start, `x[j:j + m]` (a hand-written convolution), is a gather.

Kernels from the third held-out pass over Python kernels (2026-11-26), each fixed and checked against torch
on the same source:

- integer torch.fmod and torch.div(rounding_mode="trunc") by 0 killed the calling process (SIGFPE: the C++
  divided raw); integer division is now ks::truncdiv (0 for a divisor of 0, lowest / -1 wraps);
- softmax and log_softmax lost log n against large inputs: a row masked with -1e9 in float32 gave [1, 1, 1]
  (they were exp(x - logsumexp(x))); now x - max first;
- a variable called NAN, INFINITY, M_PI or HUGE_VAL was spelled as such in the C++ (the <cmath> macro);
- clamp with a bound computed from a dim (x.shape[0] - 1) was an internal error;
- inputs named out or dims could not be passed by keyword;
- the vjp of x.max() (a whole-tensor max) with a NaN gave 0 everywhere; torch sends it to the NaN;
- a bool mask index, a stack of unequal shapes and a missing [exports] gave misleading messages.
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
name = "python_values"
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
    return build_kernel_file(tmp_path_factory.mktemp("python_values"), KERNELS, MANIFEST, "python_values_kernels")


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


# ---- integer division, softmax, cmath macro names, clamp bounds, keyword inputs ------------------
PYTHON_VALUES_KERNELS = '''
import torch
import torch.nn.functional as F


def ifmod(a: "i64[n]", b: "i64[n]") -> "i64[n]":
    return torch.fmod(a, b)


def itrunc(a: "i64[n]", b: "i64[n]") -> "i64[n]":
    return torch.div(a, b, rounding_mode="trunc")


def itrunc32(a: "i32[n]", b: "i32[n]") -> "i32[n]":
    return torch.div(a, b, rounding_mode="trunc")


def masked_softmax(s: "float[n, m]", mask: "i64[n, m]") -> tuple["float[n, m]", "float[n, m]"]:
    z = s.masked_fill(mask == 0, -1e9)
    return torch.softmax(z, dim=-1), F.log_softmax(z, dim=-1)


def big_softmax(x: "float[n]") -> tuple["float[n]", "float[n]", float]:
    return torch.softmax(x, 0), F.log_softmax(x, 0), torch.logsumexp(x, 0)


def macro_names(NAN: "float[n]", INFINITY: float) -> "float[n]":
    M_PI = NAN * INFINITY
    HUGE_VAL = M_PI + 1.0
    return HUGE_VAL * NAN


def clamp_dim(x: "float[k]", i: "i64[m]") -> "float[m]":
    return x[i.clamp(0, x.shape[0] - 1)] + x[torch.clamp(i, max=x.shape[0] - 1)]


def named_like_options(x: "float[n]", out: "float[n]", dims: "float[n]") -> "float[n]":
    return x + 2 * out + 3 * dims


def whole_max(x: "float[n]") -> float:
    return x.max()
'''

PYTHON_VALUES_MANIFEST = '''
[package]
name = "rt_pyvalues"

[build]
dtype = "float32"

[kernels]
{kernels}

[exports]
{exports}
masked_softmax_vjp = "vjp(masked_softmax)"
whole_max_vjp = "vjp(whole_max)"
'''

NAMES = ("ifmod", "itrunc", "itrunc32", "masked_softmax", "big_softmax", "macro_names", "clamp_dim",
         "named_like_options", "whole_max")


@pytest.fixture(scope="module")
def python_values_built(tmp_path_factory):
    kernels = "\n".join(f'[kernels.{k}]\npython = "k.py:{k}"' for k in NAMES)
    exports = "\n".join(f'{k} = "{k}"' for k in NAMES)
    return build_kernel_file(tmp_path_factory.mktemp("pyvalues"), PYTHON_VALUES_KERNELS,
                             PYTHON_VALUES_MANIFEST.format(kernels=kernels, exports=exports), "rt_pyvalues_k")


def test_integer_division_by_zero_does_not_trap(python_values_built):
    p, _ = python_values_built
    lowest = np.iinfo(np.int64).min
    a = np.array([7, -7, 5, lowest, 9, -9], np.int64)
    b = np.array([2, 2, 0, -1, -4, 0], np.int64)
    np.testing.assert_array_equal(p.itrunc(a, b), [3, -3, 0, lowest, -2, 0])
    np.testing.assert_array_equal(p.ifmod(a, b), [1, -1, 0, 0, 1, 0])
    a32 = np.array([7, -7, 5, np.iinfo(np.int32).min], np.int32)
    np.testing.assert_array_equal(p.itrunc32(a32, np.array([2, 2, 0, -1], np.int32)),
                                  [3, -3, 0, np.iinfo(np.int32).min])
    ok = b != 0  # where torch defines it, torch's values
    np.testing.assert_array_equal(p.ifmod(a, b)[ok], torch.fmod(torch.tensor(a[ok]), torch.tensor(b[ok])).numpy())


def test_softmax_of_a_fully_masked_row(python_values_built):
    p, k = python_values_built
    s = np.float32([[1.0, 2.5, 0.3], [0.2, -0.1, 0.4]])
    mask = np.int64([[1, 1, 0], [0, 0, 0]])
    want = [t.numpy() for t in k.masked_softmax(torch.tensor(s), torch.tensor(mask))]
    got = p.masked_softmax(s, mask)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0][1], [1 / 3] * 3, rtol=1e-6)
    st = torch.tensor(s, requires_grad=True)
    cts = [np.float32([[0.3, -1.0, 2.0], [1.0, 0.5, -0.25]]), np.float32([[1.0, 0.0, 0.5], [0.25, -2.0, 1.0]])]
    sum((o * torch.tensor(c)).sum() for o, c in zip(k.masked_softmax(st, torch.tensor(mask)), cts)).backward()
    np.testing.assert_allclose(p.masked_softmax_vjp(s, mask, *cts), st.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_of_huge_inputs(python_values_built):
    p, _ = python_values_built
    x = np.float32([3e37, 3e37, -3e37])
    sm, lsm, lse = p.big_softmax(x)
    np.testing.assert_allclose(sm, [0.5, 0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(lsm[:2], [-np.log(2)] * 2, rtol=1e-6)
    assert lse == pytest.approx(3e37, rel=1e-6)
    sm, lsm, _ = p.big_softmax(np.float32([np.inf, 1.0]))  # torch: NaN throughout
    assert np.isnan(sm).all() and np.isnan(lsm).all()


def test_variables_named_like_cmath_macros(python_values_built):
    p, k = python_values_built
    x = np.float32([1.0, -2.0, 0.5])
    np.testing.assert_allclose(p.macro_names(x, 3.0), k.macro_names(torch.tensor(x), 3.0).numpy(), rtol=1e-6)


def test_clamp_with_a_bound_made_of_a_dim(python_values_built):
    p, k = python_values_built
    x = np.arange(5, dtype=np.float32) * 1.5
    i = np.int64([-3, 0, 2, 4, 9])
    np.testing.assert_array_equal(p.clamp_dim(x, i), k.clamp_dim(torch.tensor(x), torch.tensor(i)).numpy())


def test_inputs_named_out_and_dims_by_keyword(python_values_built):
    p, _ = python_values_built
    x, o, d = (np.full(3, v, np.float32) for v in (1.0, 10.0, 100.0))
    want = x + 2 * o + 3 * d
    np.testing.assert_array_equal(p.named_like_options(x, o, d), want)
    np.testing.assert_array_equal(p.named_like_options(x=x, out=o, dims=d), want)
    np.testing.assert_array_equal(p.named_like_options(x, dims=d, out=o), want)


def test_whole_max_with_a_nan_sends_the_derivative_to_it(python_values_built):
    p, k = python_values_built
    x = np.float32([1.0, np.nan, 2.0])
    xt = torch.tensor(x, requires_grad=True)
    k.whole_max(xt).backward()
    np.testing.assert_array_equal(p.whole_max_vjp(x, 1.0), xt.grad.numpy())


@pytest.mark.parametrize("source, message", [
    ('def f(a: "float[n]") -> "float[n]":\n    return a[a > 0]\n', "indexing with a bool mask is not supported"),
    ('import torch\ndef f(a: "float[n]", b: "float[m]") -> "float[2, n]":\n    return torch.stack([a, b])\n',
     "cannot stack f32[n] and f32[m]: the tensors must have one shape"),
])
def test_messages(tmp_path, capsys, source, message):
    from ksbuild.cli import main as cli_main
    (tmp_path / "k.py").write_text(source)
    (tmp_path / "m.toml").write_text('[package]\nname = "msg"\n[kernels.f]\npython = "k.py:f"\n[exports]\nf = "f"\n')
    assert cli_main(["check", str(tmp_path / "m.toml")]) == 1
    err = capsys.readouterr().err
    assert message in err and "k.py:" in err, err


def test_missing_exports_points_at_the_readme(tmp_path, capsys):
    from ksbuild.cli import main as cli_main
    (tmp_path / "k.py").write_text('def f(a: float) -> float:\n    return a\n')
    (tmp_path / "m.toml").write_text('[package]\nname = "msg"\n[kernels.f]\npython = "k.py:f"\n')
    assert cli_main(["check", str(tmp_path / "m.toml")]) == 1
    err = capsys.readouterr().err
    assert "[exports] is missing; see the manifest section of README.md" in err
