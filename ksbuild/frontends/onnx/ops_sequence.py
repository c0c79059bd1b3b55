"""ONNX sequences and optionals, in the form the C ABI carries them (docs/onnx.md).

A sequence whose elements share one shape is one tensor: its elements stacked along a new first
axis, whose length is a dim of its own (`<name>_len` for a graph input). An optional value is its
value (a tensor or a sequence) and a bool scalar that says whether it is there (`<name>_present`).
The handlers here convert between those forms and tensors; the shape ops do the work. A
sequence of tensors of different shapes (ragged) has no such form and is a located error.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type, dim_add, dim_mul, dim_sub
from ...ops import index as ix
from ...ops import shape as sh
from .graph import handler
from .node import Node
from .values import Val

RAGGED_HINT = ("ksbuild passes a sequence as one tensor, its elements stacked, so they must all have one shape "
               "(docs/onnx.md, 'Sequences and optionals')")


def sequence(n: Node, i: int) -> Val:
    """Input i, which must be a sequence."""
    v = n.val(i)
    if not v.seq:
        raise n.error(f"{n.op}: input {i} ('{n.proto.input[i]}') is a tensor, not a sequence")
    return v


def _stacked(n: Node, i: int):
    """(the atom of sequence input i: its elements stacked along axis 0, its Val)."""
    v = sequence(n, i)
    return n.x(i), v


def _seq(atom, dtype: str) -> Val:
    return Val(atom, None, dtype, seq=True)


@handler("SequenceConstruct")
def sequence_construct(n: Node):
    xs = n.xs()
    if len({x.type for x in xs}) > 1:
        raise n.unsupported("a sequence of tensors of different shapes or types ("
                            + ", ".join(str(x.type) for x in xs) + ")", RAGGED_HINT)
    return [_seq(sh.stack(n.b, xs, 0), n.val(0).dtype)]


@handler("SequenceLength")
def sequence_length(n: Node):
    s, _ = _stacked(n, 0)
    return [ix.dim_atom(n.b, s.type.shape[0])]


@handler("SequenceAt")
def sequence_at(n: Node):
    s, v = _stacked(n, 0)
    pos = n.x(1)
    if pos.type.rank:
        raise n.error(f"SequenceAt: the position must be a scalar, got {pos.type}")
    return [Val(ix.gather(n.b, s, pos, 0), None, v.dtype)]


def _known_position(n: Node, i: int, length, default):
    """Input i (a position in a sequence of `length` elements, negative counting from the end) as an int."""
    if not n.has(i):
        return default
    given = np.asarray(n.const(i, "the position"))
    if given.size != 1 or given.dtype.kind not in "iu":
        raise n.error(f"{n.op}: the position must be one integer, got {given.tolist()}")
    p = int(given.reshape(()))
    if p < 0:
        if not isinstance(length, int):
            raise n.unsupported("a negative position in a sequence of run-time length")
        p += length
    if p < 0 or (isinstance(length, int) and p > length):
        raise n.error(f"{n.op}: position {p} is outside the sequence of {length} elements")
    return p


def _pieces(n: Node, s, cuts: list) -> list:
    """The stacked elements of s between consecutive cuts (slices of axis 0; empty ones left out)."""
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        if lo != hi:
            out.append(n.b.slice(s, axis=0, start=lo, stop=hi))
    return out


@handler("SequenceInsert")
def sequence_insert(n: Node):
    (s, v), x = _stacked(n, 0), n.x(1)
    if x.type.with_shape(s.type.shape[1:]) != x.type or x.type.dtype != s.type.dtype:
        raise n.unsupported(f"inserting a {x.type} into a sequence of {s.type.with_shape(s.type.shape[1:])}",
                            RAGGED_HINT)
    length = s.type.shape[0]
    at = _known_position(n, 2, length, length)
    parts = _pieces(n, s, [0, at]) + [sh.unsqueeze(n.b, x, 0)] + _pieces(n, s, [at, length])
    return [_seq(sh.concatenate(n.b, parts, 0), v.dtype)]


@handler("SequenceErase")
def sequence_erase(n: Node):
    s, v = _stacked(n, 0)
    length = s.type.shape[0]
    at = _known_position(n, 1, length, dim_sub(length, 1))
    if at == length:
        raise n.error(f"{n.op}: position {at} is outside the sequence of {length} elements")
    parts = _pieces(n, s, [0, at]) + _pieces(n, s, [dim_add(at, 1), length])
    if not parts:
        raise n.unsupported("erasing the only element of a sequence (an empty sequence has no element shape)")
    return [_seq(sh.concatenate(n.b, parts, 0), v.dtype)]


@handler("SplitToSequence")
def split_to_sequence(n: Node):
    """Pieces of one size along axis, stacked. Without `split` the pieces have size 1 and keepdims=0 drops
    the axis; with a scalar split keepdims is ignored, as the operator's text says, except for pieces of 1
    with keepdims=0, which drop it as onnxruntime does (torch exports unbind so)."""
    x = n.x(0)
    if not x.type.rank:
        raise n.error("SplitToSequence needs a tensor of rank 1 or more")
    axis = sh.norm_axis(n.b, n.attr("axis", 0), x.type.rank)
    keep = bool(n.attr("keepdims", 1))
    size = x.type.shape[axis]
    if not n.has(1):
        chunk, count = 1, size
    else:
        split = np.asarray(n.const(1, "split")).astype(np.int64)
        sizes = [int(split)] if split.ndim == 0 else [int(k) for k in split.reshape(-1)]
        if not sizes or min(sizes) <= 0:
            raise n.error(f"SplitToSequence: split must hold positive sizes, got {sizes}")
        chunk = sizes[0]
        keep = keep or chunk != 1 or split.ndim == 1
        if split.ndim == 1 and len(set(sizes)) > 1:
            raise n.unsupported(f"splitting into pieces of sizes {sizes} (they differ)", RAGGED_HINT)
        if chunk == 1 and split.ndim == 0:
            count = size
        elif not isinstance(size, int):
            raise n.unsupported(f"pieces of {chunk} along the axis of run-time size {size} (whether they are all "
                                "of one size depends on it)", RAGGED_HINT)
        elif size % chunk or (split.ndim == 1 and chunk * len(sizes) != size):
            raise n.unsupported(f"splitting {size} into pieces of {sizes if split.ndim else chunk} (the pieces "
                                "differ, or do not make up the axis)", RAGGED_HINT)
        else:
            count = size // chunk
    shape = list(x.type.shape)
    pieces = shape[:axis] + [count, chunk] + shape[axis + 1:]
    y = sh.reshape(n.b, x, pieces)
    if axis:  # the piece axis (at `axis`) to the front
        y = n.b.transpose(y, perm=tuple([axis] + [k for k in range(len(pieces)) if k != axis]))
    if not keep:
        y = sh.squeeze(n.b, y, [axis + 1])
    return [_seq(y, n.val(0).dtype)]


@handler("ConcatFromSequence")
def concat_from_sequence(n: Node):
    s, v = _stacked(n, 0)
    rank = s.type.rank - 1
    new_axis = bool(n.attr("new_axis", 0))
    if not rank and not new_axis:
        raise n.error("ConcatFromSequence of scalars needs new_axis=1 (there is no axis to join them along)")
    axis = sh.norm_axis(n.b, n.attr("axis"), rank + 1 if new_axis else rank)
    if new_axis:
        return [Val(sh.move_axis0(n.b, s, axis), None, v.dtype)]
    moved = sh.move_axis0(n.b, s, axis)  # [..., length, d_axis, ...]
    shape = list(moved.type.shape)
    merged = shape[:axis] + [dim_mul(shape[axis], shape[axis + 1])] + shape[axis + 2:]
    return [Val(sh.reshape(n.b, moved, merged), None, v.dtype)]


# ---- optionals ---------------------------------------------------------------------------------------

@handler("Optional")
def optional(n: Node):
    if n.has(0):
        v = n.val(0)
        n.attr("type", None)
        return [Val(v.atom, v.known, v.dtype, seq=v.seq, present=Lit(True, Type("bool")))]
    raise n.unsupported("an empty Optional made in the graph (its value has no shape to pass)")


@handler("OptionalHasElement")
def optional_has_element(n: Node):
    if not n.has(0):
        return [Lit(False, Type("bool"))]
    v = n.val(0)
    return [v.present if v.present is not None else Lit(True, Type("bool"))]


@handler("OptionalGetElement")
def optional_get_element(n: Node):
    v = n.val(0)
    return [Val(v.atom, v.known, v.dtype, seq=v.seq)]
