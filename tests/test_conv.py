"""The conv primitive and the epilogue fusion, compiled, against torch: strides, dilations, groups and
padding (backends plain and blas), gradients through its transposes, vmap over per-lane kernels (with a
literal and with a symbolic lane count), and the elementwise work after a convolution or a matrix
product applied as the kernels store their results (transforms/fuse_epilogue.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import build_kernel_file  # noqa: E402

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


def dense(x: "float[n, 20]", w: "float[20, 33]", b: "float[33]") -> "float[n, 33]":
    return F.gelu(x @ w + b)


def loss(x: "float[n, 4, 9, 7]", w: "float[6, 2, 3, 2]", b: "float[6]") -> float:
    return (block(x, w, b) ** 2).sum()
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
[kernels.dense]
python = "k.py:dense"
[kernels.loss]
python = "k.py:loss"
[exports]
block = "block"
residual = "residual"
line = "line"
ramp = "ramp"
dense = "dense"
loss_grad = "grad(loss, argnums=(0, 1, 2))"
block_lanes = "vmap(block, in_axes=(0, 0, None))"
block_jvp = "jvp(block)"
'''


@pytest.fixture(scope="module", params=["plain", "blas"])
def built(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"conv_{request.param}")
    return build_kernel_file(root, KERNELS, MANIFEST.format(backend=request.param), f"conv_kernels_{request.param}")


def _args(rng, *shapes):
    return [rng.standard_normal(s) for s in shapes]


def _t(a):
    return torch.tensor(a, requires_grad=True)


def test_convolutions_match_torch(built):
    pkg, src = built
    rng = np.random.default_rng(0)
    cases = {"block": ((3, 4, 9, 7), (6, 2, 3, 2), (6,)), "residual": ((2, 3, 8, 8), (3, 3, 3, 3)),
             "line": ((3, 2, 11), (5, 2, 4)), "ramp": ((2, 2, 6, 6), (3, 2, 3, 3)), "dense": ((5, 20), (20, 33), (33,))}
    for name, shapes in cases.items():
        args = _args(rng, *shapes)
        want = getattr(src, name)(*[torch.tensor(a) for a in args]).numpy()
        np.testing.assert_allclose(getattr(pkg, name)(*args), want, rtol=1e-10, atol=1e-10, err_msg=name)


def test_gradients_through_the_transposes_match_torch_autograd(built):
    pkg, src = built
    rng = np.random.default_rng(1)
    args = _args(rng, (3, 4, 9, 7), (6, 2, 3, 2), (6,))
    ts = [_t(a) for a in args]
    src.loss(*ts).backward()
    for got, t in zip(pkg.loss_grad(*args), ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-9)


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
    else:
        assert "ks::conv_rows<double>(" in source and "ks::library_gemm{}" in source


SMALL_CONSTANT = '''
import torch

W0 = [[0.5, -1.0, 0.25], [1.5, 0.75, -0.5], [0.1, 0.2, 0.3], [-0.7, 0.9, 1.1], [0.0, -0.3, 0.6]]


def const_wt(x: "float[n, 3]") -> "float[n, 5]":
    return torch.tanh(x @ torch.tensor(W0).T)
'''


def test_a_small_constant_weight_builds_for_the_native_instruction_set(tmp_path):
    """A 5 x 3 constant weight is one panel, printed as a small C++ array; GCC's -Warray-bounds once rejected
    the tiles' branches for more panels (found by the held-out red-team pass, float32 with cpu = "native")."""
    manifest = ('[package]\nname = "constwt"\n[build]\ndtype = "float32"\ncpu = "native"\n'
                '[kernels.const_wt]\npython = "k.py:const_wt"\n[exports]\nconst_wt = "const_wt"\n')
    pkg, src = build_kernel_file(tmp_path, SMALL_CONSTANT, manifest, "small_constant")
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(pkg.const_wt(x), src.const_wt(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
