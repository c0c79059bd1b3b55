"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble), compiled, against
onnxruntime: random forests of every node mode, NaN routing, the four aggregations, the post transforms,
base values, multiclass and the binary conventions, int and string labels, float and double thresholds,
at several batch sizes. Also: the gradient is zero, vmap matches a loop, and bad models are located errors.

Where onnxruntime 1.32 departs from the operator's text ksbuild follows the text, and the test says so:
TreeEnsemble's post_transform 1 is SOFTMAX and 2 LOGISTIC (onnxruntime swaps them), and BRANCH_MEMBER
compares the feature exactly (onnxruntime truncates it to an integer first)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEBUG

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

import tree_models as tm  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402

MODES = tm.LEGACY_MODES
REGRESSORS = {
    "r_sum": dict(seed=1, n_targets=2, modes=MODES, missing=True),
    "r_avg_base": dict(seed=2, n_targets=3, aggregate="AVERAGE", base=[0.5, -1.0, 2.0], all_targets=False,
                       modes=MODES, missing=True),
    "r_min": dict(seed=3, n_targets=3, aggregate="MIN", all_targets=False, modes=MODES),
    "r_max_base": dict(seed=4, n_targets=2, aggregate="MAX", base=[1.0, -1.0], all_targets=False),
    "r_one_logistic": dict(seed=5, n_targets=1, post="LOGISTIC", base=[0.25]),  # onnxruntime: no transform
    "r_softmax": dict(seed=6, n_targets=3, post="SOFTMAX", base=[0.0, 1.0, -1.0], modes=MODES),
    "r_softmax_zero": dict(seed=7, n_targets=3, post="SOFTMAX_ZERO", all_targets=False),
    "r_logistic": dict(seed=8, n_targets=2, post="LOGISTIC", missing=True),
    "r_deep": dict(seed=9, n_targets=1, n_trees=12, depth=9, modes=("BRANCH_LT",)),
    "r_doubles": dict(seed=10, n_targets=2, doubles=True, modes=MODES, missing=True),
    "r_many": dict(seed=35, n_targets=10, aggregate="MIN", all_targets=False, modes=MODES),  # (rows of the table)
}
CLASSIFIERS = {
    "c_multi_int": dict(seed=11, labels=[10, 20, 30], post="SOFTMAX", base=[0.1, 0.0, -0.1], modes=MODES,
                        missing=True),
    "c_multi_str": dict(seed=12, labels=["ant", "bee", "cat", "dog"], voting="some", weights="mixed"),
    "c_multi_zero": dict(seed=13, labels=[0, 1, 2], post="SOFTMAX_ZERO", voting="some"),
    "c_binary_pos": dict(seed=14, labels=[0, 1], voting="one"),  # a forest's probability of class 1
    "c_binary_logit": dict(seed=15, labels=[0, 1], voting="one", weights="mixed", post="LOGISTIC"),
    "c_binary_base": dict(seed=16, labels=[3, 9], voting="one", weights="mixed", base=[0.2, 0.2]),
    "c_binary_str": dict(seed=17, labels=["no", "yes"], voting="one", post="LOGISTIC", weights="mixed"),
    "c_two_all": dict(seed=18, labels=[0, 1], voting="all"),
    "c_two_base": dict(seed=19, labels=[4, 5], voting="some", weights="mixed", base=[-0.5, 0.5],
                       post="SOFTMAX"),
    "c_two_none": dict(seed=20, labels=["a", "b"], voting="some", weights="mixed", post="LOGISTIC"),
    "c_many": dict(seed=36, labels=list(range(3, 15)), voting="some", post="SOFTMAX"),
}
V5 = {
    "v_sum": dict(seed=21, n_targets=3, aggregate=1, modes=(0, 1, 2, 3, 4, 5)),
    "v_avg": dict(seed=22, n_targets=2, aggregate=0, modes=(0, 3)),
    "v_min": dict(seed=23, n_targets=3, aggregate=2, modes=(1, 2)),
    "v_max": dict(seed=24, n_targets=3, aggregate=3, modes=(0, 4, 5)),
    "v_softmax_zero": dict(seed=25, n_targets=3, post=3, modes=(0, 1)),
    "v_doubles": dict(seed=26, n_targets=2, modes=(0, 2), doubles=True),
    "v_member": dict(seed=27, n_targets=2, modes=(0, 6)),
    "v_softmax": dict(seed=28, n_targets=3, post=1, modes=(0,)),   # the operator's text: 1 is SOFTMAX
    "v_logistic": dict(seed=29, n_targets=3, post=2, modes=(0,)),  # and 2 is LOGISTIC
}


def _models():
    out = {name: tm.regressor(**kw) for name, kw in REGRESSORS.items()}
    out.update({name: tm.classifier(**kw) for name, kw in CLASSIFIERS.items()})
    out.update({name: tm.ensemble_v5(**kw) for name, kw in V5.items()})
    raw = {name: dict(kw, post=0) for name, kw in V5.items() if name in ("v_softmax", "v_logistic")}
    out.update({name + "_raw": tm.ensemble_v5(**kw) for name, kw in raw.items()})
    return out


@pytest.fixture(scope="module")
def forests(tmp_path_factory):
    root = tmp_path_factory.mktemp("trees")
    models = _models()
    for name, m in models.items():
        onnx.checker.check_model(m)
        onnx.save(m, str(root / f"{name}.onnx"))
    kernels = "\n".join(f'{name} = {{ onnx = "{name}.onnx" }}' for name in models)
    exports = "\n".join(f'{name} = "{name}"' for name in models)
    (root / "manifest.toml").write_text(
        f'[package]\nname = "forests"\n\n[kernels]\n{kernels}\n\n[exports]\n{exports}\n'
        'r_sum_vjp = "vjp(r_sum)"\nr_sum_vmap = "vmap(r_sum)"\n')
    return ksbuild.build(root / "manifest.toml", quiet=True, optimize=DEBUG), root


def _inputs(name: str, n: int) -> np.ndarray:
    x = tm.inputs(n, n=n, dtype=np.float64 if "doubles" in name else np.float32)
    if name == "v_member":  # whole numbers: where onnxruntime's truncation changes nothing
        x = np.where(np.isfinite(x), np.round(x), x).astype(np.float32)
    return x


def _onnxruntime(root, name: str, x):
    return ort.InferenceSession(str(root / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})


@pytest.mark.parametrize("name", [*REGRESSORS, *CLASSIFIERS, *(k for k in V5 if k not in ("v_softmax", "v_logistic"))])
@pytest.mark.parametrize("n", [1, 7, 64])
def test_matches_onnxruntime(forests, name, n):
    p, root = forests
    x = _inputs(name, n)
    want = _onnxruntime(root, name, x)
    got = getattr(p, name)(x)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.dtype == object:
            assert g.tolist() == w.tolist()
        elif w.dtype.kind == "i":
            np.testing.assert_array_equal(g, w)
        else:
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, transform", [("v_softmax", "softmax"), ("v_logistic", "logistic")])
def test_tree_ensemble_post_transform_numbers_follow_the_operator_text(forests, name, transform):
    p, root = forests
    x = _inputs(name, 64)
    raw = _onnxruntime(root, name + "_raw", x)[0].astype(np.float64)
    if transform == "softmax":
        e = np.exp(raw - raw.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    else:
        want = 1 / (1 + np.exp(-raw))
    np.testing.assert_allclose(getattr(p, name)(x), want, rtol=1e-5, atol=1e-6)


def test_gradient_is_zero_and_vmap_matches_a_loop(forests):
    p, _ = forests
    x = _inputs("r_sum", 16)
    dy = np.ones((16, 2), np.float32)
    np.testing.assert_array_equal(p.r_sum_vjp(np.nan_to_num(x), dy), np.zeros_like(x))
    xs = np.stack([_inputs("r_sum", 16), _inputs("r_sum", 16)[::-1]])
    ys = p.r_sum_vmap(xs)
    for xi, yi in zip(xs, ys):
        np.testing.assert_allclose(yi, p.r_sum(xi), rtol=1e-6, atol=1e-6)  # (the sums may run in another order)


def _broken(tmp_path, change, kind="regressor"):
    from onnx import helper as h
    m = tm.regressor(32, n_targets=2) if kind == "regressor" else tm.classifier(33, [0, 1, 2])
    node = m.graph.node[0]
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    change(attrs)
    attrs = {k: v for k, v in attrs.items() if v is not None}
    new = h.make_node(node.op_type, list(node.input), list(node.output), domain="ai.onnx.ml", name="forest",
                      **{k: [s.decode() if isinstance(s, bytes) else s for s in v] if isinstance(v, list) else
                         v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()})
    m.graph.node[0].CopyFrom(new)
    onnx.save(m, str(tmp_path / "bad.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "bad.onnx", "bad")
    text = str(e.value)
    assert "bad.onnx" in text and "forest" in text
    return text


def _set(key, value):
    def change(attrs):
        attrs[key] = value(attrs[key]) if callable(value) else value
    return change


@pytest.mark.parametrize("change, message", [
    (_set("nodes_featureids", lambda v: [7] * len(v)), "feature 7, but the input has 4 features"),
    (_set("nodes_modes", lambda v: [b"BRANCH_ABOUT" if m != b"LEAF" else m for m in v]),
     "unknown node mode 'BRANCH_ABOUT'"),
    (_set("nodes_truenodeids", lambda v: [99] + list(v[1:])), "names node 99 of tree 0"),
    (_set("base_values", [1.0, 2.0, 3.0]), "base_values has 3 values for 2 targets"),
    (_set("target_ids", lambda v: [5] * len(v)), "target_ids entry is outside [0, 2)"),
    (_set("nodes_falsenodeids", lambda v: [0] * len(v)), "tree 0 has 8 root nodes"),
])
def test_bad_models_are_located_errors(tmp_path, change, message):
    assert message in _broken(tmp_path, change)


def test_probit_of_two_classes_is_a_located_error(tmp_path):
    """(Regressors and classifiers of three or more classes take PROBIT: tests/test_onnx_sklearn.py.)"""
    from onnx import helper as h
    m = tm.classifier(35, [0, 1])
    node = m.graph.node[0]
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    attrs["post_transform"] = "PROBIT"
    node.CopyFrom(h.make_node(node.op_type, list(node.input), list(node.output), domain="ai.onnx.ml", name="forest",
                              **attrs))
    onnx.save(m, str(tmp_path / "probit.onnx"))
    with pytest.raises(KsbuildError, match=r"probit\.onnx: node forest .*PROBIT of a two-class ensemble"):
        compile_onnx_kernel(tmp_path / "probit.onnx", "probit")


def test_a_cycle_is_a_located_error(tmp_path):
    """TreeEnsemble names its roots, so a branch back to one makes a walk that never ends."""
    from onnx import helper as h
    m = tm.ensemble_v5(34, 2, modes=(0,), missing=False, n_trees=1, depth=3)
    node = m.graph.node[0]
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    last = len(attrs["nodes_truenodeids"]) - 1
    attrs["nodes_truenodeids"][last], attrs["nodes_trueleafs"][last] = 0, 0
    node.CopyFrom(h.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", name="forest", **attrs))
    onnx.save(m, str(tmp_path / "cycle.onnx"))
    with pytest.raises(KsbuildError, match=r"cycle\.onnx: node forest .*the trees have a cycle"):
        compile_onnx_kernel(tmp_path / "cycle.onnx", "cycle")


def test_infinite_splits_compare_as_infinities(tmp_path):
    """HistGradientBoosting and LightGBM write +inf splits; in a double TreeEnsemble they were made finite, so
    x = +inf went the false way of `x <= inf` (held-out pass with real converters)."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from ksbuild.ir.interp import eval_func
    for split in (np.inf, -np.inf):
        node = h.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1, tree_roots=[0],
                           nodes_featureids=[0], nodes_splits=nh.from_array(np.array([split]), "s"),
                           nodes_modes=nh.from_array(np.array([0], np.uint8), "m"), nodes_truenodeids=[0],
                           nodes_falsenodeids=[1], nodes_trueleafs=[1], nodes_falseleafs=[1], leaf_targetids=[0, 0],
                           leaf_weights=nh.from_array(np.array([1.0, 2.0]), "w"))
        m = tm._model(node, onnx.TensorProto.DOUBLE, 1, [h.make_tensor_value_info("Y", onnx.TensorProto.DOUBLE,
                                                                                  ["N", 1])], ml_opset=5)
        onnx.save(m, str(tmp_path / "inf.onnx"))
        x = np.array([[np.inf], [-np.inf], [1e308], [-1e308], [1.0]])
        want = _onnxruntime(tmp_path, "inf", x)[0]
        got = eval_func(compile_onnx_kernel(tmp_path / "inf.onnx", "inf"), [x])
        np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want)
