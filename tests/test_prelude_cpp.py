"""The C++ tests of the prelude (tests/cpp): built with the repository's CMakeLists.txt and run
with ctest. test_prelude checks ipow, floor division, modulo, selects against Python semantics;
test_vmath measures ks::exp and ks::log against libm (at most 2 ulp) and their special values;
test_gemm_conv checks ks::tiled_gemm, ks::packed_gemm and ks::conv against written-out loops; test_qconv (one
program: the best tile with 60 random trials per type pair, then capped at AVX2 and at the portable loops with 20
each) the integer kernels of ks/qconv.h. The builds of the register tiles for this machine's instruction set are
tests/test_prelude_cpp_tiles.py's: the two halves take about as long, and two workers of the suite share them."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT

from ksbuild.compile.cmake import cmake_exe


def run_prelude_tests(tmp_path: Path, part: str) -> None:
    """Configure the repository's CMake project, build the test programs labelled `part`, run them (ctest -L)."""
    build = tmp_path / "build"
    subprocess.run([cmake_exe(), "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   capture_output=True)
    subprocess.run([cmake_exe(), "--build", str(build), "-j", "2", "--target", f"prelude_tests_{part}"], check=True,
                   capture_output=True)
    ctest = subprocess.run([str(Path(cmake_exe()).with_name("ctest")), "--test-dir", str(build), "-L", f"^{part}$",
                            "--no-tests=error", "--output-on-failure"], capture_output=True, text=True)
    assert ctest.returncode == 0, ctest.stdout + ctest.stderr


def test_prelude_cpp_tests_pass(tmp_path):
    run_prelude_tests(tmp_path, "scalar")
