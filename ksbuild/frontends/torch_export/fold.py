"""Nodes that do not depend on the inputs or the weights, computed by torch when the kernel is built.

A transformers model builds its causal mask, position ids and packed-sequence checks from `arange`,
`full` and small constants at every call; with the sequence length static those are the same tensors
each time. torch.onnx.export's optimizer folds them into initializers, so the same model from ONNX had
none of that work (GPT-2: 341 IR lines from ONNX, 542 from torch.export). Here a node whose tensor
arguments are all such values is run by torch itself (its own semantics, no second implementation)
and becomes a constant. Embedded buffers are folded through too (Llama's rotary `inv_freq`: its cos and sin
tables, as torch.onnx.export folds them); parameters are not (a transposed copy of a large weight would be a second
weight) except by a lookup of known rows of weights nothing else reads (`lookup`); nor are random ops, symbolic
shapes or results over MAX_ELEMENTS.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MAX_ELEMENTS = 1 << 16
"""The largest result folded (elements): a bigger one stays computed rather than stored in the library."""


def evaluate(node, known: dict) -> np.ndarray | None:
    """The value of an ATen node whose tensor arguments are all in `known` (FX node -> numpy array), or None."""
    import torch
    from torch.fx.node import map_arg

    if not _foldable(node):
        return None
    missing: list = []

    def tensor_of(arg):
        if arg not in known:
            missing.append(arg)
            return None
        return torch.from_numpy(np.array(known[arg], copy=True))

    args, kwargs = map_arg(node.args, tensor_of), map_arg(node.kwargs, tensor_of)
    if missing:
        return None
    with torch.no_grad():
        out = node.target(*args, **kwargs)
    return out.numpy() if isinstance(out, torch.Tensor) else None


LOOKUPS = ("aten.embedding.default", "aten.index_select.default", "aten.slice.Tensor", "aten.select.int",
           "aten.index.Tensor")
"""Ops that take known rows of a tensor: folded through embedded weights too (lookup)."""


def lookup(node, known: dict, weights: dict) -> np.ndarray | None:
    """The value of a lookup of known rows (LOOKUPS) of embedded weights that only this node reads, or None.

    torch.onnx.export's constant folding does the same: BERT's position embeddings are the rows
    `position_ids[:, :L]` of their table, the same at every call; folded, the table itself is no longer read, so
    the library does not grow (a weight read elsewhere too is not folded)."""
    if str(node.target) not in LOOKUPS:
        return None
    reads = node.all_input_nodes
    if not all(a in known or (a in weights and len(a.users) == 1) for a in reads):
        return None
    return evaluate(node, {**known, **{a: weights[a] for a in reads if a in weights}})


def _foldable(node) -> bool:
    """An ATen op with one tensor result of static, small shape, not random."""
    import torch

    target, val = node.target, node.meta.get("val")
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False
    if torch.Tag.nondeterministic_seeded in target.tags or not isinstance(val, torch.Tensor):
        return False
    shape: Any = tuple(val.shape)
    return all(isinstance(d, int) for d in shape) and int(np.prod(shape, dtype=np.int64)) <= MAX_ELEMENTS
