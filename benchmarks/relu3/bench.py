"""relu3 benchmark: ksbuild's compiled vrelu3 / vrelu3_vjp against PyTorch, torch.compile, numpy, memcpy.

    PYTHONPATH=. python benchmarks/relu3/bench.py [--sizes 1e3,1e5,1e6,1e7] [--repeat 7]

Every case runs on the same float32 input x (uniform in [-2, 3], so all three branches of relu3
occur) and, where the API allows it, writes into a preallocated output. Each reported time is
the median over --repeat measurements; one measurement times a loop of k calls, with k chosen
so the loop takes at least --min-ms (20 ms by default), and divides by k.

Forward (relu3 over the array):
- ksbuild (raw C call): the ctypes symbol `activations_vrelu3` called directly with pointers.
  This is the baseline of every ratio.
- ksbuild (Python wrapper): `pkg.vrelu3(x, out=y)`: the raw call plus argument checking.
- torch eager, where form: `torch.where(x < 0, 0, torch.where(x < 1, x**3 / 3, x - 2/3), out=y)`.
- torch eager, vectorized form: `torch.add(x.clamp(0, 1)**3 / 3, (x - 1).clamp(min=0), out=y)`.
- torch.compile, where form: the where form (with out=) compiled in the default mode; warmed up
  first, compile time not counted; "n/a" with the reason if torch.compile fails.
- numpy, where form: `np.where(x < 0, 0, np.where(x < 1, x**3 / 3, x - 2/3))`; np.where has no
  out=, so the result is copied into y (np.copyto).
- memcpy: `np.copyto(y, x)`: the same bytes read and written, the physical limit.

Backward (the vjp with a random cotangent ct):
- ksbuild (raw C call) / (Python wrapper): `activations_vrelu3_vjp` / `pkg.vrelu3_vjp(x, ct, out=g)`.
- torch autograd, vectorized form and where form: forward AND backward timed together
  (x.requires_grad_(); f(x).backward(ct)), as a training step pays for both; x.grad is
  allocated by autograd.
- torch.compile of the vjp: `torch.func.vjp` of the where form (or `torch.autograd.grad` if that
  fails), result copied into g inside the compiled function.
- numpy analytic derivative: `np.multiply(np.where(x < 0, 0, np.where(x < 1, x*x, 1)), ct, out=g)`.
- memcpy: np.copyto of 1.5 n floats: the same 12 bytes per element (read x and ct, write g).

The ksbuild kernels and numpy are single-threaded; torch uses its default thread count
(printed in the header).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import ksbuild

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "relu3" / "manifest.toml"
BASELINE = "ksbuild (raw C call)"
ZERO = torch.zeros(())  # torch.where with out= needs tensor operands; a 0-d tensor broadcasts


# ----------------------------------------------------------------------------- the functions
def torch_where(x, out=None):
    """relu3 as nested torch.where (the direct translation of the if/elif/else)."""
    return torch.where(x < 0, ZERO, torch.where(x < 1, x**3 / 3, x - 2 / 3), out=out)


def torch_vectorized(x, out=None):
    """relu3 written branch-free with clamp: x³/3 on [0, 1] plus the linear part above 1."""
    return torch.add(x.clamp(0, 1) ** 3 / 3, (x - 1).clamp(min=0), out=out)


def numpy_where(x, out):
    """relu3 with np.where, copied into `out` (np.where has no out=)."""
    np.copyto(out, np.where(x < 0, 0, np.where(x < 1, x**3 / 3, x - 2 / 3)))


def numpy_vjp(x, ct, out):
    """The analytic derivative of relu3 times the cotangent."""
    np.multiply(np.where(x < 0, 0, np.where(x < 1, x * x, 1)), ct, out=out)


def reference(x: np.ndarray, ct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """relu3(x) and its vjp in float64, to check every case before timing it."""
    x64 = x.astype(np.float64)
    y = np.where(x64 < 0, 0, np.where(x64 < 1, x64**3 / 3, x64 - 2 / 3))
    return y, np.where(x64 < 0, 0, np.where(x64 < 1, x64 * x64, 1)) * ct


# ----------------------------------------------------------------------------- the cases
@dataclass
class Case:
    """One row of a table: a zero-argument call to time and how to read its result (or why n/a)."""

    name: str
    run: Callable[[], object] | None
    result: Callable[[], np.ndarray] | None = None
    na: str = ""


@dataclass
class Data:
    """Inputs and preallocated outputs of one size; the torch tensors share the numpy memory."""

    x: np.ndarray
    ct: np.ndarray
    y: np.ndarray
    g: np.ndarray

    @classmethod
    def make(cls, n: int, seed: int = 0) -> "Data":
        rng = np.random.default_rng(seed)
        x = rng.uniform(-2.0, 3.0, n).astype(np.float32)
        ct = rng.standard_normal(n).astype(np.float32)
        return cls(x, ct, np.empty_like(x), np.empty_like(x))

    def t(self, name: str) -> torch.Tensor:
        return torch.from_numpy(getattr(self, name))


def raw_symbol(pkg, symbol: str, n_arrays: int):
    """A private ctypes handle on `symbol` (lib[...] does not touch the wrapper's cached one)."""
    fn = pkg.lib[symbol]
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * (n_arrays + 1)
    fn.restype = ctypes.c_int
    return fn


def checked_raw_call(fn, n: int, *arrays: np.ndarray) -> Callable[[], object]:
    """The raw C call with its pointers precomputed; the status is checked once here."""
    ptrs = [a.ctypes.data for a in arrays]
    status = fn(n, *ptrs, None)
    if status != 0:
        raise RuntimeError(f"{fn.__name__} returned status {status}")
    return lambda: fn(n, *ptrs, None)


def compiled_case(name: str, build: Callable[[], Callable[[], object]], result) -> Case:
    """A torch.compile case: build (compile + warm up) now; on any failure the row says n/a and why."""
    try:
        run = build()
        run()
        run()
    except Exception as e:  # noqa: BLE001 - anything torch.compile raises makes the row n/a
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Case(name, None, na=f"{type(e).__name__}: {reason}"[:100])
    return Case(name, run, result)


def autograd_case(name: str, f, d: Data) -> Case:
    """Forward + backward through torch autograd; the result is x.grad."""
    leaf = d.t("x").detach().requires_grad_()
    ct = d.t("ct")

    def run():
        leaf.grad = None
        f(leaf).backward(ct)

    return Case(name, run, lambda: leaf.grad.numpy())


def forward_cases(pkg, d: Data, compiled) -> list[Case]:
    """All forward rows for one size."""
    x, y, xt, yt = d.x, d.y, d.t("x"), d.t("y")
    raw = checked_raw_call(raw_symbol(pkg, "activations_vrelu3", 2), len(x), x, y)
    out = lambda: y  # noqa: E731 - every forward case writes y
    return [
        Case(BASELINE, raw, out),
        Case("ksbuild (Python wrapper)", lambda: pkg.vrelu3(x, out=y), out),
        Case("torch eager, where form", lambda: torch_where(xt, out=yt), out),
        Case("torch eager, vectorized form", lambda: torch_vectorized(xt, out=yt), out),
        compiled_case("torch.compile, where form", lambda: (lambda: compiled["fwd"](xt, yt)), out)
        if "fwd" in compiled else Case("torch.compile, where form", None, na=compiled["fwd_na"]),
        Case("numpy, where form", lambda: numpy_where(x, y), out),
        Case("memcpy (np.copyto, same bytes)", lambda: np.copyto(y, x)),
    ]


def backward_cases(pkg, d: Data, compiled) -> list[Case]:
    """All backward (vjp) rows for one size."""
    x, ct, g = d.x, d.ct, d.g
    xt, ctt, gt = d.t("x"), d.t("ct"), d.t("g")
    raw = checked_raw_call(raw_symbol(pkg, "activations_vrelu3_vjp", 3), len(x), x, ct, g)
    out = lambda: g  # noqa: E731
    src, dst = np.ones(len(x) * 3 // 2, np.float32), np.empty(len(x) * 3 // 2, np.float32)
    name = f"torch.compile, {compiled.get('vjp_how', 'vjp')}"
    return [
        Case(BASELINE, raw, out),
        Case("ksbuild (Python wrapper)", lambda: pkg.vrelu3_vjp(x, ct, out=g), out),
        autograd_case("torch autograd fwd+bwd, vectorized", torch_vectorized, d),
        autograd_case("torch autograd fwd+bwd, where form", torch_where, d),
        compiled_case(name, lambda: (lambda: compiled["vjp"](xt, ctt, gt)), out)
        if "vjp" in compiled else Case(name, None, na=compiled["vjp_na"]),
        Case("numpy analytic derivative", lambda: numpy_vjp(x, ct, g), out),
        Case("memcpy (np.copyto, same bytes)", lambda: np.copyto(dst, src)),
    ]


# ----------------------------------------------------------------------------- torch.compile
def where_vjp_func(x, ct, out):
    """The vjp of the where form through torch.func.vjp, written into out."""
    _, pull = torch.func.vjp(torch_where, x)
    out.copy_(pull(ct)[0])


def where_vjp_autograd(x, ct, out):
    """The vjp of the where form through torch.autograd.grad, written into out."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(torch_where(leaf), leaf, ct)
    out.copy_(grad)


def compile_all() -> dict:
    """torch.compile the forward and one vjp formulation, probing each on a small input.

    Returns {"fwd": fn} or {"fwd_na": reason}, and {"vjp": fn, "vjp_how": label} or {"vjp_na": reason}.
    """
    x, ct, out = torch.linspace(-2, 3, 64), torch.ones(64), torch.empty(64)
    res: dict = {}
    try:
        fwd = torch.compile(lambda x, y: torch_where(x, out=y))
        fwd(x, out)
        res["fwd"] = fwd
    except Exception as e:  # noqa: BLE001
        res["fwd_na"] = _reason(e)
    reasons = []
    for how, fn in (("torch.func.vjp", where_vjp_func), ("autograd.grad", where_vjp_autograd)):
        try:
            cfn = torch.compile(fn)
            cfn(x, ct, out)
            res["vjp"], res["vjp_how"] = cfn, f"{how}, where form"
            break
        except Exception as e:  # noqa: BLE001
            reasons.append(f"{how}: {_reason(e)}")
    else:
        res["vjp_na"] = "; ".join(reasons)
    return res


def _reason(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:100]


# ----------------------------------------------------------------------------- timing
def loop_time(fn: Callable[[], object], k: int) -> float:
    start = time.perf_counter()
    for _ in range(k):
        fn()
    return time.perf_counter() - start


def median_time(fn: Callable[[], object], repeat: int, min_s: float) -> float:
    """Seconds per call: the median over `repeat` loops of k calls, each loop >= min_s."""
    fn()
    k = 1
    while (t := loop_time(fn, k)) < min_s:
        k = max(2 * k, int(k * 1.2 * min_s / max(t, 1e-9)))
    return statistics.median(loop_time(fn, k) / k for _ in range(repeat))


def check(case: Case, want: np.ndarray, what: str) -> None:
    """Run a case once and compare its result with the float64 reference."""
    case.run()
    if case.result is not None:
        np.testing.assert_allclose(case.result(), want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{what}: '{case.name}' is wrong")


# ----------------------------------------------------------------------------- report
def print_header(pkg) -> None:
    cpu = next((ln.split(":", 1)[1].strip() for ln in _cpuinfo() if ln.startswith("model name")), platform.machine())
    print("relu3 benchmark: ksbuild vs PyTorch, torch.compile, numpy, memcpy (float32, median times)")
    print(f"  CPU: {cpu}, os.cpu_count() = {os.cpu_count()}; torch {torch.__version__} with "
          f"{torch.get_num_threads()} threads (default); numpy {np.__version__}; python {platform.python_version()}")
    print(f"  ksbuild package: {pkg.root}")
    print("  ksbuild kernels and numpy run single-threaded; torch uses its default threads.")
    print(f"  ratios are relative to '{BASELINE}' (the ctypes symbol called directly);")
    print("  the Python wrapper is a separate row. torch autograd rows time forward + backward.")


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def print_table(title: str, cases: list[Case], times: dict[str, float]) -> None:
    base = times[BASELINE]
    print(f"\n  {title}")
    print(f"    {'case':<44} {'time (µs)':>12} {'× ksbuild':>10}")
    for c in cases:
        if c.name not in times:
            print(f"    {c.name:<44} {'n/a':>12}   ({c.na})")
            continue
        t = times[c.name]
        print(f"    {c.name:<44} {t * 1e6:>12.1f} {t / base:>9.2f}×")
    print(f"    ksbuild / memcpy: {base / times['memcpy (np.copyto, same bytes)']:.2f}×")


def run_size(pkg, n: int, compiled: dict, repeat: int, min_s: float) -> tuple[dict, dict]:
    """Check and time every case at size n; returns the forward and backward times."""
    d = Data.make(n)
    want_y, want_g = reference(d.x, d.ct)
    results = []
    for title, cases, want in (("forward: y = vrelu3(x)", forward_cases(pkg, d, compiled), want_y),
                               ("backward: g = vrelu3_vjp(x, ct)", backward_cases(pkg, d, compiled), want_g)):
        times = {}
        for c in cases:
            if c.run is None:
                continue
            check(c, want, title)
            times[c.name] = median_time(c.run, repeat, min_s)
        print_table(title, cases, times)
        results.append(times)
    return results[0], results[1]


def print_acceptance(n: int, fwd: dict, bwd: dict) -> None:
    print(f"\nacceptance ratios at n = {n:.0e} (ksbuild = raw C call):")
    print(f"  vrelu3 vs memcpy: {fwd[BASELINE] / fwd['memcpy (np.copyto, same bytes)']:.2f}×")
    print(f"  vrelu3 speedup vs torch.where eager: {fwd['torch eager, where form'] / fwd[BASELINE]:.1f}×")
    print(f"  vrelu3_vjp speedup vs torch autograd (vectorized): "
          f"{bwd['torch autograd fwd+bwd, vectorized'] / bwd[BASELINE]:.1f}×")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1e3,1e5,1e6,1e7", help="comma-separated element counts (default %(default)s)")
    p.add_argument("--repeat", type=int, default=7, help="measurements per case; the median is reported (default 7)")
    p.add_argument("--min-ms", type=float, default=20.0, help="minimum duration of one measurement (default 20 ms)")
    args = p.parse_args(argv)
    args.sizes = [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    pkg = ksbuild.build(MANIFEST, portable=True)
    print_header(pkg)
    print("  compiling with torch.compile (not timed) ...", flush=True)
    compiled = compile_all()
    last = None
    for n in args.sizes:
        print(f"\n=== n = {n:,} ===", flush=True)
        last = (n, *run_size(pkg, n, compiled, args.repeat, args.min_ms / 1e3))
    if last is not None:
        print_acceptance(*last)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
