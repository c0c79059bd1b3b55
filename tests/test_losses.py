"""torch.nn.functional losses with their options (weight=, ignore_index=, label_smoothing=, pos_weight=,
reduction=, beta=, class-probability targets) in Python kernels, compiled, against torch: values and vjp.
A keyword argument a decomposition does not read is an error (it used to be ignored silently)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import build_kernel_file  # noqa: E402

KERNELS = '''
import torch
import torch.nn.functional as F


def xent(z: "float[n, c]", y: "int[n]") -> float:
    return F.cross_entropy(z, y)


def xent_weight(z: "float[n, c]", y: "int[n]", w: "float[c]") -> float:
    return F.cross_entropy(z, y, weight=w)


def xent_ignore(z: "float[n, c]", y: "int[n]") -> float:
    return F.cross_entropy(z, y, ignore_index=1)


def xent_smooth(z: "float[n, c]", y: "int[n]") -> float:
    return F.cross_entropy(z, y, label_smoothing=0.1)


def xent_all(z: "float[n, c]", y: "int[n]", w: "float[c]") -> float:
    return F.cross_entropy(z, y, weight=w, ignore_index=2, label_smoothing=0.2)


def xent_all_sum(z: "float[n, c]", y: "int[n]", w: "float[c]") -> float:
    return F.cross_entropy(z, y, weight=w, ignore_index=2, label_smoothing=0.2, reduction="sum")


def xent_all_none(z: "float[n, c]", y: "int[n]", w: "float[c]") -> "float[n]":
    return F.cross_entropy(z, y, weight=w, ignore_index=2, label_smoothing=0.2, reduction="none")


def xent_probs(z: "float[n, c]", p: "float[n, c]", w: "float[c]") -> float:
    return F.cross_entropy(z, p, weight=w, label_smoothing=0.1)


def nll_weight_sum(z: "float[n, c]", y: "int[n]", w: "float[c]") -> float:
    return F.nll_loss(F.log_softmax(z, dim=1), y, weight=w, ignore_index=0, reduction="sum")


def bce_logits_pos(z: "float[n, c]", t: "float[n, c]", pw: "float[c]", w: "float[c]") -> float:
    return F.binary_cross_entropy_with_logits(z, t, weight=w, pos_weight=pw)


def bce_logits_none(z: "float[n, c]", t: "float[n, c]", pw: "float[c]") -> "float[n, c]":
    return F.binary_cross_entropy_with_logits(z, t, pos_weight=pw, reduction="none")


def bce_weight(z: "float[n, c]", t: "float[n, c]", w: "float[c]") -> float:
    return F.binary_cross_entropy(torch.sigmoid(z), t, weight=w, reduction="sum")


def smooth_l1_beta(z: "float[n, c]", t: "float[n, c]") -> float:
    return F.smooth_l1_loss(z, t, beta=0.5, reduction="sum")


def mse_none(z: "float[n, c]", t: "float[n, c]") -> "float[n, c]":
    return F.mse_loss(z, t, reduction="none")
'''

NAMES = ["xent", "xent_weight", "xent_ignore", "xent_smooth", "xent_all", "xent_all_sum", "xent_all_none",
         "xent_probs", "nll_weight_sum", "bce_logits_pos", "bce_logits_none", "bce_weight", "smooth_l1_beta",
         "mse_none"]


@pytest.fixture(scope="module")
def losses(tmp_path_factory):
    root = tmp_path_factory.mktemp("losses")
    kernels = "".join(f'[kernels.{n}]\npython = "k.py:{n}"\n' for n in NAMES)
    exports = "".join(f'{n} = "{n}"\n{n}_vjp = "vjp({n})"\n' for n in NAMES)
    manifest = f'[package]\nname = "losses"\n\n[build]\ndtype = "float64"\n\n{kernels}\n[exports]\n{exports}'
    return build_kernel_file(root, KERNELS, manifest, "loss_kernels")


def _inputs(name: str, rng) -> list[np.ndarray]:
    n, c = 6, 4
    z = rng.standard_normal((n, c))
    y = np.array([0, 1, 2, 3, 1, 2], dtype=np.int64)  # every class, and the ignored ones (1, 2) twice
    w = rng.uniform(0.5, 2.0, c)
    t = rng.uniform(0.0, 1.0, (n, c))
    p = rng.dirichlet(np.ones(c), n)
    return {"xent": [z, y], "xent_weight": [z, y, w], "xent_ignore": [z, y], "xent_smooth": [z, y],
            "xent_all": [z, y, w], "xent_all_sum": [z, y, w], "xent_all_none": [z, y, w], "xent_probs": [z, p, w],
            "nll_weight_sum": [z, y, w], "bce_logits_pos": [z, t, rng.uniform(0.5, 3.0, c), w],
            "bce_logits_none": [z, t, rng.uniform(0.5, 3.0, c)], "bce_weight": [z, t, w],
            "smooth_l1_beta": [z, t], "mse_none": [z, t]}[name]


@pytest.mark.parametrize("name", NAMES)
def test_loss_and_its_vjp_match_torch(losses, name):
    pkg, source = losses
    args = _inputs(name, np.random.default_rng(abs(hash(name)) % 2**32))
    ts = [torch.tensor(a, requires_grad=i == 0) for i, a in enumerate(args)]  # (torch has no gradient for weight=)
    want = getattr(source, name)(*ts)
    np.testing.assert_allclose(getattr(pkg, name)(*args), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    ct = np.random.default_rng(7).standard_normal(want.shape)
    want.backward(torch.tensor(ct))
    got = getattr(pkg, f"{name}_vjp")(*args, ct if ct.shape else float(ct))
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == sum(a.dtype == np.float64 for a in args)  # a cotangent per float input
    np.testing.assert_allclose(got[0], ts[0].grad.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_ignores_the_default_ignore_index(losses):
    """Targets of -100 (torch's default ignore_index, the label of padding) count for nothing, as in torch."""
    pkg, _ = losses
    z = np.random.default_rng(3).standard_normal((4, 3))
    y = np.array([2, -100, 0, -100], dtype=np.int64)
    want = torch.nn.functional.cross_entropy(torch.tensor(z), torch.tensor(y))
    np.testing.assert_allclose(pkg.xent(z, y), want.item(), rtol=1e-12)


def test_an_unread_keyword_is_an_error(tmp_path):
    """A keyword argument the decomposition does not implement is a located error, never ignored."""
    import ksbuild
    from ksbuild.errors import KsbuildError
    (tmp_path / "k.py").write_text('import torch\n\n\ndef f(x: "float[n]") -> "float[n]":\n'
                                   '    return torch.nn.functional.softplus(x, beta=2.0, threshold=20.0, unknown=1)\n')
    (tmp_path / "manifest.toml").write_text('[package]\nname = "kw"\n\n[kernels.f]\npython = "k.py:f"\n\n'
                                            '[exports]\nf = "f"\n')
    with pytest.raises(KsbuildError) as e:
        ksbuild.build(tmp_path / "manifest.toml")
    assert "k.py:5:" in str(e.value) and "unknown" in str(e.value)
