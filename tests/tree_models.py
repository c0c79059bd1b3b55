"""Random tree-ensemble ONNX models (ai.onnx.ml) in the forms converters emit: TreeEnsembleRegressor and
TreeEnsembleClassifier (nodes as (tree id, node id) pairs, LEAF nodes voting), and TreeEnsemble
(ai.onnx.ml 5: interior nodes and leaves apart). Shared by tests/test_onnx_trees.py."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

LEGACY_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
GRID = np.array([-1.5, -0.5, 0.0, 0.25, 1.0, 2.0], np.float32)
"""Thresholds are drawn from these values, and so are some inputs: equal values test <= against <."""
MEMBERS = np.array([-1.0, 0.0, 1.0, 2.0])
"""Set members (onnxruntime implements BRANCH_MEMBER for whole numbers only)."""


def random_trees(rng, n_trees: int, depth: int, n_features: int, modes=("BRANCH_LEQ",), p_leaf: float = 0.2,
                 missing: bool = False):
    """Trees as lists of nodes {id, feature, threshold, mode, true, false, missing} (mode 'LEAF' for leaves).
    Node ids run from 0 in each tree, in depth-first order."""
    out = []
    for _ in range(n_trees):
        nodes: list[dict] = []

        def grow(d: int) -> int:
            me = len(nodes)
            nodes.append({})
            if d == depth or (d > 0 and rng.random() < p_leaf):
                nodes[me] = dict(id=me, feature=0, threshold=0.0, mode="LEAF", true=0, false=0, missing=0)
                return me
            t, f = grow(d + 1), grow(d + 1)
            nodes[me] = dict(id=me, feature=int(rng.integers(n_features)), threshold=float(rng.choice(GRID)),
                             mode=str(rng.choice(modes)), true=t, false=f,
                             missing=int(missing and rng.random() < 0.5))
            return me
        grow(0)
        out.append(nodes)
    return out


def _node_attrs(forest, doubles: bool) -> dict:
    flat = [(t, nd) for t, tree in enumerate(forest) for nd in tree]
    attrs = dict(
        nodes_treeids=[t for t, _ in flat], nodes_nodeids=[nd["id"] for _, nd in flat],
        nodes_featureids=[nd["feature"] for _, nd in flat], nodes_modes=[nd["mode"] for _, nd in flat],
        nodes_truenodeids=[nd["true"] for _, nd in flat], nodes_falsenodeids=[nd["false"] for _, nd in flat],
        nodes_missing_value_tracks_true=[nd["missing"] for _, nd in flat])
    thresholds = [nd["threshold"] for _, nd in flat]
    if doubles:
        attrs["nodes_values_as_tensor"] = nh.from_array(np.array(thresholds, np.float64), "t")
    else:
        attrs["nodes_values"] = thresholds
    return attrs


def _votes(rng, forest, prefix: str, n_out: int, per_leaf, weight) -> dict:
    """`{prefix}_treeids/_nodeids/_ids/_weights` for every leaf: per_leaf(rng) picks the ids it votes for."""
    trees, nodes, ids, weights = [], [], [], []
    for t, tree in enumerate(forest):
        for nd in tree:
            if nd["mode"] != "LEAF":
                continue
            for j in per_leaf(rng):
                trees.append(t)
                nodes.append(nd["id"])
                ids.append(int(j))
                weights.append(float(np.float32(weight(rng))))
    return {f"{prefix}_treeids": trees, f"{prefix}_nodeids": nodes, f"{prefix}_ids": ids,
            f"{prefix}_weights": weights}


def _model(node, x_type=T.FLOAT, n_features=4, outputs=(), ml_opset=3):
    g = h.make_graph([node], "trees", [h.make_tensor_value_info("X", x_type, ["N", n_features])],
                     outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", ml_opset)])


def regressor(seed: int, n_targets=2, aggregate="SUM", post="NONE", base=None, modes=("BRANCH_LEQ",),
              missing=False, doubles=False, all_targets=True, n_trees=5, depth=4):
    rng = np.random.default_rng(seed)
    forest = random_trees(rng, n_trees, depth, 4, modes, missing=missing)
    pick = (lambda r: range(n_targets)) if all_targets else \
        (lambda r: r.choice(n_targets, size=int(r.integers(1, n_targets + 1)), replace=False))
    attrs = dict(_node_attrs(forest, doubles), **_votes(rng, forest, "target", n_targets, pick,
                                                        lambda r: r.normal()))
    attrs.update(n_targets=n_targets, aggregate_function=aggregate, post_transform=post)
    if base is not None:
        attrs["base_values"] = [float(np.float32(v)) for v in base]
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    return _model(node, T.DOUBLE if doubles else T.FLOAT,
                  outputs=[h.make_tensor_value_info("Y", T.FLOAT, ["N", n_targets])])


def classifier(seed: int, labels, post="NONE", base=None, voting="all", weights="positive", modes=("BRANCH_LEQ",),
               missing=False, n_trees=4, depth=3):
    """voting: 'all' (every leaf votes for every class), 'one' (only for class 1: the binary form),
    'some' (a random subset)."""
    rng = np.random.default_rng(seed)
    forest = random_trees(rng, n_trees, depth, 4, modes, missing=missing)
    c = len(labels)
    pick = {"all": lambda r: range(c), "one": lambda r: [1 if c == 2 else 0],
            "some": lambda r: r.choice(c, size=int(r.integers(1, c + 1)), replace=False)}[voting]
    weight = (lambda r: r.uniform(0, 1)) if weights == "positive" else (lambda r: r.normal())
    attrs = dict(_node_attrs(forest, False), **_votes(rng, forest, "class", c, pick, weight))
    attrs["post_transform"] = post
    if isinstance(labels[0], str):
        attrs["classlabels_strings"] = list(labels)
    else:
        attrs["classlabels_int64s"] = [int(v) for v in labels]
    if base is not None:
        attrs["base_values"] = [float(np.float32(v)) for v in base]
    node = h.make_node("TreeEnsembleClassifier", ["X"], ["label", "Z"], domain="ai.onnx.ml", **attrs)
    label_type = T.STRING if isinstance(labels[0], str) else T.INT64
    return _model(node, outputs=[h.make_tensor_value_info("label", label_type, ["N"]),
                                 h.make_tensor_value_info("Z", T.FLOAT, ["N", c])])


def ensemble_v5(seed: int, n_targets=3, aggregate=1, post=0, modes=(0, 1, 2, 3, 4, 5, 6), missing=True,
                n_trees=4, depth=3, doubles=False):
    """TreeEnsemble (ai.onnx.ml 5): interior nodes, leaves apart (one target per leaf), set membership."""
    rng = np.random.default_rng(seed)
    names = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
    forest = random_trees(rng, n_trees, depth, 4, tuple(names[m] for m in modes), missing=missing)
    inner, leaf_of, roots = [], {}, []
    leaf_targets, leaf_weights, members = [], [], []
    for t, tree in enumerate(forest):
        for nd in tree:
            if nd["mode"] == "LEAF":
                leaf_of[t, nd["id"]] = len(leaf_targets)
                leaf_targets.append(int(rng.integers(n_targets)))
                leaf_weights.append(float(rng.normal()))
        interior = [nd for nd in tree if nd["mode"] != "LEAF"]
        if not interior:  # a one-leaf tree: a node whose branches both reach the leaf
            interior = [dict(id=0, feature=0, threshold=0.0, mode="BRANCH_LEQ", true=0, false=0, missing=0)]
        pos = {nd["id"]: len(inner) + i for i, nd in enumerate(interior)}
        inner.extend((t, nd, pos) for nd in interior)
        roots.append(pos[0])
    true_ids, false_ids, true_leafs, false_leafs = [], [], [], []
    for t, nd, pos in inner:
        for kid, ids, leafs in ((nd["true"], true_ids, true_leafs), (nd["false"], false_ids, false_leafs)):
            if forest[t][kid]["mode"] == "LEAF":
                ids.append(leaf_of[t, kid])
                leafs.append(1)
            else:
                ids.append(pos[kid])
                leafs.append(0)
        if nd["mode"] == "BRANCH_MEMBER":
            members.extend([float(v) for v in rng.choice(MEMBERS, size=int(rng.integers(1, 4)), replace=False)] +
                           [np.nan])
    ft = np.float64 if doubles else np.float32
    attrs = dict(
        nodes_featureids=[nd["feature"] for _, nd, _ in inner],
        nodes_splits=nh.from_array(np.array([nd["threshold"] for _, nd, _ in inner], ft), "s"),
        nodes_modes=nh.from_array(np.array([names.index(nd["mode"]) for _, nd, _ in inner], np.uint8), "m"),
        nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids, nodes_trueleafs=true_leafs,
        nodes_falseleafs=false_leafs, nodes_missing_value_tracks_true=[nd["missing"] for _, nd, _ in inner],
        leaf_targetids=leaf_targets, leaf_weights=nh.from_array(np.array(leaf_weights, ft), "w"),
        tree_roots=roots, n_targets=n_targets, aggregate_function=aggregate, post_transform=post)
    if members:
        attrs["membership_values"] = nh.from_array(np.array(members, ft), "mv")
    node = h.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    x_type = T.DOUBLE if doubles else T.FLOAT
    return _model(node, x_type, outputs=[h.make_tensor_value_info("Y", x_type, ["N", n_targets])], ml_opset=5)


def inputs(seed: int, n: int = 64, dtype=np.float32, special: bool = True) -> np.ndarray:
    """[n, 4] inputs: normal values, values on the threshold grid and (special) NaN and infinities."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)) * 1.5
    on_grid = rng.random(size=x.shape) < 0.3
    x[on_grid] = rng.choice(GRID, size=int(on_grid.sum()))
    if special:
        x[rng.random(size=x.shape) < 0.05] = np.nan
        x[0, 0], x[-1, 1] = np.inf, -np.inf
    return x.astype(dtype)
