"""examples/onnx_sklearn: a scikit-learn pipeline (StandardScaler -> SVC with probabilities) converted by
skl2onnx compiles into a runtime-free library, its C++ app builds and classifies its flowers, and the export
matches onnxruntime and scikit-learn's own predict/predict_proba on the whole iris data."""
from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pytest
from conftest import ROOT, build_and_run_app, undefined_symbols

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

import ksbuild  # noqa: E402
from ksbuild.cli import main as cli_main  # noqa: E402

EXAMPLE = ROOT / "examples" / "onnx_sklearn"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("onnx_sklearn") / "dist"
    assert cli_main(["package", str(EXAMPLE / "manifest.toml"), "-o", str(dest)]) == 0
    return dest


def test_library_is_runtime_free(installed):
    symbols = undefined_symbols(installed / "lib/libonnx_sklearn.a")
    symbols.discard("onnx_sklearn_data_blob")
    assert all(re.match(r"^(mem(cpy|set|move)|(exp|log|tanh|pow)f?)$", s) for s in symbols), sorted(symbols)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_consumer_app(installed, tmp_path):
    run = build_and_run_app(EXAMPLE / "app", installed, tmp_path, "onnx_sklearn_app")
    assert run.returncode == 0, run.stdout
    assert "6 of 6 flowers classified as their species" in run.stdout


def test_matches_onnxruntime_and_sklearn():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e .[examples])")
    import sys
    sys.path.insert(0, str(EXAMPLE))
    try:
        import model as example
    finally:
        sys.path.remove(str(EXAMPLE))
    pkg = ksbuild.build(EXAMPLE / "manifest.toml", quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted, x, _ = example.train()  # (libsvm with a fixed seed: the model that was converted)
    label, proba = pkg.classify(x)
    sess = ort.InferenceSession(str(EXAMPLE / "iris_svc.onnx"), providers=["CPUExecutionProvider"])
    want_label, want_proba = sess.run(None, {"X": x})
    np.testing.assert_array_equal(label, want_label)
    np.testing.assert_allclose(proba, want_proba, atol=2e-5)
    np.testing.assert_array_equal(label, fitted.predict(x))
    np.testing.assert_allclose(proba, fitted.predict_proba(x), atol=1e-4)
