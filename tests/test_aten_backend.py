"""backend = "aten": matrix-product contractions call ks::gemm of ks/aten.h, which runs at::mm_out
on from_blob views of the operands (the ATen bridge, src/ks_aten.cpp, is the one source compiled
with exceptions); everything else is the plain backend's code.

Oracle: the same manifest built with the plain backend (and numpy), on layouts ks::gemm must map
(plain, transposed, strided by a slice, batched, a transposed result), reverse mode's products, and
a torch.export model; plus a C++ consumer that links the installed package (and so libtorch).
"""
from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from conftest import DEBUG

import ksbuild
from ksbuild.errors import KsbuildError

torch = pytest.importorskip("torch", reason="backend = 'aten' links the libtorch of the installed PyTorch")

KERNELS = '''
import torch


def mm(a: "float[m, k]", b: "float[k, n]") -> "float[m, n]":
    return a @ b


def batched_t(a: "float[b, m, k]", c: "float[b, k, n]") -> "float[n, b, m]":
    return torch.einsum("bij,bjk->kbi", a, c)


def sliced(a: "float[m, k]", b: "float[k, n]") -> "float[m, n]":
    return a[:, 1:] @ b[1:, :]


def mlp_loss(w1: "float[h, d]", w2: "float[o, h]", x: "float[n, d]") -> float:
    hidden = torch.tanh(torch.einsum("hd,nd->nh", w1, x))
    return torch.sum(torch.einsum("oh,nh->no", w2, hidden) ** 2)
'''

MANIFEST = '''
[package]
name = "amats"

[kernels]
mm = { python = "k.py:mm" }
batched_t = { python = "k.py:batched_t" }
sliced = { python = "k.py:sliced" }
mlp_loss = { python = "k.py:mlp_loss" }
mlp = { torch = "MODELS:make_mlp" }

[exports]
mm = "mm"
mm_vjp = "vjp(mm)"
batched_t = "batched_t"
sliced = "sliced"
mlp_loss = "mlp_loss"
mlp_grad = "grad(mlp_loss, argnums=(0, 1))"
mlp = "mlp"
mlp_vjp = "vjp(mlp)"
'''


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    from conftest import ROOT
    d = tmp_path_factory.mktemp("aten")
    (d / "k.py").write_text(KERNELS)
    (d / "manifest.toml").write_text(MANIFEST.replace("MODELS", str(ROOT / "tests" / "torch_export_models.py")))
    return d / "manifest.toml"


@pytest.fixture(scope="module")
def pkgs(manifest):
    return {b: ksbuild.build(manifest, backend=b, optimize=DEBUG) for b in ("plain", "aten")}


def _args(name: str, rng):
    shapes = {"mm": [(7, 5), (5, 3)], "batched_t": [(2, 4, 6), (2, 6, 3)], "sliced": [(5, 6), (6, 4)],
              "mlp_loss": [(8, 4), (3, 8), (5, 4)], "mlp_grad": [(8, 4), (3, 8), (5, 4)], "mlp": [(9, 6)],
              "mm_vjp": [(7, 5), (5, 3), (7, 3)], "mlp_vjp": [(9, 6), (9, 4)]}[name]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("name", ["mm", "mm_vjp", "batched_t", "sliced", "mlp_loss", "mlp_grad", "mlp", "mlp_vjp"])
def test_aten_matches_plain(pkgs, name):
    args = _args(name, np.random.default_rng(0))
    want = pkgs["plain"].exports[name](*args)
    got = pkgs["aten"].exports[name](*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_aten_calls_go_through_the_bridge(pkgs):
    """The aten build calls ks::gemm from ks/aten.h (the plain one has loops only); numpy agrees on mm."""
    src = {b: next((p.root / "share" / "amats" / "src").glob("amats.cpp")).read_text() for b, p in pkgs.items()}
    assert '#include "ks/aten.h"' in src["aten"] and "ks::gemm<float>" in src["aten"]
    assert "ks::gemm" not in src["plain"]
    a, b = _args("mm", np.random.default_rng(1))
    np.testing.assert_allclose(pkgs["aten"].mm(a, b), a @ b, rtol=1e-5, atol=1e-5)
    # the bridge itself succeeds (status 0: no fallback to loops), on a transposed operand too
    bridge = pkgs["aten"].lib.ks_aten_gemm_f32
    c = np.full((7, 3), np.nan, np.float32)
    bt = np.ascontiguousarray(b.T)
    p = lambda x: x.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    bridge.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] * 3 + [ctypes.c_int]
    assert bridge(7, 3, 5, p(a), 5, 1, p(bt), 1, 5, p(c), 3, 1, 0) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert bridge(7, 3, 5, p(a), 5, 1, p(bt), 1, 5, p(c), 3, 1, 1) == 0  # accumulate: c += a @ b
    np.testing.assert_allclose(c, 2 * (a @ b), rtol=1e-5, atol=1e-5)


def test_aten_is_host_x86_64_only(manifest):
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.package import resolve_target
    m = load_manifest(manifest, "aten")
    with pytest.raises(KsbuildError, match="backend 'aten' links libtorch, which ksbuild supports on x86-64 hosts"):
        resolve_target(m, "aarch64-linux-gnu")


def test_consumer_links_libtorch_through_the_package(manifest, tmp_path):
    """A C++ app finds the installed package with find_package, which finds Torch for it."""
    from ksbuild.compile.cmake import cmake_exe
    from ksbuild.packaging.package import package
    dist = package(manifest, tmp_path / "dist", backend="aten", progress=lambda s: None)
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(app LANGUAGES CXX)\nfind_package(amats CONFIG REQUIRED)\n"
        "add_executable(app main.cpp)\ntarget_link_libraries(app PRIVATE amats::amats)\n")
    (app / "main.cpp").write_text(
        "#include <amats.h>\n#include <cstdio>\nint main() {\n"
        "  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4];\n"
        "  int s = amats_mm(2, 3, 2, a, b, c, nullptr);\n"
        '  std::printf("%d %g %g %g %g\\n", s, c[0], c[1], c[2], c[3]);\n  return s;\n}\n')
    for cmd in ([cmake_exe(), "-S", str(app), "-B", str(tmp_path / "b"), f"-DCMAKE_PREFIX_PATH={dist}"],
                [cmake_exe(), "--build", str(tmp_path / "b")]):
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    out = subprocess.run([str(tmp_path / "b" / "app")], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["0", "4", "5", "10", "11"]  # [[1 2 3] [4 5 6]] @ [[1 0] [0 1] [1 1]]
