"""The rendered project as a subproject of an app (add_subdirectory, FetchContent): an app holding two packages, in
C99 and in C++17, links them as P::P (libm included for the C driver) and prints their values; the app's build
type is its own (nothing forced into its cache), the packages' objects get Release flags when the app has no build
type and follow it otherwise; every option and cache variable is named after its package.

The app is tests/subproject/; the packages are examples/relu3 (activations: scalar exports and the x86-64 dispatch)
and lp below (log1p and a matrix product: its kernel layer is compiled, once, for the baseline). Eight builds of
about 5 to 15 s each on 2 cores, and three configure-only runs. The C++ app's Release builds take lp's kernel layer
from ksbuild's kernel cache (lp_KERNEL_CACHE, as `ksbuild package` passes it) instead of compiling it again."""
from __future__ import annotations

import json
import math
import platform
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from ksbuild.compile.cmake import cmake_exe
from ksbuild.compile.targets import TARGETS
from ksbuild.manifest import load_manifest
from ksbuild.packaging.package import kernel_cache, package, render

APP = ROOT / "tests/subproject"
KERNEL = '''import math

import torch


def log1p(x: float) -> float:
    return math.log1p(x)


def softplus_layer(x: "float[n, d]", w: "float[d, k]") -> "float[n, k]":
    return torch.log1p(torch.exp(x @ w))
'''
# werror = false, unlike activations: the two packages' <P>_WERROR differ. One build for the baseline (cpu) keeps
# the eight builds short; activations compiles every x86-64 level and its dispatcher.
MANIFEST = f'''[package]
name = "lp"
version = "0.1.0"

[build]
werror = false
{'cpu = "x86-64"' if platform.machine() in ("x86_64", "AMD64") else ""}

[kernels.log1p]
python = "lp.py:log1p"

[kernels.softplus_layer]
python = "lp.py:softplus_layer"

[exports]
log1p = "log1p"
vlog1p = "vmap(log1p)"
layer = "softplus_layer"
'''
X = np.array([-2.0, 0.25, 0.5, 1.0, 3.0], dtype=np.float32)  # (main.c's and main.cpp's inputs)
W = np.array([0.5, -1.0, 0.25, 0.75, -0.5, 0.125, 1.0, 2.0, -0.25, 0.0], dtype=np.float32).reshape(5, 2)
PACKAGE_SOURCES = ("activations.cpp", "activations_dispatch.cpp", "lp.cpp", "kernels.cpp")


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[str, Path]:
    """The rendered projects: activations and lp as folders, lp also as a .tar.gz of its folder."""
    root = tmp_path_factory.mktemp("subprojects")
    (root / "lpsrc").mkdir()
    (root / "lpsrc/lp.py").write_text(KERNEL)
    (root / "lpsrc/manifest.toml").write_text(MANIFEST)
    render(ROOT / "examples/relu3/manifest.toml", root / "activations", lambda s: None)
    render(root / "lpsrc/manifest.toml", root / "lp", lambda s: None)
    with tarfile.open(root / "lp.tar.gz", "w:gz") as tar:
        tar.add(root / "lp", arcname="lp")
    return {"RELU3_DIR": root / "activations", "LP_DIR": root / "lp", "LP_ARCHIVE": root / "lp.tar.gz"}


@pytest.fixture(scope="module")
def lp_kernels(projects) -> Path:
    """The kernel cache folder holding lp's kernel layer object: `ksbuild package` of lp compiles it (or finds it)."""
    manifest = projects["LP_DIR"].parent / "lpsrc" / "manifest.toml"
    package(manifest, projects["LP_DIR"].parent / "lp_installed", progress=lambda s: None)
    folder = kernel_cache(load_manifest(manifest), TARGETS["host"])
    assert list(folder.glob("kernels_*.o")), sorted(folder.iterdir())
    return folder


def configure(projects: dict[str, Path], build: Path, language: str, how: str, *defs: str) -> str:
    """cmake -S tests/subproject: the app in `language` (C or CXX) taking the packages by `how`; its output."""
    where = [f"-D{k}={v}" for k, v in projects.items() if how == "FetchContent" or k != "LP_ARCHIVE"]
    return _cmake("-S", str(APP), "-B", str(build), f"-DAPP_LANGUAGE={language}", f"-DHOW={how}",
                  "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *where, *defs)


def _cmake(*args: str) -> str:
    proc = subprocess.run([cmake_exe(), *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"cmake {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def cache_entries(build: Path) -> dict[str, str]:
    """The build folder's CMakeCache.txt as name -> value."""
    entries = {}
    for line in (build / "CMakeCache.txt").read_text().splitlines():
        if ":" in line and "=" in line and not line.startswith(("//", "#")):
            name, _, value = line.partition("=")
            entries[name.split(":")[0]] = value
    return entries


def compile_flags(build: Path) -> dict[str, list[list[str]]]:
    """Each source file's name -> the command lines that compile it (compile_commands.json)."""
    flags: dict[str, list[list[str]]] = {}
    for entry in json.loads((build / "compile_commands.json").read_text()):
        flags.setdefault(Path(entry["file"]).name, []).append(entry["command"].split())
    return flags


def _float32(f, *args: float) -> float:
    return float(np.float32(f(*(float(np.float32(a)) for a in args))))


def check_values(output: str) -> None:
    """What the app printed agrees with Python's math and numpy."""
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in output.splitlines() if line.strip()}
    assert rows["status"] == [0.0], output
    relu3 = [0.0 if x < 0 else x ** 3 / 3 if x < 1 else x - 2 / 3 for x in X.astype(np.float64)]
    np.testing.assert_allclose(rows["scalars"], [0.5 ** 3 / 3, _float32(math.log1p, 0.5)], rtol=1e-6)
    np.testing.assert_allclose(rows["vrelu3"], relu3, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rows["vlog1p"], [_float32(math.log1p, x) for x in X[1:]], rtol=1e-6)
    np.testing.assert_allclose(rows["layer"], np.log1p(np.exp(X.astype(np.float64) @ W)), rtol=1e-5)


# Every pair of two of the three choices (language, how, build type) once: 4 builds instead of 8
@pytest.mark.parametrize(("language", "how", "build_type"), [
    ("C", "add_subdirectory", "default"), ("C", "FetchContent", "Debug"),
    ("CXX", "add_subdirectory", "Debug"), ("CXX", "FetchContent", "default")])
def test_an_app_builds_and_links_two_packages(projects, request, tmp_path, language, how, build_type):
    """The app links activations::activations and lp::lp (a C app gets libm from them: lp calls log1pf) and
    prints their values; its cache keeps the build type it chose (none: empty, not Release); the packages'
    objects are optimized as Release when the app set no build type and follow a Debug app (-g, no -O). The C++
    app's Release builds take lp's kernel layer from ksbuild's kernel cache: kernels.cpp is not compiled."""
    build = tmp_path / "b"
    chosen = [] if build_type == "default" else [f"-DCMAKE_BUILD_TYPE={build_type}"]
    cached = language == "CXX" and build_type == "default"
    if cached:
        chosen.append(f"-Dlp_KERNEL_CACHE={request.getfixturevalue('lp_kernels')}")
    configure(projects, build, language, how, *chosen)
    output = _cmake("--build", str(build), "--parallel", "2")
    assert "warning:" not in output, output  # (lp builds without -Werror: its warnings would show here)
    run = subprocess.run([str(build / "app")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    check_values(run.stdout)

    cache = cache_entries(build)
    assert cache["CMAKE_BUILD_TYPE"] == ("" if build_type == "default" else build_type)
    assert cache["activations_WERROR"] == "ON" and cache["lp_WERROR"] == "OFF"  # each package's own [build] werror
    flags = compile_flags(build)
    sources = [s for s in PACKAGE_SOURCES if not (cached and s == "kernels.cpp")]
    assert set(sources) <= set(flags) and (not cached or "kernels.cpp" not in flags), sorted(flags)
    for source in sources:
        for command in flags[source]:
            if build_type == "default":
                assert "-O3" in command and "-DNDEBUG" in command, (source, command)
            else:
                assert "-g" in command and not any(f.startswith("-O") for f in command), (source, command)
            assert ("-Werror" in command) == source.startswith("activations"), (source, command)
    app_source = "main.c" if language == "C" else "main.cpp"
    assert not any(f.startswith("-O") for f in flags[app_source][0])  # (the app's own flags are untouched)


def test_the_app_chooses_each_packages_settings(projects, tmp_path):
    """<P>_<NAME> settings are per package: in a Debug build, activations_BUILD_TYPE=Release gives activations'
    objects -O3 after -g while lp's stay Debug; lp_KERNEL_CACHE is lp's alone; KS_WERROR=OFF (the name in earlier
    projects) is every package's default."""
    build = tmp_path / "b"
    configure(projects, build, "C", "add_subdirectory", "-DCMAKE_BUILD_TYPE=Debug", "-Dactivations_BUILD_TYPE=Release",
              "-DKS_WERROR=OFF", "-Dlp_KERNEL_CACHE=/nonexistent/kernels")
    cache = cache_entries(build)
    assert cache["activations_WERROR"] == cache["lp_WERROR"] == "OFF"
    assert cache["activations_BUILD_TYPE"] == "Release" and cache["lp_BUILD_TYPE"] == ""
    assert cache["lp_KERNEL_CACHE"] == "/nonexistent/kernels" and cache.get("activations_KERNEL_CACHE") == ""
    flags = compile_flags(build)
    for command in flags["activations.cpp"]:
        assert command.index("-O3") > command.index("-g") and "-DNDEBUG" in command, command
    for command in flags["lp.cpp"]:
        assert "-g" in command and not any(f.startswith("-O") for f in command), command
    assert not any("-Werror" in command for source in PACKAGE_SOURCES for command in flags.get(source, []))


def test_a_normal_variable_of_the_app_is_a_setting(projects, tmp_path):
    """An app may set a package's setting as a normal variable before add_subdirectory (CMake's way for a
    vendored project): the package takes it and puts nothing in the cache under that name."""
    app = tmp_path / "app"
    app.mkdir()
    for f in ("main.c", "main.cpp"):
        (app / f).write_text((APP / f).read_text())
    (app / "CMakeLists.txt").write_text((APP / "CMakeLists.txt").read_text().replace(
        "cmake_minimum_required(VERSION 3.16)\n", "cmake_minimum_required(VERSION 3.16)\nset(lp_WERROR ON)\n"))
    build = tmp_path / "b"
    _cmake("-S", str(app), "-B", str(build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
           *(f"-D{k}={v}" for k, v in projects.items() if k != "LP_ARCHIVE"))
    assert "lp_WERROR" not in cache_entries(build)
    assert all("-Werror" in command for command in compile_flags(build)["lp.cpp"])


def test_on_its_own_the_project_builds_release(projects, tmp_path):
    """Configured on its own with no build type, the rendered project sets CMAKE_BUILD_TYPE=Release in its cache
    (`ksbuild render`'s documented cmake -S/-B/--build), and adds no flags of its own for it."""
    build = tmp_path / "b"
    _cmake("-S", str(projects["LP_DIR"]), "-B", str(build), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    assert cache_entries(build)["CMAKE_BUILD_TYPE"] == "Release"
    for command in compile_flags(build)["lp.cpp"]:
        assert command.count("-O3") == 1, command
