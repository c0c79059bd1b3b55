"""Value types of the IR: a dtype and a shape; a scalar is a tensor of shape ()."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

Dim = Union[int, str]
"""A dimension: a literal size, or a symbolic name bound by the caller (e.g. 'n')."""

DTYPES = ("f32", "f64", "i32", "i64", "bool")
FLOAT_DTYPES = ("f32", "f64")
INT_DTYPES = ("i32", "i64")
NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "bool": np.bool_}
C_TYPES = {"f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t", "bool": "bool"}


@dataclass(frozen=True)
class Type:
    """The type of an IR value: element dtype plus a shape of literal or symbolic dims."""

    dtype: str
    shape: tuple[Dim, ...] = ()

    def __post_init__(self):
        assert self.dtype in DTYPES, self.dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def scalar(self) -> "Type":
        """The element type."""
        return Type(self.dtype)

    def with_dtype(self, dtype: str) -> "Type":
        return Type(dtype, self.shape)

    def with_shape(self, shape: tuple[Dim, ...]) -> "Type":
        return Type(self.dtype, tuple(shape))

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def scalar(dtype: str) -> Type:
    return Type(dtype)


def dim_value(dim: Dim, env: dict[str, int]) -> int:
    """The concrete size of a dim given the values of symbolic dims (names or expressions of them)."""
    if isinstance(dim, int):
        return dim
    if dim.isidentifier():
        return int(env[dim])
    return int(eval(compile(dim, "<dim>", "eval"), {"__builtins__": {}}, dict(env)))  # only names and + - * //


# Symbolic dims are kept as canonical polynomials in the dim names (n - 1 + 1 prints as n), so
# shapes that are equal compare equal. A `//` stays an opaque factor.
Poly = dict  # monomial (sorted tuple of names) -> integer coefficient


def _poly(d: Dim) -> Poly:
    if isinstance(d, int):
        return {(): d} if d else {}
    import ast
    return _poly_node(ast.parse(d, mode="eval").body)


def _poly_node(e) -> Poly:
    import ast
    if isinstance(e, ast.Constant):
        return {(): e.value} if e.value else {}
    if isinstance(e, ast.Name):
        return {(e.id,): 1}
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return _scale(_poly_node(e.operand), -1)
    if isinstance(e, ast.BinOp):
        a, b = _poly_node(e.left), _poly_node(e.right)
        if isinstance(e.op, ast.Add):
            return _plus(a, b)
        if isinstance(e.op, ast.Sub):
            return _plus(a, _scale(b, -1))
        if isinstance(e.op, ast.Mult):
            return _times(a, b)
        if isinstance(e.op, ast.FloorDiv):
            return {(f"({_text(a)}) // ({_text(b)})",): 1} if not _const(b) or _const(b) != 1 else a
    raise ValueError(f"bad dim expression {ast.unparse(e)}")


def _const(p: Poly):
    return p.get((), 0) if set(p) <= {()} else None


def _plus(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c}


def _scale(a: Poly, k: int) -> Poly:
    return {m: c * k for m, c in a.items() if c * k}


def _times(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def _text(p: Poly) -> str:
    terms = sorted(p.items(), key=lambda mc: (-len(mc[0]), mc[0]))
    out = ""
    for m, c in terms:
        mono = "*".join(m)
        mag = abs(c)
        body = mono if mono and mag == 1 else f"{mag}*{mono}" if mono else str(mag)
        if not out:
            out = body if c > 0 else f"-{body}"
        else:
            out += f" + {body}" if c > 0 else f" - {body}"
    return out or "0"


def _dim(p: Poly) -> Dim:
    c = _const(p)
    if c is not None:
        return c
    return _text(p)


def canonical_dim(text: str) -> Dim:
    """A dim expression such as 'n*d' or '1 + (n - 1)' in canonical form ('d*n', 'n')."""
    return _dim(_poly(text))


def dim_add(a: Dim, b: Dim) -> Dim:
    """a + b for dims: an int when both are literals, else a canonical expression such as 'n + 1'."""
    return _dim(_plus(_poly(a), _poly(b)))


def dim_sub(a: Dim, b: Dim) -> Dim:
    return _dim(_plus(_poly(a), _scale(_poly(b), -1)))


def dim_mul(a: Dim, b: Dim) -> Dim:
    return _dim(_times(_poly(a), _poly(b)))


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    pa, pb = _poly(a), _poly(b)
    k = _const(pb)
    if k == 1:
        return a
    if k and all(c % k == 0 for c in pa.values()):
        return _dim({m: c // k for m, c in pa.items()})
    return _dim({(f"({_text(pa)}) // ({_text(pb)})",): 1})


def dim_names(dim: Dim) -> list[str]:
    """The symbolic names a dim mentions."""
    if isinstance(dim, int):
        return []
    import re
    return re.findall(r"[A-Za-z_][A-Za-z_0-9]*", dim)


def concrete_shape(t: Type, env: dict[str, int]) -> tuple[int, ...]:
    return tuple(dim_value(d, env) for d in t.shape)


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """numpy broadcasting of two shapes with symbolic dims; None if incompatible."""
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            return None
    return tuple(reversed(out))


def promote(a: str, b: str) -> str:
    """The dtype of a binary op on dtypes a and b (torch-like: float wins, wider wins)."""
    order = ["bool", "i32", "i64", "f32", "f64"]
    return a if order.index(a) >= order.index(b) else b
