"""The numpy reference interpreter: the oracle for every pass, transformation and compiled kernel."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import KsbuildError
from .core import Atom, Func, Lit, Var
from .types import Type, numpy_dtype


def bind_dims(types: Sequence[Type], args: Sequence[np.ndarray], env: dict[str, int] | None = None) -> dict[str, int]:
    """Values of symbolic dims from argument shapes; a KsbuildError on a mismatch."""
    env = dict(env or {})
    for i, (t, a) in enumerate(zip(types, args)):
        shape = np.shape(a)
        if len(shape) != t.rank:
            raise KsbuildError(f"argument {i} should be {t}, got an array of shape {list(shape)}")
        for d, s in zip(t.shape, shape):
            if isinstance(d, str):
                if env.setdefault(d, s) != s:
                    raise KsbuildError(f"argument {i}: dim {d} is {env[d]} elsewhere but {s} here")
            elif d != s:
                raise KsbuildError(f"argument {i} should be {t}, got shape {list(shape)}")
    return env


def as_value(x, t: Type) -> np.ndarray:
    return np.asarray(x, dtype=numpy_dtype(t.dtype))


def eval_func(f: Func, args: Sequence, env: dict[str, int] | None = None) -> list[np.ndarray]:
    """Run f on numpy values; `env` gives symbolic dims not visible in the argument shapes."""
    vals = [as_value(a, p.type) for a, p in zip(args, f.params)]
    env = bind_dims(f.in_types, vals, env)
    store: dict[Var, np.ndarray] = dict(zip(f.params, vals))

    def read(a: Atom) -> np.ndarray:
        if isinstance(a, Lit):
            from .types import concrete_shape
            return np.full(concrete_shape(a.type, env), a.value, dtype=numpy_dtype(a.type.dtype))
        return store[a]

    with np.errstate(all="ignore"):
        for eqn in f.eqns:
            outs = eqn.prim.eval(*[read(a) for a in eqn.ins], **eqn.params, env=env)
            for v, o in zip(eqn.outs, outs):
                store[v] = as_value(o, v.type)
    return [read(r) for r in f.results]
