"""GradBench's evaluate messages as calls of the ksbuild package: one function per (module, function)
turns an eval's JSON input into arrays once, and returns a call to time and its output in JSON form."""
from __future__ import annotations

import functools
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
    """cost: Σ_i min_j ‖C_j - P_i‖²; dir: J / diag(H): J = grad and diag(H) = H·1 from one export, the jvp of
    grad with its primal results (J) kept, so the forward pass runs once; a tangent in C only (argnums)."""
    P, C = f64(inp["points"]), f64(inp["centroids"])
    if function == "cost":
        return lambda: pkg.kmeans(P, C), float
    ones = np.ones_like(C)
    g, h = np.empty_like(C), np.empty_like(C)

    def direction():
        pkg.kmeans_dir(P, C, ones, out=(g, h))
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


class BASparse:
    """GradBench's sparse Jacobian of bundle adjustment in preallocated buffers: rows as CSR offsets (two rows
    of 15 per observation, then one per weight), cols (camera c: 11 c + j; point q: 11 n + 3 q + j; weight i:
    11 n + 3 m + i) and vals, whose first 30 p entries are the [p, 2, 15] blocks the kernel writes in place."""

    def __init__(self, n: int, m: int, p: int):
        self.n, self.m, self.p = n, m, p
        self.rows, self.cols, self.vals = np.empty(3 * p + 1, np.int32), np.empty(31 * p, np.int32), np.empty(31 * p)
        self.blocks, self.w_vals = self.vals[:30 * p].reshape(p, 2, 15), self.vals[30 * p:]

    def fill_structure(self, obs: np.ndarray) -> dict:
        """rows and cols of the observations obs [p, 2] (camera, point); vals as the kernels left them."""
        n, m, p = self.n, self.m, self.p
        self.rows[:2 * p + 1] = np.arange(0, 30 * p + 1, 15, dtype=np.int32)
        self.rows[2 * p + 1:] = np.arange(30 * p + 1, 31 * p + 1, dtype=np.int32)
        w_cols = self.cols[30 * p:]
        w_cols[:] = np.arange(11 * n + 3 * m, 11 * n + 3 * m + p, dtype=np.int32)
        cols = self.cols[:30 * p].reshape(p, 2, 15)
        cols[:, 0, :11] = 11 * obs[:, :1] + np.arange(11, dtype=np.int32)
        cols[:, 0, 11:14] = 11 * n + 3 * obs[:, 1:] + np.arange(3, dtype=np.int32)
        cols[:, 0, 14] = w_cols
        cols[:, 1] = cols[:, 0]
        return {"rows": self.rows, "cols": self.cols, "vals": self.vals}


def ba_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """ba_array_calls on the input's n cameras, m points and p observations (reference.ba_expand)."""
    return ba_array_calls(pkg, function, *ref.ba_expand(inp))


def ba_array_calls(pkg, function: str, cams, X, w, obs, feats) -> tuple[Call, Callable]:
    """objective: reprojection and weight errors; jacobian: GradBench's sparse Jacobian (the whole lists),
    from each observation's [2, 15] block (vmap of jacrev) and the weights' derivatives (vmap of grad).
    Both gather each observation's camera, point and weight into one row of 15 (part of the timed call)."""
    p = w.shape[0]
    params = np.empty((p, 15))

    def gather():
        np.take(cams, obs[:, 0], axis=0, out=params[:, :11])
        np.take(X, obs[:, 1], axis=0, out=params[:, 11:14])
        params[:, 14] = w

    if function == "objective":
        err, w_err = np.empty((p, 2)), np.empty(p)

        def objective():
            gather()
            return pkg.ba_reproj(params, feats, out=err), pkg.ba_werr(w, out=w_err)
        return objective, ba_objective_json
    sparse = BASparse(cams.shape[0], X.shape[0], p)

    def jacobian():
        gather()
        pkg.ba_reproj_J(params, feats, out=sparse.blocks)
        pkg.ba_werr_J(w, out=sparse.w_vals)
        return sparse.fill_structure(obs)
    return jacobian, ba_jacobian_json


def ba_objective_json(errors) -> dict:
    """ba.hpp's to_json: the first observation's errors and how many there are."""
    err, w_err = errors
    return {"reproj_error": {"elements": err[0].tolist(), "repeated": len(w_err)},
            "w_err": {"element": float(w_err[0]), "repeated": len(w_err)}}


def ba_jacobian_json(sparse: dict) -> dict:
    """ba.hpp's to_json: the first 30 and the last entry of each list."""
    return {key: np.concatenate([a[:30], a[-1:]]).tolist() for key, a in sparse.items()}


def lstm_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """objective: the loss; jacobian: its gradient in main_params and extra_params, flattened by rows."""
    args = tuple(f64(inp[key]) for key in ("main_params", "extra_params", "state", "sequence"))
    if function == "objective":
        return lambda: pkg.lstm(*args), float
    outs = (np.empty_like(args[0]), np.empty_like(args[1]))
    return lambda: pkg.lstm_grad(*args, out=outs), lambda gs: np.concatenate([g.ravel() for g in gs]).tolist()


def det_tables(ell: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """det.py's tables for l: minor S (a set of columns as bits, m = 2 ** l of them; its rows the last |S| of A)
    expands along row l - |S| (rows); its sub-minor without column j is S - 2 ** j (minors_of [m, l]) with the
    sign (-1) ** (the members of S before j), 0 where j is not in S (signs [m, l]). The empty minor reads row 0."""
    sets, columns = np.arange(1 << ell), np.arange(ell)
    member = (sets[:, None] >> columns) & 1
    size = member.sum(axis=1)
    rows = np.where(size > 0, ell - size, 0).astype(np.int64)
    signs = np.where(member == 1, (-1.0) ** (np.cumsum(member, axis=1) - member), 0.0)
    minors_of = np.where(member == 1, sets[:, None] - (1 << columns), 0).astype(np.int64)
    return rows, minors_of, signs


def det_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """primal: det A; gradient: its gradient in A, row-major. The tables depend on l and are made once."""
    ell = int(inp["ell"])
    A, tables = f64(inp["A"]).reshape(ell, ell), det_tables(ell)
    if function == "primal":
        return lambda: pkg.det(A, *tables), float
    out = np.empty_like(A)
    return lambda: pkg.det_grad(A, *tables, out=out), lambda g: g.ravel().tolist()


def ode_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """primal: y(2) [n]; gradient: the gradient of y_{n-1}(2) in x [n]. s steps of size 2 / s."""
    x, s = f64(inp["x"]), int(inp["s"])
    steps, out = np.full(s, 2.0 / s), np.empty_like(x)
    export = pkg.ode if function == "primal" else pkg.ode_grad
    return lambda: export(x, steps, out=out), lambda y: y.tolist()

def nested_calls(pkg, function: str, inp: dict, module: str) -> tuple[Call, Callable]:
    """particle (w) and saddle (start): the variant's export (function: outer and inner mode, f or r); a result
    whose loops reached their bounds (particle.py, saddle.py) is an error, not an answer."""
    export = getattr(pkg, f"{module}_{function}")
    arg = f64([inp["w"]]) if module == "particle" else f64(inp["start"])   # (particle.py: w0 is a float[1])

    def call():
        result, unfinished = export(arg)
        if unfinished:
            raise ValueError(f"{module}.{function}: a loop reached its bound before converging")
        return result
    return call, (float if module == "particle" else lambda r: r.tolist())

def ht_arguments(inp: dict) -> tuple:
    """The kernels' arguments: theta, (du = 0, us,) the model (mirror as a sign per axis), (triangles,)
    correspondences, points; the complicated variant's (us given) in parentheses."""
    data, model = inp["data"], inp["data"]["model"]
    mirror = f64([-1.0 if model["is_mirrored"] else 1.0, 1.0, 1.0])
    skeleton = (np.asarray(model["parents"], dtype=np.int64), f64(model["base_relatives"]),
                f64(model["inverse_base_absolutes"]), f64(model["base_positions"]), f64(model["weights"]), mirror)
    corr, points = np.asarray(data["correspondences"], dtype=np.int64), f64(data["points"])
    if len(inp["us"]) == 0:
        return (f64(inp["theta"]), *skeleton, corr, points)
    triangles = np.asarray(model["triangles"], dtype=np.int64)
    return (f64(inp["theta"]), np.zeros(2), f64(inp["us"]), *skeleton, triangles, corr, points)


def ht_calls(pkg, function: str, inp: dict) -> tuple[Call, Callable]:
    """objective: the errors [3 c]; jacobian: [3 c, 26], or for the complicated variant (us given) [3 c, 2 + 26],
    the us columns first (jacfwd in a shift du = 0 of every u_i, see ht.py). One export, jacfwd of ht.py's
    *_error_dirs in (pose, (du,) eps): the pose's 6 columns (and the us columns), which never reach the skinning,
    and the 20 finger angles' columns compressed into k directions, each the sum of columns that no row shares
    (ht_finger_seeds: made from the model once per message, as the arrays are), one posing for all of them."""
    args, c = ht_arguments(inp), len(inp["data"]["correspondences"])
    simple = len(inp["us"]) == 0
    if function == "objective":
        err = np.empty((c, 3))
        export = pkg.ht_simple if simple else pkg.ht_complicated
        return lambda: export(*args, out=err), lambda e: e.ravel().tolist()
    pattern = ht_finger_pattern(inp)
    seeds, color = ht_finger_seeds(pattern)
    k, first = len(seeds), 0 if simple else 2
    theta, eps = args[0], np.zeros(k)
    if simple:
        dirs_args = (theta[:6], eps, theta[6:], seeds) + args[1:]
    else:
        dirs_args = (theta[:6], args[1], eps, theta[6:], seeds) + args[2:]
    buffer = np.zeros(3 * c * (6 + first + k))  # the export's outputs
    J_pose, J_us, J_dirs = np.split(buffer, np.cumsum([3 * c * 6, 3 * c * first]))
    outs = (J_pose.reshape(c, 3, 6),) + ((J_us.reshape(c, 3, first),) if first else ()) + (J_dirs.reshape(c, 3, k),)
    # the dense columns are copied as blocks; of the finger columns only the pattern's entries are written (the
    # rest stays 0 from here): 3 x 590 entries on hand3 where a take of the whole [600, 28] read 16 800
    where = ht_jacobian_places(pattern, color, first)
    finger = np.zeros(where.shape, dtype=bool)
    finger[:, first + 6:] = where[:, first + 6:] >= 0
    places = np.flatnonzero(finger)
    sources = where.ravel()[places]
    J = np.zeros(where.shape)
    J_flat, pose_rows, us_rows = J.reshape(-1), J_pose.reshape(3 * c, 6), J_us.reshape(3 * c, first)
    export = pkg.ht_simple_Jdirs if simple else pkg.ht_complicated_Jdirs

    def jacobian():
        export(*dirs_args, out=outs)
        J[:, :first] = us_rows
        J[:, first:first + 6] = pose_rows
        J_flat[places] = buffer[sources]
        return J
    return jacobian, lambda J: J.tolist()


def ht_jacobian_places(pattern: np.ndarray, color: np.ndarray, first: int) -> np.ndarray:
    """[3 c, first + 26]: where each entry of the Jacobian is in ht_calls' buffer (the pose's columns [c, 3, 6], the
    us columns [c, 3, first], the directions' [c, 3, k]): a finger column j at row i is its colour's direction at
    row i where pattern[i, j], else -1 (a 0)."""
    c, k = pattern.shape[0], int(color.max(initial=-1)) + 1
    rows = np.arange(3 * c)[:, None]  # 3 i + axis
    pose = rows * 6 + np.arange(6)[None, :]
    us = 3 * c * 6 + rows * first + np.arange(first)[None, :]
    dirs = 3 * c * (6 + first) + rows * k + color[None, :]
    fingers = np.where(np.repeat(pattern, 3, axis=0), dirs, -1)
    return np.concatenate([us, pose, fingers], axis=1)


def ht_finger_pattern(inp: dict) -> np.ndarray:
    """[c, 20] bool: whether correspondence i may depend on finger angle j (theta[6 + j]): the angle turns the bones
    of ht.X_ANGLE / Z_ANGLE, which move their descendants (the model's parents), which move the vertices weighted
    on them, which move the correspondences reading them (their triangles' corners, or the vertex itself)."""
    from ht import X_ANGLE, Z_ANGLE

    model, data = inp["data"]["model"], inp["data"]
    parents, weights = model["parents"], np.asarray(model["weights"]) != 0
    below = np.eye(len(parents), dtype=bool)  # below[a, b]: b is a or a descendant of a
    for b in range(len(parents) - 1, -1, -1):
        if parents[b] >= 0:
            below[parents[b]] |= below[b]
    corr = np.asarray(data["correspondences"])
    read = corr[:, None] if len(inp["us"]) == 0 else np.asarray(model["triangles"])[corr]  # [c, corners]
    pattern = np.zeros((len(corr), 20), dtype=bool)
    for j in range(20):
        driven = [b for b in range(len(parents)) if 6 + j in (X_ANGLE[b], Z_ANGLE[b])]
        moved = weights[:, below[driven].any(axis=0)].any(axis=1)  # [V]
        pattern[:, j] = moved[read].any(axis=1)
    return pattern


def ht_finger_seeds(pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seeds [k, 20], color [20]): a greedy colouring of the columns of `pattern` in which no two columns of one
    colour share a row (Curtis, Powell and Reid's compression of a sparse Jacobian); seed k is the sum of the
    unit directions of colour k, so its jvp's row i is the derivative in the one column of that colour row i has."""
    color, rows = np.zeros(pattern.shape[1], dtype=np.int64), []
    for j in range(pattern.shape[1]):
        k = next((k for k, taken in enumerate(rows) if not (taken & pattern[:, j]).any()), len(rows))
        if k == len(rows):
            rows.append(np.zeros(pattern.shape[0], dtype=bool))
        rows[k] |= pattern[:, j]
        color[j] = k
    seeds = np.zeros((len(rows), pattern.shape[1]))
    seeds[color, np.arange(pattern.shape[1])] = 1.0
    return seeds, color


MODULES = {"lse": lse_calls, "llsq": llsq_calls, "kmeans": kmeans_calls, "gmm": gmm_calls, "ba": ba_calls,
           "ht": ht_calls, "lstm": lstm_calls,
           "det": det_calls, "ode": ode_calls,
           "particle": functools.partial(nested_calls, module="particle"),
           "saddle": functools.partial(nested_calls, module="saddle")}
# (primal, derivative) of each module, as GradBench names them; particle's and saddle's four variants
FUNCTIONS = {"lse": ("primal", "gradient"), "llsq": ("primal", "gradient"), "kmeans": ("cost", "dir"),
             "gmm": ("objective", "jacobian"), "ba": ("objective", "jacobian"),
             "ht": ("objective", "jacobian"), "lstm": ("objective", "jacobian"),
             "det": ("primal", "gradient"), "ode": ("primal", "gradient"),
             "particle": ("ff", "fr", "rf", "rr"), "saddle": ("ff", "fr", "rf", "rr")}


def calls(pkg, module: str, function: str, inp: dict) -> tuple[Call, Callable]:
    """The call and output conversion of one evaluate message; an unknown function is a ValueError."""
    if function not in FUNCTIONS[module]:
        raise ValueError(f"module {module!r} has no function {function!r} (it has {', '.join(FUNCTIONS[module])})")
    return MODULES[module](pkg, function, inp)


def run_timed(call: Call, min_runs: int, min_seconds: float,
              clock: Callable[[], int] = time.perf_counter_ns) -> tuple[Any, list[int]]:
    """Call at least min_runs times and until min_seconds have passed; the last result and each call's ns
    (wall time by default; time.thread_time_ns counts only this thread's CPU time)."""
    timings, total, result = [], 0, None
    while len(timings) < max(min_runs, 1) or total < min_seconds * 1e9:
        start = clock()
        result = call()
        timings.append(clock() - start)
        total += timings[-1]
    return result, timings
