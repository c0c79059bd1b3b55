"""A corpus of tensor kernels in the ksbuild subset, written as ordinary PyTorch code.

Every function here runs unchanged under torch (float64 default dtype, float scalars passed as 0-d
tensors so that autograd sees them) and is meant to be compiled by ksbuild with `float` = float64.
Tests: tests/test_tensor_corpus.py.
"""
# ruff: noqa: F821  (the string annotations are ksbuild signatures such as "float[n, d]", not forward references)
import math

import torch

LOG_2PI = math.log(2.0 * math.pi)
LN_EPS = 1e-5


# ---- time loops with carried state -------------------------------------------------------------


def _flow_field(A, y):
    return torch.tanh(A @ y) - 0.3 * torch.sin(y)


def rk2_flow(A: "float[d, d]", y0: "float[d]", ts: "float[S]") -> "float[d]":
    """Explicit midpoint (RK2) integration of y' = tanh(A y) - 0.3 sin(y) over the time grid ts."""
    y = y0
    for i in range(len(ts) - 1):
        dt = ts[i + 1] - ts[i]
        k1 = _flow_field(A, y)
        k2 = _flow_field(A, y + 0.5 * dt * k1)
        y = y + dt * k2
    return y


def lotka_volterra(theta: "float[4]", y0: "float[2]", dt: float, steps: int) -> tuple["float[2]", float]:
    """Forward-Euler predator-prey model; returns the final state and the time integral of the prey."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]
    y = y0
    area = 0.0
    for _ in range(steps):
        prey, pred = y[0], y[1]
        dy = torch.stack([a * prey - b * prey * pred, c * prey * pred - d * pred])
        y = y + dt * dy
        area = area + dt * prey
    return y, area


def elman_rnn(xs: "float[T, d]", h0: "float[k]", Wx: "float[k, d]", Wh: "float[k, k]",
              b: "float[k]") -> tuple["float[k]", float]:
    """Elman RNN unrolled over the rows of xs; returns the last state and the mean squared activation."""
    h = h0
    energy = 0.0
    for t in range(len(xs)):
        h = torch.tanh(Wx @ xs[t] + Wh @ h + b)
        energy += torch.mean(h * h)
    return h, energy / len(xs)


def ema_trend(x: "float[T, n]", alpha: float) -> tuple["float[n]", "float[n, n]", "float[n]"]:
    """Exponentially weighted mean and covariance of a vector series, and the drawdown from the running peak."""
    T, n = x.shape
    m = x[0]
    C = torch.zeros(n, n)
    peak = x[0]
    for t in range(1, T):
        dx = x[t] - m
        m = m + alpha * dx
        C = (1.0 - alpha) * (C + alpha * torch.outer(dx, dx))
        peak = torch.maximum(peak, x[t])
    return m, C, peak - x[-1]


def _laplacian(u):
    n = u.shape[0]
    left = torch.cat([u[:1], u[:n - 1]])  # mirrored (Neumann) boundaries
    right = torch.cat([u[1:], u[n - 1:]])
    return left - 2.0 * u + right


def allen_cahn(u0: "float[n]", kappa: float, dt: float, steps: int) -> "float[n]":
    """Explicit time stepping of the 1-D Allen-Cahn equation u' = kappa u'' + u - u^3."""
    u = u0
    for _ in range(steps):
        u = u + dt * (kappa * _laplacian(u) + u - u ** 3)
    return u


# ---- geometry with data-dependent branches ---------------------------------------------------


def point_segment_distance(p: "float[d]", a: "float[d]", b: "float[d]") -> float:
    """Euclidean distance from the point p to the segment [a, b]."""
    ab = b - a
    t = torch.dot(p - a, ab) / torch.dot(ab, ab)
    if t < 0.0:
        closest = a
    elif t > 1.0:
        closest = b
    else:
        closest = a + t * ab
    diff = p - closest
    return torch.sqrt(torch.sum(diff * diff))


def ray_sphere(origin: "float[3]", direction: "float[3]", center: "float[3]", radius: float) -> float:
    """Distance along the ray to the first sphere hit ahead; for a miss, minus the ray's clearance."""
    d = direction / torch.sqrt(torch.dot(direction, direction))
    oc = origin - center
    b = torch.dot(oc, d)
    c = torch.dot(oc, oc) - radius * radius
    disc = b * b - c
    if disc < 0.0 or (c > 0.0 and b > 0.0):
        t_closest = -b if b < 0.0 else 0.0
        closest = oc + t_closest * d
        return radius - torch.sqrt(torch.dot(closest, closest))
    s = torch.sqrt(disc)
    t_near = -b - s
    return t_near if t_near > 0.0 else -b + s


# ---- per-observation losses -----------------------------------------------------------------------


def huber_regression(X: "float[n, p]", y: "float[n]", w: "float[p]", delta: float) -> float:
    """Mean Huber loss of the linear model X w, one row (and one branch) at a time."""
    n = X.shape[0]
    total = 0.0
    for i in range(n):
        r = torch.dot(X[i], w) - y[i]
        a = torch.abs(r)
        if a <= delta:
            total += 0.5 * r * r
        else:
            total += delta * (a - 0.5 * delta)
    return total / n


def _diag_normal_logpdf(x, mu, log_sigma):
    z = (x - mu) * torch.exp(-log_sigma)
    return -0.5 * torch.sum(torch.square(z)) - torch.sum(log_sigma) - 0.5 * LOG_2PI * x.shape[0]


def gaussian_loglik(X: "float[n, d]", mu: "float[d]", log_sigma: "float[d]") -> float:
    """Log-likelihood of the rows of X under a diagonal Gaussian, summed row by row."""
    return sum(_diag_normal_logpdf(X[i], mu, log_sigma) for i in range(X.shape[0]))


def softmax_xent(logits: "float[n, c]", targets: "float[n, c]") -> float:
    """Mean cross-entropy of soft targets under softmax(logits), through logsumexp."""
    lse = torch.logsumexp(logits, dim=1)
    return torch.mean(lse - torch.sum(targets * logits, dim=1))


def nll_labels(logits: "float[n, c]", labels: "i64[n]") -> float:
    """Mean negative log-likelihood of integer class labels, picking each row's logit by index."""
    n = logits.shape[0]
    lse = torch.logsumexp(logits, dim=1)
    return sum(lse[i] - logits[i, labels[i]] for i in range(n)) / n


def pairwise_rank_loss(scores: "float[n]", rel: "float[n]") -> float:
    """RankNet-style logistic loss over all score differences plus a margin hinge."""
    diff = scores[:, None] - scores[None, :]
    target = torch.sigmoid(4.0 * (rel[:, None] - rel[None, :]))
    logistic = target * torch.log1p(torch.exp(-diff)) + (1.0 - target) * torch.log1p(torch.exp(diff))
    hinge = torch.where(rel[:, None] > rel[None, :], torch.relu(0.5 - diff), torch.zeros_like(diff))
    return logistic.mean() + 0.1 * hinge.sum()


# ---- layers -----------------------------------------------------------------------------------


def layer_norm(x: "float[n, d]", gamma: "float[d]", beta: "float[d]") -> "float[n, d]":
    """Layer normalisation over the last axis with a learned scale and shift."""
    mu = x.mean(dim=1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * gamma + beta


def mlp2(x: "float[n, d]", W1: "float[h, d]", b1: "float[h]", W2: "float[o, h]", b2: "float[o]") -> "float[n, o]":
    """Two-layer perceptron with a tanh hidden layer, nn.Linear weight layout."""
    hidden = torch.tanh(x @ W1.T + b1)
    return hidden @ W2.T + b2


def causal_attention(q: "float[n, e]", k: "float[n, e]", v: "float[n, f]") -> "float[n, f]":
    """Single-head causal scaled dot-product attention."""
    n, e = q.shape
    scores = q @ k.T / math.sqrt(e)
    pos = torch.arange(n)
    scores = torch.where(pos[None, :] <= pos[:, None], scores, torch.full((n, n), -1e9))
    weights = torch.exp(scores - torch.logsumexp(scores, dim=1)[:, None])
    return weights @ v


def affine_coupling(x: "float[n, 4]", W: "float[2, 4]", b: "float[4]") -> tuple["float[n, 4]", float]:
    """RealNVP affine coupling layer on 4 features; returns the output and the log-determinant."""
    x1, x2 = x[:, :2], x[:, 2:]
    st = x1 @ W + b
    s = torch.tanh(st[:, :2])
    t = st[:, 2:]
    y2 = x2 * torch.exp(s) + t
    return torch.cat([x1, y2], dim=1), s.sum()


def bmm_pool(A: "float[b, n, m]", B: "float[b, m, 4]") -> "float[b, n, 2]":
    """Batched matmul of row-normalised A with B, an ELU, then mean-pooling of column pairs."""
    b, n, m = A.shape
    scale = torch.sum(A * A, dim=2).unsqueeze(2)
    C = (A @ B) / torch.sqrt(1.0 + scale)
    C = torch.where(C > 0.0, C, torch.expm1(C))
    pooled = C.reshape(b * n * 2, 2).mean(1)
    return pooled.view(b, n, 2)


def bilinear_einsum(x: "float[b, i]", W: "float[o, i, j]", y: "float[b, j]") -> "float[b, o]":
    """Bilinear layer out[b, o] = x[b] . W[o] . y[b] as two einsum contractions."""
    xw = torch.einsum("bi,oij->boj", x, W)
    return torch.einsum("boj,bj->bo", xw, y)


# ---- matrices built by index, stacking, reductions ------------------------------------------------


def poly_eval(x: "float[n]", c: "float[p]") -> tuple["float[n]", "float[n]"]:
    """Polynomial with coefficients c and its derivative at the points x, through Vandermonde matrices."""
    p = c.shape[0]
    V = torch.stack([x ** k for k in range(p)], dim=1)
    dV = torch.stack([k * x ** (k - 1) for k in range(1, p)], dim=1)
    return V @ c, dV @ c[1:]


def cholesky_energy(lvec: "float[m]", logdiag: "float[d]", x: "float[d]") -> tuple["float[d, d]", float]:
    """Cholesky factor L from packed strictly-lower entries and a log-diagonal; and 0.5|L^T x|^2 - log det L."""
    d = x.shape[0]
    m = lvec.shape[0]
    zero = torch.zeros_like(logdiag[0])
    L = torch.stack([
        torch.stack([
            lvec[min(i * (i - 1) // 2 + j, m - 1)] if i > j else (torch.exp(logdiag[i]) if i == j else zero)
            for j in range(d)
        ])
        for i in range(d)
    ])
    z = L.T @ x
    return L, 0.5 * torch.dot(z, z) - torch.sum(logdiag)


def cov_summary(x: "float[n, d]") -> tuple["float[d]", "float[d, d]", "float[d, 2]", float]:
    """Column means, lower triangle of the jittered sample covariance, per-column max/min, overall range."""
    n, d = x.shape
    mu = x.mean(dim=0, keepdim=True)
    xc = x - mu
    C = xc.T @ xc / (n - 1) + 1e-3 * torch.eye(d)
    extremes = torch.stack([torch.amax(x, dim=0), torch.amin(x, dim=0)], dim=1)
    return mu.squeeze(0), torch.tril(C), extremes, x.max() - x.min()


def rbf_gram(a: "float[n, d]", b: "float[m, d]", log_ell: float) -> "float[n, m]":
    """Squared-exponential kernel matrix between the rows of a and b, accumulated feature by feature."""
    sq = sum((a[:, j][:, None] - b[:, j][None, :]) ** 2 for j in range(a.shape[1]))
    return torch.exp(-0.5 * sq * torch.exp(-2.0 * log_ell))


def shared_left_product(a: "float[m, 22]", b: "float[w, 22, 12]", c: "float[w, m, 12]") -> "float[w, m, 12]":
    """One left operand by a right operand per direction (jvp directions through shared skinning weights, as
    GradBench's ht): the directions' columns side by side in one product."""
    return torch.tanh(torch.einsum("mk,wkn->wmn", a, b)) * c
