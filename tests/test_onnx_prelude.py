"""The prelude's narrow-format conversions (what ONNX's float16/bfloat16/float8/float4/int4 values
compile to) against ml_dtypes, exhaustively over every bit pattern and over a sweep of floats,
ks::erf against math.erf, and ks::logistic<float> against the exact value."""
from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (installed with onnx) is missing")

from conftest import ROOT  # noqa: E402

FORMATS = {"f16": ("uint16_t", np.float16, 1 << 16), "bf16": ("uint16_t", ml_dtypes.bfloat16, 1 << 16),
           "f8e4m3fn": ("uint8_t", ml_dtypes.float8_e4m3fn, 256),
           "f8e4m3fnuz": ("uint8_t", ml_dtypes.float8_e4m3fnuz, 256),
           "f8e5m2": ("uint8_t", ml_dtypes.float8_e5m2, 256),
           "f8e5m2fnuz": ("uint8_t", ml_dtypes.float8_e5m2fnuz, 256),
           "f4e2m1": ("uint8_t", ml_dtypes.float4_e2m1fn, 16)}


def sweep() -> np.ndarray:
    """Floats around every scale these formats cover: signs, zeros, ties, overflow, subnormals, specials."""
    mags = np.concatenate([np.geomspace(1e-9, 1e6, 3000), np.arange(0, 600, 0.25), [448, 464, 480, 57344, 61440,
                                                                                    65504, 65520, 6.0, 7.0]])
    x = np.concatenate([mags, -mags, [np.inf, -np.inf, np.nan, 0.0, -0.0]]).astype(np.float32)
    return x


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    d = tmp_path_factory.mktemp("narrow")
    floats = sweep()
    (d / "floats.bin").write_bytes(floats.tobytes())
    lines = ['#include "ks/prelude.h"', "#include <cstdio>", "int main() {",
             f"  static float xs[{floats.size}]; FILE* f = std::fopen(\"{d / 'floats.bin'}\", \"rb\");",
             f"  const size_t got = std::fread(xs, 4, {floats.size}, f);", "  std::fclose(f);",
             f"  if (got != {floats.size}) return 1;"]
    for name, (store, _, count) in FORMATS.items():
        lines.append(f"  for (unsigned v = 0; v < {count}u; ++v) {{ "
                     f"float y = ks::from_{name}(static_cast<{store}>(v)); "
                     f"std::printf(\"{name} from %u %a\\n\", v, static_cast<double>(y)); }}")
        lines.append(f"  for (float x : xs) std::printf(\"{name} to %u\\n\", static_cast<unsigned>(ks::to_{name}(x)));")
    lines.append("  for (float x : xs) std::printf(\"erf %a\\n\", static_cast<double>(ks::erf(x)));")
    lines.append("  for (float x : xs) std::printf(\"erfd %a\\n\", ks::erf(static_cast<double>(x)));")
    lines.append("  for (float x : xs) std::printf(\"erfcd %a\\n\", ks::erfc(static_cast<double>(x)));")
    lines.append("  for (float x : xs) std::printf(\"erfc %a\\n\", static_cast<double>(ks::erfc(x)));")
    lines.append("  for (float x : xs) std::printf(\"logistic %a\\n\", static_cast<double>(ks::logistic(x)));")
    lines.append("  return 0; }")
    (d / "t.cpp").write_text("\n".join(lines) + "\n")
    subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-fno-rtti",
                    f"-I{ROOT / 'prelude'}", str(d / "t.cpp"), "-o", str(d / "t")], check=True)
    out = subprocess.run([str(d / "t")], check=True, capture_output=True, text=True).stdout.split("\n")
    table: dict = {}
    for line in out:
        if line:
            key, *rest = line.split(" ")
            table.setdefault((key, rest[0]) if len(rest) > 1 else key, []).append(rest[-1] if len(rest) > 1 else
                                                                                   rest[0])
    return floats, table


@pytest.mark.parametrize("name", FORMATS)
def test_decoding_every_pattern(program, name):
    _, table = program
    store, dtype, count = FORMATS[name]
    bits = np.arange(count, dtype=np.uint16 if store == "uint16_t" else np.uint8)
    with np.errstate(invalid="ignore"):
        want = bits.view(dtype).astype(np.float64)
    got = np.array([float.fromhex(v) for v in table[(name, "from")]])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("name", FORMATS)
def test_encoding_rounds_like_ml_dtypes(program, name):
    floats, table = program
    store, dtype, _ = FORMATS[name]
    got = np.array([int(v) for v in table[(name, "to")]])
    with np.errstate(over="ignore"):
        want = floats.astype(dtype)
    decoded_want = want.astype(np.float64)
    bits = got.astype(np.uint16 if store == "uint16_t" else np.uint8)
    decoded_got = bits.view(dtype).astype(np.float64)
    nan = np.isnan(decoded_want)
    if name == "f4e2m1":  # float4 has no NaN: ml_dtypes maps NaN to some value; ONNX leaves it undefined
        nan = np.isnan(floats)
        np.testing.assert_array_equal(decoded_got[~nan], decoded_want[~nan])
        return
    np.testing.assert_array_equal(np.isnan(decoded_got), nan)
    np.testing.assert_array_equal(decoded_got[~nan], decoded_want[~nan])


def test_erf(program):
    floats, table = program
    ref = np.array([math.erf(float(x)) if not math.isnan(x) else math.nan for x in floats])
    f32 = np.array([float.fromhex(v) for v in table["erf"]])
    f64 = np.array([float.fromhex(v) for v in table["erfd"]])
    ok = ~np.isnan(ref)
    assert np.max(np.abs(f32 - ref)[ok]) < 4e-7
    assert np.max(np.abs(f64 - ref)[ok] / np.maximum(np.abs(ref[ok]), 1e-300)) < 1e-13


def test_erfc_keeps_its_precision_in_the_tail(program):
    """ks::erfc against math.erfc, relative error, down to the subnormals (erfc(26) is 5.7e-296); a float's
    erfc is its double's, rounded."""
    floats, table = program
    ref = np.array([math.erfc(float(x)) if not math.isnan(x) else math.nan for x in floats])
    f64 = np.array([float.fromhex(v) for v in table["erfcd"]])
    f32 = np.array([float.fromhex(v) for v in table["erfc"]])
    ok = ~np.isnan(ref) & (ref > 1e-290)
    assert np.max(np.abs(f64 - ref)[ok] / ref[ok]) < 1e-13
    np.testing.assert_array_equal(f32[ok], ref[ok].astype(np.float32).astype(np.float64))
    assert np.isnan(f64[np.isnan(ref)]).all()


def test_logistic_float(program):
    """ks::logistic<float> (1 / (1 + e^-x), e^-x scaled once: EfficientNet's SiLU epilogues) within 3e-7 of the
    exact value relative where that is a normal float, at most 1.7e-38 where it is subnormal, 0 and 1 at -inf and
    +inf, NaN at NaN."""
    floats, table = program
    got = np.array([float.fromhex(v) for v in table["logistic"]])
    with np.errstate(over="ignore"):
        ref = 1.0 / (1.0 + np.exp(-floats.astype(np.float64)))
    normal = ~np.isnan(ref) & (ref >= np.finfo(np.float32).tiny)
    assert np.max(np.abs(got - ref)[normal] / ref[normal]) < 3e-7
    tiny = ~np.isnan(ref) & ~normal
    assert tiny.sum() > 100 and (got[tiny] >= 0).all() and (got[tiny] <= 1.7e-38).all()
    specials = {x: g for x, g in zip(floats, got) if not np.isfinite(x)}
    assert specials[np.float32(-np.inf)] == 0.0 and specials[np.float32(np.inf)] == 1.0
    assert np.isnan(got[np.isnan(floats)]).all()


def test_a_loop_of_float_erf_calls_no_library_function(tmp_path):
    """ks::erf<float> (ONNX Erf, torch's exact GELU) takes e^-x² from ks::exp, inline: a loop of it vectorizes. With
    std::exp it called libm's expf once per element, and a held-out ConvNeXt-like network spent most of its time
    there (2.2x onnxruntime's time; 0.97x after)."""
    if shutil.which("g++") is None or shutil.which("nm") is None:
        pytest.skip("g++ and nm are needed")
    src = tmp_path / "erf.cpp"
    src.write_text('#include "ks/prelude.h"\n'
                   "void erfs(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = ks::erf(x[i]); }\n")
    obj = tmp_path / "erf.o"
    subprocess.run(["g++", "-std=c++17", "-O3", "-march=x86-64-v3", "-fno-math-errno", "-fno-trapping-math", "-I",
                    str(ROOT / "prelude"), "-c", str(src), "-o", str(obj)], check=True)
    undefined = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
    assert "exp" not in undefined, undefined
