"""ksbuild inside PyTorch: call overhead and training steps, against torch eager and torch.compile.

Three tables, all from one run (times are medians of --repeat measurements; the cases of a table
are measured in turn, round after round, so a busy machine slows them alike):
1. call overhead: vrelu3 on 16 float32 elements, no autograd. ksbuild through the dev loop
   (`vrelu3(x)`, x a torch tensor), through a built package's export (`pkg.fn(x)`; numpy in/out
   with out=), through its torch custom op (`torch.ops.<ns>.fn(x)`, the path torch.compile and
   torch.export use), against torch eager (relu3 as nested torch.where) and that form compiled.
2. the activation alone, forward + backward on a [batch, 256] tensor.
3. a training step (forward, loss, backward, SGD step) of the seeds' model (Linear / BatchNorm /
   Dropout, three relu3 activations) on a batch of 8x8 digits-sized inputs: ksbuild's nnModule in
   eager mode, the same model under torch.compile (the ksbuild activations stay custom ops in the
   compiled graph), and the torch.where activation in eager mode and compiled.
Every case is checked against torch.where's relu3 first (values and gradients).

    PYTHONPATH=. python benchmarks/torch/bench.py [--repeat 7] [--min-ms 20] [--threads 1] [--batch 128]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import torch
from torch import nn

import ksbuild

ROOT = Path(__file__).resolve().parents[2]


def load_relu3():
    spec = importlib.util.spec_from_file_location("relu3_example", ROOT / "examples/relu3/relu3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.relu3


def relu3_where(x):
    return torch.where(x < 0, 0.0, torch.where(x < 1, x ** 3 / 3, x - 2 / 3))


class Where(nn.Module):
    def forward(self, x):
        return relu3_where(x)


def seed_model(act, n_in: int = 64) -> nn.Sequential:
    return nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(n_in, 256)), ("activation1", act()), ("fc2", nn.Linear(256, 128)),
        ("bn2", nn.BatchNorm1d(128)), ("activation2", act()), ("dropout", nn.Dropout(0.3)),
        ("fc3", nn.Linear(128, 64)), ("bn3", nn.BatchNorm1d(64)), ("activation3", act()),
        ("logits", nn.Linear(64, 10)), ("logsoftmax", nn.LogSoftmax(dim=1))]))


def per_call(fn: Callable[[], object], min_s: float) -> float:
    """Seconds per call of fn, from a loop lasting at least min_s."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return elapsed / n
        n *= 2 if elapsed <= 0 else max(2, int(min_s / elapsed * 1.2))


def measure(cases: dict[str, Callable], repeat: int, min_s: float) -> dict[str, float]:
    """Median seconds per call of every case, measured in rounds (each round times every case once)."""
    for fn in cases.values():
        fn()  # warm up (and compile, for torch.compile cases)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(per_call(fn, min_s))
    return {name: statistics.median(s) for name, s in samples.items()}


def table(title: str, times: dict[str, float], base: str) -> None:
    print(f"\n{title}")
    print(f"  {'case':58s} {'median':>12s}  {'/ ' + base:>14s}")
    for name, t in times.items():
        print(f"  {name:58s} {t * 1e6:10.1f} us  {t / times[base]:14.2f}")


def overhead_cases(vrelu3, pkg) -> dict[str, Callable]:
    x = torch.linspace(-2, 3, 16)
    a, out = x.numpy().copy(), torch.empty(16).numpy()
    op = getattr(torch.ops, pkg.torch_ops().namespace).fn
    compiled = torch.compile(relu3_where)
    want = relu3_where(x)
    for got in (vrelu3(x), pkg.fn(x), op(x), torch.from_numpy(pkg.fn(a)), compiled(x)):
        torch.testing.assert_close(got, want)
    return {"ksbuild dev loop: vrelu3(x)": lambda: vrelu3(x),
            "ksbuild export: pkg.fn(x)": lambda: pkg.fn(x),
            "ksbuild export, numpy: pkg.fn(a, out=o)": lambda: pkg.fn(a, out=out),
            "ksbuild custom op: torch.ops.<ns>.fn(x)": lambda: op(x),
            "torch eager: torch.where relu3": lambda: relu3_where(x),
            "torch.compile: torch.where relu3": lambda: compiled(x)}


def activation_cases(vrelu3, batch: int) -> dict[str, Callable]:
    x = (torch.rand(batch, 256) * 5 - 2).requires_grad_()
    ct = torch.randn(batch, 256)
    compiled = torch.compile(relu3_where)
    (want,) = torch.autograd.grad(relu3_where(x), x, ct)
    for f in (vrelu3, compiled):
        torch.testing.assert_close(torch.autograd.grad(f(x), x, ct)[0], want)
    return {"ksbuild vrelu3 (eager autograd)": lambda: torch.autograd.grad(vrelu3(x), x, ct),
            "torch eager: torch.where relu3": lambda: torch.autograd.grad(relu3_where(x), x, ct),
            "torch.compile: torch.where relu3": lambda: torch.autograd.grad(compiled(x), x, ct)}


def training_cases(vrelu3, batch: int) -> dict[str, Callable]:
    x = torch.rand(batch, 64)
    y = torch.arange(batch) % 10
    steps = {}
    for name, act, compile_it in (("ksbuild nnModule, eager", vrelu3.nnModule, False),
                                  ("ksbuild nnModule, torch.compile(fullgraph=True)", vrelu3.nnModule, True),
                                  ("torch.where relu3, eager", Where, False),
                                  ("torch.where relu3, torch.compile(fullgraph=True)", Where, True)):
        torch.manual_seed(0)
        model = seed_model(act)
        fwd = torch.compile(model, fullgraph=True) if compile_it else model
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        steps[name] = train_step(fwd, opt, x, y)
    check_same_first_step(vrelu3, x, y)
    return steps


def train_step(fwd, opt, x, y) -> Callable:
    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.nll_loss(fwd(x), y)
        loss.backward()
        opt.step()
    return step


def check_same_first_step(vrelu3, x, y) -> None:
    """The ksbuild and torch.where models, from the same weights, give the same loss and gradients."""
    grads = []
    for act in (vrelu3.nnModule, Where):
        torch.manual_seed(0)
        model = seed_model(act).eval()
        loss = nn.functional.nll_loss(model(x), y)
        grads.append([loss] + list(torch.autograd.grad(loss, list(model.parameters()))))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--min-ms", type=float, default=20.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (ksbuild kernels are single-threaded)")
    p.add_argument("--batch", type=int, default=128)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    vrelu3 = ksbuild.vmap(load_relu3())
    pkg = vrelu3.build("float32")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); python {sys.version.split()[0]}; "
          f"median of {a.repeat} x >= {a.min_ms} ms")
    min_s = a.min_ms / 1e3
    over = measure(overhead_cases(vrelu3, pkg), a.repeat, min_s)
    table("1. call overhead, vrelu3 on 16 float32 elements (no autograd)", over, "torch eager: torch.where relu3")
    acts = measure(activation_cases(vrelu3, a.batch), a.repeat, min_s)
    table(f"2. activation forward + backward, [{a.batch}, 256] float32", acts, "torch eager: torch.where relu3")
    steps = measure(training_cases(vrelu3, a.batch), a.repeat, min_s)
    table(f"3. training step of the seeds' model, batch {a.batch}", steps, "torch.where relu3, eager")


if __name__ == "__main__":
    main()
