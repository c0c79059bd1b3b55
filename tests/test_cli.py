"""The command line run as users run it (a subprocess): errors from the file system are one located line."""
from __future__ import annotations

import errno
import json
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


# ---- exit statuses, -q and -v, --json ------------------------------------------------------------------------------

BUG = ("import ksbuild.exports as x\n"
       "def broken(m, after=None):\n    raise ZeroDivisionError('a bug planted by the test')\n"
       "x.build_exports = broken")
WARNING = ("import ksbuild.exports as x\nfrom ksbuild.errors import warn\nbuild = x.build_exports\n"
           "def warned(m, after=None):\n    warn('a warning planted by the test')\n    return build(m, after)\n"
           "x.build_exports = warned")


@pytest.fixture(scope="module")
def relu3_tree(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`ksbuild -q package` of relu3 into its own cache: (the install tree, the run)."""
    base = tmp_path_factory.mktemp("cli")
    env = dict(os.environ, KSBUILD_CACHE=str(base / "cache"))
    return base / "dist", ksbuild("-q", "package", RELU3, "-o", base / "dist", env=env)


def test_ok_is_0_and_check_lists_the_exports():
    proc = ksbuild("check", RELU3)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "activations_vrelu3: (f32[n]) -> (f32[n])    = vmap(relu3)" in proc.stdout
    assert proc.stdout.rstrip().endswith("manifest.toml is fine (7 exports)")


def test_an_error_in_the_manifest_is_1(tmp_path):
    (tmp_path / "m.toml").write_text(RELU3.read_text().replace("[package]", "[package]\ncolour = 'red'"))
    (tmp_path / "relu3.py").write_text((RELU3.parent / "relu3.py").read_text())
    proc = ksbuild("check", tmp_path / "m.toml")
    assert proc.returncode == 1 and "m.toml" in proc.stderr and "colour" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["frobnicate"], ["package"], ["-q", "-v", "check", "m.toml"],
                                  ["package", "m.toml", "--jobs", "0"], ["cache", "info", "--nonsense"]])
def test_a_usage_error_is_2(args):
    proc = ksbuild(*args)
    assert proc.returncode == 2 and "usage: ksbuild" in proc.stderr, (proc.returncode, proc.stderr)


def test_an_internal_error_is_70_and_says_how_to_see_the_traceback():
    proc = ksbuild("check", RELU3, prelude=BUG)
    assert proc.returncode == 70, (proc.returncode, proc.stderr)
    assert "internal error in ksbuild: ZeroDivisionError: a bug planted by the test" in proc.stderr
    assert "rerun with -v (or KSBUILD_DEBUG=1)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("how", [["-v", "check"], ["check", "-v"], ["--debug", "check"], ["KSBUILD_DEBUG"]])
def test_verbose_shows_the_traceback_of_an_internal_error(how):
    env = dict(os.environ, KSBUILD_DEBUG="1") if how == ["KSBUILD_DEBUG"] else None
    args = ["check"] if env else how
    proc = ksbuild(*args, RELU3, env=env, prelude=BUG)
    assert proc.returncode == 70, (proc.returncode, proc.stderr)
    assert "Traceback" in proc.stderr and "in broken" in proc.stderr, proc.stderr
    assert "internal error in ksbuild: ZeroDivisionError" in proc.stderr


def test_quiet_prints_nothing_on_success(relu3_tree):
    dist, proc = relu3_tree
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stdout + proc.stderr
    assert (dist / "lib/libactivations.a").is_file()
    proc = ksbuild("check", "-q", RELU3)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stdout + proc.stderr


def test_quiet_still_prints_errors_and_drops_warnings(tmp_path):
    proc = ksbuild("-q", "check", tmp_path / "nowhere.toml")
    assert proc.returncode == 1 and "nowhere.toml" in proc.stderr and proc.stdout == ""
    loud, quiet = ksbuild("check", RELU3, prelude=WARNING), ksbuild("-q", "check", RELU3, prelude=WARNING)
    assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "a warning planted by the test" in loud.stderr and quiet.stderr == "", quiet.stderr


def test_verbose_times_the_progress_and_shows_c_signatures(tmp_path):
    proc = ksbuild("-v", "render", RELU3, "-o", tmp_path / "proj")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(line.startswith("[") and " s] ksbuild: " in line for line in lines), proc.stdout
    proc = ksbuild("check", "-v", RELU3)
    assert "    int activations_vrelu3(int64_t n, const float* x, float* out, void* workspace);" in proc.stdout


def test_check_json_describes_every_export_as_the_installed_header_declares_it(relu3_tree):
    dist, _ = relu3_tree
    proc = ksbuild("check", "--json", RELU3)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["package"], info["target"], info["backend"]) == ("activations", "host", "plain")
    assert [e["name"] for e in info["exports"]] == ["relu3", "vrelu3", "relu3_vjp", "vrelu3_vjp", "relu3_jvp",
                                                    "relu3_grad", "relu3_d2"]
    header = (dist / "include/activations.h").read_text()
    installed = json.loads((dist / "share/activations/activations.json").read_text())["exports"]
    for e in info["exports"]:
        assert f"{e['c_signature']};" in header.splitlines(), e["c_signature"]
        extra = ("name", "c_signature", "workspace_size")
        measured = ("stack_bytes",)  # (written into P.json by the build, which check does not run)
        assert {k: v for k, v in e.items() if k not in extra} == \
            {k: v for k, v in installed[e["name"]].items() if k not in measured}
    vrelu3 = info["exports"][1]
    assert vrelu3["workspace_size"] == "0" and vrelu3["workspace"] is False and vrelu3["dims"] == ["n"]
    assert info["exports"][0]["workspace_size"] is None  # scalar exports have no workspace function


def test_cache_info_json_lists_the_builds(relu3_tree, tmp_path):
    dist, _ = relu3_tree
    env = dict(os.environ, KSBUILD_CACHE=str(dist.parent / "cache"))
    proc = ksbuild("cache", "info", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["cache"] == str(dist.parent / "cache")
    assert [(b["package"], b["target"], b["finished"]) for b in info["builds"]] == [("activations", "host", True)]
    assert info["builds"][0]["size_bytes"] > 0 and Path(info["builds"][0]["path"]).is_dir()
    empty = ksbuild("cache", "info", "--json",
                    env=dict(os.environ, KSBUILD_CACHE=str(tmp_path / "none"), KSBUILD_CACHE_MAX_SIZE="1G"))
    assert json.loads(empty.stdout) == {"cache": str(tmp_path / "none"), "max_size_bytes": 2**30, "builds": [],
                                        "kernels": [], "python": []}


def test_the_heartbeat_names_the_source_that_compiles_not_the_weights():
    """CMake builds the weights' .S (one .incbin, instant) beside the network's .cpp: the "still compiling" lines
    name the .cpp, which takes the time (a mobilenet_v3_large build said "still compiling cmp_data.S (20 s)")."""
    import subprocess
    import sys

    from ksbuild.compile import cmake
    script = ("import sys, time; print('[ 50%] Building CXX object CMakeFiles/net.dir/src/net.cpp.o'); "
              "print('[ 60%] Building ASM object CMakeFiles/net.dir/src/net_data.S.o'); sys.stdout.flush(); "
              "time.sleep(2.5)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    said = []
    heartbeat = cmake.HEARTBEAT
    cmake.HEARTBEAT = 1.0
    try:
        cmake._communicate(proc, said.append)
    finally:
        cmake.HEARTBEAT = heartbeat
    assert any(s.startswith("  compiling net_data.S (the weights)") for s in said), said
    still = [s for s in said if s.startswith("  still compiling")]
    assert still and all(s.startswith("  still compiling net.cpp") for s in still), said
