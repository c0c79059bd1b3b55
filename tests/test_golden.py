"""Golden snapshots of what ksbuild generates for every example: the C++ source, header and
CMakeLists of `ksbuild render`, and the planned IR of `ksbuild ir`.

The snapshots are rendered for one named target whatever the host (GOLDEN_TARGET: an x86-64 Linux
machine whose compiler knows the x86-64 levels), so they hold on any machine. A change to any of them
must be a reviewed change: the failure names the file, the line and the export that differ; when the
change is intended, rerun with KSBUILD_UPDATE_GOLDEN=1 and say in the commit message why the output
changed. Rendering twice must give identical bytes.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT

import ksbuild.compile.targets as targets
from ksbuild.cli import main as cli_main
from ksbuild.exports import build_exports
from ksbuild.manifest import load_manifest
from ksbuild.packaging.render import render_project

EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/manifest.toml"))
GOLDEN = ROOT / "tests" / "golden"
GOLDEN_TARGET = replace(targets.TARGETS["host"], system="Linux", processor="x86_64")
"""The target of every snapshot: the host record of an x86-64 Linux machine, whatever this machine is. Its
compiler is taken to know -march=x86-64-v4 (see `pinned`), so each package with tensor exports is compiled
once per x86-64 level with a dispatcher: the default build on most machines. (Which levels this host's own
compiler takes is tested in tests/test_dispatch.py.)"""


@pytest.fixture
def pinned(monkeypatch):
    """Rendering for GOLDEN_TARGET asks no question of this machine: no compiler is run to probe -march."""
    monkeypatch.setattr(targets, "host_cxx", lambda: ["c++"])
    monkeypatch.setattr(targets, "march_rejected", lambda command, flags, cpu: None)


def _render(manifest: Path, out: Path) -> dict[str, bytes]:
    m = load_manifest(manifest)
    render_project(m, build_exports(m), out, GOLDEN_TARGET)
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _ir(manifest: Path) -> bytes:
    """The planned IR `ksbuild ir` prints, with the paths of the repository's files relative to it (an external C
    function's equation names its kernel file and C sources by their absolute paths)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["ir", str(manifest)]) == 0
    return buf.getvalue().replace(f"'{ROOT}/", "'").encode()


def first_difference(want: str, got: str, package: str, exports: list[str], name: str) -> str:
    """Where `got` first differs from the snapshot `want`: the line, the export it belongs to, both versions
    of the line and a short unified diff."""
    old, new = want.splitlines(), got.splitlines()
    n = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    diff = list(difflib.unified_diff(old, new, f"snapshot {name}", f"generated {name}", n=2, lineterm=""))
    shown = "\n".join(diff[:30]) + ("\n..." if len(diff) > 30 else "")
    export = export_at(new if n < len(new) else old, n, package, exports)
    return (f"{name} differs from its snapshot at line {n + 1}" + (f" (in export {export})" if export else "") +
            f":\n  snapshot:  {old[n] if n < len(old) else '(end of file)'}\n"
            f"  generated: {new[n] if n < len(new) else '(end of file)'}\n{shown}\n"
            "If this change is intended, review the whole diff, rerun with KSBUILD_UPDATE_GOLDEN=1 and say in the "
            "commit message why the output changed.")


def export_at(lines: list[str], n: int, package: str, exports: list[str]) -> str | None:
    """The export whose code or IR holds line n: the nearest line at or above it that names one (`// E = ...`
    in ir.txt, the C symbol P_E( in the sources)."""
    names = sorted(exports, key=len, reverse=True)
    marks = [re.compile(rf"^// ({'|'.join(map(re.escape, names))}) = "),
             re.compile(rf"\b{re.escape(package)}_({'|'.join(map(re.escape, names))})(?:_workspace_size)?\(")]
    for line in reversed(lines[:n + 1]):
        for mark in marks:
            if m := mark.search(line):
                return m[1]
    return None


@pytest.mark.parametrize("example", EXAMPLES)
def test_generated_code_matches_the_snapshot(example, tmp_path, pinned):
    manifest = ROOT / "examples" / example / "manifest.toml"
    m = load_manifest(manifest)
    name = m.name
    first, second = _render(manifest, tmp_path / "a"), _render(manifest, tmp_path / "b")
    assert first == second, "rendering is not deterministic"
    files = {f"src/{name}.cpp": first[f"src/{name}.cpp"], f"include/{name}.h": first[f"include/{name}.h"],
             "CMakeLists.txt": first["CMakeLists.txt"], "ir.txt": _ir(manifest)}
    files |= {rel: data for rel, data in first.items() if rel.endswith("_dispatch.cpp")}  # (x86-64: ks/cpu.h)
    folder = GOLDEN / example
    if os.environ.get("KSBUILD_UPDATE_GOLDEN"):
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
    for rel, data in files.items():
        path = folder / rel
        assert path.is_file(), f"no snapshot {path.relative_to(ROOT)}; review the output and rerun with " \
                               "KSBUILD_UPDATE_GOLDEN=1"
        want, got = path.read_text(), data.decode()
        assert got == want, first_difference(want, got, name, list(m.exports), str(path.relative_to(ROOT)))
