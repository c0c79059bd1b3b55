"""[build] threads = N: the parallelize pass marks batch loop nests, the C++ runs their outer
loop with OpenMP, and the results equal the single-threaded build's (and the interpreter's)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.exports import build_exports
from ksbuild.ir.printer import print_func
from ksbuild.manifest import load_manifest

KERNEL = '''import torch


def scores(x: "float[n, d]", w: "float[d, k]") -> "float[n]":
    h = torch.tanh(x @ w)
    return torch.logsumexp(h * h, 1)
'''


def _manifest(tmp_path, threads: int):
    folder = tmp_path / f"t{threads}"
    folder.mkdir()
    (folder / "k.py").write_text(KERNEL)
    (folder / "relu3.py").write_text((ROOT / "examples/relu3/relu3.py").read_text())
    (folder / "manifest.toml").write_text(f'''[package]
name = "par{threads}"
[build]
dtype = "float64"
threads = {threads}
[kernels.scores]
python = "k.py:scores"
[kernels.relu3]
python = "relu3.py:relu3"
[exports]
scores = "scores"
scores_vjp = "vjp(scores)"
vrelu3 = "vmap(relu3)"
vrelu3_vjp = "vjp(vmap(relu3))"
''')
    return folder / "manifest.toml"


def test_parallel_build_matches_the_sequential_one(tmp_path):
    one, four = ksbuild.build(_manifest(tmp_path, 0)), ksbuild.build(_manifest(tmp_path, 4))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((300, 5)), rng.standard_normal((5, 7))
    np.testing.assert_allclose(four.scores(x, w), one.scores(x, w), rtol=1e-13)
    ct = rng.standard_normal(300)
    for a, b in zip(four.scores_vjp(x, w, ct), one.scores_vjp(x, w, ct)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    t = np.linspace(-2, 2, 1001)
    np.testing.assert_allclose(four.vrelu3(t), one.vrelu3(t), rtol=0)
    source = next((four.root / "share").glob("*/src/*.cpp")).read_text()
    assert "KS_OMP_PARALLEL_FOR(num_threads(4))" in source


def test_the_pass_marks_only_top_level_nests(tmp_path):
    exports = {e.name: e.func for e in build_exports(load_manifest(_manifest(tmp_path, 4)))}
    text = print_func(exports["scores"])
    assert "threads=4" in text
    seq = {e.name: e.func for e in build_exports(load_manifest(_manifest(tmp_path, 0)))}
    assert "threads=" not in print_func(seq["scores"])


def test_threads_is_checked(tmp_path):
    path = _manifest(tmp_path, 2)
    path.write_text(path.read_text().replace("threads = 2", 'threads = "many"'))
    with pytest.raises(KsbuildError, match="'threads' in \\[build\\] must be an integer") as info:
        load_manifest(path)
    assert info.value.loc.line == 5
