"""Affine epilogues (ks::affine, codegen/epilogue.py: affine): a convolution followed by its bias and ReLU6 (ONNX
Clip) or by its bias alone passes them to the kernels as data, which apply them before they store (tests/cpp/
test_gemm_conv.cpp checks the kernels against the lambda bit for bit); other epilogues keep their lambda. A dense
layer's bias (per column of the product x·Wᵀ) and clamps go to ks::packed_gemm the same way
(ks::column_affine_epilogue). Here: which convolutions and products of a small network take which, and the
network's outputs against onnxruntime."""
from __future__ import annotations

import re

import numpy as np
import pytest

import ksbuild


def _net_onnx(path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU6(),                 # bias + Clip(0, 6): affine
                        nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.ReLU6(),     # depthwise, bias + Clip: affine
                        nn.Conv2d(16, 24, 1),                                   # bias alone: affine
                        nn.Conv2d(24, 8, 1), nn.SiLU(),                         # bias + SiLU: a lambda
                        nn.Conv2d(8, 8, 1),                                     # bias: in the pooling's loop
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 40), nn.ReLU6(),                           # bias by column + Clip: affine
                        nn.Linear(40, 5))                                       # bias by column alone: affine
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 20, 20),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_bias_and_clamps_are_data_the_kernels_apply(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _net_onnx(tmp_path / "net.onnx")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "affine"\n\n[kernels.net]\nonnx = "net.onnx"\n\n'
                                            '[exports]\nnet = "net"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    source = "".join(p.read_text() for p in (pkg.root / "share").glob("*/src/*.cpp"))
    made = re.findall(r"ks::make_affine<float>\(\w+, (\d), ([^,]+), ([^)]+)\)", source)
    assert sorted(made) == [("0", "0", "0")] * 2 + [("3", "0.0f", "6.0f")] * 3, made
    assert source.count("ks::conv_epilogue<float>(") == 1  # (the SiLU)
    # (the dense layers' bias is per column of x·Wᵀ: ks::packed_gemm's tiles apply it in their registers)
    assert source.count("ks::column_affine_epilogue<float>(") == 2 and "ks::product_epilogue" not in source
    sess = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 20, 20)).astype(np.float32) * 4
        np.testing.assert_allclose(pkg.net(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _relu_onnx(path, negative_zero: bool):
    """Convolutions with ReLU (select(le(v, 0), 0, v) in the IR): with a bias (dense, depthwise, odd channel
    counts), without one, and (negative_zero) the first one's bias holding a -0.0."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(3, 13, 3, 1, 1), nn.ReLU(),                  # bias + ReLU: affine
                        nn.Conv2d(13, 13, 3, 2, 1, groups=13), nn.ReLU(),      # depthwise, stride 2: affine
                        nn.Conv2d(13, 7, 1, bias=False), nn.ReLU(),            # no bias: a lambda
                        nn.Conv2d(7, 5, 1), nn.ReLU6())                        # Clip: affine, as before
    if negative_zero:
        with torch.no_grad():
            net[0].bias[4] = -0.0
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 21, 21),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


@pytest.mark.parametrize("negative_zero", [False, True])
def test_relu_after_a_bias_is_a_clamp_at_zero(tmp_path, negative_zero):
    """ReLU arrives as select(le(v, 0), 0, v), which gives +0 at v = -0 where the kernels' lt clamp keeps -0: it
    is the clamp only when v = acc + bias can never be -0, a constant bias without -0.0 (codegen/epilogue.py:
    _same_as_strict). Without a bias, or with a -0.0 in it, the lambda stays. Outputs against onnxruntime, and
    no -0.0 among them (ReLU's zeros are +0)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _relu_onnx(tmp_path / "net.onnx", negative_zero)
    name = f"relu_affine_{int(negative_zero)}"
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "{name}"\n\n[kernels.net]\nonnx = "net.onnx"\n\n'
                                            '[exports]\nnet = "net"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    source = "".join(p.read_text() for p in (pkg.root / "share").glob("*/src/*.cpp"))
    made = re.findall(r"ks::make_affine<float>\(\w+, (\d), ([^,]+), ([^)]+)\)", source)
    relu = [] if negative_zero else [("1", "0.0f", "0")]
    assert sorted(made) == sorted(relu + [("1", "0.0f", "0"), ("3", "0.0f", "6.0f")]), made
    assert source.count("ks::conv_epilogue<float>(") == 1 + negative_zero  # (the ReLU without a bias, the -0.0)
    sess = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 21, 21)).astype(np.float32) * 4
        y = pkg.net(x)
        np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
        assert not np.any((y == 0) & np.signbit(y))
