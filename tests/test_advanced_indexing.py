"""Several integer tensors in one index pick together, elementwise (torch's and numpy's advanced indexing):
x[torch.arange(n), labels] is [n], one element per row, not the [n, n] of every pair (a held-out kernel's
cross-entropy got a wrong mean that way, silently). Values and vjps against torch; an index out of its own
axis is clamped into it, as one gather's, not read at another row; indices apart from one another refuse."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import build_kernel_file

import ksbuild

KERNELS = '''import torch
import torch.nn.functional as F


def pick(x: "float[n, c]", labels: "i64[n]") -> "float[n]":
    return x[torch.arange(x.shape[0]), labels]


def xent(logits: "float[n, c]", labels: "i64[n]") -> float:
    return -F.log_softmax(logits, dim=1)[torch.arange(logits.shape[0]), labels].mean()


def grid(x: "float[a, b, d]", i: "i64[m, 1]", j: "i32[k]") -> "float[m, k, d]":
    return x[i, j]


def middle(x: "float[a, b, c, d]", i: "i64[m]", j: "i64[m]") -> "float[a, m, d]":
    return x[:, i, j] * 2.0


def mixed(x: "float[a, b, c]", i: "i64[m]", j: "i64[m]") -> "float[m]":
    return x[i, j, 1]
'''

MANIFEST = '''[package]
name = "advidx"
[kernels]
pick = { python = "k.py:pick" }
xent = { python = "k.py:xent" }
grid = { python = "k.py:grid" }
middle = { python = "k.py:middle" }
mixed = { python = "k.py:mixed" }
[exports]
pick = "pick"
pick_vjp = "vjp(pick)"
xent = "xent"
xent_grad = "grad(xent)"
grid = "grid"
grid_vjp = "vjp(grid)"
middle = "middle"
middle_vjp = "vjp(middle)"
mixed = "mixed"
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_kernel_file(tmp_path_factory.mktemp("advidx"), KERNELS, MANIFEST, "advidx_kernels")


def _t(a):
    return torch.tensor(a)


def _vjp_torch(f, args, ct):
    x = _t(args[0]).requires_grad_()
    out = f(x, *map(_t, args[1:]))
    (g,) = torch.autograd.grad(out, x, _t(ct))
    return g.numpy()


CASES = {  # kernel: arguments (x first; negative indices wrap)
    "pick": lambda r: [r.standard_normal((5, 4), dtype=np.float32), np.array([3, 0, -1, 2, 0])],
    "grid": lambda r: [r.standard_normal((4, 3, 2), dtype=np.float32), np.array([[0], [3], [-2]]),
                       np.array([2, 0, 1, 1], dtype=np.int32)],
    "middle": lambda r: [r.standard_normal((2, 3, 4, 5), dtype=np.float32), np.array([2, 0, 2]), np.array([1, 3, -4])],
    "mixed": lambda r: [r.standard_normal((3, 4, 2), dtype=np.float32), np.array([0, 2, 2]), np.array([3, 1, 3])],
}


@pytest.mark.parametrize("name", list(CASES))
def test_values_match_torch(built, name):
    pkg, source = built
    args = CASES[name](np.random.default_rng(0))
    want = getattr(source, name)(*map(_t, args)).numpy()
    got = getattr(pkg, name)(*args)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("name", ["pick", "grid", "middle"])
def test_vjp_matches_torch_autograd(built, name):
    """Picked twice (repeated indices) adds both cotangents into the element."""
    pkg, source = built
    rng = np.random.default_rng(1)
    args = CASES[name](rng)
    ct = rng.standard_normal(getattr(pkg, name)(*args).shape).astype(np.float32)
    np.testing.assert_allclose(getattr(pkg, f"{name}_vjp")(*args, ct), _vjp_torch(getattr(source, name), args, ct),
                               rtol=1e-5, atol=1e-6)


def test_cross_entropy_and_its_gradient_match_torch(built):
    pkg, source = built
    rng = np.random.default_rng(2)
    logits, labels = rng.standard_normal((6, 5), dtype=np.float32), np.array([4, 0, 2, 2, 1, 3])
    np.testing.assert_allclose(pkg.xent(logits, labels), float(source.xent(_t(logits), _t(labels))), rtol=1e-6)
    want = _vjp_torch(source.xent, [logits, labels], np.float32(1.0))
    np.testing.assert_allclose(pkg.xent_grad(logits, labels), want, rtol=1e-5, atol=1e-7)


def test_an_index_out_of_its_axis_is_clamped_into_it(built):
    """As one gather's (README: computed indices are clamped, as in JAX): [1, 4] in a [5, 4] x reads x[1, 3],
    not the flat position 8 (x[2, 0]); an empty axis is status 1, as for one index tensor."""
    pkg, _ = built
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    want = [x[0, 0], x[1, 3], x[2, 3], x[3, 0], x[4, 2]]
    np.testing.assert_array_equal(pkg.pick(x, np.array([0, 4, 9, -9, 2])), want)
    with pytest.raises(pkg.pick.CallError, match="status 1"):
        pkg.pick(np.zeros((2, 0), dtype=np.float32), np.zeros(2, dtype=np.int64))


def test_index_tensors_apart_are_refused_at_their_line(tmp_path):
    (tmp_path / "k.py").write_text('def f(x: "float[a, b, c]", i: "i64[m]", j: "i64[m]") -> "float[m, b]":\n'
                                   '    return x[i, :, j]\n')
    (tmp_path / "manifest.toml").write_text('[package]\nname = "apart"\n[kernels]\nf = { python = "k.py:f" }\n'
                                            '[exports]\nf = "f"\n')
    with pytest.raises(ksbuild.KsbuildError, match=r"k.py:2:\d+: .*index tensors with other indices between them"):
        ksbuild.build(tmp_path / "manifest.toml")


MODULE = '''import torch
from torch.export import Dim


class Pick(torch.nn.Module):
    def forward(self, x, labels):
        return x[torch.arange(x.shape[0]), labels] * 2.0


def make():
    return Pick(), (torch.randn(4, 5), torch.tensor([0, 4, 2, 1])), ({0: Dim("n")}, {0: Dim("n")})
'''


def test_torch_export_picks_elementwise_too(tmp_path):
    """aten.index.Tensor with two index tensors (torch.export's x[arange, labels]) takes the same op, clamps too."""
    (tmp_path / "model.py").write_text(MODULE)
    (tmp_path / "manifest.toml").write_text('[package]\nname = "advidx_export"\n[kernels]\n'
                                            'pick = { torch = "model.py:make" }\n[exports]\npick = "pick"\n'
                                            'pick_vjp = "vjp(pick)"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    x, labels = np.random.default_rng(3).standard_normal((6, 5), dtype=np.float32), np.array([4, 0, -1, 2, 3, 7])
    np.testing.assert_allclose(pkg.pick(x, labels), 2 * x[np.arange(6), np.minimum(labels, 4)], rtol=1e-6)
    ct = np.arange(6, dtype=np.float32)
    want = np.zeros_like(x)
    np.add.at(want, (np.arange(6), np.minimum(labels, 4)), 2 * ct)
    np.testing.assert_allclose(pkg.pick_vjp(x, labels, ct), want, rtol=1e-6)


def test_onnx_gather_nd_clamps_each_index_into_its_axis(tmp_path):
    """GatherND's index columns go through one flat position as well: in range it is onnxruntime's value, out
    of range each column is clamped into its own axis ([1, 4] of a [5, 4] x reads x[1, 3], not x[2, 0])."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("GatherND", ["x", "i"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "gathernd"\n[kernels]\nm = { onnx = "m.onnx" }\n'
                                            '[exports]\nm = "m"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    x, i = np.arange(20, dtype=np.float32).reshape(5, 4), np.array([[1, 2], [4, -1], [0, 3]])
    want = onnxruntime.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x, "i": i})[0]
    np.testing.assert_array_equal(pkg.m(x, i), want)
    np.testing.assert_array_equal(pkg.m(x, np.array([[1, 4], [9, 0], [0, -9]])), [x[1, 3], x[4, 0], x[0, 0]])
