"""ONNX GridSample (ops/resize.py grid_sample) against onnxruntime: every mode, padding and align_corners, with a
symbolic batch, in the reference interpreter. Two cases were wrong until the twenty-fourth session's held-out spatial
transformer found them through torch.export's grid_sampler_2d: bicubic with border padding clamped the sample point
(torch and onnxruntime clamp each of the 16 taps instead: the kernel is not symmetric at a clamped border, so the
values differ wherever the point lies outside), and nearest without zeros padding reshaped its literal weight 1 to a
batch-sized shape. (The ONNX backend node tests have neither: their nearest and bicubic cases pad with zeros.)"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402

CASES = [(mode, padding, corners) for mode in ("linear", "nearest", "cubic")
         for padding in ("zeros", "border", "reflection") for corners in (0, 1)]
OPSET16 = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


def _model(path, mode: str, padding: str, corners: int, opset: int):
    node = h.make_node("GridSample", ["x", "grid"], ["y"], mode=OPSET16[mode] if opset < 20 else mode,
                       padding_mode=padding, align_corners=corners)
    m = h.make_model(h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 3, 6, 8]),
                      h.make_tensor_value_info("grid", T.FLOAT, ["n", 4, 5, 2])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", 3, 4, 5])]), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("opset", [16, 20])
@pytest.mark.parametrize("mode, padding, corners", CASES)
def test_grid_sample_matches_onnxruntime(tmp_path, mode, padding, corners, opset):
    rng = np.random.default_rng(len(tmp_path.name))
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    grid = (rng.random((2, 4, 5, 2)) * 2.8 - 1.4).astype(np.float32)  # (a third of the points outside [-1, 1])
    path = _model(tmp_path / "g.onnx", mode, padding, corners, opset)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x, "grid": grid})[0]
    (got,) = eval_func(compile_onnx_kernel(path, "k"), [x, grid])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
