"""examples/onnx_forest: a gradient-boosted tree ensemble as ONNX, the form converters write for
scikit-learn, XGBoost and LightGBM models (ai.onnx.ml TreeEnsembleRegressor).

    python examples/onnx_forest/model.py      # writes forest.onnx here

To stay free of scikit-learn, the ensemble is trained here with numpy: 40 rounds of depth-3
regression trees fitted to the residuals of y = sin(3 x0) + x1² - x0 x2 on 2000 points of [-1, 1]³,
learning rate 0.2. Each tree's nodes are written as converters write them: (tree id, node id) pairs,
BRANCH_LEQ splits, LEAF nodes with target weights; the mean of y is the base value. An input that is
NaN goes to the true (<=) branch of the node that reads it (nodes_missing_value_tracks_true), as
XGBoost's default direction does.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROUNDS, DEPTH, RATE = 40, 3, 0.2


def target(x: np.ndarray) -> np.ndarray:
    return np.sin(3 * x[:, 0]) + x[:, 1] ** 2 - x[:, 0] * x[:, 2]


def fit_tree(x: np.ndarray, r: np.ndarray, depth: int) -> dict:
    """A regression tree of the residuals r: each split is the (feature, threshold) among the 16-quantile
    candidates with the lowest squared error of the two halves' means."""
    if depth == 0 or len(r) < 8:
        return {"value": float(r.mean()) if len(r) else 0.0}
    best = None
    for f in range(x.shape[1]):
        for t in np.quantile(x[:, f], np.linspace(0.05, 0.95, 16)):
            left = x[:, f] <= t
            if left.all() or not left.any():
                continue
            err = ((r[left] - r[left].mean()) ** 2).sum() + ((r[~left] - r[~left].mean()) ** 2).sum()
            if best is None or err < best[0]:
                best = (err, f, float(np.float32(t)))
    if best is None:
        return {"value": float(r.mean())}
    _, f, t = best
    left = x[:, f] <= t
    return {"feature": f, "threshold": t, "true": fit_tree(x[left], r[left], depth - 1),
            "false": fit_tree(x[~left], r[~left], depth - 1)}


def predict_tree(tree: dict, x: np.ndarray) -> np.ndarray:
    if "value" in tree:
        return np.full(len(x), tree["value"])
    left = x[:, tree["feature"]] <= tree["threshold"]
    out = np.empty(len(x))
    out[left] = predict_tree(tree["true"], x[left])
    out[~left] = predict_tree(tree["false"], x[~left])
    return out


def train(seed: int = 0) -> tuple[float, list[dict]]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(2000, 3))
    y = target(x)
    base = float(y.mean())
    pred = np.full(len(y), base)
    trees = []
    for _ in range(ROUNDS):
        tree = fit_tree(x, y - pred, DEPTH)
        trees.append(tree)
        pred += RATE * predict_tree(tree, x)
    return base, trees


def to_onnx(base: float, trees: list[dict]):
    """The TreeEnsembleRegressor node of the ensemble, in a model x [batch, 3] -> y [batch, 1]."""
    from onnx import TensorProto, helper
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                         "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    for t, tree in enumerate(trees):
        count = [0]

        def emit(node: dict) -> int:
            me = count[0]
            count[0] += 1
            row = len(a["nodes_nodeids"])
            for k, v in (("nodes_treeids", t), ("nodes_nodeids", me), ("nodes_featureids", node.get("feature", 0)),
                         ("nodes_values", node.get("threshold", 0.0)), ("nodes_truenodeids", 0),
                         ("nodes_falsenodeids", 0), ("nodes_missing_value_tracks_true", int("feature" in node)),
                         ("nodes_modes", "BRANCH_LEQ" if "feature" in node else "LEAF")):
                a[k].append(v)
            if "value" in node:
                for k, v in (("target_treeids", t), ("target_nodeids", me), ("target_ids", 0),
                             ("target_weights", RATE * node["value"])):
                    a[k].append(v)
            else:
                a["nodes_truenodeids"][row] = emit(node["true"])
                a["nodes_falsenodeids"][row] = emit(node["false"])
            return me
        emit(tree)
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", name="boosted_trees",
                            n_targets=1, base_values=[base], aggregate_function="SUM", post_transform="NONE", **a)
    graph = helper.make_graph([node], "forest", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                             producer_name="examples/onnx_forest/model.py")


def export(out: Path = HERE):
    """Write forest.onnx into `out`; return the model."""
    import onnx
    model = to_onnx(*train())
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "forest.onnx"))
    return model


if __name__ == "__main__":
    export()
    print(f"wrote {HERE / 'forest.onnx'}")
