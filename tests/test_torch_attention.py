"""A red-team pass of torch modules (2026-11-26): F.scaled_dot_product_attention with a boolean mask whose
query row attends to nothing gave that row 0, as torch does, but its vjp was NaN for that row of dq and for
all of dk (torch's _safe_softmax was decomposed into softmax then a mask, and the backward pass multiplied
the mask's zero by the softmax's NaN). _safe_softmax is now one decomposition without NaN (ops/reduce.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn


class Sdpa(nn.Module):
    def forward(self, q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def make():
    m = torch.ones(3, 4, dtype=torch.bool)
    m[1] = False  # query row 1 attends to nothing
    m[2, :2] = False
    return Sdpa(), (torch.randn(2, 3, 5), torch.randn(2, 4, 5), torch.randn(2, 4, 5), m)
'''


def test_attention_to_nothing_has_finite_gradients(tmp_path):
    import ksbuild
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "manifest.toml").write_text('[package]\nname = "sdpa_masked"\n[kernels.sdpa]\ntorch = "model.py:make"\n'
                                            '[exports]\nsdpa = "sdpa"\nsdpa_vjp = "vjp(sdpa)"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    import importlib.util
    spec = importlib.util.spec_from_file_location("sdpa_model", tmp_path / "model.py")
    src = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(src)
    torch.manual_seed(0)
    module, (q, k, v, m) = src.make()
    want = module(q, k, v, m)
    np.testing.assert_allclose(pkg.sdpa(q.numpy(), k.numpy(), v.numpy(), m.numpy()), want.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    ct = torch.randn(want.shape)
    ts = [t.clone().requires_grad_() for t in (q, k, v)]
    grads = torch.autograd.grad(module(*ts, m), ts, ct)
    got = pkg.sdpa_vjp(q.numpy(), k.numpy(), v.numpy(), m.numpy(), ct.numpy())
    for g, w in zip(got, grads):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
