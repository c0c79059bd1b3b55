"""External C functions (ksbuild.extern, Knossos's edef): a scalar function ksbuild calls but cannot see.

extern_call[c_name, name, file, sources, result](*args) -> out
    elementwise: out[i] = c_name(args[0][i], ...), one call per element (the C function is opaque to the C++
    compiler, so a loop of calls is not vectorized away). `name` is the Python function of the kernel file `file`
    whose body the reference interpreter runs instead; `sources` are the user's C/C++ files that define c_name
    (compiled into the library; empty: the app links it); `result` is the dtype of the one float result.
Derivatives come only from a rule the user gives (the call is then a custom_jvp / custom_vjp equation whose body is
this one, prims/custom.py): reaching extern_call itself in a derivative is an error at the call.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from ..errors import KsbuildError
from ..ir.types import C_TYPES, Type, numpy_dtype
from .base import Prim, nowhere_finite, unsigned
from .common import broadcast_types
from .elementwise import batch_elementwise

_MODULES: dict[tuple[str, float], object] = {}  # (kernel file, its mtime) -> the module imported from it


def _type(in_types, c_name, name, file, sources, result):
    return (broadcast_types("extern_call", in_types, result) if in_types else Type(result),)


def python_body(file: str, name: str):
    """The Python function `name` of the kernel file `file` (imported once per version of the file), undecorated."""
    key = (file, Path(file).stat().st_mtime)
    if key not in _MODULES:
        spec = importlib.util.spec_from_file_location(f"_ksbuild_extern_{len(_MODULES)}", file)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(Path(file).parent))  # (its sibling imports)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise KsbuildError(f"the reference interpreter runs the Python body of the external function '{name}', "
                               f"but importing {Path(file).name} failed: {type(e).__name__}: {e}") from None
        finally:
            sys.path.remove(str(Path(file).parent))
        _MODULES[key] = module
    fn = getattr(_MODULES[key], name)
    return getattr(fn, "fun", fn)


def _eval(*args, env, c_name, name, file, sources, result):
    # the reference interpreter: the Python body, element by element (ksbuild never compiles it)
    fn = python_body(file, name)
    arrays = np.broadcast_arrays(*args) if args else []
    shape = arrays[0].shape if arrays else ()
    out = np.empty(shape, dtype=numpy_dtype(result))
    for i in np.ndindex(shape):
        value = fn(*[a[i].item() for a in arrays])
        if value is None:
            raise KsbuildError(f"'{name}' is an external C function whose Python body returns nothing (is it `...`?): "
                               "the reference interpreter runs that body", hint=f"give '{name}' a Python body that "
                               f"computes what the C function {c_name} does")
        out[i] = value
    return (out,)


def _no_jvp(b, primals, tangents, c_name, name, **_):
    # ksbuild cannot see the C function, so its derivative is the user's rule or nothing
    raise KsbuildError(f"'{name}' is an external C function with no derivative rule",
                       hint=f"give one with @{name}.defjvp on a jvp rule, or {name}.defvjp({name}_fwd, {name}_bwd)")


def _emit(ctx, eqn):
    ctx.assign(eqn.outs[0], f"::{eqn.params['c_name']}({', '.join(ctx.args(eqn))})")


def _declare(eqn) -> tuple[str, tuple[str, ...]]:
    # the C function's declaration (file scope, C linkage) and the user's files that define it
    args = ", ".join(C_TYPES[a.type.dtype] for a in eqn.ins) or "void"
    return f'extern "C" {C_TYPES[eqn.params["result"]]} {eqn.params["c_name"]}({args});', eqn.params["sources"]


extern_call = Prim(
    name="extern_call",
    sign=unsigned,
    nonfinite=nowhere_finite,
    type_rule=_type,
    eval=_eval,
    jvp=_no_jvp,
    batch=lambda b, ins, batched, size, **params: batch_elementwise(b, ins, batched, size, extern_call, **params),
    emit=_emit,
    declare=_declare,
    elementwise=True,
    costly=True,
    doc="a call of an external C function, element by element (ksbuild.extern)",
    opt_outs=("jvp: ksbuild cannot see an external C function: its derivative is the rule the user gives (a custom_jvp "
              "or custom_vjp equation around this one), and without one the jvp rule is an error at the call",),
)
