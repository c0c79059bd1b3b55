"""backend = "ort": every export is also an ONNX Runtime custom op (lib/libP_ort.so, ks/ort.h).

The custom ops run inside onnxruntime sessions (its Python API, SessionOptions.register_custom_ops_library)
as nodes of the domain "ksbuild.P", alone and between standard ONNX ops. Oracles: torch (values and
autograd gradients of the same Python kernels) and float64 numpy; the ops' shape errors are checked to
come back as onnxruntime errors naming the op. The package of the first tests is built at speed, as users ship
it; the examples' packages at optimize="debug" (-Og: their values are checked, each against its own build's plain
exports and the oracles, and -Og compiles several times quicker).
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import textwrap

import numpy as np
import pytest
from conftest import DEBUG, ROOT

import ksbuild
from ksbuild.compile.backends import ort_headers
from ksbuild.errors import KsbuildError

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
try:
    ort_headers()
except KsbuildError as e:
    pytest.skip(f"no ONNX Runtime C API header: {e.message} (scripts/install.sh fetches it)", allow_module_level=True)

KERNELS = '''
import torch


def affine(x: "float[n, m]", w: "float[m, k]", b: "float[k]", s: float) -> "float[n, k]":
    return torch.tanh(x @ w + b) * s
'''
MANIFEST = '''
[package]
name = "ortops"

[build]
backend = "ort"
dtype = "float64"

[kernels.relu3]
python = "{relu3}:relu3"

[kernels.affine]
python = "k.py:affine"

[exports]
relu3 = "relu3"
vrelu3 = "vmap(relu3)"
vrelu3_vjp = "vjp(vmap(relu3))"
affine = "affine"
affine_vjp = "vjp(affine)"
'''
DOMAIN = "ksbuild.ortops"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    d = tmp_path_factory.mktemp("ort")
    (d / "k.py").write_text(textwrap.dedent(KERNELS))
    (d / "manifest.toml").write_text(MANIFEST.replace("{relu3}", str(ROOT / "examples" / "relu3" / "relu3.py")))
    return ksbuild.build(d / "manifest.toml", quiet=True)  # (at speed, as users ship it; the tests below: "debug")


def _session(pkg, nodes, ins, outs, domain=DOMAIN, library="libortops_ort.so"):
    """A session of a graph of `nodes` with float64 inputs and outputs of unknown shape."""
    h, tp = onnx.helper, onnx.TensorProto
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, tp.DOUBLE, None) for n in ins],
                         [h.make_tensor_value_info(n, tp.DOUBLE, None) for n in outs])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(domain, 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(pkg.root / "lib" / library))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _op(op, ins, outs, domain=DOMAIN):
    return onnx.helper.make_node(op, ins, outs, domain=domain)


def _relu3_torch(x):
    return torch.where(x < 0, torch.zeros_like(x), torch.where(x < 1, x**3 / 3, x - 2 / 3))


def test_a_scalar_export_is_an_op_on_0d_tensors(pkg):
    s = _session(pkg, [_op("relu3", ["x"], ["y"])], ["x"], ["y"])
    for x in (-1.0, 0.5, 2.0):
        (y,) = s.run(None, {"x": np.array(x)})
        want = _relu3_torch(torch.tensor(x, dtype=torch.float64)).item()
        assert y.shape == () and y == pytest.approx(want, rel=1e-12)


def test_vmap_and_its_vjp_run_between_standard_ops(pkg):
    """y = vrelu3(2x); its vjp with cotangent ct, against torch autograd of the same function."""
    h = onnx.helper
    nodes = [h.make_node("Add", ["x", "x"], ["x2"]), _op("vrelu3", ["x2"], ["y"]),
             _op("vrelu3_vjp", ["x2", "ct"], ["g"])]
    s = _session(pkg, nodes, ["x", "ct"], ["y", "g"])
    x, ct = np.linspace(-1.5, 1.5, 31), np.random.default_rng(0).standard_normal(31)
    y, g = s.run(None, {"x": x, "ct": ct})
    t = torch.tensor(2 * x, requires_grad=True)
    want = _relu3_torch(t)
    (want_g,) = torch.autograd.grad(want, t, torch.tensor(ct))
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g, want_g.numpy(), rtol=1e-12, atol=1e-14)


def test_dims_scalars_and_several_cotangents(pkg):
    """affine(x, w, b, s) binds n, m, k from the input shapes; its vjp has one output per input, s's a 0-d one."""
    rng = np.random.default_rng(1)
    x, w, b, ct = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4), \
        rng.standard_normal((5, 4))
    s = _session(pkg, [_op("affine", ["x", "w", "b", "s"], ["y"]),
                       _op("affine_vjp", ["x", "w", "b", "s", "ct"], ["dx", "dw", "db", "ds"])],
                 ["x", "w", "b", "s", "ct"], ["y", "dx", "dw", "db", "ds"])
    got = s.run(None, {"x": x, "w": w, "b": b, "s": np.array(1.5), "ct": ct})
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b, 1.5)]
    want = torch.tanh(ts[0] @ ts[1] + ts[2]) * ts[3]
    grads = torch.autograd.grad(want, ts, torch.tensor(ct))
    np.testing.assert_allclose(got[0], want.detach().numpy(), rtol=1e-12, atol=1e-13)
    for g, w_ in zip(got[1:], grads):
        assert g.shape == tuple(w_.shape)
        np.testing.assert_allclose(g, w_.numpy(), rtol=1e-11, atol=1e-12)


def test_a_shape_mismatch_is_an_onnxruntime_error_naming_the_op(pkg):
    s = _session(pkg, [_op("affine", ["x", "w", "b", "s"], ["y"])], ["x", "w", "b", "s"], ["y"])
    with pytest.raises(Exception, match=r"ksbuild op affine: input 2 must have size 4 along axis 0, not 3"):
        s.run(None, {"x": np.ones((5, 3)), "w": np.ones((3, 4)), "b": np.ones(3), "s": np.array(1.0)})


def test_the_static_library_stays_plain(pkg):
    """The ort build's libP.a is the plain one: no ONNX Runtime symbol, src/P.cpp includes ks/kernels.h."""
    source = (pkg.root / "share" / "ortops" / "src" / "ortops.cpp").read_text()
    assert '#include "ks/kernels.h"' in source and "ort" not in source.split("\n", 3)[1].lower()
    assert (pkg.root / "lib" / "libortops.a").is_file()
    assert "RegisterCustomOps" in (pkg.root / "share" / "ortops" / "src" / "ortops_ort.cpp").read_text()


def test_the_gmm_example_and_its_gradient_run_in_onnxruntime(tmp_path):
    """examples/gmm's objective (dims K, d, T, n read from four inputs; two 0-d scalars) and its gradient with
    respect to three inputs, against the example's numpy objective and torch autograd gradient."""
    gmm = ROOT / "examples" / "gmm"
    (tmp_path / "manifest.toml").write_text(f'[package]\nname = "gmm"\n[build]\nbackend = "ort"\ndtype = "float64"\n'
                                            f'[kernels.gmm]\npython = "{gmm / "gmm.py"}:gmm_objective"\n[exports]\n'
                                            'gmm = "gmm"\ngmm_grad = "grad(gmm, argnums=(0, 1, 2))"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml", quiet=True, optimize=DEBUG)
    # (loaded by path under a name of its own: benchmarks/gradbench has a `reference` module too, and a worker that
    # imported that one first would hand it out for `from reference import ...`)
    spec = importlib.util.spec_from_file_location("gmm_example_reference", gmm / "reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    gmm_grad_torch, gmm_objective_numpy, make_data = \
        reference.gmm_grad_torch, reference.gmm_objective_numpy, reference.make_data
    data = make_data(d=4, K=3, n=20)
    names = ["alphas", "means", "icf", "x", "gamma", "m"]
    feed = {k: np.asarray(data[k], dtype=np.float64) for k in names}
    nodes = [_op("gmm", names, ["L"], "ksbuild.gmm"), _op("gmm_grad", names, ["da", "dm", "di"], "ksbuild.gmm")]
    s = _session(pkg, nodes, names, ["L", "da", "dm", "di"], domain="ksbuild.gmm", library="libgmm_ort.so")
    value, *grads = s.run(None, feed)
    assert value == pytest.approx(gmm_objective_numpy(*[data[k] for k in names]), rel=1e-12)
    for got, want in zip(grads, gmm_grad_torch(data)[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ---- every example inside onnxruntime ------------------------------------------------------------------------

# the ONNX examples' forward exports: (export, model file); onnxruntime runs the model itself as the oracle
ONNX_MODELS = {"onnx_cnn": ("cnn", "cnn.onnx"), "onnx_mlp": ("mlp", "mlp.onnx"),
               "onnx_forest": ("forest", "forest.onnx"), "onnx_sklearn": ("classify", "iris_svc.onnx")}


def _sample(arg: dict, dims: dict, rng):
    """Random values of an export's input (its shape from the package description; the free dims 2, 3, 4, ... in
    the order they are met, so that reading a dim from the wrong axis shows)."""
    shape = tuple(d if isinstance(d, int) else dims.setdefault(d, 2 + len(dims)) if d.isidentifier() else eval(d, {}, dims)
                  for d in arg["shape"])
    dtype = np.dtype(ort_dtype(arg["dtype"]))
    if dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    return rng.integers(0, 3, shape).astype(dtype)


def ort_dtype(dtype: str) -> str:
    return {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "bool": "bool"}[dtype]


def _one_op_session(pkg, package: str, export: str, feeds: dict, outs: list[dict]):
    from ksbuild.codegen.ort import ONNX_TYPES
    h, tp = onnx.helper, onnx.TensorProto
    ins = [h.make_tensor_value_info(n, tp.DataType.Value(ONNX_TYPES[e]), None) for n, e in feeds.items()]
    outputs = [h.make_tensor_value_info(f"out_{o['name']}", tp.DataType.Value(ONNX_TYPES[o["dtype"]]), None)
               for o in outs]
    node = _op(export, list(feeds), [o.name for o in outputs], f"ksbuild.{package}")
    model = h.make_model(h.make_graph([node], "g", ins, outputs),
                         opset_imports=[h.make_opsetid("", 17), h.make_opsetid(f"ksbuild.{package}", 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(pkg.root / "lib" / f"lib{package}_ort.so"))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir()))
def test_every_example_runs_inside_onnxruntime(example, tmp_path):
    """Each example built with --backend ort: every export is a custom op (none left out), run in an onnxruntime
    session on random inputs. Oracles: the same package's export called from Python (the plain static library's
    code: values bit for bit), and for the ONNX examples' models onnxruntime running the .onnx file itself."""
    # (a copy under a package name of its own: this worker may hold the example's plain build as torch ops, which a
    # second build of the same package loaded later would make refuse to run)
    copy = shutil.copytree(ROOT / "examples", tmp_path / "examples")  # (mnist reads relu3's kernel)
    manifest = copy / example / "manifest.toml"
    manifest.write_text(re.sub(r'(?m)^name = "([^"]+)"', r'name = "\1_ort"', manifest.read_text(), count=1))
    pkg = ksbuild.build(manifest, backend="ort", quiet=True, optimize=DEBUG)
    package = next((pkg.root / "share").iterdir()).name
    source = (pkg.root / "share" / package / "src" / f"{package}_ort.cpp").read_text()
    rng = np.random.default_rng(0)
    for name, export in pkg.exports.items():
        assert f'"{name}"' in source, f"{example}: export {name} is not a custom op"
        dims: dict = {}
        feeds = {f"in_{a['name']}": _sample(a, dims, rng) for a in export.ins}
        got = _one_op_session(pkg, package, name, {k: a["dtype"] for k, a in zip(feeds, export.ins)},
                              export.outs).run(None, feeds)
        want = export(*feeds.values())
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"{example}.{name}")
        if example in ONNX_MODELS and ONNX_MODELS[example][0] == name:
            model = ort.InferenceSession(str(ROOT / "examples" / example / ONNX_MODELS[example][1]),
                                         providers=["CPUExecutionProvider"])
            ref = model.run(None, {i.name: v for i, v in zip(model.get_inputs(), feeds.values())})
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=f"{example}.{name} vs its .onnx")
