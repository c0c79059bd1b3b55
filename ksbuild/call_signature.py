"""The signature a dev-loop kernel annotated with torch.Tensor takes from the arguments of a call.

`def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor` says nothing of dtypes and shapes, which a build
needs. The dev loop types every parameter by its argument: a float tensor or array by the build's dtype, an
integer or bool one by its own, its shape by dims named in order of first appearance (equal sizes share a
name, so `x + y` of two [4] arguments is one dim; a size of 1 stays 1, so broadcasting works), a Python float,
int or bool as a scalar. One build serves every call with the same ranks, dtypes and pattern of equal sizes.
"""
from __future__ import annotations

import inspect
import sys
from typing import Callable

from .errors import KsbuildError

_SHORT = {"float32": "f32", "float64": "f64"}
_OTHER = {"int64": "i64", "int32": "i32", "bool": "bool"}


def needs_call_signature(fn: Callable) -> bool:
    """Whether a parameter of fn is annotated torch.Tensor (or Tensor, or either as a string)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(_is_tensor_class(p.annotation) for p in params)


def _is_tensor_class(annotation) -> bool:
    if isinstance(annotation, str):
        return annotation.strip() in ("torch.Tensor", "Tensor")
    torch = sys.modules.get("torch")
    return torch is not None and annotation is torch.Tensor


def call_signature(fn: Callable, args, dtype: str, mapped: tuple) -> str | None:
    """'(x: f32[d0, d1], a: f32)': fn's parameters typed by the arguments of a call (`mapped`: whether an outer
    vmap maps each, its leading axis then left out); None when fn needs no signature (see needs_call_signature)."""
    if not needs_call_signature(fn):
        return None
    names = list(inspect.signature(fn).parameters)
    if len(args) != len(names):
        raise KsbuildError(f"{fn.__name__} takes {len(names)} arguments, {len(args)} given")
    dims: dict[int, str] = {}
    parts = [f"{n}: {_arg_type(a, dtype, m, dims)}" for n, a, m in zip(names, args, mapped)]
    return "(" + ", ".join(parts) + ")"


def _arg_type(a, dtype: str, mapped: bool, dims: dict[int, str]) -> str:
    """The signature type of one argument (dims: the names given to sizes so far)."""
    if isinstance(a, bool):
        return "bool"
    if isinstance(a, (int, float)):
        return "i64" if isinstance(a, int) else _SHORT[dtype]
    kind = str(getattr(a, "dtype", "")).removeprefix("torch.")
    base = _SHORT[dtype] if kind in _SHORT else _OTHER.get(kind)
    if base is None or not hasattr(a, "shape"):
        raise KsbuildError(f"an argument of type {type(a).__name__} ({kind or 'no dtype'}) cannot be passed to a "
                           "kernel annotated with torch.Tensor", hint="pass float, int64, int32 or bool tensors or "
                                                                      "arrays, or Python numbers")
    shape = tuple(int(s) for s in a.shape)[1 if mapped else 0:]
    named = [str(s) if s == 1 else dims.setdefault(s, f"d{len(dims)}") for s in shape]
    return f"{base}[{', '.join(named)}]" if named else base
