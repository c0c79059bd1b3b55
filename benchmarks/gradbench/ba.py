"""GradBench's ba eval: bundle adjustment's reprojection and weight errors, one observation at a time
(evals/ba/README.md of gradbench/gradbench; ADBench's BA objective, cpp/gradbench/evals/ba.hpp).

A camera is [r (angle-axis rotation, 3), C (centre, 3), f, u0, v0, k1, k2]. The projection of a point X:
Xcam = R(r) (X - C), p = Xcam[0:2] / Xcam[2], p *= 1 + k1 |p|² + k2 |p|⁴, proj = f p + (u0, v0);
the reprojection error is w (proj - feat) and the weight error 1 - w². The manifest vmaps both over
the observations (the tool gathers each observation's camera and point first).
"""
import torch


def cross(a, b):
    """a × b of two 3-vectors."""
    return torch.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def rotate(rot, X):
    """X rotated by the angle-axis vector rot (Rodrigues' formula with θ = |rot|, k = rot / θ:
    X cos θ + (k × X) sin θ + k (k·X)(1 - cos θ)); to first order, X + rot × X, at θ = 0."""
    theta2 = torch.sum(rot * rot)
    if theta2 != 0.0:
        theta = torch.sqrt(theta2)
        c = torch.cos(theta)
        k = rot / theta
        return X * c + cross(k, X) * torch.sin(theta) + k * (torch.sum(k * X) * (1.0 - c))
    return X + cross(rot, X)


def reproj_error(cam: "float[11]", X: "float[3]", w: float, feat: "float[2]") -> "float[2]":
    """w (proj - feat): the weighted distance of X's projection by cam from its observed feature."""
    Xcam = rotate(cam[0:3], X - cam[3:6])
    p = Xcam[0:2] / Xcam[2]
    rsq = torch.sum(p * p)
    distorted = p * (1.0 + cam[9] * rsq + cam[10] * rsq * rsq)
    return w * (distorted * cam[6] + cam[7:9] - feat)


def weight_error(w: float) -> float:
    """1 - w²: the weight's deviation from 1 (Zach's robust weighting)."""
    return 1.0 - w * w


def observation_error(params: "float[15]", feat: "float[2]") -> "float[2]":
    """reproj_error of one observation's parameters in GradBench's column order: camera (11), point (3),
    weight; its Jacobian is then the observation's [2, 15] block of the sparse Jacobian as it is stored."""
    return reproj_error(params[0:11], params[11:14], params[14], feat)
