"""The integer kernels' DSP path on a Cortex-M4 and a Cortex-M7 (ks/qconv.h, KS_QTILE_DSP: SMLAD dual 16-bit
multiply-adds, issue 35): tests/cross/qtile_m4/main.cpp compiled for the core at -O3 and -Os and run on QEMU's
mps2-an386 board (semihosting; the M7 on mps2-an500, whose memory map is the same as far as the program uses it; the
Cortex-M0+, without the extension, on mps2-an385) compares qtile::tile_dsp with the portable loops of the same file
and with int32 sums of its own, over depths, row and column counts and the extreme bytes (255 · -128 in every lane),
and ks::qconv_depthwise (qtile::depthwise_sums_dsp: taps in pairs) with a direct convolution of its own (uint8 and
int8 activations, odd and even tap counts, strides, padding, dilation, a channel multiplier; 81 taps: the portable
loops; at -Os the taps summed in place, depthwise_gathered), and ks::qconv of dense layers (two images; at -Os the
blocks gathered from the image, qtile::gather_block) with a convolution of its own, and ks::qmatmul_folded (rows
read in place; partial words and tiles; int32 sums) with sums of its own. The networks that run on these
kernels are checked against onnxruntime by tests/test_kernel_layer_m4.py (the quantized CNN) and
tests/test_cortex_m4_bench.py (the quantized MobileNet-like net).

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (scripts/install.sh installs both as root); skips naming
what is missing."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT
from test_targets import need

from ksbuild.compile.targets import TARGETS

APP = ROOT / "tests/cross/qtile_m4/main.cpp"
BOARD = ROOT / "tests/cross/baremetal_c"  # (mps2-an386's startup code and linker script)


def _run(tmp_path, target: str, board: str, opt: str) -> str:
    """main.cpp built for `target` at `opt` and run on QEMU's `board`; its output."""
    t = TARGETS[target]
    flags = [*t.flags, opt, "-Wall", "-Wextra", "-Werror"]
    startup = tmp_path / "startup.o"
    subprocess.run(["arm-none-eabi-gcc", *flags, "-c", str(BOARD / "mps2_an386_startup.c"), "-o", str(startup)],
                   check=True)
    elf = tmp_path / "qtile.elf"
    build = subprocess.run([t.cxx, "-std=c++17", *flags, "-fno-exceptions", "-fno-rtti", f"-I{ROOT / 'prelude'}",
                            str(APP), str(startup), "--specs=rdimon.specs", f"-T{BOARD / 'mps2_an386.ld'}", "-o",
                            str(elf)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run(["qemu-system-arm", "-M", board, "-nographic", "-semihosting", "-kernel", str(elf)],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


# (the Cortex-M0+, without the DSP extension, runs the portable loops, with a product's narrow columns, on the
# Cortex-M3 board: its code is the M3's too)
@pytest.mark.parametrize("target, board, dsp", [("cortex-m4", "mps2-an386", 1), ("cortex-m7", "mps2-an500", 1),
                                                ("cortex-m0plus", "mps2-an385", 0)])
@pytest.mark.parametrize("opt", ["-O3", "-Os"])
def test_the_smlad_kernels_equal_the_portable_loops_on_a_cortex_m(tmp_path, target, board, dsp, opt):
    need(TARGETS[target])
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm not installed (scripts/install.sh, run as root, installs it with apt)")
    out = _run(tmp_path, target, board, opt)
    lines = out.splitlines()
    assert f"dsp {dsp}" in lines, out  # (the DSP path is the one compiled: __ARM_FEATURE_DSP on a Cortex-M4 and M7)
    cases = [line.split() for line in lines if line.startswith("case ")]
    assert len(cases) == 5 * 3 * 5 + 1 + 7 + 4 + 6, out
    assert [c for c in cases if c[-1] != "0"] == [], out
    assert "failed 0" in lines, out
