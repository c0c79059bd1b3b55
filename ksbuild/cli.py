"""The `ksbuild` command line: package, render, wheel, cache, check, ir.

Exit status: 0 ok, 1 an error in the user's input or files (located message), 2 a usage error (argparse),
70 an internal error of ksbuild (a bug: -v shows its traceback), 130 interrupted (Ctrl-C, SIGTERM)."""
from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from . import __version__
from .compile.backends import BACKENDS
from .compile.targets import TARGETS
from .errors import KsbuildError, KsbuildWarning

BACKEND_HELP = "; ".join(f"{b.name}: {b.doc}" for b in BACKENDS.values()) + "; default: the manifest's"
EXIT_OK, EXIT_USER, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 70, 130
TARGET_HELP = ", ".join(TARGETS) + "; default: the manifest's [build] target"


def _positive_int(text: str) -> int:
    """argparse type of --jobs: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _duration(text: str) -> float:
    """argparse type of --older-than: seconds in 7d, 12h, 30m, 45s."""
    from .packaging.cache import parse_duration
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _byte_size(text: str) -> int:
    """argparse type of --max-size: bytes in 2G, 500M, 64K, 1000."""
    from .packaging.cache import parse_size
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_verbosity(p: argparse.ArgumentParser, default) -> None:
    """-q and -v, before the command (`ksbuild -q package ...`) or after it (the subparsers' default is SUPPRESS,
    so that they do not overwrite what was given before the command)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="print errors only: no progress, status lines or warnings")
    g.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="more detail: timed progress, C signatures in check, tracebacks of internal errors")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksbuild", description="Compile Python numeric kernels, their vmap and "
                                "derivatives, into plain runtime-free C++ static libraries.",
                                epilog="exit status: 0 ok, 1 error in your input or files, 2 usage error, "
                                "70 internal error of ksbuild (rerun with -v for its traceback), 130 interrupted")
    p.add_argument("--version", action="version", version=f"ksbuild {__version__}")
    _add_verbosity(p, False)
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)  # older spelling of -v's tracebacks
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_commands(sub)
    for command in sub.choices.values():
        _add_verbosity(command, argparse.SUPPRESS)
    return p


def _add_commands(sub) -> None:
    """The subcommands and their options."""
    pk = sub.add_parser("package", help="render, build and install a manifest into dist/<package>")
    pk.add_argument("manifest")
    pk.add_argument("-o", "--out", help="install tree (default: dist/<package name>)")
    pk.add_argument("--target", default=None, help=TARGET_HELP)
    pk.add_argument("--backend", default=None, help=BACKEND_HELP)
    pk.add_argument("--jobs", type=_positive_int, default=None, help="parallel compile jobs (>= 1)")
    r = sub.add_parser("render", help="write the standalone CMake project only")
    r.add_argument("manifest")
    r.add_argument("-o", "--out", required=True, help="project folder to write")
    r.add_argument("--backend", default=None, help=BACKEND_HELP)
    r.add_argument("--target", default=None, help=TARGET_HELP)
    w = sub.add_parser("wheel", help="build a wheel of the compiled kernels (scikit-build-core)")
    w.add_argument("manifest")
    w.add_argument("-o", "--out", default=None, help="folder for the wheel (default: dist)")
    w.add_argument("--target", default=None, help="host (default) or a Linux target such as aarch64-linux-gnu")
    w.add_argument("--backend", default=None, help=BACKEND_HELP)
    w.add_argument("--project", default=None, metavar="DIR",
                   help="only write the wheel's scikit-build-core project into DIR (for pip wheel or cibuildwheel)")
    ca = sub.add_parser("cache", help="show or empty the build cache")
    ca.add_argument("action", choices=("info", "clean"),
                    help="info: where it is and what it holds; clean: empty it (or what --older-than and "
                    "--max-size choose)")
    ca.add_argument("--older-than", type=_duration, default=None, metavar="DURATION",
                    help="clean: remove what was not used for DURATION (e.g. 7d, 12h, 30m, 45s)")
    ca.add_argument("--max-size", type=_byte_size, default=None, metavar="SIZE",
                    help="clean: remove the least recently used entries until the cache holds at most SIZE "
                    "(e.g. 2G, 500M; 1K = 1024 bytes)")
    ca.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    c = sub.add_parser("check", help="parse, type-check and transform without compiling C++")
    c.add_argument("manifest")
    c.add_argument("--json", action="store_true",
                   help="print one JSON object: the package and a list of its exports (C signature, arguments, "
                   "workspace)")
    from .transforms.pipeline import PASS_NAMES
    i = sub.add_parser("ir", help="print the IR of every export (after the pass pipeline)")
    i.add_argument("manifest")
    i.add_argument("--after", default=None, choices=PASS_NAMES, metavar="PASS",
                   help=f"stop after this pass: {', '.join(PASS_NAMES)} (default: all)")
    i.add_argument("--before-passes", action="store_true", help="print the IR straight from the transformations")
    i.add_argument("--backend", default=None, help=BACKEND_HELP)
    i.add_argument("--export", action="append", default=None, metavar="NAME",
                   help="only this export (repeatable; default: every export)")
    i.add_argument("--dot", action="store_true",
                   help="print Graphviz text instead: fusion groups as clusters, the memory plan as labels")
    i.add_argument("--svg", default=None, metavar="FILE", help="draw the picture into FILE (needs Graphviz's dot)")
    i.add_argument("--html", default=None, metavar="FILE",
                   help="write one self-contained page: the picture (when dot is installed), fusion groups, "
                   "buffers and the IR text")
    i.add_argument("-o", "--out", default=None, metavar="FILE",
                   help="with --dot: write the text to FILE, or draw it when FILE ends in .svg, or a page (.html)")
    o = sub.add_parser("onnx-report", help="run the ONNX backend node tests through ksbuild, per op type")
    o.add_argument("--filter", default=None, metavar="OP", help="only the cases of this op type")
    o.add_argument("-o", "--out", default=None, help="write the markdown report here (default: print it)")
    o.add_argument("--interpreted", action="store_true", help="run the reference interpreter instead of C++")
    o.add_argument("--backend", default="plain", help=BACKEND_HELP.replace("the manifest's", "plain"))


def _printer(a):
    """How a command reports progress and status: not at all with -q, with the elapsed time with -v."""
    if a.quiet:
        return lambda msg: None
    if not a.verbose:
        return lambda msg: print(msg, flush=True)
    start = time.monotonic()
    return lambda msg: print(f"[{time.monotonic() - start:6.1f} s] {msg}", flush=True)


def _package(a) -> None:
    from .manifest import load_manifest
    from .packaging.package import package

    m = load_manifest(a.manifest, a.backend, a.target)
    package(a.manifest, a.out, target=a.target or m.build.target, jobs=a.jobs, progress=a.say, backend=a.backend)


def _render(a) -> None:
    from .packaging.package import render

    out = Path(a.out).resolve()
    render(a.manifest, out, a.say, a.backend, a.target)
    a.say(f"ksbuild: wrote the CMake project to {out}")


def _wheel(a) -> None:
    from .packaging.wheel import build_wheel, render_wheel_project

    if a.project:
        out = Path(a.project).resolve()
        render_wheel_project(a.manifest, out, target=a.target, backend=a.backend, progress=a.say)
        a.say(f"ksbuild: wrote the wheel project to {out} (build it with: pip wheel {out} --no-deps)")
        return
    build_wheel(a.manifest, a.out, target=a.target, backend=a.backend, progress=a.say)


def _cache(a) -> None:
    from .packaging import cache

    if a.action == "info":
        if a.older_than is not None or a.max_size is not None:
            print("ksbuild cache: error: --older-than and --max-size go with clean, not info", file=sys.stderr)
            raise SystemExit(EXIT_USAGE)
        print(json.dumps(cache.info_json(), indent=2) if a.json else cache.info_text())
        return
    done = cache.clean(a.older_than, a.max_size)
    if a.json:
        print(json.dumps(_cleaned_json(cache, done, a.max_size)))
        return
    for line in _cleaned_lines(cache, done, a.max_size):
        a.say(line)


def _cleaned_lines(cache, done, max_size: int | None) -> list[str]:
    """What `ksbuild cache clean` says: what it removed, what it left because another process holds it."""
    kinds = {k: sum(i.kind == k for i in done.removed) for k in ("build", "kernels", "python", "log")}
    lines = [f"ksbuild: removed {kinds['build']} build(s), {kinds['kernels']} kernel object folder(s), "
             f"{kinds['python']} loaded tree(s) and {kinds['log']} log(s) from {cache.cache_root()}, "
             f"{done.freed / 2**20:.1f} MiB; it holds {done.size_after / 2**20:.1f} MiB"]
    lines += [f"ksbuild: removed {p}, left by a build that was stopped" for p in done.leftovers]
    lines += [f"ksbuild: left {i.name} ({_what(i)}): another process holds its lock (a build or install in "
              "progress)" for i in done.busy]
    if max_size is not None and done.size_after > max_size:
        lines.append(f"ksbuild: the cache still holds more than --max-size ({done.size_after} > {max_size} bytes):"
                     " what is left is in use")
    return lines


def _what(item) -> str:
    """A cache entry in a few words: package and target of a build, else its kind."""
    if item.kind == "build" and item.info:
        return f"{item.info.get('package', '?')} for {item.info.get('target', '?')}"
    return {"build": "a build", "kernels": "kernel objects", "python": "a loaded tree", "log": "a log"}[item.kind]


def _cleaned_json(cache, done, max_size: int | None) -> dict:
    """`ksbuild cache clean --json`: counts, bytes, and every removed, busy and leftover entry."""
    def item(i) -> dict:
        return {"kind": i.kind, "name": i.name, "path": str(i.path), "size_bytes": i.size}

    return {"cache": str(cache.cache_root()), "removed": sum(i.kind == "build" for i in done.removed),
            "freed_bytes": done.freed, "busy": [i.name for i in done.busy],
            "removed_entries": [item(i) for i in done.removed], "busy_entries": [item(i) for i in done.busy],
            "leftovers": [str(p) for p in done.leftovers], "size_bytes_after": done.size_after,
            "max_size_bytes": max_size}


def _check(a) -> None:
    from .exports import build_exports
    from .manifest import load_manifest
    from .packaging.package import resolve_target

    m = load_manifest(a.manifest)
    t = resolve_target(m, None)  # (the target and what it allows: backend, threads)
    exports = build_exports(m)
    if a.json:
        print(json.dumps(_check_json(m, t, exports), indent=2))
        return
    described = _check_json(m, t, exports)["exports"] if a.verbose else [{}] * len(exports)
    for e, d in zip(exports, described):
        ins = ", ".join(str(t) for t in e.func.in_types)
        outs = ", ".join(str(t) for t in e.func.out_types)
        a.show(f"{m.name}_{e.name}: ({ins}) -> ({outs})    = {e.spec.text}")
        if d:
            a.show(f"    {d['c_signature']};" + (f"  (workspace: {d['symbol']}_workspace_size bytes)"
                                                       if d["workspace"] else ""))
    a.say(f"ksbuild: {m.path.name} is fine ({len(m.exports)} exports)")


def _check_json(m, t, exports) -> dict:
    """`ksbuild check --json`: the package and one object per export, as share/P/P.json describes it plus its C
    signature and the C expression of its workspace size in bytes (the dims are its variables)."""
    from .packaging.render import describe, views

    vs = views(m, exports)
    records = describe(m, vs, exports)["exports"]
    out = {"package": m.name, "version": m.version, "manifest": str(m.path), "target": t.name,
           "backend": m.build.backend, "exports": []}
    for v in vs:
        signature = {"name": v.name, "c_signature": f"{v.ret} {v.c_name}({v.params})",
                     "workspace_size": v.workspace if v.kind == "tensor" else None}
        out["exports"].append(signature | records[v.name])
    return out


def _ir(a) -> None:
    from .exports import build_exports
    from .ir.printer import print_func
    from .manifest import load_manifest

    after = "transforms" if a.before_passes else a.after
    m = load_manifest(a.manifest, a.backend)
    exports = _selected(m, build_exports(m, after), a.export)
    if a.dot or a.svg or a.html or a.out:
        _ir_picture(a, m, exports)
        return
    for e in exports:
        print(f"// {e.name} = {e.spec.text}")
        print(print_func(e.func, elide_over=64))  # large constants (ONNX weights) by digest only


def _selected(m, exports: list, names: list[str] | None) -> list:
    """The exports `--export` names (all without it); an error names an export the manifest lacks."""
    missing = sorted(set(names or ()) - {e.name for e in exports})
    if missing:
        raise KsbuildError(f"no export named {', '.join(missing)} in {m.path.name}",
                           hint=f"its exports: {', '.join(m.exports)}")
    return [e for e in exports if names is None or e.name in names]


def _ir_picture(a, m, exports) -> None:
    """`ksbuild ir --dot / --svg / --html / -o`: the IR drawn (ir/dot.py), printed or written."""
    from .codegen.data import DataSection
    from .codegen.epilogue import EpilogueForms
    from .ir.dot import Drawn, run_dot, to_dot, to_html
    from .packaging.render import views

    planned = a.after in (None, "plan_memory") and not a.before_passes  # (the codegen needs the memory plan)
    vs = views(m, exports, DataSection(m.name), EpilogueForms()) if planned else []
    sizes = {v.name: v.workspace for v in vs if v.kind == "tensor"}
    drawn = [Drawn(e.name, e.spec.text, e.func, sizes.get(e.name)) for e in exports]
    text = to_dot(drawn)
    out = Path(a.out) if a.out else None
    svg_file = a.svg or (out if out is not None and out.suffix == ".svg" else None)
    html_file = a.html or (out if out is not None and out.suffix in (".html", ".htm") else None)
    if svg_file is None and html_file is None:
        if out is None:
            print(text, end="")
            return
        out.write_text(text)
        a.say(f"ksbuild: wrote {out}")
        return
    if svg_file is not None:
        Path(svg_file).write_text(run_dot(text))
        a.say(f"ksbuild: drew {svg_file}")
    if html_file is not None:
        svg = run_dot(text) if shutil.which("dot") else None
        Path(html_file).write_text(to_html(drawn, svg))
        a.say(f"ksbuild: wrote {html_file}" + ("" if svg else " (no picture: Graphviz's dot is not installed)"))


def _onnx_report(a) -> None:
    from .tools.onnx_report import main

    text = main(a.filter, a.out, "interpreted" if a.interpreted else "compiled", a.backend, a.say)
    if not a.out:
        print(text)


def _blocking_file(path) -> str | None:
    """'<p> is a file, not a directory' for the first regular file among path and its parents, if any."""
    if path is None:
        return None
    p = Path(os.fsdecode(path))
    hit = next((q for q in reversed((p, *p.parents)) if q.exists() and not q.is_dir()), None)
    return f"{hit} is a file, not a directory" if hit is not None else None


OS_ERROR_HINTS = {
    errno.EACCES: "check the permissions of that path",
    errno.EPERM: "check the permissions of that path",
    errno.EROFS: "pick a writable place (-o, or $KSBUILD_CACHE for the build cache)",
    errno.ENOSPC: "free some space; `ksbuild cache clean` empties the build cache",
    errno.EDQUOT: "free some space; `ksbuild cache clean` empties the build cache",
}
WRITE_ERRORS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT)


def os_error_line(e: OSError, written: list[str] = ()) -> str:
    """One line for an OSError: which path, what failed and what to do; `written` names the places the command
    writes to, shown when the error does not say which path it was."""
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
        src, dst, why = e.args[0][0]  # copytree collects (source, destination, reason) triples
        return f"error: cannot copy {src} to {dst}: {why}"
    if isinstance(e, (FileExistsError, NotADirectoryError)) and _blocking_file(e.filename):  # -o under a file
        return f"error: cannot create {e.filename}: {_blocking_file(e.filename)}"
    if e.strerror is None:  # raised with a message of its own
        return f"error: {e}"
    what = e.strerror[:1].lower() + e.strerror[1:]
    if e.filename is None:
        head = f"error: {what}" + (f" while writing to {' or '.join(written)}" if written else "")
    elif e.filename2 is not None:
        head = f"error: cannot copy {e.filename} to {e.filename2}: {what}"
    elif e.errno in WRITE_ERRORS:
        head = f"error: cannot write {e.filename}: {what}"
    else:
        head = f"error: {e.filename}: {what}"
    hint = OS_ERROR_HINTS.get(e.errno)
    return f"{head}; {hint}" if hint else head


def _written_places(a) -> list[str]:
    """The folders a command writes to: its -o and, for the commands that build, the build cache."""
    places = [str(Path(a.out).resolve())] if getattr(a, "out", None) else []
    if a.command in ("package", "wheel"):
        from .packaging.cache import cache_root
        places.append(f"the build cache {cache_root()}")
    return places


COMMANDS = {"package": _package, "render": _render, "wheel": _wheel, "cache": _cache, "check": _check, "ir": _ir,
            "onnx-report": _onnx_report}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run one command and return the exit status (see the module docstring); usage errors exit 2
    through argparse's SystemExit."""
    a = _parser().parse_args(argv)
    a.say, a.show = _printer(a), (lambda msg: None) if a.quiet else print  # progress and status; listings
    previous = _stop_on_sigterm()
    try:
        with _warnings_on_stderr(quiet=a.quiet):
            COMMANDS[a.command](a)
    except KsbuildError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:  # Ctrl-C: outputs are written whole or not at all, so there is nothing to undo
        print("ksbuild: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `ksbuild ir ... | head`: the reader went away, which is fine
        sys.stdout = open(os.devnull, "w")
        return EXIT_OK
    except OSError as e:  # a missing file, a denied permission, a read-only or full disk: the user's to fix
        print(os_error_line(e, _written_places(a)), file=sys.stderr)
        return EXIT_USER
    except Exception as e:  # noqa: BLE001  a bug in ksbuild: say so; the traceback only when asked for
        return _internal_error(e, a.verbose or a.debug or bool(os.environ.get("KSBUILD_DEBUG")))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return EXIT_OK


def _internal_error(e: Exception, show_traceback: bool) -> int:
    """Report an unexpected exception inside ksbuild (a bug, not the user's input): exit status 70."""
    if show_traceback:
        traceback.print_exc()
    print(f"internal error in ksbuild: {type(e).__name__}: {e}", file=sys.stderr)
    if not show_traceback:
        print("  rerun with -v (or KSBUILD_DEBUG=1) for the traceback, and please report it", file=sys.stderr)
    return EXIT_INTERNAL


@contextmanager
def _warnings_on_stderr(quiet: bool = False):
    """ksbuild's warnings printed like its errors, each once (none with -q); other Python warnings as usual."""
    import warnings
    seen: set[str] = set()
    show = warnings.showwarning

    def print_warning(message, category, filename, lineno, file=None, line=None):
        if not isinstance(message, KsbuildWarning):
            return show(message, category, filename, lineno, file, line)
        if str(message) not in seen and not quiet:
            seen.add(str(message))
            print(str(message), file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("always", KsbuildWarning)
        warnings.showwarning = print_warning
        yield


def _stop_on_sigterm():
    """SIGTERM stops ksbuild as Ctrl-C does (temporary folders removed, CMake's compilers stopped); the handler
    it replaces, or None off the main thread (where signals cannot be handled)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


if __name__ == "__main__":
    sys.exit(main())
