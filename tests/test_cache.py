"""The build cache: what its key covers, concurrent runs, kept failure logs, `ksbuild cache info|clean`."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import ksbuild
from ksbuild.cli import main as cli_main
from ksbuild.manifest import load_manifest
from ksbuild.packaging import cache
from ksbuild.packaging import package as package_module
from ksbuild.packaging.package import STAMP, content_hash, planned

RELU3 = ROOT / "examples/relu3"
MODULE_MANIFEST = """[package]
name = "scaled"

[kernels.scale]
python = "{module}:scale"

[exports]
scale = "scale"
scale_grad = "grad(scale)"
"""


TORCH_MODEL = """import torch


class Net(torch.nn.Module):  # (a class of the user's: its file is part of the model's fingerprint)
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return torch.relu(self.lin(x))


def make():
    torch.manual_seed(0)
    return Net(), (torch.zeros(4, 3),)
"""
TORCH_MANIFEST = """[package]
name = "lin"

[kernels.lin]
torch = "model.py:make"

[exports]
lin = "lin"
"""


@pytest.fixture
def relu3_copy(tmp_path) -> Path:
    shutil.copytree(RELU3, tmp_path / "relu3", ignore=shutil.ignore_patterns("app"))
    return tmp_path / "relu3" / "manifest.toml"


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KSBUILD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def stable_key(monkeypatch):
    """Keys that do not change when someone edits ksbuild's own files while the test runs."""
    monkeypatch.setattr(package_module, "_hash_ksbuild", lambda h: None)


def module_kernel(tmp_path: Path, monkeypatch, name: str, factor: float) -> Path:
    """A manifest whose kernel is `name:scale` (a module on sys.path, not a file next to the manifest)."""
    (tmp_path / "mods").mkdir(exist_ok=True)
    (tmp_path / "mods" / f"{name}.py").write_text(f"def scale(x: float) -> float:\n    return x * {factor}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    importlib.invalidate_caches()
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "manifest.toml").write_text(MODULE_MANIFEST.format(module=name))
    return tmp_path / "m" / "manifest.toml"


def fake_compiler(path: Path, version: str) -> Path:
    path.write_text(f"#!/bin/sh\necho 'fake-g++ (ksbuild test) {version}'\n")
    path.chmod(0o755)
    return path


def test_key_covers_flags_compiler_and_kernel_source(relu3_copy, tmp_path, monkeypatch):
    def key() -> str:
        return content_hash(load_manifest(relu3_copy), "host")

    base = key()
    assert key() == base
    monkeypatch.setenv("CXXFLAGS", "-O1")
    assert key() != base
    monkeypatch.delenv("CXXFLAGS")
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path / "fakecxx", "1.0")))
    fake1 = key()
    assert fake1 != base
    fake_compiler(tmp_path / "fakecxx", "2.0")  # same path, another version
    os.utime(tmp_path / "fakecxx", ns=(1, 1))
    assert key() != fake1
    monkeypatch.delenv("CXX")
    assert key() == base
    kernel = relu3_copy.parent / "relu3.py"
    kernel.write_text(kernel.read_text() + "\n# an edit\n")
    assert key() != base


def test_key_covers_the_target(relu3_copy):
    if not shutil.which("aarch64-linux-gnu-g++"):
        pytest.skip("aarch64-linux-gnu-g++ not installed (scripts/install.sh installs g++-aarch64-linux-gnu)")
    m = load_manifest(relu3_copy)
    assert content_hash(m, "host") != content_hash(m, "aarch64-linux-gnu")


def test_kernel_objects_are_not_keyed_by_threads(relu3_copy):
    """The kernel layer's object folder (package.kernel_cache): one for every [build] threads (the kernel layer has
    no thread count in it, and -pthread does not change it: test_the_kernel_layer_reads_nothing_pthread_changes),
    another for another optimize or for cpu = "native", so that the suite's builds with threads = 1, 2 and 4 compile
    kernels.cpp once. Another cpu shares the folder: the objects are named by their level and part
    (kernels_x86_64_v3_products32.o), so a build for x86-64-v4 takes the object a portable build compiled for that
    level."""
    from ksbuild.compile.targets import TARGETS
    from ksbuild.packaging.package import kernel_cache
    text = relu3_copy.read_text()

    def folder(build: str) -> Path:
        relu3_copy.write_text(text.replace('dtype = "float32"', f'dtype = "float32"\n{build}', 1))
        return kernel_cache(load_manifest(relu3_copy), TARGETS["host"])

    none, one, two, four = folder(""), folder("threads = 1"), folder("threads = 2"), folder("threads = 4")
    assert none == one == two == four
    assert folder('cpu = "x86-64-v3"') == folder('cpu = "x86-64-v4"') == none
    assert len({none, folder('cpu = "native"'), folder('optimize = "size"')}) == 3


def test_the_kernel_layer_reads_nothing_pthread_changes(tmp_path):
    """What lets threaded and unthreaded builds share the kernel objects: ks/kernels.cpp preprocesses to the same text
    with and without -pthread (which defines _REENTRANT), on every level the x86 dispatch compiles."""
    import shutil
    import subprocess

    from ksbuild.resources import resource_dir
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    prelude = resource_dir("prelude")
    for level in ("x86-64", "x86-64-v3", "x86-64-v4"):
        command = ["g++", "-std=c++17", f"-march={level}", "-I", str(prelude), "-E", "-P",
                   str(prelude / "ks" / "kernels.cpp")]
        texts = [subprocess.run(command + flag, check=True, capture_output=True, text=True).stdout
                 for flag in ([], ["-pthread"])]
        assert texts[0] == texts[1], level


def test_builds_started_together_compile_the_kernel_layer_once(tmp_path, private_cache, monkeypatch):
    """Two builds that need the same missing kernel object (package.one_compile_of_the_kernels): the second waits
    for the first (which compiles and saves it) and says so; once the object is there, or for the other flavour
    (int8: another part of the layer), or with a compiler launcher, nobody waits."""
    import threading

    from ksbuild.packaging.package import one_compile_of_the_kernels
    monkeypatch.delenv("CMAKE_CXX_COMPILER_LAUNCHER", raising=False)
    project, kernels = tmp_path / "project", private_cache / "kernels" / "k0"
    project.mkdir()
    takes = "# This project takes (at its default CPU setting): kernels_x86_64_v4{}.o\n"
    (project / "CMakeLists.txt").write_text("function(p_kernel_layer level march)\nendfunction()\n" +
                                           takes.format("_products32"))
    events, said = [], []
    started = threading.Event()

    def second():
        started.set()
        with one_compile_of_the_kernels(project, kernels, said.append):
            events.append("second")

    with one_compile_of_the_kernels(project, kernels, said.append):
        waiting = threading.Thread(target=second)
        waiting.start()
        started.wait()
        waiting.join(0.5)
        assert waiting.is_alive() and not events  # (held back while the first compiles)
        kernels.mkdir(parents=True)
        (kernels / "kernels_x86_64_v4_products32.o").write_bytes(b"")
        events.append("first")
    waiting.join()
    assert events == ["first", "second"] and said == ["  waiting for another build compiling the kernel layer with "
                                                       "these flags"]

    def waits(text: str) -> bool:
        (project / "CMakeLists.txt").write_text(text)
        got = []

        def other():
            with one_compile_of_the_kernels(project, kernels, got.append):
                pass

        with one_compile_of_the_kernels(project, kernels, got.append):
            t = threading.Thread(target=other)
            t.start()
            t.join(0.5)
            held = t.is_alive()
        t.join()
        return held or bool(got)

    layer = "function(p_kernel_layer level march)\n"
    assert not waits(layer + takes.format("_products32"))  # (the object is there now)
    int8 = layer + takes.format("_int8")
    assert waits(int8)  # (its integer part is not)
    another_level = takes.format("_products32").replace(": ", ": kernels_x86_64_products32.o ")
    assert waits(layer + another_level)  # (nor another level's)
    monkeypatch.setenv("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
    assert not waits(int8)
    monkeypatch.delenv("CMAKE_CXX_COMPILER_LAUNCHER")
    assert not waits("a project without the kernel layer\n")


def test_key_covers_a_module_function_kernel(tmp_path, monkeypatch):
    manifest = module_kernel(tmp_path, monkeypatch, "ks_cache_mod_a", 2.0)
    before = content_hash(load_manifest(manifest), "host")
    module_kernel(tmp_path, monkeypatch, "ks_cache_mod_a", 3.0)
    assert content_hash(load_manifest(manifest), "host") != before


def test_key_holds_no_folder(tmp_path, monkeypatch):
    """The same manifest and kernels in two folders have one key: file kernels, module:function kernels (the
    module found in another folder of sys.path) and ONNX models are named as the manifest names them."""
    keys = []
    for folder in ("one", "two/deeper"):
        shutil.copytree(RELU3, tmp_path / folder / "relu3", ignore=shutil.ignore_patterns("app"))
        keys.append(content_hash(load_manifest(tmp_path / folder / "relu3" / "manifest.toml"), "host"))
        manifest = module_kernel(tmp_path / folder, monkeypatch, "ks_cache_mod_where", 2.0)
        keys.append(content_hash(load_manifest(manifest), "host"))
    assert keys[0] == keys[2] and keys[1] == keys[3], keys


def test_key_of_a_torch_kernel_holds_no_folder(tmp_path):
    pytest.importorskip("torch")
    keys = []
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.py").write_text(TORCH_MODEL)
        (tmp_path / folder / "manifest.toml").write_text(TORCH_MANIFEST)
        keys.append(content_hash(load_manifest(tmp_path / folder / "manifest.toml"), "host"))
    assert keys[0] == keys[1]
    (tmp_path / "two" / "model.py").write_text(TORCH_MODEL.replace("manual_seed(0)", "manual_seed(1)"))
    assert content_hash(load_manifest(tmp_path / "two" / "manifest.toml"), "host") != keys[0]  # other weights


def test_key_holds_the_cmake_version_not_where_cmake_is(relu3_copy, stable_key, monkeypatch):
    """Two venvs (checkouts, CI jobs) with one CMake version share keys: cmake's path and time stamp are left out."""
    m = load_manifest(relu3_copy)
    base, version = content_hash(m, "host"), package_module._cmake_version()
    assert version.startswith("cmake version ")
    monkeypatch.setattr(package_module, "cmake_exe", lambda: "/elsewhere/venv/bin/cmake")
    monkeypatch.setattr(package_module, "cmake_identity", lambda: f"/elsewhere/venv/bin/cmake {version} 12345")
    assert content_hash(m, "host") == base
    monkeypatch.setattr(package_module, "cmake_identity", lambda: "/elsewhere/venv/bin/cmake cmake version 9.9 1")
    assert content_hash(m, "host") != base


def test_same_manifest_in_two_folders_builds_once(tmp_path, private_cache, stable_key, capsys):
    for folder in ("a", "b"):
        shutil.copytree(RELU3, tmp_path / folder, ignore=shutil.ignore_patterns("app"))
        manifest, out = tmp_path / folder / "manifest.toml", tmp_path / f"out-{folder}"
        assert cli_main(["package", str(manifest), "-o", str(out)]) == 0
    first, second = capsys.readouterr().out.split("ksbuild: installed", 1)
    assert "ksbuild: building activations" in first
    assert "ksbuild: found a cached build" in second and "building" not in second, second
    assert len(cache.builds()) == 1
    assert cache.builds()[0].info["manifests"] == [str(tmp_path / f / "manifest.toml") for f in ("a", "b")]
    assert (tmp_path / "out-b/lib/libactivations.a").read_bytes() == \
        (tmp_path / "out-a/lib/libactivations.a").read_bytes()


def test_editing_a_module_function_kernel_rebuilds(tmp_path, monkeypatch):
    """A module:function kernel edited between two builds gives the new function's values."""
    for factor in (2.0, 3.0):
        manifest = module_kernel(tmp_path, monkeypatch, "ks_cache_mod_b", factor)
        sys.modules.pop("ks_cache_mod_b", None)
        oracle = importlib.import_module("ks_cache_mod_b").scale
        pkg = ksbuild.build(manifest)
        assert pkg.scale(1.5) == pytest.approx(oracle(1.5)) == pytest.approx(1.5 * factor)
        assert pkg.scale_grad(1.5) == pytest.approx(factor)


def test_concurrent_package_runs_into_one_output(relu3_copy, tmp_path):
    """20 `ksbuild package` runs started at once into one output and a cold cache all succeed; one builds."""
    env = dict(os.environ, KSBUILD_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "dist" / "activations"
    cmd = [sys.executable, "-m", "ksbuild", "package", str(relu3_copy), "-o", str(out)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(20)]
    logs = [p.communicate()[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 20, "\n".join(logs)
    assert sum("ksbuild: building activations" in log for log in logs) == 1, "\n".join(logs)
    key = planned(relu3_copy)[2]
    assert (out / "share/activations" / STAMP).read_text().strip() == key
    assert (out / "lib/libactivations.a").is_file() and (out / "include/activations.h").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["activations"]  # no temporary trees left over
    assert not list((tmp_path / "cache" / key).glob("build-*"))


def test_failed_build_keeps_its_log(relu3_copy, tmp_path, private_cache, monkeypatch, capsys):
    monkeypatch.setenv("CXXFLAGS", "-fno-such-flag-for-ksbuild")
    out = tmp_path / "out"
    assert cli_main(["package", str(relu3_copy), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cmake configure failed (full log: " in err
    log = Path(err.split("(full log: ", 1)[1].split(")", 1)[0])
    assert log.is_file() and private_cache in log.parents
    assert "-fno-such-flag-for-ksbuild" in log.read_text()
    assert not out.exists()


def test_cache_info_and_clean(relu3_copy, tmp_path, private_cache, stable_key, capsys):
    assert cli_main(["package", str(relu3_copy), "-o", str(tmp_path / "out")]) == 0
    key = planned(relu3_copy)[2]
    capsys.readouterr()
    assert cli_main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    assert str(private_cache) in info and "1 build(s)" in info
    row = next(line for line in info.splitlines() if key in line)
    assert row.split()[1:5] == ["activations", "0.1.0", "host", "plain"], row
    assert row.endswith(str(relu3_copy.resolve())), row
    with cache.file_lock(cache.key_lock(key)):  # a build of this key in progress: clean leaves it
        assert cli_main(["cache", "clean"]) == 0
        said = capsys.readouterr().out
        assert "removed 0 build(s)" in said and f"left {key} (activations for host): another process" in said
        assert (private_cache / key / "install").is_dir()
    assert cli_main(["cache", "clean"]) == 0
    assert "removed 1 build(s)" in capsys.readouterr().out
    assert not (private_cache / key).exists()
    assert cli_main(["cache", "info"]) == 0
    assert "0 build(s)" in capsys.readouterr().out
    assert (tmp_path / "out/lib/libactivations.a").is_file()  # installed trees are not the cache's
