"""Run CMake: configure, build, install; failures become KsbuildErrors with the compiler log."""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import KsbuildError
from .targets import TARGETS, Target, compiler_path

Progress = Callable[[str], None]


def cmake_exe() -> str:
    """The cmake to use: the one beside this Python (the PyPI package) or on PATH."""
    here = Path(sys.executable).parent / "cmake"
    found = str(here) if here.exists() else shutil.which("cmake")
    if not found:
        raise KsbuildError("cmake not found", hint="pip install cmake (a dependency of ksbuild)")
    return found


HEARTBEAT = 15.0  # seconds between "still compiling" lines while one object compiles


# The kernel layer's parts (packaging/render.py: KERNEL_PART_CALLS) in words
PART_WORDS = {"products32": "float matrix products", "products64": "double matrix products",
              "convs32": "float convolutions", "convs64": "double convolutions",
              "int8u": "integer kernels of uint8 activations", "int8s": "integer kernels of int8 activations"}

KERNEL_OBJECT = re.compile(r"(?P<level>\w+)_(?P<part>(?:products|convs)(?:32|64)?|int8[us]?)(?P<own>_own)?")


def kernel_object_name(name: str) -> tuple[str, str, bool]:
    """The level, the part and whether it holds its level's tiles alone (_own) of a kernel layer object's name without
    kernels_ and .o, e.g. x86_64_v3_convs32 or x86_64_int8u_own (templates/CMakeLists.txt.j2: P_kernel_layer)."""
    found = KERNEL_OBJECT.fullmatch(name)
    if found is None:
        level, _, part = name.rpartition("_")
        return level, part, False
    return found["level"], found["part"], bool(found["own"])


def _compile_step(line: str) -> str | None:
    """What a line of CMake's build output starts compiling, in words (None for other lines)."""
    found = re.search(r"Building (\w+) object CMakeFiles/(\w+)\.dir/(\S+?)\.o$", line.strip())
    if not found:
        return None
    language, target, source = found.groups()
    if language == "ASM":  # (the weights' blob: one .incbin, assembled at once: codegen/data.py)
        return f"{Path(source).name} (the weights)"
    if source.endswith("ks/kernels.cpp"):
        level, part, own = kernel_object_name(target.rpartition("_kernels_")[2])
        tiles = ", its level's tiles alone" if own else ""
        return f"the kernel layer's {PART_WORDS.get(part, part)}{tiles} ({level.replace('_', '-')})"
    if re.search(r"_prelude_\w+$", target) and source.endswith(".h"):  # (CMakeLists.txt: P_precompiled_prelude)
        return f"the prelude header ({target.rpartition('_prelude_')[2].replace('_', '-')}, precompiled once)"
    level = re.search(r"_(x86_64(?:_v\d)?)$", target)
    return f"{Path(source).name}{' (' + level.group(1).replace('_', '-') + ')' if level else ''}"


def _communicate(proc: subprocess.Popen, progress: Progress | None) -> str:
    """proc's whole output; with `progress`, a line (with the elapsed time) as each object starts compiling, and
    a "still compiling" line every HEARTBEAT seconds of a long one."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    start = last = time.monotonic()
    seen, current = 0, ""
    while reader.is_alive():
        reader.join(timeout=1.0)
        now = time.monotonic()
        for line in lines[seen:]:
            step = _compile_step(line)
            if step and progress:
                progress(f"  compiling {step} ({now - start:.0f} s)")
                if "ASM object" not in line:  # (the heartbeat names an object that takes time, not the weights)
                    current, last = step, now
        seen = len(lines)
        if progress and current and now - last >= HEARTBEAT:
            last = now
            progress(f"  still compiling {current} ({now - start:.0f} s)")
    proc.wait()
    return "".join(lines)


def _run(args: list[str], what: str, log: Path, progress: Progress | None = None) -> None:
    """Run one CMake step, appending its output to `log`; a failure names the log (kept on disk). With
    `progress`, say what it compiles as it goes."""
    # its own process group: when ksbuild is stopped (Ctrl-C, SIGTERM), the compilers CMake started stop too
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    previous = _sigterm_raises()
    try:
        output = _communicate(proc, progress)
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(args)}\n{output}")
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-40:])
        hint = None
        errors = [line for line in output.splitlines() if " error: " in line]
        if errors and all("[-Werror" in line for line in errors):  # warnings made errors: ksbuild's C++ should not warn
            hint = ("a compiler warning stopped the build (-Werror); please report it with this log. To build "
                    "anyway, set werror = false in the manifest's [build] table")
        raise KsbuildError(f"{what} failed (full log: {log})\n{tail}", hint=hint)


def _sigterm_raises():
    """While CMake runs from ksbuild's Python API (the CLI has its own handler), a SIGTERM raises SystemExit(143)
    so that the compilers, which run in their own process group, are stopped too (they outlived a killed
    Python). The previous handler, or None when it was not replaced (another handler, or not the main thread)."""
    import threading
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def stop(signum, frame):
        raise SystemExit(128 + signum)
    return signal.signal(signal.SIGTERM, stop)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop a CMake step and every process it started (SIGTERM, then SIGKILL after 10 s)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def toolchain_args(target: Target, src: Path) -> list[str]:
    """CMake arguments for a target: the compiler ksbuild hashed (host) or the rendered toolchain file."""
    if not target.cross:  # $CXX (maybe with a launcher such as ccache) is CMake's to read
        return [] if os.environ.get("CXX", "").strip() else [f"-DCMAKE_CXX_COMPILER={compiler_path(target)}"]
    compiler_path(target)  # a missing cross compiler is an error with the apt hint, before CMake runs
    return [f"-DCMAKE_TOOLCHAIN_FILE={src / 'share' / 'toolchain.cmake'}"]


def project_name(src: Path) -> str:
    """The package name of a rendered project (its CMake options are named after it: <name>_PYTHON_MODULE)."""
    found = re.search(r"^project\((\w+) ", (src / "CMakeLists.txt").read_text(), re.MULTILINE)
    if not found:
        raise KsbuildError(f"{src / 'CMakeLists.txt'} is not a project rendered by ksbuild (no project() line)")
    return found.group(1)


def build_and_install(src: Path, build: Path, prefix: Path, *, log: Path, jobs: int | None = None,
                      target: Target = TARGETS["host"], python_module: bool = False,
                      progress: Progress = print, kernel_cache: Path | None = None) -> None:
    """cmake -S src -B build; cmake --build; cmake --install --prefix prefix; all output goes to `log`.
    kernel_cache: the folder of the kernel layer's objects for this compiler and flags (taken or filled)."""
    exe, name = cmake_exe(), project_name(src)
    build.mkdir(parents=True, exist_ok=True)
    progress("  configuring (cmake)")
    # CMake inherits ksbuild's environment: CMAKE_CXX_COMPILER_LAUNCHER=ccache (or sccache) compiles every object
    _run([exe, "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
          f"-D{name}_PYTHON_MODULE={'ON' if python_module else 'OFF'}", *toolchain_args(target, src),
          *([f"-D{name}_KERNEL_CACHE={kernel_cache}"] if kernel_cache else [])],
         "cmake configure", log)
    progress("  compiling C++")
    _run([exe, "--build", str(build), "--parallel", str(jobs or os.cpu_count() or 2)], "C++ build", log, progress)
    progress("  installing")
    _run([exe, "--install", str(build), "--prefix", str(prefix)], "cmake install", log)


def cmake_identity() -> str:
    """`cmake --version` of the cmake ksbuild runs: part of the build cache key."""
    exe = cmake_exe()
    return _version_line(exe, os.stat(exe).st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _version_line(exe: str, mtime: int) -> str:
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    return f"{exe} {(proc.stdout.strip().splitlines() or [''])[0]} {mtime}"
