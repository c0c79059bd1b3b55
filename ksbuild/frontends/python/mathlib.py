"""Operators and library functions the Python frontend accepts, each mapped to core prims.

Weak constants fold in Python; otherwise operands are promoted (torch rules: float wins over
int, the wider float wins, a Python literal takes the other operand's dtype).
"""
from __future__ import annotations

import ast
import math
import operator

from ...ir.core import Atom
from ...ir.types import Type, promote
from ...ops import math as math_ops
from .scope import Const

UNARY_MATH = {  # name -> (prim, Python fallback for constant folding)
    "exp": ("exp", math.exp), "log": ("log", math.log), "log1p": ("log1p", math.log1p),
    "expm1": ("expm1", math.expm1), "sqrt": ("sqrt", math.sqrt), "tanh": ("tanh", math.tanh),
    "sin": ("sin", math.sin), "cos": ("cos", math.cos), "atan": ("atan", math.atan),
    "fabs": ("abs", abs), "abs": ("abs", abs), "floor": ("floor", math.floor),
    "sigmoid": ("logistic", lambda x: 1 / (1 + math.exp(-x))),
    "lgamma": ("lgamma", math.lgamma), "digamma": ("digamma", None),
    "sign": ("sign", lambda v: float((v > 0) - (v < 0))),
}
MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}
ALIASES = {"arctan": "atan", "absolute": "abs"}


def common_type(fc, x, y, node) -> Type:
    """The dtype two values meet at."""
    if isinstance(x, Const) and isinstance(y, Const):
        from .scope import const_type
        return const_type(Const(x.value + y.value), fc.float_dtype)
    if isinstance(x, Const) or isinstance(y, Const):
        c, a = (x, y) if isinstance(x, Const) else (y, x)
        if isinstance(c.value, float) and not a.type.is_float and not isinstance(c.value, bool):
            return Type(fc.float_dtype)
        return a.type.scalar()
    return Type(promote(x.type.dtype, y.type.dtype))


def _arith(prim: str, py):
    def rule(fc, b, x, y, node):
        x, y = fc.numeric(x, node), fc.numeric(y, node)
        if isinstance(x, Const) and isinstance(y, Const):
            return _fold(fc, py, x, y, node)
        xa, ya = fc.unify(b, x, y, node)
        return getattr(b, prim)(xa, ya)
    return rule


def _fold(fc, py, x: Const, y: Const, node):
    try:
        return Const(py(x.value, y.value))
    except (ZeroDivisionError, OverflowError, ValueError) as e:
        raise fc.src.error(node, f"constant expression fails: {e}") from None


def _truediv(fc, b, x, y, node):
    """x / y is always a float division (Python semantics)."""
    x, y = fc.numeric(x, node), fc.numeric(y, node)
    if isinstance(x, Const) and isinstance(y, Const):
        return _fold(fc, operator.truediv, x, y, node)
    xa, ya = fc.unify(b, x, y, node)
    if not xa.type.is_float:
        ft = fc.float_dtype
        xa, ya = b.convert(xa, dtype=ft), b.convert(ya, dtype=ft)
    return b.div(xa, ya)


def _pow(fc, b, x, y, node):
    """x ** n with a small literal integer n is repeated multiplication; otherwise pow."""
    x, y = fc.numeric(x, node), fc.numeric(y, node)
    if isinstance(x, Const) and isinstance(y, Const):
        return _fold(fc, operator.pow, x, y, node)
    if isinstance(y, Const) and float(y.value).is_integer() and abs(y.value) <= 16 and not isinstance(x, Const):
        n = int(y.value)
        if n < 0 and not x.type.is_float:
            x = b.convert(x, dtype=fc.float_dtype)
        return b.ipow(x, n=n)
    if isinstance(y, Const) and y.value == 0.5:
        return b.sqrt(_as_float(fc, b, x, node))
    xa, ya = fc.unify(b, x, y, node)
    if not xa.type.is_float:
        xa, ya = b.convert(xa, dtype=fc.float_dtype), b.convert(ya, dtype=fc.float_dtype)
    return b.pow(xa, ya)


def _as_float(fc, b, x, node):
    if isinstance(x, Const):
        return fc.as_atom(b, Const(float(x.value)), Type(fc.float_dtype), node)
    return x if x.type.is_float else b.convert(x, dtype=fc.float_dtype)


def _logical(prim: str, py):
    """& | ^ on bools (masks such as (x > 0) & (y > 0)): logical and, or, xor."""
    def rule(fc, b, x, y, node):
        if isinstance(x, Const) and isinstance(y, Const):
            return Const(py(x.value, y.value))
        xa, ya = fc.unify(b, x, y, node)
        if xa.type.dtype != "bool":
            raise fc.src.error(node, f"bitwise operators on {xa.type} are not supported; on bools they are "
                                     "logical and/or/xor", hint="compare first, e.g. (x > 0) & (y > 0)")
        return getattr(b, prim)(xa, ya)
    return rule


BINOPS = {
    ast.Add: _arith("add", operator.add), ast.Sub: _arith("sub", operator.sub),
    ast.Mult: _arith("mul", operator.mul), ast.Div: _truediv,
    ast.FloorDiv: _arith("floordiv", operator.floordiv), ast.Mod: _arith("mod", operator.mod),
    ast.Pow: _pow, ast.BitAnd: _logical("and", operator.and_), ast.BitOr: _logical("or", operator.or_),
    ast.BitXor: _logical("ne", operator.xor),
}


def _compare(prim: str, py):
    def rule(fc, b, x, y, node):
        if isinstance(x, Const) and isinstance(y, Const):
            return Const(py(x.value, y.value))
        if isinstance(x, tuple) or isinstance(y, tuple):
            raise fc.src.error(node, "cannot compare tuples")
        xa, ya = fc.unify(b, x, y, node)
        return getattr(b, prim)(xa, ya)
    return rule


CMPOPS = {
    ast.Lt: _compare("lt", operator.lt), ast.LtE: _compare("le", operator.le),
    ast.Gt: _compare("gt", operator.gt), ast.GtE: _compare("ge", operator.ge),
    ast.Eq: _compare("eq", operator.eq), ast.NotEq: _compare("ne", operator.ne),
}


def call_builtin(fc, b, module: str, name: str, args, node):
    """A call to math.*, torch.* or a Python builtin."""
    name = ALIASES.get(name, name)
    fn = LIBRARY.get(name)
    allowed = {"builtin": BUILTINS, "math": MATH_NAMES, "torch": TORCH_NAMES}.get(module, set())
    if fn is None or name not in allowed:
        shown = name if module == "builtin" else f"{module}.{name}"
        raise fc.src.error(node, f"unsupported function '{shown}'",
                           hint=f"supported: {', '.join(fc.supported_names(module))}")
    if module == "math":
        refuse_tensor_in_math(fc, name, args, node)
    return fn(fc, b, args, node)


def refuse_tensor_in_math(fc, name: str, args, node) -> None:
    """math.f takes numbers: Python's math raises on a tensor of several elements, so the kernel would not run as
    Python (a scalar kernel under vmap is fine: its values are numbers in the source)."""
    t = next((a for a in args if isinstance(a, Atom) and a.type.rank), None)
    if t is not None:
        torch_name = {"fabs": "abs"}.get(name, name)
        raise fc.src.error(node, f"math.{name} takes numbers, and this argument is a tensor ({t.type}); Python's "
                                 "math would raise here", hint=f"torch.{torch_name}(...) works on tensors")


def scalar_names(module: str) -> set[str]:
    """The names of the scalar library (and the compiler's builtin forms) in a namespace: 'builtin', 'math'
    or 'torch' (namespaces.supported_names adds the tensor functions)."""
    return set({"builtin": BUILTINS | BUILTIN_FORMS, "math": MATH_NAMES, "torch": TORCH_NAMES}.get(module, set()))


BUILTIN_FORMS = {"len", "sum", "range", "reversed", "enumerate", "zip"}  # handled by the compiler and loops.py


def _arity(fc, args, n, node, name):
    if len(args) not in (n if isinstance(n, tuple) else (n,)):
        raise fc.src.error(node, f"{name}() takes {n} argument(s), {len(args)} given")


def _unary(name):
    prim, py = UNARY_MATH[name]

    def fn(fc, b, args, node):
        _arity(fc, args, 1, node, name)
        (x,) = args
        x = fc.numeric(fc.plain(b, x), node)
        if isinstance(x, Const):
            return _fold(fc, lambda a, _: py(a), x, Const(0), node)
        if prim in ("abs",):
            return b.abs(x)
        if prim == "sign":  # (torch's: 0 for NaN, as the constant fold)
            from ...ops.math import torch_sign
            return torch_sign(b, _as_float(fc, b, x, node))
        return getattr(b, prim)(_as_float(fc, b, x, node))
    return fn


def _minmax(prim, py):
    """Python's max/min builtins: max(a, b) is `b if b > a else a`, so of equal values the first wins, and a
    NaN counts only where it comes first (max(nan, 1.0) is nan, max(1.0, nan) is 1.0)."""
    def pick(fc, b, x, y, node):
        x, y = fc.numeric(fc.plain(b, x), node), fc.numeric(fc.plain(b, y), node)
        if isinstance(x, Const) and isinstance(y, Const):
            return _fold(fc, py, x, y, node)
        xa, ya = fc.unify(b, x, y, node)
        if not xa.type.is_float:
            return getattr(b, prim)(xa, ya)
        return b.select(b.gt(ya, xa) if prim == "max" else b.lt(ya, xa), ya, xa)

    def fn(fc, b, args, node):
        if len(args) < 2:
            raise fc.src.error(node, f"{prim}() needs at least two arguments here (no iterables)")
        out = args[0]
        for y in args[1:]:
            out = pick(fc, b, out, y, node)
        return out
    return fn


def _torch_minmax(largest: bool):
    """torch.maximum / torch.minimum (and torch.max(a, b)): where a = b each side gets half the gradient, and a
    NaN propagates, as torch's (Python's max/min builtins keep the first of equal values instead)."""
    name = "maximum" if largest else "minimum"

    def fn(fc, b, args, node):
        _arity(fc, args, 2, node, name)
        x, y = fc.numeric(fc.plain(b, args[0]), node), fc.numeric(fc.plain(b, args[1]), node)
        if isinstance(x, Const) and isinstance(y, Const):
            return _fold(fc, max if largest else min, x, y, node)
        xa, ya = fc.unify(b, x, y, node)
        return math_ops.extremum(b, xa, ya, largest)
    return fn


def clamp_bound(fc, b, x, bound, upper: bool, node):
    """torch.clamp's one bound: the bound where x is beyond it, else x; so the derivative is 1 for x at the
    bound (as torch's) and a NaN stays NaN."""
    x, bound = fc.numeric(fc.plain(b, x), node), fc.numeric(fc.plain(b, bound), node)
    if isinstance(x, Const) and isinstance(bound, Const):
        return _fold(fc, min if upper else max, x, bound, node)
    xa, ba = fc.unify(b, x, bound, node)
    if not xa.type.is_float:
        return b.min(xa, ba) if upper else b.max(xa, ba)
    return b.select(b.gt(xa, ba) if upper else b.lt(xa, ba), ba, xa)


def _cast(dtype_of):
    def fn(fc, b, args, node):
        _arity(fc, args, 1, node, "cast")
        (x,) = args
        dt = dtype_of(fc)
        if isinstance(x, str):
            return _float_text(fc, x, dt, node)
        if isinstance(x, Const):
            return Const(float(x.value) if dt in ("f32", "f64") else int(x.value))
        return x if x.type.dtype == dt else b.convert(x, dtype=dt)
    return fn


def _float_text(fc, text: str, dtype: str, node) -> Const:
    """float("inf"), float("-inf"), float("nan") (and other numeric strings) as constants."""
    if dtype in ("f32", "f64"):
        try:
            return Const(float(text))
        except ValueError:
            pass
    raise fc.src.error(node, f"unsupported cast of the string {text!r}",
                       hint='float("inf"), float("-inf") and float("nan") are constants (as are math.inf, math.nan)')


def _pow_call(fc, b, args, node):
    _arity(fc, args, 2, node, "pow")
    return _pow(fc, b, args[0], args[1], node)


def _atan2(fc, b, args, node):
    _arity(fc, args, 2, node, "atan2")
    x, y = [_as_float(fc, b, a, node) if not isinstance(a, Const) else a for a in args]
    xa, ya = fc.unify(b, x, y, node)
    return b.atan2(xa, ya)


def _where(fc, b, args, node):
    _arity(fc, args, 3, node, "where")
    p, x, y = args
    xa, ya = fc.unify(b, x, y, node)
    shape = () if isinstance(p, Const) or isinstance(p, tuple) else p.type.shape
    return b.select(fc.as_atom(b, p, Type("bool", shape), node), xa, ya)


def _relu(fc, b, args, node):
    """max(x, 0), with derivative 0 at 0 as torch's relu (ops.math.relu)."""
    _arity(fc, args, 1, node, "relu")
    (x,) = args
    if isinstance(x, Const):
        return _minmax("max", max)(fc, b, [x, Const(0.0)], node)
    from ...ops.math import relu
    return relu(b, x)


def _clamp(fc, b, args, node):
    _arity(fc, args, 3, node, "clamp")
    return clamp_bound(fc, b, clamp_bound(fc, b, args[0], args[1], False, node), args[2], True, node)


def _round(fc, b, args, node):
    """Python's round(x): the nearest integer (ties to even), as an int."""
    _arity(fc, args, 1, node, "round")
    (x,) = args
    if isinstance(x, Const):
        return Const(round(x.value))
    from ...ops.math import round_half_even
    x = fc.numeric(fc.plain(b, x), node)
    return b.convert(round_half_even(b, x), dtype="i64") if x.type.is_float else x


LIBRARY = {name: _unary(name) for name in UNARY_MATH}
LIBRARY.update({
    "max": _minmax("max", max), "min": _minmax("min", min),
    "maximum": _torch_minmax(True), "minimum": _torch_minmax(False),
    "float": _cast(lambda fc: fc.float_dtype), "int": _cast(lambda fc: "i64"),
    "pow": _pow_call, "atan2": _atan2, "where": _where, "relu": _relu, "clamp": _clamp, "round": _round,
})
BUILTINS = {"abs", "max", "min", "float", "int", "pow", "round"}
MATH_NAMES = {"exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos", "atan", "fabs", "floor", "lgamma",
              "pow", "atan2"}
TORCH_NAMES = {"exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos", "atan", "abs", "floor", "lgamma",
               "digamma", "sign",
               "pow", "atan2", "sigmoid", "maximum", "minimum", "where", "relu", "clamp", "arctan"}
