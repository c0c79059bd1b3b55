"""`ksbuild package`: render, build and install a manifest, cached by content hash.

The install tree appears atomically: it is built in a temporary folder in the cache and moved
into place only when everything succeeded, so a failed build leaves no partial tree. Runs that
build the same thing, or into the same output, at the same time wait for each other on locks
(cache.py) and all succeed. A failed build's log stays in the cache, at the path the error names.
A cache entry is reused only when its files match the sha256 list written when it was finished;
a damaged entry is built again, and a build first removes what killed builds of its key left.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..compile.backends import get_backend
from ..compile.cmake import build_and_install, cmake_exe, cmake_identity
from ..compile.footprint import section_sizes, stack_usage
from ..compile.targets import Target, compiler_identity, cpu_here, get_target
from ..errors import KsbuildError, warn
from ..exports import build_exports
from ..manifest import Manifest, check_cpu, load_manifest, locate
from ..resources import VERSION, resource_dir
from . import cache
from .cache import cache_root, file_lock, key_lock, out_lock
from .render import render_project

__all__ = ["STAMP", "cache_root", "content_hash", "kernel_sources", "package", "render", "resolve_target"]

STAMP = "ksbuild-hash"
# Environment variables CMake or the compiler read that change the build.
BUILD_ENV = ("CXX", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "BLA_VENDOR", "CMAKE_GENERATOR")


def content_hash(m: Manifest, target: str, extra: str = "") -> str:
    """A hash of everything the output depends on, by content alone (the same manifest in two folders has one
    key): the manifest text and the source of every kernel (named as the manifest names it), the target, its
    compiler (path, version, machine), CMake, build flags, and ksbuild itself."""
    h = hashlib.sha256()
    for part in (VERSION, extra, m.build.backend, m.build.optimize, m.text, *build_identity(get_target(target))):
        h.update(part.encode() + b"\0")
    for name, f in _named_sources(m):
        h.update(name.encode() + b"\0" + f.read_bytes())
    for k in m.kernels.values():
        if k.torch:  # what make() returns: the module's code, weights and example inputs
            from ..frontends.torch_export import fingerprint
            h.update(fingerprint(k.torch.rsplit(":", 1)[0], m.root, k.torch.rsplit(":", 1)[1], k.loc))
    _hash_ksbuild(h)
    return h.hexdigest()[:20]


def _hash_ksbuild(h) -> None:
    """Add ksbuild's own code, templates and prelude (by their paths inside ksbuild, and content) to h."""
    pkg = Path(__file__).resolve().parent.parent
    for folder in (pkg, resource_dir("templates"), resource_dir("prelude"), resource_dir("dist_templates")):
        for f in sorted(folder.rglob("*")):
            if f.is_file() and f.suffix in (".py", ".j2", ".h", ".cpp"):
                h.update(str(f.relative_to(folder)).encode() + f.read_bytes())


def kernel_cache(m: Manifest, t: Target) -> Path:
    """The cache folder of the kernel layer's objects (ks/kernels.h) for the build of m for t: keyed by the
    prelude, the project template, the target, its compiler and the flags that reach the kernels' compile. Not
    [build] threads: the kernel layer is compiled alike for any thread count (its parts are the generated code's,
    ks/parts.h) and it includes no thread header, so -pthread (the threads library's compile flag, which only defines
    _REENTRANT) leaves its objects as they are: a threaded build shares the folder of an unthreaded one. Not
    [build] cpu: an object's name says its level (kernels_<level>.o, the -march it is compiled with), so a build
    for cpu = "x86-64-v4" (ksbuild.build's on such a machine) takes the v4 object a portable build compiled, and
    the other way round; except cpu = "native", whose object differs from one machine to the next."""
    h = hashlib.sha256()
    cpu = m.build.cpu if m.build.cpu == "native" else ""
    for part in (VERSION, cpu, kernel_optimize(m), *build_identity(t)):
        h.update(part.encode() + b"\0")
    for f in [resource_dir("templates") / "CMakeLists.txt.j2", *sorted((resource_dir("prelude") / "ks").iterdir())]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return cache_root() / "kernels" / h.hexdigest()[:20]


def kernel_optimize(m: Manifest) -> str:
    """How the kernel layer is compiled: as the manifest says, except that a debug build takes the speed build's
    objects (optimize = "debug" compiles the package's own code for debugging, not the kernels)."""
    return "speed" if m.build.optimize == "debug" else m.build.optimize


def build_identity(t: Target) -> list[str]:
    """The target record, its compiler's identity, CMake's version and the build environment."""
    env = [f"{k}={os.environ.get(k, '')}" for k in BUILD_ENV]
    return [repr(t), compiler_identity(t), _cmake_version(), *env]


def _cmake_version() -> str:
    """CMake's version line: cmake_identity() without the path and time stamp of the program, which differ between
    two installs of one version (a venv per checkout or per CI job), so that they share cache entries."""
    identity, exe = cmake_identity(), cmake_exe()
    return identity.removeprefix(exe).rsplit(" ", 1)[0].strip() if identity.startswith(exe) else identity


def kernel_sources(m: Manifest) -> list[Path]:
    """The source file of every kernel: "file.py:f" relative to the manifest, "module:f" as Python finds it."""
    return [path for _, path in _named_sources(m)]


def _named_sources(m: Manifest) -> list[tuple[str, Path]]:
    """(name, file) of every kernel's source: named as the manifest writes it (a path relative to the manifest, a
    module name), never by where the manifest's folder is."""
    named = []
    for k in m.kernels.values():
        if k.onnx:
            name, path = k.onnx, m.root / k.onnx
        else:
            name = (k.python or k.torch or "").rsplit(":", 1)[0]
            path = m.root / name if name.endswith(".py") else _module_file(name)
        if path is not None and path.is_file():
            named.append((name, path))
            named += _imported_sources(name, path) if k.python else []
    return named


def _imported_sources(name: str, path: Path) -> list[tuple[str, Path]]:
    """(name, file) of the modules whose constants a kernel file imports (`from consts import EPS`), named by the
    kernel file's name and their path relative to its folder."""
    from ..frontends.python.source import imported_files

    folder = path.resolve().parent
    return [(f"{name}>{os.path.relpath(f.resolve(), folder)}", f) for f in dict.fromkeys(imported_files(path))]


def _module_file(module: str) -> Path | None:
    """The file of a dotted module name, found the way the frontend finds it (None if it is not there)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def resolve_target(m: Manifest, name: str | None, python_module: bool = False) -> Target:
    """The target record for --target (or the manifest's [build] target); checks the backend fits it."""
    name = name or m.build.target
    loc = locate(m.text, "build", "target", file=str(m.path)) if name == m.build.target else None
    t = get_target(name, loc)
    get_backend(m.build.backend).check_target(t, locate(m.text, "build", "backend", file=str(m.path)))
    if m.build.cpu and t.name != m.build.target:  # (the manifest's own target was checked when it was read)
        check_cpu(m, t)
    if m.build.threads > 1 and not t.hosted:
        raise KsbuildError(f"threads = {m.build.threads} starts threads, which bare-metal target '{t.name}' does not "
                           "have (no operating system)", locate(m.text, "build", "threads", file=str(m.path)),
                           hint="use threads = 0")
    if python_module and not t.hosted:
        raise KsbuildError(f"target '{t.name}' has no operating system to load a Python module on", loc)
    return t


def render(manifest: str | Path, out: Path, progress: Callable[[str], None] = print,
           backend: str | None = None, target: str | None = None, here: bool = False,
           optimize: str | None = None) -> Manifest:
    """Write the standalone CMake project of a manifest into `out` (backend, target, optimize override [build]; here:
    for this machine's CPU alone, see `for_here`)."""
    m = load_manifest(manifest, backend, target, optimize)
    t = resolve_target(m, target)
    m = for_here(m, t) if here else m
    progress(f"ksbuild: compiling {len(m.exports)} export(s) of package '{m.name}'")
    exports = build_exports(m, target=t.name)
    check_replaceable(out, m.name, "project")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ksbuild-render-", dir=out.parent))
    try:
        render_project(m, exports, tmp / "project", t)
        if out.exists():
            shutil.rmtree(out)
        (tmp / "project").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return m


def package(manifest: str | Path, out: str | Path | None = None, *, target: str = "host", jobs: int | None = None,
            python_module: bool = False, progress: Callable[[str], None] = print,
            backend: str | None = None, here: bool | None = None, optimize: str | None = None) -> Path:
    """Render, build and install; returns the install tree (reused when nothing changed). here: for this
    machine's CPU alone (`for_here`); None: as $KSBUILD_HERE says (`here_by_default`). optimize: replaces [build]
    optimize."""
    here = here_by_default() if here is None else here  # (resolved once: the key and the rendered project agree)
    m, t, key = planned(manifest, target, backend, python_module, here, optimize)
    out = Path(out) if out is not None else Path.cwd() / "dist" / m.name
    if _is_current(out, m.name, key):
        _touch_used(key, out)
        warn_scalar_stacks(m, out)
        progress(f"ksbuild: {out} is up to date")
        return out
    check_replaceable(out, m.name, "tree")  # (before compiling: a refused output costs nothing)
    cache.size_limit()  # (a bad $KSBUILD_CACHE_MAX_SIZE is refused before compiling too)
    cached = cache_root() / key / "install"
    with file_lock(key_lock(key)):
        built = not _reusable(cached.parent, m.name, key, progress)
        if built:
            _build_into_cache(manifest, m, key, t, jobs, python_module, progress, here)
        else:
            progress("ksbuild: found a cached build")
            cache.record_use(cached.parent, m.path)
        with file_lock(out_lock(out)):
            if not _is_current(out, m.name, key):
                _install_copy(cached, out)
    _touch_used(key, out)
    if built:
        keep_cache_bounded([cached.parent, out, kernel_cache(m, t)], progress)
    warn_scalar_stacks(m, out)
    progress(f"ksbuild: installed {m.name} ({t.name}) into {out}")
    return out


def planned(manifest: str | Path, target: str = "host", backend: str | None = None, python_module: bool = False,
            here: bool | None = None, optimize: str | None = None) -> tuple[Manifest, Target, str]:
    """What package() builds: the manifest (for this machine's CPU where `here`, or $KSBUILD_HERE, says so), the
    target, and the build's cache key."""
    m = load_manifest(manifest, backend, target, optimize)
    t = resolve_target(m, target, python_module)
    m = for_here(m, t) if (here_by_default() if here is None else here) else m
    return m, t, content_hash(m, t.name, ("py " if python_module else "") + m.build.cpu)


def keep_cache_bounded(keep: list[Path], progress) -> None:
    """After a build: remove the least recently used cache items beyond $KSBUILD_CACHE_MAX_SIZE (not `keep`,
    what the build made and used), and say so in one line."""
    done = cache.keep_within_limit(keep)
    if done.removed:
        progress(f"ksbuild: the build cache was above its limit ({cache.limit_text()}): removed "
                 f"{len(done.removed)} least recently used item(s), {done.freed / 2**20:.0f} MiB")


def here_by_default() -> bool:
    """$KSBUILD_HERE=1: `ksbuild package` (and package()) build for this machine's CPU alone, as ksbuild.build does:
    on x86-64, one compile at this machine's level instead of one per level with a run-time choice. For quick
    iterations and test runs; the package then needs this CPU's level (`[build] cpu` set in the manifest wins).
    Unset or 0: the portable build. Any other value is refused."""
    value = os.environ.get("KSBUILD_HERE", "").strip()
    if value not in ("", "0", "1"):
        raise KsbuildError(f"KSBUILD_HERE={value!r}: expected 1 (build for this machine's CPU alone) or 0")
    return value == "1"


def for_here(m: Manifest, t: Target) -> Manifest:
    """The manifest as built for loading into this Python (ksbuild.build): compiled for this machine's instruction
    set when [build] cpu leaves it to ksbuild, once instead of once per x86-64 level (compile time)."""
    return replace(m, build=replace(m.build, cpu=cpu_here(t, m.build.cpu, m.build.backend)))


def _is_current(tree: Path, name: str, key: str) -> bool:
    """True if `tree` is a finished install tree stamped with `key`."""
    try:
        return (tree / "share" / name / STAMP).read_text().strip() == key
    except OSError:
        return False


def _reusable(work: Path, name: str, key: str, progress) -> bool:
    """True if cache entry `work` holds a finished install tree whose files are those its files.sha256 lists; a
    damaged one (a file truncated, changed, lost or added) is named in one progress line and rebuilt."""
    tree = work / "install"
    if not tree.is_dir():
        return False
    why = cache.damage(work, "install") if _is_current(tree, name, key) else "has no stamp of its key"
    if why is not None:
        progress(f"ksbuild: the cached build {work} {why}: building it again")
    return why is None


def _touch_used(key: str, out: Path) -> None:
    """Restart the age of the cache entry `key` and of `out` if it is a tree in the cache (ksbuild.build's)."""
    cache.touch(cache_root() / key)
    if cache_root().resolve() in out.resolve().parents:
        cache.touch(out)


def _build_into_cache(manifest, m: Manifest, key: str, t: Target, jobs, python_module, progress, here) -> None:
    """Build in a temporary folder of the cache entry (after removing what killed builds left there: we hold the
    key's lock); move the finished tree into <key>/install and write its files.sha256."""
    work = cache_root() / key
    work.mkdir(parents=True, exist_ok=True)
    for folder in cache.remove_leftovers(work):
        progress(f"ksbuild: removed {folder}, left by a build that was stopped")
    write_entry(work, m, t, python_module, finished=False)  # (what a failed or stopped build was)
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=work))
    log = tmp.with_suffix(".log")  # beside the temporary folder: a failed build's log outlives it
    try:
        render(manifest, tmp / "project", progress, m.build.backend, t.name, here=here, optimize=m.build.optimize)
        progress(f"ksbuild: building {m.name} for {t.name}")
        _compile(tmp, m, t, log, jobs, python_module, progress)
        (tmp / "install" / "share" / m.name / STAMP).write_text(key + "\n")
        write_entry(work, m, t, python_module)
        _finish_entry(work, tmp / "install")
        os.replace(log, work / "build.log")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _compile(tmp: Path, m: Manifest, t: Target, log: Path, jobs, python_module, progress) -> None:
    """Build and install tmp/project into tmp/install, holding the kernel object folder's lock shared (so that
    `ksbuild cache clean` leaves the objects alone meanwhile), and measure the footprint."""
    kernels = kernel_cache(m, t)
    with file_lock(cache.kernels_lock(kernels), shared=True), one_compile_of_the_kernels(tmp / "project", kernels,
                                                                                          progress):
        build_and_install(tmp / "project", tmp / "build", tmp / "install", log=log, jobs=jobs, target=t,
                          python_module=python_module, progress=progress, kernel_cache=kernels)
        record_footprint(tmp / "install", m.name, t, [tmp / "build", kernels], progress)
        _describe_kernels(kernels, m, t)


@contextlib.contextmanager
def one_compile_of_the_kernels(project: Path, kernels: Path, progress):
    """While the kernel object folder lacks an object `project` would take from it (its comment line "This project
    takes": the parts it calls, of each level), hold a lock that builds needing them take in turn: two builds with one
    compiler and flags started together (two pytest-xdist workers, two terminals) compile kernels.cpp once, the second
    taking the first's object when it gets the lock, instead of side by side (4-20 s of CPU per part and level at
    -O3). With a compiler launcher (ccache) the project saves no object there: no lock."""
    text = (project / "CMakeLists.txt").read_text() if (project / "CMakeLists.txt").is_file() else ""
    if "_kernel_layer level march)" not in text or os.environ.get("CMAKE_CXX_COMPILER_LAUNCHER"):
        yield
        return
    takes = re.search(r"^# This project takes \(at its default CPU setting\): (.*)$", text, re.MULTILINE)
    if takes is None or all((kernels / name).is_file() for name in takes.group(1).split()):
        yield
        return
    parts = sorted({name.rsplit("_", 1)[-1].removesuffix(".o") for name in takes.group(1).split()})
    lock = cache.kernels_lock(kernels).with_name(f"kernels-{kernels.name}-compile-{'-'.join(parts)}.lock")
    with file_lock(lock, wait=False) as got:
        if got:
            yield
            return
    progress("  waiting for another build compiling the kernel layer with these flags")
    with file_lock(lock):
        yield


def _describe_kernels(kernels: Path, m: Manifest, t: Target) -> None:
    """Write what a kernel object folder was built for into its about.json (for `ksbuild cache info`), once, and
    restart its age."""
    if kernels.is_dir() and not (kernels / "about.json").exists():
        about = {"target": t.name, "threads": m.build.threads > 1, "compiler": compiler_identity(t)}
        with contextlib.suppress(OSError):  # (a description only: never fails a build)
            cache.write_atomic(kernels / "about.json", json.dumps(about, indent=2) + "\n")
    cache.touch(kernels)


def _finish_entry(work: Path, tree: Path) -> None:
    """Move a finished install tree into <work>/install (replacing an unfinished or damaged one: we hold the key's
    lock) and write <work>/files.sha256, without which the tree is never reused."""
    cache.unseal(work)
    if (work / "install").exists():
        shutil.rmtree(work / "install")
    tree.rename(work / "install")
    cache.seal(work, "install")


def record_footprint(tree: Path, name: str, t: Target, graphs: list[Path], progress) -> None:
    """Measure what the library in install `tree` costs a device (compile/footprint.py) and write it into
    share/<name>/<name>.json (a "footprint" of section sizes, "stack_bytes" per export) and the header."""
    described = tree / "share" / name / f"{name}.json"
    info = json.loads(described.read_text())
    symbols = {e: d["symbol"] for e, d in info["exports"].items()}
    stack = stack_usage(graphs, list(symbols.values()))
    sizes = section_sizes(tree / "lib" / f"lib{name}.a", f"{t.triple}-size" if t.triple else "size")
    info["footprint"] = dict(sizes, stack_measured=bool(stack))
    for export, symbol in symbols.items():
        info["exports"][export]["stack_bytes"] = stack.get(symbol)
    described.write_text(json.dumps(info, indent=2) + "\n")
    header = tree / "include" / f"{name}.h"
    header.write_text(footprint_note(header.read_text(), info))
    if sizes:
        deepest = max((v for v in stack.values() if v is not None), default=None)
        kb = {k: f"{v / 1024:.1f} KB" for k, v in sizes.items()}
        progress(f"ksbuild: {name}: code {kb['text']}, read-only data {kb['rodata']}, weights {kb['weights']}" +
                 (f"; at most {deepest} bytes of stack per call" if deepest is not None else ""))


# The stack a scalar-only export may use before the build warns (issue 36: no frame above 512 B, scratch in the
# workspace). Such an export has no workspace (the scalar C ABI), so its tensors, such as a reverse-mode loop's
# residuals, are arrays on its stack.
SCALAR_STACK_BOUND = 512


def warn_scalar_stacks(m: Manifest, tree: Path) -> None:
    """A warning per scalar-only export of install `tree` whose measured stack (P.json's stack_bytes) is above
    SCALAR_STACK_BOUND."""
    described = tree / "share" / m.name / f"{m.name}.json"
    exports = json.loads(described.read_text())["exports"] if described.is_file() else {}
    for export, d in exports.items():
        if d.get("kind") == "scalar" and (d.get("stack_bytes") or 0) > SCALAR_STACK_BOUND:
            warn(f"export '{export}' uses {d['stack_bytes']} bytes of stack: its signature is scalars only, so it "
                 "takes no workspace and the values it keeps (a loop's residuals for reverse mode, its tensors) are "
                 "arrays on its stack", locate(m.text, "exports", export, file=str(m.path)),
                 hint='give the kernel a tensor parameter or result (a float[1] instead of a float): the export then '
                      'takes a workspace and keeps them there')


def footprint_note(header: str, info: dict) -> str:
    """The header with a paragraph on stack use (per export) and section sizes added to its first comment."""
    exports = info["exports"]
    known = {e: d["stack_bytes"] for e, d in exports.items() if d.get("stack_bytes") is not None}
    if not known:
        return header
    width = max(len(d["symbol"]) for d in exports.values())
    lines = [" *", " * Stack: the most each function uses, measured when the library was built (GCC's call graphs:",
             " * its own frame and the deepest chain of calls below it; libm and memcpy not counted). Scratch",
             " * space is the workspace's, not the stack's.",
             *(f" *   {exports[e]['symbol']:<{width}}  {n} bytes" for e, n in known.items())]
    head, sep, tail = header.partition("\n */\n")
    return head + "\n" + "\n".join(lines) + sep + tail if sep else header


def write_entry(work: Path, m: Manifest, t: Target, python_module: bool, wheel: bool = False,
                finished: bool = True) -> None:
    """entry.json: what a cache entry holds, for `ksbuild cache info` (finished=False: a build that starts)."""
    info = {"package": m.name, "version": m.version, "manifest": str(m.path), "manifests": [str(m.path)],
            "target": t.name, "backend": m.build.backend, "cpu": m.build.cpu, "python_module": python_module,
            "wheel": wheel, "compiler": compiler_identity(t), "ksbuild": VERSION}
    if finished:
        info.update(built=time.strftime("%Y-%m-%d %H:%M:%S"), built_at=time.time())
    work.mkdir(parents=True, exist_ok=True)
    cache.write_atomic(work / "entry.json", json.dumps(info, indent=2) + "\n")


def check_replaceable(out: Path, name: str, what: str) -> None:
    """A KsbuildError unless `out` may be replaced as a whole by package `name`'s install tree (what = "tree")
    or rendered project ("project"): it does not exist, is an empty directory, or is an earlier one of the
    same package. ksbuild never deletes files it did not write (a shared prefix, the manifest's own folder)."""
    if not out.exists() and not out.is_symlink():
        if any(p.exists() and not p.is_dir() for p in out.parents):
            blocker = next(p for p in reversed(out.parents) if p.exists() and not p.is_dir())
            raise KsbuildError(f"cannot write to {out}: {blocker} is a file, not a directory")
        return
    if not out.is_dir() or out.is_symlink():
        raise KsbuildError(f"cannot write the {what} to {out}: it exists and is not a directory")
    if out.resolve() == Path.cwd().resolve() or out.resolve() in Path.cwd().resolve().parents:
        raise KsbuildError(f"cannot write the {what} to {out}: it is the current directory or holds it",
                           hint=f"give a new directory, e.g. -o dist/{name}")
    entries = list(out.iterdir())
    if not entries:
        return
    ours = ((out / "share" / name / "ksbuild-hash").is_file() if what == "tree" else
            (out / "CMakeLists.txt").is_file() and
            f"package {name}." in (out / "CMakeLists.txt").read_text(errors="replace").split("\n", 1)[0])
    if not ours:
        shown = ", ".join(sorted(e.name for e in entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise KsbuildError(f"{out} exists and is not an earlier {what} of package '{name}' (it holds {shown}): "
                           f"ksbuild replaces the output directory as a whole and would delete those files",
                           hint=f"give a new or empty directory (-o dist/{name}), or remove it first")


def _install_copy(src: Path, out: Path) -> None:
    """Copy the tree to out: a sibling temp copy renamed into place; the old tree is renamed away first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        shutil.copytree(src, tmp / "tree")
        if out.exists():
            out.rename(tmp / "old")
        (tmp / "tree").rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
