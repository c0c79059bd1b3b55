"""The six small networks of benchmarks/cortex_m4 as torch modules, sized for a microcontroller (weights 10-70 KB
as float32), each with one float input and one float output, exported to ONNX with a static batch of 1."""
from __future__ import annotations

import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mlp():
    """A 14x14 image (196 values) -> 64 -> 64 -> 10, ReLU between."""
    from torch import nn
    return nn.Sequential(nn.Linear(196, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)), (1, 196)


def _cnn():
    """examples/onnx_cnn's network (conv 3->8, batchnorm, relu, maxpool, conv 8->16 stride 2, average, linear)."""
    import importlib.util  # (by path: another example's model.py may already be imported as `model`)
    spec = importlib.util.spec_from_file_location("onnx_cnn_model", ROOT / "examples/onnx_cnn/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(), (1, 3, 16, 16)


def _recurrent(cell):
    """A 1-layer recurrent net over 20 steps of 16 features, hidden 32, the last step's state -> 4 classes."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = cell(16, 32, batch_first=True)
            self.fc = nn.Linear(32, 4)

        def forward(self, x):
            return self.fc(self.rnn(x)[0][:, -1])
    torch.manual_seed(0)
    return Net(), (1, 20, 16)


def _transformer():
    """One post-norm encoder layer as torch.nn.TransformerEncoderLayer computes it (d_model 32, 4 heads, feed-forward
    64, ReLU) over 16 tokens, written out: torch's own layer does not trace (its is_causal argument becomes a
    tensor in torch.onnx.export's TorchScript path)."""
    import torch
    from torch import nn

    class EncoderLayer(nn.Module):
        def __init__(self, d=32, heads=4, ff=64):
            super().__init__()
            self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Linear(ff, d))
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = self.norm1(x + self.out((att @ v).transpose(1, 2).reshape(b, t, d)))
            return self.norm2(x + self.ff(x))
    return EncoderLayer(), (1, 16, 32)


def _mobilenet_like():
    """A 3x32x32 image: conv 3->16 stride 2, four depthwise-separable blocks (3x3 depthwise, batchnorm, ReLU6,
    1x1 pointwise, batchnorm, ReLU6; strides 1, 2, 1, 2; 16->32->64->64->64), average pool, linear 64->10."""
    from torch import nn

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin), nn.BatchNorm2d(cin), nn.ReLU6(),
                nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout), nn.ReLU6()]
    layers = [nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU6()]
    for cin, cout, stride in [(16, 32, 1), (32, 64, 2), (64, 64, 1), (64, 64, 2)]:
        layers += block(cin, cout, stride)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers), (1, 3, 32, 32)


def _kws():
    """A DS-CNN keyword spotter as benchmarks/int8 builds it ("Hello Edge", Zhang et al. 2017): 49x10 MFCC features,
    a 10x4 convolution to 64 channels (stride 2), four depthwise-separable blocks, average pool, 12 classes."""
    from torch import nn

    def separable(c):
        return [nn.Conv2d(c, c, 3, padding=1, groups=c), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 1),
                nn.BatchNorm2d(c), nn.ReLU()]
    layers = [nn.Conv2d(1, 64, (10, 4), stride=2, padding=(5, 1)), nn.BatchNorm2d(64), nn.ReLU()]
    for _ in range(4):
        layers += separable(64)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 12)), (1, 1, 49, 10)


def models() -> dict:
    """name -> (torch module in eval mode with fixed random weights, input shape)."""
    import torch
    from torch import nn
    made = {}
    for name, make in [("mlp", _mlp), ("cnn", _cnn), ("gru", lambda: _recurrent(nn.GRU)),
                       ("lstm", lambda: _recurrent(nn.LSTM)), ("transformer", _transformer),
                       ("mobilenet_like", _mobilenet_like), ("kws", _kws)]:
        torch.manual_seed(0)
        module, shape = make()
        made[name] = (module.eval(), shape)
    return made


INT8 = ("mlp", "cnn", "mobilenet_like", "kws")  # the networks --int8 quantizes (the others' recurrences stay float)
SIX = ("mlp", "cnn", "gru", "lstm", "transformer", "mobilenet_like")  # bench.py's default (kws: with --models)


def quantize(src: Path, dst: Path, shape, fmt: str) -> None:
    """src quantized by onnxruntime's quantize_static as benchmarks/int8 does: uint8 activations, int8 weights per
    channel, calibrated on 16 random inputs; fmt "qdq" (QuantizeLinear/DequantizeLinear pairs) or "qop"
    (QLinearConv, QGemm, ...)."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.RandomState(i).uniform(-1, 1, shape).astype(np.float32)}
                                 for i in range(16)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else
                    QuantFormat.QOperator, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)


def export(module, shape, path: Path) -> None:
    """module to ONNX (torch.onnx.export's TorchScript path, opset 17, static shapes: input `x`, output `y`)."""
    import torch
    with warnings.catch_warnings():  # (grad enabled: no_grad sends TransformerEncoderLayer to its fast path)
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
