"""Tensor operations of the Python frontend: annotations, indexing, torch functions and methods.

This module only parses torch's calling conventions (positional and keyword arguments, dims,
`keepdim`, weak Python constants) and calls the shared op library (`ksbuild/ops`), where every
operation is decomposed into core prims. Functions here take the compiler (`fc`), the builder,
evaluated arguments and keyword arguments, and the AST node for errors.
"""
from __future__ import annotations

import ast
import math
import re

import numpy as np

from ...ir.core import Atom, Lit, Var
from ...ir.types import (
    DTYPES,
    Dim,
    Type,
    broadcast_shapes,
    canonical_dim,
    dim_add,
    dim_floordiv,
    dim_mul,
    dim_sub,
    numpy_dtype,
)
from ...ops import create, index, linalg, reduce
from ...ops import shape as shape_ops
from ...ops.shape import move_axis0  # noqa: F401  (used by loops.py)
from .registry import torch_function
from .scope import Const, SymDim, ValuesIndices, dim_value

_TYPE_TEXT = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\[(.*)\])?\s*$")
_DIM_EXPR = re.compile(r"^[A-Za-z0-9_\s+*/()-]+$")


def parse_type_text(text: str, float_dtype: str) -> Type | None:
    """'f32[n, 3]', 'float[n]', 'i64', 'float[]' (a scalar) -> Type; None if the text is not a type."""
    m = _TYPE_TEXT.match(text)
    if not m:
        return None
    base = {"float": float_dtype, "int": "i64", "bool": "bool"}.get(m.group(1), m.group(1))
    if base not in DTYPES or base == "str":  # (strings are for ONNX models: Python kernels compute numbers)
        return None
    if m.group(2) is None or not m.group(2).strip():
        return Type(base)
    dims: list[Dim] = []
    for part in m.group(2).split(","):
        part = part.strip()
        if part.isdigit() and int(part) > 0:
            dims.append(int(part))
        elif part.isidentifier():
            dims.append(part)
        elif _DIM_EXPR.match(part):  # "n*d", "n + 1": canonical like the dims of results
            try:
                dims.append(canonical_dim(part))
            except (ValueError, SyntaxError):
                return None
        else:
            return None
    return Type(base, tuple(dims))


# ---- dims as values ----------------------------------------------------------------------------

def is_dimlike(v) -> bool:
    return isinstance(v, SymDim) or (isinstance(v, Const) and type(v.value) is int)


def as_dim(fc, v, node) -> Dim:
    """A frontend value used as a shape entry or a static bound."""
    if isinstance(v, SymDim):
        return v.dim
    if isinstance(v, Const) and type(v.value) is int:
        return v.value
    raise fc.src.error(node, "a shape or slice bound must be an int literal, a dim (x.shape[k], len(x)) "
                             "or arithmetic on them", hint="sizes must be known when the kernel is called")


DIM_OPS = {ast.Add: dim_add, ast.Sub: dim_sub, ast.Mult: dim_mul, ast.FloorDiv: dim_floordiv}


def dim_binop(op, x, y):
    """x op y on dims, or None if op does not keep a dim."""
    fn = DIM_OPS.get(type(op))
    if fn is None:
        return None
    d = fn(x.dim if isinstance(x, SymDim) else x.value, y.dim if isinstance(y, SymDim) else y.value)
    return dim_value(d)


# ---- helpers -----------------------------------------------------------------------------------

def tensor(fc, b, v, node, what="a tensor") -> Atom:
    """v as an atom (weak constants take the float dtype)."""
    if isinstance(v, (list, tuple)):
        raise fc.src.error(node, f"expected {what}, got a {'list' if isinstance(v, list) else 'tuple'}")
    if isinstance(v, SymDim):
        return b.dim_size(dim=v.dim)
    if isinstance(v, Const):
        return fc.as_atom(b, v, None, node)
    return v


def float_tensor(fc, b, v, node) -> Atom:
    x = tensor(fc, b, v, node)
    return x if x.type.is_float else b.convert(x, dtype=fc.float_dtype)


def int_const(fc, v, node, what) -> int:
    if isinstance(v, Const) and type(v.value) is int:
        return v.value
    raise fc.src.error(node, f"{what} must be an integer literal")


def norm_axis(fc, axis: int, rank: int, node) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise fc.src.error(node, f"dim {axis} is out of range for a tensor of rank {rank}")
    return a


def axes_arg(fc, v, rank, node) -> tuple[int, ...]:
    """The axes a `dim` argument names: every axis for None (left out, or written: torch.sum(x, None))."""
    if v is None or (isinstance(v, Const) and v.value is None):
        return tuple(range(rank))
    vals = v if isinstance(v, (tuple, list)) else (v,)
    return tuple(sorted(norm_axis(fc, int_const(fc, a, node, "dim"), rank, node) for a in vals))


def shape_args(fc, args, node) -> tuple[Dim, ...]:
    """torch.zeros(n, m) / torch.zeros((n, m)) / torch.zeros([n, m])."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = list(args[0])
    return tuple(as_dim(fc, a, node) for a in args)


# ---- indexing ----------------------------------------------------------------------------------

def subscript(fc, b, x, index_node: ast.expr, scope, node):
    """x[...] with ints, computed ints, step-1 slices and None."""
    if isinstance(x, tuple):  # x.shape[k] and friends
        k = fc.expr(b, scope, index_node)
        if not isinstance(k, Const) and x and all(isinstance(v, Const) for v in x):  # KNOTS[i]: torch.tensor(KNOTS)[i]
            return subscript(fc, b, tensor_literal(fc, b, [list(x)], {}, node), index_node, scope, node)
        i = int_const(fc, k, index_node, "a tuple index")
        if not -len(x) <= i < len(x):
            raise fc.src.error(index_node, f"index {i} out of range for a tuple of {len(x)}")
        return x[i]
    x = tensor(fc, b, x, node)
    if x.type.rank == 0:
        raise fc.src.error(node, f"cannot index a scalar value of type {x.type}")
    items = _expand_ellipsis(fc, index_items(index_node), x.type.rank, node)
    if sum(1 for it in items if not _is_none(it)) > x.type.rank:
        raise fc.src.error(node, f"too many indices for {x.type}")
    values = {k: fc.expr(b, scope, it) for k, it in enumerate(items)
              if not _is_none(it) and not isinstance(it, ast.Slice)}
    # several integer tensors (x[torch.arange(n), labels]) pick together, elementwise: index.take_many
    together = [k for k, v in values.items() if _is_index_tensor(v)]
    if len(together) > 1 and together != list(range(together[0], together[-1] + 1)):
        raise fc.src.error(node, "index tensors with other indices between them (x[i, :, j]) are not supported",
                           hint="index tensors next to one another pick elementwise: x[i, j] or x[:, i, j]")
    axis, k = 0, 0
    while k < len(items):
        it = items[k]
        if _is_none(it):
            x = b.reshape(x, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:])
            axis += 1
        elif isinstance(it, ast.Slice):
            x = _slice(fc, b, scope, x, axis, it, ast.unparse(node.value) if isinstance(node, ast.Subscript) else "x")
            axis += 1
        elif len(together) > 1 and k == together[0]:
            rank = x.type.rank - len(together)
            x = index.take_many(b, x, [values[t] for t in together], axis)
            axis += x.type.rank - rank
            k = together[-1]
        else:
            i = values[k]
            x = _take(fc, b, x, axis, i, it)
            axis += i.type.rank if isinstance(i, Atom) and not isinstance(i, Lit) else 0
        k += 1
    return x


def _is_index_tensor(v) -> bool:
    """An integer tensor used as an index (x[idx]: numpy's take, not a position)."""
    return isinstance(v, Atom) and not isinstance(v, Lit) and bool(v.type.rank) and v.type.dtype in ("i32", "i64")


def index_items(index_node: ast.expr) -> list[ast.expr]:
    return list(index_node.elts) if isinstance(index_node, ast.Tuple) else [index_node]


def _expand_ellipsis(fc, items: list, rank: int, node) -> list:
    """x[..., 0]: the `...` stands for as many full slices as the other items leave axes."""
    dots = [k for k, it in enumerate(items) if isinstance(it, ast.Constant) and it.value is Ellipsis]
    if not dots:
        return items
    if len(dots) > 1:
        raise fc.src.error(node, "an index can have only one '...'")
    k = dots[0]
    used = sum(1 for it in items if not _is_none(it)) - 1
    fill = [ast.Slice() for _ in range(max(rank - used, 0))]
    return items[:k] + fill + items[k + 1:]


def _is_none(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def set_subscript(fc, b, x, index_node: ast.expr, value, scope, node):
    """x with x[...] = value (ints, computed ints and step-1 slices); a new value, x is unchanged.
    A position is replaced exactly (index_set), a range by joining slices around it."""
    if not isinstance(x, Atom) or not x.type.rank:
        raise fc.src.error(node, "only a tensor's elements can be assigned (x[i] = v)")
    items = _expand_ellipsis(fc, index_items(index_node), x.type.rank, node)
    if any(_is_none(it) for it in items) or len(items) > x.type.rank:
        raise fc.src.error(node, f"unsupported index in an assignment to {x.type}",
                           hint="use integers and slices a:b, one per axis")
    x_text = ast.unparse(node.value) if isinstance(node, ast.Subscript) else "x"
    keys = [_set_key(fc, b, scope, x, axis, it, x_text) for axis, it in enumerate(items)]
    keys += [("all",)] * (x.type.rank - len(keys))
    v = tensor(fc, b, value, node)
    if v.type.dtype != x.type.dtype:
        v = b.convert(v, dtype=x.type.dtype)
    return _set_items(fc, b, x, keys, v, node)


def _set_key(fc, b, scope, x: Atom, axis: int, it, x_text: str = "x"):
    """One index item of an assignment: ("int", index atom), ("range", start, stop), ("window", start atom,
    literal length) for x[j:j + m] with a computed start, or ("all",)."""
    n = x.type.shape[axis]
    if isinstance(it, ast.Slice):
        if it.step is not None:
            raise fc.src.error(it, "assignment to a slice with a step is not supported")
        window = _window_bounds(fc, b, scope, it)
        if window is not None:
            start, m = window
            if not isinstance(m, int):
                raise fc.src.error(it, "an assignment to x[j:j + m] with a computed start needs a literal length m")
            return ("window", _window_start(b, start, n, m), m)
        def instead():
            return _masked_instead(x_text, axis, x.type.rank, it, assign=True)
        start, stop = _bound(fc, b, scope, it.lower, n, 0, instead), _bound(fc, b, scope, it.upper, n, n, instead)
        return ("all",) if (start, stop) == (0, n) else ("range", start, stop)
    return ("int", _index_atom(fc, b, x, axis, fc.expr(b, scope, it), it))


def _set_items(fc, b, x: Atom, keys: list, v: Atom, node) -> Atom:
    """x with the part the keys select replaced by v (broadcast to that part's shape)."""
    k = next((j for j, key in enumerate(keys) if key[0] != "all"), None)
    if k is None:
        if v.type.shape != x.type.shape and broadcast_shapes(v.type.shape, x.type.shape) != x.type.shape:
            raise fc.src.error(node, f"cannot assign a value of type {v.type} to a part of type {x.type}")
        return v if v.type.shape == x.type.shape else b.broadcast_to(v, shape=x.type.shape)
    key = keys[k]
    if key[0] == "window":  # m positions from a computed start (moved so that they fit, as for reads), one by one
        _, start, m = key
        if any(key[0] != "all" for key in keys[k + 1:]):
            raise fc.src.error(node, "an assignment to x[j:j + m] with a computed start must take whole axes after it")
        shape = x.type.shape[:k] + (m,) + x.type.shape[k + 1:]
        if broadcast_shapes(v.type.shape, shape) != shape:
            raise fc.src.error(node, f"cannot assign a value of type {v.type} to a part of shape {list(shape)}")
        v = v if v.type.shape == shape else b.broadcast_to(v, shape=shape)
        for t in range(m):
            i = b.add(start, Lit(t, Type("i64"))) if t else start
            x = b.index_set(x, i, b.index(v, Lit(t, Type("i64")), axis=k), axis=k)
        return x
    if key[0] == "int":
        part = b.index(x, key[1], axis=k)
        new = _set_items(fc, b, part, keys[:k] + keys[k + 1:], v, node)
        return b.index_set(x, key[1], new, axis=k)
    _, start, stop = key
    n = x.type.shape[k]
    part = b.slice(x, axis=k, start=start, stop=stop)
    new = _set_items(fc, b, part, keys[:k] + [("all",)] + keys[k + 1:], v, node)
    pieces = [b.slice(x, axis=k, start=0, stop=start)] if start != 0 else []
    pieces.append(new)
    if stop != n:
        pieces.append(b.slice(x, axis=k, start=stop, stop=n))
    return shape_ops.concatenate(b, pieces, k)


def _bound(fc, b, scope, e, n: Dim, default: Dim, instead=None) -> Dim:
    """A slice bound as a dim (clamped into the axis when static); `instead()`: what to write when the bound is
    computed at run time (a loop counter), which would make the slice's size change from run to run."""
    if e is None:
        return default
    v = fc.expr(b, scope, e)
    if instead is not None and isinstance(v, Atom) and not v.type.rank and v.type.is_int:
        raise fc.src.error(e, f"the slice bound '{ast.unparse(e)}' is computed when the kernel runs (a loop counter "
                              "or a value), so the slice's size would change with it; a kernel's tensors have sizes "
                              "fixed when it is called", hint=instead())
    d = as_dim(fc, v, e)
    if isinstance(d, int) and d < 0:
        d = dim_add(n, d)
    if isinstance(d, int) and isinstance(n, int):
        d = min(max(d, 0), n)
    return d


def _masked_instead(x_text: str, axis: int, rank: int, s: ast.Slice, assign: bool) -> str:
    """What to write instead of a slice with computed bounds: the whole axis and a mask of the positions the
    slice takes (torch.arange along that axis, broadcast against the others)."""
    pos = f"torch.arange({x_text}.shape[{axis}])" + (f"[:{', None' * (rank - 1 - axis)}]" if axis < rank - 1 else "")
    conds = ([f"{pos} >= {ast.unparse(s.lower)}"] if s.lower is not None else []) + \
            ([f"{pos} < {ast.unparse(s.upper)}"] if s.upper is not None else [])
    mask = " & ".join(f"({c})" for c in conds) if len(conds) > 1 else conds[0]
    if assign:
        return (f"keep the whole axis and select the positions along axis {axis}: "
                f"{x_text} = torch.where({mask}, value, {x_text})")
    return (f"keep the whole axis and zero what the slice leaves out: torch.where({mask}, {x_text}, 0.0) (a sum of "
            f"it is the slice's sum; use 1.0 for a product), or loop over the elements: for j in range(...): "
            f"... {x_text}[j] ...")


def _slice(fc, b, scope, x: Atom, axis: int, s: ast.Slice, x_text: str = "x") -> Atom:
    step = 1
    if s.step is not None:
        v = fc.expr(b, scope, s.step)
        if not (isinstance(v, Const) and type(v.value) is int and v.value > 0):
            raise fc.src.error(s.step, "a slice's step must be a positive integer literal (as torch's)")
        step = v.value
    n = x.type.shape[axis]
    if step != 1:  # x[a:b:k]: static bounds
        start, stop = _bound(fc, b, scope, s.lower, n, 0), _bound(fc, b, scope, s.upper, n, n)
        if not (isinstance(start, int) and isinstance(stop, int)):
            raise fc.src.error(s, f"a slice with a step needs static bounds on an axis of size {n}")
        if stop <= start:
            raise fc.src.error(s, "an empty slice is not supported")
        return shape_ops.strided_slice(b, x, axis, start, stop, step)
    window = _dynamic_window(fc, b, scope, s)
    if window is not None:
        return window(x, axis)
    def instead():
        return _masked_instead(x_text, axis, x.type.rank, s, assign=False)
    start, stop = _bound(fc, b, scope, s.lower, n, 0, instead), _bound(fc, b, scope, s.upper, n, n, instead)
    if start == 0 and stop == n:
        return x
    return b.slice(x, axis=axis, start=start, stop=stop)


def _window_bounds(fc, b, scope, s: ast.Slice):
    """(start atom, static length m) of a slice j:j + m with a computed start j (m a literal or a dim), or
    None when the start is static."""
    if s.lower is None or s.upper is None or not isinstance(s.upper, ast.BinOp) \
            or not isinstance(s.upper.op, ast.Add):
        return None
    same = ast.dump(s.lower)
    if ast.dump(s.upper.left) == same:
        length_node = s.upper.right
    elif ast.dump(s.upper.right) == same:
        length_node = s.upper.left
    else:
        return None
    start = fc.expr(b, scope, s.lower)
    if is_dimlike(start) or not isinstance(start, Atom) or start.type.rank or not start.type.is_int:
        return None
    return start, as_dim(fc, fc.expr(b, scope, length_node), length_node)


def _dynamic_window(fc, b, scope, s: ast.Slice):
    """x[j:j + m] with a computed start j and a static length m (a literal or a dim): m elements from j
    (see _window_start), as a gather. A function (x, axis) -> the window, or None when the start is static."""
    bounds = _window_bounds(fc, b, scope, s)
    if bounds is None:
        return None
    start, m = bounds

    def take(x: Atom, axis: int) -> Atom:
        positions = b.add(create.arange(b, 0, m), _window_start(b, start, x.type.shape[axis], m))
        return index.gather(b, x, positions, axis)
    return take


def _window_start(b, start: Atom, n: Dim, m: Dim) -> Atom:
    """Where a window of m elements from a computed start j begins on an axis of n, as JAX's dynamic_slice
    has it: a negative j counts from the end, then the start moves into [0, n - m] so that the whole window
    lies inside the axis (torch would return a shorter window, which a fixed-size tensor cannot be)."""
    i64 = Type("i64")
    j = start if start.type.dtype == "i64" else b.convert(start, dtype="i64")
    size = Lit(n, i64) if isinstance(n, int) else b.dim_size(dim=n)
    j = b.select(b.lt(j, Lit(0, i64)), b.add(j, size), j)
    last = b.sub(size, Lit(m, i64) if isinstance(m, int) else b.dim_size(dim=m))
    return b.max(b.min(j, last), Lit(0, i64))


def _take(fc, b, x: Atom, axis: int, i, node) -> Atom:
    if _is_index_tensor(i):  # x[idx] with an integer tensor: numpy's take (negative indices wrap)
        return index.gather(b, x, i, axis)  # (i32 indices become i64 in index.wrap)
    return b.index(x, _index_atom(fc, b, x, axis, i, node), axis=axis)


def _index_atom(fc, b, x: Atom, axis: int, i, node) -> Atom:
    """An integer index into `axis` of x as an i64 atom (a literal negative index counts from the end)."""
    n = x.type.shape[axis]
    if isinstance(i, Const) and type(i.value) is int:
        v = i.value
        if v < 0:
            i = Lit(v + n, Type("i64")) if isinstance(n, int) else b.dim_size(dim=dim_add(n, v))
        else:
            if isinstance(n, int) and v >= n:
                raise fc.src.error(node, f"index {v} is out of range for an axis of size {n}")
            i = Lit(v, Type("i64"))
    elif isinstance(i, SymDim):
        i = b.dim_size(dim=i.dim)
    elif not isinstance(i, (tuple, list, Const)) and i.type.dtype == "bool":
        raise fc.src.error(node, "indexing with a bool mask is not supported: the result's size would depend on "
                                 "the values", hint="keep the shape and choose instead: torch.where(mask, x, 0), "
                                                    "or x * mask; integer index tensors (x[idx]) are supported")
    elif isinstance(i, (tuple, list)) or isinstance(i, Const) or i.type.dtype not in ("i32", "i64") or i.type.rank:
        raise fc.src.error(node, "an index must be an integer scalar (tensor indexing is not supported)",
                           hint="use int(...) for a computed index; slices use a:b")
    return i


# ---- reductions ----------------------------------------------------------------------------------

def _as_dtype_kw(fc, b, x, args, kw, pos: int, node):
    """x converted to the dtype= keyword (torch.sum, softmax, ...: computed in that dtype), when given."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, pos, "dtype", node, None)
    if d is None:
        return x
    if not isinstance(d, DtypeValue):
        raise fc.src.error(node, "dtype= must be a torch dtype such as torch.float64")
    return x if x.type.dtype == d.dtype else b.convert(x, dtype=d.dtype)


def _reduce(op, to_float: bool = False):
    """torch.sum/mean/amax/amin(input, dim=None, keepdim=False, *, dtype=None)."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        x = _as_dtype_kw(fc, b, x, args, kw, 3, node)
        if to_float:
            x = float_tensor(fc, b, x, node)
        axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node, None), x.type.rank, node)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        return op(b, x, axes, keep.value)
    return fn


def _softmax(log: bool):
    """torch.softmax / log_softmax(input, dim, dtype=None)."""
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _as_dtype_kw(fc, b, tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node),
                                             args, kw, 2, node), node)
        dim = _arg(fc, args, kw, 1, "dim", node)
        if isinstance(dim, Const) and dim.value is None:
            raise fc.src.error(node, "softmax needs its dim (torch's implicit choice for None is deprecated)")
        (axis,) = axes_arg(fc, dim, x.type.rank, node)
        return reduce.log_softmax(b, x, axis) if log else reduce.softmax(b, x, axis)
    return fn


def max_with_dim(largest: bool):
    """torch.max(x, dim, keepdim=False) -> (values, indices), with .values and .indices."""
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, args[0], node)
        dim = int_const(fc, _arg(fc, args, kw, 1, "dim", node), node, "dim")
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False)).value
        axes = axes_arg(fc, Const(dim), x.type.rank, node)
        indices = index.arg_extremum(b, b.stop_gradient(x), dim, keep, largest)
        if not x.type.is_float:
            return ValuesIndices((reduce.amax if largest else reduce.amin)(b, x, axes, keep), indices)
        # the values are read at the indices: among equal maxima, the gradient goes to the one the index names
        # (torch's), not shared as amax's
        (axis,) = axes
        at = indices if keep else shape_ops.unsqueeze(b, indices, axis)
        values = index.gather_elements(b, x, at, axis)
        return ValuesIndices(values if keep else shape_ops.squeeze(b, values, [axis]), indices)
    return fn


def _max_or_min(kind: str):
    """torch.max(x) (a full reduction) or torch.max(a, b) (elementwise)."""
    def fn(fc, b, args, kw, node):
        if len(args) == 2 and not kw and not is_dimlike(args[1]):
            from .mathlib import LIBRARY
            return LIBRARY["maximum" if kind == "max" else "minimum"](fc, b, args, node)
        if len(args) > 1 or kw:
            return max_with_dim(kind == "max")(fc, b, args, kw, node)
        return _reduce(reduce.amax if kind == "max" else reduce.amin)(fc, b, args, kw, node)
    return fn


# ---- products ------------------------------------------------------------------------------------

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


def _two_floats(fc, b, args, node, name):
    if len(args) != 2:
        raise fc.src.error(node, f"{name} takes two tensors")
    x, y = (tensor(fc, b, a, node) for a in args)
    return fc.unify(b, x, y, node)


# ---- shapes --------------------------------------------------------------------------------------

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


def _cast_to(dtype: str | None):
    """x.float(), x.double(), x.int(), x.long(), x.bool() (torch's dtypes; None: the build float)."""
    def fn(fc, b, x, args, kw, node):
        x = tensor(fc, b, x, node)
        want = dtype or fc.float_dtype
        return x if x.type.dtype == want else b.convert(x, dtype=want)
    return fn


@torch_function("Tensor.type_as", receiver=True)
def _type_as(fc, b, x, args, kw, node):
    x, other = tensor(fc, b, x, node), tensor(fc, b, _arg(fc, args, kw, 0, "other", node), node)
    return x if x.type.dtype == other.type.dtype else b.convert(x, dtype=other.type.dtype)


@torch_function("Tensor.to", receiver=True)
def _to(fc, b, x, args, kw, node):
    """x.to(torch.float64) / x.to(y.dtype) / x.to(dtype=...) / x.to(y): a cast (devices are ignored: kernels run
    where they are linked); the same dtype is a no-op."""
    from .scope import DtypeValue
    x = tensor(fc, b, x, node)
    wanted = [a.dtype if isinstance(a, DtypeValue) else a.type.dtype for a in list(args) + [kw.get("dtype")]
              if isinstance(a, DtypeValue) or (isinstance(a, Atom) and not isinstance(a, Lit))]
    if not wanted:
        return x
    return x if wanted[0] == x.type.dtype else b.convert(x, dtype=wanted[0])


@torch_function("Tensor.item", receiver=True)
def _item(fc, b, x, args, kw, node):
    """x.item() of a one-element tensor: the scalar, a constant for differentiation (a Python number in torch)."""
    x = tensor(fc, b, x, node)
    if any(d != 1 for d in x.type.shape):
        raise fc.src.error(node, f".item() needs a tensor with one element, got {x.type}")
    return b.stop_gradient(b.reshape(x, shape=()) if x.type.rank else x)


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


# ---- construction ------------------------------------------------------------------------------

def _filled(value):
    def fn(fc, b, args, kw, node):
        return create.full(shape_args(fc, args, node), value, _dtype_kw(fc, kw, node, fc.float_dtype))
    return fn


@torch_function("torch.full")
def _full(fc, b, args, kw, node):
    dtype = _dtype_kw(fc, kw, node, fc.float_dtype)
    if len(args) != 2:
        raise fc.src.error(node, "torch.full takes a shape and a value")
    shape = shape_args(fc, [args[0]], node)
    v = args[1]
    if isinstance(v, Const):
        return create.full(shape, v.value, dtype)
    v = tensor(fc, b, v, node)
    return create.fill(b, shape, v if v.type.dtype == dtype else b.convert(v, dtype=dtype))


def _like(value):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, args[0], node)
        dtype = _dtype_kw(fc, kw, node, x.type.dtype)
        return create.full(x.type.shape, value, dtype)
    return fn


@torch_function("torch.arange")
def _arange(fc, b, args, kw, node):
    kw = dict(kw)
    named = [kw.pop(k) for k in ("start", "end", "step") if k in kw]
    if len(args) + len(named) > 3 or (named and len(args) + len(named) < 2):
        raise fc.src.error(node, "torch.arange(end), arange(start, end) or arange(start, end, step) is supported")
    args = list(args) + named
    start, stop, step = ([Const(0)] + args if len(args) == 1 else args) + [Const(1)] * (3 - max(len(args), 2))
    unit_step = isinstance(step, Const) and type(step.value) is int and step.value == 1
    if not unit_step or any(isinstance(v, Const) and type(v.value) is float for v in (start, stop)):
        return _arange_of_numbers(fc, b, (start, stop, step), kw, node)
    dtype = _dtype_kw(fc, kw, node, "i64")
    return create.arange(b, as_dim(fc, start, node), as_dim(fc, stop, node), dtype)


def _arange_of_numbers(fc, b, bounds, kw, node):
    """torch.arange with a float bound or a step other than 1: every bound a number literal, the values
    computed when the kernel is compiled as torch does (start + i·step for i < ⌈(end - start) / step⌉), in the
    build's float dtype when a bound is a float (as torch's default dtype), else int64."""
    if not all(isinstance(v, Const) and type(v.value) in (int, float) for v in bounds):
        raise fc.src.error(node, "torch.arange with a float bound or a step needs number literals for start, end "
                                 "and step", hint="a size known only when the kernel is called needs a step of 1")
    start, stop, step = (v.value for v in bounds)
    if step == 0:
        raise fc.src.error(node, "torch.arange's step must not be zero")
    count = max(0, math.ceil((stop - start) / step))
    floats = any(type(v) is float for v in (start, stop, step))
    dtype = _dtype_kw(fc, kw, node, fc.float_dtype if floats else "i64")
    values = start + np.arange(count, dtype=np.float64 if floats else np.int64) * step
    return create.array(b, values.astype(numpy_dtype(dtype)))


@torch_function("torch.eye")
def _eye(fc, b, args, kw, node):
    n = as_dim(fc, args[0], node)
    m = as_dim(fc, args[1], node) if len(args) > 1 else n
    return create.eye(b, n, m, _dtype_kw(fc, kw, node, fc.float_dtype))


def _tri(lower: bool):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        k = int_const(fc, _arg(fc, args, kw, 1, "diagonal", node, Const(0)), node, "diagonal")
        return create.triangle(b, x, k, lower)
    return fn


@torch_function("torch.tensor")
def tensor_literal(fc, b, args, kw, node):
    """torch.tensor([...]) of numbers: a constant (or of values: a stack)."""
    data = _arg(fc, args, kw, 0, "data", node)
    dtype = _dtype_kw(fc, {k: v for k, v in kw.items() if k != "data"}, node, "")
    values = nested_items(data)
    if all(isinstance(v, Const) for v in values):
        arr = np.asarray(_consts(data), dtype=_np_dtype(dtype or _default(values, fc.float_dtype)))
        return create.array(b, arr)
    if isinstance(data, list) and all(not isinstance(v, list) for v in data):
        xs = [tensor(fc, b, v, node) for v in data]
        return shape_ops.stack(b, [x if not dtype or x.type.dtype == dtype else b.convert(x, dtype=dtype)
                                   for x in xs], 0)
    if isinstance(data, Atom):  # torch.tensor(x) of one computed value (a 0-d tensor) or of a tensor (a copy)
        return data if not dtype or data.type.dtype == dtype else b.convert(data, dtype=dtype)
    raise fc.src.error(node, "torch.tensor of nested lists of computed values is not supported",
                       hint="use torch.stack")


def nested_items(v) -> list:
    return [x for item in v for x in nested_items(item)] if isinstance(v, (list, tuple)) else [v]


def _consts(v):
    return [_consts(x) for x in v] if isinstance(v, (list, tuple)) else v.value


def _default(values, float_dtype: str) -> str:
    kinds = {type(v.value) for v in values}
    return float_dtype if float in kinds else "bool" if kinds == {bool} else "i64"


def _np_dtype(dtype: str):
    from ...ir.types import NUMPY_DTYPES
    return NUMPY_DTYPES[dtype]


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


def _dtype_kw(fc, kw, node, default: str) -> str:
    """The dtype= of a factory function (default if absent); device= and requires_grad= are ignored."""
    from .scope import DtypeValue
    for k in kw:
        if k not in ("dtype", "device", "requires_grad"):
            raise fc.src.error(node, f"unsupported keyword argument '{k}'")
    d = kw.get("dtype")
    if d is None:
        return default
    if not isinstance(d, DtypeValue):
        raise fc.src.error(node, "dtype= must be a torch dtype such as torch.float64")
    return d.dtype


def _function_form(method):
    """torch.f(input, *args, **kw) from the handler of the method input.f(*args, **kw)."""
    def call(fc, b, args, kw, node):
        x = _arg(fc, args, kw, 0, "input", node)
        return method(fc, b, x, args[1:], {k: v for k, v in kw.items() if k != "input"}, node)
    return call


def _arg(fc, args, kw, pos, name, node, default=...):
    if pos < len(args):
        if name in kw:
            raise fc.src.error(node, f"'{name}' given twice")
        return args[pos]
    if name in kw:
        return kw[name]
    if default is ...:
        raise fc.src.error(node, f"missing argument '{name}'")
    return default


@torch_function("torch.clamp", "torch.clip", "Tensor.clamp", "Tensor.clip")
def _clamp(fc, b, args, kw, node):
    """torch.clamp(x, min=None, max=None): each bound as torch's (mathlib.clamp_bound; weak constants adapt)."""
    from .mathlib import clamp_bound
    x = args[0]
    lo = _arg(fc, args, kw, 1, "min", node, None)
    hi = _arg(fc, args, kw, 2, "max", node, None)
    if lo is not None:
        x = clamp_bound(fc, b, x, lo, False, node)
    if hi is not None:
        x = clamp_bound(fc, b, x, hi, True, node)
    return x


@torch_function("torch.square", "Tensor.square")
def _square(fc, b, args, kw, node):
    from ...ops.math import square
    return square(b, tensor(fc, b, args[0], node))


torch_function("torch.sum", "Tensor.sum")(_reduce(reduce.sum))
torch_function("torch.mean", "Tensor.mean")(_reduce(reduce.mean, to_float=True))
torch_function("torch.amax", "Tensor.amax")(_reduce(reduce.amax))
torch_function("torch.amin", "Tensor.amin")(_reduce(reduce.amin))
torch_function("torch.logsumexp", "Tensor.logsumexp")(_reduce(reduce.logsumexp, to_float=True))
torch_function("torch.max", "Tensor.max")(_max_or_min("max"))
torch_function("torch.min", "Tensor.min")(_max_or_min("min"))
torch_function("torch.softmax", "torch.nn.functional.softmax", "Tensor.softmax")(_softmax(False))
torch_function("torch.log_softmax", "torch.nn.functional.log_softmax", "Tensor.log_softmax")(_softmax(True))
torch_function("torch.dot", "torch.inner", "Tensor.dot")(_product(linalg.dot, "dot"))
torch_function("torch.outer", "Tensor.outer")(_product(linalg.outer, "outer"))
torch_function("torch.zeros")(_filled(0.0))
torch_function("torch.ones")(_filled(1.0))
torch_function("torch.zeros_like")(_like(0.0))
torch_function("torch.ones_like")(_like(1.0))
torch_function("torch.tril", "Tensor.tril")(_tri(True))
torch_function("torch.triu", "Tensor.triu")(_tri(False))
torch_function("torch.cat", "torch.concat")(_join(shape_ops.concatenate, "cat"))
torch_function("torch.stack")(_join(shape_ops.stack, "stack"))
torch_function("torch.reshape")(_function_form(_reshape))
torch_function("torch.unsqueeze")(_function_form(_unsqueeze))
torch_function("torch.squeeze")(_function_form(_squeeze))
torch_function("torch.transpose")(_function_form(_transpose))
torch_function("torch.permute")(_function_form(_permute))
torch_function("Tensor.t", receiver=True)(lambda fc, b, x, args, kw, node: transpose_2d(fc, b, x, node))
torch_function("Tensor.float", receiver=True)(_cast_to("f32"))
torch_function("Tensor.double", receiver=True)(_cast_to("f64"))
torch_function("Tensor.int", receiver=True)(_cast_to("i32"))
torch_function("Tensor.long", receiver=True)(_cast_to("i64"))
torch_function("Tensor.bool", receiver=True)(_cast_to("bool"))


def _scalar_method(name: str):
    """x.name(...) of a function of the scalar library (exp, relu, pow, ...): x first, the arguments plain."""
    def fn(fc, b, args, kw, node):
        from .mathlib import call_builtin
        if kw:
            raise fc.src.error(node, f".{name}() takes no keyword arguments here")
        return call_builtin(fc, b, "torch", name, [args[0], *[fc.plain(b, a) for a in args[1:]]], node)
    return fn


for _name in ("exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos", "abs", "sigmoid", "relu", "pow",
              "sign"):
    torch_function(f"Tensor.{_name}")(_scalar_method(_name))


def _library(name: str):
    """A function of the scalar library (relu, sigmoid, ...) called from a torch namespace (inplace=False, as
    F.relu takes it, is accepted: kernels never update in place)."""
    def fn(fc, b, args, kw, node):
        from .mathlib import LIBRARY
        inplace = _arg(fc, [], kw, 99, "inplace", node, Const(False)) if "inplace" in kw else Const(False)
        if not isinstance(inplace, Const) or inplace.value:
            raise fc.src.error(node, f"{name}(inplace=True) updates its input; kernels never update in place",
                               hint="drop inplace=True (the result is a new value)")
        if any(k != "inplace" for k in kw):
            raise fc.src.error(node, f"{name}() takes no keyword arguments here")
        return LIBRARY[name](fc, b, [fc.plain(b, a) for a in args], node)
    return fn


@torch_function("torch.nn.functional.linear")
def _linear(fc, b, args, kw, node):
    """F.linear(x, w, b=None) = x @ wᵀ + b."""
    x, w = _two_floats(fc, b, args[:2], node, "linear")
    y = linalg.matmul(b, x, shape_ops.swap_axes(b, w, -1, -2) if w.type.rank == 2 else w)
    bias = _arg(fc, args, kw, 2, "bias", node, None)
    return y if bias is None else b.add(*fc.unify(b, y, tensor(fc, b, bias, node), node))


@torch_function("torch.nn.functional.dropout")
def _dropout(fc, b, args, kw, node):
    """F.dropout(x, p, training=False) is x; random dropout while training is not supported."""
    training = _arg(fc, args, kw, 2, "training", node, Const(True))
    if not isinstance(training, Const) or training.value:
        raise fc.src.error(node, "F.dropout with training=True draws random numbers; kernels are deterministic",
                           hint="pass training=False (dropout is the identity at inference)")
    return tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)


for _name in ("relu", "sigmoid", "tanh"):
    torch_function(f"torch.nn.functional.{_name}")(_library(_name))
