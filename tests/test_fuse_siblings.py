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
from ksbuild.transforms.expand import expand
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


def reads_sum(x: "float[m]", t: "float[n]") -> "float[m]":
    c = t * 1.0
    out = 0.0 * x
    for j in range(x.shape[0]):
        s = torch.sum(c)
        c = c * t + s
        out = out + s * x
    return out


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
    f = simplify(expand(grad_func(compile_python_kernel(source, "horner", "f64"), argnums=(0,))))
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


REDUCED_READ = '''
import torch


def reads_sum(x: "float[m]", t: "float[n]") -> "float[m]":
    c = t * 1.0
    out = 0.0 * x
    for j in range(x.shape[0]):
        s = torch.sum(c)
        c = c * t + s
        out = out + s * x
    return out
'''


def _carry_fusion(done):
    loop = next(e for e in done.eqns if e.prim.name == "loop")
    return [e for e in loop.params["body"].eqns if e.prim.name == "fusion"]


def test_reverse_loop_updates_its_carry_in_place(source):
    """The fused Σ y and y · t write y · t over y (plan_memory: each element is read in the iteration that writes
    it): no copy of the carry per iteration. Values checked compiled below."""
    from ksbuild.transforms.pipeline import lower

    f = grad_func(compile_python_kernel(source, "horner", "f64"), argnums=(0,))
    done = lower(f)
    loop = [e for e in done.eqns if e.prim.name == "loop"][-1]
    (fusion,) = [e for e in loop.params["body"].eqns if e.prim.name == "fusion"]
    carry = next(v for v in fusion.outs if v.type.rank)
    assert done.plan.places[carry].kind == "reuse"


def test_a_sum_read_inside_the_fusion_keeps_its_operand(tmp_path):
    """c · t + Σ c needs all of c before it writes the first element: not in place."""
    from ksbuild.transforms.pipeline import lower

    (tmp_path / "r.py").write_text(REDUCED_READ)
    f = compile_python_kernel(tmp_path / "r.py", "reads_sum", "f64")
    done = lower(f)
    for e in _carry_fusion(done):
        for v in e.outs:
            if v.type.rank and v in done.plan.places:
                assert done.plan.places[v].kind != "reuse" or not any(
                    q.prim.reduction for q in e.params["body"].eqns)
    args = [np.linspace(-1.0, 1.0, 4), np.linspace(-0.5, 0.7, 33)]
    np.testing.assert_allclose(eval_func(done, args)[0], eval_func(f, args)[0], rtol=1e-13)


@pytest.mark.parametrize("n", [9, 1000])
def test_horner_gradient_compiled_matches_torch(tmp_path_factory, n):
    import torch
    from source_kernels import build_source

    pkg = build_source(tmp_path_factory, KERNELS, "siblings", {"horner_grad": "grad(horner, argnums=(0,))",
                                                               "reads_sum": "reads_sum"})
    rng = np.random.default_rng(n)
    x, t = rng.standard_normal(7), np.linspace(-1.0, 1.0, n)
    tx = torch.tensor(x, requires_grad=True)
    poly = 0.0 * torch.tensor(t)
    for j in range(6, -1, -1):
        poly = poly * torch.tensor(t) + tx[j]
    (0.5 * torch.sum((torch.sign(torch.tensor(t)) - poly) ** 2)).backward()
    np.testing.assert_allclose(pkg.horner_grad(x, t), tx.grad.numpy(), rtol=1e-12)
    c, out = t.copy(), 0.0 * x
    for _ in range(len(x)):
        s = c.sum()
        c = c * t + s
        out = out + s * x
    np.testing.assert_allclose(pkg.reads_sum(x, t), out, rtol=1e-12)


def test_a_carry_read_only_by_a_sum_is_not_overwritten():
    """codegen/fusion.py emits a fusion's reductions after its stores: a body that sums the old carry and makes the
    new one without loading the old would read overwritten elements, so plan_memory keeps the buffers apart."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    from ksbuild.transforms.plan_memory import _read_in_place

    t = Type("f64", ("n",))
    for loads_first, want in ((False, False), (True, True)):
        b = Builder()
        p, q = Var(t, "p"), Var(t, "q")
        total = b.reduce_sum(p, axes=(0,))  # (first in the body, emitted last)
        new = b.mul(p if loads_first else q, q)
        body = b.func("fused", [p, q], [new, total])
        assert _read_in_place(body, p, 0) is want
