"""The C++ tests of the prelude's register tiles (tests/cpp/test_gemm_conv.cpp, CMakeLists.txt): its _native build
for this machine's instruction set (AVX-512 or AVX2 where it has them: their tiles and the rows they pad) and,
where that is not AVX-512, a _wide build with AVX-512's register tile on the baseline's vectors too (the two then
on a random third of the checks). The other half of the prelude's C++ tests is tests/test_prelude_cpp.py's."""
from __future__ import annotations

from test_prelude_cpp import run_prelude_tests


def test_prelude_cpp_tile_tests_pass(tmp_path):
    run_prelude_tests(tmp_path, "tiles")
