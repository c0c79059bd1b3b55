"""The primitives the ONNX work added, compiled: every sample of tests/prim_samples.py for them,
its jvp and its vjp, built into one package and compared with the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest
from prim_samples import SAMPLES, prim_name
from test_prims import differentiable, one_eqn, sample

from ksbuild.ir.interp import eval_func
from ksbuild.transforms.jvp import jvp_func
from ksbuild.transforms.vjp import vjp_func

NEW = ("constant", "gather", "scatter_add", "window", "fold", "bitwise", "bitcast", "erf", "erfc", "tree_walk",
       "fmod")
NAMES = sorted(n for n in SAMPLES if prim_name(n) in NEW)


def _c(name: str) -> str:
    return name.replace(":", "_")


def funcs() -> dict:
    """export name -> IR function: each sample, and its jvp and vjp when it is differentiable."""
    out = {}
    for name in NAMES:
        f = one_eqn(name)
        out[_c(name)] = f
        if differentiable(name):
            out[_c(name) + "_jvp"] = jvp_func(f)
            out[_c(name) + "_vjp"] = vjp_func(f)
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """One package with every function (rendered from the IR directly, built, loaded)."""
    from ksbuild.compile.cmake import build_and_install
    from ksbuild.exports import Export
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.render import render_project
    from ksbuild.packaging.runtime import Package
    from ksbuild.transforms.pipeline import lower
    d = tmp_path_factory.mktemp("prims")
    (d / "k.py").write_text("def k(x: float) -> float:\n    return x\n")
    (d / "manifest.toml").write_text('[package]\nname = "newprims"\n\n[kernels.k]\npython = "k.py:k"\n\n'
                                     '[exports]\nk = "k"\n')
    m = load_manifest(d / "manifest.toml")
    spec, kernel = next(iter(m.exports.values())), m.kernels["k"]
    exports = [Export(name, lower(f.renamed(name)), spec, kernel) for name, f in funcs().items()]
    render_project(m, exports, d / "project")
    build_and_install(d / "project", d / "build", d / "install", log=d / "build.log", python_module=True,
                      progress=lambda s: None)
    return Package(d / "install"), funcs()


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_matches_interpreter(package, name):
    pkg, fs = package
    rng = np.random.default_rng(7)
    args = sample(name, rng)
    f = fs[_c(name)]
    typed = [np.asarray(a, dtype={"f64": np.float64, "i64": np.int64, "i32": np.int32, "u8": np.uint8}[p.type.dtype])
             for a, p in zip(args, f.params)]
    _close(getattr(pkg, _c(name))(*typed), eval_func(f, typed))
    if _c(name) + "_jvp" in fs:
        floats = [a for a, p in zip(typed, f.params) if p.type.is_float]
        dirs = [rng.standard_normal(np.shape(a)) for a in floats]
        _close(getattr(pkg, _c(name) + "_jvp")(*typed, *dirs), eval_func(fs[_c(name) + "_jvp"], typed + dirs))
        u = [rng.standard_normal(np.shape(np.asarray(o))) for o in eval_func(f, typed)]
        _close(getattr(pkg, _c(name) + "_vjp")(*typed, *u), eval_func(fs[_c(name) + "_vjp"], typed + u))
