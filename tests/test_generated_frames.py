"""The frames of the generated functions (codegen/steps.py), not only of the kernel layer: no frame above
FRAME_BOUND on x86-64 and on a Cortex-M4, for the gradient of a small residual network's loss (20 weights, about 90
steps: the case that had a 2.6 KB frame of spilled workspace pointers and nest values; resnet18's had 5.5 KB), and
the outlined steps compute torch.autograd's gradient.

The generated source is compiled alone (the kernel layer is only declared there) with -fstack-usage at -O3, as the
package's CMake project compiles it for one x86-64 level and for the Cortex-M4."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_kernel_layer import FRAME_BOUND

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

FLAGS = ["-std=c++17", "-O3", "-fno-exceptions", "-fno-rtti", "-fno-math-errno", "-fno-trapping-math", "-fwrapv",
         "-fopenmp-simd", "-DKS_OPENMP_SIMD", "-Wall", "-Wextra", "-Werror", "-fstack-usage"]
X86 = ["-march=x86-64-v3", "-DKS_VARIANT=small_v3", "-DKS_KERNELS=ks_kernels_v3"]
M4 = ["-DKS_KERNELS=ks_kernels_baseline", "-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard",
      "--param=max-completely-peel-times=1"]


class Block(torch.nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.c2(torch.relu(self.c1(x))))


class Loss(torch.nn.Module):
    """A small ResNet's soft-label cross-entropy: a stem, four residual blocks, global average pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = torch.nn.Sequential(*[Block(8) for _ in range(4)])
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x, target):
        h = self.blocks(torch.relu(self.stem(x))).mean((2, 3))
        return -(target * torch.log_softmax(self.fc(h), 1)).sum(1).mean()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(manifest, the module, its example inputs): the loss exported to ONNX, grad over every weight."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("frames")
    model = Loss()
    x, t = torch.randn(2, 3, 12, 12), torch.softmax(torch.randn(2, 10), 1)
    torch.onnx.export(model, (x, t), str(folder / "net.onnx"), dynamo=False, input_names=["x", "target"],
                      output_names=["loss"], do_constant_folding=False)
    weights = len(list(model.parameters()))
    argnums = ", ".join(str(k) for k in range(2, 2 + weights))
    manifest = folder / "net.toml"
    manifest.write_text(f'[package]\nname = "small"\n\n[kernels.loss]\nonnx = "net.onnx"\nweights = "external"\n\n'
                        f'[exports]\nloss_grad = "grad(loss, argnums=({argnums}))"\n')
    return manifest, model, (x, t)


def _frames(manifest: Path, target: str, compiler: str, flags: list[str], out: Path, name: str = "small",
            own: bool = True) -> dict[str, int]:
    """The frames (bytes) of the functions of the package's own source rendered for `target`, compiled alone; with
    own=False also those of the prelude's templates instantiated there (an epilogue's ks::run_block)."""
    subprocess.run([sys.executable, "-m", "ksbuild", "-q", "render", str(manifest), "-o", str(out), "--target", target],
                   check=True)
    src = out / "src"
    obj = out / f"{name}.o"
    subprocess.run([compiler, *FLAGS, *flags, f"-I{out / 'include'}", f"-I{src}", "-c", str(src / f"{name}.cpp"),
                    "-o", str(obj)], check=True, capture_output=True, text=True)
    frames = {}
    for line in obj.with_suffix(".su").read_text().splitlines():
        where, size, _ = line.split("\t")
        if not own or re.match(rf".*{name}\.cpp:\d+", where):
            frames[where] = int(size)
    return frames


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_no_generated_function_has_a_frame_above_the_bound(small, target, tmp_path):
    """Every function of the generated source (the export, its steps) has a frame of at most FRAME_BOUND bytes."""
    compiler, flags = ("g++", X86) if target == "host" else ("arm-none-eabi-g++", M4)
    if not shutil.which(compiler) or target == "host" and os.uname().machine != "x86_64":
        pytest.skip(f"needs {compiler}" + (" on an x86-64 host" if target == "host" else ""))
    frames = _frames(small[0], target, compiler, flags, tmp_path / "render")
    assert {f: n for f, n in frames.items() if n > FRAME_BOUND} == {}
    assert len(frames) > 20  # (the steps are functions of their own)


def test_the_outlined_steps_compute_torchs_gradient(small, tmp_path):
    """The compiled gradient (its steps lambdas of their own) against torch.autograd's."""
    import ksbuild
    manifest, model, (x, t) = small
    pkg = ksbuild.build(manifest)
    params = [p.detach().numpy() for p in model.parameters()]
    got = pkg.loss_grad(x.numpy(), t.numpy(), *params)
    model.zero_grad()
    model(x, t).backward()
    for g, p in zip(got, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_steps_take_the_exports_arguments_as_parameters(small, tmp_path):
    """A step that reads the export's arguments takes them as its lambda's parameters, not as captures (a captured
    pointer is a closure member, which a loop storing bytes must read again after each store: such loops did not
    vectorize, codegen/steps.py); every step's parameters are arguments of the export."""
    out = tmp_path / "render"
    subprocess.run([sys.executable, "-m", "ksbuild", "-q", "render", str(small[0]), "-o", str(out)], check=True)
    source = (out / "src" / "small.cpp").read_text()
    signature = re.search(r"\bint small_loss_grad\(([^)]*)\)", source).group(1)
    arguments = {part.split()[-1].lstrip("*") for part in signature.split(",")}
    steps = re.findall(r"\[=\]\(([^)]*)\) KS_STEP \{", source)
    taken = [{p.split()[-1] for p in params.split(", ")} for params in steps if params]
    assert len(steps) > 20 and taken
    assert all(names <= arguments - {"workspace"} for names in taken)
    assert any("x" in names for names in taken) and any("target" in names for names in taken)


def test_a_reduction_clauses_operator_is_not_a_name_the_step_reads():
    """`reduction(max:m)` reads m, not a buffer named max: resnet18's loss gradient declared such a buffer's pointer in
    the step of its LogSoftmax's maximum, unused, and -Werror stopped the build (no build here: the scan alone)."""
    from ksbuild.codegen.steps import _names
    names = _names(["KS_OMP_SIMD_EXTREMA(reduction(max:m_i) reduction(|:has_nan))",
                    "for (int64_t j = 0; j < n; ++j) m_i = ks::max<float>(m_i, min[j]);  // max"])
    assert "max" not in names
    assert {"m_i", "has_nan", "j", "n", "min"} <= names


class MixerBlock(torch.nn.Module):
    """ConvMixer's block (Trockman and Kolter, "Patches Are All You Need?", 2022): a depthwise convolution, GELU and a
    batch norm added to its input, then a pointwise convolution, GELU and a batch norm. Its convolutions' epilogues
    are GELU's erf between two affine maps, which on AVX2 had a ks::run_block frame of 1352 B (GCC hoisted and spilled
    erf's constants; prelude/ks/kernels.h, KS_EPILOGUE_FRAME)."""

    def __init__(self, c: int):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 5, groups=c, padding=2)
        self.pw = torch.nn.Conv2d(c, c, 1)
        self.n1, self.n2 = torch.nn.BatchNorm2d(c), torch.nn.BatchNorm2d(c)
        for n in (self.n1, self.n2):
            n.running_mean.uniform_(-0.1, 0.1)
            n.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = x + self.n1(torch.nn.functional.gelu(self.dw(x)))
        return self.n2(torch.nn.functional.gelu(self.pw(x)))


def test_an_epilogue_of_erf_has_a_bounded_frame_and_gelus_values(tmp_path):
    """The ConvMixer block's GELU epilogues: every function of the package's object, the ks::run_block instantiated for
    each epilogue included, has a frame of at most FRAME_BOUND bytes on x86-64-v3, and the values are torch's."""
    if not shutil.which("g++") or os.uname().machine != "x86_64":
        pytest.skip("needs g++ on an x86-64 host")
    import ksbuild
    torch.manual_seed(0)
    model, x = MixerBlock(16).eval(), torch.randn(1, 16, 12, 12)
    torch.onnx.export(model, (x,), str(tmp_path / "mixer.onnx"), dynamo=False, input_names=["x"], output_names=["y"])
    manifest = tmp_path / "mixer.toml"
    manifest.write_text('[package]\nname = "mixer"\n\n[kernels.block]\nonnx = "mixer.onnx"\n\n'
                        '[exports]\nblock = "block"\n')
    frames = _frames(manifest, "host", "g++", X86, tmp_path / "render", name="mixer", own=False)
    assert any("run_block" in f for f in frames)  # (the epilogues are lambdas, run by ks::run_block)
    assert {f: n for f, n in frames.items() if n > FRAME_BOUND} == {}
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(ksbuild.build(manifest).block(x.numpy()), want, rtol=1e-5, atol=1e-6)
