"""The integer kernels' SDOT path on AArch64 (ks/qconv.h, KS_QTILE_SDOT: Armv8.2-A's dot product instructions,
issue 35), run under qemu-aarch64 -cpu max (a core with FEAT_DotProd):
- tests/cpp/test_qconv.cpp compiled for -march=armv8.2-a+dotprod (the SDOT tiles) and for -march=armv8-a (the portable
  loops): ks::qconv, ks::qmatmul and the depthwise kernels against written-out loops, both builds;
- examples/onnx_cnn's network quantized by onnxruntime (QDQ: two convolutions and a product on the tiles) packaged for
  aarch64-linux-gnu with [build] cpu = "armv8.2-a+dotprod", run by tests/cross/baremetal_cnn's program as a Linux
  program: its logits equal onnxruntime's bit for bit, and the program links tile_sdot.

Needs g++-aarch64-linux-gnu and qemu-user (scripts/install.sh); skips naming what is missing."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import ort_oracle
import pytest
from conftest import ROOT
from test_kernel_layer_m4 import APP, _image, _quantize
from test_targets import build_consumer, need

from ksbuild.compile.targets import TARGETS
from ksbuild.packaging.package import package

A64 = TARGETS["aarch64-linux-gnu"]
MANIFEST = '''[package]
name = "cnn_m4"

[build]
cpu = "armv8.2-a+dotprod"

[kernels.cnn]
onnx = "cnn.onnx"

[exports]
cnn = "cnn"
'''


def _qemu(program, *args) -> subprocess.CompletedProcess:
    """An AArch64 program run on qemu-aarch64's most capable core (SDOT among its features)."""
    if shutil.which(A64.emulator) is None:
        pytest.skip(f"{A64.emulator} not installed (scripts/install.sh installs qemu-user)")
    return subprocess.run([A64.emulator, "-cpu", "max", "-L", A64.sysroot, str(program), *args], capture_output=True,
                          text=True, timeout=1200)


@pytest.mark.parametrize("march, sdot", [("armv8.2-a+dotprod", True), ("armv8-a", False)])
def test_the_sdot_tiles_equal_written_out_loops_under_qemu(tmp_path, march, sdot):
    need(A64)
    exe = tmp_path / "test_qconv"
    subprocess.run([A64.cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-fno-rtti", "-O2",
                    "-fno-math-errno", f"-march={march}", f"-I{ROOT / 'prelude'}",
                    str(ROOT / "tests/cpp/test_qconv.cpp"), "-o", str(exe)], check=True)
    run = _qemu(exe, "20")  # (20 random trials per type pair, not 60: a third of the 66 s of CPU under qemu)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("tile sdot" in run.stdout.splitlines()) == sdot, run.stdout
    assert " 0 failures" in run.stdout, run.stdout


def test_a_quantized_cnn_with_sdot_equals_onnxruntime_bit_for_bit(tmp_path):
    need(A64)
    pytest.importorskip("onnxruntime")
    _quantize(ROOT / "examples/onnx_cnn/cnn.onnx", tmp_path / "cnn.onnx")
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    tree = package(tmp_path / "manifest.toml", tmp_path / "dist", target=A64.name, progress=lambda s: None)
    build_consumer(APP, tmp_path / "b", tree / "share/cnn_m4/toolchain.cmake", [tree])
    program = tmp_path / "b/cnn_app.elf"
    names = subprocess.run([f"{A64.triple}-nm", "-C", str(program)], capture_output=True, text=True,
                           check=True).stdout
    assert "tile_sdot<false>" in names and "tile_sdot<true>" in names  # (the convolutions' and the product's)
    run = _qemu(program)
    assert run.returncode == 0 and "status 0" in run.stdout, run.stdout + run.stderr
    got = np.array([np.float32(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("logit ")])
    sess = ort_oracle.session(tmp_path / "cnn.onnx")  # (exact where onnxruntime's u8 x s8 pairs saturate)
    want = sess.run(None, {sess.get_inputs()[0].name: _image()})[0].ravel()
    np.testing.assert_array_equal(got, want)
