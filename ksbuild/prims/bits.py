"""Bitwise operations on integers: bitwise[op](x, y) with op one of and, or, xor, shl, shr.

Both operands have one integer dtype and broadcast. Shifts by y >= the bit width give 0 (ONNX
BitShift); `shr` of a signed value is arithmetic. Bitwise not is xor with all ones.
No tangents (integers).
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from .base import Prim, finite, unsigned
from .common import broadcast_types
from .elementwise import batch_elementwise

OPS = ("and", "or", "xor", "shl", "shr")


def _rule(in_types, op):
    x, y = in_types
    if op not in OPS:
        raise KsbuildError(f"unknown bitwise operation '{op}'; valid: {', '.join(OPS)}")
    if x.dtype != y.dtype or not x.is_int:
        raise KsbuildError(f"bitwise {op} needs two integer operands of one dtype, got {x} and {y}")
    return (broadcast_types(f"bitwise {op}", in_types),)


def _shift(x, y, left: bool):
    bits = x.dtype.itemsize * 8
    y = y.astype(np.int64)
    safe = np.clip(y, 0, bits - 1).astype(x.dtype)
    shifted = np.left_shift(x, safe) if left else np.right_shift(x, safe)
    fill = 0 if left or x.dtype.kind == "u" else np.where(x < 0, -1, 0)
    return np.where((y >= bits) | (y < 0), fill, shifted).astype(x.dtype)


def _eval(x, y, op, env):
    fns = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
           "shl": lambda a, c: _shift(a, c, True), "shr": lambda a, c: _shift(a, c, False)}
    return (np.asarray(fns[op](x, y)).astype(x.dtype),)


def _emit(ctx, eqn):
    x, y = ctx.args(eqn)
    op = eqn.params["op"]
    c = ctx.ctype(eqn.outs[0].type)
    if op in ("shl", "shr"):
        ctx.assign(eqn.outs[0], f"ks::{op}<{c}>({x}, {y})")
    else:
        sym = {"and": "&", "or": "|", "xor": "^"}[op]
        ctx.assign(eqn.outs[0], f"static_cast<{c}>({x} {sym} {y})")


bitwise = Prim(
    name="bitwise",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_rule,
    eval=_eval,
    jvp=None,  # (integer results: transforms/jvp.py binds it as it is)
    batch=lambda b, ins, batched, size, op: batch_elementwise(b, ins, batched, size, bitwise, op=op),
    emit=_emit,
    elementwise=True,
    doc="bitwise and/or/xor and shifts of integers",
    opt_outs=("jvp: integer output has no tangent", "transpose: not linear"),
)


def _bitcast_rule(in_types, dtype):
    import numpy as np

    from ..ir.types import DTYPES, STORAGE_DTYPES, Type, numpy_dtype
    (x,) = in_types
    if dtype not in DTYPES or dtype in STORAGE_DTYPES or x.is_storage:
        raise KsbuildError(f"bitcast between {x.dtype} and {dtype} is not supported")
    if np.dtype(numpy_dtype(x.dtype)).itemsize != np.dtype(numpy_dtype(dtype)).itemsize:
        raise KsbuildError(f"bitcast of {x} to {dtype}: the element sizes differ")
    if dtype == x.dtype:  # (so that a float result is read from integer bits: it has no tangent to carry)
        raise KsbuildError(f"bitcast of {x} to its own dtype")
    return (Type(dtype, x.shape),)


def _bitcast_eval(x, dtype, env):
    from ..ir.types import numpy_dtype
    return (np.array(x, copy=True, order="C").view(numpy_dtype(dtype)),)


def _bits_nonfinite(eqn, sign_of) -> bool:
    # a float made of an integer's bits may be any float: inf and nan too
    return eqn.outs[0].type.is_float


bitcast = Prim(
    name="bitcast",
    sign=unsigned,
    nonfinite=_bits_nonfinite,
    type_rule=_bitcast_rule,
    eval=_bitcast_eval,
    jvp=None,  # (a float result is made of integer bits, which carry no tangent: jvp binds it as it is)
    batch=lambda b, ins, batched, size, dtype: batch_elementwise(b, ins, batched, size, bitcast, dtype=dtype),
    emit=lambda ctx, eqn: ctx.assign(eqn.outs[0], f"ks::bit_cast<{ctx.ctype(eqn.outs[0].type)}>({ctx.args(eqn)[0]})"),
    elementwise=True,
    doc="the same bits read as another dtype of the same size",
    opt_outs=("jvp: a reinterpretation of bits has no derivative (a float result's operand is an integer, a float "
              "operand's result one)", "transpose: not linear"),
)
