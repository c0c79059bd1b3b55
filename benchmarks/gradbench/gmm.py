"""GradBench's gmm eval: the log posterior of a Gaussian mixture with a Wishart prior
(evals/gmm/README.md of gradbench/gradbench; ADBench's objective with its signs fixed).

The same batched form as examples/gmm/gmm.py, with GradBench's inputs: q (log of Q_k's diagonal)
and l (Q_k's strictly lower part, column by column) as separate arrays, and the prior's sign:
F = -N(D/2 log 2π + lse(α)) + Σ_i lse(β_i) + K C - γ²/2 Σ_k ‖Q_k‖²_F + m Σ q.
"""
import math

import torch


def q_matrix(q_k, l_k):
    """Q_k: lower triangular, exp(q_k) on the diagonal, l_k below it column by column."""
    d = q_k.shape[0]
    return torch.stack([
        torch.stack([
            torch.exp(q_k[i]) if i == j else
            (l_k[j * (2 * d - j - 1) // 2 + i - j - 1] if i > j else 0.0 * q_k[0])
            for j in range(d)])
        for i in range(d)])


def log_gamma_d(a, d):
    """log of the multivariate gamma function Γ_d(a)."""
    return 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, d + 1))


def gmm_objective(alpha: "float[K]", mu: "float[K, d]", q: "float[K, d]", l: "float[K, L]",
                  x: "float[n, d]", gamma: float, m: float) -> float:
    """log p(X | θ, φ) + log p(θ), all observations at once."""
    n, d = x.shape
    K = alpha.shape[0]
    Qs = torch.stack([q_matrix(q[k], l[k]) for k in range(K)])
    centered = x.unsqueeze(1) - mu.unsqueeze(0)                    # [n, K, d]
    mahalanobis = torch.einsum("kab,nkb->nka", Qs, centered)       # [n, K, d]
    beta = (alpha + torch.sum(q, dim=1)).unsqueeze(0) - 0.5 * torch.sum(mahalanobis ** 2, dim=2)
    n_w = d + m + 1
    C = n_w * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d(0.5 * n_w, d)
    frobenius = torch.sum(torch.exp(q) ** 2) + torch.sum(l ** 2)
    return (-n * d * 0.5 * math.log(2.0 * math.pi) + torch.sum(torch.logsumexp(beta, dim=1))
            - n * torch.logsumexp(alpha, dim=0)
            + K * C - 0.5 * gamma ** 2 * frobenius + m * torch.sum(q))
