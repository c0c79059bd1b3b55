"""Findings of a held-out pass over ONNX models, each fixed and checked here against its oracle:

- Clip turned NaN into its lower bound (torch.clamp, relu6 and hardtanh exports hid NaNs); onnxruntime and
  torch keep NaN. torch.export's clamp and hardtanh shared the bug (ops.math.clamp);
- the vjp of ONNX Max at a tie gave everything to the first operand, and LeakyRelu's derivative at 0 was 1:
  torch (and ksbuild's Python frontend) give ½ each and the slope;
- a node that redefines a value (another node's output, a graph input) was built, the last definition
  winning; onnx.checker and onnxruntime refuse such a model;
- an input that has an initializer (its default) is built in without a word: the header now says so;
- a skip connection after pooling and upsampling with dynamic height and width cannot be proved to fit:
  the error now says why and what to do.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402
from ksbuild.frontends.onnx import compile_onnx_kernel  # noqa: E402
from ksbuild.packaging.runtime import CallError  # noqa: E402

F = torch.nn.functional


class Clamps(torch.nn.Module):
    def forward(self, x):
        return torch.clamp(x, -1.0, 1.0), F.relu6(x), F.hardtanh(x, -0.5, 0.5)


class TiesAndKinks(torch.nn.Module):
    def forward(self, a, b):
        return torch.maximum(a, b), torch.minimum(a, b), F.leaky_relu(a, 0.1)


def _export(module, args, path, names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=names[0], output_names=names[1],
                          dynamic_axes={n: {0: "n"} for n in names[0] + names[1]})


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    root = tmp_path_factory.mktemp("values")
    _export(Clamps(), (torch.zeros(4),), root / "clamps.onnx", (["x"], ["c", "r6", "ht"]))
    _export(TiesAndKinks(), (torch.zeros(3), torch.zeros(3)), root / "ties.onnx", (["a", "b"], ["mx", "mn", "lr"]))
    (root / "manifest.toml").write_text(
        '[package]\nname = "rt_values"\n\n[kernels]\nclamps = { onnx = "clamps.onnx" }\n'
        'ties = { onnx = "ties.onnx" }\n\n'
        '[exports]\nclamps = "clamps"\nclamps_vjp = "vjp(clamps)"\nties_vjp = "vjp(ties)"\n')
    return ksbuild.build(root / "manifest.toml", quiet=True), root


def test_clip_keeps_nan(pkg):
    p, root = pkg
    x = np.float32([np.nan, 0.5, 3.0, -7.0, 1.0, -1.0])
    want = ort.InferenceSession(str(root / "clamps.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for got, w, t in zip(p.clamps(x), want, Clamps()(torch.tensor(x))):
        np.testing.assert_array_equal(got, w)
        np.testing.assert_array_equal(got, t.numpy())


def test_clip_derivative_at_its_bounds_is_torch_clamps(pkg):
    """One Clip node stands for clamp, relu6 and hardtanh; its derivative at a bound is clamp's (1)."""
    p, _ = pkg
    x = np.float32([-1.0, 1.0, 0.0, 6.0, 0.5, 2.0])
    ones = np.ones_like(x)
    xt = torch.tensor(x, requires_grad=True)
    torch.clamp(xt, -1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(p.clamps_vjp(x, ones, 0 * ones, 0 * ones), xt.grad.numpy())


def test_max_min_at_a_tie_and_leaky_relu_at_zero_match_torch(pkg):
    p, _ = pkg
    a, b = np.float32([1.0, 0.0, 2.0]), np.float32([1.0, 0.5, -1.0])
    for k in range(3):
        cts = [np.zeros(3, np.float32) for _ in range(3)]
        cts[k][:] = 1
        at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        sum(o * torch.tensor(c) for o, c in zip(TiesAndKinks()(at, bt), cts)).sum().backward()
        da, db = p.ties_vjp(a, b, *cts)
        np.testing.assert_array_equal(da, at.grad.numpy())
        np.testing.assert_array_equal(db, bt.grad.numpy())


def _model(nodes, inputs, outputs, inits=()):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


X = h.make_tensor_value_info("x", T.FLOAT, ["b", 3])
Y = h.make_tensor_value_info("y", T.FLOAT, ["b", 3])


@pytest.mark.parametrize("nodes, culprit", [
    ([h.make_node("Relu", ["x"], ["y"], name="a"), h.make_node("Neg", ["x"], ["y"], name="b")], "node b (Neg)"),
    ([h.make_node("Neg", ["x"], ["x"], name="shadow"), h.make_node("Relu", ["x"], ["y"], name="r")],
     "node shadow (Neg)"),
])
def test_a_value_defined_twice_is_a_located_error(tmp_path, nodes, culprit):
    onnx.save(_model(nodes, [X], [Y]), str(tmp_path / "twice.onnx"))
    with pytest.raises(KsbuildError, match=rf"twice\.onnx: {re.escape(culprit)}.*is already defined"):
        compile_onnx_kernel(tmp_path / "twice.onnx", "twice")


def test_an_input_with_a_default_is_built_in_and_the_header_says_so(tmp_path):
    m = _model([h.make_node("Mul", ["x", "scale"], ["y"])], [X, h.make_tensor_value_info("scale", T.FLOAT, [3])],
               [Y], [nh.from_array(np.float32([1, 2, 3]), "scale")])
    onnx.save(m, str(tmp_path / "m.onnx"))
    f = compile_onnx_kernel(tmp_path / "m.onnx", "m")
    assert [p.type.shape for p in f.params] == [("b", 3)]
    assert any("'scale' has a default value" in n and 'weights = "external"' in n for n in f.notes)


def test_a_skip_connection_with_dynamic_sizes_says_why_it_cannot_be_built(tmp_path):
    class Skip(torch.nn.Module):
        def forward(self, x):
            y = F.interpolate(F.max_pool2d(x, 2), scale_factor=2.0, mode="nearest")
            return torch.cat([y, x], 1)
    _export(Skip(), (torch.zeros(1, 2, 4, 6),), tmp_path / "skip.onnx", (["x"], ["y"]))
    m = onnx.load(str(tmp_path / "skip.onnx"))
    for d, name in ((2, "h"), (3, "w")):
        m.graph.input[0].type.tensor_type.shape.dim[d].dim_param = name
    onnx.save(m, str(tmp_path / "skip.onnx"))
    with pytest.raises(KsbuildError) as e:
        compile_onnx_kernel(tmp_path / "skip.onnx", "skip")
    assert "cannot concatenate" in str(e.value) and "give those dims fixed sizes" in str(e.value)


@pytest.mark.parametrize("scale", [2.0, 3.0, 0.5, 1.5, 0.75])
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "floor", "ceil"])
def test_resize_11_tf_half_pixel_for_nn_matches_onnxruntime(tmp_path, scale, nearest):
    """A coordinate mode of Resize-11 that TensorFlow converters write (it was refused)."""
    from ksbuild.ir.interp import eval_func
    n_out = int(np.floor(6 * scale))
    m = h.make_model(h.make_graph(
        [h.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="nearest", nearest_mode=nearest,
                     coordinate_transformation_mode="tf_half_pixel_for_nn")], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 6, 6])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 1, n_out, n_out])],
        [nh.from_array(np.float32([]), "roi"), nh.from_array(np.float32([1, 1, scale, scale]), "sc")]),
        opset_imports=[h.make_opsetid("", 11)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "r.onnx"))
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    want = ort.InferenceSession(str(tmp_path / "r.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = eval_func(compile_onnx_kernel(tmp_path / "r.onnx", "r"), [x])
    np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want)


class UNetSkip(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = torch.nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(F.max_pool2d(torch.relu(self.c(x)), 2), scale_factor=2.0, mode="nearest")
        return torch.cat([y, x], 1)


def test_dim_expressions_of_torch_export_make_a_unet_skip_work_at_any_even_size(tmp_path):
    """torch.export writes a size it knows to be even as the dim_param '2*hh'; it was an opaque name, so the
    pooled-and-upsampled skip connection could not be proved to fit. Now it is the expression 2*hh: the C
    function takes hh, the Python call infers it from the shape, and an odd size is a CallError."""
    from torch.export import Dim
    hh, ww = Dim("hh", min=1, max=64), Dim("ww", min=1, max=64)
    model = UNetSkip().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 2, 4, 6),), str(tmp_path / "u.onnx"), dynamo=True,
                          input_names=["x"], output_names=["y"], dynamic_shapes={"x": {2: 2 * hh, 3: 2 * ww}})
    shape = onnx.load(str(tmp_path / "u.onnx")).graph.input[0].type.tensor_type.shape
    dims = [d.dim_param or d.dim_value for d in shape.dim]
    assert dims[2:] == ["2*hh", "2*ww"]
    (tmp_path / "manifest.toml").write_text('[package]\nname = "unet_skip"\n[kernels]\nu = { onnx = "u.onnx" }\n'
                                            '[exports]\nu = "u"\nu_vjp = "vjp(u)"\n')
    p = ksbuild.build(tmp_path / "manifest.toml", quiet=True)
    sess = ort.InferenceSession(str(tmp_path / "u.onnx"), providers=["CPUExecutionProvider"])
    for hw in ((4, 10), (8, 2), (6, 6)):
        x = np.random.default_rng(hw[0]).normal(size=(1, 2, *hw)).astype(np.float32)
        np.testing.assert_allclose(p.u(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
        ct = np.random.default_rng(1).normal(size=(1, 4, *hw)).astype(np.float32)
        xt = torch.tensor(x, requires_grad=True)
        (model(xt) * torch.tensor(ct)).sum().backward()
        np.testing.assert_allclose(p.u_vjp(x, ct), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    header = (p.root / "include/unet_skip.h").read_text()
    assert "int unet_skip_u(int64_t hh, int64_t ww, const float* x, float* out, void* workspace);" in header
    with pytest.raises(CallError, match=r"argument 'x' must have a size of the form 2\*hh along axis 2"):
        p.u(np.zeros((1, 2, 5, 6), np.float32))


@pytest.mark.parametrize("domain", ["com.microsoft", ""])
def test_quick_gelu_is_an_op_of_com_microsoft_only(tmp_path, domain):
    """A handler belongs to its domain: com.microsoft QuickGelu matches onnxruntime; the same op type in the ONNX
    domain is an unknown op, located at its node."""
    from ksbuild.ir.interp import eval_func
    m = h.make_model(h.make_graph([h.make_node("QuickGelu", ["x"], ["y"], domain=domain, alpha=1.5, name="qg")],
                                  "g", [X], [Y]),
                     opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "q.onnx"))
    if not domain:
        with pytest.raises(KsbuildError, match=r"q\.onnx: node qg \(QuickGelu\).*unknown op QuickGelu"):
            compile_onnx_kernel(tmp_path / "q.onnx", "q")
        return
    x = np.linspace(-4, 4, 12, dtype=np.float32).reshape(4, 3)
    want = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = eval_func(compile_onnx_kernel(tmp_path / "q.onnx", "q"), [x])
    np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-6, atol=1e-7)
