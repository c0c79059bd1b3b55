"""int8 transformer and LSTM models against onnxruntime (issue 35: the networks of issue 36 that read sequences).

A transformer encoder layer of tiny dimensions (torch.nn.TransformerEncoderLayer: model 32, 4 heads, feed-forward 64,
2 sequences of 10) quantized by onnxruntime's quantize_static in its QDQ and QOperator formats (QLinearMatMul, QGemm,
QLinearAdd, QLinearMul, QLinearSoftmax) and by quantize_dynamic (DynamicQuantizeLinear, MatMulInteger on ks::qmatmul
with int32 results), and an LSTM with a linear layer quantized by quantize_dynamic (com.microsoft
DynamicQuantizeLSTM, MatMulInteger): all exports of one package, each compared with onnxruntime
(docs/quantization.md says which parts are exact).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from test_int8 import FMA_HOST, _ort  # noqa: E402

SHAPES = {"layer": (2, 10, 32), "lstm": (2, 7, 16)}


def _float_models():
    from torch import nn
    torch.manual_seed(0)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    class Rnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(16, 32, batch_first=True)
            self.fc = nn.Linear(32, 5)

        def forward(self, x):
            return self.fc(self.lstm(x)[0])
    return {"layer": Layer().eval(), "lstm": Rnn().eval()}


def _quantize(path, out, shape, fmt):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    if fmt == "dyn":
        quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8)
        return

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.RandomState(i).randn(*shape).astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                    QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    import warnings

    import ksbuild
    root = tmp_path_factory.mktemp("int8_sequences")
    models = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for family, module in _float_models().items():
            shape = SHAPES[family]
            f32 = root / f"{family}_f32.onnx"
            torch.onnx.export(module, torch.randn(*shape), f32, input_names=["x"], output_names=["y"], dynamo=False,
                              opset_version=17)
            models[f"{family}_f32"] = f32
            for fmt in ("qdq", "qop", "dyn") if family == "layer" else ("dyn",):
                models[f"{family}_{fmt}"] = root / f"{family}_{fmt}.onnx"
                _quantize(f32, models[f"{family}_{fmt}"], shape, fmt)
    lines = ['[package]\nname = "int8_sequences"\nversion = "0.1.0"\n']
    built = [name for name in models if not name.endswith("_f32")]  # (the float models run in onnxruntime only)
    lines += [f'[kernels.{name}]\nonnx = "{models[name].name}"\n' for name in built]
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in built))
    (root / "manifest.toml").write_text("\n".join(lines))
    return models, ksbuild.build(root / "manifest.toml", quiet=True)


def _inputs(family):
    return [np.random.RandomState(100 + seed).randn(*SHAPES[family]).astype(np.float32) for seed in range(3)]


@pytest.mark.parametrize("fmt", ["qdq", "qop", "dyn"])
def test_transformer_layer_matches_onnxruntime(sequences, fmt):
    """QDQ: every integer operator onnxruntime's arithmetic (QLinearSoftmax folded from DQ → Softmax → Q as its
    optimizer folds it) and the output quantized: equal element for element. QOperator and dynamic: the integer
    sums exact, the float operators after them (LayerNormalization of the dequantized sum) within float rounding."""
    models, pkg = sequences
    for x in _inputs("layer"):
        want = _ort(models[f"layer_{fmt}"], {"x": x})
        got = np.asarray(getattr(pkg, f"layer_{fmt}")(x))
        if fmt == "qdq" and FMA_HOST:
            assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {want.size} differ"
        elif fmt == "qdq":
            step = np.abs(want[want != 0]).min()
            assert np.abs(got - want).max() <= 1.01 * step
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_dynamic_lstm_close_to_onnxruntime(sequences):
    """DynamicQuantizeLSTM runs as an LSTM of the dequantized weights; onnxruntime also quantizes the input and the
    hidden state at run time, so the two differ by about the activations' quantization error: both as close to the
    float model, and to each other."""
    models, pkg = sequences
    for x in _inputs("lstm"):
        want, reference = _ort(models["lstm_dyn"], {"x": x}), _ort(models["lstm_f32"], {"x": x})
        got = np.asarray(pkg.lstm_dyn(x))
        scale = np.abs(reference).max()
        assert np.abs(got - want).max() <= 0.02 * scale
        assert np.abs(got - reference).max() <= 2 * max(np.abs(want - reference).max(), 1e-3 * scale)
