"""The Knossos seeds' MNIST story on scikit-learn's bundled 8x8 digits (no download).

relu3 is the scalar function with if/elif/else from examples/relu3/relu3.py; `ksbuild.vmap(relu3)`
compiles it (and its derivatives) to C++ on first use and `.nnModule()` makes it a layer of the
seeds' model (Linear / BatchNorm / Dropout with relu3 activations). The same model with relu3
written as nested torch.where is trained from the same initial weights on the same batches, so
the two runs print the same losses; each prints its time per epoch.

    python examples/mnist/train.py [--epochs 5] [--batch-size 32] [--activation both|ksbuild|torch]
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

import ksbuild

HERE = Path(__file__).resolve().parent


def load_relu3():
    """The scalar relu3 of examples/relu3 (a plain Python function: ksbuild compiles it from its file)."""
    spec = importlib.util.spec_from_file_location("relu3_example", HERE.parent / "relu3" / "relu3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.relu3


def relu3_where(x: torch.Tensor) -> torch.Tensor:
    """relu3 "thinking in tensors": the vectorized PyTorch form."""
    return torch.where(x < 0, 0.0, torch.where(x < 1, x ** 3 / 3, x - 2 / 3))


class TorchRelu3(nn.Module):
    def forward(self, x):
        return relu3_where(x)


def activation(kind: str):
    """A factory of activation layers: ksbuild's compiled vmap(relu3) or the torch.where form."""
    if kind == "torch":
        return TorchRelu3
    vrelu3 = ksbuild.vmap(load_relu3())
    return vrelu3.nnModule


def seed_model(act, n_in: int = 64) -> nn.Sequential:
    """The seeds' model (784 MNIST inputs there, 64 digit pixels here)."""
    return nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(n_in, 256)),
        ("activation1", act()),
        ("fc2", nn.Linear(256, 128)),
        ("bn2", nn.BatchNorm1d(num_features=128)),
        ("activation2", act()),
        ("dropout", nn.Dropout(0.3)),
        ("fc3", nn.Linear(128, 64)),
        ("bn3", nn.BatchNorm1d(num_features=64)),
        ("activation3", act()),
        ("logits", nn.Linear(64, 10)),
        ("logsoftmax", nn.LogSoftmax(dim=1))]))


def digits(seed: int = 0):
    """(train x, train y, test x, test y): scikit-learn's 1797 digits scaled to [0, 1], an 80/20 split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.int64)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def train(kind: str, epochs: int = 5, batch_size: int = 32, max_batches: int | None = None, seed: int = 0,
          log=print) -> dict:
    """Train the seeds' model with one activation; returns the loss of every batch and the time of every epoch."""
    xtr, ytr, xte, yte = digits(seed)
    act = activation(kind)
    torch.manual_seed(seed)
    model = seed_model(act)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, times = [], []
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed + epoch))
        start = time.perf_counter()
        for b, i in enumerate(range(0, len(xtr), batch_size)):
            if max_batches is not None and b >= max_batches:
                break
            idx = order[i:i + batch_size]
            opt.zero_grad()
            loss = nn.functional.nll_loss(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        times.append(time.perf_counter() - start)
        log(f"{kind:8s} epoch {epoch + 1}: loss {losses[-1]:.4f}  test accuracy {accuracy(model, xte, yte):.3f}  "
            f"{times[-1] * 1e3:.1f} ms/epoch")
    return {"losses": losses, "times": times, "model": model}


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--activation", choices=("both", "ksbuild", "torch"), default="both")
    a = p.parse_args(argv)
    kinds = ("ksbuild", "torch") if a.activation == "both" else (a.activation,)
    if "ksbuild" in kinds:
        activation("ksbuild")().kernel.build("float32")  # compile (or load from the cache) before timing
    runs = {k: train(k, a.epochs, a.batch_size) for k in kinds}
    if len(runs) == 2:
        ks, th = runs["ksbuild"], runs["torch"]
        diff = max(abs(u - v) for u, v in zip(ks["losses"], th["losses"]))
        med = {k: sorted(r["times"])[len(r["times"]) // 2] * 1e3 for k, r in runs.items()}
        print(f"largest loss difference over {len(ks['losses'])} batches: {diff:.2e}")
        print(f"median ms/epoch: ksbuild relu3 {med['ksbuild']:.1f}, torch.where relu3 {med['torch']:.1f} "
              f"(ratio {med['torch'] / med['ksbuild']:.2f})")


if __name__ == "__main__":
    main()
