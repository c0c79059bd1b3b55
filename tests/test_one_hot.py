"""One-hot selects kept sparse (transforms/one_hot.py, rules of the simplify pass): the reverse pass of
torch.min / torch.max(x, dim).values scatters to the first extremum of each row instead of multiplying an
[n, k] mask into the rest. Checked against the reference interpreter before and after simplify (inputs with
ties: whole numbers), against torch.autograd (the gradient goes to the first extremum, as torch's), and that
the [n, k] contraction is gone."""
from __future__ import annotations

import re
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


COMPILED = KERNELS + '''

def values_and_indices(x: "float[n, k]") -> "float[n]":
    r = torch.min(x, dim=1)
    return r.values * 10.0 + r.indices


def first_max_down(x: "float[n, k]") -> "i64[k]":
    return torch.argmax(x, dim=0)


def row_extrema(x: "float[n, k]") -> "float[n]":
    y = x * 2.0
    return torch.amax(y, dim=1) * 10.0 + torch.amin(y, dim=1)


def row_extrema_nan(x: "float[n, k]") -> "float[n]":
    y = x * 2.0
    top, bottom = torch.amax(y, dim=1), torch.amin(y, dim=1)
    return torch.where(torch.isnan(top), 1.0, 0.0) + torch.where(torch.isnan(bottom), 2.0, 0.0)


def row_extrema_40(x: "float[n, 40]") -> "float[n]":
    return torch.amax(x, dim=1) * 10.0 + torch.amin(x, dim=1)


def whole_max(x: "float[n]") -> float:
    return torch.max(x)
'''
EXTREMA = ("row_extrema", "row_extrema_nan", "row_extrema_40", "whole_max")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One package: the positions of extrema as reduce_argmin / reduce_argmax compile them (the position in the
    loop nest of the extremum, a second sweep over the row; a leading axis in loops of its own), and kmeans'
    gradient and its jvp (dir) that take the nearest centroid from it."""
    import ksbuild
    root = tmp_path_factory.mktemp("one_hot_compiled")
    (root / "k.py").write_text(COMPILED)
    (root / "manifest.toml").write_text('[package]\nname = "one_hot_c"\n[build]\ndtype = "float64"\n[kernels]\n'
                                        + "".join(f'{k} = {{ python = "k.py:{k}" }}\n' for k in
                                                  ("kmeans", "values_and_indices", "first_max_down", *EXTREMA))
                                        + '[exports]\nvalues_and_indices = "values_and_indices"\n'
                                        + "".join(f'{k} = "{k}"\n' for k in EXTREMA) +
                                        'first_max_down = "first_max_down"\n'
                                        'kmeans_grad = "grad(kmeans, argnums=(0, 1))"\n'
                                        'kmeans_dir = "jvp(grad(kmeans, argnums=1), argnums=1, primals=True)"\n')
    return ksbuild.build(root / "manifest.toml")


def ties_and_nans(rng, shape) -> np.ndarray:
    x = rng.integers(-2, 3, size=shape).astype(np.float64)
    x[rng.uniform(size=shape) < 0.05] = np.nan
    return x


@pytest.mark.parametrize("k", [1, 5, 37])
def test_compiled_positions_match_torch(compiled, k):
    """torch.min(x, dim).values and .indices (one loop nest computes both) and torch.argmax(x, dim=0) (its own
    loops), at ties and NaN (the first NaN is the extremum), as torch computes them."""
    rng = np.random.default_rng(k)
    x = ties_and_nans(rng, (23, k))
    r = torch.min(torch.tensor(x), dim=1)
    np.testing.assert_array_equal(compiled.values_and_indices(x), (r.values * 10.0 + r.indices).numpy())
    np.testing.assert_array_equal(compiled.first_max_down(x), torch.argmax(torch.tensor(x), dim=0).numpy())


def test_compiled_kmeans_derivatives_match_torch(compiled):
    """kmeans' gradient (its nearest centroid from reduce_argmin, fused with the distances) and dir's J and H·1
    equal torch.autograd's at ties (whole numbers). (With a NaN point torch's dense product spreads the NaN over
    every centroid's column, the scatter to one centroid does not: transforms/one_hot.py.)"""
    for seed in range(3):
        rng = np.random.default_rng(20 + seed)
        p, c = rng.integers(-2, 3, size=(31, 3)).astype(np.float64), rng.integers(-2, 3, size=(6, 3)).astype(np.float64)
        want = torch_gradients("kmeans", [p, c])
        for got, w in zip(compiled.kmeans_grad(p, c), want):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)
        g, h = compiled.kmeans_dir(p, c, np.ones_like(c))
        np.testing.assert_allclose(g, want[1], rtol=1e-12, atol=1e-12)
        first = np.argmin(((p[:, None, :] - c[None]) ** 2).sum(2), axis=1)  # H·1 = 2 · (points nearest each centroid)
        np.testing.assert_allclose(h, 2.0 * np.bincount(first, minlength=6)[:, None] * np.ones_like(c))


def signed_zeros_nans_infs(rng, shape) -> np.ndarray:
    """Whole numbers with ties, -0.0 beside +0.0, infinities and a few NaN rows' worth of NaNs."""
    x = rng.integers(-2, 3, size=shape).astype(np.float64)
    x[rng.uniform(size=shape) < 0.3] = -0.0
    x[rng.uniform(size=shape) < 0.05] = np.inf
    x[rng.uniform(size=shape) < 0.05] = -np.inf
    x[rng.uniform(size=shape) < 0.02] = np.nan
    return x


@pytest.mark.parametrize("k", [1, 7, 31, 32, 33, 100, 257])
def test_compiled_max_min_rows_match_numpy(compiled, k):
    """Plain max and min reductions (amax, amin, max): rows of 32 or more are two vectorized reductions each, the
    numbers' extremum and whether there is a NaN (codegen/fusion.py, VECTOR_ROW), shorter ones the running max or
    min (a max and a min of one operand in one loop, with one NaN flag: DynamicQuantizeLinear's range); a run-time
    row length chooses between them, a literal one (40) has the vector loop only. Both give
    numpy's values at odd sizes, NaN (anywhere in a row: NaN), infinities, and ties of -0.0 and +0.0 (either zero:
    assert_array_equal takes -0.0 == 0.0), and on rows that are all -0.0, all -inf or all NaN."""
    rng = np.random.default_rng(k)
    x = signed_zeros_nans_infs(rng, (9, k))
    x[0], x[1], x[2] = -0.0, -np.inf, np.nan
    y = x * 2.0
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(compiled.row_extrema(x), y.max(1) * 10.0 + y.min(1))
        # (a max and a min of one operand share its NaN flag: each is NaN on its own where the row has one)
        np.testing.assert_array_equal(compiled.row_extrema_nan(x), 3.0 * np.isnan(x).any(1))
        np.testing.assert_array_equal(compiled.whole_max(x[3:].ravel()), x[3:].max())
        clean = np.where(np.isnan(x[3:]), 1.0, x[3:]).ravel()
        np.testing.assert_array_equal(compiled.whole_max(clean), clean.max())
        forty = signed_zeros_nans_infs(rng, (k, 40))
        np.testing.assert_array_equal(compiled.row_extrema_40(forty), forty.max(1) * 10.0 + forty.min(1))


def later_blocks(rng, n: int, k: int) -> np.ndarray:
    """Rows whose least number first appears past the first 128 elements (codegen/fusion.py, ARG_BLOCK: a long row's
    argmin is found block by block, then only that block is swept for the position): ties of it in two later
    blocks, at block edges, -0.0 against +0.0, an infinity, all +inf, and a few NaN (the position sweep takes the
    whole row then)."""
    x = rng.integers(1, 4, size=(n, k)).astype(np.float64)
    for r in range(n):
        at = sorted(rng.choice(np.arange(128, k), size=min(2, k - 128), replace=False))
        x[r, at] = -1.0 - (r % 3)
    x[0, [127, 128, k - 1]] = -9.0  # (the first block's last element: the extremum in block 0)
    x[1, [128, min(255, k - 1)]] = -9.0  # (the first and last of a later block)
    x[2] = 1.0
    x[2, [5, k - 2]] = -0.0
    x[2, [k - 1]] = 0.0
    x[3] = np.inf
    x[4, [300 % k, 20]] = -np.inf
    x[5, [k - 1]] = np.nan
    x[6, [3, k - 2]] = np.nan
    return x


@pytest.mark.parametrize("k", [129, 256, 300])
def test_long_rows_positions_in_later_blocks_match_torch(compiled, k):
    """torch.min(x, dim).values and .indices over rows longer than one block of ARG_BLOCK elements, where the first
    least element is in a later block than the first, ties span blocks, and NaN and infinities stand in rows."""
    x = later_blocks(np.random.default_rng(k), 17, k)
    r = torch.min(torch.tensor(x), dim=1)
    np.testing.assert_array_equal(compiled.values_and_indices(x), (r.values * 10.0 + r.indices).numpy())


def test_the_position_sweep_of_a_long_row_reads_one_block(tmp_path):
    """The second sweep of an argmin over rows of 300 floats covers the block (128 elements) where the first sweep
    met the least number, or the whole row where a NaN is: the rendered loop's bounds."""
    from ksbuild.packaging.package import render
    (tmp_path / "k.py").write_text(COMPILED.replace('x: "float[n, k]") -> "float[n]":\n    r = torch.min',
                                                    'x: "float[n, 300]") -> "float[n]":\n    r = torch.min'))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "one_block"\n[build]\ndtype = "float64"\n'
                                            '[kernels]\nvalues_and_indices = { python = "k.py:values_and_indices" }\n'
                                            '[exports]\nvalues_and_indices = "values_and_indices"\n')
    render(tmp_path / "manifest.toml", tmp_path / "out", lambda s: None)
    src = (tmp_path / "out/src/one_block.cpp").read_text()
    assert re.search(r"for \(int64_t \w+ = 0; \w+ < 300; \w+ \+= 128\)", src), src
    assert re.search(r"for \(int64_t (\w+) = \((has_nan\w*) \? 0 : (\w+)\); \1 < \(\2 \|\| 300 - \3 <= 128 \? 300 : "
                     r"\3 \+ 128\); \+\+\1\)", src), src
