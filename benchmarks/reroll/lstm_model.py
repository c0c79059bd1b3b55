"""ADBench's LSTM objective (benchmarks/gradbench/lstm.py) as an nn.Module for the torch.export frontend:
`for t in range(c - 1)` over two layers is a Python loop that torch.export unrolls into c - 1 copies.

make_<c>() gives the module and example inputs at ADBench's sizes (l = 2 layers, b = 14 bits) for a
sequence of c characters; the environment variable LSTM_C picks c for make().
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gradbench"))
from lstm import lstm_objective  # noqa: E402

L, B = 2, 14


class LSTMObjective(torch.nn.Module):
    def forward(self, main_params, extra_params, state, sequence):
        return lstm_objective(main_params, extra_params, state, sequence)


def inputs(c: int, seed: int = 0) -> tuple:
    """ADBench-like inputs: parameters and state in [-1, 1], a sequence of one-hot-ish bits."""
    g = torch.Generator().manual_seed(seed)
    main = torch.rand(2 * L, 4 * B, generator=g, dtype=torch.float64) * 2 - 1
    extra = torch.rand(3, B, generator=g, dtype=torch.float64) * 2 - 1
    state = torch.rand(2 * L, B, generator=g, dtype=torch.float64) * 2 - 1
    seq = (torch.rand(c, B, generator=g, dtype=torch.float64) > 0.5).double()
    return main, extra, state, seq


def make():
    return LSTMObjective(), inputs(int(os.environ.get("LSTM_C", "16")))
