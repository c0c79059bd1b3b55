"""Products and linear algebra (ops/linalg.py): matmul (also the compiler's @), dot, outer, vdot, einsum,
tensordot, kron, cross, addmm, baddbmm, cdist, the norms (torch.norm, torch.linalg.norm / vector_norm), the
diagonal functions (diag, diagonal, trace, diag_embed, block_diag), vander, det, logdet, solve and inv. Each
handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

import math

from ...ir.core import Atom
from ...ir.types import dim_mul
from ...ops import create, linalg, reduce
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _c, _ints, _two_floats, axes_arg, float_tensor, int_const, norm_axis


@torch_function("torch.matmul", "torch.mm", "torch.mv", "torch.bmm", "Tensor.matmul", "Tensor.mm", "Tensor.mv",
                "Tensor.bmm")
def _matmul(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args, node, "matmul")
    return matmul(fc, b, x, y, node)


def matmul(fc, b, x: Atom, y: Atom, node) -> Atom:
    return linalg.matmul(b, x, y)


def _product(op, name):
    def fn(fc, b, args, kw, node):
        return op(b, *_two_floats(fc, b, args, node, name))
    return fn


@torch_function("torch.logdet", "Tensor.logdet")
def _logdet(fc, b, args, kw, node):
    """torch.logdet(input): log det (NaN for a negative determinant, -inf for 0), by the LU determinant."""
    from ...ops import linalg
    return b.log(linalg.det(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)))


@torch_function("torch.diag_embed", "Tensor.diag_embed")
def _diag_embed(fc, b, args, kw, node):
    """torch.diag_embed(input): the last axis [.., n] as the diagonals of [.., n, n] (offset 0, last two dims)."""
    from ...ops import create
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    for name, pos in (("offset", 1), ("dim1", 2), ("dim2", 3)):
        if _arg(fc, args, kw, pos, name, node, None) is not None:
            raise fc.src.error(node, f"torch.diag_embed's {name}= is not supported", hint="the main diagonal of the "
                                     "last two dims is")
    if x.type.rank == 0:
        raise fc.src.error(node, "torch.diag_embed takes a tensor of at least one dim")
    n = x.type.shape[-1]
    return b.mul(b.reshape(x, shape=x.type.shape[:-1] + (1, n)), create.eye(b, n, n, x.type.dtype))


@torch_function("torch.block_diag")
def _block_diag(fc, b, args, kw, node):
    """torch.block_diag(*tensors): the matrices (a vector is one row, a number 1×1) along the diagonal."""
    from ...ops.shape import concatenate
    mats = []
    for a in args:
        m = float_tensor(fc, b, a, node)
        m = b.reshape(m, shape=(1, 1) if m.type.rank == 0 else (1,) + m.type.shape) if m.type.rank < 2 else m
        if m.type.rank != 2 or not all(isinstance(d, int) for d in m.type.shape):
            raise fc.src.error(node, f"torch.block_diag takes matrices of literal sizes, got {m.type}")
        mats.append(m)
    if not mats:
        raise fc.src.error(node, "torch.block_diag needs at least one tensor")
    width = sum(m.type.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        c = m.type.shape[1]
        rows.append(b.pad(m, axis=1, lo=left, hi=width - left - c))
        left += c
    return concatenate(b, rows, 0)


@torch_function("torch.vander")
def _vander(fc, b, args, kw, node):
    """torch.vander(x, N=None, increasing=False): the columns x^(N-1) .. x^0 (or increasing)."""
    from ...ops.shape import stack
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "x", node), node)
    n = _arg(fc, args, kw, 1, "N", node, None)
    n = x.type.shape[0] if n is None else int_const(fc, n, node, "N")
    if not isinstance(n, int):
        raise fc.src.error(node, "torch.vander over a symbolic length needs N= as a literal")
    increasing = _arg(fc, args, kw, 2, "increasing", node, Const(False))
    powers = [b.ipow(x, n=k) if k else b.broadcast_to(_c(x, 1.0), shape=x.type.shape) for k in range(n)]
    return stack(b, powers if isinstance(increasing, Const) and increasing.value else powers[::-1], 1)


@torch_function("torch.norm", "torch.linalg.vector_norm", "Tensor.norm")
def _norm(fc, b, args, kw, node):
    """torch.norm / torch.linalg.norm / x.norm(p=2, dim=None, keepdim=False) for vector p-norms."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    p = _arg(fc, args, kw, 1, "p", node, kw.get("ord", Const(2)))
    axes = axes_arg(fc, _arg(fc, args, kw, 2, "dim", node, None), x.type.rank, node)
    keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False)).value
    if not isinstance(p, Const) or isinstance(p.value, bool):
        raise fc.src.error(node, "the norm order must be a number literal (p=2, p=1, p=float('inf'))")
    from ...ops.aten import vector_norm
    return vector_norm(b, x, float(p.value), axes, keep)


@torch_function("torch.linalg.norm")
def _linalg_norm(fc, b, args, kw, node):
    """torch.linalg.norm(A, ord=None, dim=None, keepdim=False): with an ord, over a matrix (a 2-d input, or dim
    two axes) the matrix norm (ord 1 / -1: the largest / smallest column sum of |A|, inf / -inf: of row sums;
    2, -2 and 'nuc' need singular values: an error); otherwise the vector norm, as torch.norm."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    order = _arg(fc, args, kw, 1, "ord", node, None)
    dim = _arg(fc, args, kw, 2, "dim", node, None)
    axes = axes_arg(fc, dim, x.type.rank, node) if dim is not None else None
    matrix = order is not None and ((dim is None and x.type.rank == 2) or (axes is not None and len(axes) == 2))
    if not matrix:
        return _norm(fc, b, args, kw, node)
    if not isinstance(order, Const) or float(order.value) not in (1.0, -1.0, math.inf, -math.inf):
        shown = order.value if isinstance(order, Const) else "this"
        raise fc.src.error(node, f"the matrix norm of order {shown!r} is not supported (it needs singular values)",
                           hint="matrix norms of order 1, -1, inf and -inf are; for the Frobenius norm leave ord "
                                "out; for a vector norm of all entries use torch.linalg.vector_norm")
    rows, cols = axes if axes is not None else (0, 1)
    keep = _arg(fc, args, kw, 3, "keepdim", node, Const(False)).value
    o = float(order.value)
    summed, over = (rows, cols) if abs(o) == 1.0 else (cols, rows)  # ord ±1: sums down columns, then over them
    sums = reduce.sum(b, b.abs(x), [summed], keepdim=True)
    out = (reduce.amax if o > 0 else reduce.amin)(b, sums, [over], keepdim=True)
    kept = tuple(d for i, d in enumerate(x.type.shape) if i not in (rows, cols))
    return out if keep else shape_ops.reshape(b, out, kept)


def _main_diagonal_only(fc, args, kw, node, name: str) -> None:
    """A located error for the offset (and axis) arguments of diag/diagonal other than the main diagonal."""
    offset = _arg(fc, args, kw, 1, "diagonal" if name == "diag" else "offset", node, Const(0))
    extra = len(args) > 2 or any(k not in ("input", "offset", "diagonal") for k in kw)
    if extra or not (isinstance(offset, Const) and offset.value == 0):
        raise fc.src.error(node, f"torch.{name}: the main diagonal only (offset 0, the last two axes of a matrix)")


@torch_function("torch.diagonal", "Tensor.diagonal")
def _diagonal(fc, b, args, kw, node):
    _main_diagonal_only(fc, args, kw, node, "diagonal")
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    if x.type.rank != 2:
        raise fc.src.error(node, f"diagonal of {x.type}: matrices only")
    return linalg.einsum_many(b, "ii->i", [x])


@torch_function("torch.diag")
def _diag(fc, b, args, kw, node):
    """torch.diag: the diagonal of a matrix, or the diagonal matrix of a vector."""
    _main_diagonal_only(fc, args, kw, node, "diag")
    v = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    if v.type.rank != 1:
        return _diagonal(fc, b, args[:1], {}, node)
    n = v.type.shape[0]
    return linalg.einsum_many(b, "j,ij->ij", [v, create.eye(b, n, n, v.type.dtype)])


@torch_function("torch.trace", "Tensor.trace")
def _trace(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return linalg.einsum_many(b, "ii->", [x])


@torch_function("torch.einsum")
def _einsum(fc, b, args, kw, node):
    """torch.einsum(spec, *operands) with any number of operands (and ... / repeated letters)."""
    if not args or not isinstance(args[0], str):
        raise fc.src.error(node, "torch.einsum takes a spec string and its operands")
    ops = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
    xs = [float_tensor(fc, b, a, node) for a in ops]
    if len(xs) == 2 and "..." not in args[0]:
        x, y = fc.unify(b, xs[0], xs[1], node)
        spec = args[0].replace(" ", "")
        lhs = spec.split("->")[0].split(",")
        if "->" in spec and all(len(set(t)) == len(t) for t in lhs):
            return linalg.einsum(b, args[0], x, y)
    return linalg.einsum_many(b, args[0], xs)


@torch_function("torch.cdist")
def _cdist(fc, b, args, kw, node):
    """torch.cdist(x1, x2) for p = 2: Euclidean distances between rows."""
    x, y = _two_floats(fc, b, args[:2], node, "cdist")
    return linalg.cdist(b, x, y)


@torch_function("torch.addmm", "Tensor.addmm")
def _addmm(fc, b, args, kw, node, names=("input", "mat1", "mat2")):
    """torch.addmm(input, mat1, mat2, beta=1, alpha=1) = beta * input + alpha * (mat1 @ mat2) (baddbmm: of
    batches, batch1 @ batch2)."""
    import ast
    x, m1, m2 = (_arg(fc, args, kw, k, name, node) for k, name in enumerate(names))
    beta, alpha = _arg(fc, args, kw, 3, "beta", node, Const(1)), _arg(fc, args, kw, 4, "alpha", node, Const(1))
    prod = fc.binop(b, ast.MatMult(), m1, m2, node)
    if not (isinstance(alpha, Const) and alpha.value == 1):
        prod = fc.binop(b, ast.Mult(), alpha, prod, node)
    if not (isinstance(beta, Const) and beta.value == 1):
        x = fc.binop(b, ast.Mult(), beta, x, node)
    return fc.binop(b, ast.Add(), x, prod, node)


@torch_function("torch.det", "torch.linalg.det")
def _det(fc, b, args, kw, node):
    return linalg.det(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))


@torch_function("torch.linalg.solve")
def _solve(fc, b, args, kw, node):
    """torch.linalg.solve(A, B): B a batch of vectors when it has one dim less than A, else of matrices."""
    a, rhs = _two_floats(fc, b, [_arg(fc, args, kw, 0, "A", node), _arg(fc, args, kw, 1, "B", node)], node,
                         "linalg.solve")
    left = _arg(fc, args, kw, 2, "left", node, Const(True))
    if not (isinstance(left, Const) and left.value is True):
        raise fc.src.error(node, "torch.linalg.solve with left=False is not supported", hint="solve the transpose")
    return linalg.solve(b, a, rhs)


@torch_function("torch.inverse", "torch.linalg.inv")
def _inv(fc, b, args, kw, node):
    """torch.linalg.inv(A) / torch.inverse(A): A solved against the identity."""
    from ...ops import create
    a = float_tensor(fc, b, _arg(fc, args, kw, 0, "A", node), node)
    n = a.type.shape[-1]
    if not isinstance(n, int):
        raise fc.src.error(node, f"inv needs matrices of a static size, got {a.type}")
    eye = b.broadcast_to(create.eye(b, n, n, a.type.dtype), shape=a.type.shape)
    return linalg.solve(b, a, eye)


def _cross(default_dim):
    """torch.cross(input, other, dim=None) (the first axis of size 3 when dim is None) and
    torch.linalg.cross(input, other, dim=-1): u × v along an axis of 3."""
    def fn(fc, b, args, kw, node):
        u, v = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                           node, "cross")
        dim = _arg(fc, args, kw, 2, "dim", node, default_dim)
        if dim is None:
            axis = next((i for i, d in enumerate(u.type.shape) if d == 3), None)
            if axis is None:
                raise fc.src.error(node, f"torch.cross: no axis of size 3 in {u.type}")
        else:
            axis = norm_axis(fc, int_const(fc, dim, node, "dim"), u.type.rank, node)
        if u.type.shape[axis] != 3:
            raise fc.src.error(node, f"cross product along an axis of size {u.type.shape[axis]} (it needs 3)")
        uc = [b.slice(u, axis=axis, start=i, stop=i + 1) for i in range(3)]
        vc = [b.slice(v, axis=axis, start=i, stop=i + 1) for i in range(3)]
        parts = [b.sub(b.mul(uc[(i + 1) % 3], vc[(i + 2) % 3]), b.mul(uc[(i + 2) % 3], vc[(i + 1) % 3]))
                 for i in range(3)]
        return shape_ops.concatenate(b, parts, axis)
    return fn


@torch_function("torch.kron", "Tensor.kron")
def _kron(fc, b, args, kw, node):
    """torch.kron(input, other): the Kronecker product (the rank of the larger; the other gets leading 1s)."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "kron")
    r = max(x.type.rank, y.type.rank)
    xs, ys = (1,) * (r - x.type.rank) + x.type.shape, (1,) * (r - y.type.rank) + y.type.shape
    xi = b.reshape(x, shape=tuple(d for a in xs for d in (a, 1)))  # [x0, 1, x1, 1, ...]
    yi = b.reshape(y, shape=tuple(d for a in ys for d in (1, a)))  # [1, y0, 1, y1, ...]
    return b.reshape(b.mul(xi, yi), shape=tuple(dim_mul(a, c) for a, c in zip(xs, ys)))


@torch_function("torch.tensordot", "Tensor.tensordot")
def _tensordot(fc, b, args, kw, node):
    """torch.tensordot(a, b, dims=2): the last `dims` axes of a against the first of b, or explicit axis
    lists dims=([a axes], [b axes])."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "a", node), _arg(fc, args, kw, 1, "b", node)], node,
                       "tensordot")
    dims = _arg(fc, args, kw, 2, "dims", node, Const(2))
    if isinstance(dims, Const):
        k = int_const(fc, dims, node, "dims")
        ax, ay = list(range(x.type.rank - k, x.type.rank)), list(range(k))
    elif isinstance(dims, (tuple, list)) and len(dims) == 2:
        ax = [norm_axis(fc, a, x.type.rank, node) for a in _ints(fc, dims[0], node, "dims")]
        ay = [norm_axis(fc, a, y.type.rank, node) for a in _ints(fc, dims[1], node, "dims")]
    else:
        raise fc.src.error(node, "tensordot: dims must be an integer or two lists of axes")
    if len(ax) != len(ay):
        raise fc.src.error(node, f"tensordot: {len(ax)} axes of a against {len(ay)} of b")
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    tx = [next(letters) for _ in range(x.type.rank)]
    ty = [next(letters) for _ in range(y.type.rank)]
    for i, j in zip(ax, ay):
        ty[j] = tx[i]
    out = [t for i, t in enumerate(tx) if i not in ax] + [t for j, t in enumerate(ty) if j not in ay]
    return linalg.einsum_many(b, f"{''.join(tx)},{''.join(ty)}->{''.join(out)}", [x, y])


@torch_function("torch.vdot", "Tensor.vdot")
def _vdot(fc, b, args, kw, node):
    """torch.vdot(input, other) of real 1-D tensors: their dot product."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "vdot")
    if x.type.rank != 1 or y.type.rank != 1:
        raise fc.src.error(node, f"vdot takes two 1-D tensors, got {x.type} and {y.type}")
    return linalg.dot(b, x, y)


torch_function("torch.dot", "torch.inner", "Tensor.dot")(_product(linalg.dot, "dot"))
torch_function("torch.outer", "Tensor.outer")(_product(linalg.outer, "outer"))
torch_function("torch.baddbmm", "Tensor.baddbmm")(
    lambda fc, b, args, kw, node: _addmm(fc, b, args, kw, node, ("input", "batch1", "batch2")))
torch_function("torch.cross", "Tensor.cross")(_cross(None))
torch_function("torch.linalg.cross")(_cross(Const(-1)))
