"""Kernels written the way PyTorch users write them, for tests/test_torch_frontend.py.

Each runs under torch as it is (the annotations are strings); ksbuild compiles it. They cover
torch.nn.functional, tensor methods, `...` indexing and element assignment (x[i] = v).
"""
import math

import torch
import torch.nn.functional as F


def f_namespace(x: "float[n, d]") -> "float[n, d]":
    return F.relu(x) + torch.sigmoid(x) * F.tanh(x) + F.softmax(x, dim=1) - F.log_softmax(x, dim=-1)


def f_linear(x: "float[n, d]", w: "float[m, d]", b: "float[m]") -> "float[n, m]":
    return F.linear(x, w, b) + x @ w.t()


def f_losses(x: "float[n]", y: "float[n]") -> float:
    return F.mse_loss(x, y) + F.l1_loss(x, y, reduction="sum")


def f_methods(x: "float[n, d]") -> "float[n]":
    n = x.size(0)
    flat = x.flatten()
    return x.sum(1) / n + flat.reshape(x.size())[:, 0] + x.double().float().sign().sum(dim=1) * x.dim()


def f_ellipsis(x: "float[n, d, k]") -> "float[n, d]":
    return x[..., 0] * x[:, ..., 1] + x[0, ...].sum()


def f_fill(x: "float[n, d]") -> "float[n]":
    out = torch.zeros(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = torch.sum(x[i] * x[i])
    return out


def f_set_parts(x: "float[n, d]") -> "float[n, d]":
    y = x * 2.0
    y[0] = 0.0
    y[:, 1] = x[:, 0]
    y[1:3] += 1.0
    y[-1, -1] = 7.0
    return y


def f_running_sum(x: "float[n]") -> "float[n]":
    c = torch.zeros_like(x)
    s = 0.0
    for i in range(len(x)):
        s = s + x[i]
        c[i] = s * math.exp(-0.1 * i)
    return c


def f_detach(x: "float[n]") -> float:
    m = x.detach().max()
    return torch.sum((x - m) ** 2)


def f_dropout_eval(x: "float[n]") -> "float[n]":
    return F.dropout(x, 0.5, training=False) * 3.0


def f_masks(x: "float[n]", y: "float[n]") -> "float[n]":
    m = (x > 0) & (y > 0)
    return torch.where(m, x * y, torch.zeros_like(x)) + torch.where(~m | (y > 1.0), 1.0, 0.0) * x


def f_dtypes(x: "float[n]") -> "float[n]":
    idx = torch.arange(x.shape[0], dtype=torch.float64)
    ones = torch.ones(x.shape[0], dtype=torch.float64)
    count = torch.zeros(x.shape[0], dtype=torch.int64)
    return x * idx + ones + count.to(torch.float64) + x.sum().item()


def f_math_more(x: float, y: float) -> float:
    return math.hypot(x, y) + math.copysign(2.0, y) + math.erf(x) + math.log10(x * x + 1.0) + math.tanh(y) \
        + (0.0 if math.isnan(x) else x) + round(y * 3.0)


def f_activations(x: "float[n]") -> "float[n]":
    return (F.gelu(x) + F.silu(x) + F.softplus(x) + F.elu(x) + F.leaky_relu(x, 0.1) + F.selu(x)
            + F.logsigmoid(x) + F.hardtanh(x) + F.relu6(3.0 * x) + F.mish(x) + torch.erf(x)
            + torch.special.expit(x) + F.gelu(x, approximate="tanh"))


def f_stats(x: "float[n, d]") -> "float[n]":
    return (x.var(dim=1) + x.std(dim=1, unbiased=False) + torch.linalg.norm(x, dim=1) + x.norm(dim=-1)
            + torch.prod(x, dim=1) + torch.cumsum(x, dim=1)[:, -1] + F.normalize(x, dim=1)[:, 0])


def f_max_dim(x: "float[n, k]") -> "float[n]":
    v, i = torch.max(x, dim=1)
    w = torch.min(x, 1).values
    return v + w * torch.argmax(x, dim=1) + i


def f_gather(x: "float[n, c]", idx: "i64[n]", rows: "i64[m]") -> "float[m]":
    picked = x.gather(1, idx.unsqueeze(1)).squeeze(1)
    return x[rows].sum(1) + picked[rows] + torch.index_select(x, 0, rows)[:, 0]


def f_losses_more(z: "float[n, c]", y: "i64[n]", t: "float[n]") -> float:
    return (F.cross_entropy(z, y) + F.nll_loss(F.log_softmax(z, 1), y, reduction="sum")
            + F.binary_cross_entropy_with_logits(z[:, 0], t) + F.smooth_l1_loss(z[:, 1], t)
            + F.cosine_similarity(z, z * 2.0 + 1.0).sum())


def f_shapes_more(x: "float[n, 3]") -> "float[n, 6]":
    e = x[:, :1].expand(-1, 3) + torch.tensor([1.0, 2.0, 3.0])
    return torch.cat([x.repeat(1, 1) * torch.flip(e, [1]), F.pad(x, (1, 2))[:, :3]], dim=1)


def f_matrix_more(a: "float[n, n]", b: "float[n, n]") -> float:
    return torch.trace(a) + torch.diagonal(a @ b).sum() + torch.einsum("ij,jk,kl->il", a, b, a).sum()


def f_inf_constants(x: "float[n]") -> "float[n]":
    hi = torch.where(x > 0.5, float("-inf"), x) + torch.where(x > 10.0, float("nan"), 0.0)
    return torch.softmax(hi, dim=0) + torch.where(x < -10.0, torch.inf, x * torch.pi) + float("1.5")


def f_loops_reverse(c: "float[p]", x: "float[n]") -> "float[n]":
    acc = torch.zeros_like(x)
    for i in range(c.shape[0] - 1, -1, -1):  # Horner with a computed start and step -1
        acc = acc * x + c[i]
    back = torch.zeros_like(x)
    for i in reversed(range(c.shape[0])):
        back = back * x + c[i]
    for i in reversed(range(1, 7, 2)):
        back = back + i * c[i % c.shape[0]]
    return acc * 2.0 + back


def f_loops_iterables(x: "float[n, d]", y: "float[n]") -> float:
    s = 0.0
    for row in x:
        s = s + torch.sum(row * row)
    for i, yi in enumerate(y):
        s = s + i * yi
    for j, xi in enumerate(reversed(range(x.shape[0]))):
        s = s + j * x[xi, 0]
    for row, yi in zip(x, y):
        s = s + yi * row[0]
    for j, k in zip(range(3), range(1, 9, 2)):
        s = s + j * y[k % y.shape[0]]
    return s + sum(yi * i for i, yi in enumerate(y))


def _scaled_sum(x, scale=2.0, dim=0, shift: float = 1e-3):
    return x.sum(dim) * scale + shift


def f_default_args(x: "float[n, d]") -> "float[d]":
    return (_scaled_sum(x) + _scaled_sum(x, scale=3.0) + _scaled_sum(x, 0.5, shift=1.0)
            + _scaled_sum(x, dim=1).sum() * _scaled_sum(x[0], dim=0, scale=-1.0))


def f_chunk_split(g: "float[4 * h]", x: "float[n, 6]") -> "float[h]":
    i, f, o, c = torch.chunk(g, 4)
    a, b = x.split(3, dim=1)
    p, q, r = torch.split(x, [1, 3, 2], 1)
    u, v, w = x.chunk(4, dim=1)  # 6 into pieces of 2
    s = (a * b).sum() + (p * r[:, :1]).sum() + q.sum() + (u * v + w).sum()
    return torch.sigmoid(i) * torch.tanh(c) + f * o * s + g.split(g.shape[0] // 4)[2]


def f_masked_fill(s: "float[n, n]", x: "float[n]") -> "float[n, n]":
    mask = torch.triu(torch.ones(s.shape[0], s.shape[0], dtype=torch.bool), diagonal=1)
    a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return a + s.masked_fill(x > 0, -1.5) + torch.masked_fill(s, s < 0, x.sum())


def f_casts_to(x: "float[n]", i: "i64[n]") -> "float[n]":
    m = (x > 0).to(x.dtype) * x
    return m + i.to(x.dtype) * x.to(torch.float64) + x.to(x) + i.to(x) + torch.zeros(x.shape[0], dtype=x.dtype)


def f_one_hot_dim(i: "i64[n]", x: "float[n, c]") -> "float[n, c]":
    return F.one_hot(i, x.shape[1]) * x + F.one_hot(i, num_classes=x.shape[1] + 1)[:, 1:] * 2.0


COEFFS = [1.0, -0.5, 0.25]
PAIRS = ((1, 2), (3, 4))


def f_module_consts(x: "float[n]") -> "float[n]":
    c = torch.tensor(COEFFS)
    return c[0] + c[1] * x + COEFFS[2] * x * x + PAIRS[1][0] + torch.tensor(PAIRS).sum() * x


def f_asserts(x: "float[n, 3]", y: "float[n]") -> "float[n]":
    assert x.shape[1] == 3
    assert x.shape[0] == y.shape[0], "one y per row"
    assert x.ndim == 2 and len(y) == x.shape[0]
    return x.sum(1) * y


def f_iterate_constants(x: "float[n]", w: "float[n]") -> "float[n]":
    p = torch.zeros_like(x)
    for c in COEFFS:
        p = p * x + c
    q = sum(c * x ** i for i, c in enumerate(COEFFS))
    for v in (x, w, x * w):
        p = p + v.sin()
    for k, v in zip((1, 2), [w, x]):
        p = p + k * v
    for a, b in PAIRS:
        p = p + a * x - b
    return p + q


NEG_INF = float("-inf")


def f_more_torch(x: "float[n, d]", w: "float[d, m]", b: "float[m]") -> "float[n, m]":
    y = torch.addmm(b, x, w) + torch.addmm(b, x, w, beta=0.5, alpha=2.0) + b.addmm(x, w)
    z = torch.clamp_min(y, -0.5) + y.clamp_max(0.25) + torch.lerp(y, y * y, 0.3) + y.lerp(torch.tanh(y), y)
    return z + torch.where(y > 100.0, NEG_INF, 0.0)


def f_append_rows(xs: "float[t, d]", W: "float[d, d]") -> "float[d, t]":
    """An RNN collecting its states with out.append(...) at the end of the loop body, then torch.stack;
    and rows built the same way, then torch.cat along an inner axis."""
    h = 0.0 * xs[0]
    hs = []
    for x in xs:
        h = torch.tanh(W @ h + x)
        hs.append(h)
    pairs = []
    for i in range(xs.shape[0]):
        pairs.append(torch.stack([xs[i], 2.0 * xs[i]], dim=1))
    both = torch.cat(pairs, dim=1)
    return torch.stack(hs, dim=1) + both[:, :xs.shape[0]]


def f_conv_pool(x: "float[b, c, h, w]", k: "float[m, c, 3, 3]", bias: "float[m]", k1: "float[2, c, 3]") -> float:
    """F.conv2d (padding, stride, 'same'), pooling, and a 1-d convolution over rows."""
    y = torch.tanh(F.conv2d(x, k, bias, padding=1))
    z = F.max_pool2d(y, 2) + F.avg_pool2d(y, kernel_size=2, stride=2)
    s = F.conv2d(x, k, stride=(2, 1), dilation=1).sum() + F.conv2d(x, k, padding="same").mean()
    rows = F.conv1d(x[:, :, 0, :], k1, padding=1)
    return z.sum() + s + (F.max_pool1d(rows, 2) ** 2).sum()


def f_sort_search(x: "float[n, k]", e: "float[m]") -> "float[n, k]":
    """torch.sort / topk / searchsorted / bucketize / diff (values and gradients through the sorted values)."""
    v, i = torch.sort(x, dim=1, descending=True)
    top = torch.topk(x, 2, dim=1).values
    edges = torch.sort(e).values
    pos = torch.searchsorted(edges, x) + torch.bucketize(x, edges, right=True)
    d = torch.diff(x, dim=1, prepend=x[:, :1])
    return v * i + top.sum(1, keepdim=True) + pos * x + x.sort(dim=0).values + d + torch.diff(x, n=2, dim=0).sum(0)


SCALES = (0.5, -1.0, 2.0)


def f_table_lookup(x: "float[n]") -> "float[n]":
    """A module-level tuple indexed by a computed index (a constant table, as a spline's knots)."""
    out = []
    for j in range(x.shape[0]):
        out.append(x[j] * SCALES[j % 3] + SCALES[(j + 1) % 3])
    return torch.stack(out)


def f_pool_ties(x: "float[n, c, 4, 6]") -> "float[n, c, 2, 3]":
    """Max pooling of values with ties (small integers): the gradient goes to each window's first maximum."""
    return F.max_pool2d(x, 2) + F.max_pool2d(x, (2, 3), stride=(2, 3), padding=(0, 1)).sum(3, keepdim=True)


def f_no_grad(x: "float[n]", w: "float[n]") -> "float[n]":
    """`with torch.no_grad():` — the names it binds are constants for differentiation (a target, a scale)."""
    with torch.no_grad():
        scale = (x * w).abs().max() + 1.0
        target = torch.tanh(x)
    return (x * w - target) ** 2 / scale
