"""clang++ builds a transformer-like layer (and its vjp) warning-free for the portable x86-64 library (three
instruction-set levels, their kernel layers and the dispatcher), and gives the values g++ gives, which a numpy
transcription of the layer confirms. The clang++ build turns -Werror off (tblock_WERROR=OFF) so that a warning is
reported by the warnings test while the values are still compared; a warning would fail a user's default build
(-Werror on). g++'s side is ksbuild.build's (this machine's level, the session's build cache): every other package
test already builds with g++ and -Werror, so a second portable build here would check nothing new. About a minute
of CPU on 2 cores.

Needs clang++ (scripts/install.sh installs the apt package clang as root); skips naming it otherwise."""
from __future__ import annotations

import math
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ksbuild
from ksbuild.compile.cmake import cmake_exe
from ksbuild.packaging.package import render
from ksbuild.packaging.runtime import Package

KERNEL = '''import torch
import torch.nn.functional as F

HEADS = 2


def block(x: "float[n, 8]", wqkv: "float[24, 8]", wo: "float[8, 8]", g1: "float[8]", b1: "float[8]",
          g2: "float[8]", b2: "float[8]", w1: "float[16, 8]", c1: "float[16]", w2: "float[8, 16]",
          c2: "float[8]") -> "float[n, 8]":
    """A pre-norm transformer encoder block: causal 2-head self-attention, then a GELU MLP, each with a residual."""
    n = x.shape[0]
    a = F.layer_norm(x, (8,), g1, b1)
    q, k, v = (a @ wqkv.T).chunk(3, dim=1)
    q = q.reshape(n, HEADS, 4).transpose(0, 1)
    k = k.reshape(n, HEADS, 4).transpose(0, 1)
    v = v.reshape(n, HEADS, 4).transpose(0, 1)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(n, 8)
    x = x + o @ wo.T
    m = F.layer_norm(x, (8,), g2, b2)
    return x + F.gelu(m @ w1.T + c1) @ w2.T + c2
'''
MANIFEST = '''[package]
name = "tblock"
version = "0.1.0"

[kernels.block]
python = "block.py:block"

[exports]
block = "block"
block_vjp = "vjp(block)"
'''
SHAPES = {"wqkv": (24, 8), "wo": (8, 8), "g1": (8,), "b1": (8,), "g2": (8,), "b2": (8,), "w1": (16, 8),
          "c1": (16,), "w2": (8, 16), "c2": (8,)}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The rendered CMake project of the block (portable: every x86-64 level)."""
    root = tmp_path_factory.mktemp("tblock")
    (root / "block.py").write_text(KERNEL)
    (root / "manifest.toml").write_text(MANIFEST)
    render(root / "manifest.toml", root / "project", lambda s: None)
    return root / "project"


def _build(project: Path, compiler: str, where: Path) -> tuple[Package, str]:
    """Configure, build (warnings reported, not errors) and install the project with one C++ compiler: (the
    loaded package, the build's output)."""
    log = []
    for args in (["-S", project, "-B", where / "build", f"-DCMAKE_CXX_COMPILER={compiler}",
                  "-DCMAKE_BUILD_TYPE=Release", "-Dtblock_PYTHON_MODULE=ON", "-Dtblock_WERROR=OFF"],
                 ["--build", where / "build", "--parallel", "2"],
                 ["--install", where / "build", "--prefix", where / "install"]):
        proc = subprocess.run([cmake_exe(), *map(str, args)], capture_output=True, text=True, timeout=900)
        log.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"{compiler}: cmake {args[0]} failed:\n" + "\n".join(log)[-6000:]
    return Package(where / "install"), "\n".join(log)


@pytest.fixture(scope="module")
def builds(project, tmp_path_factory) -> dict[str, tuple[Package, str]]:
    """The block built with clang++ (the portable CMake project, with its log) and with g++ (ksbuild.build)."""
    if shutil.which("clang++") is None:
        pytest.skip("clang++ not installed (scripts/install.sh, run as root, installs the apt package clang)")
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    gcc = ksbuild.build(project.parent / "manifest.toml", out=tmp_path_factory.mktemp("g++"), quiet=True)
    return {"clang++": _build(project, "clang++", tmp_path_factory.mktemp("clang++")), "g++": (gcc, "")}


def _inputs(n: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = {"x": rng.standard_normal((n, 8))}
    arrays |= {k: rng.standard_normal(s) * (0.3 if len(s) == 2 else 1.0) for k, s in SHAPES.items()}
    return {k: v.astype(np.float32) for k, v in arrays.items()}


def _layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps) * g + b


def _block_numpy(x, wqkv, wo, g1, b1, g2, b2, w1, c1, w2, c2):
    """The layer in float64 numpy: the reference both compilers' results are held to."""
    n = x.shape[0]
    heads = (_layer_norm(x, g1, b1) @ wqkv.T).reshape(n, 3, 2, 4).transpose(1, 2, 0, 3)  # qkv, head, row, e
    q, k, v = heads
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(4) + np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(scores - scores.max(axis=2, keepdims=True))
    x = x + ((p / p.sum(axis=2, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, 8) @ wo.T
    h = _layer_norm(x, g2, b2) @ w1.T + c1
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    return x + gelu @ w2.T + c2


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the three-level build is x86-64's")
def test_clang_builds_every_level_without_warnings(builds):
    _, log = builds["clang++"]
    for level in ("x86_64", "x86_64_v3", "x86_64_v4"):
        assert f"tblock_{level}.dir/src/tblock.cpp.o" in log, f"clang++ did not build level {level}"
    warnings = sorted({line.strip() for line in log.splitlines() if "warning:" in line})
    assert not warnings, "\n".join(warnings)


def test_clang_and_gcc_give_the_same_values(builds):
    inputs = _inputs()
    want = _block_numpy(*(inputs[k].astype(np.float64) for k in ("x", *SHAPES)))
    ct = np.random.default_rng(8).standard_normal(want.shape).astype(np.float32)
    outs = {}
    for cxx, (pkg, _) in builds.items():
        y = pkg.block(*inputs.values())
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"{cxx}'s block against numpy")
        outs[cxx] = (y, *pkg.block_vjp(*inputs.values(), ct))
    assert len(outs["clang++"]) == len(outs["g++"]) == 1 + len(inputs)
    for name, a, b in zip(("block", *(f"d_{k}" for k in inputs)), outs["clang++"], outs["g++"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{name}: clang++ against g++")
