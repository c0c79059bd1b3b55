"""The one registry of the torch functions a kernel can call, filled by the `@torch_function` decorator.

    @torch_function("torch.sort", "Tensor.sort")
    def _sort(fc, b, args, kw, node): ...

A name is `torch.f`, `torch.nn.functional.f`, `torch.linalg.f`, `torch.special.f`, `math.f` (beyond the
scalar library of mathlib.py) or `Tensor.f` (the method x.f(...), called with x as the first argument).
Every handler is called as handler(fc, b, args, kw, node); one that takes the tensor of a method apart,
(fc, b, x, args, kw, node), is registered with receiver=True. A name registered twice is an error.
"""
from __future__ import annotations

from typing import Callable

REGISTRY: dict[str, Callable] = {}
"""Qualified name -> handler(fc, b, args, kw, node)."""


def torch_function(*names: str, receiver: bool = False) -> Callable:
    """Register the decorated handler under each of `names` (see the module docstring)."""
    def register(fn: Callable) -> Callable:
        handler = _with_receiver(fn) if receiver else fn
        for name in names:
            if name in REGISTRY:
                raise ValueError(f"the torch function {name} is registered twice")
            REGISTRY[name] = handler
        return fn
    return register


def _with_receiver(method: Callable) -> Callable:
    """A method handler (fc, b, x, args, kw, node) as a function handler with x first in args."""
    return lambda fc, b, args, kw, node: method(fc, b, args[0], args[1:], kw, node)


def functions(namespace: str) -> dict[str, Callable]:
    """The handlers of one namespace ('torch', 'torch.nn.functional', 'Tensor', ...) by their short names."""
    return {name.rpartition(".")[2]: fn for name, fn in REGISTRY.items() if name.rpartition(".")[0] == namespace}
