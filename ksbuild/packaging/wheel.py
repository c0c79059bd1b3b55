"""`ksbuild wheel`: a wheel of compiled kernels, built by scikit-build-core from a generated project.

The wheel project is the standalone CMake project of `ksbuild render` plus, from
dist_templates/wheel/, a pyproject.toml, a README and the Python package python/<P>/: an
__init__.py that binds every export, _runtime.py, a verbatim copy of ksbuild's standalone
runtime (packaging/runtime.py; numpy and ctypes only), and torch_ops.py, the torch ops
(packaging/torch_ops.py: torch.ops.ksbuild_<P>.<E>, defined when the module is imported after torch,
so that programs saved with torch.export load after `import <P>`). scikit-build-core installs the CMake
install tree (header, static library, CMake package, the shared library for ctypes) inside
<P>/, so the installed wheel needs numpy and nothing else: no ksbuild, no torch, no compiler
(where torch is installed, torch tensors in give torch tensors out, with autograd).
The project folder is self-contained, so `pip wheel DIR` or cibuildwheel can build it too.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import jinja2

from ..compile.cmake import cmake_exe
from ..compile.targets import Target
from ..errors import KsbuildError
from ..manifest import Manifest, load_manifest
from ..resources import VERSION, resource_dir
from . import cache, runtime
from .cache import cache_root, file_lock, kernels_lock, key_lock
from .package import (
    content_hash,
    keep_cache_bounded,
    kernel_cache,
    one_compile_of_the_kernels,
    render,
    resolve_target,
    write_entry,
)

Progress = Callable[[str], None]
# Names the wheel's module defines besides the exports.
MODULE_NAMES = ("include_dir", "static_library", "cmake_dir", "__version__", "_runtime", "torch_ops", "_package",
                "_ROOT")
BUILD_HOOK = "import json, sys, scikit_build_core.build as b; b.build_wheel(sys.argv[1], json.loads(sys.argv[2]))"


def render_wheel_project(manifest: str | Path, out: Path, *, target: str | None = None,
                         backend: str | None = None, progress: Progress = print) -> Manifest:
    """Write the scikit-build-core project of a manifest into `out` (replaced if it exists)."""
    m = load_manifest(manifest, backend, target)
    t = resolve_target(m, target, python_module=True)
    _check_names(m)
    render(manifest, out, progress, backend, t.name)
    ctx = _context(m, t, json.loads((out / "share" / f"{m.name}.json").read_text()))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir("dist_templates") / "wheel")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    pkg = out / "python" / m.name
    pkg.mkdir(parents=True)
    (out / "pyproject.toml").write_text(env.get_template("pyproject.toml.j2").render(ctx))
    (out / "README.md").write_text(env.get_template("README.md.j2").render(ctx))
    (pkg / "__init__.py").write_text(env.get_template("__init__.py.j2").render(ctx))
    shutil.copyfile(runtime.__file__, pkg / "_runtime.py")
    # the torch custom ops, imported by the runtime where torch is installed
    shutil.copyfile(Path(runtime.__file__).with_name("torch_ops.py"), pkg / "torch_ops.py")
    return m


def build_wheel(manifest: str | Path, out_dir: str | Path | None = None, *, target: str | None = None,
                backend: str | None = None, progress: Progress = print) -> Path:
    """Render the wheel project and build it with scikit-build-core; returns the wheel in out_dir (default dist/)."""
    if importlib.util.find_spec("scikit_build_core") is None:
        raise KsbuildError("ksbuild wheel needs scikit-build-core, which is not installed",
                           hint="pip install 'ksbuild[wheel]' (or pip install scikit-build-core)")
    out_dir = Path(out_dir) if out_dir is not None else Path.cwd() / "dist"
    m = load_manifest(manifest, backend, target)
    t = resolve_target(m, target, python_module=True)
    skbuild = importlib.metadata.version("scikit-build-core")
    key = content_hash(m, t.name, f"wheel {skbuild}")  # (what `ksbuild package` hashes, and the wheel builder)
    cache.size_limit()  # (a bad $KSBUILD_CACHE_MAX_SIZE is refused before compiling)
    with file_lock(key_lock(key)):
        built = next(iter(sorted((cache_root() / key / "wheel").glob("*.whl"))), None)
        fresh = built is None
        if fresh:
            built = _build_into_cache(manifest, key, target, backend, progress)
        else:
            progress("ksbuild: found a cached wheel")
        final = out_dir / built.name
        out_dir.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=".ksbuild-wheel-", dir=out_dir))
        try:
            shutil.copyfile(built, staged / built.name)
            os.replace(staged / built.name, final)  # readers see the old wheel or the new one, never half
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    if fresh:
        keep_cache_bounded([cache_root() / key], progress)
    progress(f"ksbuild: wrote {final}")
    return final


def _build_into_cache(manifest, key: str, target: str | None, backend: str | None, progress: Progress) -> Path:
    """Render and build the wheel in a temporary folder; its wheel/ folder is renamed into the cache entry."""
    work = cache_root() / key
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=work) as tmp:
        project = Path(tmp) / "project"
        m = render_wheel_project(manifest, project, target=target, backend=backend, progress=progress)
        t = resolve_target(m, target, python_module=True)
        progress(f"ksbuild: building the wheel of {m.name} for {t.name} (scikit-build-core)")
        built = _run_backend(project, Path(tmp) / "wheel", t, m, progress)
        write_entry(work, m, t, python_module=True, wheel=True)
        if (work / "wheel").exists():  # an unfinished folder left by a killed run (we hold the lock)
            shutil.rmtree(work / "wheel")
        (Path(tmp) / "wheel").rename(work / "wheel")
    return work / "wheel" / built.name


def _run_backend(project: Path, wheel_dir: Path, t: Target, m: Manifest, progress: Progress) -> Path:
    """Call scikit-build-core's PEP 517 build_wheel hook in a subprocess; a failure keeps the log. The kernel layer
    is taken from (or saved into) ksbuild's kernel cache, as `ksbuild package` does, when scikit-build-core runs
    ksbuild's cmake (the cache key holds its version): a wheel does not compile it again."""
    name = m.name
    wheel_dir.mkdir()
    env = dict(os.environ)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))  # the static and shared library at once
    if t.cross:  # the platform tag of the target, not of this Python (scikit-build-core reads this)
        env["_PYTHON_HOST_PLATFORM"] = f"linux-{t.processor}"
    settings, kernels = {}, kernel_cache(m, t)
    if env.setdefault("CMAKE_EXECUTABLE", cmake_exe()) == cmake_exe():
        settings[f"cmake.define.{name}_KERNEL_CACHE"] = str(kernels)
    with file_lock(kernels_lock(kernels), shared=True), one_compile_of_the_kernels(project, kernels, progress):
        proc = subprocess.run([sys.executable, "-c", BUILD_HOOK, str(wheel_dir), json.dumps(settings)], cwd=project,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        log = cache_root() / "logs" / f"wheel-{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stdout)
        tail = "\n".join(proc.stdout.strip().splitlines()[-40:])
        raise KsbuildError(f"building the wheel failed (full log: {log})\n{tail}")
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise KsbuildError(f"scikit-build-core made {len(wheels)} wheels, expected one:\n{proc.stdout[-2000:]}")
    return wheels[0]


def _check_names(m: Manifest) -> None:
    """An export may not take a name the wheel's module uses for something else."""
    for name, spec in m.exports.items():
        if name in MODULE_NAMES:
            raise KsbuildError(f"export '{name}' clashes with a name the wheel's Python module defines "
                               f"({', '.join(MODULE_NAMES)})", spec.loc, hint="rename the export for the wheel")


def _context(m: Manifest, t: Target, desc: dict) -> dict:
    """What the wheel templates format: the package, its target and each export's signature."""
    exports = []
    for name, e in desc["exports"].items():
        ins = ", ".join(f"{a['name']}: {a['dtype']}{list(a['shape']) if a['shape'] else ''}".replace("'", "")
                        for a in e["args"] if a["role"] == "in")
        exports.append({"name": name, "expression": e["expression"], "ins": ins, "outs": ", ".join(e["results"])})
    return dict(name=m.name, version=m.version, ksbuild_version=VERSION, manifest_name=m.path.name,
                target=t, backend=m.build.backend, exports=exports)
