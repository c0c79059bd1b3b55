"""Max pooling as one kernel-layer call (prims/pooling.py, prelude/ks/maxpool.h: ks::max_pool), compiled.

Oracles: onnxruntime's MaxPool over every padding, stride, ceil_mode, dilation and auto_pad ONNX takes (1-d and 2-d
windows, odd sizes, batches of 1 and 3, float and double; 3-d and the Indices output keep the decomposition), the
reference interpreter on NaNs and infinities (onnxruntime's NaN handling is its own), torch for the gradient (to
each window's first maximum, ties included) and for torch.export's max_pool2d, and the generated code, which must
call ks::max_pool instead of padding the image with -inf."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

from onnx import TensorProto, helper  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.ir.interp import eval_func  # noqa: E402


def _cases() -> list[tuple[str, tuple, dict]]:
    """(name, input shape, MaxPool attributes): 2-d windows over a grid of geometries onnxruntime takes, then 1-d,
    auto_pad, batches and a 3-d one."""
    cases = []
    for i, (k, s, p, d, ceil) in enumerate(itertools.product(
            [(3, 3), (2, 2), (3, 2), (1, 1)], [(1, 1), (2, 2), (3, 2)], [(0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 1)],
            [(1, 1), (2, 1)], [0, 1])):
        if any(lo >= kk or hi >= kk for lo, hi, kk in zip(p[:2], p[2:], k)):
            continue  # (onnxruntime wants pads smaller than the kernel)
        attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p), dilations=list(d), ceil_mode=ceil)
        cases.append((f"p{i}", (1 + i % 3, 2 + i % 2, 9 + i % 4, 8 + i % 5), attrs))
    cases += [
        ("line", (2, 3, 13), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
        ("line_ceil", (1, 2, 12), dict(kernel_shape=[2], strides=[3], pads=[0, 1], dilations=[2], ceil_mode=1)),
        ("same_upper", (2, 2, 11, 10), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
        ("same_lower", (1, 3, 10, 9), dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER")),
        ("valid", (3, 2, 9, 11), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="VALID")),
        ("stem", (2, 8, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("wide", (1, 2, 5, 61), dict(kernel_shape=[2, 5], strides=[1, 1], pads=[1, 2, 0, 2], dilations=[3, 2])),
        ("volume", (1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 1, 1, 1, 0])),
    ]
    return cases


CASES = _cases()


def _model(path, shape, dtype=TensorProto.FLOAT, relu=False, **attrs) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"])] if relu else []
    nodes.append(helper.make_node("MaxPool", ["r" if relu else "x"], ["y"], **attrs))
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 8
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """One package of every case (and a double one, and a ReLU before the pooling): exports named as the cases."""
    root = tmp_path_factory.mktemp("max_pool")
    lines = ['[package]\nname = "pools"\n']
    exports = []
    extra = [("f64", (2, 3, 9, 8), dict(dtype=TensorProto.DOUBLE, kernel_shape=[3, 3], strides=[2, 2],
                                           pads=[1, 1, 1, 1], ceil_mode=1)),
             ("relu", (2, 4, 11, 11), dict(relu=True, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))]
    for name, shape, attrs in CASES + extra:
        _model(root / f"{name}.onnx", shape, **attrs)
        lines.append(f'[kernels.{name}]\nonnx = "{name}.onnx"\n')
        exports.append(f'{name} = "{name}"\n')
    (root / "manifest.toml").write_text("".join(lines) + "[exports]\n" + "".join(exports))
    return ksbuild.build(root / "manifest.toml"), root


def _ort(path, x):
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("name", [c[0] for c in CASES] + ["f64", "relu"])
def test_max_pool_matches_onnxruntime(pools, name):
    pkg, root = pools
    shape = {c[0]: c[1] for c in CASES}.get(name, (2, 3, 9, 8) if name == "f64" else (2, 4, 11, 11))
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(shape).astype(np.float64 if name == "f64" else np.float32)
    x.flat[::7] = x.flat[3]  # (ties)
    want = _ort(root / f"{name}.onnx", x)
    got = getattr(pkg, name)(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_every_2d_and_1d_float_pooling_is_the_prim():
    for name, shape, attrs in CASES:
        f = _lowered_ops(shape, attrs)
        assert ("max_pool" in f) == (len(shape) <= 4), (name, f)


def _lowered_ops(shape, attrs) -> set[str]:
    import tempfile

    from ksbuild.transforms.pipeline import lower
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/m.onnx"
        _model(path, shape, **attrs)
        f = lower(compile_onnx_kernel(path, "m"))
    return {e.prim.name for e in f.eqns}


def test_nans_and_infinities_as_the_interpreter(pools, tmp_path):
    """A NaN in a window is its maximum, -inf and +inf are values (the reference interpreter's max; onnxruntime
    skips NaNs)."""
    pkg, root = pools
    f = compile_onnx_kernel(str(root / "stem.onnx"), "stem")
    x = np.random.default_rng(1).standard_normal((2, 8, 28, 28)).astype(np.float32)
    x[0, 0, 3, 4], x[0, 1, 0, 0], x[1, 2, 27, 27], x[1, 3, 10, :] = np.nan, -np.inf, np.inf, -np.inf
    (want,) = eval_func(f, [x])
    np.testing.assert_array_equal(pkg.stem(x), want)
    assert np.isnan(pkg.stem(x)[0, 0, 1:3, 2]).all()


def test_gradient_goes_to_the_first_maximum_as_torch(tmp_path):
    """F.max_pool2d's derivative through the python frontend and torch.autograd: ties (a constant image) and
    padding; the ReLU before it (its derivative at the window's maximum)."""
    torch = pytest.importorskip("torch")
    from conftest import build_kernel_file
    kernels = '''
import torch
import torch.nn.functional as F


def pool(x: "float[n, 3, 9, 8]") -> "float[n, 3, 5, 5]":
    return F.max_pool2d(torch.relu(x), 3, stride=2, padding=1, ceil_mode=True)


def loss(x: "float[n, 3, 9, 8]") -> float:
    return (pool(x) * torch.arange(25.0).reshape(5, 5)).sum()
'''
    manifest = ('[package]\nname = "poolgrad"\n[kernels.pool]\npython = "k.py:pool"\n[kernels.loss]\n'
                'python = "k.py:loss"\n[exports]\npool = "pool"\nloss_grad = "grad(loss)"\n'
                'pool_lanes = "vmap(pool)"\n')
    pkg, source = build_kernel_file(tmp_path, kernels, manifest, "poolgrad_k")
    for x in (np.random.default_rng(2).standard_normal((2, 3, 9, 8)), np.ones((1, 3, 9, 8)),
              np.round(np.random.default_rng(3).standard_normal((3, 3, 9, 8)))):
        x = x.astype(np.float32)
        t = torch.tensor(x, requires_grad=True)
        source.loss(t).backward()
        np.testing.assert_allclose(pkg.pool(x), source.pool(torch.tensor(x)).numpy())
        np.testing.assert_allclose(pkg.loss_grad(x), t.grad.numpy(), rtol=1e-6)
        lanes = np.stack([x, -x])
        np.testing.assert_array_equal(pkg.pool_lanes(lanes), np.stack([pkg.pool(x), pkg.pool(-x)]))


def test_torch_export_max_pool2d():
    """torch.export's max_pool2d (tests/torch_export_models.py: SmallCNN, whose values and gradients
    test_torch_export checks) becomes the prim."""
    pytest.importorskip("torch")
    from pathlib import Path

    from ksbuild.frontends.torch_export import compile_torch_kernel
    models = Path(__file__).resolve().parent / "torch_export_models.py"
    f = compile_torch_kernel(models.name, models.parent, "make_cnn", "cnn")
    assert any(e.prim.name == "max_pool" for e in f.eqns)
