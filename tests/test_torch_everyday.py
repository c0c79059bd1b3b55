"""Everyday torch functions (in ksbuild/frontends/python/ by domain: shape.py, math.py, reduce.py, nn.py, ...), each
compiled from a one-line kernel and checked against torch evaluating the same line, values and (where the result is
float and smooth) the vjp against torch.autograd. Inputs hold a NaN where the function is about NaN. Found on the
way: the vjp of a slice of a repeat_interleave did not compile (GCC 12 -Warray-bounds: a workspace it could not
prove non-null, now checked against the constant size), and |x|'s derivative at NaN was NaN, so nan_to_num(|z|) sent
NaN back (torch: 0); a dim written None (torch.sum(x, None): every axis) was refused."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import build_kernel_file

torch = pytest.importorskip("torch")

LINES = {
    "flatten": "torch.flatten(x, 0)",
    "broadcast_to": "torch.broadcast_to(x[:1], (3, 4)) + y",
    "narrow": "torch.narrow(x, 1, 1, 2)",
    "movedim": "torch.movedim(x.reshape(3, 2, 2), 0, 2)",
    "swapaxes": "torch.swapaxes(x, 0, 1) + x.swapaxes(1, 0) + torch.t(x)",
    "unflatten": "x.unflatten(1, (2, 2))",
    "rot90": "torch.rot90(x) + torch.rot90(x, 3).flip(0).flip(1)",
    "compare": "torch.lt(x, y).float() + x.gt(0.1).float() + torch.ge(x, y).float() + x.ne(y).float()",
    "logic": "torch.logical_and(x > 0, y > 0).float() + torch.logical_or(x, y < 0).float()"
             " + torch.logical_xor(x > 0, y > 0).float() + torch.logical_not(x > 0).float()",
    "frac": "torch.frac(x * 3)",
    "heaviside": "torch.heaviside(torch.round(x), y)",
    "fmax": "torch.fmax(z, y) + torch.fmin(y, z)",
    "nansum": "torch.nansum(z, dim=1) + torch.nanmean(z, dim=1)",
    "nansum_all": "torch.nansum(z) + torch.nanmean(z)",
    "dim_none": "torch.sum(x, None) + torch.mean(y, dim=None) + x.sum(None) + torch.amax(x, None, keepdim=True)[0, 0]"
                " + torch.var(x, None)",
    "count_nonzero": "torch.count_nonzero(torch.round(x), dim=1)",
    "std_mean": "torch.std_mean(x, dim=1)[0] + torch.std_mean(x, dim=1)[1] + torch.var_mean(x, 0)[0].sum()",
    "dist": "torch.dist(x, y) + torch.dist(x, y, p=1)",
    "trapezoid": "torch.trapezoid(x) + torch.trapezoid(x, dx=0.5, dim=0).sum()",
    "softmin": "F.softmin(x, dim=1)",
    "threshold": "F.threshold(x, 0.1, -2.0)",
    "shrinks": "F.tanhshrink(x) + F.softshrink(x, 0.3) + F.hardshrink(x, 0.3)",
    "prelu": "F.prelu(x, torch.tensor([0.25], dtype=torch.float64))"
             " + F.prelu(x.reshape(1, 3, 4), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))[0]",
    "rms_norm": "F.rms_norm(x, (4,)) + F.rms_norm(x, (4,), y[0], eps=1e-3)",
    "batch_norm": "F.batch_norm(x, (y[0] * 0.1).detach(), (y[1].abs() + 0.5).detach(), y[2], x[0])",
    "instance_norm": "F.instance_norm(x.reshape(1, 3, 4)) + F.instance_norm(x.reshape(1, 3, 4), weight=y[0, :3])",
    "pairwise": "F.pairwise_distance(x, y) + F.pairwise_distance(x, y, p=1.0, keepdim=True)[:, 0]",
    "adaptive": "F.adaptive_avg_pool1d(x.reshape(1, 3, 4), 2)[0] + F.adaptive_max_pool2d(x.reshape(1, 1, 3, 4), (3, 1))"
                "[0, 0].sum() + F.adaptive_avg_pool2d(x.reshape(1, 1, 3, 4), 1)[0, 0, 0]",
    "type_dtypes": "x.type(torch.float32).type(torch.float64) + torch.softmax(x, dim=1, dtype=torch.float64)"
                   " + x.sum(dim=1, dtype=torch.float64, keepdim=True) + F.relu(x, inplace=False)",
    "repeat_interleave": "torch.repeat_interleave(x, 2, dim=1)[:, :4] + x.repeat_interleave(3)[:12].reshape(3, 4)",
    "cummax": "torch.cummax(z, dim=1)[0] + torch.cummin(x, 0)[0] + x.cummax(dim=1).indices + torch.cummin(z, 1)[1]",
    "cov": "torch.cov(x) + torch.cov(x[0]) + torch.cov(x, correction=0)",
    "logdet": "torch.logdet(x[:, :3] @ x[:, :3].T + torch.eye(3, dtype=torch.float64)) + x[0, :3]",
    "diag_embed": "torch.diag_embed(x)[1] + torch.block_diag(x[:2, :2], x[2:, 2:], x[0, :1]).sum()",
    "vander": "torch.vander(x[0]) + torch.vander(x[1], N=4, increasing=True)",
    "more_losses": "F.hinge_embedding_loss(x, y.sign().detach()) + F.cosine_embedding_loss(x, y, z[:, 0].nan_to_num("
                   "1.0).sign().detach(), margin=0.1) + F.triplet_margin_loss(x, y, x * 0.5 + 0.1, swap=True)",
    "powers": "torch.float_power(x, 2) + torch.float_power(x.abs(), y) + torch.logspace(0, 2, 4) + x.new_tensor([1.0,"
              " 2.0, 3.0, 4.0])",
    "attributes": "x.mT.mT + torch.finfo(x.dtype).eps * 1e10 + torch.finfo(torch.float32).tiny * 1e30"
                  " + torch.zeros(3, 4, dtype=x.dtype, device=x.device) + torch.stack(torch.unbind(x, 0))"
                  " + sum(x.unbind(1))[:, None]",
    "kthvalue": "torch.kthvalue(x, 2, dim=1)[0] + x.kthvalue(3, dim=0, keepdim=True).values.sum()",
    "losses": "F.soft_margin_loss(x, y.sign().detach())"
              " + F.margin_ranking_loss(x[0], x[1], y[2].sign(), margin=0.1)"
              " + F.poisson_nll_loss(x, y.abs())"
              " + F.poisson_nll_loss(x.abs() + 0.1, y.abs() * 3 + 0.5, log_input=False, full=True, reduction='sum')"
              " + F.gaussian_nll_loss(x, y, z.abs().nan_to_num(1.0) + 0.1, full=True)",
}
NOT_SMOOTH = {"cummax", "vander", "compare", "logic", "frac", "heaviside", "count_nonzero", "fmax", "nansum",
              "nansum_all", "threshold", "shrinks"}
"""(Piecewise constant or with a NaN in torch's own gradient; torch.vander's backward fails in torch 2.13.)"""


def _source() -> str:
    lines = ["import torch", "import torch.nn.functional as F", ""]
    for name, line in LINES.items():
        lines += ["", f'def {name}(x: "f64[3, 4]", y: "f64[3, 4]", z: "f64[3, 4]"):', f"    return {line}", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    kernels = "\n".join(f'{k} = {{ python = "k.py:{k}" }}' for k in LINES)
    exports = "\n".join([f'{k} = "{k}"' for k in LINES] + [f'{k}_vjp = "vjp({k})"' for k in LINES
                                                              if k not in NOT_SMOOTH])
    manifest = f'[package]\nname = "everyday"\n\n[kernels]\n{kernels}\n\n[exports]\n{exports}\n'
    return build_kernel_file(tmp_path_factory.mktemp("everyday"), _source(), manifest, "everyday_k")


def _inputs():
    rng = np.random.default_rng(4)
    x, y, z = (rng.normal(size=(3, 4)) for _ in range(3))
    x[0, 1], y[1, 2] = 0.0, 0.0  # zeros for heaviside, count_nonzero, logic
    z[0, 0], z[2, 3], y[2, 3] = np.nan, np.nan, np.nan
    y[2, 3] = 0.5
    return x, y, z


@pytest.mark.parametrize("name", list(LINES))
def test_matches_torch(built, name):
    p, k = built
    x, y, z = _inputs()
    ts = [torch.tensor(a, requires_grad=True) for a in (x, y, z)]
    want = getattr(k, name)(*ts)
    got = getattr(p, name)(x, y, z)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want.detach().numpy().astype(np.float64),
                               rtol=1e-12, atol=1e-12, equal_nan=True)
    if name in NOT_SMOOTH:
        return
    ct = np.random.default_rng(5).normal(size=tuple(want.shape))
    (want * torch.tensor(ct)).sum().backward()
    grads = getattr(p, f"{name}_vjp")(x, y, z, ct)
    for g, t in zip(grads, ts):
        np.testing.assert_allclose(g, t.grad.numpy() if t.grad is not None else np.zeros_like(g), rtol=1e-10,
                                   atol=1e-12)
