"""The fuse pass's sibling rule (transforms/fuse.py, sink): an elementwise equation that reads a reduction's
operand, whose result is stored anyway, joins the reduction's loop. The reverse pass of llsq's Horner loop
reads its cotangent y for Σ y and for y · t: one loop over y per iteration, not two. Values checked with the
reference interpreter against the unfused function."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.fuse import fuse
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.simplify import simplify
from ksbuild.transforms.vjp import grad_func

KERNELS = '''
import torch


def horner(x: "float[m]", t: "float[n]") -> float:
    poly = 0.0 * t
    for j in range(x.shape[0] - 1, -1, -1):
        poly = poly * t + x[j]
    r = torch.sign(t) - poly
    return 0.5 * torch.sum(r * r)


def recomputed(x: "float[n, d]") -> "float[n]":
    y = torch.sum(x, 1).unsqueeze(1)
    return torch.sum(torch.sin(torch.where(y > 0.0, x * 0.5, x * x)), 1)
'''


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fuse_siblings") / "k.py"
    path.write_text(KERNELS)
    return path


def fusions(f) -> list[list[str]]:
    """The prim names in each fusion body."""
    return [[q.prim.name for q in e.params["body"].eqns] for g in walk_funcs(f) for e in g.eqns
            if e.prim.name == "fusion"]


def test_reverse_loop_reads_its_cotangent_once(source):
    """grad(horner)'s reverse loop has one fusion with the sum and the product; the values are unchanged."""
    f = simplify(grad_func(compile_python_kernel(source, "horner", "f64"), argnums=(0,)))
    g = fuse(f)
    assert ["mul", "reduce_sum"] in fusions(g)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(5), np.linspace(-1.0, 1.0, 9)]
    np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-14)


def test_values_a_later_loop_recomputes_stay_there(source):
    """x / 2 and x², read only by the later loop that needs Σ x first, are not pulled into the loop of Σ x:
    no fusion stores an [n, d] value."""
    g = fuse(simplify(compile_python_kernel(source, "recomputed", "f64")))
    stored = [v.type for e in g.eqns if e.prim.name == "fusion" for v in e.outs]
    assert stored and all(t.shape != ("n", "d") for t in stored)
