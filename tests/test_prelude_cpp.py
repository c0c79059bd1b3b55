"""The C++ tests of the prelude (tests/cpp): built with the repository's CMakeLists.txt and run
with ctest. test_prelude checks ipow, floor division, modulo, selects against Python semantics;
test_vmath measures ks::exp and ks::log against libm (at most 2 ulp) and their special values;
test_gemm_conv checks ks::tiled_gemm, ks::packed_gemm and ks::conv against written-out loops, and so does its
_native build for this machine's instruction set; where that is not AVX-512, a _wide build with AVX-512's register
tile on the baseline's vectors too (the two then on a random third of the checks: CMakeLists.txt); test_qconv (one
program: the best tile with 60 random trials per type pair, then capped at AVX2 and at the portable loops with 20
each) the integer kernels of ks/qconv.h."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT

from ksbuild.compile.cmake import cmake_exe


def test_prelude_cpp_tests_pass(tmp_path):
    build = tmp_path / "build"
    subprocess.run([cmake_exe(), "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   capture_output=True)
    subprocess.run([cmake_exe(), "--build", str(build), "-j", "2", "--target", "prelude_tests"], check=True,
                   capture_output=True)
    ctest = subprocess.run([str(Path(cmake_exe()).with_name("ctest")), "--test-dir", str(build), "--output-on-failure"],
                           capture_output=True, text=True)
    assert ctest.returncode == 0, ctest.stdout + ctest.stderr
