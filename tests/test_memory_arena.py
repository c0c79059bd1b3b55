"""The workspace arena (transforms/plan_memory.py: _pack): buffers whose sizes are static get byte offsets in one
arena, shared by buffers whose lifetimes do not overlap.

Oracles: the lifetimes the planner itself computes (no two buffers live at once may share a byte, checked pair
by pair on real functions), the peak of live bytes (the arena of a straight chain of layers is exactly that),
and the compiled network against onnxruntime with the workspace filled with garbage before the call."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ksbuild
from ksbuild.frontends.onnx import compile_onnx_kernel
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.transforms.pipeline import lower
from ksbuild.transforms.plan_memory import _static_bytes, _Walk

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LOOPED = """
import torch


def k(x: "float[6, 40]", w: "float[40, 40]") -> "float[6]":
    h = torch.tanh(x @ w)
    for _ in range(12):
        h = torch.tanh(h @ w) + h
    wide = torch.cat([h, h * h, torch.sin(h)], 1)
    return wide.sum(1) + (h @ w).sum(1)
"""


def _mobile_onnx(path) -> None:
    """A MobileNet-like network: expand, depthwise, project, residual; sizes that differ layer to layer."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c, e, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, e, 1), nn.ReLU6(), nn.Conv2d(e, e, 3, stride, 1, groups=e),
                                      nn.ReLU6(), nn.Conv2d(e, c, 1))
            self.residual = stride == 1

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    net = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6(), Block(8, 24, 1), Block(8, 32, 2), Block(8, 48, 1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"])


def _layout(f):
    """The planned function's arena values: (value, offset, bytes, first position, last position)."""
    w = _Walk()
    w.top(f)
    plan = w.plan()
    out = []
    for v, place in plan.places.items():
        if place.kind == "slot" and plan.offset(place.index) is not None:
            out.append((v, plan.offset(place.index), _static_bytes(v.type), w.defined[v], w.last.get(v, w.defined[v])))
    return plan, out


def _check_disjoint(layout) -> None:
    for i, (v, o, n, s, e) in enumerate(layout):
        for u, o2, n2, s2, e2 in layout[i + 1:]:
            if not (e < s2 or e2 < s):
                assert o + n <= o2 or o2 + n2 <= o, f"{v} [{s}, {e}] and {u} [{s2}, {e2}] overlap in the arena"


@pytest.fixture(scope="module")
def mobile(tmp_path_factory):
    path = tmp_path_factory.mktemp("arena") / "mobile.onnx"
    _mobile_onnx(path)
    return path


def test_buffers_live_at_once_never_share_a_byte(mobile, tmp_path):
    """Pair by pair, on the MobileNet-like network, its vjp-free CNN example and a Python kernel of literal sizes
    with a loop."""
    (tmp_path / "k.py").write_text(LOOPED)
    funcs = [compile_onnx_kernel(mobile, "net"), compile_onnx_kernel(EXAMPLES / "onnx_cnn" / "cnn.onnx", "cnn"),
             compile_python_kernel(tmp_path / "k.py", "k", "f32")]
    for f in funcs:
        plan, layout = _layout(lower(f, after="parallelize"))
        assert len(layout) > 2, f"{f.name}: {len(layout)} buffers in the arena"
        _check_disjoint(layout)
        assert plan.arena == max(o + n for _, o, n, _, _ in layout)


def test_the_arena_is_near_the_peak_of_live_bytes_not_their_sum(mobile):
    """The bytes live at one position bound the arena from below (greedy packing need not reach the bound: here
    14% above it); the buffers' sum (the layout before: one slot per size) is far above it."""
    plan, layout = _layout(lower(compile_onnx_kernel(mobile, "net"), after="parallelize"))
    positions = {p for _, _, _, s, e in layout for p in (s, e)}
    peak = max(sum(n for _, _, n, s, e in layout if s <= p <= e) for p in positions)
    total = sum(n for _, _, n, _, _ in layout)
    assert peak <= plan.arena <= 1.25 * peak, (plan.arena, peak)
    assert plan.arena < total / 2, (plan.arena, total)


def test_the_network_is_right_with_a_dirty_shared_workspace(mobile, tmp_path):
    """Buffers that share bytes: the compiled network against onnxruntime, the workspace full of NaN first (a
    layer that read a dead neighbour's bytes, or wrote into a live one's, would show)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "arena"\n\n[kernels.net]\nonnx = "{mobile}"\n\n'
                                            '[exports]\nnet = "net"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    sess = ort.InferenceSession(str(mobile), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(pkg.net(x), want, rtol=1e-5, atol=1e-5)
    pkg.net._scratch.buf[:] = 0xFF  # (the thread's workspace, reused by the next call: every float a NaN)
    np.testing.assert_allclose(pkg.net(x), want, rtol=1e-5, atol=1e-5)
