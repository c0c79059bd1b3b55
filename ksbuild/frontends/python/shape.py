"""torch functions and methods that change a tensor's shape (ops/shape.py): views and reshapes (x.view,
reshape, unsqueeze, squeeze, flatten, unflatten, transpose, permute, movedim, swapaxes, t, x.T), broadcasting and
repeats (expand, expand_as, broadcast_to, repeat, tile, repeat_interleave), pieces and joins (narrow, chunk,
split, unbind, torch.cat, torch.stack), reorderings (flip, roll, rot90) and a shape's facts (x.size(), x.dim(),
x.numel()). Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

import math

from ...ir.core import Atom, Var
from ...ir.types import Dim, dim_mul
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const, dim_value
from .tensors import _arg, _dim, _ints, _x, int_const, norm_axis, shape_args, tensor


@torch_function("Tensor.reshape", "Tensor.view", receiver=True)
def _reshape(fc, b, x, args, kw, node) -> Atom:
    args = args or [_arg(fc, args, kw, 0, "shape", node)]
    return shape_ops.reshape(b, tensor(fc, b, x, node), shape_args(fc, args, node))


@torch_function("Tensor.unsqueeze", receiver=True)
def _unsqueeze(fc, b, x, args, kw, node):
    axis = int_const(fc, _arg(fc, args, kw, 0, "dim", node), node, "dim")
    return shape_ops.unsqueeze(b, tensor(fc, b, x, node), axis)


@torch_function("Tensor.squeeze", receiver=True)
def _squeeze(fc, b, x, args, kw, node):
    dim = _arg(fc, args, kw, 0, "dim", node, None)
    axes = None if dim is None else [int_const(fc, d, node, "dim") for d in (dim if isinstance(dim, tuple) else [dim])]
    return shape_ops.squeeze(b, tensor(fc, b, x, node), axes)


@torch_function("Tensor.transpose", receiver=True)
def _transpose(fc, b, x, args, kw, node):
    i, j = (int_const(fc, _arg(fc, args, kw, k, name, node), node, "dim") for k, name in enumerate(("dim0", "dim1")))
    return shape_ops.swap_axes(b, tensor(fc, b, x, node), i, j)


@torch_function("Tensor.permute", receiver=True)
def _permute(fc, b, x, args, kw, node):
    if not args and "dims" in kw:
        args = [kw["dims"]]
    vals = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    return shape_ops.permute(b, tensor(fc, b, x, node), [int_const(fc, a, node, "dim") for a in vals])


@torch_function("Tensor.flatten", receiver=True)
def _flatten(fc, b, x, args, kw, node):
    """x.flatten(start_dim=0, end_dim=-1): the dims start..end merged into one."""
    x = tensor(fc, b, x, node)
    rank = max(x.type.rank, 1)
    lo = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 0, "start_dim", node, Const(0)), node, "dim"), rank, node)
    hi = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "end_dim", node, Const(-1)), node, "dim"), rank, node)
    shape = x.type.shape
    merged = shape[:lo] + (_numel_dims(shape[lo:hi + 1]),) + shape[hi + 1:]
    return shape_ops.reshape(b, x, merged) if x.type.rank else shape_ops.reshape(b, x, (1,))


def _numel_dims(dims) -> Dim:
    n: Dim = 1
    for d in dims:
        n = dim_mul(n, d)
    return n


@torch_function("Tensor.size", receiver=True)
def _size(fc, b, x, args, kw, node):
    """x.size() -> the shape; x.size(k) -> one dim."""
    x = tensor(fc, b, x, node)
    dims = tuple(dim_value(d) for d in x.type.shape)
    if not args and "dim" not in kw:
        return dims
    return dims[norm_axis(fc, int_const(fc, _arg(fc, args, kw, 0, "dim", node), node, "dim"), x.type.rank, node)]


@torch_function("Tensor.contiguous", receiver=True)
def _same(fc, b, x, args, kw, node):
    """x.contiguous(): the same values (torch returns x itself)."""
    return tensor(fc, b, x, node)


@torch_function("Tensor.clone", receiver=True)
def _clone(fc, b, x, args, kw, node):
    """x.clone(): the same values as a value of its own (y = x.clone(); y += v changes y only; a = x[0].clone()
    keeps x[0]'s value when x[0] is assigned later), an identity conversion that simplify removes."""
    x = tensor(fc, b, x, node)
    return b.convert(x, dtype=x.type.dtype) if isinstance(x, Var) else x


@torch_function("Tensor.detach", receiver=True)
def _detach(fc, b, x, args, kw, node):
    """x.detach(): the same values, a constant for differentiation."""
    return b.stop_gradient(tensor(fc, b, x, node))


@torch_function("Tensor.dim", receiver=True)
def _dim_count(fc, b, x, args, kw, node):
    return Const(tensor(fc, b, x, node).type.rank)


@torch_function("Tensor.numel", receiver=True)
def _numel(fc, b, x, args, kw, node):
    return dim_value(_numel_dims(tensor(fc, b, x, node).type.shape))


def transpose_2d(fc, b, x, node):
    """x.T, x.t(), torch.t(x): a matrix's axes swapped; as torch, a 0-d or 1-d tensor is returned as it is."""
    x = tensor(fc, b, x, node)
    if x.type.rank < 2:
        return x
    if x.type.rank != 2:
        raise fc.src.error(node, f".T is supported on matrices, got {x.type}", hint="use permute(...)")
    return shape_ops.swap_axes(b, x, 0, 1)


def _tensor_list(fc, b, args, kw, node, name) -> list[Atom]:
    """The list argument of torch.cat / torch.stack, as atoms."""
    items = _arg(fc, args, kw, 0, "tensors", node)
    if not isinstance(items, (list, tuple)) or not items:
        raise fc.src.error(node, f"torch.{name} takes a non-empty list of tensors")
    return [tensor(fc, b, v, node) for v in items]


def _join(op, name):
    """torch.cat / torch.stack(tensors, dim=0)."""
    def fn(fc, b, args, kw, node):
        from .scope import AppendList
        items = _arg(fc, args, kw, 0, "tensors", node)
        dim = int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(0)), node, "dim")
        if isinstance(items, AppendList):
            return _join_appended(fc, b, items, dim, name, node)
        xs = _tensor_list(fc, b, args, kw, node, name)
        return op(b, xs, dim)
    return fn


def _join_appended(fc, b, items, dim: int, name: str, node) -> Atom:
    """torch.stack / torch.cat of a list a loop filled with .append: the loop's rows along axis 0,
    moved to `dim` (stack) or merged into it (cat)."""
    rows = items.rows
    if rows is None:
        raise fc.src.error(node, f"torch.{name} of a list no loop has filled",
                           hint="fill it with out.append(...) as the last statement of a for loop")
    rank = rows.type.rank - (name == "cat")
    dim = dim + rank if dim < 0 else dim
    if not 0 <= dim < max(rank, 1):
        raise fc.src.error(node, f"dim {dim} is out of range for torch.{name} of these rows")
    if name == "stack":
        perm = list(range(1, rows.type.rank))
        perm.insert(dim, 0)
        return rows if dim == 0 else shape_ops.permute(b, rows, perm)
    moved = rows if dim == 0 else shape_ops.permute(b, rows, [*range(1, dim + 1), 0, *range(dim + 1, rows.type.rank)])
    shape = list(moved.type.shape)
    merged = shape[:dim] + [dim_mul(shape[dim], shape[dim + 1])] + shape[dim + 2:]
    return b.reshape(moved, shape=tuple(merged))


def _function_form(method):
    """torch.f(input, *args, **kw) from the handler of the method input.f(*args, **kw)."""
    def call(fc, b, args, kw, node):
        x = _arg(fc, args, kw, 0, "input", node)
        return method(fc, b, x, args[1:], {k: v for k, v in kw.items() if k != "input"}, node)
    return call


@torch_function("torch.flatten")
def _flatten_fn(fc, b, args, kw, node):
    """torch.flatten(input, start_dim=0, end_dim=-1)."""
    return _flatten(fc, b, _arg(fc, args, kw, 0, "input", node), args[1:], kw, node)


@torch_function("torch.broadcast_to", "Tensor.broadcast_to")
def _broadcast_to(fc, b, args, kw, node):
    """torch.broadcast_to(input, shape)."""
    x = _x(fc, b, args, kw, node)
    shape = shape_args(fc, [_arg(fc, args, kw, 1, "size", node)], node)
    return x if x.type.shape == tuple(shape) else b.broadcast_to(x, shape=tuple(shape))


@torch_function("torch.narrow", "Tensor.narrow")
def _narrow(fc, b, args, kw, node):
    """torch.narrow(input, dim, start, length): length entries from start along dim."""
    x = _x(fc, b, args, kw, node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank)
    start = int_const(fc, _arg(fc, args, kw, 2, "start", node), node, "start")
    length = int_const(fc, _arg(fc, args, kw, 3, "length", node), node, "length")
    return b.slice(x, axis=axis, start=start, stop=start + length)


@torch_function("torch.movedim", "torch.moveaxis", "Tensor.movedim", "Tensor.moveaxis")
def _movedim(fc, b, args, kw, node):
    """torch.movedim(input, source, destination) with one dim or tuples of dims."""
    x = _x(fc, b, args, kw, node)
    src, dst = _arg(fc, args, kw, 1, "source", node), _arg(fc, args, kw, 2, "destination", node)
    src = [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
           (src if isinstance(src, (tuple, list)) else [src])]
    dst = [norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in
           (dst if isinstance(dst, (tuple, list)) else [dst])]
    if len(src) != len(dst):
        raise fc.src.error(node, "movedim takes as many destinations as sources")
    rest = iter(i for i in range(x.type.rank) if i not in src)
    placed = dict(zip(dst, src))
    return shape_ops.permute(b, x, [placed[i] if i in placed else next(rest) for i in range(x.type.rank)])


@torch_function("torch.swapaxes", "torch.swapdims", "Tensor.swapaxes", "Tensor.swapdims")
def _swapaxes(fc, b, args, kw, node):
    """torch.swapaxes / swapdims(input, axis0, axis1)."""
    return _transpose(fc, b, _arg(fc, args, kw, 0, "input", node), args[1:], {}, node)


@torch_function("torch.t")
def _t(fc, b, args, kw, node):
    return transpose_2d(fc, b, _arg(fc, args, kw, 0, "input", node), node)


@torch_function("Tensor.unflatten", receiver=True)
def _unflatten(fc, b, x, args, kw, node):
    """x.unflatten(dim, sizes): dim split into sizes (one may be -1)."""
    x = tensor(fc, b, x, node)
    axis = _dim(fc, args, kw, 0, node, x.type.rank)
    sizes = shape_args(fc, [_arg(fc, args, kw, 1, "sizes", node)], node)
    return shape_ops.reshape(b, x, x.type.shape[:axis] + tuple(sizes) + x.type.shape[axis + 1:])


@torch_function("torch.rot90", "Tensor.rot90")
def _rot90(fc, b, args, kw, node):
    """torch.rot90(input, k=1, dims=(0, 1)): k quarter turns from the first dim towards the second."""
    x = _x(fc, b, args, kw, node)
    k = int_const(fc, _arg(fc, args, kw, 1, "k", node, Const(1)), node, "k") % 4
    dims = _arg(fc, args, kw, 2, "dims", node, (Const(0), Const(1)))
    d0, d1 = (norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node) for d in dims)
    from ...ops.shape import flip
    for _ in range(k):  # one turn: flip along d1, then swap d0 and d1
        x = shape_ops.swap_axes(b, flip(b, x, d1), d0, d1)
    return x


@torch_function("torch.repeat_interleave", "Tensor.repeat_interleave")
def _repeat_interleave(fc, b, args, kw, node):
    """torch.repeat_interleave(input, repeats, dim=None) with a literal int repeats: each element repeats times
    in a row along dim (the flattened input when dim is None)."""
    x = _x(fc, b, args, kw, node)
    r = int_const(fc, _arg(fc, args, kw, 1, "repeats", node), node, "repeats")
    axis = _dim(fc, args, kw, 2, node, max(x.type.rank, 1))
    if axis is None:
        x, axis = shape_ops.reshape(b, x, [-1]), 0
    shape = x.type.shape
    from ...ir.types import dim_mul
    spread = b.broadcast_to(b.reshape(x, shape=shape[:axis + 1] + (1,) + shape[axis + 1:]),
                            shape=shape[:axis + 1] + (r,) + shape[axis + 1:])
    return b.reshape(spread, shape=shape[:axis] + (dim_mul(shape[axis], r),) + shape[axis + 1:])


@torch_function("torch.unbind", "Tensor.unbind")
def _unbind(fc, b, args, kw, node):
    """torch.unbind(input, dim=0) / x.unbind(dim): the slices along dim, a tuple (the size must be a literal)."""
    x = _x(fc, b, args, kw, node)
    axis = _dim(fc, args, kw, 1, node, x.type.rank, Const(0))
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise fc.src.error(node, f"unbind along a symbolic axis ({x.type})", hint="index the axis in a loop instead")
    rest = x.type.shape[:axis] + x.type.shape[axis + 1:]
    return tuple(b.reshape(b.slice(x, axis=axis, start=i, stop=i + 1), shape=rest) for i in range(n))


@torch_function("Tensor.expand", receiver=True)
def _expand(fc, b, x, args, kw, node):
    """x.expand(*sizes): -1 keeps a size."""
    from .tensors import shape_args
    x = tensor(fc, b, x, node)
    dims = list(shape_args(fc, args, node))
    lead = len(dims) - x.type.rank
    dims = [x.type.shape[i - lead] if d == -1 else d for i, d in enumerate(dims)]
    return shape_ops.expand(b, x, dims)


@torch_function("Tensor.repeat", receiver=True)
def _repeat(fc, b, x, args, kw, node):
    """x.repeat(*repeats) (tile)."""
    x = tensor(fc, b, x, node)
    reps = [int_const(fc, r, node, "a repeat count") for r in
            (list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args)]
    lead = len(reps) - x.type.rank
    if lead < 0:
        raise fc.src.error(node, f"repeat needs at least {x.type.rank} counts")
    if lead:
        x = shape_ops.reshape(b, x, (1,) * lead + x.type.shape)
    return shape_ops.tile(b, x, reps)


@torch_function("Tensor.tile", receiver=True)
def _tile(fc, b, x, args, kw, node):
    """x.tile(*dims) / torch.tile(x, dims): repeat, with fewer counts than axes padded by leading ones."""
    x = tensor(fc, b, x, node)
    reps = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)
    return _repeat(fc, b, x, [Const(1)] * max(0, x.type.rank - len(reps)) + reps, kw, node)


@torch_function("torch.tile")
def _tile_function(fc, b, args, kw, node):
    """torch.tile(x, dims)."""
    return _tile(fc, b, args[0], args[1:], kw, node)


def _pieces(fc, n, size, node, what: str) -> list:
    """The sizes of consecutive pieces of `size` covering an axis of n (the last one shorter, as in torch), or
    equal pieces when both are dims and n is visibly a multiple of size."""
    from ...ir.types import dim_floordiv, dim_mul
    if isinstance(n, int) and isinstance(size, int):
        if size <= 0:
            raise fc.src.error(node, f"{what}: the piece size must be positive, got {size}")
        return [min(size, n - k) for k in range(0, n, size)]
    count = dim_floordiv(n, size) if isinstance(size, int) else \
        next((k for k in range(1, 65) if dim_mul(size, k) == n), None)  # 4*h in pieces of h
    if isinstance(count, int) and dim_mul(count, size) == n:
        return [size] * count
    raise fc.src.error(node, f"{what}: the number of pieces of an axis of size {n} must be known when the kernel "
                             f"is compiled", hint="write the dim as a multiple in the annotation, e.g. "
                                                  '"float[4 * h]" for four pieces of h')


@torch_function("torch.chunk", "Tensor.chunk")
def _chunk(fc, b, args, kw, node):
    """torch.chunk(x, chunks, dim=0): pieces of ceil(n / chunks) (for a symbolic n: n / chunks each, n must be
    a visible multiple such as 4 * h)."""
    from ...ir.types import dim_floordiv, dim_mul
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    chunks = int_const(fc, _arg(fc, args, kw, 1, "chunks", node), node, "chunks")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(0)), node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if chunks <= 0:
        raise fc.src.error(node, f"torch.chunk needs a positive number of chunks, got {chunks}")
    if isinstance(n, int):
        sizes = _pieces(fc, n, -(-n // chunks), node, "torch.chunk")
    elif dim_mul(dim_floordiv(n, chunks), chunks) == n:
        sizes = [dim_floordiv(n, chunks)] * chunks
    else:
        raise fc.src.error(node, f"torch.chunk of an axis of size {n} into {chunks}: the size must be a visible "
                                 f"multiple of {chunks}",
                           hint=f'write the dim as a multiple in the annotation, e.g. "float[{chunks} * h]"')
    return tuple(shape_ops.split(b, x, axis, sizes))


@torch_function("torch.split", "Tensor.split")
def _split(fc, b, args, kw, node):
    """torch.split(x, size_or_sizes, dim=0): pieces of one size (the last shorter) or of the listed sizes."""
    from .tensors import as_dim
    x = tensor(fc, b, _arg(fc, args, kw, 0, "tensor", node), node)
    spec = _arg(fc, args, kw, 1, "split_size_or_sections", node)
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 2, "dim", node, Const(0)), node, "dim"), x.type.rank, node)
    n = x.type.shape[axis]
    if isinstance(spec, (list, tuple)):
        sizes = [as_dim(fc, v, node) for v in spec]
        from ...ir.types import dim_add
        total = 0
        for v in sizes:
            total = dim_add(total, v)
        if total != n:
            raise fc.src.error(node, f"torch.split sizes {sizes} do not add up to {n}")
    else:
        sizes = _pieces(fc, n, as_dim(fc, spec, node), node, "torch.split")
    return tuple(shape_ops.split(b, x, axis, sizes))


@torch_function("torch.flip", "Tensor.flip")
def _flip(fc, b, args, kw, node):
    """torch.flip(x, dims) and x.flip(dims) or x.flip(d0, d1, ...) (a method's dims may come one by one)."""
    x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    dims = tuple(args[1:]) if len(args) > 2 else _arg(fc, args, kw, 1, "dims", node)
    for d in dims if isinstance(dims, (tuple, list)) else [dims]:
        x = shape_ops.flip(b, x, norm_axis(fc, int_const(fc, d, node, "dim"), x.type.rank, node))
    return x


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


torch_function("torch.cat", "torch.concat")(_join(shape_ops.concatenate, "cat"))
torch_function("torch.stack")(_join(shape_ops.stack, "stack"))
torch_function("torch.reshape")(_function_form(_reshape))
torch_function("torch.unsqueeze")(_function_form(_unsqueeze))
torch_function("torch.squeeze")(_function_form(_squeeze))
torch_function("torch.transpose")(_function_form(_transpose))
torch_function("torch.permute")(_function_form(_permute))
torch_function("Tensor.t", receiver=True)(lambda fc, b, x, args, kw, node: transpose_2d(fc, b, x, node))
