"""Loops whose count is computed at run time but bounded by a dim (issue 11, item 2).

`for c in range(r)` inside `for r in range(d)`, `range(i + 1)`, `range(k, n)`, ...: the frontend
gives the loop the bound as its `length` (rows past the count are zero), so reverse mode stores
each iteration's values in the workspace and runs in linear time instead of recomputing every
state from the start (quadratic). Checked: the bounds the frontend finds; the IR semantics (text
form, verifier, interpreter zero rows); vjp against torch.autograd in the interpreter and
compiled; that no gradient recomputes (every loop of the gradient has a length); the loop-style
GMM forms of examples/gmm against torch.autograd. Their J/F is measured in benchmarks/ (not
timed here): benchmarks/gmm/bench.py --kernel gmm_tri.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.core import Func
from ksbuild.ir.interp import eval_func
from ksbuild.ir.parser import parse_func
from ksbuild.ir.printer import print_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.vjp import vjp_func
from ksbuild.transforms.vmap import vmap_func

ROOT = Path(__file__).resolve().parent.parent

SOURCE = '''\
import torch


def tri(x: "float[d]", L: "float[d, d]") -> float:
    """sum over rows r of (exp(x_r) + sum_{c<r} L[r, c] x_c)^2: the triangular product of GMM."""
    d = x.shape[0]
    s = 0.0
    for r in range(d):
        row = torch.exp(x[r]) + sum(L[r, c] * x[c] for c in range(r))
        s = s + row * row
    return s


def upper(x: "float[n]") -> float:
    """counts i + 1 and n - k, and a loop whose count is the index of a loop two levels out."""
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        p = 1.0
        for j in range(i + 1):
            p = p * torch.cos(x[j]) + 0.1 * x[i]
        for k in range(i, n):
            s = s + p * torch.sin(x[k])
        for m in range(2):
            for c in range(i):
                s = s + 0.01 * x[c] * x[m]
    return s


def stepped(x: "float[n]") -> float:
    """steps of 2 and -1, and a count read inside an if."""
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        for j in range(i, n, 2):
            s = s + x[j] * x[i]
        for j in range(i, -1, -1):
            s = s + torch.tanh(x[j] - s * 0.01)
        if x[i] > 0.0:
            for c in range(i):
                s = s + x[c] * x[c] * x[i]
    return s


def tri_tensor(x: "float[d, m]", W: "float[d, d]") -> "float[m]":
    """bounded loops carrying a tensor, with a tensor result."""
    d = x.shape[0]
    acc = 0.0 * x[0]
    for r in range(d):
        row = torch.exp(x[r])
        for c in range(r):
            row = row + W[r, c] * torch.sin(x[c])
        acc = acc + row * row
    return acc
'''

CASES = {
    "tri": lambda r: (r.standard_normal(5) * 0.5, r.standard_normal((5, 5))),
    "upper": lambda r: (r.standard_normal(6),),
    "stepped": lambda r: (r.standard_normal(7),),
    "tri_tensor": lambda r: (r.standard_normal((4, 3)) * 0.5, r.standard_normal((4, 4))),
}
PY: dict = {}
exec(compile(SOURCE, "bounded_kernels.py", "exec", dont_inherit=True), PY)


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "bounded_kernels")


def loops(f: Func):
    """Every loop equation of f, nested ones included."""
    for e in f.eqns:
        if e.prim.name == "loop":
            yield e
        for sub in (v for v in e.params.values() if isinstance(v, Func)):
            yield from loops(sub)


def torch_grads(name: str, args: tuple, ct) -> list[np.ndarray]:
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    out = PY[name](*leaves)
    grads = torch.autograd.grad(out, leaves, torch.as_tensor(ct, dtype=torch.float64), allow_unused=True)
    return [np.zeros_like(a) if g is None else g.numpy() for a, g in zip(args, grads)]


def cotangent(name: str, args: tuple):
    shape = tuple(PY[name](*[torch.tensor(a) for a in args]).shape)
    return np.random.default_rng(1).standard_normal(shape) if shape else 0.7


# ---- the frontend's bounds ---------------------------------------------------------------------


def test_bounds_found(ir):
    """Each runtime count gets the bound a reader would give it (a dim, or a dim + 1)."""
    lengths = sorted(str(e.params["length"]) for e in loops(ir("upper")))
    # range(n); range(i + 1), range(i, n): n; range(2); range(i) (i < n, d - 1 is not visibly >= 0): n
    assert lengths == sorted(["n", "n", "n", "2", "n"])
    lengths = sorted(str(e.params["length"]) for e in loops(ir("stepped")))
    # range(n); range(i, n, 2): (n + 1) // 2; range(i, -1, -1): n; range(i) inside an if: n
    assert lengths == sorted(["n", "((n + 1) // (2))", "n", "n"])
    assert all(e.params["length"] is not None for e in loops(ir("tri")))


def test_runtime_count_without_bound_stays_dynamic(tmp_path):
    """An int argument has no bound: the loop keeps length None (the recomputing reverse mode)."""
    path = tmp_path / "k.py"
    path.write_text("def f(x: float, n: int) -> float:\n    s = x\n    for i in range(n):\n        s = s * x\n"
                    "    return s\n")
    (loop,) = loops(compile_python_kernel(path, "f", "f64"))
    assert loop.params["length"] is None


def test_comprehension_over_bounded_count_is_an_error(tmp_path):
    """torch.stack needs its exact size: a count that is only bounded is still rejected."""
    path = tmp_path / "k.py"
    path.write_text('import torch\n\n\ndef f(x: "float[n]") -> float:\n    s = 0.0\n    for r in range(x.shape[0]):\n'
                    "        s = s + torch.stack([x[c] for c in range(r)]).sum()\n    return s\n")
    with pytest.raises(KsbuildError, match="comprehension needs a length known"):
        compile_python_kernel(path, "f", "f64")


# ---- IR semantics --------------------------------------------------------------------------------

BOUNDED_TEXT = """\
func rows(%x: f64[n], %m: i64) -> (f64[n]) {
  %y: f64[n] = loop[length='n', n_carry=0, n_consts=1, reverse=False](%m, %x)
    body = func body(%k: i64, %xs: f64[n]) -> (f64) {
      %v: f64 = index[axis=0](%xs, %k)
      %w: f64 = add(%v, 1.0: f64)
      return %w
    }
  return %y
}
"""


def test_bounded_loop_text_verify_and_zero_rows():
    """A loop running m < n times with length n: the text form round-trips, the verifier accepts
    it, and the interpreter gives rows m..n-1 of its stacked results as zeros."""
    f = parse_func(BOUNDED_TEXT)
    verify(f)
    assert print_func(parse_func(print_func(f))) == print_func(f)
    x = np.arange(5.0)
    np.testing.assert_array_equal(eval_func(f, [x, 3])[0], [1.0, 2.0, 3.0, 0.0, 0.0])
    np.testing.assert_array_equal(eval_func(f, [x, 5])[0], x + 1.0)
    with pytest.raises(KsbuildError, match="runs 6 times but its length"):
        eval_func(f, [x, 6])


# ---- reverse mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_vjp_matches_torch(name, ir):
    args = CASES[name](np.random.default_rng(0))
    ct = cotangent(name, args)
    got = eval_func(vjp_func(ir(name)), [*args, ct])
    for g, w in zip(got, torch_grads(name, args, ct)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", CASES)
def test_gradient_stores_instead_of_recomputing(name, ir):
    """Reverse mode through a loop without a length reruns the loop from the start at every step
    (a nested loop with length None); here every loop of the gradient has a length."""
    assert all(e.params["length"] is not None for e in loops(vjp_func(ir(name))))


def test_gradient_of_tri_is_linear_time_by_construction(ir):
    """What makes the triangular loop's gradient linear in practice (by the IR, not by a clock):
    the row L[r] is hoisted out of the loop over c (the inner loop reads a row, not L); after the
    pipeline the inner forward loop stores nothing per iteration (its residuals are recomputed);
    and no reverse loop adds whole tensors per iteration (gradients accumulate through the nested
    loops instead of being zeroed and added on every outer iteration)."""
    from ksbuild.transforms.pipeline import lower

    _, inner = loops(ir("tri"))  # the loop over r, then the loop over c inside it
    assert [str(a.type) for a in inner.ins[1:1 + inner.params["n_consts"]]].count("f64[d, d]") == 0
    g = lower(vjp_func(ir("tri")))
    forward = [e for e in loops(g) if not e.params["reverse"]]
    stacking = [e for e in forward if len(e.outs) > e.params["n_carry"]]
    # the loop over r stacks its residuals; the sum over c stores nothing per iteration, as one loop inside it or
    # (transforms/triangles.py, in the branch for 8 rows or more) as the loops over columns and rows before it
    assert stacking
    assert not [x for e in stacking for x in loops(e.params["body"]) if len(x.outs) > x.params["n_carry"]]
    for e in loops(g):
        if e.params["reverse"]:
            assert not [x for x in e.params["body"].eqns if x.prim.name == "add" and x.outs[0].type.rank], \
                "a reverse loop adds whole tensors per iteration"


def test_vmap_of_vjp_through_bounded_loops(ir):
    """Bounded loops under vmap (the count is the same in every lane): a loop of per-lane vjps."""
    f = vjp_func(ir("tri"))
    rng = np.random.default_rng(2)
    lanes = [(*CASES["tri"](rng), 1.0) for _ in range(3)]
    vf = vmap_func(f, [True, True, False], "b", [True] * len(f.results))[0]
    got = eval_func(vf, [np.stack([p[0] for p in lanes]), np.stack([p[1] for p in lanes]), 1.0])
    for j, g in enumerate(got):
        np.testing.assert_allclose(g, np.stack([torch_grads("tri", p[:2], 1.0)[j] for p in lanes]), rtol=1e-10)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    exports = {n: n for n in CASES} | {f"{n}_vjp": f"vjp({n})" for n in CASES}
    return build_source(tmp_path_factory, SOURCE, "bounded", exports)


@pytest.mark.parametrize("name", CASES)
def test_compiled_matches_torch(name, pkg):
    for seed in range(3):
        args = CASES[name](np.random.default_rng(10 + seed))
        want = PY[name](*[torch.tensor(a) for a in args]).numpy()
        np.testing.assert_allclose(getattr(pkg, name)(*args), want, rtol=1e-12, atol=1e-12)
        ct = cotangent(name, args)
        got = getattr(pkg, f"{name}_vjp")(*args, ct)
        got = list(got) if isinstance(got, tuple) else [got]
        for g, w in zip(got, torch_grads(name, args, ct)):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=name)


def test_workspace_grows_with_the_bound(pkg):
    """The gradient's stacks are sized by the bound: its workspace grows with d, it is not zero."""
    export = pkg.tri_vjp
    sizes = [export.ws_fn(d) for d in (4, 8)]
    assert 0 < sizes[0] < sizes[1]


# ---- the loop-style GMM ------------------------------------------------------------------------------


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem + "_bounded", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("form", ["gmm_tri", "gmm_tri_vec"])
@pytest.mark.parametrize("d, K, n", [(2, 3, 5), (5, 4, 7)])
def test_loop_style_gmm_matches_torch_autograd(form, d, K, n):
    """examples/gmm's loop-style forms (triangular inner sums) against torch.autograd in float64."""
    ref = load(ROOT / "examples/gmm/reference.py")
    pkg = ksbuild.build(ROOT / "examples/gmm/manifest.toml")
    data = ref.make_data(d, K, n)
    args = tuple(data[k] for k in ("alphas", "means", "icf", "x", "gamma", "m"))
    want_value, *want = ref.gmm_grad_torch(data)
    assert ref.rel_error(np.array(getattr(pkg, form)(*args)), np.array(want_value)) < 1e-10
    for g, w in zip(getattr(pkg, f"{form}_grad")(*args), want):
        assert ref.rel_error(g, w) < 1e-10


def test_loop_style_gmm_source_runs_under_torch():
    """The same source is plain PyTorch: it runs as is and agrees with the numpy reference."""
    ref = load(ROOT / "examples/gmm/reference.py")
    src = load(ROOT / "examples/gmm/gmm.py")
    data = ref.make_data(3, 2, 4)
    args = [torch.tensor(data[k]) for k in ("alphas", "means", "icf", "x")]
    want = ref.gmm_objective_numpy(*[data[k] for k in ("alphas", "means", "icf", "x")], data["gamma"], data["m"])
    for fn in (src.gmm_objective_tri, src.gmm_objective_tri_vec):
        assert float(fn(*args, data["gamma"], data["m"])) == pytest.approx(want, rel=1e-12)
