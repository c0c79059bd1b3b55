"""Derivatives through a per-lane `if` never see the branch a lane does not take (issue 11, item 1).

Under vmap an `if` whose condition differs between lanes runs both branches on every lane and
selects. Where a lane does not take a branch, that branch's derivative may be inf or nan
(d sqrt(x) at x = 0, d log(x) at 0, d (w / x) at 0, Rodrigues' rot / theta at theta = 0); reverse
mode used to multiply it by the zero cotangent the select gives the untaken side (inf * 0 = nan)
and return nan. The oracle is torch.autograd run lane by lane in a Python loop: on a scalar `if`,
torch only runs the branch taken. Checked for vjp(vmap(f)), jvp(vmap(f)), vmap(vjp(f)),
vmap(jvp(f)) and vjp(vmap(vmap(f))), in the interpreter and compiled (one ksbuild.build), on lanes
placed exactly on the branch boundaries; and vjp(vmap(f)) over the kernel and tensor corpora.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from source_kernels import build_source, ir_getter

from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import vjp_func
from ksbuild.transforms.vmap import vmap_func

SOURCE = '''\
import torch


def _cross(a, b):
    return torch.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def rodrigues(rot: "float[3]", X: "float[3]") -> "float[3]":
    """Bundle adjustment's rotation of X by the angle-axis vector rot (ADBench's
    rodrigues_rotate_point; Ceres' AngleAxisRotatePoint), first order near theta = 0."""
    theta2 = torch.sum(rot * rot)
    if theta2 > 1e-20:
        theta = torch.sqrt(theta2)
        c = torch.cos(theta)
        s = torch.sin(theta)
        w = rot / theta
        return X * c + _cross(w, X) * s + w * (torch.sum(w * X) * (1.0 - c))
    else:
        return X + _cross(rot, X)


def sqrt_edge(x: float, y: float) -> float:
    if x > 0.0:
        return torch.sqrt(x) * y
    return y


def log_edge(x: float, y: float) -> float:
    if x > 0.0:
        return y * torch.log(x)
    return x * y


def div_edge(x: float, w: float) -> float:
    if x != 0.0:
        return w / x + x
    return w * 2.0


def shared_tensor(x: float, W: "float[3]") -> float:
    if x > 0.0:
        return torch.sum(torch.sqrt(W * x))
    return torch.sum(W) * x


def nested_edge(x: float, y: float) -> tuple[float, float]:
    if x > 0.0:
        if y > 0.0:
            return x * torch.log(y), torch.sqrt(x)
        return torch.sqrt(x) + y, x
    return x * y, y


def loop_edge(x: float) -> float:
    s = x
    for i in range(3):
        if s > 0.0:
            s = torch.sqrt(s) + 0.5 * s
        else:
            s = s * 0.5
    return s
'''

PY: dict = {}
exec(compile(SOURCE, "branch_kernels.py", "exec", dont_inherit=True), PY)

# name -> (lanes exactly on and around the branch boundaries, vmap in_axes mask)
ROT0 = [0.0, 0.0, 0.0]
LANES = {
    "rodrigues": ([(ROT0, [1.0, 2.0, 3.0]), ([0.1, -0.2, 0.3], [0.5, 1.0, -1.0]), ([1e-11, 0.0, 0.0], [1.0, 1.0, 1.0]),
                   ([0.0, 0.0, 0.0], [-2.0, 0.5, 0.25])], (True, True)),
    "sqrt_edge": ([(0.0, 1.5), (0.25, -1.0), (-1.0, 2.0), (4.0, 0.5)], (True, True)),
    "log_edge": ([(0.0, 2.0), (0.5, 1.0), (-2.0, 3.0), (2.0, -1.0)], (True, True)),
    "div_edge": ([(0.0, 3.0), (2.0, 3.0), (-0.5, 3.0), (0.0, 3.0)], (True, False)),
    "shared_tensor": ([(0.0, [1.0, 2.0, 0.5]), (1.5, [1.0, 2.0, 0.5]), (-1.0, [1.0, 2.0, 0.5])], (True, False)),
    "nested_edge": ([(0.0, 1.0), (1.0, 0.0), (-1.0, 0.0), (2.0, 3.0), (0.5, -1.0)], (True, True)),
    "loop_edge": ([(0.0,), (-1.0,), (2.0,), (1e-3,)], (True,)),
}
NAMES = list(LANES)


def floats(name: str) -> list[bool]:
    return [True] * len(LANES[name][0][0])  # every argument of these kernels is a float


def lane_points(name: str) -> list[tuple]:
    return [tuple(np.asarray(a, dtype=np.float64) for a in p) for p in LANES[name][0]]


def mask(name: str) -> list[bool]:
    return list(LANES[name][1])


def stack(name: str, rows: list[tuple]) -> list[np.ndarray]:
    """Per-lane argument tuples as vmap arguments (an unbatched argument: its lane-0 value)."""
    return [np.stack([r[i] for r in rows]) if b else rows[0][i] for i, b in enumerate(mask(name))]


# ---- the oracle: torch.autograd, one lane at a time ---------------------------------------------


def lane_jacobian(name: str, point: tuple) -> tuple[np.ndarray, list[tuple]]:
    """(flat outputs, [(shape, J block [n_out, size])] per input) of the kernel at one lane, by torch."""
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in point]

    def flat(*xs):
        out = PY[name](*xs)
        outs = out if isinstance(out, tuple) else (out,)
        return torch.cat([torch.as_tensor(o, dtype=torch.float64).reshape(-1) for o in outs])

    value = flat(*leaves).detach().numpy()
    jac = torch.autograd.functional.jacobian(flat, tuple(leaves))
    return value, [(np.shape(a), j.reshape(len(value), -1).numpy()) for a, j in zip(point, jac)]


def out_shapes(name: str) -> list[tuple]:
    out = PY[name](*[torch.tensor(a, dtype=torch.float64) for a in lane_points(name)[0]])
    return [tuple(o.shape) for o in (out if isinstance(out, tuple) else (out,))]


def split_outputs(name: str, flat: np.ndarray) -> list[np.ndarray]:
    parts, i = [], 0
    for s in out_shapes(name):
        n = int(np.prod(s))
        parts.append(flat[i:i + n].reshape(s))
        i += n
    return parts


def torch_vjp_per_lane(name: str, rows: list[tuple], cts: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per-input cotangents of f at each lane, stacked over lanes."""
    per_lane = []
    for p, ct in zip(rows, cts):
        u = np.concatenate([np.reshape(c, -1) for c in ct])
        _, blocks = lane_jacobian(name, p)
        per_lane.append([(u @ j).reshape(s) for s, j in blocks])
    return [np.stack([g[i] for g in per_lane]) for i in range(len(rows[0]))]


def torch_vjp_lanes(name: str, rows: list[tuple], cts: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per-input cotangents of vmap(f): per lane, summed over lanes for an unbatched input."""
    per_lane = torch_vjp_per_lane(name, rows, cts)
    return [g if b else g.sum(axis=0) for g, b in zip(per_lane, mask(name))]


def torch_jvp_lanes(name: str, rows: list[tuple], tans: list[tuple]) -> list[np.ndarray]:
    """Per-output tangents of vmap(f), stacked over lanes."""
    per_lane = []
    for p, t in zip(rows, tans):
        _, blocks = lane_jacobian(name, p)
        per_lane.append(split_outputs(name, sum(j @ np.reshape(v, -1) for (_, j), v in zip(blocks, t))))
    return [np.stack([lane[k] for lane in per_lane]) for k in range(len(per_lane[0]))]


def random_cts(name: str, n_lanes: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in out_shapes(name)] for _ in range(n_lanes)]


def random_tangents(name: str, rows: list[tuple], seed: int) -> list[tuple]:
    """One tangent per input and lane; an unbatched input has the same tangent in every lane."""
    rng = np.random.default_rng(seed)
    first = tuple(rng.standard_normal(np.shape(a)) for a in rows[0])
    return [tuple(f if not b else rng.standard_normal(np.shape(a)) for a, f, b in zip(r, first, mask(name)))
            for r in rows]


def stacked_cts(name: str, cts: list[list[np.ndarray]]) -> list[np.ndarray]:
    return [np.stack([c[k] for c in cts]) for k in range(len(cts[0]))]


def assert_finite_close(got, want, what: str) -> None:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, dtype=np.float64)
        assert np.all(np.isfinite(w)), f"{what}: the oracle itself is not finite"
        assert np.all(np.isfinite(g)), f"{what}: result {k} has nan/inf: {g}"
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"{what}: result {k}")


# ---- the interpreter -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    return ir_getter(tmp_path_factory, SOURCE, "branch_kernels")


def vmapped(f, m: list[bool]):
    return vmap_func(f, m, "n", [True] * len(f.results))[0]


@pytest.mark.parametrize("name", NAMES)
def test_vjp_of_vmap(name, ir):
    rows, cts = lane_points(name), random_cts(name, len(LANES[name][0]), 1)
    got = eval_func(vjp_func(vmapped(ir(name), mask(name))), stack(name, rows) + stacked_cts(name, cts))
    assert_finite_close(got, torch_vjp_lanes(name, rows, cts), f"vjp(vmap({name}))")


@pytest.mark.parametrize("name", NAMES)
def test_jvp_of_vmap(name, ir):
    rows = lane_points(name)
    tans = random_tangents(name, rows, 2)
    got = eval_func(jvp_func(vmapped(ir(name), mask(name))), stack(name, rows) + stack(name, tans))
    n_out = len(out_shapes(name))
    assert_finite_close(got[n_out:], torch_jvp_lanes(name, rows, tans), f"jvp(vmap({name}))")


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_vjp(name, ir):
    rows, cts = lane_points(name), random_cts(name, len(LANES[name][0]), 3)
    f = vjp_func(ir(name))
    vf = vmap_func(f, mask(name) + [True] * len(cts[0]), "n", [True] * len(f.results))[0]
    got = eval_func(vf, stack(name, rows) + stacked_cts(name, cts))
    assert_finite_close(got, torch_vjp_per_lane(name, rows, cts), f"vmap(vjp({name}))")


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_jvp(name, ir):
    rows = lane_points(name)
    tans = random_tangents(name, rows, 4)
    f = jvp_func(ir(name))
    vf = vmap_func(f, mask(name) * 2, "n", [True] * len(f.results))[0]
    got = eval_func(vf, stack(name, rows) + stack(name, tans))
    assert_finite_close(got[len(out_shapes(name)):], torch_jvp_lanes(name, rows, tans), f"vmap(jvp({name}))")


@pytest.mark.parametrize("name", ["rodrigues", "sqrt_edge", "nested_edge", "div_edge"])
def test_vjp_of_nested_vmap(name, ir):
    """vmap(vmap(f)) over a 2 x L grid of lanes (the outer vmap batches every argument)."""
    rows = lane_points(name)
    grid = [rows, rows[::-1]]
    cts = [random_cts(name, len(rows), 5 + g) for g in range(2)]
    f = ir(name)
    inner = vmapped(f, mask(name))
    outer = vmap_func(inner, [True] * len(inner.params), "m", [True] * len(inner.results))[0]
    args = [np.stack(col) for col in zip(*[stack(name, g) for g in grid])]
    got = eval_func(vjp_func(outer), args + [np.stack(c) for c in zip(*[stacked_cts(name, c) for c in cts])])
    want = [np.stack(col) for col in zip(*[torch_vjp_lanes(name, g, c) for g, c in zip(grid, cts)])]
    assert_finite_close(got, want, f"vjp(vmap(vmap({name})))")


def test_forward_vmap_stays_select(ir):
    """vmap makes a lane_cond; after the pipeline it is selects only (branch-free, vectorizes)."""
    from ksbuild.transforms.pipeline import lower
    from ksbuild.transforms.rewrite import walk_funcs

    f = vmapped(ir("nested_edge"), [True, True])
    assert "lane_cond" in {e.prim.name for e in f.eqns}
    lowered = {e.prim.name for g in walk_funcs(lower(f)) for e in g.eqns}  # fusion bodies included
    assert lowered >= {"select"}
    assert not {"lane_cond", "cond"} & lowered


def test_unused_lane_cond_results_are_pruned(ir):
    """dce narrows a lane_cond to the results that are read (its prune rule), values unchanged."""
    from ksbuild.ir.core import Func
    from ksbuild.transforms.dce import dce

    f = vmapped(ir("nested_edge"), [True, True])
    first = dce(Func(f.name, f.params, f.eqns, f.results[:1]))
    (lane,) = [e for e in first.eqns if e.prim.name == "lane_cond"]
    assert len(lane.outs) == 1
    args = stack("nested_edge", lane_points("nested_edge"))
    np.testing.assert_array_equal(eval_func(first, args)[0], eval_func(f, args)[0])


# ---- compiled ---------------------------------------------------------------------------------------


def in_axes(m: list[bool]) -> str:
    return "(" + ", ".join("0" if b else "None" for b in m) + ",)"


def exports(name: str) -> dict[str, str]:
    m = mask(name)
    n_out = len(out_shapes(name))
    return {f"{name}_vjp_vmap": f"vjp(vmap({name}, in_axes={in_axes(m)}))",
            f"{name}_jvp_vmap": f"jvp(vmap({name}, in_axes={in_axes(m)}))",
            f"{name}_vmap_vjp": f"vmap(vjp({name}), in_axes={in_axes(m + [True] * n_out)})"}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return build_source(tmp_path_factory, SOURCE, "branches", {k: v for n in NAMES for k, v in exports(n).items()})


@pytest.mark.parametrize("name", NAMES)
def test_compiled(name, pkg):
    rows, cts = lane_points(name), random_cts(name, len(LANES[name][0]), 6)
    want = torch_vjp_lanes(name, rows, cts)
    assert_finite_close(getattr(pkg, f"{name}_vjp_vmap")(*stack(name, rows), *stacked_cts(name, cts)), want,
                        f"compiled vjp(vmap({name}))")
    per_lane = torch_vjp_per_lane(name, rows, cts)
    assert_finite_close(getattr(pkg, f"{name}_vmap_vjp")(*stack(name, rows), *stacked_cts(name, cts)), per_lane,
                        f"compiled vmap(vjp({name}))")
    tans = random_tangents(name, rows, 7)
    got = getattr(pkg, f"{name}_jvp_vmap")(*stack(name, rows), *stack(name, tans))
    got = list(got) if isinstance(got, tuple) else [got]
    assert_finite_close(got[-len(out_shapes(name)):], torch_jvp_lanes(name, rows, tans), f"compiled jvp(vmap({name}))")


# ---- the corpora: vjp(vmap(f)) equals the lane-by-lane vjp ----------------------------------------


def test_scalar_corpus_vjp_of_vmap_at_edges(tmp_path):
    """Every reversible kernel of tests/test_kernels_corpus.py, its branch edges as lanes: vjp(vmap(f))
    equals vjp(f) lane by lane (the scalar vjp takes one branch), nan nowhere it is not."""
    import test_kernels_corpus as corpus

    path = tmp_path / "corpus_kernels.py"
    path.write_text(corpus.SOURCE)
    for k in corpus.REVERSIBLE:
        f = compile_python_kernel(path, k.name, "f64")
        pts = corpus.lanes(k, list(k.edges) + corpus.random_points(k, 3))
        cts = np.random.default_rng(8).standard_normal((len(pts), len(f.results)))
        vf = vjp_func(vmap_func(f, k.mask, "n", [True] * len(f.results))[0])
        got = eval_func(vf, corpus.stack(k, pts) + [cts[:, j] for j in range(len(f.results))])
        per_lane = [eval_func(vjp_func(f), [*p, *c]) for p, c in zip(pts, cts)]
        batched_floats = [m for m, fl in zip(k.mask, k.floats) if fl]
        for j, (g, b) in enumerate(zip(got, batched_floats)):
            want = np.array([lane[j] for lane in per_lane], dtype=float)
            want = want if b else want.sum()
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14, equal_nan=False,
                                       err_msg=f"vjp(vmap({k.name})) at {pts}")


def test_tensor_corpus_vjp_of_vmap():
    """Every case of tests/test_tensor_corpus.py (mixed cases straddle branches): vjp(vmap(f)) equals
    torch.autograd lane by lane."""
    import test_tensor_corpus as tc

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for case in tc.CASES:
            f = compile_python_kernel(tc.KERNELS_FILE, case.kernel, "f64")
            pts = tc.lanes(case)
            cts = [tc.cotangents(case, p, f"lane{j}") for j, p in enumerate(pts)]
            live = [t.is_float for t in tc.result_types(case.kernel)]
            vf = vjp_func(vmap_func(f, case.mask, "lanes", [True] * len(f.results))[0])
            ct_args = [np.stack([np.asarray(c[k]) for c in cts]) for k in range(len(cts[0])) if live[k]]
            got = eval_func(vf, tc.stacked(case, pts) + ct_args)
            per_lane = [tc.torch_vjp(case, p, c) for p, c in zip(pts, cts)]
            floats_mask = [b for b, t in zip(case.mask, case.types) if t.is_float]
            for j, (g, b) in enumerate(zip(got, floats_mask)):
                want = np.stack([lane[j] for lane in per_lane]) if b else sum(lane[j] for lane in per_lane)
                np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-11, err_msg=f"vjp(vmap({case.id})) input {j}")
    finally:
        torch.set_default_dtype(old)
