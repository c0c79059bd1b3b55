"""ks::conv_dots (prelude/ks/conv.h), the convolutions of a target without a vector unit (impl "dots":
transforms/dot_convs.py): per output position the window's values dotted with 4 kernel rows at a time, read
where they are inside the image and gathered with zeros where the window reads padding.

The kernel itself against torch's convolution on the host (g++; the template is the same code the Cortex-M4 build
compiles, with 64-bit indices), over 1-, 2- and 3-d shapes, strides, dilations, groups, depthwise channels with a
multiplier, windows that read padding on one side only, and an affine epilogue; the pass on the IR (the
interpreter's result unchanged). tests/test_kernel_layer_m4.py runs a network of them on QEMU."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT

from ksbuild.ir.interp import eval_func
from ksbuild.ir.verify import verify
from ksbuild.transforms.pipeline import Options, lower

# (channels, out channels, groups, in [d, h, w], kernel, stride, dilation, leading pad, trailing pad)
CASES = [
    (3, 8, 1, (1, 16, 16), (1, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1), (0, 1, 1)),    # the CNN's first layer
    (8, 16, 1, (1, 8, 8), (1, 3, 3), (1, 2, 2), (1, 1, 1), (0, 0, 0), (0, 0, 0)),     # strided, no padding
    (5, 7, 1, (1, 9, 11), (1, 1, 1), (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0)),     # pointwise, 7 = 4 + 3 rows
    (4, 6, 1, (1, 10, 9), (1, 1, 1), (1, 2, 3), (1, 1, 1), (0, 0, 0), (0, 0, 0)),     # one tap, strided
    (6, 6, 6, (1, 13, 12), (1, 3, 3), (1, 2, 2), (1, 1, 1), (0, 1, 1), (0, 1, 1)),    # depthwise
    (4, 8, 4, (1, 7, 9), (1, 3, 5), (1, 1, 2), (1, 1, 1), (0, 1, 2), (0, 0, 1)),      # depthwise x2, uneven pads
    (6, 4, 2, (1, 11, 10), (1, 3, 3), (1, 1, 1), (1, 2, 3), (0, 2, 1), (0, 1, 3)),    # groups, dilation
    (2, 5, 1, (1, 1, 23), (1, 1, 4), (1, 1, 2), (1, 1, 1), (0, 0, 3), (0, 0, 0)),     # 1-d, padding in front only
    (3, 4, 1, (5, 6, 7), (2, 3, 2), (2, 1, 2), (2, 1, 1), (1, 1, 0), (0, 1, 1)),      # 3-d
    (3, 9, 1, (1, 2, 3), (1, 5, 5), (1, 1, 1), (1, 1, 1), (0, 2, 2), (0, 2, 2)),      # windows larger than the image
]

PROGRAM = r'''
#include <cstdio>
#include <vector>
#include "ks/conv.h"
#include "ks/kernels.h"

int main(int, char** argv) {
    std::FILE* in = std::fopen(argv[1], "rb");
    long long v[26];
    if (std::fread(v, sizeof v, 1, in) != 1) return 2;
    ks::conv_shape s{v[0], v[1], v[2], {v[3], v[4], v[5]}, {v[6], v[7], v[8]}, {v[9], v[10], v[11]},
                     {v[12], v[13], v[14]}, {v[15], v[16], v[17]}, {v[18], v[19], v[20]}};
    const long long nx = v[21], nw = v[22], ny = v[23], relu = v[24], images = v[25];
    std::vector<float> x(nx), w(nw), b(v[1]), y(ny), scratch(ks::convs::dots_scratch(s));
    if (std::fread(x.data(), 4, nx, in) != size_t(nx) || std::fread(w.data(), 4, nw, in) != size_t(nw) ||
        std::fread(b.data(), 4, v[1], in) != size_t(v[1])) return 3;
    const ks::affine<float> f = ks::make_affine<float>(b.data(), relu ? 1u : 0u);
    ks::conv_dots<float>(s, images, x.data(), w.data(), y.data(), scratch.data(),
                         relu ? ks::affine_epilogue<float>(f) : ks::epilogue<float>{});
    std::FILE* out = std::fopen(argv[2], "wb");
    std::fwrite(y.data(), 4, ny, out);
    std::fclose(out);
    return 0;
}
'''


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    d = tmp_path_factory.mktemp("dots")
    (d / "dots.cpp").write_text(PROGRAM)
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "prelude"),
                    str(d / "dots.cpp"), "-o", str(d / "dots")], check=True)
    return d / "dots"


def _oracle(x, w, b, groups, stride, dilation, lead, trail, relu):
    """torch's conv3d of x zero-padded by (lead, trail) per axis, plus the bias, clamped at 0 if relu."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    pads = [p for a in (2, 1, 0) for p in (lead[a], trail[a])]
    y = f.conv3d(f.pad(torch.from_numpy(x), pads), torch.from_numpy(w), torch.from_numpy(b), stride=stride,
                 dilation=dilation, groups=groups).numpy()
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "bias_relu"])
def test_conv_dots_computes_torchs_convolution(program, tmp_path, case, relu):
    c, m, g, size, kernel, stride, dilation, lead, trail = case
    rng = np.random.default_rng(len(tmp_path.name))
    images = 2
    x = rng.standard_normal((images, c) + size).astype(np.float32)
    w = rng.standard_normal((m, c // g) + kernel).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    want = _oracle(x, w, b, g, stride, dilation, lead, trail, relu)
    if not relu:
        want = want - b.reshape(1, m, 1, 1, 1)  # (no epilogue: no bias)
    out = want.shape[2:]
    header = [c, m, g, *size, *out, *kernel, *stride, *dilation, *lead, x.size, w.size, want.size, int(relu), images]
    (tmp_path / "in.bin").write_bytes(np.array(header, np.int64).tobytes() + x.tobytes() + w.tobytes() + b.tobytes())
    subprocess.run([str(program), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    got = np.fromfile(tmp_path / "out.bin", np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_without_vectors_float_convolutions_are_dots():
    """dot_convs runs for a target without a vector unit only (Options.vectors false): its tiles and depthwise
    convolutions become impl "dots", and then the classifier's product a · bᵀ a one-tap convolution of the same
    kernel, with the same values (the interpreter); with vectors nothing changes."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    from ksbuild.prims.conv import conv
    rng = np.random.default_rng(3)
    b = Builder()
    x = Var(Type("f32", (1, 4, 9, 9)), "x")
    w1 = Var(Type("f32", (6, 4, 3, 3)), "w1")
    w2 = Var(Type("f32", (6, 1, 3, 3)), "w2")
    (y,) = b.bind(conv, [x, w1], dict(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1))
    (z,) = b.bind(conv, [y, w2], dict(strides=(2, 2), pads=(1, 1, 1, 1), dilations=(1, 1), groups=6))
    v = Var(Type("f32", (10, 150)), "v")
    logits = b.einsum(b.reshape(z, shape=(1, 150)), v, spec="ij,kj->ik")
    f = b.func("net", [x, w1, w2, v], [logits])
    impls = {}
    for vectors in (True, False):
        g = lower(f, Options(backend="plain", vectors=vectors), after="dot_convs")
        verify(g)
        impls[vectors] = [e.params["impl"] for e in g.eqns if e.prim.name == "convolve"]
        args = [rng.standard_normal(v.type.shape).astype(np.float32) for v in f.params]
        np.testing.assert_allclose(eval_func(g, args)[0], eval_func(f, args)[0], rtol=1e-5, atol=1e-5)
    assert impls == {True: ["tiles", "depthwise"], False: ["dots", "dots", "dots"]}


def test_without_vectors_or_convolutions_a_product_of_one_row_is_a_dense_row_call_or_a_loop_nest():
    """Without convolutions dot_convs makes a float product of one row (a batch-1 MLP's layer) x · wᵀ impl "dense"
    (ks::tiles::dense_row) on a target without a vector unit, or impl "loops" when w has fewer than 4 rows; one of two
    rows keeps the dot kernels (impl "tiles"); with vectors nothing changes. The values are the interpreter's."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    rng = np.random.default_rng(5)
    for rows, n in ((1, 10), (2, 10), (1, 3)):
        b = Builder()
        x = Var(Type("f32", (rows, 30)), "x")
        w = Var(Type("f32", (n, 30)), "w")
        f = b.func("dense", [x, w], [b.einsum(x, w, spec="ij,kj->ik")])
        args = [rng.standard_normal(v.type.shape).astype(np.float32) for v in f.params]
        for vectors in (True, False):
            g = lower(f, Options(backend="plain", vectors=vectors), after="dot_convs")
            verify(g)
            (impl,) = [e.params["impl"] for e in g.eqns if e.prim.name == "contract"]
            want = ("dense" if n >= 4 else "loops") if rows == 1 and not vectors else "tiles"
            assert impl == want, (rows, n, vectors, impl)
            np.testing.assert_allclose(eval_func(g, args)[0], args[0] @ args[1].T, rtol=1e-5, atol=1e-5)


def test_at_size_a_dense_row_of_even_columns_takes_them_two_at_a_time():
    """At optimize = "size" dot_convs gives a product of one row x · wᵀ with n even `block` 2 (ks::tiles::dense_row<T,
    2>, which has no overlapping last block: n must be even), one with n odd none (4 columns, the last block
    overlapping); at speed none. The values are the interpreter's."""
    from ksbuild.ir.builder import Builder
    from ksbuild.ir.core import Var
    from ksbuild.ir.types import Type
    rng = np.random.default_rng(6)
    for n in (10, 7):
        b = Builder()
        x = Var(Type("f32", (1, 30)), "x")
        w = Var(Type("f32", (n, 30)), "w")
        f = b.func("dense", [x, w], [b.einsum(x, w, spec="ij,kj->ik")])
        args = [rng.standard_normal(v.type.shape).astype(np.float32) for v in f.params]
        for size in (False, True):
            g = lower(f, Options(backend="plain", vectors=False, size=size), after="dot_convs")
            verify(g)
            (params,) = [e.params for e in g.eqns if e.prim.name == "contract"]
            assert params["impl"] == "dense" and params.get("block", 4) == (2 if size and n % 2 == 0 else 4), (n, size)
            np.testing.assert_allclose(eval_func(g, args)[0], args[0] @ args[1].T, rtol=1e-5, atol=1e-5)
