"""GradBench's ht eval: hand tracking (evals/ht/README.md of gradbench/gradbench; ADBench's HT objective,
cpp/gradbench/evals/ht.hpp), a hand model of 22 bones (GradBench's, as its theta layout requires) and V vertices.

theta: global rotation (angle-axis, 3), translation (3), then per finger (5) the root joint's two
angles and the two other joints' one: bone 2 + 4 f gets (x, z) = theta[6 + 4 f], theta[7 + 4 f], bones
3 + 4 f and 4 + 4 f get x = theta[8 + 4 f], theta[9 + 4 f]; the other bones stay as modelled.
A bone's posed relative transform is base_relative · [R_z(z) R_x(x), 0; 0, 1]; absolutes chain along the
parents; each vertex is skinned by Σ_bones weight · (absolute · inverse_base_absolute) · base_position,
mirrored in x if the model is, rotated and translated globally. The error of a correspondence is
point - its vertex ("simple"), or point - the point at barycentric (u0, u1, 1 - u0 - u1) of its triangle
("complicated"; GradBench's default).
"""
import torch

# the theta index of each bone's x and z angle (ht.hpp's to_pose_params): bones 2 + 4 f, 3 + 4 f, 4 + 4 f of
# finger f have x = theta[6 + 4 f], theta[8 + 4 f], theta[9 + 4 f], bone 2 + 4 f z = theta[7 + 4 f];
# 26 is a zero appended to theta (the other angles are 0)
X_ANGLE = [26, 26, 6, 8, 9, 26, 10, 12, 13, 26, 14, 16, 17, 26, 18, 20, 21, 26, 22, 24, 25, 26]
Z_ANGLE = [26, 26, 7, 26, 26, 26, 11, 26, 26, 26, 15, 26, 26, 26, 19, 26, 26, 26, 23, 26, 26, 26]


def joint_rotations(theta):
    """[22, 3, 3]: R_z(z) R_x(x) of each bone's angles (ht.hpp's euler_angles_to_rotation_matrix with y = 0)."""
    angles = torch.cat([theta, 0.0 * theta[0:1]])
    x, z = angles[torch.tensor(X_ANGLE)], angles[torch.tensor(Z_ANGLE)]
    cx, sx, cz, sz = torch.cos(x), torch.sin(x), torch.cos(z), torch.sin(z)
    zero, one = 0.0 * x, 1.0 + 0.0 * x
    Rx = torch.stack([torch.stack([one, zero, zero], 1), torch.stack([zero, cx, -sx], 1),
                      torch.stack([zero, sx, cx], 1)], 1)
    Rz = torch.stack([torch.stack([cz, -sz, zero], 1), torch.stack([sz, cz, zero], 1),
                      torch.stack([zero, zero, one], 1)], 1)
    return Rz @ Rx


def absolutes(relatives, parents):
    """[b, 4, 4]: each bone's transform chained from the root (parents[i] < i; -1 for a root)."""
    b = relatives.shape[0]
    result = relatives
    for i in range(b):
        parent = parents[i]
        chained = result[torch.clamp(parent, min=0)] @ relatives[i]
        new = torch.where(parent < 0, relatives[i], chained)
        result = torch.where((torch.arange(b) == i)[:, None, None], new, result)
    return result


def angle_axis_matrix(r):
    """The rotation matrix of the angle-axis vector r (Rodrigues); the identity where |r| < 1e-4."""
    norm = torch.sqrt(torch.sum(r * r))
    if norm < 0.0001:
        return torch.eye(3) + 0.0 * r[0]
    k = r / norm
    K = torch.stack([torch.stack([0.0 * norm, -k[2], k[1]]), torch.stack([k[2], 0.0 * norm, -k[0]]),
                     torch.stack([-k[1], k[0], 0.0 * norm])])
    return torch.eye(3) + torch.sin(norm) * K + (1.0 - torch.cos(norm)) * (K @ K)


def posed_vertices(theta: "float[26]", parents: "int[22]", base_relatives: "float[22, 4, 4]",
                   inverse_base_absolutes: "float[22, 4, 4]", base_positions: "float[V, 4]",
                   weights: "float[V, 22]", mirror: "float[3]") -> "float[V, 3]":
    """Every vertex of the hand posed by theta (mirror: (-1, 1, 1) for a mirrored model, else ones)."""
    b, V = parents.shape[0], base_positions.shape[0]
    relatives = torch.cat([base_relatives[:, :, 0:3] @ joint_rotations(theta), base_relatives[:, :, 3:4]], dim=2)
    transforms = absolutes(relatives, parents) @ inverse_base_absolutes
    blended = (weights @ transforms[:, 0:3, :].reshape(b, 12)).reshape(V, 3, 4)
    skinned = torch.einsum("vij,vj->vi", blended, base_positions) * mirror
    return skinned @ angle_axis_matrix(theta[0:3]).T + theta[3:6]


def posed_vertices_split(pose, fingers, parents, base_relatives, inverse_base_absolutes, base_positions, weights,
                         mirror):
    """posed_vertices of theta = (pose, fingers), the joint angles read from fingers alone (a derivative in the
    pose then never reaches the skinning; the same lines as posed_vertices, a helper the compiler opens)."""
    b, V = parents.shape[0], base_positions.shape[0]
    angles = torch.cat([torch.zeros(6), fingers])
    relatives = torch.cat([base_relatives[:, :, 0:3] @ joint_rotations(angles), base_relatives[:, :, 3:4]], dim=2)
    transforms = absolutes(relatives, parents) @ inverse_base_absolutes
    blended = (weights @ transforms[:, 0:3, :].reshape(b, 12)).reshape(V, 3, 4)
    skinned = torch.einsum("vij,vj->vi", blended, base_positions) * mirror
    return skinned @ angle_axis_matrix(pose[0:3]).T + pose[3:6]


def simple_error(theta: "float[26]", parents: "int[22]", base_relatives: "float[22, 4, 4]",
                 inverse_base_absolutes: "float[22, 4, 4]", base_positions: "float[V, 4]",
                 weights: "float[V, 22]", mirror: "float[3]", correspondences: "int[c]",
                 points: "float[c, 3]") -> "float[c, 3]":
    """points - the posed vertices they correspond to."""
    posed = posed_vertices(theta, parents, base_relatives, inverse_base_absolutes, base_positions, weights, mirror)
    return points - posed[correspondences]


def complicated_error(theta: "float[26]", du: "float[2]", us: "float[c, 2]", parents: "int[22]",
                      base_relatives: "float[22, 4, 4]", inverse_base_absolutes: "float[22, 4, 4]",
                      base_positions: "float[V, 4]", weights: "float[V, 22]", mirror: "float[3]",
                      triangles: "int[T, 3]", correspondences: "int[c]", points: "float[c, 3]") -> "float[c, 3]":
    """points - the points at barycentric coordinates us + du of their triangles of posed vertices. du is 0
    (the tool passes zeros): error i depends on u_i alone, so its derivative in du is its derivative in u_i,
    the [3, 2] block of GradBench's two us columns, without a [c, 3, c, 2] Jacobian in us."""
    posed = posed_vertices(theta, parents, base_relatives, inverse_base_absolutes, base_positions, weights, mirror)
    corners = posed[triangles[correspondences]]                 # [c, 3 corners, 3]
    u = us + du
    u0, u1 = u[:, 0:1], u[:, 1:2]
    return points - (u0 * corners[:, 0] + u1 * corners[:, 1] + (1.0 - u0 - u1) * corners[:, 2])


def simple_error_split(pose: "float[6]", fingers: "float[20]", parents: "int[22]", base_relatives: "float[22, 4, 4]",
                       inverse_base_absolutes: "float[22, 4, 4]", base_positions: "float[V, 4]",
                       weights: "float[V, 22]", mirror: "float[3]", correspondences: "int[c]",
                       points: "float[c, 3]") -> "float[c, 3]":
    """simple_error of theta = (pose, fingers): the global rotation and translation (6) apart from the finger angles
    (20), so that the Jacobian takes the pose's columns alone (they never reach the skinning) and the fingers' in
    few directions (evals.ht_calls: columns that no correspondence shares go in one direction)."""
    posed = posed_vertices_split(pose, fingers, parents, base_relatives, inverse_base_absolutes, base_positions,
                                 weights, mirror)
    return points - posed[correspondences]


def complicated_error_split(pose: "float[6]", fingers: "float[20]", du: "float[2]", us: "float[c, 2]",
                            parents: "int[22]", base_relatives: "float[22, 4, 4]",
                            inverse_base_absolutes: "float[22, 4, 4]", base_positions: "float[V, 4]",
                            weights: "float[V, 22]", mirror: "float[3]", triangles: "int[T, 3]",
                            correspondences: "int[c]", points: "float[c, 3]") -> "float[c, 3]":
    """complicated_error of theta = (pose, fingers), as simple_error_split (the same lines after the posing)."""
    posed = posed_vertices_split(pose, fingers, parents, base_relatives, inverse_base_absolutes, base_positions,
                                 weights, mirror)
    corners = posed[triangles[correspondences]]                 # [c, 3 corners, 3]
    u = us + du
    u0, u1 = u[:, 0:1], u[:, 1:2]
    return points - (u0 * corners[:, 0] + u1 * corners[:, 1] + (1.0 - u0 - u1) * corners[:, 2])


def simple_error_dirs(pose: "float[6]", eps: "float[k]", fingers: "float[20]", seeds: "float[k, 20]",
                      parents: "int[22]", base_relatives: "float[22, 4, 4]", inverse_base_absolutes: "float[22, 4, 4]",
                      base_positions: "float[V, 4]", weights: "float[V, 22]", mirror: "float[3]",
                      correspondences: "int[c]", points: "float[c, 3]") -> "float[c, 3]":
    """simple_error_split at fingers + eps @ seeds (eps = 0: the tool passes zeros), so that one jacfwd in
    (pose, eps) gives the pose's 6 columns and the k compressed finger directions (row j of seeds, evals.ht_calls)
    with one posing: jacfwd takes each argnum's directions apart, so the pose's never reach the skinning."""
    return simple_error_split(pose, fingers + eps @ seeds, parents, base_relatives, inverse_base_absolutes,
                              base_positions, weights, mirror, correspondences, points)


def complicated_error_dirs(pose: "float[6]", du: "float[2]", eps: "float[k]", fingers: "float[20]",
                           seeds: "float[k, 20]", us: "float[c, 2]", parents: "int[22]",
                           base_relatives: "float[22, 4, 4]", inverse_base_absolutes: "float[22, 4, 4]",
                           base_positions: "float[V, 4]", weights: "float[V, 22]", mirror: "float[3]",
                           triangles: "int[T, 3]", correspondences: "int[c]", points: "float[c, 3]") -> "float[c, 3]":
    """complicated_error_split at fingers + eps @ seeds, as simple_error_dirs: jacfwd in (pose, du, eps) is the
    whole compressed Jacobian ([c, 3, 6], [c, 3, 2], [c, 3, k]) in one call."""
    return complicated_error_split(pose, fingers + eps @ seeds, du, us, parents, base_relatives,
                                   inverse_base_absolutes, base_positions, weights, mirror, triangles,
                                   correspondences, points)
