"""Torch modules the ONNX tests export themselves (nothing downloaded): an MLP, a CNN with
conv/batchnorm/pooling, GRU and LSTM stacks, a transformer encoder layer, a decoder that upsamples
(transposed convolution, then nearest-neighbour Resize of the image axes with a dynamic batch)."""
from __future__ import annotations

import warnings
from pathlib import Path

import torch


class CNN(torch.nn.Module):
    """conv → batchnorm → relu → maxpool → strided conv → relu → avgpool → flatten → linear."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16 * 3 * 3, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = torch.nn.functional.avg_pool2d(torch.relu(self.c2(x)), 1)
        return self.fc(torch.flatten(x, 1))


class Recurrent(torch.nn.Module):
    """Two stacked GRU or (bidirectional) LSTM layers, batch first; returns every step's output."""

    def __init__(self, kind: str):
        super().__init__()
        self.r = getattr(torch.nn, kind)(8, 16, num_layers=2, batch_first=True, bidirectional=kind == "LSTM")

    def forward(self, x):
        return self.r(x)[0]


class Decoder(torch.nn.Module):
    """transposed conv (stride 2) → upsample ×2 (Resize with scales 1, 1, 2, 2) → sigmoid."""

    def __init__(self):
        super().__init__()
        self.t = torch.nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)
        self.up = torch.nn.Upsample(scale_factor=2)

    def forward(self, x):
        return torch.sigmoid(self.up(self.t(x)))


def make(name: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """(module in eval mode, the shape of one sample) for a model name; batchnorm statistics non-trivial."""
    torch.manual_seed(0)
    m, sample = {
        "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8),
                                            torch.nn.Tanh()), (16,)),
        "cnn": lambda: (CNN(), (3, 16, 16)),
        "gru": lambda: (Recurrent("GRU"), (5, 8)),
        "lstm": lambda: (Recurrent("LSTM"), (5, 8)),
        "transformer": lambda: (torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), (5, 16)),
        "decoder": lambda: (Decoder(), (4, 5, 5)),
    }[name]()
    for buf in m.buffers():
        if buf.dtype.is_floating_point:
            buf.data.uniform_(0.5, 1.5)
    return m.eval(), sample


NAMES = ("mlp", "cnn", "gru", "lstm", "transformer", "decoder")


def export(name: str, path: Path) -> torch.nn.Module:
    """Export a model with a dynamic batch dim (parameters keep their names: no constant folding)."""
    m, sample = make(name)
    x = torch.randn((2,) + sample)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "transformer":  # the TorchScript exporter cannot take this layer; torch.export can
            torch.onnx.export(m, (x,), str(path), dynamo=True, input_names=["x"], output_names=["y"],
                              dynamic_shapes=({0: torch.export.Dim("batch")},), optimize=False)
        else:
            torch.onnx.export(m, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, do_constant_folding=False)
    return m
