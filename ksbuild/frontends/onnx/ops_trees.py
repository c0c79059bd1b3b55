"""ONNX-ML tree ensembles: TreeEnsemble (ai.onnx.ml 5), TreeEnsembleRegressor and TreeEnsembleClassifier
(ai.onnx.ml 1 and 3, what skl2onnx, onnxmltools and hummingbird emit for scikit-learn, XGBoost and
LightGBM models). Each handler reads its attributes into one `ops.trees.Forest` and aggregates the
leaves' votes there; the post transforms and the classifier's labels follow onnxruntime, including
its binary-classification conventions (checked against onnxruntime in tests/test_onnx_trees.py)."""
from __future__ import annotations

import numpy as np

from ...ir.core import Lit
from ...ir.types import Type
from ...ops import trees
from ...ops.create import array
from ...ops.index import arg_extremum
from ...ops.math import logical_and
from .graph import handler
from .node import Node
from .ops_ml import POST_TRANSFORMS, class_labels
from .ops_ml import post_transform as _post
from .values import Val


def _floats(n: Node, name: str) -> tuple[np.ndarray | None, bool]:
    """(values, given as doubles) of `name` or `name_as_tensor` (None when neither is set)."""
    tensor = n.attr(f"{name}_as_tensor", None)
    plain = n.attr(name, None)
    if tensor is not None and plain is not None:
        raise n.error(f"{n.op}: set '{name}' or '{name}_as_tensor', not both")
    if tensor is not None:
        arr = np.asarray(tensor).reshape(-1)
        return arr.astype(np.float64), arr.dtype == np.float64
    if plain is not None:
        return np.asarray(plain, dtype=np.float32).astype(np.float64), False
    return None, False


def _same_length(n: Node, arrays: dict[str, object]) -> int:
    lengths = {k: len(v) for k, v in arrays.items() if v is not None}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k}: {v}" for k, v in lengths.items())
        raise n.error(f"{n.op}: the node attributes must have one length, got {shown}")
    return next(iter(lengths.values()), 0)


def _input(n: Node):
    """X, which must be [N, F]."""
    x = n.x(0)
    if x.type.rank != 2:
        raise n.error(f"{n.op}: X must be [N, F] (a batch of feature rows), got {x.type}")
    return x


# ---- TreeEnsemble (ai.onnx.ml 5) ------------------------------------------------------------------

@handler("TreeEnsemble")
def tree_ensemble(n: Node):
    x = _input(n)
    feature = np.asarray(n.attr("nodes_featureids", []), dtype=np.int64)
    splits = np.asarray(n.attr("nodes_splits")).reshape(-1)
    modes = np.asarray(n.attr("nodes_modes")).reshape(-1).astype(np.int64)
    true_ids = np.asarray(n.attr("nodes_truenodeids", []), dtype=np.int64)
    false_ids = np.asarray(n.attr("nodes_falsenodeids", []), dtype=np.int64)
    true_leaf = np.asarray(n.attr("nodes_trueleafs", []), dtype=bool)
    false_leaf = np.asarray(n.attr("nodes_falseleafs", []), dtype=bool)
    k = _same_length(n, dict(nodes_featureids=feature, nodes_splits=splits, nodes_modes=modes,
                             nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids,
                             nodes_trueleafs=true_leaf, nodes_falseleafs=false_leaf))
    missing = np.asarray(n.attr("nodes_missing_value_tracks_true", [0] * k), dtype=bool)
    n.attr("nodes_hitrates", None)
    leaf_targets = np.asarray(n.attr("leaf_targetids"), dtype=np.int64)
    leaf_weights = np.asarray(n.attr("leaf_weights")).reshape(-1).astype(np.float64)
    if len(leaf_targets) != len(leaf_weights):
        raise n.error(f"{n.op}: {len(leaf_targets)} leaf_targetids but {len(leaf_weights)} leaf_weights")
    n_targets = n.attr("n_targets")
    roots = np.asarray(n.attr("tree_roots"), dtype=np.int64)
    agg = n.attr("aggregate_function", 1)
    post = n.attr("post_transform", 0)
    if not 0 <= agg < 4 or not 0 <= post < 5:
        raise n.error(f"{n.op}: aggregate_function {agg} or post_transform {post} is not one of the schema's")
    if len(missing) != k:
        raise n.error(f"{n.op}: nodes_missing_value_tracks_true has {len(missing)} entries for {k} nodes")
    n_leaves = len(leaf_weights)
    for name, ids, leafy in (("nodes_truenodeids", true_ids, true_leaf), ("nodes_falsenodeids", false_ids,
                                                                          false_leaf)):
        limit = np.where(leafy, n_leaves, k)
        if np.any((ids < 0) | (ids >= limit)):
            raise n.error(f"{n.op}: {name} holds {int(ids[(ids < 0) | (ids >= limit)][0])}, which names no "
                          "node or leaf")
    if np.any((leaf_targets < 0) | (leaf_targets >= n_targets)):
        raise n.error(f"{n.op}: a leaf_targetids entry is outside [0, n_targets = {n_targets})")
    s = k + n_leaves
    states = np.arange(s)
    values = np.zeros((s, n_targets))
    voted = np.zeros((s, n_targets), dtype=bool)
    np.add.at(values, (k + np.arange(n_leaves), leaf_targets), leaf_weights)
    voted[k + np.arange(n_leaves), leaf_targets] = True
    members = _members(n, modes, n.attr("membership_values", None), s)
    forest = trees.Forest(
        feature=np.concatenate([feature, np.zeros(n_leaves, np.int64)]),
        threshold=np.concatenate([splits.astype(np.float64), np.zeros(n_leaves)]),  # (±inf splits stay)
        mode=np.concatenate([modes, np.zeros(n_leaves, np.int64)]).astype(np.uint8),
        true_next=np.concatenate([np.where(true_leaf, k + true_ids, true_ids), states[k:]]),
        false_next=np.concatenate([np.where(false_leaf, k + false_ids, false_ids), states[k:]]),
        missing_true=np.concatenate([missing, np.zeros(n_leaves, bool)]),
        members=members, roots=roots, values=values, voted=voted,
        thresholds_f64=splits.dtype == np.float64)
    dtype = x.type.dtype if x.type.dtype in ("f32", "f64") else "f32"
    score = _scores(n, forest, x, trees.AGGREGATES[agg], dtype, np.zeros(0))
    y = _post(n, score, POST_TRANSFORMS[post], n_targets)
    return [Val(y, None, n.dtype(0) if n.dtype(0) in ("f16", "f32", "f64") else "f32")]


def _members(n: Node, modes: np.ndarray, values, s: int) -> np.ndarray:
    """[S, M] sets of the BRANCH_MEMBER nodes (NaN-delimited in membership_values, in node order)."""
    which = np.flatnonzero(modes == trees.MEMBER)
    if not len(which):
        return np.zeros((s, 0))
    if values is None:
        raise n.error(f"{n.op}: BRANCH_MEMBER nodes need membership_values")
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    sets, cur = [], []
    for v in flat:
        if np.isnan(v):
            sets.append(cur)
            cur = []
        else:
            cur.append(v)
    if cur:
        sets.append(cur)
    if len(sets) != len(which):
        raise n.error(f"{n.op}: membership_values holds {len(sets)} sets for {len(which)} BRANCH_MEMBER nodes")
    out = np.full((s, max(1, max(len(m) for m in sets))), np.nan)
    for node, m in zip(which, sets):
        out[node, :len(m)] = m
    return out


# ---- TreeEnsembleRegressor, TreeEnsembleClassifier (ai.onnx.ml 1, 3) ------------------------------

LEGACY_MODES = {name: i for i, name in enumerate(trees.MODE_NAMES[:6])}


def _legacy_forest(n: Node, vote: str, n_out: int) -> trees.Forest:
    """The Forest of nodes given as (tree id, node id) pairs, LEAF nodes voting through the
    `{vote}_treeids/_nodeids/_ids/_weights` attributes (vote: 'target' or 'class')."""
    tree_ids = np.asarray(n.attr("nodes_treeids"), dtype=np.int64)
    node_ids = np.asarray(n.attr("nodes_nodeids"), dtype=np.int64)
    feature = np.asarray(n.attr("nodes_featureids"), dtype=np.int64)
    mode_names = n.attr("nodes_modes")
    true_ids = np.asarray(n.attr("nodes_truenodeids"), dtype=np.int64)
    false_ids = np.asarray(n.attr("nodes_falsenodeids"), dtype=np.int64)
    thresholds, as_f64 = _floats(n, "nodes_values")
    _floats(n, "nodes_hitrates")
    k = _same_length(n, dict(nodes_treeids=tree_ids, nodes_nodeids=node_ids, nodes_featureids=feature,
                             nodes_modes=mode_names, nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids,
                             nodes_values=thresholds))
    thresholds = np.zeros(k) if thresholds is None else thresholds
    missing = np.asarray(n.attr("nodes_missing_value_tracks_true", [0] * k), dtype=bool)
    if len(missing) != k:
        raise n.error(f"{n.op}: nodes_missing_value_tracks_true has {len(missing)} entries for {k} nodes")
    bad = [m for m in mode_names if m != "LEAF" and m not in LEGACY_MODES]
    if bad:
        raise n.error(f"{n.op}: unknown node mode '{bad[0]}'", hint=f"one of {', '.join(LEGACY_MODES)}, LEAF")
    leaf = np.array([m == "LEAF" for m in mode_names], dtype=bool)
    modes = np.array([LEGACY_MODES.get(m, 0) for m in mode_names], dtype=np.uint8)
    index: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(tree_ids.tolist(), node_ids.tolist())):
        if key in index:
            raise n.error(f"{n.op}: tree {key[0]} has node id {key[1]} twice")
        index[key] = i

    def state(tree: int, node: int, what: str) -> int:
        if (tree, node) not in index:
            raise n.error(f"{n.op}: {what} names node {node} of tree {tree}, which the nodes_* attributes lack")
        return index[tree, node]

    states = np.arange(k)
    true_next = np.array([i if leaf[i] else state(t, c, "nodes_truenodeids")
                          for i, (t, c) in enumerate(zip(tree_ids.tolist(), true_ids.tolist()))], dtype=np.int64)
    false_next = np.array([i if leaf[i] else state(t, c, "nodes_falsenodeids")
                           for i, (t, c) in enumerate(zip(tree_ids.tolist(), false_ids.tolist()))], dtype=np.int64)
    children = set(true_next[~leaf].tolist()) | set(false_next[~leaf].tolist())
    roots = []
    for tree in dict.fromkeys(tree_ids.tolist()):
        mine = [int(i) for i in states[tree_ids == tree] if int(i) not in children]
        if len(mine) != 1:
            raise n.error(f"{n.op}: tree {tree} has {len(mine)} root nodes (nodes no other node leads to)")
        roots.append(mine[0])
    v_trees = np.asarray(n.attr(f"{vote}_treeids"), dtype=np.int64)
    v_nodes = np.asarray(n.attr(f"{vote}_nodeids"), dtype=np.int64)
    v_ids = np.asarray(n.attr(f"{vote}_ids"), dtype=np.int64)
    weights, _ = _floats(n, f"{vote}_weights")
    if weights is None:
        raise n.error(f"{n.op} needs the attribute '{vote}_weights'")
    _same_length(n, {f"{vote}_treeids": v_trees, f"{vote}_nodeids": v_nodes, f"{vote}_ids": v_ids,
                     f"{vote}_weights": weights})
    if np.any((v_ids < 0) | (v_ids >= n_out)):
        raise n.error(f"{n.op}: a {vote}_ids entry is outside [0, {n_out})")
    values = np.zeros((k, n_out))
    voted = np.zeros((k, n_out), dtype=bool)
    for t, nd, j, w in zip(v_trees.tolist(), v_nodes.tolist(), v_ids.tolist(), weights.tolist()):
        s = state(t, nd, f"{vote}_nodeids")
        values[s, j] += w
        voted[s, j] = True
    return trees.Forest(feature=np.where(leaf, 0, feature), threshold=np.where(leaf, 0.0, thresholds),
                        mode=modes, true_next=true_next, false_next=false_next, missing_true=missing & ~leaf,
                        members=np.zeros((k, 0)), roots=np.asarray(roots, dtype=np.int64), values=values,
                        voted=voted, thresholds_f64=as_f64)


@handler("TreeEnsembleRegressor")
def tree_ensemble_regressor(n: Node):
    x = _input(n)
    n_targets = n.attr("n_targets", 1)
    forest = _legacy_forest(n, "target", n_targets)
    agg = n.attr_in("aggregate_function", trees.AGGREGATES, "SUM")
    post = n.attr_in("post_transform", POST_TRANSFORMS, "NONE")
    base = _base_values(n, n_targets, "targets")
    score = _scores(n, forest, x, agg, "f32", base)
    return [_post(n, score, post, n_targets)]


def _base_values(n: Node, k: int, what: str) -> np.ndarray:
    """base_values (or _as_tensor): none, or one per target or class (onnxruntime refuses other counts, but
    for two classes it takes one too)."""
    base, _ = _floats(n, "base_values")
    if base is None:
        return np.zeros(0)
    if len(base) not in (0, k) and not (what == "classes" and k == 2 and len(base) == 1):
        raise n.error(f"{n.op}: base_values has {len(base)} values for {k} {what} (give none or {k})")
    return base


def _scores(n: Node, forest: trees.Forest, x, agg: str, dtype: str, base: np.ndarray):
    """The aggregated votes [N, K] plus the base values (when there is one per target). As in onnxruntime, a
    target no tree voted for is 0 when there are several targets (its base value is not added)."""
    trees.check(n.b, forest, x.type.shape[1])
    score, voted = trees.scores(n.b, forest, x, agg, dtype)
    k = score.type.shape[1]
    if len(base) == k:
        score = n.b.add(score, array(n.b, base.astype(np.float64 if dtype == "f64" else np.float32)))
        if k > 1:
            score = n.b.select(voted, score, Lit(0.0, Type(dtype)))
    return score


@handler("TreeEnsembleClassifier")
def tree_ensemble_classifier(n: Node):
    x = _input(n)
    labels, ldt = class_labels(n, "classlabels_int64s")
    c = len(labels)
    if c < 2:
        raise n.unsupported("a classifier with fewer than two class labels")
    forest = _legacy_forest(n, "class", c)
    post = n.attr_in("post_transform", POST_TRANSFORMS, "NONE")
    if post == "PROBIT" and c == 2:
        raise n.unsupported("post_transform PROBIT of a two-class ensemble (onnxruntime writes one column of Z "
                            "there, and the operator's text does not say which)")
    base = _base_values(n, c, "classes")
    trees.check(n.b, forest, x.type.shape[1])
    score, voted = trees.scores(n.b, forest, x, "SUM", "f32")
    weights, _ = _floats(n, "class_weights")
    binary = c == 2 and len(set(n.attr("class_ids"))) == 1
    if c > 2:
        label, z = _multiclass(n, score, voted, base, post)
    else:
        label, z = _two_classes(n, score, voted, base, post, binary, bool(np.all(weights >= 0)))
    if ldt == "i64" and c == 2 and not binary:
        y = label  # onnxruntime answers 1 or 0 here, whatever the labels are
    else:
        y = n.b.gather(array(n.b, labels), label, axis=0)
    return [Val(y, None, ldt), z]


def _multiclass(n: Node, score, voted, base: np.ndarray, post: str):
    """More than two classes: base values (one per class) count as votes; the label is the first of the
    highest voted scores; Z is the post transform of the scores (0 where no tree voted)."""
    b = n.b
    if len(base):
        score = b.add(score, array(b, base.astype(np.float32)))
        voted = b.broadcast_to(Lit(True, Type("bool")), shape=voted.type.shape)
    shown = b.select(voted, score, Lit(0.0, Type("f32")))
    ranked = b.select(voted, score, Lit(-np.inf, Type("f32")))
    label = arg_extremum(b, ranked, 1, keepdims=False, largest=True)
    return label, _post(n, shown, post, score.type.shape[1])


def _two_classes(n: Node, score, voted, base: np.ndarray, post: str, binary: bool, all_positive: bool):
    """Two classes as onnxruntime (1.32) computes them, which the operator's text leaves open:
    - with two base values, a sample some tree voted class 1 for gets s1 = base1 + s0 and s0 = -s1 (the
      class-1 sums are not read: onnxruntime's); otherwise each class gets its base value;
    - with one base value it is added to s0, and a sample no tree voted class 1 for keeps s0 alone;
    - a class no tree voted for shows 0 in Z; Z is the post transform of the pair, or for s0 alone
      [1 - s0, s0] (binary, positive weights) or [-s0, s0] (its logistic under LOGISTIC);
    - the label: with weights for one class only (binary) the voted score decides (> 0.5 when every weight
      is positive, else > 0); with weights for both, label 1 when it is positive (whatever the labels)."""
    b = n.b
    f32 = lambda v: Lit(float(v), Type("f32"))  # noqa: E731
    col = lambda a, j: b.reshape(b.slice(a, axis=1, start=j, stop=j + 1), shape=a.type.shape[:1])  # noqa: E731
    s0, s1, h0, h1 = col(score, 0), col(score, 1), col(voted, 0), col(voted, 1)
    nb = len(base)
    pair = h1  # both scores stay (else s0 alone does)
    if nb == 2:
        s1, s0 = b.select(h1, b.add(f32(base[1]), s0), b.add(s1, f32(base[1]))), \
            b.select(h1, b.neg(b.add(f32(base[1]), s0)), b.add(s0, f32(base[0])))
        pair = b.broadcast_to(Lit(True, Type("bool")), shape=h1.type.shape)
    elif nb == 1:
        s0 = b.add(s0, f32(base[0]))
    positive = b.select(logical_and(b, pair, h1), s1, b.select(h0, s0, f32(0)))
    cut = 0.5 if binary and all_positive else 0.0
    label = b.convert(b.gt(positive, f32(cut)), dtype="i64")
    s0, s1 = b.select(h0, s0, f32(0)), b.select(h1, s1, f32(0))
    both = _post(n, _pair(b, s0, s1), post, 2)
    z = b.select(b.reshape(pair, shape=pair.type.shape + (1,)), both, _single(b, s0, post, binary, all_positive, nb))
    return label, z


def _pair(b, s0, s1):
    from ...ops.shape import stack
    return stack(b, [s0, s1], 1)


def _single(b, s, post: str, binary: bool, all_positive: bool, nb: int):
    """Z when s0 is left alone: [1 - s, s] (binary, positive weights), [-s, s] (binary, or no base values;
    their logistic under LOGISTIC), else [s, 0] (onnxruntime writes only Z[0] then; Z[1] is undefined)."""
    if binary and all_positive:
        return _pair(b, b.sub(Lit(1.0, Type("f32")), s), s)
    if not binary and nb:
        return _pair(b, s, b.broadcast_to(Lit(0.0, Type("f32")), shape=s.type.shape))
    if post == "LOGISTIC":
        return _pair(b, b.logistic(b.neg(s)), b.logistic(s))
    return _pair(b, b.neg(s), s)
