"""Torch models exported to ONNX by the test itself, compiled by ksbuild: values against
onnxruntime for several batch sizes (the batch dim is symbolic), gradients of the inputs and of
every parameter (weights = "external") against torch.autograd of the module they came from."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import DEBUG

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")

from onnx_models import EMBEDDED_VJP, NAMES, export  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Every model exported, one package with each model, its external-weights twin and that one's vjp."""
    import ksbuild
    d = tmp_path_factory.mktemp("onnx_models")
    modules = {n: export(n, d / f"{n}.onnx") for n in NAMES}
    kernels = "".join(f'[kernels.{n}]\nonnx = "{n}.onnx"\n\n'
                      f'[kernels.{n}_w]\nonnx = "{n}.onnx"\nweights = "external"\n\n' for n in NAMES)
    exports = "".join(f'{n} = "{n}"\n{n}_vjp = "vjp({n}_w)"\n' for n in NAMES)
    (d / "manifest.toml").write_text(f'[package]\nname = "onnx_models"\n\n{kernels}[exports]\n{exports}')
    return ksbuild.build(d / "manifest.toml", optimize=DEBUG), modules, d


def _weights(path):
    """The initializers in order: the external weights' values (the caller passes them)."""
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("batch", [1, 3, 7])
def test_values_match_onnxruntime(models, name, batch):
    pkg, modules, d = models
    rng = np.random.default_rng(batch)
    sess = ort.InferenceSession(str(d / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    shape = (batch,) + tuple(sess.get_inputs()[0].shape[1:])
    x = rng.standard_normal(shape).astype(np.float32)
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(getattr(pkg, name)(x), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", NAMES)
def test_vjp_matches_torch_autograd(models, name):
    pkg, modules, d = models
    m = modules[name]
    export = getattr(pkg, f"{name}_vjp")
    weight_names = [a["name"] for a in export.ins[1:-1]]
    inits = _weights(d / f"{name}.onnx")
    order = [n for n in inits if _c(n) in weight_names]
    assert [_c(n) for n in order] == weight_names
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3,) + tuple(export.ins[0]["shape"][1:])).astype(np.float32)
    y = getattr(pkg, name)(x)
    ct = rng.standard_normal(y.shape).astype(np.float32)
    grads = export(x, *[inits[n] for n in order], ct)
    xt = torch.tensor(x, requires_grad=True)
    m.zero_grad()
    (m(xt) * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(grads[0], xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    params = dict(m.named_parameters())
    checked = 0
    for n, g in zip(order, grads[1:]):
        if n in params:
            np.testing.assert_allclose(g, params[n].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
            checked += 1
    assert checked == len(params), f"only {checked} of {len(params)} parameters are initializers of the model"


@pytest.mark.parametrize("name", EMBEDDED_VJP)
def test_vjp_with_embedded_weights_matches_torch_autograd(tmp_path, name):
    """Each model in a package of its own (GCC's inlining, and so its warnings, depend on what else the source
    holds), exported with the exporter's defaults, its forward and its vjp built with the weights embedded."""
    import ksbuild
    m = export(name, tmp_path / "m.onnx", fold_constants=True)
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "embedded_{name}"\n\n[kernels.m]\nonnx = "m.onnx"\n\n'
                                            '[exports]\nm = "m"\nm_vjp = "vjp(m)"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3,) + tuple(pkg.m.ins[0]["shape"][1:])).astype(np.float32)
    ys = pkg.m(x)
    cts = [rng.standard_normal(y.shape).astype(np.float32) for y in (ys if isinstance(ys, tuple) else (ys,))]
    xt = torch.tensor(x, requires_grad=True)
    outs = m(xt)
    sum((y * torch.tensor(c)).sum() for y, c in zip(outs if isinstance(outs, tuple) else (outs,), cts)).backward()
    np.testing.assert_allclose(pkg.m_vjp(x, *cts), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def _c(name: str) -> str:
    from ksbuild.frontends.onnx.graph import c_name
    return c_name(name, "w")


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_a_model_is_a_loop_over_lanes(models, name):
    """vmap over an imported model (interpreted): each lane is the model on that lane's batch."""
    from ksbuild.frontends.onnx import compile_onnx_kernel
    from ksbuild.ir.interp import eval_func
    from ksbuild.transforms.vmap import vmap_func
    _, _, d = models
    f = compile_onnx_kernel(d / f"{name}.onnx", name)
    vf, _ = vmap_func(f, [True], "lanes", [True])
    sess = ort.InferenceSession(str(d / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    xs = np.random.default_rng(5).standard_normal((2, 3) + tuple(sess.get_inputs()[0].shape[1:])).astype(np.float32)
    want = np.stack([sess.run(None, {"x": x})[0] for x in xs])
    np.testing.assert_allclose(eval_func(vf, [xs])[0], want, rtol=2e-5, atol=2e-6)


def test_a_wrong_fixed_size_names_the_axis_and_the_size(models):
    """A literal dim of the model (16 features) given another size: the message says which axis and size."""
    from ksbuild.packaging.runtime import CallError
    pkg, _, _ = models
    with pytest.raises(CallError, match=r"mlp: argument 'x' must have size 16 along axis 1, got shape \[3, 15\]"):
        pkg.mlp(np.zeros((3, 15), np.float32))
