"""The build cache: where it lives, the locks that make concurrent builds safe, `ksbuild cache`.

Layout under cache_root() ($KSBUILD_CACHE, default ~/.cache/ksbuild):
  <key>/install/          a finished install tree (share/P/ksbuild-hash holds the key)
  <key>/wheel/            or a finished wheel of `ksbuild wheel`
  <key>/entry.json        what it is: package, target, backend, compiler, ksbuild version
  <key>/build.log         the log of the build that made it (a failed build leaves build-XXXX.log)
  python/<P>/<key>/       the trees ksbuild.build() loads into Python
  logs/                   logs of failed wheel builds
  locks/                  one lock file per key and one per output folder

Concurrent `ksbuild package` runs serialize on the key's lock (one builds, the others reuse its
result) and on the output folder's lock (one copies the tree in; the others find it current).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # not POSIX: no inter-process locks; the atomic renames alone keep trees whole
    fcntl = None  # type: ignore[assignment]

NOT_ENTRIES = ("python", "locks", "logs")  # folders of the cache root that are not builds


def cache_root() -> Path:
    """The cache folder: $KSBUILD_CACHE, else ~/.cache/ksbuild."""
    return Path(os.environ.get("KSBUILD_CACHE", Path.home() / ".cache" / "ksbuild"))


def key_lock(key: str) -> Path:
    """The lock file of one cache entry."""
    return cache_root() / "locks" / f"{key}.lock"


def out_lock(out: Path) -> Path:
    """The lock file of an output folder (kept in the cache, not beside the user's tree)."""
    digest = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:20]
    return cache_root() / "locks" / f"out-{digest}.lock"


@contextlib.contextmanager
def file_lock(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `path` (created) for the block; yields False if wait=False and it is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        got = _acquire(f.fileno(), wait)
        try:
            yield got
        finally:
            if got and fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _acquire(fd: int, wait: bool) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


@dataclass(frozen=True)
class Entry:
    """One cached build."""

    key: str
    path: Path
    info: dict
    size: int
    mtime: float

    def describe(self) -> str:
        """One line for `ksbuild cache info`."""
        i = self.info
        kind = " wheel" if i.get("wheel") else " +python" if i.get("python_module") else ""
        what = f"{i.get('package', '?')} {i.get('version', '')} target={i.get('target', '?')} " \
               f"backend={i.get('backend', '?')}{kind}"
        done = (self.path / "wheel" if i.get("wheel") else self.path / "install").is_dir()
        state = "" if done else "  (no finished tree: failed or in progress)"
        return f"  {self.key}  {_size(self.size):>9}  {_age(self.mtime):>8}  {what}{state}"


def entries() -> list[Entry]:
    """The cache entries, newest first."""
    root = cache_root()
    found = []
    for d in (root.iterdir() if root.is_dir() else ()):
        if d.is_dir() and d.name not in NOT_ENTRIES:
            try:
                found.append(Entry(d.name, d, _entry_info(d), _tree_size(d), d.stat().st_mtime))
            except OSError:  # removed meanwhile by `ksbuild cache clean`
                continue
    return sorted(found, key=lambda e: -e.mtime)


def _entry_info(d: Path) -> dict:
    """entry.json of an entry ({} while its build runs or after a failure)."""
    try:
        return json.loads((d / "entry.json").read_text())
    except (OSError, ValueError):
        return {}


def info_text() -> str:
    """What `ksbuild cache info` prints: where the cache is, its entries, their sizes."""
    root, es = cache_root(), entries()
    loaded = _tree_size(root / "python")
    lines = [f"ksbuild cache: {root}", f"  {len(es)} build(s), {_size(sum(e.size for e in es))}; "
             f"trees loaded by ksbuild.build(): {_size(loaded)}"]
    if es:
        lines.append(f"  {'key':20}  {'size':>9}  {'age':>8}  package")
        lines += [e.describe() for e in es]
    return "\n".join(lines)


def clean() -> tuple[int, int, list[str]]:
    """Remove every entry not being built right now, the loaded trees and old logs: (removed, bytes, busy keys)."""
    removed, freed, busy = 0, 0, []
    for e in entries():
        with file_lock(key_lock(e.key), wait=False) as got:
            if not got:
                busy.append(e.key)
                continue
            shutil.rmtree(e.path, ignore_errors=True)
            removed, freed = removed + 1, freed + e.size
    for folder in (cache_root() / "python", cache_root() / "logs"):
        freed += _tree_size(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return removed, freed, busy


def _tree_size(path: Path) -> int:
    """Bytes of the files under path; files that vanish meanwhile (a build finishing) count 0."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _age(mtime: float) -> str:
    s = max(0.0, time.time() - mtime)
    for unit, secs in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= secs:
            return f"{s / secs:.0f} {unit}"
    return f"{s:.0f} s"
