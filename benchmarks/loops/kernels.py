"""Loop-style objectives as a Python user ports them from C: for-loops over scalars (benchmarks/loops/objectives.py).

gmm_loops is the ADBench Gaussian mixture objective (Šrajer, Kukelova, Fitzgibbon 2018; ADBench's
gmm.h): for every observation i and component k, the log-sum-exp over k of
α_k + Σ_r q_kr − ½‖Q_k (x_i − μ_k)‖², Q_k lower triangular with exp(q_k) on its diagonal and icf[k, d:]
below it column by column; minus n·logsumexp(α), plus the Wishart prior. ba_loops is the bundle
adjustment objective (ADBench's ba.h): Σ over observations of ‖w_j (project(cam[c_j], X[p_j]) − feat_j)‖²
+ (1 − w_j²)², one observation at a time with Rodrigues' rotation and radial distortion. Both run
under torch as they are (the references in objectives.py are vectorized torch, written apart).
"""
import math

import torch


def gmm_loops(alphas: "float[K]", means: "float[K, d]", icf: "float[K, T]", x: "float[n, d]",
              wishart_gamma: float, wishart_m: float) -> float:
    """The GMM objective, loops over observations, components, rows and the triangle of Q_k."""
    n, d = x.shape
    K = alphas.shape[0]
    slse = 0.0
    for i in range(n):
        scores = []
        for k in range(K):
            sumq = 0.0
            sqnorm = 0.0
            for r in range(d):
                sumq = sumq + icf[k, r]
                row = torch.exp(icf[k, r]) * (x[i, r] - means[k, r])
                for c in range(r):
                    row = row + icf[k, d + c * (2 * d - c - 1) // 2 + r - c - 1] * (x[i, c] - means[k, c])
                sqnorm = sqnorm + row * row
            scores.append(alphas[k] + sumq - 0.5 * sqnorm)
        slse = slse + torch.logsumexp(torch.stack(scores), dim=0)
    frobenius = 0.0
    sum_q = 0.0
    for k in range(K):
        for r in range(d):
            frobenius = frobenius + torch.exp(icf[k, r]) ** 2
            sum_q = sum_q + icf[k, r]
        for j in range(d, icf.shape[1]):
            frobenius = frobenius + icf[k, j] ** 2
    n_w = d + wishart_m + 1.0
    log_gamma = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(d):
        log_gamma = log_gamma + math.lgamma(0.5 * n_w - 0.5 * j)
    wishart_c = n_w * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - log_gamma
    prior = 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_q - K * wishart_c
    return -n * d * 0.5 * math.log(2.0 * math.pi) + slse - n * torch.logsumexp(alphas, dim=0) + prior


def ba_loops(cams: "float[C, 11]", points: "float[P, 3]", w: "float[M]", feats: "float[M, 2]",
             cam_index: "int[M]", point_index: "int[M]") -> float:
    """The BA objective: the squared reprojection and weight errors, one observation at a time."""
    total = 0.0
    for j in range(w.shape[0]):
        c = cam_index[j]
        p = point_index[j]
        x0 = points[p, 0] - cams[c, 3]
        x1 = points[p, 1] - cams[c, 4]
        x2 = points[p, 2] - cams[c, 5]
        r0 = cams[c, 0]
        r1 = cams[c, 1]
        r2 = cams[c, 2]
        theta2 = r0 * r0 + r1 * r1 + r2 * r2
        theta = torch.sqrt(theta2)
        cos_t = torch.cos(theta)
        sin_t = torch.sin(theta)
        k0 = r0 / theta
        k1 = r1 / theta
        k2 = r2 / theta
        kx = (k0 * x0 + k1 * x1 + k2 * x2) * (1.0 - cos_t)
        y0 = x0 * cos_t + (k1 * x2 - k2 * x1) * sin_t + k0 * kx
        y1 = x1 * cos_t + (k2 * x0 - k0 * x2) * sin_t + k1 * kx
        y2 = x2 * cos_t + (k0 * x1 - k1 * x0) * sin_t + k2 * kx
        u = y0 / y2
        v = y1 / y2
        rsq = u * u + v * v
        distortion = 1.0 + cams[c, 9] * rsq + cams[c, 10] * rsq * rsq
        e0 = w[j] * (cams[c, 6] * u * distortion + cams[c, 7] - feats[j, 0])
        e1 = w[j] * (cams[c, 6] * v * distortion + cams[c, 8] - feats[j, 1])
        e2 = 1.0 - w[j] * w[j]
        total = total + e0 * e0 + e1 * e1 + e2 * e2
    return total
