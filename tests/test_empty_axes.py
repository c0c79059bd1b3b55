"""An element taken from an axis of size 0 (sanitizer pass: each read or wrote the element before the buffer,
ks::clamp_index(i, 0) being -1) is status 1, wherever the taking is: a gather from an empty table, a max
over an empty axis, the vjp of x[:, 0] (its add into x[:, 0]), a gradient whose add was hoisted out of a
loop of no steps, an embedding lookup in an empty vocabulary. Taking nothing from an empty axis (no
indices, a loop of no steps) is no error."""
from __future__ import annotations

import numpy as np
import pytest

import ksbuild

KERNELS = '''import torch


def pick(x: "float[n, c]", idx: "i64[n]") -> "float[n]":
    return x.gather(1, idx.unsqueeze(1)).squeeze(1)


def rowmax(x: "float[n, k]") -> "float[n]":
    return torch.max(x, dim=1).values


def first_col(x: "float[n, d]") -> "float[n]":
    return x[:, 0] * 2.0


def spread(q: "float[d]") -> float:
    return torch.stack([q[j] + 0.0 * q[0] for j in range(q.shape[0])]).sum()


def embed(table: "float[v, e]", ids: "i64[m]") -> "float[m, e]":
    return table[ids]


def total(x: "float[n]") -> float:
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i]
    return s
'''

MANIFEST = '''[package]
name = "empties"
[build]
dtype = "float64"
[kernels]
pick = { python = "k.py:pick" }
rowmax = { python = "k.py:rowmax" }
first_col = { python = "k.py:first_col" }
spread = { python = "k.py:spread" }
embed = { python = "k.py:embed" }
total = { python = "k.py:total" }
[exports]
pick = "pick"
rowmax = "rowmax"
first_col = "first_col"
first_col_vjp = "vjp(first_col)"
spread = "spread"
spread_grad = "grad(spread)"
embed = "embed"
embed_vjp = "vjp(embed)"
total = "total"
total_grad = "grad(total)"
'''


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("empties")
    (root / "k.py").write_text(KERNELS)
    (root / "manifest.toml").write_text(MANIFEST)
    return ksbuild.build(root / "manifest.toml")


def _status_1(export, *args):
    with pytest.raises(export.CallError, match="status 1"):
        export(*args)


def test_taking_from_an_empty_axis_is_status_1(pkg):
    _status_1(pkg.pick, np.zeros((2, 0)), np.zeros(2, dtype=np.int64))
    _status_1(pkg.rowmax, np.zeros((2, 0)))
    _status_1(pkg.first_col, np.zeros((3, 0)))
    _status_1(pkg.first_col_vjp, np.zeros((3, 0)), np.ones(3))
    _status_1(pkg.embed, np.zeros((0, 4)), np.zeros(5, dtype=np.int64))
    _status_1(pkg.embed_vjp, np.zeros((0, 4)), np.zeros(5, dtype=np.int64), np.ones((5, 4)))
    # the kernel reads nothing when d = 0; its gradient's add into q[0] was moved out of the loop, so it refuses
    # (status 1, not a write before the buffer)
    assert pkg.spread(np.zeros(0)) == 0.0
    _status_1(pkg.spread_grad, np.zeros(0))


def test_taking_nothing_from_an_empty_axis_is_fine(pkg):
    assert pkg.pick(np.zeros((0, 0)), np.zeros(0, dtype=np.int64)).shape == (0,)
    assert pkg.embed(np.zeros((0, 4)), np.zeros(0, dtype=np.int64)).shape == (0, 4)
    assert pkg.total(np.zeros(0)) == 0.0
    assert pkg.total_grad(np.zeros(0)).shape == (0,)


def test_the_same_kernels_with_elements_agree_with_numpy(pkg):
    rng = np.random.default_rng(0)
    x, idx = rng.standard_normal((4, 3)), np.array([2, 0, 1, 2])
    np.testing.assert_allclose(pkg.pick(x, idx), x[np.arange(4), idx])
    np.testing.assert_allclose(pkg.rowmax(x), x.max(1))
    np.testing.assert_allclose(pkg.first_col_vjp(x, np.ones(4)), np.c_[2 * np.ones(4), np.zeros((4, 2))])
    np.testing.assert_allclose(pkg.spread_grad(x[0]), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(pkg.embed(x, np.array([3, 3, 0])), x[[3, 3, 0]])
    np.testing.assert_allclose(pkg.total_grad(x[:, 0]), np.ones(4))
