"""The build cache: where it lives, the locks that make concurrent builds safe, `ksbuild cache`.

Layout under cache_root() ($KSBUILD_CACHE, default ~/.cache/ksbuild):
  <key>/install/          a finished install tree (share/P/ksbuild-hash holds the key)
  <key>/files.sha256      the sha256 of every file of install/, written when the entry is finished and checked
                          before it is reused (sha256sum's format: `sha256sum -c files.sha256` in <key>/ works)
  <key>/wheel/            or a finished wheel of `ksbuild wheel`
  <key>/entry.json        what it is: package, manifest(s), target, backend, compiler, ksbuild version
  <key>/build.log         the log of the build that made it (a failed build leaves build-XXXX.log)
  <key>/build-XXXX/       a build in progress; one a killed build left is removed by the next build of the
                          key or by `ksbuild cache clean` (both hold the key's lock)
  kernels/<hash>/         the kernel layer's objects kernels_<level>_<part>.o (+ .ci call graphs), shared by every
                          package built with the same compiler and flags (package.py: kernel_cache)
  python/<P>/<key>/       the trees ksbuild.build() loads into Python
  logs/                   logs of failed wheel builds
  dev/                    the manifests of ksbuild.kernel functions (the dev loop)
  locks/                  one lock file per key, per output folder and per kernel object folder (and one per
                          kernel object being compiled: package.py: one_compile_of_the_kernels)

Concurrent `ksbuild package` runs serialize on the key's lock (one builds, the others reuse its
result) and on the output folder's lock (one copies the tree in; the others find it current).
Builds hold the lock of the kernel object folder they use shared; `clean` removes a folder only
when it gets that lock exclusively, and never anything whose lock another process holds.

An entry's age is the time since it was last used: its folder's modification time, which a build,
a reuse and an up-to-date install touch. `clean --older-than` and `--max-size` go by it.

The cache bounds itself: after every build that adds to it, the least recently used items are removed until it
holds at most $KSBUILD_CACHE_MAX_SIZE (default 5G, as ccache's default; 0 = no limit), never what the build just
made or what another process holds (keep_within_limit).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import KsbuildError

try:
    import fcntl
except ImportError:  # not POSIX: no inter-process locks; the atomic renames alone keep trees whole
    fcntl = None  # type: ignore[assignment]

NOT_ENTRIES = ("python", "locks", "logs", "dev", "kernels")  # folders of the cache root that are not builds
FILE_LIST = "files.sha256"
LEFTOVERS = ("build-*", "wheel-*")  # the temporary folders of a build (package.py) or wheel build (wheel.py)
MANIFESTS_KEPT = 10  # entry.json remembers this many manifests that used the entry
DURATION_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
DEFAULT_MAX_SIZE = "5G"  # $KSBUILD_CACHE_MAX_SIZE when unset


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


def kernels_lock(folder: Path) -> Path:
    """The lock file of a kernel object folder (cache_root()/kernels/<hash>)."""
    return cache_root() / "locks" / f"kernels-{folder.name}.lock"


@contextlib.contextmanager
def file_lock(path: Path, *, wait: bool = True, shared: bool = False) -> Iterator[bool]:
    """Hold a lock on `path` (created) for the block, exclusive or shared; yields False if wait=False and it is
    taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        got = _acquire(f.fileno(), wait, shared)
        try:
            yield got
        finally:
            if got and fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _acquire(fd: int, wait: bool, shared: bool) -> bool:
    if fcntl is None:
        return True
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


# ---- checking an entry before it is reused -----------------------------------------------------------------

def seal(entry: Path, tree: str = "install") -> None:
    """Write <entry>/files.sha256: the sha256 of every file under <entry>/<tree>, in sha256sum's format."""
    lines = [f"{_digest(f)}  {f.relative_to(entry).as_posix()}\n" for f in _files(entry / tree)]
    write_atomic(entry / FILE_LIST, "".join(lines))


def unseal(entry: Path) -> None:
    """Remove <entry>/files.sha256 (before its tree is replaced: a tree without one is never reused)."""
    (entry / FILE_LIST).unlink(missing_ok=True)


def damage(entry: Path, tree: str = "install") -> str | None:
    """Why <entry>/<tree> may not be reused (no file list, a file lost, added or changed), or None if it is whole."""
    try:
        listed = _read_file_list(entry / FILE_LIST)
    except FileNotFoundError:
        return f"has no {FILE_LIST} (its build did not finish)"
    except (OSError, ValueError) as e:
        return f"has an unreadable {FILE_LIST} ({e})"
    present = {f.relative_to(entry).as_posix(): f for f in _files(entry / tree)}
    for name in sorted(listed.keys() - present.keys()):
        return f"lost {name}"
    for name in sorted(present.keys() - listed.keys()):
        return f"has a file {FILE_LIST} does not list: {name}"
    for name, f in present.items():
        if _digest(f) != listed[name]:
            return f"has a changed {name} (its sha256 is not the one in {FILE_LIST})"
    return None


def _read_file_list(path: Path) -> dict[str, str]:
    """{relative path: sha256} from a files.sha256."""
    listed = {}
    for line in path.read_text().splitlines():
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"not a sha256sum line: {line[:80]!r}")
        listed[name] = digest
    return listed


def _files(folder: Path) -> list[Path]:
    """Every file under folder, sorted."""
    return sorted(Path(d) / name for d, _, names in os.walk(folder) for name in names)


def _digest(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:  # a dangling link or a file that vanished: it matches nothing
        return "unreadable"


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file renamed onto it (readers see the old text or the new)."""
    tmp = path.with_name(f".{path.name}-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---- uses and leftovers --------------------------------------------------------------------------------------

def touch(path: Path) -> None:
    """Mark a cache folder as used now (its age restarts); nothing if it is gone or not writable."""
    with contextlib.suppress(OSError):
        os.utime(path)


def record_use(entry: Path, manifest: Path) -> None:
    """Note in <entry>/entry.json that `manifest` used the entry (its "manifest" and "manifests"), and touch it."""
    info = _entry_info(entry)
    if info and info.get("manifest") != str(manifest):
        known = [p for p in info.get("manifests", [info.get("manifest")]) if p and p != str(manifest)]
        info["manifest"], info["manifests"] = str(manifest), (known + [str(manifest)])[-MANIFESTS_KEPT:]
        with contextlib.suppress(OSError):
            write_atomic(entry / "entry.json", json.dumps(info, indent=2) + "\n")
    touch(entry)


def remove_leftovers(entry: Path) -> list[Path]:
    """Remove what killed builds left in a cache entry (build-XXXX/, wheel-XXXX/ and their logs); the caller holds
    the entry's lock, so no build of it is running. Returns the removed folders."""
    removed = []
    for pattern in LEFTOVERS:
        for folder in sorted(p for p in entry.glob(pattern) if p.is_dir()):
            shutil.rmtree(folder, ignore_errors=True)
            folder.with_name(folder.name + ".log").unlink(missing_ok=True)
            removed.append(folder)
    for tmp in [*entry.glob(".entry.json-*"), *entry.glob(f".{FILE_LIST}-*")]:  # (write_atomic's)
        tmp.unlink(missing_ok=True)
    return removed


def _remove_all_leftovers() -> list[Path]:
    """Leftovers of killed builds everywhere whose lock is free: build folders, kernel object parts, loaded trees."""
    removed: list[Path] = []
    for d in _subdirs(cache_root(), skip=NOT_ENTRIES):
        with file_lock(key_lock(d.name), wait=False) as got:
            removed += _tidy_entry(d) if got else []
    for d in _subdirs(cache_root() / "kernels"):
        with file_lock(kernels_lock(d), wait=False) as got:
            parts = sorted(d.glob("*.part")) if got else []
            for part in parts:
                part.unlink(missing_ok=True)
            removed += parts
    for package in _subdirs(cache_root() / "python"):
        removed += _remove_copies(package)
    return removed


def _tidy_entry(entry: Path) -> list[Path]:
    """remove_leftovers(entry), and the entry itself when nothing else is in it (a killed first build)."""
    removed = remove_leftovers(entry)
    with contextlib.suppress(OSError):
        if {p.name for p in entry.iterdir()} <= {"entry.json"}:
            shutil.rmtree(entry)
    return removed


def _remove_copies(package: Path) -> list[Path]:
    """The half-copied trees (.<key>-XXXX) a killed install left in python/<P>/, whose output lock is free."""
    removed = []
    for tmp in sorted(p for p in package.glob(".*-*") if p.is_dir()):
        with file_lock(out_lock(package / tmp.name[1:].rsplit("-", 1)[0]), wait=False) as got:
            if got:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
    return removed


# ---- what the cache holds ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """One thing `ksbuild cache clean` may remove: a build, a kernel object folder, a loaded tree or a log."""

    kind: str  # "build", "kernels", "python" or "log"
    name: str  # <key>, kernels/<hash>, python/<P>/<key> or logs/<file>
    path: Path
    size: int
    used: float  # when it was last used (the folder's or file's modification time)
    info: dict = field(default_factory=dict)  # a build's entry.json; a kernel folder's levels
    lock: Path | None = None

    @property
    def key(self) -> str:
        """The folder or file name (a build's cache key)."""
        return self.path.name

    @property
    def finished(self) -> bool:
        """A build: True if its install tree or wheel is there (False: it failed, or runs now)."""
        return (self.path / ("wheel" if self.info.get("wheel") else "install")).is_dir()


def builds() -> list[Item]:
    """The build entries (<key>/), most recently used first."""
    return _by_use(_item("build", d.name, d, key_lock(d.name), _entry_info)
                   for d in _subdirs(cache_root(), skip=NOT_ENTRIES))


def entries() -> list[Item]:
    """The build entries (<key>/), most recently used first (as builds())."""
    return builds()


def kernel_folders() -> list[Item]:
    """The kernel object folders (kernels/<hash>/), most recently used first."""
    return _by_use(_item("kernels", f"kernels/{d.name}", d, kernels_lock(d), _kernel_info)
                   for d in _subdirs(cache_root() / "kernels"))


def loaded_trees() -> list[Item]:
    """The trees ksbuild.build() loads (python/<P>/<key>/), most recently used first."""
    return _by_use(_item("python", f"python/{p.name}/{d.name}", d, out_lock(d), lambda d: {})
                   for p in _subdirs(cache_root() / "python") for d in _subdirs(p) if not d.name.startswith("."))


def logs() -> list[Item]:
    """The logs of failed wheel builds (logs/), newest first."""
    folder = cache_root() / "logs"
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    return _by_use(_item("log", f"logs/{f.name}", f, None, lambda f: {}) for f in files if f.is_file())


def all_items() -> list[Item]:
    """Everything `clean` may remove."""
    return builds() + kernel_folders() + loaded_trees() + logs()


def _item(kind: str, name: str, path: Path, lock: Path | None, describe) -> Item | None:
    try:
        used = path.stat().st_mtime
        return Item(kind, name, path, _tree_size(path), used, describe(path), lock)
    except OSError:  # removed meanwhile by another `ksbuild cache clean`
        return None


def _by_use(items) -> list[Item]:
    return sorted((i for i in items if i is not None), key=lambda i: -i.used)


def _subdirs(folder: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    try:
        return sorted(d for d in folder.iterdir() if d.is_dir() and d.name not in skip)
    except OSError:
        return []


def _entry_info(d: Path) -> dict:
    """entry.json of an entry ({} while its build runs or after a failure)."""
    try:
        return json.loads((d / "entry.json").read_text())
    except (OSError, ValueError):
        return {}


def _kernel_info(d: Path) -> dict:
    """The instruction set levels and parts (products32, products64, convs32, convs64, int8u, int8s; int8u_own and
    int8s_own: a portable build's lower levels' int8 objects) a kernel object folder holds, whether their call graphs
    (.ci) are there, and the levels of its precompiled prelude headers (prelude_<level>.h.gch: packages of loops alone
    make those too)."""
    from ..compile.cmake import kernel_object_name
    names = [kernel_object_name(f.name[len("kernels_"):-2]) for f in d.glob("kernels_*.o")]
    levels = sorted({level for level, _, _ in names})
    parts = sorted({part + ("_own" if own else "") for _, part, own in names})
    headers = sorted(f.name[len("prelude_"):-len(".h.gch")] for f in d.glob("prelude_*.h.gch"))
    try:  # what package.py wrote there: target, cpu, threads, compiler
        about = json.loads((d / "about.json").read_text())
    except (OSError, ValueError):
        about = {}
    return {**about, "levels": levels, "parts": parts, "call_graphs": any(d.glob("kernels_*.ci")),
            "prelude_headers": headers}


# ---- ksbuild cache info ----------------------------------------------------------------------------------------

def info_text() -> str:
    """What `ksbuild cache info` prints: where the cache is and every entry: what, for what, size, age."""
    bs, ks, ps, ls = builds(), kernel_folders(), loaded_trees(), logs()
    total = sum(i.size for i in bs + ks + ps + ls)
    limit = size_limit()
    bound = f"limit {_size(limit)} ({limit_text()})" if limit else "no limit (KSBUILD_CACHE_MAX_SIZE=0)"
    lines = [f"ksbuild cache: {cache_root()}  ({_size(total)}; {bound})",
             f"  {len(bs)} build(s) {_size(_sum(bs))}; {len(ks)} kernel object folder(s) {_size(_sum(ks))}; "
             f"{len(ps)} tree(s) loaded by ksbuild.build() {_size(_sum(ps))}; {len(ls)} log(s) {_size(_sum(ls))}"]
    if bs:
        lines += ["", "builds (most recently used first; age: since built, since last used):"]
        lines += _table(["key", "package", "target", "backend", "size", "built", "used", "manifest"],
                        [_build_row(b) for b in bs])
    if ks:
        lines += ["", "kernel layer objects and precompiled prelude headers (kernels/<hash>/kernels_<level>_<part>.o, "
                  "prelude_<level>.h.gch, shared by the packages built with the same compiler and flags):"]
        lines += _table(["folder", "target", "levels", "size", "used"], [_kernel_row(k) for k in ks])
    if ps:
        lines += ["", "trees loaded by ksbuild.build():"]
        lines += _table(["folder", "size", "used"], [[p.name, _size(p.size), _age(p.used)] for p in ps])
    return "\n".join(lines)


def _build_row(b: Item) -> list[str]:
    i = b.info
    kind = " (wheel)" if i.get("wheel") else " (+python)" if i.get("python_module") else ""
    state = "" if b.finished else "  [no finished tree: failed, stopped or in progress]"
    others = len(i.get("manifests", [])) - 1
    manifest = i.get("manifest", "?") + (f" (+{others} other)" if others > 0 else "") + state
    built = _age(i["built_at"]) if isinstance(i.get("built_at"), (int, float)) else "-"
    return [b.key, f"{i.get('package', '?')} {i.get('version', '')}{kind}", i.get("target", "?"),
            i.get("backend", "?"), _size(b.size), built, _age(b.used), manifest]


def _kernel_row(k: Item) -> list[str]:
    parts = f" ({', '.join(k.info['parts'])})" if k.info["parts"] else ""
    levels = " ".join(k.info["levels"]) + parts or "(none yet)"
    headers = f" +prelude {' '.join(k.info['prelude_headers'])}" if k.info["prelude_headers"] else ""
    return [k.name, k.info.get("target", "?"), levels + (" +call graphs" if k.info["call_graphs"] else "") + headers,
            _size(k.size), _age(k.used)]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Rows in columns under a header, two spaces apart, indented by two; the last column is not padded."""
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(r, widths)), r[-1]]).rstrip()
            for r in [header, *rows]]


def info_json() -> dict:
    """`ksbuild cache info --json`: the cache folder, its builds, kernel object folders and loaded trees."""
    def common(i: Item) -> dict:
        return {"name": i.name, "path": str(i.path), "size_bytes": i.size, "mtime": i.used,
                "age_seconds": round(max(0.0, time.time() - i.used), 1)}

    return {"cache": str(cache_root()), "max_size_bytes": size_limit() or 0,
            "builds": [{"key": b.key, **common(b), "finished": b.finished, **b.info} for b in builds()],
            "kernels": [{**common(k), **k.info} for k in kernel_folders()],
            "python": [common(p) for p in loaded_trees()]}


# ---- ksbuild cache clean -----------------------------------------------------------------------------------------

@dataclass
class Cleaned:
    """What `ksbuild cache clean` did."""

    removed: list[Item] = field(default_factory=list)
    busy: list[Item] = field(default_factory=list)  # chosen, but another process holds their lock
    leftovers: list[Path] = field(default_factory=list)  # what killed builds had left
    size_after: int = 0

    @property
    def freed(self) -> int:
        """Bytes removed."""
        return sum(i.size for i in self.removed)


def clean(older_than: float | None = None, max_size: int | None = None) -> Cleaned:
    """Remove what killed builds left, then: everything (no limit given), or the entries unused for `older_than`
    seconds, then the least recently used ones until the cache holds at most `max_size` bytes. An entry whose
    lock another process holds (a build or install in progress) is left alone and listed in `busy`."""
    done = Cleaned(leftovers=_remove_all_leftovers())
    items = sorted(all_items(), key=lambda i: i.used)  # least recently used first
    if older_than is None and max_size is None:
        for item in items:
            _remove(item, done)
        shutil.rmtree(cache_root() / "dev", ignore_errors=True)  # (rewritten by the dev loop when needed)
    if older_than is not None:
        for item in [i for i in items if i.used < time.time() - older_than]:
            _remove(item, done)
    if max_size is not None:
        _shrink(items, max_size, done)
    _remove_empty_package_folders()
    done.size_after = sum(i.size for i in all_items())
    return done


def size_limit() -> int | None:
    """The cache's size limit in bytes: $KSBUILD_CACHE_MAX_SIZE (a SIZE, see parse_size), default 5G; None for 0
    (no limit). A value that is not a size is an error naming the variable."""
    text = os.environ.get("KSBUILD_CACHE_MAX_SIZE", "").strip() or DEFAULT_MAX_SIZE
    try:
        limit = parse_size(text)
    except ValueError as e:
        raise KsbuildError(f"KSBUILD_CACHE_MAX_SIZE: {e}",
                           hint="set it to the most the build cache may hold (e.g. 5G), or 0 for no limit") from None
    return limit or None


def limit_text() -> str:
    """Where the limit comes from, for messages: 'KSBUILD_CACHE_MAX_SIZE=2G' or 'the default 5G'."""
    text = os.environ.get("KSBUILD_CACHE_MAX_SIZE", "").strip()
    return f"KSBUILD_CACHE_MAX_SIZE={text}" if text else f"the default {DEFAULT_MAX_SIZE}; set KSBUILD_CACHE_MAX_SIZE"


def keep_within_limit(keep: list[Path]) -> Cleaned:
    """After a build added to the cache: remove the least recently used items until the cache holds at most
    size_limit() bytes, except the items in (or under) `keep`, what the build just made. Returns what it did
    (nothing when there is no limit or the cache is within it)."""
    limit, done = size_limit(), Cleaned()
    if limit is None:
        return done
    kept = [p.resolve() for p in keep]
    items = sorted((i for i in all_items() if not _among(i.path.resolve(), kept)), key=lambda i: i.used)
    mine = sum(_tree_size(p) for p in keep if p.exists())
    _shrink(items, max(0, limit - mine), done)
    if done.removed:
        _remove_empty_package_folders()
    return done


def _among(path: Path, kept: list[Path]) -> bool:
    """True if path is one of kept, or inside one, or holds one."""
    return any(path == k or k in path.parents or path in k.parents for k in kept)


def _shrink(items: list[Item], max_size: int, done: Cleaned) -> None:
    """Remove the least recently used of items (oldest first) until what is left holds at most max_size bytes."""
    gone = {i.path for i in done.removed}
    left = [i for i in items if i.path not in gone]
    total = sum(i.size for i in left)
    for item in left:
        if total <= max_size:
            return
        if _remove(item, done):
            total -= item.size


def _remove(item: Item, done: Cleaned) -> bool:
    """Remove one item under its lock; a taken lock leaves it (in done.busy)."""
    with (file_lock(item.lock, wait=False) if item.lock else contextlib.nullcontext(True)) as got:
        if not got:
            if item not in done.busy:
                done.busy.append(item)
            return False
        if item.path.is_dir():
            shutil.rmtree(item.path, ignore_errors=True)
        else:
            item.path.unlink(missing_ok=True)
    done.removed.append(item)
    return True


def _remove_empty_package_folders() -> None:
    for package in _subdirs(cache_root() / "python"):
        with contextlib.suppress(OSError):
            package.rmdir()


# ---- sizes, ages, durations ------------------------------------------------------------------------------------

def parse_duration(text: str) -> float:
    """Seconds in a DURATION such as 7d, 12h, 30m (minutes), 45s or 2w."""
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([a-z]+)", text.strip().lower())
    if not match or match[2] not in DURATION_UNITS:
        raise ValueError(f"'{text}' is not a duration such as 7d, 12h, 30m or 45s")
    return float(match[1]) * DURATION_UNITS[match[2]]


def parse_size(text: str) -> int:
    """Bytes in a SIZE such as 2G, 500M, 64K or 1000000 (K, M, G, T are 1024-based; 2GB and 2GiB mean 2G)."""
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([kmgt]?)(i?b)?", text.strip().lower())
    if not match:
        raise ValueError(f"'{text}' is not a size such as 2G, 500M, 64K or a number of bytes")
    return int(float(match[1]) * SIZE_UNITS[match[2]])


def _sum(items: list[Item]) -> int:
    return sum(i.size for i in items)


def _tree_size(path: Path) -> int:
    """Bytes of the files under path (or of the file path); files that vanish meanwhile count 0."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
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

