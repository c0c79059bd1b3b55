"""A zero derivative times an infinite one inside a product stays zero at the second order: in contractions (dot,
matvec, matmul: einsum's transpose and jvp make a cteinsum, prims/cteinsum.py) and in reverse over forward (a jvp
multiplies its tangents with ctmul), in every nesting of jacfwd and jacrev, under vmap too; interpreted and compiled,
against torch.func (reverse over reverse; Python's max runs one side, as an if does)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.errors import Location
from ksbuild.exports import apply_transform
from ksbuild.ir.interp import eval_func
from ksbuild.manifest import parse_transform

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: fuzz/ is not installed

SOURCE = '''\
import torch


def dot_sqrt(w: "float[n]", x: "float[n]") -> float:
    return max(torch.dot(w, torch.sqrt(x)), 1.0)


def matvec_sqrt(w: "float[2, 2]", x: "float[2]") -> float:
    return max(torch.sum(w @ torch.sqrt(x)), 10.0)


def matmul_sqrt(w: "float[2, 2]", x: "float[2, 2]") -> float:
    return max(torch.sum(torch.sqrt(x) @ w), 10.0)


def mean_sqrt(w: "float[n]", x: "float[n]") -> float:
    return max(torch.mean(w * torch.sqrt(x)), 10.0)
'''
# each at a point where sqrt(x) has an infinite derivative (x = 0) and the max discards the product
POINTS = {"dot_sqrt": ([0.1, 0.2], [0.0, 0.5]), "matvec_sqrt": ([[0.1, 0.2], [0.3, 0.4]], [0.0, 0.5]),
          "matmul_sqrt": ([[0.1, 0.2], [0.3, 0.4]], [[0.0, 0.5], [0.3, 0.0]]),
          "mean_sqrt": ([0.1, 0.2], [0.0, 0.5])}
NESTINGS = {"h": "hessian({k}, argnums=(0, 1))",
            "rr": "jacrev(jacrev({k}, argnums=(0, 1)), argnums=(0, 1))",
            "fr": "jacfwd(jacrev({k}, argnums=(0, 1)), argnums=(0, 1))",
            "rf": "jacrev(jacfwd({k}, argnums=(0, 1)), argnums=(0, 1))",
            "ff": "jacfwd(jacfwd({k}, argnums=(0, 1)), argnums=(0, 1))",
            "vh": "vmap(hessian({k}, argnums=(0, 1)))"}
EXPORTS = {f"{k}_{n}": e.format(k=k) for k in POINTS for n, e in NESTINGS.items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return (ir_getter(tmp_path_factory, SOURCE, "singular_products"),
            build_source(tmp_path_factory, SOURCE, "singular_products", EXPORTS))


def _torch_second(kernel: str, point) -> list[np.ndarray]:
    """torch.func's jacrev(jacrev) of the kernel: the blocks d²/d(arg i) d(arg j), row-major over (i, j)."""
    from fuzz.torch_shim import load
    f = load(SOURCE)[kernel]
    args = [torch.tensor(a, dtype=torch.float64) for a in point]
    h = torch.func.jacrev(torch.func.jacrev(f, argnums=(0, 1)), argnums=(0, 1))(*args)
    return [h[i][j].numpy() for i in range(2) for j in range(2)]


def _agrees_where_torch_is_finite(got, want):
    got = np.asarray(got, dtype=np.float64)
    finite = np.isfinite(want)
    assert finite.all()
    assert not np.isnan(got).any(), (got, want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
@pytest.mark.parametrize("kernel", sorted(POINTS))
def test_zero_times_infinite_derivative_in_a_product(built, kernel, nesting):
    ir, pkg = built
    expr = EXPORTS[f"{kernel}_{nesting}"]
    f = apply_transform(parse_transform(expr, Location("m"), [kernel]), {kernel: ir(kernel)}, Location("m"))
    point = [np.array(a, dtype=np.float64) for a in POINTS[kernel]]
    want = _torch_second(kernel, POINTS[kernel])
    if nesting == "vh":  # two lanes, the same point: each lane's blocks
        point = [np.stack([a, a]) for a in point]
        want = [np.stack([w, w]) for w in want]
    for got in (eval_func(f, point), getattr(pkg, f"{kernel}_{nesting}")(*point)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _agrees_where_torch_is_finite(g, w)
