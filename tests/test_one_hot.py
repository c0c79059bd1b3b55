"""One-hot selects kept sparse (transforms/one_hot.py, rules of the simplify pass): the reverse pass of
torch.min / torch.max(x, dim).values scatters to the first extremum of each row instead of multiplying an
[n, k] mask into the rest. Checked against the reference interpreter before and after simplify (inputs with
ties: whole numbers), against torch.autograd (the gradient goes to the first extremum, as torch's), and that
the [n, k] contraction is gone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.core import Func
from ksbuild.ir.interp import eval_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.expand import expand
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.simplify import simplify
from ksbuild.transforms.vjp import grad_func

KERNELS = '''
import torch


def kmeans(points: "float[n, d]", centroids: "float[k, d]") -> float:
    dist = (torch.sum(points * points, dim=1).unsqueeze(1) - 2.0 * (points @ centroids.T)
            + torch.sum(centroids * centroids, dim=1).unsqueeze(0))
    return torch.sum(torch.min(dist, dim=1).values)


def row_max(x: "float[n, d]", a: "float[d, k]", w: "float[n]") -> float:
    return torch.sum(w * torch.max(x @ a, 1).values)


def column_min(x: "float[n, d]", a: "float[k, n]") -> float:
    return torch.sum(torch.min(a @ x, dim=0, keepdim=True).values * 3.0)
'''
SIZES = {"n": 7, "d": 3, "k": 4}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("one_hot") / "k.py"
    path.write_text(KERNELS)
    return path


def arguments(f: Func, rng) -> list[np.ndarray]:
    """Small whole numbers: products and distances tie often."""
    return [rng.integers(-2, 3, size=[SIZES.get(d, d) for d in p.type.shape]).astype(np.float64) for p in f.params]


def contractions(f: Func) -> list[tuple]:
    """The shapes of every einsum's operands (a cteinsum, what einsum's transpose makes, is one)."""
    return [tuple(a.type.shape for a in e.ins) for g in walk_funcs(f) for e in g.eqns
            if e.prim.name in ("einsum", "cteinsum")]


def transformed(source: Path, name: str, how: str) -> Func:
    f = compile_python_kernel(source, name, "f64")
    if how == "grad":
        return grad_func(f, argnums=(0, 1) if name != "row_max" else (0, 1, 2))
    return jvp_func(grad_func(f, argnums=(1,)), [False, True])


@pytest.mark.parametrize("how", ["grad", "jvp_of_grad"])
@pytest.mark.parametrize("name", ["kmeans", "row_max", "column_min"])
def test_simplify_keeps_the_values(source, name, how):
    """The rules change no value, ties included (the interpreter before and after)."""
    if how == "jvp_of_grad" and name != "kmeans":
        pytest.skip("forward over reverse: kmeans' dir")
    f = transformed(source, name, how)
    g = simplify(f)
    verify(g)
    for seed in range(5):
        args = arguments(f, np.random.default_rng(seed))
        for want, got in zip(eval_func(f, args), eval_func(g, args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["kmeans", "row_max", "column_min"])
def test_no_product_with_the_mask(source, name):
    """After simplify the gradient has the forward product only: the mask's products (one per differentiated
    operand of the forward product) became scatters."""
    f = transformed(source, name, "grad")
    assert len(contractions(f)) == 3
    # (expand first, as the pipeline does: mul's and einsum's transposes make cotangent products, ctmul and
    # cteinsum, that expand makes muls and einsums)
    assert len(contractions(simplify(expand(f)))) == 1


def torch_gradients(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    if name == "kmeans":
        p, c = ts
        dist = (p * p).sum(1).unsqueeze(1) - 2.0 * (p @ c.T) + (c * c).sum(1).unsqueeze(0)
        y = torch.min(dist, dim=1).values.sum()
    elif name == "row_max":
        x, a, w = ts
        y = (w * torch.max(x @ a, 1).values).sum()
    else:
        x, a = ts
        y = (torch.min(a @ x, dim=0, keepdim=True).values * 3.0).sum()
    return [g.numpy() for g in torch.autograd.grad(y, ts)]


@pytest.mark.parametrize("name", ["kmeans", "row_max", "column_min"])
def test_gradient_matches_torch_at_ties(source, name):
    """The simplified gradient equals torch.autograd's, which sends a tied row's derivative to its first
    extremum."""
    g = simplify(transformed(source, name, "grad"))
    for seed in range(5):
        args = arguments(g, np.random.default_rng(10 + seed))
        for got, want in zip(eval_func(g, args), torch_gradients(name, args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
