"""More torch functions in Python kernels, each a few operations of the shared op library: division and
remainders (torch.div with rounding_mode, fmod, remainder, floor_divide), roll, cross, kron, tensordot,
vdot, logcumsumexp, any/all, logit, xlogy, sinc, nan_to_num, full_like, linspace, x.new_zeros/new_ones/
new_full, and F.pad's reflect, replicate and circular modes. Where a formula has a removable singularity
(sinc at 0, xlogy at x = 0) the branch not taken reads a harmless value, so no NaN reaches a derivative."""
from __future__ import annotations

import ast
import math

import numpy as np

from ...ir.core import Atom, Lit
from ...ir.types import Type, dim_mul
from ...ops import create, linalg, reduce
from ...ops import math as math_ops
from ...ops import shape as shape_ops
from .nn import _c, _float_kw, _math_function
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _two_floats, float_tensor, int_const, norm_axis, tensor


def _python_op(op: ast.operator, name: str):
    """torch.remainder / torch.floor_divide: Python's % and // on tensors (the sign of the divisor)."""
    def fn(fc, b, args, kw, node):
        x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
        return fc.binop(b, op, x, y, node)
    fn.__doc__ = f"torch.{name}(input, other)"
    return fn


def _scaled_op(op: ast.operator, name: str):
    """torch.add / torch.sub (input, other, *, alpha=1): input ± alpha·other; torch.mul: input · other."""
    def fn(fc, b, args, kw, node):
        x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
        alpha = _arg(fc, args, kw, 2, "alpha", node, None) if not isinstance(op, ast.Mult) else None
        if alpha is not None and not (isinstance(alpha, Const) and alpha.value == 1):
            y = fc.binop(b, ast.Mult(), alpha, y, node)
        return fc.binop(b, op, x, y, node)
    fn.__doc__ = f"torch.{name}(input, other)"
    return fn


@torch_function("torch.neg", "torch.negative", "Tensor.neg", "Tensor.negative")
def _neg(fc, b, args, kw, node):
    """torch.neg(input) = -input."""
    x = fc.plain(b, _arg(fc, args, kw, 0, "input", node))
    return Const(-x.value) if isinstance(x, Const) else b.neg(tensor(fc, b, x, node))


@torch_function("torch.exp2", "Tensor.exp2")
def _exp2(fc, b, args, kw, node):
    """torch.exp2(input) = 2^input."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.exp(b.mul(x, _c(x, math.log(2.0))))


@torch_function("torch.div", "torch.divide", "torch.true_divide", "Tensor.div", "Tensor.divide", "Tensor.true_divide")
def _div(fc, b, args, kw, node):
    """torch.div(input, other, rounding_mode=None | 'trunc' | 'floor')."""
    x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
    mode = _arg(fc, args, kw, 2, "rounding_mode", node, None)
    mode = mode.value if isinstance(mode, Const) else mode
    if mode is None:
        return fc.binop(b, ast.Div(), x, y, node)
    if mode == "floor":
        return fc.binop(b, ast.FloorDiv(), x, y, node)
    if mode != "trunc":
        raise fc.src.error(node, f"rounding_mode must be None, 'trunc' or 'floor', got {mode!r}")
    x, y = _two_floats(fc, b, [x, y], node, "div")
    return math_ops.trunc(b, b.div(x, y)) if x.type.is_float else b.div(x, y)  # (integer div truncates)


@torch_function("torch.fmod", "Tensor.fmod")
def _fmod(fc, b, args, kw, node):
    """torch.fmod(input, other): the remainder with the sign of the dividend (C's fmod)."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "fmod")
    return math_ops.fmod(b, x, y)


def _ints(fc, v, node, what: str) -> list[int]:
    vals = v if isinstance(v, (tuple, list)) else [v]
    return [int_const(fc, a, node, what) for a in vals]


def _roll_axis(b, x: Atom, shift: int, axis: int, fc, node) -> Atom:
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise fc.src.error(node, f"torch.roll along an axis of symbolic size {n}: the size must be static")
    s = shift % n if n else 0
    if s == 0:
        return x
    return shape_ops.concatenate(b, [b.slice(x, axis=axis, start=n - s, stop=n), b.slice(x, axis=axis, start=0,
                                                                                           stop=n - s)], axis)


@torch_function("torch.roll", "Tensor.roll")
def _roll(fc, b, args, kw, node):
    """torch.roll(input, shifts, dims=None): elements shifted along each dim, wrapping around; without dims
    over the flattened tensor."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    shifts = _ints(fc, _arg(fc, args, kw, 1, "shifts", node), node, "shifts")
    dims = _arg(fc, args, kw, 2, "dims", node, None)
    if dims is None:
        if len(shifts) != 1:
            raise fc.src.error(node, "torch.roll without dims takes one shift")
        flat = b.reshape(x, shape=(math.prod(x.type.shape),)) if all(isinstance(d, int) for d in x.type.shape) \
            else None
        if flat is None:
            raise fc.src.error(node, "torch.roll without dims needs static sizes")
        return b.reshape(_roll_axis(b, flat, shifts[0], 0, fc, node), shape=x.type.shape)
    axes = [norm_axis(fc, a, x.type.rank, node) for a in _ints(fc, dims, node, "dims")]
    if len(axes) != len(shifts):
        raise fc.src.error(node, f"torch.roll: {len(shifts)} shift(s) for {len(axes)} dim(s)")
    for s, a in zip(shifts, axes):
        x = _roll_axis(b, x, s, a, fc, node)
    return x


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


@torch_function("torch.logcumsumexp", "Tensor.logcumsumexp")
def _logcumsumexp(fc, b, args, kw, node):
    """torch.logcumsumexp(input, dim): log of the running sum of exp (a scan that rescales as it goes)."""
    from ...ops import index
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim"), x.type.rank, node)
    return index.logcumsumexp(b, x, axis)


def _any_all(is_any: bool):
    """torch.any / torch.all(input, dim=None, keepdim=False): a bool tensor (whether any / every element is
    nonzero)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        axes = None if dim is None else [norm_axis(fc, a, x.type.rank, node) for a in _ints(fc, dim, node, "dim")]
        nonzero = x if x.type.dtype == "bool" else b.ne(x, Lit(0, Type(x.type.dtype)))
        flags = b.convert(nonzero, dtype="i64")
        pick = reduce.amax if is_any else reduce.amin
        return b.ne(pick(b, flags, axes, keepdim=bool(keep.value)), Lit(0, Type("i64")))
    return fn


@torch_function("torch.logit", "Tensor.logit")
def _logit(fc, b, args, kw, node):
    """torch.logit(input, eps=None): log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    eps = _arg(fc, args, kw, 1, "eps", node, None)
    if eps is not None:
        e = _float_kw(fc, args, kw, 1, "eps", node, 0.0)
        x = math_ops.clamp(b, x, _c(x, e), _c(x, 1.0 - e))
    return b.log(b.div(x, b.sub(_c(x, 1.0), x)))


@torch_function("torch.xlogy", "Tensor.xlogy")
def _xlogy(fc, b, args, kw, node):
    """torch.xlogy(input, other): x·log(y), 0 where x = 0 (unless y is NaN). Where x = 0 and y <= 0 the log reads
    1 instead of y, so neither the value nor a derivative is NaN; elsewhere d/dx is log(y), as torch's."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "xlogy")
    if not x.type.is_float:
        x, y = b.convert(x, dtype=fc.float_dtype), b.convert(y, dtype=fc.float_dtype)
    no_log = math_ops.logical_and(b, b.eq(x, _c(x, 0)), b.le(y, _c(y, 0)))  # (false for a NaN y)
    return b.mul(x, b.log(b.select(no_log, _c(y, 1), y)))


@torch_function("torch.sinc", "Tensor.sinc")
def _sinc(fc, b, args, kw, node):
    """torch.sinc(input): sin(πx)/(πx), 1 at 0."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    zero = b.eq(x, _c(x, 0))
    px = b.mul(b.select(zero, _c(x, 1), x), _c(x, math.pi))
    return b.select(zero, _c(x, 1), b.div(b.sin(px), px))


@torch_function("torch.nan_to_num", "Tensor.nan_to_num")
def _nan_to_num(fc, b, args, kw, node):
    """torch.nan_to_num(input, nan=0.0, posinf=None, neginf=None): the dtype's largest and lowest finite
    values replace the infinities by default."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    info = np.finfo(np.float32 if x.type.dtype == "f32" else np.float64)
    nan = _float_kw(fc, args, kw, 1, "nan", node, 0.0)
    given = lambda pos, name: _arg(fc, args, kw, pos, name, node, None) is not None  # noqa: E731 (None: default)
    pos = _float_kw(fc, args, kw, 2, "posinf", node, 0.0) if given(2, "posinf") else float(info.max)
    neg = _float_kw(fc, args, kw, 3, "neginf", node, 0.0) if given(3, "neginf") else float(info.min)
    y = b.select(b.eq(x, _c(x, math.inf)), _c(x, pos), x)
    y = b.select(b.eq(x, _c(x, -math.inf)), _c(x, neg), y)
    return b.select(b.ne(x, x), _c(x, nan), y)


@torch_function("torch.full_like", "Tensor.full_like")
def _full_like(fc, b, args, kw, node):
    """torch.full_like(input, fill_value): input's shape and dtype."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    value = _arg(fc, args, kw, 1, "fill_value", node)
    if isinstance(value, Const):
        return create.full(x.type.shape, value.value, x.type.dtype)
    v = tensor(fc, b, value, node)
    if v.type.rank:
        raise fc.src.error(node, "full_like's fill_value must be a number")
    return create.fill(b, x.type.shape, v if v.type.dtype == x.type.dtype else b.convert(v, dtype=x.type.dtype))


@torch_function("torch.linspace")
def _linspace(fc, b, args, kw, node):
    """torch.linspace(start, end, steps) with number literals (or constants) and a literal count."""
    start, end = (_arg(fc, args, kw, i, n, node) for i, n in ((0, "start"), (1, "end")))
    steps = int_const(fc, _arg(fc, args, kw, 2, "steps", node), node, "steps")
    if not (isinstance(start, Const) and isinstance(end, Const)):
        raise fc.src.error(node, "torch.linspace needs start and end known when the kernel is compiled")
    dtype = np.float32 if fc.float_dtype == "f32" else np.float64
    return create.array(b, np.linspace(float(start.value), float(end.value), steps).astype(dtype))


def _new_full(value):
    """x.new_zeros(*size) / x.new_ones(*size) (ints or one tuple) and x.new_full(size, fill_value): x's dtype."""
    def fn(fc, b, x, args, kw, node):
        from .tensors import as_dim
        x = tensor(fc, b, x, node)
        if value is None:
            size, fill = _arg(fc, args, kw, 0, "size", node), _arg(fc, args, kw, 1, "fill_value", node)
        else:
            size = args[0] if len(args) == 1 else tuple(args) if args else _arg(fc, args, kw, 0, "size", node)
            fill = Const(value)
        if not isinstance(fill, Const):
            raise fc.src.error(node, "new_full's fill_value must be a number literal")
        sizes = size if isinstance(size, (tuple, list)) else [size]
        return create.full(tuple(as_dim(fc, s, node) for s in sizes), fill.value, x.type.dtype)
    return fn


@torch_function("Tensor.expand_as", receiver=True)
def _expand_as(fc, b, x, args, kw, node):
    """x.expand_as(other): x broadcast to other's shape."""
    other = tensor(fc, b, _arg(fc, args, kw, 0, "other", node), node)
    x = tensor(fc, b, x, node)
    return b.broadcast_to(x, shape=other.type.shape) if x.type.shape != other.type.shape else x


@torch_function("Tensor.view_as", "Tensor.reshape_as", receiver=True)
def _view_as(fc, b, x, args, kw, node):
    """x.view_as(other) / x.reshape_as(other): x with other's shape."""
    other = tensor(fc, b, _arg(fc, args, kw, 0, "other", node), node)
    return shape_ops.reshape(b, tensor(fc, b, x, node), other.type.shape)


torch_function("torch.remainder", "Tensor.remainder")(_python_op(ast.Mod(), "remainder"))
torch_function("torch.floor_divide", "Tensor.floor_divide")(_python_op(ast.FloorDiv(), "floor_divide"))
torch_function("torch.cross", "Tensor.cross")(_cross(None))
torch_function("torch.linalg.cross")(_cross(Const(-1)))
torch_function("torch.any", "Tensor.any")(_any_all(True))
torch_function("torch.all", "Tensor.all")(_any_all(False))
for _name, _op in (("add", ast.Add()), ("sub", ast.Sub()), ("subtract", ast.Sub()), ("mul", ast.Mult()),
                   ("multiply", ast.Mult())):
    torch_function(f"torch.{_name}", f"Tensor.{_name}")(_scaled_op(_op, _name))
torch_function("math.fmod")(_math_function("fmod", _fmod))
torch_function("Tensor.new_zeros", receiver=True)(_new_full(0))
torch_function("Tensor.new_ones", receiver=True)(_new_full(1))
torch_function("Tensor.new_full", receiver=True)(_new_full(None))
