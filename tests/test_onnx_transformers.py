"""Findings of a held-out pass over Hugging Face transformers models (BERT, RoBERTa, GPT-2, LLaMA, T5, ViT,
Wav2Vec2, Whisper, ... with random weights) exported to ONNX by both of torch's exporters; 19 models matched
onnxruntime and torch.autograd, two patterns did not build, each checked here against onnxruntime:

- BERT/RoBERTa without token_type_ids gather an all-zero buffer (GatherElements at the positions): the value
  folded to 0 but the fused loop still declared the index, and -Wunused-variable stopped the C++ build;
- a strided Conv1d followed by a view to [batch, -1, heads, 2] (every dynamo-exported wav2vec2): the conv's
  length (seq - 10) // 5 + 1 and torch's seq // 5 - 1 are the same dim, which ksbuild could not tell.
"""
from __future__ import annotations

import numpy as np
import pytest

from ksbuild.ir.types import canonical_dim, dim_add, dim_floordiv, dim_value

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

from onnx_models import dynamo_export  # noqa: E402

import ksbuild  # noqa: E402


class Patterns(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("token_type_ids", torch.zeros(1, 64, dtype=torch.long))
        self.register_buffer("position_ids", torch.arange(64).expand(1, -1))
        self.types = torch.nn.Embedding(2, 4)
        self.conv = torch.nn.Conv1d(1, 8, kernel_size=10, stride=5)

    def forward(self, ids, audio):  # ids [batch, seq] (float features here), audio [batch, samples]
        seq = ids.shape[1]
        types = torch.gather(self.token_type_ids, 1, self.position_ids[:, :seq])  # all zeros, [1, seq]
        text = ids[..., None] + self.types(types)
        frames = self.conv(audio[:, None]).transpose(1, 2)  # [batch, samples // 5 - 1, 8]
        heads = frames.reshape(frames.shape[0], frames.shape[1], -1, 2)
        return text, heads.sum(-1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    model = Patterns().eval()
    dim = torch.export.Dim
    dynamo_export(model, (torch.randn(2, 5), torch.randn(2, 60)), root / "hf.onnx",
                  ({0: dim("batch"), 1: dim("seq", max=64)}, {0: dim("batch"), 1: dim("samples", min=10)}))
    (root / "manifest.toml").write_text('[package]\nname = "hf_patterns"\n[kernels.p]\nonnx = "hf.onnx"\n'
                                        '[exports]\np = "p"\np_vjp = "vjp(p)"\n')
    return model, ksbuild.build(root / "manifest.toml"), ort.InferenceSession(str(root / "hf.onnx"))


@pytest.mark.parametrize("batch, seq, samples", [(1, 1, 10), (2, 7, 33), (3, 64, 101)])
def test_values_match_onnxruntime(exported, batch, seq, samples):
    _, pkg, sess = exported
    rng = np.random.default_rng(seq)
    ids = rng.standard_normal((batch, seq)).astype(np.float32)
    audio = rng.standard_normal((batch, samples)).astype(np.float32)
    feeds = dict(zip([i.name for i in sess.get_inputs()], (ids, audio)))
    for got, want in zip(pkg.p(ids, audio), sess.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_vjp_matches_torch_autograd(exported):
    model, pkg, _ = exported
    rng = np.random.default_rng(1)
    ids, audio = rng.standard_normal((2, 7)).astype(np.float32), rng.standard_normal((2, 41)).astype(np.float32)
    it, at = torch.tensor(ids, requires_grad=True), torch.tensor(audio, requires_grad=True)
    outs = model(it, at)
    cts = [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs]
    sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cts)).backward()
    d_ids, d_audio = pkg.p_vjp(ids, audio, *cts)
    np.testing.assert_allclose(d_ids, it.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_audio, at.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_floor_division_by_a_number_takes_out_the_multiples():
    conv = dim_add(dim_floordiv(dim_add("seq", -10), 5), 1)
    assert conv == canonical_dim("seq // 5 - 1") == canonical_dim("(seq - 10) // 5 + 1")
    for c in range(-12, 13):
        for k in (1, 2, 3, 5):
            d = dim_floordiv(dim_add("3*s", c), k)
            assert all(dim_value(d, {"s": s}) == (3 * s + c) // k for s in range(40)), d
