"""Tensor values of the Python frontend: annotations, dims as values, and reading a torch call's arguments.

The torch-function modules (shape.py, create.py, math.py, activations.py, reduce.py, linalg.py, index.py, nn.py,
casts.py, search.py, losses.py) only parse torch's calling conventions (positional and keyword arguments, dims,
`keepdim`, weak Python constants) and call the shared op library (`ksbuild/ops`), where every operation is
decomposed into core prims. Their handlers take the compiler (`fc`), the builder, evaluated arguments and keyword
arguments, and the AST node for errors; the helpers they share to read those arguments live here.
"""
from __future__ import annotations

import ast
import re

from ...ir.core import Atom, Lit
from ...ir.types import DTYPES, Dim, Type, canonical_dim, dim_add, dim_floordiv, dim_mul, dim_sub
from ...ops.shape import move_axis0  # noqa: F401  (used by loops.py)
from .scope import Const, SymDim, dim_value

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


def _two_floats(fc, b, args, node, name):
    if len(args) != 2:
        raise fc.src.error(node, f"{name} takes two tensors")
    x, y = (tensor(fc, b, a, node) for a in args)
    return fc.unify(b, x, y, node)


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


def _x(fc, b, args, kw, node, name="input"):
    return tensor(fc, b, _arg(fc, args, kw, 0, name, node), node)


def _dim(fc, args, kw, pos, node, rank, default=None, name="dim"):
    d = _arg(fc, args, kw, pos, name, node, default)
    return None if d is None else norm_axis(fc, int_const(fc, d, node, "dim"), rank, node)


def _c(x: Atom, v: float) -> Lit:
    return Lit(float(v), Type(x.type.dtype))


def _float_kw(fc, args, kw, pos, name, node, default: float) -> float:
    v = _arg(fc, args, kw, pos, name, node, Const(default))
    if not isinstance(v, Const):
        raise fc.src.error(node, f"'{name}' must be a number literal here")
    return float(v.value)


def _count(b, n, dtype: str) -> Atom:
    if isinstance(n, int):
        return Lit(float(n), Type(dtype))
    return b.convert(b.dim_size(dim=n), dtype=dtype)


def _i64(b, idx: Atom) -> Atom:
    return idx if idx.type.dtype == "i64" else b.convert(idx, dtype="i64")


def _method(fn):
    """A torch function f(x, ...) as the method x.f(...)."""
    return lambda fc, b, x, args, kw, node: fn(fc, b, [x, *args], kw, node)


def _ints(fc, v, node, what: str) -> list[int]:
    vals = v if isinstance(v, (tuple, list)) else [v]
    return [int_const(fc, a, node, what) for a in vals]
