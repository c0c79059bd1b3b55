"""Tensor operations of the Python frontend: annotations, indexing, torch functions and methods.

Every torch operation is a decomposition into the core prims (einsum, reduce_*, index, slice,
pad, reshape, broadcast_to, transpose, iota, elementwise). Functions here take the compiler
(`fc`), the builder, evaluated arguments and keyword arguments, and the AST node for errors.
"""
from __future__ import annotations

import ast
import re

from ..ir.core import Atom, Lit
from ..ir.types import DTYPES, Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub, promote
from .scope import Const, SymDim, dim_value

_TYPE_TEXT = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\[(.*)\])?\s*$")


def parse_type_text(text: str, float_dtype: str) -> Type | None:
    """'f32[n, 3]', 'float[n]', 'i64' -> Type; None if the text is not a type."""
    m = _TYPE_TEXT.match(text)
    if not m:
        return None
    base = {"float": float_dtype, "int": "i64", "bool": "bool"}.get(m.group(1), m.group(1))
    if base not in DTYPES:
        return None
    if m.group(2) is None:
        return Type(base)
    dims: list[Dim] = []
    for part in m.group(2).split(","):
        part = part.strip()
        if part.isdigit() and int(part) > 0:
            dims.append(int(part))
        elif part.isidentifier():
            dims.append(part)
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
    if v is None:
        return tuple(range(rank))
    vals = v if isinstance(v, (tuple, list)) else (v,)
    return tuple(sorted(norm_axis(fc, int_const(fc, a, node, "dim"), rank, node) for a in vals))


def keep_dims(b, y: Atom, x: Atom, axes) -> Atom:
    """Reinsert reduced axes as size 1 (keepdim=True)."""
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
    return b.reshape(y, shape=shape)


def expand_back(b, y: Atom, x: Atom, axes) -> Atom:
    """A reduction result broadcast back over the reduced axes of x."""
    return b.broadcast_to(keep_dims(b, y, x, axes), shape=x.type.shape)


def size_of(fc, b, x: Atom, axes, dtype: str) -> Atom:
    """The number of elements over axes, as a scalar of dtype."""
    n: Dim = 1
    for a in axes:
        n = dim_mul(n, x.type.shape[a])
    if isinstance(n, int):
        return Lit(float(n), Type(dtype))
    return b.convert(b.dim_size(dim=n), dtype=dtype)


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
        i = int_const(fc, k, index_node, "a tuple index")
        if not -len(x) <= i < len(x):
            raise fc.src.error(index_node, f"index {i} out of range for a tuple of {len(x)}")
        return x[i]
    x = tensor(fc, b, x, node)
    if x.type.rank == 0:
        raise fc.src.error(node, f"cannot index a scalar value of type {x.type}")
    items = index_node.elts if isinstance(index_node, ast.Tuple) else [index_node]
    if sum(1 for it in items if not _is_none(it)) > x.type.rank:
        raise fc.src.error(node, f"too many indices for {x.type}")
    axis = 0
    for it in items:
        if _is_none(it):
            x = b.reshape(x, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:])
            axis += 1
        elif isinstance(it, ast.Slice):
            x = _slice(fc, b, scope, x, axis, it)
            axis += 1
        else:
            x = _take(fc, b, x, axis, fc.expr(b, scope, it), it)
    return x


def _is_none(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _bound(fc, b, scope, e, n: Dim, default: Dim) -> Dim:
    if e is None:
        return default
    d = as_dim(fc, fc.expr(b, scope, e), e)
    if isinstance(d, int) and d < 0:
        d = dim_add(n, d)
    if isinstance(d, int) and isinstance(n, int):
        d = min(max(d, 0), n)
    return d


def _slice(fc, b, scope, x: Atom, axis: int, s: ast.Slice) -> Atom:
    if s.step is not None:
        step = fc.expr(b, scope, s.step)
        if not (isinstance(step, Const) and step.value == 1):
            raise fc.src.error(s.step, "only slices with step 1 are supported")
    n = x.type.shape[axis]
    start, stop = _bound(fc, b, scope, s.lower, n, 0), _bound(fc, b, scope, s.upper, n, n)
    if start == 0 and stop == n:
        return x
    return b.slice(x, axis=axis, start=start, stop=stop)


def _take(fc, b, x: Atom, axis: int, i, node) -> Atom:
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
    elif isinstance(i, (tuple, list)) or isinstance(i, Const) or i.type.dtype not in ("i32", "i64") or i.type.rank:
        raise fc.src.error(node, "an index must be an integer scalar (tensor indexing is not supported)",
                           hint="use int(...) for a computed index; slices use a:b")
    return b.index(x, i, axis=axis)


# ---- reductions ----------------------------------------------------------------------------------

def _reduce(prim: str, mean: bool = False):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        if prim != "reduce_sum" and x.type.dtype == "bool":
            raise fc.src.error(node, "max/min of a bool tensor is not supported")
        if x.type.dtype == "bool":
            x = b.convert(x, dtype="i64")
        dim = _arg(fc, args, kw, 1, "dim", node, None)
        keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
        axes = axes_arg(fc, dim, x.type.rank, node)
        if mean and not x.type.is_float:
            x = b.convert(x, dtype=fc.float_dtype)
        y = b.bind(fc.prim(prim), [x], {"axes": axes})[0] if axes else x
        if mean:
            y = b.div(y, size_of(fc, b, x, axes, y.type.dtype))
        return keep_dims(b, y, x, axes) if keep.value else y
    return fn


def _logsumexp(fc, b, args, kw, node):
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node), x.type.rank, node)
    keep = _arg(fc, args, kw, 2, "keepdim", node, Const(False))
    y = logsumexp(b, x, axes)
    return keep_dims(b, y, x, axes) if keep.value else y


def logsumexp(b, x: Atom, axes) -> Atom:
    """log Σ exp(x) = m + log Σ exp(x − m) with m = max x held constant under differentiation."""
    m = b.reduce_max(b.stop_gradient(x), axes=axes)
    s = b.reduce_sum(b.exp(b.sub(x, expand_back(b, m, x, axes))), axes=axes)
    return b.add(b.log(s), m)


def _softmax(log: bool):
    def fn(fc, b, args, kw, node):
        x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        axes = axes_arg(fc, _arg(fc, args, kw, 1, "dim", node), x.type.rank, node)
        lse = expand_back(b, logsumexp(b, x, axes), x, axes)
        z = b.sub(x, lse)
        return z if log else b.exp(z)
    return fn


def _max_or_min(kind: str):
    """torch.max(x) (a full reduction) or torch.max(a, b) (elementwise)."""
    def fn(fc, b, args, kw, node):
        if len(args) == 2 and not kw and not is_dimlike(args[1]):
            from .mathlib import LIBRARY
            return LIBRARY["maximum" if kind == "max" else "minimum"](fc, b, args, node)
        if len(args) > 1 or kw:
            raise fc.src.error(node, f"torch.{kind}(x, dim) returns indices and is not supported",
                               hint=f"use torch.a{kind}(x, dim=...) for the values")
        return _reduce(f"reduce_{kind}")(fc, b, args, kw, node)
    return fn


# ---- products ------------------------------------------------------------------------------------

def _matmul(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args, node, "matmul")
    return matmul(fc, b, x, y, node)


def matmul(fc, b, x: Atom, y: Atom, node) -> Atom:
    rx, ry = x.type.rank, y.type.rank
    specs = {(1, 1): "i,i->", (2, 1): "ij,j->i", (1, 2): "j,jk->k", (2, 2): "ij,jk->ik",
             (3, 3): "bij,bjk->bik", (3, 2): "bij,jk->bik", (3, 1): "bij,j->bi", (2, 3): "ij,bjk->bik"}
    spec = specs.get((rx, ry))
    if spec is None:
        raise fc.src.error(node, f"matmul of {x.type} and {y.type} is not supported (ranks 1-3)")
    return einsum(fc, b, spec, x, y, node)


def einsum(fc, b, spec: str, x: Atom, y: Atom, node) -> Atom:
    lhs, _, out = spec.replace(" ", "").partition("->")
    parts = lhs.split(",")
    if len(parts) != 2 or "..." in spec or "->" not in spec.replace(" ", ""):
        raise fc.src.error(node, f"einsum '{spec}': two operands and an explicit '->' output are supported")
    a, c = parts
    for letters, t in ((a, x.type), (c, y.type)):
        if len(letters) != t.rank:
            raise fc.src.error(node, f"einsum '{spec}': '{letters}' does not match an operand of type {t}")
    x, y = _broadcast_unit_axes(b, a, x, c, y)
    return b.einsum(x, y, spec=f"{a},{c}->{out}")


def _broadcast_unit_axes(b, a, x, c, y):
    """Size-1 axes broadcast against the other operand's size for the same letter (as torch does)."""
    sizes = {}
    for letters, t in ((a, x.type), (c, y.type)):
        for ch, d in zip(letters, t.shape):
            if d != 1:
                sizes.setdefault(ch, d)
    def fix(letters, v):
        shape = tuple(sizes.get(ch, 1) if d == 1 else d for ch, d in zip(letters, v.type.shape))
        return v if shape == v.type.shape else b.broadcast_to(v, shape=shape)
    return fix(a, x), fix(c, y)


def _einsum_call(fc, b, args, kw, node):
    if len(args) != 3 or not isinstance(args[0], str):
        raise fc.src.error(node, "torch.einsum takes a spec string and exactly two tensors")
    x, y = _two_floats(fc, b, args[1:], node, "einsum")
    return einsum(fc, b, args[0], x, y, node)


def _dot(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args, node, "dot")
    if x.type.rank != 1 or y.type.rank != 1:
        raise fc.src.error(node, f"torch.dot needs two vectors, got {x.type} and {y.type}")
    return einsum(fc, b, "i,i->", x, y, node)


def _outer(fc, b, args, kw, node):
    x, y = _two_floats(fc, b, args, node, "outer")
    if x.type.rank != 1 or y.type.rank != 1:
        raise fc.src.error(node, f"torch.outer needs two vectors, got {x.type} and {y.type}")
    return einsum(fc, b, "i,j->ij", x, y, node)


def _two_floats(fc, b, args, node, name):
    if len(args) != 2:
        raise fc.src.error(node, f"{name} takes two tensors")
    x, y = (tensor(fc, b, a, node) for a in args)
    return fc.unify(b, x, y, node)


# ---- shapes --------------------------------------------------------------------------------------

def _reshape(fc, b, x, args, node) -> Atom:
    x = tensor(fc, b, x, node)
    dims = list(shape_args(fc, args, node))
    if dims.count(-1) > 1:
        raise fc.src.error(node, "only one -1 is allowed in a shape")
    if -1 in dims:
        rest = list(x.type.shape)
        for d in dims:
            if d != -1:
                if d in rest:
                    rest.remove(d)
                elif isinstance(d, int) and d == 1:
                    continue
                else:
                    rest = None
                    break
        if rest is None:
            raise fc.src.error(node, f"cannot infer the -1 in reshape of {x.type} to {dims}",
                               hint="give every dim explicitly")
        n: Dim = 1
        for d in rest:
            n = dim_mul(n, d)
        dims[dims.index(-1)] = n
    if _numel(dims) != _numel(x.type.shape) and all(isinstance(d, int) for d in dims + list(x.type.shape)):
        raise fc.src.error(node, f"cannot reshape {x.type} to {dims}")
    return b.reshape(x, shape=tuple(dims))


def _numel(dims):
    n = 1
    for d in dims:
        n = dim_mul(n, d)
    return n


def _unsqueeze(fc, b, x, args, node):
    x = tensor(fc, b, x, node)
    a = int_const(fc, args[0], node, "dim") if args else 0
    a = a + x.type.rank + 1 if a < 0 else a
    return b.reshape(x, shape=x.type.shape[:a] + (1,) + x.type.shape[a:])


def _squeeze(fc, b, x, args, node):
    x = tensor(fc, b, x, node)
    if args:
        a = norm_axis(fc, int_const(fc, args[0], node, "dim"), x.type.rank, node)
        if x.type.shape[a] != 1:
            return x
        return b.reshape(x, shape=x.type.shape[:a] + x.type.shape[a + 1:])
    return b.reshape(x, shape=tuple(d for d in x.type.shape if d != 1))


def _transpose(fc, b, x, args, node):
    x = tensor(fc, b, x, node)
    if len(args) != 2:
        raise fc.src.error(node, "transpose takes two dims")
    i, j = (norm_axis(fc, int_const(fc, a, node, "dim"), x.type.rank, node) for a in args)
    perm = list(range(x.type.rank))
    perm[i], perm[j] = perm[j], perm[i]
    return b.transpose(x, perm=tuple(perm))


def _permute(fc, b, x, args, node):
    x = tensor(fc, b, x, node)
    vals = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    perm = tuple(norm_axis(fc, int_const(fc, a, node, "dim"), x.type.rank, node) for a in vals)
    return b.transpose(x, perm=perm)


def transpose_2d(fc, b, x, node):
    x = tensor(fc, b, x, node)
    if x.type.rank != 2:
        raise fc.src.error(node, f".T is supported on matrices, got {x.type}", hint="use permute(...)")
    return b.transpose(x, perm=(1, 0))


# ---- construction ------------------------------------------------------------------------------

def _filled(value):
    def fn(fc, b, args, kw, node):
        _no_dtype(fc, kw, node)
        return Lit(value, Type(fc.float_dtype, shape_args(fc, args, node)))
    return fn


def _full(fc, b, args, kw, node):
    _no_dtype(fc, kw, node)
    if len(args) != 2:
        raise fc.src.error(node, "torch.full takes a shape and a value")
    shape = shape_args(fc, [args[0]], node)
    v = args[1]
    if isinstance(v, Const):
        return Lit(float(v.value), Type(fc.float_dtype, shape))
    v = float_tensor(fc, b, v, node)
    return b.broadcast_to(v, shape=shape)


def _like(value):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, args[0], node)
        return Lit(value, x.type)
    return fn


def _arange(fc, b, args, kw, node):
    _no_dtype(fc, kw, node)
    if len(args) == 1:
        start, stop = Const(0), args[0]
    elif len(args) == 2:
        start, stop = args
    else:
        raise fc.src.error(node, "torch.arange(n) or torch.arange(start, stop) (step 1) is supported")
    lo, hi = as_dim(fc, start, node), as_dim(fc, stop, node)
    out = b.iota(shape=(dim_sub(hi, lo),), axis=0, dtype="i64")
    return out if lo == 0 else b.add(out, Lit(lo, Type("i64")) if isinstance(lo, int) else b.dim_size(dim=lo))


def _eye(fc, b, args, kw, node):
    _no_dtype(fc, kw, node)
    n = as_dim(fc, args[0], node)
    m = as_dim(fc, args[1], node) if len(args) > 1 else n
    i = b.iota(shape=(n, m), axis=0, dtype="i64")
    j = b.iota(shape=(n, m), axis=1, dtype="i64")
    return b.convert(b.eq(i, j), dtype=fc.float_dtype)


def _tri(lower: bool):
    def fn(fc, b, args, kw, node):
        x = tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
        k = int_const(fc, _arg(fc, args, kw, 1, "diagonal", node, Const(0)), node, "diagonal")
        if x.type.rank != 2:
            raise fc.src.error(node, f"tril/triu of {x.type} is not supported (matrices only)")
        i = b.iota(shape=x.type.shape, axis=0, dtype="i64")
        j = b.iota(shape=x.type.shape, axis=1, dtype="i64")
        shifted = b.add(i, Lit(k, Type("i64"))) if k else i
        keep = b.ge(shifted, j) if lower else b.le(shifted, j)
        return b.select(keep, x, Lit(0, x.type))
    return fn


def _tensor_list(fc, b, args, kw, node, name) -> list[Atom]:
    """The list argument of torch.cat / torch.stack, as atoms."""
    items = _arg(fc, args, kw, 0, "tensors", node)
    if not isinstance(items, (list, tuple)) or not items:
        raise fc.src.error(node, f"torch.{name} takes a non-empty list of tensors")
    return [tensor(fc, b, v, node) for v in items]


def _cat(fc, b, args, kw, node):
    xs = _tensor_list(fc, b, args, kw, node, "cat")
    axis = norm_axis(fc, int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(0)), node, "dim"),
                     xs[0].type.rank, node)
    return concatenate(fc, b, xs, axis, node)


def concatenate(fc, b, xs, axis, node):
    dtype = xs[0].type.dtype
    for x in xs:
        dtype = promote(dtype, x.type.dtype)
    xs = [x if x.type.dtype == dtype else b.convert(x, dtype=dtype) for x in xs]
    total: Dim = 0
    for x in xs:
        other = [d for i, d in enumerate(x.type.shape) if i != axis]
        first = [d for i, d in enumerate(xs[0].type.shape) if i != axis]
        if x.type.rank != xs[0].type.rank or other != first:
            raise fc.src.error(node, f"cannot concatenate {xs[0].type} and {x.type} along dim {axis}")
        total = dim_add(total, x.type.shape[axis])
    if len(xs) == 1:
        return xs[0]
    out, lo = None, 0
    for x in xs:
        n = x.type.shape[axis]
        padded = b.pad(x, axis=axis, lo=lo, hi=dim_sub(total, dim_add(lo, n)))
        out = padded if out is None else b.add(out, padded)
        lo = dim_add(lo, n)
    return out


def _stack(fc, b, args, kw, node):
    xs = _tensor_list(fc, b, args, kw, node, "stack")
    axis = int_const(fc, _arg(fc, args, kw, 1, "dim", node, Const(0)), node, "dim")
    axis = axis + xs[0].type.rank + 1 if axis < 0 else axis
    xs = [b.reshape(x, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:]) for x in xs]
    return concatenate(fc, b, xs, axis, node)


def move_axis0(b, x: Atom, axis: int) -> Atom:
    """A stacked result (new axis 0) moved to position `axis` (torch.stack(..., dim=axis))."""
    if axis == 0:
        return x
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, x.type.rank))
    return b.transpose(x, perm=tuple(perm))


def _no_dtype(fc, kw, node):
    for k in kw:
        if k not in ("dtype", "device", "requires_grad"):
            raise fc.src.error(node, f"unsupported keyword argument '{k}'")


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


def _elementwise_kw(name):
    """A scalar library function (exp, where, ...) reused for tensors; keywords min/max for clamp."""
    def fn(fc, b, args, kw, node):
        from .mathlib import LIBRARY
        if name == "clamp":
            x = args[0]
            lo = _arg(fc, args, kw, 1, "min", node, None)
            hi = _arg(fc, args, kw, 2, "max", node, None)
            if lo is not None:
                x = LIBRARY["maximum"](fc, b, [x, lo], node)
            if hi is not None:
                x = LIBRARY["minimum"](fc, b, [x, hi], node)
            return x
        if kw:
            raise fc.src.error(node, f"{name}() takes no keyword arguments here")
        return LIBRARY[name](fc, b, args, node)
    return fn


def _square(fc, b, args, kw, node):
    x = tensor(fc, b, args[0], node)
    return b.ipow(x, n=2)


TORCH_TENSOR = {
    "sum": _reduce("reduce_sum"), "mean": _reduce("reduce_sum", mean=True),
    "amax": _reduce("reduce_max"), "amin": _reduce("reduce_min"),
    "max": _max_or_min("max"), "min": _max_or_min("min"),
    "logsumexp": _logsumexp, "softmax": _softmax(False), "log_softmax": _softmax(True),
    "matmul": _matmul, "mm": _matmul, "mv": _matmul, "bmm": _matmul, "dot": _dot, "inner": _dot,
    "outer": _outer, "einsum": _einsum_call, "square": _square,
    "zeros": _filled(0.0), "ones": _filled(1.0), "full": _full, "zeros_like": _like(0.0), "ones_like": _like(1.0),
    "arange": _arange, "eye": _eye, "tril": _tri(True), "triu": _tri(False),
    "cat": _cat, "concat": _cat, "stack": _stack, "clamp": _elementwise_kw("clamp"), "clip": _elementwise_kw("clamp"),
    "reshape": lambda fc, b, args, kw, node: _reshape(fc, b, args[0], args[1:], node),
    "unsqueeze": lambda fc, b, args, kw, node: _unsqueeze(fc, b, args[0], args[1:], node),
    "squeeze": lambda fc, b, args, kw, node: _squeeze(fc, b, args[0], args[1:], node),
    "transpose": lambda fc, b, args, kw, node: _transpose(fc, b, args[0], args[1:], node),
    "permute": lambda fc, b, args, kw, node: _permute(fc, b, args[0], args[1:], node),
}

# x.method(...) -> the torch function with x first
METHODS = {
    "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "max": "max", "min": "min",
    "logsumexp": "logsumexp", "softmax": "softmax", "log_softmax": "log_softmax",
    "matmul": "matmul", "dot": "dot", "outer": "outer", "clamp": "clamp", "clip": "clamp", "square": "square",
    "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt", "tanh": "tanh",
    "sin": "sin", "cos": "cos", "abs": "abs", "sigmoid": "sigmoid", "relu": "relu", "pow": "pow",
    "tril": "tril", "triu": "triu",
}
SHAPE_METHODS = {"reshape": _reshape, "view": _reshape, "unsqueeze": _unsqueeze, "squeeze": _squeeze,
                 "transpose": _transpose, "permute": _permute}
