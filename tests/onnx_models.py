"""Torch modules the ONNX tests export themselves (nothing downloaded): an MLP, a CNN with
conv/batchnorm/pooling, GRU and LSTM stacks, a transformer encoder layer, a decoder that upsamples
(transposed convolution, then nearest-neighbour Resize of the image axes with a dynamic batch), a small
tanh MLP, a causal self-attention layer with a constant mask and a mixture density head (three outputs)."""
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


class CausalAttention(torch.nn.Module):
    """Causal self-attention written out (qkv projection, 2 heads, a constant triu mask buffer, softmax):
    the mask is a small constant the q·kᵀ product's epilogue reads."""

    def __init__(self, d: int = 16, steps: int = 6):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.register_buffer("mask", torch.triu(torch.ones(steps, steps, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = (a.view(n, t, 2, d // 2).transpose(1, 2) for a in self.qkv(x).split(d, dim=2))
        att = ((q @ k.transpose(-2, -1)) / (d // 2) ** 0.5).masked_fill(self.mask, float("-inf"))
        return (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(n, t, d)


class MixtureDensityHead(torch.nn.Module):
    """A mixture density network's head: three outputs (log weights, means, scales), small biases (3 and 6)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh())
        self.pi, self.mu, self.sig = torch.nn.Linear(16, 3), torch.nn.Linear(16, 6), torch.nn.Linear(16, 6)

    def forward(self, x):
        h = self.body(x)
        sigma = torch.nn.functional.softplus(self.sig(h)).view(-1, 3, 2) + 1e-3
        return torch.log_softmax(self.pi(h), dim=-1), self.mu(h).view(-1, 3, 2), sigma


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
        "tanh_mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)),
                             (5,)),
        "attention": lambda: (CausalAttention(), (6, 16)),
        "mdn": lambda: (MixtureDensityHead(), (5,)),
    }[name]()
    for buf in m.buffers():
        if buf.dtype.is_floating_point:
            buf.data.uniform_(0.5, 1.5)
    return m.eval(), sample


NAMES = ("mlp", "cnn", "gru", "lstm", "transformer", "decoder", "tanh_mlp", "attention")
EMBEDDED_VJP = ("tanh_mlp", "attention", "mdn")
"""Models whose vjp is also built with the weights embedded: small constants (a bias of 16, a 6 x 6 mask) read
in a matrix product's epilogue once were out-of-bounds warnings of GCC that -Werror turned into build failures."""


def export(name: str, path: Path, fold_constants: bool = False) -> torch.nn.Module:
    """Export a model with a dynamic batch dim (parameters keep their names unless fold_constants: the exporter's
    default, which folds e.g. a Linear's weight transposed into a constant)."""
    m, sample = make(name)
    x = torch.randn((2,) + sample)
    y = m(x)
    outs = [f"y{i}" for i in range(len(y))] if isinstance(y, tuple) else ["y"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "transformer":  # the TorchScript exporter cannot take this layer; torch.export can
            torch.onnx.export(m, (x,), str(path), dynamo=True, input_names=["x"], output_names=["y"],
                              dynamic_shapes=({0: torch.export.Dim("batch")},), optimize=False)
        else:
            torch.onnx.export(m, (x,), str(path), dynamo=False, input_names=["x"], output_names=outs,
                              dynamic_axes={n: {0: "batch"} for n in ["x", *outs]}, do_constant_folding=fold_constants)
    return m


def dynamo_export(model: torch.nn.Module, args: tuple, path: Path, dynamic_shapes: tuple) -> None:
    """torch.onnx.export(dynamo=True), torch's default exporter, with its warnings and progress log muted."""
    import logging
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            torch.onnx.export(model, args, str(path), dynamo=True, external_data=False, verbose=False,
                              dynamic_shapes=dynamic_shapes)
        finally:
            logging.disable(logging.NOTSET)
