"""The workspace arena (transforms/plan_memory.py: _pack): buffers whose sizes are static get byte offsets in one
arena, shared by buffers whose lifetimes do not overlap; so does each kernel call's scratch (prims/scratch.py),
live while the call runs.

Oracles: the lifetimes the planner itself computes (no two buffers live at once may share a byte, checked pair
by pair on real functions), the peak of live bytes (the arena of a straight chain of layers is exactly that),
the compiled networks (Winograd, im2col, depthwise and int8 layers, one thread and two) against onnxruntime with
the workspace filled with garbage before the call, and the prelude's own C++ scratch sizes, which the Python ones
must equal call by call on every instruction set level (the generated static_asserts made exact, compiled)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import ort_oracle
import pytest

import ksbuild
from ksbuild.frontends.onnx import compile_onnx_kernel
from ksbuild.frontends.python.source import compile_python_kernel
from ksbuild.prims import scratch
from ksbuild.transforms.pipeline import Options, lower
from ksbuild.transforms.plan_memory import _static_bytes, _Walk

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LOOPED = """
import torch


def k(x: "float[6, 40]", w: "float[40, 40]") -> "float[6]":
    h = torch.tanh(x @ w)
    for _ in range(12):
        h = torch.tanh(h @ w) + h
    wide = torch.cat([h, h * h, torch.sin(h)], 1)
    return wide.sum(1) + (h @ w).sum(1)
"""


def _mobile_onnx(path) -> None:
    """A MobileNet-like network: expand, depthwise, project, residual; sizes that differ layer to layer."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c, e, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, e, 1), nn.ReLU6(), nn.Conv2d(e, e, 3, stride, 1, groups=e),
                                      nn.ReLU6(), nn.Conv2d(e, c, 1))
            self.residual = stride == 1

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    net = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6(), Block(8, 24, 1), Block(8, 32, 2), Block(8, 48, 1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"])


def _resnet_onnx(path) -> None:
    """A ResNet-like network: a direct 3×3 convolution, a strided one (im2col blocks), a residual block of two
    64-channel 3×3 convolutions at 8 × 8 (Winograd), a pointwise one and a linear layer over a batch of two."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    net = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), Residual(),
                        nn.Conv2d(64, 48, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, 40))
    torch.onnx.export(net.eval(), (torch.zeros(2, 3, 16, 16),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"])


def _stem_onnx(path) -> None:
    """ks::conv's phases and chunks methods: a 7×7 stride-2 stem with 70-wide output rows (the image split into
    its stride phases), a 3×3 max pooling (ks::max_pool's row), a depthwise convolution of 70 × 70 planes (across channels in bands of rows), a
    256-channel 3×3 convolution at 7 × 7 whose kernel (2.4 MB) runs by channel chunks, a grouped one (8 groups: the flat
    method) and a pointwise one from its 256 channels over those 49 positions (ks::conv_pointwise)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from torch import nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 1, 1),
                        nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(7), nn.Conv2d(8, 256, 1), nn.ReLU(),
                        nn.Conv2d(256, 256, 3, 1, 1), nn.ReLU(), nn.Conv2d(256, 256, 3, 1, 1, groups=8), nn.ReLU(),
                        nn.Conv2d(256, 24, 1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(24 * 49, 10))
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 140, 140),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"])


def _int8_onnx(path, root) -> None:
    """A small CNN (a convolution, a depthwise one, a pointwise one, a linear layer) quantized by onnxruntime
    (QOperator: QLinearConv and QGemm, ks::qconv, ks::qconv_depthwise and ks::qmatmul)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    quantization = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime is not installed")
    from torch import nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 2, 1, groups=16), nn.ReLU(),
                        nn.Conv2d(16, 32, 1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    float_path = root / "int8_float.onnx"
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 16, 16),), str(float_path), dynamo=False, input_names=["x"],
                      output_names=["y"], opset_version=17)

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.RandomState(i).randn(1, 3, 16, 16).astype(np.float32)}
                                 for i in range(8)])

        def get_next(self):
            return next(self.batches, None)
    quantization.quantize_static(str(float_path), str(path), Reader(), quant_format=quantization.QuantFormat.QOperator,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """name -> (ONNX model, input shape): the MobileNet-like, ResNet-like, stem/chunks and int8 networks."""
    root = tmp_path_factory.mktemp("arena_nets")
    _mobile_onnx(root / "mobile.onnx")
    _resnet_onnx(root / "resnet.onnx")
    _stem_onnx(root / "stem.onnx")
    _int8_onnx(root / "int8.onnx", root)
    return {"mobile": (root / "mobile.onnx", (1, 3, 32, 32)), "resnet": (root / "resnet.onnx", (2, 3, 16, 16)),
            "stem": (root / "stem.onnx", (1, 3, 140, 140)), "int8": (root / "int8.onnx", (1, 3, 16, 16))}


def _manifest(root: Path, nets, threads: int = 1) -> Path:
    lines = [f'[package]\nname = "arena{threads}"\n\n[build]\nthreads = {threads}\n']
    lines += [f'[kernels.{n}]\nonnx = "{path}"\n' for n, (path, _) in nets.items()]
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in nets))
    (root / "manifest.toml").write_text("\n".join(lines))
    return root / "manifest.toml"


def _layout(f):
    """The planned function's arena values: (value, offset, bytes, first position, last position)."""
    w = _Walk()
    w.top(f)
    plan = w.plan()
    out = []
    for v, place in plan.places.items():
        if place.kind == "slot" and plan.offset(place.index) is not None:
            out.append((v, plan.offset(place.index), _static_bytes(v.type), w.defined[v], w.last.get(v, w.defined[v])))
    for eqn, (offset, size) in plan.scratch.items():  # (a kernel call's scratch: live while the call runs)
        _, start, end = w.scratch[eqn]
        out.append((eqn.prim.name, offset, -(-size // 64) * 64, start, end))
    return plan, out


def _check_disjoint(layout) -> None:
    for i, (v, o, n, s, e) in enumerate(layout):
        for u, o2, n2, s2, e2 in layout[i + 1:]:
            if not (e < s2 or e2 < s):
                assert o + n <= o2 or o2 + n2 <= o, f"{v} [{s}, {e}] and {u} [{s2}, {e2}] overlap in the arena"


@pytest.fixture(scope="module")
def mobile(nets):
    return nets["mobile"][0]


@pytest.mark.parametrize("threads", [1, 2])
def test_buffers_live_at_once_never_share_a_byte(nets, tmp_path, threads):
    """Pair by pair, kernel calls' scratch among them, on the MobileNet-like, ResNet-like and int8 networks, the CNN
    example and a Python kernel of literal sizes with a loop; one thread and two (each part's scratch its own)."""
    (tmp_path / "k.py").write_text(LOOPED)
    funcs = [compile_onnx_kernel(path, name) for name, (path, _) in nets.items()]
    funcs += [compile_onnx_kernel(EXAMPLES / "onnx_cnn" / "cnn.onnx", "cnn"),
              compile_python_kernel(tmp_path / "k.py", "k", "f32")]
    calls = set()
    for f in funcs:
        plan, layout = _layout(lower(f, Options(threads=threads), after="parallelize"))
        assert len(layout) >= 2, f"{f.name}: {len(layout)} buffers in the arena"
        _check_disjoint(layout)
        assert plan.arena == max(o + n for _, o, n, _, _ in layout)
        calls |= {(e.prim.name, e.params.get("impl", ""), e.params.get("threads", 0)) for e in plan.scratch}
    want = {("convolve", "tiles"), ("convolve", "winograd"), ("convolve", "depthwise"), ("qconv", ""), ("qmatmul", ""),
            ("contract", "tiles")}
    want |= {("convolve", "pointwise")} if threads == 1 else set()
    assert want <= {c[:2] for c in calls}, want - {c[:2] for c in calls}
    assert threads == 1 or {("convolve", "tiles", 2), ("convolve", "winograd", 2)} <= calls, calls


def test_a_core_without_vectors_packs_the_arena_at_8_bytes(nets):
    """A microcontroller's plan (Options.arena_align: plan_memory.arena_align(False), 8): every offset a multiple of
    8, buffers live at once still disjoint, and the int8 network's uint8 tensors (sizes not multiples of 64) in
    fewer bytes than with the 64-byte alignment of targets with vectors (its arena, which its convolutions' scratch
    sets, no larger)."""
    from ksbuild.transforms.plan_memory import arena_align
    assert arena_align(True) == 64 and arena_align(False) == 8
    f = compile_onnx_kernel(nets["int8"][0], "int8")
    plans = {}
    for align in (64, 8):
        g = lower(f, Options(vectors=False, arena_align=align))
        plan, w = g.plan, _Walk(align=align)
        w.top(g)
        layout = [(v, plan.offset(p.index), _static_bytes(v.type, align), w.defined[v], w.last.get(v, w.defined[v]))
                  for v, p in plan.places.items() if p.kind == "slot" and plan.offset(p.index) is not None]
        assert layout and all(o % align == 0 for _, o, _, _, _ in layout), layout
        _check_disjoint(layout)
        plans[align] = (plan.arena, sum(n for _, _, n, _, _ in layout))
    assert plans[8][0] <= plans[64][0] and plans[8][1] < plans[64][1], plans


def test_the_arena_is_near_the_peak_of_live_bytes_not_their_sum(mobile):
    """The bytes live at one position bound the arena from below (greedy packing need not reach the bound: here
    14% above it); the buffers' sum (the layout before: one slot per size) is far above it."""
    plan, layout = _layout(lower(compile_onnx_kernel(mobile, "net"), after="parallelize"))
    positions = {p for _, _, _, s, e in layout for p in (s, e)}
    peak = max(sum(n for _, _, n, s, e in layout if s <= p <= e) for p in positions)
    total = sum(n for _, _, n, _, _ in layout)
    assert peak <= plan.arena <= 1.25 * peak, (plan.arena, peak)
    assert plan.arena < total / 2, (plan.arena, total)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_networks_are_right_with_a_dirty_shared_workspace(nets, tmp_path, threads):
    """Buffers and scratch that share bytes: the compiled networks against onnxruntime, the workspace full of NaN
    (0xFF bytes) first: a layer or a kernel call that read a dead neighbour's bytes, or wrote into a live one's,
    would show. The int8 network's outputs are the clean run's, bit for bit, and within a step of onnxruntime's."""
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    pkg = ksbuild.build(_manifest(tmp_path, nets, threads), quiet=True)
    for name, (path, shape) in nets.items():
        sess = ort_oracle.session(path)  # (exact where onnxruntime's u8 x s8 pairs saturate)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        fn = getattr(pkg, name)
        clean = np.array(fn(x))
        tol = 0.5 if name == "int8" else 1e-5  # (int8: a step of the output's scale, about 0.1)
        np.testing.assert_allclose(clean, want, rtol=tol, atol=tol)
        fn._scratch.buf[:] = 0xFF  # (the thread's workspace, reused by the next call: every float a NaN)
        np.testing.assert_array_equal(np.array(fn(x)), clean)


CROSS = {"cortex-m4": (scratch.ONE_LANE, ["arm-none-eabi-g++", "-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16",
                                           "-mfloat-abi=hard"]),
         "aarch64-linux-gnu": (scratch.AARCH64_TILES, ["aarch64-linux-gnu-g++"]),
         "riscv64-linux-gnu": (scratch.ONE_LANE, ["riscv64-linux-gnu-g++"])}
"""The cross targets whose tiles the scratch sizes are checked for: their compiler."""


def _exact_asserts(source: Path) -> int:
    """The generated source's checks that a call's scratch fits its planned bytes made exact (== instead of <=);
    how many."""
    text, n = re.subn(r"(static_assert\(.*\) \* sizeof\(\w+\)) <= (\d+),", r"\1 == \2,", source.read_text())
    source.write_text(text)
    return n


@pytest.mark.parametrize("level", ["x86-64", "x86-64-v3", "x86-64-v4", "blas", *CROSS])
def test_python_scratch_sizes_equal_the_prelude_s(nets, tmp_path, monkeypatch, level):
    """Every kernel call of the networks (one thread and two), planned for one level's tiles alone: the generated
    static_asserts made exact compile for that level (g++ -march, or the cross target's compiler: CROSS); "blas":
    the blas backend's convolutions (ks::conv_rows) on x86-64-v4."""
    from ksbuild.compile.targets import host_cxx
    from ksbuild.packaging.package import render
    backend = "blas" if level == "blas" else None
    level = "x86-64-v4" if level == "blas" else level
    if level in CROSS:
        (tiles, command), target = CROSS[level], level
        if shutil.which(command[0]) is None:
            pytest.skip(f"{command[0]} is not installed")
    else:
        tiles, target, command = scratch.X86_64_TILES[level], "host", [*host_cxx(), f"-march={level}"]
    monkeypatch.setattr(scratch, "target_tiles", lambda t, cpu="", several=True: (tiles,))
    for threads in (1, 2) if target == "host" and backend is None else (1,):
        out = tmp_path / f"project{threads}"
        render(_manifest(tmp_path, nets, threads), out, progress=lambda _: None, target=target, backend=backend)
        source = out / "src" / f"arena{threads}.cpp"
        assert _exact_asserts(source) >= 12
        proc = subprocess.run([*command, "-std=c++17", "-fsyntax-only", f"-I{out / 'include'}", f"-I{out / 'src'}",
                               str(source)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_scratch_is_planned_for_the_levels_a_build_compiles():
    """A portable x86-64 build dispatches among three levels (their largest scratch); one level ([build] cpu, or
    optimize = "size": the baseline) is planned for alone; a Cortex-M has one lane, aarch64 its NEON tiles."""
    from ksbuild.compile.targets import TARGETS
    host = TARGETS["host"]
    if host.processor in ("x86_64", "AMD64"):
        assert scratch.target_tiles(host) == tuple(scratch.X86_64_TILES.values())
        assert scratch.target_tiles(host, "x86-64-v3") == (scratch.X86_64_TILES["x86-64-v3"],)
        assert scratch.target_tiles(host, "", several=False) == (scratch.X86_64_TILES["x86-64"],)
    assert scratch.target_tiles(TARGETS["cortex-m4"]) == (scratch.ONE_LANE,)
    assert scratch.target_tiles(TARGETS["aarch64-linux-gnu"]) == (scratch.AARCH64_TILES,)


SCRATCH_OUTPUT = '''
import torch


def lse(x: "float[n]") -> float:
    a = torch.max(x).detach()
    return a + torch.log(torch.sum(torch.exp(x - a)))


def both(x: "float[n]"):
    e = torch.exp(x - torch.max(x))
    return e, e / torch.sum(e)
'''


def test_a_temporary_the_result_overwrites_lives_in_the_output(tmp_path):
    """The gradient of a log-sum-exp is exp(x - a) / Σ computed elementwise from the exps: the exps are computed in
    the output argument and the result overwrites them there (no workspace; the C ABI lets no input overlap the
    output of a function of two or more equations: codegen/aliasing.py). A temporary that is itself a result keeps
    its own output, and the other result then has a buffer of its own. (The values: tests/test_gradbench.py's lse
    and gmm gradients, test_one_hot.py's kmeans, compiled.) Plans only: 1 s of CPU."""
    from ksbuild.transforms.vjp import grad_func
    (tmp_path / "k.py").write_text(SCRATCH_OUTPUT)
    g = lower(grad_func(compile_python_kernel(tmp_path / "k.py", "lse", "f64")))
    places = {v: p for v, p in g.plan.places.items() if v.type.rank}
    assert not g.plan.slots, places
    assert sorted(p.kind for p in places.values()) == ["arg", "reuse"], places
    (made,) = [v for v, p in places.items() if p.kind == "arg"]
    assert made not in g.results and places[g.results[0]].of is made
    h = lower(compile_python_kernel(tmp_path / "k.py", "both", "f64"))
    places = {v: p for v, p in h.plan.places.items() if v.type.rank}
    assert [places[r].kind for r in h.results] == ["arg", "arg"] and places[h.results[0]].index == 0, places
