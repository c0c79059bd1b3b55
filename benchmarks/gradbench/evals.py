"""GradBench's evaluate messages as calls of the ksbuild package: one function per (module, function)
turns an eval's JSON input into arrays once, and returns a call to time and its output in JSON form."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import reference as ref

Call = Callable[[], Any]


def f64(value) -> np.ndarray:
    """A dense float64 array of a JSON list (of lists)."""
    return np.ascontiguousarray(value, dtype=np.float64)


def lse_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """primal: LSE(x); gradient: ∇LSE(x)."""
    x = f64(inp["x"])
    if function == "primal":
        return lambda: pkg.lse(x), float
    out = np.empty_like(x)
    return lambda: pkg.lse_grad(x, out=out), lambda g: g.tolist()


def llsq_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """primal: y(x); gradient: ∇y(x); t depends on n only and is made here."""
    x, t = f64(inp["x"]), ref.llsq_t(int(inp["n"]))
    if function == "primal":
        return lambda: pkg.llsq(x, t), float
    out = np.empty_like(x)
    return lambda: pkg.llsq_grad(x, t, out=out), lambda g: g.tolist()


def kmeans_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """cost: Σ_i min_j ‖C_j - P_i‖²; dir: J / diag(H), J by grad, diag(H) = H·1 by jvp of grad."""
    P, C = f64(inp["points"]), f64(inp["centroids"])
    if function == "cost":
        return lambda: pkg.kmeans(P, C), float
    zeros, ones = np.zeros_like(P), np.ones_like(C)
    g, h = np.empty_like(C), np.empty_like(C)

    def direction():
        pkg.kmeans_grad(P, C, out=g)
        pkg.kmeans_hess1(P, C, zeros, ones, out=h)
        return g / h
    return direction, lambda v: v.tolist()


def gmm_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """objective: the log posterior; jacobian: its gradient in alpha, mu, q, l."""
    k, d = int(inp["k"]), int(inp["d"])
    args = (f64(inp["alpha"]), f64(inp["mu"]).reshape(k, d), f64(inp["q"]).reshape(k, d),
            f64(inp["l"]).reshape(k, d * (d - 1) // 2), f64(inp["x"]).reshape(-1, d),
            float(inp["gamma"]), float(inp["m"]))
    if function == "objective":
        return lambda: pkg.gmm(*args), float
    outs = tuple(np.empty_like(a) for a in args[:4])
    names = ("alpha", "mu", "q", "l")
    return lambda: pkg.gmm_grad(*args, out=outs), lambda gs: {n: g.tolist() for n, g in zip(names, gs)}


MODULES = {"lse": lse_calls, "llsq": llsq_calls, "kmeans": kmeans_calls, "gmm": gmm_calls}
FUNCTIONS = {"lse": ("primal", "gradient"), "llsq": ("primal", "gradient"), "kmeans": ("cost", "dir"),
             "gmm": ("objective", "jacobian")}   # (primal, derivative) of each module, as GradBench names them


def calls(pkg, module: str, function: str, inp: dict) -> tuple[Call, Callable]:
    """The call and output conversion of one evaluate message; an unknown function is a ValueError."""
    if function not in FUNCTIONS[module]:
        raise ValueError(f"module {module!r} has no function {function!r} (it has {', '.join(FUNCTIONS[module])})")
    return MODULES[module](pkg, function, inp)


def run_timed(call: Call, min_runs: int, min_seconds: float) -> tuple[Any, list[int]]:
    """Call at least min_runs times and until min_seconds have passed; the last result and each call's ns."""
    timings, total, result = [], 0, None
    while len(timings) < max(min_runs, 1) or total < min_seconds * 1e9:
        start = time.perf_counter_ns()
        result = call()
        timings.append(time.perf_counter_ns() - start)
        total += timings[-1]
    return result, timings
