"""Loop-style objectives: ksbuild's compiled Python loops against the same loops hand-written in C++.

    PYTHONPATH=. python benchmarks/loops/objectives.py [--gmm 2x5x1000,10x25x10000,20x50x2000] [--ba 1000] [--repeat 7]

kernels.py holds two objectives written as a Python user ports C loops (scalar indexing, for-loops over
observations, components and rows): the ADBench GMM (d × K × n) and ADBench bundle adjustment (M
observations of 40 cameras and 1000 points). hand.cpp holds the same objectives hand-written as ADBench's C++
does (precomputed exp(q) and Σq, buffers for x − μ, Q(x − μ) and the K scores), compiled here with g++ -O3
-march=native -fno-math-errno -fno-trapping-math (ksbuild's own math flags; its kernels run at the best level
the CPU has). All calls go through ctypes with precomputed pointers (the same call overhead on both sides),
float64, one thread. Before timing, the ksbuild value and gradient and the hand value are checked against
vectorized torch references and torch.autograd (ADBench's error |a − b| / max(1, |a| + |b|)).

The table: F = objective time, J = gradient time (ksbuild `grad`, its forward pass included), the ratios
F ksbuild / F hand (the goal: ≤ 1.2) and J / F ksbuild (the goal: ≤ 3). Each time is the median of --repeat
measurements, each a loop of calls lasting at least --min-ms of this thread's CPU time (--clock wall: the wall
clock; on the shared 2-core machine a call longer than a time slice often waits); all contenders of a size are
measured in one run, interleaved.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
import ksbuild  # noqa: E402

MANIFEST = """[package]
name = "loopbench"
[build]
dtype = "float64"
[kernels.gmm]
python = "kernels.py:gmm_loops"
[kernels.ba]
python = "kernels.py:ba_loops"
[exports]
gmm = "gmm"
gmm_grad = "grad(gmm, argnums=(0, 1, 2))"
ba = "ba"
ba_grad = "grad(ba, argnums=(0, 1, 2))"
"""
HAND_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC")


def load_module(path: Path, name: str):
    """A Python file as a module, by path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(root: Path):
    """The ksbuild package of kernels.py and the hand-written library, both built under root."""
    shutil.copy(HERE / "kernels.py", root / "kernels.py")
    (root / "manifest.toml").write_text(MANIFEST)
    pkg = ksbuild.build(root / "manifest.toml")
    lib = root / "libhand.so"
    subprocess.run(["g++", *HAND_FLAGS, str(HERE / "hand.cpp"), "-o", str(lib)], check=True)
    return pkg, ctypes.CDLL(str(lib))


def c_value(v):
    """A Python int, float or numpy array as the ctypes value the C functions take."""
    if isinstance(v, np.ndarray):
        return ctypes.c_void_p(v.ctypes.data)
    return ctypes.c_int64(v) if isinstance(v, int) else ctypes.c_double(v)


def bound(fn, restype, *args):
    """fn(*args) with its ctypes arguments converted once (the call keeps the arrays alive)."""
    values = [c_value(a) for a in args]
    fn.argtypes = [type(v) for v in values]
    fn.restype = restype

    def call():
        return fn(*values)
    call.arrays = args
    return call


def ks_call(pkg, name: str, dims: tuple, inputs: tuple, outputs: tuple):
    """The raw export `loopbench_<name>` with a workspace of the size it asks for; checks the status once."""
    size_fn = pkg.lib[f"loopbench_{name}_workspace_size"]
    size_fn.argtypes = [ctypes.c_int64] * len(dims)
    size_fn.restype = ctypes.c_size_t
    workspace = np.empty(max(1, size_fn(*dims)), np.uint8)
    call = bound(pkg.lib[f"loopbench_{name}"], ctypes.c_int, *dims, *inputs, *outputs, workspace)
    status = call()
    assert status == 0, f"{name}: status {status}"
    return call


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


def timed(fn, min_ms: float, repeat: int) -> list[float]:
    """`repeat` measurements of fn's time in seconds, each a loop of calls lasting at least min_ms."""
    fn()
    k = 1
    while True:
        t0 = clock()
        for _ in range(k):
            fn()
        if (clock() - t0) * 1e3 >= min_ms:
            break
        k *= 2
    runs = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(k):
            fn()
        runs.append((clock() - t0) / k)
    return runs


def interleaved(cases: dict, min_ms: float, repeat: int) -> dict:
    """The median time of each case, measured in rounds that run every case once (load hits all alike)."""
    runs = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            runs[name] += timed(fn, min_ms, 1)
    return {name: statistics.median(r) for name, r in runs.items()}


def rel_error(a, b) -> float:
    """ADBench's error: max |a - b| / max(1, |a| + |b|)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a) + np.abs(b)), initial=0.0))


def gmm_cases(pkg, hand, ref, d: int, K: int, n: int) -> tuple[dict, float]:
    """The three timed calls of one GMM size, and the largest error against torch.autograd."""
    data = ref.make_data(d, K, n)
    a, mu, icf, x, gamma, m = (np.ascontiguousarray(data[k]) if k in ("alphas", "means", "icf", "x") else
                               float(data[k]) for k in ("alphas", "means", "icf", "x", "gamma", "m"))
    T = icf.shape[1]
    value, grads = np.zeros(1), (np.empty_like(a), np.empty_like(mu), np.empty_like(icf))
    dims, inputs = (K, d, T, n), (a, mu, icf, x, gamma, m)
    f = ks_call(pkg, "gmm", dims, inputs, (value,))
    j = ks_call(pkg, "gmm_grad", dims, inputs, grads)
    scratch = np.empty(2 * K * d + 3 * d + 2 * K)
    h = bound(hand.gmm_hand, ctypes.c_double, K, d, n, a, mu, icf, x, gamma, m, scratch)
    want, *want_grads = ref.gmm_grad_torch(data)
    f(), j()
    err = max([rel_error(value[0], want), rel_error(h(), want)]
              + [rel_error(g, w) for g, w in zip(grads, want_grads, strict=True)])
    return {"F ksbuild": f, "F hand": h, "J ksbuild": j}, err


def ba_data(M: int, C: int = 40, P: int = 1000, seed: int = 0) -> dict:
    """Random cameras looking down +z at points in front of them, M observations of random pairs."""
    rng = np.random.default_rng(seed)
    cams = np.zeros((C, 11))
    cams[:, 0:3] = rng.uniform(-0.3, 0.3, (C, 3))
    cams[:, 3:6] = rng.uniform(-1, 1, (C, 3)) - [0, 0, 10]
    cams[:, 6] = rng.uniform(500, 1000, C)
    cams[:, 7:9] = rng.uniform(-10, 10, (C, 2))
    cams[:, 9:11] = rng.uniform(-1e-2, 1e-2, (C, 2))
    return {"cams": cams, "points": rng.uniform(-2, 2, (P, 3)), "w": rng.uniform(0.5, 1.5, M),
            "feats": rng.uniform(-100, 100, (M, 2)), "cam_index": rng.integers(0, C, M),
            "point_index": rng.integers(0, P, M)}


def ba_torch(cams, points, w, feats, ci, pi):
    """The BA objective vectorized over the observations (torch), written apart from kernels.py."""
    import torch
    cam, X = cams[ci], points[pi]
    rot, x = cam[:, 0:3], X - cam[:, 3:6]
    theta = torch.linalg.norm(rot, dim=1, keepdim=True)
    k = rot / theta
    y = (x * torch.cos(theta) + torch.cross(k, x, dim=1) * torch.sin(theta)
         + k * torch.sum(k * x, 1, keepdim=True) * (1 - torch.cos(theta)))
    p = y[:, 0:2] / y[:, 2:3]
    rsq = torch.sum(p * p, 1, keepdim=True)
    proj = p * (1 + cam[:, 9:10] * rsq + cam[:, 10:11] * rsq * rsq) * cam[:, 6:7] + cam[:, 7:9]
    return torch.sum((w[:, None] * (proj - feats)) ** 2) + torch.sum((1 - w * w) ** 2)


def ba_cases(pkg, hand, M: int) -> tuple[dict, float]:
    """The three timed calls of one BA size, and the largest error against torch.autograd."""
    import torch
    data = ba_data(M)
    arrays = tuple(data[k] for k in ("cams", "points", "w", "feats", "cam_index", "point_index"))
    cams, points, w = arrays[:3]
    value, grads = np.zeros(1), (np.empty_like(cams), np.empty_like(points), np.empty_like(w))
    dims = (cams.shape[0], points.shape[0], M)
    f = ks_call(pkg, "ba", dims, arrays, (value,))
    j = ks_call(pkg, "ba_grad", dims, arrays, grads)
    h = bound(hand.ba_hand, ctypes.c_double, M, *arrays)
    ts = [torch.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)]
    want = ba_torch(*ts)
    want_grads = torch.autograd.grad(want, ts[:3])
    f(), j()
    err = max([rel_error(value[0], want.item()), rel_error(h(), want.item())]
              + [rel_error(g, w.numpy()) for g, w in zip(grads, want_grads, strict=True)])
    return {"F ksbuild": f, "F hand": h, "J ksbuild": j}, err


def report(label: str, t: dict, err: float) -> None:
    """One table row: times in ms and the two ratios."""
    print(f"| {label} | {t['F hand'] * 1e3:.4g} | {t['F ksbuild'] * 1e3:.4g} | {t['F ksbuild'] / t['F hand']:.2f} "
          f"| {t['J ksbuild'] * 1e3:.4g} | {t['J ksbuild'] / t['F ksbuild']:.2f} | {t['J ksbuild'] / t['F hand']:.2f} "
          f"| {err:.1e} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gmm", default="2x5x1000,10x25x10000,20x50x2000", help="d x K x n sizes")
    ap.add_argument("--ba", default="10000,100000", help="observation counts")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=50.0)
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                    help="cpu: this thread's CPU time (a loaded machine's waits left out); wall: the wall clock")
    a = ap.parse_args()
    global clock
    clock = CLOCKS[a.clock]
    import torch
    torch.set_num_threads(1)
    ref = load_module(ROOT / "examples" / "gmm" / "reference.py", "gmm_reference")
    pkg, hand = build(Path(tempfile.mkdtemp(prefix="loops_bench_")))
    print(f"float64, one thread; {a.clock} times in ms (median of {a.repeat} runs); goal: F ks/hand <= 1.2, J/F <= 3")
    print("| objective | F hand | F ksbuild | F ks / hand | J ksbuild | J / F ks | J / F hand | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in filter(None, a.gmm.split(",")):
        d, K, n = (int(v) for v in size.split("x"))
        cases, err = gmm_cases(pkg, hand, ref, d, K, n)
        report(f"gmm d={d} K={K} n={n}", interleaved(cases, a.min_ms, a.repeat), err)
    for M in (int(float(s)) for s in filter(None, a.ba.split(","))):
        cases, err = ba_cases(pkg, hand, M)
        report(f"ba M={M}", interleaved(cases, a.min_ms, a.repeat), err)


if __name__ == "__main__":
    main()
