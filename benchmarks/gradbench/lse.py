"""GradBench's lse eval: LogSumExp with the max trick (evals/lse/README.md of gradbench/gradbench)."""
import torch


def lse(x: "float[n]") -> float:
    """a + log Σ exp(x_i - a), a = max x."""
    a = torch.max(x)
    return a + torch.log(torch.sum(torch.exp(x - a)))
