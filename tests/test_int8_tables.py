"""int8 models' float regions as 256-entry tables (transforms/tabulate.py, the qlookup prim, ks::qlookup).

A QDQ model's SiLU (DQ → Sigmoid → Q → DQ, times DQ of the same tensor, → Q) and hardswish read one 8-bit tensor
and write one: each is tabulated. The oracle for the table is the float path itself: the same model with fewer
elements than tabulate.MIN_ELEMENTS is compiled without a table, and fed every byte once, it gives the table that
the big model, fed every byte many times, must reproduce bit for bit (onnxruntime within one quantization step: it
computes QLinearSigmoid with its own logistic). A squeeze-excite product x · s of two 8-bit tensors is not a function
of one byte: no table, but QLinearMul with onnxruntime's rounding, equal to its outputs.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

U8, I8 = TensorProto.UINT8, TensorProto.INT8
BIG, SMALL = 32, 8  # sides of [1, 4, side, side]: 4096 elements (tabulated) and 256 (not)


def _qdq(name, x, scale, zero, dtype):
    """Q then DQ of float x: nodes, initializers and the dequantized name."""
    inits = [numpy_helper.from_array(np.float32(scale), f"{name}_s"),
             numpy_helper.from_array(np.array(zero, dtype), f"{name}_z")]
    nodes = [helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
             helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"])]
    return nodes, inits, f"{name}_dq"


def _model(nodes, inits, inputs, out, dtype):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, dtype, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _dequantized_input(side, dtype, np_dtype, zero):
    x = helper.make_tensor_value_info("x", dtype, [1, 4, side, side])
    inits = [numpy_helper.from_array(np.float32(0.05), "xs"), numpy_helper.from_array(np.array(zero, np_dtype), "xz")]
    return x, inits, [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"])]


def silu(side):
    """u8 x → SiLU as onnxruntime's QDQ quantizer writes it → u8."""
    x, inits, nodes = _dequantized_input(side, U8, np.uint8, 131)
    nodes.append(helper.make_node("Sigmoid", ["xf"], ["sig"]))
    more, more_inits, sig = _qdq("sig", "sig", 1 / 255, 0, np.uint8)
    nodes += more + [helper.make_node("Mul", ["xf", sig], ["prod"])]
    tail, tail_inits, _ = _qdq("y", "prod", 0.031, 9, np.uint8)
    return _model(nodes + tail[:1], inits + more_inits + tail_inits, [x], "y_q", U8)


def hardswish(side):
    """i8 x → HardSwish → i8."""
    x, inits, nodes = _dequantized_input(side, I8, np.int8, -7)
    nodes.append(helper.make_node("HardSwish", ["xf"], ["hs"]))
    tail, tail_inits, _ = _qdq("y", "hs", 0.027, -100, np.int8)
    return _model(nodes + tail[:1], inits + tail_inits, [x], "y_q", I8)


def squeeze_excite(side):
    """u8 x [1, 4, side, side] times u8 s [1, 4, 1, 1] (a scale per channel) → u8: two tensors, no table."""
    x, inits, nodes = _dequantized_input(side, U8, np.uint8, 131)
    s = helper.make_tensor_value_info("s", U8, [1, 4, 1, 1])
    inits += [numpy_helper.from_array(np.float32(1 / 255), "ss"), numpy_helper.from_array(np.uint8(0), "sz")]
    nodes += [helper.make_node("DequantizeLinear", ["s", "ss", "sz"], ["sf"]),
              helper.make_node("Mul", ["xf", "sf"], ["prod"])]
    tail, tail_inits, _ = _qdq("y", "prod", 0.04, 5, np.uint8)
    return _model(nodes + tail[:1], inits + tail_inits, [x, s], "y_q", U8)


MODELS = {"silu": (silu, np.uint8), "hardswish": (hardswish, np.int8), "se": (squeeze_excite, np.uint8)}


def _every_byte(side, dtype):
    """[1, 4, side, side] holding each of the 256 bytes side² / 64 times."""
    return np.tile(np.arange(256, dtype=np.uint8).view(dtype), 4 * side * side // 256).reshape(1, 4, side, side)


def _feeds(name, side):
    feeds = {"x": _every_byte(side, MODELS[name][1])}
    if name == "se":
        feeds["s"] = np.array([17, 77, 137, 197], np.uint8).reshape(1, 4, 1, 1)
    return feeds


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    import ksbuild
    root = tmp_path_factory.mktemp("int8_tables")
    lines = ['[package]\nname = "int8_tables"\nversion = "0.1.0"\n']
    exports = []
    for name, (make, _) in MODELS.items():
        for size, side in (("big", BIG), ("small", SMALL)):
            onnx.save(make(side), root / f"{name}_{size}.onnx")
            lines.append(f'[kernels.{name}_{size}]\nonnx = "{name}_{size}.onnx"\n')
            exports.append(f"{name}_{size}")
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in exports))
    (root / "manifest.toml").write_text("\n".join(lines))
    return root, ksbuild.build(root / "manifest.toml", quiet=True)


def _lowered(root):
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest
    from ksbuild.transforms.pipeline import lower
    exports = build_exports(load_manifest(root / "manifest.toml"), after="transforms")
    return {e.name: (e.func, lower(e.func)) for e in exports}


def _prims(f):
    from ksbuild.transforms.rewrite import walk_funcs
    return {e.prim.name for g in walk_funcs(f) for e in g.eqns}


def test_which_regions_become_tables(pkg):
    """SiLU and hardswish over 4096 elements become a qlookup, over 256 they stay float; x · s never does."""
    root, _ = pkg
    lowered = _lowered(root)
    assert {n for n, (_, f) in lowered.items() if "qlookup" in _prims(f)} == {"silu_big", "hardswish_big"}
    assert "mul" in _prims(lowered["se_big"][0])


@pytest.mark.parametrize("name", ["silu", "hardswish"])
def test_a_table_equals_the_float_path_bit_for_bit(pkg, name):
    """The big model (a table) on every byte equals the small one (float loops) on every byte, and onnxruntime
    within one step."""
    root, p = pkg
    table = np.asarray(getattr(p, f"{name}_big")(*_feeds(name, BIG).values())).reshape(-1, 256)
    floats = np.asarray(getattr(p, f"{name}_small")(*_feeds(name, SMALL).values())).reshape(-1, 256)
    assert (table == floats[:1]).all(), f"{np.count_nonzero(table != floats[:1])} of {table.size} differ"
    assert (floats == floats[:1]).all()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(str(root / f"{name}_big.onnx"), so, providers=["CPUExecutionProvider"]).run(
        None, _feeds(name, BIG))[0]
    assert np.abs(want.reshape(-1, 256).astype(np.int32) - table.astype(np.int32)).max() <= 1


def test_a_product_of_two_tensors_is_not_tabulated_and_stays_exact(pkg):
    """x · s (squeeze-excite) reads two 8-bit tensors: not a table; folded into QLinearMul (frontends/onnx/qdq.py),
    it computes as onnxruntime's does, bit for bit, and as the interpreter does."""
    from ksbuild.ir.interp import eval_func
    root, p = pkg
    feeds = _feeds("se", BIG)
    got = np.asarray(p.se_big(*feeds.values()))
    func, _ = _lowered(root)["se_big"]
    assert np.array_equal(got, np.asarray(eval_func(func, list(feeds.values()))[0]))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(str(root / "se_big.onnx"), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {got.size} differ"


def test_tabulate_keeps_the_interpreters_values(pkg):
    """The pass is exact in the reference interpreter too (before and after it, the same bytes)."""
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.pipeline import lower
    from ksbuild.transforms.tabulate import regions, tabulate
    root, _ = pkg
    f = lower(_lowered(root)["silu_big"][0], after="cse")
    assert len(regions(f)) == 2  # (the quantized sigmoid inside, and the SiLU around it; the first is dropped)
    feeds = list(_feeds("silu", BIG).values())
    assert np.array_equal(np.asarray(eval_func(tabulate(f), feeds)[0]), np.asarray(eval_func(f, feeds)[0]))


def test_a_region_that_reads_the_position_is_not_a_table():
    """x's byte plus its element's index (an iota) is not a function of the byte alone: no table; without the iota,
    the same region is one."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Lit, Var
    from ksbuild.ir.types import Type
    from ksbuild.transforms.tabulate import regions
    for positional in (True, False):
        b = Builder()
        x = Var(Type("u8", (4096,)))
        v = b.mul(b.convert(x, dtype="f32"), Lit(0.5, Type("f32")))
        if positional:
            v = b.add(v, b.iota(shape=(4096,), axis=0, dtype="f32"))
        y = b.convert(b.min(v, Lit(255.0, Type("f32"))), dtype="u8")
        assert len(regions(b.func("f", [x], [y]))) == (0 if positional else 1)
