"""Cache entries: checked by their files' sha256 before reuse, described by `cache info`, removed by
`cache clean` (all, --older-than, --max-size; never what another process holds), no leftovers after a kill."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_cache

from ksbuild.cli import main as cli_main
from ksbuild.packaging import cache

private_cache, relu3_copy, stable_key = test_cache.private_cache, test_cache.relu3_copy, test_cache.stable_key
DAY = 86400
# ksbuild run in a subprocess with the key of the tests' process (see `stable_key`)
STABLE_CLI = ("import sys; import ksbuild.packaging.package as p; p._hash_ksbuild = lambda h: None; "
              "from ksbuild.cli import main; sys.exit(main(sys.argv[1:]))")


def package(manifest: Path, out: Path, capsys) -> str:
    """`ksbuild package MANIFEST -o OUT` in this process; what it printed."""
    assert cli_main(["package", str(manifest), "-o", str(out)]) == 0
    return capsys.readouterr().out


def fake_entry(root: Path, kind: str, name: str, size: int, age: float) -> Path:
    """An entry of `size` bytes last used `age` seconds ago: a build (<key>/), kernel objects (kernels/<hash>/),
    a loaded tree (python/P/<key>/) or a log (logs/<file>)."""
    path = {"build": root / name, "kernels": root / "kernels" / name, "python": root / "python" / "p" / name,
            "log": root / "logs" / name}[kind]
    data = {"build": "install/lib/libp.a", "kernels": "kernels_x86_64_v3_products32.o",
            "python": "lib/libp.so"}.get(kind)
    target = path / data if data else path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\0" * size)
    if kind == "build":
        (path / "entry.json").write_text(json.dumps({"package": name, "target": "host", "backend": "plain"}))
    for p in (target, path):
        os.utime(p, (time.time() - age, time.time() - age))
    return path


# ---- an entry is checked before it is reused -------------------------------------------------------------------

def test_a_damaged_entry_is_rebuilt(relu3_copy, tmp_path, private_cache, stable_key, capsys):
    package(relu3_copy, tmp_path / "good", capsys)
    (entry,) = [b.path for b in cache.builds()]
    lib = entry / "install/lib/libactivations.a"
    lib.write_bytes(lib.read_bytes()[:1000])  # truncated
    said = package(relu3_copy, tmp_path / "again", capsys)
    lines = [line for line in said.splitlines() if "libactivations.a" in line]
    assert lines == [f"ksbuild: the cached build {entry} has a changed install/lib/libactivations.a (its sha256 is "
                     "not the one in files.sha256): building it again"], said
    assert "ksbuild: building activations" in said
    good = (tmp_path / "good/lib/libactivations.a").read_bytes()
    assert (tmp_path / "again/lib/libactivations.a").read_bytes() == good == lib.read_bytes()
    assert cache.damage(entry) is None
    assert "found a cached build" in package(relu3_copy, tmp_path / "third", capsys)


@pytest.mark.parametrize("harm, why", [
    (lambda e: (e / "install/lib/libp.a").write_bytes(b"\0" * 99), "has a changed install/lib/libp.a"),
    (lambda e: (e / "install/lib/libp.a").write_bytes(b"\1" * 100), "has a changed install/lib/libp.a"),
    (lambda e: (e / "install/lib/libp.a").unlink(), "lost install/lib/libp.a"),
    (lambda e: (e / "install/lib/extra.txt").write_text("x"), "does not list: install/lib/extra.txt"),
    (lambda e: (e / "files.sha256").unlink(), "has no files.sha256"),
    (lambda e: (e / "files.sha256").write_text("garbage\n"), "has an unreadable files.sha256"),
])
def test_damage_names_what_changed(tmp_path, harm, why):
    entry = fake_entry(tmp_path, "build", "k", 100, 0)
    cache.seal(entry)
    assert cache.damage(entry) is None
    digest = hashlib.sha256(bytes(100)).hexdigest()
    assert (entry / "files.sha256").read_text() == f"{digest}  install/lib/libp.a\n"  # (as sha256sum writes it)
    harm(entry)
    assert why in cache.damage(entry)


# ---- cache info ---------------------------------------------------------------------------------------------------

def test_info_names_package_manifest_target_backend_size_and_age(relu3_copy, tmp_path, private_cache, stable_key,
                                                                  capsys):
    package(relu3_copy, tmp_path / "out", capsys)
    (build,) = cache.builds()
    os.utime(build.path, (time.time() - 3 * DAY, time.time() - 3 * DAY))
    kernels = fake_entry(private_cache, "kernels", "abc123", 3 * 2**20, 2 * 3600)
    (kernels / "kernels_x86_64_convs32.o").write_bytes(b"\0" * 100)
    (kernels / "about.json").write_text(json.dumps({"target": "host"}))
    os.utime(kernels, (time.time() - 2 * 3600, time.time() - 2 * 3600))
    assert cli_main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    row = next(line for line in info.splitlines() if build.key in line).split()
    assert row[1:5] == ["activations", "0.1.0", "host", "plain"]
    assert row[9:11] == ["3", "d"] and row[-1] == str(relu3_copy.resolve())  # (built: now; used: 3 days ago)
    assert f"{build.size / 1024:.1f} KiB" in " ".join(row)
    kernel_row = next(line for line in info.splitlines() if "kernels/abc123" in line).split()
    assert kernel_row[1:] == ["host", "x86_64", "x86_64_v3", "(convs32,", "products32)", "3.0", "MiB", "2", "h"]
    assert cli_main(["cache", "info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (b,) = data["builds"]
    assert (b["package"], b["target"], b["backend"], b["manifest"]) == \
        ("activations", "host", "plain", str(relu3_copy.resolve()))
    assert b["size_bytes"] == build.size and 3 * DAY - 60 < b["age_seconds"] < 3 * DAY + 60 and b["finished"]
    (k,) = [k for k in data["kernels"] if k["name"] == "kernels/abc123"]  # (and relu3's precompiled prelude headers)
    assert k["levels"] == ["x86_64", "x86_64_v3"] and k["parts"] == ["convs32", "products32"]
    assert k["size_bytes"] == 3 * 2**20 + 100 + len('{"target": "host"}')


# ---- cache clean --------------------------------------------------------------------------------------------------

def fill(root: Path) -> dict[str, Path]:
    """Six entries of 100 KiB (a log: 1 KiB), used 1 hour to 20 days ago."""
    spec = {"b20d": ("build", 20 * DAY), "k10d": ("kernels", 10 * DAY), "p5d": ("python", 5 * DAY),
            "log3d": ("log", 3 * DAY), "b2d": ("build", 2 * DAY), "b1h": ("build", 3600)}
    return {name: fake_entry(root, kind, name, 1024 if kind == "log" else 100 * 1024, age)
            for name, (kind, age) in spec.items()}


def clean(*args: str, capsys) -> dict:
    assert cli_main(["cache", "clean", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_clean_older_than(private_cache, capsys):
    entries = fill(private_cache)
    done = clean("--older-than", "4d", capsys=capsys)
    assert sorted(e["name"] for e in done["removed_entries"]) == ["b20d", "kernels/k10d", "python/p/p5d"]
    assert done["removed"] == 1 and done["freed_bytes"] >= 300 * 1024
    assert sorted(n for n, p in entries.items() if p.exists()) == ["b1h", "b2d", "log3d"]
    assert not (private_cache / "python" / "p").exists()  # (its only tree went)
    clean("--older-than", "30m", capsys=capsys)
    assert not any(p.exists() for p in entries.values())


def test_clean_max_size_removes_the_least_recently_used(private_cache, capsys):
    entries = fill(private_cache)
    with cache.file_lock(cache.kernels_lock(entries["k10d"]), shared=True):  # a build uses these kernel objects
        done = clean("--max-size", "250K", capsys=capsys)
    assert [e["name"] for e in done["removed_entries"]] == ["b20d", "python/p/p5d", "logs/log3d", "b2d"]
    assert done["busy"] == ["kernels/k10d"] and done["size_bytes_after"] <= 250 * 1024
    assert sorted(n for n, p in entries.items() if p.exists()) == ["b1h", "k10d"]
    assert cli_main(["cache", "clean", "--max-size", "150K"]) == 0
    assert sorted(n for n, p in entries.items() if p.exists()) == ["b1h"]
    assert "removed 0 build(s), 1 kernel object folder(s)" in capsys.readouterr().out


def test_plain_clean_removes_everything_but_what_is_held(private_cache, capsys):
    entries = fill(private_cache)
    (private_cache / "dev" / "f-float32-1").mkdir(parents=True)
    with cache.file_lock(cache.key_lock("b1h"), wait=False):
        assert cli_main(["cache", "clean"]) == 0
    said = capsys.readouterr().out
    assert "removed 2 build(s), 1 kernel object folder(s), 1 loaded tree(s) and 1 log(s)" in said
    assert "left b1h (b1h for host): another process holds its lock" in said
    assert sorted(n for n, p in entries.items() if p.exists()) == ["b1h"]
    assert not (private_cache / "dev").exists()


# ---- the cache bounds itself after every build ----------------------------------------------------------------

def test_the_limit_removes_the_least_recently_used_but_what_a_build_keeps(private_cache, monkeypatch):
    entries = fill(private_cache)
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", "150K")
    with cache.file_lock(cache.key_lock("b2d"), wait=False):  # another process uses this one
        done = cache.keep_within_limit([entries["b1h"]])
    # b1h (100 KiB, kept) leaves 50 KiB: the oldest go until the rest fits, but b2d is held
    assert [i.name for i in done.removed] == ["b20d", "kernels/k10d", "python/p/p5d", "logs/log3d"]
    assert [i.name for i in done.busy] == ["b2d"]
    assert sorted(n for n, p in entries.items() if p.exists()) == ["b1h", "b2d"]


@pytest.mark.parametrize("limit", ["0", "1G"])
def test_within_the_limit_or_without_one_nothing_goes(private_cache, monkeypatch, limit):
    entries = fill(private_cache)
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", limit)
    assert cache.keep_within_limit([]).removed == []
    assert all(p.exists() for p in entries.values())


def test_a_build_beyond_the_limit_removes_older_items(relu3_copy, tmp_path, private_cache, stable_key, monkeypatch,
                                                      capsys):
    entries = fill(private_cache)
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", "1K")  # less than the new build alone: only it stays
    said = package(relu3_copy, tmp_path / "out", capsys)
    assert ("ksbuild: the build cache was above its limit (KSBUILD_CACHE_MAX_SIZE=1K): removed 6 least recently "
            "used item(s)") in said, said
    assert not any(p.exists() for p in entries.values())
    assert [b.info["package"] for b in cache.builds()] == ["activations"]
    assert "found a cached build" in package(relu3_copy, tmp_path / "again", capsys)  # (a reuse removes nothing)


def test_info_names_the_limit(private_cache, monkeypatch, capsys):
    fill(private_cache)
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", "2G")
    assert cli_main(["cache", "info"]) == 0
    assert "; limit 2.0 GiB (KSBUILD_CACHE_MAX_SIZE=2G))" in capsys.readouterr().out.splitlines()[0]
    assert cli_main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_size_bytes"] == 2 * 2**30
    monkeypatch.delenv("KSBUILD_CACHE_MAX_SIZE")
    assert cli_main(["cache", "info"]) == 0
    assert "limit 5.0 GiB (the default 5G; set KSBUILD_CACHE_MAX_SIZE)" in capsys.readouterr().out
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", "0")
    assert cli_main(["cache", "info"]) == 0
    assert "no limit (KSBUILD_CACHE_MAX_SIZE=0)" in capsys.readouterr().out


def test_a_bad_limit_is_refused_before_building(relu3_copy, tmp_path, private_cache, monkeypatch, capsys):
    monkeypatch.setenv("KSBUILD_CACHE_MAX_SIZE", "lots")
    assert cli_main(["package", str(relu3_copy), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "KSBUILD_CACHE_MAX_SIZE: 'lots' is not a size such as 2G" in err and "0 for no limit" in err
    assert not (tmp_path / "out").exists() and cache.builds() == []


@pytest.mark.parametrize("text, seconds", [("7d", 7 * DAY), ("12h", 43200), ("30m", 1800), ("45s", 45),
                                           ("1.5h", 5400), ("2w", 14 * DAY)])
def test_durations(text, seconds):
    assert cache.parse_duration(text) == seconds


@pytest.mark.parametrize("text, size", [("2G", 2 * 2**30), ("500M", 500 * 2**20), ("64k", 65536),
                                        ("1000", 1000), ("2GiB", 2 * 2**30), ("1.5MB", 3 * 2**19)])
def test_sizes(text, size):
    assert cache.parse_size(text) == size


@pytest.mark.parametrize("args", [["clean", "--older-than", "7"], ["clean", "--older-than", "3x"],
                                  ["clean", "--max-size", "lots"], ["info", "--max-size", "1G"]])
def test_bad_clean_options_are_usage_errors(args, private_cache, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main(["cache", *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


# ---- no leftovers after a kill ------------------------------------------------------------------------------------

def process_tree(pid: int) -> list[int]:
    """pid and every process below it (Linux: /proc/<pid>/task/*/children)."""
    pids, i = [pid], 0
    while i < len(pids):
        for children in Path(f"/proc/{pids[i]}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pids += [int(c) for c in children.read_text().split()]
        i += 1
    return pids


def kill_while_compiling(manifest: Path, out: Path) -> Path:
    """Start `ksbuild package` in a subprocess and SIGKILL it while it compiles, with the CMake and compilers it
    started (they run in a process group of their own: a killed job's whole tree); returns the build folder it
    left in the cache."""
    proc = subprocess.Popen([sys.executable, "-c", STABLE_CLI, "package", str(manifest), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = []
    for line in proc.stdout:
        said.append(line)
        if "compiling C++" in line:
            for pid in process_tree(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "".join(said)
    (left,) = [p for p in Path(os.environ["KSBUILD_CACHE"]).glob("*/build-*") if p.is_dir()]
    assert (left / "build").is_dir() and not out.exists()
    return left


def test_the_next_build_removes_what_a_killed_one_left(relu3_copy, tmp_path, private_cache, stable_key, capsys):
    left = kill_while_compiling(relu3_copy, tmp_path / "out")
    said = package(relu3_copy, tmp_path / "out", capsys)
    assert f"ksbuild: removed {left}, left by a build that was stopped" in said
    assert not left.exists() and not left.with_name(left.name + ".log").exists()
    assert [p.name for p in left.parent.iterdir() if p.name.startswith("build-")] == []
    assert (tmp_path / "out/lib/libactivations.a").is_file()


def test_clean_removes_what_a_killed_build_left(relu3_copy, tmp_path, private_cache, capsys):
    left = kill_while_compiling(relu3_copy, tmp_path / "out")
    with cache.file_lock(cache.key_lock(left.parent.name)):  # a build of that key runs: its folders stay
        assert clean("--older-than", "1d", capsys=capsys)["leftovers"] == []
    assert left.is_dir()
    assert clean("--older-than", "1d", capsys=capsys)["leftovers"] == [str(left)]
    assert not left.parent.exists()  # (nothing else was in it)


def test_clean_removes_half_copied_objects_and_trees(private_cache, capsys):
    kernels = fake_entry(private_cache, "kernels", "k", 10, 0)
    (kernels / "kernels_x86_64.o.mm.part").write_bytes(b"\0")
    tree = fake_entry(private_cache, "python", "0123abcd", 10, 0)
    copy = tree.with_name(f".{tree.name}-x1y2z3")
    (copy / "tree").mkdir(parents=True)
    with cache.file_lock(cache.out_lock(tree)):  # an install into that tree runs: its copy stays
        assert clean("--older-than", "1d", capsys=capsys)["leftovers"] == [str(kernels / "kernels_x86_64.o.mm.part")]
    assert copy.is_dir()
    assert clean("--older-than", "1d", capsys=capsys)["leftovers"] == [str(copy)]
    assert kernels.is_dir() and tree.is_dir()
