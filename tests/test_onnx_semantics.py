"""`onnx_semantics`: where onnxruntime and onnx.reference compute an op differently, a kernel follows
onnxruntime (the default) or onnx.reference. Both known cases are Resize given scales:
- with align_corners, where input length · scale is not a whole number (onnx/onnx#2462), onnxruntime and
  torch space the outputs by the output's length, onnx.reference by that product;
- the output length floor(n · scale): onnxruntime multiplies the float32 scale in float32 (10 · 0.7 is 7,
  as in torch), onnx.reference in double (10 · 0.699999988 is 6).
Each reading is checked against its own oracle, and the default warns where the spacing differs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ksbuild.errors import KsbuildError, KsbuildWarning  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402


def _resize_model(path, mode: str, scale: float, shape, out_shape, coords: str = "align_corners"):
    m = h.make_model(h.make_graph(
        [h.make_node("Resize", ["x", "", "sc"], ["y"], name="up", mode=mode, coordinate_transformation_mode=coords)],
        "g", [h.make_tensor_value_info("x", T.FLOAT, shape)], [h.make_tensor_value_info("y", T.FLOAT, out_shape)],
        [nh.from_array(np.float32([1, 1, scale, scale]), "sc")]), opset_imports=[h.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def _run(path, x, semantics: str):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        f = compile_onnx_kernel(path, "k", semantics=semantics)
    got = eval_func(f, [x])
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    return got, [w.message for w in seen if isinstance(w.message, KsbuildWarning)]


def _oracles(path, x):
    runtime = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    reference = ReferenceEvaluator(str(path)).run(None, {"x": x})[0]
    return runtime, reference


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scale, size", [(0.6, (4, 7)), (1.5, (5, 3)), (0.8, (6, 9))])
def test_align_corners_follows_each_oracle(tmp_path, mode, scale, size):
    x = np.random.default_rng(0).standard_normal((1, 1) + size).astype(np.float32)
    out = tuple(int(s * scale) for s in size)
    path = _resize_model(tmp_path / "r.onnx", mode, scale, list(x.shape), [1, 1, *out])
    runtime, reference = _oracles(path, x)
    assert np.abs(runtime - reference).max() > 1e-2  # the readings differ here: the checks below mean something
    got, said = _run(path, x, "onnxruntime")
    np.testing.assert_allclose(got, runtime, rtol=1e-5, atol=1e-5)
    assert len(said) == 1 and "node up (Resize)" in str(said[0]) and ": warning: " in str(said[0])
    assert 'onnx_semantics = "reference"' in str(said[0])
    got, said = _run(path, x, "reference")
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)
    assert not said


def test_symbolic_length_follows_each_oracle(tmp_path):
    """An axis of symbolic size is resized with coordinates computed at run time: the same two readings."""
    path = _resize_model(tmp_path / "r.onnx", "linear", 0.6, [1, 1, "h", "w"], [1, 1, "oh", "ow"])
    for size in [(4, 7), (5, 5), (9, 2)]:
        x = np.random.default_rng(1).standard_normal((1, 1) + size).astype(np.float32)
        runtime, reference = _oracles(path, x)
        got, said = _run(path, x, "onnxruntime")
        np.testing.assert_allclose(got, runtime, rtol=1e-5, atol=1e-5)
        assert said and "h · 0.6" in str(said[0])
        got, _ = _run(path, x, "reference")
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale, size, coords", [(2.0, (4, 7), "align_corners"), (0.5, (4, 8), "align_corners"),
                                                 (0.6, (4, 7), "half_pixel")])
def test_no_warning_where_the_readings_agree(tmp_path, scale, size, coords):
    x = np.random.default_rng(2).standard_normal((1, 1) + size).astype(np.float32)
    out = tuple(int(s * scale) for s in size)
    path = _resize_model(tmp_path / "r.onnx", "linear", scale, list(x.shape), [1, 1, *out], coords)
    runtime, reference = _oracles(path, x)
    for semantics, want in (("onnxruntime", runtime), ("reference", reference)):
        got, said = _run(path, x, semantics)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert not said


@pytest.mark.parametrize("scale", [0.7, 0.9, 1.3, 0.6])
@pytest.mark.parametrize("symbolic", [False, True])
def test_output_length_follows_each_oracle(tmp_path, scale, symbolic):
    """(ksbuild computed 6 outputs for 10 · 0.7 where torch and onnxruntime give 7; with a symbolic length a
    float32 scale was refused as not a simple fraction.)"""
    path = _resize_model(tmp_path / "r.onnx", "nearest", scale, [1, 1, "h" if symbolic else 10, 10],
                         [1, 1, "oh", "ow"], coords="asymmetric")
    x = np.random.default_rng(3).standard_normal((1, 1, 10, 10)).astype(np.float32)
    runtime, reference = _oracles(path, x)
    for semantics, want in (("onnxruntime", runtime), ("reference", reference)):
        got, _ = _run(path, x, semantics)
        assert got.shape == want.shape, semantics
        np.testing.assert_array_equal(got, want)


def _manifest(root, kernel: str) -> str:
    (root / "manifest.toml").write_text(f'[package]\nname = "sem"\n\n[kernels.k]\n{kernel}\n\n[exports]\nk = "k"\n')
    return str(root / "manifest.toml")


def test_the_manifest_key_reaches_the_kernel_and_the_cli_prints_the_warning_once(tmp_path, capsys):
    from ksbuild.cli import main
    _resize_model(tmp_path / "r.onnx", "linear", 0.6, [1, 1, 4, 7], [1, 1, 2, 4])
    assert main(["ir", _manifest(tmp_path, 'onnx = "r.onnx"')]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: Resize with align_corners") == 1 and "r.onnx: node up (Resize)" in err
    assert "hint:" in err and "Traceback" not in err
    assert main(["ir", _manifest(tmp_path, 'onnx = "r.onnx"\nonnx_semantics = "reference"')]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("kernel, message", [
    ('onnx = "r.onnx"\nonnx_semantics = "torch"', "unknown onnx_semantics 'torch' in [kernels.k]; valid: "
                                                  "onnxruntime, reference"),
    ('python = "k.py:k"\nonnx_semantics = "reference"', "'onnx_semantics' is for ONNX kernels"),
])
def test_bad_onnx_semantics_is_an_error_at_the_key(tmp_path, kernel, message):
    from ksbuild.manifest import load_manifest
    (tmp_path / "k.py").write_text("def k(x: float) -> float:\n    return x\n")
    _resize_model(tmp_path / "r.onnx", "linear", 0.6, [1, 1, 4, 7], [1, 1, 2, 4])
    with pytest.raises(KsbuildError) as e:
        load_manifest(_manifest(tmp_path, kernel))
    assert message in e.value.message and "manifest.toml:6:1: error" in str(e.value)
