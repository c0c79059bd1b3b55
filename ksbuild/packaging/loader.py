"""The Python API: build a manifest and call its compiled exports on scalars, numpy and torch.

ksbuild.build() packages with an extra shared library (the same generated sources) and binds
each export through the standalone runtime (`runtime.py`), using the JSON signature
description installed in share/P/.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import KsbuildError
from .runtime import Package

COMPILE_LINES = ("ksbuild: building ", "  compiling ", "  still compiling ")
"""The progress lines ksbuild.build shows by default: those of a build that compiles C++ (compile/cmake.py)."""


def _progress(quiet: bool | None):
    """Where progress lines go: nowhere (quiet), all to stdout (not quiet), or compile lines to stderr (None)."""
    if quiet:
        return lambda line: None
    if quiet is False:
        return print
    return lambda line: print(line, file=sys.stderr, flush=True) if line.startswith(COMPILE_LINES) else None


def build(manifest: str | Path, *, out: str | Path | None = None, target: str = "host", quiet: bool | None = None,
          backend: str | None = None, portable: bool = False, optimize: str | None = None) -> Package:
    """Build a manifest (cached by content hash) and load its exports for calling from Python.

    While it compiles C++, a line per object compiled (with the elapsed time) goes to stderr; a cached build
    says nothing. quiet=True: nothing at all; quiet=False: every progress line, to stdout.

    backend (a name in compile/backends.py's BACKENDS) replaces the manifest's [build] backend. The build is for this
    machine's instruction set where [build] cpu leaves it to ksbuild; portable=True compiles every x86-64
    level and chooses at run time, as `ksbuild package` does (to test or time the library you ship). optimize
    ("speed", "size" or "debug") replaces the manifest's [build] optimize: "debug" compiles the package's own code at
    -Og -g, several times faster than at -O3, to iterate on values or step through it in a debugger."""
    from ..manifest import load_manifest
    from .package import cache_root, content_hash, package

    if target != "host":
        raise KsbuildError("ksbuild.build loads the result into this Python, so the target must be 'host'")
    m = load_manifest(manifest, backend, optimize=optimize)
    root = Path(out) if out is not None else \
        cache_root() / "python" / m.name / content_hash(m, target, "py portable" if portable else "py")
    package(manifest, root, target=target, python_module=True, progress=_progress(quiet), backend=backend,
            here=not portable, optimize=optimize)
    return Package(root)
