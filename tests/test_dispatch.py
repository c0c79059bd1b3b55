"""Builds for several x86-64 instruction set levels, one chosen at run time (ks/cpu.h and the generated
<package>_dispatch.cpp): the level the C++ detects is the one the kernel's CPU flags give, every level's
build computes what torch does, ksbuild.build compiles for this machine alone, and only x86-64 hosts
without a [build] cpu compile several."""
from __future__ import annotations

import platform
import subprocess

import numpy as np
import pytest
from conftest import ROOT

import ksbuild
from ksbuild.compile.cmake import cmake_exe
from ksbuild.compile.targets import TARGETS, X86_64_LEVELS, cpu_variants, host_level
from ksbuild.manifest import load_manifest
from ksbuild.packaging.package import kernel_cache, render
from ksbuild.packaging.runtime import Package

torch = pytest.importorskip("torch", reason="torch is the oracle")
pytestmark = pytest.mark.skipif(not cpu_variants(TARGETS["host"], "", "plain"),
                                reason="needs an x86-64 host whose compiler knows -march=x86-64-v4")

KERNEL = '''import torch
import torch.nn.functional as F


def layer(x: "float[n, k]", w: "float[k, m]", b: "float[m]") -> "float[n, m]":
    return torch.tanh(x @ w + b)


def probs(x: "float[n, m]") -> "float[n, m]":
    return torch.softmax(x, 1)


def smooth(x: "float[b, c, l]", w: "float[o, c, 3]") -> "float[b, o, l]":
    return F.conv1d(x, w, padding=1)
'''

MANIFEST = '''[package]
name = "levels"
[kernels.layer]
python = "k.py:layer"
[kernels.probs]
python = "k.py:probs"
[kernels.smooth]
python = "k.py:smooth"
[kernels.relu3]
python = "relu3.py:relu3"
[exports]
layer = "layer"
layer_vjp = "vjp(layer)"
probs = "probs"
smooth = "smooth"
relu3 = "relu3"
vrelu3 = "vmap(relu3)"
'''


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    folder = tmp_path_factory.mktemp("levels")
    (folder / "k.py").write_text(KERNEL)
    (folder / "relu3.py").write_text((ROOT / "examples/relu3/relu3.py").read_text())
    (folder / "manifest.toml").write_text(MANIFEST)
    return folder / "manifest.toml"


def test_the_detected_level_is_the_one_the_cpu_flags_give(tmp_path):
    """ks::cpu_level() (cpuid and xgetbv) against the flags Linux lists in /proc/cpuinfo (host_level)."""
    if not open("/proc/cpuinfo").read().count("flags"):
        pytest.skip("no /proc/cpuinfo flags here")
    (tmp_path / "level.cpp").write_text('#include "ks/cpu.h"\n#include <cstdio>\n'
                                        'int main() { std::printf("%d\\n", ks::cpu_level()); }\n')
    exe = tmp_path / "level"
    subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'prelude'}",
                    str(tmp_path / "level.cpp"), "-o", str(exe)], check=True)
    level = int(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)
    assert X86_64_LEVELS[level] == host_level()


def _inputs():
    rng = np.random.default_rng(0)
    f = np.float32
    return {"layer": (rng.standard_normal((37, 70)).astype(f), rng.standard_normal((70, 45)).astype(f) / 8,
                      rng.standard_normal(45).astype(f)),
            "probs": (3 * rng.standard_normal((9, 300)).astype(f),),
            "smooth": (rng.standard_normal((2, 5, 40)).astype(f), rng.standard_normal((6, 5, 3)).astype(f)),
            "vrelu3": (np.linspace(-2, 2, 1001, dtype=f),)}


def _check_against_torch(pkg) -> None:
    import torch.nn.functional as F
    ins = _inputs()
    t = {k: [torch.from_numpy(a) for a in v] for k, v in ins.items()}
    np.testing.assert_allclose(pkg.layer(*ins["layer"]), torch.tanh(t["layer"][0] @ t["layer"][1] + t["layer"][2]),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pkg.probs(*ins["probs"]), torch.softmax(t["probs"][0], 1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pkg.smooth(*ins["smooth"]), F.conv1d(*t["smooth"], padding=1), rtol=1e-5, atol=1e-5)
    x, w, b = (a.clone().requires_grad_() for a in t["layer"])
    ct = torch.ones(37, 45)
    torch.tanh(x @ w + b).backward(ct)
    for got, want in zip(pkg.layer_vjp(*ins["layer"], ct.numpy()), (x.grad, w.grad, b.grad)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    v = ins["vrelu3"][0].astype(np.float64)
    want = np.where(v < 0, 0.0, np.where(v < 1, v ** 3 / 3, v - 2 / 3))
    np.testing.assert_allclose(pkg.vrelu3(ins["vrelu3"][0]), want, rtol=1e-6, atol=1e-7)
    assert pkg.relu3(0.5) == pytest.approx(0.5 ** 3 / 3, rel=1e-6)


def test_a_workspace_size_asks_only_the_builds_this_cpu_runs(manifest, tmp_path):
    """P_E_workspace_size calls a level's build only when the CPU has that level: a higher build's size function
    holds its level's instructions (GCC wrote AVX-512's vpmaxsq into the v4 build's, which every call of the
    Python API ran: an illegal instruction on an AVX2 CPU, the AMD EPYC of the eighteenth session)."""
    render(manifest, tmp_path / "project", progress=lambda s: None)
    lines = (tmp_path / "project/src/levels_dispatch.cpp").read_text().splitlines()
    calls = [i for i, line in enumerate(lines) if "_workspace_size(" in line and "::" in line]
    assert calls and len(calls) % len(X86_64_LEVELS) == 0  # (each export with a workspace asks every level)
    for i in calls:
        level = X86_64_LEVELS.index(lines[i].split("levels_", 1)[1].split("::")[0].replace("_", "-"))
        assert lines[i - 1].strip() == f"if (level >= {level}) {{", lines[i - 1: i + 1]


def test_every_level_computes_what_torch_does(manifest, tmp_path):
    """The portable library built once; its dispatch source rebuilt with levels_CPU_LEVEL_MAX = 0, 1, 2 (the levels
    this CPU has), so that each level's build runs here in turn; each agrees with torch and with the others. The
    kernel layer's objects come from ksbuild's kernel cache, as in `ksbuild package` (compiled there if missing)."""
    src, build = tmp_path / "project", tmp_path / "build"
    render(manifest, src, progress=lambda s: None)
    kernels = kernel_cache(load_manifest(manifest), TARGETS["host"])
    assert (src / "src/levels_dispatch.cpp").is_file()
    cmake = cmake_exe()
    results = []
    for cap in range(X86_64_LEVELS.index(host_level()) + 1):
        prefix = tmp_path / f"level{cap}"
        subprocess.run([cmake, "-S", str(src), "-B", str(build), "-Dlevels_PYTHON_MODULE=ON", "-Dlevels_WERROR=ON",
                        f"-Dlevels_CPU_LEVEL_MAX={cap}", f"-Dlevels_KERNEL_CACHE={kernels}"], check=True,
                       capture_output=True)
        subprocess.run([cmake, "--build", str(build), "--parallel", "2"], check=True, capture_output=True)
        subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
        pkg = Package(prefix)
        _check_against_torch(pkg)
        results.append(pkg.layer(*_inputs()["layer"]))
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=1e-5, atol=1e-6)


def test_the_python_api_builds_for_this_machine(manifest):
    """ksbuild.build loads the library here: one build for this CPU's level (no dispatch source), and with
    portable=True the library `ksbuild package` makes; both agree with torch."""
    here, portable = ksbuild.build(manifest), ksbuild.build(manifest, portable=True)
    assert not list(here.root.glob("share/levels/src/*_dispatch.cpp"))
    assert list(portable.root.glob("share/levels/src/*_dispatch.cpp"))
    _check_against_torch(here)
    _check_against_torch(portable)


def test_ksbuild_here_builds_for_this_machine(manifest, monkeypatch, tmp_path):
    """$KSBUILD_HERE=1 (which the suite sets): `ksbuild package` compiles what ksbuild.build does, this machine's
    level alone, under its own key; 0 or unset: the portable build; another value is refused, naming the variable."""
    from ksbuild.errors import KsbuildError
    from ksbuild.packaging.package import package, planned
    monkeypatch.setenv("KSBUILD_HERE", "1")
    m, _, here = planned(manifest)
    assert m.build.cpu == host_level()
    monkeypatch.setenv("KSBUILD_HERE", "0")
    m, _, portable = planned(manifest)
    assert m.build.cpu == "" and portable != here
    assert planned(manifest, here=True)[2] == here  # (an explicit here wins over the variable)
    monkeypatch.setenv("KSBUILD_HERE", "yes")
    with pytest.raises(KsbuildError, match="KSBUILD_HERE='yes'"):
        planned(manifest)
    monkeypatch.setenv("KSBUILD_HERE", "1")  # (the project built under that key is this machine's: no dispatch)
    tree = package(manifest, tmp_path / "dist", progress=lambda s: None)
    assert not list(tree.glob("share/levels/src/*_dispatch.cpp")) and list(tree.glob("share/levels/src/*.cpp"))


@pytest.mark.parametrize("target, cpu, backend", [("host", "native", "plain"), ("host", "x86-64-v3", "plain"),
                                                  ("host", "", "aten"), ("aarch64-linux-gnu", "", "plain"),
                                                  ("cortex-m4", "", "plain")])
def test_one_build_elsewhere(target, cpu, backend):
    """A [build] cpu, the aten backend (ATen picks its own kernels) or another target: one build, no dispatch."""
    assert cpu_variants(TARGETS[target], cpu, backend) == ()


def test_several_levels_on_x86_64_hosts():
    assert cpu_variants(TARGETS["host"], "", "blas") == X86_64_LEVELS
    assert platform.machine() == "x86_64"
