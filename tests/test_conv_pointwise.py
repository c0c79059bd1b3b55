"""ks::conv_pointwise (prims/convolve.py: pointwise_applies; transforms/layout_constants.py): a pointwise
convolution over few positions (7 × 7, 14 × 14, 6 × 6, a 1-d row of 49) computed transposed, its constant kernel
stored as panels of its transpose. Oracle: onnxruntime, on batches of 1 and 3, with every kind of epilogue (a bias
and a clamp applied as the result is copied out, a sigmoid and a residual add called after it, none), output
channels that fill their last panel partly (17, 24, 33, 40), an odd number of input channels (193) and more than
the tiles run over at once (1100: two blocks of k, the second added to the first). Convolutions with a window (3 × 3
with padding, stride 2, dilation 2, a 1 × 1 of stride 2) the same way by their im2col blocks, their kernel's panels
stored block by block (five blocks of input channels for h; j's 14 × 14 outputs one image per group, so that batch 3 is
three groups; i's 7 × 7 ones three images in one group)."""
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
            ("g", 1100, 16, (7, 7), "Relu"),  # (g: more input channels than a block of k, ks::tiles::k_block)
            # (with a window: (kernel, stride, pad, dilation))
            ("h", 400, 168, (7, 7), "Relu", (3, 1, 1, 1)), ("i", 64, 33, (14, 14), "Clip", (3, 2, 1, 1)),
            ("j", 96, 24, (28, 28), "Sigmoid", (3, 2, 1, 1)), ("k", 256, 40, (14, 14), None, (1, 2, 0, 1)),
            ("l", 64, 16, (9, 9), "Relu", (3, 1, 2, 2))]


def _model(path) -> None:
    rng = np.random.default_rng(0)
    nodes, inputs, outputs, inits = [], [], [], []
    for name, c, m, sides, after, *window in BRANCHES:
        k, stride, pad, dilation = window[0] if window else (1, 1, 0, 1)
        taps = [k] * len(sides)
        inits.append(numpy_helper.from_array((rng.standard_normal((m, c, *taps)) * 0.1).astype(np.float32), f"w{name}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b{name}"))
        inputs.append(helper.make_tensor_value_info(f"x{name}", TensorProto.FLOAT, ["n", c, *sides]))
        conv = f"c{name}" if after else f"y{name}"
        nodes.append(helper.make_node("Conv", [f"x{name}", f"w{name}", f"b{name}"], [conv], kernel_shape=taps,
                                      strides=[stride] * len(sides), pads=[pad] * 2 * len(sides),
                                      dilations=[dilation] * len(sides)))
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
                 for name, c, _, sides, *_ in BRANCHES}
        want = sess.run(None, feeds)
        got = pkg.net(*feeds.values())
        for (name, *_), g, w in zip(BRANCHES, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"branch {name}, batch {n}")


def test_pointwise_is_chosen_only_where_it_pays(model, tmp_path):
    """One thread with vectors: every branch; on two threads (ks::conv's parts) and without a vector unit
    (ks::conv_dots) none. Planes whose last panel is full or more than half full, and fewer input channels
    than POINTWISE_MIN_DEPTH, stay with ks::conv; at 7 × 7 (one position in the last panel) from
    POINTWISE_SPARSE_MIN_DEPTH on, a pointwise convolution (not a windowed one) is taken."""
    from ksbuild.ir.types import Type
    from ksbuild.prims.convolve import pointwise_applies
    assert _impls(model) == ["pointwise"] * len(BRANCHES)
    assert "pointwise" not in _impls(model, threads=2)
    assert "pointwise" not in _impls(model, vectors=False)
    params = {"impl": "tiles", "groups": 1, "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1)}

    def applies(c, side, m=64, **change):
        x, w, y = Type("f32", (1, c, side, side)), Type("f32", (m, c, 1, 1)), Type("f32", (1, m, side, side))
        return pointwise_applies(x, w, y, dict(params, **change))
    assert applies(256, 7) and applies(256, 14) and not applies(128, 14) and not applies(64, 7)
    assert applies(96, 7) and applies(160, 7) and not applies(95, 7)  # (POINTWISE_SPARSE_MIN_DEPTH)
    assert not applies(256, 8) and not applies(256, 28) and not applies(256, 5)  # (64, 784: whole; 25: 9 of 16)
    assert not applies(256, 7, groups=2) and not applies(256, 7, impl="gemm")

    def windowed(c, side, out, k=3, stride=1, m=64):
        x, w, y = Type("f32", (1, c, side, side)), Type("f32", (m, c, k, k)), Type("f32", (1, m, out, out))
        return pointwise_applies(x, w, y, dict(params, strides=(stride, stride), pads=(1, 1, 1, 1)))
    assert windowed(64, 7, 7) and windowed(128, 28, 14, stride=2) and windowed(256, 14, 7, k=1, stride=2)
    assert not windowed(16, 7, 7) and not windowed(64, 8, 8) and not windowed(64, 28, 28)  # (depth 144; 64, 784)
    assert not windowed(64, 130, 65, stride=2)  # (65 output rows: more runs than pack_strided's chunks hold)


def test_window_panels_store_the_kernel_block_by_block():
    """window_panels: the kernel's transpose as panels, one block of input channels after the other (two blocks
    here, the second one short, the last panel of output channels partial); window_kernel reads it back."""
    from ksbuild.prims.convolve import window_channels, window_kernel, window_panels
    from ksbuild.prims.lowering import to_panels
    kernel = np.random.default_rng(2).standard_normal((100, 250, 3, 3)).astype(np.float32)
    cc = window_channels(250, 100, 9, 4)
    assert cc == 145
    panels = window_panels(kernel)
    assert panels.shape == (7, 2250, 16)
    first = to_panels(kernel.reshape(100, 2250).T[:cc * 9])
    np.testing.assert_array_equal(panels.ravel()[:first.size], first.ravel())
    np.testing.assert_array_equal(window_kernel(panels, 100, (3, 3)), kernel)
