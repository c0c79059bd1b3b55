"""The trained seeds' model as a `torch =` kernel: `make()` for examples/mnist/manifest.toml.

    ksbuild package examples/mnist/manifest.toml        # -> dist/mnist: libmnist.a, mnist.h
    cmake -S examples/mnist/app -B build/mnist_app -DCMAKE_PREFIX_PATH=$PWD/dist/mnist
    cmake --build build/mnist_app && ./build/mnist_app/mnist_app

make() returns the model of train.py (ksbuild's compiled relu3 activations included) in eval
mode with trained weights, an example batch and a dynamic batch dim. The weights are the
checked-in model.pt next to this file (or $KSBUILD_MNIST_WEIGHTS); when that file is missing,
make() trains the model once (train.py's loop, 5 epochs, fixed seeds) and saves it there.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import torch
from torch.export import Dim

HERE = Path(__file__).resolve().parent


def _this_folders_train():
    """This folder's training script, loaded by its path under a name of this folder's own: a plain `import train`
    would take a module of that name imported earlier from another copy of the example (Python caches modules by
    name), and with it that copy's relu3.py."""
    name = "mnist_train_" + hashlib.sha256(str(HERE).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "train.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


train = _this_folders_train()

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
        with open(tmp, "wb") as f:  # a file object: the archive's inner name does not depend on tmp's
            torch.save(trained.state_dict(), f)
        os.replace(tmp, path)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


def make():
    """(model, an example batch of 8x8 images, dynamic shapes): what ksbuild exports."""
    example = torch.rand(4, 64, generator=torch.Generator().manual_seed(0))
    return trained_model(), (example,), ({0: Dim("batch")},)
