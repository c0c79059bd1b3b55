"""ONNX-ML preprocessing and linear models as skl2onnx writes them around a model (Scaler, Imputer, Normalizer,
LinearRegressor, ArrayFeatureExtractor with a scalar index), compiled and checked against onnxruntime, with a
pipeline Imputer -> Scaler -> TreeEnsembleRegressor; ZipMap is a located error with the converter option that
avoids it."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402

F = 4


def _model(nodes, out_type=T.FLOAT, out_shape=("N", F), x_type=T.FLOAT, inits=()):
    g = h.make_graph(nodes, "ml", [h.make_tensor_value_info("X", x_type, ["N", F])],
                     [h.make_tensor_value_info("Y", out_type, list(out_shape))], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)])


def _ml(op, **attrs):
    return h.make_node(op, ["X"], ["Y"], domain="ai.onnx.ml", **attrs)


def _pipeline():
    """Imputer (NaN -> feature means) -> Scaler -> a small forest, as a scikit-learn pipeline converts."""
    import tree_models as tm
    forest = tm.regressor(5, n_targets=1, modes=("BRANCH_LEQ",))
    trees = forest.graph.node[0]
    trees.input[0] = "scaled"
    nodes = [h.make_node("Imputer", ["X"], ["imputed"], domain="ai.onnx.ml",
                         imputed_value_floats=[0.1, -0.2, 0.3, 0.0], replaced_value_float=float("nan")),
             h.make_node("Scaler", ["imputed"], ["scaled"], domain="ai.onnx.ml", offset=[0.5, -0.5, 0.0, 1.0],
                         scale=[2.0, 0.5, 1.0, 1.5]),
             trees]
    return _model(nodes, out_shape=("N", 1))


MODELS = {
    "scaler": _model([_ml("Scaler", offset=[0.5, -1.0, 0.0, 2.0], scale=[2.0, 0.5, -1.0, 3.0])]),
    "scaler_one": _model([_ml("Scaler", offset=[1.5], scale=[0.25])]),
    "scaler_int": _model([_ml("Scaler", offset=[1.0], scale=[0.5])], x_type=T.INT64),
    "imputer_nan": _model([_ml("Imputer", imputed_value_floats=[9.0, 8.0, 7.0, 6.0],
                               replaced_value_float=float("nan"))]),
    "imputer_value": _model([_ml("Imputer", imputed_value_floats=[-1.0], replaced_value_float=0.0)]),
    "imputer_int": _model([_ml("Imputer", imputed_value_int64s=[7], replaced_value_int64=-1)], T.INT64,
                          x_type=T.INT64),
    "norm_max": _model([_ml("Normalizer", norm="MAX")]),
    "norm_l1": _model([_ml("Normalizer", norm="L1")]),
    "norm_l2": _model([_ml("Normalizer", norm="L2")]),
    "linear": _model([_ml("LinearRegressor", coefficients=[0.5, -1.0, 2.0, 0.25], intercepts=[0.75])],
                     out_shape=("N", 1)),
    "linear3": _model([_ml("LinearRegressor", targets=3, coefficients=list(np.linspace(-1, 1, 12)),
                           intercepts=[0.1, 0.2, -0.3], post_transform="SOFTMAX")], out_shape=("N", 3)),
    "linear_logistic": _model([_ml("LinearRegressor", targets=2, coefficients=list(np.linspace(-2, 1, 8)),
                                   post_transform="LOGISTIC")], out_shape=("N", 2)),
    "afe_scalar": _model([h.make_node("ArrayFeatureExtractor", ["X", "i"], ["Y"], domain="ai.onnx.ml")],
                         out_shape=("N", 1), inits=[nh.from_array(np.array(2, np.int64), "i")]),
    "pipeline": _pipeline(),
    "feature_vectorizer": _model([h.make_node("FeatureVectorizer", ["X", "X"], ["Y"], domain="ai.onnx.ml",
                                              inputdimensions=[2, 6])], out_shape=("N", 8)),
    "feature_vectorizer_int": _model([h.make_node("FeatureVectorizer", ["X"], ["Y"], domain="ai.onnx.ml",
                                                  inputdimensions=[4])], x_type=T.INT64),
}


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ml")
    for name, m in MODELS.items():
        onnx.checker.check_model(m)
        onnx.save(m, str(root / f"{name}.onnx"))
    kernels = "\n".join(f'{k} = {{ onnx = "{k}.onnx" }}' for k in MODELS)
    exports = "\n".join(f'{k} = "{k}"' for k in MODELS)
    (root / "manifest.toml").write_text(f'[package]\nname = "ml_ops"\n\n[kernels]\n{kernels}\n\n[exports]\n{exports}\n')
    return ksbuild.build(root / "manifest.toml", quiet=True), root


def _inputs(name: str, n: int):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, F)) * 2
    x[rng.random(size=x.shape) < 0.2] = 0.0
    if name.startswith(("imputer_nan", "pipeline")):
        x[rng.random(size=x.shape) < 0.3] = np.nan
    if name.startswith("norm"):
        x[0] = 0.0  # a zero row: the divisor is taken as 1e-30
    if "int" in name:
        x = np.where(rng.random(size=x.shape) < 0.3, -1, np.round(x)).astype(np.int64)
    return x.astype(np.float32) if "int" not in name else x


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("n", [1, 9])
def test_matches_onnxruntime(pkg, name, n):
    p, root = pkg
    x = _inputs(name, n)
    want = ort.InferenceSession(str(root / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = getattr(p, name)(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_zipmap_says_how_to_avoid_it(tmp_path):
    m = h.make_model(h.make_graph(
        [h.make_node("ZipMap", ["X"], ["Y"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2, 3], name="zip")], "z",
        [h.make_tensor_value_info("X", T.FLOAT, ["N", F])],
        [h.make_value_info("Y", h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(
            T.FLOAT, []))))]), opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)])
    onnx.save(m, str(tmp_path / "zip.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "zip.onnx", "zip")
    assert "zip.onnx" in str(e.value) and "zipmap" in str(e.value).lower()


def test_category_mapper_both_ways(tmp_path):
    """Strings to int64 and int64 to strings (the input's type picks the way), unknown values to the defaults,
    a value listed twice as its last pair; against onnxruntime."""
    cats = dict(cats_strings=["red", "green", "blue", "red"], cats_int64s=[1, 2, 3, 9])
    for name, x_type, y_type, extra in (("s2i", T.STRING, T.INT64, dict(default_int64=-7)),
                                        ("i2s", T.INT64, T.STRING, dict(default_string="none"))):
        g = h.make_graph([h.make_node("CategoryMapper", ["X"], ["Y"], domain="ai.onnx.ml", **cats, **extra)], name,
                         [h.make_tensor_value_info("X", x_type, ["N"])], [h.make_tensor_value_info("Y", y_type, ["N"])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)])
        onnx.checker.check_model(m)
        onnx.save(m, str(tmp_path / f"{name}.onnx"))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "catmap"\n\n[kernels]\ns2i = { onnx = "s2i.onnx" }\n'
                                            'i2s = { onnx = "i2s.onnx" }\n\n[exports]\ns2i = "s2i"\ni2s = "i2s"\n')
    p = ksbuild.build(tmp_path / "manifest.toml", quiet=True)
    for name, x in (("s2i", np.array(["blue", "red", "purple", "green", ""], dtype=object)),
                    ("i2s", np.array([3, 9, 1, 4, -1], dtype=np.int64))):
        want = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"]).run(
            None, {"X": x})[0]
        np.testing.assert_array_equal(np.asarray(getattr(p, name)(x)).astype(str), want.astype(str))


def test_inputs_with_unnamed_first_dims_share_the_batch(tmp_path):
    """skl2onnx gives each column of a DataFrame its own input with an unnamed first dim; as separate dims the
    rows could not be concatenated (a located error before). They are one dim, batch."""
    ins = [h.make_tensor_value_info("num", T.FLOAT, [None, 2]), h.make_tensor_value_info("grade", T.INT64, [None, 1])]
    nodes = [h.make_node("Cast", ["grade"], ["gradef"], to=T.FLOAT),
             h.make_node("Concat", ["num", "gradef"], ["Y"], axis=1)]
    m = h.make_model(h.make_graph(nodes, "cols", ins, [h.make_tensor_value_info("Y", T.FLOAT, [None, 3])]),
                     opset_imports=[h.make_opsetid("", 17)])
    onnx.save(m, str(tmp_path / "cols.onnx"))
    (tmp_path / "manifest.toml").write_text('[package]\nname = "cols"\n\n[kernels]\ncols = { onnx = "cols.onnx" }\n\n'
                                            '[exports]\ncols = "cols"\n')
    p = ksbuild.build(tmp_path / "manifest.toml", quiet=True)
    assert "int64_t batch" in (p.root / "include/cols.h").read_text()
    num, grade = np.float32([[1, 2], [3, 4], [5, 6]]), np.int64([[7], [8], [9]])
    want = ort.InferenceSession(str(tmp_path / "cols.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"num": num, "grade": grade})[0]
    np.testing.assert_array_equal(p.cols(num, grade), want)


def _broken(tmp_path, node, opset_ml=1, width=F):
    g = h.make_graph([node], "broken", [h.make_tensor_value_info("X", T.FLOAT, ["N", width])],
                     [h.make_tensor_value_info(o, T.FLOAT, None) for o in node.output])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", opset_ml)])
    onnx.save(m, str(tmp_path / "broken.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "broken.onnx", "broken")
    assert "broken.onnx" in str(e.value)
    return str(e.value)


def test_bad_ml_models_are_named_errors(tmp_path):
    """From a held-out pass over converted models: each names what is wrong (a constant index out of range
    compiled and clamped; a short intercepts blamed the coefficients; an ai.onnx.ml opset of 99 passed)."""
    afe = h.make_node("ArrayFeatureExtractor", ["X", "i"], ["Y"], domain="ai.onnx.ml", name="afe")
    g = h.make_graph([afe], "afe", [h.make_tensor_value_info("X", T.FLOAT, ["N", 3])],
                     [h.make_tensor_value_info("Y", T.FLOAT, None)], [nh.from_array(np.array([7], np.int64), "i")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)]),
              str(tmp_path / "afe.onnx"))
    with pytest.raises(KsbuildError, match="index 7 is outside the 3 columns of X"):
        compile_onnx_kernel(tmp_path / "afe.onnx", "afe")
    lc = h.make_node("LinearClassifier", ["X"], ["L", "Z"], domain="ai.onnx.ml", coefficients=[0.5] * 12,
                     intercepts=[0.1, 0.2], classlabels_ints=[0, 1, 2])
    assert "2 intercepts (one per class) and 12 coefficients" in _broken(tmp_path, lc) and "3 intercepts would fit" \
        in _broken(tmp_path, lc)
    svm = h.make_node("SVMClassifier", ["X"], ["L", "Z"], domain="ai.onnx.ml", vectors_per_class=[2, 5],
                      support_vectors=[0.1] * 12, coefficients=[0.5] * 3, rho=[0.0], classlabels_ints=[0, 1],
                      kernel_type="RBF", kernel_params=[0.1, 0.0, 3.0])
    assert "vectors_per_class adds up to 7 support vectors, but support_vectors holds 3" in _broken(tmp_path, svm)
    assert "opset 99 of ai.onnx.ml" in _broken(tmp_path, h.make_node("Binarizer", ["X"], ["Y"], domain="ai.onnx.ml"),
                                               opset_ml=99)
