"""Findings of a held-out pass over models exported by torch's default ONNX exporter (dynamo=True) with a
dynamic batch and sequence length, once refused, now checked against onnxruntime (values at several lengths)
and torch.autograd (vjp):

- self.pos[:, :T] of a positional table (Slice of an initializer up to a symbolic dim), x[:, :T // 2],
  x.narrow(1, 1, T - 2) (bounds that are symbolic dims other than the whole axis);
- x[:, ::2] of a dynamic axis (a strided slice of symbolic length);
- queries.repeat(B, 1, 1) (Tile by a symbolic count);
- torch.arange(T, dtype=torch.float32) (Range(0.0, Cast(T, float), 1.0));
and, found on the way, a bound past the axis (T longer than the table) is status 1 when the export is called:
the compiled slice read past the end of its input, in Python kernels too (x[:k] with k another input's dim);
and an error in a model the exporter wrote inconsistent (nn.LSTM(proj_size=4): onnxruntime refuses it too) now
says so, from onnx's strict shape inference.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

from conftest import build_kernel_file  # noqa: E402
from onnx_models import dynamo_export  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.packaging.runtime import CallError  # noqa: E402


class Patterns(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(1, 32, 8))
        self.queries = torch.nn.Parameter(torch.randn(1, 3, 8))
        self.register_buffer("inv", 1.0 / (10000 ** (torch.arange(0, 4).float() / 4)))

    def forward(self, x):  # [batch, seq, 8]
        t = x.shape[1]
        posemb = x + self.pos[:, :t]
        halves = x[:, :t // 2].sum(1) - x[:, t // 2:].mean(1)
        inner = x.narrow(1, 1, t - 2) * 2.0
        strided = x[:, ::2] * 3.0
        q = self.queries.repeat(x.shape[0], 1, 1)
        pooled = torch.softmax(q @ x.transpose(1, 2), -1) @ x
        fr = torch.outer(torch.arange(t, dtype=torch.float32), self.inv)
        x1, x2 = x[..., ::2], x[..., 1::2]
        rotary = torch.stack([x1 * fr.cos() - x2 * fr.sin(), x1 * fr.sin() + x2 * fr.cos()], -1).flatten(-2)
        return posemb, halves, inner, strided, pooled, rotary


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("dynamo")
    torch.manual_seed(0)
    model = Patterns().eval()
    dim = torch.export.Dim
    dynamo_export(model, (torch.randn(2, 6, 8),), root / "patterns.onnx",
                  ({0: dim("batch"), 1: dim("seq", min=3, max=32)},))
    (root / "manifest.toml").write_text('[package]\nname = "dyn_patterns"\n[kernels.p]\nonnx = "patterns.onnx"\n'
                                        '[exports]\np = "p"\np_vjp = "vjp(p)"\n')
    return model, ksbuild.build(root / "manifest.toml"), ort.InferenceSession(str(root / "patterns.onnx"))


@pytest.mark.parametrize("batch, seq", [(1, 3), (3, 9), (2, 32)])
def test_values_match_onnxruntime(exported, batch, seq):
    _, pkg, sess = exported
    x = np.random.default_rng(seq).standard_normal((batch, seq, 8)).astype(np.float32)
    got = pkg.p(x)
    want = sess.run(None, {sess.get_inputs()[0].name: x})
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_vjp_matches_torch_autograd(exported):
    model, pkg, _ = exported
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 8)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    outs = model(xt)
    cts = [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs]
    sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cts)).backward()
    np.testing.assert_allclose(pkg.p_vjp(x, *cts), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_sequence_longer_than_the_table_is_status_1(exported):
    _, pkg, _ = exported
    with pytest.raises(CallError, match="status 1"):
        pkg.p(np.zeros((1, 33, 8), np.float32))


def test_a_python_slice_up_to_another_inputs_dim_is_checked(tmp_path):
    pkg, _ = build_kernel_file(tmp_path, 'def head(x: "float[n, 2]", y: "float[k]") -> "float[k, 2]":\n'
                                         '    return x[:y.shape[0]] * 2.0\n',
                               '[package]\nname = "headk"\n[kernels.head]\npython = "k.py:head"\n'
                               '[exports]\nhead = "head"\n', "headk_k")
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(pkg.head(x, np.zeros(3, np.float32)), x[:3] * 2)
    with pytest.raises(CallError, match="status 1"):
        pkg.head(x, np.zeros(5, np.float32))


def test_an_inconsistent_model_is_said_to_be_one(tmp_path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from ksbuild.errors import KsbuildError
    from ksbuild.frontends.onnx import compile_onnx_kernel

    def model(y_shape):
        return h.make_model(h.make_graph([h.make_node("Add", ["X", "Y"], ["Z"], name="add")], "g",
                                         [h.make_tensor_value_info("X", T.FLOAT, [2, 3]),
                                          h.make_tensor_value_info("Y", T.FLOAT, y_shape)],
                                         [h.make_tensor_value_info("Z", T.FLOAT, [2, 3])]),
                            opset_imports=[h.make_opsetid("", 17)])
    onnx.save(model([4]), str(tmp_path / "bad.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "bad.onnx", "bad")
    assert "node add (Add)" in str(e.value) and "shapes do not broadcast" in e.value.message
    assert "shape inference finds the model itself inconsistent" in e.value.hint
    ok = model([3])
    ok.graph.node[0].op_type = "Frobnicate"  # a valid graph of an unknown op: no such verdict
    onnx.save(ok, str(tmp_path / "unknown.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "unknown.onnx", "unknown")
    assert "unknown op Frobnicate" in e.value.message and "inconsistent" not in (e.value.hint or "")
