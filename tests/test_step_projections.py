"""step_projections (transforms/step_projections.py): on a target without a vector unit a recurrent layer projects
each step's input inside its loop instead of all steps before it (the LSTM of benchmarks/cortex_m4 held 20 steps'
projections, 10 KB of its 11 KB workspace). ONNX GRUs and LSTMs exported by torch (one direction, both directions,
every step's output read, a batch of 2), through the whole pipeline for the Cortex-M4 (Options.vectors false): the
loops scan the input itself (an LSTM's two biases folded into one constant) and the values are onnxruntime's; with
vectors the projection stays before the loop."""
from __future__ import annotations

import numpy as np
import pytest

from ksbuild.ir.interp import eval_func
from ksbuild.ir.printer import print_func
from ksbuild.transforms.pipeline import Options, lower
from ksbuild.transforms.rewrite import walk_funcs


def _export(tmp_path, cell: str, batch: int):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rnn = {"GRU": torch.nn.GRU(6, 5, batch_first=True), "LSTM": torch.nn.LSTM(6, 5, batch_first=True),
           "bidirectional": torch.nn.LSTM(6, 5, batch_first=True, bidirectional=True),
           "all_steps": torch.nn.GRU(6, 5, batch_first=True)}[cell]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            y = self.rnn(x)[0]
            return y if cell == "all_steps" else y[:, -1]
    path = tmp_path / "m.onnx"
    torch.onnx.export(Net(), (torch.zeros(batch, 7, 6),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return path


@pytest.mark.parametrize("cell, batch", [("GRU", 1), ("LSTM", 1), ("bidirectional", 1), ("all_steps", 1),
                                         ("LSTM", 2)])
def test_a_recurrent_loop_projects_each_step_without_vectors(tmp_path, cell, batch):
    ort = pytest.importorskip("onnxruntime")
    from ksbuild.frontends.onnx import compile_onnx_kernel
    path = _export(tmp_path, cell, batch)
    f = compile_onnx_kernel(path, "k")
    x = np.random.default_rng(4).standard_normal((batch, 7, 6)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for vectors in (False, True):
        done = lower(f, Options(backend="plain", vectors=vectors))
        loops = [e for g in walk_funcs(done) for e in g.eqns if e.prim.name == "loop"]
        scanned = [e.ins[-1].type.shape[-1] for e in loops]  # (the input's 6 features, or the gates' projection)
        assert loops and all(s == 6 for s in scanned) == (not vectors), (vectors, scanned, print_func(done))
        if cell == "LSTM" and not vectors:  # (its input and recurrent biases, added, are one constant of the loop)
            g = lower(f, Options(backend="plain", vectors=False), after="step_projections")
            made = {v: e for e in g.eqns for v in e.outs}
            (loop,) = [e for e in g.eqns if e.prim.name == "loop"]
            (bias,) = [a for a in loop.ins[1:1 + loop.params["n_consts"]] if a.type.shape == (20,)]
            assert made[bias].prim.name == "constant", print_func(g)
        np.testing.assert_allclose(eval_func(done, [x])[0], want, rtol=1e-5, atol=1e-6)
