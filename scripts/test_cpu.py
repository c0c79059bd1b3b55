"""Sum a KSBUILD_TEST_CPU_LOG file (tests/conftest.py) by test file, most CPU first:
    KSBUILD_TEST_CPU_LOG=/tmp/cpu.tsv .venv/bin/python -m pytest -n auto --dist loadfile tests
    .venv/bin/python scripts/test_cpu.py /tmp/cpu.tsv [N]"""
from __future__ import annotations

import sys
from collections import defaultdict


def main(path: str, top: int = 40) -> None:
    by_file: dict[str, float] = defaultdict(float)
    tests: list[tuple[float, str]] = []
    for line in open(path):
        seconds, nodeid = line.rstrip("\n").split("\t", 1)
        by_file[nodeid.split("::")[0]] += float(seconds)
        tests.append((float(seconds), nodeid))
    total = sum(by_file.values())
    print(f"{total / 60:.1f} min of CPU in {len(tests)} tests, {len(by_file)} files")
    for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {name}")
    print("slowest tests:")
    for seconds, nodeid in sorted(tests, reverse=True)[:top]:
        print(f"{seconds:8.1f} s  {nodeid}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
