"""Loops whose tensor carries are updated from each other, through views, by index assignment, by matrix
products and in nested loops, compiled and compared with the same source run by torch (values, vjp against
autograd). Several of these came from a held-out pass over an in-place carry update that was then taken out:
it wrote a new value into the carry's buffer while a view, an index assignment, an inner loop's carry or a
vjp residual still read the old one there (docs/performance.md). sort_first_two: `a = x[0].clone()` was
refused as a view of x once x[0] was assigned."""
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


def nested_matvec(x0: "float[n]", W: "float[n, n]") -> "float[n]":
    x = x0
    for i in range(2):
        for j in range(2):
            x = torch.tanh(W @ x)
        x = x + W @ x
    return x


def set_then_transpose(x0: "float[n, n]") -> "float[n, n]":
    x = x0 * 1.0
    for i in range(2):
        x[0, 1] = 2.0
        x = x * 0.5 + x.T
    return x


def set_then_matvec(W: "float[n, n]", x0: "float[n]") -> "float[n]":
    x = x0 * 1.0
    for i in range(2):
        x[0] = 1.0
        x = W @ x
    return x


def accumulate_then_transpose(X0: "float[n, n]", A: "float[n, n]", B: "float[n, n]") -> "float[n, n]":
    X = X0 * 1.0
    for i in range(2):
        X = X + A @ B
        X = X.T * 0.5 + X * 0.1
    return X


def ode_substeps(A: "float[n, n]", y0: "float[n]") -> "float[n]":
    y = y0
    for step in range(3):
        for sub in range(2):
            y = y + 0.1 * torch.tanh(A @ y)
        y = y / torch.sqrt((y * y).sum() + 1.0)
    return y


def sort_first_two(x0: "float[n]") -> "float[n]":
    x = x0 * 1.0
    a = x[0].clone()
    b = x[1].clone()
    x[0] = torch.minimum(a, b)
    x[1] = torch.maximum(a, b)
    return x


def rnn_set_first(W: "float[n, n]", xs: "float[T, n]", h0: "float[n]") -> "float[n]":
    h = h0 * 1.0
    for t in range(xs.shape[0]):
        h[0] = xs[t, 0]
        h = torch.tanh(W @ h) + xs[t]
    return h
'''

NAMES = ["lstm_like", "swap", "reversed_read", "transposed_read", "read_after", "nested_matvec",
         "set_then_transpose", "set_then_matvec", "accumulate_then_transpose", "ode_substeps", "rnn_set_first",
         "sort_first_two"]
MANIFEST = ('[package]\nname = "carries"\n\n[build]\ndtype = "float64"\n\n[kernels]\n'
            + "".join(f'{k} = {{ python = "k.py:{k}" }}\n' for k in NAMES) + "\n[exports]\n"
            + "".join(f'{k} = "{k}"\n{k}_vjp = "vjp({k})"\n' for k in NAMES))

SHAPES = {  # the arguments of each kernel (n = 5: not a multiple of the register tiles' rows)
    "lstm_like": [(7, 5), (5,)], "swap": [(5,), (5,)], "reversed_read": [(5,)], "transposed_read": [(5, 5)],
    "read_after": [(5,)], "nested_matvec": [(5,), (5, 5)], "set_then_transpose": [(5, 5)],
    "set_then_matvec": [(5, 5), (5,)], "accumulate_then_transpose": [(5, 5), (5, 5), (5, 5)],
    "ode_substeps": [(5, 5), (5,)], "rnn_set_first": [(5, 5), (3, 5), (5,)], "sort_first_two": [(5,)],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from conftest import build_kernel_file
    return build_kernel_file(tmp_path_factory.mktemp("carries"), KERNELS, MANIFEST, "carry_kernels")


@pytest.mark.parametrize("name", NAMES)
def test_values_and_vjp_match_torch(built, name):
    pkg, source = built
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s) * 0.5 for s in SHAPES[name]]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    out = getattr(source, name)(*ts)
    np.testing.assert_allclose(getattr(pkg, name)(*args), out.detach().numpy(), rtol=1e-10, atol=1e-12)
    dy = rng.standard_normal(out.shape)
    out.backward(torch.tensor(dy, dtype=torch.float64))
    grads = getattr(pkg, f"{name}_vjp")(*args, dy)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for g, t in zip(grads, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-9, atol=1e-11)
