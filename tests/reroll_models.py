"""Models with Python loops over time steps for tests/test_reroll.py: torch.export unrolls each loop, the
reroll pass rolls it back. `make_<model>_<T>` (module attribute, PEP 562) returns the module and example
inputs for T steps; weights and inputs are random with fixed seeds, float64."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

# (ADBench's LSTM objective, GradBench's lstm eval, loaded by path: benchmarks/gradbench on sys.path made `bench`
# another file's in the tests that share this worker; and the models are made float64 below, not by
# torch.set_default_dtype, which changed every later test's default)
_spec = importlib.util.spec_from_file_location(
    "gradbench_lstm", Path(__file__).resolve().parent.parent / "benchmarks" / "gradbench" / "lstm.py")
_lstm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lstm)
lstm_objective = _lstm.lstm_objective


class ADBenchLSTM(nn.Module):
    """ADBench's LSTM objective over a sequence of T + 1 characters (T steps, l = 2 layers, b = 6 bits)."""

    def forward(self, main_params, extra_params, state, sequence):
        return lstm_objective(main_params, extra_params, state, sequence)

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        b = 6
        return (torch.rand(4, 4 * b, generator=g) * 2 - 1, torch.rand(3, b, generator=g) * 2 - 1,
                torch.rand(4, b, generator=g) * 2 - 1, (torch.rand(steps + 1, b, generator=g) > 0.5).double())


class GateLSTM(nn.Module):
    """An LSTM cell written by hand with nn.Linear gates (embedded weights); the hidden states of every step
    are returned stacked, with the last cell state."""

    def __init__(self, n_in: int = 3, n_hidden: int = 5):
        super().__init__()
        torch.manual_seed(0)
        self.gates = nn.Linear(n_in + n_hidden, 4 * n_hidden)
        self.n_hidden = n_hidden

    def forward(self, xs, h, c):
        hs = []
        for t in range(xs.shape[0]):
            i, f, g, o = self.gates(torch.cat([xs[t], h])).chunk(4)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return torch.stack(hs), c

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        return torch.randn(steps, 3, generator=g), torch.randn(5, generator=g), torch.randn(5, generator=g)


class ReducingLoop(nn.Module):
    """A body with reductions: a running score from a sum and a softmax of the state each step."""

    def forward(self, xs, h):
        score = xs.sum() * 0.0
        for t in range(xs.shape[0]):
            h = torch.tanh(h * 0.9 + xs[t])
            p = torch.softmax(h, 0)
            score = score * 0.5 + (p * xs[t]).sum() + h.square().mean()
        return score

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        return torch.randn(steps, 7, generator=g), torch.randn(7, generator=g)


class TwoBack(nn.Module):
    """Each step reads the two steps before it (x_t = a x_{t-1} + b x_{t-2}): not a loop with one step of
    state as the blocks stand, so whatever reroll does must keep the values."""

    def forward(self, x0, x1, w):
        xs = [x0, x1]
        for _ in range(len(w)):
            xs.append(torch.sin(xs[-1]) * w[0] + xs[-2] * 0.5 + torch.cos(xs[-1] * xs[-2]))
        return torch.stack(xs)

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        return torch.randn(4, generator=g), torch.randn(4, generator=g), torch.randn(steps, 4, generator=g)


class SlidingWindow(nn.Module):
    """Each step reads a slice that moves with t (x[t:t + 3]): slice bounds are params, not operands, so
    the steps are not rolled."""

    def forward(self, x, h):
        for t in range(x.shape[0] - 2):
            h = torch.tanh(h * x[t:t + 3].sum(0) + 0.1)
        return h

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        return torch.randn(steps + 2, 4, generator=g), torch.randn(4, generator=g)


class Nested(nn.Module):
    """A loop inside a loop: 10 inner steps over the rows of w per outer step t, which reads rows t + 1 and t
    of xs (the inner steps read a position computed from the outer step)."""

    def forward(self, xs, w, h):
        for t in range(xs.shape[0] - 1):
            for i in range(w.shape[0]):
                h = torch.tanh(h * w[i] + xs[t + 1])
            h = h * 0.5 + xs[t].sum()
        return h

    @staticmethod
    def example(steps: int) -> tuple:
        g = torch.Generator().manual_seed(steps)
        return torch.randn(steps + 1, 4, generator=g), torch.randn(10, 4, generator=g), torch.randn(4, generator=g)


MODELS = {"adbench": ADBenchLSTM, "gates": GateLSTM, "reducing": ReducingLoop, "twoback": TwoBack,
          "window": SlidingWindow, "nested": Nested}


def __getattr__(name: str):
    """make_<model>_<T>: a make() for T steps of MODELS[model]."""
    if not name.startswith("make_"):
        raise AttributeError(name)
    model, steps = name[len("make_"):].rsplit("_", 1)
    cls = MODELS[model]
    return lambda: (cls().double(), tuple(x.double() for x in cls.example(int(steps))))
