"""GradBench's lse eval: LogSumExp with the max trick (evals/lse/README.md of gradbench/gradbench)."""
import torch


def lse(x: "float[n]") -> float:
    """a + log Σ exp(x_i - a), a = max x. LSE(x) does not depend on a (it cancels), so a is a constant
    for differentiation, as jax.nn.logsumexp's stop_gradient makes it: the gradient is the same softmax
    without a pass that sends the max's zero-sum cotangent back to its argmax."""
    a = torch.max(x).detach()
    return a + torch.log(torch.sum(torch.exp(x - a)))
