"""Compiled kernels whose result adds a value to a product that reads the same value.

`y + W @ y` becomes an accumulating product into y's buffer; it must not be updated in place
while the product still reads it (found by a held-out red-team suite: wrong values in forward code
and wrong gradients in reverse mode). The reference interpreter has value semantics and cannot
see this, so the oracle here is torch on the same Python source, values and torch.autograd
gradients, with both backends and under vmap.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

KERNELS = '''
import torch


def resid(x: "float[n]", W: "float[n, n]") -> "float[n]":
    y = 2.0 * x
    return y + W @ y


def resid_loop(x: "float[n]", W: "float[n, n]") -> "float[n]":
    h = x
    for _ in range(3):
        h = h + W @ h
    return h


def cumsum_resid(x: "float[n]", W: "float[n, n]") -> "float[n]":
    y = x * 3.0
    return y + torch.cumsum(y, dim=0)


def resnet_block(X: "float[b, n]", W: "float[n, n]") -> "float[b, n]":
    H = torch.tanh(X)
    return H + H @ W.T


def bilinear_plus_dot(u: "float[n]", v: "float[n]", M: "float[n, n]") -> float:
    return u @ M @ v + u @ v


def dot_plus_quad(a: "float[n]", b: "float[n]", M: "float[n, n]") -> float:
    return torch.dot(a, b) + torch.dot(a, M @ b)
'''

FORWARD = ["resid", "resid_loop", "cumsum_resid", "resnet_block"]
SCALAR = ["bilinear_plus_dot", "dot_plus_quad"]


def manifest(backend: str) -> str:
    lines = ['[package]\nname = "alias"\n[build]\ndtype = "float64"', f'backend = "{backend}"', "[kernels]"]
    lines += [f'{k} = {{ python = "k.py:{k}" }}' for k in FORWARD + SCALAR]
    lines += ["[exports]"] + [f'{k} = "{k}"' for k in FORWARD]
    lines += [f'{k}_grad = "grad({k}, argnums=(0, 1, 2))"' for k in SCALAR]
    lines += ['resid_vmap = "vmap(resid, in_axes=(0, None))"']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", params=["plain", "blas"])
def built(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"alias_{request.param}")
    return build_kernel_file(root, KERNELS, manifest(request.param), "alias_kernels")


def data(*shape, seed=0):
    return np.random.default_rng(seed + 7 * len(shape)).standard_normal(shape)


@pytest.mark.parametrize("name", FORWARD)
def test_values_match_torch(built, name):
    pkg, source = built
    first = data(2, 4) if name == "resnet_block" else data(4)
    args = (first, data(4, 4, seed=1))
    want = getattr(source, name)(*map(torch.tensor, args)).numpy()
    np.testing.assert_allclose(getattr(pkg, name)(*args), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SCALAR)
def test_gradients_match_autograd(built, name):
    pkg, source = built
    args = (data(4), data(4, seed=1), data(4, 4, seed=2))
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    want = torch.autograd.grad(getattr(source, name)(*ts), ts)
    for got, w in zip(getattr(pkg, name + "_grad")(*args), want):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-12, atol=1e-12)


def test_vmap_matches_a_loop(built):
    pkg, source = built
    xs, W = data(3, 4), data(4, 4, seed=1)
    want = np.stack([source.resid(torch.tensor(x), torch.tensor(W)).numpy() for x in xs])
    np.testing.assert_allclose(pkg.resid_vmap(xs, W), want, rtol=1e-12, atol=1e-12)
