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
