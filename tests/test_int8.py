"""int8 models against onnxruntime (issue: integer kernels in the kernel layer).

- Single operators built with onnx.helper (QLinearConv over strides, padding, dilations, groups, depthwise
  multipliers, per-channel scales, int8 and uint8 activations and outputs (of one type, as onnxruntime takes
  them); QLinearMatMul (of constant weights, and of two activations: attention's); MatMulInteger (int32 results, a
  zero point constant or DynamicQuantizeLinear's); com.microsoft QGemm with a bias, transB and a float output; the
  other com.microsoft quantized operators), all exports of one package, each
  compared with onnxruntime: the products, QLinearMul, QLinearGlobalAveragePool and QLinearAdd bit for bit
  (QLinearAdd over every pair of bytes at scales where the schema's definition rounds otherwise; bit for bit on
  x86-64 with FMA), the other
  float-defined operators (QLinearSigmoid, ...) within one quantization step, since onnxruntime computes those its
  own way (docs/quantization.md).
- Whole models: a small CNN (convolutions, a depthwise one, max pooling, a residual Add, global average pooling, a
  linear layer) and an MLP, quantized with onnxruntime's quantize_static in its QDQ and QOperator formats. The QDQ
  patterns fold into integer operators (frontends/onnx/qdq.py) as onnxruntime's optimizer folds them: outputs equal
  onnxruntime's bit for bit (on x86-64 with FMA; elsewhere within one step of the residual Add), and
  the quantized model's top-1 agrees with the float model's (a wrong requantization cannot hide behind "runs").
- The generated C++ calls the integer kernels (ks::qconv, ks::qmatmul), and the IR interpreter agrees with the
  compiled code.
"""
from __future__ import annotations

import numpy as np
import ort_oracle
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.RandomState(0)
U8, I8 = TensorProto.UINT8, TensorProto.INT8
NP = {U8: np.uint8, I8: np.int8}


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits, opset=17, ms=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(graph, opset_imports=imports)
    m.ir_version = 8
    return m


def _bytes(shape, dtype):
    lo = -128 if dtype == I8 else 0
    return RNG.randint(lo, lo + 256, size=shape).astype(NP[dtype])


def qlinear_conv(c, m, hw, k, stride=1, pad=0, dil=1, group=1, xt=U8, yt=U8, per_channel=False, bias=True,
                 rank=2):
    """A QLinearConv model and an input for it."""
    xs, ws, ys = np.float32(0.02), np.float32(0.01), np.float32(0.05)
    w_scale = (RNG.rand(m).astype(np.float32) * 0.02 + 0.002) if per_channel else np.array(ws, np.float32)
    spatial = (hw,) * rank
    inits = [_init("xs", xs), _init("xz", np.array(7 if xt == U8 else -3, NP[xt])), _init("w", _bytes(
        (m, c // group) + (k,) * rank, I8)), _init("ws", w_scale), _init("wz", np.zeros(w_scale.shape, np.int8)),
        _init("ys", ys), _init("yz", np.array(120 if yt == U8 else 5, NP[yt]))]
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(_init("b", RNG.randint(-3000, 3000, size=m).astype(np.int32)))
        ins.append("b")
    node = helper.make_node("QLinearConv", ins, ["y"], strides=[stride] * rank, pads=[pad] * 2 * rank,
                            dilations=[dil] * rank, group=group)
    x = helper.make_tensor_value_info("x", xt, [1, c, *spatial])
    y = helper.make_tensor_value_info("y", yt, None)
    return _model([node], [x], [y], inits), {"x": _bytes((1, c, *spatial), xt)}


def qlinear_matmul(rows, k, n, xt=U8, yt=U8):
    inits = [_init("as", np.float32(0.03)), _init("az", np.array(9 if xt == U8 else -9, NP[xt])),
             _init("b", _bytes((k, n), I8)), _init("bs", np.float32(0.01)), _init("bz", np.int8(0)),
             _init("ys", np.float32(0.2)), _init("yz", np.array(100 if yt == U8 else 0, NP[yt]))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    return _model([node], [helper.make_tensor_value_info("a", xt, [rows, k])],
                  [helper.make_tensor_value_info("y", yt, None)], inits), {"a": _bytes((rows, k), xt)}


def qlinear_matmul_activations(batch, m, k, n, at=U8, bt=U8, yt=U8):
    """QLinearMatMul of two 8-bit activations a [*batch, m, k] and b [*batch, k, n] (an attention product), both with
    zero points (b's taken apart from its bytes on ks::qmatmul: ops_quant.py, _activation_product)."""
    inits = [_init("as", np.float32(0.031)), _init("az", np.array(121 if at == U8 else -7, NP[at])),
             _init("bs", np.float32(0.017)), _init("bz", np.array(140 if bt == U8 else 5, NP[bt])),
             _init("ys", np.float32(0.9)), _init("yz", np.array(118 if yt == U8 else -3, NP[yt]))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inputs = [helper.make_tensor_value_info("a", at, [*batch, m, k]), helper.make_tensor_value_info("b", bt, [*batch, k, n])]
    return _model([node], inputs, [helper.make_tensor_value_info("y", yt, None)], inits), \
        {"a": _bytes((*batch, m, k), at), "b": _bytes((*batch, k, n), bt)}


SOFTMAX_PARAMS = (0.005, 0, 1 / 16384, 0)  # x_scale, x_zero, y_scale, y_zero: most results between 60 and 240


def qlinear_softmax_rows(rows=4096, n=128, params=SOFTMAX_PARAMS, t=U8, seed=5):
    """com.microsoft QLinearSoftmax (opset 13, last axis) of random rows of n bytes (by default 4096 of 128,
    attention's, with SOFTMAX_PARAMS: results mostly far from 0 and 255, where a row sum or a quotient one bit off
    flips a rounding now and then: test_qlinear_softmax_rows_discriminate)."""
    lo, hi = (0, 256) if t == U8 else (-128, 128)
    x = np.random.default_rng(seed).integers(lo, hi, (rows, n)).astype(NP[t])
    inits = [_init(k, np.float32(v) if k[0] == "s" else np.array(v, NP[t])) for k, v in zip(("sx", "zx", "sy", "zy"),
                                                                                          params)]
    node = helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft", axis=-1,
                            opset=13)
    return _model([node], [helper.make_tensor_value_info("x", t, list(x.shape))],
                  [helper.make_tensor_value_info("y", t, None)], inits, ms=True), {"x": x}


def qgemm(rows, k, n, trans_b=0, float_out=False, per_column=False):
    b = _bytes((n, k) if trans_b else (k, n), I8)
    b_scale = RNG.rand(n).astype(np.float32) * 0.02 + 0.001 if per_column else np.array(0.01, np.float32)
    inits = [_init("as", np.float32(0.03)), _init("az", np.uint8(11)), _init("b", b), _init("bs", b_scale),
             _init("bz", np.zeros(b_scale.shape, np.int8)), _init("c", RNG.randint(-500, 500, n).astype(np.int32))]
    ins = ["a", "as", "az", "b", "bs", "bz", "c"]
    if not float_out:
        inits += [_init("ys", np.float32(0.1)), _init("yz", np.uint8(128))]
        ins += ["ys", "yz"]
    node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", transB=trans_b)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT if float_out else U8, None)
    return _model([node], [helper.make_tensor_value_info("a", U8, [rows, k])], [out], inits, ms=True), \
        {"a": _bytes((rows, k), U8)}


def matmul_integer(shape, n, zero=None):
    """MatMulInteger of uint8 a (zero point `zero`, or, with None, quantized at run time by DynamicQuantizeLinear
    from a float input: its zero point then known only at run time) by constant int8 weights [K, n]: int32 sums."""
    k = shape[-1]
    inits = [_init("b", _bytes((k, n), I8)), _init("bz", np.int8(0))]
    if zero is None:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["a", "as", "az"]),
                 helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
        inputs, feeds = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], \
            {"x": (RNG.randn(*shape) * 3 + 1).astype(np.float32)}
    else:
        inits.append(_init("az", np.uint8(zero)))
        nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
        inputs, feeds = [helper.make_tensor_value_info("a", U8, shape)], {"a": _bytes(shape, U8)}
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits), feeds


def dynamic_quantize_matmul(shape, n):
    """com.microsoft DynamicQuantizeMatMul (onnxruntime's fused dynamic product): float a, constant int8 weights with
    a scale per column, a bias; float results."""
    k = shape[-1]
    inits = [_init("b", _bytes((k, n), I8)), _init("bs", (RNG.rand(n) * 0.02 + 0.001).astype(np.float32)),
             _init("bz", np.zeros(n, np.int8)), _init("c", RNG.randn(n).astype(np.float32))]
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "c"], ["y"], domain="com.microsoft")
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, ms=True), \
        {"x": (RNG.randn(*shape) * 2 - 0.5).astype(np.float32)}


def contrib(op, **attrs):
    """A com.microsoft quantized operator of uint8 tensors [1, 8, 5, 5]."""
    shape = [1, 8, 5, 5]
    inits = [_init("s1", np.float32(0.05)), _init("z1", np.uint8(100)), _init("s2", np.float32(0.03)),
             _init("z2", np.uint8(30)), _init("s3", np.float32(0.07)), _init("z3", np.uint8(60))]
    feeds = {"a": _bytes(shape, U8), "b": _bytes(shape, U8)}
    inputs = [helper.make_tensor_value_info(n, U8, shape) for n in ("a", "b")]
    if op in ("QLinearAdd", "QLinearMul"):
        ins = ["a", "s1", "z1", "b", "s2", "z2", "s3", "z3"]
    elif op == "QLinearConcat":
        ins = ["s3", "z3", "a", "s1", "z1", "b", "s2", "z2"]
    elif op == "QLinearAveragePool":
        ins = ["a", "s1", "z1", "s3", "z3"]
        attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], **attrs)
    else:
        ins = ["a", "s1", "z1", "s3", "z3"]
    if "b" not in ins:
        inputs, feeds = inputs[:1], {"a": feeds["a"]}
    node = helper.make_node(op, ins, ["y"], domain="com.microsoft", **attrs)
    return _model([node], inputs, [helper.make_tensor_value_info("y", U8, None)], inits, ms=True), feeds


def qlinear_add_pairs(dtype, params):
    """com.microsoft QLinearAdd of every pair of bytes (two [65536] tensors), with scales (of 4 decimals) and zero
    points (a_scale, a_zero, b_scale, b_zero, y_scale, y_zero) at which the schema's definition (dequantize, add,
    quantize in f32) rounds hundreds of the 65536 sums other than onnxruntime's AVX2 kernel does."""
    values = np.arange(-128, 128) if dtype == I8 else np.arange(256)
    a, b = (v.reshape(-1).astype(NP[dtype]) for v in np.meshgrid(values, values, indexing="ij"))
    names = ("sa", "za", "sb", "zb", "sc", "zc")
    inits = [_init(n, np.float32(v) if n[0] == "s" else np.array(v, NP[dtype])) for n, v in zip(names, params)]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")
    inputs = [helper.make_tensor_value_info(n, dtype, [65536]) for n in ("a", "b")]
    return _model([node], inputs, [helper.make_tensor_value_info("y", dtype, None)], inits, ms=True), {"a": a, "b": b}


def qlinear_gap(dtype, shape, params):
    """com.microsoft QLinearGlobalAveragePool of `shape` with (x_scale, x_zero, y_scale, y_zero)."""
    inits = [_init(n, np.float32(v) if n[0] == "s" else np.array(v, NP[dtype]))
             for n, v in zip(("sx", "zx", "sy", "zy"), params)]
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                            channels_last=0)
    return _model([node], [helper.make_tensor_value_info("x", dtype, shape)],
                  [helper.make_tensor_value_info("y", dtype, None)], inits, ms=True), {"x": _bytes(shape, dtype)}


def extreme_weights(shape):
    """int8 weights of -128, of 127, and of the two in turn along the depth, by output channel (axis 0)."""
    w = np.empty(shape, np.int8)
    for j in range(shape[0]):
        w[j] = -128 if j % 3 == 0 else 127
        if j % 3 == 2:
            w[j].reshape(-1)[1::2] = -128
    return w


def qlinear_extreme(kind, rows, k, n):
    """A QLinearMatMul ([rows, k] x [k, n]) or 3 x 3 QLinearConv (k channels, n outputs, rows x rows image) whose
    activations are all 255 from their zero point and whose weights are -128 or 127 (extreme_weights): two adjacent
    products sum to -65280 or 64770, beyond int16 (where vpmaddubsw saturates), the output scale mapping each sum
    into range."""
    taps = 1 if kind == "matmul" else 9
    ys = np.float32(0.02 * 0.01 * 255 * 128 * k * taps / 100)
    if kind == "matmul":
        w = extreme_weights((n, k)).T.copy()
        shape, name, op, attrs = [rows, k], "a", "QLinearMatMul", {}
    else:
        w = extreme_weights((n, k, 3, 3))
        shape, name, op, attrs = [1, k, rows, rows], "x", "QLinearConv", {"pads": [1, 1, 1, 1]}
    inits = [_init("xs", np.float32(0.02)), _init("xz", np.uint8(0)), _init("w", w), _init("ws", np.float32(0.01)),
             _init("wz", np.int8(0)), _init("ys", ys), _init("yz", np.uint8(128))]
    node = helper.make_node(op, [name, "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], **attrs)
    return _model([node], [helper.make_tensor_value_info(name, U8, shape)],
                  [helper.make_tensor_value_info("y", U8, None)], inits), {name: np.full(shape, 255, np.uint8)}


EXACT = {  # name -> (model, feeds): onnxruntime's products, bit for bit
    "conv_3x3": qlinear_conv(8, 16, 12, 3, pad=1),
    "conv_stride2": qlinear_conv(6, 20, 13, 3, stride=2, pad=1, per_channel=True),
    "conv_dilated": qlinear_conv(5, 9, 11, 3, dil=2, pad=2, bias=False),
    "conv_1x1_i8": qlinear_conv(16, 24, 7, 1, xt=I8, yt=I8),
    "conv_grouped": qlinear_conv(12, 18, 9, 3, group=3, pad=1, xt=I8, yt=I8),
    "conv_depthwise": qlinear_conv(16, 16, 10, 3, group=16, pad=1, per_channel=True),
    "conv_depthwise_s2": qlinear_conv(8, 16, 15, 5, stride=2, pad=2, group=8, xt=I8, yt=I8),
    "conv_1d": qlinear_conv(4, 10, 40, 5, stride=3, pad=2, rank=1),
    "matmul_one_row": qlinear_matmul(1, 50, 70),
    "matmul_i8": qlinear_matmul(37, 33, 20, xt=I8, yt=I8),
    "qgemm": qgemm(5, 40, 30),
    "qgemm_trans_b_per_column": qgemm(3, 24, 40, trans_b=1, per_column=True),
    "qgemm_float_out": qgemm(4, 16, 12, float_out=True),
    "qlinear_mul": contrib("QLinearMul"),  # (computed as onnxruntime's MLAS computes it: ops/quant.py)
    "qlinear_add": contrib("QLinearAdd"),  # (likewise, where the level has FMA: x86-64-v3 and v4)
    "qlinear_add_pairs_u8": qlinear_add_pairs(U8, (0.0054, 30, 0.0148, 77, 0.0068, 97)),
    "qlinear_add_pairs_i8": qlinear_add_pairs(I8, (0.0051, 105, 0.0048, 0, 0.0074, -15)),
    "qlinear_gap": contrib("QLinearGlobalAveragePool"),  # (an int32 sum and one scale, as onnxruntime)
    "qlinear_gap_u8": qlinear_gap(U8, [2, 40, 25, 5], (0.0131, 77, 0.0042, 201)),
    "qlinear_gap_i8": qlinear_gap(I8, [2, 40, 13, 11], (0.0483, -20, 0.0029, 35)),
    "matmul_extreme": qlinear_extreme("matmul", 9, 1024, 40),
    "matmul_integer": matmul_integer([13, 70], 45, zero=131),  # (int32 results of ks::qmatmul)
    "matmul_integer_dynamic": matmul_integer([2, 9, 40], 70),  # (the zero point DynamicQuantizeLinear's)
    "dynamic_quantize_matmul": dynamic_quantize_matmul([3, 5, 24], 20),  # (float results: to rtol 1e-6)
    "conv_extreme": qlinear_extreme("conv", 6, 64, 24),
    "matmul_activations": qlinear_matmul_activations((2, 3), 9, 20, 35),  # (one ks::qmatmul per matrix)
    "matmul_activations_i8": qlinear_matmul_activations((4,), 5, 8, 40, at=I8, bt=I8, yt=I8),
    # QLinearSoftmax: onnxruntime's table (of logf), the row sums left to right in f32, the quotients in double
    "qlinear_softmax": contrib("QLinearSoftmax", axis=-1, opset=13),
    "qlinear_softmax_rows": qlinear_softmax_rows(),
    "qlinear_softmax_short_rows": qlinear_softmax_rows(512, 77),  # (e · floor(1 / y_scale) past FLT_MAX in f32)
    "qlinear_softmax_i8": qlinear_softmax_rows(300, 40, (0.11, -3, 1 / 256, -128), I8, seed=6),  # (127s saturate)
}
WITHIN_ONE_STEP = {  # float-defined operators that onnxruntime computes with its own rounding
    "qlinear_concat": contrib("QLinearConcat", axis=1),
    "qlinear_avgpool": contrib("QLinearAveragePool"),
    "qlinear_sigmoid": contrib("QLinearSigmoid"),
    "qlinear_leaky_relu": contrib("QLinearLeakyRelu", alpha=0.1),
}


def _fma_host() -> bool:
    """Whether this is an x86-64 machine of level v3 or v4 (FMA): ksbuild's QLinearAdd is onnxruntime's AVX2 kernel's
    arithmetic there (ops/quant.py: add_quantized)."""
    import platform

    from ksbuild.compile.targets import host_level
    return platform.machine() in ("x86_64", "AMD64") and host_level() != "x86-64"


FMA_HOST = _fma_host()


def _ort(model_path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort_oracle.session(model_path, so).run(None, feeds)[0]  # (exact where its u8 x s8 pairs saturate)


@pytest.fixture(scope="module")
def ops_pkg(tmp_path_factory):
    import ksbuild
    root = tmp_path_factory.mktemp("int8_ops")
    lines = ['[package]\nname = "int8_ops"\nversion = "0.1.0"\n']
    for name, (model, _) in {**EXACT, **WITHIN_ONE_STEP}.items():
        onnx.save(model, root / f"{name}.onnx")
        lines.append(f'[kernels.{name}]\nonnx = "{name}.onnx"\n')
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in {**EXACT, **WITHIN_ONE_STEP}))
    (root / "manifest.toml").write_text("\n".join(lines))
    return root, ksbuild.build(root / "manifest.toml", quiet=True)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_integer_products_equal_onnxruntime(ops_pkg, name):
    root, pkg = ops_pkg
    feeds = EXACT[name][1]
    want = _ort(root / f"{name}.onnx", feeds)
    got = np.asarray(getattr(pkg, name)(*feeds.values()))
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())  # (a + b·c: contracted or not)
    elif name.startswith("qlinear_add") and not FMA_HOST:  # (onnxruntime's SSE2 or NEON kernel; ours unfused)
        assert np.abs(got.astype(np.int32) - want).max() <= 1
    else:
        assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {want.size} differ"


@pytest.mark.parametrize("name", ["qlinear_add_pairs_u8", "qlinear_add_pairs_i8"])
def test_qlinear_add_pairs_discriminate(ops_pkg, name):
    """The byte pairs of the QLinearAdd tests above are ones where rounding matters: the schema's definition in
    f32 (what ksbuild computed before it took onnxruntime's arithmetic), with or without a fused product, differs
    from onnxruntime's on some of them, so test_integer_products_equal_onnxruntime's equality there is a check."""
    root, _ = ops_pkg
    model, feeds = EXACT[name]
    want = _ort(root / f"{name}.onnx", feeds).astype(np.int64)
    s = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    lo, hi = (-128, 127) if s["zc"].dtype == np.int8 else (0, 255)
    f32 = np.float32
    a, b = (feeds[k].astype(f32) - f32(s[z]) for k, z in (("a", "za"), ("b", "zb")))
    for total in (a * s["sa"] + b * s["sb"], (a.astype(np.float64) * s["sa"] + b * s["sb"]).astype(f32)):
        definition = np.clip(np.rint(total / s["sc"]) + int(s["zc"]), lo, hi)
        assert np.count_nonzero(definition != want) > 20


def _softmax_emulation(x, params, log=np.log, lanes=1, quotient=np.float64):
    """QLinearSoftmax of rows x in numpy: the table with shift log(FLT_MAX / n) - 5 (log: the f32 one or math.log's
    double), each row's f32 sum in `lanes` running sums added together at the end, the quotient in `quotient`."""
    import math
    f32 = np.float32
    sx, _, sy, zy = params
    n = x.shape[-1]
    shift = max(0.0, float(log(f32(np.finfo(f32).max) / f32(n))) - 5.0) / float(f32(sx))
    table = np.exp((np.arange(256) - 255 + shift) * float(f32(sx))).astype(f32)
    xi = x.astype(np.int64)
    e = table[xi - xi.max(-1, keepdims=True) + 255]
    acc = np.zeros((x.shape[0], lanes), f32)
    for k in range(0, n, lanes):
        acc[:, :min(lanes, n - k)] += e[:, k:k + lanes]
    total = acc[:, 0]
    for j in range(1, lanes):
        total = (total + acc[:, j]).astype(f32)
    with np.errstate(over="ignore"):
        q = (e.astype(quotient) * quotient(math.floor(f32(1) / f32(sy)))) / total[:, None].astype(quotient)
    lo, hi = (-128, 127) if x.dtype == np.int8 else (0, 255)
    return np.clip(np.rint(np.minimum(q, hi - zy + 1.0)) + zy, lo, hi)


def test_qlinear_softmax_rows_discriminate(ops_pkg):
    """Where QLinearSoftmax's rows round: onnxruntime 1.32 equals the emulation of ks::qsoftmax's arithmetic on every
    value, and each of what it replaced (until the fourteenth session: the shift's log in double, the sums in 16
    lanes, the quotient in f32) differs on some, so test_integer_products_equal_onnxruntime's equality is a check."""
    import math
    root, _ = ops_pkg
    for name in ("qlinear_softmax_rows", "qlinear_softmax_short_rows"):
        x = EXACT[name][1]["x"]
        want = _ort(root / f"{name}.onnx", {"x": x}).astype(np.int64)
        assert np.array_equal(_softmax_emulation(x, SOFTMAX_PARAMS), want)
        for variant in (dict(log=math.log), dict(lanes=16), dict(quotient=np.float32)):
            assert np.count_nonzero(_softmax_emulation(x, SOFTMAX_PARAMS, **variant) != want) > 0, (name, variant)
    # (rows of 77: e · floor(1 / y_scale) overflows in f32 for a third of the values)
    x = EXACT["qlinear_softmax_short_rows"][1]["x"]
    assert np.count_nonzero(_softmax_emulation(x, SOFTMAX_PARAMS, quotient=np.float32) == 255) > x.size // 10


@pytest.mark.parametrize("name", sorted(WITHIN_ONE_STEP))
def test_float_defined_quantized_ops_within_one_step(ops_pkg, name):
    root, pkg = ops_pkg
    feeds = WITHIN_ONE_STEP[name][1]
    want = _ort(root / f"{name}.onnx", feeds).astype(np.int32)
    got = np.asarray(getattr(pkg, name)(*feeds.values())).astype(np.int32)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1


def test_generated_code_calls_the_integer_kernels(ops_pkg):
    root, _ = ops_pkg
    from ksbuild.exports import build_exports
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.render import render_project
    out = root / "rendered"
    m = load_manifest(root / "manifest.toml")
    render_project(m, build_exports(m), out)
    cpp = (out / "src" / "int8_ops.cpp").read_text()
    assert "ks::qconv<uint8_t, uint8_t>" in cpp and "ks::qconv_depthwise<" in cpp
    assert "ks::qmatmul<int8_t, int8_t>" in cpp and "ks::qmatmul<uint8_t, int32_t>" in cpp
    assert "ks::qconv<int8_t, int8_t>" in cpp  # (the grouped convolution of int8 activations)
    assert "ks::qsoftmax<uint8_t>" in cpp and "ks::qsoftmax<int8_t>" in cpp


def test_interpreter_equals_compiled(ops_pkg):
    """The prims' reference semantics (prims/qlinear.py, numpy) and the C++ kernels agree."""
    from ksbuild.exports import build_exports
    from ksbuild.ir.interp import eval_func
    from ksbuild.manifest import load_manifest
    root, pkg = ops_pkg
    exports = {e.name: e for e in build_exports(load_manifest(root / "manifest.toml"))}
    for name in ("conv_stride2", "conv_depthwise_s2", "matmul_i8", "qgemm_trans_b_per_column",
                 "matmul_integer_dynamic"):
        feeds = EXACT[name][1]
        want = eval_func(exports[name].func, list(feeds.values()))[0]
        assert np.array_equal(np.asarray(getattr(pkg, name)(*feeds.values())), np.asarray(want)), name


# ---- whole models quantized by onnxruntime -----------------------------------------------------------------------

def _float_models(root):
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.pw = nn.Conv2d(16, 32, 1)
            self.c2 = nn.Conv2d(32, 32, 3, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = torch.nn.functional.max_pool2d(torch.relu(self.pw(torch.relu(self.dw(x)))), 2)
            x = x + torch.relu(self.c2(x))
            return self.fc(x.mean((2, 3)))

    mlp = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 48), nn.ReLU(), nn.Linear(48, 10))
    paths = {}
    for name, model, shape in (("cnn", Cnn().eval(), (1, 3, 24, 24)), ("mlp", mlp.eval(), (1, 64))):
        paths[name] = (root / f"{name}_f32.onnx", shape)
        torch.onnx.export(model, torch.randn(*shape), paths[name][0], input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17)
    return paths


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    import ksbuild
    root = tmp_path_factory.mktemp("int8_models")
    models = {}
    for name, (path, shape) in _float_models(root).items():
        for fmt in ("qdq", "qop"):
            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.batches = iter([{"x": np.random.RandomState(i).randn(*shape).astype(np.float32)}
                                         for i in range(16)])

                def get_next(self):
                    return next(self.batches, None)
            out = root / f"{name}_{fmt}.onnx"
            quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                            QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            per_channel=name == "cnn")
            models[f"{name}_{fmt}"] = (out, shape)
        models[f"{name}_f32"] = (path, shape)
    lines = ['[package]\nname = "int8_models"\nversion = "0.1.0"\n']
    for name, (path, _) in models.items():
        lines.append(f'[kernels.{name}]\nonnx = "{path.name}"\n')
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in models))
    (root / "manifest.toml").write_text("\n".join(lines))
    return models, ksbuild.build(root / "manifest.toml", quiet=True)


@pytest.mark.parametrize("name", ["cnn_qdq", "cnn_qop", "mlp_qdq", "mlp_qop"])
def test_quantized_models_match_onnxruntime(quantized, name):
    models, pkg = quantized
    path, shape = models[name]
    for seed in range(4):
        x = np.random.RandomState(100 + seed).randn(*shape).astype(np.float32)
        want = _ort(path, {"x": x})
        got = np.asarray(getattr(pkg, name)(x))
        if FMA_HOST:  # (every operator onnxruntime's arithmetic: the CNN's residual Add is a QLinearAdd)
            assert np.array_equal(got, want), f"{name}: {np.count_nonzero(got != want)} of {want.size} differ"
            continue
        step = np.abs(want[want != 0]).min() if np.any(want != 0) else 1.0  # (outputs are dequantized: k·scale)
        assert np.abs(got - want).max() <= 1.01 * step, name


@pytest.mark.parametrize("family", ["cnn", "mlp"])
def test_quantized_top1_agrees_with_float_model(quantized, family):
    models, pkg = quantized
    shape = models[f"{family}_f32"][1]
    agree, total = 0, 0
    for seed in range(32):
        x = np.random.RandomState(1000 + seed).randn(*shape).astype(np.float32)
        ref = np.asarray(getattr(pkg, f"{family}_f32")(x)).argmax(-1)
        for fmt in ("qdq", "qop"):
            agree += int(np.array_equal(np.asarray(getattr(pkg, f"{family}_{fmt}")(x)).argmax(-1), ref))
            total += 1
    assert agree / total >= 0.8, f"top-1 agreement {agree}/{total}"


def test_qdq_folds_into_integer_operators(quantized):
    """The QDQ model's convolutions, products and residual Add run as integer operators, not float ones between Q
    and DQ."""
    from ksbuild.frontends.onnx.qdq import fold_qdq
    models, _ = quantized
    m = onnx.load(str(models["cnn_qdq"][0]))
    folded = fold_qdq(m.graph.node, {t.name: t for t in m.graph.initializer}, {o.name for o in m.graph.output})
    ops = [n.op_type for n in folded]
    assert "Conv" not in ops and "Gemm" not in ops and ops.count("QLinearConv") == 4 and "QGemm" in ops
    assert "Add" not in ops and ops.count("QLinearAdd") == 1
    assert "Relu" not in ops  # (folded into the bounds of the operators before their QuantizeLinear)


def test_a_malformed_quantized_convolution_is_an_error_at_its_node(tmp_path):
    """A QLinearConv whose kernel does not match its input's channels: an error naming the node and the 8-bit types
    (not the float stand-ins the geometry is checked with), and an unknown com.microsoft op named as such."""
    import ksbuild
    from ksbuild.errors import KsbuildError
    inits = [_init("s", np.float32(0.1)), _init("z", np.uint8(0)), _init("w", np.ones((4, 3, 3), np.int8)),
             _init("wz", np.int8(0))]
    node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "wz", "s", "z"], ["y"], name="qc")
    onnx.save(_model([node], [helper.make_tensor_value_info("x", U8, [1, 5, 8])],
                     [helper.make_tensor_value_info("y", U8, None)], inits), tmp_path / "bad.onnx")
    soft = helper.make_node("QLinearReduceMean", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
                            name="soft", axes=[1], keepdims=1)
    onnx.save(_model([soft], [helper.make_tensor_value_info("x", U8, [1, 10])],
                     [helper.make_tensor_value_info("y", U8, None)], inits[:2], ms=True), tmp_path / "soft.onnx")
    for model, words in (("bad.onnx", ["node qc (QLinearConv)", "qconv of u8[1, 5, 8] with kernel i8[4, 3, 3]",
                                       "channels do not match"]),
                         ("soft.onnx", ["node soft (QLinearReduceMean)", "unknown op QLinearReduceMean"])):
        (tmp_path / "manifest.toml").write_text(f'[package]\nname = "bad"\n[kernels.m]\nonnx = "{model}"\n'
                                                '[exports]\nm = "m"\n')
        with pytest.raises(KsbuildError) as e:
            ksbuild.build(tmp_path / "manifest.toml", quiet=True)
        assert all(w in str(e.value) for w in words), str(e.value)
