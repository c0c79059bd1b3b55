"""examples/onnx_sklearn: a scikit-learn pipeline (StandardScaler -> SVC with an RBF kernel and probabilities)
trained on the iris flowers scikit-learn ships, converted to ONNX by skl2onnx, as a user brings one.

    python examples/onnx_sklearn/model.py      # (re)trains and writes iris_svc.onnx here

The ONNX graph is ai.onnx.ml Scaler -> SVMClassifier (libsvm's one-versus-one votes for the label,
Platt's sigmoids coupled into class probabilities), with the probabilities as a tensor: skl2onnx's
ZipMap (a sequence of maps, which no C type holds) is turned off. Needs scikit-learn and skl2onnx
(pip install -e .[examples]).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def train():
    from sklearn import datasets, pipeline, preprocessing, svm
    x, y = datasets.load_iris(return_X_y=True)
    model = pipeline.make_pipeline(preprocessing.StandardScaler(), svm.SVC(probability=True, random_state=0))
    model.fit(x.astype(np.float32), y)
    return model, x.astype(np.float32), y


def main() -> None:
    import onnx
    from skl2onnx import to_onnx
    model, x, y = train()
    onx = to_onnx(model, x[:1], options={"zipmap": False}, target_opset={"": 17, "ai.onnx.ml": 3})
    onx.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"  # (skl2onnx leaves the batch dim unnamed)
    onnx.checker.check_model(onx)
    onnx.save(onx, str(HERE / "iris_svc.onnx"))
    print(f"wrote {HERE / 'iris_svc.onnx'}: training accuracy {model.score(x, y):.3f}")


if __name__ == "__main__":
    main()
