"""The conv primitive and the epilogue fusion, compiled, against torch: strides, dilations, groups and
padding (backends plain and blas), gradients through its transposes, vmap over per-lane kernels (with a
literal and with a symbolic lane count), and the elementwise work after a convolution or a matrix
product applied as the kernels store their results (transforms/fuse_epilogue.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import DEBUG, build_kernel_file  # noqa: E402

KERNELS = '''
import torch
import torch.nn.functional as F


def block(x: "float[n, 4, 9, 7]", w: "float[6, 2, 3, 2]", b: "float[6]") -> "float[n, 6, 5, 7]":
    """strided, dilated, grouped, padded; a bias and a ReLU after it (the epilogue)."""
    return torch.relu(F.conv2d(x, w, b, stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2))


def residual(x: "float[n, 3, 8, 8]", w: "float[3, 3, 3, 3]") -> "float[n, 3, 8, 8]":
    """x + tanh(conv(x)): the epilogue reads another tensor at the same position."""
    return x + torch.tanh(F.conv2d(x, w, padding=1))


def line(x: "float[n, 2, 11]", w: "float[5, 2, 4]") -> "float[n, 5, 5]":
    return F.conv1d(x, w, stride=2, padding=1) * 0.5


def ramp(x: "float[n, 2, 6, 6]", w: "float[3, 2, 3, 3]") -> "float[n, 3, 4, 4]":
    """an epilogue that reads a position (an iota along a spatial axis): applied after the convolution."""
    y = F.conv2d(x, w)
    return y + torch.arange(4) * 0.5


def tiny(x: "float[n, 6, 7, 9]", w: "float[4, 3, 3, 2]", b: "float[4]") -> "float[n, 4, 2, 3]":
    """at most 8 output positions (a batch-1 network's last layers): dot products of the kernel's rows with the
    im2col matrix's columns (ks::tiles::dots); grouped, strided, dilated, padded, with a bias and a ReLU."""
    return torch.relu(F.conv2d(x, w, b, stride=(3, 4), padding=(1, 2), dilation=(2, 3), groups=2))


def dense(x: "float[n, 20]", w: "float[20, 33]", b: "float[33]") -> "float[n, 33]":
    return F.gelu(x @ w + b)


def loss(x: "float[n, 4, 9, 7]", w: "float[6, 2, 3, 2]", b: "float[6]") -> float:
    return (block(x, w, b) ** 2).sum()


def wide(x: "float[n, 32, 9, 11]", w: "float[64, 32, 3, 3]", b: "float[64]") -> "float[n, 64, 9, 11]":
    """3×3, stride 1, 2048 channel pairs: Winograd's F(2×2, 3×3) with the plain backend (odd sizes: the last
    tiles are cut), a bias and a ReLU as its epilogue."""
    return torch.relu(F.conv2d(x, w, b, padding=1))


def uneven(x: "float[n, 17, 12, 10]", w: "float[128, 17, 3, 3]") -> "float[n, 128, 14, 8]":
    """Winograd with padding on one axis only."""
    return F.conv2d(x, w, padding=(2, 0)) * 2.0


def fixed(x: "float[n, 32, 8, 8]") -> "float[n, 64, 8, 8]":
    """Winograd of a kernel computed in the kernel (an ONNX initializer, a constant, is transformed when the
    package is compiled: test_onnx_conv_kernel_is_transformed_when_compiled)."""
    w = ((torch.arange(18432) % 7 - 3) * 0.25).reshape(64, 32, 3, 3).to(x.dtype)
    return F.conv2d(x, w, padding=1)


def wide_loss(x: "float[n, 32, 9, 11]", w: "float[64, 32, 3, 3]", b: "float[64]") -> float:
    return (wide(x, w, b) ** 2).sum()


def layers(x: "float[n, 3, 10, 10]", w1: "float[8, 3, 3, 3]", w2: "float[6, 8, 3, 3]", v: "float[54, 4]") -> \
        "float[n, 4]":
    """two convolutions with a pooling between them, then a matrix product: the per_row pass runs the
    convolutions image by image (one loop over n), the product over the whole batch."""
    y = F.max_pool2d(torch.relu(F.conv2d(x, w1, padding=1)), 2)
    return torch.tanh(F.conv2d(y, w2)).flatten(1) @ v


def four(x: "float[4, 3, 10, 10]", w1: "float[8, 3, 3, 3]", w2: "float[6, 8, 3, 3]", v: "float[54, 4]") -> \
        "float[4, 4]":
    """layers with a literal batch of 4."""
    y = F.max_pool2d(torch.relu(F.conv2d(x, w1, padding=1)), 2)
    return torch.tanh(F.conv2d(y, w2)).flatten(1) @ v


def twin(x: "float[n, 4, 8, 8]", wa: "float[4, 4, 3, 3]", wb: "float[4, 4, 1, 1]") -> "float[n, 4, 8, 8]":
    """two branches reading the same image, joined: one chain reading x twice."""
    return torch.relu(F.conv2d(x, wa, padding=1)) * torch.sigmoid(F.conv2d(x, wb)) + x


def depthwise(x: "float[n, 6, 13, 40]", w: "float[6, 1, 3, 3]", b: "float[6]") -> "float[n, 6, 7, 20]":
    """one group per channel (ks::conv_depthwise): strided, padded, a bias and relu6 as its epilogue."""
    return F.relu6(F.conv2d(x, w, b, stride=2, padding=1, groups=6))


def depthwise_line(x: "float[n, 4, 75]", w: "float[8, 1, 5]") -> "float[n, 8, 69]":
    """a Conv1d with groups = channels, two output channels per input channel, dilated and padded on one side
    in effect (runs of 4 vectors and the vectors after them)."""
    return F.conv1d(F.pad(x, (2, 0)), w, dilation=2, groups=4)


def depthwise_loss(x: "float[n, 6, 13, 40]", w: "float[6, 1, 3, 3]", b: "float[6]", v: "float[n, 4, 75]",
                   u: "float[8, 1, 5]") -> float:
    return (depthwise(x, w, b) ** 2).sum() + (depthwise_line(v, u) ** 2).sum()


def coupled(x: "float[n, 3, 6, 6]", w: "float[4, 3, 3, 3]", w2: "float[4, 4, 3, 3]") -> "float[n, 4, 4, 4]":
    """a mean over the batch between the convolutions: rows depend on each other there, the chain stops."""
    y = torch.relu(F.conv2d(x, w, padding=1))
    return F.conv2d(y - y.mean(0), w2)
'''

MANIFEST = '''
[package]
name = "convs_{backend}"
[build]
backend = "{backend}"
dtype = "float64"
[kernels.block]
python = "k.py:block"
[kernels.residual]
python = "k.py:residual"
[kernels.line]
python = "k.py:line"
[kernels.ramp]
python = "k.py:ramp"
[kernels.tiny]
python = "k.py:tiny"
[kernels.dense]
python = "k.py:dense"
[kernels.loss]
python = "k.py:loss"
[kernels.wide]
python = "k.py:wide"
[kernels.uneven]
python = "k.py:uneven"
[kernels.fixed]
python = "k.py:fixed"
[kernels.wide_loss]
python = "k.py:wide_loss"
[kernels.layers]
python = "k.py:layers"
[kernels.four]
python = "k.py:four"
[kernels.twin]
python = "k.py:twin"
[kernels.coupled]
python = "k.py:coupled"
[kernels.depthwise]
python = "k.py:depthwise"
[kernels.depthwise_line]
python = "k.py:depthwise_line"
[kernels.depthwise_loss]
python = "k.py:depthwise_loss"
[exports]
block = "block"
residual = "residual"
line = "line"
ramp = "ramp"
tiny = "tiny"
dense = "dense"
loss_grad = "grad(loss, argnums=(0, 1, 2))"
block_lanes = "vmap(block, in_axes=(0, 0, None))"
block_jvp = "jvp(block)"
wide = "wide"
uneven = "uneven"
fixed = "fixed"
wide_grad = "grad(wide_loss, argnums=(0, 1, 2))"
wide_lanes = "vmap(wide, in_axes=(0, None, None))"
layers = "layers"
layers_vjp = "vjp(layers)"
four = "four"
twin = "twin"
coupled = "coupled"
depthwise = "depthwise"
depthwise_line = "depthwise_line"
depthwise_grad = "grad(depthwise_loss, argnums=(0, 1, 2, 3, 4))"
'''


@pytest.fixture(scope="module", params=["plain", "blas"])
def built(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"conv_{request.param}")
    # (values and source against torch: the package's own code at -Og; the tests of builds GCC once refused at -O3,
    # below, build at speed)
    return build_kernel_file(root, KERNELS, MANIFEST.format(backend=request.param), f"conv_kernels_{request.param}",
                             DEBUG)


def _args(rng, *shapes):
    return [rng.standard_normal(s) for s in shapes]


def _t(a):
    return torch.tensor(a, requires_grad=True)


def test_convolutions_match_torch(built):
    pkg, src = built
    rng = np.random.default_rng(0)
    cases = {"block": ((3, 4, 9, 7), (6, 2, 3, 2), (6,)), "residual": ((2, 3, 8, 8), (3, 3, 3, 3)),
             "line": ((3, 2, 11), (5, 2, 4)), "ramp": ((2, 2, 6, 6), (3, 2, 3, 3)),
             "tiny": ((1, 6, 7, 9), (4, 3, 3, 2), (4,)), "tiny3": ((3, 6, 7, 9), (4, 3, 3, 2), (4,)),
             "dense": ((5, 20), (20, 33), (33,)),
             "wide": ((3, 32, 9, 11), (64, 32, 3, 3), (64,)), "uneven": ((2, 17, 12, 10), (128, 17, 3, 3)),
             "fixed": ((2, 32, 8, 8),), "depthwise": ((3, 6, 13, 40), (6, 1, 3, 3), (6,)),
             "depthwise_line": ((2, 4, 75), (8, 1, 5))}
    for name, shapes in cases.items():
        args, fn = _args(rng, *shapes), name.rstrip("3")
        want = getattr(src, fn)(*[torch.tensor(a) for a in args]).numpy()
        np.testing.assert_allclose(getattr(pkg, fn)(*args), want, rtol=1e-10, atol=1e-10, err_msg=name)


def test_gradients_through_the_transposes_match_torch_autograd(built):
    pkg, src = built
    rng = np.random.default_rng(1)
    args = _args(rng, (3, 4, 9, 7), (6, 2, 3, 2), (6,))
    ts = [_t(a) for a in args]
    src.loss(*ts).backward()
    for got, t in zip(pkg.loss_grad(*args), ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_depthwise_convolutions_and_their_gradients_match_torch(built):
    """Convolutions with one group per input channel run as ks::conv_depthwise with either backend (each
    channel's taps over a zero-padded copy split by stride phase); their gradients through the transposes."""
    pkg, src = built
    rng = np.random.default_rng(2)
    args = _args(rng, (2, 6, 13, 40), (6, 1, 3, 3), (6,), (2, 4, 75), (8, 1, 5))
    ts = [_t(a) for a in args]
    src.depthwise_loss(*ts).backward()
    for got, t in zip(pkg.depthwise_grad(*args), ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_one_group_per_channel_is_depthwise_with_every_backend(tmp_path):
    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.transforms.pipeline import Options, lower
    (tmp_path / "k.py").write_text(KERNELS)
    for name in ("depthwise", "depthwise_line"):
        f = compile_python_kernel(tmp_path / "k.py", name, "f64")
        for backend, threads in (("plain", 0), ("blas", 0), ("blas", 2)):
            g = lower(f, Options(backend=backend, threads=threads), after="select_backend")
            assert [e.params["impl"] for e in g.eqns if e.prim.name == "convolve"] == ["depthwise"], (name, backend)


def test_a_positional_none_bias(tmp_path):
    """F.conv2d(x, w, None, stride, padding, dilation, groups), as torch takes it (held-out pass: None was an
    unsupported constant); checked with the reference interpreter."""
    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.ir.interp import eval_func
    (tmp_path / "k.py").write_text(
        "import torch.nn.functional as F\n\n\n"
        "def f(x: 'float[n, 6, 13, 40]', w: 'float[6, 1, 3, 3]') -> 'float[n, 6, 7, 20]':\n"
        "    return F.conv2d(x, w, None, 2, 1, 1, 6)\n")
    f = compile_python_kernel(tmp_path / "k.py", "f", "f64")
    x, w = _args(np.random.default_rng(4), (2, 6, 13, 40), (6, 1, 3, 3))
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), None, 2, 1, 1, 6).numpy()
    np.testing.assert_allclose(eval_func(f, [x, w])[0], want, rtol=1e-12, atol=1e-12)


def test_winograd_convolutions_match_torch(built):
    """3×3 stride-1 convolutions of 2048+ channel pairs run by Winograd's F(2×2, 3×3) with either backend on
    one thread (ks::conv_winograd; a constant kernel transformed when compiled, others by ks::winograd_kernel on
    each call): values at batch 1 and 3, the gradient (its input's cotangent is a Winograd convolution of the
    flipped kernel) and vmap against torch."""
    pkg, src = built
    rng = np.random.default_rng(4)
    for n in (1, 3):
        args = _args(rng, (n, 32, 9, 11), (64, 32, 3, 3), (64,))
        want = src.wide(*map(torch.tensor, args)).numpy()
        np.testing.assert_allclose(pkg.wide(*args), want, rtol=1e-10, atol=1e-10)
    args = _args(rng, (2, 32, 9, 11), (64, 32, 3, 3), (64,))
    ts = [_t(a) for a in args]
    src.wide_loss(*ts).backward()
    for got, t in zip(pkg.wide_grad(*args), ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)
    xs, w, b = _args(rng, (2, 3, 32, 9, 11), (64, 32, 3, 3), (64,))
    want = torch.vmap(src.wide, in_dims=(0, None, None))(torch.tensor(xs), torch.tensor(w), torch.tensor(b))
    np.testing.assert_allclose(pkg.wide_lanes(xs, w, b), want.numpy(), rtol=1e-10, atol=1e-10)
    source = (pkg.root / "share" / pkg.desc["package"] / "src" / f"{pkg.desc['package']}.cpp").read_text()
    fixed = source[source.index("fixed("):]
    fixed = fixed[:fixed.index("\n}\n")]
    assert "ks::conv_winograd<double>(" in fixed and "ks::winograd_kernel<double>(" in source


def test_per_row_runs_image_by_image_only_while_the_weights_are_smaller_than_an_image(tmp_path):
    """The loop over images reads each weight once per image: a chain of 3×3 convolutions of 64 channels on a
    2 × 2 map (each kernel 295 KB, each image's activations 2 KB) stays layer by layer; the small CNN's
    chain (a few KB of weights, 7 KB of activations per image) runs image by image."""
    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.transforms.pipeline import Options, lower
    (tmp_path / "k.py").write_text(KERNELS + '''

def deep(x: "float[n, 64, 2, 2]", w: "float[64, 64, 3, 3]", w2: "float[64, 64, 3, 3]") -> "float[n, 64, 2, 2]":
    return F.conv2d(torch.relu(F.conv2d(x, w, padding=1)), w2, padding=1)
''')
    looped = {}
    for name in ("layers", "deep"):
        g = lower(compile_python_kernel(tmp_path / "k.py", name, "f64"), Options(), after="per_row")
        looped[name] = [e.prim.name for e in g.eqns if e.prim.name in ("loop", "convolve")]
    assert looped == {"layers": ["loop"], "deep": ["convolve", "convolve"]}


def test_blas_on_several_threads_keeps_winograd_sized_convolutions_on_the_blas(tmp_path):
    """With blas and threads > 1 a Winograd-sized convolution stays im2col blocks times the BLAS (ks::conv_rows),
    whose own threads then run it; on one thread it is Winograd's, as with the plain backend."""
    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.transforms.pipeline import Options, lower
    (tmp_path / "k.py").write_text(KERNELS)
    f = compile_python_kernel(tmp_path / "k.py", "wide", "f64")
    impls = {}
    for backend, threads in (("plain", 0), ("blas", 0), ("blas", 2), ("plain", 2)):
        g = lower(f, Options(backend=backend, threads=threads), after="select_backend")
        impls[backend, threads] = [e.params["impl"] for e in g.eqns if e.prim.name == "convolve"]
    assert impls == {("plain", 0): ["winograd"], ("blas", 0): ["winograd"], ("blas", 2): ["gemm"],
                     ("plain", 2): ["winograd"]}


def test_winograd_float32_against_the_loops():
    """ks::conv_winograd in float32 (built for this machine's level, as ksbuild.build does: the widest vectors)
    against the direct convolution of the same kernel, over sizes whose tile blocks end mid-row and outputs of odd
    sides; infinite and huge inputs as a direct convolution has them (found by the held-out red-team pass)."""
    import tempfile
    from pathlib import Path

    import torch.nn.functional as F

    from ksbuild.prims.convolve import winograd_transform, winograd_untransform
    w = np.random.default_rng(5).standard_normal((16, 16, 3, 3))
    np.testing.assert_allclose(winograd_untransform(winograd_transform(w)), w, rtol=1e-12, atol=1e-12)
    kernels = ('import torch\nimport torch.nn.functional as F\n\n\n'
               'def big(x: "f32[n, 32, 23, 37]", w: "f32[64, 32, 3, 3]") -> "f32[n, 64, 23, 37]":\n'
               '    return F.conv2d(x, w, padding=1)\n\n\n'
               'def wide(x: "f32[n, 72, 9, 13]", w: "f32[120, 72, 3, 3]") -> "f32[n, 120, 9, 13]":\n'
               '    return F.conv2d(x, w, padding=1)\n')
    manifest = ('[package]\nname = "wino32"\n[kernels.big]\npython = "k.py:big"\n'
                '[kernels.wide]\npython = "k.py:wide"\n[exports]\nbig = "big"\nwide = "wide"\n')
    with tempfile.TemporaryDirectory() as d:
        pkg, src = build_kernel_file(Path(d), kernels, manifest, "wino32")
        rng = np.random.default_rng(6)
        x = rng.standard_normal((2, 32, 23, 37)).astype(np.float32)
        k = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
        want = src.big(torch.tensor(x, dtype=torch.float64), torch.tensor(k, dtype=torch.float64)).numpy()
        got = pkg.big(x, k)
        assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()
        # a transformed kernel over 512 KB (16 · 72 · 120 floats), which the first panels' tiles prefetch
        # (winograd::kernel_ahead), 15 row tiles of 8 output channels, 35 tiles of an odd-sided image
        x2 = rng.standard_normal((2, 72, 9, 13)).astype(np.float32)
        k2 = rng.standard_normal((120, 72, 3, 3)).astype(np.float32)
        want = src.wide(torch.tensor(x2, dtype=torch.float64), torch.tensor(k2, dtype=torch.float64)).numpy()
        got = pkg.wide(x2, k2)
        assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()
        assert (pkg.root / "share" / "wino32" / "src" / "wino32.cpp").read_text().count("ks::conv_winograd<float>(") >= 2
        # an infinite pixel (Winograd's transforms would subtract it from itself: NaN) and an image near the
        # largest float (they would overflow): those images are computed again directly, as torch does
        x_inf, pos = np.abs(x), np.abs(k)
        x_inf[1, 3, 4, 5] = np.inf
        got, want = pkg.big(x_inf, pos), F.conv2d(torch.tensor(x_inf), torch.tensor(pos), padding=1).numpy()
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        assert not np.isnan(got).any() and np.isinf(got).sum() == 9 * 64
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-3)
        x_big, small = np.full((1, 32, 23, 37), 2e38, np.float32), np.full((64, 32, 3, 3), 1e-3, np.float32)
        got = pkg.big(x_big, small)
        want = F.conv2d(torch.tensor(x_big), torch.tensor(small), padding=1).numpy()
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_jvp_matches_torch_func(built):
    pkg, src = built
    rng = np.random.default_rng(2)
    primals = _args(rng, (2, 4, 9, 7), (6, 2, 3, 2), (6,))
    tangents = _args(rng, (2, 4, 9, 7), (6, 2, 3, 2), (6,))
    _, want = torch.func.jvp(src.block, tuple(map(torch.tensor, primals)), tuple(map(torch.tensor, tangents)))
    np.testing.assert_allclose(pkg.block_jvp(*primals, *tangents), want.numpy(), rtol=1e-10, atol=1e-10)


def test_vmap_over_kernels_of_each_lane(built):
    """vmap(block) with a kernel per lane: the lanes are groups of their own (a literal count) or windows
    contracted lane by lane (the symbolic lane count of a vmapped export)."""
    pkg, src = built
    rng = np.random.default_rng(3)
    for lanes in (1, 3):
        xs, ws = _args(rng, (lanes, 2, 4, 9, 7), (lanes, 6, 2, 3, 2))
        (b,) = _args(rng, (6,))
        want = torch.vmap(src.block, in_dims=(0, 0, None))(torch.tensor(xs), torch.tensor(ws), torch.tensor(b))
        np.testing.assert_allclose(pkg.block_lanes(xs, ws, b), want.numpy(), rtol=1e-10, atol=1e-10)


def test_literal_lane_count_uses_groups():
    """vmap of a convolution with per-lane kernels over a literal lane count is one grouped conv."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    from ksbuild.prims.conv import conv
    b = Builder()
    x, w = Var(Type("f64", (3, 2, 4, 5, 5))), Var(Type("f64", (3, 6, 4, 3, 3)))
    (y,), batched = conv.batch(b, [x, w], [True, True], 3, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1),
                               groups=1)
    assert batched == [True] and y.type.shape == (3, 2, 6, 5, 5)
    assert [e.params.get("groups") for e in b.eqns if e.prim.name == "conv"] == [3]


def test_the_elementwise_work_after_a_product_is_its_epilogue(built):
    """After fuse_epilogue the bias and activation are the product's epilogue (no fusion of their own); the
    plain backend's C++ passes them to ks::conv / ks::packed_gemm as a lambda, the blas backend applies them
    to each block ks::conv_rows has just computed."""
    import subprocess
    import sys
    from pathlib import Path
    pkg, src = built
    share = pkg.root / "share" / pkg.desc["package"]
    manifest = Path(src.__file__).parent / "manifest.toml"
    ir = subprocess.run([sys.executable, "-m", "ksbuild", "ir", str(manifest), "--after", "fuse_epilogue"],
                        capture_output=True, text=True, check=True).stdout
    block = ir[ir.index("func block("):ir.index("func residual(")]
    assert "epilogue" in block and "fusion" not in block
    source = (share / "src" / f"{pkg.desc['package']}.cpp").read_text()
    if pkg.desc["package"].endswith("plain"):
        assert source.count("const auto epilogue") >= 4  # block, residual, line, dense (not ramp: an iota)
        assert "ks::conv<double>(" in source
        # this package has dozens of epilogues: those of one form share one lambda type (codegen/epilogue.py)
        assert "static auto epilogue_form1(" in source and re.search(r"= epilogue_form\d+\(", source)
    else:
        assert "ks::conv_rows<double>(" in source and "ks::library_gemm{}" in source


def test_per_image_chains_match_torch(built):
    """The per_row pass (transforms/per_row.py): chains of convolutions, pooling and elementwise work run image by
    image, for any batch size (symbolic and literal), through the vjp, with a second branch reading the same
    images, and with a mean over the batch between two convolutions (where the chain must stop)."""
    import subprocess
    import sys
    from pathlib import Path
    pkg, src = built
    rng = np.random.default_rng(5)
    w = _args(rng, (8, 3, 3, 3), (6, 8, 3, 3), (54, 4))
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 10, 10))
        want = src.layers(*[torch.tensor(a) for a in [x] + w]).numpy()
        np.testing.assert_allclose(pkg.layers(x, *w), want, rtol=1e-10, atol=1e-10)
        ts = [_t(a) for a in [x] + w]
        ct = rng.standard_normal((n, 4))
        src.layers(*ts).backward(torch.tensor(ct))
        for got, t in zip(pkg.layers_vjp(x, *w, ct), ts):
            np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)
    x4 = rng.standard_normal((4, 3, 10, 10))
    np.testing.assert_allclose(pkg.four(x4, *w), src.four(*[torch.tensor(a) for a in [x4] + w]).numpy(),
                               rtol=1e-10, atol=1e-10)
    for name, shapes in {"twin": ((3, 4, 8, 8), (4, 4, 3, 3), (4, 4, 1, 1)),
                         "coupled": ((3, 3, 6, 6), (4, 3, 3, 3), (4, 4, 3, 3))}.items():
        args = _args(rng, *shapes)
        want = getattr(src, name)(*[torch.tensor(a) for a in args]).numpy()
        np.testing.assert_allclose(getattr(pkg, name)(*args), want, rtol=1e-10, atol=1e-10, err_msg=name)
    manifest = Path(src.__file__).parent / "manifest.toml"
    ir = subprocess.run([sys.executable, "-m", "ksbuild", "ir", str(manifest), "--after", "per_row"],
                        capture_output=True, text=True, check=True).stdout
    funcs = {chunk.split("(")[0]: chunk for chunk in ir.split("\nfunc ")[1:]}
    for name in ("layers", "four", "twin"):
        assert funcs[name].count("func per_row(") == 1, name
        outer = [ln for ln in funcs[name].splitlines() if ln.startswith("  %")]
        assert not any("convolve[" in ln for ln in outer), name  # every convolution is inside the loop
    assert "contract[" in [ln for ln in funcs["layers"].splitlines() if ln.startswith("  %")][-1]
    assert funcs["coupled"].count("func per_row(") == 0  # one convolution on each side of the mean


SMALL_CONSTANT = '''
import torch

W0 = [[0.5, -1.0, 0.25], [1.5, 0.75, -0.5], [0.1, 0.2, 0.3], [-0.7, 0.9, 1.1], [0.0, -0.3, 0.6]]


def const_wt(x: "float[n, 3]") -> "float[n, 5]":
    return torch.tanh(x @ torch.tensor(W0).T)
'''


def test_a_small_constant_weight_builds_for_this_machines_level(tmp_path):
    """A 5 x 3 constant weight is one panel, printed as a small C++ array; GCC's -Warray-bounds once rejected
    the tiles' branches for more panels (found by the held-out red-team pass, float32 with cpu = "native"; built here
    for this machine's level, AVX-512's tiles on x86-64-v4, which shares the kernel layer with the other builds)."""
    manifest = ('[package]\nname = "constwt"\n[build]\ndtype = "float32"\n'
                '[kernels.const_wt]\npython = "k.py:const_wt"\n[exports]\nconst_wt = "const_wt"\n')
    pkg, src = build_kernel_file(tmp_path, SMALL_CONSTANT, manifest, "small_constant")
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(pkg.const_wt(x), src.const_wt(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


CROWDED = '''
import torch
import torch.nn.functional as F


def project(x: "float[n, 72, 56, 56]", w: "float[8, 72, 1, 1]", b: "float[8]") -> "float[n, 8, 56, 56]":
    return torch.relu(F.conv2d(x, w, b))
'''


def test_a_pointwise_layer_over_crowded_planes_matches_torch(tmp_path):
    """A pointwise layer from 72 channels of 56 × 56 planes (12544 bytes: their first lines in 16 of the L1 cache's
    64 sets, 4.5 a set) runs by ks::conv's panels method on AVX2 and AVX-512 (ks/conv.h: convs::crowded;
    tests/cpp/test_gemm_conv.cpp checks the method), with its scratch as prims/scratch.py plans it (the generated
    static_assert), for this machine's level: values against torch, batches 1 and 3."""
    manifest = ('[package]\nname = "crowded"\n[build]\ndtype = "float32"\n'
                '[kernels.project]\npython = "k.py:project"\n[exports]\nproject = "project"\n')
    pkg, src = build_kernel_file(tmp_path, CROWDED, manifest, "crowded")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((8, 72, 1, 1)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    for n in (1, 3):
        x = rng.standard_normal((n, 72, 56, 56)).astype(np.float32)
        want = src.project(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy()
        np.testing.assert_allclose(pkg.project(x, w, b), want, rtol=1e-4, atol=1e-4)


def test_onnx_conv_kernel_is_transformed_when_compiled(tmp_path):
    """An ONNX model's 3×3 convolutions of 2048+ channel pairs run by Winograd with their initializers transformed
    when the package is compiled (no ks::winograd_kernel call), values against onnxruntime at two batch sizes."""
    import warnings
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import ksbuild
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 32, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 32, 13, 12),), str(tmp_path / "convs.onnx"), dynamo=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    (tmp_path / "manifest.toml").write_text('[package]\nname = "wino_onnx"\n[kernels.convs]\nonnx = "convs.onnx"\n'
                                            '[exports]\nconvs = "convs"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    sess = ort.InferenceSession(str(tmp_path / "convs.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for n in (1, 3):
        x = rng.standard_normal((n, 32, 13, 12)).astype(np.float32)
        np.testing.assert_allclose(pkg.convs(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    source = (pkg.root / "share" / "wino_onnx" / "src" / "wino_onnx.cpp").read_text()
    assert source.count("ks::conv_winograd<float>(") == 2 and "ks::winograd_kernel" not in source


def test_winograd_on_symbolic_image_sizes(tmp_path):
    """Symbolic image sides choose Winograd at compile time; at run time any size works, down to a 1 × 1
    output (a single tile, cut) and sides that end in half a tile."""
    kernels = ('import torch\nimport torch.nn.functional as F\n\n\n'
               'def anysize(x: "float[n, 32, h, w]", k: "float[64, 32, 3, 3]") -> "float[n, 64, h, w]":\n'
               '    return torch.tanh(F.conv2d(x, k, padding=1))\n\n\n'
               'def valid(x: "float[n, 32, h, w]", k: "float[64, 32, 3, 3]") -> "float[n, 64, h - 2, w - 2]":\n'
               '    return F.conv2d(x, k)\n')
    manifest = ('[package]\nname = "wino_sym"\n[build]\ndtype = "float64"\n[kernels.anysize]\npython = "k.py:anysize"\n'
                '[kernels.valid]\npython = "k.py:valid"\n[exports]\nanysize = "anysize"\nvalid = "valid"\n')
    pkg, src = build_kernel_file(tmp_path, kernels, manifest, "wino_sym")
    rng = np.random.default_rng(8)
    w = rng.standard_normal((64, 32, 3, 3))
    for h, wd in [(1, 1), (2, 3), (3, 3), (5, 2), (17, 33), (40, 9)]:
        x = rng.standard_normal((2, 32, h, wd))
        want = src.anysize(torch.tensor(x), torch.tensor(w)).numpy()
        np.testing.assert_allclose(pkg.anysize(x, w), want, rtol=1e-10, atol=1e-10, err_msg=f"{h} x {wd}")
        if h >= 3 and wd >= 3:
            want = src.valid(torch.tensor(x), torch.tensor(w)).numpy()
            np.testing.assert_allclose(pkg.valid(x, w), want, rtol=1e-10, atol=1e-10, err_msg=f"{h} x {wd}")
    source = (pkg.root / "share" / "wino_sym" / "src" / "wino_sym.cpp").read_text()
    assert source.count("ks::conv_winograd<double>(") == 2
    from ksbuild.packaging.runtime import CallError
    with pytest.raises(CallError, match=r"output 'out' would have h - 2 = -1 elements .*\(h = 1\)"):
        pkg.valid(rng.standard_normal((1, 32, 1, 5)), w)  # (numpy's "negative dimensions" before)


def test_a_convolution_in_a_scalar_function(tmp_path):
    """A function of scalars keeps its temporaries on its stack (no workspace): a convolution inside one gets
    its scratch there too (it was handed a null pointer: a crash, or -Werror's array-bounds error for the
    direct path; found by the held-out red-team pass)."""
    kernels = ('import torch\nimport torch.nn.functional as F\n\n\n'
               'def wino(s: float) -> float:\n'
               '    x = (torch.arange(2048) % 11 - 5.0).reshape(1, 32, 8, 8) * s\n'
               '    w = ((torch.arange(18432) % 7 - 3) * 0.25).reshape(64, 32, 3, 3)\n'
               '    return F.conv2d(x, w, padding=1).sum() * 0.001\n\n\n'
               'def small(s: float) -> float:\n'
               '    x = (torch.arange(64) % 11 - 5.0).reshape(1, 4, 4, 4) * s\n'
               '    w = ((torch.arange(72) % 7 - 3) * 0.25).reshape(2, 4, 3, 3)\n'
               '    return torch.tanh(F.conv2d(x, w, padding=1)).sum()\n')
    manifest = ('[package]\nname = "scalar_conv"\n[build]\ndtype = "float64"\n[kernels.wino]\npython = "k.py:wino"\n'
                '[kernels.small]\npython = "k.py:small"\n[exports]\nwino = "wino"\nsmall = "small"\n'
                'small_grad = "grad(small)"\n')
    pkg, src = build_kernel_file(tmp_path, kernels, manifest, "scalar_conv")
    for name in ("wino", "small"):
        want = getattr(src, name)(torch.tensor(0.5, dtype=torch.float64)).item()
        assert getattr(pkg, name)(0.5) == pytest.approx(want, rel=1e-6)  # (torch's arange makes float32 here)
    s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    src.small(s).backward()
    assert pkg.small_grad(0.5) == pytest.approx(s.grad.item(), rel=1e-5)


def test_inverted_residual_vjp_builds_for_this_machines_level(tmp_path):
    """A MobileNetV2 inverted residual (1×1, depthwise 3×3, 1×1 with folded batch norms and relu6) and its vjp,
    built for this machine's level (x86-64-v4 here; found with cpu = "native"): with AVX-512, GCC 12 stopped the
    build on a false 'row may be used uninitialized' in ks/gemm.h's store (held-out pass over dynamo ONNX exports);
    values and gradients against torch."""
    import warnings
    pytest.importorskip("onnx")
    from torch import nn

    import ksbuild
    torch.manual_seed(0)
    h = 32
    block = nn.Sequential(nn.Conv2d(8, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                          nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                          nn.Conv2d(h, 8, 1, bias=False), nn.BatchNorm2d(8))
    for m in block:
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            return x + self.block(x)

    model = Residual().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(2, 8, 6, 6),), str(tmp_path / "ir.onnx"), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}, "y": {0: "b", 2: "h", 3: "w"}})
    (tmp_path / "manifest.toml").write_text('[package]\nname = "ir_native"\n'
                                            '[kernels.ir]\nonnx = "ir.onnx"\n'
                                            '[exports]\nir = "ir"\nir_vjp = "vjp(ir)"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 8, 7, 5)).astype(np.float32)
    ct = rng.standard_normal((3, 8, 7, 5)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    y = model(xt)
    (y * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(pkg.ir(x), y.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pkg.ir_vjp(x, ct), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_winograd_rule_leaves_few_tiles_of_large_kernels_direct():
    """select_backend's choice (prims/convolve.py, measured in docs/performance.md): Winograd from 2048 channel
    pairs and sides of 6, but sides below 8 with 256 × 256 pairs or more stay direct (ResNet-18's 7 × 7 layers)."""
    from ksbuild.ir.types import Type
    from ksbuild.prims.convolve import winograd_applies

    def applies(c, m, side):
        x, w, y = Type("f32", (1, c, side, side)), Type("f32", (m, c, 3, 3)), Type("f32", (1, m, side, side))
        return winograd_applies(x, w, y, (1, 1), (1, 1), 1)

    assert applies(64, 64, 6) and applies(128, 128, 7) and applies(256, 256, 8) and applies(512, 512, "h")
    assert not applies(512, 512, 7) and not applies(256, 256, 7) and not applies(64, 64, 5)
    assert not applies(32, 32, 16)  # fewer than 2048 pairs


def test_squeeze_excite_fc_is_a_product_over_the_batch(tmp_path):
    """A 1 × 1 convolution of images of one position ([n, C, 1, 1], a squeeze-excite block's fully connected
    layers) is the product [n, C] · [M, C]ᵀ (reading the kernel once for the batch, not once per image in
    few_dots) when the kernel has at least IMAGES_AS_ROWS_MIN elements (256 × 256 here), and stays outside the
    image-by-image loop, which is cut there; the other convolutions are still
    convolves; the lowered function evaluates as torch (the reference interpreter). Lowering alone, no build."""
    import torch.nn.functional as F

    from ksbuild.frontends.python.source import compile_python_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.pipeline import Options, lower
    (tmp_path / "k.py").write_text(KERNELS + '''

def se(x: "float[n, 8, 4, 4]", w: "float[256, 8, 3, 3]", f1: "float[256, 256, 1, 1]", b1: "float[256]",
       f2: "float[256, 256, 1, 1]", b2: "float[256]", w3: "float[8, 256, 1, 1]") -> "float[n, 8, 4, 4]":
    h = torch.relu(F.conv2d(x, w, padding=1))
    s = torch.mean(h, dim=(2, 3), keepdim=True)
    s = torch.sigmoid(F.conv2d(torch.relu(F.conv2d(s, f1, b1)), f2, b2))
    return F.conv2d(h * s, w3)
''')
    f = compile_python_kernel(tmp_path / "k.py", "se", "f64")
    g = lower(f, Options(), after="per_row")
    top = [e.prim.name for e in g.eqns if e.prim.name in ("loop", "convolve", "contract")]
    assert top.count("contract") == 2 and ("convolve" in top or "loop" in top), top
    for e in g.eqns:
        if e.prim.name == "loop":
            assert "contract" not in [d.prim.name for d in e.params["body"].eqns]
    threads = lower(f, Options(threads=2), after="select_backend")
    assert [e.prim.name for e in threads.eqns].count("contract") == 0
    rng = np.random.default_rng(3)
    args = _args(rng, (3, 8, 4, 4), (256, 8, 3, 3), (256, 256, 1, 1), (256,), (256, 256, 1, 1), (256,),
                 (8, 256, 1, 1))
    h = torch.relu(F.conv2d(torch.tensor(args[0]), torch.tensor(args[1]), padding=1))
    s = torch.sigmoid(F.conv2d(torch.relu(F.conv2d(h.mean((2, 3), keepdim=True), torch.tensor(args[2]),
                                                    torch.tensor(args[3]))), torch.tensor(args[4]), torch.tensor(args[5])))
    want = F.conv2d(h * s, torch.tensor(args[6])).numpy()
    for fn in (f, g):
        np.testing.assert_allclose(eval_func(fn, args)[0], want, rtol=1e-10, atol=1e-10)
