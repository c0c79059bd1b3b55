"""tree_walk: the leaf every row of x reaches in every tree of a forest (ops/trees.py builds the tables).

tree_walk[depth, mode, nan](x [N, F], packed [S * 4], roots [T]) -> leaves [N, T]

`packed` holds each state's head, threshold bits, true and false successors side by side (int32 with float32
x, int64 with float64 x). The head is the feature the state reads, with the comparison mode in bits 24-26
(LEQ, LT, GTE, GT, EQ, NEQ), bit 27 set when a NaN feature goes the true way and bit 28 on a leaf, whose
"true successor" is the walk's answer (the leaf's number). Each walk stops at its leaf, after at most
`depth` + 1 steps (the deepest tree's depth: the loop count is bounded whatever the data), as onnxruntime
walks; `mode` is the one mode of every split (-1: each state's own) and `nan` whether any state sends a NaN
the true way, so most models compile to a plain comparison. The C++ is ks::tree_walk
(ks/prelude.h), one tree at a time over all rows so that a tree's nodes stay in cache. The leaves are
integers: no derivative.
"""
from __future__ import annotations

import numpy as np

from ..errors import KsbuildError
from ..ir.types import Type
from .base import Prim, finite, unsigned

FEATURE_BITS = 24
"""Features below 2^24 fit in a head beside the mode (3 bits) and the NaN flag."""


def head(feature: np.ndarray, mode: np.ndarray, missing_true: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """The head word of each state (int64; callers narrow it to the table's type)."""
    return feature.astype(np.int64) | (mode.astype(np.int64) << FEATURE_BITS) | \
        (missing_true.astype(np.int64) << (FEATURE_BITS + 3)) | (leaf.astype(np.int64) << (FEATURE_BITS + 4))


def _rule(in_types, depth, mode, nan):
    x, packed, roots = in_types
    want = {"f32": "i32", "f64": "i64"}.get(x.dtype)
    if x.rank != 2 or want is None or packed.dtype != want or roots.dtype != want or packed.rank != 1 \
            or roots.rank != 1:
        raise KsbuildError(f"tree_walk takes x f32/f64 [N, F] with {want or 'i32/i64'} tables, got {x}, {packed}, "
                           f"{roots}")
    return (Type(packed.dtype, (x.shape[0], roots.shape[0])),)


def _eval(x, packed, roots, env=None, depth=0, mode=-1, nan=True):
    """All walks at once, one level per step (numpy), the comparisons as ks::tree_walk makes them."""
    table = packed.reshape(-1, 4).astype(np.int64)
    ft = np.float32 if packed.dtype == np.int32 else np.float64
    thresholds = packed.reshape(-1, 4)[:, 1].copy().view(ft)
    node = np.broadcast_to(roots.astype(np.int64), (x.shape[0], len(roots))).copy()
    done = np.zeros(node.shape, dtype=bool)
    rows = np.arange(x.shape[0])[:, None]
    with np.errstate(invalid="ignore"):
        for _ in range(depth + 1):
            h = table[node, 0]
            leaf = ~done & (((h >> (FEATURE_BITS + 4)) & 1) == 1)
            node, done = np.where(leaf, table[node, 2], node), done | leaf
            v, th = x[rows, h & ((1 << FEATURE_BITS) - 1)], thresholds[node]
            mode = (h >> FEATURE_BITS) & 7
            go = np.select([mode == 0, mode == 1, mode == 2, mode == 3, mode == 4], [v <= th, v < th, v >= th,
                                                                                   v > th, v == th], v != th)
            go |= np.isnan(v) & (((h >> (FEATURE_BITS + 3)) & 1) == 1)
            node = np.where(done, node, np.where(go, table[node, 2], table[node, 3]))
    return (node.astype(packed.dtype),)


def _batch(b, ins, batched, size, depth, mode, nan):
    x, packed, roots = ins
    if batched[1] or batched[2]:
        raise KsbuildError("internal: tree_walk over lanes of tables")
    from ..ir.types import dim_mul
    lanes, n, f = x.type.shape
    flat = b.reshape(x, shape=(dim_mul(lanes, n), f))
    out = b.bind(tree_walk, [flat, packed, roots], dict(depth=depth, mode=mode, nan=nan))[0]
    return [b.reshape(out, shape=(lanes, n, roots.type.shape[0]))], [True]


def _emit(ctx, eqn) -> None:
    from .convolve import _dense, _dense_target
    x, packed, roots = eqn.ins
    (out,) = eqn.outs
    sx, sp, sr = (_dense(ctx, a, h) for a, h in ((x, "rows"), (packed, "nodes"), (roots, "roots")))
    dst, target = _dense_target(ctx, out, "leaves")
    n, f = x.type.shape
    mode, nan = eqn.params["mode"], eqn.params["nan"]
    walk = "ks::tree_walk" if (mode, nan) == (-1, True) else f"ks::tree_walk<{mode}, {str(nan).lower()}>"
    ctx.line(f"{walk}({ctx.dim(n)}, {ctx.dim(f)}, {sx.base}, {sp.base}, {sr.base}, {ctx.dim(roots.type.shape[0])}, "
             f"{eqn.params['depth']}, {target.base});")
    if target is not dst:
        ctx.copy(target, dst, out.type)
    ctx.env[out] = dst


tree_walk = Prim(
    name="tree_walk",
    sign=unsigned,
    nonfinite=finite,
    type_rule=_rule,
    eval=_eval,
    jvp=None,  # (integer results: transforms/jvp.py binds it as it is)
    batch=_batch,
    emit=_emit,
    doc="the leaf each row reaches in each tree of a forest (packed node tables)",
    opt_outs=("jvp: integer results carry no tangent",),
)
