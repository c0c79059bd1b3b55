"""Models for tests/test_torch_export.py: each `make_*` returns (module, example inputs, dynamic
shapes) as a `torch =` kernel's make() does. Weights are random (fixed seeds); batch norm running
statistics are set away from their defaults so that they matter."""
from __future__ import annotations

import torch
from torch import nn
from torch.export import Dim

BATCH = Dim("batch")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 16), nn.Tanh(),
                                 nn.Linear(16, 4), nn.LogSoftmax(dim=1))

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(6 * 2 * 2, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.fc(torch.flatten(x, 1))


class GRUHead(nn.Module):
    """A batch-first GRU, then a linear head on the last step; returns the head and the final state."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        y, h = self.gru(x)
        return self.head(y[:, -1]), h


class LSTM2(nn.Module):
    """Two stacked bidirectional LSTM layers (batch second, torch's default layout)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


class Block(nn.Module):
    """A transformer-style feed-forward block: LayerNorm, Linear, GELU, Linear, residual, mean pool."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        h = self.down(nn.functional.gelu(self.up(self.norm(x))))
        return (x + h).mean(dim=1)


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=1).values * 2


class Indices(nn.Module):
    def forward(self, x):
        return nn.functional.max_pool2d(x, 2, return_indices=True)[1].float()


def _seeded(cls):
    torch.manual_seed(0)
    m = cls()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    return m


def make_mlp():
    return _seeded(MLP), (torch.randn(3, 6),), ({0: BATCH},)


def make_cnn():
    return _seeded(SmallCNN), (torch.randn(3, 2, 8, 8),), ({0: BATCH},)


def make_gru():
    return _seeded(GRUHead), (torch.randn(3, 4, 3),), ({0: BATCH},)


def make_lstm():
    return _seeded(LSTM2), (torch.randn(5, 3, 3),), ({1: BATCH},)


def make_block():
    return _seeded(Block), (torch.randn(3, 4, 8),), {"x": {0: BATCH}}


def make_unsupported():
    return Unsupported(), (torch.randn(2, 5),)


def make_indices():
    return Indices(), (torch.randn(1, 1, 4, 4),)


def make_raises():
    raise ValueError("no weights here")


def make_not_a_module():
    return torch.randn(2), (torch.randn(2),)


MODELS = {"mlp": make_mlp, "cnn": make_cnn, "gru": make_gru, "lstm": make_lstm, "block": make_block}
