"""J/F of whole Jacobians on a hand-tracking-like kernel (issue 32): jacfwd vs jacrev vs what users wrote before.

    PYTHONPATH=. python benchmarks/jacobian/bench.py [--m 100,1000] [--repeat 7] [--min-ms 20]

hand.py's residual maps 26 pose parameters to 3 m residuals (m points). F is the compiled residual,
each J row a compiled Jacobian d residuals / d theta ([m, 3, 26]); J/F is the time of J over the time of
F, both raw C calls through ctypes (pointers and workspace prepared once), float64, one thread. The
rows `vmap(vjp)` and `vmap(jvp)` are the forms a user had to write before jacfwd/jacrev: the identity
basis is passed in (its construction is not timed), and vmap(jvp) also carries zero tangents for the
data. torch.func's jacfwd/jacrev of the same source run eagerly, for context (J/F over torch's own F).
Every Jacobian is checked against torch.func.jacfwd first.
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
N_THETA = 26


def make_data(m: int, seed: int = 0) -> list[np.ndarray]:
    """(theta, base, weights, offsets, points): a random pose, a random rest hand with skinning weights
    that sum to 1 per point."""
    rng = np.random.default_rng(seed)
    weights = rng.random((m, 16))
    weights /= weights.sum(axis=1, keepdims=True)
    return [rng.standard_normal(N_THETA) * 0.5, rng.standard_normal((m, 3)), weights,
            rng.standard_normal((16, 3)), rng.standard_normal((m, 3))]


def raw_call(pkg, export: str, dims: list[int], ins: list[np.ndarray], outs: list[np.ndarray]) -> Callable:
    """The export's C function with its pointers and workspace prepared; the status is checked once here."""
    name = f"hand_jac_{export}"
    size = pkg.lib[f"{name}_workspace_size"]
    size.argtypes, size.restype = [ctypes.c_int64] * len(dims), ctypes.c_size_t
    workspace = np.empty(size(*dims) // 8 + 2, dtype=np.float64)
    fn = pkg.lib[name]
    fn.argtypes = [ctypes.c_int64] * len(dims) + [ctypes.c_void_p] * (len(ins) + len(outs) + 1)
    fn.restype = ctypes.c_int
    keep = ins + outs + [workspace]  # (the closure holds the arrays whose addresses it passes)
    args = dims + [a.ctypes.data for a in keep]
    if fn(*args) != 0:
        raise RuntimeError(f"{name} failed")
    return lambda: fn(*args) if keep else None


def min_time(fn: Callable, repeats: int, min_s: float) -> float:
    """The least time per call over `repeats` loops, each long enough to last min_s."""
    k, best = 1, float("inf")
    while True:
        t = time.perf_counter()
        for _ in range(k):
            fn()
        if time.perf_counter() - t >= min_s:
            break
        k *= 2
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(k):
            fn()
        best = min(best, (time.perf_counter() - t) / k)
    return best


def ksbuild_rows(pkg, data: list[np.ndarray], want: np.ndarray) -> list[tuple[str, Callable]]:
    """(row name, timed call) for F and every compiled Jacobian, each checked against want."""
    m = data[1].shape[0]
    rows = [("F (compiled residual)", raw_call(pkg, "f", [m], data, [np.empty((m, 3))]))]
    for export in ("jacfwd", "jacrev", "jacobian"):
        out = np.empty((m, 3, N_THETA))
        rows.append((export, raw_call(pkg, export, [m], data, [out])))
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-12)
    basis = np.eye(3 * m).reshape(3 * m, m, 3)
    out = np.empty((3 * m, N_THETA))
    rows.append(("vmap(vjp) over a basis", raw_call(pkg, "vmap_vjp", [m, 3 * m], data + [basis], [out])))
    np.testing.assert_allclose(out.reshape(m, 3, N_THETA), want, rtol=1e-9, atol=1e-12)
    zeros = [np.zeros_like(a) for a in data[1:]]
    out = np.empty((N_THETA, m, 3))
    rows.append(("vmap(jvp) over a basis", raw_call(pkg, "vmap_jvp", [m, N_THETA], data + [np.eye(N_THETA)] + zeros,
                                                    [out])))
    np.testing.assert_allclose(np.moveaxis(out, 0, -1), want, rtol=1e-9, atol=1e-12)
    return rows


def torch_rows(data: list[np.ndarray]) -> list[tuple[str, Callable]]:
    """torch eager F, torch.func.jacfwd and jacrev of the same source."""
    import hand
    import torch

    args = [torch.from_numpy(a) for a in data]
    return [("torch eager F", lambda: hand.hand_residuals(*args)),
            ("torch.func.jacfwd", lambda: torch.func.jacfwd(hand.hand_residuals)(*args)),
            ("torch.func.jacrev", lambda: torch.func.jacrev(hand.hand_residuals)(*args))]


def reference(data: list[np.ndarray]) -> np.ndarray:
    import hand
    import torch

    return torch.func.jacfwd(hand.hand_residuals)(*[torch.from_numpy(a) for a in data]).numpy()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", default="100,1000", help="numbers of points, comma-separated (3 m residuals)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-ms", type=float, default=20.0)
    args = p.parse_args(argv)
    import torch

    import ksbuild
    torch.set_num_threads(1)
    sys.path.insert(0, str(HERE))
    pkg = ksbuild.build(HERE / "manifest.toml")
    for m in (int(s) for s in args.m.split(",")):
        data = make_data(m)
        print(f"\nm = {m} points: {3 * m} residuals, {N_THETA} parameters (float64, one thread; min of {args.repeat})")
        print(f"{'row':28} {'time us':>10} {'J/F':>8}")
        for group in (ksbuild_rows(pkg, data, reference(data)), torch_rows(data)):
            f_time = None
            for name, fn in group:
                t = min_time(fn, args.repeat, args.min_ms / 1000)
                f_time = f_time or t
                print(f"{name:28} {t * 1e6:10.1f} {t / f_time:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
