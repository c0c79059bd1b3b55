"""int8 transformer and LSTM models against onnxruntime (issue 35: the networks of issue 36 that read sequences).

A transformer encoder layer of tiny dimensions (torch.nn.TransformerEncoderLayer: model 32, 4 heads, feed-forward 64,
2 sequences of 10) quantized by onnxruntime's quantize_static in its QDQ and QOperator formats (QLinearMatMul, QGemm,
QLinearAdd, QLinearMul, QLinearSoftmax) and by quantize_dynamic (DynamicQuantizeLinear, MatMulInteger on ks::qmatmul
with int32 results), and a two-layer bidirectional LSTM with a linear layer quantized by quantize_dynamic
(com.microsoft DynamicQuantizeLSTM, MatMulInteger): all exports of one package, each compared with onnxruntime
(docs/quantization.md says which parts are exact). The models are quantized by benchmarks/int8/bench.py's quantize.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from test_int8 import FMA_HOST, _ort  # noqa: E402

# benchmarks/int8/bench.py's quantize (by path, under a name of its own: other benchmark files are `bench` too)
_spec = importlib.util.spec_from_file_location("int8_bench", ROOT / "benchmarks/int8/bench.py")
int8_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(int8_bench)

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
            self.lstm = nn.LSTM(16, 32, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(64, 5)

        def forward(self, x):
            return self.fc(self.lstm(x)[0])
    return {"layer": Layer().eval(), "lstm": Rnn().eval()}


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
                calibration = [np.random.RandomState(i).randn(*shape).astype(np.float32) for i in range(4)]
                int8_bench.quantize(family, f32, models[f"{family}_{fmt}"], shape, fmt, calibration)
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


def test_dynamic_lstm_computes_as_onnxruntime(sequences):
    """DynamicQuantizeLSTM (two layers, both directions) as onnxruntime's kernel computes it: the input and each
    step's hidden state quantized at run time, integer products, the sums scaled in f32. What is left between the
    two is float rounding (onnxruntime's own logistic and tanh, the order of a few additions): 1e-7 of the output
    here, where the float LSTM of the dequantized weights (before the thirteenth session) was 1e-2 away, as far as
    onnxruntime is from the float model. (A hidden value that falls on a rounding tie can take the other step and
    move the outputs by one step's product; the bound leaves room for that, not for the float LSTM.)"""
    models, pkg = sequences
    for x in _inputs("lstm"):
        want, reference = _ort(models["lstm_dyn"], {"x": x}), _ort(models["lstm_f32"], {"x": x})
        got = np.asarray(pkg.lstm_dyn(x))
        scale = np.abs(reference).max()
        assert np.abs(want - reference).max() > 1e-3 * scale  # (the quantization shows)
        assert np.abs(got - want).max() <= 1e-4 * scale
