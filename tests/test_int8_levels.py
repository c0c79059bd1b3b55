"""The int8 kernel layer of a portable x86-64 build (issue 36: its compile): one object per activation type, and below
the highest level objects that hold their level's register tiles alone (ks/qconv.h: KS_QTILE_OWN_LEVEL).

- A package of uint8 activations (what onnxruntime's quantize_static writes) compiles the int8u part alone.
- The lower levels' int8 objects have names of their own (kernels_<level>_int8u_own.o) and lack the tiles of the
  levels above them: the x86-64 object has neither the AVX2 nor the AVX-512 VNNI tiles, the x86-64-v3 one no VNNI
  tile; the highest level's object holds them all (and is the one a build for cpu = "x86-64-v4" takes).
- Every level this CPU has, chosen with <package>_CPU_LEVEL_MAX (which caps the exports' level, and so runs a lower
  level's object on a newer CPU, now with that level's own tiles), computes what onnxruntime does, bit for bit.
"""
from __future__ import annotations

import subprocess

import numpy as np
import ort_oracle
import pytest

from ksbuild.compile.cmake import cmake_exe
from ksbuild.compile.targets import TARGETS, X86_64_LEVELS, cpu_variants, host_level
from ksbuild.manifest import load_manifest
from ksbuild.packaging.package import kernel_cache, render
from ksbuild.packaging.render import kernel_parts
from ksbuild.packaging.runtime import Package

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_variants(TARGETS["host"], "", "plain"),
                                reason="needs an x86-64 host whose compiler knows -march=x86-64-v4")
RNG = np.random.RandomState(3)
U8 = TensorProto.UINT8


def _model(node, x_shape, inits):
    x = helper.make_tensor_value_info("x", U8, list(x_shape))
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", U8, None)],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv(c, m, side, group):
    """A QLinearConv of uint8 activations (3 x 3, padding 1; depthwise with group = c), per-channel scales."""
    inits = {"xs": np.float32(0.02), "xz": np.uint8(7), "w": RNG.randint(-128, 128, (m, c // group, 3, 3)).astype(
        np.int8), "ws": (RNG.rand(m) * 0.02 + 0.002).astype(np.float32), "wz": np.zeros(m, np.int8),
        "ys": np.float32(0.05), "yz": np.uint8(120), "b": RNG.randint(-3000, 3000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[1, 1, 1, 1], group=group)
    return _model(node, (1, c, side, side), inits)


def _matmul(rows, k, n):
    inits = {"xs": np.float32(0.03), "xz": np.uint8(9), "w": RNG.randint(-128, 128, (k, n)).astype(np.int8),
             "ws": np.float32(0.01), "wz": np.int8(0), "ys": np.float32(0.2), "yz": np.uint8(100)}
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    return _model(node, (rows, k), inits)


MODELS = {"conv": (_conv(24, 40, 13, 1), (1, 24, 13, 13)), "depthwise": (_conv(32, 32, 15, 32), (1, 32, 15, 15)),
          "matmul": (_matmul(37, 150, 70), (37, 150))}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    folder = tmp_path_factory.mktemp("q8levels")
    lines = ['[package]\nname = "q8levels"\n']
    for name, (model, _) in MODELS.items():
        onnx.save(model, folder / f"{name}.onnx")
        lines.append(f'[kernels.{name}]\nonnx = "{name}.onnx"\n')
    lines.append("[exports]\n" + "".join(f'{n} = "{n}"\n' for n in MODELS))
    (folder / "manifest.toml").write_text("\n".join(lines))
    return folder / "manifest.toml"


def _symbols(path) -> str:
    return subprocess.run(["nm", "-C", str(path)], capture_output=True, text=True, check=True).stdout


def test_each_level_computes_what_onnxruntime_does_with_its_own_tiles(manifest, tmp_path):
    """The portable library built once per cap of the exports' level (levels_CPU_LEVEL_MAX = 0 .. this CPU's): each
    equals onnxruntime bit for bit; the kernel cache then holds the int8u objects alone, the lower levels' of their
    own names and without the tiles above their level."""
    src, build = tmp_path / "project", tmp_path / "build"
    render(manifest, src, progress=lambda s: None)
    kernels = kernel_cache(load_manifest(manifest), TARGETS["host"])
    cmake = cmake_exe()
    x = {name: RNG.randint(0, 256, shape).astype(np.uint8) for name, (_, shape) in MODELS.items()}
    want = {name: ort_oracle.session(manifest.parent / f"{name}.onnx").run(None, {"x": x[name]})[0]
            for name in MODELS}
    for cap in range(X86_64_LEVELS.index(host_level()) + 1):
        prefix = tmp_path / f"level{cap}"
        subprocess.run([cmake, "-S", str(src), "-B", str(build), "-Dq8levels_PYTHON_MODULE=ON",
                        "-Dq8levels_WERROR=ON", f"-Dq8levels_CPU_LEVEL_MAX={cap}",
                        f"-Dq8levels_KERNEL_CACHE={kernels}"], check=True, capture_output=True)
        subprocess.run([cmake, "--build", str(build), "--parallel", "2"], check=True, capture_output=True)
        subprocess.run([cmake, "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
        pkg = Package(prefix)
        for name in MODELS:
            got = np.asarray(getattr(pkg, name)(x[name]))
            assert got.dtype == want[name].dtype and np.array_equal(got, want[name]), (cap, name)
    # (the package's parts from its source: the cache folder is shared with the session's other int8 packages,
    # whose int8_t activations put int8s objects there too)
    parts = kernel_parts((src / "src" / "q8levels.cpp").read_text())
    assert [p for p in parts if p.startswith("int8")] == ["int8u"], parts  # (no int8_t activations: no int8s part)
    objects = {f.name for f in kernels.glob("kernels_*int8*.o")}
    assert {"kernels_x86_64_int8u_own.o", "kernels_x86_64_v3_int8u_own.o", "kernels_x86_64_v4_int8u.o"} <= objects
    baseline, v3, v4 = (_symbols(kernels / f"kernels_{level}.o") for level in (
        "x86_64_int8u_own", "x86_64_v3_int8u_own", "x86_64_v4_int8u"))
    assert "tile_portable" in baseline and "tile_avx2" not in baseline and "tile_vnni" not in baseline
    assert "tile_avx2" in v3 and "tile_vnni" not in v3 and "depthwise_direct" not in v3
    assert "tile_avx2" in v4 and "tile_vnni" in v4 and "depthwise_direct" in v4
