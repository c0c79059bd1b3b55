"""python -m fuzz --budget N --seed S: check N exports of random kernels; exit 1 when something failed."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .run import run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    p.add_argument("--budget", type=int, default=200, help="exports to check (default 200)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--batch", type=int, default=12, help="kernels per package built (default 12)")
    p.add_argument("--only", type=int, default=None, help="check kernel ONLY of the run alone (a rerun)")
    p.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="where failing cases are written")
    p.add_argument("--work", type=Path, default=None, help="where batches are built (default: a temporary folder)")
    p.add_argument("--no-compile", action="store_true", help="interpreter vs torch only")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ksfuzz") as tmp:
        report = run(a.budget, a.seed, a.batch, a.work or Path(tmp), a.out, only=a.only, compiled=not a.no_compile)
    print(report.summary())
    if report.failures:
        print(f"failing cases written to {a.out}/ (rerun one: python -m fuzz --seed {a.seed} --only K)")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
