"""scikit-learn models as skl2onnx converts them (LinearClassifier, SVMClassifier, SVMRegressor, OneHotEncoder, with
the Scaler/Normalizer around them), compiled into one package and checked against onnxruntime (every output) and
scikit-learn itself (labels, probabilities, predictions); plus hand-made LinearClassifier and SVMClassifier nodes
for the cases converters rarely write (one score column, string labels, each post transform, liblinear mode),
against onnxruntime, and PROBIT against scipy (onnxruntime's PROBIT is an approximation good to about 2e-3); and
the vjp of three of them against finite differences."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import DEBUG

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e .[examples])")
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx is not installed (pip install -e .[examples])")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from sklearn import (  # noqa: E402
    calibration,
    compose,
    datasets,
    discriminant_analysis,
    ensemble,
    linear_model,
    multiclass,
    pipeline,
    preprocessing,
    svm,
)

import ksbuild  # noqa: E402


def _data():
    x, y = datasets.load_iris(return_X_y=True)
    d, dy = datasets.load_digits(return_X_y=True)
    keep = dy < 5  # five digits keep the 10-class coupling small enough to train fast
    r, ry = datasets.load_diabetes(return_X_y=True)
    rng = np.random.default_rng(0)
    cats = rng.integers(0, 4, (150, 3)).astype(np.int64)
    mixed = np.concatenate([x[:, :2], rng.integers(0, 3, (150, 1))], axis=1).astype(np.float32)
    return {"iris": (x.astype(np.float32), y), "binary": (x.astype(np.float32), (y > 0).astype(np.int64)),
            "digits": (d[keep].astype(np.float32) / 16, dy[keep]), "diabetes": (r.astype(np.float32), ry),
            "strings": (x.astype(np.float32), np.array(["setosa", "versicolor", "virginica"])[y]),
            "categories": (cats, None), "mixed": (mixed, y), "colors": (np.array(["red", "green", "blue", "cyan"],
                                                                                 dtype=object)[cats[:, :1]], None)}


def _models():
    return {
        "logreg": (linear_model.LogisticRegression(max_iter=1000), "iris"),
        "logreg_binary": (linear_model.LogisticRegression(max_iter=1000), "binary"),
        "logreg_strings": (linear_model.LogisticRegression(max_iter=1000), "strings"),
        "linear_svc": (svm.LinearSVC(), "iris"),
        "ridge_classifier": (linear_model.RidgeClassifier(), "iris"),
        "lda": (discriminant_analysis.LinearDiscriminantAnalysis(), "iris"),
        "pipeline": (pipeline.make_pipeline(preprocessing.StandardScaler(),
                                            linear_model.LogisticRegression(max_iter=1000)), "iris"),
        "svc_rbf": (svm.SVC(), "iris"),
        "svc_binary": (svm.SVC(kernel="linear"), "binary"),
        "svc_poly": (svm.SVC(kernel="poly", degree=3), "iris"),
        "svc_sigmoid": (svm.SVC(kernel="sigmoid", gamma=0.05), "binary"),
        "svc_proba": (svm.SVC(probability=True, random_state=0), "iris"),
        "svc_proba_digits": (svm.SVC(probability=True, random_state=0), "digits"),
        "svc_proba_binary": (svm.SVC(probability=True, random_state=0), "binary"),
        "nusvc_strings": (svm.NuSVC(), "strings"),
        "svr": (svm.SVR(C=50.0), "diabetes"),
        "nusvr_poly": (svm.NuSVR(kernel="poly", degree=2), "diabetes"),
        "one_class_svm": (svm.OneClassSVM(nu=0.2), "iris"),
        "one_vs_rest": (multiclass.OneVsRestClassifier(linear_model.LogisticRegression(max_iter=1000)), "iris"),
        "calibrated_svc": (calibration.CalibratedClassifierCV(svm.LinearSVC(), cv=3), "iris"),
        "one_hot": (preprocessing.OneHotEncoder(sparse_output=False), "categories"),
        "one_hot_strings": (preprocessing.OneHotEncoder(handle_unknown="ignore", sparse_output=False), "colors"),
        "bins_one_hot": (preprocessing.KBinsDiscretizer(3, encode="onehot-dense"), "iris"),
        "columns": (pipeline.make_pipeline(compose.ColumnTransformer(
            [("cat", preprocessing.OneHotEncoder(handle_unknown="ignore"), [2]),
             ("num", preprocessing.StandardScaler(), [0, 1])]), linear_model.LogisticRegression(max_iter=1000)),
            "mixed"),
        "isolation_forest": (ensemble.IsolationForest(n_estimators=5, random_state=0), "iris"),
        "power": (preprocessing.PowerTransformer(), "diabetes"),
    }


def _hand_made():
    """LinearClassifier and SVMClassifier nodes of the shapes converters rarely write."""
    out = {}
    coef1 = [0.5, -1.0, 0.25, 2.0]
    for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        out[f"lc_one_{post.lower()}"] = ("LinearClassifier", dict(coefficients=coef1, intercepts=[0.1],
                                                                  classlabels_ints=[3, 7], post_transform=post))
    out["lc_one_nolabels"] = ("LinearClassifier", dict(coefficients=coef1, intercepts=[-0.2]))
    out["lc_one_strings"] = ("LinearClassifier", dict(coefficients=coef1, intercepts=[0.0],
                                                       classlabels_strings=["no", "yes"], post_transform="LOGISTIC"))
    coef3 = list(np.linspace(-1, 1, 12))
    for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        out[f"lc_three_{post.lower()}"] = ("LinearClassifier", dict(coefficients=coef3, intercepts=[0.1, 0.0, -0.1],
                                                                    classlabels_ints=[0, 1, 2], post_transform=post))
    sv = dict(vectors_per_class=[2, 1], support_vectors=list(np.linspace(-1, 1, 12)), coefficients=[0.7, -0.3, 0.5],
              rho=[0.2], kernel_type="RBF", kernel_params=[0.3, 0.0, 3.0], classlabels_ints=[4, 9])
    for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        out[f"svm_binary_{post.lower()}"] = ("SVMClassifier", dict(sv, post_transform=post))
    out["svm_liblinear"] = ("SVMClassifier", dict(coefficients=coef3, rho=[0.3], classlabels_ints=[0, 1, 2],
                                                 kernel_params=[0.0, 0.0, 0.0]))
    out["svm_liblinear_binary"] = ("SVMClassifier", dict(coefficients=list(np.linspace(-1, 1, 8)), rho=[0.1],
                                                        classlabels_strings=["a", "b"], post_transform="LOGISTIC",
                                                        kernel_params=[0.0, 0.0, 0.0]))
    return out


PROBIT = {"lc_probit": ("LinearClassifier", dict(coefficients=list(np.linspace(-0.2, 0.2, 12)),
                                                  intercepts=[0.5, 0.4, 0.6], classlabels_ints=[0, 1, 2],
                                                  post_transform="PROBIT"))}


def _node_model(op, attrs):
    strings = "classlabels_strings" in attrs
    g = h.make_graph([h.make_node(op, ["X"], ["label", "scores"], domain="ai.onnx.ml", **attrs)], op,
                     [h.make_tensor_value_info("X", T.FLOAT, ["N", 4])],
                     [h.make_tensor_value_info("label", T.STRING if strings else T.INT64, ["N"]),
                      h.make_tensor_value_info("scores", T.FLOAT, ["N", None])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)])


GRADIENTS = ("svc_proba", "svr", "logreg")
"""Models whose vjp is exported too: the input's sensitivity of the probabilities (through libsvm's coupling
loop) or of the prediction."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sklearn")
    data = _data()
    fitted = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (model, which) in _models().items():
            x, y = data[which]
            model.fit(x, y) if y is not None else model.fit(x)
            opsets = {"": 17, "ai.onnx.ml": 3}
            try:
                m = skl2onnx.to_onnx(model, x[:1], options={"zipmap": False}, target_opset=opsets)
            except NameError:  # (models without probabilities have no zipmap option)
                m = skl2onnx.to_onnx(model, x[:1], target_opset=opsets)
            onnx.save(m, str(root / f"{name}.onnx"))
            fitted[name] = (model, which)
    for name, (op, attrs) in {**_hand_made(), **PROBIT}.items():
        onnx.save(_node_model(op, attrs), str(root / f"{name}.onnx"))
    names = list(fitted) + list(_hand_made()) + list(PROBIT)
    kernels = "\n".join(f'{k} = {{ onnx = "{k}.onnx" }}' for k in names)
    exports = "\n".join([f'{k} = "{k}"' for k in names] + [f'{k}_vjp = "vjp({k})"' for k in GRADIENTS] +
                        ['svc_proba_vmap = "vmap(svc_proba)"'])
    (root / "manifest.toml").write_text(f'[package]\nname = "sk"\n\n[kernels]\n{kernels}\n\n[exports]\n{exports}\n')
    return ksbuild.build(root / "manifest.toml", quiet=True, optimize=DEBUG), root, fitted, data


def _ort(root, name, x):
    return ort.InferenceSession(str(root / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})


def _same(got, want, name):
    assert got.shape == want.shape, name
    if want.dtype.kind in "OUS":
        np.testing.assert_array_equal(got.astype(str), want.astype(str))
    elif want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", list(_models()))
def test_sklearn_models_match_onnxruntime_and_sklearn(built, name):
    pkg, root, fitted, data = built
    model, which = fitted[name]
    x = data[which][0]
    rows = np.random.default_rng(0).choice(len(x), 40, replace=False)
    x = x[rows]
    if which == "colors":
        x[0, 0] = "purple"  # unknown: a row of zeros (handle_unknown="ignore")
    got = getattr(pkg, name)(x)
    got = got if isinstance(got, tuple) else (got,)
    want = _ort(root, name, x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(np.asarray(g), w, name)
    if hasattr(model, "classes_"):
        np.testing.assert_array_equal(np.asarray(got[0]).astype(str), model.predict(x).astype(str))
        if hasattr(model, "predict_proba") and got[1].shape[1] == len(model.classes_) and "svc" in name:
            np.testing.assert_allclose(got[1], model.predict_proba(x), atol=2e-4)
    elif hasattr(model, "transform"):
        np.testing.assert_allclose(got[0], model.transform(x), rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(np.asarray(got[0]).reshape(-1), model.predict(x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", list(_hand_made()))
@pytest.mark.parametrize("n", [1, 13])
def test_hand_made_nodes_match_onnxruntime(built, name, n):
    pkg, root, _, _ = built
    x = (np.random.default_rng(n).normal(size=(n, 4)) * 2).astype(np.float32)
    got = getattr(pkg, name)(x)
    for g, w in zip(got, _ort(root, name, x)):
        _same(np.asarray(g), w, name)


def test_probit_is_the_normal_quantile(built):
    special = pytest.importorskip("scipy.special")
    pkg, root, _, _ = built
    x = np.random.default_rng(3).normal(size=(20, 4)).astype(np.float32)
    label, z = pkg.lc_probit(x)
    coef = np.linspace(-0.2, 0.2, 12).astype(np.float32).reshape(3, 4)
    scores = x.astype(np.float64) @ coef.T.astype(np.float64) + [0.5, 0.4, 0.6]
    np.testing.assert_allclose(z, special.ndtri(scores), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, _ort(root, "lc_probit", x)[1], atol=3e-3)  # onnxruntime: Winitzki's erfinv
    np.testing.assert_array_equal(label, scores.argmax(1))


@pytest.mark.parametrize("name", GRADIENTS)
def test_vjp_matches_finite_differences(built, name):
    """d(output · ct)/dx of the compiled vjp against central differences of the compiled model (float32, so
    a step of 1e-2 in standardised units; the tolerance is relative to the gradient's size)."""
    pkg, _, fitted, data = built
    x = data[fitted[name][1]][0][::15].astype(np.float64)
    scale = x.std(axis=0)
    f = getattr(pkg, name)
    out = f(x.astype(np.float32))
    scores = out[-1] if isinstance(out, tuple) else out
    ct = np.random.default_rng(1).normal(size=scores.shape).astype(np.float32)
    g = np.asarray(getattr(pkg, f"{name}_vjp")(x.astype(np.float32), ct), dtype=np.float64)
    fd = np.zeros_like(x)
    for j in range(x.shape[1]):
        step = np.zeros(x.shape[1])
        step[j] = 1e-2 * scale[j]
        up, down = f((x + step).astype(np.float32)), f((x - step).astype(np.float32))
        up, down = (up[-1], down[-1]) if isinstance(up, tuple) else (up, down)
        fd[:, j] = ((up.astype(np.float64) - down) * ct).sum(axis=1) / (2 * step[j])
    np.testing.assert_allclose(g, fd, atol=2e-3 * np.abs(fd).max())


def test_vmap_of_the_coupled_probabilities_matches_a_loop(built):
    """vmap(svc_proba): the coupling loop's early stop (a cond on all rows converged) per lane."""
    pkg, _, fitted, data = built
    x = data[fitted["svc_proba"][1]][0]
    xs = np.stack([x[:12], x[40:52], x[100:112]])
    labels, probs = pkg.svc_proba_vmap(xs)
    for xi, li, pi in zip(xs, labels, probs):
        want_l, want_p = pkg.svc_proba(xi)
        np.testing.assert_array_equal(li, want_l)
        np.testing.assert_allclose(pi, want_p, rtol=1e-6, atol=1e-7)
