"""Two versions of ksbuild on GradBench's evals, in one process, interleaved: what a change gains in F, J and J/F.

    PYTHONPATH=. python benchmarks/gradbench/compare.py OLD_CHECKOUT [--evals lse,kmeans,llsq,gmm] [--rounds 9]
        [--seconds 0.15] [--out DIR] [--gradbench DIR]

This folder's manifest is built twice: by the ksbuild of OLD_CHECKOUT (a subprocess with that checkout first on
PYTHONPATH; its own copy of the eval kernels) and by the ksbuild this script imports; both packages are loaded
(ksbuild.load) and each checked against reference.py as bench.py checks. Then per workload (bench.py's), ROUNDS
rounds of old F, old J, new F, new J in turn, each the mean of this thread's CPU time over calls for at least
SECONDS; the table gives the medians, and J/F as the median of each round's ratio (a shared machine's load moves F
and J of one round together). The rounds put the two trees side by side where two runs of bench.py minutes apart
differ by up to 1.5x on single rows.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402  (the workloads, the checks and the published figures)
import evals  # noqa: E402


def build(checkout: Path, out: Path):
    """The package of checkout's benchmarks/gradbench/manifest.toml built by checkout's ksbuild into out, loaded
    by this process's ksbuild."""
    import ksbuild
    if not (out / "done").exists():
        manifest = checkout / "benchmarks" / "gradbench" / "manifest.toml"
        code = f"import ksbuild; ksbuild.build({str(manifest)!r}, out={str(out / 'pkg')!r}, quiet=True)"
        env = dict(os.environ, PYTHONPATH=str(checkout))
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=out.parent)
        (out / "done").write_text("")
    return ksbuild.load(out / "pkg")


def mean_cpu(call, seconds: float) -> float:
    """Seconds of this thread's CPU time per call, the mean over calls lasting at least `seconds`."""
    _, times = evals.run_timed(call, 3, seconds, time.thread_time_ns)
    return sum(times) / len(times) * 1e-9


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path, help="a checkout of the old ksbuild (git worktree add /tmp/old REV)")
    p.add_argument("--evals", default="lse,kmeans,llsq,gmm")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--seconds", type=float, default=0.15)
    p.add_argument("--out", type=Path, default=Path("/tmp/gradbench-compare"), help="where the packages go")
    p.add_argument("--gradbench", default=os.environ.get("GRADBENCH"), help="a gradbench checkout (ht's data)")
    args = p.parse_args(argv)
    args.full = False
    args.out.mkdir(parents=True, exist_ok=True)
    pkgs = {"old": build(args.old.resolve(), args.out / "old"), "new": build(HERE.parents[1], args.out / "new")}
    assert pkgs["old"].lib._handle != pkgs["new"].lib._handle, "one library loaded twice"
    manual = __import__("json").loads((HERE / "published.json").read_text())
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds of old F, old J, new F, new J, CPU time\n")
    print("| eval | workload | old F ms | old J ms | old J/F | new F ms | new J ms | new J/F | manual | err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for module in args.evals.split(","):
        for name, inp in bench.WORKLOADS[module](args):
            want = bench.expected(module, inp)
            calls, err = {}, 0.0
            for tag, pkg in pkgs.items():
                for key, function, target in zip("FJ", evals.FUNCTIONS[module], want):
                    call, to_json = evals.calls(pkg, module, function, inp)
                    err = max(err, bench.rel_error(bench.flat(to_json(call())), target.ravel()
                                                   if hasattr(target, "ravel") else target))
                    calls[tag, key] = call
            samples = {k: [] for k in calls}
            for _ in range(args.rounds):
                for k, call in calls.items():
                    samples[k].append(mean_cpu(call, args.seconds))
            cells = [module, name]
            for tag in pkgs:
                f, j = samples[tag, "F"], samples[tag, "J"]
                ratio = statistics.median(b / a for a, b in zip(f, j))
                cells += [f"{statistics.median(f) * 1e3:.4g}", f"{statistics.median(j) * 1e3:.4g}", f"{ratio:.2f}"]
            cells += [bench.published_ratios(manual, module, name)[0], f"{err:.0e}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
