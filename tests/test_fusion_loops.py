"""Loop nests of fused elementwise work (codegen/fusion.py) and what reaches them from the pass pipeline: adjacent
axes that every operand walks as one become one loop (a squeeze-excite block's [C, 7, 7] bias + SiLU + mean is a
loop over 49 places per channel, not 7 loops of 7 that GCC does not vectorize), broadcasts through axes of size 1
stay exact, and stop_gradient (an AD-only marker) no longer splits a fusion group: ONNX HardSwish after a
convolution is one epilogue. Values against onnxruntime and numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.packaging.package import render  # noqa: E402

C = 24


def _squeeze_excite_head():
    """y = x + b, z = y * sigmoid(y), m = mean of z over H, W: x [C, 7, 7], b [C, 1, 1] a constant."""
    b = numpy_helper.from_array(np.linspace(-1, 1, C, dtype=np.float32).reshape(C, 1, 1), "b")
    nodes = [h.make_node("Add", ["x", "b"], ["y"]), h.make_node("Sigmoid", ["y"], ["s"]),
             h.make_node("Mul", ["y", "s"], ["z"]),
             h.make_node("ReduceMean", ["z"], ["m"], axes=[1, 2], keepdims=0)]
    g = h.make_graph(nodes, "se", [h.make_tensor_value_info("x", T.FLOAT, [C, 7, 7])],
                     [h.make_tensor_value_info("z", T.FLOAT, [C, 7, 7]), h.make_tensor_value_info("m", T.FLOAT, [C])],
                     [b])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _conv_hardswish():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.linspace(-2, 2, 8, dtype=np.float32), "bias")
    nodes = [h.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]), h.make_node("HardSwish", ["c"], ["y"])]
    g = h.make_graph(nodes, "hs", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 9, 9])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 9, 9])], [w, bias])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _one_hot():
    """[N, 1, 1] == [4] -> [N, 1, 4] (scikit-learn's OneHotEncoder as skl2onnx writes it): the axes of size 1
    between the batch axis and the categories must not join them."""
    cats = numpy_helper.from_array(np.array([0, 1, 2, 3], np.int64), "cats")
    nodes = [h.make_node("Equal", ["x", "cats"], ["e"]), h.make_node("Cast", ["e"], ["y"], to=T.FLOAT)]
    g = h.make_graph(nodes, "oh", [h.make_tensor_value_info("x", T.INT64, ["N", 1, 1])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 1, 4])], [cats])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _gather():
    """y = x[idx] with idx [N, 1, 5, 1] (transformers' packed-sequence mask): the gather's loop nest keeps its axes,
    its source is no operand broadcast over them (merged as one, it read x[0] everywhere: GPT-2 through torch.export
    failed to build on the unused index)."""
    nodes = [h.make_node("Gather", ["x", "idx"], ["y"], axis=0)]
    g = h.make_graph(nodes, "ga", [h.make_tensor_value_info("x", T.FLOAT, [16]),
                                   h.make_tensor_value_info("idx", T.INT64, ["N", 1, 5, 1])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 1, 5, 1])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


MODELS = {"se": _squeeze_excite_head, "hs": _conv_hardswish, "oh": _one_hot, "ga": _gather}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the package, the generated C++ text, the ONNX files' folder) of the three models."""
    root = tmp_path_factory.mktemp("fusion_loops")
    for name, make in MODELS.items():
        onnx.save(make(), str(root / f"{name}.onnx"))
    kernels = "\n".join(f'{k} = {{ onnx = "{k}.onnx" }}' for k in MODELS)
    exports = "\n".join(f'{k} = "{k}"' for k in MODELS)
    (root / "manifest.toml").write_text(f'[package]\nname = "fl"\n\n[kernels]\n{kernels}\n\n[exports]\n{exports}\n')
    render(root / "manifest.toml", root / "project", lambda s: None)
    cpp = (root / "project" / "src" / "fl.cpp").read_text()
    return ksbuild.build(root / "manifest.toml", quiet=True), cpp, root


def _function(cpp: str, export: str) -> str:
    start = cpp.index(f"int fl_{export}(")
    return cpp[start:cpp.index("\n}\n", start)]


def _ort(root, name, feeds):
    return ort.InferenceSession(str(root / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_squeeze_excite_mean_over_7x7_is_one_loop_of_49(built):
    pkg, cpp, root = built
    body = _function(cpp, "se")
    loops = re.findall(r"< (\w+); \+\+", body)
    assert "49" in loops and "7" not in loops, body
    x = np.random.default_rng(1).standard_normal((C, 7, 7)).astype(np.float32)
    z, m = pkg.se(x)
    want_z, want_m = _ort(root, "se", {"x": x})
    np.testing.assert_allclose(z, want_z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m, want_m, rtol=1e-6, atol=1e-6)


def test_hardswish_after_a_convolution_is_its_epilogue(built):
    pkg, cpp, root = built
    body = _function(cpp, "hs")
    assert body.count("for (") == 0 and "epilogue" in body, body  # (no loop nest of its own after the kernel)
    x = np.random.default_rng(2).standard_normal((1, 4, 9, 9)).astype(np.float32) * 3
    np.testing.assert_allclose(pkg.hs(x), _ort(root, "hs", {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_broadcast_through_axes_of_size_1_stays_exact(built):
    pkg, _, root = built
    x = np.array([0, 3, 1, 2, 5, 1, 0], np.int64).reshape(7, 1, 1)
    got = pkg.oh(x)
    np.testing.assert_array_equal(got, _ort(root, "oh", {"x": x})[0])
    np.testing.assert_array_equal(got, (x == np.arange(4)).astype(np.float32))


def test_a_gather_in_a_loop_nest_reads_by_each_index(built):
    pkg, _, root = built
    x = np.arange(16, dtype=np.float32) - 4
    idx = np.random.default_rng(3).integers(0, 16, (3, 1, 5, 1))
    np.testing.assert_array_equal(pkg.ga(x, idx), x[idx])
    np.testing.assert_array_equal(pkg.ga(x, idx), _ort(root, "ga", {"x": x, "idx": idx})[0])
