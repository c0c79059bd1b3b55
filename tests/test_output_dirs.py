"""ksbuild replaces its output directory as a whole (the install tree of `package -o OUT`, the project of
`render -o DIR`), so it must never take a directory holding files it did not write: a red-team pass found
`package -o <the example's own folder>` deleting the manifest and sources, and two packages into one prefix
deleting the first. Such outputs are refused before anything is compiled."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from ksbuild.errors import KsbuildError
from ksbuild.packaging.package import check_replaceable


def test_only_new_empty_or_own_outputs_are_replaced(tmp_path):
    check_replaceable(tmp_path / "new", "pkg", "tree")
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", "pkg", "tree")
    own = tmp_path / "own"
    (own / "share" / "pkg").mkdir(parents=True)
    (own / "share" / "pkg" / "ksbuild-hash").write_text("x")
    check_replaceable(own, "pkg", "tree")
    with pytest.raises(KsbuildError, match="not an earlier tree of package 'other'"):
        check_replaceable(own, "other", "tree")  # another package's tree in the same prefix
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(KsbuildError, match="it holds notes.txt"):
        check_replaceable(tmp_path / "user", "pkg", "project")
    (tmp_path / "f.py").write_text("")
    with pytest.raises(KsbuildError, match="is a file, not a directory"):
        check_replaceable(tmp_path / "f.py" / "out", "pkg", "tree")
    assert (tmp_path / "user" / "notes.txt").read_text() == "mine"


def test_the_cli_refuses_the_manifests_own_folder_and_keeps_it(tmp_path):
    folder = tmp_path / "relu3"
    shutil.copytree(ROOT / "examples" / "relu3", folder, ignore=shutil.ignore_patterns("build*", "dist"))
    before = sorted(p.name for p in folder.iterdir())
    for out in (".", str(folder)):
        for command in ("package", "render"):
            r = subprocess.run([sys.executable, "-m", "ksbuild", command, "manifest.toml", "-o", out], cwd=folder,
                               capture_output=True, text=True)
            assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
            assert "error:" in r.stderr, r.stderr
    assert sorted(p.name for p in folder.iterdir()) == before
    r = subprocess.run([sys.executable, "-m", "ksbuild", "render", "manifest.toml", "-o", "proj"], cwd=folder,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "ksbuild", "render", "manifest.toml", "-o", "proj"], cwd=folder,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # its own earlier project is replaced
