"""What a built library costs a device: the most stack each export can use, and the sizes of its sections.

The stack is measured from GCC's call graphs (-fcallgraph-info=su, which the generated CMake project passes to
GCC 10 and later: one .ci file per object, in VCG form, listing each function's frame and its calls). An
export's figure is its frame plus the deepest chain of calls below it. An indirect call is an epilogue's run
(ks::run_block, ks/kernels.h) or, with `threads = N`, a part of a layer that ks::pool::run hands to the threads
(the calling thread runs parts too, on its own stack): the only functions the generated code and the kernel
layer call through a pointer. It counts as the deepest of them (a part's own indirect calls, its epilogues, as
the deepest epilogue run). Calls into libm and the C library (memcpy) count as 0
bytes. A frame GCC calls dynamic and unbounded (none in ksbuild's code) makes the figure unknown (None).
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_NODE = re.compile(r'node: \{ title: "([^"]*)" label: "((?:[^"\\]|\\.)*)"')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]*)" targetname: "([^"]*)"')
_FRAME = re.compile(r"\\n(\d+) bytes \(([^)]*)\)")
INDIRECT = "__indirect_call"
EPILOGUE_RUNS = ("9run_blockI",)  # (mangled: ks::run_block<...>)
POOL_PARTS = ("4pool3runI", "UlPKviiE_4_FUN")  # (mangled: ks::pool::run<F>'s [](const void*, int, int) {...}, both)


@dataclass
class CallGraph:
    """Functions (by mangled name) with their frames in bytes (None: unbounded) and whom they call."""

    frames: dict[str, int | None] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)

    def read(self, ci: Path) -> None:
        """Add the functions and calls of one .ci file."""
        text = ci.read_text(errors="replace")
        for title, label in _NODE.findall(text):
            frame = _FRAME.search(label)
            if frame:
                self.frames[_name(title)] = None if frame.group(2) == "dynamic" else int(frame.group(1))
        for source, target in _EDGE.findall(text):
            self.calls.setdefault(_name(source), set()).add(_name(target))

    def deepest(self, name: str) -> int | None:
        """The most stack a call of `name` uses, its own frame included (None: unbounded or unknown)."""
        memo: dict[str, int | None] = {}
        memo[INDIRECT] = self._deepest_of(lambda f: any(r in f for r in EPILOGUE_RUNS), memo)
        parts = self._deepest_of(lambda f: all(r in f for r in POOL_PARTS), memo)
        memo[INDIRECT] = max(memo[INDIRECT], parts)
        return self._depth(name, memo, set())

    def _deepest_of(self, which, memo: dict) -> int:
        """The deepest call of the functions `which` picks by mangled name (0 when there are none)."""
        return max((self._depth(f, memo, set()) or 0 for f in self.frames if f.startswith("_Z") and which(f)),
                   default=0)

    def _depth(self, name: str, memo: dict, active: set) -> int | None:
        if name in memo:
            return memo[name]
        if name in active:  # (recursion: no bound)
            return None
        if name not in self.frames:  # libm, memcpy: not counted
            return 0
        own = self.frames[name]
        active.add(name)
        below = [self._depth(c, memo, active) for c in sorted(self.calls.get(name, ()))]
        active.discard(name)
        memo[name] = None if own is None or None in below else own + max(below, default=0)
        return memo[name]


def _name(title: str) -> str:
    """A function's name in a .ci file without the source file GCC puts before a definition's."""
    return title.rpartition(":")[2]


def stack_usage(folders: list[Path], symbols: list[str]) -> dict[str, int | None]:
    """The most stack each exported C symbol uses, from the .ci files under `folders` (empty when there are
    none: a compiler without -fcallgraph-info)."""
    graph = CallGraph()
    files = [ci for folder in folders if folder.is_dir() for ci in sorted(folder.rglob("*.ci"))]
    for ci in files:
        graph.read(ci)
    # (an export whose object has no call graph, e.g. from a compiler launcher's cache: unknown, not 0)
    return {s: graph.deepest(s) if s in graph.frames else None for s in symbols} if files else {}


def section_sizes(library: Path, size_tool: str = "size") -> dict[str, int]:
    """Bytes of code (text), read-only data (rodata, without the weights), weights (the constants' blob) and
    writable data (data, bss) in a static library, from `size -A` (empty if the tool is missing)."""
    try:
        out = subprocess.run([size_tool, "-A", str(library)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    sizes = {"text": 0, "rodata": 0, "weights": 0, "data": 0}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        name, n = parts[0], int(parts[1])
        if name.startswith(".text"):
            sizes["text"] += n
        elif name.startswith(".rodata.ks_blob") or name.startswith(".ks_blob"):
            sizes["weights"] += n
        elif name.startswith(".rodata"):
            sizes["rodata"] += n
        elif name.startswith((".data", ".bss")):
            sizes["data"] += n
    return sizes
