"""Work a derivative repeats, found again: cse (transforms/cse.py) merges equations with sub-functions whose
bodies compute the same thing (jacfwd in two argnums inlines a jvp per argnum, and each one's primal loop over the
same inputs is one loop after the pass, their two ifs of one predicate one if); simplify's row_update turns a
select of one row by a loop's counter (`torch.where(torch.arange(b) == i, new, result)`) into an update of that row
(index_set); and a product of one left operand by a right one per direction (`mk,wkn->wmn`) is one product of all
directions' columns side by side (prims/tensor.py: _batches_side_by_side; compiled: tests/tensor_kernels.py's
shared_left_product in the tensor corpus, and tests/test_passes.py's one-side products). Oracle: the reference
interpreter, before and after the pass (the same values, to the bit), and numpy; loops with different bodies stay
apart. IR only, nothing compiled (well under a second; the compiled code of all of it is GradBench's ht Jacobian,
checked against torch.autograd in tests/test_gradbench.py)."""
from __future__ import annotations

import numpy as np

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.cse import cse
from ksbuild.transforms.jacobian import jacfwd_func
from ksbuild.transforms.pipeline import PASSES, Options
from ksbuild.transforms.simplify import simplify

KERNELS = '''
import torch


def chained(a: "float[3]", b: "float[3]", m: "float[n, 3]") -> "float[3]":
    r = m[0]
    for i in range(m.shape[0]):
        r = torch.sin(r) * m[i]
    return a * r + b * r * r


def three_loops(a: "float[3]", m: "float[n, 3]") -> "float[3]":
    r = m[0]
    for i in range(m.shape[0]):
        r = torch.sin(r) * m[i]
    s = m[0]
    for i in range(m.shape[0]):
        s = torch.cos(s) * m[i]
    t = m[0]
    for j in range(m.shape[0]):
        t = torch.sin(t) * m[j]
    return a * r + s - t * a


def branchy(a: "float[3]", b: "float[4]", m: "float[4, 3]") -> "float[4]":
    if torch.sum(m) > 0.0:
        r = torch.sin(m @ a)
    else:
        r = torch.cos(m @ a) * 2.0
    return r * b


def chain(relatives: "float[b, 2, 2]", parents: "int[b]", scale: "float[2]") -> "float[b, 2, 2]":
    result = relatives * scale
    for i in range(relatives.shape[0]):
        parent = parents[i]
        chained = result[torch.clamp(parent, min=0)] @ relatives[i]
        new = torch.where(parent < 0, relatives[i], chained)
        result = torch.where((torch.arange(relatives.shape[0]) == i)[:, None, None], new, result)
    return result


def short_loop(x: "float[5, 3]", v: "float[3]") -> "float[5, 3]":
    for i in range(3):
        x = torch.where((torch.arange(5) == i)[:, None], v * x[i + 1], x)
    return x


def product(a: "float[m, 5]", b: "float[w, 5, 3]") -> "float[w, m, 3]":
    return torch.einsum("mk,wkn->wmn", a, b)
'''


def loops(f) -> int:
    return sum(e.prim.name == "loop" for e in f.eqns)


def kernel(tmp_path, name):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    return compile_python_kernel(path, name, "f64")


def test_jacfwd_in_two_argnums_runs_the_primal_loop_once(tmp_path):
    g = jacfwd_func(kernel(tmp_path, "chained"), [0, 1])
    merged = cse(g)
    verify(merged)
    assert loops(g) == 2 and loops(merged) == 1
    rng = np.random.default_rng(0)
    for n in (1, 5):  # (an odd count; one step)
        args = [rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal((n, 3))]
        for want, got in zip(eval_func(g, args), eval_func(merged, args)):
            np.testing.assert_array_equal(got, want)
        r = args[2][0]
        for row in args[2]:
            r = np.sin(r) * row
        np.testing.assert_allclose(eval_func(merged, args)[0], np.diag(r), rtol=1e-14)  # d out / d a


def test_loops_with_other_bodies_stay_apart(tmp_path):
    f = kernel(tmp_path, "three_loops")
    merged = cse(f)
    assert loops(f) == 3 and loops(merged) == 2  # the sin loop written twice (other names) is one; the cos loop stays
    args = [np.array([0.5, -1.0, 2.0]), np.random.default_rng(1).standard_normal((4, 3))]
    np.testing.assert_array_equal(eval_func(merged, args)[0], eval_func(f, args)[0])


def conds(f) -> int:
    return sum(e.prim.name == "cond" for e in f.eqns)


def test_jacfwd_in_two_argnums_takes_the_branch_once(tmp_path):
    g = jacfwd_func(kernel(tmp_path, "branchy"), [0, 1])
    merged = cse(g)
    verify(merged)
    assert conds(g) == 2 and conds(merged) == 1
    (joined,) = [e for e in merged.eqns if e.prim.name == "cond"]
    for branch in ("then_fn", "else_fn"):  # m @ a once in each branch, for the primal and the tangent alike
        assert sum(e.prim.name == "einsum" and e.ins[1].type.shape == (3,) for e in joined.params[branch].eqns) == 1
    rng = np.random.default_rng(2)
    for sign in (1.0, -1.0):  # both branches
        args = [rng.standard_normal(3), rng.standard_normal(4), sign * np.abs(rng.standard_normal((4, 3)))]
        want = eval_func(g, args)
        for w, got in zip(want, eval_func(merged, args)):
            np.testing.assert_array_equal(got, w)
        a, b, m = args
        r = np.sin(m @ a) if sign > 0 else 2.0 * np.cos(m @ a)
        np.testing.assert_allclose(want[1], np.diag(r), rtol=1e-14)  # d out / d b


def prims_in_loops(f) -> list[str]:
    return [e.prim.name for g in f.eqns if g.prim.name == "loop" for e in g.params["body"].eqns]


def test_a_row_selected_by_the_counter_is_updated(tmp_path):
    f = kernel(tmp_path, "chain")
    g = jacfwd_func(f, [0, 2])  # the tangents' carry [b, 2, 2, b, 2, 2] and [b, 2, 2, 2]: other axes, same rule
    rng = np.random.default_rng(3)
    for func in (f, g):
        s = simplify(func)
        verify(s)
        body = prims_in_loops(s)
        assert "index_set" in body and "iota" not in body, body
        for b in (1, 5):  # (odd; one bone)
            parents = np.array([-1] + [int(rng.integers(0, k)) for k in range(1, b)], dtype=np.int64)
            args = [rng.standard_normal((b, 2, 2)), parents, rng.standard_normal(2)]
            for want, got in zip(eval_func(func, args), eval_func(s, args)):
                np.testing.assert_array_equal(got, want)
    rel, parents, scale = args
    want = rel * scale
    for i in range(5):
        want[i] = rel[i] if parents[i] < 0 else want[parents[i]] @ rel[i]
    np.testing.assert_allclose(eval_func(simplify(f), args)[0], want, rtol=1e-14)


def test_a_mask_longer_than_the_loop_stays_a_select(tmp_path):
    f = kernel(tmp_path, "short_loop")
    s = simplify(f)
    assert "index_set" not in str([e.prim.name for e in s.eqns]) + str(prims_in_loops(s))
    args = [np.random.default_rng(4).standard_normal((5, 3)), np.array([1.0, -2.0, 0.5])]
    np.testing.assert_array_equal(eval_func(s, args)[0], eval_func(f, args)[0])


def test_directions_side_by_side_are_one_product(tmp_path):
    f = kernel(tmp_path, "product")
    lowered = f
    for p in PASSES[:[p.name for p in PASSES].index("select_backend") + 1]:
        lowered = p.run(lowered, Options())
    verify(lowered)
    products = [e.params["spec"] for e in lowered.eqns if e.prim.name == "contract"]
    assert products == ["mk,kn->mn"], products
    rng = np.random.default_rng(5)
    for m, w in ((1, 1), (7, 3)):
        args = [rng.standard_normal((m, 5)), rng.standard_normal((w, 5, 3))]
        np.testing.assert_allclose(eval_func(lowered, args)[0], np.einsum("mk,wkn->wmn", *args), rtol=1e-14)
