"""Rules of the simplify pass that give one form to what two exporters write differently: chains of views,
negated comparisons, selects on a literal condition.

torch.export and torch.onnx.export spell the same reshapes and transposes in different ways (an LSTM's stacked steps
through a transpose of a unit axis or through a reshape; kᵀ of a 4-d key as one transpose, or through a reshape to
3-d and back; `x != y` as ne or as not(eq); T5's float mask as where(True, bias, min) over the batch or as the bias
itself). Each rule gives the same values, so the pipeline makes one IR of both (docs/torch-export.md, "One
network, one code").
"""
from __future__ import annotations

import numpy as np

from ..ir.builder import Builder
from ..ir.core import Atom, Eqn, Lit, Var

NEGATED = {"eq": "ne", "ne": "eq"}
"""Comparisons whose logical not is another comparison for every input, NaN included (not so lt and ge)."""


def one_form_rules(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """The first of this module's rules that applies to eqn, or None."""
    return unit_transpose(b, eqn, ins) or compose_reshapes(b, eqn, ins, made) or \
        transpose_inside_reshapes(b, eqn, ins, made, once) or negated_comparison(b, eqn, ins, made, once) or \
        broadcast_chosen_side(b, eqn, ins)


def unit_transpose(b: Builder, eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """transpose(x, p) = reshape(x) when p moves only axes of size 1 (the others keep their order): the same
    elements in the same order. torch.export's LSTM moves a unit direction axis past the batch so, ONNX's
    reshapes."""
    if eqn.prim.name != "transpose" or isinstance(ins[0], Lit):
        return None
    shape = ins[0].type.shape
    moved = [a for a in eqn.params["perm"] if shape[a] != 1]
    if moved != sorted(moved):
        return None
    out = eqn.outs[0].type.shape
    return ins[0] if tuple(shape) == tuple(out) else b.reshape(ins[0], shape=out)


def compose_reshapes(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn]) -> Atom | None:
    """reshape(reshape(x, s), t) = reshape(x, t), and a reshape to x's own shape is x (row-major order is kept by
    each reshape, so only the last shape matters)."""
    if eqn.prim.name != "reshape" or isinstance(ins[0], Lit):
        return None
    x = ins[0]
    inner = made.get(x)
    if inner is not None and inner.prim.name == "reshape":
        x = inner.ins[0]
    out = tuple(eqn.outs[0].type.shape)
    if tuple(x.type.shape) == out:
        return x
    return b.reshape(x, shape=out) if x is not ins[0] else None


def transpose_inside_reshapes(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn],
                              once: set[Var]) -> Atom | None:
    """reshape(transpose(reshape(x, [a·b, c, d]), [0, 2, 1]), [a, b, d, c]) = transpose(x, [0, 1, 3, 2]): leading axes
    merged into one, the others permuted and the merged axis split again is a permutation of the others alone (the
    transpose read once; split into other leading axes, x is reshaped to them first: Llama's keys [B, Hkv, r, L, E]
    merged to [B·H, L, E] and split to [B, H, E, L]). torch.onnx.export(dynamo=True) transposes attention's kᵀ so."""
    t = made.get(ins[0]) if eqn.prim.name == "reshape" and eqn.ins[0] in once else None
    if t is None or t.prim.name != "transpose" or t.params["perm"][0] != 0:
        return None
    merge = made.get(t.ins[0])
    if merge is None or merge.prim.name != "reshape" or isinstance(merge.ins[0], Lit):
        return None
    x, mid, out = merge.ins[0].type.shape, merge.outs[0].type.shape, eqn.outs[0].type.shape
    k, j = len(x) - len(mid) + 1, len(out) - len(mid) + 1  # the leading axes merged into, and split from, axis 0
    turned = tuple(mid[p] for p in t.params["perm"])
    if k < 1 or j < 1 or tuple(x[k:]) != tuple(mid[1:]) or tuple(out[j:]) != turned[1:]:
        return None
    lead = tuple(out[:j])
    src = merge.ins[0] if tuple(x[:k]) == lead else b.reshape(merge.ins[0], shape=lead + tuple(mid[1:]))
    return b.transpose(src, perm=tuple(range(j)) + tuple(j - 1 + p for p in t.params["perm"][1:]))


def negated_comparison(b: Builder, eqn: Eqn, ins: list[Atom], made: dict[Var, Eqn], once: set[Var]) -> Atom | None:
    """not(x == y) = x != y and not(x != y) = x == y (the comparison read once): torch.onnx.export writes
    `x != y` as Not(Equal(x, y))."""
    negation = eqn.prim.name == "logic" and eqn.params["op"] == "not"
    cmp = made.get(ins[0]) if negation and eqn.ins[0] in once and isinstance(ins[0], Var) else None
    if cmp is None or cmp.prim.name != "compare" or cmp.params["op"] not in NEGATED:
        return None
    return b.compare(*cmp.ins, op=NEGATED[cmp.params["op"]])


def broadcast_chosen_side(b: Builder, eqn: Eqn, ins: list[Atom]) -> Atom | None:
    """select(True, a, c) = a broadcast to the result's shape (select(False, c, a) likewise) for a literal condition
    of any shape; the select prim's own rule covers a side of the result's type. transformers' T5 adds
    where(mask, bias, min) with a mask of all True over the batch: the bias alone, a view, not a tensor per batch."""
    if eqn.prim.name != "select" or not isinstance(ins[0], Lit) or not isinstance(ins[0].value, (bool, np.bool_)):
        return None
    kept, out = ins[1] if ins[0].value else ins[2], eqn.outs[0].type
    if kept.type.dtype != out.dtype or kept.type == out:
        return None  # (the select prim's own rule)
    return Lit(kept.value, out) if isinstance(kept, Lit) else b.broadcast_to(kept, shape=out.shape)
