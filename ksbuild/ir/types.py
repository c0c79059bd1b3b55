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


def _operand(d: Dim) -> str:
    return str(d) if isinstance(d, int) or d.isidentifier() else f"({d})"


def dim_add(a: Dim, b: Dim) -> Dim:
    """a + b for dims: folded when both are literals, else an expression such as 'n + 1'."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    if isinstance(b, int) and b < 0:
        return f"{_operand(a)} - {-b}"
    return f"{_operand(a)} + {_operand(b)}"


def dim_sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    if a == b:
        return 0
    return f"{_operand(a)} - {_operand(b)}"


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{_operand(a)} * {_operand(b)}"


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if b == 1:
        return a
    return f"{_operand(a)} // {_operand(b)}"


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
