"""Elementwise primitives: neg, abs, sign, floor, binary arithmetic, comparisons, logic, select, convert (the float
functions of one operand, exp, log, tanh, ...: prims/math_functions.py).

All broadcast like numpy. Derivative rules are written as the partial derivatives of the
scalar function; the factories turn them into jvp (sum of partial * tangent), transpose
(for the linear ones) and batching rules. A prim whose partial derivative can be inf or nan at
a finite input (sqrt at 0, log at 0, x / 0, exp past overflow: `singular=True`) multiplies the
tangent by it with `mulz`, where a zero tangent times anything is 0: a zero tangent or cotangent
(the side of an if not taken) then stays exactly 0 instead of becoming nan (docs/ad-correctness.md).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import KsbuildError
from ..ir.core import Lit
from ..ir.types import (
    C_TYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    STORAGE_DTYPES,
    dim_add,
    dim_floordiv,
    dim_mul,
    dim_sub,
    dtype_of,
    numpy_dtype,
)
from .base import (
    ANY,
    NONNEG,
    POSITIVE,
    Prim,
    divides,
    finite,
    literal_sign,
    product_sign,
    same_sign,
    unsigned,
)
from .common import add_cts, bcast_to, broadcast_types, move_batch_rank, unbroadcast, zeros


def emit_format(fmt: str) -> Callable:
    """An emit rule that formats one C++ expression from the operands' element expressions."""

    def emit(ctx, eqn):
        ctx.assign(eqn.outs[0], fmt.format(*ctx.args(eqn), T=ctx.ctype(eqn.outs[0].type)))

    return emit


def batch_elementwise(b, ins, batched, size, prim, **params):
    """Batching for any elementwise prim: align batched operands, the batch axis stays 0."""
    out_rank = max(a.type.rank - bt for a, bt in zip(ins, batched))
    args = [move_batch_rank(b, a, bt, out_rank) for a, bt in zip(ins, batched)]
    outs = b.bind(prim, args, params)
    return outs, [True] * len(outs)


def _np_out(dtype: str, value) -> tuple:
    return (np.asarray(value).astype(numpy_dtype(dtype), copy=False),)


def float_type_rule(name: str):
    def rule(in_types, **_):
        t = broadcast_types(name, in_types)
        if not all(x.is_float for x in in_types):
            raise KsbuildError(f"{name} needs float operands, got {', '.join(map(str, in_types))}")
        return (t,)

    return rule


def numeric_type_rule(name: str):
    def rule(in_types, **_):
        if in_types[0].dtype != in_types[-1].dtype:
            raise KsbuildError(f"{name} needs operands of one dtype, got {in_types[0]} and {in_types[-1]}")
        if in_types[0].dtype == "bool" or in_types[0].is_storage:
            raise KsbuildError(f"{name} does not take {in_types[0].dtype} operands")
        return (broadcast_types(name, in_types),)

    return rule


def scale(b, d, t, singular: bool):
    """The tangent term d * t of a partial derivative d; with `singular` (d may be inf or nan) 0 where t is 0;
    otherwise a ctmul, the tangent first: a plain product, whose own derivative keeps a zero t zero against an
    infinite dd (reverse over forward: the outer cotangent of d meets the inner tangent t, ctmul's jvp)."""
    return masked_mul(b, t, d) if singular else b.ctmul(t, d)


def masked_mul(b, x, y):
    """mulz(x, y): x * y, but 0 where x is 0; a plain mul when one is a finite nonzero literal (the same)."""
    if any(isinstance(a, Lit) and not isinstance(a.value, bool) and a.value != 0 and math.isfinite(a.value)
           for a in (x, y)):
        return b.mul(x, y)
    return b.mulz(x, y)


def unary(name: str, fn, cpp: str, deriv, doc: str, numeric: bool = False, simplify=None, **facts) -> Prim:
    """A unary elementwise prim (neg, abs, sign, floor; the float functions are prims/math_functions.py's math);
    deriv(b, x, y) is dy/dx (None: piecewise constant), finite wherever x is; `facts`: other fields of the record."""
    prim: Prim

    def jvp(b, primals, tangents):
        (x,), (tx,) = primals, tangents
        y = b.bind(prim, [x])[0]
        if tx is None or deriv is None:
            return [y], [None]
        return [y], [scale(b, deriv(b, x, y), tx, False)]

    def ev(x, env=None):
        return _np_out(_dt(x), fn(x))

    prim = Prim(
        name=name,
        type_rule=numeric_type_rule(name) if numeric else float_type_rule(name),
        eval=ev,
        jvp=jvp,
        batch=lambda b, ins, batched, size: batch_elementwise(b, ins, batched, size, prim),
        emit=emit_format(cpp),
        elementwise=True,
        doc=doc,
        simplify=simplify,
        **facts,
    )
    return prim


def _dt(arr: np.ndarray) -> str:
    return dtype_of(arr)


def binary(name: str, fn, cpp: str, partials, doc: str, numeric: bool = True, transpose=None,
           simplify=None, singular: bool = False, jvp=None, **facts) -> Prim:
    """A binary elementwise prim; partials(b, x, y, z) -> (dz/dx, dz/dy), None for zero; `singular`: a partial
    may be inf or nan at finite x, y, so the tangents multiply them with mulz; `jvp`: a rule of its own instead;
    `facts`: other fields of the record."""
    prim: Prim

    def partials_jvp(b, primals, tangents):
        x, y = primals
        z = b.bind(prim, [x, y])[0]
        if all(t is None for t in tangents) or partials is None:
            return [z], [None]
        dx, dy = partials(b, x, y, z)
        out = None
        for d, t in ((dx, tangents[0]), (dy, tangents[1])):
            if t is not None and d is not None:
                out = add_cts(b, out, t if d == 1 else scale(b, d, t, singular))
        return [z], [bcast_to(b, out, z.type) if out is not None else None]

    prim = Prim(
        name=name,
        type_rule=numeric_type_rule(name) if numeric else float_type_rule(name),
        eval=lambda x, y, env=None: _np_out(_dt(x), fn(x, y)),
        jvp=jvp or partials_jvp,
        batch=lambda b, ins, batched, size: batch_elementwise(b, ins, batched, size, prim),
        emit=facts.pop("emit", emit_format(cpp)),
        costly=facts.pop("costly", not numeric),  # pow, atan2, hypot, fmod
        transpose=transpose,
        elementwise=True,
        doc=doc,
        simplify=simplify,
        **facts,
    )
    return prim


# ---- local simplifications (each states its algebra) --------------------------------------

def _lit(a, value) -> bool:
    return isinstance(a, Lit) and not isinstance(a.value, bool) and a.value == value


def _same(a, out) -> bool:
    return a.type == out.type


def _simp_add(ins, out):
    # x + 0 = 0 + x = x
    x, y = ins
    return x if _lit(y, 0) and _same(x, out) else y if _lit(x, 0) and _same(y, out) else None


def _simp_sub(ins, out):
    # x - 0 = x
    return ins[0] if _lit(ins[1], 0) and _same(ins[0], out) else None


def _simp_mul(ins, out):
    # x * 1 = 1 * x = x;  x * 0 = 0 (for the zeros AD produces; x is finite where it matters)
    x, y = ins
    if _lit(y, 1) and _same(x, out):
        return x
    if _lit(x, 1) and _same(y, out):
        return y
    return Lit(0, out.type) if out.type.is_float and (_lit(x, 0) or _lit(y, 0)) else None


def _simp_div(ins, out):
    # 0 / y = 0;  x / 1 = x
    if _lit(ins[0], 0) and out.type.is_float:
        return Lit(0, out.type)
    return ins[0] if _lit(ins[1], 1) and _same(ins[0], out) else None


def _simp_floordiv(ins, out):
    # x // 1 = x for integers (a float's floor(x / 1) is not x); range(r)'s count is (r - 0 + 1 - 1) // 1
    return ins[0] if _lit(ins[1], 1) and not out.type.is_float and _same(ins[0], out) else None


def _simp_neg(ins, out):
    # -0 = 0
    return Lit(0, out.type) if _lit(ins[0], 0) else None


# ---- bounds rules: the range [lo, hi) of an integer result from its operands' (interval arithmetic) --------

def _operand_ranges(eqn, range_of):
    rs = [range_of(a) for a in eqn.ins]
    return None if any(r is None for r in rs) else rs


def _bounds_add(eqn, range_of):
    # [a, b) + [c, e) = [a + c, b + e - 1)
    rs = _operand_ranges(eqn, range_of)
    if rs is None:
        return None
    (a, b), (c, e) = rs
    return dim_add(a, c), dim_sub(dim_add(b, e), 1)


def _bounds_sub(eqn, range_of):
    # [a, b) - [c, e) = [a - e + 1, b - c)
    rs = _operand_ranges(eqn, range_of)
    if rs is None:
        return None
    (a, b), (c, e) = rs
    return dim_add(dim_sub(a, e), 1), dim_sub(b, c)


def _literal_operand(eqn):
    return next((x.value for x in eqn.ins if isinstance(x, Lit)), None)


def _bounds_mul(eqn, range_of):
    # [a, b) * c = [a c, (b - 1) c + 1) for a literal c >= 0
    rs, c = _operand_ranges(eqn, range_of), _literal_operand(eqn)
    if rs is None or not isinstance(c, int) or isinstance(c, bool) or c < 0:
        return None
    a, b = rs[0] if not isinstance(eqn.ins[0], Lit) else rs[1]
    return dim_mul(a, c), dim_add(dim_mul(dim_sub(b, 1), c), 1)


def _bounds_floordiv(eqn, range_of):
    # [a, b) // c = [a // c, (b - 1) // c + 1) for a literal divisor c > 0
    rs, c = _operand_ranges(eqn, range_of), _literal_operand(eqn)
    if rs is None or not isinstance(eqn.ins[1], Lit) or c <= 0:
        return None
    a, b = rs[0]
    return dim_floordiv(a, c), dim_add(dim_floordiv(dim_sub(b, 1), c), 1)


# ---- linear arithmetic -------------------------------------------------------------------

def _t_add(b, cts, ins, linear):
    # z = x + y: x̄ = z̄, ȳ = z̄ (summed over broadcast axes)
    (ct,) = cts
    return [unbroadcast(b, ct, a.type) if lin else None for a, lin in zip(ins, linear)]


def _t_sub(b, cts, ins, linear):
    # z = x - y: x̄ = z̄, ȳ = -z̄
    (ct,) = cts
    x_ct = unbroadcast(b, ct, ins[0].type) if linear[0] else None
    y_ct = unbroadcast(b, b.neg(ct), ins[1].type) if linear[1] and ct is not None else None
    return [x_ct, y_ct]


def _t_mul(b, cts, ins, linear):
    # z = x * y, linear in exactly one operand: x̄ = z̄ * y (or ȳ = z̄ * x), a ctmul (the cotangent first): a
    # plain product in C++, whose own derivative keeps a zero z̄ zero (second derivatives, see ctmul)
    (ct,) = cts
    if ct is None:
        return [None, None]
    if linear[0] and linear[1]:
        raise KsbuildError("internal: mul is not linear in both operands")
    i = 0 if linear[0] else 1
    out = [None, None]
    out[i] = unbroadcast(b, b.ctmul(ct, ins[1 - i]), ins[i].type)
    return out


def _t_div(b, cts, ins, linear):
    # z = x / y, linear in x only: x̄ = z̄ / y
    (ct,) = cts
    if linear[1]:
        raise KsbuildError("internal: div is not linear in its denominator")
    return [unbroadcast(b, b.div(ct, ins[1]), ins[0].type) if ct is not None else None, None]


def _t_neg(b, cts, ins, linear):
    # y = -x: x̄ = -ȳ
    return [b.neg(cts[0]) if cts[0] is not None else None]


def _one(b, x):
    return b.lit(1, x.type.scalar())


# ---- sign rules (Prim.sign: what is known of a result's sign from its operands') ------------------------------

def _add_sign(eqn, sign_of):
    # x + y of operands >= 0 is >= 0, and > 0 when one is > 0
    lo, hi = sorted(sign_of(a) for a in eqn.ins)
    return ANY if lo == ANY else hi


def _extreme_sign(pick):
    """max (pick=max) or min (pick=min) of the operands' signs: max(x, y) >= 0 when either is, min when both are."""
    return lambda eqn, sign_of: pick(sign_of(a) for a in eqn.ins)


def _first_rounded(eqn, sign_of):
    # floor(x), fmod(x, y): of x's sign where x >= 0, but a positive x may give 0
    return min(NONNEG, sign_of(eqn.ins[0]))


add = binary("add", np.add, "({0} + {1})", lambda b, x, y, z: (1, 1), "x + y", transpose=_t_add,
             simplify=_simp_add, remat=True, whole="if_operands", bounds=_bounds_add, loop_remat="scalar",
             sign=_add_sign, nonfinite=finite)
sub = binary("sub", np.subtract, "({0} - {1})", lambda b, x, y, z: (1, b.lit(-1, x.type.scalar())),
             "x - y", transpose=_t_sub, simplify=_simp_sub, remat=True, whole="if_operands",
             bounds=_bounds_sub, loop_remat="scalar", sign=unsigned, nonfinite=finite)
mul = binary("mul", np.multiply, "({0} * {1})", lambda b, x, y, z: (y, x), "x * y", transpose=_t_mul,
             simplify=_simp_mul, remat=True, whole="if_operands", bounds=_bounds_mul, sign=product_sign,
             loop_remat="scalar", nonfinite=finite)


def _np_mulz(x, y):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x == 0, np.zeros((), x.dtype), np.multiply(x, y)).astype(x.dtype)


def masked_both(b, x, t):
    """mulzz(x, t): x * t, but 0 where x or t is 0 (each against an inf or nan other); a plain mul when one is a
    finite nonzero literal (the same)."""
    if any(isinstance(a, Lit) and not isinstance(a.value, bool) and a.value != 0 and math.isfinite(a.value)
           for a in (x, t)):
        return b.mul(x, t)
    return b.mulzz(x, t)


def _mulz_jvp(b, primals, tangents):
    # d(x ⊙ y) = dx ⊙ y + x ⊙ dy: the first term masked by dx, the second by both x and dy (mulzz), so a cotangent x = 0
    # meeting an infinite dy (a second derivative at a singular point on the side not taken) stays 0, and so
    # does an infinite x (a first derivative at a singular point) meeting a zero tangent dy (a direction of
    # jacfwd that does not reach this element)
    (x, y), (tx, ty) = primals, tangents
    z = b.mulz(x, y)
    terms = [masked_mul(b, tx, y) if tx is not None else None, masked_both(b, x, ty) if ty is not None else None]
    out = add_cts(b, terms[0], terms[1])
    return [z], [bcast_to(b, out, z.type)]


def _np_mulzz(x, y):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where((x == 0) | (y == 0), np.zeros((), x.dtype), np.multiply(x, y)).astype(x.dtype)


def _mulzz_jvp(b, primals, tangents):
    # d(x ⊙⊙ y) = dx ⊙⊙ y + x ⊙⊙ dy: a product masked by both factors, whose derivative in either is the other
    # (no select on x: at a point where x is 0, d/dx (x y) is still y)
    (x, y), (tx, ty) = primals, tangents
    z = b.mulzz(x, y)
    terms = [masked_both(b, tx, y) if tx is not None else None, masked_both(b, x, ty) if ty is not None else None]
    out = add_cts(b, terms[0], terms[1])
    return [z], [bcast_to(b, out, z.type) if out is not None else None]


def _t_product(name, times, b, cts, ins, linear):
    # z = x times y, linear in one operand: its cotangent is times(z̄, the other)
    (ct,) = cts
    if ct is None:
        return [None, None]
    if linear[0] and linear[1]:
        raise KsbuildError(f"internal: {name} is not linear in both operands")
    i = 0 if linear[0] else 1
    out = [None, None]
    out[i] = unbroadcast(b, times(b, ct, ins[1 - i]), ins[i].type)
    return out


def _t_mulzz(b, cts, ins, linear):
    # z = x ⊙⊙ y: the cotangent of the linear operand is z̄ ⊙⊙ the other
    return _t_product("mulzz", masked_both, b, cts, ins, linear)


def _ctmul_jvp(b, primals, tangents):
    # z = c * y for a cotangent c: dz = dc * y + c * dy, the first again a ctmul (a cotangent's tangent times a
    # value: third derivatives keep the rule), the second masked by both c and dy (mulzz): a zero cotangent (the
    # side of a select not taken) times an infinite tangent (d sqrt at 0), or an infinite cotangent (a first
    # derivative at a singular point) times a zero tangent (a direction that does not reach this element), is 0
    (c, y), (tc, ty) = primals, tangents
    z = b.ctmul(c, y)
    terms = [b.ctmul(tc, y) if tc is not None else None, masked_both(b, c, ty) if ty is not None else None]
    out = add_cts(b, terms[0], terms[1])
    return [z], [bcast_to(b, out, z.type) if out is not None else None]


def _t_ctmul(b, cts, ins, linear):
    # z = c * y: the cotangent of the linear operand is z̄ * the other, a ctmul again (the new cotangent first)
    return _t_product("ctmul", lambda b, ct, other: b.ctmul(ct, other), b, cts, ins, linear)


def _ctmul_expand(b, ins):
    return [b.mul(*ins)]


def _t_mulz(b, cts, ins, linear):
    # z = x ⊙ y, linear in exactly one operand: x̄ = z̄ ⊙ y, or ȳ = x ⊙ z̄ (masked by x, as z is)
    (ct,) = cts
    x, y = ins
    if ct is None:
        return [None, None]
    if linear[0] and linear[1]:
        raise KsbuildError("internal: mulz is not linear in both operands")
    if linear[0]:
        return [unbroadcast(b, masked_mul(b, ct, y), x.type), None]
    return [None, unbroadcast(b, masked_mul(b, x, ct), y.type)]


def _simp_mulz(ins, out):
    # x ⊙ 1 = x;  1 ⊙ y = y;  0 ⊙ y = 0 (for any y: what ⊙ is for);  x ⊙ 0 = 0 (x finite, as for mul)
    x, y = ins
    if _lit(y, 1) and _same(x, out):
        return x
    if _lit(x, 1) and _same(y, out):
        return y
    return Lit(0, out.type) if _lit(x, 0) or _lit(y, 0) else None


# x ⊙ y: x * y, but 0 where x is 0, even against an inf or nan y. The singular prims' derivative rules
# multiply the tangent (x) by their partial derivative (y) with it
mulz = binary("mulz", _np_mulz, "ks::mulz({0}, {1})", None,
              "x * y, but 0 where x is 0 (0 * inf = 0 * nan = 0): a tangent times a factor that may be infinite",
              numeric=False, transpose=_t_mulz, simplify=_simp_mulz, jvp=_mulz_jvp, costly=False, unmasked=mul,
              sign=product_sign, nonfinite=finite)
# x ⊙⊙ y: x * y, but 0 where x or y is 0, even against an inf or nan other: a cotangent times a tangent in a
# second derivative (ctmul's and mulz's jvps), where either may be the zero and the other infinite
mulzz = binary("mulzz", _np_mulzz, "ks::mulzz({0}, {1})", None,
               "x * y, but 0 where x or y is 0 (0 * inf = 0 * nan = 0): a cotangent times a tangent, either zero",
               numeric=False, transpose=_t_mulzz, simplify=_simp_mulz, jvp=_mulzz_jvp, costly=False,
               unmasked=mul, sign=product_sign, nonfinite=finite)
# c * y where c is a cotangent: what mul's transpose makes. The value and the C++ of a mul (the expand pass makes it
# one before codegen, so every pass after sees a mul), but its jvp masks (_ctmul_jvp): the second derivatives of a
# zero cotangent stay 0 (docs/ad-correctness.md)
ctmul = binary("ctmul", np.multiply, "({0} * {1})", None,
               "x * y for a cotangent x (mul's transpose): a mul whose derivative keeps a zero x, or a zero dy, zero",
               transpose=_t_ctmul, simplify=_simp_mul, jvp=_ctmul_jvp, remat=True, whole="if_operands",
               expand=_ctmul_expand, emit=None, opt_outs=("emit: expanded into a mul first",),
               sign=product_sign, nonfinite=finite, masked=mulz)
_float_div = emit_format("({0} / {1})")


def _div_emit(ctx, eqn):
    """Floats: a / b. Integers: ks::truncdiv, which gives 0 for a divisor of 0 and wraps lowest / -1 (C++
    division traps on both: SIGFPE)."""
    if eqn.outs[0].type.is_float:
        return _float_div(ctx, eqn)
    ctx.assign(eqn.outs[0], "ks::truncdiv({0}, {1})".format(*ctx.args(eqn)))


# d(x/y) = dx / y - (x/y) dy / y
div = binary("div", lambda x, y: np.divide(x, y) if x.dtype.kind == "f" else _trunc_div(x, y), "({0} / {1})",
             lambda b, x, y, z: (b.div(_one(b, x), y), b.neg(b.div(z, y))), "x / y", transpose=_t_div,
             simplify=_simp_div, singular=True, emit=_div_emit, remat=True,  # singular at y = 0
             sign=product_sign, nonfinite=divides)
neg = unary("neg", np.negative, "(-{0})", lambda b, x, y: b.lit(-1, x.type.scalar()), "-x", numeric=True,
            simplify=_simp_neg, transpose=_t_neg, remat=True, whole="if_operands", loop_remat="scalar",
            sign=unsigned, nonfinite=finite)


def _trunc_div(x, y):
    """Integer division toward zero; 0 where y is 0, lowest / -1 wraps to lowest (ks::truncdiv)."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    safe = np.where(y == 0, 1, y)
    with np.errstate(all="ignore"):
        q = np.abs(x) // np.abs(safe)  # (lowest's abs wraps to lowest, and so does its quotient by 1)
        q = np.where((x < 0) != (safe < 0), -q, q)
    return np.where(y == 0, 0, q).astype(x.dtype)


# ---- unary math ----------------------------------------------------------------------------
# (the float functions exp, log, tanh, ... are one prim, math, with a form each: prims/math_functions.py)
def _abs_partial(b, x, y):
    """sign x, and 0 at NaN (torch's: a NaN masked away downstream, nan_to_num(|x|), then sends no NaN back)."""
    s = b.sign(x)
    return b.select(b.ne(x, x), b.lit(0, x.type.scalar()), s) if x.type.is_float else s


abs_ = unary("abs", np.abs, "ks::abs({0})", _abs_partial, "|x|", numeric=True,  # sign x
             sign=lambda eqn, sign_of: max(NONNEG, sign_of(eqn.ins[0])), nonfinite=finite)
sign = unary("sign", np.sign, "ks::sign({0})", None, "sign of x (0 at 0)", numeric=True, sign=same_sign,
             nonfinite=finite)
floor = unary("floor", np.floor, "std::floor({0})", None, "round down", whole="always", sign=_first_rounded,
              nonfinite=finite)


def _ipow_rule(in_types, n):
    if in_types[0].dtype == "bool":
        raise KsbuildError("integer power does not take bool operands")
    return (in_types[0],)


def _ipow_jvp(b, primals, tangents, n):
    # d x^n = n x^(n-1) dx
    (x,), (tx,) = primals, tangents
    y = b.ipow(x, n=n)
    if tx is None:
        return [y], [None]
    d = b.lit(n, x.type.scalar()) if n == 1 else b.mul(b.lit(n, x.type.scalar()), b.ipow(x, n=n - 1))
    return [y], [scale(b, d, tx, n < 0)]  # singular at x = 0 for n < 0


def _ipow_sign(eqn, sign_of):
    # x ** n >= 0 for an even n (for floats 1 / x ** -n too: an integer's 1 / 0 wraps), of x's sign for an odd n > 0
    n, is_float = eqn.params["n"], eqn.outs[0].type.is_float
    if n < 0 and not is_float:
        return ANY
    return NONNEG if n % 2 == 0 else min(NONNEG, sign_of(eqn.ins[0])) if n > 0 else ANY


ipow = Prim(
    name="ipow",
    remat=True,
    type_rule=_ipow_rule,
    eval=lambda x, n, env=None: _np_out(_dt(x), x ** n if n >= 0 else 1 / x ** (-n)),
    jvp=_ipow_jvp,
    batch=lambda b, ins, batched, size, n: batch_elementwise(b, ins, batched, size, ipow, n=n),
    emit=lambda ctx, eqn: ctx.assign(eqn.outs[0], f"ks::ipow<{eqn.params['n']}>({ctx.args(eqn)[0]})"),
    elementwise=True,
    doc="x ** n for a literal integer n (repeated multiplication)",
    sign=_ipow_sign,
    nonfinite=lambda eqn, sign_of: eqn.params["n"] < 0 and sign_of(eqn.ins[0]) < POSITIVE,  # 1 / 0
    # x ** 1 = x;  x ** 0 = 1
    simplify=lambda ins, out, n: ins[0] if n == 1 else Lit(1, out.type) if n == 0 else None,
)


def _pow_partials(b, x, y, z):
    # d x^y = y x^(y-1) dx + log(x) x^y dy, where the dy term is 0 at x = 0 (x^y is 0 there for
    # y > 0, as torch takes it; log reads 1 instead of 0 so no -inf * 0 reaches any derivative)
    zero = b.eq(x, b.lit(0, x.type.scalar()))
    log_x = b.log(b.select(zero, _one(b, x), x))
    dx = b.mul(y, b.pow(x, b.sub(y, _one(b, y))))
    # (log(x) x^y as mulz(x^y, log x), the same value: in a second derivative the transpose of its jvp then multiplies
    # a zero cotangent by log x, NaN for x < 0, masked: 0, as torch's where the exponent's derivative is not used)
    return dx, b.select(zero, b.lit(0, z.type.scalar()), masked_mul(b, z, log_x))


def _pow_jvp(b, primals, tangents):
    # the partials above, each tangent term masked by its tangent (mulz); the dx term is 0 where y = 0, whatever the
    # tangent (x^0 is 1 everywhere; y x^(y-1) would read 0 · inf at x = 0): a select on y outside the product, so its
    # transpose masks the cotangent, as torch's where(exponent == 0, 0, grad · y x^(y-1)) does: a NaN cotangent of
    # x^0 (from the log of a negative base of a pow that reads it, fuzz seed 8100 kernel 11) gives x a 0
    x, y = primals
    z = b.pow(x, y)
    if all(t is None for t in tangents):
        return [z], [None]
    dx, dy = _pow_partials(b, x, y, z)
    out = None
    if tangents[0] is not None:
        term = bcast_to(b, masked_mul(b, tangents[0], dx), z.type)
        out = b.select(b.eq(y, b.lit(0, y.type.scalar())), b.lit(0, z.type.scalar()), term)
    if tangents[1] is not None:
        out = add_cts(b, out, masked_mul(b, tangents[1], dy))
    return [z], [bcast_to(b, out, z.type) if out is not None else None]


pow_ = binary("pow", np.power, "std::pow({0}, {1})", None, "x ** y", numeric=False, jvp=_pow_jvp,
              singular=True,  # y x^(y-1) at x = 0, y < 1; nan for x < 0
              sign=_first_rounded,  # (x ** y >= 0 for x >= 0; a positive x may underflow to 0)
              nonfinite=lambda eqn, sign_of: sign_of(eqn.ins[0]) < POSITIVE)  # 0 ** -1, (-1) ** 0.5


def _atan2_partials(b, x, y, z):
    # ∂/∂a atan2(a, c) = c/(a²+c²), ∂/∂c = -a/(a²+c²); both 0 at the origin (as torch), not 0/0
    r2 = b.add(b.mul(x, x), b.mul(y, y))
    safe = b.select(b.eq(r2, b.lit(0, r2.type.scalar())), _one(b, r2), r2)
    return b.div(y, safe), b.neg(b.div(x, safe))


atan2 = binary("atan2", np.arctan2, "std::atan2({0}, {1})", _atan2_partials, "atan2(y, x)", numeric=False,
               sign=unsigned, nonfinite=finite)  # (atan2(-0.0, -1) = -pi: a y >= 0 tells nothing)
# d hypot(x, y) = (x dx + y dy) / hypot: x / inf is 0 for a finite x (NaN at the origin, as torch's)
hypot = binary("hypot", np.hypot, "std::hypot({0}, {1})", lambda b, x, y, z: (b.div(x, z), b.div(y, z)),
               "sqrt(x² + y²) without overflow or underflow (C hypot: inf if either is, even against NaN)",
               numeric=False, singular=True, nonfinite=finite,
               sign=lambda eqn, sign_of: max(NONNEG, *(sign_of(a) for a in eqn.ins)))  # (>= |x| and |y|)


def _max_partials(b, x, y, z):
    # d max(x, y) = dx where x >= y else dy
    ge = b.ge(x, y)
    return b.select(ge, _one(b, x), zeros(x.type.scalar())), b.select(ge, zeros(x.type.scalar()), _one(b, x))


def _min_partials(b, x, y, z):
    # d min(x, y) = dx where x <= y else dy
    le = b.le(x, y)
    return b.select(le, _one(b, x), zeros(x.type.scalar())), b.select(le, zeros(x.type.scalar()), _one(b, x))


def _int_value_max(eqn, value_of, nonneg_of):
    # max(x, c) = x for x >= 0 and a literal c <= 0 (a range's count max(n, 0))
    x, c = eqn.ins if isinstance(eqn.ins[1], Lit) else eqn.ins[::-1]
    if isinstance(c, Lit) and not isinstance(x, Lit) and c.value <= 0 and nonneg_of(x):
        return value_of(x)
    return None


def _emit_floordiv(ctx, eqn):
    # x // c of a signed integer x >= 0 by a literal c > 0 is C++'s x / c, done unsigned (a shift for 2)
    x, c = eqn.ins
    signs = getattr(ctx, "int_signs", None)
    if isinstance(c, Lit) and not eqn.outs[0].type.is_float and eqn.outs[0].type.rank == 0 and c.value > 0 \
            and signs is not None and signs.nonneg(x):
        ctx.assign(eqn.outs[0], "ks::floordiv_nonneg({0}, {1})".format(*ctx.args(eqn)))
    else:
        ctx.assign(eqn.outs[0], "ks::floordiv({0}, {1})".format(*ctx.args(eqn)))


maximum = binary("max", np.maximum, "ks::max({0}, {1})", _max_partials, "larger of x and y", whole="if_operands",
                 sign=_extreme_sign(max), int_value=_int_value_max, loop_remat="scalar", nonfinite=finite)
minimum = binary("min", np.minimum, "ks::min({0}, {1})", _min_partials, "smaller of x and y",
                 whole="if_operands", sign=_extreme_sign(min), loop_remat="scalar", nonfinite=finite)
# Python floor semantics: x // y = floor(x / y); x % y = x - floor(x / y) * y (x // 0 = x % 0 = 0 for integers)
floordiv = binary("floordiv", lambda x, y: np.floor_divide(x, y), "ks::floordiv({0}, {1})", None,
                  "floor(x / y)", bounds=_bounds_floordiv, simplify=_simp_floordiv, sign=product_sign,
                  emit=_emit_floordiv, loop_remat="scalar", nonfinite=divides)
mod = binary("mod", np.mod, "ks::mod({0}, {1})",
             lambda b, x, y, z: (1, b.neg(b.floordiv(x, y))), "x - floor(x / y) * y", singular=True,  # y = 0
             sign=lambda eqn, sign_of: NONNEG if sign_of(eqn.ins[1]) >= NONNEG else ANY, nonfinite=divides)
fmod = binary("fmod", np.fmod, "std::fmod({0}, {1})",
              lambda b, x, y, z: (1, b.neg(b.div(b.sub(x, z), y))),  # d/dy = -trunc(x / y)
              "x - trunc(x / y) * y, exactly (C fmod: the sign of x; floats only)", numeric=False,
              singular=True, sign=_first_rounded, nonfinite=divides)  # y = 0


# ---- comparisons and logic (no tangents: bool outputs) ----------------------------------

# op -> (numpy function, C++ operator); the forms b.lt(x, y), ..., b.ne(x, y) and `lt(x, y)` in the IR text
COMPARISONS = {"lt": (np.less, "<"), "le": (np.less_equal, "<="), "gt": (np.greater, ">"),
               "ge": (np.greater_equal, ">="), "eq": (np.equal, "=="), "ne": (np.not_equal, "!=")}
LOGIC = {"and": (np.logical_and, "&&", 2), "or": (np.logical_or, "||", 2), "not": (np.logical_not, "!", 1)}


def _compare_rule(in_types, op):
    if op not in COMPARISONS:
        raise KsbuildError(f"unknown comparison '{op}'; valid: {', '.join(COMPARISONS)}")
    if in_types[0].dtype != in_types[1].dtype:
        raise KsbuildError(f"cannot compare {in_types[0]} with {in_types[1]}")
    if in_types[0].is_str and op not in ("eq", "ne"):
        raise KsbuildError(f"strings are only compared for equality and moved: '{op}' does not take them")
    if in_types[0].is_storage and not in_types[0].is_str:
        raise KsbuildError(f"cannot compare {in_types[0].dtype} values: convert them first")
    return (broadcast_types(op, in_types, "bool"),)


def _compare_emit(ctx, eqn):
    """Compare with the C++ operator; strings (eq, ne) by their characters (ks::same_string)."""
    op, (x, y) = eqn.params["op"], ctx.args(eqn)
    if eqn.ins[0].type.is_str:
        same = f"ks::same_string({x}, {y})"
        ctx.assign(eqn.outs[0], same if op == "eq" else f"(!{same})")
    else:
        ctx.assign(eqn.outs[0], f"({x} {COMPARISONS[op][1]} {y})")


_FLIP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}  # c op x is x flipped-op c
_NOT = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}  # not (x op c), where x is not nan (a sign is of finite x)


def _compare_implies(eqn, holds: bool) -> tuple:
    """What x op c (or c op x) for a literal c >= 0 shows of x's sign where it is `holds`: x > c, x >= c where it
    holds, x < c, x <= c where it does not (a nan x compares false either way: a sign is of finite values)."""
    x, c = eqn.ins
    op = eqn.params["op"]
    if isinstance(x, Lit):
        x, c, op = c, x, _FLIP.get(op, op)
    if not holds:
        op = _NOT.get(op, "")
    s = literal_sign(c.value) if isinstance(c, Lit) and not isinstance(x, Lit) else ANY
    if s == ANY or op not in ("gt", "ge"):
        return ()
    return ((x, POSITIVE if op == "gt" or s == POSITIVE else NONNEG),)


def _logic_rule(in_types, op):
    if op not in LOGIC:
        raise KsbuildError(f"unknown logical operation '{op}'; valid: {', '.join(LOGIC)}")
    if len(in_types) != LOGIC[op][2]:
        raise KsbuildError(f"'{op}' takes {LOGIC[op][2]} operands, got {len(in_types)}")
    if any(t.dtype != "bool" for t in in_types):
        raise KsbuildError(f"'{op}' needs bool operands, got {', '.join(map(str, in_types))}")
    return (broadcast_types(op, in_types, "bool"),)


def _logic_emit(ctx, eqn):
    op, args = eqn.params["op"], ctx.args(eqn)
    sym = LOGIC[op][1]
    ctx.assign(eqn.outs[0], f"({sym}{args[0]})" if len(args) == 1 else f"({args[0]} {sym} {args[1]})")


compare = Prim(
    name="compare",
    type_rule=_compare_rule,
    eval=lambda x, y, op, env=None: (np.asarray(COMPARISONS[op][0](x, y)),),
    jvp=None,  # (bool results: transforms/jvp.py binds it as it is)
    batch=lambda b, ins, batched, size, op: batch_elementwise(b, ins, batched, size, compare, op=op),
    emit=_compare_emit,
    strings=True,  # (eq and ne only: the type rule refuses the others)
    elementwise=True,
    remat=True,
    doc="compare x op y, op one of lt <, le <=, gt >, ge >=, eq ==, ne != (eq and ne also on strings)",
    opt_outs=("jvp: bool output has no tangent", "transpose: not linear"),
    forms={op: {"op": op} for op in COMPARISONS},
    implies=_compare_implies,
    sign=unsigned,
    nonfinite=finite,
)
logic = Prim(
    name="logic",
    type_rule=_logic_rule,
    eval=lambda *xs, op, env=None: (np.asarray(LOGIC[op][0](*xs)),),
    jvp=None,  # (bool results: transforms/jvp.py binds it as it is)
    batch=lambda b, ins, batched, size, op: batch_elementwise(b, ins, batched, size, logic, op=op),
    emit=_logic_emit,
    elementwise=True,
    doc="logical and (x && y), or (x || y), not (!x) of bools",
    opt_outs=("jvp: bool output has no tangent", "transpose: not linear"),
    forms={op: {"op": op} for op in LOGIC},
    sign=unsigned,
    nonfinite=finite,
)


# ---- select and convert ---------------------------------------------------------------------

def _select_rule(in_types, **_):
    p, x, y = in_types
    if p.dtype != "bool":
        raise KsbuildError(f"select needs a bool condition, got {p}")
    if x.dtype != y.dtype:
        raise KsbuildError(f"the two branches have different types: {x} and {y}")
    return (broadcast_types("select between", in_types, x.dtype),)


def _select_jvp(b, primals, tangents):
    # select(p, x, y) is linear in (x, y): d = select(p, dx, dy)
    p, x, y = primals
    z = b.select(p, x, y)
    tx, ty = tangents[1], tangents[2]
    if tx is None and ty is None:
        return [z], [None]
    # a missing tangent is a zero of z's whole type: select(p, 0, dy) with a scalar p and dy (y shared by the
    # lanes of a vmap, x batched) must still have z's shape
    tx = tx if tx is not None else zeros(z.type)
    ty = ty if ty is not None else zeros(z.type)
    return [z], [b.select(p, tx, ty)]


def _select_transpose(b, cts, ins, linear):
    # x̄ = select(p, z̄, 0), ȳ = select(p, 0, z̄)
    (ct,), (p, x, y) = cts, ins
    if linear[0]:
        raise KsbuildError("internal: select is not linear in its condition")
    if ct is None:
        return [None, None, None]
    zero = zeros(ct.type.scalar())
    x_ct = unbroadcast(b, b.select(p, ct, zero), x.type) if linear[1] else None
    y_ct = unbroadcast(b, b.select(p, zero, ct), y.type) if linear[2] else None
    return [None, x_ct, y_ct]


def _simp_select(ins, out):
    # select(p, a, a) = a;  select(p, c, c) = c for literals c of any shapes (the zeros of masked derivatives)
    # select(True, a, b) = a and select(False, a, b) = b for a literal condition of any shape (a mask of all
    # True, as transformers builds for attention without padding)
    p, x, y = ins
    if x == y and x.type == out.type:
        return x
    if isinstance(p, Lit) and isinstance(p.value, (bool, np.bool_)):
        kept = x if p.value else y
        if kept.type == out.type:
            return kept
    same_lit = isinstance(x, Lit) and isinstance(y, Lit) and x.value == y.value and type(x.value) is type(y.value)
    return Lit(x.value, out.type) if same_lit else None


select = Prim(
    name="select",
    strings=True,
    whole="if_operands",
    type_rule=_select_rule,
    eval=lambda p, x, y, env=None: (np.where(p, x, y).astype(x.dtype),),
    jvp=_select_jvp,
    batch=lambda b, ins, batched, size: batch_elementwise(b, ins, batched, size, select),
    emit=emit_format("({0} ? {1} : {2})"),
    transpose=_select_transpose,
    elementwise=True,
    doc="p ? x : y elementwise (branch-free)",
    lazy=(1, 2),
    simplify=lambda ins, out: _simp_select(ins, out),
    sign=lambda eqn, sign_of: min(sign_of(eqn.ins[1]), sign_of(eqn.ins[2])),
    nonfinite=finite,
)


def _convert_jvp(b, primals, tangents, dtype):
    # a cast between float types is linear; to or from an integer type there is no tangent
    (x,), (tx,) = primals, tangents
    y = b.convert(x, dtype=dtype)
    if tx is None or dtype not in ("f32", "f64") or not x.type.is_float:
        return [y], [None]
    return [y], [b.convert(tx, dtype=dtype)]


def _convert_rule(in_types, dtype):
    if (in_types[0].dtype == "str") != (dtype == "str") or dtype not in C_TYPES:
        raise KsbuildError(f"cannot convert {in_types[0].dtype} to {dtype}")
    return (in_types[0].with_dtype(dtype),)


convert = Prim(
    name="convert",
    strings=True,
    whole="if_operands",
    loop_remat="scalar",
    bounds=lambda eqn, range_of: range_of(eqn.ins[0]),  # (an integer converted to another keeps its range)
    type_rule=_convert_rule,
    eval=lambda x, dtype, env=None: (_convert_np(x, dtype),),
    jvp=_convert_jvp,
    batch=lambda b, ins, batched, size, dtype: batch_elementwise(b, ins, batched, size, convert, dtype=dtype),
    emit=lambda ctx, eqn: ctx.assign(eqn.outs[0], convert_expr(ctx.args(eqn)[0], eqn.ins[0].type.dtype,
                                                               eqn.params["dtype"])),
    transpose=lambda b, cts, ins, linear, dtype: [
        b.convert(cts[0], dtype=ins[0].type.dtype) if cts[0] is not None else None],
    elementwise=True,
    doc="cast to another dtype (float→int truncates toward zero)",
    # convert(x, its own dtype) = x (x.clone() is one, a value of its own for the frontend's alias check)
    simplify=lambda ins, out, dtype: ins[0] if ins[0].type == out.type else None,
    sign=lambda eqn, sign_of: _convert_sign(eqn.ins[0].type.dtype, eqn.params["dtype"], sign_of(eqn.ins[0])),
    nonfinite=finite,  # (a narrower float's overflow aside)
)


def _convert_sign(src: str, dst: str, s: int) -> int:
    """The sign of x of sign s converted from dtype src to dst: kept into a type that holds every value of src (a
    wider one of its kind, a float from an integer); a narrower float may round a positive x to 0; anything else
    (a narrower integer, a float made an integer: they wrap) is unknown."""
    if src == "bool":
        return NONNEG
    if src == dst or src in INT_DTYPES and (dst in FLOAT_DTYPES or dst in INT_DTYPES and _BITS[dst] > _BITS[src]):
        return s
    if src in FLOAT_DTYPES and dst in FLOAT_DTYPES:
        return s if dst == "f64" else min(NONNEG, s)
    return ANY


_BITS = {"i8": 8, "u8": 8, "i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64, "u64": 64}


NARROW_INTS = {"i4": (4, "true"), "u4": (4, "false"), "i2": (2, "true"), "u2": (2, "false")}


def convert_expr(x: str, src: str, dst: str) -> str:
    """The C++ expression converting x from dtype src to dst (narrow floats through float, their bits
    with ks::to_*/from_*; narrow ints wrap; float to unsigned goes through int64 as numpy does)."""
    if src in NARROW_INTS:
        bits, signed = NARROW_INTS[src]
        x, src = f"ks::from_narrow_int<{bits}, {signed}>({x})", "i8"
    elif src in STORAGE_DTYPES:
        x, src = f"ks::from_{src}({x})", "f32"
    if dst in NARROW_INTS:
        bits, signed = NARROW_INTS[dst]
        return f"ks::to_narrow_int<{bits}>({x})"
    if dst in STORAGE_DTYPES:
        return f"ks::to_{dst}(static_cast<float>({x}))"
    c = C_TYPES[dst]
    if dst == "bool":
        return f"({x} != 0)"
    if dst in INT_DTYPES and src in ("f32", "f64"):
        return f"ks::float_to_int<{c}, {_WIDE_INT[dst]}>({x})"
    return f"static_cast<{c}>({x})"


# The integer a float converts through on its way to an integer type (ks::float_to_int): x86's conversions.
_WIDE_INT = {"i8": "int32_t", "u8": "int32_t", "i16": "int32_t", "u16": "int32_t", "i32": "int32_t",
             "u32": "int64_t", "i64": "int64_t", "u64": "int64_t"}


def _to_e8m0(x) -> np.ndarray:
    """float8e8m0 bits (a power of two): the f32 exponent, rounded up when there is a fraction
    (ONNX Cast's default round_mode, saturating); NaN and infinity give 0xFF."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    up = ((bits & 0x7FFFFF) > 0) & ~special & (exponent != 0xFE)
    return np.where(special, 0xFF, exponent + up).astype(np.uint8)


def _convert_np(x, dtype):
    target = numpy_dtype(dtype)
    x = np.asarray(x)
    if dtype_of(x) in STORAGE_DTYPES:
        x = x.astype(np.float32)  # the narrow types convert through f32 (exact: f32 holds them all)
    if dtype == "bool":
        return x != 0
    if dtype == "f8e8m0":
        return _to_e8m0(x).view(target)
    if dtype in INT_DTYPES and x.dtype.kind == "f":  # ks::float_to_int
        wide = np.dtype(_WIDE_INT[dtype].removesuffix("_t"))
        limit = 2.0 ** (8 * wide.itemsize - 1)
        t = np.trunc(x)
        inside = (t >= -limit) & (t < limit)
        return np.where(inside, np.where(inside, t, 0).astype(wide), np.iinfo(wide).min).astype(target)
    return x.astype(target)
