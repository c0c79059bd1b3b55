"""`ksbuild package`: render, build and install a manifest, cached by content hash.

The install tree appears atomically: it is built in a temporary folder next to OUT and moved
into place only when everything succeeded, so a failed build leaves no partial tree.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from ..compile.cmake import build_and_install
from ..exports import build_exports
from ..manifest import Manifest, load_manifest
from ..resources import VERSION, resource_dir
from .render import render_project

STAMP = "ksbuild-hash"


def content_hash(m: Manifest, target: str, extra: str = "") -> str:
    """A hash of everything the output depends on: manifest, kernel sources, ksbuild itself."""
    h = hashlib.sha256()
    for part in (VERSION, target, m.build.backend, extra, m.text):
        h.update(part.encode() + b"\0")
    for k in m.kernels.values():
        for ref in (k.python, k.onnx):
            f = m.root / ref.rsplit(":", 1)[0] if ref else None
            if f is not None and f.is_file():
                h.update(f.read_bytes())
    pkg = Path(__file__).resolve().parent.parent
    for folder in (pkg, resource_dir("templates"), resource_dir("prelude"), resource_dir("dist_templates")):
        for f in sorted(folder.rglob("*")):
            if f.is_file() and f.suffix in (".py", ".j2", ".h"):
                h.update(str(f.relative_to(folder)).encode() + f.read_bytes())
    return h.hexdigest()[:20]


def cache_root() -> Path:
    return Path(os.environ.get("KSBUILD_CACHE", Path.home() / ".cache" / "ksbuild"))


def render(manifest: str | Path, out: Path, progress: Callable[[str], None] = print,
           backend: str | None = None) -> Manifest:
    """Write the standalone CMake project of a manifest into `out` (backend overrides [build])."""
    m = load_manifest(manifest, backend)
    progress(f"ksbuild: compiling {len(m.exports)} export(s) of package '{m.name}'")
    exports = build_exports(m)
    tmp = Path(tempfile.mkdtemp(prefix=".ksbuild-render-", dir=out.parent if out.parent.exists() else None))
    try:
        render_project(m, exports, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return m


def package(manifest: str | Path, out: str | Path | None = None, *, target: str = "host", jobs: int | None = None,
            python_module: bool = False, progress: Callable[[str], None] = print,
            backend: str | None = None) -> Path:
    """Render, build and install; returns the install tree (reused when nothing changed)."""
    m = load_manifest(manifest, backend)
    out = Path(out) if out is not None else Path.cwd() / "dist" / m.name
    key = content_hash(m, target, "py" if python_module else "")
    stamp = out / "share" / m.name / STAMP
    if stamp.is_file() and stamp.read_text().strip() == key:
        progress(f"ksbuild: {out} is up to date")
        return out
    cached = cache_root() / key / "install"
    if not (cached / "share" / m.name / STAMP).is_file():
        _build_into_cache(manifest, m, cached, key, target, jobs, python_module, progress)
    else:
        progress("ksbuild: found a cached build")
    _install_copy(cached, out)
    progress(f"ksbuild: installed {m.name} into {out}")
    return out


def _build_into_cache(manifest, m: Manifest, cached: Path, key: str, target, jobs, python_module, progress) -> None:
    work = cache_root() / key
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=work))
    try:
        render(manifest, tmp / "project", progress, m.build.backend)
        progress(f"ksbuild: building {m.name} for {target}")
        build_and_install(tmp / "project", tmp / "build", tmp / "install", jobs=jobs, target=target,
                          python_module=python_module, progress=progress)
        (tmp / "install" / "share" / m.name / STAMP).write_text(key + "\n")
        if cached.exists():
            shutil.rmtree(cached)
        (tmp / "install").rename(cached)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install_copy(src: Path, out: Path) -> None:
    """Copy the tree to out atomically (a sibling temp folder renamed into place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        shutil.copytree(src, tmp / "tree")
        if out.exists():
            shutil.rmtree(out)
        (tmp / "tree").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
