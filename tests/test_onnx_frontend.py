"""The ONNX frontend on hand-made models: errors name the model file and the node, manifest keys,
dense constants in the IR text, the C data section, and folding of symbolic shapes."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402
from ksbuild.ir.parser import parse_func  # noqa: E402
from ksbuild.ir.printer import print_func  # noqa: E402
from ksbuild.ir.verify import verify  # noqa: E402


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(tmp_path, m, name="model.onnx"):
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def compile_error(tmp_path, m) -> str:
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(save(tmp_path, m), "k")
    return str(e.value)


def test_unknown_op_names_the_node(tmp_path):
    m = model([helper.make_node("FooBar", ["x"], ["y"], name="mystery")], [tensor("x", [2])], [tensor("y", [2])])
    text = compile_error(tmp_path, m)
    assert "model.onnx: node mystery (FooBar)" in text and "unknown op FooBar" in text


def test_unknown_attribute_names_it(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"], name="r1", slope=2.0)
    text = compile_error(tmp_path, model([node], [tensor("x", [2])], [tensor("y", [2])]))
    assert "node r1 (Relu)" in text and "unknown or unsupported attribute 'slope'" in text


def test_bad_attribute_value(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="DIAGONAL")
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    text = compile_error(tmp_path, model([node], [tensor("x", [1, 1, 5, 5])], [tensor("y", [1, 1, 3, 3])], [w]))
    assert "node c (Conv)" in text and "auto_pad='DIAGONAL' is not supported" in text


def test_auto_pad_same_with_symbolic_sizes_at_stride_one(tmp_path):
    """torch's padding='same' exports as auto_pad SAME_UPPER; at stride 1 the pads are (k - 1) · d whatever the
    size, so symbolic spatial sizes compile (held-out pass: they were refused); strided, the pads depend on the
    size, and the error says what to do."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 1, 3, 4)).astype(np.float32), "w")
    for auto in ("SAME_UPPER", "SAME_LOWER"):
        node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto, dilations=[2, 1], group=4)
        f = compile_onnx_kernel(save(tmp_path, model([node], [tensor("x", [1, 4, "h", "w"])],
                                                     [tensor("y", [1, 4, "h", "w"])], [w])), "k")
        x = np.random.default_rng(1).standard_normal((1, 4, 9, 6)).astype(np.float32)
        torch = pytest.importorskip("torch")
        lo_w = 1 if auto == "SAME_UPPER" else 2  # (3 columns of padding for a 4-wide kernel)
        xp = torch.nn.functional.pad(torch.tensor(x), (lo_w, 3 - lo_w, 2, 2))
        want = torch.nn.functional.conv2d(xp, torch.tensor(numpy_helper.to_array(w)), dilation=(2, 1), groups=4)
        (got,) = eval_func(f, [x])
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c2", auto_pad="SAME_UPPER", strides=[2, 2], group=4)
    text = compile_error(tmp_path, model([node], [tensor("x", [1, 4, "h", "w"])], [tensor("y", [1, 4, "a", "b"])], [w]))
    assert "node c2 (Conv)" in text and "auto_pad SAME with stride 2 needs static spatial sizes" in text


def test_shape_mismatch_names_the_node(tmp_path):
    node = helper.make_node("Add", ["a", "b"], ["y"], name="plus")
    text = compile_error(tmp_path, model([node], [tensor("a", [2, 3]), tensor("b", [4])], [tensor("y", [2, 3])]))
    assert "node plus (Add)" in text and "do not broadcast" in text


def test_shape_input_computed_at_run_time_is_explained(tmp_path):
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")
    text = compile_error(tmp_path, model([node], [tensor("x", [6]), tensor("s", [2], TensorProto.INT64)],
                                         [tensor("y", [2, 3])]))
    assert "node rs (Reshape)" in text and "must be known when the model is compiled" in text


def test_run_time_nonzero_suggests_torch_where(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "z"], ["m"]), helper.make_node("NonZero", ["m"], ["i"], name="nz")]
    z = numpy_helper.from_array(np.zeros((), np.float32), "z")
    text = compile_error(tmp_path, model(nodes, [tensor("x", [4])], [tensor("i", None, TensorProto.INT64)], [z]))
    assert "node nz (NonZero)" in text and "torch.where(mask, v, x)" in text


def test_negative_input_size_is_a_located_error(tmp_path):
    """ONNX sizes are >= 0; onnx.checker accepts [-5, 3] and ksbuild used to put it in the header (issue 32)."""
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [-5, 3])], [tensor("y", [-5, 3])])
    onnx.checker.check_model(m)  # (it is a model onnx lets through)
    text = compile_error(tmp_path, m)
    assert "model.onnx" in text and "graph input 'x' is declared with shape [-5, 3]" in text
    assert "size -5 along axis 0 is negative" in text and "dim_param" in text


def test_unsupported_input_type(tmp_path):
    node = helper.make_node("Identity", ["x"], ["y"])
    text = compile_error(tmp_path, model([node], [tensor("x", [2], TensorProto.COMPLEX64)],
                                         [tensor("y", [2], TensorProto.COMPLEX64)]))
    assert "graph input 'x' has element type COMPLEX64" in text


def test_output_declared_of_another_kind_is_an_error(tmp_path):
    """A float Relu declared as an int64 output: onnxruntime refuses the model; ksbuild used to truncate the
    values to integers. Another width of the same kind (an f16 output computed in f32) is stored rounded."""
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    text = compile_error(tmp_path, model([node], [tensor("x", [3])], [tensor("y", [3], TensorProto.INT64)]))
    assert "output 'y'" in text and "declared i64 but its value is f32" in text
    compile_onnx_kernel(save(tmp_path, model([node], [tensor("x", [3])], [tensor("y", [3], TensorProto.FLOAT16)]),
                             "half.onnx"), "k")


def test_unreadable_model(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is not protobuf")
    with pytest.raises(KsbuildError, match="cannot read ONNX model"):
        compile_onnx_kernel(path, "k")


def test_cli_error_leaves_nothing_behind(tmp_path):
    node = helper.make_node("FooBar", ["x"], ["y"], name="n0")
    save(tmp_path, model([node], [tensor("x", [2])], [tensor("y", [2])]))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "bad"\n\n[kernels.k]\nonnx = "model.onnx"\n\n'
                                            '[exports]\nk = "k"\n')
    out = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "ksbuild", "package", str(tmp_path / "manifest.toml"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "node n0 (FooBar): error: unknown op FooBar" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.parametrize("value, message", [
    ('weights = "sideways"', "unknown weights 'sideways'"),
    ('python = "k.py:k"\nweights = "external"', "'weights' is for ONNX kernels"),
])
def test_manifest_weights_key(tmp_path, value, message):
    from ksbuild.manifest import load_manifest
    (tmp_path / "k.py").write_text("def k(x: float) -> float:\n    return x\n")
    save(tmp_path, model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])]))
    kernel = value if value.startswith("python") else f'onnx = "model.onnx"\n{value}'
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "p"\n\n[kernels.k]\n{kernel}\n\n[exports]\nk = "k"\n')
    with pytest.raises(KsbuildError, match=message):
        load_manifest(tmp_path / "manifest.toml")


def mlp_with_symbolic_batch():
    """x [batch, 4] -> relu(x W + b) viewed as [batch, 2, 4] via Shape/Gather/Concat/Reshape (as torch exports)."""
    w = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8) / 10, "w")
    bias = numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "b")
    idx = numpy_helper.from_array(np.array(0, np.int64), "zero")
    tail = numpy_helper.from_array(np.array([2, 4], np.int64), "tail")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]), helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "tail"], ["shape"], axis=0),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    return model(nodes, [tensor("x", ["batch", 4])], [tensor("y", ["batch", 2, 4])], [w, bias, idx, tail, axes])


def test_symbolic_shapes_fold_and_dense_constants_round_trip(tmp_path):
    f = compile_onnx_kernel(save(tmp_path, mlp_with_symbolic_batch()), "k")
    verify(f)
    assert str(f.params[0].type) == "f32[batch, 4]" and str(f.results[0].type) == "f32[batch, 2, 4]"
    text = print_func(f)
    assert "dense(f32[4, 8], '" in text and "Shape" not in text
    g = parse_func(text)
    assert print_func(g) == text
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    w = np.arange(32, dtype=np.float32).reshape(4, 8) / 10
    want = np.maximum(x @ w + np.linspace(-1, 1, 8).astype(np.float32), 0).reshape(3, 2, 4)
    np.testing.assert_allclose(eval_func(g, [x])[0], want, rtol=1e-6)


def test_weights_external_become_parameters(tmp_path):
    from ksbuild.frontends.onnx import import_model
    f, external = import_model(save(tmp_path, mlp_with_symbolic_batch()), "k", weights="external")
    assert external == ["w", "b"]
    assert [str(p.type) for p in f.params] == ["f32[batch, 4]", "f32[4, 8]", "f32[8]"]


def test_large_constants_go_to_a_blob(tmp_path):
    """A weight above the inline limit is bytes in src/P_data.bin, assembled with .incbin, not C literals."""
    import ksbuild
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32), "w")
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", ["n", 64])], [tensor("y", ["n", 64])],
              [w])
    save(tmp_path, m)
    (tmp_path / "manifest.toml").write_text('[package]\nname = "blob"\n\n[kernels.k]\nonnx = "model.onnx"\n\n'
                                            '[exports]\nk = "k"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    x = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(pkg.k(x), x @ numpy_helper.to_array(w), rtol=1e-5, atol=1e-5)
    src = next(pkg.root.glob("share/blob/src/blob.cpp")).read_text()
    assert "blob_data_blob + 0" in src and len(src) < 4000


def test_attribute_of_the_wrong_kind(tmp_path):
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="lr", alpha="steep")
    text = compile_error(tmp_path, model([node], [tensor("x", [2])], [tensor("y", [2])]))
    assert "node lr (LeakyRelu)" in text and "attribute 'alpha' must be a number, got str 'steep'" in text


def _training_dropout(seed=None):
    kw = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], name="drop", **kw)
    inits = [numpy_helper.from_array(np.array(0.3, np.float32), "r"), numpy_helper.from_array(np.array(True), "t")]
    return model([node], [tensor("x", [4, 6])], [tensor("y", [4, 6]), tensor("mask", [4, 6], TensorProto.BOOL)],
                 inits, opset=13)


def test_seeded_training_dropout_draws_the_reference_mask(tmp_path):
    from onnx.reference import ReferenceEvaluator
    m = _training_dropout(seed=7)
    f = compile_onnx_kernel(save(tmp_path, m), "k")
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    y, mask = eval_func(f, [x])
    want_y, want_mask = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_array_equal(np.asarray(mask), want_mask)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-6)
    assert 0 < np.asarray(mask).sum() < mask.size  # a real mask, drawn once: the same on every call


def test_training_dropout_without_seed_is_explained(tmp_path):
    text = compile_error(tmp_path, _training_dropout())
    assert "node drop (Dropout)" in text and "without a 'seed' attribute" in text
