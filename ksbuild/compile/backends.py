"""Backends as records: one `Backend` per `[build] backend` name, holding everything a build with it needs.

A backend decides which library the heavy prims (matrix products, convolutions) call, what the
generated project includes, compiles and links, and what the installed CMake package and pkg-config
file ask of the consumer. The passes and templates read these fields; none tests a backend's name.
Adding a backend: one record in BACKENDS, its prelude header, its tests (docs/backends.md).
"""
from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..errors import KsbuildError, Location

BACKEND_PLAIN_NOTE = ("Plain C++17: no heap, no exceptions, no RTTI. ks:: functions are in ks/prelude.h and "
                      "ks/kernels.h.")
PLAIN_HINT = 'use backend = "plain" (loops only) for this target'


@dataclass(frozen=True)
class Backend:
    """What `[build] backend = NAME` and `--backend NAME` build with."""

    name: str
    doc: str                                # one line: what the heavy prims call (CLI help, docs)
    header: str = "ks/kernels.h"            # the prelude header src/P.cpp includes for the heavy prims
    source_note: str = ""                   # the second line of src/P.cpp: what the code needs at run time
    gemm: bool = False                      # its header implements ks::gemm; the prims whose select_backend rule
                                            # hands products to it say so in their record (einsum, conv)
    own_headers: tuple[str, ...] = ()       # prelude headers copied into the project only for this backend
    runtime_free: bool = True               # libP.a has no heap, exceptions, RTTI or libstdc++ runtime (DESIGN.md §6)
    cpu_variants: bool = True               # x86-64: kernels compiled per instruction set level, chosen at run time
    needs_target_blas: bool = False         # the target must know a BLAS (Target.blas)
    x86_64_host_only: bool = False          # its library exists for this machine only (libtorch of this Python)
    find: str = ""                          # the CMake package of its library (find_package, find_dependency)
    find_args: str = ""                     # what follows the package name there (CONFIG PATHS ...)
    link: str = ""                          # the CMake target the library and the Python module link
    library: str = ""                       # what it links, as errors name it
    link_rpath: bool = False                # the Python module records the link path (a library outside the system's)
    bridge: tuple[str, str] = ("", "")      # (file, text): one source compiled with exceptions and RTTI
    cmake_note: str = ""                    # comment lines above its find_package in CMakeLists.txt and PConfig.cmake
    pc_libs: str = ""                       # what P.pc's Libs adds after -lP
    pc_note: str = ""                       # comment line above Libs in P.pc
    adapter: str = ""                       # a template of a shared library over the exports (lib/libP_<name>.so)
    adapter_view: Callable[[list], dict] | None = None  # what that template prints, from the export views
    include_dirs: tuple[str, ...] = ()      # where the adapter's headers are (not shipped with ksbuild)
    locate: Callable[[], dict] | None = None  # where its library is at render time: fills {placeholders} of the text
    tests: tuple[str, ...] = field(default=(), compare=False)  # test files that build and run with it

    def located(self) -> Backend:
        """The record with its library's paths filled into the text fields (render time)."""
        if self.locate is None:
            return self
        paths = self.locate()
        return replace(self, find_args=self.find_args.format(**paths), pc_libs=self.pc_libs.format(**paths),
                       include_dirs=tuple(d.format(**paths) for d in self.include_dirs))

    def check_target(self, target, loc: Location | None = None) -> None:
        """An error at `loc` when this backend cannot build for `target` (a compile.targets.Target)."""
        if self.needs_target_blas and not target.blas:
            raise KsbuildError(f"backend '{self.name}' needs a BLAS library for target '{target.name}', and ksbuild "
                               "knows none for it", loc, hint=PLAIN_HINT)
        if self.x86_64_host_only and (target.cross or target.processor not in ("x86_64", "AMD64")):
            raise KsbuildError(f"backend '{self.name}' links {self.library}, which ksbuild supports on x86-64 hosts "
                               f"only, not on '{target.name}' ({target.processor})", loc, hint=PLAIN_HINT)


def torch_paths() -> dict:
    """Where this Python's libtorch is: its CMake package prefix and its library folder (backend = "aten")."""
    try:
        import torch
        import torch.utils
    except ImportError:
        raise KsbuildError('backend = "aten" links libtorch, but PyTorch is not installed in this Python',
                           hint="pip install torch (the CPU build), or use backend = \"plain\"") from None
    return {"cmake_prefix": torch.utils.cmake_prefix_path, "lib": str(Path(torch.__file__).parent / "lib")}


def ort_headers() -> dict:
    """Where ONNX Runtime's C API header is (backend = "ort"): $KSBUILD_ORT_INCLUDE, else where
    scripts/install.sh puts it (<python prefix>/include/onnxruntime)."""
    folder = Path(os.environ.get("KSBUILD_ORT_INCLUDE") or Path(sys.prefix) / "include" / "onnxruntime")
    if not (folder / "onnxruntime_c_api.h").is_file():
        raise KsbuildError(f'backend = "ort" needs ONNX Runtime\'s C API header, and {folder} has no '
                           "onnxruntime_c_api.h", hint="run scripts/install.sh (it fetches the header from a package "
                           "registry), or set KSBUILD_ORT_INCLUDE to a folder that has it")
    return {"include": str(folder)}


def _ort_view(views: list) -> dict:
    from ..codegen.ort import ort_ops
    ops, skipped = ort_ops(views)
    return {"ort_ops": ops, "ort_skipped": skipped}


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("plain", "loops and the prelude's register tiles; runtime-free (the default)",
            source_note=BACKEND_PLAIN_NOTE,
            tests=("tests/test_golden.py", "tests/test_examples_tensor.py")),
    Backend("blas", "matrix products through CBLAS (OpenBLAS, BLIS, MKL)", header="ks/blas.h",
            source_note="C++17 with matrix products through CBLAS (ks/blas.h); ks:: functions are in ks/prelude.h.",
            gemm=True, own_headers=("blas.h",), runtime_free=False, needs_target_blas=True,
            find="BLAS", link="BLAS::BLAS", library="a BLAS library",
            cmake_note="matrix products call the CBLAS of the BLAS that find_package(BLAS) finds\n"
                       "(set BLA_VENDOR to choose one, e.g. -DBLA_VENDOR=OpenBLAS).",
            pc_libs=" -lblas", pc_note="-lblas must provide CBLAS (e.g. Debian's OpenBLAS libblas.so).",
            tests=("tests/test_blas_backend.py",)),
    Backend("aten", "matrix products through libtorch (ATen)", header="ks/aten.h",
            source_note="C++17 with matrix products through ATen (ks/aten.h); ks:: functions are in ks/prelude.h.",
            gemm=True, own_headers=("aten.h",), runtime_free=False, cpu_variants=False,
            x86_64_host_only=True, find="Torch", find_args=' CONFIG PATHS "{cmake_prefix}"',
            link="torch", library="libtorch",
            link_rpath=True,
            bridge=("src/ks_aten.cpp", '// ATen bridge of backend = "aten": ks/aten.h\'s implementation, compiled '
                    'with exceptions\n#define KS_ATEN_IMPLEMENTATION\n#include "ks/aten.h"\n'),
            cmake_note="matrix products call ATen (ks/aten.h) through src/ks_aten.cpp, the one source compiled\n"
                       "with the exceptions and RTTI libtorch needs. libtorch is the one of the PyTorch that\n"
                       "rendered this project (pass -DTorch_DIR=<dir of TorchConfig.cmake> to use another).",
            pc_libs=" -L{lib} -Wl,-rpath,{lib} -ltorch_cpu -lc10",
            pc_note="libtorch of the PyTorch that built the package.", locate=torch_paths,
            tests=("tests/test_aten_backend.py",)),
    Backend("ort", "the plain kernels, and every export as an ONNX Runtime custom op (lib/libP_ort.so)",
            source_note=BACKEND_PLAIN_NOTE, own_headers=("ort.h",), adapter="ort.cpp.j2", adapter_view=_ort_view,
            include_dirs=("{include}",), locate=ort_headers,
            cmake_note="every export is also an ONNX Runtime custom op of the domain \"ksbuild.<package>\" in a\n"
                       "shared library (src/P_ort.cpp, ks/ort.h), compiled against ONNX Runtime's C API header; the\n"
                       "static library stays plain (runtime-free). onnxruntime's\n"
                       "SessionOptions().register_custom_ops_library loads it.",
            tests=("tests/test_ort_backend.py",)),
)}
"""Every backend by name: the manifest's [build] backend and --backend choose one."""

OWN_HEADERS = {h for b in BACKENDS.values() for h in b.own_headers}
"""Prelude headers that only the backend naming them copies into a project."""


def get_backend(name: str, loc: Location | None = None) -> Backend:
    """The record of a backend name; an unknown name is an error listing the known ones."""
    if name in BACKENDS:
        return BACKENDS[name]
    close = difflib.get_close_matches(name, BACKENDS, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"use one of: {', '.join(BACKENDS)}"
    raise KsbuildError(f"unknown backend '{name}'; known backends: {', '.join(BACKENDS)}", loc, hint)
