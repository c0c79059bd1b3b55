"""A built package's exports as torch custom ops: autograd through the package's vjp exports,
no silent detach or cast, torch.compile(fullgraph=True) and torch.export.
Oracles: torch's own relu3 (torch.where form) and its autograd."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ksbuild.packaging.runtime import DtypeError  # noqa: E402


def relu3_where(x):
    return torch.where(x < 0, 0.0, torch.where(x < 1, x ** 3 / 3, x - 2 / 3))


X = [-2.0, -0.5, 0.1, 0.5, 0.9, 1.2, 3.0]


def test_autograd_through_vjp_export(relu3_pkg):
    x = torch.tensor(X, requires_grad=True)
    y = relu3_pkg.vrelu3(x)
    assert y.requires_grad  # not silently detached
    ct = torch.linspace(-1, 1, len(X))
    (g,) = torch.autograd.grad(y, x, ct)
    xr = torch.tensor(X, requires_grad=True)
    (want,) = torch.autograd.grad(relu3_where(xr), xr, ct)
    torch.testing.assert_close(y, relu3_where(x.detach()))
    torch.testing.assert_close(g, want)


def test_scalar_export_takes_0d_tensors(relu3_pkg):
    s = torch.tensor(0.5, requires_grad=True)
    r = relu3_pkg.relu3(s)
    assert r.shape == () and r.dtype == torch.float32
    r.backward()
    assert s.grad.item() == pytest.approx(0.25)


def test_no_silent_cast_or_detach(relu3_pkg):
    with pytest.raises(DtypeError, match="float64"):
        relu3_pkg.vrelu3(torch.tensor(X, dtype=torch.float64))
    with pytest.raises(DtypeError):
        relu3_pkg.vrelu3(torch.tensor(X, dtype=torch.float16))
    with pytest.raises(ValueError, match="requires grad"):
        relu3_pkg.vrelu3(torch.tensor(X, requires_grad=True), out=torch.empty(len(X)))


def test_missing_vjp_is_a_clear_error_at_call_time(relu3_pkg):
    """The package has no vjp(vjp(vmap(relu3))): the call says so (it used to give a result that failed at
    .backward()); tests/test_torch_op_registry.py has the rest."""
    x = torch.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="no derivative of it"):
        relu3_pkg.vrelu3_vjp(x, torch.ones(len(X)))


def test_ops_are_registered_with_schemas(relu3_pkg):
    ops = relu3_pkg.torch_ops()
    op = getattr(getattr(torch.ops, ops.namespace), "vrelu3_vjp")
    assert str(op.default._schema).endswith("vrelu3_vjp(Tensor x, Tensor ct) -> Tensor")
    x = torch.tensor(X)
    want = relu3_pkg.vrelu3_vjp(x.numpy(), np.ones(7, np.float32))
    torch.testing.assert_close(op(x, torch.ones(len(X))), torch.from_numpy(want))


def test_compile_fullgraph_and_export(relu3_pkg):
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), Activation(relu3_pkg), torch.nn.Linear(5, 1))
    x = torch.randn(4, 3)
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
    compiled(x).sum().backward()
    g_compiled = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(g_compiled, model.parameters()):
        torch.testing.assert_close(a, b.grad)
    ep = torch.export.export(model, (x,))
    assert f"{relu3_pkg.torch_ops().namespace}.vrelu3" in ep.graph_module.code
    torch.testing.assert_close(ep.module()(x), model(x))


class Activation(torch.nn.Module):
    """vrelu3 of a package on a [batch, features] tensor (flattened: the export maps one axis)."""

    def __init__(self, pkg):
        super().__init__()
        self.pkg = pkg

    def forward(self, x):
        return self.pkg.vrelu3(x.reshape(-1)).reshape(x.shape)


def test_an_export_wider_than_a_custom_op_runs_eagerly(tmp_path):
    """A network with its weights as arguments (weights = "external": resnet18 has 102) has exports of more than
    64 arguments, the most a torch custom op takes: loading the package next to torch failed for every export.
    Those exports now run eagerly, autograd included, and say why where an op is needed (torch.compile)."""
    import ksbuild
    n = 70
    params = ", ".join(f"w{i}: float" for i in range(n))
    terms = " + ".join(f"w{i} * x ** {i % 3}" for i in range(n))
    (tmp_path / "k.py").write_text(f'def wide(x: "float[m]", {params}) -> "float[m]":\n    return {terms}\n')
    (tmp_path / "manifest.toml").write_text('[package]\nname = "wide"\n[kernels.wide]\npython = "k.py:wide"\n'
                                            '[exports]\nwide = "wide"\nwide_vjp = "vjp(wide)"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    x = torch.linspace(-1, 1, 5, requires_grad=True)
    w = [torch.tensor(0.1 * i, requires_grad=True) for i in range(n)]
    y = pkg.wide(x, *w)
    want = sum(w[i].detach() * x.detach() ** (i % 3) for i in range(n))
    torch.testing.assert_close(y, want)
    y.sum().backward()
    torch.testing.assert_close(x.grad, sum(w[i].detach() * (i % 3) * x.detach() ** max(i % 3 - 1, 0)
                                           for i in range(n) if i % 3), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w[4].grad, x.detach().sum())
    ops = pkg.torch_ops()
    assert "wide" not in ops.ops
    with pytest.raises(RuntimeError, match="at most 64"):
        ops.invoke("wide", [x.detach(), *[t.detach() for t in w]], {})
