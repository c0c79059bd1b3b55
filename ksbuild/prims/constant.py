"""constant[value]: a dense tensor known at compile time (weights, folded shape data).

It takes no operands: it is never batched (vmap leaves it as it is), has no tangent, and is
known to partial evaluation. The C++ reads it from read-only data linked into the library.
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.dense import Dense
from .base import ANY, NONNEG, POSITIVE, Prim


def _constant_rule(in_types, value):
    if in_types or not isinstance(value, Dense):
        raise KsbuildError("internal: constant takes no operands and a Dense value")
    return (value.type,)


def _emit_constant(ctx, eqn):
    # the output is the package's read-only copy of the value (codegen/data.py)
    from ..codegen.storage import Storage
    value = eqn.params["value"]
    if ctx.data is None:
        raise KsbuildError("internal: a constant outside a package (no data section)")
    ctx.env[eqn.outs[0]] = Storage.buffer(ctx.data.symbol(value), value.shape)


def _constant_sign(eqn, sign_of) -> int:
    # the least sign of its values (a float or integer constant; none of a bool's or string's)
    a = eqn.params["value"].array()
    if a.dtype.kind not in "fiu" or not a.size:
        return ANY
    with np.errstate(invalid="ignore"):
        return POSITIVE if np.all(a > 0) else NONNEG if np.all(a >= 0) else ANY


def _constant_nonfinite(eqn, sign_of) -> bool:
    # whether it holds an inf or a nan (an attention mask of -inf)
    a = eqn.params["value"].array()
    return a.dtype.kind == "f" and not bool(np.all(np.isfinite(a)))


constant = Prim(
    name="constant",  # (no `strings`: that fact is about operands; a constant of strings has none)
    sign=_constant_sign,
    nonfinite=_constant_nonfinite,
    view=True,
    type_rule=_constant_rule,
    eval=lambda value, env: (value.array(),),
    jvp=None,  # (no operands: jvp and vmap bind it as it is)
    batch=None,
    emit=_emit_constant,
    doc="a dense tensor known at compile time (an ONNX initializer)",
    opt_outs=("jvp: takes no operands", "batch: takes no operands", "transpose: takes no operands"),
)
