"""ksbuild itself installed from its wheel (not editable) and from its sdist: the templates, the prelude and the
dist templates come along, and the installed `ksbuild package` works in a fresh venv without torch, outside the
repository, for an app that links the result. About half a minute (pip fetches numpy, jinja2 and cmake)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

DATA_FOLDERS = ("templates", "prelude", "dist_templates")
# the fresh venv's commands see no PYTHONPATH: they must find ksbuild in the venv, not in a checkout
VENV_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(cmd: list, cwd: Path | None = None, env: dict | None = None, timeout: int = 600) -> str:
    """Run a command; its output, or a failed assertion that shows it."""
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _work_tree_files() -> list[str]:
    """The repository's files as they are now (tracked and new, not ignored): what a clean checkout holds."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the repository's .git to list the source files")
    out = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT)
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _data_files() -> set[str]:
    """The files of the data folders, relative to the repository."""
    return {str(p.relative_to(ROOT)) for name in DATA_FOLDERS for p in (ROOT / name).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory) -> Path:
    """A copy of the repository's source files (no .venv, no build folders, no ksbuild/_data)."""
    dest = tmp_path_factory.mktemp("src") / "ksbuild"
    for rel in _work_tree_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


def _pip_wheel(what: Path, out: Path) -> Path:
    """`pip wheel` of a source tree or an sdist, with build isolation (setuptools from the index, as for users)."""
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, what])
    return next(out.glob("ksbuild-*.whl"))


def test_the_sdist_carries_the_data_folders_and_builds_a_complete_wheel(source_tree, tmp_path):
    code = f"import setuptools.build_meta as b; print(b.build_sdist({str(tmp_path / 'sdist')!r}))"
    name = _run([sys.executable, "-c", code], cwd=source_tree).strip().splitlines()[-1]
    sdist = tmp_path / "sdist" / name
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    missing = sorted((_data_files() | {"LICENSE", "scripts/build_data.py"}) - members)
    assert not missing, f"the sdist lacks {missing}"
    wheel = _pip_wheel(sdist, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    missing = sorted(f for f in _data_files() if f"ksbuild/_data/{f}" not in names)
    assert not missing, f"the wheel built from the sdist lacks {missing}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata


@pytest.fixture(scope="module")
def fresh_venv(source_tree, tmp_path_factory) -> Path:
    """A plain venv (no torch) with ksbuild installed from the wheel `pip wheel` builds of the source tree."""
    base = tmp_path_factory.mktemp("venv")
    wheel = _pip_wheel(source_tree, base / "wheel")
    with zipfile.ZipFile(wheel) as z:
        missing = sorted(f for f in _data_files() if f"ksbuild/_data/{f}" not in z.namelist())
    assert not missing, f"the wheel lacks {missing}"
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv])
    _run([venv / "bin/python", "-m", "pip", "install", "--quiet", wheel], env=VENV_ENV)
    return venv


def test_the_installed_ksbuild_packages_a_manifest_outside_the_repository(fresh_venv, tmp_path):
    python = fresh_venv / "bin/python"
    where = _run([python, "-c", "import importlib.util as u, ksbuild.resources as r; "
                  "print(u.find_spec('torch') is not None); print(r.resource_dir('templates'))"], tmp_path, VENV_ENV)
    has_torch, templates = where.split()
    assert has_torch == "False"
    module = _run([python, "-c", "import ksbuild; print(ksbuild.__file__)"], tmp_path, VENV_ENV).strip()
    assert Path(templates) == Path(module).parent / "_data" / "templates"
    assert fresh_venv in Path(templates).parents
    example = tmp_path / "relu3"
    shutil.copytree(ROOT / "examples/relu3", example, ignore=shutil.ignore_patterns("build*", "dist", "__pycache__"))
    env = dict(VENV_ENV, KSBUILD_CACHE=str(tmp_path / "cache"))
    _run([fresh_venv / "bin/ksbuild", "package", "manifest.toml", "-o", tmp_path / "dist"], cwd=example, env=env)
    cmake = fresh_venv / "bin/cmake"  # the PyPI cmake the wheel depends on
    _run([cmake, "-S", example / "app", "-B", tmp_path / "app", f"-DCMAKE_PREFIX_PATH={tmp_path / 'dist'}"])
    _run([cmake, "--build", tmp_path / "app"])
    assert "ok: batched kernels match" in _run([tmp_path / "app/relu3_app"])
