"""GradBench's evals on ksbuild: F and J times and J/F, next to GradBench's published J/F.

    PYTHONPATH=. python benchmarks/gradbench/bench.py [--evals lse,kmeans,llsq,gmm,ba,ht,lstm,det,ode,particle,saddle]
        [--full] [--min-seconds 0.5] [--clock cpu] [--rounds 1] [--gradbench DIR]   # DIR: a gradbench checkout (ht's data)

For each eval and workload (GradBench's input generators and workload names, evals/<eval>/run.py),
builds this folder's manifest, checks ksbuild's primal and derivative against reference.py, then
times each as GradBench's scorer does: the mean over calls repeated for at least --min-seconds
(one thread, float64; J includes its forward pass). The published columns are J/F of GradBench's
nightly run (published.json says exactly where they come from): hand-written C++ ("manual"),
Enzyme, Tapenade and JAX; "-" where GradBench has no such tool or workload. particle and saddle have four variants
(outer and inner mode) of one answer and no J/F: their table is ms per variant, ksbuild's and the published Enzyme's
and Futhark's.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import evals  # noqa: E402
import reference as ref  # noqa: E402

PUBLISHED_TOOLS = ("manual", "enzyme", "tapenade", "jax")


# ----------------------------------------------------------------------------- workloads
def lse_workloads(args):
    """(name, input) of evals/lse/run.py: n from 2500 to 1280000."""
    sizes = [2500 * 2 ** i for i in range(10)] if args.full else [2500, 40000, 640000]
    return [(f"n={n}", ref.lse_input(n)) for n in sizes]


def llsq_workloads(args):
    """evals/llsq/run.py: m = 128, n from 16 to 16392."""
    sizes = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8196, 16392] if args.full else [16, 1024, 16392]
    return [(f"n={n},m=128", ref.llsq_input(n, 128)) for n in sizes]


def kmeans_workloads(args):
    """evals/kmeans/run.py: k in {10, 100, 1000}, n in {1000, 10000}, d in {8, 16}."""
    grid = [(k, n, d) for k in (10, 100, 1000) for n in (1000, 10000) for d in (8, 16)]
    if not args.full:
        grid = [(10, 1000, 8), (100, 10000, 8), (1000, 10000, 16)]
    return [(f"k={k},n={n},d={d}", ref.kmeans_input(k, n, d)) for k, n, d in sorted(grid, key=math.prod)]


def gmm_workloads(args):
    """evals/gmm/run.py: d in {2, 10, 20, 32, 64}, k in {5, 10, 25, 50, 100}, n = 1000."""
    grid = [(d, k) for d in (2, 10, 20, 32, 64) for k in (5, 10, 25, 50, 100)]
    if not args.full:
        grid = [(2, 5), (10, 25), (20, 50), (64, 10)]
    return [(f"{d}_{k}_1000", ref.gmm_input(d, k, 1000)) for d, k in sorted(grid, key=math.prod)]


BA_FILES = ("ba1_n49_m7776_p31843 ba2_n21_m11315_p36455 ba3_n161_m48126_p182072 ba4_n372_m47423_p204472 "
            "ba5_n257_m65132_p225911 ba6_n539_m65220_p277273 ba7_n93_m61203_p287451 ba8_n88_m64298_p383937 "
            "ba9_n810_m88814_p393775 ba10_n1197_m126327_p563734 ba11_n1723_m156502_p678718 "
            "ba12_n253_m163691_p899155 ba13_n245_m198739_p1091386 ba14_n356_m226730_p1255268").split()


def ba_workloads(args):
    """evals/ba/run.py: the data files ba1 to ba14 (n, m, p in the name; the same camera, point, weight, feature)."""
    names = BA_FILES if args.full else BA_FILES[:3]
    return [(name, ref.ba_input(*(int(part[1:]) for part in name.split("_")[1:]))) for name in names]


def ht_workloads(args):
    """evals/ht/run.py's defaults: evals/ht/data/complicated_big/hand1..12 of a gradbench/gradbench checkout
    (--gradbench; GradBench generates none); none without one."""
    if not args.gradbench:
        print("ht: skipped (its inputs are GradBench's data files: pass --gradbench DIR, a gradbench checkout)")
        return []
    data = Path(args.gradbench) / "evals" / "ht" / "data" / "complicated_big"
    names = sorted((f.stem for f in data.glob("hand*.txt")), key=lambda name: int(name[4:].split("_")[0]))
    return [(name, ref.ht_read(data, name)) for name in (names if args.full else names[:3])]


def lstm_workloads(args):
    """evals/lstm/run.py: l in {2, 4, 6}, c in {1024, 4096, 8192}, ordered by l c (random 7-bit text: see
    reference.lstm_input)."""
    grid = sorted([(layers, c) for layers in (2, 4, 6) for c in (1024, 4096, 8192)], key=math.prod)
    if not args.full:
        grid = [(2, 1024), (6, 1024), (2, 8192)]
    return [(f"l={layers},c={c}", ref.lstm_input(layers, c)) for layers, c in grid]


def det_workloads(args):
    """evals/det/run.py: l from 5 to 11 (ours does l² 2^l products, the recursion about e l!: see det.py)."""
    sizes = range(5, 12) if args.full else (5, 8, 11)
    return [(f"{ell}", ref.det_input(ell)) for ell in sizes]


def ode_workloads(args):
    """evals/ode/run.py: n in {1000, 10000, 100000}, s in {1, 10, 100}, ordered by n s."""
    grid = sorted([(n, s) for n in (1000, 10000, 100000) for s in (1, 10, 100)], key=math.prod)
    if not args.full:
        grid = [(1000, 1), (1000, 100), (100000, 10)]
    return [(f"n={n},s={s}", ref.ode_input(n, s)) for n, s in grid]


def particle_workloads(args):
    """evals/particle/run.py: w = 0, the four variants."""
    return [("w=0", {"w": 0.0})]


def saddle_workloads(args):
    """evals/saddle/run.py: start (1, 1), the four variants."""
    return [("start=(1,1)", {"start": [1.0, 1.0]})]


WORKLOADS = {"lse": lse_workloads, "kmeans": kmeans_workloads, "llsq": llsq_workloads, "gmm": gmm_workloads,
             "ba": ba_workloads, "ht": ht_workloads, "lstm": lstm_workloads, "det": det_workloads,
             "ode": ode_workloads, "particle": particle_workloads, "saddle": saddle_workloads}
NESTED = ("particle", "saddle")   # no primal and derivative: four variants (outer, inner mode) of one answer
NESTED_TOOLS = ("enzyme", "futhark")


# ----------------------------------------------------------------------------- checks
def rel_error(a, b) -> float:
    """max |a - b| / max(1, |a| + |b|) (ADBench's measure)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a) + np.abs(b)), initial=0.0))


def expected(module: str, inp: dict) -> tuple:
    """(primal, derivative) of the reference, the derivative flattened."""
    if module == "lse":
        return ref.lse_numpy(inp["x"]), ref.lse_gradient_numpy(inp["x"])
    if module == "llsq":
        return ref.llsq_value_and_grad(inp["x"], inp["n"])
    if module == "kmeans":
        return (ref.kmeans_cost_numpy(inp["points"], inp["centroids"]),
                ref.kmeans_dir_numpy(inp["points"], inp["centroids"]))
    if module == "ba":
        return tuple(flat(output) for output in ref.ba_expected(inp))
    if module == "ht":
        return ref.ht_expected(inp)
    if module == "lstm":
        return ref.lstm_expected(inp)
    if module in ("det", "ode"):
        return getattr(ref, module + "_expected")(inp)
    if module in NESTED:
        return (getattr(ref, module + "_expected")(inp),) * 4
    value, grads = ref.gmm_value_and_grad(inp)
    return value, np.concatenate([g.ravel() for g in grads.values()])


def flat(output) -> np.ndarray:
    """A JSON output (number, lists, or a dict of lists) as one flat float64 array."""
    if isinstance(output, dict):
        return np.concatenate([flat(v) for v in output.values()])
    return np.asarray(output, dtype=np.float64).ravel()


# ----------------------------------------------------------------------------- timing
def mean_time(call, min_seconds: float, clock) -> tuple[object, float]:
    """(result, mean seconds per call) over calls repeated for at least min_seconds (after one warm-up)."""
    call()
    result, times = evals.run_timed(call, 3, min_seconds, clock)
    return result, sum(times) / len(times) * 1e-9


def measure(pkg, module: str, inp: dict, args) -> dict:
    """F and J seconds, J/F and the larger of the two relative errors. With --rounds R: F and J timed in turn R
    times (each for --min-seconds), their medians and the median of the rounds' J/F, so that a change of the
    machine's load between the two is not read as J/F."""
    want = expected(module, inp)
    clock = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    calls = [evals.calls(pkg, module, function, inp) for function in evals.FUNCTIONS[module]]
    row, times = {}, {"f": [], "j": []}
    for _ in range(args.rounds):
        for key, (call, to_json), target in zip(("f", "j"), calls, want):
            result, seconds = mean_time(call, args.min_seconds, clock)
            times[key].append(seconds)
            row["err_" + key] = rel_error(flat(to_json(result)), np.ravel(target))
    row["f"], row["j"] = float(np.median(times["f"])), float(np.median(times["j"]))
    row["j/f"] = float(np.median(np.divide(times["j"], times["f"])))
    return row


# ----------------------------------------------------------------------------- table
def published_ratios(published: dict, module: str, workload: str) -> list[str]:
    """J/F of each published tool at this workload, '-' where missing."""
    tools = published["evals"][module]["tools"]
    cells = []
    for tool in PUBLISHED_TOOLS:
        f_j = tools.get(tool, {}).get(workload)
        cells.append(f"{f_j[1] / f_j[0]:.2f}" if f_j and f_j[0] > 0 else "-")
    return cells


def print_nested(pkg, module: str, published: dict, args) -> None:
    """particle's and saddle's table: ms per variant, ksbuild's and the published tools'."""
    tools = published["evals"][module]["tools"]
    print(f"\n{module}: ms per variant (outer, inner mode), ksbuild and published " + ", ".join(NESTED_TOOLS))
    print("| variant | ksbuild ms | err | " + " | ".join(NESTED_TOOLS) + " |\n|" + "---|" * (3 + len(NESTED_TOOLS)))
    clock = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    for name, inp in WORKLOADS[module](args):
        want = expected(module, inp)[0]
        for function in evals.FUNCTIONS[module]:
            call, to_json = evals.calls(pkg, module, function, inp)
            result, seconds = mean_time(call, args.min_seconds, clock)
            cells = [f"{name} {function}", f"{seconds * 1e3:.4g}", f"{rel_error(flat(to_json(result)), want):.0e}"]
            cells += [f"{tools[t][function] * 1e3:.4g}" if function in tools.get(t, {}) else "-" for t in NESTED_TOOLS]
            print("| " + " | ".join(cells) + " |", flush=True)


def print_eval(pkg, module: str, published: dict, args) -> None:
    """One table: a line per workload."""
    if module in NESTED:
        return print_nested(pkg, module, published, args)
    print(f"\n{module}: ksbuild F ms, J ms, J/F, max rel. error | published J/F: " + ", ".join(PUBLISHED_TOOLS))
    head = ["workload", "F ms", "J ms", "J/F", "err"] + list(PUBLISHED_TOOLS)
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, inp in WORKLOADS[module](args):
        r = measure(pkg, module, inp, args)
        cells = [name, f"{r['f'] * 1e3:.4g}", f"{r['j'] * 1e3:.4g}", f"{r['j/f']:.2f}",
                 f"{max(r['err_f'], r['err_j']):.0e}"] + published_ratios(published, module, name)
        print("| " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str]) -> int:
    """Build, then print each eval's table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--evals", default=",".join(WORKLOADS), help="comma-separated subset of " + ",".join(WORKLOADS))
    p.add_argument("--full", action="store_true", help="every workload of GradBench's defaults (slow)")
    p.add_argument("--gradbench", default=os.environ.get("GRADBENCH"),
                   help="a gradbench/gradbench checkout, for ht's data files (default: $GRADBENCH)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall time as GradBench, or this thread's CPU time (a shared machine's waits left out)")
    p.add_argument("--min-seconds", type=float, default=0.5, help="time each function for at least this long")
    p.add_argument("--rounds", type=int, default=1,
                   help="time F and J in turn this many times: medians (default 1: once each, as GradBench's scorer)")
    args = p.parse_args(argv)
    import ksbuild

    pkg = ksbuild.build(HERE / "manifest.toml", quiet=True)
    published = json.loads((HERE / "published.json").read_text())
    print(f"GradBench evals on ksbuild, float64, one thread, {args.clock} time; published figures from:\n  "
          + published["source"])
    for module in args.evals.split(","):
        print_eval(pkg, module, published, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
