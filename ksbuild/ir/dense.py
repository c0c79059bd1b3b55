"""Dense constant tensors: the value of a `constant` equation (ONNX initializers, folded data).

A `Dense` is immutable: its bytes are fixed at construction and compared by content digest,
so equal constants compare equal and two functions that embed them print identically.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .types import Type, dtype_of, numpy_dtype


@dataclass(frozen=True, eq=False)
class Dense:
    """A dense row-major array of a literal shape: dtype, shape and its raw bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @staticmethod
    def of(arr) -> "Dense":
        """The Dense holding a copy of a numpy array (its dtype must be an IR dtype). Strings are
        held as their UTF-8 bytes, each followed by a NUL."""
        a = np.ascontiguousarray(arr)
        dtype = dtype_of(a)
        if dtype == "str":
            return Dense(dtype, tuple(int(d) for d in a.shape), b"".join(_utf8(s) + b"\0" for s in a.reshape(-1)))
        return Dense(dtype, tuple(int(d) for d in a.shape), a.tobytes())

    @property
    def type(self) -> Type:
        return Type(self.dtype, self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def array(self) -> np.ndarray:
        """The values as a read-only numpy array."""
        if self.dtype == "str":
            items = [t.decode("utf-8", "surrogateescape") for t in self.data.split(b"\0")[:-1]]
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(self.shape)
        return np.frombuffer(self.data, dtype=numpy_dtype(self.dtype)).reshape(self.shape)

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.dtype.encode() + repr(self.shape).encode() + self.data).hexdigest()

    @cached_property
    def text(self) -> str:
        """The bytes in base64 (the canonical text form)."""
        return base64.b64encode(self.data).decode("ascii")

    @staticmethod
    def from_text(t: Type, text: str) -> "Dense":
        """The inverse of `text` for a tensor type t; ValueError if the bytes do not fit."""
        data = base64.b64decode(text.encode("ascii"), validate=True)
        if t.dtype == "str":
            if data.count(b"\0") != int(np.prod(t.shape, dtype=np.int64)) or not data.endswith(b"\0"):
                raise ValueError(f"{len(data.split(bytes(1))) - 1} strings do not make a dense {t}")
            return Dense(t.dtype, tuple(t.shape), data)
        want = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(numpy_dtype(t.dtype)).itemsize
        if len(data) != want or not all(isinstance(d, int) for d in t.shape):
            raise ValueError(f"{len(data)} bytes do not make a dense {t}")
        return Dense(t.dtype, tuple(t.shape), data)

    def __eq__(self, other) -> bool:
        return isinstance(other, Dense) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"Dense({self.type}, sha256:{self.digest[:12]})"


def _utf8(s) -> bytes:
    """A string element as UTF-8 bytes (C strings end at the first NUL, so a NUL inside is refused)."""
    raw = s if isinstance(s, bytes) else str(s).encode("utf-8", "surrogateescape")
    if b"\0" in raw:
        raise ValueError(f"the string {s!r} holds a NUL character, which a C string cannot")
    return raw
