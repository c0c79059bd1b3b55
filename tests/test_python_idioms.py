"""Findings of a held-out pass by a new user who wrote a project from the docs alone (2026-11-26), each
checked against the same source run as Python:

- len(COEFFS) of a module-level tuple said "expected a tensor, got a tuple", and `for c in reversed(COEFFS)`
  (or reversed(x) of a tensor's rows) was refused: both are Horner's rule as people write it;
- math.fmod was unsupported (torch.fmod was);
- math.exp(x) of a tensor x compiled elementwise, where Python's math raises: the file did not run as Python;
- a misspelt dtype in an annotation read ''flaot[n]'' (doubled quotes) with no suggestion;
- a signature whose result does not fit the function was reported at the function, not the manifest line;
- a gather from a table computed just before (t = x * 2; t[i]) crashed the build with a Python KeyError (the
  gather joined its table's loop nest);
- from the notes of earlier passes: torch.hypot's derivative was NaN beside an infinite operand (torch: 0; now
  the hypot prim, C's hypot) and F.hardswish's at ±inf and NaN (torch: 1, 0 and 1).
(The shipping findings of the same pass: tests/test_shipping.py and tests/test_wheel.py.)
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import build_kernel_file

from ksbuild.cli import main as cli_main

KERNELS = '''
import math
import torch

POLY = (1.0, -0.5, 0.25, -0.125)


def horner_len(x: float) -> float:
    acc = 0.0
    for i in range(len(POLY) - 1, -1, -1):
        acc = acc * x + POLY[i]
    return acc


def horner_reversed(x: float) -> float:
    acc = 0.0
    for c in reversed(POLY):
        acc = acc * x + c
    return acc


def rows_backwards(x: "float[n, 3]") -> "float[3]":
    acc = torch.zeros(3)
    for row in reversed(x):
        acc = acc * 0.5 + row
    return acc


def fmod(x: float, y: float) -> float:
    return math.fmod(x, y) + math.fmod(7.5, 2.0)
'''

MANIFEST = '''
[package]
name = "rt_newuser"

[build]
dtype = "float64"

[kernels]
horner_len = { python = "k.py:horner_len" }
horner_reversed = { python = "k.py:horner_reversed" }
rows_backwards = { python = "k.py:rows_backwards" }
fmod = { python = "k.py:fmod" }

[exports]
horner_len = "horner_len"
horner_reversed = "horner_reversed"
vhorner = "vmap(horner_reversed)"
horner_grad = "grad(horner_reversed)"
rows_backwards = "rows_backwards"
rows_backwards_vjp = "vjp(rows_backwards)"
fmod = "fmod"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("torch")
    return build_kernel_file(tmp_path_factory.mktemp("newuser"), KERNELS, MANIFEST, "rt_newuser_k")


def test_horner_over_a_module_level_tuple(built):
    p, k = built
    for x in (-2.0, 0.0, 0.3, 1.5):
        assert p.horner_len(x) == pytest.approx(k.horner_len(x), rel=1e-15)
        assert p.horner_reversed(x) == pytest.approx(k.horner_reversed(x), rel=1e-15)
        assert p.horner_grad(x) == pytest.approx(-0.5 + 2 * 0.25 * x - 3 * 0.125 * x * x, rel=1e-14)
    xs = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(p.vhorner(xs), [k.horner_reversed(float(x)) for x in xs], rtol=1e-15)


def test_reversed_rows_of_a_tensor(built):
    import torch
    p, k = built
    x = np.arange(12.0).reshape(4, 3) / 7
    np.testing.assert_allclose(p.rows_backwards(x), k.rows_backwards(torch.from_numpy(x)).numpy(), rtol=1e-15)
    xt = torch.from_numpy(x).requires_grad_()
    ct = np.array([1.0, -2.0, 0.5])
    (k.rows_backwards(xt) * torch.from_numpy(ct)).sum().backward()
    np.testing.assert_allclose(p.rows_backwards_vjp(x, ct), xt.grad.numpy(), rtol=1e-15)


def test_math_fmod(built):
    p, k = built
    for x, y in ((5.5, 2.0), (-5.5, 2.0), (5.5, -2.0), (1e16, 3.0), (2.0, math.inf)):
        assert p.fmod(x, y) == k.fmod(x, y)


@pytest.mark.parametrize("source, signature, message, where", [
    ('import math\ndef f(x: "float[n]") -> "float[n]":\n    return math.exp(x)\n', None,
     "math.exp takes numbers, and this argument is a tensor (f32[n])", "k.py:3:12"),
    ('import math\ndef f(x: "float[n]") -> "float[n]":\n    return math.erf(x)\n', None,
     "math.erf takes numbers", "k.py:3:12"),
    ('def f(x: "flaot[n]") -> "float[n]":\n    return x\n', None,
     "unsupported annotation 'flaot[n]'\n", "k.py:1:10"),
    ('def f(x):\n    return x\n', "(x: f32[n]) -> f32[k]",
     "the signature's results do not fit what 'f' returns: expected f32[k], got f32[n]", "m.toml:5:1"),
])
def test_messages(tmp_path, capsys, source, signature, message, where):
    (tmp_path / "k.py").write_text(source)
    sig = f'signature = "{signature}"\n' if signature else ""
    (tmp_path / "m.toml").write_text(f'[package]\nname = "msg"\n[kernels.f]\npython = "k.py:f"\n{sig}'
                                     '[exports]\nf = "f"\n')
    assert cli_main(["check", str(tmp_path / "m.toml")]) == 1
    err = capsys.readouterr().err
    assert message in err and where in err and "Traceback" not in err, err
    if "flaot" in source:
        assert "did you mean 'float'?" in err


EDGES = """
import torch
import torch.nn.functional as F


def hyp(x: "float[n]", y: "float[n]") -> "float[n]":
    return torch.hypot(x, y)


def hsw(x: "float[n]") -> "float[n]":
    return F.hardswish(x)
"""


def test_hypot_and_hardswish_derivatives_at_the_edges_are_torchs(tmp_path):
    torch = pytest.importorskip("torch")
    manifest = ('[package]\nname = "adedges"\n[build]\ndtype = "float64"\n[kernels]\nhyp = { python = "k.py:hyp" }\n'
                'hsw = { python = "k.py:hsw" }\n[exports]\nhyp = "hyp"\nhsw = "hsw"\nhyp_vjp = "vjp(hyp)"\n'
                'hsw_vjp = "vjp(hsw)"\n')
    p, k = build_kernel_file(tmp_path, EDGES, manifest, "adedges_k")
    inf = math.inf
    x = np.array([inf, 3.0, -inf, 0.0, 1e300, 1e-200, -4.0, np.nan])
    y = np.array([1.0, inf, 2.0, 0.0, 1e300, 0.0, 3.0, inf])
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    h = k.hyp(xt, yt)
    h.sum().backward()
    np.testing.assert_array_equal(p.hyp(x, y), h.detach().numpy())
    for got, want in zip(p.hyp_vjp(x, y, np.ones(len(x))), (xt.grad, yt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-15)
    z = np.array([inf, -inf, 0.0, 3.0, -3.0, 1.0, -2.0, np.nan, 2.999, -2.999, 5.0, -5.0])
    zt = torch.tensor(z, requires_grad=True)
    s = k.hsw(zt)
    s.sum().backward()
    np.testing.assert_allclose(p.hsw(z), s.detach().numpy(), rtol=1e-15)
    np.testing.assert_array_equal(np.signbit(p.hsw(z)), np.signbit(s.detach().numpy()))  # (-0 from -3 down)
    # at NaN, torch's hardswish_backward gives 1 (its rule: x < -3, x <= 3 and the rest, NaN falling to the rest) in
    # its scalar loop (a 1-element tensor) and on AVX-512, NaN in its AVX2 kernel (12 elements here): ksbuild keeps 1
    got, want = p.hsw_vjp(z, np.ones(len(z))), zt.grad.numpy()
    np.testing.assert_allclose(got[~np.isnan(z)], want[~np.isnan(z)], rtol=1e-14)
    assert np.all(got[np.isnan(z)] == 1.0)


def test_a_gather_from_a_table_computed_just_before(tmp_path):
    p, _ = build_kernel_file(tmp_path, 'def f(x: "float[n]", i: "i64[n]") -> "float[n]":\n    t = x * 2.0\n'
                                       '    return t[i] + 1.0\n',
                             '[package]\nname = "gfuse"\n[kernels.f]\npython = "k.py:f"\n'
                             '[exports]\nf = "f"\nf_vjp = "vjp(f)"\n', "gfuse_k")
    x, i = np.arange(5.0, dtype=np.float32), np.array([4, 3, 3, 1, 0])
    np.testing.assert_array_equal(p.f(x, i), (x * 2)[i] + 1)
    np.testing.assert_array_equal(p.f_vjp(x, i, np.ones(5, np.float32)), [2, 2, 0, 4, 2])
