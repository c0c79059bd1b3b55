"""GradBench's evals as ksbuild kernels (benchmarks/gradbench): each primal and derivative against an
independent numpy / torch.autograd reference on small inputs made by GradBench's generators, and the
GradBench protocol spoken by benchmarks/gradbench/tool.py. The package is built once per session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DEBUG

ROOT = Path(__file__).resolve().parent.parent
GRADBENCH = ROOT / "benchmarks" / "gradbench"
sys.path.insert(0, str(GRADBENCH))

import bench  # noqa: E402
import evals  # noqa: E402
import reference as ref  # noqa: E402

SMALL = {
    "lse": [ref.lse_input(7), {"x": [-1e3, 2.0, 1e3, 999.0]}],
    "llsq": [ref.llsq_input(9, 5), ref.llsq_input(33, 12)],
    "kmeans": [ref.kmeans_input(3, 40, 2), ref.kmeans_input(5, 60, 4)],
    "gmm": [ref.gmm_input(2, 3, 10), ref.gmm_input(4, 5, 17, m=2, gamma=1.5)],
    "ba": [ref.ba_input(3, 5, 17), ref.ba_input(2, 11, 31)],
    "ht": [ref.ht_synthetic(7, 30, 20, complicated=True), ref.ht_synthetic(6, 25, 10, complicated=False, mirrored=True),
           ref.ht_synthetic(5, 12, 9, complicated=True, mirrored=True, seed=3),
           ref.ht_synthetic(5, 20, 9, complicated=True) | {"theta": [0.0] * 3 + [0.3] * 23},   # rotation 0
           ref.ht_synthetic(14, 9, 6, complicated=False, seed=5)],   # c > V: the Jacobian skins every vertex
    "lstm": [ref.lstm_input(2, 9), ref.lstm_input(3, 6, text="Hello, wörld")],
    "det": [ref.det_input(5), ref.det_input(1), ref.det_input(3, seed=4)],   # GradBench's smallest is l = 5
    "ode": [ref.ode_input(1000, 1), ref.ode_input(7, 10, seed=3)],         # and n = 1000, s = 1
    "particle": [{"w": 0.0}],                                               # GradBench's only inputs
    "saddle": [{"start": [1.0, 1.0]}, {"start": [-0.5, 2.0]}],
}
CASES = [(module, i) for module, inputs in SMALL.items() for i in range(len(inputs))]


@pytest.fixture(scope="module")
def pkg():
    """The benchmark's package, built once."""
    import ksbuild

    return ksbuild.build(GRADBENCH / "manifest.toml", quiet=True, optimize=DEBUG)  # (the tool test's build too)


@pytest.mark.parametrize(("module", "index"), CASES)
def test_eval_matches_reference(pkg, module, index):
    """Primal and derivative, as the tool answers them (JSON form), equal the reference's."""
    inp = SMALL[module][index]
    for function, want in zip(evals.FUNCTIONS[module], bench.expected(module, inp)):
        call, to_json = evals.calls(pkg, module, function, inp)
        got = bench.flat(to_json(call()))
        np.testing.assert_allclose(got, np.ravel(want), rtol=1e-10, atol=1e-10, err_msg=f"{module}.{function}")


@pytest.mark.parametrize("index", range(len(SMALL["ht"])))
def test_ht_finger_columns_compressed(pkg, index):
    """ht's Jacobian takes the 20 finger columns from fewer directions (a colouring of the columns no row shares,
    evals.ht_finger_seeds): the pattern holds every nonzero of the dense jacfwd, and no two columns of a colour
    share a row."""
    inp = SMALL["ht"][index]
    pattern = evals.ht_finger_pattern(inp)
    seeds, color = evals.ht_finger_seeds(pattern)
    args = evals.ht_arguments(inp)
    dense = pkg.ht_simple_J(*args) if len(inp["us"]) == 0 else pkg.ht_complicated_J(*args)[0]  # [c, 3, 26]
    assert not (dense[:, :, 6:] != 0).any(axis=1)[~pattern].any()
    for k in range(len(seeds)):
        assert pattern[:, color == k].sum(axis=1).max() <= 1
    assert len(seeds) < 20 or index == 4  # (c > V: every vertex is read)


@pytest.mark.parametrize("module", ["det", "ode"])
def test_gradient_matches_central_differences(pkg, module):
    """det's and ode's gradients against central differences of their own primal (the tool's calls), at
    GradBench's smallest workload (ode: its first 40 inputs, the rest hardly move y_{n-1})."""
    inp = SMALL[module][0]
    key = "A" if module == "det" else "x"
    (gradient, to_json) = evals.calls(pkg, module, "gradient", inp)
    got = np.asarray(to_json(gradient()))

    def primal_at(values) -> float:
        call, _ = evals.calls(pkg, module, "primal", inp | {key: values})
        return float(np.ravel(call())[-1])
    base, h = np.asarray(inp[key]), 1e-6
    for i in range(min(len(base), 40)):
        up, down = base.copy(), base.copy()
        up[i] += h
        down[i] -= h
        assert got[i] == pytest.approx((primal_at(up) - primal_at(down)) / (2 * h), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("module", ["particle", "saddle"])
def test_nested_evals_give_gradbench_answer(pkg, module):
    """Every variant (forward or reverse mode outside and inside) answers what evals/<module>/run.py expects."""
    inp, want = ({"w": 0.0}, ref.PARTICLE_EXPECTED) if module == "particle" else ({"start": [1.0, 1.0]},
                                                                                   ref.SADDLE_EXPECTED)
    for function in evals.FUNCTIONS[module]:
        call, to_json = evals.calls(pkg, module, function, inp)
        np.testing.assert_allclose(to_json(call()), want, rtol=1e-12, atol=1e-16, err_msg=f"{module}.{function}")



# The most stack a call of a nested-AD export may use, its call chain included (issue 36: no frame above 512 B,
# scratch in the workspace). particle's reverse variants kept their simulation's residuals (73-122 KB) in an array
# on the stack while their signature was scalars only (the scalar C ABI has no workspace); 176-216 B now.
NESTED_STACK_BOUND = 512


@pytest.mark.parametrize("module", ["particle", "saddle"])
def test_nested_exports_keep_their_residuals_off_the_stack(pkg, module):
    """Every variant's stack (P.json's stack_bytes, measured at build time from GCC's call graphs) is within the
    bound, and what its loops keep is in the workspace the export takes."""
    for function in evals.FUNCTIONS[module]:
        export = getattr(pkg, f"{module}_{function}")
        if export.desc.get("stack_bytes") is None:
            pytest.skip("the compiler wrote no call graphs (GCC 10 or later does)")
        assert export.desc["stack_bytes"] <= NESTED_STACK_BOUND, (export.name, export.desc["stack_bytes"])
        assert export.ws_fn is not None and export.ws_fn() > 0, export.name
def ba_random_problem(n: int, m: int, p: int, seed: int = 5) -> tuple:
    """cams, X, w, obs, feats near GradBench's camera and point, all different, observations at random."""
    rng = np.random.default_rng(seed)
    cams = np.asarray(ref.BA_DATA["cam"]) * (1.0 + 0.1 * rng.normal(size=(n, 11)))
    X = np.asarray(ref.BA_DATA["x"]) + rng.normal(size=(m, 3))
    obs = np.stack([rng.integers(0, n, p), rng.integers(0, m, p)], axis=1).astype(np.int32)
    return cams, X, rng.uniform(0.2, 1.5, size=p), obs, 100.0 * rng.normal(size=(p, 2))


def test_ba_whole_sparse_jacobian(pkg):
    """Every entry of the sparse BA Jacobian (not only GradBench's first 30) equals the reference's, on
    observations whose cameras, points, weights and features all differ (GradBench's inputs repeat one)."""
    problem = ba_random_problem(4, 6, 23)
    err, blocks, w_err = ref.ba_blocks(*problem)
    rows, cols, vals = ref.ba_sparse_loop(4, 6, problem[3], blocks, problem[2])
    objective, _ = evals.ba_array_calls(pkg, "objective", *problem)
    got_err, got_w_err = objective()
    np.testing.assert_allclose(got_err, err, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_w_err, w_err, rtol=1e-15)
    jacobian, _ = evals.ba_array_calls(pkg, "jacobian", *problem)
    got = jacobian()
    np.testing.assert_array_equal(got["rows"], rows)
    np.testing.assert_array_equal(got["cols"], cols)
    np.testing.assert_allclose(got["vals"], vals, rtol=1e-11, atol=1e-11)


def test_gmm_reference_matches_gradbench_definition():
    """The torch reference equals evals/gmm/run.py's log_posterior (the naive densities) on a tiny input."""
    import math

    import torch

    inp = ref.gmm_input(2, 2, 3, m=1, gamma=1.3)
    x, alpha = np.array(inp["x"]), np.array(inp["alpha"])
    phi = np.exp(alpha) / np.exp(alpha).sum()
    precisions = []
    for k in range(2):
        Q = np.diag(np.exp(inp["q"][k]))
        Q[1, 0] = inp["l"][k][0]
        precisions.append(Q.T @ Q)
    likelihood = np.prod([sum(phi[k] * np.exp(-0.5 * (xi - inp["mu"][k]) @ precisions[k] @ (xi - inp["mu"][k]))
                              / np.sqrt((2 * np.pi) ** 2 / np.linalg.det(precisions[k])) for k in range(2))
                          for xi in x])
    n_w, g = 2 + 1 + 1, 1.3
    log_gamma_2 = 0.5 * math.log(math.pi) + math.lgamma(n_w / 2) + math.lgamma(n_w / 2 - 0.5)
    log_prior = sum((n_w - 3) / 2 * np.log(np.linalg.det(P)) - g * g * np.trace(P) / 2 - n_w * math.log(2)
                    + n_w * 2 * math.log(g) - log_gamma_2 for P in precisions)
    t = {key: torch.tensor(np.array(inp[key], dtype=np.float64)) for key in ("alpha", "mu", "q", "l", "x")}
    got = float(ref.gmm_torch(t["alpha"], t["mu"], t["q"], t["l"], t["x"], 1.3, 1))
    assert got == pytest.approx(math.log(likelihood) + log_prior, rel=1e-10)


# tool.py run as its own __main__, its ksbuild.build at the pkg fixture's optimize="debug" (values are checked, not
# speed): it loads the fixture's package from the session's cache instead of building the package again at speed
TOOL_AT_DEBUG = ("import functools, runpy, sys, ksbuild; ksbuild.build = functools.partial(ksbuild.build, "
                 f"optimize={DEBUG!r}); runpy.run_path(sys.argv[1], run_name='__main__')")


def protocol_session(messages: list[dict]) -> list[dict]:
    """The tool's responses to these messages, one JSON line each way."""
    text = "".join(json.dumps(m) + "\n" for m in messages)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", TOOL_AT_DEBUG, str(GRADBENCH / "tool.py")], input=text,
                          capture_output=True, text=True, env=env, timeout=600, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_tool_speaks_the_protocol(pkg):
    """start, define, evaluate (with min_runs timings), analysis and an unknown module, as GradBench sends them."""
    inp = ref.kmeans_input(3, 20, 2) | {"min_runs": 3, "min_seconds": 0}
    replies = protocol_session([
        {"id": 0, "kind": "start", "eval": "kmeans"},
        {"id": 1, "kind": "define", "module": "kmeans"},
        {"id": 2, "kind": "evaluate", "module": "kmeans", "function": "dir", "input": inp},
        {"id": 3, "kind": "analysis", "of": 2, "valid": True},
        {"id": 4, "kind": "evaluate", "module": "kmeans", "function": "hessian", "input": inp},
        {"id": 5, "kind": "define", "module": "gan"},
        {"id": 6, "kind": "define", "module": "ba"},
        {"id": 7, "kind": "evaluate", "module": "ba", "function": "jacobian", "input": ref.ba_input(3, 4, 20)},
    ])
    assert [r["id"] for r in replies] == list(range(8))
    assert replies[7]["success"] is True and replies[7]["output"] == json.loads(json.dumps(replies[7]["output"]))
    want = ref.ba_expected(ref.ba_input(3, 4, 20))[1]
    assert replies[7]["output"]["rows"] == want["rows"] and replies[7]["output"]["cols"] == want["cols"]
    assert replies[0] == {"id": 0, "tool": "ksbuild"} and replies[3] == {"id": 3}
    assert replies[1]["success"] is True
    assert replies[2]["success"] is True
    np.testing.assert_allclose(replies[2]["output"], ref.kmeans_dir_numpy(inp["points"], inp["centroids"]), rtol=1e-12)
    assert sum(t["name"] == "evaluate" for t in replies[2]["timings"]) >= 3
    assert replies[4]["success"] is False and "no function 'hessian'" in replies[4]["error"]
    assert replies[5]["success"] is False and "gan" in replies[5]["error"]
