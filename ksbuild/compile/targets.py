"""Build targets as records: one `Target` per name, holding everything a build for it needs.

A target names its compiler (by GNU triple), the CMake system it is, the flags its ABI needs
(-mcpu/-mfpu/-mfloat-abi for Cortex-M), how executables link (newlib's nosys specs on bare
metal) and, where qemu-user can run its programs, the emulator and the sysroot qemu needs.
ksbuild writes a CMake toolchain file from the record (dist_templates/toolchain.cmake.j2).
"""
from __future__ import annotations

import difflib
import functools
import os
import platform
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from ..errors import KsbuildError, Location
from .backends import get_backend


@dataclass(frozen=True)
class Target:
    """What `--target NAME` and `[build] target = NAME` build for."""

    name: str
    doc: str
    triple: str = ""                    # GNU triple of the compiler (<triple>-g++); "" = the host compiler
    system: str = "Linux"               # CMAKE_SYSTEM_NAME: Linux, or Generic for bare metal
    processor: str = ""                 # CMAKE_SYSTEM_PROCESSOR
    flags: tuple[str, ...] = ()         # compile flags its ABI needs, for the library and its consumers
    link_flags: tuple[str, ...] = ()    # flags for linking executables
    emulator: str = ""                  # qemu-user program that runs its executables on this machine
    sysroot: str = ""                   # the target's libc (qemu -L); Debian/Ubuntu cross-package layout
    blas: bool = False                  # a BLAS library is known for it (Backend.needs_target_blas)
    apt: tuple[str, ...] = ()           # Debian packages that provide the toolchain (and emulator)
    vectors: bool = True                # a vector unit for float (False: one lane; products as dot products)
    code_flags: tuple[str, ...] = ()    # GCC flags for the package's own source (not the kernel layer, not consumers)

    @property
    def cross(self) -> bool:
        """True for every target but the host."""
        return self.name != "host"

    @property
    def hosted(self) -> bool:
        """An operating system with a C library and shared libraries (a wheel can target it)."""
        return self.system != "Generic"

    @property
    def cxx(self) -> str:
        """The C++ compiler's program name (host: c++ unless CXX says otherwise)."""
        return f"{self.triple}-g++" if self.triple else host_cxx()[0]

    @property
    def cc(self) -> str:
        """The C compiler's program name, for consumers' C sources."""
        return f"{self.triple}-gcc" if self.triple else "cc"

    def emulator_command(self) -> list[str]:
        """The command prefix that runs one of its executables on this machine ([] when none is known)."""
        if not self.emulator:
            return []
        return [self.emulator, "-L", self.sysroot] if self.sysroot else [self.emulator]


_CORTEX_M = ("arm-none-eabi", "Generic", "arm")  # (and vectors=False: no Helium on these cores)
_NOSYS = ("--specs=nosys.specs",)
# A microcontroller's generated code keeps its loops of a few known iterations rolled: GCC's complete unrolling of
# them at -O3 (a classifier's 10 columns, a pooling window, an attention head's 4 rows) made the benchmark's
# transformer layer's own function 4.4 KB instead of 2.2 KB, for few instructions saved (issue 36, Cortex-M4 table).
_ROLLED = ("--param=max-completely-peel-times=1",)
_ARM_APT = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "libstdc++-arm-none-eabi-newlib")

# Cortex-M flags after the Arm GNU toolchain's multilib table (gcc/config/arm/t-rmprofile):
# M4 has the single-precision FPv4 unit, M7 the double-precision FPv5, M0+ no FPU.
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("host", "this machine, with its default C++ compiler", system=platform.system(),
           processor=platform.machine(), blas=True),
    Target("aarch64-linux-gnu", "64-bit Arm Linux (glibc); runs here under qemu-aarch64", "aarch64-linux-gnu",
           processor="aarch64", emulator="qemu-aarch64", sysroot="/usr/aarch64-linux-gnu",
           apt=("g++-aarch64-linux-gnu", "qemu-user")),
    Target("riscv64-linux-gnu", "64-bit RISC-V Linux (glibc); runs here under qemu-riscv64", "riscv64-linux-gnu",
           processor="riscv64", emulator="qemu-riscv64", sysroot="/usr/riscv64-linux-gnu",
           apt=("g++-riscv64-linux-gnu", "qemu-user")),
    Target("cortex-m4", "Arm Cortex-M4 with FPv4-SP, hard float, bare metal (newlib)", *_CORTEX_M,
           flags=("-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"), link_flags=_NOSYS,
           apt=_ARM_APT, vectors=False, code_flags=_ROLLED),
    Target("cortex-m7", "Arm Cortex-M7 with FPv5 (double precision), hard float, bare metal (newlib)", *_CORTEX_M,
           flags=("-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-d16", "-mfloat-abi=hard"), link_flags=_NOSYS,
           apt=_ARM_APT, vectors=False, code_flags=_ROLLED),
    Target("cortex-m0plus", "Arm Cortex-M0+, no FPU (soft float), bare metal (newlib)", *_CORTEX_M,
           flags=("-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"), link_flags=_NOSYS,
           apt=_ARM_APT, vectors=False, code_flags=_ROLLED),
)}


def get_target(name: str, loc: Location | None = None) -> Target:
    """The record of a target name; an unknown name is an error listing the known ones."""
    if name in TARGETS:
        return TARGETS[name]
    import difflib

    close = difflib.get_close_matches(name, TARGETS, n=1)
    hint = f"did you mean '{close[0]}'?" if close else "see docs/shipping.md for what each target is"
    raise KsbuildError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}", loc, hint)


def host_cxx() -> list[str]:
    """The host C++ compiler as CMake picks it: $CXX if set, else the first of c++, g++, clang++ on PATH."""
    env = os.environ.get("CXX", "").strip()
    if env:
        return shlex.split(env)
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return [name]
    raise KsbuildError("no C++ compiler found (looked for $CXX, c++, g++, clang++)",
                       hint="install one, e.g. apt-get install g++")


def compiler_path(target: Target) -> str:
    """The absolute path of the target's C++ compiler; missing is an error saying how to install it."""
    found = shutil.which(target.cxx)
    if found:
        return found
    hint = f"apt-get install {' '.join(target.apt)}" if target.apt else "install a C++ compiler or set CXX"
    raise KsbuildError(f"no C++ compiler for target '{target.name}' ({target.cxx} not found)", hint=hint)


def compiler_identity(target: Target) -> str:
    """Path, version banner and machine of the target's compiler: part of the build cache key."""
    path = compiler_path(target)
    st = os.stat(path)
    return _identity(os.path.realpath(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=None)
def _identity(path: str, mtime: int, size: int) -> str:
    """`--version` (first line) and `-dumpmachine` of a compiler; cached while the file is unchanged."""
    def ask(flag: str) -> str:
        proc = subprocess.run([path, flag], capture_output=True, text=True)
        return (proc.stdout.strip().splitlines() or [""])[0]

    return f"{path} | {ask('--version')} | {ask('-dumpmachine')} | {mtime} {size}"


def emulator_path(target: Target) -> str | None:
    """The qemu-user program for the target if it is installed here, else None."""
    return shutil.which(target.emulator) if target.emulator else None


# The values a compiler lists after rejecting -march=X: gcc (x86, then Arm), then clang
_MARCH_VALID = re.compile(r"valid (?:arguments(?: to .-march=. switch)?|target CPU values) are: ([^;\n]*)")


@functools.lru_cache(maxsize=None)
def march_rejected(command: tuple[str, ...], flags: tuple[str, ...], cpu: str) -> str | None:
    """None if `command flags -march=cpu` preprocesses an empty file (or cannot run at all); else a hint."""
    env = {**os.environ, "LC_ALL": "C"}  # ASCII quotes in the compiler's messages
    try:
        proc = subprocess.run([*command, *flags, f"-march={cpu}", "-E", "-x", "c++", os.devnull, "-o", os.devnull],
                              capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == 0:
        return None
    m = _MARCH_VALID.search(proc.stderr)
    valid = m[1].split() if m else []
    close = difflib.get_close_matches(cpu, valid, n=3)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    if valid:
        return f"valid values include {', '.join(valid[:12])}"
    return (proc.stderr.strip().splitlines() or ["the compiler gave no reason"])[0]


X86_64_LEVELS = ("x86-64", "x86-64-v3", "x86-64-v4")
"""The instruction set levels (-march values) a portable x86-64 build compiles its kernels for, in the order of
ks/cpu.h's levels: the exports call the highest one the CPU has."""


def cpu_variants(target: Target, cpu: str, backend: str) -> tuple[str, ...]:
    """The -march values to compile a package's kernels for, one chosen at run time: the x86-64 levels for an
    x86-64 host without a [build] cpu (a backend whose record allows it) whose compiler knows them; () for one
    build."""
    if cpu or target.cross or target.processor not in ("x86_64", "AMD64") or not get_backend(backend).cpu_variants:
        return ()
    try:
        command = tuple(host_cxx())
    except KsbuildError:
        return ()
    return () if march_rejected(command, target.flags, X86_64_LEVELS[-1]) is not None else X86_64_LEVELS


# /proc/cpuinfo's names of the features each level adds (what the kernel lists is what it enables)
_LEVEL_FLAGS = {"x86-64-v3": {"cx16", "lahf_lm", "popcnt", "pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "bmi1",
                              "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
                "x86-64-v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}}


@functools.lru_cache(maxsize=None)
def host_level() -> str:
    """The highest of X86_64_LEVELS this machine runs (Linux: /proc/cpuinfo's flags; elsewhere the baseline)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return X86_64_LEVELS[0]
    level = X86_64_LEVELS[0]
    for name in X86_64_LEVELS[1:]:
        if not _LEVEL_FLAGS[name] <= flags:
            break
        level = name
    return level


def cpu_here(target: Target, cpu: str, backend: str) -> str:
    """The cpu to compile for when the result runs on this machine only (ksbuild.build loads it here): this
    machine's level where cpu_variants would compile several (one build instead of three), else cpu."""
    return host_level() if cpu_variants(target, cpu, backend) else cpu
