"""[build] threads = N: the parallelize pass marks batch loop nests, the C++ runs their outer
loop on ks/pool.h's threads, and the results equal the single-threaded build's (and the interpreter's)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT

import ksbuild
from ksbuild.errors import KsbuildError
from ksbuild.exports import build_exports
from ksbuild.ir.printer import print_func
from ksbuild.manifest import load_manifest

KERNEL = '''import torch


def scores(x: "float[n, d]", w: "float[d, k]") -> "float[n]":
    h = torch.tanh(x @ w)
    return torch.logsumexp(h * h, 1)
'''


def _manifest(tmp_path, threads: int):
    folder = tmp_path / f"t{threads}"
    folder.mkdir()
    (folder / "k.py").write_text(KERNEL)
    (folder / "relu3.py").write_text((ROOT / "examples/relu3/relu3.py").read_text())
    (folder / "manifest.toml").write_text(f'''[package]
name = "par{threads}"
[build]
dtype = "float64"
threads = {threads}
[kernels.scores]
python = "k.py:scores"
[kernels.relu3]
python = "relu3.py:relu3"
[exports]
scores = "scores"
scores_vjp = "vjp(scores)"
vrelu3 = "vmap(relu3)"
vrelu3_vjp = "vjp(vmap(relu3))"
''')
    return folder / "manifest.toml"


def test_parallel_build_matches_the_sequential_one(tmp_path):
    one, four = ksbuild.build(_manifest(tmp_path, 0)), ksbuild.build(_manifest(tmp_path, 4))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((300, 5)), rng.standard_normal((5, 7))
    np.testing.assert_allclose(four.scores(x, w), one.scores(x, w), rtol=1e-13)
    ct = rng.standard_normal(300)
    for a, b in zip(four.scores_vjp(x, w, ct), one.scores_vjp(x, w, ct)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    t = np.linspace(-2, 2, 1001)
    np.testing.assert_allclose(four.vrelu3(t), one.vrelu3(t), rtol=0)
    source = next((four.root / "share").glob("*/src/*.cpp")).read_text()
    assert "ks::pool::run(4, " in source


def test_the_pass_marks_only_top_level_nests(tmp_path):
    exports = {e.name: e.func for e in build_exports(load_manifest(_manifest(tmp_path, 4)))}
    text = print_func(exports["scores"])
    assert "threads=4" in text
    seq = {e.name: e.func for e in build_exports(load_manifest(_manifest(tmp_path, 0)))}
    assert "threads=" not in print_func(seq["scores"])


def test_threads_is_checked(tmp_path):
    path = _manifest(tmp_path, 2)
    path.write_text(path.read_text().replace("threads = 2", 'threads = "many"'))
    with pytest.raises(KsbuildError, match="'threads' in \\[build\\] must be an integer") as info:
        load_manifest(path)
    assert info.value.loc.line == 5


def _cnn_onnx(path):
    """A small MobileNet-like network as ONNX with a symbolic batch: a strided convolution with Hardswish, a
    depthwise one, a squeeze-excite block, a pointwise one, global average pooling and a linear layer."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish())
            self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.ReLU())
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1), nn.ReLU(), nn.Conv2d(8, 16, 1),
                                    nn.Hardsigmoid())
            self.pw = nn.Sequential(nn.Conv2d(16, 24, 1), nn.SiLU())
            self.head = nn.Linear(24, 10)

        def forward(self, x):
            h = self.dw(self.stem(x))
            h = self.pw(h * self.se(h))
            return self.head(h.mean((2, 3)))
    torch.onnx.export(Net().eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_a_cnn_on_two_threads_matches_onnxruntime(tmp_path):
    """threads = 2 on a network from ONNX (convolutions, depthwise, squeeze-excite, hardswish): the same outputs as
    onnxruntime's at batch 1 and 5, and the generated C++ runs loops on the threads."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _cnn_onnx(tmp_path / "cnn.onnx")
    (tmp_path / "manifest.toml").write_text('[package]\nname = "cnn2"\n\n[build]\nthreads = 2\n\n'
                                            '[kernels.net]\nonnx = "cnn.onnx"\n\n[exports]\nnet = "net"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    sess = ort.InferenceSession(str(tmp_path / "cnn.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        np.testing.assert_allclose(pkg.net(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    source = "".join(p.read_text() for p in (pkg.root / "share").glob("*/src/*.cpp"))
    # (a loop nest splits over its batch and channels when it has 2^15 elements, in N to 4N parts (ks::parts::split,
    # as if an element were 16 multiply-adds), else one part, on the calling thread)
    split = r"const int parts\d* = (batch \* [\d *]+) >= 32768 \? ks::parts::split\(2, batch \* \d+, \1 \* 16\) : 1;"
    assert re.search(split, source)
    assert re.search(r"const int64_t (\w+) = (flat\d*) / \(\d+\);\n\s*\{\n\s*const int64_t \w+ = \2 % \(\d+\);", source)


def _odd_cnn_onnx(path):
    """A CNN of odd channel counts with every kernel ks/parts.h splits: a strided convolution (ks::conv, panels) with
    BatchNorm and ReLU6, a Winograd one (49 x 49 channels) with a residual add (a per-image operand of its epilogue),
    a 5 x 5 depthwise one, a grouped strided one (7 groups of 7 -> 5 channels, 8 x 8 out: ks::conv's flat method;
    parts of whole groups), and a linear layer of 501 outputs (ks::packed_gemm: parts of whole panels, its bias an
    epilogue of shifted columns)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 49, 3, 2, 1), nn.BatchNorm2d(49), nn.ReLU6())
            self.wino = nn.Conv2d(49, 49, 3, 1, 1)
            self.dw = nn.Sequential(nn.Conv2d(49, 49, 5, 1, 2, groups=49), nn.ReLU())
            self.grouped = nn.Sequential(nn.Conv2d(49, 35, 3, 2, 1, groups=7), nn.SiLU(), nn.AvgPool2d(4))
            self.head = nn.Linear(35 * 2 * 2, 501)

        def forward(self, x):
            h = self.stem(x)
            h = torch.relu(self.wino(h) + h)
            h = self.grouped(self.dw(h))
            return self.head(h.flatten(1))
    torch.onnx.export(Net().eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_a_layer_split_over_threads_computes_what_one_thread_does(tmp_path):
    """threads = 2 splits each convolution and product into parts (ks/parts.h): at batch 1 and 3 ranges of output
    channels (whole tiles' rows, whole groups, whole panels of the linear layer's columns), at batch 2 ranges of
    images. The outputs equal the one-thread build's and onnxruntime's."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _odd_cnn_onnx(tmp_path / "odd.onnx")
    pkgs = {}
    for n in (1, 2):
        build = f"[build]\nthreads = {n}\n\n" if n > 1 else ""
        (tmp_path / f"m{n}.toml").write_text(f'[package]\nname = "odd{n}"\n\n{build}[kernels.net]\n'
                                             'onnx = "odd.onnx"\n\n[exports]\nnet = "net"\n')
        pkgs[n] = ksbuild.build(tmp_path / f"m{n}.toml")
    sess = ort.InferenceSession(str(tmp_path / "odd.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 2, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        two, one = pkgs[2].net(x), pkgs[1].net(x)
        np.testing.assert_allclose(two, one, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(two, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    source = "".join(p.read_text() for p in (pkgs[2].root / "share").glob("*/src/*.cpp"))
    for kernel in ("conv", "winograd", "depthwise", "packed_gemm"):
        assert f"ks::parts::{kernel}<float>(part" in source, kernel


def _wide_cnn_onnx(path):
    """Layers big enough for more parts than threads at batch 1 (ks::parts::conv_parts, product_parts): a pointwise
    convolution of 49 -> 130 channels (8 parts of whole register tiles, the last one short), a depthwise one of 130
    channels (8 parts of 16 or 17 channels), a linear layer of 2080 -> 1001 outputs (8 parts of two blocks of 4
    panels, the kernels' column loop's: the last block 41 columns, a panel's tail of 9)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(3, 49, 3, 1, 1), nn.Conv2d(49, 130, 1), nn.ReLU(),
                        nn.Conv2d(130, 130, 3, 1, 1, groups=130), nn.Hardswish(), nn.AvgPool2d(8), nn.Flatten(),
                        nn.Linear(130 * 16, 1001))
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_layers_in_more_parts_than_threads_equal_one_thread_bit_for_bit(tmp_path):
    """threads = 2 with up to 8 parts per layer (odd channel counts, tails) gives the one-thread build's results bit
    for bit at batch 1, 2 (by images) and 3 (by channels): a part is the same kernel on a range of output channels,
    columns or images, and each element's sum runs over the same terms in the same order. (Not guaranteed where a
    part's shape picks another method than the whole call's: ks::convs::chunked depends on the output channels.)
    The linear layer's parts are whole blocks of panels: at batch 2 on AVX2 its tiles are 3 panels wide in blocks
    of 4, and the block's last panel, a tile of its own, sums each element in two halves (ks::tiles::micro's KU);
    parts of whole panels (from panel 7) grouped them otherwise, and 40% of the outputs differed in the last bit."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _wide_cnn_onnx(tmp_path / "wide.onnx")
    pkgs = {}
    for n in (1, 2):
        build = f"[build]\nthreads = {n}\n\n" if n > 1 else ""
        (tmp_path / f"m{n}.toml").write_text(f'[package]\nname = "wide{n}"\n\n{build}[kernels.net]\n'
                                             'onnx = "wide.onnx"\n\n[exports]\nnet = "net"\n')
        pkgs[n] = ksbuild.build(tmp_path / f"m{n}.toml")
    sess = ort.InferenceSession(str(tmp_path / "wide.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 2, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        for _ in range(3):  # (the parts land on other threads from call to call)
            np.testing.assert_array_equal(pkgs[2].net(x), pkgs[1].net(x))
        np.testing.assert_allclose(pkgs[2].net(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    source = "".join(p.read_text() for p in (pkgs[2].root / "share").glob("*/src/*.cpp"))
    assert "ks::parts::conv_parts(2, " in source and "ks::parts::product_parts<float>(2, " in source


def _scaling_onnx(path):
    """A scaling of 49 channels of 32 x 32 by a scale per image and channel (a squeeze-excite block's), relu(x) * s:
    a loop nest of [49 batch, 1024] elements (the batch and channels merged), whose parts meet inside a row."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn

    class Net(nn.Module):
        def forward(self, x, s):
            return torch.relu(x) * s
    torch.onnx.export(Net().eval(), (torch.zeros(1, 49, 32, 32), torch.zeros(1, 49, 1, 1)), str(path),
                      dynamo=False, input_names=["x", "s"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "s": {0: "batch"}, "y": {0: "batch"}})


def test_an_elementwise_nest_split_inside_a_row_equals_one_thread_bit_for_bit(tmp_path):
    """threads = 2 splits the scaling's loop nest into ranges of its elements that end inside a row (49 x 1024 at
    batch 1: half is 24.5 rows); each part runs its rows' columns in range as one inner loop (which vectorizes; the
    flattened range divided for each element's indices did not), and the results equal the one-thread build's bit
    for bit at batch 1, 2 and 3."""
    _scaling_onnx(tmp_path / "se.onnx")
    pkgs = {}
    for n in (1, 2):
        build = f"[build]\nthreads = {n}\n\n" if n > 1 else ""
        (tmp_path / f"m{n}.toml").write_text(f'[package]\nname = "se{n}"\n\n{build}[kernels.net]\n'
                                             'onnx = "se.onnx"\n\n[exports]\nnet = "net"\n')
        pkgs[n] = ksbuild.build(tmp_path / f"m{n}.toml")
    for batch in (1, 2, 3):
        rng = np.random.default_rng(batch)
        x, s = (rng.standard_normal((batch, 49, *hw)).astype(np.float32) for hw in ((32, 32), (1, 1)))
        for _ in range(3):  # (the parts land on other threads from call to call)
            np.testing.assert_array_equal(pkgs[2].net(x, s), pkgs[1].net(x, s))
        np.testing.assert_array_equal(pkgs[2].net(x, s), np.maximum(x, 0) * s)
    source = "".join(p.read_text() for p in (pkgs[2].root / "share").glob("*/src/*.cpp"))
    rows = re.search(r"for \(int64_t (\w+) = (span\d*)\.begin / 1024; \1 \* 1024 < \2\.end; \+\+\1\) \{", source)
    assert rows, "the scaling's parts: rows, each over its columns in the part's range"
    assert re.search(r"for \(int64_t \w+ = from\d*; \w+ < to\d*; ", source[rows.end():])


def _lstm_onnx(path):
    """An LSTM of 256 over 12 steps of 48 features (torch.nn.LSTM, batch first): each step multiplies the hidden state
    by the [1024, 256] recurrent weights, 2^18 multiply-adds per image."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(3)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(48, 256, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]
    torch.onnx.export(Net().eval(), (torch.zeros(1, 12, 48),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_a_recurrent_step_split_over_threads_equals_one_thread_bit_for_bit(tmp_path):
    """threads = 2 splits the product of each time step of an LSTM (inside its loop over the steps) by columns of
    the recurrent weights (ks::parts::packed_gemm: each thread the same half every step); the outputs equal the
    one-thread build's bit for bit at batch 1 and 3, and onnxruntime's."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    _lstm_onnx(tmp_path / "lstm.onnx")
    pkgs = {}
    for n in (1, 2):
        build = f"[build]\nthreads = {n}\n\n" if n > 1 else ""
        (tmp_path / f"m{n}.toml").write_text(f'[package]\nname = "lstm{n}"\n\n{build}[kernels.net]\n'
                                             'onnx = "lstm.onnx"\n\n[exports]\nnet = "net"\n')
        pkgs[n] = ksbuild.build(tmp_path / f"m{n}.toml")
    sess = ort.InferenceSession(str(tmp_path / "lstm.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 12, 48)).astype(np.float32)
        for _ in range(3):  # (the parts land on other threads from call to call)
            np.testing.assert_array_equal(pkgs[2].net(x), pkgs[1].net(x))
        np.testing.assert_allclose(pkgs[2].net(x), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    source = "".join(p.read_text() for p in (pkgs[2].root / "share").glob("*/src/*.cpp"))
    step = re.search(r"for \(int64_t (\w+) = 0; \1 < int64_t\{12\}; \+\+\1\) \{", source)
    assert step, "the loop over the time steps"
    assert "ks::parts::packed_gemm<float>(part" in source[step.end():].split("// ONNX node")[0]


PRODUCT = '''import torch


def prod(x: "float[n, k]", w: "float[k, m]") -> "float[n, m]":
    return torch.tanh(x @ w + 1.0)
'''


def test_a_product_split_over_threads_computes_what_numpy_does(tmp_path):
    """ks::tiled_gemm in parts (both operands inputs): one row of 501 columns (parts of whole panels, the epilogue's
    columns shifted), 97 rows of 20 columns (parts of rows), and products big enough for 8 parts on 2 threads (1001
    columns: the last part's panel 9 wide)."""
    (tmp_path / "k.py").write_text(PRODUCT)
    (tmp_path / "manifest.toml").write_text('[package]\nname = "prod2"\n[build]\ndtype = "float64"\nthreads = 2\n'
                                            '[kernels.prod]\npython = "k.py:prod"\n[exports]\nprod = "prod"\n')
    pkg = ksbuild.build(tmp_path / "manifest.toml")
    rng = np.random.default_rng(0)
    for n, k, m in ((1, 600, 501), (97, 300, 20), (3, 7, 5), (1, 3000, 1001), (200, 300, 500)):
        x, w = rng.standard_normal((n, k)), rng.standard_normal((k, m)) / np.sqrt(k)
        np.testing.assert_allclose(pkg.prod(x, w), np.tanh(x @ w + 1.0), rtol=1e-12, atol=1e-12)
    source = next((pkg.root / "share").glob("*/src/*.cpp")).read_text()
    assert "ks::parts::tiled_gemm<double>(part" in source


ATTENTION = '''import torch


def heads(q: "float[b, 4, t, 32]", k: "float[b, 4, t, 32]", v: "float[b, 4, t, 32]") -> "float[b, 4, t, 32]":
    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


def odd(q: "float[b, 3, t, 32]", k: "float[b, 3, t, 32]") -> "float[b, 3, t, t]":
    return torch.tanh(q @ k.transpose(-1, -2))
'''


def test_batched_products_split_as_whole_products_equal_one_thread_bit_for_bit(tmp_path):
    """threads = 2 runs attention's batched products ([b, 4] products of t x t x 32 and t x 32 x t) as parts of whole
    products, one parallel region per batched product (not one per product), each on its thread's scratch; 3 heads
    (not divisible by the threads, fewer than 4 per thread) keep each product split. Equal to the one-thread build
    bit for bit at batch 1 and 3, and to numpy: softmax's sum vectorizes in a part as in the one-thread build (each
    part's body reads the function's pointers and dims as parameters of its own: read through the lambda's
    captures, GCC kept their loads in the loop and left it scalar, the sum in another order)."""
    pkgs = {}
    for n in (1, 2):
        folder = tmp_path / f"t{n}"
        folder.mkdir()
        (folder / "k.py").write_text(ATTENTION)
        build = f"threads = {n}\n" if n > 1 else ""
        (folder / "manifest.toml").write_text(f'[package]\nname = "heads{n}"\n[build]\ndtype = "float64"\n{build}'
                                              '[kernels.heads]\npython = "k.py:heads"\n[kernels.odd]\n'
                                              'python = "k.py:odd"\n[exports]\nheads = "heads"\nodd = "odd"\n')
        pkgs[n] = ksbuild.build(folder / "manifest.toml")
    rng = np.random.default_rng(0)
    for b, t in ((1, 40), (3, 64)):
        q, k, v = (rng.standard_normal((b, 4, t, 32)) / 4 for _ in range(3))
        for _ in range(3):  # (the parts land on other threads from call to call)
            np.testing.assert_array_equal(pkgs[2].heads(q, k, v), pkgs[1].heads(q, k, v))
        s = q @ k.transpose(0, 1, 3, 2)
        e = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(pkgs[2].heads(q, k, v), e / e.sum(-1, keepdims=True) @ v, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pkgs[2].odd(q[:, :3], k[:, :3]), pkgs[1].odd(q[:, :3], k[:, :3]))
        np.testing.assert_allclose(pkgs[2].odd(q[:, :3], k[:, :3]),
                                   np.tanh(q[:, :3] @ k[:, :3].transpose(0, 1, 3, 2)), rtol=1e-12, atol=1e-12)
    source = next((pkgs[2].root / "share").glob("*/src/*.cpp")).read_text()
    heads, odd = source.split("odd(")[0], source.split("odd(")[-1]
    assert heads.count("ks::parts::tiled_gemm<double>(0, 1, slot") == 2  # (both products: whole ones per part)
    assert "ks::parts::tiled_gemm<double>(part" in odd and "(0, 1, slot" not in odd


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_a_layer_has_a_multiple_of_the_threads_parts():
    """tests/cpp/test_parts.cpp's compile-time checks of ks::parts::split: a multiple of the threads, up to 4 parts
    per thread, two units each at least."""
    run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'prelude'}",
                          str(ROOT / "tests/cpp/test_parts.cpp")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_pool_runs_every_part_once(tmp_path):
    """tests/cpp/test_pool.cpp against ks/pool.h: every part once, on a slot below the thread count, whether the
    calling thread and the workers spin or sleep, and with calls from three threads at once (a timeout: a lost
    wake-up)."""
    exe = tmp_path / "test_pool"
    subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", f"-I{ROOT / 'prelude'}",
                    str(ROOT / "tests/cpp/test_pool.cpp"), "-o", str(exe)], check=True, capture_output=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "0 failures", run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_an_app_links_a_threaded_package_through_find_package(tmp_path):
    """threads = 2 links POSIX threads (Threads::Threads, `-pthread` in the .pc file), not the OpenMP runtime: the
    installed package's CMake config brings that dependency to examples/relu3's app, which builds and runs."""
    from ksbuild.cli import main as cli_main
    from ksbuild.compile.cmake import cmake_exe

    src = tmp_path / "relu3"
    shutil.copytree(ROOT / "examples/relu3", src, ignore=shutil.ignore_patterns("app"))
    manifest = src / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('dtype = "float32"', 'dtype = "float32"\nthreads = 2'))
    out = tmp_path / "dist"
    assert cli_main(["package", str(manifest), "-o", str(out)]) == 0
    config = (out / "lib/cmake/activations/activationsConfig.cmake").read_text()
    assert "find_dependency(Threads)" in config and "OpenMP" not in config
    assert " -pthread " in (out / "lib/pkgconfig/activations.pc").read_text()
    undefined = subprocess.run(["nm", "-u", str(out / "lib/libactivations.a")], capture_output=True, text=True,
                               check=True).stdout
    assert "pthread_create" in undefined and "GOMP" not in undefined and "omp_" not in undefined
    cmake = cmake_exe()
    subprocess.run([cmake, "-S", str(ROOT / "examples/relu3/app"), "-B", str(tmp_path / "app"),
                    f"-DCMAKE_PREFIX_PATH={out}"], check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(tmp_path / "app")], check=True, capture_output=True)
    run = subprocess.run([str(tmp_path / "app/relu3_app")], check=True, capture_output=True, text=True)
    assert "ok: batched kernels match" in run.stdout
