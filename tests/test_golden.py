"""Golden snapshots of what ksbuild generates for every example: the C++ source, header and
CMakeLists of `ksbuild render`, and the planned IR of `ksbuild ir`.

A change to any of them must be a reviewed change: rerun with KSBUILD_UPDATE_GOLDEN=1 and say
in the commit message why the output changed. Rendering twice must give identical bytes.
"""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from conftest import ROOT

from ksbuild.cli import main as cli_main
from ksbuild.manifest import load_manifest

EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/manifest.toml"))
GOLDEN = ROOT / "tests" / "golden"


def _render(manifest: Path, out: Path) -> dict[str, bytes]:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["render", str(manifest), "-o", str(out)]) == 0
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def _ir(manifest: Path) -> bytes:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(["ir", str(manifest)]) == 0
    return buf.getvalue().encode()


@pytest.mark.parametrize("example", EXAMPLES)
def test_generated_code_matches_the_snapshot(example, tmp_path):
    manifest = ROOT / "examples" / example / "manifest.toml"
    name = load_manifest(manifest).name
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
        assert data.decode() == path.read_text(), f"{path.relative_to(ROOT)} changed; review and rerun with " \
                                                  "KSBUILD_UPDATE_GOLDEN=1"
