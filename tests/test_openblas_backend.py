"""backend = "openblas": a product and its gradient through ks::gemm against numpy."""
from __future__ import annotations

import numpy as np

import ksbuild

KERNEL = '''
import torch


def loss(w: "float[o, d]", x: "float[n, d]") -> float:
    return torch.sum(torch.tanh(torch.einsum("od,nd->no", w, x)) ** 2)
'''

MANIFEST = '''
[package]
name = "ob"

[build]
dtype = "float64"
backend = "openblas"

[kernels]
loss = { python = "k.py:loss" }

[exports]
loss = "loss"
loss_grad = "grad(loss)"
'''


def test_a_product_and_its_gradient_through_openblas(tmp_path):
    (tmp_path / "k.py").write_text(KERNEL)
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(3, 5)), rng.normal(size=(7, 5))
    t = np.tanh(x @ w.T)
    np.testing.assert_allclose(pkg.loss(w, x), np.sum(t ** 2), rtol=1e-12)
    np.testing.assert_allclose(pkg.loss_grad(w, x)[0], ((2 * t * (1 - t ** 2)).T @ x), rtol=1e-10)
