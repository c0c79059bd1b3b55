"""ADBench's LSTM objective (lstm_model.py) with its loop over the sequence written as torch's scan
(torch._higher_order_ops.scan): torch.export keeps the loop as one `scan` node whose body is traced once, and
the torch.export frontend imports it as one IR `loop` (docs/torch-export.md "Python loops"). Same values as
lstm_model.LSTMObjective; the inner loop over the l = 2 layers stays a Python loop (unrolled inside the body).
"""
import sys
from pathlib import Path

import torch
from torch._higher_order_ops.scan import scan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gradbench"))
from lstm import layer_step  # noqa: E402


def lstm_objective(main_params, extra_params, state, sequence):
    """lstm.lstm_objective with `for t in range(c - 1)` as a scan over (sequence[t], sequence[t + 1])."""
    b, c = sequence.shape[1], sequence.shape[0]
    params = main_params.reshape(-1, 2, 4, b)
    states = state.reshape(-1, 2, b)

    def step(carry, rows):
        states, total = carry
        now, following = rows
        x = now * extra_params[0]
        layers = []
        for i in range(params.shape[0]):
            new = layer_step(x, params[i], states[i])
            x = new[0]
            layers.append(new)
        ypred = x * extra_params[1] + extra_params[2]
        lse = torch.log(torch.sum(torch.exp(ypred)) + 2.0)
        total = total + torch.sum(following * (ypred - lse))
        return (torch.stack(layers), total), total.clone()  # (scan's outputs may not alias its carries)

    (_, total), _ = scan(step, (states, 0.0 * sequence[0, 0]), (sequence[:-1], sequence[1:]))
    return -total / ((c - 1) * b)


class LSTMObjective(torch.nn.Module):
    def forward(self, main_params, extra_params, state, sequence):
        return lstm_objective(main_params, extra_params, state, sequence)
