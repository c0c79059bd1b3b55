"""A value that is inf or nan on the way, which the result does not read, times a zero (co)tangent: 0, as torch
(transforms/nonfinite.py; fuzz/known.py's "nonfinite-intermediate" until now). The fuzzer's own reproducers (its
kernels, the failing export and inputs), checked interpreted and compiled against the fuzzer's torch.func oracle."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from source_kernels import build_source

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: fuzz/ is not installed

from fuzz import nesting, torch_shim  # noqa: E402
from fuzz.run import HEADER, compare_all, make_case, source_of  # noqa: E402
from ksbuild.errors import Location  # noqa: E402
from ksbuild.exports import apply_transform  # noqa: E402
from ksbuild.frontends.python.source import compile_python_kernel  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402
from ksbuild.manifest import parse_transform  # noqa: E402

# (seed, kernel, export, inputs): fuzz/known.py's reproducers. 200/3: a loop's result read by two if-expressions;
# 200/36: values read by several ifs in a loop; 400/84: both branches of one if; 400/221: a value only conditions
# and discarded sides read; 200/179: builtin min discarding it; 100/44: a per-lane if's condition under vmap
CASES = [
    (200, 3, "grad(grad(k3, argnums=(0,)))", [1.2873863715030502, -0.5763329586676842]),
    (200, 36, "jvp(grad(k36))", [4.398181580539248, -0.6193294180747844, -2.4952017290998905, 1.0295619904849176,
                                 0.41441573995162045, -0.9394251522803295]),
    (400, 84, "jvp(grad(k84))", [0.3256581918723751, 1.0266989739358097, -2.5399737353039242, -1.0349229540877094,
                                 1.2412296757607009, 0.9073294019364754]),
    (400, 221, "grad(grad(k221))", [0.36270057150460344]),
    (200, 179, "grad(grad(k179))", [-1.0]),
    (100, 44, "vjp(vmap(k44))", [
        [-0.09214459166313109, 1.3689696442389199, -1.8832094637966446],
        [[[0.7945708358819719, 0.47397124305030897, 1.446787010569873], [-0.6038184436925416, 1.0, 2.3541449225783007]],
         [[0.0, -0.9764070011210009, -0.5103362087349729], [0.4960919442148577, 0.3346015775874628, 1.0]],
         [[-1.1352146595854018, -0.7318116404331435, -0.9661259744154864],
          [0.9279683831123026, 0.9579782946857197, -0.4547743366647585]]],
        [[-0.5180610728217201, 1.4410658257314732], [-0.5661076424771443, 1.0], [0.8119190600107308, -1.0]],
        [[1.3266179068028028, 0.3831352709023221, -0.6369449622428067],
         [0.35763283823398234, -1.2569960782930518, -1.1468608516960421],
         [-0.6694491148514529, 1.5361058091370574, 1.854507362890877]],
        [-0.6691613139704472, 0.620134597750361, -0.48632372681742486]]),
]


def _nesting(case, text):
    return next(t for t in case.exports.values() if nesting.text(t, case.kernel.name) == text)


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    """(the cases, their IR, the compiled package: export r<i> is CASES[i]'s)."""
    cases = [make_case(s, k) for s, k, _, _ in CASES]
    path = tmp_path_factory.mktemp("nonfinite_ir") / "repro.py"
    path.write_text(source_of(cases))
    irs = [compile_python_kernel(path, c.kernel.name, "f64") for c in cases]
    exports = {f"r{i}": text for i, (_, _, text, _) in enumerate(CASES)}
    return cases, irs, path, build_source(tmp_path_factory, source_of(cases), "nonfinite_repro", exports)


def _want(case, t, xs):
    kernel = torch_shim.load(HEADER + case.kernel.source)[case.kernel.name]
    oracle = nesting.oracle(t, kernel, case.kernel.base, case.lanes, torch_shim.NonFinite())
    return [w.detach().numpy(force=True) for w in oracle(*[torch.tensor(x) for x in xs])]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_reproducer(repro, i):
    cases, irs, path, pkg = repro
    case, (_, _, text, inputs) = cases[i], CASES[i]
    t = _nesting(case, text)
    f = apply_transform(parse_transform(text, Location(str(path)), [case.kernel.name]), {case.kernel.name: irs[i]},
                        Location(str(path)))
    xs = [np.asarray(x, dtype=np.float64) for x in inputs]
    want = _want(case, t, xs)
    assert not any(np.isnan(w).any() for w in want)
    got = [np.asarray(r) for r in eval_func(f, xs)]
    assert compare_all(got, want, rtol=1e-6, atol=1e-8, nan_free=True) is None
    compiled = getattr(pkg, f"r{i}")(*[x if x.ndim else float(x) for x in xs])
    compiled = list(compiled) if isinstance(compiled, tuple) else [compiled]
    assert compare_all(compiled, want, rtol=1e-6, atol=1e-8, nan_free=True) is None


def test_finite_products_stay_plain():
    """A product of a tangent by a value that is finite wherever the params are (tanh of the sqrt of a sum of
    squares, the log of exp + 2) stays a ctmul (no cost); by the log of any x, a mulz."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    from ksbuild.transforms.nonfinite import mask_nonfinite

    b, f64 = Builder(), Type("f64", ())
    x, dx = Var(f64, "x"), Var(f64, "dx")
    n = b.sqrt(b.add(b.mul(x, x), b.lit(1.0, f64)))
    s = b.log(b.add(b.exp(x), b.lit(2.0, f64)))
    out = b.add(b.ctmul(dx, b.tanh(n)), b.ctmul(dx, s))
    g = mask_nonfinite(b.func("g", [x, dx], [out]))
    assert [e.prim.name for e in g.eqns].count("ctmul") == 2
    b = Builder()
    out = b.ctmul(dx, b.log(x))
    g = mask_nonfinite(b.func("h", [x, dx], [out]))
    assert [e.prim.name for e in g.eqns].count("mulz") == 1
