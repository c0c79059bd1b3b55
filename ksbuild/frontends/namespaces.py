"""The names a kernel can call: torch.*, F.*, torch.linalg.*, torch.special.*, math.* and x.method(...).

Each table starts from tensors.py's core (reductions, creation, shapes, matmul) and every module of
torch functions adds its own through its `register`; the compiler (python.py) dispatches through the
tables here, so a new function is one entry in one module's register.
"""
from __future__ import annotations

from . import tensors, torch_basics, torch_extra, torch_losses, torch_more, torch_search
from .mathlib import scalar_names

TORCH = dict(tensors.TORCH_TENSOR)   # torch.f(...)
F = dict(tensors.F_FUNCS)            # torch.nn.functional.f(...)
LINALG: dict = {}                    # torch.linalg.f(...)
SPECIAL: dict = {}                   # torch.special.f(...)
MATH: dict = {}                      # math.* beyond the scalar library (erf, hypot, isnan, ...)
METHODS = dict(tensors.METHODS)      # x.f(...) -> the torch function of that name, with x first
SHAPE_METHODS = dict(tensors.SHAPE_METHODS)  # x.f(...) handled as (fc, b, x, args, kw, node)

torch_more.register(TORCH, F, LINALG, SHAPE_METHODS, MATH, SPECIAL)
torch_basics.register(TORCH, F, SHAPE_METHODS)
torch_search.register(TORCH, SHAPE_METHODS)
torch_losses.register(F)
torch_extra.register(TORCH, LINALG, SHAPE_METHODS, MATH)

NAMESPACES = {"torch": TORCH, "F": F, "linalg": LINALG, "nn": {}, "special": SPECIAL, "math": MATH}


def supported_names(module: str) -> list[str]:
    """Every function name the frontend accepts in a namespace ('builtin', 'math', 'torch', 'F', ...): the
    scalar library's and this module's tables."""
    return sorted(scalar_names(module) | set(NAMESPACES.get(module, {})))
