"""The Knossos story in PyTorch: ksbuild.vmap of an `if`, its vjp, nnModule in an nn.Sequential,
training; gradcheck (float64) through every example kernel and corpus kernels whose residuals
have computed dims; double backward; no forward recomputation; torch.compile and torch.export.
Oracles: torch.autograd.gradcheck / gradgradcheck (finite differences), torch's own relu3."""
from __future__ import annotations

import importlib.util
from collections import OrderedDict

import dev_kernels as dk
import numpy as np
import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")
import test_tensor_corpus as T  # noqa: E402

import ksbuild  # noqa: E402

F64 = torch.float64


def load(path, name):
    spec = importlib.util.spec_from_file_location(path.stem + "_torchdev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


relu3 = load(ROOT / "examples/relu3/relu3.py", "relu3")


def relu3_where(x):
    return torch.where(x < 0, 0.0, torch.where(x < 1, x ** 3 / 3, x - 2 / 3))


@pytest.fixture(scope="module")
def vrelu3():
    return ksbuild.vmap(relu3)


def leaf(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=F64) * 1.5).requires_grad_()


def test_the_story(vrelu3):
    """vmap of an if, its vjp, nnModule in the seeds' model, trained: same losses as torch.where's relu3."""
    t = torch.arange(-3, 3, 0.1)
    torch.testing.assert_close(vrelu3(t), relu3_where(t))
    dfdt = vrelu3.vjp(t, torch.ones_like(t))
    torch.testing.assert_close(dfdt, torch.where(t < 0, 0.0, torch.where(t < 1, t * t, 1.0)))
    losses = {}
    for name, act in (("ksbuild", vrelu3.nnModule), ("torch", lambda: Lambda(relu3_where))):
        torch.manual_seed(0)
        model = seed_model(act)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        data = torch.randn(64, 20, generator=torch.Generator().manual_seed(1))
        labels = torch.arange(64) % 10
        losses[name] = []
        for _ in range(5):
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(model(data), labels)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    np.testing.assert_allclose(losses["ksbuild"], losses["torch"], rtol=1e-5)
    assert losses["ksbuild"][-1] < losses["ksbuild"][0]


def seed_model(act):
    return torch.nn.Sequential(OrderedDict([
        ("fc1", torch.nn.Linear(20, 32)), ("activation1", act()), ("fc2", torch.nn.Linear(32, 16)),
        ("bn2", torch.nn.BatchNorm1d(16)), ("activation2", act()), ("dropout", torch.nn.Dropout(0.0)),
        ("logits", torch.nn.Linear(16, 10)), ("logsoftmax", torch.nn.LogSoftmax(dim=1))]))


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def sqrl_kernels():
    path = ROOT / "examples/sqrl/sqrl.py"
    return load(path, "sqrl"), load(path, "relu3_tensor")


def gmm_args():
    K, d, n = 2, 2, 3
    return (leaf(K, seed=1), leaf(K, d, seed=2), leaf(K, d * (d + 1) // 2, seed=3) * 0.3, leaf(n, d, seed=4),
            torch.tensor(1.2, dtype=F64, requires_grad=True), torch.tensor(0.8, dtype=F64, requires_grad=True))


def corpus_args(name):
    case = next(c for c in T.CASES if c.kernel == name)
    return tuple(T.to_torch(case, case.args(), requires_grad=True)[0])


def example_cases():
    """(id, kernel, arguments, double backward too): every example kernel and some corpus kernels."""
    sqrl, relu3_tensor = sqrl_kernels()
    gmm = load(ROOT / "examples/gmm/gmm.py", "gmm_objective")
    ks = T.K
    return [
        ("relu3", lambda: ksbuild.kernel(relu3), lambda: (torch.tensor(0.6, dtype=F64, requires_grad=True),), True),
        ("vmap_relu3", lambda: ksbuild.vmap(relu3), lambda: (leaf(9),), True),
        ("vmap_scale_in_axes", lambda: ksbuild.vmap(dk.scale, in_axes=(0, None)),
         lambda: (leaf(6), torch.tensor(0.7, dtype=F64, requires_grad=True)), True),
        ("sqrl", lambda: ksbuild.kernel(sqrl), lambda: (leaf(5),), True),
        ("vmap_sqrl", lambda: ksbuild.vmap(sqrl), lambda: (leaf(4, 5),), True),
        ("relu3_tensor", lambda: ksbuild.kernel(relu3_tensor), lambda: (leaf(7),), True),
        ("gmm", lambda: ksbuild.kernel(gmm), gmm_args, False),
        ("ema_trend", lambda: ksbuild.kernel(ks.ema_trend), lambda: corpus_args("ema_trend"), False),
    ]


@pytest.mark.parametrize("cid, make, args, double", example_cases(), ids=[c[0] for c in example_cases()])
def test_gradcheck(cid, make, args, double):
    k, xs = make(), args()
    xs = tuple(x.detach().requires_grad_() if torch.is_tensor(x) and x.is_floating_point() else x for x in xs)
    assert torch.autograd.gradcheck(k, xs, eps=1e-6, atol=1e-6, rtol=1e-5)
    if double:
        assert torch.autograd.gradgradcheck(k, xs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_residuals_with_computed_dims_through_the_c_abi():
    """ema_trend's fwd stores per-step residuals of shape [T - 1, ...]; bwd reads them back through the C ABI."""
    k = ksbuild.kernel(T.K.ema_trend)
    pkg = k.build("float64")
    case = next(c for c in T.CASES if c.kernel == "ema_trend")
    x, alpha = case.args()
    fwd = pkg.fn_fwd(x, alpha)
    n_out = len(pkg.fn.outs)
    assert any("T - 1" in map(str, a["shape"]) for a in pkg.fn_fwd.outs)
    for got, want in zip(fwd[:n_out], pkg.fn(x, alpha)):
        np.testing.assert_array_equal(got, want)
    cts = T.cotangents(case, (x, alpha))
    got = pkg.fn_bwd(x, alpha, *fwd[n_out:], *cts)
    for g, w in zip(got, pkg.fn_vjp(x, alpha, *cts)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_elementwise_residuals_are_recomputed_not_stored(vrelu3):
    """vrelu3's residuals (x < 0, x < 1, 3x²) are elementwise in x: bwd recomputes them in its loop."""
    pkg = vrelu3.build("float64")
    assert len(pkg.fn_fwd.outs) == 1 and [a["name"] for a in pkg.fn_bwd.ins] == ["x", "ct"]


def test_backward_does_not_recompute_the_forward(vrelu3, monkeypatch):
    pkg = vrelu3.build("float64").torch_ops().package  # the package object the ops were defined with
    calls = []
    for name in ("fn", "fn_fwd", "fn_bwd", "fn_vjp"):
        export = pkg.exports[name]
        monkeypatch.setattr(export, "call_pointers", counting(export.call_pointers, name, calls))
    x = leaf(10)
    vrelu3(x).sum().backward()
    assert calls == ["fn_fwd", "fn_bwd"]
    calls.clear()
    (g,) = torch.autograd.grad(vrelu3(x).sum(), x, create_graph=True)  # double backward: through vjp(X)
    assert calls == ["fn_fwd", "fn_vjp"] and g.requires_grad
    calls.clear()
    with torch.no_grad():
        vrelu3(x)
    assert calls == ["fn"]


def counting(fn, name, calls):
    def call(*args, **kwargs):
        calls.append(name)
        return fn(*args, **kwargs)
    return call


def test_compile_fullgraph_dynamic_shapes():
    sqrl, _ = sqrl_kernels()
    vs = ksbuild.vmap(sqrl)  # first used inside the trace: built (or loaded) as plain Python there
    f = torch.compile(lambda x: vs(x).sum() * 2, fullgraph=True, dynamic=True)
    for rows, cols in ((3, 4), (5, 7)):
        x = torch.randn(rows, cols, requires_grad=True)
        y = f(x)
        (g,) = torch.autograd.grad(y, x)
        x2 = x.detach().requires_grad_()
        (want,) = torch.autograd.grad(vs(x2).sum() * 2, x2)
        torch.testing.assert_close(y, vs(x.detach()).sum() * 2)
        torch.testing.assert_close(g, want)


def test_export_and_compile_a_model_with_nn_module(vrelu3):
    torch.manual_seed(0)
    model = seed_model(vrelu3.nnModule).eval()
    x = torch.randn(8, 20)
    ep = torch.export.export(model, (x,))
    assert ".fn.default" in ep.graph_module.code and "fn_fwd" not in ep.graph_module.code
    torch.testing.assert_close(ep.module()(x), model(x))
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(x), model(x))


def test_compile_fullgraph_with_python_number_arguments():
    """A Python int and a Python float passed to kernels inside torch.compile(fullgraph=True) (the dtype check
    used a string method Dynamo cannot trace)."""
    vp = ksbuild.vmap(dk.power, in_axes=(0, None))
    vd = ksbuild.kernel(dk.double)
    f = torch.compile(lambda x: vp(x, 3) + vd(x, 0.5), fullgraph=True)
    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    torch.testing.assert_close(f(x), x ** 3 + 2.0 * x)


def test_forward_mode_ad_is_an_error_not_zero_tangents():
    """torch.func.jvp / forward_ad through a ksbuild op: torch has no forward derivative for it and used to return
    zero tangents silently; it is an error naming the kernel's own jvp export instead."""
    from ksbuild.errors import KsbuildError
    vs = ksbuild.vmap(dk.scale, in_axes=(0, None))
    x, t = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    with pytest.raises(KsbuildError, match="forward-mode AD"):
        torch.func.jvp(lambda v: vs(v, 2.0), (x,), (t,))
    import torch.autograd.forward_ad as fwd
    with fwd.dual_level(), pytest.raises(KsbuildError, match="kernel.jvp"):
        vs(fwd.make_dual(x, t), 2.0)
    torch.testing.assert_close(vs.jvp(x, 2.0, t, 0.0), 2 * 2.0 * x + 0.5)  # instead: d/dx (a x² + x/2), da = 0


def test_a_model_with_nn_module_deep_copies_and_saves(tmp_path):
    """copy.deepcopy (an EMA or best-checkpoint copy) after the kernel ran, and torch.save / torch.load of the whole
    model: the kernel is shared, its loaded package (ctypes handles) is not pickled but loaded again."""
    import copy
    torch.manual_seed(0)
    model = seed_model(ksbuild.vmap(dk.softsign).nnModule).eval()
    x = torch.randn(4, 20)
    want = model(x)
    twin = copy.deepcopy(model)
    torch.testing.assert_close(twin(x), want)
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    torch.testing.assert_close(loaded(x), want)
