"""sqrl from the Knossos seeds: a tensor -> scalar kernel with a data-dependent `if` on sum(x).

Plain PyTorch: it runs under torch as it is; ksbuild compiles it, its vmap over a batch, and
the vjps of both. Under vmap the `if` differs per row, so it becomes a branch-free select.
"""
import torch


def sqrl(x: "float[n]") -> float:
    y = torch.sum(x)
    if y < 0.0:
        t = -0.125 * x
    else:
        t = 0.5 * x ** 2
    return torch.mean(torch.sin(t) * t)


def relu3_tensor(x: "float[n]") -> "float[n]":
    """relu3 written with torch.where: ten temporaries in PyTorch, one fused loop in ksbuild."""
    return torch.where(x < 0.0, 0.0 * x, torch.where(x < 1.0, x ** 3 / 3.0, x - 2.0 / 3.0))
