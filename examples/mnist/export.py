"""The trained seeds' model as a `torch =` kernel: `make()` for examples/mnist/manifest.toml.

    ksbuild package examples/mnist/manifest.toml        # -> dist/mnist: libmnist.a, mnist.h
    cmake -S examples/mnist/app -B build/mnist_app -DCMAKE_PREFIX_PATH=$PWD/dist/mnist
    cmake --build build/mnist_app && ./build/mnist_app/mnist_app

make() returns the model of train.py (ksbuild's compiled relu3 activations included) in eval
mode with trained weights, an example batch of digits and a dynamic batch dim. The weights are
trained once (train.py's training loop, fixed seeds, so the same weights every time) and saved
in model.pt next to this file (or at $KSBUILD_MNIST_WEIGHTS); later calls load them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch.export import Dim

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import train  # noqa: E402  (this folder's training script)

EPOCHS = 5


def weights_path() -> Path:
    return Path(os.environ.get("KSBUILD_MNIST_WEIGHTS", HERE / "model.pt"))


def trained_model(epochs: int = EPOCHS) -> torch.nn.Module:
    """The seeds' model with ksbuild relu3 activations, trained (or loaded from weights_path())."""
    model = train.seed_model(train.activation("ksbuild"))
    path = weights_path()
    if not path.is_file():
        trained = train.train("ksbuild", epochs=epochs, log=lambda s: None)["model"]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(trained.state_dict(), tmp)
        os.replace(tmp, path)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


def make():
    """(model, example digits, dynamic shapes): what ksbuild exports."""
    _, _, x_test, _ = train.digits()
    return trained_model(), (x_test[:4],), ({0: Dim("batch")},)
