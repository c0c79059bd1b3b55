"""ONNX sequences and optionals through the C ABI: a sequence is its elements stacked along a new
first axis (its length a symbolic dim), an optional value comes with a bool `<name>_present`.
The sequence ops (SequenceLength, SequenceAt, SequenceInsert, SequenceErase, ConcatFromSequence,
SplitToSequence) and the optional ones against onnxruntime; gradients by the dot-product test
(vjp against jvp); the header's notes; ragged sequences and misuse as located errors."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402


def _model():
    nodes = [
        h.make_node("SequenceLength", ["xs"], ["len"]),
        h.make_node("SequenceAt", ["xs", "minus1"], ["last"]),
        h.make_node("SequenceInsert", ["xs", "extra"], ["xs2"]),
        h.make_node("SequenceErase", ["xs2", "zero"], ["xs3"]),
        h.make_node("ConcatFromSequence", ["xs3"], ["cat"], axis=1),
        h.make_node("ConcatFromSequence", ["xs3"], ["stk"], axis=-1, new_axis=1),
        h.make_node("Relu", ["stk"], ["r"]),
        h.make_node("SplitToSequence", ["r"], ["parts"], axis=2, keepdims=0),
        h.make_node("Optional", ["last"], ["opt"]),
        h.make_node("OptionalHasElement", ["maybe"], ["has"]),
        h.make_node("OptionalGetElement", ["maybe"], ["got"]),
        h.make_node("Mul", ["got", "got"], ["sq"]),
    ]
    inits = [nh.from_array(np.array(-1, np.int64), "minus1"), nh.from_array(np.array(0, np.int64), "zero"),
             nh.from_array(np.array([[1., -2., 3.], [0.5, 4., -1.]], np.float32), "extra")]
    maybe = h.make_value_info("maybe", h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, ["m"])))
    opt = h.make_value_info("opt", h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [2, 3])))
    outputs = [h.make_tensor_value_info("len", T.INT64, []), h.make_tensor_value_info("last", T.FLOAT, [2, 3]),
               h.make_tensor_value_info("cat", T.FLOAT, ["a", "b"]),
               h.make_tensor_value_info("stk", T.FLOAT, ["a", "b", "c"]),
               h.make_tensor_sequence_value_info("parts", T.FLOAT, ["a", "b"]), opt,
               h.make_tensor_value_info("has", T.BOOL, []), h.make_tensor_value_info("sq", T.FLOAT, ["m"])]
    g = h.make_graph(nodes, "seqs", [h.make_tensor_sequence_value_info("xs", T.FLOAT, [2, 3]), maybe], outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqs")
    onnx.save(_model(), str(root / "seqs.onnx"))
    (root / "manifest.toml").write_text('[package]\nname = "seqs"\n\n[kernels.seqs]\nonnx = "seqs.onnx"\n\n'
                                        '[exports]\nseqs = "seqs"\nseqs_vjp = "vjp(seqs)"\nseqs_jvp = "jvp(seqs)"\n')
    return ksbuild.build(root / "manifest.toml", quiet=True), root


RNG = np.random.default_rng(7)
XS = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(4)]
MAYBE = RNG.standard_normal(5).astype(np.float32)


def test_matches_onnxruntime(pkg):
    ort = pytest.importorskip("onnxruntime")
    p, root = pkg
    want = ort.InferenceSession(str(root / "seqs.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"xs": XS, "maybe": MAYBE})
    n, last, cat, stk, parts, opt, opt_present, has, sq = p.seqs(np.stack(XS), MAYBE, True)
    assert n == want[0] == 4
    for got, w in zip((last, cat, stk), want[1:4]):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    assert len(parts) == len(want[4]) == 4
    for got, w in zip(parts, want[4]):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    np.testing.assert_allclose(opt, want[5], rtol=1e-6)
    assert opt_present is True and has == bool(want[6]) is True
    np.testing.assert_allclose(sq, want[7], rtol=1e-6)


def test_absent_optional_and_sequence_lengths(pkg):
    """An absent optional: its present flag is False (its value is not read); any sequence length works."""
    p, _ = pkg
    outs = p.seqs(np.stack(XS[:1]), np.zeros(0, np.float32), False)
    assert outs[0] == 1 and outs[7] is False
    np.testing.assert_allclose(outs[1], XS[0])
    for k in (2, 7):
        xs = np.stack([RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(k)])
        n, last, cat = p.seqs(xs, MAYBE, True)[:3]
        assert n == k
        np.testing.assert_allclose(last, xs[-1])
        np.testing.assert_allclose(cat, np.concatenate(list(xs[1:]) + [[[1., -2., 3.], [0.5, 4., -1.]]], axis=1))


def test_python_takes_a_list_for_a_sequence(pkg):
    p, _ = pkg
    assert p.seqs(XS, MAYBE, True)[0] == 4
    with pytest.raises(p.seqs.CallError, match="argument 'xs' is not one array"):
        p.seqs([XS[0], np.ones((3, 3), np.float32)], MAYBE, True)


def test_vjp_is_the_transpose_of_jvp(pkg):
    """The dot-product test: <jvp(x; dx), dy> = <dx, vjp(x; dy)> over the float inputs and outputs."""
    p, _ = pkg
    xs, maybe = np.stack(XS), MAYBE
    dxs, dmaybe = RNG.standard_normal(xs.shape).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    tangents = p.seqs_jvp(xs, maybe, True, dxs, dmaybe)
    cts = [RNG.standard_normal(np.shape(t)).astype(np.float32) for t in tangents]
    grads = p.seqs_vjp(xs, maybe, True, *cts)
    lhs = sum(float(np.vdot(t, c)) for t, c in zip(tangents, cts))
    rhs = float(np.vdot(dxs, grads[0])) + float(np.vdot(dmaybe, grads[1]))
    assert lhs == pytest.approx(rhs, rel=1e-5)


def test_header_says_how_they_are_passed(pkg):
    p, _ = pkg
    header = (p.root / "include" / "seqs.h").read_text()
    assert "ONNX input xs is a sequence: its xs_len elements stacked along axis 0" in header
    assert "ONNX input maybe is optional: maybe_present says whether it is there" in header
    assert "ONNX output out_parts is a sequence" in header and "out_opt_present says" in header
    assert "int seqs_seqs(int64_t xs_len, int64_t m, const float* xs, const float* maybe, bool maybe_present," \
        in header


def _compile(tmp_path, nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path))
    return compile_onnx_kernel(path, "k")


def test_ragged_sequence_is_a_located_error(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, [h.make_node("SequenceConstruct", ["a", "b"], ["s"], name="mk")],
                 [h.make_tensor_value_info("a", T.FLOAT, [2]), h.make_tensor_value_info("b", T.FLOAT, [3])],
                 [h.make_tensor_sequence_value_info("s", T.FLOAT, None)])
    text = str(e.value)
    assert "m.onnx: node mk (SequenceConstruct)" in text and "different shapes" in text and "stacked" in text


def test_sequence_into_a_tensor_op_is_a_located_error(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, [h.make_node("Relu", ["s"], ["y"], name="r")],
                 [h.make_tensor_sequence_value_info("s", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    assert "node r (Relu)" in str(e.value) and "is a sequence; Relu takes tensors" in str(e.value)


def test_shapeless_sequence_elements_are_a_located_error(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, [h.make_node("Identity", ["s"], ["y"])],
                 [h.make_tensor_sequence_value_info("s", T.FLOAT, None)],
                 [h.make_tensor_sequence_value_info("y", T.FLOAT, None)])
    assert "graph input 's' has no shape" in str(e.value)


def test_declared_kind_must_match(tmp_path):
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, [h.make_node("Identity", ["x"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, [2])],
                 [h.make_tensor_sequence_value_info("y", T.FLOAT, [2])])
    assert "graph output 'y' is declared a sequence but its value is a tensor" in str(e.value)


def test_if_with_sequence_branches(tmp_path):
    """An If whose branches make sequences (of one shape) gives a sequence; the condition is a run-time input."""
    def branch(name, a, b):
        return h.make_graph([h.make_node("SequenceConstruct", [a, b], [name])], name, [],
                            [h.make_tensor_sequence_value_info(name, T.FLOAT, [3])])
    nodes = [h.make_node("Neg", ["x"], ["nx"]),
             h.make_node("If", ["c"], ["s"], then_branch=branch("t", "x", "nx"), else_branch=branch("e", "nx", "nx")),
             h.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    f = _compile(tmp_path, nodes, [h.make_tensor_value_info("c", T.BOOL, []),
                                   h.make_tensor_value_info("x", T.FLOAT, [3])],
                 [h.make_tensor_value_info("y", T.FLOAT, [6])])
    from ksbuild.ir.interp import eval_func
    x = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(eval_func(f, [np.bool_(True), x])[0], np.concatenate([x, -x]))
    np.testing.assert_array_equal(eval_func(f, [np.bool_(False), x])[0], np.concatenate([-x, -x]))


# ---- red-team findings ----------------------------------------------------------------------------------

def _build(tmp_path, m, exports='k = "k"\n'):
    onnx.save(m, str(tmp_path / "k.onnx"))
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "rt"\n\n[kernels.k]\nonnx = "k.onnx"\n\n'
                                            f'[exports]\n{exports}')
    return ksbuild.build(tmp_path / "manifest.toml", quiet=True)


def _unbind_model(keepdims_split: bool):
    """torch's exported unbind then stack: SplitToSequence(split=1 or none, keepdims=0), ConcatFromSequence."""
    nodes = ([h.make_node("Constant", [], ["one"], value=nh.from_array(np.array(1, np.int64)))] if keepdims_split
             else []) + [
        h.make_node("SplitToSequence", ["x", "one"] if keepdims_split else ["x"], ["s"], axis=0, keepdims=0),
        h.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 6])],
                     [h.make_tensor_value_info("y", T.FLOAT, [6, "batch"])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


@pytest.mark.parametrize("with_split", [False, True])
def test_unbind_with_a_dynamic_batch_matches_onnxruntime(tmp_path, with_split):
    ort = pytest.importorskip("onnxruntime")
    p = _build(tmp_path, _unbind_model(with_split))
    for batch in (1, 4):
        x = RNG.standard_normal((batch, 6)).astype(np.float32)
        want = ort.InferenceSession(str(tmp_path / "k.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(p.k(x), want[0])


def test_scalar_string_input_none_and_names(tmp_path):
    """A 0-d string input is callable; None is a CallError naming the argument; ksbuild's own names (a length
    dim, a present flag) never take a name of the model's."""
    nodes = [h.make_node("Equal", ["s", "k"], ["eq"]), h.make_node("SequenceLength", ["xs"], ["n"]),
             h.make_node("OptionalHasElement", ["a"], ["has"])]
    inputs = [h.make_tensor_value_info("s", T.STRING, []), h.make_tensor_sequence_value_info("xs", T.FLOAT, [2]),
              h.make_tensor_value_info("xs_len", T.FLOAT, ["xs_len"]),
              h.make_value_info("a", h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [3]))),
              h.make_tensor_value_info("a_present", T.FLOAT, [1])]
    outputs = [h.make_tensor_value_info("eq", T.BOOL, []), h.make_tensor_value_info("n", T.INT64, []),
               h.make_tensor_value_info("has", T.BOOL, [])]
    g = h.make_graph(nodes, "g", inputs, outputs, [nh.from_array(np.array("yes", dtype=object), "k")])
    p = _build(tmp_path, h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
    xs, other, a, flag = np.ones((5, 2), np.float32), np.ones(3, np.float32), np.ones(3, np.float32), \
        np.ones(1, np.float32)
    assert p.k("yes", xs, other, a, True, flag) == (True, 5, True)
    assert p.k(b"no", xs, other, a, False, flag) == (False, 5, False)
    with pytest.raises(p.k.CallError, match="argument 'a' is None"):
        p.k("yes", xs, other, None, False, flag)
    assert [x.get("param", x["name"]) for x in p.k.ins] == ["s", "xs", "xs_len", "a", "a_present2", "a_present"]


def test_torch_float16_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    g = h.make_graph([h.make_node("Mul", ["x", "x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT16, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT16, [2])])
    p = _build(tmp_path, h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
    y = p.k(torch.tensor([1.5, -2.0], dtype=torch.float16))
    assert y.dtype == torch.float16 and y.tolist() == [2.25, 4.0]


def test_initializers_of_a_branch(tmp_path):
    """A subgraph's own initializers (valid ONNX; onnxruntime runs it) are known values of that subgraph."""
    def branch(name, value):
        return h.make_graph([h.make_node("Identity", [f"{name}0"], [name])], name, [],
                            [h.make_tensor_value_info(name, T.FLOAT, [2])],
                            [nh.from_array(np.array(value, np.float32), f"{name}0")])
    node = h.make_node("If", ["c"], ["y"], then_branch=branch("t", [1, 2]), else_branch=branch("e", [3, 4]))
    g = h.make_graph([node], "g", [h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2])])
    p = _build(tmp_path, h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
    assert p.k(True).tolist() == [1, 2] and p.k(False).tolist() == [3, 4]


MALFORMED = {
    "split_zero": ([h.make_node("SplitToSequence", ["x", "z"], ["s"], name="n0")], [np.array(0, np.int64)],
                   "split must hold positive sizes"),
    "split_empty": ([h.make_node("SplitToSequence", ["x", "z"], ["s"], name="n0")], [np.zeros(0, np.int64)],
                    "split must hold positive sizes"),
    "split_uneven": ([h.make_node("SplitToSequence", ["x", "z"], ["s"], name="n0")], [np.array([1, 3], np.int64)],
                     "they differ"),
    "erase_two_positions": ([h.make_node("SplitToSequence", ["x"], ["t"]),
                             h.make_node("SequenceErase", ["t", "z"], ["s"], name="n0")], [np.array([0, 1], np.int64)],
                            "the position must be one integer"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_sequence_ops_are_located_errors(tmp_path, case):
    nodes, consts, message = MALFORMED[case]
    inits = [nh.from_array(c, "z") for c in consts]
    with pytest.raises(KsbuildError) as e:
        _compile(tmp_path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 2])],
                 [h.make_tensor_sequence_value_info("s", T.FLOAT, None)], inits)
    assert "node n0" in str(e.value) and message in str(e.value)
