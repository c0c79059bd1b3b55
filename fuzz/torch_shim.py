"""Run a generated kernel's Python source in torch: math, torch and the builtins min/max/abs/pow that accept
Python numbers and 0-d tensors alike, as ksbuild's kernel language does (math.sqrt of a tensor keeps its
gradient; torch.maximum(x, 0.5) takes the number; min(a, b) of numbers is a tensor, so a later 0.0 ** -1 is
inf as in ksbuild, not Python's ZeroDivisionError)."""
from __future__ import annotations

import builtins
import types

import torch
import torch.nn.functional as F

MATH = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "log1p": torch.log1p, "expm1": torch.expm1,
        "tanh": torch.tanh, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "fabs": torch.abs,
        "floor": torch.floor, "erf": torch.erf, "atan2": torch.atan2, "pow": torch.pow, "hypot": torch.hypot}


def tensor(a):
    return a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=torch.float64)


def _numbers_as_tensors(fn):
    def call(*args, **kw):
        return fn(*[tensor(a) if isinstance(a, float) else a for a in args], **kw)
    return call


class _Namespace(types.SimpleNamespace):
    pass


def namespace() -> dict:
    """The globals a generated kernel runs with in the oracle."""
    math = _Namespace(**{k: _numbers_as_tensors(v) for k, v in MATH.items()})
    wrapped = {k: _numbers_as_tensors(getattr(torch, k)) for k in ("maximum", "minimum", "sigmoid", "relu",
                                                                    "rsqrt", "clamp", "atan2", "hypot")}
    torch_ns = _Namespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    for k, v in wrapped.items():
        setattr(torch_ns, k, v)
    return {"math": math, "torch": torch_ns, "F": F,
            "min": lambda a, b: tensor(builtins.min(a, b)), "max": lambda a, b: tensor(builtins.max(a, b)),
            "abs": lambda a: torch.abs(tensor(a)), "pow": lambda a, b: torch.pow(tensor(a), b)}


def load(source: str) -> dict:
    """The functions of `source`, run with namespace()'s globals."""
    g = namespace()
    exec(compile(source, "<fuzz kernel>", "exec", dont_inherit=True), g)
    g.update(namespace())  # the source's own `import math` / `import torch` rebound them
    for fn in list(g.values()):
        if isinstance(fn, types.FunctionType) and fn.__defaults__:
            # a float default is a float64 as in ksbuild: (-1.0) ** 0.5 is nan, not Python's complex number
            fn.__defaults__ = tuple(tensor(d) if isinstance(d, float) else d for d in fn.__defaults__)
    return g


class NonFinite(torch.overrides.TorchFunctionMode):
    """Records whether any torch operation (of the kernel's own forward computation, where it is entered)
    made an inf or nan: a derivative at such a point meets the documented limit of docs/ad-correctness.md
    (an infinite value times a zero in the primal program)."""

    def __init__(self):
        super().__init__()
        self.seen = False  # an operation made an inf or nan
        self.result_nonfinite = False  # the kernel's own result was inf or nan (somewhere: a lane, a point)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.seen:
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all()):
                    self.seen = True
        return out
