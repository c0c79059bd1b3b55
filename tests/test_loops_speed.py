"""Loop-style kernels (scalar reads in nested for-loops, as benchmarks/loops/kernels.py): properties of the IR the
passes leave, which keep their compiled code close to hand-written C++ loops, and their values and gradients,
compiled, against the same source run by torch (torch.autograd)."""
from __future__ import annotations

import numpy as np
import pytest

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.printer import print_func
from ksbuild.prims.base import form_name
from ksbuild.transforms.pipeline import PASSES, Options
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.vjp import vjp_func

torch = pytest.importorskip("torch")

KERNELS = '''
import torch


def gathered_rows(cams: "float[C, 4]", w: "float[M]", index: "int[M]") -> float:
    total = 0.0
    for j in range(w.shape[0]):
        c = index[j]
        total = total + w[j] * cams[c, 1] * torch.sin(cams[c, 3]) + cams[c, 1] ** 2
    return total


def mixture(a: "float[K, d]", x: "float[n, d]") -> float:
    total = 0.0
    for i in range(x.shape[0]):
        for k in range(a.shape[0]):
            s = 0.0
            for r in range(x.shape[1]):
                s = s + torch.exp(a[k, r]) * x[i, r] + torch.sin(a[k, 0])
            total = total + torch.log(1.0 + s * s)
    return total


def sincos(x: "float[M]", w: "float[M]") -> float:
    total = 0.0
    for j in range(x.shape[0]):
        s = torch.sin(x[j])
        c = torch.cos(x[j])
        total = total + w[j] * s * c + w[j] * s * s
    return total
'''
MANIFEST = ('[package]\nname = "loopspeed"\n\n[build]\ndtype = "float64"\n\n[kernels]\n'
            'gathered_rows = { python = "k.py:gathered_rows" }\n'
            'mixture = { python = "k.py:mixture" }\nsincos = { python = "k.py:sincos" }\n\n[exports]\n'
            'gathered_rows = "gathered_rows"\ngathered_rows_grad = "grad(gathered_rows, argnums=(0, 1))"\n'
            'mixture = "mixture"\nmixture_grad = "grad(mixture, argnums=(0, 1))"\n'
            'sincos_grad = "grad(sincos, argnums=(0, 1))"\n')


def planned(tmp_path, name: str, argnums):
    """grad's vjp of kernel `name` of KERNELS through every pass (plain backend)."""
    src = tmp_path / "loop_kernels.py"
    src.write_text(KERNELS)
    f = vjp_func(compile_python_kernel(src, name, "f64"), argnums=argnums)
    for p in PASSES:
        f = p.run(f, Options(backend="plain"))
    return f


def test_element_reads_add_at_their_elements(tmp_path):
    """The transpose of cams[c, k] (a row read, then its element) adds the cotangent at cams[c, k] itself:
    no row of zeros with the element set, added whole at row c, for each read in every iteration
    (simplify's nest_updates; BA's gradient did 14 of those per observation, J/F 5.1 -> 2.1)."""
    f = planned(tmp_path, "gathered_rows", (0, 1))
    updates = [e for g in walk_funcs(f) for e in g.eqns if e.prim.name == "index_add"]
    assert updates, print_func(f)
    assert all(e.ins[-1].type.rank == 0 for e in updates), print_func(f)


def _costly_in(f) -> list[str]:
    return [form_name(e.prim, e.params) for g in walk_funcs(f) for e in g.eqns if e.prim.costly]  # (math's: log, exp)


@pytest.mark.parametrize("grad", [False, True])
def test_invariant_calls_leave_the_loop(tmp_path, grad):
    """exp(a[k, r]) and sin(a[k, 0]) inside `for i: for k: for r:` do not change with i: the hoist pass computes
    them once, into a [K, d] and a [K] table before the loop over i (K·d exps, not n·K·d), in the objective
    and in its gradient's forward pass; only log, which reads x[i], stays in that loop."""
    src = tmp_path / "loop_kernels.py"
    src.write_text(KERNELS)
    f = compile_python_kernel(src, "mixture", "f64")
    f = vjp_func(f, argnums=(0, 1)) if grad else f
    for p in PASSES:
        f = p.run(f, Options(backend="plain"))
    loops = [e for e in f.eqns if e.prim.name == "loop"]
    over_n = [e for e in loops if e.params["length"] == "n"]
    assert over_n and not [c for e in over_n[:1] for c in _costly_in(e.params["body"]) if c != "log"], print_func(f)
    tables = {e.outs[0]: e.outs[0].type.shape for e in loops if e.params["body"].name == "hoisted_table"}
    assert set(tables.values()) == {("K", "d"), ("K",)}, print_func(f)
    if grad:  # the forward pass's exp values reach the reverse loop as the table seen n times (simplify's
        # invariant_stacks), not as an [n, K, d] residual the forward loop writes
        spread = [e for e in f.eqns if e.prim.name == "broadcast_to" and e.ins[0] in tables]
        assert [e.outs[0].type.shape for e in spread] == [("n", "K", "d")], print_func(f)


def test_a_residual_is_stacked_once(tmp_path):
    """sin's derivative is cos x, which the kernel computes too: after cse the forward loop's body gave that one
    value as two stacked residuals (and sin x as two), each written every iteration; repeated_stacks keeps one."""
    f = planned(tmp_path, "sincos", (0, 1))
    for e in (e for g in walk_funcs(f) for e in g.eqns if e.prim.name == "loop"):
        ys = e.params["body"].results[e.params["n_carry"]:]
        assert len({id(y) for y in ys}) == len(ys), print_func(f)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from conftest import build_kernel_file
    return build_kernel_file(tmp_path_factory.mktemp("loopspeed"), KERNELS, MANIFEST, "loop_kernels")


def test_mixture_matches_torch(built):
    """Value and gradient of the kernel with hoisted tables, compiled, against torch.autograd."""
    pkg, source = built
    rng = np.random.default_rng(6)
    a, x = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((5, 4))
    ta, tx = (torch.tensor(v, requires_grad=True) for v in (a, x))
    out = source.mixture(ta, tx)
    np.testing.assert_allclose(pkg.mixture(a, x), out.item(), rtol=1e-12)
    out.backward()
    for g, t in zip(pkg.mixture_grad(a, x), (ta, tx)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_sincos_grad_matches_torch(built):
    """The gradient whose residuals are stacked once, compiled, against torch.autograd."""
    pkg, source = built
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(9), rng.standard_normal(9)
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (x, w))
    source.sincos(tx, tw).backward()
    for g, t in zip(pkg.sincos_grad(x, w), (tx, tw)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_gathered_rows_match_torch(built):
    """Value and gradient, compiled, against torch.autograd, with repeated and out-of-order rows."""
    pkg, source = built
    rng = np.random.default_rng(5)
    cams, w, index = rng.standard_normal((3, 4)), rng.standard_normal(7), np.array([2, 0, 2, 1, 2, 0, 0])
    tc, tw = (torch.tensor(a, requires_grad=True) for a in (cams, w))
    out = source.gathered_rows(tc, tw, torch.tensor(index))
    np.testing.assert_allclose(pkg.gathered_rows(cams, w, index), out.item(), rtol=1e-12)
    out.backward()
    got = pkg.gathered_rows_grad(cams, w, index)
    for g, t in zip(got, (tc, tw)):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-11, atol=1e-12)
