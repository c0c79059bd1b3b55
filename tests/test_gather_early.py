"""The gather_early pass (transforms/gather_early.py) against the reference interpreter: each kernel's IR
straight from the frontend or a transformation (nothing else run), before and after the pass, at sizes where
the gather reads fewer positions than there are and more (both branches of the runtime choice); and the cases
it must leave alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.core import Func
from ksbuild.ir.interp import eval_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.expand import expand
from ksbuild.transforms.gather_early import gather_early
from ksbuild.transforms.jacobian import jacfwd_func
from ksbuild.transforms.rewrite import walk_funcs
from ksbuild.transforms.vjp import vjp_func

KERNELS = '''
import torch


def rows_of_product(x: "float[n, d]", w: "float[d, k]", b: "float[k]", idx: "int[c]") -> "float[c, k]":
    return torch.tanh(x @ w + b)[idx]


def columns(x: "float[n, d]", w: "float[d, k]", idx: "int[c]") -> "float[n, c]":
    return torch.exp(x @ w)[:, idx]


def two_axis_index(x: "float[n, d]", s: "float[n]", idx: "int[c, 3]") -> "float[c, 3, d]":
    return (x * s.unsqueeze(1) - 1.0)[idx]


def across_rows(x: "float[n, d]", idx: "int[c]") -> "float[c, d]":
    return (x - torch.mean(x, 0))[idx]


def positions(x: "float[n]", idx: "int[c]") -> "float[c]":
    return (x * torch.arange(x.shape[0]))[idx]


def chained(x: "float[n, d]", w: "float[d, d]", idx: "int[c]") -> "float[c]":
    h = torch.tanh(x @ w)
    return torch.sum((h @ w.T * x).transpose(0, 1), 0)[idx]


def _pose(x, w):
    return torch.tanh(x @ w) * 2.0


def through_a_helper(x: "float[n, d]", w: "float[d, d]", idx: "int[c]") -> "float[c, d]":
    return _pose(x, w)[idx] + 1.0


def fewer_than_rows(x: "float[50, 3]", w: "float[3, 3]", idx: "int[10]") -> "float[10, 3]":
    return torch.sin(x @ w)[idx]


def shared(x: "float[n, d]", w: "float[d, k]", idx: "int[c]") -> "float[c, k]":
    y = x @ w
    return y[idx] + torch.sum(y)


def cumulative(x: "float[n, d]", idx: "int[c]") -> "float[c, d]":
    return torch.cumsum(x, 0)[idx]


def more_than_rows(x: "float[4, 3]", w: "float[3, 3]", idx: "int[10]") -> "float[10, 3]":
    return torch.sin(x @ w)[idx]


def permuted(x: "float[n, d]", w: "float[d, d]", perm: "int[n]") -> "float[n, d]":
    return torch.sin(x @ w)[perm]


def only_a_view(x: "float[n, 6]", idx: "int[c]") -> "float[c, 2, 3]":
    return x.reshape(x.shape[0], 2, 3)[idx]
'''
NARROWED = ("rows_of_product", "columns", "two_axis_index", "across_rows", "positions", "chained",
            "through_a_helper")
LEFT_ALONE = ("shared", "cumulative", "more_than_rows", "permuted", "only_a_view")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gather_early") / "k.py"
    path.write_text(KERNELS)
    return path


def arguments(f: Func, n: int, c: int, rows: int, rng) -> list:
    """Random arguments: dims n and c as given, every other symbolic dim 5; indices in [-rows, rows)."""
    sizes = {"n": n, "c": c}
    args = []
    for p in f.params:
        shape = [d if isinstance(d, int) else sizes.get(d, 5) for d in p.type.shape]
        args.append(rng.integers(-rows, rows, size=shape) if p.type.is_int else rng.standard_normal(shape))
    return args


def check_values(f: Func, n: int, c: int) -> Func:
    """gather_early(f) verified and equal to f in the interpreter at n rows, c positions; returns it."""
    g = gather_early(f)
    verify(g)
    rows = 5 if f.name.startswith("columns") else n
    args = arguments(f, n, c, rows, np.random.default_rng(n * 100 + c))
    for want, got in zip(eval_func(f, args), eval_func(g, args)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    return g


def kernel(source: Path, name: str) -> Func:
    return compile_python_kernel(source, name, "f64")


def row_sized(f: Func, rows) -> list[str]:
    """The equations (outside a cond's else branch, the original work) whose result has `rows` along an axis
    and that do work (not views or gathers)."""
    found = []
    for g in walk_funcs(f):
        if g.name == "else_fn":
            continue
        for e in g.eqns:
            if e.prim.view or e.prim.name in ("gather", "cond") or not e.outs:
                continue
            if any(rows in v.type.shape for v in e.outs):
                found.append(e.prim.name)
    return found


@pytest.mark.parametrize("name", NARROWED)
@pytest.mark.parametrize("n, c", [(9, 4), (3, 7), (6, 6)], ids=["fewer", "more", "as_many"])
def test_values_of_the_narrowed_kernel(source, name, n, c):
    """The same values as before the pass, whichever branch the sizes choose."""
    check_values(kernel(source, name), n, c)


@pytest.mark.parametrize("name", NARROWED)
def test_jacfwd_and_vjp_values(source, name):
    """Derivatives narrowed after their transformation keep their values (the ht pattern: jacfwd's tangents)."""
    f = kernel(source, name)
    for g in (jacfwd_func(f, argnums=[0]), vjp_func(f)):
        for n, c in ((9, 4), (3, 7)):
            check_values(g, n, c)


@pytest.mark.parametrize("name", NARROWED)
def test_the_work_is_narrowed(source, name):
    """No equation doing work keeps the full row count, except in the branch used when rows are fewer."""
    f = kernel(source, name)
    rows = "k" if name == "columns" else "n"
    assert row_sized(f, rows), "the kernel had no row-wise work to narrow"
    assert row_sized(gather_early(f), rows) in ([], ["reduce_sum"], ["iota"]), row_sized(gather_early(f), rows)


def test_literal_sizes_are_narrowed_without_a_branch(source):
    f = kernel(source, "fewer_than_rows")
    g = check_values(f, 50, 10)
    assert not [e for e in g.eqns if e.prim.name == "cond"]
    assert row_sized(g, 50) == [], row_sized(g, 50)


@pytest.mark.parametrize("name", LEFT_ALONE)
def test_left_alone(source, name):
    """A result also read elsewhere, a cumulative sum (a row depends on the rows before it), a gather of more
    positions than there are, or of as many (n of n: no `n < n` branch, which g++ -Werror refuses), a gather of
    a view: the pass returns the function unchanged."""
    f = kernel(source, name)
    assert gather_early(f) is f


@pytest.mark.parametrize("name", ["simple_error", "complicated_error"])
def test_ht_skins_only_the_corresponded_vertices(name):
    """GradBench's ht: the objective and its jacfwd in theta (26 directions) skin the corresponded vertices
    only, not all V (outside the branch taken when they are not fewer); the posing is a helper function (a
    call with tensors, opened)."""
    ht = Path(__file__).resolve().parent.parent / "benchmarks" / "gradbench" / "ht.py"
    f = kernel(ht, name)
    for g in (f, jacfwd_func(f, argnums=[0, 1] if name == "complicated_error" else [0])):
        assert row_sized(g, "V") or any(e.prim.name == "call" for e in g.eqns)
        # (expand first, as the pipeline does: jvp's tangent products are ctmuls and cteinsums until then)
        assert row_sized(gather_early(expand(g)), "V") == []


@pytest.mark.parametrize("n, c, narrowed", [(9, 4, True), (3, 7, False), (6, 6, False)])
def test_the_branch_is_the_narrowed_one_when_fewer_positions_are_read(source, n, c, narrowed):
    """With symbolic sizes the cond runs the narrowed work (then_fn) exactly when c < n."""
    g = gather_early(kernel(source, "rows_of_product"))
    k = next(i for i, e in enumerate(g.eqns) if e.prim.name == "cond")
    predicate = Func("p", g.params, g.eqns[:k], (g.eqns[k].ins[0],))
    args = arguments(g, n, c, n, np.random.default_rng(0))
    assert bool(eval_func(predicate, args)[0]) is narrowed
