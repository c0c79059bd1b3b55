"""scikit-learn models as skl2onnx converts them, compiled by ksbuild (backend plain, baseline CPU), against
onnxruntime with one thread, and memcpy of the input's bytes as the physical limit.

    python benchmarks/onnx/sklearn_models.py [--repeats 20]

Needs the examples extra (scikit-learn, skl2onnx). The models, trained here on synthetic data
(make_classification / make_regression, 20 features, seed 0):
- logreg: StandardScaler -> LogisticRegression, 5 classes (Scaler, LinearClassifier, Normalizer);
- svc_rbf: SVC(probability=True), 3 classes (SVMClassifier: RBF kernel, votes, Platt + coupling);
- svr: SVR, RBF kernel (SVMRegressor);
- mlp: MLPClassifier 64-64, 3 classes (MatMul, Relu, Softmax, ArgMax).
Each at batch 1 and 1000 (one build serves both), built for the portable baseline (SSE2) and with
cpu = "native"; outputs are compared first. Each time is the MEDIAN of
--repeats samples of calls from Python (ctypes for ksbuild, session.run for onnxruntime), the contenders
sampled in turn. Ratios > 1 mean ksbuild is faster.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trees import run_table  # noqa: E402


def models(tmp: Path) -> dict:
    import onnx
    from skl2onnx import to_onnx
    from sklearn import datasets, linear_model, neural_network, pipeline, preprocessing, svm
    x, y5 = datasets.make_classification(2000, 20, n_informative=10, n_classes=5, random_state=0)
    x = x.astype(np.float32)
    y3 = y5 % 3
    xr, yr = datasets.make_regression(2000, 20, noise=0.1, random_state=0)
    xr = xr.astype(np.float32)
    fitted = {
        "logreg": (pipeline.make_pipeline(preprocessing.StandardScaler(),
                                          linear_model.LogisticRegression(max_iter=500)).fit(x, y5), x),
        "svc_rbf": (svm.SVC(probability=True, random_state=0).fit(x[:600], y3[:600]), x),
        "svr": (svm.SVR(C=10.0).fit(xr[:600], yr[:600]), xr),
        "mlp": (neural_network.MLPClassifier((64, 64), max_iter=200, random_state=0).fit(x, y3), x),
    }
    out = {}
    for name, (model, data) in fitted.items():
        opts = {"zipmap": False} if hasattr(model, "predict_proba") else None
        onnx.save(to_onnx(model, data[:1], options=opts, target_opset={"": 17, "ai.onnx.ml": 3}),
                  str(tmp / f"{name}.onnx"))
        out[name] = (tmp / f"{name}.onnx", data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms = models(Path(tmp))
        table = {name: (path, lambda batch, d=data: np.ascontiguousarray(d[:batch])) for name, (path, data) in
                 ms.items()}
        run_table(table, "bench_sklearn", args.repeats, 1e-3, 1e-4)


if __name__ == "__main__":
    main()
