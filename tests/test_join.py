"""The join pass (transforms/join.py): a concatenation, which the transformations see as pads added, is one
`join` that copies each piece once; and fuse_epilogue's split, which lets each convolution before a concatenation
take its own bias and activation as its epilogue.

Oracles: numpy's concatenate (bit for bit, -0.0 included, which pad + add turned into +0.0), the reference
interpreter at every pass (tests/test_passes.py covers the pipeline generally), onnxruntime for a Fire module
(SqueezeNet's concatenation of two convolutions) and torch.autograd for the derivative of a concatenation."""
from __future__ import annotations

import numpy as np
import pytest

import ksbuild
from ksbuild.frontends.onnx import compile_onnx_kernel
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.ir.core import Func
from ksbuild.ir.interp import eval_func
from ksbuild.transforms.pipeline import lower

KERNEL = '''import torch


def joined(a: "float[n, 2]", b: "float[n, m]", c: "float[n, 3]") -> "float[n, 5 + m]":
    return torch.cat([a, torch.sin(b), c * 2.0], 1)


def stacked(a: "float[n]", b: "float[n]") -> "float[n]":
    pair = torch.cat([a * b, torch.tanh(a)], 0)
    return pair[:a.shape[0]] + pair[a.shape[0]:]
'''


def _prims(f: Func) -> list[str]:
    names = []
    for e in f.eqns:
        names.append(e.prim.name)
        names += [n for v in e.params.values() if isinstance(v, Func) for n in _prims(v)]
    return names


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    folder = tmp_path_factory.mktemp("join")
    (folder / "k.py").write_text(KERNEL)
    (folder / "manifest.toml").write_text('''[package]
name = "joins"
[build]
dtype = "float64"
[kernels.joined]
python = "k.py:joined"
[kernels.stacked]
python = "k.py:stacked"
[exports]
joined = "joined"
joined_vjp = "vjp(joined)"
stacked = "stacked"
stacked_grad = "vjp(stacked)"
''')
    return folder, ksbuild.build(folder / "manifest.toml")


def test_a_concatenation_is_one_join(pkg):
    f = lower(compile_python_kernel(pkg[0] / "k.py", "joined", "f64"))
    names = _prims(f)
    assert names.count("join") == 1 and "pad" not in names


def test_join_keeps_every_bit(pkg):
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((4, 2)), rng.standard_normal((4, 7)), rng.standard_normal((4, 3))
    a[1, 0], b[2, 3], c[0, 1] = -0.0, -0.0, -0.0  # (pad + add gave +0.0 there)
    got = pkg[1].joined(a, b, c)
    want = np.concatenate([a, np.sin(b), c * 2.0], 1)
    assert got.tobytes() == want.tobytes()
    f = compile_python_kernel(pkg[0] / "k.py", "joined", "f64")
    (interp,) = eval_func(lower(f), [a, b, c], {})
    assert np.asarray(interp).tobytes() == want.tobytes()


def test_the_derivative_of_a_concatenation(pkg):
    """vjp of cat is slices of the cotangent; vjp of slices (stacked) is pads added, which become a join too."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(6), rng.standard_normal(6)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    pair = torch.cat([ta * tb, torch.tanh(ta)])
    ct = rng.standard_normal(6)
    (pair[:6] + pair[6:]).backward(torch.tensor(ct))
    ga, gb = pkg[1].stacked_grad(a, b, ct)
    np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-13)


def _fire(path):
    """SqueezeNet's Fire module: a squeeze convolution, then 1 x 1 and 3 x 3 ones concatenated, each with its ReLU."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Fire(nn.Module):
        def __init__(self):
            super().__init__()
            self.squeeze, self.e1, self.e3 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1), nn.Conv2d(4, 8, 3, padding=1)

        def forward(self, x):
            x = torch.relu(self.squeeze(x))
            return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)
    torch.onnx.export(Fire().eval(), (torch.zeros(1, 8, 10, 10),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})


def test_each_convolution_before_a_concatenation_takes_its_epilogue(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    _fire(tmp_path / "fire.onnx")
    f = lower(compile_onnx_kernel(tmp_path / "fire.onnx", "net"))
    convs = [e for e in _walk(f) if e.prim.name == "convolve"]
    assert len(convs) == 3 and all(e.params.get("epilogue") is not None for e in convs)
    assert not any(e.prim.name == "fusion" for e in _walk(f)) and "join" in _prims(f)
    (tmp_path / "manifest.toml").write_text('[package]\nname = "fire"\n[kernels.net]\nonnx = "fire.onnx"\n'
                                            '[exports]\nnet = "net"\n')
    net = ksbuild.build(tmp_path / "manifest.toml").net
    sess = ort.InferenceSession(str(tmp_path / "fire.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 10, 10)).astype(np.float32)
        np.testing.assert_allclose(net(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def _walk(f: Func):
    for e in f.eqns:
        yield e
        for v in e.params.values():
            if isinstance(v, Func):
                yield from _walk(v)
