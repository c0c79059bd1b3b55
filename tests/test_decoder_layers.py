"""A decoder's layers (U-Net, FCN, GAN generators): ConvTranspose and upsampling Resize, checked against torch.

Found on a held-out U-Net (2026-12-01): its ConvTranspose2d(64, 32, 2, stride=2) took 10 times onnxruntime's time
(a matrix product per output position: the product contracted straight into the taps-beside-positions order) and
its bilinear Upsample(2) 3.5 times (a dense [128, 64] interpolation matrix per axis: 64 multiply-adds per output
where 2 are needed). Now a float ConvTranspose's products are one 1x1 convolution (m·taps output channels, its
kernel transposed when the package is built), a fold of windows that tile their axis is a reshape, and a resize by
a whole factor sums its few taps over edge-padded slices. Values and derivatives against torch for those forms and
the ones that keep the general path (overlapping windows, padding, output_padding, groups, a fractional scale).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

KERNELS = '''
import torch
import torch.nn.functional as F


def tiled(x: "f32[2, 6, 5, 4]", w: "f32[6, 4, 2, 2]", b: "f32[4]") -> "f32[2, 4, 10, 8]":
    return F.conv_transpose2d(x, w, b, stride=2)


def overlapping(x: "f32[2, 6, 5, 4]", w: "f32[6, 2, 3, 3]") -> "f32[2, 4, 10, 8]":
    return F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)


def wide(x: "f64[1, 3, 7]", w: "f64[3, 5, 4]") -> "f64[1, 5, 28]":
    return F.conv_transpose1d(x, w, stride=4)


def bilinear(x: "f32[2, 3, 6, 5]") -> "f32[2, 3, 12, 10]":
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


def corners(x: "f64[1, 2, 4, 5]") -> "f64[1, 2, 12, 15]":
    return F.interpolate(x, scale_factor=3, mode="bilinear", align_corners=True)


def cubic(x: "f64[1, 2, 6, 7]") -> "f64[1, 2, 12, 14]":
    return F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)


def fractional(x: "f64[1, 2, 6, 4]") -> "f64[1, 2, 9, 6]":
    return F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False)


def replicate(x: "f32[2, 3, 5, 4]") -> "f32[2, 3, 8, 7]":
    return F.pad(x, (2, 1, 0, 3), mode="replicate")


def circular(x: "f64[2, 3, 5, 4]") -> "f64[2, 3, 7, 7]":
    return F.pad(x, (1, 2, 2, 0), mode="circular")


def decoder(x: "f32[1, 8, 6, 6]", w: "f32[8, 4, 2, 2]") -> "f32[1, 4, 24, 24]":
    return torch.sigmoid(F.interpolate(F.conv_transpose2d(x, w, stride=2), scale_factor=2, mode="bilinear"))
'''

SHAPES = {"tiled": [(2, 6, 5, 4), (6, 4, 2, 2), (4,)], "overlapping": [(2, 6, 5, 4), (6, 2, 3, 3)],
          "wide": [(1, 3, 7), (3, 5, 4)], "bilinear": [(2, 3, 6, 5)], "corners": [(1, 2, 4, 5)],
          "cubic": [(1, 2, 6, 7)], "fractional": [(1, 2, 6, 4)],
          "replicate": [(2, 3, 5, 4)], "circular": [(2, 3, 5, 4)], "decoder": [(1, 8, 6, 6), (8, 4, 2, 2)]}
F64 = {"wide", "corners", "cubic", "fractional", "circular"}

MANIFEST = "[package]\nname = \"rt_decoder\"\n\n[kernels]\n" + "\n".join(
    f'[kernels.{k}]\npython = "k.py:{k}"' for k in SHAPES) + "\n\n[exports]\n" + "\n".join(
    f'{k} = "{k}"\n{k}_vjp = "vjp({k})"' for k in SHAPES) + "\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("decoder"), KERNELS, MANIFEST, "rt_decoder_k")


def _inputs(name: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = np.float64 if name in F64 else np.float32
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES[name]]


@pytest.mark.parametrize("name", list(SHAPES))
def test_values_match_torch(built, name):
    p, k = built
    xs = _inputs(name)
    want = getattr(k, name)(*map(torch.tensor, xs)).numpy()
    got = getattr(p, name)(*xs)
    tol = 1e-12 if name in F64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("name", list(SHAPES))
def test_vjp_matches_torch(built, name):
    p, k = built
    xs = _inputs(name, 1)
    args = [torch.tensor(x, requires_grad=True) for x in xs]
    out = getattr(k, name)(*args)
    ct = np.random.default_rng(2).standard_normal(tuple(out.shape)).astype(xs[0].dtype)
    want = torch.autograd.grad(out, args, torch.tensor(ct))
    got = getattr(p, f"{name}_vjp")(*xs, ct)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    tol = 1e-11 if name in F64 else 2e-5
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=tol, atol=tol * np.abs(w.numpy()).max())


def _ir(tmp_path, name: str) -> str:
    from ksbuild.exports import build_exports
    from ksbuild.ir.printer import print_func
    from ksbuild.manifest import load_manifest
    (tmp_path / "k.py").write_text(KERNELS)
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "ir_{name}"\n\n[kernels.{name}]\n'
                                            f'python = "k.py:{name}"\n\n[exports]\n{name} = "{name}"\n')
    return "\n".join(print_func(e.func) for e in build_exports(load_manifest(tmp_path / "manifest.toml")))


def test_the_fast_forms_are_taken(tmp_path):
    """A ConvTranspose whose stride is its kernel is one convolve and no fold; a resize by 2 no product; the
    decoder's result is written straight into the output (no copy of a reshaped value at the end); edge and wrap
    padding are slices joined to x, not a gather of an index per element."""
    tiled = _ir(tmp_path, "tiled")
    assert "convolve[" in tiled and "fold[" not in tiled and "contract[" not in tiled, tiled
    assert "fold[" in _ir(tmp_path, "overlapping")  # (overlapping windows still add up)
    bilinear = _ir(tmp_path, "bilinear")
    assert "contract[" not in bilinear and "einsum[" not in bilinear, bilinear
    assert "contract[" in _ir(tmp_path, "fractional")  # (a fractional scale keeps the dense map)
    for name in ("bilinear", "replicate", "circular"):
        ir = bilinear if name == "bilinear" else _ir(tmp_path, name)
        assert "gather[" not in ir, ir
