"""A compiler launcher (ccache, sccache) given by CMake's environment variable CMAKE_CXX_COMPILER_LAUNCHER compiles
every object of `ksbuild package`'s build: ksbuild's environment reaches CMake. The relocatable link that joins the
objects does not go through it (a link, not a compile), and the kernel layer is not saved into ksbuild's kernel
cache then (the launcher is the cache, and ccache before 4.9.2 or sccache 0.16 give back an object without its GCC
call graph). A fake launcher logs its command lines and runs the compiler. With ccache installed, builds through
it, from its misses and from its hits, make the same library as a build without it: why the launcher is not part of
the build cache's key. About 30 s on 2 cores (four builds of one level of tests/test_subproject.py's package lp,
with its kernel layer)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_subproject import KERNEL, MANIFEST  # (package lp: log1p and a matrix product)

from ksbuild.compile.cmake import build_and_install
from ksbuild.packaging.package import package, render

LAUNCHER = '''#!/bin/sh
# a compiler launcher: logs the command line it is given, then runs it
echo "$*" >> "$LAUNCHER_LOG"
exec "$@"
'''


@pytest.fixture
def manifest(tmp_path) -> Path:
    """Package lp's manifest and kernel file in tmp_path."""
    (tmp_path / "lp.py").write_text(KERNEL)
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    return tmp_path / "manifest.toml"


def compiled_sources(log: Path) -> list[str]:
    """The source files of the package's objects that the launcher compiled (not CMake's own compiler checks)."""
    lines = [line.split() for line in log.read_text().splitlines()]
    return sorted(Path(words[words.index("-c") + 1]).name for words in lines
                  if "-c" in words and not any("CMakeScratch" in w or "cmTC_" in w for w in words))


def test_package_compiles_every_object_through_the_launcher(manifest, tmp_path, monkeypatch):
    launcher, log = tmp_path / "launcher.sh", tmp_path / "launcher.log"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    monkeypatch.setenv("KSBUILD_CACHE", str(tmp_path / "cache"))  # (nothing cached: everything is compiled)
    monkeypatch.setenv("CMAKE_CXX_COMPILER_LAUNCHER", str(launcher))
    monkeypatch.setenv("LAUNCHER_LOG", str(log))
    tree = package(manifest, tmp_path / "dist", progress=lambda s: None)
    assert (tree / "lib/liblp.a").is_file()
    assert compiled_sources(log) == ["kernels.cpp", "lp.cpp"]
    assert not any(" -r " in line for line in log.read_text().splitlines())  # (the relocatable link)
    assert not list((tmp_path / "cache").glob("kernels/*/kernels_*.o"))  # (the launcher caches the kernel layer)


def ccache_hits(ccache_dir: Path) -> int:
    """The compiles ccache answered from its cache (`ccache --print-stats`)."""
    out = subprocess.run(["ccache", "--print-stats"], env=dict(os.environ, CCACHE_DIR=str(ccache_dir)),
                         capture_output=True, text=True, check=True).stdout
    stats = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
    return int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache not installed (apt-get install ccache)")
def test_ccache_gives_the_library_a_build_without_it_makes(manifest, tmp_path, monkeypatch):
    """The same project built without a launcher, then through ccache twice (misses, then hits): one library."""
    render(manifest, tmp_path / "project", lambda s: None)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    libraries = []
    for build in ("plain", "misses", "hits"):
        if build == "plain":
            monkeypatch.delenv("CMAKE_CXX_COMPILER_LAUNCHER", raising=False)
        else:
            monkeypatch.setenv("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
        build_and_install(tmp_path / "project", tmp_path / build, tmp_path / f"{build}-install",
                          log=tmp_path / f"{build}.log", progress=lambda s: None)
        libraries.append((tmp_path / f"{build}-install/lib/liblp.a").read_bytes())
        if build == "misses":
            assert ccache_hits(tmp_path / "ccache") == 0
    assert ccache_hits(tmp_path / "ccache") >= 2  # (lp.cpp and the kernel layer; also CMake's compiler check)
    assert libraries[0] == libraries[1] == libraries[2]
