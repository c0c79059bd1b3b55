"""ks::conv_pointwise (prims/convolve.py: pointwise_applies; transforms/layout_constants.py): a pointwise
convolution over few positions (7 × 7, 14 × 14, 6 × 6, a 1-d row of 49) computed transposed, its constant kernel
stored as panels of its transpose. Oracle: onnxruntime, on batches of 1 and 3, with every kind of epilogue (a bias
and a clamp applied as the result is copied out, a sigmoid and a residual add called after it, none), output
channels that fill their last panel partly (17, 24, 33, 40), an odd number of input channels (193) and more than
the tiles run over at once (1100: two blocks of k, the second added to the first)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.transforms.pipeline import Options, lower  # noqa: E402

# (input, channels in, channels out, spatial sides, what follows the convolution)
BRANCHES = [("a", 200, 24, (7, 7), "Relu"), ("b", 200, 40, (7, 7), "Sigmoid"), ("c", 200, 33, (7, 7), None),
            ("d", 256, 64, (14, 14), "Clip"), ("e", 193, 17, (6, 6), "Add"), ("f", 192, 32, (49,), "Relu"),
            ("g", 1100, 16, (7, 7), "Relu")]  # (g: more input channels than a block of k, ks::tiles::k_block)


def _model(path) -> None:
    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits = [], [], [], []
    for name, c, m, sides, after in BRANCHES:
        taps = [1] * len(sides)
        inits.append(numpy_helper.from_array((rng.standard_normal((m, c, *taps)) * 0.1).astype(np.float32), f"w{name}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b{name}"))
        inputs.append(helper.make_tensor_value_info(f"x{name}", TensorProto.FLOAT, ["n", c, *sides]))
        conv = f"c{name}" if after else f"y{name}"
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}", f"b{name}"], [conv], kernel_shape=taps))
        if after == "Clip":
            inits += [numpy_helper.from_array(np.float32(v), f"{name}{k}") for k, v in (("lo", 0), ("hi", 6))]
            nodes.append(helper.make_node("Clip", [conv, f"{name}lo", f"{name}hi"], [f"y{name}"]))
        elif after == "Add":  # (the image's own first channels added: an epilogue reading another tensor)
            nodes.append(helper.make_node("Slice", [f"x{name}", "zero", "seventeen", "one"], [f"s{name}"]))
            nodes.append(helper.make_node("Add", [conv, f"s{name}"], [f"y{name}"]))
        elif after:
            nodes.append(helper.make_node(after, [conv], [f"y{name}"]))
        outputs.append(helper.make_tensor_value_info(f"y{name}", TensorProto.FLOAT, None))
    inits += [numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("zero", 0), ("seventeen", 17),
                                                                                 ("one", 1))]
    graph = helper.make_graph(nodes, "pointwise", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("pointwise") / "pointwise.onnx"
    _model(path)
    return path


def _impls(path, threads: int = 0, vectors: bool = True) -> list[str]:
    f = lower(compile_onnx_kernel(path, "net"), Options(threads=threads, vectors=vectors), after="layout_constants")
    return sorted(e.params["impl"] for e in f.eqns if e.prim.name == "convolve")


def test_pointwise_convolutions_over_few_positions_match_onnxruntime(model, tmp_path):
    """Every branch computed by ks::conv_pointwise, against onnxruntime on batches of 1 and 3."""
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "pointwise"\n[kernels.net]\nonnx = "{model}"\n'
                                            '[exports]\nnet = "net"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml", quiet=True)
    source = (pkg.root / "share" / "pointwise" / "src" / "pointwise.cpp").read_text()
    assert source.count("ks::conv_pointwise<float>(") == len(BRANCHES)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for n in (1, 3):
        feeds = {f"x{name}": rng.standard_normal((n, c, *sides)).astype(np.float32)
                 for name, c, _, sides, _ in BRANCHES}
        want = sess.run(None, feeds)
        got = pkg.net(*feeds.values())
        for (name, *_), g, w in zip(BRANCHES, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"branch {name}, batch {n}")


def test_pointwise_is_chosen_only_where_it_pays(model, tmp_path):
    """One thread with vectors: every branch; on two threads (ks::conv's parts) and without a vector unit
    (ks::conv_dots) none. Planes whose last panel is full or more than half full, and fewer input channels
    than POINTWISE_MIN_DEPTH, stay with ks::conv."""
    from ksbuild.ir.types import Type
    from ksbuild.prims.convolve import pointwise_applies
    assert _impls(model) == ["pointwise"] * len(BRANCHES)
    assert "pointwise" not in _impls(model, threads=2)
    assert "pointwise" not in _impls(model, vectors=False)
    params = {"impl": "tiles", "groups": 1, "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}

    def applies(c, side, m=64, **change):
        x, w, y = Type("f32", (1, c, side, side)), Type("f32", (m, c, 1, 1)), Type("f32", (1, m, side, side))
        return pointwise_applies(x, w, y, dict(params, **change))
    assert applies(256, 7) and applies(256, 14) and not applies(128, 7)
    assert not applies(256, 8) and not applies(256, 28) and not applies(256, 5)  # (64, 784: whole; 25: 9 of 16)
    assert not applies(256, 7, groups=2) and not applies(256, 7, impl="gemm")
