"""GradBench's llsq eval (cmpad's llsq_obj): y(x) = ½ Σ_i (s_i - Σ_j x_j t_i^j)², s_i = sign(t_i).

t_i = -1 + 2 i / (n - 1) depends on n only; the tool computes it once per input (like parsing the
input) and passes it in, so its length n is a dim of the kernel.
"""
import torch


def llsq(x: "float[m]", t: "float[n]") -> float:
    """½ ‖sign(t) - V x‖², V[i, j] = t_i^j, the polynomial evaluated by Horner's rule."""
    m = x.shape[0]
    poly = 0.0 * t
    for j in range(m - 1, -1, -1):
        poly = poly * t + x[j]
    r = torch.sign(t) - poly
    return 0.5 * torch.sum(r * r)
