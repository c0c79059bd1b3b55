"""Kernels from the third held-out pass over Python kernels (2026-11-26), each fixed and checked against torch
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

MANIFEST = '''
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
def built(tmp_path_factory):
    kernels = "\n".join(f'[kernels.{k}]\npython = "k.py:{k}"' for k in NAMES)
    exports = "\n".join(f'{k} = "{k}"' for k in NAMES)
    return build_kernel_file(tmp_path_factory.mktemp("pyvalues"), KERNELS,
                             MANIFEST.format(kernels=kernels, exports=exports), "rt_pyvalues_k")


def test_integer_division_by_zero_does_not_trap(built):
    p, _ = built
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


def test_softmax_of_a_fully_masked_row(built):
    p, k = built
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


def test_softmax_of_huge_inputs(built):
    p, _ = built
    x = np.float32([3e37, 3e37, -3e37])
    sm, lsm, lse = p.big_softmax(x)
    np.testing.assert_allclose(sm, [0.5, 0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(lsm[:2], [-np.log(2)] * 2, rtol=1e-6)
    assert lse == pytest.approx(3e37, rel=1e-6)
    sm, lsm, _ = p.big_softmax(np.float32([np.inf, 1.0]))  # torch: NaN throughout
    assert np.isnan(sm).all() and np.isnan(lsm).all()


def test_variables_named_like_cmath_macros(built):
    p, k = built
    x = np.float32([1.0, -2.0, 0.5])
    np.testing.assert_allclose(p.macro_names(x, 3.0), k.macro_names(torch.tensor(x), 3.0).numpy(), rtol=1e-6)


def test_clamp_with_a_bound_made_of_a_dim(built):
    p, k = built
    x = np.arange(5, dtype=np.float32) * 1.5
    i = np.int64([-3, 0, 2, 4, 9])
    np.testing.assert_array_equal(p.clamp_dim(x, i), k.clamp_dim(torch.tensor(x), torch.tensor(i)).numpy())


def test_inputs_named_out_and_dims_by_keyword(built):
    p, _ = built
    x, o, d = (np.full(3, v, np.float32) for v in (1.0, 10.0, 100.0))
    want = x + 2 * o + 3 * d
    np.testing.assert_array_equal(p.named_like_options(x, o, d), want)
    np.testing.assert_array_equal(p.named_like_options(x=x, out=o, dims=d), want)
    np.testing.assert_array_equal(p.named_like_options(x, dims=d, out=o), want)


def test_whole_max_with_a_nan_sends_the_derivative_to_it(built):
    p, k = built
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
