"""Sum a KSBUILD_TEST_CPU_LOG file (tests/conftest.py) by test file, most CPU first:
    KSBUILD_TEST_CPU_LOG=/tmp/cpu.tsv .venv/bin/python -m pytest -n auto --dist loadfile tests
    .venv/bin/python scripts/test_cpu.py /tmp/cpu.tsv [N]
A line is `seconds<TAB>test id`, then (logs since the twentieth session) `<TAB>python<TAB>children`: the pytest
worker's own CPU and its finished children's (compilers, CMake, qemu), shown beside each file's total."""
from __future__ import annotations

import sys
from collections import defaultdict


def _read(path: str) -> list[tuple[float, str, tuple[float, float] | None]]:
    rows = []
    for line in open(path):
        seconds, nodeid, *parts = line.rstrip("\n").split("\t")
        rows.append((float(seconds), nodeid, (float(parts[0]), float(parts[1])) if len(parts) == 2 else None))
    return rows


def _split(parts: list[tuple[float, float] | None]) -> str:
    """'  python X s, children Y s' when every line of the sum has the two parts, else ''."""
    if not parts or None in parts:
        return ""
    return f"  (python {sum(p[0] for p in parts):.1f} s, children {sum(p[1] for p in parts):.1f} s)"


def main(path: str, top: int = 40) -> None:
    rows = _read(path)
    by_file: dict[str, float] = defaultdict(float)
    parts: dict[str, list] = defaultdict(list)
    for seconds, nodeid, split in rows:
        by_file[nodeid.split("::")[0]] += seconds
        parts[nodeid.split("::")[0]].append(split)
    total = sum(by_file.values())
    print(f"{total / 60:.1f} min of CPU in {len(rows)} tests, {len(by_file)} files"
          f"{_split([split for _, _, split in rows])}")
    for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {name}{_split(parts[name])}")
    print("slowest tests:")
    for seconds, nodeid, split in sorted(rows, reverse=True, key=lambda row: row[0])[:top]:
        print(f"{seconds:8.1f} s  {nodeid}{_split([split])}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
