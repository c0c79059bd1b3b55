"""Torch models a user would export with torch.onnx.export(dynamo=False) and dynamic axes, that once
failed in ksbuild's ONNX frontend; each compiled and checked against onnxruntime (values, at several
sizes of the dynamic axes) and torch.autograd (vjp of the inputs).

- torch.arange(x.shape[1]) (Range to a symbolic dim) crashed with a Python TypeError;
- nn.MultiheadAttention with a dynamic batch: a Reshape to [batch, heads, -1, d] of [heads*batch, ...]
  could not infer the -1;
- x * x.shape[1] (Cast of a shape to float) was rejected;
- torch.flip along a dynamic axis (Slice with a negative step on a symbolic dim) was rejected;
- torch.sort along a dynamic axis (TopK with k = that axis' size) was rejected;
- F.interpolate with dynamic height and width, or to size=t.shape[-2:], or to a fixed size with a dynamic
  batch (Resize with symbolic sizes) was rejected;
- a Reshape whose target holds a traced size where the axis is dynamic (MultiheadAttention with a
  dynamic sequence length) gave wrong results for other lengths: now a located error;
- torch.arange(0, x.numel(), x.shape[1]) with a dynamic batch (ReduceProd of a shape, a Range whose step is
  not 1) was rejected;
- F.interpolate(scale_factor=1.5, align_corners=True) gave wrong values (up to 0.9 off): the coordinates
  divided by n · scale, as onnx.reference does, instead of the output's length, as onnxruntime and torch do;
- bicubic F.interpolate with a dynamic batch was rejected (the batch counted as a resized axis);
- scatter_add with a dynamic batch (a Slice whose ends are Shape(index)) was rejected;
- max_pool2d(return_indices=True) and max_unpool2d with a dynamic batch were rejected.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import DEBUG

onnx = pytest.importorskip("onnx", reason="the onnx package is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")

import ksbuild  # noqa: E402
from ksbuild.errors import KsbuildError  # noqa: E402

F = torch.nn.functional


class PosEmb(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(12, 4)

    def forward(self, x):  # [batch, seq, 4]
        return torch.tanh(x + self.pos(torch.arange(x.shape[1]))[None])


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):  # [batch, 3, 8]
        return self.a(x, x, x, need_weights=False)[0]


class ShapeAsNumber(torch.nn.Module):
    def forward(self, x):  # [batch, seq]
        return x * x.shape[1] + x.new_zeros(x.shape[0], 1)


class RevCumsum(torch.nn.Module):
    def forward(self, x):  # [batch, seq]
        return torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])


class Sort(torch.nn.Module):
    def forward(self, x):  # [batch, seq]
        values, indices = torch.sort(x, dim=1, descending=True)
        return values * 2.0, indices


class Upsample(torch.nn.Module):
    def forward(self, x):  # [batch, 2, h, w]
        a = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        b = F.interpolate(x, scale_factor=2, mode="nearest")
        return a, b, F.interpolate(x, scale_factor=3, mode="bilinear", align_corners=True)


class UpToSkip(torch.nn.Module):
    def forward(self, x):  # [batch, 2, h, w]
        d = F.avg_pool2d(x, 2)
        return x + F.interpolate(d, size=x.shape[-2:], mode="nearest"), F.interpolate(x, size=(5, 7), mode="bilinear")


class RowStarts(torch.nn.Module):
    def forward(self, x):  # [batch, seq]: x.numel() is ReduceProd(Shape(x)), a Range with a step of seq
        starts = torch.arange(0, x.numel(), x.shape[1])
        return x.reshape(-1)[starts] * 2.0 + x.reshape(-1)[starts + 1]


class FractionalResize(torch.nn.Module):
    def forward(self, x):  # [batch, 2, 5, 6]
        return (F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=(2.5, 1.0), mode="bilinear", align_corners=True),
                F.interpolate(x, size=(8, 9), mode="bicubic", align_corners=False),
                F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=True))


class ScatterAdd(torch.nn.Module):
    def forward(self, x):  # [batch, 6]: index computed from the input, so the export has one input
        idx = (x[:, :4].abs() * 100).long() % 6
        return torch.zeros_like(x).scatter_add(1, idx, x[:, 2:] * 3.0)


class Unpool(torch.nn.Module):
    def forward(self, x):  # [batch, 2, 6, 8]
        p, i = F.max_pool2d(x, 2, stride=2, return_indices=True)
        return F.max_unpool2d(p * 2.0, i, 2, stride=2), p


DYN = {"bs": {0: "batch", 1: "seq"}, "b": {0: "batch"}, "bhw": {0: "batch", 2: "h", 3: "w"}}
MODELS = {  # name: (module, input shape at export, dynamic axes, other input shapes to run)
    "pos_emb": (PosEmb, (2, 5, 4), "bs", [(3, 7, 4), (1, 2, 4)]),
    "attn": (Attn, (2, 3, 8), "b", [(1, 3, 8), (4, 3, 8)]),
    "shape_number": (ShapeAsNumber, (2, 5), "bs", [(3, 8)]),
    "rev_cumsum": (RevCumsum, (2, 5), "bs", [(3, 2)]),
    "sort": (Sort, (2, 5), "bs", [(3, 9), (1, 1)]),
    "upsample": (Upsample, (2, 2, 4, 6), "bhw", [(1, 2, 5, 3), (3, 2, 1, 2)]),
    "up_to_skip": (UpToSkip, (2, 2, 6, 4), "bhw", [(1, 2, 8, 10), (3, 2, 5, 7)]),
    "row_starts": (RowStarts, (2, 5), "bs", [(3, 7), (1, 2)]),
    "fractional_resize": (FractionalResize, (2, 2, 5, 6), "b", [(3, 2, 5, 6), (1, 2, 5, 6)]),
    "scatter_add": (ScatterAdd, (2, 6), "b", [(3, 6), (1, 6)]),
    "unpool": (Unpool, (2, 2, 6, 8), "b", [(3, 2, 6, 8)]),
}
VJP = ("pos_emb", "attn", "rev_cumsum", "sort", "upsample", "up_to_skip", "row_starts", "fractional_resize",
       "scatter_add", "unpool")


DYNAMO = ("unpool",)  # exported with dynamo=True (TorchScript's tracer cannot export max_unpool2d)


def _export(m, x, path, dyn, n_out, dynamo=False):
    outs = [f"y{i}" for i in range(n_out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            assert dyn == "b"
            torch.onnx.export(m, (x,), str(path), dynamo=True, input_names=["x"], output_names=outs,
                              external_data=False, dynamic_shapes=({0: torch.export.Dim("batch")},))
            return
        axes = {"x": DYN[dyn], **{o: {0: "batch"} for o in outs}}
        torch.onnx.export(m, (x,), str(path), dynamo=False, input_names=["x"], output_names=outs, dynamic_axes=axes)


def _outs(y):
    return y if isinstance(y, tuple) else (y,)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every model exported with its dynamic axes into one package: the model and the vjp of some."""
    d = tmp_path_factory.mktemp("onnx_torch_exports")
    torch.manual_seed(0)
    modules = {}
    for name, (cls, shape, dyn, _) in MODELS.items():
        m = modules[name] = cls().eval()
        x = torch.randn(shape)
        _export(m, x, d / f"{name}.onnx", dyn, len(_outs(m(x))), name in DYNAMO)
    kernels = "".join(f'[kernels.{n}]\nonnx = "{n}.onnx"\n\n' for n in MODELS)
    exports = "".join(f'{n} = "{n}"\n' for n in MODELS) + "".join(f'{n}_vjp = "vjp({n})"\n' for n in VJP)
    (d / "manifest.toml").write_text(f'[package]\nname = "onnx_torch_exports"\n\n{kernels}[exports]\n{exports}')
    return ksbuild.build(d / "manifest.toml", optimize=DEBUG), modules, d


@pytest.mark.parametrize("name", MODELS)
def test_values_match_onnxruntime_for_every_size(built, name):
    pkg, _, d = built
    sess = ort.InferenceSession(str(d / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for shape in [MODELS[name][1]] + MODELS[name][3]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = sess.run(None, {"x": x})
        got = _outs(getattr(pkg, name)(x))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (shape, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at {shape}")


@pytest.mark.parametrize("name", VJP)
def test_vjp_matches_torch_autograd(built, name):
    pkg, modules, _ = built
    m = modules[name]
    rng = np.random.default_rng(2)
    for shape in [MODELS[name][1]] + MODELS[name][3][:1]:
        x = rng.standard_normal(shape).astype(np.float32)
        xt = torch.tensor(x, requires_grad=True)
        ys = _outs(m(xt))
        cts = [rng.standard_normal(tuple(y.shape)).astype(np.float32) for y in ys if y.dtype.is_floating_point]
        sum((y * torch.tensor(c)).sum() for y, c in zip([y for y in ys if y.dtype.is_floating_point], cts)).backward()
        got = getattr(pkg, f"{name}_vjp")(x, *cts)
        np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{name} at {shape}")


def test_a_traced_size_in_a_reshape_of_a_dynamic_axis_is_a_located_error(tmp_path):
    """TorchScript's export of MultiheadAttention bakes the traced sequence length into a Reshape target;
    onnxruntime fails on other lengths, ksbuild used to compute garbage for them: now it refuses the model."""
    m = Attn().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.randn(2, 3, 8),), str(tmp_path / "attn.onnx"), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    sess = ort.InferenceSession(str(tmp_path / "attn.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception):  # the oracle agrees the model only holds for the traced length
        sess.run(None, {"x": np.zeros((2, 5, 8), np.float32)})
    (tmp_path / "manifest.toml").write_text('[package]\nname = "baked"\n[kernels.m]\nonnx = "attn.onnx"\n'
                                            '[exports]\nm = "m"\n')
    with pytest.raises(KsbuildError) as e:
        ksbuild.build(tmp_path / "manifest.toml")
    text = str(e.value)
    assert "attn.onnx" in text and "(Reshape)" in text and "seq" in text, text
