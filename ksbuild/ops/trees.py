"""Decision-tree ensembles (gradient-boosted trees, random forests): every tree walked for every sample by the
tree_walk prim (prims/trees.py: each walk stops at its leaf), or, when some split is BRANCH_MEMBER, all walks
at once, one level per step of a `loop`, as gathers from constant node tables.

A `Forest` numbers the nodes of all trees as states. An interior state compares one feature of the
input with a threshold and moves to its true or its false state; a leaf moves to itself, so after as
many steps as the deepest tree is deep every walk rests on its leaf. A leaf's votes are a row of
`values` (one column per target or class). No heap, no recursion and no unbounded loop: the same C++
runs on a microcontroller. The result is piecewise constant in the input, so its
derivatives are zero (the comparisons are bools, which AD does not enter).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..ir.core import Atom, Lit
from ..ir.types import Type, dtype_of, numel
from ..prims.trees import FEATURE_BITS, head, tree_walk
from ._util import error, scalar_lit
from .create import array
from .math import logical_and, logical_or

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
MODE_NAMES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


@dataclass(frozen=True)
class Forest:
    """The node tables of an ensemble. S states (interior nodes and leaves), T trees, K targets."""
    feature: np.ndarray        # [S] int64: the feature an interior state reads (0 for leaves)
    threshold: np.ndarray      # [S] float64 (a leaf's is unused)
    mode: np.ndarray           # [S] uint8: LEQ .. MEMBER (a leaf's is unused)
    true_next: np.ndarray      # [S] int64: the state after a true comparison (a leaf: itself)
    false_next: np.ndarray     # [S] int64
    missing_true: np.ndarray   # [S] bool: a NaN feature goes the true way
    members: np.ndarray        # [S, M] float64: a MEMBER state's set, padded with NaN (M = 0: none)
    roots: np.ndarray          # [T] int64
    values: np.ndarray         # [S, K] float64: the sum of a leaf's votes per target
    voted: np.ndarray          # [S, K] bool: the leaf votes for that target at all
    thresholds_f64: bool       # the model gives thresholds as doubles (compare in f64)

    @functools.cached_property
    def depth(self) -> int:
        """The number of steps after which every walk has reached its leaf."""
        return _depth(self.true_next, self.false_next, self.roots)


def _depth(true_next: np.ndarray, false_next: np.ndarray, roots: np.ndarray) -> int:
    """The longest root-to-leaf path (in edges); a cycle is an error (ValueError naming the state)."""
    depth = np.full(len(true_next), -1)
    for root in roots:
        stack = [(int(root), False)]
        on_path: set[int] = set()
        while stack:
            s, done = stack.pop()
            kids = {int(true_next[s]), int(false_next[s])}
            if s in kids and len(kids) == 2:
                raise ValueError(f"the trees have a cycle: node {s} leads to itself")
            kids.discard(s)
            if done:
                on_path.discard(s)
                depth[s] = 1 + max((depth[k] for k in kids), default=-1)
                continue
            if depth[s] >= 0:
                continue
            if s in on_path:
                raise ValueError(f"the trees have a cycle through node {s}")
            on_path.add(s)
            stack.append((s, True))
            stack.extend((k, False) for k in kids if depth[k] < 0)
    return int(max((depth[r] for r in roots), default=0))


def check(b, forest: Forest, n_features) -> None:
    """Errors at the builder's location for tables that index outside themselves or the input."""
    s = len(forest.true_next)
    for name, ids in (("true node", forest.true_next), ("false node", forest.false_next), ("root", forest.roots)):
        bad = (ids < 0) | (ids >= s)
        if np.any(bad):
            raise error(b, f"a {name} id ({int(ids[bad][0])}) is outside the {s} nodes of the trees")
    interior = forest.true_next != np.arange(s)
    if isinstance(n_features, int) and np.any(interior & ((forest.feature < 0) | (forest.feature >= n_features))):
        f = int(forest.feature[interior & ((forest.feature < 0) | (forest.feature >= n_features))][0])
        raise error(b, f"a node reads feature {f}, but the input has {n_features} features")
    if np.any((forest.mode > MEMBER)[interior]):
        raise error(b, f"unknown node mode {int(forest.mode[interior].max())}")
    try:
        forest.depth
    except ValueError as e:
        raise error(b, str(e)) from None


def leaves(b, forest: Forest, x: Atom) -> tuple[Atom, np.ndarray]:
    """(ids, rows): the leaf every tree reaches for every row of x [N, F] as an int [N, T] id, and the state
    each id stands for (the rows of `values` to read). Without BRANCH_MEMBER nodes the tree_walk prim walks
    (`_walk`: ids number the leaves alone). Else each level is one loop nest over [N, T] whose table reads
    are fused gathers, the ids are states and the workspace is the walks' states; a node's feature,
    threshold and two successors are stored side by side (`_packed`), so a step reads one cache line per
    walk, not four (a forest of millions of nodes does not fit in the caches)."""
    from ..prims.control import PRIMS_LOOP, wrap
    n, f = x.type.shape
    t = len(forest.roots)
    cmp_dtype = "f64" if forest.thresholds_f64 or x.type.dtype == "f64" else "f32"
    if x.type.dtype != cmp_dtype:
        x = b.convert(x, dtype=cmp_dtype)
    s = len(forest.true_next)
    interior = forest.true_next != np.arange(s)
    if not np.any(forest.mode[interior] == MEMBER) and (not isinstance(f, int) or f < 2 ** FEATURE_BITS):
        return _walk(b, forest, x, cmp_dtype)
    states = np.arange(s)
    flat = b.reshape(x, shape=(numel((n, f)),))
    pack = _packed(forest, cmp_dtype)
    it = dtype_of(pack)
    start = b.broadcast_to(array(b, forest.roots.astype(pack.dtype)), shape=(n, t))
    modes = sorted({int(m) for m in forest.mode[interior]}) or [LEQ]

    def step(bb, ps):
        _, xs, node = ps
        table = lambda arr: _table(bb, arr, node)  # noqa: E731
        packed = array(bb, pack)
        base = bb.mul(node, Lit(4, Type(it)))
        field = lambda c: bb.gather(packed, base if c == 0 else bb.add(base, Lit(c, Type(it))), axis=0)  # noqa: E731
        row = bb.mul(bb.iota(shape=(n, t), axis=0, dtype="i64"), Lit(f, Type("i64")))
        feature = field(0)
        value = bb.gather(xs, bb.add(row, feature if it == "i64" else bb.convert(feature, dtype="i64")), axis=0)
        threshold = bb.bitcast(field(1), dtype=cmp_dtype)
        go = None
        for m in modes:
            here = _compare(bb, m, value, threshold, forest, table, cmp_dtype)
            go = here if go is None else bb.select(bb.eq(table(forest.mode.astype(np.int32)),
                                                         Lit(m, Type("i32"))), here, go)
        if forest.missing_true[interior].any():
            nan = bb.ne(value, value)
            go = logical_or(bb, go, logical_and(bb, table(forest.missing_true), nan))
        return [bb.select(go, field(2), field(3))]

    body = wrap("tree_level", [Type("i64"), flat.type, start.type], step)
    depth = forest.depth
    return (b.bind(PRIMS_LOOP, [Lit(depth, Type("i64")), flat, start],
                   dict(body=body, n_consts=1, n_carry=1, length=depth, reverse=False))[0] if depth else start), states


def _walk(b, forest: Forest, x: Atom, dtype: str) -> tuple[Atom, np.ndarray]:
    """The leaves by the tree_walk prim: each walk stops at its leaf (the scalar loop onnxruntime runs), which
    for deep unpruned forests is about half the steps of walking every level, and answers the leaf's number
    among the leaves, so the leaf tables hold leaves only (half the rows: fewer cache misses). The table's
    head word holds the feature, the mode, the NaN way and the leaf flag (prims/trees.py)."""
    ft, it = (np.float64, np.int64) if dtype == "f64" else (np.float32, np.int32)
    states = np.arange(len(forest.true_next))
    leaf = forest.true_next == states
    rows = states[leaf]
    number = np.zeros(len(states), dtype=np.int64)
    number[rows] = np.arange(len(rows))
    heads = head(np.where(leaf, 0, forest.feature), np.where(leaf, 0, forest.mode), forest.missing_true & ~leaf,
                 leaf)
    with np.errstate(over="ignore"):
        bits = forest.threshold.astype(ft).view(it)
    pack = np.stack([heads.astype(it), bits, np.where(leaf, number, forest.true_next).astype(it),
                     forest.false_next.astype(it)], axis=1).reshape(-1)
    modes = set(forest.mode[~leaf].tolist())
    params = dict(depth=forest.depth, mode=int(modes.pop()) if len(modes) == 1 else -1,
                  nan=bool(np.any(forest.missing_true & ~leaf)))
    ids = b.bind(tree_walk, [x, array(b, pack), array(b, forest.roots.astype(it))], params)[0]
    return ids, rows


def _packed(forest: Forest, dtype: str) -> np.ndarray:
    """[S * 4]: each state's feature, threshold (its bits), true and false successors, side by side; int32 for
    float32 thresholds, int64 for float64 ones."""
    ft, it = (np.float64, np.int64) if dtype == "f64" else (np.float32, np.int32)
    with np.errstate(over="ignore"):  # (a double threshold beyond float32's range is compared in f64 anyway)
        bits = forest.threshold.astype(ft).view(it)
    return np.stack([forest.feature.astype(it), bits, forest.true_next.astype(it), forest.false_next.astype(it)],
                    axis=1).reshape(-1)


def _table(b, arr: np.ndarray, node: Atom) -> Atom:
    """arr[node] for a 1-D table (a fused gather); a scalar when every entry is the same."""
    if arr.ndim == 1 and arr.size and np.all(arr == arr[0]):
        return scalar_lit(arr[0].item(), dtype_of(arr))
    return b.gather(array(b, arr), node, axis=0)


def _compare(bb, mode: int, value: Atom, threshold: Atom, forest: Forest, table, dtype: str) -> Atom:
    """The bool [N, T] of one comparison mode at every walk's current state."""
    if mode == MEMBER:  # one fused gather per position in the sets
        hit = None
        for j in range(forest.members.shape[1]):
            here = bb.eq(value, table(forest.members[:, j].astype(np.float64 if dtype == "f64" else np.float32)))
            hit = here if hit is None else logical_or(bb, hit, here)
        return hit
    return {LEQ: bb.le, LT: bb.lt, GTE: bb.ge, GT: bb.gt, EQ: bb.eq, NEQ: bb.ne}[mode](value, threshold)


FUSED_TARGETS = 8
"""Up to this many targets, each is its own fused gather and reduction over the trees; more (a classifier of
hundreds of classes) read whole rows of the leaf table instead, so the code stays one loop nest per table."""


def scores(b, forest: Forest, x: Atom, aggregate: str, dtype: str) -> tuple[Atom, Atom]:
    """(score, voted), each [N, K]: the votes of every tree's leaf aggregated per target (dtype), and
    whether any tree voted for that target (the MIN and MAX of no votes is 0, as onnxruntime's)."""
    from . import reduce as red
    from .shape import stack
    leaf, rows = leaves(b, forest, x)
    n, t = leaf.type.shape
    values, voted = forest.values[rows], forest.voted[rows]
    k = values.shape[1]
    ft = np.float64 if dtype == "f64" else np.float32

    def per_tree(arr: np.ndarray) -> Atom:  # [N, T] (column arr) or [N, T, K] (table arr) of every walk's leaf
        v = _table(b, arr, leaf) if arr.ndim == 1 else b.gather(array(b, arr), leaf, axis=0)
        return v if v.type.rank else b.broadcast_to(v, shape=(n, t))

    def aggregated(values: np.ndarray, voted: np.ndarray) -> tuple[Atom, Atom]:
        if voted.all():  # (every leaf votes for the target: a random forest's class probabilities)
            hit = b.broadcast_to(Lit(True, Type("bool")), shape=(n,) + values.shape[1:])
        else:
            hit = b.ne(red.amax(b, per_tree(voted.astype(np.int32)), [1]), Lit(0, Type("i32")))
        if aggregate in ("SUM", "AVERAGE"):
            total = red.sum(b, per_tree(values.astype(ft)), [1])
            return (b.div(total, Lit(float(t), Type(dtype))) if aggregate == "AVERAGE" else total), hit
        big = np.inf if aggregate == "MIN" else -np.inf
        best = (red.amin if aggregate == "MIN" else red.amax)(b, per_tree(np.where(voted, values, big).astype(ft)),
                                                              [1])
        return b.select(hit, best, Lit(0.0, Type(dtype))), hit

    if k > FUSED_TARGETS:
        return aggregated(values, voted)
    cols = [aggregated(values[:, j], voted[:, j]) for j in range(k)]
    return stack(b, [c[0] for c in cols], 1), stack(b, [c[1] for c in cols], 1)
