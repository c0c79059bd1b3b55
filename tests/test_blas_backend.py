"""backend = "blas": matrix-product contractions call ks::gemm (CBLAS); everything else is unchanged.

The oracle is numpy on the same inputs. The kernels cover each operand layout ks::gemm must map
to CBLAS (plain, transposed, strided by a slice, batched, a column-major result) and the
accumulating products of reverse mode; the install tree must link a BLAS for consumers.
"""
from __future__ import annotations

import subprocess
import textwrap

import numpy as np
import pytest

import ksbuild

KERNELS = '''
import torch


def mm(a: "float[m, k]", b: "float[k, n]") -> "float[m, n]":
    return a @ b


def nt(a: "float[m, k]", b: "float[n, k]") -> "float[m, n]":
    return torch.einsum("ik,jk->ij", a, b)


def tn(a: "float[k, m]", b: "float[k, n]") -> "float[m, n]":
    return torch.einsum("ki,kj->ij", a, b)


def batched(a: "float[b, m, k]", c: "float[b, k, n]") -> "float[b, m, n]":
    return torch.einsum("bij,bjk->bik", a, c)


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
name = "mats"

[build]
dtype = "float64"
backend = "blas"

[kernels]
mm = { python = "k.py:mm" }
nt = { python = "k.py:nt" }
tn = { python = "k.py:tn" }
batched = { python = "k.py:batched" }
batched_t = { python = "k.py:batched_t" }
sliced = { python = "k.py:sliced" }
mlp_loss = { python = "k.py:mlp_loss" }

[exports]
mm = "mm"
nt = "nt"
tn = "tn"
batched = "batched"
batched_t = "batched_t"
sliced = "sliced"
mlp_loss = "mlp_loss"
mlp_grad = "grad(mlp_loss, argnums=(0, 1))"
mm_vjp = "vjp(mm)"
'''


@pytest.fixture(scope="module")
def mats(tmp_path_factory):
    root = tmp_path_factory.mktemp("mats")
    (root / "k.py").write_text(KERNELS)
    (root / "manifest.toml").write_text(MANIFEST)
    return ksbuild.build(root / "manifest.toml"), root


def rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).normal(size=shape)


def test_products_match_numpy(mats):
    pkg, _ = mats
    a, b = rand(5, 7), rand(7, 3)
    np.testing.assert_allclose(pkg.mm(a, b), a @ b, rtol=1e-12)
    np.testing.assert_allclose(pkg.nt(a, rand(4, 7)), a @ rand(4, 7).T, rtol=1e-12)
    np.testing.assert_allclose(pkg.tn(rand(7, 5), b), rand(7, 5).T @ b, rtol=1e-12)
    x, y = rand(2, 5, 7), rand(2, 7, 3)
    np.testing.assert_allclose(pkg.batched(x, y), x @ y, rtol=1e-12)
    np.testing.assert_allclose(pkg.batched_t(x, y), np.einsum("bij,bjk->kbi", x, y), rtol=1e-12)
    np.testing.assert_allclose(pkg.sliced(a, b), a[:, 1:] @ b[1:, :], rtol=1e-12)


def test_transposed_operands_small_and_large(mats):
    """ks::gemm copies a transposed operand of at most 2048 elements untransposed before calling
    BLAS, and passes a larger one as it is: both give numpy's product, on either side."""
    pkg, _ = mats
    for m, k, n in ((3, 40, 50), (30, 70, 40)):  # b has 2000 elements, then 2800
        a, b = rand(m, k), rand(n, k)
        # (k up to 70 terms: an entry near 0 by cancellation differs from numpy's by the sum's rounding, so the
        # tolerance is relative to the terms' size, not the entry's; the seeded inputs drew such entries)
        np.testing.assert_allclose(pkg.nt(a, b), a @ b.T, rtol=1e-12, atol=1e-13 * k)
        a2, b2 = rand(k, n), rand(k, m)
        np.testing.assert_allclose(pkg.tn(a2, b2), a2.T @ b2, rtol=1e-12, atol=1e-13 * k)


def test_gradients_accumulate_through_gemm(mats):
    """Reverse mode of a two-layer model: its products (some accumulating) vs the analytic gradient."""
    pkg, _ = mats
    w1, w2, x = rand(6, 4), rand(3, 6), rand(9, 4)
    hidden = np.tanh(x @ w1.T)
    out = hidden @ w2.T
    g_out = 2 * out
    g_w2 = g_out.T @ hidden
    g_w1 = ((g_out @ w2) * (1 - hidden ** 2)).T @ x
    assert pkg.mlp_loss(w1, w2, x) == pytest.approx(np.sum(out ** 2), rel=1e-12)
    got_w1, got_w2 = pkg.mlp_grad(w1, w2, x)
    np.testing.assert_allclose(got_w1, g_w1, rtol=1e-10)
    np.testing.assert_allclose(got_w2, g_w2, rtol=1e-10)
    a, b, ct = rand(5, 7), rand(7, 3), rand(5, 3)
    ga, gb = pkg.mm_vjp(a, b, ct)
    np.testing.assert_allclose(ga, ct @ b.T, rtol=1e-12)
    np.testing.assert_allclose(gb, a.T @ ct, rtol=1e-12)


def test_library_calls_cblas(mats):
    pkg, _ = mats
    source = (pkg.root / "share/mats/src/mats.cpp").read_text()
    assert source.count("ks::gemm<double>(") >= 7
    undefined = subprocess.run(["nm", "-u", str(pkg.root / "lib/libmats.a")], capture_output=True, text=True).stdout
    assert "cblas_dgemm" in undefined


def test_consumer_links_blas_through_find_package(mats, tmp_path):
    """The installed CMake package finds BLAS itself: a consumer only links mats::mats."""
    from ksbuild.compile.cmake import cmake_exe

    pkg, _ = mats
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(textwrap.dedent("""
        cmake_minimum_required(VERSION 3.16)
        project(app CXX)
        find_package(mats CONFIG REQUIRED)
        add_executable(app main.cpp)
        target_link_libraries(app PRIVATE mats::mats)
    """))
    (app / "main.cpp").write_text(textwrap.dedent("""
        #include "mats.h"
        #include <cstdio>
        int main() {
            const double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
            double c[4];
            if (mats_mm(2, 2, 2, a, b, c, nullptr) != 0) return 1;
            std::printf("%g %g %g %g\\n", c[0], c[1], c[2], c[3]);
            return 0;
        }
    """))
    cmake = cmake_exe()
    build = tmp_path / "build"
    subprocess.run([cmake, "-S", str(app), "-B", str(build), f"-DCMAKE_PREFIX_PATH={pkg.root}"], check=True,
                   capture_output=True)
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True)
    out = subprocess.run([str(build / "app")], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["19", "22", "43", "50"]
