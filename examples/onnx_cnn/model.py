"""The torch side of examples/onnx_cnn: a small image classifier exported to ONNX.

    python examples/onnx_cnn/model.py      # writes cnn.onnx here

conv 3→8 (3×3, pad 1) → batchnorm → relu → maxpool 2 → conv 8→16 (3×3, stride 2) → relu →
global average pool → linear 16→10, on images [batch, 3, 16, 16] (any batch size).
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make() -> CNN:
    """The network with fixed random weights and non-trivial batchnorm statistics, in eval mode."""
    torch.manual_seed(0)
    m = CNN()
    m.bn.running_mean.uniform_(-0.5, 0.5)
    m.bn.running_var.uniform_(0.5, 1.5)
    return m.eval()


def export(out: Path = HERE) -> CNN:
    """Write cnn.onnx into `out`; return the module."""
    m = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 3, 16, 16),), str(out / "cnn.onnx"), dynamo=False,
                          input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    return m


if __name__ == "__main__":
    export(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
    print(f"wrote cnn.onnx in {HERE}")
