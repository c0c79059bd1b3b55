"""Loop nests at optimize = "size" on a Cortex-M4 (transforms/dot_convs.py, prims/conv_loops.py; issue 36 item 3): a
network of few distinct float convolutions computes each as a loop nest over its literal sizes (the layers of the same
sizes sharing one helper function), and a network without convolutions or recurrent loops its products of several
rows. Each network is packaged for cortex-m4 at size, linked into benchmarks/cortex_m4's program and run on QEMU's
mps2-an386 board; its outputs against onnxruntime's, and the program links none of the kernel layer's dot kernels.

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (scripts/install.sh, as root); skips naming what is
missing."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks/cortex_m4"))
import firmware  # noqa: E402


def _odd_convs():
    """1-d convolutions of every geometry the nests handle: groups (not depthwise), a stride, a dilation, a tanh
    epilogue (not a bias and bounds: a lambda the nest calls), a pointwise one, and a Pad at one end before the last
    (a pad of its own, not the convolution's: _one_sided has those)."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)
            self.b = nn.Conv1d(6, 5, 1)
            self.c = nn.Conv1d(5, 3, 2)

        def forward(self, x):
            y = torch.tanh(self.a(x))
            y = self.b(y)
            return self.c(nn.functional.pad(y, (0, 1)))
    torch.manual_seed(0)
    return Net(), (1, 4, 11)


def _one_sided(path):
    """An ONNX graph (torch pads both ends alike) of convolutions padded at one end only, each a nest's unsigned
    compare on one side: 1-d with pads [0, 2] (end) then [1, 0] (begin), a ReLU between; written to path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)

    def weights(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[0, 2], kernel_shape=[3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 0], kernel_shape=[2], strides=[2])]
    graph = helper.make_graph(nodes, "one_sided", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5])],
                              [weights("w1", 4, 3, 3), weights("b1", 4), weights("w2", 2, 4, 2), weights("b2", 2)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return (1, 3, 9)


# The kernel layer's dot kernels none of these programs links (their nests are in the generated code).
DOT_KERNELS = ("conv_dots<", "gathered_dots<", "gather_window<", "panel_dots<", "dot_rows<", "dot4<", "block_epilogue<")


@pytest.mark.parametrize("name", ["kws", "transformer", "odd_convs", "one_sided"])
def test_size_builds_of_few_layers_are_loop_nests_and_agree_with_onnxruntime(tmp_path, name):
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    from networks import export, models
    if name == "one_sided":
        shape = _one_sided(tmp_path / f"{name}.onnx")
    else:
        module, shape = _odd_convs() if name == "odd_convs" else models()[name]
        export(module, shape, tmp_path / f"{name}.onnx")
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0].ravel()
    tree = firmware.ksbuild_package(name, tmp_path / f"{name}.onnx", tmp_path / "ks", "size")
    run = firmware.ksbuild_app(tree, name, (x.size, want.size), tmp_path / "app")
    np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    names = subprocess.run(["arm-none-eabi-nm", "-C", str(run.elf)], capture_output=True, text=True,
                           check=True).stdout
    assert not [k for k in DOT_KERNELS if k in names], [line for line in names.splitlines() if "ks_kernels" in line]
    assert run.stack <= max(64, firmware.ksbuild_stack(tree, name)) + MEMSET_FRAME, run.stack


# newlib's memset pushes 12 B, which the build's stack figure counts as 0 (compile/footprint.py: calls into the C
# library); a product's nest that adds into its result zeroes it first, a loop GCC makes a call of memset.
MEMSET_FRAME = 12


def _one_conv(path, activation: str):
    """An ONNX graph of one 1-d convolution (padded) of a symbolic batch N, then `activation` (Relu: the nest's
    helper with the batch as its parameter; Tanh: the nest in place, its epilogue a lambda); written to path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.3, "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], kernel_shape=[3]),
             helper.make_node(activation, ["c"], ["y"])]
    graph = helper.make_graph(nodes, "one_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 9])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path, (2, 3, 9)


@pytest.mark.parametrize("name", ["cnn", "Relu", "Tanh"])
def test_a_size_build_of_a_symbolic_batch_is_loop_nests_and_agrees_with_onnxruntime(tmp_path, name):
    """examples/onnx_cnn's cnn.onnx, whose batch is symbolic, at size: its convolutions and classifier are loop nests
    too (their sizes but the batch literal: dot_convs.py; per_row runs them image by image), none of ks::conv_dots's
    code linked; and one convolution alone, whose nest loops over the batch as a run-time bound. Two images on QEMU
    against onnxruntime's."""
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    onnx_file, shape = (ROOT / "examples/onnx_cnn/cnn.onnx", (2, 3, 16, 16)) if name == "cnn" else \
        _one_conv(tmp_path / "one_conv.onnx", name)
    x = firmware.input_for(shape)
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    want = session.run(None, {session.get_inputs()[0].name: x})[0].ravel()
    tree = firmware.ksbuild_package("net", onnx_file, tmp_path / "ks", "size")
    call = ("#include <m4bench.h>\n#define WORKSPACE_NEEDED() m4bench_net_workspace_size(2)\n"
            "static unsigned char workspace[65536] __attribute__((aligned(16)));\n"
            "#define RUN(x, y) m4bench_net(2, (x), (y), workspace)\n")
    run = firmware._program(tmp_path / "app", call, (x.size, want.size), ["-I", str(tree / "include")],
                            [str(tree / "lib/libm4bench.a")])
    assert run.workspace <= 65536
    np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    names = subprocess.run(["arm-none-eabi-nm", "-C", str(run.elf)], capture_output=True, text=True,
                           check=True).stdout
    assert not [k for k in DOT_KERNELS if k in names], [line for line in names.splitlines() if "ks_kernels" in line]


def _many_convs():
    """More distinct convolutions (kernel sizes 1 to 13, a ReLU between) than transforms/dot_convs.py makes loop
    nests of (LOOP_GEOMETRIES 12): ks::conv_dots at size, its literal geometries in 8 bits a size."""
    import torch
    from torch import nn
    torch.manual_seed(1)
    layers = []
    for k in range(1, 14):
        layers += [nn.Conv1d(2, 2, k, padding=k // 2), nn.ReLU()]
    return nn.Sequential(*layers[:-1]), (1, 2, 24)


def test_a_size_build_of_many_distinct_convolutions_is_conv_dots_and_agrees_with_onnxruntime(tmp_path):
    """_many_convs at size on QEMU: ks::conv_dots and its 8-bit geometry's overload (conv_dots<float, unsigned
    char>), no nest; the outputs onnxruntime's."""
    if firmware.missing_tools():
        pytest.skip(f"not on PATH: {', '.join(firmware.missing_tools())} (scripts/install.sh installs them, as root)")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    run, want = firmware.ksbuild_run("many", _many_convs(), tmp_path, "size")
    np.testing.assert_allclose(run.outputs, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    names = subprocess.run(["arm-none-eabi-nm", "-C", str(run.elf)], capture_output=True, text=True,
                           check=True).stdout
    assert "conv_dots<float, unsigned char>" in names and "conv_loops" not in names, names
