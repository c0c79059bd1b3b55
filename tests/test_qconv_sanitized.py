"""The integer kernels (tests/cpp/test_qconv.cpp: ks::qconv, ks::qconv_depthwise, ks::qmatmul against written-out
loops) built with AddressSanitizer and UBSan, with this machine's best tile and capped at the portable loops, so that
a kernel reading or writing past its buffers fails (its vectors and images are sized exactly, on the heap). Before the
twenty-second session the AVX2 level's stride-2 copy into the phase volumes read one byte past an input row whose
copy was a whole number of 16-byte steps (copy_bytes), past the input when that row was the last one."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT


def test_the_integer_kernels_stay_within_their_buffers(tmp_path):
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "test_qconv"
    # (no -g: 28 instead of 43 s of CPU to compile; a failure still names the functions, add -g to see the lines)
    subprocess.run([cxx, "-std=c++17", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-fno-math-errno", f"-I{ROOT / 'prelude'}", str(ROOT / "tests/cpp/test_qconv.cpp"), "-o",
                    str(exe)], check=True)
    run = subprocess.run([str(exe), "20", "4"], capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert " 0 failures" in run.stdout, run.stdout
