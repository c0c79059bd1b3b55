"""Elementwise torch functions (ops/math.py): arithmetic as functions and methods (torch.add, sub, mul,
div, remainder, fmod, neg, ...), the unary library (erf, log2, tan, asinh, ceil, round, rsqrt, ...) and its
math.* forms, comparisons and logic (torch.lt, x.gt, torch.logical_and, ...), predicates (isnan, isinf,
isfinite), clamps, lerp, hypot, logaddexp, copysign, xlogy, sinc, nan_to_num, heaviside, fmax/fmin and
torch.special's elementwise functions. Each handler is registered with `@torch_function` (registry.py)."""
from __future__ import annotations

import ast
import math

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import math as math_ops
from .mathlib import CMPOPS, refuse_tensor_in_math
from .registry import torch_function
from .scope import Const
from .tensors import _arg, _c, _float_kw, _two_floats, _x, float_tensor, tensor


@torch_function("torch.clamp", "torch.clip", "Tensor.clamp", "Tensor.clip")
def _clamp(fc, b, args, kw, node):
    """torch.clamp(x, min=None, max=None): each bound as torch's (mathlib.clamp_bound; weak constants adapt)."""
    from .mathlib import clamp_bound
    x = args[0]
    lo = _arg(fc, args, kw, 1, "min", node, None)
    hi = _arg(fc, args, kw, 2, "max", node, None)
    if lo is not None:
        x = clamp_bound(fc, b, x, lo, False, node)
    if hi is not None:
        x = clamp_bound(fc, b, x, hi, True, node)
    return x


@torch_function("torch.square", "Tensor.square")
def _square(fc, b, args, kw, node):
    from ...ops.math import square
    return square(b, tensor(fc, b, args[0], node))


def _scalar_method(name: str):
    """x.name(...) of a function of the scalar library (exp, relu, pow, ...): x first, the arguments plain."""
    def fn(fc, b, args, kw, node):
        from .mathlib import call_builtin
        if kw:
            raise fc.src.error(node, f".{name}() takes no keyword arguments here")
        return call_builtin(fc, b, "torch", name, [args[0], *[fc.plain(b, a) for a in args[1:]]], node)
    return fn


def _comparison(op: type):
    """torch.lt(input, other) and friends (x.lt(other) through _method)."""
    def fn(fc, b, args, kw, node):
        x, y = fc.plain(b, _arg(fc, args, kw, 0, "input", node)), fc.plain(b, _arg(fc, args, kw, 1, "other", node))
        return CMPOPS[op](fc, b, x, y, node)
    return fn


def _logical(name: str):
    """torch.logical_and / or / xor (nonzero is true) and logical_not."""
    def fn(fc, b, args, kw, node):
        def truth(v):
            v = tensor(fc, b, v, node)
            return v if v.type.dtype == "bool" else b.ne(v, Lit(0, Type(v.type.dtype)))
        x = truth(_arg(fc, args, kw, 0, "input", node))
        if name == "not":
            return math_ops.logical_not(b, x)
        y = truth(_arg(fc, args, kw, 1, "other", node))
        if name == "xor":
            return b.ne(*fc.unify(b, x, y, node))
        return (math_ops.logical_and if name == "and" else math_ops.logical_or)(b, x, y)
    return fn


@torch_function("torch.frac", "Tensor.frac")
def _frac(fc, b, args, kw, node):
    """torch.frac(input) = input - trunc(input)."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.sub(x, math_ops.trunc(b, x))


@torch_function("torch.heaviside", "Tensor.heaviside")
def _heaviside(fc, b, args, kw, node):
    """torch.heaviside(input, values): 0 below 0, values at 0, 1 above (NaN stays NaN)."""
    x = _x(fc, b, args, kw, node)
    v = tensor(fc, b, _arg(fc, args, kw, 1, "values", node), node)
    x, v = fc.unify(b, x, v, node)
    step = b.select(b.gt(x, _c(x, 0)), _c(x, 1), b.select(b.lt(x, _c(x, 0)), _c(x, 0), x))  # (NaN: x)
    return b.select(b.eq(x, _c(x, 0)), v, step)


def _fmax_fmin(largest: bool):
    """torch.fmax / fmin: the larger (smaller) of the two, ignoring a NaN (NaN only when both are)."""
    def fn(fc, b, args, kw, node):
        x, y = fc.unify(b, _x(fc, b, args, kw, node), tensor(fc, b, _arg(fc, args, kw, 1, "other", node), node),
                        node)
        pick = math_ops.extremum(b, x, y, largest)
        return b.select(b.ne(x, x), y, b.select(b.ne(y, y), x, pick)) if x.type.is_float else pick
    return fn


@torch_function("torch.float_power", "Tensor.float_power")
def _float_power(fc, b, args, kw, node):
    """torch.float_power(input, exponent): the power computed in float64."""
    x, y = (_arg(fc, args, kw, i, n, node) for i, n in enumerate(("input", "exponent")))
    x = tensor(fc, b, x, node)
    x64 = x if x.type.dtype == "f64" else b.convert(x, dtype="f64")
    if isinstance(y, Const):
        return b.pow(x64, Lit(float(y.value), Type("f64")))
    y = tensor(fc, b, y, node)
    return b.pow(*fc.unify(b, x64, y if y.type.dtype == "f64" else b.convert(y, dtype="f64"), node))


def _unary(op):
    """torch.f(x) for an op of ops/math or ops/activations taking (b, x); any other argument is an error
    (F.hardtanh(x, -2.0, 2.0) or torch.round(x, decimals=2) must not quietly compute something else)."""
    def fn(fc, b, args, kw, node):
        _only_input(fc, args, kw, node)
        return op(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _only_input(fc, args, kw, node) -> None:
    """The call passes its input and at most inplace=False."""
    extra = [k for k in kw if k not in ("input", "inplace")]
    inplace = args[1] if len(args) == 2 and not kw else kw.get("inplace", Const(False))
    if len(args) > 2 or (len(args) == 2 and kw) or extra or not (isinstance(inplace, Const) and inplace.value is False):
        what = f"argument '{extra[0]}'" if extra else "inplace=True" if len(args) <= 2 else "extra arguments"
        raise fc.src.error(node, f"{what} not supported here", hint="pass the input only (kernels never update "
                                                                     "a tensor in place)")


def _prim_unary(name: str):
    def fn(fc, b, args, kw, node):
        return getattr(b, name)(float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _log_base(base: float):
    def op(b, x):
        return b.mul(b.log(x), _c(x, 1.0 / math.log(base)))
    return op


def _rsqrt(b, x):
    return b.div(_c(x, 1.0), b.sqrt(x))


@torch_function("torch.hypot")
def _hypot(fc, b, args, kw, node):
    """sqrt(x² + y²), neither overflowing (1e300) nor underflowing (1e-200) (the hypot prim: C's hypot)."""
    x, y = _two_floats(fc, b, args[:2], node, "hypot")
    return b.hypot(*fc.unify(b, x, y, node))


@torch_function("torch.logaddexp")
def _logaddexp(fc, b, args, kw, node):
    """log(e^x + e^y) = hi + log1p(e^(lo - hi)) with hi, lo = x, y where x > y, else y, x: at a tie this is
    y + log1p(e^(x - y)), whose derivatives are torch's (σ(0) = ½ for each, ¼ for the second); equal
    infinities give themselves (inf - inf would be NaN)."""
    x, y = _two_floats(fc, b, args[:2], node, "logaddexp")
    first = b.gt(x, y)
    hi, lo = b.select(first, x, y), b.select(first, y, x)
    same_inf = math_ops.logical_and(b, b.eq(x, y), b.eq(b.abs(x), _c(x, math.inf)))
    return b.select(same_inf, x, b.add(hi, b.log1p(b.exp(b.select(same_inf, _c(x, 0), b.sub(lo, hi))))))


def _predicate(op):
    def fn(fc, b, args, kw, node):
        return op(b, float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node))
    return fn


def _isfinite(b, x):
    return math_ops.logical_not(b, math_ops.logical_or(b, math_ops.isnan(b, x), math_ops.isinf(b, x)))


def _math_function(name: str, handler):
    """math.name(...): folded with Python's math on constants, else the torch function on values."""
    def fn(fc, b, args, kw, node):
        if all(isinstance(a, Const) for a in args) and not kw:
            try:
                v = getattr(math, name)(*[a.value for a in args])
            except (ValueError, OverflowError, ZeroDivisionError) as e:
                raise fc.src.error(node, f"constant expression fails: {e}") from None
            return Const(float(v) if not isinstance(v, bool) else v)
        refuse_tensor_in_math(fc, name, args, node)
        return handler(fc, b, [a if not isinstance(a, Const) else Const(float(a.value)) for a in args], kw, node)
    return fn


@torch_function("torch.copysign")
def _copysign(fc, b, args, kw, node):
    """|x| with the sign bit of y (-0.0 and a NaN with its sign bit set count as negative, as in C and Python):
    y's bits read as a signed integer are negative exactly then."""
    x, y = _two_floats(fc, b, args[:2], node, "copysign")
    bits = "i32" if y.type.dtype == "f32" else "i64"
    negative = b.lt(b.bitcast(y, dtype=bits), Lit(0, Type(bits)))
    return b.select(negative, b.neg(b.abs(x)), b.abs(x))


def _clamp_one(name: str):
    """torch.clamp_min(x, min) / torch.clamp_max(x, max): one bound of torch.clamp (mathlib.clamp_bound)."""
    def fn(fc, b, args, kw, node):
        from .mathlib import clamp_bound
        x = _arg(fc, args, kw, 0, "input", node)
        bound = _arg(fc, args, kw, 1, "min" if name == "maximum" else "max", node)
        return clamp_bound(fc, b, fc.plain(b, x), fc.plain(b, bound), name == "minimum", node)
    return fn


@torch_function("torch.lerp", "Tensor.lerp")
def _lerp(fc, b, args, kw, node):
    """torch.lerp(start, end, weight) = start + weight * (end - start)."""
    import ast
    start, end = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "end", node)
    w = _arg(fc, args, kw, 2, "weight", node)
    return fc.binop(b, ast.Add(), start, fc.binop(b, ast.Mult(), w, fc.binop(b, ast.Sub(), end, start, node), node),
                    node)


_UNARY = {"erf": _prim_unary("erf"), "erfc": _prim_unary("erfc"), "log2": _unary(_log_base(2.0)),
          "log10": _unary(_log_base(10.0)), "tan": _unary(math_ops.tan), "sinh": _unary(math_ops.sinh),
          "cosh": _unary(math_ops.cosh), "asin": _unary(math_ops.asin), "acos": _unary(math_ops.acos),
          "asinh": _unary(math_ops.asinh), "acosh": _unary(math_ops.acosh), "atanh": _unary(math_ops.atanh),
          "ceil": _unary(math_ops.ceil), "trunc": _unary(math_ops.trunc),
          "round": _unary(math_ops.round_half_even), "reciprocal": _unary(math_ops.reciprocal),
          "rsqrt": _unary(_rsqrt), "isnan": _predicate(math_ops.isnan), "isinf": _predicate(math_ops.isinf),
          "isfinite": _predicate(_isfinite), "erfinv": _unary(math_ops.erfinv)}


def _python_op(op: ast.operator, name: str):
    """torch.remainder / torch.floor_divide: Python's % and // on tensors (the sign of the divisor)."""
    def fn(fc, b, args, kw, node):
        x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
        return fc.binop(b, op, x, y, node)
    fn.__doc__ = f"torch.{name}(input, other)"
    return fn


def _scaled_op(op: ast.operator, name: str):
    """torch.add / torch.sub (input, other, *, alpha=1): input ± alpha·other; torch.mul: input · other."""
    def fn(fc, b, args, kw, node):
        x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
        alpha = _arg(fc, args, kw, 2, "alpha", node, None) if not isinstance(op, ast.Mult) else None
        if alpha is not None and not (isinstance(alpha, Const) and alpha.value == 1):
            y = fc.binop(b, ast.Mult(), alpha, y, node)
        return fc.binop(b, op, x, y, node)
    fn.__doc__ = f"torch.{name}(input, other)"
    return fn


@torch_function("torch.neg", "torch.negative", "Tensor.neg", "Tensor.negative")
def _neg(fc, b, args, kw, node):
    """torch.neg(input) = -input."""
    x = fc.plain(b, _arg(fc, args, kw, 0, "input", node))
    return Const(-x.value) if isinstance(x, Const) else b.neg(tensor(fc, b, x, node))


@torch_function("torch.exp2", "Tensor.exp2")
def _exp2(fc, b, args, kw, node):
    """torch.exp2(input) = 2^input."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    return b.exp(b.mul(x, _c(x, math.log(2.0))))


@torch_function("torch.div", "torch.divide", "torch.true_divide", "Tensor.div", "Tensor.divide", "Tensor.true_divide")
def _div(fc, b, args, kw, node):
    """torch.div(input, other, rounding_mode=None | 'trunc' | 'floor')."""
    x, y = _arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)
    mode = _arg(fc, args, kw, 2, "rounding_mode", node, None)
    mode = mode.value if isinstance(mode, Const) else mode
    if mode is None:
        return fc.binop(b, ast.Div(), x, y, node)
    if mode == "floor":
        return fc.binop(b, ast.FloorDiv(), x, y, node)
    if mode != "trunc":
        raise fc.src.error(node, f"rounding_mode must be None, 'trunc' or 'floor', got {mode!r}")
    x, y = _two_floats(fc, b, [x, y], node, "div")
    return math_ops.trunc(b, b.div(x, y)) if x.type.is_float else b.div(x, y)  # (integer div truncates)


@torch_function("torch.fmod", "Tensor.fmod")
def _fmod(fc, b, args, kw, node):
    """torch.fmod(input, other): the remainder with the sign of the dividend (C's fmod)."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "fmod")
    return math_ops.fmod(b, x, y)


@torch_function("torch.logit", "Tensor.logit")
def _logit(fc, b, args, kw, node):
    """torch.logit(input, eps=None): log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    eps = _arg(fc, args, kw, 1, "eps", node, None)
    if eps is not None:
        e = _float_kw(fc, args, kw, 1, "eps", node, 0.0)
        x = math_ops.clamp(b, x, _c(x, e), _c(x, 1.0 - e))
    return b.log(b.div(x, b.sub(_c(x, 1.0), x)))


@torch_function("torch.xlogy", "Tensor.xlogy")
def _xlogy(fc, b, args, kw, node):
    """torch.xlogy(input, other): x·log(y), 0 where x = 0 (unless y is NaN). Where x = 0 and y <= 0 the log reads
    1 instead of y, so neither the value nor a derivative is NaN; elsewhere d/dx is log(y), as torch's."""
    x, y = _two_floats(fc, b, [_arg(fc, args, kw, 0, "input", node), _arg(fc, args, kw, 1, "other", node)],
                       node, "xlogy")
    if not x.type.is_float:
        x, y = b.convert(x, dtype=fc.float_dtype), b.convert(y, dtype=fc.float_dtype)
    no_log = math_ops.logical_and(b, b.eq(x, _c(x, 0)), b.le(y, _c(y, 0)))  # (false for a NaN y)
    return b.mul(x, b.log(b.select(no_log, _c(y, 1), y)))


@torch_function("torch.sinc", "Tensor.sinc")
def _sinc(fc, b, args, kw, node):
    """torch.sinc(input): sin(πx)/(πx), 1 at 0."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    zero = b.eq(x, _c(x, 0))
    px = b.mul(b.select(zero, _c(x, 1), x), _c(x, math.pi))
    return b.select(zero, _c(x, 1), b.div(b.sin(px), px))


@torch_function("torch.nan_to_num", "Tensor.nan_to_num")
def _nan_to_num(fc, b, args, kw, node):
    """torch.nan_to_num(input, nan=0.0, posinf=None, neginf=None): the dtype's largest and lowest finite
    values replace the infinities by default."""
    x = float_tensor(fc, b, _arg(fc, args, kw, 0, "input", node), node)
    info = np.finfo(np.float32 if x.type.dtype == "f32" else np.float64)
    nan = _float_kw(fc, args, kw, 1, "nan", node, 0.0)
    given = lambda pos, name: _arg(fc, args, kw, pos, name, node, None) is not None  # noqa: E731 (None: default)
    pos = _float_kw(fc, args, kw, 2, "posinf", node, 0.0) if given(2, "posinf") else float(info.max)
    neg = _float_kw(fc, args, kw, 3, "neginf", node, 0.0) if given(3, "neginf") else float(info.min)
    y = b.select(b.eq(x, _c(x, math.inf)), _c(x, pos), x)
    y = b.select(b.eq(x, _c(x, -math.inf)), _c(x, neg), y)
    return b.select(b.ne(x, x), _c(x, nan), y)


for _name in ("exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos", "abs", "sigmoid", "relu", "pow",
              "sign"):
    torch_function(f"Tensor.{_name}")(_scalar_method(_name))
for _name, _op in (("lt", ast.Lt), ("le", ast.LtE), ("gt", ast.Gt), ("ge", ast.GtE), ("eq", ast.Eq),
                   ("ne", ast.NotEq), ("less", ast.Lt), ("greater", ast.Gt)):
    torch_function(f"torch.{_name}", f"Tensor.{_name}")(_comparison(_op))
for _name in ("and", "or", "xor", "not"):
    torch_function(f"torch.logical_{_name}", f"Tensor.logical_{_name}")(_logical(_name))
torch_function("torch.fmax", "Tensor.fmax")(_fmax_fmin(True))
torch_function("torch.fmin", "Tensor.fmin")(_fmax_fmin(False))
for _name, _fn in _UNARY.items():
    torch_function(f"torch.{_name}", f"Tensor.{_name}",
                   *[f"torch.special.{_name}"] * (_name in ("erf", "erfc", "erfinv")))(_fn)
for _name in ("erf", "erfc", "log2", "log10", "tan", "sinh", "cosh", "asin", "acos", "asinh", "acosh", "atanh",
              "ceil", "trunc", "isnan", "isinf", "isfinite"):
    torch_function(f"math.{_name}")(_math_function(_name, _UNARY[_name]))
torch_function("math.hypot")(_math_function("hypot", _hypot))
torch_function("math.copysign")(_math_function("copysign", _copysign))
torch_function("torch.clamp_min", "Tensor.clamp_min")(_clamp_one("maximum"))
torch_function("torch.clamp_max", "Tensor.clamp_max")(_clamp_one("minimum"))
torch_function("torch.special.expit")(_unary(lambda b, x: b.logistic(x)))
torch_function("torch.special.ndtri")(_unary(math_ops.probit))
torch_function("torch.special.log1p")(_prim_unary("log1p"))
torch_function("torch.special.expm1")(_prim_unary("expm1"))
torch_function("torch.special.logit")(_unary(lambda b, x: b.log(b.div(x, b.sub(_c(x, 1.0), x)))))
torch_function("torch.remainder", "Tensor.remainder")(_python_op(ast.Mod(), "remainder"))
torch_function("torch.floor_divide", "Tensor.floor_divide")(_python_op(ast.FloorDiv(), "floor_divide"))
for _name, _op in (("add", ast.Add()), ("sub", ast.Sub()), ("subtract", ast.Sub()), ("mul", ast.Mult()),
                   ("multiply", ast.Mult())):
    torch_function(f"torch.{_name}", f"Tensor.{_name}")(_scaled_op(_op, _name))
torch_function("math.fmod")(_math_function("fmod", _fmod))
