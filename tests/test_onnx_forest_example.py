"""examples/onnx_forest: the boosted trees package is runtime-free, its C++ app builds and runs (the forest
fits its function), the export matches onnxruntime (NaN rows too), it builds for a Cortex-M4 with nothing
but libm, mem* and libgcc helpers, and model.py reproduces the checked-in model."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT, build_and_run_app, undefined_symbols

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

import ksbuild  # noqa: E402
from ksbuild.cli import main as cli_main  # noqa: E402

EXAMPLE = ROOT / "examples" / "onnx_forest"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("onnx_forest") / "dist"
    assert cli_main(["package", str(EXAMPLE / "manifest.toml"), "-o", str(dest)]) == 0
    return dest


def test_library_is_runtime_free(installed):
    symbols = undefined_symbols(installed / "lib/libonnx_forest.a")
    symbols.discard("onnx_forest_data_blob")
    assert all(re.match(r"^mem(cpy|set|move)$", s) for s in symbols), sorted(symbols)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_consumer_app(installed, tmp_path):
    run = build_and_run_app(EXAMPLE / "app", installed, tmp_path, "onnx_forest_app")
    assert run.returncode == 0, run.stdout
    assert re.search(r"rmse 0\.0\d+", run.stdout), run.stdout


def test_forest_matches_onnxruntime():
    pkg = ksbuild.build(EXAMPLE / "manifest.toml")
    x = np.random.default_rng(0).uniform(-1.2, 1.2, (200, 3)).astype(np.float32)
    x[::7, 1] = np.nan  # missing features go the way the model says
    sess = ort.InferenceSession(str(EXAMPLE / "forest.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(pkg.forest(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("arm-none-eabi-g++") is None,
                    reason="needs arm-none-eabi-g++ (scripts/install.sh installs it as root)")
def test_builds_for_cortex_m4(tmp_path):
    dest = tmp_path / "m4"
    assert cli_main(["package", str(EXAMPLE / "manifest.toml"), "--target", "cortex-m4", "-o", str(dest)]) == 0
    out = subprocess.run(["arm-none-eabi-nm", "-u", str(dest / "lib/libonnx_forest.a")], capture_output=True,
                         text=True, check=True).stdout
    undefined = {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}
    undefined.discard("onnx_forest_data_blob")
    assert {s for s in undefined if not s.startswith(("__aeabi_", "mem"))} == set()


def test_model_py_reproduces_the_checked_in_model(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("forest_model", EXAMPLE / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.export(tmp_path)
    x = np.random.default_rng(1).uniform(-1, 1, (64, 3)).astype(np.float32)
    a = ort.InferenceSession(str(EXAMPLE / "forest.onnx"), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(tmp_path / "forest.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(a.run(None, {"x": x})[0], b.run(None, {"x": x})[0], rtol=1e-6, atol=1e-7)
