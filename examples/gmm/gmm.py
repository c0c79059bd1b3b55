"""The ADBench Gaussian mixture model objective, written the way a PyTorch user writes it.

The formula is in ../shared/reference/gmm.md (Šrajer, Kukelova, Fitzgibbon 2018). This file is
plain Python: it runs under torch as it is, and ksbuild compiles the same source to C++.
Annotations are tensor types: "float[K, d]" is a K×d tensor of the build dtype.
"""
import math

import torch


def cholesky_factor(q, icf_k):
    """Q_k: lower triangular, exp(q) on the diagonal, icf_k[d:] below it column by column."""
    d = q.shape[0]
    return torch.stack([
        torch.stack([
            torch.exp(q[i]) if i == j else
            (icf_k[d + j * (2 * d - j - 1) // 2 + i - j - 1] if i > j else 0.0 * q[0])
            for j in range(d)])
        for i in range(d)])


def log_gamma_d(a, d):
    """log of the multivariate gamma function Γ_d(a)."""
    return 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, d + 1))


def log_wishart_prior(qs, ls, wishart_gamma, wishart_m, d, K):
    """Σ_k ½γ²(‖exp(q_k)‖² + ‖l_k‖²) − m Σ q_kj − K·C."""
    n_w = d + wishart_m + 1
    C = n_w * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - log_gamma_d(0.5 * n_w, d)
    frobenius = torch.sum(torch.exp(qs) ** 2) + torch.sum(ls ** 2)
    return 0.5 * wishart_gamma ** 2 * frobenius - wishart_m * torch.sum(qs) - K * C


def gmm_objective(alphas: "float[K]", means: "float[K, d]", icf: "float[K, T]", x: "float[n, d]",
                  wishart_gamma: float, wishart_m: float) -> float:
    """The log-likelihood of the data x under the mixture, plus the Wishart prior.

    All observations at once, as ADBench's PyTorch version does: Q_k (x_i - μ_k) for every i and k
    is one batched matrix product, which the "blas" backend hands to BLAS.
    """
    n, d = x.shape
    K = alphas.shape[0]
    qs = icf[:, :d]
    ls = icf[:, d:]
    Qs = torch.stack([cholesky_factor(qs[k], icf[k]) for k in range(K)])
    base = alphas + torch.sum(qs, dim=1)
    centered = x.unsqueeze(1) - means.unsqueeze(0)                 # [n, K, d]
    mahalanobis = torch.einsum("kab,nkb->nka", Qs, centered)       # [n, K, d]
    scores = base.unsqueeze(0) - 0.5 * torch.sum(mahalanobis ** 2, dim=2)
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + torch.sum(torch.logsumexp(scores, dim=1)) - n * torch.logsumexp(alphas, dim=0)
            + log_wishart_prior(qs, ls, wishart_gamma, wishart_m, d, K))


def gmm_objective_loop(alphas: "float[K]", means: "float[K, d]", icf: "float[K, T]", x: "float[n, d]",
                  wishart_gamma: float, wishart_m: float) -> float:
    """gmm_objective with a loop over the observations: the same value, one x[i] at a time."""
    n, d = x.shape
    K = alphas.shape[0]
    qs = icf[:, :d]
    ls = icf[:, d:]
    Qs = torch.stack([cholesky_factor(qs[k], icf[k]) for k in range(K)])
    base = alphas + torch.sum(qs, dim=1)
    slse = sum(
        torch.logsumexp(base - 0.5 * torch.sum(torch.einsum("kab,kb->ka", Qs, x[i] - means) ** 2, dim=1), dim=0)
        for i in range(n))
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + slse - n * torch.logsumexp(alphas, dim=0)
            + log_wishart_prior(qs, ls, wishart_gamma, wishart_m, d, K))



def gmm_objective_tri(alphas: "float[K]", means: "float[K, d]", icf: "float[K, T]", x: "float[n, d]",
                      wishart_gamma: float, wishart_m: float) -> float:
    """gmm_objective written with loops, as ADBench's C++ is: for each observation i and component k,
    Q_k (x_i − μ_k) row by row, row r being exp(q_kr)(x_ir − μ_kr) plus the triangular sum
    Σ_{c<r} L_k[r, c] (x_ic − μ_kc). The inner loop's count r is the index of the loop around it."""
    n, d = x.shape
    K = alphas.shape[0]
    slse = 0.0
    for i in range(n):
        scores = torch.stack([
            alphas[k] + torch.sum(icf[k, :d]) - 0.5 * sum(
                (torch.exp(icf[k, r]) * (x[i, r] - means[k, r])
                 + sum(icf[k, d + c * (2 * d - c - 1) // 2 + r - c - 1] * (x[i, c] - means[k, c]) for c in range(r)))
                ** 2 for r in range(d))
            for k in range(K)])
        slse = slse + torch.logsumexp(scores, dim=0)
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + slse - n * torch.logsumexp(alphas, dim=0)
            + log_wishart_prior(icf[:, :d], icf[:, d:], wishart_gamma, wishart_m, d, K))


def gmm_objective_tri_vec(alphas: "float[K]", means: "float[K, d]", icf: "float[K, T]", x: "float[n, d]",
                          wishart_gamma: float, wishart_m: float) -> float:
    """gmm_objective_tri with the components as a vector: loops over observations, rows and the
    triangular sums, each step on all K components at once."""
    n, d = x.shape
    qs = icf[:, :d]
    ls = icf[:, d:]
    base = alphas + torch.sum(qs, dim=1)
    slse = 0.0
    for i in range(n):
        xc = x[i] - means                                   # [K, d]
        sqnorm = 0.0 * alphas
        for r in range(d):
            row = torch.exp(qs[:, r]) * xc[:, r] + sum(ls[:, c * (2 * d - c - 1) // 2 + r - c - 1] * xc[:, c]
                                                      for c in range(r))
            sqnorm = sqnorm + row * row
        slse = slse + torch.logsumexp(base - 0.5 * sqnorm, dim=0)
    K = alphas.shape[0]
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + slse - n * torch.logsumexp(alphas, dim=0)
            + log_wishart_prior(qs, ls, wishart_gamma, wishart_m, d, K))
