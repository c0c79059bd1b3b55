"""benchmarks/models/bench.py's ExecuTorch column: without the venv of scripts/install_executorch.sh it says how to get
it (no failure); with it, ExecuTorch + XNNPACK runs a small convolutional network exported here on one thread and
gives torch eager's output."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed")
# (by path, under a name of its own: benchmarks/onnx/bench.py, which it imports, is `bench` too)
_spec = importlib.util.spec_from_file_location("models_bench", ROOT / "benchmarks/models/bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


class Args:
    threads, repeats, budget, clock = 1, 3, 0.2, "wall"


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(32, 32, 3, padding=1, groups=32), torch.nn.Hardswish(),
                               torch.nn.Conv2d(32, 64, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(64, 10)).eval()


def test_the_executorch_column_says_how_to_get_it_without_its_venv(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "EXECUTORCH_PYTHON", tmp_path / "missing" / "python")
    x = np.zeros((1, 3, 8, 8), np.float32)
    cells = bench.executorch_columns("net", _net(), x, np.zeros((1, 10), np.float32), 1e-3, tmp_path, Args)
    assert cells == ("n/a (run scripts/install_executorch.sh)", "", "")


def test_executorch_runs_the_network_on_one_thread_like_torch(tmp_path):
    if not bench.EXECUTORCH_PYTHON.exists():
        pytest.skip(f"{bench.EXECUTORCH_PYTHON} missing (scripts/install_executorch.sh makes it)")
    model = _net()
    x = np.random.default_rng(0).standard_normal((2, 3, 96, 96)).astype(np.float32)
    run = bench.executorch(model, x, Path(tmp_path), 1, 3, 0.2, "wall")
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run["y"], want, rtol=1e-4, atol=1e-5)
    assert run["delegates"] >= 1 and run["threads"] == 1 and run["ms"] > 0
    assert run["calling_thread_share"] > 0.95, run  # (all of its work on the calling thread)
