"""Red-team findings on the ONNX frontend: names that are not safe C identifiers (keywords, macros,
non-ASCII) get safe ones; empty models, graphs without outputs and unknown opsets are errors naming
the file; ceil_mode pooling on dynamic spatial sizes stays a located error."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
from onnx import helper  # noqa: E402

from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.frontends.onnx.names import c_name, dim_name, is_macro_like  # noqa: E402

KEYWORD_DIMS = ["new", "class", "int", "this", "auto", "and", "or", "not", "xor"]
MACRO_DIMS = ["NULL", "M_PI", "π", "_X", "errno", "linux", "EOF", "batch", "N"]


def model(nodes, inputs, outputs, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape):
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def save(tmp_path, m, name="model.onnx"):
    path = tmp_path / name
    onnx.save(m, str(path))
    return path


def compile_error(path) -> str:
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(path, "k")
    return str(e.value)


def test_names_rules():
    assert [is_macro_like(n) for n in ["NULL", "INT64_MAX", "M_PI", "M_PIl", "__linux__", "errno", "EIO"]] == [True] * 7
    assert [is_macro_like(n) for n in ["N", "HW", "batch", "seq_len", "_x", "unk__0", "s0"]] == [False] * 7
    assert c_name("INT64_MAX", "x") == "x_INT64_MAX" and c_name("int", "x") == "int"  # keywords: codegen's
    assert c_name("a.b", "x") == "a_b" and c_name("π", "x") == "u03c0" and c_name("0a", "x") == "x0a"
    assert [dim_name(n, set()) for n in ["new", "NULL", "_X", "π", "batch"]] == ["d_new", "d_NULL", "d_X", "u03c0",
                                                                                  "batch"]
    assert dim_name("a_b", {"a_b"}) == "a_b2"


def test_distinct_dim_params_stay_distinct(tmp_path):
    """`a.b` and `a_b` are two dims (they were one C name, so ksbuild took them to be equal)."""
    m = model([helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Neg", ["z"], ["w"])],
              [tensor("x", ["a.b"]), tensor("z", ["a_b"])], [tensor("y", ["a.b"]), tensor("w", ["a_b"])])
    f = compile_onnx_kernel(save(tmp_path, m), "k")
    assert [str(p.type) for p in f.params] == ["f32[a_b]", "f32[a_b2]"]


def test_unsafe_dim_and_input_names_build(tmp_path):
    """Keyword, macro and non-ASCII dims and macro-named inputs compile; safe names are kept (one build)."""
    import ksbuild
    nodes = [helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Abs", ["INT64_MAX"], ["z"]),
             helper.make_node("Relu", ["int"], ["π"])]
    ins = [tensor("x", KEYWORD_DIMS), tensor("INT64_MAX", MACRO_DIMS), tensor("int", [3])]
    outs = [tensor("y", KEYWORD_DIMS), tensor("z", MACRO_DIMS), tensor("π", [3])]
    save(tmp_path, model(nodes, ins, outs))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "names"\n\n[kernels.k]\nonnx = "model.onnx"\n\n'
                                            '[exports]\nk = "k"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    want_dims = ["d_new", "d_class", "d_int", "d_this", "d_auto", "d_and", "d_or", "d_not", "d_xor",
                 "d_NULL", "d_M_PI", "u03c0", "d_X", "d_errno", "d_linux", "d_EOF", "batch", "N"]
    assert pkg.k.desc["dims"] == want_dims
    assert [a.get("param", a["name"]) for a in pkg.k.ins] == ["x", "x_INT64_MAX", "int"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 1, 3, 1, 1, 2, 1, 1, 2)).astype(np.float32)
    m = rng.standard_normal((1, 2, 1, 3, 1, 1, 2, 3, 1)).astype(np.float32)
    i = rng.standard_normal(3).astype(np.float32)
    y, z, r = pkg.k(x, **{"x_INT64_MAX": m, "int": i})
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_array_equal(z, np.abs(m))
    np.testing.assert_array_equal(r, np.maximum(i, 0))


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"")
    text = compile_error(path)
    assert "model.onnx" in text and "the file holds no graph" in text


def test_graph_without_outputs_is_an_error(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["r"])], [tensor("x", [2, 3])], [])
    text = compile_error(save(tmp_path, m))
    assert "model.onnx" in text and "the graph has no outputs" in text


def test_opset_newer_than_onnx_knows_is_an_error(tmp_path):
    newest = onnx.defs.onnx_opset_version()
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])], opset=newest + 1)
    text = compile_error(save(tmp_path, m))
    assert "model.onnx" in text and f"opset {newest + 1}" in text and f"up to {newest}" in text
    assert "hint:" in text and f"opset_version={newest}" in text


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_ceil_mode_on_dynamic_spatial_sizes_is_a_located_error(tmp_path, op):
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=[2, 2], ceil_mode=1)
    m = model([node], [tensor("x", ["b", 3, "h", "w"])], [tensor("y", ["b", 3, "oh", "ow"])])
    text = compile_error(save(tmp_path, m))
    assert f"model.onnx: node pool ({op})" in text and "ceil_mode needs static spatial sizes" in text
