"""Modules whose loops are written with torch's higher-order ops, for tests/test_torch_hop.py.

make_<name>() returns (module, example inputs[, dynamic_shapes]) as the torch.export frontend expects.
"""
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop


class Recurrence(torch.nn.Module):
    """h_t = tanh(W h_{t-1} + x_t * u) over the rows of xs; returns the final state, every state and a running
    sum (two carries, two stacked outputs, a weight and a forward input read inside the body)."""

    def __init__(self, n: int = 5):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(n, n, generator=g, dtype=torch.float64) * 0.5)

    def forward(self, h0, xs, u):
        def step(carry, x):
            h, total = carry
            h = torch.tanh(self.w @ h + x * u)
            total = total + torch.sum(h * h)
            return (h, total), (h.clone(), torch.sin(total))

        (h, total), (hs, sins) = scan(step, (h0, torch.zeros((), dtype=h0.dtype)), xs)
        return h, total, hs, sins

    def loops(self, h, xs, u):
        """forward with a Python loop: the oracle of torch.func (whose transforms do not take a scan)."""
        total, hs, sins = torch.zeros((), dtype=h.dtype), [], []
        for x in xs:
            h = torch.tanh(self.w @ h + x * u)
            total = total + torch.sum(h * h)
            hs.append(h)
            sins.append(torch.sin(total))
        return h, total, torch.stack(hs), torch.stack(sins)


def make_recurrence():
    g = torch.Generator().manual_seed(1)
    return Recurrence(), (torch.randn(5, generator=g, dtype=torch.float64),
                          torch.randn(30, 5, generator=g, dtype=torch.float64),
                          torch.randn(5, generator=g, dtype=torch.float64))


def make_recurrence_dynamic():
    module, args = make_recurrence()
    return module, args, {"h0": None, "xs": {0: torch.export.Dim("steps", min=2)}, "u": None}


class Nested(torch.nn.Module):
    """A scan over rows whose body scans the row's elements (a cumulative product of 1 + tanh)."""

    def forward(self, x, s0):
        def inner(c, v):
            c = c * (1.0 + torch.tanh(v))
            return c, c.clone()

        def outer(s, row):
            last, prods = scan(inner, s, row)
            return last + 0.5, prods

        return scan(outer, s0, x)


def nested_loops(x, s0):
    """Nested's value with Python loops: the gradient oracle (torch.autograd does not differentiate a scan
    inside a scan: 'derivative for aten::detach_copy is not implemented')."""
    prods, s = [], s0
    for row in x:
        c, cs = s, []
        for v in row:
            c = c * (1.0 + torch.tanh(v))
            cs.append(c)
        s = c + 0.5
        prods.append(torch.stack(cs))
    return s, torch.stack(prods)


def make_nested():
    g = torch.Generator().manual_seed(2)
    return Nested(), (torch.randn(12, 7, generator=g, dtype=torch.float64),
                      torch.rand((), generator=g, dtype=torch.float64) + 0.5)


class Reversed(torch.nn.Module):
    """scan(reverse=True) over axis 1: torch flips and moves the axis around the scan node."""

    def forward(self, x):
        def step(c, col):
            c = torch.cos(c) + col
            return c, c * 2.0

        return scan(step, torch.zeros(x.shape[0], dtype=x.dtype), x, dim=1, reverse=True)


def make_reversed():
    return Reversed(), (torch.randn(3, 11, generator=torch.Generator().manual_seed(3), dtype=torch.float64),)


class Counted(torch.nn.Module):
    """A while_loop counting i from 3 while i < 10 (7 steps), reading a forward input: a counted loop."""

    def forward(self, x, a):
        def cond(i, y):
            return i < 10

        def body(i, y):
            return i + 1, torch.sin(y) * a + y.flip(0)

        return while_loop(cond, body, (torch.full((), 3, dtype=torch.int64), x))[1]

    def loops(self, x, a):
        for _ in range(3, 10):
            x = torch.sin(x) * a + x.flip(0)
        return x


def make_counted():
    g = torch.Generator().manual_seed(4)
    return Counted(), tuple(torch.randn(4, generator=g, dtype=torch.float64) for _ in range(2))


class Converging(torch.nn.Module):
    """A while_loop whose step count depends on the values (not read: a located error)."""

    def forward(self, x):
        return while_loop(lambda y: y.sum() > 1.0, lambda y: (y * 0.5,), (x,))[0]


def make_converging():
    return Converging(), (torch.rand(4, dtype=torch.float64) + 1.0,)


class Unsupported(torch.nn.Module):
    """A scan whose body uses an op the frontend does not read (cummax): the error names the body's line."""

    def forward(self, x):
        def step(c, row):
            c = c + torch.cummax(row, dim=0).values
            return c, c.clone()

        return scan(step, torch.zeros(x.shape[1], dtype=x.dtype), x)


def make_unsupported():
    return Unsupported(), (torch.randn(6, 4, dtype=torch.float64),)
