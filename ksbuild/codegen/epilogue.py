"""Emit the epilogue of a contract or convolve (transforms/fuse_epilogue.py): the elementwise equations
that follow a product, applied to each element as the product stores it.

The prelude's kernels (ks::tiled_gemm, ks::packed_gemm, ks::conv) take the epilogue as a C++ lambda,
`epi(index..., value) -> value`, called for every element of the result: its body is the epilogue's
equations emitted at one index of the result, as inside a fusion loop nest. Where a kernel takes no
lambda (a BLAS call, a loop nest) or an operand cannot be read at that index, the product is stored
first and the epilogue runs over it in place, as the fusion it came from.
"""
from __future__ import annotations

import re
from typing import Sequence

from ..ir.core import Eqn, Func
from ..ir.types import numel
from .cpp import Writer
from .storage import Storage


def extras(eqn: Eqn) -> list:
    """The operands of an equation's epilogue (its last operands)."""
    body: Func = eqn.params["epilogue"]
    n = len(body.params) - 1
    return list(eqn.ins[len(eqn.ins) - n:]) if n else []


def declare(w: Writer, eqn: Eqn, index: Sequence[str], shape, params: Sequence[str], views=None) -> str | None:
    """Declare `const auto <name> = [&](int64_t p..., T v) {...};` computing the epilogue of the element at
    `index` (one C++ expression per axis of `shape`, the region the epilogue runs over) from the lambda's
    parameters `params` (index names) and the product's value; the lambda's name, or None when an operand
    cannot be read in `shape` (views(storage) maps an operand's storage, broadcast to the result's shape,
    to `shape`, or returns None)."""
    body: Func = eqn.params["epilogue"]
    bound = _bind(w, body, extras(eqn), eqn.outs[0].type.shape, views)
    if bound is None:
        return None
    c = w.ctype(eqn.outs[0].type)
    name, value = w.namer.fresh("epilogue"), w.namer.fresh("v")
    header = len(w.lines)
    w.line(f"const auto {name} = [&]({', '.join(f'int64_t {p}' for p in params)}, {c} {value}) {{")
    saved = (dict(w.env), dict(w.local), w.region, w.escaping)
    w.env.update(bound)
    w.local = {body.params[0]: value}
    w.region, w.escaping = (list(index), tuple(shape)), {}
    w.depth += 1
    for e in body.eqns:
        e.prim.emit(w, e)
    w.line(f"return {w.scalar(body.results[0])};")
    w.depth -= 1
    w.line("};")
    w.env, w.local, w.region, w.escaping = saved
    _unname_unused(w, header, params)
    return name


def _bind(w: Writer, body: Func, operands, out_shape, views) -> dict | None:
    """The epilogue's operand parameters bound to storages (or scalar expressions) readable in the region."""
    bound = {}
    for p, a in zip(body.params[1:], operands):
        if not a.type.rank:
            bound[p] = w.scalar(a)
            continue
        s = w.storage(a).broadcast(out_shape)
        s = views(s) if views is not None else s
        if s is None:
            return None
        bound[p] = s
    return bound


def _unname_unused(w: Writer, header: int, params: Sequence[str]) -> None:
    """Drop the names of the lambda's index parameters its body does not read (-Wunused-parameter)."""
    text = "\n".join(w.lines[header + 1:])
    line = w.lines[header]
    for p in params:
        if not re.search(rf"\b{re.escape(p)}\b", text):
            line = line.replace(f"int64_t {p},", "int64_t,", 1)
    w.lines[header] = line


def merge_tail(s: Storage, keep: int) -> Storage | None:
    """The view s with its axes from `keep` on merged into one (a broadcast or a row-major run of them), or
    None when they are laid out otherwise."""
    tail = s.shape[keep:]
    if s.literal is not None:
        return Storage.splat(s.literal, s.shape[:keep] + (numel(tail),))
    strides = s.strides[keep:]
    if all(t == "0" for t in strides):
        merged = "0"
    elif Storage.buffer("", tail).strides == tuple(strides):
        merged = "1"
    else:
        return None
    return Storage(s.base, s.shape[:keep] + (numel(tail),), s.strides[:keep] + (merged,), False, root=s.root)
