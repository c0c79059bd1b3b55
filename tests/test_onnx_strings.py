"""ONNX string tensors (tensor(string)): the `ks_str` C ABI (`const char*` elements), equality,
moves (Where, Transpose, Reshape, Gather, Concat, Slice, Expand), string constants, vmap, a
float gradient beside string inputs, the Python runtime's conversions, a C consumer, and
located errors for what strings do not support. Oracles: onnxruntime, a Python loop, the
reference interpreter."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402


def _strings(values, shape=None) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr.reshape(shape or (len(values),))


def _model(nodes, inputs, outputs, inits=(), opset=19, check=True):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    if check:  # (the models of the error tests are invalid on purpose)
        onnx.checker.check_model(m, full_check=True)
    return m


def _moves_model():
    """Equal against a constant, Where with a constant, then strings moved around by shape ops."""
    nodes = [
        h.make_node("Equal", ["x", "cat"], ["is_cat"]),
        h.make_node("Where", ["is_cat", "x", "other"], ["renamed"]),
        h.make_node("Transpose", ["renamed"], ["t"], perm=[1, 0]),
        h.make_node("Reshape", ["t", "shape"], ["flat"]),
        h.make_node("Gather", ["flat", "idx"], ["picked"], axis=0),
        h.make_node("Concat", ["picked", "extra"], ["joined"], axis=0),
        h.make_node("Slice", ["joined", "starts", "ends"], ["sliced"]),
        h.make_node("Unsqueeze", ["sliced", "ax"], ["u"]),
        h.make_node("Expand", ["u", "eshape"], ["y"]),
    ]
    inits = [
        nh.from_array(_strings(["cat"]), "cat"),
        nh.from_array(_strings(['dög "q"\\?'], (1, 1)), "other"),
        nh.from_array(np.array([-1], np.int64), "shape"),
        nh.from_array(np.array([3, 0, 1], np.int64), "idx"),
        nh.from_array(_strings(["end", "fin", ""]), "extra"),
        nh.from_array(np.array([1], np.int64), "starts"),
        nh.from_array(np.array([5], np.int64), "ends"),
        nh.from_array(np.array([0], np.int64), "ax"),
        nh.from_array(np.array([2, 4], np.int64), "eshape"),
    ]
    return _model(nodes, [h.make_tensor_value_info("x", T.STRING, ["n", 2])],
                  [h.make_tensor_value_info("y", T.STRING, [2, 4]),
                   h.make_tensor_value_info("is_cat", T.BOOL, ["n", 2])], inits)


def _mixed_model():
    """A float output selected by a string label: y = where(label == "neg", -x, x) * x."""
    nodes = [
        h.make_node("Equal", ["label", "neg"], ["is_neg"]),
        h.make_node("Neg", ["x"], ["mx"]),
        h.make_node("Where", ["is_neg", "mx", "x"], ["s"]),
        h.make_node("Mul", ["s", "x"], ["y"]),
    ]
    return _model(nodes, [h.make_tensor_value_info("label", T.STRING, ["n"]),
                          h.make_tensor_value_info("x", T.FLOAT, ["n"])],
                  [h.make_tensor_value_info("y", T.FLOAT, ["n"])], [nh.from_array(_strings(["neg"]), "neg")])


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("strings")
    onnx.save(_moves_model(), str(root / "moves.onnx"))
    onnx.save(_mixed_model(), str(root / "mixed.onnx"))
    (root / "manifest.toml").write_text(
        '[package]\nname = "strs"\n\n[kernels]\nmoves = { onnx = "moves.onnx" }\nmixed = { onnx = "mixed.onnx" }\n\n'
        '[exports]\nmoves = "moves"\nvmoves = "vmap(moves)"\nmixed = "mixed"\nmixed_vjp = "vjp(mixed)"\n'
        'mixed_jvp = "jvp(mixed)"\n')
    return ksbuild.build(root / "manifest.toml", quiet=True), root


X = _strings(["cat", "dog", "emu", "cat", "a", "ünï"], (3, 2))


def test_strings_match_onnxruntime(pkg):
    ort = pytest.importorskip("onnxruntime")
    p, root = pkg
    want = ort.InferenceSession(str(root / "moves.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    got = p.moves(X)
    assert got[0].dtype == object and got[0].tolist() == want[0].tolist()
    np.testing.assert_array_equal(got[1], want[1])


def test_vmap_of_strings_matches_a_loop(pkg):
    p, _ = pkg
    xs = np.stack([X, X[::-1], _strings(["cat"] * 6, (3, 2))])
    ys, flags = p.vmoves(xs)
    for x, y, flag in zip(xs, ys, flags):
        y1, flag1 = p.moves(x)
        assert y.tolist() == y1.tolist()
        np.testing.assert_array_equal(flag, flag1)


def test_numpy_str_bytes_and_lists_are_accepted(pkg):
    p, _ = pkg
    want = p.moves(X)[0].tolist()
    assert p.moves(X.astype(str))[0].tolist() == want
    assert p.moves(np.array([[s.encode() for s in row] for row in X]))[0].tolist() == want
    assert p.moves([list(row) for row in X])[0].tolist() == want


def test_gradients_beside_string_inputs(pkg):
    """Strings have no tangent or cotangent: vjp takes (label, x, dy) and returns dx; jvp (label, x, dx)."""
    p, _ = pkg
    label = _strings(["neg", "pos", "neg", ""])
    x = np.array([1.5, -2.0, 0.25, 3.0], np.float32)
    sign = np.where(label == "neg", -1.0, 1.0).astype(np.float32)
    np.testing.assert_allclose(p.mixed(label, x), sign * x * x, rtol=1e-6)
    dy = np.array([1.0, 2.0, -1.0, 0.5], np.float32)
    np.testing.assert_allclose(p.mixed_vjp(label, x, dy), 2 * sign * x * dy, rtol=1e-6)
    np.testing.assert_allclose(p.mixed_jvp(label, x, dy), 2 * sign * x * dy, rtol=1e-6)


def test_header_declares_ks_str(pkg):
    p, _ = pkg
    header = (p.root / "include" / "strs.h").read_text()
    assert "typedef const char* ks_str;" in header
    assert "int strs_moves(int64_t n, const ks_str* x, ks_str* out_y, bool* out_is_cat, void* workspace);" in header


def test_c_program_compares_strings(pkg, tmp_path):
    """A C consumer passes its own strings; results point at its inputs or at the library's constants."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    p, _ = pkg
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "strs.h"\n'
        "int main(void) {\n"
        '    ks_str x[4] = {"cat", "dog", "ca", "cat"};\n'
        "    ks_str y[8];\n    bool is_cat[4];\n"
        "    static _Alignas(16) unsigned char ws[1 << 12];\n"
        "    if (strs_moves_workspace_size(2) > sizeof ws) return 3;\n"
        "    int status = strs_moves(2, x, y, is_cat, ws);\n"
        '    for (int i = 0; i < 4; ++i) printf("%d", (int)is_cat[i]);\n'
        '    for (int i = 0; i < 8; ++i) printf("\\n%s", y[i]);\n'
        '    printf("\\n%d\\n", y[0] == x[0]);\n'
        "    return status;\n}\n")
    exe = tmp_path / "main"
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{p.root / 'include'}",
                    str(tmp_path / "main.c"), str(p.root / "lib" / "libstrs.a"), "-lm", "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    x = _strings(["cat", "dog", "ca", "cat"], (2, 2))
    want_y, want_flag = p.moves(x)
    assert out[0] == "".join(str(int(v)) for v in want_flag.reshape(-1))
    assert out[1:9] == want_y.reshape(-1).tolist()
    assert out[9] == "1"  # the first result is the caller's own pointer, not a copy


def test_string_constants_print_and_parse():
    """The IR text holds string literals and dense string constants; the parser reads them back."""
    import tempfile
    from pathlib import Path

    from ksbuild.ir.interp import eval_func
    from ksbuild.ir.parser import parse_func
    from ksbuild.ir.printer import print_func
    from ksbuild.ir.verify import verify
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(_moves_model(), str(path))
        f = compile_onnx_kernel(path, "moves")
    text = print_func(f)
    assert "'cat': str" in text and "dense(str[" in text
    g = parse_func(text)
    verify(g)
    assert print_func(g) == text
    for a, b in zip(eval_func(f, [X]), eval_func(g, [X])):
        assert np.asarray(a).tolist() == np.asarray(b).tolist()


@pytest.mark.parametrize("op, message", [
    ("Add", "'add' does not take them"),
    ("Less", "'lt' does not take them"),
])
def test_string_arithmetic_is_a_located_error(tmp_path, op, message):
    m = _model([h.make_node(op, ["x", "x"], ["y"], name="bad")], [h.make_tensor_value_info("x", T.STRING, [2])],
               [h.make_tensor_value_info("y", T.STRING if op == "Add" else T.BOOL, [2])], check=False)
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(path, "k")
    assert f"bad.onnx: node bad ({op})" in str(e.value) and message in str(e.value)


def test_cast_of_strings_is_a_located_error(tmp_path):
    m = _model([h.make_node("Cast", ["x"], ["y"], name="c", to=T.FLOAT)],
               [h.make_tensor_value_info("x", T.STRING, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
               check=False)
    path = tmp_path / "cast.onnx"
    onnx.save(m, str(path))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(path, "k")
    assert "node c (Cast)" in str(e.value) and "str" in str(e.value)


def test_torch_tensors_are_refused_for_strings(pkg):
    torch = pytest.importorskip("torch")
    p, _ = pkg
    with pytest.raises(p.moves.DtypeError, match="torch tensors cannot hold them"):
        p.moves(torch.zeros(3, 2))


def test_bad_string_arguments(pkg):
    p, _ = pkg
    with pytest.raises(p.moves.DtypeError, match="takes strings, got a int"):
        p.moves(np.array([[1, 2]]))
    with pytest.raises(p.moves.CallError, match="NUL character"):
        p.moves(_strings(["a\0b", "c"], (1, 2)))


def _label_encoder_model(x_type, y_type, opset, **attrs):
    node = h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", x_type, ["n"])],
                     [h.make_tensor_value_info("y", y_type, ["n"])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 19), h.make_opsetid("ai.onnx.ml", opset)])


LABEL_CASES = {  # name: (x type, y type, ai.onnx.ml opset, attributes, x, onnxruntime agrees or the expected y)
    # onnxruntime keeps the first of repeated keys and matches no NaN key; the spec (and onnx.reference):
    # "If a key is repeated, the last key takes precedence", and since opset 4 NaN keys match NaN
    "str_to_int_repeated_key": (T.STRING, T.INT64, 3,
                                dict(keys_strings=["a", "b", "a"], values_int64s=[1, 2, 3], default_int64=-7),
                                _strings(["a", "b", "c", "", "a"]), False),
    "int_to_str": (T.INT64, T.STRING, 3, dict(keys_int64s=[3, 1], values_strings=["three", "one"]),
                   np.array([1, 2, 3, 3], np.int64), True),
    "float_nan_key_v3": (T.FLOAT, T.FLOAT, 3, dict(keys_floats=[1.5, float("nan")], values_floats=[10.0, 20.0],
                                                   default_float=-1.0), np.array([1.5, np.nan, 0.0], np.float32), True),
    # (onnx.reference looks NaN up in a dict, so it finds no NaN key: the spec's text is the oracle here)
    "float_nan_key_v4": (T.FLOAT, T.FLOAT, 4, dict(keys_floats=[1.5, float("nan")], values_floats=[10.0, 20.0],
                                                   default_float=-1.0), np.array([1.5, np.nan, 0.0], np.float32),
                         np.array([10.0, 20.0, -1.0], np.float32)),
    "str_to_str": (T.STRING, T.STRING, 3, dict(keys_strings=["x", "y"], values_strings=["ex", "why"],
                                               default_string="?"), _strings(["y", "x", "z"]), True),
}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_label_encoder_matches_the_reference(tmp_path, case):
    """LabelEncoder (ai.onnx.ml) against onnx.reference (the spec), and onnxruntime where it follows it."""
    from onnx.reference import ReferenceEvaluator
    x_type, y_type, opset, attrs, x, ort_agrees = LABEL_CASES[case]
    model = _label_encoder_model(x_type, y_type, opset, **attrs)
    onnx.save(model, str(tmp_path / "le.onnx"))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "le"\n\n[kernels.le]\nonnx = "le.onnx"\n\n'
                                            '[exports]\nle = "le"\n')
    got = ksbuild.build(tmp_path / "manifest.toml", quiet=True).le(x)
    if isinstance(ort_agrees, np.ndarray):
        np.testing.assert_array_equal(got, ort_agrees)
        return
    wants = [ReferenceEvaluator(model).run(None, {"x": x})[0]]
    if ort_agrees and pytest.importorskip("onnxruntime"):
        import onnxruntime as ort
        wants.append(ort.InferenceSession(str(tmp_path / "le.onnx"), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0])
    for want in wants:
        if want.dtype.kind in "OU":
            assert got.tolist() == want.tolist()
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, attrs, message", [
    ("ReduceMax", {}, "'reduce_max' does not take them"),
    ("TopK", {}, "topk needs numbers"),
    ("MatMul", {}, "does not take them"),
    ("Pad", {}, "Pad does not take strings"),
])
def test_string_ops_that_need_numbers_are_located_errors(tmp_path, op, attrs, message):
    inputs = {"ReduceMax": ["x"], "TopK": ["x", "k"], "MatMul": ["x", "x"], "Pad": ["x", "pads"]}[op]
    inits = [nh.from_array(np.array([1], np.int64), "k"), nh.from_array(np.array([1, 1], np.int64), "pads")]
    m = _model([h.make_node(op, inputs, ["y"], name="bad", **attrs)], [h.make_tensor_value_info("x", T.STRING, [2, 2])],
               [h.make_tensor_value_info("y", T.STRING, None)], [i for i in inits if i.name in inputs], check=False)
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(path, "k")
    assert f"node bad ({op})" in str(e.value) and message in str(e.value)


@pytest.mark.parametrize("text", [b"a\0b", b"ab\0"])
def test_string_constants_with_nul_are_located_errors(tmp_path, text):
    """onnx's numpy_helper drops a trailing NUL (Equal would then be wrong): ksbuild reads the bytes as stored."""
    const = T(name="c", data_type=T.STRING, dims=[1], string_data=[text])  # (make_tensor drops a trailing NUL)
    m = _model([h.make_node("Equal", ["x", "c"], ["y"], name="eq")], [h.make_tensor_value_info("x", T.STRING, [1])],
               [h.make_tensor_value_info("y", T.BOOL, [1])], [const])
    path = tmp_path / "nul.onnx"
    onnx.save(m, str(path))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(path, "k")
    assert "node eq (Equal)" in str(e.value) and "NUL character" in str(e.value)


def test_string_export_refuses_tensors_that_require_grad(tmp_path, pkg):
    torch = pytest.importorskip("torch")
    p, _ = pkg
    with pytest.raises(p.mixed.CallError, match="not a torch op and autograd cannot run"):
        p.mixed(_strings(["neg"]), torch.ones(1, requires_grad=True))
