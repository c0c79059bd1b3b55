"""A hand-tracking-like residual (after ADBench's HT): 26 pose parameters, 3 residuals per point."""
import torch


def _rot_x(a):
    c, s = torch.cos(a), torch.sin(a)
    z, o = 0.0 * a, 1.0 + 0.0 * a
    return torch.stack([torch.stack([o, z, z]), torch.stack([z, c, -s]), torch.stack([z, s, c])])


def _rot_z(a):
    c, s = torch.cos(a), torch.sin(a)
    z, o = 0.0 * a, 1.0 + 0.0 * a
    return torch.stack([torch.stack([c, -s, z]), torch.stack([s, c, z]), torch.stack([z, z, o])])


def _rodrigues(r):
    """The rotation matrix of the angle-axis vector r (away from 0)."""
    theta = torch.sqrt(torch.sum(r * r))
    k = r / theta
    z = 0.0 * theta
    K = torch.stack([torch.stack([z, -k[2], k[1]]), torch.stack([k[2], z, -k[0]]), torch.stack([-k[1], k[0], z])])
    return torch.eye(3) + torch.sin(theta) * K + (1.0 - torch.cos(theta)) * (K @ K)


def _bone_rot(theta, b):
    """The rotation of bone b (0: the palm; 1 + 3 f + j: joint j of finger f), down its finger's chain."""
    if b == 0:
        return torch.eye(3) + 0.0 * theta[0]
    f, j = (b - 1) // 3, (b - 1) % 3
    R = _rot_x(theta[6 + 4 * f]) @ _rot_z(theta[7 + 4 * f])
    for k in range(j):
        R = R @ _rot_x(theta[8 + 4 * f + k])
    return R


def _bone_origin(theta, offsets, b):
    """Where bone b starts: its finger's root offset plus the rotated lengths of the bones before it."""
    if b == 0:
        return offsets[0]
    f, j = (b - 1) // 3, (b - 1) % 3
    t = offsets[1 + 3 * f]
    for k in range(j):
        t = t + _bone_rot(theta, 1 + 3 * f + k) @ offsets[2 + 3 * f + k]
    return t


def hand_residuals(theta: "float[26]", base: "float[m, 3]", weights: "float[m, 16]", offsets: "float[16, 3]",
                   points: "float[m, 3]") -> "float[m, 3]":
    """points - the skinned hand: 16 bones (the palm, 3 per finger), each finger bent at its root about
    x and z and at its two other joints about x; the whole hand rotated (angle-axis) and moved."""
    Rb = torch.stack([_bone_rot(theta, b) for b in range(16)])
    tb = torch.stack([_bone_origin(theta, offsets, b) for b in range(16)])
    posed = torch.einsum("bij,mj->mbi", Rb, base) + tb.unsqueeze(0)
    skinned = torch.einsum("mb,mbi->mi", weights, posed)
    world = skinned @ _rodrigues(theta[0:3]).T + theta[3:6]
    return points - world
