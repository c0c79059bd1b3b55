"""Reference implementations of the ADBench Gaussian-mixture-model (GMM) objective.

The objective (see /work/shared/reference/gmm.md, after Šrajer et al. 2018, arXiv 1807.10129):

    L = -(n d / 2) log 2π
        + Σ_i logsumexp_k( α_k + Σ_j q_kj - ½ ‖Q_k (x_i - μ_k)‖² )
        - n · logsumexp_k(α_k)
        + Σ_k [ ½ γ² (‖exp(q_k)‖² + ‖l_k‖²) - m Σ_j q_kj ]
        - K · C,
    C = n_w d (log γ - ½ log 2) - log Γ_d(n_w / 2),   n_w = d + m + 1.

icf_k holds q_k (the log of Q_k's diagonal, d entries) followed by l_k (the d(d-1)/2 strictly
lower entries of Q_k, column by column).

Four independent versions: a float64 numpy oracle written for clarity, a vectorized torch
version (with its autograd gradient), and a jax version (with a jitted value-and-gradient).
torch and jax are imported inside the functions that need them, so this module imports with
numpy alone.
"""
from __future__ import annotations

import math

import numpy as np


# ----------------------------------------------------------------------------- data
def make_data(d: int, K: int, n: int, seed: int = 0, dtype=np.float64) -> dict:
    """ADBench GMM inputs: α, q, l, x ~ N(0, 1), μ ~ U(0, 1), γ = 1, m = 0, from a fixed seed."""
    rng = np.random.default_rng(seed)
    alphas = rng.standard_normal(K)
    means = rng.uniform(0.0, 1.0, (K, d))
    icf = rng.standard_normal((K, d * (d + 1) // 2))
    x = rng.standard_normal((n, d))
    arrays = {"alphas": alphas, "means": means, "icf": icf, "x": x}
    out = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in arrays.items()}
    out["gamma"], out["m"] = 1.0, 0.0
    return out


def rel_error(a, b) -> float:
    """ADBench's error: max over elements of |a - b| / max(1, |a| + |b|)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a) + np.abs(b)), initial=0.0))


# ----------------------------------------------------------------------------- shared constants
def log_multigamma(a: float, d: int) -> float:
    """log Γ_d(a) = d(d-1)/4 log π + Σ_{j=1..d} lgamma(a + (1 - j)/2)."""
    return d * (d - 1) / 4 * math.log(math.pi) + sum(math.lgamma(a + (1 - j) / 2) for j in range(1, d + 1))


def wishart_constant(d: int, gamma: float, m: float) -> float:
    """C = n_w d (log γ - ½ log 2) - log Γ_d(n_w / 2), with n_w = d + m + 1."""
    n_w = d + m + 1
    return n_w * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_multigamma(0.5 * n_w, d)


def lower_positions(d: int) -> np.ndarray:
    """Flat positions r * d + c in a [d, d] matrix of l_1, ..., l_{d(d-1)/2}: strictly lower, column by column."""
    return np.array([r * d + c for c in range(d) for r in range(c + 1, d)], dtype=np.int64)


# ----------------------------------------------------------------------------- numpy oracle
def q_matrix_numpy(icf_k: np.ndarray, d: int) -> np.ndarray:
    """Q_k: lower triangular, diagonal exp(q_k), strictly lower part l_k column by column."""
    Q = np.diag(np.exp(icf_k[:d]))
    pos = d
    for c in range(d):
        for r in range(c + 1, d):
            Q[r, c] = icf_k[pos]
            pos += 1
    return Q


def logsumexp_numpy(v: np.ndarray, axis: int = -1) -> np.ndarray:
    """log Σ exp(v - max v) + max v along `axis`."""
    vmax = np.max(v, axis=axis, keepdims=True)
    return np.squeeze(np.log(np.sum(np.exp(v - vmax), axis=axis, keepdims=True)) + vmax, axis=axis)


def gmm_objective_numpy(alphas, means, icf, x, gamma, m) -> float:
    """The GMM objective in float64 numpy, one component at a time (the independent oracle)."""
    alphas, means, icf, x = (np.asarray(a, dtype=np.float64) for a in (alphas, means, icf, x))
    n, d = x.shape
    K = alphas.shape[0]
    scores = np.empty((n, K))
    prior = 0.0
    for k in range(K):
        q, lower = icf[k, :d], icf[k, d:]
        Qx = (x - means[k]) @ q_matrix_numpy(icf[k], d).T  # row i is Q_k (x_i - μ_k)
        scores[:, k] = alphas[k] + np.sum(q) - 0.5 * np.sum(Qx * Qx, axis=1)
        prior += 0.5 * gamma**2 * (np.sum(np.exp(q) ** 2) + np.sum(lower * lower)) - m * np.sum(q)
    total = -0.5 * n * d * math.log(2 * math.pi)
    total += np.sum(logsumexp_numpy(scores, axis=1)) - n * logsumexp_numpy(alphas, axis=0)
    return float(total + prior - K * wishart_constant(d, gamma, m))


# ----------------------------------------------------------------------------- torch
def q_matrices_torch(icf, d: int):
    """Q [K, d, d] from icf [K, d(d+1)/2]: diag(exp(q_k)) plus l_k scattered below the diagonal.

    (A scatter, not a gather with a [d, d] index: torch.compile spends minutes on that gather at d = 48.)
    """
    import torch

    K = icf.shape[0]
    positions = torch.as_tensor(lower_positions(d), device=icf.device)
    lower = icf.new_zeros(K, d * d).index_copy(1, positions, icf[:, d:]).view(K, d, d)
    return torch.diag_embed(torch.exp(icf[:, :d])) + lower


def gmm_objective_torch(alphas, means, icf, x, gamma, m):
    """The GMM objective on torch tensors, vectorized over data and components; a 0-d tensor."""
    import torch

    n, d = x.shape
    K = alphas.shape[0]
    q = icf[:, :d]
    xcentered = x[:, None, :] - means[None, :, :]  # [n, K, d]
    Qx = torch.einsum("kij,nkj->nki", q_matrices_torch(icf, d), xcentered)
    scores = alphas + q.sum(dim=1) - 0.5 * (Qx * Qx).sum(dim=2)  # [n, K]
    prior = 0.5 * gamma**2 * ((torch.exp(q) ** 2).sum() + (icf[:, d:] ** 2).sum()) - m * q.sum()
    return (-0.5 * n * d * math.log(2 * math.pi)
            + torch.logsumexp(scores, dim=1).sum() - n * torch.logsumexp(alphas, dim=0)
            + prior - K * wishart_constant(d, gamma, m))


def torch_inputs(data: dict, requires_grad: bool = False) -> tuple:
    """(alphas, means, icf, x) as float64 torch tensors; the first three optionally leaves with grad."""
    import torch

    params = [torch.tensor(data[k], dtype=torch.float64, requires_grad=requires_grad)
              for k in ("alphas", "means", "icf")]
    return (*params, torch.tensor(data["x"], dtype=torch.float64))


def gmm_grad_torch(data: dict) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(value, d_alphas, d_means, d_icf) in float64 through torch.autograd, as numpy."""
    import torch

    alphas, means, icf, x = torch_inputs(data, requires_grad=True)
    value = gmm_objective_torch(alphas, means, icf, x, data["gamma"], data["m"])
    grads = torch.autograd.grad(value, (alphas, means, icf))
    return (float(value.detach()), *(g.numpy() for g in grads))


# ----------------------------------------------------------------------------- jax
def enable_jax_float64():
    """Turn on float64 in jax (off by default) and return the jax module."""
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def gmm_objective_jax(alphas, means, icf, x, gamma, m):
    """The GMM objective on jax arrays, the same vectorized form as the torch version."""
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    n, d = x.shape
    K = alphas.shape[0]
    q = icf[:, :d]
    lower = jnp.zeros((K, d * d), icf.dtype).at[:, lower_positions(d)].set(icf[:, d:]).reshape(K, d, d)
    Q = jnp.exp(q)[:, :, None] * jnp.eye(d, dtype=icf.dtype) + lower
    Qx = jnp.einsum("kij,nkj->nki", Q, x[:, None, :] - means[None, :, :])
    scores = alphas + q.sum(axis=1) - 0.5 * (Qx * Qx).sum(axis=2)
    prior = 0.5 * gamma**2 * ((jnp.exp(q) ** 2).sum() + (icf[:, d:] ** 2).sum()) - m * q.sum()
    return (-0.5 * n * d * math.log(2 * math.pi)
            + logsumexp(scores, axis=1).sum() - n * logsumexp(alphas)
            + prior - K * wishart_constant(d, gamma, m))


def jax_objective_jit():
    """jax.jit of the objective, float64 on; gamma and m (python floats) are static arguments."""
    jax = enable_jax_float64()
    return jax.jit(gmm_objective_jax, static_argnums=(4, 5))


def jax_value_and_grad_jit():
    """jax.jit(value_and_grad) w.r.t. alphas, means, icf: f(...) -> (value, (d_alphas, d_means, d_icf))."""
    jax = enable_jax_float64()
    return jax.jit(jax.value_and_grad(gmm_objective_jax, argnums=(0, 1, 2)), static_argnums=(4, 5))


def jax_inputs(data: dict) -> tuple:
    """(alphas, means, icf, x) as float64 jax arrays on the default device."""
    enable_jax_float64()
    import jax.numpy as jnp

    return tuple(jnp.asarray(data[k], dtype=jnp.float64) for k in ("alphas", "means", "icf", "x"))
