"""The command line run as users run it (a subprocess): errors from the file system are one located line."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from ksbuild.cli import os_error_line

RELU3 = ROOT / "examples/relu3/manifest.toml"


def ksbuild(*args, cwd: Path | None = None, env: dict | None = None, prelude: str = "") -> subprocess.CompletedProcess:
    """`ksbuild ARGS` in a fresh Python; `prelude` is Python code run first (to break something on purpose)."""
    code = f"import sys\n{prelude}\nfrom ksbuild.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def assert_one_error_line(proc: subprocess.CompletedProcess, *parts: str) -> str:
    """Exit status 1 and one `error:` line on stderr holding every part; no traceback, not 'internal error'."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "error: " in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    for part in parts:
        assert part in lines[0], (part, proc.stderr)
    return lines[0]


def test_a_missing_installation_folder_names_it(tmp_path):
    """A FileNotFoundError raised with a message (was `error: None: None`)."""
    broken = f"import ksbuild.resources as r; r._ROOT = r._DATA = __import__('pathlib').Path({str(tmp_path)!r})"
    line = assert_one_error_line(ksbuild("render", RELU3, "-o", tmp_path / "proj", prelude=broken),
                                 "ksbuild's folder 'templates' is missing", str(tmp_path))
    assert "None" not in line


def test_a_missing_input_file_names_it(tmp_path):
    assert_one_error_line(ksbuild("check", tmp_path / "nowhere.toml"), str(tmp_path / "nowhere.toml"))


def _denied_folder(tmp_path: Path) -> Path:
    """A folder this user cannot create anything in: /sys for root (permissions do not stop root), else one
    made read-only with chmod."""
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    try:
        (Path("/sys") / "ksbuild-probe").mkdir()
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            return Path("/sys")
    pytest.skip("found no folder where creating a file is denied to this user")


@pytest.mark.parametrize("command", ["render", "package"])
def test_permission_denied_names_the_path(tmp_path, command):
    folder = _denied_folder(tmp_path)
    assert_one_error_line(ksbuild(command, RELU3, "-o", folder / "out"), str(folder), "check the permissions")


def _mount_and_run(mount_options: str, folder: Path, args: list, env: dict | None = None):
    """Run ksbuild ARGS with a small tmpfs mounted on `folder` in a private mount namespace (gone afterwards);
    skips where this user may not do that."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a scratch file system")
    folder.mkdir(exist_ok=True)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {folder}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a scratch tmpfs here (needs root): {probe.stderr.strip()}")
    call = " ".join(f"'{a}'" for a in [sys.executable, "-m", "ksbuild", *map(str, args)])
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o {mount_options} tmpfs {folder} && "
                           f"exec {call}"], capture_output=True, text=True, env=env, timeout=300)


def test_a_read_only_file_system_names_the_path(tmp_path):
    proc = _mount_and_run("ro", tmp_path / "ro", ["render", RELU3, "-o", tmp_path / "ro" / "out"])
    assert_one_error_line(proc, f"cannot write {tmp_path / 'ro'}", "read-only file system", "writable place")


def test_a_full_disk_names_the_path(tmp_path):
    proc = _mount_and_run("size=64k", tmp_path / "full", ["render", RELU3, "-o", tmp_path / "full" / "out"])
    assert_one_error_line(proc, str(tmp_path / "full"), "no space left on device", "free some space")


def test_a_full_build_cache_names_it(tmp_path):
    env = dict(os.environ, KSBUILD_CACHE=str(tmp_path / "full" / "cache"))
    proc = _mount_and_run("size=64k", tmp_path / "full", ["package", RELU3, "-o", tmp_path / "out"], env=env)
    assert_one_error_line(proc, str(tmp_path / "full" / "cache"), "no space left on device", "ksbuild cache clean")
    assert not (tmp_path / "out").exists()


def test_os_error_lines():
    """The forms an OSError takes: with a path, two paths, none (a write to an open file), a copytree's list."""
    assert os_error_line(PermissionError(errno.EACCES, "Permission denied", "/x/y")) == \
        "error: /x/y: permission denied; check the permissions of that path"
    assert os_error_line(OSError(errno.ENOSPC, "No space left on device"), ["/out", "the build cache /c"]) == \
        ("error: no space left on device while writing to /out or the build cache /c; free some space; "
         "`ksbuild cache clean` empties the build cache")
    assert os_error_line(OSError(errno.EROFS, "Read-only file system", "/a", None, "/b")).startswith(
        "error: cannot copy /a to /b: read-only file system; pick a writable place")
    assert os_error_line(shutil.Error([("/a/f", "/b/f", "[Errno 28] No space left on device")])) == \
        "error: cannot copy /a/f to /b/f: [Errno 28] No space left on device"
    assert os_error_line(FileNotFoundError("the folder 'x' is missing")) == "error: the folder 'x' is missing"
