"""Value types of the IR: a dtype and a shape; a scalar is a tensor of shape ()."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

Dim = Union[int, str]
"""A dimension: a literal size, or a symbolic name bound by the caller (e.g. 'n')."""

FLOAT_DTYPES = ("f32", "f64")
"""Floats that arithmetic, tangents and cotangents use."""
INT_DTYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
STORAGE_DTYPES = ("f16", "bf16", "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f4e2m1",
                  "i4", "u4", "i2", "u2")
"""Storage-only dtypes (ONNX's narrow floats and ints): values are converted to f32 (or an int
type) to compute; only `convert` and the shape prims take them. One element per byte (two for
f16/bf16) in memory and in the C ABI."""
STRING_DTYPES = ("str",)
"""Strings (ONNX tensor(string)): NUL-terminated UTF-8, `ks_str` (`const char*`) in the C ABI.
Generated code only compares them (eq, ne) and moves the pointers (shape prims, select); it never
allocates or writes characters, so an output string points into an input or a constant."""
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",) + STORAGE_DTYPES + STRING_DTYPES
NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32,
                "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
                "bool": np.bool_, "f16": np.float16, "str": np.object_}
C_TYPES = {"f32": "float", "f64": "double", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
           "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "bool": "bool",
           "f16": "uint16_t", "bf16": "uint16_t", "f8e4m3fn": "uint8_t", "f8e4m3fnuz": "uint8_t",
           "f8e5m2": "uint8_t", "f8e5m2fnuz": "uint8_t", "f8e8m0": "uint8_t", "f4e2m1": "uint8_t",
           "i4": "uint8_t", "u4": "uint8_t", "i2": "uint8_t", "u2": "uint8_t", "str": "ks_str"}
"""C ABI element types; storage floats travel as their bit patterns (IEEE half in uint16_t, ...);
strings as `ks_str`, a typedef of `const char*` in the header."""
_ML_DTYPES = {"bf16": "bfloat16", "f8e4m3fn": "float8_e4m3fn", "f8e4m3fnuz": "float8_e4m3fnuz",
              "f8e5m2": "float8_e5m2", "f8e5m2fnuz": "float8_e5m2fnuz", "f8e8m0": "float8_e8m0fnu",
              "f4e2m1": "float4_e2m1fn", "i4": "int4", "u4": "uint4", "i2": "int2", "u2": "uint2"}


_C_BYTES = {"float": 4, "double": 8, "int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8, "uint8_t": 1,
            "uint16_t": 2, "uint32_t": 4, "uint64_t": 8, "bool": 1, "ks_str": 8}


def element_bytes(dtype: str) -> int:
    """The bytes of one element in generated code's buffers (a bool in a byte; a string as a pointer)."""
    return _C_BYTES[C_TYPES[dtype]]


def numpy_dtype(dtype: str):
    """The numpy scalar type of an IR dtype (the narrow ONNX types come from `ml_dtypes`)."""
    if dtype in NUMPY_DTYPES:
        return NUMPY_DTYPES[dtype]
    import ml_dtypes  # installed with onnx; needed only to evaluate the narrow ONNX types

    NUMPY_DTYPES[dtype] = getattr(ml_dtypes, _ML_DTYPES[dtype])
    return NUMPY_DTYPES[dtype]


def dtype_of(arr) -> str:
    """The IR dtype of a numpy array or scalar."""
    t = np.asarray(arr).dtype.type
    if t in (np.str_, np.bytes_):
        return "str"
    for k, v in NUMPY_DTYPES.items():
        if v is t:
            return k
    for k in _ML_DTYPES:
        if numpy_dtype(k) is t:
            return k
    raise KeyError(f"no IR dtype for numpy dtype {np.asarray(arr).dtype}")


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
        """True for the float dtypes arithmetic uses (f32, f64): the ones with tangents."""
        return self.dtype in FLOAT_DTYPES

    @property
    def is_int(self) -> bool:
        return self.dtype in INT_DTYPES

    @property
    def is_storage(self) -> bool:
        """True for storage-only dtypes (f16, bf16, f8*, i4, ..., and strings): no arithmetic on them."""
        return self.dtype in STORAGE_DTYPES or self.dtype in STRING_DTYPES

    @property
    def is_str(self) -> bool:
        return self.dtype in STRING_DTYPES

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
            return _floordiv_poly(a, b)
    raise ValueError(f"bad dim expression {ast.unparse(e)}")


def _floordiv_factor(a: Poly, b: Poly) -> str:
    """An opaque a // b factor, parenthesized whole: in a monomial '2*((h - 3) // (2))' it must not
    read as (2*(h - 3)) // 2."""
    return f"(({_text(a)}) // ({_text(b)}))"


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



def numel(dims) -> Dim:
    """The product of dims (a dim expression when any is symbolic)."""
    n: Dim = 1
    for d in dims:
        n = dim_mul(n, d)
    return n

def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return _dim(_floordiv_poly(_poly(a), _poly(b)))


def _floordiv_poly(a: Poly, b: Poly) -> Poly:
    """a // b: exact where b divides every term; by a number k, the multiples of k in a's constant term come
    out ((seq - 10) // 5 = seq // 5 - 2, so a strided conv's length torch writes as seq // 5 - 1 is the same
    dim); else an opaque factor."""
    k = _const(b)
    if k == 1:
        return a
    if k and k > 0:
        ca = _const(a)
        if ca is not None:
            return {(): ca // k} if ca // k else {}
        if all(c % k == 0 for c in a.values()):
            return {m: c // k for m, c in a.items()}
        q, r = divmod(a.get((), 0), k)
        if q:
            rest = {m: c for m, c in a.items() if m != ()}
            return _plus(_floordiv_poly(_plus(rest, {(): r} if r else {}), b), {(): q})
    exact = _divided(a, b)
    if exact is not None:
        return exact
    return {(_floordiv_factor(a, b),): 1}


def _divided(a: Poly, b: Poly) -> Poly | None:
    """a / b when b is one monomial dividing every term of a exactly ((4*batch*seq) // (2*seq) = 2*batch), else
    None."""
    if len(b) != 1:
        return None
    ((mb, cb),) = b.items()
    out: Poly = {}
    for m, c in a.items():
        rest = list(m)
        for factor in mb:
            if factor not in rest:
                return None
            rest.remove(factor)
        if c % cb:
            return None
        out[tuple(rest)] = out.get(tuple(rest), 0) + c // cb
    return out


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


_PROMOTION = ["bool", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64"]


def promote(a: str, b: str) -> str:
    """The dtype of a binary op on dtypes a and b (torch-like: float wins, wider wins)."""
    if a == b:
        return a
    if a not in _PROMOTION or b not in _PROMOTION:
        from ..errors import KsbuildError
        raise KsbuildError(f"cannot combine {a} and {b} values")
    return a if _PROMOTION.index(a) >= _PROMOTION.index(b) else b
