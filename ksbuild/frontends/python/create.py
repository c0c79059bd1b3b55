"""torch functions that create tensors (ops/create.py): torch.zeros, ones, full, the *_like and x.new_*
forms, arange, linspace, logspace, eye, tril, triu and torch.tensor of literals. Each handler is registered with
`@torch_function` (registry.py)."""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Atom
from ...ir.types import numpy_dtype
from ...ops import create
from ...ops import shape as shape_ops
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _float_kw, as_dim, int_const, shape_args, tensor


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


@torch_function("Tensor.new_tensor", receiver=True)
def _new_tensor(fc, b, x, args, kw, node):
    """x.new_tensor(data): torch.tensor(data) of x's dtype (unless dtype= says otherwise)."""
    from .scope import DtypeValue
    x = tensor(fc, b, x, node)
    given = dict(kw)
    if "dtype" not in given:
        given["dtype"] = DtypeValue(x.type.dtype)
    return tensor_literal(fc, b, list(args), given, node)


@torch_function("torch.logspace")
def _logspace(fc, b, args, kw, node):
    """torch.logspace(start, end, steps, base=10.0) of literals: base ** linspace(start, end, steps)."""
    import numpy as np

    from ...ops import create
    start, end = (_arg(fc, args, kw, i, n, node) for i, n in ((0, "start"), (1, "end")))
    steps = int_const(fc, _arg(fc, args, kw, 2, "steps", node), node, "steps")
    base = _float_kw(fc, args, kw, 3, "base", node, 10.0)
    if not (isinstance(start, Const) and isinstance(end, Const)):
        raise fc.src.error(node, "torch.logspace needs start and end known when the kernel is compiled")
    dtype = np.float32 if fc.float_dtype == "f32" else np.float64
    return create.array(b, np.power(base, np.linspace(float(start.value), float(end.value), steps)).astype(dtype))


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


torch_function("torch.zeros")(_filled(0.0))
torch_function("torch.ones")(_filled(1.0))
torch_function("torch.zeros_like")(_like(0.0))
torch_function("torch.ones_like")(_like(1.0))
torch_function("torch.tril", "Tensor.tril")(_tri(True))
torch_function("torch.triu", "Tensor.triu")(_tri(False))
torch_function("torch.empty_like")(_like(0.0))
torch_function("Tensor.new_zeros", receiver=True)(_new_full(0))
torch_function("Tensor.new_ones", receiver=True)(_new_full(1))
torch_function("Tensor.new_full", receiver=True)(_new_full(None))
