"""torch.erfinv, torch.special.erfinv, torch.special.ndtri and torch.erfc (ops.math.erfinv / probit, also the ONNX-ML
PROBIT post transform) compiled from the Python frontend and from torch.export, float32 and float64, against
scipy's erfinv/ndtri (Cephes) in ulps, down to the tails; and their vjp against the closed form √π/2 ·
e^(erfinv(y)²)."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

special = pytest.importorskip("scipy.special", reason="scipy is not installed")
torch = pytest.importorskip("torch")

import ksbuild  # noqa: E402

KERNELS = '''
import torch

def ei(y: "f32[n]") -> "f32[n]":
    return torch.erfinv(y)

def ei64(y: "f64[n]") -> "f64[n]":
    return torch.special.erfinv(y)

def nd(p: "f32[n]") -> "f32[n]":
    return torch.special.ndtri(p)

def nd64(p: "f64[n]") -> "f64[n]":
    return torch.special.ndtri(p)

def tails(x: "f64[n]") -> "f64[n]":
    return torch.erfc(x) + torch.special.erfc(-x)
'''

MODULE = '''
import torch
from torch.export import Dim

class Quantiles(torch.nn.Module):
    def forward(self, p):
        return torch.special.ndtri(p) + torch.erfinv(2 * p - 1) + torch.erfc(10 * p)

def make():
    return Quantiles(), (torch.rand(5, dtype=torch.float64),), ({0: Dim("n")},)
'''


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("erfinv")
    (root / "k.py").write_text(KERNELS)
    (root / "m.py").write_text(MODULE)
    (root / "manifest.toml").write_text(textwrap.dedent('''
        [package]
        name = "quantiles"
        [kernels]
        ei = { python = "k.py:ei" }
        ei64 = { python = "k.py:ei64" }
        nd = { python = "k.py:nd" }
        nd64 = { python = "k.py:nd64" }
        tails = { python = "k.py:tails" }
        module = { torch = "m.py:make" }
        [exports]
        ei = "ei"
        ei64 = "ei64"
        nd = "nd"
        nd64 = "nd64"
        tails = "tails"
        module = "module"
        ei_vjp = "vjp(ei)"
        nd64_vjp = "vjp(nd64)"
        '''))
    return ksbuild.build(root / "manifest.toml", quiet=True)


def _ulps(got, want, dtype):
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin], want[~fin])  # ±inf at the ends, NaN outside, alike
    return np.abs(got[fin] - want[fin]) / np.spacing(np.abs(want[fin]).astype(dtype))


Y = np.concatenate([np.linspace(-1, 1, 2001), 1 - np.logspace(-16, -1, 300), -1 + np.logspace(-16, -1, 300),
                    [1e-30, -0.0, 1.5, -1.0000001, np.nan]])


@pytest.mark.parametrize("name,dtype,ulps", [("ei", np.float32, 0), ("ei64", np.float64, 200)])
def test_erfinv(pkg, name, dtype, ulps):
    y = Y.astype(dtype)
    want = special.erfinv(y.astype(np.float64)).astype(dtype)
    assert _ulps(getattr(pkg, name)(y), want, dtype).max() <= ulps


@pytest.mark.parametrize("name,dtype,ulps,smallest", [("nd", np.float32, 1, 1e-44), ("nd64", np.float64, 64, 1e-300)])
def test_ndtri_down_to_the_tails(pkg, name, dtype, ulps, smallest):
    p = np.concatenate([np.linspace(0, 1, 1001), np.logspace(np.log10(smallest), -1, 500),
                        1 - np.logspace(-7, -1, 50), [np.nan, -0.1, 1.1]]).astype(dtype)
    want = special.ndtri(p.astype(np.float64)).astype(dtype)
    assert _ulps(getattr(pkg, name)(p), want, dtype).max() <= ulps


def test_erfc_keeps_the_tail(pkg):
    """torch.erfc is the erfc prim, not 1 - erf (which is 0 from x = 6 on)."""
    x = np.linspace(-3, 26, 300)
    np.testing.assert_allclose(pkg.tails(x), special.erfc(x) + special.erfc(-x), rtol=1e-13)


def test_torch_export_module(pkg):
    p = np.concatenate([np.linspace(0, 1, 101), [1e-200, 1 - 1e-12]])
    want = special.ndtri(p) + special.erfinv(2 * p - 1) + special.erfc(10 * p)
    np.testing.assert_allclose(pkg.module(p), want, rtol=1e-13)


def test_derivatives(pkg):
    y = np.linspace(-0.999, 0.999, 201).astype(np.float32)
    want = np.sqrt(np.pi) / 2 * np.exp(special.erfinv(y.astype(np.float64)) ** 2)
    np.testing.assert_allclose(pkg.ei_vjp(y, np.ones_like(y)), want, rtol=2e-6)
    p = np.concatenate([np.logspace(-200, -1, 50), [0.3, 0.5, 0.7, 1 - 1e-9]])
    want = np.sqrt(2 * np.pi) * np.exp(special.ndtri(p) ** 2 / 2)  # 1 / φ(ndtri p)
    np.testing.assert_allclose(pkg.nd64_vjp(p, np.ones_like(p)), want, rtol=1e-12)
