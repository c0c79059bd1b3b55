"""The kernel layer (prelude/ks/kernels.h, src/ks/kernels.cpp) and what a build reports about its library.

- The GEMM and convolution kernels are compiled once per target, level, flags and part (products, convs, int8; each
  per element type, the int8 part per activation type) and taken from the cache by every later package: a second
  package's build compiles only its own source and the parts no earlier build needed.
- Each library keeps the kernel layer to itself (local symbols): two packages linked into one C program link
  and compute what numpy computes.
- The footprint: section sizes and each export's stack, from GCC's call graphs (ksbuild/compile/footprint.py),
  in share/P/P.json and the header; the call-graph arithmetic against hand-written graphs.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ksbuild.compile.footprint import CallGraph, stack_usage

KERNELS = '''
import torch
import torch.nn.functional as F


def dense(x: "float[n, 12]", w: "float[12, 20]", b: "float[20]") -> "float[n, 20]":
    return torch.relu(x @ w + b)


def conv(x: "float[n, 3, 10, 9]", w: "float[8, 3, 3, 3]", b: "float[8]") -> "float[n, 8, 10, 9]":
    return torch.tanh(F.conv2d(x, w, b, padding=1))
'''

MANIFEST = '''[package]
name = "{name}"

[kernels.{kernel}]
python = "k.py:{kernel}"

[exports]
{kernel} = "{kernel}"
'''

APP = r'''
#include <stdio.h>
#include <stdlib.h>
#include "kl_dense.h"
#include "kl_conv.h"

/* reads x, w, b of each package from stdin, prints both results */
static void read_all(float* p, int n) { for (int i = 0; i < n; ++i) if (scanf("%f", &p[i]) != 1) exit(3); }

int main(void) {
    static float x1[2 * 12], w1[12 * 20], b1[20], y1[2 * 20];
    static float x2[2 * 3 * 10 * 9], w2[8 * 3 * 3 * 3], b2[8], y2[2 * 8 * 10 * 9];
    read_all(x1, 2 * 12); read_all(w1, 12 * 20); read_all(b1, 20);
    read_all(x2, 2 * 3 * 10 * 9); read_all(w2, 8 * 3 * 3 * 3); read_all(b2, 8);
    void* ws1 = malloc(kl_dense_dense_workspace_size(2) + 16);
    void* ws2 = malloc(kl_conv_conv_workspace_size(2) + 16);
    if (kl_dense_dense(2, x1, w1, b1, y1, ws1) != 0 || kl_conv_conv(2, x2, w2, b2, y2, ws2) != 0) return 2;
    for (int i = 0; i < 2 * 20; ++i) printf("%.9g\n", y1[i]);
    for (int i = 0; i < 2 * 8 * 10 * 9; ++i) printf("%.9g\n", y2[i]);
    free(ws1); free(ws2);
    return 0;
}
'''


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """Two packages with a product and a convolution (kl_dense calls both: the whole float layer's object, which
    kl_conv's build takes), installed with `ksbuild package` one after the other; (install trees, progress lines)."""
    from ksbuild.packaging.package import package
    root = tmp_path_factory.mktemp("kernel_layer")
    out, lines = {}, {}
    for name, kernel in (("kl_dense", "dense"), ("kl_conv", "conv")):
        d = root / name
        d.mkdir()
        (d / "k.py").write_text(KERNELS)
        # (a comment naming the pytest-xdist worker gives each worker cache keys of its own, so that its kl_conv is
        # built here, not found in the cache when another worker that runs this module built it first)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        text = MANIFEST.format(name=name, kernel=kernel)
        if name == "kl_dense":  # (a convolution too: its build compiles the whole float layer, which kl_conv takes)
            text = text.replace('dense = "dense"', 'dense = "dense"\nconv = "conv"') + \
                '\n[kernels.conv]\npython = "k.py:conv"\n'
        (d / "manifest.toml").write_text(text + f"\n# {worker}\n")
        said: list[str] = []
        out[name] = package(d / "manifest.toml", root / "dist" / name, progress=said.append)
        lines[name] = said
    return out, lines


def test_the_second_package_takes_the_kernel_layer_from_the_cache(trees):
    out, lines = trees
    said = "\n".join(lines["kl_conv"])
    assert "compiling kl_conv.cpp" in said, said  # (the package's own source is compiled)
    assert "the kernel layer" not in said, said  # (kl_dense's build compiled it)
    cached = list((Path(os.environ["KSBUILD_CACHE"]) / "kernels").glob("*/kernels_*_convs*.o"))
    assert cached, "no kernel layer objects in the cache"


def test_a_package_compiles_the_parts_it_calls():
    """render.kernel_parts: products alone for matrix products (and the BLAS backend's ks::gemm, which falls back to
    them), the whole layer of a type (convs) for a convolution or a pooling with or without products, the integer
    kernels beside either, nothing for loops alone; each part for the element types the calls name (32: float, 64:
    double; int8u: uint8_t activations, int8s: int8_t ones), all for a type it cannot tell."""
    from ksbuild.packaging.render import kernel_objects, kernel_parts
    assert kernel_parts("ks::tiled_gemm<float>(m, n, k, a, b, c)") == ("products32",)
    assert kernel_parts("ks::gemm<double>(m, n, k, a, b, c, false)") == ("products64",)
    assert kernel_parts("ks::packed_gemm<float>(..); ks::conv_as<float, ks::convs::method::few>(..)") == ("convs32",)
    assert kernel_parts("ks::max_pool<float>(s, 1, x, y, room)") == ("convs32",)
    assert kernel_parts("ks::qmatmul<uint8_t, int8_t>(..); ks::tiled_gemm<float>(..)") == ("products32", "int8u")
    assert kernel_parts("ks::qconv<int8_t, uint8_t>(..); ks::qlookup<int8_t, int8_t>(..)") == ("int8s",)
    assert kernel_parts("ks::qsoftmax<uint8_t>(..); ks::qconv_depthwise<int8_t, int8_t>(..)") == ("int8u", "int8s")
    assert kernel_parts("ks::qmatmul<TX, uint8_t>(..)") == ("int8u", "int8s")
    assert kernel_parts("ks::qpack_rows(m, k, 1, w, out)") == ()  # (an inline function of the package's code)
    assert kernel_parts("ks::parts::tiled_gemm<float>(part, parts, slot, ..); ks::parts::product_parts<float>(..)") == (
        "products32",)  # (threads = N: a part of a product needs the products alone)
    assert kernel_parts("ks::parts::conv_parts<float>(..); ks::parts::depthwise<float>(..)") == ("convs32",)
    assert kernel_parts("for (int64_t i = 0; i < n; ++i) y[i] = ks::max<float>(x[i], 0.0f);") == ()
    assert kernel_parts("ks::tiled_gemm<double>(..); ks::conv<float>(..)") == ("products64", "convs32")
    assert kernel_parts("ks::tiled_gemm<double>(..); ks::conv<float>(..); ks::conv<double>(..)") == (
        "convs32", "convs64")
    assert kernel_parts("ks::tiled_gemm<T>(..)") == ("products32", "products64")
    from ksbuild.compile.cmake import _compile_step
    line = "[ 40%] Building CXX object CMakeFiles/p_kernels_x86_64_v3_{}.dir/src/ks/kernels.cpp.o"
    assert _compile_step(line.format("convs32")) == "the kernel layer's float convolutions (x86-64-v3)"
    assert _compile_step(line.format("products64")) == "the kernel layer's double matrix products (x86-64-v3)"
    assert _compile_step(line.format("int8u")) == "the kernel layer's integer kernels of uint8 activations (x86-64-v3)"
    assert _compile_step(line.format("int8s_own")) == (
        "the kernel layer's integer kernels of int8 activations, its level's tiles alone (x86-64-v3)")
    assert kernel_objects(("x86-64", "x86-64-v3", "x86-64-v4"), "", ("convs32", "int8u")) == [
        "kernels_x86_64_convs32.o", "kernels_x86_64_int8u_own.o", "kernels_x86_64_v3_convs32.o",
        "kernels_x86_64_v3_int8u_own.o", "kernels_x86_64_v4_convs32.o", "kernels_x86_64_v4_int8u.o"]
    assert kernel_objects((), "x86-64", ("int8s",)) == ["kernels_x86_64_int8s.o"]  # (one level: every tile)


def test_two_packages_link_into_one_c_program_and_compute_what_numpy_does(trees, tmp_path):
    out, _ = trees
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    exe = tmp_path / "app"
    (tmp_path / "app.c").write_text(APP)
    libs = [str(out[n] / "lib" / f"lib{n}.a") for n in ("kl_dense", "kl_conv")]
    subprocess.run([cc, "-std=c99", "-O1", str(tmp_path / "app.c"), *[f"-I{out[n] / 'include'}" for n in out],
                    *libs, "-lm", "-o", str(exe)], check=True, capture_output=True, text=True)
    rng = np.random.default_rng(3)
    x1, w1, b1 = rng.standard_normal((2, 12)), rng.standard_normal((12, 20)), rng.standard_normal(20)
    x2, w2, b2 = rng.standard_normal((2, 3, 10, 9)), rng.standard_normal((8, 3, 3, 3)), rng.standard_normal(8)
    data = "\n".join(f"{v:.9g}" for a in (x1, w1, b1, x2, w2, b2) for v in a.astype(np.float32).ravel())
    run = subprocess.run([str(exe)], input=data, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = np.array([float(v) for v in run.stdout.split()])
    f32 = [a.astype(np.float32).astype(np.float64) for a in (x1, w1, b1, x2, w2, b2)]
    want1 = np.maximum(f32[0] @ f32[1] + f32[2], 0)
    xp = np.pad(f32[3], ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # [n, c, 10, 9, 3, 3]
    want2 = np.tanh(np.einsum("nchwij,mcij->nmhw", windows, f32[4]) + f32[5][None, :, None, None])
    np.testing.assert_allclose(got[:40], want1.ravel(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[40:], want2.ravel(), rtol=1e-5, atol=1e-5)


def test_a_debug_build_compiles_its_own_code_for_debugging_and_takes_the_speed_kernels(trees):
    """optimize = "debug" (here through ksbuild.build): the package's source at -Og -g, the kernel layer the speed
    build's objects from the cache (no kernel compile), the values those of numpy."""
    import ksbuild
    out, _ = trees
    manifest = out["kl_dense"].parent.parent / "kl_dense" / "manifest.toml"
    from ksbuild.packaging.package import package
    said: list[str] = []
    tree = package(manifest, out["kl_dense"].parent / "kl_dense_debug", optimize="debug", progress=said.append)
    assert "compiling kl_dense.cpp" in "\n".join(said) and "the kernel layer" not in "\n".join(said), said
    info = subprocess.run(["readelf", "--debug-dump=info", str(tree / "lib" / "libkl_dense.a")], capture_output=True,
                          text=True).stdout
    producers = set(re.findall(r"DW_AT_producer .*?: (GNU C\+\+.*)", info))
    assert producers and all(" -Og" in p for p in producers), producers  # (only the package's own object has -g)
    pkg = ksbuild.build(manifest, optimize="debug", quiet=True)
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((3, 12), (12, 20), (20,)))
    np.testing.assert_allclose(pkg.dense(x, w, b), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ksbuild.KsbuildError, match="unknown optimize 'fast'; valid: speed, size, debug"):
        ksbuild.build(manifest, optimize="fast")


def test_kernel_layer_symbols_are_local_to_each_library(trees):
    out, _ = trees
    for name, tree in out.items():
        listing = subprocess.run(["nm", "-C", "--defined-only", str(tree / "lib" / f"lib{name}.a")],
                                 capture_output=True, text=True, check=True).stdout
        kernel = [line for line in listing.splitlines() if "ks::ks_kernels" in line]
        assert kernel, f"{name}: no kernel layer in the library"
        assert all(line.split()[1].islower() for line in kernel), [x for x in kernel if not x.split()[1].islower()]


def test_the_footprint_is_in_the_description_and_the_header(trees):
    out, _ = trees
    for name, tree in out.items():
        info = json.loads((tree / "share" / name / f"{name}.json").read_text())
        sizes = info["footprint"]
        assert sizes["text"] > 0 and sizes["weights"] == 0, sizes
        header = (tree / "include" / f"{name}.h").read_text()
        for export in info["exports"].values():
            if shutil.which("g++") and info["footprint"]["stack_measured"]:
                assert isinstance(export["stack_bytes"], int) and export["stack_bytes"] > 0, export
                assert re.search(rf"\b{export['symbol']} +{export['stack_bytes']} bytes", header), export


# The largest stack frame a kernel-layer function may have, in bytes (issue 36: scratch in the workspace,
# accumulators in registers; the register tiles' frames were 1.2-3 KB before KS_UNROLL). Every float and double
# kernel is under it on the three x86-64 levels (2026-11-28: the largest 448, 496 and 504 B) and on Cortex-M4
# (tests/test_kernel_layer_m4.py): the tiles compute their rows' addresses per tile (tiles::fresh), and the parts
# whose values GCC kept beside a caller's are out of line (KS_OWN_FRAME; docs/performance.md, "Stack and
# footprint"). The integer kernels too (test_integer_kernel_frames_are_under_the_bound; their depthwise kernels had
# 520-968 B until 2026-11-29).
FRAME_BOUND = 512


def frame_bound(name: str) -> int:
    """The bound of a kernel-layer function's frame, by its demangled name."""
    return FRAME_BOUND


def frames_too_large(graphs: list[Path], bound=frame_bound) -> dict:
    """The functions of the call graphs (.ci files) whose frames are unbounded or above their bound (by default
    frame_bound's), demangled."""
    g = CallGraph()
    for ci in graphs:
        g.read(ci)
    assert len(g.frames) > 20, graphs  # (the graphs were read: a Cortex-M4's int8u object alone has 28 functions)
    named = _demangled(g.frames)
    return {name: frame for name, frame in named.items() if frame is None or frame > bound(name)}


def test_no_kernel_layer_function_has_a_frame_above_the_bound(trees):
    """The kernel layer's own call graphs (the cached objects' .ci files, every level the packages built): each
    function's frame, named when it is too large. A frame grows when a tile's accumulators, indexed by a loop GCC
    did not unroll, move from registers into the stack (ks/gemm.h: micro), or when long helpers inlined into one
    function spill their values beside its own (ks::qconv and ks::conv call theirs out of line)."""
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.package import kernel_cache, resolve_target
    out, _ = trees
    manifest = out["kl_conv"].parent.parent / "kl_conv" / "manifest.toml"
    m = load_manifest(manifest)
    graphs = sorted(kernel_cache(m, resolve_target(m, None)).glob("kernels_*.ci"))
    if not graphs:
        pytest.skip("the compiler wrote no call graphs (-fcallgraph-info: GCC 10 and later)")
    assert not frames_too_large(graphs)


KERNEL_FLAGS = ["-fno-trapping-math", "-fwrapv", "-fopenmp-simd", "-DKS_OPENMP_SIMD"]
"""templates/CMakeLists.txt.j2's flags that change the code GCC makes (-fopenmp-simd: an `omp simd` reduction keeps
per-lane arrays on the stack, which made ks::qsoftmax's frame 648 B, and without it 328 B)."""


@pytest.mark.parametrize("level", ["x86-64", "x86-64-v3", "x86-64-v4"])
def test_integer_kernel_frames_are_under_the_bound(level, tmp_path):
    """ks/qconv.h's kernels (the integer layer the packages here do not compile; with int32 and float sums, and
    ks::qsoftmax) instantiated as kernels.cpp does and compiled at -O3 for an x86-64 level: every frame at most
    FRAME_BOUND (the AVX-512 paths are compiled at every level, by their target attributes)."""
    if not shutil.which("g++") or os.uname().machine != "x86_64":
        pytest.skip("needs g++ on an x86-64 host")
    source = tmp_path / "q8.cpp"
    source.write_text('#include "ks/qconv.h"\nnamespace ks {\ninline namespace KS_KERNELS {\n' +
                      "".join(f"KS_QUANT_LAYER(template, {a}, {b})\n" for a in ("uint8_t", "int8_t")
                              for b in ("uint8_t", "int8_t")) +
                      "".join(f"KS_QSUMS_LAYER(template, {a})\n" for a in ("uint8_t", "int8_t")) + "}\n}\n")
    prelude = Path(__file__).resolve().parent.parent / "prelude"
    subprocess.run(["g++", "-std=c++17", "-O3", "-DNDEBUG", "-fPIC", "-fno-math-errno", f"-march={level}",
                    *KERNEL_FLAGS,
                    "-fcallgraph-info=su", f"-I{prelude}", "-c", str(source), "-o", str(tmp_path / "q8.o")],
                   check=True, cwd=tmp_path)
    too_large = frames_too_large([tmp_path / "q8.ci"])
    assert not too_large, too_large


def _demangled(frames: dict) -> dict:
    names = subprocess.run(["c++filt"], input="\n".join(frames), capture_output=True, text=True).stdout.split("\n")
    return {n: f for n, f in zip(names, frames.values())}


def _graph(text: str, tmp_path: Path) -> CallGraph:
    (tmp_path / "a.ci").write_text(text)
    g = CallGraph()
    g.read(tmp_path / "a.ci")
    return g


def _node(title: str, frame: str) -> str:
    return f'node: {{ title: "x.cpp:{title}" label: "{title}\\nx.cpp:1:1\\n{frame}" }}\n'


def _edge(a: str, b: str) -> str:
    return f'edge: {{ sourcename: "x.cpp:{a}" targetname: "{b}" }}\n'


def test_the_deepest_chain_counts_frames_and_indirect_calls_as_the_deepest_epilogue(tmp_path):
    run = "_ZN2ks3k109run_blockIfZ1fvEUlllfE_Lb0EEEvPKvlllPT_llll"
    g = _graph(_node("top", "16 bytes (static)") + _node("mid", "32 bytes (static)") + _node("leaf", "8 bytes (static)")
               + _node(run, "40 bytes (static)") + _edge("top", "mid") + _edge("top", "leaf")
               + _edge("mid", "__indirect_call") + _edge("leaf", "memcpy"), tmp_path)
    assert g.deepest("top") == 16 + 32 + 40
    assert g.deepest("leaf") == 8  # (memcpy: not counted)


def test_a_part_a_thread_pool_runs_counts_as_an_indirect_call(tmp_path):
    """threads = N: the export calls ks::pool::run's trampoline through a pointer (and runs parts itself); the part's
    chain (the generated lambda, a kernel, its epilogue run) is the deepest indirect call. Names as GCC mangles them
    (tests/test_threads.py builds a real one)."""
    run = "_ZN2ks3k109run_blockIfZ1fvEUlllfE_Lb0EEEvPKvlllPT_llll"
    part = "_ZZN2ks3k104pool3runIZ1fvEUliiE_EEviiRKT_ENUlPKviiE_4_FUNESD_ii"
    g = _graph(_node("top", "16 bytes (static)") + _node(part, "24 bytes (static)")
               + _node("kernel", "96 bytes (static)") + _node(run, "40 bytes (static)")
               + _edge("top", "__indirect_call") + _edge(part, "kernel")
               + _edge("kernel", "__indirect_call"), tmp_path)
    assert g.deepest("top") == 16 + 24 + 96 + 40


def test_recursion_and_unbounded_frames_are_unknown(tmp_path):
    g = _graph(_node("a", "16 bytes (static)") + _node("b", "16 bytes (static)") + _node("c", "64 bytes (dynamic)")
               + _edge("a", "b") + _edge("b", "a") + _edge("c", "a"), tmp_path)
    assert g.deepest("a") is None and g.deepest("c") is None


def test_an_export_without_a_call_graph_is_unknown_not_zero(tmp_path):
    (tmp_path / "a.ci").write_text(_node("f", "16 bytes (static)"))
    assert stack_usage([tmp_path], ["f", "g"]) == {"f": 16, "g": None}
    assert stack_usage([tmp_path / "none"], ["f"]) == {}


def test_optimize_size_is_one_level_at_os_and_smaller(tmp_path):
    """[build] optimize = "size": the library is compiled once (the target's baseline) with -Os, kernel layer
    included, and its code is smaller than the default's; the values are the same. A bad value names the key."""
    from ksbuild.errors import KsbuildError
    from ksbuild.manifest import load_manifest
    from ksbuild.packaging.package import package
    trees = {}
    for optimize in ("speed", "size"):
        d = tmp_path / optimize
        d.mkdir()
        (d / "k.py").write_text(KERNELS)
        (d / "manifest.toml").write_text(MANIFEST.format(name="kl_opt", kernel="conv") +
                                         f'\n[build]\noptimize = "{optimize}"\n')
        trees[optimize] = package(d / "manifest.toml", tmp_path / "dist" / optimize, progress=lambda s: None)
    cmake = (trees["size"] / "share" / "kl_opt" / "src").parent
    sizes = {o: json.loads((t / "share/kl_opt/kl_opt.json").read_text())["footprint"]["text"] for o, t in trees.items()}
    assert sizes["size"] < sizes["speed"], sizes
    assert not (cmake / "src" / "kl_opt_dispatch.cpp").exists()  # (one build, no run-time choice of level)
    import ksbuild
    pkg = ksbuild.build(tmp_path / "size" / "manifest.toml")
    rng = np.random.default_rng(5)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 10, 9), (8, 3, 3, 3), (8,)))
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    want = np.tanh(np.einsum("nchwij,mcij->nmhw", windows.astype(np.float64), w) + b[None, :, None, None])
    np.testing.assert_allclose(pkg.conv(x, w, b), want, rtol=1e-5, atol=1e-5)
    bad = tmp_path / "bad.toml"
    bad.write_text('[package]\nname = "p"\n[build]\noptimize = "fast"\n')
    with pytest.raises(KsbuildError, match="optimize") as info:
        load_manifest(bad)
    assert info.value.loc.line == 4


def test_ksbuild_build_says_what_it_compiles_on_stderr_and_nothing_when_cached(tmp_path, capfd):
    """Progress from the Python API: a line per compiled object on stderr (issue: nothing was printed for minutes);
    a cache hit is silent; quiet=True is silent."""
    import ksbuild
    (tmp_path / "k.py").write_text(KERNELS)
    (tmp_path / "manifest.toml").write_text(MANIFEST.format(name="kl_progress", kernel="dense"))
    ksbuild.build(tmp_path / "manifest.toml")
    first = capfd.readouterr()
    assert "compiling kl_progress.cpp" in first.err and first.out == "", first
    ksbuild.build(tmp_path / "manifest.toml")
    assert capfd.readouterr() == ("", "")


SCALAR = '''
def relu3(x: float) -> float:
    if x < 0.0:
        return 0.0
    elif x < 1.0:
        return x * x * x / 3.0
    return x - 2.0 / 3.0
'''


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs GCC")
def test_the_prelude_is_precompiled_once_and_gives_the_same_object(tmp_path):
    """With a kernel cache and GCC, a package's objects read ks/prelude.h and ks/kernels.h from prelude_<level>.h.gch
    (CMakeLists.txt: P_precompiled_prelude): the first project of a level only marks it wanted (one build in a fresh
    cache does not pay for it), the second compiles it into the cache, a third package reads it from there (the headers in a .gch are not among the dependencies GCC writes for an object, and it warns
    under -Winvalid-pch when it cannot read one), and each object is byte for byte the one compiled without it."""
    import sys

    from ksbuild.compile.cmake import cmake_exe
    cmake, cache = cmake_exe(), tmp_path / "cache"

    def build(name: str, kernel_cache: Path | None, folder: str = "build_cached") -> tuple[Path, str]:
        d = tmp_path / name
        if not d.exists():
            d.mkdir()
            (d / "k.py").write_text(SCALAR)
            (d / "manifest.toml").write_text(MANIFEST.format(name=name, kernel="relu3"))
            subprocess.run([sys.executable, "-m", "ksbuild", "-q", "render", str(d / "manifest.toml"), "-o",
                            str(d / "project")], check=True)
        b = d / (folder if kernel_cache else "build_plain")
        subprocess.run([cmake, "-S", str(d / "project"), "-B", str(b), "-DCMAKE_BUILD_TYPE=Release",
                        f"-D{name}_KERNEL_CACHE={kernel_cache or ''}"], check=True, capture_output=True)
        run = subprocess.run([cmake, "--build", str(b), "-j", "2"], check=True, capture_output=True, text=True)
        return b, run.stdout + run.stderr

    build("pch_a", cache)
    assert not list(cache.glob("prelude_*.h.gch")) and list(cache.glob("prelude_*.wanted")), list(cache.iterdir())
    _, said = build("pch_a", cache, "build_again")
    assert "_prelude_" in said, said
    headers = sorted(p.name for p in cache.glob("prelude_*.h.gch"))
    assert headers, sorted(p.name for p in cache.iterdir())
    second, said = build("pch_b", cache)
    assert "invalid-pch" not in said and "not used because" not in said, said
    assert "_prelude_" not in said, said  # (not compiled again: taken from the cache)
    objects = sorted(second.glob("CMakeFiles/*/src/pch_b.cpp.o"))
    assert len(objects) == len(headers), (objects, headers)
    for o in objects:  # (a header read from a .gch is not among the object's dependencies: <cmath>, ks/prelude.h's)
        assert "/cmath" not in Path(f"{o}.d").read_text(), o
    plain, _ = build("pch_b", None)
    for o in objects:
        assert "/cmath" in (plain / o.relative_to(second)).with_suffix(".o.d").read_text(), o
        assert (plain / o.relative_to(second)).read_bytes() == o.read_bytes(), o
