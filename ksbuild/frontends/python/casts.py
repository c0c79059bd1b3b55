"""dtype conversions and facts: x.to(dtype), x.type(dtype), x.type_as(y), x.float(), x.double(), x.int(),
x.long(), x.bool(), x.item() and torch.finfo. Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

from ...ir.core import Atom, Lit
from .registry import torch_function
from .scope import FInfo
from .tensors import _arg, tensor


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


@torch_function("Tensor.type", receiver=True)
def _type(fc, b, x, args, kw, node):
    """x.type(dtype): a cast (x.type() without a dtype names it, which kernels have no use for)."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, 0, "dtype", node, None)
    if not isinstance(d, DtypeValue):
        raise fc.src.error(node, "x.type() needs a torch dtype such as torch.float64", hint="or use x.to(dtype)")
    x = tensor(fc, b, x, node)
    return x if x.type.dtype == d.dtype else b.convert(x, dtype=d.dtype)


@torch_function("torch.finfo")
def _finfo(fc, b, args, kw, node):
    """torch.finfo(dtype): eps, max, min, tiny, resolution of a float dtype, as constants."""
    from .scope import DtypeValue
    d = _arg(fc, args, kw, 0, "type", node, None)
    if d is None:
        return FInfo(fc.float_dtype)
    if not isinstance(d, DtypeValue) or d.dtype not in ("f16", "f32", "f64"):
        raise fc.src.error(node, "torch.finfo takes a float dtype such as torch.float32 or x.dtype")
    return FInfo(d.dtype)


torch_function("Tensor.float", receiver=True)(_cast_to("f32"))
torch_function("Tensor.double", receiver=True)(_cast_to("f64"))
torch_function("Tensor.int", receiver=True)(_cast_to("i32"))
torch_function("Tensor.long", receiver=True)(_cast_to("i64"))
torch_function("Tensor.bool", receiver=True)(_cast_to("bool"))
