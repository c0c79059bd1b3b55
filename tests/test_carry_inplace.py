"""Loop carries updated in their own buffer (plan_memory.carry_updates): an elementwise update of a carry
that last reads its old value at the same index writes in place (also a swap computed in one fusion);
a read of a view of the old value (x.T) or of the old value after the new one is made keeps a separate
buffer. The compiled kernels are compared with the same source run by torch."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

KERNELS = '''
import torch


def lstm_like(x: "float[T, n]", c0: "float[n]") -> "float[n]":
    c = c0
    h = c0
    for t in range(x.shape[0]):
        c = torch.sigmoid(x[t]) * c + torch.tanh(x[t] + h)
        h = torch.tanh(c) * 0.5
    return c + h


def swap(a0: "float[n]", b0: "float[n]") -> "float[n]":
    a = a0
    b = b0
    for _ in range(3):
        a, b = b * 2.0, a + 1.0
    return a - b


def reversed_read(x0: "float[n]") -> "float[n]":
    x = x0
    for _ in range(4):
        x = x * 0.5 + torch.flip(x, [0])
    return x


def transposed_read(x0: "float[n, n]") -> "float[n, n]":
    x = x0
    for _ in range(4):
        x = x * 0.5 + x.T
    return x


def read_after(x0: "float[n]") -> "float[n]":
    x = x0
    y = x0
    for _ in range(3):
        old = x
        x = x * 2.0 + 1.0
        y = y * 0.5 + old * x.sum()
    return x + y


def stacked_old(x0: "float[n]") -> "float[n]":
    x = x0
    acc = x0 * 0.0
    for _ in range(3):
        acc = acc + x
        x = x * x - 0.5
    return acc + x
'''

MANIFEST = '''
[package]
name = "carries"

[build]
dtype = "float64"

[kernels]
lstm_like = { python = "k.py:lstm_like" }
swap = { python = "k.py:swap" }
reversed_read = { python = "k.py:reversed_read" }
transposed_read = { python = "k.py:transposed_read" }
read_after = { python = "k.py:read_after" }
stacked_old = { python = "k.py:stacked_old" }

[exports]
lstm_like = "lstm_like"
lstm_like_vjp = "vjp(lstm_like)"
swap = "swap"
reversed_read = "reversed_read"
transposed_read = "transposed_read"
read_after = "read_after"
stacked_old = "stacked_old"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from conftest import build_kernel_file
    root = tmp_path_factory.mktemp("carries")
    return (*build_kernel_file(root, KERNELS, MANIFEST, "carry_kernels"), root)


RNG = np.random.default_rng(3)


@pytest.mark.parametrize("name", ["swap", "reversed_read", "transposed_read", "read_after", "stacked_old"])
def test_carry_patterns_match_torch(built, name):
    pkg, source, _ = built
    args = [RNG.standard_normal((5, 5) if name == "transposed_read" else 5) for _ in range(2 if name == "swap" else 1)]
    want = getattr(source, name)(*[torch.tensor(a, dtype=torch.float64) for a in args]).numpy()
    np.testing.assert_allclose(getattr(pkg, name)(*args), want, rtol=1e-12, atol=1e-12)


def test_lstm_like_and_its_gradient_match_torch(built):
    pkg, source, _ = built
    x, c0 = RNG.standard_normal((7, 5)), RNG.standard_normal(5)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ct = torch.tensor(c0, dtype=torch.float64, requires_grad=True)
    out = source.lstm_like(xt, ct)
    np.testing.assert_allclose(pkg.lstm_like(x, c0), out.detach().numpy(), rtol=1e-12)
    dy = RNG.standard_normal(5)
    out.backward(torch.tensor(dy, dtype=torch.float64))
    dx, dc0 = pkg.lstm_like_vjp(x, c0, dy)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dc0, ct.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_in_place_only_where_safe(built):
    """The plan writes the new c and h of lstm_like into their carries' buffers, and a, b of swap (one fusion
    reads both old values at the index it writes: codegen loads them first), and x of reversed_read (the flip
    is a copy made before), and y of read_after; not x of transposed_read (the fusion reads x.T, a view) or
    of read_after (the old x is read after the new one is made)."""
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest
    from ksbuild.transforms.plan_memory import carry_updates
    _, _, root = built
    funcs = {e.name: e.func for e in build_exports(load_manifest(root / "manifest.toml"))}

    def updated(f):
        found = []
        for e in f.eqns:
            if e.prim.name == "loop":
                p = e.params
                carries = p["body"].params[1 + p["n_consts"]:1 + p["n_consts"] + p["n_carry"]]
                found += list(carry_updates(p["body"], carries, e.outs[:p["n_carry"]]))
        return found
    assert len(updated(funcs["lstm_like"])) == 2 and len(updated(funcs["swap"])) == 2
    assert len(updated(funcs["reversed_read"])) == 1
    assert updated(funcs["transposed_read"]) == []
    assert [v.hint for v in updated(funcs["read_after"])] == ["y"]
