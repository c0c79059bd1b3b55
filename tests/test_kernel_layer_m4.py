"""The kernel layer on a microcontroller: examples/onnx_cnn's network (two convolutions, pooling, a product)
packaged for cortex-m4, linked into a C99 program with --gc-sections and run on QEMU's mps2-an386 board
(semihosting); its logits against onnxruntime's for the same image. The footprint the build measured is checked
to be there (code, stack) and the app's text to be what the linker kept of the library.

Needs arm-none-eabi-gcc with newlib and qemu-system-arm (scripts/install.sh installs both as root); skips
naming what is missing."""
from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import ort_oracle
import pytest
from conftest import ROOT
from test_kernel_layer import FRAME_BOUND, frames_too_large
from test_targets import build_consumer, need

from ksbuild.compile.targets import TARGETS
from ksbuild.manifest import load_manifest
from ksbuild.packaging.package import kernel_cache, package

APP = ROOT / "tests/cross/baremetal_cnn"
MANIFEST = '''[package]
name = "cnn_m4"

[build]
optimize = "size"

[kernels.cnn]
onnx = "cnn.onnx"

[exports]
cnn = "cnn"
'''


def _image() -> np.ndarray:
    """The image main.c makes."""
    i = np.arange(3 * 16 * 16)
    return (((i * 37) % 101).astype(np.float32) / np.float32(50.0) - np.float32(1.0)).reshape(1, 3, 16, 16)


def _quantize(src, dst) -> None:
    """src quantized by onnxruntime's quantize_static (QDQ, uint8 activations, int8 weights per channel)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.RandomState(0)
            self.batches = iter([{"image": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)


@pytest.mark.parametrize("variant", ["float", "int8"])
def test_the_cnn_runs_on_a_cortex_m4_as_onnxruntime_computes_it(tmp_path, variant):
    """The float network, and the same network quantized to int8 (QDQ: its convolutions and product run on the
    integer kernels' portable loops there), each against onnxruntime running the same model file."""
    need(TARGETS["cortex-m4"])
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm not installed (scripts/install.sh, run as root, installs it with apt)")
    pytest.importorskip("onnxruntime")
    if variant == "int8":
        _quantize(ROOT / "examples/onnx_cnn/cnn.onnx", tmp_path / "cnn.onnx")
    else:
        (tmp_path / "cnn.onnx").write_bytes((ROOT / "examples/onnx_cnn/cnn.onnx").read_bytes())
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    tree = package(tmp_path / "manifest.toml", tmp_path / "dist", target="cortex-m4", progress=lambda s: None)
    info = json.loads((tree / "share/cnn_m4/cnn_m4.json").read_text())
    assert info["footprint"]["text"] > 0 and info["footprint"]["weights"] > 0
    build_consumer(APP, tmp_path / "b", tree / "share/cnn_m4/toolchain.cmake", [tree], "-DKS_SEMIHOSTING=ON")
    run = subprocess.run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-semihosting", "-kernel",
                          str(tmp_path / "b/cnn_app.elf")], capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0 and "status 0" in run.stdout, run.stdout + run.stderr
    got = np.array([float(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("logit ")])
    sess = ort_oracle.session(tmp_path / "cnn.onnx")  # (exact where onnxruntime's u8 x s8 pairs saturate)
    want = sess.run(None, {sess.get_inputs()[0].name: _image()})[0].ravel()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    size = subprocess.run(["arm-none-eabi-size", str(tmp_path / "b/cnn_app.elf")], capture_output=True, text=True,
                          check=True).stdout.splitlines()[1].split()
    assert int(size[0]) < info["footprint"]["text"] + info["footprint"]["weights"] + 64 * 1024, size
    if variant == "float":
        assert _linked_conv_code(tmp_path / "b/cnn_app.elf") == set()
        layer = _kernel_layer_code(tmp_path / "b/cnn_app.elf")
        assert sum(layer.values()) < CNN_LAYER_BYTES, layer


# The float CNN built for size links no convolution code of the kernel layer: its two convolutions and its classifier
# are loop nests in the generated code (prims/conv_loops.py; its batch is symbolic, the nests' run-time bound). Until
# 2026-12-01 the symbolic batch kept them ks::conv_dots (and conv_dots<float, unsigned char>, the literal geometries
# in 8 bits a size): tests/test_conv_loops_m4.py has a network of more distinct convolutions than the nests take,
# which still links those.


# The kernel layer's code the float CNN links, built for size (1.1 KB of ks::conv_dots until its convolutions were
# loop nests of the generated code; 1.6 KB before 2026-11-30, when it read windows inside the image through a table
# of offsets, with a path of its own for those and tiles::dot_epilogue per output channel).
CNN_LAYER_BYTES = 1200


def _kernel_layer_code(elf) -> dict:
    """{function of the kernel layer (namespace ks::ks_kernels_*): bytes} that an app links."""
    rows = subprocess.run(["arm-none-eabi-nm", "-S", "-C", "--defined-only", str(elf)], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    return {r.split(maxsplit=3)[3]: int(r.split()[1], 16) for r in rows
            if len(r.split(maxsplit=3)) == 4 and r.split()[2] in "tTwW" and "ks::ks_kernels_" in r}


def _linked_conv_code(elf) -> set:
    """The convolution functions an app links (demangled, namespace cut)."""
    names = subprocess.run(["arm-none-eabi-nm", "-C", str(elf)], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in names.splitlines():
        for key in ("convs::direct_group<", "convs::packed_group<", "convs::few_dots<", "::conv<float>(",
                    "conv_dots<", "conv_depthwise<", "tiles::block<"):
            if key in line:
                name = line[line.index(key.lstrip(":")):]
                found.add(name[:name.index(">") + 1] if ">" in name else name)
    return found


@pytest.mark.parametrize("variant", ["float", "int8"])
def test_no_kernel_layer_function_has_a_frame_above_the_bound_on_a_cortex_m4(tmp_path, variant):
    """The kernel layer's frames as the network's Cortex-M4 build compiles it (size-optimized; the integer kernels
    too for the quantized network), against tests/test_kernel_layer.py's FRAME_BOUND with no exception (issue 36:
    no frame above 512 B on a microcontroller); and its objects call no 64-bit division."""
    need(TARGETS["cortex-m4"])
    if variant == "int8":
        pytest.importorskip("onnxruntime")
        _quantize(ROOT / "examples/onnx_cnn/cnn.onnx", tmp_path / "cnn.onnx")
    else:
        (tmp_path / "cnn.onnx").write_bytes((ROOT / "examples/onnx_cnn/cnn.onnx").read_bytes())
    (tmp_path / "manifest.toml").write_text(MANIFEST)
    package(tmp_path / "manifest.toml", tmp_path / "dist", target="cortex-m4", progress=lambda s: None)
    cache = kernel_cache(load_manifest(tmp_path / "manifest.toml"), TARGETS["cortex-m4"])
    graphs = sorted(cache.glob("kernels_*.ci"))  # (the float kernels, and the integer ones' object of their own)
    assert graphs and (variant == "float" or any(g.name.endswith("_int8u.ci") for g in graphs)), sorted(cache.iterdir())
    # (on the M4 the int8 depthwise kernel's frame was the largest, 488-496 B at -O3; 328 B since 2026-11-29)
    assert FRAME_BOUND == 512 and not frames_too_large(graphs, bound=lambda name: FRAME_BOUND)
    # No 64-bit division (libgcc's __aeabi_ldivmod / __aeabi_uldivmod: 0.7 KB of flash, ~100 instructions a call):
    # indices are divided in 32 bits on a 32-bit target (ks::tiles::index_div).
    for obj in (g.with_suffix(".o") for g in graphs):
        undefined = subprocess.run(["arm-none-eabi-nm", "-u", str(obj)], capture_output=True, text=True,
                                   check=True).stdout
        assert "ldivmod" not in undefined, (obj.name, [u for u in undefined.split() if "div" in u])


def test_a_tile_without_a_vector_unit_computes_in_scalar_registers(tmp_path):
    """On a core without a vector unit the tiles' "vectors" are the element type itself: as a 1-lane vector type
    GCC kept every accumulator of a Cortex-M4 tile in memory (126 instructions per k step of a panel, about
    twice emx-onnx-cgen's instructions per inference; benchmarks/README.md, Cortex-M4). Compiled for the
    Cortex-M4, the register tile's vector type must be the element type."""
    m4 = TARGETS["cortex-m4"]
    need(m4)
    src = tmp_path / "lane.cpp"
    src.write_text('#include "ks/gemm.h"\n#include <type_traits>\n'
                   "static_assert(std::is_same<ks::tiles::simd<float>::v, float>::value, \"one lane is a float\");\n"
                   "static_assert(std::is_same<ks::tiles::simd<double>::v, double>::value,"
                   " \"one lane is a double\");\n")
    proc = subprocess.run([m4.cxx, "-std=c++17", *m4.flags, "-O2", "-fsyntax-only", "-I", str(ROOT / "prelude"),
                           str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _kernel_layer_symbols(tmp_path, part: str) -> str:
    """`nm -S -C` of a part of the kernel layer (products32, convs32: ks/kernels.h) compiled for a Cortex-M4 at -O3, as
    the generated projects compile it."""
    m4 = TARGETS["cortex-m4"]
    need(m4)
    obj = tmp_path / f"kernels_{part}.o"
    subprocess.run([m4.cxx, "-std=c++17", *m4.flags, "-O3", "-ffunction-sections", "-fno-exceptions", "-fno-rtti",
                    "-fno-math-errno", "-fno-trapping-math", "-fwrapv", "-DNDEBUG", f"-DKS_KERNELS_{part.upper()}",
                    "-I", str(ROOT / "prelude"), "-c", str(ROOT / "prelude/ks/kernels.cpp"), "-o", str(obj)],
                   check=True)
    return subprocess.run(["arm-none-eabi-nm", "-S", "-C", str(obj)], capture_output=True, text=True,
                          check=True).stdout


def test_a_block_of_tiles_is_small_and_called_on_a_cortex_m4(tmp_path):
    """A partial tile's stores tested their columns in 64-bit arithmetic (a 1 x 16 tile: 16 chains of compares), and
    GCC inlined the block of tiles into each product and convolution that uses it: 5.6 KB of a Cortex-M4's flash each
    at -O3 (benchmarks/README.md, Cortex-M4). With one lane the stores test 32-bit column numbers, and on an M-profile
    core the block is one out-of-line function (KS_BLOCK): compiled as the kernel layer is, 2.0-2.7 KB (3.9-4.1 KB
    with the 64-bit tests), and one copy of each (GCC had cloned it per caller). (The convolutions' part: the products
    have no tiles there.)"""
    listing = _kernel_layer_symbols(tmp_path, "convs32")
    blocks = [line.split(" ", 3) for line in listing.splitlines() if "tiles::block<float, " in line]
    names = [b[3] for b in blocks]
    assert len(blocks) == 4 and len(set(names)) == 4, names  # (true/false x panel_rows/table_rows, no clones)
    # (3200: the epilogue's call of an affine epilogue over what the block stored, ks::epilogue::apply_simple,
    # added 100-300 B per block, 2026-11-28)
    assert all(int(b[1], 16) < 3200 for b in blocks), [(b[3][:80], int(b[1], 16)) for b in blocks]


def test_products_on_a_cortex_m4_are_dot_products(tmp_path):
    """Without a vector unit ks::packed_gemm and ks::tiled_gemm are dot products (ks::tiles::panel_dots, dot_rows), not
    register tiles: the 1 x 16 tile's block (2.4 KB at -O3), packed_gemm around it (1.6 KB) and tiled_gemm's packing
    and in_place (5.7 KB) were most of a small network's code on a Cortex-M4 (benchmarks/README.md, Cortex-M4).
    Compiled as the kernel layer's products are at -O3: both entry points only forward, and all their code is under
    2.4 KB."""
    listing = _kernel_layer_symbols(tmp_path, "products32")
    sizes = {line.split(" ", 3)[3]: int(line.split(" ", 3)[1], 16) for line in listing.splitlines()
             if line.count(" ") >= 3 and "<float" in line}
    entries = {name: size for name, size in sizes.items() if "::packed_gemm<float>(" in name or
               "::tiled_gemm<float>(" in name}
    assert len(entries) == 2 and all(size < 160 for size in entries.values()), entries
    dots = {name: size for name, size in sizes.items() if "tiles::panel_dot" in name or "tiles::dot_" in name}
    assert any("panel_dots<float>" in name for name in dots) and sum(dots.values()) < 2400, dots
