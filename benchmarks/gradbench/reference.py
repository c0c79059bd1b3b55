"""Independent references for the GradBench evals: numpy formulas from each eval's README, torch
autograd for the derivatives, and GradBench's input generators (evals/<name>/run.py), float64.

Used by tests/test_gradbench.py and bench.py to check ksbuild's results.
"""
from __future__ import annotations

import math

import numpy as np


# ----------------------------------------------------------------------------- inputs (as GradBench makes them)
def lse_input(n: int, seed: int = 31337) -> dict:
    """evals/lse/run.py: x ~ U(0, 1)."""
    return {"x": np.random.RandomState(seed).rand(n).tolist()}


def llsq_input(n: int, m: int, seed: int = 31337) -> dict:
    """evals/llsq/run.py: x ~ U(0, 1) of length m, and n."""
    return {"x": np.random.RandomState(seed).rand(m).tolist(), "n": n}


def kmeans_input(k: int, n: int, d: int, seed: int = 31337) -> dict:
    """evals/kmeans/run.py: points ~ U(0, 1); the centroids are the last k points."""
    points = np.random.RandomState(seed).rand(n, d).tolist()
    return {"points": points, "centroids": points[-k:]}


def gmm_input(d: int, k: int, n: int, m: int = 0, gamma: float = 1.0, seed: int = 31337) -> dict:
    """evals/gmm/run.py's generate: x, alpha, q, l ~ N(0, 1), mu ~ U(0, 1)."""
    rng = np.random.default_rng(seed=seed)
    return {"d": d, "k": k, "n": n, "x": [list(rng.normal(size=d)) for _ in range(n)], "m": m, "gamma": gamma,
            "alpha": list(rng.normal(size=k)), "mu": [list(rng.uniform(size=d)) for _ in range(k)],
            "q": [list(rng.normal(size=d)) for _ in range(k)],
            "l": [list(rng.normal(size=d * (d - 1) // 2)) for _ in range(k)]}


def det_input(ell: int, seed: int = 31337) -> dict:
    """evals/det/run.py: A ~ U(0, 1), l × l in row-major order (the eval draws every size from one seed in turn;
    here each from a fresh one)."""
    return {"A": np.random.RandomState(seed).rand(ell * ell).tolist(), "ell": ell}


def ode_input(n: int, s: int, seed: int = 31337) -> dict:
    """evals/ode/run.py: x ~ U(0, 1) of length n, and the number of steps s."""
    return {"x": np.random.RandomState(seed).rand(n).tolist(), "s": s}

BA_DATA = {   # evals/ba/data/ba<i>_n<n>_m<m>_p<p>.txt: n, m, p; every file has the same camera, point, weight, feature
    "cam": [-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514, 5.864426, -8.518870,
            0.087812, 0.002739],
    "x": [7.203245, 0.001144, 3.023326], "w": 0.417022, "feat": [271.760969, 834.209256]}


def ba_input(n: int, m: int, p: int) -> dict:
    """evals/ba/run.py's parse of a data file with these n, m, p."""
    return {"n": n, "m": m, "p": p} | BA_DATA


def ba_expand(inp: dict) -> tuple:
    """(cams [n, 11], X [m, 3], w [p], obs int32 [p, 2], feats [p, 2]): the one camera, point, weight and
    feature repeated, observation i of camera i mod n and point i mod m (ba.hpp's from_json)."""
    n, m, p = int(inp["n"]), int(inp["m"]), int(inp["p"])
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int32)
    def repeat(value, times: int) -> np.ndarray:
        return np.tile(np.asarray(value, dtype=np.float64), (times, 1))
    return repeat(inp["cam"], n), repeat(inp["x"], m), np.full(p, float(inp["w"])), obs, repeat(inp["feat"], p)


# ----------------------------------------------------------------------------- lse
def lse_numpy(x) -> float:
    """max x + log Σ exp(x - max x)."""
    x = np.asarray(x, dtype=np.float64)
    a = x.max()
    return float(a + np.log(np.exp(x - a).sum()))


def lse_gradient_numpy(x) -> np.ndarray:
    """softmax(x), the gradient of LSE."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


# ----------------------------------------------------------------------------- llsq
def llsq_t(n: int) -> np.ndarray:
    """t_i = -1 + 2 i / (n - 1)."""
    return -1.0 + np.arange(n, dtype=np.float64) * 2.0 / (n - 1)


def llsq_torch(x, n: int):
    """½ Σ_i (sign(t_i) - Σ_j x_j t_i^j)² on a torch tensor x (a 0-d tensor)."""
    import torch

    t = torch.as_tensor(llsq_t(n))
    powers = t[:, None] ** torch.arange(x.shape[0], dtype=torch.float64)
    r = torch.sign(t) - powers @ x
    return 0.5 * (r * r).sum()


def llsq_value_and_grad(x, n: int) -> tuple[float, np.ndarray]:
    """(y(x), ∇y(x)) through torch.autograd."""
    import torch

    xt = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    y = llsq_torch(xt, n)
    (g,) = torch.autograd.grad(y, xt)
    return float(y.detach()), g.numpy()


# ----------------------------------------------------------------------------- kmeans
def kmeans_cost_numpy(points, centroids) -> float:
    """Σ_i min_j ‖C_j - P_i‖²."""
    P, C = np.asarray(points, dtype=np.float64), np.asarray(centroids, dtype=np.float64)
    dist = ((P[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return float(dist.min(axis=1).sum())


def kmeans_dir_numpy(points, centroids) -> np.ndarray:
    """J H⁻¹ = C_j - (mean of the points nearest to C_j), from J = Σ 2 (C_j - P_i), H = 2 count_j."""
    P, C = np.asarray(points, dtype=np.float64), np.asarray(centroids, dtype=np.float64)
    nearest = ((P[:, None, :] - C[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    sums = np.zeros_like(C)
    np.add.at(sums, nearest, P)
    counts = np.bincount(nearest, minlength=C.shape[0])[:, None]
    return C - sums / counts


# ----------------------------------------------------------------------------- gmm
def gmm_torch(alpha, mu, q, l, x, gamma: float, m: float):
    """The log posterior of evals/gmm/README.md ("Implementation"), one component at a time."""
    import torch

    n, d = x.shape
    K = alpha.shape[0]
    betas = []
    frobenius = 0.0
    rows, cols = zip(*[(r, c) for c in range(d) for r in range(c + 1, d)]) if d > 1 else ((), ())
    for k in range(K):
        Q = torch.diag(torch.exp(q[k]))
        if d > 1:
            Q = Q.index_put((torch.tensor(rows), torch.tensor(cols)), l[k])
        Qx = (x - mu[k]) @ Q.T
        betas.append(alpha[k] + q[k].sum() - 0.5 * (Qx * Qx).sum(dim=1))
        frobenius = frobenius + (Q * Q).sum()
    n_w = d + m + 1
    log_gamma_d = d * (d - 1) / 4 * math.log(math.pi) + sum(math.lgamma(0.5 * n_w + (1 - j) / 2)
                                                            for j in range(1, d + 1))
    C = n_w * d * math.log(gamma / math.sqrt(2.0)) - log_gamma_d
    loglik = -n * (d / 2 * math.log(2 * math.pi) + torch.logsumexp(alpha, 0)) + \
        torch.logsumexp(torch.stack(betas, dim=1), dim=1).sum()
    return loglik + K * C - gamma ** 2 / 2 * frobenius + m * q.sum()


def gmm_value_and_grad(inp: dict) -> tuple[float, dict]:
    """(objective, {alpha, mu, q, l: gradient}) through torch.autograd."""
    import torch

    params = {key: torch.tensor(np.asarray(inp[key], dtype=np.float64).reshape(shape), requires_grad=True)
              for key, shape in (("alpha", (inp["k"],)), ("mu", (inp["k"], inp["d"])), ("q", (inp["k"], inp["d"])),
                                 ("l", (inp["k"], inp["d"] * (inp["d"] - 1) // 2)))}
    x = torch.tensor(np.asarray(inp["x"], dtype=np.float64))
    value = gmm_torch(params["alpha"], params["mu"], params["q"], params["l"], x, inp["gamma"], inp["m"])
    grads = torch.autograd.grad(value, list(params.values()), allow_unused=True, materialize_grads=True)
    return float(value.detach()), {key: g.numpy() for key, g in zip(params, grads)}


# ----------------------------------------------------------------------------- ba
def ba_reproj_torch(cam, X, w, feat):
    """ba.hpp's computeReprojError, batched over a leading axis: w (f distort(Xcam / Xcam_z) + (u0, v0) - feat),
    Xcam = R(r) (X - C) by Rodrigues' rotation (X + r × X where r = 0)."""
    import torch

    rot, Xo = cam[:, 0:3], X - cam[:, 3:6]
    sq = (rot * rot).sum(1, keepdim=True)
    theta = torch.sqrt(torch.where(sq == 0, torch.ones_like(sq), sq))
    k = rot / theta
    rotated = (Xo * torch.cos(theta) + torch.linalg.cross(k, Xo) * torch.sin(theta)
               + k * (k * Xo).sum(1, keepdim=True) * (1 - torch.cos(theta)))
    Xcam = torch.where(sq == 0, Xo + torch.linalg.cross(rot, Xo), rotated)
    proj = Xcam[:, 0:2] / Xcam[:, 2:3]
    rsq = (proj * proj).sum(1, keepdim=True)
    proj = proj * (1 + cam[:, 9:10] * rsq + cam[:, 10:11] * rsq * rsq)
    return w[:, None] * (proj * cam[:, 6:7] + cam[:, 7:9] - feat)


def ba_blocks(cams, X, w, obs, feats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reprojection errors [p, 2], their Jacobian blocks [p, 2, 15] in (camera, point, weight), w errors [p])
    by torch.autograd: observation i's error depends on its own gathered copies only, so the gradient of
    Σ_i err[i, r] in the copies is row r of every block (two backward passes)."""
    import torch

    leaves = [torch.tensor(a[idx], requires_grad=True) for a, idx in ((cams, obs[:, 0]), (X, obs[:, 1]))]
    wt = torch.tensor(w, requires_grad=True)
    err = ba_reproj_torch(leaves[0], leaves[1], wt, torch.tensor(feats))
    rows = [torch.cat([g.reshape(len(w), -1) for g in torch.autograd.grad(err[:, r].sum(), leaves + [wt],
                                                                            retain_graph=True)], dim=1)
            for r in range(2)]
    return err.detach().numpy(), torch.stack(rows, dim=1).numpy(), 1 - w * w


def ba_sparse_loop(n: int, m: int, obs, blocks, w) -> tuple[list, list, list]:
    """GradBench's sparse BA Jacobian (rows as CSR offsets, cols, vals) built entry by entry as
    ba.hpp's SparseMat does: per observation two rows of 15 (camera, point, weight), then a row per weight."""
    rows, cols, vals = [0], [], []
    for i, (cam, pt) in enumerate(obs.tolist()):
        for r in range(2):
            rows.append(rows[-1] + 15)
            cols += [11 * cam + j for j in range(11)] + [11 * n + 3 * pt + j for j in range(3)] + [11 * n + 3 * m + i]
            vals += blocks[i, r].tolist()
    for i, wi in enumerate(w.tolist()):
        rows.append(rows[-1] + 1)
        cols.append(11 * n + 3 * m + i)
        vals.append(-2.0 * wi)
    return rows, cols, vals


def ba_expected(inp: dict) -> tuple[dict, dict]:
    """(objective, jacobian) in GradBench's output form (ba.hpp's to_json: the first observation's errors,
    and the first 30 and the last entry of rows, cols, vals)."""
    cams, X, w, obs, feats = ba_expand(inp)
    err, blocks, w_err = ba_blocks(cams, X, w, obs, feats)
    objective = {"reproj_error": {"elements": err[0].tolist(), "repeated": len(w)},
                 "w_err": {"element": float(w_err[0]), "repeated": len(w)}}
    rows, cols, vals = ba_sparse_loop(int(inp["n"]), int(inp["m"]), obs, blocks, w)
    return objective, {"rows": rows[:30] + rows[-1:], "cols": cols[:30] + cols[-1:], "vals": vals[:30] + vals[-1:]}


# ----------------------------------------------------------------------------- ht
HT_PARENTS = [-1, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0, 13, 14, 15, 0, 17, 18, 19, 0]   # model/bones.txt


def ht_read(data_dir, name: str, complicated: bool = True) -> dict:
    """evals/ht/run.py's input of evals/ht/data/<variant>_<size>/<name>.txt and its model/ folder
    (evals/ht/io.py's read_hand_instance): bones.txt rows are name:parent:relative (16):inverse absolute (16);
    vertices.txt rows x:y:z:(5 unused):count:(bone:weight)*count; triangles.txt rows a:b:c; the instance file
    is "c 26", c lines "correspondence x y z", c lines "u0 u1" (complicated only), 26 lines of theta."""
    from pathlib import Path

    model_dir, bones = Path(data_dir) / "model", []
    for line in (Path(data_dir) / "model" / "bones.txt").read_text().splitlines():
        atoms = line.split(":")
        bones.append((atoms[0], int(atoms[1]), [float(a) for a in atoms[2:34]]))
    vertex_rows = [line.split(":") for line in (model_dir / "vertices.txt").read_text().splitlines()]
    weights = np.zeros((len(vertex_rows), len(bones)))
    for v, atoms in enumerate(vertex_rows):
        for k in range(int(atoms[8])):
            weights[v, int(atoms[9 + 2 * k])] = float(atoms[10 + 2 * k])
    lines = (Path(data_dir) / f"{name}.txt").read_text().splitlines()
    c = int(lines[0].split()[0])
    rows = [line.split() for line in lines[1:1 + c]]
    us = [[float(a) for a in line.split()] for line in lines[1 + c:1 + 2 * c]] if complicated else []
    model = {"bone_count": len(bones), "bone_names": [b[0] for b in bones], "parents": [b[1] for b in bones],
             "base_relatives": [np.reshape(b[2][:16], (4, 4)).tolist() for b in bones],
             "inverse_base_absolutes": [np.reshape(b[2][16:], (4, 4)).tolist() for b in bones],
             "base_positions": [[float(a) for a in atoms[:3]] + [1.0] for atoms in vertex_rows],
             "weights": weights.tolist(), "is_mirrored": False,
             "triangles": [[int(a) for a in line.split(":")]
                           for line in (model_dir / "triangles.txt").read_text().split()]}
    theta = [float(line) for line in lines[1 + (2 if complicated else 1) * c:][:26]]
    return {"theta": theta, "us": us, "data": {"model": model, "correspondences": [int(r[0]) for r in rows],
                                               "points": [[float(a) for a in r[1:4]] for r in rows]}}


def ht_synthetic(c: int, V: int, T: int, complicated: bool, mirrored: bool = False, seed: int = 7) -> dict:
    """An input of GradBench's form with GradBench's 22-bone skeleton and random everything else: bone
    transforms (rotation and translation), vertices, skinning weights (1 to 3 bones each, summing to 1),
    triangles, correspondences, points, theta and us."""
    rng = np.random.default_rng(seed)

    def rigid() -> list:
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        return np.block([[q, rng.normal(size=(3, 1))], [np.zeros((1, 3)), np.ones((1, 1))]]).tolist()
    weights = np.zeros((V, 22))
    for v in range(V):
        bones = rng.choice(22, size=rng.integers(1, 4), replace=False)
        weights[v, bones] = rng.dirichlet(np.ones(len(bones)))
    model = {"bone_count": 22, "bone_names": [f"bone{i}" for i in range(22)], "parents": HT_PARENTS,
             "base_relatives": [rigid() for _ in range(22)], "inverse_base_absolutes": [rigid() for _ in range(22)],
             "base_positions": np.hstack([rng.normal(size=(V, 3)), np.ones((V, 1))]).tolist(),
             "weights": weights.tolist(), "triangles": rng.integers(0, V, size=(T, 3)).tolist(),
             "is_mirrored": mirrored}
    us = rng.uniform(size=(c, 2)).tolist() if complicated else []
    return {"theta": rng.normal(scale=0.5, size=26).tolist(), "us": us,
            "data": {"model": model, "correspondences": rng.integers(0, T if complicated else V, size=c).tolist(),
                     "points": rng.normal(size=(c, 3)).tolist()}}


def ht_euler(col):
    """ht.hpp's euler_angles_to_rotation_matrix: R_z R_y R_x with (x, z, y) = col."""
    import torch

    def rotation(t, i, j, sign):
        R = [[torch.tensor(1.0 if a == b else 0.0, dtype=torch.float64) for b in range(3)] for a in range(3)]
        R[i][i], R[j][j], R[j][i], R[i][j] = torch.cos(t), torch.cos(t), sign * torch.sin(t), -sign * torch.sin(t)
        return torch.stack([torch.stack(row) for row in R])
    return rotation(col[1], 0, 1, 1.0) @ rotation(col[2], 2, 0, 1.0) @ rotation(col[0], 1, 2, 1.0)


def ht_objective_torch(theta, us, inp: dict):
    """ht.hpp's objective, bone by bone, on torch tensors theta [26] and us [c, 2] (None: simple)."""
    import torch

    model, data = inp["data"]["model"], inp["data"]
    b = model["bone_count"]
    cols = [torch.zeros(3, dtype=torch.float64) for _ in range(b + 3)]   # to_pose_params
    cols[0], cols[2] = theta[0:3], theta[3:6]
    it, ip = 6, 5
    for _ in range(5):
        for joint in range(3):
            cols[ip] = torch.stack([theta[it], theta[it + 1] if joint == 0 else 0.0 * theta[0], 0.0 * theta[0]])
            it, ip = it + (2 if joint == 0 else 1), ip + 1
        ip += 1
    base_rel = torch.tensor(model["base_relatives"], dtype=torch.float64)
    absolutes = []
    for i in range(b):
        local = torch.eye(4, dtype=torch.float64)
        local = torch.cat([torch.cat([ht_euler(cols[i + 3]), local[0:3, 3:]], 1), local[3:]], 0)
        rel = base_rel[i] @ local
        absolutes.append(rel if model["parents"][i] == -1 else absolutes[model["parents"][i]] @ rel)
    base = torch.tensor(model["base_positions"], dtype=torch.float64).T                      # [4, V]
    weights = torch.tensor(model["weights"], dtype=torch.float64)                            # [V, b]
    inv = torch.tensor(model["inverse_base_absolutes"], dtype=torch.float64)
    positions = sum((absolutes[i] @ inv[i] @ base)[0:3] * weights[:, i] for i in range(b))
    if model["is_mirrored"]:
        positions = positions * torch.tensor([[-1.0], [1.0], [1.0]], dtype=torch.float64)
    norm = torch.sqrt((theta[0:3] ** 2).sum())
    R = torch.eye(3, dtype=torch.float64)
    if norm >= 1e-4:
        x, y, z = theta[0] / norm, theta[1] / norm, theta[2] / norm
        s, c = torch.sin(norm), torch.cos(norm)
        R = torch.stack([torch.stack([x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s]),
                         torch.stack([x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s]),
                         torch.stack([x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c])])
    positions = (R @ positions + theta[3:6, None]).T                   # [V, 3]
    points = torch.tensor(data["points"], dtype=torch.float64)
    corr = torch.tensor(data["correspondences"])
    if us is None:
        return (points - positions[corr]).reshape(-1)
    tri = torch.tensor(model["triangles"])[corr]
    hand = us[:, 0:1] * positions[tri[:, 0]] + us[:, 1:2] * positions[tri[:, 1]] + \
        (1 - us[:, 0:1] - us[:, 1:2]) * positions[tri[:, 2]]
    return (points - hand).reshape(-1)


def ht_expected(inp: dict) -> tuple[np.ndarray, np.ndarray]:
    """(objective [3 c], Jacobian [3 c, 26] or, complicated, [3 c, 2 + 26] with the us columns first: row
    3 i + j's derivatives in u_i) by torch.autograd.functional.jacobian."""
    import torch
    from torch.autograd.functional import jacobian

    theta = torch.tensor(inp["theta"], dtype=torch.float64)
    if not inp["us"]:
        f = lambda t: ht_objective_torch(t, None, inp)  # noqa: E731
        return f(theta).numpy(), jacobian(f, theta).numpy()
    us = torch.tensor(inp["us"], dtype=torch.float64)
    J_theta, J_us = jacobian(lambda t, u: ht_objective_torch(t, u, inp), (theta, us))
    c = us.shape[0]
    us_block = J_us.reshape(c, 3, c, 2)[torch.arange(c), :, torch.arange(c), :].reshape(3 * c, 2)
    return ht_objective_torch(theta, us, inp).numpy(), torch.cat([us_block, J_theta], 1).numpy()


# ----------------------------------------------------------------------------- lstm
def lstm_input(l: int, c: int, text: str | None = None, seed: int = 31337) -> dict:
    """evals/lstm/run.py's gen_lstm: the text's first c characters as rows of char_bits = ⌈log2 max ord⌉
    bits (most significant first), state, main_params, extra_params ~ U(0, 1). GradBench's text
    (evals/lstm/data/lstm_full.txt) is not in our copy: by default random printable ASCII (7 bits, as
    English text has)."""
    rng = np.random.RandomState(seed)
    text = text[:c] if text is not None else "".join(chr(k) for k in rng.randint(32, 127, size=c))
    bits = math.ceil(math.log2(max(ord(ch) for ch in text)))
    sequence = [[float(bit) for bit in bin(ord(ch))[2:].zfill(bits)] for ch in text]
    return {"main_params": rng.random_sample((2 * l, 4 * bits)).tolist(),
            "extra_params": rng.random_sample((3, bits)).tolist(),
            "state": rng.random_sample((2 * l, bits)).tolist(), "sequence": sequence}


def lstm_torch(main_params, extra_params, state, sequence):
    """lstm.hpp's objective, element by element in the layer and the gate (one loop per step and layer)."""
    import torch

    l, b = main_params.shape[0] // 2, sequence.shape[1]
    hidden = [state[2 * i] for i in range(l)]
    cell = [state[2 * i + 1] for i in range(l)]
    total = 0.0
    for t in range(sequence.shape[0] - 1):
        x = sequence[t] * extra_params[0]
        for i in range(l):
            w, bias = main_params[2 * i], main_params[2 * i + 1]
            forget = torch.sigmoid(x * w[0:b] + bias[0:b])
            ingate = torch.sigmoid(hidden[i] * w[b:2 * b] + bias[b:2 * b])
            outgate = torch.sigmoid(x * w[2 * b:3 * b] + bias[2 * b:3 * b])
            change = torch.tanh(hidden[i] * w[3 * b:] + bias[3 * b:])
            cell[i] = cell[i] * forget + ingate * change
            hidden[i] = outgate * torch.tanh(cell[i])
            x = hidden[i]
        ypred = x * extra_params[1] + extra_params[2]
        lse = torch.log(torch.exp(ypred).sum() + 2)
        total = total + (sequence[t + 1] * (ypred - lse)).sum()
    return -total / ((sequence.shape[0] - 1) * b)


def lstm_expected(inp: dict) -> tuple[float, np.ndarray]:
    """(objective, gradient in main_params then extra_params, each flattened by rows) by torch.autograd."""
    import torch

    main, extra = (torch.tensor(inp[key], dtype=torch.float64, requires_grad=True)
                   for key in ("main_params", "extra_params"))
    value = lstm_torch(main, extra, torch.tensor(inp["state"], dtype=torch.float64),
                       torch.tensor(inp["sequence"], dtype=torch.float64))
    grads = torch.autograd.grad(value, (main, extra))
    return float(value.detach()), np.concatenate([g.numpy().ravel() for g in grads])


# ----------------------------------------------------------------------------- det
def det_by_minors(A: np.ndarray) -> float:
    """det.hpp's expansion by minors along the first row, recursive, in numpy (small l only: l! terms)."""
    if A.shape[0] == 1:
        return float(A[0, 0])
    return sum((-1.0) ** j * A[0, j] * det_by_minors(np.delete(A[1:], j, axis=1)) for j in range(A.shape[0]))


def det_expected(inp: dict) -> tuple[float, np.ndarray]:
    """(det A, by minors up to l = 8 (l! terms in Python) and by torch.linalg.det above; its gradient in A by
    torch.autograd through torch.linalg.det, row-major)."""
    import torch

    ell = int(inp["ell"])
    A = torch.tensor(inp["A"], dtype=torch.float64).reshape(ell, ell).requires_grad_()
    (grad,) = torch.autograd.grad(torch.linalg.det(A), A)
    value = det_by_minors(A.detach().numpy()) if ell <= 8 else float(torch.linalg.det(A.detach()))
    return value, grad.numpy().ravel()


# ----------------------------------------------------------------------------- ode
def ode_torch(x, s: int):
    """ode.hpp's Runge-Kutta in torch: y_0' = x_0, y_i' = x_i y_{i-1} (y shifted by one, a 1 first), over [0, 2]."""
    import torch

    h, one = 2.0 / s, torch.ones(1, dtype=x.dtype)
    y = torch.zeros_like(x)

    def rate(state):
        return x * torch.cat([one, state[:-1]])
    for _ in range(s):
        k1 = rate(y)
        k2 = rate(y + h * k1 / 2)
        k3 = rate(y + h * k2 / 2)
        k4 = rate(y + h * k3)
        y = y + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return y


def ode_expected(inp: dict) -> tuple[np.ndarray, np.ndarray]:
    """(y(2), the gradient of its last element in x by torch.autograd)."""
    import torch

    x = torch.tensor(inp["x"], dtype=torch.float64, requires_grad=True)
    y = ode_torch(x, int(inp["s"]))
    (grad,) = torch.autograd.grad(y[-1], x)
    return y.detach().numpy(), grad.numpy()


# ----------------------------------------------------------------------------- particle and saddle (nested AD)
PARTICLE_EXPECTED = 0.2071918746486116    # evals/particle/run.py's expected output for w = 0
SADDLE_EXPECTED = [8.246324826140356e-06] * 4   # evals/saddle/run.py's for start (1, 1)


def gd_argmin(cost, gradient, x0) -> np.ndarray:
    """cpp/gradbench/gd.hpp's multivariate_argmin, as a plain while loop over numpy arrays."""
    x = np.array(x0, dtype=np.float64)
    fx, gx, eta, i = cost(x), gradient(x), 1e-5, 0
    while np.sqrt(gx @ gx) > 1e-5:
        if i == 10:
            eta, i = 2 * eta, 0
            continue
        x_new = x - eta * gx
        if np.sqrt((x - x_new) @ (x - x_new)) <= 1e-5:
            break
        f_new = cost(x_new)
        if f_new < fx:
            x, fx, gx, i = x_new, f_new, gradient(x_new), i + 1
        else:
            eta, i = eta / 2, 0
    return x


def saddle_expected(inp: dict) -> np.ndarray:
    """[p1, p2]: gd_argmin of max_p2 f(p1, p2), then the argmax at it, with f's gradients written out (∇_p1 f =
    2 p1, ∇_p2 f = -2 p2; the inner argmax does not move with p1, so the cost's gradient is 2 p1)."""
    start = np.asarray(inp["start"], dtype=np.float64)

    def argmax(p1):
        return gd_argmin(lambda p2: -(p1 @ p1 - p2 @ p2), lambda p2: 2 * p2, start)
    p1 = gd_argmin(lambda p1: p1 @ p1 - argmax(p1) @ argmax(p1), lambda p1: 2 * p1, start)
    return np.concatenate([p1, argmax(p1)])


def particle_cost_torch(w):
    """The Euler simulation in torch (while loop), the force from the closed-form gradient of the potential."""
    import torch

    charges = torch.stack([torch.stack([torch.tensor(10.0, dtype=w.dtype), 10.0 - w]),
                           torch.tensor([10.0, 0.0], dtype=w.dtype)])   # (one tensor: a quarter of the ops)
    x, xdot = torch.tensor([0.0, 8.0], dtype=w.dtype), torch.tensor([0.75, 0.0], dtype=w.dtype)
    while True:
        d = x - charges
        force = torch.sum(d / torch.sum(d ** 2, dim=1, keepdim=True) ** 1.5, dim=0)
        x_new = x + 0.1 * xdot
        if x_new[1] <= 0:
            break
        x, xdot = x_new, xdot + 0.1 * force
    x_f = x + (-x[1] / xdot[1]) * xdot
    return x_f[0] ** 2


def particle_expected(inp: dict) -> float:
    """gd_argmin of the simulation's cost in w, its derivative by torch.autograd through the while loop."""
    import torch

    def cost(w):
        with torch.no_grad():
            return float(particle_cost_torch(torch.tensor(w[0], dtype=torch.float64)))

    def gradient(w):
        t = torch.tensor(w[0], dtype=torch.float64, requires_grad=True)
        return np.array([float(torch.autograd.grad(particle_cost_torch(t), t)[0])])
    return float(gd_argmin(cost, gradient, [float(inp["w"])])[0])
