"""A scalar kernel with a loop, vmapped: Horner's rule over a module-level tuple of coefficients.

    PYTHONPATH=. python benchmarks/loops/horner.py [--sizes 1e4,1e6,4e6] [--repeat 7]

    def horner(x: float) -> float:
        acc = 0.0
        for c in reversed(COEFFS):
            acc = acc * x + c
        return acc

`vmap(horner)` compiled by ksbuild against the same polynomial as torch eager (the loop over the
coefficients on whole tensors), torch.compile of that, numpy (the same loop, with out=) and memcpy of
the same bytes (the physical limit). float32, one thread for ksbuild and numpy; each time is the median
of --repeat measurements, each a loop of calls lasting at least 20 ms. Every case is checked against
float64 numpy first. The ratios are times over ksbuild's (above 1: ksbuild is faster).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import ksbuild

COEFFS = (1.0, -0.5, 0.25, -0.125, 0.0625, -0.03125)
KERNEL = f'''
COEFFS = {COEFFS!r}


def horner(x: float) -> float:
    acc = 0.0
    for c in reversed(COEFFS):
        acc = acc * x + c
    return acc
'''
MANIFEST = ('[package]\nname = "hornerbench"\n[kernels.horner]\npython = "k.py:horner"\n'
            '[exports]\nvhorner = "vmap(horner)"\n')


def timed(fn, min_ms: float = 20.0, repeat: int = 7) -> float:
    fn()
    k, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        t = time.perf_counter() - t0
        if t * 1e3 >= min_ms:
            break
        k *= 2
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        runs.append((time.perf_counter() - t0) / k)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e6,4e6")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="horner_bench_"))
    (root / "k.py").write_text(KERNEL)
    (root / "manifest.toml").write_text(MANIFEST)
    pkg = ksbuild.build(root / "manifest.toml", portable=True)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None

    def torch_horner(x):
        acc = torch.zeros_like(x)
        for c in reversed(COEFFS):
            acc = acc * x + c
        return acc

    compiled = torch.compile(torch_horner) if torch is not None else None
    print(f"vmap(horner), {len(COEFFS)} coefficients, float32; times in microseconds, ratio = time / ksbuild's")
    print(f"{'n':>10} {'ksbuild':>10} {'numpy':>16} {'torch eager':>16} {'torch.compile':>16} {'memcpy':>16}")
    for n in (int(float(s)) for s in a.sizes.split(",")):
        x = np.random.default_rng(0).uniform(-1.5, 1.5, n).astype(np.float32)
        y, tmp = np.empty_like(x), np.empty_like(x)
        want = np.zeros(n)
        for c in reversed(COEFFS):
            want = want * x.astype(np.float64) + c

        def numpy_horner():
            y.fill(0.0)
            for c in reversed(COEFFS):
                np.multiply(y, x, out=tmp)
                np.add(tmp, c, out=y)
        cases = {"ksbuild": lambda: pkg.vhorner(x, out=y), "numpy": numpy_horner}
        if torch is not None:
            xt = torch.from_numpy(x)
            cases["torch eager"] = lambda: torch_horner(xt)
            cases["torch.compile"] = lambda: compiled(xt)
        times = {}
        for name, fn in cases.items():
            got = fn()
            got = y if got is None or name == "ksbuild" else np.asarray(got)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            times[name] = timed(fn, repeat=a.repeat)
        times["memcpy"] = timed(lambda: np.copyto(y, x), repeat=a.repeat)
        base = times["ksbuild"]
        cells = [f"{times[k] * 1e6:8.1f} ({times[k] / base:4.2f}x)" if k in times else f"{'n/a':>16}"
                 for k in ("numpy", "torch eager", "torch.compile", "memcpy")]
        print(f"{n:>10} {base * 1e6:10.1f} " + " ".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
