"""Values of an ONNX graph during import: IR atoms, or arrays known at import time.

Initializers, Constant nodes and everything computed only from them are *known*: a numpy
array, folded at import time so shapes, axes and pads are static, as the IR needs them. The
shape of a tensor with symbolic dims is known too, as an object array whose entries are ints
and `SymDim`s, so `x.view(x.size(0), -1)` exported by torch stays static for any batch size.
A known value becomes an atom only when a computation needs it (a literal or a `constant`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import KsbuildError, Location
from ...ir.core import Atom, Lit
from ...ir.types import Dim, Type, dim_add, dim_floordiv, dim_mul, dim_sub, dtype_of


class SymDim:
    """A symbolic dim inside a known shape array; + - * // keep it a dim."""

    __slots__ = ("dim",)

    def __init__(self, dim: Dim):
        self.dim = dim

    @staticmethod
    def wrap(d: Dim):
        return d if isinstance(d, int) else SymDim(d)

    @staticmethod
    def unwrap(v) -> Dim:
        d = v.dim if isinstance(v, SymDim) else v
        return d if isinstance(d, str) else int(d)

    def _op(self, other, fn, swap=False):
        o = other.dim if isinstance(other, SymDim) else other
        if not isinstance(o, (int, str, np.integer)):
            return NotImplemented
        o = o if isinstance(o, str) else int(o)
        return SymDim.wrap(fn(o, self.dim) if swap else fn(self.dim, o))

    def __add__(self, o):
        return self._op(o, dim_add)

    def __radd__(self, o):
        return self._op(o, dim_add, True)

    def __sub__(self, o):
        return self._op(o, dim_sub)

    def __rsub__(self, o):
        return self._op(o, dim_sub, True)

    def __mul__(self, o):
        return self._op(o, dim_mul)

    def __rmul__(self, o):
        return self._op(o, dim_mul, True)

    def __floordiv__(self, o):
        return self._op(o, dim_floordiv)

    def __rfloordiv__(self, o):
        return self._op(o, dim_floordiv, True)

    def __eq__(self, o):
        return isinstance(o, SymDim) and o.dim == self.dim

    def __hash__(self):
        return hash(self.dim)

    def __repr__(self):
        return f"SymDim({self.dim!r})"


def is_symbolic(arr: np.ndarray | None) -> bool:
    """True for a known array holding symbolic dims (object dtype, not strings)."""
    return arr is not None and arr.dtype == object and not is_strings(arr)


def is_strings(arr: np.ndarray | None) -> bool:
    """True for a known array of strings (object dtype: numpy's str dtype would drop trailing NULs)."""
    return arr is not None and arr.dtype == object and arr.size > 0 and \
        all(isinstance(v, (str, bytes)) for v in arr.flat)


def shape_array(shape: Sequence[Dim]) -> np.ndarray:
    """A shape as a known i64 array, or an object array when some dim is symbolic."""
    if all(isinstance(d, int) for d in shape):
        return np.array(shape, dtype=np.int64).reshape(len(shape))
    out = np.empty(len(shape), dtype=object)
    for i, d in enumerate(shape):
        out[i] = SymDim.wrap(d)
    return out


def normalize_symbolic(r):
    """A symbolic fold's result as a known array: object dtype while it holds a symbolic dim, else i64
    (bools stay bools)."""
    if r is None or isinstance(r, Val):
        return r
    arr = np.asarray(r, dtype=object) if not isinstance(r, np.ndarray) else r
    if arr.dtype != object:
        return arr
    if any(isinstance(v, SymDim) for v in arr.reshape(-1)):
        return arr
    if all(isinstance(v, (bool, np.bool_)) for v in arr.reshape(-1)) and arr.size:
        return arr.astype(bool)
    return arr.astype(np.int64)


def dims_of(arr: np.ndarray) -> list[Dim]:
    """The entries of a known 1-D shape array as dims."""
    return [SymDim.unwrap(v) for v in np.asarray(arr).reshape(-1)]


class Val:
    """One ONNX value: an atom, a known array, or both (an atom made from the array on demand).

    `dtype` is the ONNX element type (an IR dtype); a storage dtype such as f16 is computed in
    f32, so the atom's dtype may differ. A sequence (`seq`) is its elements stacked along axis 0;
    an optional value has `present`, the bool atom that says whether it is there (ops_sequence.py); a
    symbolic dim cast to float is an atom that remembers the dims (`dims`), for Range."""

    __slots__ = ("atom", "known", "dtype", "seq", "present", "dims")

    def __init__(self, atom: Atom | None = None, known: np.ndarray | None = None, dtype: str | None = None,
                 seq: bool = False, present: Atom | None = None, dims: np.ndarray | None = None):
        self.atom = atom
        self.seq, self.present = seq, present
        self.dims = dims  # a float value that is dims cast (Cast(Shape(x)[1]) to float): those dims
        self.known = known
        self.dtype = dtype or (atom.type.dtype if atom is not None else _known_dtype(known))

    @property
    def shape(self) -> tuple[Dim, ...]:
        if self.atom is not None:
            return self.atom.type.shape
        return tuple(int(d) for d in self.known.shape)


def _known_dtype(arr: np.ndarray) -> str:
    return "str" if is_strings(arr) else "i64" if arr.dtype == object else dtype_of(arr)


COMPUTE_DTYPE = {"f16": "f32", "bf16": "f32", "f8e4m3fn": "f32", "f8e4m3fnuz": "f32", "f8e5m2": "f32",
                 "f8e5m2fnuz": "f32", "f8e8m0": "f32", "f4e2m1": "f32", "i4": "i8", "u4": "u8", "i2": "i8",
                 "u2": "u8"}
"""The dtype a storage dtype computes in."""


def compute_dtype(dtype: str) -> str:
    return COMPUTE_DTYPE.get(dtype, dtype)


def atom_of_array(b, arr: np.ndarray) -> Atom:
    """A known numeric array as an atom (a literal or a constant); storage dtypes in their compute dtype."""
    from ...ops.create import array
    arr = np.asarray(arr)
    cdt = compute_dtype(dtype_of(arr))
    if cdt != dtype_of(arr):
        arr = arr.astype(np.float32) if cdt == "f32" else arr.astype(np.int8 if cdt == "i8" else np.uint8)
    return array(b, arr)


def atom_of_shape(b, arr: np.ndarray) -> Atom:
    """A known 1-D array with symbolic dims as an i64 atom (dim_size per symbolic entry)."""
    parts = []
    for v in arr.reshape(-1):
        d = SymDim.unwrap(v)
        parts.append(Lit(d, Type("i64")) if isinstance(d, int) else b.dim_size(dim=d))
    if arr.ndim == 0:
        return parts[0]
    from ...ops.shape import stack
    out = stack(b, parts, 0) if len(parts) > 1 else b.reshape(parts[0], shape=(1,))
    return b.reshape(out, shape=tuple(int(d) for d in arr.shape)) if arr.ndim > 1 else out


ONNX_DTYPES = {"FLOAT": "f32", "DOUBLE": "f64", "INT8": "i8", "INT16": "i16", "INT32": "i32", "INT64": "i64",
               "UINT8": "u8", "UINT16": "u16", "UINT32": "u32", "UINT64": "u64", "BOOL": "bool",
               "FLOAT16": "f16", "BFLOAT16": "bf16", "FLOAT8E4M3FN": "f8e4m3fn", "FLOAT8E4M3FNUZ": "f8e4m3fnuz",
               "FLOAT8E5M2": "f8e5m2", "FLOAT8E5M2FNUZ": "f8e5m2fnuz", "FLOAT8E8M0": "f8e8m0",
               "FLOAT4E2M1": "f4e2m1", "INT4": "i4", "UINT4": "u4", "INT2": "i2", "UINT2": "u2",
               "STRING": "str"}


def onnx_dtype(elem_type: int, where: str, loc: Location) -> str:
    """The IR dtype of an ONNX TensorProto element type."""
    from onnx import TensorProto
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    if name not in ONNX_DTYPES:
        raise KsbuildError(f"{where} has element type {name}, which is not supported", loc,
                           hint="supported: tensors of float, double, float16, bfloat16, float8, ints, bool, string")
    return ONNX_DTYPES[name]
