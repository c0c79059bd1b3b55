"""The names a kernel can call: torch.*, F.*, torch.linalg.*, torch.special.*, math.* and x.method(...).

Every module of torch functions registers its handlers with `@torch_function` (registry.py) when it is
imported; importing them here fills the registry, and the compiler (compiler.py) looks names up through
`functions` here, so a new function is one decorated handler.
"""
from __future__ import annotations

import functools

# the modules of torch functions, by domain (ops/'s names); each registers its handlers when imported
from . import activations, casts, create, index, linalg, losses, math, nn, reduce, search, shape  # noqa: F401
from .mathlib import scalar_names
from .registry import REGISTRY
from .registry import functions as _registered

NAMESPACE_NAMES = {"torch": "torch", "F": "torch.nn.functional", "linalg": "torch.linalg", "nn": "torch.nn",
                   "special": "torch.special", "math": "math", "Tensor": "Tensor"}
"""The compiler's namespace keys (expressions.py's SUBMODULES) -> the prefixes of registered names."""


@functools.cache
def functions(namespace: str) -> dict:
    """The handlers of a namespace key ('torch', 'F', 'linalg', 'special', 'math', 'nn', 'Tensor' for methods)."""
    return _registered(NAMESPACE_NAMES[namespace]) if namespace in NAMESPACE_NAMES else {}


def supported_names(module: str) -> list[str]:
    """Every function name the frontend accepts in a namespace ('builtin', 'math', 'torch', 'F', ...): the
    scalar library's and the registry's."""
    return sorted(scalar_names(module) | set(functions(module)))


__all__ = ["REGISTRY", "functions", "supported_names"]
