"""GradBench's kmeans eval: cost(P, C) = Σ_i min_j ‖C_j - P_i‖² (evals/kmeans/README.md).

`dir` is J H⁻¹ with J = ∂cost/∂C and H its (diagonal) Hessian; the manifest's exports give J
(grad) and H·1 (jvp of grad with tangent 1 on C), which is diag(H) because H is diagonal.
"""
import torch


def kmeans_cost(points: "float[n, d]", centroids: "float[k, d]") -> float:
    """Σ over points of the squared distance to the nearest centroid."""
    diff = points.unsqueeze(1) - centroids.unsqueeze(0)          # [n, k, d]
    dist = torch.sum(diff * diff, dim=2)                          # [n, k]
    return torch.sum(torch.amin(dist, dim=1))
