"""Run CMake: configure, build, install; failures become KsbuildErrors with the compiler log."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from ..errors import KsbuildError

Progress = Callable[[str], None]


def cmake_exe() -> str:
    """The cmake to use: the one beside this Python (the PyPI package) or on PATH."""
    here = Path(sys.executable).parent / "cmake"
    found = str(here) if here.exists() else shutil.which("cmake")
    if not found:
        raise KsbuildError("cmake not found", hint="pip install cmake (a dependency of ksbuild)")
    return found


def _run(args: list[str], what: str, log: Path) -> None:
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(log.read_text() + proc.stdout if log.exists() else proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-40:])
        raise KsbuildError(f"{what} failed (full log: {log})\n{tail}")


def toolchain_args(target: str) -> list[str]:
    """CMake arguments for a target triple ('host' needs none)."""
    if target == "host":
        return []
    cxx = shutil.which(f"{target}-g++")
    if not cxx:
        raise KsbuildError(f"no C++ compiler for target '{target}' ({target}-g++ not found)",
                           hint=f"install it, e.g. apt-get install g++-{target.replace('_', '-')}")
    return [f"-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_SYSTEM_NAME=Generic" if "none" in target else
            "-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY"]


def build_and_install(src: Path, build: Path, prefix: Path, *, jobs: int | None = None, target: str = "host",
                      python_module: bool = False, progress: Progress = print) -> None:
    """cmake -S src -B build; cmake --build; cmake --install --prefix prefix."""
    exe, log = cmake_exe(), build / "ksbuild-build.log"
    build.mkdir(parents=True, exist_ok=True)
    progress("  configuring (cmake)")
    _run([exe, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
          f"-DKS_PYTHON_MODULE={'ON' if python_module else 'OFF'}", *toolchain_args(target)], "cmake configure", log)
    progress("  compiling C++")
    _run([exe, "--build", str(build), "--parallel", str(jobs or os.cpu_count() or 2)], "C++ build", log)
    progress("  installing")
    _run([exe, "--install", str(build), "--prefix", str(prefix)], "cmake install", log)
