"""examples/mnist: one short epoch of the seeds' model with ksbuild's relu3 and with torch.where's relu3.
Oracle: the torch.where run (same weights, batches and dropout masks) must give the same losses."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("sklearn", reason="the example trains on scikit-learn's bundled digits (extra 'examples')")


def test_mnist_example_trains_like_torch():
    spec = importlib.util.spec_from_file_location("mnist_train", ROOT / "examples/mnist/train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = {k: mod.train(k, epochs=1, batch_size=32, max_batches=8, log=lambda s: None) for k in ("ksbuild", "torch")}
    ks, th = runs["ksbuild"]["losses"], runs["torch"]["losses"]
    assert len(ks) == 8 and np.all(np.isfinite(ks))
    np.testing.assert_allclose(ks, th, rtol=1e-4)
    assert np.mean(ks[-3:]) < np.mean(ks[:3])  # it learns
    names = [type(m).__name__ for m in runs["ksbuild"]["model"]]
    assert names.count("KernelModule") == 3
