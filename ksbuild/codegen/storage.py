"""Where a tensor lives in generated C++: a base pointer expression and symbolic strides.

Views (broadcast, reshape of contiguous data, transpose, a loop's slice) are new strides on
the same base, so they cost nothing at run time. A splat literal has all strides zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from ..ir.types import Dim


def dim_expr(d: Dim) -> str:
    """A C++ expression of a dim (symbolic dims are int64_t variables; `//` is C++ `/` on sizes)."""
    if isinstance(d, int) or d.isidentifier():
        return str(d)
    return f"({d.replace('//', '/')})"


def product(dims: Sequence[Dim]) -> str:
    """A C++ expression for the product of dims ('1' for none; one number when every dim is one: 256, not 16 * 16)."""
    if all(isinstance(d, int) for d in dims):
        return str(math.prod(dims))
    parts = [dim_expr(d) for d in dims if d != 1]
    return " * ".join(parts) if parts else "1"


def contiguous_strides(shape: Sequence[Dim]) -> tuple[str, ...]:
    return tuple(product(shape[i + 1:]) for i in range(len(shape)))


@dataclass(frozen=True)
class Storage:
    """A strided view: element [i0, i1, ...] is base[i0 * s0 + i1 * s1 + ...]."""

    base: str
    shape: tuple[Dim, ...]
    strides: tuple[str, ...]
    contiguous: bool = True
    literal: str | None = None  # a splat constant: every element is this expression
    into: str = ""              # the buffer this view points into when base is an expression over it
    origin: str = ""            # with offset: base is (origin + offset), and elements are origin[offset + ...]
    offset: str = ""

    @property
    def root(self) -> str:
        """The buffer this view points into ("" for splats)."""
        return self.into or ("" if self.literal is not None else self.base)

    @staticmethod
    def buffer(base: str, shape) -> "Storage":
        return Storage(base, tuple(shape), contiguous_strides(shape))

    @staticmethod
    def splat(expr: str, shape) -> "Storage":
        return Storage("", tuple(shape), tuple("0" for _ in shape), False, expr)

    def at(self, idx: Sequence[str]) -> str:
        """The element expression at index expressions idx (one per dim)."""
        if self.literal is not None:
            return self.literal
        terms = [_term(i, s) for i, s in zip(idx, self.strides)]
        terms = [t for t in terms if t]
        if self.offset:  # x[k * n + i], not (x + k * n)[i]
            return f"{self.origin}[{' + '.join([self.offset] + terms)}]"
        return f"{self.base}[{' + '.join(terms) if terms else '0'}]"

    def broadcast(self, shape) -> "Storage":
        """This view broadcast (numpy rules) to a larger shape."""
        lead = len(shape) - len(self.shape)
        strides = ["0"] * lead + [("0" if d == 1 and shape[lead + i] != 1 else s)
                                  for i, (d, s) in enumerate(zip(self.shape, self.strides))]
        return replace(self, shape=tuple(shape), strides=tuple(strides), contiguous=False)

    def permute(self, perm) -> "Storage":
        return replace(self, shape=tuple(self.shape[p] for p in perm), strides=tuple(self.strides[p] for p in perm),
                       contiguous=False)

    def reshape(self, shape) -> "Storage | None":
        """A view with a new shape, or None if this view is not contiguous."""
        if self.literal is not None:
            return Storage.splat(self.literal, shape)
        if not (self.contiguous or self.dense()):
            return None
        return replace(self, shape=tuple(shape), strides=contiguous_strides(shape), contiguous=True)

    def dense(self) -> bool:
        """Whether this view's strides are those of a row-major buffer of its shape (axes of size 1 aside),
        e.g. the 1x1 windows of a 1x1 convolution: such a view reshapes without a copy."""
        wanted = contiguous_strides(self.shape)
        return self.literal is None and all(d == 1 or s == w for d, s, w in zip(self.shape, self.strides, wanted))

    def slice0(self, k: str) -> "Storage":
        """Element k along axis 0 (a loop's per-iteration slice)."""
        if self.literal is not None:
            return Storage.splat(self.literal, self.shape[1:])
        return self._moved(_term(k, self.strides[0]), self.shape[1:], self.strides[1:], self.contiguous)

    def take(self, axis: int, i: str) -> "Storage":
        """Element i along `axis` (that axis dropped)."""
        if self.literal is not None:
            return Storage.splat(self.literal, self.shape[:axis] + self.shape[axis + 1:])
        return self._moved(_term(i, self.strides[axis]), self.shape[:axis] + self.shape[axis + 1:],
                           self.strides[:axis] + self.strides[axis + 1:], self.contiguous and axis == 0)

    def window(self, axis: int, count, size: int, stride: int, dilation: int) -> "Storage":
        """Sliding windows along axis: [.., n, ..] -> [.., count, size, ..], element [o, k] at o*stride + k*dilation."""
        shape = self.shape[:axis] + (count, size) + self.shape[axis + 1:]
        if self.literal is not None:
            return Storage.splat(self.literal, shape)
        s = self.strides[axis]
        strides = self.strides[:axis] + (_scaled(s, stride), _scaled(s, dilation)) + self.strides[axis + 1:]
        return replace(self, shape=shape, strides=strides, contiguous=False)

    def narrow(self, axis: int, start, size) -> "Storage":
        """The range start:start+size of `axis`."""
        shape = self.shape[:axis] + (size,) + self.shape[axis + 1:]
        if self.literal is not None:
            return Storage.splat(self.literal, shape)
        contiguous = self.contiguous and all(d == 1 for d in self.shape[:axis])
        return self._moved(_term(dim_expr(start), self.strides[axis]), shape, self.strides, contiguous)

    def _moved(self, off: str, shape, strides, contiguous: bool) -> "Storage":
        """This view moved on by the offset off (a C++ expression, "" for none) with a new shape and strides;
        offsets add up into one (x + k * n + i, not ((x + k * n) + i))."""
        if not off:
            return replace(self, shape=tuple(shape), strides=tuple(strides), contiguous=contiguous)
        origin = self.origin or self.base
        offset = f"{self.offset} + {off}" if self.offset else off
        return Storage(f"({origin} + {offset})", tuple(shape), tuple(strides), contiguous, into=self.root,
                       origin=origin, offset=offset)


def _scaled(s: str, k: int) -> str:
    if s == "0" or k == 1:
        return s
    if s.isdigit():
        return str(k * int(s))
    return f"{k} * {s}" if " " not in s else f"{k} * ({s})"


def _term(i: str, s: str) -> str:
    """The offset of index i along an axis of stride s ("" for none): i, s, a number, or i * s."""
    if s == "0" or i == "0":
        return ""
    if i == "1" or (i.isdigit() and s.isdigit()):
        return s if i == "1" else str(int(i) * int(s))
    return i if s == "1" else f"{i} * {s}" if " " not in s else f"{i} * ({s})"
